//! The pgwire handlers of one connection, wired together: startup
//! (`startup.rs`), the two query protocols over the statement pipeline
//! (`protocol.rs`, `pipeline.rs`), cancel requests (`cancel.rs`) and the
//! mapping of errors to SQLSTATEs (`sqlstate.rs`) before they reach the
//! client.

use std::sync::Arc;
use std::time::Duration;

use datafusion::prelude::SessionContext;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{ClientInfo, ConnectionManager, ErrorHandler, PgWireServerHandlers};
use pgwire::error::PgWireError;
use tokio::sync::OwnedSemaphorePermit;

use culprit_store::Store;

use crate::auth::Users;
use crate::cancel::{Cancel, Running};
use crate::copy::CopyIns;
use crate::pipeline::Pipeline;
use crate::policy::Gate;
use crate::protocol::{ExtendedParser, Queries};
use crate::sqlstate;
use crate::startup::Startup;

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
    pub gate: Arc<Gate>,
    /// The connections, as `pg_stat_activity` lists them.
    pub sessions: crate::sessions::Sessions,
}

/// The handlers of one connection.
pub struct CulpritHandlers {
    copy: Arc<CopyIns>,
    queries: Arc<Queries>,
    startup: Arc<Startup>,
    cancel: Arc<Cancel>,
}

impl CulpritHandlers {
    /// Handlers over the connection's own session. `permit` is `None` when
    /// the server already has its maximum of connections.
    pub fn new(
        ctx: Arc<SessionContext>,
        store: Store,
        shared: Arc<Shared>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let pipeline = Arc::new(Pipeline::new(ctx, store, shared.gate.clone()));
        let copy = Arc::new(CopyIns {
            pipeline: pipeline.clone(),
        });
        let queries = Queries {
            parser: Arc::new(ExtendedParser {
                pipeline: pipeline.clone(),
                gate: shared.gate.clone(),
            }),
            pipeline,
            gate: shared.gate.clone(),
            statement_timeout: shared.statement_timeout,
            running: shared.running.clone(),
            prepared: Default::default(),
            sessions: shared.sessions.clone(),
            started: Default::default(),
            status_left: Default::default(),
        };
        let startup = Startup::new(
            shared.users.as_ref(),
            shared.connections.clone(),
            shared.tls_required,
            shared.max_connections,
            permit,
        );
        let cancel = Cancel {
            running: shared.running.clone(),
            connections: shared.connections.clone(),
        };
        CulpritHandlers {
            copy,
            queries: Arc::new(queries),
            startup: Arc::new(startup),
            cancel: Arc::new(cancel),
        }
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
        self.queries.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.queries.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        Arc::new(SqlStateErrors)
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.copy.clone()
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.cancel.clone()
    }
}
