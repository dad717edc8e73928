//! A failed ingest leaves the store readable and unchanged: a real in-memory
//! object store wrapped to fail on the Nth write.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use culprit_core::Table;
use culprit_ingest::{ingest, list_sources, IngestOptions};
use culprit_store::Store;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use crate::common::generate;

/// Fails every write once `countdown` writes have gone through, and keeps
/// the path of the first write it failed.
#[derive(Debug)]
struct FailingStore {
    inner: InMemory,
    countdown: AtomicUsize,
    failed: std::sync::Mutex<Option<Path>>,
}

impl fmt::Display for FailingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailingStore")
    }
}

impl FailingStore {
    /// A store on a new failing object store, failing no write yet.
    fn store() -> (Arc<FailingStore>, Store) {
        let os = Arc::new(FailingStore {
            inner: InMemory::new(),
            countdown: AtomicUsize::new(usize::MAX),
            failed: std::sync::Mutex::new(None),
        });
        let store = Store::new(
            os.clone(),
            url::Url::parse("memory:///").unwrap(),
            Path::from("faulty"),
            "memory://faulty".into(),
        );
        (os, store)
    }

    fn check(&self, location: &Path) -> object_store::Result<()> {
        let left = self.countdown.load(Ordering::SeqCst);
        if left == 0 {
            self.failed
                .lock()
                .unwrap()
                .get_or_insert_with(|| location.clone());
            return Err(object_store::Error::Generic {
                store: "FailingStore",
                source: "injected write failure".into(),
            });
        }
        self.countdown.store(left - 1, Ordering::SeqCst);
        Ok(())
    }
}

#[async_trait]
impl ObjectStore for FailingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check(location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check(location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

async fn count(store: &Store, sql: &str) -> i64 {
    let ctx = culprit_sql::session(store.clone()).await.unwrap();
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    use arrow::array::AsArray;
    batches[0]
        .column(0)
        .as_primitive::<arrow::datatypes::Int64Type>()
        .value(0)
}

async fn object_count(os: &Arc<FailingStore>) -> usize {
    use futures::TryStreamExt;
    let all: Vec<_> = os.inner.list(None).try_collect().await.unwrap();
    all.len()
}

#[tokio::test]
async fn failed_ingest_leaves_store_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    generate(&first, "csv");
    // A second, different data set: the same workload as Parquet.
    let second = tmp.path().join("second");
    generate(&second, "parquet");

    // Fail the 1st, 2nd, ... write of the second ingest, until it has no
    // write left to fail.
    for fail_after in 0usize.. {
        let (os, store) = FailingStore::store();
        // Only the queries and tasks first: the second ingest has rows of
        // every other table to write (its queries and tasks are stored
        // already, and so would be window rows ingested before).
        let firsts = ["queries.csv", "tasks.csv"].map(|f| first.join(f).display().to_string());
        let sources = list_sources(&firsts).await.unwrap();
        let report = ingest(&store, sources, &IngestOptions::default(), &())
            .await
            .unwrap();
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        let before = store.manifest().await.unwrap();
        let tasks_before = count(&store, "SELECT count(*) FROM tasks").await;
        let windows_before = count(&store, "SELECT count(*) FROM task_windows").await;
        let objects_before = object_count(&os).await;
        assert!(tasks_before > 0);

        // The next ingest fails on its (fail_after + 1)-th write.
        os.countdown.store(fail_after, Ordering::SeqCst);
        let sources = list_sources(&[second.display().to_string()]).await.unwrap();
        // Different bytes, so no file is skipped as already ingested: the
        // files of every table not stored yet are written before the commit
        // that fails or not.
        let result = ingest(&store, sources, &IngestOptions::default(), &()).await;
        os.countdown.store(usize::MAX, Ordering::SeqCst);
        if result.is_ok() {
            // Data files and the manifest: at least three writes were failed.
            assert!(fail_after >= 3, "only {fail_after} writes");
            break;
        }

        let after = store.manifest().await.unwrap();
        assert_eq!(after, before, "manifest changed after a failed ingest");
        assert_eq!(
            count(&store, "SELECT count(*) FROM tasks").await,
            tasks_before
        );
        assert_eq!(
            count(&store, "SELECT count(*) FROM task_windows").await,
            windows_before
        );
        assert_eq!(
            object_count(&os).await,
            objects_before,
            "uncommitted files left behind"
        );
        assert_eq!(after.rows_of(Table::Tasks) as i64, tasks_before);
    }
}

/// The first ingest of tasks fails on each of its writes in turn, the
/// query index of one-victim reads (written at the commit, before the
/// manifest) among them: the store is left empty, with no object behind.
#[tokio::test]
async fn failed_ingest_of_tasks_leaves_no_index_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    generate(&data, "parquet");
    let mut failed_index = false;
    for fail_after in 0usize.. {
        let (os, store) = FailingStore::store();
        os.countdown.store(fail_after, Ordering::SeqCst);
        let sources = list_sources(&[data.display().to_string()]).await.unwrap();
        let result = ingest(&store, sources, &IngestOptions::default(), &()).await;
        os.countdown.store(usize::MAX, Ordering::SeqCst);
        let failed = os.failed.lock().unwrap().clone();
        if result.is_ok() {
            assert_eq!(failed, None);
            let m = store.manifest().await.unwrap();
            assert_eq!(m.files_named(culprit_store::layout::QUERY_SPANS).count(), 1);
            break;
        }
        let failed = failed.expect("a write failed");
        failed_index |= failed.as_ref().contains(culprit_store::layout::QUERY_SPANS);
        let m = store.manifest().await.unwrap();
        assert_eq!(m.version, 0, "committed after failing {failed}");
        assert!(m.files.is_empty());
        assert_eq!(
            object_count(&os).await,
            0,
            "objects left after failing {failed}"
        );
        assert_eq!(count(&store, "SELECT count(*) FROM tasks").await, 0);
    }
    assert!(failed_index, "no failure of the query index's write");
}
