use arrow::array::AsArray;
use culprit_core::Table;
use culprit_ingest::{ingest, list_sources, IngestOptions, IngestReport};
use culprit_store::Store;

use crate::common::{generate, run, run_ok};

async fn ingest_paths(
    store: &Store,
    paths: &[&std::path::Path],
    opts: IngestOptions,
) -> IngestReport {
    let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let sources = list_sources(&paths).await.unwrap();
    ingest(store, sources, &opts, &()).await.unwrap()
}

async fn scalar_f64(store: &Store, sql: &str) -> f64 {
    let ctx = culprit_sql::session(store.clone()).await.unwrap();
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let col = b[0].column(0);
    match col.data_type() {
        arrow::datatypes::DataType::Int64 => {
            col.as_primitive::<arrow::datatypes::Int64Type>().value(0) as f64
        }
        _ => col.as_primitive::<arrow::datatypes::Float64Type>().value(0),
    }
}

/// Each format round-trips: the stored tables hold what the generator made.
#[tokio::test]
async fn round_trip_each_format() {
    let expected = culprit_sim::simulate(&culprit_sim::SimConfig::default());
    let blocked: f64 = expected
        .task_windows
        .column_by_name("blocked")
        .unwrap()
        .as_primitive::<arrow::datatypes::Float64Type>()
        .iter()
        .flatten()
        .sum();
    for format in ["parquet", "csv", "jsonl"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        generate(&dir, format);
        let store = Store::open(tmp.path().join("store").to_str().unwrap()).unwrap();
        let report = ingest_paths(&store, &[&dir], IngestOptions::default()).await;
        assert!(
            report.rejected.is_empty(),
            "{format}: {:?}",
            report.rejected
        );
        // queries, stages, tasks, task_windows, host_windows, record_lineage,
        // partition_latency.
        assert_eq!(report.files, 7, "{format}");
        for t in Table::ALL {
            let n = scalar_f64(&store, &format!("SELECT count(*) FROM {t}")).await;
            let want = expected.table(t).map_or(0, |b| b.num_rows());
            assert_eq!(n as usize, want, "{format} {t}");
        }
        let got = scalar_f64(&store, "SELECT sum(blocked) FROM task_windows").await;
        assert!(
            (got - blocked).abs() < 1e-6,
            "{format}: blocked {got} vs {blocked}"
        );
        // A timestamp survives exactly (microseconds), whatever the format.
        let launch = scalar_f64(
            &store,
            "SELECT arrow_cast(launch_time, 'Int64') FROM tasks WHERE task_id = 'q-victim-s0-t0'",
        )
        .await;
        let want = expected
            .tasks
            .column_by_name("launch_time")
            .unwrap()
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
            .value(
                expected
                    .tasks
                    .column(0)
                    .as_string::<i32>()
                    .iter()
                    .position(|v| v == Some("q-victim-s0-t0"))
                    .unwrap(),
            );
        assert_eq!(launch as i64, want, "{format}");
    }
}

/// Ingesting the same source twice adds nothing the second time.
#[tokio::test]
async fn reingest_adds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    generate(&dir, "parquet");
    let store = Store::open(tmp.path().join("store").to_str().unwrap()).unwrap();
    let first = ingest_paths(&store, &[&dir], IngestOptions::default()).await;
    assert_eq!(first.files, 7);
    let m1 = store.manifest().await.unwrap();
    let second = ingest_paths(&store, &[&dir], IngestOptions::default()).await;
    assert_eq!(second.duplicate_files, 7);
    assert!(second.rows.is_empty());
    assert_eq!(second.version, None);
    assert_eq!(store.manifest().await.unwrap(), m1);

    // The same tasks in another format: keyed rows are recognised as stored.
    let csv = tmp.path().join("csv");
    generate(&csv, "csv");
    let tasks_csv = csv.join("tasks.csv");
    let third = ingest_paths(&store, &[&tasks_csv], IngestOptions::default()).await;
    assert_eq!(third.already_stored, m1.rows_of(Table::Tasks) as usize);
    assert!(third.rows.is_empty(), "{:?}", third.rows);
}

/// A Parquet file is read before its digest is known only when no source
/// of its size was ingested: the size recorded is the file's length; a copy
/// read in the same ingest, a store whose sources have no size (written
/// before sizes were recorded) and a file of a stored size but other bytes
/// are each told apart by the digest.
#[tokio::test]
async fn sources_are_known_by_size_then_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    generate(&dir, "parquet");
    // The same bytes under another name: the same source.
    std::fs::copy(dir.join("tasks.parquet"), dir.join("tasks-copy.parquet")).unwrap();
    let store_path = tmp.path().join("store");
    let store = Store::open(store_path.to_str().unwrap()).unwrap();
    let first = ingest_paths(&store, &[&dir], IngestOptions::default()).await;
    assert_eq!((first.files, first.duplicate_files), (7, 1));
    let m = store.manifest().await.unwrap();
    assert_eq!(m.sources.len(), 7);
    for s in &m.sources {
        let len = std::fs::metadata(&s.name).unwrap().len();
        assert_eq!(s.size, Some(len), "{}", s.name);
    }
    let tasks = m.rows_of(Table::Tasks);

    // The store as an older version wrote it: no source has a size.
    let manifests = store_path.join("_culprit").join("manifests");
    let latest = std::fs::read_dir(&manifests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&latest).unwrap()).unwrap();
    for s in json["sources"].as_array_mut().unwrap() {
        assert!(s.as_object_mut().unwrap().remove("size").is_some());
    }
    std::fs::write(&latest, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    let store = Store::open(store_path.to_str().unwrap()).unwrap();
    assert!(store.manifest().await.unwrap().sources[0].size.is_none());
    let again = ingest_paths(&store, &[&dir], IngestOptions::default()).await;
    assert_eq!((again.files, again.duplicate_files), (0, 8));
    assert_eq!(again.version, None);

    // A file of a stored size but other bytes (one letter of the writer's
    // name in its footer): a new source, its rows each already stored.
    let mut bytes = std::fs::read(dir.join("tasks.parquet")).unwrap();
    let at = bytes
        .windows(7)
        .rposition(|w| w == b"parquet")
        .expect("the writer's name");
    bytes[at] = b'P';
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("tasks.parquet"), &bytes).unwrap();
    let other = other.join("tasks.parquet");
    // The store of no sizes: the digest is waited for, and differs.
    let old = Store::open(store_path.to_str().unwrap()).unwrap();
    let report = ingest_paths(&old, &[&other], IngestOptions::default()).await;
    assert_eq!((report.files, report.duplicate_files), (1, 0));
    assert_eq!(report.already_stored as u64, tasks);
    // A store of sizes: the other bytes first (read before their digest),
    // then the first file (of a size now stored: its digest waited for).
    let fresh = Store::open(tmp.path().join("fresh").to_str().unwrap()).unwrap();
    let report = ingest_paths(&fresh, &[&other], IngestOptions::default()).await;
    assert_eq!((report.files, report.duplicate_files), (1, 0));
    assert_eq!(report.rows.get("tasks"), Some(&tasks));
    let tasks_file = dir.join("tasks.parquet");
    let report = ingest_paths(&fresh, &[&tasks_file], IngestOptions::default()).await;
    assert_eq!((report.files, report.duplicate_files), (1, 0));
    assert_eq!(report.already_stored as u64, tasks);
    let sources = fresh.manifest().await.unwrap().sources.clone();
    assert_eq!(sources.len(), 2);
    assert_ne!(sources[0].key, sources[1].key);
    assert_eq!(sources[0].size, sources[1].size);
}

const TASKS_CSV: &str = "\
task_id,query_id,stage_id,host,launch_time,finish_time,ready_time,cpu_seconds
t1,q1,0,h1,2026-01-01T00:00:00Z,2026-01-01T00:00:10Z,2026-01-01T00:00:00Z,4
t2,q1,0,h1,2026-01-01T00:00:10Z,2026-01-01T00:00:05Z,,1
t3,q1,0,h1,2026-01-01T00:00:00Z,2026-01-01T00:00:10Z,,-1
t4,q1,0,,2026-01-01T00:00:00Z,2026-01-01T00:00:10Z,,1
t1,q1,0,h1,2026-01-01T00:00:00Z,2026-01-01T00:00:10Z,,1
t5,q1,0,h1,soon,2026-01-01T00:00:10Z,,1
t6,q1,0,h1,1767225600000,1767225602000,1767225599000,1
";

const WINDOWS_JSONL: &str = r#"{"task_id":"t1","window_start":"2026-01-01T00:00:00Z","window_end":"2026-01-01T00:00:05Z","resource":"disk_read","blocked":1.5,"acquired":100}
{"task_id":"nope","window_start":"2026-01-01T00:00:00Z","window_end":"2026-01-01T00:00:05Z","resource":"cpu","blocked":0,"acquired":1}
{"task_id":"t1","window_start":"2026-01-01T00:00:05Z","window_end":"2026-01-01T00:00:11Z","resource":"cpu","blocked":0,"acquired":1}
{"task_id":"t1","window_start":"2026-01-01T00:00:01Z","window_end":"2026-01-01T00:00:02Z","resource":"cpu","blocked":-1,"acquired":1}
{"task_id":"t1","window_start":"2026-01-01T00:00:01Z","window_end":"2026-01-01T00:00:02Z","resource":"gpu","blocked":0,"acquired":1}
{"task_id":"t1","window_start":"2026-01-01T00:00:03Z","window_end":"2026-01-01T00:00:02Z","resource":"cpu","blocked":0,"acquired":1}
{"task_id":"t1", this is not json
{"task_id":"t6","window_start":1767225599000,"window_end":1767225600000,"resource":"slots","blocked":1,"acquired":0}

{"task_id":"t6","window_start":1767225600000,"window_end":1767225601000,"resource":"network","blocked":0.5,"acquired":2e6,"extra":"ignored"}
"#;

/// Every rejection rule, with file, line and reason; the good rows still land.
#[tokio::test]
async fn rejections_name_file_line_and_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bad");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tasks.csv"), TASKS_CSV).unwrap();
    std::fs::write(dir.join("task_windows.jsonl"), WINDOWS_JSONL).unwrap();
    std::fs::write(
        dir.join("host_windows.csv"),
        "host,window_start,resource\nh1,2026-01-01T00:00:00Z,cpu\n",
    )
    .unwrap();
    let store = Store::open(tmp.path().join("store").to_str().unwrap()).unwrap();
    let report = ingest_paths(&store, &[&dir], IngestOptions::default()).await;

    let got: Vec<String> = report.rejected.iter().map(|r| r.to_string()).collect();
    let tasks = dir.join("tasks.csv").display().to_string();
    let windows = dir.join("task_windows.jsonl").display().to_string();
    let hosts = dir.join("host_windows.csv").display().to_string();
    let want = [
        format!("{tasks}: line 3: finish_time is before launch_time"),
        format!("{tasks}: line 4: negative cpu_seconds: -1"),
        format!("{tasks}: line 5: host is missing"),
        format!("{tasks}: line 6: duplicate key 't1' (first at {tasks}:line 2)"),
        format!("{tasks}: line 7: launch_time is not a time (RFC 3339 text or epoch milliseconds): 'soon'"),
        format!("{windows}: line 7: malformed JSON: key must be a string at line 1 column 18"),
        format!("{windows}: line 2: unknown task id 'nope'"),
        format!("{windows}: line 3: window outside its task 't1' [launch_time, finish_time]"),
        format!("{windows}: line 4: negative blocked: -1"),
        format!("{windows}: line 5: unknown resource 'gpu' (expected cpu, network, disk_read, disk_write, memory or slots)"),
        format!("{windows}: line 6: window_end is before window_start"),
        format!("{hosts}: missing required column 'window_end'"),
    ];
    for w in &want {
        assert!(
            got.contains(w),
            "missing rejection:\n  {w}\ngot:\n  {}",
            got.join("\n  ")
        );
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
    assert_eq!(report.rows.get("tasks"), Some(&2)); // t1 and t6
    assert_eq!(report.rows.get("task_windows"), Some(&3)); // t1 disk, t6 slots, t6 network
    assert!(report.version.is_some());

    // --strict rejects the whole batch.
    let strict_store = Store::open(tmp.path().join("strict").to_str().unwrap()).unwrap();
    let sources = list_sources(&[dir.display().to_string()]).await.unwrap();
    let err = ingest(
        &strict_store,
        sources,
        &IngestOptions {
            strict: true,
            ..Default::default()
        },
        &(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("12 rows rejected"), "{err}");
    assert_eq!(strict_store.manifest().await.unwrap().version, 0);
}

/// The command: exit 1 on rejections, a summary line, and `--table`.
#[test]
fn ingest_command_exit_codes_and_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let store = store.to_str().unwrap();
    let bad = tmp.path().join("my-tasks.csv");
    std::fs::write(&bad, TASKS_CSV).unwrap();
    // The name does not say the table.
    let out = run(&["ingest", "--store", store, bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot tell the table"), "{err}");

    let out = run(&[
        "ingest",
        "--store",
        store,
        "--table",
        "tasks",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 3: finish_time is before launch_time"),
        "{err}"
    );
    assert!(err.contains("1 files, rows: tasks 2; rejected 5"), "{err}");

    let csv = run_ok(&[
        "sql",
        "--store",
        store,
        "--format",
        "csv",
        "SELECT task_id FROM tasks ORDER BY task_id",
    ]);
    assert_eq!(csv, "task_id\nt1\nt6\n");
    let json = run_ok(&[
        "sql",
        "--store",
        store,
        "--format",
        "json",
        "SELECT count(*) AS n FROM tasks",
    ]);
    assert_eq!(json.trim(), r#"{"n":2}"#);
    let table = run_ok(&[
        "sql",
        "--store",
        store,
        "SELECT ratp_max(1, 30) * 30 AS one",
    ]);
    assert!(
        table.contains("| one |") && table.contains("(1 row)"),
        "{table}"
    );

    let out = run(&["ingest", "--store", store, "/nonexistent/path"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/path"));
    let out = run(&["sql", "--store", store, "SELECT * FROM nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}

/// The largest resident set of a finished child, in KiB (GNU time).
fn peak_rss_kib(stderr: &str) -> u64 {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("PEAK_RSS_KIB=")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in: {stderr}"))
}

/// A decompression bomb next to a real Spark log: the bomb (a zstd stream
/// of 1 GiB of zeros, 33 KB on disk) is rejected with its file name and
/// the cap, in bounded memory, and the real log is stored all the same.
#[test]
fn a_decompression_bomb_is_rejected_in_bounded_memory() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    let real =
        crate::common::test_data().join("spark/apache-spark/spark-events/app-20161116163331-0000");
    let text = std::fs::read_to_string(&real).unwrap();
    let task_ends = text
        .lines()
        .filter(|l| l.contains("\"SparkListenerTaskEnd\""))
        .count();
    assert!(task_ends > 0);
    std::fs::write(dir.join("app-20161116163331-0000"), &text).unwrap();
    let bomb = dir.join("app-bomb.zstd");
    {
        let mut enc =
            zstd::stream::write::Encoder::new(std::fs::File::create(&bomb).unwrap(), 3).unwrap();
        let zeros = vec![b' '; 1 << 20];
        for _ in 0..1024 {
            enc.write_all(&zeros).unwrap();
        }
        enc.finish().unwrap();
    }
    let on_disk = std::fs::metadata(&bomb).unwrap().len();
    assert!(on_disk < 1 << 20, "the bomb is small on disk: {on_disk}");

    let store = tmp.path().join("store");
    let out = std::process::Command::new("/usr/bin/time")
        .args([
            "-f",
            "PEAK_RSS_KIB=%M",
            env!("CARGO_BIN_EXE_culprit"),
            "ingest",
            "--store",
        ])
        .arg(&store)
        .args(["--max-decoded-mb", "64"])
        .arg(&dir)
        .output()
        .expect("GNU time (Debian's `time`) runs culprit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "rejections exit 1: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("app-bomb.zstd"))
        .unwrap_or_else(|| panic!("the bomb is named: {stderr}"));
    assert!(line.contains("more than 64 MiB"), "{line}");
    // The cap (64 MiB) plus the process itself; before the cap the whole
    // gigabyte was decoded first (1.1 GB).
    let rss_mb = peak_rss_kib(&stderr) / 1024;
    eprintln!("bomb ingest peak RSS: {rss_mb} MiB");
    assert!(rss_mb < 300, "peak RSS {rss_mb} MiB");
    // The real log was ingested: its TaskEnd events are its task rows.
    let n = run_ok(&[
        "sql",
        "--store",
        store.to_str().unwrap(),
        "--format",
        "csv",
        "SELECT count(*) AS n FROM tasks",
    ]);
    assert_eq!(
        n.lines().nth(1).unwrap().trim(),
        task_ends.to_string(),
        "{n}"
    );
}

/// A Spark event whose time cannot be stored (ms beyond what microseconds
/// since 1970 hold in 64 bits) is a rejected line with its reason, never
/// a wrapped or skipped time.
#[test]
fn an_overflowing_spark_time_is_a_rejected_line() {
    let tmp = tempfile::tempdir().unwrap();
    let real =
        crate::common::test_data().join("spark/apache-spark/spark-events/app-20161116163331-0000");
    let text = std::fs::read_to_string(&real).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let at = lines
        .iter()
        .position(|l| l.contains("\"SparkListenerTaskEnd\"") && l.contains("\"Launch Time\":"))
        .unwrap();
    let l = &lines[at];
    let start = l.find("\"Launch Time\":").unwrap() + "\"Launch Time\":".len();
    let end = start + l[start..].find([',', '}']).unwrap();
    lines[at] = format!("{}{}{}", &l[..start], i64::MAX, &l[end..]);
    let dir = tmp.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("app-20161116163331-0000"), lines.join("\n") + "\n").unwrap();
    let store = tmp.path().join("store");
    let out = run(&[
        "ingest",
        "--store",
        store.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let line_no = at + 1;
    assert!(
        stderr
            .lines()
            .any(|r| r.contains(&format!("line {line_no}")) && r.contains("out of range")),
        "line {line_no} rejected with its reason: {stderr}"
    );
}

const GROW_TASKS_CSV: &str = "\
task_id,query_id,stage_id,host,launch_time,finish_time
t1,q1,0,h1,2026-01-01T00:00:00Z,2026-01-01T00:00:10Z
t2,q2,0,h1,2026-01-01T00:00:00Z,2026-01-01T00:00:10Z
";

/// The data rows of a CSV text (its lines after the header), counted
/// without culprit.
fn csv_rows(text: &str) -> usize {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// The sum of one float column of a CSV text, read without culprit.
fn csv_sum(text: &str, column: &str) -> f64 {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let c = header.iter().position(|h| *h == column).unwrap();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split(',').nth(c).unwrap().parse::<f64>().unwrap())
        .sum()
}

/// Issue #16: window rows have an identity (task_windows: task, resource,
/// detail, window; host_windows: host, resource, window). Ingesting a
/// folder again after its window files grew stores only the new rows; a
/// row whose identity is stored is skipped even when its values differ
/// (the stored row stands, as for keyed tables); the same identity twice
/// in one ingest is a rejected duplicate.
#[tokio::test]
async fn ingest_of_a_grown_window_file_adds_only_new_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tasks.csv"), GROW_TASKS_CSV).unwrap();
    let mut windows = "task_id,window_start,window_end,resource,detail,blocked,acquired\n\
        t1,2026-01-01T00:00:00Z,2026-01-01T00:00:05Z,disk_read,,0.5,100\n\
        t1,2026-01-01T00:00:00Z,2026-01-01T00:00:05Z,disk_read,storage,0.25,10\n\
        t2,2026-01-01T00:00:00Z,2026-01-01T00:00:05Z,disk_read,,0.75,50\n"
        .to_string();
    let mut hosts = "host,window_start,window_end,resource,capacity,used\n\
        h1,2026-01-01T00:00:00Z,2026-01-01T00:00:05Z,disk_read,1000,150\n\
        h1,2026-01-01T00:00:05Z,2026-01-01T00:00:10Z,disk_read,1000,20\n"
        .to_string();
    std::fs::write(dir.join("task_windows.csv"), &windows).unwrap();
    std::fs::write(dir.join("host_windows.csv"), &hosts).unwrap();
    let store = Store::open(tmp.path().join("store").to_str().unwrap()).unwrap();
    let first = ingest_paths(&store, &[&dir], IngestOptions::default()).await;
    assert!(first.rejected.is_empty(), "{:?}", first.rejected);
    let count = |t: &'static str| {
        let store = store.clone();
        async move { scalar_f64(&store, &format!("SELECT count(*) FROM {t}")).await as usize }
    };
    assert_eq!(count("task_windows").await, csv_rows(&windows));
    assert_eq!(count("host_windows").await, csv_rows(&hosts));

    // The files grow by one row each; the folder is ingested again.
    windows.push_str("t2,2026-01-01T00:00:05Z,2026-01-01T00:00:10Z,network,,0.125,7\n");
    hosts.push_str("h1,2026-01-01T00:00:00Z,2026-01-01T00:00:10Z,network,1e9,7\n");
    std::fs::write(dir.join("task_windows.csv"), &windows).unwrap();
    std::fs::write(dir.join("host_windows.csv"), &hosts).unwrap();
    let second = ingest_paths(&store, &[&dir], IngestOptions::default()).await;
    assert!(second.rejected.is_empty(), "{:?}", second.rejected);
    assert_eq!(count("task_windows").await, csv_rows(&windows));
    assert_eq!(count("host_windows").await, csv_rows(&hosts));
    assert_eq!(second.rows.get("task_windows"), Some(&1), "{second:?}");
    assert_eq!(second.rows.get("host_windows"), Some(&1), "{second:?}");
    assert_eq!(second.already_stored, 3 + 2, "{second:?}");
    let blocked = scalar_f64(&store, "SELECT sum(blocked) FROM task_windows").await;
    assert!(
        (blocked - csv_sum(&windows, "blocked")).abs() < 1e-9,
        "{blocked}"
    );
    let used = scalar_f64(&store, "SELECT sum(used) FROM host_windows").await;
    assert!((used - csv_sum(&hosts, "used")).abs() < 1e-9, "{used}");

    // Another file with a stored identity but other values: the stored row
    // stands; with a new detail it is a new row.
    let other = tmp.path().join("task_windows.csv");
    std::fs::write(
        &other,
        "task_id,window_start,window_end,resource,detail,blocked,acquired\n\
         t1,2026-01-01T00:00:00Z,2026-01-01T00:00:05Z,disk_read,,9,9\n\
         t1,2026-01-01T00:00:00Z,2026-01-01T00:00:05Z,disk_read,lock,0.5,0\n",
    )
    .unwrap();
    let third = ingest_paths(&store, &[&other], IngestOptions::default()).await;
    assert_eq!(third.already_stored, 1, "{third:?}");
    assert_eq!(third.rows.get("task_windows"), Some(&1), "{third:?}");
    let blocked = scalar_f64(&store, "SELECT sum(blocked) FROM task_windows").await;
    assert!(
        (blocked - csv_sum(&windows, "blocked") - 0.5).abs() < 1e-9,
        "{blocked}"
    );

    // One identity twice in one ingest: the second is rejected, naming the first.
    let dup = tmp.path().join("dup");
    std::fs::create_dir_all(&dup).unwrap();
    let dup_file = dup.join("host_windows.csv");
    std::fs::write(
        &dup_file,
        "host,window_start,window_end,resource,capacity\n\
         h2,2026-01-01T00:00:00Z,2026-01-01T00:00:05Z,cpu,8\n\
         h2,2026-01-01T00:00:00Z,2026-01-01T00:00:05Z,cpu,8\n",
    )
    .unwrap();
    let fourth = ingest_paths(&store, &[&dup], IngestOptions::default()).await;
    let got: Vec<String> = fourth.rejected.iter().map(|r| r.to_string()).collect();
    let f = dup_file.display().to_string();
    assert_eq!(
        got,
        [format!(
            "{f}: line 3: duplicate window 'h2/cpu//2026-01-01T00:00:00Z/2026-01-01T00:00:05Z' \
             (first at {f}:line 2)"
        )]
    );
    assert_eq!(fourth.rows.get("host_windows"), Some(&1), "{fourth:?}");
}

/// Reads a child's stderr lines into a channel.
pub(crate) fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line that contains `want`; all lines seen go to `seen`.
pub(crate) fn wait_line(
    rx: &std::sync::mpsc::Receiver<String>,
    want: &str,
    seen: &mut Vec<String>,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let hit = line.contains(want);
                seen.push(line);
                if hit {
                    return;
                }
            }
            Err(_) => panic!(
                "waited 60 s for '{want}'; the watcher said:\n{}",
                seen.join("\n")
            ),
        }
    }
}

fn interrupt(mut child: std::process::Child) {
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "watch did not stop");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Issue #16: `ingest --watch` on a growing JSON lines and a growing CSV
/// file stores each row once: every look that finds the files grown adds
/// only the rows not yet stored.
#[test]
fn watch_of_growing_window_files_adds_only_new_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("live");
    std::fs::create_dir_all(&dir).unwrap();
    let store = tmp.path().join("store").display().to_string();
    std::fs::write(dir.join("tasks.csv"), GROW_TASKS_CSV).unwrap();
    let jsonl = dir.join("task_windows.jsonl");
    let csv = dir.join("host_windows.csv");
    let window = |task: &str, s: u32, resource: &str| {
        format!(
            "{{\"task_id\":\"{task}\",\"window_start\":\"2026-01-01T00:00:0{s}Z\",\
             \"window_end\":\"2026-01-01T00:00:0{}Z\",\"resource\":\"{resource}\",\
             \"blocked\":0.25,\"acquired\":1}}\n",
            s + 1
        )
    };
    let mut windows = window("t1", 0, "cpu") + &window("t2", 0, "cpu") + &window("t1", 1, "cpu");
    let mut hosts = "host,window_start,window_end,resource,capacity\n\
        h1,2026-01-01T00:00:00Z,2026-01-01T00:00:01Z,cpu,8\n"
        .to_string();
    std::fs::write(&jsonl, &windows).unwrap();
    std::fs::write(&csv, &hosts).unwrap();
    let mut watch = crate::common::culprit()
        .args(["ingest", "--watch", "--interval", "0.2", "--store", &store])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut watch);
    let mut seen = Vec::new();
    let counts = || {
        run_ok(&[
            "sql",
            "--store",
            &store,
            "--format",
            "csv",
            "SELECT (SELECT count(*) FROM task_windows) w, (SELECT count(*) FROM host_windows) h",
        ])
        .lines()
        .last()
        .unwrap()
        .to_string()
    };
    let want = |w: &str, h: &str| {
        format!(
            "{},{}",
            w.lines().filter(|l| !l.is_empty()).count(),
            csv_rows(h)
        )
    };
    wait_line(&rx, "(store version 1)", &mut seen);
    assert_eq!(counts(), want(&windows, &hosts), "{seen:#?}");
    // Each file grows (replaced whole, as an appending writer would leave
    // it), one after the other and then both at once. Once the store holds
    // as many rows as the files, it must hold no more.
    let put = |path: &std::path::Path, text: &str| {
        let tmp_file = tmp.path().join("next");
        std::fs::write(&tmp_file, text).unwrap();
        std::fs::rename(&tmp_file, path).unwrap();
    };
    for (step, (w, h)) in [(true, false), (false, true), (true, true)]
        .into_iter()
        .enumerate()
    {
        let s = step as u32 + 2;
        if w {
            windows.push_str(&window("t2", s, "network"));
            put(&jsonl, &windows);
        }
        if h {
            hosts.push_str(&format!(
                "h1,2026-01-01T00:00:0{s}Z,2026-01-01T00:00:0{}Z,cpu,8\n",
                s + 1
            ));
            put(&csv, &hosts);
        }
        let target = want(&windows, &hosts);
        let (tw, th) = target.split_once(',').unwrap();
        let (tw, th): (u64, u64) = (tw.parse().unwrap(), th.parse().unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let got = loop {
            let got = counts();
            let (w, h) = got.split_once(',').unwrap();
            if w.parse::<u64>().unwrap() >= tw && h.parse::<u64>().unwrap() >= th {
                break got;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "step {step}: waited for {target}, at {got}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        assert_eq!(got, target, "step {step}");
    }
    interrupt(watch);
}
