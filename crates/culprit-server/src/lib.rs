//! The PostgreSQL-wire server: pgwire through `datafusion-postgres`, over the
//! culprit SQL session, with pg_catalog for psql and BI tools, and errors
//! mapped once to meaningful SQLSTATEs.

mod handlers;
pub mod sqlstate;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use datafusion::prelude::SessionContext;
use datafusion_postgres::auth::AuthManager;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::setup_pg_catalog;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use handlers::CulpritHandlers;

/// Adds what PostgreSQL clients look for (pg_catalog, `current_schema()`,
/// ...) to a culprit session. The session's default catalog must be
/// `datafusion`.
pub fn prepare_session(ctx: &SessionContext) -> std::io::Result<()> {
    setup_pg_catalog(ctx, "datafusion", Arc::new(AuthManager::default()))
        .map_err(|e| std::io::Error::other(format!("cannot set up pg_catalog: {e}")))
}

/// A server bound to its address, not yet accepting.
pub struct Server {
    listener: TcpListener,
    handlers: Arc<CulpritHandlers>,
}

impl Server {
    /// Binds `listen` (e.g. `127.0.0.1:5433`, or port 0 for any free port).
    pub async fn bind(ctx: Arc<SessionContext>, listen: &str) -> std::io::Result<Server> {
        prepare_session(&ctx)?;
        let listener = TcpListener::bind(listen).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}"))
        })?;
        Ok(Server {
            listener,
            handlers: Arc::new(CulpritHandlers::new(ctx)),
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
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((socket, peer)) => {
                        let _ = socket.set_nodelay(true);
                        let handlers = self.handlers.clone();
                        connections.spawn(async move {
                            if let Err(e) = pgwire::tokio::process_socket(socket, None, handlers).await {
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
        Ok(())
    }
}
