//! The streaming sweep of one (host, resource): elementary windows and the
//! conserving attribution of victim blocked time (method.md sections 2, 5).
//!
//! Rows are turned into start/end events and sorted; between two consecutive
//! event times every active row is uniform (section 2), so the interval is an
//! elementary window. State is the set of rows active at once; work is linear
//! in the rows (after sorting) and never in the number of task pairs: per
//! window the victim rows of one stage are folded into a single factor that
//! multiplies each consumer stage's acquired units.

use rustc_hash::FxHashMap;

use super::model::{Dataset, HostRow, Micros, WindowRow};
use crate::Resource;

/// Culprit codes beside stage ids.
pub const GC: u32 = u32::MAX;
pub const EXTERNAL: u32 = u32::MAX - 1;
pub const UNKNOWN: u32 = u32::MAX - 2;

/// How blocked seconds are split (method.md section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attribution {
    /// The conserving per-window split (the default).
    Window,
    /// The paper's aggregate form, `BC4 = BC3 * beta_cs / sum beta` (000 eq. 9-10).
    Paper,
}

/// Blame of one victim stage, detail and culprit, in seconds.
pub type Cells = FxHashMap<(u32, u32, u32), f64>;

const EPS: f64 = 1e-12;

/// Clips `[s, e)` to `[from, to)`; `None` when nothing is left.
#[inline]
pub fn clip(s: Micros, e: Micros, from: Micros, to: Micros) -> Option<(Micros, Micros)> {
    let (s2, e2) = (s.max(from), e.min(to));
    (s2 < e2).then_some((s2, e2))
}

struct Rates {
    stage: u32,
    detail: u32,
    victim: bool,
    /// Per microsecond.
    blocked: f64,
    acquired: f64,
    gc: f64,
    /// The task's run time, seconds (for the paper's beta).
    run: f64,
}

/// Attributes the blocked time of victim rows on one (host, resource).
#[allow(clippy::too_many_arguments)]
pub fn sweep_group(
    ds: &Dataset,
    resource: Resource,
    rows: &[&[WindowRow]],
    host_rows: &[HostRow],
    victim: &[bool],
    window: (Micros, Micros),
    mode: Attribution,
) -> Cells {
    let (from, to) = window;
    let mut rates: Vec<Rates> = Vec::new();
    let mut events: Vec<(Micros, u32)> = Vec::new(); // (time, index << 1 | is_end)
    for row in rows.iter().flat_map(|r| r.iter()) {
        let len = (row.end - row.start) as f64;
        let Some((s, e)) = clip(row.start, row.end, from, to) else {
            continue;
        };
        if len <= 0.0 {
            continue;
        }
        let t = &ds.tasks[row.task as usize];
        let i = rates.len() as u32;
        rates.push(Rates {
            stage: t.stage,
            detail: row.detail,
            victim: victim[t.stage as usize],
            blocked: row.blocked / len,
            acquired: row.acquired / len,
            gc: row.gc / len,
            run: ((t.finish - t.launch) as f64 / 1e6).max(1e-6),
        });
        events.push((s, i << 1));
        events.push((e, (i << 1) | 1));
    }
    if !rates
        .iter()
        .any(|r| r.victim && (r.blocked > 0.0 || r.gc > 0.0))
    {
        return Cells::default();
    }
    // Host rows: capacity (units/s) and measured use (units over the row).
    let base = rates.len() as u32;
    let mut host_rates: Vec<(Option<f64>, Option<f64>)> = Vec::new();
    for h in host_rows {
        let len = (h.end - h.start) as f64;
        let Some((s, e)) = clip(h.start, h.end, from, to) else {
            continue;
        };
        if len <= 0.0 {
            continue;
        }
        let i = base + host_rates.len() as u32;
        host_rates.push((h.capacity.map(|c| c / 1e6), h.used.map(|u| u / len)));
        events.push((s, i << 1));
        events.push((e, (i << 1) | 1));
    }
    events.sort_unstable();

    let mut cells = Cells::default();
    let mut beta: Cells = Cells::default();
    let mut paper_total: FxHashMap<(u32, u32), f64> = FxHashMap::default();
    let mut active: Vec<u32> = Vec::new();
    let mut pos: Vec<u32> = vec![u32::MAX; rates.len() + host_rates.len()];
    let mut active_hosts: Vec<u32> = Vec::new();
    let mut stage_sums: Vec<(u32, f64)> = Vec::new();
    let mut factors: Vec<((u32, u32), f64, f64)> = Vec::new();

    let mut k = 0;
    while k < events.len() {
        let t0 = events[k].0;
        while k < events.len() && events[k].0 == t0 {
            let (idx, end) = (events[k].1 >> 1, events[k].1 & 1 == 1);
            let list = if idx < base {
                &mut active
            } else {
                &mut active_hosts
            };
            if end {
                let p = pos[idx as usize] as usize;
                let last = *list.last().expect("active");
                list.swap_remove(p);
                if p < list.len() {
                    pos[last as usize] = p as u32;
                }
                pos[idx as usize] = u32::MAX;
            } else {
                pos[idx as usize] = list.len() as u32;
                list.push(idx);
            }
            k += 1;
        }
        if k >= events.len() || active.is_empty() {
            continue;
        }
        let dt = (events[k].0 - t0) as f64;
        if !active.iter().any(|&i| rates[i as usize].victim) {
            continue;
        }

        // Consumers in this window.
        stage_sums.clear();
        let mut total = 0.0;
        for &i in &active {
            let r = &rates[i as usize];
            let a = r.acquired * dt;
            total += a;
            match stage_sums.iter_mut().find(|(s, _)| *s == r.stage) {
                Some((_, x)) => *x += a,
                None => stage_sums.push((r.stage, a)),
            }
        }
        let (mut cap, mut used) = (None::<f64>, None::<f64>);
        for &i in &active_hosts {
            let (c, u) = host_rates[(i - base) as usize];
            if let Some(c) = c {
                *cap.get_or_insert(0.0) += c * dt;
            }
            if let Some(u) = u {
                *used.get_or_insert(0.0) += u * dt;
            }
        }
        let external = used.map_or(0.0, |u| (u - total).max(0.0));
        let unknown = cap.map_or(0.0, |c| (c - used.unwrap_or(0.0).max(total)).max(0.0));

        factors.clear();
        for &i in &active {
            let r = &rates[i as usize];
            if !r.victim {
                continue;
            }
            let mut wt = r.blocked * dt;
            let g = r.gc * dt;
            let mut gc_part = 0.0;
            if resource == Resource::Cpu && g > 0.0 {
                // A GC pause is blocked time; it goes to `gc` whole, first.
                wt = wt.max(g);
                gc_part = g;
                *cells.entry((r.stage, r.detail, GC)).or_insert(0.0) += g;
            }
            let rest = wt - gc_part;
            if rest <= 0.0 {
                continue;
            }
            let a = r.acquired * dt;
            let key = (r.stage, r.detail);
            match mode {
                Attribution::Window => {
                    let d = total - a + external + unknown;
                    if d <= EPS {
                        *cells.entry((r.stage, r.detail, UNKNOWN)).or_insert(0.0) += rest;
                        continue;
                    }
                    let f = rest / d;
                    match factors.iter_mut().find(|(k, _, _)| *k == key) {
                        Some((_, x, c)) => {
                            *x += f;
                            *c -= f * a;
                        }
                        None => factors.push((key, f, -f * a)),
                    }
                    if external > 0.0 {
                        *cells.entry((r.stage, r.detail, EXTERNAL)).or_insert(0.0) += f * external;
                    }
                    if unknown > 0.0 {
                        *cells.entry((r.stage, r.detail, UNKNOWN)).or_insert(0.0) += f * unknown;
                    }
                }
                Attribution::Paper => {
                    if a <= EPS {
                        // No beta where the victim acquired nothing.
                        *cells.entry((r.stage, r.detail, UNKNOWN)).or_insert(0.0) += rest;
                        continue;
                    }
                    *paper_total.entry(key).or_insert(0.0) += rest;
                    let h = rest / (a * r.run);
                    match factors.iter_mut().find(|(k, _, _)| *k == key) {
                        Some((_, x, c)) => {
                            *x += h;
                            *c -= h * a;
                        }
                        None => factors.push((key, h, -h * a)),
                    }
                    if external > 0.0 {
                        *beta.entry((r.stage, r.detail, EXTERNAL)).or_insert(0.0) += h * external;
                    }
                    if unknown > 0.0 {
                        *beta.entry((r.stage, r.detail, UNKNOWN)).or_insert(0.0) += h * unknown;
                    }
                }
            }
        }
        let target = match mode {
            Attribution::Window => &mut cells,
            Attribution::Paper => &mut beta,
        };
        for &((vs, detail), f, corr) in &factors {
            for &(cs, a) in &stage_sums {
                let mut v = f * a;
                if cs == vs {
                    v += corr;
                }
                if v > EPS * f.max(1.0) {
                    *target.entry((vs, detail, cs)).or_insert(0.0) += v;
                }
            }
        }
    }

    if mode == Attribution::Paper {
        // BC4 = BC3 * beta_cs / sum beta, per level-3 node.
        let mut sums: FxHashMap<(u32, u32), f64> = FxHashMap::default();
        for (&(vs, d, _), &b) in &beta {
            *sums.entry((vs, d)).or_insert(0.0) += b;
        }
        for (&(vs, d, c), &b) in &beta {
            let s = sums[&(vs, d)];
            if s > 0.0 {
                *cells.entry((vs, d, c)).or_insert(0.0) += paper_total[&(vs, d)] * b / s;
            }
        }
        for (&(vs, d), &bc3) in &paper_total {
            if sums.get(&(vs, d)).is_none_or(|s| *s <= 0.0) {
                *cells.entry((vs, d, UNKNOWN)).or_insert(0.0) += bc3;
            }
        }
    }
    cells.retain(|_, v| *v > EPS);
    cells
}

/// The cluster-wide slot sweep: a task's wait from `ready_time` to
/// `launch_time` is split over the stages holding slots by slot-seconds held;
/// free capacity (when `slots` host rows give it) goes to `unknown`.
pub fn sweep_slots(
    ds: &Dataset,
    slot_rows: &[&[HostRow]],
    victim: &[bool],
    window: (Micros, Micros),
    mode: Attribution,
) -> Cells {
    let (from, to) = window;
    // Events: (time, kind, stage or row): kind 0 hold, 1 wait, 2 capacity; +1/-1.
    let mut events: Vec<(Micros, i8, u8, u32)> = Vec::new();
    let mut any_wait = false;
    for t in &ds.tasks {
        if let Some((s, e)) = clip(t.launch, t.finish, from, to) {
            events.push((s, 1, 0, t.stage));
            events.push((e, -1, 0, t.stage));
        }
        if let Some(ready) = t.ready.filter(|_| victim[t.stage as usize]) {
            if let Some((s, e)) = clip(ready, t.launch, from, to) {
                any_wait = true;
                events.push((s, 1, 1, t.stage));
                events.push((e, -1, 1, t.stage));
            }
        }
    }
    let mut cells = Cells::default();
    if !any_wait {
        return cells;
    }
    let caps: Vec<f64> = slot_rows
        .iter()
        .flat_map(|r| r.iter())
        .map(|h| h.capacity.unwrap_or(0.0))
        .collect();
    for (i, h) in slot_rows.iter().flat_map(|r| r.iter()).enumerate() {
        if let (Some((s, e)), Some(_)) = (clip(h.start, h.end, from, to), h.capacity) {
            events.push((s, 1, 2, i as u32));
            events.push((e, -1, 2, i as u32));
        }
    }
    events.sort_unstable_by_key(|e| (e.0, e.1));

    let mut held: FxHashMap<u32, i64> = FxHashMap::default();
    let mut waiting: FxHashMap<u32, i64> = FxHashMap::default();
    let mut capacity = 0.0f64;
    let mut cap_rows = 0i64;
    let mut k = 0;
    while k < events.len() {
        let t0 = events[k].0;
        while k < events.len() && events[k].0 == t0 {
            let (_, d, kind, id) = events[k];
            match kind {
                0 | 1 => {
                    let m = if kind == 0 { &mut held } else { &mut waiting };
                    let c = m.entry(id).or_insert(0);
                    *c += d as i64;
                    if *c == 0 {
                        m.remove(&id);
                    }
                }
                _ => {
                    capacity += d as f64 * caps[id as usize];
                    cap_rows += d as i64;
                }
            }
            k += 1;
        }
        if k >= events.len() || waiting.is_empty() {
            continue;
        }
        let dt = (events[k].0 - t0) as f64 / 1e6;
        let total_held: i64 = held.values().sum();
        let held_s = total_held as f64 * dt;
        let unknown = if cap_rows > 0 {
            ((capacity - total_held as f64) * dt).max(0.0)
        } else {
            0.0
        };
        for (&vs, &w) in &waiting {
            let r = w as f64 * dt;
            let d = held_s + unknown;
            if mode == Attribution::Paper || d <= EPS {
                *cells.entry((vs, 0, UNKNOWN)).or_insert(0.0) += r;
                continue;
            }
            let f = r / d;
            for (&cs, &n) in &held {
                *cells.entry((vs, 0, cs)).or_insert(0.0) += f * n as f64 * dt;
            }
            if unknown > 0.0 {
                *cells.entry((vs, 0, UNKNOWN)).or_insert(0.0) += f * unknown;
            }
        }
    }
    cells.retain(|_, v| *v > EPS);
    cells
}
