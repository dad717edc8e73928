//! Trino and Presto query JSON, translated into the interchange tables:
//!
//! - Trino's `QueryInfo` (`GET /v1/query/{id}` on a coordinator): the query,
//!   its stages, and every task with its node, times and driver statistics
//!   per pipeline (`query_info.rs`, `stages.rs`);
//! - a bare `StageInfo` tree (the `payload` of Trino's `QueryCompletedEvent`
//!   saved alone);
//! - event-listener `QueryCompletedEvent`s of Trino and Presto, one JSON
//!   document or JSON lines, raw or in the wrapper the pbench loader writes
//!   (`event.rs`): with Trino's `payload` (the stage tree with tasks) the
//!   query gets tasks; without it (Presto) only the query and its stages.
//!
//! docs/trino.md gives the mapping field by field.

mod event;
mod query_info;
mod stages;
mod values;

use culprit_core::Table;
use serde_json::Value;

use crate::formats::{Origin, RawRows};
use crate::spark::rows::Rows;

/// The rows of one file of Trino or Presto JSON.
pub struct Parsed {
    pub tables: Vec<(Table, RawRows)>,
    /// Queries translated (with tasks or not).
    pub queries: usize,
    /// Lines that are not JSON, or JSON no Trino document: (line, reason).
    pub malformed: Vec<(u64, String)>,
    /// What is worth knowing: queries not finished yet, queries without
    /// task hosts.
    pub notes: Vec<String>,
}

/// The rows being built.
pub(crate) struct Out {
    queries: Rows,
    stages: Rows,
    tasks: Rows,
    task_windows: Rows,
    notes: Vec<String>,
    translated: usize,
}

impl Out {
    fn new() -> Out {
        Out {
            queries: Rows::new(Table::Queries),
            stages: Rows::new(Table::Stages),
            tasks: Rows::new(Table::Tasks),
            task_windows: Rows::new(Table::TaskWindows),
            notes: Vec::new(),
            translated: 0,
        }
    }
}

/// The kinds of document recognised.
enum Doc<'a> {
    QueryInfo(&'a Value),
    StageInfo(&'a Value),
    Completed(event::Completed<'a>),
    /// A pbench line with no completed event (a created or split event).
    Other,
}

fn classify(v: &Value) -> Option<Doc<'_>> {
    let o = v.as_object()?;
    if o.get("queryId").is_some_and(Value::is_string)
        && o.get("queryStats").is_some_and(Value::is_object)
        && (o.contains_key("outputStage") || o.contains_key("finalQueryInfo"))
    {
        return Some(Doc::QueryInfo(v));
    }
    if o.contains_key("stageId")
        && o.contains_key("subStages")
        && (o.contains_key("tasks") || o.contains_key("latestAttemptExecutionInfo"))
    {
        return Some(Doc::StageInfo(v));
    }
    if let Some(e) = event::Completed::of(v) {
        return Some(Doc::Completed(e));
    }
    let pbench = [
        "queryCreatedEvent",
        "queryCompletedEvent",
        "splitCompletedEvent",
    ];
    if pbench.iter().any(|k| o.contains_key(*k)) {
        return Some(Doc::Other);
    }
    None
}

/// Why a JSON document that Trino writes is no telemetry culprit can read
/// (said instead of "not telemetry").
fn unusable(v: &Value) -> Option<&'static str> {
    let first = v.as_array()?.first()?.as_object()?;
    if first.contains_key("queryId") && first.contains_key("state") {
        return Some(
            "a list of Trino queries (GET /v1/query): each query's own QueryInfo \
             (/v1/query/{id}) has its tasks; `culprit collect trino` fetches them",
        );
    }
    if first.contains_key("operatorType") && first.contains_key("stageId") {
        return Some(
            "Trino operator statistics without their query: ingest the query's \
             QueryInfo or QueryCompletedEvent",
        );
    }
    None
}

/// Reads a file as Trino or Presto JSON: `None` when it is not (so the
/// caller says what it may be), `Some(Err(reason))` when it is Trino JSON
/// that holds no telemetry, else its rows.
pub fn read(text: &[u8]) -> Option<Result<Parsed, String>> {
    let start = text.iter().position(|b| !b.is_ascii_whitespace())?;
    if !matches!(text[start], b'{' | b'[') {
        return None;
    }
    let mut out = Out::new();
    let mut malformed = Vec::new();
    match serde_json::from_slice::<Value>(text) {
        Ok(v) => {
            if let Some(reason) = unusable(&v) {
                return Some(Err(reason.to_string()));
            }
            let doc = classify(&v)?;
            let line = 1 + text[..start].iter().filter(|b| **b == b'\n').count() as u64;
            translate(doc, Origin::Line(line), &mut out);
        }
        Err(_) => {
            // JSON lines: one document a line; the first one says whether
            // the file is Trino JSON at all.
            let mut recognised = false;
            for (i, line) in text.split(|b| *b == b'\n').enumerate() {
                let no = i as u64 + 1;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let v = match serde_json::from_slice::<Value>(line) {
                    Ok(v) => v,
                    Err(e) if recognised => {
                        malformed.push((no, format!("malformed JSON: {e}")));
                        continue;
                    }
                    Err(_) => return None,
                };
                match classify(&v) {
                    Some(doc) => {
                        recognised = true;
                        translate(doc, Origin::Line(no), &mut out);
                    }
                    None if recognised => malformed.push((
                        no,
                        "not a Trino or Presto query document (QueryInfo, \
                         QueryCompletedEvent)"
                            .into(),
                    )),
                    None => return None,
                }
            }
            if !recognised {
                return None;
            }
        }
    }
    let Out {
        queries,
        stages,
        tasks,
        task_windows,
        notes,
        translated,
    } = out;
    Some(Ok(Parsed {
        tables: vec![
            (Table::Queries, queries.into_raw()),
            (Table::Stages, stages.into_raw()),
            (Table::Tasks, tasks.into_raw()),
            (Table::TaskWindows, task_windows.into_raw()),
        ],
        queries: translated,
        malformed,
        notes,
    }))
}

fn translate(doc: Doc<'_>, origin: Origin, out: &mut Out) {
    match doc {
        Doc::QueryInfo(v) => query_info::translate(v, origin, out),
        Doc::StageInfo(v) => query_info::translate_stage_tree(v, origin, out),
        Doc::Completed(e) => e.translate(origin, out),
        Doc::Other => {}
    }
}

#[cfg(test)]
mod tests;
