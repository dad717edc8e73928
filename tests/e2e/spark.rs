//! Spark event logs written by Spark itself (../shared/data/spark): every log
//! ingests with exact counts, values match the log and the History Server's
//! own expectations, codecs give identical tables, logs in progress and
//! `--watch` add only what is new, and blame works on what was ingested.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type, TimestampMicrosecondType};
use culprit_ingest::{ingest, list_sources, IngestOptions, IngestReport};
use culprit_store::Store;
use serde_json::Value;

use crate::common::{culprit, repo_root, run, run_ok, test_data};

pub(crate) fn spark(rel: &str) -> PathBuf {
    test_data().join("spark").join(rel)
}

const GENERATED: &str = "generated-pyspark-3.5.3/events/app-20261121050126-0000";

pub(crate) async fn ingest_into(store: &Store, paths: &[&Path]) -> IngestReport {
    let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let sources = list_sources(&paths).await.unwrap();
    ingest(store, sources, &IngestOptions::default(), &())
        .await
        .unwrap()
}

pub(crate) async fn query(store: &Store, sql: &str) -> Vec<RecordBatch> {
    let ctx = culprit_sql::session(store.clone()).await.unwrap();
    ctx.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap()
}

pub(crate) async fn count(store: &Store, sql: &str) -> i64 {
    let b = query(store, sql).await;
    b[0].column(0).as_primitive::<Int64Type>().value(0)
}

/// A float cell, NULL as 0 (a metric the log does not carry; the History
/// Server shows 0).
fn float_or_zero(b: &RecordBatch, c: usize, i: usize) -> f64 {
    let a = b.column(c).as_primitive::<Float64Type>();
    if a.is_valid(i) {
        a.value(i)
    } else {
        0.0
    }
}

/// A timestamp cell, microseconds.
fn micros(b: &RecordBatch, c: usize, i: usize) -> i64 {
    b.column(c)
        .as_primitive::<TimestampMicrosecondType>()
        .value(i)
}

/// A History Server time (`2015-05-06T13:03:06.494GMT`), epoch ms.
fn hs_millis(v: &Value) -> i64 {
    chrono::DateTime::parse_from_str(
        &v.as_str().unwrap().replace("GMT", "+0000"),
        "%Y-%m-%dT%H:%M:%S%.3f%z",
    )
    .unwrap()
    .timestamp_millis()
}

fn pretty(b: &[RecordBatch]) -> String {
    arrow::util::pretty::pretty_format_batches(b)
        .unwrap()
        .to_string()
}

/// (log, queries, stages, tasks, hosts of tasks, rejected lines)
///
/// Stages and tasks agree with the counts of the data's MANIFEST.md (stage
/// attempts submitted; task attempts, a `Resubmitted` second end of a task
/// not counted again); hosts with its "hosts" column. A log in progress
/// keeps its unfinished stages for later. Rejected lines are the malformed
/// ones the MANIFEST names.
const LOGS: &[(&str, i64, i64, i64, i64, usize)] = &[
    ("apache-spark/spark-events/app-20161115172038-0000", 1, 1, 26, 1, 0),
    ("apache-spark/spark-events/app-20161116163331-0000", 1, 1, 24, 1, 0),
    ("apache-spark/spark-events/app-20180109111548-0000", 1, 2, 22, 1, 0),
    ("apache-spark/spark-events/app-20200706201101-0003", 1, 3, 48, 1, 0),
    ("apache-spark/spark-events/application_1506645932520_24630151", 3, 3, 9, 5, 0),
    ("apache-spark/spark-events/application_1516285256255_0012", 1, 2, 24, 2, 0),
    ("apache-spark/spark-events/application_1536831636016_59384_1", 1, 1, 100, 2, 0),
    ("apache-spark/spark-events/application_1538416563558_0014", 8, 14, 35, 2, 0),
    ("apache-spark/spark-events/application_1553914137147_0018", 3, 3, 6, 3, 0),
    ("apache-spark/spark-events/application_1555004656427_0144", 0, 0, 0, 0, 0),
    ("apache-spark/spark-events/application_1578436911597_0052", 1, 1, 6, 1, 0),
    ("apache-spark/spark-events/application_1628109047826_1317105", 1, 1, 5, 4, 0),
    ("apache-spark/spark-events/local-1422981759269", 4, 5, 33, 1, 0),
    ("apache-spark/spark-events/local-1422981780767", 3, 4, 32, 1, 0),
    ("apache-spark/spark-events/local-1426533911241", 1, 1, 8, 1, 0),
    ("apache-spark/spark-events/local-1430917381534", 1, 2, 110, 1, 0),
    ("apache-spark/spark-events/local-1430917381535_1", 0, 0, 0, 0, 0),
    ("apache-spark/spark-events/local-1642039451826", 2, 6, 35, 1, 0),
    ("apache-spark/spark-events-broken/last-attempt-incomplete/application_1656321732247_0006_2", 0, 0, 0, 0, 0),
    ("apache-spark/sql-spark-events/local-1596020211915", 24, 16, 24, 1, 0),
    ("apache-spark/legacy-dir-format/local-1422981759269", 4, 5, 33, 1, 0),
    ("apache-spark/legacy-dir-format/local-1426533911241", 1, 1, 8, 1, 0),
    ("cubefs-compass/task-parser/src/test/resources/log/event/eventlog", 1, 2, 4, 1, 0),
    (GENERATED, 15, 37, 337, 1, 0),
    ("generated-pyspark-3.5.3/events/app-20261121050306-0000.lz4", 8, 16, 137, 1, 0),
    ("generated-pyspark-3.5.3/events/app-20261121050357-0000.snappy", 8, 16, 137, 1, 0),
    ("generated-pyspark-3.5.3/events/app-20261121050454-0000.zstd", 8, 16, 137, 1, 0),
    ("generated-pyspark-3.5.3/events/local-1795237547658.inprogress", 5, 10, 68, 1, 0),
    ("generated-pyspark-3.5.3/events/local-1795237569429.lz4.inprogress", 5, 8, 57, 1, 0),
    ("groupon-sparklint/docs/spark_summit_euro_2016/event_logs/application_1472176676028_407508_1", 5, 12, 612, 23, 0),
    ("groupon-sparklint/src/test/resources/directory_source/event_log_0", 1, 3, 204, 2, 0),
    ("groupon-sparklint/src/test/resources/directory_source/event_log_1", 2, 6, 98, 2, 0),
    ("groupon-sparklint/src/test/resources/file_event_log_test_nav_events", 2, 3, 3, 1, 0),
    ("groupon-sparklint/src/test/resources/history_source/eventLogs-application_1489705648216_1600.zip", 3, 4, 116, 10, 0),
    ("linkedin-dr-elephant/test/resources/spark_event_logs/event_log_1", 1, 1, 10, 1, 0),
    ("linkedin-dr-elephant/test/resources/spark_event_logs/event_log_2", 0, 0, 0, 0, 0),
    ("nvidia-spark-rapids-tools/spark-events-profiling/eventlog_minimal_events", 8, 10, 10, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-profiling/gpu_oom_eventlog.zstd", 56, 37, 12416, 2, 0),
    ("nvidia-spark-rapids-tools/spark-events-profiling/malformed_json_eventlog.zstd", 2, 5, 217, 3, 1),
    ("nvidia-spark-rapids-tools/spark-events-profiling/nds_q66_gpu.zstd", 56, 41, 12987, 4, 0),
    ("nvidia-spark-rapids-tools/spark-events-profiling/rapids_join_eventlog.zstd", 1, 4, 213, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-profiling/spark2-eventlog.zstd", 4, 6, 6, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-profiling/tasks_executors_fail_compressed_eventlog.zstd", 29, 135, 8580, 6, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/aqeshuffle_eventlog.zstd", 1, 4, 26, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/cluster_information/eventlog_3nodes_12cores_exec_removed", 2, 3, 21, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/cluster_information/eventlog_4nodes_8cores_dynamic_alloc.zstd", 5, 20, 235, 5, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/cluster_information/platform/databricks-aws", 3, 3, 3, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/createdatasourcetable_eventlog.zstd", 1, 1, 6, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/db_sim_eventlog", 1, 4, 2801, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/db_subExecution_id.zstd", 7, 11, 137, 2, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/dsAndDf_eventlog.zstd", 4, 13, 651, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/empty_eventlog", 0, 0, 0, 0, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/eventlog_same_app_id_1.zstd", 2, 3, 21, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/eventlog_v2_local-1623876083964", 1, 4, 2801, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/java_udf_eventlog", 4, 2, 2, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/join_missing_sql_end", 1, 4, 213, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/multiple_attempts/attempt_2_eventlog.zstd", 2, 5, 107, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/nds_q72_dataproc_2_2.zstd", 56, 49, 13504, 4, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/nds_q88_photon_db_13_3.zstd", 28, 57, 4896, 2, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/truncated_eventlog", 2, 3, 21, 1, 0),
    ("nvidia-spark-rapids-tools/spark-events-qualification/xgboost_eventlog.zstd", 8, 12, 155, 2, 0),
    ("qubole-sparklens/src/test/event-history-test-files/local-1532512550423", 2, 2, 8, 1, 0),
    ("ucesys-sparkscope/src/test/resources/eventlog/app-20231025121456-0004-eventLog-finished-exec-removed", 2, 1, 2, 2, 0),
    ("ucesys-sparkscope/src/test/resources/eventlog/app-20231025121456-0004-eventLog-running", 1, 1, 1, 1, 0),
    ("ucesys-sparkscope/src/test/resources/eventlog/app-20231025121456-0004-eventLog-running-incomplete", 1, 1, 1, 1, 1),
    ("ucesys-sparkscope/src/test/resources/eventlog/app-20231122115433-0000-eventLog-corrupted-events", 3, 10, 0, 0, 4),
    ("ucesys-sparkscope/src/test/resources/eventlog/app-20231122115433-0000-eventLog-finished-stages", 1, 10, 0, 0, 0),
];

/// Every real log ingests on its own, with exact counts.
#[tokio::test]
async fn every_real_log_ingests_with_exact_counts() {
    for &(rel, queries, stages, tasks, hosts, rejected) in LOGS {
        let path = spark(rel);
        assert!(path.exists(), "{} is missing", path.display());
        let store = Store::open("memory://").unwrap();
        let report = ingest_into(&store, &[&path]).await;
        assert_eq!(report.spark_logs, 1, "{rel}: {report:?}");
        assert_eq!(
            report.rejected.len(),
            rejected,
            "{rel}: {:?}",
            report.rejected
        );
        let got = (
            count(&store, "SELECT count(*) FROM queries").await,
            count(&store, "SELECT count(*) FROM stages").await,
            count(&store, "SELECT count(*) FROM tasks").await,
            count(&store, "SELECT count(DISTINCT host) FROM tasks").await,
        );
        assert_eq!(got, (queries, stages, tasks, hosts), "{rel}");
    }
}

/// The whole folder in one batch: every event log is found (rolling,
/// legacy and Databricks folders as one log each), copies of one
/// application add nothing twice, and files that are no telemetry are
/// ignored, not fatal.
#[tokio::test]
async fn the_whole_folder_ingests_in_one_batch() {
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(&store, &[&test_data().join("spark")]).await;
    assert_eq!(report.spark_logs, 78, "{report:?}");
    // The malformed lines of the logs above, and nothing else.
    assert_eq!(report.rejected.len(), 6, "{:?}", report.rejected);
    assert!(report.ignored_files.iter().any(|f| f.ends_with("_job_log")));
    assert_eq!(
        count(
            &store,
            "SELECT count(*) - count(DISTINCT task_id) FROM tasks"
        )
        .await,
        0
    );
    assert!(count(&store, "SELECT count(*) FROM tasks").await > 59_000);
}

/// Values of single tasks, checked against the History Server's own REST
/// answer for `applications/local-1430917381534/stages/0/0/taskList`.
#[tokio::test]
async fn tasks_match_the_history_server() {
    let store = Store::open("memory://").unwrap();
    ingest_into(
        &store,
        &[&spark("apache-spark/spark-events/local-1430917381534")],
    )
    .await;
    let expect: Vec<Value> = serde_json::from_slice(
        &std::fs::read(spark(
            "apache-spark/HistoryServerExpectations/stage_task_list_expectation.json",
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(expect.len(), 20);
    let b = query(
        &store,
        "SELECT task_id, host, executor_id, launch_time, finish_time, gc_seconds, \
         disk_write_blocked, network_blocked, input_bytes, shuffle_write_bytes, \
         scheduler_delay, status, attrs FROM tasks WHERE stage_id = '0'",
    )
    .await;
    let b = arrow::compute::concat_batches(&b[0].schema(), &b).unwrap();
    let ids = b.column(0).as_string::<i32>();
    let row_of = |task: i64| {
        let want = format!("local-1430917381534:task:{task}");
        (0..b.num_rows()).find(|&i| ids.value(i) == want)
    };
    let f = |c: usize, i: usize| float_or_zero(&b, c, i);
    let t = |c: usize, i: usize| micros(&b, c, i);
    for e in &expect {
        let id = e["taskId"].as_i64().unwrap();
        let i = row_of(id).unwrap_or_else(|| panic!("task {id} not stored"));
        let launch = hs_millis(&e["launchTime"]);
        assert_eq!(t(3, i) / 1000, launch, "task {id} launch");
        assert_eq!(
            (t(4, i) - t(3, i)) / 1000,
            e["duration"].as_i64().unwrap(),
            "task {id} duration"
        );
        assert_eq!(
            b.column(1).as_string::<i32>().value(i),
            e["host"].as_str().unwrap()
        );
        assert_eq!(
            b.column(2).as_string::<i32>().value(i),
            e["executorId"].as_str().unwrap()
        );
        let m = &e["taskMetrics"];
        let close = |a: f64, b: f64, what: &str| {
            assert!((a - b).abs() < 1e-9, "task {id} {what}: {a} vs {b}")
        };
        close(f(5, i), m["jvmGcTime"].as_f64().unwrap() / 1e3, "gc");
        close(
            f(6, i),
            m["shuffleWriteMetrics"]["writeTime"].as_f64().unwrap() / 1e9,
            "shuffle write time",
        );
        close(
            f(7, i),
            m["shuffleReadMetrics"]["fetchWaitTime"].as_f64().unwrap() / 1e3,
            "fetch wait",
        );
        close(
            f(8, i),
            m["inputMetrics"]["bytesRead"].as_f64().unwrap(),
            "input",
        );
        close(
            f(9, i),
            m["shuffleWriteMetrics"]["bytesWritten"].as_f64().unwrap(),
            "shuffle write bytes",
        );
        close(
            f(10, i),
            e["schedulerDelay"].as_f64().unwrap() / 1e3,
            "scheduler delay",
        );
        assert_eq!(b.column(11).as_string::<i32>().value(i), "succeeded");
        let attrs: Value = serde_json::from_str(b.column(12).as_string::<i32>().value(i)).unwrap();
        assert_eq!(attrs["index"], e["index"]);
        assert_eq!(attrs["locality"], e["taskLocality"]);
        close(
            attrs["executor_run_time"].as_f64().unwrap(),
            m["executorRunTime"].as_f64().unwrap() / 1e3,
            "run time",
        );
    }
}

/// Stages and jobs of `local-1422981780767` against the History Server's
/// stage list and job list; its executor list gives the one driver.
#[tokio::test]
async fn stages_and_jobs_match_the_history_server() {
    let store = Store::open("memory://").unwrap();
    ingest_into(
        &store,
        &[&spark("apache-spark/spark-events/local-1422981780767")],
    )
    .await;
    let read = |f: &str| -> Vec<Value> {
        serde_json::from_slice(
            &std::fs::read(spark(&format!(
                "apache-spark/HistoryServerExpectations/{f}"
            )))
            .unwrap(),
        )
        .unwrap()
    };
    for s in read("stage_list_json_expectation.json") {
        let id = s["stageId"].as_i64().unwrap();
        let b = query(
            &store,
            &format!("SELECT submit_time, end_time, attrs FROM stages WHERE stage_id = '{id}'"),
        )
        .await;
        assert_eq!(b[0].num_rows(), 1, "stage {id}");
        let t = |c: usize| {
            b[0].column(c)
                .as_primitive::<TimestampMicrosecondType>()
                .value(0)
                / 1000
        };
        assert_eq!(
            t(0),
            hs_millis(&s["submissionTime"]),
            "stage {id} submitted"
        );
        assert_eq!(
            t(1),
            hs_millis(&s["completionTime"]),
            "stage {id} completed"
        );
        let attrs: Value =
            serde_json::from_str(b[0].column(2).as_string::<i32>().value(0)).unwrap();
        assert_eq!(attrs["num_tasks"], s["numTasks"], "stage {id}");
        let status = if s["status"] == "COMPLETE" {
            "succeeded"
        } else {
            "failed"
        };
        assert_eq!(attrs["status"], status, "stage {id}");
        let tasks = count(
            &store,
            &format!("SELECT count(*) FROM tasks WHERE stage_id = '{id}'"),
        )
        .await;
        let done = s["numCompleteTasks"].as_i64().unwrap() + s["numFailedTasks"].as_i64().unwrap();
        assert_eq!(tasks, done, "stage {id} tasks");
    }
    // Spark 1.2 jobs have no times and no SQL: one query per job.
    for j in read("job_list_json_expectation.json") {
        let id = j["jobId"].as_i64().unwrap();
        let b = query(
            &store,
            &format!("SELECT status FROM queries WHERE query_id = 'local-1422981780767:job:{id}'"),
        )
        .await;
        let want = if j["status"] == "SUCCEEDED" {
            "succeeded"
        } else {
            "failed"
        };
        assert_eq!(b[0].column(0).as_string::<i32>().value(0), want, "job {id}");
    }
    let execs = read("executor_list_json_expectation.json");
    let b = query(&store, "SELECT executor_id, host FROM executors").await;
    assert_eq!(b[0].num_rows(), execs.len());
    assert_eq!(
        b[0].column(0).as_string::<i32>().value(0),
        execs[0]["id"].as_str().unwrap()
    );
    assert_eq!(
        format!("{}:", b[0].column(1).as_string::<i32>().value(0)),
        execs[0]["hostPort"]
            .as_str()
            .unwrap()
            .split(':')
            .next()
            .unwrap()
            .to_string()
            + ":"
    );
}

/// A task of the generated Spark 3.5.3 log, value by value against its
/// `SparkListenerTaskEnd` line (task 3 of stage 0).
#[tokio::test]
async fn a_task_matches_its_event_line() {
    let store = Store::open("memory://").unwrap();
    ingest_into(&store, &[&spark(GENERATED)]).await;
    let b = query(
        &store,
        "SELECT launch_time, finish_time, cpu_seconds, gc_seconds, output_bytes, cpu_blocked, \
         host, executor_id, query_id, ready_time FROM tasks \
         WHERE task_id = 'app-20261121050126-0000:task:3'",
    )
    .await;
    let f = |c: usize| b[0].column(c).as_primitive::<Float64Type>().value(0);
    let t = |c: usize| {
        b[0].column(c)
            .as_primitive::<TimestampMicrosecondType>()
            .value(0)
    };
    // "Launch Time":1795237302607, "Finish Time":1795237309283,
    // "Executor CPU Time":1200016041, "JVM GC Time":136, "Executor Run
    // Time":5234, Output "Bytes Written":3655877, "Host":"192.0.2.2".
    assert_eq!(t(0), 1_795_237_302_607_000);
    assert_eq!(t(1), 1_795_237_309_283_000);
    assert!((f(2) - 1.200016041).abs() < 1e-12);
    assert!((f(3) - 0.136).abs() < 1e-12);
    assert_eq!(f(4), 3_655_877.0);
    assert!((f(5) - (5.234 - 1.200016041)).abs() < 1e-9);
    assert_eq!(b[0].column(6).as_string::<i32>().value(0), "192.0.2.2");
    assert_eq!(b[0].column(7).as_string::<i32>().value(0), "1");
    assert_eq!(
        b[0].column(8).as_string::<i32>().value(0),
        "app-20261121050126-0000:sql:0"
    );
    assert!(
        b[0].column(9).is_valid(0),
        "ready_time from the stage's submission"
    );
    // The two executors of 2 cores give 4 slots on the one host.
    let slots = query(
        &store,
        "SELECT sum(capacity) FROM host_windows WHERE resource = 'slots'",
    )
    .await;
    assert_eq!(
        slots[0].column(0).as_primitive::<Float64Type>().value(0),
        4.0
    );
    // Slots belong to the application: the rows' scope is its id, which the
    // log's SparkListenerApplicationStart gives.
    let scope = query(
        &store,
        "SELECT DISTINCT scope FROM host_windows WHERE resource = 'slots'",
    )
    .await;
    assert_eq!(scope[0].num_rows(), 1);
    assert_eq!(
        scope[0].column(0).as_string::<i32>().value(0),
        "app-20261121050126-0000"
    );
}

/// Executors, and so their slots, belong to one application (issue 16): two
/// applications running at the same time on the same host never blame each
/// other for slot waits. The generated log, and a copy of it under another
/// application id (same times, same host), in one store: every slot wait of
/// one application is blamed on its own queries (or `unknown`), never on
/// the other's. Cluster-wide, as before, about half went to the other copy.
#[tokio::test]
async fn applications_never_blame_each_other_for_slots() {
    const A: &str = "app-20261121050126-0000";
    const B: &str = "app-20261121050126-0001";
    let tmp = tempfile::tempdir().unwrap();
    let log = std::fs::read_to_string(spark(GENERATED)).unwrap();
    assert!(log.contains(A));
    std::fs::write(tmp.path().join(B), log.replace(A, B)).unwrap();
    let store = Store::open("memory://").unwrap();
    ingest_into(&store, &[&spark(GENERATED), &tmp.path().join(B)]).await;
    // Each application's executors are its own slot pool.
    let b = query(
        &store,
        "SELECT scope, sum(capacity) FROM host_windows WHERE resource = 'slots' \
         GROUP BY scope ORDER BY scope",
    )
    .await;
    let scopes: Vec<(String, f64)> = (0..b[0].num_rows())
        .map(|i| {
            (
                b[0].column(0).as_string::<i32>().value(i).to_string(),
                b[0].column(1).as_primitive::<Float64Type>().value(i),
            )
        })
        .collect();
    assert_eq!(scopes, [(A.to_string(), 4.0), (B.to_string(), 4.0)]);
    for (me, other) in [(A, B), (B, A)] {
        let b = query(
            &store,
            &format!(
                "SELECT sum(CASE WHEN culprit_query LIKE '{me}%' THEN blame_seconds ELSE 0 END), \
                 sum(CASE WHEN culprit_query LIKE '{other}%' THEN blame_seconds ELSE 0 END) \
                 FROM blame(NULL, 'victim_stages=all', 'slots=direct') \
                 WHERE resource = 'slots' AND victim_query LIKE '{me}%'"
            ),
        )
        .await;
        let own = b[0].column(0).as_primitive::<Float64Type>().value(0);
        let across = b[0].column(1).as_primitive::<Float64Type>().value(0);
        assert!(
            own > 1.0,
            "{me}: its slot waits are blamed on its own queries ({own} s)"
        );
        assert_eq!(
            across, 0.0,
            "{me}: {across} s of slot wait blamed on {other}"
        );
    }
}

/// The same log written by each codec's Java library, as Spark writes event
/// logs (lz4-java, snappy-java, compress-lzf, zstd-jni; Debian's packages),
/// gives tables identical to the plain log's.
#[tokio::test]
async fn every_codec_gives_identical_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let jars = [
        "/usr/share/java/lz4-java.jar",
        "/usr/share/java/snappy-java.jar",
        "/usr/share/java/compress-lzf.jar",
        "/usr/share/java/zstd-jni.jar",
    ];
    for j in jars {
        assert!(
            Path::new(j).exists(),
            "{j} is missing: install liblz4-java libsnappy-java libcompress-lzf-java \
             libzstd-jni-java (.ci/run does)"
        );
    }
    let cp = jars.join(":");
    let src = repo_root().join("tests/spark/SparkCodecs.java");
    let out = std::process::Command::new("javac")
        .args(["-d", tmp.path().to_str().unwrap(), "-cp", &cp])
        .arg(&src)
        .output()
        .expect("javac (a JDK) is needed");
    assert!(
        out.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tmp.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("app-20261121050126-0000");
    let out = std::process::Command::new("java")
        .args([
            "-cp",
            &format!("{}:{cp}", tmp.path().display()),
            "SparkCodecs",
        ])
        .arg(spark(GENERATED))
        .arg(&prefix)
        .output()
        .expect("java");
    assert!(
        out.status.success(),
        "java: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let dump = |store: Store| async move {
        let mut s = String::new();
        for (t, key) in [
            ("queries", "query_id"),
            ("stages", "query_id, stage_id"),
            ("tasks", "task_id"),
            ("executors", "executor_id"),
            ("host_windows", "host, window_start"),
        ] {
            s += &pretty(&query(&store, &format!("SELECT * FROM {t} ORDER BY {key}")).await);
        }
        s
    };
    let plain = Store::open("memory://").unwrap();
    ingest_into(&plain, &[&spark(GENERATED)]).await;
    let want = dump(plain).await;
    assert!(want.contains("app-20261121050126-0000:task:336"));
    for codec in ["lz4", "snappy", "lzf", "zstd"] {
        let file = PathBuf::from(format!("{}.{codec}", prefix.display()));
        let store = Store::open("memory://").unwrap();
        let report = ingest_into(&store, &[&file]).await;
        assert!(report.rejected.is_empty(), "{codec}: {:?}", report.rejected);
        assert_eq!(report.spark_logs, 1, "{codec}");
        assert!(
            dump(store).await == want,
            "{codec}: tables differ from the plain log's"
        );
    }
}

/// Logs in progress: the cut last line is expected (a note, not a
/// rejection), unfinished stages and queries wait, finished tasks are in.
#[tokio::test]
async fn logs_in_progress() {
    for (rel, tasks) in [
        (
            "generated-pyspark-3.5.3/events/local-1795237547658.inprogress",
            68,
        ),
        (
            "generated-pyspark-3.5.3/events/local-1795237569429.lz4.inprogress",
            57,
        ),
    ] {
        let store = Store::open("memory://").unwrap();
        let report = ingest_into(&store, &[&spark(rel)]).await;
        assert!(report.rejected.is_empty(), "{rel}: {:?}", report.rejected);
        assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, tasks);
        assert_eq!(
            count(&store, "SELECT count(*) FROM stages WHERE end_time IS NULL").await,
            0,
            "{rel}: unfinished stages wait for the log to go on"
        );
        assert_eq!(
            count(&store, "SELECT count(*) FROM host_windows").await,
            0,
            "{rel}: slot capacity waits for the executors to be final"
        );
        if rel.ends_with(".lz4.inprogress") {
            assert!(
                report
                    .notes
                    .iter()
                    .any(|n| n.contains("ends early") || n.contains("cut")),
                "{rel}: {:?}",
                report.notes
            );
        }
    }
}

/// A malformed line is reported with its file and line, the rest of the log
/// is ingested; unknown events are counted; a file that is no event log is
/// rejected with a reason; a corrupt compressed log stores nothing.
#[tokio::test]
async fn bad_input_is_reported_and_the_rest_ingested() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(spark(GENERATED)).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(100, "{\"Event\":\"SparkListenerTaskEnd\", this is not JSON");
    lines.insert(200, "{\"Event\":\"SparkListenerSomethingNew\",\"x\":1}");
    let bad = tmp.path().join("app-bad");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(&store, &[&bad]).await;
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    let r = &report.rejected[0];
    assert!(r.file.ends_with("app-bad"));
    assert_eq!(r.location.as_deref(), Some("line 101"));
    assert!(r.reason.contains("malformed JSON"), "{}", r.reason);
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("SparkListenerSomethingNew x1")));
    assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, 337);

    let not_a_log = tmp.path().join("notes.txt");
    std::fs::write(&not_a_log, "hello\n").unwrap();
    let report = ingest_into(&store, &[&not_a_log]).await;
    assert_eq!(report.rejected.len(), 1);
    assert!(report.rejected[0].reason.contains("nor a Spark event log"));

    // A corrupt lz4 block: the log is rejected with the reason, nothing of
    // it is stored.
    let mut lz4 = std::fs::read(spark(
        "generated-pyspark-3.5.3/events/app-20261121050306-0000.lz4",
    ))
    .unwrap();
    let mid = lz4.len() / 2;
    for b in &mut lz4[mid..mid + 64] {
        *b ^= 0x5a;
    }
    let corrupt = tmp.path().join("app-corrupt.lz4");
    std::fs::write(&corrupt, &lz4).unwrap();
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(&store, &[&corrupt]).await;
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    assert!(
        report.rejected[0].reason.contains("lz4"),
        "{}",
        report.rejected[0].reason
    );
    assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, 0);
}

/// Blame on an ingested Spark log with concurrent queries: non-empty,
/// conserving (the victim's blame sums to its blocked seconds, DOR to 1), and
/// the top culprit is one the workload's ground truth calls a culprit.
#[tokio::test]
async fn blame_on_a_spark_log() {
    let store = Store::open("memory://").unwrap();
    ingest_into(&store, &[&spark(GENERATED)]).await;
    let truth: Value = serde_json::from_slice(
        &std::fs::read(spark("generated-pyspark-3.5.3/fair_plain.workload.json")).unwrap(),
    )
    .unwrap();
    let culprit_users: Vec<&str> = truth["queries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["role"] == "culprit")
        .map(|q| q["user"].as_str().unwrap())
        .collect();
    // The victim query that ran next to the culprits.
    let victim = "app-20261121050126-0000:sql:9";
    let b = query(
        &store,
        &format!(
            "SELECT c.culprit_kind, q.\"user\", c.blame_seconds, c.dor \
             FROM culprits('{victim}', 'victim_stages=all') c \
             LEFT JOIN queries q ON c.culprit_query = q.query_id \
             ORDER BY c.blame_seconds DESC"
        ),
    )
    .await;
    let b = arrow::compute::concat_batches(&b[0].schema(), &b).unwrap();
    assert!(b.num_rows() >= 2, "{}", pretty(std::slice::from_ref(&b)));
    assert_eq!(b.column(0).as_string::<i32>().value(0), "query");
    let top_user = b.column(1).as_string::<i32>().value(0);
    assert!(culprit_users.contains(&top_user), "top culprit {top_user}");
    let blame: f64 = b
        .column(2)
        .as_primitive::<Float64Type>()
        .iter()
        .flatten()
        .sum();
    let dor: f64 = b
        .column(3)
        .as_primitive::<Float64Type>()
        .iter()
        .flatten()
        .sum();
    assert!((dor - 1.0).abs() < 1e-9, "dor sums to {dor}");

    // Blocked seconds of the victim's tasks, from the tasks table: CPU
    // (at least GC), network, disk write, and the slot wait.
    let t = query(
        &store,
        &format!(
            "SELECT cpu_blocked, gc_seconds, network_blocked, disk_write_blocked, ready_time, launch_time \
             FROM tasks WHERE query_id = '{victim}'"
        ),
    )
    .await;
    let mut blocked = 0.0;
    for b in &t {
        let f = |c: usize, i: usize| float_or_zero(b, c, i);
        let ts = |c: usize, i: usize| micros(b, c, i);
        for i in 0..b.num_rows() {
            blocked += f(0, i).max(f(1, i)) + f(2, i) + f(3, i);
            blocked += (ts(5, i) - ts(4, i)) as f64 / 1e6;
        }
    }
    assert!(blocked > 60.0, "{blocked}");
    assert!(
        (blame - blocked).abs() < 1e-6 * blocked,
        "blame {blame} vs blocked {blocked}"
    );
}

fn wait_for(store: &str, sql: &str, want: &str, timeout: Duration) {
    let start = Instant::now();
    loop {
        let out = run(&["sql", "--store", store, "--format", "csv", sql]);
        let got = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .to_string();
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "{sql}: waited {timeout:?} for {want}, last {got}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn stop(mut child: std::process::Child) {
    let pid = child.id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "watch did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

const COUNTS: &str = "SELECT (SELECT count(*) FROM queries) q, (SELECT count(*) FROM stages) s, \
     (SELECT count(*) FROM tasks) t, (SELECT count(*) FROM executors) e, \
     (SELECT count(*) FROM host_windows) h";

/// `culprit ingest --watch`: a log written while it runs is ingested as it
/// grows (a cut line at each step), then whole when it completes; a restart
/// adds nothing twice.
#[test]
fn watch_follows_a_growing_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spark-events");
    std::fs::create_dir_all(&dir).unwrap();
    let store = tmp.path().join("store").display().to_string();
    let log = std::fs::read(spark(GENERATED)).unwrap();
    let live = dir.join("app-20261121050126-0000.inprogress");
    let start_watch = || {
        culprit()
            .args(["ingest", "--watch", "--interval", "0.2", "--store", &store])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    std::fs::write(&live, &log[..log.len() / 3]).unwrap();
    let watch = start_watch();
    wait_for(
        &store,
        "SELECT count(*) > 0 FROM tasks",
        "true",
        Duration::from_secs(60),
    );
    // Grow it, cutting a line in the middle, as a running driver does.
    std::fs::write(&live, &log[..2 * log.len() / 3]).unwrap();
    let half = {
        let start = Instant::now();
        loop {
            let out = run_ok(&[
                "sql",
                "--store",
                &store,
                "--format",
                "csv",
                "SELECT count(*) FROM tasks",
            ]);
            let n: i64 = out.lines().last().unwrap().parse().unwrap();
            if n > 100 {
                break n;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "stuck at {n} tasks"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    assert!(half < 337);
    // The driver finishes: the log is renamed to its final name.
    std::fs::write(&live, &log).unwrap();
    std::fs::rename(&live, dir.join("app-20261121050126-0000")).unwrap();
    wait_for(&store, COUNTS, "15,37,337,2,2", Duration::from_secs(60));
    stop(watch);
    let version = |store: &str| {
        Store::open(store).map(|s| {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(s.manifest())
                .unwrap()
                .version
        })
    };
    let before = version(&store).unwrap();
    // A restart reads everything again and stores nothing twice: its first
    // look says it found the log already ingested.
    let mut watch = culprit()
        .args(["ingest", "--watch", "--interval", "0.2", "--store", &store])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = crate::ingest::stderr_lines(&mut watch);
    let mut seen = Vec::new();
    crate::ingest::wait_line(&lines, "1 files already ingested", &mut seen);
    stop(watch);
    assert!(seen.iter().any(|l| l.contains("no new rows")), "{seen:#?}");
    assert_eq!(version(&store).unwrap(), before, "{seen:#?}");
    wait_for(&store, COUNTS, "15,37,337,2,2", Duration::from_secs(5));
    assert_eq!(
        run_ok(&[
            "sql",
            "--store",
            &store,
            "--format",
            "csv",
            "SELECT count(DISTINCT task_id) FROM tasks"
        ])
        .lines()
        .last()
        .unwrap(),
        "337"
    );
}

/// Issue #16: a byte-different copy of an application already ingested (the
/// same log with one more event line, as a listener that writes its own
/// events leaves it) adds nothing: not its keyed rows, nor its slot
/// capacity rows (`host_windows`, identified by host, resource, scope and
/// window).
/// Nor does the copy read in the same ingest as the original.
#[tokio::test]
async fn a_byte_different_copy_of_a_log_adds_no_slot_rows() {
    let log = std::fs::read_to_string(spark(GENERATED)).unwrap();
    // Counted from the log itself: one slots row per executor added.
    let executors = log
        .lines()
        .filter(|l| l.contains("\"Event\":\"SparkListenerExecutorAdded\""))
        .count() as i64;
    assert_eq!(executors, 2);
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("copy").join("app-20261121050126-0000");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::write(
        &copy,
        format!("{log}{{\"Event\":\"org.example.AuditEvent\",\"note\":\"copied\"}}\n"),
    )
    .unwrap();
    const SLOTS: &str = "SELECT count(*) FROM host_windows WHERE resource = 'slots'";

    let store = Store::open("memory://").unwrap();
    let first = ingest_into(&store, &[&spark(GENERATED)]).await;
    assert!(first.rejected.is_empty(), "{:?}", first.rejected);
    assert_eq!(count(&store, SLOTS).await, executors);
    let tasks = count(&store, "SELECT count(*) FROM tasks").await;
    let again = ingest_into(&store, &[&copy]).await;
    assert_eq!(again.duplicate_files, 0, "the copy is byte-different");
    assert_eq!(again.spark_logs, 1);
    assert!(again.rows.is_empty(), "{:?}", again.rows);
    assert_eq!(count(&store, SLOTS).await, executors);
    assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, tasks);

    // Both in one ingest.
    let store = Store::open("memory://").unwrap();
    ingest_into(&store, &[&spark(GENERATED), &copy]).await;
    assert_eq!(count(&store, SLOTS).await, executors);
    assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, tasks);
}
