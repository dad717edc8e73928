//! What-if of blocked-time analysis: how much faster a query would have been
//! without the time its tasks were blocked on one resource (method.md §9,
//! seed 004 §2.3, figure 2), and with every straggler at its stage median
//! (004 §5.1, figure 12).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::str::FromStr;

use rustc_hash::{FxHashMap, FxHashSet};

use super::model::{Dataset, Micros};
use super::task_times::{
    check_window, median, query_id, query_tasks, secs, stage_parents, task_times, TaskTimes,
};
use crate::MethodError;

/// What the what-if removes from every task of the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WhatIfResource {
    /// CPU blocked time (at least the GC time, §5).
    Cpu,
    DiskRead,
    DiskWrite,
    Network,
    Gc,
    SchedulerDelay,
    /// Every task's inverse progress rate capped at its stage's median
    /// (004 §5.1).
    Stragglers,
}

impl WhatIfResource {
    pub const ALL: [WhatIfResource; 7] = [
        WhatIfResource::Cpu,
        WhatIfResource::DiskRead,
        WhatIfResource::DiskWrite,
        WhatIfResource::Network,
        WhatIfResource::Gc,
        WhatIfResource::SchedulerDelay,
        WhatIfResource::Stragglers,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WhatIfResource::Cpu => "cpu",
            WhatIfResource::DiskRead => "disk_read",
            WhatIfResource::DiskWrite => "disk_write",
            WhatIfResource::Network => "network",
            WhatIfResource::Gc => "gc",
            WhatIfResource::SchedulerDelay => "scheduler_delay",
            WhatIfResource::Stragglers => "stragglers",
        }
    }

    /// The seconds of `t` this resource removes (blocked resources only;
    /// `Stragglers` depends on the stage and is handled by the caller).
    fn blocked(self, t: &TaskTimes) -> f64 {
        match self {
            WhatIfResource::Cpu => t.cpu_blocked,
            WhatIfResource::DiskRead => t.disk_read_blocked,
            WhatIfResource::DiskWrite => t.disk_write_blocked,
            WhatIfResource::Network => t.network_blocked,
            WhatIfResource::Gc => t.gc,
            WhatIfResource::SchedulerDelay => t.scheduler_delay,
            WhatIfResource::Stragglers => 0.0,
        }
    }
}

impl fmt::Display for WhatIfResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WhatIfResource {
    type Err = MethodError;
    fn from_str(s: &str) -> Result<Self, MethodError> {
        let s = s.trim().to_ascii_lowercase();
        WhatIfResource::ALL
            .into_iter()
            .find(|r| r.as_str() == s || (s == "scheduler" && *r == WhatIfResource::SchedulerDelay))
            .ok_or_else(|| {
                MethodError::InvalidArgument(format!(
                    "unknown what-if resource '{s}' (one of cpu, disk_read, disk_write, network, \
                     gc, scheduler_delay, stragglers)"
                ))
            })
    }
}

/// One what-if result: a query (or the whole window) and one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct WhatIfRow {
    pub query: String,
    pub resource: WhatIfResource,
    /// Tasks replayed.
    pub tasks: usize,
    /// Slots replayed on: the query's maximum concurrency.
    pub slots: usize,
    /// Task seconds removed (summed over tasks).
    pub removed_seconds: f64,
    /// The real span, first launch to last finish, seconds.
    pub observed_seconds: f64,
    /// The replay with the original task durations, seconds.
    pub original_seconds: f64,
    /// The replay with the shortened durations, seconds.
    pub without_seconds: f64,
    /// `1 - without_seconds / original_seconds` (0 when the original is 0).
    pub improvement: f64,
}

/// The replay of one set of tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Start and end, seconds from the replay's start, per task (input order).
    pub start: Vec<f64>,
    pub end: Vec<f64>,
    /// The slot each task ran on.
    pub slot: Vec<usize>,
    /// Task indices in the order they were started.
    pub order: Vec<usize>,
    /// The last end (0 for no tasks).
    pub makespan: f64,
}

#[derive(PartialEq)]
struct F(f64);
impl Eq for F {}
impl PartialOrd for F {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for F {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// Replays tasks as method.md §9 and 004 §2.3.2 (figure 2) do: `slots` slots, tasks taken in their
/// given order (the original launch order), each started as soon as a slot is
/// free and every task of its stage's parents has ended; the free slot with
/// the smallest number is taken. `stages[i]` is task `i`'s stage, `parents`
/// each stage's parent stages, `durations[i]` its run time in seconds.
///
/// Errors: mismatched lengths, zero slots, a duration that is negative or not
/// finite, or stage parents forming a cycle.
pub fn simulate(
    stages: &[u32],
    parents: &FxHashMap<u32, Vec<u32>>,
    durations: &[f64],
    slots: usize,
) -> Result<Schedule, MethodError> {
    let n = durations.len();
    if stages.len() != n {
        return Err(MethodError::InvalidArgument(
            "one stage per task is needed".into(),
        ));
    }
    if slots == 0 && n > 0 {
        return Err(MethodError::InvalidArgument("no slot to replay on".into()));
    }
    if let Some(d) = durations.iter().find(|d| !d.is_finite() || **d < 0.0) {
        return Err(MethodError::InvalidArgument(format!(
            "task duration {d} is not a finite non-negative number"
        )));
    }
    // Per stage: its pending tasks in order, its unfinished tasks, its
    // unfinished parents, its children.
    let mut pending: FxHashMap<u32, std::collections::VecDeque<usize>> = FxHashMap::default();
    let mut left: FxHashMap<u32, usize> = FxHashMap::default();
    for (i, &s) in stages.iter().enumerate() {
        pending.entry(s).or_default().push_back(i);
        *left.entry(s).or_default() += 1;
    }
    let mut waiting: FxHashMap<u32, usize> = FxHashMap::default();
    let mut children: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
    for &s in pending.keys() {
        let ps: FxHashSet<u32> = parents
            .get(&s)
            .into_iter()
            .flatten()
            .copied()
            .filter(|p| *p != s && left.contains_key(p))
            .collect();
        waiting.insert(s, ps.len());
        for p in ps {
            children.entry(p).or_default().push(s);
        }
    }
    // Ready stages by the order index of their next pending task.
    let mut ready: BinaryHeap<Reverse<(usize, u32)>> = pending
        .iter()
        .filter(|(s, _)| waiting[*s] == 0)
        .map(|(s, q)| Reverse((q[0], *s)))
        .collect();
    let mut free: BinaryHeap<Reverse<usize>> = (0..slots).map(Reverse).collect();
    let mut running: BinaryHeap<Reverse<(F, usize)>> = BinaryHeap::new();
    let mut sched = Schedule {
        start: vec![0.0; n],
        end: vec![0.0; n],
        slot: vec![0; n],
        order: Vec::with_capacity(n),
        makespan: 0.0,
    };
    let mut now = 0.0f64;
    let mut done = 0usize;
    while done < n {
        while !free.is_empty() {
            let Some(Reverse((_, s))) = ready.pop() else {
                break;
            };
            let Reverse(slot) = free.pop().expect("non-empty");
            let q = pending.get_mut(&s).expect("stage");
            let i = q.pop_front().expect("ready stage has a task");
            if let Some(&next) = q.front() {
                ready.push(Reverse((next, s)));
            }
            sched.start[i] = now;
            sched.end[i] = now + durations[i];
            sched.slot[i] = slot;
            sched.order.push(i);
            running.push(Reverse((F(sched.end[i]), i)));
        }
        let Some(Reverse((F(t), _))) = running.peek() else {
            return Err(MethodError::InvalidArgument(
                "stage parents form a cycle: no task can start".into(),
            ));
        };
        now = *t;
        while let Some(Reverse((F(t), i))) = running.peek() {
            if *t > now {
                break;
            }
            let i = *i;
            running.pop();
            done += 1;
            free.push(Reverse(sched.slot[i]));
            sched.makespan = sched.makespan.max(sched.end[i]);
            let s = stages[i];
            let l = left.get_mut(&s).expect("stage");
            *l -= 1;
            if *l == 0 {
                for c in children.get(&s).into_iter().flatten() {
                    let w = waiting.get_mut(c).expect("child");
                    *w -= 1;
                    if *w == 0 {
                        if let Some(&next) = pending[c].front() {
                            ready.push(Reverse((next, *c)));
                        }
                    }
                }
            }
        }
    }
    Ok(sched)
}

/// Replays new durations on a fixed schedule's slots and per-slot order:
/// each task starts when the previous task of its slot and every task of its
/// stage's parents have ended. Never later than `base` for durations no
/// longer than `base`'s (it is monotone), and equal to `base` for `base`'s
/// own durations.
fn replay_fixed(
    base: &Schedule,
    stages: &[u32],
    parents: &FxHashMap<u32, Vec<u32>>,
    durations: &[f64],
    slots: usize,
) -> f64 {
    let mut slot_free = vec![0.0f64; slots];
    let mut stage_end: FxHashMap<u32, f64> = FxHashMap::default();
    let mut makespan = 0.0f64;
    for &i in &base.order {
        let mut start = slot_free[base.slot[i]];
        for p in parents.get(&stages[i]).into_iter().flatten() {
            if *p != stages[i] {
                if let Some(e) = stage_end.get(p) {
                    start = start.max(*e);
                }
            }
        }
        let end = start + durations[i];
        slot_free[base.slot[i]] = end;
        let e = stage_end.entry(stages[i]).or_insert(end);
        *e = e.max(end);
        makespan = makespan.max(end);
    }
    makespan
}

/// The maximum number of the tasks running at once (a task ending at `t` does
/// not overlap one launched at `t`); at least 1.
pub fn max_concurrency(spans: impl IntoIterator<Item = (Micros, Micros)>) -> usize {
    let mut ev: Vec<(Micros, i32)> = Vec::new();
    for (l, f) in spans {
        if f > l {
            ev.push((l, 1));
            ev.push((f, -1));
        }
    }
    ev.sort_unstable();
    let (mut cur, mut best) = (0i32, 1i32);
    for (_, d) in ev {
        cur += d;
        best = best.max(cur);
    }
    best as usize
}

/// The durations of `tasks` with every task's inverse progress rate
/// (duration / bytes read) above its stage's median set to the median
/// (method.md §9, 004 §5.1). Tasks that read nothing keep their duration.
pub fn straggler_durations(tasks: &[TaskTimes]) -> Vec<f64> {
    let mut by_stage: FxHashMap<u32, Vec<f64>> = FxHashMap::default();
    for t in tasks {
        if t.read_bytes() > 0.0 {
            by_stage
                .entry(t.stage)
                .or_default()
                .push(t.duration / t.read_bytes());
        }
    }
    let medians: FxHashMap<u32, f64> = by_stage
        .into_iter()
        .filter_map(|(s, v)| median(v).map(|m| (s, m)))
        .collect();
    tasks
        .iter()
        .map(|t| match medians.get(&t.stage) {
            Some(m) if t.read_bytes() > 0.0 => t.duration.min(m * t.read_bytes()),
            _ => t.duration,
        })
        .collect()
}

/// The new durations for one resource.
fn durations_without(tasks: &[TaskTimes], r: WhatIfResource) -> Vec<f64> {
    if r == WhatIfResource::Stragglers {
        return straggler_durations(tasks);
    }
    tasks
        .iter()
        .map(|t| (t.duration - r.blocked(t)).max(0.0))
        .collect()
}

/// The what-if of one set of tasks (one query, or several as one).
fn what_if_tasks(
    ds: &Dataset,
    name: &str,
    tasks: &[TaskTimes],
    parents: &FxHashMap<u32, Vec<u32>>,
    resources: &[WhatIfResource],
) -> Result<Vec<WhatIfRow>, MethodError> {
    let stages: Vec<u32> = tasks.iter().map(|t| t.stage).collect();
    let slots = max_concurrency(tasks.iter().map(|t| {
        let ti = &ds.tasks[t.task as usize];
        (ti.launch, ti.finish)
    }));
    let original: Vec<f64> = tasks.iter().map(|t| t.duration).collect();
    let base = simulate(&stages, parents, &original, slots)?;
    let observed = match (
        tasks.iter().map(|t| ds.tasks[t.task as usize].launch).min(),
        tasks.iter().map(|t| ds.tasks[t.task as usize].finish).max(),
    ) {
        (Some(l), Some(f)) => secs(f - l),
        _ => 0.0,
    };
    let mut out = Vec::with_capacity(resources.len());
    for &r in resources {
        let d = durations_without(tasks, r);
        let greedy = simulate(&stages, parents, &d, slots)?.makespan;
        // List scheduling is not monotone (Graham's anomalies): shorter tasks
        // can end later in a greedy replay. The original schedule with the
        // shorter tasks is as good a schedule; take the better of the two.
        let fixed = replay_fixed(&base, &stages, parents, &d, slots);
        let without = greedy.min(fixed);
        let removed: f64 = original.iter().zip(&d).map(|(a, b)| a - b).sum();
        out.push(WhatIfRow {
            query: name.to_string(),
            resource: r,
            tasks: tasks.len(),
            slots,
            removed_seconds: removed,
            observed_seconds: observed,
            original_seconds: base.makespan,
            without_seconds: without,
            improvement: if base.makespan > 0.0 {
                1.0 - without / base.makespan
            } else {
                0.0
            },
        });
    }
    Ok(out)
}

/// What-if for one query (method.md §9, seed 004 §2.3 and §5.1): for each
/// resource (all of [`WhatIfResource::ALL`] when `resource` is `None`),
/// subtract every task's blocked time on it from its duration (or cap its
/// inverse progress rate at the stage median, for `Stragglers`), replay the
/// tasks on the number of slots the query actually used (its maximum
/// concurrency) in original launch order with stages gated by their parents,
/// and compare with the replay of the original durations:
/// `improvement = 1 - t_without / t_simulated_original`.
///
/// `[from, to)` keeps the tasks launched in it. The replay takes the better
/// of the greedy replay and the original replay's slot order with the new
/// durations, so removing time never makes a query slower (the improvement
/// is in `[0, 1]`).
pub fn what_if(
    ds: &Dataset,
    query: &str,
    resource: Option<WhatIfResource>,
    from: Option<Micros>,
    to: Option<Micros>,
) -> Result<Vec<WhatIfRow>, MethodError> {
    check_window(from, to)?;
    let q = query_id(ds, query)?;
    let ids = query_tasks(ds, q, from, to);
    let tasks = task_times(ds, &ids);
    let mut stages: Vec<u32> = tasks.iter().map(|t| t.stage).collect();
    stages.sort_unstable();
    stages.dedup();
    let parents = stage_parents(ds, q, &stages);
    let resources = resource.map_or(WhatIfResource::ALL.to_vec(), |r| vec![r]);
    what_if_tasks(ds, query, &tasks, &parents, &resources)
}

/// The cluster-wide what-if (method.md §9, 004 §2.3 and figures 3-6): the
/// what-if of every query with a task launched in `[from, to)`: one row per query and resource, and one
/// row per resource for the window as a whole, named `*`, whose times are the
/// sums over the queries (`improvement = 1 - sum without / sum original`).
pub fn what_if_all(
    ds: &Dataset,
    resource: Option<WhatIfResource>,
    from: Option<Micros>,
    to: Option<Micros>,
) -> Result<Vec<WhatIfRow>, MethodError> {
    check_window(from, to)?;
    let resources = resource.map_or(WhatIfResource::ALL.to_vec(), |r| vec![r]);
    let mut out = Vec::new();
    let mut total: Vec<WhatIfRow> = resources
        .iter()
        .map(|&r| WhatIfRow {
            query: "*".into(),
            resource: r,
            tasks: 0,
            slots: 0,
            removed_seconds: 0.0,
            observed_seconds: 0.0,
            original_seconds: 0.0,
            without_seconds: 0.0,
            improvement: 0.0,
        })
        .collect();
    // All tasks at once (one pass over the window rows), then query by query.
    let mut ids: Vec<u32> = (0..ds.tasks.len() as u32)
        .filter(|&t| {
            let l = ds.tasks[t as usize].launch;
            from.is_none_or(|f| l >= f) && to.is_none_or(|e| l < e)
        })
        .collect();
    ids.sort_by_key(|&t| (ds.tasks[t as usize].launch, t));
    let mut by_query: Vec<Vec<TaskTimes>> = vec![Vec::new(); ds.queries.len()];
    for t in task_times(ds, &ids) {
        by_query[ds.stage_query(t.stage) as usize].push(t);
    }
    for (q, tasks) in by_query.iter().enumerate() {
        if tasks.is_empty() {
            continue;
        }
        let q = q as u32;
        let mut stages: Vec<u32> = tasks.iter().map(|t| t.stage).collect();
        stages.sort_unstable();
        stages.dedup();
        let parents = stage_parents(ds, q, &stages);
        let rows = what_if_tasks(ds, ds.queries.name(q), tasks, &parents, &resources)?;
        for (t, r) in total.iter_mut().zip(&rows) {
            t.tasks += r.tasks;
            t.slots = t.slots.max(r.slots);
            t.removed_seconds += r.removed_seconds;
            t.observed_seconds += r.observed_seconds;
            t.original_seconds += r.original_seconds;
            t.without_seconds += r.without_seconds;
        }
        out.extend(rows);
    }
    for t in &mut total {
        t.improvement = if t.original_seconds > 0.0 {
            1.0 - t.without_seconds / t.original_seconds
        } else {
            0.0
        };
    }
    out.extend(total);
    Ok(out)
}
