//! Savepoints. psycopg and SQLAlchemy wrap statements in them (`SAVEPOINT`,
//! `RELEASE`, `ROLLBACK TO SAVEPOINT`); a culprit session changes no stored
//! data, so there is nothing to keep or undo, and each is answered with its
//! tag. datafusion-postgres has no savepoints, and its transaction hook
//! would take `ROLLBACK TO` for a `ROLLBACK`: this hook comes before it.
//!
//! `DISCARD ALL | PLANS | SEQUENCES | TEMP`, which connection pools and
//! pgjdbc send when they hand a connection back, are answered here too:
//! there are no cached plans, sequences or temporary tables to drop, and
//! `DISCARD ALL` closes the connection's cursors (`SessionHooks::answer`).
//! It leaves prepared statements and `SET` values as they are.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::{DFSchema, ParamValues};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{DiscardObject, Statement};
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::QueryHook;
use pgwire::api::results::{Response, Tag};
use pgwire::api::ClientInfo;
use pgwire::error::PgWireResult;

pub struct Savepoints;

/// The command tag of a savepoint statement; `None` for other statements.
fn savepoint_tag(statement: &Statement) -> Option<&'static str> {
    match statement {
        Statement::Savepoint { .. } => Some("SAVEPOINT"),
        Statement::ReleaseSavepoint { .. } => Some("RELEASE"),
        Statement::Rollback {
            savepoint: Some(_), ..
        } => Some("ROLLBACK"),
        Statement::Discard { object_type } => Some(match object_type {
            DiscardObject::ALL => "DISCARD ALL",
            DiscardObject::PLANS => "DISCARD PLANS",
            DiscardObject::SEQUENCES => "DISCARD SEQUENCES",
            DiscardObject::TEMP => "DISCARD TEMP",
        }),
        _ => None,
    }
}

fn savepoint_answer(statement: &Statement) -> Option<PgWireResult<Response>> {
    savepoint_tag(statement).map(|tag| Ok(Response::Execution(Tag::new(tag))))
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
        // No columns and nothing to plan: the execute step answers the tag.
        savepoint_tag(statement).map(|_| {
            Ok(LogicalPlan::EmptyRelation(EmptyRelation {
                produce_one_row: false,
                schema: Arc::new(DFSchema::empty()),
            }))
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
