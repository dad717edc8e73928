//! Transitive slot blame (method.md section 5b, an option beyond the
//! paper): a slot wait blamed on the holder `cs` is passed on to what slowed
//! `cs`, in the proportions of `cs`'s own blame.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::level4::{Culprit, Entry};
use super::model::{Dataset, Micros};
use super::series::Windows;
use super::sweep::Attribution;
use crate::Resource;

/// The shares `rho(cs, X)` of one slot holder `cs` (section 5b): what
/// slowed it, as fractions of its run.
pub type Shares = Vec<(Culprit, f64)>;

/// Called with each stage whose shares an analysis computed: the dataset,
/// the stage, its shares.
pub type KeepShares = dyn Fn(&Dataset, u32, &Shares) + Send + Sync;

/// Holders' shares known before an analysis of a dataset: a holder's shares
/// depend on the holder, the window and the attribution, not on the victim,
/// so a server keeps those its analyses computed and the next analysis of
/// the same store version need not sweep the holder's hosts again (nor read
/// its neighbourhood: a dataset with known shares may lack it). Used only
/// by an analysis of this one window and attribution; any other fails.
pub struct HolderShares {
    pub window: (Micros, Micros),
    pub attribution: Attribution,
    /// Per stage of the dataset.
    pub known: FxHashMap<u32, Shares>,
    /// Per stage of the dataset: whether it holds the stage's whole
    /// neighbourhood (its tasks, and every row that overlapped them on
    /// their hosts); only those stages' shares are given to `keep`.
    pub whole: Vec<bool>,
    /// Given the shares of every stage an analysis explained whole (its
    /// victims' and the holders' not known), to keep for later ones.
    pub keep: Option<Arc<KeepShares>>,
}

impl std::fmt::Debug for HolderShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HolderShares")
            .field("window", &self.window)
            .field("attribution", &self.attribution)
            .field("known", &self.known.len())
            .finish()
    }
}

impl HolderShares {
    /// The shares of the dataset of an analysis in `windows` with
    /// `attribution`: `None` when it has none or they are of another
    /// window or attribution and none is known; an error when some are
    /// known (the dataset may lack what those holders need).
    pub(crate) fn of<'a>(
        ds: &'a Dataset,
        windows: &Windows,
        attribution: Attribution,
    ) -> Result<Option<&'a HolderShares>, crate::MethodError> {
        let Some(shares) = ds.shares.as_deref() else {
            return Ok(None);
        };
        if windows.len() != 1
            || windows.whole() != shares.window
            || attribution != shares.attribution
        {
            if shares.known.is_empty() {
                // Nothing is missing from the dataset: an analysis of
                // another window, whose shares are not kept.
                return Ok(None);
            }
            return Err(crate::MethodError::Internal(format!(
                "the dataset holds slot holders' shares of the window {:?} with {:?} attribution, \
                 not of this analysis",
                shares.window, shares.attribution
            )));
        }
        Ok(Some(shares))
    }

    /// Clears the stages with known shares in `mask` (except `keep`'s).
    pub(crate) fn unmark(&self, mask: &mut [bool], keep: &[bool]) {
        for &s in self.known.keys() {
            let s = s as usize;
            if s < mask.len() && !keep.get(s).copied().unwrap_or(false) {
                mask[s] = false;
            }
        }
    }

    /// Gives `rho`'s shares of the stages of `mask` (explained whole) whose
    /// whole neighbourhood the dataset holds to [`HolderShares::keep`], and
    /// adds the known ones to `rho`.
    pub(crate) fn complete(&self, ds: &Dataset, mask: &[bool], rho: &mut Rho) {
        if let Some(keep) = &self.keep {
            let none = Shares::new();
            let whole = |s: usize| self.whole.get(s).copied().unwrap_or(false);
            for (s, _) in mask.iter().enumerate().filter(|(s, m)| **m && whole(*s)) {
                keep(ds, s as u32, rho.0.get(&(s as u32)).unwrap_or(&none));
            }
        }
        for (s, v) in &self.known {
            rho.0.entry(*s).or_insert_with(|| v.clone());
        }
    }
}

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
pub(crate) struct Rho(FxHashMap<u32, Shares>);

impl Rho {
    /// The shares of stage `s`, taken out (none if it had none).
    pub(crate) fn take(&mut self, s: u32) -> Shares {
        self.0.remove(&s).unwrap_or_default()
    }

    pub(crate) fn of<'a>(
        entries: impl IntoIterator<Item = &'a Entry>,
        run: &RunSeconds,
        w: u32,
    ) -> Rho {
        let mut rho: FxHashMap<u32, Vec<(Culprit, f64)>> = FxHashMap::default();
        // Where each (holder, culprit) is in its holder's list: a holder of
        // a wide cluster has thousands of culprits. The list keeps the
        // order in which they first came, so the sums below add the same
        // terms in the same order.
        let mut at: FxHashMap<(u32, Culprit), usize> = FxHashMap::default();
        for e in entries
            .into_iter()
            .filter(|e| e.resource != Resource::Slots)
        {
            let v = rho.entry(e.stage).or_default();
            let c = e.culprit();
            match at.entry((e.stage, c)) {
                std::collections::hash_map::Entry::Occupied(i) => v[*i.get()].1 += e.seconds,
                std::collections::hash_map::Entry::Vacant(i) => {
                    i.insert(v.len());
                    v.push((c, e.seconds));
                }
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
