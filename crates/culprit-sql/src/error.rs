//! Errors of the SQL functions: the engine's typed [`Error`], carried inside
//! DataFusion's error so that the server maps it to its SQLSTATE by type.

use datafusion::common::DataFusionError;

pub use culprit_core::MethodError;
pub use culprit_engine::Error;

/// An engine error inside a DataFusion error.
pub fn to_datafusion(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// For `map_err`: the error, naming the SQL function it came from.
pub fn in_function(name: &'static str) -> impl Fn(Error) -> DataFusionError {
    move |e| to_datafusion(e.in_function(name))
}
