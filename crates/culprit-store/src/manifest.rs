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
    /// `task_windows` and `host_windows` only: the earliest `window_start`
    /// and the latest `window_end` of the file's rows (microseconds since
    /// the epoch), so that an ingest looks for its rows' identities only in
    /// the files whose windows overlap theirs. Older files have none and
    /// are always looked in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_span: Option<[i64; 2]>,
}

impl DataFile {
    /// Whether the file may hold a window within `[start, end]`: yes when
    /// its span is unknown.
    pub fn may_overlap(&self, start: i64, end: i64) -> bool {
        self.window_span
            .is_none_or(|[first, last]| first <= end && start <= last)
    }
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
    /// The bytes hashed for `key`; none in stores written before it was
    /// recorded. Lets an ingest read a file whose digest is not computed
    /// yet when no source of its size was ingested
    /// ([`Manifest::may_hold_source_of_size`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// One committed ingest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchInfo {
    pub id: String,
    pub version: u64,
    pub committed_at: String,
    pub rows: BTreeMap<String, u64>,
    /// `compact` for a batch that merged stored rows (its `rows` are not new
    /// rows); none for an ingest or a statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// The catalog at one version: every visible file and ingested source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub version: u64,
    pub files: Vec<DataFile>,
    pub sources: Vec<SourceRecord>,
    pub batches: Vec<BatchInfo>,
    /// The users' own tables (metadata such as teams or SLAs): their
    /// columns; their rows are the files whose `table` is the name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_tables: Vec<UserTable>,
    /// Scheduled reports (`cron.schedule`), pg_cron's jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cron_jobs: Vec<CronJob>,
    /// The highest job id ever given (ids are never reused).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub last_jobid: i64,
    /// Files no longer listed since a compaction merged them, kept a while
    /// for readers of older manifests, then removed by a later compaction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<RetiredFile>,
    /// The batch that last changed the telemetry's rows (an ingest, an
    /// expiry): a compaction, a user table's statement or a scheduled job
    /// leaves it. What is derived from the telemetry (the slot holders'
    /// stored shares) holds while it stays. None in manifests written
    /// before it was recorded ([`Manifest::telemetry_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<String>,
}

/// A data file replaced by a compaction, and since when (microseconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredFile {
    pub path: String,
    pub since: i64,
}

fn is_zero(x: &i64) -> bool {
    *x == 0
}

/// A scheduled report: pg_cron's `cron.job` row, and when it last ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronJob {
    pub jobid: i64,
    pub jobname: String,
    pub schedule: String,
    pub command: String,
    /// The user who scheduled it: every run has that user's rights.
    pub username: String,
    pub active: bool,
    /// When it was scheduled (microseconds since the epoch, UTC).
    pub created: i64,
    /// The newest run's scheduled time, once it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled: Option<i64>,
    /// The newest run's id (a run's id is its start time in microseconds).
    #[serde(default)]
    pub last_runid: i64,
    /// `html`: each run also writes a page of its result to
    /// `cron.report_pages`; absent: rows only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// A table of the users' own, stored like telemetry but with the columns
/// its creator gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserTable {
    pub name: String,
    pub columns: Vec<UserColumn>,
    /// The batch that created it (or last replaced its columns).
    pub batch: String,
}

/// One column of a user table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserColumn {
    pub name: String,
    /// Arrow's name of the type (`Utf8`, `Int64`, `Timestamp(µs, "UTC")`),
    /// which `DataType::from_str` reads back.
    pub data_type: String,
    pub nullable: bool,
}

impl UserTable {
    /// A table's entry for an Arrow schema.
    pub fn new(name: &str, schema: &arrow::datatypes::Schema, batch: &str) -> UserTable {
        UserTable {
            name: name.to_string(),
            columns: schema
                .fields()
                .iter()
                .map(|f| UserColumn {
                    name: f.name().clone(),
                    data_type: f.data_type().to_string(),
                    nullable: f.is_nullable(),
                })
                .collect(),
            batch: batch.to_string(),
        }
    }

    /// The table's Arrow schema, NOT NULL where declared; an unreadable
    /// type names the table and column.
    pub fn schema(&self) -> Result<arrow::datatypes::SchemaRef, crate::StoreError> {
        use std::str::FromStr;
        let fields = self
            .columns
            .iter()
            .map(|c| {
                arrow::datatypes::DataType::from_str(&c.data_type)
                    .map(|t| arrow::datatypes::Field::new(&c.name, t, c.nullable))
                    .map_err(|e| crate::StoreError::UserTable {
                        table: self.name.clone(),
                        reason: format!("column {} has an unreadable type: {e}", c.name),
                        code: crate::UserTableProblem::Mismatch,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(std::sync::Arc::new(arrow::datatypes::Schema::new(fields)))
    }
}

impl Manifest {
    /// Drops the records of batches none of whose files is listed any more
    /// (merged by a compaction, expired, replaced, or a statement that
    /// wrote none), but the newest `keep`: the records' only reader is the
    /// expiry of a report's history by its files' batches, and otherwise a
    /// store committed to every few seconds (a scheduled report) would
    /// carry a record of every commit in every manifest.
    pub fn prune_batches(&mut self, keep: usize) {
        let listed: std::collections::HashSet<&str> =
            self.files.iter().map(|f| f.batch.as_str()).collect();
        let first_kept = self.batches.len().saturating_sub(keep);
        let mut at = 0;
        self.batches.retain(|b| {
            at += 1;
            at > first_kept || listed.contains(b.id.as_str())
        });
    }

    /// The newest format this culprit reads and writes. Format 2 adds
    /// `user_tables`; a store without user tables is still written as
    /// format 1, so older culprits keep reading it, while one with user
    /// tables is refused by them rather than rewritten without its tables.
    pub const FORMAT: u32 = 2;

    /// The oldest format that holds this manifest.
    pub fn format_needed(&self) -> u32 {
        if self.user_tables.is_empty() && self.cron_jobs.is_empty() {
            1
        } else {
            2
        }
    }

    /// What names the telemetry's rows at this version: the batch that
    /// last changed them, or, in a manifest written before that was
    /// recorded, this version itself (then what is derived holds at this
    /// version only). Two manifests with the same id hold the same rows,
    /// whatever compactions ran between them.
    pub fn telemetry_id(&self) -> String {
        self.telemetry
            .clone()
            .unwrap_or_else(|| format!("version-{}", self.version))
    }

    /// The files of one table, oldest first.
    pub fn files_of(&self, table: Table) -> impl Iterator<Item = &DataFile> {
        self.files.iter().filter(move |f| f.table == table.name())
    }

    /// Rows stored in a table.
    pub fn rows_of(&self, table: Table) -> u64 {
        self.files_of(table).map(|f| f.rows).sum()
    }

    /// The user table of this name.
    pub fn user_table(&self, name: &str) -> Option<&UserTable> {
        self.user_tables.iter().find(|t| t.name == name)
    }

    /// The scheduled job of this name.
    pub fn cron_job(&self, name: &str) -> Option<&CronJob> {
        self.cron_jobs.iter().find(|j| j.jobname == name)
    }

    /// The files recorded under this table name (culprit's own index
    /// tables, e.g. [`crate::layout::QUERY_SPANS`]).
    pub fn files_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a DataFile> {
        self.files.iter().filter(move |f| f.table == name)
    }

    /// The files of a user table, oldest first.
    pub fn files_of_user(&self, name: &str) -> impl Iterator<Item = &DataFile> {
        let name = name.to_string();
        self.files.iter().filter(move |f| f.table == name)
    }

    /// The source with this key, if it was ingested.
    pub fn source(&self, key: &str) -> Option<&SourceRecord> {
        self.sources.iter().find(|s| s.key == key)
    }

    /// Whether a source of `size` bytes may have been ingested: a source
    /// of that size was, or one whose size was not recorded. When not, a
    /// file of that size is new whatever its digest.
    pub fn may_hold_source_of_size(&self, size: u64) -> bool {
        self.sources
            .iter()
            .any(|s| s.size.is_none_or(|n| n == size))
    }
}
