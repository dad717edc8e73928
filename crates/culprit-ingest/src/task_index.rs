//! The tasks an ingest knows (stored, or accepted earlier in it), in
//! bounded memory.
//!
//! Every window row is checked against its task's run, and every task row
//! against the tasks known (a duplicate), so the ingest needs a map from
//! task id to run that covers every task it has seen: one entry per task,
//! which is what memory would grow by with the input. The first tasks, up
//! to a number ([`DEFAULT_MEMORY_TASKS`]), stay in memory for the whole
//! ingest (with interchange files, tasks are read in the order their
//! windows come); the tasks after them are held a quarter as many at a
//! time, then sorted by key and written as a sorted file of fixed-size
//! records (a "run") in a temporary folder. Runs are merged size-tiered
//! (the two newest while the older is not twice the newer), so there are
//! about log2(spilled / held) of them and each task is rewritten about as
//! many times. A key not in memory is looked up in the runs, newest first:
//! a Bloom filter per run skips the runs without it, a
//! small in-memory index (the first key of every block of [`BLOCK`]
//! records) names the one block to read (one `pread` of 912 bytes, served
//! by the page cache, which is not the process's memory), and the tasks
//! found lately are cached. The folder is removed when the index is
//! dropped.
//!
//! Memory is then the maps (at most 1.25 [`DEFAULT_MEMORY_TASKS`]
//! entries, 40 MiB), the cache of tasks found (5.5 MiB), and per task
//! spilled a byte of block index, 1.25 bytes of Bloom filter and a
//! bit for the windows written ([`TaskIndex::note_windows`]), whatever the
//! input's size.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A digest of a key or task id ([`crate::identity::key_digest`]).
pub type Key = (u64, u64);

/// Hashes a [`Key`] for a map: a key is already a uniform 128-bit digest,
/// so its words are folded, not hashed again (SipHash cost an ingest 8% of
/// its time).
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `Key` (two `write_u64`); anything else still hashes.
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = self.0.rotate_left(29) ^ v;
    }
}

/// A map keyed by [`Key`] digests.
pub type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;

/// A set of [`Key`] digests.
pub type KeySet = HashSet<Key, BuildHasherDefault<KeyHasher>>;

/// Entries of the cache of tasks found in the run (a power of two).
const FOUND_CACHE: usize = 1 << 16;

/// The first tasks held in memory for the whole ingest: 7/8 of 2^19, so
/// the map's table is 2^19 slots of 64 bytes (32 MiB) and never doubles.
/// The tasks after them are held a quarter as many at a time (8 MiB).
pub const DEFAULT_MEMORY_TASKS: usize = 458_752;

/// Records per block of a run: what one lookup reads (912 bytes).
const BLOCK: usize = 16;

/// Bytes of a record in a run: the key, the span, and whether windows of
/// the task were written (see [`TaskIndex::note_windows`]).
const RECORD: usize = 57;

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
    fn encode(&self, key: Key, windows: bool, out: &mut [u8]) {
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
        out[56] = u8::from(windows);
    }

    fn decode(bytes: &[u8]) -> (Key, TaskSpan, bool) {
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
            bytes[56] != 0,
        )
    }
}

fn key_of(bytes: &[u8]) -> Key {
    let u = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
    (u(0), u(1))
}

/// A sorted file of spilled tasks.
struct Run {
    path: PathBuf,
    file: File,
    records: usize,
    /// The first key of each block.
    firsts: Vec<Key>,
    /// Per record: windows of its task were written since the run was
    /// (the record's own flag says whether before). A bit a task.
    windows: Vec<u64>,
    /// Which keys may be in the run: a lookup reads only the runs that
    /// may hold its key (a new task, known nowhere, reads none at all).
    bloom: Option<Bloom>,
}

impl Run {
    /// The record of `key`: its place in the run, the span, and whether
    /// windows of the task were written before the run was.
    fn get(&self, key: &Key) -> io::Result<Option<(usize, TaskSpan, bool)>> {
        if self.bloom.as_ref().is_some_and(|b| !b.may_hold(key)) {
            return Ok(None);
        }
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
                std::cmp::Ordering::Equal => {
                    let (_, span, windows) = TaskSpan::decode(rec);
                    return Ok(Some((start + mid, span, windows)));
                }
            }
        }
        Ok(None)
    }

    fn windows_since(&self, at: usize) -> bool {
        self.windows[at / 64] & (1 << (at % 64)) != 0
    }

    /// Its records in key order, with the windows flag (the record's or
    /// set since).
    fn records(&self) -> io::Result<impl Iterator<Item = io::Result<(Key, TaskSpan, bool)>> + '_> {
        let mut r = BufReader::with_capacity(1 << 16, File::open(&self.path)?);
        let mut rec = [0u8; RECORD];
        Ok((0..self.records).map(move |at| {
            r.read_exact(&mut rec)?;
            let (key, span, windows) = TaskSpan::decode(&rec);
            Ok((key, span, windows || self.windows_since(at)))
        }))
    }
}

/// A Bloom filter of keys: 10 bits and 7 probes a key (about 1% of the
/// keys not held pass).
struct Bloom {
    bits: Vec<u64>,
}

impl Bloom {
    fn new(keys: usize) -> Bloom {
        Bloom {
            bits: vec![0; (keys * 10).div_ceil(64).max(1)],
        }
    }

    /// The bits of `key` in a filter of `m` bits (a free function: adding
    /// sets them while it computes them, with nothing allocated).
    fn probes(m: u64, key: &Key) -> impl Iterator<Item = usize> {
        let (a, b) = (key.0, key.1 | 1);
        // Each probe's hash mapped onto [0, m) by a multiply (no division:
        // a new task tests every run's filter).
        (0..7u64).map(move |i| {
            let h = a.wrapping_add(i.wrapping_mul(b));
            ((u128::from(h) * u128::from(m)) >> 64) as usize
        })
    }

    fn size(&self) -> u64 {
        (self.bits.len() * 64) as u64
    }

    fn add(&mut self, key: &Key) {
        for p in Self::probes(self.size(), key) {
            self.bits[p / 64] |= 1 << (p % 64);
        }
    }

    fn may_hold(&self, key: &Key) -> bool {
        Self::probes(self.size(), key).all(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }
}

/// Writes a run, record by record, in key order.
struct RunWriter {
    path: PathBuf,
    file: File,
    out: BufWriter<File>,
    records: usize,
    firsts: Vec<Key>,
    bloom: Bloom,
    buf: [u8; RECORD],
}

impl RunWriter {
    fn create(path: PathBuf, records: usize) -> io::Result<RunWriter> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        Ok(RunWriter {
            path,
            out: BufWriter::with_capacity(1 << 16, file.try_clone()?),
            file,
            records: 0,
            firsts: Vec::with_capacity(records.div_ceil(BLOCK)),
            bloom: Bloom::new(records),
            buf: [0; RECORD],
        })
    }

    fn put(&mut self, key: Key, span: &TaskSpan, windows: bool) -> io::Result<()> {
        if self.records.is_multiple_of(BLOCK) {
            self.firsts.push(key);
        }
        self.bloom.add(&key);
        span.encode(key, windows, &mut self.buf);
        self.records += 1;
        self.out.write_all(&self.buf)
    }

    fn finish(mut self) -> io::Result<Run> {
        self.out.flush()?;
        Ok(Run {
            path: self.path,
            file: self.file,
            windows: vec![0; self.records.div_ceil(64)],
            records: self.records,
            firsts: self.firsts,
            bloom: Some(self.bloom),
        })
    }
}

/// A task of a run: which run, its place there, its span, and whether
/// windows of it were written before the run was.
#[derive(Clone, Copy)]
struct Found {
    run: usize,
    at: usize,
    span: TaskSpan,
    windows: bool,
}

/// The tasks known: maps in memory up to a limit, the rest in sorted runs
/// on disk. See the module's doc.
pub struct TaskIndex {
    /// The first tasks, up to `limit`, for the whole ingest: the span, and
    /// whether windows of the task were written.
    memory: KeyMap<(TaskSpan, bool)>,
    /// The tasks after them, up to `limit / 4`, until they are spilled.
    recent: KeyMap<(TaskSpan, bool)>,
    limit: usize,
    /// Oldest first; each at least twice the size of the next.
    runs: Vec<Run>,
    /// Tasks found in the runs lately, by the low bits of their key (one
    /// entry a slot), with their place: the windows of a task come
    /// together or close in time, so most lookups of a spilled task are
    /// served here, not by a read. 65,536 entries, about 5.5 MiB.
    found: Vec<Option<(Key, Found)>>,
    /// The tasks whose windows the current write holds ([`TaskIndex::note_windows`]).
    current: KeySet,
    dir: Option<PathBuf>,
    spills: usize,
    next_run: usize,
    /// The first error reading or writing a run: the ingest fails with
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
    /// An index holding the first `limit` tasks (at least 1) in memory,
    /// and the `limit / 4` after them until they are spilled.
    pub fn new(limit: usize) -> Self {
        TaskIndex {
            memory: KeyMap::default(),
            recent: KeyMap::default(),
            limit: limit.max(1),
            runs: Vec::new(),
            found: Vec::new(),
            current: KeySet::default(),
            dir: None,
            spills: 0,
            next_run: 0,
            error: None,
        }
    }

    /// Times the recent tasks were spilled to a run.
    pub fn spills(&self) -> usize {
        self.spills
    }

    fn recent_limit(&self) -> usize {
        (self.limit / 4).max(1)
    }

    /// The task with this key, if known. A failed read of a run is kept
    /// ([`TaskIndex::take_error`]) and the task taken as unknown.
    pub fn get(&mut self, key: &Key) -> Option<TaskSpan> {
        if let Some((span, _)) = self.memory.get(key).or_else(|| self.recent.get(key)) {
            return Some(*span);
        }
        self.in_runs(key).map(|f| f.span)
    }

    /// The task with this key in the runs, with its place there (through
    /// the cache of tasks found lately).
    fn in_runs(&mut self, key: &Key) -> Option<Found> {
        let slot = key.1 as usize & (FOUND_CACHE - 1);
        if let Some(Some((k, found))) = self.found.get(slot) {
            if k == key {
                return Some(*found);
            }
        }
        for (run, r) in self.runs.iter().enumerate().rev() {
            match r.get(key) {
                Ok(None) => {}
                Ok(Some((at, span, windows))) => {
                    if self.found.is_empty() {
                        self.found = vec![None; FOUND_CACHE];
                    }
                    let found = Found {
                        run,
                        at,
                        span,
                        windows,
                    };
                    self.found[slot] = Some((*key, found));
                    return Some(found);
                }
                Err(e) => {
                    self.error.get_or_insert(e);
                    return None;
                }
            }
        }
        None
    }

    /// A new write of window rows begins ([`TaskIndex::note_windows`]).
    pub fn next_write(&mut self) {
        self.current.clear();
    }

    /// Notes that the current write holds windows of this task, and says
    /// whether an earlier write of this ingest held windows of it too:
    /// only then can one of its rows be a duplicate of a row written, and
    /// the files written need to be read for it. Memory: the tasks of the
    /// current write, and a bit per task in the runs.
    pub fn note_windows(&mut self, key: &Key) -> bool {
        if self.current.contains(key) {
            return false;
        }
        self.current.insert(*key);
        if let Some((_, windows)) = self.memory.get_mut(key) {
            return std::mem::replace(windows, true);
        }
        if let Some((_, windows)) = self.recent.get_mut(key) {
            return std::mem::replace(windows, true);
        }
        let Some(Found {
            run, at, windows, ..
        }) = self.in_runs(key)
        else {
            return false;
        };
        let run = &mut self.runs[run];
        let before = windows || run.windows_since(at);
        run.windows[at / 64] |= 1 << (at % 64);
        before
    }

    /// Adds a task not known yet (see [`TaskIndex::get`]): the first
    /// `limit` stay in memory; past them, the recent ones are spilled to a
    /// run when they are `limit / 4`.
    pub fn insert_new(&mut self, key: Key, span: TaskSpan) {
        if self.memory.len() < self.limit {
            if self.memory.capacity() == 0 {
                // Sized once: the table never doubles (nor rehashes).
                self.memory.reserve(self.limit.min(DEFAULT_MEMORY_TASKS));
            }
            self.memory.insert(key, (span, false));
            return;
        }
        self.insert_recent(key, span);
    }

    /// Adds a task stored before this ingest: with the recent ones (and
    /// spilled with them), not among the first held in memory, which are
    /// kept for the tasks this ingest reads (their windows come with them;
    /// windows of a stored task are rare: a log read again as it grew).
    pub fn insert_stored(&mut self, key: Key, span: TaskSpan) {
        self.insert_recent(key, span);
    }

    fn insert_recent(&mut self, key: Key, span: TaskSpan) {
        self.recent.insert(key, (span, false));
        if self.recent.len() >= self.recent_limit() {
            if let Err(e) = self.spill() {
                self.error.get_or_insert(e);
            }
        }
    }

    /// The first error of a run, if any (an ingest that saw one fails).
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

    fn run_path(&mut self) -> io::Result<PathBuf> {
        let dir = self.dir()?;
        self.next_run += 1;
        Ok(dir.join(format!("tasks-{}.run", self.next_run)))
    }

    /// Writes the recent tasks as a new run, then merges the newest runs
    /// while the older of two is not twice the newer's size (so the runs
    /// halve in size from the oldest: a few dozen at most, and each task
    /// is rewritten about log2(tasks / limit) times, not once per spill).
    fn spill(&mut self) -> io::Result<()> {
        let mut fresh: Vec<(Key, (TaskSpan, bool))> =
            std::mem::take(&mut self.recent).into_iter().collect();
        fresh.sort_unstable_by_key(|e| e.0);
        self.spills += 1;
        // Places in the runs change.
        self.found.clear();
        let mut w = RunWriter::create(self.run_path()?, fresh.len())?;
        for (k, (s, f)) in fresh {
            w.put(k, &s, f)?;
        }
        self.runs.push(w.finish()?);
        while self.runs.len() >= 2 {
            let n = self.runs.len();
            if self.runs[n - 2].records >= 2 * self.runs[n - 1].records {
                break;
            }
            let newer = self.runs.pop().expect("two runs");
            let older = self.runs.pop().expect("two runs");
            let merged = self.merge(&older, &newer)?;
            for old in [older, newer] {
                drop(old.file);
                std::fs::remove_file(&old.path)?;
            }
            self.runs.push(merged);
        }
        // The oldest run keeps its filter too: every new task is a key
        // known nowhere, and without it each would cost a read of the
        // oldest run (half a million reads at 1e6 tasks).
        self.recent = KeyMap::default();
        Ok(())
    }

    /// One run of the records of two, in key order (a key in both, which
    /// `insert_new` does not make: the older's span, either's flag).
    fn merge(&mut self, older: &Run, newer: &Run) -> io::Result<Run> {
        let mut w = RunWriter::create(self.run_path()?, older.records + newer.records)?;
        let mut a = older.records()?.peekable();
        let mut b = newer.records()?.peekable();
        loop {
            let take_a = match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(Err(_)), _) | (Some(Ok(_)), None) => true,
                (None, Some(_)) | (_, Some(Err(_))) => false,
                (Some(Ok(x)), Some(Ok(y))) => x.0 <= y.0,
            };
            let (key, span, mut windows) = if take_a {
                a.next().expect("peeked")?
            } else {
                b.next().expect("peeked")?
            };
            if take_a {
                while let Some(Ok((k, _, f))) = b.peek() {
                    if *k != key {
                        break;
                    }
                    windows |= *f;
                    b.next();
                }
            }
            w.put(key, &span, windows)?;
        }
        w.finish()
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
        // 100 in memory, the other 900 spilled 25 at a time; the runs
        // halve in size (36 spills: 32 + 4 tasks' worth).
        assert_eq!(index.spills(), 36);
        assert_eq!(index.runs.len(), 2);
        assert_eq!(index.runs[0].records, 800);
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

    #[test]
    fn ingest_index_keeps_memory_for_the_tasks_read_not_the_stored() {
        let mut index = TaskIndex::new(100);
        for i in 0..300 {
            index.insert_stored(key(i), span(i));
        }
        assert_eq!(index.spills(), 12);
        assert!(index.memory.is_empty());
        for i in 300..400 {
            index.insert_new(key(i), span(i));
        }
        assert_eq!(index.spills(), 12, "the tasks read stay in memory");
        assert_eq!(index.memory.len(), 100);
        for i in 0..400 {
            assert_eq!(index.get(&key(i)), Some(span(i)), "{i}");
        }
        assert_eq!(index.get(&key(400)), None);
    }

    #[test]
    fn ingest_index_says_which_tasks_had_windows_in_an_earlier_write() {
        let mut index = TaskIndex::new(100);
        for i in 0..250 {
            index.insert_new(key(i), span(i));
        }
        // Tasks 0..100 are in memory, 100..250 in runs.
        assert_eq!(index.spills(), 6);
        index.next_write();
        for i in (0..250).step_by(2) {
            assert!(!index.note_windows(&key(i)), "{i}: first write");
            assert!(!index.note_windows(&key(i)), "{i}: same write");
        }
        // More tasks: runs (with noted ones) merged again.
        for i in 250..400 {
            index.insert_new(key(i), span(i));
        }
        assert_eq!(index.spills(), 12);
        assert_eq!(index.runs.len(), 2);
        assert_eq!(index.runs[0].records, 200);
        index.next_write();
        for i in 0..400 {
            let earlier = i < 250 && i % 2 == 0;
            assert_eq!(index.note_windows(&key(i)), earlier, "{i}: second write");
            assert!(!index.note_windows(&key(i)), "{i}: same write");
        }
        index.next_write();
        for i in 0..400 {
            assert!(index.note_windows(&key(i)), "{i}: third write");
        }
        // Unknown tasks have no windows written.
        assert!(!index.note_windows(&key(1_000)));
        // The spans are unchanged.
        for i in 0..400 {
            assert_eq!(index.get(&key(i)), Some(span(i)), "{i}");
        }
        assert!(index.take_error().is_none());
    }
}
