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
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;

use crate::manifest::DataFile;
use crate::store::{KeyedFile, KeyedGroup};
use crate::{paths, Result, Store};

/// What `culprit compact` does.
#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Files under this size are merged (but not those of at least
    /// [`crate::layout::rows_per_file`] rows: [`is_small`]).
    pub small_bytes: u64,
    /// Merge a table's (or host bucket's) small files only when there are
    /// at least this many.
    pub min_files: usize,
    /// Retired files are removed once retired this long.
    pub grace: Duration,
    /// Rows of a time table merged in order of time are read and sorted
    /// this many at a time (a slice of time; two slices are in work at
    /// once, each read and sorted: memory holds about four times that
    /// many rows).
    pub slice_rows: u64,
    /// Where each group's merge takes its memory from (a server's
    /// budget); `None`: nowhere, as `culprit compact` runs alone.
    pub memory: Option<MemoryGate>,
    /// Rewrite every file of the time tables (`tasks`, `task_windows`,
    /// `host_windows`), whatever its size, even alone in its table or
    /// bucket: files written by an older version then take the current
    /// layout (`culprit compact --rewrite`, docs/storage.md). The other
    /// tables' layout is unchanged: only their small files are merged.
    /// Never in the background ([`crate::AutoCompact`] turns it off).
    pub rewrite: bool,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            small_bytes: 32 << 20,
            min_files: 2,
            grace: Duration::from_secs(600),
            slice_rows: SLICE_ROWS,
            memory: None,
            rewrite: false,
        }
    }
}

/// What a [`MemoryGate`] returns for memory it grants: held while the
/// group merges, dropped (the memory given back) after.
pub type MemoryGrant = Box<dyn std::any::Any + Send>;

/// Where a compaction takes its memory from: before a group of files is
/// merged, the gate is asked for about the bytes the merge holds
/// ([`merge_memory`]), and holds what it grants until the group is merged.
/// Refused the memory of a merge in order of time, it is asked for that
/// of a merge file after file (less); refused that too (its reason), the
/// group's files are left as they are, for a later compaction, and the
/// compaction goes on with the next group ([`CompactReport::deferred`]).
/// `culprit serve` takes the memory from its budget
/// (`culprit_engine::Budget`), so that the background compaction and the
/// analyses share one memory budget; `culprit ingest --watch` grants a
/// merge only while no ingest runs (its turns).
#[derive(Clone)]
pub struct MemoryGate(
    std::sync::Arc<dyn Fn(u64) -> std::result::Result<MemoryGrant, String> + Send + Sync>,
);

impl MemoryGate {
    /// The memory of a merge in order of time by `order`, else (refused,
    /// or no such order) of one file after file: the order the grant
    /// allows and the grant, or the last refusal's reason.
    fn take_for(
        &self,
        order: Option<TimeOrder>,
    ) -> std::result::Result<(Option<TimeOrder>, MemoryGrant), String> {
        if let Some(o) = &order {
            if let Ok(grant) = self.take(merge_memory(Some(o.slice_rows))) {
                return Ok((order, grant));
            }
        }
        self.take(merge_memory(None)).map(|grant| (None, grant))
    }

    pub fn new(
        take: impl Fn(u64) -> std::result::Result<MemoryGrant, String> + Send + Sync + 'static,
    ) -> MemoryGate {
        MemoryGate(std::sync::Arc::new(take))
    }

    /// Asks for `bytes`: the grant, or the refusal's reason.
    pub fn take(&self, bytes: u64) -> std::result::Result<MemoryGrant, String> {
        (self.0)(bytes)
    }
}

impl std::fmt::Debug for MemoryGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryGate")
    }
}

/// Bytes a merge in order of time holds per row of its slices: about four
/// slices' rows (two read and sorted ahead, one being encoded) and the
/// encoder's buffers. Measured as `culprit compact`'s peak less that of a
/// compaction with nothing to merge (30 MiB): slices of 64 Ki rows 147
/// MiB at 1e6 tasks, 179 MiB at 1e7, slices of 256 Ki 572 MiB at 1e7;
/// rounded up (docs/operations.md). Measured again later with slices of
/// 64 Ki (100-103 MiB at 1e6, 136-145 MiB at 1e7), it overstates by a
/// third at 1e7 (192 against 145 MiB) and nearly twice at 1e6: a margin
/// kept for telemetry whose rows are wider than the generated ones.
pub const MERGE_BYTES_PER_SLICE_ROW: u64 = 2560;
/// Bytes a merge in order of time holds besides its slices.
pub const MERGE_BASE_BYTES: u64 = 32 << 20;
/// Bytes a merge file after file holds (files read ahead and the
/// encoder's row groups), measured the same way: 68-73 MiB at 1e6 tasks,
/// 106-108 MiB at 1e7; rounded up.
pub const MERGE_FILE_ORDER_BYTES: u64 = 112 << 20;

/// About the bytes a merge of a group holds: in order of time with slices
/// of `slice_rows` rows (`Some`), or file after file (`None`).
pub fn merge_memory(slice_rows: Option<u64>) -> u64 {
    match slice_rows {
        Some(rows) => MERGE_BASE_BYTES + rows.saturating_mul(MERGE_BYTES_PER_SLICE_ROW),
        None => MERGE_FILE_ORDER_BYTES,
    }
}

/// Rows of a time slice of a compaction ([`CompactOptions::slice_rows`]).
/// The 1e7-task store's compaction peaked at 205 MiB with 64 Ki (35 s),
/// 602 MiB with 256 Ki (32 s), against 138 MiB and 30 s merging file
/// after file (docs/performance.md).
pub const SLICE_ROWS: u64 = 64 << 10;

/// How much larger than [`CompactOptions::slice_rows`] a compaction makes
/// its slices when its files' row groups overlap too much in time for
/// smaller ones ([`time_slices`]).
const MAX_SLICE_GROWTH: u64 = 16;

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
    /// Groups of a time table's files merged in order of time.
    pub time_ordered: usize,
    /// Groups of a time table's files merged file after file: their
    /// footers cannot place their rows in time, or their row groups span
    /// too much of it even in the largest slices.
    pub file_order: usize,
    /// Groups left as they were: the [`MemoryGate`] refused their memory
    /// (a later compaction merges them), and the last refusal.
    pub deferred: usize,
    pub deferred_because: Option<String>,
}

impl CompactReport {
    /// Files merged in all.
    pub fn files_merged(&self) -> usize {
        self.merged.values().sum()
    }
}

/// Whether a file is merged: smaller than `small_bytes`, and of fewer than
/// [`crate::layout::rows_per_file`] rows (a merge writes files of that
/// many, often under `small_bytes`: merging them again would gain nothing,
/// each time; the larger files of older versions are left too).
pub(crate) fn is_small(file: &DataFile, opts: &CompactOptions) -> bool {
    file.bytes < opts.small_bytes && file.rows < crate::layout::rows_per_file(&file.table) as u64
}

/// The groups of small files to merge: per table, and per host bucket for
/// `task_windows` (unbucketed files are their own group). Every file of a
/// time table when rewriting ([`CompactOptions::rewrite`]), even alone.
fn groups(files: &[DataFile], opts: &CompactOptions) -> Vec<(Table, Option<u32>, Vec<DataFile>)> {
    let mut out = Vec::new();
    for table in Table::ALL {
        let rewrite = opts.rewrite && crate::layout::time_columns(table.name()).is_some();
        let mut by_bucket: BTreeMap<Option<u32>, Vec<DataFile>> = BTreeMap::new();
        for f in files
            .iter()
            .filter(|f| f.table == table.name() && (rewrite || is_small(f, opts)))
        {
            by_bucket.entry(f.bucket).or_default().push(f.clone());
        }
        let least = if rewrite { 1 } else { opts.min_files.max(2) };
        for (bucket, files) in by_bucket {
            if files.len() >= least {
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

/// A group of a time table's files to merge in order of time: their row
/// groups by sort key, and the slices of time to read one after another.
struct TimeOrder {
    files: Vec<KeyedFile>,
    /// Inclusive ranges of the sort key, in order, covering every value.
    slices: Vec<(i64, i64)>,
    /// Rows a slice was cut for (at least the rows asked for, more where
    /// many files cover the same time).
    slice_rows: u64,
}

impl TimeOrder {
    /// Rows of the files, by their footers.
    fn rows(&self) -> u64 {
        self.files
            .iter()
            .flat_map(|f| &f.groups)
            .map(|g| g.rows)
            .sum()
    }
}

/// Cuts the sort key's range into slices of about `slice_rows` rows
/// (each from the least key of a row group, by the groups' statistics):
/// inclusive ranges, in order, from `i64::MIN` to `i64::MAX`. `None` when
/// reading slice after slice would decode a row group too many times (more
/// than three times the rows in all, or more than four times the larger of
/// a slice and a row group in one slice): files whose row groups each span
/// much of the time, as an older culprit wrote. Those are merged file
/// after file.
fn time_slices(groups: &[KeyedGroup], slice_rows: u64) -> Option<Vec<(i64, i64)>> {
    let mut by_min: Vec<&KeyedGroup> = groups.iter().collect();
    by_min.sort_by_key(|g| g.min);
    let mut bounds = vec![i64::MIN];
    // A slice is cut only where the least key changes, so that the groups
    // of one least key are counted in the slice they start.
    let mut previous = by_min.first().map_or(i64::MIN, |g| g.min);
    let mut rows = 0u64;
    for g in by_min {
        if rows >= slice_rows.max(1) && g.min > previous {
            bounds.push(g.min);
            rows = 0;
        }
        previous = g.min;
        rows += g.rows;
    }
    let mut slices: Vec<(i64, i64)> = bounds.windows(2).map(|w| (w[0], w[1] - 1)).collect();
    slices.push((*bounds.last().expect("one bound at least"), i64::MAX));
    let total: u64 = groups.iter().map(|g| g.rows).sum();
    let largest = groups.iter().map(|g| g.rows).max().unwrap_or(0);
    let mut decoded = 0u64;
    for &(from, to) in &slices {
        let slice: u64 = groups
            .iter()
            .filter(|g| g.min <= to && g.max >= from)
            .map(|g| g.rows)
            .sum();
        if slice > 4 * slice_rows.max(largest) {
            return None;
        }
        decoded += slice;
    }
    (decoded <= 3 * total).then_some(slices)
}

/// The rows of `batch` whose `key` is within `[from, to]`.
fn within(batch: RecordBatch, key: &str, from: i64, to: i64) -> Result<RecordBatch> {
    let Some(keys) = crate::store::time_column(&batch, key) else {
        // Not after `conform`, which gives the column its stored type.
        return Err(crate::StoreError::CorruptFiles {
            what: format!("rows merged in order of {key}"),
            reason: "the column is not a time".into(),
        });
    };
    if keys.values().iter().all(|&k| from <= k && k <= to) {
        return Ok(batch);
    }
    let keep: arrow::array::BooleanArray = keys
        .values()
        .iter()
        .map(|&k| Some(from <= k && k <= to))
        .collect();
    Ok(arrow::compute::filter_record_batch(&batch, &keep)?)
}

/// `batches`' rows in order of `table`'s sort key (stable), in batches of
/// at most 64 Ki rows. CPU work: call it on the blocking pool.
fn sorted(table: Table, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    let order = crate::store::sort_by_start(table, &batches, crate::store::every_row(&batches));
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    order
        .chunks(64 << 10)
        .map(|chunk| Ok(crate::gather::gather(&refs, chunk)?))
        .collect()
}

impl Store {
    /// How to merge `files` (of a time table sorted by `key`) in order of
    /// time, from their footers: `None` when a file's statistics cannot
    /// place its rows ([`Store::keyed_groups`]) or its row groups span too
    /// much time ([`time_slices`]).
    async fn time_order(
        &self,
        files: &[DataFile],
        key: &str,
        slice_rows: u64,
    ) -> Result<Option<TimeOrder>> {
        // Owned futures (borrowed ones make the compaction's future not
        // `Send` for every lifetime, as `tokio::spawn` needs).
        let keyed: Vec<Option<KeyedFile>> = futures::stream::iter(files.to_vec())
            .map(|f| {
                let (store, key) = (self.clone(), key.to_string());
                async move { store.keyed_groups(&f, &key).await }
            })
            .buffered(8)
            .try_collect()
            .await?;
        let Some(files) = keyed.into_iter().collect::<Option<Vec<KeyedFile>>>() else {
            return Ok(None);
        };
        let groups: Vec<KeyedGroup> = files.iter().flat_map(|f| f.groups.clone()).collect();
        // Many files over the same time make every slice cut through a
        // row group of each: larger slices then, up to 16 times the size
        // asked for, before merging file after file. CPU work (a pass over
        // the row groups per slice): on the blocking pool.
        let slices = tokio::task::spawn_blocking(move || {
            let mut rows = slice_rows.max(1);
            loop {
                if let Some(slices) = time_slices(&groups, rows) {
                    return Some((slices, rows));
                }
                if rows >= slice_rows.max(1).saturating_mul(MAX_SLICE_GROWTH) {
                    return None;
                }
                rows = rows.saturating_mul(2);
            }
        })
        .await
        .map_err(|e| crate::StoreError::Worker(e.to_string()))?;
        Ok(slices.map(|(slices, slice_rows)| TimeOrder {
            files,
            slices,
            slice_rows,
        }))
    }

    /// The rows of `order`'s files in order of time: slice after slice,
    /// the row groups that may hold a slice's rows are read (ranged reads),
    /// its rows kept and sorted. The next slice is read and sorted on a
    /// task of its own while the caller encodes one (both cores work):
    /// memory holds about four slices' rows.
    fn time_ordered(
        &self,
        table: Table,
        order: TimeOrder,
    ) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
        let files = std::sync::Arc::new(order.files);
        let store = self.clone();
        futures::stream::iter(order.slices)
            .map(move |slice| {
                let (store, files) = (store.clone(), files.clone());
                crate::store::Aborting(tokio::spawn(async move {
                    store.read_slice(table, files, slice).await
                }))
            })
            .buffered(2)
            .map(|joined| joined.map_err(|e| crate::StoreError::Worker(e.to_string()))?)
            .map_ok(|rows| futures::stream::iter(rows.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    /// The rows of `files` whose sort key is within `(from, to)`
    /// (inclusive), sorted: their row groups that may hold such rows read.
    async fn read_slice(
        &self,
        table: Table,
        files: std::sync::Arc<Vec<KeyedFile>>,
        (from, to): (i64, i64),
    ) -> Result<Vec<RecordBatch>> {
        let key = crate::layout::sort_key(table.name()).unwrap_or_default();
        let schema = crate::layout::stored_schema(table);
        // Owned futures, as in `time_order`.
        let mut read = futures::stream::iter(0..files.len())
            .map(|i| {
                let (store, files) = (self.clone(), files.clone());
                async move {
                    let f = &files[i];
                    let groups: Vec<usize> = f
                        .groups
                        .iter()
                        .filter(|g| g.min <= to && g.max >= from)
                        .map(|g| g.group)
                        .collect();
                    if groups.is_empty() {
                        return Ok(futures::stream::empty().boxed());
                    }
                    store.read_groups(f, groups).await
                }
            })
            .buffered(4)
            .try_flatten();
        let mut batches = Vec::new();
        while let Some(b) = read.try_next().await? {
            let b = within(conform(b, &schema)?, key, from, to)?;
            if b.num_rows() > 0 {
                batches.push(b);
            }
        }
        tokio::task::spawn_blocking(move || sorted(table, batches))
            .await
            .map_err(|e| crate::StoreError::Worker(e.to_string()))?
    }

    /// Writes the rows of `files` (one group of `table`, of host bucket
    /// `bucket`) into new files of `batch`: in order of time by `order`,
    /// else file after file. The rows written are counted against what
    /// the files hold (their footers in order of time, the manifest's
    /// counts else): a difference is [`crate::StoreError::CorruptFiles`].
    async fn merge_group(
        &self,
        batch: &mut crate::PendingBatch,
        table: Table,
        bucket: Option<u32>,
        files: &[DataFile],
        order: Option<TimeOrder>,
    ) -> Result<()> {
        let schema = crate::layout::stored_schema(table);
        let (expected, held) = match &order {
            Some(order) => (order.rows(), "their footers count"),
            None => (files.iter().map(|f| f.rows).sum(), "the manifest counts"),
        };
        let rows = match order {
            Some(order) => self.time_ordered(table, order),
            None => self
                .scan_files(files.to_vec(), None)
                .map({
                    let schema = schema.clone();
                    move |b| b.and_then(|b| conform(b, &schema))
                })
                .boxed(),
        };
        let (id, before) = (batch.id().to_string(), batch.written().len());
        batch
            .write_parquet_stream(table.name(), &schema, rows, bucket, |part| {
                paths::data_file(table, &id, part)
            })
            .await?;
        let written: u64 = batch.written()[before..].iter().map(|f| f.rows).sum();
        if written == expected {
            return Ok(());
        }
        Err(crate::StoreError::CorruptFiles {
            what: format!("{} files of table {}", files.len(), table.name()),
            reason: format!("{held} {expected} rows, a merge of them read {written}"),
        })
    }

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
            .filter(|f| is_small(f, opts))
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
        batch.kind = Some(crate::store::COMPACT);
        let forgets = !old.is_empty();
        if forgets {
            batch.forget_retired(old);
        }
        let total = groups.len();
        progress(0, total);
        for (i, (table, bucket, files)) in groups.into_iter().enumerate() {
            let key = crate::layout::sort_key(table.name());
            let order = match key {
                Some(key) => match self.time_order(&files, key, opts.slice_rows).await {
                    Ok(order) => order,
                    Err(e) => {
                        batch.abort().await;
                        return Err(e);
                    }
                },
                None => None,
            };
            // The merge's memory, held until the group is merged.
            let (order, _memory) = match &opts.memory {
                None => (order, None),
                Some(gate) => match gate.take_for(order) {
                    Ok((order, grant)) => (order, Some(grant)),
                    Err(why) => {
                        report.deferred += 1;
                        report.deferred_because = Some(why);
                        progress(i + 1, total);
                        continue;
                    }
                },
            };
            report.bytes_before += files.iter().map(|f| f.bytes).sum::<u64>();
            *report.merged.entry(table.name().to_string()).or_insert(0) += files.len();
            let mut in_time = order.is_some();
            let kept = batch.written().len();
            let mut result = self
                .merge_group(&mut batch, table, bucket, &files, order)
                .await;
            if in_time && matches!(result, Err(crate::StoreError::CorruptFiles { .. })) {
                // The footers did not place every row in time: the group
                // again, file after file (its rows then checked against
                // the manifest's counts).
                if let Err(e) = &result {
                    log::warn!("compaction: {e}; merging them file after file");
                }
                batch.discard_since(kept).await;
                in_time = false;
                result = self
                    .merge_group(&mut batch, table, bucket, &files, None)
                    .await;
            }
            if let Err(e) = result {
                batch.abort().await;
                return Err(e);
            }
            if in_time {
                report.time_ordered += 1;
            } else if key.is_some() {
                report.file_order += 1;
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
        if report.files_merged() == 0 && !forgets && !rebuild {
            // Every group deferred: nothing to commit.
            batch.abort().await;
            return Ok(report);
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, ArrayRef, Float64Array, StringArray, TimestampMicrosecondArray};
    use std::sync::Arc;

    fn group(min: i64, max: i64, rows: u64) -> KeyedGroup {
        KeyedGroup {
            group: 0,
            min,
            max,
            rows,
        }
    }

    #[test]
    fn time_slices_cut_at_row_groups_and_refuse_wide_ones() {
        // Two files over the same hour, each in narrow row groups of 100
        // rows (10 minutes each): slices of at least 250 rows start at a
        // row group's least key and cover every key.
        let minute = 60_000_000i64;
        let mut groups = Vec::new();
        for _file in 0..2 {
            for g in 0..6 {
                groups.push(group(g * 10 * minute, (g * 10 + 9) * minute, 100));
            }
        }
        let slices = time_slices(&groups, 250).unwrap();
        assert_eq!(
            slices,
            [
                (i64::MIN, 20 * minute - 1),
                (20 * minute, 40 * minute - 1),
                (40 * minute, i64::MAX)
            ]
        );
        // Every slice reads 400 of the 1,200 rows: each row group once.
        // Row groups that each span the whole hour (files not sorted by
        // time): one slice would hold all 1,200 rows at once.
        let wide =
            |n: usize| -> Vec<KeyedGroup> { (0..n).map(|_| group(0, 60 * minute, 100)).collect() };
        assert_eq!(time_slices(&wide(12), 250), None);
        assert_eq!(
            time_slices(&wide(12), 300),
            Some(vec![(i64::MIN, i64::MAX)])
        );
        // Beside an hour of one-minute groups, every slice reads the wide
        // groups again: with 7 of them more than three times the rows in
        // all, with one not.
        let narrow: Vec<KeyedGroup> = (0..60)
            .map(|m| group(m * minute, (m + 1) * minute - 1, 100))
            .collect();
        let with =
            |n: usize| -> Vec<KeyedGroup> { narrow.iter().copied().chain(wide(n)).collect() };
        assert_eq!(time_slices(&with(7), 250), None);
        let slices = time_slices(&with(1), 250).unwrap();
        assert_eq!(slices.len(), 21);
        assert_eq!(slices[1], (2 * minute, 5 * minute - 1));
        // No rows: one slice, nothing read.
        assert_eq!(time_slices(&[], 250), Some(vec![(i64::MIN, i64::MAX)]));
    }

    /// `host_windows` rows of `hosts`, a window a second from `t0`, `n` each.
    fn host_rows(hosts: &[&str], t0: i64, n: i64) -> RecordBatch {
        let mut host = Vec::new();
        let mut start = Vec::new();
        for h in hosts {
            for i in 0..n {
                host.push(*h);
                start.push(t0 + i * 1_000_000);
            }
        }
        host_rows_at(host, start)
    }

    /// `host_windows` rows of these hosts and starts, a second long.
    fn host_rows_at(host: Vec<&str>, start: Vec<i64>) -> RecordBatch {
        let end: Vec<i64> = start.iter().map(|s| s + 1_000_000).collect();
        let used: Vec<f64> = (0..host.len()).map(|i| i as f64).collect();
        let rows = host.len();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(host)),
            Arc::new(TimestampMicrosecondArray::from(start).with_timezone("UTC")),
            Arc::new(TimestampMicrosecondArray::from(end).with_timezone("UTC")),
            Arc::new(StringArray::from(vec!["cpu"; rows])),
            Arc::new(Float64Array::from(vec![Some(4.0); rows])),
            Arc::new(Float64Array::from(used)),
            Arc::new(StringArray::from(vec![None::<&str>; rows])),
        ];
        RecordBatch::try_new(Table::HostWindows.schema(), cols).unwrap()
    }

    /// One ingest of `rows` into `store` (one batch, one commit).
    async fn ingest(store: &Store, rows: RecordBatch) {
        let mut batch = store.begin();
        batch.write(Table::HostWindows, &[rows]).await.unwrap();
        batch.commit().await.unwrap();
    }

    /// 40 ingests of two rows each, a day apart (`h1` at `i`, `h2` a day
    /// later), into `store`; their rows, in order.
    async fn forty_ingests_a_day_wide(store: &Store) -> Vec<(String, i64, u64)> {
        let day = 86_400_000_000i64;
        let mut input = Vec::new();
        for i in 0..40i64 {
            let rows = host_rows_at(vec!["h1", "h2"], vec![i, day + i]);
            input.extend(rows_of(std::slice::from_ref(&rows)));
            ingest(store, rows).await;
        }
        input
    }

    /// Three ingests of two hosts each (`h1`-`h6`), 5,000 rows a host a
    /// second apart from `t0`, each ingest starting 777 s after the one
    /// before: slices then cut through row groups, whose rows outside the
    /// slice are left for the next. Their rows, in order.
    async fn three_ingests_777_s_apart(store: &Store, t0: i64) -> Vec<(String, i64, u64)> {
        let mut input = Vec::new();
        for (k, hosts) in [["h1", "h2"], ["h3", "h4"], ["h5", "h6"]]
            .iter()
            .enumerate()
        {
            let rows = host_rows(hosts, t0 + k as i64 * 777_000_000, 5_000);
            input.extend(rows_of(std::slice::from_ref(&rows)));
            ingest(store, rows).await;
        }
        input
    }

    /// Every object under `tables/` of `store`, sorted.
    async fn listing(store: &Store) -> Vec<String> {
        let mut l: Vec<String> = store
            .object_store()
            .list(Some(&store.path("tables")))
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        l.sort();
        l
    }

    /// Replaces the stored object of `file` by a Parquet file of `rows`
    /// (its footer true): the manifest still counts the rows it had.
    /// Compacts `store` (manifest `before`) with `slice_rows`, which must
    /// fail as corrupt files: its `what` and `reason`, once the manifest,
    /// its files and every stored object are checked to be as they were.
    async fn refused_as_corrupt(
        store: &Store,
        before: &crate::Manifest,
        slice_rows: u64,
    ) -> (String, String) {
        let stored = listing(store).await;
        let opts = CompactOptions {
            slice_rows,
            ..CompactOptions::default()
        };
        let refused = match store.compact(&opts, |_, _| {}).await {
            Err(crate::StoreError::CorruptFiles { what, reason }) => (what, reason),
            other => panic!("not refused as corrupt: {other:?}"),
        };
        let after = store.manifest().await.unwrap();
        assert_eq!(after.version, before.version);
        assert_eq!(after.files, before.files);
        assert_eq!(listing(store).await, stored);
        refused
    }

    async fn replace_rows(store: &Store, file: &DataFile, rows: &[RecordBatch]) {
        let mut w =
            parquet::arrow::ArrowWriter::try_new(Vec::new(), Table::HostWindows.schema(), None)
                .unwrap();
        for b in rows {
            w.write(b).unwrap();
        }
        store
            .object_store()
            .put(&store.path(&file.path), w.into_inner().unwrap().into())
            .await
            .unwrap();
    }

    /// Every row of `batches` as text (host, start, used), in order.
    fn rows_of(batches: &[RecordBatch]) -> Vec<(String, i64, u64)> {
        use arrow::array::AsArray;
        let mut out = Vec::new();
        for b in batches {
            let host = b.column_by_name("host").unwrap().as_string::<i32>();
            let start = b
                .column_by_name("window_start")
                .unwrap()
                .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
            let used = b
                .column_by_name("used")
                .unwrap()
                .as_primitive::<arrow::datatypes::Float64Type>();
            for i in 0..b.num_rows() {
                assert!(used.is_valid(i));
                out.push((
                    host.value(i).to_string(),
                    start.value(i),
                    used.value(i).to_bits(),
                ));
            }
        }
        out
    }

    #[tokio::test]
    async fn time_tables_are_merged_in_order_of_time() {
        // Host metrics come host by host: each ingest holds a few hosts over
        // the whole time, so each of its files spans all of it. Merged file
        // after file, the rows of any minute lie in every part of the
        // merged file; merged in order of time, in one stretch.
        let store = Store::open("memory://").unwrap();
        let t0 = 1_700_000_000_000_000i64;
        let input = three_ingests_777_s_apart(&store, t0).await;
        let before = store.manifest().await.unwrap();
        assert_eq!(before.files_named("host_windows").count(), 3);
        let opts = CompactOptions {
            slice_rows: 7_000,
            ..CompactOptions::default()
        };
        let report = store.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!(report.rows, 30_000);
        let after = store.manifest().await.unwrap();
        let files: Vec<DataFile> = after.files_named("host_windows").cloned().collect();
        assert_eq!(files.len(), 1);
        let merged: Vec<RecordBatch> = store
            .scan_files(files.clone(), None)
            .try_collect()
            .await
            .unwrap();
        let got = rows_of(&merged);
        // Every row, once (the input's rows, sorted the same way).
        let mut want = input.clone();
        want.sort();
        let mut have = got.clone();
        have.sort();
        assert!(have == want, "the merged rows are not the input's");
        // In order of time, and the input's order among rows of the same
        // second (the ingests' order: h1 before h3 before h5).
        let mut by_time = input;
        by_time.sort_by_key(|r| r.1);
        let first_out_of_order = got.iter().zip(&by_time).position(|(a, b)| a != b);
        assert_eq!(first_out_of_order, None, "rows not in order of time");
        assert_eq!(report.time_ordered, 1);
        assert_eq!(
            files[0].window_span,
            Some([t0, t0 + (2 * 777 + 5_000) * 1_000_000])
        );
        // The row groups of the merged file follow each other in time.
        let keyed = store
            .keyed_groups(&files[0], "window_start")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(keyed.groups.len(), 8);
        for w in keyed.groups.windows(2) {
            assert!(w[0].max <= w[1].min, "{w:?}");
        }
    }

    #[tokio::test]
    async fn files_whose_row_groups_span_all_the_time_are_merged_file_after_file() {
        // 40 ingests of two rows each, a day apart: every row group spans
        // the whole day, so every slice would read them all. Slices up to
        // 16 times larger do not help; the group is merged as before.
        let store = Store::open("memory://").unwrap();
        let input = forty_ingests_a_day_wide(&store).await;
        let opts = CompactOptions {
            slice_rows: 1,
            ..CompactOptions::default()
        };
        let report = store.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!((report.time_ordered, report.file_order), (0, 1));
        let files: Vec<DataFile> = store
            .manifest()
            .await
            .unwrap()
            .files_named("host_windows")
            .cloned()
            .collect();
        assert_eq!(files.len(), 1);
        let merged: Vec<RecordBatch> = store.scan_files(files, None).try_collect().await.unwrap();
        // File after file: the input's rows in the input's order.
        assert!(rows_of(&merged) == input, "not the input's rows in order");
        // Asked for slices of 5 rows, the compaction makes them 20 (four
        // times that is the 80 rows every slice reads): in order of time.
        let store2 = Store::open("memory://").unwrap();
        forty_ingests_a_day_wide(&store2).await;
        let opts = CompactOptions {
            slice_rows: 5,
            ..CompactOptions::default()
        };
        let report = store2.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!((report.time_ordered, report.file_order), (1, 0));
    }

    #[tokio::test]
    async fn a_rewrite_gives_a_file_of_an_older_layout_the_current_one() {
        // A file written by an older version (here: one row group of
        // 10,000 rows, uncompressed), alone in its table: a compaction
        // leaves it; a rewrite writes its rows again, in groups of 4 Ki
        // rows compressed with Snappy: the same rows, by their start.
        use parquet::file::reader::FileReader;
        let store = Store::open("memory://").unwrap();
        let t0 = 1_700_000_000_000_000i64;
        let rows = host_rows(&["h1", "h2"], t0, 5_000);
        ingest(&store, rows.clone()).await;
        let before = store.manifest().await.unwrap();
        let old: Vec<DataFile> = before.files_named("host_windows").cloned().collect();
        assert_eq!(old.len(), 1);
        replace_rows(&store, &old[0], std::slice::from_ref(&rows)).await;
        let layout = |bytes: bytes::Bytes| {
            let r = parquet::file::reader::SerializedFileReader::new(bytes).unwrap();
            let m = r.metadata();
            let groups: Vec<i64> = m.row_groups().iter().map(|g| g.num_rows()).collect();
            (groups, m.row_group(0).column(0).compression())
        };
        let stored = |f: &DataFile| {
            let (store, f) = (store.clone(), f.clone());
            async move { store.fetch(&f).await.unwrap() }
        };
        assert_eq!(
            layout(stored(&old[0]).await),
            (vec![10_000], parquet::basic::Compression::UNCOMPRESSED)
        );
        let report = store
            .compact(&CompactOptions::default(), |_, _| {})
            .await
            .unwrap();
        assert_eq!(report.files_merged(), 0);
        // Not small by size either: only the rewrite takes it.
        let opts = CompactOptions {
            small_bytes: 1,
            ..Default::default()
        };
        let report = store.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!(report.files_merged(), 0);
        let opts = CompactOptions {
            rewrite: true,
            ..opts
        };
        let report = store.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!(report.files_merged(), 1);
        let after = store.manifest().await.unwrap();
        let new: Vec<DataFile> = after.files_named("host_windows").cloned().collect();
        assert_eq!(new.len(), 1);
        assert_ne!(new[0].path, old[0].path);
        assert_eq!(
            layout(stored(&new[0]).await),
            (vec![4096, 4096, 1808], parquet::basic::Compression::SNAPPY)
        );
        let read: Vec<RecordBatch> = store
            .scan_files(new.clone(), None)
            .try_collect()
            .await
            .unwrap();
        let got = rows_of(&read);
        assert!(got.windows(2).all(|w| w[0].1 <= w[1].1), "by start");
        let (mut got, mut want) = (got, rows_of(&[rows]));
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn files_written_full_are_not_merged_again() {
        // A merge writes files of `rows_per_file` rows; each is smaller than
        // `small_bytes`, but merging it again would gain nothing, and the
        // background compaction would do so every minute, forever.
        let store = Store::open("memory://").unwrap();
        let per_file = crate::layout::rows_per_file("host_windows");
        let t0 = 1_700_000_000_000_000i64;
        let half = (per_file * 2 / 3) as i64;
        ingest(&store, host_rows(&["h1"], t0, half)).await;
        ingest(&store, host_rows(&["h1"], t0 + half * 1_000_000, half)).await;
        let files = |m: &crate::manifest::Manifest| -> Vec<(String, u64)> {
            m.files_named("host_windows")
                .map(|f| (f.path.clone(), f.rows))
                .collect()
        };
        let ingested = files(&store.manifest().await.unwrap()).len();
        let opts = CompactOptions::default();
        let report = store.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!(report.files_merged(), ingested);
        let merged = files(&store.manifest().await.unwrap());
        let full: Vec<_> = merged
            .iter()
            .filter(|f| f.1 == per_file as u64)
            .cloned()
            .collect();
        assert_eq!(full.len(), 1, "{merged:?}");
        // Under `small_bytes` (else this tests nothing new).
        let full_bytes = store
            .manifest()
            .await
            .unwrap()
            .files
            .iter()
            .find(|f| f.path == full[0].0)
            .map(|f| f.bytes)
            .unwrap();
        assert!(full_bytes < opts.small_bytes, "{full_bytes}");
        assert!(merged.iter().all(|f| f.1 as usize <= per_file));
        // Nothing new: nothing to merge, and the background compaction
        // is not due (one file to merge).
        let auto = crate::housekeeping::AutoCompact {
            min_files: 2,
            ..Default::default()
        };
        assert!(!auto.due(&store.manifest().await.unwrap()));
        let report = store.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!(report.files_merged(), 0);
        assert_eq!(report.version, None);
        // A new ingest is merged with the part-full file only.
        ingest(&store, host_rows(&["h1"], t0 + 2 * half * 1_000_000, 10)).await;
        let report = store.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!(report.files_merged(), 2);
        assert_eq!(report.rows, (2 * half + 10) as u64 - per_file as u64);
        let after = files(&store.manifest().await.unwrap());
        assert!(after.contains(&full[0]), "{after:?}");
        assert_eq!(
            after.iter().map(|f| f.1).sum::<u64>(),
            (2 * half + 10) as u64
        );
    }

    #[tokio::test]
    async fn each_merge_takes_its_memory_from_the_gate() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let store = Store::open("memory://").unwrap();
        let t0 = 1_700_000_000_000_000i64;
        three_ingests_777_s_apart(&store, t0).await;
        let paths = |m: &crate::manifest::Manifest| -> Vec<String> {
            m.files.iter().map(|f| f.path.clone()).collect()
        };
        let before = paths(&store.manifest().await.unwrap());
        // Refused: the group is left as it was, nothing committed.
        let refused = CompactOptions {
            memory: Some(MemoryGate::new(|bytes| Err(format!("no room for {bytes}")))),
            ..CompactOptions::default()
        };
        let report = store.compact(&refused, |_, _| {}).await.unwrap();
        assert_eq!((report.deferred, report.files_merged()), (1, 0));
        assert_eq!(report.version, None);
        // The last refusal: of a merge file after file.
        assert_eq!(
            report.deferred_because,
            Some(format!("no room for {}", MERGE_FILE_ORDER_BYTES))
        );
        let want = merge_memory(Some(SLICE_ROWS));
        assert!(want > MERGE_FILE_ORDER_BYTES);
        assert_eq!(paths(&store.manifest().await.unwrap()), before);
        // Granted: held while the group merges, given back after.
        let held = Arc::new(AtomicUsize::new(0));
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Grant(Arc<AtomicUsize>);
        impl Drop for Grant {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let granted = CompactOptions {
            memory: Some(MemoryGate::new({
                let (held, asked) = (held.clone(), asked.clone());
                move |bytes| {
                    asked.lock().unwrap().push(bytes);
                    held.fetch_add(1, Ordering::SeqCst);
                    Ok(Box::new(Grant(held.clone())) as MemoryGrant)
                }
            })),
            ..CompactOptions::default()
        };
        let mut held_when_merged = Vec::new();
        let report = store
            .compact(&granted, |done, _| {
                if done > 0 {
                    held_when_merged.push(held.load(Ordering::SeqCst));
                }
            })
            .await
            .unwrap();
        assert_eq!((report.deferred, report.files_merged()), (0, 3));
        assert_eq!(*asked.lock().unwrap(), vec![want]);
        assert_eq!(held_when_merged, vec![1]);
        assert_eq!(held.load(Ordering::SeqCst), 0);
        assert_eq!(report.time_ordered, 1);
    }

    #[tokio::test]
    async fn a_merge_refused_the_memory_of_time_order_goes_file_after_file() {
        // Two groups (tasks, host rows): the gate grants only the memory
        // of a merge file after file, and that only once. The first group
        // merges file after file, the second waits; one commit.
        let store = Store::open("memory://").unwrap();
        let t0 = 1_700_000_000_000_000i64;
        for k in 0..3i64 {
            ingest(&store, host_rows(&["h1"], t0 + k * 1_000_000_000, 100)).await;
            let mut batch = store.begin();
            let tasks = crate::store::tests::task_rows(k as usize * 10, 10);
            batch.write(Table::Tasks, &[tasks]).await.unwrap();
            batch.commit().await.unwrap();
        }
        let before = store.manifest().await.unwrap();
        let paths_of = |m: &crate::manifest::Manifest, table: &str| -> Vec<String> {
            m.files_named(table).map(|f| f.path.clone()).collect()
        };
        assert_eq!(paths_of(&before, "tasks").len(), 3);
        assert_eq!(paths_of(&before, "host_windows").len(), 3);
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let gate = CompactOptions {
            memory: Some(MemoryGate::new({
                let asked = asked.clone();
                move |bytes| {
                    let mut asked = asked.lock().unwrap();
                    let first = !asked.contains(&MERGE_FILE_ORDER_BYTES);
                    asked.push(bytes);
                    if bytes <= MERGE_FILE_ORDER_BYTES && first {
                        Ok(Box::new(()) as MemoryGrant)
                    } else {
                        Err(format!("no room for {bytes}"))
                    }
                }
            })),
            ..CompactOptions::default()
        };
        let report = store.compact(&gate, |_, _| {}).await.unwrap();
        let time = merge_memory(Some(SLICE_ROWS));
        assert_eq!(
            *asked.lock().unwrap(),
            [time, MERGE_FILE_ORDER_BYTES, time, MERGE_FILE_ORDER_BYTES]
        );
        assert_eq!((report.file_order, report.time_ordered), (1, 0));
        assert_eq!(report.deferred, 1);
        assert!(report.version.is_some());
        // The first group in `Table::ALL`'s order merged, the other waits
        // with its files as they were.
        let (merged, waiting) = ("tasks", "host_windows");
        let after = store.manifest().await.unwrap();
        assert_eq!(report.merged.get(merged), Some(&3));
        assert!(!report.merged.contains_key(waiting));
        assert_eq!(after.files_named(merged).count(), 1);
        assert_eq!(paths_of(&after, waiting), paths_of(&before, waiting));
        // The query index's three files (one a batch of tasks) merged
        // too: they ask the gate for nothing.
        let index = before.files_named(crate::layout::QUERY_SPANS);
        assert_eq!(
            report.bytes_before,
            before.files_named(merged).map(|f| f.bytes).sum::<u64>()
                + index.map(|f| f.bytes).sum::<u64>()
        );
        assert_eq!(after.rows_of(Table::Tasks), 30);
        assert_eq!(after.rows_of(Table::HostWindows), 300);
    }

    #[tokio::test]
    async fn an_index_rebuild_is_committed_when_no_group_merges() {
        // A store with tasks and no query index (written before there was
        // one): compaction rebuilds the index from the tasks, and commits
        // it even when there is no group to merge, or every group waits.
        for refuse in [false, true] {
            let store = Store::open("memory://").unwrap();
            let mut batch = store.begin();
            batch
                .write(Table::Tasks, &[crate::store::tests::task_rows(0, 20)])
                .await
                .unwrap();
            batch.commit().await.unwrap();
            ingest(&store, host_rows(&["h1"], 0, 10)).await;
            ingest(&store, host_rows(&["h1"], 20_000_000, 10)).await;
            let index: Vec<String> = store
                .manifest()
                .await
                .unwrap()
                .files_named(crate::layout::QUERY_SPANS)
                .map(|f| f.path.clone())
                .collect();
            assert_eq!(index.len(), 1);
            let mut batch = store.begin();
            batch.merged_files(crate::layout::QUERY_SPANS, index);
            batch.commit().await.unwrap();
            let opts = CompactOptions {
                memory: refuse.then(|| MemoryGate::new(|_| Err("no room".to_string()))),
                // Without the gate, the host rows' two files are too few.
                min_files: if refuse { 2 } else { 3 },
                ..CompactOptions::default()
            };
            let report = store.compact(&opts, |_, _| {}).await.unwrap();
            assert!(report.index_rebuilt);
            assert_eq!(report.deferred, usize::from(refuse));
            assert_eq!(report.files_merged(), 0);
            assert!(report.version.is_some(), "the rebuild was not committed");
            let m = store.manifest().await.unwrap();
            assert_eq!(m.files_named(crate::layout::QUERY_SPANS).count(), 1);
            // Rebuilt: nothing to rebuild the next time.
            let again = store.compact(&opts, |_, _| {}).await.unwrap();
            assert!(!again.index_rebuilt);
        }
    }

    /// Rewrites the footer of `file`: the `window_start` statistics of its
    /// row group `g` say that every row of it starts at the group's least
    /// start. The rows stay as they were (a footer that lies).
    async fn footer_places_group_at_its_start(store: &Store, file: &DataFile, g: usize) {
        use parquet::file::metadata::{ParquetMetaDataReader, ParquetMetaDataWriter};
        use parquet::file::statistics::Statistics;
        let bytes = store.fetch(file).await.unwrap();
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .unwrap();
        let tail = bytes.len() - 8;
        let footer = u32::from_le_bytes(bytes[tail..tail + 4].try_into().unwrap()) as usize;
        let column = meta
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.name() == "window_start")
            .unwrap();
        let mut builder = meta.into_builder();
        let mut groups = builder.take_row_groups();
        let mut columns = groups[g].columns().to_vec();
        let least = match columns[column].statistics() {
            Some(Statistics::Int64(s)) => *s.min_opt().unwrap(),
            other => panic!("window_start statistics: {other:?}"),
        };
        columns[column] = columns[column]
            .clone()
            .into_builder()
            .set_statistics(Statistics::int64(
                Some(least),
                Some(least),
                None,
                Some(0),
                false,
            ))
            .build()
            .unwrap();
        groups[g] = groups[g]
            .clone()
            .into_builder()
            .set_column_metadata(columns)
            .build()
            .unwrap();
        let meta = builder.set_row_groups(groups).build();
        let mut out = bytes[..tail - footer].to_vec();
        ParquetMetaDataWriter::new(&mut out, &meta)
            .finish()
            .unwrap();
        store
            .object_store()
            .put(&store.path(&file.path), out.into())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn footers_that_misplace_rows_in_time_are_merged_file_after_file() {
        // The three files of `time_tables_are_merged_in_order_of_time`,
        // the first row group of the first file's footer saying that all
        // its rows start at its first start. A merge in order of time
        // reads that group in the first slice only, so the rows of it
        // that start in the second are missing from what it wrote: the
        // count shows it, and the group is merged again file after file,
        // every row once.
        let store = Store::open("memory://").unwrap();
        let t0 = 1_700_000_000_000_000i64;
        let mut input = three_ingests_777_s_apart(&store, t0).await;
        let before = store.manifest().await.unwrap();
        let first = before.files_named("host_windows").next().unwrap().clone();
        footer_places_group_at_its_start(&store, &first, 0).await;
        let keyed = store
            .keyed_groups(&first, "window_start")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((keyed.groups[0].min, keyed.groups[0].max), (t0, t0));
        let opts = CompactOptions {
            slice_rows: 7_000,
            ..CompactOptions::default()
        };
        // The slices (as the merge cuts them) leave rows of that group
        // out of the first: else this tests nothing.
        let slices = time_slices(&keyed_of_all(&store, &before).await, 7_000).unwrap();
        assert!(slices[0].1 < t0 + 2_047 * 1_000_000, "{slices:?}");
        let report = store.compact(&opts, |_, _| {}).await.unwrap();
        assert_eq!((report.time_ordered, report.file_order), (0, 1));
        assert_eq!(report.rows, 30_000);
        let after = store.manifest().await.unwrap();
        let files: Vec<DataFile> = after.files_named("host_windows").cloned().collect();
        assert_eq!(files.len(), 1);
        // The batch's second file: the first, of the merge in order of
        // time, was discarded.
        assert!(
            files[0].path.ends_with("-0001.parquet"),
            "{}",
            files[0].path
        );
        let merged: Vec<RecordBatch> = store.scan_files(files, None).try_collect().await.unwrap();
        let mut have = rows_of(&merged);
        have.sort();
        input.sort();
        assert!(have == input, "the merged rows are not the input's");
        // And nothing but that file is left of the merges (the discarded
        // one in order of time was deleted).
        let listed: Vec<String> = listing(&store)
            .await
            .into_iter()
            .filter(|p| p.contains("tables/host_windows/"))
            .collect();
        assert_eq!(listed.len(), 1 + 3, "{listed:?}");
    }

    /// The keyed row groups of every `host_windows` file of `manifest`.
    async fn keyed_of_all(store: &Store, manifest: &crate::Manifest) -> Vec<KeyedGroup> {
        let mut all = Vec::new();
        for f in manifest.files_named("host_windows") {
            let keyed = store
                .keyed_groups(f, "window_start")
                .await
                .unwrap()
                .unwrap();
            all.extend(keyed.groups);
        }
        all
    }

    #[tokio::test]
    async fn a_merge_that_reads_other_rows_than_the_manifest_counts_commits_nothing() {
        // File after file (rows a day apart), one file replaced by one of
        // three rows where the manifest counts two: the merge reads 81 rows
        // of 80, an error naming the files and the counts; the manifest
        // and every stored file stay as they were, the merged file is
        // deleted.
        let store = Store::open("memory://").unwrap();
        forty_ingests_a_day_wide(&store).await;
        let before = store.manifest().await.unwrap();
        let victim = before.files_named("host_windows").nth(5).unwrap().clone();
        assert_eq!(victim.rows, 2);
        replace_rows(
            &store,
            &victim,
            &[host_rows_at(vec!["h1", "h2", "h3"], vec![7, 8, 9])],
        )
        .await;
        let (what, reason) = refused_as_corrupt(&store, &before, 1).await;
        assert_eq!(what, "40 files of table host_windows");
        assert_eq!(
            reason,
            "the manifest counts 80 rows, a merge of them read 81"
        );
    }

    #[tokio::test]
    async fn misplaced_rows_then_a_miscount_file_after_file_commit_nothing() {
        // Both halves at once: the first file's footer misplaces rows in
        // time (the merge in order of time misses them), and the second
        // file holds a row more than the manifest counts (the merge file
        // after file reads it). The compaction fails, and the manifest and
        // every stored object stay as they were.
        let store = Store::open("memory://").unwrap();
        let t0 = 1_700_000_000_000_000i64;
        three_ingests_777_s_apart(&store, t0).await;
        let before = store.manifest().await.unwrap();
        let files: Vec<DataFile> = before.files_named("host_windows").cloned().collect();
        footer_places_group_at_its_start(&store, &files[0], 0).await;
        // The second file again, with one more row (its footer true).
        let mut more: Vec<RecordBatch> = store
            .scan_files(vec![files[1].clone()], None)
            .try_collect()
            .await
            .unwrap();
        more.push(host_rows_at(vec!["h9"], vec![t0 + 777_000_000]));
        replace_rows(&store, &files[1], &more).await;
        // The merge in order of time is tried first (else this is the test
        // above).
        assert!(time_slices(&keyed_of_all(&store, &before).await, 7_000).is_some());
        let (what, reason) = refused_as_corrupt(&store, &before, 7_000).await;
        assert_eq!(what, "3 files of table host_windows");
        assert_eq!(
            reason,
            "the manifest counts 30000 rows, a merge of them read 30001"
        );
    }
}
