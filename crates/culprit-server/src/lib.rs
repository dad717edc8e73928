//! The PostgreSQL-wire server: pgwire through `datafusion-postgres`, over
//! culprit SQL sessions (one per connection, sharing the dataset cache),
//! with pg_catalog for psql and BI tools, SCRAM-SHA-256 authentication, TLS,
//! read-only roles, limits, and errors mapped once to SQLSTATEs.

pub mod auth;
mod cancel;
mod catalog;
mod compat;
mod copy;
mod cursors;
mod guard;
mod handlers;
mod hooks;
mod oid_types;
mod parameters;
mod pipeline;
mod policy;
mod privileges;
pub use policy::Gate;
mod protocol;
pub mod reports;
mod rewrite;
mod sessions;
pub mod sqlstate;
mod startup;
pub mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use culprit_store::Store;
use datafusion::prelude::SessionContext;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::setup_pg_catalog;
use pgwire::api::ConnectionManager;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use auth::{Role, Users};
pub use handlers::CulpritHandlers;

/// Adds what PostgreSQL clients look for (pg_catalog, `current_schema()`,
/// ...) to a culprit session. The session's default catalog must be
/// `datafusion`.
pub fn prepare_session(
    ctx: &SessionContext,
    sessions: &sessions::Sessions,
    users: Option<&Users>,
) -> std::io::Result<()> {
    // Roles are culprit's (`catalog.rs` lists them in `pg_roles`), not the
    // pg_catalog crate's context provider's. Not `Arc<AuthManager>`: the
    // catalog's provider for an `Arc` calls itself forever, and a read of
    // pg_roles overflowed the stack and aborted the server
    // (tests/e2e/bi_tools.rs).
    setup_pg_catalog(ctx, "datafusion", EmptyContextProvider)
        .map_err(|e| std::io::Error::other(format!("cannot set up pg_catalog: {e}")))?;
    compat::register(ctx);
    // After compat's: culprit's functions in pg_proc, and their signatures.
    catalog::register(ctx, sessions, privileges::roles(users))
        .map_err(|e| std::io::Error::other(format!("cannot set up pg_proc: {e}")))?;
    Ok(())
}

/// TLS: a certificate chain and its private key, PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How a server runs. `Default`: no authentication (loopback only), no
/// TLS, 100 connections, no statement timeout, no per-query memory limit, a
/// memory budget of half the machine's memory (`budget.rs` of the engine),
/// no background compaction.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Password authentication (SCRAM-SHA-256) against these users.
    pub users: Option<Users>,
    pub tls: Option<TlsFiles>,
    /// Refuse connections without TLS.
    pub tls_required: bool,
    pub max_connections: usize,
    /// Default statement timeout (a client's `SET statement_timeout` wins).
    pub statement_timeout: Option<Duration>,
    /// Memory pool of each connection's session, bytes (one statement runs
    /// at a time on a connection, so this bounds a query).
    pub query_memory: Option<usize>,
    /// Scheduled reports (`cron.schedule`): timeout and retention.
    pub reports: reports::ReportOptions,
    /// The server's one memory budget and the admission of heavy analyses
    /// (`culprit_engine::budget`).
    pub budget: culprit_engine::BudgetOptions,
    /// Background compaction (`culprit_store::AutoCompact`); `None`: off.
    pub auto_compact: Option<culprit_store::AutoCompact>,
    /// The slot holders' shares stored in the background once the
    /// telemetry has not changed for this long
    /// (`culprit_engine::Engine::store_shares_when_quiet`); `None`: off.
    pub shares_after: Option<std::time::Duration>,
    /// Workers of the distributed engine (`culprit worker`): the sessions
    /// become their coordinator (`culprit_sql::cluster`). `None`: every
    /// query runs in this process.
    pub cluster: Option<culprit_sql::Cluster>,
    /// Window rows kept in memory with a store's dataset, at most
    /// (`culprit_engine::WINDOW_CACHE_ROWS`); above, analyses read them
    /// host bucket by host bucket, on the workers when there are any.
    pub window_cache_rows: u64,
}

/// `culprit serve`'s default for [`ServerOptions::shares_after`]: the
/// shares are stored once the telemetry has not changed for a minute.
pub const DEFAULT_SHARES_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            users: None,
            tls: None,
            tls_required: false,
            max_connections: 100,
            statement_timeout: None,
            query_memory: None,
            reports: reports::ReportOptions::default(),
            budget: culprit_engine::BudgetOptions {
                limit: Some(culprit_engine::budget::default_limit()),
                ..Default::default()
            },
            auto_compact: None,
            shares_after: None,
            cluster: None,
            window_cache_rows: culprit_engine::WINDOW_CACHE_ROWS,
        }
    }
}

fn io_err(msg: String) -> std::io::Error {
    std::io::Error::other(msg)
}

fn load_tls(files: &TlsFiles) -> std::io::Result<pgwire::tokio::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| io_err(format!("{}: {e}", files.cert.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| io_err(format!("{}: {e}", files.cert.display())))?;
    if certs.is_empty() {
        return Err(io_err(format!("{}: no certificate", files.cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| io_err(format!("{}: {e}", files.key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io_err(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| io_err(format!("TLS certificate and key: {e}")))?;
    Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(config)))
}

/// A server bound to its address, not yet accepting.
pub struct Server {
    listener: TcpListener,
    store: Store,
    engine: Arc<culprit_sql::Engine>,
    shared: Arc<handlers::Shared>,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    slots: Arc<Semaphore>,
    query_memory: Option<usize>,
    reports: reports::ReportOptions,
    auto_compact: Option<culprit_store::AutoCompact>,
    shares_after: Option<std::time::Duration>,
    cluster: Option<culprit_sql::Cluster>,
}

impl Server {
    /// Binds `listen` (e.g. `127.0.0.1:5433`, or port 0 for any free port)
    /// with the default options.
    pub async fn bind(store: Store, listen: &str) -> std::io::Result<Server> {
        Server::bind_with(store, listen, ServerOptions::default()).await
    }

    /// Binds `listen`. Without users, only a loopback address is accepted:
    /// anyone who can reach the port could read everything.
    pub async fn bind_with(
        store: Store,
        listen: &str,
        opts: ServerOptions,
    ) -> std::io::Result<Server> {
        if opts.tls_required && opts.tls.is_none() {
            return Err(io_err(
                "--tls-required needs a certificate and key (--tls-cert, --tls-key)".into(),
            ));
        }
        let tls = opts.tls.as_ref().map(load_tls).transpose()?;
        let listener = TcpListener::bind(listen).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}"))
        })?;
        let addr = listener.local_addr()?;
        if opts.users.is_none() && !addr.ip().is_loopback() {
            return Err(io_err(format!(
                "refusing to listen on {addr} without authentication: anyone who reaches \
                 this address could read all telemetry. Give --users FILE (culprit user add \
                 writes it), or listen on 127.0.0.1"
            )));
        }
        // One session up front: a broken store or catalog fails here, not
        // at the first client.
        let budget = culprit_engine::Budget::new(opts.budget.clone());
        if let Some(limit) = budget.limit() {
            log::info!(
                "memory budget {} MiB, {} heavy analyses at once, {} waiting at most, \
                 read cache {} MiB, slot holders' shares {} MiB",
                limit >> 20,
                opts.budget.heavy_slots.max(1),
                opts.budget.heavy_queue.unwrap_or(opts.max_connections),
                budget.read_cache() >> 20,
                culprit_engine::HOLDER_SHARES_BYTES.min(budget.read_cache()) >> 20
            );
        }
        // The background compaction's merges take their memory from the
        // same budget, as heavy analyses do (never the light queries'
        // share); a group that does not fit waits for a later check. A
        // budget too small for even a merge file after file (beside the
        // read cache, held for the server's life) never compacts: off,
        // said once.
        let room = budget
            .heavy_cap()
            .map(|cap| cap.saturating_sub(budget.read_cache()) as u64);
        let smallest = culprit_store::merge_memory(None);
        let auto_compact = opts.auto_compact.filter(|_| match room {
            Some(room) if room < smallest => {
                log::warn!(
                    "background compaction off: a merge needs {} MiB of the memory budget, \
                     and {} MiB is all it may take of {} MiB (three quarters, less the \
                     read cache); raise --memory-budget-mb, or run culprit compact",
                    smallest >> 20,
                    room >> 20,
                    budget.limit().unwrap_or(0) >> 20
                );
                false
            }
            _ => true,
        });
        let auto_compact = auto_compact.map(|mut auto| {
            let budget = budget.clone();
            auto.compact.memory = Some(culprit_store::MemoryGate::new(move |bytes| {
                let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
                budget
                    .try_reserve_heavy("background compaction", bytes)
                    .map(|r| Box::new(r) as culprit_store::MemoryGrant)
                    .map_err(|e| e.to_string())
            }));
            auto
        });
        let mut engine = culprit_sql::Engine::with_budget(store.clone(), budget)
            .with_window_cache_rows(opts.window_cache_rows);
        if let Some(cluster) = &opts.cluster {
            // The host buckets of a large store's analyses go to the
            // workers (`culprit_sql::shards`).
            engine = engine.with_sweeper(Arc::new(culprit_sql::shards::ClusterSweeper::new(
                cluster.clone(),
                store.clone(),
            )));
        }
        let engine = Arc::new(engine);
        let sessions = sessions::Sessions::default();
        let users = opts.users.map(Arc::new);
        session(
            store.clone(),
            engine.clone(),
            opts.query_memory,
            opts.cluster.as_ref(),
            &sessions,
            users.as_deref(),
        )
        .await?;
        if let Some(cluster) = &opts.cluster {
            let urls: Vec<String> = cluster.urls().iter().map(|u| u.to_string()).collect();
            log::info!("coordinator of {} workers: {}", urls.len(), urls.join(", "));
        }
        Ok(Server {
            listener,
            store,
            engine,
            slots: Arc::new(Semaphore::new(opts.max_connections)),
            shared: Arc::new(handlers::Shared {
                gate: Arc::new(policy::Gate::new(users.clone())),
                users,
                tls_required: opts.tls_required,
                max_connections: opts.max_connections,
                statement_timeout: opts.statement_timeout,
                connections: Arc::new(ConnectionManager::new()),
                running: cancel::Running::default(),
                sessions,
            }),
            tls,
            query_memory: opts.query_memory,
            reports: reports::ReportOptions {
                memory: opts.query_memory,
                ..opts.reports
            },
            auto_compact,
            shares_after: opts.shares_after,
            cluster: opts.cluster,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound socket has an address")
    }

    /// Accepts connections until `shutdown` completes, then stops accepting
    /// and closes the open connections.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        // The scheduled reports run while the server does (and stop with it).
        let scheduler = reports::run_scheduler(
            self.store.clone(),
            self.engine.clone(),
            self.shared.gate.clone(),
            self.reports.clone(),
        );
        tokio::pin!(scheduler);
        // Background compaction, while the server runs (answers go on: a
        // query reads the files its manifest lists, kept for the grace
        // period after they are merged).
        let compaction = {
            let (store, auto) = (self.store.clone(), self.auto_compact.clone());
            async move {
                match auto {
                    Some(auto) => auto.run(store).await,
                    None => std::future::pending().await,
                }
            }
        };
        tokio::pin!(compaction);
        // The slot holders' shares stored once the telemetry is quiet, on
        // a task of its own (its reads would hold up accepting
        // connections), stopped with the server.
        let mut shares = JoinSet::new();
        if let Some(after) = self.shares_after {
            let engine = self.engine.clone();
            shares.spawn(async move { engine.store_shares_when_quiet(after).await });
        }
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = &mut scheduler => {}
                _ = &mut compaction => {}
                Some(done) = shares.join_next(), if !shares.is_empty() => {
                    // It runs forever: only a panic (a bug) ends it.
                    log::error!("the background storing of shares stopped: {done:?}");
                }
                accepted = self.listener.accept() => match accepted {
                    Ok((socket, peer)) => {
                        let _ = socket.set_nodelay(true);
                        // Over the limit, the connection is still served: it
                        // is told why (53300) at startup.
                        let permit = self.slots.clone().try_acquire_owned().ok();
                        let shared = self.shared.clone();
                        let (store, engine, memory) =
                            (self.store.clone(), self.engine.clone(), self.query_memory);
                        let cluster = self.cluster.clone();
                        let tls = self.tls.clone();
                        connections.spawn(async move {
                            let store_for_session = store.clone();
                            let users = shared.users.as_deref();
                            let ctx = match session(store, engine, memory, cluster.as_ref(), &shared.sessions, users).await {
                                Ok(ctx) => ctx,
                                Err(e) => {
                                    log::warn!("connection from {peer}: {e}");
                                    return;
                                }
                            };
                            let handlers = Arc::new(CulpritHandlers::new(Arc::new(ctx), store_for_session, shared, permit));
                            if let Err(e) = wire::serve(socket, tls, handlers).await {
                                log::info!("connection from {peer} ended: {e}");
                            }
                        });
                    }
                    Err(e) => log::warn!("accept failed: {e}"),
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        connections.shutdown().await;
        shares.shutdown().await;
        Ok(())
    }
}

/// The session of one connection.
async fn session(
    store: Store,
    engine: Arc<culprit_sql::Engine>,
    memory: Option<usize>,
    cluster: Option<&culprit_sql::Cluster>,
    sessions: &sessions::Sessions,
    users: Option<&Users>,
) -> std::io::Result<SessionContext> {
    let mut config = culprit_sql::default_config();
    if let Some(cluster) = cluster {
        config = config.with_extension(Arc::new(cluster.clone()));
    }
    let ctx = culprit_sql::session_with(store, engine, config, memory)
        .await
        .map_err(|e| io_err(format!("cannot open the SQL session: {e}")))?;
    prepare_session(&ctx, sessions, users)?;
    Ok(ctx)
}
