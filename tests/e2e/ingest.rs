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
