//! Event-listener `QueryCompletedEvent`s of Trino and Presto.
//!
//! Trino's carries, in `metadata.payload`, the query's stage tree with its
//! tasks (the `StageInfo` JSON of the QueryInfo), unless the listener cut
//! it: with it the query gets stages, tasks and windows as from a QueryInfo.
//! Without it (and always in Presto's, whose `stageStatistics` are per stage),
//! the query and its stages are stored, but no task: no host is known, and
//! every attribution of the method is per host.

use serde_json::{json, Map, Value};

use super::query_info::{done, resource_group, status};
use super::stages::{self, as_text, short_stage_id, snake, text_or_null, time, QueryContext};
use super::values::{bytes, micros, seconds};
use super::Out;
use crate::formats::Origin;
use crate::spark::rows::LogValue;

/// A completed event, and the wrapper line it came in (pbench's loader
/// writes `{"queryCompletedEvent": {...}, "cpuTimeMillis": ..., ...}`).
pub struct Completed<'a> {
    event: &'a Value,
    wrapper: Option<&'a Value>,
}

impl<'a> Completed<'a> {
    /// The event in `v`, raw or wrapped.
    pub fn of(v: &'a Value) -> Option<Completed<'a>> {
        let is_event = |e: &Value| {
            e.pointer("/metadata/queryId").is_some_and(Value::is_string)
                && (e.get("statistics").is_some() || e.get("context").is_some())
        };
        if is_event(v) {
            return Some(Completed {
                event: v,
                wrapper: None,
            });
        }
        let inner = v.get("queryCompletedEvent").filter(|e| is_event(e))?;
        Some(Completed {
            event: inner,
            wrapper: Some(v),
        })
    }

    /// A duration of the statistics: the wrapper's `<name>Millis` when it
    /// has one (pbench writes both, and its `statistics` durations are
    /// seconds in real dumps but milliseconds in its hand-written fixtures),
    /// else the event's own.
    fn duration(&self, name: &str) -> Option<f64> {
        let millis = self
            .wrapper
            .and_then(|w| w.get(format!("{name}Millis")))
            .and_then(Value::as_f64);
        millis.map(|ms| ms / 1e3).or_else(|| {
            self.event
                .pointer(&format!("/statistics/{name}"))
                .and_then(seconds)
        })
    }

    pub fn translate(&self, origin: Origin, out: &mut Out) {
        let e = self.event;
        let query_id = e["metadata"]["queryId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let state = e
            .pointer("/metadata/queryState")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !state.is_empty() && !done(state) {
            out.notes.push(format!(
                "query {query_id} is {state} in its completed event: not stored"
            ));
            return;
        }
        let context = e.get("context").unwrap_or(&Value::Null);
        let version = context.get("serverVersion").and_then(as_text);
        // Presto's versions are 0.x; Trino's are numbers (351 on).
        let engine = match &version {
            Some(v) if v.starts_with("0.") => "presto",
            _ => "trino",
        };
        let payload = self.payload();
        let mut tags = Map::new();
        tags.insert("source".into(), json!(engine));
        tags.insert("document".into(), json!("query_completed_event"));
        if !state.is_empty() {
            tags.insert("state".into(), json!(state));
        }
        if let Some(v) = &version {
            tags.insert("engine_version".into(), json!(v));
        }
        for (key, tag) in [
            ("source", "client_source"),
            ("catalog", "catalog"),
            ("schema", "schema"),
            ("environment", "environment"),
            ("serverAddress", "coordinator"),
            ("userAgent", "user_agent"),
        ] {
            if let Some(s) = context.get(key).and_then(as_text) {
                tags.insert(tag.into(), json!(s));
            }
        }
        if let Some(t) = context
            .get("clientTags")
            .filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
        {
            tags.insert("client_tags".into(), t.clone());
        }
        if let Some(w) = self.wrapper {
            if let Some(c) = w.get("clusterName").and_then(as_text) {
                tags.insert("cluster".into(), json!(c));
            }
        }
        if let Some(t) = e
            .get("queryType")
            .or_else(|| context.get("queryType"))
            .and_then(as_text)
        {
            tags.insert("query_type".into(), json!(t));
        }
        if let Some(code) = e.pointer("/failureInfo/errorCode/name").and_then(as_text) {
            tags.insert("error_code".into(), json!(code));
        }
        if let Some(msg) = e
            .pointer("/failureInfo/failureMessage")
            .and_then(Value::as_str)
        {
            tags.insert("error".into(), json!(msg.lines().next().unwrap_or("")));
        }
        for name in [
            "cpuTime",
            "wallTime",
            "queuedTime",
            "scheduledTime",
            "resourceWaitingTime",
            "analysisTime",
            "planningTime",
            "executionTime",
            "inputBlockedTime",
            "outputBlockedTime",
            "physicalInputReadTime",
        ] {
            if let Some(s) = self.duration(name) {
                tags.insert(snake(name), json!(s));
            }
        }
        let stats = e.get("statistics").unwrap_or(&Value::Null);
        for name in [
            "peakUserMemoryBytes",
            "peakTotalNonRevocableMemoryBytes",
            "peakTaskUserMemory",
            "peakTaskTotalMemory",
            "physicalInputBytes",
            "internalNetworkBytes",
            "totalBytes",
            "outputBytes",
            "writtenBytes",
            "writtenOutputBytes",
            "cumulativeMemory",
            "completedSplits",
        ] {
            if let Some(x) = stats.get(name).and_then(Value::as_f64) {
                tags.insert(snake(name), json!(x));
            }
        }
        if payload.is_none() {
            tags.insert("tasks_known".into(), json!(false));
        }
        out.queries.push(
            origin,
            vec![
                ("query_id", LogValue::S(query_id.clone())),
                ("app_id", LogValue::Null),
                ("user", text_or_null(context.get("user").and_then(as_text))),
                (
                    "pool",
                    text_or_null(resource_group(context.get("resourceGroupId"))),
                ),
                (
                    "sql_text",
                    text_or_null(e.pointer("/metadata/query").and_then(as_text)),
                ),
                ("submit_time", time(e.get("createTime").and_then(micros))),
                (
                    "start_time",
                    time(e.get("executionStartTime").and_then(micros)),
                ),
                ("end_time", time(e.get("endTime").and_then(micros))),
                (
                    "status",
                    LogValue::S(if state.is_empty() {
                        "unknown".into()
                    } else {
                        status(state)
                    }),
                ),
                ("tags", LogValue::S(Value::Object(tags).to_string())),
            ],
        );
        out.translated += 1;
        match payload {
            Some(root) => {
                let q = QueryContext {
                    query_id: &query_id,
                    queued: self.duration("queuedTime").unwrap_or(0.0),
                    origin,
                };
                stages::translate(&root, &q, out);
            }
            None => {
                let n = self.stage_rows(&query_id, origin, out);
                out.notes.push(format!(
                    "{engine} query {query_id}: its completed event has {} but no tasks \
                     (no hosts): stored as a query{}, neither victim nor culprit in blame",
                    if n > 0 {
                        "stage statistics"
                    } else {
                        "query statistics"
                    },
                    if n > 0 {
                        format!(" and {n} stages")
                    } else {
                        String::new()
                    },
                ));
            }
        }
    }

    /// Trino's `metadata.payload`: the stage tree, as JSON text (or, in a
    /// re-serialised event, as an object).
    fn payload(&self) -> Option<Value> {
        let p = self.event.pointer("/metadata/payload")?;
        let tree = match p {
            Value::String(s) => serde_json::from_str::<Value>(s).ok()?,
            Value::Object(_) => p.clone(),
            _ => return None,
        };
        (tree.get("stageId").is_some() && tree.get("subStages").is_some()).then_some(tree)
    }

    /// Stage rows from stage-level statistics: Presto's `stageStatistics`,
    /// or Trino's `cpuTimeDistribution` and `stageGcStatistics`. Returns
    /// how many.
    fn stage_rows(&self, query_id: &str, origin: Origin, out: &mut Out) -> usize {
        let e = self.event;
        let mut stages: std::collections::BTreeMap<String, Map<String, Value>> = Default::default();
        let list = |path: &str| {
            e.pointer(path)
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
        };
        for s in list("/stageStatistics") {
            let Some(id) = s.get("stageId").and_then(as_text) else {
                continue;
            };
            let id = match s.get("stageExecutionId").and_then(Value::as_i64) {
                Some(x) if x != 0 => format!("{id}.{x}"),
                _ => id,
            };
            let attrs = stages.entry(id).or_default();
            if let Some(n) = s.get("tasks").and_then(Value::as_f64) {
                attrs.insert("tasks".into(), json!(n));
            }
            for key in [
                "totalScheduledTime",
                "totalCpuTime",
                "retriedCpuTime",
                "totalBlockedTime",
            ] {
                if let Some(x) = s.get(key).and_then(seconds) {
                    attrs.insert(snake(key), json!(x));
                }
            }
            for key in [
                "rawInputDataSize",
                "processedInputDataSize",
                "physicalWrittenDataSize",
            ] {
                if let Some(x) = s.get(key).and_then(bytes) {
                    attrs.insert(snake(key), json!(x));
                }
            }
            for key in ["cpuDistribution", "memoryDistribution", "gcStatistics"] {
                if let Some(x) = s.get(key).filter(|x| x.is_object()) {
                    attrs.insert(snake(key), x.clone());
                }
            }
        }
        for s in list("/statistics/cpuTimeDistribution") {
            if let Some(id) = s.get("stageId").and_then(as_text) {
                let attrs = stages.entry(id).or_default();
                if let Some(n) = s.get("tasks").and_then(Value::as_f64) {
                    attrs.insert("tasks".into(), json!(n));
                }
                attrs.insert("cpu_distribution".into(), s.clone());
            }
        }
        for s in list("/statistics/stageGcStatistics") {
            if let Some(id) = s.get("stageId").and_then(as_text) {
                let attrs = stages.entry(id).or_default();
                if let Some(n) = s.get("tasks").and_then(Value::as_f64) {
                    attrs.entry("tasks").or_insert(json!(n));
                }
                attrs.insert("gc_statistics".into(), s.clone());
            }
        }
        let n = stages.len();
        for (id, attrs) in stages {
            out.stages.push(
                origin,
                vec![
                    ("query_id", LogValue::S(query_id.to_string())),
                    ("stage_id", LogValue::S(short_stage_id(query_id, &id))),
                    ("attrs", LogValue::S(Value::Object(attrs).to_string())),
                ],
            );
        }
        n
    }
}
