//! The method's data, loaded from the store once per manifest version and
//! shared by every table function call until new data is committed.

use std::sync::Arc;

use culprit_core::method::Dataset;
use culprit_core::Table;
use culprit_store::Store;
use datafusion::common::{DataFusionError, Result};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Mutex;

#[derive(Debug)]
pub struct Engine {
    store: Store,
    cache: Mutex<Option<(u64, Arc<Dataset>)>>,
}

fn store_err(e: culprit_store::StoreError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl Engine {
    pub fn new(store: Store) -> Self {
        Engine {
            store,
            cache: Mutex::new(None),
        }
    }

    /// The dataset of the newest manifest (cached per version).
    pub async fn dataset(&self) -> Result<Arc<Dataset>> {
        let manifest = self.store.manifest().await.map_err(store_err)?;
        let mut cache = self.cache.lock().await;
        if let Some((v, ds)) = cache.as_ref() {
            if *v == manifest.version {
                return Ok(ds.clone());
            }
        }
        let started = std::time::Instant::now();
        let mut ds = Dataset::new();
        // Tasks first: window rows name them. Batches are folded in as they
        // stream, so memory holds the dataset plus a few batches.
        let mut tasks = self.store.scan_table(&manifest, Table::Tasks, None);
        while let Some(b) = tasks.try_next().await.map_err(store_err)? {
            ds.add_tasks(&b);
        }
        let mut stages = self.store.scan_table(&manifest, Table::Stages, None);
        while let Some(b) = stages.try_next().await.map_err(store_err)? {
            ds.add_stages(&b);
        }
        ds.reserve_windows(manifest.rows_of(Table::TaskWindows) as usize);
        // The biggest table: decode on another worker while this one folds
        // batches in, so both cores work.
        let mut windows = self.store.scan_table(&manifest, Table::TaskWindows, None);
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let decoder = tokio::spawn(async move {
            while let Some(b) = windows.next().await {
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
        let mut hosts = self.store.scan_table(&manifest, Table::HostWindows, None);
        while let Some(b) = hosts.try_next().await.map_err(store_err)? {
            ds.add_host_windows(&b);
        }
        log::info!(
            "loaded store version {} for the method in {:.2} s ({} tasks)",
            manifest.version,
            started.elapsed().as_secs_f64(),
            ds.tasks.len()
        );
        let ds = Arc::new(ds);
        *cache = Some((manifest.version, ds.clone()));
        Ok(ds)
    }
}
