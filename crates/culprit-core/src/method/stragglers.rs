//! Stragglers and their causes (method.md §9, seed 004 §5.2).

use std::fmt;

use rustc_hash::FxHashMap;

use super::model::{Dataset, Micros};
use super::task_times::{check_window, median, query_id, query_tasks, task_times, TaskTimes};
use crate::MethodError;

/// A task is a straggler when its inverse progress rate is above this many
/// times its stage's median (004 §5.2).
pub const STRAGGLER_FACTOR: f64 = 1.5;

/// Why a task straggled (004 §5.2, figure 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StragglerCause {
    SchedulerDelay,
    DiskRead,
    ShuffleRead,
    ShuffleWrite,
    Gc,
    OutputSkew,
    FirstTask,
    Unknown,
}

impl StragglerCause {
    pub fn as_str(self) -> &'static str {
        match self {
            StragglerCause::SchedulerDelay => "scheduler_delay",
            StragglerCause::DiskRead => "disk_read",
            StragglerCause::ShuffleRead => "shuffle_read",
            StragglerCause::ShuffleWrite => "shuffle_write",
            StragglerCause::Gc => "gc",
            StragglerCause::OutputSkew => "output_skew",
            StragglerCause::FirstTask => "first_task",
            StragglerCause::Unknown => "unknown",
        }
    }
}

impl fmt::Display for StragglerCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One straggler.
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerRow {
    pub query: String,
    pub stage: String,
    pub task: String,
    pub host: String,
    pub launch: Micros,
    pub duration_seconds: f64,
    /// Bytes read (input plus shuffle read).
    pub read_bytes: f64,
    /// Inverse progress rate, seconds per byte read.
    pub rate: f64,
    /// The median rate of the stage.
    pub stage_median: f64,
    /// `rate / stage_median`.
    pub ratio: f64,
    /// Every cause that explains it (in the order of [`StragglerCause`]);
    /// `[Unknown]` when none does.
    pub causes: Vec<StragglerCause>,
}

/// The tasks of a stage whose rate is above `STRAGGLER_FACTOR` times the
/// median, for durations `d` (tasks that read nothing have no rate and are
/// never stragglers).
fn stragglers_of(tasks: &[&TaskTimes], d: &[f64]) -> (Option<f64>, Vec<bool>) {
    let rates: Vec<Option<f64>> = tasks
        .iter()
        .zip(d)
        .map(|(t, d)| (t.read_bytes() > 0.0).then(|| d / t.read_bytes()))
        .collect();
    let m = median(rates.iter().flatten().copied());
    let flags = rates
        .iter()
        .map(|r| match (r, m) {
            (Some(r), Some(m)) => *r > STRAGGLER_FACTOR * m,
            _ => false,
        })
        .collect();
    (m, flags)
}

/// The stragglers of one query (method.md §9, seed 004 §5.2): every task
/// whose inverse progress rate (duration / bytes read, bytes read being
/// `input_bytes + shuffle_read_bytes`) is above 1.5 times its stage's median,
/// with its causes:
///
/// - `scheduler_delay`, `disk_read`, `shuffle_read` (network blocked time),
///   `shuffle_write` (disk write blocked time), `gc`: the task would not be a
///   straggler if that time were zero in every task of the stage (the median
///   recomputed);
/// - `output_skew`: a straggler by input rate but not by output rate
///   (duration / (`output_bytes + shuffle_write_bytes`));
/// - `first_task`: it launched before any task of its stage had finished on
///   its host, and is no straggler among such first tasks of the stage;
/// - `unknown`: none of these.
///
/// `[from, to)` keeps the tasks launched in it. Rows are ordered by stage,
/// then launch.
pub fn stragglers(
    ds: &Dataset,
    query: &str,
    from: Option<Micros>,
    to: Option<Micros>,
) -> Result<Vec<StragglerRow>, MethodError> {
    check_window(from, to)?;
    let q = query_id(ds, query)?;
    let ids = query_tasks(ds, q, from, to);
    let all = task_times(ds, &ids);
    let mut by_stage: FxHashMap<u32, Vec<&TaskTimes>> = FxHashMap::default();
    for t in &all {
        by_stage.entry(t.stage).or_default().push(t);
    }
    let mut stages: Vec<u32> = by_stage.keys().copied().collect();
    stages.sort_by(|a, b| {
        let (x, y) = (ds.stage_name(*a), ds.stage_name(*b));
        (x.len(), x, a).cmp(&(y.len(), y, b))
    });
    let names = ds.task_names();
    let mut out = Vec::new();
    for s in stages {
        let tasks = &by_stage[&s];
        let d: Vec<f64> = tasks.iter().map(|t| t.duration).collect();
        let (Some(m), flags) = stragglers_of(tasks, &d) else {
            continue;
        };
        if !flags.iter().any(|f| *f) {
            continue;
        }
        // Blocked-time causes: zero that time in every task of the stage.
        type Part = fn(&TaskTimes) -> f64;
        let parts: [(StragglerCause, Part); 5] = [
            (StragglerCause::SchedulerDelay, |t| t.scheduler_delay),
            (StragglerCause::DiskRead, |t| t.disk_read_blocked),
            (StragglerCause::ShuffleRead, |t| t.network_blocked),
            (StragglerCause::ShuffleWrite, |t| t.disk_write_blocked),
            (StragglerCause::Gc, |t| t.gc),
        ];
        let without: Vec<(StragglerCause, Vec<bool>)> = parts
            .iter()
            .map(|(c, part)| {
                let d: Vec<f64> = tasks
                    .iter()
                    .map(|t| (t.duration - part(t)).max(0.0))
                    .collect();
                (*c, stragglers_of(tasks, &d).1)
            })
            .collect();
        // Output rates.
        let out_rates: Vec<Option<f64>> = tasks
            .iter()
            .map(|t| (t.output_bytes > 0.0).then(|| t.duration / t.output_bytes))
            .collect();
        let out_median = median(out_rates.iter().flatten().copied());
        // First tasks: launched before any task of the stage finished on
        // their host.
        let mut first_finish: FxHashMap<u32, Micros> = FxHashMap::default();
        for t in tasks {
            let f = ds.tasks[t.task as usize].finish;
            let e = first_finish.entry(t.host).or_insert(f);
            *e = (*e).min(f);
        }
        let first: Vec<usize> = (0..tasks.len())
            .filter(|&i| tasks[i].launch < first_finish[&tasks[i].host])
            .collect();
        let first_tasks: Vec<&TaskTimes> = first.iter().map(|&i| tasks[i]).collect();
        let first_d: Vec<f64> = first_tasks.iter().map(|t| t.duration).collect();
        let first_flags = stragglers_of(&first_tasks, &first_d).1;
        let first_at: FxHashMap<usize, usize> =
            first.iter().enumerate().map(|(k, &i)| (i, k)).collect();
        for (i, t) in tasks.iter().enumerate() {
            if !flags[i] {
                continue;
            }
            let mut causes: Vec<StragglerCause> = without
                .iter()
                .filter(|(_, f)| !f[i])
                .map(|(c, _)| *c)
                .collect();
            if let (Some(r), Some(om)) = (out_rates[i], out_median) {
                if r <= STRAGGLER_FACTOR * om {
                    causes.push(StragglerCause::OutputSkew);
                }
            }
            if let Some(&k) = first_at.get(&i) {
                if !first_flags[k] {
                    causes.push(StragglerCause::FirstTask);
                }
            }
            if causes.is_empty() {
                causes.push(StragglerCause::Unknown);
            }
            let rate = t.duration / t.read_bytes();
            out.push(StragglerRow {
                query: query.to_string(),
                stage: ds.stage_name(s).to_string(),
                task: names[t.task as usize].to_string(),
                host: ds.hosts.name(t.host).to_string(),
                launch: t.launch,
                duration_seconds: t.duration,
                read_bytes: t.read_bytes(),
                rate,
                stage_median: m,
                ratio: if m > 0.0 { rate / m } else { f64::INFINITY },
                causes,
            });
        }
    }
    Ok(out)
}
