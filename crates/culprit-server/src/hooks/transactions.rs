//! Transaction blocks, as PostgreSQL answers them to the clients that send
//! them: `BEGIN`, `COMMIT`, `ROLLBACK`, savepoints, and the refusal of
//! other statements in a failed block.
//!
//! A culprit session changes no stored data inside a block (user tables
//! are written at once), so there is nothing to keep or undo; what the
//! clients depend on is the block's state, which this module keeps as
//! PostgreSQL does:
//! - after an error inside a block every statement but `COMMIT`,
//!   `ROLLBACK` and `ROLLBACK TO SAVEPOINT` is refused with `25P02`;
//! - `ROLLBACK TO SAVEPOINT` of a savepoint of the block clears the error
//!   (psql's `ON_ERROR_ROLLBACK`, psqlODBC's statement rollback, DBeaver);
//! - `COMMIT` of a failed block answers `ROLLBACK`;
//! - the end of a block closes its cursors declared without `WITH HOLD`.
//!
//! The state is the connection's transaction status, set here. (pgwire's
//! Execute would put back the status it saw before the statement:
//! `protocol.rs` keeps the one the statement left.)

use std::sync::Mutex;

use datafusion::sql::sqlparser::ast::Statement;
use pgwire::api::results::{Response, Tag};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::response::TransactionStatus;

use crate::cursors::Cursors;
use crate::sqlstate;
use datafusion::prelude::SessionContext;
use datafusion_postgres::hooks::HookClient;

fn error(code: &str, message: &str) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message.into(),
    )))
}

/// The transaction block of one connection.
#[derive(Default)]
pub struct Transactions {
    /// The savepoints of the open block, oldest first.
    savepoints: Mutex<Vec<String>>,
    /// The session's settings when the block began (the connection's
    /// metadata and the schema unqualified names resolve in): a `ROLLBACK`
    /// puts them back, as PostgreSQL undoes a `SET` of a rolled-back block.
    settings: Mutex<Option<(std::collections::HashMap<String, String>, String)>>,
}

/// Whether a statement belongs to transaction control (answered here).
pub fn is_transaction_statement(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::StartTransaction { .. }
            | Statement::Commit { .. }
            | Statement::Rollback { .. }
            | Statement::Savepoint { .. }
            | Statement::ReleaseSavepoint { .. }
    )
}

impl Transactions {
    fn savepoints(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.savepoints
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The refusal of a statement in a failed block, if it is one.
    pub fn refusal(&self, statement: &Statement, client: &dyn HookClient) -> Option<PgWireError> {
        let allowed = matches!(
            statement,
            Statement::Commit { .. } | Statement::Rollback { .. }
        );
        (client.transaction_status() == TransactionStatus::Error && !allowed).then(|| {
            error(
                sqlstate::IN_FAILED_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            )
        })
    }

    fn settings(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<(std::collections::HashMap<String, String>, String)>>
    {
        self.settings
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The answer to a transaction statement; `None` for other statements.
    pub fn answer(
        &self,
        statement: &Statement,
        client: &mut dyn HookClient,
        cursors: &Cursors,
        ctx: &SessionContext,
    ) -> Option<PgWireResult<Response>> {
        use TransactionStatus::{Error, Idle, Transaction};
        let status = client.transaction_status();
        let answer = match statement {
            Statement::StartTransaction { .. } => {
                if status == Idle {
                    self.savepoints().clear();
                    let schema = ctx
                        .state()
                        .config()
                        .options()
                        .catalog
                        .default_schema
                        .clone();
                    *self.settings() = Some((client.metadata().clone(), schema));
                    client.set_transaction_status(Transaction);
                } else {
                    // PostgreSQL warns and stays in the block.
                    log::debug!("BEGIN inside a transaction block: ignored");
                }
                Ok(Response::Execution(Tag::new("BEGIN")))
            }
            Statement::Commit { .. }
            | Statement::Rollback {
                savepoint: None, ..
            } => {
                let tag = match (statement, status) {
                    (Statement::Commit { .. }, Error) => "ROLLBACK",
                    (Statement::Commit { .. }, _) => "COMMIT",
                    _ => "ROLLBACK",
                };
                self.savepoints().clear();
                cursors.end_transaction();
                let saved = self.settings().take();
                if let (Some((metadata, schema)), false) = (saved, tag == "COMMIT") {
                    *client.metadata_mut() = metadata;
                    ctx.state_ref()
                        .write()
                        .config_mut()
                        .options_mut()
                        .catalog
                        .default_schema = schema;
                }
                client.set_transaction_status(Idle);
                Ok(Response::Execution(Tag::new(tag)))
            }
            Statement::Savepoint { name } => {
                if status == Idle {
                    Err(error(
                        sqlstate::NO_ACTIVE_TRANSACTION,
                        "SAVEPOINT can only be used in transaction blocks",
                    ))
                } else {
                    self.savepoints().push(name.value.clone());
                    Ok(Response::Execution(Tag::new("SAVEPOINT")))
                }
            }
            Statement::ReleaseSavepoint { name }
            | Statement::Rollback {
                savepoint: Some(name),
                ..
            } => {
                let release = matches!(statement, Statement::ReleaseSavepoint { .. });
                let what = if release {
                    "RELEASE SAVEPOINT"
                } else {
                    "ROLLBACK TO SAVEPOINT"
                };
                let mut savepoints = self.savepoints();
                if status == Idle {
                    Err(error(
                        sqlstate::NO_ACTIVE_TRANSACTION,
                        &format!("{what} can only be used in transaction blocks"),
                    ))
                } else if let Some(at) = savepoints.iter().rposition(|s| *s == name.value) {
                    // RELEASE drops the savepoint and those after it;
                    // ROLLBACK TO keeps it, and clears the block's error.
                    savepoints.truncate(if release { at } else { at + 1 });
                    drop(savepoints);
                    if !release {
                        client.set_transaction_status(Transaction);
                    }
                    Ok(Response::Execution(Tag::new(if release {
                        "RELEASE"
                    } else {
                        "ROLLBACK"
                    })))
                } else {
                    Err(error(
                        sqlstate::INVALID_SAVEPOINT,
                        &format!("savepoint \"{}\" does not exist", name.value),
                    ))
                }
            }
            _ => return None,
        };
        Some(answer)
    }
}
