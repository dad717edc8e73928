//! The slowdown of a victim query (method.md section 3; 000 eq. 1-4):
//! `S = (RATP - RATP*) / RATP*` with `RATP = dt / RA` (no split of the
//! window between blocked and computed time is known per resource) and
//! `RATP* = 1 / capacity`, i.e. `S = capacity * dt / RA - 1`.
//!
//! Per task, resource and elementary window `k` (the task's rows for the
//! resource summed, any detail, and the host's capacity constant in `k`),
//! `S_k` is weighted by `dt_k`, like beta (section 4), so that splitting a
//! window changes nothing; the query's slowdown is
//! `sum_k dt_k * S_k / sum_k dt_k` over the windows of its explained tasks
//! where capacity is known and the task acquired something (`RA = 0` has
//! no finite RATP, section 3). `None` when there is no such window.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::model::{Dataset, HostRow, Micros, WindowRow, N_RES};
use super::schedule::BucketSource;
use super::sweep::clip;
use super::victims::Victims;
use crate::Resource;

/// The capacity of one (host, resource) over time: `caps[i]` holds on
/// `[times[i], times[i + 1])`. Overlapping rows count once: the largest
/// capacity of the rows active then (docs/method.md).
struct Capacity {
    times: Vec<Micros>,
    caps: Vec<Option<f64>>,
}

impl Capacity {
    fn of(rows: &[HostRow]) -> Capacity {
        // (time, is_start, capacity bits): non-negative f64s order as their bits.
        let mut events: Vec<(Micros, bool, u64)> = Vec::new();
        for h in rows {
            if let Some(c) = h.capacity.filter(|c| c.is_finite() && *c > 0.0) {
                if h.start < h.end {
                    events.push((h.start, true, c.to_bits()));
                    events.push((h.end, false, c.to_bits()));
                }
            }
        }
        events.sort_unstable();
        let mut active: BTreeMap<u64, usize> = BTreeMap::new();
        let (mut times, mut caps) = (Vec::new(), Vec::new());
        for (i, &(t, start, c)) in events.iter().enumerate() {
            if start {
                *active.entry(c).or_insert(0) += 1;
            } else if let Some(n) = active.get_mut(&c) {
                *n -= 1;
                if *n == 0 {
                    active.remove(&c);
                }
            }
            if events.get(i + 1).is_none_or(|e| e.0 != t) {
                times.push(t);
                caps.push(active.keys().next_back().map(|&b| f64::from_bits(b)));
            }
        }
        Capacity { times, caps }
    }

    /// Calls `f(dt seconds, capacity)` for each piece of `[s, e)` with a
    /// capacity.
    fn pieces(&self, s: Micros, e: Micros, mut f: impl FnMut(f64, f64)) {
        let first = self.times.partition_point(|&t| t <= s).saturating_sub(1);
        for i in first..self.times.len().saturating_sub(1) {
            let (a, b) = (self.times[i].max(s), self.times[i + 1].min(e));
            if a >= e {
                break;
            }
            if let (true, Some(c)) = (a < b, self.caps[i]) {
                f((b - a) as f64 / 1e6, c);
            }
        }
    }
}

/// A clipped row: start, end, units acquired per second.
type Piece = (Micros, Micros, f64);

/// Accumulates the explained tasks' rows, then gives each victim query's
/// slowdown. Rows may come in any order (from memory or a store).
pub struct SlowdownAcc<'a> {
    ds: &'a Dataset,
    victims: &'a Victims,
    window: (Micros, Micros),
    /// Per (task, group): its rows, clipped to the window.
    rows: FxHashMap<(u32, usize), Vec<Piece>>,
    /// Tasks with at least one window row (the others are known by totals).
    seen: Vec<bool>,
}

impl<'a> SlowdownAcc<'a> {
    pub fn new(ds: &'a Dataset, victims: &'a Victims, window: (Micros, Micros)) -> Self {
        SlowdownAcc {
            ds,
            victims,
            window,
            rows: FxHashMap::default(),
            seen: vec![false; ds.tasks.len()],
        }
    }

    /// Adds one window row of group `group` (as in [`Dataset::group`]).
    pub fn add(&mut self, group: usize, row: &WindowRow) {
        let t = row.task as usize;
        if t >= self.seen.len() {
            return;
        }
        self.seen[t] = true;
        if !self.victims.task(row.task, row.stage)
            || Resource::ALL[group % N_RES] == Resource::Slots
        {
            return;
        }
        let len = (row.end - row.start) as f64;
        let Some((s, e)) = clip(row.start, row.end, self.window.0, self.window.1) else {
            return;
        };
        if len > 0.0 && row.acquired.is_finite() {
            // Units per second: rows are uniform (section 2).
            let rate = row.acquired / len * 1e6;
            self.rows
                .entry((row.task, group))
                .or_default()
                .push((s, e, rate));
        }
    }

    /// Each victim query's slowdown (absent: no window with capacity known).
    pub fn finish(mut self) -> FxHashMap<u32, f64> {
        let ds = self.ds;
        for (t, task) in ds.tasks.iter().enumerate() {
            if !self.seen[t] && self.victims.task(t as u32, task.stage) {
                for (r, row) in ds.synthesize(t as u32) {
                    self.add(Dataset::group(task.host, r), &row);
                }
            }
        }
        let mut caps: FxHashMap<usize, Capacity> = FxHashMap::default();
        // Per query: (sum dt * S, sum dt).
        let mut acc: FxHashMap<u32, (f64, f64)> = FxHashMap::default();
        for ((task, group), rows) in self.rows {
            let cap = caps
                .entry(group)
                .or_insert_with(|| Capacity::of(&ds.host_rows[group]));
            if cap.times.is_empty() {
                continue;
            }
            let q = ds.stage_query(ds.tasks[task as usize].stage);
            // The task's units per second between events, all its rows
            // summed (any detail, overlapping rows too).
            let mut events: Vec<(Micros, i8, f64)> = rows
                .iter()
                .flat_map(|r| [(r.0, 1, r.2), (r.1, -1, r.2)])
                .collect();
            events.sort_unstable_by_key(|e| e.0);
            let x = acc.entry(q).or_insert((0.0, 0.0));
            let (mut rate, mut open, mut prev) = (0.0f64, 0i64, Micros::MIN);
            for (t, d, r) in events {
                if t > prev && open > 0 && rate > 0.0 {
                    // RATP = 1 / rate, RATP* = 1 / capacity.
                    cap.pieces(prev, t, |dt, c| {
                        x.0 += dt * (c / rate - 1.0);
                        x.1 += dt;
                    });
                }
                prev = t;
                open += d as i64;
                // Exactly zero when no row is open (no drift).
                rate = if open == 0 { 0.0 } else { rate + d as f64 * r };
            }
        }
        acc.into_iter()
            .filter(|(_, (_, dt))| *dt > 0.0)
            .map(|(q, (s, dt))| (q, s / dt))
            .collect()
    }
}

/// The slowdown of each victim query over the window rows in memory.
pub fn slowdowns(ds: &Dataset, victims: &Victims, window: (Micros, Micros)) -> FxHashMap<u32, f64> {
    let mut acc = SlowdownAcc::new(ds, victims, window);
    for (g, rows) in ds.windows.iter().enumerate() {
        for row in rows {
            acc.add(g, row);
        }
    }
    acc.finish()
}

/// [`slowdowns`] over window rows read from `source` (a store too large
/// for memory): the files without a bucket and the buckets of the hosts
/// where an explained stage ran (every bucket when a task was stored with
/// two hosts).
pub fn slowdowns_streamed<S: BucketSource>(
    ds: &Dataset,
    victims: &Victims,
    window: (Micros, Micros),
    source: &S,
) -> Result<FxHashMap<u32, f64>, S::Error> {
    // On a thread of its own, the rows in the same order: a source may
    // block on its reads, which the caller's thread (a Tokio worker's)
    // cannot.
    std::thread::scope(|scope| {
        scope
            .spawn(|| slowdowns_read(ds, victims, window, source))
            .join()
    })
    .unwrap_or_else(|_| {
        Err(crate::MethodError::Internal("the slowdowns' read panicked".into()).into())
    })
}

/// The reads and sums of [`slowdowns_streamed`], on the calling thread.
fn slowdowns_read<S: BucketSource>(
    ds: &Dataset,
    victims: &Victims,
    window: (Micros, Micros),
    source: &S,
) -> Result<FxHashMap<u32, f64>, S::Error> {
    let mut acc = SlowdownAcc::new(ds, victims, window);
    let mut sink = |_task: u32, group: usize, row: WindowRow| acc.add(group, &row);
    for i in 0..source.unbucketed_files() {
        source.read_unbucketed(i, &mut sink)?;
    }
    let mut read = vec![ds.host_conflicts > 0; source.buckets()];
    for t in &ds.tasks {
        if victims.stages[t.stage as usize] {
            if let Some(b) = read.get_mut(source.bucket_of(t.host)) {
                *b = true;
            }
        }
    }
    for (b, _) in read.iter().enumerate().filter(|(_, r)| **r) {
        source.read_bucket(b, &mut sink)?;
    }
    Ok(acc.finish())
}
