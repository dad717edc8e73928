use std::io::{BufRead, BufReader};
use std::process::Stdio;

use culprit_store::Store;

use crate::common::{connect, culprit, demo_store, psql, start_server};

/// The real server on port 0, queried by tokio-postgres: simple and extended
/// protocol, a WHERE and a JOIN, and errors with meaningful SQLSTATEs.
#[tokio::test]
async fn tokio_postgres_queries_and_errors() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    let client = connect(addr).await;

    // Simple protocol.
    let rows = client
        .simple_query("SELECT count(*) AS n FROM tasks WHERE query_id = 'q-victim'")
        .await
        .unwrap();
    let n: i64 = match &rows[1] {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).unwrap().parse().unwrap(),
        other => panic!("expected a row, got {other:?}"),
    };
    assert_eq!(n, 16); // 8 + 4 + 4 tasks on 4 hosts

    // Extended protocol with a parameter, and a JOIN.
    let rows = client
        .query(
            "SELECT q.user, count(*) AS tasks FROM tasks t JOIN queries q ON t.query_id = q.query_id \
             WHERE q.pool = $1 GROUP BY q.user ORDER BY q.user",
            &[&"etl"],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let user: String = rows[0].get(0);
    let tasks: i64 = rows[0].get(1);
    assert_eq!((user.as_str(), tasks), ("mallory", 32));

    // Timestamps arrive as timestamps.
    let row = client
        .query_one("SELECT min(launch_time) FROM tasks", &[])
        .await
        .unwrap();
    let t: std::time::SystemTime = row.get(0);
    assert!(t > std::time::UNIX_EPOCH);

    // The UDFs over the wire: method.md section 12, example 1.
    let row = client
        .query_one("SELECT slowdown(ratp_max(1.0, 30.0), 210.0)", &[])
        .await
        .unwrap();
    let s: f64 = row.get(0);
    assert!((s - 6.0).abs() < 1e-9);

    for (sql, code) in [
        ("SELECT * FROM no_such_table", "42P01"),
        ("SELEC 1", "42601"),
        ("SELECT no_such_column FROM tasks", "42703"),
        ("SELECT no_such_function(1)", "42883"),
        (
            "SELECT * FROM blame('q-victim', 'victim_stages=sideways')",
            "22023",
        ),
        ("SELECT * FROM critical_path('no-such-query')", "22023"),
    ] {
        let err = client.simple_query(sql).await.unwrap_err();
        let db = err.as_db_error().unwrap_or_else(|| panic!("{sql}: {err}"));
        assert_eq!(db.code().code(), code, "{sql}: {}", db.message());
    }
    // The connection survives errors.
    assert!(client.simple_query("SELECT 1").await.is_ok());
}

/// The server sees data ingested while it runs.
#[tokio::test]
async fn server_sees_new_data_without_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let store_path = tmp.path().join("store");
    let store = Store::open(store_path.to_str().unwrap()).unwrap();
    let (addr, _server) = start_server(store).await;
    let client = connect(addr).await;
    let n: i64 = client
        .query_one("SELECT count(*) FROM tasks", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);

    let data = tmp.path().join("in");
    crate::common::generate(&data, "parquet");
    crate::common::run_ok(&[
        "ingest",
        "--store",
        store_path.to_str().unwrap(),
        data.to_str().unwrap(),
    ]);
    let n: i64 = client
        .query_one("SELECT count(*) FROM tasks", &[])
        .await
        .unwrap()
        .get(0);
    assert!(n > 50, "{n}");
}

/// psql: `\dt`, `\d tasks`, a SELECT with a WHERE and a JOIN, and an error.
#[tokio::test]
async fn psql_describes_and_queries() {
    let (_tmp, store) = demo_store();
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    let addr2 = addr;
    let out = tokio::task::spawn_blocking(move || psql(addr2, &["-c", "\\dt"]))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for t in ["queries", "stages", "tasks", "task_windows", "host_windows"] {
        assert!(text.contains(t), "\\dt lacks {t}:\n{text}");
    }

    let out = tokio::task::spawn_blocking(move || psql(addr, &["-c", "\\d tasks"]))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("launch_time") && text.contains("timestamp"),
        "{text}"
    );
    assert!(text.contains("cpu_seconds"), "{text}");

    let sql =
        "SELECT q.user, count(*) AS n FROM tasks t JOIN queries q ON t.query_id = q.query_id \
               WHERE t.host = 'host-0' GROUP BY q.user ORDER BY q.user";
    let out = tokio::task::spawn_blocking(move || psql(addr, &["-A", "-t", "-c", sql]))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let users: Vec<&str> = text.lines().map(|l| l.split('|').next().unwrap()).collect();
    assert!(
        users.contains(&"alice") && users.contains(&"mallory"),
        "{text}"
    );

    let out = tokio::task::spawn_blocking(move || {
        psql(
            addr,
            &["-v", "VERBOSITY=verbose", "-c", "SELECT * FROM nope"],
        )
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("42P01"), "{err}");
}

/// `culprit demo` prints a psql line that works and lists rows; Ctrl-C stops
/// the server cleanly.
#[test]
fn demo_prints_a_working_psql_line() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let mut child = culprit()
        .args([
            "demo",
            "--store",
            store.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(line.starts_with("psql "), "no psql line: {line:?}");
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("{} -X -A -t", line.trim())])
        .output()
        .expect("psql must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("query|q-culprit|mallory|etl|"),
        "the culprit is not first:\n{text}"
    );

    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "demo did not stop cleanly: {status}");
}
