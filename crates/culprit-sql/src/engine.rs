//! The method's data, loaded from the store once per manifest version and
//! shared by every table function call until new data is committed.
//!
//! Small stores are kept whole in memory. Above [`Engine::window_cache_rows`]
//! window rows only the tasks, stages and host rows are kept; each analysis
//! then streams `task_windows` from the store one host bucket at a time
//! (`culprit_core::layout`), sweeping a bucket's hosts as soon as it is read,
//! on every core. Memory then holds the rows of a few hosts, never the table.

use std::sync::{Arc, Mutex as SyncMutex};

use culprit_core::layout::{host_bucket, HOST_BUCKETS};
use culprit_core::method::model::{Interner, N_RES};
use culprit_core::method::{
    self, Attribution, BlameOptions, Dataset, Entry, Level4, Micros, Part, Victims,
};
use culprit_core::{MethodError, Table};
use culprit_store::{DataFile, Manifest, Store};
use datafusion::common::{DataFusionError, Result};
use futures::{StreamExt, TryStreamExt};
use rustc_hash::FxHashMap;
use tokio::sync::Mutex;

/// Window rows kept in memory with the dataset, at most (about 48 bytes
/// each); above, analyses stream them from the store.
pub const WINDOW_CACHE_ROWS: u64 = 4 << 20;

/// The columns of `task_windows` the method reads.
const WINDOW_COLUMNS: &[&str] = &[
    "task_id",
    "window_start",
    "window_end",
    "resource",
    "detail",
    "blocked",
    "acquired",
    "gc",
];

#[derive(Debug)]
pub struct Engine {
    store: Store,
    window_cache_rows: u64,
    cache: Mutex<Option<(u64, Loaded)>>,
}

/// The dataset of one manifest version, with its window rows in memory or
/// to be streamed from the store.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub ds: Arc<Dataset>,
    stream: Option<Arc<Streamed>>,
}

/// How to read a store's window rows bucket by bucket.
#[derive(Debug)]
struct Streamed {
    store: Store,
    manifest: Manifest,
    tasks_by_host: Vec<Vec<u32>>,
    /// Per host bucket, its hosts.
    bucket_hosts: Vec<Vec<u32>>,
    /// Per host, its bucket.
    host_bucket: Vec<usize>,
}

fn store_err(e: culprit_store::StoreError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// A method error (bad argument) or a failure reading the store.
#[derive(Debug)]
pub enum BlameError {
    Method(MethodError),
    Other(DataFusionError),
}

impl From<MethodError> for BlameError {
    fn from(e: MethodError) -> Self {
        BlameError::Method(e)
    }
}

impl BlameError {
    /// As a DataFusion error naming the table function.
    pub fn named(self, function: &str) -> DataFusionError {
        match self {
            BlameError::Method(e) => crate::udf::method_err(function, e),
            BlameError::Other(e) => e,
        }
    }
}

impl Engine {
    pub fn new(store: Store) -> Self {
        Self::with_window_cache(store, WINDOW_CACHE_ROWS)
    }

    /// An engine that keeps at most `rows` window rows in memory (0: always
    /// stream them from the store).
    pub fn with_window_cache(store: Store, rows: u64) -> Self {
        Engine {
            store,
            window_cache_rows: rows,
            cache: Mutex::new(None),
        }
    }

    /// The dataset of the newest manifest (cached per version). With
    /// `windows`, its window rows are in memory even for a large store
    /// (loaded for this call only, not cached).
    pub async fn load(&self, windows: bool) -> Result<Loaded> {
        let manifest = self.store.manifest().await.map_err(store_err)?;
        let mut cache = self.cache.lock().await;
        let loaded = match cache.as_ref() {
            Some((v, loaded)) if *v == manifest.version => loaded.clone(),
            _ => {
                let whole = manifest.rows_of(Table::TaskWindows) <= self.window_cache_rows;
                let ds = Arc::new(self.read(&manifest, whole).await?);
                let stream = (!whole).then(|| {
                    let mut bucket_hosts = vec![Vec::new(); HOST_BUCKETS as usize];
                    let host_bucket: Vec<usize> = (0..ds.hosts.len() as u32)
                        .map(|h| host_bucket(ds.hosts.name(h)) as usize)
                        .collect();
                    for (h, b) in host_bucket.iter().enumerate() {
                        bucket_hosts[*b].push(h as u32);
                    }
                    Arc::new(Streamed {
                        store: self.store.clone(),
                        manifest: manifest.clone(),
                        tasks_by_host: ds.tasks_by_host(),
                        bucket_hosts,
                        host_bucket,
                    })
                });
                let loaded = Loaded { ds, stream };
                *cache = Some((manifest.version, loaded.clone()));
                loaded
            }
        };
        drop(cache);
        if windows && loaded.stream.is_some() {
            return Ok(Loaded {
                ds: Arc::new(self.read(&manifest, true).await?),
                stream: None,
            });
        }
        Ok(loaded)
    }

    /// Reads the tables of `manifest`; the window rows only if `windows`.
    async fn read(&self, manifest: &Manifest, windows: bool) -> Result<Dataset> {
        let started = std::time::Instant::now();
        let mut ds = Dataset::new();
        // Host rows decode on another worker meanwhile (they need no tasks).
        let host_rows = {
            let (store, manifest) = (self.store.clone(), manifest.clone());
            tokio::spawn(async move { store.read_table(&manifest, Table::HostWindows, None).await })
        };
        // Tasks first: window rows name them. Batches are folded in as they
        // stream, so memory holds the dataset plus a few batches.
        let mut tasks = self.store.scan_table(manifest, Table::Tasks, None);
        while let Some(b) = tasks.try_next().await.map_err(store_err)? {
            ds.add_tasks(&b);
        }
        let mut stages = self.store.scan_table(manifest, Table::Stages, None);
        while let Some(b) = stages.try_next().await.map_err(store_err)? {
            ds.add_stages(&b);
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
                ds.add_task_windows(&b.map_err(store_err)?);
            }
            decoder.await.map_err(|e| {
                DataFusionError::Execution(format!("culprit: loading task_windows: {e}"))
            })?;
        }
        let host_rows = host_rows
            .await
            .map_err(|e| DataFusionError::Execution(format!("culprit: loading host_windows: {e}")))?
            .map_err(store_err)?;
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

impl Loaded {
    /// Level-4 blame (method.md sections 4-5) over the window rows in memory
    /// or streamed from the store. Blocking: call it off the async workers.
    pub fn blame(&self, opts: &BlameOptions) -> Result<(Victims, Level4), BlameError> {
        match &self.stream {
            None => Ok(method::blame(&self.ds, opts)?),
            Some(s) => method::blame_with(&self.ds, opts, |victim, win, mode| {
                s.level4(&self.ds, victim, win, mode)
                    .map_err(BlameError::Other)
            }),
        }
    }
}

/// Rows of one part whose task ran on a host of another bucket (a task
/// stored again later with another host): (bucket, task, group, row).
type Strays = Vec<(usize, u32, usize, culprit_core::method::model::WindowRow)>;

impl Streamed {
    /// The sweeps over the store's window rows, one host bucket per job on
    /// every core, plus the slot sweep.
    fn level4(
        &self,
        ds: &Dataset,
        victim: &[bool],
        win: (Micros, Micros),
        mode: Attribution,
    ) -> Result<Level4> {
        let started = std::time::Instant::now();
        // Files are fetched through the runtime of the calling query (this
        // runs on one of its blocking threads).
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            DataFusionError::Execution(format!("culprit: reading task_windows: {e}"))
        })?;
        let runtime = &runtime;
        let n = HOST_BUCKETS as usize;
        let mut files: Vec<Vec<&DataFile>> = vec![Vec::new(); n];
        let mut loose: Vec<&DataFile> = Vec::new();
        for f in self.manifest.files_of(Table::TaskWindows) {
            match f.bucket {
                Some(b) if (b as usize) < n => files[b as usize].push(f),
                _ => loose.push(f),
            }
        }
        let details = SyncMutex::new(ds.details.clone());
        // Files written without buckets (older stores, rows whose task came
        // in a later batch) are read first, in parallel, and kept: every
        // bucket's sweep takes its hosts' rows from them too.
        let groups = ds.windows.len();
        let loose: Vec<Part> = method::parallel(loose.len(), |i| -> Result<Part> {
            let mut part = Part::new(groups);
            self.read_file(runtime, ds, loose[i], &details, &mut |task, group, row| {
                part.push(task, group, row)
            })?;
            Ok(part)
        })
        .into_iter()
        .collect::<Result<_>>()?;
        fn with_loose<'a>(loose: &'a [Part], extra: &[&'a Part]) -> Vec<&'a Part> {
            loose.iter().chain(extra.iter().copied()).collect()
        }
        // Only hosts where a victim stage ran have anything to explain; a
        // bucket without such hosts is not even read, unless some task was
        // stored with two hosts (its rows could sit in any bucket).
        let mut victim_host = vec![false; ds.hosts.len()];
        for t in &ds.tasks {
            if victim[t.stage as usize] {
                victim_host[t.host as usize] = true;
            }
        }
        let hosts: Vec<Vec<u32>> = self
            .bucket_hosts
            .iter()
            .map(|hs| {
                hs.iter()
                    .copied()
                    .filter(|h| victim_host[*h as usize])
                    .collect()
            })
            .collect();
        let may_skip = ds.host_conflicts == 0;
        let swept = std::sync::atomic::AtomicUsize::new(0);
        let jobs = method::parallel(n + 1, |j| -> Result<(Vec<Entry>, Strays)> {
            if j == 0 {
                return Ok((method::slot_entries(ds, victim, win, mode), Vec::new()));
            }
            let b = j - 1;
            if may_skip && hosts[b].is_empty() {
                return Ok((Vec::new(), Vec::new()));
            }
            let mut strays = Strays::new();
            let part = self.read_bucket(runtime, ds, &files[b], b, &details, &mut strays)?;
            let entries = method::sweep_part(
                ds,
                &hosts[b],
                &self.tasks_by_host,
                &with_loose(&loose, &[&part]),
                victim,
                win,
                mode,
            );
            let done = swept.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            log::info!(
                "blame: host bucket {done}/{n} swept ({} window rows, {:.2} s)",
                part.rows(),
                started.elapsed().as_secs_f64()
            );
            Ok((entries, strays))
        });
        let mut chunks = Vec::with_capacity(n + 1);
        let mut strays: FxHashMap<usize, Part> = FxHashMap::default();
        for job in jobs {
            let (entries, s) = job?;
            chunks.push(entries);
            for (b, task, group, row) in s {
                strays
                    .entry(b)
                    .or_insert_with(|| Part::new(groups))
                    .push(task, group, row);
            }
        }
        // A bucket that got rows from another bucket's files is swept again
        // with them (rare: a task stored twice with different hosts).
        for (b, extra) in strays {
            let part = self.read_bucket(runtime, ds, &files[b], b, &details, &mut Strays::new())?;
            chunks[b + 1] = method::sweep_part(
                ds,
                &hosts[b],
                &self.tasks_by_host,
                &with_loose(&loose, &[&part, &extra]),
                victim,
                win,
                mode,
            );
        }
        let details = details.into_inner().map_err(|_| {
            DataFusionError::Execution("culprit: a sweep thread failed".to_string())
        })?;
        Ok(Level4::from_chunks(chunks, Some(details)))
    }

    /// Reads the files of bucket `b`: the rows of its hosts, and in `strays`
    /// those whose task ran on a host of another bucket.
    fn read_bucket(
        &self,
        runtime: &tokio::runtime::Handle,
        ds: &Dataset,
        files: &[&DataFile],
        b: usize,
        details: &SyncMutex<Interner>,
        strays: &mut Strays,
    ) -> Result<Part> {
        let mut part = Part::new(ds.windows.len());
        for f in files {
            self.read_file(runtime, ds, f, details, &mut |task, group, row| {
                let home = self.host_bucket[group / N_RES];
                if home == b {
                    part.push(task, group, row)
                } else {
                    strays.push((home, task, group, row))
                }
            })?;
        }
        Ok(part)
    }

    /// Reads one `task_windows` file into `sink(task, group, row)`.
    fn read_file(
        &self,
        runtime: &tokio::runtime::Handle,
        ds: &Dataset,
        file: &DataFile,
        details: &SyncMutex<Interner>,
        sink: &mut dyn FnMut(u32, usize, culprit_core::method::model::WindowRow),
    ) -> Result<()> {
        let bytes = runtime
            .block_on(self.store.fetch(file))
            .map_err(store_err)?;
        let mut local: FxHashMap<String, u32> = FxHashMap::default();
        let mut detail = |d: &str| -> u32 {
            if let Some(&id) = local.get(d) {
                return id;
            }
            let id = details.lock().map_or(0, |mut i| i.intern(d));
            local.insert(d.to_string(), id);
            id
        };
        for batch in self
            .store
            .decode(file, bytes, Some(WINDOW_COLUMNS))
            .map_err(store_err)?
        {
            ds.fold_task_windows(&batch.map_err(store_err)?, &mut detail, sink);
        }
        Ok(())
    }
}
