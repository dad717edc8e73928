//! One statement policy on every path: each role's allowed and refused
//! statements through the simple protocol, the extended protocol without
//! parameters and the extended protocol with parameters (the path whose
//! statements are planned when they run), against the real server; and the
//! floor under it: a session reaches no file but its store's, read-only,
//! even through `culprit sql`, which has no gate.

use std::net::SocketAddr;
use std::path::Path;

use culprit_server::{Role, ServerOptions};
use culprit_store::Store;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common::{code, connect, demo_store, run, start_server_with, users};

async fn login(addr: SocketAddr, user: &str, password: &str) -> Client {
    crate::common::login(addr, user, password)
        .await
        .unwrap_or_else(|e| panic!("{user} logs in: {e}"))
}

#[derive(Clone, Copy, Debug)]
enum Path3 {
    Simple,
    Extended,
    ExtendedWithParameter,
}

const PATHS: [Path3; 3] = [Path3::Simple, Path3::Extended, Path3::ExtendedWithParameter];

/// Runs `literal` (simple and extended) or `with_param` bound to `value`
/// (extended with a parameter) and returns the first column of the rows, or
/// the SQLSTATE.
async fn run_on(
    c: &Client,
    path: Path3,
    literal: &str,
    with_param: &str,
    value: &str,
) -> Result<Vec<String>, String> {
    match path {
        Path3::Simple => c
            .simple_query(literal)
            .await
            .map(|msgs| {
                msgs.into_iter()
                    .filter_map(|m| match m {
                        SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("").to_string()),
                        _ => None,
                    })
                    .collect()
            })
            .map_err(|e| code(&e)),
        Path3::Extended => c
            .query(literal, &[])
            .await
            .map(|rows| rows.iter().map(first_text).collect())
            .map_err(|e| code(&e)),
        Path3::ExtendedWithParameter => c
            .query(with_param, &[&value])
            .await
            .map(|rows| rows.iter().map(first_text).collect())
            .map_err(|e| code(&e)),
    }
}

fn first_text(row: &tokio_postgres::Row) -> String {
    if row.is_empty() {
        return String::new();
    }
    row.try_get::<_, String>(0)
        .or_else(|_| row.try_get::<_, i64>(0).map(|n| n.to_string()))
        .unwrap_or_default()
}

/// The statements each role may and may not run, on each path, with what
/// each leaves behind checked afterwards.
async fn check_role(c: &Client, who: &str, role: Role, files: &Path) {
    for path in PATHS {
        let tag = format!("{who}_{path:?}").to_lowercase();
        let ctx = format!("{who} by {path:?}");

        // A query: every role, every path; its value is checked against the
        // demo workload (every task has a host).
        let n = run_on(
            c,
            path,
            "SELECT count(*) FROM tasks WHERE host <> 'no-such-host'",
            "SELECT count(*) FROM tasks WHERE host <> $1",
            "no-such-host",
        )
        .await
        .unwrap_or_else(|e| panic!("{ctx}: a query is refused: {e}"));
        let total = run_on(c, Path3::Simple, "SELECT count(*) FROM tasks", "", "")
            .await
            .unwrap();
        assert_eq!(n, total, "{ctx}");
        assert!(total[0].parse::<i64>().unwrap() > 0, "{ctx}");

        // CREATE TABLE ... AS and CREATE VIEW: the write role only.
        let table = format!("t_{tag}");
        let made = run_on(
            c,
            path,
            &format!("CREATE TABLE {table} AS SELECT 'v1' AS x"),
            &format!("CREATE TABLE {table} AS SELECT $1::text AS x"),
            "v1",
        )
        .await;
        let view = format!("v_{tag}");
        let viewed = run_on(
            c,
            path,
            &format!("CREATE VIEW {view} AS SELECT host FROM tasks WHERE host <> 'no-such-host'"),
            &format!("CREATE VIEW {view} AS SELECT host FROM tasks WHERE host <> $1"),
            "no-such-host",
        )
        .await;
        let table_now = run_on(c, Path3::Simple, &format!("SELECT x FROM {table}"), "", "").await;
        let view_now = run_on(
            c,
            Path3::Simple,
            &format!("SELECT count(*) FROM {view}"),
            "",
            "",
        )
        .await;
        match role {
            Role::Read => {
                assert_eq!(made, Err("42501".into()), "{ctx}: CREATE TABLE");
                assert_eq!(viewed, Err("42501".into()), "{ctx}: CREATE VIEW");
                assert_eq!(table_now, Err("42P01".into()), "{ctx}: no table afterwards");
                assert_eq!(view_now, Err("42P01".into()), "{ctx}: no view afterwards");
            }
            Role::Write => {
                made.unwrap_or_else(|e| panic!("{ctx}: CREATE TABLE: {e}"));
                viewed.unwrap_or_else(|e| panic!("{ctx}: CREATE VIEW: {e}"));
                assert_eq!(table_now, Ok(vec!["v1".to_string()]), "{ctx}");
                assert_eq!(view_now, Ok(total.clone()), "{ctx}");
            }
        }

        // SELECT ... INTO creates a table too.
        let into = format!("i_{tag}");
        let r = run_on(
            c,
            path,
            &format!("SELECT host INTO {into} FROM tasks WHERE host <> 'no-such-host'"),
            &format!("SELECT host INTO {into} FROM tasks WHERE host <> $1"),
            "no-such-host",
        )
        .await;
        if role == Role::Read {
            assert_eq!(r, Err("42501".into()), "{ctx}: SELECT INTO");
        }

        // No role reads or writes the server's files.
        let out = files.join(format!("{tag}.csv"));
        let r = run_on(
            c,
            path,
            &format!("COPY (SELECT 'x' AS a) TO '{}'", out.display()),
            &format!("COPY (SELECT $1 AS a) TO '{}'", out.display()),
            "x",
        )
        .await;
        assert_eq!(r, Err("42501".into()), "{ctx}: COPY TO a file");
        assert!(!out.exists(), "{ctx}: {} was written", out.display());
        let secret = files.join("secret.csv");
        let r = run_on(
            c,
            path,
            &format!(
                "CREATE EXTERNAL TABLE e_{tag} STORED AS PARQUET LOCATION '{}'",
                secret.display()
            ),
            &format!(
                "CREATE EXTERNAL TABLE e_{tag} STORED AS PARQUET LOCATION '{}'",
                secret.display()
            ),
            "unused",
        )
        .await;
        assert_eq!(r, Err("42501".into()), "{ctx}: CREATE EXTERNAL TABLE");

        // The server's memory pool and spill folder are not the session's.
        for set in [
            "SET datafusion.runtime.memory_limit = '64G'",
            "SET datafusion.runtime.temp_directory = '/tmp/culprit-spill'",
        ] {
            let r = run_on(c, path, set, set, "unused").await;
            assert_eq!(r, Err("42501".into()), "{ctx}: {set}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_on_every_statement_path() {
    let (tmp, store) = demo_store();
    let files = tmp.path().join("server-files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("secret.csv"), "a\nsecret\n").unwrap();

    let (addr, _h) = start_server_with(
        Store::open(&store).unwrap(),
        ServerOptions {
            users: Some(users()),
            ..Default::default()
        },
    )
    .await;
    check_role(
        &login(addr, "alice", "alice-pw").await,
        "alice",
        Role::Read,
        &files,
    )
    .await;
    check_role(
        &login(addr, "bob", "bob-pw").await,
        "bob",
        Role::Write,
        &files,
    )
    .await;

    // Without users (loopback only), everyone is read-only.
    let (addr, _h2) =
        start_server_with(Store::open(&store).unwrap(), ServerOptions::default()).await;
    check_role(&connect(addr).await, "anyone", Role::Read, &files).await;

    // Nothing was written next to the store, nor into it.
    let mut names: Vec<_> = std::fs::read_dir(&files)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["secret.csv"]);
}

/// Wire parameters that used to panic or wrap: `$0`, a statement timeout
/// beyond any instant. Each is refused with its SQLSTATE and the
/// connection (and server) go on.
#[tokio::test]
async fn bad_wire_parameters_are_refused() {
    let (_tmp, store) = demo_store();
    let (addr, _h) =
        start_server_with(Store::open(&store).unwrap(), ServerOptions::default()).await;
    let c = connect(addr).await;
    for sql in ["SELECT $0", "SELECT * FROM culprits($0)", "SELECT $65536"] {
        let e = c.query(sql, &[]).await.unwrap_err();
        assert_eq!(code(&e), "42P02", "{sql}: {e:?}");
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(code(&e), "42P02", "{sql}: {e:?}");
    }
    for sql in [
        "SET statement_timeout = '18446744073709551615'",
        "SET statement_timeout = '18446744073709551s'",
        "SET statement_timeout = '307445734561825861min'",
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(code(&e), "22023", "{sql}: {e:?}");
        // The statement after it runs under no broken deadline.
        let n: i64 = c
            .query_one("SELECT count(*) FROM tasks", &[])
            .await
            .unwrap()
            .get(0);
        assert!(n > 0);
    }
    // Several statements in one prepared statement: refused as PostgreSQL does.
    let e = c.prepare("SELECT 1; SELECT 2").await.unwrap_err();
    assert_eq!(code(&e), "42601", "{e:?}");
    let n: i64 = connect(addr)
        .await
        .query_one("SELECT count(*) FROM tasks", &[])
        .await
        .unwrap()
        .get(0);
    assert!(n > 0, "the server is still up");
}

/// `culprit sql` has no gate (its user owns the machine), but its session
/// still reaches no file outside the store and writes none, the store's
/// own included.
#[test]
fn a_session_reaches_no_file_but_its_store() {
    let (tmp, store) = demo_store();
    let outside = tmp.path().join("outside.csv");
    std::fs::write(tmp.path().join("secret.csv"), "a\nhush-4711\n").unwrap();
    let inside = Path::new(&store).join("evil.csv");
    let before = tree(Path::new(&store));
    for (sql, file) in [
        (
            format!("COPY (SELECT 'x' AS a) TO '{}'", outside.display()),
            Some(&outside),
        ),
        (
            format!("COPY (SELECT 'x' AS a) TO '{}'", inside.display()),
            Some(&inside),
        ),
        (
            format!(
                "CREATE EXTERNAL TABLE e STORED AS CSV LOCATION '{}'",
                tmp.path().join("secret.csv").display()
            ),
            None,
        ),
        (
            format!(
                "SELECT * FROM '{}'",
                tmp.path().join("secret.csv").display()
            ),
            None,
        ),
    ] {
        let out = run(&["sql", "--store", &store, &sql]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sql}: {stderr}");
        assert!(!stderr.contains("panicked"), "{sql}: {stderr}");
        assert!(!stderr.contains("hush-4711"), "{sql}: {stderr}");
        if let Some(f) = file {
            assert!(!f.exists(), "{sql}: {} was written", f.display());
        }
    }
    assert_eq!(tree(Path::new(&store)), before, "the store is unchanged");
}

fn tree(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path().display().to_string(), meta.len()));
            }
        }
    }
    out.sort();
    out
}
