//! Record lineage for the simulated workload (method.md section 10, 002
//! §4.2): the `record_lineage` and `partition_latency` tables, with one
//! injected expensive input record whose id the [`Workload`] names as the
//! ground truth of `expensive_inputs()`.
//!
//! Every task computes [`RECORDS_PER_TASK`] output records. A task's CPU
//! seconds are split among its records (so the latencies of a task's
//! records add up to its `cpu_seconds` in the `tasks` table); a task of a
//! stage without parents reads raw input (`file:` ids, not records), a task
//! of a later stage reads its parents' records hash-partitioned over the
//! stage's records (partition = the task), and its partition's shuffle
//! latency is the time its fetch takes at a single task's full network rate.
//! In the hot query, the first record of its first task takes
//! [`HOT_SHARE`] of that task's time: a skewed key.
//!
//! [`Workload`]: crate::Workload

use arrow::record_batch::RecordBatch;
use culprit_core::batches::{TableBuilder, Value};
use culprit_core::Table;

use crate::rng::Rng;

pub const RECORDS_PER_TASK: usize = 4;
/// The share of its task's CPU time the injected expensive record takes.
pub const HOT_SHARE: f64 = 0.7;

/// What the generator needs of one finished task.
pub struct LineageTask<'a> {
    pub query: &'a str,
    pub task_id: String,
    pub stage: usize,
    pub index: usize,
    pub parents: &'a [usize],
    pub cpu_seconds: f64,
    pub fetch_seconds: f64,
}

/// The two tables, and the id of the injected expensive record (empty when
/// `hot_query` has no task).
pub struct Lineage {
    pub record_lineage: RecordBatch,
    pub partition_latency: RecordBatch,
    pub expensive_input: String,
}

/// Lineage of `tasks` (in query, stage, index order), reproducibly from
/// `seed`.
pub fn lineage(tasks: &[LineageTask], hot_query: &str, seed: u64) -> Lineage {
    let mut rng = Rng::new(seed ^ 0x0114_EA6E);
    let mut rows = TableBuilder::new(Table::RecordLineage, tasks.len() * RECORDS_PER_TASK);
    let mut partitions = TableBuilder::new(Table::PartitionLatency, tasks.len());
    let mut expensive_input = String::new();
    let record = |t: &LineageTask, k: usize| format!("{}/r{k}", t.task_id);
    // Tasks of one query, stage by stage.
    let mut start = 0;
    while start < tasks.len() {
        let query = tasks[start].query;
        let end = start
            + tasks[start..]
                .iter()
                .take_while(|t| t.query == query)
                .count();
        let of_query = &tasks[start..end];
        let stage_tasks = |s: usize| of_query.iter().filter(move |t| t.stage == s);
        for t in of_query {
            let hot = query == hot_query && t.stage == 0 && t.index == 0;
            let weights = split(&mut rng, hot);
            // The records this task's records read: raw input, or its share
            // of the parents' records (record j of the parents goes to record
            // j mod n of the stage).
            let inputs: Vec<Vec<String>> = if t.parents.is_empty() {
                (0..RECORDS_PER_TASK)
                    .map(|k| vec![format!("file:{}", record(t, k))])
                    .collect()
            } else {
                let n = stage_tasks(t.stage).count() * RECORDS_PER_TASK;
                let mut ins = vec![Vec::new(); RECORDS_PER_TASK];
                let parent_records = t.parents.iter().flat_map(|&p| {
                    stage_tasks(p)
                        .flat_map(move |pt| (0..RECORDS_PER_TASK).map(move |k| record(pt, k)))
                });
                for (j, id) in parent_records.enumerate() {
                    let to = j % n;
                    if to / RECORDS_PER_TASK == t.index {
                        ins[to % RECORDS_PER_TASK].push(id);
                    }
                }
                ins
            };
            let partition = format!("{}/p{}", t.stage, t.index);
            for (k, ins) in inputs.iter().enumerate() {
                let id = record(t, k);
                if hot && k == 0 {
                    expensive_input = id.clone();
                }
                rows.row(&[
                    ("query_id", Value::S(query)),
                    ("stage_id", Value::S(&t.stage.to_string())),
                    ("output_id", Value::S(&id)),
                    ("input_ids", Value::S(&ins.join(","))),
                    ("computation_latency", Value::F(t.cpu_seconds * weights[k])),
                    ("partition", Value::S(&partition)),
                ]);
            }
            if !t.parents.is_empty() {
                partitions.row(&[
                    ("query_id", Value::S(query)),
                    ("stage_id", Value::S(&t.stage.to_string())),
                    ("partition", Value::S(&partition)),
                    ("latency", Value::F(t.fetch_seconds)),
                ]);
            }
        }
        start = end;
    }
    Lineage {
        record_lineage: rows.finish(),
        partition_latency: partitions.finish(),
        expensive_input,
    }
}

/// Shares of a task's time per record, adding up to 1: close to even, or
/// with the first record taking [`HOT_SHARE`].
fn split(rng: &mut Rng, hot: bool) -> [f64; RECORDS_PER_TASK] {
    let mut w = [0.0; RECORDS_PER_TASK];
    for x in &mut w {
        *x = rng.range(0.8, 1.2);
    }
    let total: f64 = w.iter().sum();
    let first = if hot { HOT_SHARE } else { w[0] / total };
    let others: f64 = total - w[0];
    let mut out = [0.0; RECORDS_PER_TASK];
    out[0] = first;
    for k in 1..RECORDS_PER_TASK {
        out[k] = (1.0 - first) * w[k] / others;
    }
    out
}
