//! Cancel requests. A client cancels by opening a new connection that sends
//! only the (pid, secret key) of the connection to stop, so the statements
//! running on every connection of the server are listed in one registry,
//! [`Running`], by that key. A cancel wakes the statement's guard
//! (`guard.rs`), which stops it whether it is planning, computing or sending
//! rows; pgwire's own cancel (which only covers the start of a statement) is
//! signalled too.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::ConnectionManager;
use pgwire::messages::cancel::CancelRequest;
use tokio::sync::Notify;

/// The key a cancel request names a connection by: its pid and secret key.
pub type ConnectionKey = (i32, Vec<u8>);

/// A running statement: its connection, and the signal that stops it.
type RunningStatement = (ConnectionKey, Arc<Notify>);

/// The statements running on the server's connections. Shared by every
/// connection of a server.
#[derive(Clone, Default)]
pub struct Running(Arc<Mutex<Vec<RunningStatement>>>);

impl Running {
    /// Lists a statement that starts on the connection `key`.
    pub fn start(&self, key: ConnectionKey) -> Arc<Notify> {
        let stop = Arc::new(Notify::new());
        self.0
            .lock()
            .expect("running statements")
            .push((key, stop.clone()));
        stop
    }

    /// Removes a statement that ended (its `stop` signal from [`Running::start`]).
    pub fn end(&self, stop: &Arc<Notify>) {
        self.0
            .lock()
            .expect("running statements")
            .retain(|(_, n)| !Arc::ptr_eq(n, stop));
    }

    /// Stops every statement running on the connection of `pid`
    /// (`pg_cancel_backend`: the caller's rights were checked).
    pub fn stop_pid(&self, pid: i32) {
        self.stop_where(|(p, _)| *p == pid);
    }

    /// Stops every statement running on the connection `key`.
    fn stop(&self, key: &ConnectionKey) {
        self.stop_where(|k| k == key);
    }

    fn stop_where(&self, on: impl Fn(&ConnectionKey) -> bool) {
        let stops: Vec<Arc<Notify>> = self
            .0
            .lock()
            .expect("running statements")
            .iter()
            .filter(|(k, _)| on(k))
            .map(|(_, n)| n.clone())
            .collect();
        for stop in stops {
            stop.notify_one();
        }
    }
}

/// Answers cancel requests for the connections of one server.
pub struct Cancel {
    pub running: Running,
    pub connections: Arc<ConnectionManager>,
}

#[async_trait]
impl CancelHandler for Cancel {
    async fn on_cancel_request(&self, req: CancelRequest) {
        let key = (req.pid, req.secret_key.to_bytes().to_vec());
        self.running.stop(&key);
        self.connections.cancel(req.pid, &req.secret_key).await;
    }
}
