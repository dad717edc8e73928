//! Runs the sqllogictest files of `sql/`: every file in-process, and the
//! files with a `# pgwire` header line also through the real server (and
//! `# pgwire only` files, the clients' introspection SQL, only there). A file
//! runs against a store holding the simulated workload (seed 42), or the
//! folder its `# data: <dir>` header line names (relative to the repository).

use std::net::SocketAddr;

use async_trait::async_trait;
use culprit_store::Store;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::SessionContext;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

use crate::common::{demo_store, repo_root, start_server};

#[derive(Debug)]
struct SltError(String);
impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for SltError {}

/// Floats are compared to 6 decimals, so both paths print them alike; an
/// empty string is `(empty)`.
fn normalize(v: String) -> String {
    if v.is_empty() {
        return "(empty)".into();
    }
    if v.contains('.') || v.contains('e') || v.contains("inf") || v.contains("NaN") {
        if let Ok(f) = v.parse::<f64>() {
            let s = format!("{f:.6}");
            let s = s.trim_end_matches('0').trim_end_matches('.').to_string();
            return if s == "-0" { "0".into() } else { s };
        }
    }
    v
}

struct InProcess(SessionContext);

#[async_trait]
impl AsyncDB for InProcess {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn shutdown(&mut self) {}

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let df = self.0.sql(sql).await.map_err(|e| SltError(e.to_string()))?;
        let batches = df.collect().await.map_err(|e| SltError(e.to_string()))?;
        let opts = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        let mut width = 0;
        for b in &batches {
            width = b.num_columns();
            let fmts: Vec<_> = b
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
                .collect();
            for i in 0..b.num_rows() {
                rows.push(
                    fmts.iter()
                        .map(|f| normalize(f.value(i).to_string()))
                        .collect(),
                );
            }
        }
        if batches.is_empty() && !sql.trim_start().to_lowercase().starts_with("select") {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows,
        })
    }
}

struct Wire(tokio_postgres::Client);

#[async_trait]
impl AsyncDB for Wire {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn shutdown(&mut self) {}

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let msgs = self.0.simple_query(sql).await.map_err(|e| {
            SltError(
                e.as_db_error()
                    .map(|d| d.message().to_string())
                    .unwrap_or(e.to_string()),
            )
        })?;
        let mut rows = Vec::new();
        let mut width = 0;
        for m in msgs {
            if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                width = r.len();
                rows.push(
                    (0..r.len())
                        .map(|i| {
                            normalize(r.get(i).map(|s| s.to_string()).unwrap_or("NULL".into()))
                        })
                        .collect(),
                );
            }
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows,
        })
    }
}

fn slt_files() -> Vec<std::path::PathBuf> {
    let dir = repo_root().join("sql");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    files
}

/// The header lines (leading comments) of a file.
fn header(file: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.to_string())
        .collect()
}

/// The store a file runs against: its `# data:` folder ingested, or the demo.
fn store_for(file: &std::path::Path, demo: &str) -> (Option<tempfile::TempDir>, String) {
    let data = header(file)
        .iter()
        .find_map(|l| l.strip_prefix("# data:").map(|d| d.trim().to_string()));
    let Some(dir) = data else {
        return (None, demo.to_string());
    };
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store").display().to_string();
    let src = repo_root().join(dir);
    crate::common::run_ok(&["ingest", "--store", &store, src.to_str().unwrap()]);
    (Some(tmp), store)
}

#[tokio::test]
async fn sqllogictest_in_process() {
    let (_tmp, demo) = demo_store();
    for file in slt_files() {
        // Client introspection needs the server's pg_catalog and functions.
        if header(&file).iter().any(|l| l.trim() == "# pgwire only") {
            continue;
        }
        let (_data, store) = store_for(&file, &demo);
        let ctx = culprit_sql::session(Store::open(&store).unwrap())
            .await
            .unwrap();
        let mut runner = sqllogictest::Runner::new(|| {
            let ctx = ctx.clone();
            async move { Ok(InProcess(ctx)) }
        });
        runner
            .run_file_async(&file)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
}

#[tokio::test]
async fn sqllogictest_through_pgwire() {
    let (_tmp, demo) = demo_store();
    let mut ran = 0;
    for file in slt_files() {
        if !header(&file)
            .iter()
            .any(|l| matches!(l.trim(), "# pgwire" | "# pgwire only"))
        {
            continue;
        }
        ran += 1;
        let (_data, store) = store_for(&file, &demo);
        let (addr, server): (SocketAddr, _) = start_server(Store::open(&store).unwrap()).await;
        let mut runner = sqllogictest::Runner::new(move || async move {
            Ok(Wire(crate::common::connect(addr).await))
        });
        runner
            .run_file_async(&file)
            .await
            .unwrap_or_else(|e| panic!("{} (pgwire): {e}", file.display()));
        server.abort();
    }
    assert!(ran > 0, "no .slt file is marked # pgwire");
}
