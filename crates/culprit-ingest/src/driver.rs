//! One ingest: read every source, check every row, write the good rows and
//! commit them as one batch.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Instant;

use arrow::array::RecordBatch;
use culprit_core::Table;
use culprit_store::{PendingBatch, Store};
use sha2::{Digest, Sha256};

use crate::error::{IngestError, Result};
use crate::formats::{self, Format};
use crate::sources::SourceFile;
use crate::validate::{self, Known};

/// Rows buffered per table before they are written out as a Parquet file.
const FLUSH_ROWS: usize = 1 << 20;

#[derive(Debug, Clone, Default)]
pub struct IngestOptions {
    /// Read every file as this table (else the file's or folder's name says).
    pub table: Option<Table>,
    /// Reject the whole batch when any row is rejected.
    pub strict: bool,
}

/// Reports progress of a long ingest (a progress bar on a terminal).
pub trait Progress: Sync {
    fn start(&self, _files: usize, _bytes: u64) {}
    fn advance(&self, _file: &str, _bytes: u64) {}
    fn finish(&self) {}
}

impl Progress for () {}

/// A rejected row (or a whole file, when `location` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub file: String,
    pub location: Option<String>,
    pub reason: String,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Some(loc) => write!(f, "{}: {loc}: {}", self.file, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

/// What an ingest did.
#[derive(Debug, Clone, Default)]
pub struct IngestReport {
    /// Files read and checked.
    pub files: usize,
    /// Files skipped because the same bytes were ingested before.
    pub duplicate_files: usize,
    /// Files in the given folders that are no telemetry (unknown name or format).
    pub ignored_files: Vec<String>,
    /// Rows stored, per table.
    pub rows: BTreeMap<String, u64>,
    /// Rows skipped because a row with the same key is already stored.
    pub already_stored: usize,
    pub rejected: Vec<Rejection>,
    pub seconds: f64,
    /// The manifest version committed, if anything was.
    pub version: Option<u64>,
}

impl IngestReport {
    /// The one-line summary printed at the end of `culprit ingest`.
    pub fn summary(&self) -> String {
        let rows = if self.rows.is_empty() {
            "no new rows".to_string()
        } else {
            self.rows
                .iter()
                .map(|(t, n)| format!("{t} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut s = format!(
            "{} files, rows: {rows}; rejected {}",
            self.files,
            self.rejected.len()
        );
        if self.duplicate_files > 0 {
            s.push_str(&format!(
                "; {} files already ingested",
                self.duplicate_files
            ));
        }
        if self.already_stored > 0 {
            s.push_str(&format!("; {} rows already stored", self.already_stored));
        }
        if !self.ignored_files.is_empty() {
            s.push_str(&format!("; {} files ignored", self.ignored_files.len()));
        }
        s.push_str(&format!("; {:.2} s", self.seconds));
        if let Some(v) = self.version {
            s.push_str(&format!(" (store version {v})"));
        }
        s
    }
}

/// Ingests the sources into the store as one batch.
pub async fn ingest(
    store: &Store,
    sources: Vec<SourceFile>,
    opts: &IngestOptions,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    let started = Instant::now();
    let mut report = IngestReport::default();

    // Which table and format each file is.
    let mut work: Vec<(Table, Format, SourceFile)> = Vec::new();
    for src in sources {
        let table = opts.table.or_else(|| Table::from_file_name(&src.name));
        let format = Format::from_path(&src.name);
        match (table, format) {
            (Some(t), Some(f)) => work.push((t, f, src)),
            _ if !src.explicit => report.ignored_files.push(src.name),
            (None, _) => report.rejected.push(Rejection {
                file: src.name,
                location: None,
                reason: "cannot tell the table from the file or folder name (use --table)".into(),
            }),
            (_, None) => report.rejected.push(Rejection {
                file: src.name,
                location: None,
                reason: "unknown format (expected .parquet, .csv, .jsonl or .ndjson)".into(),
            }),
        }
    }
    work.sort_by_key(|(t, _, _)| *t);

    let manifest = store.manifest().await?;
    let mut known = Known::default();
    let tables: HashSet<Table> = work.iter().map(|(t, _, _)| *t).collect();
    if tables.contains(&Table::Tasks) || tables.contains(&Table::TaskWindows) {
        let cols = ["task_id", "launch_time", "finish_time", "ready_time"];
        let stored = store
            .read_table(&manifest, Table::Tasks, Some(&cols))
            .await?;
        validate::index_tasks(&stored, &mut known);
    }
    for t in [Table::Queries, Table::Stages] {
        if tables.contains(&t) {
            let stored = store
                .read_table(&manifest, t, Some(t.key_columns()))
                .await?;
            validate::index_keys(t, &stored, &mut known);
        }
    }

    progress.start(work.len(), work.iter().map(|(_, _, s)| s.size).sum());
    let mut pending = store.begin();
    let result = read_all(
        &mut pending,
        work,
        &manifest,
        &mut known,
        &mut report,
        progress,
    )
    .await;
    progress.finish();
    if let Err(e) = result {
        pending.abort().await;
        return Err(e);
    }
    if opts.strict && !report.rejected.is_empty() {
        pending.abort().await;
        return Err(IngestError::Strict(report.rejected.len()));
    }
    report.rows = pending.rows();
    if report.rows.is_empty() && report.files == 0 {
        pending.abort().await;
    } else {
        let info = pending.commit().await?;
        report.version = Some(info.version);
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

async fn read_all(
    pending: &mut PendingBatch,
    work: Vec<(Table, Format, SourceFile)>,
    manifest: &culprit_store::Manifest,
    known: &mut Known,
    report: &mut IngestReport,
    progress: &dyn Progress,
) -> Result<()> {
    let mut buffered: BTreeMap<Table, (Vec<RecordBatch>, usize)> = BTreeMap::new();
    let mut seen_keys: HashSet<String> = HashSet::new();
    for (table, format, src) in work {
        let bytes = src.read().await?;
        let key = hex::encode(Sha256::digest(&bytes));
        progress.advance(&src.name, src.size);
        if manifest.source(&key).is_some() || !seen_keys.insert(key.clone()) {
            report.duplicate_files += 1;
            continue;
        }
        report.files += 1;
        let reject_file = |reason: String| Rejection {
            file: src.name.clone(),
            location: None,
            reason,
        };
        let raw = match formats::read(format, bytes) {
            Ok(raw) => raw,
            Err(reason) => {
                report.rejected.push(reject_file(reason));
                continue;
            }
        };
        let checked = match validate::check(table, raw, &src.name, known) {
            Ok(c) => c,
            Err(reason) => {
                report.rejected.push(reject_file(reason));
                continue;
            }
        };
        report.already_stored += checked.already_stored;
        report.rejected.extend(
            checked
                .rejected
                .into_iter()
                .map(|(origin, reason)| Rejection {
                    file: src.name.clone(),
                    location: Some(origin.to_string()),
                    reason,
                }),
        );
        pending.add_source(key, src.name.clone());
        let entry = buffered.entry(table).or_default();
        entry.1 += checked.batch.num_rows();
        entry.0.push(checked.batch);
        if entry.1 >= FLUSH_ROWS {
            let (batches, _) = std::mem::take(entry);
            pending.write(table, &batches).await?;
        }
    }
    for (table, (batches, _)) in buffered {
        pending.write(table, &batches).await?;
    }
    Ok(())
}
