//! COPY and user tables over the real wire: `COPY ... TO STDOUT` in CSV,
//! text and binary for every role (psql's `\copy`, psycopg2, psycopg,
//! asyncpg, pgjdbc), each compared with the same SELECT; user tables a
//! write role makes (CREATE TABLE [AS], INSERT, COPY FROM STDIN, DROP TABLE)
//! that every session sees and a restart keeps, refused to a read role
//! (42501) and never allowed on telemetry tables; and `culprit ingest
//! --table` from the shell.
//!
//! psql and the clients block their thread: the test body runs them on the
//! runtime's own thread (`block_on`), the server on the two workers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use culprit_server::{Role, ServerOptions, Users};
use culprit_store::Store;

use crate::common::{demo_store, repo_root, run, run_ok, start_server, start_server_with};

/// A write user and a read user of the users file, with their passwords.
pub(crate) const WRITER: (&str, &str) = ("writer", "writer-pw");
pub(crate) const READER: (&str, &str) = ("reader", "reader-pw");

/// The victim's culprits, ties broken so that every run lists one order.
const CULPRITS: &str = "SELECT culprit_query, blame_seconds FROM culprits('q-victim') \
     ORDER BY blame_seconds DESC, culprit_kind, culprit_query";

const JAR: &str = "/usr/share/java/postgresql.jar";

/// Serves with a users file: `writer` (role write) and `reader` (role read).
pub(crate) fn team_users() -> ServerOptions {
    let text = format!(
        "{}\n{}\n",
        Users::line(WRITER.0, Role::Write, WRITER.1).unwrap(),
        Users::line(READER.0, Role::Read, READER.1).unwrap()
    );
    ServerOptions {
        users: Some(Users::parse(&text).unwrap()),
        ..Default::default()
    }
}

/// psql as `user` with its password, or (None) as `culprit` on a server
/// without users; errors stop it (exit 1, 3 in a script) and print their
/// SQLSTATE.
pub(crate) fn psql_as(addr: SocketAddr, user: Option<(&str, &str)>, args: &[&str]) -> Output {
    let who = match user {
        Some((name, password)) => format!("user={name} password={password}"),
        None => "user=culprit".to_string(),
    };
    let conn = format!(
        "host={} port={} dbname=culprit {who}",
        addr.ip(),
        addr.port()
    );
    Command::new("psql")
        .arg(conn)
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose"])
        .args(args)
        .output()
        .expect("psql must be installed (apt-get install postgresql-client); .ci/run installs it")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts psql succeeded; its stdout.
pub(crate) fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: psql failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Asserts psql failed with an error whose text holds every one of
/// `needles` (case-insensitive); its stderr.
pub(crate) fn refused(out: &Output, what: &str, needles: &[&str]) -> String {
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "{what}: psql succeeded, it must fail:\nstdout: {}\nstderr: {err}",
        text(&out.stdout)
    );
    for needle in needles {
        assert!(
            err.to_lowercase().contains(&needle.to_lowercase()),
            "{what}: the error lacks {needle:?}:\n{err}"
        );
    }
    err
}

/// Asserts psql printed the command tag `COPY n` (psql prints it after a
/// `\copy`, not after a COPY to its own stdout).
fn assert_copy_tag(stdout: &str, n: usize, what: &str) {
    let tag = format!("COPY {n}");
    assert!(
        stdout.lines().any(|l| l.trim() == tag),
        "{what}: no command tag {tag:?} in psql's output:\n{stdout}"
    );
}

/// A query's rows through `psql -At`, fields split on the unit separator
/// (no value holds one, nor a newline); psql prints NULL as ''.
pub(crate) fn rows(addr: SocketAddr, user: Option<(&str, &str)>, sql: &str) -> Vec<Vec<String>> {
    let out = psql_as(addr, user, &["-At", "-F", "\u{1f}", "-c", sql]);
    ok(&out, sql)
        .lines()
        .map(|l| l.split('\u{1f}').map(str::to_string).collect())
        .collect()
}

/// A count (or another whole number) from a one-row, one-column query.
pub(crate) fn count(addr: SocketAddr, user: Option<(&str, &str)>, sql: &str) -> usize {
    let r = rows(addr, user, sql);
    assert!(
        r.len() == 1 && r[0].len() == 1,
        "{sql}: not one value: {r:?}"
    );
    r[0][0]
        .parse::<usize>()
        .unwrap_or_else(|e| panic!("{sql}: {:?} is not a count: {e}", r[0][0]))
}

fn some(rows: Vec<Vec<String>>) -> Vec<Vec<Option<String>>> {
    rows.into_iter()
        .map(|r| r.into_iter().map(Some).collect())
        .collect()
}

/// A COPY field (None: NULL) holds what psql printed for the same value
/// ('' for NULL); numbers compare as numbers (a float parses to the same
/// f64 whatever its spelling).
fn same_field(want: &str, got: Option<&str>) -> bool {
    match got {
        None => want.is_empty(),
        Some(g) => {
            g == want
                || matches!(
                    (g.parse::<f64>(), want.parse::<f64>()),
                    (Ok(a), Ok(b)) if a == b
                )
        }
    }
}

/// COPY's rows `got` equal the SELECT's `want` (printed by psql), in order.
fn assert_rows(what: &str, want: &[Vec<String>], got: &[Vec<Option<String>>]) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: COPY gave {} rows, the SELECT {}\nCOPY: {got:?}\nSELECT: {want:?}",
        got.len(),
        want.len()
    );
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        let same = w.len() == g.len() && w.iter().zip(g).all(|(w, g)| same_field(w, g.as_deref()));
        assert!(same, "{what}: row {i} differs: COPY {g:?}, SELECT {w:?}");
    }
}

/// PostgreSQL's CSV: a quoted field may hold anything (a quote doubled); an
/// unquoted empty field is NULL.
fn parse_csv(text: &str) -> Vec<Vec<Option<String>>> {
    let mut rows = Vec::new();
    let mut row: Vec<Option<String>> = Vec::new();
    let mut field = String::new();
    let (mut quoted, mut in_quotes) = (false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_quotes {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    field.push('"');
                } else {
                    in_quotes = false;
                }
            } else {
                field.push(c);
            }
        } else if c == '"' {
            in_quotes = true;
            quoted = true;
        } else if c == ',' || c == '\n' {
            row.push(if !quoted && field.is_empty() {
                None
            } else {
                Some(std::mem::take(&mut field))
            });
            quoted = false;
            if c == '\n' {
                rows.push(std::mem::take(&mut row));
            }
        } else if c == '\r' && chars.peek() == Some(&'\n') {
            // CRLF: the \n ends the row.
        } else {
            field.push(c);
        }
    }
    assert!(!in_quotes, "CSV: an unterminated quoted field:\n{text}");
    if quoted || !field.is_empty() || !row.is_empty() {
        row.push(if !quoted && field.is_empty() {
            None
        } else {
            Some(field)
        });
        rows.push(row);
    }
    rows
}

/// One field of PostgreSQL's text format, its backslash escapes undone.
fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('v') => out.push('\u{b}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// PostgreSQL's text format: a line a row, tab-separated, `\N` for NULL.
fn parse_text(text: &str) -> Vec<Vec<Option<String>>> {
    text.lines()
        .map(|l| {
            l.split('\t')
                .map(|f| if f == "\\N" { None } else { Some(unescape(f)) })
                .collect()
        })
        .collect()
}

fn be_i16(b: &[u8], at: &mut usize) -> i16 {
    assert!(
        *at + 2 <= b.len(),
        "binary COPY: cut at byte {} of {}",
        *at,
        b.len()
    );
    let v = i16::from_be_bytes([b[*at], b[*at + 1]]);
    *at += 2;
    v
}

fn be_i32(b: &[u8], at: &mut usize) -> i32 {
    assert!(
        *at + 4 <= b.len(),
        "binary COPY: cut at byte {} of {}",
        *at,
        b.len()
    );
    let v = i32::from_be_bytes([b[*at], b[*at + 1], b[*at + 2], b[*at + 3]]);
    *at += 4;
    v
}

/// PostgreSQL's binary COPY: the signature, flags, the header extension,
/// each tuple (a field count, then each field's length, -1 for NULL, and
/// its bytes), the trailer -1, and nothing after it.
fn parse_binary(b: &[u8]) -> Vec<Vec<Option<Vec<u8>>>> {
    const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
    assert!(
        b.starts_with(SIGNATURE),
        "binary COPY: no PGCOPY signature: {:?}",
        &b[..b.len().min(32)]
    );
    let mut at = SIGNATURE.len();
    let flags = be_i32(b, &mut at);
    assert_eq!(
        flags & (1 << 16),
        0,
        "binary COPY: OIDs flagged ({flags:#x})"
    );
    let extension = be_i32(b, &mut at);
    assert!(extension >= 0, "binary COPY: header extension {extension}");
    at += extension as usize;
    let mut rows = Vec::new();
    loop {
        let fields = be_i16(b, &mut at);
        if fields == -1 {
            break;
        }
        assert!(fields >= 0, "binary COPY: {fields} fields at byte {at}");
        let mut row = Vec::new();
        for _ in 0..fields {
            let len = be_i32(b, &mut at);
            if len == -1 {
                row.push(None);
                continue;
            }
            assert!(
                len >= 0 && at + len as usize <= b.len(),
                "binary COPY: a field of {len} bytes at byte {at} of {}",
                b.len()
            );
            row.push(Some(b[at..at + len as usize].to_vec()));
            at += len as usize;
        }
        rows.push(row);
    }
    assert_eq!(at, b.len(), "binary COPY: bytes after the trailer");
    rows
}

/// `culprit_query` (text) and `blame_seconds` (float8) of a binary COPY of
/// CULPRITS, as text.
fn culprits_from_binary(b: &[u8]) -> Vec<Vec<Option<String>>> {
    parse_binary(b)
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            assert_eq!(
                row.len(),
                2,
                "binary COPY: row {i} has {} fields",
                row.len()
            );
            let query = row[0]
                .as_ref()
                .map(|v| String::from_utf8(v.clone()).expect("culprit_query is UTF-8"));
            let blame = row[1].as_ref().map(|v| {
                let bytes: [u8; 8] = v.as_slice().try_into().unwrap_or_else(|_| {
                    panic!("binary COPY: row {i}: float8 of {} bytes", v.len())
                });
                f64::from_be_bytes(bytes).to_string()
            });
            vec![query, blame]
        })
        .collect()
}

/// Quotes a CSV field the way PostgreSQL does: only when it must.
fn csv_field(s: &str) -> String {
    if s.is_empty() || s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_text(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = header.join(",");
    out.push('\n');
    for r in rows {
        let fields: Vec<String> = r.iter().map(|f| csv_field(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// Runs tests/clients/copy_clients.py's `suite` (extra: USER PASSWORD ROLE or none).
fn copy_py(addr: SocketAddr, suite: &str, login: &[&str]) {
    let script = repo_root().join("tests/clients/copy_clients.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([addr.ip().to_string(), addr.port().to_string()])
        .arg(suite)
        .args(login)
        .output()
        .expect("python3");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    if stderr.contains("ModuleNotFoundError") {
        panic!(
            "copy_clients.py {suite}: the client is not installed (PyPI: psycopg2-binary, psycopg[binary], \
             asyncpg):\n{stderr}"
        );
    }
    assert!(
        out.status.success(),
        "copy_clients.py {suite} {login:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(&format!("done {suite}")),
        "copy_clients.py {suite} {login:?} stopped early:\n{stdout}\n{stderr}"
    );
    eprint!("{stdout}");
}

/// Compiles tests/clients/JdbcCopy.java into `dir`/classes.
fn javac_copy(dir: &Path) -> PathBuf {
    assert!(
        Path::new(JAR).exists(),
        "{JAR} is missing: install libpostgresql-jdbc-java (.ci/run does)"
    );
    let classes = dir.join("classes");
    let out = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .args(["-cp", JAR])
        .arg(repo_root().join("tests/clients/JdbcCopy.java"))
        .output()
        .expect("javac");
    assert!(
        out.status.success(),
        "javac JdbcCopy:\n{}",
        text(&out.stderr)
    );
    classes
}

/// Runs JdbcCopy (extra: USER PASSWORD ROLE or none).
fn jdbc_copy(classes: &Path, addr: SocketAddr, login: &[&str]) {
    let out = Command::new("java")
        .args(["-cp", &format!("{JAR}:{}", classes.display()), "JdbcCopy"])
        .args([addr.ip().to_string(), addr.port().to_string()])
        .args(login)
        .output()
        .expect("java");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("done jdbc-copy"),
        "JdbcCopy {login:?} failed ({}):\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    eprint!("{stdout}");
}

/// psql's `\copy (CULPRITS) TO file` in CSV, text and binary (both
/// spellings) as `user`, each compared with the SELECT.
fn copy_culprits_to_files(addr: SocketAddr, user: Option<(&str, &str)>, dir: &Path) {
    let who = user.map_or("culprit", |u| u.0);
    let want = rows(addr, user, CULPRITS);
    assert!(
        want.len() > 1 && want[0][0] == "q-culprit",
        "{who}: the culprits of q-victim: {want:?}"
    );

    // CSV with a header.
    let file = dir.join(format!("culprits-{who}.csv"));
    let cmd = format!("\\copy ({CULPRITS}) TO '{}' CSV HEADER", file.display());
    let stdout = ok(&psql_as(addr, user, &["-c", &cmd]), &cmd);
    assert_copy_tag(&stdout, want.len(), &cmd);
    let csv = std::fs::read_to_string(&file).unwrap();
    let (header, body) = csv
        .split_once('\n')
        .unwrap_or_else(|| panic!("{cmd}: no header line:\n{csv}"));
    assert_eq!(header, "culprit_query,blame_seconds", "{cmd}:\n{csv}");
    assert_rows(&format!("{who}: {cmd}"), &want, &parse_csv(body));

    // Text (the default format).
    let file = dir.join(format!("culprits-{who}.txt"));
    let cmd = format!("\\copy ({CULPRITS}) TO '{}'", file.display());
    let stdout = ok(&psql_as(addr, user, &["-c", &cmd]), &cmd);
    assert_copy_tag(&stdout, want.len(), &cmd);
    let txt = std::fs::read_to_string(&file).unwrap();
    assert!(
        txt.ends_with('\n'),
        "{cmd}: the last row has no newline:\n{txt}"
    );
    assert_rows(&format!("{who}: {cmd}"), &want, &parse_text(&txt));

    // Binary, in the new and the legacy spelling.
    for (name, opts) in [("binary", "WITH (FORMAT binary)"), ("legacy", "BINARY")] {
        let file = dir.join(format!("culprits-{who}-{name}.bin"));
        let cmd = format!("\\copy ({CULPRITS}) TO '{}' {opts}", file.display());
        let stdout = ok(&psql_as(addr, user, &["-c", &cmd]), &cmd);
        assert_copy_tag(&stdout, want.len(), &cmd);
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            bytes.starts_with(b"PGCOPY\n\xff\r\n\0"),
            "{cmd}: not binary COPY: {:?}",
            &bytes[..bytes.len().min(32)]
        );
        assert_rows(
            &format!("{who}: {cmd}"),
            &want,
            &culprits_from_binary(&bytes),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_stdout_for_every_role() {
    let (tmp, store) = demo_store();
    let (addr, server) = start_server(Store::open(&store).unwrap()).await;

    copy_culprits_to_files(addr, None, tmp.path());

    // A whole telemetry table, to psql's stdout (no tag mixed in).
    let copied = ok(
        &psql_as(addr, None, &["-c", "COPY tasks TO STDOUT"]),
        "COPY tasks TO STDOUT",
    );
    let n = count(addr, None, "SELECT count(*) FROM tasks");
    assert!(n > 50, "tasks: {n}");
    let lines: Vec<&str> = copied.lines().collect();
    assert_eq!(
        lines.len(),
        n,
        "COPY tasks TO STDOUT gave {} lines, count(*) {n}; first lines:\n{}",
        lines.len(),
        lines.iter().take(3).copied().collect::<Vec<_>>().join("\n")
    );
    let columns = count(
        addr,
        None,
        "SELECT count(*) FROM information_schema.columns \
         WHERE table_schema = 'public' AND table_name = 'tasks'",
    );
    assert!(columns > 5, "tasks has {columns} columns");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(
            l.split('\t').count(),
            columns,
            "COPY tasks TO STDOUT: line {} has not {columns} fields: {l:?}",
            i + 1
        );
    }

    // A table with a column list, CSV with a header.
    let sql = "COPY tasks (task_id, host) TO STDOUT WITH (FORMAT csv, HEADER)";
    let copied = ok(&psql_as(addr, None, &["-c", sql]), sql);
    let (header, body) = copied.split_once('\n').unwrap_or_default();
    assert_eq!(header, "task_id,host", "{sql}:\n{copied}");
    let mut got = parse_csv(body);
    got.sort();
    let mut want = rows(addr, None, "SELECT task_id, host FROM tasks");
    want.sort();
    assert_rows(sql, &want, &got);

    // Real clients, as `culprit` of a server without users (read-only).
    for suite in ["psycopg2", "psycopg", "asyncpg"] {
        copy_py(addr, suite, &[]);
    }
    let classes = javac_copy(tmp.path());
    jdbc_copy(&classes, addr, &[]);

    // Every role of a server with users reads with COPY: the reader and the
    // writer with psql; psycopg and pgjdbc as the writer first (they copy
    // rows into teams2 and teams3), then every client as the reader (who
    // reads them and whose COPY FROM is refused).
    server.abort();
    let _ = server.await;
    let (addr, _server) = start_server_with(Store::open(&store).unwrap(), team_users()).await;
    copy_culprits_to_files(addr, Some(READER), tmp.path());
    copy_culprits_to_files(addr, Some(WRITER), tmp.path());
    copy_py(addr, "psycopg", &[WRITER.0, WRITER.1, "write"]);
    jdbc_copy(&classes, addr, &[WRITER.0, WRITER.1, "write"]);
    for suite in ["psycopg2", "psycopg", "asyncpg"] {
        copy_py(addr, suite, &[READER.0, READER.1, "read"]);
    }
    jdbc_copy(&classes, addr, &[READER.0, READER.1, "read"]);
}

/// A team and a cost centre for each user (quotes and commas included, so
/// that CSV quoting is exercised).
fn teams_for(users: &[String]) -> Vec<Vec<String>> {
    users
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let team = match i % 3 {
                0 => format!("team-{u}"),
                1 => format!("the \"{u}\" crew"),
                _ => format!("{u}, and friends"),
            };
            let cost_centre = if i == 0 {
                "Ops, EMEA".to_string()
            } else {
                format!("cc-{}", 100 + i)
            };
            vec![u.clone(), team, cost_centre]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_tables_over_the_wire_survive_a_restart() {
    let (tmp, store) = demo_store();
    let dir = tmp.path();
    let (addr, server) = start_server_with(Store::open(&store).unwrap(), team_users()).await;
    let (w, r) = (Some(WRITER), Some(READER));

    // teams.csv: every user of the workload's queries, with a team.
    let users: Vec<String> = rows(
        addr,
        w,
        r#"SELECT DISTINCT "user" FROM queries WHERE "user" IS NOT NULL ORDER BY 1"#,
    )
    .into_iter()
    .map(|row| row[0].clone())
    .collect();
    assert!(
        users.iter().any(|u| u == "alice") && users.iter().any(|u| u == "mallory"),
        "the users of the demo queries: {users:?}"
    );
    let teams = teams_for(&users);
    let teams_csv = dir.join("teams.csv");
    std::fs::write(
        &teams_csv,
        csv_text(&["user", "team", "cost_centre"], &teams),
    )
    .unwrap();
    let teams_csv = teams_csv.display().to_string();

    let create = r#"CREATE TABLE teams ("user" text, team text, cost_centre text)"#;
    ok(&psql_as(addr, w, &["-c", create]), create);
    refused(
        &psql_as(addr, w, &["-c", create]),
        "CREATE TABLE teams again",
        &["42P07"],
    );
    let cmd = format!("\\copy teams FROM '{teams_csv}' CSV HEADER");
    let stdout = ok(&psql_as(addr, w, &["-c", &cmd]), &cmd);
    assert_copy_tag(&stdout, teams.len(), &cmd);
    let select_teams = "SELECT * FROM teams ORDER BY 1";
    assert_eq!(rows(addr, w, select_teams), teams, "the writer's teams");
    assert_eq!(
        rows(addr, r, select_teams),
        teams,
        "another session (the reader) sees teams"
    );

    // CREATE TABLE AS, INSERT VALUES and INSERT SELECT, DROP TABLE.
    let nq = count(addr, w, "SELECT count(*) FROM queries");
    assert!(nq > 0);
    let sql = "CREATE TABLE t2 AS SELECT query_id FROM queries";
    ok(&psql_as(addr, w, &["-c", sql]), sql);
    assert_eq!(count(addr, w, "SELECT count(*) FROM t2"), nq, "{sql}");
    let sql = "INSERT INTO t2 VALUES ('extra')";
    let stdout = ok(&psql_as(addr, w, &["-c", sql]), sql);
    assert!(stdout.contains("INSERT 0 1"), "{sql}: tag:\n{stdout}");
    assert_eq!(count(addr, w, "SELECT count(*) FROM t2"), nq + 1, "{sql}");
    let sql = "INSERT INTO t2 SELECT query_id FROM queries WHERE query_id = 'q-victim'";
    let stdout = ok(&psql_as(addr, w, &["-c", sql]), sql);
    assert!(stdout.contains("INSERT 0 1"), "{sql}: tag:\n{stdout}");
    assert_eq!(count(addr, w, "SELECT count(*) FROM t2"), nq + 2, "{sql}");
    assert_eq!(
        count(
            addr,
            r,
            "SELECT count(*) FROM t2 WHERE query_id IN ('extra', 'q-victim')"
        ),
        3,
        "t2 as the reader sees it"
    );
    ok(&psql_as(addr, w, &["-c", "DROP TABLE t2"]), "DROP TABLE t2");
    refused(
        &psql_as(addr, w, &["-c", "SELECT count(*) FROM t2"]),
        "t2 after DROP TABLE",
        &["42P01"],
    );
    ok(
        &psql_as(addr, w, &["-c", "DROP TABLE IF EXISTS t2"]),
        "DROP TABLE IF EXISTS t2",
    );

    // A user table joined with the culprits: the culprit's team is first.
    let culprit_user = rows(
        addr,
        r,
        "SELECT \"user\" FROM queries WHERE query_id = 'q-culprit'",
    );
    assert_eq!(
        culprit_user.len(),
        1,
        "the user of q-culprit: {culprit_user:?}"
    );
    let culprit_team = &teams
        .iter()
        .find(|t| t[0] == culprit_user[0][0])
        .unwrap_or_else(|| panic!("{culprit_user:?} is not in teams.csv: {teams:?}"))[1];
    let join = "SELECT t.team, sum(c.blame_seconds) AS blame FROM culprits('q-victim') c \
                JOIN queries q ON q.query_id = c.culprit_query \
                JOIN teams t ON t.\"user\" = q.\"user\" GROUP BY 1 ORDER BY 2 DESC, 1";
    for user in [w, r] {
        let joined = rows(addr, user, join);
        assert!(
            !joined.is_empty() && &joined[0][0] == culprit_team,
            "{user:?}: the culprit's team {culprit_team:?} is not first:\n{joined:?}"
        );
        let blame: f64 = joined[0][1].parse().unwrap();
        assert!(blame > 0.0, "{joined:?}");
        for row in &joined {
            assert!(
                teams.iter().any(|t| t[1] == row[0]),
                "{row:?} is no team of teams.csv"
            );
        }
    }

    // A read role may not write, whatever the statement.
    let cmd = format!("\\copy teams FROM '{teams_csv}' CSV HEADER");
    for sql in [
        cmd.as_str(),
        "CREATE TABLE r1 (x text)",
        "CREATE TABLE r2 AS SELECT 1 AS x",
        "INSERT INTO teams VALUES ('eve', 'intruders', 'cc-0')",
        "DROP TABLE teams",
    ] {
        refused(
            &psql_as(addr, r, &["-c", sql]),
            &format!("the reader: {sql}"),
            &["42501", "read-only"],
        );
    }
    assert_eq!(
        rows(addr, r, select_teams),
        teams,
        "teams after the reader's refusals"
    );

    // Telemetry tables change only through `culprit ingest`.
    let ntasks = count(addr, w, "SELECT count(*) FROM tasks");
    let q_csv = dir.join("queries.csv");
    std::fs::write(&q_csv, "q-new\n").unwrap();
    let copy_queries = format!("\\copy queries (query_id) FROM '{}' CSV", q_csv.display());
    for sql in [
        "INSERT INTO tasks (task_id, query_id, stage_id, host, launch_time, finish_time) \
         VALUES ('t-x', 'q-x', 's-x', 'h-x', now(), now())",
        "DROP TABLE queries",
        copy_queries.as_str(),
    ] {
        refused(
            &psql_as(addr, w, &["-c", sql]),
            &format!("the writer on telemetry: {sql}"),
            &["telemetry"],
        );
    }
    assert_eq!(count(addr, w, "SELECT count(*) FROM tasks"), ntasks);
    assert_eq!(count(addr, w, "SELECT count(*) FROM queries"), nq);

    // COPY FROM in CSV and text; a bad value names its line and stores
    // nothing of its COPY.
    let sql = "CREATE TABLE budgets (team text, amount double precision)";
    ok(&psql_as(addr, w, &["-c", sql]), sql);
    let good = dir.join("good.csv");
    std::fs::write(&good, "etl,100.5\nstorage,20\n").unwrap();
    let cmd = format!("\\copy budgets FROM '{}' CSV", good.display());
    assert_copy_tag(&ok(&psql_as(addr, w, &["-c", &cmd]), &cmd), 2, &cmd);
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "adhoc,1.5\nreports,2\nml,not-a-number\nsearch,4\n").unwrap();
    let cmd = format!("\\copy budgets FROM '{}' WITH (FORMAT csv)", bad.display());
    refused(&psql_as(addr, w, &["-c", &cmd]), &cmd, &["line 3"]);
    assert_eq!(
        count(addr, w, "SELECT count(*) FROM budgets"),
        2,
        "a failed COPY stores nothing"
    );
    let tsv = dir.join("good.tsv");
    std::fs::write(&tsv, "ml\t7.25\nsearch\t\\N\n").unwrap();
    let cmd = format!("\\copy budgets FROM '{}'", tsv.display());
    assert_copy_tag(&ok(&psql_as(addr, w, &["-c", &cmd]), &cmd), 2, &cmd);
    assert_eq!(count(addr, w, "SELECT count(*) FROM budgets"), 4);
    assert_eq!(
        count(addr, w, "SELECT count(*) FROM budgets WHERE amount IS NULL"),
        1,
        "text format \\N is NULL"
    );
    let sum = rows(addr, w, "SELECT sum(amount) FROM budgets");
    assert_eq!(sum[0][0].parse::<f64>().ok(), Some(127.75), "{sum:?}");

    // A restart on the same store keeps the user tables, not the dropped one.
    server.abort();
    let _ = server.await;
    let (addr, _server) = start_server_with(Store::open(&store).unwrap(), team_users()).await;
    assert_eq!(rows(addr, r, select_teams), teams, "teams after a restart");
    assert_eq!(
        count(addr, r, "SELECT count(*) FROM budgets"),
        4,
        "budgets after a restart"
    );
    refused(
        &psql_as(addr, r, &["-c", "SELECT count(*) FROM t2"]),
        "t2 after a restart",
        &["42P01"],
    );
    assert_eq!(count(addr, r, "SELECT count(*) FROM tasks"), ntasks);

    let dt = ok(&psql_as(addr, r, &["-c", "\\dt"]), "\\dt");
    let listed: Vec<String> = dt
        .lines()
        .filter_map(|l| l.split('|').nth(1))
        .map(|name| name.trim().to_string())
        .collect();
    for t in ["teams", "budgets", "tasks", "queries"] {
        assert!(listed.iter().any(|n| n == t), "\\dt lacks {t}:\n{dt}");
    }
    assert!(
        !listed.iter().any(|n| n == "t2"),
        "\\dt lists the dropped t2:\n{dt}"
    );

    let d = ok(&psql_as(addr, r, &["-c", "\\d teams"]), "\\d teams");
    assert!(d.contains("Table \"public.teams\""), "\\d teams:\n{d}");
    let columns: Vec<String> = d
        .lines()
        .filter(|l| l.contains('|'))
        .filter_map(|l| l.split('|').next())
        .map(|c| c.trim().to_string())
        .collect();
    for c in ["user", "team", "cost_centre"] {
        assert!(
            columns.iter().any(|n| n == c),
            "\\d teams lacks column {c}:\n{d}"
        );
    }

    // The reader copies a user table out.
    let out_csv = dir.join("teams-out.csv");
    let cmd = format!("\\copy teams TO '{}' CSV HEADER", out_csv.display());
    let stdout = ok(&psql_as(addr, r, &["-c", &cmd]), &cmd);
    assert_copy_tag(&stdout, teams.len(), &cmd);
    let copied = std::fs::read_to_string(&out_csv).unwrap();
    let (header, body) = copied.split_once('\n').unwrap_or_default();
    assert_eq!(header, "user,team,cost_centre", "{cmd}:\n{copied}");
    let mut got = parse_csv(body);
    got.sort();
    assert_eq!(got, some(teams.clone()), "{cmd}:\n{copied}");
}

/// The rows of teams (ordered by user) and sum(seats), through a fresh
/// server on the store.
async fn teams_now(store: &str) -> (Vec<Vec<String>>, f64) {
    let (addr, server) = start_server(Store::open(store).unwrap()).await;
    let teams = rows(
        addr,
        None,
        r#"SELECT "user", team, cost_centre, seats FROM teams ORDER BY 1"#,
    );
    let sum = rows(addr, None, "SELECT sum(seats) FROM teams");
    server.abort();
    let _ = server.await;
    let seats = sum[0][0]
        .parse::<f64>()
        .unwrap_or_else(|e| panic!("sum(seats) {sum:?}: {e}"));
    (teams, seats)
}

fn assert_teams(what: &str, got: &(Vec<Vec<String>>, f64), want: &[Vec<String>]) {
    let mut want = want.to_vec();
    want.sort();
    assert_rows(what, &want, &some(got.0.clone()));
    let seats: f64 = want.iter().map(|r| r[3].parse::<f64>().unwrap()).sum();
    assert_eq!(got.1, seats, "{what}: sum(seats) (a number, inferred)");
}

fn strings(rows: &[[&str; 4]]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| r.iter().map(|s| s.to_string()).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_table_from_the_shell() {
    let (tmp, store) = demo_store();
    let dir = tmp.path();
    let ntasks = {
        let (addr, server) = start_server(Store::open(&store).unwrap()).await;
        let n = count(addr, None, "SELECT count(*) FROM tasks");
        server.abort();
        let _ = server.await;
        n
    };

    let csv_rows = strings(&[
        ["alice", "dashboards", "cc-100", "3"],
        ["mallory", "etl", "Ops, EMEA", "12"],
        ["bob", "reports", "cc-102", "5"],
    ]);
    let csv = dir.join("teams.csv");
    std::fs::write(
        &csv,
        csv_text(&["user", "team", "cost_centre", "seats"], &csv_rows),
    )
    .unwrap();
    let jsonl_rows = strings(&[
        ["carol", "ml", "cc-103", "7"],
        ["dave", "search", "cc-104", "2"],
    ]);
    let jsonl = dir.join("teams.jsonl");
    let lines: Vec<String> = jsonl_rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "user": r[0],
                "team": r[1],
                "cost_centre": r[2],
                "seats": r[3].parse::<i64>().unwrap(),
            })
            .to_string()
        })
        .collect();
    std::fs::write(&jsonl, lines.join("\n") + "\n").unwrap();
    let (csv_s, jsonl_s) = (csv.display().to_string(), jsonl.display().to_string());

    run_ok(&["ingest", "--store", &store, "--table", "teams", &csv_s]);
    assert_teams("ingest teams.csv", &teams_now(&store).await, &csv_rows);

    run_ok(&["ingest", "--store", &store, "--table", "teams", &jsonl_s]);
    let both: Vec<Vec<String>> = csv_rows.iter().chain(&jsonl_rows).cloned().collect();
    assert_teams("then teams.jsonl appends", &teams_now(&store).await, &both);

    run_ok(&[
        "ingest",
        "--store",
        &store,
        "--table",
        "teams",
        "--replace",
        &csv_s,
    ]);
    assert_teams(
        "then --replace teams.csv",
        &teams_now(&store).await,
        &csv_rows,
    );

    // A bad file (an extra field on line 4) fails naming it and stores
    // nothing, appended or replacing.
    let bad = dir.join("bad-teams.csv");
    std::fs::write(
        &bad,
        "user,team,cost_centre,seats\neve,x,cc-1,1\nfrank,y,cc-2,2\ngrace,z,cc-3,3,EXTRA\n",
    )
    .unwrap();
    let bad_s = bad.display().to_string();
    for replace in [false, true] {
        let mut args = vec!["ingest", "--store", store.as_str(), "--table", "teams"];
        if replace {
            args.push("--replace");
        }
        args.push(&bad_s);
        let out = run(&args);
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success(),
            "culprit {args:?} accepted a bad file:\n{}\n{stderr}",
            text(&out.stdout)
        );
        assert!(
            stderr.contains("bad-teams.csv"),
            "culprit {args:?}: stderr does not name the file:\n{stderr}"
        );
        assert_teams(
            &format!("after the bad file (replace: {replace})"),
            &teams_now(&store).await,
            &csv_rows,
        );
    }

    // A CSV with its columns in another order appends by the header's
    // names; a header naming an unknown column is refused, naming it.
    let reordered = dir.join("reordered.csv");
    std::fs::write(&reordered, "seats,team,cost_centre,user\n4,ops,cc-9,zed\n").unwrap();
    run_ok(&[
        "ingest",
        "--store",
        &store,
        "--table",
        "teams",
        reordered.to_str().unwrap(),
    ]);
    let with_zed: Vec<Vec<String>> = csv_rows
        .iter()
        .cloned()
        .chain(strings(&[["zed", "ops", "cc-9", "4"]]))
        .collect();
    assert_teams(
        "a reordered CSV appends by name",
        &teams_now(&store).await,
        &with_zed,
    );
    let unknown = dir.join("unknown.csv");
    std::fs::write(&unknown, "user,team,budget\nyan,x,1\n").unwrap();
    let out = run(&[
        "ingest",
        "--store",
        &store,
        "--table",
        "teams",
        unknown.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("unknown.csv") && stderr.contains("budget"),
        "an unknown column: {stderr}"
    );
    // --schema is for a new table (or with --replace), never silently ignored.
    let out = run(&[
        "ingest",
        "--store",
        &store,
        "--table",
        "teams",
        "--schema",
        "user text",
        &csv_s,
    ]);
    assert!(
        !out.status.success(),
        "--schema on an existing table was accepted"
    );
    assert_teams(
        "after the refused loads",
        &teams_now(&store).await,
        &with_zed,
    );

    // Parquet, and a given schema: the generator's own queries file as a
    // user table has the rows of the telemetry table loaded from it.
    let parquet = dir.join("in/queries.parquet");
    let stdout = run_ok(&[
        "ingest",
        "--store",
        &store,
        "--table",
        "query_copy",
        parquet.to_str().unwrap(),
    ]);
    assert!(stdout.contains("created the table"), "{stdout}");
    let typed = dir.join("typed.csv");
    std::fs::write(&typed, "query_id,seconds\nq-victim,1.5\nq-culprit,2\n").unwrap();
    run_ok(&[
        "ingest",
        "--store",
        &store,
        "--table",
        "slas",
        "--schema",
        "query_id text, seconds double precision",
        typed.to_str().unwrap(),
    ]);

    // The telemetry is untouched.
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    assert_eq!(count(addr, None, "SELECT count(*) FROM tasks"), ntasks);
    let mismatch = count(
        addr,
        None,
        "SELECT count(*) FROM (SELECT query_id, \"user\", pool FROM query_copy \
         EXCEPT SELECT query_id, \"user\", pool FROM queries) d",
    );
    assert_eq!(mismatch, 0, "query_copy rows that are not in queries");
    assert_eq!(
        count(addr, None, "SELECT count(*) FROM query_copy"),
        count(addr, None, "SELECT count(*) FROM queries")
    );
    assert_eq!(
        rows(
            addr,
            None,
            "SELECT sum(seconds) FROM slas WHERE seconds > 1"
        ),
        vec![vec!["3.5".to_string()]]
    );
}
