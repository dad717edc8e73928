//! One ingest: read every source, check every row, write the good rows and
//! commit them as one batch.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Instant;

use arrow::array::RecordBatch;
use culprit_core::Table;
use culprit_store::{PendingBatch, Store};
use futures::TryStreamExt;

use crate::error::{IngestError, Result};
use crate::formats::{self, Format, Origin, RawRows};
use crate::hostmetrics::{self, HostMetricsOptions};
use crate::identity;
use crate::sources::SourceFile;
use crate::spark::{self, LogUnit};
use crate::task_index::KeyMap;
use crate::trino;
use crate::validate::{self, BatchDuplicates, Known, Place};

/// Bytes of checked rows buffered per table before they are written out
/// (the unit of the streaming ingest: memory holds about this much per
/// table being read, whatever the input's size; window rows are written in
/// files of this part of the input per host bucket).
const FLUSH_BYTES: usize = 32 << 20;

/// The default cap on what one compressed file (or zip archive) may
/// decode to: 1 GiB. A real Spark event log is far smaller (the largest of
/// the test data, a TPC-DS query on Photon, is 142 MB decoded; rolling logs
/// are cut at 128 MB by default), and a decoded log is held in memory while
/// it is parsed, so the cap is also the most one hostile file can cost.
pub const DEFAULT_MAX_DECODED_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Read every file as this table (else the file's or folder's name says).
    pub table: Option<Table>,
    /// Reject the whole batch when any row is rejected.
    pub strict: bool,
    /// The most bytes one compressed file may decode to: past it the file
    /// is rejected (the rest of the batch goes on), checked as it decodes.
    pub max_decoded_bytes: u64,
    /// How host metrics (Prometheus answers, `sadf -j` files) become
    /// `host_windows` rows.
    pub host_metrics: HostMetricsOptions,
    /// The first tasks read that are held in memory for the whole ingest;
    /// the tasks after them are held a quarter as many at a time, then
    /// spilled to sorted temporary files ([`crate::DEFAULT_MEMORY_TASKS`];
    /// lower only to test the spilled index).
    pub memory_tasks: usize,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            table: None,
            strict: false,
            max_decoded_bytes: DEFAULT_MAX_DECODED_BYTES,
            host_metrics: HostMetricsOptions::default(),
            memory_tasks: crate::DEFAULT_MEMORY_TASKS,
        }
    }
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
    /// Spark event logs (applications) read.
    pub spark_logs: usize,
    /// Trino and Presto queries read (QueryInfo, QueryCompletedEvent).
    pub trino_queries: usize,
    /// Host-metrics files read (Prometheus answers, `sadf -j` files).
    pub host_metrics_files: usize,
    /// Things worth knowing that are not errors: unknown Spark event types
    /// skipped, a cut last line of a log in progress.
    pub notes: Vec<String>,
    pub seconds: f64,
    /// Times the task index spilled tasks to a temporary file (more tasks
    /// than `IngestOptions::memory_tasks`).
    pub index_spills: usize,
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
        let mut kinds = Vec::new();
        if self.spark_logs > 0 {
            kinds.push(format!("{} Spark event logs", self.spark_logs));
        }
        if self.trino_queries > 0 {
            kinds.push(format!("{} Trino/Presto queries", self.trino_queries));
        }
        if self.host_metrics_files > 0 {
            kinds.push(format!("{} host metrics files", self.host_metrics_files));
        }
        let logs = if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        };
        let mut s = format!(
            "{} files{logs}, rows: {rows}; rejected {}",
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
        if self.index_spills > 0 {
            s.push_str(&format!(
                "; task index spilled to disk {} times",
                self.index_spills
            ));
        }
        s.push_str(&format!("; {:.2} s", self.seconds));
        if let Some(v) = self.version {
            s.push_str(&format!(" (store version {v})"));
        }
        s
    }
}

/// An interchange file: the table it holds, its format, the file.
type TableFile = (Table, Format, SourceFile);

/// Ingests the sources into the store as one batch.
pub async fn ingest(
    store: &Store,
    sources: Vec<SourceFile>,
    opts: &IngestOptions,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    let started = Instant::now();
    let mut report = IngestReport::default();
    let (work, candidates) = sort_sources(sources, opts, &mut report);
    let logs = spark::group(candidates);
    let manifest = store.manifest().await?;
    let (mut known, stored_tasks) =
        index_stored(store, &manifest, &work, &logs, opts.memory_tasks).await?;
    known.tasks.expect(expected_tasks(&work));

    let (files, bytes) = total_size(&work, &logs);
    progress.start(files, bytes);
    let mut ctx = Ctx {
        store,
        pending: Some(begin(store)),
        in_flight: None,
        landed: Vec::new(),
        last_part: None,
        hosts_written: HostsWritten::default(),
        manifest: &manifest,
        stored_tasks,
        known: &mut known,
        report: &mut report,
        progress,
        buffered: BTreeMap::new(),
        seen_keys: HashSet::new(),
        seen_sizes: HashSet::new(),
        sources: Vec::new(),
        max_decoded: usize::try_from(opts.max_decoded_bytes).unwrap_or(usize::MAX),
        host_metrics: hostmetrics::Batch::default(),
        host_opts: &opts.host_metrics,
    };
    let read = ctx.read_all(work, logs).await;
    let (mut pending, written) = ctx.land().await;
    for (key, name, size) in std::mem::take(&mut ctx.sources) {
        pending.add_source(key, name, size);
    }
    let read = read.and(written);
    // A failed read of the task index in the last writes (after the last
    // check that took its error) fails the ingest too.
    let read = read.and(known.tasks.take_error().map_or(Ok(()), |e| Err(e.into())));
    report.index_spills = known.tasks.spills();
    progress.finish();
    end_batch(pending, read, opts, &mut report).await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A batch whose window rows are written with the host keys the ingest
/// gives (from its task index; each in its key's bucket), so the batch
/// keeps no map of its own.
fn begin(store: &Store) -> PendingBatch {
    let mut pending = store.begin();
    pending.set_note_tasks(false);
    pending
}

/// Sorts the sources into interchange files (in table order, so tasks are
/// known before their windows) and candidate Spark event logs: the files
/// whose name says no table. A file forced to a table (`--table`) in an
/// unknown format is rejected.
fn sort_sources(
    sources: Vec<SourceFile>,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> (Vec<TableFile>, Vec<SourceFile>) {
    let mut work: Vec<TableFile> = Vec::new();
    let mut candidates = Vec::new();
    for src in sources {
        let table = opts.table.or_else(|| Table::from_file_name(&src.name));
        let format = Format::from_path(&src.name);
        match (table, format) {
            (Some(t), Some(f)) => work.push((t, f, src)),
            (Some(_), None) if opts.table.is_some() => report.rejected.push(Rejection {
                file: src.name,
                location: None,
                reason: "unknown format (expected .parquet, .csv, .jsonl or .ndjson)".into(),
            }),
            _ => candidates.push(src),
        }
    }
    work.sort_by_key(|(t, _, _)| *t);
    (work, candidates)
}

/// What the store already holds that the checks of these inputs need: the
/// runs of stored tasks (for windows) and the keys of the keyed tables
/// they write (for duplicates). An event log writes every keyed table.
///
/// The stored tasks are read as the rows checked need them, by time
/// ([`StoredTasks`]), when the store has a complete query index; without
/// one (its task counts do not add up to the stored tasks: a store an
/// older culprit wrote, until `culprit compact` rebuilds it), every stored
/// task is read here, before the inputs.
async fn index_stored(
    store: &Store,
    manifest: &culprit_store::Manifest,
    work: &[TableFile],
    logs: &[LogUnit],
    memory_tasks: usize,
) -> Result<(Known, StoredTasks)> {
    let mut known = Known::new(memory_tasks);
    let mut stored_tasks = StoredTasks::default();
    let mut tables: HashSet<Table> = work.iter().map(|(t, _, _)| *t).collect();
    if !logs.is_empty() {
        tables.extend([
            Table::Queries,
            Table::Stages,
            Table::Tasks,
            Table::Executors,
        ]);
    }
    if tables.contains(&Table::Tasks) || tables.contains(&Table::TaskWindows) {
        if let Some(spans) = store.query_spans(manifest).await? {
            // The message of an unknown task says why only where a task
            // of that id may be stored at another time.
            known.stored_by_time = manifest.rows_of(Table::Tasks) > 0;
            stored_tasks.spans = Some(spans);
            stored_tasks.files = manifest.files_of(Table::Tasks).cloned().collect();
        } else {
            let mut stored = store.scan_table(manifest, Table::Tasks, Some(&STORED_TASK_COLUMNS));
            while let Some(batch) = stored.try_next().await? {
                validate::index_tasks(std::slice::from_ref(&batch), &mut known, &|_, _| true);
                if let Some(e) = known.tasks.take_error() {
                    return Err(e.into());
                }
            }
        }
    }
    // Every other keyed table (tasks' keys are indexed with their runs).
    let keyed = Table::ALL
        .into_iter()
        .filter(|t| *t != Table::Tasks && !t.key_columns().is_empty());
    for t in keyed {
        if tables.contains(&t) {
            let mut stored = store.scan_table(manifest, t, Some(t.key_columns()));
            while let Some(batch) = stored.try_next().await? {
                validate::index_keys(t, std::slice::from_ref(&batch), &mut known);
            }
        }
    }
    Ok((known, stored_tasks))
}

/// The columns of a stored task its checks need.
const STORED_TASK_COLUMNS: [&str; 4] = ["task_id", "launch_time", "finish_time", "ready_time"];

/// The stored tasks an ingest reads as its rows need them: those that
/// run in the times of the rows checked, and for task rows in the stored
/// spans of their queries ([`validate::Converted::task_times`],
/// [`validate::Converted::task_queries`]), each time read once. An ingest
/// into a large store then reads the stored tasks of its own time, not
/// every task of the store (a few files arriving to a store of 1e7 tasks
/// read all 1e7 of them, seconds for every file `--watch` sees).
///
/// A window lies in its task's run (its check), so a stored task a window
/// row names runs in the row's time; a task row stored before, the same
/// task, runs in its own time and in its query's stored span.
#[derive(Default)]
struct StoredTasks {
    /// The query index (per query, its stored tasks' span), `None` when
    /// every stored task was read before the inputs ([`index_stored`]).
    spans: Option<std::collections::HashMap<String, culprit_store::QuerySpan>>,
    /// The stored `tasks` files (of the ingest's manifest).
    files: Vec<culprit_store::DataFile>,
    /// The times whose stored tasks are in the task index: sorted, apart.
    read: Vec<(i64, i64)>,
}

impl StoredTasks {
    /// The parts of `[a, b]` not read yet.
    fn unread(&self, (a, b): (i64, i64)) -> Vec<(i64, i64)> {
        let mut pieces = Vec::new();
        let mut from = a;
        for &(x, y) in &self.read {
            if y < from {
                continue;
            }
            if x > b {
                break;
            }
            if x > from {
                pieces.push((from, x - 1));
            }
            if y >= b {
                return pieces;
            }
            from = from.max(y + 1);
        }
        pieces.push((from, b));
        pieces
    }

    /// Whether a run `[first, last]` overlaps the times read.
    fn was_read(&self, first: i64, last: i64) -> bool {
        // The first time read that ends at or after `first`.
        let at = self.read.partition_point(|&(_, y)| y < first);
        self.read.get(at).is_some_and(|&(x, _)| x <= last)
    }

    /// Notes `[a, b]` as read (merged with the times it touches).
    fn note(&mut self, (a, b): (i64, i64)) {
        let (mut a, mut b) = (a, b);
        self.read.retain(|&(x, y)| {
            let apart = y.saturating_add(1) < a || b.saturating_add(1) < x;
            if !apart {
                a = a.min(x);
                b = b.max(y);
            }
            apart
        });
        let at = self.read.partition_point(|&(x, _)| x < a);
        self.read.insert(at, (a, b));
    }
}

/// The task rows the local Parquet `tasks` files hold, by their footers
/// (other inputs' rows are not known before they are read), each at most
/// its file's bytes (a row of tasks takes more than a byte; a footer can
/// claim any number).
fn expected_tasks(work: &[TableFile]) -> usize {
    work.iter()
        .filter(|(t, f, _)| *t == Table::Tasks && *f == Format::Parquet)
        .filter_map(|(_, _, src)| {
            let rows = formats::parquet_rows(src.local_path()?)?;
            Some(usize::try_from(rows.min(src.size)).unwrap_or(usize::MAX))
        })
        .fold(0usize, usize::saturating_add)
}

/// Files and bytes to read, for the progress bar.
fn total_size(work: &[TableFile], logs: &[LogUnit]) -> (usize, u64) {
    let files = work.len() + logs.iter().map(|l| l.parts.len()).sum::<usize>();
    let bytes = work.iter().map(|(_, _, s)| s.size).sum::<u64>()
        + logs
            .iter()
            .flat_map(|l| l.parts.iter().map(|p| p.size))
            .sum::<u64>();
    (files, bytes)
}

/// Ends the batch: aborted after an error reading it, in strict mode when
/// a row was rejected, or when nothing was read at all; else committed (the
/// report gets the rows and the store version).
async fn end_batch(
    pending: PendingBatch,
    read: Result<()>,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<()> {
    if let Err(e) = read {
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
    Ok(())
}

/// Checked rows of one table waiting to be written.
#[derive(Default)]
struct Buffer {
    batches: Vec<RecordBatch>,
    /// Per batch, where its rows came from (window tables only).
    places: Vec<Vec<Place>>,
    /// Per batch, the host key of each row (`task_windows` only).
    host_keys: Vec<Vec<u32>>,
    /// Per batch, how a window identity seen before in this ingest is
    /// treated.
    modes: Vec<BatchDuplicates>,
    bytes: usize,
}

/// The digests of a part's window rows, sorted, and the duplicates among
/// them: what [`Ctx::drop_duplicate_windows`] computes with no state of
/// the ingest ([`digest_part`]). (Computed on a thread of its own while
/// the next part was read, it held a third part at a time: 530 MiB at 1e7
/// tasks, for 3% at 1e6.)
struct Digested {
    /// Every row's digest with its place (batch, row), sorted, each digest
    /// once (its first row): 24 bytes a row (a hash map would take about
    /// three times as much).
    ours: Vec<((u64, u64), u32, u32)>,
    /// The same identity twice in these rows: (batch, row) of each later
    /// one and of its first, in the order of the input.
    dups: Vec<(u32, u32, u32, u32)>,
    /// The rows' earliest start and latest end.
    span: Option<(i64, i64)>,
}

/// Digests the window rows of one part.
fn digest_part(table: Table, batches: &[RecordBatch]) -> Digested {
    use arrow::array::AsArray;
    use arrow::datatypes::TimestampMicrosecondType;
    let mut span: Option<(i64, i64)> = None;
    let mut ours: Vec<((u64, u64), u32, u32)> =
        Vec::with_capacity(batches.iter().map(|b| b.num_rows()).sum());
    for (b, batch) in batches.iter().enumerate() {
        let ids = identity::Identities::of_batch(table, batch);
        ids.each_digest(batch.num_rows(), |i, d| {
            ours.push((((d >> 64) as u64, d as u64), b as u32, i as u32));
        });
        let time = |c: &str| {
            batch
                .column_by_name(c)
                .and_then(|a| a.as_primitive_opt::<TimestampMicrosecondType>())
        };
        let first = time("window_start").and_then(arrow::compute::min);
        let last = time("window_end").and_then(arrow::compute::max);
        if let (Some(first), Some(last)) = (first, last) {
            span = Some(span.map_or((first, last), |(a, z)| (a.min(first), z.max(last))));
        }
    }
    sort_digests(&mut ours);
    let mut dups: Vec<(u32, u32, u32, u32)> = Vec::new();
    ours.dedup_by(|later, first| {
        let same = later.0 == first.0;
        if same {
            dups.push((later.1, later.2, first.1, first.2));
        }
        same
    });
    dups.sort_unstable();
    Digested { ours, dups, span }
}

/// A digest with its place (batch, row).
type Placed = ((u64, u64), u32, u32);

/// Sorts digests with their places (as `sort_unstable` does: by digest,
/// then place). Digests are uniform, so they are spread by their top bits
/// in two passes: first by the top 8 bits into 256 buckets, each written
/// in order (256 streams of writes, which the caches hold), then each
/// bucket, now small enough for the caches, by its next bits into a
/// quarter to a half as many buckets as entries (two to four in each),
/// each then sorted on its own. (One pass over the whole part into
/// 2^11-2^20 buckets spent half of `digest_part`'s time in the misses of
/// its scattered writes; a comparison sort of the whole was a tenth of the
/// ingest's main thread.)
fn sort_digests(ours: &mut [Placed]) {
    if ours.len() < 1 << 12 {
        ours.sort_unstable();
        return;
    }
    let mut spread = vec![((0u64, 0u64), 0u32, 0u32); ours.len()];
    let mut ends = Vec::new();
    spread_by(ours, &mut spread, &mut ends, 256, |e| {
        (e.0 .0 >> 56) as usize
    });
    let mut counts = Vec::new();
    let mut first = 0;
    for &end in &ends {
        sort_bucket(&spread[first..end], &mut ours[first..end], &mut counts);
        first = end;
    }
}

/// The entries of one of [`sort_digests`]'s first buckets (their top 8
/// bits the same), sorted into `out` (as long): spread by their next bits
/// (`counts` is scratch), then each small bucket sorted.
fn sort_bucket(bucket: &[Placed], out: &mut [Placed], counts: &mut Vec<usize>) {
    if bucket.len() < 1 << 6 {
        out.copy_from_slice(bucket);
        out.sort_unstable();
        return;
    }
    // 5 to 16 bits after the top 8: at most 512 KiB of counts.
    let bits = (bucket.len().ilog2() - 1).clamp(5, 16);
    spread_by(bucket, out, counts, 1 << bits, |e| {
        ((e.0 .0 << 8) >> (64 - bits)) as usize
    });
    let mut first = 0;
    for &end in counts.iter() {
        if end - first > 1 {
            out[first..end].sort_unstable();
        }
        first = end;
    }
}

/// `from` written to `to` (as long) bucket after bucket, by `bucket` (of
/// each entry, under `buckets`), each bucket's entries in their order;
/// `ends` is left holding where each bucket ends.
fn spread_by(
    from: &[Placed],
    to: &mut [Placed],
    ends: &mut Vec<usize>,
    buckets: usize,
    bucket: impl Fn(&Placed) -> usize,
) {
    // Where each bucket starts, then (as its entries are written) where
    // its next entry goes: at the end, where it ends.
    ends.clear();
    ends.resize(buckets + 1, 0);
    for e in from {
        ends[bucket(e) + 1] += 1;
    }
    for i in 1..buckets {
        ends[i] += ends[i - 1];
    }
    ends.truncate(buckets);
    for e in from {
        let at = &mut ends[bucket(e)];
        to[*at] = *e;
        *at += 1;
    }
}

/// The `task_windows` rows of a write that may be duplicates of rows
/// written earlier in the ingest ([`Ctx::rows_to_look_up`]).
struct LookUp {
    /// Per batch, per row.
    rows: Vec<Vec<bool>>,
    /// Their host buckets.
    buckets: HashSet<u32>,
    /// Their earliest start and latest end; `None` when there is none.
    span: Option<(i64, i64)>,
}

/// The most hosts whose written `host_windows` rows an ingest keeps track
/// of ([`Ctx::host_rows_to_look_up`]): 65,536 (about 9 MiB, an entry and
/// its hash table slots); past them every row is looked up.
const HOSTS_TRACKED: usize = 1 << 16;

/// The hosts whose `host_windows` rows were written in this ingest.
#[derive(Default)]
struct HostsWritten {
    /// Writes of `host_windows` rows so far.
    writes: u32,
    /// Past [`HOSTS_TRACKED`] hosts, or a write whose rows lacked the
    /// checked columns: every row of every later write is looked up.
    untracked: bool,
    seen: KeyMap<HostWritten>,
}

/// A host's rows written: the last write that held some, the time they
/// cover there, and the time its rows of the writes before cover.
struct HostWritten {
    write: u32,
    recent: (i64, i64),
    older: Option<(i64, i64)>,
}

/// A time span widened to hold another.
fn widen(span: Option<(i64, i64)>, (a, z): (i64, i64)) -> (i64, i64) {
    span.map_or((a, z), |(f, l)| (f.min(a), l.max(z)))
}

impl LookUp {
    fn new(batches: usize) -> LookUp {
        LookUp {
            rows: Vec::with_capacity(batches),
            buckets: HashSet::new(),
            span: None,
        }
    }
}

/// A window batch's text column `key` (the task or the host) and its
/// window starts and ends; `None` when it lacks them (not the checked
/// schema).
fn keyed_spans<'a>(
    batch: &'a RecordBatch,
    key: &str,
) -> Option<(
    &'a arrow::array::StringArray,
    &'a arrow::array::TimestampMicrosecondArray,
    &'a arrow::array::TimestampMicrosecondArray,
)> {
    use arrow::array::AsArray;
    use arrow::datatypes::TimestampMicrosecondType;
    let time = |c: &str| {
        batch
            .column_by_name(c)
            .and_then(|a| a.as_primitive_opt::<TimestampMicrosecondType>())
    };
    Some((
        batch.column_by_name(key)?.as_string_opt::<i32>()?,
        time("window_start")?,
        time("window_end")?,
    ))
}

/// The next digest the thread of digests gives (that of `src`).
async fn next_digest(
    src: &SourceFile,
    digests: &mut tokio::sync::mpsc::Receiver<std::io::Result<(String, u64)>>,
) -> Result<(String, u64)> {
    match digests.recv().await {
        Some(Ok(digest)) => Ok(digest),
        Some(Err(e)) => Err(src.digest_error(e)),
        None => Err(src.digest_error(std::io::Error::other("no digest"))),
    }
}

/// What became of a candidate event log.
enum LogOutcome {
    Parsed,
    Rejected,
    Ignored,
}

/// The state of one ingest while it reads its inputs.
struct Ctx<'a> {
    store: &'a Store,
    /// The batch, when no write is in flight.
    pending: Option<PendingBatch>,
    /// The write of the rows read before: it holds the batch until done,
    /// while the next rows are read and checked (both cores busy).
    in_flight: Option<tokio::task::JoinHandle<(PendingBatch, Result<()>)>>,
    /// The files of the writes landed so far (all but the one in flight),
    /// for the look-up of window rows written earlier in this ingest.
    landed: Vec<culprit_store::DataFile>,
    /// The identity digests (sorted) of the rows of the last part given
    /// to a write, and its table: the rows of the write in flight, looked
    /// up here instead of waiting for their files.
    last_part: Option<(Table, Vec<(u64, u64)>)>,
    /// The hosts of the `host_windows` rows written so far.
    hosts_written: HostsWritten,
    manifest: &'a culprit_store::Manifest,
    /// The stored tasks read so far, when they are read as rows need them.
    stored_tasks: StoredTasks,
    known: &'a mut Known,
    report: &'a mut IngestReport,
    progress: &'a dyn Progress,
    buffered: BTreeMap<Table, Buffer>,
    seen_keys: HashSet<String>,
    /// The bytes hashed for each of `seen_keys`.
    seen_sizes: HashSet<u64>,
    /// The sources read (key, name, bytes hashed), recorded in the batch
    /// once its writes are done (recording one then would wait for the
    /// write in flight, leaving a core idle at every file).
    sources: Vec<(String, String, u64)>,
    /// `IngestOptions::max_decoded_bytes`, as a size on this machine.
    max_decoded: usize,
    /// Host metrics read so far, translated at the end of the batch.
    host_metrics: hostmetrics::Batch,
    host_opts: &'a HostMetricsOptions,
}

impl Ctx<'_> {
    /// Whether bytes with this digest were ingested before (or in this batch).
    fn duplicate(&self, key: &str) -> bool {
        self.manifest.source(key).is_some() || self.seen_keys.contains(key)
    }

    /// Whether a source of `size` bytes may be one ingested before (or in
    /// this batch): when not, it is read before its digest is known.
    fn may_be_duplicate(&self, size: u64) -> bool {
        self.manifest.may_hold_source_of_size(size) || self.seen_sizes.contains(&size)
    }

    /// Checks raw rows of one table and buffers the good ones. `locate`
    /// names the file and place of a row for rejections.
    async fn add_rows(
        &mut self,
        table: Table,
        raw: RawRows,
        file: &str,
        duplicates: BatchDuplicates,
        locate: &dyn Fn(Origin) -> (String, String),
    ) -> Result<bool> {
        if raw.len() == 0 && raw.unreadable.is_empty() && duplicates == BatchDuplicates::Skip {
            return Ok(true); // a log with nothing for this table
        }
        let checked = match validate::convert_rows(table, raw) {
            Ok(converted) => {
                self.read_stored_tasks(&converted).await?;
                validate::check_converted(converted, file, self.known, duplicates)
            }
            Err(reason) => Err(reason),
        };
        if let Some(e) = self.known.tasks.take_error() {
            return Err(e.into());
        }
        let checked = match checked {
            Ok(c) => c,
            Err(reason) => {
                let reason = match duplicates {
                    // A log gives several tables: say which one.
                    BatchDuplicates::Skip => format!("{table}: {reason}"),
                    BatchDuplicates::Reject => reason,
                };
                self.report.rejected.push(Rejection {
                    file: file.to_string(),
                    location: None,
                    reason,
                });
                return Ok(false);
            }
        };
        self.report.already_stored += checked.already_stored;
        for (origin, reason) in checked.rejected {
            let (file, location) = locate(origin);
            self.report.rejected.push(Rejection {
                file,
                location: Some(location),
                reason,
            });
        }
        let entry = self.buffered.entry(table).or_default();
        entry.bytes += checked.batch.get_array_memory_size();
        entry.batches.push(checked.batch);
        entry.places.push(checked.places);
        entry.host_keys.push(checked.host_keys);
        entry.modes.push(duplicates);
        if entry.bytes >= FLUSH_BYTES {
            let buffer = std::mem::take(entry);
            self.write(table, buffer).await?;
        }
        Ok(true)
    }

    /// Reads the stored tasks the checks of `rows` need and has not read
    /// yet into the task index ([`StoredTasks`]).
    async fn read_stored_tasks(&mut self, rows: &validate::Converted) -> Result<()> {
        let Some(spans) = &self.stored_tasks.spans else {
            return Ok(()); // every stored task was read before the inputs
        };
        let mut wanted: Vec<(i64, i64)> = rows.task_times().into_iter().collect();
        wanted.extend(
            rows.task_queries()
                .into_iter()
                .filter_map(|q| spans.get(q))
                .map(|s| (s.first, s.last)),
        );
        for want in wanted {
            for (from, to) in self.stored_tasks.unread(want) {
                // Only the files of this time are cloned for the scan.
                let files: Vec<culprit_store::DataFile> = self
                    .stored_tasks
                    .files
                    .iter()
                    .filter(|f| f.may_overlap(from, to))
                    .cloned()
                    .collect();
                if !files.is_empty() {
                    let mut stored =
                        self.store
                            .scan_overlapping(files, Some(&STORED_TASK_COLUMNS), from, to);
                    // Of the row groups read, the tasks of this piece not
                    // read with an earlier one (the index keeps one record
                    // a task).
                    let read = &self.stored_tasks;
                    let keep = |first: i64, last: i64| {
                        first <= to && from <= last && !read.was_read(first, last)
                    };
                    while let Some(batch) = stored.try_next().await? {
                        validate::index_tasks(std::slice::from_ref(&batch), self.known, &keep);
                        if let Some(e) = self.known.tasks.take_error() {
                            return Err(e.into());
                        }
                    }
                }
                self.stored_tasks.note((from, to));
            }
        }
        Ok(())
    }

    /// Writes checked rows of a table to the batch; window rows whose
    /// identity is already stored, or was written earlier in this batch,
    /// are dropped first.
    async fn write(&mut self, table: Table, buffer: Buffer) -> Result<()> {
        if identity::columns(table).is_empty() {
            return self
                .spawn_write(table, buffer.batches, buffer.host_keys)
                .await;
        }
        let digested = digest_part(table, &buffer.batches);
        let (batches, host_keys) = self.drop_duplicate_windows(table, buffer, digested).await?;
        self.spawn_write(table, batches, host_keys).await
    }

    /// Begins the write of these rows, once the write before is done.
    async fn spawn_write(
        &mut self,
        table: Table,
        batches: Vec<RecordBatch>,
        host_keys: Vec<Vec<u32>>,
    ) -> Result<()> {
        let mut pending = self.pending().await?;
        // The batch only adds files: the new ones since the last write.
        let written = pending.written();
        self.landed.extend_from_slice(&written[self.landed.len()..]);
        self.in_flight = Some(tokio::spawn(async move {
            let written = if table == Table::TaskWindows {
                pending.write_routed(table, batches, host_keys).await
            } else {
                pending.write_owned(table, batches).await
            };
            (pending, written.map_err(IngestError::from))
        }));
        Ok(())
    }

    /// The batch, once the write in flight is done (its error, if any,
    /// returned).
    async fn pending(&mut self) -> Result<PendingBatch> {
        let (pending, written) = self.land().await;
        match written {
            Ok(()) => Ok(pending),
            Err(e) => {
                self.pending = Some(pending);
                Err(e)
            }
        }
    }

    /// Waits for the write in flight: the batch and how the write went.
    async fn land(&mut self) -> (PendingBatch, Result<()>) {
        let Some(job) = self.in_flight.take() else {
            return (self.pending.take().expect("the batch is here"), Ok(()));
        };
        match job.await {
            Ok(done) => done,
            // A panicked write: the batch is gone with it; its files are
            // unlisted (invisible) and the ingest fails.
            Err(e) => (
                begin(self.store),
                Err(IngestError::Store(culprit_store::StoreError::Worker(
                    e.to_string(),
                ))),
            ),
        }
    }

    /// Drops the window rows whose identity ([`identity`]) another row
    /// has: an earlier row of these (the same row twice in the input), a
    /// row this batch wrote already, both rejected as duplicates (skipped,
    /// for logs read twice), or a stored row (counted as already stored,
    /// the stored row standing). Of the files written and stored, only
    /// those whose windows overlap these rows' are read, only their row
    /// groups that overlap, and of them only the identity columns, one
    /// decoded batch at a time: memory holds these rows' digests, not the
    /// batch's nor the stored table's.
    async fn drop_duplicate_windows(
        &mut self,
        table: Table,
        buffer: Buffer,
        digested: Digested,
    ) -> Result<(Vec<RecordBatch>, Vec<Vec<u32>>)> {
        use arrow::array::BooleanArray;
        let Buffer {
            batches,
            places,
            modes,
            host_keys,
            ..
        } = buffer;
        let Digested { ours, dups, span } = digested;
        let mut keep: Vec<Vec<bool>> = batches.iter().map(|b| vec![true; b.num_rows()]).collect();
        let needs = self.rows_to_look_up(table, &batches, &host_keys);
        for (b, i, fb, fi) in dups {
            let (b, i) = (b as usize, i as usize);
            keep[b][i] = false;
            let first = self.known.show(places[fb as usize][fi as usize]);
            let shown = identity::Identities::of_batch(table, &batches[b]).show(i);
            self.duplicate_window(modes[b], places[b][i], &shown, &first);
        }
        let find = |ours: &[((u64, u64), u32, u32)], d: u128| {
            let key = ((d >> 64) as u64, d as u64);
            ours.binary_search_by_key(&key, |e| e.0)
                .ok()
                .map(|at| (ours[at].1 as usize, ours[at].2 as usize))
        };
        let Some((first, last)) = span else {
            return Ok((batches, host_keys));
        };
        // Rows this batch wrote already (from earlier parts of the input):
        // only rows that may be among them are looked up, in the files of
        // their buckets and times.
        let (cands, look) = match needs {
            None => (None, Some((first, last, None))),
            Some(needs) => {
                let cands: Vec<_> = ours
                    .iter()
                    .filter(|(_, b, r)| needs.rows[*b as usize][*r as usize])
                    .copied()
                    .collect();
                let look = needs.span.map(|(a, z)| (a, z, Some(needs.buckets)));
                (Some(cands), look)
            }
        };
        let cands = cands.as_deref().unwrap_or(&ours);
        let (look_first, look_last) = look.as_ref().map_or((first, last), |l| (l.0, l.1));
        let mut left = ours.len();
        // The rows of the write in flight (the last part of this table, as
        // a task cut by the parts' boundary has its earlier rows there):
        // their digests are in memory, so the look-up does not wait for
        // their files; the rest are in the files of the writes landed.
        let mut unfound = 0usize;
        let last_part = match self.last_part.take() {
            Some((t, digests)) if t == table => digests,
            _ => Vec::new(),
        };
        for &(key, b, r) in cands {
            let (b, r) = (b as usize, r as usize);
            if !keep[b][r] {
                continue;
            }
            if last_part.binary_search(&key).is_ok() {
                keep[b][r] = false;
                left -= 1;
                self.earlier_row(table, &batches[b], r, modes[b], places[b][r]);
            } else {
                unfound += 1;
            }
        }
        drop(last_part);
        let written: Vec<_> = match look {
            Some((first, last, buckets)) if unfound > 0 => self
                .landed
                .iter()
                .filter(|f| {
                    f.table == table.name()
                        && f.may_overlap(first, last)
                        && match (&buckets, f.bucket) {
                            (Some(set), Some(b)) => set.contains(&b),
                            _ => true,
                        }
                })
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        let mut rows = self.store.scan_overlapping(
            written,
            Some(identity::columns(table)),
            look_first,
            look_last,
        );
        while let Some(found) = rows.try_next().await? {
            let ids = identity::Identities::of_batch(table, &found);
            for i in 0..found.num_rows() {
                if let Some((b, r)) = find(cands, ids.digest(i)) {
                    if keep[b][r] {
                        keep[b][r] = false;
                        left -= 1;
                        self.earlier_row(table, &batches[b], r, modes[b], places[b][r]);
                    }
                }
            }
        }
        // Stored rows.
        let stored: Vec<_> = self
            .manifest
            .files_of(table)
            .filter(|f| f.may_overlap(first, last))
            .cloned()
            .collect();
        if !stored.is_empty() && left > 0 {
            let mut rows =
                self.store
                    .scan_overlapping(stored, Some(identity::columns(table)), first, last);
            while let Some(found) = rows.try_next().await? {
                let ids = identity::Identities::of_batch(table, &found);
                for i in 0..found.num_rows() {
                    if let Some((b, r)) = find(&ours, ids.digest(i)) {
                        if keep[b][r] {
                            keep[b][r] = false;
                            left -= 1;
                            self.report.already_stored += 1;
                        }
                    }
                }
                if left == 0 {
                    break;
                }
            }
        }
        // This part's rows, as the next part looks them up while they are
        // written.
        self.last_part = Some((
            table,
            ours.iter()
                .filter(|(_, b, r)| keep[*b as usize][*r as usize])
                .map(|e| e.0)
                .collect(),
        ));
        drop(ours);
        let mut kept_host_keys = Vec::with_capacity(host_keys.len());
        let mut kept = Vec::with_capacity(batches.len());
        for ((batch, keep), key) in batches.into_iter().zip(keep).zip(host_keys) {
            if keep.iter().all(|k| *k) {
                kept.push(batch);
                kept_host_keys.push(key);
                continue;
            }
            let key = if key.is_empty() {
                key
            } else {
                key.into_iter()
                    .zip(&keep)
                    .filter_map(|(b, k)| k.then_some(b))
                    .collect()
            };
            let mask = BooleanArray::from(keep);
            kept.push(
                arrow::compute::filter_record_batch(&batch, &mask)
                    .map_err(|e| IngestError::Store(e.into()))?,
            );
            kept_host_keys.push(key);
        }
        Ok((kept, kept_host_keys))
    }

    /// Row `r` of `batch` repeats a row written earlier in this ingest.
    fn earlier_row(
        &mut self,
        table: Table,
        batch: &RecordBatch,
        r: usize,
        mode: BatchDuplicates,
        place: Place,
    ) {
        let shown = identity::Identities::of_batch(table, batch).show(r);
        self.duplicate_window(mode, place, &shown, "an earlier row of this ingest");
    }

    /// Of `task_windows` rows about to be written, those that may be
    /// duplicates of rows written earlier in this ingest: the rows of a
    /// task that an earlier write held windows of too (the task index
    /// keeps that per task). With the rows of a task together in the
    /// input, that is a task cut by a write's boundary, not every row:
    /// the files written are then read for a few rows, not for all.
    /// `host_windows` rows: [`Ctx::host_rows_to_look_up`]. `None` for
    /// other tables (every row is looked up).
    fn rows_to_look_up(
        &mut self,
        table: Table,
        batches: &[RecordBatch],
        host_keys: &[Vec<u32>],
    ) -> Option<LookUp> {
        use arrow::array::Array;
        if table == Table::HostWindows {
            return self.host_rows_to_look_up(batches);
        }
        if table != Table::TaskWindows {
            return None;
        }
        let tasks = &mut self.known.tasks;
        tasks.next_write();
        let mut look = LookUp::new(batches.len());
        for (batch, host_keys) in batches.iter().zip(host_keys) {
            let Some((ids, starts, ends)) = keyed_spans(batch, "task_id") else {
                // Not the checked schema: every row is looked up.
                return None;
            };
            let mut rows = vec![false; batch.num_rows()];
            let mut last: Option<(&str, bool)> = None;
            for (i, row) in rows.iter_mut().enumerate() {
                if ids.is_null(i) {
                    *row = true;
                } else {
                    let id = ids.value(i);
                    *row = match last {
                        Some((l, earlier)) if l == id => earlier,
                        _ => {
                            let earlier = tasks.note_windows(&identity::key_digest(&[id]));
                            last = Some((id, earlier));
                            earlier
                        }
                    };
                }
                if *row {
                    // A row of no key is in no bucket's files.
                    let key = host_keys.get(i).copied();
                    look.buckets.insert(
                        key.and_then(culprit_store::layout::key_bucket)
                            .unwrap_or(u32::MAX),
                    );
                    let (a, z) = (starts.value(i), ends.value(i));
                    look.span = Some(widen(look.span, (a, z)));
                }
            }
            look.rows.push(rows);
        }
        Some(look)
    }

    /// Of `host_windows` rows about to be written, those that may repeat a
    /// row written earlier in this ingest: a row of a host that an earlier
    /// write held rows of, within the time those rows covered (a copy has
    /// the same start and end). Rows that only the last write can hold are
    /// looked up among its digests, in memory; only rows within the time of
    /// the host's rows in the writes before it make the files written be
    /// read (`span`), and only the files of that time. With the rows of a
    /// host together in the input (or the input in time order), that is
    /// none: the files written are not read again for every part, which
    /// made the look-up quadratic (40 s of 10.5e6 host rows). `None` (every
    /// row looked up, the files of the part's time read) past
    /// [`HOSTS_TRACKED`] hosts (checked before each write), or when the
    /// rows lack the checked columns, and for every write after that.
    fn host_rows_to_look_up(&mut self, batches: &[RecordBatch]) -> Option<LookUp> {
        use arrow::array::Array;
        let last_is_ours = matches!(&self.last_part, Some((t, _)) if *t == Table::HostWindows);
        let hosts = &mut self.hosts_written;
        if hosts.untracked || hosts.seen.len() > HOSTS_TRACKED {
            hosts.untracked = true;
            return None;
        }
        hosts.writes += 1;
        let w = hosts.writes;
        let mut look = LookUp::new(batches.len());
        let mut now: KeyMap<(i64, i64)> = KeyMap::default();
        for batch in batches {
            let Some((names, starts, ends)) = keyed_spans(batch, "host") else {
                // This write's hosts go untracked: so do all later ones.
                hosts.untracked = true;
                return None;
            };
            let mut rows = vec![false; batch.num_rows()];
            let mut last: Option<(&str, (u64, u64))> = None;
            for (i, row) in rows.iter_mut().enumerate() {
                let (a, z) = (starts.value(i), ends.value(i));
                if names.is_null(i) {
                    *row = true;
                    look.span = Some(widen(look.span, (a, z)));
                    continue;
                }
                let name = names.value(i);
                let key = match last {
                    Some((l, k)) if l == name => k,
                    _ => {
                        let k = identity::key_digest(&[name]);
                        last = Some((name, k));
                        k
                    }
                };
                let span = now.entry(key).or_insert((a, z));
                *span = widen(Some(*span), (a, z));
                let Some(seen) = hosts.seen.get(&key) else {
                    continue;
                };
                // In memory: the last write's rows, if its digests are kept.
                let (memory, files) = if seen.write + 1 == w && last_is_ours {
                    (Some(seen.recent), seen.older)
                } else {
                    (None, Some(widen(seen.older, seen.recent)))
                };
                let within = |s: Option<(i64, i64)>| s.is_some_and(|(f, l)| a >= f && z <= l);
                if within(files) {
                    *row = true;
                    look.span = Some(widen(look.span, (a, z)));
                } else if within(memory) {
                    *row = true;
                }
            }
            look.rows.push(rows);
        }
        for (key, span) in now {
            let seen = hosts.seen.entry(key).or_insert(HostWritten {
                write: w,
                recent: span,
                older: None,
            });
            if seen.write != w {
                seen.older = Some(widen(seen.older, seen.recent));
                seen.recent = span;
                seen.write = w;
            }
        }
        Some(look)
    }

    /// A window row whose identity an earlier row of this ingest has: a
    /// rejection naming the first, or (a log read twice) a skip.
    fn duplicate_window(&mut self, mode: BatchDuplicates, at: Place, shown: &str, first: &str) {
        match mode {
            BatchDuplicates::Skip => self.report.already_stored += 1,
            BatchDuplicates::Reject => self.report.rejected.push(Rejection {
                file: self.known.files[at.0 as usize].clone(),
                location: Some(at.1.to_string()),
                reason: format!("duplicate window '{shown}' (first at {first})"),
            }),
        }
    }

    /// Reads the interchange files, then the event logs, then writes what
    /// is buffered; the first error stops it.
    async fn read_all(&mut self, work: Vec<TableFile>, logs: Vec<LogUnit>) -> Result<()> {
        self.read_files(work).await?;
        self.read_logs(logs).await?;
        self.translate_host_metrics().await?;
        self.flush_all().await
    }

    /// The host metrics of the whole batch become `host_windows` rows
    /// (together: a series cut over several files gives every window).
    async fn translate_host_metrics(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.host_metrics);
        if batch.is_empty() {
            return Ok(());
        }
        let translated = batch.finish(self.host_opts);
        self.report.notes.extend(translated.notes);
        let file = "host metrics";
        let locate = |o: Origin| (file.to_string(), o.to_string());
        self.add_rows(
            Table::HostWindows,
            translated.rows,
            file,
            BatchDuplicates::Skip,
            &locate,
        )
        .await?;
        Ok(())
    }

    async fn flush_all(&mut self) -> Result<()> {
        for (table, buffer) in std::mem::take(&mut self.buffered) {
            self.write(table, buffer).await?;
        }
        Ok(())
    }

    /// Writes the rows buffered for the tables before `table`: the files
    /// come in table order, so no more rows of them come (but from event
    /// logs, read last), and their last part is not held in memory while
    /// the next tables are read (up to 32 MiB of `tasks` all through
    /// `task_windows`).
    async fn flush_before(&mut self, table: Table) -> Result<()> {
        let later = self.buffered.split_off(&table);
        for (t, buffer) in std::mem::replace(&mut self.buffered, later) {
            self.write(t, buffer).await?;
        }
        Ok(())
    }

    /// Interchange files (Parquet, CSV, JSON lines). A Parquet file is
    /// read a chunk of rows at a time (decoded on a thread of its own while
    /// the chunk before is checked and written), the others whole.
    ///
    /// The digests of local Parquet files (what says a file was ingested
    /// before) are computed ahead, on a thread of their own, in order: the
    /// next file's while this one is read (at most two ahead). A file of a
    /// size no source ingested before had (nor one of this ingest) cannot
    /// be one of them: it is read at once, its digest taken after it.
    async fn read_files(&mut self, work: Vec<TableFile>) -> Result<()> {
        let paths: Vec<Option<std::path::PathBuf>> = work
            .iter()
            .map(|(_, format, src)| match format {
                Format::Parquet => src.local_path().map(|p| p.to_path_buf()),
                _ => None,
            })
            .collect();
        let (tx, mut digests) = tokio::sync::mpsc::channel(2);
        let ahead: Vec<std::path::PathBuf> = paths.iter().flatten().cloned().collect();
        std::thread::spawn(move || {
            for path in ahead {
                if tx.blocking_send(SourceFile::digest_file(&path)).is_err() {
                    break; // the ingest stopped
                }
            }
        });
        for ((table, format, src), path) in work.into_iter().zip(paths) {
            self.flush_before(table).await?;
            // The digest (and the bytes hashed) now, or after the read: a
            // local Parquet file of a size no source had is read first.
            let (known, bytes) = match path {
                Some(_) if !self.may_be_duplicate(src.size) => (None, None),
                Some(_) => (Some(next_digest(&src, &mut digests).await?), None),
                None => {
                    let bytes = src.read().await?;
                    let key = hex::encode(ring::digest::digest(&ring::digest::SHA256, &bytes));
                    (Some((key, bytes.len() as u64)), Some(bytes))
                }
            };
            self.progress.advance(&src.name, src.size);
            if known.as_ref().is_some_and(|(key, _)| self.duplicate(key)) {
                self.report.duplicate_files += 1;
                continue;
            }
            self.report.files += 1;
            let read = match (format, bytes) {
                (Format::Parquet, bytes) => self.read_parquet(table, &src, bytes).await?,
                (_, Some(bytes)) => match formats::read(format, bytes) {
                    Ok(raw) => {
                        let name = src.name.clone();
                        let locate = |o: Origin| (name.clone(), o.to_string());
                        self.add_rows(table, raw, &src.name, BatchDuplicates::Reject, &locate)
                            .await?;
                        Ok(())
                    }
                    Err(reason) => Err(reason),
                },
                (_, None) => unreachable!("only Parquet files are read in chunks"),
            };
            // (Were a file read first changed since it was listed, into
            // the bytes of an ingested source, its rows were still checked
            // against the stored ones: each already stored, none added
            // twice.)
            let (key, size) = match known {
                Some(known) => known,
                None => next_digest(&src, &mut digests).await?,
            };
            self.seen_keys.insert(key.clone());
            self.seen_sizes.insert(size);
            match read {
                Ok(()) => self.sources.push((key, src.name.clone(), size)),
                Err(reason) => self.report.rejected.push(Rejection {
                    file: src.name.clone(),
                    location: None,
                    reason,
                }),
            }
        }
        Ok(())
    }

    /// A Parquet file, chunk by chunk: `Err` with the reason when it cannot
    /// be read (the rows of the chunks before a corrupt one are kept: each
    /// row stands on its own; the file is not recorded as ingested, so it
    /// can be ingested again once repaired, and the rows stored then are
    /// skipped by their keys and identities). A file whose columns are
    /// wrong is rejected by the first chunk's check (reported by
    /// `add_rows`), and reading stops.
    async fn read_parquet(
        &mut self,
        table: Table,
        src: &SourceFile,
        bytes: Option<bytes::Bytes>,
    ) -> Result<std::result::Result<(), String>> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let path = src.local_path().map(|p| p.to_path_buf());
        std::thread::spawn(move || {
            let chunks = match (path, bytes) {
                (_, Some(bytes)) => formats::ParquetChunks::open(bytes),
                (Some(path), None) => std::fs::File::open(&path)
                    .map_err(|e| format!("cannot read: {e}"))
                    .and_then(formats::ParquetChunks::open),
                (None, None) => Err("no bytes to read".to_string()),
            };
            let chunks = match chunks {
                Ok(chunks) => chunks,
                Err(reason) => {
                    let _ = tx.blocking_send(Err(reason));
                    return;
                }
            };
            for chunk in chunks {
                let stop = chunk.is_err();
                if tx.blocking_send(chunk).is_err() || stop {
                    break;
                }
            }
        });
        let name = src.name.clone();
        let locate = |o: Origin| (name.clone(), o.to_string());
        while let Some(chunk) = rx.recv().await {
            let raw = match chunk {
                Ok(raw) => raw,
                Err(reason) => return Ok(Err(reason)),
            };
            if !self
                .add_rows(table, raw, &src.name, BatchDuplicates::Reject, &locate)
                .await?
            {
                // Rejected whole (and reported by `add_rows`), as a file
                // read whole is: no more chunks.
                return Ok(Ok(()));
            }
        }
        Ok(Ok(()))
    }

    /// Spark event logs: each is decoded, parsed and translated into rows.
    async fn read_logs(&mut self, logs: Vec<LogUnit>) -> Result<()> {
        for log in logs {
            let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
            let mut size = 0u64;
            let mut raw_parts: Vec<(String, bytes::Bytes)> = Vec::with_capacity(log.parts.len());
            for part in &log.parts {
                let bytes = part.read().await?;
                hasher.update(&bytes);
                size += bytes.len() as u64;
                self.progress.advance(&part.name, part.size);
                raw_parts.push((part.name.clone(), bytes));
            }
            if raw_parts.is_empty() {
                continue;
            }
            let files = raw_parts.len();
            let key = hex::encode(hasher.finish());
            if self.duplicate(&key) {
                self.report.duplicate_files += files;
                continue;
            }
            // A History Server download: the logs inside the zip.
            let apps: Vec<spark::RawLog> = if files == 1 && spark::zip::is_zip(&raw_parts[0].1) {
                self.report.files += 1;
                let (zip_name, bytes) = raw_parts.pop().expect("one part");
                match spark::zip::entries(&bytes, self.max_decoded) {
                    Ok(entries) => spark::group_entries(&zip_name, entries),
                    Err(reason) => {
                        self.report.rejected.push(Rejection {
                            file: zip_name,
                            location: None,
                            reason,
                        });
                        continue;
                    }
                }
            } else {
                self.report.files += files;
                vec![(log.name.clone(), log.state, raw_parts)]
            };
            let (mut parsed, mut ignored) = (false, true);
            for (name, state, parts) in apps {
                let explicit = log.explicit || files > 1;
                match self.read_log(&name, state, parts, explicit).await? {
                    LogOutcome::Parsed => (parsed, ignored) = (true, false),
                    LogOutcome::Rejected => ignored = false,
                    LogOutcome::Ignored => {}
                }
            }
            // Only what was read is remembered as ingested: a rejected file
            // can be ingested again (say with --table).
            if parsed {
                self.seen_keys.insert(key.clone());
                self.seen_sizes.insert(size);
                self.sources.push((key, log.name.clone(), size));
            }
            if ignored {
                self.report.files -= files.min(self.report.files);
            }
        }
        Ok(())
    }

    /// One application's log: decoded, checked to be an event log, parsed,
    /// its rows checked and buffered.
    async fn read_log(
        &mut self,
        name: &str,
        state: spark::LogState,
        raw_parts: Vec<(String, bytes::Bytes)>,
        explicit: bool,
    ) -> Result<LogOutcome> {
        let parts = match self.decode_parts(&raw_parts, explicit) {
            Ok(parts) => parts,
            Err(outcome) => return Ok(outcome),
        };
        // The decoded text is all that is needed from here: free the input.
        drop(raw_parts);
        if !spark::is_event_log(&parts[0].text) {
            if let Some(outcome) = self.read_host_metrics(name, &parts) {
                return Ok(outcome);
            }
            if let [part] = parts.as_slice() {
                match trino::read(&part.text) {
                    Some(Ok(doc)) => return self.add_trino(name, doc).await,
                    Some(Err(reason)) => return Ok(self.unusable(name, reason, explicit)),
                    None => {}
                }
            }
            return Ok(self.not_an_event_log(name, explicit));
        }
        self.report.spark_logs += 1;
        self.note_truncated_streams(&parts);
        let mut parsed = spark::parse(&parts, state, &spark::fallback_id(name));
        drop(parts);
        self.report_parse_problems(name, &parsed);
        let tables = std::mem::take(&mut parsed.tables);
        for (table, raw) in tables {
            let locate = |o: Origin| match o {
                Origin::Line(n) => {
                    let (file, line) = parsed.locate(n);
                    (file, format!("line {line}"))
                }
                other => (name.to_string(), other.to_string()),
            };
            self.add_rows(table, raw, name, BatchDuplicates::Skip, &locate)
                .await?;
        }
        Ok(LogOutcome::Parsed)
    }

    /// Decodes the parts of a log, or says what became of it when one does
    /// not decode: rejected when it is surely meant as a log (its bytes say
    /// so, the user named it, or an earlier part decoded), else ignored (a
    /// file in a folder that may be anything).
    fn decode_parts(
        &mut self,
        raw_parts: &[(String, bytes::Bytes)],
        explicit: bool,
    ) -> std::result::Result<Vec<spark::Part>, LogOutcome> {
        let mut parts = Vec::with_capacity(raw_parts.len());
        for (part_name, bytes) in raw_parts {
            match spark::decode(part_name, bytes, self.max_decoded) {
                Ok(p) => parts.push(p),
                Err(e) if e.certain || explicit || !parts.is_empty() => {
                    self.report.rejected.push(Rejection {
                        file: part_name.clone(),
                        location: None,
                        reason: e.reason,
                    });
                    return Err(LogOutcome::Rejected);
                }
                Err(_) => {
                    self.report.ignored_files.push(part_name.clone());
                    return Err(LogOutcome::Ignored);
                }
            }
        }
        Ok(parts)
    }

    /// Trino or Presto query JSON: its rows checked and buffered (tasks
    /// before their windows), its bad lines rejected, its notes kept.
    async fn add_trino(&mut self, name: &str, doc: trino::Parsed) -> Result<LogOutcome> {
        self.report.trino_queries += doc.queries;
        for (line, reason) in doc.malformed {
            self.report.rejected.push(Rejection {
                file: name.to_string(),
                location: Some(format!("line {line}")),
                reason,
            });
        }
        self.report
            .notes
            .extend(doc.notes.into_iter().map(|n| format!("{name}: {n}")));
        for (table, raw) in doc.tables {
            let locate = |o: Origin| (name.to_string(), o.to_string());
            self.add_rows(table, raw, name, BatchDuplicates::Skip, &locate)
                .await?;
        }
        Ok(LogOutcome::Parsed)
    }

    /// Trino JSON that holds no telemetry: rejected with the reason when
    /// the user named it, else ignored (listed) with the reason as a note.
    fn unusable(&mut self, name: &str, reason: String, explicit: bool) -> LogOutcome {
        if explicit {
            self.report.rejected.push(Rejection {
                file: name.to_string(),
                location: None,
                reason,
            });
            return LogOutcome::Rejected;
        }
        self.report.notes.push(format!("{name}: {reason}"));
        self.report.ignored_files.push(name.to_string());
        LogOutcome::Ignored
    }

    /// A host-metrics file (a Prometheus answer, `sadf -j` JSON), kept for
    /// the end of the batch; `None` when it is none.
    fn read_host_metrics(&mut self, name: &str, parts: &[spark::Part]) -> Option<LogOutcome> {
        let [part] = parts else { return None };
        let kind = hostmetrics::sniff(&part.text)?;
        match self.host_metrics.add(kind, &part.text) {
            Ok(()) => {
                self.report.host_metrics_files += 1;
                Some(LogOutcome::Parsed)
            }
            Err(reason) => {
                self.report.rejected.push(Rejection {
                    file: name.to_string(),
                    location: None,
                    reason,
                });
                Some(LogOutcome::Rejected)
            }
        }
    }

    /// A file whose first line is no Spark event: rejected when the user
    /// named it (saying what it may be instead), else ignored.
    fn not_an_event_log(&mut self, name: &str, explicit: bool) -> LogOutcome {
        if !explicit {
            self.report.ignored_files.push(name.to_string());
            return LogOutcome::Ignored;
        }
        let reason = if Format::from_path(name).is_some() {
            "cannot tell the table from the file or folder name (use --table)"
        } else {
            "not telemetry: neither an interchange file (tasks.csv, \
             stages.parquet, ...) nor a Spark event log (its first line \
             is not a JSON event) nor Trino or Presto query JSON"
        };
        self.report.rejected.push(Rejection {
            file: name.to_string(),
            location: None,
            reason: reason.into(),
        });
        LogOutcome::Rejected
    }

    /// Notes the compressed parts whose stream ends early: what was decoded
    /// is read, which is worth knowing but no error.
    fn note_truncated_streams(&mut self, parts: &[spark::Part]) {
        for p in parts {
            if let Some(why) = &p.truncated {
                self.report.notes.push(format!(
                    "{}: the {} stream ends early ({why}); read up to there",
                    p.name,
                    p.codec.name()
                ));
            }
        }
    }

    /// Reports what parsing the log found wrong: malformed lines are
    /// rejected; unknown event types and a cut last line are noted.
    fn report_parse_problems(&mut self, name: &str, parsed: &spark::Parsed) {
        for (part, line, reason) in &parsed.malformed {
            self.report.rejected.push(Rejection {
                file: part.clone(),
                location: Some(format!("line {line}")),
                reason: reason.clone(),
            });
        }
        if !parsed.unknown_events.is_empty() {
            let list = parsed
                .unknown_events
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect::<Vec<_>>()
                .join(", ");
            self.report
                .notes
                .push(format!("{name}: skipped unknown event types: {list}"));
        }
        if parsed.cut_last_line {
            self.report.notes.push(format!(
                "{name}: the last line is cut (the log is in progress); it is read when complete"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{sort_digests, StoredTasks};

    proptest::proptest! {
        /// The times an ingest has read stored tasks of, against a plain
        /// set of the instants noted (sixteen, also at either end of
        /// `i64`): what is left unread of a want is exactly
        /// its instants not noted, in order and apart, and a run was read
        /// exactly when one of its instants was noted.
        #[test]
        fn stored_times_read_are_the_instants_noted(
            noted in proptest::collection::vec((0i64..16, 0i64..4), 0..6),
            wants in proptest::collection::vec((0i64..16, 0i64..16), 1..8),
            shift in proptest::sample::select(vec![0i64, i64::MAX - 15, i64::MIN]),
        ) {
            let at = |t: i64| t.wrapping_add(shift);
            let mut read = StoredTasks::default();
            let mut plain = [false; 16];
            for &(a, len) in &noted {
                let b = (a + len).min(15);
                read.note((at(a), at(b)));
                for t in a..=b {
                    plain[t as usize] = true;
                }
            }
            for w in read.read.windows(2) {
                // Sorted, apart (not even touching).
                proptest::prop_assert!(w[0].1 < w[1].0 && w[0].1 + 1 < w[1].0);
            }
            for &(a, len) in &wants {
                let b = (a + len).min(15);
                let mut want_pieces = Vec::new();
                let mut t = a;
                while t <= b {
                    if plain[t as usize] {
                        t += 1;
                        continue;
                    }
                    let from = t;
                    while t <= b && !plain[t as usize] {
                        t += 1;
                    }
                    want_pieces.push((at(from), at(t - 1)));
                }
                proptest::prop_assert_eq!(read.unread((at(a), at(b))), want_pieces);
                let was = (a..=b).any(|t| plain[t as usize]);
                proptest::prop_assert_eq!(read.was_read(at(a), at(b)), was);
            }
        }
    }

    #[test]
    fn digests_sort_as_a_comparison_sort_does() {
        // Uniform digests, some repeated at other places (duplicates), and
        // some sharing their top bits: the order of `sort_unstable`. (At
        // 20,000 the first buckets hold about 78: both sides of the 64
        // below which a bucket is sorted whole.)
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in [0, 1, 100, 5_000, 20_000, 200_000, 1_100_000] {
            let mut ours: Vec<((u64, u64), u32, u32)> = Vec::with_capacity(n);
            for i in 0..n {
                let d = match i % 10 {
                    // A copy of an earlier row's digest.
                    3 if i > 0 => ours[(next() as usize) % i].0,
                    // The same top bits as an earlier one.
                    7 if i > 0 => (ours[i - 1].0 .0 ^ (next() >> 24), next()),
                    _ => (next(), next()),
                };
                ours.push((d, (next() % 7) as u32, i as u32));
            }
            let mut want = ours.clone();
            want.sort_unstable();
            sort_digests(&mut ours);
            assert_eq!(ours, want, "{n} digests");
        }
        // Digests that are not uniform: all of one first bucket (the same
        // top 8 bits), or of a few second ones, and many the same.
        for (n, varying) in [(5_000, 56), (300_000, 56), (300_000, 12), (100_000, 2)] {
            let mut ours: Vec<((u64, u64), u32, u32)> = (0..n)
                .map(|i| {
                    let below = (next() >> (64 - varying)) << (56 - varying);
                    let hi = 0xab00_0000_0000_0000 | below;
                    ((hi, next() % 3), (next() % 5) as u32, i as u32)
                })
                .collect();
            let mut want = ours.clone();
            want.sort_unstable();
            sort_digests(&mut ours);
            assert_eq!(ours, want, "{n} digests, {varying} bits varying");
        }
    }
}
