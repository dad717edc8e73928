//! The tasks an ingest knows (stored, or accepted earlier in it), in
//! bounded memory.
//!
//! Every window row is checked against its task's run, and every task row
//! against the tasks known (a duplicate), so the ingest needs a map from
//! task id to run that covers every task it has seen: one entry per task,
//! which is what memory would grow by with the input. The map is held in
//! memory up to a number of tasks ([`DEFAULT_MEMORY_TASKS`]); past it, the
//! entries in memory are sorted by key and merged into one sorted file of
//! fixed-size records (a "run") in a temporary folder, and memory starts
//! again empty. A key not in memory is looked up in the run: a small
//! in-memory index (the first key of every block of [`BLOCK`] records)
//! names the one block to read (one `pread` of 1.8 KB, served by the page
//! cache, which is not the process's memory). The folder is removed when
//! the index is dropped.
//!
//! Memory is then the map (at most [`DEFAULT_MEMORY_TASKS`] entries, about
//! 28 MiB) plus 0.5 byte per task for the block index, whatever the input's
//! size. The cost is the merges (each rewrites the run: the work grows with
//! the square of the tasks over the limit, about 1.7 GB of sequential I/O
//! at 5e6 tasks) and a read per lookup of a task not in memory.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A digest of a key or task id ([`crate::identity::key_digest`]).
pub type Key = (u64, u64);

/// The most tasks held in memory: 7/8 of 2^19, so the map's table stays at
/// 2^19 slots of 56 bytes (about 28 MiB) and never doubles.
pub const DEFAULT_MEMORY_TASKS: usize = 458_752;

/// Records per block of a run: what one lookup reads.
const BLOCK: usize = 32;

/// Bytes of a record in a run: the key and the span.
const RECORD: usize = 56;

/// No host bucket (a task stored before this ingest: its host is not read).
pub const NO_BUCKET: u32 = u32::MAX;

/// A task this ingest knows: its run, for checking its windows, its host
/// bucket, for writing them, and where it was accepted, for the message of
/// a duplicate. 40 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSpan {
    pub launch: i64,
    pub finish: i64,
    /// `i64::MIN`: no ready time.
    pub(crate) ready: i64,
    /// Its place in its file (see `validate::pack`).
    pub(crate) origin: u64,
    /// The file (`Known::files`) that gave it, `u32::MAX` for a stored task.
    pub(crate) file: u32,
    /// The host bucket of the task ([`NO_BUCKET`] if unknown).
    pub bucket: u32,
}

impl TaskSpan {
    fn encode(&self, key: Key, out: &mut [u8]) {
        let fields = [
            key.0,
            key.1,
            self.launch as u64,
            self.finish as u64,
            self.ready as u64,
            self.origin,
        ];
        for (i, v) in fields.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        out[48..52].copy_from_slice(&self.file.to_le_bytes());
        out[52..56].copy_from_slice(&self.bucket.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> (Key, TaskSpan) {
        let u = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
        let w = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        (
            (u(0), u(1)),
            TaskSpan {
                launch: u(2) as i64,
                finish: u(3) as i64,
                ready: u(4) as i64,
                origin: u(5),
                file: w(48),
                bucket: w(52),
            },
        )
    }
}

fn key_of(bytes: &[u8]) -> Key {
    let u = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
    (u(0), u(1))
}

/// The sorted file of the tasks spilled.
struct Run {
    path: PathBuf,
    file: File,
    records: usize,
    /// The first key of each block.
    firsts: Vec<Key>,
}

impl Run {
    fn get(&self, key: &Key) -> io::Result<Option<TaskSpan>> {
        let block = self.firsts.partition_point(|k| k <= key);
        if block == 0 {
            return Ok(None);
        }
        let start = (block - 1) * BLOCK;
        let n = BLOCK.min(self.records - start);
        let mut buf = [0u8; BLOCK * RECORD];
        let buf = &mut buf[..n * RECORD];
        self.file.read_exact_at(buf, (start * RECORD) as u64)?;
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let rec = &buf[mid * RECORD..(mid + 1) * RECORD];
            match key_of(rec).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Some(TaskSpan::decode(rec).1)),
            }
        }
        Ok(None)
    }
}

/// Writes a run, record by record, in key order.
struct RunWriter {
    out: BufWriter<File>,
    records: usize,
    firsts: Vec<Key>,
    buf: [u8; RECORD],
}

impl RunWriter {
    fn put(&mut self, key: Key, span: &TaskSpan) -> io::Result<()> {
        if self.records.is_multiple_of(BLOCK) {
            self.firsts.push(key);
        }
        span.encode(key, &mut self.buf);
        self.records += 1;
        self.out.write_all(&self.buf)
    }
}

/// The tasks known: a map in memory up to a limit, the rest in a sorted
/// run on disk. See the module's doc.
pub struct TaskIndex {
    memory: HashMap<Key, TaskSpan>,
    limit: usize,
    run: Option<Run>,
    dir: Option<PathBuf>,
    spills: usize,
    /// The first error reading or writing the run: the ingest fails with
    /// it ([`TaskIndex::take_error`]).
    error: Option<io::Error>,
}

impl Default for TaskIndex {
    fn default() -> Self {
        TaskIndex::new(DEFAULT_MEMORY_TASKS)
    }
}

impl Drop for TaskIndex {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl TaskIndex {
    /// An index holding at most `limit` tasks in memory (at least 1).
    pub fn new(limit: usize) -> Self {
        TaskIndex {
            memory: HashMap::new(),
            limit: limit.max(1),
            run: None,
            dir: None,
            spills: 0,
            error: None,
        }
    }

    /// Times the tasks in memory were spilled to the run.
    pub fn spills(&self) -> usize {
        self.spills
    }

    /// The task with this key, if known. A failed read of the run is kept
    /// ([`TaskIndex::take_error`]) and the task taken as unknown.
    pub fn get(&mut self, key: &Key) -> Option<TaskSpan> {
        if let Some(span) = self.memory.get(key) {
            return Some(*span);
        }
        match self.run.as_ref().map(|r| r.get(key)) {
            None | Some(Ok(None)) => None,
            Some(Ok(found)) => found,
            Some(Err(e)) => {
                self.error.get_or_insert(e);
                None
            }
        }
    }

    /// Adds a task not known yet (see [`TaskIndex::get`]): past the limit,
    /// the tasks in memory are merged into the run.
    pub fn insert_new(&mut self, key: Key, span: TaskSpan) {
        self.memory.insert(key, span);
        if self.memory.len() >= self.limit {
            if let Err(e) = self.spill() {
                self.error.get_or_insert(e);
            }
        }
    }

    /// The first error of the run, if any (an ingest that saw one fails).
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    fn dir(&mut self) -> io::Result<PathBuf> {
        if let Some(dir) = &self.dir {
            return Ok(dir.clone());
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "culprit-ingest-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        self.dir = Some(dir.clone());
        Ok(dir)
    }

    /// Merges the tasks in memory into the run (a new file; the old one is
    /// removed), and empties memory.
    fn spill(&mut self) -> io::Result<()> {
        let dir = self.dir()?;
        let mut fresh: Vec<(Key, TaskSpan)> =
            std::mem::take(&mut self.memory).into_iter().collect();
        fresh.sort_unstable_by_key(|e| e.0);
        let path = dir.join(format!("tasks-{}.run", self.spills));
        self.spills += 1;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        let old = self.run.take();
        let total = fresh.len() + old.as_ref().map_or(0, |r| r.records);
        let mut w = RunWriter {
            out: BufWriter::with_capacity(1 << 16, file.try_clone()?),
            records: 0,
            firsts: Vec::with_capacity(total.div_ceil(BLOCK)),
            buf: [0; RECORD],
        };
        let mut fresh = fresh.into_iter().peekable();
        if let Some(old) = &old {
            let mut r = BufReader::with_capacity(1 << 16, File::open(&old.path)?);
            let mut rec = [0u8; RECORD];
            for _ in 0..old.records {
                r.read_exact(&mut rec)?;
                let (key, span) = TaskSpan::decode(&rec);
                while let Some((k, s)) = fresh.next_if(|(k, _)| *k < key) {
                    w.put(k, &s)?;
                }
                // A key in both (not added by `insert_new`): the run's.
                if fresh.peek().is_some_and(|(k, _)| *k == key) {
                    fresh.next();
                }
                w.put(key, &span)?;
            }
        }
        for (k, s) in fresh {
            w.put(k, &s)?;
        }
        w.out.flush()?;
        let RunWriter {
            records, firsts, ..
        } = w;
        if let Some(old) = old {
            drop(old.file);
            std::fs::remove_file(&old.path)?;
        }
        self.run = Some(Run {
            path,
            file,
            records,
            firsts,
        });
        self.memory = HashMap::with_capacity(self.limit);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(i: u64) -> TaskSpan {
        TaskSpan {
            launch: i as i64,
            finish: i as i64 * 2,
            ready: -(i as i64),
            origin: i | 1 << 63,
            file: (i % 7) as u32,
            bucket: (i % 16) as u32,
        }
    }

    fn key(i: u64) -> Key {
        crate::identity::key_digest(&[&format!("t{i}")])
    }

    #[test]
    fn ingest_index_spilled_finds_every_task_and_no_other() {
        let mut index = TaskIndex::new(100);
        for i in 0..1_000 {
            assert_eq!(index.get(&key(i)), None);
            index.insert_new(key(i), span(i));
        }
        assert_eq!(index.spills(), 10);
        for i in 0..1_000 {
            assert_eq!(index.get(&key(i)), Some(span(i)), "{i}");
        }
        for i in 1_000..2_000 {
            assert_eq!(index.get(&key(i)), None, "{i}");
        }
        assert!(index.take_error().is_none());
        let dir = index.dir.clone().expect("spilled");
        assert!(dir.exists());
        drop(index);
        assert!(!dir.exists(), "the temporary folder is removed");
    }
}
