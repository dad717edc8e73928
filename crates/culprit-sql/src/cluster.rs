//! The same SQL on several machines (issue #19), on the distributed
//! DataFusion engine `datafusion-distributed` (4.x, DataFusion 55).
//!
//! A [`Cluster`] in a session's configuration (`session_with`) makes the
//! session a coordinator: its plans pass through the engine's distributed
//! planner, which cuts them into stages at their repartitions and sends the
//! stages' tasks to the workers (gRPC, Arrow Flight), and the session runs
//! the head stage. Without one nothing changes: the session plans and runs
//! everything itself, exactly as before.
//!
//! A worker ([`serve_worker`], `culprit worker`) is the engine's worker
//! service over the same store: its sessions read the store's files through
//! the same confined, read-only object store as a coordinator's
//! (`sandbox.rs`), so a shipped Parquet scan reads the same bytes.
//!
//! Between them: the cluster's [`Secret`] in every plan's metadata, and
//! TLS ([`Cluster::with_tls`], [`WorkerTls`]) when the workers have
//! certificates; the engine's default channels speak plain HTTP/2, so TLS
//! channels are made here ([`TlsChannels`]).
//!
//! A worker that cannot be reached, or that fails while it streams, makes
//! the query fail with a [`WorkerUnavailable`] naming it (the engine's own
//! words are kept in the message): never a partial answer. It is left out
//! of the next plans for [`RETRY_AFTER`], then tried again, so a worker that
//! comes back is used again, and the others keep serving meanwhile.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::source_as_provider;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion_distributed::{
    grpc::DefaultChannelResolver, ChannelResolver, CoordinatorToWorkerMsg, DistributedExt,
    ExecuteTaskRequest, GetWorkerInfoRequest, GetWorkerInfoResponse, SessionStateBuilderExt,
    SetPlanRequest, Worker, WorkerChannel, WorkerQueryContext, WorkerResolver,
    WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tonic::codegen::http::HeaderMap;
use url::Url;

use culprit_store::Store;

/// How long a worker that failed is left out of new plans before it is
/// tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The engine's default: a Parquet scan gets one task per 16 MiB it reads.
pub const DEFAULT_BYTES_PER_TASK: usize = 16 * 1024 * 1024;

/// The workers a coordinator sends tasks to. Shared by every session of a
/// server (a worker that failed is left out for all of them).
#[derive(Clone)]
pub struct Cluster {
    workers: Arc<Workers>,
    bytes_per_task: usize,
    /// The CA the workers' certificates are checked against (TLS).
    ca: Option<Vec<u8>>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("workers", &self.workers.urls)
            .field("bytes_per_task", &self.bytes_per_task)
            .finish()
    }
}

struct Workers {
    urls: Vec<Url>,
    /// When each worker last failed (same order as `urls`).
    failed: Mutex<Vec<Option<Instant>>>,
    channels: DefaultChannelResolver,
    /// The cluster's shared secret, sent with every plan ([`SECRET_HEADER`]).
    secret: Option<Secret>,
    /// TLS to the workers (`https://` URLs), when configured.
    tls: Option<TlsChannels>,
}

/// Connections to workers over TLS, checked against a CA certificate (the
/// engine's default resolver speaks plain HTTP/2 only); one channel per
/// worker, kept for the next plans (a tonic channel reconnects by itself).
struct TlsChannels {
    config: tonic::transport::ClientTlsConfig,
    cache: Mutex<std::collections::HashMap<Url, tonic::transport::Channel>>,
}

impl TlsChannels {
    fn new(ca_pem: &[u8]) -> TlsChannels {
        TlsChannels {
            config: tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem)),
            cache: Mutex::new(Default::default()),
        }
    }

    async fn client(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let cached = self.cache.lock().expect("cache").get(url).cloned();
        let channel = match cached {
            Some(c) => c,
            None => {
                let err = |e: tonic::transport::Error| DataFusionError::External(Box::new(e));
                let channel = tonic::transport::Endpoint::from_shared(url.to_string())
                    .map_err(err)?
                    .tls_config(self.config.clone())
                    .map_err(err)?
                    .connect()
                    .await
                    .map_err(err)?;
                self.cache
                    .lock()
                    .expect("cache")
                    .insert(url.clone(), channel.clone());
                channel
            }
        };
        Ok(datafusion_distributed::grpc::create_worker_client(
            datafusion_distributed::grpc::BoxCloneSyncChannel::new(channel),
        ))
    }
}

/// A worker's TLS: its certificate and key (PEM), and the CA (PEM) its
/// connections to other workers are checked against.
#[derive(Clone)]
pub struct WorkerTls {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub ca: Vec<u8>,
}

impl Workers {
    fn new(urls: Vec<Url>, secret: Option<Secret>, ca: Option<&[u8]>) -> Workers {
        let n = urls.len();
        Workers {
            urls,
            failed: Mutex::new(vec![None; n]),
            channels: DefaultChannelResolver::default(),
            secret,
            tls: ca.map(TlsChannels::new),
        }
    }
}

/// What a worker says when a plan does not present its secret.
const REFUSED: &str = "refused a plan that does not present this cluster's secret";

/// The gRPC metadata a coordinator (or a worker reading another's shuffle)
/// presents the cluster's secret in.
pub const SECRET_HEADER: &str = "x-culprit-cluster-secret";

/// A cluster's shared secret (`--cluster-secret-file`): every plan sent to
/// a worker carries it, and a worker started with one refuses a plan
/// without it. Not printed by `Debug`.
#[derive(Clone)]
pub struct Secret(tonic::codegen::http::HeaderValue);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// The secret in `text` (a file's contents, surrounding white space
    /// dropped): at least 16 characters, printable ASCII without spaces.
    pub fn parse(text: &str) -> std::result::Result<Secret, String> {
        let t = text.trim();
        if t.len() < 16 {
            return Err(format!(
                "the cluster secret must have at least 16 characters, it has {}",
                t.len()
            ));
        }
        if !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "the cluster secret must be printable ASCII without spaces (e.g. `openssl rand -hex 32`)"
                    .into(),
            );
        }
        tonic::codegen::http::HeaderValue::from_str(t)
            .map(|mut v| {
                v.set_sensitive(true);
                Secret(v)
            })
            .map_err(|e| format!("the cluster secret: {e}"))
    }

    /// Whether `headers` present this secret (compared in constant time).
    fn presented_in(&self, headers: &HeaderMap) -> bool {
        let want = self.0.as_bytes();
        headers.get(SECRET_HEADER).is_some_and(|got| {
            let got = got.as_bytes();
            got.len() == want.len()
                && got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
        })
    }

    fn add_to(secret: &Option<Secret>, headers: &mut HeaderMap) {
        if let Some(s) = secret {
            headers.insert(SECRET_HEADER, s.0.clone());
        }
    }
}

impl Cluster {
    /// A cluster of these workers (at least one), splitting Parquet scans
    /// into one task per `bytes_per_task` read.
    pub fn new(urls: Vec<Url>, bytes_per_task: usize) -> Result<Cluster> {
        if urls.is_empty() {
            return Err(DataFusionError::Configuration(
                "a cluster needs at least one worker".into(),
            ));
        }
        Ok(Cluster {
            workers: Arc::new(Workers::new(urls, None, None)),
            bytes_per_task: bytes_per_task.max(1),
            ca: None,
        })
    }

    /// The same cluster, presenting `secret` to its workers.
    pub fn with_secret(self, secret: Secret) -> Cluster {
        let urls = self.workers.urls.clone();
        Cluster {
            workers: Arc::new(Workers::new(urls, Some(secret), self.ca.as_deref())),
            ..self
        }
    }

    /// The same cluster, reaching its workers over TLS, their certificates
    /// checked against `ca_pem` (PEM); see [`Cluster::check_schemes`].
    pub fn with_tls(self, ca_pem: Vec<u8>) -> Result<Cluster> {
        if !ca_pem.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(DataFusionError::Configuration(
                "the workers' CA is not a PEM certificate".into(),
            ));
        }
        let urls = self.workers.urls.clone();
        let secret = self.workers.secret.clone();
        Ok(Cluster {
            workers: Arc::new(Workers::new(urls, secret, Some(&ca_pem))),
            ca: Some(ca_pem),
            ..self
        })
    }

    /// Checks that the workers' URLs and the TLS configuration agree:
    /// `https://` workers with a CA, `http://` ones without.
    pub fn check_schemes(&self) -> Result<()> {
        let tls = self.ca.is_some();
        for u in &self.workers.urls {
            match (u.scheme(), tls) {
                ("https", false) => {
                    return Err(DataFusionError::Configuration(format!(
                    "worker {u}: an https:// worker needs the CA of its certificate (--worker-ca)"
                )))
                }
                ("http", true) => {
                    return Err(DataFusionError::Configuration(format!(
                    "worker {u}: with --worker-ca the workers are reached over TLS: write https://"
                )))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The workers' URLs.
    pub fn urls(&self) -> &[Url] {
        &self.workers.urls
    }

    /// How many workers new plans may use now: those not failed in the
    /// last [`RETRY_AFTER`] (all of them if every one did).
    pub fn workers_up(&self) -> usize {
        Resolver(self.workers.clone())
            .get_urls()
            .map_or(self.workers.urls.len(), |u| u.len())
    }

    /// Makes a session being built a coordinator of this cluster.
    pub(crate) fn coordinate(
        &self,
        mut builder: SessionStateBuilder,
    ) -> Result<SessionStateBuilder> {
        // A scan of more than a task's bytes is split into partitions even
        // when its files are small (DataFusion's own threshold is 10 MiB):
        // the planner cuts stages where partitions meet.
        if let Some(config) = builder.config().as_mut() {
            config.options_mut().optimizer.repartition_file_min_size = self.bytes_per_task;
        }
        let mut builder = builder
            .with_distributed_worker_resolver(Resolver(self.workers.clone()))
            .with_distributed_channel_resolver(Channels(self.workers.clone()))
            .with_distributed_planner()
            .with_distributed_file_scan_config_bytes_per_partition(self.bytes_per_task)?;
        let distributed = builder.query_planner().take().ok_or_else(|| {
            DataFusionError::Internal("the distributed planner is not set".into())
        })?;
        Ok(builder.with_query_planner(Arc::new(Planner { distributed })))
    }
}

/// The coordinator's planner: a statement that calls one of culprit's
/// analyses (a table function: its rows are computed when it is planned,
/// in this process, and streamed from a node the engine cannot ship) is
/// planned and run here, as without workers; any other goes through the
/// engine's distributed planner.
#[derive(Debug)]
struct Planner {
    distributed: Arc<dyn QueryPlanner + Send + Sync>,
}

#[async_trait]
impl QueryPlanner for Planner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if calls_analysis(logical_plan)? {
            DefaultPhysicalPlanner::default()
                .create_physical_plan(logical_plan, session)
                .await
        } else {
            self.distributed
                .create_physical_plan(logical_plan, session)
                .await
        }
    }
}

/// Whether the plan (its subqueries included) scans a culprit table
/// function's result.
fn calls_analysis(plan: &LogicalPlan) -> Result<bool> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            if let Ok(provider) = source_as_provider(&scan.source) {
                if provider.is::<crate::functions::ComputedTable>() {
                    found = true;
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// Parses worker addresses: `host:port` or `http://host:port`, separated by
/// commas, spaces or new lines; `#` starts a comment (a workers file).
pub fn parse_workers(list: &str) -> std::result::Result<Vec<Url>, String> {
    let mut urls = Vec::new();
    for line in list.lines() {
        let line = line.split('#').next().unwrap_or("");
        for item in line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
        {
            let text = if item.contains("://") {
                item.to_string()
            } else {
                format!("http://{item}")
            };
            let url = Url::parse(&text).map_err(|e| format!("worker '{item}': {e}"))?;
            if url.scheme() != "http" && url.scheme() != "https" {
                return Err(format!("worker '{item}': the scheme must be http or https"));
            }
            if url.host_str().is_none() || url.port_or_known_default().is_none() {
                return Err(format!("worker '{item}': needs a host and a port"));
            }
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
    }
    Ok(urls)
}

/// The workers new plans may use: all but those that failed in the last
/// [`RETRY_AFTER`] (all of them if every one did: the query then fails
/// naming one, rather than running without workers).
struct Resolver(Arc<Workers>);

impl WorkerResolver for Resolver {
    fn get_urls(&self) -> Result<Vec<Url>> {
        let failed = self.0.failed.lock().expect("failed");
        let up: Vec<Url> = self
            .0
            .urls
            .iter()
            .zip(failed.iter())
            .filter(|(_, f)| f.is_none_or(|t| t.elapsed() >= RETRY_AFTER))
            .map(|(u, _)| u.clone())
            .collect();
        Ok(if up.is_empty() {
            self.0.urls.clone()
        } else {
            up
        })
    }
}

impl Workers {
    fn mark_failed(&self, url: &Url) {
        if let Some(i) = self.urls.iter().position(|u| u == url) {
            self.failed.lock().expect("failed")[i] = Some(Instant::now());
        }
    }

    fn mark_up(&self, url: &Url) {
        if let Some(i) = self.urls.iter().position(|u| u == url) {
            self.failed.lock().expect("failed")[i] = None;
        }
    }
}

/// A worker could not be reached, or its stream broke off: the query fails
/// with this, never with part of its rows.
#[derive(Debug)]
pub struct WorkerUnavailable {
    pub url: String,
    pub detail: String,
}

impl fmt::Display for WorkerUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "culprit worker {} failed or is unreachable, the query is abandoned (no partial result): {}",
            self.url, self.detail
        )
    }
}

impl std::error::Error for WorkerUnavailable {}

/// The words [`WorkerUnavailable`]'s message starts with, up to the URL.
const UNAVAILABLE_PREFIX: &str = "culprit worker ";
const UNAVAILABLE_INFIX: &str = " failed or is unreachable";

impl WorkerUnavailable {
    /// A worker's failure seen by another worker (a shuffle reads the tasks
    /// of other workers) comes back to the coordinator through the engine's
    /// error encoding, which keeps the message and not the type: typed
    /// again here, at the one place errors come back from workers.
    fn from_message(m: &str) -> Option<WorkerUnavailable> {
        let start = m.find(UNAVAILABLE_PREFIX)?;
        let rest = &m[start + UNAVAILABLE_PREFIX.len()..];
        let end = rest.find(UNAVAILABLE_INFIX)?;
        let url = &rest[..end];
        (!url.contains(char::is_whitespace)).then(|| WorkerUnavailable {
            url: url.to_string(),
            detail: m.to_string(),
        })
    }
}

/// Whether an error of the engine's client is the worker's connection
/// failing (and not an error the worker's own execution sent back, which
/// keeps its type: a full memory pool is still 53200).
fn is_transport(e: &DataFusionError) -> bool {
    let root = e.find_root();
    match root {
        DataFusionError::External(inner) => {
            inner.is::<tonic::Status>() || inner.is::<tonic::transport::Error>()
        }
        DataFusionError::Execution(m) => {
            m.contains("Distributed DataFusion worker")
                || m.contains("Distributed DataFusion channel")
        }
        _ => false,
    }
}

fn named(workers: &Workers, url: &Url, e: DataFusionError) -> DataFusionError {
    if let DataFusionError::External(inner) = e.find_root() {
        if inner.is::<WorkerUnavailable>() {
            return e;
        }
    }
    if e.find_root().message().contains(REFUSED) {
        // A worker that wants the cluster's secret: a configuration to
        // fix, named like a worker that cannot be used (58000).
        log::warn!("worker {url} refused the plan: {e}");
        return DataFusionError::External(Box::new(WorkerUnavailable {
            url: url.to_string(),
            detail: e.to_string(),
        }));
    }
    if !is_transport(&e) {
        // Another worker's failure, reported by this one.
        if let Some(other) = WorkerUnavailable::from_message(&e.find_root().message()) {
            if let Ok(failed) = Url::parse(&other.url) {
                workers.mark_failed(&failed);
            }
            log::warn!("worker {url} reports: {}", other.detail);
            return DataFusionError::External(Box::new(other));
        }
        // The store version planned at was removed before the worker read
        // it: still the store's error (72000), not an I/O error.
        if let Some(gone) = culprit_store::StoreError::manifest_gone_in(&e.find_root().message()) {
            log::warn!("worker {url}: {gone}");
            return DataFusionError::External(Box::new(crate::error::Error::Store(gone)));
        }
        // The worker's memory budget or pool was full: still 53200, saying
        // which worker (its `--memory-budget-mb`), not this server's.
        if let DataFusionError::ResourcesExhausted(m) = e.find_root() {
            if !m.starts_with("worker ") {
                return DataFusionError::ResourcesExhausted(format!("worker {url}: {m}"));
            }
        }
        return e;
    }
    workers.mark_failed(url);
    log::warn!("worker {url} failed: {e}");
    DataFusionError::External(Box::new(WorkerUnavailable {
        url: url.to_string(),
        detail: e.to_string(),
    }))
}

/// Opens the engine's gRPC clients (one cached channel per worker), naming
/// the worker in every connection error.
#[derive(Clone)]
struct Channels(Arc<Workers>);

#[async_trait]
impl ChannelResolver for Channels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let client = match &self.0.tls {
            Some(tls) => tls.client(url).await,
            None => self.0.channels.get_worker_client_for_url(url).await,
        };
        match client {
            Ok(inner) => Ok(Box::new(Named {
                inner,
                url: url.clone(),
                workers: self.0.clone(),
            })),
            Err(e) => {
                self.0.mark_failed(url);
                // The whole chain: a TLS failure says why only in a source.
                let detail = causes(&e);
                log::warn!("worker {url} unreachable: {detail}");
                Err(DataFusionError::External(Box::new(WorkerUnavailable {
                    url: url.to_string(),
                    detail,
                })))
            }
        }
    }
}

/// An error and its sources, joined by ": " (each once).
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

/// One worker's client, its errors named.
struct Named {
    inner: Box<dyn WorkerChannel>,
    url: Url,
    workers: Arc<Workers>,
}

#[async_trait]
impl WorkerChannel for Named {
    async fn coordinator_channel(
        &mut self,
        mut headers: HeaderMap,
        set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        Secret::add_to(&self.workers.secret, &mut headers);
        let (url, workers) = (self.url.clone(), self.workers.clone());
        let stream = self
            .inner
            .coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx)
            .await
            .map_err(|e| named(&workers, &url, e))?;
        self.workers.mark_up(&self.url);
        Ok(stream.map_err(move |e| named(&workers, &url, e)).boxed())
    }

    async fn execute_task(
        &mut self,
        mut headers: HeaderMap,
        request: ExecuteTaskRequest,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch>>>> {
        Secret::add_to(&self.workers.secret, &mut headers);
        let streams = self
            .inner
            .execute_task(headers, request, metrics, task_ctx)
            .await
            .map_err(|e| named(&self.workers, &self.url, e))?;
        Ok(streams
            .into_iter()
            .map(|s| {
                let (url, workers) = (self.url.clone(), self.workers.clone());
                s.map_err(move |e| named(&workers, &url, e)).boxed()
            })
            .collect())
    }

    async fn get_worker_info(
        &mut self,
        request: GetWorkerInfoRequest,
    ) -> Result<GetWorkerInfoResponse> {
        self.inner
            .get_worker_info(request)
            .await
            .map_err(|e| named(&self.workers, &self.url, e))
    }
}

/// The engine's worker over `store`: its sessions read the store through
/// the same confined, read-only object store as a coordinator's. With a
/// `secret`, a plan that does not present it is refused, and the worker
/// presents it to the other workers it reads. Its memory `budget` counts
/// the memory of every plan part it runs (past it, 53200) and its
/// snapshot of the store, and admits each sweep of an analysis's share.
pub fn worker(
    store: &Store,
    secret: Option<Secret>,
    ca: Option<&[u8]>,
    budget: culprit_engine::Budget,
) -> Result<Worker> {
    let runtime: Arc<RuntimeEnv> = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(crate::sandbox::StoreOnlyRegistry::new(store)))
        .with_memory_pool(Arc::new(crate::budget_pool::BudgetPool::new(
            budget.clone(),
            None,
        )))
        .build_arc()?;
    let workers = Arc::new(Workers::new(Vec::new(), secret.clone(), ca));
    // The engine the worker sweeps analyses' shares with (`shards.rs`):
    // its snapshot of a store version is kept for the next share.
    let engine = Arc::new(crate::shards::WorkerEngine(Arc::new(
        culprit_engine::Engine::with_budget(store.clone(), budget),
    )));
    Ok(
        Worker::from_session_builder(move |ctx: WorkerQueryContext| {
            let workers = workers.clone();
            let engine = engine.clone();
            let secret = secret.clone();
            async move {
                if let Some(secret) = &secret {
                    if !secret.presented_in(&ctx.headers) {
                        log::warn!("refused a plan without this cluster's secret");
                        return Err(DataFusionError::Execution(format!(
                            "culprit worker: {REFUSED} (--cluster-secret-file)"
                        )));
                    }
                }
                let mut builder = ctx
                    .builder
                    // Shuffles read other workers: their errors named too.
                    .with_distributed_channel_resolver(Channels(workers))
                    // The plan node of an analysis's share.
                    .with_distributed_user_codec(crate::shards::SweepCodec);
                match builder.config().as_mut() {
                    Some(config) => config.set_extension(engine),
                    None => {
                        *builder.config() =
                            Some(datafusion::prelude::SessionConfig::new().with_extension(engine))
                    }
                }
                // culprit's scalar and aggregate functions, which a shipped
                // stage may call.
                builder
                    .scalar_functions()
                    .get_or_insert_default()
                    .extend(crate::functions::scalar_udfs().into_iter().map(Arc::new));
                builder
                    .aggregate_functions()
                    .get_or_insert_default()
                    .extend(crate::functions::aggregate_udfs().into_iter().map(Arc::new));
                Ok(builder.build())
            }
        })
        .with_runtime_env(runtime),
    )
}

/// Serves the worker on `listener` until `shutdown` completes.
pub async fn serve_worker(
    store: &Store,
    secret: Option<Secret>,
    tls: Option<WorkerTls>,
    budget: culprit_engine::Budget,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let worker = worker(store, secret, tls.as_ref().map(|t| t.ca.as_slice()), budget)?;
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let accepted = listener
            .accept()
            .await
            .map(|(socket, _peer): (_, SocketAddr)| {
                let _ = socket.set_nodelay(true);
                socket
            });
        Some((accepted, listener))
    });
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = &tls {
        server = server.tls_config(
            tonic::transport::ServerTlsConfig::new()
                .identity(tonic::transport::Identity::from_pem(&tls.cert, &tls.key)),
        )?;
    }
    server
        .add_service(worker.into_worker_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_checked_whole_and_never_printed() {
        assert!(Secret::parse("short").is_err());
        assert!(Secret::parse("sixteen chars  with spaces").is_err());
        assert!(Secret::parse("caf\u{e9}0123456789abcdef").is_err());
        let s = Secret::parse("  0123456789abcdef0123\n").unwrap();
        assert_eq!(format!("{s:?}"), "Secret(..)");
        let mut h = HeaderMap::new();
        assert!(!s.presented_in(&h));
        h.insert(SECRET_HEADER, "0123456789abcdef012".parse().unwrap());
        assert!(!s.presented_in(&h));
        h.insert(SECRET_HEADER, "0123456789abcdef0124".parse().unwrap());
        assert!(!s.presented_in(&h));
        Secret::add_to(&Some(s.clone()), &mut h);
        assert!(s.presented_in(&h));
    }

    #[test]
    fn workers_are_parsed() {
        let urls = parse_workers("127.0.0.1:7001, http://h2:7002\n# a comment\nh3:7003 # third\n")
            .unwrap();
        let urls: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
        assert_eq!(
            urls,
            [
                "http://127.0.0.1:7001/",
                "http://h2:7002/",
                "http://h3:7003/"
            ]
        );
        assert!(parse_workers("ftp://h:1").is_err());
        assert!(parse_workers("http://").is_err());
        assert_eq!(parse_workers("a:1,a:1").unwrap().len(), 1);
    }

    #[test]
    fn a_failure_reported_by_another_worker_is_typed_again() {
        let first = WorkerUnavailable {
            url: "http://10.0.0.7:5434/".into(),
            detail: "tcp connect error".into(),
        };
        let seen = format!("Execution error: {first}");
        let again = WorkerUnavailable::from_message(&seen).unwrap();
        assert_eq!(again.url, "http://10.0.0.7:5434/");
        assert!(WorkerUnavailable::from_message("culprit workers are nice").is_none());
    }

    #[test]
    fn a_removed_version_a_worker_reports_is_the_stores_error_again() {
        // As the worker's error arrives: its text only.
        let cluster = Cluster::new(parse_workers("a:1").unwrap(), 1).unwrap();
        let url = Url::parse("http://a:1/").unwrap();
        let gone = culprit_store::StoreError::ManifestGone {
            version: 7,
            grace_secs: 900,
        };
        let sent = DataFusionError::Execution(format!("External error: {gone}"));
        let got = named(&cluster.workers, &url, sent);
        let DataFusionError::External(inner) = &got else {
            panic!("{got:?}");
        };
        assert!(
            matches!(
                inner.downcast_ref::<crate::error::Error>(),
                Some(crate::error::Error::Store(
                    culprit_store::StoreError::ManifestGone { version: 7, .. }
                ))
            ),
            "{got:?}"
        );
    }

    #[test]
    fn a_failed_worker_is_left_out_then_tried_again() {
        let cluster = Cluster::new(parse_workers("a:1,b:2").unwrap(), 1).unwrap();
        let resolver = Resolver(cluster.workers.clone());
        assert_eq!(resolver.get_urls().unwrap().len(), 2);
        cluster.workers.mark_failed(&cluster.urls()[0]);
        assert_eq!(
            resolver.get_urls().unwrap(),
            vec![cluster.urls()[1].clone()]
        );
        // Every worker failed: all are offered (the query fails naming one).
        cluster.workers.mark_failed(&cluster.urls()[1]);
        assert_eq!(resolver.get_urls().unwrap().len(), 2);
        cluster.workers.failed.lock().unwrap()[0] =
            Some(Instant::now() - RETRY_AFTER - Duration::from_millis(1));
        assert_eq!(
            resolver.get_urls().unwrap(),
            vec![cluster.urls()[0].clone()]
        );
        cluster.workers.mark_up(&cluster.urls()[1]);
        assert_eq!(resolver.get_urls().unwrap().len(), 2);
    }
}
