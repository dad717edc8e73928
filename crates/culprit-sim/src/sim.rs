//! The time-stepped cluster simulation.

use std::collections::VecDeque;

use culprit_core::Table;

use crate::rng::Rng;
use crate::Workload;
use culprit_core::batches::{TableBuilder, Value};

/// The cluster and workload to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    /// Queries in all: the victim, the culprit and `queries - 2` others.
    pub queries: usize,
    pub hosts: usize,
    pub cores: f64,
    pub slots: usize,
    /// Disk bandwidth of a host, bytes/s (shared by reads and writes).
    pub disk_bw: f64,
    /// Network bandwidth of a host, bytes/s.
    pub net_bw: f64,
    /// Length of a metric window, seconds.
    pub window: f64,
    /// Simulation step, seconds.
    pub step: f64,
    /// Time zero, epoch microseconds.
    pub start_us: i64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 42,
            queries: 6,
            hosts: 4,
            cores: 4.0,
            slots: 4,
            disk_bw: 200e6,
            net_bw: 125e6,
            window: 1.0,
            step: 0.05,
            // 2026-01-01T00:00:00Z
            start_us: 1_767_225_600_000_000,
        }
    }
}

/// The most one task can use of each resource per second when alone.
const TASK_DISK_RATE: f64 = 100e6;
const TASK_NET_RATE: f64 = 60e6;
/// Share of computed time a task spends in GC.
const GC_SHARE: f64 = 0.02;

/// Resources a simulated task uses, in the order of `Demand`.
const RES: [&str; 4] = ["cpu", "disk_read", "network", "disk_write"];

#[derive(Debug, Clone, Copy)]
struct Demand([f64; 4]);

impl Demand {
    /// Seconds the task takes alone: its slowest resource at full speed.
    fn ideal_seconds(&self) -> f64 {
        let d = self.0;
        (d[0])
            .max(d[1] / TASK_DISK_RATE)
            .max(d[2] / TASK_NET_RATE)
            .max(d[3] / TASK_DISK_RATE)
            .max(0.1)
    }
}

struct QuerySpec {
    id: String,
    user: &'static str,
    pool: &'static str,
    sql: String,
    submit: f64,
    /// Stages: (parents, tasks, demand per task).
    stages: Vec<(Vec<usize>, usize, Demand)>,
}

struct Task {
    query: usize,
    stage: usize,
    index: usize,
    demand: Demand,
    ideal: f64,
    ready: f64,
    host: Option<usize>,
    launch: f64,
    finish: Option<f64>,
    progress: f64,
    totals_blocked: [f64; 4],
    totals_acquired: [f64; 4],
    gc: f64,
    /// Window accumulators: (window index, blocked, acquired per resource, gc).
    win: Option<(i64, [f64; 4], [f64; 4], f64)>,
}

fn workload(cfg: &SimConfig, rng: &mut Rng) -> Vec<QuerySpec> {
    let slots = cfg.hosts * cfg.slots;
    let mut qs = Vec::new();
    // The injected culprit: a heavy scan then a heavy shuffle, on every host.
    qs.push(QuerySpec {
        id: "q-culprit".into(),
        user: "mallory",
        pool: "etl",
        sql: "INSERT INTO archive SELECT * FROM events JOIN sessions USING (sid)".into(),
        submit: 4.0,
        stages: vec![
            (vec![], slots, Demand([2.0, 900e6, 0.0, 0.0])),
            (vec![0], slots, Demand([1.5, 0.0, 500e6, 300e6])),
        ],
    });
    // The victim: a dashboard query that runs alone in a few seconds.
    qs.push(QuerySpec {
        id: "q-victim".into(),
        user: "alice",
        pool: "adhoc",
        sql: "SELECT region, sum(amount) FROM sales GROUP BY region".into(),
        submit: 6.0,
        stages: vec![
            (vec![], cfg.hosts * 2, Demand([0.8, 150e6, 0.0, 0.0])),
            (vec![], cfg.hosts, Demand([0.5, 80e6, 0.0, 0.0])),
            (vec![0, 1], cfg.hosts, Demand([0.6, 0.0, 60e6, 10e6])),
        ],
    });
    // Others: light, mostly CPU, at other times.
    let users = ["bob", "carol", "dave", "erin"];
    for i in 0..cfg.queries.saturating_sub(2) {
        let tasks = 2 + rng.below(cfg.hosts * 2);
        let cpu = rng.range(0.5, 2.0);
        let disk = rng.range(5e6, 40e6);
        qs.push(QuerySpec {
            id: format!("q-{:03}", i + 1),
            user: users[i % users.len()],
            pool: if i % 2 == 0 { "adhoc" } else { "reports" },
            sql: format!(
                "SELECT count(*) FROM t{} WHERE x > {}",
                i + 1,
                rng.below(100)
            ),
            submit: 30.0 + i as f64 * rng.range(3.0, 9.0),
            stages: vec![
                (vec![], tasks, Demand([cpu, disk, 0.0, 0.0])),
                (
                    vec![0],
                    1 + tasks / 2,
                    Demand([cpu / 2.0, 0.0, disk / 2.0, 1e6]),
                ),
            ],
        });
    }
    qs
}

/// Runs the simulation and returns the interchange tables.
pub fn simulate(cfg: &SimConfig) -> Workload {
    let mut rng = Rng::new(cfg.seed);
    let specs = workload(cfg, &mut rng);
    let caps = [cfg.cores, cfg.disk_bw, cfg.net_bw, cfg.disk_bw];

    // Tasks, with a small per-task variation in demand.
    let mut tasks: Vec<Task> = Vec::new();
    let mut stage_tasks: Vec<Vec<Vec<usize>>> = Vec::new();
    for (qi, q) in specs.iter().enumerate() {
        let mut per_stage = Vec::new();
        for (si, (_, n, d)) in q.stages.iter().enumerate() {
            let mut ids = Vec::new();
            for index in 0..*n {
                let f = rng.range(0.85, 1.15);
                let demand = Demand(d.0.map(|x| x * f));
                ids.push(tasks.len());
                tasks.push(Task {
                    query: qi,
                    stage: si,
                    index,
                    demand,
                    ideal: demand.ideal_seconds(),
                    ready: f64::INFINITY,
                    host: None,
                    launch: 0.0,
                    finish: None,
                    progress: 0.0,
                    totals_blocked: [0.0; 4],
                    totals_acquired: [0.0; 4],
                    gc: 0.0,
                    win: None,
                });
            }
            per_stage.push(ids);
        }
        stage_tasks.push(per_stage);
    }

    let mut stage_ready: Vec<Vec<Option<f64>>> =
        specs.iter().map(|q| vec![None; q.stages.len()]).collect();
    let mut free_slots = vec![cfg.slots; cfg.hosts];
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut host_used: Vec<Vec<[f64; 4]>> = vec![Vec::new(); cfg.hosts];
    let mut tw = TableBuilder::new(Table::TaskWindows, 4096);

    // External load: another process reading host 0's disk from 5 s to 12 s.
    let external = |h: usize, t: f64| -> [f64; 4] {
        if h == 0 && (5.0..12.0).contains(&t) {
            [0.0, 70e6, 0.0, 0.0]
        } else {
            [0.0; 4]
        }
    };

    let dt = cfg.step;
    let steps_per_window = (cfg.window / dt).round() as i64;
    let to_us = |t: f64| cfg.start_us + (t * 1e6).round() as i64;
    let mut step: i64 = 0;
    loop {
        let t = step as f64 * dt;
        // Stages become ready when their query is submitted and parents are done.
        for (qi, q) in specs.iter().enumerate() {
            if t + 1e-9 < q.submit {
                continue;
            }
            for (si, (parents, _, _)) in q.stages.iter().enumerate() {
                if stage_ready[qi][si].is_some() {
                    continue;
                }
                let done = parents.iter().all(|p| {
                    stage_tasks[qi][*p]
                        .iter()
                        .all(|&ti| tasks[ti].finish.is_some_and(|f| f <= t + 1e-9))
                });
                if done {
                    stage_ready[qi][si] = Some(t);
                    for &ti in &stage_tasks[qi][si] {
                        tasks[ti].ready = t;
                        queue.push_back(ti);
                    }
                }
            }
        }
        // FIFO slot assignment, to the host with the most free slots.
        while let Some(&ti) = queue.front() {
            let (h, free) = free_slots
                .iter()
                .enumerate()
                .max_by_key(|(h, f)| (**f, usize::MAX - h))
                .map(|(h, f)| (h, *f))
                .expect("hosts");
            if free == 0 {
                break;
            }
            queue.pop_front();
            free_slots[h] -= 1;
            tasks[ti].host = Some(h);
            tasks[ti].launch = t;
        }
        if tasks.iter().all(|x| x.finish.is_some()) {
            break;
        }

        // Share each host's resources in proportion to demand.
        let window = step.div_euclid(steps_per_window);
        for h in 0..cfg.hosts {
            let running: Vec<usize> = (0..tasks.len())
                .filter(|&i| tasks[i].host == Some(h) && tasks[i].finish.is_none())
                .collect();
            let ext = external(h, t);
            let mut want = [0.0; 4];
            for &i in &running {
                for (w, d) in want.iter_mut().zip(tasks[i].demand.0) {
                    *w += d / tasks[i].ideal;
                }
            }
            let mut share = [1.0; 4];
            for (r, s) in share.iter_mut().enumerate() {
                let avail = (caps[r] - ext[r]).max(0.0);
                if want[r] > avail {
                    *s = avail / want[r];
                }
            }
            let mut used = ext.map(|x| x * dt);
            for &i in &running {
                let task = &mut tasks[i];
                // Progress is set by the bottleneck resource.
                let mut p = 1.0f64;
                let mut bottleneck = 0;
                for (r, &s) in share.iter().enumerate() {
                    if task.demand.0[r] > 0.0 && s < p {
                        p = s;
                        bottleneck = r;
                    }
                }
                // `run`: seconds of full-speed progress; `busy`: wall seconds
                // spent (less than a step when the task ends inside it).
                let remaining = (1.0 - task.progress) * task.ideal;
                let (run, busy) = if p <= 0.0 {
                    (0.0, dt)
                } else if p * dt >= remaining {
                    (remaining, remaining / p)
                } else {
                    (p * dt, dt)
                };
                let frac = run / task.ideal;
                let mut blocked = [0.0; 4];
                blocked[bottleneck] = busy - run;
                // A GC pause inside the run is blocked CPU time.
                let gc = GC_SHARE * run;
                blocked[0] += gc;
                let mut acquired = [0.0; 4];
                for r in 0..4 {
                    acquired[r] = frac * task.demand.0[r];
                    used[r] += acquired[r];
                    task.totals_acquired[r] += acquired[r];
                    task.totals_blocked[r] += blocked[r];
                }
                task.gc += gc;
                task.progress += frac;
                // Window bookkeeping.
                match &mut task.win {
                    Some((w, b, a, g)) if *w == window => {
                        for r in 0..4 {
                            b[r] += blocked[r];
                            a[r] += acquired[r];
                        }
                        *g += gc;
                    }
                    _ => {
                        if let Some(prev) = task.win.take() {
                            flush(&mut tw, task, prev, cfg, to_us, None, &specs);
                        }
                        task.win = Some((window, blocked, acquired, gc));
                    }
                }
                if task.progress >= 1.0 - 1e-9 {
                    let end = t + busy;
                    task.finish = Some(end);
                    free_slots[h] += 1;
                    if let Some(prev) = task.win.take() {
                        flush(&mut tw, task, prev, cfg, to_us, Some(end), &specs);
                    }
                }
            }
            let w = window as usize;
            if host_used[h].len() <= w {
                host_used[h].resize(w + 1, [0.0; 4]);
            }
            for r in 0..4 {
                host_used[h][w][r] += used[r];
            }
        }
        step += 1;
        assert!(step < 10_000_000, "simulation does not terminate");
    }

    // Tables.
    let mut qb = TableBuilder::new(Table::Queries, specs.len());
    let mut sb = TableBuilder::new(Table::Stages, 16);
    for (qi, q) in specs.iter().enumerate() {
        let all: Vec<&Task> = tasks.iter().filter(|x| x.query == qi).collect();
        let start = all.iter().map(|x| x.launch).fold(f64::INFINITY, f64::min);
        let end = all.iter().filter_map(|x| x.finish).fold(0.0, f64::max);
        let tags = format!(r#"{{"team":"{}","generator":"culprit-sim"}}"#, q.pool);
        qb.row(&[
            ("query_id", Value::S(&q.id)),
            ("app_id", Value::S("sim-app")),
            ("user", Value::S(q.user)),
            ("pool", Value::S(q.pool)),
            ("sql_text", Value::S(&q.sql)),
            ("submit_time", Value::T(to_us(q.submit))),
            ("start_time", Value::T(to_us(start))),
            ("end_time", Value::T(to_us(end))),
            ("status", Value::S("succeeded")),
            ("tags", Value::S(&tags)),
        ]);
        for (si, (parents, _, _)) in q.stages.iter().enumerate() {
            let st: Vec<&Task> = all.iter().copied().filter(|x| x.stage == si).collect();
            let parents = parents
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",");
            let sid = si.to_string();
            let name = format!("stage {si} of {}", q.id);
            sb.row(&[
                ("query_id", Value::S(&q.id)),
                ("stage_id", Value::S(&sid)),
                ("parent_ids", Value::S(&parents)),
                ("name", Value::S(&name)),
                (
                    "submit_time",
                    Value::T(to_us(stage_ready[qi][si].unwrap_or(q.submit))),
                ),
                (
                    "start_time",
                    Value::T(to_us(
                        st.iter().map(|x| x.launch).fold(f64::INFINITY, f64::min),
                    )),
                ),
                (
                    "end_time",
                    Value::T(to_us(
                        st.iter().filter_map(|x| x.finish).fold(0.0, f64::max),
                    )),
                ),
            ]);
        }
    }
    let mut tb = TableBuilder::new(Table::Tasks, tasks.len());
    for x in &tasks {
        let q = &specs[x.query];
        let id = task_id(&specs, x);
        let host = format!("host-{}", x.host.expect("ran"));
        let exec = format!("exec-{}", x.host.expect("ran"));
        let sid = x.stage.to_string();
        tb.row(&[
            ("task_id", Value::S(&id)),
            ("query_id", Value::S(&q.id)),
            ("stage_id", Value::S(&sid)),
            ("host", Value::S(&host)),
            ("executor_id", Value::S(&exec)),
            ("ready_time", Value::T(to_us(x.ready))),
            ("launch_time", Value::T(to_us(x.launch))),
            ("finish_time", Value::T(to_us(x.finish.expect("finished")))),
            ("status", Value::S("success")),
            ("input_bytes", Value::F(x.totals_acquired[1])),
            ("output_bytes", Value::F(0.0)),
            ("shuffle_read_bytes", Value::F(x.totals_acquired[2])),
            ("shuffle_write_bytes", Value::F(x.totals_acquired[3])),
            ("cpu_seconds", Value::F(x.totals_acquired[0])),
            ("gc_seconds", Value::F(x.gc)),
            ("disk_read_blocked", Value::F(x.totals_blocked[1])),
            ("disk_write_blocked", Value::F(x.totals_blocked[3])),
            ("network_blocked", Value::F(x.totals_blocked[2])),
            ("cpu_blocked", Value::F(x.totals_blocked[0])),
            ("memory_blocked", Value::F(0.0)),
            ("scheduler_delay", Value::F(0.0)),
        ]);
    }
    let mut hb = TableBuilder::new(Table::HostWindows, 1024);
    for (h, windows) in host_used.iter().enumerate() {
        let host = format!("host-{h}");
        for (w, used) in windows.iter().enumerate() {
            let s = to_us(w as f64 * cfg.window);
            let e = to_us((w + 1) as f64 * cfg.window);
            for r in 0..4 {
                hb.row(&[
                    ("host", Value::S(&host)),
                    ("window_start", Value::T(s)),
                    ("window_end", Value::T(e)),
                    ("resource", Value::S(RES[r])),
                    ("capacity", Value::F(caps[r])),
                    ("used", Value::F(used[r])),
                ]);
            }
        }
    }
    Workload {
        queries: qb.finish(),
        stages: sb.finish(),
        tasks: tb.finish(),
        task_windows: tw.finish(),
        host_windows: hb.finish(),
        victim: "q-victim".into(),
        culprit: "q-culprit".into(),
    }
}

fn task_id(specs: &[QuerySpec], x: &Task) -> String {
    format!("{}-s{}-t{}", specs[x.query].id, x.stage, x.index)
}

#[allow(clippy::too_many_arguments)]
fn flush(
    tw: &mut TableBuilder,
    task: &Task,
    (w, blocked, acquired, gc): (i64, [f64; 4], [f64; 4], f64),
    cfg: &SimConfig,
    to_us: impl Fn(f64) -> i64,
    end: Option<f64>,
    specs: &[QuerySpec],
) {
    let ws = (w as f64 * cfg.window).max(task.launch);
    let we = end.unwrap_or((w + 1) as f64 * cfg.window);
    let id = task_id(specs, task);
    for r in 0..4 {
        if blocked[r] <= 0.0 && acquired[r] <= 0.0 {
            continue;
        }
        tw.row(&[
            ("task_id", Value::S(&id)),
            ("window_start", Value::T(to_us(ws))),
            ("window_end", Value::T(to_us(we))),
            ("resource", Value::S(RES[r])),
            ("blocked", Value::F(blocked[r])),
            ("acquired", Value::F(acquired[r])),
            ("gc", if r == 0 { Value::F(gc) } else { Value::Null }),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::Float64Type;

    #[test]
    fn deterministic_and_contended() {
        let cfg = SimConfig::default();
        let a = simulate(&cfg);
        let b = simulate(&cfg);
        assert_eq!(a.task_windows, b.task_windows);
        assert!(a.tasks.num_rows() > 50);
        // The victim was blocked: contention was simulated.
        let blocked = a.tasks.column_by_name("disk_read_blocked").unwrap();
        let total: f64 = blocked.as_primitive::<Float64Type>().iter().flatten().sum();
        assert!(total > 1.0, "blocked {total}");
    }
}
