//! A bounded cache of what time-pruned reads decode: the footers of data
//! files and their row groups, as Arrow batches.
//!
//! Data files are immutable (a file's path names one content for the life
//! of the store: a rewrite writes a new file), so an entry never goes
//! stale; one of a file no manifest lists any more is simply not asked for
//! again and ages out. The cache holds at most its capacity in bytes (as
//! Arrow counts its buffers); the least recently used entries are dropped
//! first. A server asks it for the reads of one victim
//! (`Store::scan_overlapping_then`), so that questions about the same
//! stretch of time, asked again or by a neighbour, decode nothing; reads
//! over every victim do not use it (they would only push everything out).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::store::Footer;
use arrow::record_batch::RecordBatch;

/// What an entry holds.
#[derive(Clone)]
pub(crate) enum Cached {
    /// A file's footer.
    Footer(Footer),
    /// The rows of one row group, in one projection.
    Rows(Arc<Vec<RecordBatch>>),
}

impl Cached {
    fn bytes(&self) -> usize {
        match self {
            Cached::Footer(f) => f.bytes(),
            Cached::Rows(b) => b.iter().map(|b| b.get_array_memory_size()).sum(),
        }
    }
}

struct Entry {
    value: Cached,
    bytes: usize,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Entries by the tick of their last use: the oldest first.
    order: BTreeMap<u64, String>,
    used: usize,
    tick: u64,
    hits: u64,
    misses: u64,
}

/// A least-recently-used cache of footers and decoded row groups, bounded
/// in bytes; shared by every session of a server.
pub struct ReadCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReadCache({:?})", self.stats())
    }
}

/// What a cache holds and how often it answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub capacity: usize,
    pub used: usize,
    pub entries: usize,
    pub hits: u64,
    pub misses: u64,
}

impl ReadCache {
    /// A cache holding at most `capacity` bytes.
    pub fn new(capacity: usize) -> Arc<ReadCache> {
        Arc::new(ReadCache {
            capacity,
            inner: Mutex::new(Inner::default()),
        })
    }

    /// Its bound in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            capacity: self.capacity,
            used: inner.used,
            entries: inner.entries.len(),
            hits: inner.hits,
            misses: inner.misses,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while the lock was held leaves consistent maps (every
        // update is done before the guard drops), so a poisoned lock is
        // still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, key: &str) -> Option<Cached> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let Some(e) = inner.entries.get_mut(key) else {
            inner.misses += 1;
            return None;
        };
        let old = std::mem::replace(&mut e.tick, tick);
        let value = e.value.clone();
        inner.order.remove(&old);
        inner.order.insert(tick, key.to_string());
        inner.hits += 1;
        Some(value)
    }

    /// Adds an entry (replacing one of the same key), then drops the least
    /// recently used ones until the cache is within its capacity. An entry
    /// larger than the whole capacity is not kept.
    pub(crate) fn put(&self, key: String, value: Cached) {
        let bytes = value.bytes();
        if bytes > self.capacity {
            return;
        }
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        if let Some(old) = inner.entries.remove(&key) {
            inner.order.remove(&old.tick);
            inner.used -= old.bytes;
        }
        inner.order.insert(tick, key.clone());
        inner.entries.insert(key, Entry { value, bytes, tick });
        inner.used += bytes;
        while inner.used > self.capacity {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.used -= e.bytes;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn rows(n: usize) -> Cached {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let col = Int64Array::from_iter_values(0..n as i64);
        Cached::Rows(Arc::new(vec![RecordBatch::try_new(
            schema,
            vec![Arc::new(col)],
        )
        .unwrap()]))
    }

    #[test]
    fn keeps_within_capacity_dropping_the_least_recently_used() {
        let one = rows(1000).bytes();
        let cache = ReadCache::new(one * 2 + one / 2);
        cache.put("a".into(), rows(1000));
        cache.put("b".into(), rows(1000));
        assert!(cache.get("a").is_some()); // a is now more recent than b
        cache.put("c".into(), rows(1000));
        assert!(cache.get("b").is_none(), "b was the least recently used");
        assert!(cache.get("a").is_some());
        assert!(cache.get("c").is_some());
        let s = cache.stats();
        assert_eq!(s.entries, 2);
        assert_eq!(s.used, 2 * one);
        assert!(s.used <= s.capacity);
        assert_eq!((s.hits, s.misses), (3, 1));
    }

    #[test]
    fn an_entry_larger_than_the_cache_is_not_kept() {
        let cache = ReadCache::new(rows(10).bytes());
        cache.put("big".into(), rows(100_000));
        assert!(cache.get("big").is_none());
        assert_eq!(cache.stats().used, 0);
    }

    #[test]
    fn replacing_a_key_counts_it_once() {
        let cache = ReadCache::new(1 << 30);
        cache.put("a".into(), rows(1000));
        cache.put("a".into(), rows(1000));
        assert_eq!(cache.stats().entries, 1);
        assert_eq!(cache.stats().used, rows(1000).bytes());
    }
}
