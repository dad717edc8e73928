//! The iQCAR method over an in-memory [`model::Dataset`].

pub mod blame;
pub mod critical_path;
pub mod estimate;
pub mod graph;
pub mod model;
pub mod overlap;
pub mod skew;
pub mod stage_ratp;
pub mod stragglers;
pub mod sweep;
pub mod task_times;
pub mod what_if;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_papers;

pub use blame::{
    blame, blame_with, parallel, slot_entries, sweep_part, BlameOptions, Culprit, Entry, Level4,
    Part, SlotBlame, VictimStages, Victims,
};
pub use critical_path::{critical_path, CriticalPath, PathStep};
pub use graph::{IqcGraph, Node, NodeKey};
pub use model::{Dataset, Micros};
pub use stage_ratp::{stage_ratp, BetaAcc, StageRatp};
pub use sweep::Attribution;
