//! Parameter values of the extended protocol, bound into a statement in one
//! of two ways:
//! - into the plan made at Parse ([`bind_into_plan`]): DataFusion's way, for
//!   statements it can plan with `$n` placeholders;
//! - into the tree the gate admitted ([`bind_into_tree`]), as literals, for a
//!   statement planned only at execution. A table function's arguments must
//!   be constants when the plan is made, but psycopg, asyncpg and JDBC
//!   prepare `SELECT * FROM culprits($1)` before they bind `$1`. Such a
//!   statement is planned at Parse with its parameters as NULL
//!   ([`with_nulls`]), only for the result's columns (which do not depend on
//!   them), and advertises its parameters as `text` (what the client
//!   declared wins).

use std::ops::ControlFlow;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::ParamValues;
use datafusion::logical_expr::{Expr as PlanExpr, LogicalPlan};
use datafusion::sql::sqlparser::ast::{visit_expressions_mut, Expr, Statement, Value};
use datafusion_postgres::arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use pgwire::api::portal::Portal;
use pgwire::api::Type;
use pgwire::error::{PgWireError, PgWireResult};

use crate::pipeline::AdmittedStatement;

/// Where a statement's parameter values come from.
#[derive(Clone, Copy)]
pub enum Values<'a> {
    /// None: the simple protocol's statements carry their values as
    /// literals.
    None,
    /// The values a Bind message gave the portal being executed.
    Portal(&'a Portal<AdmittedStatement>),
}

/// Replaces each `$n` of `tree` by `value(n)`; returns the highest `n` seen.
fn substitute(tree: &mut Statement, value: &dyn Fn(usize) -> Value) -> usize {
    let mut highest = 0;
    let _ = visit_expressions_mut(tree, |e: &mut Expr| {
        if let Expr::Value(v) = e {
            if let Value::Placeholder(p) = &v.value {
                if let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
                    highest = highest.max(n);
                    *e = Expr::value(value(n));
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    highest
}

/// `tree` with every parameter NULL, and its number of parameters (the
/// highest `$n`); `None` when it has no parameter.
pub fn with_nulls(tree: &Statement) -> Option<(Statement, usize)> {
    let mut nulled = tree.clone();
    let parameters = substitute(&mut nulled, &|_| Value::Null);
    (parameters > 0).then_some((nulled, parameters))
}

/// The text of the `i`th value of a portal (`None` for NULL), decoded with
/// the type the client declared for it (text when it declared none).
fn value_text(portal: &Portal<AdmittedStatement>, i: usize) -> PgWireResult<Option<String>> {
    let declared = portal.statement.parameter_types.get(i).cloned().flatten();
    let ty = declared.unwrap_or(Type::TEXT);
    Ok(match ty {
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
    })
}

/// `tree` with each `$n` replaced by the portal's `n`th value as a string
/// literal (DataFusion coerces it where a number or time is expected), or
/// NULL when the value is NULL or missing.
pub fn bind_into_tree(tree: &Statement, values: Values<'_>) -> PgWireResult<Statement> {
    let texts: Vec<Option<String>> = match values {
        Values::None => Vec::new(),
        Values::Portal(portal) => (0..portal.parameter_len())
            .map(|i| value_text(portal, i))
            .collect::<PgWireResult<_>>()?,
    };
    let mut bound = tree.clone();
    substitute(
        &mut bound,
        &|n| match n.checked_sub(1).and_then(|i| texts.get(i)) {
            Some(Some(text)) => Value::SingleQuotedString(text.clone()),
            _ => Value::Null,
        },
    );
    Ok(bound)
}

/// The data types DataFusion inferred for a plan's parameters, by position
/// (`$1` first). A placeholder DataFusion could not type takes the type it
/// is cast to (`$1::int`), as datafusion-postgres does.
fn inferred_types(plan: &LogicalPlan) -> datafusion::error::Result<Vec<Option<DataType>>> {
    let mut types = plan.get_parameter_types()?;
    if types.values().any(Option::is_none) {
        plan.apply(|node| {
            for expr in node.expressions() {
                expr.apply(|e| {
                    let (id, cast_to) = match e {
                        PlanExpr::Cast(cast) => match cast.expr.as_ref() {
                            PlanExpr::Placeholder(p) => (&p.id, Some(cast.field.data_type())),
                            _ => return Ok(TreeNodeRecursion::Continue),
                        },
                        PlanExpr::Placeholder(p) => (&p.id, None),
                        _ => return Ok(TreeNodeRecursion::Continue),
                    };
                    let slot = types.entry(id.clone()).or_insert(None);
                    if slot.is_none() {
                        *slot = cast_to.cloned();
                    }
                    Ok(TreeNodeRecursion::Continue)
                })?;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    }
    let mut ordered: Vec<(String, Option<DataType>)> = types.into_iter().collect();
    ordered.sort_by_key(|(id, _)| {
        id.trim_start_matches('$')
            .parse::<u32>()
            .unwrap_or(u32::MAX)
    });
    Ok(ordered.into_iter().map(|(_, ty)| ty).collect())
}

fn api_error(e: datafusion::error::DataFusionError) -> PgWireError {
    PgWireError::ApiError(Box::new(e))
}

/// `plan` with its placeholders replaced by the portal's values, decoded
/// with the types the client declared, else the wire types the server
/// advertised (`wire_types`), else the types DataFusion inferred.
pub fn bind_into_plan(
    plan: &LogicalPlan,
    wire_types: &[Type],
    values: Values<'_>,
) -> PgWireResult<LogicalPlan> {
    let decoded = match values {
        Values::None => ParamValues::List(vec![]),
        Values::Portal(portal) => {
            let inferred = inferred_types(plan).map_err(api_error)?;
            let inferred: Vec<Option<&DataType>> = inferred.iter().map(Option::as_ref).collect();
            let wire: Vec<Option<&Type>> = wire_types.iter().map(Some).collect();
            deserialize_parameters_with_server_types(portal, &inferred, &wire)?
        }
    };
    plan.clone()
        .replace_params_with_values(&decoded)
        .map_err(api_error)
}
