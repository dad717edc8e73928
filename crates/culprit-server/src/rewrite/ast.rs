//! Reading and building sqlparser trees: the small vocabulary the client
//! rules are written in. Every expression a rule makes is built here as a
//! tree, never printed and parsed again.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CaseWhen, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, GroupByExpr, Ident, ObjectName, Query, Select,
    SelectFlavor, SelectItem, SetExpr, Statement, Value, Visit, Visitor,
};

/// The last part of a name, lower case (`pg_catalog.pg_class` -> `pg_class`).
pub fn last_name(n: &ObjectName) -> String {
    n.0.last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_ascii_lowercase())
        .unwrap_or_default()
}

/// The column an identifier names, lower case ("" for other expressions).
pub fn column_name(e: &Expr) -> String {
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

/// The expression under its casts and parentheses.
pub fn strip_casts(e: &Expr) -> &Expr {
    match e {
        Expr::Cast { expr, .. } | Expr::Nested(expr) => strip_casts(expr),
        _ => e,
    }
}

/// Whether a table name is of PostgreSQL's catalog (`pg_catalog.x`,
/// `information_schema.x`, or an unqualified `pg_x`).
pub fn is_catalog_name(n: &ObjectName) -> bool {
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

/// Whether a statement reads the catalog at all.
pub fn reads_catalog(stmt: &Statement) -> bool {
    struct CatalogTables(bool);
    impl Visitor for CatalogTables {
        type Break = ();
        fn pre_visit_relation(&mut self, r: &ObjectName) -> ControlFlow<()> {
            if is_catalog_name(r) {
                self.0 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    let mut found = CatalogTables(false);
    let _ = stmt.visit(&mut found);
    found.0
}

/// The unnamed expression arguments of a call (`None` for any other form).
pub fn call_args(f: &Function) -> Option<Vec<&Expr>> {
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

/// The arguments of `e` if it is a call of `name` (unnamed, expressions).
pub fn args_of<'a>(e: &'a Expr, name: &str) -> Option<Vec<&'a Expr>> {
    match e {
        Expr::Function(f) if last_name(&f.name) == name => call_args(f),
        _ => None,
    }
}

/// The placeholder (`$n`) an expression is, if it is one.
pub fn placeholder(e: &Expr) -> Option<&str> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => Some(p),
            _ => None,
        },
        _ => None,
    }
}

/// Whether an expression is NULL (under casts and parentheses).
pub fn is_null(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => v.value == Value::Null,
        Expr::Nested(e) => is_null(e),
        Expr::Cast { expr, .. } => is_null(expr),
        _ => false,
    }
}

/// The only SELECT of a query, if it is one.
pub fn select(q: &Query) -> Option<&Select> {
    match q.body.as_ref() {
        SetExpr::Select(s) => Some(s),
        _ => None,
    }
}

pub fn select_mut(q: &mut Query) -> Option<&mut Select> {
    match q.body.as_mut() {
        SetExpr::Select(s) => Some(s),
        _ => None,
    }
}

/// `name(args)`, from a call's own arguments.
pub fn call_with(name: ObjectName, args: Vec<FunctionArg>) -> Expr {
    Expr::Function(Function {
        name,
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args,
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// `name(args)`.
pub fn call(name: &str, args: Vec<Expr>) -> Expr {
    let args = args
        .into_iter()
        .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
        .collect();
    call_with(ObjectName::from(vec![Ident::new(name)]), args)
}

pub fn null() -> Expr {
    Expr::value(Value::Null)
}

/// An integer literal.
pub fn number(n: u32) -> Expr {
    Expr::value(Value::Number(
        n.to_string().parse().expect("an integer is a number"),
        false,
    ))
}

/// `CASE WHEN condition THEN result END`.
pub fn case_when(condition: Expr, result: Expr) -> Expr {
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![CaseWhen { condition, result }],
        else_result: None,
    }
}

/// `left op right`.
pub fn binary(left: Expr, op: BinaryOperator, right: Expr) -> Expr {
    Expr::BinaryOp {
        left: Box::new(left),
        op,
        right: Box::new(right),
    }
}

/// `CAST(e AS TEXT)`.
pub fn cast_to_text(e: Expr) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(e),
        data_type: DataType::Text,
        array: false,
        format: None,
    }
}

/// `CAST(e AS BIGINT)`.
pub fn cast_to_bigint(e: Expr) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(e),
        data_type: DataType::BigInt(None),
        array: false,
        format: None,
    }
}

/// `SELECT e AS alias`: one row, one named column.
pub fn select_one(e: Expr, alias: Ident) -> Query {
    let select = Select {
        select_token: AttachedToken::empty(),
        optimizer_hints: vec![],
        distinct: None,
        select_modifiers: None,
        top: None,
        top_before_distinct: false,
        projection: vec![SelectItem::ExprWithAlias { expr: e, alias }],
        exclude: None,
        into: None,
        from: vec![],
        lateral_views: vec![],
        prewhere: None,
        selection: None,
        connect_by: vec![],
        group_by: GroupByExpr::Expressions(vec![], vec![]),
        cluster_by: vec![],
        distribute_by: vec![],
        sort_by: vec![],
        having: None,
        named_window: vec![],
        qualify: None,
        window_before_qualify: false,
        value_table_mode: None,
        flavor: SelectFlavor::Standard,
    };
    Query {
        with: None,
        body: Box::new(SetExpr::Select(Box::new(select))),
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks: vec![],
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators: vec![],
    }
}
