//! One memory budget for a whole server, shared by every session, with
//! admission of heavy analyses.
//!
//! What is counted, in one number ([`Budget::used`]):
//! - the shared dataset cache of the [`Engine`](crate::Engine) (tasks,
//!   stages, host rows, and the window rows of a small store), estimated
//!   from its rows when it is loaded and held until it is replaced;
//! - the working memory of each analysis, estimated from the window rows it
//!   reads before it runs ([`Snapshot::working_estimate`]) and held while it
//!   runs;
//! - what a read for named victims holds and the working memory of its
//!   analysis (`focus.rs`): admitted as a light query with an estimate
//!   from the query index before it reads, again before it reads the slot
//!   holders' time ([`Reservation::grow_to`]), then counted as it reads, until
//!   the analysis and its result are done ([`Snapshot::admitted`]);
//! - every DataFusion reservation of every session (sorts, joins,
//!   aggregates, and the results of culprit's table functions until they
//!   are sent): the SQL layer gives each session a pool drawn from this
//!   budget;
//! - each merge of the server's background compaction, while it runs
//!   ([`Budget::try_reserve_heavy`]; `culprit_store::MemoryGate`).
//!
//! Admission: a heavy analysis (one over every victim, or one that loads
//! every window row of a large store) first takes one of
//! [`BudgetOptions::heavy_slots`] slots, waiting in a queue (bounded by
//! the connections, or by [`BudgetOptions::heavy_queue`]); with a slot, it waits until its
//! estimate fits under the budget less the share kept for light queries
//! ([`LIGHT_SHARE`]). A full queue, an estimate larger than the budget, or
//! a wait for memory longer than [`MEMORY_WAIT`] fail the query with
//! [`Error::OutOfMemory`] (SQLSTATE 53200). Light queries (one victim)
//! take no slot and may use the whole budget: they wait only for memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use culprit_core::Table;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::engine::Snapshot;
use crate::error::Error;

/// The share of the budget heavy analyses never take: it is left to light
/// queries (one quarter).
pub const LIGHT_SHARE: f64 = 0.25;
/// How long an admitted heavy analysis waits for its memory before failing.
pub const MEMORY_WAIT: Duration = Duration::from_secs(120);
/// Bytes of working memory per window row of an analysis over every victim
/// (its level-4 nodes, the rows of the host buckets it sweeps, the
/// victims' task bookkeeping), measured on generated stores with
/// `victim_stages=all` and rounded up (docs/operations.md).
pub const HEAVY_BYTES_PER_WINDOW_ROW: usize = 96;
/// The same on the coordinator of a cluster whose workers sweep the host
/// buckets (`shards.rs`): its level-4 nodes as they come back and the
/// result, not the buckets' rows (docs/operations.md, "Running a
/// cluster").
pub const SHARDED_BYTES_PER_WINDOW_ROW: usize = 64;
/// Bytes per window row of an analysis of one victim (the sweeps of the
/// default `slots=transitive` still explain every stage).
pub const LIGHT_BYTES_PER_WINDOW_ROW: usize = 96;
/// Bytes per row of the dataset cache: a window row in memory, a task, a
/// stage, a host row.
pub const CACHE_BYTES_PER_WINDOW_ROW: usize = 96;
pub const CACHE_BYTES_PER_TASK: usize = 160;
pub const CACHE_BYTES_PER_HOST_ROW: usize = 48;

/// The working memory an analysis needs, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// No sweep over the window rows (a critical path, a stage's RATP, the
    /// catalog): its result only.
    Small,
    /// The blame sweep for some victims.
    OneVictim,
    /// The blame sweep over every victim of the window: a heavy analysis.
    AllVictims,
}

impl Cost {
    /// The cost of a call naming its victims (`Some`) or not (`None`).
    pub fn victims(all: bool) -> Cost {
        if all {
            Cost::AllVictims
        } else {
            Cost::OneVictim
        }
    }
}

/// How the budget is set.
#[derive(Debug, Clone)]
pub struct BudgetOptions {
    /// Bytes for the whole server; `None`: unlimited (nothing is refused,
    /// heavy analyses still take slots).
    pub limit: Option<usize>,
    /// Heavy analyses running at once.
    pub heavy_slots: usize,
    /// Heavy analyses waiting for a slot, at most; beyond, 53200. `None`
    /// (the default): no bound of its own, since each connection runs one
    /// statement at a time and the server's connection limit bounds the
    /// queue; a server at its connection limit then only waits, as a
    /// database under load should.
    pub heavy_queue: Option<usize>,
    /// Bytes of the read cache of one-victim analyses (decoded row groups
    /// and footers of the window and task files, `culprit_store::ReadCache`),
    /// held in the budget for the life of the server; `None`: the default
    /// ([`default_read_cache`]), `Some(0)`: none.
    pub read_cache: Option<usize>,
}

impl Default for BudgetOptions {
    fn default() -> Self {
        BudgetOptions {
            limit: None,
            heavy_slots: default_heavy_slots(),
            heavy_queue: None,
            read_cache: None,
        }
    }
}

/// The largest default read cache: 512 MiB.
pub const DEFAULT_READ_CACHE_MAX: usize = 512 << 20;

/// The read cache by default: an eighth of the budget, at most
/// [`DEFAULT_READ_CACHE_MAX`] (which an unlimited budget gets).
pub fn default_read_cache(limit: Option<usize>) -> usize {
    limit.map_or(DEFAULT_READ_CACHE_MAX, |l| {
        (l / 8).min(DEFAULT_READ_CACHE_MAX)
    })
}

/// Heavy analyses at once by default: the cores (each analysis sweeps on
/// every core, so more at once would only hold more memory).
pub fn default_heavy_slots() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The memory budget of a server: cheap to clone, shared.
#[derive(Debug, Clone)]
pub struct Budget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: Option<usize>,
    used: Mutex<usize>,
    peak: AtomicUsize,
    freed: Notify,
    slots: Arc<Semaphore>,
    heavy_slots: usize,
    queue: Option<usize>,
    waiting: AtomicUsize,
    read_cache: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(BudgetOptions::default())
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.0} MiB", bytes as f64 / (1 << 20) as f64)
}

impl Budget {
    pub fn new(opts: BudgetOptions) -> Budget {
        let heavy_slots = opts.heavy_slots.max(1);
        Budget {
            inner: Arc::new(Inner {
                limit: opts.limit,
                used: Mutex::new(0),
                peak: AtomicUsize::new(0),
                freed: Notify::new(),
                slots: Arc::new(Semaphore::new(heavy_slots)),
                heavy_slots,
                queue: opts.heavy_queue,
                waiting: AtomicUsize::new(0),
                read_cache: opts
                    .read_cache
                    .unwrap_or_else(|| default_read_cache(opts.limit)),
            }),
        }
    }

    /// The limit in bytes (`None`: unlimited).
    pub fn limit(&self) -> Option<usize> {
        self.inner.limit
    }

    /// Bytes of the read cache ([`BudgetOptions::read_cache`]).
    pub fn read_cache(&self) -> usize {
        self.inner.read_cache
    }

    /// Bytes reserved now.
    pub fn used(&self) -> usize {
        self.inner.used.lock().map_or(0, |u| *u)
    }

    /// The most bytes ever reserved at once.
    pub fn peak(&self) -> usize {
        self.inner.peak.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` if they fit under `cap` (the limit, or the limit
    /// less the light share); returns the bytes used after.
    fn take(&self, bytes: usize, cap: Option<usize>) -> Result<usize, usize> {
        let Ok(mut used) = self.inner.used.lock() else {
            return Err(usize::MAX);
        };
        let after = used.saturating_add(bytes);
        if let Some(cap) = cap {
            if after > cap {
                return Err(*used);
            }
        }
        *used = after;
        self.inner.peak.fetch_max(after, Ordering::Relaxed);
        Ok(after)
    }

    fn give(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        if let Ok(mut used) = self.inner.used.lock() {
            *used = used.saturating_sub(bytes);
        }
        self.inner.freed.notify_waiters();
    }

    fn refusal(&self, what: &str, bytes: usize, used: usize) -> Error {
        Error::OutOfMemory(format!(
            "{what} needs {} more of the memory budget ({} of {} in use); \
             try again later, or raise --memory-budget-mb",
            mib(bytes),
            mib(used),
            mib(self.inner.limit.unwrap_or(usize::MAX))
        ))
    }

    /// Reserves `bytes` now, or fails with [`Error::OutOfMemory`] when they
    /// do not fit in the budget.
    pub fn try_reserve(&self, what: &str, bytes: usize) -> Result<Reservation, Error> {
        self.try_reserve_under(what, bytes, self.inner.limit)
    }

    fn try_reserve_under(
        &self,
        what: &str,
        bytes: usize,
        cap: Option<usize>,
    ) -> Result<Reservation, Error> {
        match self.take(bytes, cap) {
            Ok(_) => Ok(Reservation {
                budget: self.clone(),
                bytes,
            }),
            Err(used) => Err(self.refusal(what, bytes, used)),
        }
    }

    /// Reserves `bytes` now if they fit under the budget less the light
    /// queries' share ([`LIGHT_SHARE`]), as a heavy analysis may hold, or
    /// fails with [`Error::OutOfMemory`]: for work that can wait for a
    /// later try (the background compaction).
    pub fn try_reserve_heavy(&self, what: &str, bytes: usize) -> Result<Reservation, Error> {
        self.try_reserve_under(what, bytes, self.heavy_cap())
    }

    /// Counts `bytes` that are already taken (the dataset cache once it is
    /// loaded), even past the limit: what runs next waits for them.
    pub fn reserve(&self, bytes: usize) -> Reservation {
        let _ = self.take(bytes, None);
        Reservation {
            budget: self.clone(),
            bytes,
        }
    }

    /// The most heavy analyses may hold: the limit less the light share.
    pub fn heavy_cap(&self) -> Option<usize> {
        self.inner
            .limit
            .map(|l| (l as f64 * (1.0 - LIGHT_SHARE)) as usize)
    }

    /// Admits an analysis needing about `estimate` bytes of working
    /// memory. A `heavy` one first takes a slot (or a place in the queue)
    /// and may hold at most the budget less the light share; a light one
    /// may hold all of it. Both wait for their memory up to [`MEMORY_WAIT`].
    pub async fn admit(
        &self,
        what: &str,
        estimate: usize,
        heavy: bool,
    ) -> Result<Admission, Error> {
        let inner = &self.inner;
        let permit = if !heavy {
            None
        } else {
            Some(match inner.slots.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    let before = inner.waiting.fetch_add(1, Ordering::SeqCst);
                    if let Some(queue) = inner.queue.filter(|&q| before >= q) {
                        inner.waiting.fetch_sub(1, Ordering::SeqCst);
                        return Err(Error::OutOfMemory(format!(
                            "{what}: the server is busy: {} heavy analyses are running and \
                             {queue} wait (--heavy-analyses, --heavy-queue); try again later",
                            inner.heavy_slots
                        )));
                    }
                    // Leaves the queue however the wait ends (a cancelled
                    // statement drops this future).
                    let _queued = Queued(&inner.waiting);
                    inner
                        .slots
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|e| Error::Internal(format!("admission closed: {e}")))?
                }
            })
        };
        let cap = if heavy { self.heavy_cap() } else { inner.limit };
        self.fits(what, estimate, cap, heavy)?;
        self.wait_take(what, estimate, cap).await?;
        Ok(Admission {
            _permit: permit,
            reservation: Reservation {
                budget: self.clone(),
                bytes: estimate,
            },
        })
    }

    /// Refuses at once `bytes` more than `cap`, what one query (or one
    /// heavy analysis) may hold of the budget.
    fn fits(&self, what: &str, bytes: usize, cap: Option<usize>, heavy: bool) -> Result<(), Error> {
        match cap {
            Some(cap) if bytes > cap => Err(Error::OutOfMemory(format!(
                "{what} needs about {}, more than {} of the memory budget of {} \
                 may hold; raise --memory-budget-mb",
                mib(bytes),
                if heavy { "a heavy analysis" } else { "a query" },
                mib(self.inner.limit.unwrap_or(usize::MAX))
            ))),
            _ => Ok(()),
        }
    }

    /// Takes `bytes` of the budget under `cap`, waiting up to
    /// [`MEMORY_WAIT`] for others to give back enough.
    async fn wait_take(&self, what: &str, bytes: usize, cap: Option<usize>) -> Result<(), Error> {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + MEMORY_WAIT;
        loop {
            let freed = inner.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.take(bytes, cap) {
                Ok(_) => return Ok(()),
                Err(used) => {
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        return Err(Error::OutOfMemory(format!(
                            "{what} waited {} s for {} of the memory budget ({} of {} \
                             in use); try again later, or raise --memory-budget-mb",
                            MEMORY_WAIT.as_secs(),
                            mib(bytes),
                            mib(used),
                            mib(inner.limit.unwrap_or(usize::MAX))
                        )));
                    }
                }
            }
        }
    }
}

/// Runs `work` on a blocking thread of the current runtime, holding `held`
/// (an [`Admission`], a [`Reservation`]: what counts the work's memory in
/// the budget) until the work ends, and gives both back.
///
/// A statement cancelled or timed out drops its wait, not the work: a
/// blocking thread runs on to its end. Were `held` kept by the waiting
/// future, the budget would take it back at the cancel and admit new work
/// beside memory still in use (so a client cancelling and retrying heavy
/// analyses could pile up sweeps past the budget). Every analysis goes
/// through here: the SQL table functions (at once, or by groups of
/// victims), a worker's sweeps of its host buckets, the slot holders'
/// shares of a focused read. (The background compaction's merges hold
/// their memory in the compaction's own future, which only the end of
/// `culprit serve` or of `ingest --watch` drops.)
pub async fn run_held<H, T>(
    held: H,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<(T, H), tokio::task::JoinError>
where
    H: Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let out = work();
        (out, held)
    })
    .await
}

struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Bytes counted in the budget until dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Budget,
    bytes: usize,
}

impl Reservation {
    pub fn size(&self) -> usize {
        self.bytes
    }

    /// Grows by `bytes` if they fit in the budget.
    pub fn try_grow(&mut self, what: &str, bytes: usize) -> Result<(), Error> {
        match self.budget.take(bytes, self.budget.inner.limit) {
            Ok(_) => {
                self.bytes += bytes;
                Ok(())
            }
            Err(used) => Err(self.budget.refusal(what, bytes, used)),
        }
    }

    /// Grows to `bytes` (if it holds less), as [`Budget::admit`] admits a
    /// light query: failing at once when they are more than the whole
    /// budget, taking them at once when they fit, else giving back what it
    /// holds and waiting up to [`MEMORY_WAIT`] for all of them (so that
    /// reads waiting to grow never hold the budget from one another; what
    /// the caller read so far is uncounted while it waits).
    pub async fn grow_to(&mut self, what: &str, bytes: usize) -> Result<(), Error> {
        let Some(more) = bytes.checked_sub(self.bytes).filter(|&m| m > 0) else {
            return Ok(());
        };
        let limit = self.budget.inner.limit;
        self.budget.fits(what, bytes, limit, false)?;
        if self.budget.take(more, limit).is_ok() {
            self.bytes += more;
            return Ok(());
        }
        let held = std::mem::take(&mut self.bytes);
        self.budget.give(held);
        self.budget.wait_take(what, bytes, limit).await?;
        self.bytes = bytes;
        Ok(())
    }

    /// Grows by `bytes` even past the limit.
    pub fn grow(&mut self, bytes: usize) {
        let _ = self.budget.take(bytes, None);
        self.bytes += bytes;
    }

    pub fn shrink(&mut self, bytes: usize) {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        self.budget.give(bytes);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give(self.bytes);
    }
}

/// A heavy analysis admitted: its slot and its working memory, both given
/// back when dropped.
#[derive(Debug)]
pub struct Admission {
    _permit: Option<OwnedSemaphorePermit>,
    pub reservation: Reservation,
}

impl Snapshot {
    /// Window rows of the store at this version.
    fn window_rows(&self) -> usize {
        match self.buckets {
            // The rows in memory: the whole store's, or only those a focused
            // snapshot read for its victims (`focus.rs`).
            None => self.ds.windows.iter().map(|w| w.len()).sum(),
            Some(_) => self.source.1.rows_of(Table::TaskWindows) as usize,
        }
    }

    /// Whether analyses read the window rows from the store (a large store)
    /// rather than from the cache.
    pub fn streamed(&self) -> bool {
        self.buckets.is_some()
    }

    /// The working memory of an analysis of `cost` over this snapshot,
    /// estimated from the store's window rows (before it runs). `windows`:
    /// it also loads every window row of a large store into memory for
    /// itself.
    pub fn working_estimate(&self, cost: Cost, windows: bool) -> usize {
        let rows = self.window_rows();
        let per_row = match cost {
            Cost::Small => 0,
            Cost::OneVictim => LIGHT_BYTES_PER_WINDOW_ROW,
            Cost::AllVictims if self.sharded().is_some() => SHARDED_BYTES_PER_WINDOW_ROW,
            Cost::AllVictims => HEAVY_BYTES_PER_WINDOW_ROW,
        };
        let load = if windows && self.streamed() {
            rows.saturating_mul(CACHE_BYTES_PER_WINDOW_ROW)
        } else {
            0
        };
        rows.saturating_mul(per_row).saturating_add(load)
    }
}

/// The memory of the dataset cache of `manifest`'s rows (window rows only
/// when they are kept in memory).
pub(crate) fn cache_estimate(manifest: &culprit_store::Manifest, windows: bool) -> usize {
    let rows = |t| manifest.rows_of(t) as usize;
    let mut bytes = (rows(Table::Tasks) + rows(Table::Stages) + rows(Table::Queries))
        .saturating_mul(CACHE_BYTES_PER_TASK)
        .saturating_add(rows(Table::HostWindows).saturating_mul(CACHE_BYTES_PER_HOST_ROW));
    if windows {
        bytes = bytes
            .saturating_add(rows(Table::TaskWindows).saturating_mul(CACHE_BYTES_PER_WINDOW_ROW));
    }
    bytes
}

/// The memory of this machine for the default budget: the smaller of
/// `MemTotal` (/proc/meminfo) and the cgroup's limit (`memory.max`, v2, or
/// `memory.limit_in_bytes`, v1); `None` where neither can be read.
pub fn machine_memory() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .map(|kb| kb.saturating_mul(1024))
    });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|s| s.trim().parse::<usize>().ok())
    // v1 says "no limit" with a huge number.
    .filter(|&b| b < (1usize << 60));
    match (meminfo, cgroup) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

/// The default budget: half of [`machine_memory`], or 4 GiB where it
/// cannot be read.
pub fn default_limit() -> usize {
    machine_memory().map_or(4 << 30, |m| m / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a computation holds stays counted until it ends, however its
    /// caller's wait ends; it comes back with the output when the caller
    /// waits to the end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_holds_its_memory_past_a_cancelled_wait() {
        use std::sync::mpsc;
        let b = Budget::new(BudgetOptions {
            limit: Some(1000),
            heavy_slots: 1,
            heavy_queue: None,
            read_cache: Some(0),
        });
        let (started, on_start) = mpsc::channel();
        let (let_go, go) = mpsc::channel::<()>();
        let held = b.try_reserve("work", 600).unwrap();
        let wait = tokio::spawn(run_held(held, move || {
            started.send(()).unwrap();
            let _ = go.recv_timeout(Duration::from_secs(60));
            7
        }));
        let on_start = tokio::task::spawn_blocking(move || on_start.recv().is_ok());
        assert!(on_start.await.unwrap());
        wait.abort();
        assert!(wait.await.unwrap_err().is_cancelled());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(b.used(), 600, "given back while the work runs");
        assert!(b.try_reserve("more", 600).is_err());
        let_go.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while b.used() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(b.used(), 0, "never given back");
        // Waited to the end: the output and what was held come back.
        let (out, held) = run_held(b.try_reserve("again", 300).unwrap(), || 7)
            .await
            .unwrap();
        assert_eq!((out, held.size(), b.used()), (7, 300, 300));
    }

    #[tokio::test]
    async fn reservations_count_and_refuse() {
        let b = Budget::new(BudgetOptions {
            limit: Some(1000),
            heavy_slots: 1,
            heavy_queue: Some(1),
            read_cache: None,
        });
        let r = b.try_reserve("a", 600).unwrap();
        assert_eq!(b.used(), 600);
        assert!(matches!(
            b.try_reserve("b", 500),
            Err(Error::OutOfMemory(_))
        ));
        drop(r);
        assert_eq!(b.used(), 0);
        // Work that can wait (the background compaction) takes what a
        // heavy analysis may: 750 of 1000.
        assert!(matches!(
            b.try_reserve_heavy("c", 800),
            Err(Error::OutOfMemory(_))
        ));
        let c = b.try_reserve_heavy("c", 700).unwrap();
        assert!(b.try_reserve_heavy("c", 100).is_err());
        drop(c);
        assert_eq!(b.used(), 0);
        // Heavy analyses leave the light share: 750 of 1000.
        assert!(matches!(
            b.admit("h", 800, true).await,
            Err(Error::OutOfMemory(_))
        ));
        let a = b.admit("h", 700, true).await.unwrap();
        assert_eq!(b.used(), 700);
        // One slot: the next waits in the queue (of 1), the one after fails.
        let b2 = b.clone();
        let waiting = tokio::spawn(async move { b2.admit("h2", 10, true).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(
            b.admit("h3", 10, true).await,
            Err(Error::OutOfMemory(_))
        ));
        // A light query takes no slot: it has the rest of the budget.
        let light = b.admit("l", 250, false).await.unwrap();
        drop(light);
        drop(a);
        waiting.await.unwrap().unwrap();
        assert_eq!(b.used(), 0);
        assert_eq!(b.peak(), 950);
    }

    #[test]
    fn machine_memory_is_read() {
        // Linux CI: /proc/meminfo is there.
        assert!(machine_memory().is_some_and(|m| m > (64 << 20)));
    }
}
