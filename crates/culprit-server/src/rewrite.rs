//! Catalog queries of real clients that DataFusion cannot plan as written,
//! rewritten into SQL with the same answer over culprit's catalog. Each rule
//! names the client it is for and why the rewrite is exact here. Only
//! statements that read `pg_catalog` or `information_schema` are touched;
//! user queries over culprit's tables keep DataFusion's own semantics.
//!
//! The rules add to datafusion-postgres' own (which already turn correlated
//! subqueries at the top of a projection into NULL); these reach into `CASE`
//! branches, `ARRAY(subquery)`, functions in `FROM`, and `user`.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, GroupByExpr, Ident, JoinOperator, ObjectName, Query, Select, SelectItem,
    SetExpr, Statement, TableAliasColumnDef, TableFactor, Value, Visit, VisitMut, Visitor,
    VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

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

/// Columns of PostgreSQL's catalog that culprit's catalog lacks, all NULL
/// for its tables (no storage options).
const NULL_COLUMNS: &[&str] = &["reloptions", "attoptions"];

/// pg_proc's oid arrays and text arrays, kept as text by culprit's catalog.
const PROC_OID_ARRAYS: &[&str] = &["proargtypes", "proallargtypes"];
const PROC_TEXT_ARRAYS: &[&str] = &["proargnames", "proargmodes"];

/// The column an identifier names, lower case ("" for other expressions).
fn column_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.to_ascii_lowercase(),
        Expr::CompoundIdentifier(p) => p
            .last()
            .map(|i| i.value.to_ascii_lowercase())
            .unwrap_or_default(),
        Expr::Nested(e) => column_name(e),
        _ => String::new(),
    }
}

fn strip_casts(e: &Expr) -> &Expr {
    match e {
        Expr::Cast { expr, .. } | Expr::Nested(expr) => strip_casts(expr),
        _ => e,
    }
}

/// Scalar functions some clients call in `FROM` (one row, one column named
/// by the alias, as PostgreSQL does).
const SCALAR_IN_FROM: &[&str] = &["string_to_array", "regexp_split_to_array"];

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

fn last_name(n: &ObjectName) -> String {
    n.0.last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_ascii_lowercase())
        .unwrap_or_default()
}

fn is_catalog_name(n: &ObjectName) -> bool {
    let parts: Vec<String> =
        n.0.iter()
            .filter_map(|p| p.as_ident())
            .map(|i| i.value.to_ascii_lowercase())
            .collect();
    match parts.as_slice() {
        [schema, _] => schema == "pg_catalog" || schema == "information_schema",
        [t] => t.starts_with("pg_"),
        _ => false,
    }
}

/// Does the statement read the catalog at all?
fn reads_catalog(stmt: &Statement) -> bool {
    struct V(bool);
    impl Visitor for V {
        type Break = ();
        fn pre_visit_relation(&mut self, r: &ObjectName) -> ControlFlow<()> {
            if is_catalog_name(r) {
                self.0 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = V(false);
    let _ = stmt.visit(&mut v);
    v.0
}

/// NULL, still naming the query's parameters (`$n`, with their casts):
/// clients bind every parameter of the statement they sent, and the
/// server maps them by position.
fn null_keeping_parameters(q: &Query) -> Expr {
    struct P(Vec<String>);
    impl Visitor for P {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            let is_param =
                |e: &Expr| matches!(e, Expr::Value(v) if matches!(v.value, Value::Placeholder(_)));
            match e {
                Expr::Cast { expr, .. } if is_param(expr) => self.0.push(e.to_string()),
                Expr::Value(_)
                    if is_param(e) && !self.0.iter().any(|p| p.contains(&e.to_string())) =>
                {
                    self.0.push(e.to_string())
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut p = P(Vec::new());
    let _ = q.visit(&mut p);
    if p.0.is_empty() {
        return null();
    }
    let test =
        p.0.iter()
            .map(|p| format!("{p} IS NULL"))
            .collect::<Vec<_>>()
            .join(" OR ");
    parse(&format!("CASE WHEN {test} THEN NULL END")).unwrap_or_else(null)
}

/// An expression written as SQL.
fn parse(sql: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

/// The unnamed expression arguments of a call (`None` for any other form).
fn call_args(f: &Function) -> Option<Vec<&Expr>> {
    let FunctionArguments::List(l) = &f.args else {
        return None;
    };
    l.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}

/// `name(args)`.
fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn null() -> Expr {
    Expr::value(Value::Null)
}

fn is_null(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => v.value == Value::Null,
        Expr::Nested(e) => is_null(e),
        Expr::Cast { expr, .. } => is_null(expr),
        _ => false,
    }
}

/// The only SELECT of a query, if it is one.
fn select(q: &Query) -> Option<&Select> {
    match q.body.as_ref() {
        SetExpr::Select(s) => Some(s),
        _ => None,
    }
}

fn select_mut(q: &mut Query) -> Option<&mut Select> {
    match q.body.as_mut() {
        SetExpr::Select(s) => Some(s),
        _ => None,
    }
}

/// The tables of a subquery's FROM (`None` when anything else is there).
fn tables(s: &Select) -> Option<Vec<String>> {
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

/// A scalar subquery over catalog tables: NULL when they are always empty
/// (returned), else its value wrapped in `max()` in place (`changed` set)
/// so DataFusion can decorrelate it (a scalar subquery gives at most one
/// row, whose max is itself).
fn scalar_subquery(q: &mut Query, changed: &mut bool) -> Option<Expr> {
    let s = select(q)?;
    let t = tables(s)?;
    // Empty when the first table is, or when any is and all joins are inner.
    let inner = s.from.iter().all(|twj| {
        twj.joins.iter().all(|j| {
            matches!(
                j.join_operator,
                JoinOperator::Inner(_) | JoinOperator::Join(_)
            )
        })
    });
    let empty = |t: &String| EMPTY_TABLES.contains(&t.as_str());
    if empty(&t[0]) || (inner && t.iter().any(empty)) {
        return Some(null_keeping_parameters(q));
    }
    if q.limit_clause.is_some() || q.fetch.is_some() {
        return None;
    }
    let s = select_mut(q)?;
    if s.projection.len() != 1 || s.distinct.is_some() || s.having.is_some() {
        return None;
    }
    if !matches!(s.group_by, GroupByExpr::Expressions(ref v, _) if v.is_empty()) {
        return None;
    }
    let e = match &mut s.projection[0] {
        SelectItem::UnnamedExpr(e) => e,
        SelectItem::ExprWithAlias { expr, .. } => expr,
        _ => return None,
    };
    if !is_aggregate(e) {
        let inner = std::mem::replace(e, null());
        *e = call("max", vec![inner]);
        *changed = true;
    }
    None
}

/// `ARRAY(SELECT ... FROM unnest(NULL) x)`: the empty array of a NULL
/// (psql `\d+`: the toast table's options, which culprit's tables lack).
fn array_subquery(e: &Expr) -> bool {
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

/// `array_lower(x, 1)`: lists start at 1, so `CASE WHEN cardinality(x) > 0
/// THEN 1 END` (NULL for an empty or NULL array, as PostgreSQL). Grafana's
/// table list needs it: with `array_lower` in `generate_series` and a
/// `CASE` over the rows, DataFusion 55 plans its `IN (subquery)` as
/// `= ''` and finds no table.
fn array_lower(f: &Function) -> Option<Expr> {
    let [x, dim] = call_args(f)?[..] else {
        return None;
    };
    if dim.to_string() != "1" {
        return None;
    }
    parse(&format!("CASE WHEN cardinality({x}) > 0 THEN 1 END"))
}

/// `(SELECT string_to_array(...) AS s) AS s` for `string_to_array(...) s`
/// in FROM; `generate_series(...) AS i(i)` for `generate_series(...) AS i`
/// (PostgreSQL names the column of a one-column function after the alias).
/// Returns whether it changed `f`.
fn table_factor(f: &mut TableFactor) -> bool {
    let TableFactor::Table {
        name,
        args: Some(args),
        alias: Some(alias),
        ..
    } = f
    else {
        return false;
    };
    let fname = last_name(name);
    if fname == "generate_series" && alias.columns.is_empty() {
        alias
            .columns
            .push(TableAliasColumnDef::from_name(alias.name.value.clone()));
        return true;
    }
    if !SCALAR_IN_FROM.contains(&fname.as_str()) || !alias.columns.is_empty() {
        return false;
    }
    let call = format!(
        "SELECT {name}({}) AS {}",
        args.args
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        alias.name
    );
    let Ok(query) = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&call)
        .and_then(|mut p| p.parse_query())
    else {
        return false;
    };
    *f = TableFactor::Derived {
        lateral: false,
        subquery: query,
        alias: Some(alias.clone()),
        sample: None,
    };
    true
}

/// In a SELECT reading no table (only functions), a bare `user` is
/// PostgreSQL's `current_user`, not a column (Grafana's table list).
/// Returns whether it changed `s`.
fn bare_user(s: &mut Select) -> bool {
    let no_tables = !s.from.is_empty()
        && s.from.iter().all(|twj| {
            twj.joins.is_empty()
                && matches!(
                    twj.relation,
                    TableFactor::Derived { .. } | TableFactor::Table { args: Some(_), .. }
                )
        });
    if !no_tables {
        return false;
    }
    let mut changed = false;
    let _ = visit_expressions_mut(&mut s.projection, |e: &mut Expr| {
        let user = match e {
            Expr::Identifier(i) => i.quote_style.is_none() && i.value.eq_ignore_ascii_case("user"),
            Expr::Function(f) => {
                matches!(f.args, FunctionArguments::None) && last_name(&f.name) == "user"
            }
            _ => false,
        };
        if user {
            *e = call("session_user", vec![]);
            changed = true;
        }
        ControlFlow::<()>::Continue(())
    });
    changed
}

struct Rules {
    changed: bool,
}

impl VisitorMut for Rules {
    type Break = ();

    fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        if let Some(s) = select_mut(q) {
            self.changed |= bare_user(s);
            for twj in &mut s.from {
                self.changed |= table_factor(&mut twj.relation);
                for j in &mut twj.joins {
                    self.changed |= table_factor(&mut j.relation);
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let replace = match e {
            Expr::CompoundIdentifier(parts)
                if parts.len() == 2
                    && NULL_COLUMNS.contains(&parts[1].value.to_ascii_lowercase().as_str()) =>
            {
                Some(null())
            }
            Expr::BinaryOp { left, right, .. } if is_null(left) && is_null(right) => Some(null()),
            // pg_proc's arrays are text in culprit's catalog (pgcli's
            // function list): as the arrays PostgreSQL gives.
            Expr::Cast { expr, .. } if PROC_OID_ARRAYS.contains(&column_name(expr).as_str()) => {
                Some(call("culprit_regtype_names", vec![(**expr).clone()]))
            }
            // `prorettype::regtype::text`: the type's name.
            Expr::Cast {
                expr, data_type, ..
            } if data_type.to_string().eq_ignore_ascii_case("text")
                && column_name(strip_casts(expr)) == "prorettype" =>
            {
                let col = strip_casts(expr);
                parse(&format!("culprit_regtype_name(CAST({col} AS TEXT))"))
            }
            Expr::Identifier(_) | Expr::CompoundIdentifier(_)
                if PROC_TEXT_ARRAYS.contains(&column_name(e).as_str()) =>
            {
                Some(call("culprit_text_array", vec![e.clone()]))
            }
            Expr::Function(f)
                if last_name(&f.name) == "array_to_string"
                    && call_args(f).is_some_and(|a| a.first().is_some_and(|x| is_null(x))) =>
            {
                Some(null())
            }
            Expr::Function(_) if array_subquery(e) => Some(null()),
            Expr::Function(f) if last_name(&f.name) == "array_lower" => array_lower(f),
            Expr::Subquery(q) => scalar_subquery(q, &mut self.changed),
            _ => None,
        };
        if let Some(r) = replace {
            *e = r;
            self.changed = true;
        }
        ControlFlow::Continue(())
    }
}

/// Text-level changes made before datafusion-postgres parses a query.
/// Its parser swaps Grafana's `search_path` subquery for `''` (written
/// before `current_setting` existed), so the table list came back empty;
/// qualifying `array_lower` keeps that substitution from matching, and the
/// rules here then run the subquery for real.
pub fn before_parse(sql: &str) -> std::borrow::Cow<'_, str> {
    if sql.contains("current_setting('search_path')") && sql.contains("array_lower(string_to_array")
    {
        sql.replace(
            "array_lower(string_to_array",
            "pg_catalog.array_lower(string_to_array",
        )
        .into()
    } else {
        sql.into()
    }
}

/// Rewrites a catalog statement; `None` when there is nothing to change.
pub fn rewrite(stmt: &Statement) -> Option<Statement> {
    if !reads_catalog(stmt) {
        return None;
    }
    let mut s = stmt.clone();
    let mut rules = Rules { changed: false };
    let _ = VisitMut::visit(&mut s, &mut rules);
    rules.changed.then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0)
    }

    fn rw(sql: &str) -> String {
        rewrite(&one(sql)).map_or("unchanged".into(), |s| s.to_string())
    }

    #[test]
    fn user_queries_are_untouched() {
        assert_eq!(
            rw("SELECT user, (SELECT max(x) FROM t WHERE t.a = q.a) FROM queries q"),
            "unchanged"
        );
    }

    #[test]
    fn subqueries_over_empty_tables_are_null() {
        assert_eq!(
            rw("SELECT CASE WHEN a.atthasdef THEN (SELECT d.adbin FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid) ELSE NULL END FROM pg_catalog.pg_attribute a"),
            "SELECT CASE WHEN a.atthasdef THEN NULL ELSE NULL END FROM pg_catalog.pg_attribute a"
        );
    }

    #[test]
    fn removed_subqueries_keep_their_parameters() {
        assert_eq!(
            rw("SELECT CASE WHEN a.attidentity <> $1 THEN (SELECT json_build_object($2::VARCHAR, s.seqstart) FROM pg_catalog.pg_sequence s WHERE a.attidentity <> $3) END FROM pg_catalog.pg_attribute a"),
            "SELECT CASE WHEN a.attidentity <> $1 THEN CASE WHEN $2::VARCHAR IS NULL OR $3 IS NULL THEN NULL END END FROM pg_catalog.pg_attribute a"
        );
    }

    #[test]
    fn other_catalog_subqueries_are_aggregated() {
        assert_eq!(
            rw("SELECT CASE WHEN (SELECT t.typcollation FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid) <> 0 THEN 1 END FROM pg_catalog.pg_attribute a"),
            "SELECT CASE WHEN (SELECT max(t.typcollation) FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid) <> 0 THEN 1 END FROM pg_catalog.pg_attribute a"
        );
    }

    #[test]
    fn functions_in_from_and_user() {
        assert_eq!(
            rw("SELECT n FROM pg_catalog.pg_namespace WHERE n IN (SELECT CASE WHEN s[i] = '\"$user\"' THEN user ELSE s[i] END FROM generate_series(1, 2) AS i, string_to_array(current_setting('search_path'), ',') s)"),
            "SELECT n FROM pg_catalog.pg_namespace WHERE n IN (SELECT CASE WHEN s[i] = '\"$user\"' THEN session_user() ELSE s[i] END FROM generate_series(1, 2) AS i (i), (SELECT string_to_array(current_setting('search_path'), ',') AS s) s)"
        );
    }

    #[test]
    fn reloptions_and_array_of_unnest() {
        assert_eq!(
            rw("SELECT pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ') FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)"),
            "SELECT NULL FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)"
        );
    }
}
