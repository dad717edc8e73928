//! Housekeeping: `culprit compact` merges a telemetry table's small files.
//!
//! Each ingest (and each look of `ingest --watch`) adds files; many small
//! files cost a request and a footer each on every read. Compaction merges
//! the small files of a table (of `task_windows`, per host bucket, so the
//! layout still prunes) into few large ones, in one commit: the new files
//! and the removal of the merged ones become visible at once, and the rows
//! are the same rows (same identities, same values). Killed at any point it
//! loses and duplicates nothing: before its commit nothing is visible (its
//! files are unlisted garbage), after it everything is.
//!
//! The merged files are not deleted at once: a reader of an older manifest
//! (a running query of the server) may still be reading them. They are
//! listed as `retired` and removed by a later compaction once older than
//! the grace period.
//!
//! User tables are not compacted (the history of a scheduled report expires
//! by its files' batches).

use std::collections::BTreeMap;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use culprit_core::Table;
use futures::StreamExt;
use object_store::ObjectStoreExt;

use crate::manifest::DataFile;
use crate::{paths, Result, Store};

/// What `culprit compact` does.
#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Files under this size are merged.
    pub small_bytes: u64,
    /// Merge a table's (or host bucket's) small files only when there are
    /// at least this many.
    pub min_files: usize,
    /// Retired files are removed once retired this long.
    pub grace: Duration,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            small_bytes: 32 << 20,
            min_files: 2,
            grace: Duration::from_secs(600),
        }
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// The manifest version it committed (none when there was nothing to
    /// merge).
    pub version: Option<u64>,
    /// Files merged, per table.
    pub merged: BTreeMap<String, usize>,
    /// Files written.
    pub written: usize,
    /// Rows rewritten.
    pub rows: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Retired files removed from the store.
    pub removed: usize,
    /// Whether the query index was rebuilt from the stored tasks (a store
    /// written before it, or before it recorded first launches).
    pub index_rebuilt: bool,
}

impl CompactReport {
    /// Files merged in all.
    pub fn files_merged(&self) -> usize {
        self.merged.values().sum()
    }
}

/// The groups of small files to merge: per table, and per host bucket for
/// `task_windows` (unbucketed files are their own group).
fn groups(files: &[DataFile], opts: &CompactOptions) -> Vec<(Table, Option<u32>, Vec<DataFile>)> {
    let mut out = Vec::new();
    for table in Table::ALL {
        let mut by_bucket: BTreeMap<Option<u32>, Vec<DataFile>> = BTreeMap::new();
        for f in files
            .iter()
            .filter(|f| f.table == table.name() && f.bytes < opts.small_bytes)
        {
            by_bucket.entry(f.bucket).or_default().push(f.clone());
        }
        for (bucket, files) in by_bucket {
            if files.len() >= opts.min_files.max(2) {
                out.push((table, bucket, files));
            }
        }
    }
    out
}

/// A stored batch in the table's current schema: columns by name, a column
/// an older file lacks (an optional one added since) as NULLs, a time
/// column's zone as stored now.
pub(crate) fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema() == *schema {
        return Ok(batch);
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => Ok(arrow::compute::cast(c, f.data_type())?),
            None => Ok(arrow::array::new_null_array(
                f.data_type(),
                batch.num_rows(),
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

impl Store {
    /// Whether the query index of `manifest` must be rebuilt from the
    /// stored tasks for readers to use it whole: it does not add up to the
    /// stored tasks (a store written before it, or appended to by a culprit
    /// that did not write it), or lacks a query's first launch (files
    /// written before it was recorded).
    async fn index_outdated(&self, manifest: &crate::Manifest) -> Result<bool> {
        if manifest.rows_of(Table::Tasks) == 0 {
            return Ok(false);
        }
        Ok(match self.query_spans(manifest).await? {
            Some(spans) => spans.values().any(|s| s.first_launch.is_none()),
            None => true,
        })
    }

    /// Merges the small files of every telemetry table (see the module),
    /// calling `progress(done, total)` as groups of files are merged, and
    /// removes the files retired longer than the grace period.
    pub async fn compact(
        &self,
        opts: &CompactOptions,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<CompactReport> {
        let mut report = CompactReport::default();
        let manifest = self.manifest().await?;

        // Retired long enough: removed, then no longer listed. Killed in
        // between, the manifest lists as retired a file that is gone, which
        // nothing reads; the next compaction forgets it.
        let cutoff = chrono::Utc::now().timestamp_micros()
            - i64::try_from(opts.grace.as_micros()).unwrap_or(i64::MAX);
        let old: Vec<String> = manifest
            .retired
            .iter()
            .filter(|r| r.since <= cutoff)
            .map(|r| r.path.clone())
            .collect();
        for p in &old {
            match self.object_store.delete(&self.path(p)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => report.removed += 1,
                Err(e) => return Err((self.os_err())(e)),
            }
        }

        let groups = groups(&manifest.files, opts);
        // The query index has a file per batch too: its small files are
        // merged into one (its rows as they are; readers add up a query's
        // rows across files).
        let index: Vec<DataFile> = manifest
            .files_named(crate::layout::QUERY_SPANS)
            .filter(|f| f.bytes < opts.small_bytes)
            .cloned()
            .collect();
        // Rebuilt whole from the stored tasks when a reader cannot use it:
        // a store written before it, or before it recorded first launches
        // (a store of an older culprit is migrated so).
        let rebuild = self.index_outdated(&manifest).await?;
        let index = if rebuild {
            manifest
                .files_named(crate::layout::QUERY_SPANS)
                .cloned()
                .collect()
        } else if index.len() >= opts.min_files.max(2) {
            index
        } else {
            Vec::new()
        };
        if groups.is_empty() && old.is_empty() && index.is_empty() && !rebuild {
            return Ok(report);
        }
        let mut batch = self.begin();
        batch.kind = Some("compact");
        if !old.is_empty() {
            batch.forget_retired(old);
        }
        let total = groups.len();
        progress(0, total);
        for (i, (table, bucket, files)) in groups.into_iter().enumerate() {
            let schema = table.schema();
            report.bytes_before += files.iter().map(|f| f.bytes).sum::<u64>();
            *report.merged.entry(table.name().to_string()).or_insert(0) += files.len();
            let rows = self.scan_files(files.clone(), None).map({
                let schema = schema.clone();
                move |b| b.and_then(|b| conform(b, &schema))
            });
            let id = batch.id().to_string();
            let result = batch
                .write_parquet_stream(table.name(), &schema, rows, bucket, |part| {
                    paths::data_file(table, &id, part)
                })
                .await;
            if let Err(e) = result {
                batch.abort().await;
                return Err(e);
            }
            batch.merged_files(table.name(), files.into_iter().map(|f| f.path).collect());
            progress(i + 1, total);
        }
        if rebuild || !index.is_empty() {
            report.index_rebuilt = rebuild;
            let name = crate::layout::QUERY_SPANS;
            let schema = crate::layout::query_spans_schema();
            report.bytes_before += index.iter().map(|f| f.bytes).sum::<u64>();
            *report.merged.entry(name.to_string()).or_insert(0) += index.len();
            let rows = if rebuild {
                let mut spans = crate::store::SpanIndex::default();
                let columns = ["query_id", "ready_time", "launch_time", "finish_time"];
                let mut tasks = self.scan_table(&manifest, Table::Tasks, Some(&columns));
                while let Some(b) = tasks.next().await {
                    match b {
                        Ok(b) => spans.add(&b),
                        Err(e) => {
                            batch.abort().await;
                            return Err(e);
                        }
                    }
                }
                let rows = match spans.finish() {
                    Ok(rows) => rows,
                    Err(e) => {
                        batch.abort().await;
                        return Err(e);
                    }
                };
                futures::stream::iter(rows.into_iter().map(Ok)).boxed()
            } else {
                self.scan_files(index.clone(), None)
                    .map({
                        let schema = schema.clone();
                        move |b| b.and_then(|b| conform(b, &schema))
                    })
                    .boxed()
            };
            let id = batch.id().to_string();
            let result = batch
                .write_parquet_stream(name, &schema, rows, None, |part| {
                    paths::query_spans_file(&id, part)
                })
                .await;
            if let Err(e) = result {
                batch.abort().await;
                return Err(e);
            }
            batch.merged_files(name, index.into_iter().map(|f| f.path).collect());
        }
        let written = batch.written();
        report.written = written.len();
        report.rows = written.iter().map(|f| f.rows).sum();
        report.bytes_after = written.iter().map(|f| f.bytes).sum();
        let info = batch.commit().await?;
        report.version = Some(info.version);
        Ok(report)
    }
}
