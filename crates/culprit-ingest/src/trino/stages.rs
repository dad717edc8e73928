//! A Trino `StageInfo` tree (`QueryInfo.outputStage`, or the `payload` of
//! a `QueryCompletedEvent`) translated into `stages`, `tasks` and
//! `task_windows` rows. docs/trino.md gives the mapping field by field.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::values::{bytes, distribution_total_seconds, micros, seconds};
use super::Out;
use crate::formats::Origin;
use crate::spark::rows::LogValue;

/// What the query says that its tasks need.
pub struct QueryContext<'a> {
    pub query_id: &'a str,
    /// Seconds the query waited in its resource group's queue: each task's
    /// slot wait, just before it was created.
    pub queued: f64,
    pub origin: Origin,
}

/// The stages and tasks under `root` (the query's output stage).
pub fn translate(root: &Value, q: &QueryContext<'_>, out: &mut Out) {
    let mut stack = vec![root];
    while let Some(stage) = stack.pop() {
        stage_rows(stage, q, out);
        if let Some(subs) = stage.get("subStages").and_then(Value::as_array) {
            stack.extend(subs.iter().rev());
        }
    }
}

/// A stage's id within its query: what follows `<query id>.` in Trino's
/// `stageId` (`20240704_153137_00011_c9cak.2` is stage `2`).
pub fn short_stage_id(query_id: &str, stage_id: &str) -> String {
    stage_id
        .strip_prefix(query_id)
        .and_then(|r| r.strip_prefix('.'))
        .unwrap_or(stage_id)
        .to_string()
}

/// A stage's tasks: Trino's `tasks`, or Presto's under
/// `latestAttemptExecutionInfo`.
fn tasks_of(stage: &Value) -> &[Value] {
    stage
        .get("tasks")
        .or_else(|| stage.pointer("/latestAttemptExecutionInfo/tasks"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn stage_stats(stage: &Value) -> Option<&Value> {
    stage
        .get("stageStats")
        .or_else(|| stage.pointer("/latestAttemptExecutionInfo/stats"))
}

fn stage_rows(stage: &Value, q: &QueryContext<'_>, out: &mut Out) {
    let Some(full_id) = stage.get("stageId").and_then(as_text) else {
        out.notes.push(format!(
            "query {}: a stage without a stageId, skipped",
            q.query_id
        ));
        return;
    };
    let stage_id = short_stage_id(q.query_id, &full_id);
    let parents: Vec<String> = stage
        .get("subStages")
        .and_then(Value::as_array)
        .map(|subs| {
            subs.iter()
                .filter_map(|s| s.get("stageId").and_then(as_text))
                .map(|s| short_stage_id(q.query_id, &s))
                .collect()
        })
        .unwrap_or_default();
    let mut first_create: Option<i64> = None;
    let mut last_end: Option<i64> = None;
    for task in tasks_of(stage) {
        if let Some((create, end)) = task_row(task, &stage_id, q, out) {
            first_create = Some(first_create.map_or(create, |f| f.min(create)));
            last_end = Some(last_end.map_or(end, |l| l.max(end)));
        }
    }
    let mut attrs = Map::new();
    attrs.insert("trino_stage_id".into(), json!(full_id));
    put_text(
        &mut attrs,
        "state",
        stage
            .get("state")
            .or_else(|| stage.pointer("/latestAttemptExecutionInfo/state")),
    );
    if let Some(root) = stage.pointer("/plan/root/@type").and_then(Value::as_str) {
        attrs.insert("plan_root".into(), json!(root));
    }
    if let Some(stats) = stage_stats(stage) {
        put_time(
            &mut attrs,
            "scheduling_complete",
            stats.get("schedulingComplete"),
        );
        for key in [
            "totalTasks",
            "completedTasks",
            "failedTasks",
            "totalDrivers",
        ] {
            if let Some(n) = stats.get(key).and_then(Value::as_f64) {
                attrs.insert(snake(key), json!(n));
            }
        }
        stat_seconds(&mut attrs, stats, STAGE_DURATIONS);
        stat_bytes(&mut attrs, stats, STAGE_SIZES);
    }
    let name = fragment_name(stage, &stage_id);
    out.stages.push(
        q.origin,
        vec![
            ("query_id", LogValue::S(q.query_id.to_string())),
            ("stage_id", LogValue::S(stage_id)),
            (
                "parent_ids",
                text_or_null((!parents.is_empty()).then(|| parents.join(","))),
            ),
            ("name", LogValue::S(name)),
            ("submit_time", time(first_create)),
            ("start_time", LogValue::Null),
            ("end_time", time(last_end)),
            ("attrs", LogValue::S(Value::Object(attrs).to_string())),
        ],
    );
}

/// `Fragment 2 [SOURCE]`: the stage's number and its plan fragment's
/// partitioning, as Trino's EXPLAIN names fragments.
fn fragment_name(stage: &Value, stage_id: &str) -> String {
    let handle = stage.pointer("/plan/partitioning/connectorHandle");
    let kind = handle
        .and_then(|h| h.get("function").or_else(|| h.get("partitioning")))
        .and_then(Value::as_str);
    match kind {
        Some(k) => format!("Fragment {stage_id} [{k}]"),
        None => format!("Fragment {stage_id}"),
    }
}

const STAGE_DURATIONS: &[&str] = &[
    "totalScheduledTime",
    "totalCpuTime",
    "totalBlockedTime",
    "inputBlockedTime",
    "outputBlockedTime",
    "physicalInputReadTime",
];

const STAGE_SIZES: &[&str] = &[
    "physicalInputDataSize",
    "internalNetworkInputDataSize",
    "rawInputDataSize",
    "processedInputDataSize",
    "outputDataSize",
    "physicalWrittenDataSize",
    "peakUserMemoryReservation",
    "spilledDataSize",
];

/// A task's measurements: one pipeline's, or (when the task has no
/// pipeline statistics) the whole task's. Seconds are driver-seconds:
/// a task's drivers run in parallel, so they add up like a Spark stage's
/// parallel tasks.
#[derive(Debug, Default, Clone, Copy)]
struct Part {
    /// Seconds its drivers ran on a worker thread.
    scheduled: f64,
    cpu: f64,
    /// Seconds its drivers waited, once created, for a worker thread.
    queued: f64,
    /// Seconds its source operators waited for input (input pipelines).
    input_blocked: f64,
    /// Seconds its output operators waited for room in the output buffer
    /// (the output pipeline).
    output_blocked: f64,
    /// What its source operator reads, which says where `input_blocked` goes.
    input: Input,
    read_time: f64,
    read_bytes: f64,
    network_bytes: f64,
    written_bytes: f64,
}

/// Where input-blocked time is charged: the pipeline's source operator says
/// what it waited for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// An exchange (or merge) of pages from other tasks: `network`.
    Exchange,
    /// A connector's page source (a table scan): `disk_read`.
    Scan,
    /// Not an input pipeline, or a source that is no resource (values, a
    /// table function): not charged.
    #[default]
    None,
}

impl Part {
    fn of(stats: &Value) -> Part {
        let s = |k: &str| stats.get(k).and_then(seconds).unwrap_or(0.0);
        let b = |k: &str| stats.get(k).and_then(bytes).unwrap_or(0.0);
        Part {
            scheduled: s("totalScheduledTime"),
            cpu: s("totalCpuTime"),
            queued: 0.0,
            input_blocked: s("inputBlockedTime"),
            output_blocked: s("outputBlockedTime"),
            input: Input::None,
            read_time: s("physicalInputReadTime"),
            read_bytes: b("physicalInputDataSize"),
            network_bytes: b("internalNetworkInputDataSize"),
            written_bytes: b("physicalWrittenDataSize"),
        }
    }

    /// A pipeline: its own figures, its drivers' queued time (a
    /// distribution of nanoseconds), input-blocked time only for an input
    /// pipeline, output-blocked time only for the output pipeline (as
    /// Trino sums them into the task's).
    fn pipeline(p: &Value) -> Part {
        let mut part = Part::of(p);
        part.queued = p
            .get("queuedTime")
            .and_then(distribution_total_seconds)
            .unwrap_or(0.0);
        part.input = if p.get("inputPipeline").and_then(Value::as_bool) == Some(true) {
            source_kind(p)
        } else {
            Input::None
        };
        if part.input == Input::None {
            part.input_blocked = 0.0;
        }
        if p.get("outputPipeline").and_then(Value::as_bool) != Some(true) {
            part.output_blocked = 0.0;
        }
        part
    }

    /// The whole task, when it has no pipeline statistics: input-blocked
    /// time goes to the network when the task read pages from other tasks
    /// (and to storage when it only read storage); drivers' queued time is
    /// not known.
    fn task(stats: &Value) -> Part {
        let mut part = Part::of(stats);
        part.input = if part.network_bytes > 0.0 {
            Input::Exchange
        } else if part.read_bytes > 0.0 {
            Input::Scan
        } else {
            Input::None
        };
        if part.input == Input::None {
            part.input_blocked = 0.0;
        }
        part
    }

    /// On a thread but not on the CPU: reading storage (up to that time),
    /// else waiting to be scheduled by the OS.
    fn off_cpu(&self) -> (f64, f64) {
        let off = (self.scheduled - self.cpu).max(0.0);
        let read = self.read_time.min(off);
        (read, off - read)
    }

    fn cpu_blocked(&self) -> f64 {
        self.queued + self.off_cpu().1
    }

    fn disk_read_blocked(&self) -> f64 {
        self.off_cpu().0 + self.charged_input(Input::Scan)
    }

    fn network_blocked(&self) -> f64 {
        self.charged_input(Input::Exchange) + self.output_blocked
    }

    fn charged_input(&self, kind: Input) -> f64 {
        if self.input == kind {
            self.input_blocked
        } else {
            0.0
        }
    }
}

/// The kind of a pipeline's source operator (the one with the lowest id).
fn source_kind(p: &Value) -> Input {
    let source = p
        .get("operatorSummaries")
        .and_then(Value::as_array)
        .and_then(|ops| {
            ops.iter().min_by_key(|o| {
                o.get("operatorId")
                    .and_then(Value::as_i64)
                    .unwrap_or(i64::MAX)
            })
        })
        .and_then(|o| o.get("operatorType"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if source.starts_with("LocalExchange") || source.starts_with("LocalMerge") {
        Input::None
    } else if source.contains("Exchange") || source.contains("Merge") {
        Input::Exchange
    } else if source.contains("Scan") || source.contains("IndexSource") {
        Input::Scan
    } else {
        Input::None
    }
}

/// Window rows of one task, merged by identity (resource, detail, window).
#[derive(Default)]
struct Windows {
    rows: BTreeMap<(&'static str, &'static str, i64, i64), [f64; 3]>,
}

impl Windows {
    fn add(&mut self, resource: &'static str, detail: &'static str, span: (i64, i64), v: [f64; 3]) {
        if v.iter().all(|x| *x <= 0.0) {
            return;
        }
        let row = self
            .rows
            .entry((resource, detail, span.0, span.1))
            .or_default();
        for (a, b) in row.iter_mut().zip(v) {
            *a += b;
        }
    }

    /// One part's rows over `span`.
    fn part(&mut self, p: &Part, span: (i64, i64)) {
        let (read_wait, os_wait) = p.off_cpu();
        self.add("cpu", "queued", span, [p.queued, 0.0, 0.0]);
        self.add("cpu", "os_sched", span, [os_wait, p.cpu, 0.0]);
        self.add(
            "disk_read",
            "",
            span,
            [read_wait + p.charged_input(Input::Scan), p.read_bytes, 0.0],
        );
        self.add(
            "network",
            "exchange",
            span,
            [p.charged_input(Input::Exchange), p.network_bytes, 0.0],
        );
        self.add(
            "network",
            "output_buffer",
            span,
            [p.output_blocked, 0.0, 0.0],
        );
        self.add("disk_write", "", span, [0.0, p.written_bytes, 0.0]);
    }

    fn push(self, task_id: &str, origin: Origin, out: &mut Out) {
        for ((resource, detail, start, end), [blocked, acquired, gc]) in self.rows {
            out.task_windows.push(
                origin,
                vec![
                    ("task_id", LogValue::S(task_id.to_string())),
                    ("window_start", LogValue::T(start)),
                    ("window_end", LogValue::T(end)),
                    ("resource", LogValue::S(resource.into())),
                    (
                        "detail",
                        text_or_null((!detail.is_empty()).then(|| detail.to_string())),
                    ),
                    ("blocked", LogValue::F(blocked)),
                    ("acquired", LogValue::F(acquired)),
                    (
                        "gc",
                        if gc > 0.0 {
                            LogValue::F(gc)
                        } else {
                            LogValue::Null
                        },
                    ),
                ],
            );
        }
    }
}

/// A pipeline's run, `[firstStartTime, lastEndTime]`, inside the task's run;
/// the task's run when it has no times of its own or none of any length.
fn pipeline_span(p: &Value, run: (i64, i64)) -> (i64, i64) {
    let start = p.get("firstStartTime").and_then(micros);
    let end = p.get("lastEndTime").and_then(micros);
    match (start, end) {
        (Some(s), Some(e)) => {
            let (s, e) = (s.clamp(run.0, run.1), e.clamp(run.0, run.1));
            if e > s {
                (s, e)
            } else {
                run
            }
        }
        _ => run,
    }
}

/// One task's `tasks` row and its `task_windows` rows; its create and end
/// times (microseconds) when it has them.
fn task_row(
    task: &Value,
    stage_id: &str,
    q: &QueryContext<'_>,
    out: &mut Out,
) -> Option<(i64, i64)> {
    let status = task.get("taskStatus").unwrap_or(&Value::Null);
    let stats = task.get("stats").unwrap_or(&Value::Null);
    let Some(task_id) = status.get("taskId").and_then(as_text) else {
        out.notes.push(format!(
            "query {}: a task without a taskId, skipped",
            q.query_id
        ));
        return None;
    };
    let node = status
        .get("nodeId")
        .or_else(|| task.get("nodeId"))
        .and_then(as_text);
    let host = status
        .get("self")
        .and_then(Value::as_str)
        .and_then(|u| url::Url::parse(u).ok())
        .and_then(|u| u.host_str().map(str::to_string))
        .or_else(|| node.clone());
    let (Some(create), Some(end)) = (
        stats.get("createTime").and_then(micros),
        stats.get("endTime").and_then(micros),
    ) else {
        out.notes.push(format!(
            "task {task_id}: no createTime or endTime (not finished), skipped"
        ));
        return None;
    };
    let Some(host) = host else {
        out.notes.push(format!(
            "task {task_id}: no node (taskStatus.self, nodeId), skipped"
        ));
        return None;
    };
    let end = end.max(create);
    let run = (create, end);
    let pipelines = stats
        .get("pipelines")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty());
    let mut windows = Windows::default();
    let mut total = Charged::default();
    match pipelines {
        Some(pipelines) => {
            for p in pipelines {
                let part = Part::pipeline(p);
                windows.part(&part, pipeline_span(p, run));
                total.add(&part);
            }
        }
        None => {
            let part = Part::task(stats);
            windows.part(&part, run);
            total.add(&part);
        }
    }
    let memory = stats.get("peakUserMemoryReservation").and_then(bytes);
    windows.add("memory", "user", run, [0.0, memory.unwrap_or(0.0), 0.0]);
    let gc = status
        .get("fullGcTime")
        .or_else(|| stats.get("fullGcTime"))
        .and_then(seconds);
    windows.add("cpu", "gc", run, [0.0, 0.0, gc.unwrap_or(0.0)]);

    let task_stats = Part::of(stats);
    let blocked_total = stats.get("totalBlockedTime").and_then(seconds);
    let mut attrs = Map::new();
    attrs.insert("trino_task_id".into(), json!(task_id));
    put_text(
        &mut attrs,
        "node_id",
        node.as_ref().map(|n| json!(n)).as_ref(),
    );
    put_text(&mut attrs, "state", status.get("state"));
    if let Some(b) = task
        .pointer("/taskStatus/speculative")
        .and_then(Value::as_bool)
    {
        attrs.insert("speculative".into(), json!(b));
    }
    put_time(&mut attrs, "first_start_time", stats.get("firstStartTime"));
    put_time(&mut attrs, "last_end_time", stats.get("lastEndTime"));
    stat_seconds(&mut attrs, stats, TASK_DURATIONS);
    stat_bytes(&mut attrs, stats, TASK_SIZES);
    for key in [
        "totalDrivers",
        "completedDrivers",
        "outputPositions",
        "fullGcCount",
    ] {
        if let Some(n) = stats.get(key).and_then(Value::as_f64) {
            attrs.insert(snake(key), json!(n));
        }
    }
    if let Some(m) = stats.get("cumulativeUserMemory").and_then(Value::as_f64) {
        attrs.insert("cumulative_user_memory".into(), json!(m));
    }
    if pipelines.is_some() {
        attrs.insert("driver_queued_time".into(), json!(total.queued));
        attrs.insert("pipelines".into(), json!(pipelines.map_or(0, Vec::len)));
    }
    if let Some(b) = blocked_total {
        // Blocked time no resource explains: a join waiting for its build
        // side, a build waiting for its probe, local exchanges, memory.
        let other = (b - total.input_blocked - total.output_blocked).max(0.0);
        attrs.insert("other_blocked_time".into(), json!(other));
    }
    if let Some(f) = status
        .get("failures")
        .and_then(Value::as_array)
        .and_then(|f| f.first())
        .and_then(|f| f.get("message"))
        .and_then(Value::as_str)
    {
        attrs.insert("failure".into(), json!(f.lines().next().unwrap_or("")));
    }

    let ready = create - (q.queued * 1e6).round() as i64;
    let state = status.get("state").and_then(Value::as_str).unwrap_or("");
    let row = vec![
        ("task_id", LogValue::S(task_id.clone())),
        ("query_id", LogValue::S(q.query_id.to_string())),
        ("stage_id", LogValue::S(stage_id.to_string())),
        ("host", LogValue::S(host)),
        ("executor_id", text_or_null(node)),
        ("ready_time", LogValue::T(ready)),
        ("launch_time", LogValue::T(create)),
        ("finish_time", LogValue::T(end)),
        ("status", LogValue::S(task_status(state))),
        ("input_bytes", LogValue::F(task_stats.read_bytes)),
        ("output_bytes", LogValue::F(task_stats.written_bytes)),
        ("shuffle_read_bytes", LogValue::F(task_stats.network_bytes)),
        (
            "shuffle_write_bytes",
            float_or_null(stats.get("outputDataSize").and_then(bytes)),
        ),
        ("cpu_seconds", LogValue::F(task_stats.cpu)),
        ("gc_seconds", float_or_null(gc)),
        ("disk_read_blocked", LogValue::F(total.disk_read)),
        ("disk_write_blocked", LogValue::Null),
        ("network_blocked", LogValue::F(total.network)),
        ("cpu_blocked", LogValue::F(total.cpu)),
        ("memory_blocked", LogValue::Null),
        (
            "scheduler_delay",
            float_or_null(stats.get("queuedTime").and_then(seconds)),
        ),
        ("attrs", LogValue::S(Value::Object(attrs).to_string())),
    ];
    out.tasks.push(q.origin, row);
    windows.push(&task_id, q.origin, out);
    Some((create, end))
}

/// A task's blocked seconds as charged to resources, summed over its parts.
#[derive(Default)]
struct Charged {
    cpu: f64,
    disk_read: f64,
    network: f64,
    /// Drivers' queued seconds (inside `cpu`).
    queued: f64,
    /// Input- and output-blocked seconds charged (inside `disk_read` and
    /// `network`).
    input_blocked: f64,
    output_blocked: f64,
}

impl Charged {
    fn add(&mut self, part: &Part) {
        self.cpu += part.cpu_blocked();
        self.disk_read += part.disk_read_blocked();
        self.network += part.network_blocked();
        self.queued += part.queued;
        self.input_blocked += part.input_blocked;
        self.output_blocked += part.output_blocked;
    }
}

fn task_status(state: &str) -> String {
    match state {
        "FINISHED" => "succeeded".into(),
        "FAILED" => "failed".into(),
        "ABORTED" | "CANCELED" => "killed".into(),
        "" => "unknown".into(),
        other => other.to_ascii_lowercase(),
    }
}

const TASK_DURATIONS: &[&str] = &[
    "queuedTime",
    "elapsedTime",
    "totalScheduledTime",
    "totalCpuTime",
    "totalBlockedTime",
    "inputBlockedTime",
    "outputBlockedTime",
    "physicalInputReadTime",
];

const TASK_SIZES: &[&str] = &[
    "rawInputDataSize",
    "processedInputDataSize",
    "outputDataSize",
    "peakUserMemoryReservation",
];

/// `totalCpuTime` -> `total_cpu_time`; `...DataSize` -> `..._bytes`.
pub fn snake(key: &str) -> String {
    let key = key
        .strip_suffix("DataSize")
        .map_or_else(|| key.to_string(), |k| format!("{k}Bytes"));
    let key = key
        .strip_suffix("Reservation")
        .map_or_else(|| key.clone(), |k| format!("{k}Bytes"));
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The durations among `keys` that `stats` has, in seconds, by snake name.
pub fn stat_seconds(attrs: &mut Map<String, Value>, stats: &Value, keys: &[&str]) {
    for key in keys {
        if let Some(s) = stats.get(*key).and_then(seconds) {
            attrs.insert(snake(key), json!(s));
        }
    }
}

/// The data sizes among `keys` that `stats` has, in bytes.
pub fn stat_bytes(attrs: &mut Map<String, Value>, stats: &Value, keys: &[&str]) {
    for key in keys {
        if let Some(b) = stats.get(*key).and_then(bytes) {
            attrs.insert(snake(key), json!(b));
        }
    }
}

fn put_text(attrs: &mut Map<String, Value>, key: &str, v: Option<&Value>) {
    if let Some(s) = v.and_then(as_text) {
        attrs.insert(key.into(), json!(s));
    }
}

fn put_time(attrs: &mut Map<String, Value>, key: &str, v: Option<&Value>) {
    if let Some(t) = v.and_then(micros) {
        if let Some(d) = chrono::DateTime::from_timestamp_micros(t) {
            attrs.insert(
                key.into(),
                json!(d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
            );
        }
    }
}

/// A text or number value as text.
pub fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub fn text_or_null(v: Option<String>) -> LogValue {
    v.map_or(LogValue::Null, LogValue::S)
}

pub fn float_or_null(v: Option<f64>) -> LogValue {
    v.map_or(LogValue::Null, LogValue::F)
}

pub fn time(us: Option<i64>) -> LogValue {
    us.map_or(LogValue::Null, LogValue::T)
}
