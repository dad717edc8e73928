use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arrow::record_batch::RecordBatch;
use culprit_core::Table;
use futures::TryStreamExt;
use object_store::buffered::BufWriter;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{AsyncArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use url::Url;

use crate::cache::{Cached, ReadCache};
use crate::manifest::{
    BatchInfo, CronJob, DataFile, Manifest, RetiredFile, SourceRecord, UserTable,
};
use crate::{paths, Result, StoreError, UserTableProblem};

/// The store used when none is given: a directory beside the working directory.
pub const DEFAULT_STORE: &str = "./culprit-data";

/// How often a commit retries after losing a race to a concurrent commit.
const COMMIT_RETRIES: usize = 16;

/// A culprit store: an object store, a root inside it, and the URL DataFusion
/// reaches it by.
#[derive(Clone)]
pub struct Store {
    pub(crate) object_store: Arc<dyn ObjectStore>,
    /// Scheme and authority, e.g. `file:///`, `s3://bucket/`, `memory:///`.
    base_url: Url,
    /// The store's folder inside the object store.
    root: Path,
    display: String,
    /// The newest manifest read or committed through this store or a
    /// clone of it, and when it was last known to be the newest (listed or
    /// committed) ([`Store::manifest`]).
    newest: Arc<std::sync::Mutex<Option<Kept>>>,
    /// How long a manifest superseded by a newer version is kept before a
    /// commit removes it ([`MANIFEST_GRACE`]).
    manifest_grace: Duration,
}

/// A manifest kept as the newest, and when it was last known to be (by the
/// monotonic clock and by the wall clock).
type Kept = (Arc<Manifest>, Instant, SystemTime);

/// How long a superseded manifest is kept: a commit removes the versions
/// whose next version was written longer ago than this. A reader trusts
/// the manifest it keeps (asking only whether the next version exists) for
/// a quarter of it, then lists the versions again, so the next version it
/// asks for cannot have been removed meanwhile (the committing machine's
/// clock and the object store's timestamps may differ by up to three
/// quarters of it); a commit writes after the newest version it lists,
/// never after a kept one. A cluster's workers read the version their
/// coordinator planned at well within it.
pub const MANIFEST_GRACE: Duration = Duration::from_secs(15 * 60);

/// The superseded manifests a commit removes at most (the rest by the
/// next commits): a store written before they were removed may hold many.
const MANIFESTS_REMOVED: usize = 1_000;

/// Batch records a manifest keeps whatever their files
/// ([`Manifest::prune_batches`]): the newest, for whoever reads the
/// manifest to see what was committed lately.
const BATCHES_KEPT: usize = 100;

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl Store {
    /// Opens a store by URL: a plain path or `file:///path` (created if
    /// missing), `s3://bucket/prefix` (standard `AWS_*` variables, with
    /// `AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP` for S3-compatible stores), or
    /// `memory://` (a new empty in-memory store, for tests).
    pub fn open(spec: &str) -> Result<Store> {
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: spec.to_string(),
            reason,
        };
        if spec.starts_with("memory://") {
            return Ok(Store::new(
                Arc::new(InMemory::new()),
                Url::parse("memory:///").expect("static URL"),
                Path::default(),
                spec.to_string(),
            ));
        }
        if spec.starts_with("s3://") || spec.starts_with("s3a://") {
            let url = Url::parse(spec).map_err(|e| invalid(e.to_string()))?;
            let bucket = url
                .host_str()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| invalid("no bucket name".into()))?
                .to_string();
            let s3 = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(&bucket)
                .build()
                .map_err(|e| invalid(e.to_string()))?;
            let root = Path::from(url.path().trim_matches('/'));
            let base =
                Url::parse(&format!("s3://{bucket}/")).map_err(|e| invalid(e.to_string()))?;
            return Ok(Store::new(Arc::new(s3), base, root, spec.to_string()));
        }
        let local = if let Some(rest) = spec.strip_prefix("file://") {
            std::path::PathBuf::from(rest)
        } else if spec.contains("://") {
            return Err(invalid(
                "unsupported scheme (use a path, file://, s3:// or memory://)".into(),
            ));
        } else {
            std::path::PathBuf::from(spec)
        };
        std::fs::create_dir_all(&local)
            .map_err(|e| invalid(format!("cannot create folder: {e}")))?;
        let abs = std::fs::canonicalize(&local).map_err(|e| invalid(e.to_string()))?;
        let root = Path::from_absolute_path(&abs).map_err(|e| invalid(e.to_string()))?;
        Ok(Store::new(
            Arc::new(LocalFileSystem::new()),
            Url::parse("file:///").expect("static URL"),
            root,
            abs.display().to_string(),
        ))
    }

    /// A store over any object store (used by tests to inject faults).
    pub fn new(
        object_store: Arc<dyn ObjectStore>,
        base_url: Url,
        root: Path,
        display: String,
    ) -> Store {
        Store {
            object_store,
            base_url,
            root,
            display,
            newest: Arc::default(),
            manifest_grace: MANIFEST_GRACE,
        }
    }

    /// This store with superseded manifests kept for `grace` instead of
    /// [`MANIFEST_GRACE`] (tests). Every process on a store must use the
    /// same: a reader that keeps a manifest for longer than a quarter of a
    /// writer's grace could miss newer versions.
    pub fn with_manifest_grace(mut self, grace: Duration) -> Store {
        self.manifest_grace = grace;
        self
    }

    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.object_store.clone()
    }

    /// The URL under which DataFusion must register [`Self::object_store`].
    pub fn base_url(&self) -> &Url {
        &self.base_url
    }

    /// The folder (object path) every file of the store lies under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The object path of a file given relative to the root.
    pub fn path(&self, relative: &str) -> Path {
        paths::join(&self.root, relative)
    }

    /// The full URL of a file given relative to the root, for DataFusion.
    pub fn file_url(&self, relative: &str) -> String {
        format!("{}{}", self.base_url, self.path(relative))
    }

    pub(crate) fn os_err(&self) -> impl Fn(object_store::Error) -> StoreError + '_ {
        move |source| StoreError::ObjectStore {
            store: self.display.clone(),
            source,
        }
    }

    /// The newest manifest, or an empty one (version 0) for a new store.
    ///
    /// A version is written once, by a commit that creates the next
    /// version's file (`PutMode::Create`), so versions follow one another
    /// and a version's manifest never changes; a superseded one is removed
    /// [`MANIFEST_GRACE`] after its successor was written
    /// ([`Self::remove_superseded`]). The store (and its clones) keeps the
    /// newest one it read or committed, and it is still the newest while
    /// the next version's file does not exist: one `head` of that file,
    /// instead of listing the versions and parsing the newest (at 1e7 tasks
    /// a 1.4 MB manifest, 2 ms, which every statement paid, several times
    /// for an analysis). That answer is trusted for a quarter of the grace
    /// after the kept one was last known to be the newest, by both the
    /// monotonic clock and the wall clock (the first stops while a machine
    /// sleeps), then the versions are listed again (the next version could
    /// be removed by then). Another process's commit is seen at the next
    /// call.
    pub async fn manifest(&self) -> Result<Arc<Manifest>> {
        if let Some((kept, since, wall)) = self.kept_since() {
            let trust = self.manifest_grace / 4;
            if since.elapsed() < trust && wall.elapsed().is_ok_and(|d| d < trust) {
                let next = paths::manifest(&self.root, kept.version + 1);
                match self.object_store.head(&next).await {
                    Err(object_store::Error::NotFound { .. }) => return Ok(kept),
                    Err(e) => return Err(self.os_err()(e)),
                    Ok(_) => {} // a newer one: find the newest
                }
            }
        }
        Ok(self.newest_listed().await?.0)
    }

    /// The manifest versions stored, in order, with their objects' metadata.
    async fn list_versions(&self) -> Result<Vec<(u64, object_store::ObjectMeta)>> {
        let dir = paths::manifest_dir(&self.root);
        let metas: Vec<object_store::ObjectMeta> = self
            .object_store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(self.os_err())?;
        let mut versions: Vec<(u64, object_store::ObjectMeta)> = metas
            .into_iter()
            .filter_map(|m| paths::manifest_version(&m.location).map(|v| (v, m)))
            .collect();
        versions.sort_by_key(|(v, _)| *v);
        Ok(versions)
    }

    /// The newest manifest by a listing of the versions (kept from then),
    /// and that listing. The kept one is not parsed again when it is still
    /// the newest.
    async fn newest_listed(&self) -> Result<(Arc<Manifest>, Vec<(u64, object_store::ObjectMeta)>)> {
        let (since, wall) = (Instant::now(), SystemTime::now());
        let versions = self.list_versions().await?;
        let manifest = match versions.last() {
            Some((version, meta)) => match self.kept().filter(|k| k.version == *version) {
                Some(kept) => kept,
                None => Arc::new(self.read_manifest(*version, &meta.location).await?),
            },
            None => Arc::new(Manifest {
                format: Manifest::FORMAT,
                ..Manifest::default()
            }),
        };
        Ok((self.keep(manifest, since, wall), versions))
    }

    /// The newest manifest kept, if any.
    fn kept(&self) -> Option<Arc<Manifest>> {
        self.kept_since().map(|(m, _, _)| m)
    }

    /// The newest manifest kept, if any, and when it was last known to be
    /// the newest.
    fn kept_since(&self) -> Option<Kept> {
        self.newest.lock().ok().and_then(|k| k.clone())
    }

    /// Keeps `manifest`, known to be the newest at `since` (and at `wall`
    /// by the wall clock), unless a newer one is kept already (calls that
    /// overlap), and returns it.
    fn keep(&self, manifest: Arc<Manifest>, since: Instant, wall: SystemTime) -> Arc<Manifest> {
        if let Ok(mut kept) = self.newest.lock() {
            match kept.as_mut() {
                Some((k, at, w)) if k.version == manifest.version => {
                    *at = (*at).max(since);
                    *w = (*w).max(wall);
                }
                Some((k, _, _)) if k.version > manifest.version => {}
                _ => *kept = Some((manifest.clone(), since, wall)),
            }
        }
        manifest
    }

    /// The manifest of `version` (a cluster's workers read the version
    /// their coordinator planned at). A version never written is an error
    /// naming it, as is one superseded and removed
    /// ([`StoreError::ManifestGone`]).
    pub async fn manifest_at(&self, version: u64) -> Result<Arc<Manifest>> {
        // (Version 0, a new store's empty manifest, is never written.)
        if let Some(kept) = self.kept().filter(|k| version > 0 && k.version == version) {
            return Ok(kept);
        }
        let location = paths::manifest(&self.root, version);
        match self.read_manifest(version, &location).await {
            Err(StoreError::ObjectStore {
                source: object_store::Error::NotFound { .. },
                ..
            }) if version > 0
                && self
                    .manifest()
                    .await
                    .is_ok_and(|newest| version < newest.version) =>
            {
                Err(StoreError::ManifestGone {
                    version,
                    grace_secs: self.manifest_grace.as_secs(),
                })
            }
            other => other.map(Arc::new),
        }
    }

    /// Removes the manifests of `versions` (a listing, in order) superseded
    /// longer than the grace period ago: those whose next listed version
    /// was written before it (its own successor may be gone already: a
    /// removal cut short), at most [`MANIFESTS_REMOVED`], in one request
    /// where the object store takes many (S3). The newest is never removed
    /// (it has no next version). Best effort, before a commit's manifest is
    /// written (a statement cancelled here has committed nothing): a
    /// failure is logged, and the next commit tries again.
    async fn remove_superseded(&self, versions: &[(u64, object_store::ObjectMeta)]) {
        let grace =
            chrono::Duration::from_std(self.manifest_grace).unwrap_or(chrono::Duration::MAX);
        let cutoff = chrono::Utc::now()
            .checked_sub_signed(grace)
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
        let old = versions
            .windows(2)
            .take_while(|w| w[1].1.last_modified <= cutoff)
            .count();
        let gone: Vec<object_store::Result<Path>> = versions
            .iter()
            .take(old.min(MANIFESTS_REMOVED))
            .map(|(_, meta)| Ok(meta.location.clone()))
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut removed = self
            .object_store
            .delete_stream(futures::StreamExt::boxed(futures::stream::iter(gone)));
        while let Some(r) = futures::StreamExt::next(&mut removed).await {
            match r {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    log::warn!("could not remove a superseded manifest of {self}: {e}");
                    return;
                }
            }
        }
    }

    async fn read_manifest(&self, version: u64, location: &Path) -> Result<Manifest> {
        let bytes = self
            .object_store
            .get(location)
            .await
            .map_err(self.os_err())?
            .bytes()
            .await
            .map_err(self.os_err())?;
        let corrupt = |reason: String| StoreError::CorruptManifest {
            path: location.to_string(),
            reason,
        };
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if manifest.version != version {
            return Err(corrupt(format!(
                "names version {version} but holds version {}",
                manifest.version
            )));
        }
        if manifest.format > Manifest::FORMAT {
            return Err(corrupt(format!(
                "format {} is newer than this culprit understands ({})",
                manifest.format,
                Manifest::FORMAT
            )));
        }
        Ok(manifest)
    }

    /// Starts a batch: files written to it stay invisible until [`PendingBatch::commit`].
    pub fn begin(&self) -> PendingBatch {
        let id = format!(
            "b{}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%3f"),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        PendingBatch {
            store: self.clone(),
            id,
            files: Vec::new(),
            sources: Vec::new(),
            parts: BTreeMap::new(),
            task_keys: std::collections::HashMap::new(),
            note_tasks: true,
            index: SpanIndex::default(),
            user_changes: Vec::new(),
            job_changes: Vec::new(),
            kind: None,
        }
    }

    /// Streams a table's rows file by file (the next file fetched ahead), with
    /// only the named columns if given: memory stays bounded by two files'
    /// bytes and a batch.
    pub fn scan_table(
        &self,
        manifest: &Manifest,
        table: Table,
        columns: Option<&[&str]>,
    ) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
        self.scan_files(manifest.files_of(table).cloned().collect(), columns)
    }

    /// Streams the rows of these files, as [`Self::scan_table`] does.
    pub fn scan_files(
        &self,
        files: Vec<DataFile>,
        columns: Option<&[&str]>,
    ) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
        use futures::StreamExt;
        let columns: Option<Vec<String>> =
            columns.map(|c| c.iter().map(|s| s.to_string()).collect());
        let store = self.clone();
        futures::stream::iter(files)
            .map(move |file| {
                let store = store.clone();
                let columns = columns.clone();
                async move {
                    let bytes = store.fetch(&file).await?;
                    let cols: Option<Vec<&str>> = columns
                        .as_ref()
                        .map(|c| c.iter().map(|s| s.as_str()).collect());
                    let reader = store.decode(&file, bytes, cols.as_deref())?;
                    // Decoding is lazy: one batch at a time as the stream is polled.
                    Ok::<_, StoreError>(futures::stream::iter(reader))
                }
            })
            .buffered(2)
            .try_flatten()
            .boxed()
    }

    /// Streams the rows of these files (of a time table, see
    /// [`crate::layout::time_columns`]) that may overlap `[from, to]`: files
    /// whose recorded span misses it are not read, and of the others only
    /// the row groups whose statistics may overlap it are fetched (ranged
    /// reads). Rows of a kept row group are all returned: the caller keeps
    /// the ones it wants. Files without a span or statistics (older stores)
    /// are read whole. Only the named columns if given.
    pub fn scan_overlapping(
        &self,
        files: Vec<DataFile>,
        columns: Option<&[&str]>,
        from: i64,
        to: i64,
    ) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
        self.scan_overlapping_then(files, columns, from, to, None, Arc::new(|b| b))
    }

    /// [`Store::scan_overlapping`], each batch handed to `then` on the task
    /// that decoded its row group or took it from the cache: what the
    /// reader does with every batch (cutting, matching rows to their tasks)
    /// runs on every core with the decoding, not on the one that polls.
    /// The results come in the order of the rows. Through `cache` if
    /// given: footers and row groups decoded before are taken from it,
    /// those decoded now are added to it (whole row groups, before `then`).
    pub fn scan_overlapping_then<T: Send + 'static>(
        &self,
        files: Vec<DataFile>,
        columns: Option<&[&str]>,
        from: i64,
        to: i64,
        cache: Option<Arc<ReadCache>>,
        then: Then<T>,
    ) -> futures::stream::BoxStream<'static, Result<T>> {
        use futures::StreamExt;
        let columns: Option<Vec<String>> =
            columns.map(|c| c.iter().map(|s| s.to_string()).collect());
        let files: Vec<DataFile> = files
            .into_iter()
            .filter(|f| f.may_overlap(from, to))
            .collect();
        let store = self.clone();
        // The footers of four files at a time, and of each the row groups
        // that may overlap; then every such row group decoded on a task of
        // its own, `decoders()` at a time, returned in order, a file's
        // failure in its place (a read of one victim decoded on one core
        // before, about a third of a warm server's time).
        futures::stream::iter(files)
            .map(move |file| {
                let (store, columns, cache) = (store.clone(), columns.clone(), cache.clone());
                async move {
                    store
                        .overlapping_groups(file, columns, from, to, cache)
                        .await
                }
            })
            .buffered(4)
            .flat_map(move |groups| {
                use futures::FutureExt;
                futures::stream::iter(match groups {
                    Ok(groups) => groups
                        .into_iter()
                        .map(|g| g.rows_then(then.clone()))
                        .collect(),
                    Err(e) => vec![futures::future::ready(Err(e)).boxed()],
                })
            })
            .buffered(decoders())
            .map_ok(|rows| futures::stream::iter(rows.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    /// The row groups of `file` that may overlap `[from, to]` (by their
    /// statistics; every group of a file without them), each to be read
    /// (through `cache` if given) by a [`GroupRead`].
    async fn overlapping_groups(
        &self,
        file: DataFile,
        columns: Option<Vec<String>>,
        from: i64,
        to: i64,
        cache: Option<Arc<ReadCache>>,
    ) -> Result<Vec<GroupRead>> {
        use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
        let path = self.path(&file.path);
        let name = path.to_string();
        let perr = |source| StoreError::Parquet {
            path: name.clone(),
            source,
        };
        let footer_key = format!("{name}#footer");
        let footer = cache.as_ref().and_then(|c| match c.get(&footer_key) {
            Some(Cached::Footer(f)) => Some(f),
            _ => None,
        });
        // The footer is read from the end (a suffix request), not at the
        // size the manifest recorded: a file replaced under the store is
        // then reported by what it holds, as a full read would.
        let mut reader = Ranged {
            store: self.object_store.clone(),
            path: path.clone(),
            footer: footer.as_ref().map(|f| f.meta.metadata().clone()),
        };
        let footer = match footer {
            Some(f) => f,
            None => {
                let meta = ArrowReaderMetadata::load_async(&mut reader, ArrowReaderOptions::new())
                    .await
                    .map_err(perr)?;
                let spans = group_spans(&meta, &file.table);
                let footer = Footer { meta, spans };
                if let Some(c) = &cache {
                    c.put(footer_key, Cached::Footer(footer.clone()));
                }
                footer
            }
        };
        let Footer { meta, spans } = footer;
        let cols: Option<Vec<&str>> = columns
            .as_ref()
            .map(|c| c.iter().map(|s| s.as_str()).collect());
        check_schema(&name, &file.table, meta.schema(), cols.as_deref())?;
        // The row groups whose span may overlap (all of a file of no time
        // table): their spans are kept with the footer, where finding them
        // in the footer's statistics again for every read walked hundreds
        // of bytes of metadata per column chunk (a few percent of a warm
        // server's time).
        let groups: Vec<usize> = match &spans {
            Some(spans) => spans
                .iter()
                .enumerate()
                .filter(|(_, &(first, last))| first <= to && from <= last)
                .map(|(g, _)| g)
                .collect(),
            None => (0..meta.metadata().num_row_groups()).collect(),
        };
        let mask = cols
            .as_ref()
            .map(|cols| projection(meta.schema(), meta.parquet_schema(), cols));
        let projected = cols.map_or_else(|| "*".to_string(), |c| c.join(","));
        Ok(groups
            .into_iter()
            .map(|group| GroupRead {
                name: name.clone(),
                reader: reader.clone(),
                meta: meta.clone(),
                group,
                mask: mask.clone(),
                cache: cache
                    .clone()
                    .map(|c| (c, format!("{name}#{group}#{projected}"))),
            })
            .collect())
    }

    /// A stored file's footer and its row groups by `key`, a time column
    /// its rows are sorted by ([`crate::layout::sort_key`]), from the
    /// row groups' statistics (the footer only; no row is read). `None`
    /// when a row group lacks the column's minimum, maximum or null count,
    /// or holds a NULL in it: its rows cannot be placed in time unread.
    pub(crate) async fn keyed_groups(
        &self,
        file: &DataFile,
        key: &str,
    ) -> Result<Option<KeyedFile>> {
        use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
        let path = self.path(&file.path);
        let name = path.to_string();
        let reader = Ranged {
            store: self.object_store.clone(),
            path,
            footer: None,
        };
        let builder = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .map_err(|source| StoreError::Parquet { path: name, source })?;
        let footer = builder.metadata().clone();
        let Some(column) = builder
            .parquet_schema()
            .columns()
            .iter()
            .position(|d| d.name() == key)
        else {
            return Ok(None);
        };
        let mut groups = Vec::with_capacity(footer.num_row_groups());
        for (group, rg) in footer.row_groups().iter().enumerate() {
            let stats = rg.column(column).statistics();
            let (Some(min), Some(max), Some(0)) = (
                i64_stat(stats, false),
                i64_stat(stats, true),
                stats.and_then(|s| s.null_count_opt()),
            ) else {
                return Ok(None);
            };
            groups.push(KeyedGroup {
                group,
                min,
                max,
                rows: u64::try_from(rg.num_rows()).unwrap_or(0),
            });
        }
        Ok(Some(KeyedFile {
            file: file.clone(),
            footer,
            groups,
        }))
    }

    /// Streams the row groups `groups` of a file whose footer was read
    /// ([`Store::keyed_groups`]), every column, by ranged reads.
    pub(crate) async fn read_groups(
        &self,
        file: &KeyedFile,
        groups: Vec<usize>,
    ) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
        use futures::StreamExt;
        use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
        let path = self.path(&file.file.path);
        let name = path.to_string();
        let perr = move |source| StoreError::Parquet {
            path: name.clone(),
            source,
        };
        let reader = Ranged {
            store: self.object_store.clone(),
            path,
            footer: Some(file.footer.clone()),
        };
        let builder = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .map_err(&perr)?;
        check_schema(&file.file.path, &file.file.table, builder.schema(), None)?;
        let rows = batch_rows(builder.metadata(), &groups);
        let stream = builder
            .with_batch_size(rows)
            .with_row_groups(groups)
            .build()
            .map_err(&perr)?;
        Ok(stream.map(move |r| r.map_err(&perr)).boxed())
    }

    /// The query index of `manifest` ([`crate::layout::QUERY_SPANS`]): per
    /// query, the earliest and latest time of its tasks, their number and
    /// their earliest launch, over every batch. `None` when some stored
    /// task is not indexed (a store written before the index, or rows
    /// expired since): then only a full read is right.
    pub async fn query_spans(
        &self,
        manifest: &Manifest,
    ) -> Result<Option<std::collections::HashMap<String, QuerySpan>>> {
        use arrow::array::{Array, AsArray};
        let files: Vec<DataFile> = manifest
            .files_named(crate::layout::QUERY_SPANS)
            .cloned()
            .collect();
        let mut spans: std::collections::HashMap<String, QuerySpan> =
            std::collections::HashMap::new();
        let mut indexed = 0u64;
        let batches: Vec<RecordBatch> = self.scan_files(files, None).try_collect().await?;
        for b in &batches {
            let (Some(ids), Some(first), Some(last), Some(n)) = (
                b.column_by_name("query_id")
                    .and_then(|c| c.as_string_opt::<i32>()),
                time_column(b, "first"),
                time_column(b, "last"),
                b.column_by_name("tasks")
                    .and_then(|c| c.as_primitive_opt::<arrow::datatypes::UInt64Type>()),
            ) else {
                return Ok(None);
            };
            // Absent in files written before it: unknown for their queries.
            let launch = time_column(b, "first_launch");
            for i in 0..b.num_rows() {
                if ids.is_null(i) {
                    continue;
                }
                let row = QuerySpan {
                    first: first.value(i),
                    last: last.value(i),
                    tasks: n.value(i),
                    first_launch: launch.filter(|l| l.is_valid(i)).map(|l| l.value(i)),
                };
                indexed += row.tasks;
                spans
                    .entry(ids.value(i).to_string())
                    .and_modify(|e| e.add(&row))
                    .or_insert(row);
            }
        }
        Ok((indexed == manifest.rows_of(Table::Tasks)).then_some(spans))
    }

    /// The size of a derived object (`relative` to the root, not listed in
    /// a manifest, [`paths::stage_shares_file`]), `None` when there is none.
    pub async fn derived_size(&self, relative: &str) -> Result<Option<u64>> {
        match self.object_store.head(&self.path(relative)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.os_err()(e)),
        }
    }

    /// A writer of a derived Parquet object of `name`'s layout
    /// ([`crate::layout::time_columns`], [`crate::layout::rows_per_group`])
    /// at `relative`, with `metadata` in its footer: readers see it whole
    /// once [`DerivedWriter::finish`] returns, or not at all.
    pub fn derived_writer(
        &self,
        relative: &str,
        name: &str,
        schema: &arrow::datatypes::SchemaRef,
        metadata: Vec<(String, String)>,
    ) -> Result<DerivedWriter> {
        let mut props = writer_properties(name, schema).into_builder();
        props = props.set_key_value_metadata(Some(
            metadata
                .into_iter()
                .map(|(k, v)| parquet::file::metadata::KeyValue::new(k, v))
                .collect(),
        ));
        let writer = BufWriter::new(self.object_store.clone(), self.path(relative));
        let writer = AsyncArrowWriter::try_new(writer, schema.clone(), Some(props.build()))
            .map_err(|source| StoreError::Parquet {
                path: relative.to_string(),
                source,
            })?;
        Ok(DerivedWriter {
            store: self.clone(),
            relative: relative.to_string(),
            writer: Some(writer),
        })
    }

    /// The objects under `dir` (relative to the root), relative to the
    /// root, with their sizes, sorted by name.
    pub async fn derived_objects(&self, dir: &str) -> Result<Vec<(String, u64)>> {
        let root = self.root.as_ref();
        let mut found: Vec<(String, u64)> = self
            .object_store
            .list(Some(&self.path(dir)))
            .map_ok(|m| {
                let l = m.location.as_ref();
                let rel = l
                    .strip_prefix(root)
                    .map_or(l, |r| r.trim_start_matches('/'));
                (rel.to_string(), m.size)
            })
            .try_collect()
            .await
            .map_err(self.os_err())?;
        found.sort();
        Ok(found)
    }

    /// Removes the derived objects `gone` (relative to the root); how many
    /// it removed (one already gone may count: not every object store
    /// says so).
    pub async fn remove_derived(&self, gone: &[String]) -> Result<usize> {
        let mut removed = 0;
        for g in gone {
            match self.object_store.delete(&self.path(g)).await {
                Ok(()) => removed += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.os_err()(e)),
            }
        }
        Ok(removed)
    }

    /// The bytes of one data file.
    pub async fn fetch(&self, file: &DataFile) -> Result<bytes::Bytes> {
        let path = self.path(&file.path);
        self.object_store
            .get(&path)
            .await
            .map_err(self.os_err())?
            .bytes()
            .await
            .map_err(self.os_err())
    }

    /// Decodes a data file's bytes, lazily, one batch of up to 64k rows at a
    /// time, with only the named columns if given. Synchronous: call it
    /// where CPU work belongs.
    pub fn decode(
        &self,
        file: &DataFile,
        bytes: bytes::Bytes,
        columns: Option<&[&str]>,
    ) -> Result<impl Iterator<Item = Result<RecordBatch>> + Send + 'static> {
        let path = self.path(&file.path).to_string();
        let perr = |source| StoreError::Parquet {
            path: path.clone(),
            source,
        };
        let mut builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .map_err(perr)?
            .with_batch_size(64 * 1024);
        check_schema(&path, &file.table, builder.schema(), columns)?;
        if let Some(cols) = columns {
            let mask = projection(builder.schema(), builder.parquet_schema(), cols);
            builder = builder.with_projection(mask);
        }
        let reader = builder.build().map_err(perr)?;
        Ok(reader.map(move |r| {
            r.map_err(|e| StoreError::Parquet {
                path: path.clone(),
                source: e.into(),
            })
        }))
    }

    /// Reads a whole table (the files the manifest lists), with only the
    /// named columns if given.
    pub async fn read_table(
        &self,
        manifest: &Manifest,
        table: Table,
        columns: Option<&[&str]>,
    ) -> Result<Vec<RecordBatch>> {
        self.scan_table(manifest, table, columns)
            .try_collect()
            .await
    }
}

/// The earliest start and latest end of rows of a time table (see
/// [`crate::layout::time_columns`]); `None` for other tables.
fn window_span(table: &str, batch: &RecordBatch) -> Option<[i64; 2]> {
    let (starts, end) = crate::layout::time_columns(table)?;
    let first = starts
        .iter()
        .filter_map(|c| arrow::compute::min(time_column(batch, c)?))
        .min()?;
    let last = arrow::compute::max(time_column(batch, end)?)?;
    Some([first, last])
}

/// `span` (if any) widened to cover `more`.
fn widen(span: Option<[i64; 2]>, more: [i64; 2]) -> [i64; 2] {
    span.map_or(more, |[a, b]| [a.min(more[0]), b.max(more[1])])
}

pub(crate) fn time_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Option<&'a arrow::array::TimestampMicrosecondArray> {
    use arrow::array::AsArray;
    batch
        .column_by_name(name)
        .and_then(|a| a.as_primitive_opt::<arrow::datatypes::TimestampMicrosecondType>())
}

/// The projection of a file onto the named columns (those it has).
fn projection(
    schema: &arrow::datatypes::Schema,
    parquet: &parquet::schema::types::SchemaDescriptor,
    columns: &[&str],
) -> ProjectionMask {
    let indices = columns.iter().filter_map(|c| schema.index_of(c).ok());
    ProjectionMask::roots(parquet, indices)
}

/// The batch size for a read of row groups `groups` of a file: their
/// largest group's rows, at most 64 Ki. A stream of row groups gives a
/// group's rows in batches of their own, and the decoder reserves room for
/// a whole batch in every column before it reads a page: with batches of
/// 64 Ki rows a group of 4 Ki rows of `tasks` held 18 times its rows'
/// bytes (`a_decoded_row_group_holds_about_its_rows_bytes`), and the read
/// cache, which counts what the arrays hold, kept that much fewer groups.
fn batch_rows(meta: &parquet::file::metadata::ParquetMetaData, groups: &[usize]) -> usize {
    groups
        .iter()
        .filter_map(|&g| meta.row_groups().get(g))
        .map(|g| g.num_rows().max(0) as usize)
        .max()
        .unwrap_or(0)
        .clamp(1, 64 * 1024)
}

/// What a read does with each batch it decodes, on the decoding task
/// ([`Store::scan_overlapping_then`]).
pub type Then<T> = Arc<dyn Fn(RecordBatch) -> T + Send + Sync>;

/// One row group of a stored file to decode, with the file's footer.
struct GroupRead {
    /// The file, as errors name it.
    name: String,
    reader: Ranged,
    meta: parquet::arrow::arrow_reader::ArrowReaderMetadata,
    group: usize,
    mask: Option<ProjectionMask>,
    /// The read cache and the group's key in it: decoded rows are taken
    /// from it, or kept in it (whole, before any row is filtered out).
    cache: Option<(Arc<ReadCache>, String)>,
}

impl GroupRead {
    /// Its rows, once polled, each handed to `then`: taken from the cache
    /// or decoded, on a task of its own (inline outside a Tokio runtime);
    /// dropping the future stops the task.
    fn rows_then<T: Send + 'static>(
        self,
        then: Then<T>,
    ) -> futures::future::BoxFuture<'static, Result<Vec<T>>> {
        use futures::FutureExt;
        let name = self.name.clone();
        let work = async move {
            let cached = match &self.cache {
                Some((cache, key)) => match cache.get(key) {
                    Some(Cached::Rows(rows)) => Some(rows.as_ref().clone()),
                    _ => None,
                },
                None => None,
            };
            let rows = match cached {
                Some(rows) => rows,
                None => self.decode().await?,
            };
            Ok(rows.into_iter().map(|b| then(b)).collect())
        };
        async move {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return work.await;
            };
            Aborting(runtime.spawn(work))
                .await
                .map_err(|e| StoreError::Worker(format!("reading a row group of {name}: {e}")))?
        }
        .boxed()
    }

    async fn decode(self) -> Result<Vec<RecordBatch>> {
        use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
        let name = self.name;
        let perr = |source| StoreError::Parquet {
            path: name.clone(),
            source,
        };
        let rows = batch_rows(self.meta.metadata(), &[self.group]);
        let mut builder =
            ParquetRecordBatchStreamBuilder::new_with_metadata(self.reader, self.meta)
                .with_batch_size(rows)
                .with_row_groups(vec![self.group]);
        if let Some(mask) = self.mask {
            builder = builder.with_projection(mask);
        }
        let rows: Vec<RecordBatch> = builder
            .build()
            .map_err(perr)?
            .try_collect()
            .await
            .map_err(perr)?;
        if let Some((cache, key)) = self.cache {
            cache.put(key, Cached::Rows(Arc::new(rows.clone())));
        }
        Ok(rows)
    }
}

/// A task's handle that stops the task when dropped: a read or a
/// compaction given up (a statement cancelled, a server stopping, a read
/// failed) decodes nothing more for nothing.
pub(crate) struct Aborting<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> std::future::Future for Aborting<T> {
    type Output = std::result::Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Row groups a time-pruned read decodes at once, each on a task of its
/// own: four a core, at most [`MAX_DECODERS`]. A group's task waits for
/// its bytes, then decodes them and does the reader's work on its rows
/// (`Store::scan_overlapping_then`): with one a core and one more (three
/// on two cores) the cores were idle a fifth of a focused read's window
/// rows' time (docs/performance.md, twenty-third session). What they
/// decode ahead of the reader is not counted in a memory budget: at most
/// this many row groups and the one being handed out (a group is 4 Ki
/// rows of tasks, window rows or host rows, about 0.3 MB of window rows),
/// with what the reader's work on them gave.
fn decoders() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .saturating_mul(4)
        .min(MAX_DECODERS)
}

/// The most row groups one read decodes at once, however many cores.
const MAX_DECODERS: usize = 8;

/// A stored file read by ranges: its footer, then the column chunks of the
/// row groups a reader keeps.
#[derive(Clone)]
struct Ranged {
    store: Arc<dyn ObjectStore>,
    path: Path,
    /// Its footer, when a cache had it: then not read again.
    footer: Option<Arc<parquet::file::metadata::ParquetMetaData>>,
}

impl parquet::arrow::async_reader::MetadataSuffixFetch for &mut Ranged {
    fn fetch_suffix(
        &mut self,
        suffix: usize,
    ) -> futures::future::BoxFuture<'_, parquet::errors::Result<bytes::Bytes>> {
        use futures::FutureExt;
        let options = object_store::GetOptions {
            range: Some(object_store::GetRange::Suffix(suffix as u64)),
            ..Default::default()
        };
        async move {
            let err = |e| parquet::errors::ParquetError::External(Box::new(e));
            self.store
                .get_opts(&self.path, options)
                .await
                .map_err(err)?
                .bytes()
                .await
                .map_err(err)
        }
        .boxed()
    }
}

impl parquet::arrow::async_reader::AsyncFileReader for Ranged {
    fn get_bytes(
        &mut self,
        range: std::ops::Range<u64>,
    ) -> futures::future::BoxFuture<'_, parquet::errors::Result<bytes::Bytes>> {
        use futures::FutureExt;
        async move {
            self.store
                .get_range(&self.path, range)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<std::ops::Range<u64>>,
    ) -> futures::future::BoxFuture<'_, parquet::errors::Result<Vec<bytes::Bytes>>> {
        use futures::FutureExt;
        async move {
            self.store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a parquet::arrow::arrow_reader::ArrowReaderOptions>,
    ) -> futures::future::BoxFuture<
        'a,
        parquet::errors::Result<Arc<parquet::file::metadata::ParquetMetaData>>,
    > {
        use futures::FutureExt;
        async move {
            if let Some(footer) = &self.footer {
                return Ok(footer.clone());
            }
            let metadata = parquet::file::metadata::ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .load_via_suffix_and_finish(self)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// A data file's footer as reads use it: parsed for Arrow, and for a file
/// of a time table each row group's span ([`group_spans`]).
#[derive(Clone)]
pub(crate) struct Footer {
    pub meta: parquet::arrow::arrow_reader::ArrowReaderMetadata,
    pub spans: Option<Arc<[(i64, i64)]>>,
}

impl Footer {
    /// The memory it holds, about: the footer's metadata and the spans
    /// (the Arrow schema parsed from it, a few KB, is not counted).
    pub fn bytes(&self) -> usize {
        self.meta.metadata().memory_size()
            + self
                .spans
                .as_ref()
                .map_or(0, |s| std::mem::size_of_val(s.as_ref()))
    }
}

/// Of a file of a time table ([`crate::layout::time_columns`]), each row
/// group's earliest start and latest end by its statistics; the whole of
/// time for a group that lacks one (it is always read). `None` for other
/// tables.
fn group_spans(
    meta: &parquet::arrow::arrow_reader::ArrowReaderMetadata,
    table: &str,
) -> Option<Arc<[(i64, i64)]>> {
    let (starts, end) = crate::layout::time_columns(table)?;
    let schema = meta.parquet_schema();
    let index = |c: &str| schema.columns().iter().position(|d| d.name() == c);
    let start_idx: Vec<usize> = starts.iter().filter_map(|c| index(c)).collect();
    let end_idx = index(end);
    Some(
        meta.metadata()
            .row_groups()
            .iter()
            .map(|rg| {
                let first = start_idx
                    .iter()
                    .map(|&i| i64_stat(rg.column(i).statistics(), false))
                    .try_fold(i64::MAX, |acc, v| v.map(|v| acc.min(v)));
                let last = end_idx.and_then(|i| i64_stat(rg.column(i).statistics(), true));
                match (first, last) {
                    (Some(first), Some(last)) if !start_idx.is_empty() => (first, last),
                    _ => (i64::MIN, i64::MAX),
                }
            })
            .collect(),
    )
}

/// A row group's minimum (or maximum) of an INT64 column (times are
/// stored so), if written.
fn i64_stat(stats: Option<&parquet::file::statistics::Statistics>, max: bool) -> Option<i64> {
    match stats? {
        parquet::file::statistics::Statistics::Int64(s) => {
            if max {
                s.max_opt().copied()
            } else {
                s.min_opt().copied()
            }
        }
        _ => None,
    }
}

/// A stored file of a time table with its footer and its row groups by
/// their sort key ([`Store::keyed_groups`]).
pub(crate) struct KeyedFile {
    pub file: DataFile,
    pub footer: Arc<parquet::file::metadata::ParquetMetaData>,
    pub groups: Vec<KeyedGroup>,
}

/// A row group by the least and greatest value of its sort key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyedGroup {
    pub group: usize,
    pub min: i64,
    pub max: i64,
    pub rows: u64,
}

/// A Parquet file encoded in memory, not yet written.
struct Encoded {
    bytes: bytes::Bytes,
    rows: u64,
    span: Option<[i64; 2]>,
}

/// Rows per piece when one table's rows are cut to be encoded on every
/// core ([`encoders`]; each piece is a file).
const PIECE_ROWS: usize = 256 << 10;

/// Jobs of a write that may be started past the first whose files are
/// not written yet ([`PendingBatch::write_owned`]), at least.
const JOBS_AHEAD: usize = 4;

/// Jobs of a write that encode at once: one a core and one more (it was
/// two, whatever the cores). An ingest's main thread checks the next rows
/// while a write encodes, and waits for the write when they are ready;
/// with one job a core, a core idled while the write's last job ran alone.
/// With one more, the 1e7-task ingest on two cores waits about half as
/// long for its writes, and takes 1.5% less time (3.6% at 1e6 tasks;
/// docs/performance.md, "One more encoder than cores"). `culprit ingest`
/// sizes its runtime's blocking pool by it. Memory is bounded by the write
/// whatever the cores: a job gathers only its own rows, so the jobs
/// running at once hold at most one copy of the write's rows (more of it
/// at once the more encoders), and finished files wait at most
/// [`JOBS_AHEAD`] or one more than the encoders jobs ahead, whichever is
/// more.
pub fn encoders() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()) + 1
}

/// Rows of a write, by place: (batch, row).
pub(crate) type Rows = Vec<(usize, usize)>;

/// Every row of `batches`, in order.
pub(crate) fn every_row(batches: &[RecordBatch]) -> Rows {
    batches
        .iter()
        .enumerate()
        .flat_map(|(b, batch)| (0..batch.num_rows()).map(move |r| (b, r)))
        .collect()
}

/// `rows` sorted by their start (a time table; stable: rows of the same
/// start keep their order). Other tables' rows are returned as they are.
pub(crate) fn sort_by_start(table: Table, batches: &[RecordBatch], rows: Rows) -> Rows {
    use arrow::array::Array;
    let Some(first) = batches.first() else {
        return rows;
    };
    let Some(column) =
        crate::layout::sort_key(table.name()).filter(|c| first.column_by_name(c).is_some())
    else {
        return rows;
    };
    let keys: Vec<Option<&arrow::array::TimestampMicrosecondArray>> =
        batches.iter().map(|b| time_column(b, column)).collect();
    // A missing value sorts first, as `sort_to_indices` puts NULLs. The
    // keys are taken out first and ties keep the rows' order (a stable
    // sort by key, without looking a key up per comparison).
    let keyed: Vec<i64> = rows
        .iter()
        .map(|&(b, r)| match keys[b] {
            Some(k) if k.is_valid(r) => k.value(r),
            _ => i64::MIN,
        })
        .collect();
    // Rows of one batch that follow each other with the same start (a
    // task's rows of one window: one a resource) stay together: their
    // runs are sorted, a quarter as many as the rows in generated data.
    let mut firsts: Vec<usize> = Vec::new();
    let mut run_keys: Vec<i64> = Vec::new();
    for (at, (&(b, r), &k)) in rows.iter().zip(&keyed).enumerate() {
        let follows = at > 0 && {
            let (pb, pr) = rows[at - 1];
            pb == b && pr + 1 == r && keyed[at - 1] == k
        };
        if !follows {
            firsts.push(at);
            run_keys.push(k);
        }
    }
    firsts.push(rows.len());
    let mut out = Vec::with_capacity(rows.len());
    for run in order_by_key(&run_keys) {
        out.extend_from_slice(&rows[firsts[run]..firsts[run + 1]]);
    }
    out
}

/// The places `0..keys.len()` in the order of their keys, ties in the
/// places' order (a stable sort): a radix sort of the keys' offsets from
/// the least, [`RADIX_BITS`] bits a pass, as many passes as the keys'
/// range needs (two or three for the starts of a write's rows: seconds to
/// minutes, in microseconds). A comparison sort of `(key, place)` pairs
/// took 4-7% of the encoders' time in a profile of the ingest.
fn order_by_key(keys: &[i64]) -> Vec<usize> {
    let n = keys.len();
    let (Some(&min), Some(&max)) = (keys.iter().min(), keys.iter().max()) else {
        return Vec::new();
    };
    if n < 1 << 10 || u32::try_from(n).is_err() {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&at| keys[at]);
        return order;
    }
    // The true difference of two i64 fits a u64.
    let bits = 64 - (max.wrapping_sub(min) as u64).leading_zeros();
    let mut cur: Vec<(u64, u32)> = keys
        .iter()
        .enumerate()
        .map(|(at, &k)| (k.wrapping_sub(min) as u64, at as u32))
        .collect();
    let mut next = vec![(0u64, 0u32); n];
    let mask = (1u64 << RADIX_BITS) - 1;
    let mut shift = 0;
    while shift < bits {
        let mut starts = vec![0usize; 1 << RADIX_BITS];
        for &(k, _) in &cur {
            starts[((k >> shift) & mask) as usize] += 1;
        }
        let mut sum = 0;
        for s in starts.iter_mut() {
            let count = *s;
            *s = sum;
            sum += count;
        }
        for &e in &cur {
            let digit = ((e.0 >> shift) & mask) as usize;
            next[starts[digit]] = e;
            starts[digit] += 1;
        }
        std::mem::swap(&mut cur, &mut next);
        shift += RADIX_BITS;
    }
    cur.into_iter().map(|(_, at)| at as usize).collect()
}

/// Bits of a key sorted per pass of [`order_by_key`].
const RADIX_BITS: u32 = 11;

/// Gathers `rows` of `batches` into Parquet files of `table`, in that
/// order, of at most [`crate::layout::rows_per_file`] rows, in the store's format
/// ([`writer_properties`]: Snappy for the time tables, zstd level 1 for the
/// others; the table's row group size). CPU work: call it on the blocking
/// pool.
fn encode_files(
    table: Table,
    batches: &[RecordBatch],
    keys: Option<&[Vec<u32>]>,
    rows: &[(usize, usize)],
) -> Result<Vec<Encoded>> {
    let name = table.name();
    let schema = crate::layout::stored_schema(table);
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    let props = writer_properties(name, &schema);
    let mut out = Vec::new();
    let perr = |source| StoreError::Parquet {
        path: format!("(a new {name} file)"),
        source,
    };
    for part in rows.chunks(crate::layout::rows_per_file(name)) {
        let mut w =
            parquet::arrow::ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props.clone()))
                .map_err(perr)?;
        let mut span: Option<[i64; 2]> = None;
        // Gathered a row group at a time: its rows are still in the
        // cache when they are encoded.
        for group in part.chunks(crate::layout::rows_per_group(name)) {
            let gathered = crate::gather::gather(&refs, group)?;
            let batch = if gathered.schema() == schema {
                gathered
            } else {
                let mut columns = gathered.columns().to_vec();
                if columns.len() + 1 == schema.fields().len()
                    && schema.index_of(crate::layout::HOST_KEY).is_ok()
                {
                    // Each row's host key ([`crate::layout::HOST_KEY`]),
                    // NULL where not known.
                    columns.push(Arc::new(host_keys_of(keys, group)));
                }
                RecordBatch::try_new(schema.clone(), columns)?
            };
            if let Some(more) = window_span(name, &batch) {
                span = Some(widen(span, more));
            }
            w.write(&batch).map_err(perr)?;
        }
        let bytes = w.into_inner().map_err(perr)?;
        out.push(Encoded {
            bytes: bytes.into(),
            rows: part.len() as u64,
            span,
        });
    }
    Ok(out)
}

/// The host keys ([`crate::layout::HOST_KEY`]) of `rows` from `keys`
/// (`keys[b][i]`: that of row `i` of batch `b`), NULL where not known (no
/// key given, or [`crate::layout::NO_HOST_KEY`]).
fn host_keys_of(keys: Option<&[Vec<u32>]>, rows: &[(usize, usize)]) -> arrow::array::UInt32Array {
    let none = crate::layout::NO_HOST_KEY;
    let mut values: Vec<u32> = Vec::with_capacity(rows.len());
    let mut valid: Option<arrow::array::BooleanBufferBuilder> = None;
    for (at, &(b, i)) in rows.iter().enumerate() {
        let key = keys.and_then(|k| k.get(b)?.get(i).copied()).unwrap_or(none);
        if key == none && valid.is_none() {
            let mut built = arrow::array::BooleanBufferBuilder::new(rows.len());
            built.append_n(at, true);
            valid = Some(built);
        }
        if let Some(built) = valid.as_mut() {
            built.append(key != none);
        }
        values.push(if key == none { 0 } else { key });
    }
    let nulls = valid.map(|mut b| arrow::buffer::NullBuffer::new(b.finish()));
    arrow::array::UInt32Array::new(values.into(), nulls)
}

/// How the store writes a Parquet file of table `name` (`schema`): Snappy
/// for the time tables and the stored shares (below), zstd level 1 for the
/// others; the table's row group size; and a dictionary only where it
/// pays (measured when every table was written with zstd): not for
/// numbers and times (mostly distinct values: a dictionary
/// there costs a hash of every value and saves nothing zstd does not),
/// nor for task ids (one per task) nor any column of `task_windows` but
/// its host keys (its text is task ids and a handful of resources:
/// interning every value cost its writers 9% of their time, and zstd
/// alone stores the table 1.6% smaller). The other text columns (hosts,
/// queries, stages) keep theirs.
fn writer_properties(name: &str, schema: &arrow::datatypes::Schema) -> WriterProperties {
    use arrow::datatypes::DataType;
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("level")))
        .set_max_row_group_row_count(Some(crate::layout::rows_per_group(name)));
    if crate::layout::time_columns(name).is_some() {
        // Snappy, not zstd: a read decodes the row groups of a time, and
        // zstd made a context (two, compressing and decompressing) for
        // every column chunk read, a tenth of a warm server's time for a
        // far victim, and decoded slower. Files are larger: 23% on
        // generated data (1e6 tasks: 358.3 MiB against 291.4 MiB), about
        // twice on real Spark event logs (docs/performance.md).
        props = props.set_compression(Compression::SNAPPY);
        // A time table's row group is small (`rows_per_group`): one page a
        // column unless its values pass 1 MiB, so page statistics (a column
        // index) would repeat the chunk's, and building them cost the
        // encoders a tenth of their allocations.
        props = props.set_statistics_enabled(parquet::file::properties::EnabledStatistics::Chunk);
    }
    if name == "task_windows" {
        // Nor statistics of its resources and details: every row group
        // holds every resource, so they prune nothing, and they cost a
        // comparison of every value (with the window rows' task ids, the
        // encoders' fifth most costly call).
        // Nor of its rows' host keys (hashes: a group's minimum and maximum
        // span about every key).
        for column in ["resource", "detail", crate::layout::HOST_KEY] {
            props = props.set_column_statistics_enabled(
                parquet::schema::types::ColumnPath::from(column),
                parquet::file::properties::EnabledStatistics::None,
            );
        }
        // The host keys keep a dictionary: a bucket's file holds the keys
        // of a few hundred hosts, so a row's key is stored in about a byte
        // where plain it took four (hashes do not compress).
        return props
            .set_dictionary_enabled(false)
            .set_column_dictionary_enabled(
                parquet::schema::types::ColumnPath::from(crate::layout::HOST_KEY),
                true,
            )
            .build();
    }
    for field in schema.fields() {
        if matches!(
            field.data_type(),
            DataType::Float64 | DataType::Float32 | DataType::Timestamp(..)
        ) || field.name() == "task_id"
        {
            props = props.set_column_dictionary_enabled(
                parquet::schema::types::ColumnPath::from(field.name().as_str()),
                false,
            );
        }
    }
    props.build()
}

/// A query's entry in the query index ([`crate::layout::QUERY_SPANS`]),
/// over the batches that wrote its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuerySpan {
    /// The earliest ready or launch time of its tasks, µs.
    pub first: i64,
    /// The latest finish of its tasks, µs.
    pub last: i64,
    /// How many tasks.
    pub tasks: u64,
    /// The earliest launch of its tasks, µs; `None` when an index file
    /// written before it was recorded holds some of them.
    pub first_launch: Option<i64>,
}

impl QuerySpan {
    /// Adds `other`, the same query's entry of another batch.
    fn add(&mut self, other: &QuerySpan) {
        self.first = self.first.min(other.first);
        self.last = self.last.max(other.last);
        self.tasks += other.tasks;
        self.first_launch = match (self.first_launch, other.first_launch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
    }
}

/// The query index of `tasks` rows added batch by batch (one entry per
/// query, so its memory is the queries', not the tasks'): per query, the
/// earliest ready or launch time, the latest finish, the number of tasks
/// and the earliest launch.
#[derive(Debug, Default)]
pub(crate) struct SpanIndex(BTreeMap<String, QuerySpan>);

impl SpanIndex {
    /// The queries indexed.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds the tasks of `b` (rows without a query, launch or finish are
    /// not indexed, as they are not analysed).
    pub(crate) fn add(&mut self, b: &RecordBatch) {
        use arrow::array::{Array, AsArray};
        let Some(ids) = b
            .column_by_name("query_id")
            .and_then(|c| c.as_string_opt::<i32>())
        else {
            return;
        };
        let (Some(launch), Some(finish)) =
            (time_column(b, "launch_time"), time_column(b, "finish_time"))
        else {
            return;
        };
        let ready = time_column(b, "ready_time");
        for i in 0..b.num_rows() {
            if ids.is_null(i) || launch.is_null(i) || finish.is_null(i) {
                continue;
            }
            let mut first = launch.value(i);
            if let Some(r) = ready.filter(|r| r.is_valid(i)) {
                first = first.min(r.value(i));
            }
            let row = QuerySpan {
                first,
                last: finish.value(i),
                tasks: 1,
                first_launch: Some(launch.value(i)),
            };
            // A query's tasks are many: its id is copied once, not a row.
            let id = ids.value(i);
            match self.0.get_mut(id) {
                Some(e) => e.add(&row),
                None => {
                    self.0.insert(id.to_string(), row);
                }
            }
        }
    }

    /// The index rows, in one batch (none for no query).
    pub(crate) fn finish(self) -> Result<Vec<RecordBatch>> {
        use arrow::array::{StringArray, TimestampMicrosecondArray, UInt64Array};
        let spans = self.0;
        if spans.is_empty() {
            return Ok(Vec::new());
        }
        let ids = StringArray::from_iter_values(spans.keys());
        let times = |f: fn(&QuerySpan) -> Option<i64>| {
            TimestampMicrosecondArray::from_iter(spans.values().map(f)).with_timezone("UTC")
        };
        let first = times(|v| Some(v.first));
        let last = times(|v| Some(v.last));
        let launch = times(|v| v.first_launch);
        let n = UInt64Array::from_iter_values(spans.values().map(|v| v.tasks));
        Ok(vec![RecordBatch::try_new(
            crate::layout::query_spans_schema(),
            vec![
                Arc::new(ids),
                Arc::new(first),
                Arc::new(last),
                Arc::new(n),
                Arc::new(launch),
            ],
        )?])
    }
}

/// A change of a user table, applied at commit.
#[derive(Debug, Clone)]
enum UserChange {
    Create {
        table: UserTable,
        replace: bool,
        if_not_exists: bool,
    },
    ReplaceRows(String),
    /// These files of the table go.
    Expire(String, Vec<String>),
    /// Compaction: these files of a telemetry table were merged into the
    /// batch's files. Every one must still be listed (else another
    /// compaction took it first and the commit fails); they move to
    /// `retired`, removed later.
    Merged(String, Vec<String>),
    /// Retired files removed from the store: no longer listed as retired.
    Forget(Vec<String>),
    Drop {
        name: String,
        if_exists: bool,
    },
    Append {
        table: UserTable,
    },
}

/// A change of the scheduled jobs, applied at commit.
#[derive(Debug, Clone)]
pub enum JobChange {
    /// Adds a job (its `jobid` is given at commit), or changes the job of
    /// that name.
    Schedule(CronJob),
    /// Removes the job of this name (or id), as this user (only its owner
    /// may).
    Unschedule { job: String, user: String },
    /// A run of the job: its time and id.
    Ran {
        jobid: i64,
        scheduled_for: i64,
        runid: i64,
    },
}

/// The schema of the reports' history tables (`reports.<job>`).
pub const REPORTS_SCHEMA: &str = "reports";
/// pg_cron's table of runs.
pub const RUN_DETAILS_TABLE: &str = "cron.job_run_details";

/// The pages of the reports scheduled with `format => 'html'`, one per
/// run (culprit's; pg_cron has none).
pub const PAGES_TABLE: &str = "cron.report_pages";

/// The columns of `cron.report_pages`.
pub fn pages_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    Arc::new(Schema::new(vec![
        Field::new("jobid", DataType::Int64, true),
        Field::new("runid", DataType::Int64, true),
        Field::new("jobname", DataType::Utf8, true),
        Field::new("scheduled_for", ts, true),
        Field::new("page", DataType::Utf8, true),
    ]))
}

/// The columns of `cron.job_run_details`, as pg_cron has them.
pub fn run_details_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    Arc::new(Schema::new(vec![
        Field::new("jobid", DataType::Int64, true),
        Field::new("runid", DataType::Int64, true),
        Field::new("job_pid", DataType::Int32, true),
        Field::new("database", DataType::Utf8, true),
        Field::new("username", DataType::Utf8, true),
        Field::new("command", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, true),
        Field::new("return_message", DataType::Utf8, true),
        Field::new("start_time", ts.clone(), true),
        Field::new("end_time", ts, true),
    ]))
}

/// A user table's name, or the name of a table the scheduler keeps
/// (`reports.<job>`, `cron.job_run_details`), which only it writes.
fn check_table_name(name: &str) -> Result<()> {
    if name == RUN_DETAILS_TABLE || name == PAGES_TABLE {
        return Ok(());
    }
    match name.strip_prefix("reports.") {
        Some(job) => check_user_table_name(job),
        None => check_user_table_name(name),
    }
}

/// The refusal of a change to telemetry table `name` by SQL: telemetry
/// changes only through ingest.
pub fn telemetry_refusal(name: &str) -> StoreError {
    StoreError::UserTable {
        table: name.to_string(),
        reason: "is a telemetry table: it changes only through `culprit ingest`".into(),
        code: UserTableProblem::Telemetry,
    }
}

/// Checks a user table's name: lower-case letters, digits and `_`, not
/// starting with a digit, at most 63 bytes (PostgreSQL's identifiers, as
/// clients write them unquoted), not a telemetry table nor a reserved
/// prefix.
pub fn check_user_table_name(name: &str) -> Result<()> {
    let bad = |code, reason: String| StoreError::UserTable {
        table: name.to_string(),
        reason,
        code,
    };
    if name.parse::<Table>().is_ok() {
        return Err(telemetry_refusal(name));
    }
    let valid = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !valid {
        return Err(bad(
            UserTableProblem::Invalid,
            "is not a valid table name (lower-case letters, digits and _, not starting \
             with a digit, at most 63 characters)"
                .into(),
        ));
    }
    if name.starts_with("pg_") || name == "task_runs" {
        return Err(bad(
            UserTableProblem::Invalid,
            "is reserved (pg_ names are the catalog's; task_runs is culprit's view)".into(),
        ));
    }
    Ok(())
}

/// What a commit made visible.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    /// The id of the job a `JobChange::Schedule` made or changed.
    pub job: Option<i64>,
    pub version: u64,
    pub batch: String,
    pub rows: BTreeMap<String, u64>,
    pub files: usize,
}

/// A derived object being written ([`Store::derived_writer`]).
pub struct DerivedWriter {
    store: Store,
    relative: String,
    writer: Option<AsyncArrowWriter<BufWriter>>,
}

impl DerivedWriter {
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        w.write(batch).await.map_err(|source| StoreError::Parquet {
            path: self.relative.clone(),
            source,
        })
    }

    /// Completes the object (it appears whole); its size in bytes.
    pub async fn finish(mut self) -> Result<u64> {
        if let Some(w) = self.writer.take() {
            w.close().await.map_err(|source| StoreError::Parquet {
                path: self.relative.clone(),
                source,
            })?;
        }
        Ok(self
            .store
            .derived_size(&self.relative)
            .await?
            .unwrap_or_default())
    }
}

/// [`BatchInfo::kind`] of a compaction's batch: the same rows.
pub(crate) const COMPACT: &str = "compact";
/// [`BatchInfo::kind`] of an expiry's batch.
pub(crate) const EXPIRE: &str = "expire";

/// A batch being written: its files exist but no manifest lists them yet.
pub struct PendingBatch {
    store: Store,
    id: String,
    files: Vec<DataFile>,
    sources: Vec<SourceRecord>,
    parts: BTreeMap<String, usize>,
    /// What the batch does to user tables, applied to the manifest it
    /// commits on (so a concurrent commit is checked again).
    user_changes: Vec<UserChange>,
    /// What the batch does to scheduled jobs.
    job_changes: Vec<JobChange>,
    /// `compact` for a compaction's batch ([`BatchInfo::kind`]).
    pub(crate) kind: Option<&'static str>,
    /// The host key of every task this batch has seen
    /// ([`crate::layout::host_key`]), so that its window rows are written
    /// bucket by bucket, each with its host's key.
    task_keys: std::collections::HashMap<(u64, u64), u32>,
    /// Whether writing `tasks` notes them ([`PendingBatch::set_note_tasks`]).
    note_tasks: bool,
    /// The query index of the tasks written, not yet in a file: written
    /// at commit (or when it holds [`INDEX_QUERIES`] queries), so a batch
    /// has one index file however many writes of tasks it makes.
    index: SpanIndex,
}

/// The queries a batch's query index holds in memory before it is written
/// to a file of its own (its memory, about 100 bytes a query, stays
/// bounded however many queries a batch has).
const INDEX_QUERIES: usize = 1 << 16;

impl PendingBatch {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The files written so far.
    pub fn written(&self) -> &[DataFile] {
        &self.files
    }

    /// Rows written so far, per table.
    pub fn rows(&self) -> BTreeMap<String, u64> {
        let mut rows = BTreeMap::new();
        // The query index is culprit's, not rows a user stored.
        for f in self
            .files
            .iter()
            .filter(|f| f.table != crate::layout::QUERY_SPANS)
        {
            *rows.entry(f.table.clone()).or_insert(0) += f.rows;
        }
        rows
    }

    /// Records a source as ingested by this batch: its key, its name and
    /// the bytes hashed for its key.
    pub fn add_source(&mut self, key: String, name: String, size: u64) {
        self.sources.push(SourceRecord {
            key,
            name,
            batch: self.id.clone(),
            size: Some(size),
        });
    }

    /// Whether writing `tasks` rows notes their hosts' keys (the default):
    /// off for a writer that gives the host keys of its window rows itself
    /// ([`PendingBatch::write_routed`]), so the batch keeps no map of every
    /// task.
    pub fn set_note_tasks(&mut self, on: bool) {
        self.note_tasks = on;
    }

    /// Notes the hosts of `tasks` rows (call it as soon as tasks are known,
    /// before their window rows are written): `task_windows` rows are then
    /// written in one file per host bucket, which lets the blame sweep read
    /// a few hosts at a time. Writing `tasks` notes them too.
    pub fn note_tasks(&mut self, tasks: &RecordBatch) {
        use arrow::array::{Array, AsArray};
        let (Some(id), Some(host)) = (
            tasks.column_by_name("task_id"),
            tasks.column_by_name("host"),
        ) else {
            return;
        };
        let (Some(id), Some(host)) = (id.as_string_opt::<i32>(), host.as_string_opt::<i32>())
        else {
            return;
        };
        for i in 0..tasks.num_rows() {
            if id.is_valid(i) && host.is_valid(i) {
                // A task noted again on another host: its rows get no key
                // (a read then looks them up, as it keeps one of the two).
                let key = crate::layout::host_key(host.value(i));
                self.task_keys
                    .entry(crate::layout::text_digest(id.value(i)))
                    .and_modify(|k| {
                        if *k != key {
                            *k = crate::layout::NO_HOST_KEY;
                        }
                    })
                    .or_insert(key);
            }
        }
    }

    /// The rows of `task_windows` batches by the bucket of the host key
    /// given for each (`routes`, one per row of each batch); rows of no
    /// key ([`crate::layout::NO_HOST_KEY`]) go last, under `None`.
    fn by_route(routes: &[Vec<u32>]) -> Vec<(Option<u32>, Rows)> {
        let n = crate::layout::HOST_BUCKETS as usize;
        let mut out: Vec<Rows> = vec![Vec::new(); n + 1];
        for (bi, route) in routes.iter().enumerate() {
            for (i, key) in route.iter().enumerate() {
                let b = crate::layout::key_bucket(*key).map_or(n, |b| b as usize);
                out[b].push((bi, i));
            }
        }
        out.into_iter()
            .enumerate()
            .filter(|(_, v)| !v.is_empty())
            .map(|(b, v)| ((b < n).then_some(b as u32), v))
            .collect()
    }

    /// The host keys of the tasks of `task_windows` batches' rows, as
    /// [`Self::write_routed`] takes them: [`crate::layout::NO_HOST_KEY`]
    /// for a task this batch has not seen.
    fn routes(&self, batches: &[RecordBatch]) -> Vec<Vec<u32>> {
        use arrow::array::{Array, AsArray};
        let none = crate::layout::NO_HOST_KEY;
        batches
            .iter()
            .map(|batch| {
                let ids = batch
                    .column_by_name("task_id")
                    .and_then(|c| c.as_string_opt::<i32>());
                let mut last: Option<(usize, u32)> = None;
                (0..batch.num_rows())
                    .map(|i| match ids.filter(|ids| ids.is_valid(i)) {
                        None => none,
                        // Consecutive rows usually name the same task.
                        Some(ids) => match last {
                            Some((j, key)) if ids.value(j) == ids.value(i) => key,
                            _ => {
                                let key = self
                                    .task_keys
                                    .get(&crate::layout::text_digest(ids.value(i)))
                                    .map_or(none, |k| *k);
                                last = Some((i, key));
                                key
                            }
                        },
                    })
                    .collect()
            })
            .collect()
    }

    /// Writes rows of a table (in its canonical schema) as one or more
    /// Parquet files. Empty input writes nothing. `task_windows` rows go to
    /// one file (or more) per host bucket (see [`PendingBatch::note_tasks`]).
    /// Rows of the time tables are written sorted by their start, and
    /// `tasks` rows are added to the batch's query index
    /// ([`crate::layout::QUERY_SPANS`], written at commit): see the layout
    /// module.
    ///
    /// The files are sorted and encoded on the blocking pool, one a core
    /// and one more at a time ([`encoders`]; the buckets of window rows, the
    /// pieces of the other tables' rows), so a write uses every core;
    /// memory holds the rows given and the encoded files being written.
    pub async fn write(&mut self, table: Table, batches: &[RecordBatch]) -> Result<()> {
        self.write_owned(table, batches.to_vec()).await
    }

    /// [`Self::write`] of rows the batch may keep (and drop as soon as
    /// they are encoded): no copy of them is made but the sorted files'.
    pub async fn write_owned(&mut self, table: Table, batches: Vec<RecordBatch>) -> Result<()> {
        self.write_inner(table, batches, None).await
    }

    /// [`Self::write_owned`] of `task_windows` rows whose tasks' host keys
    /// the caller gives ([`crate::layout::host_key`]): `keys[b][i]` is the
    /// key of row `i` of batch `b` ([`crate::layout::NO_HOST_KEY`]: not
    /// known), instead of those of the tasks noted. Each row is written in
    /// its key's bucket, with its key ([`crate::layout::HOST_KEY`]).
    pub async fn write_routed(
        &mut self,
        table: Table,
        batches: Vec<RecordBatch>,
        keys: Vec<Vec<u32>>,
    ) -> Result<()> {
        if keys.len() != batches.len()
            || batches
                .iter()
                .zip(&keys)
                .any(|(b, r)| b.num_rows() != r.len())
        {
            return Err(StoreError::Worker(
                "write_routed: a host key is not given for every row".into(),
            ));
        }
        self.write_inner(table, batches, Some(keys)).await
    }

    async fn write_inner(
        &mut self,
        table: Table,
        batches: Vec<RecordBatch>,
        routes: Option<Vec<Vec<u32>>>,
    ) -> Result<()> {
        let (batches, routes): (Vec<RecordBatch>, Option<Vec<Vec<u32>>>) = match routes {
            None => (
                batches.into_iter().filter(|b| b.num_rows() > 0).collect(),
                None,
            ),
            Some(routes) => {
                let (b, r) = batches
                    .into_iter()
                    .zip(routes)
                    .filter(|(b, _)| b.num_rows() > 0)
                    .unzip();
                (b, Some(r))
            }
        };
        if batches.is_empty() {
            return Ok(());
        }
        if table == Table::Tasks {
            for b in &batches {
                if self.note_tasks {
                    self.note_tasks(b);
                }
                self.index.add(b);
            }
        }
        let batches = Arc::new(batches);
        // Window rows' host keys: given, or those of the tasks noted.
        let routes = match routes {
            Some(routes) => Some(routes),
            None if table == Table::TaskWindows => Some(self.routes(&batches)),
            None => None,
        };
        let routes = routes.filter(|_| table == Table::TaskWindows).map(Arc::new);
        let groups: Vec<(Option<u32>, Rows, bool)> = if let Some(routes) = &routes {
            // Each bucket is sorted by its job.
            Self::by_route(routes)
                .into_iter()
                .map(|(b, rows)| (b, rows, true))
                .collect()
        } else {
            // One group, sorted here, then cut into pieces that encode on
            // every core, each covering its own stretch of time.
            let all = every_row(&batches);
            let shared = batches.clone();
            let sorted = tokio::task::spawn_blocking(move || sort_by_start(table, &shared, all))
                .await
                .map_err(|e| StoreError::Worker(e.to_string()))?;
            let count = sorted.len().div_ceil(PIECE_ROWS).max(1);
            let size = sorted.len().div_ceil(count).max(1);
            sorted
                .chunks(size)
                .map(|c| (None, c.to_vec(), false))
                .collect()
        };
        let mut jobs = groups
            .into_iter()
            .enumerate()
            .map(|(job, (bucket, rows, sort))| {
                let (batches, routes) = (batches.clone(), routes.clone());
                async move {
                    let encoded = tokio::task::spawn_blocking(move || {
                        let rows = if sort {
                            sort_by_start(table, &batches, rows)
                        } else {
                            rows
                        };
                        encode_files(table, &batches, routes.as_deref().map(Vec::as_slice), &rows)
                    })
                    .await
                    .map_err(|e| StoreError::Worker(e.to_string()))??;
                    Ok::<_, StoreError>((job, bucket, encoded))
                }
            });
        // `encoders()` jobs encode at a time, the next starting as soon as
        // one is done (in order, one done early waited for the others: a
        // core idle), at most `JOBS_AHEAD` (or one more than the encoders)
        // past the first not written (the files done early wait in
        // memory); their files are written in the jobs' order all the same.
        let encoders = encoders();
        let ahead = JOBS_AHEAD.max(encoders + 1);
        let mut running = futures::stream::FuturesUnordered::new();
        let mut done: BTreeMap<usize, (Option<u32>, Vec<Encoded>)> = BTreeMap::new();
        let (mut started, mut next) = (0, 0);
        loop {
            while running.len() < encoders && started < next + ahead {
                let Some(job) = jobs.next() else { break };
                running.push(job);
                started += 1;
            }
            let Some(finished) = running.try_next().await? else {
                break;
            };
            let (job, bucket, files) = finished;
            done.insert(job, (bucket, files));
            while let Some((bucket, files)) = done.remove(&next) {
                for file in files {
                    self.put_encoded(table, bucket, file).await?;
                }
                next += 1;
            }
        }
        if self.index.len() >= INDEX_QUERIES {
            self.write_index().await?;
        }
        Ok(())
    }

    /// Writes the query index of the tasks written since the last one
    /// ([`Self::index`]) as a file, if any.
    async fn write_index(&mut self) -> Result<()> {
        let rows = std::mem::take(&mut self.index).finish()?;
        if rows.is_empty() {
            return Ok(());
        }
        let id = self.id.clone();
        let schema = crate::layout::query_spans_schema();
        self.write_parquet(crate::layout::QUERY_SPANS, &schema, &rows, None, |part| {
            paths::query_spans_file(&id, part)
        })
        .await
    }

    /// Writes one encoded file of `table` as a single object. It is recorded
    /// before it is written, so that an abort removes it even after a failed
    /// write.
    async fn put_encoded(
        &mut self,
        table: Table,
        bucket: Option<u32>,
        file: Encoded,
    ) -> Result<()> {
        let name = table.name();
        let part = self.parts.entry(name.to_string()).or_insert(0);
        let rel = paths::data_file(table, &self.id, *part);
        *part += 1;
        self.files.push(DataFile {
            table: name.to_string(),
            path: rel.clone(),
            rows: file.rows,
            bytes: file.bytes.len() as u64,
            batch: self.id.clone(),
            bucket,
            window_span: file.span,
        });
        self.store
            .object_store
            .put(&self.store.path(&rel), PutPayload::from(file.bytes))
            .await
            .map_err(self.store.os_err())?;
        Ok(())
    }

    /// Writes rows as Parquet files of `schema` named by `path` (from the
    /// part number), recorded under the table `name`.
    async fn write_parquet(
        &mut self,
        name: &str,
        schema: &arrow::datatypes::SchemaRef,
        batches: &[RecordBatch],
        bucket: Option<u32>,
        path: impl Fn(usize) -> String,
    ) -> Result<()> {
        let batches = futures::stream::iter(batches.iter().cloned().map(Ok));
        self.write_parquet_stream(name, schema, batches, bucket, path)
            .await
    }

    /// [`Self::write_parquet`] of rows as they stream in (memory holds a
    /// batch and the open file's row group).
    pub(crate) async fn write_parquet_stream(
        &mut self,
        name: &str,
        schema: &arrow::datatypes::SchemaRef,
        batches: impl futures::Stream<Item = Result<RecordBatch>>,
        bucket: Option<u32>,
        path: impl Fn(usize) -> String,
    ) -> Result<()> {
        let mut current: Option<(AsyncArrowWriter<BufWriter>, String, u64)> = None;
        let mut batches = std::pin::pin!(batches);
        while let Some(batch) = batches.try_next().await? {
            if batch.num_rows() == 0 {
                continue;
            }
            let batch = if batch.schema() == *schema {
                batch
            } else {
                RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?
            };
            let mut offset = 0;
            while offset < batch.num_rows() {
                if current.is_none() {
                    let part = self.parts.entry(name.to_string()).or_insert(0);
                    let rel = path(*part);
                    *part += 1;
                    let props = writer_properties(name, schema);
                    let writer =
                        BufWriter::new(self.store.object_store.clone(), self.store.path(&rel));
                    let w = AsyncArrowWriter::try_new(writer, schema.clone(), Some(props))
                        .map_err(|source| StoreError::Parquet {
                            path: rel.clone(),
                            source,
                        })?;
                    // Recorded at once, so that an abort removes whatever part
                    // of it reached the store, even after a failed write.
                    self.files.push(DataFile {
                        table: name.to_string(),
                        path: rel.clone(),
                        rows: 0,
                        bytes: 0,
                        batch: self.id.clone(),
                        bucket,
                        window_span: None,
                    });
                    current = Some((w, rel, 0));
                }
                let (w, rel, rows) = current.as_mut().expect("writer open");
                let per_file = crate::layout::rows_per_file(name);
                let take = (per_file - *rows as usize).min(batch.num_rows() - offset);
                let slice = batch.slice(offset, take);
                w.write(&slice)
                    .await
                    .map_err(|source| StoreError::Parquet {
                        path: rel.clone(),
                        source,
                    })?;
                if let Some(span) = window_span(name, &slice) {
                    let file = self.files.last_mut().expect("recorded when opened");
                    file.window_span = Some(widen(file.window_span, span));
                }
                *rows += take as u64;
                offset += take;
                if *rows as usize >= per_file {
                    let (w, rel, rows) = current.take().expect("writer open");
                    self.finish_file(w, rel, rows).await?;
                }
            }
        }
        if let Some((w, rel, rows)) = current.take() {
            self.finish_file(w, rel, rows).await?;
        }
        Ok(())
    }

    /// Creates a user table with these columns when the batch commits.
    /// `replace` drops a table of that name first (its rows too);
    /// otherwise an existing one is an error at commit, or, with
    /// `if_not_exists`, left as it is.
    pub fn create_user_table(
        &mut self,
        name: &str,
        schema: &arrow::datatypes::Schema,
        replace: bool,
        if_not_exists: bool,
    ) -> Result<()> {
        check_table_name(name)?;
        self.user_changes.push(UserChange::Create {
            table: UserTable::new(name, schema, &self.id),
            replace,
            if_not_exists,
        });
        Ok(())
    }

    /// Makes the rows this batch writes to user table `name` its only rows
    /// when the batch commits (the table's older files are dropped).
    pub fn replace_user_rows(&mut self, name: &str) {
        self.user_changes
            .push(UserChange::ReplaceRows(name.to_string()));
    }

    /// Drops user table `name` (its rows too) when the batch commits; a
    /// missing table is an error unless `if_exists`.
    pub fn drop_user_table(&mut self, name: &str, if_exists: bool) -> Result<()> {
        check_table_name(name)?;
        self.user_changes.push(UserChange::Drop {
            name: name.to_string(),
            if_exists,
        });
        Ok(())
    }

    /// Writes rows to user table `name`, in `schema` (the table's, as the
    /// caller read it from the manifest or gave it to
    /// [`Self::create_user_table`]). The commit checks that the table
    /// still has these columns.
    pub async fn write_user(
        &mut self,
        name: &str,
        schema: &arrow::datatypes::SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<()> {
        check_table_name(name)?;
        self.user_changes.push(UserChange::Append {
            table: UserTable::new(name, schema, &self.id),
        });
        let id = self.id.clone();
        let folder = name.replace('.', "/");
        self.write_parquet(name, schema, batches, None, |part| {
            paths::user_data_file(&folder, &id, part)
        })
        .await
    }

    /// Changes a scheduled job when the batch commits.
    pub fn change_job(&mut self, change: JobChange) {
        self.job_changes.push(change);
    }

    /// Compaction: these files of `table` are replaced by the batch's files
    /// when it commits (they must all still be listed then).
    pub(crate) fn merged_files(&mut self, table: &str, paths: Vec<String>) {
        self.user_changes
            .push(UserChange::Merged(table.to_string(), paths));
    }

    /// Stops listing these retired files (removed from the store).
    pub(crate) fn forget_retired(&mut self, paths: Vec<String>) {
        self.user_changes.push(UserChange::Forget(paths));
    }

    /// Drops these files of a table when the batch commits (the expired
    /// history of a report).
    pub fn expire_files(&mut self, table: &str, paths: Vec<String>) {
        self.user_changes
            .push(UserChange::Expire(table.to_string(), paths));
    }

    /// Applies the batch's job changes; the job id a `Schedule` got.
    fn apply_job_changes(&self, manifest: &mut Manifest) -> Result<Option<i64>> {
        let missing = |name: &str| StoreError::UserTable {
            table: format!("(job) {name}"),
            reason: "no scheduled job has this name or id".into(),
            code: UserTableProblem::Missing,
        };
        let not_owner = |name: &str, owner: &str| StoreError::UserTable {
            table: format!("(job) {name}"),
            reason: format!("is scheduled by {owner}: only that user may change or unschedule it"),
            code: UserTableProblem::NotOwner,
        };
        let mut id = None;
        for change in &self.job_changes {
            match change {
                JobChange::Schedule(job) => {
                    // pg_cron: scheduling a name again changes that job.
                    if let Some(old) = manifest
                        .cron_jobs
                        .iter_mut()
                        .find(|j| j.jobname == job.jobname)
                    {
                        if old.username != job.username {
                            return Err(not_owner(&old.jobname, &old.username));
                        }
                        old.schedule = job.schedule.clone();
                        old.command = job.command.clone();
                        old.format = job.format.clone();
                        old.active = true;
                        // The new schedule counts from now.
                        old.created = job.created;
                        old.last_scheduled = None;
                        id = Some(old.jobid);
                    } else {
                        let highest = manifest
                            .cron_jobs
                            .iter()
                            .map(|j| j.jobid)
                            .max()
                            .unwrap_or(0);
                        let jobid = highest.max(manifest.last_jobid) + 1;
                        manifest.last_jobid = jobid;
                        let mut job = job.clone();
                        job.jobid = jobid;
                        manifest.cron_jobs.push(job);
                        id = Some(jobid);
                    }
                }
                JobChange::Unschedule { job, user } => {
                    let Some(found) = manifest
                        .cron_jobs
                        .iter()
                        .find(|j| &j.jobname == job || j.jobid.to_string() == *job)
                    else {
                        return Err(missing(job));
                    };
                    if &found.username != user {
                        return Err(not_owner(&found.jobname, &found.username));
                    }
                    let jobid = found.jobid;
                    manifest.cron_jobs.retain(|j| j.jobid != jobid);
                }
                JobChange::Ran {
                    jobid,
                    scheduled_for,
                    runid,
                } => {
                    if let Some(job) = manifest.cron_jobs.iter_mut().find(|j| j.jobid == *jobid) {
                        job.last_scheduled = Some(
                            job.last_scheduled
                                .map_or(*scheduled_for, |t| t.max(*scheduled_for)),
                        );
                        job.last_runid = job.last_runid.max(*runid);
                    }
                }
            }
        }
        Ok(id)
    }

    /// Applies the batch's user-table changes to `manifest`; returns the
    /// files no longer listed (to remove once committed).
    fn apply_user_changes(&self, manifest: &mut Manifest) -> Result<Vec<DataFile>> {
        let problem = |table: &str, code: UserTableProblem, reason: &str| StoreError::UserTable {
            table: table.to_string(),
            reason: reason.to_string(),
            code,
        };
        let mut gone = Vec::new();
        let mine = |f: &DataFile| f.batch == self.id;
        let drop_rows = |manifest: &mut Manifest, name: &str, gone: &mut Vec<DataFile>| {
            let (old, keep): (Vec<DataFile>, Vec<DataFile>) = std::mem::take(&mut manifest.files)
                .into_iter()
                .partition(|f| f.table == name && !mine(f));
            manifest.files = keep;
            gone.extend(old);
        };
        for change in &self.user_changes {
            match change {
                UserChange::Create {
                    table,
                    replace,
                    if_not_exists,
                } => {
                    let exists = manifest.user_table(&table.name).is_some();
                    if exists && *replace {
                        drop_rows(manifest, &table.name, &mut gone);
                        manifest.user_tables.retain(|t| t.name != table.name);
                    } else if exists && *if_not_exists {
                        continue;
                    } else if exists {
                        return Err(problem(
                            &table.name,
                            UserTableProblem::Exists,
                            "already exists",
                        ));
                    }
                    manifest.user_tables.push(table.clone());
                }
                UserChange::ReplaceRows(name) => drop_rows(manifest, name, &mut gone),
                UserChange::Expire(name, paths) => {
                    let (old, keep): (Vec<DataFile>, Vec<DataFile>) =
                        std::mem::take(&mut manifest.files)
                            .into_iter()
                            .partition(|f| &f.table == name && paths.contains(&f.path));
                    manifest.files = keep;
                    gone.extend(old);
                }
                UserChange::Merged(name, paths) => {
                    let listed = |p: &String| {
                        manifest
                            .files
                            .iter()
                            .any(|f| &f.table == name && &f.path == p)
                    };
                    if let Some(p) = paths.iter().find(|p| !listed(p)) {
                        return Err(StoreError::Stale {
                            what: format!(
                                "{name} file {p} is no longer listed (another compact or \
                                 expire ran at the same time); nothing changed"
                            ),
                        });
                    }
                    let since = chrono::Utc::now().timestamp_micros();
                    let (old, keep): (Vec<DataFile>, Vec<DataFile>) =
                        std::mem::take(&mut manifest.files)
                            .into_iter()
                            .partition(|f| &f.table == name && paths.contains(&f.path));
                    manifest.files = keep;
                    manifest
                        .retired
                        .extend(old.into_iter().map(|f| RetiredFile {
                            path: f.path,
                            since,
                        }));
                }
                UserChange::Forget(paths) => {
                    manifest.retired.retain(|r| !paths.contains(&r.path));
                }
                UserChange::Drop { name, if_exists } => {
                    if manifest.user_table(name).is_none() {
                        if *if_exists {
                            continue;
                        }
                        return Err(problem(name, UserTableProblem::Missing, "does not exist"));
                    }
                    drop_rows(manifest, name, &mut gone);
                    manifest.user_tables.retain(|t| &t.name != name);
                }
                UserChange::Append { table } => match manifest.user_table(&table.name) {
                    None => {
                        return Err(problem(
                            &table.name,
                            UserTableProblem::Missing,
                            "does not exist (it was dropped while rows were being written)",
                        ))
                    }
                    Some(t) if t.columns != table.columns => {
                        return Err(problem(
                            &table.name,
                            UserTableProblem::Mismatch,
                            "its columns changed while rows were being written",
                        ))
                    }
                    Some(_) => {}
                },
            }
        }
        Ok(gone)
    }

    async fn finish_file(
        &mut self,
        writer: AsyncArrowWriter<BufWriter>,
        rel: String,
        rows: u64,
    ) -> Result<()> {
        writer.close().await.map_err(|source| StoreError::Parquet {
            path: rel.clone(),
            source,
        })?;
        let meta = self
            .store
            .object_store
            .head(&self.store.path(&rel))
            .await
            .map_err(self.store.os_err())?;
        let file = self.files.last_mut().expect("recorded when opened");
        file.rows = rows;
        file.bytes = meta.size;
        Ok(())
    }

    /// Makes the batch visible: writes the next manifest version with
    /// `PutMode::Create`. A concurrent commit that took the version first is
    /// merged in and the commit retried. On error the batch's files are
    /// removed and the store is as before.
    pub async fn commit(mut self) -> Result<CommitInfo> {
        if let Err(e) = self.write_index().await {
            self.abort().await;
            return Err(e);
        }
        match self.try_commit().await {
            Ok(info) => Ok(info),
            Err(e) => {
                self.abort().await;
                Err(e)
            }
        }
    }

    /// Whether committing this batch changes the telemetry's rows
    /// ([`Manifest::telemetry`]): an ingest's files of a telemetry table,
    /// an expiry. A compaction rewrites the same rows.
    fn changes_telemetry(&self) -> bool {
        let telemetry = |table: &str| table.parse::<culprit_core::Table>().is_ok();
        match self.kind {
            Some(COMPACT) => false,
            Some(EXPIRE) => true,
            _ => {
                self.files.iter().any(|f| telemetry(&f.table))
                    || self.user_changes.iter().any(|c| match c {
                        UserChange::Expire(t, _)
                        | UserChange::Merged(t, _)
                        | UserChange::ReplaceRows(t) => telemetry(t),
                        UserChange::Drop { name, .. } => telemetry(name),
                        _ => false,
                    })
            }
        }
    }

    async fn try_commit(&self) -> Result<CommitInfo> {
        let rows = self.rows();
        for _ in 0..COMMIT_RETRIES {
            // The newest by a listing, not by the kept one: a version is
            // only ever created after every version the listing shows, so
            // it cannot take the number of one removed since. The
            // superseded ones that listing shows are removed first.
            let (newest, versions) = self.store.newest_listed().await?;
            self.store.remove_superseded(&versions).await;
            let mut manifest = Manifest::clone(&*newest);
            let version = manifest.version + 1;
            manifest.version = version;
            manifest.files.extend(self.files.iter().cloned());
            let gone = self.apply_user_changes(&mut manifest)?;
            let job = self.apply_job_changes(&mut manifest)?;
            manifest.format = manifest.format_needed();
            manifest.sources.extend(
                self.sources
                    .iter()
                    .filter(|s| manifest.sources.iter().all(|m| m.key != s.key))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            if self.changes_telemetry() {
                manifest.telemetry = Some(self.id.clone());
            } else if manifest.telemetry.is_none() {
                // A store written before the id was recorded: its rows
                // keep the name of the version they were last read at.
                manifest.telemetry = Some(newest.telemetry_id());
            }
            manifest.batches.push(BatchInfo {
                id: self.id.clone(),
                version,
                committed_at: chrono::Utc::now().to_rfc3339(),
                rows: rows.clone(),
                kind: self.kind.map(str::to_string),
            });
            manifest.prune_batches(BATCHES_KEPT);
            let body = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
            let location = paths::manifest(&self.store.root, version);
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            let (written, wall) = (Instant::now(), SystemTime::now());
            match self
                .store
                .object_store
                .put_opts(&location, PutPayload::from(body), opts)
                .await
            {
                Ok(_) => {
                    // The newest when it was created (no version follows
                    // one not yet written).
                    self.store.keep(Arc::new(manifest), written, wall);
                    self.remove_unlisted(&gone).await;
                    return Ok(CommitInfo {
                        job,
                        version,
                        batch: self.id.clone(),
                        rows,
                        files: self.files.len(),
                    });
                }
                Err(object_store::Error::AlreadyExists { .. }) => continue,
                Err(e) => return Err((self.store.os_err())(e)),
            }
        }
        Err(StoreError::Conflict(COMMIT_RETRIES))
    }

    /// Removes the files a commit stopped listing (a dropped or replaced
    /// user table's), best effort: a reader of an older manifest may still
    /// be reading them, which then fails rather than reading wrong rows.
    async fn remove_unlisted(&self, files: &[DataFile]) {
        for f in files {
            let path = self.store.path(&f.path);
            if let Err(e) = self.store.object_store.delete(&path).await {
                log::warn!("could not remove unlisted file {path}: {e}");
            }
        }
    }

    /// Removes the batch's files (best effort); the store stays as before.
    pub async fn abort(mut self) {
        self.discard_since(0).await;
    }

    /// Removes the files the batch wrote after its first `kept` (from the
    /// store, best effort, and from the batch): a compaction that writes
    /// a group of files again another way.
    pub(crate) async fn discard_since(&mut self, kept: usize) {
        for f in self.files.split_off(kept.min(self.files.len())) {
            let path = self.store.path(&f.path);
            match self.store.object_store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    log::warn!("could not remove uncommitted file {path}: {e}")
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Float64Array, StringArray, TimestampMicrosecondArray};

    fn host_rows(n: usize) -> RecordBatch {
        host_rows_from(0, n)
    }

    /// `n` rows of host `h1`, each its own µs from `from`.
    fn host_rows_from(from: i64, n: usize) -> RecordBatch {
        let t: Vec<i64> = (from..from + n as i64).collect();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["h1"; n])),
            Arc::new(TimestampMicrosecondArray::from(t.clone()).with_timezone("UTC")),
            Arc::new(TimestampMicrosecondArray::from(t).with_timezone("UTC")),
            Arc::new(StringArray::from(vec!["cpu"; n])),
            Arc::new(Float64Array::from(vec![Some(4.0); n])),
            Arc::new(Float64Array::from(vec![None; n])),
            Arc::new(StringArray::from(vec![None::<&str>; n])),
        ];
        RecordBatch::try_new(Table::HostWindows.schema(), cols).unwrap()
    }

    /// A xorshift generator of test values from `seed`.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    #[test]
    fn rows_are_sorted_by_start_stably_whatever_their_runs() {
        // Rows in runs of the same start (a task's rows of one window),
        // runs broken by a batch, a gap or another start, NULL starts, and
        // rows given out of their batches' order: the order is a stable
        // sort of the rows given by their start (a NULL first).
        use arrow::array::{Array, TimestampMicrosecondArray};
        use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
        let schema = Arc::new(Schema::new(vec![Field::new(
            "window_start",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        )]));
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let batches: Vec<RecordBatch> = (0..3)
            .map(|_| {
                let mut starts: Vec<Option<i64>> = Vec::new();
                while starts.len() < 3000 {
                    let start = (!next().is_multiple_of(50)).then(|| (next() % 400) as i64);
                    for _ in 0..1 + next() % 5 {
                        starts.push(start);
                    }
                }
                let column = TimestampMicrosecondArray::from(starts).with_timezone("UTC");
                RecordBatch::try_new(schema.clone(), vec![Arc::new(column)]).unwrap()
            })
            .collect();
        let mut rows: Rows = Vec::new();
        for r in 0..3000 {
            for b in [2, 0, 1] {
                if !next().is_multiple_of(7) {
                    rows.push((b, if b == 1 { 2999 - r } else { r }));
                }
            }
        }
        let start = |&(b, r): &(usize, usize)| {
            let c = time_column(&batches[b], "window_start").unwrap();
            if c.is_valid(r) {
                c.value(r)
            } else {
                i64::MIN
            }
        };
        let mut want = rows.clone();
        want.sort_by_key(start);
        assert_eq!(sort_by_start(Table::TaskWindows, &batches, rows), want);
        // Rows in their batches' order, as a write gives them.
        let rows = every_row(&batches);
        let mut want = rows.clone();
        want.sort_by_key(start);
        assert_eq!(sort_by_start(Table::TaskWindows, &batches, rows), want);
    }

    #[test]
    fn host_keys_are_those_given_null_where_unknown() {
        use arrow::array::Array;
        let none = crate::layout::NO_HOST_KEY;
        let keys = vec![vec![5, none, 7], vec![9, 9]];
        let rows = [(1, 0), (0, 2), (0, 1), (0, 0), (1, 1), (2, 0)];
        let want =
            arrow::array::UInt32Array::from(vec![Some(9), Some(7), None, Some(5), Some(9), None]);
        assert_eq!(host_keys_of(Some(&keys), &rows), want);
        let known = [(1, 0), (0, 0)];
        let got = host_keys_of(Some(&keys), &known);
        assert_eq!(got, arrow::array::UInt32Array::from(vec![9, 5]));
        assert_eq!(got.null_count(), 0);
        assert_eq!(
            host_keys_of(None, &known),
            arrow::array::UInt32Array::from(vec![None, None])
        );
    }

    #[test]
    fn order_by_key_is_a_stable_sort() {
        // Ties, negative keys, both extremes of i64 (a NULL sorts as
        // i64::MIN), a narrow and a wide range, below and above the size
        // where the radix sort starts.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for (n, spread) in [
            (10usize, 5i64),
            (5000, 3),
            (5000, 60_000_000),
            (70_000, i64::MAX),
        ] {
            let mut keys: Vec<i64> = (0..n)
                .map(|_| {
                    1_700_000_000_000_000i64
                        .wrapping_add((next() as i64).rem_euclid(spread))
                        .wrapping_sub(spread / 2)
                })
                .collect();
            if n > 100 {
                keys[7] = i64::MIN;
                keys[8] = i64::MAX;
                keys[9] = i64::MIN;
            }
            let mut want: Vec<usize> = (0..n).collect();
            want.sort_by_key(|&at| keys[at]);
            assert_eq!(order_by_key(&keys), want, "{n} keys over {spread}");
        }
        assert!(order_by_key(&[]).is_empty());
    }

    /// Per column of a file of `table` the store writes (rows whose text
    /// takes three values), by name: whether its chunk has a dictionary
    /// page, whether it has statistics, and whether it has page statistics
    /// (a column index).
    fn chunks(table: Table) -> BTreeMap<String, (bool, bool, bool)> {
        use parquet::file::reader::FileReader;
        let schema = table.schema();
        let n = 1_000;
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| -> ArrayRef {
                match f.data_type() {
                    arrow::datatypes::DataType::Utf8 => Arc::new(StringArray::from_iter_values(
                        (0..n).map(|i| format!("value-{}", i % 3)),
                    )),
                    arrow::datatypes::DataType::Float64 => {
                        Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64)))
                    }
                    other => {
                        assert!(matches!(other, arrow::datatypes::DataType::Timestamp(..)));
                        Arc::new(
                            TimestampMicrosecondArray::from_iter_values(0..n as i64)
                                .with_timezone("UTC"),
                        )
                    }
                }
            })
            .collect();
        let batch = RecordBatch::try_new(schema, columns).unwrap();
        let rows: Rows = (0..n).map(|r| (0, r)).collect();
        // Window rows' host keys, of three hosts.
        let keys: Vec<u32> = (0..n)
            .map(|i| crate::layout::host_key(&format!("host-{}", i % 3)))
            .collect();
        let files = encode_files(table, &[batch], Some(&[keys]), &rows).unwrap();
        let reader =
            parquet::file::reader::SerializedFileReader::new(files[0].bytes.clone()).unwrap();
        reader
            .metadata()
            .row_group(0)
            .columns()
            .iter()
            .map(|c| {
                (
                    c.column_path().string(),
                    (
                        c.dictionary_page_offset().is_some(),
                        c.statistics().is_some(),
                        c.column_index_offset().is_some(),
                    ),
                )
            })
            .collect()
    }

    /// Whether each column's chunk has a dictionary page ([`chunks`]).
    fn dictionaries(table: Table) -> BTreeMap<String, bool> {
        chunks(table)
            .into_iter()
            .map(|(c, (d, _, _))| (c, d))
            .collect()
    }

    #[test]
    fn statistics_only_where_they_prune() {
        // Window rows: their times (pruning by time) and task ids, not
        // their resources and details (every group holds every resource).
        let windows = chunks(Table::TaskWindows);
        for c in ["window_start", "window_end", "task_id", "blocked"] {
            assert!(windows[c].1, "{c}: {windows:?}");
        }
        for c in ["resource", "detail", crate::layout::HOST_KEY] {
            assert!(!windows[c].1, "{c}: {windows:?}");
        }
        // The other tables keep every column's.
        for t in [Table::Tasks, Table::HostWindows] {
            let chunks = chunks(t);
            assert!(chunks.values().all(|(_, s, _)| *s), "{t:?}: {chunks:?}");
        }
        // No page statistics (a column index) for the time tables: their
        // row group (4,096 rows) is one page a column, whose statistics
        // would repeat the chunk's. The other tables keep them.
        for t in [Table::Tasks, Table::TaskWindows, Table::HostWindows] {
            let chunks = chunks(t);
            assert!(chunks.values().all(|(_, _, i)| !*i), "{t:?}: {chunks:?}");
        }
        let stages = chunks(Table::Stages);
        assert!(stages.values().all(|(_, s, i)| *s && *i), "{stages:?}");
    }

    #[test]
    fn time_tables_are_written_in_snappy_the_others_in_zstd() {
        // A victim's read decodes the time tables' row groups of its time:
        // Snappy's decoder needs no context per column chunk (zstd's took a
        // tenth of a warm server's time for a far victim) and decodes
        // faster, for larger files (docs/storage.md).
        use parquet::basic::Compression;
        let codecs = |table: Table, batch: RecordBatch| -> Vec<Compression> {
            use parquet::file::reader::FileReader;
            let rows: Rows = (0..batch.num_rows()).map(|r| (0, r)).collect();
            let files = encode_files(table, &[batch], None, &rows).unwrap();
            let reader =
                parquet::file::reader::SerializedFileReader::new(files[0].bytes.clone()).unwrap();
            let group = reader.metadata().row_group(0);
            group.columns().iter().map(|c| c.compression()).collect()
        };
        for (t, batch) in [
            (Table::Tasks, task_rows(0, 10)),
            (Table::HostWindows, host_rows(10)),
        ] {
            let got = codecs(t, batch);
            assert!(
                got.iter().all(|c| *c == Compression::SNAPPY),
                "{t:?}: {got:?}"
            );
        }
        // Every time table, and the stored shares: Snappy, groups of 4 Ki
        // rows (the shares' 16 Ki); the others (the query index, the
        // stages, user tables): zstd.
        let path = parquet::schema::types::ColumnPath::from("task_id");
        for (name, group) in [
            ("tasks", 4096),
            ("task_windows", 4096),
            ("host_windows", 4096),
            (crate::layout::STAGE_SHARES, 16_384),
        ] {
            let props = writer_properties(name, &Table::TaskWindows.schema());
            assert_eq!(props.compression(&path), Compression::SNAPPY, "{name}");
            assert_eq!(props.max_row_group_row_count(), Some(group), "{name}");
        }
        for name in [
            "stages",
            "queries",
            "executors",
            crate::layout::QUERY_SPANS,
            "my_teams",
        ] {
            let props = writer_properties(name, &Table::Stages.schema());
            assert!(
                matches!(props.compression(&path), Compression::ZSTD(_)),
                "{name}"
            );
        }
    }

    #[test]
    fn dictionaries_only_where_they_pay() {
        // Window rows: none but their host keys' (interning their text
        // cost the writers 9%).
        let mut windows = dictionaries(Table::TaskWindows);
        assert!(windows.contains_key("resource") && windows.contains_key("task_id"));
        assert_eq!(windows.remove(crate::layout::HOST_KEY), Some(true));
        assert!(windows.values().all(|d| !d), "{windows:?}");
        // Tasks: not their ids (one per task), nor numbers or times; the
        // other text (hosts, queries, stages) keeps one.
        let tasks = dictionaries(Table::Tasks);
        assert!(!tasks["task_id"] && !tasks["launch_time"] && !tasks["cpu_seconds"]);
        assert!(
            tasks["host"] && tasks["query_id"] && tasks["stage_id"],
            "{tasks:?}"
        );
        let hosts = dictionaries(Table::HostWindows);
        assert!(
            hosts["host"] && hosts["resource"] && !hosts["capacity"],
            "{hosts:?}"
        );
    }

    #[tokio::test]
    async fn commits_are_visible_only_when_committed() {
        let store = Store::open("memory://").unwrap();
        assert_eq!(store.manifest().await.unwrap().version, 0);

        let mut batch = store.begin();
        batch
            .write(Table::HostWindows, &[host_rows(10)])
            .await
            .unwrap();
        batch.add_source("k1".into(), "a.csv".into(), 10);
        // Written but not committed: invisible.
        assert_eq!(
            store.manifest().await.unwrap().rows_of(Table::HostWindows),
            0
        );
        let info = batch.commit().await.unwrap();
        assert_eq!(info.version, 1);
        let m = store.manifest().await.unwrap();
        assert_eq!(m.rows_of(Table::HostWindows), 10);
        // Window files record the span of their windows (µs 0 to 9).
        assert!(m
            .files_of(Table::HostWindows)
            .all(|f| f.window_span == Some([0, 9])));
        assert!(m.source("k1").is_some());
        let rows: usize = store
            .read_table(&m, Table::HostWindows, Some(&["host"]))
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(rows, 10);

        // An aborted batch leaves nothing behind.
        let mut batch = store.begin();
        batch
            .write(Table::HostWindows, &[host_rows(5)])
            .await
            .unwrap();
        batch.abort().await;
        let objects: Vec<_> = store.object_store().list(None).try_collect().await.unwrap();
        assert_eq!(objects.len(), 2, "{objects:?}"); // one data file, one manifest
        assert_eq!(store.manifest().await.unwrap(), m);
    }

    fn teams(rows: &[(&str, &str)]) -> RecordBatch {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("user", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("team", arrow::datatypes::DataType::Utf8, true),
        ]));
        let users: Vec<&str> = rows.iter().map(|r| r.0).collect();
        let teams: Vec<&str> = rows.iter().map(|r| r.1).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(users)),
                Arc::new(StringArray::from(teams)),
            ],
        )
        .unwrap()
    }

    async fn user_rows(store: &Store, name: &str) -> Vec<String> {
        let m = store.manifest().await.unwrap();
        let mut out = Vec::new();
        for f in m.files_of_user(name) {
            let bytes = store.fetch(f).await.unwrap();
            for b in store.decode(f, bytes, None).unwrap() {
                let b = b.unwrap();
                let users = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                out.extend(users.iter().map(|u| u.unwrap().to_string()));
            }
        }
        out.sort();
        out
    }

    #[tokio::test]
    async fn user_tables_are_created_appended_replaced_and_dropped() {
        let store = Store::open("memory://").unwrap();
        let first = teams(&[("ana", "etl"), ("bo", "bi")]);
        let schema = first.schema();
        let mut b = store.begin();
        b.create_user_table("teams", &schema, false, false).unwrap();
        b.write_user("teams", &schema, &[first]).await.unwrap();
        b.commit().await.unwrap();
        assert_eq!(user_rows(&store, "teams").await, ["ana", "bo"]);
        let m = store.manifest().await.unwrap();
        assert_eq!(m.user_table("teams").unwrap().schema().unwrap(), schema);
        assert!(m
            .files_of_user("teams")
            .all(|f| f.path.starts_with("tables/user/teams/")));

        // Append.
        let mut b = store.begin();
        b.write_user("teams", &schema, &[teams(&[("cy", "ops")])])
            .await
            .unwrap();
        b.commit().await.unwrap();
        assert_eq!(user_rows(&store, "teams").await, ["ana", "bo", "cy"]);

        // Creating it again fails and changes nothing; IF NOT EXISTS is a no-op.
        let mut b = store.begin();
        b.create_user_table("teams", &schema, false, false).unwrap();
        b.write_user("teams", &schema, &[teams(&[("dx", "x")])])
            .await
            .unwrap();
        let e = b.commit().await.unwrap_err();
        assert!(
            matches!(
                e,
                StoreError::UserTable {
                    code: UserTableProblem::Exists,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(user_rows(&store, "teams").await, ["ana", "bo", "cy"]);

        // Replace: only the new rows, and the old files are gone.
        let old: Vec<String> = store
            .manifest()
            .await
            .unwrap()
            .files_of_user("teams")
            .map(|f| f.path.clone())
            .collect();
        let mut b = store.begin();
        b.replace_user_rows("teams");
        b.write_user("teams", &schema, &[teams(&[("ed", "etl")])])
            .await
            .unwrap();
        b.commit().await.unwrap();
        assert_eq!(user_rows(&store, "teams").await, ["ed"]);
        for p in old {
            assert!(
                store.object_store().head(&store.path(&p)).await.is_err(),
                "{p} remains"
            );
        }

        // Drop; a second drop fails unless IF EXISTS.
        let mut b = store.begin();
        b.drop_user_table("teams", false).unwrap();
        b.commit().await.unwrap();
        let m = store.manifest().await.unwrap();
        assert!(m.user_table("teams").is_none() && m.files_of_user("teams").next().is_none());
        let mut b = store.begin();
        b.drop_user_table("teams", false).unwrap();
        assert!(matches!(
            b.commit().await.unwrap_err(),
            StoreError::UserTable {
                code: UserTableProblem::Missing,
                ..
            }
        ));
        let mut b = store.begin();
        b.drop_user_table("teams", true).unwrap();
        b.commit().await.unwrap();

        // Names: telemetry and invalid ones are refused at once.
        let mut b = store.begin();
        let e = b
            .create_user_table("tasks", &schema, false, false)
            .unwrap_err();
        assert!(e.to_string().contains("telemetry"), "{e}");
        for bad in ["Teams", "1x", "a-b", "pg_x", ""] {
            assert!(
                b.create_user_table(bad, &schema, false, false).is_err(),
                "{bad}"
            );
        }
    }

    /// Commits `n` host rows ([`host_rows`]) to `store` in a batch.
    async fn commit_host_rows(store: &Store, n: usize) {
        let mut batch = store.begin();
        batch
            .write(Table::HostWindows, &[host_rows(n)])
            .await
            .unwrap();
        batch.commit().await.unwrap();
    }

    /// `n` tasks rows, task `i` of query `q{i % 7}`: ready at `10 i`
    /// (none for every third), launched at `10 i + 5`, finished at
    /// `10 i + 50 + i % 11`.
    pub(crate) fn task_rows(from: usize, n: usize) -> RecordBatch {
        task_rows_of(from, n, 7)
    }

    /// [`task_rows`] of `queries` queries (task `i` of query `q{i % queries}`).
    fn task_rows_of(from: usize, n: usize, queries: usize) -> RecordBatch {
        use arrow::datatypes::DataType;
        let schema = Table::Tasks.schema();
        let rows = from..from + n;
        let time = |f: &dyn Fn(i64) -> Option<i64>| -> ArrayRef {
            Arc::new(
                TimestampMicrosecondArray::from_iter(rows.clone().map(|i| f(i as i64)))
                    .with_timezone("UTC"),
            )
        };
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| -> ArrayRef {
                match f.name().as_str() {
                    "task_id" => Arc::new(StringArray::from_iter_values(
                        rows.clone().map(|i| format!("t{i}")),
                    )),
                    "query_id" => Arc::new(StringArray::from_iter_values(
                        rows.clone().map(|i| format!("q{}", i % queries)),
                    )),
                    "stage_id" => Arc::new(StringArray::from_iter_values(
                        rows.clone().map(|i| format!("s{}", i % 7)),
                    )),
                    "host" => Arc::new(StringArray::from(vec!["h1"; n])),
                    "ready_time" => time(&|i| (i % 3 != 0).then_some(10 * i)),
                    "launch_time" => time(&|i| Some(10 * i + 5)),
                    "finish_time" => time(&|i| Some(10 * i + 50 + i % 11)),
                    _ => match f.data_type() {
                        DataType::Utf8 => Arc::new(StringArray::from(vec![None::<&str>; n])),
                        DataType::Float64 => Arc::new(Float64Array::from(vec![None; n])),
                        _ => arrow::array::new_null_array(f.data_type(), n),
                    },
                }
            })
            .collect();
        RecordBatch::try_new(schema, columns).unwrap()
    }

    #[tokio::test]
    async fn a_batch_writes_one_index_file_whatever_its_writes_of_tasks() {
        // An ingest writes its tasks part by part: the query index of the
        // batch is one file all the same (a reader opens every index file,
        // 51 of them for one batch of 1e7 tasks before), and adds up each
        // query's tasks of every part.
        let store = Store::open("memory://").unwrap();
        let mut batch = store.begin();
        for (from, n) in [(0, 100), (100, 37), (137, 263)] {
            batch
                .write(Table::Tasks, &[task_rows(from, n)])
                .await
                .unwrap();
        }
        batch.commit().await.unwrap();
        let manifest = store.manifest().await.unwrap();
        assert_eq!(manifest.files_named(crate::layout::QUERY_SPANS).count(), 1);
        let spans = store.query_spans(&manifest).await.unwrap().unwrap();
        // Each query's span from the rows as `task_rows` builds them.
        let mut want: BTreeMap<String, QuerySpan> = BTreeMap::new();
        for i in 0..400i64 {
            let first = if i % 3 != 0 { 10 * i } else { 10 * i + 5 };
            let e = want.entry(format!("q{}", i % 7)).or_insert(QuerySpan {
                first: i64::MAX,
                last: i64::MIN,
                tasks: 0,
                first_launch: Some(i64::MAX),
            });
            e.first = e.first.min(first);
            e.last = e.last.max(10 * i + 50 + i % 11);
            e.tasks += 1;
            e.first_launch = e.first_launch.map(|l| l.min(10 * i + 5));
        }
        assert_eq!(want.len(), 7);
        assert_eq!(spans.into_iter().collect::<BTreeMap<_, _>>(), want);
        // A second batch adds its own file.
        let mut batch = store.begin();
        batch
            .write(Table::Tasks, &[task_rows(400, 10)])
            .await
            .unwrap();
        batch.commit().await.unwrap();
        let manifest = store.manifest().await.unwrap();
        assert_eq!(manifest.files_named(crate::layout::QUERY_SPANS).count(), 2);
        let spans = store.query_spans(&manifest).await.unwrap().unwrap();
        assert_eq!(spans.values().map(|s| s.tasks).sum::<u64>(), 410);
    }

    #[tokio::test]
    async fn a_short_time_of_host_rows_reads_one_small_row_group() {
        // One host's rows over a long time, as engines write host metrics
        // (host by host): a file of them spans the whole input's time, so
        // what a short time read decodes is the row groups that overlap it.
        let store = Store::open("memory://").unwrap();
        commit_host_rows(&store, 40_000).await;
        // Rows at µs 0..40,000, each its own µs: the read of µs 20,000 to
        // 20,010 overlaps 11 rows, in one row group of 4,096.
        let decoded = decoded_in_one_file(&store, Table::HostWindows, 20_000, 20_010).await;
        assert_eq!(decoded, 4096);
    }

    /// The rows a read of `[from, to]` decodes of `table`, stored in one
    /// file.
    async fn decoded_in_one_file(store: &Store, table: Table, from: i64, to: i64) -> usize {
        read_in_one_file(store, table, from, to)
            .await
            .iter()
            .map(|b| b.num_rows())
            .sum()
    }

    /// The batches a read of `[from, to]` decodes of `table`, stored in
    /// one file.
    async fn read_in_one_file(store: &Store, table: Table, from: i64, to: i64) -> Vec<RecordBatch> {
        let m = store.manifest().await.unwrap();
        let files: Vec<DataFile> = m.files_of(table).cloned().collect();
        assert_eq!(files.len(), 1);
        store
            .scan_overlapping(files, None, from, to)
            .try_collect()
            .await
            .unwrap()
    }

    /// A store of `task_rows(0, n)`, committed in one file.
    async fn store_of_tasks(n: usize) -> Store {
        let store = Store::open("memory://").unwrap();
        let mut batch = store.begin();
        batch.write(Table::Tasks, &[task_rows(0, n)]).await.unwrap();
        batch.commit().await.unwrap();
        store
    }

    /// `n` window rows of `cpu`, row `i` of task `t{i / 2}` over
    /// `[10 (i/2) + 5, 10 (i/2) + 50]` (inside its run, [`task_rows`]).
    fn window_rows(n: usize) -> RecordBatch {
        let schema = Table::TaskWindows.schema();
        let time = |f: &dyn Fn(i64) -> i64| -> ArrayRef {
            Arc::new(
                TimestampMicrosecondArray::from_iter_values((0..n as i64).map(|i| f(i / 2)))
                    .with_timezone("UTC"),
            )
        };
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| -> ArrayRef {
                match f.name().as_str() {
                    "task_id" => Arc::new(StringArray::from_iter_values(
                        (0..n).map(|i| format!("t{}", i / 2)),
                    )),
                    "resource" => Arc::new(StringArray::from(vec!["cpu"; n])),
                    "window_start" => time(&|t| 10 * t + 5),
                    "window_end" => time(&|t| 10 * t + 50),
                    "blocked" | "acquired" => Arc::new(Float64Array::from(vec![1.0; n])),
                    _ => arrow::array::new_null_array(f.data_type(), n),
                }
            })
            .collect();
        RecordBatch::try_new(schema, columns).unwrap()
    }

    /// Every stored window row's task id and host key, and whether each
    /// file's bucket is its keys' (`None` for rows of no key).
    async fn stored_keys(store: &Store) -> BTreeMap<String, Option<u32>> {
        use arrow::array::{Array, AsArray};
        use futures::TryStreamExt;
        let manifest = store.manifest().await.unwrap();
        let mut out = BTreeMap::new();
        for f in manifest.files_of(Table::TaskWindows) {
            let rows: Vec<RecordBatch> = store
                .scan_files(vec![f.clone()], None)
                .try_collect()
                .await
                .unwrap();
            for b in rows {
                let ids = b.column_by_name("task_id").unwrap().as_string::<i32>();
                let keys = b
                    .column_by_name(crate::layout::HOST_KEY)
                    .expect("the host key column")
                    .as_primitive::<arrow::datatypes::UInt32Type>();
                for i in 0..b.num_rows() {
                    let key = keys.is_valid(i).then(|| keys.value(i));
                    assert_eq!(
                        f.bucket,
                        key.and_then(crate::layout::key_bucket),
                        "{}: row {i}",
                        f.path
                    );
                    let before = out.insert(ids.value(i).to_string(), key);
                    assert!(before.is_none_or(|k| k == key), "{}", ids.value(i));
                }
            }
        }
        out
    }

    #[tokio::test]
    async fn window_rows_are_stored_with_their_hosts_keys_through_compaction() {
        use arrow::array::AsArray;
        // Tasks `t0`..`t39` on hosts `host-{i % 7}`; window rows of `t0`
        // to `t49`: those of tasks the batch knows carry their host's key
        // (computed here from the input's host names) in that key's
        // bucket, those of `t40`..`t49` (no such task) no key.
        let store = Store::open("memory://").unwrap();
        let on_hosts = |tasks: RecordBatch, host: &dyn Fn(usize) -> String| {
            let at = tasks.schema().index_of("host").unwrap();
            let mut columns = tasks.columns().to_vec();
            let hosts = (0..tasks.num_rows()).map(host);
            columns[at] = Arc::new(StringArray::from_iter_values(hosts));
            RecordBatch::try_new(tasks.schema(), columns).unwrap()
        };
        let tasks = on_hosts(task_rows(0, 40), &|i| format!("host-{}", i % 7));
        let want = |id: &str| -> Option<u32> {
            let t: usize = id[1..].parse().unwrap();
            (t < 40).then(|| {
                let k = crate::layout::host_key(&format!("host-{}", t % 7));
                assert_ne!(k, crate::layout::NO_HOST_KEY);
                k
            })
        };
        // Two batches, so that compaction has files to merge.
        for half in [0..50, 50..100] {
            let mut batch = store.begin();
            batch
                .write(Table::Tasks, std::slice::from_ref(&tasks))
                .await
                .unwrap();
            let rows = window_rows(100).slice(half.start, half.len());
            batch.write(Table::TaskWindows, &[rows]).await.unwrap();
            batch.commit().await.unwrap();
        }
        let check = |stored: BTreeMap<String, Option<u32>>| {
            assert_eq!(stored.len(), 50);
            for (id, key) in &stored {
                assert_eq!(*key, want(id), "{id}");
            }
        };
        check(stored_keys(&store).await);
        // Given by the writer (as the ingest does): the same.
        let given = Store::open("memory://").unwrap();
        let mut batch = given.begin();
        batch.set_note_tasks(false);
        let rows = window_rows(100);
        let ids = rows.column_by_name("task_id").unwrap().as_string::<i32>();
        let keys: Vec<u32> = (0..100)
            .map(|i| want(ids.value(i)).unwrap_or(crate::layout::NO_HOST_KEY))
            .collect();
        batch
            .write_routed(Table::TaskWindows, vec![rows.clone()], vec![keys])
            .await
            .unwrap();
        batch.commit().await.unwrap();
        check(stored_keys(&given).await);
        // A task a batch notes on two hosts: its rows get no key (a read
        // keeps one of the two hosts, and then looks the rows up).
        let twice = Store::open("memory://").unwrap();
        let mut batch = twice.begin();
        batch
            .write(Table::Tasks, std::slice::from_ref(&tasks))
            .await
            .unwrap();
        let again = on_hosts(task_rows(0, 1), &|_| "host-5".to_string());
        batch.write(Table::Tasks, &[again]).await.unwrap();
        batch
            .write(Table::TaskWindows, &[window_rows(4)])
            .await
            .unwrap();
        batch.commit().await.unwrap();
        let stored = stored_keys(&twice).await;
        assert_eq!(stored["t0"], None, "{stored:?}");
        assert_eq!(stored["t1"], want("t1"), "{stored:?}");
        // Compaction keeps every row's key.
        let report = store
            .compact(&crate::CompactOptions::default(), |_, _| {})
            .await
            .unwrap();
        assert!(report.merged.contains_key("task_windows"), "{report:?}");
        check(stored_keys(&store).await);
    }

    #[tokio::test]
    async fn a_short_time_of_tasks_reads_one_small_row_group() {
        // Tasks in one file over a long time: a read of a short time
        // decodes the one row group of 4,096 rows that holds it (16,384
        // before; a far victim decoded three times the window rows of its
        // time, docs/performance.md).
        let store = store_of_tasks(40_000).await;
        // Task `i` runs from `10 i` (or `10 i + 5`) to about `10 i + 55`:
        // µs 200,000 to 200,010 overlap tasks 19,995 to 20,001, rows of
        // the group of rows 16,384 to 20,479.
        let decoded = decoded_in_one_file(&store, Table::Tasks, 200_000, 200_010).await;
        assert_eq!(decoded, 4096);
    }

    #[tokio::test]
    async fn a_decoded_row_group_holds_about_its_rows_bytes() {
        // The read cache counts a decoded group by the memory its arrays
        // hold, and a focused read keeps groups of 4,096 rows: decoded in
        // batches of 64 Ki rows, every column reserved room for 64 Ki
        // values, and the group held 18 times its rows' bytes, so the
        // cache held that much fewer groups (a far victim asked again was
        // decoded again, docs/performance.md).
        let store = store_of_tasks(40_000).await;
        let decoded = read_in_one_file(&store, Table::Tasks, 200_000, 200_010).await;
        // The group of rows 16,384 to 20,479 (as in the test above); its
        // bytes from the input's rows: each column's values at its width,
        // a text's bytes and offsets, a validity bit a row.
        let rows = task_rows(16_384, 4_096);
        let exact: usize = rows
            .columns()
            .iter()
            .map(|c| {
                let n = c.len();
                let values = match c.data_type().primitive_width() {
                    Some(w) => n * w,
                    None => match arrow::array::AsArray::as_string_opt::<i32>(c) {
                        Some(t) => (n + 1) * 4 + t.value_data().len(),
                        None => n * 16,
                    },
                };
                values + n.div_ceil(8)
            })
            .sum();
        assert_eq!(decoded.iter().map(|b| b.num_rows()).sum::<usize>(), 4_096);
        let held: usize = decoded.iter().map(|b| b.get_array_memory_size()).sum();
        assert!(
            held <= 2 * exact,
            "a group of 4,096 rows holds {held} bytes, its rows {exact}"
        );
    }

    #[test]
    fn a_read_batches_its_largest_groups_rows_at_most_64_ki() {
        // Groups of 4,096, 100 and 0 rows, and one of 100,000 (over a
        // batch's 64 Ki): the batch of a read of some of them is their
        // largest group's rows, at least one row, at most 64 Ki; a group
        // the file does not have counts for nothing.
        use parquet::file::metadata::{FileMetaData, ParquetMetaData, RowGroupMetaData};
        use parquet::schema::types::{SchemaDescriptor, Type};
        let schema = Arc::new(SchemaDescriptor::new(Arc::new(
            Type::group_type_builder("schema")
                .with_fields(vec![])
                .build()
                .unwrap(),
        )));
        let groups: Vec<RowGroupMetaData> = [4_096, 100, 0, 100_000]
            .iter()
            .map(|&n| {
                RowGroupMetaData::builder(schema.clone())
                    .set_num_rows(n)
                    .build()
                    .unwrap()
            })
            .collect();
        let file = FileMetaData::new(1, 104_196, None, None, schema, None);
        let meta = ParquetMetaData::new(file, groups);
        assert_eq!(batch_rows(&meta, &[0]), 4_096);
        assert_eq!(batch_rows(&meta, &[1, 0]), 4_096);
        assert_eq!(batch_rows(&meta, &[1]), 100);
        assert_eq!(batch_rows(&meta, &[2]), 1);
        assert_eq!(batch_rows(&meta, &[]), 1);
        assert_eq!(batch_rows(&meta, &[9]), 1);
        assert_eq!(batch_rows(&meta, &[1, 9]), 100);
        assert_eq!(batch_rows(&meta, &[3, 0]), 64 * 1024);
    }

    /// The `window_start` of every row of `batches`, in order.
    fn starts(batches: &[RecordBatch]) -> Vec<i64> {
        use arrow::array::AsArray;
        batches
            .iter()
            .flat_map(|b| {
                b.column_by_name("window_start")
                    .unwrap()
                    .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    /// A store of one file of 10,000 host rows (`host_rows_from`) from
    /// each µs of `bases`, each committed alone; its files in order.
    async fn store_of_host_rows_from(bases: &[i64]) -> (Store, Vec<DataFile>) {
        let store = Store::open("memory://").unwrap();
        for &from in bases {
            let mut batch = store.begin();
            batch
                .write(Table::HostWindows, &[host_rows_from(from, 10_000)])
                .await
                .unwrap();
            batch.commit().await.unwrap();
        }
        let m = store.manifest().await.unwrap();
        let files = m.files_of(Table::HostWindows).cloned().collect();
        (store, files)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_time_read_gives_the_overlapping_row_groups_of_every_file_in_order() {
        // Three files of 10,000 host rows, from µs 0, 5,000 and 30,000, in
        // row groups of 4,096: the row groups are decoded several at a
        // time, and must come back file by file, group by group.
        let bases = [0i64, 5_000, 30_000];
        let (store, files) = store_of_host_rows_from(&bases).await;
        assert_eq!(files.len(), 3);
        let (from, to) = (4_000, 9_000);
        // From the input: of each file, the rows of its groups whose first
        // and last µs meet `[from, to]`.
        let mut want = Vec::new();
        for base in bases {
            for g in 0..3i64 {
                let (lo, hi) = (base + g * 4096, base + ((g + 1) * 4096).min(10_000) - 1);
                if lo <= to && from <= hi {
                    want.extend(lo..=hi);
                }
            }
        }
        assert_eq!(want.len(), 10_000 + 4_096);
        let read = |cache: Option<Arc<ReadCache>>, (a, b): (i64, i64)| {
            let (store, files) = (store.clone(), files.clone());
            async move {
                let rows = match cache {
                    Some(c) => {
                        store.scan_overlapping_then(files, None, a, b, Some(c), Arc::new(|b| b))
                    }
                    None => store.scan_overlapping(files, None, a, b),
                };
                starts(&rows.try_collect::<Vec<_>>().await.unwrap())
            }
        };
        assert_eq!(read(None, (from, to)).await, want);
        // Through a cache: a narrower read keeps two of those four groups
        // (the last of the first file, the first of the second); the whole
        // read then takes those from it and decodes the other two, and
        // gives the same rows in the same order; a third decodes nothing.
        let cache = ReadCache::new(1 << 30);
        let some = read(Some(cache.clone()), (8_500, 8_600)).await;
        assert_eq!(some, (8192..10_000).chain(5_000..9_096).collect::<Vec<_>>());
        let before = cache.stats();
        assert_eq!(read(Some(cache.clone()), (from, to)).await, want);
        let after = cache.stats();
        // Two footers and two groups found, two groups not.
        assert_eq!(
            (after.hits - before.hits, after.misses - before.misses),
            (4, 2)
        );
        assert_eq!(read(Some(cache.clone()), (from, to)).await, want);
        assert_eq!(cache.stats().misses, after.misses);
    }

    /// What a read does with each batch (`scan_overlapping_then`) runs on
    /// the tasks that decode them, rows from the cache too, and its
    /// results come in the order of the rows; a failure there (a panic)
    /// fails the read in its place, naming the file, never ends it early
    /// as if every row were read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reads_work_on_each_batch_comes_in_order_and_its_panic_fails_the_read() {
        let bases = [0i64, 5_000, 30_000];
        let (store, files) = store_of_host_rows_from(&bases).await;
        // From the input: each file's groups of 4,096 rows, in order, each
        // with its first µs and its rows.
        let want: Vec<(i64, usize)> = bases
            .iter()
            .flat_map(|&base| [(base, 4096), (base + 4096, 4096), (base + 8192, 1808)])
            .collect();
        let caller = std::thread::current().id();
        let firsts: Then<(i64, usize, bool)> = Arc::new(move |b| {
            let on_caller = std::thread::current().id() == caller;
            (starts(std::slice::from_ref(&b))[0], b.num_rows(), on_caller)
        });
        let cache = ReadCache::new(1 << 30);
        for _ in 0..2 {
            // Decoded, then taken from the cache.
            let got: Vec<(i64, usize, bool)> = store
                .scan_overlapping_then(
                    files.clone(),
                    None,
                    0,
                    50_000,
                    Some(cache.clone()),
                    firsts.clone(),
                )
                .try_collect()
                .await
                .unwrap();
            let firsts: Vec<(i64, usize)> = got.iter().map(|&(s, n, _)| (s, n)).collect();
            assert_eq!(firsts, want);
            assert!(got.iter().all(|&(_, _, on_caller)| !on_caller));
        }
        // Failing on the second file's second group.
        let failing: Then<usize> = Arc::new(|b| {
            let first = starts(std::slice::from_ref(&b))[0];
            assert!(first != 5_000 + 4096, "failed on purpose");
            b.num_rows()
        });
        let got: Vec<Result<usize>> = futures::StreamExt::collect(store.scan_overlapping_then(
            files.clone(),
            None,
            0,
            50_000,
            None,
            failing,
        ))
        .await;
        let first = got.iter().position(|r| r.is_err()).expect("the read fails");
        let rows: usize = got[..first].iter().map(|r| *r.as_ref().unwrap()).sum();
        assert_eq!(rows, 10_000 + 4096);
        let err = got[first].as_ref().unwrap_err().to_string();
        assert!(err.contains(&files[1].path), "{err}");
        assert!(err.contains("failed on purpose"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_damaged_file_fails_the_read_in_its_place_naming_it() {
        let store = Store::open("memory://").unwrap();
        commit_host_rows(&store, 10_000).await;
        commit_host_rows(&store, 10_000).await;
        let m = store.manifest().await.unwrap();
        let files: Vec<DataFile> = m.files_of(Table::HostWindows).cloned().collect();
        assert_eq!(files.len(), 2);
        let bytes_of = |f: &DataFile| {
            let (store, path) = (store.clone(), store.path(&f.path));
            async move {
                let got = store.object_store().get(&path).await.unwrap();
                (path, got.bytes().await.unwrap().to_vec())
            }
        };
        let read = || {
            futures::StreamExt::collect::<Vec<Result<RecordBatch>>>(store.scan_overlapping(
                files.clone(),
                None,
                0,
                20_000,
            ))
        };
        // The first file's first row group zeroed, its footer kept: the
        // error comes first, naming the file.
        let (path, good) = bytes_of(&files[0]).await;
        let mut bad = good.clone();
        let end = bad.len() / 3;
        bad[4..end].fill(0);
        store.object_store().put(&path, bad.into()).await.unwrap();
        let got = read().await;
        let err = got[0].as_ref().expect_err("the read fails").to_string();
        assert!(err.contains(&files[0].path), "{err}");
        // The second file's footer damaged instead: every row of the first
        // file comes before its error, though the footers are read ahead.
        store.object_store().put(&path, good.into()).await.unwrap();
        let (path, good) = bytes_of(&files[1]).await;
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 200..n - 8].fill(0xff);
        store.object_store().put(&path, bad.into()).await.unwrap();
        let got = read().await;
        let first = got.iter().position(|r| r.is_err()).expect("the read fails");
        let rows: usize = got[..first]
            .iter()
            .map(|b| b.as_ref().unwrap().num_rows())
            .sum();
        assert_eq!(rows, 10_000);
        let err = got[first].as_ref().unwrap_err().to_string();
        assert!(err.contains(&files[1].path), "{err}");
    }

    #[tokio::test]
    async fn the_newest_manifest_is_kept_until_another_is_committed() {
        let store = Store::open("memory://").unwrap();
        // Another process on the same object store (a cache of its own).
        let other = another_process(&store, "other");
        let empty = store.manifest().await.unwrap();
        assert_eq!(empty.version, 0);
        // Kept: the same manifest, not read again, while no newer exists.
        assert!(Arc::ptr_eq(&empty, &store.manifest().await.unwrap()));
        // Version 0 is never written: asked for, it is an error, kept or not.
        assert!(store.manifest_at(0).await.is_err());

        commit_host_rows(&other, 3).await;
        // The other's commit is seen at once, then kept.
        let first = store.manifest().await.unwrap();
        assert_eq!((first.version, first.rows_of(Table::HostWindows)), (1, 3));
        assert!(Arc::ptr_eq(&first, &store.manifest().await.unwrap()));
        assert!(Arc::ptr_eq(&first, &store.manifest_at(1).await.unwrap()));

        // Two commits by the other at once: the newest is found.
        for n in [4, 5] {
            commit_host_rows(&other, n).await;
        }
        let third = store.manifest().await.unwrap();
        assert_eq!((third.version, third.rows_of(Table::HostWindows)), (3, 12));
        // A commit of its own is kept as it commits, not read back: its
        // file, spoilt here behind the store's back once the other has
        // read it, is not read again.
        commit_host_rows(&store, 6).await;
        let seen = other.manifest().await.unwrap();
        store
            .object_store()
            .put(
                &paths::manifest(&store.root, 4),
                PutPayload::from_static(b"not a manifest"),
            )
            .await
            .unwrap();
        let fourth = store.manifest().await.unwrap();
        assert_eq!(
            (fourth.version, fourth.rows_of(Table::HostWindows)),
            (4, 18)
        );
        assert_eq!(*seen, *fourth);
    }

    /// A store on `store`'s object store with a cache of its own, as
    /// another process would open it.
    fn another_process(store: &Store, name: &str) -> Store {
        Store::new(
            store.object_store(),
            store.base_url().clone(),
            store.root.clone(),
            name.into(),
        )
    }

    /// The newest manifest's version and host rows, as `store` sees them.
    async fn newest(store: &Store) -> (u64, u64) {
        let m = store.manifest().await.unwrap();
        (m.version, m.rows_of(Table::HostWindows))
    }

    /// The versions of the manifests `store` holds, in order.
    async fn versions(store: &Store) -> Vec<u64> {
        let listed = store.list_versions().await.unwrap();
        listed.into_iter().map(|(v, _)| v).collect()
    }

    #[tokio::test]
    async fn a_batch_discards_the_files_it_wrote_after_a_mark() {
        let store = Store::open("memory://").unwrap();
        let mut batch = store.begin();
        batch
            .write(Table::HostWindows, &[host_rows(3)])
            .await
            .unwrap();
        let kept = batch.written().to_vec();
        batch
            .write(Table::HostWindows, &[host_rows(5)])
            .await
            .unwrap();
        let discarded = batch.written()[kept.len()..].to_vec();
        assert!(!discarded.is_empty());
        batch.discard_since(kept.len()).await;
        assert_eq!(batch.written(), &kept[..]);
        for f in &discarded {
            let gone = store.object_store.head(&store.path(&f.path)).await;
            assert!(
                matches!(gone, Err(object_store::Error::NotFound { .. })),
                "{gone:?}"
            );
        }
        batch.commit().await.unwrap();
        let (version, rows) = newest(&store).await;
        assert_eq!((version, rows), (1, 3));
    }

    #[tokio::test]
    async fn a_derived_object_is_read_by_the_row_groups_of_a_time() {
        // Stored shares' layout: rows by `first`, row groups of 16 Ki rows
        // with statistics; a read of a time takes only the groups whose
        // `first`..`last` may overlap it, and every row there.
        use arrow::array::Int64Array;
        use arrow::datatypes::{DataType, Field, Schema};
        let store = Store::open("memory://").unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("first", DataType::Int64, false),
            Field::new("last", DataType::Int64, false),
        ]));
        let n = 40_000i64;
        let firsts: Vec<i64> = (0..n).map(|i| i * 10).collect();
        let lasts: Vec<i64> = (0..n).map(|i| i * 10 + 25).collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(firsts)),
                Arc::new(Int64Array::from(lasts)),
            ],
        )
        .unwrap();
        let rel = paths::stage_shares_file("b1", 3, 7);
        let mut w = store
            .derived_writer(
                &rel,
                crate::layout::STAGE_SHARES,
                &schema,
                vec![("k".into(), "v".into())],
            )
            .unwrap();
        w.write(&batch).await.unwrap();
        let bytes = w.finish().await.unwrap();
        assert_eq!(store.derived_size(&rel).await.unwrap(), Some(bytes));
        let listed = store
            .derived_objects(&paths::stage_shares_dir("b1"))
            .await
            .unwrap();
        assert_eq!(listed, vec![(rel.clone(), bytes)]);
        assert!(paths::is_stage_shares_file(&rel));
        let file = DataFile {
            table: crate::layout::STAGE_SHARES.into(),
            path: rel.clone(),
            rows: 0,
            bytes,
            batch: String::new(),
            bucket: None,
            window_span: None,
        };
        // Rows overlapping [200_000, 200_100]: i from 19_998 to 20_010.
        let got: Vec<RecordBatch> = store
            .scan_overlapping(vec![file], None, 200_000, 200_100)
            .try_collect()
            .await
            .unwrap();
        let rows: Vec<i64> = got
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(rows.len(), 16 << 10, "one row group of three");
        for i in 19_998..=20_010 {
            assert!(rows.contains(&(i * 10)), "row {i}");
        }
        // Names sort by version, then by when written.
        let other = paths::stage_shares_file("b1", 3, 8);
        assert!(other > rel && paths::stage_shares_file("b1", 4, 1) > other);
        store
            .object_store
            .put(&store.path(&other), PutPayload::from_static(b"x"))
            .await
            .unwrap();
        let removed = store
            .remove_derived(std::slice::from_ref(&rel))
            .await
            .unwrap();
        assert_eq!(removed, 1);
        assert_eq!(store.derived_size(&rel).await.unwrap(), None);
        assert_eq!(store.derived_size(&other).await.unwrap(), Some(1));
    }

    #[tokio::test]
    async fn the_telemetry_id_changes_with_the_rows_only() {
        // What is derived from the telemetry (stored shares) is named by
        // it: an ingest and an expiry change it, a compaction, a user
        // table's statement and an empty batch do not.
        let store = Store::open("memory://").unwrap();
        let empty = store.manifest().await.unwrap();
        assert_eq!(empty.telemetry_id(), "version-0");
        let mut batch = store.begin();
        batch
            .write(Table::Tasks, &[task_rows(0, 40)])
            .await
            .unwrap();
        let first = batch.id().to_string();
        batch.commit().await.unwrap();
        let m = store.manifest().await.unwrap();
        assert_eq!(m.telemetry_id(), first, "an ingest sets it");
        commit_host_rows(&store, 3).await;
        commit_host_rows(&store, 4).await;
        let m = store.manifest().await.unwrap();
        let second = m.batches.last().unwrap().id.clone();
        assert_ne!(first, second);
        assert_eq!(m.telemetry.as_deref(), Some(second.as_str()));
        assert_eq!(m.telemetry_id(), second);

        let report = store
            .compact(&crate::CompactOptions::default(), |_, _| {})
            .await
            .unwrap();
        assert!(report.files_merged() > 0, "{report:?}");
        let compacted = store.manifest().await.unwrap();
        assert!(compacted.version > m.version);
        assert_eq!(compacted.telemetry_id(), second, "a compaction keeps it");

        let schema = teams(&[("ana", "etl")]).schema();
        let mut b = store.begin();
        b.create_user_table("teams", &schema, false, false).unwrap();
        b.write_user("teams", &schema, &[teams(&[("ana", "etl")])])
            .await
            .unwrap();
        b.commit().await.unwrap();
        store.begin().commit().await.unwrap();
        let m = store.manifest().await.unwrap();
        assert_eq!(m.version, compacted.version + 2);
        assert_eq!(
            m.telemetry_id(),
            second,
            "nor do a user table and an empty batch"
        );

        // A statement's batch dropping files of a telemetry table changes
        // it too.
        let m = store.manifest().await.unwrap();
        let mut b = store.begin();
        let file = m
            .files
            .iter()
            .find(|f| f.table.parse::<Table>().is_ok())
            .expect("a telemetry file stays")
            .clone();
        b.expire_files(&file.table, vec![file.path]);
        let id = b.id().to_string();
        b.commit().await.unwrap();
        assert_eq!(store.manifest().await.unwrap().telemetry_id(), id);

        // Host rows end before 1000 (the tasks' file went just above).
        let expired = store.expire(1_000, |_, _| {}).await.unwrap();
        assert!(expired.version.is_some(), "{expired:?}");
        let m = store.manifest().await.unwrap();
        assert_eq!(m.batches.last().unwrap().kind.as_deref(), Some("expire"));
        assert_eq!(
            m.telemetry_id(),
            m.batches.last().unwrap().id,
            "an expiry changes it"
        );

        // A manifest written before it was recorded: its version names it,
        // and a commit that changes no row keeps that name.
        let old_store = Store::open("memory://").unwrap();
        let body = r#"{"format":1,"version":7,"files":[],"sources":[],"batches":[]}"#;
        let old: Manifest = serde_json::from_str(body).unwrap();
        assert_eq!(old.telemetry_id(), "version-7");
        old_store
            .object_store
            .put(
                &paths::manifest(&old_store.root, 7),
                PutPayload::from_static(body.as_bytes()),
            )
            .await
            .unwrap();
        old_store.begin().commit().await.unwrap();
        let m = old_store.manifest().await.unwrap();
        assert_eq!((m.version, m.telemetry_id().as_str()), (8, "version-7"));
    }

    #[tokio::test]
    async fn records_of_batches_whose_files_are_gone_are_dropped() {
        // 104 ingests, then a compaction that merges their files into its
        // own: the manifest keeps the newest 100 records (the compaction's
        // among them) and those of batches with a file listed, not 105.
        let store = Store::open("memory://").unwrap();
        for n in 1..=104 {
            commit_host_rows(&store, n).await;
        }
        let m = store.manifest().await.unwrap();
        assert_eq!(m.batches.len(), 104, "every batch has its file");
        let ingests: Vec<String> = m.batches.iter().map(|b| b.id.clone()).collect();
        let report = store
            .compact(&crate::CompactOptions::default(), |_, _| {})
            .await
            .unwrap();
        assert_eq!(report.files_merged(), 104);
        let m = store.manifest().await.unwrap();
        let kept: Vec<String> = m.batches.iter().map(|b| b.id.clone()).collect();
        assert_eq!(kept.len(), BATCHES_KEPT);
        assert_eq!(kept[..99], ingests[5..]);
        assert_eq!(m.batches.last().unwrap().kind.as_deref(), Some("compact"));
        let files: std::collections::HashSet<&str> =
            m.files.iter().map(|f| f.batch.as_str()).collect();
        assert_eq!(files.len(), 1);
        assert!(files.contains(kept[99].as_str()));
        // A batch with a file listed keeps its record however old.
        let mut m = Manifest::clone(&m);
        m.files[0].batch = ingests[0].clone();
        m.batches.insert(
            0,
            BatchInfo {
                id: ingests[0].clone(),
                ..m.batches[0].clone()
            },
        );
        m.prune_batches(3);
        let ids: Vec<&str> = m.batches.iter().map(|b| b.id.as_str()).collect();
        assert_eq!(ids, [ingests[0].as_str(), &kept[97], &kept[98], &kept[99]]);
    }

    #[tokio::test]
    async fn superseded_manifests_are_removed_after_the_grace() {
        // Each commit writes the whole manifest again (1.4 MB at 1e7
        // tasks), and a report every 5 s commits 17,280 a day: those
        // superseded for the grace period are removed by the next commit.
        let kept = Store::open("memory://").unwrap();
        for n in 1..=3 {
            commit_host_rows(&kept, n).await;
        }
        assert_eq!(versions(&kept).await, [1, 2, 3], "within the grace");

        // Grace 0: a commit removes every version before the newest it
        // finds, then adds its own.
        let store = Store::open("memory://")
            .unwrap()
            .with_manifest_grace(Duration::ZERO);
        commit_host_rows(&store, 1).await;
        assert_eq!(versions(&store).await, [1]);
        for n in 2..=5u64 {
            commit_host_rows(&store, n as usize).await;
            assert_eq!(versions(&store).await, [n - 1, n]);
        }
        assert_eq!(newest(&store).await, (5, 15));
        // A version removed is an error that says so.
        let gone = store.manifest_at(2).await.unwrap_err();
        assert!(
            matches!(gone, StoreError::ManifestGone { version: 2, .. }),
            "{gone}"
        );
        assert!(gone.to_string().contains("no longer kept"), "{gone}");

        // Killed while removing (a version in the middle gone, the older
        // ones not): the next commit removes the rest.
        let slow = Store::open("memory://").unwrap();
        for n in 1..=3 {
            commit_host_rows(&slow, n).await;
        }
        slow.object_store
            .delete(&paths::manifest(&slow.root, 2))
            .await
            .unwrap();
        let slow = slow.with_manifest_grace(Duration::ZERO);
        commit_host_rows(&slow, 4).await;
        assert_eq!(versions(&slow).await, [3, 4]);
        assert_eq!(newest(&slow).await, (4, 10));
    }

    #[tokio::test]
    async fn a_commit_removes_at_most_a_thousand_superseded_manifests() {
        // A store written before superseded manifests were removed holds
        // them all: a commit removes the oldest 1,000 (one request where
        // the object store takes many), the next commits the rest.
        let store = Store::open("memory://").unwrap();
        let n = MANIFESTS_REMOVED as u64 + 5;
        for _ in 0..n {
            store.begin().commit().await.unwrap();
        }
        assert_eq!(versions(&store).await, (1..=n).collect::<Vec<_>>());
        let store = store.with_manifest_grace(Duration::ZERO);
        store.begin().commit().await.unwrap();
        // Versions 1 to 1,000 removed; 1,001 to n-1 left for the next
        // commit (superseded, but past the cap); n and n + 1 kept.
        let first = MANIFESTS_REMOVED as u64 + 1;
        assert_eq!(versions(&store).await, (first..=n + 1).collect::<Vec<_>>());
        store.begin().commit().await.unwrap();
        assert_eq!(versions(&store).await, [n + 1, n + 2]);
    }

    #[tokio::test]
    async fn a_kept_manifest_is_listed_again_before_its_successor_can_be_removed() {
        // Another process keeps version 1; this one commits 2 and 3, and
        // removes 1 and 2 (grace 0): the other must not take the absence of
        // version 2 for "1 is the newest".
        let store = Store::open("memory://")
            .unwrap()
            .with_manifest_grace(Duration::ZERO);
        let other = another_process(&store, "other").with_manifest_grace(Duration::ZERO);
        commit_host_rows(&store, 1).await;
        let first = other.manifest().await.unwrap();
        assert_eq!(first.version, 1);
        // Listed again (grace 0), still version 1: the same, not parsed
        // again.
        assert!(Arc::ptr_eq(&first, &other.manifest().await.unwrap()));
        for n in 2..=4 {
            commit_host_rows(&store, n).await;
        }
        assert_eq!(versions(&store).await, [3, 4]);
        assert_eq!(newest(&other).await, (4, 10));
        // A process that trusts its kept version 4 past the removal of
        // version 5 (its clock stopped while the machine slept; here, its
        // longer grace): its commit goes after the newest listed, not as
        // version 5 again, which nobody would read.
        let late = another_process(&store, "late");
        assert_eq!(late.manifest().await.unwrap().version, 4);
        for n in [5, 6, 7] {
            commit_host_rows(&store, n).await;
        }
        assert_eq!(versions(&store).await, [6, 7]);
        commit_host_rows(&late, 8).await;
        assert_eq!(newest(&store).await, (8, 36));
    }

    #[tokio::test]
    async fn a_manifest_is_removed_by_the_time_its_successor_was_written() {
        // Version 1 written long ago but superseded just now stays; it goes
        // once its successor is older than the grace.
        let grace = Duration::from_millis(300);
        let store = Store::open("memory://").unwrap().with_manifest_grace(grace);
        commit_host_rows(&store, 1).await;
        tokio::time::sleep(grace + Duration::from_millis(100)).await;
        commit_host_rows(&store, 2).await;
        commit_host_rows(&store, 3).await;
        assert_eq!(versions(&store).await, [1, 2, 3]);
        tokio::time::sleep(grace + Duration::from_millis(100)).await;
        commit_host_rows(&store, 4).await;
        assert_eq!(versions(&store).await, [3, 4]);
        assert_eq!(newest(&store).await, (4, 10));
    }

    #[tokio::test]
    async fn a_batch_of_many_queries_writes_its_index_in_bounded_files() {
        // One write of more queries than an index file holds in memory: a
        // file then, another at commit; the totals add up across them.
        let store = Store::open("memory://").unwrap();
        let mut batch = store.begin();
        let n = INDEX_QUERIES + 10;
        batch
            .write(Table::Tasks, &[task_rows_of(0, INDEX_QUERIES + 1, n)])
            .await
            .unwrap();
        batch
            .write(Table::Tasks, &[task_rows_of(INDEX_QUERIES + 1, 9, n)])
            .await
            .unwrap();
        batch.commit().await.unwrap();
        let manifest = store.manifest().await.unwrap();
        assert_eq!(manifest.files_named(crate::layout::QUERY_SPANS).count(), 2);
        let spans = store.query_spans(&manifest).await.unwrap().unwrap();
        assert_eq!(spans.len(), n);
        assert!(spans.values().all(|s| s.tasks == 1));
    }

    #[tokio::test]
    async fn concurrent_commits_both_land() {
        let store = Store::open("memory://").unwrap();
        let mut a = store.begin();
        let mut b = store.begin();
        a.write(Table::HostWindows, &[host_rows(3)]).await.unwrap();
        b.write(Table::HostWindows, &[host_rows(4)]).await.unwrap();
        let (ra, rb) = tokio::join!(a.commit(), b.commit());
        let mut versions = [ra.unwrap().version, rb.unwrap().version];
        versions.sort();
        assert_eq!(versions, [1, 2]);
        let m = store.manifest().await.unwrap();
        assert_eq!(m.rows_of(Table::HostWindows), 7);
        assert_eq!(m.batches.len(), 2);
    }

    #[tokio::test]
    async fn local_store_and_bad_urls() {
        let dir = std::env::temp_dir().join(format!("culprit-store-test-{}", std::process::id()));
        let store = Store::open(dir.to_str().unwrap()).unwrap();
        let mut batch = store.begin();
        batch
            .write(Table::HostWindows, &[host_rows(2)])
            .await
            .unwrap();
        batch.commit().await.unwrap();
        let again = Store::open(&format!("file://{}", dir.display())).unwrap();
        assert_eq!(
            again.manifest().await.unwrap().rows_of(Table::HostWindows),
            2
        );
        assert!(dir
            .join("_culprit/manifests/00000000000000000001.json")
            .exists());
        std::fs::remove_dir_all(&dir).unwrap();

        let err = Store::open("ftp://x/y").unwrap_err().to_string();
        assert!(err.contains("unsupported scheme"), "{err}");
    }
}

/// Checks that a data file's columns are those its table stores: every
/// required column (of those asked for) is present and every known column
/// has the stored type, so that readers may downcast without panicking.
/// A file of an unknown table is not checked (nothing reads it as a table).
fn check_schema(
    path: &str,
    table: &str,
    found: &arrow::datatypes::Schema,
    columns: Option<&[&str]>,
) -> Result<()> {
    use arrow::datatypes::DataType;
    let Ok(t) = table.parse::<culprit_core::Table>() else {
        return Ok(());
    };
    let bad = |column: &str, problem: String| StoreError::ForeignSchema {
        path: path.to_string(),
        table: table.to_string(),
        column: column.to_string(),
        problem,
    };
    for expected in crate::layout::stored_schema(t).fields() {
        let name = expected.name();
        if columns.is_some_and(|c| !c.contains(&name.as_str())) {
            continue;
        }
        match found.field_with_name(name) {
            Err(_) if !expected.is_nullable() => {
                return Err(bad(name, "is missing".into()));
            }
            Err(_) => {}
            Ok(f) => {
                let same = match (expected.data_type(), f.data_type()) {
                    // The time zone does not change how values are read.
                    (DataType::Timestamp(a, _), DataType::Timestamp(b, _)) => a == b,
                    (a, b) => a == b,
                };
                if !same {
                    return Err(bad(
                        name,
                        format!(
                            "has type {}, expected {}",
                            f.data_type(),
                            expected.data_type()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod check_schema_tests {
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn check_schema_names_file_column_and_types() {
        let good = culprit_core::Table::Tasks.schema();
        assert!(super::check_schema("t.parquet", "tasks", &good, None).is_ok());
        let fields: Vec<Field> = good
            .fields()
            .iter()
            .map(|f| {
                if f.name() == "launch_time" {
                    Field::new("launch_time", DataType::Utf8, true)
                } else {
                    f.as_ref().clone()
                }
            })
            .collect();
        let bad = Schema::new(fields);
        let e = super::check_schema("t.parquet", "tasks", &bad, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t.parquet") && e.contains("launch_time") && e.contains("Utf8"),
            "{e}"
        );
        // A projection without the column does not look at it.
        assert!(super::check_schema("t.parquet", "tasks", &bad, Some(&["task_id"])).is_ok());
        let missing = Schema::new(
            good.fields()
                .iter()
                .filter(|f| f.name() != "host")
                .map(|f| f.as_ref().clone())
                .collect::<Vec<_>>(),
        );
        let e = super::check_schema("t.parquet", "tasks", &missing, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("host is missing"), "{e}");
    }
}
