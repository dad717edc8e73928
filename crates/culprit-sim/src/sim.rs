//! The time-stepped cluster simulation.

use std::collections::VecDeque;

use arrow::record_batch::RecordBatch;
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

impl SimConfig {
    /// A simulated time (seconds since time zero) as epoch microseconds,
    /// rounded: every time column of the output goes through here.
    fn epoch_us(&self, seconds: f64) -> i64 {
        self.start_us + (seconds * 1e6).round() as i64
    }
}

/// A workload to simulate on the cluster of a [`SimConfig`]: the queries,
/// the processes outside them, and garbage collection. [`simulate`] runs
/// [`Scenario::from_config`]; [`crate::scenarios`] generates others, and
/// [`simulate_scenario`] runs any.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub queries: Vec<QuerySpec>,
    /// Load on the hosts that no query causes (`external` in the blame).
    pub external: Vec<ExternalLoad>,
    pub gc: Gc,
    /// How each task's demand is varied around its stage's.
    pub variation: Variation,
    /// The query to explain.
    pub victim: String,
    /// The query injected to slow the victim down (empty when none is).
    pub culprit: String,
}

/// How each task's demand is varied around its stage's (uniformly, by 0.85
/// to 1.15).
#[derive(Debug, Clone)]
pub enum Variation {
    /// One generator draws for every task, query after query (the default
    /// workload's): removing a query changes the others' tasks.
    Shared(Rng),
    /// Each query's tasks draw from a generator seeded by its
    /// [`QuerySpec::seed`]: removing a query changes nothing else, as
    /// leave-one-out comparisons need.
    PerQuery,
}

/// A query: a DAG of stages, submitted at a time.
#[derive(Debug, Clone)]
pub struct QuerySpec {
    pub id: String,
    pub user: String,
    pub pool: String,
    pub sql: String,
    /// Seconds since time zero.
    pub submit: f64,
    pub stages: Vec<StageSpec>,
    /// Seeds the variation of its tasks under [`Variation::PerQuery`].
    pub seed: u64,
}

/// A stage: parallel tasks, each needing about `demand`.
#[derive(Debug, Clone)]
pub struct StageSpec {
    /// Stages (indices into the query's stages) that must finish first.
    pub parents: Vec<usize>,
    pub tasks: usize,
    /// What each task needs, before its own small variation.
    pub demand: Demand,
}

/// A resource of a simulated host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimResource {
    Cpu,
    DiskRead,
    Network,
    DiskWrite,
}

impl SimResource {
    fn index(self) -> usize {
        match self {
            SimResource::Cpu => CPU,
            SimResource::DiskRead => DISK_READ,
            SimResource::Network => NETWORK,
            SimResource::DiskWrite => DISK_WRITE,
        }
    }
}

/// A process outside the queries using `rate` units per second of a
/// resource of a host (cores, or bytes/s) from `from` to `to` (seconds
/// since time zero; a simulation step uses it when the step starts inside).
#[derive(Debug, Clone)]
pub struct ExternalLoad {
    pub host: usize,
    pub resource: SimResource,
    pub rate: f64,
    pub from: f64,
    pub to: f64,
}

/// Garbage collection: every task spends `share` of its time in GC, plus
/// the storms' shares on their hosts while they last.
#[derive(Debug, Clone)]
pub struct Gc {
    pub share: f64,
    /// Whether a GC pause stops the task (it then takes longer). Without,
    /// as in the default workload, GC time is counted (as blocked CPU time)
    /// but costs nothing, and storms are ignored.
    pub pauses: bool,
    pub storms: Vec<GcStorm>,
}

impl Gc {
    /// No garbage collection at all.
    pub fn none() -> Self {
        Gc {
            share: 0.0,
            pauses: true,
            storms: Vec::new(),
        }
    }

    /// Whether there is any GC time.
    pub fn any(&self) -> bool {
        self.share > 0.0 || (self.pauses && self.storms.iter().any(|s| s.share > 0.0))
    }
}

/// Every task running on `hosts` from `from` to `to` (seconds since time
/// zero) spends `share` of its time in GC pauses (stop-the-world).
#[derive(Debug, Clone)]
pub struct GcStorm {
    pub hosts: Vec<usize>,
    pub from: f64,
    pub to: f64,
    pub share: f64,
}

impl Scenario {
    /// The workload `simulate(cfg)` runs: the victim, an injected culprit,
    /// `cfg.queries - 2` light others, an external reader on host 0.
    pub fn from_config(cfg: &SimConfig) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let queries = workload(cfg, &mut rng);
        Scenario {
            queries,
            external: vec![ExternalLoad {
                host: 0,
                resource: SimResource::DiskRead,
                rate: 70e6,
                from: 5.0,
                to: 12.0,
            }],
            gc: Gc {
                share: GC_SHARE,
                pauses: false,
                storms: Vec::new(),
            },
            variation: Variation::Shared(rng),
            victim: "q-victim".into(),
            culprit: "q-culprit".into(),
        }
    }

    /// The scenario without query `id`.
    pub fn without_query(&self, id: &str) -> Self {
        let mut s = self.clone();
        s.queries.retain(|q| q.id != id);
        s
    }

    /// The scenario without its external processes.
    pub fn without_external(&self) -> Self {
        let mut s = self.clone();
        s.external.clear();
        s
    }

    /// The scenario without garbage collection.
    pub fn without_gc(&self) -> Self {
        let mut s = self.clone();
        s.gc = Gc::none();
        s
    }
}

/// The most one task can use of each resource per second when alone.
const TASK_DISK_RATE: f64 = 100e6;
const TASK_NET_RATE: f64 = 60e6;
/// Share of computed time a task spends in GC.
const GC_SHARE: f64 = 0.02;

/// Resources a simulated task uses, in the order of `Demand` (and of every
/// per-resource array below); the constants after it index them.
const RESOURCES: [&str; 4] = ["cpu", "disk_read", "network", "disk_write"];
const CPU: usize = 0;
const DISK_READ: usize = 1;
const NETWORK: usize = 2;
const DISK_WRITE: usize = 3;

/// What a task needs in all: CPU seconds and bytes read, fetched and written.
#[derive(Debug, Clone, Copy)]
pub struct Demand([f64; 4]);

impl Demand {
    pub fn new(cpu_seconds: f64, disk_read: f64, network: f64, disk_write: f64) -> Self {
        Demand([cpu_seconds, disk_read, network, disk_write])
    }

    /// Seconds the task takes alone: its slowest resource at full speed.
    fn ideal_seconds(&self) -> f64 {
        let need = self.0;
        need[CPU]
            .max(need[DISK_READ] / TASK_DISK_RATE)
            .max(need[NETWORK] / TASK_NET_RATE)
            .max(need[DISK_WRITE] / TASK_DISK_RATE)
            .max(0.1)
    }
}

impl StageSpec {
    pub fn new(parents: Vec<usize>, tasks: usize, demand: Demand) -> Self {
        StageSpec {
            parents,
            tasks,
            demand,
        }
    }
}

struct Task {
    query: usize,
    stage: usize,
    index: usize,
    demand: Demand,
    ideal_seconds: f64,
    ready: f64,
    host: Option<usize>,
    launch: f64,
    finish: Option<f64>,
    /// Share of the work done, 0 to 1.
    progress: f64,
    total_blocked: [f64; 4],
    total_acquired: [f64; 4],
    total_gc: f64,
    /// What the task did in the window it is running in, not yet written.
    open_window: Option<WindowTotals>,
}

/// What a task did in one metric window: a `task_windows` row per resource.
#[derive(Debug, Clone, Copy)]
struct WindowTotals {
    window: i64,
    blocked: [f64; 4],
    acquired: [f64; 4],
    gc: f64,
}

/// What a task did in one simulation step.
struct StepUse {
    /// Wall seconds the task spent in the step: the step, or less when it
    /// finished inside it.
    busy: f64,
    blocked: [f64; 4],
    acquired: [f64; 4],
    gc: f64,
}

fn workload(cfg: &SimConfig, rng: &mut Rng) -> Vec<QuerySpec> {
    let slots = cfg.hosts * cfg.slots;
    let mut specs = Vec::new();
    // The injected culprit: a heavy scan then a heavy shuffle, on every host.
    specs.push(QuerySpec {
        id: "q-culprit".into(),
        user: "mallory".into(),
        pool: "etl".into(),
        sql: "INSERT INTO archive SELECT * FROM events JOIN sessions USING (sid)".into(),
        submit: 4.0,
        stages: vec![
            StageSpec::new(vec![], slots, Demand([2.0, 900e6, 0.0, 0.0])),
            StageSpec::new(vec![0], slots, Demand([1.5, 0.0, 500e6, 300e6])),
        ],
        seed: 0,
    });
    // The victim: a dashboard query that runs alone in a few seconds.
    specs.push(QuerySpec {
        id: "q-victim".into(),
        user: "alice".into(),
        pool: "adhoc".into(),
        sql: "SELECT region, sum(amount) FROM sales GROUP BY region".into(),
        submit: 6.0,
        stages: vec![
            StageSpec::new(vec![], cfg.hosts * 2, Demand([0.8, 150e6, 0.0, 0.0])),
            StageSpec::new(vec![], cfg.hosts, Demand([0.5, 80e6, 0.0, 0.0])),
            StageSpec::new(vec![0, 1], cfg.hosts, Demand([0.6, 0.0, 60e6, 10e6])),
        ],
        seed: 0,
    });
    // Others: light, mostly CPU, at other times. The fields are drawn from
    // the generator in the order written (the seed's output depends on it).
    let users = ["bob", "carol", "dave", "erin"];
    for i in 0..cfg.queries.saturating_sub(2) {
        let tasks = 2 + rng.below(cfg.hosts * 2);
        let cpu = rng.range(0.5, 2.0);
        let disk = rng.range(5e6, 40e6);
        specs.push(QuerySpec {
            id: format!("q-{:03}", i + 1),
            user: users[i % users.len()].into(),
            pool: if i % 2 == 0 { "adhoc" } else { "reports" }.into(),
            sql: format!(
                "SELECT count(*) FROM t{} WHERE x > {}",
                i + 1,
                rng.below(100)
            ),
            submit: 30.0 + i as f64 * rng.range(3.0, 9.0),
            stages: vec![
                StageSpec::new(vec![], tasks, Demand([cpu, disk, 0.0, 0.0])),
                StageSpec::new(
                    vec![0],
                    1 + tasks / 2,
                    Demand([cpu / 2.0, 0.0, disk / 2.0, 1e6]),
                ),
            ],
            seed: 0,
        });
    }
    specs
}

/// The tasks of every stage, with a small per-task variation in demand, and
/// their indices per query, per stage.
fn create_tasks(specs: &[QuerySpec], variation: &Variation) -> (Vec<Task>, Vec<Vec<Vec<usize>>>) {
    let mut tasks: Vec<Task> = Vec::new();
    let mut stage_tasks: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut shared = match variation {
        Variation::Shared(rng) => Some(rng.clone()),
        Variation::PerQuery => None,
    };
    for (query, spec) in specs.iter().enumerate() {
        let mut own = Rng::new(spec.seed);
        let rng = shared.as_mut().unwrap_or(&mut own);
        let mut per_stage = Vec::new();
        for (stage, stage_spec) in spec.stages.iter().enumerate() {
            let mut ids = Vec::new();
            for index in 0..stage_spec.tasks {
                let variation = rng.range(0.85, 1.15);
                let demand = Demand(stage_spec.demand.0.map(|x| x * variation));
                ids.push(tasks.len());
                tasks.push(Task {
                    query,
                    stage,
                    index,
                    demand,
                    ideal_seconds: demand.ideal_seconds(),
                    ready: f64::INFINITY,
                    host: None,
                    launch: 0.0,
                    finish: None,
                    progress: 0.0,
                    total_blocked: [0.0; 4],
                    total_acquired: [0.0; 4],
                    total_gc: 0.0,
                    open_window: None,
                });
            }
            per_stage.push(ids);
        }
        stage_tasks.push(per_stage);
    }
    (tasks, stage_tasks)
}

/// External load on a host in the step starting at `t`: contention that no
/// query causes, which the blame must not pin on one. (The default
/// workload's: another process reading host 0's disk from 5 s to 12 s.)
fn external_load(external: &[ExternalLoad], host: usize, t: f64) -> [f64; 4] {
    let mut load = [0.0; 4];
    for e in external {
        if e.host == host && (e.from..e.to).contains(&t) {
            load[e.resource.index()] += e.rate;
        }
    }
    load
}

/// The share of its time a task on `host` spends in GC pauses in the step
/// starting at `t` (0 when pauses cost nothing: then GC is counted apart).
fn gc_pause(gc: &Gc, host: usize, t: f64) -> f64 {
    if !gc.pauses {
        return 0.0;
    }
    let storms: f64 = gc
        .storms
        .iter()
        .filter(|s| s.hosts.contains(&host) && (s.from..s.to).contains(&t))
        .map(|s| s.share)
        .sum();
    (gc.share + storms).clamp(0.0, 0.95)
}

/// Runs the simulation of [`Scenario::from_config`] and returns the
/// interchange tables.
pub fn simulate(cfg: &SimConfig) -> Workload {
    simulate_scenario(cfg, &Scenario::from_config(cfg))
}

/// Runs a scenario on the cluster of `cfg` (its seed is not used: the
/// scenario's variation says how tasks vary) and returns the tables.
pub fn simulate_scenario(cfg: &SimConfig, scenario: &Scenario) -> Workload {
    let mut sim = Simulation::new(cfg, scenario);
    sim.run();
    sim.into_workload()
}

/// Runs a scenario and returns each query's latency, seconds from its
/// submission to the finish of its last task, in the scenario's order
/// (cheaper than [`simulate_scenario`]: no tables are written).
pub fn query_latencies(cfg: &SimConfig, scenario: &Scenario) -> Vec<(String, f64)> {
    let mut sim = Simulation::new(cfg, scenario);
    sim.run();
    sim.specs
        .iter()
        .enumerate()
        .map(|(query, spec)| {
            let finish = sim
                .tasks
                .iter()
                .filter(|t| t.query == query)
                .filter_map(|t| t.finish)
                .fold(spec.submit, f64::max);
            (spec.id.clone(), finish - spec.submit)
        })
        .collect()
}

/// A simulation under way: the tasks, where they run, and what each host
/// used in each window. [`Simulation::run`] advances it step by step until
/// every task has finished; [`Simulation::into_workload`] writes the tables.
struct Simulation<'a> {
    cfg: &'a SimConfig,
    specs: Vec<QuerySpec>,
    external: &'a [ExternalLoad],
    gc: &'a Gc,
    victim: &'a str,
    culprit: &'a str,
    /// What one host has of each resource, per second.
    capacity: [f64; 4],
    tasks: Vec<Task>,
    /// Indices into `tasks`, per query, per stage.
    stage_tasks: Vec<Vec<Vec<usize>>>,
    /// When each stage became ready (its query submitted, its parents done),
    /// per query, per stage.
    stage_ready: Vec<Vec<Option<f64>>>,
    free_slots: Vec<usize>,
    /// Ready tasks waiting for a slot, first come first served.
    slot_queue: VecDeque<usize>,
    /// What each host used of each resource, per host, per window (tasks
    /// and external load).
    host_used: Vec<Vec<[f64; 4]>>,
    /// The `task_windows` rows, written as each task's window closes.
    task_windows: TableBuilder,
}

impl<'a> Simulation<'a> {
    /// The scenario, its tasks created, nothing run yet.
    fn new(cfg: &'a SimConfig, scenario: &'a Scenario) -> Self {
        let specs = scenario.queries.clone();
        let (tasks, stage_tasks) = create_tasks(&specs, &scenario.variation);
        let stage_ready = specs.iter().map(|q| vec![None; q.stages.len()]).collect();
        Simulation {
            cfg,
            capacity: [cfg.cores, cfg.disk_bw, cfg.net_bw, cfg.disk_bw],
            tasks,
            stage_tasks,
            stage_ready,
            free_slots: vec![cfg.slots; cfg.hosts],
            slot_queue: VecDeque::new(),
            host_used: vec![Vec::new(); cfg.hosts],
            task_windows: TableBuilder::new(Table::TaskWindows, 4096),
            specs,
            external: &scenario.external,
            gc: &scenario.gc,
            victim: &scenario.victim,
            culprit: &scenario.culprit,
        }
    }

    /// Steps time until every task has finished.
    fn run(&mut self) {
        let dt = self.cfg.step;
        let steps_per_window = (self.cfg.window / dt).round() as i64;
        let mut step: i64 = 0;
        loop {
            let t = step as f64 * dt;
            self.release_ready_stages(t);
            self.assign_slots(t);
            if self.tasks.iter().all(|task| task.finish.is_some()) {
                break;
            }
            let window = step.div_euclid(steps_per_window);
            for host in 0..self.cfg.hosts {
                self.advance_host(host, t, window);
            }
            step += 1;
            assert!(step < 10_000_000, "simulation does not terminate");
        }
    }

    /// Queues the tasks of every stage that becomes ready at `t`: its query
    /// is submitted and its parent stages are done.
    fn release_ready_stages(&mut self, t: f64) {
        for (query, spec) in self.specs.iter().enumerate() {
            if t + 1e-9 < spec.submit {
                continue;
            }
            for (stage, stage_spec) in spec.stages.iter().enumerate() {
                if self.stage_ready[query][stage].is_some() {
                    continue;
                }
                if self.stages_done(query, &stage_spec.parents, t) {
                    self.stage_ready[query][stage] = Some(t);
                    for &task in &self.stage_tasks[query][stage] {
                        self.tasks[task].ready = t;
                        self.slot_queue.push_back(task);
                    }
                }
            }
        }
    }

    /// Whether every task of these stages of the query finished by `t`.
    fn stages_done(&self, query: usize, stages: &[usize], t: f64) -> bool {
        stages.iter().all(|&stage| {
            self.stage_tasks[query][stage]
                .iter()
                .all(|&task| self.tasks[task].finish.is_some_and(|f| f <= t + 1e-9))
        })
    }

    /// FIFO slot assignment: each queued task, in turn, goes to the host with
    /// the most free slots (the lowest numbered of a tie), until none is free.
    fn assign_slots(&mut self, t: f64) {
        while let Some(&task) = self.slot_queue.front() {
            let (host, free) = self
                .free_slots
                .iter()
                .enumerate()
                .max_by_key(|(host, free)| (**free, usize::MAX - host))
                .map(|(host, free)| (host, *free))
                .expect("hosts");
            if free == 0 {
                break;
            }
            self.slot_queue.pop_front();
            self.free_slots[host] -= 1;
            self.tasks[task].host = Some(host);
            self.tasks[task].launch = t;
        }
    }

    /// One step of one host: its running tasks share its resources, progress,
    /// block, and close their windows; the host's use is added to `window`.
    fn advance_host(&mut self, host: usize, t: f64, window: i64) {
        let dt = self.cfg.step;
        let running: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| self.tasks[i].host == Some(host) && self.tasks[i].finish.is_none())
            .collect();
        let external = external_load(self.external, host, t);
        let pause = gc_pause(self.gc, host, t);
        let share = self.shares(&running, external, pause);
        let mut used = external.map(|x| x * dt);
        let gc_share = if self.gc.pauses { pause } else { self.gc.share };
        for &i in &running {
            let task = &mut self.tasks[i];
            let step_use = advance_task(task, &share, dt, self.gc.pauses, gc_share);
            for (used, acquired) in used.iter_mut().zip(step_use.acquired) {
                *used += acquired;
            }
            // A task's window is written when the next one starts, or when
            // the task finishes (then it ends at the finish time).
            if let Some(closed) = add_to_window(task, window, &step_use) {
                write_window(
                    &mut self.task_windows,
                    self.cfg,
                    &self.specs,
                    task,
                    &closed,
                    None,
                );
            }
            if task.progress >= 1.0 - 1e-9 {
                let end = t + step_use.busy;
                task.finish = Some(end);
                self.free_slots[host] += 1;
                if let Some(last) = task.open_window.take() {
                    write_window(
                        &mut self.task_windows,
                        self.cfg,
                        &self.specs,
                        task,
                        &last,
                        Some(end),
                    );
                }
            }
        }
        let window = window as usize;
        let host_used = &mut self.host_used[host];
        if host_used.len() <= window {
            host_used.resize(window + 1, [0.0; 4]);
        }
        for (total, used) in host_used[window].iter_mut().zip(used) {
            *total += used;
        }
    }

    /// The share of its demand each running task of a host gets of each
    /// resource: all of it, or the same fraction for every task when the
    /// host (less the external load) has less than they want together.
    /// Tasks paused `pause` of the time for GC want that much less.
    fn shares(&self, running: &[usize], external: [f64; 4], pause: f64) -> [f64; 4] {
        let mut want = [0.0; 4];
        for &i in running {
            for (want, need) in want.iter_mut().zip(self.tasks[i].demand.0) {
                *want += need / self.tasks[i].ideal_seconds;
            }
        }
        if pause > 0.0 {
            for want in &mut want {
                *want *= 1.0 - pause;
            }
        }
        let mut share = [1.0; 4];
        for (r, share) in share.iter_mut().enumerate() {
            let available = (self.capacity[r] - external[r]).max(0.0);
            if want[r] > available {
                *share = available / want[r];
            }
        }
        share
    }

    /// The tables of the finished simulation.
    fn into_workload(self) -> Workload {
        let (queries, stages) = self.query_and_stage_rows();
        let tasks = self.task_rows();
        let host_windows = self.host_window_rows();
        let lineage = self.lineage();
        Workload {
            queries,
            stages,
            tasks,
            task_windows: self.task_windows.finish(),
            host_windows,
            record_lineage: Some(lineage.record_lineage),
            partition_latency: Some(lineage.partition_latency),
            victim: self.victim.to_string(),
            culprit: self.culprit.to_string(),
            expensive_input: lineage.expensive_input,
        }
    }

    /// The record lineage of the finished tasks, with an expensive input
    /// record injected in the victim (`lineage.rs`).
    fn lineage(&self) -> crate::lineage::Lineage {
        let tasks: Vec<crate::lineage::LineageTask> = self
            .tasks
            .iter()
            .map(|task| crate::lineage::LineageTask {
                query: &self.specs[task.query].id,
                task_id: task_id(&self.specs, task),
                stage: task.stage,
                index: task.index,
                parents: &self.specs[task.query].stages[task.stage].parents,
                cpu_seconds: task.total_acquired[CPU],
                fetch_seconds: task.total_acquired[NETWORK] / TASK_NET_RATE,
            })
            .collect();
        crate::lineage::lineage(&tasks, self.victim, self.cfg.seed)
    }

    /// The `queries` and `stages` rows: submitted as specified (a stage when
    /// it became ready), running from the first launch to the last finish.
    fn query_and_stage_rows(&self) -> (RecordBatch, RecordBatch) {
        let cfg = self.cfg;
        let mut queries = TableBuilder::new(Table::Queries, self.specs.len());
        let mut stages = TableBuilder::new(Table::Stages, 16);
        for (query, spec) in self.specs.iter().enumerate() {
            let of_query: Vec<&Task> = self.tasks.iter().filter(|x| x.query == query).collect();
            let tags = format!(r#"{{"team":"{}","generator":"culprit-sim"}}"#, spec.pool);
            queries.row(&[
                ("query_id", Value::S(&spec.id)),
                ("app_id", Value::S("sim-app")),
                ("user", Value::S(&spec.user)),
                ("pool", Value::S(&spec.pool)),
                ("sql_text", Value::S(&spec.sql)),
                ("submit_time", Value::T(cfg.epoch_us(spec.submit))),
                (
                    "start_time",
                    Value::T(cfg.epoch_us(first_launch(&of_query))),
                ),
                ("end_time", Value::T(cfg.epoch_us(last_finish(&of_query)))),
                ("status", Value::S("succeeded")),
                ("tags", Value::S(&tags)),
            ]);
            for (stage, stage_spec) in spec.stages.iter().enumerate() {
                let of_stage: Vec<&Task> = of_query
                    .iter()
                    .copied()
                    .filter(|x| x.stage == stage)
                    .collect();
                let parents = stage_spec
                    .parents
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                let stage_id = stage.to_string();
                let name = format!("stage {stage} of {}", spec.id);
                let submit = self.stage_ready[query][stage].unwrap_or(spec.submit);
                stages.row(&[
                    ("query_id", Value::S(&spec.id)),
                    ("stage_id", Value::S(&stage_id)),
                    ("parent_ids", Value::S(&parents)),
                    ("name", Value::S(&name)),
                    ("submit_time", Value::T(cfg.epoch_us(submit))),
                    (
                        "start_time",
                        Value::T(cfg.epoch_us(first_launch(&of_stage))),
                    ),
                    ("end_time", Value::T(cfg.epoch_us(last_finish(&of_stage)))),
                ]);
            }
        }
        (queries.finish(), stages.finish())
    }

    /// The `tasks` rows: each task's run and totals, one executor per host.
    fn task_rows(&self) -> RecordBatch {
        let cfg = self.cfg;
        let mut rows = TableBuilder::new(Table::Tasks, self.tasks.len());
        for task in &self.tasks {
            let query = &self.specs[task.query];
            let id = task_id(&self.specs, task);
            let host = format!("host-{}", task.host.expect("ran"));
            let executor = format!("exec-{}", task.host.expect("ran"));
            let stage_id = task.stage.to_string();
            let finish = task.finish.expect("finished");
            let (acquired, blocked) = (task.total_acquired, task.total_blocked);
            rows.row(&[
                ("task_id", Value::S(&id)),
                ("query_id", Value::S(&query.id)),
                ("stage_id", Value::S(&stage_id)),
                ("host", Value::S(&host)),
                ("executor_id", Value::S(&executor)),
                ("ready_time", Value::T(cfg.epoch_us(task.ready))),
                ("launch_time", Value::T(cfg.epoch_us(task.launch))),
                ("finish_time", Value::T(cfg.epoch_us(finish))),
                ("status", Value::S("success")),
                ("input_bytes", Value::F(acquired[DISK_READ])),
                ("output_bytes", Value::F(0.0)),
                ("shuffle_read_bytes", Value::F(acquired[NETWORK])),
                ("shuffle_write_bytes", Value::F(acquired[DISK_WRITE])),
                ("cpu_seconds", Value::F(acquired[CPU])),
                ("gc_seconds", Value::F(task.total_gc)),
                ("disk_read_blocked", Value::F(blocked[DISK_READ])),
                ("disk_write_blocked", Value::F(blocked[DISK_WRITE])),
                ("network_blocked", Value::F(blocked[NETWORK])),
                ("cpu_blocked", Value::F(blocked[CPU])),
                ("memory_blocked", Value::F(0.0)),
                ("scheduler_delay", Value::F(0.0)),
            ]);
        }
        rows.finish()
    }

    /// The `host_windows` rows: capacity and use of every resource of every
    /// host in every window.
    fn host_window_rows(&self) -> RecordBatch {
        let cfg = self.cfg;
        let mut rows = TableBuilder::new(Table::HostWindows, 1024);
        for (host, windows) in self.host_used.iter().enumerate() {
            let host = format!("host-{host}");
            for (window, used) in windows.iter().enumerate() {
                let start = cfg.epoch_us(window as f64 * cfg.window);
                let end = cfg.epoch_us((window + 1) as f64 * cfg.window);
                for (r, resource) in RESOURCES.iter().enumerate() {
                    rows.row(&[
                        ("host", Value::S(&host)),
                        ("window_start", Value::T(start)),
                        ("window_end", Value::T(end)),
                        ("resource", Value::S(resource)),
                        ("capacity", Value::F(self.capacity[r])),
                        ("used", Value::F(used[r])),
                    ]);
                }
            }
        }
        rows.finish()
    }
}

/// The earliest launch of these tasks.
fn first_launch(tasks: &[&Task]) -> f64 {
    tasks.iter().map(|x| x.launch).fold(f64::INFINITY, f64::min)
}

/// The latest finish of these tasks.
fn last_finish(tasks: &[&Task]) -> f64 {
    tasks.iter().filter_map(|x| x.finish).fold(0.0, f64::max)
}

/// The rate a task progresses at given the host's shares, and the resource
/// that sets it: its bottleneck, the scarcest resource it needs (CPU when
/// nothing it needs is short).
fn bottleneck(demand: &Demand, share: &[f64; 4]) -> (f64, usize) {
    let mut rate = 1.0f64;
    let mut bottleneck = CPU;
    for (r, &s) in share.iter().enumerate() {
        if demand.0[r] > 0.0 && s < rate {
            rate = s;
            bottleneck = r;
        }
    }
    (rate, bottleneck)
}

/// Advances a running task by one step of `dt` seconds at the host's shares,
/// and adds what it did to its totals. Whatever the task does not get of its
/// bottleneck is blocked time on it; a GC pause is blocked CPU time. With
/// `pauses`, the task is paused `gc_share` of its time (and progresses in
/// the rest only); without, it spends `gc_share` of its run in GC that
/// costs no time (the default workload's).
fn advance_task(
    task: &mut Task,
    share: &[f64; 4],
    dt: f64,
    pauses: bool,
    gc_share: f64,
) -> StepUse {
    let (rate, bottleneck) = bottleneck(&task.demand, share);
    // `run`: seconds of full-speed progress; `busy`: wall seconds spent
    // (less than a step when the task ends inside it).
    let remaining = (1.0 - task.progress) * task.ideal_seconds;
    let (run, busy, gc) = if pauses {
        let speed = rate * (1.0 - gc_share);
        let (run, busy) = if speed <= 0.0 {
            (0.0, dt)
        } else if speed * dt >= remaining {
            (remaining, remaining / speed)
        } else {
            (speed * dt, dt)
        };
        (run, busy, gc_share * busy)
    } else {
        let (run, busy) = if rate <= 0.0 {
            (0.0, dt)
        } else if rate * dt >= remaining {
            (remaining, remaining / rate)
        } else {
            (rate * dt, dt)
        };
        (run, busy, gc_share * run)
    };
    let done = run / task.ideal_seconds;
    let mut blocked = [0.0; 4];
    // With pauses the GC time is not waiting on the bottleneck.
    blocked[bottleneck] = if pauses {
        (busy - gc - run).max(0.0)
    } else {
        busy - run
    };
    // A GC pause inside the run is blocked CPU time.
    blocked[CPU] += gc;
    let mut acquired = [0.0; 4];
    for r in 0..RESOURCES.len() {
        acquired[r] = done * task.demand.0[r];
        task.total_acquired[r] += acquired[r];
        task.total_blocked[r] += blocked[r];
    }
    task.total_gc += gc;
    task.progress += done;
    StepUse {
        busy,
        blocked,
        acquired,
        gc,
    }
}

/// Adds a step to the task's open window, or opens `window` with it;
/// returns the window it closed, to be written.
fn add_to_window(task: &mut Task, window: i64, step_use: &StepUse) -> Option<WindowTotals> {
    match &mut task.open_window {
        Some(open) if open.window == window => {
            for r in 0..RESOURCES.len() {
                open.blocked[r] += step_use.blocked[r];
                open.acquired[r] += step_use.acquired[r];
            }
            open.gc += step_use.gc;
            None
        }
        _ => task.open_window.replace(WindowTotals {
            window,
            blocked: step_use.blocked,
            acquired: step_use.acquired,
            gc: step_use.gc,
        }),
    }
}

fn task_id(specs: &[QuerySpec], task: &Task) -> String {
    format!("{}-s{}-t{}", specs[task.query].id, task.stage, task.index)
}

/// Writes a task's window as `task_windows` rows, one per resource it used
/// or was blocked on. The window starts no earlier than the task's launch,
/// and ends at `end` (its finish) when given, else at the window's end.
fn write_window(
    rows: &mut TableBuilder,
    cfg: &SimConfig,
    specs: &[QuerySpec],
    task: &Task,
    totals: &WindowTotals,
    end: Option<f64>,
) {
    let start = (totals.window as f64 * cfg.window).max(task.launch);
    let end = end.unwrap_or((totals.window + 1) as f64 * cfg.window);
    let id = task_id(specs, task);
    for (r, resource) in RESOURCES.iter().enumerate() {
        if totals.blocked[r] <= 0.0 && totals.acquired[r] <= 0.0 {
            continue;
        }
        rows.row(&[
            ("task_id", Value::S(&id)),
            ("window_start", Value::T(cfg.epoch_us(start))),
            ("window_end", Value::T(cfg.epoch_us(end))),
            ("resource", Value::S(resource)),
            ("blocked", Value::F(totals.blocked[r])),
            ("acquired", Value::F(totals.acquired[r])),
            (
                "gc",
                if r == CPU {
                    Value::F(totals.gc)
                } else {
                    Value::Null
                },
            ),
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
