//! Spark's listener events, as `JsonProtocol` writes them (Spark 1.x to
//! 4.x): only the fields culprit maps; every other field is skipped unread.

use serde::Deserialize;
use serde_json::{Map, Value};

pub type Props = Map<String, Value>;

#[derive(Deserialize)]
pub struct LogStart {
    #[serde(rename = "Spark Version")]
    pub version: Option<String>,
}

#[derive(Deserialize)]
pub struct AppStart {
    #[serde(rename = "App Name")]
    pub name: Option<String>,
    #[serde(rename = "App ID")]
    pub id: Option<String>,
    #[serde(rename = "Timestamp", deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
    #[serde(rename = "User")]
    pub user: Option<String>,
    #[serde(rename = "App Attempt ID")]
    pub attempt: Option<String>,
}

#[derive(Deserialize)]
pub struct AppEnd {
    #[serde(rename = "Timestamp", deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
}

#[derive(Deserialize)]
pub struct EnvUpdate {
    #[serde(rename = "Spark Properties")]
    pub spark: Option<Value>,
}

#[derive(Deserialize)]
pub struct ExecutorInfo {
    #[serde(rename = "Host")]
    pub host: Option<String>,
    #[serde(rename = "Total Cores")]
    pub cores: Option<f64>,
    #[serde(rename = "Resources")]
    pub resources: Option<Value>,
}

#[derive(Deserialize)]
pub struct ExecutorAdded {
    #[serde(rename = "Timestamp", deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
    #[serde(rename = "Executor ID")]
    pub id: String,
    #[serde(rename = "Executor Info")]
    pub info: Option<ExecutorInfo>,
}

#[derive(Deserialize)]
pub struct ExecutorRemoved {
    #[serde(rename = "Timestamp", deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
    #[serde(rename = "Executor ID")]
    pub id: String,
    #[serde(rename = "Removed Reason")]
    pub reason: Option<String>,
}

#[derive(Deserialize)]
pub struct BlockManagerId {
    #[serde(rename = "Executor ID")]
    pub executor: String,
    #[serde(rename = "Host")]
    pub host: Option<String>,
}

#[derive(Deserialize)]
pub struct BlockManagerAdded {
    #[serde(rename = "Block Manager ID")]
    pub id: BlockManagerId,
    #[serde(rename = "Timestamp", deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
}

#[derive(Deserialize)]
pub struct StageInfo {
    #[serde(rename = "Stage ID")]
    pub id: i64,
    #[serde(rename = "Stage Attempt ID", default)]
    pub attempt: i64,
    #[serde(rename = "Stage Name")]
    pub name: Option<String>,
    #[serde(rename = "Number of Tasks")]
    pub num_tasks: Option<i64>,
    #[serde(rename = "Parent IDs")]
    pub parents: Option<Vec<i64>>,
    #[serde(rename = "Submission Time", deserialize_with = "epoch::opt", default)]
    pub submitted: Option<i64>,
    #[serde(rename = "Completion Time", deserialize_with = "epoch::opt", default)]
    pub completed: Option<i64>,
    #[serde(rename = "Failure Reason")]
    pub failure: Option<String>,
}

#[derive(Deserialize)]
pub struct JobStart {
    #[serde(rename = "Job ID")]
    pub id: i64,
    #[serde(rename = "Submission Time", deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
    #[serde(rename = "Stage IDs", default)]
    pub stage_ids: Vec<i64>,
    #[serde(rename = "Properties")]
    pub props: Option<Props>,
}

#[derive(Deserialize)]
pub struct JobResult {
    #[serde(rename = "Result")]
    pub result: Option<String>,
}

#[derive(Deserialize)]
pub struct JobEnd {
    #[serde(rename = "Job ID")]
    pub id: i64,
    #[serde(rename = "Completion Time", deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
    #[serde(rename = "Job Result")]
    pub result: Option<JobResult>,
}

#[derive(Deserialize)]
pub struct StageSubmitted {
    #[serde(rename = "Stage Info")]
    pub info: StageInfo,
}

#[derive(Deserialize)]
pub struct StageCompleted {
    #[serde(rename = "Stage Info")]
    pub info: StageInfo,
}

#[derive(Deserialize)]
pub struct EndReason {
    #[serde(rename = "Reason")]
    pub reason: Option<String>,
    #[serde(rename = "Description")]
    pub description: Option<String>,
    #[serde(rename = "Kill Reason")]
    pub kill_reason: Option<String>,
    #[serde(rename = "Loss Reason")]
    pub loss_reason: Option<String>,
}

#[derive(Deserialize)]
pub struct TaskInfo {
    #[serde(rename = "Task ID")]
    pub id: i64,
    #[serde(rename = "Index")]
    pub index: Option<i64>,
    #[serde(rename = "Attempt")]
    pub attempt: Option<i64>,
    #[serde(rename = "Partition ID")]
    pub partition: Option<i64>,
    #[serde(rename = "Launch Time", deserialize_with = "epoch::positive")]
    pub launch: i64,
    #[serde(rename = "Executor ID")]
    pub executor: Option<String>,
    #[serde(rename = "Host")]
    pub host: Option<String>,
    #[serde(rename = "Locality")]
    pub locality: Option<String>,
    #[serde(rename = "Speculative", default)]
    pub speculative: bool,
    #[serde(
        rename = "Getting Result Time",
        default,
        deserialize_with = "epoch::req"
    )]
    pub getting_result: i64,
    #[serde(rename = "Finish Time", deserialize_with = "epoch::positive")]
    pub finish: i64,
    #[serde(rename = "Failed", default)]
    pub failed: bool,
    #[serde(rename = "Killed", default)]
    pub killed: bool,
}

#[derive(Deserialize, Default)]
pub struct ShuffleRead {
    #[serde(rename = "Fetch Wait Time")]
    pub fetch_wait_ms: Option<f64>,
    #[serde(rename = "Remote Bytes Read")]
    pub remote_bytes: Option<f64>,
    #[serde(rename = "Local Bytes Read")]
    pub local_bytes: Option<f64>,
    #[serde(rename = "Total Records Read")]
    pub records: Option<f64>,
}

#[derive(Deserialize, Default)]
pub struct ShuffleWrite {
    #[serde(rename = "Shuffle Bytes Written")]
    pub bytes: Option<f64>,
    #[serde(rename = "Shuffle Write Time")]
    pub time_ns: Option<f64>,
    #[serde(rename = "Shuffle Records Written")]
    pub records: Option<f64>,
}

#[derive(Deserialize, Default)]
pub struct InputMetrics {
    #[serde(rename = "Bytes Read")]
    pub bytes: Option<f64>,
    #[serde(rename = "Records Read")]
    pub records: Option<f64>,
}

#[derive(Deserialize, Default)]
pub struct OutputMetrics {
    #[serde(rename = "Bytes Written")]
    pub bytes: Option<f64>,
    #[serde(rename = "Records Written")]
    pub records: Option<f64>,
}

#[derive(Deserialize, Default)]
pub struct TaskMetrics {
    #[serde(rename = "Executor Deserialize Time")]
    pub deserialize_ms: Option<f64>,
    #[serde(rename = "Executor Run Time")]
    pub run_ms: Option<f64>,
    #[serde(rename = "Executor CPU Time")]
    pub cpu_ns: Option<f64>,
    #[serde(rename = "Peak Execution Memory")]
    pub peak_execution_memory: Option<f64>,
    #[serde(rename = "Result Size")]
    pub result_size: Option<f64>,
    #[serde(rename = "JVM GC Time")]
    pub gc_ms: Option<f64>,
    #[serde(rename = "Result Serialization Time")]
    pub result_serialization_ms: Option<f64>,
    #[serde(rename = "Memory Bytes Spilled")]
    pub memory_spilled: Option<f64>,
    #[serde(rename = "Disk Bytes Spilled")]
    pub disk_spilled: Option<f64>,
    #[serde(rename = "Shuffle Read Metrics")]
    pub shuffle_read: Option<ShuffleRead>,
    #[serde(rename = "Shuffle Write Metrics")]
    pub shuffle_write: Option<ShuffleWrite>,
    #[serde(rename = "Input Metrics")]
    pub input: Option<InputMetrics>,
    #[serde(rename = "Output Metrics")]
    pub output: Option<OutputMetrics>,
}

#[derive(Deserialize)]
pub struct TaskEnd {
    #[serde(rename = "Stage ID")]
    pub stage: i64,
    #[serde(rename = "Stage Attempt ID", default)]
    pub stage_attempt: i64,
    #[serde(rename = "Task Type")]
    pub task_type: Option<String>,
    #[serde(rename = "Task End Reason")]
    pub reason: Option<EndReason>,
    #[serde(rename = "Task Info")]
    pub info: TaskInfo,
    #[serde(rename = "Task Metrics")]
    pub metrics: Option<TaskMetrics>,
}

#[derive(Deserialize)]
pub struct StageExecutorMetrics {
    #[serde(rename = "Executor ID")]
    pub executor: String,
    #[serde(rename = "Stage ID")]
    pub stage: i64,
    #[serde(rename = "Stage Attempt ID", default)]
    pub stage_attempt: i64,
    #[serde(rename = "Executor Metrics")]
    pub metrics: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
pub struct ExecutorMetricsUpdate {
    #[serde(rename = "Executor ID")]
    pub executor: String,
    #[serde(rename = "Executor Metrics Updated")]
    pub updated: Option<Vec<StageExecutorMetricsUpdate>>,
}

#[derive(Deserialize)]
pub struct StageExecutorMetricsUpdate {
    #[serde(rename = "Executor Metrics")]
    pub metrics: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
pub struct SqlStart {
    #[serde(rename = "executionId")]
    pub id: i64,
    #[serde(rename = "rootExecutionId")]
    pub root: Option<i64>,
    pub description: Option<String>,
    #[serde(deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
}

#[derive(Deserialize)]
pub struct SqlEnd {
    #[serde(rename = "executionId")]
    pub id: i64,
    #[serde(deserialize_with = "epoch::opt", default)]
    pub time: Option<i64>,
    #[serde(rename = "errorMessage")]
    pub error: Option<String>,
}

/// The events culprit reads.
pub const SQL_START: &str = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart";
pub const SQL_END: &str = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd";

/// Events Spark writes that carry nothing culprit maps: skipped without
/// being counted as unknown.
pub const IGNORED: &[&str] = &[
    "SparkListenerTaskStart",
    "SparkListenerTaskGettingResult",
    "SparkListenerBlockManagerRemoved",
    "SparkListenerUnpersistRDD",
    "SparkListenerBlockUpdated",
    "SparkListenerResourceProfileAdded",
    "SparkListenerSpeculativeTaskSubmitted",
    "SparkListenerExecutorBlacklisted",
    "SparkListenerExecutorUnblacklisted",
    "SparkListenerExecutorExcluded",
    "SparkListenerExecutorUnexcluded",
    "SparkListenerExecutorBlacklistedForStage",
    "SparkListenerExecutorExcludedForStage",
    "SparkListenerNodeBlacklisted",
    "SparkListenerNodeUnblacklisted",
    "SparkListenerNodeExcluded",
    "SparkListenerNodeUnexcluded",
    "SparkListenerNodeBlacklistedForStage",
    "SparkListenerNodeExcludedForStage",
    "SparkListenerMiscellaneousProcessAdded",
    "org.apache.spark.scheduler.SparkListenerMiscellaneousProcessAdded",
    "SparkListenerUnschedulableTaskSetAdded",
    "SparkListenerUnschedulableTaskSetRemoved",
    "org.apache.spark.sql.execution.ui.SparkListenerDriverAccumUpdates",
    "org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate",
    "org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveSQLMetricUpdates",
    "org.apache.spark.sql.execution.ui.SparkListenerEffectiveSQLConf",
    "org.apache.spark.sql.execution.streaming.StreamingQueryListener$QueryStartedEvent",
    "org.apache.spark.sql.execution.streaming.StreamingQueryListener$QueryProgressEvent",
    "org.apache.spark.sql.execution.streaming.StreamingQueryListener$QueryTerminatedEvent",
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent",
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent",
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryIdleEvent",
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryTerminatedEvent",
];

/// The event name of a line written by `JsonProtocol`, which always starts
/// with `{"Event":"…"`; `None` when the line is shaped otherwise.
pub fn fast_event_name(line: &[u8]) -> Option<&str> {
    let rest = line.strip_prefix(b"{\"Event\":\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[end] != b'"' {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok()
}

/// The event name of any JSON object line (slow path).
#[derive(Deserialize)]
pub struct AnyEvent {
    #[serde(rename = "Event")]
    pub event: Option<String>,
}

/// Epoch milliseconds as Spark writes them, refused (the event's line is
/// rejected, with this reason) when they cannot be a time culprit stores:
/// microseconds since 1970 must fit in 64 bits, so |ms| < 9.2e15.
mod epoch {
    use serde::{Deserialize, Deserializer};

    pub const MAX_MS: i64 = i64::MAX / 1000;

    fn check<E: serde::de::Error>(ms: i64) -> Result<i64, E> {
        if (-MAX_MS..=MAX_MS).contains(&ms) {
            Ok(ms)
        } else {
            Err(E::custom(format!(
                "time {ms} ms is out of range (at most {MAX_MS} ms from 1970)"
            )))
        }
    }

    pub fn opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        Option::<i64>::deserialize(d)?.map(check).transpose()
    }

    pub fn req<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        check(i64::deserialize(d)?)
    }

    /// A time a task must have (its launch and finish): after 1970.
    pub fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let ms = check(i64::deserialize(d)?)?;
        if ms > 0 {
            Ok(ms)
        } else {
            Err(serde::de::Error::custom(format!(
                "time {ms} ms is not a time a task ran at (must be after 1970)"
            )))
        }
    }
}
