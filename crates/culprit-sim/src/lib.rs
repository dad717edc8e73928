//! The project's own small cluster simulator: workloads with a known victim
//! and an injected culprit, written as interchange tables.
//!
//! [`simulate`] runs a time-stepped simulation: hosts with cores, disk and
//! network bandwidth and task slots; queries as stage DAGs; tasks sharing
//! each resource in proportion to their demand, and blocked (on their
//! bottleneck resource) whenever they get less than they need. Every blocked
//! second comes from simulated contention, never from random numbers.
//!
//! [`simulate_scenario`] runs any [`Scenario`] (queries, external processes,
//! GC storms); [`scenarios`] generates them by kind, for `culprit accuracy`.
//!
//! [`fast`] writes plausible but unsimulated data at scale (a million tasks in
//! seconds) for benchmarks.

mod fast;
mod lineage;
mod rng;
pub mod scenarios;
mod sim;

pub use fast::{fast, fast_parts, FastConfig};
pub use rng::Rng;
pub use scenarios::{scenario, ScenarioKind};
pub use sim::{
    query_latencies, simulate, simulate_scenario, Demand, ExternalLoad, Gc, GcStorm, QuerySpec,
    Scenario, SimConfig, SimResource, StageSpec, Variation,
};

use arrow::record_batch::RecordBatch;
use culprit_core::Table;

/// A generated data set: one batch per table, and the ground truth.
#[derive(Debug, Clone)]
pub struct Workload {
    pub queries: RecordBatch,
    pub stages: RecordBatch,
    pub tasks: RecordBatch,
    pub task_windows: RecordBatch,
    pub host_windows: RecordBatch,
    /// Record lineage and partition latencies (simulated data only).
    pub record_lineage: Option<RecordBatch>,
    pub partition_latency: Option<RecordBatch>,
    /// The query to explain.
    pub victim: String,
    /// The query injected to slow the victim down (empty for `fast` data).
    pub culprit: String,
    /// The input record injected to make the victim slow, the answer of
    /// `expensive_inputs(victim, 1)` (empty for `fast` data).
    pub expensive_input: String,
}

impl Workload {
    /// The generated rows of a table (`None`: the simulator writes none).
    pub fn table(&self, table: Table) -> Option<&RecordBatch> {
        match table {
            Table::Queries => Some(&self.queries),
            Table::Stages => Some(&self.stages),
            Table::Tasks => Some(&self.tasks),
            Table::TaskWindows => Some(&self.task_windows),
            Table::HostWindows => Some(&self.host_windows),
            Table::Executors => None,
            Table::RecordLineage => self.record_lineage.as_ref(),
            Table::PartitionLatency => self.partition_latency.as_ref(),
        }
    }
}
