//! What a SQL session can reach outside its tables: the store's own files,
//! read-only, and nothing else.
//!
//! DataFusion resolves every location a statement names (`COPY ... TO
//! 'path'`, `CREATE EXTERNAL TABLE ... LOCATION`, a listing table's files)
//! through the session's object-store registry, and a default registry
//! holds the whole local filesystem. A culprit session's registry holds one
//! store: the culprit store, confined to its root folder and unable to
//! write. So whatever path a statement takes through the server, it cannot
//! read a server file outside the store nor write any file: that is decided
//! here, below every statement path, not by checking statements one kind at
//! a time (the server's statement policy refuses such statements first,
//! with a clearer message; this is the floor under it).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreRegistry;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use url::Url;

use culprit_store::Store;

/// The reason given for every refused access.
const WHY: &str = "culprit's SQL reads only its own store and writes no files";

fn denied(path: &str, what: &str) -> object_store::Error {
    object_store::Error::PermissionDenied {
        path: path.to_string(),
        source: format!("{what}: {WHY}").into(),
    }
}

/// The store's object store, confined to its root and read-only.
#[derive(Debug)]
pub struct Confined {
    inner: Arc<dyn ObjectStore>,
    root: Path,
}

impl Confined {
    pub fn new(inner: Arc<dyn ObjectStore>, root: Path) -> Confined {
        Confined { inner, root }
    }

    /// Whether `p` lies under the root (the root itself included).
    fn inside(&self, p: &Path) -> bool {
        p.prefix_match(&self.root).is_some()
    }

    fn check(&self, p: &Path) -> object_store::Result<()> {
        if self.inside(p) {
            Ok(())
        } else {
            Err(denied(p.as_ref(), "outside the store"))
        }
    }
}

impl fmt::Display for Confined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Confined({}, read-only, under /{})",
            self.inner, self.root
        )
    }
}

#[async_trait]
impl ObjectStore for Confined {
    async fn put_opts(
        &self,
        location: &Path,
        _payload: PutPayload,
        _opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(denied(location.as_ref(), "write"))
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(denied(location.as_ref(), "write"))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.check(location)?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.check(location)?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        locations
            .map(|l| l.and_then(|p| Err(denied(p.as_ref(), "delete"))))
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let prefix = prefix.cloned().unwrap_or_default();
        match self.check(&prefix) {
            Ok(()) => self.inner.list(Some(&prefix)),
            Err(e) => stream::once(async move { Err(e) }).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let prefix = prefix.cloned().unwrap_or_default();
        self.check(&prefix)?;
        self.inner.list_with_delimiter(Some(&prefix)).await
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(denied(to.as_ref(), "write"))
    }
}

/// A registry with the confined store under the store's URL and nothing
/// else: no local filesystem, no other bucket, and no store registered
/// later (`register_store` is refused).
#[derive(Debug)]
pub struct StoreOnlyRegistry {
    base: Url,
    store: Arc<dyn ObjectStore>,
}

impl StoreOnlyRegistry {
    pub fn new(store: &Store) -> StoreOnlyRegistry {
        StoreOnlyRegistry {
            base: store.base_url().clone(),
            store: Arc::new(Confined::new(store.object_store(), store.root().clone())),
        }
    }
}

/// What the registry keys a URL by: scheme and authority.
fn key(url: &Url) -> String {
    format!(
        "{}://{}",
        url.scheme(),
        &url[url::Position::BeforeHost..url::Position::AfterPort]
    )
}

impl ObjectStoreRegistry for StoreOnlyRegistry {
    fn register_store(
        &self,
        url: &Url,
        _store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        log::warn!("refused to register an object store for {url}: {WHY}");
        None
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        if key(url) == key(&self.base) {
            Ok(self.store.clone())
        } else {
            Err(DataFusionError::ObjectStore(Box::new(denied(
                url.as_str(),
                "not the culprit store",
            ))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn reads_under_the_root_only_and_never_writes() {
        let mem: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        mem.put(
            &Path::from("store/a.parquet"),
            Bytes::from_static(b"in").into(),
        )
        .await
        .unwrap();
        mem.put(&Path::from("secret/b"), Bytes::from_static(b"out").into())
            .await
            .unwrap();
        let c = Confined::new(mem, Path::from("store"));
        assert!(c.get(&Path::from("store/a.parquet")).await.is_ok());
        let e = c.get(&Path::from("secret/b")).await.unwrap_err();
        assert!(e.to_string().contains("outside the store"), "{e}");
        // `store2` shares the root's text prefix but is not under it.
        assert!(c.get(&Path::from("store2/x")).await.is_err());
        let e = c
            .put(&Path::from("store/new"), Bytes::from_static(b"x").into())
            .await
            .unwrap_err();
        assert!(
            matches!(e, object_store::Error::PermissionDenied { .. }),
            "{e}"
        );
        assert!(c.delete(&Path::from("store/a.parquet")).await.is_err());
        assert!(c.get(&Path::from("store/a.parquet")).await.is_ok());
        let listed: Vec<_> = c.list(None).collect().await;
        assert!(
            listed.iter().all(|r| r.is_err()),
            "listing from the top is outside"
        );
        let listed: Vec<_> = c.list(Some(&Path::from("store"))).collect().await;
        assert_eq!(listed.len(), 1);
    }

    #[test]
    fn registry_has_only_the_store() {
        let store = Store::open("memory://").unwrap();
        let r = StoreOnlyRegistry::new(&store);
        assert!(r.get_store(store.base_url()).is_ok());
        for other in ["file:///", "file:///tmp/x.csv", "s3://bucket/", "http://h/"] {
            assert!(r.get_store(&Url::parse(other).unwrap()).is_err(), "{other}");
        }
    }
}
