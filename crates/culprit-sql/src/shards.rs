//! The host buckets of an analysis swept by a cluster's workers (issue
//! #19; the engine's side is `culprit-engine/src/shards.rs`).
//!
//! A share is a plan node of the distributed engine, [`SweepExec`]: a leaf
//! holding the job (the store version, the stages explained, the windows)
//! and the host buckets of each task. The engine's planner gives it one
//! task per worker (at most one per bucket asked), [`scale_up`] splits the
//! buckets among the tasks, and each worker runs its task: it reads its
//! buckets from the shared store at the job's version (its engine's
//! `snapshot_at`) and sweeps them (`Snapshot::sweep_share`). The node
//! travels to the workers with [`SweepCodec`]. Planned without workers (one
//! worker: the engine then runs the plan here), the node sweeps in this
//! process from the coordinator's own snapshot.
//!
//! A worker that fails or cannot be reached fails the analysis with
//! SQLSTATE 58000 naming it, as any distributed query (`cluster.rs`).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExt, DistributedTaskContext,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use futures::{StreamExt, TryStreamExt};

use culprit_engine::{share_schema, Engine, Snapshot, SweepJob, Sweeper};
use culprit_store::Store;

use crate::cluster::Cluster;

/// The engine a worker sweeps its shares with, in its sessions'
/// configuration.
#[derive(Debug)]
pub(crate) struct WorkerEngine(pub Arc<Engine>);

/// A coordinator's [`Sweeper`]: each analysis's buckets go to the
/// cluster's workers as a [`SweepExec`].
#[derive(Debug)]
pub struct ClusterSweeper {
    cluster: Cluster,
    store: Store,
}

impl ClusterSweeper {
    pub fn new(cluster: Cluster, store: Store) -> ClusterSweeper {
        ClusterSweeper { cluster, store }
    }

    async fn run(
        &self,
        snapshot: &Snapshot,
        job: &SweepJob,
        buckets: &[u32],
        sink: &mut dyn FnMut(RecordBatch) -> std::result::Result<(), culprit_engine::Error>,
    ) -> Result<()> {
        let config = SessionConfig::new().with_target_partitions(1);
        let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_object_store_registry(Arc::new(crate::sandbox::StoreOnlyRegistry::new(
                &self.store,
            )))
            .build_arc()?;
        let builder = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features();
        let state = self
            .cluster
            .coordinate(builder)?
            .with_distributed_user_codec(SweepCodec)
            .with_distributed_desired_task_count_handler(desired_tasks)
            .with_distributed_scale_up_leaf_node_handler(scale_up)
            .build();
        let ctx = SessionContext::new_with_state(state);
        // The engine's planner gives the leaf one task per worker up (at
        // most one per bucket, `desired_tasks`), deals the buckets to them
        // (`scale_up`) and gathers their rows through a network boundary
        // above it (the leaf has two partitions, so the plan gathers them).
        let plan: Arc<dyn ExecutionPlan> = Arc::new(SweepExec::new(
            job.clone(),
            vec![buckets.to_vec()],
            Some(snapshot.clone()),
        ));
        // The rows are read back as they arrive, not gathered first.
        let mut rows = ctx
            .read_table(Arc::new(SweepTable(plan)))?
            .execute_stream()
            .await?;
        while let Some(batch) = rows.next().await {
            sink(batch?).map_err(crate::error::to_datafusion)?;
        }
        Ok(())
    }
}

impl Sweeper for ClusterSweeper {
    fn workers(&self) -> usize {
        self.cluster.workers_up()
    }

    fn sweep(
        &self,
        runtime: &tokio::runtime::Handle,
        snapshot: &Snapshot,
        job: &SweepJob,
        buckets: &[u32],
        sink: &mut dyn FnMut(RecordBatch) -> std::result::Result<(), culprit_engine::Error>,
    ) -> std::result::Result<(), culprit_engine::Error> {
        runtime
            .block_on(self.run(snapshot, job, buckets, sink))
            .map_err(|e| culprit_engine::Error::Remote(Box::new(e)))
    }
}

/// The table the coordinator reads a sweep's plan from.
#[derive(Debug)]
struct SweepTable(Arc<dyn ExecutionPlan>);

#[async_trait]
impl TableProvider for SweepTable {
    fn schema(&self) -> SchemaRef {
        share_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self.0.clone())
    }
}

/// The sweeps of some host buckets of an analysis, one share of them per
/// task of the distributed plan.
#[derive(Debug, Clone)]
pub(crate) struct SweepExec {
    job: SweepJob,
    /// The buckets of each task.
    shares: Vec<Vec<u32>>,
    /// The coordinator's snapshot, when the node runs where it was planned
    /// (it does not travel: a worker reads its own at the job's version).
    local: Option<Snapshot>,
    properties: Arc<PlanProperties>,
}

impl SweepExec {
    fn new(job: SweepJob, shares: Vec<Vec<u32>>, local: Option<Snapshot>) -> SweepExec {
        SweepExec {
            job,
            shares,
            local,
            properties: Arc::new(PlanProperties::new(
                EquivalenceProperties::new(share_schema()),
                // Partition 0 sweeps the task's share; partition 1 is
                // empty. (A plan of one partition would not be gathered,
                // so the engine's planner would put no network boundary
                // above the leaf and run it here.)
                Partitioning::UnknownPartitioning(2),
                EmissionType::Final,
                Boundedness::Bounded,
            )),
        }
    }
}

impl DisplayAs for SweepExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CulpritSweepExec: version={}", self.job.version)?;
        for (i, s) in self.shares.iter().enumerate() {
            write!(f, ", t{i}={} buckets", s.len())?;
        }
        Ok(())
    }
}

impl ExecutionPlan for SweepExec {
    fn name(&self) -> &str {
        "CulpritSweepExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                share_schema(),
                futures::stream::empty(),
            )));
        }
        let task = DistributedTaskContext::from_ctx(&context);
        let Some(share) = self.shares.get(task.task_index).cloned() else {
            return Err(DataFusionError::Internal(format!(
                "culprit sweep: task {} of a plan with {} shares",
                task.task_index,
                self.shares.len()
            )));
        };
        let job = self.job.clone();
        let local = self.local.clone();
        let engine = context
            .session_config()
            .get_extension::<WorkerEngine>()
            .map(|e| e.0.clone());
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let rows = futures::stream::once(async move {
            // On a worker, each chunk is admitted in its memory budget
            // (`culprit worker --memory-budget-mb`) as a heavy analysis;
            // on the coordinator (a plan run locally) the analysis was.
            let (snapshot, budget) = match (local, engine) {
                (Some(s), _) => (s, None),
                (None, Some(engine)) => (
                    engine.snapshot_at(job.version).await.map_err(on_worker)?,
                    Some(engine.budget().clone()),
                ),
                (None, None) => {
                    return Err(DataFusionError::Internal(
                        "culprit sweep: this process has no store to sweep from".into(),
                    ))
                }
            };
            // The share's buckets are swept a few at a time (one per core)
            // and their rows sent before the next are swept, so a worker
            // holds the level-4 nodes of a few buckets, not of its whole
            // share (`buckets_at_a_time`: at once on an older store).
            let per = snapshot.buckets_at_a_time(share.len(), cores);
            let chunks: Vec<Vec<u32>> = share.chunks(per).map(|c| c.to_vec()).collect();
            let job = Arc::new(job);
            Ok(futures::stream::iter(chunks)
                .then(move |chunk| {
                    let (snapshot, job, budget) = (snapshot.clone(), job.clone(), budget.clone());
                    async move {
                        let n = chunk.len();
                        let admitted = match &budget {
                            Some(budget) => Some(
                                budget
                                    .admit(
                                        &format!("a sweep of {n} host buckets"),
                                        snapshot.share_estimate(n),
                                        true,
                                    )
                                    .await
                                    .map_err(on_worker)?,
                            ),
                            None => None,
                        };
                        let started = std::time::Instant::now();
                        // Held by the sweep until it ends, even when the
                        // coordinator's statement is cancelled meanwhile.
                        let (batches, admitted) = culprit_engine::run_held(admitted, move || {
                            snapshot.sweep_share(&job, &chunk)
                        })
                        .await
                        .map_err(|e| DataFusionError::Internal(format!("culprit sweep: {e}")))?;
                        let batches = batches.map_err(on_worker)?;
                        log::info!(
                            "swept a share of {n} host buckets: {} level-4 nodes in {:.2} s",
                            batches.iter().map(|b| b.num_rows()).sum::<usize>(),
                            started.elapsed().as_secs_f64()
                        );
                        // The admission is held until the chunk's last
                        // rows are sent: they are its memory until then.
                        Ok::<_, DataFusionError>(futures::stream::iter(batches.into_iter().map(
                            move |b| {
                                let _held = &admitted;
                                Ok(b)
                            },
                        )))
                    }
                })
                .try_flatten())
        })
        .try_flatten()
        .boxed();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            share_schema(),
            rows,
        )))
    }
}

/// A culprit error of a sweep, as the engine sends it back from a worker:
/// its error encoding keeps only DataFusion's own variants, so a refusal of
/// the worker's memory budget becomes `ResourcesExhausted` (53200 at the
/// coordinator, `cluster.rs` naming the worker) instead of a message of
/// no type.
fn on_worker(e: crate::error::Error) -> DataFusionError {
    match e {
        crate::error::Error::OutOfMemory(m) => DataFusionError::ResourcesExhausted(m),
        e => crate::error::to_datafusion(e),
    }
}

/// One task per bucket at most: the planner caps it at the workers up.
fn desired_tasks(ev: DesiredTaskCountEvent) -> Option<Result<DesiredTaskCountEventResponse>> {
    let exec = ev.plan.downcast_ref::<SweepExec>()?;
    let buckets: usize = exec.shares.iter().map(|s| s.len()).sum();
    Some(Ok(DesiredTaskCountEventResponse::desired(buckets.max(1))))
}

/// The buckets dealt to `task_count` tasks in turn (buckets hold about as
/// many hosts each: the hash spreads them).
fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let exec = ev.plan.downcast_ref::<SweepExec>()?;
    let n = ev.task_count.max(1);
    let mut shares = vec![Vec::new(); n];
    for (i, b) in exec.shares.iter().flatten().enumerate() {
        shares[i % n].push(*b);
    }
    Some(Ok(ScaleUpLeafNodeEventResponse::new(Arc::new(
        SweepExec::new(exec.job.clone(), shares, exec.local.clone()),
    ))))
}

/// Carries [`SweepExec`] to the workers: the job's bytes, then each task's
/// buckets.
#[derive(Debug)]
pub(crate) struct SweepCodec;

impl PhysicalExtensionCodec for SweepCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return Err(DataFusionError::Internal(
                "culprit sweep: the node has no inputs".into(),
            ));
        }
        let bad = || DataFusionError::Internal("culprit sweep: a malformed plan node".into());
        let mut words = Words(buf);
        let len = words.u32().ok_or_else(bad)? as usize;
        let job = SweepJob::from_bytes(words.take(len).ok_or_else(bad)?)
            .map_err(crate::error::to_datafusion)?;
        let tasks = words.u32().ok_or_else(bad)? as usize;
        let mut shares = Vec::new();
        for _ in 0..tasks {
            let n = words.u32().ok_or_else(bad)? as usize;
            if n > words.0.len() / 4 {
                return Err(bad());
            }
            shares.push(
                (0..n)
                    .map(|_| words.u32().ok_or_else(bad))
                    .collect::<Result<_>>()?,
            );
        }
        if !words.0.is_empty() {
            return Err(bad());
        }
        Ok(Arc::new(SweepExec::new(job, shares, None)))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(exec) = node.downcast_ref::<SweepExec>() else {
            return Err(DataFusionError::Internal(format!(
                "culprit sweep: cannot encode {}",
                node.name()
            )));
        };
        let job = exec.job.to_bytes();
        buf.extend_from_slice(&(job.len() as u32).to_le_bytes());
        buf.extend_from_slice(&job);
        buf.extend_from_slice(&(exec.shares.len() as u32).to_le_bytes());
        for share in &exec.shares {
            buf.extend_from_slice(&(share.len() as u32).to_le_bytes());
            for b in share {
                buf.extend_from_slice(&b.to_le_bytes());
            }
        }
        Ok(())
    }
}

struct Words<'a>(&'a [u8]);

impl<'a> Words<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        let b = self.take(4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_survives_its_codec_and_bad_bytes_are_errors() {
        let job = SweepJob {
            version: 7,
            tasks: 3,
            hosts: 2,
            stages: vec![true, false],
            victim_tasks: None,
            bounds: vec![0, 10],
            paper: false,
        };
        let exec = Arc::new(SweepExec::new(
            job.clone(),
            vec![vec![1, 5, 9], vec![], vec![2]],
            None,
        ));
        let mut buf = Vec::new();
        let conv = datafusion_proto::physical_plan::DefaultPhysicalProtoConverter {};
        SweepCodec.try_encode(exec, &mut buf, &conv).unwrap();
        let ctx = TaskContext::default();
        let back = SweepCodec.try_decode(&buf, &[], &ctx, &conv).unwrap();
        let back = back.downcast_ref::<SweepExec>().unwrap();
        assert_eq!(back.job, job);
        assert_eq!(back.shares, vec![vec![1, 5, 9], vec![], vec![2]]);
        assert!(back.local.is_none());
        for n in 0..buf.len() {
            assert!(SweepCodec.try_decode(&buf[..n], &[], &ctx, &conv).is_err());
        }
    }

    #[test]
    fn buckets_are_dealt_to_the_tasks_in_turn() {
        let job = SweepJob {
            version: 1,
            tasks: 0,
            hosts: 0,
            stages: vec![],
            victim_tasks: None,
            bounds: vec![0, 1],
            paper: false,
        };
        let plan: Arc<dyn ExecutionPlan> =
            Arc::new(SweepExec::new(job, vec![vec![3, 4, 8, 11, 12]], None));
        let config = SessionConfig::new();
        let ev = ScaleUpLeafNodeEvent {
            plan: &plan,
            task_count: 2,
            session_config: &config,
        };
        let out = scale_up(ev).unwrap().unwrap().plan;
        let out = out.downcast_ref::<SweepExec>().unwrap();
        assert_eq!(out.shares, vec![vec![3, 8, 12], vec![4, 11]]);
    }
}
