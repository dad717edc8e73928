//! The users' own tables (teams, cost centres, SLAs): stored in the store
//! like telemetry (Parquet files a manifest lists, one atomic commit per
//! statement), with the columns their creator gave them, visible to every
//! session and after a restart.
//!
//! A session learns them from the newest manifest ([`sync`], run before
//! every statement is planned), so a table another session created or
//! dropped is there, or gone, at the next statement. Rows are written by
//! DataFusion's own `INSERT` path ([`UserTable::insert_into`]); `CREATE
//! TABLE` and `DROP TABLE` are turned into store commits by
//! [`run_user_ddl`]. Telemetry tables are not user tables: they change
//! only through `culprit ingest`.

use std::sync::Arc;

use async_trait::async_trait;
use culprit_core::Table;
use culprit_store::{Store, StoreError, UserTableProblem};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, Result, TableReference};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{
    CreateMemoryTable, DdlStatement, DropTable, Expr, LogicalPlan, TableProviderFilterPushDown,
    TableType,
};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use datafusion::prelude::SessionContext;
use futures::StreamExt;

/// Rows buffered before they are written as part of a Parquet file.
const ROWS_PER_WRITE: usize = 64 * 1024;

fn store_error(e: StoreError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// One user table of the store.
#[derive(Debug)]
pub struct UserTable {
    store: Store,
    name: String,
    schema: SchemaRef,
}

impl UserTable {
    /// The scheduler's tables (`reports.<job>`, `cron.job_run_details`)
    /// are written by its runs only.
    fn writable(&self) -> Result<()> {
        if self.name.contains('.') {
            return Err(scheduler_only(&self.name));
        }
        Ok(())
    }

    pub fn new(store: Store, name: &str, schema: SchemaRef) -> UserTable {
        UserTable {
            store,
            name: name.to_string(),
            schema,
        }
    }
}

#[async_trait]
impl TableProvider for UserTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let manifest = self.store.manifest().await.map_err(store_error)?;
        let paths = manifest.files_of_user(&self.name).map(|f| f.path.as_str());
        crate::table::scan_files(
            &self.store,
            paths,
            self.schema.clone(),
            state,
            projection,
            filters,
            limit,
        )
        .await
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.writable()?;
        let sink = UserSink {
            store: self.store.clone(),
            name: self.name.clone(),
            schema: self.schema.clone(),
            replace: !matches!(insert_op, InsertOp::Append),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    async fn truncate(&self, _state: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        self.writable()?;
        let sink = UserSink {
            store: self.store.clone(),
            name: self.name.clone(),
            schema: self.schema.clone(),
            replace: true,
        };
        let nothing = Arc::new(EmptyExec::new(self.schema.clone()));
        Ok(Arc::new(DataSinkExec::new(nothing, Arc::new(sink), None)))
    }
}

/// Writes an `INSERT`'s rows to a user table, committed at the end.
#[derive(Debug)]
struct UserSink {
    store: Store,
    name: String,
    schema: SchemaRef,
    /// The rows replace the table's (`INSERT OVERWRITE`, `TRUNCATE`).
    replace: bool,
}

impl DisplayAs for UserSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "UserSink: table={}", self.name)
    }
}

#[async_trait]
impl DataSink for UserSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let mut batch = self.store.begin();
        if self.replace {
            batch.replace_user_rows(&self.name);
        }
        let written = write_stream(&mut batch, &self.name, &self.schema, data).await;
        match written {
            Ok(rows) => {
                batch.commit().await.map_err(store_error)?;
                Ok(rows)
            }
            Err(e) => {
                batch.abort().await;
                Err(e)
            }
        }
    }
}

/// Writes a stream of rows to user table `name` of the pending batch, a
/// bounded number of rows at a time; returns how many.
pub async fn write_stream(
    batch: &mut culprit_store::PendingBatch,
    name: &str,
    schema: &SchemaRef,
    mut data: SendableRecordBatchStream,
) -> Result<u64> {
    let mut pending: Vec<RecordBatch> = Vec::new();
    let (mut buffered, mut rows) = (0usize, 0u64);
    // A table with no rows yet still gets its commit (an empty append).
    batch
        .write_user(name, schema, &[])
        .await
        .map_err(store_error)?;
    while let Some(next) = data.next().await {
        let next = conform(name, schema, next?)?;
        buffered += next.num_rows();
        rows += next.num_rows() as u64;
        pending.push(next);
        if buffered >= ROWS_PER_WRITE {
            batch
                .write_user(name, schema, &std::mem::take(&mut pending))
                .await
                .map_err(store_error)?;
            buffered = 0;
        }
    }
    batch
        .write_user(name, schema, &pending)
        .await
        .map_err(store_error)?;
    Ok(rows)
}

/// Rows in the table's columns: cast where the query's types differ (a
/// timestamp's unit), and no NULL where the table says NOT NULL.
fn conform(name: &str, schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    use datafusion::arrow::array::Array;
    use datafusion::arrow::compute::{cast_with_options, CastOptions};
    // A value that does not convert is an error, never a NULL.
    let strict = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    let mismatch = |reason: String, code| {
        store_error(StoreError::UserTable {
            table: name.to_string(),
            reason,
            code,
        })
    };
    if batch.num_columns() != schema.fields().len() {
        return Err(mismatch(
            format!(
                "{} values for {} columns",
                batch.num_columns(),
                schema.fields().len()
            ),
            UserTableProblem::Mismatch,
        ));
    }
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(mismatch(
                format!(
                    "null value in column \"{}\" violates not-null constraint",
                    field.name()
                ),
                UserTableProblem::NotNull,
            ));
        }
        columns.push(if column.data_type() == field.data_type() {
            column.clone()
        } else {
            cast_with_options(column, field.data_type(), &strict).map_err(|e| {
                mismatch(
                    format!("column {}: {e}", field.name()),
                    UserTableProblem::Mismatch,
                )
            })?
        });
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// The type a user table stores for a column's type: timestamps as UTC
/// microseconds (as the telemetry's), others as they are.
fn stored_type(
    t: &datafusion::arrow::datatypes::DataType,
) -> datafusion::arrow::datatypes::DataType {
    use datafusion::arrow::datatypes::{DataType, TimeUnit};
    match t {
        DataType::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        other => other.clone(),
    }
}

/// Brings the session's user tables up to the store's newest manifest:
/// new ones registered, dropped ones removed, changed ones replaced. A
/// session view of the same name is left alone.
pub async fn sync(ctx: &SessionContext, store: &Store) -> Result<()> {
    let manifest = store.manifest().await.map_err(store_error)?;
    let Some(catalog) = ctx.catalog("datafusion") else {
        return Ok(());
    };
    // The scheduler's tables: `cron.job`, `cron.job_run_details`, and
    // the reports' history `reports.<job>` (written by its runs only:
    // `UserTable::writable`, `run_user_ddl`).
    for name in [CRON_SCHEMA, culprit_store::REPORTS_SCHEMA] {
        if catalog.schema(name).is_none() {
            catalog.register_schema(
                name,
                Arc::new(datafusion::catalog::MemorySchemaProvider::new()),
            )?;
        }
    }
    for schema_name in ["public", CRON_SCHEMA, culprit_store::REPORTS_SCHEMA] {
        let Some(schema) = catalog.schema(schema_name) else {
            continue;
        };
        for name in schema.table_names() {
            let Some(current) = schema.table(&name).await? else {
                continue;
            };
            let Some(mine) = current.downcast_ref::<UserTable>() else {
                continue;
            };
            let stored = manifest
                .user_table(&mine.name)
                .map(|t| t.schema())
                .transpose()
                .map_err(store_error)?;
            if stored.as_ref() != Some(&mine.schema) {
                schema.deregister_table(&name)?;
            }
        }
    }
    for table in &manifest.user_tables {
        let (schema_name, bare) = match table.name.split_once('.') {
            Some((schema, bare)) => (schema, bare),
            None => ("public", table.name.as_str()),
        };
        let Some(schema) = catalog.schema(schema_name) else {
            continue;
        };
        if let Some(existing) = schema.table(bare).await? {
            // A user table already, or a session's view of that name; in
            // the scheduler's schemas, the placeholder of a table not yet
            // written is replaced.
            if existing.downcast_ref::<UserTable>().is_some() || schema_name == "public" {
                continue;
            }
            schema.deregister_table(bare)?;
        }
        let provider = UserTable::new(
            store.clone(),
            &table.name,
            table.schema().map_err(store_error)?,
        );
        schema.register_table(bare.to_string(), Arc::new(provider))?;
    }
    if let Some(cron) = catalog.schema(CRON_SCHEMA) {
        if manifest
            .user_table(culprit_store::RUN_DETAILS_TABLE)
            .is_none()
        {
            // No run yet: pg_cron's table, empty.
            let details = culprit_store::run_details_schema();
            cron.deregister_table("job_run_details")?;
            cron.register_table(
                "job_run_details".into(),
                Arc::new(datafusion::datasource::MemTable::try_new(
                    details,
                    vec![vec![]],
                )?),
            )?;
        }
        if manifest.user_table(culprit_store::PAGES_TABLE).is_none() {
            cron.deregister_table("report_pages")?;
            cron.register_table(
                "report_pages".into(),
                Arc::new(datafusion::datasource::MemTable::try_new(
                    culprit_store::pages_schema(),
                    vec![vec![]],
                )?),
            )?;
        }
        cron.deregister_table("job")?;
        cron.register_table("job".into(), Arc::new(jobs_table(&manifest.cron_jobs)?))?;
    }
    Ok(())
}

/// pg_cron's schema.
pub const CRON_SCHEMA: &str = "cron";

/// `cron.job`, with pg_cron's columns.
fn jobs_table(jobs: &[culprit_store::CronJob]) -> Result<datafusion::datasource::MemTable> {
    use datafusion::arrow::array::{ArrayRef, BooleanArray, Int32Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::DataType;
    let schema = Arc::new(Schema::new(vec![
        Field::new("jobid", DataType::Int64, false),
        Field::new("schedule", DataType::Utf8, false),
        Field::new("command", DataType::Utf8, false),
        Field::new("nodename", DataType::Utf8, false),
        Field::new("nodeport", DataType::Int32, false),
        Field::new("database", DataType::Utf8, false),
        Field::new("username", DataType::Utf8, false),
        Field::new("active", DataType::Boolean, false),
        Field::new("jobname", DataType::Utf8, false),
        // culprit's: `rows`, or `html` (a page per run in cron.report_pages).
        Field::new("format", DataType::Utf8, false),
    ]));
    let text = |f: &dyn Fn(&culprit_store::CronJob) -> String| -> ArrayRef {
        Arc::new(StringArray::from(jobs.iter().map(f).collect::<Vec<_>>()))
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(
            jobs.iter().map(|j| j.jobid).collect::<Vec<_>>(),
        )),
        text(&|j| j.schedule.clone()),
        text(&|j| j.command.clone()),
        text(&|_| "localhost".into()),
        Arc::new(Int32Array::from(vec![0; jobs.len()])),
        text(&|_| "culprit".into()),
        text(&|j| j.username.clone()),
        Arc::new(BooleanArray::from(
            jobs.iter().map(|j| j.active).collect::<Vec<_>>(),
        )),
        text(&|j| j.jobname.clone()),
        text(&|j| j.format.clone().unwrap_or_else(|| "rows".into())),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    datafusion::datasource::MemTable::try_new(schema, vec![vec![batch]])
}

/// What a user-table DDL statement did, for its command tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdlDone {
    /// `CREATE TABLE` with the rows its query gave (`SELECT n` in
    /// PostgreSQL's tags for `CREATE TABLE ... AS`), `None` for a table
    /// declared with columns.
    Created(Option<u64>),
    Dropped,
}

/// The bare name of a table in the session's schema, or `None` when the
/// reference names another catalog or schema.
fn bare_name(name: &TableReference) -> Option<&str> {
    let schema_ok = name.schema().is_none_or(|s| s == "public");
    let catalog_ok = name.catalog().is_none_or(|c| c == "datafusion");
    (schema_ok && catalog_ok).then(|| name.table())
}

fn scheduler_only(name: &str) -> DataFusionError {
    store_error(StoreError::UserTable {
        table: name.to_string(),
        reason: "is the scheduler's: reports and their runs are written by the jobs of \
                 cron.schedule (cron.unschedule stops a job; its history stays)"
            .into(),
        code: UserTableProblem::Telemetry,
    })
}

fn telemetry(name: &str) -> DataFusionError {
    store_error(culprit_store::telemetry_refusal(name))
}

/// Runs `CREATE TABLE` (declared or `AS` a query) and `DROP TABLE` of user
/// tables as store commits. `None` for other plans, and for what stays in
/// the session: views, tables of other schemas, and `TEMPORARY` tables
/// (which DataFusion refuses today).
pub async fn run_user_ddl(
    ctx: &SessionContext,
    store: &Store,
    plan: &LogicalPlan,
) -> Option<Result<DdlDone>> {
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) if !create.temporary => {
            if let Some(schema) = create.name.schema() {
                if schema == CRON_SCHEMA || schema == culprit_store::REPORTS_SCHEMA {
                    return Some(Err(scheduler_only(&create.name.to_string())));
                }
            }
            let name = bare_name(&create.name)?;
            if let Err(e) = culprit_store::check_user_table_name(name) {
                return Some(Err(store_error(e)));
            }
            Some(create_table(ctx, store, name, create).await)
        }
        LogicalPlan::Ddl(DdlStatement::DropTable(DropTable {
            name, if_exists, ..
        })) => {
            if let Some(schema) = name.schema() {
                if schema == CRON_SCHEMA || schema == culprit_store::REPORTS_SCHEMA {
                    return Some(Err(scheduler_only(&name.to_string())));
                }
            }
            let name = bare_name(name)?;
            if name.parse::<Table>().is_ok() {
                return Some(Err(telemetry(name)));
            }
            let manifest = match store.manifest().await {
                Ok(m) => m,
                Err(e) => return Some(Err(store_error(e))),
            };
            if manifest.user_table(name).is_none() && ctx.table_exist(name).unwrap_or(false) {
                // A view of the session.
                return None;
            }
            Some(drop_table(ctx, store, name, *if_exists).await)
        }
        _ => None,
    }
}

async fn create_table(
    ctx: &SessionContext,
    store: &Store,
    name: &str,
    create: &CreateMemoryTable,
) -> Result<DdlDone> {
    let manifest = store.manifest().await.map_err(store_error)?;
    if create.if_not_exists && manifest.user_table(name).is_some() {
        return Ok(DdlDone::Created(None));
    }
    let declared = matches!(create.input.as_ref(), LogicalPlan::EmptyRelation(_));
    let arrow: &Schema = create.input.schema().as_arrow();
    // Declared columns keep their NOT NULL; a query's columns are nullable,
    // as PostgreSQL makes them.
    let fields: Vec<Field> = arrow
        .fields()
        .iter()
        .map(|f| {
            let f = f.as_ref().clone();
            let f = f.clone().with_data_type(stored_type(f.data_type()));
            if declared {
                f
            } else {
                f.with_nullable(true)
            }
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let mut batch = store.begin();
    batch
        .create_user_table(name, &schema, create.or_replace, create.if_not_exists)
        .map_err(store_error)?;
    let rows = if declared {
        batch
            .write_user(name, &schema, &[])
            .await
            .map_err(store_error)
            .map(|_| None)
    } else {
        match ctx
            .execute_logical_plan(create.input.as_ref().clone())
            .await
        {
            Ok(df) => match df.execute_stream().await {
                Ok(stream) => write_stream(&mut batch, name, &schema, stream)
                    .await
                    .map(Some),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            batch.abort().await;
            return Err(e);
        }
    };
    batch.commit().await.map_err(store_error)?;
    sync(ctx, store).await?;
    Ok(DdlDone::Created(rows))
}

async fn drop_table(
    ctx: &SessionContext,
    store: &Store,
    name: &str,
    if_exists: bool,
) -> Result<DdlDone> {
    let mut batch = store.begin();
    batch
        .drop_user_table(name, if_exists)
        .map_err(store_error)?;
    batch.commit().await.map_err(store_error)?;
    sync(ctx, store).await?;
    Ok(DdlDone::Dropped)
}

/// The schema of user table `name` as the session knows it, if it is one.
pub async fn user_table_schema(ctx: &SessionContext, name: &str) -> Option<SchemaRef> {
    let provider = ctx.table_provider(name).await.ok()?;
    let table = provider.downcast_ref::<UserTable>()?;
    Some(table.schema.clone())
}

/// Runs one SQL text outside the server (`culprit sql`): user-table DDL as
/// store commits, the rest by DataFusion; the rows of its result.
pub async fn run_sql(ctx: &SessionContext, store: &Store, sql: &str) -> Result<Vec<RecordBatch>> {
    sync(ctx, store).await?;
    let plan = ctx.state().create_logical_plan(sql).await?;
    run_plan(ctx, store, plan).await
}

/// Runs one parsed statement the same way (a scheduled report's).
pub async fn run_statement(
    ctx: &SessionContext,
    store: &Store,
    statement: datafusion::sql::sqlparser::ast::Statement,
) -> Result<Vec<RecordBatch>> {
    sync(ctx, store).await?;
    let plan = ctx
        .state()
        .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
            statement,
        )))
        .await?;
    run_plan(ctx, store, plan).await
}

async fn run_plan(
    ctx: &SessionContext,
    store: &Store,
    plan: LogicalPlan,
) -> Result<Vec<RecordBatch>> {
    if let Some(done) = run_user_ddl(ctx, store, &plan).await {
        done?;
        return Ok(vec![]);
    }
    ctx.execute_logical_plan(plan).await?.collect().await
}
