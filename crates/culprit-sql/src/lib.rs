//! The SQL layer: a DataFusion `SessionContext` over a culprit store, with
//! the six tables, views, and the functions of the method. It only adapts:
//! the analyses run in `culprit-engine`, the formulas live in `culprit-core`.
//!
//! Tables read the store's newest manifest on every scan, so a session sees
//! data committed while it is open (no restart needed).

mod budget_pool;
pub mod cluster;
mod context;
pub mod error;
pub mod functions;
pub mod sandbox;
pub mod shards;
mod table;
pub mod user_tables;

pub use budget_pool::BudgetPool;
pub use cluster::{parse_workers, Cluster};
pub use context::{default_config, session, session_with, session_with_config, VIEWS};
pub use culprit_engine::Engine;
pub use error::Error;
pub use table::StoreTable;

pub use datafusion;
