//! The statements a session answers itself, without planning them:
//! savepoints (culprit's own, `savepoints.rs`), then datafusion-postgres's
//! hooks for cursors (`DECLARE`, `FETCH`, `CLOSE`), `SET` / `SHOW`, and
//! transactions (`BEGIN`, `COMMIT`, `ROLLBACK`, and the refusal of other
//! statements in a failed transaction). The pipeline asks them, in that
//! order, with the tree the gate admitted, before it rewrites or plans
//! anything, whatever the protocol.
//!
//! datafusion-postgres's cursor hook keeps cursors as portals of its own
//! statement type, found by downcasting the client's portal store. culprit's
//! prepared statements are typed (`pipeline::AdmittedStatement`), so the
//! hooks see the client through [`HookView`], whose portal store is the
//! connection's store of cursors. (So a cursor is reached by `FETCH` and
//! `CLOSE`, not by an extended-protocol Execute of a portal of its name.)

mod savepoints;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::QueryHook;
use pgwire::api::results::Response;
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::MemPortalStore;
use pgwire::api::{ClientInfo, PgWireConnectionState, SessionExtensions};
use pgwire::error::PgWireResult;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, ProtocolVersion};

/// The statement type of datafusion-postgres's cursor portals.
type CursorStatement = <datafusion_postgres::Parser as QueryParser>::Statement;

/// The session hooks of one connection, with its cursors.
pub struct SessionHooks {
    hooks: Vec<Arc<dyn QueryHook>>,
    cursors: MemPortalStore<CursorStatement>,
}

impl Default for SessionHooks {
    fn default() -> Self {
        SessionHooks {
            // Savepoints first: the transaction hook would take `ROLLBACK TO
            // SAVEPOINT` for a `ROLLBACK`.
            hooks: vec![
                Arc::new(savepoints::Savepoints),
                Arc::new(CursorStatementHook),
                Arc::new(SetShowHook),
                Arc::new(TransactionStatementHook),
            ],
            cursors: MemPortalStore::new(),
        }
    }
}

impl SessionHooks {
    /// The columns of a hook's answer (for Parse and Describe), if a hook
    /// answers `statement`.
    pub async fn describe(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        let statement = &*normalized(statement);
        for hook in &self.hooks {
            if let Some(plan) = hook
                .handle_extended_parse_query(statement, ctx, client)
                .await
            {
                return Some(plan);
            }
        }
        None
    }

    /// A hook's answer to `statement`, if one answers it. `described` is the
    /// plan made when the statement was prepared (extended protocol).
    pub async fn answer(
        &self,
        statement: &Statement,
        described: Option<&LogicalPlan>,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        // None of these hooks reads parameter values (they answer
        // statements without parameters), so none are decoded for them.
        let no_values = ParamValues::List(vec![]);
        let statement = &*normalized(statement);
        if matches!(
            statement,
            Statement::Discard {
                object_type: datafusion::sql::sqlparser::ast::DiscardObject::ALL
            }
        ) {
            use pgwire::api::store::PortalStore;
            self.cursors.clear_portals();
        }
        let mut view = HookView {
            client,
            cursors: &self.cursors,
        };
        for hook in &self.hooks {
            let answer = match described {
                Some(plan) => {
                    hook.handle_extended_query(statement, plan, &no_values, ctx, &mut view)
                        .await
                }
                None => hook.handle_simple_query(statement, ctx, &mut view).await,
            };
            if answer.is_some() {
                return answer;
            }
        }
        None
    }
}

/// `SHOW timezone` (any case) as `SHOW TIME ZONE`, the spelling
/// datafusion-postgres answers; pgjdbc and Metabase send the first and got
/// an empty value.
fn normalized(statement: &Statement) -> std::borrow::Cow<'_, Statement> {
    use datafusion::sql::sqlparser::ast::Ident;
    match statement {
        Statement::ShowVariable { variable }
            if variable.len() == 1 && variable[0].value.eq_ignore_ascii_case("timezone") =>
        {
            std::borrow::Cow::Owned(Statement::ShowVariable {
                variable: vec![Ident::new("time"), Ident::new("zone")],
            })
        }
        _ => std::borrow::Cow::Borrowed(statement),
    }
}

/// The client as the hooks see it: the connection itself, except that its
/// portal store is the connection's store of cursors.
struct HookView<'a> {
    client: &'a mut dyn HookClient,
    cursors: &'a MemPortalStore<CursorStatement>,
}

#[async_trait]
impl<'a> HookClient for HookView<'a> {
    fn portal_store(&self) -> &MemPortalStore<CursorStatement> {
        self.cursors
    }

    async fn send_message(&mut self, item: PgWireBackendMessage) -> PgWireResult<()> {
        self.client.send_message(item).await
    }
}

impl ClientInfo for HookView<'_> {
    fn socket_addr(&self) -> std::net::SocketAddr {
        self.client.socket_addr()
    }

    fn is_secure(&self) -> bool {
        self.client.is_secure()
    }

    fn protocol_version(&self) -> ProtocolVersion {
        self.client.protocol_version()
    }

    fn set_protocol_version(&mut self, version: ProtocolVersion) {
        self.client.set_protocol_version(version)
    }

    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.client.pid_and_secret_key()
    }

    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.client.set_pid_and_secret_key(pid, secret_key)
    }

    fn state(&self) -> PgWireConnectionState {
        self.client.state()
    }

    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.client.set_state(new_state)
    }

    fn transaction_status(&self) -> TransactionStatus {
        self.client.transaction_status()
    }

    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.client.set_transaction_status(new_status)
    }

    fn metadata(&self) -> &std::collections::HashMap<String, String> {
        self.client.metadata()
    }

    fn metadata_mut(&mut self) -> &mut std::collections::HashMap<String, String> {
        self.client.metadata_mut()
    }

    fn session_extensions(&self) -> &SessionExtensions {
        self.client.session_extensions()
    }

    fn sni_server_name(&self) -> Option<&str> {
        self.client.sni_server_name()
    }

    fn client_certificates<'c>(&self) -> Option<&[rustls_pki_types::CertificateDer<'c>]> {
        self.client.client_certificates()
    }
}
