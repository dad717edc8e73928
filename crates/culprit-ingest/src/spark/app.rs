//! One Spark application's event log, folded event by event into the facts
//! culprit stores, then turned into interchange rows (docs/spark.md gives
//! the mapping, column by column).

use std::collections::{BTreeMap, HashMap};

use serde::de::IgnoredAny;
use serde_json::{json, Map, Value};

use super::events::*;
use super::rows::{LogValue, Rows};
use crate::formats::Origin;
use culprit_core::Table;

/// What the log says about itself, from its file names.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogState {
    /// The log is still being written (`.inprogress`, a rolling log whose
    /// `appstatus` file is in progress, a legacy directory without
    /// `APPLICATION_COMPLETE`): unfinished queries, stages and executors are
    /// left for a later ingest, and its last line may be cut.
    pub in_progress: bool,
}

/// The rows of one application and what was counted reading it.
pub struct Finished {
    pub app_key: String,
    pub tables: Vec<(Table, Rows)>,
    /// Event types culprit does not know, with their counts.
    pub unknown_events: BTreeMap<String, u64>,
    pub events: u64,
}

#[derive(Default)]
struct Query {
    kind: &'static str,
    submit: Option<i64>,
    first_job: Option<i64>,
    end: Option<i64>,
    sql_ended: bool,
    error: Option<String>,
    jobs: Vec<i64>,
    open_jobs: usize,
    failed_jobs: usize,
    user: Option<String>,
    pool: Option<String>,
    sql_text: Option<String>,
    job_description: Option<String>,
    group: Option<String>,
    execution_id: Option<i64>,
    properties: Map<String, Value>,
    line: u64,
}

struct Job {
    query: String,
    end: Option<i64>,
}

struct Stage {
    id: i64,
    attempt: i64,
    query: String,
    job: Option<i64>,
    name: Option<String>,
    parents: Option<Vec<i64>>,
    num_tasks: Option<i64>,
    submit: Option<i64>,
    completed: Option<i64>,
    failure: Option<String>,
    done: bool,
    executor_metrics: Map<String, Value>,
    line: u64,
}

#[derive(Default)]
struct Executor {
    host: Option<String>,
    cores: Option<f64>,
    added: Option<i64>,
    removed: Option<i64>,
    reason: Option<String>,
    resources: Option<Value>,
    from_block_manager: bool,
    ran_tasks: bool,
    peak: Map<String, Value>,
    line: u64,
}

struct Task {
    id: i64,
    query: String,
    stage: String,
    host: Option<String>,
    executor: Option<String>,
    ready: Option<i64>,
    launch: i64,
    finish: i64,
    status: &'static str,
    metrics: TaskMetrics,
    attrs: Value,
    line: u64,
}

/// A task's measurements, as the `tasks` table's float columns.
#[derive(Debug, Clone, Copy, Default)]
struct TaskMetrics {
    input_bytes: Option<f64>,
    output_bytes: Option<f64>,
    shuffle_read_bytes: Option<f64>,
    shuffle_write_bytes: Option<f64>,
    cpu_seconds: Option<f64>,
    gc_seconds: Option<f64>,
    disk_read_blocked: Option<f64>,
    disk_write_blocked: Option<f64>,
    network_blocked: Option<f64>,
    cpu_blocked: Option<f64>,
    memory_blocked: Option<f64>,
    scheduler_delay: Option<f64>,
}

impl TaskMetrics {
    /// Each value with the `tasks` column it goes to.
    fn columns(&self) -> [(&'static str, Option<f64>); 12] {
        [
            ("input_bytes", self.input_bytes),
            ("output_bytes", self.output_bytes),
            ("shuffle_read_bytes", self.shuffle_read_bytes),
            ("shuffle_write_bytes", self.shuffle_write_bytes),
            ("cpu_seconds", self.cpu_seconds),
            ("gc_seconds", self.gc_seconds),
            ("disk_read_blocked", self.disk_read_blocked),
            ("disk_write_blocked", self.disk_write_blocked),
            ("network_blocked", self.network_blocked),
            ("cpu_blocked", self.cpu_blocked),
            ("memory_blocked", self.memory_blocked),
            ("scheduler_delay", self.scheduler_delay),
        ]
    }
}

/// Folds the events of one application.
#[derive(Default)]
pub struct App {
    app_id: Option<String>,
    attempt: Option<String>,
    name: Option<String>,
    user: Option<String>,
    version: Option<String>,
    start: Option<i64>,
    end: Option<i64>,
    last_time: Option<i64>,
    env: HashMap<String, String>,
    queries: BTreeMap<String, Query>,
    sql_root: HashMap<i64, i64>,
    jobs: HashMap<i64, Job>,
    stage_job: HashMap<i64, i64>,
    stages: Vec<Stage>,
    stage_index: HashMap<(i64, i64), usize>,
    tasks: Vec<Task>,
    task_index: HashMap<i64, usize>,
    executors: BTreeMap<String, Executor>,
    unknown: BTreeMap<String, u64>,
    events: u64,
    current_line: u64,
}

fn ms(t: Option<i64>) -> Option<i64> {
    t.filter(|t| *t > 0)
}

fn prop<'a>(props: &'a Option<Props>, key: &str) -> Option<&'a str> {
    props.as_ref()?.get(key)?.as_str().filter(|s| !s.is_empty())
}

/// Properties that are plumbing, not workload metadata.
const NOISE: &[&str] = &[
    "callSite.short",
    "callSite.long",
    "spark.rdd.scope",
    "spark.rdd.scope.noOverride",
    "spark.job.interruptOnCancel",
    "spark.sql.execution.id",
    "spark.sql.execution.root.id",
    "spark.jobGroup.id",
    "spark.job.description",
    "spark.scheduler.pool",
    "user",
];

impl App {
    fn saw_time(&mut self, t: Option<i64>) {
        if let Some(t) = ms(t) {
            self.last_time = Some(self.last_time.map_or(t, |l| l.max(t)));
        }
    }

    /// Reads one line (1-based global line number). `may_be_cut` marks the
    /// final line of a log in progress: if it does not parse, the error is
    /// empty (not a malformed line).
    pub fn line(&mut self, line: &[u8], no: u64, may_be_cut: bool) -> Result<(), String> {
        self.current_line = no;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(());
        }
        let slow;
        let name = match fast_event_name(line) {
            Some(n) => n,
            None => {
                slow = serde_json::from_slice::<AnyEvent>(line).map_err(|e| {
                    if may_be_cut {
                        String::new()
                    } else {
                        format!("malformed JSON: {e}")
                    }
                })?;
                match slow.event.as_deref() {
                    Some(n) => n,
                    None => return Err("a JSON object without an \"Event\" field".into()),
                }
            }
        };
        let r = self.event(name, line);
        match r {
            Ok(()) => {
                self.events += 1;
                Ok(())
            }
            Err(_) if may_be_cut => Err(String::new()),
            Err(e) if e.is_syntax() || e.is_eof() => Err(format!("malformed JSON ({name}): {e}")),
            Err(e) => Err(format!("{name}: {e}")),
        }
    }

    fn event(&mut self, name: &str, line: &[u8]) -> Result<(), serde_json::Error> {
        fn de<'a, T: serde::Deserialize<'a>>(line: &'a [u8]) -> Result<T, serde_json::Error> {
            serde_json::from_slice(line)
        }
        match name {
            "SparkListenerTaskEnd" => self.task_end(de(line)?),
            "SparkListenerStageSubmitted" => {
                let e: StageSubmitted = de(line)?;
                self.stage(e.info, false);
            }
            "SparkListenerStageCompleted" => {
                let e: StageCompleted = de(line)?;
                self.stage(e.info, true);
            }
            "SparkListenerJobStart" => self.job_start(de(line)?),
            "SparkListenerJobEnd" => {
                let e: JobEnd = de(line)?;
                self.saw_time(e.time);
                if let Some(job) = self.jobs.get_mut(&e.id) {
                    if job.end.is_none() {
                        job.end = ms(e.time).or(Some(0));
                        let q = self.queries.get_mut(&job.query).expect("job's query");
                        q.open_jobs = q.open_jobs.saturating_sub(1);
                        if e.result.and_then(|r| r.result).as_deref() != Some("JobSucceeded") {
                            q.failed_jobs += 1;
                        }
                        if let Some(t) = ms(e.time) {
                            q.end = Some(q.end.map_or(t, |x| x.max(t)));
                        }
                    }
                }
            }
            SQL_START => {
                let e: SqlStart = de(line)?;
                self.saw_time(e.time);
                let root = e.root.filter(|r| *r >= 0).unwrap_or(e.id);
                self.sql_root.insert(e.id, root);
                let key = format!("sql:{root}");
                let line_no = self.current_line;
                let q = self.queries.entry(key).or_insert_with(|| Query {
                    kind: "sql",
                    execution_id: Some(root),
                    line: line_no,
                    ..Default::default()
                });
                if root == e.id {
                    q.submit = ms(e.time).or(q.submit);
                    if q.sql_text.is_none() {
                        q.sql_text = e.description.filter(|d| !d.is_empty());
                    }
                }
            }
            SQL_END => {
                let e: SqlEnd = de(line)?;
                self.saw_time(e.time);
                let root = self.sql_root.get(&e.id).copied().unwrap_or(e.id);
                if root == e.id {
                    if let Some(q) = self.queries.get_mut(&format!("sql:{root}")) {
                        q.sql_ended = true;
                        q.end = ms(e.time).or(q.end);
                        q.error = e.error.filter(|m| !m.is_empty());
                    }
                }
            }
            "SparkListenerExecutorAdded" => {
                let e: ExecutorAdded = de(line)?;
                self.saw_time(e.time);
                let line_no = self.current_line;
                let x = self.executors.entry(e.id).or_default();
                x.line = line_no;
                x.from_block_manager = false;
                x.added = ms(e.time).or(x.added);
                if let Some(info) = e.info {
                    x.host = info.host.or(x.host.take());
                    x.cores = info.cores.or(x.cores);
                    x.resources = info
                        .resources
                        .filter(|r| !r.as_object().is_some_and(|o| o.is_empty()));
                }
            }
            "SparkListenerExecutorRemoved" => {
                let e: ExecutorRemoved = de(line)?;
                self.saw_time(e.time);
                let x = self.executors.entry(e.id).or_default();
                x.removed = ms(e.time);
                x.reason = e.reason;
            }
            "SparkListenerBlockManagerAdded" => {
                let e: BlockManagerAdded = de(line)?;
                self.saw_time(e.time);
                let line_no = self.current_line;
                let x = self
                    .executors
                    .entry(e.id.executor)
                    .or_insert_with(|| Executor {
                        from_block_manager: true,
                        line: line_no,
                        ..Default::default()
                    });
                if x.host.is_none() {
                    x.host = e.id.host;
                }
                if x.added.is_none() {
                    x.added = ms(e.time);
                }
            }
            "SparkListenerStageExecutorMetrics" => {
                let e: StageExecutorMetrics = de(line)?;
                if let Some(m) = e.metrics {
                    let x = self.executors.entry(e.executor.clone()).or_default();
                    peak(&mut x.peak, &m);
                    if let Some(&i) = self.stage_index.get(&(e.stage, e.stage_attempt)) {
                        self.stages[i]
                            .executor_metrics
                            .insert(e.executor, Value::Object(m));
                    }
                }
            }
            "SparkListenerExecutorMetricsUpdate" => {
                let e: ExecutorMetricsUpdate = de(line)?;
                let x = self.executors.entry(e.executor).or_default();
                for u in e.updated.into_iter().flatten() {
                    if let Some(m) = u.metrics {
                        peak(&mut x.peak, &m);
                    }
                }
            }
            "SparkListenerApplicationStart" => {
                let e: AppStart = de(line)?;
                self.saw_time(e.time);
                self.app_id = e.id.or(self.app_id.take());
                self.attempt = e.attempt.or(self.attempt.take());
                self.name = e.name;
                self.user = e.user;
                self.start = ms(e.time);
            }
            "SparkListenerApplicationEnd" => {
                let e: AppEnd = de(line)?;
                self.saw_time(e.time);
                self.end = ms(e.time);
            }
            "SparkListenerEnvironmentUpdate" => {
                let e: EnvUpdate = de(line)?;
                match e.spark {
                    Some(Value::Object(m)) => {
                        for (k, v) in m {
                            if let Value::String(s) = v {
                                self.env.insert(k, s);
                            }
                        }
                    }
                    Some(Value::Array(pairs)) => {
                        for p in pairs {
                            if let Some([Value::String(k), Value::String(v)]) =
                                p.as_array().map(|a| a.as_slice())
                            {
                                self.env.insert(k.clone(), v.clone());
                            }
                        }
                    }
                    _ => {}
                }
            }
            "SparkListenerLogStart" => {
                let e: LogStart = de(line)?;
                self.version = e.version;
            }
            n if IGNORED.contains(&n) => {
                // Checked to be JSON, but nothing in it is mapped.
                de::<IgnoredAny>(line)?;
            }
            n => {
                de::<IgnoredAny>(line)?;
                *self.unknown.entry(n.to_string()).or_default() += 1;
            }
        }
        Ok(())
    }

    fn job_start(&mut self, e: JobStart) {
        self.saw_time(e.time);
        let props = &e.props;
        let exec = prop(props, "spark.sql.execution.root.id")
            .or_else(|| prop(props, "spark.sql.execution.id"))
            .and_then(|s| s.parse::<i64>().ok());
        let group = prop(props, "spark.jobGroup.id");
        let (key, kind) = match (exec, group) {
            (Some(x), _) => {
                let root = self.sql_root.get(&x).copied().unwrap_or(x);
                (format!("sql:{root}"), "sql")
            }
            (None, Some(g)) => (format!("group:{g}"), "job_group"),
            (None, None) => (format!("job:{}", e.id), "job"),
        };
        let line_no = self.current_line;
        let q = self.queries.entry(key.clone()).or_insert_with(|| Query {
            kind,
            line: line_no,
            execution_id: exec,
            ..Default::default()
        });
        q.jobs.push(e.id);
        q.open_jobs += 1;
        if let Some(t) = ms(e.time) {
            q.first_job = Some(q.first_job.map_or(t, |f| f.min(t)));
            if q.submit.is_none() || kind != "sql" {
                q.submit = Some(q.submit.map_or(t, |s| s.min(t)));
            }
        }
        if q.user.is_none() {
            q.user = prop(props, "user").map(str::to_string);
        }
        if q.pool.is_none() {
            q.pool = prop(props, "spark.scheduler.pool").map(str::to_string);
        }
        if q.group.is_none() {
            q.group = group.map(str::to_string);
        }
        if q.job_description.is_none() {
            q.job_description = prop(props, "spark.job.description").map(str::to_string);
        }
        if let Some(p) = props {
            for (k, v) in p {
                if NOISE.contains(&k.as_str()) || q.properties.contains_key(k) {
                    continue;
                }
                let same_as_app = v
                    .as_str()
                    .is_some_and(|v| self.env.get(k).map(String::as_str) == Some(v));
                if !same_as_app {
                    q.properties.insert(k.clone(), v.clone());
                }
            }
        }
        for s in &e.stage_ids {
            self.stage_job.insert(*s, e.id);
        }
        self.jobs.insert(
            e.id,
            Job {
                query: key,
                end: None,
            },
        );
    }

    fn stage(&mut self, info: StageInfo, completed: bool) {
        self.saw_time(info.submitted);
        self.saw_time(info.completed);
        let line_no = self.current_line;
        let i = match self.stage_index.get(&(info.id, info.attempt)) {
            Some(&i) => i,
            None => {
                let job = self.stage_job.get(&info.id).copied();
                let query = job
                    .and_then(|j| self.jobs.get(&j))
                    .map(|j| j.query.clone())
                    .unwrap_or_else(|| self.orphan_query(line_no));
                self.stages.push(Stage {
                    id: info.id,
                    attempt: info.attempt,
                    query,
                    job,
                    name: None,
                    parents: None,
                    num_tasks: None,
                    submit: None,
                    completed: None,
                    failure: None,
                    done: false,
                    executor_metrics: Map::new(),
                    line: line_no,
                });
                self.stage_index
                    .insert((info.id, info.attempt), self.stages.len() - 1);
                self.stages.len() - 1
            }
        };
        let s = &mut self.stages[i];
        s.name = info.name.or(s.name.take());
        s.parents = info.parents.or(s.parents.take());
        s.num_tasks = info.num_tasks.or(s.num_tasks);
        s.submit = ms(info.submitted).or(s.submit);
        if completed {
            s.done = true;
            s.completed = ms(info.completed).or(s.completed);
            s.failure = info.failure;
        }
    }

    /// The query of stages and tasks whose job the log never announced (a
    /// log whose beginning is missing).
    fn orphan_query(&mut self, line: u64) -> String {
        let key = "unattributed".to_string();
        self.queries.entry(key.clone()).or_insert_with(|| Query {
            kind: "unattributed",
            line,
            ..Default::default()
        });
        key
    }

    fn task_end(&mut self, e: TaskEnd) {
        let info = &e.info;
        self.saw_time(Some(info.finish));
        // A second end of the same task attempt: Spark marks a finished map
        // task `Resubmitted` when its output is lost. The run is the first.
        if let Some(&i) = self.task_index.get(&info.id) {
            if let Value::Object(a) = &mut self.tasks[i].attrs {
                let reason = e.reason.as_ref().and_then(|r| r.reason.clone());
                a.insert("later_end_reason".into(), json!(reason));
            }
            return;
        }
        let line_no = self.current_line;
        let (query, stage, ready) = match self.stage_index.get(&(e.stage, e.stage_attempt)) {
            Some(&i) => {
                let s = &self.stages[i];
                (s.query.clone(), stage_name(s.id, s.attempt), s.submit)
            }
            None => {
                let query = self
                    .stage_job
                    .get(&e.stage)
                    .and_then(|j| self.jobs.get(j))
                    .map(|j| j.query.clone())
                    .unwrap_or_else(|| self.orphan_query(line_no));
                (query, stage_name(e.stage, e.stage_attempt), None)
            }
        };
        if let Some(x) = info
            .executor
            .as_ref()
            .and_then(|x| self.executors.get_mut(x))
        {
            x.ran_tasks = true;
            if x.from_block_manager {
                // Local mode: the driver runs the tasks; its host is theirs.
                x.host = info.host.clone().or(x.host.take());
            }
        }
        let reason = e.reason.as_ref().and_then(|r| r.reason.as_deref());
        let status = match reason {
            Some("Success") => "succeeded",
            Some("TaskKilled") => "killed",
            Some(_) => "failed",
            None if info.killed => "killed",
            None if info.failed => "failed",
            None => "succeeded",
        };
        let m = e.metrics.unwrap_or_default();
        let sr = m.shuffle_read.unwrap_or_default();
        let sw = m.shuffle_write.unwrap_or_default();
        let input = m.input.unwrap_or_default();
        let output = m.output.unwrap_or_default();
        let secs = |ms: Option<f64>| ms.map(|v| v / 1e3);
        let cpu = m.cpu_ns.map(|v| v / 1e9);
        let network_blocked = secs(sr.fetch_wait_ms);
        let disk_write_blocked = sw.time_ns.map(|v| v / 1e9);
        let run = secs(m.run_ms);
        // CPU blocked: run time not spent on the CPU nor blocked elsewhere
        // (an estimate; only when Spark measured CPU time).
        let cpu_blocked = match (run, cpu) {
            (Some(run), Some(cpu)) => Some(
                (run - cpu - network_blocked.unwrap_or(0.0) - disk_write_blocked.unwrap_or(0.0))
                    .max(0.0),
            ),
            _ => None,
        };
        let getting_result = if info.getting_result > 0 && info.finish >= info.getting_result {
            (info.finish - info.getting_result) as f64 / 1e3
        } else {
            0.0
        };
        let scheduler_delay = (info.finish > 0 && m.run_ms.is_some()).then(|| {
            let dur = (info.finish - info.launch) as f64 / 1e3;
            (dur - run.unwrap_or(0.0)
                - secs(m.deserialize_ms).unwrap_or(0.0)
                - secs(m.result_serialization_ms).unwrap_or(0.0)
                - getting_result)
                .max(0.0)
        });
        let shuffle_read = match (sr.remote_bytes, sr.local_bytes) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        // Spark measures no disk read or memory blocked time.
        let metrics = TaskMetrics {
            input_bytes: input.bytes,
            output_bytes: output.bytes,
            shuffle_read_bytes: shuffle_read,
            shuffle_write_bytes: sw.bytes,
            cpu_seconds: cpu,
            gc_seconds: secs(m.gc_ms),
            disk_read_blocked: None,
            disk_write_blocked,
            network_blocked,
            cpu_blocked,
            memory_blocked: None,
            scheduler_delay,
        };
        let mut attrs = Map::new();
        let mut put = |k: &str, v: Value| {
            if !v.is_null() {
                attrs.insert(k.to_string(), v);
            }
        };
        put("spark_task_id", json!(info.id));
        put("attempt", json!(info.attempt));
        put("index", json!(info.index));
        put("partition", json!(info.partition));
        put("speculative", json!(info.speculative));
        put("locality", json!(info.locality));
        put("task_type", json!(e.task_type));
        put("stage_attempt", json!(e.stage_attempt));
        put("executor_run_time", json!(run));
        put("deserialize_time", json!(secs(m.deserialize_ms)));
        put(
            "result_serialization_time",
            json!(secs(m.result_serialization_ms)),
        );
        put(
            "getting_result_time",
            json!((getting_result > 0.0).then_some(getting_result)),
        );
        put("result_size", json!(m.result_size));
        put("memory_bytes_spilled", json!(m.memory_spilled));
        put("disk_bytes_spilled", json!(m.disk_spilled));
        put("peak_execution_memory", json!(m.peak_execution_memory));
        put("remote_bytes_read", json!(sr.remote_bytes));
        put("local_bytes_read", json!(sr.local_bytes));
        put("records_read", json!(input.records));
        put("records_written", json!(output.records));
        put("shuffle_records_read", json!(sr.records));
        put("shuffle_records_written", json!(sw.records));
        if status != "succeeded" {
            if let Some(r) = &e.reason {
                put("end_reason", json!(r.reason));
                put(
                    "failure",
                    json!(r
                        .description
                        .as_ref()
                        .or(r.kill_reason.as_ref())
                        .or(r.loss_reason.as_ref())
                        .map(|d| d.lines().next().unwrap_or("").to_string())),
                );
            }
        }
        let ready = ready.filter(|r| *r <= info.launch);
        self.task_index.insert(info.id, self.tasks.len());
        self.tasks.push(Task {
            id: info.id,
            query,
            stage,
            host: info.host.clone(),
            executor: info.executor.clone(),
            ready,
            launch: info.launch,
            finish: info.finish,
            status,
            metrics,
            attrs: Value::Object(attrs),
            line: line_no,
        });
    }
}

fn stage_name(id: i64, attempt: i64) -> String {
    if attempt == 0 {
        id.to_string()
    } else {
        format!("{id}.{attempt}")
    }
}

/// Keeps the largest value of every numeric metric.
fn peak(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        let Some(x) = v.as_f64() else { continue };
        let bigger = into
            .get(k)
            .and_then(Value::as_f64)
            .is_none_or(|old| x > old);
        if bigger {
            into.insert(k.clone(), v.clone());
        }
    }
}

impl App {
    /// The application's key: its id, and its attempt when it has one.
    fn app_key(&self, fallback: &str) -> String {
        let id = self.app_id.clone().unwrap_or_else(|| fallback.to_string());
        match &self.attempt {
            Some(a) if !a.is_empty() => format!("{id}_{a}"),
            _ => id,
        }
    }

    /// Slots of an executor with `cores` cores.
    fn slots(&self, cores: Option<f64>) -> Option<f64> {
        let per_task = self
            .env
            .get("spark.task.cpus")
            .and_then(|c| c.parse::<f64>().ok())
            .filter(|c| *c > 0.0)
            .unwrap_or(1.0);
        cores.map(|c| (c / per_task).floor()).filter(|s| *s > 0.0)
    }

    /// Cores of the driver running tasks in local mode (`spark.master`).
    fn local_cores(&self) -> Option<f64> {
        let master = self.env.get("spark.master")?;
        if master == "local" {
            return Some(1.0);
        }
        let inner = master.strip_prefix("local[")?.strip_suffix(']')?;
        inner.split(',').next()?.trim().parse::<f64>().ok()
    }

    /// The rows of the application. `fallback_id` names it when the log has
    /// no `ApplicationStart` (a file name).
    pub fn finish(mut self, state: LogState, fallback_id: &str) -> Finished {
        let key = self.app_key(fallback_id);
        let final_log = !state.in_progress;
        let qid = |q: &str| format!("{key}:{q}");
        let t = |v: Option<i64>| v.map_or(LogValue::Null, |ms| LogValue::T(ms * 1000));
        let s = |v: Option<&str>| v.map_or(LogValue::Null, |x| LogValue::S(x.to_string()));

        // Stage ends also bound queries whose jobs carry no times (Spark 1.2).
        let mut stage_span: HashMap<&str, (Option<i64>, Option<i64>)> = HashMap::new();
        for st in &self.stages {
            let e = stage_span.entry(st.query.as_str()).or_default();
            if let Some(x) = st.submit {
                e.0 = Some(e.0.map_or(x, |y| y.min(x)));
            }
            if let Some(x) = st.completed {
                e.1 = Some(e.1.map_or(x, |y| y.max(x)));
            }
        }

        let mut queries = Rows::new(Table::Queries);
        for (k, q) in &self.queries {
            let finished = if q.kind == "sql" {
                q.sql_ended
                    || (q.execution_id.is_some()
                        && !q.jobs.is_empty()
                        && q.open_jobs == 0
                        && !self.queries_have_sql_events())
            } else {
                !q.jobs.is_empty() && q.open_jobs == 0
            };
            if !finished && !final_log {
                continue;
            }
            let span = stage_span.get(k.as_str()).copied().unwrap_or_default();
            let status = if !finished {
                "incomplete"
            } else if q.error.is_some() || q.failed_jobs > 0 {
                "failed"
            } else {
                "succeeded"
            };
            let mut tags = Map::new();
            tags.insert("source".into(), json!("spark"));
            tags.insert("kind".into(), json!(q.kind));
            if let Some(n) = &self.name {
                tags.insert("app_name".into(), json!(n));
            }
            if let Some(v) = &self.version {
                tags.insert("spark_version".into(), json!(v));
            }
            if let Some(x) = q.execution_id {
                tags.insert("execution_id".into(), json!(x));
            }
            if !q.jobs.is_empty() {
                tags.insert("job_ids".into(), json!(q.jobs));
            }
            if let Some(g) = &q.group {
                tags.insert("job_group".into(), json!(g));
            }
            if let Some(d) = &q.job_description {
                if q.sql_text.as_deref() != Some(d.as_str()) {
                    tags.insert("job_description".into(), json!(d));
                }
            }
            if let Some(e) = &q.error {
                tags.insert("error".into(), json!(e.lines().next().unwrap_or("")));
            }
            if !q.properties.is_empty() {
                tags.insert("properties".into(), Value::Object(q.properties.clone()));
            }
            let sql_text = q.sql_text.as_deref().or(q.job_description.as_deref());
            queries.push(
                Origin::Line(q.line),
                vec![
                    ("query_id", LogValue::S(qid(k))),
                    ("app_id", LogValue::S(key.clone())),
                    ("user", s(q.user.as_deref().or(self.user.as_deref()))),
                    ("pool", s(q.pool.as_deref())),
                    ("sql_text", s(sql_text)),
                    (
                        "submit_time",
                        t(match (q.submit.or(span.0), q.first_job) {
                            (Some(s), Some(f)) => Some(s.min(f)),
                            (s, f) => s.or(f),
                        }),
                    ),
                    ("start_time", t(q.first_job.or(span.0))),
                    (
                        "end_time",
                        t(if finished { q.end.or(span.1) } else { None }),
                    ),
                    ("status", LogValue::S(status.into())),
                    ("tags", LogValue::S(Value::Object(tags).to_string())),
                ],
            );
        }

        let mut stages = Rows::new(Table::Stages);
        for st in &self.stages {
            if !st.done && !final_log {
                continue;
            }
            let mut attrs = Map::new();
            attrs.insert("spark_stage_id".into(), json!(st.id));
            attrs.insert("attempt".into(), json!(st.attempt));
            if let Some(j) = st.job {
                attrs.insert("job_id".into(), json!(j));
            }
            if let Some(n) = st.num_tasks {
                attrs.insert("num_tasks".into(), json!(n));
            }
            let status = match (&st.failure, st.done) {
                (Some(_), _) => "failed",
                (None, true) => "succeeded",
                (None, false) => "incomplete",
            };
            attrs.insert("status".into(), json!(status));
            if let Some(f) = &st.failure {
                attrs.insert("failure".into(), json!(f.lines().next().unwrap_or("")));
            }
            if !st.executor_metrics.is_empty() {
                attrs.insert(
                    "executor_metrics".into(),
                    Value::Object(st.executor_metrics.clone()),
                );
            }
            let parents = st.parents.as_ref().map(|p| {
                p.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            });
            stages.push(
                Origin::Line(st.line),
                vec![
                    ("query_id", LogValue::S(qid(&st.query))),
                    ("stage_id", LogValue::S(stage_name(st.id, st.attempt))),
                    ("parent_ids", s(parents.as_deref())),
                    ("name", s(st.name.as_deref())),
                    ("submit_time", t(st.submit)),
                    ("start_time", LogValue::Null),
                    ("end_time", t(st.completed.filter(|_| st.done))),
                    ("attrs", LogValue::S(Value::Object(attrs).to_string())),
                ],
            );
        }

        let mut tasks = Rows::new(Table::Tasks);
        for task in &self.tasks {
            let mut row = vec![
                ("task_id", LogValue::S(format!("{key}:task:{}", task.id))),
                ("query_id", LogValue::S(qid(&task.query))),
                ("stage_id", LogValue::S(task.stage.clone())),
                ("host", s(task.host.as_deref())),
                ("executor_id", s(task.executor.as_deref())),
                ("ready_time", t(task.ready)),
                ("launch_time", t(ms(Some(task.launch)))),
                ("finish_time", t(ms(Some(task.finish)))),
                ("status", LogValue::S(task.status.into())),
                ("attrs", LogValue::S(task.attrs.to_string())),
            ];
            for (name, v) in task.metrics.columns() {
                row.push((name, v.map_or(LogValue::Null, LogValue::F)));
            }
            tasks.push(Origin::Line(task.line), row);
        }

        // Executors: the driver of a local-mode application counts when it
        // ran tasks; other block managers without an executor do not.
        let local_cores = self.local_cores();
        let app_end = self.end.or(self.last_time);
        let mut executors = Rows::new(Table::Executors);
        let mut slots = Rows::new(Table::HostWindows);
        let execs = std::mem::take(&mut self.executors);
        for (id, x) in &execs {
            if x.from_block_manager && !x.ran_tasks {
                continue;
            }
            if x.host.is_none() && x.added.is_none() && !x.ran_tasks {
                continue; // only metrics were seen for it
            }
            if x.removed.is_none() && !final_log {
                continue;
            }
            let cores = if x.from_block_manager {
                x.cores.or(local_cores)
            } else {
                x.cores
            };
            let mut attrs = Map::new();
            if let Some(r) = &x.resources {
                attrs.insert("resources".into(), r.clone());
            }
            if !x.peak.is_empty() {
                attrs.insert("peak_metrics".into(), Value::Object(x.peak.clone()));
            }
            if let Some(n) = self.slots(cores) {
                attrs.insert("slots".into(), json!(n));
            }
            executors.push(
                Origin::Line(x.line),
                vec![
                    ("app_id", LogValue::S(key.clone())),
                    ("executor_id", LogValue::S(id.clone())),
                    ("host", s(x.host.as_deref())),
                    ("cores", cores.map_or(LogValue::Null, LogValue::F)),
                    ("add_time", t(x.added.or(self.start))),
                    ("remove_time", t(x.removed)),
                    ("remove_reason", s(x.reason.as_deref())),
                    ("attrs", LogValue::S(Value::Object(attrs).to_string())),
                ],
            );
            // Slot capacity, once the application's executors are final.
            if let (true, Some(host), Some(n), Some(from), Some(to)) = (
                final_log,
                x.host.as_deref(),
                self.slots(cores),
                x.added.or(self.start),
                x.removed.or(app_end),
            ) {
                if to > from {
                    slots.push(
                        Origin::Line(x.line),
                        vec![
                            ("host", LogValue::S(host.to_string())),
                            ("window_start", t(Some(from))),
                            ("window_end", t(Some(to))),
                            ("resource", LogValue::S("slots".into())),
                            ("capacity", LogValue::F(n)),
                        ],
                    );
                }
            }
        }
        let tables = vec![
            (Table::Queries, queries),
            (Table::Stages, stages),
            (Table::Tasks, tasks),
            (Table::Executors, executors),
            (Table::HostWindows, slots),
        ];
        Finished {
            app_key: key,
            tables,
            unknown_events: std::mem::take(&mut self.unknown),
            events: self.events,
        }
    }

    /// Whether the log has SQL execution events at all (else a query named
    /// by `spark.sql.execution.id` ends with its jobs).
    fn queries_have_sql_events(&self) -> bool {
        !self.sql_root.is_empty()
    }
}
