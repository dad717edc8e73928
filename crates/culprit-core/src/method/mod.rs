//! The iQCAR method over an in-memory [`model::Dataset`], one file per
//! section of `method.md`:
//!
//! | section | file |
//! |---|---|
//! | 2 windows, 5 attribution (the sweeps) | `sweep.rs` |
//! | 3 RATP and slowdown | `crate::ratp`, a victim query's in `slowdown.rs` |
//! | 4 beta | `beta.rs` |
//! | 5 options and victims | `victims.rs` |
//! | 5 level-4 blame of a set of victims | `blame.rs`, `level4.rs`, `schedule.rs` (on every core) |
//! | 5b transitive slot blame | `transitive.rs` |
//! | `victim_tasks=last`: the task that ends each stage (beyond the paper) | `last_task.rs` |
//! | 6 the iQC-Graph | `graph.rs` |
//! | 6 BC0, DOR, culprit kinds | `responsibility.rs` |
//! | 6 use-cases (000 appendix E) | `usecases.rs` |
//! | 7 RATP at stage level | `stage_ratp.rs` |
//! | 8 critical path | `critical_path.rs` |
//! | overlap baselines (000 §6.1) | `overlap.rs` |
//! | windows as a series (000 §6.2), swept in one pass | `series.rs` |
//! | 9 blocked-time analysis: what-if, stragglers (004) | `what_if.rs`, `stragglers.rs`, on `task_times.rs` |
//! | 10 computation skew (002) | `skew.rs` |
//! | 11 bottleneck oriented estimation (003) | `estimate.rs` |

pub mod beta;
pub mod blame;
pub mod critical_path;
pub mod estimate;
pub mod graph;
pub mod last_task;
pub mod level4;
pub mod model;
pub mod overlap;
pub mod responsibility;
mod schedule;
pub mod series;
pub mod skew;
pub mod slowdown;
pub mod stage_ratp;
pub mod stragglers;
pub mod sweep;
pub mod task_times;
pub mod transitive;
pub mod usecases;
pub mod victims;
pub mod what_if;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_papers;

pub use beta::BetaAcc;
pub use blame::{
    blame, blame_series, blame_series_sharded, blame_series_streamed, blame_streamed, keep_shares,
    stage_shares,
};
pub use critical_path::{critical_path, CriticalPath, PathStep};
pub use graph::{IqcGraph, Node, NodeKey};
pub use level4::{Culprit, Entry, Level4};
pub use model::{Dataset, Micros, ResolvedWindows, TaskResolver, TaskRows};
pub use responsibility::{dor, Bc0, CulpritKind};
pub use schedule::{sweep_share, BucketNodes, BucketSource, Shards};
pub use series::{series_windows, Windows, MAX_SERIES_WINDOWS};
pub use stage_ratp::{stage_ratp, StageRatp};
pub use sweep::{Attribution, Explained};
pub use victims::{
    resolve_victims, window, BlameOptions, SlotBlame, TaskBlame, VictimStages, Victims,
};
