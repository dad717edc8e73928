//! Plausible data at scale, not simulated: for benchmarks.
//!
//! Tasks are placed on slots by a real slot scheduler (so slot waits and
//! concurrency are consistent), but their resource use and blocked time per
//! window are drawn at random. Use [`crate::simulate`] for data whose blocked
//! time comes from contention.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow::record_batch::RecordBatch;
use culprit_core::Table;

use crate::rng::Rng;
use crate::Workload;
use culprit_core::batches::{TableBuilder, Value};

#[derive(Debug, Clone)]
pub struct FastConfig {
    pub seed: u64,
    pub tasks: usize,
    pub hosts: usize,
    pub slots: usize,
    /// Tasks per query (two stages of half each).
    pub tasks_per_query: usize,
    /// Windows per task; each has a row for cpu, disk_read, network, disk_write.
    pub windows_per_task: usize,
    /// Length of a host_windows row, seconds.
    pub host_window: f64,
    pub start_us: i64,
    /// How busy the cluster is: queries arrive every (a query's
    /// task-seconds / slots / `load`). Slots held for a next stage idle
    /// until it is ready (no backfill), so on the default cluster the slot
    /// queue grows without end from about 0.58; at 0.55 (the default) tasks
    /// wait a fraction of a second on average, however long the workload.
    pub load: f64,
}

impl Default for FastConfig {
    fn default() -> Self {
        FastConfig {
            seed: 42,
            tasks: 1_000_000,
            hosts: 500,
            slots: 8,
            tasks_per_query: 2_000,
            windows_per_task: 3,
            host_window: 10.0,
            start_us: 1_767_225_600_000_000,
            load: 0.55,
        }
    }
}

const RESOURCES: [&str; 4] = ["cpu", "disk_read", "network", "disk_write"];
/// What a host has of each resource, per second.
const CAPACITY: [f64; 4] = [8.0, 400e6, 1.25e9, 400e6];
/// What a task acquires of each resource per second at most.
const PEAK_RATE: [f64; 4] = [1.0, 50e6, 30e6, 20e6];
const USERS: [&str; 6] = ["alice", "bob", "carol", "dave", "erin", "mallory"];

/// Writes `cfg.tasks` tasks of plausible, unsimulated data (the module doc
/// says what is real in it), reproducibly from `cfg.seed`.
pub fn fast(cfg: &FastConfig) -> Workload {
    let mut generator = Generator::new(cfg, cfg.tasks);
    for query in 0..generator.queries {
        generator.query(query);
    }
    generator.take(true)
}

/// [`fast`] in `parts` workloads of consecutive queries, each given to
/// `sink` as soon as it is made, so memory holds one part: the parts
/// together are the tables of [`fast`] (host rows split by time, each row
/// in one part).
pub fn fast_parts<E>(
    cfg: &FastConfig,
    parts: usize,
    mut sink: impl FnMut(usize, Workload) -> Result<(), E>,
) -> Result<(), E> {
    let parts = parts.max(1);
    let per_part = cfg.tasks.div_ceil(parts);
    let mut generator = Generator::new(cfg, per_part);
    let queries = generator.queries;
    let per_part_queries = queries.div_ceil(parts);
    for part in 0..parts {
        let first = part * per_part_queries;
        let last = ((part + 1) * per_part_queries).min(queries);
        for query in first..last {
            generator.query(query);
        }
        let workload = generator.take(part + 1 == parts);
        sink(part, workload)?;
    }
    Ok(())
}

/// Writes the tables of [`fast`], query by query. Times are kept in
/// microseconds since time zero (`cfg.start_us`) and shifted when written.
struct Generator<'a> {
    cfg: &'a FastConfig,
    rng: Rng,
    /// Tasks per query, at least 2 (one per stage).
    per_query: usize,
    queries: usize,
    /// Microseconds between two query submissions.
    submit_gap: f64,
    /// Slots as a min-heap of (free at, slot); a slot's host is
    /// `slot / cfg.slots`.
    slots: BinaryHeap<Reverse<(i64, usize)>>,
    task_rows: TableBuilder,
    stage_rows: TableBuilder,
    query_rows: TableBuilder,
    task_windows: TaskWindowColumns,
    /// Tasks written so far.
    tasks_made: usize,
    /// The last end of any query.
    span_end: i64,
    /// Host windows written so far.
    host_windows_made: usize,
    /// Rows to reserve per part.
    capacity: usize,
}

impl<'a> Generator<'a> {
    fn new(cfg: &'a FastConfig, capacity: usize) -> Self {
        let per_query = cfg.tasks_per_query.max(2);
        let queries = cfg.tasks.div_ceil(per_query);
        let slots = (0..cfg.hosts * cfg.slots)
            .map(|i| Reverse((0i64, i)))
            .collect();
        // A new query every time the whole cluster would need for a
        // query's tasks (a task lasts 11 s on average), divided by the load:
        // several queries run at once, and the slot queue stays short
        // however many queries there are (a store twice as large is twice
        // as long, not a queue twice as deep).
        let total_slots = (cfg.hosts * cfg.slots) as f64;
        let submit_gap = per_query as f64 * 11.0 / total_slots / cfg.load * 1e6;
        Generator {
            cfg,
            rng: Rng::new(cfg.seed),
            per_query,
            queries,
            submit_gap,
            slots,
            task_rows: TableBuilder::new(Table::Tasks, capacity),
            stage_rows: TableBuilder::new(Table::Stages, queries * 2),
            query_rows: TableBuilder::new(Table::Queries, queries),
            task_windows: TaskWindowColumns::new(capacity * cfg.windows_per_task * 4),
            tasks_made: 0,
            span_end: 0,
            host_windows_made: 0,
            capacity,
        }
    }

    /// Writes query number `query`: two stages, the second after the first.
    fn query(&mut self, query: usize) {
        let cfg = self.cfg;
        let query_id = format!("q{query:06}");
        let submit = (query as f64 * self.submit_gap) as i64;
        let mut ready = submit;
        let mut query_end = submit;
        let in_query = self.per_query.min(cfg.tasks - self.tasks_made);
        for stage in 0..2 {
            let tasks = if stage == 0 {
                in_query / 2
            } else {
                in_query - in_query / 2
            };
            let stage_end = self.stage(&query_id, stage, tasks, ready);
            ready = stage_end;
            query_end = query_end.max(stage_end);
        }
        self.span_end = self.span_end.max(query_end);
        self.query_rows.row(&[
            ("query_id", Value::S(&query_id)),
            ("user", Value::S(USERS[query % USERS.len()])),
            (
                "pool",
                Value::S(if query.is_multiple_of(3) {
                    "etl"
                } else {
                    "adhoc"
                }),
            ),
            ("submit_time", Value::T(cfg.start_us + submit)),
            ("end_time", Value::T(cfg.start_us + query_end)),
            ("status", Value::S("succeeded")),
        ]);
    }

    /// Writes a stage of `tasks` tasks, ready at `ready`; returns its end
    /// (`ready` when it has no task).
    fn stage(&mut self, query_id: &str, stage: usize, tasks: usize, ready: i64) -> i64 {
        let mut start = i64::MAX;
        let mut end = ready;
        for index in 0..tasks {
            let (launch, finish) = self.task(query_id, stage, index, ready);
            start = start.min(launch);
            end = end.max(finish);
        }
        self.tasks_made += tasks;
        let start_us = self.cfg.start_us;
        let stage_id = stage.to_string();
        let parents = if stage == 1 { "0" } else { "" };
        self.stage_rows.row(&[
            ("query_id", Value::S(query_id)),
            ("stage_id", Value::S(&stage_id)),
            ("parent_ids", Value::S(parents)),
            ("submit_time", Value::T(start_us + ready)),
            ("start_time", Value::T(start_us + start.min(end))),
            ("end_time", Value::T(start_us + end)),
        ]);
        end
    }

    /// Writes a task ready at `ready` on the slot free first, with its
    /// windows; returns its launch and finish.
    fn task(&mut self, query_id: &str, stage: usize, index: usize, ready: i64) -> (i64, i64) {
        let cfg = self.cfg;
        let Reverse((free, slot)) = self.slots.pop().expect("slots");
        let host = slot / cfg.slots;
        let launch = free.max(ready);
        let duration = (self.rng.range(2.0, 20.0) * 1e6) as i64;
        let finish = launch + duration;
        self.slots.push(Reverse((finish, slot)));
        let id = format!("{query_id}-{stage}-{index}");
        let (blocked, acquired) = self.windows(&id, launch, duration);
        let host = format!("host-{host:04}");
        let stage_id = stage.to_string();
        self.task_rows.row(&[
            ("task_id", Value::S(&id)),
            ("query_id", Value::S(query_id)),
            ("stage_id", Value::S(&stage_id)),
            ("host", Value::S(&host)),
            ("ready_time", Value::T(cfg.start_us + ready)),
            ("launch_time", Value::T(cfg.start_us + launch)),
            ("finish_time", Value::T(cfg.start_us + finish)),
            ("status", Value::S("success")),
            ("cpu_seconds", Value::F(acquired[0])),
            ("input_bytes", Value::F(acquired[1])),
            ("shuffle_read_bytes", Value::F(acquired[2])),
            ("shuffle_write_bytes", Value::F(acquired[3])),
            ("cpu_blocked", Value::F(blocked[0])),
            ("disk_read_blocked", Value::F(blocked[1])),
            ("network_blocked", Value::F(blocked[2])),
            ("disk_write_blocked", Value::F(blocked[3])),
        ]);
        (launch, finish)
    }

    /// Writes the windows of a task, its run cut in `cfg.windows_per_task`
    /// equal parts, with random blocked and acquired amounts; returns the
    /// task's totals (blocked, acquired) per resource.
    fn windows(&mut self, task_id: &str, launch: i64, duration: i64) -> ([f64; 4], [f64; 4]) {
        let mut total_blocked = [0.0; 4];
        let mut total_acquired = [0.0; 4];
        let windows = self.cfg.windows_per_task as i64;
        for window in 0..windows {
            let start = launch + duration * window / windows;
            let end = launch + duration * (window + 1) / windows;
            let seconds = (end - start) as f64 / 1e6;
            for r in 0..RESOURCES.len() {
                let blocked = seconds * self.rng.range(0.0, 0.15);
                let acquired = seconds * self.rng.range(0.2, 1.0) * PEAK_RATE[r];
                total_blocked[r] += blocked;
                total_acquired[r] += acquired;
                self.task_windows.push(
                    task_id,
                    self.cfg.start_us + start,
                    self.cfg.start_us + end,
                    r,
                    blocked,
                    acquired,
                );
            }
        }
        (total_blocked, total_acquired)
    }

    /// The rows made since the last call; with `last`, the host rows up to
    /// the end of every query, else those of the windows that have ended by
    /// the latest query start so far.
    fn take(&mut self, last: bool) -> Workload {
        let cfg = self.cfg;
        let queries = self.queries;
        let capacity = self.capacity;
        let step_us = (cfg.host_window * 1e6) as i64;
        let windows_end = if last {
            (self.span_end as f64 / 1e6 / cfg.host_window).ceil() as usize
        } else {
            (self.span_end / step_us.max(1)) as usize
        };
        let from = self.host_windows_made;
        self.host_windows_made = windows_end.max(from);
        let taken = |b: &mut TableBuilder, t: Table, n: usize| {
            std::mem::replace(b, TableBuilder::new(t, n)).finish()
        };
        Workload {
            queries: taken(&mut self.query_rows, Table::Queries, queries),
            stages: taken(&mut self.stage_rows, Table::Stages, queries * 2),
            tasks: taken(&mut self.task_rows, Table::Tasks, capacity),
            task_windows: std::mem::replace(
                &mut self.task_windows,
                TaskWindowColumns::new(capacity * cfg.windows_per_task * 4),
            )
            .finish(),
            host_windows: host_windows(cfg, from, self.host_windows_made),
            record_lineage: None,
            partition_latency: None,
            victim: "q000000".into(),
            culprit: String::new(),
            expensive_input: String::new(),
        }
    }
}

/// The capacity of every resource of every host, in windows number `from`
/// to `to` (excluded) of `cfg.host_window` seconds (no use: it is not
/// simulated).
fn host_windows(cfg: &FastConfig, from: usize, to: usize) -> RecordBatch {
    let epoch_us = |t: f64| cfg.start_us + (t * 1e6) as i64;
    let mut rows = TableBuilder::new(Table::HostWindows, 1024);
    let step = cfg.host_window;
    for host in 0..cfg.hosts {
        let host = format!("host-{host:04}");
        for window in from..to {
            for r in 0..RESOURCES.len() {
                rows.row(&[
                    ("host", Value::S(&host)),
                    ("window_start", Value::T(epoch_us(window as f64 * step))),
                    ("window_end", Value::T(epoch_us((window + 1) as f64 * step))),
                    ("resource", Value::S(RESOURCES[r])),
                    ("capacity", Value::F(CAPACITY[r])),
                ]);
            }
        }
    }
    rows.finish()
}

/// The `task_windows` table built column by column: at a million tasks, a
/// row-by-row [`TableBuilder`] (a column lookup per value) is too slow.
struct TaskWindowColumns {
    /// Rows pushed.
    rows: usize,
    task_id: StringBuilder,
    start: TimestampMicrosecondBuilder,
    end: TimestampMicrosecondBuilder,
    resource: StringBuilder,
    blocked: Float64Builder,
    acquired: Float64Builder,
    gc: Float64Builder,
}

impl TaskWindowColumns {
    /// Columns with room for `rows` rows.
    fn new(rows: usize) -> Self {
        TaskWindowColumns {
            rows: 0,
            task_id: StringBuilder::with_capacity(rows, rows * 8),
            start: TimestampMicrosecondBuilder::with_capacity(rows),
            end: TimestampMicrosecondBuilder::with_capacity(rows),
            resource: StringBuilder::with_capacity(rows, rows * 6),
            blocked: Float64Builder::with_capacity(rows),
            acquired: Float64Builder::with_capacity(rows),
            gc: Float64Builder::with_capacity(rows),
        }
    }

    /// One row; GC time (a tenth of the blocked time) is on the CPU row only.
    fn push(
        &mut self,
        task_id: &str,
        start: i64,
        end: i64,
        resource: usize,
        blocked: f64,
        acquired: f64,
    ) {
        self.rows += 1;
        self.task_id.append_value(task_id);
        self.start.append_value(start);
        self.end.append_value(end);
        self.resource.append_value(RESOURCES[resource]);
        self.blocked.append_value(blocked);
        self.acquired.append_value(acquired);
        if resource == 0 {
            self.gc.append_value(blocked * 0.1);
        } else {
            self.gc.append_null();
        }
    }

    fn finish(mut self) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.task_id.finish()),
            Arc::new(self.start.finish().with_timezone("UTC")),
            Arc::new(self.end.finish().with_timezone("UTC")),
            Arc::new(self.resource.finish()),
            arrow::array::new_null_array(&arrow::datatypes::DataType::Utf8, self.rows),
            Arc::new(self.blocked.finish()),
            Arc::new(self.acquired.finish()),
            Arc::new(self.gc.finish()),
        ];
        RecordBatch::try_new(Table::TaskWindows.schema(), columns).expect("task_windows schema")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let w = fast(&FastConfig {
            tasks: 1000,
            hosts: 10,
            tasks_per_query: 100,
            ..FastConfig::default()
        });
        assert_eq!(w.tasks.num_rows(), 1000);
        assert_eq!(w.task_windows.num_rows(), 12_000);
        assert_eq!(w.queries.num_rows(), 10);
        assert_eq!(w.stages.num_rows(), 20);
    }

    #[test]
    fn slot_waits_do_not_grow_with_the_data() {
        // The mean slot wait of the last tenth of the tasks, for two sizes:
        // a stable queue keeps it short and about the same.
        let mean_wait = |tasks: usize| -> f64 {
            // The default cluster (500 hosts, 2,000 tasks a query).
            let w = fast(&FastConfig {
                tasks,
                ..FastConfig::default()
            });
            let t = |c: &str| {
                w.tasks
                    .column_by_name(c)
                    .unwrap()
                    .as_any()
                    .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
                    .unwrap()
                    .clone()
            };
            let (ready, launch) = (t("ready_time"), t("launch_time"));
            let from = tasks - tasks / 10;
            (from..tasks)
                .map(|i| (launch.value(i) - ready.value(i)) as f64 / 1e6)
                .sum::<f64>()
                / (tasks - from) as f64
        };
        let (small, large) = (mean_wait(20_000), mean_wait(200_000));
        assert!(
            small < 60.0 && large < 60.0,
            "mean waits {small} s, {large} s"
        );
        assert!(large < small * 2.0 + 5.0, "mean waits {small} s, {large} s");
    }

    #[test]
    fn parts_are_the_whole_split() {
        let cfg = FastConfig {
            tasks: 3000,
            hosts: 10,
            tasks_per_query: 100,
            ..FastConfig::default()
        };
        let whole = fast(&cfg);
        let mut parts = Vec::new();
        fast_parts(&cfg, 4, |_, w| {
            parts.push(w);
            Ok::<_, ()>(())
        })
        .unwrap();
        assert_eq!(parts.len(), 4);
        let rows = |f: fn(&Workload) -> &RecordBatch| -> (usize, usize) {
            (
                f(&whole).num_rows(),
                parts.iter().map(|p| f(p).num_rows()).sum(),
            )
        };
        for (a, b) in [
            rows(|w| &w.tasks),
            rows(|w| &w.task_windows),
            rows(|w| &w.queries),
            rows(|w| &w.stages),
            rows(|w| &w.host_windows),
        ] {
            assert_eq!(a, b);
        }
        // The same rows: the tasks of the parts, in order, are the whole's.
        let joined =
            arrow::compute::concat_batches(&whole.tasks.schema(), parts.iter().map(|p| &p.tasks))
                .unwrap();
        assert_eq!(joined, whole.tasks);
    }
}
