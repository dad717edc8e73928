//! Spark event-log translation speed.
//!
//! Target (issue #4): at least 100 MB/s of uncompressed event log on one
//! core, measured on the largest real log in the test data
//! (`nds_q88_photon_db_13_3.zstd`, Databricks 13.3, 142 MB uncompressed).
//!
//! - `spark_parse`: events -> interchange rows (JSON parsing, the mapping,
//!   the Arrow columns), on the decoded text;
//! - `spark_decode_zstd`: the zstd stream -> text.
//!
//! Run: `cargo bench --workspace --bench spark_ingest`. The data folder is
//! `$CULPRIT_TEST_DATA` (default `../shared/data`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use culprit_ingest::spark;

const LOG: &str =
    "spark/nvidia-spark-rapids-tools/spark-events-qualification/nds_q88_photon_db_13_3.zstd";

fn bench(c: &mut Criterion) {
    let root = std::env::var("CULPRIT_TEST_DATA")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data").into());
    let path = std::path::Path::new(&root).join(LOG);
    let bytes: bytes::Bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (set CULPRIT_TEST_DATA)", path.display()))
        .into();
    let part = spark::decode(LOG, &bytes, usize::MAX).expect("decode");
    let text_len = part.text.len() as u64;
    let parts = [part];

    let mut g = c.benchmark_group("spark");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(text_len));
    g.bench_function("spark_parse", |b| {
        b.iter(|| {
            let parsed = spark::parse(&parts, spark::LogState::default(), "bench");
            assert!(parsed.events > 0);
            parsed
        })
    });
    g.bench_function("spark_decode_zstd", |b| {
        b.iter(|| {
            spark::decode(LOG, &bytes, usize::MAX)
                .expect("decode")
                .text
                .len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
