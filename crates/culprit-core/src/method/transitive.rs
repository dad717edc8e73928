//! Transitive slot blame (method.md section 5b, an option beyond the
//! paper): a slot wait blamed on the holder `cs` is passed on to what slowed
//! `cs`, in the proportions of `cs`'s own blame.

use rustc_hash::FxHashMap;

use super::level4::{Culprit, Entry, Level4};
use super::model::{Dataset, Micros};
use super::sweep;
use crate::Resource;

/// Section 5b: a slot wait on holder `cs` becomes `b * rho(cs, X)` on each X
/// that slowed `cs`, and `b * (1 - sum rho)` stays on `cs`.
pub(crate) fn transitive(
    ds: &Dataset,
    entries: &Level4,
    (from, to): (Micros, Micros),
) -> Vec<Entry> {
    let mut run = vec![0.0f64; ds.stages.len()];
    for t in &ds.tasks {
        if let Some((s, e)) = sweep::clip(t.launch, t.finish, from, to) {
            run[t.stage as usize] += (e - s) as f64 / 1e6;
        }
    }
    let mut rho: FxHashMap<u32, Vec<(Culprit, f64)>> = FxHashMap::default();
    for e in entries.iter().filter(|e| e.resource != Resource::Slots) {
        let v = rho.entry(e.stage).or_default();
        let c = e.culprit();
        match v.iter_mut().find(|(x, _)| *x == c) {
            Some((_, x)) => *x += e.seconds,
            None => v.push((c, e.seconds)),
        }
    }
    for (cs, v) in rho.iter_mut() {
        let r = run[*cs as usize];
        if r <= 0.0 {
            v.clear();
            continue;
        }
        for (_, x) in v.iter_mut() {
            *x /= r;
        }
        let sum: f64 = v.iter().map(|(_, x)| x).sum();
        if sum > 1.0 {
            for (_, x) in v.iter_mut() {
                *x /= sum;
            }
        }
    }
    let mut out = Vec::with_capacity(entries.len());
    for e in entries.iter().copied() {
        let Culprit::Stage(cs) = e.culprit() else {
            out.push(e);
            continue;
        };
        if e.resource != Resource::Slots {
            out.push(e);
            continue;
        }
        let shares = rho.get(&cs).map(|v| v.as_slice()).unwrap_or(&[]);
        let passed: f64 = shares.iter().map(|(_, x)| x).sum();
        for &(x, r) in shares {
            if r > 0.0 {
                out.push(e.with_culprit(x, Some(cs), e.seconds * r));
            }
        }
        let stays = e.seconds * (1.0 - passed);
        if stays > 1e-12 {
            out.push(e.with_seconds(stays));
        }
    }
    out
}
