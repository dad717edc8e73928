//! The overlap baselines the papers compare against (000 §6.1): naive
//! (query-level overlap) and deep (summed task-level overlap on the same
//! host). Overlap is not contention; culprit reports them beside the blame so
//! a user sees where they would have misled.

use rustc_hash::FxHashMap;

use super::model::{Dataset, Micros};
use super::series::Windows;
use super::sweep::clip;

/// Seconds of overlap per (victim query, other query).
pub type Overlaps = FxHashMap<(u32, u32), f64>;

/// Query-level overlap: the intersection of the two queries' spans (first
/// launch to last finish), clipped to the window.
pub fn naive(ds: &Dataset, victims: &[u32], win: (Micros, Micros)) -> Overlaps {
    naive_series(ds, victims, &Windows::one(win))
        .pop()
        .unwrap_or_default()
}

/// [`naive`] in each of `windows`; the queries' spans are found once.
pub fn naive_series(ds: &Dataset, victims: &[u32], windows: &Windows) -> Vec<Overlaps> {
    let mut span: Vec<Option<(Micros, Micros)>> = vec![None; ds.queries.len()];
    for t in &ds.tasks {
        let q = ds.stage_query(t.stage) as usize;
        span[q] = Some(match span[q] {
            Some((s, e)) => (s.min(t.launch), e.max(t.finish)),
            None => (t.launch, t.finish),
        });
    }
    // A focused dataset's queries, by their whole span.
    for (&q, &sp) in &ds.query_spans {
        if let Some(s) = span.get_mut(q as usize) {
            *s = Some(sp);
        }
    }
    let mut out = vec![Overlaps::default(); windows.len()];
    for &v in victims {
        let Some((vs, ve)) = span[v as usize] else {
            continue;
        };
        for (w, vs, ve) in windows.pieces(vs, ve) {
            for (q, sp) in span.iter().enumerate() {
                if let Some((s, e)) = sp.and_then(|(s, e)| clip(s, e, vs, ve)) {
                    out[w as usize].insert((v, q as u32), (e - s) as f64 / 1e6);
                }
            }
        }
    }
    out
}

/// Task-level overlap on the same host, summed over task pairs (for the
/// victim query itself: pairs of distinct tasks).
pub fn deep(ds: &Dataset, victims: &[u32], win: (Micros, Micros)) -> Overlaps {
    deep_series(ds, victims, &Windows::one(win))
        .pop()
        .unwrap_or_default()
}

/// [`deep`] in each of `windows`, in one sweep per host: tasks are cut at
/// the window bounds, so no interval between two events spans two windows.
pub fn deep_series(ds: &Dataset, victims: &[u32], windows: &Windows) -> Vec<Overlaps> {
    let mut is_victim = vec![false; ds.queries.len()];
    for &v in victims {
        is_victim[v as usize] = true;
    }
    // A pair is summed only while a victim's task runs on its host: per
    // host the hull of its victims' tasks (none: nothing to sum there), and
    // only the tasks that meet it are swept (on 5,000 hosts, a small part).
    let mut hull: Vec<Option<(Micros, Micros)>> = vec![None; ds.hosts.len()];
    for t in &ds.tasks {
        if is_victim[ds.stage_query(t.stage) as usize] {
            let h = &mut hull[t.host as usize];
            *h = Some(h.map_or((t.launch, t.finish), |(s, e)| {
                (s.min(t.launch), e.max(t.finish))
            }));
        }
    }
    let meets = |t: &&super::model::TaskInfo| {
        hull[t.host as usize].is_some_and(|(s, e)| t.launch <= e && s <= t.finish)
    };
    let mut by_host: Vec<Vec<(Micros, i64, u32)>> = vec![Vec::new(); ds.hosts.len()];
    for t in ds.tasks.iter().filter(meets) {
        for (_, s, e) in windows.pieces(t.launch, t.finish) {
            let q = ds.stage_query(t.stage);
            by_host[t.host as usize].push((s, 1, q));
            by_host[t.host as usize].push((e, -1, q));
        }
    }
    let mut out = vec![Overlaps::default(); windows.len()];
    for mut events in by_host {
        events.sort_unstable();
        let mut count: Vec<(u32, i64)> = Vec::new();
        let mut k = 0;
        while k < events.len() {
            let t0 = events[k].0;
            while k < events.len() && events[k].0 == t0 {
                let (_, d, q) = events[k];
                match count.iter_mut().position(|(x, _)| *x == q) {
                    Some(p) => {
                        count[p].1 += d;
                        if count[p].1 == 0 {
                            count.swap_remove(p);
                        }
                    }
                    None => count.push((q, d)),
                }
                k += 1;
            }
            if k >= events.len() {
                break;
            }
            let dt = (events[k].0 - t0) as f64 / 1e6;
            let out = &mut out[windows.index(t0)];
            for &(v, kv) in &count {
                if !is_victim[v as usize] {
                    continue;
                }
                for &(q, kq) in &count {
                    let pairs = if q == v { kv * (kv - 1) } else { kv * kq };
                    if pairs > 0 {
                        *out.entry((v, q)).or_insert(0.0) += pairs as f64 * dt;
                    }
                }
            }
        }
    }
    out
}
