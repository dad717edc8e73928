//! The two query protocols of PostgreSQL, as pgwire hands them over, each
//! reduced to the statement pipeline (`pipeline.rs`): the simple protocol
//! (a text of statements, run at once) and the extended one (Parse prepares
//! one statement, Bind gives it values, Describe reports its types, Execute
//! runs it). Both start at the gate and run under the statement guard.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::sql::sqlparser::ast::Statement;
use futures::{Sink, SinkExt};
use pgwire::api::copy::{send_copy_both_response, send_copy_in_response, send_copy_out_response};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{
    send_describe_response, send_execution_response, send_query_response, send_ready_for_query,
    ExtendedQueryHandler, SimpleQueryHandler,
};
use pgwire::api::results::{DescribePortalResponse, FieldInfo, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::stmt::StoredStatement;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type, METADATA_USER};
use pgwire::api::{PgWireConnectionState, DEFAULT_NAME};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::extendedquery::{
    Describe, Execute, Parse, ParseComplete, TARGET_TYPE_BYTE_PORTAL,
};
use pgwire::messages::response::{EmptyQueryResponse, TransactionStatus};
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;

use crate::cancel::Running;
use crate::guard::StatementGuard;
use crate::parameters::Values;
use crate::pipeline::{AdmittedStatement, Pipeline};
use crate::policy::Gate;
use crate::sqlstate;

/// The user a connection logged in as (the startup message's).
fn user_of<C: ClientInfo + ?Sized>(client: &C) -> String {
    client
        .metadata()
        .get(METADATA_USER)
        .cloned()
        .unwrap_or_default()
}

fn error(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message,
    )))
}

/// A Bind's result format codes: none, one for all columns, or one per
/// column (PostgreSQL's rule; pgwire would index past a shorter list).
fn check_result_formats(
    statement: &AdmittedStatement,
    format: Option<&Format>,
) -> PgWireResult<()> {
    if let Some(Format::Individual(codes)) = format {
        let columns = statement.result_columns();
        if codes.len() != columns {
            return Err(error(
                sqlstate::PROTOCOL_VIOLATION,
                format!(
                    "bind message has {} result formats but query has {columns} columns",
                    codes.len()
                ),
            ));
        }
    }
    Ok(())
}

/// The query handlers of one connection.
pub struct Queries {
    pub pipeline: Arc<Pipeline>,
    pub parser: Arc<ExtendedParser>,
    pub gate: Arc<Gate>,
    /// The server's default, when the client did not `SET statement_timeout`.
    pub statement_timeout: Option<Duration>,
    pub running: Running,
    /// The names of the statements prepared through the protocol (Parse).
    pub prepared: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The server's connections (`pg_stat_activity`).
    pub sessions: crate::sessions::Sessions,
    /// This connection's pid once its first message is handled (0 before).
    pub started: std::sync::atomic::AtomicI32,
    /// The transaction status an Execute's statement left, which pgwire
    /// would replace by the one before it (`hooks/transactions.rs`).
    pub status_left: std::sync::Mutex<Option<TransactionStatus>>,
}

impl Drop for Queries {
    fn drop(&mut self) {
        let pid = self.started.load(std::sync::atomic::Ordering::SeqCst);
        if pid != 0 {
            self.sessions.leave(pid);
        }
    }
}

impl Queries {
    /// A statement of `client` starts (`sessions.rs`): the session's own
    /// functions (`pg_backend_pid()`, ...) the first time, then its row of
    /// `pg_stat_activity`. A terminated session ends here (`57P01`).
    fn statement_starts<C: ClientInfo + ?Sized>(
        &self,
        client: &C,
        query: &str,
    ) -> PgWireResult<()> {
        self.start(client);
        self.sessions.statement_starts(client, query)
    }

    /// Before the connection's first statement is planned: its own
    /// functions (`sessions.rs`) and the startup packet's options
    /// (`search_path`).
    fn start<C: ClientInfo + ?Sized>(&self, client: &C) {
        use std::sync::atomic::Ordering;
        let (pid, _) = client.pid_and_secret_key();
        if self.started.swap(pid, Ordering::SeqCst) == 0 {
            let ctx = self.pipeline.session();
            let users = self.gate.users();
            self.sessions
                .register_functions(ctx, client, &self.running, users);
            crate::hooks::apply_startup_options(ctx, client);
        }
    }

    /// `DEALLOCATE` of a statement prepared through the protocol (psqlODBC
    /// prepares with a Parse and frees it in SQL), or `DEALLOCATE ALL`:
    /// PostgreSQL has one namespace for both kinds. `None` leaves the
    /// statement to the pipeline: a statement prepared with `PREPARE`, and
    /// any statement of a failed transaction block (which the pipeline
    /// refuses, whatever its path).
    fn deallocate<C>(&self, client: &C, tree: &Statement) -> Option<Response>
    where
        C: ClientInfo + ClientPortalStore,
        C::PortalStore: PortalStore,
    {
        let Statement::Deallocate { name, .. } = tree else {
            return None;
        };
        if client.transaction_status() == TransactionStatus::Error {
            return None;
        }
        let store = client.portal_store();
        if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
            for name in self.prepared().drain() {
                store.rm_statement(&name);
            }
            return Some(Response::Execution(Tag::new("DEALLOCATE ALL")));
        }
        store.get_statement(&name.value)?;
        store.rm_statement(&name.value);
        self.prepared().remove(&name.value);
        Some(Response::Execution(Tag::new("DEALLOCATE")))
    }

    /// The names of the statements prepared through the protocol.
    fn prepared(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.prepared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    /// A text of statements, each run and answered before the next, as
    /// PostgreSQL does: the first error ends the text (what ran before it
    /// stays answered) and, inside a transaction block, fails the block.
    /// The transaction status the client reads is the one the statements
    /// left (`hooks/transactions.rs`).
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        self.statement_starts(client, &query.query)?;
        let result = self.run_text(client, &query.query).await;
        // Idle before the client may go on (`pg_stat_activity` read from
        // another connection right after must not see it active).
        self.sessions.statement_ends(client);
        result?;
        // COPY FROM STDIN answers ReadyForQuery when its data ends.
        if !matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            client.set_state(PgWireConnectionState::ReadyForQuery);
            send_ready_for_query(client, client.transaction_status()).await?;
        }
        Ok(())
    }

    /// Not used: [`Self::on_query`] runs each statement itself.
    async fn do_query<C>(&self, _client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Err(error(
            sqlstate::INTERNAL_ERROR,
            format!("a query text reached the unused simple-query path: {query}"),
        ))
    }
}

impl Queries {
    /// The statements of one query text, each answered before the next
    /// (`SimpleQueryHandler::on_query`, which then sends ReadyForQuery).
    async fn run_text<C>(&self, client: &mut C, text: &str) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.gate.admit(text, &user_of(client))?;
        if statements.is_empty() {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        // One guard for the whole text: its statements share the deadline.
        let guard = StatementGuard::start(client, self.statement_timeout, &self.running);
        for tree in statements {
            let response = match self.deallocate(client, &tree) {
                Some(response) => response,
                None => {
                    let statement = AdmittedStatement::unplanned(tree);
                    let run =
                        self.pipeline
                            .run(client, &statement, Values::None, &Format::UnifiedText);
                    guard.cover_rows(guard.run(run).await?)
                }
            };
            match response {
                Response::EmptyQuery => {
                    client
                        .feed(PgWireBackendMessage::EmptyQueryResponse(
                            EmptyQueryResponse::new(),
                        ))
                        .await?;
                }
                Response::Query(results) => send_query_response(client, results, true).await?,
                Response::Execution(tag)
                | Response::TransactionStart(tag)
                | Response::TransactionEnd(tag) => send_execution_response(client, tag).await?,
                Response::Error(e) => return Err(PgWireError::UserError(e)),
                Response::CopyIn(result) => {
                    send_copy_in_response(client, result).await?;
                    client.set_state(PgWireConnectionState::CopyInProgress(false));
                }
                Response::CopyOut(result) => send_copy_out_response(client, result).await?,
                Response::CopyBoth(result) => {
                    send_copy_both_response(client, result).await?;
                    client.set_state(PgWireConnectionState::CopyInProgress(false));
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Queries {
    type Statement = AdmittedStatement;
    type QueryParser = ExtendedParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    /// Parse, with the statement's name kept for `DEALLOCATE ALL`.
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.start(client);
        if let Some(name) = message.name.as_ref().filter(|n| !n.is_empty()) {
            // Statements closed by the protocol (psycopg 3 closes its own)
            // leave the list, which so stays as long as the live ones.
            let store = client.portal_store();
            let mut prepared = self.prepared();
            prepared.retain(|n| store.get_statement(n).is_some());
            prepared.insert(name.clone());
        }
        // pgwire's own Parse, which an override cannot call.
        let name = message
            .name
            .clone()
            .unwrap_or_else(|| DEFAULT_NAME.to_owned());
        match StoredStatement::parse(client, &message, self.query_parser()).await? {
            Some(statement) => client.portal_store().put_statement(Arc::new(statement)),
            None => client.portal_store().put_empty_statement(&name),
        }
        client
            .send(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    /// Execute, leaving the transaction status the statement left (pgwire
    /// would put back the one before it: `hooks/transactions.rs`).
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let result = self._on_execute(client, message).await;
        let left = self
            .status_left
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let (Some(status), true) = (left, result.is_ok()) {
            client.set_transaction_status(status);
        }
        result
    }

    /// Describe; a portal that is a cursor `DECLARE`d by name (psycopg's
    /// server-side cursors describe it so) is described by its columns.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == TARGET_TYPE_BYTE_PORTAL {
            let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
            if client.portal_store().get_portal(name).is_none() {
                let options = FormatOptions::from_client_metadata(client.metadata());
                if let Some(fields) = self.pipeline.cursor_fields(name, options) {
                    let response = DescribePortalResponse::new(fields?);
                    return send_describe_response(client, &response).await;
                }
            }
        }
        self._on_describe(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement = &portal.statement.statement;
        self.statement_starts(client, &statement.tree.to_string())?;
        let answer = self.execute(client, portal).await;
        // The status the statement left (`on_execute` keeps it).
        *self
            .status_left
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(client.transaction_status());
        self.sessions.statement_ends(client);
        answer
    }
}

impl Queries {
    /// Execute of a portal (`ExtendedQueryHandler::do_query`).
    async fn execute<C>(
        &self,
        client: &mut C,
        portal: &Portal<AdmittedStatement>,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = AdmittedStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement = &portal.statement.statement;
        if let Some(response) = self.deallocate(client, &statement.tree) {
            return Ok(response);
        }
        check_result_formats(statement, Some(&portal.result_column_format))?;
        let guard = StatementGuard::start(client, self.statement_timeout, &self.running);
        let run = self.pipeline.run(
            client,
            statement,
            Values::Portal(portal),
            &portal.result_column_format,
        );
        Ok(guard.cover_rows(guard.run(run).await?))
    }
}

/// Parse and Describe of the extended protocol.
pub struct ExtendedParser {
    pub pipeline: Arc<Pipeline>,
    pub gate: Arc<Gate>,
}

#[async_trait]
impl QueryParser for ExtendedParser {
    type Statement = AdmittedStatement;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = self.gate.admit(sql, &user_of(client))?;
        if statements.len() > 1 {
            return Err(error(
                sqlstate::SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement".into(),
            ));
        }
        match statements.pop() {
            None => Ok(None),
            Some(tree) => Ok(Some(self.pipeline.prepare(client, tree).await?)),
        }
    }

    fn get_parameter_types(&self, statement: &Self::Statement) -> PgWireResult<Vec<Type>> {
        self.pipeline.parameter_types(statement)
    }

    fn get_result_schema(
        &self,
        statement: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        check_result_formats(statement, column_format)?;
        self.pipeline.result_fields(statement, column_format)
    }
}
