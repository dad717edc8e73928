//! What BI tools send when they browse (DBeaver and Metabase through
//! pgjdbc, Superset through SQLAlchemy on psycopg2, psql's `\df`), through
//! the real server: the statements that failed or brought the server
//! down, kept as regressions.

use culprit_store::Store;

use crate::common::{demo_store, psql, start_server};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `body` with `i`, SQLAlchemy's inspector over the server on
/// `driver` (psycopg2 or psycopg); its standard output.
async fn inspect(addr: std::net::SocketAddr, driver: &str, body: &str) -> String {
    python(
        addr,
        &format!(
            "import sqlalchemy as sa\n\
             e = sa.create_engine(f'postgresql+{driver}://culprit@{{HOST}}:{{PORT}}/culprit')\n\
             i = sa.inspect(e)\n\
             {body}"
        ),
    )
    .await
}

/// DBeaver's role list read `pg_catalog.pg_roles`, whose provider called
/// itself until the stack overflowed and the whole server aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_pg_roles_does_not_bring_the_server_down() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    for sql in [
        "SELECT rolname FROM pg_catalog.pg_roles",
        // DBeaver's
        "SELECT a.oid,a.*,pd.description FROM pg_catalog.pg_roles a left join pg_catalog.pg_shdescription pd on a.oid = pd.objoid ORDER BY a.rolname",
    ] {
        let out = psql(addr, &["-X", "-At", "-c", sql]);
        assert!(out.status.success(), "{sql}: {}", text(&out.stderr));
    }
    // Still serving, on a new connection.
    let out = psql(addr, &["-X", "-At", "-c", "SELECT count(*) FROM queries"]);
    assert_eq!(text(&out.stdout).trim(), "6", "{}", text(&out.stderr));
}

/// `\df culprits` (psql's own catalog query, with `-E` to see it) lists
/// culprit's function with its arguments and its result columns, which
/// come from the function's code; `\df` alone lists every culprit
/// function in schema public.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_df_lists_culprits_functions() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    let out = psql(addr, &["-X", "-At", "-F", "\u{1f}", "-c", "\\df culprits"]);
    let listed = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let row: Vec<&str> = listed.trim().split('\u{1f}').collect();
    assert_eq!(row.len(), 5, "{listed}");
    assert_eq!(row[..2], ["public", "culprits"]);
    // The result's columns are those the function returns.
    for column in [
        "victim_query text",
        "culprit_kind text",
        "blame_seconds double precision",
        "deep_overlap_seconds double precision",
    ] {
        assert!(row[2].contains(column), "{column} in {}", row[2]);
    }
    assert!(row[2].starts_with("TABLE("), "{}", row[2]);
    assert!(row[3].starts_with("victim [, from [, to]]"), "{}", row[3]);
    assert_eq!(row[4], "func");

    // Every culprit function, and no other, in schema public.
    let out = psql(addr, &["-X", "-At", "-F", "\u{1f}", "-c", "\\df"]);
    let names: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split('\u{1f}').nth(1).unwrap_or_default().to_string())
        .collect();
    for f in [
        "blame",
        "culprits",
        "culprits_series",
        "aggressive_queries_series",
        "victims",
        "critical_path",
        "what_if",
        "ratp",
        "blame_beta",
    ] {
        assert!(names.iter().any(|n| n == f), "\\df lacks {f}: {names:?}");
    }
    let agg = text(&psql(addr, &["-X", "-At", "-c", "\\df blame_beta"]).stdout);
    assert!(agg.trim().ends_with("|agg"), "{agg}");
    // pgjdbc's getFunctions and DBeaver read pg_proc directly.
    let out = psql(
        addr,
        &[
            "-X",
            "-At",
            "-F",
            "|",
            "-c",
            "SELECT p.proname, p.proretset, p.proargnames FROM pg_catalog.pg_proc p \
             JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'public' AND p.proname = 'critical_path'",
        ],
    );
    let row = text(&out.stdout);
    assert!(
        row.starts_with("critical_path|t|{query,query_id,position,stage_id"),
        "{row} {}",
        text(&out.stderr)
    );
}

/// Superset's first call, SQLAlchemy's `get_schema_names` on psycopg2,
/// sends `NOT LIKE 'pg/_' || '%' ESCAPE '/'`, which DataFusion refused
/// ("LIKE does not support escape_char other than the backslash").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superset_lists_the_schemas_through_psycopg2() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    // The statement as SQLAlchemy 2 sends it, then through the inspector.
    let out = psql(
        addr,
        &[
            "-X",
            "-At",
            "-c",
            "SELECT pg_catalog.pg_namespace.nspname FROM pg_catalog.pg_namespace \
             WHERE pg_catalog.pg_namespace.nspname NOT LIKE 'pg/_' || '%' ESCAPE '/' \
             AND pg_catalog.pg_namespace.nspname != 'information_schema' ORDER BY 1",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let schemas = text(&out.stdout);
    assert_eq!(
        schemas.lines().collect::<Vec<_>>(),
        ["cron", "public", "reports"],
        "{schemas}"
    );
    // The escape is honoured: `_` is a literal underscore, not any
    // character ('pg_catalog' starts with 'pg_', 'pgx' does not).
    let out = psql(
        addr,
        &[
            "-X",
            "-At",
            "-c",
            "SELECT 'pg_catalog' LIKE 'pg/_' || '%' ESCAPE '/', 'pgxcatalog' LIKE 'pg/_' || '%' ESCAPE '/', \
             'a\\b' LIKE 'a\\b' ESCAPE '/' FROM pg_catalog.pg_namespace LIMIT 1",
        ],
    );
    assert_eq!(text(&out.stdout).trim(), "t|f|t", "{}", text(&out.stderr));

    let listed = inspect(addr, "psycopg2", "print(sorted(i.get_schema_names()))").await;
    for schema in ["'cron'", "'public'", "'reports'"] {
        assert!(listed.contains(schema), "{schema} in {listed}");
    }
    assert!(!listed.contains("'pg_"), "{listed}");
}

/// Superset's table page reflects keys and indexes through SQLAlchemy's
/// inspector. On both drivers they failed: `pg_index.indkey` was text, the
/// query pairs `unnest(indkey)` with `generate_subscripts(indkey, 1)`
/// (missing), and index reflection selects `pg_class.reloptions`. culprit's
/// tables have no keys, indexes or constraints: PostgreSQL's answers are
/// empty, and the columns (22 in `tasks`, interchange.md) still come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlalchemy_reflects_keys_and_indexes_on_both_drivers() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    for driver in ["psycopg2", "psycopg"] {
        let got = inspect(
            addr,
            driver,
            "print(i.get_pk_constraint('tasks'))\n\
             print(i.get_indexes('tasks'), i.get_unique_constraints('tasks'), \
             i.get_foreign_keys('tasks'), i.get_check_constraints('tasks'))\n\
             print(len(i.get_columns('tasks')))",
        )
        .await;
        assert_eq!(
            got.lines().collect::<Vec<_>>(),
            [
                "{'name': None, 'constrained_columns': []}",
                "[] [] [] []",
                "22"
            ],
            "SQLAlchemy on {driver}"
        );
    }
}

/// Connection pools and pgjdbc send `DISCARD ALL` when a connection is
/// given back; it was refused (0A000). It closes the cursors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_all_closes_the_cursors() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    let out = psql(
        addr,
        &[
            "-X",
            "-At",
            "-c",
            "DECLARE c CURSOR WITH HOLD FOR SELECT query_id FROM queries ORDER BY 1",
            "-c",
            "FETCH 2 FROM c",
            "-c",
            "DISCARD PLANS",
            "-c",
            "FETCH 1 FROM c",
            "-c",
            "DISCARD ALL",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        [
            "DECLARE CURSOR",
            "q-001",
            "q-002",
            "DISCARD PLANS",
            "q-003",
            "DISCARD ALL"
        ],
    );
    // After DISCARD ALL the cursor is gone (same connection: one psql).
    let out = psql(
        addr,
        &[
            "-X",
            "-At",
            "-c",
            "DECLARE d CURSOR WITH HOLD FOR SELECT 1",
            "-c",
            "DISCARD ALL",
            "-c",
            "FETCH 1 FROM d",
        ],
    );
    assert!(!out.status.success(), "{}", text(&out.stdout));
}

/// pgjdbc's `getImportedKeys`, `getExportedKeys` and `getIndexInfo` read
/// `max_index_keys` from `pg_settings` ("Unable to determine a value for
/// MaxIndexKeys due to missing system catalog data" without it); its
/// `getFunctionColumns` reads the column `proargnames` by name, which the
/// pgcli rule renamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_settings_and_pg_proc_columns_as_pgjdbc_reads_them() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    let out = psql(
        addr,
        &[
            "-X",
            "-At",
            "-c",
            "SELECT setting FROM pg_catalog.pg_settings WHERE name='max_index_keys'",
            "-c",
            "SELECT current_setting('max_index_keys'), current_setting('server_version_num')",
            "-c",
            "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'server_version_num'",
        ],
    );
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["32", "32|160000", "160000"],
        "{}",
        text(&out.stderr)
    );
    let out = psql(
        addr,
        &[
            "-X",
            "-A",
            "-c",
            "SELECT p.proname, p.proargnames, p.proargmodes FROM pg_catalog.pg_proc p WHERE p.proname = 'critical_path'",
        ],
    );
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(
        lines[0],
        "proname|proargnames|proargmodes",
        "{}",
        text(&out.stderr)
    );
    assert!(
        lines[1].starts_with("critical_path|{query,query_id,position,"),
        "{lines:?}"
    );
    assert!(lines[1].ends_with("|{i,t,t,t,t,t,t,t,t}"), "{lines:?}");
}

/// Runs a Python `script` (with `HOST` and `PORT` set to the server's);
/// its standard output.
async fn python(addr: std::net::SocketAddr, script: &str) -> String {
    let script = format!("HOST, PORT = '{}', {}\n{script}\n", addr.ip(), addr.port());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", &script])
            .output()
            .expect("python3")
    })
    .await
    .unwrap();
    assert!(out.status.success(), "python: {}", text(&out.stderr));
    text(&out.stdout)
}

/// psycopg 3's server-side cursors declare through the extended protocol
/// (with a bound parameter) and describe the cursor as a portal: both
/// failed ("Placeholder '$1' was not provided", "Portal not found").
/// psycopg2's `scroll()` sends MOVE, which did not parse. Expected values
/// from the demo input: q-victim has 16 tasks; six queries, q-001 first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_cursors_of_psycopg_and_psycopg2() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    let got = python(
        addr,
        "import psycopg, psycopg2\n\
         with psycopg.connect(host=HOST, port=PORT, user='culprit', dbname='culprit') as c:\n\
         \x20   with c.cursor(name='c3') as cur:\n\
         \x20       cur.execute('SELECT task_id FROM tasks WHERE query_id = %s ORDER BY 1', ['q-victim'])\n\
         \x20       first = cur.fetchmany(5)\n\
         \x20       rest = cur.fetchall()\n\
         \x20       print(len(first), len(rest), cur.description[0].name)\n\
         c = psycopg2.connect(host=HOST, port=PORT, user='culprit', dbname='culprit')\n\
         cur = c.cursor('c2', scrollable=True)\n\
         cur.execute('SELECT query_id FROM queries ORDER BY 1')\n\
         a = cur.fetchmany(3)\n\
         cur.scroll(0, 'absolute')\n\
         b = cur.fetchone()\n\
         cur.scroll(-1)\n\
         print(a[-1][0], b[0], cur.fetchone()[0])\n\
         cur.close(); c.commit()",
    )
    .await;
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        ["5 11 task_id", "q-003 q-001 q-001"]
    );
}

/// Superset's schema list on psycopg 3 binds the LIKE prefix as a value
/// (the ESCAPE '/' rewrite only knew literals), and its view definition
/// called `pg_get_viewdef`, which did not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superset_schemas_and_view_definitions_on_both_drivers() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    for driver in ["psycopg2", "psycopg"] {
        let got = inspect(
            addr,
            driver,
            "print(i.get_schema_names())\n\
             print(i.get_view_names())\n\
             print(i.get_view_definition('task_runs').split()[:3])",
        )
        .await;
        assert_eq!(
            got.lines().collect::<Vec<_>>(),
            [
                "['cron', 'public', 'reports']",
                "['task_runs']",
                "['SELECT', 'task_id,', 'query_id,']"
            ],
            "SQLAlchemy on {driver}"
        );
    }
}

/// `pg_stat_activity` did not exist (DBeaver's session manager, Superset's
/// "stop query" read it). It lists each connection with its pid (the one
/// `pg_backend_pid()` answers there), application and state; a session
/// ended by `pg_terminate_backend` gets `57P01` at its next statement and
/// leaves the list; an unknown pid is `false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_stat_activity_lists_and_ends_sessions() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    let got = python(
        addr,
        "import psycopg2\n\
         a = psycopg2.connect(host=HOST, port=PORT, user='culprit', dbname='culprit', application_name='superset')\n\
         b = psycopg2.connect(host=HOST, port=PORT, user='culprit', dbname='culprit')\n\
         b.autocommit = True\n\
         ca, cb = a.cursor(), b.cursor()\n\
         ca.execute('SELECT pg_backend_pid()'); pid = ca.fetchone()[0]\n\
         a.commit()\n\
         cb.execute('SELECT application_name, state, usename, datname FROM pg_stat_activity WHERE pid = %s', (pid,))\n\
         print(cb.fetchall())\n\
         cb.execute('SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = pg_backend_pid() AND state = %s', ('active',))\n\
         print(cb.fetchall())\n\
         cb.execute('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s', (pid,))\n\
         print(cb.fetchall())\n\
         try:\n\
         \x20   ca.execute('SELECT 1')\n\
         \x20   print('still open')\n\
         except psycopg2.Error as e:\n\
         \x20   print(e.pgcode)\n\
         cb.execute('SELECT count(*) FROM pg_stat_activity WHERE pid = %s', (pid,))\n\
         print(cb.fetchall())\n\
         cb.execute('SELECT pg_cancel_backend(2000000000)')\n\
         print(cb.fetchall())",
    )
    .await;
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        [
            "[('superset', 'idle', 'culprit', 'culprit')]",
            "[(1,)]",
            "[(True,)]",
            "57P01",
            "[(0,)]",
            "[(False,)]"
        ]
    );
}

/// A user signals only its own sessions: alice (read) may not cancel or
/// terminate bob's (42501), and bob's session keeps running; alice may end
/// her own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_signalled_by_their_own_user_only() {
    use crate::common::{code, login, users};
    let (_tmp, store) = demo_store();
    let opts = culprit_server::ServerOptions {
        users: Some(users()),
        ..Default::default()
    };
    let (addr, _server) =
        crate::common::start_server_with(Store::open(&store).unwrap(), opts).await;
    let alice = login(addr, "alice", "alice-pw").await.unwrap();
    let alice2 = login(addr, "alice", "alice-pw").await.unwrap();
    let bob = login(addr, "bob", "bob-pw").await.unwrap();
    let bob_pid: i32 = bob
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let alice2_pid: i32 = alice2
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    for f in ["pg_cancel_backend", "pg_terminate_backend"] {
        let e = alice
            .query_one(&format!("SELECT {f}({bob_pid})"), &[])
            .await
            .unwrap_err();
        assert_eq!(code(&e), "42501", "{f} of bob's session by alice: {e}");
    }
    let users: Vec<String> = alice
        .query(
            &format!(
                "SELECT usename FROM pg_stat_activity WHERE pid IN ({bob_pid}, {alice2_pid}) ORDER BY usename"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(users, ["alice", "bob"]);
    let ended: bool = alice
        .query_one(&format!("SELECT pg_terminate_backend({alice2_pid})"), &[])
        .await
        .unwrap()
        .get(0);
    assert!(ended);
    let e = alice2.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(code(&e), "57P01", "{e}");
    let one: i64 = bob.query_one("SELECT 1::bigint", &[]).await.unwrap().get(0);
    assert_eq!(one, 1, "bob's session still runs");
}

/// The privilege functions, `pg_roles` and `pg_class.relacl` tell what the
/// gate lets each role do (docs/clients.md): everyone reads; a `write` user
/// also inserts into user tables; nobody writes telemetry. Each answer is
/// then tried for real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileges_answer_by_the_users_role() {
    use crate::common::{code, login, users};
    let (_tmp, store) = demo_store();
    let opts = culprit_server::ServerOptions {
        users: Some(users()),
        ..Default::default()
    };
    let (addr, _server) =
        crate::common::start_server_with(Store::open(&store).unwrap(), opts).await;
    let alice = login(addr, "alice", "alice-pw").await.unwrap(); // read
    let bob = login(addr, "bob", "bob-pw").await.unwrap(); // write
    bob.simple_query("CREATE TABLE owners (query_id text, team text)")
        .await
        .unwrap();
    let ask = |sql: &'static str| {
        let (alice, bob) = (&alice, &bob);
        async move {
            let a: bool = alice.query_one(sql, &[]).await.unwrap().get(0);
            let b: bool = bob.query_one(sql, &[]).await.unwrap().get(0);
            (a, b)
        }
    };
    for (sql, want) in [
        (
            "SELECT has_table_privilege('tasks', 'SELECT')",
            (true, true),
        ),
        (
            "SELECT has_table_privilege('public.tasks', 'INSERT')",
            (false, false),
        ),
        (
            "SELECT has_table_privilege('owners', 'INSERT')",
            (false, true),
        ),
        (
            "SELECT has_table_privilege('owners', 'UPDATE, INSERT')",
            (false, true),
        ),
        (
            "SELECT has_table_privilege('owners', 'INSERT WITH GRANT OPTION')",
            (false, false),
        ),
        (
            "SELECT has_table_privilege('alice', 'owners', 'INSERT')",
            (false, false),
        ),
        (
            "SELECT has_table_privilege('bob', 'owners', 'INSERT')",
            (true, true),
        ),
        (
            "SELECT has_any_column_privilege('owners', 'SELECT')",
            (true, true),
        ),
        (
            "SELECT has_column_privilege('owners', 'team', 'INSERT')",
            (false, true),
        ),
        (
            "SELECT has_schema_privilege('public', 'CREATE')",
            (false, true),
        ),
        (
            "SELECT has_schema_privilege('pg_catalog', 'USAGE')",
            (true, true),
        ),
        (
            "SELECT has_database_privilege('culprit', 'CONNECT')",
            (true, true),
        ),
    ] {
        assert_eq!(ask(sql).await, want, "{sql} (alice, bob)");
    }
    // What they said, tried.
    let e = alice
        .simple_query("INSERT INTO owners VALUES ('q1', 'ads')")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42501", "{e}");
    bob.simple_query("INSERT INTO owners VALUES ('q1', 'ads')")
        .await
        .unwrap();
    assert!(bob
        .simple_query("INSERT INTO tasks SELECT * FROM tasks LIMIT 0")
        .await
        .is_err());
    // Errors as PostgreSQL's.
    for (sql, want) in [
        ("SELECT has_table_privilege('no_such', 'SELECT')", "42P01"),
        ("SELECT has_table_privilege('tasks', 'FLY')", "22023"),
        (
            "SELECT has_table_privilege('carol', 'tasks', 'SELECT')",
            "42704",
        ),
        ("SELECT has_schema_privilege('nowhere', 'USAGE')", "3F000"),
    ] {
        let e = alice.query_one(sql, &[]).await.unwrap_err();
        assert_eq!(code(&e), want, "{sql}: {e}");
    }
    // pg_roles lists the owner and the users file; relations are the owner's.
    let roles: Vec<(String, bool)> = alice
        .query(
            "SELECT rolname, rolcanlogin FROM pg_roles ORDER BY oid",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let want = [("culprit", false), ("alice", true), ("bob", true)];
    assert_eq!(
        roles,
        want.map(|(n, l)| (n.to_string(), l)).to_vec(),
        "pg_roles"
    );
    let acl = |table: &'static str| {
        let alice = &alice;
        async move {
            let row = alice
                .query_one(
                    "SELECT array_to_string(c.relacl, ' '), r.rolname FROM pg_class c \
                     JOIN pg_roles r ON c.relowner = r.oid WHERE c.relname = $1",
                    &[&table],
                )
                .await
                .unwrap();
            (row.get::<_, String>(0), row.get::<_, String>(1))
        }
    };
    assert_eq!(acl("tasks").await, ("=r/culprit".into(), "culprit".into()));
    assert_eq!(
        acl("owners").await,
        ("=r/culprit bob=aD/culprit".into(), "culprit".into())
    );
}

/// Unnamed result columns have PostgreSQL's names (pandas keys frames by
/// them, BI tools show them as headers): `count(*)` was `count(*)`, `1` was
/// `Int64(1)`, and `SELECT current_user, session_user` failed with a
/// duplicate name. The same through pandas on psycopg2, and for the columns
/// `CREATE TABLE AS` defines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_columns_are_named_as_postgresql_names_them() {
    use crate::common::{login, users};
    let (_tmp, store) = demo_store();
    let opts = culprit_server::ServerOptions {
        users: Some(users()),
        ..Default::default()
    };
    let (addr, _server) =
        crate::common::start_server_with(Store::open(&store).unwrap(), opts).await;
    let bob = login(addr, "bob", "bob-pw").await.unwrap();
    let names = |sql: &'static str| {
        let bob = &bob;
        async move {
            let st = bob
                .prepare(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            st.columns()
                .iter()
                .map(|c| c.name().to_string())
                .collect::<Vec<_>>()
        }
    };
    for (sql, want) in [
        (
            "SELECT count(*), 1, 'a'::text, max(cpu_seconds)::int FROM tasks",
            vec!["count", "?column?", "text", "max"],
        ),
        ("SELECT query_id, count(*) AS n FROM tasks GROUP BY 1", vec!["query_id", "n"]),
        (
            "SELECT CASE WHEN true THEN 1 END, coalesce(NULL, 2), now()::date",
            vec!["case", "coalesce", "now"],
        ),
        (
            "SELECT current_user, session_user",
            vec!["session_user", "session_user()"],
        ),
        (
            "SELECT victim_query, sum(blame_seconds) FROM culprits('q-victim') GROUP BY 1 ORDER BY sum(blame_seconds)",
            vec!["victim_query", "sum"],
        ),
        ("SELECT 1, 2", vec!["?column?", "Int64(2)"]),
    ] {
        assert_eq!(names(sql).await, want, "{sql}");
    }
    bob.simple_query("CREATE TABLE per_query AS SELECT query_id, count(*) FROM tasks GROUP BY 1")
        .await
        .unwrap();
    assert_eq!(
        names("SELECT * FROM per_query").await,
        ["query_id", "count"]
    );
    let got = python(
        addr,
        "import pandas, psycopg2, warnings\n\
         warnings.simplefilter('ignore')\n\
         c = psycopg2.connect(host=HOST, port=PORT, user='alice', password='alice-pw', dbname='culprit')\n\
         df = pandas.read_sql(\"SELECT query_id, count(*) FROM tasks WHERE query_id = 'q-victim' GROUP BY 1\", c)\n\
         print(list(df.columns), int(df['count'][0]))",
    )
    .await;
    // q-victim has 16 tasks in the demo input.
    assert_eq!(got.trim(), "['query_id', 'count'] 16");
}
