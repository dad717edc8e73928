//! Level-4 blame for a set of victims (method.md sections 4-5): resolve the
//! victims, run the sweeps (in memory or bucket by bucket from a store, see
//! `schedule.rs`), and pass slot waits on when slot blame is transitive
//! (section 5b). Everything above level 4 (BC0, DOR, the graph, rankings)
//! is computed from the result, in `responsibility.rs`, `graph.rs` and
//! `usecases.rs`.

use super::level4::{Entry, Level4};
use super::model::Dataset;
use super::schedule::{self, BucketSource, Shards, SlotSweep};
use super::series::Windows;
use super::sweep::{Attribution, Explained};
use super::transitive::{pass_on, HolderShares, Rho, RunSeconds};
use super::victims::{resolve_victims, window, BlameOptions, SlotBlame, TaskBlame, Victims};
use crate::MethodError;

/// Level-4 blame of the victims' stages, over the window rows in memory.
pub fn blame(ds: &Dataset, opts: &BlameOptions) -> Result<(Victims, Level4), MethodError> {
    let windows = Windows::one(window(opts));
    let (victims, mut series) = blame_series(ds, opts, &windows)?;
    Ok((victims, series.pop().unwrap_or_default()))
}

/// Level-4 blame over window rows read bucket by bucket from `source` (a
/// store too large to hold in memory); the same result as [`blame`] over
/// the same rows.
pub fn blame_streamed<S: BucketSource>(
    ds: &Dataset,
    opts: &BlameOptions,
    source: &S,
) -> Result<(Victims, Level4), S::Error> {
    let windows = Windows::one(window(opts));
    let (victims, mut series) = blame_series_streamed(ds, opts, &windows, source)?;
    Ok((victims, series.pop().unwrap_or_default()))
}

/// Level-4 blame in each of `windows` (a series; `opts.from` and `opts.to`
/// are replaced by the windows' union), in one pass over the rows: each
/// window's nodes are those of [`blame`] with that window. The victims are
/// resolved over the union; with `opts.victims` unset, those of a window are
/// the ones that ran in it (a query that did not run in a window has no row
/// there, so no node either).
pub fn blame_series(
    ds: &Dataset,
    opts: &BlameOptions,
    windows: &Windows,
) -> Result<(Victims, Vec<Level4>), MethodError> {
    blame_by(ds, opts, windows, |victim, windows, mode, slots| {
        schedule::in_memory(ds, victim, windows, mode, slots)
    })
}

/// [`blame_series`] over window rows read from `source`, which is read once
/// for all the windows.
pub fn blame_series_streamed<S: BucketSource>(
    ds: &Dataset,
    opts: &BlameOptions,
    windows: &Windows,
    source: &S,
) -> Result<(Victims, Vec<Level4>), S::Error> {
    blame_by(ds, opts, windows, |victim, windows, mode, slots| {
        schedule::streamed(ds, source, victim, windows, mode, slots)
    })
}

/// [`blame_series_streamed`] with the host buckets swept by `shards` (the
/// workers of a cluster) and the cluster-wide parts (the slot sweep,
/// transitive slot blame) here: the same result. Only for a dataset where
/// no task has two hosts (`Dataset::host_conflicts == 0`).
pub fn blame_series_sharded<S: Shards>(
    ds: &Dataset,
    opts: &BlameOptions,
    windows: &Windows,
    shards: &S,
) -> Result<(Victims, Vec<Level4>), S::Error> {
    blame_by(ds, opts, windows, |victim, windows, mode, slots| {
        schedule::sharded(ds, shards, victim, windows, mode, slots)
    })
}

/// Explains the stages of `mask` whole over the window rows in memory and
/// gives their shares `rho` (section 5b) in `window` with `attribution` to
/// the dataset's [`HolderShares::keep`] (nothing without one): a server
/// keeps the shares of every stage whose neighbourhood a focused read
/// holds, slot holder of the victims or not.
pub fn keep_shares(
    ds: &Dataset,
    mask: &[bool],
    window: (super::model::Micros, super::model::Micros),
    attribution: Attribution,
) -> Result<(), MethodError> {
    let windows = Windows::one(window);
    let Some(shares) = HolderShares::of(ds, &windows, attribution)? else {
        return Ok(());
    };
    let mut rho = rho_of(ds, mask, &windows, attribution)?;
    shares.complete(ds, mask, &mut rho);
    Ok(())
}

/// The shares `rho` (section 5b) in `window` with `attribution` of every
/// stage of `mask`, explained whole over the window rows in memory (the
/// dataset must hold each such stage's whole neighbourhood), in the order
/// of the stages; an empty list for a stage that ran no time in the
/// window or was slowed by nothing. What a store keeps of its stages
/// (`culprit shares`) is computed so.
pub fn stage_shares(
    ds: &Dataset,
    mask: &[bool],
    window: (super::model::Micros, super::model::Micros),
    attribution: Attribution,
) -> Result<Vec<(u32, super::transitive::Shares)>, MethodError> {
    let windows = Windows::one(window);
    let mut rho = rho_of(ds, mask, &windows, attribution)?;
    Ok(mask
        .iter()
        .enumerate()
        .filter(|(_, m)| **m)
        .map(|(s, _)| (s as u32, rho.take(s as u32)))
        .collect())
}

/// The shares of the stages of `mask`, explained whole in `windows` (one).
fn rho_of(
    ds: &Dataset,
    mask: &[bool],
    windows: &Windows,
    attribution: Attribution,
) -> Result<Rho, MethodError> {
    let run = RunSeconds::of(ds, windows);
    // Shares leave slot waits out (section 5b): no slot sweep.
    let entries = schedule::in_memory(
        ds,
        Explained::stages(mask),
        windows,
        attribution,
        SlotSweep::Skip,
    )?
    .pop()
    .unwrap_or_default();
    Ok(Rho::of(entries.iter(), &run, 0))
}

/// [`pass_on`] of the entries of `chunks` that `keep` keeps, chunk by
/// chunk, each dropped once passed on: memory holds a large analysis's
/// level 4 about once, not twice (its entries, in the same order).
fn pass_on_chunks(
    chunks: Vec<Vec<Entry>>,
    rho: &Rho,
    keep: impl Fn(&Entry) -> bool,
) -> Vec<Vec<Entry>> {
    chunks
        .into_iter()
        .map(|chunk| {
            let mut kept = pass_on(chunk.iter().filter(|e| keep(e)), rho);
            kept.shrink_to_fit();
            kept
        })
        .filter(|kept| !kept.is_empty())
        .collect()
}

/// The analysis with the sweeps done by `sweeps(explained stages, windows,
/// mode, slot sweep)`. With transitive slot blame the slot sweep that finds
/// the holders is the victims' own, so the sweeps do not do it again; the
/// holders' own slot waits are not swept, since their shares leave slots
/// out (section 5b) and only the victims' nodes are kept.
fn blame_by<E: From<MethodError>>(
    ds: &Dataset,
    opts: &BlameOptions,
    windows: &Windows,
    mut sweeps: impl FnMut(Explained<'_>, &Windows, Attribution, SlotSweep) -> Result<Vec<Level4>, E>,
) -> Result<(Victims, Vec<Level4>), E> {
    let (from, to) = windows.whole();
    let opts = BlameOptions {
        from: Some(from),
        to: Some(to),
        ..opts.clone()
    };
    let victims = resolve_victims(ds, &opts)?;
    let explained = Explained::new(&victims.stages, victims.tasks.as_deref());
    let series = match (opts.slots, opts.tasks) {
        (SlotBlame::Direct, _) => sweeps(explained, windows, opts.attribution, SlotSweep::Sweep)?,
        (SlotBlame::Transitive, TaskBlame::All) => {
            // Holders need their own level 4 (section 5b): explain the
            // victims and the stages their slot waits are blamed on (found
            // by the slot sweep alone), then keep the victims'. A stage's
            // level 4 does not depend on which other stages are explained
            // (every task is a consumer), so this is the result of
            // explaining every stage, for the victims, without sweeping
            // the hosts' rows where no victim or holder ran.
            // Holders whose shares are known (`Dataset::shares`) are not
            // swept again.
            let known = HolderShares::of(ds, windows, opts.attribution)?;
            let (mut mask, slots) =
                schedule::slot_holders(ds, explained, windows, opts.attribution)?;
            if let Some(known) = known {
                known.unmark(&mut mask, &victims.stages);
            }
            for (m, v) in mask.iter_mut().zip(&victims.stages) {
                *m |= *v;
            }
            let run = RunSeconds::of(ds, windows);
            // The victims' slot waits as swept above (a stage's nodes do
            // not depend on which others are explained).
            let slots = SlotSweep::Done(slots);
            sweeps(Explained::stages(&mask), windows, opts.attribution, slots)?
                .into_iter()
                .enumerate()
                .map(|(w, entries)| {
                    let mut rho = Rho::of(entries.iter(), &run, w as u32);
                    if let Some(known) = known {
                        known.complete(ds, &mask, &mut rho);
                    }
                    let (chunks, details) = entries.into_parts();
                    let kept = pass_on_chunks(chunks, &rho, |e| victims.stages[e.stage as usize]);
                    Level4::from_chunks(kept, details)
                })
                .collect()
        }
        (SlotBlame::Transitive, TaskBlame::Last) => {
            // The holders' shares are over all their tasks: one sweep of
            // the victims' last tasks, one of every task of the holders
            // their slot waits are blamed on (found by the slot sweep).
            let known = HolderShares::of(ds, windows, opts.attribution)?;
            let run = RunSeconds::of(ds, windows);
            let (mut named, slots) =
                schedule::slot_holders(ds, explained, windows, opts.attribution)?;
            if let Some(known) = known {
                known.unmark(&mut named, &[]);
            }
            let last = sweeps(explained, windows, opts.attribution, SlotSweep::Done(slots))?;
            let held = if named.iter().any(|h| *h) {
                sweeps(
                    Explained::stages(&named),
                    windows,
                    opts.attribution,
                    SlotSweep::Skip,
                )?
            } else {
                vec![Level4::default(); last.len()]
            };
            held.iter()
                .zip(last)
                .enumerate()
                .map(|(w, (h, entries))| {
                    let mut rho = Rho::of(h.iter(), &run, w as u32);
                    if let Some(known) = known {
                        known.complete(ds, &named, &mut rho);
                    }
                    let (chunks, details) = entries.into_parts();
                    Level4::from_chunks(pass_on_chunks(chunks, &rho, |_| true), details)
                })
                .collect()
        }
    };
    Ok((victims, series))
}
