//! Trino's `QueryInfo` (`GET /v1/query/{id}`): the `queries` row, then the
//! stage tree under `outputStage` (stages.rs).

use serde_json::{json, Map, Value};

use super::stages::{self, as_text, stat_bytes, stat_seconds, text_or_null, time, QueryContext};
use super::values::{micros, seconds};
use super::Out;
use crate::formats::Origin;
use crate::spark::rows::LogValue;

/// Query states after which a QueryInfo no longer changes.
pub fn done(state: &str) -> bool {
    matches!(state, "FINISHED" | "FAILED")
}

/// The `queries` status of a Trino or Presto query state.
pub fn status(state: &str) -> String {
    match state {
        "FINISHED" => "succeeded".into(),
        "FAILED" => "failed".into(),
        other => other.to_ascii_lowercase(),
    }
}

/// A resource group id (`["global", "adhoc"]`) as Trino prints it: `global.adhoc`.
pub fn resource_group(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Array(parts) => {
            let parts: Vec<String> = parts.iter().filter_map(as_text).collect();
            (!parts.is_empty()).then(|| parts.join("."))
        }
        other => as_text(other),
    }
}

const QUERY_DURATIONS: &[&str] = &[
    "queuedTime",
    "resourceWaitingTime",
    "dispatchingTime",
    "planningTime",
    "executionTime",
    "elapsedTime",
    "totalScheduledTime",
    "totalCpuTime",
    "totalBlockedTime",
    "inputBlockedTime",
    "outputBlockedTime",
    "physicalInputReadTime",
];

const QUERY_SIZES: &[&str] = &[
    "peakUserMemoryReservation",
    "peakTotalMemoryReservation",
    "physicalInputDataSize",
    "internalNetworkInputDataSize",
    "outputDataSize",
    "physicalWrittenDataSize",
    "spilledDataSize",
];

/// A QueryInfo: its query row, stages and tasks, once the query is done and
/// its info final (a running query's info still changes, and what is
/// stored stands: it is read again when it ends).
pub fn translate(v: &Value, origin: Origin, out: &mut Out) {
    let query_id = v["queryId"].as_str().unwrap_or_default().to_string();
    let state = v.get("state").and_then(Value::as_str).unwrap_or("");
    if !done(state) {
        out.notes.push(format!(
            "Trino query {query_id} is {}: not stored until it has finished",
            if state.is_empty() {
                "in no state"
            } else {
                state
            }
        ));
        return;
    }
    if v.get("finalQueryInfo").and_then(Value::as_bool) == Some(false) {
        out.notes.push(format!(
            "Trino query {query_id} is {state} but its QueryInfo is not final yet \
             (finalQueryInfo false): not stored until it is"
        ));
        return;
    }
    let stats = v.get("queryStats").unwrap_or(&Value::Null);
    let session = v.get("session").unwrap_or(&Value::Null);
    let mut tags = Map::new();
    tags.insert("source".into(), json!("trino"));
    tags.insert("document".into(), json!("query_info"));
    tags.insert("state".into(), json!(state));
    if let Some(version) = v.pointer("/version/version").and_then(as_text) {
        tags.insert("engine_version".into(), json!(version));
    }
    for (key, tag) in [
        ("source", "client_source"),
        ("catalog", "catalog"),
        ("schema", "schema"),
        ("userAgent", "user_agent"),
    ] {
        if let Some(s) = session.get(key).and_then(as_text) {
            tags.insert(tag.into(), json!(s));
        }
    }
    if let Some(t) = session
        .get("clientTags")
        .filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
    {
        tags.insert("client_tags".into(), t.clone());
    }
    if let Some(t) = v.get("queryType").and_then(as_text) {
        tags.insert("query_type".into(), json!(t));
    }
    if let Some(coordinator) = v
        .get("self")
        .and_then(Value::as_str)
        .and_then(|u| url::Url::parse(u).ok())
    {
        if let Some(host) = coordinator.host_str() {
            let port = coordinator
                .port()
                .map_or(String::new(), |p| format!(":{p}"));
            tags.insert("coordinator".into(), json!(format!("{host}{port}")));
        }
    }
    if let Some(code) = v.pointer("/errorCode/name").and_then(as_text) {
        tags.insert("error_code".into(), json!(code));
    }
    if let Some(msg) = v.pointer("/failureInfo/message").and_then(Value::as_str) {
        tags.insert("error".into(), json!(msg.lines().next().unwrap_or("")));
    }
    stat_seconds(&mut tags, stats, QUERY_DURATIONS);
    stat_bytes(&mut tags, stats, QUERY_SIZES);
    if let Some(m) = stats.get("cumulativeUserMemory").and_then(Value::as_f64) {
        tags.insert("cumulative_user_memory".into(), json!(m));
    }
    out.queries.push(
        origin,
        vec![
            ("query_id", LogValue::S(query_id.clone())),
            ("app_id", LogValue::Null),
            ("user", text_or_null(session.get("user").and_then(as_text))),
            (
                "pool",
                text_or_null(resource_group(v.get("resourceGroupId"))),
            ),
            ("sql_text", text_or_null(v.get("query").and_then(as_text))),
            (
                "submit_time",
                time(stats.get("createTime").and_then(micros)),
            ),
            (
                "start_time",
                time(stats.get("executionStartTime").and_then(micros)),
            ),
            ("end_time", time(stats.get("endTime").and_then(micros))),
            ("status", LogValue::S(status(state))),
            ("tags", LogValue::S(Value::Object(tags).to_string())),
        ],
    );
    out.translated += 1;
    let queued = stats.get("queuedTime").and_then(seconds).unwrap_or(0.0);
    match v.get("outputStage").filter(|s| s.is_object()) {
        Some(root) => {
            let q = QueryContext {
                query_id: &query_id,
                queued,
                origin,
            };
            stages::translate(root, &q, out);
        }
        None => out.notes.push(format!(
            "Trino query {query_id}: no stages (it ended before it was planned)"
        )),
    }
}

/// A stage tree alone (a `QueryCompletedEvent`'s `payload` saved as a
/// file): its query is known by the stage ids only, so its row has no
/// times, user or text (a QueryInfo or event of the same query read later
/// does not change it: stored rows stand).
pub fn translate_stage_tree(root: &Value, origin: Origin, out: &mut Out) {
    let Some(stage_id) = root.get("stageId").and_then(as_text) else {
        return;
    };
    let query_id = stage_id
        .rsplit_once('.')
        .map_or(stage_id.as_str(), |(q, _)| q)
        .to_string();
    let state = root.get("state").and_then(Value::as_str).unwrap_or("");
    if !done(state) {
        out.notes.push(format!(
            "Trino query {query_id}: its output stage is {state}: not stored until it has finished"
        ));
        return;
    }
    out.queries.push(
        origin,
        vec![
            ("query_id", LogValue::S(query_id.clone())),
            ("status", LogValue::S(status(state))),
            (
                "tags",
                LogValue::S(
                    json!({"source": "trino", "document": "stage_info", "state": state})
                        .to_string(),
                ),
            ),
        ],
    );
    out.translated += 1;
    let q = QueryContext {
        query_id: &query_id,
        queued: 0.0,
        origin,
    };
    stages::translate(root, &q, out);
}
