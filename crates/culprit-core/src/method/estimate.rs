//! Bottleneck oriented estimation (method.md §11, seed 003 §4-6): a query's
//! time on an idle cluster, from its tasks' demands and the resources'
//! throughputs, with no earlier run needed.

use std::fmt;

use rustc_hash::FxHashMap;

use super::model::Dataset;
use super::task_times::{
    amount, median, query_id, query_tasks, secs, stage_parents, task_times, TaskTimes,
};
use crate::MethodError;

/// The resources of the BOE model (003 table 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BoeResource {
    /// Reading input (HDFS / local disk read, `theta_dfsr`, `theta_dr`).
    DiskRead,
    /// Writing output (`theta_dw`, `theta_dfsw`).
    DiskWrite,
    /// Shuffle transfer (`theta_net`).
    Network,
    /// Computation (`theta_map`, `theta_reduce`, per core).
    Cpu,
}

impl BoeResource {
    pub fn as_str(self) -> &'static str {
        match self {
            BoeResource::DiskRead => "disk_read",
            BoeResource::DiskWrite => "disk_write",
            BoeResource::Network => "network",
            BoeResource::Cpu => "cpu",
        }
    }
}

impl fmt::Display for BoeResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One demand of a sub-stage: `amount` units of `resource` served at
/// `theta` units per second (per node; per core for the CPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Demand {
    pub resource: BoeResource,
    pub amount: f64,
    pub theta: f64,
}

/// A task's estimated time (003 eq. 2).
#[derive(Debug, Clone, PartialEq)]
pub struct BoeTime {
    /// `t_load + sum over sub-stages of their bottleneck time`.
    pub seconds: f64,
    /// Each sub-stage's time and bottleneck (`None` for one with no demand).
    pub substages: Vec<(f64, Option<BoeResource>)>,
    /// The bottleneck of the longest sub-stage.
    pub bottleneck: Option<BoeResource>,
}

fn finite_nonneg(name: &str, x: f64) -> Result<f64, MethodError> {
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(MethodError::InvalidArgument(format!(
            "{name} must be a finite non-negative number, not {x}"
        )))
    }
}

fn finite_pos(name: &str, x: f64) -> Result<f64, MethodError> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(MethodError::InvalidArgument(format!(
            "{name} must be a finite positive number, not {x}"
        )))
    }
}

/// The share of a node's throughput one of `delta` parallel tasks gets
/// (method.md §11, 003 eq. 3-5): `1 / delta` for disk and network,
/// `min(n_cores / delta, 1)` for the CPU (a task uses at most one core).
/// For positive `delta` and `n_cores` ([`boe_task`] checks them).
pub fn mu(resource: BoeResource, delta: f64, n_cores: f64) -> f64 {
    match resource {
        BoeResource::Cpu => (n_cores / delta).min(1.0),
        _ => 1.0 / delta,
    }
}

/// The BOE task time (method.md §11, 003 §4.1.3 eq. 2): `t_load` plus, for
/// each pipelined sub-stage, the largest `D_X / (mu_X(delta) * theta_X)` over
/// its demands, `delta` tasks running in parallel on a node of `n_cores`
/// cores. Errors on a non-finite or negative amount or `t_load`, or a
/// non-positive `theta`, `delta` or `n_cores`.
pub fn boe_task(
    t_load: f64,
    substages: &[Vec<Demand>],
    delta: f64,
    n_cores: f64,
) -> Result<BoeTime, MethodError> {
    finite_nonneg("t_load", t_load)?;
    finite_pos("delta", delta)?;
    finite_pos("n_cores", n_cores)?;
    let mut seconds = t_load;
    let mut parts = Vec::with_capacity(substages.len());
    let mut longest: (f64, Option<BoeResource>) = (-1.0, None);
    for demands in substages {
        let mut best: (f64, Option<BoeResource>) = (0.0, None);
        for d in demands {
            finite_nonneg("amount", d.amount)?;
            finite_pos("theta", d.theta)?;
            let t = d.amount / (mu(d.resource, delta, n_cores) * d.theta);
            if best.1.is_none() || t > best.0 {
                best = (t, Some(d.resource));
            }
        }
        seconds += best.0;
        if best.0 > longest.0 {
            longest = best;
        }
        parts.push(best);
    }
    Ok(BoeTime {
        seconds,
        substages: parts,
        bottleneck: longest.1,
    })
}

/// The BOE time of a map task (method.md §11, 003 Proposition 1, eq. 3):
/// `t_load + max(B / (mu_dfsr * theta_dfsr), B / (mu_cpu * theta_map)) +
/// alpha_m * B / (mu_dw * theta_dw)`, with `mu_dfsr = mu_dw = 1 / delta`
/// and `mu_cpu = min(n_cores / delta, 1)`. Amounts in any unit, throughputs
/// in that unit per second. Worked example 6: B = 128, t_load = 1,
/// theta_dfsr = theta_dw = 100, theta_map = 20, n_cores = 6, alpha_m = 0.5
/// give 9.96 s at delta = 4 and 24.04 s at delta = 12.
#[allow(clippy::too_many_arguments)]
pub fn boe_task_seconds(
    b: f64,
    t_load: f64,
    theta_dfsr: f64,
    theta_dw: f64,
    theta_map: f64,
    n_cores: f64,
    alpha_m: f64,
    delta: f64,
) -> Result<f64, MethodError> {
    finite_nonneg("B", b)?;
    finite_nonneg("alpha_m", alpha_m)?;
    let d = |resource, amount, theta| Demand {
        resource,
        amount,
        theta,
    };
    Ok(boe_task(
        t_load,
        &[
            vec![
                d(BoeResource::DiskRead, b, theta_dfsr),
                d(BoeResource::Cpu, b, theta_map),
            ],
            vec![d(BoeResource::DiskWrite, alpha_m * b, theta_dw)],
        ],
        delta,
        n_cores,
    )?
    .seconds)
}

/// Throughputs per node (bytes per second), calibrated or given.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Thetas {
    pub disk_read: Option<f64>,
    pub disk_write: Option<f64>,
    pub network: Option<f64>,
    /// The tasks that ran alone on their host (what calibration used).
    pub solo_tasks: usize,
}

/// Calibrates the throughputs (method.md §11; 003 §4.2's profiling of
/// `theta`) as lower bounds from what the nodes were seen to serve:
///
/// - the tasks that ran with nothing else on their host (no other task of
///   any query overlapping them there): a solo task has the whole node
///   (`delta = 1`, `mu = 1`), so `D_X / duration` is at most `theta_X`, with
///   equality when `X` was its bottleneck;
/// - the largest rate of `X` one node served to all its tasks at once, each
///   task's amount spread uniformly over its run (003 §4.1.2's uniformity
///   assumption): solo tasks are rarely bound by `X`, while many tasks
///   together often are.
///
/// `theta_X` is the larger of the two; `None` for a resource no task used.
/// Amounts: `input_bytes` (disk read), `output_bytes + shuffle_write_bytes`
/// (disk write), `shuffle_read_bytes` (network).
pub fn calibrate(ds: &Dataset) -> Thetas {
    let by_host = ds.tasks_by_host();
    let mut solo: Vec<u32> = Vec::new();
    for tasks in &by_host {
        let mut v: Vec<u32> = tasks.clone();
        v.sort_by_key(|&t| (ds.tasks[t as usize].launch, ds.tasks[t as usize].finish));
        // A task is solo when it overlaps neither an earlier task (the
        // running maximum of finishes) nor the next one.
        let mut max_fin = i64::MIN;
        for (i, &t) in v.iter().enumerate() {
            let ti = &ds.tasks[t as usize];
            let next_launch = v.get(i + 1).map(|&n| ds.tasks[n as usize].launch);
            if ti.finish > ti.launch
                && max_fin <= ti.launch
                && next_launch.is_none_or(|nl| nl >= ti.finish)
            {
                solo.push(t);
            }
            max_fin = max_fin.max(ti.finish);
        }
    }
    let all: Vec<u32> = (0..ds.tasks.len() as u32).collect();
    let times = task_times(ds, &all);
    let solo_tasks = solo.len();
    let best = |f: &dyn Fn(&TaskTimes) -> f64| -> Option<f64> {
        let solo_rate = solo
            .iter()
            .map(|&t| &times[t as usize])
            .filter(|t| t.duration > 0.0 && f(t) > 0.0)
            .map(|t| f(t) / t.duration)
            .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
        // Per host, the peak of the summed rates (ends before starts at
        // equal times).
        let mut peak: Option<f64> = None;
        for tasks in &by_host {
            let mut ev: Vec<(i64, bool, f64)> = Vec::new();
            for &t in tasks {
                let tt = &times[t as usize];
                let ti = &ds.tasks[t as usize];
                if tt.duration > 0.0 && f(tt) > 0.0 {
                    let rate = f(tt) / tt.duration;
                    ev.push((ti.launch, true, rate));
                    ev.push((ti.finish, false, rate));
                }
            }
            ev.sort_by_key(|e| (e.0, e.1));
            let mut sum = 0.0f64;
            for (_, start, rate) in ev {
                if start {
                    sum += rate;
                    peak = Some(peak.map_or(sum, |p: f64| p.max(sum)));
                } else {
                    sum -= rate;
                }
            }
        }
        match (solo_rate, peak) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    };
    Thetas {
        disk_read: best(&|t| t.input_bytes),
        disk_write: best(&|t| t.output_bytes),
        network: best(&|t| t.shuffle_read_bytes),
        solo_tasks,
    }
}

/// Options of [`estimate`]; `None` means "from the data".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EstimateOptions {
    /// Bytes per second per node; default: [`calibrate`].
    pub theta_disk_read: Option<f64>,
    pub theta_disk_write: Option<f64>,
    pub theta_network: Option<f64>,
    /// CPU-seconds served per second per core (default 1: a task's
    /// `cpu_seconds` is its CPU demand).
    pub theta_cpu: Option<f64>,
    /// Cores per node; default: the slots per host.
    pub n_cores: Option<f64>,
    /// Task slots per node; default: the query's largest concurrency on one
    /// host.
    pub slots_per_host: Option<usize>,
    /// Nodes; default: the hosts the query ran on.
    pub hosts: Option<usize>,
    /// Seconds to create, schedule and destroy a task; default: the median
    /// `scheduler_delay` of the query's tasks.
    pub t_load: Option<f64>,
    /// The skew refinement of 003 §6 (default on).
    pub skew: bool,
}

impl Default for EstimateOptions {
    fn default() -> Self {
        EstimateOptions {
            theta_disk_read: None,
            theta_disk_write: None,
            theta_network: None,
            theta_cpu: None,
            n_cores: None,
            slots_per_host: None,
            hosts: None,
            t_load: None,
            skew: true,
        }
    }
}

/// The estimate of one stage.
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateStage {
    pub stage: String,
    pub tasks: usize,
    /// Tasks in parallel per node (`min(slots, ceil(tasks / hosts))`).
    pub delta: f64,
    pub waves: usize,
    /// The BOE time of the stage's mean task.
    pub task_seconds: f64,
    pub bottleneck: Option<BoeResource>,
    /// The widening of the last wave by skew (003 §6): `lambda_k * sigma`.
    pub skew_seconds: f64,
    /// `end_seconds - start_seconds`: `waves * task_seconds + skew_seconds`
    /// for a stage that has the cluster to itself.
    pub stage_seconds: f64,
    /// Estimated start and end, seconds from the query's start (a stage
    /// starts when its parents have ended and slots are free).
    pub start_seconds: f64,
    pub end_seconds: f64,
    /// First launch to last finish of its tasks.
    pub observed_seconds: f64,
}

/// The estimate of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub query: String,
    pub stages: Vec<EstimateStage>,
    pub estimated_seconds: f64,
    pub observed_seconds: f64,
    /// `observed / estimated`; `None` when the estimate is 0.
    pub slowdown: Option<f64>,
    pub thetas: Thetas,
    pub hosts: usize,
    pub slots_per_host: usize,
    pub n_cores: f64,
    pub t_load: f64,
}

/// The inverse of the standard normal distribution function (Acklam's
/// rational approximation, relative error below 1.2e-9), for `0 < p < 1`;
/// -inf / +inf at 0 / 1 and beyond, NaN for NaN.
pub fn normal_quantile(p: f64) -> f64 {
    if p.is_nan() {
        return f64::NAN;
    }
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.38357751867269e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    const P_LOW: f64 = 0.02425;
    if p <= 0.0 {
        f64::NEG_INFINITY
    } else if p >= 1.0 {
        f64::INFINITY
    } else if p < P_LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - P_LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

/// The expected largest of `k` independent standard normal variables, by
/// Blom's approximation `Phi^-1((k - 0.375) / (k + 0.25))` (0 for `k <= 1`):
/// the `lambda` of 003 §6 eq. 15 (method.md §11), the last order statistic.
pub fn expected_max_normal(k: usize) -> f64 {
    if k <= 1 {
        return 0.0;
    }
    let k = k as f64;
    normal_quantile((k - 0.375) / (k + 0.25))
}

/// The sub-stages of a task for the BOE model: reading (input from disk,
/// shuffle from the network) pipelined with computing, then writing (003
/// Proposition 1's structure). Demands whose throughput is unknown are left
/// out.
fn demands(t: &TaskTimes, th: &Thetas, theta_cpu: f64) -> Vec<Vec<Demand>> {
    let mut first = vec![Demand {
        resource: BoeResource::Cpu,
        amount: t.cpu_seconds,
        theta: theta_cpu,
    }];
    if let Some(theta) = th.disk_read {
        first.push(Demand {
            resource: BoeResource::DiskRead,
            amount: t.input_bytes,
            theta,
        });
    }
    if let Some(theta) = th.network {
        first.push(Demand {
            resource: BoeResource::Network,
            amount: t.shuffle_read_bytes,
            theta,
        });
    }
    let mut out = vec![first];
    if let Some(theta) = th.disk_write {
        out.push(vec![Demand {
            resource: BoeResource::DiskWrite,
            amount: t.output_bytes,
            theta,
        }]);
    }
    out
}

/// The bottleneck oriented estimate of a query on an idle cluster (method.md
/// §11, seed 003 §4-6). Per stage: `delta = min(slots per host, ceil(tasks /
/// hosts))` tasks run in parallel per node; the stage's mean task (mean
/// demands: `cpu_seconds`, `input_bytes`, `shuffle_read_bytes`,
/// `output_bytes + shuffle_write_bytes`) takes the BOE time
/// [`boe_task`]; the stage takes `waves = ceil(tasks / (hosts * delta))`
/// such times, plus, with `skew`, the widening of its last wave of `k` tasks
/// by `lambda_k * sigma` (003 §6, eq. 15), `sigma` the standard deviation of
/// the tasks' own BOE times and `lambda_k` the expected largest of `k`
/// standard normals. The states follow each other as in 003 alg. 1: the
/// stages' tasks (each its stage's BOE time, the last one widened by the
/// skew) are replayed on the `hosts * slots` slots of the idle cluster,
/// stages gated by their parents and sharing the slots first come first
/// served in order of their observed start (Spark's FIFO pool; 003's DRF
/// gives the same shares for tasks asking the same resources). Not modelled:
/// sibling stages' tasks on one node slowing each other (each stage's
/// `delta` counts its own tasks only). The query's estimate is the last end.
pub fn estimate(
    ds: &Dataset,
    query: &str,
    opts: &EstimateOptions,
) -> Result<Estimate, MethodError> {
    let q = query_id(ds, query)?;
    for (name, v) in [
        ("theta_disk_read", opts.theta_disk_read),
        ("theta_disk_write", opts.theta_disk_write),
        ("theta_network", opts.theta_network),
        ("theta_cpu", opts.theta_cpu),
        ("n_cores", opts.n_cores),
    ] {
        if let Some(v) = v {
            finite_pos(name, v)?;
        }
    }
    if let Some(t) = opts.t_load {
        finite_nonneg("t_load", t)?;
    }
    if opts.slots_per_host == Some(0) || opts.hosts == Some(0) {
        return Err(MethodError::InvalidArgument(
            "slots_per_host and hosts must be positive".into(),
        ));
    }
    let ids = query_tasks(ds, q, None, None);
    let tasks = task_times(ds, &ids);
    // Throughputs: given, else calibrated.
    let cal = if opts.theta_disk_read.is_none()
        || opts.theta_disk_write.is_none()
        || opts.theta_network.is_none()
    {
        calibrate(ds)
    } else {
        Thetas::default()
    };
    let thetas = Thetas {
        disk_read: opts.theta_disk_read.or(cal.disk_read),
        disk_write: opts.theta_disk_write.or(cal.disk_write),
        network: opts.theta_network.or(cal.network),
        solo_tasks: cal.solo_tasks,
    };
    let theta_cpu = opts.theta_cpu.unwrap_or(1.0);
    // Cluster shape.
    let mut host_spans: FxHashMap<u32, Vec<(i64, i64)>> = FxHashMap::default();
    for &t in &ids {
        let ti = &ds.tasks[t as usize];
        host_spans
            .entry(ti.host)
            .or_default()
            .push((ti.launch, ti.finish));
    }
    let hosts = opts.hosts.unwrap_or(host_spans.len()).max(1);
    let slots = opts.slots_per_host.unwrap_or_else(|| {
        host_spans
            .values()
            .map(|v| super::what_if::max_concurrency(v.iter().copied()))
            .max()
            .unwrap_or(1)
    });
    let n_cores = opts.n_cores.unwrap_or(slots as f64);
    let t_load = opts
        .t_load
        .unwrap_or_else(|| median(tasks.iter().map(|t| t.scheduler_delay)).unwrap_or(0.0));
    // Per stage.
    let mut by_stage: FxHashMap<u32, Vec<&TaskTimes>> = FxHashMap::default();
    for t in &tasks {
        by_stage.entry(t.stage).or_default().push(t);
    }
    let mut stage_ids: Vec<u32> = by_stage.keys().copied().collect();
    stage_ids.sort_by_key(|&s| {
        let st = &ds.stages[s as usize];
        (st.start, s)
    });
    let parents = stage_parents(ds, q, &stage_ids);
    let mut rows: FxHashMap<u32, EstimateStage> = FxHashMap::default();
    for &s in &stage_ids {
        let ts = &by_stage[&s];
        let n = ts.len();
        let delta = (slots.min(n.div_ceil(hosts))).max(1) as f64;
        let mean_of =
            |f: &dyn Fn(&TaskTimes) -> f64| ts.iter().map(|t| f(t)).sum::<f64>() / n as f64;
        let mut mean = *ts[0];
        mean.cpu_seconds = mean_of(&|t| t.cpu_seconds);
        mean.input_bytes = mean_of(&|t| t.input_bytes);
        mean.shuffle_read_bytes = mean_of(&|t| t.shuffle_read_bytes);
        mean.output_bytes = mean_of(&|t| t.output_bytes);
        let task = boe_task(t_load, &demands(&mean, &thetas, theta_cpu), delta, n_cores)?;
        let per_wave = hosts * delta as usize;
        let waves = n.div_ceil(per_wave);
        let last = n - (waves - 1) * per_wave;
        let skew_seconds = if opts.skew && n > 1 {
            let each: Vec<f64> = ts
                .iter()
                .map(|t| boe_task(t_load, &demands(t, &thetas, theta_cpu), delta, n_cores))
                .map(|r| r.map(|r| r.seconds))
                .collect::<Result<_, _>>()?;
            // Shifted by the first time, so identical tasks have exactly no
            // variance.
            let d: Vec<f64> = each.iter().map(|x| x - each[0]).collect();
            let m = d.iter().sum::<f64>() / n as f64;
            let var = d.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
            amount(expected_max_normal(last) * var.sqrt())
        } else {
            0.0
        };
        let (l, f) = ts.iter().fold((i64::MAX, i64::MIN), |(l, f), t| {
            let ti = &ds.tasks[t.task as usize];
            (l.min(ti.launch), f.max(ti.finish))
        });
        rows.insert(
            s,
            EstimateStage {
                stage: ds.stage_name(s).to_string(),
                tasks: n,
                delta,
                waves,
                task_seconds: task.seconds,
                bottleneck: task.bottleneck,
                skew_seconds,
                stage_seconds: 0.0,
                start_seconds: 0.0,
                end_seconds: 0.0,
                observed_seconds: secs(f - l),
            },
        );
    }
    // The states in sequence (003 alg. 1): replay the stages' tasks, each
    // taking its stage's BOE time (the last one widened by the skew), on the
    // cluster's slots, stages in order of their observed start sharing the
    // slots first come first served, each gated by its parents.
    let mut task_stage: Vec<u32> = Vec::with_capacity(tasks.len());
    let mut durations: Vec<f64> = Vec::with_capacity(tasks.len());
    for &s in &stage_ids {
        let r = &rows[&s];
        for i in 0..r.tasks {
            task_stage.push(s);
            let last = i + 1 == r.tasks;
            durations.push(r.task_seconds + if last { r.skew_seconds } else { 0.0 });
        }
    }
    let sched = super::what_if::simulate(&task_stage, &parents, &durations, hosts * slots)?;
    let mut end: FxHashMap<u32, f64> = FxHashMap::default();
    for (i, &s) in task_stage.iter().enumerate() {
        let r = rows.get_mut(&s).expect("stage row");
        if end.contains_key(&s) {
            r.start_seconds = r.start_seconds.min(sched.start[i]);
            r.end_seconds = r.end_seconds.max(sched.end[i]);
        } else {
            r.start_seconds = sched.start[i];
            r.end_seconds = sched.end[i];
        }
        end.insert(s, r.end_seconds);
    }
    for r in rows.values_mut() {
        r.stage_seconds = r.end_seconds - r.start_seconds;
    }
    let estimated = end.values().copied().fold(0.0, f64::max);
    let observed = match (
        ids.iter().map(|&t| ds.tasks[t as usize].launch).min(),
        ids.iter().map(|&t| ds.tasks[t as usize].finish).max(),
    ) {
        (Some(l), Some(f)) => secs(f - l),
        _ => 0.0,
    };
    let mut stages: Vec<EstimateStage> = stage_ids
        .iter()
        .map(|s| rows.remove(s).expect("stage row"))
        .collect();
    stages.sort_by(|a, b| a.start_seconds.total_cmp(&b.start_seconds));
    Ok(Estimate {
        query: query.to_string(),
        stages,
        estimated_seconds: estimated,
        observed_seconds: observed,
        slowdown: (estimated > 0.0).then(|| observed / estimated),
        thetas,
        hosts,
        slots_per_host: slots,
        n_cores,
        t_load,
    })
}
