//! pgjdbc 42.x (DBeaver, Metabase): its type lookup and `getTypeInfo` ask
//! `typinput = 'pg_catalog.array_in'::regproc` of `pg_type`. In PostgreSQL
//! `typinput` is a `regproc`, an oid that prints as the function's name;
//! in the catalog culprit serves it holds the name as text. The
//! compatibility parser turns the cast into a lookup of the oid in
//! `pg_proc` (by the name as written, schema and all), and DataFusion then
//! casts the text column to an integer and fails on its first row
//! (`'boolin'`). The comparison is rewritten to hold for either kind of
//! column: equal when the column, as text, is the function's name (its
//! schema dropped) or its oid.
//!
//! Its key and index calls read the fields of a composite:
//! `(information_schema._pg_expandarray(i.indkey)).n`, `(i.keys).x`;
//! DataFusion plans a field access only on a column name, so the access
//! becomes `get_field(value, 'n')`, the same field of the same value.
//!
//! `getProcedures` selects `NULL, NULL, NULL` unnamed; PostgreSQL names
//! each `?column?` and allows the repeat, DataFusion refuses a projection
//! with two columns of one name. The repeats get a suffix (`NULL_2`); pgjdbc
//! reads those columns by position.

use datafusion::sql::sqlparser::ast::{
    AccessExpr, BinaryOperator, Expr, Ident, Query, SelectItem, SetExpr, TableFactor,
    UnaryOperator, Value,
};

use super::ast::{binary, call, cast_to_text, column_name, last_name, select};

/// The name a `'x'::regproc` lookup (as the compatibility parser leaves it:
/// `(SELECT oid FROM pg_catalog.pg_proc WHERE proname = x)`, perhaps with
/// `max(oid)`) looks up.
fn regproc_lookup(e: &Expr) -> Option<&Expr> {
    let Expr::Subquery(q) = (match e {
        Expr::Nested(inner) => inner.as_ref(),
        e => e,
    }) else {
        return None;
    };
    let s = select(q)?;
    let [from] = s.from.as_slice() else {
        return None;
    };
    let TableFactor::Table { name, .. } = &from.relation else {
        return None;
    };
    if last_name(name) != "pg_proc" || !from.joins.is_empty() {
        return None;
    }
    match s.selection.as_ref()? {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } if column_name(left) == "proname" => Some(right),
        _ => None,
    }
}

/// `name` without a leading `pg_catalog.`.
fn bare_name(name: &Expr) -> Expr {
    call(
        "regexp_replace",
        vec![
            name.clone(),
            Expr::value(Value::SingleQuotedString(r"^pg_catalog\.".into())),
            Expr::value(Value::SingleQuotedString(String::new())),
        ],
    )
}

/// `column = 'f'::regproc` (either side, `=` or `<>`) as a comparison of
/// the column's text with the function's name or oid.
pub fn rewrite_expr(e: &mut Expr) -> bool {
    let Expr::BinaryOp { left, op, right } = e else {
        return false;
    };
    let negated = match op {
        BinaryOperator::Eq => false,
        BinaryOperator::NotEq => true,
        _ => return false,
    };
    let (column, lookup, name) = match (regproc_lookup(left), regproc_lookup(right)) {
        (None, Some(name)) => (left.as_ref(), right.as_ref(), name),
        (Some(name), None) => (right.as_ref(), left.as_ref(), name),
        _ => return false,
    };
    let text = cast_to_text(column.clone());
    let by_name = binary(text.clone(), BinaryOperator::Eq, bare_name(name));
    // No such function: no oid to equal.
    let by_oid = call(
        "coalesce",
        vec![
            binary(text, BinaryOperator::Eq, cast_to_text(lookup.clone())),
            Expr::value(Value::Boolean(false)),
        ],
    );
    let either = Expr::Nested(Box::new(binary(by_name, BinaryOperator::Or, by_oid)));
    *e = if negated {
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: Box::new(either),
        }
    } else {
        either
    };
    true
}

/// `(value).field` (a field of a composite in parentheses) as
/// `get_field(value, 'field')`, one access after another.
pub fn field_access(e: &mut Expr) -> bool {
    let Expr::CompoundFieldAccess { root, access_chain } = e else {
        return false;
    };
    let Expr::Nested(inner) = root.as_ref() else {
        return false;
    };
    let fields: Option<Vec<String>> = access_chain
        .iter()
        .map(|a| match a {
            AccessExpr::Dot(Expr::Identifier(field)) => Some(field.value.clone()),
            _ => None,
        })
        .collect();
    let Some(fields) = fields else {
        return false;
    };
    *e = fields
        .into_iter()
        .fold(inner.as_ref().clone(), |value, field| {
            call(
                "get_field",
                vec![value, Expr::value(Value::SingleQuotedString(field))],
            )
        });
    true
}

/// Unnamed projections that would repeat a name get `_2`, `_3`, ...
pub fn unique_names(q: &mut Query) -> bool {
    let SetExpr::Select(select) = q.body.as_mut() else {
        return false;
    };
    let mut seen: Vec<String> = Vec::new();
    let mut changed = false;
    for item in select.projection.iter_mut() {
        let name = match item {
            SelectItem::UnnamedExpr(e) => e.to_string(),
            SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
            _ => continue,
        };
        let repeats = seen.iter().filter(|n| **n == name).count();
        seen.push(name.clone());
        if repeats == 0 {
            continue;
        }
        if let SelectItem::UnnamedExpr(e) = item {
            *item = SelectItem::ExprWithAlias {
                expr: e.clone(),
                alias: Ident::new(format!("{name}_{}", repeats + 1)),
            };
            changed = true;
        }
    }
    changed
}
