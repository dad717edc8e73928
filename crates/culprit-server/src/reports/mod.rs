//! Scheduled reports, the pg_cron way: `SELECT cron.schedule('name',
//! '0 7 * * *', $$ SELECT ... $$)`, `cron.unschedule('name')`, the tables
//! `cron.job` and `cron.job_run_details`, and each run's rows appended to
//! `reports.<name>` with its `run_id` and `scheduled_for`.
//!
//! Jobs and history live in the store (one commit per run: the history
//! rows, the run's details and the job's last run together). `culprit
//! serve` runs them ([`run_scheduler`]): a job never overlaps itself, a run
//! has a timeout, a run missed while the server was down runs once when it
//! is back, and a failure is recorded with its error. Every run passes the
//! same gate as a client's statement, as the user who scheduled it.

pub mod html;
mod schedule;
mod svg;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use culprit_sql::datafusion::arrow::array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use culprit_sql::datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use culprit_store::{
    pages_schema, run_details_schema, CronJob, JobChange, Store, PAGES_TABLE, REPORTS_SCHEMA,
    RUN_DETAILS_TABLE,
};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, SelectItem, SetExpr, Statement, Value,
};
use tokio::task::JoinSet;

pub use schedule::Schedule;

use crate::policy::Gate;

/// How the scheduler runs jobs.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// A run taking longer fails ("timed out").
    pub timeout: Duration,
    /// History (report rows and run details) older than this is dropped.
    pub retention: Option<Duration>,
    /// Memory pool of each run's session, bytes.
    pub memory: Option<usize>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            timeout: Duration::from_secs(300),
            retention: Some(Duration::from_secs(30 * 86_400)),
            memory: None,
        }
    }
}

/// A call of pg_cron's functions, from a statement's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CronCall {
    Schedule {
        name: String,
        schedule: String,
        command: String,
        /// `format => 'html'`: each run also writes a page.
        format: Option<String>,
    },
    Unschedule(String),
}

/// The output formats of a scheduled report: its rows (always), and with
/// `html` a page of them too.
pub const FORMATS: [&str; 2] = ["rows", "html"];

impl CronCall {
    /// The column pg_cron answers with.
    pub fn column(&self) -> &'static str {
        match self {
            CronCall::Schedule { .. } => "schedule",
            CronCall::Unschedule(_) => "unschedule",
        }
    }
}

fn text_arg(arg: &FunctionArg) -> Option<String> {
    let expr = match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => e,
        FunctionArg::Named {
            arg: FunctionArgExpr::Expr(e),
            ..
        }
        | FunctionArg::ExprNamed {
            arg: FunctionArgExpr::Expr(e),
            ..
        } => e,
        _ => return None,
    };
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s)
            | Value::DollarQuotedString(datafusion::sql::sqlparser::ast::DollarQuotedString {
                value: s,
                ..
            })
            | Value::EscapedStringLiteral(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.to_string()),
            _ => None,
        },
        _ => None,
    }
}

/// `SELECT cron.schedule(...)` / `SELECT cron.unschedule(...)`, alone in
/// its statement, with constant arguments; `Some(Err)` for a call that is
/// one of them but malformed.
pub fn cron_call(tree: &Statement) -> Option<Result<CronCall, String>> {
    let Statement::Query(query) = tree else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [SelectItem::UnnamedExpr(Expr::Function(f))
    | SelectItem::ExprWithAlias {
        expr: Expr::Function(f),
        ..
    }] = select.projection.as_slice()
    else {
        return None;
    };
    let name = f.name.to_string().to_ascii_lowercase();
    let what = match name.as_str() {
        "cron.schedule" => "schedule",
        "cron.unschedule" => "unschedule",
        _ => return None,
    };
    let FunctionArguments::List(list) = &f.args else {
        return Some(Err(format!("cron.{what} needs its arguments")));
    };
    // pg_cron's arguments by position; culprit's `format => 'html'` by
    // name (also `format := 'html'`).
    let mut args = Vec::new();
    let mut format = None;
    for arg in &list.args {
        let Some(value) = text_arg(arg) else {
            return Some(Err(format!(
                "the arguments of cron.{what} must be constants"
            )));
        };
        // Some parsers name an argument by an expression (`ExprNamed`).
        let named = match arg {
            FunctionArg::Named { name, .. } => Some(name.value.clone()),
            FunctionArg::ExprNamed { name, .. } => Some(match name {
                Expr::Identifier(i) => i.value.clone(),
                e => e.to_string(),
            }),
            FunctionArg::Unnamed(_) => None,
        };
        match named {
            Some(name) if what == "schedule" => {
                if !name.eq_ignore_ascii_case("format") {
                    return Some(Err(format!(
                        "cron.schedule has no argument named {name}: its named argument is \
                         format => 'rows' | 'html'"
                    )));
                }
                let value = value.to_ascii_lowercase();
                if !FORMATS.contains(&value.as_str()) {
                    return Some(Err(format!(
                        "format => '{value}' is not a report format: 'rows' or 'html'"
                    )));
                }
                format = (value != "rows").then_some(value);
            }
            Some(name) => return Some(Err(format!("cron.{what} has no argument named {name}"))),
            None => args.push(value),
        }
    }
    Some(match (what, args.as_slice()) {
        ("schedule", [name, schedule, command]) => Ok(CronCall::Schedule {
            name: name.clone(),
            schedule: schedule.clone(),
            command: command.clone(),
            format,
        }),
        ("schedule", [_, _]) => Err(
            "cron.schedule(schedule, command) without a name is not supported: give the job \
             a name, cron.schedule('name', schedule, command); it names its history table \
             reports.<name>"
                .into(),
        ),
        ("unschedule", [name]) => Ok(CronCall::Unschedule(name.clone())),
        _ => Err(
            "usage: cron.schedule('name', 'schedule', 'command' [, format => 'html']) or \
             cron.unschedule('name')"
                .into(),
        ),
    })
}

fn now_us() -> i64 {
    Utc::now().timestamp_micros()
}

fn time(us: i64) -> DateTime<Utc> {
    Utc.timestamp_micros(us).single().unwrap_or_default()
}

/// Why a pg_cron call failed, with its SQLSTATE.
#[derive(Debug, Clone)]
pub struct CronError {
    pub code: &'static str,
    pub message: String,
}

impl From<String> for CronError {
    fn from(message: String) -> CronError {
        CronError {
            code: crate::sqlstate::INVALID_PARAMETER_VALUE,
            message,
        }
    }
}

impl From<culprit_store::StoreError> for CronError {
    fn from(e: culprit_store::StoreError) -> CronError {
        CronError {
            code: crate::sqlstate::store_code(&e),
            message: e.to_string(),
        }
    }
}

/// Schedules (or reschedules) a job as `user`; its id.
pub async fn schedule(
    store: &Store,
    name: &str,
    schedule: &str,
    command: &str,
    format: Option<&str>,
    user: &str,
    gate: &Gate,
) -> Result<i64, CronError> {
    culprit_store::check_user_table_name(name).map_err(|e| format!("job name: {e}"))?;
    Schedule::parse(schedule)?;
    // The command must pass the gate for its user now, not only at its
    // first run.
    let statements = gate
        .admit(command, user)
        .map_err(|e| format!("the job's command is refused: {e}"))?;
    if statements.is_empty() {
        return Err(String::from("the job's command is empty").into());
    }
    if statements.iter().any(|s| cron_call(s).is_some()) {
        return Err(String::from("a job's command may not schedule jobs").into());
    }
    let mut batch = store.begin();
    batch.change_job(JobChange::Schedule(CronJob {
        jobid: 0,
        jobname: name.to_string(),
        schedule: schedule.to_string(),
        command: command.to_string(),
        username: user.to_string(),
        active: true,
        created: now_us(),
        last_scheduled: None,
        last_runid: 0,
        format: format.map(str::to_string),
    }));
    let info = batch.commit().await?;
    info.job
        .ok_or_else(|| String::from("the job was not stored").into())
}

/// Removes a job (by name or id) of `user`; its history stays.
pub async fn unschedule(store: &Store, name: &str, user: &str) -> Result<(), CronError> {
    let mut batch = store.begin();
    batch.change_job(JobChange::Unschedule {
        job: name.to_string(),
        user: user.to_string(),
    });
    batch.commit().await?;
    Ok(())
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub runid: i64,
    pub succeeded: bool,
    pub message: String,
    pub rows: usize,
}

/// Runs `command` as `user` in a fresh session: the rows of its last
/// statement.
async fn execute(
    store: &Store,
    engine: &Arc<culprit_sql::Engine>,
    gate: &Gate,
    user: &str,
    command: &str,
    memory: Option<usize>,
) -> Result<Vec<RecordBatch>, String> {
    let statements = gate.admit(command, user).map_err(|e| e.to_string())?;
    let ctx = culprit_sql::session_with(
        store.clone(),
        engine.clone(),
        culprit_sql::default_config(),
        memory,
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut last = Vec::new();
    for statement in statements {
        if cron_call(&statement).is_some() {
            return Err("a job may not schedule jobs".into());
        }
        last = culprit_sql::user_tables::run_statement(&ctx, store, statement)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(last)
}

/// The report's rows: the query's columns, then `run_id` and
/// `scheduled_for`.
fn history(
    batches: &[RecordBatch],
    runid: i64,
    scheduled_for: i64,
) -> Result<(SchemaRef, Vec<RecordBatch>), String> {
    let Some(first) = batches.first() else {
        return Err("no result".into());
    };
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let mut fields: Vec<Field> = first
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let t = match f.data_type() {
                DataType::Timestamp(_, _) => ts.clone(),
                t => t.clone(),
            };
            Field::new(f.name(), t, true)
        })
        .collect();
    if let Some(f) = fields
        .iter()
        .find(|f| f.name() == "run_id" || f.name() == "scheduled_for")
    {
        return Err(format!(
            "the result has a column named {}, which the history table adds itself \
             (rename it in the job's query)",
            f.name()
        ));
    }
    fields.push(Field::new("run_id", DataType::Int64, true));
    fields.push(Field::new("scheduled_for", ts.clone(), true));
    let schema = Arc::new(Schema::new(fields));
    let mut out = Vec::new();
    for b in batches.iter().filter(|b| b.num_rows() > 0) {
        let n = b.num_rows();
        let mut columns: Vec<ArrayRef> = Vec::new();
        for (i, c) in b.columns().iter().enumerate() {
            let want = schema.field(i).data_type();
            columns.push(if c.data_type() == want {
                c.clone()
            } else {
                culprit_sql::datafusion::arrow::compute::cast(c, want).map_err(|e| e.to_string())?
            });
        }
        columns.push(Arc::new(Int64Array::from(vec![runid; n])));
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![scheduled_for; n]).with_timezone("UTC"),
        ));
        out.push(RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())?);
    }
    Ok((schema, out))
}

fn details_row(job: &CronJob, r: &RunResult, start: i64, end: i64) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![job.jobid])),
        Arc::new(Int64Array::from(vec![r.runid])),
        Arc::new(Int32Array::from(vec![std::process::id() as i32])),
        Arc::new(StringArray::from(vec!["culprit"])),
        Arc::new(StringArray::from(vec![job.username.as_str()])),
        Arc::new(StringArray::from(vec![job.command.as_str()])),
        Arc::new(StringArray::from(vec![if r.succeeded {
            "succeeded"
        } else {
            "failed"
        }])),
        Arc::new(StringArray::from(vec![r.message.as_str()])),
        Arc::new(TimestampMicrosecondArray::from(vec![start]).with_timezone("UTC")),
        Arc::new(TimestampMicrosecondArray::from(vec![end]).with_timezone("UTC")),
    ];
    RecordBatch::try_new(run_details_schema(), cols).expect("the run details' columns")
}

fn page_row(job: &CronJob, runid: i64, scheduled_for: i64, page: &str) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![job.jobid])),
        Arc::new(Int64Array::from(vec![runid])),
        Arc::new(StringArray::from(vec![job.jobname.as_str()])),
        Arc::new(TimestampMicrosecondArray::from(vec![scheduled_for]).with_timezone("UTC")),
        Arc::new(StringArray::from(vec![page])),
    ];
    RecordBatch::try_new(pages_schema(), cols).expect("the report page's columns")
}

/// The files of `table` whose batch committed before `cutoff`.
fn expired(manifest: &culprit_store::Manifest, table: &str, cutoff: i64) -> Vec<String> {
    let old: HashSet<&str> = manifest
        .batches
        .iter()
        .filter(|b| {
            DateTime::parse_from_rfc3339(&b.committed_at)
                .map(|t| t.timestamp_micros() < cutoff)
                .unwrap_or(false)
        })
        .map(|b| b.id.as_str())
        .collect();
    manifest
        .files_of_user(table)
        .filter(|f| old.contains(f.batch.as_str()))
        .map(|f| f.path.clone())
        .collect()
}

/// Runs one job now, for `scheduled_for`, and records it: history rows,
/// run details and the job's last run, in one commit.
pub async fn run_job(
    store: &Store,
    engine: &Arc<culprit_sql::Engine>,
    gate: &Gate,
    job: &CronJob,
    scheduled_for: i64,
    opts: &ReportOptions,
) -> Result<RunResult, String> {
    let start = now_us();
    let runid = start;
    let run = tokio::time::timeout(
        opts.timeout,
        execute(
            store,
            engine,
            gate,
            &job.username,
            &job.command,
            opts.memory,
        ),
    )
    .await
    .unwrap_or_else(|_| Err(format!("timed out after {} s", opts.timeout.as_secs_f64())));
    let report = format!("{REPORTS_SCHEMA}.{}", job.jobname);
    let mut result = RunResult {
        runid,
        succeeded: run.is_ok(),
        message: String::new(),
        rows: 0,
    };
    let mut rows = None;
    let mut page = None;
    match run {
        Ok(batches) => {
            if job.format.as_deref() == Some("html") {
                page = Some(html::result_page(
                    &format!("Report {}", job.jobname),
                    &format!(
                        "Run {runid} for {}, as {}: {}",
                        svg::rfc3339(scheduled_for),
                        job.username,
                        job.command.trim()
                    ),
                    &batches,
                ));
            }
            let n: usize = batches.iter().map(|b| b.num_rows()).sum();
            result.rows = n;
            result.message = format!("{n} row{}", if n == 1 { "" } else { "s" });
            if !batches.is_empty() && batches[0].num_columns() > 0 {
                match history(&batches, runid, scheduled_for) {
                    Ok(h) => rows = Some(h),
                    Err(e) => {
                        result.succeeded = false;
                        result.message = e;
                    }
                }
            }
        }
        Err(e) => result.message = e,
    }
    let end = now_us();
    let commit =
        |rows: Option<(SchemaRef, Vec<RecordBatch>)>, page: Option<String>, result: RunResult| {
            let (store, report, job) = (store.clone(), report.clone(), job.clone());
            let retention = opts.retention;
            async move {
                let manifest = store.manifest().await.map_err(|e| e.to_string())?;
                let mut batch = store.begin();
                let fail = |e: culprit_store::StoreError| e.to_string();
                if let Some((schema, rows)) = rows {
                    batch
                        .create_user_table(&report, &schema, false, true)
                        .map_err(fail)?;
                    batch
                        .write_user(&report, &schema, &rows)
                        .await
                        .map_err(fail)?;
                }
                if let Some(page) = page {
                    let pages = pages_schema();
                    batch
                        .create_user_table(PAGES_TABLE, &pages, false, true)
                        .map_err(fail)?;
                    batch
                        .write_user(
                            PAGES_TABLE,
                            &pages,
                            &[page_row(&job, result.runid, scheduled_for, &page)],
                        )
                        .await
                        .map_err(fail)?;
                }
                let details = run_details_schema();
                batch
                    .create_user_table(RUN_DETAILS_TABLE, &details, false, true)
                    .map_err(fail)?;
                batch
                    .write_user(
                        RUN_DETAILS_TABLE,
                        &details,
                        &[details_row(&job, &result, start, end)],
                    )
                    .await
                    .map_err(fail)?;
                batch.change_job(JobChange::Ran {
                    jobid: job.jobid,
                    scheduled_for,
                    runid: result.runid,
                });
                if let Some(keep) = retention {
                    let cutoff = end - keep.as_micros() as i64;
                    for table in [report.as_str(), RUN_DETAILS_TABLE, PAGES_TABLE] {
                        let old = expired(&manifest, table, cutoff);
                        if !old.is_empty() {
                            batch.expire_files(table, old);
                        }
                    }
                }
                batch.commit().await.map_err(|e| e.to_string())?;
                Ok::<RunResult, String>(result)
            }
        };
    match commit(rows, page, result.clone()).await {
        Ok(r) => Ok(r),
        // The rows did not fit the history table (its columns changed):
        // the run is recorded as failed, with why.
        Err(e) if result.succeeded => {
            let failed = RunResult {
                succeeded: false,
                message: format!("the result could not be added to {report}: {e}"),
                ..result
            };
            commit(None, None, failed).await
        }
        Err(e) => Err(e),
    }
}

/// The latest time at or before `now` that the job was due, after its
/// last run (or its creation): a run missed while the server was down is
/// run once, for its latest missed time.
fn due(job: &CronJob, now: DateTime<Utc>) -> Option<i64> {
    let schedule = Schedule::parse(&job.schedule).ok()?;
    let mut t = schedule.next_after(time(job.last_scheduled.unwrap_or(job.created)))?;
    if t > now {
        return None;
    }
    // Skip to the latest due time (bounded: a long outage of a 1-second
    // job is at most this many steps).
    for _ in 0..100_000 {
        match schedule.next_after(t) {
            Some(next) if next <= now => t = next,
            _ => break,
        }
    }
    Some(t.timestamp_micros())
}

/// Runs the store's jobs as they fall due, until dropped (which stops the
/// runs in progress).
pub async fn run_scheduler(
    store: Store,
    engine: Arc<culprit_sql::Engine>,
    gate: Arc<Gate>,
    opts: ReportOptions,
) {
    let mut runs: JoinSet<i64> = JoinSet::new();
    let mut running: HashSet<i64> = HashSet::new();
    loop {
        while let Some(done) = runs.try_join_next() {
            if let Ok(jobid) = done {
                running.remove(&jobid);
            }
        }
        match store.manifest().await {
            Ok(manifest) => {
                let now = Utc::now();
                for job in manifest.cron_jobs.iter().filter(|j| j.active) {
                    if running.contains(&job.jobid) {
                        continue;
                    }
                    let Some(scheduled_for) = due(job, now) else {
                        continue;
                    };
                    running.insert(job.jobid);
                    let (store, engine, gate, opts, job) = (
                        store.clone(),
                        engine.clone(),
                        gate.clone(),
                        opts.clone(),
                        job.clone(),
                    );
                    runs.spawn(async move {
                        match run_job(&store, &engine, &gate, &job, scheduled_for, &opts).await {
                            Ok(r) => log::info!(
                                "report {} run {}: {} ({})",
                                job.jobname,
                                r.runid,
                                if r.succeeded { "succeeded" } else { "failed" },
                                r.message
                            ),
                            Err(e) => {
                                log::warn!("report {}: could not record its run: {e}", job.jobname)
                            }
                        }
                        job.jobid
                    });
                }
            }
            Err(e) => log::warn!("scheduler: cannot read the store: {e}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn call(sql: &str) -> Option<Result<CronCall, String>> {
        let s = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        cron_call(&s[0])
    }

    #[test]
    fn pg_cron_calls_are_recognised() {
        assert_eq!(
            call("SELECT cron.schedule('daily', '0 7 * * *', $$SELECT * FROM victims()$$)"),
            Some(Ok(CronCall::Schedule {
                name: "daily".into(),
                schedule: "0 7 * * *".into(),
                command: "SELECT * FROM victims()".into(),
                format: None,
            }))
        );
        assert_eq!(
            call("SELECT cron.schedule('daily', '0 7 * * *', 'SELECT 1', format => 'HTML')"),
            Some(Ok(CronCall::Schedule {
                name: "daily".into(),
                schedule: "0 7 * * *".into(),
                command: "SELECT 1".into(),
                format: Some("html".into()),
            }))
        );
        assert!(matches!(
            call("SELECT cron.schedule('d', '0 7 * * *', 'SELECT 1', format => 'pdf')"),
            Some(Err(e)) if e.contains("'rows' or 'html'")
        ));
        assert!(matches!(
            call("SELECT cron.schedule('d', '0 7 * * *', 'SELECT 1', colour => 'red')"),
            Some(Err(e)) if e.contains("no argument named colour")
        ));
        assert_eq!(
            call("SELECT cron.unschedule('daily')"),
            Some(Ok(CronCall::Unschedule("daily".into())))
        );
        assert!(matches!(
            call("SELECT cron.schedule('0 7 * * *', 'SELECT 1')"),
            Some(Err(_))
        ));
        assert_eq!(call("SELECT schedule('a')"), None);
        assert_eq!(call("SELECT 1"), None);
    }

    #[test]
    fn a_missed_run_runs_once_for_its_latest_time() {
        let job = CronJob {
            jobid: 1,
            jobname: "j".into(),
            schedule: "10 seconds".into(),
            command: "SELECT 1".into(),
            username: "u".into(),
            active: true,
            created: 0,
            last_scheduled: Some(1_000_000_000),
            last_runid: 0,
            format: None,
        };
        let now = time(1_000_000_000 + 65_000_000);
        assert_eq!(due(&job, now), Some(1_060_000_000));
        let now = time(1_000_000_000 + 5_000_000);
        assert_eq!(due(&job, now), None);
    }
}
