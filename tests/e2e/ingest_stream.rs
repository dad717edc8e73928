//! The streaming ingest (issue #17 item 4): an input larger than what one
//! ingest holds in memory at a time is stored whole, once, laid out as
//! before (window rows per host bucket, each file sorted by time with its
//! span), a second copy of the same rows adds nothing, a window row found
//! again past the first part of the input is still a duplicate, and the
//! process's peak memory does not grow with the input.

use std::collections::HashMap;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::TimestampMicrosecondType;
use culprit_core::Table;
use futures::TryStreamExt;

use crate::common::parquet_files::{read, rows, sum, write};
use crate::common::{culprit, proc_status_kb, run_ok};

/// Runs `culprit ARGS` and returns its stderr and peak resident memory
/// (`VmHWM` of /proc, polled until it exits), in bytes.
fn run_measured(args: &[&str]) -> (String, u64) {
    let mut child = culprit()
        .args(args)
        .env_remove("CULPRIT_STORE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(proc_status_kb(pid, "VmHWM:"));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "culprit {args:?}: {text}");
    (text, peak * 1024)
}

/// Ingests folder `dir` into `store` and checks that exactly the rows
/// `copies` (numbered from 1) of `file` are rejected, each as a duplicate
/// window; returns what the ingest printed.
fn ingest_rejecting_copies(
    store: &str,
    dir: &std::path::Path,
    file: &std::path::Path,
    copies: &[usize],
) -> String {
    let out = culprit()
        .args(["ingest", "--store", store, dir.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    let shown = file.display().to_string();
    for row in copies {
        assert!(
            text.contains(&format!("{shown}: row {row}: duplicate window")),
            "row {row} is not rejected: {text}"
        );
    }
    assert!(
        text.contains(&format!("rejected {}", copies.len())),
        "{text}"
    );
    text
}

fn sql(store: &str, query: &str) -> Vec<String> {
    let out = run_ok(&["sql", "--store", store, "--format", "csv", query]);
    out.lines().skip(1).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_streams_an_input_larger_than_its_buffers() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    // 1.2e6 window rows: about 85 MB of checked rows, more than one part
    // of the input held at a time (64 MiB).
    let input_s = input.to_str().unwrap();
    run_ok(&[
        "generate", "--out", input_s, "--tasks", "100000", "--hosts", "50",
    ]);
    let windows = read(&input.join("task_windows.parquet"));
    let tasks = read(&input.join("tasks.parquet"));
    let hosts = read(&input.join("host_windows.parquet"));
    let (n_windows, n_tasks, n_hosts) = (rows(&windows), rows(&tasks), rows(&hosts));
    assert!(n_windows > 1_000_000, "{n_windows}");

    let store = tmp.path().join("store");
    let store_s = store.to_str().unwrap().to_string();
    let (said, peak) = run_measured(&["ingest", "--store", &store_s, input_s]);
    assert!(said.contains("rejected 0"), "{said}");

    // Every row, once, with the input's values.
    let got = sql(
        &store_s,
        "SELECT count(*), sum(blocked), sum(acquired) FROM task_windows",
    );
    let f: Vec<f64> = got[0].split(',').map(|v| v.parse().unwrap()).collect();
    assert_eq!(f[0] as usize, n_windows, "{got:?}");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
    assert!(close(f[1], sum(&windows, "blocked")), "{got:?}");
    assert!(close(f[2], sum(&windows, "acquired")), "{got:?}");
    let got = sql(&store_s, "SELECT count(*) FROM tasks");
    assert_eq!(got[0].parse::<usize>().unwrap(), n_tasks);
    let got = sql(&store_s, "SELECT count(*), sum(capacity) FROM host_windows");
    let f: Vec<f64> = got[0].split(',').map(|v| v.parse().unwrap()).collect();
    assert_eq!(f[0] as usize, n_hosts);
    assert!(close(f[1], sum(&hosts, "capacity")), "{got:?}");

    // The layout: each window file holds one host bucket's rows (by the
    // host of its task in the input), sorted by time, its span recorded.
    let mut host_of: HashMap<String, String> = HashMap::new();
    for b in &tasks {
        let ids = b.column_by_name("task_id").unwrap().as_string::<i32>();
        let hs = b.column_by_name("host").unwrap().as_string::<i32>();
        for i in 0..b.num_rows() {
            host_of.insert(ids.value(i).to_string(), hs.value(i).to_string());
        }
    }
    let st = culprit_store::Store::open(&store_s).unwrap();
    let manifest = st.manifest().await.unwrap();
    // A table's last rows are written when the next table's file begins,
    // not held to the end: every `tasks` file before the first window file.
    let order: Vec<&str> = manifest
        .files
        .iter()
        .map(|f| f.table.as_str())
        .filter(|t| ["tasks", "task_windows", "host_windows"].contains(t))
        .collect();
    let first_window = order.iter().position(|t| *t == "task_windows").unwrap();
    assert!(order[..first_window].contains(&"tasks"), "{order:?}");
    assert!(!order[first_window..].contains(&"tasks"), "{order:?}");
    let files: Vec<_> = manifest.files_of(Table::TaskWindows).cloned().collect();
    assert!(files.len() > 16, "{} files", files.len());
    let mut seen = 0;
    for f in files {
        let bucket = f
            .bucket
            .expect("every task is known: every file has its bucket");
        let span = f.window_span.expect("a span");
        let batches: Vec<RecordBatch> = st
            .scan_files(vec![f.clone()], None)
            .try_collect()
            .await
            .unwrap();
        let mut last = i64::MIN;
        let (mut first, mut end) = (i64::MAX, i64::MIN);
        for b in &batches {
            let ids = b.column_by_name("task_id").unwrap().as_string::<i32>();
            let starts = b
                .column_by_name("window_start")
                .unwrap()
                .as_primitive::<TimestampMicrosecondType>();
            let ends = b
                .column_by_name("window_end")
                .unwrap()
                .as_primitive::<TimestampMicrosecondType>();
            for i in 0..b.num_rows() {
                assert!(starts.value(i) >= last, "{}: not sorted by time", f.path);
                last = starts.value(i);
                first = first.min(starts.value(i));
                end = end.max(ends.value(i));
                let host = &host_of[ids.value(i)];
                assert_eq!(
                    culprit_store::layout::host_bucket(host),
                    bucket,
                    "{}",
                    f.path
                );
            }
        }
        assert_eq!(span, [first, end], "{}", f.path);
        seen += rows(&batches);
    }
    assert_eq!(seen, n_windows);

    // The same rows again in other bytes: nothing is added.
    let again = tmp.path().join("again");
    std::fs::create_dir_all(&again).unwrap();
    write(&again.join("tasks.parquet"), &tasks);
    write(&again.join("task_windows.parquet"), &windows);
    let (said, _) = run_measured(&["ingest", "--store", &store_s, again.to_str().unwrap()]);
    assert!(said.contains("no new rows"), "{said}");
    assert!(
        said.contains(&format!("{} rows already stored", n_tasks + n_windows)),
        "{said}"
    );
    let got = sql(&store_s, "SELECT count(*) FROM task_windows");
    assert_eq!(got[0].parse::<usize>().unwrap(), n_windows);

    // Window rows repeated later in the input: every 20,000th row again
    // 30,000 rows after it (so that at each boundary between two parts a
    // copy's first row is in the part still being written when the copy
    // is checked), and the first row at the end (read in another part
    // than the first): each rejected as a duplicate, named by its row;
    // into a fresh store, the rest is stored.
    let dup = tmp.path().join("dup");
    std::fs::create_dir_all(&dup).unwrap();
    write(&dup.join("tasks.parquet"), &tasks);
    let all = arrow::compute::concat_batches(&windows[0].schema(), &windows).unwrap();
    let (mut order, mut copies) = (Vec::new(), Vec::new());
    for i in 0..all.num_rows() {
        order.push(i as u32);
        if i >= 30_000 && (i - 30_000) % 20_000 == 0 {
            order.push((i - 30_000) as u32);
            copies.push(order.len()); // its row, from 1
        }
    }
    order.push(0);
    copies.push(order.len());
    let with_dup =
        arrow::compute::take_record_batch(&all, &arrow::array::UInt32Array::from(order)).unwrap();
    write(&dup.join("task_windows.parquet"), &[with_dup]);
    let fresh = tmp.path().join("fresh").to_str().unwrap().to_string();
    ingest_rejecting_copies(&fresh, &dup, &dup.join("task_windows.parquet"), &copies);
    assert!(copies.len() > 50, "{}", copies.len());
    let got = sql(&fresh, "SELECT count(*) FROM task_windows");
    assert_eq!(got[0].parse::<usize>().unwrap(), n_windows);

    // Memory: bounded by the parts held, not by the input. The whole input
    // decoded is several hundred MB; the old ingest of it peaked at about
    // 500 MB.
    assert!(peak < 384 << 20, "peak {} MiB", peak >> 20);
}

/// Host window rows of many parts (the input in host order, as a
/// collector writes one host's series after another): a copy of a row is
/// rejected whether its first is in the part just written (looked up in
/// memory) or in a part written before it (looked up in the files written),
/// and every other row is stored once. (The look-up reads the files
/// written only for rows within the time of a host's rows there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_window_copies_far_apart_are_rejected() {
    use arrow::array::{ArrayRef, StringArray, UInt32Array};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    let input_s = input.to_str().unwrap();
    run_ok(&[
        "generate", "--out", input_s, "--tasks", "20000", "--hosts", "50",
    ]);
    let hosts = read(&input.join("host_windows.parquet"));
    let one = arrow::compute::concat_batches(&hosts[0].schema(), &hosts).unwrap();
    // Copies of the cluster under other host names, one after another:
    // 1.5e6 rows, several parts of the input, each host's rows together.
    let at = one.schema().index_of("host").unwrap();
    let mut copies_of_cluster = Vec::new();
    let mut k = 0;
    while copies_of_cluster
        .iter()
        .map(RecordBatch::num_rows)
        .sum::<usize>()
        < 1_500_000
    {
        let names = one.column(at).as_string::<i32>();
        let renamed: StringArray = names
            .iter()
            .map(|h| h.map(|h| format!("{h}-{k}")))
            .collect();
        let mut cols: Vec<ArrayRef> = one.columns().to_vec();
        cols[at] = Arc::new(renamed);
        copies_of_cluster.push(RecordBatch::try_new(one.schema(), cols).unwrap());
        k += 1;
    }
    let all = arrow::compute::concat_batches(&one.schema(), &copies_of_cluster).unwrap();
    let n = all.num_rows();
    // Every 100,000th row again 30,000 rows later (the part just written,
    // or the same part) and 700,000 rows later (two parts or more before).
    let (mut order, mut copies) = (Vec::new(), Vec::new());
    for i in 0..n {
        order.push(i as u32);
        for back in [30_000, 700_000] {
            if i >= back && (i - back) % 100_000 == 0 {
                order.push((i - back) as u32);
                copies.push(order.len());
            }
        }
    }
    let with_dup = arrow::compute::take_record_batch(&all, &UInt32Array::from(order)).unwrap();
    let dir = tmp.path().join("dup");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("host_windows.parquet");
    write(&file, &[with_dup]);
    let store = tmp.path().join("store").to_str().unwrap().to_string();
    let text = ingest_rejecting_copies(&store, &dir, &file, &copies);
    assert!(copies.len() > 20, "{}", copies.len());
    let got = sql(
        &store,
        "SELECT count(*), count(DISTINCT host) FROM host_windows",
    );
    assert_eq!(got[0], format!("{n},{}", 50 * k), "{text}");
}
