//! The rejection rules of the interchange format, row by row.

use std::collections::HashMap;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray, RecordBatch, StringArray,
};
use arrow::compute::filter;
use arrow::datatypes::{Float64Type, TimestampMicrosecondType};
use culprit_core::{ColumnKind, Resource, Table};

use crate::convert::convert;
use crate::formats::{Origin, RawRows};

pub use crate::task_index::{KeyMap, KeySet, TaskIndex, TaskSpan, NO_HOST_KEY};

impl TaskSpan {
    pub fn ready(&self) -> Option<i64> {
        (self.ready != i64::MIN).then_some(self.ready)
    }

    fn stored(launch: i64, finish: i64, ready: Option<i64>) -> TaskSpan {
        TaskSpan {
            launch,
            finish,
            ready: ready.unwrap_or(i64::MIN),
            file: u32::MAX,
            origin: 0,
            // The host of a stored task is not read: its windows go to the
            // files of no bucket, as they did before.
            host_key: NO_HOST_KEY,
        }
    }

    /// Where this ingest accepted it (`None`: stored before).
    fn place(&self) -> Option<Place> {
        (self.file != u32::MAX).then(|| (self.file, unpack(self.origin)))
    }
}

/// An origin in 64 bits (the top bit says a line).
fn pack(o: Origin) -> u64 {
    match o {
        Origin::Line(n) => n | 1 << 63,
        Origin::Row(n) => n & !(1 << 63),
    }
}

fn unpack(v: u64) -> Origin {
    if v >> 63 == 1 {
        Origin::Line(v & !(1 << 63))
    } else {
        Origin::Row(v)
    }
}

/// Where a row came from: an index into [`Known::files`] and its place in
/// that file.
pub type Place = (u32, Origin);

/// What is known before a file is checked: tasks and keys already stored,
/// and those accepted earlier in this batch. Ids and keys are held as
/// 128-bit digests ([`crate::identity::key_digest`]), not as text, so
/// memory grows by a few dozen bytes per task, not by its text.
#[derive(Default)]
pub struct Known {
    /// The tasks stored or accepted, by digest of their id (the key of
    /// `tasks`, so the tasks table's keys are checked here): in memory up
    /// to a limit, the rest spilled to a sorted file
    /// ([`crate::task_index`]).
    pub tasks: TaskIndex,
    /// Keys already stored, per table (but tasks).
    pub stored_keys: HashMap<Table, KeySet>,
    /// Keys accepted earlier in this batch (but tasks): where they came from.
    pub batch_keys: HashMap<Table, KeyMap<Place>>,
    /// The files named by places.
    pub files: Vec<String>,
    file_index: HashMap<String, u32>,
    /// Only the stored tasks of the times the rows checked need are in
    /// `tasks` (read as the rows come), not every stored task.
    pub stored_by_time: bool,
}

impl Known {
    /// Nothing known yet; at most `memory_tasks` tasks held in memory.
    pub fn new(memory_tasks: usize) -> Self {
        Known {
            tasks: TaskIndex::new(memory_tasks),
            ..Default::default()
        }
    }

    /// The index of `file` in [`Known::files`] (added if new).
    pub fn file(&mut self, file: &str) -> u32 {
        if let Some(i) = self.file_index.get(file) {
            return *i;
        }
        let i = self.files.len() as u32;
        self.files.push(file.to_string());
        self.file_index.insert(file.to_string(), i);
        i
    }

    /// A place as shown in messages: `file:line 3`.
    pub fn show(&self, place: Place) -> String {
        format!("{}:{}", self.files[place.0 as usize], place.1)
    }
}

/// The outcome of checking one file.
pub struct Checked {
    pub batch: RecordBatch,
    pub rejected: Vec<(Origin, String)>,
    /// Rows whose key is already stored: skipped, not an error.
    pub already_stored: usize,
    /// Where each row of `batch` came from (window tables only, for the
    /// identity check when they are written; empty for the others).
    pub places: Vec<Place>,
    /// The host key of each row of `batch` (its task's host's,
    /// `culprit_store::layout::host_key`; `task_windows` only, empty for
    /// the others): stored with the row, its bucket the file's.
    pub host_keys: Vec<u32>,
}

/// How to treat a key seen earlier in the same batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchDuplicates {
    /// An error: two input files disagree about one row.
    Reject,
    /// Skipped like a stored row: the same application read twice (two
    /// copies of one Spark log).
    Skip,
}

/// The raw rows of one file converted to their table's types
/// ([`convert_rows`]), before anything known is looked at.
pub struct Converted {
    table: Table,
    raw: RawRows,
    columns: Vec<ArrayRef>,
    reasons: Reasons,
}

/// Checks the raw rows of one file as `table`, first step: every column
/// converted, the rows whose values do not convert rejected (an error
/// rejects the whole file: a required column missing, a column that cannot
/// be read as its type). Then [`check_converted`].
pub fn convert_rows(table: Table, raw: RawRows) -> Result<Converted, String> {
    let mut reasons = Reasons::new(raw.len());
    let columns = convert_columns(table, &raw, &mut reasons)?;
    Ok(Converted {
        table,
        raw,
        columns,
        reasons,
    })
}

impl Converted {
    /// The times in which the stored tasks these rows' checks look up
    /// run: for `tasks`, the earliest ready or launch time to the latest
    /// finish of the rows (a task stored with the same id, the same task,
    /// runs then); for `task_windows`, the earliest start to the latest end
    /// (a window lies in its task's run). `None` for the other tables and
    /// for rows without times.
    pub fn task_times(&self) -> Option<(i64, i64)> {
        use arrow::compute::{max, min};
        let view = Columns {
            table: self.table,
            arrays: &self.columns,
        };
        let (first, last) = match self.table {
            Table::Tasks => {
                let launch = min(view.time("launch_time"));
                let ready = min(view.time("ready_time"));
                let first = match (launch, ready) {
                    (Some(l), Some(r)) => Some(l.min(r)),
                    (l, r) => l.or(r),
                };
                (first, max(view.time("finish_time")))
            }
            Table::TaskWindows => (min(view.time("window_start")), max(view.time("window_end"))),
            _ => return None,
        };
        let (first, last) = (first?, last?);
        (first <= last).then_some((first, last))
    }

    /// The queries the `tasks` rows name (none for other tables): a task
    /// stored with the same id runs in its query's stored span.
    pub fn task_queries(&self) -> Vec<&str> {
        if self.table != Table::Tasks {
            return Vec::new();
        }
        let column = self.table.column_index("query_id").expect("known column");
        let ids = self.columns[column].as_string::<i32>();
        let mut queries: Vec<&str> = (0..ids.len())
            .filter(|&i| ids.is_valid(i))
            .map(|i| ids.value(i))
            .collect();
        // A query's tasks usually come together: the runs first.
        queries.dedup();
        queries.sort_unstable();
        queries.dedup();
        queries
    }
}

/// Checks converted rows of one file (`file`, for the place of a key's
/// first row), second step: rejects every row that breaks a rule (with
/// the first rule it breaks), skips rows already stored, and records the
/// accepted keys and tasks in `known` for the files after it.
pub fn check_converted(
    converted: Converted,
    file: &str,
    known: &mut Known,
    duplicates: BatchDuplicates,
) -> Result<Checked, String> {
    let Converted {
        table,
        raw,
        columns,
        mut reasons,
    } = converted;
    let rows = raw.len();
    let view = Columns {
        table,
        arrays: &columns,
    };
    check_time_order(&view, rows, &mut reasons);
    check_resources(&view, rows, &mut reasons);
    let host_keys = if table == Table::TaskWindows {
        check_windows_in_tasks(&view, rows, known, &mut reasons)
    } else {
        Vec::new()
    };
    let already = check_keys(&view, &raw, file, known, duplicates, &mut reasons);

    let keep: Vec<bool> = (0..rows)
        .map(|i| reasons.accepts(i) && !already[i])
        .collect();
    let all_kept = keep.iter().all(|k| *k);
    // Window identities are checked when the rows are written (the
    // driver's `drop_duplicate_windows`): they need where each row is from.
    let places = if crate::identity::columns(table).is_empty() {
        Vec::new()
    } else {
        let f = known.file(file);
        (0..rows)
            .filter(|&i| keep[i])
            .map(|i| (f, raw.origins[i]))
            .collect()
    };
    let host_keys = if host_keys.is_empty() || all_kept {
        host_keys
    } else {
        (0..rows)
            .filter(|&i| keep[i])
            .map(|i| host_keys[i])
            .collect()
    };
    let columns = if all_kept {
        columns
    } else {
        let keep = BooleanArray::from(keep);
        columns
            .iter()
            .map(|c| filter(c, &keep))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?
    };
    let batch = RecordBatch::try_new(table.schema(), columns).map_err(|e| e.to_string())?;

    let mut rejected: Vec<(Origin, String)> = raw.unreadable;
    rejected.extend(
        reasons
            .0
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| r.map(|r| (raw.origins[i], r))),
    );
    Ok(Checked {
        batch,
        rejected,
        already_stored: already.iter().filter(|a| **a).count(),
        places,
        host_keys,
    })
}

/// Why each row is rejected, if it is: the first rule it breaks (later
/// ones are not reported).
struct Reasons(Vec<Option<String>>);

impl Reasons {
    fn new(rows: usize) -> Self {
        Reasons(vec![None; rows])
    }

    fn reject(&mut self, row: usize, why: String) {
        if self.0[row].is_none() {
            self.0[row] = Some(why);
        }
    }

    fn accepts(&self, row: usize) -> bool {
        self.0[row].is_none()
    }
}

/// The converted columns of a table's rows, looked up by name.
struct Columns<'a> {
    table: Table,
    arrays: &'a [ArrayRef],
}

impl Columns<'_> {
    fn get(&self, name: &str) -> &ArrayRef {
        &self.arrays[self.table.column_index(name).expect("known column")]
    }

    fn time(&self, name: &str) -> &PrimitiveArray<TimestampMicrosecondType> {
        self.get(name).as_primitive::<TimestampMicrosecondType>()
    }

    fn text(&self, name: &str) -> &StringArray {
        self.get(name).as_string::<i32>()
    }
}

/// Every column of the table in its canonical type (NULL when the file has
/// no such optional column); rejects the rows whose value does not convert,
/// is missing where required, or is negative where it may not be.
fn convert_columns(
    table: Table,
    raw: &RawRows,
    reasons: &mut Reasons,
) -> Result<Vec<ArrayRef>, String> {
    let rows = raw.len();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(table.columns().len());
    for spec in table.columns() {
        let array = match raw.columns.get(spec.name) {
            Some(raw_column) => {
                let converted = convert(raw_column, spec.kind, spec.name)?;
                for (i, why) in converted.errors {
                    reasons.reject(i, why);
                }
                converted.array
            }
            None if spec.required => {
                return Err(format!("missing required column '{}'", spec.name));
            }
            None => arrow::array::new_null_array(&spec.kind.data_type(), rows),
        };
        if spec.required && array.null_count() > 0 {
            for i in 0..rows {
                if array.is_null(i) {
                    reasons.reject(i, format!("{} is missing", spec.name));
                }
            }
        }
        if spec.non_negative && spec.kind == ColumnKind::Float {
            let values = array.as_primitive::<Float64Type>();
            for (i, v) in values.iter().enumerate() {
                if let Some(v) = v.filter(|v| *v < 0.0) {
                    reasons.reject(i, format!("negative {}: {v}", spec.name));
                }
            }
        }
        columns.push(array);
    }
    Ok(columns)
}

/// Rejects rows that end before they start (or, for a task, launch before
/// they are ready).
fn check_time_order(columns: &Columns, rows: usize, reasons: &mut Reasons) {
    let orders: &[(&str, &str)] = match columns.table {
        Table::Queries | Table::Stages => &[
            ("submit_time", "start_time"),
            ("start_time", "end_time"),
            ("submit_time", "end_time"),
        ],
        Table::Tasks => &[
            ("launch_time", "finish_time"),
            ("ready_time", "launch_time"),
        ],
        Table::TaskWindows | Table::HostWindows => &[("window_start", "window_end")],
        Table::Executors => &[("add_time", "remove_time")],
        Table::RecordLineage | Table::PartitionLatency => &[],
    };
    for (first, then) in orders {
        let (first_times, then_times) = (columns.time(first), columns.time(then));
        for i in 0..rows {
            if first_times.is_valid(i)
                && then_times.is_valid(i)
                && then_times.value(i) < first_times.value(i)
            {
                reasons.reject(i, format!("{then} is before {first}"));
            }
        }
    }
}

/// Rejects window rows of a resource culprit does not know.
fn check_resources(columns: &Columns, rows: usize, reasons: &mut Reasons) {
    if !matches!(columns.table, Table::TaskWindows | Table::HostWindows) {
        return;
    }
    let resources = columns.text("resource");
    // A few names, each on many rows: the last one known is not parsed again.
    let mut known: Option<&str> = None;
    for i in 0..rows {
        if resources.is_valid(i) {
            let name = resources.value(i);
            if known == Some(name) {
                continue;
            }
            match name.parse::<Resource>() {
                Ok(_) => known = Some(name),
                Err(e) => reasons.reject(i, e),
            }
        }
    }
}

/// Rejects task windows that name no known task or lie outside its run: a
/// slot wait must lie inside [ready_time, launch_time), any other window
/// inside [launch_time, finish_time]. Rows already rejected are not looked
/// at (their values may be missing). Returns each row's host key (its
/// task's host's; [`NO_HOST_KEY`] when unknown).
fn check_windows_in_tasks(
    columns: &Columns,
    rows: usize,
    known: &mut Known,
    reasons: &mut Reasons,
) -> Vec<u32> {
    let (ids, resources, starts, ends) = (
        columns.text("task_id"),
        columns.text("resource"),
        columns.time("window_start"),
        columns.time("window_end"),
    );
    // Consecutive rows usually name the same task: looked up once.
    let mut last: Option<(&str, Option<TaskSpan>)> = None;
    let mut host_keys = vec![NO_HOST_KEY; rows];
    for (i, key) in host_keys.iter_mut().enumerate() {
        if !reasons.accepts(i) {
            continue;
        }
        let id = ids.value(i);
        let span = match last {
            Some((l, span)) if l == id => span,
            _ => {
                let span = known.tasks.get(&crate::identity::key_digest(&[id]));
                last = Some((id, span));
                span
            }
        };
        let Some(span) = span else {
            // Only the stored tasks of the rows' times are read (the
            // driver's `StoredTasks`): one of this id stored in another
            // time is not known, and the row lies outside its run anyway.
            let reason = if known.stored_by_time {
                format!(
                    "unknown task id '{id}' (no task of that id in this ingest, nor stored \
                     running at the row's time)"
                )
            } else {
                format!("unknown task id '{id}'")
            };
            reasons.reject(i, reason);
            continue;
        };
        *key = span.host_key;
        let (start, end) = (starts.value(i), ends.value(i));
        if resources.value(i) == "slots" {
            match span.ready() {
                Some(ready) if start >= ready && end <= span.launch => {}
                Some(_) => reasons.reject(
                    i,
                    format!("slots window outside task '{id}''s wait [ready_time, launch_time)"),
                ),
                None => reasons.reject(
                    i,
                    format!("slots window for task '{id}', which has no ready_time"),
                ),
            }
        } else if start < span.launch || end > span.finish {
            reasons.reject(
                i,
                format!("window outside its task '{id}' [launch_time, finish_time]"),
            );
        }
    }
    host_keys
}

/// Checks the keys of the rows not rejected: a key already stored means
/// the row is skipped (returned as `true`), a key twice in this batch is an
/// error (or a skip, with [`BatchDuplicates::Skip`]). New keys are recorded
/// with their place, for the error of a later duplicate.
fn check_keys(
    columns: &Columns,
    raw: &RawRows,
    file: &str,
    known: &mut Known,
    duplicates: BatchDuplicates,
    reasons: &mut Reasons,
) -> Vec<bool> {
    let rows = raw.len();
    let mut already = vec![false; rows];
    let table = columns.table;
    let key_columns = table.key_columns();
    if key_columns.is_empty() {
        return already;
    }
    let parts: Vec<&StringArray> = key_columns.iter().map(|c| columns.text(c)).collect();
    let f = known.file(file);
    if table == Table::Tasks {
        check_task_keys(
            columns,
            parts[0],
            raw,
            f,
            known,
            duplicates,
            reasons,
            &mut already,
        );
        return already;
    }
    let stored = known.stored_keys.entry(table).or_default();
    let seen = known.batch_keys.entry(table).or_default();
    let mut values: Vec<&str> = Vec::with_capacity(parts.len());
    for (i, already_stored) in already.iter_mut().enumerate() {
        if !reasons.accepts(i) {
            continue;
        }
        values.clear();
        values.extend(parts.iter().map(|p| p.value(i)));
        let key = crate::identity::key_digest(&values);
        if stored.contains(&key) || (duplicates == BatchDuplicates::Skip && seen.contains_key(&key))
        {
            *already_stored = true;
        } else if let Some(first) = seen.get(&key) {
            let shown = values.join("/");
            let first = format!("{}:{}", known.files[first.0 as usize], first.1);
            reasons.reject(i, format!("duplicate key '{shown}' (first at {first})"));
        } else {
            seen.insert(key, (f, raw.origins[i]));
        }
    }
    already
}

/// [`check_keys`] of tasks: their ids against the tasks known; a new
/// task is remembered with its run, for the windows of later files.
#[allow(clippy::too_many_arguments)]
fn check_task_keys(
    columns: &Columns,
    ids: &StringArray,
    raw: &RawRows,
    f: u32,
    known: &mut Known,
    duplicates: BatchDuplicates,
    reasons: &mut Reasons,
    already: &mut [bool],
) {
    let (launch, finish, ready, hosts) = (
        columns.time("launch_time"),
        columns.time("finish_time"),
        columns.time("ready_time"),
        columns.text("host"),
    );
    for (i, already_stored) in already.iter_mut().enumerate() {
        if !reasons.accepts(i) {
            continue;
        }
        let id = ids.value(i);
        let key = crate::identity::key_digest(&[id]);
        match known.tasks.get(&key) {
            None => known.tasks.insert_new(
                key,
                TaskSpan {
                    launch: launch.value(i),
                    finish: finish.value(i),
                    ready: if ready.is_valid(i) {
                        ready.value(i)
                    } else {
                        i64::MIN
                    },
                    file: f,
                    origin: pack(raw.origins[i]),
                    host_key: culprit_store::layout::host_key(hosts.value(i)),
                },
            ),
            Some(span) => match span.place() {
                None => *already_stored = true,
                Some(_) if duplicates == BatchDuplicates::Skip => *already_stored = true,
                Some((ff, origin)) => {
                    let first = format!("{}:{origin}", known.files[ff as usize]);
                    reasons.reject(i, format!("duplicate key '{id}' (first at {first})"));
                }
            },
        }
    }
}

fn batch_time(
    batch: &RecordBatch,
    name: &str,
) -> arrow::array::PrimitiveArray<TimestampMicrosecondType> {
    batch
        .column_by_name(name)
        .expect("canonical column")
        .as_primitive::<TimestampMicrosecondType>()
        .clone()
}

/// Builds a [`TaskSpan`] index from stored task rows, of those whose run
/// (earliest ready or launch time to finish) `keep` keeps.
pub fn index_tasks(batches: &[RecordBatch], known: &mut Known, keep: &dyn Fn(i64, i64) -> bool) {
    for b in batches {
        let ids = b
            .column_by_name("task_id")
            .map(|c| c.as_string::<i32>().clone());
        let Some(ids) = ids else { continue };
        let (launch, finish, ready) = (
            batch_time(b, "launch_time"),
            batch_time(b, "finish_time"),
            batch_time(b, "ready_time"),
        );
        for i in 0..b.num_rows() {
            let first = match ready.is_valid(i) {
                true => ready.value(i).min(launch.value(i)),
                false => launch.value(i),
            };
            if !keep(first, finish.value(i)) {
                continue;
            }
            let id = crate::identity::key_digest(&[ids.value(i)]);
            known.tasks.insert_stored(
                id,
                TaskSpan::stored(
                    launch.value(i),
                    finish.value(i),
                    ready.is_valid(i).then(|| ready.value(i)),
                ),
            );
        }
    }
}

/// Records the stored keys of a keyed table.
pub fn index_keys(table: Table, batches: &[RecordBatch], known: &mut Known) {
    let keys = known.stored_keys.entry(table).or_default();
    for b in batches {
        let parts: Vec<_> = table
            .key_columns()
            .iter()
            .filter_map(|c| b.column_by_name(c).map(|a| a.as_string::<i32>().clone()))
            .collect();
        if parts.len() != table.key_columns().len() {
            continue;
        }
        let mut values: Vec<&str> = Vec::with_capacity(parts.len());
        for i in 0..b.num_rows() {
            values.clear();
            values.extend(parts.iter().map(|p| p.value(i)));
            keys.insert(crate::identity::key_digest(&values));
        }
    }
}
