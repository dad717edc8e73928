//! psqlODBC's catalog queries (SQLForeignKeys, as Excel, Power BI and
//! Tableau call it through the ODBC driver).
//!
//! `generate_series(array_lower(conkey, 1), array_upper(conkey, 1)) AS i`
//! in a select list: PostgreSQL returns one row per value (a set-returning
//! function in a projection); DataFusion's scalar `generate_series` returns
//! one list. `unnest` of that list is PostgreSQL's answer (here over an
//! empty `pg_constraint`, so no rows either way, but `conkey[i]` must plan).

use datafusion::sql::sqlparser::ast::{Expr, Query, SelectItem};

use super::ast::{call, last_name, select_mut};

/// Each select item that is a bare `generate_series(..)` call, unnested.
pub(super) fn series_in_projection(q: &mut Query) -> bool {
    let Some(select) = select_mut(q) else {
        return false;
    };
    let mut changed = false;
    for item in &mut select.projection {
        let expr = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => continue,
        };
        if let Expr::Function(f) = expr {
            if last_name(&f.name) == "generate_series" {
                *expr = call("unnest", vec![expr.clone()]);
                changed = true;
            }
        }
    }
    changed
}
