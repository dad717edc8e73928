//! The tasks an ingest knows (stored, or accepted earlier in it), in
//! bounded memory.
//!
//! Every window row is checked against its task's run, and every task row
//! against the tasks known (a duplicate), so the ingest needs a map from
//! task id to run that covers every task it has seen: one entry per task,
//! which is what memory would grow by with the input. The first tasks, up
//! to a number ([`DEFAULT_MEMORY_TASKS`]), stay in memory for the whole
//! ingest; the tasks after them are appended to a file in the order they
//! come (the "log"), held a quarter as many at a time, then sorted by key
//! and written as a sorted file of keys and places in the log (a "run") in
//! a temporary folder. Runs are merged by level ([`FAN_IN`] of a level
//! into one of the next), so there are at most three a level, about
//! log4(spills) levels, and each task is rewritten once a level.
//!
//! A key not in memory is looked up in two ways:
//! - **In the order of the input.** Window rows usually come in the order of
//!   their tasks (a converter writes a task's windows after another's, in
//!   the order it wrote the tasks). Once two lookups found tasks close
//!   together in the log, the log is read on from there in growing chunks
//!   (a cursor), and the next tasks are found in the chunk: no search, one
//!   sequential read per thousand tasks (at 1e7 tasks the lookups of the
//!   runs, one `pread` a task, were a quarter of the ingest).
//! - **By key**: a Bloom filter of every spilled key first (one cache line
//!   a key, sized for the tasks expected, [`TaskIndex::expect`]): a key it
//!   does not hold, a new task, is in no run. Then newest run first: a
//!   Bloom filter per run skips the runs without it, a small in-memory
//!   index (the first key of every block of [`BLOCK`] records) names the
//!   one block to read (one `pread` of 384 bytes, served by the page
//!   cache, which is not the process's memory), then the task's record in
//!   the log (a second `pread`), and the tasks found lately are cached.
//!
//! The folder is removed when the index is dropped.
//!
//! Memory is then the maps (at most 1.25 [`DEFAULT_MEMORY_TASKS`]
//! entries, 20 MiB), the cache of tasks found (under 5 MiB), the cursor's chunk
//! (at most 128 KiB), and per task spilled a byte of block index, 2.5
//! bytes of Bloom filters (up to 6.25 when the tasks to come are not
//! known) and a bit for the windows written
//! ([`TaskIndex::note_windows`]), whatever the input's size.

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

/// Entries of the cache of tasks found in the runs (a power of two).
const FOUND_CACHE: usize = 1 << 16;

/// The first tasks held in memory for the whole ingest: 7/8 of 2^18, so
/// the map's table is 2^18 slots of 64 bytes (16 MiB) and never doubles.
/// The tasks after them are held a quarter as many at a time (4 MiB).
/// (458,752 until the cursor made the tasks found in the log about as
/// cheap as those in memory: half as many leaves 21 MB more headroom at
/// 1e7 tasks.)
pub const DEFAULT_MEMORY_TASKS: usize = 229_376;

/// Records per block of a run: what one lookup by key reads (384 bytes).
const BLOCK: usize = 16;

/// Bytes of a record in the log: the key, the span, and the task's place
/// in the log.
const RECORD: usize = 64;

/// Bytes of a record in a run: the key and the task's place in the log
/// (its span is read there). Runs are rewritten at every merge, the log
/// never: at 1e7 tasks, runs of whole 64-byte records wrote 5 GB, more
/// than the store itself, a quarter of the ingest's main thread.
const RUN_RECORD: usize = 24;

/// Runs of a level merged into one of the next level: a task is rewritten
/// about log4(spills) times (4 at 1e7 tasks; merging two at a time, 7),
/// and at most 3 runs a level are kept (each a Bloom filter a search by
/// key tests).
const FAN_IN: usize = 4;

/// How far past the cursor a task is looked for (tasks without windows
/// between two with).
const AHEAD: usize = 16;

/// Records the cursor reads first, and at most (it doubles each time its
/// chunk is used up).
const CURSOR_FIRST: usize = 64;
const CURSOR_MOST: usize = 2048;

/// The most tasks [`TaskIndex::expect`] sizes the filter of spilled keys
/// for at once: 2^24 (a filter of 20 MiB).
pub const EXPECTED_MOST: usize = 1 << 24;

/// No host key (a task stored before this ingest: its host is not read).
pub use culprit_store::layout::NO_HOST_KEY;

/// A task this ingest knows: its run, for checking its windows, its
/// host's key, for writing them (in its bucket, with the key), and where it was accepted, for the message of
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
    /// The key of the task's host ([`culprit_store::layout::host_key`];
    /// [`NO_HOST_KEY`] if unknown).
    pub host_key: u32,
}

impl TaskSpan {
    fn encode(&self, key: Key, pos: u64, out: &mut [u8]) {
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
        out[52..56].copy_from_slice(&self.host_key.to_le_bytes());
        out[56..64].copy_from_slice(&pos.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> (Key, Found) {
        let u = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
        let w = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        (
            (u(0), u(1)),
            Found {
                span: TaskSpan {
                    launch: u(2) as i64,
                    finish: u(3) as i64,
                    ready: u(4) as i64,
                    origin: u(5),
                    file: w(48),
                    host_key: w(52),
                },
                pos: u(7),
            },
        )
    }
}

fn key_of(bytes: &[u8]) -> Key {
    let u = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
    (u(0), u(1))
}

/// A run's record: the key and the place in the log.
fn run_record(bytes: &[u8]) -> (Key, u64) {
    let pos = u64::from_le_bytes(bytes[16..24].try_into().expect("8"));
    (key_of(bytes), pos)
}

/// A spilled task: its span and its place in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found {
    span: TaskSpan,
    pos: u64,
}

/// A sorted file of spilled tasks' keys and places in the log.
struct Run {
    path: PathBuf,
    file: File,
    records: usize,
    /// Merges its records went through: runs of a level are merged
    /// [`FAN_IN`] at a time into one of the next.
    level: u32,
    /// The first key of each block.
    firsts: Vec<Key>,
    /// Which keys may be in the run: a lookup reads only the runs that
    /// may hold its key (a new task, known nowhere, reads none at all).
    bloom: Bloom,
}

impl Run {
    /// The place in the log of `key`, if the run has it.
    fn get(&self, key: &Key) -> io::Result<Option<u64>> {
        if !self.bloom.may_hold(key) {
            return Ok(None);
        }
        let block = self.firsts.partition_point(|k| k <= key);
        if block == 0 {
            return Ok(None);
        }
        let start = (block - 1) * BLOCK;
        let n = BLOCK.min(self.records - start);
        let mut buf = [0u8; BLOCK * RUN_RECORD];
        let buf = &mut buf[..n * RUN_RECORD];
        self.file.read_exact_at(buf, (start * RUN_RECORD) as u64)?;
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (k, pos) = run_record(&buf[mid * RUN_RECORD..(mid + 1) * RUN_RECORD]);
            match k.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Some(pos)),
            }
        }
        Ok(None)
    }

    /// Its records in key order.
    fn records(&self) -> io::Result<impl Iterator<Item = io::Result<(Key, u64)>> + '_> {
        let mut r = BufReader::with_capacity(1 << 16, File::open(&self.path)?);
        let mut rec = [0u8; RUN_RECORD];
        Ok((0..self.records).map(move |_| {
            r.read_exact(&mut rec)?;
            Ok(run_record(&rec))
        }))
    }
}

/// 512 bits, one cache line: the part of a [`Bloom`] filter one key sets.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Line([u64; 8]);

/// A blocked Bloom filter of keys: about 10 bits a key, 7 probes, all in
/// one cache line picked by the key (about 1.5% of the keys not held
/// pass). A search by key tests the filter of every run newer than the
/// one holding it, one cache miss each; a new task tests only the filter
/// of every spilled key (`TaskIndex::spilled_keys`).
struct Bloom {
    lines: Vec<Line>,
}

impl Bloom {
    fn new(keys: usize) -> Bloom {
        Bloom {
            lines: vec![Line([0; 8]); (keys * 10).div_ceil(512).max(1)],
        }
    }

    /// The line of `key` and its 7 bits there (9 bits each of the key's
    /// second word).
    fn probes(&self, key: &Key) -> (usize, impl Iterator<Item = (usize, u64)>) {
        // Mapped onto the lines by a multiply (no division).
        let line = ((u128::from(key.0) * self.lines.len() as u128) >> 64) as usize;
        let b = key.1;
        (
            line,
            (0..7).map(move |i| {
                let bit = (b >> (i * 9)) & 511;
                ((bit / 64) as usize, 1u64 << (bit % 64))
            }),
        )
    }

    fn add(&mut self, key: &Key) {
        let (line, bits) = self.probes(key);
        let line = &mut self.lines[line].0;
        for (word, bit) in bits {
            line[word] |= bit;
        }
    }

    fn may_hold(&self, key: &Key) -> bool {
        let (line, mut bits) = self.probes(key);
        let line = &self.lines[line].0;
        bits.all(|(word, bit)| line[word] & bit != 0)
    }
}

/// Writes a run, record by record, in key order.
struct RunWriter {
    path: PathBuf,
    file: File,
    out: BufWriter<File>,
    records: usize,
    level: u32,
    firsts: Vec<Key>,
    bloom: Bloom,
}

impl RunWriter {
    fn create(path: PathBuf, records: usize, level: u32) -> io::Result<RunWriter> {
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
            level,
            firsts: Vec::with_capacity(records.div_ceil(BLOCK)),
            bloom: Bloom::new(records),
        })
    }

    fn put(&mut self, key: Key, pos: u64) -> io::Result<()> {
        if self.records.is_multiple_of(BLOCK) {
            self.firsts.push(key);
        }
        self.bloom.add(&key);
        let mut rec = [0u8; RUN_RECORD];
        rec[..8].copy_from_slice(&key.0.to_le_bytes());
        rec[8..16].copy_from_slice(&key.1.to_le_bytes());
        rec[16..].copy_from_slice(&pos.to_le_bytes());
        self.records += 1;
        self.out.write_all(&rec)
    }

    fn finish(mut self) -> io::Result<Run> {
        self.out.flush()?;
        Ok(Run {
            path: self.path,
            file: self.file,
            records: self.records,
            level: self.level,
            firsts: self.firsts,
            bloom: self.bloom,
        })
    }
}

/// The spilled tasks in the order they came.
struct Log {
    file: File,
    out: BufWriter<File>,
    /// Records appended.
    records: u64,
    /// Records written through to the file (readable by the cursor).
    flushed: u64,
}

/// A chunk of the log, read on while lookups find the tasks in it in
/// order.
struct Cursor {
    /// The log's place of `tasks[0]`.
    start: u64,
    tasks: Vec<(Key, Found)>,
    /// Where the next task is expected.
    next: usize,
    /// Records to read at the next refill.
    chunk: usize,
}

/// The tasks known: maps in memory up to a limit, the rest in sorted runs
/// on disk. See the module's doc.
pub struct TaskIndex {
    /// The first tasks, up to `limit`, for the whole ingest: the span, and
    /// whether windows of the task were written.
    memory: KeyMap<(TaskSpan, bool)>,
    /// The tasks after them, up to `limit / 4`, until they are spilled:
    /// the span and the place in the log.
    recent: KeyMap<(TaskSpan, u64)>,
    limit: usize,
    /// Oldest first, their levels not increasing.
    runs: Vec<Run>,
    /// Every key in the runs, in one filter: a key it does not hold is in
    /// no run, found with one cache miss (a new task, the common lookup,
    /// tested every run's filter: a miss each, at 1e7 tasks about ten, a
    /// quarter of the ingest's main thread in its `tasks` phase). `None`
    /// while it is built again, and after a failed rebuild: every lookup
    /// then tests the runs.
    spilled_keys: Option<Bloom>,
    /// The keys `spilled_keys` is sized for (past them it is built again,
    /// four times as large, from the runs).
    spilled_room: usize,
    log: Option<Log>,
    /// Per task of the log: windows of it were written
    /// ([`TaskIndex::note_windows`]). A bit a task.
    windows: Vec<u64>,
    cursor: Option<Cursor>,
    /// The log's place of the last task found in the runs.
    last_found: Option<u64>,
    /// Tasks found in the runs lately, by the low bits of their key (one
    /// entry a slot): the windows of a task come together or close in
    /// time, so most lookups of a spilled task are served here, not by a
    /// read. 65,536 entries of 72 bytes, under 5 MiB.
    found: Vec<Option<(Key, Found)>>,
    /// The tasks whose windows the current write holds ([`TaskIndex::note_windows`]).
    current: KeySet,
    dir: Option<PathBuf>,
    spills: usize,
    next_run: usize,
    /// Lookups by key in the runs (the cursor's misses).
    searched: usize,
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
            spilled_keys: None,
            spilled_room: 0,
            log: None,
            windows: Vec::new(),
            cursor: None,
            last_found: None,
            found: Vec::new(),
            current: KeySet::default(),
            dir: None,
            spills: 0,
            next_run: 0,
            searched: 0,
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
        if let Some((span, _)) = self.memory.get(key) {
            return Some(*span);
        }
        if let Some((span, _)) = self.recent.get(key) {
            return Some(*span);
        }
        self.spilled(key).map(|f| f.span)
    }

    /// A spilled task: through the cache of tasks found lately, then the
    /// cursor, then the runs.
    fn spilled(&mut self, key: &Key) -> Option<Found> {
        if self.runs.is_empty() {
            return None;
        }
        let slot = key.1 as usize & (FOUND_CACHE - 1);
        if let Some(Some((k, found))) = self.found.get(slot) {
            if k == key {
                return Some(*found);
            }
        }
        let found = match self.at_cursor(key) {
            Some(found) => Some(found),
            // A key the filter of every spilled key does not hold is in
            // no run (tested after the cache and the cursor, which serve
            // most lookups of a spilled task without it).
            None if self
                .spilled_keys
                .as_ref()
                .is_some_and(|all| !all.may_hold(key)) =>
            {
                None
            }
            None => self.in_runs(key),
        }?;
        if self.found.is_empty() {
            self.found = vec![None; FOUND_CACHE];
        }
        self.found[slot] = Some((*key, found));
        Some(found)
    }

    /// The task at the cursor or just past it (reading the log on when the
    /// chunk is used up).
    fn at_cursor(&mut self, key: &Key) -> Option<Found> {
        let mut ahead = AHEAD;
        loop {
            let c = self.cursor.as_mut()?;
            let end = (c.next + ahead).min(c.tasks.len());
            if let Some(off) = c.tasks[c.next..end].iter().position(|(k, _)| k == key) {
                let at = c.next + off;
                c.next = at + 1;
                return Some(c.tasks[at].1);
            }
            ahead -= end - c.next;
            if ahead == 0 {
                return None;
            }
            // The chunk is used up: the log read on.
            let (start, n) = (c.start + c.tasks.len() as u64, c.chunk);
            match self.read_log(start, n) {
                Ok(tasks) if !tasks.is_empty() => {
                    self.cursor = Some(Cursor {
                        start,
                        tasks,
                        next: 0,
                        chunk: (n * 2).min(CURSOR_MOST),
                    });
                }
                Ok(_) => return None,
                Err(e) => {
                    self.error.get_or_insert(e);
                    self.cursor = None;
                    return None;
                }
            }
        }
    }

    /// Up to `n` tasks of the log from place `start` (those written
    /// through to its file).
    fn read_log(&self, start: u64, n: usize) -> io::Result<Vec<(Key, Found)>> {
        let Some(log) = &self.log else {
            return Ok(Vec::new());
        };
        let n = (log.flushed.saturating_sub(start) as usize).min(n);
        let mut buf = vec![0u8; n * RECORD];
        log.file.read_exact_at(&mut buf, start * RECORD as u64)?;
        Ok(buf.chunks_exact(RECORD).map(TaskSpan::decode).collect())
    }

    /// The task with this key in the runs, newest first, then its record
    /// in the log. A task found shortly after the one found before it (in
    /// the log's order) puts the cursor just past it: the lookups follow
    /// the input's order.
    fn in_runs(&mut self, key: &Key) -> Option<Found> {
        self.searched += 1;
        let mut hit = None;
        for r in self.runs.iter().rev() {
            match r.get(key) {
                Ok(None) => {}
                Ok(Some(pos)) => {
                    hit = Some(pos);
                    break;
                }
                Err(e) => {
                    self.error.get_or_insert(e);
                    return None;
                }
            }
        }
        let found = match self.read_log(hit?, 1) {
            Ok(tasks) => match tasks.first() {
                Some((k, found)) if k == key => *found,
                _ => {
                    self.error.get_or_insert(io::Error::other(
                        "a run names a place in the task log that holds another task",
                    ));
                    return None;
                }
            },
            Err(e) => {
                self.error.get_or_insert(e);
                return None;
            }
        };
        let close = self
            .last_found
            .is_some_and(|last| found.pos > last && found.pos - last <= AHEAD as u64);
        self.last_found = Some(found.pos);
        if close {
            match self.read_log(found.pos + 1, CURSOR_FIRST) {
                Ok(tasks) => {
                    self.cursor = Some(Cursor {
                        start: found.pos + 1,
                        tasks,
                        next: 0,
                        chunk: CURSOR_FIRST * 2,
                    })
                }
                Err(e) => {
                    self.error.get_or_insert(e);
                }
            }
        }
        Some(found)
    }

    /// A new write of window rows begins ([`TaskIndex::note_windows`]).
    pub fn next_write(&mut self) {
        self.current.clear();
    }

    /// Notes that the current write holds windows of this task, and says
    /// whether an earlier write of this ingest held windows of it too:
    /// only then can one of its rows be a duplicate of a row written, and
    /// the files written need to be read for it. Memory: the tasks of the
    /// current write, and a bit per task in the log.
    pub fn note_windows(&mut self, key: &Key) -> bool {
        if self.current.contains(key) {
            return false;
        }
        self.current.insert(*key);
        if let Some((_, windows)) = self.memory.get_mut(key) {
            return std::mem::replace(windows, true);
        }
        let pos = match self.recent.get(key) {
            Some((_, pos)) => *pos,
            None => match self.spilled(key) {
                Some(found) => found.pos,
                None => return false,
            },
        };
        let (word, bit) = ((pos / 64) as usize, 1u64 << (pos % 64));
        let Some(w) = self.windows.get_mut(word) else {
            return false;
        };
        let before = *w & bit != 0;
        *w |= bit;
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
        // A key given twice (a store holding a task twice) keeps its first
        // record: one place in the log, so one windows bit, whichever way
        // it is found.
        if self.recent.contains_key(&key) {
            return;
        }
        let pos = match self.append(key, &span) {
            Ok(pos) => pos,
            Err(e) => {
                self.error.get_or_insert(e);
                return;
            }
        };
        self.recent.insert(key, (span, pos));
        if self.recent.len() >= self.recent_limit() {
            if let Err(e) = self.spill() {
                self.error.get_or_insert(e);
            }
        }
    }

    /// Appends a task to the log: its place there.
    fn append(&mut self, key: Key, span: &TaskSpan) -> io::Result<u64> {
        if self.log.is_none() {
            let path = self.dir()?.join("tasks.log");
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            self.log = Some(Log {
                out: BufWriter::with_capacity(1 << 16, file.try_clone()?),
                file,
                records: 0,
                flushed: 0,
            });
        }
        let log = self.log.as_mut().expect("a log");
        let pos = log.records;
        let mut rec = [0u8; RECORD];
        span.encode(key, pos, &mut rec);
        log.out.write_all(&rec)?;
        log.records += 1;
        let words = (log.records as usize).div_ceil(64);
        if self.windows.len() < words {
            self.windows.resize(words, 0);
        }
        Ok(pos)
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

    /// Writes the recent tasks as a new run (level 0), then merges the
    /// newest runs while the last [`FAN_IN`] are of one level (so there
    /// are at most `FAN_IN - 1` runs a level, about log4(spills) levels,
    /// and each task is rewritten once a level, not once per spill).
    fn spill(&mut self) -> io::Result<()> {
        if let Some(log) = &mut self.log {
            log.out.flush()?;
            log.flushed = log.records;
        }
        let mut fresh: Vec<(Key, u64)> = std::mem::take(&mut self.recent)
            .into_iter()
            .map(|(k, (_, pos))| (k, pos))
            .collect();
        fresh.sort_unstable_by_key(|e| e.0);
        self.spills += 1;
        let mut w = RunWriter::create(self.run_path()?, fresh.len(), 0)?;
        for (k, pos) in &fresh {
            w.put(*k, *pos)?;
        }
        let grow =
            self.spilled_keys.is_none() || self.spilled_tasks() + fresh.len() > self.spilled_room;
        match &mut self.spilled_keys {
            // Built again below, once the runs are merged; none until then
            // (a failed merge leaves none: the runs' own filters answer).
            Some(_) if grow => self.spilled_keys = None,
            Some(all) => {
                for (k, _) in &fresh {
                    all.add(k);
                }
            }
            None => {}
        }
        drop(fresh);
        self.runs.push(w.finish()?);
        loop {
            let n = self.runs.len();
            if n < FAN_IN {
                break;
            }
            let level = self.runs[n - 1].level;
            if self.runs[n - FAN_IN..].iter().any(|r| r.level != level) {
                break;
            }
            let merged_ones = self.runs.split_off(n - FAN_IN);
            let merged = self.merge(&merged_ones, level + 1)?;
            for old in merged_ones {
                drop(old.file);
                std::fs::remove_file(&old.path)?;
            }
            self.runs.push(merged);
        }
        if grow {
            self.rebuild_spilled_keys();
        }
        // Every run's filter is kept, the oldest run's too: a key that
        // passes the filter of every spilled key would otherwise cost a
        // read of each run.
        self.recent = KeyMap::default();
        Ok(())
    }

    /// Says how many more tasks may come (the rows of the inputs' `tasks`
    /// files, as their footers say): the filter of spilled keys is sized
    /// for them once (1.25 bytes a task), not built again as it fills. At
    /// most [`EXPECTED_MOST`] are taken at their word (a footer can claim
    /// any number): past them the filter grows as without.
    pub fn expect(&mut self, tasks: usize) {
        let room = self
            .spilled_tasks()
            .saturating_add(tasks.min(EXPECTED_MOST));
        if room > self.spilled_room {
            self.spilled_room = room;
            if self.spilled_keys.is_some() {
                self.rebuild_spilled_keys();
            }
        }
    }

    /// Builds the filter of every spilled key again, from the runs, for
    /// the keys expected ([`TaskIndex::expect`]) or four times those they
    /// hold, whichever is more (at least `limit`). Without an
    /// expectation, at most a third more keys are added than spilled,
    /// over an ingest, and the filter is at most 5 bytes a spilled task
    /// (1.25 bytes at its fullest). A failed read leaves no filter (the
    /// runs' own then answer).
    fn rebuild_spilled_keys(&mut self) {
        let held = self.spilled_tasks();
        if held > self.spilled_room {
            self.spilled_room = 4 * held;
        }
        self.spilled_room = self.spilled_room.max(self.limit);
        self.spilled_keys = None;
        let build = || -> io::Result<Bloom> {
            let mut all = Bloom::new(self.spilled_room);
            for r in &self.runs {
                for record in r.records()? {
                    all.add(&record?.0);
                }
            }
            Ok(all)
        };
        match build() {
            Ok(all) => self.spilled_keys = Some(all),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// The tasks the runs hold.
    fn spilled_tasks(&self) -> usize {
        self.runs.iter().map(|r| r.records).sum()
    }

    /// One run (of `level`) of the records of `runs` (oldest first), in
    /// key order (a key in more than one, which `insert_new` does not
    /// make, is kept once: the oldest's).
    fn merge(&mut self, runs: &[Run], level: u32) -> io::Result<Run> {
        let total = runs.iter().map(|r| r.records).sum();
        let mut w = RunWriter::create(self.run_path()?, total, level)?;
        let mut inputs = Vec::with_capacity(runs.len());
        for r in runs {
            inputs.push(r.records()?);
        }
        let mut heads: Vec<Option<(Key, u64)>> = Vec::with_capacity(inputs.len());
        for input in &mut inputs {
            heads.push(input.next().transpose()?);
        }
        // The least key (the oldest run's first on a tie), then every
        // input past it: a few inputs, so a scan, not a heap.
        while let Some((key, pos)) = heads.iter().flatten().min_by_key(|(k, _)| *k).copied() {
            for (head, input) in heads.iter_mut().zip(&mut inputs) {
                while head.is_some_and(|(k, _)| k == key) {
                    *head = input.next().transpose()?;
                }
            }
            w.put(key, pos)?;
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
            host_key: (i % 16) as u32,
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
        // 100 in memory, the other 900 spilled 25 at a time; four runs of
        // a level merged into one of the next (36 spills: two runs of 16
        // spills each, level 2, and one of 4, level 1).
        assert_eq!(index.spills(), 36);
        let runs: Vec<(usize, u32)> = index.runs.iter().map(|r| (r.records, r.level)).collect();
        assert_eq!(runs, [(400, 2), (400, 2), (100, 1)]);
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
    fn ingest_index_new_tasks_test_one_filter_not_every_run() {
        // Told how many tasks come before, after some spilled (the filter
        // built again then), or not at all (built again as it fills).
        for expect_at in [Some(0), Some(500), None] {
            let mut index = TaskIndex::new(100);
            for i in 0..1_000 {
                if expect_at == Some(i) {
                    index.expect(1_000);
                }
                assert_eq!(index.get(&key(i)), None);
                index.insert_new(key(i), span(i));
            }
            assert_eq!(index.runs.len(), 3);
            let before = index.searched;
            for i in 1_000..3_000 {
                assert_eq!(index.get(&key(i)), None, "{i}");
            }
            // Each new task searching the runs would be 2,000 searches
            // (6,000 runs' filters tested); the filter of every spilled
            // key lets about 1.5% by.
            let probes = 3 * (index.searched - before);
            assert!(probes < 300, "{expect_at:?}: {probes} runs tested");
            for i in 0..1_000 {
                assert_eq!(index.get(&key(i)), Some(span(i)), "{expect_at:?}: {i}");
            }
            assert!(index.take_error().is_none());
        }
        // A footer claiming any number of tasks sizes no larger filter
        // than the most taken at their word.
        let mut index = TaskIndex::new(100);
        index.expect(usize::MAX);
        insert(&mut index, 0..200);
        let bytes = index.spilled_keys.as_ref().map(|b| b.lines.len() * 64);
        assert_eq!(bytes, Some((EXPECTED_MOST * 10).div_ceil(512) * 64));
        assert!(bytes.unwrap() <= 21 << 20);
        for i in 0..200 {
            assert_eq!(index.get(&key(i)), Some(span(i)), "{i}");
        }
    }

    #[test]
    fn ingest_index_follows_lookups_in_the_order_tasks_came() {
        let mut index = TaskIndex::new(1_000);
        insert(&mut index, 0..20_000);
        // 76 spills of 250, none left recent.
        let spilled = 1_000u64..20_000;
        // In the order they came, every third task (the others have no
        // windows): a few searches of the runs, the rest at the cursor.
        for i in spilled.clone().step_by(3) {
            assert_eq!(index.get(&key(i)), Some(span(i)), "{i}");
        }
        assert!(index.searched <= 2, "{} searches", index.searched);
        // Jumps past the cursor's reach: two tasks close together found by
        // key, then the next ones at the cursor again.
        let before = index.searched;
        for i in (5_001..10_000).step_by(300) {
            for t in [i, i + 3, i + 6, i + 9, i + 12] {
                assert_eq!(index.get(&key(t)), Some(span(t)), "{t}");
            }
        }
        assert_eq!(index.searched - before, 2 * 17, "two searches a jump");
        // In another order: every task found by key.
        let before = index.searched;
        let n = spilled.end - spilled.start;
        for j in 0..n {
            let i = spilled.start + (j * 7_919) % n;
            assert_eq!(index.get(&key(i)), Some(span(i)), "{i}");
        }
        assert!(
            index.searched - before > 10_000,
            "{}",
            index.searched - before
        );
        for i in 20_000..20_100 {
            assert_eq!(index.get(&key(i)), None, "{i}");
        }
        assert!(index.take_error().is_none());
    }

    /// Adds tasks `range` as new ones.
    fn insert(index: &mut TaskIndex, range: std::ops::Range<u64>) {
        for i in range {
            index.insert_new(key(i), span(i));
        }
    }

    /// Looks tasks `range` up in order: each found with its span.
    fn find_in_order(index: &mut TaskIndex, range: std::ops::Range<u64>) {
        for i in range {
            assert_eq!(index.get(&key(i)), Some(span(i)), "{i}");
        }
    }

    #[test]
    fn ingest_index_cursor_resumes_past_what_was_spilled_when_more_is() {
        let mut index = TaskIndex::new(100);
        insert(&mut index, 0..1_000);
        // In order up to the end of the log written so far...
        find_in_order(&mut index, 100..1_000);
        let searched = index.searched;
        assert!(searched <= 2, "{searched}");
        // ...then more tasks are spilled, and the lookups in order go on at
        // the cursor, which reads on where it stopped: no search at all.
        insert(&mut index, 1_000..2_000);
        find_in_order(&mut index, 1_000..2_000);
        assert_eq!(index.searched, searched, "the cursor resumes");
        // A stored task given twice keeps one record (its first span).
        let mut twice = TaskIndex::new(1);
        twice.insert_stored(key(5), span(5));
        twice.insert_stored(key(6), span(6));
        twice.insert_stored(key(6), span(7));
        twice.insert_stored(key(7), span(7));
        assert_eq!(twice.get(&key(6)), Some(span(6)));
        assert!(twice.take_error().is_none());
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
        let runs: Vec<usize> = index.runs.iter().map(|r| r.records).collect();
        assert_eq!(runs, [100, 100, 100]);
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
