//! The statements a session answers itself, without planning them:
//! transaction blocks and savepoints (`transactions.rs`), `DISCARD`,
//! `RESET`, `UNLISTEN`, then datafusion-postgres's hook for `SET` / `SHOW`.
//! The pipeline asks them, with the tree the gate admitted, before it
//! rewrites or plans anything, whatever the protocol; in a failed
//! transaction block they refuse every statement but its end.
//!
//! The connection's cursors (`cursors.rs`) live here too: the end of a
//! transaction closes some of them, and `DISCARD ALL` all of them; the
//! pipeline declares and fetches them, since their queries are planned as
//! any other.

mod transactions;

use std::sync::Arc;

use datafusion::common::{DFSchema, ParamValues};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{DiscardObject, Statement};
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::QueryHook;
use pgwire::api::results::{Response, Tag};
use pgwire::api::ClientInfo;
use pgwire::error::PgWireResult;

use crate::cursors::Cursors;
use transactions::Transactions;

/// The session hooks of one connection, with its cursors.
#[derive(Default)]
pub struct SessionHooks {
    transactions: Transactions,
    pub cursors: Cursors,
}

/// A plan with no columns: what a statement answered by a tag describes.
pub(crate) fn no_columns() -> LogicalPlan {
    LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: false,
        schema: Arc::new(DFSchema::empty()),
    })
}

/// The tag of the session statements answered here with nothing to do
/// but their effect on the session: `DISCARD` (connection pools and pgjdbc
/// send it when they hand a connection back: there are no cached plans,
/// sequences or temporary tables; `DISCARD ALL` closes the cursors),
/// `UNLISTEN` (culprit sends no notifications) and `RESET` (of the
/// settings a client can `SET`: see [`SessionHooks::answer`]).
fn session_tag(statement: &Statement) -> Option<&'static str> {
    match statement {
        Statement::Discard { object_type } => Some(match object_type {
            DiscardObject::ALL => "DISCARD ALL",
            DiscardObject::PLANS => "DISCARD PLANS",
            DiscardObject::SEQUENCES => "DISCARD SEQUENCES",
            DiscardObject::TEMP => "DISCARD TEMP",
        }),
        Statement::UNLISTEN { .. } => Some("UNLISTEN"),
        Statement::Reset(_) => Some("RESET"),
        _ => None,
    }
}

impl SessionHooks {
    /// The columns of a hook's answer (for Parse and Describe), if a hook
    /// answers `statement`.
    pub async fn describe(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        let statement = &*normalized(statement);
        if transactions::is_transaction_statement(statement)
            || session_tag(statement).is_some()
            || search_path(statement).is_some()
        {
            return Some(Ok(no_columns()));
        }
        SetShowHook
            .handle_extended_parse_query(statement, ctx, client)
            .await
    }

    /// A hook's answer to `statement`, if one answers it, or its refusal in
    /// a failed transaction block. `described` is the plan made when the
    /// statement was prepared (extended protocol).
    pub async fn answer(
        &self,
        statement: &Statement,
        described: Option<&LogicalPlan>,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let statement = &*normalized(statement);
        if let Some(refusal) = self.transactions.refusal(statement, client) {
            return Some(Err(refusal));
        }
        if let Some(schemas) = search_path(statement) {
            use_search_path(ctx, &schemas);
            client
                .metadata_mut()
                .insert("search_path".into(), schemas.join(", "));
            return Some(Ok(Response::Execution(Tag::new("SET"))));
        }
        if let Some(answer) = self
            .transactions
            .answer(statement, client, &self.cursors, ctx)
        {
            return Some(answer);
        }
        if let Some(tag) = session_tag(statement) {
            match statement {
                Statement::Discard {
                    object_type: DiscardObject::ALL,
                } => self.cursors.clear(),
                Statement::Reset(reset) => {
                    reset_settings(reset, client);
                    if client.metadata().get("search_path").is_none() {
                        use_search_path(ctx, &["public".to_string()]);
                    }
                }
                _ => {}
            }
            return Some(Ok(Response::Execution(Tag::new(tag))));
        }
        // SetShowHook reads no parameter values (SET and SHOW take none).
        let no_values = ParamValues::List(vec![]);
        match described {
            Some(plan) => {
                SetShowHook
                    .handle_extended_query(statement, plan, &no_values, ctx, client)
                    .await
            }
            None => {
                SetShowHook
                    .handle_simple_query(statement, ctx, client)
                    .await
            }
        }
    }
}

/// Applies the startup packet's `options`, before the connection's first
/// statement (`protocol.rs`): `-c search_path=...` (Superset's SQL Lab
/// connects so when a schema is chosen).
pub fn apply_startup_options(ctx: &SessionContext, client: &(impl ClientInfo + ?Sized)) {
    let Some(options) = client.metadata().get("options") else {
        return;
    };
    let words: Vec<&str> = options.split_whitespace().collect();
    let mut settings = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        if word == "-c" {
            settings.extend(words.get(i + 1).copied());
            i += 2;
            continue;
        }
        if let Some(setting) = word.strip_prefix("-c").or_else(|| word.strip_prefix("--")) {
            settings.push(setting);
        }
        i += 1;
    }
    for setting in settings {
        if let Some((name, value)) = setting.split_once('=') {
            if name.trim().eq_ignore_ascii_case("search_path") {
                use_search_path(ctx, &schema_list(value));
            }
        }
    }
}

/// The schemas of a `search_path` value: `cron, public`, quoted or not.
fn schema_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|s| s.trim().trim_matches('"').trim_matches('\'').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The schemas of `SET search_path = ...` (`TO` alike, names or strings);
/// `None` for other statements.
fn search_path(statement: &Statement) -> Option<Vec<String>> {
    use datafusion::sql::sqlparser::ast::{Expr, Set, Value};
    let Statement::Set(Set::SingleAssignment {
        variable, values, ..
    }) = statement
    else {
        return None;
    };
    if !variable.to_string().eq_ignore_ascii_case("search_path") {
        return None;
    }
    Some(
        values
            .iter()
            .flat_map(|value| match value {
                Expr::Identifier(ident) => vec![ident.value.clone()],
                Expr::Value(v) => match &v.value {
                    Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => schema_list(s),
                    other => schema_list(&other.to_string()),
                },
                other => schema_list(&other.to_string()),
            })
            .collect(),
    )
}

/// Unqualified names resolve in the first schema of `schemas` that exists
/// (`$user` and `pg_catalog` skipped, as culprit has no per-user schemas
/// and pg_catalog is always searched); none existing leaves them as they
/// were.
fn use_search_path(ctx: &SessionContext, schemas: &[String]) {
    let Some(catalog) = ctx.catalog("datafusion") else {
        return;
    };
    let first = schemas
        .iter()
        .find(|s| *s != "$user" && *s != "pg_catalog" && catalog.schema(s).is_some());
    if let Some(first) = first {
        ctx.state_ref()
            .write()
            .config_mut()
            .options_mut()
            .catalog
            .default_schema = first.clone();
    }
}

/// `RESET name` / `RESET ALL`: the settings a client `SET` (kept in the
/// connection's metadata by datafusion-postgres) go back to the server's
/// defaults. The connection's user, database and other startup values
/// stay.
fn reset_settings(
    reset: &datafusion::sql::sqlparser::ast::ResetStatement,
    client: &mut dyn HookClient,
) {
    use datafusion::sql::sqlparser::ast::Reset;
    // (name, the metadata key datafusion-postgres keeps it under)
    const SETTABLE: [(&str, &str); 7] = [
        ("datestyle", "datestyle"),
        ("bytea_output", "bytea_output"),
        ("intervalstyle", "intervalstyle"),
        ("application_name", "application_name"),
        ("extra_float_digits", "extra_float_digits"),
        ("search_path", "search_path"),
        ("statement_timeout", "statement_timeout_ms"),
    ];
    let name = match &reset.reset {
        Reset::ALL => None,
        Reset::ConfigurationParameter(name) => Some(name.to_string().to_ascii_lowercase()),
    };
    for (setting, key) in SETTABLE {
        if name.as_deref().is_none_or(|n| n == setting) {
            client.metadata_mut().remove(key);
        }
    }
}

/// `SHOW timezone` (any case) as `SHOW TIME ZONE`, the spelling
/// datafusion-postgres answers; pgjdbc and Metabase send the first and got
/// an empty value.
fn normalized(statement: &Statement) -> std::borrow::Cow<'_, Statement> {
    use datafusion::sql::sqlparser::ast::Ident;
    match statement {
        Statement::ShowVariable { variable }
            if variable.len() == 1 && variable[0].value.eq_ignore_ascii_case("timezone") =>
        {
            std::borrow::Cow::Owned(Statement::ShowVariable {
                variable: vec![Ident::new("time"), Ident::new("zone")],
            })
        }
        _ => std::borrow::Cow::Borrowed(statement),
    }
}
