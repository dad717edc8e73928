//! A large store's analyses stream window rows from the store host bucket by
//! host bucket; a small one keeps them in memory. Both must give the same
//! results, including for files written without buckets and for rows whose
//! task was stored again with another host.

use std::sync::Arc;

use culprit_core::Table;
use culprit_sim::{simulate, SimConfig};
use culprit_sql::datafusion::arrow::array::{Array, AsArray, RecordBatch, StringArray};
use culprit_sql::datafusion::arrow::datatypes::Float64Type;
use culprit_sql::datafusion::arrow::util::display::array_value_to_string;
use culprit_sql::datafusion::prelude::SessionContext;
use culprit_sql::Engine;
use culprit_store::layout::host_bucket;
use culprit_store::Store;

/// A text column of a batch.
fn text<'a>(batch: &'a RecordBatch, column: &str) -> &'a StringArray {
    batch.column_by_name(column).unwrap().as_string::<i32>()
}

/// Rows as (text of every non-float column, float columns).
fn rows(batches: &[RecordBatch]) -> Vec<(String, Vec<f64>)> {
    let mut out = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let mut key = String::new();
            let mut nums = Vec::new();
            for c in b.columns() {
                if let Some(f) = c.as_primitive_opt::<Float64Type>() {
                    nums.push(if f.is_null(i) { f64::NAN } else { f.value(i) });
                } else {
                    key.push_str(&array_value_to_string(c, i).unwrap());
                    key.push('|');
                }
            }
            out.push((key, nums));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1[0].total_cmp(&b.1[0])));
    out
}

async fn query(ctx: &SessionContext, sql: &str) -> Vec<(String, Vec<f64>)> {
    rows(&ctx.sql(sql).await.unwrap().collect().await.unwrap())
}

fn same(sql: &str, a: &[(String, Vec<f64>)], b: &[(String, Vec<f64>)]) {
    assert_eq!(a.len(), b.len(), "{sql}: row counts differ");
    assert!(!a.is_empty(), "{sql}: no rows");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.0, y.0, "{sql}");
        for (u, v) in x.1.iter().zip(&y.1) {
            assert!(
                (u.is_nan() && v.is_nan()) || (u - v).abs() <= 1e-9 * u.abs().max(1.0),
                "{sql}: {} gives {u} in memory, {v} streamed",
                x.0
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_windows_give_the_in_memory_results() {
    let w = simulate(&SimConfig::default());
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().to_str().unwrap()).unwrap();
    let half = w.task_windows.num_rows() / 2;

    // Batch 1: everything but the second half of the window rows, written
    // bucket by bucket.
    let mut batch = store.begin();
    for t in Table::ALL {
        let Some(b) = w.table(t) else { continue };
        let b = if t == Table::TaskWindows {
            b.slice(0, half)
        } else {
            b.clone()
        };
        batch.write(t, &[b]).await.unwrap();
    }
    batch.commit().await.unwrap();
    // Batch 2: the other half alone; its tasks are unknown to the batch, so
    // its file has no bucket.
    let mut batch = store.begin();
    let rest = w.task_windows.slice(half, w.task_windows.num_rows() - half);
    batch.write(Table::TaskWindows, &[rest]).await.unwrap();
    batch.commit().await.unwrap();
    // No task has two hosts yet: buckets without a victim's host are skipped.
    compare(&store, &w).await;
    // Batch 3: one task stored again with a host of another bucket (the
    // first row stands), with one more window row: a stray for the sweep of
    // the other bucket.
    let tasks = &w.tasks;
    let id = text(tasks, "task_id").value(0).to_string();
    let host = text(tasks, "host").value(0).to_string();
    let other = (0..)
        .map(|i| format!("elsewhere-{i}"))
        .find(|h| host_bucket(h) != host_bucket(&host))
        .unwrap();
    let mut columns: Vec<_> = tasks.columns().iter().map(|c| c.slice(0, 1)).collect();
    columns[tasks.schema().index_of("host").unwrap()] =
        Arc::new(StringArray::from(vec![other.as_str()]));
    let again_batch = RecordBatch::try_new(tasks.schema(), columns).unwrap();
    let ids = text(&w.task_windows, "task_id");
    let row = (0..w.task_windows.num_rows())
        .find(|&i| ids.value(i) == id)
        .unwrap();
    let mut batch = store.begin();
    batch.write(Table::Tasks, &[again_batch]).await.unwrap();
    batch
        .write(Table::TaskWindows, &[w.task_windows.slice(row, 1)])
        .await
        .unwrap();
    batch.commit().await.unwrap();

    let manifest = store.manifest().await.unwrap();
    let files: Vec<_> = manifest.files_of(Table::TaskWindows).collect();
    assert!(
        files.iter().filter(|f| f.bucket.is_some()).count() >= 2,
        "{files:?}"
    );
    assert!(files.iter().any(|f| f.bucket.is_none()), "{files:?}");
    compare(&store, &w).await;
}

/// Every analysis of the store, streamed and in memory.
async fn compare(store: &Store, w: &culprit_sim::Workload) {
    let session = |rows: u64| {
        let store = store.clone();
        async move {
            let engine = Arc::new(Engine::with_window_cache(store.clone(), rows));
            culprit_sql::session_with(store, engine, culprit_sql::default_config(), None)
                .await
                .unwrap()
        }
    };
    let (memory, streamed) = (session(u64::MAX).await, session(0).await);
    let victim = &w.victim;
    let ids = text(&w.queries, "query_id");
    let each: Vec<String> = (0..ids.len())
        .map(|i| {
            format!(
                "SELECT * FROM blame('{}', 'victim_stages=all')",
                ids.value(i)
            )
        })
        .collect();
    for sql in [
        "SELECT * FROM blame(NULL, 'victim_stages=all')".to_string(),
        "SELECT * FROM blame(NULL, 'victim_stages=all', 'slots=transitive')".to_string(),
        "SELECT * FROM blame(NULL, 'victim_stages=all', 'attribution=paper')".to_string(),
        format!("SELECT * FROM blame('{victim}')"),
        "SELECT * FROM culprits(NULL)".to_string(),
        // Node ids follow the sweep's order, which differs: compare the rest.
        "SELECT victim_query, level, kind, victim_stage, resource, detail, host, culprit_kind, \
         culprit_query, culprit_stage, via_stage, bc, dor FROM iqc_nodes(NULL)"
            .to_string(),
        "SELECT * FROM hot_resources()".to_string(),
        // The slowdown reads the victims' window rows from the buckets too.
        "SELECT * FROM victims()".to_string(),
        format!("SELECT * FROM stage_ratp('{victim}')"),
    ]
    .into_iter()
    .chain(each)
    {
        let a = query(&memory, &sql).await;
        let b = query(&streamed, &sql).await;
        same(&sql, &a, &b);
    }
}
