//! The statement timeout and cancel requests, over the whole life of a
//! statement. DataFusion plans and computes lazily: most of the work of a
//! query happens while its rows are sent, after the handler has returned its
//! response. So a [`StatementGuard`] covers the handler's work (planning,
//! table functions that compute when planned) through [`StatementGuard::run`],
//! and the sending of rows through [`StatementGuard::cover_rows`], which wraps
//! the response's row stream in [`Guarded`]. Whichever ends first, the work,
//! the deadline or a cancel request, wins: the client gets 57014.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use pgwire::api::results::Response;
use pgwire::api::ClientInfo;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use tokio::sync::Notify;

use crate::cancel::Running;
use crate::sqlstate;

/// Where datafusion-postgres keeps a client's `SET statement_timeout`, in
/// milliseconds (0 or absent: none), in the connection's metadata.
const STATEMENT_TIMEOUT_KEY: &str = "statement_timeout_ms";

/// The deadline and cancel signal of one statement (or of the statements of
/// one simple-protocol message). Dropped when the statement's last row is
/// sent; it leaves the running registry then.
pub struct StatementGuard {
    deadline: Option<tokio::time::Instant>,
    timeout: Option<Duration>,
    cancel: Arc<Notify>,
    running: Running,
}

impl Drop for StatementGuard {
    fn drop(&mut self) {
        self.running.end(&self.cancel);
    }
}

fn timeout_error(t: Duration) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        sqlstate::QUERY_CANCELED.into(),
        format!(
            "canceling statement due to statement timeout ({} ms)",
            t.as_millis()
        ),
    )))
}

fn cancel_error() -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        sqlstate::QUERY_CANCELED.into(),
        "canceling statement due to user request".into(),
    )))
}

impl StatementGuard {
    /// Starts guarding a statement of `client`. `default_timeout` is the
    /// server's; a client's `SET statement_timeout` wins over it.
    pub fn start<C: ClientInfo>(
        client: &C,
        default_timeout: Option<Duration>,
        running: &Running,
    ) -> Arc<StatementGuard> {
        let timeout = match client.metadata().get(STATEMENT_TIMEOUT_KEY) {
            Some(ms) => ms
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            None => default_timeout,
        };
        let (pid, secret) = client.pid_and_secret_key();
        let cancel = running.start((pid, secret.to_bytes().to_vec()));
        Arc::new(StatementGuard {
            // A timeout too far off to be an instant is no deadline.
            deadline: timeout.and_then(|t| tokio::time::Instant::now().checked_add(t)),
            timeout,
            cancel,
            running: running.clone(),
        })
    }

    /// Runs `work` under the guard: the first of its end, the deadline and a
    /// cancel request wins.
    pub async fn run<T>(&self, work: impl Future<Output = PgWireResult<T>>) -> PgWireResult<T> {
        let deadline = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = work => r,
            _ = deadline => Err(timeout_error(self.timeout.unwrap_or_default())),
            _ = self.cancel.notified() => Err(cancel_error()),
        }
    }

    /// Wraps a response's rows so the guard also covers their sending.
    pub fn cover_rows(self: &Arc<Self>, response: Response) -> Response {
        match response {
            Response::Query(mut q) => {
                let rows = std::mem::replace(&mut q.data_rows, Box::pin(futures::stream::empty()));
                q.data_rows = Box::pin(Guarded {
                    rows,
                    guard: self.clone(),
                    sleep: None,
                    notified: None,
                    done: false,
                });
                Response::Query(q)
            }
            other => other,
        }
    }
}

type Rows = Pin<Box<dyn Stream<Item = PgWireResult<DataRow>> + Send>>;

/// A row stream that ends with 57014 when its statement's deadline passes or
/// a cancel request comes, before the next row.
struct Guarded {
    rows: Rows,
    guard: Arc<StatementGuard>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    notified: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    done: bool,
}

impl Guarded {
    /// Whether a cancel request came (registers the waker otherwise).
    fn canceled(&mut self, cx: &mut Context<'_>) -> bool {
        if self.notified.is_none() {
            let cancel = self.guard.cancel.clone();
            self.notified = Some(Box::pin(async move { cancel.notified().await }));
        }
        let notified = self.notified.as_mut().expect("set above");
        notified.as_mut().poll(cx).is_ready()
    }

    /// Whether the deadline passed (registers the waker otherwise).
    fn timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.guard.deadline else {
            return false;
        };
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        sleep.as_mut().poll(cx).is_ready()
    }
}

impl Stream for Guarded {
    type Item = PgWireResult<DataRow>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.canceled(cx) {
            self.done = true;
            return Poll::Ready(Some(Err(cancel_error())));
        }
        if self.timed_out(cx) {
            self.done = true;
            let t = self.guard.timeout.unwrap_or_default();
            return Poll::Ready(Some(Err(timeout_error(t))));
        }
        self.rows.as_mut().poll_next(cx)
    }
}
