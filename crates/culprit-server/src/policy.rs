//! The one statement gate of the server. Every statement a client sends,
//! by the simple or the extended protocol, with or without parameters, is
//! text until [`Gate::admit`] parses it; what the server plans and runs is
//! the very tree the gate admitted (`pipeline.rs`). So the rules below
//! apply to every statement path, present and future: a path that does not
//! start here has no statement to run.
//!
//! The rules, by role (`read` is also everyone on a server without users):
//! - every role: queries (also inside `EXPLAIN`, `PREPARE`, `DECLARE`,
//!   `COPY ... TO STDOUT`), `SHOW`, `SET` of session settings,
//!   transactions, savepoints, cursors;
//! - `write` also: `CREATE TABLE`, `INSERT`, `TRUNCATE`, `COPY ... FROM
//!   STDIN` and `DROP TABLE` of user tables (kept in the store,
//!   `culprit_sql::user_tables`; telemetry tables refuse them), and
//!   `CREATE VIEW` / `CREATE SCHEMA` / `UPDATE` / `DELETE` / `DROP` of the
//!   session's own views and schemas;
//! - no role: anything that names a location or file (`COPY ... TO/FROM
//!   'path'`, `CREATE EXTERNAL TABLE`, `LOCATION`, `LOAD DATA`, `UNLOAD`,
//!   `INSERT OVERWRITE DIRECTORY`, `ATTACH`, `INSTALL`), the
//!   `datafusion.runtime.*` settings (the memory pool and spill folder are
//!   the server's), role switching, and every statement kind not listed.
//!
//! Placeholders must be `$1` .. `$65535` (42P02 otherwise), and
//! `statement_timeout` must be a PostgreSQL value in range (22023).
//!
//! Under the gate, the session itself can reach no file but its store's,
//! read-only (`culprit_sql::sandbox`).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    CopyTarget, Expr, ObjectType, Query, Set, SetExpr, Statement, Value, Visit, Visitor,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use pgwire::error::{ErrorInfo, PgWireError};

use crate::auth::{Role, Users};
use crate::rewrite::grafana;
use crate::sqlstate;

/// Why a statement is not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    fn new(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

impl From<Refusal> for PgWireError {
    fn from(r: Refusal) -> PgWireError {
        PgWireError::UserError(Box::new(ErrorInfo::new(
            "ERROR".into(),
            r.code.into(),
            r.message,
        )))
    }
}

/// What a statement needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Need {
    /// Any role.
    Read,
    /// The `write` role; the words name the statement for the message.
    Write(String),
    /// No role: the refusal.
    Never(Refusal),
}

/// The start of a statement, for messages.
fn head(stmt: &impl ToString) -> String {
    let text = stmt.to_string();
    let mut cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() {
        cut.push_str("...");
    }
    cut
}

fn location(what: &str) -> Need {
    Need::Never(Refusal::new(
        sqlstate::INSUFFICIENT_PRIVILEGE,
        format!(
            "permission denied: {what} would reach the server's files; no role may \
             read or write files or other locations through SQL (culprit serves its \
             own tables only)"
        ),
    ))
}

fn unsupported(stmt: &Statement) -> Need {
    Need::Never(Refusal::new(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!(
            "culprit does not run this kind of statement: {}",
            head(stmt)
        ),
    ))
}

/// A `SET` of a setting no role may change (the server's resources).
fn reserved_setting(name: &str) -> Option<Need> {
    let lower = name.to_ascii_lowercase();
    (lower.starts_with("datafusion.runtime.") || lower == "datafusion.runtime").then(|| {
        Need::Never(Refusal::new(
            sqlstate::INSUFFICIENT_PRIVILEGE,
            format!(
                "permission denied to set parameter \"{name}\": the server's memory \
                 and spill settings are set when it starts"
            ),
        ))
    })
}

/// PostgreSQL's `statement_timeout` range: 0 to INT_MAX milliseconds.
fn check_statement_timeout(values: &[Expr]) -> Option<Need> {
    let value = values.first()?.to_string();
    let text = value.trim_matches(|c| c == '\'' || c == '"').trim();
    if text.is_empty() || text.eq_ignore_ascii_case("default") {
        return None;
    }
    // The units `datafusion-postgres` reads, no others: anything it cannot
    // read would silently turn the timeout off.
    let (number, unit_ms) = [("ms", 1u64), ("s", 1000), ("min", 60_000)]
        .iter()
        .find_map(|(suffix, ms)| text.strip_suffix(suffix).map(|n| (n, *ms)))
        .unwrap_or((text, 1));
    let ms = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_ms))
        .filter(|ms| *ms <= i32::MAX as u64);
    match ms {
        Some(_) => None,
        None => Some(Need::Never(Refusal::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!(
                "invalid value for parameter \"statement_timeout\": {value} (a whole \
                 number, or one followed by ms, s or min, at most {} ms)",
                i32::MAX
            ),
        ))),
    }
}

fn set_need(set: &Set) -> Need {
    match set {
        Set::SingleAssignment {
            variable, values, ..
        } => {
            let name = variable.to_string();
            if let Some(n) = reserved_setting(&name) {
                return n;
            }
            if name.eq_ignore_ascii_case("statement_timeout") {
                if let Some(n) = check_statement_timeout(values) {
                    return n;
                }
            }
            Need::Read
        }
        Set::ParenthesizedAssignments { variables, .. } => variables
            .iter()
            .find_map(|v| reserved_setting(&v.to_string()))
            .unwrap_or(Need::Read),
        Set::MultipleAssignments { assignments } => assignments
            .iter()
            .find_map(|a| reserved_setting(&a.name.to_string()))
            .unwrap_or(Need::Read),
        Set::SetRole { .. } | Set::SetSessionAuthorization(_) => Need::Never(Refusal::new(
            sqlstate::INSUFFICIENT_PRIVILEGE,
            "permission denied: a connection keeps the role its user logged in with",
        )),
        Set::SetTimeZone { .. }
        | Set::SetNames { .. }
        | Set::SetNamesDefault {}
        | Set::SetTransaction { .. }
        | Set::SetSessionParam(_) => Need::Read,
    }
}

/// What one statement needs by itself (statements nested inside it, such
/// as the one `EXPLAIN` or `PREPARE` carries, are judged on their own).
fn need(stmt: &Statement) -> Need {
    let write = || Need::Write(head(stmt));
    match stmt {
        Statement::Query(_)
        | Statement::Explain { .. }
        | Statement::ExplainTable { .. }
        | Statement::ShowFunctions { .. }
        | Statement::ShowVariable { .. }
        | Statement::ShowStatus { .. }
        | Statement::ShowVariables { .. }
        | Statement::ShowCreate { .. }
        | Statement::ShowColumns { .. }
        | Statement::ShowCatalogs { .. }
        | Statement::ShowDatabases { .. }
        | Statement::ShowSchemas { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowViews { .. }
        | Statement::ShowObjects(_)
        | Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { .. }
        | Statement::Savepoint { .. }
        | Statement::ReleaseSavepoint { .. }
        | Statement::Declare { .. }
        | Statement::Fetch { into: None, .. } => Need::Read,
        Statement::Fetch {
            into: Some(into), ..
        } => {
            if crate::cursors::is_move_mark(into) {
                Need::Read
            } else {
                unsupported(stmt)
            }
        }
        Statement::Close { .. }
        | Statement::Discard { .. }
        | Statement::Reset(_)
        | Statement::UNLISTEN { .. }
        | Statement::Deallocate { .. }
        | Statement::Prepare { .. } => Need::Read,
        // EXECUTE runs a statement this session prepared (and the gate
        // admitted); EXECUTE IMMEDIATE would run text the gate never saw.
        Statement::Execute { immediate, .. } => {
            if *immediate {
                unsupported(stmt)
            } else {
                Need::Read
            }
        }
        Statement::Set(set) => set_need(set),
        Statement::Copy { to, target, .. } => match (to, target) {
            (_, CopyTarget::File { .. } | CopyTarget::Program { .. }) => location(if *to {
                "COPY ... TO a file"
            } else {
                "COPY ... FROM a file"
            }),
            // A read, whatever it reads (its query is judged on its own).
            (true, _) => Need::Read,
            // Rows into a user table (`copy.rs` refuses telemetry tables).
            (false, _) => write(),
        },
        Statement::CreateTable(t) => {
            if t.external || t.location.is_some() {
                location("CREATE EXTERNAL TABLE or a table with a LOCATION")
            } else {
                write()
            }
        }
        Statement::CreateView(_) | Statement::CreateSchema { .. } => write(),
        Statement::Insert(_)
        | Statement::Update(_)
        | Statement::Delete(_)
        | Statement::Truncate(_) => write(),
        Statement::Drop {
            object_type: ObjectType::Table | ObjectType::View | ObjectType::Schema,
            ..
        } => write(),
        Statement::Directory { .. } => location("INSERT OVERWRITE DIRECTORY"),
        Statement::LoadData { .. } => location("LOAD DATA"),
        Statement::Unload { .. } => location("UNLOAD"),
        Statement::CopyIntoSnowflake { .. } => location("COPY INTO"),
        Statement::Install { .. } | Statement::Load { .. } => location("INSTALL or LOAD"),
        Statement::AttachDatabase { .. } | Statement::AttachDuckDBDatabase { .. } => {
            location("ATTACH")
        }
        Statement::CreateStage { .. } | Statement::List(_) | Statement::Remove(_) => {
            location("a stage")
        }
        _ => unsupported(stmt),
    }
}

/// Whether a query writes: `SELECT ... INTO` anywhere in its set
/// expressions (data-modifying statements inside it are statements of their
/// own, which the visitor judges).
fn select_into(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(s) => s.into.is_some(),
        SetExpr::Query(q) => select_into(&q.body),
        SetExpr::SetOperation { left, right, .. } => select_into(left) || select_into(right),
        _ => false,
    }
}

/// Walks a statement and everything nested in it.
struct Judge {
    role: Role,
    user: String,
}

impl Judge {
    fn decide(&self, need: Need) -> ControlFlow<Refusal> {
        match need {
            Need::Read => ControlFlow::Continue(()),
            Need::Write(_) if self.role == Role::Write => ControlFlow::Continue(()),
            Need::Write(what) => ControlFlow::Break(Refusal::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!(
                    "permission denied: user \"{}\" is read-only (role read); only \
                     queries are allowed, not: {what}",
                    self.user
                ),
            )),
            Need::Never(r) => ControlFlow::Break(r),
        }
    }
}

impl Visitor for Judge {
    type Break = Refusal;

    fn pre_visit_statement(&mut self, stmt: &Statement) -> ControlFlow<Refusal> {
        self.decide(need(stmt))
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Refusal> {
        if select_into(&query.body) {
            return self.decide(Need::Write(head(query)));
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Refusal> {
        if let Expr::Function(f) = expr {
            let name = f.name.to_string().to_ascii_lowercase();
            if name == "cron.schedule" || name == "cron.unschedule" {
                return self.decide(Need::Write(name));
            }
        }
        if let Expr::Value(v) = expr {
            if let Value::Placeholder(p) = &v.value {
                let valid = p
                    .strip_prefix('$')
                    .and_then(|n| n.parse::<u16>().ok())
                    .is_some_and(|n| n >= 1);
                if !valid {
                    return ControlFlow::Break(Refusal::new(
                        sqlstate::UNDEFINED_PARAMETER,
                        format!("there is no parameter {p} (parameters are $1 to $65535)"),
                    ));
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// Judges one parsed statement for a user of `role`.
pub fn judge(stmt: &Statement, role: Role, user: &str) -> Result<(), Refusal> {
    let mut judge = Judge {
        role,
        user: user.to_string(),
    };
    match stmt.visit(&mut judge) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(r) => Err(r),
    }
}

/// The gate of one server: the users (for roles) and the parser.
pub struct Gate {
    users: Option<std::sync::Arc<Users>>,
    parser: PostgresCompatibilityParser,
}

impl Gate {
    pub fn new(users: Option<std::sync::Arc<Users>>) -> Gate {
        Gate {
            users,
            parser: PostgresCompatibilityParser::new(),
        }
    }

    /// The users file, if the server has one.
    pub fn users(&self) -> Option<std::sync::Arc<Users>> {
        self.users.clone()
    }

    /// The role of a connection's user: as in the users file, `read`
    /// without one.
    pub fn role(&self, user: &str) -> Role {
        self.users
            .as_ref()
            .and_then(|u| u.role(user))
            .unwrap_or(Role::Read)
    }

    /// Parses `sql` as datafusion-postgres does (PostgreSQL's dialect, then
    /// its compatibility rules for clients' catalog queries), except that
    /// Grafana's search_path lookup keeps the subquery that parser's token
    /// blacklist blanks (`rewrite/grafana.rs`).
    fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        let statements = match self.parser.parse(sql) {
            Ok(statements) => statements,
            Err(error) => return crate::cursors::parse_moves(sql, &self.parser).ok_or(error),
        };
        let statements = self.keep_cron_calls(sql, statements);
        if !statements.iter().any(grafana::lookup_was_blanked) {
            return Ok(statements);
        }
        match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
            Ok(unblanked)
                if unblanked.len() == statements.len()
                    && unblanked.iter().any(grafana::is_search_path_lookup) =>
            {
                Ok(unblanked
                    .into_iter()
                    .map(|s| self.parser.rewrite(s))
                    .collect())
            }
            _ => Ok(statements),
        }
    }

    /// pg_cron's calls (`cron.schedule(...)`) as written: the compatibility
    /// rules strip the schema of function calls, which names them.
    fn keep_cron_calls(&self, sql: &str, statements: Vec<Statement>) -> Vec<Statement> {
        // A cheap look first; the decision is on the trees.
        if !sql.to_ascii_lowercase().contains("cron.") {
            return statements;
        }
        match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
            Ok(raw) if raw.len() == statements.len() => statements
                .into_iter()
                .zip(raw)
                .map(|(rewritten, raw)| {
                    if crate::reports::cron_call(&raw).is_some() {
                        raw
                    } else {
                        rewritten
                    }
                })
                .collect(),
            _ => statements,
        }
    }

    /// Parses `sql` and admits each of its statements for `user`, or
    /// refuses the whole text. A parse error is returned as such: nothing
    /// runs.
    pub fn admit(&self, sql: &str, user: &str) -> Result<Vec<Statement>, PgWireError> {
        let statements = self
            .parse(sql)
            .map_err(|e: ParserError| PgWireError::ApiError(Box::new(e)))?;
        let role = self.role(user);
        for stmt in &statements {
            judge(stmt, role, user)?;
        }
        Ok(statements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(sql: &str, role: Role) -> Result<(), &'static str> {
        let gate = Gate::new(None);
        let stmts = gate.parser.parse(sql).expect(sql);
        assert_eq!(stmts.len(), 1, "{sql}");
        judge(&stmts[0], role, "u").map_err(|r| r.code)
    }

    #[test]
    fn reads_for_everyone() {
        for sql in [
            "SELECT * FROM culprits('q1')",
            "SELECT count(*) FROM tasks WHERE host <> $1",
            "EXPLAIN SELECT 1",
            "SHOW ALL",
            "SET statement_timeout = 5000",
            "SET statement_timeout = '2min'",
            "SET datestyle = 'ISO'",
            "BEGIN",
            "COMMIT",
            "SAVEPOINT s",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "FETCH 10 FROM c",
            "CLOSE c",
            "DISCARD ALL",
            "PREPARE p AS SELECT $1",
            "EXECUTE p(1)",
            "WITH a AS (SELECT 1 AS x) SELECT * FROM a UNION SELECT 2",
        ] {
            assert_eq!(verdict(sql, Role::Read), Ok(()), "{sql}");
            assert_eq!(verdict(sql, Role::Write), Ok(()), "{sql}");
        }
    }

    #[test]
    fn writes_for_the_write_role_only() {
        for sql in [
            "CREATE TABLE t1 AS SELECT $1::text AS x",
            "CREATE VIEW v2 AS SELECT * FROM tasks WHERE host <> $1",
            "CREATE TABLE t (a int)",
            "INSERT INTO t VALUES (1)",
            "DROP VIEW task_runs",
            "DROP TABLE t",
            "CREATE SCHEMA s",
            "SELECT * INTO t3 FROM tasks",
            "SELECT 1 UNION SELECT * INTO t4 FROM tasks",
            "EXPLAIN ANALYZE CREATE TABLE t5 AS SELECT 1",
            "PREPARE p AS CREATE TABLE t6 AS SELECT 1",
            "DELETE FROM t",
        ] {
            assert_eq!(verdict(sql, Role::Read), Err("42501"), "{sql}");
            assert_eq!(verdict(sql, Role::Write), Ok(()), "{sql}");
        }
    }

    #[test]
    fn locations_and_server_settings_for_no_role() {
        for sql in [
            "COPY (SELECT 'x' AS a) TO '/tmp/anything.csv'",
            "COPY (SELECT $1 AS a) TO '/tmp/anything.csv'",
            "COPY tasks TO '/tmp/t.csv'",
            "COPY tasks FROM '/etc/passwd'",
            "CREATE EXTERNAL TABLE e STORED AS PARQUET LOCATION '/etc/passwd'",
            "CREATE EXTERNAL TABLE e2 (a INT) STORED AS TEXTFILE LOCATION '/etc'",
            "EXPLAIN COPY (SELECT 1) TO '/tmp/x.csv'",
            "PREPARE p AS COPY (SELECT 1) TO '/tmp/x.csv'",
            "SET datafusion.runtime.memory_limit = '100G'",
            "SET datafusion.runtime.temp_directory = '/tmp/spill'",
            "SET ROLE admin",
            "SET SESSION AUTHORIZATION admin",
        ] {
            assert_eq!(verdict(sql, Role::Read), Err("42501"), "{sql}");
            assert_eq!(verdict(sql, Role::Write), Err("42501"), "{sql}");
        }
    }

    #[test]
    fn bad_parameters_and_settings() {
        for sql in [
            "SELECT $0",
            "SELECT * FROM culprits($0)",
            "SELECT $65536",
            "SELECT $x",
        ] {
            assert_eq!(verdict(sql, Role::Write), Err("42P02"), "{sql}");
        }
        for sql in [
            "SET statement_timeout = '18446744073709551615'",
            "SET statement_timeout = 2147483648",
            "SET statement_timeout = '99999999min'",
            "SET statement_timeout = 'soon'",
            "SET statement_timeout = '1h'",
            "SET statement_timeout = '2 min'",
        ] {
            assert_eq!(verdict(sql, Role::Read), Err("22023"), "{sql}");
        }
        assert_eq!(verdict("SET statement_timeout = 0", Role::Read), Ok(()));
        assert_eq!(
            verdict("SET statement_timeout = '2147483647'", Role::Read),
            Ok(())
        );
    }

    #[test]
    fn unknown_kinds_for_no_role() {
        for sql in [
            "CREATE INDEX i ON tasks (host)",
            "GRANT SELECT ON tasks TO bob",
        ] {
            assert_eq!(verdict(sql, Role::Write), Err("0A000"), "{sql}");
        }
    }

    #[test]
    fn scheduling_a_report_is_a_write() {
        let gate = Gate::new(None);
        for sql in [
            "SELECT cron.schedule('daily', '0 7 * * *', $$SELECT * FROM victims()$$)",
            "SELECT cron.unschedule('daily')",
        ] {
            let e = gate.admit(sql, "u").unwrap_err().to_string();
            assert!(e.contains("read-only") && e.contains("cron."), "{sql}: {e}");
        }
        // The call keeps its schema (the compatibility rules would strip it).
        let write = Judge {
            role: Role::Write,
            user: "w".into(),
        };
        let kept = gate.keep_cron_calls(
            "SELECT cron.unschedule('x')",
            gate.parser.parse("SELECT cron.unschedule('x')").unwrap(),
        );
        assert!(crate::reports::cron_call(&kept[0]).is_some(), "{}", kept[0]);
        assert!(kept[0].visit(&mut { write }).is_continue());
    }

    #[test]
    fn copy_to_the_client_is_a_read_and_from_it_a_write() {
        assert_eq!(verdict("COPY tasks TO STDOUT", Role::Read), Ok(()));
        assert_eq!(
            verdict(
                "COPY (SELECT * FROM culprits('q')) TO STDOUT WITH CSV HEADER",
                Role::Read
            ),
            Ok(())
        );
        assert_eq!(verdict("COPY teams FROM STDIN", Role::Read), Err("42501"));
        assert_eq!(verdict("COPY teams FROM STDIN", Role::Write), Ok(()));
        // Files stay out of reach of every role.
        assert_eq!(verdict("COPY tasks TO '/tmp/x'", Role::Write), Err("42501"));
        assert_eq!(
            verdict("COPY teams FROM '/etc/passwd'", Role::Write),
            Err("42501")
        );
    }

    #[test]
    fn grafana_search_path_lookup_keeps_its_subquery() {
        let sql = "select quote_ident(table_name) from information_schema.tables \
            where quote_ident(table_schema) IN ( \
            SELECT CASE WHEN trim(s[i]) = '\"$user\"' THEN user ELSE trim(s[i]) END \
            FROM generate_series( \
              array_lower(string_to_array(current_setting('search_path'),','),1), \
              array_upper(string_to_array(current_setting('search_path'),','),1) \
            ) as i, string_to_array(current_setting('search_path'),',') s)";
        let gate = Gate::new(None);
        // datafusion-postgres's parser alone blanks the subquery...
        let blanked = gate.parser.parse(sql).expect(sql);
        assert!(grafana::lookup_was_blanked(&blanked[0]));
        // ... the gate keeps it.
        let admitted = gate.admit(sql, "u").expect(sql);
        assert_eq!(admitted.len(), 1);
        assert!(grafana::is_search_path_lookup(&admitted[0]));
        assert!(!grafana::lookup_was_blanked(&admitted[0]));
        // Other texts parse as datafusion-postgres parses them.
        let other = "SELECT 1 WHERE 'a' IN ('')";
        assert_eq!(
            gate.admit(other, "u").expect(other),
            gate.parser.parse(other).expect(other)
        );
    }
}
