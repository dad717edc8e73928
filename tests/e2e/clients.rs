//! The compatibility suite: real clients against the real server on a free
//! port, over the demo workload. `.ci/run` installs them (PyPI: psycopg,
//! asyncpg, SQLAlchemy, pandas, pgcli; Debian: libpostgresql-jdbc-java);
//! a missing client fails the test with what to install.

use std::net::SocketAddr;
use std::process::Command;

use culprit_store::Store;

use crate::common::{demo_store, psql, psql17, psql_with, repo_root, run_pgjdbc, start_server};

fn python_suite(addr: SocketAddr, suite: &str) {
    let script = repo_root().join("tests/clients/clients.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([&addr.ip().to_string(), &addr.port().to_string(), suite])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("ModuleNotFoundError") {
        panic!(
            "{suite}: the client is not installed (.ci/run installs psycopg[binary] asyncpg \
             sqlalchemy pandas pgcli from PyPI):\n{stderr}"
        );
    }
    assert!(out.status.success(), "{suite}:\n{stdout}\n{stderr}");
    eprint!("{stdout}");
}

// The clients block their threads: the server needs its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients() {
    let (_tmp, store) = demo_store();
    let (addr, _h) = start_server(Store::open(&store).unwrap()).await;
    for suite in [
        "psycopg",
        "asyncpg",
        "sqlalchemy",
        "pgcli",
        "grafana",
        "grafana_dashboard",
    ] {
        tokio::task::spawn_blocking(move || python_suite(addr, suite))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc() {
    let (tmp, store) = demo_store();
    let (addr, _h) = start_server(Store::open(&store).unwrap()).await;
    let out = run_pgjdbc(tmp.path(), "Jdbc", addr).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("ok  jdbc").count(), 5, "{stdout}");
}

/// psql's meta-commands `\df`, `\x` and `\d+` (`\dt` and `\d` are in
/// server.rs), and `\bind` with psql 17 (psql 15 of Debian 12 has none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_meta_commands() {
    let (_tmp, store) = demo_store();
    let (addr, _h) = start_server(Store::open(&store).unwrap()).await;
    let out = tokio::task::spawn_blocking(move || {
        let d = psql(addr, &["-c", "\\df"]);
        let x = psql(
            addr,
            &[
                "-x",
                "-c",
                "SELECT culprit_query, blame_seconds FROM culprits('q-victim') LIMIT 1",
            ],
        );
        let plus = psql(addr, &["-c", "\\d+ tasks"]);
        let p17 = psql17();
        let plus17 = psql_with(&p17, addr, &["-c", "\\d+ tasks"]);
        // A query with `\\bind` is a script (psql -c takes one or the other).
        let script = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            script.path(),
            "SELECT culprit_query, blame_seconds FROM culprits($1) ORDER BY blame_seconds DESC \\bind 'q-victim' \\g\n",
        )
        .unwrap();
        let bind = psql_with(&p17, addr, &["-f", script.path().to_str().unwrap()]);
        (d, x, plus, plus17, bind)
    })
    .await
    .unwrap();
    let (d, x, plus, plus17, bind) = out;
    for (name, o) in [("psql 15 \\d+", &plus), ("psql 17 \\d+", &plus17)] {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            text.contains("Table \"public.tasks\"")
                && text.contains("Storage")
                && text.contains("launch_time")
                && text.contains("timestamp with time zone"),
            "{name}: {text}"
        );
    }
    let text = String::from_utf8_lossy(&bind.stdout);
    assert!(
        bind.status.success(),
        "\\bind: {}",
        String::from_utf8_lossy(&bind.stderr)
    );
    let first = text.lines().nth(2).unwrap_or_default();
    assert!(first.contains("q-culprit"), "\\bind: {text}");
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    assert!(text.contains("List of functions"), "{text}");
    let text = String::from_utf8_lossy(&x.stdout);
    assert!(x.status.success(), "{}", String::from_utf8_lossy(&x.stderr));
    assert!(
        text.contains("-[ RECORD 1 ]") && text.contains("culprit_query | q-culprit"),
        "{text}"
    );
}
