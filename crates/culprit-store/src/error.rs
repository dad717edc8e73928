use thiserror::Error;

/// Errors of the storage layer.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("invalid store URL '{url}': {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("object store error at {store}: {source}")]
    ObjectStore {
        store: String,
        #[source]
        source: object_store::Error,
    },
    #[error("corrupt manifest {path}: {reason}")]
    CorruptManifest { path: String, reason: String },
    #[error("parquet error in {path}: {source}")]
    Parquet {
        path: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A data file whose columns are not what its table stores (an older or
    /// hand-written file): reading it fails the statement instead of
    /// misreading or panicking.
    #[error("data file {path} of table {table}: column {column} {problem}")]
    ForeignSchema {
        path: String,
        table: String,
        column: String,
        /// `has type Utf8, expected Timestamp(µs)` or `is missing`.
        problem: String,
    },
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("commit conflict: {0} concurrent commits in a row, giving up")]
    Conflict(usize),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
