//! Grafana's PostgreSQL data source, its query builder's table list
//! (`postgresMetaQuery.ts`, showTables with the search_path constraint):
//!
//! ```sql
//! ... quote_ident(table_schema) IN (
//!   SELECT CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
//!   FROM generate_series(
//!          array_lower(string_to_array(current_setting('search_path'),','),1),
//!          array_upper(string_to_array(current_setting('search_path'),','),1)
//!        ) as i,
//!        string_to_array(current_setting('search_path'),',') s)
//! ```
//!
//! First, its parsing: datafusion-postgres's parser replaces that subquery
//! by `''` before any tree exists (a token blacklist written before
//! `current_setting` existed), so the list came back empty. The gate
//! (`policy.rs`) parses such a text again without the blacklist
//! ([`lookup_was_blanked`], [`is_search_path_lookup`]), and the subquery
//! runs for real. Then four rules, each exact where it applies:
//! - `array_lower(x, 1)` -> `CASE WHEN cardinality(x) > 0 THEN 1 END`:
//!   lists start at 1 (NULL for an empty or NULL array, as PostgreSQL);
//!   with `array_lower` in `generate_series` and a `CASE` over the rows,
//!   DataFusion 55 plans the `IN (subquery)` as `= ''` and finds no table;
//! - `string_to_array(...) s` in FROM -> `(SELECT string_to_array(...) AS s)
//!   s`: a scalar function in FROM is one row, one column named by the
//!   alias, in PostgreSQL;
//! - `generate_series(...) AS i` -> `generate_series(...) AS i(i)`:
//!   PostgreSQL names the column of a one-column function after the alias;
//! - a bare `user` in a SELECT reading no table (only functions) is
//!   PostgreSQL's `current_user`, not a column: `session_user()`.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArguments, Query, Select, Statement, TableAliasColumnDef, TableFactor, Value, Visit,
    Visitor,
};

use super::ast::{
    args_of, binary, call, call_args, call_with, case_when, last_name, number, select_mut,
    select_one,
};

/// Scalar functions Grafana calls in `FROM`.
const SCALAR_IN_FROM: &[&str] = &["string_to_array", "regexp_split_to_array"];

/// Whether `e` is `array_lower(string_to_array(current_setting('search_path'), ...), ...)`.
fn lower_bound_of_search_path(e: &Expr) -> bool {
    fn first_arg<'a>(e: &'a Expr, name: &str) -> Option<&'a Expr> {
        args_of(e, name).and_then(|a| a.first().copied())
    }
    let setting = first_arg(e, "array_lower")
        .and_then(|e| first_arg(e, "string_to_array"))
        .and_then(|e| first_arg(e, "current_setting"));
    matches!(setting, Some(Expr::Value(v))
        if matches!(&v.value, Value::SingleQuotedString(s) if s.eq_ignore_ascii_case("search_path")))
}

/// Whether a statement (parsed without datafusion-postgres's blacklist)
/// holds Grafana's search_path lookup: `generate_series` over the bounds of
/// `string_to_array(current_setting('search_path'), ',')` in a FROM.
pub fn is_search_path_lookup(stmt: &Statement) -> bool {
    struct Lookup(bool);
    impl Visitor for Lookup {
        type Break = ();
        fn pre_visit_table_factor(&mut self, f: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(args),
                ..
            } = f
            {
                let first = args.args.first().and_then(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                    _ => None,
                });
                if last_name(name) == "generate_series"
                    && first.is_some_and(lower_bound_of_search_path)
                {
                    self.0 = true;
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut found = Lookup(false);
    let _ = stmt.visit(&mut found);
    found.0
}

/// Whether a statement parsed by datafusion-postgres's parser may be
/// Grafana's lookup with its subquery blanked: it has an `IN ('')`.
pub fn lookup_was_blanked(stmt: &Statement) -> bool {
    struct Blanked(bool);
    impl Visitor for Blanked {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if let Expr::InList { list, .. } = e {
                if let [Expr::Value(v)] = list.as_slice() {
                    if matches!(&v.value, Value::SingleQuotedString(s) if s.is_empty()) {
                        self.0 = true;
                        return ControlFlow::Break(());
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut found = Blanked(false);
    let _ = stmt.visit(&mut found);
    found.0
}

/// `array_lower(x, 1)` -> `CASE WHEN cardinality(x) > 0 THEN 1 END`.
fn array_lower(f: &Function) -> Option<Expr> {
    let [x, dim] = call_args(f)?[..] else {
        return None;
    };
    if *dim != number(1) {
        return None;
    }
    let non_empty = binary(
        call("cardinality", vec![x.clone()]),
        BinaryOperator::Gt,
        number(0),
    );
    Some(case_when(non_empty, number(1)))
}

/// The FROM rules for one table factor; returns whether it changed `f`.
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
    let function = last_name(name);
    if function == "generate_series" && alias.columns.is_empty() {
        alias
            .columns
            .push(TableAliasColumnDef::from_name(alias.name.value.clone()));
        return true;
    }
    if !SCALAR_IN_FROM.contains(&function.as_str()) || !alias.columns.is_empty() {
        return false;
    }
    let value = call_with(name.clone(), args.args.clone());
    *f = TableFactor::Derived {
        lateral: false,
        subquery: Box::new(select_one(value, alias.name.clone())),
        alias: Some(alias.clone()),
        sample: None,
    };
    true
}

/// A bare `user` -> `session_user()` in a SELECT reading no table (only
/// functions); returns whether it changed `s`.
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

/// Applies the query rules (before its parts are visited); returns whether
/// it changed `q`.
pub(super) fn rewrite_query(q: &mut Query) -> bool {
    let Some(s) = select_mut(q) else { return false };
    let mut changed = bare_user(s);
    for twj in &mut s.from {
        changed |= table_factor(&mut twj.relation);
        for j in &mut twj.joins {
            changed |= table_factor(&mut j.relation);
        }
    }
    changed
}

/// Applies the expression rules; returns whether it changed `e`.
pub(super) fn rewrite_expr(e: &mut Expr) -> bool {
    let replacement = match e {
        Expr::Function(f) if last_name(&f.name) == "array_lower" => array_lower(f),
        _ => None,
    };
    match replacement {
        Some(r) => {
            *e = r;
            true
        }
        None => false,
    }
}
