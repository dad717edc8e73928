//! The per-task view the blocked-time analysis (method.md §9, seed 004) and
//! the bottleneck estimate (§11, seed 003) share: each task's run time, its
//! blocked seconds per cause and its data amounts, from its window rows when
//! it has some, else from its totals (the `tasks` table).
//!
//! Where each figure comes from (interchange `tasks` column / `task_windows`
//! rows; what the Spark event-log translation puts there):
//!
//! | figure | tasks column | task_windows | Spark TaskEnd |
//! |---|---|---|---|
//! | duration | `finish_time - launch_time` | | Launch Time, Finish Time |
//! | cpu blocked (what-if `cpu`) | `max(cpu_blocked, gc_seconds)` | `cpu`: `max(blocked, gc)` per row | run - CPU - fetch wait - shuffle write time |
//! | disk read blocked (`disk_read`, straggler cause) | `disk_read_blocked` | `disk_read` blocked | none (Spark does not time input reads) |
//! | disk write blocked (`disk_write`, cause shuffle write) | `disk_write_blocked` | `disk_write` blocked | Shuffle Write Time |
//! | network blocked (`network`, cause shuffle read) | `network_blocked` | `network` blocked | Fetch Wait Time |
//! | GC (`gc`, cause GC) | `gc_seconds` | `cpu` gc | JVM GC Time |
//! | scheduler delay (`scheduler_delay`, cause) | `scheduler_delay` | (totals only) | duration - run - deserialize - result serialization - getting result |
//! | bytes read (progress rate) | `input_bytes + shuffle_read_bytes` | `disk_read` + `network` acquired | Input Bytes Read, Shuffle Remote + Local Bytes Read |
//! | bytes written (output skew, BOE write) | `output_bytes + shuffle_write_bytes` | `disk_write` acquired | Output Bytes Written, Shuffle Bytes Written |
//! | CPU demand (BOE, skewed tasks) | `cpu_seconds` | `cpu` acquired | Executor CPU Time |
//! | first task | `host`, `launch_time`, `finish_time` | | Host |

use rustc_hash::FxHashMap;

use super::model::{resource_index, Dataset, Micros, N_RES};
use crate::{MethodError, Resource};

/// One task of a query, reduced to what §9 and §11 need. Every amount is
/// finite and non-negative (non-finite or negative inputs count as 0), and
/// every blocked time is at most `duration`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskTimes {
    /// The task number in the [`Dataset`].
    pub task: u32,
    pub stage: u32,
    pub host: u32,
    pub launch: Micros,
    /// `finish - launch`, seconds.
    pub duration: f64,
    /// Blocked on the CPU: the larger of the measured cpu blocked time and
    /// the GC time (a GC pause is blocked time, §5), per window row.
    pub cpu_blocked: f64,
    /// Blocked reading input (`disk_read_blocked`, `disk_read` rows).
    pub disk_read_blocked: f64,
    /// Blocked writing (`disk_write_blocked`, `disk_write` rows; in Spark logs
    /// the shuffle write time).
    pub disk_write_blocked: f64,
    /// Blocked fetching (`network_blocked`, `network` rows; in Spark logs the
    /// shuffle fetch wait time).
    pub network_blocked: f64,
    /// GC seconds (`gc_seconds`, the `gc` of `cpu` rows).
    pub gc: f64,
    /// `scheduler_delay` (totals only).
    pub scheduler_delay: f64,
    /// CPU seconds (`cpu_seconds`, the `acquired` of `cpu` rows).
    pub cpu_seconds: f64,
    /// `input_bytes` (the `acquired` of `disk_read` rows when windowed).
    pub input_bytes: f64,
    /// `shuffle_read_bytes` (the `acquired` of `network` rows when windowed).
    pub shuffle_read_bytes: f64,
    /// `output_bytes + shuffle_write_bytes` (the `acquired` of `disk_write`
    /// rows when windowed).
    pub output_bytes: f64,
}

impl TaskTimes {
    /// The data a task reads, the denominator of its inverse progress rate
    /// (004 §5: "the time taken for a task divided by amount of input data
    /// read"): its input plus its shuffle read, so reduce tasks have a rate too.
    pub fn read_bytes(&self) -> f64 {
        self.input_bytes + self.shuffle_read_bytes
    }
}

/// A finite, non-negative amount, else 0.
pub(crate) fn amount(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

/// Seconds of a microsecond span.
pub(crate) fn secs(us: Micros) -> f64 {
    us as f64 / 1e6
}

/// The interned id of a query, or [`MethodError::UnknownQuery`].
pub fn query_id(ds: &Dataset, query: &str) -> Result<u32, MethodError> {
    ds.queries
        .get(query)
        .ok_or_else(|| MethodError::UnknownQuery(query.to_string()))
}

/// Checks an optional `[from, to)` window.
pub(crate) fn check_window(from: Option<Micros>, to: Option<Micros>) -> Result<(), MethodError> {
    if let (Some(f), Some(t)) = (from, to) {
        if t < f {
            return Err(MethodError::InvalidArgument(format!(
                "window ends ({t}) before it starts ({f})"
            )));
        }
    }
    Ok(())
}

/// The tasks of `query` launched in `[from, to)` (either bound optional), in
/// launch order (ties: task number).
pub fn query_tasks(ds: &Dataset, query: u32, from: Option<Micros>, to: Option<Micros>) -> Vec<u32> {
    let mut out: Vec<u32> = (0..ds.tasks.len() as u32)
        .filter(|&t| {
            let ti = &ds.tasks[t as usize];
            ds.stages[ti.stage as usize].query == query
                && from.is_none_or(|f| ti.launch >= f)
                && to.is_none_or(|e| ti.launch < e)
        })
        .collect();
    out.sort_by_key(|&t| (ds.tasks[t as usize].launch, t));
    out
}

/// [`TaskTimes`] of `tasks`, in their order.
pub fn task_times(ds: &Dataset, tasks: &[u32]) -> Vec<TaskTimes> {
    let mut out: Vec<TaskTimes> = tasks
        .iter()
        .map(|&t| {
            let ti = &ds.tasks[t as usize];
            let x = ds.totals(t);
            let mut tt = TaskTimes {
                task: t,
                stage: ti.stage,
                host: ti.host,
                launch: ti.launch,
                duration: secs(ti.finish - ti.launch),
                scheduler_delay: amount(x.scheduler_delay),
                ..TaskTimes::default_for(t)
            };
            if !ti.has_windows {
                tt.gc = amount(x.gc_seconds);
                tt.cpu_blocked = amount(x.cpu_blocked).max(tt.gc);
                tt.disk_read_blocked = amount(x.disk_read_blocked);
                tt.disk_write_blocked = amount(x.disk_write_blocked);
                tt.network_blocked = amount(x.network_blocked);
                tt.cpu_seconds = amount(x.cpu_seconds);
                tt.input_bytes = amount(x.input_bytes);
                tt.shuffle_read_bytes = amount(x.shuffle_read_bytes);
                tt.output_bytes = amount(x.output_bytes) + amount(x.shuffle_write_bytes);
            }
            tt
        })
        .collect();
    // Windowed tasks: sum their rows, host by host.
    let mut index: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
    let mut hosts: Vec<u32> = Vec::new();
    for (i, &t) in tasks.iter().enumerate() {
        let ti = &ds.tasks[t as usize];
        if ti.has_windows {
            index.entry(t).or_default().push(i);
            hosts.push(ti.host);
        }
    }
    hosts.sort_unstable();
    hosts.dedup();
    let (cpu, dr, dw, net) = (
        resource_index(Resource::Cpu),
        resource_index(Resource::DiskRead),
        resource_index(Resource::DiskWrite),
        resource_index(Resource::Network),
    );
    for h in hosts {
        for r in [cpu, dr, dw, net] {
            let Some(rows) = ds.windows.get(h as usize * N_RES + r) else {
                continue;
            };
            for row in rows {
                let Some(is) = index.get(&row.task) else {
                    continue;
                };
                for &i in is {
                    let tt = &mut out[i];
                    let (b, a) = (amount(row.blocked), amount(row.acquired));
                    match r {
                        _ if r == cpu => {
                            let g = amount(row.gc());
                            tt.gc += g;
                            tt.cpu_blocked += b.max(g);
                            tt.cpu_seconds += a;
                        }
                        _ if r == dr => {
                            tt.disk_read_blocked += b;
                            tt.input_bytes += a;
                        }
                        _ if r == dw => {
                            tt.disk_write_blocked += b;
                            tt.output_bytes += a;
                        }
                        _ => {
                            tt.network_blocked += b;
                            tt.shuffle_read_bytes += a;
                        }
                    }
                }
            }
        }
    }
    for tt in &mut out {
        let d = tt.duration;
        for v in [
            &mut tt.cpu_blocked,
            &mut tt.disk_read_blocked,
            &mut tt.disk_write_blocked,
            &mut tt.network_blocked,
            &mut tt.gc,
            &mut tt.scheduler_delay,
        ] {
            *v = v.min(d);
        }
    }
    out
}

impl TaskTimes {
    fn default_for(task: u32) -> TaskTimes {
        TaskTimes {
            task,
            stage: 0,
            host: 0,
            launch: 0,
            duration: 0.0,
            cpu_blocked: 0.0,
            disk_read_blocked: 0.0,
            disk_write_blocked: 0.0,
            network_blocked: 0.0,
            gc: 0.0,
            scheduler_delay: 0.0,
            cpu_seconds: 0.0,
            input_bytes: 0.0,
            shuffle_read_bytes: 0.0,
            output_bytes: 0.0,
        }
    }
}

/// The median of finite values (the mean of the two middle ones for an even
/// count); `None` when there are none.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
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

/// The stages of a query's tasks with their parents among those stages
/// (parents named in the `stages` table that have no task here are dropped:
/// they gate nothing).
pub(crate) fn stage_parents(ds: &Dataset, query: u32, stages: &[u32]) -> FxHashMap<u32, Vec<u32>> {
    let present: rustc_hash::FxHashSet<u32> = stages.iter().copied().collect();
    stages
        .iter()
        .map(|&s| {
            let mut ps: Vec<u32> = ds.stages[s as usize]
                .parents
                .iter()
                .filter_map(|p| ds.stage(query, p))
                .filter(|p| present.contains(p) && *p != s)
                .collect();
            ps.sort_unstable();
            ps.dedup();
            (s, ps)
        })
        .collect()
}
