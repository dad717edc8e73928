//! An analysis of a large store swept by the workers of a cluster (issue
//! #19): attribution is per host and resource (method.md section 2), so the
//! host buckets of `task_windows` are split among the workers, each sweeps
//! its buckets from the shared store ([`Snapshot::sweep_share`]) and sends
//! back their level-4 nodes as Arrow rows ([`share_schema`]); the
//! coordinator sweeps the cluster-wide slots meanwhile and combines
//! (`culprit_core::method::Shards`): transitive slot blame, levels 5-6 and
//! the rankings run on it, over the same level 4 a single process computes.
//!
//! How a share reaches a worker is the [`Sweeper`]'s business (the SQL
//! layer runs it as a plan of the distributed DataFusion engine); this file
//! knows only the job ([`SweepJob`]), the rows, and the snapshot they are
//! computed from, which both sides read at the same manifest version.

use std::fmt;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Float64Array, UInt32Array, UInt32Builder, UInt8Array, UInt8Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use culprit_core::method::model::{resource_index, Interner};
use culprit_core::method::{
    sweep_share, Attribution, BucketNodes, Culprit, Entry, Explained, Shards, Windows,
};
use culprit_core::{Resource, Table};
use rustc_hash::FxHashMap;

use crate::buckets::StoreBuckets;
use crate::engine::Snapshot;
use crate::error::Error;

/// Rows per batch of a share's answer.
const BATCH_ROWS: usize = 64 * 1024;

/// Runs the shares of an analysis somewhere else (the workers of a
/// cluster) and returns their rows ([`share_schema`]). Called on a thread
/// that may block, outside the query's runtime (`runtime` is its handle).
pub trait Sweeper: Send + Sync + fmt::Debug {
    /// How many workers would take shares now (those up). With fewer than
    /// two, analyses run here as without workers: one share would be one
    /// process's work, and the engine would run it in this process anyway.
    fn workers(&self) -> usize;

    /// Sweeps `buckets` of `snapshot`'s store for `job`, split among the
    /// workers, handing their rows to `sink` as they come (each bucket's
    /// rows in the order its share gave them).
    fn sweep(
        &self,
        runtime: &tokio::runtime::Handle,
        snapshot: &Snapshot,
        job: &SweepJob,
        buckets: &[u32],
        sink: &mut dyn FnMut(RecordBatch) -> Result<(), Error>,
    ) -> Result<(), Error>;
}

/// What a worker needs to sweep its share of an analysis, besides its
/// buckets: the manifest version the coordinator read, the dataset's size
/// (to check both read the same), the stages and tasks explained, the
/// windows and the attribution.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepJob {
    pub version: u64,
    pub tasks: u64,
    pub hosts: u64,
    pub stages: Vec<bool>,
    pub victim_tasks: Option<Vec<bool>>,
    pub bounds: Vec<i64>,
    pub paper: bool,
}

const MAGIC: &[u8; 4] = b"CSJ1";

impl SweepJob {
    /// The job as bytes (the plan node's codec carries them).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.stages.len() / 8 + self.bounds.len() * 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.tasks.to_le_bytes());
        out.extend_from_slice(&self.hosts.to_le_bytes());
        out.push(self.paper as u8);
        out.extend_from_slice(&(self.bounds.len() as u32).to_le_bytes());
        for b in &self.bounds {
            out.extend_from_slice(&b.to_le_bytes());
        }
        put_bits(&mut out, &self.stages);
        match &self.victim_tasks {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                put_bits(&mut out, t);
            }
        }
        out
    }

    /// The job of [`SweepJob::to_bytes`]; anything else is an error saying
    /// what is wrong, never a panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<SweepJob, Error> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)? != MAGIC {
            return Err(bad("it does not start with the job's marker"));
        }
        let version = r.u64()?;
        let tasks = r.u64()?;
        let hosts = r.u64()?;
        let paper = r.u8()? != 0;
        let n = r.u32()? as usize;
        if n > r.left() / 8 {
            return Err(bad("more window bounds than bytes"));
        }
        let bounds = (0..n)
            .map(|_| r.u64().map(|v| v as i64))
            .collect::<Result<_, _>>()?;
        let stages = r.bits()?;
        let victim_tasks = match r.u8()? {
            0 => None,
            _ => Some(r.bits()?),
        };
        if r.left() != 0 {
            return Err(bad("bytes after its end"));
        }
        Ok(SweepJob {
            version,
            tasks,
            hosts,
            stages,
            victim_tasks,
            bounds,
            paper,
        })
    }

    fn attribution(&self) -> Attribution {
        if self.paper {
            Attribution::Paper
        } else {
            Attribution::Window
        }
    }
}

fn bad(why: &str) -> Error {
    Error::Internal(format!(
        "a sweep job from the coordinator is malformed: {why}"
    ))
}

fn put_bits(out: &mut Vec<u8>, bits: &[bool]) {
    out.extend_from_slice(&(bits.len() as u64).to_le_bytes());
    for chunk in bits.chunks(8) {
        out.push(
            chunk
                .iter()
                .enumerate()
                .fold(0u8, |b, (i, &on)| b | ((on as u8) << i)),
        );
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.left() {
            return Err(bad("it ends too early"));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn bits(&mut self) -> Result<Vec<bool>, Error> {
        let n = self.u64()?;
        let bytes = n.div_ceil(8);
        if bytes > self.left() as u64 {
            return Err(bad("a mask longer than its bytes"));
        }
        let packed = self.take(bytes as usize)?;
        Ok((0..n as usize)
            .map(|i| packed[i / 8] & (1 << (i % 8)) != 0)
            .collect())
    }
}

/// The rows of a share's answer: one per level-4 node of a host bucket's
/// sweeps (`detail` by name, dictionary-encoded: each process interns its
/// own ids).
pub fn share_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("bucket", DataType::UInt32, false),
        Field::new("window", DataType::UInt32, false),
        Field::new("stage", DataType::UInt32, false),
        Field::new("resource", DataType::UInt8, false),
        Field::new(
            "detail",
            DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8)),
            false,
        ),
        Field::new("host", DataType::UInt32, false),
        Field::new("culprit", DataType::UInt32, false),
        Field::new("seconds", DataType::Float64, false),
    ]))
}

impl Snapshot {
    /// The job of an analysis of this snapshot explaining `victim`.
    fn job(&self, victim: Explained<'_>, windows: &Windows, mode: Attribution) -> SweepJob {
        SweepJob {
            version: self.source.1.version,
            tasks: self.ds.tasks.len() as u64,
            hosts: self.ds.hosts.len() as u64,
            stages: victim.stage_mask().to_vec(),
            victim_tasks: victim.task_mask().map(|t| t.to_vec()),
            bounds: windows.bounds().to_vec(),
            paper: mode == Attribution::Paper,
        }
    }

    /// A worker's share: the sweeps of host buckets `buckets` for `job`,
    /// read from the store bucket by bucket, as rows of [`share_schema`].
    /// The snapshot must be the job's version read with its window rows in
    /// the store ([`crate::Engine::snapshot_at`]). Runs on every core; call
    /// it on a blocking thread of a runtime.
    pub fn sweep_share(&self, job: &SweepJob, buckets: &[u32]) -> Result<Vec<RecordBatch>, Error> {
        let ds = &self.ds;
        if job.version != self.source.1.version
            || job.tasks != ds.tasks.len() as u64
            || job.hosts != ds.hosts.len() as u64
            || job.stages.len() != ds.stages.len()
            || job
                .victim_tasks
                .as_ref()
                .is_some_and(|t| t.len() != ds.tasks.len())
        {
            return Err(Error::Internal(format!(
                "the coordinator read store version {} ({} tasks, {} hosts, {} stages), this worker read version {} ({} tasks, {} hosts, {} stages)",
                job.version,
                job.tasks,
                job.hosts,
                job.stages.len(),
                self.source.1.version,
                ds.tasks.len(),
                ds.hosts.len(),
                ds.stages.len()
            )));
        }
        let Some(store_buckets) = &self.buckets else {
            return Err(Error::Internal(
                "a share is swept from a snapshot whose window rows are in the store".into(),
            ));
        };
        let windows = Windows::from_bounds(job.bounds.clone())?;
        let victim = Explained::new(&job.stages, job.victim_tasks.as_deref());
        let reader = store_buckets.reader(ds, crate::analyses::runtime()?);
        let wanted: Vec<usize> = buckets.iter().map(|&b| b as usize).collect();
        let parts = sweep_share(ds, &reader, victim, &windows, job.attribution(), &wanted)?;
        let details = culprit_core::method::BucketSource::details(&reader)?;
        encode(parts, &details)
    }

    /// How many buckets a worker should sweep at a time (one sweep of
    /// [`Snapshot::sweep_share`] each): `per_core` on a store whose window
    /// files all have a bucket, so it holds the nodes of a few buckets at
    /// once; all of `share` when some files have none, since every sweep
    /// reads those files again.
    pub fn buckets_at_a_time(&self, share: usize, per_core: usize) -> usize {
        match &self.buckets {
            Some(b) if b.loose_files() > 0 => share.max(1),
            _ => per_core.max(1),
        }
    }

    /// The working memory of sweeping `chunk` host buckets of this store
    /// on a worker, about: their share of the store's window rows at
    /// [`crate::budget::HEAVY_BYTES_PER_WINDOW_ROW`] (the hash spreads
    /// hosts evenly over the buckets; on a store with files of no bucket
    /// those files are read in batches and only the chunk's rows kept).
    pub fn share_estimate(&self, chunk: usize) -> usize {
        let rows = self.source.1.rows_of(Table::TaskWindows) as usize;
        let rows = match &self.buckets {
            Some(b) if b.buckets() > 0 => rows.saturating_mul(chunk.min(b.buckets())) / b.buckets(),
            _ => rows,
        };
        rows.saturating_mul(crate::budget::HEAVY_BYTES_PER_WINDOW_ROW)
    }

    /// Whether this snapshot's analyses are swept by a cluster's workers:
    /// its window rows are in the store, the engine has a [`Sweeper`] with
    /// two workers up or more, and no task has two hosts (each bucket's
    /// rows are then its own).
    pub(crate) fn sharded(&self) -> Option<(&Arc<dyn Sweeper>, &Arc<StoreBuckets>)> {
        match (&self.sweeper, &self.buckets) {
            (Some(s), Some(b)) if self.ds.host_conflicts == 0 && s.workers() >= 2 => Some((s, b)),
            _ => None,
        }
    }
}

/// Buckets' nodes as rows of [`share_schema`].
fn encode(parts: Vec<BucketNodes>, details: &Interner) -> Result<Vec<RecordBatch>, Error> {
    let schema = share_schema();
    // Every batch carries the share's detail names; its rows their ids.
    let names: ArrayRef = Arc::new(arrow::array::StringArray::from_iter_values(
        (0..details.len() as u32).map(|i| details.name(i)),
    ));
    let mut out = Vec::new();
    let mut rows = Rows::default();
    // Each bucket's nodes are dropped once encoded.
    for part in parts {
        for (w, entries) in &part.windows {
            for e in entries {
                let host = e.host().ok_or_else(|| {
                    Error::Internal("a host bucket's sweep gave a node without a host".into())
                })?;
                rows.bucket.append_value(part.bucket as u32);
                rows.window.append_value(*w);
                rows.stage.append_value(e.stage);
                rows.resource.append_value(resource_index(e.resource) as u8);
                if e.detail as usize >= details.len() {
                    return Err(Error::Internal(format!(
                        "a node names detail {} of {}",
                        e.detail,
                        details.len()
                    )));
                }
                rows.detail.append_value(e.detail);
                rows.host.append_value(host);
                rows.culprit.append_value(e.culprit().code());
                rows.seconds.push(e.seconds);
                if rows.seconds.len() == BATCH_ROWS {
                    out.push(std::mem::take(&mut rows).finish(&schema, &names)?);
                }
            }
        }
    }
    if !rows.seconds.is_empty() {
        out.push(rows.finish(&schema, &names)?);
    }
    Ok(out)
}

#[derive(Default)]
struct Rows {
    bucket: UInt32Builder,
    window: UInt32Builder,
    stage: UInt32Builder,
    resource: UInt8Builder,
    detail: UInt32Builder,
    host: UInt32Builder,
    culprit: UInt32Builder,
    seconds: Vec<f64>,
}

impl Rows {
    fn finish(mut self, schema: &SchemaRef, names: &ArrayRef) -> Result<RecordBatch, Error> {
        let detail = arrow::array::DictionaryArray::<arrow::datatypes::UInt32Type>::try_new(
            self.detail.finish(),
            names.clone(),
        )
        .map_err(|e| Error::Internal(format!("a share's rows: {e}")))?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.bucket.finish()),
            Arc::new(self.window.finish()),
            Arc::new(self.stage.finish()),
            Arc::new(self.resource.finish()),
            Arc::new(detail),
            Arc::new(self.host.finish()),
            Arc::new(self.culprit.finish()),
            Arc::new(Float64Array::from(self.seconds)),
        ];
        RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| Error::Internal(format!("a share's rows: {e}")))
    }
}

/// The coordinator's side: the buckets swept by the [`Sweeper`], their
/// rows read back into level-4 nodes of this snapshot's ids.
pub(crate) struct Sharded<'a> {
    pub runtime: tokio::runtime::Handle,
    pub snapshot: &'a Snapshot,
    pub sweeper: &'a dyn Sweeper,
    pub buckets: &'a StoreBuckets,
}

impl Shards for Sharded<'_> {
    type Error = Error;

    fn buckets(&self) -> usize {
        self.buckets.buckets()
    }

    fn bucket_of(&self, host: u32) -> usize {
        self.buckets.bucket_of(host)
    }

    fn sweep(
        &self,
        buckets: &[usize],
        victim: Explained<'_>,
        windows: &Windows,
        mode: Attribution,
    ) -> Result<(Vec<BucketNodes>, Interner), Error> {
        let job = self.snapshot.job(victim, windows, mode);
        let asked: Vec<u32> = buckets.iter().map(|&b| b as u32).collect();
        let started = std::time::Instant::now();
        let mut decoder = Decoder::new(self.snapshot, windows.len());
        self.sweeper
            .sweep(&self.runtime, self.snapshot, &job, &asked, &mut |batch| {
                decoder.add(&batch)
            })?;
        log::info!(
            "blame: {} host buckets swept by the workers ({} level-4 nodes, {:.2} s)",
            asked.len(),
            decoder.nodes,
            started.elapsed().as_secs_f64()
        );
        Ok((decoder.parts, decoder.details))
    }
}

/// Rows of [`share_schema`] back into nodes, batch by batch as they come,
/// their details interned after the dataset's own; every id checked
/// against the dataset (a worker that read other data is an error, not a
/// wrong answer).
struct Decoder<'a> {
    snapshot: &'a Snapshot,
    schema: SchemaRef,
    windows: usize,
    details: Interner,
    parts: Vec<BucketNodes>,
    index: FxHashMap<u32, usize>,
    nodes: usize,
}

impl<'a> Decoder<'a> {
    fn new(snapshot: &'a Snapshot, windows: usize) -> Decoder<'a> {
        Decoder {
            snapshot,
            schema: share_schema(),
            windows,
            details: snapshot.ds.details.clone(),
            parts: Vec::new(),
            index: FxHashMap::default(),
            nodes: 0,
        }
    }

    fn add(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        let snapshot = self.snapshot;
        let ds = &snapshot.ds;
        let windows = self.windows;
        let wrong = |what: &str| Error::Internal(format!("a worker's share has {what}"));
        if batch.schema().fields() != self.schema.fields() {
            return Err(wrong("rows of another schema"));
        }
        let col = |i: usize| batch.column(i);
        let u32s = |i: usize| -> Result<&UInt32Array, Error> {
            col(i)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .ok_or_else(|| wrong("a column of another type"))
        };
        let (bucket, window, stage, host, culprit) =
            (u32s(0)?, u32s(1)?, u32s(2)?, u32s(5)?, u32s(6)?);
        let resource = col(3)
            .as_any()
            .downcast_ref::<UInt8Array>()
            .ok_or_else(|| wrong("a column of another type"))?;
        let detail = col(4)
            .as_any()
            .downcast_ref::<arrow::array::DictionaryArray<arrow::datatypes::UInt32Type>>()
            .ok_or_else(|| wrong("a column of another type"))?;
        let names = detail
            .values()
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .ok_or_else(|| wrong("a column of another type"))?;
        if names.null_count() > 0 {
            return Err(wrong("nulls"));
        }
        // The batch's names, interned once each.
        let ids: Vec<u32> = (0..names.len())
            .map(|i| self.details.intern(names.value(i)))
            .collect();
        let keys = detail.keys();
        let seconds = col(7)
            .as_any()
            .downcast_ref::<Float64Array>()
            .ok_or_else(|| wrong("a column of another type"))?;
        if [
            bucket.null_count(),
            detail.null_count(),
            seconds.null_count(),
        ]
        .iter()
        .any(|&n| n > 0)
        {
            return Err(wrong("nulls"));
        }
        for i in 0..batch.num_rows() {
            let (b, w, s, h, c) = (
                bucket.value(i),
                window.value(i),
                stage.value(i),
                host.value(i),
                culprit.value(i),
            );
            let r = resource.value(i) as usize;
            let culprit = Culprit::from_code(c);
            if w as usize >= windows
                || s as usize >= ds.stages.len()
                || h as usize >= ds.hosts.len()
                || r >= Resource::ALL.len()
                || matches!(culprit, Culprit::Stage(cs) if cs as usize >= ds.stages.len())
            {
                return Err(wrong(&format!(
                    "a node outside the dataset (window {w}, stage {s}, host {h}, resource {r}, culprit {c})"
                )));
            }
            let d = *ids
                .get(keys.value(i) as usize)
                .ok_or_else(|| wrong("a detail id outside its names"))?;
            let e = Entry::new(
                s,
                Resource::ALL[r],
                d,
                Some(h),
                culprit,
                None,
                seconds.value(i),
            );
            let parts = &mut self.parts;
            let at = *self.index.entry(b).or_insert_with(|| {
                parts.push(BucketNodes {
                    bucket: b as usize,
                    windows: Vec::new(),
                });
                parts.len() - 1
            });
            let part = &mut parts[at];
            match part.windows.last_mut() {
                Some((lw, entries)) if *lw == w => entries.push(e),
                _ => part.windows.push((w, vec![e])),
            }
        }
        self.nodes += batch.num_rows();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_survives_its_bytes_and_bad_bytes_are_errors() {
        let job = SweepJob {
            version: 42,
            tasks: 11,
            hosts: 3,
            stages: vec![true, false, true, true, false, false, false, false, true],
            victim_tasks: Some(vec![false; 11]),
            bounds: vec![-5, 10, 10, 99],
            paper: true,
        };
        let bytes = job.to_bytes();
        assert_eq!(SweepJob::from_bytes(&bytes).unwrap(), job);
        let plain = SweepJob {
            victim_tasks: None,
            paper: false,
            ..job.clone()
        };
        assert_eq!(SweepJob::from_bytes(&plain.to_bytes()).unwrap(), plain);
        // Every truncation and a trailing byte are refused, none panics.
        for n in 0..bytes.len() {
            assert!(SweepJob::from_bytes(&bytes[..n]).is_err(), "{n} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(SweepJob::from_bytes(&longer).is_err());
        // A mask claiming more bits than there are bytes.
        let mut huge = bytes[..4 + 8 * 3 + 1 + 4 + 8 * 4].to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(SweepJob::from_bytes(&huge).is_err());
    }
}
