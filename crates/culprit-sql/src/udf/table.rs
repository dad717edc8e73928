//! The table a table function returns: computed from the dataset at scan
//! time (table-function construction is synchronous; the I/O happens here).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use culprit_core::method::Dataset;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;

use crate::engine::Engine;

pub type Compute = Arc<dyn Fn(&Dataset) -> Result<RecordBatch> + Send + Sync>;

pub struct ComputedTable {
    pub name: &'static str,
    pub schema: SchemaRef,
    pub engine: Arc<Engine>,
    pub compute: Compute,
    /// The memory the result holds, charged to the query's pool until the
    /// plan (which owns this table) is dropped.
    pub held: std::sync::Mutex<Vec<MemoryReservation>>,
}

impl fmt::Debug for ComputedTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}()", self.name)
    }
}

#[async_trait]
impl TableProvider for ComputedTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let ds = self.engine.dataset().await?;
        let compute = self.compute.clone();
        // The method is CPU work: keep it off the async workers.
        let started = std::time::Instant::now();
        let batch = tokio::task::spawn_blocking(move || compute(&ds))
            .await
            .map_err(|e| DataFusionError::Execution(format!("culprit: {}: {e}", self.name)))??;
        // The result is charged to the query's memory pool (per connection,
        // `--query-memory-mb`): over the limit, the query fails with
        // ResourcesExhausted (SQLSTATE 53200) and the result is dropped. The
        // shared dataset cache is not charged to any one query.
        let consumer = MemoryConsumer::new(format!("culprit {}()", self.name));
        let reservation = consumer.register(&state.runtime_env().memory_pool);
        reservation
            .try_grow(batch.get_array_memory_size())
            .map_err(|e| {
                DataFusionError::ResourcesExhausted(format!(
                    "culprit: {}(): its result of {} rows does not fit in the query's memory: {e}",
                    self.name,
                    batch.num_rows()
                ))
            })?;
        self.held.lock().expect("held").push(reservation);
        log::info!(
            "{}(): {} rows in {:.2} s",
            self.name,
            batch.num_rows(),
            started.elapsed().as_secs_f64()
        );
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection.cloned(),
        )?)
    }
}

/// A method error as a DataFusion error that maps to SQLSTATE 22023.
pub fn method_err(function: &str, e: culprit_core::MethodError) -> DataFusionError {
    DataFusionError::Execution(format!("culprit: {function}: {e}"))
}
