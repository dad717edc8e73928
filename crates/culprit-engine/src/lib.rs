//! The engine: the one place that loads the method's data from the store
//! and runs its analyses, returning typed rows. Below it, `culprit-core`
//! (the pure method, no I/O) and `culprit-store` (the layout and the
//! files); above it, `culprit-sql`, which only adapts these rows to SQL
//! functions.
//!
//! The dataset of a manifest version is loaded once and shared by every
//! call until new data is committed ([`Engine::snapshot`]). A small store is
//! kept whole in memory; above [`WINDOW_CACHE_ROWS`] window rows only the
//! tasks, stages and host rows are kept, and each analysis reads
//! `task_windows` one host bucket at a time (`buckets.rs`), so memory holds
//! the rows of a few hosts, never the table.
//!
//! An analysis of named victims needs much less: [`Engine::focused`] reads
//! only the tasks and window rows that overlap them in time (and what their
//! slot holders need), found through the store's query index, so its cost
//! follows the victims, not the store (`focus.rs`).

mod analyses;
mod buckets;
pub mod budget;
mod engine;
mod error;
mod focus;
mod papers;
mod shards;
mod shares;
mod stored_shares;

pub use analyses::Blamed;
pub use budget::{run_held, Admission, Budget, BudgetOptions, Reservation};
pub use engine::{Engine, Snapshot, WINDOW_CACHE_ROWS};
pub use error::Error;
pub use focus::{Focus, VictimGroups, GROUP_TASKS};
pub use shards::{share_schema, SweepJob, Sweeper};
pub use shares::BYTES as HOLDER_SHARES_BYTES;
pub use stored_shares::{stored_question, Outcome as SharesOutcome, SharesStored, StoredCulprit};

pub use culprit_core::method;
