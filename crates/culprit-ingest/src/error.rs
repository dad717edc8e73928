use thiserror::Error;

/// Errors that stop an ingest. Bad rows are not errors: they are reported as
/// [`crate::Rejection`]s and the rest is ingested.
#[derive(Debug, Error)]
pub enum IngestError {
    #[error("{path}: {reason}")]
    Source { path: String, reason: String },
    #[error(transparent)]
    Store(#[from] culprit_store::StoreError),
    #[error("--strict: {0} rows rejected, nothing ingested")]
    Strict(usize),
    /// Reading or writing the spilled task index (a temporary file).
    #[error("the task index's temporary file: {0}")]
    TaskIndex(#[from] std::io::Error),
}

pub type Result<T, E = IngestError> = std::result::Result<T, E>;

pub(crate) fn source_err(path: &str, reason: impl std::fmt::Display) -> IngestError {
    IngestError::Source {
        path: path.to_string(),
        reason: reason.to_string(),
    }
}
