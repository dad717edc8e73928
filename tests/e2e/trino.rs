//! Trino and Presto query JSON written by real coordinators
//! (../shared/data/trino): counts and values checked against numbers read
//! off the files (python's json module, written here by hand), the mapping
//! of docs/trino.md recomputed from the JSON where a value is derived,
//! `culprit collect trino` against a recorded coordinator
//! (tests/trino/coordinator.py serving the real QueryInfo), and a mixed
//! cluster: Spark and Trino on the same hosts with host metrics in one
//! store, where each blames the other by host and time.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, TimestampMicrosecondType};
use culprit_store::Store;
use serde_json::Value;

use crate::common::{culprit, repo_root, run, run_ok, test_data};
use crate::spark::{count, ingest_into, query};

fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

fn trino(rel: &str) -> PathBuf {
    let path = test_data().join("trino").join(rel);
    assert!(
        path.exists(),
        "the real Trino test data is missing: no {} (set CULPRIT_TEST_DATA to the folder holding trino/)",
        path.display()
    );
    path
}

const QUERY_INFO: &str = "prestodb-pbench/cmd/loadjson/trino_query_info.json";
const EVENTS: &str = "prestodb-pbench/cmd/loadeljson";
const PAYLOAD: &str = "rchukh-trino-history-server/backend/samples/payload.json";
const OPERATORS: &str = "rchukh-trino-history-server/backend/samples/operatorSummaries.json";
const QUERY_ID: &str = "20240704_153137_00011_c9cak";

/// 2024-07-04T15:31:<s>Z in microseconds.
fn at(s: f64) -> i64 {
    1_720_107_060_000_000 + (s * 1e6).round() as i64
}

fn floats(b: &[RecordBatch], c: usize) -> Vec<Option<f64>> {
    b.iter()
        .flat_map(|b| {
            let a = b.column(c).as_primitive::<Float64Type>();
            (0..a.len()).map(move |i| a.is_valid(i).then(|| a.value(i)))
        })
        .collect()
}

/// A text column (plain or dictionary-encoded, as `blame()` gives them).
fn texts(b: &[RecordBatch], c: usize) -> Vec<Option<String>> {
    b.iter()
        .flat_map(|b| {
            let col = arrow::compute::cast(b.column(c), &arrow::datatypes::DataType::Utf8).unwrap();
            let a = col.as_string::<i32>().clone();
            (0..a.len())
                .map(|i| a.is_valid(i).then(|| a.value(i).to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn micros(b: &[RecordBatch], c: usize) -> Vec<Option<i64>> {
    b.iter()
        .flat_map(|b| {
            let a = b.column(c).as_primitive::<TimestampMicrosecondType>();
            (0..a.len()).map(move |i| a.is_valid(i).then(|| a.value(i)))
        })
        .collect()
}

async fn one_float(store: &Store, sql: &str) -> f64 {
    floats(&query(store, sql).await, 0)[0].unwrap_or(0.0)
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: got {got}, want {want}"
    );
}

/// The real QueryInfo (Trino 448, TPC-DS q03 on 8 workers): every count
/// and value as the file says.
#[tokio::test]
async fn query_info_ingests_with_exact_counts_and_values() {
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(&store, &[&trino(QUERY_INFO)]).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(report.trino_queries, 1);
    assert!(
        report.summary().contains("(1 Trino/Presto queries)"),
        "{}",
        report.summary()
    );
    // 1 query, 5 stages, 19 tasks on 8 nodes (MANIFEST.md: "5 stages, 19
    // tasks on 8 nodes").
    assert_eq!(count(&store, "SELECT count(*) FROM queries").await, 1);
    assert_eq!(count(&store, "SELECT count(*) FROM stages").await, 5);
    assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, 19);
    let hosts = query(&store, "SELECT DISTINCT host FROM tasks ORDER BY host").await;
    let hosts: Vec<String> = texts(&hosts, 0).into_iter().flatten().collect();
    assert_eq!(
        hosts,
        [
            "10.0.1.10",
            "10.0.1.3",
            "10.0.1.4",
            "10.0.1.5",
            "10.0.1.6",
            "10.0.1.7",
            "10.0.1.8",
            "10.0.1.9"
        ]
    );

    // The query: session.user, resourceGroupId, queryStats times, state.
    let q = query(
        &store,
        "SELECT query_id, \"user\", pool, status, submit_time, start_time, end_time, sql_text, tags \
         FROM queries",
    )
    .await;
    assert_eq!(texts(&q, 0), [some(QUERY_ID)]);
    assert_eq!(texts(&q, 1), [some("presto")]);
    assert_eq!(texts(&q, 2), [some("global")]);
    assert_eq!(texts(&q, 3), [some("succeeded")]);
    assert_eq!(micros(&q, 4), [Some(at(37.047))]);
    assert_eq!(micros(&q, 5), [Some(at(37.202))]);
    assert_eq!(micros(&q, 6), [Some(at(49.949))]);
    assert!(texts(&q, 7)[0]
        .as_deref()
        .unwrap()
        .starts_with("--TPC-DS Q3\nselect dt.d_year"));
    let tags: Value = serde_json::from_str(texts(&q, 8)[0].as_deref().unwrap()).unwrap();
    assert_eq!(tags["source"], "trino");
    assert_eq!(tags["engine_version"], "448");
    assert_eq!(tags["client_source"], "ds_power_query_03");
    assert_eq!(tags["coordinator"], "10.0.1.20:8080");
    close(
        tags["total_blocked_time"].as_f64().unwrap(),
        47.57 * 60.0,
        "total blocked",
    );
    close(tags["queued_time"].as_f64().unwrap(), 234.99e-6, "queued");

    // Stages: the sub-stages of a stage are its parents (they feed it).
    let s = query(
        &store,
        "SELECT stage_id, parent_ids, name FROM stages ORDER BY stage_id",
    )
    .await;
    assert_eq!(
        texts(&s, 0).into_iter().flatten().collect::<Vec<_>>(),
        ["0", "1", "2", "3", "4"]
    );
    assert_eq!(
        texts(&s, 1),
        [some("1"), some("2"), some("3,4"), None, None]
    );
    assert_eq!(texts(&s, 2)[0].as_deref(), Some("Fragment 0 [SINGLE]"));

    // One task as the file gives it: stage 2 task 0 on 10.0.1.8 (node
    // 01b6a8a2f889), created 37.515, ended 49.933, 35.47 s of CPU, 3231199986
    // bytes read from storage, 58319 from other tasks, queued 2.36 ms.
    let t = query(
        &store,
        &format!(
            "SELECT host, executor_id, launch_time, finish_time, ready_time, cpu_seconds, \
             input_bytes, shuffle_read_bytes, scheduler_delay, stage_id, query_id, status \
             FROM tasks WHERE task_id = '{QUERY_ID}.2.0.0'"
        ),
    )
    .await;
    assert_eq!(texts(&t, 0), [some("10.0.1.8")]);
    assert_eq!(texts(&t, 1), [some("01b6a8a2f889")]);
    assert_eq!(micros(&t, 2), [Some(at(37.515))]);
    assert_eq!(micros(&t, 3), [Some(at(49.933))]);
    // The query's 234.99 us in its resource group's queue, before the task.
    assert_eq!(micros(&t, 4), [Some(at(37.515) - 235)]);
    assert_eq!(floats(&t, 5), [Some(35.47)]);
    assert_eq!(floats(&t, 6), [Some(3231199986.0)]);
    assert_eq!(floats(&t, 7), [Some(58319.0)]);
    close(floats(&t, 8)[0].unwrap(), 2.36e-3, "task queued time");
    assert_eq!(texts(&t, 9), [some("2")]);
    assert_eq!(texts(&t, 10), [some(QUERY_ID)]);
    assert_eq!(texts(&t, 11), [some("succeeded")]);

    // Totals over the 19 tasks (sums of the tasks' totalCpuTime,
    // physicalInputDataSize, internalNetworkInputDataSize).
    close(
        one_float(&store, "SELECT sum(cpu_seconds) FROM tasks").await,
        233.67643,
        "cpu",
    );
    close(
        one_float(&store, "SELECT sum(input_bytes) FROM tasks").await,
        25754984835.0,
        "input",
    );
    close(
        one_float(&store, "SELECT sum(shuffle_read_bytes) FROM tasks").await,
        13745457.0,
        "exchange input",
    );

    // Windows, summed over every pipeline of every task (python over the
    // file): CPU acquired 233.68286436 s (the pipelines' totalCpuTime);
    // drivers queued 4148.059971877 s (the pipelines' queuedTime totals,
    // ns); exchanges blocked 859.5 s (inputBlockedTime of the input
    // pipelines whose source is an ExchangeOperator, which is every task's
    // inputBlockedTime here); storage read wait 2069.27278 s
    // (physicalInputReadTime, at most scheduled - cpu per pipeline); and
    // 0.15603489 s on a thread neither computing nor reading.
    let w = query(
        &store,
        "SELECT resource, coalesce(detail, ''), sum(blocked), sum(acquired), count(*) \
         FROM task_windows GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .await;
    let rows: Vec<(String, String, f64, f64)> = texts(&w, 0)
        .into_iter()
        .zip(texts(&w, 1))
        .zip(floats(&w, 2).into_iter().zip(floats(&w, 3)))
        .map(|((r, d), (b, a))| (r.unwrap(), d.unwrap(), b.unwrap(), a.unwrap()))
        .collect();
    let get = |r: &str, d: &str| {
        rows.iter()
            .find(|x| x.0 == r && x.1 == d)
            .map(|x| (x.2, x.3))
            .unwrap_or_else(|| panic!("no {r}/{d} rows: {rows:?}"))
    };
    close(get("cpu", "os_sched").1, 233.68286436, "cpu acquired");
    close(get("cpu", "os_sched").0, 0.15603489, "os wait");
    close(get("cpu", "queued").0, 4148.059971877, "drivers queued");
    close(get("network", "exchange").0, 859.5, "exchange blocked");
    close(get("network", "exchange").1, 13745457.0, "exchange bytes");
    close(get("disk_read", "").0, 2069.27278, "read wait");
    close(get("disk_read", "").1, 25754984835.0, "bytes read");
    // Output buffers never filled: no output_buffer rows.
    assert!(!rows.iter().any(|x| x.1 == "output_buffer"), "{rows:?}");
    // The tasks' totals say the same as their windows.
    close(
        one_float(&store, "SELECT sum(cpu_blocked) FROM tasks").await,
        4148.059971877 + 0.15603489,
        "cpu_blocked",
    );
    close(
        one_float(&store, "SELECT sum(network_blocked) FROM tasks").await,
        859.5,
        "network_blocked",
    );
    close(
        one_float(&store, "SELECT sum(disk_read_blocked) FROM tasks").await,
        2069.27278,
        "disk_read_blocked",
    );

    // Memory and GC, per task against the file: the `memory`/`user`
    // window over the task's run acquires its peakUserMemoryReservation,
    // and gc_seconds is its fullGcTime (0 in every task here).
    let info: Value = serde_json::from_slice(&std::fs::read(trino(QUERY_INFO)).unwrap()).unwrap();
    let mut stack = vec![&info["outputStage"]];
    let mut file_tasks = Vec::new();
    while let Some(stage) = stack.pop() {
        file_tasks.extend(stage["tasks"].as_array().unwrap());
        stack.extend(stage["subStages"].as_array().unwrap());
    }
    assert_eq!(file_tasks.len(), 19);
    let m = query(
        &store,
        "SELECT t.task_id, w.acquired, t.gc_seconds, \
         CAST(w.window_start = t.launch_time AND w.window_end = t.finish_time AS VARCHAR) \
         FROM tasks t JOIN task_windows w ON t.task_id = w.task_id \
         WHERE w.resource = 'memory' AND w.detail = 'user' ORDER BY 1",
    )
    .await;
    let (ids, acquired, gc, spans) = (texts(&m, 0), floats(&m, 1), floats(&m, 2), texts(&m, 3));
    assert_eq!(ids.len(), 19, "{ids:?}");
    let mut peak_total = 0.0;
    for t in file_tasks {
        let id = t["taskStatus"]["taskId"].as_str().unwrap();
        let i = ids
            .iter()
            .position(|x| x.as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no memory window of {id}"));
        let peak = t["stats"]["peakUserMemoryReservation"].as_str().unwrap();
        let bytes: f64 = peak.strip_suffix('B').unwrap().parse().unwrap();
        peak_total += bytes;
        assert_eq!(acquired[i], Some(bytes), "{id} peak user memory {peak}");
        assert_eq!(spans[i].as_deref(), Some("true"), "{id} memory window span");
        let full_gc = t["taskStatus"]["fullGcTime"].as_str().unwrap();
        let gc_s: f64 = full_gc.strip_suffix("ns").unwrap().parse::<f64>().unwrap() / 1e9;
        assert_eq!(gc[i], Some(gc_s), "{id} fullGcTime {full_gc}");
    }
    assert!(peak_total > 4e9, "{peak_total}");

    // Blame conserves: the query's blame is its blocked seconds (cpu
    // 4148.22, network 859.5, disk read 2069.27) plus its tasks' slot waits
    // (19 x 235 us).
    let blame = one_float(
        &store,
        &format!("SELECT sum(blame_seconds) FROM culprits('{QUERY_ID}', 'victim_stages=all')"),
    )
    .await;
    close(
        blame,
        4148.059971877 + 0.15603489 + 859.5 + 2069.27278 + 19.0 * 235e-6,
        "blame",
    );

    // Read again, or a byte-different copy of it: nothing new.
    let again = ingest_into(&store, &[&trino(QUERY_INFO)]).await;
    assert_eq!(again.duplicate_files, 1);
    assert!(again.rows.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("copy.json");
    let v: Value = serde_json::from_slice(&std::fs::read(trino(QUERY_INFO)).unwrap()).unwrap();
    std::fs::write(&copy, v.to_string()).unwrap();
    let again = ingest_into(&store, &[&copy]).await;
    assert_eq!(again.duplicate_files, 0);
    assert!(again.rows.is_empty(), "{:?}", again.rows);
    assert!(again.already_stored > 0);
}

/// Presto's event-listener dumps (pbench's JSON lines): queries and their
/// stage statistics, no tasks, and a note saying so. The folder holds four
/// distinct queries (two files repeat queries of the others).
#[tokio::test]
async fn presto_completed_events() {
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(
        &store,
        &[&trino(&format!("{EVENTS}/202506160849_0_error.ndjson"))],
    )
    .await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(count(&store, "SELECT count(*) FROM queries").await, 1);
    assert_eq!(count(&store, "SELECT count(*) FROM stages").await, 5);
    assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, 0);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("20250616_084808_00027_ux3a6")
                && n.contains("no tasks")
                && n.contains("5 stages")),
        "{:?}",
        report.notes
    );
    let q = query(
        &store,
        "SELECT query_id, \"user\", pool, status, submit_time, start_time, end_time, tags FROM queries",
    )
    .await;
    assert_eq!(texts(&q, 0), [some("20250616_084808_00027_ux3a6")]);
    assert_eq!(texts(&q, 1), [some("presto")]);
    assert_eq!(texts(&q, 2), [some("global")]);
    assert_eq!(texts(&q, 3), [some("succeeded")]);
    // createTime 1750063688.759, executionStartTime 1750063689.069, endTime
    // 1750063756.554 (epoch seconds).
    assert_eq!(micros(&q, 4), [Some(1_750_063_688_759_000)]);
    assert_eq!(micros(&q, 5), [Some(1_750_063_689_069_000)]);
    assert_eq!(micros(&q, 6), [Some(1_750_063_756_554_000)]);
    let tags: Value = serde_json::from_str(texts(&q, 7)[0].as_deref().unwrap()).unwrap();
    assert_eq!(tags["source"], "presto");
    assert_eq!(tags["engine_version"], "0.282");
    assert_eq!(tags["cpu_time"], 371.792); // cpuTimeMillis 371792
    assert_eq!(tags["tasks_known"], false);
    // Stage 0: 1 task, 209.78 ms scheduled, 19.16 ms CPU, 36.76 min blocked.
    let s = query(
        &store,
        "SELECT stage_id, attrs FROM stages ORDER BY stage_id",
    )
    .await;
    assert_eq!(
        texts(&s, 0).into_iter().flatten().collect::<Vec<_>>(),
        ["0", "1", "2", "3", "4"]
    );
    let a: Value = serde_json::from_str(texts(&s, 1)[0].as_deref().unwrap()).unwrap();
    assert_eq!(a["tasks"], 1.0);
    close(
        a["total_scheduled_time"].as_f64().unwrap(),
        0.20978,
        "scheduled",
    );
    close(a["total_cpu_time"].as_f64().unwrap(), 0.01916, "cpu");
    close(
        a["total_blocked_time"].as_f64().unwrap(),
        36.76 * 60.0,
        "blocked",
    );

    // The whole folder: 00027, 00030, 00031 (both SYNTAX_ERROR), 00028.
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(&store, &[&trino(EVENTS)]).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(report.files, 4);
    let q = query(
        &store,
        "SELECT query_id, status, tags FROM queries ORDER BY query_id",
    )
    .await;
    assert_eq!(
        texts(&q, 0).into_iter().flatten().collect::<Vec<_>>(),
        [
            "20250616_084808_00027_ux3a6",
            "20250616_084809_00028_ux3a6",
            "20250616_085426_00030_ux3a6",
            "20250616_085452_00031_ux3a6"
        ]
    );
    assert_eq!(
        texts(&q, 1).into_iter().flatten().collect::<Vec<_>>(),
        ["succeeded", "succeeded", "failed", "failed"]
    );
    let tags: Value = serde_json::from_str(texts(&q, 2)[2].as_deref().unwrap()).unwrap();
    assert_eq!(tags["error_code"], "SYNTAX_ERROR");
    assert_eq!(count(&store, "SELECT count(*) FROM stages").await, 5);

    // Values, against the files read here (serde_json, not the ingest):
    // every field of every completed event of test_success, test_error
    // and 202506160854_0, where the folder's other copies of the query
    // (the same query id in another file) say the same.
    let stored = query(
        &store,
        "SELECT query_id, \"user\", pool, status, submit_time, start_time, end_time, tags \
         FROM queries ORDER BY query_id",
    )
    .await;
    let ids = texts(&stored, 0);
    let row = |id: &str| ids.iter().position(|x| x.as_deref() == Some(id)).unwrap();
    let events = completed_events(&trino(EVENTS));
    let mut checked = std::collections::BTreeSet::new();
    for file in [
        "test_success.ndjson",
        "test_error.ndjson",
        "202506160854_0.ndjson",
    ] {
        for (id, want) in events.iter().filter(|e| e.1.file == file) {
            let copies: Vec<&Expected> =
                events.iter().filter(|e| &e.0 == id).map(|e| &e.1).collect();
            let agree = |f: &dyn Fn(&Expected) -> Value| copies.iter().all(|c| f(c) == f(want));
            let i = row(id);
            let tags: Value =
                serde_json::from_str(texts(&stored, 7)[i].as_deref().unwrap()).unwrap();
            let got: Vec<(&str, Value)> = vec![
                ("user", texts(&stored, 1)[i].clone().into()),
                ("pool", texts(&stored, 2)[i].clone().into()),
                ("status", texts(&stored, 3)[i].clone().into()),
                ("submit_time", micros(&stored, 4)[i].into()),
                ("start_time", micros(&stored, 5)[i].into()),
                ("end_time", micros(&stored, 6)[i].into()),
            ];
            for (name, value) in got {
                let field = |e: &Expected| e.columns[name].clone();
                if agree(&field) {
                    assert_eq!(value, field(want), "{file} {id} {name}");
                    checked.insert((id.clone(), name.to_string()));
                }
            }
            for (tag, value) in &want.tags {
                let field = |e: &Expected| e.tags.get(tag).cloned().unwrap_or(Value::Null);
                if agree(&field) {
                    match (tags[tag].as_f64(), value.as_f64()) {
                        (Some(g), Some(w)) => close(g, w, &format!("{file} {id} tag {tag}")),
                        _ => assert_eq!(&tags[tag], value, "{file} {id} tag {tag}"),
                    }
                    checked.insert((id.clone(), tag.clone()));
                }
            }
        }
    }
    // 00028 (test_success alone) and 00031 (202506160854_0 alone) are
    // checked in full: 00028's cpuTimeMillis 1000 is 1 s of cpu_time.
    for (id, n) in [
        ("20250616_084809_00028_ux3a6", 22),
        ("20250616_085452_00031_ux3a6", 22),
    ] {
        let fields = checked.iter().filter(|c| c.0 == id).count();
        assert!(fields >= n, "{id}: {fields} fields checked: {checked:?}");
    }
    let t: Value = serde_json::from_str(
        texts(&stored, 7)[row("20250616_084809_00028_ux3a6")]
            .as_deref()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(t["cpu_time"], 1.0);
    assert!(checked.len() > 60, "{}", checked.len());
}

/// What a completed event of pbench's dumps says, read by the test.
struct Expected {
    file: String,
    /// query columns: user, pool, status, submit_time, start_time, end_time
    columns: std::collections::BTreeMap<&'static str, Value>,
    /// tags: the wrapper's durations in seconds, the statistics' sizes, the
    /// cluster and error code
    tags: std::collections::BTreeMap<String, Value>,
}

/// Every `queryCompletedEvent` line of the folder's files, by query id.
fn completed_events(dir: &Path) -> Vec<(String, Expected)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let Ok(w) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let e = &w["queryCompletedEvent"];
            let Some(id) = e["metadata"]["queryId"].as_str() else {
                continue;
            };
            let us = |k: &str| Value::from(e[k].as_f64().map(|s| (s * 1e6).round() as i64));
            let ctx = &e["context"];
            let pool = ctx["resourceGroupId"].as_array().map(|a| {
                a.iter()
                    .map(|x| x.as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(".")
            });
            let status = match e["metadata"]["queryState"].as_str().unwrap() {
                "FINISHED" => "succeeded",
                "FAILED" => "failed",
                other => panic!("{file}: state {other}"),
            };
            let columns = std::collections::BTreeMap::from([
                ("user", ctx["user"].clone()),
                ("pool", Value::from(pool)),
                ("status", Value::from(status)),
                ("submit_time", us("createTime")),
                ("start_time", us("executionStartTime")),
                ("end_time", us("endTime")),
            ]);
            let mut tags = std::collections::BTreeMap::new();
            for (tag, millis) in [
                ("cpu_time", "cpuTimeMillis"),
                ("wall_time", "wallTimeMillis"),
                ("queued_time", "queuedTimeMillis"),
                ("analysis_time", "analysisTimeMillis"),
            ] {
                tags.insert(
                    tag.to_string(),
                    Value::from(w[millis].as_f64().unwrap() / 1e3),
                );
            }
            for (tag, key) in [
                ("peak_user_memory_bytes", "peakUserMemoryBytes"),
                (
                    "peak_total_non_revocable_memory_bytes",
                    "peakTotalNonRevocableMemoryBytes",
                ),
                ("peak_task_user_memory", "peakTaskUserMemory"),
                ("peak_task_total_memory", "peakTaskTotalMemory"),
                ("total_bytes", "totalBytes"),
                ("output_bytes", "outputBytes"),
                ("written_output_bytes", "writtenOutputBytes"),
                ("cumulative_memory", "cumulativeMemory"),
                ("completed_splits", "completedSplits"),
            ] {
                let x = e["statistics"][key].as_f64();
                assert!(x.is_some(), "{file} {id}: statistics.{key}");
                tags.insert(tag.to_string(), Value::from(x));
            }
            tags.insert("cluster".into(), w["clusterName"].clone());
            tags.insert(
                "error_code".into(),
                e["failureInfo"]["errorCode"]["name"].clone(),
            );
            tags.insert("engine_version".into(), ctx["serverVersion"].clone());
            out.push((
                id.to_string(),
                Expected {
                    file: file.clone(),
                    columns,
                    tags,
                },
            ));
        }
    }
    out
}

/// The stage tree of a Trino QueryCompletedEvent (its `payload`, saved
/// alone): 3 stages, 5 tasks on one node; inside a completed event it gives
/// the same tasks. Operator statistics alone are no telemetry, and say so.
#[tokio::test]
async fn trino_completed_event_payload() {
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(&store, &[&trino(PAYLOAD)]).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(count(&store, "SELECT count(*) FROM queries").await, 1);
    assert_eq!(count(&store, "SELECT count(*) FROM stages").await, 3);
    assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, 5);
    let t = query(&store, "SELECT DISTINCT host, query_id FROM tasks").await;
    assert_eq!(texts(&t, 0), [some("192.168.1.133")]);
    assert_eq!(texts(&t, 1), [some("20240421_124821_00036_ig9ch")]);
    // 1.74 + 12.56 + 7.58 + 6.04 + 78.71 ms of CPU; exchanges blocked 6.97
    // + 3.58 + 17.36 + 18.63 ms.
    close(
        one_float(&store, "SELECT sum(cpu_seconds) FROM tasks").await,
        0.10663,
        "cpu",
    );
    close(
        one_float(
            &store,
            "SELECT sum(blocked) FROM task_windows WHERE detail = 'exchange'",
        )
        .await,
        0.04654,
        "exchange",
    );

    // The same tree as the payload of a completed event (as Trino's
    // listener writes it: JSON text in metadata.payload).
    let tmp = tempfile::tempdir().unwrap();
    let event = serde_json::json!({
        "metadata": {
            "queryId": "20240421_124821_00036_ig9ch",
            "queryState": "FINISHED",
            "query": "SELECT c_birth_country, avg(c_birth_year) ...",
            "payload": std::fs::read_to_string(trino(PAYLOAD)).unwrap(),
        },
        "statistics": {"cpuTime": 0.107, "wallTime": 0.2, "queuedTime": 0.001},
        "context": {"user": "admin", "serverVersion": "444", "resourceGroupId": ["global"]},
        "createTime": "2024-04-21T12:48:21.400Z",
        "executionStartTime": "2024-04-21T12:48:21.450Z",
        "endTime": "2024-04-21T12:48:21.630Z",
    });
    let path = tmp.path().join("query_completed.json");
    std::fs::write(&path, event.to_string()).unwrap();
    let store2 = Store::open("memory://").unwrap();
    let report = ingest_into(&store2, &[&path]).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let sql =
        "SELECT task_id, host, launch_time, finish_time, cpu_seconds FROM tasks ORDER BY task_id";
    let (a, b) = (query(&store, sql).await, query(&store2, sql).await);
    assert_eq!(texts(&a, 0), texts(&b, 0));
    assert_eq!(micros(&a, 2), micros(&b, 2));
    assert_eq!(floats(&a, 4), floats(&b, 4));
    let q = query(&store2, "SELECT \"user\", submit_time FROM queries").await;
    assert_eq!(texts(&q, 0), [some("admin")]);

    // Operator statistics alone: rejected when named, ignored in a folder.
    let store3 = Store::open("memory://").unwrap();
    let report = ingest_into(&store3, &[&trino(OPERATORS)]).await;
    assert_eq!(report.rejected.len(), 1);
    assert!(
        report.rejected[0].reason.contains("operator statistics"),
        "{:?}",
        report.rejected
    );
    let report = ingest_into(&store3, &[&trino("rchukh-trino-history-server")]).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(report.ignored_files.len(), 1);
    assert_eq!(count(&store3, "SELECT count(*) FROM tasks").await, 5);
}

/// The recorded coordinator (tests/trino/coordinator.py), serving the real
/// QueryInfo; killed when dropped.
struct Coordinator {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Coordinator {
    fn start(dir: &Path, extra: &[&str]) -> Coordinator {
        let log = dir.join("requests.log");
        let mut child = Command::new("python3")
            .arg(repo_root().join("tests/trino/coordinator.py"))
            .arg(trino(QUERY_INFO))
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("coordinator said {line:?}"));
        Coordinator {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const COUNTS: &str =
    "SELECT (SELECT count(*) FROM queries) || ',' || (SELECT count(*) FROM stages) \
     || ',' || (SELECT count(*) FROM tasks)";

/// "queries,stages,tasks" in the store ("" while it has no commit yet).
fn counts(store: &str) -> String {
    let out = run(&["sql", "--store", store, "--format", "csv", COUNTS]);
    let out = String::from_utf8_lossy(&out.stdout);
    out.lines()
        .last()
        .unwrap_or("")
        .trim_matches('"')
        .to_string()
}

/// `culprit collect trino --once`: the finished query is fetched and
/// ingested with the same rows as the file; one that has expired is
/// noted; a second poll stores nothing new.
#[test]
fn collect_trino_once() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Coordinator::start(tmp.path(), &["--expired", "20240704_153000_00009_c9cak"]);
    let store = tmp.path().join("store").display().to_string();
    let out = run(&[
        "collect", "trino", "--url", &c.url, "--store", &store, "--once",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("2 finished queries listed, 1 fetched"),
        "{err}"
    );
    assert!(
        err.contains("1 expired before they were fetched (20240704_153000_00009_c9cak)"),
        "{err}"
    );
    assert!(err.contains("(1 Trino/Presto queries)"), "{err}");
    assert_eq!(counts(&store), "1,5,19");
    // Every request named a user (the coordinator refuses those that do not).
    let requests = c.requests();
    assert!(
        requests.contains(&"GET /v1/query culprit".to_string()),
        "{requests:?}"
    );
    assert!(
        requests.contains(&format!("GET /v1/query/{QUERY_ID} culprit")),
        "{requests:?}"
    );
    // The same rows as ingesting the file.
    let from_file = tmp.path().join("file-store").display().to_string();
    run_ok(&[
        "ingest",
        "--store",
        &from_file,
        trino(QUERY_INFO).to_str().unwrap(),
    ]);
    let sql = "SELECT sum(cpu_seconds), sum(cpu_blocked), sum(network_blocked), min(ready_time), \
               count(DISTINCT host) FROM tasks";
    assert_eq!(
        run_ok(&["sql", "--store", &store, "--format", "csv", sql]),
        run_ok(&["sql", "--store", &from_file, "--format", "csv", sql])
    );
    // Again: fetched, recognised, nothing new.
    let out = run(&[
        "collect", "trino", "--url", &c.url, "--store", &store, "--once", "--user", "ops",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("no new rows"), "{err}");
    assert!(c.requests().contains(&"GET /v1/query ops".to_string()));
    assert_eq!(counts(&store), "1,5,19");
    // A coordinator that is not there: an error, exit code 2.
    drop(c);
    let out = run(&[
        "collect",
        "trino",
        "--url",
        "http://127.0.0.1:9",
        "--store",
        &store,
        "--once",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("GET http://127.0.0.1:9/v1/query"));
}

/// `culprit collect trino` polling: a query listed as RUNNING is not
/// fetched; once FINISHED its first QueryInfo is not final and is fetched
/// again at the next poll; then it is stored, and Ctrl-C stops the command.
#[test]
fn collect_trino_polls_until_queries_are_final() {
    const LATER: &str = "20240704_153200_00012_c9cak";
    let tmp = tempfile::tempdir().unwrap();
    let c = Coordinator::start(tmp.path(), &["--copy", &format!("{LATER}:3:1")]);
    let store = tmp.path().join("store").display().to_string();
    let child = culprit()
        .args([
            "collect",
            "trino",
            "--url",
            &c.url,
            "--store",
            &store,
            "--interval",
            "0.2",
        ])
        .env_remove("CULPRIT_STORE")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if counts(&store) == "2,10,38" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the later query was never stored: {} ({:?})",
            counts(&store),
            c.requests()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let fetches = c
        .requests()
        .iter()
        .filter(|r| r.starts_with(&format!("GET /v1/query/{LATER}")))
        .count();
    // Not while it ran; once not final, once final.
    assert_eq!(fetches, 2, "{:?}", c.requests());
    let out = stop(child);
    assert!(out.contains("not final yet"), "{out}");
    assert!(out.contains("stopped collecting"), "{out}");
}

fn stop(child: Child) -> String {
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-INT", &pid]).status();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A pipeline's run (start, end, microseconds), CPU seconds and CPU-blocked
/// seconds.
type PipelineCpu = (i64, i64, f64, f64);

/// An airlift Duration (`"27.83s"`), seconds: read here without culprit.
fn duration(v: &Value) -> f64 {
    let s = v.as_str().unwrap();
    let i = s.find(|c: char| c.is_ascii_alphabetic()).unwrap();
    let x: f64 = s[..i].parse().unwrap();
    x * match &s[i..] {
        "ns" => 1e-9,
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        _ => panic!("unit {s}"),
    }
}

fn iso_micros(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .timestamp_micros()
}

/// Per task of the real QueryInfo on `host`: (task id, [(pipeline start,
/// end, cpu seconds, cpu-blocked seconds)]), the blocked seconds by
/// docs/trino.md: the drivers' queued time plus the time on a thread
/// neither on the CPU nor reading storage.
fn trino_cpu_rows(host: &str) -> Vec<(String, Vec<PipelineCpu>)> {
    let v: Value = serde_json::from_slice(&std::fs::read(trino(QUERY_INFO)).unwrap()).unwrap();
    let mut out = Vec::new();
    let mut stack = vec![&v["outputStage"]];
    while let Some(stage) = stack.pop() {
        for t in stage["tasks"].as_array().unwrap() {
            if !t["taskStatus"]["self"]
                .as_str()
                .unwrap()
                .contains(&format!("//{host}:"))
            {
                continue;
            }
            let rows = t["stats"]["pipelines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    let cpu = duration(&p["totalCpuTime"]);
                    let off = (duration(&p["totalScheduledTime"]) - cpu).max(0.0);
                    let os = off - duration(&p["physicalInputReadTime"]).min(off);
                    let queued = p["queuedTime"]["total"].as_f64().unwrap() / 1e9;
                    (
                        iso_micros(&p["firstStartTime"]),
                        iso_micros(&p["lastEndTime"]),
                        cpu,
                        queued + os,
                    )
                })
                .collect();
            out.push((
                t["taskStatus"]["taskId"].as_str().unwrap().to_string(),
                rows,
            ));
        }
        stack.extend(stage["subStages"].as_array().unwrap());
    }
    out
}

/// A Spark application on one of the Trino workers: one job, one task on
/// 10.0.1.4 from 15:31:39 to 15:31:45 (6 s run, 2 s of CPU: 4 s blocked
/// on the CPU), while the Trino query scans on the same node.
fn spark_log(dir: &Path) -> PathBuf {
    let (launch, finish) = (1_720_107_099_000i64, 1_720_107_105_000i64);
    let stage = |completed: bool| {
        let mut s = serde_json::json!({"Stage ID": 0, "Stage Attempt ID": 0, "Stage Name": "victim",
            "Number of Tasks": 1, "Parent IDs": [], "Submission Time": launch});
        if completed {
            s["Completion Time"] = finish.into();
        }
        s
    };
    let events = [
        serde_json::json!({"Event": "SparkListenerLogStart", "Spark Version": "3.5.3"}),
        serde_json::json!({"Event": "SparkListenerApplicationStart", "App Name": "mixed",
            "App ID": "app-mixed-0001", "Timestamp": launch - 5000, "User": "alice"}),
        serde_json::json!({"Event": "SparkListenerExecutorAdded", "Timestamp": launch - 4000,
            "Executor ID": "1", "Executor Info": {"Host": "10.0.1.4", "Total Cores": 4}}),
        serde_json::json!({"Event": "SparkListenerJobStart", "Job ID": 0, "Submission Time": launch,
            "Stage Infos": [], "Stage IDs": [0], "Properties": {"user": "alice", "spark.scheduler.pool": "adhoc"}}),
        serde_json::json!({"Event": "SparkListenerStageSubmitted", "Stage Info": stage(false)}),
        serde_json::json!({"Event": "SparkListenerTaskEnd", "Stage ID": 0, "Stage Attempt ID": 0,
            "Task Type": "ResultTask", "Task End Reason": {"Reason": "Success"},
            "Task Info": {"Task ID": 0, "Index": 0, "Attempt": 0, "Partition ID": 0,
                "Launch Time": launch, "Executor ID": "1", "Host": "10.0.1.4", "Locality": "PROCESS_LOCAL",
                "Speculative": false, "Getting Result Time": 0, "Finish Time": finish,
                "Failed": false, "Killed": false},
            "Task Metrics": {"Executor Deserialize Time": 0, "Executor Run Time": 6000,
                "Executor CPU Time": 2_000_000_000i64, "JVM GC Time": 0, "Result Serialization Time": 0}}),
        serde_json::json!({"Event": "SparkListenerStageCompleted", "Stage Info": stage(true)}),
        serde_json::json!({"Event": "SparkListenerJobEnd", "Job ID": 0, "Completion Time": finish,
            "Job Result": {"Result": "JobSucceeded"}}),
        serde_json::json!({"Event": "SparkListenerApplicationEnd", "Timestamp": finish + 1000}),
    ];
    let path = dir.join("app-mixed-0001");
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// A mixed cluster: the real Trino query, a Spark application on one of
/// its workers (10.0.1.4), and that host's CPU metrics (4 cores, 18
/// cpu-seconds used from 15:31:39 to 15:31:45), in one store. The Spark
/// task's 4 s of CPU wait are blamed on the Trino query by host and time,
/// in proportion to the CPU its tasks used on that node then; the rest on
/// the host's use outside the tasks (`external`) and its idle capacity
/// (`unknown`). The other way round, the Trino query's CPU waits on
/// 10.0.1.4 during the Spark task are partly blamed on the Spark query.
/// Expected values are computed here from the JSON and the log's numbers.
#[tokio::test]
async fn mixed_cluster_trino_and_spark_blame_each_other() {
    const HOST: &str = "10.0.1.4";
    const SPARK_QUERY: &str = "app-mixed-0001:job:0";
    let (from, to) = (at(39.0), at(45.0));
    let dt = (to - from) as f64 / 1e6;
    let (capacity, used) = (4.0, 18.0);
    let (spark_blocked, spark_cpu) = (4.0, 2.0);

    let tmp = tempfile::tempdir().unwrap();
    let log = spark_log(tmp.path());
    let metrics = tmp.path().join("host_windows.csv");
    std::fs::write(
        &metrics,
        format!(
            "host,window_start,window_end,resource,capacity,used\n\
             {HOST},2024-07-04T15:31:39Z,2024-07-04T15:31:45Z,cpu,{capacity},{used}\n"
        ),
    )
    .unwrap();
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(&store, &[&trino(QUERY_INFO), &log, &metrics]).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!((report.spark_logs, report.trino_queries), (1, 1));
    // Joined by host: the Spark task and three Trino tasks on 10.0.1.4.
    let hosts = query(
        &store,
        &format!("SELECT count(*) FILTER (WHERE query_id = '{SPARK_QUERY}'), count(*) FROM tasks WHERE host = '{HOST}'"),
    )
    .await;
    assert_eq!(
        (
            hosts[0]
                .column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(0),
            hosts[0]
                .column(1)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(0)
        ),
        (1, 4)
    );

    // The Trino rows on the host, each spread over its pipeline's run: none
    // starts or ends inside the Spark task's run, so within it every
    // consumer's rate is constant and one window gives the split.
    let rows = trino_cpu_rows(HOST);
    assert_eq!(rows.len(), 3);
    let inside = |t: i64| t > from && t < to;
    let share = |(s, e, amount): (i64, i64, f64)| {
        let overlap = (e.min(to) - s.max(from)).max(0) as f64;
        amount * overlap / (e - s) as f64
    };
    let mut trino_cpu = 0.0; // cpu-seconds Trino used on the host in the window
    let mut per_task: Vec<(f64, f64)> = Vec::new(); // (cpu used, cpu blocked) per task
    for (_, pipelines) in &rows {
        let (mut used_t, mut blocked_t) = (0.0, 0.0);
        for &(s, e, cpu, blocked) in pipelines {
            assert!(
                !inside(s) && !inside(e),
                "a pipeline bound inside the window"
            );
            used_t += share((s, e, cpu));
            blocked_t += share((s, e, blocked));
        }
        trino_cpu += used_t;
        per_task.push((used_t, blocked_t));
    }
    assert!(trino_cpu > 10.0, "{trino_cpu}");

    // Spark victim: its 4 s split over Trino's cpu-seconds, external (the
    // host's measured use beyond all tasks') and unknown (idle capacity).
    let tasks_cpu = trino_cpu + spark_cpu;
    let external = (used - tasks_cpu).max(0.0);
    let unknown = (capacity * dt - used.max(tasks_cpu)).max(0.0);
    let denominator = trino_cpu + external + unknown;
    let want_trino = spark_blocked * trino_cpu / denominator;
    let c = query(
        &store,
        &format!(
            "SELECT culprit_kind, culprit_query, blame_seconds, dor FROM culprits('{SPARK_QUERY}') \
             ORDER BY blame_seconds DESC"
        ),
    )
    .await;
    let kinds = texts(&c, 0);
    let culprits = texts(&c, 1);
    let blame = floats(&c, 2);
    assert_eq!(kinds[0].as_deref(), Some("query"));
    assert_eq!(
        culprits[0].as_deref(),
        Some(QUERY_ID),
        "the Trino query first"
    );
    close(
        blame[0].unwrap(),
        want_trino,
        "Trino's blame on the Spark task",
    );
    let of = |kind: &str| {
        kinds
            .iter()
            .zip(&blame)
            .filter(|(k, _)| k.as_deref() == Some(kind))
            .map(|(_, b)| b.unwrap())
            .sum::<f64>()
    };
    close(
        of("unknown"),
        spark_blocked * unknown / denominator,
        "unknown",
    );
    close(
        of("external"),
        spark_blocked * external / denominator,
        "external",
    );
    close(
        blame.iter().flatten().sum::<f64>(),
        spark_blocked,
        "conservation",
    );
    close(floats(&c, 3).iter().flatten().sum::<f64>(), 1.0, "dor");
    // Blame by host: all of it on 10.0.1.4, the CPU.
    let b = query(
        &store,
        &format!(
            "SELECT DISTINCT resource, host FROM blame('{SPARK_QUERY}') WHERE culprit_query = '{QUERY_ID}'"
        ),
    )
    .await;
    assert_eq!(
        (texts(&b, 0), texts(&b, 1)),
        (vec![some("cpu")], vec![some(HOST)])
    );

    // The Trino query as victim: each of its tasks on the host splits its
    // CPU waits of the window over the Spark task's 2 cpu-seconds, the
    // other Trino tasks there (`self`), external and unknown. (Its slot
    // waits, 235 us a task, stay in Trino's pool: `slots=direct` keeps them
    // on their holders rather than passing a few microseconds on.)
    let all = trino_cpu + spark_cpu;
    let external = (used - all).max(0.0);
    let unknown = (capacity * dt - used.max(all)).max(0.0);
    let want_spark: f64 = per_task
        .iter()
        .map(|&(used_t, blocked_t)| {
            let others = trino_cpu - used_t;
            blocked_t * spark_cpu / (spark_cpu + others + external + unknown)
        })
        .sum();
    assert!(want_spark > 1.0, "{want_spark}");
    let got = one_float(
        &store,
        &format!(
            "SELECT blame_seconds FROM culprits('{QUERY_ID}', 'victim_stages=all', 'slots=direct') \
             WHERE culprit_query = '{SPARK_QUERY}'"
        ),
    )
    .await;
    close(got, want_spark, "Spark's blame on the Trino query");
}
