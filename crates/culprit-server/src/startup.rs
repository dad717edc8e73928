//! The startup of a connection, before any statement: the connection limit
//! and `--tls-required` first (a client over the limit or without TLS is told
//! why, FATAL, instead of being dropped silently), then the authentication:
//! SCRAM-SHA-256 against the users file, or none on a loopback-only server.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, SCRAM_ITERATIONS};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{DefaultServerParameterProvider, StartupHandler};
use pgwire::api::{ClientInfo, ConnectionManager};
use pgwire::api::{PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::OwnedSemaphorePermit;

use crate::auth::Users;
use crate::sqlstate;

/// Startup without authentication (a server without users listens on a
/// loopback address only).
pub struct NoAuth {
    connections: Arc<ConnectionManager>,
}

impl NoopStartupHandler for NoAuth {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
    }

    fn pid_secret_key_generator(&self) -> &dyn PidSecretKeyGenerator {
        &**PIDS
    }
}

/// The pids (and secret keys) of every connection of the process, from one
/// counter: a pid names one session (`pg_stat_activity`,
/// `pg_cancel_backend`). pgwire's SCRAM handler counts from its own start,
/// and culprit makes one per connection, so every authenticated
/// connection had the same pid.
static PIDS: std::sync::LazyLock<Arc<RandomPidSecretKeyGenerator>> =
    std::sync::LazyLock::new(|| Arc::new(RandomPidSecretKeyGenerator::default()));

enum Auth {
    None(NoAuth),
    Scram(SASLAuthStartupHandler<DefaultServerParameterProvider>),
}

/// The startup handler of one connection.
pub struct Startup {
    auth: Auth,
    tls_required: bool,
    max_connections: usize,
    /// The connection's slot among the server's `max_connections`; `None`
    /// when the server was full when it connected.
    permit: Mutex<Option<OwnedSemaphorePermit>>,
}

impl Startup {
    pub fn new(
        users: Option<&Arc<Users>>,
        connections: Arc<ConnectionManager>,
        tls_required: bool,
        max_connections: usize,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Startup {
        let auth = match users {
            Some(users) => {
                let mut scram = ScramAuth::new(users.clone());
                scram.set_iterations(SCRAM_ITERATIONS);
                Auth::Scram(
                    SASLAuthStartupHandler::new(
                        Arc::new(DefaultServerParameterProvider::default()),
                    )
                    .with_scram(scram)
                    .with_connection_manager(connections)
                    .with_pid_secret_key_generator(PIDS.clone()),
                )
            }
            None => Auth::None(NoAuth { connections }),
        };
        Startup {
            auth,
            tls_required,
            max_connections,
            permit: Mutex::new(permit),
        }
    }

    /// Why this connection may not start, if it may not.
    fn refusal<C: ClientInfo>(&self, client: &C) -> Option<PgWireError> {
        let fatal = |code: &str, message: String| {
            PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                code.into(),
                message,
            )))
        };
        if self.permit.lock().expect("connection permit").is_none() {
            return Some(fatal(
                sqlstate::TOO_MANY_CONNECTIONS,
                format!(
                    "sorry, too many clients already (max_connections = {})",
                    self.max_connections
                ),
            ));
        }
        if self.tls_required && !client.is_secure() {
            return Some(fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                "this server requires TLS (connect with sslmode=require)".into(),
            ));
        }
        None
    }
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
            if let Some(refusal) = self.refusal(client) {
                return Err(refusal);
            }
        }
        match &self.auth {
            Auth::None(h) => h.on_startup(client, message).await,
            Auth::Scram(h) => h.on_startup(client, message).await,
        }
    }
}
