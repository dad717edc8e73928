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
    /// A telemetry value the method needs is NaN or infinite: an error of
    /// the input, never dropped silently (that would break conservation).
    #[error("{row}: {field} is not a finite number ({value})")]
    NonFinite {
        /// The row, e.g. `task 't1', cpu row at 0..1000000 us`.
        row: String,
        /// The column, e.g. `blocked`.
        field: &'static str,
        value: String,
    },
}

impl MethodError {
    /// `Err(NonFinite)` when `value` is NaN or infinite; `row` names the row.
    pub fn check_finite(
        value: f64,
        field: &'static str,
        row: impl FnOnce() -> String,
    ) -> Result<(), MethodError> {
        if value.is_finite() {
            Ok(())
        } else {
            Err(MethodError::NonFinite {
                row: row(),
                field,
                value: value.to_string(),
            })
        }
    }
}
