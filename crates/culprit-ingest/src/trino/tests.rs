//! The mapping on small hand-made documents (the real files are read by
//! tests/e2e/trino.rs): which resource each blocked second goes to.

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, TimestampMicrosecondType};
use culprit_core::Table;
use serde_json::{json, Value};

use super::{read, Parsed};

fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

fn parsed(v: &Value) -> Parsed {
    read(v.to_string().as_bytes())
        .expect("Trino JSON")
        .expect("usable")
}

fn table(p: &Parsed, t: Table) -> &crate::formats::RawRows {
    &p.tables.iter().find(|(x, _)| *x == t).unwrap().1
}

fn text(p: &Parsed, t: Table, col: &str) -> Vec<Option<String>> {
    let a = table(p, t).columns[col].as_string::<i32>();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i).to_string()))
        .collect()
}

fn float(p: &Parsed, t: Table, col: &str) -> Vec<Option<f64>> {
    let a = table(p, t).columns[col].as_primitive::<Float64Type>();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i)))
        .collect()
}

fn times(p: &Parsed, t: Table, col: &str) -> Vec<Option<i64>> {
    let a = table(p, t).columns[col].as_primitive::<TimestampMicrosecondType>();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i)))
        .collect()
}

/// A task's window rows by identity.
type WindowMap = BTreeMap<(String, String, i64, i64), (f64, f64, f64)>;

/// (resource, detail, start, end) -> (blocked, acquired, gc); start and
/// end in milliseconds from T0.
fn windows(p: &Parsed) -> WindowMap {
    let res = text(p, Table::TaskWindows, "resource");
    let det = text(p, Table::TaskWindows, "detail");
    let s = times(p, Table::TaskWindows, "window_start");
    let e = times(p, Table::TaskWindows, "window_end");
    let b = float(p, Table::TaskWindows, "blocked");
    let a = float(p, Table::TaskWindows, "acquired");
    let g = float(p, Table::TaskWindows, "gc");
    let t0 = T0 * 1_000_000;
    (0..res.len())
        .map(|i| {
            (
                (
                    res[i].clone().unwrap(),
                    det[i].clone().unwrap_or_default(),
                    (s[i].unwrap() - t0) / 1000,
                    (e[i].unwrap() - t0) / 1000,
                ),
                (b[i].unwrap(), a[i].unwrap(), g[i].unwrap_or(0.0)),
            )
        })
        .collect()
}

/// 2024-07-04T15:31:37Z.
const T0: i64 = 1_720_107_097;

fn at(s: f64) -> String {
    let us = T0 * 1_000_000 + (s * 1e6).round() as i64;
    chrono::DateTime::from_timestamp_micros(us)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn pipeline(
    id: i64,
    input: bool,
    output: bool,
    source: &str,
    span: (f64, f64),
    stats: Value,
) -> Value {
    let mut p = json!({
        "pipelineId": id,
        "inputPipeline": input,
        "outputPipeline": output,
        "firstStartTime": at(span.0),
        "lastEndTime": at(span.1),
        "operatorSummaries": [
            {"operatorId": 1, "operatorType": "TaskOutputOperator"},
            {"operatorId": 0, "operatorType": source},
        ],
    });
    for (k, v) in stats.as_object().unwrap() {
        p[k] = v.clone();
    }
    p
}

/// A finished query: stage 0 (one task on host-a, reading an exchange)
/// whose sub-stage 1 scans storage on host-b.
fn query_info() -> Value {
    let exchange = pipeline(
        0,
        true,
        false,
        "ExchangeOperator",
        (1.0, 9.0),
        json!({
            "totalScheduledTime": "1.00s", "totalCpuTime": "0.50s",
            "inputBlockedTime": "4.00s", "outputBlockedTime": "7.00s",
            "queuedTime": {"count": 2.0, "total": 250000000.0},
            "internalNetworkInputDataSize": "1000B",
        }),
    );
    let join = pipeline(
        1,
        false,
        true,
        "LocalExchangeSourceOperator",
        (1.0, 9.0),
        json!({
            "totalScheduledTime": "2.00s", "totalCpuTime": "2.00s",
            "inputBlockedTime": "3.00s", "outputBlockedTime": "1.50s",
            "totalBlockedTime": "6.00s",
            "queuedTime": {"count": 1.0, "total": 0.0},
        }),
    );
    let scan = pipeline(
        0,
        true,
        true,
        "ScanFilterAndProjectOperator",
        (2.0, 6.0),
        json!({
            "totalScheduledTime": "10.00s", "totalCpuTime": "3.00s",
            "physicalInputReadTime": "5.00s", "physicalInputDataSize": "2kB",
            "inputBlockedTime": "0.50s", "outputBlockedTime": "0.00ns",
            "queuedTime": {"count": 4.0, "total": 2000000000.0},
        }),
    );
    json!({
        "queryId": "q1",
        "state": "FINISHED",
        "finalQueryInfo": true,
        "self": "http://coordinator:8080/v1/query/q1",
        "query": "SELECT 1",
        "resourceGroupId": ["global", "adhoc"],
        "session": {"user": "alice", "source": "cli", "clientTags": ["etl"]},
        "version": {"version": "448"},
        "queryStats": {
            "createTime": at(0.0), "executionStartTime": at(0.4), "endTime": at(10.0),
            "queuedTime": "300.00ms", "totalCpuTime": "5.50s",
        },
        "outputStage": {
            "stageId": "q1.0",
            "state": "FINISHED",
            "plan": {"root": {"@type": "output"},
                     "partitioning": {"connectorHandle": {"partitioning": "SINGLE", "function": "SINGLE"}}},
            "stageStats": {"totalCpuTime": "2.50s", "schedulingComplete": at(0.9)},
            "tasks": [{
                "taskStatus": {"taskId": "q1.0.0.0", "nodeId": "n-a", "state": "FINISHED",
                               "self": "http://host-a:8080/v1/task/q1.0.0.0",
                               "fullGcTime": "0.20s"},
                "stats": {
                    "createTime": at(0.5), "firstStartTime": at(1.0), "endTime": at(9.5),
                    "queuedTime": "500.00ms",
                    "totalScheduledTime": "3.00s", "totalCpuTime": "2.50s",
                    "totalBlockedTime": "20.00s", "inputBlockedTime": "4.00s",
                    "outputBlockedTime": "1.50s",
                    "internalNetworkInputDataSize": "1000B", "outputDataSize": "10B",
                    "peakUserMemoryReservation": "64B",
                    "pipelines": [exchange, join],
                },
            }],
            "subStages": [{
                "stageId": "q1.1",
                "state": "FINISHED",
                "plan": {"root": {"@type": "aggregation"},
                         "partitioning": {"connectorHandle": {"partitioning": "SOURCE"}}},
                "stageStats": {},
                "tasks": [{
                    "taskStatus": {"taskId": "q1.1.0.0", "nodeId": "n-b", "state": "FINISHED",
                                   "self": "http://host-b:8080/v1/task/q1.1.0.0"},
                    "stats": {
                        "createTime": at(0.6), "firstStartTime": at(2.0), "endTime": at(6.5),
                        "totalScheduledTime": "10.00s", "totalCpuTime": "3.00s",
                        "totalBlockedTime": "0.50s", "inputBlockedTime": "0.50s",
                        "physicalInputReadTime": "5.00s", "physicalInputDataSize": "2kB",
                        "pipelines": [scan],
                    },
                }],
                "subStages": [],
            }],
        },
    })
}

#[test]
fn query_info_rows() {
    let p = parsed(&query_info());
    assert_eq!(p.queries, 1);
    assert!(
        p.malformed.is_empty() && p.notes.is_empty(),
        "{:?}",
        p.notes
    );
    assert_eq!(text(&p, Table::Queries, "query_id"), [some("q1")]);
    assert_eq!(text(&p, Table::Queries, "user"), [some("alice")]);
    assert_eq!(text(&p, Table::Queries, "pool"), [some("global.adhoc")]);
    assert_eq!(text(&p, Table::Queries, "status"), [some("succeeded")]);
    assert_eq!(
        times(&p, Table::Queries, "start_time"),
        [Some(T0 * 1_000_000 + 400_000)]
    );
    let tags: Value =
        serde_json::from_str(text(&p, Table::Queries, "tags")[0].as_deref().unwrap()).unwrap();
    assert_eq!(tags["source"], "trino");
    assert_eq!(tags["engine_version"], "448");
    assert_eq!(tags["coordinator"], "coordinator:8080");
    assert_eq!(tags["queued_time"], 0.3);

    // Stages: sub-stages are parents (they feed the stage).
    assert_eq!(text(&p, Table::Stages, "stage_id"), [some("0"), some("1")]);
    assert_eq!(text(&p, Table::Stages, "parent_ids"), [some("1"), None]);
    assert_eq!(
        text(&p, Table::Stages, "name"),
        [some("Fragment 0 [SINGLE]"), some("Fragment 1 [SOURCE]")]
    );

    // Tasks: host from the task's URI, node as executor, the query's queue
    // wait before creation, the task's own queue as scheduler delay.
    assert_eq!(
        text(&p, Table::Tasks, "host"),
        [some("host-a"), some("host-b")]
    );
    assert_eq!(
        text(&p, Table::Tasks, "executor_id"),
        [some("n-a"), some("n-b")]
    );
    let us = |s: f64| Some(T0 * 1_000_000 + (s * 1e6).round() as i64);
    assert_eq!(times(&p, Table::Tasks, "launch_time"), [us(0.5), us(0.6)]);
    assert_eq!(times(&p, Table::Tasks, "ready_time"), [us(0.2), us(0.3)]);
    assert_eq!(times(&p, Table::Tasks, "finish_time"), [us(9.5), us(6.5)]);
    assert_eq!(
        float(&p, Table::Tasks, "scheduler_delay"),
        [Some(0.5), None]
    );
    // Task a: cpu = queued 0.25 + off-CPU not reading (1-0.5) + (2-2) = 0.75;
    // network = exchange input 4 + output 1.5 (the output pipeline's only).
    // Task b: off CPU 7, reading 5 -> disk 5 + scan input 0.5, cpu 2 + queued 2.
    assert_eq!(
        float(&p, Table::Tasks, "cpu_blocked"),
        [Some(0.75), Some(4.0)]
    );
    assert_eq!(
        float(&p, Table::Tasks, "network_blocked"),
        [Some(5.5), Some(0.0)]
    );
    assert_eq!(
        float(&p, Table::Tasks, "disk_read_blocked"),
        [Some(0.0), Some(5.5)]
    );
    assert_eq!(
        float(&p, Table::Tasks, "cpu_seconds"),
        [Some(2.5), Some(3.0)]
    );
    assert_eq!(float(&p, Table::Tasks, "gc_seconds"), [Some(0.2), None]);
    assert_eq!(
        float(&p, Table::Tasks, "shuffle_read_bytes"),
        [Some(1000.0), Some(0.0)]
    );
    assert_eq!(
        float(&p, Table::Tasks, "input_bytes"),
        [Some(0.0), Some(2048.0)]
    );
    let attrs: Value =
        serde_json::from_str(text(&p, Table::Tasks, "attrs")[0].as_deref().unwrap()).unwrap();
    // 20 s blocked, 4 + 1.5 charged: a local exchange and a join waiting
    // are no resource.
    assert_eq!(attrs["other_blocked_time"], 14.5);
    assert_eq!(attrs["driver_queued_time"], 0.25);

    let w = windows(&p);
    let key = |r: &str, d: &str, s: f64, e: f64| {
        let ms = |x: f64| (x * 1000.0).round() as i64;
        (r.to_string(), d.to_string(), ms(s), ms(e))
    };
    let expected = BTreeMap::from([
        // task a, pipeline 0 (exchange) and 1 (local exchange, output), same span
        (key("cpu", "queued", 1.0, 9.0), (0.25, 0.0, 0.0)),
        (key("cpu", "os_sched", 1.0, 9.0), (0.5, 2.5, 0.0)),
        (key("network", "exchange", 1.0, 9.0), (4.0, 1000.0, 0.0)),
        (key("network", "output_buffer", 1.0, 9.0), (1.5, 0.0, 0.0)),
        (key("memory", "user", 0.5, 9.5), (0.0, 64.0, 0.0)),
        (key("cpu", "gc", 0.5, 9.5), (0.0, 0.0, 0.2)),
        // task b, its scan pipeline
        (key("cpu", "queued", 2.0, 6.0), (2.0, 0.0, 0.0)),
        (key("cpu", "os_sched", 2.0, 6.0), (2.0, 3.0, 0.0)),
        (key("disk_read", "", 2.0, 6.0), (5.5, 2048.0, 0.0)),
    ]);
    assert_eq!(w, expected);
}

/// Without pipeline statistics a task is one row per resource over its
/// run; its input-blocked time goes to the network when it read pages of
/// other tasks.
#[test]
fn tasks_without_pipelines() {
    let mut q = query_info();
    for path in [
        "/outputStage/tasks/0/stats",
        "/outputStage/subStages/0/tasks/0/stats",
    ] {
        q.pointer_mut(path)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("pipelines");
    }
    let p = parsed(&q);
    assert_eq!(
        float(&p, Table::Tasks, "network_blocked"),
        [Some(5.5), Some(0.0)]
    );
    assert_eq!(
        float(&p, Table::Tasks, "disk_read_blocked"),
        [Some(0.0), Some(5.5)]
    );
    // No driver queue times: only the off-CPU time not reading.
    assert_eq!(
        float(&p, Table::Tasks, "cpu_blocked"),
        [Some(0.5), Some(2.0)]
    );
    let w = windows(&p);
    let exchange = ("network".to_string(), "exchange".to_string(), 500, 9500);
    assert_eq!(w[&exchange], (4.0, 1000.0, 0.0));
    let read = ("disk_read".to_string(), String::new(), 600, 6500);
    assert_eq!(w[&read], (5.5, 2048.0, 0.0));
}

#[test]
fn unfinished_queries_wait() {
    let mut q = query_info();
    q["state"] = json!("RUNNING");
    let p = parsed(&q);
    assert_eq!(p.queries, 0);
    assert_eq!(table(&p, Table::Tasks).len(), 0);
    assert!(p.notes[0].contains("RUNNING"), "{:?}", p.notes);
    let mut q = query_info();
    q["finalQueryInfo"] = json!(false);
    let p = parsed(&q);
    assert_eq!(p.queries, 0);
    assert!(p.notes[0].contains("not final"), "{:?}", p.notes);
}

/// A Presto completed event in pbench's wrapper: the query and its stages,
/// durations from the wrapper's milliseconds, no tasks.
#[test]
fn presto_completed_event() {
    let line = json!({
        "instanceId": "i", "clusterName": "c1",
        "queryCompletedEvent": {
            "metadata": {"queryId": "p1", "query": "SELECT 2", "queryState": "FAILED"},
            "statistics": {"cpuTime": 371792.0, "queuedTime": 0.0},
            "context": {"user": "presto", "serverVersion": "0.282", "resourceGroupId": ["global"]},
            "failureInfo": {"errorCode": {"name": "GENERIC_INTERNAL_ERROR"}, "failureMessage": "boom\nstack"},
            "createTime": 1750063688.759, "executionStartTime": 1750063689.069, "endTime": 1750063756.554,
            "stageStatistics": [
                {"stageId": 0, "stageExecutionId": 0, "tasks": 1, "totalCpuTime": "19.16ms",
                 "totalBlockedTime": "36.76m", "rawInputDataSize": "40.50kB"},
                {"stageId": 1, "stageExecutionId": 0, "tasks": 8, "totalCpuTime": "1.00s"},
            ],
        },
        "cpuTimeMillis": 371792, "queuedTimeMillis": 0,
    });
    let text_ = format!("{line}\n\n{{\"queryCreatedEvent\": {{}}}}\nnot json\n");
    let p = read(text_.as_bytes()).unwrap().unwrap();
    assert_eq!(p.queries, 1);
    assert_eq!(p.malformed.len(), 1);
    assert_eq!(p.malformed[0].0, 4);
    assert_eq!(text(&p, Table::Queries, "status"), [some("failed")]);
    assert_eq!(text(&p, Table::Queries, "pool"), [some("global")]);
    assert_eq!(
        times(&p, Table::Queries, "submit_time"),
        [Some(1_750_063_688_759_000)]
    );
    let tags: Value =
        serde_json::from_str(text(&p, Table::Queries, "tags")[0].as_deref().unwrap()).unwrap();
    assert_eq!(tags["source"], "presto");
    assert_eq!(tags["cpu_time"], 371.792);
    assert_eq!(tags["error"], "boom");
    assert_eq!(tags["error_code"], "GENERIC_INTERNAL_ERROR");
    assert_eq!(tags["tasks_known"], false);
    assert_eq!(text(&p, Table::Stages, "stage_id"), [some("0"), some("1")]);
    let attrs: Value =
        serde_json::from_str(text(&p, Table::Stages, "attrs")[0].as_deref().unwrap()).unwrap();
    assert_eq!(attrs["total_blocked_time"], 36.76 * 60.0);
    assert_eq!(attrs["raw_input_bytes"], 40.5 * 1024.0);
    assert_eq!(table(&p, Table::Tasks).len(), 0);
    assert!(p.notes[0].contains("no tasks"), "{:?}", p.notes);
}

/// Trino's completed event with its payload: tasks as from the QueryInfo.
#[test]
fn trino_completed_event_with_payload() {
    let q = query_info();
    let event = json!({
        "metadata": {"queryId": "q1", "queryState": "FINISHED", "query": "SELECT 1",
                     "payload": q["outputStage"].to_string()},
        "statistics": {"cpuTime": 5.5, "queuedTime": 0.3},
        "context": {"user": "alice", "serverVersion": "448", "resourceGroupId": ["global", "adhoc"]},
        "createTime": at(0.0), "executionStartTime": at(0.4), "endTime": at(10.0),
    });
    let p = parsed(&event);
    let from_info = parsed(&q);
    assert_eq!(p.queries, 1);
    for col in ["task_id", "host"] {
        assert_eq!(
            text(&p, Table::Tasks, col),
            text(&from_info, Table::Tasks, col)
        );
    }
    assert_eq!(
        times(&p, Table::Tasks, "ready_time"),
        times(&from_info, Table::Tasks, "ready_time")
    );
    assert_eq!(windows(&p), windows(&from_info));
    let tags: Value =
        serde_json::from_str(text(&p, Table::Queries, "tags")[0].as_deref().unwrap()).unwrap();
    assert_eq!(tags["source"], "trino");
    assert!(tags.get("tasks_known").is_none());
}

/// Trino's completed event without its payload (the listener cut it):
/// the query, and one stage row per stage of `cpuTimeDistribution` and
/// `stageGcStatistics`, each carrying its entries as given; no task.
#[test]
fn trino_completed_event_without_payload() {
    let cpu = json!([
        {"stageId": 0, "tasks": 1, "p25": 12, "p50": 12, "p75": 12, "p90": 12,
         "p95": 12, "p99": 12, "min": 12, "max": 12, "total": 12, "average": 12.0},
        {"stageId": 1, "tasks": 4, "p25": 300, "p50": 410, "p75": 520, "p90": 600,
         "p95": 600, "p99": 600, "min": 250, "max": 600, "total": 1760, "average": 440.0},
    ]);
    let gc = json!([
        {"stageId": 1, "tasks": 5, "fullGcTasks": 2, "minFullGcSec": 1, "maxFullGcSec": 3,
         "totalFullGcSec": 4, "averageFullGcSec": 2},
        {"stageId": 2, "tasks": 3, "fullGcTasks": 1, "minFullGcSec": 0, "maxFullGcSec": 7,
         "totalFullGcSec": 7, "averageFullGcSec": 7},
    ]);
    let event = json!({
        "metadata": {"queryId": "20240704_153137_00007_abcde", "queryState": "FINISHED",
                     "query": "SELECT count(*) FROM t"},
        "statistics": {"cpuTime": 1.772, "wallTime": "PT9.25S", "queuedTime": 0.125,
                       "peakUserMemoryBytes": 4096, "physicalInputBytes": 123456,
                       "cpuTimeDistribution": cpu, "stageGcStatistics": gc},
        "context": {"user": "bob", "serverVersion": "448", "environment": "prod",
                    "resourceGroupId": ["global", "etl"]},
        "createTime": at(0.0), "executionStartTime": at(0.5), "endTime": at(9.75),
    });
    let p = parsed(&event);
    assert_eq!(p.queries, 1);
    assert!(p.malformed.is_empty(), "{:?}", p.malformed);
    assert_eq!(
        text(&p, Table::Queries, "query_id"),
        [event["metadata"]["queryId"].as_str().map(String::from)]
    );
    assert_eq!(text(&p, Table::Queries, "user"), [some("bob")]);
    assert_eq!(text(&p, Table::Queries, "pool"), [some("global.etl")]);
    assert_eq!(text(&p, Table::Queries, "status"), [some("succeeded")]);
    let us = |s: f64| Some(T0 * 1_000_000 + (s * 1e6).round() as i64);
    assert_eq!(times(&p, Table::Queries, "submit_time"), [us(0.0)]);
    assert_eq!(times(&p, Table::Queries, "start_time"), [us(0.5)]);
    assert_eq!(times(&p, Table::Queries, "end_time"), [us(9.75)]);
    let tags: Value =
        serde_json::from_str(text(&p, Table::Queries, "tags")[0].as_deref().unwrap()).unwrap();
    assert_eq!(tags["source"], "trino");
    assert_eq!(tags["engine_version"], "448");
    assert_eq!(tags["environment"], "prod");
    assert_eq!(tags["tasks_known"], false);
    // Statistics durations are seconds (Java's ISO form too), sizes bytes.
    assert_eq!(tags["wall_time"], 9.25);
    let stats = &event["statistics"];
    for (tag, key) in [
        ("cpu_time", "cpuTime"),
        ("queued_time", "queuedTime"),
        ("peak_user_memory_bytes", "peakUserMemoryBytes"),
        ("physical_input_bytes", "physicalInputBytes"),
    ] {
        assert_eq!(tags[tag].as_f64(), stats[key].as_f64(), "{tag}");
    }

    // Stages 0, 1 and 2: the union of both lists, in stage order.
    assert_eq!(
        text(&p, Table::Stages, "query_id"),
        vec![some("20240704_153137_00007_abcde"); 3]
    );
    assert_eq!(
        text(&p, Table::Stages, "stage_id"),
        [some("0"), some("1"), some("2")]
    );
    let attrs: Vec<Value> = text(&p, Table::Stages, "attrs")
        .iter()
        .map(|a| serde_json::from_str(a.as_deref().unwrap()).unwrap())
        .collect();
    // Stage 0: cpu only.
    assert_eq!(attrs[0]["cpu_distribution"], cpu[0]);
    assert_eq!(attrs[0]["tasks"], 1.0);
    assert!(attrs[0].get("gc_statistics").is_none(), "{}", attrs[0]);
    // Stage 1: both; its task count is the cpu distribution's (4), not
    // the gc statistics' (5).
    assert_eq!(attrs[1]["cpu_distribution"], cpu[1]);
    assert_eq!(attrs[1]["gc_statistics"], gc[0]);
    assert_eq!(attrs[1]["tasks"], 4.0);
    assert_eq!(attrs[1]["cpu_distribution"]["total"], 1760);
    assert_eq!(attrs[1]["gc_statistics"]["totalFullGcSec"], 4);
    // Stage 2: gc only, its task count from there.
    assert_eq!(attrs[2]["gc_statistics"], gc[1]);
    assert_eq!(attrs[2]["tasks"], 3.0);
    assert!(attrs[2].get("cpu_distribution").is_none(), "{}", attrs[2]);

    // No host, so no task and no window; a note says so.
    assert_eq!(table(&p, Table::Tasks).len(), 0);
    assert_eq!(table(&p, Table::TaskWindows).len(), 0);
    assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
    assert!(
        p.notes[0].contains("20240704_153137_00007_abcde")
            && p.notes[0].contains("stage statistics")
            && p.notes[0].contains("3 stages")
            && p.notes[0].contains("no tasks"),
        "{:?}",
        p.notes
    );
}

#[test]
fn what_is_not_trino() {
    assert!(read(b"").is_none());
    assert!(read(b"app,host\n1,2\n").is_none());
    assert!(read(br#"{"Event":"SparkListenerLogStart"}"#).is_none());
    assert!(read(b"{\"a\": 1}\n{\"b\": 2}\n").is_none());
    let list = json!([{"queryId": "q1", "state": "FINISHED"}]).to_string();
    let reason = read(list.as_bytes()).unwrap().err().unwrap();
    assert!(reason.contains("/v1/query"), "{reason}");
}
