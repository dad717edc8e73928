//! The pgwire handlers of one connection: authentication (SCRAM against the
//! users file, or none on loopback), TLS and connection limits at startup,
//! DataFusion's query handling from `datafusion-postgres` behind culprit's
//! statement gate (`policy.rs`), statement timeout and cancel over the whole
//! execution, and errors mapped to SQLSTATEs.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::{DfSessionService, QueryHook};
use futures::{Sink, Stream};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{DefaultServerParameterProvider, StartupHandler};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::portal::Portal;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, ErrorHandler, PgWireServerHandlers,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::data::DataRow;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::{Notify, OwnedSemaphorePermit};

use crate::auth::Users;
use crate::sqlstate;

/// Running statements, by (pid, secret key), for cancel requests.
pub type Running = Arc<Mutex<Vec<((i32, Vec<u8>), Arc<Notify>)>>>;

/// What every connection of a server shares.
pub struct Shared {
    pub users: Option<Arc<Users>>,
    pub tls_required: bool,
    pub max_connections: usize,
    /// Applies when the client did not `SET statement_timeout`.
    pub statement_timeout: Option<Duration>,
    pub connections: Arc<ConnectionManager>,
    pub running: Running,
    /// Admits every statement, whatever its path (`policy.rs`).
    pub gate: Arc<crate::policy::Gate>,
}

/// The user a connection logged in as (the startup message's).
pub fn user_of<C: ClientInfo + ?Sized>(client: &C) -> String {
    client.metadata().get("user").cloned().unwrap_or_default()
}

fn user_error(severity: &str, code: &str, msg: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(severity.into(), code.into(), msg)))
}

/// The handlers of one connection.
pub struct CulpritHandlers {
    service: Arc<Service>,
    startup: Arc<Startup>,
    cancel: Arc<Cancel>,
}

impl CulpritHandlers {
    /// Handlers over the connection's own session. `permit` is `None` when
    /// the server already has its maximum of connections.
    pub fn new(
        ctx: Arc<SessionContext>,
        shared: Arc<Shared>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let mut hooks: Vec<Arc<dyn QueryHook>> = vec![Arc::new(Savepoints), Arc::new(Compat)];
        // datafusion-postgres' own hooks (SET/SHOW, cursors, transactions).
        hooks.extend(default_hooks());
        let inner = Arc::new(DfSessionService::new_with_hooks(ctx.clone(), hooks));
        let parser = Arc::new(crate::params::CulpritParser {
            inner: inner.query_parser(),
            ctx: ctx.clone(),
            gate: shared.gate.clone(),
        });
        let startup = match &shared.users {
            Some(users) => {
                let mut scram = ScramAuth::new(users.clone());
                scram.set_iterations(pgwire::api::auth::sasl::scram::SCRAM_ITERATIONS);
                Auth::Scram(
                    SASLAuthStartupHandler::new(
                        Arc::new(DefaultServerParameterProvider::default()),
                    )
                    .with_scram(scram)
                    .with_connection_manager(shared.connections.clone()),
                )
            }
            None => Auth::None(NoAuth {
                connections: shared.connections.clone(),
            }),
        };
        CulpritHandlers {
            service: Arc::new(Service {
                inner,
                parser,
                ctx,
                shared: shared.clone(),
            }),
            startup: Arc::new(Startup {
                auth: startup,
                shared: shared.clone(),
                permit: Mutex::new(permit),
            }),
            cancel: Arc::new(Cancel { shared }),
        }
    }
}

fn default_hooks() -> Vec<Arc<dyn QueryHook>> {
    use datafusion_postgres::hooks::cursor::CursorStatementHook;
    use datafusion_postgres::hooks::set_show::SetShowHook;
    use datafusion_postgres::hooks::transactions::TransactionStatementHook;
    vec![
        Arc::new(CursorStatementHook),
        Arc::new(SetShowHook),
        Arc::new(TransactionStatementHook),
    ]
}

pub struct NoAuth {
    connections: Arc<ConnectionManager>,
}

impl NoopStartupHandler for NoAuth {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
    }
}

enum Auth {
    None(NoAuth),
    Scram(SASLAuthStartupHandler<DefaultServerParameterProvider>),
}

/// Startup: the connection limit and `--tls-required` first, then the
/// authentication.
pub struct Startup {
    auth: Auth,
    shared: Arc<Shared>,
    permit: Mutex<Option<OwnedSemaphorePermit>>,
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let PgWireFrontendMessage::Startup(_) = &message {
            if self.permit.lock().expect("permit").is_none() {
                return Err(user_error(
                    "FATAL",
                    "53300",
                    format!(
                        "sorry, too many clients already (max_connections = {})",
                        self.shared.max_connections
                    ),
                ));
            }
            if self.shared.tls_required && !client.is_secure() {
                return Err(user_error(
                    "FATAL",
                    "28000",
                    "this server requires TLS (connect with sslmode=require)".into(),
                ));
            }
        }
        match &self.auth {
            Auth::None(h) => h.on_startup(client, message).await,
            Auth::Scram(h) => h.on_startup(client, message).await,
        }
    }
}

/// Savepoints (psycopg and SQLAlchemy wrap statements in them) are
/// accepted with nothing to keep, since sessions change no stored data.
/// (Who may run what is decided before any hook, by `policy::Gate`.)
struct Savepoints;

fn savepoint_tag(statement: &Statement) -> Option<&'static str> {
    match statement {
        Statement::Savepoint { .. } => Some("SAVEPOINT"),
        Statement::ReleaseSavepoint { .. } => Some("RELEASE"),
        Statement::Rollback {
            savepoint: Some(_), ..
        } => Some("ROLLBACK"),
        _ => None,
    }
}

fn savepoint_answer(statement: &Statement) -> Option<PgWireResult<Response>> {
    savepoint_tag(statement).map(|tag| Ok(Response::Execution(pgwire::api::results::Tag::new(tag))))
}

#[async_trait]
impl QueryHook for Savepoints {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        _ctx: &SessionContext,
        _client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        savepoint_answer(statement)
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _ctx: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        // Nothing to plan: the execute step answers with the tag.
        savepoint_tag(statement).map(|_| {
            Ok(LogicalPlan::EmptyRelation(
                datafusion::logical_expr::EmptyRelation {
                    produce_one_row: false,
                    schema: Arc::new(datafusion::common::DFSchema::empty()),
                },
            ))
        })
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        _plan: &LogicalPlan,
        _params: &ParamValues,
        _ctx: &SessionContext,
        _client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        savepoint_answer(statement)
    }
}

/// Runs the catalog queries of clients that DataFusion cannot plan as
/// written, rewritten (`rewrite.rs`).
struct Compat;

#[async_trait]
impl QueryHook for Compat {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let rewritten = crate::rewrite::rewrite(statement)?;
        let run = async {
            let df_err = |e| PgWireError::ApiError(Box::new(e));
            let plan = ctx
                .state()
                .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                    rewritten,
                )))
                .await
                .map_err(df_err)?;
            let df = ctx.execute_logical_plan(plan).await.map_err(df_err)?;
            let options = Arc::new(pgwire::types::format::FormatOptions::from_client_metadata(
                client.metadata(),
            ));
            let q = datafusion_postgres::arrow_pg::datatypes::df::encode_dataframe(
                df,
                &pgwire::api::portal::Format::UnifiedText,
                Some(options),
            )
            .await?;
            Ok(Response::Query(q))
        };
        Some(run.await)
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        let rewritten = crate::rewrite::rewrite(statement)?;
        Some(
            ctx.state()
                .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                    rewritten,
                )))
                .await
                .map_err(|e| PgWireError::ApiError(Box::new(e))),
        )
    }

    async fn handle_extended_query(
        &self,
        _statement: &Statement,
        _plan: &LogicalPlan,
        _params: &ParamValues,
        _ctx: &SessionContext,
        _client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        None
    }
}

/// DataFusion's handling, with the statement timeout and cancel requests
/// covering execution and the sending of rows, not only planning.
pub struct Service {
    inner: Arc<DfSessionService>,
    parser: Arc<crate::params::CulpritParser>,
    ctx: Arc<SessionContext>,
    shared: Arc<Shared>,
}

/// Ends a statement: its deadline and its cancel signal.
struct Guard {
    deadline: Option<tokio::time::Instant>,
    timeout: Option<Duration>,
    cancel: Arc<Notify>,
    running: Running,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut r = self.running.lock().expect("running");
        r.retain(|(_, n)| !Arc::ptr_eq(n, &self.cancel));
    }
}

fn timeout_error(t: Duration) -> PgWireError {
    user_error(
        "ERROR",
        sqlstate::QUERY_CANCELED,
        format!(
            "canceling statement due to statement timeout ({} ms)",
            t.as_millis()
        ),
    )
}

fn cancel_error() -> PgWireError {
    user_error(
        "ERROR",
        sqlstate::QUERY_CANCELED,
        "canceling statement due to user request".into(),
    )
}

impl Service {
    fn begin<C: ClientInfo>(&self, client: &C) -> Guard {
        // `SET statement_timeout` (kept by datafusion-postgres in the
        // connection's metadata) wins over the server's default.
        let timeout = match client.metadata().get("statement_timeout_ms") {
            Some(ms) => ms
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            None => self.shared.statement_timeout,
        };
        let (pid, secret) = client.pid_and_secret_key();
        let key = (pid, secret.to_bytes().to_vec());
        let cancel = Arc::new(Notify::new());
        self.shared
            .running
            .lock()
            .expect("running")
            .push((key, cancel.clone()));
        Guard {
            // A timeout too far off to be an instant is no deadline.
            deadline: timeout.and_then(|t| tokio::time::Instant::now().checked_add(t)),
            timeout,
            cancel,
            running: self.shared.running.clone(),
        }
    }

    /// Runs `work` under the guard: the first of its end, the deadline and a
    /// cancel request wins.
    async fn guarded<T>(
        guard: &Guard,
        work: impl std::future::Future<Output = PgWireResult<T>>,
    ) -> PgWireResult<T> {
        let deadline = async {
            match guard.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = work => r,
            _ = deadline => Err(timeout_error(guard.timeout.unwrap_or_default())),
            _ = guard.cancel.notified() => Err(cancel_error()),
        }
    }

    /// Wraps a response's rows so the guard also covers their sending.
    fn wrap(response: Response, guard: Arc<Guard>) -> Response {
        match response {
            Response::Query(mut q) => {
                let rows = std::mem::replace(&mut q.data_rows, Box::pin(futures::stream::empty()));
                q.data_rows = Box::pin(Guarded {
                    rows,
                    guard,
                    sleep: None,
                    notified: None,
                    done: false,
                });
                Response::Query(q)
            }
            other => other,
        }
    }
}

type Rows = Pin<Box<dyn Stream<Item = PgWireResult<DataRow>> + Send>>;

struct Guarded {
    rows: Rows,
    guard: Arc<Guard>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    notified: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    done: bool,
}

impl Stream for Guarded {
    type Item = PgWireResult<DataRow>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.notified.is_none() {
            let n = self.guard.cancel.clone();
            self.notified = Some(Box::pin(async move { n.notified().await }));
        }
        if self
            .notified
            .as_mut()
            .expect("set")
            .as_mut()
            .poll(cx)
            .is_ready()
        {
            self.done = true;
            return Poll::Ready(Some(Err(cancel_error())));
        }
        if let Some(d) = self.guard.deadline {
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(d)));
            if sleep.as_mut().poll(cx).is_ready() {
                self.done = true;
                let t = self.guard.timeout.unwrap_or_default();
                return Poll::Ready(Some(Err(timeout_error(t))));
            }
        }
        self.rows.as_mut().poll_next(cx)
    }
}

#[async_trait]
impl SimpleQueryHandler for Service {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let query = crate::rewrite::before_parse(query);
        // Nothing runs that the gate did not admit; the service below parses
        // the same text with the same parser.
        self.shared.gate.admit(&query, &user_of(client))?;
        let guard = Arc::new(self.begin(client));
        let responses = Self::guarded(
            &guard,
            SimpleQueryHandler::do_query(&*self.inner, client, &query),
        )
        .await?;
        Ok(responses
            .into_iter()
            .map(|r| Self::wrap(r, guard.clone()))
            .collect())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Service {
    type Statement = crate::params::Stmt;
    type QueryParser = crate::params::CulpritParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        crate::params::check_result_formats(
            &portal.statement.statement,
            Some(&portal.result_column_format),
        )?;
        let guard = Arc::new(self.begin(client));
        let response = if crate::params::is_deferred(&portal.statement.statement) {
            let work = crate::params::run_deferred(&self.ctx, client, portal);
            Response::Query(Self::guarded(&guard, work).await?)
        } else {
            let work = ExtendedQueryHandler::do_query(&*self.inner, client, portal, max_rows);
            Self::guarded(&guard, work).await?
        };
        Ok(Self::wrap(response, guard))
    }
}

/// Cancel requests: the statement running on that connection (pid and
/// secret key) stops, whether it is planning, computing or sending rows.
pub struct Cancel {
    shared: Arc<Shared>,
}

#[async_trait]
impl CancelHandler for Cancel {
    async fn on_cancel_request(&self, req: CancelRequest) {
        let key = (req.pid, req.secret_key.to_bytes().to_vec());
        let running: Vec<Arc<Notify>> = self
            .shared
            .running
            .lock()
            .expect("running")
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, n)| n.clone())
            .collect();
        for n in running {
            n.notify_one();
        }
        self.shared
            .connections
            .cancel(req.pid, &req.secret_key)
            .await;
    }
}

/// Rewrites errors to their SQLSTATE before they reach the client.
pub struct SqlStateErrors;

impl ErrorHandler for SqlStateErrors {
    fn on_error<C>(&self, _client: &C, error: &mut PgWireError)
    where
        C: ClientInfo,
    {
        sqlstate::rewrite(error);
        log::debug!("sending error: {error}");
    }
}

impl PgWireServerHandlers for CulpritHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.service.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.service.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        Arc::new(SqlStateErrors)
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.cancel.clone()
    }
}
