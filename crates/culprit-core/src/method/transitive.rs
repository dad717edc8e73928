//! Transitive slot blame (method.md section 5b, an option beyond the
//! paper): a slot wait blamed on the holder `cs` is passed on to what slowed
//! `cs`, in the proportions of `cs`'s own blame.

use rustc_hash::FxHashMap;

use super::level4::{Culprit, Entry};
use super::model::Dataset;
use super::series::Windows;
use crate::Resource;

/// Seconds each stage's tasks ran in each window: by stage for a plain
/// analysis' one window, by (window, stage) for a series.
pub(crate) enum RunSeconds {
    One(Vec<f64>),
    Series(FxHashMap<(u32, u32), f64>),
}

impl RunSeconds {
    pub(crate) fn of(ds: &Dataset, windows: &Windows) -> RunSeconds {
        if windows.len() == 1 {
            let mut run = vec![0.0f64; ds.stages.len()];
            for t in &ds.tasks {
                for (_, s, e) in windows.pieces(t.launch, t.finish) {
                    run[t.stage as usize] += (e - s) as f64 / 1e6;
                }
            }
            return RunSeconds::One(run);
        }
        let mut run: FxHashMap<(u32, u32), f64> = FxHashMap::default();
        for t in &ds.tasks {
            for (w, s, e) in windows.pieces(t.launch, t.finish) {
                *run.entry((w, t.stage)).or_insert(0.0) += (e - s) as f64 / 1e6;
            }
        }
        RunSeconds::Series(run)
    }

    fn get(&self, w: u32, stage: u32) -> f64 {
        match self {
            RunSeconds::One(v) => v[stage as usize],
            RunSeconds::Series(m) => m.get(&(w, stage)).copied().unwrap_or(0.0),
        }
    }
}

/// Per holder stage, the shares `rho(cs, X)` of section 5b, from window
/// `w`'s `entries` (every stage explained, every task).
pub(crate) struct Rho(FxHashMap<u32, Vec<(Culprit, f64)>>);

impl Rho {
    pub(crate) fn of<'a>(
        entries: impl IntoIterator<Item = &'a Entry>,
        run: &RunSeconds,
        w: u32,
    ) -> Rho {
        let mut rho: FxHashMap<u32, Vec<(Culprit, f64)>> = FxHashMap::default();
        for e in entries
            .into_iter()
            .filter(|e| e.resource != Resource::Slots)
        {
            let v = rho.entry(e.stage).or_default();
            let c = e.culprit();
            match v.iter_mut().find(|(x, _)| *x == c) {
                Some((_, x)) => *x += e.seconds,
                None => v.push((c, e.seconds)),
            }
        }
        for (cs, v) in rho.iter_mut() {
            let r = run.get(w, *cs);
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
        Rho(rho)
    }
}

/// Section 5b: a slot wait on holder `cs` becomes `b * rho(cs, X)` on each X
/// that slowed `cs`, and `b * (1 - sum rho)` stays on `cs`. The victims'
/// `entries` may come from another sweep than `rho` (the holders that are
/// not victims are explained by a sweep of their own; `tasks=last` explains
/// one task per victim stage, while a holder's shares are over all its
/// tasks).
pub(crate) fn pass_on<'a>(entries: impl IntoIterator<Item = &'a Entry>, rho: &Rho) -> Vec<Entry> {
    let rho = &rho.0;
    let entries = entries.into_iter();
    let mut out = Vec::with_capacity(entries.size_hint().0);
    for e in entries.copied() {
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
