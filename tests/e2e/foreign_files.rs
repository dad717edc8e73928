//! Foreign files in the store: an older or hand-written Parquet file whose
//! columns have other types (or lack a required column) fails the statement
//! with a clear error naming the file and the column, never a panic.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};

use crate::common::{demo_store, run};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Rewrites every `tasks` file of the store in place with `change` applied
/// (same path, so the manifest still lists it).
fn rewrite_tasks(store: &Path, change: &dyn Fn(RecordBatch) -> RecordBatch) {
    let dir = store.join("tables/tasks");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().and_then(|x| x.to_str()) != Some("parquet") {
            continue;
        }
        let file = std::fs::File::open(&path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = reader.map(|b| change(b.unwrap())).collect();
        let out = std::fs::File::create(&path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(out, batches[0].schema(), None).unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
        n += 1;
    }
    assert!(n > 0, "no tasks file in {}", dir.display());
}

/// Replaces (or, with `to: None`, drops) one column.
fn replace(batch: RecordBatch, name: &str, to: Option<DataType>) -> RecordBatch {
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if f.name() != name {
            fields.push(f.as_ref().clone());
            columns.push(c.clone());
            continue;
        }
        let Some(t) = &to else { continue };
        let c: ArrayRef = match t {
            DataType::Int32 => Arc::new(Int32Array::from(vec![7; c.len()])),
            t => arrow::compute::cast(c, t).unwrap(),
        };
        fields.push(Field::new(name, t.clone(), true));
        columns.push(c);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

#[test]
fn foreign_parquet_files_fail_the_statement_cleanly() {
    let (tmp, store) = demo_store();
    let variants: Vec<(&str, Option<DataType>, &str)> = vec![
        ("launch_time", Some(DataType::Utf8), "has type Utf8"),
        ("launch_time", Some(DataType::Int32), "has type Int32"),
        ("host", Some(DataType::Int32), "has type Int32"),
        ("cpu_seconds", Some(DataType::Utf8), "has type Utf8"),
        ("host", None, "is missing"),
    ];
    let mut failures = Vec::new();
    for (i, (column, to, problem)) in variants.iter().enumerate() {
        let copy = tmp.path().join(format!("foreign-{i}"));
        copy_dir(Path::new(&store), &copy);
        rewrite_tasks(&copy, &|b| replace(b, column, to.clone()));
        let s = copy.to_str().unwrap();
        // The analyses decode the store's files themselves: a clear error.
        for sql in [
            "SELECT * FROM culprits('q-victim')",
            "SELECT count(*) FROM blame()",
        ] {
            let out = run(&["sql", "--store", s, sql]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            eprintln!("{column} -> {to:?}: {sql}: {}", stderr.trim());
            if out.status.code() != Some(2)
                || stderr.contains("panicked")
                || !stderr.contains(column)
                || !stderr.contains(problem)
                || !stderr.contains("tables/tasks/")
            {
                failures.push(format!(
                    "{column} -> {to:?}: {sql}: exit {:?}, expected 2 and \"{column} {problem}\":\n{stderr}",
                    out.status.code()
                ));
            }
        }
        // Plain scans go through DataFusion, which casts what it can: either
        // a result or an error, never a panic.
        for sql in ["SELECT count(*) FROM tasks", "SELECT * FROM tasks"] {
            let out = run(&["sql", "--store", s, "--format", "csv", sql]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !matches!(out.status.code(), Some(0) | Some(2)) || stderr.contains("panicked") {
                failures.push(format!(
                    "{column} -> {to:?}: {sql}: exit {:?}:\n{stderr}",
                    out.status.code()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
