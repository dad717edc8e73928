use std::collections::BTreeMap;

use culprit_core::Table;
use serde::{Deserialize, Serialize};

/// One Parquet file of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFile {
    pub table: String,
    /// Relative to the store's root.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    pub batch: String,
    /// `task_windows` only: the host bucket ([`crate::layout`]) of
    /// every row's task, when the writer knew it. Older files have none and
    /// are read as unbucketed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<u32>,
}

/// A source file (or log) already ingested, by content hash, so that
/// ingesting it again adds nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// Hex SHA-256 of the source's bytes (or another stable identity, e.g.
    /// `log-id:offset` for growing logs).
    pub key: String,
    pub name: String,
    pub batch: String,
}

/// One committed ingest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchInfo {
    pub id: String,
    pub version: u64,
    pub committed_at: String,
    pub rows: BTreeMap<String, u64>,
}

/// The catalog at one version: every visible file and ingested source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub version: u64,
    pub files: Vec<DataFile>,
    pub sources: Vec<SourceRecord>,
    pub batches: Vec<BatchInfo>,
}

impl Manifest {
    pub const FORMAT: u32 = 1;

    /// The files of one table, oldest first.
    pub fn files_of(&self, table: Table) -> impl Iterator<Item = &DataFile> {
        self.files.iter().filter(move |f| f.table == table.name())
    }

    /// Rows stored in a table.
    pub fn rows_of(&self, table: Table) -> u64 {
        self.files_of(table).map(|f| f.rows).sum()
    }

    /// The source with this key, if it was ingested.
    pub fn source(&self, key: &str) -> Option<&SourceRecord> {
        self.sources.iter().find(|s| s.key == key)
    }
}
