//! How a method function becomes a SQL table function: the
//! [`TableFunction`] trait each function's file implements (name,
//! signature, schema, argument parsing, computation), the DataFusion
//! adapter that plans it, and the table it returns, computed from the
//! engine's snapshot at scan time (table-function construction is
//! synchronous; the I/O happens here), its batches built as they are read.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;

pub use culprit_engine::budget::Cost;
use culprit_engine::{Engine, Focus, Snapshot, StoredCulprit};

use super::args::Args;
use crate::error::{to_datafusion, Error};

/// A computed result: its size, and its batches, built one at a time as
/// they are read (a large `blame()` is never one batch in memory).
pub struct Rows {
    pub rows: usize,
    /// Bytes the result holds until it is read.
    pub bytes: usize,
    pub batches: Box<dyn Iterator<Item = Result<RecordBatch>> + Send>,
}

impl Rows {
    pub fn one(batch: RecordBatch) -> Rows {
        Rows {
            rows: batch.num_rows(),
            bytes: batch.get_array_memory_size(),
            batches: Box::new(std::iter::once(Ok(batch))),
        }
    }
}

pub type Compute = Arc<dyn Fn(&Snapshot) -> Result<Rows> + Send + Sync>;

/// A call whose answer may be stored with the data
/// (`TableFunction::stored`): its victim, and its result from the stored
/// rows.
#[derive(Clone)]
pub struct Stored {
    pub victim: String,
    pub rows: StoredRows,
}

/// The result of a stored answer's rows (`TableFunction::from_stored`).
pub type StoredRows = Arc<dyn Fn(&str, &[StoredCulprit]) -> Result<Rows> + Send + Sync>;

/// The result for one group of victims (`TableFunction::compute_group`).
pub type GroupCompute = Arc<dyn Fn(&Snapshot, &[String]) -> Result<Rows> + Send + Sync>;

/// [`TableFunction::by_groups`] of a method call with options `opts`: its
/// window when it is over every victim.
pub fn every_victim(opts: &culprit_core::method::BlameOptions) -> Option<(i64, i64)> {
    opts.victims
        .is_none()
        .then(|| culprit_core::method::window(opts))
}

/// The options of such a call for one group of its victims
/// ([`TableFunction::compute_group`]).
pub fn in_group(
    opts: &culprit_core::method::BlameOptions,
    group: &[String],
) -> culprit_core::method::BlameOptions {
    culprit_core::method::BlameOptions {
        within: Some(group.to_vec()),
        ..opts.clone()
    }
}

/// How a call over every victim is computed group by group: its window and
/// the computation of one group.
#[derive(Clone)]
pub struct ByGroups {
    pub window: (i64, i64),
    pub compute: GroupCompute,
}

pub struct ComputedTable {
    pub name: &'static str,
    pub schema: SchemaRef,
    pub engine: Arc<Engine>,
    /// Needs every window row in memory (not only the blame sweeps, which
    /// stream them from a large store).
    pub windows: bool,
    /// The victims the call names, if it explains only them: then only what
    /// could have slowed them is read (`Engine::focused`).
    pub focus: Option<Focus>,
    /// Its working memory (over every victim: a heavy analysis).
    pub cost: Cost,
    pub compute: Compute,
    /// Over every victim, the result may be computed group by group of
    /// victims (`TableFunction::by_groups`): a large store is then
    /// explained one group at a time, in memory that follows the group.
    pub by_groups: Option<ByGroups>,
    /// The call's answer may be stored with the data: then it is read from
    /// there (`Engine::stored_culprits`), nothing else.
    pub stored: Option<Stored>,
    /// The memory the result holds, charged to the query's pool until the
    /// plan (which owns this table) is dropped.
    pub held: Mutex<Vec<MemoryReservation>>,
    /// A read for named victims' own count in the memory budget (its
    /// dataset and working memory, `Engine::focused`), kept until the plan
    /// is dropped: a result may hold the dataset until it is sent.
    pub read: Mutex<Vec<Arc<culprit_engine::Reservation>>>,
}

impl ComputedTable {
    pub fn new(
        name: &'static str,
        schema: SchemaRef,
        engine: Arc<Engine>,
        windows: bool,
        focus: Option<Focus>,
        compute: Compute,
    ) -> Self {
        ComputedTable {
            name,
            schema,
            engine,
            windows,
            focus,
            cost: Cost::Small,
            compute,
            by_groups: None,
            stored: None,
            held: Default::default(),
            read: Default::default(),
        }
    }
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
        // A call that explains named victims reads only what could have
        // slowed them (`Engine::focused`); others take the cached snapshot,
        // whose size decides whether the call is heavy and how much
        // working memory it is admitted with.
        let engine = &self.engine;
        let what = format!("{}()", self.name);
        // The logged time covers the whole call: its reads (the store's
        // version, a stored answer, the rows), admission and computation.
        let started = std::time::Instant::now();
        // A call for named victims reads the store's version once, for its
        // stored answer and its read.
        let manifest = match (&self.stored, &self.focus) {
            (None, None) => None,
            _ => Some(engine.manifest().await.map_err(to_datafusion)?),
        };
        if let (Some(stored), Some(manifest)) = (&self.stored, &manifest) {
            // The stored answer, if the store holds one for the call's
            // question; else computed below. Admitted as a light call.
            let found = match engine.stored_culprits_at(manifest, &stored.victim).await {
                Ok(found) => found,
                Err(e) => {
                    log::warn!("{what}: the stored answers cannot be read ({e}): computed");
                    None
                }
            };
            if let Some(found) = found {
                let admission = engine
                    .budget()
                    .admit(&what, 0, false)
                    .await
                    .map_err(to_datafusion)?;
                let rows = (stored.rows)(&stored.victim, &found)?;
                return self.result(state, projection, rows, admission, started, "stored");
            }
        }
        if let Some(by_groups) = &self.by_groups {
            let groups = engine
                .victim_groups(by_groups.window, culprit_engine::GROUP_TASKS)
                .await
                .map_err(to_datafusion)?;
            if let Some(groups) = groups {
                return self.scan_groups(projection, groups, by_groups).await;
            }
        }
        let focused = match (&self.focus, manifest) {
            (Some(focus), Some(manifest)) => engine
                .focused_at_version(manifest, focus)
                .await
                .map_err(to_datafusion)?,
            _ => None,
        };
        let whole = focused.is_none();
        let snapshot = match focused {
            Some(snapshot) => snapshot,
            None => engine.snapshot(false).await.map_err(to_datafusion)?,
        };
        let heavy = self.cost == Cost::AllVictims || (self.windows && snapshot.streamed());
        // A read for named victims was admitted with its working memory
        // (`Engine::focused`): it holds both already, and waiting here for
        // more while holding them could wait for itself.
        let read = snapshot.admitted();
        let estimate = match read {
            Some(_) => 0,
            None => snapshot.working_estimate(self.cost, self.windows),
        };
        // Admission in the server's memory budget (`culprit_engine::budget`):
        // a heavy call takes a slot or waits in the queue; every call waits
        // for its working memory. Full: 53200.
        let admission = engine
            .budget()
            .admit(&what, estimate, heavy)
            .await
            .map_err(to_datafusion)?;
        let snapshot = if self.windows && whole {
            engine.snapshot(true).await.map_err(to_datafusion)?
        } else {
            snapshot
        };
        let compute = self.compute.clone();
        // The method is CPU work: keep it off the async workers.
        // The slot and the working memory stay held until the computation
        // ends, even when the statement is cancelled meanwhile (`run_held`).
        let (rows, admission) = culprit_engine::run_held(admission, move || compute(&snapshot))
            .await
            .map_err(|e| {
                // A panic in the method is a bug: XX000, and a log line.
                log::error!("{}(): the computation failed: {e}", self.name);
                to_datafusion(Error::Internal(format!("{}(): {e}", self.name)))
            })?;
        let rows = rows?;
        if let Some(read) = read {
            self.read.lock().expect("read").push(read);
        }
        self.result(state, projection, rows, admission, started, "computed")
    }
}

impl ComputedTable {
    /// The plan that sends `rows`, the result of a call admitted with
    /// `admission`, started at `started` (`how`: computed or stored).
    fn result(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        rows: Rows,
        mut admission: culprit_engine::Admission,
        started: std::time::Instant,
        how: &str,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // The result is charged to the query's memory pool, drawn from the
        // same budget (with the session's own `--query-memory-mb` when set),
        // in place of the working memory: over it, the query fails with
        // ResourcesExhausted (SQLSTATE 53200) and the result is dropped.
        admission.reservation.shrink(rows.bytes);
        let consumer = MemoryConsumer::new(format!("culprit {}()", self.name));
        let reservation = consumer.register(&state.runtime_env().memory_pool);
        reservation.try_grow(rows.bytes).map_err(|e| {
            DataFusionError::ResourcesExhausted(format!(
                "culprit: {}(): its result of {} rows does not fit in the query's memory: {e}",
                self.name, rows.rows
            ))
        })?;
        drop(admission);
        self.held.lock().expect("held").push(reservation);
        log::info!(
            "{}(): {} rows in {:.2} s ({how})",
            self.name,
            rows.rows,
            started.elapsed().as_secs_f64()
        );
        let partition = Arc::new(Once {
            name: self.name,
            schema: self.schema.clone(),
            batches: Mutex::new(Some(rows.batches)),
        });
        self.stream(partition, projection)
    }

    /// The plan that streams the result `partition` sends.
    fn stream(
        &self,
        partition: Arc<dyn PartitionStream>,
        projection: Option<&Vec<usize>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(StreamingTableExec::try_new(
            self.schema.clone(),
            vec![partition],
            projection,
            [],
            false,
            None,
        )?))
    }

    /// The plan of a call over every victim of a large store: one heavy
    /// admission for the whole call, with the working memory of its
    /// largest group; then, as the result is read, each group's dataset is
    /// read (`Engine::group`), explained on a blocking thread, sent and
    /// dropped before the next.
    async fn scan_groups(
        &self,
        projection: Option<&Vec<usize>>,
        groups: culprit_engine::VictimGroups,
        by_groups: &ByGroups,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let what = format!("{}()", self.name);
        let admission = self
            .engine
            .budget()
            .admit(&what, groups.working_estimate(), true)
            .await
            .map_err(to_datafusion)?;
        log::info!(
            "{what}: every victim of a large store, in {} groups of about {} tasks",
            groups.groups.len(),
            culprit_engine::GROUP_TASKS
        );
        let partition = Arc::new(Grouped {
            name: self.name,
            schema: self.schema.clone(),
            engine: self.engine.clone(),
            groups: Arc::new(groups),
            compute: by_groups.compute.clone(),
            admission: Mutex::new(Some(admission)),
        });
        self.stream(partition, projection)
    }
}

/// The one partition of a call computed group by group.
struct Grouped {
    name: &'static str,
    schema: SchemaRef,
    engine: Arc<Engine>,
    groups: Arc<culprit_engine::VictimGroups>,
    compute: GroupCompute,
    /// The call's heavy slot and working memory, held until its last group
    /// is sent (or, when the statement ends first, until the computation
    /// of the group then running ends: `compute_group`).
    admission: Mutex<Option<culprit_engine::Admission>>,
}

impl fmt::Debug for Grouped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}() by groups of victims", self.name)
    }
}

/// Where the reading of a [`Grouped`] result is.
struct GroupState {
    next: usize,
    batches: Option<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>>,
    /// The result of the current group, charged to the query's pool.
    reservation: MemoryReservation,
    admission: Option<culprit_engine::Admission>,
    started: std::time::Instant,
}

impl PartitionStream for Grouped {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let name = self.name;
        let (engine, groups, compute) = (
            self.engine.clone(),
            self.groups.clone(),
            self.compute.clone(),
        );
        let admission = self.admission.lock().ok().and_then(|mut a| a.take());
        let consumer = MemoryConsumer::new(format!("culprit {name}()"));
        let state = GroupState {
            next: 0,
            batches: None,
            reservation: consumer.register(ctx.memory_pool()),
            admission,
            started: std::time::Instant::now(),
        };
        let total = groups.groups.len();
        let stream = futures::stream::unfold(Some(state), move |state| {
            let (engine, groups, compute) = (engine.clone(), groups.clone(), compute.clone());
            async move {
                let mut st = state?;
                if st.admission.is_none() && st.next == 0 {
                    // A plan executed twice: a bug of the caller.
                    let e = Error::Internal(format!(
                        "{name}(): its result was already read; call the function again"
                    ));
                    return Some((Err(to_datafusion(e)), None));
                }
                loop {
                    if let Some(batch) = st.batches.as_mut().and_then(|b| b.next()) {
                        return Some((batch, Some(st)));
                    }
                    st.batches = None;
                    if st.next >= total {
                        log::info!(
                            "{name}(): {total} groups of victims in {:.2} s",
                            st.started.elapsed().as_secs_f64()
                        );
                        return None;
                    }
                    let i = st.next;
                    st.next += 1;
                    // One group at a time: its dataset, then its sweeps
                    // (on every core). Reading the next group meanwhile
                    // was tried: it held about a third more memory at
                    // 1e6 tasks.
                    let snapshot = match engine.group(&groups, i).await {
                        Ok(s) => s,
                        Err(e) => return Some((Err(to_datafusion(e)), None)),
                    };
                    // The admission goes with the group's computation and
                    // comes back with its rows: a statement cancelled
                    // meanwhile leaves it held until the computation ends.
                    let held = st.admission.take();
                    let (rows, held) =
                        match compute_group(name, snapshot, &groups, i, &compute, held).await {
                            Ok(done) => done,
                            Err(e) => return Some((Err(e), None)),
                        };
                    st.admission = held;
                    match rows {
                        Ok(rows) => {
                            if let Err(e) = st.reservation.try_resize(rows.bytes) {
                                let e = DataFusionError::ResourcesExhausted(format!(
                                    "culprit: {name}(): the result of a group of {} victims \
                                     ({} rows) does not fit in the query's memory: {e}",
                                    groups.groups[i].len(),
                                    rows.rows
                                ));
                                return Some((Err(e), None));
                            }
                            log::info!(
                                "{name}(): group {}/{total} explained ({} rows, {:.2} s)",
                                i + 1,
                                rows.rows,
                                st.started.elapsed().as_secs_f64()
                            );
                            st.batches = Some(rows.batches);
                        }
                        Err(e) => return Some((Err(e), None)),
                    }
                }
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

/// Computes group `i`'s result on a blocking thread, holding `held` (the
/// call's admission) until it ends ([`culprit_engine::run_held`]); gives it
/// back with the result.
async fn compute_group(
    name: &'static str,
    snapshot: Snapshot,
    groups: &culprit_engine::VictimGroups,
    i: usize,
    compute: &GroupCompute,
    held: Option<culprit_engine::Admission>,
) -> Result<(Result<Rows>, Option<culprit_engine::Admission>)> {
    let victims = groups.groups[i].clone();
    let compute = compute.clone();
    culprit_engine::run_held(held, move || compute(&snapshot, &victims))
        .await
        .map_err(|e| {
            log::error!("{name}(): the computation failed: {e}");
            to_datafusion(Error::Internal(format!("{name}(): {e}")))
        })
}

/// The result's one partition: its batches, read once.
struct Once {
    name: &'static str,
    schema: SchemaRef,
    batches: Mutex<Option<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>>>,
}

impl fmt::Debug for Once {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}() result", self.name)
    }
}

impl PartitionStream for Once {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let batches = self.batches.lock().ok().and_then(|mut b| b.take());
        let name = self.name;
        let stream: Box<dyn Iterator<Item = Result<RecordBatch>> + Send> = match batches {
            Some(b) => b,
            // A plan executed twice: a bug of the caller, not of the input.
            None => Box::new(std::iter::once(Err(to_datafusion(Error::Internal(
                format!("{name}(): its result was already read; call the function again"),
            ))))),
        };
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(stream),
        ))
    }
}

/// One SQL table function of the method. Its file holds everything about
/// it: name, signature, result schema, how its constant arguments are
/// parsed (at planning: a bad one fails the statement before anything is
/// computed) and how its rows are computed from the engine's snapshot.
pub trait TableFunction: Sized + Send + Sync + 'static {
    /// The SQL name.
    const NAME: &'static str;
    /// The call as the docs and error messages show it.
    const SIGNATURE: &'static str;
    /// Needs every window row in memory, even for a large store (not only
    /// the blame sweeps, which read them bucket by bucket).
    const NEEDS_WINDOWS: bool = false;
    /// The result's columns.
    fn schema() -> SchemaRef;
    /// The call's parsed arguments.
    fn plan(args: &Args) -> Result<Self>;
    /// What the call costs in working memory, for the server's budget
    /// (`culprit_engine::budget`): a call over every victim is heavy, and
    /// so is one that loads every window row of a large store for itself
    /// ([`Self::NEEDS_WINDOWS`]).
    fn cost(&self) -> Cost {
        Cost::Small
    }
    /// The result. Blocking: runs on a blocking thread of the query's runtime.
    fn compute(&self, snapshot: &Snapshot) -> Result<Rows>;
    /// The victims, when the result explains only these queries, and
    /// whether it needs their slot holders' own blame: its snapshot then
    /// holds only what could have slowed them, read through the store's
    /// query index (`Engine::focused`).
    fn focus(&self) -> Option<Focus> {
        None
    }
    /// A call over every victim whose result is the union of its results
    /// over disjoint groups of victims (one row set per victim) returns its
    /// window: a large store is then explained group by group
    /// ([`Self::compute_group`]) in memory that follows the group, not the
    /// store.
    fn by_groups(&self) -> Option<(i64, i64)> {
        None
    }
    /// The victim of a call whose answer the store may hold
    /// (`culprit_engine::stored_question`), and the result of the stored
    /// rows ([`Self::from_stored`]); the call is computed when none is.
    fn stored(&self) -> Option<String> {
        None
    }
    /// The result of the stored answer `rows` of `victim`.
    fn from_stored(_victim: &str, _rows: &[StoredCulprit]) -> Result<Rows> {
        Err(to_datafusion(Error::Internal(format!(
            "{}(): has no stored answers",
            Self::NAME
        ))))
    }
    /// The result for the victims among `group` that ran in the window, on
    /// a snapshot holding what could have slowed them.
    fn compute_group(&self, _snapshot: &Snapshot, _group: &[String]) -> Result<Rows> {
        Err(to_datafusion(Error::Internal(format!(
            "{}(): cannot be computed by groups of victims",
            Self::NAME
        ))))
    }
}

/// The DataFusion table function of a [`TableFunction`].
pub struct Registered<F> {
    engine: Arc<Engine>,
    function: std::marker::PhantomData<fn() -> F>,
}

impl<F> Registered<F> {
    pub fn new(engine: Arc<Engine>) -> Self {
        Registered {
            engine,
            function: std::marker::PhantomData,
        }
    }
}

impl<F: TableFunction> fmt::Debug for Registered<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", F::SIGNATURE)
    }
}

impl<F: TableFunction> TableFunctionImpl for Registered<F> {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let function = Arc::new(F::plan(&Args::parse(F::NAME, &args)?)?);
        let mut table = ComputedTable::new(
            F::NAME,
            F::schema(),
            self.engine.clone(),
            F::NEEDS_WINDOWS,
            function.focus(),
            Arc::new({
                let function = function.clone();
                move |snapshot: &Snapshot| function.compute(snapshot)
            }),
        );
        table.cost = function.cost();
        table.stored = function.stored().map(|victim| Stored {
            victim,
            rows: Arc::new(|victim: &str, rows: &[StoredCulprit]| F::from_stored(victim, rows)),
        });
        table.by_groups = function.by_groups().map(|window| ByGroups {
            window,
            compute: Arc::new(move |snapshot: &Snapshot, group: &[String]| {
                function.compute_group(snapshot, group)
            }),
        });
        Ok(Arc::new(table))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use culprit_core::Table;
    use culprit_engine::{Budget, BudgetOptions};
    use culprit_store::Store;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::SessionContext;
    use futures::StreamExt;

    use super::*;

    /// A store of a generated workload of `tasks` tasks.
    async fn store_of(tasks: usize) -> Store {
        let w = culprit_sim::fast(&culprit_sim::FastConfig {
            tasks,
            hosts: 8,
            tasks_per_query: 1_000,
            windows_per_task: 1,
            ..Default::default()
        });
        let store = Store::open("memory://").unwrap();
        let mut batch = store.begin();
        for table in Table::ALL {
            if let Some(rows) = w.table(table) {
                batch
                    .write(table, std::slice::from_ref(rows))
                    .await
                    .unwrap();
            }
        }
        batch.commit().await.unwrap();
        store
    }

    /// Whether a heavy analysis is admitted within `wait`.
    async fn heavy_admitted(budget: &Budget, wait: Duration) -> bool {
        tokio::time::timeout(wait, budget.admit("a probe", 0, true))
            .await
            .is_ok_and(|a| a.is_ok())
    }

    /// A statement cancelled (or timed out) while its computation runs
    /// drops its wait, not the computation: a blocking thread runs on to
    /// its end. Its heavy slot and working memory must stay counted until
    /// then, or the budget admits new analyses beside memory still in use.
    /// The computation here blocks until the test lets it go, so each step
    /// is certain: both ways a call over every victim is computed (at
    /// once, and by groups of victims on a store larger than the window
    /// cache, cancelled in its second group: the admission is carried from
    /// group to group).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_call_holds_its_slot_and_memory_until_its_computation_ends() {
        for by_groups in [false, true] {
            // Two groups of victims at least, by groups.
            let tasks = if by_groups {
                2 * culprit_engine::GROUP_TASKS as usize + 8_000
            } else {
                2_000
            };
            let store = store_of(tasks).await;
            let budget = Budget::new(BudgetOptions {
                limit: Some(1 << 30),
                heavy_slots: 1,
                heavy_queue: None,
                read_cache: Some(0),
            });
            let rows = if by_groups { 0 } else { u64::MAX };
            let engine = Arc::new(
                Engine::with_budget(store.clone(), budget.clone()).with_window_cache_rows(rows),
            );
            let groups = engine
                .victim_groups((i64::MIN, i64::MAX), culprit_engine::GROUP_TASKS)
                .await
                .unwrap();
            assert_eq!(groups.is_some(), by_groups, "not the path meant");
            if let Some(groups) = &groups {
                assert!(groups.groups.len() >= 2, "{} groups", groups.groups.len());
            }
            let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
            // The computation says it started, then waits to be let go.
            let (started, on_start) = mpsc::channel::<()>();
            let (let_go, go) = mpsc::channel::<()>();
            let go = Arc::new(Mutex::new(go));
            let empty = RecordBatch::new_empty(schema.clone());
            let run = {
                let (go, empty) = (go.clone(), empty.clone());
                move || {
                    started.send(()).unwrap();
                    let _ = go.lock().unwrap().recv_timeout(Duration::from_secs(60));
                    Ok(Rows::one(empty.clone()))
                }
            };
            let run = Arc::new(run);
            let compute: Compute = {
                let run = run.clone();
                Arc::new(move |_: &Snapshot| run())
            };
            let mut table = ComputedTable::new("probe", schema, engine, false, None, compute);
            table.cost = Cost::AllVictims;
            if by_groups {
                table.by_groups = Some(ByGroups {
                    window: (i64::MIN, i64::MAX),
                    compute: Arc::new(move |_: &Snapshot, _: &[String]| run()),
                });
            }
            let table = Arc::new(table);
            let idle = budget.used();
            let statement = tokio::spawn({
                let table = table.clone();
                async move {
                    let ctx = SessionContext::new();
                    let plan = table.scan(&ctx.state(), None, &[], None).await?;
                    let mut rows = plan.execute(0, ctx.task_ctx())?;
                    while let Some(b) = rows.next().await {
                        b?;
                    }
                    Ok::<_, DataFusionError>(())
                }
            });
            // By groups, the first group's computation is let go, and the
            // statement is cancelled in the second.
            let on_start = Arc::new(Mutex::new(on_start));
            let started_again = || {
                let on_start = on_start.clone();
                tokio::task::spawn_blocking(move || {
                    let on_start = on_start.lock().unwrap();
                    on_start.recv_timeout(Duration::from_secs(60)).is_ok()
                })
            };
            assert!(
                started_again().await.unwrap(),
                "by groups {by_groups}: never started"
            );
            if by_groups {
                let_go.send(()).unwrap();
                assert!(
                    started_again().await.unwrap(),
                    "the second group never started"
                );
            }
            let running = budget.used();
            assert!(
                !heavy_admitted(&budget, Duration::from_millis(100)).await,
                "by groups {by_groups}: a second heavy analysis got the only slot"
            );
            // The statement is cancelled: its future is dropped.
            statement.abort();
            assert!(statement.await.unwrap_err().is_cancelled());
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(
                !heavy_admitted(&budget, Duration::from_millis(300)).await,
                "by groups {by_groups}: the slot was given back while the computation ran"
            );
            assert_eq!(
                budget.used(),
                running,
                "by groups {by_groups}: memory given back while the computation ran \
                 ({idle} bytes idle)"
            );
            // The computation ends: then, and only then, both come back.
            let_go.send(()).unwrap();
            assert!(
                heavy_admitted(&budget, Duration::from_secs(30)).await,
                "by groups {by_groups}: the slot never came back"
            );
            // (What stays is the engine's dataset cache, if it loaded one.)
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while budget.used() >= running && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(
                budget.used() < running,
                "by groups {by_groups}: the working memory never came back \
                 ({idle} bytes idle, {running} running)"
            );
            drop(table);
        }
    }
}
