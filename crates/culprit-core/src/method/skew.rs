//! Computation skew (method.md §10, seed 002 §4): which input record makes a
//! query slow, from record lineage; and, without lineage, which tasks spent
//! abnormally long computing per input record.

use rustc_hash::{FxHashMap, FxHashSet};

use super::model::Dataset;
use super::task_times::{median, query_id, query_tasks, task_times};
use crate::MethodError;

/// One lineage row (002 §4.2, figure 5): in `stage` of `query`, output
/// record `out_id` was computed from `in_ids` in `computation_latency`, in
/// partition `partition`. Input ids that are outputs of other rows of the
/// query link the stages; others (file offsets) are raw input. Output ids
/// are unique within a query. Latencies in any one unit (the interchange
/// uses seconds; the paper's example milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct LineageRow {
    pub query: String,
    pub stage: String,
    pub out_id: String,
    pub in_ids: Vec<String>,
    pub computation_latency: f64,
    pub partition: String,
}

/// The shuffle latency of one partition of a stage (002 §4.2), and, when
/// known, how many input records the partition had (default: the number of
/// input ids of the partition's lineage rows).
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionLatency {
    pub query: String,
    pub stage: String,
    pub partition: String,
    pub latency: f64,
    pub inputs: Option<u64>,
}

/// The latencies of one record (002 §4.2-4.3, the columns of figure 5).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordLatency {
    pub stage: String,
    pub out_id: String,
    /// `ComputationLatency + ShuffleLatency`.
    pub stage_latency: f64,
    /// `max over inputs of TotalLatency + StageLatency`.
    pub total_latency: f64,
    /// The source record behind the input with the largest total latency
    /// (the record itself for a source).
    pub most_impactful_source: String,
    /// Its latency if the most impactful source took no time.
    pub remediated_latency: f64,
    /// No other record of the query reads it.
    pub is_output: bool,
}

/// One expensive input record.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpensiveInput {
    pub query: String,
    pub source: String,
    /// The largest total latency of the outputs it is the most impactful
    /// source of.
    pub latency: f64,
    /// The largest remediated latency of those outputs.
    pub remediated_latency: f64,
    /// `latency - remediated_latency`.
    pub impact: f64,
    /// How many outputs it is the most impactful source of.
    pub outputs: usize,
}

fn check(name: &str, x: f64) -> Result<f64, MethodError> {
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(MethodError::InvalidArgument(format!(
            "{name} must be a finite non-negative number, not {x}"
        )))
    }
}

/// The latency of every record of `query` (method.md §10, 002 §4.2-4.3):
/// `ShuffleLatency(o) = |inputs of o| / |inputs of its partition| *
/// PartitionLatency`, `StageLatency = ComputationLatency + ShuffleLatency`,
/// `TotalLatency(o) = max over inputs of TotalLatency(i) + StageLatency(o)`;
/// the most impactful source is the one behind the input with the largest
/// total latency (ties: the first input listed); a source (a record none of
/// whose inputs is a record) is its own most impactful source and has a
/// remediated latency of 0. `RemediatedLatency(o) = StageLatency(o) + max
/// over inputs i` of `i`'s remediated latency when `i` has the same most
/// impactful source, else of its total latency (the paper's "maximum latency
/// over all input records except the most impactful source", carried through
/// several stages).
///
/// Errors: no row of `query`, a duplicate output id, a negative or
/// non-finite latency, or a cycle of records.
pub fn record_latencies(
    rows: &[LineageRow],
    partitions: &[PartitionLatency],
    query: &str,
) -> Result<Vec<RecordLatency>, MethodError> {
    let rows: Vec<&LineageRow> = rows.iter().filter(|r| r.query == query).collect();
    if rows.is_empty() {
        return Err(MethodError::UnknownQuery(query.to_string()));
    }
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, r) in rows.iter().enumerate() {
        check("computation_latency", r.computation_latency)?;
        if index.insert(r.out_id.as_str(), i).is_some() {
            return Err(MethodError::InvalidArgument(format!(
                "output id '{}' appears twice in query '{query}'",
                r.out_id
            )));
        }
    }
    // Inputs per partition.
    let mut part_inputs: FxHashMap<(&str, &str), u64> = FxHashMap::default();
    for r in &rows {
        *part_inputs
            .entry((r.stage.as_str(), r.partition.as_str()))
            .or_default() += r.in_ids.len() as u64;
    }
    let mut part_latency: FxHashMap<(&str, &str), (f64, u64)> = FxHashMap::default();
    for p in partitions.iter().filter(|p| p.query == query) {
        check("partition latency", p.latency)?;
        let key = (p.stage.as_str(), p.partition.as_str());
        let n = p
            .inputs
            .unwrap_or_else(|| part_inputs.get(&key).copied().unwrap_or(0));
        part_latency.insert(key, (p.latency, n));
    }
    // Known inputs, and a topological order (Kahn).
    let inputs: Vec<Vec<usize>> = rows
        .iter()
        .map(|r| {
            r.in_ids
                .iter()
                .filter_map(|i| index.get(i.as_str()).copied())
                .collect()
        })
        .collect();
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    let mut waiting: Vec<usize> = vec![0; rows.len()];
    for (o, ins) in inputs.iter().enumerate() {
        let distinct: FxHashSet<usize> = ins.iter().copied().collect();
        waiting[o] = distinct.len();
        for i in distinct {
            readers[i].push(o);
        }
    }
    let mut queue: Vec<usize> = (0..rows.len()).filter(|&o| waiting[o] == 0).collect();
    let mut order = Vec::with_capacity(rows.len());
    while let Some(o) = queue.pop() {
        order.push(o);
        for &r in &readers[o] {
            waiting[r] -= 1;
            if waiting[r] == 0 {
                queue.push(r);
            }
        }
    }
    if order.len() < rows.len() {
        return Err(MethodError::InvalidArgument(format!(
            "the lineage of query '{query}' has a cycle"
        )));
    }
    let mut total = vec![0.0f64; rows.len()];
    let mut stage_lat = vec![0.0f64; rows.len()];
    let mut mis = vec![0usize; rows.len()];
    let mut rem = vec![0.0f64; rows.len()];
    for o in order {
        let r = rows[o];
        let shuffle = match part_latency.get(&(r.stage.as_str(), r.partition.as_str())) {
            Some(&(lat, n)) if n > 0 => r.in_ids.len() as f64 * lat / n as f64,
            _ => 0.0,
        };
        stage_lat[o] = r.computation_latency + shuffle;
        let ins = &inputs[o];
        if ins.is_empty() {
            total[o] = stage_lat[o];
            mis[o] = o;
            rem[o] = 0.0;
            continue;
        }
        let mut arg = ins[0];
        for &i in ins {
            if total[i] > total[arg] {
                arg = i;
            }
        }
        total[o] = total[arg] + stage_lat[o];
        mis[o] = mis[arg];
        let rest = ins
            .iter()
            .map(|&i| if mis[i] == mis[o] { rem[i] } else { total[i] })
            .fold(0.0, f64::max);
        rem[o] = stage_lat[o] + rest;
    }
    Ok((0..rows.len())
        .map(|o| RecordLatency {
            stage: rows[o].stage.clone(),
            out_id: rows[o].out_id.clone(),
            stage_latency: stage_lat[o],
            total_latency: total[o],
            most_impactful_source: rows[mis[o]].out_id.clone(),
            remediated_latency: rem[o],
            is_output: readers[o].is_empty(),
        })
        .collect())
}

/// The `k` most expensive input records of `query` (method.md §10, 002
/// §4.3): the query's outputs (records no other record reads) grouped by
/// their most impactful source; a source's impact is its group's largest
/// total latency minus its largest remediated latency. Sorted by impact,
/// largest first (ties: source id). Errors as [`record_latencies`], and for
/// `k = 0`.
pub fn expensive_inputs(
    rows: &[LineageRow],
    partitions: &[PartitionLatency],
    query: &str,
    k: usize,
) -> Result<Vec<ExpensiveInput>, MethodError> {
    if k == 0 {
        return Err(MethodError::InvalidArgument("k must be positive".into()));
    }
    let lat = record_latencies(rows, partitions, query)?;
    let mut groups: FxHashMap<&str, ExpensiveInput> = FxHashMap::default();
    for r in lat.iter().filter(|r| r.is_output) {
        let g = groups
            .entry(r.most_impactful_source.as_str())
            .or_insert_with(|| ExpensiveInput {
                query: query.to_string(),
                source: r.most_impactful_source.clone(),
                latency: 0.0,
                remediated_latency: 0.0,
                impact: 0.0,
                outputs: 0,
            });
        g.latency = g.latency.max(r.total_latency);
        g.remediated_latency = g.remediated_latency.max(r.remediated_latency);
        g.outputs += 1;
    }
    let mut out: Vec<ExpensiveInput> = groups
        .into_values()
        .map(|mut g| {
            g.impact = g.latency - g.remediated_latency;
            g
        })
        .collect();
    out.sort_by(|a, b| {
        b.impact
            .total_cmp(&a.impact)
            .then_with(|| a.source.cmp(&b.source))
    });
    out.truncate(k);
    Ok(out)
}

/// A task that computed abnormally long per input record.
#[derive(Debug, Clone, PartialEq)]
pub struct SkewedTask {
    pub query: String,
    pub stage: String,
    pub task: String,
    pub host: String,
    /// `cpu_seconds`, or, in a stage where no task has CPU time, the run
    /// time minus the blocked and scheduler delay seconds.
    pub compute_seconds: f64,
    /// Input records, or bytes read when the stage's records are unknown.
    pub inputs: f64,
    /// `"records"` or `"bytes"`.
    pub unit: &'static str,
    /// `compute_seconds / inputs`.
    pub cost: f64,
    pub stage_median: f64,
    /// `cost / stage_median`.
    pub ratio: f64,
}

/// The threshold of [`skewed_tasks`]: a finite positive number.
pub fn check_threshold(threshold: f64) -> Result<(), MethodError> {
    if threshold.is_finite() && threshold > 0.0 {
        Ok(())
    } else {
        Err(MethodError::InvalidArgument(format!(
            "threshold must be a finite positive number, not {threshold}"
        )))
    }
}

/// Tasks of `query` whose compute time per input record is more than
/// `threshold` times their stage's median (method.md §10 without lineage,
/// in the spirit of 002 §4's per-record computation latency, and of 004 §5's
/// progress rates). `input_records` maps task ids to their input records (in
/// Spark event logs `records_read + shuffle_records_read`, which the
/// `tasks` table keeps in `attrs`); a stage where some task has no count is
/// ranked per byte read (`input_bytes + shuffle_read_bytes`) instead. Tasks
/// with no input are skipped. Sorted by ratio, largest first.
pub fn skewed_tasks(
    ds: &Dataset,
    query: &str,
    input_records: &FxHashMap<String, f64>,
    threshold: f64,
) -> Result<Vec<SkewedTask>, MethodError> {
    check_threshold(threshold)?;
    let q = query_id(ds, query)?;
    let ids = query_tasks(ds, q, None, None);
    let tasks = task_times(ds, &ids);
    let names = ds.task_names();
    let mut by_stage: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
    for (i, t) in tasks.iter().enumerate() {
        by_stage.entry(t.stage).or_default().push(i);
    }
    let mut out = Vec::new();
    for (s, idx) in by_stage {
        let records: Option<Vec<f64>> = idx
            .iter()
            .map(|&i| {
                input_records
                    .get(names[tasks[i].task as usize])
                    .copied()
                    .filter(|r| r.is_finite() && *r >= 0.0)
            })
            .collect();
        let (inputs, unit) = match records {
            Some(r) => (r, "records"),
            None => (
                idx.iter().map(|&i| tasks[i].read_bytes()).collect(),
                "bytes",
            ),
        };
        let use_cpu = idx.iter().any(|&i| tasks[i].cpu_seconds > 0.0);
        let compute: Vec<f64> = idx
            .iter()
            .map(|&i| {
                let t = &tasks[i];
                if use_cpu {
                    t.cpu_seconds
                } else {
                    (t.duration
                        - t.cpu_blocked
                        - t.disk_read_blocked
                        - t.disk_write_blocked
                        - t.network_blocked
                        - t.scheduler_delay)
                        .max(0.0)
                }
            })
            .collect();
        let cost: Vec<Option<f64>> = compute
            .iter()
            .zip(&inputs)
            .map(|(c, n)| (*n > 0.0).then(|| c / n))
            .collect();
        let Some(m) = median(cost.iter().flatten().copied()) else {
            continue;
        };
        for (j, &i) in idx.iter().enumerate() {
            let Some(c) = cost[j] else { continue };
            if c > threshold * m {
                let t = &tasks[i];
                out.push(SkewedTask {
                    query: query.to_string(),
                    stage: ds.stage_name(s).to_string(),
                    task: names[t.task as usize].to_string(),
                    host: ds.hosts.name(t.host).to_string(),
                    compute_seconds: compute[j],
                    inputs: inputs[j],
                    unit,
                    cost: c,
                    stage_median: m,
                    ratio: if m > 0.0 { c / m } else { f64::INFINITY },
                });
            }
        }
    }
    out.sort_by(|a, b| {
        b.ratio
            .total_cmp(&a.ratio)
            .then_with(|| a.task.cmp(&b.task))
    });
    Ok(out)
}
