//! Level-4 blame for a set of victims (method.md sections 4-5): resolve the
//! victims, run the sweeps (in memory or bucket by bucket from a store, see
//! `schedule.rs`), and pass slot waits on when slot blame is transitive
//! (section 5b). Everything above level 4 (BC0, DOR, the graph, rankings)
//! is computed from the result, in `responsibility.rs`, `graph.rs` and
//! `usecases.rs`.

use super::level4::{Entry, Level4};
use super::model::{Dataset, Micros};
use super::schedule::{self, BucketSource};
use super::sweep::Attribution;
use super::transitive::transitive;
use super::victims::{resolve_victims, window, BlameOptions, SlotBlame, Victims};
use crate::MethodError;

/// Level-4 blame of the victims' stages, over the window rows in memory.
pub fn blame(ds: &Dataset, opts: &BlameOptions) -> Result<(Victims, Level4), MethodError> {
    blame_by(ds, opts, |victim, win, mode| {
        schedule::in_memory(ds, victim, win, mode)
    })
}

/// Level-4 blame over window rows read bucket by bucket from `source` (a
/// store too large to hold in memory); the same result as [`blame`] over
/// the same rows.
pub fn blame_streamed<S: BucketSource>(
    ds: &Dataset,
    opts: &BlameOptions,
    source: &S,
) -> Result<(Victims, Level4), S::Error> {
    blame_by(ds, opts, |victim, win, mode| {
        schedule::streamed(ds, source, victim, win, mode)
    })
}

/// The analysis with the sweeps done by `sweeps(explained stages, window,
/// mode)`.
fn blame_by<E: From<MethodError>>(
    ds: &Dataset,
    opts: &BlameOptions,
    sweeps: impl FnOnce(&[bool], (Micros, Micros), Attribution) -> Result<Level4, E>,
) -> Result<(Victims, Level4), E> {
    let victims = resolve_victims(ds, opts)?;
    let win = window(opts);
    let entries = match opts.slots {
        SlotBlame::Direct => sweeps(&victims.stages, win, opts.attribution)?,
        SlotBlame::Transitive => {
            // Holders need their own level 4: explain every stage, then keep the victims'.
            let all = vec![true; ds.stages.len()];
            let entries = sweeps(&all, win, opts.attribution)?;
            let kept: Vec<Entry> = transitive(ds, &entries, win)
                .into_iter()
                .filter(|e| victims.stages[e.stage as usize])
                .collect();
            let (_, details) = entries.into_parts();
            Level4::from_chunks(vec![kept], details)
        }
    };
    Ok((victims, entries))
}
