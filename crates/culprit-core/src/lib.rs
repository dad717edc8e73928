//! The pure core of culprit: the data model of the interchange format and the
//! iQCAR method (RATP, blame, attribution, the iQC-Graph, critical path).
//!
//! Nothing here does I/O, knows DataFusion, pgwire or object stores: it is
//! plain Rust over Arrow arrays and petgraph, so it can be unit- and
//! property-tested on its own. The SQL layer (`culprit-sql`) wraps it.

pub mod batches;
pub mod method;
pub mod ratp;
pub mod schema;
pub mod time;

pub use schema::{ColumnKind, ColumnSpec, Resource, Table};

/// Errors of the method. Bad arguments are the caller's to fix; an
/// internal failure (a sweep thread that panicked) is a bug, reported as
/// one, never as a bad argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MethodError {
    #[error("unknown query '{0}'")]
    UnknownQuery(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("internal error: {0}")]
    Internal(String),
}
