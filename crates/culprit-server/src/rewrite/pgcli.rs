//! pgcli 4.7, its function list (`functions()`): `proargtypes`,
//! `proallargtypes` cast to `regtype[]`, `proargnames` and `proargmodes`
//! as arrays, and `prorettype::regtype::text`. culprit's `pg_proc` keeps
//! these arrays as text, and DataFusion has no `regtype`; the rules call
//! culprit's functions that give what PostgreSQL gives (`compat.rs`):
//! - `proargtypes::...` / `proallargtypes::...` ->
//!   `culprit_regtype_names(col)`, the array of type names;
//! - `prorettype::regtype::text` ->
//!   `culprit_regtype_name(CAST(prorettype AS TEXT))`, the type's name;
//! - `proargnames`, `proargmodes` -> `culprit_text_array(col)`, the array;
//! - a bare `proallargtypes` in a projection (pgjdbc's `getFunctionColumns`
//!   reads it with `getArray` as `Long[]`) -> `culprit_oid_array(col) AS
//!   proallargtypes`, an `int8[]` (PostgreSQL's `oid[]`, which pgjdbc also
//!   reads as longs).

use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr};

use super::ast::{call, cast_to_text, column_name, strip_casts};

/// pg_proc's oid arrays and text arrays, kept as text by culprit's catalog.
const PROC_OID_ARRAYS: &[&str] = &["proargtypes", "proallargtypes"];
const PROC_TEXT_ARRAYS: &[&str] = &["proargnames", "proargmodes"];

fn replacement(e: &Expr) -> Option<Expr> {
    match e {
        Expr::Cast { expr, .. } if PROC_OID_ARRAYS.contains(&column_name(expr).as_str()) => {
            Some(call("culprit_regtype_names", vec![(**expr).clone()]))
        }
        Expr::Cast {
            expr, data_type, ..
        } if data_type.to_string().eq_ignore_ascii_case("text")
            && column_name(strip_casts(expr)) == "prorettype" =>
        {
            let column = strip_casts(expr).clone();
            Some(call("culprit_regtype_name", vec![cast_to_text(column)]))
        }
        Expr::Identifier(_) | Expr::CompoundIdentifier(_)
            if PROC_TEXT_ARRAYS.contains(&column_name(e).as_str()) =>
        {
            Some(call("culprit_text_array", vec![e.clone()]))
        }
        _ => None,
    }
}

/// Applies the rules to one expression (its parts already rewritten);
/// returns whether it changed.
pub(super) fn rewrite_expr(e: &mut Expr) -> bool {
    match replacement(e) {
        Some(r) => {
            *e = r;
            true
        }
        None => false,
    }
}

/// A bare `proargnames` or `proargmodes` in a projection keeps its name
/// once [`rewrite_expr`] wraps it (pgjdbc's `getFunctionColumns` reads the
/// column `proargnames` by name): it gets itself as alias, before its
/// expression is rewritten. A bare `proallargtypes` becomes its array here
/// (inside a cast, [`rewrite_expr`] turns it into type names). Returns
/// whether the query changed.
pub(super) fn keep_names(q: &mut Query) -> bool {
    let SetExpr::Select(select) = q.body.as_mut() else {
        return false;
    };
    let mut changed = false;
    for item in select.projection.iter_mut() {
        if let SelectItem::UnnamedExpr(e @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_))) =
            item
        {
            let name = column_name(e);
            if PROC_TEXT_ARRAYS.contains(&name.as_str()) {
                *item = SelectItem::ExprWithAlias {
                    expr: e.clone(),
                    alias: Ident::new(name),
                };
            } else if name == "proallargtypes" {
                *item = SelectItem::ExprWithAlias {
                    expr: call("culprit_oid_array", vec![e.clone()]),
                    alias: Ident::new(name),
                };
                changed = true;
            }
        }
    }
    changed
}
