//! The names PostgreSQL gives a result's unnamed columns.
//!
//! DataFusion names an unnamed column by its expression (`count(*)`,
//! `Int64(1)`, `session_user()`), PostgreSQL by a rule (`FigureColname`):
//! a function call by the function (`count`, `current_user`), a cast by
//! what it casts or else its type (`'x'::text` is `text`), `CASE` by its
//! `ELSE` or `case`, and anything else `?column?`. Clients show these names
//! as column headers, pandas and the BI tools key results by them, and
//! `SELECT current_user, session_user` failed because DataFusion read both
//! as `session_user()`. The rule applies to the outermost query of every
//! statement (the result a client sees, and the columns `CREATE TABLE AS`
//! and `CREATE VIEW` define). A name already used in the projection is
//! left to DataFusion, which cannot return two columns of one name.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    CastKind, DataType, Expr, Ident, Query, SelectItem, SetExpr, Statement, VisitMut, VisitorMut,
};

/// The name PostgreSQL gives `e` (`None`: its own, a column's name, which
/// DataFusion gives too), and whether that name is strong (from a column
/// or function, not a fallback).
fn figure(e: &Expr) -> Option<(String, bool)> {
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => None,
        Expr::Function(f) => {
            let name = f.name.0.last()?.as_ident()?;
            let name = if name.quote_style.is_some() {
                name.value.clone()
            } else {
                name.value.to_lowercase()
            };
            let name = match name.as_str() {
                "user" => "current_user".to_string(),
                "trim" => "btrim".to_string(),
                _ => name,
            };
            Some((name, true))
        }
        Expr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            ..
        } => match figure(expr) {
            None if matches!(**expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) => {
                Some((column(expr)?, true))
            }
            Some((name, true)) => Some((name, true)),
            _ => Some((type_name(data_type), false)),
        },
        Expr::Nested(inner) => figure(inner),
        Expr::Case { else_result, .. } => match else_result.as_deref().and_then(strong) {
            Some(name) => Some((name, true)),
            None => Some(("case".to_string(), false)),
        },
        Expr::Extract { .. } => Some(("extract".to_string(), true)),
        Expr::Substring { .. } => Some(("substring".to_string(), true)),
        Expr::Trim { .. } => Some(("btrim".to_string(), true)),
        Expr::Position { .. } => Some(("position".to_string(), true)),
        Expr::Ceil { .. } => Some(("ceil".to_string(), true)),
        Expr::Floor { .. } => Some(("floor".to_string(), true)),
        Expr::Array(_) => Some(("array".to_string(), true)),
        Expr::Exists { .. } => Some(("exists".to_string(), true)),
        // A scalar subquery: the name of its one column.
        Expr::Subquery(q) => match q.body.as_ref() {
            SetExpr::Select(s) => match s.projection.as_slice() {
                [SelectItem::ExprWithAlias { alias, .. }] => Some((alias.value.clone(), true)),
                [SelectItem::UnnamedExpr(e)] => strong(e).map(|n| (n, true)),
                _ => None,
            },
            _ => None,
        },
        _ => Some(("?column?".to_string(), false)),
    }
}

/// A strong name of `e`: a column's or a function's.
fn strong(e: &Expr) -> Option<String> {
    match figure(e) {
        Some((name, true)) => Some(name),
        Some((_, false)) => None,
        None => column(e),
    }
}

fn column(e: &Expr) -> Option<String> {
    let ident = match e {
        Expr::Identifier(i) => i,
        Expr::CompoundIdentifier(parts) => parts.last()?,
        _ => return None,
    };
    Some(if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    })
}

/// A type as PostgreSQL names it in a column header (`int4`, `text`).
fn type_name(t: &DataType) -> String {
    let written = t.to_string().to_lowercase();
    let base = written.split('(').next().unwrap_or("").trim();
    match base {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "double precision" | "float8" | "double" | "float" => "float8",
        "real" | "float4" => "float4",
        "boolean" | "bool" => "bool",
        "character varying" | "varchar" => "varchar",
        "character" | "char" => "bpchar",
        "decimal" | "numeric" => "numeric",
        "timestamp with time zone" | "timestamptz" => "timestamptz",
        "timestamp" | "timestamp without time zone" => "timestamp",
        other => return other.rsplit('.').next().unwrap_or(other).to_string(),
    }
    .to_string()
}

/// Names the unnamed columns of `q`'s first `SELECT` (the one that names a
/// set operation's columns); returns whether it changed.
fn name_columns(q: &mut Query) -> bool {
    let mut body = q.body.as_mut();
    loop {
        match body {
            SetExpr::SetOperation { left, .. } => body = left.as_mut(),
            SetExpr::Query(inner) => body = inner.body.as_mut(),
            _ => break,
        }
    }
    let SetExpr::Select(select) = body else {
        return false;
    };
    let mut taken: HashSet<String> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            SelectItem::UnnamedExpr(e) => column(e),
            _ => None,
        })
        .collect();
    let mut changed = false;
    for item in select.projection.iter_mut() {
        let SelectItem::UnnamedExpr(e) = item else {
            continue;
        };
        let Some((name, _)) = figure(e) else {
            continue;
        };
        if !taken.insert(name.clone()) {
            continue;
        }
        *item = SelectItem::ExprWithAlias {
            expr: e.clone(),
            alias: Ident::with_quote('"', name),
        };
        changed = true;
    }
    changed
}

/// Finds the outermost query of a statement (of `EXPLAIN`, `DECLARE`,
/// `CREATE TABLE AS`, `INSERT ... SELECT`... too): the first query the walk
/// meets, before its subqueries.
struct Outermost {
    done: bool,
    changed: bool,
}

impl VisitorMut for Outermost {
    type Break = ();

    fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        if !self.done {
            self.done = true;
            self.changed = name_columns(q);
        }
        ControlFlow::Break(())
    }
}

/// `stmt` with its result's unnamed columns named as PostgreSQL names them;
/// whether anything changed. `INSERT ... SELECT` keeps its query's names
/// (they name nothing).
pub fn postgres_names(stmt: &mut Statement) -> bool {
    if matches!(stmt, Statement::Insert(_)) {
        return false;
    }
    let mut v = Outermost {
        done: false,
        changed: false,
    };
    let _ = VisitMut::visit(stmt, &mut v);
    v.changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn named(sql: &str) -> String {
        let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        postgres_names(&mut stmt);
        stmt.to_string()
    }

    #[test]
    fn names_as_postgresql() {
        assert_eq!(
            named("SELECT count(*), 1, x, t.y, 'a'::text, z::int, CAST(1 AS bigint) FROM t"),
            "SELECT count(*) AS \"count\", 1 AS \"?column?\", x, t.y, 'a'::TEXT AS \"text\", \
             z::INT AS \"z\", CAST(1 AS BIGINT) AS \"int8\" FROM t"
        );
        assert_eq!(
            named("SELECT current_user, session_user"),
            "SELECT current_user AS \"current_user\", session_user AS \"session_user\""
        );
        assert_eq!(
            named("SELECT CASE WHEN a THEN 1 END, CASE WHEN a THEN 1 ELSE b END FROM t"),
            "SELECT CASE WHEN a THEN 1 END AS \"case\", CASE WHEN a THEN 1 ELSE b END AS \"b\" FROM t"
        );
    }

    #[test]
    fn a_name_is_given_once_and_only_outside() {
        assert_eq!(
            named("SELECT 1, 2, max(a) AS count, count(*) FROM (SELECT count(*) FROM t) s"),
            "SELECT 1 AS \"?column?\", 2, max(a) AS count, count(*) FROM (SELECT count(*) FROM t) s"
        );
        assert_eq!(
            named("SELECT sum(a) FROM t UNION ALL SELECT max(b) FROM u"),
            "SELECT sum(a) AS \"sum\" FROM t UNION ALL SELECT max(b) FROM u"
        );
        assert_eq!(
            named("INSERT INTO t SELECT count(*) FROM u"),
            "INSERT INTO t SELECT count(*) FROM u"
        );
        assert_eq!(
            named("EXPLAIN SELECT now()"),
            "EXPLAIN SELECT now() AS \"now\""
        );
    }
}
