//! The other papers' analyses (method.md sections 9-11) end to end: on real
//! Spark event logs, checked against this test's own reading of their
//! `SparkListenerTaskEnd` events, and on simulated data, checked against
//! the simulator's ground truth. The worked examples are in
//! `sql/papers.slt`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use culprit_store::Store;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};
use serde_json::Value;

use crate::spark::{ingest_into, query, spark};

const Q72: &str = "nvidia-spark-rapids-tools/spark-events-qualification/nds_q72_dataproc_2_2.zstd";
const Q66: &str = "nvidia-spark-rapids-tools/spark-events-profiling/nds_q66_gpu.zstd";
const SPARKLINT: &str =
    "groupon-sparklint/docs/spark_summit_euro_2016/event_logs/application_1472176676028_407508_1";

/// One task attempt as the log has it (its first end).
struct LogTask {
    stage: String,
    launch_ms: i64,
    finish_ms: i64,
    /// Input bytes plus shuffle bytes read (remote and local).
    read: f64,
    gc_ms: f64,
    /// Records read plus shuffle records read, when the log has either.
    records: Option<f64>,
}

impl LogTask {
    fn seconds(&self) -> f64 {
        (self.finish_ms - self.launch_ms) as f64 / 1000.0
    }
}

/// Every task of a Spark event log by its Task ID, read line by line.
fn log_tasks(path: &Path) -> BTreeMap<i64, LogTask> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "zstd") {
        Box::new(zstd::stream::read::Decoder::new(file).unwrap())
    } else {
        Box::new(file)
    };
    let mut tasks = BTreeMap::new();
    for line in BufReader::new(reader).lines() {
        let line = line.unwrap();
        if !line.contains("\"SparkListenerTaskEnd\"") {
            continue;
        }
        let Ok(e) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let info = &e["Task Info"];
        let id = info["Task ID"].as_i64().unwrap();
        let num = |v: &Value| v.as_f64();
        let m = &e["Task Metrics"];
        let input = num(&m["Input Metrics"]["Bytes Read"]).unwrap_or(0.0);
        let shuffle = &m["Shuffle Read Metrics"];
        let remote = num(&shuffle["Remote Bytes Read"]).unwrap_or(0.0);
        let local = num(&shuffle["Local Bytes Read"]).unwrap_or(0.0);
        let records = match (
            num(&m["Input Metrics"]["Records Read"]),
            num(&shuffle["Total Records Read"]),
        ) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        let (stage, attempt) = (
            e["Stage ID"].as_i64().unwrap(),
            e["Stage Attempt ID"].as_i64().unwrap_or(0),
        );
        tasks.entry(id).or_insert(LogTask {
            stage: if attempt == 0 {
                stage.to_string()
            } else {
                format!("{stage}.{attempt}")
            },
            launch_ms: info["Launch Time"].as_i64().unwrap(),
            finish_ms: info["Finish Time"].as_i64().unwrap(),
            read: input + remote + local,
            gc_ms: num(&m["JVM GC Time"]).unwrap_or(0.0),
            records,
        });
    }
    assert!(!tasks.is_empty(), "{}: no TaskEnd events", path.display());
    tasks
}

/// The median (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Stragglers per stage by 004 §5's rule, computed here: seconds per byte
/// read above 1.5 times the stage's median (tasks that read nothing have no
/// rate).
fn own_stragglers(tasks: &BTreeMap<i64, LogTask>) -> BTreeMap<String, usize> {
    let mut by_stage: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for t in tasks.values().filter(|t| t.read > 0.0) {
        by_stage
            .entry(&t.stage)
            .or_default()
            .push(t.seconds() / t.read);
    }
    let mut out = BTreeMap::new();
    for (stage, rates) in by_stage {
        let m = median(rates.clone()).unwrap();
        let n = rates.iter().filter(|r| **r > 1.5 * m).count();
        if n > 0 {
            out.insert(stage.to_string(), n);
        }
    }
    out
}

fn texts(b: &[RecordBatch], c: usize) -> Vec<String> {
    b.iter()
        .flat_map(|b| {
            let a = b.column(c).as_string::<i32>();
            (0..a.len())
                .map(|i| a.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn floats(b: &[RecordBatch], c: usize) -> Vec<f64> {
    b.iter()
        .flat_map(|b| {
            let a = b.column(c).as_primitive::<Float64Type>();
            (0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>()
        })
        .collect()
}

fn ints(b: &[RecordBatch], c: usize) -> Vec<i64> {
    b.iter()
        .flat_map(|b| {
            let a = b.column(c).as_primitive::<Int64Type>();
            (0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>()
        })
        .collect()
}

async fn store_of(rel: &str) -> (Store, BTreeMap<i64, LogTask>) {
    let path = spark(rel);
    let store = Store::open("memory://").unwrap();
    let report = ingest_into(&store, &[&path]).await;
    assert!(report.rejected.is_empty(), "{rel}: {:?}", report.rejected);
    (store, log_tasks(&path))
}

async fn queries(store: &Store) -> Vec<String> {
    texts(
        &query(store, "SELECT DISTINCT query_id FROM tasks ORDER BY 1").await,
        0,
    )
}

/// `stragglers()` finds, stage by stage, the tasks this test counts from the
/// log's TaskEnd events, on two TPC-DS runs and a production log.
#[tokio::test]
async fn stragglers_match_the_logs_task_ends() {
    for rel in [Q72, Q66, SPARKLINT] {
        let (store, tasks) = store_of(rel).await;
        let want = own_stragglers(&tasks);
        assert!(
            !want.is_empty(),
            "{rel}: the test needs a log with stragglers"
        );
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        let mut seen = HashSet::new();
        for q in queries(&store).await {
            let b = query(
                &store,
                &format!("SELECT stage_id, task_id, ratio, causes FROM stragglers('{q}')"),
            )
            .await;
            for ((stage, task), (ratio, causes)) in texts(&b, 0)
                .into_iter()
                .zip(texts(&b, 1))
                .zip(floats(&b, 2).into_iter().zip(texts(&b, 3)))
            {
                assert!(ratio > 1.5, "{rel}: {task} has ratio {ratio}");
                assert!(!causes.is_empty(), "{rel}: {task} has no cause");
                assert!(seen.insert(task.clone()), "{rel}: {task} twice");
                *got.entry(stage).or_default() += 1;
            }
        }
        assert_eq!(got, want, "{rel}: stragglers per stage");
    }
}

/// `what_if(NULL, 'gc')` over a whole log removes exactly the log's JVM GC
/// time (each task's capped at its run time) from exactly its tasks, and
/// never reports an improvement outside [0, 1).
#[tokio::test]
async fn what_if_removes_the_logs_gc_time() {
    for rel in [Q72, SPARKLINT] {
        let (store, tasks) = store_of(rel).await;
        let b = query(
            &store,
            "SELECT query_id, tasks, removed_seconds, improvement, original_seconds, without_seconds \
             FROM what_if(NULL, 'gc') ORDER BY query_id",
        )
        .await;
        let (names, counts, removed, improvement) =
            (texts(&b, 0), ints(&b, 1), floats(&b, 2), floats(&b, 3));
        let (original, without) = (floats(&b, 4), floats(&b, 5));
        let total = names.iter().position(|n| n == "*").expect("the window row");
        assert_eq!(counts[total] as usize, tasks.len(), "{rel}: tasks");
        let gc: f64 = tasks
            .values()
            .map(|t| (t.gc_ms / 1000.0).min(t.seconds()))
            .sum();
        assert!(gc > 0.0, "{rel}: the test needs a log with GC time");
        assert!(
            (removed[total] - gc).abs() <= 1e-9 * gc,
            "{rel}: removed {} s of GC, the log has {gc} s",
            removed[total]
        );
        for i in 0..names.len() {
            assert!(
                (0.0..1.0).contains(&improvement[i]),
                "{rel}: {} improves by {}",
                names[i],
                improvement[i]
            );
            assert!(without[i] <= original[i] + 1e-9, "{rel}: {}", names[i]);
        }
    }
}

/// `estimate()` on a TPC-DS run: per stage, its tasks and observed span are
/// the log's, its estimate is positive; the whole-query row is the last
/// stage's end.
#[tokio::test]
async fn estimate_on_a_tpcds_run() {
    let (store, tasks) = store_of(Q72).await;
    let mut per_stage: HashMap<&str, (usize, i64, i64)> = HashMap::new();
    for t in tasks.values() {
        let e = per_stage.entry(&t.stage).or_insert((0, i64::MAX, i64::MIN));
        e.0 += 1;
        e.1 = e.1.min(t.launch_ms);
        e.2 = e.2.max(t.finish_ms);
    }
    let mut checked = 0;
    for q in queries(&store).await {
        let b = query(
            &store,
            &format!(
                "SELECT coalesce(stage_id, '*'), tasks, observed_seconds, estimated_seconds, end_seconds \
                 FROM estimate('{q}')"
            ),
        )
        .await;
        let (stages, counts, observed, estimated, ends) = (
            texts(&b, 0),
            ints(&b, 1),
            floats(&b, 2),
            floats(&b, 3),
            floats(&b, 4),
        );
        let last_end = ends[..ends.len() - 1].iter().copied().fold(0.0, f64::max);
        for i in 0..stages.len() {
            assert!(
                estimated[i] > 0.0,
                "{q}/{}: estimate {}",
                stages[i],
                estimated[i]
            );
            if stages[i] == "*" {
                assert_eq!(i, stages.len() - 1, "{q}: the query's row is last");
                assert!((estimated[i] - last_end).abs() < 1e-9, "{q}");
                continue;
            }
            let (n, first, last) = per_stage[stages[i].as_str()];
            assert_eq!(counts[i] as usize, n, "{q}/{}: tasks", stages[i]);
            let span = (last - first) as f64 / 1000.0;
            assert!(
                (observed[i] - span).abs() < 1e-9,
                "{q}/{}: observed {} s, the log says {span} s",
                stages[i],
                observed[i]
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "only {checked} stages");
}

/// `skewed_tasks()` ranks by records where the log has them: each task it
/// names has the records this test reads from its TaskEnd event, and a
/// ratio above the threshold.
#[tokio::test]
async fn skewed_tasks_count_the_logs_records() {
    let (store, tasks) = store_of(Q72).await;
    let ids: HashMap<String, i64> = {
        let b = query(&store, "SELECT task_id, attrs FROM tasks").await;
        texts(&b, 0)
            .into_iter()
            .zip(texts(&b, 1))
            .map(|(id, attrs)| {
                let v: Value = serde_json::from_str(&attrs).unwrap();
                (id, v["spark_task_id"].as_i64().unwrap_or(-1))
            })
            .collect()
    };
    let mut named = 0;
    for q in queries(&store).await {
        let b = query(
            &store,
            &format!("SELECT task_id, inputs, unit, ratio FROM skewed_tasks('{q}', 2)"),
        )
        .await;
        for (((task, inputs), unit), ratio) in texts(&b, 0)
            .into_iter()
            .zip(floats(&b, 1))
            .zip(texts(&b, 2))
            .zip(floats(&b, 3))
        {
            assert!(ratio > 2.0, "{task}: {ratio}");
            let log = &tasks[&ids[&task]];
            if unit == "records" {
                assert_eq!(Some(inputs), log.records, "{task}");
                named += 1;
            } else {
                assert_eq!(inputs, log.read, "{task}");
            }
        }
    }
    assert!(named > 0, "no task ranked by records");
}

/// On simulated data, `expensive_inputs()` names the record the simulator
/// injected, and the lineage it wrote adds up to the tasks' CPU seconds.
#[tokio::test]
async fn expensive_inputs_find_the_injected_record() {
    let truth = culprit_sim::simulate(&culprit_sim::SimConfig::default()).expensive_input;
    assert!(!truth.is_empty());
    let (_tmp, demo) = crate::common::demo_store();
    let store = Store::open(&demo).unwrap();
    let b = query(
        &store,
        "SELECT source_id, impact FROM expensive_inputs('q-victim', 3)",
    )
    .await;
    assert_eq!(texts(&b, 0)[0], truth);
    let impact = floats(&b, 1);
    assert!(impact[0] > impact[1], "{impact:?}");
    // The generator splits each task's CPU seconds among its records.
    let b = query(
        &store,
        "SELECT t.task_id, t.cpu_seconds, sum(l.computation_latency) \
         FROM tasks t JOIN record_lineage l ON starts_with(l.output_id, t.task_id || '/') \
         GROUP BY t.task_id, t.cpu_seconds",
    )
    .await;
    let (cpu, sum) = (floats(&b, 1), floats(&b, 2));
    assert_eq!(
        cpu.len() as i64,
        crate::spark::count(&store, "SELECT count(*) FROM tasks").await
    );
    for i in 0..cpu.len() {
        assert!((cpu[i] - sum[i]).abs() < 1e-9 * cpu[i].max(1.0), "{i}");
    }
}

/// On simulated data (window rows, not totals), `what_if()` removes from the
/// victim exactly the blocked seconds of its `task_windows` rows, resource
/// by resource, summed here by plain SQL over the input table.
#[tokio::test]
async fn what_if_on_simulated_windows() {
    let (_tmp, demo) = crate::common::demo_store();
    let store = Store::open(&demo).unwrap();
    for resource in ["network", "disk_read", "disk_write"] {
        let b = query(
            &store,
            &format!(
                "SELECT removed_seconds, improvement, tasks FROM what_if('q-victim', '{resource}')"
            ),
        )
        .await;
        let (removed, improvement, tasks) = (floats(&b, 0)[0], floats(&b, 1)[0], ints(&b, 2)[0]);
        let b = query(
            &store,
            &format!(
                "SELECT coalesce(sum(w.blocked), 0) FROM task_windows w JOIN tasks t USING (task_id) \
                 WHERE t.query_id = 'q-victim' AND w.resource = '{resource}'"
            ),
        )
        .await;
        let want = floats(&b, 0)[0];
        assert!(
            (removed - want).abs() <= 1e-9 * want.max(1.0),
            "{resource}: removed {removed} s, the windows hold {want} s"
        );
        assert!(
            (0.0..1.0).contains(&improvement),
            "{resource}: {improvement}"
        );
        assert_eq!(
            tasks,
            crate::spark::count(
                &store,
                "SELECT count(*) FROM tasks WHERE query_id = 'q-victim'"
            )
            .await
        );
    }
}
