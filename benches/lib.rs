//! Benchmarks live in `benches/` (criterion) and `duckdb/` (the comparison);
//! see README.md beside this file.
