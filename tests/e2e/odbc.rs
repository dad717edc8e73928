//! psqlODBC, the path Excel, Power BI and Tableau take:
//! tests/clients/odbc.py drives Debian's driver ("PostgreSQL Unicode",
//! odbc-postgresql) through pyodbc and unixODBC's `isql` against the real
//! server over the demo workload: connections in both commit modes, the
//! catalog calls (tables, columns, keys, statistics, procedures), `?`
//! parameters, `UseDeclareFetch` cursors. Every value is checked against
//! the generated input files, read by the script itself. Each check runs in
//! a child process (the driver crashes on some server errors) and goes
//! through a wire log, so a failure names the server's error. `.ci/run`
//! installs odbc-postgresql, unixodbc and pyodbc; a missing one fails the
//! test.

use std::process::Command;

use culprit_store::Store;

use crate::common::{generate, repo_root, run_ok, start_server};

// The client blocks its thread: the server needs its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psqlodbc_through_pyodbc_and_isql() {
    // The demo store (seed 42, the defaults), from CSV input the script
    // reads back with Python's own csv module.
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    generate(&input, "csv");
    let store = tmp.path().join("store");
    let store = store.to_str().unwrap();
    run_ok(&["ingest", "--store", store, input.to_str().unwrap()]);
    let (addr, _server) = start_server(Store::open(store).unwrap()).await;

    let script = repo_root().join("tests/clients/odbc.py");
    let out = tokio::task::spawn_blocking(move || {
        // The user every client test logs in as; the server asks no password.
        Command::new("python3")
            .arg(&script)
            .arg(addr.ip().to_string())
            .arg(addr.port().to_string())
            .args(["culprit", ""])
            .arg("--input")
            .arg(&input)
            .output()
            .expect("python3")
    })
    .await
    .expect("odbc.py thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert_ne!(
        out.status.code(),
        Some(2),
        "psqlODBC is not usable here (.ci/run installs odbc-postgresql unixodbc from Debian, \
         pyodbc from PyPI):\n{stdout}\n{stderr}"
    );
    assert!(
        out.status.success(),
        "odbc.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("ok "))
            && !stdout.lines().any(|l| l.starts_with("FAIL")),
        "{stdout}\n{stderr}"
    );
}
