//! The SQL layer: a DataFusion `SessionContext` over a culprit store, with
//! the six tables, views, and the functions of the method.
//!
//! Tables read the store's newest manifest on every scan, so a session sees
//! data committed while it is open (no restart needed).

mod context;
mod engine;
pub mod sandbox;
mod table;
pub mod udf;

pub use context::{default_config, session, session_with, session_with_config, VIEWS};
pub use engine::Engine;
pub use table::StoreTable;

pub use datafusion;
