//! The one path of every statement, whatever the protocol:
//!
//! 1. parse and 2. policy: the gate (`policy.rs`) parses the client's text
//!    and admits each statement; nothing after it reads SQL text;
//! 3. session hooks (`hooks/`): `SET`, `SHOW`, cursors, transactions and
//!    savepoints are answered from the admitted tree;
//! 4. rewrite (`rewrite/`): the catalog queries of known clients, on the tree;
//! 5. parameters (`parameters.rs`): the extended protocol's values, bound into
//!    the plan made at Parse, or into the tree of a deferred statement;
//! 6. plan, 7. execute, 8. encode: [`Pipeline::plan`] and
//!    [`Pipeline::execute_and_encode`], the only place a statement is planned,
//!    executed and encoded.
//!
//! The simple protocol runs each admitted statement at once
//! ([`Pipeline::run`]). The extended protocol prepares at Parse
//! ([`Pipeline::prepare`]: hooks, rewrite and plan, for Describe) and runs
//! at Execute, through the same [`Pipeline::run`]. The statement timeout
//! and cancel requests (`guard.rs`) cover the whole run.

use std::sync::Arc;

use datafusion::arrow::array::UInt64Array;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::parser::Statement as PlannableStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::arrow_pg::datatypes::df::encode_dataframe;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::DfSessionService;
use pgwire::api::portal::Format;
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{FieldInfo, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::{ClientInfo, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::types::format::FormatOptions;

use culprit_sql::user_tables::{self, DdlDone};
use culprit_store::Store;
use datafusion::sql::sqlparser::ast::CopyTarget;

use crate::copy::{self, CopyIn, CopyOptions, Slot};
use crate::cursors::{Cursor, Step};
use crate::hooks::{no_columns, SessionHooks};
use crate::parameters::{self, Values};
use crate::sqlstate;

/// A statement the gate admitted, with how far it is planned. The extended
/// protocol stores it as its prepared statement.
#[derive(Clone, Debug)]
pub struct AdmittedStatement {
    /// The tree the gate admitted, as the client wrote it: hooks answer
    /// from it, and it is what gets rewritten and planned.
    pub tree: Statement,
    pub plan: PlanStage,
}

/// How far a statement is planned.
#[derive(Clone, Debug)]
pub enum PlanStage {
    /// Not yet: the simple protocol plans when it runs (its values are
    /// literals in the tree).
    Unplanned,
    /// Planned at Parse, with `$n` placeholders that Execute binds the
    /// portal's values into (or a hook's description of its answer).
    Planned(LogicalPlan),
    /// Planned at Parse with every `$n` NULL, only to describe the result's
    /// columns, because DataFusion cannot plan it with placeholders (a
    /// table function's arguments): Execute binds the values into the tree
    /// and plans it then.
    Deferred {
        described: LogicalPlan,
        parameters: usize,
    },
}

impl AdmittedStatement {
    /// A statement of the simple protocol.
    pub fn unplanned(tree: Statement) -> AdmittedStatement {
        AdmittedStatement {
            tree,
            plan: PlanStage::Unplanned,
        }
    }

    /// The plan made at Parse, which Describe reports.
    pub fn described(&self) -> Option<&LogicalPlan> {
        match &self.plan {
            PlanStage::Unplanned => None,
            PlanStage::Planned(plan) => Some(plan),
            PlanStage::Deferred { described, .. } => Some(described),
        }
    }

    /// The number of columns the statement returns (0 for DDL and DML).
    pub fn result_columns(&self) -> usize {
        match self.described() {
            Some(LogicalPlan::Ddl(_) | LogicalPlan::Dml(_)) | None => 0,
            Some(plan) => plan.schema().fields().len(),
        }
    }
}

fn api_error(e: datafusion::error::DataFusionError) -> PgWireError {
    PgWireError::ApiError(Box::new(e))
}

/// The statement pipeline of one connection.
pub struct Pipeline {
    ctx: Arc<SessionContext>,
    hooks: SessionHooks,
    /// datafusion-postgres's parser, used only for the wire types of a
    /// plan's parameters and columns (it maps oid-alias catalog columns and
    /// others beyond the Arrow types).
    types: Arc<datafusion_postgres::Parser>,
    /// The store, for its user tables.
    store: Store,
    /// The gate, for the commands of scheduled reports.
    gate: Arc<crate::policy::Gate>,
    /// The connection's `COPY ... FROM STDIN` in progress (`copy.rs`).
    pub copy_in: Slot<CopyIn>,
    /// Why it failed, kept until the client ends its data.
    pub copy_failed: Slot<String>,
}

impl Pipeline {
    pub fn new(ctx: Arc<SessionContext>, store: Store, gate: Arc<crate::policy::Gate>) -> Pipeline {
        let types = DfSessionService::new_with_hooks(ctx.clone(), vec![]).query_parser();
        Pipeline {
            ctx,
            hooks: SessionHooks::default(),
            types,
            store,
            gate,
            copy_in: Slot::default(),
            copy_failed: Slot::default(),
        }
    }

    /// Prepares an admitted statement at Parse: described by a hook that
    /// will answer it, else rewritten and planned with its placeholders,
    /// else deferred (see [`PlanStage::Deferred`]).
    pub async fn prepare(
        &self,
        client: &(dyn ClientInfo + Send + Sync),
        tree: Statement,
    ) -> PgWireResult<AdmittedStatement> {
        if let Some(described) = self.hooks.describe(&tree, &self.ctx, client).await {
            let plan = PlanStage::Planned(described?);
            return Ok(AdmittedStatement { tree, plan });
        }
        if let Some(call) = crate::reports::cron_call(&tree) {
            // Described as what it returns: one bigint (schedule) or
            // boolean (unschedule).
            let call = call.map_err(|e| copy_error(sqlstate::INVALID_PARAMETER_VALUE, &e))?;
            let plan = self.cron_answer(&call, None)?.into_unoptimized_plan();
            return Ok(AdmittedStatement {
                tree,
                plan: PlanStage::Planned(plan),
            });
        }
        if let Some(plan) = self.describe_cursor_statement(&tree) {
            return Ok(AdmittedStatement { tree, plan: plan? });
        }
        if matches!(tree, Statement::Copy { .. }) {
            // Run whole at Execute (`copy.rs`); it returns no row description.
            return Ok(AdmittedStatement::unplanned(tree));
        }
        let plan = match self.plan(&tree).await {
            Ok(plan) => PlanStage::Planned(plan),
            Err(error) => self.defer(&tree).await.ok_or(error)?,
        };
        Ok(AdmittedStatement { tree, plan })
    }

    /// A statement planned with its parameters NULL, if it has parameters
    /// and plans so.
    async fn defer(&self, tree: &Statement) -> Option<PlanStage> {
        let (with_nulls, parameters) = parameters::with_nulls(tree)?;
        let described = self.plan(&with_nulls).await.ok()?;
        Some(PlanStage::Deferred {
            described,
            parameters,
        })
    }

    /// Runs an admitted statement: a hook's answer, or its plan executed and
    /// encoded in `format`. `values` are the extended protocol's.
    pub async fn run(
        &self,
        client: &mut dyn HookClient,
        statement: &AdmittedStatement,
        values: Values<'_>,
        format: &Format,
    ) -> PgWireResult<Response> {
        let tree = &statement.tree;
        let described = statement.described();
        if let Some(answer) = self.hooks.answer(tree, described, &self.ctx, client).await {
            return answer;
        }
        if let Some(answer) = self
            .cursor_statement(client, statement, values, format)
            .await
        {
            return answer;
        }
        if let Statement::Copy { .. } = tree {
            return self.copy(tree).await;
        }
        if let Some(call) = crate::reports::cron_call(tree) {
            let call = call.map_err(|e| copy_error(sqlstate::INVALID_PARAMETER_VALUE, &e))?;
            let user = client
                .metadata()
                .get(pgwire::api::METADATA_USER)
                .cloned()
                .unwrap_or_default();
            let value = match &call {
                crate::reports::CronCall::Schedule {
                    name,
                    schedule,
                    command,
                    format,
                } => crate::reports::schedule(
                    &self.store,
                    name,
                    schedule,
                    command,
                    format.as_deref(),
                    &user,
                    &self.gate,
                )
                .await
                .map(Some),
                crate::reports::CronCall::Unschedule(name) => {
                    crate::reports::unschedule(&self.store, name, &user)
                        .await
                        .map(|_| None)
                }
            }
            .map_err(|e| copy_error(e.code, &e.message))?;
            let df = self.cron_answer(&call, Some(value))?;
            let options = FormatOptions::from_client_metadata(client.metadata());
            return self
                .execute_and_encode(df.into_unoptimized_plan(), tree, format, options)
                .await;
        }
        let plan = match &statement.plan {
            PlanStage::Unplanned => self.plan(tree).await?,
            PlanStage::Planned(plan) => {
                let wire_types = self.parameter_types(statement)?;
                parameters::bind_into_plan(plan, &wire_types, values)?
            }
            PlanStage::Deferred { .. } => {
                self.plan(&parameters::bind_into_tree(tree, values)?)
                    .await?
            }
        };
        let options = FormatOptions::from_client_metadata(client.metadata());
        self.execute_and_encode(plan, tree, format, options).await
    }

    /// How a cursor statement is described at Parse: `DECLARE` has no
    /// columns (its query's parameters are bound at Execute), `FETCH` the
    /// columns of its cursor, `MOVE` and `CLOSE` none. `None` for other
    /// statements.
    fn describe_cursor_statement(&self, tree: &Statement) -> Option<PgWireResult<PlanStage>> {
        Some(Ok(match tree {
            Statement::Declare { .. } => match parameters::with_nulls(tree) {
                Some((_, parameters)) => PlanStage::Deferred {
                    described: no_columns(),
                    parameters,
                },
                None => PlanStage::Planned(no_columns()),
            },
            Statement::Fetch {
                name, into: None, ..
            } => {
                let cursor = match self.hooks.cursors.get(&name.value) {
                    Ok(cursor) => cursor,
                    Err(e) => return Some(Err(e)),
                };
                let described = match cursor.try_lock() {
                    Ok(cursor) => cursor.described.clone(),
                    Err(_) => {
                        return Some(Err(copy_error(
                            sqlstate::INTERNAL_ERROR,
                            "the cursor is in use",
                        )))
                    }
                };
                PlanStage::Planned(LogicalPlan::EmptyRelation(
                    datafusion::logical_expr::EmptyRelation {
                        produce_one_row: false,
                        schema: described,
                    },
                ))
            }
            Statement::Fetch { .. } | Statement::Close { .. } => PlanStage::Planned(no_columns()),
            _ => return None,
        }))
    }

    /// Runs a cursor statement (`cursors.rs`); `None` for other statements.
    async fn cursor_statement(
        &self,
        client: &mut dyn HookClient,
        statement: &AdmittedStatement,
        values: Values<'_>,
        format: &Format,
    ) -> Option<PgWireResult<Response>> {
        use datafusion::sql::sqlparser::ast::{CloseCursor, DeclareType};
        let answer = match &statement.tree {
            Statement::Declare { .. } => async {
                let tree = match &statement.plan {
                    PlanStage::Deferred { .. } => parameters::bind_into_tree(&statement.tree, values)?,
                    _ => statement.tree.clone(),
                };
                let Statement::Declare { stmts } = &tree else {
                    return Err(copy_error(sqlstate::INTERNAL_ERROR, "not a DECLARE"));
                };
                let mut answer = Err(copy_error(sqlstate::SYNTAX_ERROR, "DECLARE names no cursor"));
                for declare in stmts {
                    let (Some(DeclareType::Cursor), Some(name), Some(query)) = (
                        declare.declare_type.as_ref(),
                        declare.names.first(),
                        declare.for_query.as_ref(),
                    ) else {
                        return Err(copy_error(
                            sqlstate::SYNTAX_ERROR,
                            "DECLARE declares a cursor: DECLARE name [SCROLL] CURSOR [WITH HOLD] FOR query",
                        ));
                    };
                    let hold = declare.hold == Some(true);
                    if !hold && client.transaction_status() == pgwire::messages::response::TransactionStatus::Idle {
                        return Err(copy_error(
                            sqlstate::NO_ACTIVE_TRANSACTION,
                            "DECLARE CURSOR can only be used in transaction blocks (or declare it WITH HOLD)",
                        ));
                    }
                    self.hooks.cursors.free(&name.value)?;
                    let plan = self.plan(&Statement::Query(query.clone())).await?;
                    let described = plan.schema().clone();
                    let stream = self
                        .ctx
                        .execute_logical_plan(plan)
                        .await
                        .map_err(api_error)?
                        .execute_stream()
                        .await
                        .map_err(api_error)?;
                    let cursor = Cursor::new(
                        stream,
                        described,
                        declare.scroll == Some(true),
                        hold,
                        declare.binary == Some(true),
                    )
                    .await?;
                    answer = Ok(self.hooks.cursors.declare(&name.value, cursor));
                }
                answer
            }
            .await,
            Statement::Fetch {
                name,
                direction,
                into,
                ..
            } => async {
                let moving = into.as_ref().is_some_and(crate::cursors::is_move_mark);
                let step = Step::of(direction)?;
                let cursor = self.hooks.cursors.get(&name.value)?;
                let mut cursor = cursor.lock().await;
                let rows = cursor.step(step).await?;
                if moving {
                    return Ok(Response::Execution(Tag::new("MOVE").with_rows(rows.num_rows())));
                }
                let options = FormatOptions::from_client_metadata(client.metadata());
                cursor.answer(rows, format, options)
            }
            .await,
            Statement::Close { cursor } => self.hooks.cursors.close(match cursor {
                CloseCursor::All => None,
                CloseCursor::Specific { name } => Some(&name.value),
            }),
            _ => return None,
        };
        Some(answer)
    }

    /// The connection's SQL session.
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// The columns of the cursor `name`, if it is open (a portal Describe
    /// may name it).
    pub fn cursor_fields(
        &self,
        name: &str,
        options: FormatOptions,
    ) -> Option<PgWireResult<Vec<FieldInfo>>> {
        let cursor = self.hooks.cursors.get(name).ok()?;
        let cursor = cursor.try_lock().ok()?;
        Some(cursor.fields(options))
    }

    /// Plans a tree, its unnamed result columns named as PostgreSQL names
    /// them (`rewrite/column_names.rs`), after the catalog rewrites of known
    /// clients, with the store's user tables as they are now; oid columns
    /// are described as PostgreSQL describes them (`oid_types.rs`).
    async fn plan(&self, tree: &Statement) -> PgWireResult<LogicalPlan> {
        user_tables::sync(&self.ctx, &self.store)
            .await
            .map_err(api_error)?;
        let mut named = tree.clone();
        crate::rewrite::postgres_names(&mut named);
        let statement = crate::rewrite::catalog_query(&named).unwrap_or(named);
        let plan = self
            .ctx
            .state()
            .statement_to_plan(PlannableStatement::Statement(Box::new(statement)))
            .await
            .map_err(api_error)?;
        crate::oid_types::as_postgres(plan).map_err(api_error)
    }

    /// Executes a plan and encodes its result: rows in `format`, or the
    /// `INSERT` tag with its count (what clients read for an insert).
    async fn execute_and_encode(
        &self,
        plan: LogicalPlan,
        tree: &Statement,
        format: &Format,
        options: FormatOptions,
    ) -> PgWireResult<Response> {
        if let Some(done) = user_tables::run_user_ddl(&self.ctx, &self.store, &plan).await {
            let tag = match done.map_err(api_error)? {
                DdlDone::Created(Some(rows)) => Tag::new("SELECT").with_rows(rows as usize),
                DdlDone::Created(None) => Tag::new("CREATE TABLE"),
                DdlDone::Dropped => Tag::new("DROP TABLE"),
            };
            return Ok(Response::Execution(tag));
        }
        let df = self
            .ctx
            .execute_logical_plan(plan)
            .await
            .map_err(api_error)?;
        if matches!(tree, Statement::Insert(_)) {
            return insert_tag(df).await;
        }
        if matches!(tree, Statement::Truncate(_)) {
            df.collect().await.map_err(api_error)?;
            return Ok(Response::Execution(Tag::new("TRUNCATE TABLE")));
        }
        let rows = encode_dataframe(df, format, Some(Arc::new(options))).await?;
        Ok(Response::Query(rows))
    }

    /// The one-row answer of a pg_cron call: the job id of `schedule`,
    /// `true` for `unschedule` (`None`: only its columns, to describe it).
    fn cron_answer(
        &self,
        call: &crate::reports::CronCall,
        value: Option<Option<i64>>,
    ) -> PgWireResult<DataFrame> {
        use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        let (field, column): (Field, ArrayRef) = match (call, value) {
            (crate::reports::CronCall::Schedule { .. }, v) => (
                Field::new(call.column(), DataType::Int64, true),
                Arc::new(Int64Array::from(match v {
                    Some(id) => vec![id],
                    None => vec![],
                })),
            ),
            (crate::reports::CronCall::Unschedule(_), v) => (
                Field::new(call.column(), DataType::Boolean, true),
                Arc::new(BooleanArray::from(match v {
                    Some(_) => vec![true],
                    None => vec![],
                })),
            ),
        };
        let batch = datafusion::arrow::record_batch::RecordBatch::try_new(
            Arc::new(Schema::new(vec![field])),
            vec![column],
        )
        .map_err(|e| api_error(e.into()))?;
        self.ctx.read_batch(batch).map_err(api_error)
    }

    /// A `COPY`: `TO STDOUT` runs its query and streams the rows;
    /// `FROM STDIN` starts a copy into a user table, which the connection's
    /// copy handler feeds (`copy.rs`). The gate admitted it for the role.
    async fn copy(&self, tree: &Statement) -> PgWireResult<Response> {
        let Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            values,
        } = tree
        else {
            return Err(copy_error(sqlstate::INTERNAL_ERROR, "not a COPY"));
        };
        let options = CopyOptions::of(options, legacy_options)?;
        match (to, target) {
            (true, CopyTarget::Stdout) => {
                let query = copy::source_query(source)?;
                let plan = self.plan(&query).await?;
                let df = self
                    .ctx
                    .execute_logical_plan(plan)
                    .await
                    .map_err(api_error)?;
                copy::copy_out(df, &options).await
            }
            (false, CopyTarget::Stdin) if values.is_empty() => {
                let datafusion::sql::sqlparser::ast::CopySource::Table {
                    table_name,
                    columns,
                } = source
                else {
                    return Err(copy_error(
                        sqlstate::SYNTAX_ERROR,
                        "COPY FROM STDIN names a table, not a query",
                    ));
                };
                let name = copy::table_name(table_name)?;
                if name.parse::<culprit_core::Table>().is_ok() {
                    return Err(api_error(datafusion::error::DataFusionError::External(
                        Box::new(culprit_store::telemetry_refusal(&name)),
                    )));
                }
                user_tables::sync(&self.ctx, &self.store)
                    .await
                    .map_err(api_error)?;
                let Some(schema) = user_tables::user_table_schema(&self.ctx, &name).await else {
                    return Err(copy_error(
                        sqlstate::UNDEFINED_TABLE,
                        &format!("relation \"{name}\" does not exist (COPY FROM STDIN fills a user table: create it first)"),
                    ));
                };
                let copy = CopyIn::start(&name, schema, columns, options, self.store.begin())?;
                let (format, columns) = (copy.format_code(), copy.columns());
                *self.copy_failed.lock().await = None;
                if let Some(old) = self.copy_in.lock().await.replace(copy) {
                    old.abort().await;
                }
                Ok(Response::CopyIn(pgwire::api::results::CopyResponse::new(
                    format,
                    columns,
                    futures::stream::empty(),
                )))
            }
            _ => Err(copy_error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "COPY reads from STDIN or writes to STDOUT only (psql's \\copy reads and writes files on the client)",
            )),
        }
    }

    /// The wire types of a prepared statement's parameters: `text` for a
    /// deferred one (its values become string literals), else what
    /// datafusion-postgres decides from the plan.
    pub fn parameter_types(&self, statement: &AdmittedStatement) -> PgWireResult<Vec<Type>> {
        match &statement.plan {
            PlanStage::Unplanned => Ok(vec![]),
            PlanStage::Deferred { parameters, .. } => Ok(vec![Type::TEXT; *parameters]),
            PlanStage::Planned(plan) => self.types.get_parameter_types(&(
                String::new(),
                Some((statement.tree.clone(), plan.clone())),
            )),
        }
    }

    /// The wire description of a prepared statement's result columns.
    pub fn result_fields(
        &self,
        statement: &AdmittedStatement,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match statement.described() {
            None => Ok(vec![]),
            Some(plan) => self.types.get_result_schema(
                &(String::new(), Some((statement.tree.clone(), plan.clone()))),
                format,
            ),
        }
    }
}

fn copy_error(code: &str, message: &str) -> PgWireError {
    PgWireError::UserError(Box::new(pgwire::error::ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message.into(),
    )))
}

/// `INSERT 0 n`: DataFusion answers an insert with one row, its count.
async fn insert_tag(df: DataFrame) -> PgWireResult<Response> {
    let batches = df.collect().await.map_err(api_error)?;
    let rows = batches
        .first()
        .and_then(|batch| batch.column_by_name("count"))
        .and_then(|column| column.as_any().downcast_ref::<UInt64Array>())
        .map_or(0, |counts| counts.value(0) as usize);
    Ok(Response::Execution(
        Tag::new("INSERT").with_oid(0).with_rows(rows),
    ))
}
