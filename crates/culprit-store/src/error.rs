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
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("commit conflict: {0} concurrent commits in a row, giving up")]
    Conflict(usize),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
