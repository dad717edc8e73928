//! The one mapping from culprit / DataFusion errors to SQLSTATE codes.
//! culprit's own errors are typed (`culprit_sql::Error`, the store's
//! `StoreError`) and mapped by what they are, never by their words;
//! DataFusion's own errors by their variant (and, where DataFusion only
//! has text, its words). `XX000` is kept for what can only be a bug, and
//! each is logged.

use culprit_sql::error::{Error as CulpritError, MethodError};
use culprit_store::{StoreError, UserTableProblem};
use datafusion::common::{DataFusionError, SchemaError};
use datafusion::sql::sqlparser::parser::ParserError;
use pgwire::error::{ErrorInfo, PgWireError};

pub const SYNTAX_ERROR: &str = "42601";
pub const DUPLICATE_TABLE: &str = "42P07";
pub const WRONG_OBJECT_TYPE: &str = "42809";
pub const INVALID_NAME: &str = "42602";
pub const NOT_NULL_VIOLATION: &str = "23502";
pub const DATATYPE_MISMATCH: &str = "42804";
pub const BAD_COPY_FILE_FORMAT: &str = "22P04";
pub const UNDEFINED_TABLE: &str = "42P01";
pub const UNDEFINED_COLUMN: &str = "42703";
pub const UNDEFINED_FUNCTION: &str = "42883";
pub const INVALID_PARAMETER_VALUE: &str = "22023";
pub const DIVISION_BY_ZERO: &str = "22012";
pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
pub const QUERY_CANCELED: &str = "57014";
pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
pub const UNDEFINED_PARAMETER: &str = "42P02";
pub const OUT_OF_MEMORY: &str = "53200";
pub const SYNTAX_OR_ACCESS_RULE: &str = "42000";
pub const IO_ERROR: &str = "58030";
/// A worker of the cluster failed or cannot be reached
/// (`culprit_sql::cluster::WorkerUnavailable`): an error outside this
/// process, not of the store.
pub const SYSTEM_ERROR: &str = "58000";
pub const DATA_CORRUPTED: &str = "XX001";
/// A store version superseded and removed while still asked for
/// (`StoreError::ManifestGone`: a worker reading the version its
/// coordinator planned at, long after).
pub const SNAPSHOT_TOO_OLD: &str = "72000";
pub const INTERNAL_ERROR: &str = "XX000";
/// Transaction blocks (`hooks/transactions.rs`).
pub const IN_FAILED_TRANSACTION: &str = "25P02";
pub const NO_ACTIVE_TRANSACTION: &str = "25P01";
pub const INVALID_SAVEPOINT: &str = "3B001";
/// Cursors (`cursors.rs`).
pub const INVALID_CURSOR_NAME: &str = "34000";
pub const DUPLICATE_CURSOR: &str = "42P03";
pub const NOT_IN_PREREQUISITE_STATE: &str = "55000";
/// `pg_terminate_backend` (`sessions.rs`).
pub const ADMIN_SHUTDOWN: &str = "57P01";
pub const PROTOCOL_VIOLATION: &str = "08P01";
pub const TOO_MANY_CONNECTIONS: &str = "53300";
pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
pub const INVALID_PASSWORD: &str = "28P01";
/// The privilege functions (`privileges.rs`).
pub const UNDEFINED_OBJECT: &str = "42704";
pub const INVALID_SCHEMA_NAME: &str = "3F000";

/// The SQLSTATE and message for a DataFusion error.
pub fn classify(e: &DataFusionError) -> (&'static str, String) {
    if let Some(w) = worker_failure(e) {
        return (SYSTEM_ERROR, w.to_string());
    }
    let root = e.find_root();
    let msg = root.message().to_string();
    let code = match root {
        DataFusionError::SQL(..) => SYNTAX_ERROR,
        DataFusionError::SchemaError(se, _) => match se.as_ref() {
            SchemaError::FieldNotFound { .. } => UNDEFINED_COLUMN,
            SchemaError::AmbiguousReference { .. } => "42702",
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701",
        },
        DataFusionError::Plan(m) => plan_code(m),
        DataFusionError::NotImplemented(_) => FEATURE_NOT_SUPPORTED,
        DataFusionError::ResourcesExhausted(_) => OUT_OF_MEMORY,
        DataFusionError::ArrowError(ae, _) => match ae.as_ref() {
            // An INSERT of a NULL into a NOT NULL column of a user table.
            datafusion::arrow::error::ArrowError::InvalidArgumentError(m)
                if m.contains("non-nullable") =>
            {
                NOT_NULL_VIOLATION
            }
            datafusion::arrow::error::ArrowError::DivideByZero => DIVISION_BY_ZERO,
            datafusion::arrow::error::ArrowError::CastError(_)
            | datafusion::arrow::error::ArrowError::ParseError(_) => INVALID_TEXT_REPRESENTATION,
            _ => INTERNAL_ERROR,
        },
        DataFusionError::Execution(m) => {
            if m.contains("has null but schema specifies non-nullable") {
                // An INSERT of a NULL into a NOT NULL column of a user table.
                NOT_NULL_VIOLATION
            } else if m.contains("Invalid argument") {
                INVALID_PARAMETER_VALUE
            } else if m.contains("Divide by zero") {
                DIVISION_BY_ZERO
            } else {
                INTERNAL_ERROR
            }
        }
        DataFusionError::IoError(_) | DataFusionError::ObjectStore(_) => IO_ERROR,
        DataFusionError::External(e) => external_code(e.as_ref()),
        _ => INTERNAL_ERROR,
    };
    if code == INTERNAL_ERROR {
        log::error!("internal error (a bug): {e}");
    }
    (code, msg)
}

/// A worker's failure anywhere in the error's chain (the distributed
/// engine wraps errors of its streams in its own).
fn worker_failure(e: &DataFusionError) -> Option<&culprit_sql::cluster::WorkerUnavailable> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(w) = err.downcast_ref::<culprit_sql::cluster::WorkerUnavailable>() {
            return Some(w);
        }
        if let Some(DataFusionError::External(inner)) = err.downcast_ref::<DataFusionError>() {
            if let Some(w) = inner.downcast_ref::<culprit_sql::cluster::WorkerUnavailable>() {
                return Some(w);
            }
        }
        cur = err.source();
    }
    None
}

/// An error of the server's own functions (`sessions.rs`), raised inside
/// DataFusion with the SQLSTATE it maps to.
#[derive(Debug)]
pub struct Coded {
    pub code: &'static str,
    pub message: String,
}

impl Coded {
    pub fn new(code: &'static str, message: String) -> Coded {
        Coded { code, message }
    }
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// culprit's typed errors inside DataFusion's.
fn external_code(e: &(dyn std::error::Error + Send + Sync + 'static)) -> &'static str {
    if let Some(e) = e.downcast_ref::<Coded>() {
        return e.code;
    }
    if let Some(e) = e.downcast_ref::<CulpritError>() {
        return match e {
            CulpritError::Method {
                source: MethodError::Internal(_),
                ..
            }
            | CulpritError::Internal(_) => INTERNAL_ERROR,
            CulpritError::Method { .. } | CulpritError::Argument { .. } => INVALID_PARAMETER_VALUE,
            // The server's memory budget, or its queue of heavy analyses.
            CulpritError::OutOfMemory(_) => OUT_OF_MEMORY,
            CulpritError::Store(s) => store_code(s),
            // The workers' share of an analysis: the distributed engine's
            // own error (a worker's failure is found before, in the chain).
            CulpritError::Remote(inner) => match inner.downcast_ref::<DataFusionError>() {
                Some(d) => classify(d).0,
                None => INTERNAL_ERROR,
            },
        };
    }
    match e.downcast_ref::<StoreError>() {
        Some(s) => store_code(s),
        None => IO_ERROR,
    }
}

pub(crate) fn store_code(e: &StoreError) -> &'static str {
    match e {
        // A data file the store did not write (or an older layout).
        StoreError::ForeignSchema { .. } | StoreError::CorruptFiles { .. } => DATA_CORRUPTED,
        StoreError::ManifestGone { .. } => SNAPSHOT_TOO_OLD,
        StoreError::UserTable { code, .. } => match code {
            UserTableProblem::Exists => DUPLICATE_TABLE,
            UserTableProblem::Missing => UNDEFINED_TABLE,
            UserTableProblem::Telemetry => WRONG_OBJECT_TYPE,
            UserTableProblem::Invalid => INVALID_NAME,
            UserTableProblem::NotNull => NOT_NULL_VIOLATION,
            UserTableProblem::Mismatch => DATATYPE_MISMATCH,
            UserTableProblem::NotOwner => INSUFFICIENT_PRIVILEGE,
        },
        _ => IO_ERROR,
    }
}

fn plan_code(m: &str) -> &'static str {
    let lower = m.to_ascii_lowercase();
    if lower.contains("table") && lower.contains("not found") {
        UNDEFINED_TABLE
    } else if lower.contains("invalid function")
        || lower.contains("no function matches")
        || lower.contains("function") && lower.contains("not found")
    {
        UNDEFINED_FUNCTION
    } else if lower.contains("argument") {
        // DataFusion's own argument checks of its functions (text only).
        INVALID_PARAMETER_VALUE
    } else if lower.contains("schema") && lower.contains("not found") {
        INVALID_SCHEMA_NAME
    } else {
        SYNTAX_OR_ACCESS_RULE
    }
}

/// Turns an opaque `ApiError` into a `UserError` with its SQLSTATE.
pub fn rewrite(error: &mut PgWireError) {
    let PgWireError::ApiError(inner) = error else {
        return;
    };
    let (code, msg) = if let Some(df) = inner.downcast_ref::<DataFusionError>() {
        classify(df)
    } else if let Some(p) = inner.downcast_ref::<ParserError>() {
        (SYNTAX_ERROR, p.to_string())
    } else {
        (INTERNAL_ERROR, inner.to_string())
    };
    *error = PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        code.to_string(),
        msg,
    )));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let e = DataFusionError::Plan("table 'datafusion.public.nope' not found".into());
        assert_eq!(classify(&e).0, UNDEFINED_TABLE);
        let e = DataFusionError::Plan("Invalid function 'nope'.\nDid you mean 'now'?".into());
        assert_eq!(classify(&e).0, UNDEFINED_FUNCTION);
        let e = DataFusionError::ResourcesExhausted("pool".into());
        assert_eq!(classify(&e).0, OUT_OF_MEMORY);
        // By type: a bad argument of a culprit function, however worded,
        // and a failure inside the method, even with a familiar message.
        let e = DataFusionError::Context(
            "ctx".into(),
            Box::new(DataFusionError::External(Box::new(CulpritError::Method {
                function: Some("culprits"),
                source: MethodError::UnknownQuery("q9".into()),
            }))),
        );
        assert_eq!(classify(&e).0, INVALID_PARAMETER_VALUE);
        let e = DataFusionError::External(Box::new(CulpritError::argument(
            "blame",
            "unknown option 'x'",
        )));
        assert_eq!(classify(&e).0, INVALID_PARAMETER_VALUE);
        let e = DataFusionError::External(Box::new(CulpritError::Method {
            function: Some("blame"),
            source: MethodError::Internal("a sweep thread panicked: bad argument".into()),
        }));
        assert_eq!(classify(&e).0, INTERNAL_ERROR);
        let e = DataFusionError::External(Box::new(CulpritError::OutOfMemory("full".into())));
        assert_eq!(classify(&e).0, OUT_OF_MEMORY);
        let e = DataFusionError::External(Box::new(CulpritError::Internal("join".into())));
        assert_eq!(classify(&e).0, INTERNAL_ERROR);
        // Text that looks like culprit's is no longer a bad argument.
        let e = DataFusionError::Execution("culprit: blame: a worker failed".into());
        assert_eq!(classify(&e).0, INTERNAL_ERROR);
        let e = DataFusionError::External(Box::new(culprit_store::StoreError::ForeignSchema {
            path: "tables/tasks/x.parquet".into(),
            table: "tasks".into(),
            column: "host".into(),
            problem: "is missing".into(),
        }));
        assert_eq!(classify(&e).0, DATA_CORRUPTED);
        let e = DataFusionError::External(Box::new(culprit_store::StoreError::CorruptFiles {
            what: "3 files of table host_windows".into(),
            reason: "their footers count 30 rows, their merge read 29".into(),
        }));
        assert_eq!(classify(&e).0, DATA_CORRUPTED);
        let e = DataFusionError::External(Box::new(CulpritError::Store(
            culprit_store::StoreError::ManifestGone {
                version: 7,
                grace_secs: 900,
            },
        )));
        let (code, msg) = classify(&e);
        assert_eq!(code, SNAPSHOT_TOO_OLD);
        assert!(msg.contains("store version 7 is no longer kept"), "{msg}");
        // A worker that failed, however deep in DataFusion's wrapping, and
        // its address in the message.
        let e = DataFusionError::Shared(std::sync::Arc::new(DataFusionError::External(Box::new(
            culprit_sql::cluster::WorkerUnavailable {
                url: "http://10.0.0.7:5434/".into(),
                detail: "tcp connect error".into(),
            },
        ))));
        let (code, msg) = classify(&e);
        assert_eq!(code, SYSTEM_ERROR);
        assert!(msg.contains("http://10.0.0.7:5434/"), "{msg}");
    }
}
