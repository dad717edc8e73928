//! Functions PostgreSQL clients call that DataFusion lacks or answers in
//! its own way: `version()` in PostgreSQL's form (SQLAlchemy, JDBC and
//! Grafana parse it), `current_setting(name)` (Grafana's query builder) and
//! `to_regtype(name)` (psycopg's type lookup, which SQLAlchemy runs), and
//! the catalog functions psql, pgcli and SQLAlchemy's reflection call.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr_fn::SimpleScalarUDF;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Signature, Volatility};
use datafusion::prelude::SessionContext;

/// The server version clients see: PostgreSQL's protocol and catalog level,
/// then what really answers.
pub const VERSION: &str = concat!(
    "PostgreSQL 16.0 (culprit ",
    env!("CARGO_PKG_VERSION"),
    ", Apache DataFusion 55) on x86_64-pc-linux-gnu"
);

/// The settings a client can read (`current_setting`, `SHOW`'s view
/// `pg_settings`): name, value, and what it is, as PostgreSQL describes
/// it. culprit's values are fixed: `SET` does not change these.
pub(crate) const SETTINGS: &[(&str, &str, &str)] = &[
    (
        "search_path",
        "\"$user\", public",
        "Sets the schema search order for names that are not schema-qualified.",
    ),
    ("server_version", "16.0", "Shows the server version."),
    (
        "server_version_num",
        "160000",
        "Shows the server version as an integer.",
    ),
    (
        "server_encoding",
        "UTF8",
        "Shows the server (database) character set encoding.",
    ),
    (
        "client_encoding",
        "UTF8",
        "Sets the client's character set encoding.",
    ),
    (
        "timezone",
        "UTC",
        "Sets the time zone for displaying and interpreting time stamps.",
    ),
    (
        "datestyle",
        "ISO, MDY",
        "Sets the display format for date and time values.",
    ),
    (
        "integer_datetimes",
        "on",
        "Shows whether datetimes are integer based.",
    ),
    (
        "standard_conforming_strings",
        "on",
        "Causes '...' strings to treat backslashes literally.",
    ),
    (
        "default_transaction_read_only",
        "on",
        "Sets the default read-only status of new transactions.",
    ),
    (
        "transaction_read_only",
        "on",
        "Shows whether the current transaction is read-only.",
    ),
    (
        "max_identifier_length",
        "63",
        "Shows the maximum identifier length.",
    ),
    // pgjdbc's getImportedKeys, getExportedKeys and getIndexInfo read it.
    (
        "max_index_keys",
        "32",
        "Shows the maximum number of index keys.",
    ),
    (
        "max_function_args",
        "100",
        "Shows the maximum number of function arguments.",
    ),
    ("block_size", "8192", "Shows the size of a disk block."),
];

fn setting(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    SETTINGS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, value, _)| *value)
}

/// The name of culprit's one database (`current_database()`, `pg_database`).
pub const DATABASE: &str = "culprit";

/// Built-in types: oid, the name `regtype` prints, other names it reads.
const TYPES: &[(i32, &str, &[&str])] = &[
    (16, "boolean", &["bool"]),
    (17, "bytea", &[]),
    (18, "\"char\"", &[]),
    (19, "name", &[]),
    (20, "bigint", &["int8"]),
    (21, "smallint", &["int2"]),
    (23, "integer", &["int4", "int"]),
    (25, "text", &[]),
    (26, "oid", &[]),
    (114, "json", &[]),
    (700, "real", &["float4"]),
    (701, "double precision", &["float8"]),
    (1043, "character varying", &["varchar"]),
    (1082, "date", &[]),
    (1114, "timestamp without time zone", &["timestamp"]),
    (1184, "timestamp with time zone", &["timestamptz"]),
    (1186, "interval", &[]),
    (1700, "numeric", &[]),
    (2249, "record", &[]),
    (2275, "cstring", &[]),
    (2276, "\"any\"", &[]),
    (2277, "anyarray", &[]),
    (2278, "void", &[]),
    (2283, "anyelement", &[]),
    (2950, "uuid", &[]),
    (3802, "jsonb", &[]),
];

/// The oid of a built-in type name (`to_regtype`); NULL for any other
/// (there are no extension types such as `hstore`).
fn type_oid(name: &str) -> Option<i32> {
    let name = name
        .trim()
        .trim_start_matches("pg_catalog.")
        .to_ascii_lowercase();
    TYPES
        .iter()
        .find(|(_, n, other)| *n == name || other.contains(&name.as_str()))
        .map(|(oid, _, _)| *oid)
}

/// A function of constant result (the catalog has nothing to look up),
/// taking any of `arities` arguments of any type (an oid column or an
/// integer literal alike).
fn constant(ctx: &SessionContext, name: &str, arities: &[usize], value: ScalarValue) {
    let signature = match arities {
        [0] => Signature::nullary(Volatility::Stable),
        [n] => Signature::any(*n, Volatility::Stable),
        _ => Signature::one_of(
            arities
                .iter()
                .map(|n| datafusion::logical_expr::TypeSignature::Any(*n))
                .collect(),
            Volatility::Stable,
        ),
    };
    ctx.register_udf(ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        name,
        signature,
        value.data_type(),
        Arc::new(move |_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(value.clone()))),
    )));
}

/// A function of one text argument, answered by `lookup` (NULL in, NULL out).
fn by_name<T>(ctx: &SessionContext, name: &str, lookup: fn(&str) -> Option<T>)
where
    T: Send + Sync + 'static,
    ScalarValue: From<Option<T>>,
{
    let ty = ScalarValue::from(None::<T>).data_type();
    ctx.register_udf(create_udf(
        name,
        vec![DataType::Utf8],
        ty,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arr: ArrayRef = match &args[0] {
                ColumnarValue::Scalar(s) => s.to_array()?,
                ColumnarValue::Array(a) => a.clone(),
            };
            let names = arr.as_string::<i32>();
            let values: Vec<ScalarValue> = (0..names.len())
                .map(|i| {
                    ScalarValue::from(
                        (!names.is_null(i))
                            .then(|| lookup(names.value(i)))
                            .flatten(),
                    )
                })
                .collect();
            Ok(match &args[0] {
                ColumnarValue::Scalar(_) => ColumnarValue::Scalar(values[0].clone()),
                ColumnarValue::Array(_) => {
                    ColumnarValue::Array(ScalarValue::iter_to_array(values)?)
                }
            })
        }),
    ));
}

/// The name PostgreSQL's `regtype` prints for a built-in type oid (the
/// oid itself for any other, as PostgreSQL prints an unknown oid).
fn type_name(oid: &str) -> String {
    oid.parse::<i32>()
        .ok()
        .and_then(|o| TYPES.iter().find(|(x, _, _)| *x == o))
        .map_or(oid, |(_, name, _)| name)
        .to_string()
}

/// The items of a catalog array kept as text: `[2276]`, `['a', 'b']`,
/// `{23,25}` or an oidvector's `23 25`.
fn items(text: &str) -> Vec<String> {
    text.trim_matches(|c| matches!(c, '[' | ']' | '{' | '}'))
        .split([',', ' '])
        .map(|x| x.trim().trim_matches('\'').to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

/// A function of one text argument giving a list of `item`s, each text's
/// elements pushed by `push` (NULL in, NULL out).
fn list_of<B>(
    ctx: &SessionContext,
    name: &str,
    item: DataType,
    push: impl Fn(&str, &mut B) -> datafusion::common::Result<()> + Send + Sync + 'static,
) where
    B: datafusion::arrow::array::ArrayBuilder + Default,
{
    use datafusion::arrow::array::ListBuilder;
    use datafusion::arrow::datatypes::Field;
    ctx.register_udf(create_udf(
        name,
        vec![DataType::Utf8],
        DataType::List(Arc::new(Field::new_list_field(item, true))),
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arr = args[0].to_array(1)?;
            let text = arr.as_string::<i32>();
            let mut b = ListBuilder::new(B::default());
            for i in 0..text.len() {
                if text.is_null(i) {
                    b.append(false);
                    continue;
                }
                push(text.value(i), b.values())?;
                b.append(true);
            }
            let out: ArrayRef = Arc::new(b.finish());
            Ok(match &args[0] {
                ColumnarValue::Scalar(_) => {
                    ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
                }
                ColumnarValue::Array(_) => ColumnarValue::Array(out),
            })
        }),
    ));
}

/// A function of one text argument giving a text array (NULL in, NULL out).
fn text_list(ctx: &SessionContext, name: &str, f: fn(&str) -> Vec<String>) {
    use datafusion::arrow::array::StringBuilder;
    list_of(
        ctx,
        name,
        DataType::Utf8,
        move |text, b: &mut StringBuilder| {
            for x in f(text) {
                b.append_value(x);
            }
            Ok(())
        },
    );
}

/// `culprit_oid_array(text)`: an oid array kept as text (`{1,2}` or
/// `[1, 2]`) as `int8[]`; NULL in, NULL out.
fn oid_list(ctx: &SessionContext, name: &'static str) {
    use datafusion::arrow::array::Int64Builder;
    list_of(
        ctx,
        name,
        DataType::Int64,
        move |text, b: &mut Int64Builder| {
            for x in items(text) {
                let oid = x.parse::<i64>().map_err(|_| {
                    datafusion::error::DataFusionError::Execution(format!(
                        "{name}: '{x}' is not an oid"
                    ))
                })?;
                b.append_value(oid);
            }
            Ok(())
        },
    );
}

/// `information_schema._pg_expandarray(a)`: PostgreSQL's set of `(x, n)`
/// rows, an array's elements with their positions, which pgjdbc's key and
/// index calls (`getPrimaryKeys`, `getIndexInfo`, `getBestRowIdentifier`)
/// and Metabase's index sync apply to `pg_index.indkey`. culprit has no
/// indexes, so those queries read no row and the function is never
/// evaluated; as a scalar it is exact for arrays of at most one element
/// (no row for none) and refuses longer ones rather than drop rows.
fn expandarray(ctx: &SessionContext) {
    use datafusion::arrow::array::{Int32Array, Int64Array, StructArray};
    use datafusion::arrow::datatypes::{Field, Fields};
    let fields = Fields::from(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("n", DataType::Int32, true),
    ]);
    let ret = DataType::Struct(fields.clone());
    let udf = ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "_pg_expandarray",
        Signature::any(1, Volatility::Immutable),
        ret,
        Arc::new(move |args: &[ColumnarValue]| {
            let scalar = matches!(args[0], ColumnarValue::Scalar(_));
            let arr = args[0].to_array(1)?;
            let text = datafusion::arrow::compute::cast(&arr, &DataType::Utf8)?;
            let text = text.as_string::<i32>();
            let (mut x, mut n) = (Vec::new(), Vec::new());
            for i in 0..text.len() {
                let elems = if text.is_null(i) {
                    vec![]
                } else {
                    items(text.value(i))
                };
                match elems.as_slice() {
                    [] => {
                        x.push(None);
                        n.push(None);
                    }
                    [one] => {
                        x.push(one.parse::<i64>().ok());
                        n.push(Some(1));
                    }
                    _ => {
                        return datafusion::common::exec_err!(
                            "_pg_expandarray of {} elements: culprit answers it only for \
                             arrays of at most one element (it has no indexes or keys)",
                            elems.len()
                        )
                    }
                }
            }
            let nulls: Vec<bool> = x.iter().map(|v| v.is_some()).collect();
            let out: ArrayRef = Arc::new(StructArray::try_new(
                fields.clone(),
                vec![
                    Arc::new(Int64Array::from(x)) as ArrayRef,
                    Arc::new(Int32Array::from(n)) as ArrayRef,
                ],
                Some(nulls.into()),
            )?);
            Ok(if scalar {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            } else {
                ColumnarValue::Array(out)
            })
        }),
    ));
    ctx.register_udf(udf);
}

pub fn register(ctx: &SessionContext) {
    use datafusion::execution::FunctionRegistry;
    // A failure leaves PostgreSQL's boolean literals uncompared, no more.
    if let Err(e) = ctx
        .state_ref()
        .write()
        .register_expr_planner(Arc::new(BooleanLiterals))
    {
        log::warn!("boolean literals: {e}");
    }
    name_type(ctx);
    expandarray(ctx);
    // The database clients connect to is `culprit` (pg_database: catalog.rs).
    ctx.register_udf(
        datafusion_postgres::datafusion_pg_catalog::pg_catalog::create_current_database_udf(
            DATABASE,
        ),
    );
    // The catalog keeps pg_proc's arrays as text; pgcli reads them as arrays
    // (rewrite/pgcli.rs calls these for `proargtypes::regtype[]`, `proargnames`...).
    text_list(ctx, "culprit_regtype_names", |t| {
        items(t).iter().map(|o| type_name(o)).collect()
    });
    text_list(ctx, "culprit_text_array", items);
    oid_list(ctx, "culprit_oid_array");
    by_name(ctx, "culprit_regtype_name", |o| Some(type_name(o)));
    ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
        JsonBuildObject::new(),
    ));
    constant(ctx, "version", &[0], ScalarValue::from(VERSION));
    // One schema on the path: every collation, function and type is visible.
    for name in [
        "pg_collation_is_visible",
        "pg_function_is_visible",
        "pg_type_is_visible",
    ] {
        constant(ctx, name, &[1], ScalarValue::Boolean(Some(true)));
    }
    // pg_get_function_result and pg_get_function_arguments: catalog.rs.
    // culprit's tables and columns have no comments (psql `\d+`, `\dt+`).
    constant(ctx, "col_description", &[2], ScalarValue::Utf8(None));
    constant(ctx, "obj_description", &[2], ScalarValue::Utf8(None));
    // No table has a serial column or identity sequence.
    constant(ctx, "pg_get_serial_sequence", &[2], ScalarValue::Utf8(None));
    by_name(ctx, "to_regtype", type_oid);
    // No indexes (pg_index is empty): pgjdbc's getIndexInfo names the
    // function, with one argument or three.
    ctx.register_udf(ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "pg_get_indexdef",
        Signature::one_of(
            vec![
                datafusion::logical_expr::TypeSignature::Any(1),
                datafusion::logical_expr::TypeSignature::Any(3),
            ],
            Volatility::Stable,
        ),
        DataType::Utf8,
        Arc::new(|_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    )));
    // Every role may run every function (psqlODBC's SQLProcedureColumns
    // asks, with a function oid and a privilege, and an optional user).
    constant(
        ctx,
        "has_function_privilege",
        &[2, 3],
        ScalarValue::Boolean(Some(true)),
    );
    // Connection pools reset sessions with it; a session holds no locks.
    constant(ctx, "pg_advisory_unlock_all", &[0], ScalarValue::Utf8(None));
    // A view's definition by its name (rewrite/sqlalchemy.rs turns
    // `pg_get_viewdef(c.oid)` into it); by an oid alone it is not known.
    by_name(ctx, "culprit_view_definition", |name| {
        culprit_sql::VIEWS
            .iter()
            .find(|(view, _)| *view == name)
            .map(|(_, sql)| sql.to_string())
    });
    constant(ctx, "pg_get_viewdef", &[1, 2], ScalarValue::Utf8(None));
    by_name(ctx, "current_setting", |n| setting(n).map(str::to_string));
    ctx.register_udf(ScalarUDF::new_from_impl(CurrentSchema {
        signature: Signature::nullary(Volatility::Stable),
    }));
}

/// A value as PostgreSQL's JSON functions write it: numbers and booleans
/// as themselves (non-finite floats as strings), everything else as text.
fn json_value(ty: &DataType, text: &str) -> serde_json::Value {
    if ty.is_numeric() || *ty == DataType::Boolean {
        if let Ok(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) =
            serde_json::from_str(text)
        {
            return v;
        }
    }
    text.into()
}

/// `json_build_object(k1, v1, ...)`: a JSON object as text (SQLAlchemy's
/// column reflection builds identity options with it).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonBuildObject {
    signature: datafusion::logical_expr::Signature,
}

impl JsonBuildObject {
    pub fn new() -> Self {
        JsonBuildObject {
            signature: datafusion::logical_expr::Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }
    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<datafusion::common::Result<_>>()?;
        let text: Vec<ArrayRef> = arrays
            .iter()
            .map(|a| datafusion::arrow::compute::cast(a, &DataType::Utf8))
            .collect::<Result<_, _>>()?;
        let out: StringArray = (0..n)
            .map(|row| {
                let mut obj = serde_json::Map::new();
                for (pair, typed) in text.chunks(2).zip(arrays.chunks(2)) {
                    let k = pair[0].as_string::<i32>();
                    let key = if k.is_null(row) { "" } else { k.value(row) };
                    let v = pair.get(1).map(|v| v.as_string::<i32>());
                    let value = v
                        .filter(|v| !v.is_null(row))
                        .map_or(serde_json::Value::Null, |v| {
                            json_value(typed[1].data_type(), v.value(row))
                        });
                    obj.insert(key.to_string(), value);
                }
                Some(serde_json::Value::Object(obj).to_string())
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// A boolean compared with a string literal (`indisprimary = 't'`, as
/// psqlODBC's SQLPrimaryKeys writes it): PostgreSQL reads the literal as a
/// boolean (`t`, `true`, `yes`, `on`, `1` and their negations); DataFusion
/// refuses to compare Boolean with Utf8. Planned when the SQL is.
#[derive(Debug)]
pub struct BooleanLiterals;

/// PostgreSQL's boolean input, for a literal compared with a boolean.
fn boolean_text(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "y" | "yes" | "on" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

impl datafusion::logical_expr::planner::ExprPlanner for BooleanLiterals {
    fn plan_binary_op(
        &self,
        expr: datafusion::logical_expr::planner::RawBinaryExpr,
        schema: &datafusion::common::DFSchema,
    ) -> datafusion::common::Result<
        datafusion::logical_expr::planner::PlannerResult<
            datafusion::logical_expr::planner::RawBinaryExpr,
        >,
    > {
        use datafusion::logical_expr::planner::PlannerResult;
        use datafusion::logical_expr::{Expr, ExprSchemable};
        use datafusion::sql::sqlparser::ast::BinaryOperator;
        if !matches!(expr.op, BinaryOperator::Eq | BinaryOperator::NotEq) {
            return Ok(PlannerResult::Original(expr));
        }
        let literal = |e: &Expr| match e {
            Expr::Literal(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)), _) => {
                boolean_text(s)
            }
            _ => None,
        };
        let is_boolean = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Boolean));
        let boolean = |b: bool| Expr::Literal(ScalarValue::Boolean(Some(b)), None);
        let (left, right) = match (literal(&expr.left), literal(&expr.right)) {
            (None, Some(b)) if is_boolean(&expr.left) => (expr.left.clone(), boolean(b)),
            (Some(b), None) if is_boolean(&expr.right) => (boolean(b), expr.right.clone()),
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let op = match expr.op {
            BinaryOperator::Eq => datafusion::logical_expr::Operator::Eq,
            _ => datafusion::logical_expr::Operator::NotEq,
        };
        Ok(PlannerResult::Planned(Expr::BinaryExpr(
            datafusion::logical_expr::BinaryExpr::new(Box::new(left), op, Box::new(right)),
        )))
    }
}

/// PostgreSQL's `name` type (`'culprit'::name`, as psqlODBC's
/// SQLForeignKeys writes it) as text; every other type as
/// datafusion-pg-catalog's planner has it (the oid aliases).
#[derive(Debug)]
struct NameType;

impl datafusion::logical_expr::planner::TypePlanner for NameType {
    fn plan_type_field(
        &self,
        sql_type: &datafusion::sql::sqlparser::ast::DataType,
    ) -> datafusion::common::Result<Option<datafusion::arrow::datatypes::FieldRef>> {
        use datafusion::sql::sqlparser::ast::{DataType as SqlType, ObjectNamePart};
        if let SqlType::Custom(name, args) = sql_type {
            let last = name.0.last().and_then(ObjectNamePart::as_ident);
            if args.is_empty() && last.is_some_and(|i| i.value.eq_ignore_ascii_case("name")) {
                return Ok(Some(Arc::new(datafusion::arrow::datatypes::Field::new(
                    "",
                    DataType::Utf8,
                    true,
                ))));
            }
        }
        datafusion_postgres::datafusion_pg_catalog::pg_catalog::oid_type_planner::PgOidTypePlanner
            .plan_type_field(sql_type)
    }
}

/// Installs [`NameType`] as the session's type planner.
fn name_type(ctx: &SessionContext) {
    use datafusion::execution::session_state::SessionStateBuilder;
    let state = ctx.state_ref();
    let existing = state.read().clone();
    *state.write() = SessionStateBuilder::new_from_existing(existing)
        .with_type_planner(Arc::new(NameType))
        .build();
}

/// `current_schema()`: the schema unqualified names resolve in (the
/// session's default schema, which `SET search_path` moves), not always
/// `public`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSchema {
    signature: Signature,
}

impl datafusion::logical_expr::ScalarUDFImpl for CurrentSchema {
    fn name(&self) -> &str {
        "current_schema"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            args.config_options.catalog.default_schema.clone(),
        ))))
    }
}
