//! The errors of culprit's analyses, typed so that the server maps each to
//! its SQLSTATE by what it is (`culprit-server/src/sqlstate.rs`), never by
//! the words of its message.

use culprit_core::MethodError;
use culprit_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The method refused its input: an unknown query, a bad option (a bad
    /// argument, 22023), or an internal failure of its own (a bug, XX000).
    /// `function` names the SQL function once the SQL layer knows it.
    #[error("culprit: {}{source}", function.map(|f| format!("{f}: ")).unwrap_or_default())]
    Method {
        function: Option<&'static str>,
        source: MethodError,
    },
    /// A bad argument to a SQL function, found before the method ran.
    #[error("culprit: {function}: {message}")]
    Argument {
        function: &'static str,
        message: String,
    },
    /// Reading the store failed, or it holds a file culprit did not write.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The server's memory budget cannot hold the analysis, or too many
    /// heavy analyses wait already (`budget.rs`; SQLSTATE 53200).
    #[error("culprit: {0}")]
    OutOfMemory(String),
    /// The workers of a cluster could not sweep their share of the
    /// analysis (`shards.rs`): the distributed engine's error, kept whole so
    /// that it is mapped by what it is (a worker that failed: 58000).
    #[error("culprit: {0}")]
    Remote(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A failure that can only be a bug (a lost worker, a broken invariant).
    #[error("culprit: internal error: {0}")]
    Internal(String),
}

impl From<MethodError> for Error {
    fn from(source: MethodError) -> Self {
        Error::Method {
            function: None,
            source,
        }
    }
}

impl Error {
    /// A bad argument of `function`.
    pub fn argument(function: &'static str, message: impl Into<String>) -> Error {
        Error::Argument {
            function,
            message: message.into(),
        }
    }

    /// The same error, naming the SQL function it came from.
    pub fn in_function(self, name: &'static str) -> Error {
        match self {
            Error::Method { source, .. } => Error::Method {
                function: Some(name),
                source,
            },
            other => other,
        }
    }

    /// Whether this is a bug rather than a problem of the input or the store.
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            Error::Internal(_)
                | Error::Method {
                    source: MethodError::Internal(_),
                    ..
                }
        )
    }
}
