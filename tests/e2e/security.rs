//! The server on a shared network: SCRAM-SHA-256 against a users file, TLS
//! (psql with sslmode), read-only roles, refusal of non-loopback addresses
//! without authentication, and the limits (connections, statement timeout
//! over execution, cancel requests, per-query memory), each with its
//! SQLSTATE.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use culprit_server::{Role, ServerOptions, TlsFiles, Users};
use culprit_store::Store;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

use crate::common::{code, connect, demo_store, login, start_server_with, users};

/// A query that would run for about ten minutes (2e11 rows filtered, in
/// batches, so it can be stopped between them).
const SLOW: &str = "SELECT count(*) FROM range(200000000000) WHERE (value * 7919) % 10007 = 5";

/// Far below SLOW's run time, far above a stop under load (the load test
/// may share the two cores).
const STOPS_WITHIN: Duration = Duration::from_secs(30);

/// The real server on a free loopback port over the demo workload.
async fn serve_demo(
    opts: ServerOptions,
) -> (tempfile::TempDir, SocketAddr, tokio::task::JoinHandle<()>) {
    let (tmp, store) = demo_store();
    let (addr, handle) = start_server_with(Store::open(&store).unwrap(), opts).await;
    (tmp, addr, handle)
}

#[tokio::test]
async fn scram_passwords_and_roles() {
    let (_tmp, addr, _h) = serve_demo(ServerOptions {
        users: Some(users()),
        ..Default::default()
    })
    .await;

    let alice = login(addr, "alice", "alice-pw")
        .await
        .expect("alice logs in");
    let n: i64 = alice
        .query_one("SELECT count(*) FROM culprits('q-victim')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(n > 0);
    // Read-only: no DDL / DML through the wire.
    let e = alice
        .batch_execute("CREATE VIEW v AS SELECT 1")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42501", "{e:?}");
    let e = alice
        .query("CREATE TABLE t AS SELECT 1 AS x", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42501", "{e:?}");
    // A write role may create session objects (its own session only).
    let bob = login(addr, "bob", "bob-pw").await.expect("bob logs in");
    bob.batch_execute("CREATE VIEW v AS SELECT 1 AS x")
        .await
        .unwrap();
    let e = alice.query("SELECT * FROM v", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42P01", "sessions are per connection: {e:?}");

    for (user, pw) in [("alice", "wrong"), ("mallory", "alice-pw")] {
        let Err(e) = login(addr, user, pw).await else {
            panic!("refused")
        };
        assert_eq!(code(&e), "28P01", "{user}: {e:?}");
    }
}

#[tokio::test]
async fn no_auth_is_loopback_only_and_read_only() {
    let (_tmp, store) = demo_store();
    let store = Store::open(&store).unwrap();
    let err =
        culprit_server::Server::bind_with(store.clone(), "0.0.0.0:0", ServerOptions::default())
            .await
            .err()
            .expect("refused");
    assert!(err.to_string().contains("without authentication"), "{err}");
    // With users, any address is allowed.
    culprit_server::Server::bind_with(
        store.clone(),
        "0.0.0.0:0",
        ServerOptions {
            users: Some(users()),
            ..Default::default()
        },
    )
    .await
    .expect("bind with users");

    let (addr, _h) = start_server_with(store, ServerOptions::default()).await;
    let c = connect(addr).await;
    let e = c.batch_execute("DROP VIEW task_runs").await.unwrap_err();
    assert_eq!(code(&e), "42501", "{e:?}");
    c.query_one("SELECT count(*) FROM task_runs", &[])
        .await
        .unwrap();
}

fn self_signed(dir: &Path) -> TlsFiles {
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    crate::common::self_signed_pem(&cert, &key, "/CN=localhost");
    TlsFiles { cert, key }
}

// psql blocks its thread: the server needs another one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_psql_and_tls_required() {
    let (tmp, store) = demo_store();
    let store = Store::open(&store).unwrap();
    let tls = self_signed(tmp.path());
    let (addr, _h) = start_server_with(
        store,
        ServerOptions {
            tls: Some(tls),
            tls_required: true,
            users: Some(users()),
            ..Default::default()
        },
    )
    .await;
    let url = |mode: &str| {
        format!(
            "postgresql://alice:alice-pw@{}:{}/culprit?sslmode={mode}",
            addr.ip(),
            addr.port()
        )
    };
    let out = std::process::Command::new("psql")
        .args([&url("require"), "-At", "-c", "SELECT count(*) FROM queries"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "6");
    let out = std::process::Command::new("psql")
        .args([&url("disable"), "-At", "-c", "SELECT 1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("requires TLS"), "{err}");
}

#[tokio::test]
async fn connection_limit_then_room_again() {
    let (_tmp, addr, _h) = serve_demo(ServerOptions {
        max_connections: 2,
        ..Default::default()
    })
    .await;
    let a = connect(addr).await;
    let b = connect(addr).await;
    let Err(e) = login(addr, "x", "y").await else {
        panic!("third refused")
    };
    assert_eq!(code(&e), "53300", "{e:?}");
    drop(a);
    // The slot comes back once the first connection is gone.
    let start = Instant::now();
    loop {
        match login(addr, "x", "y").await {
            Ok(c) => {
                c.query_one("SELECT 1", &[]).await.unwrap();
                break;
            }
            Err(e) => {
                assert_eq!(code(&e), "53300");
                assert!(start.elapsed() < Duration::from_secs(10), "no slot freed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    b.query_one("SELECT 1", &[]).await.unwrap();
}

#[tokio::test]
async fn statement_timeout_and_cancel_cover_execution() {
    let (_tmp, addr, _h) = serve_demo(ServerOptions {
        statement_timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    })
    .await;
    let c = connect(addr).await;
    // The client's own setting wins over the server's 60 s.
    c.batch_execute("SET statement_timeout = '300ms'")
        .await
        .unwrap();
    let t = Instant::now();
    let e = c.query_one(SLOW, &[]).await.unwrap_err();
    assert_eq!(code(&e), "57014", "{e:?}");
    assert!(t.elapsed() < STOPS_WITHIN, "took {:?}", t.elapsed());
    let e = c.batch_execute(SLOW).await.unwrap_err();
    assert_eq!(code(&e), "57014", "simple protocol: {e:?}");
    c.batch_execute("SET statement_timeout = 0").await.unwrap();
    c.query_one("SELECT 1", &[]).await.unwrap();

    // A cancel request from the client stops a running statement.
    let token = c.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        token.cancel_query(NoTls).await.unwrap();
    });
    let t = Instant::now();
    let e = c.query_one(SLOW, &[]).await.unwrap_err();
    canceller.await.unwrap();
    assert_eq!(code(&e), "57014", "{e:?}");
    assert!(e.as_db_error().unwrap().message().contains("user request"));
    assert!(t.elapsed() < STOPS_WITHIN, "took {:?}", t.elapsed());
    // The connection is still usable.
    let one: i64 = c.query_one("SELECT 1::bigint", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

/// Serves the demo with a per-query memory limit of `bytes` and runs `sql`,
/// which must fail with 53200: the store, the address, the connection
/// (still open) and the error.
async fn over_memory(
    bytes: usize,
    sql: &str,
) -> (
    tempfile::TempDir,
    SocketAddr,
    tokio_postgres::Client,
    tokio_postgres::Error,
) {
    let (tmp, addr, _server) = serve_demo(ServerOptions {
        query_memory: Some(bytes),
        ..Default::default()
    })
    .await;
    let c = connect(addr).await;
    let e = c.query(sql, &[]).await.unwrap_err();
    assert_eq!(code(&e), "53200", "{e:?}");
    (tmp, addr, c, e)
}

/// A culprit table function's result is charged to the query's memory
/// pool too: over the limit, 53200 naming the function; small queries go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_memory_limit_covers_table_functions() {
    let (_tmp, _addr, c, e) = over_memory(
        8 << 10,
        "SELECT count(*) FROM blame(NULL, 'victim_stages=all')",
    )
    .await;
    let msg = e.as_db_error().unwrap().message().to_string();
    assert!(msg.contains("blame()") && msg.contains("rows"), "{msg}");
    let n: i64 = c
        .query_one("SELECT count(*) FROM queries", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 6);
}

#[tokio::test]
async fn query_memory_limit_fails_the_query_not_the_server() {
    let (_tmp, addr, c, e) = over_memory(
        2 << 20,
        "SELECT value FROM range(5000000) ORDER BY value DESC",
    )
    .await;
    assert_eq!(e.as_db_error().unwrap().code(), &SqlState::OUT_OF_MEMORY);
    // The server and the connection go on.
    let n: i64 = c
        .query_one("SELECT count(*) FROM culprits('q-victim')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(n > 0);
    connect(addr)
        .await
        .query_one("SELECT 1", &[])
        .await
        .unwrap();
}

/// `culprit user add` writes a hashed line (never the password), mode 600,
/// and `culprit serve --users` accepts it.
#[test]
fn user_add_writes_hashed_secrets() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("users");
    let out = crate::common::culprit()
        .args(["user", "add", "--users"])
        .arg(&file)
        .args(["--role", "write", "carol"])
        .env("CULPRIT_PASSWORD", "carol-secret")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("carol:write:scram-sha-256:4096:"),
        "{text}"
    );
    assert!(!text.contains("carol-secret"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(Users::load(&file).unwrap().role("carol"), Some(Role::Write));
}
