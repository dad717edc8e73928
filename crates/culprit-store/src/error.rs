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
    /// A user table that cannot be created, written or dropped as asked.
    #[error("table {table}: {reason}")]
    UserTable {
        table: String,
        reason: String,
        code: UserTableProblem,
    },
    /// A worker thread (sorting and encoding files on the blocking pool)
    /// that panicked or was cancelled: a bug, reported instead of a crash.
    #[error("a worker thread failed: {0}")]
    Worker(String),
    /// Stored files that do not hold the rows their footers or the
    /// manifest count (a compaction's merge read another number): the
    /// work is refused, nothing is changed.
    #[error("{what}: {reason}")]
    CorruptFiles { what: String, reason: String },
    #[error("commit conflict: {0} concurrent commits in a row, giving up")]
    Conflict(usize),
    /// Housekeeping that lost a race to another (two compactions at once):
    /// nothing changed.
    #[error("commit conflict: {what}")]
    Stale { what: String },
    /// A store version asked for by number (a cluster's worker reading the
    /// version its coordinator planned at) that a newer one superseded and
    /// a commit removed ([`crate::MANIFEST_GRACE`]).
    #[error(
        "store version {version} is no longer kept: a manifest is removed {grace_secs} s after a newer version supersedes it"
    )]
    ManifestGone { version: u64, grace_secs: u64 },
}

impl StoreError {
    /// A [`StoreError::ManifestGone`] again from a message holding its text
    /// (a cluster's worker sends its errors as text).
    pub fn manifest_gone_in(message: &str) -> Option<StoreError> {
        const HEAD: &str = "store version ";
        const MID: &str = " is no longer kept: a manifest is removed ";
        const TAIL: &str = " s after a newer version supersedes it";
        let at = message.find(HEAD)? + HEAD.len();
        let rest = &message[at..];
        let mid = rest.find(MID)?;
        let version = rest[..mid].parse().ok()?;
        let rest = &rest[mid + MID.len()..];
        let grace_secs = rest[..rest.find(TAIL)?].parse().ok()?;
        Some(StoreError::ManifestGone {
            version,
            grace_secs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_version_is_known_again_from_its_text() {
        let gone = StoreError::ManifestGone {
            version: 7,
            grace_secs: 900,
        };
        let text = format!("External error: {gone}");
        assert!(matches!(
            StoreError::manifest_gone_in(&text),
            Some(StoreError::ManifestGone {
                version: 7,
                grace_secs: 900
            })
        ));
        assert!(StoreError::manifest_gone_in("store version x is no longer kept").is_none());
        assert!(StoreError::manifest_gone_in("no such file").is_none());
    }
}

/// What is wrong with a user table operation, for the SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserTableProblem {
    /// It exists already (42P07).
    Exists,
    /// It does not exist (42P01).
    Missing,
    /// A telemetry table: changed only by ingest (42809).
    Telemetry,
    /// A bad name (42602).
    Invalid,
    /// A NULL in a NOT NULL column (23502).
    NotNull,
    /// Rows or columns that do not fit the table (42804).
    Mismatch,
    /// Another user's scheduled job (42501).
    NotOwner,
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
