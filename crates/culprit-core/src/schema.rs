//! The tables of the interchange format (../shared/spec/interchange.md) and
//! the `executors` table culprit adds,
//! as stored: one canonical Arrow schema per table.
//!
//! Times are `Timestamp(Microsecond, "UTC")`, durations float seconds, amounts
//! float units of the resource. Column order here is the stored order; input
//! files may have any order and extra columns.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// The logical kind of a column, which decides how input values are parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// UTF-8 text.
    Str,
    /// A point in time (stored as microseconds since the epoch, UTC).
    Time,
    /// A float: seconds for durations, units for amounts.
    Float,
}

impl ColumnKind {
    /// The stored Arrow type of this kind.
    pub fn data_type(self) -> DataType {
        match self {
            ColumnKind::Str => DataType::Utf8,
            ColumnKind::Time => timestamp_type(),
            ColumnKind::Float => DataType::Float64,
        }
    }
}

/// The stored timestamp type.
pub fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")))
}

/// One column of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSpec {
    pub name: &'static str,
    pub kind: ColumnKind,
    /// A required column must be present in every input file and never NULL.
    pub required: bool,
    /// Amounts and durations that may not be negative.
    pub non_negative: bool,
}

const fn col(name: &'static str, kind: ColumnKind, required: bool) -> ColumnSpec {
    ColumnSpec {
        name,
        kind,
        required,
        non_negative: matches!(kind, ColumnKind::Float),
    }
}

use ColumnKind::{Float, Str, Time};

const QUERIES: &[ColumnSpec] = &[
    col("query_id", Str, true),
    col("app_id", Str, false),
    col("user", Str, false),
    col("pool", Str, false),
    col("sql_text", Str, false),
    col("submit_time", Time, false),
    col("start_time", Time, false),
    col("end_time", Time, false),
    col("status", Str, false),
    col("tags", Str, false),
];

const STAGES: &[ColumnSpec] = &[
    col("query_id", Str, true),
    col("stage_id", Str, true),
    col("parent_ids", Str, false),
    col("name", Str, false),
    col("submit_time", Time, false),
    col("start_time", Time, false),
    col("end_time", Time, false),
    col("attrs", Str, false),
];

const TASKS: &[ColumnSpec] = &[
    col("task_id", Str, true),
    col("query_id", Str, true),
    col("stage_id", Str, true),
    col("host", Str, true),
    col("executor_id", Str, false),
    col("ready_time", Time, false),
    col("launch_time", Time, true),
    col("finish_time", Time, true),
    col("status", Str, false),
    col("input_bytes", Float, false),
    col("output_bytes", Float, false),
    col("shuffle_read_bytes", Float, false),
    col("shuffle_write_bytes", Float, false),
    col("cpu_seconds", Float, false),
    col("gc_seconds", Float, false),
    col("disk_read_blocked", Float, false),
    col("disk_write_blocked", Float, false),
    col("network_blocked", Float, false),
    col("cpu_blocked", Float, false),
    col("memory_blocked", Float, false),
    col("scheduler_delay", Float, false),
    col("attrs", Str, false),
];

const TASK_WINDOWS: &[ColumnSpec] = &[
    col("task_id", Str, true),
    col("window_start", Time, true),
    col("window_end", Time, true),
    col("resource", Str, true),
    col("detail", Str, false),
    col("blocked", Float, true),
    col("acquired", Float, true),
    col("gc", Float, false),
];

const HOST_WINDOWS: &[ColumnSpec] = &[
    col("host", Str, true),
    col("window_start", Time, true),
    col("window_end", Time, true),
    col("resource", Str, true),
    col("capacity", Float, false),
    col("used", Float, false),
    // culprit's addition: the slot pool of a `slots` row (an application's
    // `app_id` or a queries `pool`); NULL is the cluster's shared pool.
    col("scope", Str, false),
];

const EXECUTORS: &[ColumnSpec] = &[
    col("app_id", Str, true),
    col("executor_id", Str, true),
    col("host", Str, false),
    col("cores", Float, false),
    col("add_time", Time, false),
    col("remove_time", Time, false),
    col("remove_reason", Str, false),
    col("attrs", Str, false),
];

/// Record lineage (method.md section 10, 002 section 4): one row per output
/// record of a stage, the records it was computed from, and the time its
/// computation took (seconds).
const RECORD_LINEAGE: &[ColumnSpec] = &[
    col("query_id", Str, true),
    col("stage_id", Str, true),
    col("output_id", Str, true),
    col("input_ids", Str, false),
    col("computation_latency", Float, true),
    col("partition", Str, false),
];

/// The shuffle latency of a partition (seconds), shared among its records
/// by their share of its inputs; `inputs` gives the partition's input count
/// where the lineage rows do not list them all.
const PARTITION_LATENCY: &[ColumnSpec] = &[
    col("query_id", Str, true),
    col("stage_id", Str, true),
    col("partition", Str, true),
    col("latency", Float, true),
    col("inputs", Float, false),
];

/// The tables of the interchange format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Queries,
    Stages,
    Tasks,
    TaskWindows,
    HostWindows,
    /// Engine processes (Spark executors): where slots come from.
    Executors,
    /// Record lineage, for computation skew (method.md section 10).
    RecordLineage,
    /// Per-partition shuffle latency, with the record lineage.
    PartitionLatency,
}

impl Table {
    /// All tables, in dependency order (tasks before the windows that name them).
    pub const ALL: [Table; 8] = [
        Table::Queries,
        Table::Stages,
        Table::Tasks,
        Table::TaskWindows,
        Table::HostWindows,
        Table::Executors,
        Table::RecordLineage,
        Table::PartitionLatency,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Queries => "queries",
            Table::Stages => "stages",
            Table::Tasks => "tasks",
            Table::TaskWindows => "task_windows",
            Table::HostWindows => "host_windows",
            Table::Executors => "executors",
            Table::RecordLineage => "record_lineage",
            Table::PartitionLatency => "partition_latency",
        }
    }

    pub fn columns(self) -> &'static [ColumnSpec] {
        match self {
            Table::Queries => QUERIES,
            Table::Stages => STAGES,
            Table::Tasks => TASKS,
            Table::TaskWindows => TASK_WINDOWS,
            Table::HostWindows => HOST_WINDOWS,
            Table::Executors => EXECUTORS,
            Table::RecordLineage => RECORD_LINEAGE,
            Table::PartitionLatency => PARTITION_LATENCY,
        }
    }

    /// The columns that identify a row; re-ingesting a row with the same key
    /// adds nothing. Window tables have no key (their files are deduplicated
    /// by content).
    pub fn key_columns(self) -> &'static [&'static str] {
        match self {
            Table::Queries => &["query_id"],
            Table::Stages => &["query_id", "stage_id"],
            Table::Tasks => &["task_id"],
            Table::Executors => &["app_id", "executor_id"],
            Table::RecordLineage => &["query_id", "output_id"],
            Table::PartitionLatency => &["query_id", "stage_id", "partition"],
            Table::TaskWindows | Table::HostWindows => &[],
        }
    }

    pub fn column(self, name: &str) -> Option<&'static ColumnSpec> {
        self.columns().iter().find(|c| c.name == name)
    }

    pub fn column_index(self, name: &str) -> Option<usize> {
        self.columns().iter().position(|c| c.name == name)
    }

    /// The stored Arrow schema.
    pub fn schema(self) -> SchemaRef {
        static SCHEMAS: OnceLock<Vec<SchemaRef>> = OnceLock::new();
        let all = SCHEMAS.get_or_init(|| {
            Table::ALL
                .iter()
                .map(|t| {
                    let fields: Vec<Field> = t
                        .columns()
                        .iter()
                        .map(|c| Field::new(c.name, c.kind.data_type(), !c.required))
                        .collect();
                    Arc::new(Schema::new(fields))
                })
                .collect()
        });
        all[self as usize].clone()
    }

    /// Finds the table a file belongs to from its name or its folder's name:
    /// `tasks.csv`, `tasks-0003.parquet`, `task_windows/part-1.jsonl`.
    pub fn from_file_name(path: &str) -> Option<Table> {
        let mut parts = path.rsplit(['/', '\\']).filter(|p| !p.is_empty());
        let file = parts.next()?;
        let stem = file.split('.').next().unwrap_or(file);
        if let Some(t) = Table::from_prefix(stem) {
            return Some(t);
        }
        parts.next().and_then(Table::from_prefix)
    }

    /// `tasks`, `tasks-0003`, `tasks_part2` name `tasks`; the longest table
    /// name wins.
    fn from_prefix(stem: &str) -> Option<Table> {
        let stem = stem.to_ascii_lowercase();
        Table::ALL
            .into_iter()
            .filter(|t| {
                stem.strip_prefix(t.name())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '_']))
            })
            .max_by_key(|t| t.name().len())
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Table {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Table::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown table '{s}' (expected one of: queries, stages, tasks, task_windows, host_windows, executors)"
                )
            })
    }
}

/// The resources of method.md section 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    Cpu,
    Network,
    DiskRead,
    DiskWrite,
    Memory,
    Slots,
}

impl Resource {
    pub const ALL: [Resource; 6] = [
        Resource::Cpu,
        Resource::Network,
        Resource::DiskRead,
        Resource::DiskWrite,
        Resource::Memory,
        Resource::Slots,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Network => "network",
            Resource::DiskRead => "disk_read",
            Resource::DiskWrite => "disk_write",
            Resource::Memory => "memory",
            Resource::Slots => "slots",
        }
    }

    /// The unit a row's `acquired` is counted in.
    pub fn unit(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu-seconds",
            Resource::Network | Resource::DiskRead | Resource::DiskWrite | Resource::Memory => {
                "bytes"
            }
            Resource::Slots => "slot-seconds",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Resource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Hot in ingestion and loading: match bytes, not a search.
        match s.as_bytes() {
            b"cpu" => return Ok(Resource::Cpu),
            b"network" => return Ok(Resource::Network),
            b"disk_read" => return Ok(Resource::DiskRead),
            b"disk_write" => return Ok(Resource::DiskWrite),
            b"memory" => return Ok(Resource::Memory),
            b"slots" => return Ok(Resource::Slots),
            _ => {}
        }
        Resource::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                format!("unknown resource '{s}' (expected cpu, network, disk_read, disk_write, memory or slots)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_from_file_name() {
        assert_eq!(Table::from_file_name("tasks.csv"), Some(Table::Tasks));
        assert_eq!(
            Table::from_file_name("/a/b/tasks-0003.parquet"),
            Some(Table::Tasks)
        );
        assert_eq!(
            Table::from_file_name("task_windows/part-1.jsonl"),
            Some(Table::TaskWindows)
        );
        assert_eq!(
            Table::from_file_name("x/task_windows-7.parquet"),
            Some(Table::TaskWindows)
        );
        assert_eq!(
            Table::from_file_name("host_windows.csv"),
            Some(Table::HostWindows)
        );
        assert_eq!(Table::from_file_name("QUERIES.jsonl"), Some(Table::Queries));
        assert_eq!(Table::from_file_name("data/part-1.csv"), None);
        assert_eq!(Table::from_file_name("taskswindows.csv"), None);
    }

    #[test]
    fn schemas_follow_specs() {
        let s = Table::Tasks.schema();
        assert_eq!(s.fields().len(), Table::Tasks.columns().len());
        assert!(!s.field_with_name("task_id").unwrap().is_nullable());
        assert!(s.field_with_name("executor_id").unwrap().is_nullable());
        assert_eq!(
            s.field_with_name("launch_time").unwrap().data_type(),
            &timestamp_type()
        );
    }

    #[test]
    fn resources_parse() {
        assert_eq!("disk_read".parse::<Resource>(), Ok(Resource::DiskRead));
        assert!("gpu"
            .parse::<Resource>()
            .unwrap_err()
            .contains("unknown resource"));
    }
}
