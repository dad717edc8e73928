//! pgjdbc's DatabaseMetaData, the path DBeaver and Metabase take to browse a
//! database: tests/clients/JdbcMeta.java against the real server over the
//! demo workload checks tables, columns, keys, indexes, functions, types and
//! DBeaver's and Metabase's own catalog queries (Debian:
//! libpostgresql-jdbc-java and a JDK; `.ci/run` installs them).

use culprit_store::Store;

use crate::common::{demo_store, run_pgjdbc, start_server};

// The client blocks its thread: the server needs its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgjdbc_database_metadata_browses_culprit() {
    let (tmp, store) = demo_store();
    let (addr, _h) = start_server(Store::open(&store).unwrap()).await;
    let out = run_pgjdbc(tmp.path(), "JdbcMeta", addr).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "JdbcMeta failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("summary: ") && !stdout.lines().any(|l| l.starts_with("FAIL")),
        "{stdout}\n{stderr}"
    );
}
