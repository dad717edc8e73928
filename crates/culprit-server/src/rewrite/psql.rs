//! psql 15 and 17, `\d+ table`: the table's storage options,
//! `pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x
//! from pg_catalog.unnest(tc.reloptions) x), ', ')`, and the columns'
//! `attoptions`. culprit's catalog has no `reloptions` or `attoptions`
//! columns and DataFusion cannot plan `ARRAY(subquery)`; culprit's tables
//! have no storage options and no toast tables, so every one of these is
//! NULL in PostgreSQL too, and the rules fold them to NULL:
//! - `x.reloptions`, `x.attoptions` -> NULL;
//! - `ARRAY(SELECT ... FROM unnest(NULL) x)` -> NULL (nothing to unnest);
//! - `NULL || NULL` (any operator over two NULLs) -> NULL;
//! - `array_to_string(NULL, ...)` -> NULL.
//!
//! (Scalar subqueries over always-empty catalog tables, which psql's `\d`
//! also sends, are SQLAlchemy's rule, `sqlalchemy.rs`.)

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, TableFactor,
};

use super::ast::{call_args, is_null, last_name, null, select};

/// Columns of PostgreSQL's catalog that culprit's catalog lacks, all NULL
/// for its tables (no storage options).
const NULL_COLUMNS: &[&str] = &["reloptions", "attoptions"];

/// `ARRAY(SELECT ... FROM unnest(NULL) x)`: the empty array of a NULL.
fn array_of_unnest_null(e: &Expr) -> bool {
    let Expr::Function(f) = e else { return false };
    if last_name(&f.name) != "array" {
        return false;
    }
    let FunctionArguments::Subquery(q) = &f.args else {
        return false;
    };
    let Some(s) = select(q) else { return false };
    s.from.len() == 1
        && s.from[0].joins.is_empty()
        && match &s.from[0].relation {
            TableFactor::Table {
                name,
                args: Some(args),
                ..
            } => last_name(name) == "unnest"
                && args.args.iter().all(
                    |a| matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) if is_null(e)),
                ),
            TableFactor::UNNEST { array_exprs, .. } => array_exprs.iter().all(is_null),
            _ => false,
        }
}

/// Whether `e` is one of the forms above, NULL here.
fn always_null(e: &Expr) -> bool {
    match e {
        Expr::CompoundIdentifier(parts) => {
            parts.len() == 2 && NULL_COLUMNS.contains(&parts[1].value.to_ascii_lowercase().as_str())
        }
        Expr::BinaryOp { left, right, .. } => is_null(left) && is_null(right),
        Expr::Function(f) if last_name(&f.name) == "array_to_string" => {
            call_args(f).is_some_and(|a| a.first().is_some_and(|x| is_null(x)))
        }
        Expr::Function(_) => array_of_unnest_null(e),
        _ => false,
    }
}

/// Applies the rules to one expression (its parts already rewritten);
/// returns whether it changed.
pub(super) fn rewrite_expr(e: &mut Expr) -> bool {
    if always_null(e) {
        *e = null();
        return true;
    }
    false
}
