use std::sync::Arc;

use datafusion::prelude::SessionContext;
use datafusion_postgres::DfSessionService;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{ClientInfo, ConnectionManager, ErrorHandler, PgWireServerHandlers};
use pgwire::error::PgWireError;

use crate::sqlstate;

/// The pgwire handlers: DataFusion's query handling from
/// `datafusion-postgres`, our SQLSTATE mapping for errors, and cancel
/// requests honoured through the connection manager.
pub struct CulpritHandlers {
    service: Arc<DfSessionService>,
    startup: Arc<Startup>,
    cancel: Arc<DefaultCancelHandler>,
}

impl CulpritHandlers {
    pub fn new(ctx: Arc<SessionContext>) -> Self {
        let connections = Arc::new(ConnectionManager::new());
        CulpritHandlers {
            service: Arc::new(DfSessionService::new(ctx)),
            startup: Arc::new(Startup {
                connections: connections.clone(),
            }),
            cancel: Arc::new(DefaultCancelHandler::new(connections)),
        }
    }
}

pub struct Startup {
    connections: Arc<ConnectionManager>,
}

impl NoopStartupHandler for Startup {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
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
