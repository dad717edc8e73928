//! The server's sessions as PostgreSQL shows them: `pg_stat_activity` (a
//! row per connection: its pid, user, application, client, start, state
//! and statement), `pg_backend_pid()`, and `pg_cancel_backend(pid)` /
//! `pg_terminate_backend(pid)`, which DBeaver's session manager and
//! Superset's "stop query" use.
//!
//! A user may cancel or terminate only its own sessions (PostgreSQL's rule
//! without superusers). Cancelling stops the session's running statement
//! as a cancel request does (`cancel.rs`); terminating also ends the
//! connection at its next statement, with `57P01`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int32Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::{
    create_udf, ColumnarValue, Expr, ScalarUDF, Signature, TableType, Volatility,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use pgwire::api::{ClientInfo, METADATA_USER};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::response::TransactionStatus;

use crate::cancel::Running;

/// One connection.
#[derive(Clone)]
struct Entry {
    user: String,
    application: String,
    client_addr: String,
    client_port: i32,
    started: SystemTime,
    state: &'static str,
    query: String,
    query_start: Option<SystemTime>,
    terminate: bool,
}

/// The sessions of one server, by pid.
#[derive(Clone, Default)]
pub struct Sessions(Arc<Mutex<BTreeMap<i32, Entry>>>);

fn micros(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl Sessions {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Entry>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A statement of `client` starts: the session is listed (the first
    /// time), `active`, running `query`. `Err` when the session was
    /// terminated (`57P01`, fatal: the connection ends).
    pub fn statement_starts<C: ClientInfo + ?Sized>(
        &self,
        client: &C,
        query: &str,
    ) -> Result<(), PgWireError> {
        let (pid, _) = client.pid_and_secret_key();
        let mut map = self.map();
        let entry = map.entry(pid).or_insert_with(|| {
            let metadata = client.metadata();
            let addr = client.socket_addr();
            Entry {
                user: metadata.get(METADATA_USER).cloned().unwrap_or_default(),
                application: metadata
                    .get("application_name")
                    .cloned()
                    .unwrap_or_default(),
                client_addr: addr.ip().to_string(),
                client_port: addr.port() as i32,
                started: SystemTime::now(),
                state: "idle",
                query: String::new(),
                query_start: None,
                terminate: false,
            }
        });
        if entry.terminate {
            map.remove(&pid);
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                crate::sqlstate::ADMIN_SHUTDOWN.into(),
                "terminating connection due to administrator command".into(),
            ))));
        }
        if let Some(app) = client.metadata().get("application_name") {
            entry.application = app.clone();
        }
        entry.state = "active";
        entry.query = query.chars().take(1024).collect();
        entry.query_start = Some(SystemTime::now());
        Ok(())
    }

    /// The statement of `client` ended.
    pub fn statement_ends<C: ClientInfo + ?Sized>(&self, client: &C) {
        let (pid, _) = client.pid_and_secret_key();
        if let Some(entry) = self.map().get_mut(&pid) {
            entry.state = match client.transaction_status() {
                TransactionStatus::Idle => "idle",
                TransactionStatus::Transaction => "idle in transaction",
                TransactionStatus::Error => "idle in transaction (aborted)",
            };
        }
    }

    /// The connection `pid` ended.
    pub fn leave(&self, pid: i32) {
        self.map().remove(&pid);
    }

    /// The columns of `pg_stat_activity` culprit fills (PostgreSQL's names
    /// and types; the others of PostgreSQL's view are not there).
    fn schema() -> SchemaRef {
        let time = || DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        Arc::new(Schema::new(vec![
            Field::new("datname", DataType::Utf8, true),
            Field::new("pid", DataType::Int32, false),
            Field::new("usename", DataType::Utf8, true),
            Field::new("application_name", DataType::Utf8, true),
            Field::new("client_addr", DataType::Utf8, true),
            Field::new("client_port", DataType::Int32, true),
            Field::new("backend_start", time(), true),
            Field::new("query_start", time(), true),
            Field::new("state", DataType::Utf8, true),
            Field::new("query", DataType::Utf8, true),
            Field::new("backend_type", DataType::Utf8, true),
            Field::new("wait_event", DataType::Utf8, true),
        ]))
    }

    fn batch(&self) -> Result<RecordBatch> {
        let rows: Vec<(i32, Entry)> = self.map().iter().map(|(p, e)| (*p, e.clone())).collect();
        let text = |f: &dyn Fn(&Entry) -> String| -> ArrayRef {
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(_, e)| f(e)),
            ))
        };
        let time = |f: &dyn Fn(&Entry) -> Option<SystemTime>| -> ArrayRef {
            Arc::new(
                TimestampMicrosecondArray::from(
                    rows.iter()
                        .map(|(_, e)| f(e).map(micros))
                        .collect::<Vec<_>>(),
                )
                .with_timezone("UTC"),
            )
        };
        let columns: Vec<ArrayRef> = vec![
            text(&|_| crate::compat::DATABASE.to_string()),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|(p, _)| *p))),
            text(&|e| e.user.clone()),
            text(&|e| e.application.clone()),
            text(&|e| e.client_addr.clone()),
            Arc::new(Int32Array::from_iter_values(
                rows.iter().map(|(_, e)| e.client_port),
            )),
            time(&|e| Some(e.started)),
            time(&|e| e.query_start),
            text(&|e| e.state.to_string()),
            text(&|e| e.query.clone()),
            text(&|_| "client backend".to_string()),
            Arc::new(StringArray::from(vec![None::<&str>; rows.len()])),
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }

    /// The user of session `pid`, if it is one.
    fn user_of(&self, pid: i32) -> Option<String> {
        self.map().get(&pid).map(|e| e.user.clone())
    }

    /// Marks session `pid` to end at its next statement.
    fn mark_terminated(&self, pid: i32) {
        if let Some(entry) = self.map().get_mut(&pid) {
            entry.terminate = true;
        }
    }

    /// `pg_stat_activity`, read when scanned.
    pub fn table(&self) -> Arc<dyn TableProvider> {
        Arc::new(StatActivity(self.clone()))
    }

    /// The functions of the session of `client` on `ctx`:
    /// `pg_backend_pid()`, `pg_cancel_backend(pid)`,
    /// `pg_terminate_backend(pid)`, and `session_user` / `current_user` as
    /// the user it logged in as; the privilege functions by its role
    /// (`privileges.rs`).
    pub fn register_functions<C: ClientInfo + ?Sized>(
        &self,
        ctx: &SessionContext,
        client: &C,
        running: &Running,
        users: Option<Arc<crate::auth::Users>>,
    ) {
        let (pid, _) = client.pid_and_secret_key();
        let user = client
            .metadata()
            .get(METADATA_USER)
            .cloned()
            .unwrap_or_default();
        crate::privileges::register(
            ctx,
            crate::privileges::Context {
                user: user.clone(),
                users: users.clone(),
                catalogs: ctx.state().catalog_list().clone(),
            },
        );
        ctx.register_udf(create_udf(
            "pg_backend_pid",
            vec![],
            DataType::Int32,
            Volatility::Stable,
            Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Int32(Some(pid))))),
        ));
        for name in ["session_user", "current_user"] {
            let user = user.clone();
            ctx.register_udf(create_udf(
                name,
                vec![],
                DataType::Utf8,
                Volatility::Stable,
                Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(user.clone()))))),
            ));
        }
        for (name, terminate) in [("pg_cancel_backend", false), ("pg_terminate_backend", true)] {
            let (sessions, running, user) = (self.clone(), running.clone(), user.clone());
            let signal = move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
                let pids = args[0].to_array(1)?;
                let pids = datafusion::arrow::compute::cast(&pids, &DataType::Int64)?;
                let pids = pids
                    .as_any()
                    .downcast_ref::<datafusion::arrow::array::Int64Array>()
                    .ok_or_else(|| datafusion::error::DataFusionError::Internal("pid".into()))?;
                let mut out = Vec::with_capacity(pids.len());
                for target in pids.iter() {
                    let Some(target) = target.and_then(|p| i32::try_from(p).ok()) else {
                        out.push(None);
                        continue;
                    };
                    match sessions.user_of(target) {
                        None => out.push(Some(false)),
                        Some(owner) if owner != user => {
                            return Err(datafusion::error::DataFusionError::External(Box::new(
                                crate::sqlstate::Coded::new(
                                    crate::sqlstate::INSUFFICIENT_PRIVILEGE,
                                    format!(
                                        "must be the user of session {target} ({owner}) to signal it"
                                    ),
                                ),
                            )));
                        }
                        Some(_) => {
                            if terminate {
                                sessions.mark_terminated(target);
                            }
                            running.stop_pid(target);
                            out.push(Some(true));
                        }
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(BooleanArray::from(out))))
            };
            ctx.register_udf(ScalarUDF::from(
                datafusion::logical_expr::SimpleScalarUDF::new_with_signature(
                    name,
                    Signature::any(1, Volatility::Volatile),
                    DataType::Boolean,
                    Arc::new(signal),
                ),
            ));
        }
    }
}

/// `pg_stat_activity` over the registry.
#[derive(Debug)]
struct StatActivity(Sessions);

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sessions({})", self.map().len())
    }
}

#[async_trait::async_trait]
impl TableProvider for StatActivity {
    fn schema(&self) -> SchemaRef {
        Sessions::schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = self.0.batch()?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Sessions::schema(),
            projection.cloned(),
        )?)
    }
}
