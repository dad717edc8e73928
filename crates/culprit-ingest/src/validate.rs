//! The rejection rules of the interchange format, row by row.

use std::collections::{HashMap, HashSet};

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray, RecordBatch, StringArray,
};
use arrow::compute::filter;
use arrow::datatypes::{Float64Type, TimestampMicrosecondType};
use culprit_core::{ColumnKind, Resource, Table};

use crate::convert::convert;
use crate::formats::{Origin, RawRows};

/// The run of a task, for checking its windows.
#[derive(Debug, Clone, Copy)]
pub struct TaskSpan {
    pub launch: i64,
    pub finish: i64,
    pub ready: Option<i64>,
}

/// What is known before a file is checked: tasks and keys already stored,
/// and those accepted earlier in this batch.
#[derive(Default)]
pub struct Known {
    pub tasks: HashMap<String, TaskSpan>,
    /// Keys already stored, per table.
    pub stored_keys: HashMap<Table, HashSet<String>>,
    /// Keys accepted earlier in this batch: where they came from.
    pub batch_keys: HashMap<Table, HashMap<String, String>>,
    /// Digests of the window identities accepted earlier in this batch
    /// ([`crate::identity`]), with where they came from: an index into
    /// `files` and the row's place in it.
    pub batch_windows: HashMap<Table, HashMap<u128, (u32, Origin)>>,
    /// The files named by `batch_windows`.
    pub files: Vec<String>,
}

/// The outcome of checking one file.
pub struct Checked {
    pub batch: RecordBatch,
    pub rejected: Vec<(Origin, String)>,
    /// Rows whose key is already stored: skipped, not an error.
    pub already_stored: usize,
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

/// Checks the raw rows of one file (`file`, for the place of a key's first
/// row) as `table`: converts each column, rejects every row that breaks a
/// rule (with the first rule it breaks), skips rows already stored, and
/// records the accepted keys and tasks in `known` for the files after it.
/// An error rejects the whole file (a required column missing, a column
/// that cannot be read as its type).
pub fn check(
    table: Table,
    raw: RawRows,
    file: &str,
    known: &mut Known,
    duplicates: BatchDuplicates,
) -> Result<Checked, String> {
    let rows = raw.len();
    let mut reasons = Reasons::new(rows);
    let columns = convert_columns(table, &raw, &mut reasons)?;
    let view = Columns {
        table,
        arrays: &columns,
    };
    check_time_order(&view, rows, &mut reasons);
    check_resources(&view, rows, &mut reasons);
    if table == Table::TaskWindows {
        check_windows_in_tasks(&view, rows, known, &mut reasons);
    }
    let mut already = check_keys(&view, &raw, file, known, duplicates, &mut reasons);
    check_window_identities(
        &view,
        &raw,
        file,
        known,
        duplicates,
        &mut reasons,
        &mut already,
    );

    let keep: BooleanArray = (0..rows)
        .map(|i| Some(reasons.accepts(i) && !already[i]))
        .collect();
    let columns = columns
        .iter()
        .map(|c| filter(c, &keep))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let batch = RecordBatch::try_new(table.schema(), columns).map_err(|e| e.to_string())?;
    if table == Table::Tasks {
        remember_tasks(&batch, known);
    }

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
        for i in 0..rows {
            if spec.required && array.is_null(i) {
                reasons.reject(i, format!("{} is missing", spec.name));
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
    for i in 0..rows {
        if resources.is_valid(i) {
            if let Err(e) = resources.value(i).parse::<Resource>() {
                reasons.reject(i, e);
            }
        }
    }
}

/// Rejects task windows that name no known task or lie outside its run: a
/// slot wait must lie inside [ready_time, launch_time), any other window
/// inside [launch_time, finish_time]. Rows already rejected are not looked
/// at (their values may be missing).
fn check_windows_in_tasks(columns: &Columns, rows: usize, known: &Known, reasons: &mut Reasons) {
    let (ids, resources, starts, ends) = (
        columns.text("task_id"),
        columns.text("resource"),
        columns.time("window_start"),
        columns.time("window_end"),
    );
    for i in 0..rows {
        if !reasons.accepts(i) {
            continue;
        }
        let id = ids.value(i);
        let Some(span) = known.tasks.get(id) else {
            reasons.reject(i, format!("unknown task id '{id}'"));
            continue;
        };
        let (start, end) = (starts.value(i), ends.value(i));
        if resources.value(i) == "slots" {
            match span.ready {
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
    let stored = known.stored_keys.entry(table).or_default();
    let seen = known.batch_keys.entry(table).or_default();
    for (i, already_stored) in already.iter_mut().enumerate() {
        if !reasons.accepts(i) {
            continue;
        }
        let key = parts
            .iter()
            .map(|p| p.value(i))
            .collect::<Vec<_>>()
            .join("\u{1f}");
        if stored.contains(&key) || (duplicates == BatchDuplicates::Skip && seen.contains_key(&key))
        {
            *already_stored = true;
        } else if let Some(first) = seen.get(&key) {
            let shown = key.replace('\u{1f}', "/");
            reasons.reject(i, format!("duplicate key '{shown}' (first at {first})"));
        } else {
            seen.insert(key, format!("{file}:{}", raw.origins[i]));
        }
    }
    already
}

/// Checks the identities of window rows not rejected against those accepted
/// earlier in this batch: the same identity again is an error naming the
/// first (or, with [`BatchDuplicates::Skip`], a skip counted as already
/// stored), as for keys. Identities already stored are looked for when the
/// rows are written (the driver's `drop_stored_windows`).
fn check_window_identities(
    columns: &Columns,
    raw: &RawRows,
    file: &str,
    known: &mut Known,
    duplicates: BatchDuplicates,
    reasons: &mut Reasons,
    already: &mut [bool],
) {
    let table = columns.table;
    if crate::identity::columns(table).is_empty() {
        return;
    }
    let ids = crate::identity::Identities::new(table, |name| {
        table.column_index(name).map(|i| &columns.arrays[i])
    });
    let file_index = match known.files.iter().position(|f| f == file) {
        Some(i) => i,
        None => {
            known.files.push(file.to_string());
            known.files.len() - 1
        }
    } as u32;
    let seen = known.batch_windows.entry(table).or_default();
    for (i, skip) in already.iter_mut().enumerate() {
        if !reasons.accepts(i) || *skip {
            continue;
        }
        let digest = ids.digest(i);
        match seen.get(&digest) {
            None => {
                seen.insert(digest, (file_index, raw.origins[i]));
            }
            Some(_) if duplicates == BatchDuplicates::Skip => *skip = true,
            Some((f, origin)) => {
                let first = &known.files[*f as usize];
                reasons.reject(
                    i,
                    format!(
                        "duplicate window '{}' (first at {first}:{origin})",
                        ids.show(i)
                    ),
                );
            }
        }
    }
}

/// Records the runs of accepted tasks, for the windows of later files.
fn remember_tasks(batch: &RecordBatch, known: &mut Known) {
    let (ids, launch, finish, ready) = (
        batch.column(0).as_string::<i32>().clone(),
        batch_time(batch, "launch_time"),
        batch_time(batch, "finish_time"),
        batch_time(batch, "ready_time"),
    );
    for i in 0..batch.num_rows() {
        known.tasks.insert(
            ids.value(i).to_string(),
            TaskSpan {
                launch: launch.value(i),
                finish: finish.value(i),
                ready: ready.is_valid(i).then(|| ready.value(i)),
            },
        );
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

/// Builds a [`TaskSpan`] index from stored task rows.
pub fn index_tasks(batches: &[RecordBatch], known: &mut Known) {
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
        let keys = known.stored_keys.entry(Table::Tasks).or_default();
        for i in 0..b.num_rows() {
            let id = ids.value(i).to_string();
            keys.insert(id.clone());
            known.tasks.insert(
                id,
                TaskSpan {
                    launch: launch.value(i),
                    finish: finish.value(i),
                    ready: ready.is_valid(i).then(|| ready.value(i)),
                },
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
        for i in 0..b.num_rows() {
            keys.insert(
                parts
                    .iter()
                    .map(|p| p.value(i))
                    .collect::<Vec<_>>()
                    .join("\u{1f}"),
            );
        }
    }
}
