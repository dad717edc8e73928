//! The streaming ingest (issue #17 item 4): `culprit_ingest::ingest` of
//! `culprit generate` Parquet files into a new local store, the whole path
//! (read, check, dedup, lay out per host bucket, encode, commit).
//!
//! Target: at least as fast as a plain DuckDB copy of the same Parquet
//! files (`benches/duckdb/copy_parquet.py`), in memory bounded whatever
//! the input's size (under 512 MiB). The whole-process figures (time and peak memory,
//! at 1e6 and 5e6 tasks, with DuckDB's in the same run) are in
//! docs/performance.md; this bench runs in seconds: 1e5 tasks on 50 hosts
//! (1.2e6 window rows, about 40 MB of Parquet), `CULPRIT_BENCH_INGEST_TASKS`
//! for another size.
//!
//! Run: `cargo bench --workspace --bench ingest`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use culprit_core::Table;
use culprit_ingest::{ingest, list_sources, IngestOptions};
use culprit_sim::{fast, FastConfig};

fn bench(c: &mut Criterion) {
    let tasks: usize = std::env::var("CULPRIT_BENCH_INGEST_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = std::env::temp_dir().join(format!("culprit-bench-ingest-{}", std::process::id()));
    let input = dir.join("in");
    std::fs::create_dir_all(&input).expect("input folder");
    let workload = fast(&FastConfig {
        tasks,
        hosts: (tasks / 2000).max(4),
        ..Default::default()
    });
    let mut rows = 0u64;
    let mut bytes = 0u64;
    for t in Table::ALL {
        let Some(batch) = workload.table(t) else {
            continue;
        };
        rows += batch.num_rows() as u64;
        // As `culprit generate` writes them.
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::SNAPPY)
            .build();
        let path = input.join(format!("{}.parquet", t.name()));
        let file = std::fs::File::create(&path).expect("input file");
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props))
            .expect("writer");
        w.write(batch).expect("write");
        w.close().expect("close");
        bytes += std::fs::metadata(&path).expect("size").len();
    }
    drop(workload);
    eprintln!("ingest bench: {tasks} tasks, {rows} rows, {bytes} bytes of Parquet");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let inputs = vec![input.to_str().expect("utf-8 path").to_string()];
    let mut g = c.benchmark_group("ingest");
    g.sample_size(10);
    g.throughput(Throughput::Elements(rows));
    let mut run = 0;
    g.bench_function(format!("parquet/{tasks}_tasks"), |b| {
        b.iter(|| {
            run += 1;
            let store_dir = dir.join(format!("store-{run}"));
            let report = rt.block_on(async {
                let store =
                    culprit_store::Store::open(store_dir.to_str().expect("utf-8")).expect("store");
                let sources = list_sources(&inputs).await.expect("sources");
                ingest(&store, sources, &IngestOptions::default(), &())
                    .await
                    .expect("ingest")
            });
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
            std::fs::remove_dir_all(&store_dir).expect("remove the store");
            report.rows.values().sum::<u64>()
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
