//! A session's DataFusion memory pool drawn from the server's one budget
//! (`culprit_engine::budget`): every reservation of every session counts in
//! it, and a session's own limit (`--query-memory-mb`; one statement runs
//! at a time on a connection, so it bounds a query) is checked first. Over
//! either, the reservation fails with ResourcesExhausted (SQLSTATE 53200).
//! The session itself counts [`SESSION_BYTES`] while it is open.

use std::fmt;
use std::sync::Mutex;

use culprit_engine::{Budget, Reservation};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool, MemoryReservation};

/// What one session holds besides its queries (its catalog, `pg_catalog`'s
/// tables, its planner): measured at about 5.5 MiB per connection.
pub const SESSION_BYTES: usize = 6 << 20;

#[derive(Debug)]
pub struct BudgetPool {
    /// The session itself, counted in the budget while it is open.
    _session: Reservation,
    /// The session's limit, bytes.
    limit: Option<usize>,
    /// The session's share of the server's budget.
    held: Mutex<Reservation>,
    budget: Budget,
}

impl BudgetPool {
    pub fn new(budget: Budget, limit: Option<usize>) -> BudgetPool {
        BudgetPool {
            _session: budget.reserve(SESSION_BYTES),
            limit,
            held: Mutex::new(budget.reserve(0)),
            budget,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Reservation> {
        // A panic while holding this lock only left a number behind.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Display for BudgetPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "culprit memory budget pool")
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

impl MemoryPool for BudgetPool {
    fn name(&self) -> &str {
        "culprit budget"
    }

    fn grow(&self, _reservation: &MemoryReservation, additional: usize) {
        self.held().grow(additional);
    }

    fn shrink(&self, _reservation: &MemoryReservation, shrink: usize) {
        self.held().shrink(shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let mut held = self.held();
        let what = reservation.consumer().name();
        if let Some(limit) = self.limit {
            if held.size().saturating_add(additional) > limit {
                return Err(DataFusionError::ResourcesExhausted(format!(
                    "{what} needs {} more; the query holds {} of its {} (--query-memory-mb)",
                    mib(additional),
                    mib(held.size()),
                    mib(limit)
                )));
            }
        }
        held.try_grow(what, additional)
            .map_err(|e| DataFusionError::ResourcesExhausted(e.to_string()))
    }

    fn reserved(&self) -> usize {
        self.held().size()
    }

    fn memory_limit(&self) -> MemoryLimit {
        match (self.limit, self.budget.limit()) {
            (Some(a), Some(b)) => MemoryLimit::Finite(a.min(b)),
            (Some(l), None) | (None, Some(l)) => MemoryLimit::Finite(l),
            (None, None) => MemoryLimit::Infinite,
        }
    }
}
