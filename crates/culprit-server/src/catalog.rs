//! pg_catalog as clients browse it, with culprit's own functions in it:
//! `pg_proc` is the built-in list of datafusion-postgres's catalog plus a
//! row per culprit function (`culprit_sql::functions::catalog`), in schema
//! `public`, so `\df culprits`, DBeaver's function list and pgjdbc's
//! `getFunctions` find them; `pg_get_function_arguments(oid)` and
//! `pg_get_function_result(oid)` describe them.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use culprit_sql::functions::catalog::{described, Described, Kind};

use crate::privileges::{self, RoleRow};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Int32Type, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::{ColumnarValue, Expr, TableType};
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionContext;

/// The first oid of culprit's functions in `pg_proc` (above the built-in
/// ones, below the oids the catalog gives tables and schemas).
pub const FIRST_OID: i32 = 60_000;

fn functions() -> &'static [Described] {
    static ALL: OnceLock<Vec<Described>> = OnceLock::new();
    ALL.get_or_init(described)
}

fn function(oid: i32) -> Option<&'static Described> {
    let i = usize::try_from(oid.checked_sub(FIRST_OID)?).ok()?;
    functions().get(i)
}

/// The oid and name PostgreSQL gives an Arrow type.
pub fn pg_type(t: &DataType) -> (i32, &'static str) {
    match t {
        DataType::Boolean => (16, "boolean"),
        DataType::Int16 => (21, "smallint"),
        DataType::Int32 => (23, "integer"),
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => (20, "bigint"),
        DataType::Float32 => (700, "real"),
        DataType::Float64 => (701, "double precision"),
        DataType::Timestamp(_, Some(_)) => (1184, "timestamp with time zone"),
        DataType::Timestamp(_, None) => (1114, "timestamp without time zone"),
        DataType::Date32 | DataType::Date64 => (1082, "date"),
        DataType::Binary | DataType::LargeBinary => (17, "bytea"),
        _ => (25, "text"),
    }
}

/// `pg_get_function_result`: `TABLE(col type, ...)` or the type.
fn result_text(d: &Described) -> String {
    match d.kind {
        Kind::Table => format!(
            "TABLE({})",
            d.result
                .iter()
                .map(|(n, t)| format!("{n} {}", pg_type(t).1))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => d
            .result
            .first()
            .map_or("void", |(_, t)| pg_type(t).1)
            .to_string(),
    }
}

/// The schema `pg_catalog` with culprit's `pg_proc`.
#[derive(Debug)]
pub struct Catalog {
    inner: Arc<dyn SchemaProvider>,
    /// The server's connections, for `pg_stat_activity`.
    sessions: crate::sessions::Sessions,
    /// The server's roles, for `pg_roles` and `pg_class.relacl`.
    roles: Arc<Vec<RoleRow>>,
}

#[async_trait]
impl SchemaProvider for Catalog {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.push(STAT_ACTIVITY.to_string());
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name == STAT_ACTIVITY {
            return Ok(Some(self.sessions.table()));
        }
        if name == INFORMATION_SCHEMA_VIEWS {
            return Ok(Some(information_schema_views()?));
        }
        let table = self.inner.table(name).await?;
        match (name, table) {
            ("pg_proc", Some(builtin)) => Ok(Some(Arc::new(Proc {
                builtin,
                namespaces: self.inner.table("pg_namespace").await?,
            }))),
            ("pg_settings", Some(builtin)) => Ok(Some(settings(builtin.schema())?)),
            ("pg_database", Some(builtin)) => Ok(Some(database(builtin)?)),
            ("pg_index" | "pg_constraint", Some(builtin)) => Ok(Some(no_rows(builtin.schema())?)),
            ("pg_class", Some(builtin)) => {
                let namespaces = self.inner.table("pg_namespace").await?;
                Ok(Some(class(builtin, namespaces, &self.roles)?))
            }
            ("pg_roles", Some(builtin)) => Ok(Some(roles(builtin.schema(), &self.roles)?)),
            ("pg_views", Some(builtin)) => Ok(Some(views(builtin.schema())?)),
            (_, table) => Ok(table),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        name == STAT_ACTIVITY || name == INFORMATION_SCHEMA_VIEWS || self.inner.table_exist(name)
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        self.inner.register_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        self.inner.deregister_table(name)
    }
}

/// A column of `values` (text, numbers) in the built-in table's type.
fn column(values: Vec<ScalarValue>, to: &DataType) -> Result<ArrayRef> {
    let array = ScalarValue::iter_to_array(values)?;
    Ok(if array.data_type() == to {
        array
    } else {
        datafusion::arrow::compute::cast(&array, to)?
    })
}

/// `pg_database`: the built-in rows with culprit's database named as
/// clients connect to it (`compat::DATABASE`, what `current_database()`
/// answers) instead of the session's catalog, `datafusion`; DBeaver looks
/// its database up by that name ([`view`]: renamed as it is read).
fn database(builtin: Arc<dyn TableProvider>) -> Result<Arc<dyn TableProvider>> {
    use datafusion::logical_expr::{col, lit, when};
    let schema = builtin.schema();
    let columns: Vec<Expr> = schema
        .fields()
        .iter()
        .map(|f| {
            let c = col(format!("pg_database.{}", f.name()));
            if f.name() != "datname" {
                return Ok(c);
            }
            let name = datafusion::logical_expr::cast(c.clone(), DataType::Utf8);
            Ok(datafusion::logical_expr::cast(
                when(
                    name.clone().eq(lit("datafusion")),
                    lit(crate::compat::DATABASE),
                )
                .otherwise(name)?,
                f.data_type().clone(),
            )
            .alias("datname"))
        })
        .collect::<Result<_>>()?;
    view("pg_database", builtin, columns)
}

/// A view of `columns` over the built-in table `name`: computed as it is
/// read, never when the catalog asks for the table (it builds `pg_class` by
/// asking for every table of this schema, and a read then would wait on it).
fn view(
    name: &str,
    builtin: Arc<dyn TableProvider>,
    columns: Vec<Expr>,
) -> Result<Arc<dyn TableProvider>> {
    use datafusion::datasource::{provider_as_source, ViewTable};
    use datafusion::logical_expr::LogicalPlanBuilder;
    let plan = LogicalPlanBuilder::scan(name, provider_as_source(builtin), None)?
        .project(columns)?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// `pg_class` owned by `culprit` (oid 10, as `pg_roles` lists it), with
/// PostgreSQL's `relacl` as culprit grants (`privileges.rs`: `SELECT` to
/// everyone; `INSERT` and `TRUNCATE` of user tables, the relations of
/// `public` that are neither telemetry nor culprit's views, to `write`
/// users) and `reloptions` (NULL: no storage options), which pgjdbc's
/// `getTablePrivileges` and SQLAlchemy's index reflection select ([`view`]).
fn class(
    builtin: Arc<dyn TableProvider>,
    namespaces: Option<Arc<dyn TableProvider>>,
    roles: &[RoleRow],
) -> Result<Arc<dyn TableProvider>> {
    use datafusion::arrow::datatypes::Field;
    use datafusion::logical_expr::expr::{Alias, FieldMetadata};
    use datafusion::logical_expr::{col, lit, when};
    let schema = builtin.schema();
    let text_list = DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)));
    let mut columns: Vec<Expr> = schema
        .fields()
        .iter()
        .map(|f| {
            let c = col(format!("pg_class.{}", f.name()));
            if f.name() != "relowner" {
                return Ok(c);
            }
            let owner =
                datafusion::logical_expr::cast(lit(privileges::OWNER_OID), f.data_type().clone());
            let metadata =
                (!f.metadata().is_empty()).then(|| FieldMetadata::from(f.metadata().clone()));
            Ok(Expr::Alias(
                Alias::new(
                    when(c.clone().is_not_null(), owner).otherwise(c)?,
                    None::<&str>,
                    f.name(),
                )
                .with_metadata(metadata),
            ))
        })
        .collect::<Result<_>>()?;
    let acl = |relation| {
        let items: Vec<ScalarValue> = privileges::acl(relation, roles)
            .into_iter()
            .map(ScalarValue::from)
            .collect();
        lit(ScalarValue::List(ScalarValue::new_list_nullable(
            &items,
            &DataType::Utf8,
        )))
    };
    let ours: Vec<Expr> = culprit_core::Table::ALL
        .iter()
        .map(|t| t.name().to_string())
        .chain(culprit_sql::VIEWS.iter().map(|(v, _)| v.to_string()))
        .map(lit)
        .collect();
    let relname = datafusion::logical_expr::cast(col("pg_class.relname"), DataType::Utf8);
    // A relation of schema `public` (its namespace joined by oid).
    let user_table = match &namespaces {
        Some(_) => datafusion::logical_expr::cast(col("culprit_ns.nspname"), DataType::Utf8)
            .eq(lit("public"))
            .and(relname.in_list(ours, true)),
        None => lit(false),
    };
    let relacl = when(user_table, acl(privileges::Relation::User))
        .otherwise(acl(privileges::Relation::ReadOnly))?;
    for (name, value) in [
        ("relacl", relacl),
        ("reloptions", Expr::Literal(ScalarValue::Null, None)),
    ] {
        if schema.index_of(name).is_err() {
            columns.push(datafusion::logical_expr::cast(value, text_list.clone()).alias(name));
        }
    }
    let Some(namespaces) = namespaces else {
        return view("pg_class", builtin, columns);
    };
    use datafusion::datasource::{provider_as_source, ViewTable};
    use datafusion::logical_expr::{JoinType, LogicalPlanBuilder};
    let ns = LogicalPlanBuilder::scan("culprit_ns", provider_as_source(namespaces), None)?
        .project(vec![
            datafusion::logical_expr::cast(col("culprit_ns.oid"), DataType::Int32).alias("oid"),
            col("culprit_ns.nspname"),
        ])?
        .alias("culprit_ns")?
        .build()?;
    let plan = LogicalPlanBuilder::scan("pg_class", provider_as_source(builtin), None)?
        .join_on(
            ns,
            JoinType::Left,
            vec![
                datafusion::logical_expr::cast(col("pg_class.relnamespace"), DataType::Int32)
                    .eq(col("culprit_ns.oid")),
            ],
        )?
        .project(columns)?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// `pg_roles`: the owner `culprit` and the users of the users file
/// (`privileges::roles`), none of them superusers.
fn roles(schema: SchemaRef, roles: &[RoleRow]) -> Result<Arc<dyn TableProvider>> {
    let mut columns: Vec<ArrayRef> = Vec::new();
    for field in schema.fields() {
        let values: Vec<ScalarValue> = roles
            .iter()
            .map(|r| match field.name().as_str() {
                "rolname" => ScalarValue::from(r.name.as_str()),
                "oid" => ScalarValue::Int32(Some(r.oid)),
                "rolcanlogin" => ScalarValue::Boolean(Some(r.role.is_some())),
                "rolinherit" => ScalarValue::Boolean(Some(true)),
                "rolsuper" | "rolcreaterole" | "rolcreatedb" | "rolreplication"
                | "rolbypassrls" => ScalarValue::Boolean(Some(false)),
                "rolconnlimit" => ScalarValue::Int32(Some(-1)),
                "rolpassword" => ScalarValue::from("********"),
                _ => ScalarValue::Utf8(None),
            })
            .collect();
        columns.push(column(values, field.data_type())?);
    }
    mem_table(schema, columns)
}

/// What `information_schema.views` reads (`rewrite/mod.rs` names it so;
/// not listed among the catalog's tables).
pub const INFORMATION_SCHEMA_VIEWS: &str = "culprit_information_schema_views";

/// `information_schema.views` as PostgreSQL has it: culprit's views
/// (`culprit_sql::VIEWS`, schema `public`) with their definitions, none
/// updatable. (DataFusion's lists every table, with a NULL definition.)
fn information_schema_views() -> Result<Arc<dyn TableProvider>> {
    use datafusion::arrow::datatypes::{Field, Schema};
    let names = [
        "table_catalog",
        "table_schema",
        "table_name",
        "view_definition",
        "check_option",
        "is_updatable",
        "is_insertable_into",
        "is_trigger_updatable",
        "is_trigger_deletable",
        "is_trigger_insertable_into",
    ];
    let schema = Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let columns = names
        .iter()
        .map(|column| {
            let values: StringArray = culprit_sql::VIEWS
                .iter()
                .map(|(name, sql)| match *column {
                    "table_catalog" => crate::compat::DATABASE.to_string(),
                    "table_schema" => "public".to_string(),
                    "table_name" => name.to_string(),
                    "view_definition" => sql.to_string(),
                    "check_option" => "NONE".to_string(),
                    _ => "NO".to_string(),
                })
                .map(Some)
                .collect();
            Arc::new(values) as ArrayRef
        })
        .collect();
    mem_table(schema, columns)
}

/// `pg_views`: culprit's views (`culprit_sql::VIEWS`) with their
/// definitions, in schema `public`, owned by `culprit`.
fn views(schema: SchemaRef) -> Result<Arc<dyn TableProvider>> {
    use datafusion::arrow::compute::cast;
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let values: StringArray = culprit_sql::VIEWS
                .iter()
                .map(|(name, sql)| match field.name().as_str() {
                    "schemaname" => Some("public".to_string()),
                    "viewname" => Some(name.to_string()),
                    "viewowner" => Some(crate::compat::DATABASE.to_string()),
                    "definition" => Some(sql.to_string()),
                    _ => None,
                })
                .collect();
            cast(&values, field.data_type())
        })
        .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
    mem_table(schema, columns)
}

/// The array columns of `pg_index` and `pg_constraint` (int2vector,
/// oidvector, int2[], oid[] in PostgreSQL; text in the built-in tables).
const KEY_ARRAYS: &[(&str, DataType)] = &[
    ("indkey", DataType::Int16),
    ("indoption", DataType::Int16),
    ("indcollation", DataType::Int32),
    ("indclass", DataType::Int32),
    ("conkey", DataType::Int16),
    ("confkey", DataType::Int16),
    ("confdelsetcols", DataType::Int16),
    ("conpfeqop", DataType::Int32),
    ("conppeqop", DataType::Int32),
    ("conffeqop", DataType::Int32),
    ("conexclop", DataType::Int32),
];

/// `pg_index` and `pg_constraint` without rows: culprit's tables have no
/// indexes, keys or constraints (the built-in rows describe PostgreSQL's
/// own catalog tables, which culprit does not have), so pgjdbc's
/// `getPrimaryKeys`, `getIndexInfo`, `getImportedKeys`, psql's `\d` and
/// Metabase's index sync get PostgreSQL's empty answers. Their key columns
/// are arrays, as in PostgreSQL, so the clients' array functions plan.
fn no_rows(schema: SchemaRef) -> Result<Arc<dyn TableProvider>> {
    use datafusion::arrow::datatypes::{Field, Schema};
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match KEY_ARRAYS.iter().find(|(n, _)| n == f.name()) {
            Some((_, item)) => Field::new(
                f.name(),
                DataType::List(Arc::new(Field::new_list_field(item.clone(), true))),
                true,
            ),
            None => f.as_ref().clone(),
        })
        .collect();
    let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    Ok(Arc::new(datafusion::datasource::MemTable::try_new(
        schema,
        vec![vec![]],
    )?))
}

/// A table of one batch of `columns`.
fn mem_table(schema: SchemaRef, columns: Vec<ArrayRef>) -> Result<Arc<dyn TableProvider>> {
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Arc::new(datafusion::datasource::MemTable::try_new(
        schema,
        vec![vec![batch]],
    )?))
}

/// `pg_settings`: culprit's settings (`compat::SETTINGS`, which
/// `current_setting` reads too), in the built-in view's columns.
fn settings(schema: SchemaRef) -> Result<Arc<dyn TableProvider>> {
    let all = crate::compat::SETTINGS;
    let mut columns: Vec<ArrayRef> = Vec::new();
    for field in schema.fields() {
        let values: Vec<ScalarValue> = all
            .iter()
            .map(|(name, value, desc)| match field.name().as_str() {
                "name" => ScalarValue::from(*name),
                "setting" | "reset_val" | "boot_val" => ScalarValue::from(*value),
                "short_desc" => ScalarValue::from(*desc),
                "context" => ScalarValue::from("internal"),
                "source" => ScalarValue::from("default"),
                "vartype" => ScalarValue::from(if value.parse::<i64>().is_ok() {
                    "integer"
                } else if *value == "on" || *value == "off" {
                    "bool"
                } else {
                    "string"
                }),
                "pending_restart" => ScalarValue::Boolean(Some(false)),
                _ => ScalarValue::Utf8(None),
            })
            .collect();
        columns.push(column(values, field.data_type())?);
    }
    mem_table(schema, columns)
}

/// `pg_proc`: the built-in rows, then culprit's.
#[derive(Debug)]
struct Proc {
    builtin: Arc<dyn TableProvider>,
    namespaces: Option<Arc<dyn TableProvider>>,
}

impl Proc {
    /// The oid of schema `public` (the catalog numbers schemas itself).
    async fn public(&self, state: &dyn Session) -> Result<Option<i32>> {
        let Some(ns) = &self.namespaces else {
            return Ok(None);
        };
        let plan = ns.scan(state, None, &[], None).await?;
        for b in collect(plan, state.task_ctx()).await? {
            let (Some(oid), Some(name)) = (b.column_by_name("oid"), b.column_by_name("nspname"))
            else {
                continue;
            };
            let name = datafusion::arrow::compute::cast(name, &DataType::Utf8)?;
            let oid = datafusion::arrow::compute::cast(oid, &DataType::Int32)?;
            let (name, oid) = (name.as_string::<i32>(), oid.as_primitive::<Int32Type>());
            for i in 0..b.num_rows() {
                if !name.is_null(i) && name.value(i) == "public" && !oid.is_null(i) {
                    return Ok(Some(oid.value(i)));
                }
            }
        }
        Ok(None)
    }

    /// culprit's rows, in the built-in table's columns.
    fn rows(&self, schema: &SchemaRef, public: Option<i32>) -> Result<RecordBatch> {
        let all = functions();
        let mut columns: Vec<ArrayRef> = Vec::new();
        for field in schema.fields() {
            let values: Vec<ScalarValue> = all
                .iter()
                .enumerate()
                .map(|(i, d)| value(field.name(), i, d, public))
                .collect();
            columns.push(column(values, field.data_type())?);
        }
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// One column of one culprit function's row of `pg_proc`, as text or a
/// number (cast to the built-in column's type afterwards).
fn value(column: &str, i: usize, d: &Described, public: Option<i32>) -> ScalarValue {
    let text = |s: String| ScalarValue::Utf8(Some(s));
    let table = d.kind == Kind::Table;
    // Arguments are of any type (times take timestamps, text or epoch
    // milliseconds): `"any"`, oid 2276; a table function's options are
    // text after them.
    let arg_types = |n: usize| vec!["2276"; n].join(" ");
    match column {
        "oid" => ScalarValue::Int32(Some(FIRST_OID + i as i32)),
        "proname" => text(d.name.to_string()),
        "pronamespace" => ScalarValue::Int32(public),
        "proowner" => ScalarValue::Int32(Some(10)),
        "prolang" => ScalarValue::Int32(Some(12)),
        "procost" => ScalarValue::Float64(Some(100.0)),
        "prorows" => ScalarValue::Float64(Some(if table { 1000.0 } else { 0.0 })),
        "provariadic" => ScalarValue::Int32(Some(0)),
        "prosupport" => text("-".into()),
        "prokind" => text(if d.kind == Kind::Aggregate { "a" } else { "f" }.into()),
        "prosecdef" | "proleakproof" => ScalarValue::Boolean(Some(false)),
        "proisstrict" => ScalarValue::Boolean(Some(d.kind == Kind::Scalar)),
        "proretset" => ScalarValue::Boolean(Some(table)),
        "provolatile" => text(if table { "s" } else { "i" }.into()),
        "proparallel" => text("s".into()),
        "pronargs" => ScalarValue::Int16(Some(d.args.len() as i16)),
        "pronargdefaults" => ScalarValue::Int16(Some(0)),
        "prorettype" => ScalarValue::Int32(Some(if table {
            2249
        } else {
            pg_type(&d.result[0].1).0
        })),
        "proargtypes" => text(if table {
            arg_types(d.args.len())
        } else {
            vec!["701"; d.args.len()].join(" ")
        }),
        // The full list (in, then a table function's out columns), as
        // PostgreSQL writes an array (pgjdbc's getFunctionColumns parses
        // it; the built-in rows' `[a, b]` it cannot).
        "proallargtypes" if table => {
            let mut all = vec![2276; d.args.len()];
            all.extend(d.result.iter().map(|(_, t)| pg_type(t).0));
            text(format!(
                "{{{}}}",
                all.iter()
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ))
        }
        "proargmodes" if table => {
            let mut modes = vec!["i"; d.args.len()];
            modes.extend(vec!["t"; d.result.len()]);
            text(format!("{{{}}}", modes.join(",")))
        }
        "proargnames" => {
            let mut names = d.args.clone();
            if table {
                names.extend(d.result.iter().map(|(n, _)| n.clone()));
            }
            text(format!("{{{}}}", names.join(",")))
        }
        "prosrc" => text(d.name.to_string()),
        _ => ScalarValue::Utf8(None),
    }
}

#[async_trait]
impl TableProvider for Proc {
    fn schema(&self) -> SchemaRef {
        self.builtin.schema()
    }

    fn table_type(&self) -> TableType {
        self.builtin.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let builtin = self.builtin.scan(state, projection, &[], None).await?;
        let schema = self.builtin.schema();
        let ours = self.rows(&schema, self.public(state).await?)?;
        let ours: Arc<dyn ExecutionPlan> =
            MemorySourceConfig::try_new_exec(&[vec![ours]], schema, projection.cloned())?;
        UnionExec::try_new(vec![builtin, ours])
    }
}

/// Replaces the session's `pg_catalog` (set up by datafusion-postgres) with
/// one whose `pg_proc` lists culprit's functions, and registers
/// `pg_get_function_arguments` and `pg_get_function_result` for them.
/// The sessions of the server (`sessions.rs`).
const STAT_ACTIVITY: &str = "pg_stat_activity";

pub fn register(
    ctx: &SessionContext,
    sessions: &crate::sessions::Sessions,
    roles: Vec<RoleRow>,
) -> Result<()> {
    let catalog = ctx
        .catalog("datafusion")
        .ok_or_else(|| DataFusionError::Plan("no catalog datafusion".into()))?;
    if let Some(inner) = catalog.schema("pg_catalog") {
        if inner.downcast_ref::<Catalog>().is_none() {
            catalog.register_schema(
                "pg_catalog",
                Arc::new(Catalog {
                    inner,
                    sessions: sessions.clone(),
                    roles: Arc::new(roles),
                }),
            )?;
        }
    }
    describe(ctx, "pg_get_function_arguments", |d| d.arguments.clone());
    describe(ctx, "pg_get_function_result", result_text);
    describe(ctx, "pg_get_function_identity_arguments", |d| {
        d.arguments.clone()
    });
    Ok(())
}

/// A function of a `pg_proc` oid: the text for culprit's functions, NULL
/// for the built-in ones (whose signatures the catalog does not keep).
fn describe(ctx: &SessionContext, name: &'static str, f: fn(&Described) -> String) {
    let udf = datafusion::logical_expr::create_udf(
        name,
        vec![DataType::Int64],
        DataType::Utf8,
        datafusion::logical_expr::Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let scalar = matches!(args[0], ColumnarValue::Scalar(_));
            let arr = args[0].to_array(1)?;
            let oids = datafusion::arrow::compute::cast(&arr, &DataType::Int64)?;
            let oids = oids.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            let out: StringArray = (0..oids.len())
                .map(|i| {
                    if oids.is_null(i) {
                        return None;
                    }
                    i32::try_from(oids.value(i)).ok().and_then(function).map(f)
                })
                .collect();
            let out: ArrayRef = Arc::new(out);
            Ok(if scalar {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            } else {
                ColumnarValue::Array(out)
            })
        }),
    );
    ctx.register_udf(udf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn culprits_is_described() {
        let (i, d) = functions()
            .iter()
            .enumerate()
            .find(|(_, d)| d.name == "culprits")
            .unwrap();
        assert_eq!(function(FIRST_OID + i as i32).unwrap().name, "culprits");
        assert_eq!(
            result_text(d),
            "TABLE(victim_query text, culprit_kind text, culprit_query text, blame_seconds double precision, \
             dor double precision, naive_overlap_seconds double precision, deep_overlap_seconds double precision)"
        );
        assert!(function(FIRST_OID - 1).is_none());
    }
}
