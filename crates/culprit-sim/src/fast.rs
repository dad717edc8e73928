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
        }
    }
}

const RES: [&str; 4] = ["cpu", "disk_read", "network", "disk_write"];
const CAPS: [f64; 4] = [8.0, 400e6, 1.25e9, 400e6];

pub fn fast(cfg: &FastConfig) -> Workload {
    let mut rng = Rng::new(cfg.seed);
    let per_query = cfg.tasks_per_query.max(2);
    let n_queries = cfg.tasks.div_ceil(per_query);
    let us = |t: f64| cfg.start_us + (t * 1e6) as i64;

    // Slots as a min-heap of (free at, host, slot), in microseconds.
    let mut heap: BinaryHeap<Reverse<(i64, usize)>> = (0..cfg.hosts * cfg.slots)
        .map(|i| Reverse((0i64, i)))
        .collect();
    // About four queries at once: a new query every quarter of a query's span.
    let total_slots = (cfg.hosts * cfg.slots) as f64;
    let gap = per_query as f64 * 11.0 / total_slots / 4.0 * 1e6;

    let rows = cfg.tasks * cfg.windows_per_task * 4;
    let mut tid = StringBuilder::with_capacity(rows, rows * 8);
    let mut ws = TimestampMicrosecondBuilder::with_capacity(rows);
    let mut we = TimestampMicrosecondBuilder::with_capacity(rows);
    let mut res = StringBuilder::with_capacity(rows, rows * 6);
    let mut blocked = Float64Builder::with_capacity(rows);
    let mut acquired = Float64Builder::with_capacity(rows);
    let mut gc = Float64Builder::with_capacity(rows);

    let mut tb = TableBuilder::new(Table::Tasks, cfg.tasks);
    let mut sb = TableBuilder::new(Table::Stages, n_queries * 2);
    let mut qb = TableBuilder::new(Table::Queries, n_queries);
    let mut span_end = 0i64;
    let mut made = 0usize;
    let users = ["alice", "bob", "carol", "dave", "erin", "mallory"];
    for q in 0..n_queries {
        let qid = format!("q{q:06}");
        let submit = (q as f64 * gap) as i64;
        let mut ready = submit;
        let mut q_end = submit;
        let in_query = per_query.min(cfg.tasks - made);
        for stage in 0..2 {
            let n = if stage == 0 {
                in_query / 2
            } else {
                in_query - in_query / 2
            };
            let mut s_start = i64::MAX;
            let mut s_end = ready;
            for k in 0..n {
                let Reverse((free, slot)) = heap.pop().expect("slots");
                let host = slot / cfg.slots;
                let launch = free.max(ready);
                let dur = (rng.range(2.0, 20.0) * 1e6) as i64;
                let finish = launch + dur;
                heap.push(Reverse((finish, slot)));
                s_start = s_start.min(launch);
                s_end = s_end.max(finish);
                let id = format!("{qid}-{stage}-{k}");
                let mut tot_b = [0.0; 4];
                let mut tot_a = [0.0; 4];
                let w = cfg.windows_per_task as i64;
                for j in 0..w {
                    let a = launch + dur * j / w;
                    let b = launch + dur * (j + 1) / w;
                    let dt = (b - a) as f64 / 1e6;
                    for r in 0..4 {
                        let bl = dt * rng.range(0.0, 0.15);
                        let ac = dt * rng.range(0.2, 1.0) * [1.0, 50e6, 30e6, 20e6][r];
                        tot_b[r] += bl;
                        tot_a[r] += ac;
                        tid.append_value(&id);
                        ws.append_value(cfg.start_us + a);
                        we.append_value(cfg.start_us + b);
                        res.append_value(RES[r]);
                        blocked.append_value(bl);
                        acquired.append_value(ac);
                        if r == 0 {
                            gc.append_value(bl * 0.1);
                        } else {
                            gc.append_null();
                        }
                    }
                }
                let host_s = format!("host-{host:04}");
                let stage_s = stage.to_string();
                tb.row(&[
                    ("task_id", Value::S(&id)),
                    ("query_id", Value::S(&qid)),
                    ("stage_id", Value::S(&stage_s)),
                    ("host", Value::S(&host_s)),
                    ("ready_time", Value::T(cfg.start_us + ready)),
                    ("launch_time", Value::T(cfg.start_us + launch)),
                    ("finish_time", Value::T(cfg.start_us + finish)),
                    ("status", Value::S("success")),
                    ("cpu_seconds", Value::F(tot_a[0])),
                    ("input_bytes", Value::F(tot_a[1])),
                    ("shuffle_read_bytes", Value::F(tot_a[2])),
                    ("shuffle_write_bytes", Value::F(tot_a[3])),
                    ("cpu_blocked", Value::F(tot_b[0])),
                    ("disk_read_blocked", Value::F(tot_b[1])),
                    ("network_blocked", Value::F(tot_b[2])),
                    ("disk_write_blocked", Value::F(tot_b[3])),
                ]);
            }
            made += n;
            let sid = stage.to_string();
            let parents = if stage == 1 { "0" } else { "" };
            sb.row(&[
                ("query_id", Value::S(&qid)),
                ("stage_id", Value::S(&sid)),
                ("parent_ids", Value::S(parents)),
                ("submit_time", Value::T(cfg.start_us + ready)),
                ("start_time", Value::T(cfg.start_us + s_start.min(s_end))),
                ("end_time", Value::T(cfg.start_us + s_end)),
            ]);
            ready = s_end;
            q_end = q_end.max(s_end);
        }
        span_end = span_end.max(q_end);
        qb.row(&[
            ("query_id", Value::S(&qid)),
            ("user", Value::S(users[q % users.len()])),
            ("pool", Value::S(if q % 3 == 0 { "etl" } else { "adhoc" })),
            ("submit_time", Value::T(cfg.start_us + submit)),
            ("end_time", Value::T(cfg.start_us + q_end)),
            ("status", Value::S("succeeded")),
        ]);
    }

    let mut hb = TableBuilder::new(Table::HostWindows, 1024);
    let step = cfg.host_window;
    let n_win = ((span_end as f64 / 1e6) / step).ceil() as usize;
    for h in 0..cfg.hosts {
        let host = format!("host-{h:04}");
        for w in 0..n_win {
            for r in 0..4 {
                hb.row(&[
                    ("host", Value::S(&host)),
                    ("window_start", Value::T(us(w as f64 * step))),
                    ("window_end", Value::T(us((w + 1) as f64 * step))),
                    ("resource", Value::S(RES[r])),
                    ("capacity", Value::F(CAPS[r])),
                ]);
            }
        }
    }

    let cols: Vec<ArrayRef> = vec![
        Arc::new(tid.finish()),
        Arc::new(ws.finish().with_timezone("UTC")),
        Arc::new(we.finish().with_timezone("UTC")),
        Arc::new(res.finish()),
        arrow::array::new_null_array(&arrow::datatypes::DataType::Utf8, rows),
        Arc::new(blocked.finish()),
        Arc::new(acquired.finish()),
        Arc::new(gc.finish()),
    ];
    let task_windows =
        RecordBatch::try_new(Table::TaskWindows.schema(), cols).expect("task_windows schema");
    Workload {
        queries: qb.finish(),
        stages: sb.finish(),
        tasks: tb.finish(),
        task_windows,
        host_windows: hb.finish(),
        victim: "q000000".into(),
        culprit: String::new(),
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
}
