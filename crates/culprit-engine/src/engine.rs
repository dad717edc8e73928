//! Loading the method's dataset from the store, once per manifest version,
//! shared by every analysis until new data is committed.

use std::sync::Arc;

use culprit_core::method::Dataset;
use culprit_core::Table;
use culprit_store::layout::HOST_BUCKETS;
use culprit_store::{Manifest, ReadCache, Store};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Mutex;

use crate::buckets::StoreBuckets;
use crate::budget::{self, Budget, Reservation};
use crate::error::Error;
use crate::shards::Sweeper;

/// Window rows kept in memory with the dataset, at most (about 48 bytes
/// each); above, analyses stream them from the store.
pub const WINDOW_CACHE_ROWS: u64 = 4 << 20;

/// Loads and caches the dataset of a store's newest manifest.
#[derive(Debug)]
pub struct Engine {
    store: Store,
    window_cache_rows: u64,
    cache: Mutex<Option<(u64, Snapshot)>>,
    /// The query index of a manifest version (`focus.rs`).
    pub(crate) spans: Mutex<Option<(u64, Option<Arc<crate::focus::Spans>>)>>,
    /// The stages and queries of a manifest version (`focus.rs`).
    pub(crate) whole: Mutex<Option<(u64, Arc<crate::focus::WholeTables>)>>,
    /// The server's memory budget (`budget.rs`), and the cache's share of it.
    budget: Budget,
    cache_held: std::sync::Mutex<Option<Reservation>>,
    /// The footers and row groups that one-victim analyses decoded
    /// (`focus.rs`), with its capacity held in the budget; a server's
    /// engine has one ([`Engine::with_budget`]).
    read_cache: Option<(Arc<ReadCache>, Reservation)>,
    /// A cluster's workers, which sweep the host buckets of a large
    /// store's analyses (`shards.rs`); none in a single process.
    sweeper: Option<Arc<dyn Sweeper>>,
    /// Slot holders' shares computed by focused analyses (`shares.rs`),
    /// with what they may take held in the budget (a server's engine).
    pub(crate) shares: Arc<crate::shares::SharesCache>,
    _shares_held: Option<Reservation>,
    /// The holders' shares stored with the data found last
    /// (`stored_shares.rs`).
    pub(crate) located: crate::stored_shares::Located,
}

/// The dataset of one manifest version, with its window rows in memory or
/// to be read from the store bucket by bucket. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub ds: Arc<Dataset>,
    pub(crate) buckets: Option<Arc<StoreBuckets>>,
    /// The store and the manifest the dataset was read from, for the
    /// analyses that read a table the dataset does not hold (record
    /// lineage, task attributes) at this same version.
    pub(crate) source: Arc<(Store, Arc<Manifest>)>,
    /// The engine's [`Sweeper`], on a snapshot whose window rows are in
    /// the store (`shards.rs`).
    pub(crate) sweeper: Option<Arc<dyn Sweeper>>,
    /// The memory budget's count of this snapshot's own dataset and of an
    /// analysis's working memory over it (a read for named victims,
    /// `focus.rs`), given back when the last holder of it is dropped
    /// ([`Snapshot::admitted`]); `None` for the engine's cached snapshot
    /// (counted by the engine) and for a group's (counted by its call's
    /// admission).
    pub(crate) held: Option<Arc<crate::budget::Reservation>>,
}

impl Snapshot {
    /// This snapshot, counted in the budget by `held` (its dataset and an
    /// analysis's working memory, [`crate::focus`]) until its last clone
    /// is dropped; shrunk to that count when the estimate was more.
    pub(crate) fn holding(self, mut held: crate::budget::Reservation) -> Snapshot {
        let now = crate::focus::read_bytes(&self.ds);
        if held.size() > now {
            held.shrink(held.size() - now);
        }
        Snapshot {
            held: Some(Arc::new(held)),
            ..self
        }
    }

    /// The memory a read for named victims was admitted with and holds
    /// (its dataset and an analysis's working memory over it), if this is
    /// such a read: whoever keeps the dataset past the snapshot keeps it.
    pub fn admitted(&self) -> Option<Arc<crate::budget::Reservation>> {
        self.held.clone()
    }
}

impl Engine {
    pub fn new(store: Store) -> Self {
        Self::with_window_cache(store, WINDOW_CACHE_ROWS)
    }

    /// An engine that keeps at most `rows` window rows in memory (0: always
    /// read them from the store).
    pub fn with_window_cache(store: Store, rows: u64) -> Self {
        Engine {
            store,
            window_cache_rows: rows,
            cache: Mutex::new(None),
            spans: Mutex::new(None),
            whole: Mutex::new(None),
            budget: Budget::default(),
            cache_held: std::sync::Mutex::new(None),
            read_cache: None,
            sweeper: None,
            shares: Default::default(),
            _shares_held: None,
            located: Default::default(),
        }
    }

    /// The same engine keeping at most `rows` window rows in memory (0:
    /// always read them from the store).
    pub fn with_window_cache_rows(mut self, rows: u64) -> Self {
        self.window_cache_rows = rows;
        self
    }

    /// The same engine, its analyses of a large store swept by `sweeper`
    /// (a cluster's workers) host bucket by host bucket.
    pub fn with_sweeper(mut self, sweeper: Arc<dyn Sweeper>) -> Self {
        self.sweeper = Some(sweeper);
        self
    }

    /// Whether analyses of a large store are swept by a cluster's workers
    /// now (two workers up or more).
    pub fn sweeping(&self) -> bool {
        self.sweeper.as_ref().is_some_and(|s| s.workers() >= 2)
    }

    /// A worker's snapshot of store version `version`, its window rows left
    /// in the store whatever its size (a share reads its buckets), cached
    /// per version as [`Engine::snapshot`] caches the newest.
    pub async fn snapshot_at(&self, version: u64) -> Result<Snapshot, Error> {
        let mut cache = self.cache.lock().await;
        if let Some((v, snapshot)) = cache.as_ref() {
            if *v == version && snapshot.buckets.is_some() {
                return Ok(snapshot.clone());
            }
        }
        let manifest = self.store.manifest_at(version).await?;
        let snapshot = self.load(manifest, false).await?;
        *cache = Some((version, snapshot.clone()));
        Ok(snapshot)
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Window rows kept in memory with the dataset, at most.
    pub(crate) fn window_cache_rows(&self) -> u64 {
        self.window_cache_rows
    }

    /// An engine counting its caches and its analyses in `budget`, with
    /// the read cache the budget sets ([`Budget::read_cache`]).
    pub fn with_budget(store: Store, budget: Budget) -> Self {
        let bytes = budget.read_cache();
        let read_cache = (bytes > 0).then(|| (ReadCache::new(bytes), budget.reserve(bytes)));
        // The holders' shares of a server's engine (with a read cache):
        // as much as the read cache at most.
        let shares = crate::shares::BYTES.min(bytes);
        let shares_held = (shares > 0).then(|| budget.reserve(shares));
        Engine {
            budget,
            read_cache,
            shares: Arc::new(crate::shares::SharesCache::new(shares)),
            _shares_held: shares_held,
            ..Self::new(store)
        }
    }

    /// The store's newest version.
    pub async fn manifest(&self) -> Result<Arc<culprit_store::Manifest>, Error> {
        Ok(self.store.manifest().await?)
    }

    /// How many slot holder stages' shares the engine keeps for the next
    /// focused analyses (`shares.rs`).
    pub fn holder_shares_kept(&self) -> usize {
        self.shares.len()
    }

    /// The read cache of one-victim analyses, if the engine has one.
    pub fn read_cache(&self) -> Option<&Arc<ReadCache>> {
        self.read_cache.as_ref().map(|(c, _)| c)
    }

    /// The memory budget the engine's cache and analyses count in.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The dataset of the newest manifest (cached per version). With
    /// `windows`, its window rows are in memory even for a large store
    /// (loaded for this call only, not cached).
    pub async fn snapshot(&self, windows: bool) -> Result<Snapshot, Error> {
        let manifest = self.store.manifest().await?;
        let mut cache = self.cache.lock().await;
        let snapshot = match cache.as_ref() {
            Some((v, snapshot)) if *v == manifest.version => snapshot.clone(),
            _ => {
                let whole = manifest.rows_of(Table::TaskWindows) <= self.window_cache_rows;
                let snapshot = self.load(manifest.clone(), whole).await?;
                *cache = Some((manifest.version, snapshot.clone()));
                snapshot
            }
        };
        drop(cache);
        if windows && snapshot.buckets.is_some() {
            return Ok(Snapshot {
                ds: Arc::new(self.read(&manifest, true).await?),
                buckets: None,
                source: snapshot.source.clone(),
                sweeper: None,
                held: None,
            });
        }
        Ok(snapshot)
    }

    /// The snapshot of `manifest`: its window rows in memory if `whole`,
    /// else read from the store bucket by bucket (by the engine's
    /// [`Sweeper`] when it has one); counted in the budget as the cache.
    async fn load(&self, manifest: Arc<Manifest>, whole: bool) -> Result<Snapshot, Error> {
        let ds = Arc::new(self.read(&manifest, whole).await?);
        let buckets = (!whole).then(|| {
            Arc::new(StoreBuckets::new(
                self.store.clone(),
                &manifest,
                &ds,
                HOST_BUCKETS as usize,
            ))
        });
        self.hold_cache(&manifest, whole);
        Ok(Snapshot {
            sweeper: buckets.as_ref().and(self.sweeper.clone()),
            ds,
            buckets,
            source: Arc::new((self.store.clone(), manifest)),
            held: None,
        })
    }

    /// Counts the cache of `manifest` in the budget, in place of the last.
    fn hold_cache(&self, manifest: &Manifest, windows: bool) {
        let held = self
            .budget
            .reserve(budget::cache_estimate(manifest, windows));
        if let Ok(mut h) = self.cache_held.lock() {
            *h = Some(held);
        }
    }

    /// Reads the tables of `manifest`; the window rows only if `windows`.
    async fn read(&self, manifest: &Manifest, windows: bool) -> Result<Dataset, Error> {
        let started = std::time::Instant::now();
        let mut ds = Dataset::new();
        // Host rows decode on another worker meanwhile (they need no tasks).
        let host_rows = {
            let (store, manifest) = (self.store.clone(), manifest.clone());
            tokio::spawn(async move { store.read_table(&manifest, Table::HostWindows, None).await })
        };
        // Tasks first: window rows name them. Batches are folded in as they
        // stream, so memory holds the dataset plus a few batches.
        ds.reserve_tasks(manifest.rows_of(Table::Tasks) as usize);
        let mut tasks = self.store.scan_table(manifest, Table::Tasks, None);
        while let Some(b) = tasks.try_next().await? {
            ds.add_tasks(&b);
        }
        let mut stages = self.store.scan_table(manifest, Table::Stages, None);
        while let Some(b) = stages.try_next().await? {
            ds.add_stages(&b);
        }
        // A query's application and pool name its slot pool.
        let mut queries = self.store.scan_table(
            manifest,
            Table::Queries,
            Some(&["query_id", "app_id", "pool"]),
        );
        while let Some(b) = queries.try_next().await? {
            ds.add_queries(&b);
        }
        if windows {
            ds.reserve_windows(manifest.rows_of(Table::TaskWindows) as usize);
            // The biggest table: decode on another worker while this one
            // folds batches in, so both cores work.
            let mut rows = self.store.scan_table(manifest, Table::TaskWindows, None);
            let (tx, mut rx) = tokio::sync::mpsc::channel(4);
            let decoder = tokio::spawn(async move {
                while let Some(b) = rows.next().await {
                    let failed = b.is_err();
                    if tx.send(b).await.is_err() || failed {
                        break;
                    }
                }
            });
            while let Some(b) = rx.recv().await {
                ds.add_task_windows(&b?);
            }
            decoder
                .await
                .map_err(|e| Error::Internal(format!("loading task_windows: {e}")))?;
        }
        let host_rows = host_rows
            .await
            .map_err(|e| Error::Internal(format!("loading host_windows: {e}")))??;
        for b in &host_rows {
            ds.add_host_windows(b);
        }
        log::info!(
            "loaded store version {} for the method in {:.2} s ({} tasks, window rows {})",
            manifest.version,
            started.elapsed().as_secs_f64(),
            ds.tasks.len(),
            if windows {
                "in memory"
            } else {
                "streamed per analysis"
            }
        );
        Ok(ds)
    }
}
