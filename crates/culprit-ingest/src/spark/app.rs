//! One Spark application's event log, folded event by event into the facts
//! culprit stores, then turned into interchange rows (docs/spark.md gives
//! the mapping, column by column).

use std::collections::{BTreeMap, HashMap};

use serde::de::IgnoredAny;
use serde_json::{json, Map, Value};

use super::events::TaskMetrics as SparkTaskMetrics;
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

/// A time of the log (epoch milliseconds) if it is one: Spark writes 0 or
/// -1 for a time it does not know.
fn known_time(t: Option<i64>) -> Option<i64> {
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
        if let Some(t) = known_time(t) {
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

    /// Folds one event, named `name`, into the application. Every event is
    /// parsed, even one nothing is taken from: a line that is not valid
    /// JSON is rejected whatever its event.
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
            "SparkListenerJobEnd" => self.job_end(de(line)?),
            SQL_START => self.sql_start(de(line)?),
            SQL_END => self.sql_end(de(line)?),
            "SparkListenerExecutorAdded" => self.executor_added(de(line)?),
            "SparkListenerExecutorRemoved" => {
                let e: ExecutorRemoved = de(line)?;
                self.saw_time(e.time);
                let executor = self.executors.entry(e.id).or_default();
                executor.removed = known_time(e.time);
                executor.reason = e.reason;
            }
            "SparkListenerBlockManagerAdded" => self.block_manager_added(de(line)?),
            "SparkListenerStageExecutorMetrics" => self.stage_executor_metrics(de(line)?),
            "SparkListenerExecutorMetricsUpdate" => {
                let e: ExecutorMetricsUpdate = de(line)?;
                let executor = self.executors.entry(e.executor).or_default();
                for update in e.updated.into_iter().flatten() {
                    if let Some(metrics) = update.metrics {
                        peak(&mut executor.peak, &metrics);
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
                self.start = known_time(e.time);
            }
            "SparkListenerApplicationEnd" => {
                let e: AppEnd = de(line)?;
                self.saw_time(e.time);
                self.end = known_time(e.time);
            }
            "SparkListenerEnvironmentUpdate" => self.environment_update(de(line)?),
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

    /// A job ended: its query has one job less open (and one more failed
    /// unless it succeeded), and ends no earlier than it. Only the first end
    /// of a job counts.
    fn job_end(&mut self, e: JobEnd) {
        self.saw_time(e.time);
        let Some(job) = self.jobs.get_mut(&e.id) else {
            return;
        };
        if job.end.is_some() {
            return;
        }
        job.end = known_time(e.time).or(Some(0));
        let query = self.queries.get_mut(&job.query).expect("job's query");
        query.open_jobs = query.open_jobs.saturating_sub(1);
        if e.result.and_then(|r| r.result).as_deref() != Some("JobSucceeded") {
            query.failed_jobs += 1;
        }
        if let Some(t) = known_time(e.time) {
            query.end = Some(query.end.map_or(t, |end| end.max(t)));
        }
    }

    /// A SQL execution started. A nested execution (one with a root) is
    /// part of its root's query: only the root's start gives the query its
    /// submit time and text.
    fn sql_start(&mut self, e: SqlStart) {
        self.saw_time(e.time);
        let root = e.root.filter(|r| *r >= 0).unwrap_or(e.id);
        self.sql_root.insert(e.id, root);
        let key = format!("sql:{root}");
        let line_no = self.current_line;
        let query = self.queries.entry(key).or_insert_with(|| Query {
            kind: "sql",
            execution_id: Some(root),
            line: line_no,
            ..Default::default()
        });
        if root == e.id {
            query.submit = known_time(e.time).or(query.submit);
            if query.sql_text.is_none() {
                query.sql_text = e.description.filter(|d| !d.is_empty());
            }
        }
    }

    /// A SQL execution ended: the end of its query when it is a root.
    fn sql_end(&mut self, e: SqlEnd) {
        self.saw_time(e.time);
        let root = self.sql_root.get(&e.id).copied().unwrap_or(e.id);
        if root != e.id {
            return;
        }
        if let Some(query) = self.queries.get_mut(&format!("sql:{root}")) {
            query.sql_ended = true;
            query.end = known_time(e.time).or(query.end);
            query.error = e.error.filter(|m| !m.is_empty());
        }
    }

    /// An executor was added: a real executor from now on, even if its
    /// block manager was seen first.
    fn executor_added(&mut self, e: ExecutorAdded) {
        self.saw_time(e.time);
        let line_no = self.current_line;
        let executor = self.executors.entry(e.id).or_default();
        executor.line = line_no;
        executor.from_block_manager = false;
        executor.added = known_time(e.time).or(executor.added);
        if let Some(info) = e.info {
            executor.host = info.host.or(executor.host.take());
            executor.cores = info.cores.or(executor.cores);
            executor.resources = info
                .resources
                .filter(|r| !r.as_object().is_some_and(|o| o.is_empty()));
        }
    }

    /// A block manager was added: the only trace of the driver, which runs
    /// the tasks in local mode, so it is kept as a possible executor.
    fn block_manager_added(&mut self, e: BlockManagerAdded) {
        self.saw_time(e.time);
        let line_no = self.current_line;
        let executor = self
            .executors
            .entry(e.id.executor)
            .or_insert_with(|| Executor {
                from_block_manager: true,
                line: line_no,
                ..Default::default()
            });
        if executor.host.is_none() {
            executor.host = e.id.host;
        }
        if executor.added.is_none() {
            executor.added = known_time(e.time);
        }
    }

    /// An executor's peak metrics during a stage: kept for the executor's
    /// peaks and, when the stage is known, in the stage's attributes.
    fn stage_executor_metrics(&mut self, e: StageExecutorMetrics) {
        let Some(metrics) = e.metrics else {
            return;
        };
        let executor = self.executors.entry(e.executor.clone()).or_default();
        peak(&mut executor.peak, &metrics);
        if let Some(&i) = self.stage_index.get(&(e.stage, e.stage_attempt)) {
            self.stages[i]
                .executor_metrics
                .insert(e.executor, Value::Object(metrics));
        }
    }

    /// The Spark properties, a map or (older logs) a list of pairs; only
    /// text values are kept.
    fn environment_update(&mut self, e: EnvUpdate) {
        match e.spark {
            Some(Value::Object(properties)) => {
                for (key, value) in properties {
                    if let Value::String(value) = value {
                        self.env.insert(key, value);
                    }
                }
            }
            Some(Value::Array(pairs)) => {
                for pair in pairs {
                    if let Some([Value::String(key), Value::String(value)]) =
                        pair.as_array().map(|a| a.as_slice())
                    {
                        self.env.insert(key.clone(), value.clone());
                    }
                }
            }
            _ => {}
        }
    }

    /// A job started. It belongs to the query of its SQL execution, else of
    /// its job group, else it is a query of its own; the query takes user,
    /// pool and properties from the first job that has them (properties
    /// only where they differ from the application's).
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
        if let Some(t) = known_time(e.time) {
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

    /// A stage attempt was submitted, or `completed`: each field the event
    /// has overrides what an earlier event said.
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
        s.submit = known_time(info.submitted).or(s.submit);
        if completed {
            s.done = true;
            s.completed = known_time(info.completed).or(s.completed);
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

    /// A task attempt ended: one `tasks` row, its measurements mapped to
    /// columns (docs/spark.md), the rest kept as attributes.
    fn task_end(&mut self, mut e: TaskEnd) {
        self.saw_time(Some(e.info.finish));
        // A second end of the same task attempt: Spark marks a finished map
        // task `Resubmitted` when its output is lost. The run is the first.
        if let Some(&i) = self.task_index.get(&e.info.id) {
            if let Value::Object(attrs) = &mut self.tasks[i].attrs {
                let reason = e.reason.as_ref().and_then(|r| r.reason.clone());
                attrs.insert("later_end_reason".into(), json!(reason));
            }
            return;
        }
        let line_no = self.current_line;
        let (query, stage, stage_submit) = self.task_stage(e.stage, e.stage_attempt, line_no);
        self.executor_ran_task(&e.info);
        let spark = EndMetrics::new(e.metrics.take());
        let info = &e.info;
        let status = task_status(e.reason.as_ref(), info);
        let getting_result = getting_result_seconds(info);
        let metrics = TaskMetrics::from_spark(&spark, info, getting_result);
        let attrs = task_attrs(&e, &spark, status, getting_result);
        // A task is ready when its stage is submitted; a submit time after
        // the launch would break the rule ready_time <= launch_time.
        let ready = stage_submit.filter(|r| *r <= info.launch);
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

    /// The query, stage name and submit time of a task's stage attempt. A
    /// stage the log never announced has no submit time, and the query of
    /// its job (or the orphan query when the job is unknown too).
    fn task_stage(&mut self, stage: i64, attempt: i64, line: u64) -> (String, String, Option<i64>) {
        match self.stage_index.get(&(stage, attempt)) {
            Some(&i) => {
                let s = &self.stages[i];
                (s.query.clone(), stage_name(s.id, s.attempt), s.submit)
            }
            None => {
                let query = self
                    .stage_job
                    .get(&stage)
                    .and_then(|j| self.jobs.get(j))
                    .map(|j| j.query.clone())
                    .unwrap_or_else(|| self.orphan_query(line));
                (query, stage_name(stage, attempt), None)
            }
        }
    }

    /// Marks the task's executor as one that ran tasks (so a local-mode
    /// driver counts as an executor).
    fn executor_ran_task(&mut self, info: &TaskInfo) {
        if let Some(executor) = info
            .executor
            .as_ref()
            .and_then(|x| self.executors.get_mut(x))
        {
            executor.ran_tasks = true;
            if executor.from_block_manager {
                // Local mode: the driver runs the tasks; its host is theirs.
                executor.host = info.host.clone().or(executor.host.take());
            }
        }
    }
}

/// The status of a task: its end reason's, else its info's flags.
fn task_status(reason: Option<&EndReason>, info: &TaskInfo) -> &'static str {
    match reason.and_then(|r| r.reason.as_deref()) {
        Some("Success") => "succeeded",
        Some("TaskKilled") => "killed",
        Some(_) => "failed",
        None if info.killed => "killed",
        None if info.failed => "failed",
        None => "succeeded",
    }
}

/// Seconds the driver spent fetching the task's result (0 when it did
/// not, or the times disagree).
fn getting_result_seconds(info: &TaskInfo) -> f64 {
    if info.getting_result > 0 && info.finish >= info.getting_result {
        (info.finish - info.getting_result) as f64 / 1e3
    } else {
        0.0
    }
}

/// Spark's milliseconds as seconds.
fn ms_to_seconds(ms: Option<f64>) -> Option<f64> {
    ms.map(|v| v / 1e3)
}

/// Spark's nanoseconds as seconds.
fn ns_to_seconds(ns: Option<f64>) -> Option<f64> {
    ns.map(|v| v / 1e9)
}

/// The metrics of a task end, every group there (empty when the log has
/// none), so that a missing group reads as missing values.
struct EndMetrics {
    task: SparkTaskMetrics,
    shuffle_read: ShuffleRead,
    shuffle_write: ShuffleWrite,
    input: InputMetrics,
    output: OutputMetrics,
}

impl EndMetrics {
    fn new(metrics: Option<SparkTaskMetrics>) -> Self {
        let mut task = metrics.unwrap_or_default();
        EndMetrics {
            shuffle_read: task.shuffle_read.take().unwrap_or_default(),
            shuffle_write: task.shuffle_write.take().unwrap_or_default(),
            input: task.input.take().unwrap_or_default(),
            output: task.output.take().unwrap_or_default(),
            task,
        }
    }
}

impl TaskMetrics {
    /// The `tasks` columns of a Spark task's metrics. Spark measures no
    /// disk read or memory blocked time; CPU blocked time and scheduler
    /// delay are what is left of a time once the measured parts are taken.
    fn from_spark(spark: &EndMetrics, info: &TaskInfo, getting_result: f64) -> Self {
        let m = &spark.task;
        let cpu = ns_to_seconds(m.cpu_ns);
        let network_blocked = ms_to_seconds(spark.shuffle_read.fetch_wait_ms);
        let disk_write_blocked = ns_to_seconds(spark.shuffle_write.time_ns);
        let run = ms_to_seconds(m.run_ms);
        // CPU blocked: run time not spent on the CPU nor blocked elsewhere
        // (an estimate; only when Spark measured CPU time).
        let cpu_blocked = match (run, cpu) {
            (Some(run), Some(cpu)) => Some(
                (run - cpu - network_blocked.unwrap_or(0.0) - disk_write_blocked.unwrap_or(0.0))
                    .max(0.0),
            ),
            _ => None,
        };
        // Scheduler delay: the task's wall time not spent running,
        // deserializing, serializing or fetching its result.
        let scheduler_delay = (info.finish > 0 && m.run_ms.is_some()).then(|| {
            let duration = (info.finish - info.launch) as f64 / 1e3;
            (duration
                - run.unwrap_or(0.0)
                - ms_to_seconds(m.deserialize_ms).unwrap_or(0.0)
                - ms_to_seconds(m.result_serialization_ms).unwrap_or(0.0)
                - getting_result)
                .max(0.0)
        });
        let shuffle_read = match (
            spark.shuffle_read.remote_bytes,
            spark.shuffle_read.local_bytes,
        ) {
            (None, None) => None,
            (remote, local) => Some(remote.unwrap_or(0.0) + local.unwrap_or(0.0)),
        };
        TaskMetrics {
            input_bytes: spark.input.bytes,
            output_bytes: spark.output.bytes,
            shuffle_read_bytes: shuffle_read,
            shuffle_write_bytes: spark.shuffle_write.bytes,
            cpu_seconds: cpu,
            gc_seconds: ms_to_seconds(m.gc_ms),
            disk_read_blocked: None,
            disk_write_blocked,
            network_blocked,
            cpu_blocked,
            memory_blocked: None,
            scheduler_delay,
        }
    }
}

/// The attributes of a task row: Spark's ids and the measurements without
/// a column of their own (absent ones left out), and why a task that did
/// not succeed ended (the first line of the message).
fn task_attrs(
    e: &TaskEnd,
    spark: &EndMetrics,
    status: &str,
    getting_result: f64,
) -> Map<String, Value> {
    let (info, m) = (&e.info, &spark.task);
    let (shuffle_read, shuffle_write) = (&spark.shuffle_read, &spark.shuffle_write);
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
    put("executor_run_time", json!(ms_to_seconds(m.run_ms)));
    put("deserialize_time", json!(ms_to_seconds(m.deserialize_ms)));
    put(
        "result_serialization_time",
        json!(ms_to_seconds(m.result_serialization_ms)),
    );
    put(
        "getting_result_time",
        json!((getting_result > 0.0).then_some(getting_result)),
    );
    put("result_size", json!(m.result_size));
    put("memory_bytes_spilled", json!(m.memory_spilled));
    put("disk_bytes_spilled", json!(m.disk_spilled));
    put("peak_execution_memory", json!(m.peak_execution_memory));
    put("remote_bytes_read", json!(shuffle_read.remote_bytes));
    put("local_bytes_read", json!(shuffle_read.local_bytes));
    put("records_read", json!(spark.input.records));
    put("records_written", json!(spark.output.records));
    put("shuffle_records_read", json!(shuffle_read.records));
    put("shuffle_records_written", json!(shuffle_write.records));
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
    attrs
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
    /// no `ApplicationStart` (a file name). A log in progress gives only what
    /// will not change: finished queries and stages, removed executors (and
    /// no slot capacity, which needs every executor's end).
    pub fn finish(self, state: LogState, fallback_id: &str) -> Finished {
        let key = self.app_key(fallback_id);
        let final_log = !state.in_progress;
        let queries = self.query_rows(&key, final_log);
        let stages = self.stage_rows(&key, final_log);
        let tasks = self.task_rows(&key);
        let (executors, slots) = self.executor_rows(&key, final_log);
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
            unknown_events: self.unknown,
            events: self.events,
        }
    }

    /// The `queries` rows, in query key order.
    fn query_rows(&self, app_key: &str, final_log: bool) -> Rows {
        let stage_spans = self.stage_spans();
        let mut rows = Rows::new(Table::Queries);
        for (k, q) in &self.queries {
            let finished = self.query_finished(q);
            if !finished && !final_log {
                continue;
            }
            let span = stage_spans.get(k.as_str()).copied().unwrap_or_default();
            let tags = self.query_tags(q);
            let sql_text = q.sql_text.as_deref().or(q.job_description.as_deref());
            let end = if finished {
                q.end.or(span.last_completed)
            } else {
                None
            };
            rows.push(
                Origin::Line(q.line),
                vec![
                    ("query_id", LogValue::S(query_id(app_key, k))),
                    ("app_id", LogValue::S(app_key.to_string())),
                    ("user", text(q.user.as_deref().or(self.user.as_deref()))),
                    ("pool", text(q.pool.as_deref())),
                    ("sql_text", text(sql_text)),
                    ("submit_time", time(q.submit_time(span))),
                    ("start_time", time(q.first_job.or(span.first_submit))),
                    ("end_time", time(end)),
                    ("status", LogValue::S(q.status(finished).into())),
                    ("tags", LogValue::S(Value::Object(tags).to_string())),
                ],
            );
        }
        rows
    }

    /// When each query's stages ran, by query key: stage ends also bound
    /// queries whose jobs carry no times (Spark 1.2).
    fn stage_spans(&self) -> HashMap<&str, StageSpan> {
        let mut spans: HashMap<&str, StageSpan> = HashMap::new();
        for stage in &self.stages {
            let span = spans.entry(stage.query.as_str()).or_default();
            if let Some(x) = stage.submit {
                span.first_submit = Some(span.first_submit.map_or(x, |y| y.min(x)));
            }
            if let Some(x) = stage.completed {
                span.last_completed = Some(span.last_completed.map_or(x, |y| y.max(x)));
            }
        }
        spans
    }

    /// Whether a query is over: a SQL query when its execution ended (or,
    /// in a log without SQL events, when all its jobs did); any other when
    /// all its jobs did.
    fn query_finished(&self, q: &Query) -> bool {
        if q.kind == "sql" {
            q.sql_ended
                || (q.execution_id.is_some()
                    && !q.jobs.is_empty()
                    && q.open_jobs == 0
                    && !self.queries_have_sql_events())
        } else {
            !q.jobs.is_empty() && q.open_jobs == 0
        }
    }

    /// The tags of a query row: where it comes from and what Spark says
    /// of it that has no column (a job description only when it is not
    /// already the SQL text; the first line of an error).
    fn query_tags(&self, q: &Query) -> Map<String, Value> {
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
        tags
    }

    /// The `stages` rows, in the order the log first named them.
    fn stage_rows(&self, app_key: &str, final_log: bool) -> Rows {
        let mut rows = Rows::new(Table::Stages);
        for st in &self.stages {
            if !st.done && !final_log {
                continue;
            }
            let parents = st.parents.as_ref().map(|p| {
                p.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            });
            rows.push(
                Origin::Line(st.line),
                vec![
                    ("query_id", LogValue::S(query_id(app_key, &st.query))),
                    ("stage_id", LogValue::S(stage_name(st.id, st.attempt))),
                    ("parent_ids", text(parents.as_deref())),
                    ("name", text(st.name.as_deref())),
                    ("submit_time", time(st.submit)),
                    ("start_time", LogValue::Null),
                    ("end_time", time(st.completed.filter(|_| st.done))),
                    ("attrs", LogValue::S(Value::Object(st.attrs()).to_string())),
                ],
            );
        }
        rows
    }

    /// The `tasks` rows, in the order the tasks ended.
    fn task_rows(&self, app_key: &str) -> Rows {
        let mut rows = Rows::new(Table::Tasks);
        for task in &self.tasks {
            let mut row = vec![
                (
                    "task_id",
                    LogValue::S(format!("{app_key}:task:{}", task.id)),
                ),
                ("query_id", LogValue::S(query_id(app_key, &task.query))),
                ("stage_id", LogValue::S(task.stage.clone())),
                ("host", text(task.host.as_deref())),
                ("executor_id", text(task.executor.as_deref())),
                ("ready_time", time(task.ready)),
                ("launch_time", time(known_time(Some(task.launch)))),
                ("finish_time", time(known_time(Some(task.finish)))),
                ("status", LogValue::S(task.status.into())),
                ("attrs", LogValue::S(task.attrs.to_string())),
            ];
            for (name, v) in task.metrics.columns() {
                row.push((name, v.map_or(LogValue::Null, LogValue::F)));
            }
            rows.push(Origin::Line(task.line), row);
        }
        rows
    }

    /// The `executors` rows and, in a final log, each executor's slots as a
    /// `host_windows` capacity row over its life.
    fn executor_rows(&self, app_key: &str, final_log: bool) -> (Rows, Rows) {
        let local_cores = self.local_cores();
        let app_end = self.end.or(self.last_time);
        let mut executors = Rows::new(Table::Executors);
        let mut slots = Rows::new(Table::HostWindows);
        // (host, from, to), slots, the first executor's line.
        let mut capacity: Vec<((String, i64, i64), f64, u64)> = Vec::new();
        let mut index: std::collections::HashMap<(String, i64, i64), usize> =
            std::collections::HashMap::new();
        for (id, x) in &self.executors {
            if !x.is_executor() || (x.removed.is_none() && !final_log) {
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
                    ("app_id", LogValue::S(app_key.to_string())),
                    ("executor_id", LogValue::S(id.clone())),
                    ("host", text(x.host.as_deref())),
                    ("cores", cores.map_or(LogValue::Null, LogValue::F)),
                    ("add_time", time(x.added.or(self.start))),
                    ("remove_time", time(x.removed)),
                    ("remove_reason", text(x.reason.as_deref())),
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
                    // Executors of one host with the same life are one
                    // row (a window row's identity is host, resource and
                    // window): their slots add up.
                    let at = (host.to_string(), from, to);
                    match index.get(&at) {
                        Some(&k) => capacity[k].1 += n,
                        None => {
                            index.insert(at.clone(), capacity.len());
                            capacity.push((at, n, x.line));
                        }
                    }
                }
            }
        }
        for ((host, from, to), n, line) in capacity {
            slots.push(
                Origin::Line(line),
                vec![
                    ("host", LogValue::S(host)),
                    ("window_start", time(Some(from))),
                    ("window_end", time(Some(to))),
                    ("resource", LogValue::S("slots".into())),
                    ("capacity", LogValue::F(n)),
                    // An application's executors serve only its tasks.
                    ("scope", LogValue::S(app_key.to_string())),
                ],
            );
        }
        (executors, slots)
    }

    /// Whether the log has SQL execution events at all (else a query named
    /// by `spark.sql.execution.id` ends with its jobs).
    fn queries_have_sql_events(&self) -> bool {
        !self.sql_root.is_empty()
    }
}

/// A query's id in the store: its key in the application, prefixed by the
/// application's (query keys repeat across applications).
fn query_id(app_key: &str, query: &str) -> String {
    format!("{app_key}:{query}")
}

/// A time of the log (epoch milliseconds) as a time value.
fn time(ms: Option<i64>) -> LogValue {
    ms.map_or(LogValue::Null, |ms| LogValue::T(ms * 1000))
}

fn text(v: Option<&str>) -> LogValue {
    v.map_or(LogValue::Null, |x| LogValue::S(x.to_string()))
}

/// The first submit and last completion of a query's stages.
#[derive(Debug, Clone, Copy, Default)]
struct StageSpan {
    first_submit: Option<i64>,
    last_completed: Option<i64>,
}

impl Query {
    /// The submit time of the row: the earliest of the query's own (else
    /// its first stage's) and its first job's.
    fn submit_time(&self, span: StageSpan) -> Option<i64> {
        match (self.submit.or(span.first_submit), self.first_job) {
            (Some(submit), Some(first_job)) => Some(submit.min(first_job)),
            (submit, first_job) => submit.or(first_job),
        }
    }

    fn status(&self, finished: bool) -> &'static str {
        if !finished {
            "incomplete"
        } else if self.error.is_some() || self.failed_jobs > 0 {
            "failed"
        } else {
            "succeeded"
        }
    }
}

impl Stage {
    /// The attributes of a stage row: Spark's ids, its status and failure
    /// (first line), and the executors' peak metrics during it.
    fn attrs(&self) -> Map<String, Value> {
        let mut attrs = Map::new();
        attrs.insert("spark_stage_id".into(), json!(self.id));
        attrs.insert("attempt".into(), json!(self.attempt));
        if let Some(j) = self.job {
            attrs.insert("job_id".into(), json!(j));
        }
        if let Some(n) = self.num_tasks {
            attrs.insert("num_tasks".into(), json!(n));
        }
        let status = match (&self.failure, self.done) {
            (Some(_), _) => "failed",
            (None, true) => "succeeded",
            (None, false) => "incomplete",
        };
        attrs.insert("status".into(), json!(status));
        if let Some(f) = &self.failure {
            attrs.insert("failure".into(), json!(f.lines().next().unwrap_or("")));
        }
        if !self.executor_metrics.is_empty() {
            attrs.insert(
                "executor_metrics".into(),
                Value::Object(self.executor_metrics.clone()),
            );
        }
        attrs
    }
}

impl Executor {
    /// Whether it gets an `executors` row. The driver of a local-mode
    /// application counts when it ran tasks; other block managers without
    /// an executor do not, nor executors of which only metrics were seen.
    fn is_executor(&self) -> bool {
        if self.from_block_manager && !self.ran_tasks {
            return false;
        }
        self.host.is_some() || self.added.is_some() || self.ran_tasks
    }
}
