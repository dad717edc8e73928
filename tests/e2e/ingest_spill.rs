//! The ingest's task index spilled to disk (issue #17 item 4): with the
//! tasks held in memory capped far below the input's (the hidden
//! `--memory-tasks`), every row is still stored once with the input's
//! values and in its host bucket, the rejections that need the index
//! (an unknown task, a window outside its task, a task key twice across
//! files) are still named with file and line, a second ingest of the same
//! rows adds nothing, and the temporary files are gone afterwards.

use std::collections::HashMap;
use std::path::Path;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::TimestampMicrosecondType;
use culprit_core::Table;
use futures::TryStreamExt;

use crate::common::parquet_files::{read, rows, sum, write};
use crate::common::{culprit, run_ok};

fn sql(store: &str, query: &str) -> Vec<f64> {
    let out = run_ok(&["sql", "--store", store, "--format", "csv", query]);
    let line = out.lines().nth(1).unwrap().to_string();
    line.split(',').map(|v| v.parse().unwrap()).collect()
}

/// `culprit ingest` with a temporary folder of its own: its output, and
/// whether it left anything there.
fn ingest(tmpdir: &Path, args: &[&str]) -> String {
    let out = culprit()
        .arg("ingest")
        .args(args)
        .env_remove("CULPRIT_STORE")
        .env("TMPDIR", tmpdir)
        .output()
        .unwrap();
    let left: Vec<_> = std::fs::read_dir(tmpdir).unwrap().collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A scratch folder for the ingest's temporary files and a generated input
/// of 20,000 tasks on 20 hosts, under `dir`: (scratch, input).
fn generated(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let input = dir.join("in");
    run_ok(&[
        "generate",
        "--out",
        input.to_str().unwrap(),
        "--tasks",
        "20000",
        "--hosts",
        "20",
    ]);
    (scratch, input)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_spilled_task_index_keeps_rows_rejections_and_dedup() {
    let tmp = tempfile::tempdir().unwrap();
    let (scratch, input) = generated(tmp.path());
    let input_s = input.to_str().unwrap();
    let windows = read(&input.join("task_windows.parquet"));
    let tasks = read(&input.join("tasks.parquet"));
    let (n_windows, n_tasks) = (rows(&windows), rows(&tasks));
    assert!(
        n_tasks == 20_000 && n_windows > 200_000,
        "{n_tasks} {n_windows}"
    );

    // Rows whose check needs the index, about a task in the middle of the
    // input (the first 1,000 stay in memory, the rest is spilled to disk
    // long before these rows are read).
    let (mut batch, mut row) = (0, 10_000);
    while row >= tasks[batch].num_rows() {
        row -= tasks[batch].num_rows();
        batch += 1;
    }
    let t0 = tasks[batch]
        .column_by_name("task_id")
        .unwrap()
        .as_string::<i32>();
    let t0 = t0.value(row).to_string();
    let finish = tasks[batch]
        .column_by_name("finish_time")
        .unwrap()
        .as_primitive::<TimestampMicrosecondType>()
        .value(row)
        / 1000;
    let extra = tmp.path().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(
        extra.join("tasks.csv"),
        format!(
            "task_id,query_id,stage_id,host,launch_time,finish_time\n\
             {t0},q,0,h,1767225600000,1767225602000\n"
        ),
    )
    .unwrap();
    std::fs::write(
        extra.join("task_windows.jsonl"),
        format!(
            "{{\"task_id\":\"nope\",\"window_start\":{finish},\"window_end\":{},\"resource\":\"cpu\",\"blocked\":0,\"acquired\":1}}\n\
             {{\"task_id\":\"{t0}\",\"window_start\":{},\"window_end\":{},\"resource\":\"cpu\",\"blocked\":0,\"acquired\":1}}\n",
            finish + 1000,
            finish + 1000,
            finish + 2000
        ),
    )
    .unwrap();

    let store = tmp.path().join("store");
    let store_s = store.to_str().unwrap().to_string();
    let extra_s = extra.to_str().unwrap();
    let said = ingest(
        &scratch,
        &[
            "--store",
            &store_s,
            "--memory-tasks",
            "1000",
            input_s,
            extra_s,
        ],
    );
    // The index did go to disk: 20,000 tasks, the first 1,000 in memory,
    // the other 19,000 spilled 250 at a time.
    assert!(
        said.contains("task index spilled to disk 76 times"),
        "{said}"
    );
    let tasks_file = input.join("tasks.parquet").display().to_string();
    let csv = extra.join("tasks.csv").display().to_string();
    let jsonl = extra.join("task_windows.jsonl").display().to_string();
    for want in [
        format!("{csv}: line 2: duplicate key '{t0}' (first at {tasks_file}:row 10001)"),
        format!("{jsonl}: line 1: unknown task id 'nope'"),
        format!("{jsonl}: line 2: window outside its task '{t0}' [launch_time, finish_time]"),
    ] {
        assert!(said.contains(&want), "missing {want}:\n{said}");
    }
    assert!(said.contains("rejected 3"), "{said}");

    // Every input row, once, with the input's values.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
    let got = sql(
        &store_s,
        "SELECT count(*), sum(blocked), sum(acquired) FROM task_windows",
    );
    assert_eq!(got[0] as usize, n_windows, "{got:?}");
    assert!(close(got[1], sum(&windows, "blocked")), "{got:?}");
    assert!(close(got[2], sum(&windows, "acquired")), "{got:?}");
    let got = sql(&store_s, "SELECT count(*), sum(cpu_seconds) FROM tasks");
    assert_eq!(got[0] as usize, n_tasks, "{got:?}");
    assert!(close(got[1], sum(&tasks, "cpu_seconds")), "{got:?}");

    // Each window file holds one host bucket's rows, by its task's host
    // (the bucket the spilled index gave), each row with its task's host's
    // key.
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
    let mut seen = 0;
    for f in manifest.files_of(Table::TaskWindows).cloned() {
        let bucket = f
            .bucket
            .expect("every task is known: every file has its bucket");
        let batches: Vec<RecordBatch> = st
            .scan_files(vec![f.clone()], None)
            .try_collect()
            .await
            .unwrap();
        for b in &batches {
            let ids = b.column_by_name("task_id").unwrap().as_string::<i32>();
            let keys = b
                .column_by_name(culprit_store::layout::HOST_KEY)
                .expect("the host key column")
                .as_primitive::<arrow::datatypes::UInt32Type>();
            for i in 0..b.num_rows() {
                let host = &host_of[ids.value(i)];
                assert_eq!(
                    culprit_store::layout::host_bucket(host),
                    bucket,
                    "{}",
                    f.path
                );
                assert!(keys.is_valid(i), "{}: row {i}", f.path);
                assert_eq!(
                    keys.value(i),
                    culprit_store::layout::host_key(host),
                    "{}: row {i}",
                    f.path
                );
            }
        }
        seen += rows(&batches);
    }
    assert_eq!(seen, n_windows);

    // The same rows again in other bytes, the stored tasks spilled too:
    // nothing is added.
    let again = tmp.path().join("again");
    std::fs::create_dir_all(&again).unwrap();
    write(&again.join("tasks.parquet"), &tasks);
    write(&again.join("task_windows.parquet"), &windows);
    let said = ingest(
        &scratch,
        &[
            "--store",
            &store_s,
            "--memory-tasks",
            "1000",
            again.to_str().unwrap(),
        ],
    );
    assert!(said.contains("no new rows"), "{said}");
    assert!(said.contains("rejected 0"), "{said}");
    assert!(
        said.contains(&format!("{} rows already stored", n_tasks + n_windows)),
        "{said}"
    );
    let got = sql(&store_s, "SELECT count(*) FROM task_windows");
    assert_eq!(got[0] as usize, n_windows);
}

/// The batch of `batches` that holds row `row` of them all, and the row's
/// place in it.
fn locate(batches: &[RecordBatch], mut row: usize) -> (&RecordBatch, usize) {
    for b in batches {
        if row < b.num_rows() {
            return (b, row);
        }
        row -= b.num_rows();
    }
    panic!("no row {row}")
}

/// The value of `column` (µs) of row `row` of `batches`, in ms.
fn ms_at(batches: &[RecordBatch], column: &str, row: usize) -> i64 {
    let (b, i) = locate(batches, row);
    let c = b.column_by_name(column).unwrap();
    c.as_primitive::<TimestampMicrosecondType>().value(i) / 1000
}

/// The text of `column` of row `row` of `batches`.
fn text_at(batches: &[RecordBatch], column: &str, row: usize) -> String {
    let (b, i) = locate(batches, row);
    let c = b.column_by_name(column).unwrap().as_string::<i32>();
    c.value(i).to_string()
}

/// An ingest into a store reads the stored tasks of its own rows' times
/// (and of the stored spans of the queries its task rows name), not every
/// stored task (issue #17: a few files arriving at a store of 1e7 tasks
/// read all of them, seconds for every file `--watch` saw). Rows of a new
/// query after the store's time read none: nothing is spilled, where the
/// 20,000 stored tasks, 250 at a time in the index, spilled 80 times. The
/// checks that need stored tasks still hold: a stored task given again at
/// another time of its query is already stored (nothing added), a window of
/// a stored task inside its run is added (a log read again as it grew), and
/// one far from every run of that id is rejected, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_reads_the_stored_tasks_of_its_own_time() {
    let tmp = tempfile::tempdir().unwrap();
    let (scratch, input) = generated(tmp.path());
    let input_s = input.to_str().unwrap();
    let tasks = read(&input.join("tasks.parquet"));
    let n_windows = rows(&read(&input.join("task_windows.parquet")));
    let n_tasks = rows(&tasks);
    let store = tmp.path().join("store");
    let store_s = store.to_str().unwrap().to_string();
    // A folder of `files` (name, text), ingested with 1,000 tasks held in
    // memory (the rest spilled 250 at a time): what the ingest said.
    let ingest_files = |name: &str, files: &[(&str, String)]| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, text) in files {
            std::fs::write(dir.join(file), text).unwrap();
        }
        let dir = dir.to_str().unwrap().to_string();
        ingest(
            &scratch,
            &["--store", &store_s, "--memory-tasks", "1000", &dir],
        )
    };
    let said = ingest(
        &scratch,
        &["--store", &store_s, "--memory-tasks", "1000", input_s],
    );
    assert!(said.contains("rejected 0"), "{said}");

    // A task in the middle of the store, and a time an hour after its end.
    let t0 = text_at(&tasks, "task_id", 10_000);
    let q0 = text_at(&tasks, "query_id", 10_000);
    let (launch, finish) = (
        ms_at(&tasks, "launch_time", 10_000),
        ms_at(&tasks, "finish_time", 10_000),
    );
    let end = tasks
        .iter()
        .filter_map(|b| {
            let c = b.column_by_name("finish_time").unwrap();
            arrow::compute::max(c.as_primitive::<TimestampMicrosecondType>())
        })
        .max()
        .unwrap()
        / 1000;
    let late = end + 3_600_000;
    let task_row = |id: &str, query: &str, from: i64, to: i64| {
        format!("task_id,query_id,stage_id,host,launch_time,finish_time\n{id},{query},0,h1,{from},{to}\n")
    };
    let window_row = |id: &str, from: i64, to: i64, blocked: f64| {
        format!(
            "{{\"task_id\":\"{id}\",\"window_start\":{from},\"window_end\":{to},\"resource\":\"cpu\",\"blocked\":{blocked},\"acquired\":1}}\n"
        )
    };

    // A new query after the store's time: no stored task is read.
    let said = ingest_files(
        "new",
        &[
            ("tasks.csv", task_row("late-t", "late-q", late, late + 2000)),
            (
                "task_windows.jsonl",
                window_row("late-t", late + 100, late + 1100, 0.0),
            ),
        ],
    );
    assert!(
        said.contains("task_windows 1, tasks 1; rejected 0"),
        "{said}"
    );
    assert!(!said.contains("spilled"), "stored tasks read: {said}");

    // The stored task again, at another time of its query: already stored.
    let said = ingest_files(
        "again",
        &[(
            "tasks.csv",
            task_row(&t0, &q0, late + 10_000, late + 12_000),
        )],
    );
    assert!(said.contains("no new rows"), "{said}");
    assert!(said.contains("rejected 0; 1 rows already stored"), "{said}");

    // Windows of the stored task, each ingest alone: one in its run, added;
    // one far from every run of that id, rejected.
    let said = ingest_files(
        "inside",
        &[(
            "task_windows.jsonl",
            window_row(&t0, launch + 1, finish - 1, 0.4321),
        )],
    );
    assert!(said.contains("task_windows 1; rejected 0"), "{said}");
    let said = ingest_files(
        "far",
        &[(
            "task_windows.jsonl",
            window_row(&t0, late + 10_100, late + 10_200, 0.0),
        )],
    );
    let file = tmp.path().join("far").join("task_windows.jsonl");
    let want = format!(
        "{}: line 1: unknown task id '{t0}' (no task of that id in this ingest, nor stored \
         running at the row's time)",
        file.display()
    );
    assert!(said.contains(&want), "missing {want}:\n{said}");
    assert!(said.contains("no new rows; rejected 1"), "{said}");

    // Every row once: the input's, the new query's, the window added.
    let got = sql(&store_s, "SELECT count(*) FROM tasks");
    assert_eq!(got[0] as usize, n_tasks + 1, "{got:?}");
    let got = sql(
        &store_s,
        &format!("SELECT count(*) FROM task_windows WHERE task_id = '{t0}' AND blocked = 0.4321"),
    );
    assert_eq!(got[0] as usize, 1, "{got:?}");
    let got = sql(&store_s, "SELECT count(*) FROM task_windows");
    assert_eq!(got[0] as usize, n_windows + 2, "{got:?}");
}
