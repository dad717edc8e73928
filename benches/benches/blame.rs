//! Level-4 attribution at scale (issue: the blame engine).
//!
//! Data: `culprit generate`-style fast data, every query a victim, all
//! stages. `CULPRIT_BENCH_TASKS` sets the size (default 1,000,000 tasks on
//! 500 hosts, 8 slots each, 12 window rows per task: 12e6 rows).
//!
//! Targets (2-core machine): the whole path from Parquet in the store to the
//! level-4 result under 4.5 s and 1 GiB peak (10x the DuckDB baseline of
//! about 44 s and 9.3 GiB, `duckdb/level4.py`). `method_sweep` measures the
//! sweeps alone on the in-memory dataset; `store_to_level4` the whole path
//! through SQL: tasks from Parquet, then the window rows streamed from the
//! store host bucket by host bucket and swept, then the result batches.

use criterion::{criterion_group, criterion_main, Criterion};
use culprit_core::method::{blame, BlameOptions, Dataset, VictimStages};
use culprit_core::Table;
use culprit_sim::{fast, FastConfig};

fn tasks() -> usize {
    std::env::var("CULPRIT_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

fn all_victims() -> BlameOptions {
    BlameOptions {
        stages: VictimStages::All,
        ..Default::default()
    }
}

fn bench(c: &mut Criterion) {
    let n = tasks();
    let w = fast(&FastConfig {
        tasks: n,
        hosts: (n / 2000).max(1),
        ..Default::default()
    });
    let rows = w.task_windows.num_rows();
    let ds = Dataset::from_batches(
        std::slice::from_ref(&w.stages),
        std::slice::from_ref(&w.tasks),
        std::slice::from_ref(&w.task_windows),
        std::slice::from_ref(&w.host_windows),
    );
    let mut g = c.benchmark_group("level4");
    g.sample_size(10);
    g.bench_function(format!("method_sweep/{rows}_window_rows"), |b| {
        b.iter(|| blame(&ds, &all_victims()).expect("blame").1.len())
    });

    // The same data as Parquet in a local store, through SQL.
    let dir = std::env::temp_dir().join(format!("culprit-bench-{}", std::process::id()));
    let store = culprit_store::Store::open(dir.to_str().expect("utf-8 path")).expect("store");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut batch = store.begin();
        for t in Table::ALL {
            if let Some(b) = w.table(t) {
                batch
                    .write(t, std::slice::from_ref(b))
                    .await
                    .expect("write");
            }
        }
        batch.commit().await.expect("commit");
    });
    drop(ds);
    drop(w);
    g.bench_function(format!("store_to_level4/{rows}_window_rows"), |b| {
        b.iter(|| {
            rt.block_on(async {
                // A new session each time: nothing cached.
                let ctx = culprit_sql::session(store.clone()).await.expect("session");
                let df = ctx
                    .sql("SELECT count(*) FROM blame(NULL, 'victim_stages=all')")
                    .await
                    .expect("plan");
                df.collect().await.expect("run")
            })
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
