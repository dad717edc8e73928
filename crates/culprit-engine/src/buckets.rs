//! A large store's window rows, read one host bucket at a time for the
//! method's streamed sweeps (`culprit_core::method::BucketSource`). The
//! store's layout (files per bucket, files without one) is the store's;
//! this file only reads what the manifest lists.

use std::sync::Mutex;

use culprit_core::method::model::{Interner, WindowRow};
use culprit_core::method::{BucketSource, Dataset};
use culprit_core::Table;
use culprit_store::layout::host_bucket;
use culprit_store::{DataFile, Manifest, Store};
use rustc_hash::FxHashMap;

use crate::error::Error;

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

/// The `task_windows` files of one manifest, by host bucket.
#[derive(Debug)]
pub struct StoreBuckets {
    store: Store,
    /// Per bucket, its files.
    files: Vec<Vec<DataFile>>,
    /// Files written without a bucket.
    loose: Vec<DataFile>,
    /// Per host of the dataset, its bucket.
    host_bucket: Vec<usize>,
}

impl StoreBuckets {
    pub fn new(store: Store, manifest: &Manifest, ds: &Dataset, buckets: usize) -> StoreBuckets {
        let mut files = vec![Vec::new(); buckets];
        let mut loose = Vec::new();
        for f in manifest.files_of(Table::TaskWindows) {
            match f.bucket {
                Some(b) if (b as usize) < buckets => files[b as usize].push(f.clone()),
                _ => loose.push(f.clone()),
            }
        }
        let host_bucket = (0..ds.hosts.len() as u32)
            .map(|h| host_bucket(ds.hosts.name(h)) as usize)
            .collect();
        StoreBuckets {
            store,
            files,
            loose,
            host_bucket,
        }
    }

    /// The number of host buckets.
    pub fn buckets(&self) -> usize {
        self.files.len()
    }

    /// How many `task_windows` files have no bucket (older stores).
    pub fn loose_files(&self) -> usize {
        self.loose.len()
    }

    /// The bucket of host `host` of the dataset.
    pub fn bucket_of(&self, host: u32) -> usize {
        self.host_bucket[host as usize]
    }

    /// The reads of one analysis over `ds`, on the runtime of the calling
    /// query (the sweeps run on one of its blocking threads).
    pub fn reader<'a>(
        &'a self,
        ds: &'a Dataset,
        runtime: tokio::runtime::Handle,
    ) -> BucketReader<'a> {
        BucketReader {
            buckets: self,
            ds,
            runtime,
            details: Mutex::new(ds.details.clone()),
            started: std::time::Instant::now(),
        }
    }
}

/// The reads of one analysis: files fetched and decoded on the sweep
/// threads, their detail names interned in one table for the result.
pub struct BucketReader<'a> {
    buckets: &'a StoreBuckets,
    ds: &'a Dataset,
    runtime: tokio::runtime::Handle,
    details: Mutex<Interner>,
    started: std::time::Instant,
}

impl BucketReader<'_> {
    /// Reads one `task_windows` file into `sink(task, group, row)`.
    fn read_file(
        &self,
        file: &DataFile,
        sink: &mut dyn FnMut(u32, usize, WindowRow),
    ) -> Result<(), Error> {
        let store = &self.buckets.store;
        let bytes = self.runtime.block_on(store.fetch(file))?;
        // Names seen in this file, so the shared table is locked once per name.
        let mut local: FxHashMap<String, u32> = FxHashMap::default();
        let mut detail = |d: &str| -> u32 {
            if let Some(&id) = local.get(d) {
                return id;
            }
            let id = self.details.lock().map_or(0, |mut i| i.intern(d));
            local.insert(d.to_string(), id);
            id
        };
        for batch in store.decode(file, bytes, Some(WINDOW_COLUMNS))? {
            self.ds.fold_task_windows(&batch?, &mut detail, sink);
        }
        Ok(())
    }
}

impl BucketSource for BucketReader<'_> {
    type Error = Error;

    fn buckets(&self) -> usize {
        self.buckets.files.len()
    }

    fn bucket_of(&self, host: u32) -> usize {
        self.buckets.host_bucket[host as usize]
    }

    fn unbucketed_files(&self) -> usize {
        self.buckets.loose.len()
    }

    fn read_unbucketed(
        &self,
        i: usize,
        sink: &mut dyn FnMut(u32, usize, WindowRow),
    ) -> Result<(), Error> {
        self.read_file(&self.buckets.loose[i], sink)
    }

    fn read_bucket(
        &self,
        b: usize,
        sink: &mut dyn FnMut(u32, usize, WindowRow),
    ) -> Result<(), Error> {
        for f in &self.buckets.files[b] {
            self.read_file(f, sink)?;
        }
        Ok(())
    }

    fn details(&self) -> Result<Interner, Error> {
        self.details
            .lock()
            .map(|d| d.clone())
            .map_err(|_| Error::Internal("a sweep thread failed while naming details".into()))
    }

    fn swept(&self, done: usize, of: usize, rows: usize) {
        log::info!(
            "blame: host bucket {done}/{of} swept ({rows} window rows, {:.2} s)",
            self.started.elapsed().as_secs_f64()
        );
    }
}
