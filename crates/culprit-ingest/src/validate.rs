//! The rejection rules of the interchange format, row by row.

use std::collections::{HashMap, HashSet};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
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

pub fn check(
    table: Table,
    raw: RawRows,
    file: &str,
    known: &mut Known,
    duplicates: BatchDuplicates,
) -> Result<Checked, String> {
    let n = raw.len();
    let mut reason: Vec<Option<String>> = vec![None; n];
    let reject = |reason: &mut Vec<Option<String>>, i: usize, why: String| {
        if reason[i].is_none() {
            reason[i] = Some(why);
        }
    };

    let mut columns: Vec<ArrayRef> = Vec::with_capacity(table.columns().len());
    for spec in table.columns() {
        let array = match raw.columns.get(spec.name) {
            Some(raw_col) => {
                let c = convert(raw_col, spec.kind, spec.name)?;
                for (i, why) in c.errors {
                    reject(&mut reason, i, why);
                }
                c.array
            }
            None if spec.required => {
                return Err(format!("missing required column '{}'", spec.name));
            }
            None => arrow::array::new_null_array(&spec.kind.data_type(), n),
        };
        for i in 0..n {
            if spec.required && array.is_null(i) {
                reject(&mut reason, i, format!("{} is missing", spec.name));
            }
        }
        if spec.non_negative && spec.kind == ColumnKind::Float {
            let a = array.as_primitive::<Float64Type>();
            for (i, v) in a.iter().enumerate() {
                if let Some(v) = v.filter(|v| *v < 0.0) {
                    reject(&mut reason, i, format!("negative {}: {v}", spec.name));
                }
            }
        }
        columns.push(array);
    }

    let col = |name: &str| columns[table.column_index(name).expect("known column")].clone();
    let time = |name: &str| col(name).as_primitive::<TimestampMicrosecondType>().clone();
    let text = |name: &str| col(name).as_string::<i32>().clone();

    // End before start.
    let orders: &[(&str, &str)] = match table {
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
    };
    for (a, b) in orders {
        let (ta, tb) = (time(a), time(b));
        for i in 0..n {
            if ta.is_valid(i) && tb.is_valid(i) && tb.value(i) < ta.value(i) {
                reject(&mut reason, i, format!("{b} is before {a}"));
            }
        }
    }

    // Resources must be known.
    if matches!(table, Table::TaskWindows | Table::HostWindows) {
        let res = text("resource");
        for i in 0..n {
            if res.is_valid(i) {
                if let Err(e) = res.value(i).parse::<Resource>() {
                    reject(&mut reason, i, e);
                }
            }
        }
    }

    // Windows must name a known task and lie inside its run (slot waits:
    // inside [ready_time, launch_time)).
    if table == Table::TaskWindows {
        let (ids, res, start, end) = (
            text("task_id"),
            text("resource"),
            time("window_start"),
            time("window_end"),
        );
        for i in 0..n {
            if reason[i].is_some() {
                continue;
            }
            let id = ids.value(i);
            let Some(span) = known.tasks.get(id) else {
                reject(&mut reason, i, format!("unknown task id '{id}'"));
                continue;
            };
            let (s, e) = (start.value(i), end.value(i));
            if res.value(i) == "slots" {
                match span.ready {
                    Some(ready) if s >= ready && e <= span.launch => {}
                    Some(_) => reject(
                        &mut reason,
                        i,
                        format!(
                            "slots window outside task '{id}''s wait [ready_time, launch_time)"
                        ),
                    ),
                    None => reject(
                        &mut reason,
                        i,
                        format!("slots window for task '{id}', which has no ready_time"),
                    ),
                }
            } else if s < span.launch || e > span.finish {
                reject(
                    &mut reason,
                    i,
                    format!("window outside its task '{id}' [launch_time, finish_time]"),
                );
            }
        }
    }

    // Keys: already stored means skipped; twice in this batch is an error.
    let mut already = vec![false; n];
    let key_cols = table.key_columns();
    if !key_cols.is_empty() {
        let parts: Vec<_> = key_cols.iter().map(|c| text(c)).collect();
        let stored = known.stored_keys.entry(table).or_default();
        let seen = known.batch_keys.entry(table).or_default();
        for i in 0..n {
            if reason[i].is_some() {
                continue;
            }
            let key = parts
                .iter()
                .map(|p| p.value(i))
                .collect::<Vec<_>>()
                .join("\u{1f}");
            if stored.contains(&key)
                || (duplicates == BatchDuplicates::Skip && seen.contains_key(&key))
            {
                already[i] = true;
            } else if let Some(first) = seen.get(&key) {
                let shown = key.replace('\u{1f}', "/");
                reject(
                    &mut reason,
                    i,
                    format!("duplicate key '{shown}' (first at {first})"),
                );
            } else {
                seen.insert(key, format!("{file}:{}", raw.origins[i]));
            }
        }
    }

    let keep: BooleanArray = (0..n)
        .map(|i| Some(reason[i].is_none() && !already[i]))
        .collect();
    let columns = columns
        .iter()
        .map(|c| filter(c, &keep))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let batch = RecordBatch::try_new(table.schema(), columns).map_err(|e| e.to_string())?;

    if table == Table::Tasks {
        let (ids, launch, finish, ready) = (
            batch.column(0).as_string::<i32>().clone(),
            batch_time(&batch, "launch_time"),
            batch_time(&batch, "finish_time"),
            batch_time(&batch, "ready_time"),
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

    let mut rejected: Vec<(Origin, String)> = raw.unreadable;
    rejected.extend(
        reason
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
