//! SQLAlchemy 2.1, `inspect().get_columns(table)` (through psycopg 3, with
//! its values as `$n` parameters): correlated scalar subqueries over the
//! catalog inside `CASE` branches (a column's default from `pg_attrdef`,
//! its identity from `pg_sequence`, its collation through `pg_type`).
//! DataFusion cannot decorrelate a scalar subquery that is not an
//! aggregate, and datafusion-postgres only removes those at the top of a
//! projection. psql's `\d` sends the `pg_attrdef` one too. Two rules,
//! exact over culprit's catalog:
//! - a subquery over tables culprit always leaves empty (no defaults,
//!   sequences, ...) returns no row: NULL, still naming the query's
//!   parameters (clients bind every parameter of the statement they sent,
//!   and the server maps them by position);
//! - any other subquery over catalog tables gets its value wrapped in
//!   `max()`: a scalar subquery gives at most one row, whose max is itself,
//!   and an aggregate DataFusion decorrelates.
//!
//! Its primary key, unique constraint and index reflection pairs each key
//! column with its position: `unnest(indkey) AS attnum,
//! generate_subscripts(indkey, 1) AS ord`, two set-returning functions of
//! one array, zipped row by row. DataFusion has no `generate_subscripts`;
//! the positions of a one-dimensional array from 1 are `unnest(range(1,
//! cardinality(a) + 1))`, and DataFusion zips the unnests of one
//! projection the same way. A `$n` dimension (psycopg 3) is kept in the
//! bound, times zero, so the client's parameters still line up.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, JoinOperator, Query, Select, SelectItem, SetExpr,
    TableFactor, Value, Visit, Visitor,
};

use super::ast::{
    args_of, binary, call, case_when, cast_to_bigint, is_catalog_name, last_name, null,
    placeholder, select, select_mut, strip_casts,
};

/// Catalog tables culprit always leaves empty: it has no column defaults,
/// sequences, inheritance, row policies, extended statistics,
/// publications, triggers or foreign and partitioned tables.
const EMPTY_TABLES: &[&str] = &[
    "pg_attrdef",
    "pg_sequence",
    "pg_inherits",
    "pg_policy",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_rel",
    "pg_trigger",
    "pg_foreign_table",
    "pg_partitioned_table",
];

const AGGREGATES: &[&str] = &[
    "max",
    "min",
    "count",
    "sum",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
];

/// The tables of a subquery's FROM (`None` when anything else is there).
fn catalog_tables(s: &Select) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for twj in &s.from {
        for f in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            match f {
                TableFactor::Table {
                    name, args: None, ..
                } if is_catalog_name(name) => out.push(last_name(name)),
                _ => return None,
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

fn is_aggregate(e: &Expr) -> bool {
    match e {
        Expr::Function(f) => AGGREGATES.contains(&last_name(&f.name).as_str()),
        Expr::Nested(e) => is_aggregate(e),
        _ => false,
    }
}

/// Whether a subquery over `tables` (its FROM, in order) returns no row:
/// its first table is always empty, or any is and all joins are inner.
fn always_empty(s: &Select, tables: &[String]) -> bool {
    let inner = s.from.iter().all(|twj| {
        twj.joins.iter().all(|j| {
            matches!(
                j.join_operator,
                JoinOperator::Inner(_) | JoinOperator::Join(_)
            )
        })
    });
    let empty = |t: &String| EMPTY_TABLES.contains(&t.as_str());
    empty(&tables[0]) || (inner && tables.iter().any(empty))
}

/// The query's parameters, each once: `$n`, or `$n::type` as written.
fn parameters(q: &Query) -> Vec<Expr> {
    struct Parameters(Vec<Expr>);
    impl Parameters {
        fn seen(&self, p: &str) -> bool {
            self.0.iter().any(|e| match e {
                Expr::Cast { expr, .. } => placeholder(expr) == Some(p),
                e => placeholder(e) == Some(p),
            })
        }
    }
    impl Visitor for Parameters {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            match e {
                Expr::Cast { expr, .. } if placeholder(expr).is_some() => self.0.push(e.clone()),
                e if placeholder(e).is_some_and(|p| !self.seen(p)) => self.0.push(e.clone()),
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut found = Parameters(Vec::new());
    let _ = q.visit(&mut found);
    found.0
}

/// NULL, still naming the query's parameters:
/// `CASE WHEN $1 IS NULL OR $2 IS NULL THEN NULL END`.
fn null_keeping_parameters(q: &Query) -> Expr {
    let test = parameters(q)
        .into_iter()
        .map(|p| Expr::IsNull(Box::new(p)))
        .reduce(|a, b| binary(a, BinaryOperator::Or, b));
    match test {
        Some(test) => case_when(test, null()),
        None => null(),
    }
}

/// Wraps the one value of a subquery over catalog tables in `max()`;
/// returns whether it did.
fn aggregate_in_place(q: &mut Query) -> bool {
    if q.limit_clause.is_some() || q.fetch.is_some() {
        return false;
    }
    let Some(s) = select_mut(q) else { return false };
    if s.projection.len() != 1 || s.distinct.is_some() || s.having.is_some() {
        return false;
    }
    if !matches!(s.group_by, GroupByExpr::Expressions(ref v, _) if v.is_empty()) {
        return false;
    }
    let e = match &mut s.projection[0] {
        SelectItem::UnnamedExpr(e) => e,
        SelectItem::ExprWithAlias { expr, .. } => expr,
        _ => return false,
    };
    if is_aggregate(e) {
        return false;
    }
    let value = std::mem::replace(e, null());
    *e = call("max", vec![value]);
    true
}

/// Applies the rules to a scalar subquery expression; returns whether it
/// changed.
pub(super) fn rewrite_expr(e: &mut Expr) -> bool {
    let Expr::Subquery(q) = e else { return false };
    let Some(s) = select(q) else { return false };
    let Some(tables) = catalog_tables(s) else {
        return false;
    };
    if always_empty(s, &tables) {
        *e = null_keeping_parameters(q);
        return true;
    }
    aggregate_in_place(q)
}

/// SQLAlchemy's `startswith(..., autoescape=True)`, in the inspector's
/// schema list (`get_schema_names`, Superset's first call): `nspname NOT
/// LIKE 'pg/_' || '%' ESCAPE '/'`. DataFusion's LIKE takes only the
/// backslash as escape character, so the pattern's literals are rewritten
/// for it (`/x` becomes `\x`, a backslash `\\`) and the ESCAPE clause
/// dropped: the same matches. Only when the escape is one character.
pub(super) fn like_escape(e: &mut Expr) -> bool {
    let (Expr::Like {
        pattern,
        escape_char,
        ..
    }
    | Expr::ILike {
        pattern,
        escape_char,
        ..
    }) = e
    else {
        return false;
    };
    let Some(escape) = escape_char.as_ref().and_then(|v| match &v.value {
        Value::SingleQuotedString(s) => {
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) if c != '\\' => Some(c),
                _ => None,
            }
        }
        _ => None,
    }) else {
        return false;
    };
    re_escape(pattern, escape);
    *escape_char = None;
    true
}

fn re_escape(e: &mut Expr, escape: char) {
    match e {
        Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_)) => {
            if let Value::SingleQuotedString(s) = &mut v.value {
                let mut out = String::with_capacity(s.len() + 2);
                let mut chars = s.chars();
                while let Some(c) = chars.next() {
                    if c == escape {
                        out.push('\\');
                        if let Some(next) = chars.next() {
                            out.push(next);
                        }
                    } else if c == '\\' {
                        out.push_str("\\\\");
                    } else {
                        out.push(c);
                    }
                }
                *s = out;
            }
        }
        Expr::Nested(inner) => re_escape(inner, escape),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } => {
            re_escape(left, escape);
            re_escape(right, escape);
        }
        // A value known only when the statement runs (psycopg 3 binds the
        // prefix as `$1::VARCHAR`): the same rewrite, by two
        // `regexp_replace` calls: backslashes doubled, then `/x` as `\x`
        // (DataFusion reads `\\\1` as a backslash and group 1).
        other => {
            let text = |s: &str| Expr::value(Value::SingleQuotedString(s.to_string()));
            let doubled = call(
                "regexp_replace",
                vec![other.clone(), text(r"\\"), text(r"\\"), text("g")],
            );
            let escaped = if escape.is_ascii_alphanumeric() {
                escape.to_string()
            } else {
                format!(r"\{escape}")
            };
            *other = call(
                "regexp_replace",
                vec![
                    doubled,
                    text(&format!("{escaped}(.)")),
                    text(r"\\\1"),
                    text("g"),
                ],
            );
        }
    }
}

/// `generate_subscripts(a, 1)` as `unnest(range(1, cardinality(a) + 1))`.
pub(super) fn generate_subscripts(e: &mut Expr) -> bool {
    let Some(args) = args_of(e, "generate_subscripts") else {
        return false;
    };
    let [array, dim] = args.as_slice() else {
        return false;
    };
    let number = |n: &str| Expr::value(Value::Number(n.parse().expect("a number"), false));
    let end = binary(
        cast_to_bigint(call("cardinality", vec![(*array).clone()])),
        BinaryOperator::Plus,
        number("1"),
    );
    let end = match strip_casts(dim) {
        Expr::Value(v) if v.value.to_string() == "1" => end,
        d if placeholder(d).is_some() => binary(
            end,
            BinaryOperator::Plus,
            binary(
                number("0"),
                BinaryOperator::Multiply,
                cast_to_bigint((*dim).clone()),
            ),
        ),
        _ => return false,
    };
    *e = call("unnest", vec![call("range", vec![number("1"), end])]);
    true
}

/// `pg_get_viewdef(c.oid [, pretty])` (SQLAlchemy's `get_view_definition`,
/// DBeaver's view DDL) as `culprit_view_definition(c.relname)`: the
/// definition by the view's name, which the catalog knows.
pub(super) fn view_definition(e: &mut Expr) -> bool {
    let Some(args) = args_of(e, "pg_get_viewdef") else {
        return false;
    };
    let Some(Expr::CompoundIdentifier(parts)) = args.first().map(|a| strip_casts(a)) else {
        return false;
    };
    if !parts
        .last()
        .is_some_and(|p| p.value.eq_ignore_ascii_case("oid"))
    {
        return false;
    }
    let mut name = parts.clone();
    if let Some(last) = name.last_mut() {
        *last = datafusion::sql::sqlparser::ast::Ident::new("relname");
    }
    *e = call(
        "culprit_view_definition",
        vec![Expr::CompoundIdentifier(name)],
    );
    true
}

/// `pg_table_is_visible(oid)` (SQLAlchemy's `get_table_names()` without a
/// schema, psql's `\dt`, Superset's table list): the relation is visible
/// when its schema is the one unqualified names resolve in
/// (`current_schema()`, set by `search_path`) or `pg_catalog`. The built-in
/// answered true for every table, so `cron` and `reports` tables were
/// listed as if they were in `public`. By the relation's schema, looked up
/// in `pg_class` (a scalar subquery, which DataFusion decorrelates in a
/// projection as in a filter).
pub(super) fn table_is_visible(e: &mut Expr) -> bool {
    let Some(args) = args_of(e, "pg_table_is_visible") else {
        return false;
    };
    let [relation] = args.as_slice() else {
        return false;
    };
    let sql = format!(
        "(SELECT max(culprit_vis_n.nspname) FROM pg_catalog.pg_class culprit_vis_c \
         JOIN pg_catalog.pg_namespace culprit_vis_n ON culprit_vis_n.oid = culprit_vis_c.relnamespace \
         WHERE culprit_vis_c.oid = {relation}) IN (current_schema(), 'pg_catalog')"
    );
    let parsed = datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(&sql)
    .and_then(|mut p| p.parse_expr());
    match parsed {
        Ok(visible) => {
            *e = Expr::Nested(Box::new(visible));
            true
        }
        Err(_) => false,
    }
}

/// A bare call of a function the rules replace (`pg_table_is_visible`,
/// `pg_get_viewdef`) in a projection keeps the column name PostgreSQL
/// gives it, the function's name: it gets it as alias before the call is
/// rewritten. Changes no value.
pub(super) fn keep_function_names(q: &mut Query) {
    let SetExpr::Select(select) = q.body.as_mut() else {
        return;
    };
    for item in select.projection.iter_mut() {
        if let SelectItem::UnnamedExpr(e @ Expr::Function(_)) = item {
            let Expr::Function(f) = &*e else { continue };
            let name = last_name(&f.name);
            if matches!(name.as_str(), "pg_table_is_visible" | "pg_get_viewdef") {
                *item = SelectItem::ExprWithAlias {
                    expr: e.clone(),
                    alias: datafusion::sql::sqlparser::ast::Ident::new(name),
                };
            }
        }
    }
}
