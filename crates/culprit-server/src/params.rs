//! Prepared statements whose parameters DataFusion cannot plan: a table
//! function's arguments must be constants when the plan is made, but
//! psycopg, asyncpg and JDBC prepare `SELECT * FROM culprits($1)` before
//! they bind `$1`. Such a statement is planned with its parameters as NULL
//! (for the result's columns, which do not depend on them), advertises its
//! parameters as `text` (what the client declared wins), and is planned
//! again with the bound values as literals when it runs.
//!
//! Every statement is admitted by the gate (`policy.rs`) before anything
//! else here; a deferred statement keeps the very tree the gate admitted
//! and is run from it, never re-parsed from text.

use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{visit_expressions_mut, Expr, Value};
use datafusion_postgres::Parser;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::results::{FieldInfo, QueryResponse};
use pgwire::api::stmt::QueryParser;
use pgwire::api::{ClientInfo, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::types::format::FormatOptions;

pub type Stmt = <Parser as QueryParser>::Statement;

/// Marks a statement whose parameters are bound into its text at execution.
const DEFERRED: &str = "/* culprit: bound at execution */ ";

pub struct CulpritParser {
    pub inner: Arc<Parser>,
    pub ctx: Arc<SessionContext>,
    pub gate: Arc<crate::policy::Gate>,
}

/// Replaces `$n` by `value(n)`; returns the highest `n` seen.
fn substitute(
    stmt: &mut datafusion::sql::sqlparser::ast::Statement,
    value: &dyn Fn(usize) -> Value,
) -> usize {
    let mut max = 0;
    let _ = visit_expressions_mut(stmt, |e: &mut Expr| {
        if let Expr::Value(v) = e {
            if let Value::Placeholder(p) = &v.value {
                if let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
                    max = max.max(n);
                    *e = Expr::value(value(n));
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    max
}

pub fn is_deferred(stmt: &Stmt) -> bool {
    stmt.0.starts_with(DEFERRED)
}

fn parameter_count(stmt: &Stmt) -> usize {
    stmt.1
        .as_ref()
        .map(|(s, _)| substitute(&mut s.clone(), &|_| Value::Null))
        .unwrap_or(0)
}

#[async_trait]
impl QueryParser for CulpritParser {
    type Statement = Stmt;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let sql = &crate::rewrite::before_parse(sql);
        let mut admitted = self.gate.admit(sql, &crate::handlers::user_of(client))?;
        if admitted.len() > 1 {
            return Err(PgWireError::UserError(Box::new(
                pgwire::error::ErrorInfo::new(
                    "ERROR".into(),
                    crate::sqlstate::SYNTAX_ERROR.into(),
                    "cannot insert multiple commands into a prepared statement".into(),
                ),
            )));
        }
        let err = match self.inner.parse_sql(client, sql, types).await {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        let Some(original) = admitted.pop() else {
            return Err(err);
        };
        let mut nulled = original.clone();
        if substitute(&mut nulled, &|_| Value::Null) == 0 {
            return Err(err);
        }
        let plan = match self
            .ctx
            .state()
            .statement_to_plan(DfStatement::Statement(Box::new(nulled)))
            .await
        {
            Ok(p) => p,
            Err(_) => return Err(err),
        };
        Ok(Some((format!("{DEFERRED}{sql}"), Some((original, plan)))))
    }

    fn get_parameter_types(&self, stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        if is_deferred(stmt) {
            return Ok(vec![Type::TEXT; parameter_count(stmt)]);
        }
        self.inner.get_parameter_types(stmt)
    }

    fn get_result_schema(
        &self,
        stmt: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        check_result_formats(stmt, column_format)?;
        self.inner.get_result_schema(stmt, column_format)
    }
}

/// The number of result columns a statement returns (0 for DDL and DML).
fn result_columns(stmt: &Stmt) -> usize {
    match &stmt.1 {
        Some((_, plan))
            if !matches!(
                plan,
                datafusion::logical_expr::LogicalPlan::Ddl(_)
                    | datafusion::logical_expr::LogicalPlan::Dml(_)
            ) =>
        {
            plan.schema().fields().len()
        }
        _ => 0,
    }
}

/// A Bind's result format codes: none, one for all columns, or one per
/// column (PostgreSQL's rule; pgwire would index past a shorter list).
pub fn check_result_formats(stmt: &Stmt, format: Option<&Format>) -> PgWireResult<()> {
    if let Some(Format::Individual(codes)) = format {
        let columns = result_columns(stmt);
        if codes.len() != columns {
            return Err(PgWireError::UserError(Box::new(
                pgwire::error::ErrorInfo::new(
                    "ERROR".into(),
                    "08P01".into(),
                    format!(
                        "bind message has {} result formats but query has {columns} columns",
                        codes.len()
                    ),
                ),
            )));
        }
    }
    Ok(())
}

/// Runs a deferred statement with the portal's values bound as literals.
pub async fn run_deferred<C: ClientInfo>(
    ctx: &SessionContext,
    client: &C,
    portal: &Portal<Stmt>,
) -> PgWireResult<QueryResponse> {
    let (admitted, _) = portal
        .statement
        .statement
        .1
        .as_ref()
        .ok_or_else(|| PgWireError::ApiError("a deferred statement without its tree".into()))?;
    let mut stmt = admitted.clone();
    let types = &portal.statement.parameter_types;
    let mut values = Vec::with_capacity(portal.parameter_len());
    for i in 0..portal.parameter_len() {
        // The client's declared type decodes the value; text otherwise.
        let ty = types.get(i).cloned().flatten().unwrap_or(Type::TEXT);
        let v: Option<String> = match ty {
            Type::INT2 => portal.parameter::<i16>(i, &ty)?.map(|x| x.to_string()),
            Type::INT4 => portal.parameter::<i32>(i, &ty)?.map(|x| x.to_string()),
            Type::INT8 => portal.parameter::<i64>(i, &ty)?.map(|x| x.to_string()),
            Type::FLOAT4 => portal.parameter::<f32>(i, &ty)?.map(|x| x.to_string()),
            Type::FLOAT8 => portal.parameter::<f64>(i, &ty)?.map(|x| x.to_string()),
            Type::TIMESTAMPTZ => portal
                .parameter::<chrono::DateTime<chrono::FixedOffset>>(i, &ty)?
                .map(|x| x.to_rfc3339()),
            Type::TIMESTAMP => portal
                .parameter::<chrono::NaiveDateTime>(i, &ty)?
                .map(|x| x.to_string()),
            _ => portal.parameter::<String>(i, &Type::TEXT)?,
        };
        values.push(v);
    }
    substitute(
        &mut stmt,
        &|n| match n.checked_sub(1).and_then(|i| values.get(i)) {
            Some(Some(v)) => Value::SingleQuotedString(v.clone()),
            _ => Value::Null,
        },
    );
    // Planned from the admitted tree (values now literals), not from text.
    let df_err = |e| PgWireError::ApiError(Box::new(e));
    let plan = ctx
        .state()
        .statement_to_plan(DfStatement::Statement(Box::new(stmt)))
        .await
        .map_err(df_err)?;
    let df = ctx.execute_logical_plan(plan).await.map_err(df_err)?;
    let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
    datafusion_postgres::arrow_pg::datatypes::df::encode_dataframe(
        df,
        &portal.result_column_format,
        Some(options),
    )
    .await
}
