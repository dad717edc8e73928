//! The two query protocols of PostgreSQL, as pgwire hands them over, each
//! reduced to the statement pipeline (`pipeline.rs`): the simple protocol
//! (a text of statements, run at once) and the extended one (Parse prepares
//! one statement, Bind gives it values, Describe reports its types, Execute
//! runs it). Both start at the gate and run under the statement guard.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type, METADATA_USER};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;

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
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.gate.admit(query, &user_of(client))?;
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        // One guard for the whole text: its statements share the deadline.
        let guard = StatementGuard::start(client, self.statement_timeout, &self.running);
        let mut responses = Vec::with_capacity(statements.len());
        for tree in statements {
            let statement = AdmittedStatement::unplanned(tree);
            let run = self
                .pipeline
                .run(client, &statement, Values::None, &Format::UnifiedText);
            responses.push(guard.cover_rows(guard.run(run).await?));
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Queries {
    type Statement = AdmittedStatement;
    type QueryParser = ExtendedParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
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
