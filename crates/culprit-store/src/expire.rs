//! Housekeeping: `culprit expire --before TIME` drops old telemetry.
//!
//! A query expires when all of it ended before the *cut*: every task
//! finished (a query with no tasks: its `end_time`, else `submit_time`). The
//! cut is `TIME`, moved earlier to the start (first ready or launch time) of
//! every query that stays, so a query that ran beside one that stays stays
//! too: every query that stays is analysed exactly as before (its consumers,
//! slot holders and host rows are all kept). Expired queries lose their
//! `queries`, `stages`, `tasks`, `task_windows` and lineage rows; host rows
//! (`host_windows`) and `executors` that ended by the cut go.
//!
//! One commit, as compaction: the files that lose rows are rewritten with
//! the rows that stay (a file that keeps none is dropped) and retired; killed
//! at any point it loses or duplicates nothing. Sources stay recorded as
//! ingested, so an expired file seen again (`ingest --watch`) does not come
//! back. Retired files are removed by a later `culprit compact`.

use std::collections::{BTreeMap, HashMap, HashSet};

use arrow::array::{Array, AsArray, BooleanArray, StringArray};
use arrow::datatypes::TimestampMicrosecondType;
use arrow::record_batch::RecordBatch;
use culprit_core::Table;
use futures::{StreamExt, TryStreamExt};

use crate::manifest::DataFile;
use crate::{paths, Result, Store};

/// What an expiry did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpireReport {
    /// The manifest version it committed (none when nothing was old enough).
    pub version: Option<u64>,
    /// Queries expired.
    pub queries: usize,
    /// Rows removed, per table.
    pub removed: BTreeMap<String, u64>,
    /// Files rewritten with the rows that stay, and files dropped whole.
    pub rewritten: usize,
    pub dropped: usize,
    /// The host cutoff (microseconds): host rows ending by it went.
    pub host_cutoff: i64,
}

fn text<'a>(b: &'a RecordBatch, name: &str) -> Option<&'a StringArray> {
    b.column_by_name(name)
        .and_then(|c| c.as_string_opt::<i32>())
}

fn time<'a>(
    b: &'a RecordBatch,
    name: &str,
) -> Option<&'a arrow::array::PrimitiveArray<TimestampMicrosecondType>> {
    b.column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>())
}

fn at(a: Option<&arrow::array::PrimitiveArray<TimestampMicrosecondType>>, i: usize) -> Option<i64> {
    a.filter(|a| a.is_valid(i)).map(|a| a.value(i))
}

/// What goes: the expired queries and tasks, and the host cutoff.
struct Expired {
    queries: HashSet<String>,
    tasks: HashSet<String>,
    host_cutoff: i64,
}

impl Expired {
    /// Which rows of a batch of `table` stay.
    fn keep(&self, table: Table, b: &RecordBatch) -> BooleanArray {
        let n = b.num_rows();
        let by_text = |col: &str, set: &HashSet<String>| -> BooleanArray {
            match text(b, col) {
                Some(a) => (0..n)
                    .map(|i| Some(!(a.is_valid(i) && set.contains(a.value(i)))))
                    .collect(),
                None => BooleanArray::from(vec![true; n]),
            }
        };
        match table {
            Table::TaskWindows => by_text("task_id", &self.tasks),
            Table::HostWindows => {
                let end = time(b, "window_end");
                (0..n)
                    .map(|i| Some(at(end, i).is_none_or(|e| e > self.host_cutoff)))
                    .collect()
            }
            Table::Executors => {
                let removed = time(b, "remove_time");
                (0..n)
                    .map(|i| Some(at(removed, i).is_none_or(|e| e > self.host_cutoff)))
                    .collect()
            }
            _ => by_text("query_id", &self.queries),
        }
    }

    /// Whether a file may hold rows that go (from its window span).
    fn may_touch(&self, f: &DataFile, before: i64) -> bool {
        match (f.table.as_str(), f.window_span) {
            // Every window of an expired task ends before `before`.
            ("task_windows", Some([first, _])) => first < before,
            ("host_windows", Some([first, _])) => first <= self.host_cutoff,
            _ => true,
        }
    }
}

impl Store {
    /// Drops the telemetry of the queries that ended before `before`
    /// (microseconds since the epoch); see the module. `progress(done,
    /// total)` as files are looked at.
    pub async fn expire(
        &self,
        before: i64,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<ExpireReport> {
        let manifest = self.manifest().await?;
        // Per query: (latest finish, earliest ready or launch) of its tasks.
        let mut span: HashMap<String, (i64, i64)> = HashMap::new();
        let cols = ["query_id", "launch_time", "finish_time", "ready_time"];
        let mut tasks = self.scan_table(&manifest, Table::Tasks, Some(&cols));
        while let Some(b) = tasks.try_next().await? {
            let (Some(q), launch, finish, ready) = (
                text(&b, "query_id"),
                time(&b, "launch_time"),
                time(&b, "finish_time"),
                time(&b, "ready_time"),
            ) else {
                continue;
            };
            for i in 0..b.num_rows() {
                if !q.is_valid(i) {
                    continue;
                }
                let start = [at(ready, i), at(launch, i)].into_iter().flatten().min();
                let end = at(finish, i).or(at(launch, i));
                let e = span
                    .entry(q.value(i).to_string())
                    .or_insert((i64::MIN, i64::MAX));
                // A task with no time at all keeps its query.
                e.0 = e.0.max(end.unwrap_or(i64::MAX));
                e.1 = e.1.min(start.unwrap_or(i64::MIN));
            }
        }
        // Queries with no task: by their own times.
        let cols = ["query_id", "end_time", "submit_time"];
        let mut queries = self.scan_table(&manifest, Table::Queries, Some(&cols));
        while let Some(b) = queries.try_next().await? {
            let (Some(q), end, submit) = (
                text(&b, "query_id"),
                time(&b, "end_time"),
                time(&b, "submit_time"),
            ) else {
                continue;
            };
            for i in 0..b.num_rows() {
                if q.is_valid(i) && !span.contains_key(q.value(i)) {
                    let t = at(end, i).or(at(submit, i)).unwrap_or(i64::MAX);
                    let s = at(submit, i).unwrap_or(t);
                    span.insert(q.value(i).to_string(), (t, s.min(t)));
                }
            }
        }
        // The cut: queries that end at or after it stay, and so does every
        // query that ended after the earliest start of one that stays (they
        // ran together: dropping it would change the other's blame). Latest
        // end first, the cut moving down to each kept query's start.
        let mut by_end: Vec<(&String, i64, i64)> =
            span.iter().map(|(q, (e, s))| (q, *e, *s)).collect();
        by_end.sort_unstable_by_key(|e| std::cmp::Reverse(e.1));
        let mut host_cutoff = before;
        let mut kept = 0;
        for (_, end, start) in &by_end {
            if *end < host_cutoff {
                break;
            }
            host_cutoff = host_cutoff.min(*start);
            kept += 1;
        }
        let expired: HashSet<String> = by_end[kept..]
            .iter()
            .map(|(q, _, _)| (*q).clone())
            .collect();
        drop(by_end);
        drop(span);
        // The tasks of the expired queries.
        let mut task_ids = HashSet::new();
        if !expired.is_empty() {
            let cols = ["task_id", "query_id"];
            let mut tasks = self.scan_table(&manifest, Table::Tasks, Some(&cols));
            while let Some(b) = tasks.try_next().await? {
                let (Some(t), Some(q)) = (text(&b, "task_id"), text(&b, "query_id")) else {
                    continue;
                };
                for i in 0..b.num_rows() {
                    if t.is_valid(i) && q.is_valid(i) && expired.contains(q.value(i)) {
                        task_ids.insert(t.value(i).to_string());
                    }
                }
            }
        }
        let gone = Expired {
            queries: expired,
            tasks: task_ids,
            host_cutoff,
        };
        let mut report = ExpireReport {
            queries: gone.queries.len(),
            host_cutoff,
            ..Default::default()
        };

        let files: Vec<(Table, DataFile)> = Table::ALL
            .iter()
            .flat_map(|t| manifest.files_of(*t).map(move |f| (*t, f.clone())))
            .filter(|(_, f)| gone.may_touch(f, before))
            .collect();
        let mut batch = self.begin();
        batch.kind = Some(crate::store::EXPIRE);
        let total = files.len();
        progress(0, total);
        for (n, (table, file)) in files.into_iter().enumerate() {
            // First look: does the file lose rows at all?
            let mut removed = 0u64;
            let mut stream = self.scan_files(vec![file.clone()], None);
            while let Some(b) = stream.try_next().await? {
                let keep = gone.keep(table, &b);
                removed += (keep.len() - keep.true_count()) as u64;
            }
            if removed > 0 {
                *report.removed.entry(table.name().to_string()).or_insert(0) += removed;
                if removed == file.rows {
                    report.dropped += 1;
                } else {
                    report.rewritten += 1;
                    let schema = crate::layout::stored_schema(table);
                    let rows = self.scan_files(vec![file.clone()], None).map({
                        let (schema, gone) = (schema.clone(), &gone);
                        move |b| {
                            let b = crate::compact::conform(b?, &schema)?;
                            let keep = gone.keep(table, &b);
                            Ok(arrow::compute::filter_record_batch(&b, &keep)?)
                        }
                    });
                    let id = batch.id().to_string();
                    let written = batch
                        .write_parquet_stream(table.name(), &schema, rows, file.bucket, |part| {
                            paths::data_file(table, &id, part)
                        })
                        .await;
                    if let Err(e) = written {
                        batch.abort().await;
                        return Err(e);
                    }
                }
                batch.merged_files(table.name(), vec![file.path.clone()]);
            }
            progress(n + 1, total);
        }
        if report.removed.is_empty() {
            batch.abort().await;
            return Ok(report);
        }
        // The query index loses the expired queries too (else it no longer
        // adds up to the stored tasks, and analyses of one victim would read
        // the whole store).
        let index = crate::layout::QUERY_SPANS;
        for file in manifest.files_named(index).cloned().collect::<Vec<_>>() {
            // An index row goes with its query, as a `queries` row does.
            let keep = |b: &RecordBatch| gone.keep(Table::Queries, b);
            let mut removed = 0usize;
            let mut stream = self.scan_files(vec![file.clone()], None);
            while let Some(b) = stream.try_next().await? {
                let k = keep(&b);
                removed += k.len() - k.true_count();
            }
            if removed == 0 {
                continue;
            }
            if removed as u64 != file.rows {
                let schema = crate::layout::query_spans_schema();
                let rows = self.scan_files(vec![file.clone()], None).map({
                    let schema = schema.clone();
                    move |b| {
                        let b = b?;
                        // An index file written before a column was added
                        // gets it empty (unknown), as compaction does.
                        let b = crate::compact::conform(b, &schema)?;
                        Ok(arrow::compute::filter_record_batch(&b, &keep(&b))?)
                    }
                });
                let id = batch.id().to_string();
                let written = batch
                    .write_parquet_stream(index, &schema, rows, None, |part| {
                        paths::query_spans_file(&id, part)
                    })
                    .await;
                if let Err(e) = written {
                    batch.abort().await;
                    return Err(e);
                }
            }
            batch.merged_files(index, vec![file.path.clone()]);
        }
        report.version = Some(batch.commit().await?.version);
        Ok(report)
    }
}
