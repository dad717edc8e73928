//! Slot holders' shares kept across analyses (method.md section 5b).
//!
//! Transitive slot blame passes a victim's slot wait on to what slowed the
//! stage holding the slots, in the proportions `rho(cs, X)` of that stage's
//! own blame. Those shares depend on the holder, the analysis window and
//! the attribution, not on the victim; computing them means sweeping every
//! host the holder ran on. Victims that ran at about the same time share
//! most of their holders, so an engine keeps the shares its focused
//! analyses computed, by store version, and the next analysis neither reads
//! nor sweeps those holders' neighbourhoods again (`focus.rs`). Names, not
//! the numbers of one dataset, key them. A new store version empties it;
//! at most [`MAX_STAGES`] stages and what its bytes allow of culprit
//! entries are kept (then it starts over). Only a server's engine (one with
//! a read cache) keeps them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use culprit_core::method::transitive::Shares;
use culprit_core::method::{Attribution, Culprit, Dataset, Micros};

/// Stages whose shares an engine keeps, at most.
pub const MAX_STAGES: usize = 16_384;

/// What the kept shares may take at most, held in a server's memory
/// budget (less when its read cache is smaller: the same).
pub const BYTES: usize = 32 << 20;

/// What a kept culprit entry takes with its names, about.
const ENTRY_BYTES: usize = 160;

/// A culprit by name: a stage as (query, stage id).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Named {
    Stage(String, String),
    Gc,
    External,
    Unknown,
}

/// (query, stage id, window, attribution).
type Key = (String, String, (Micros, Micros), Attribution);

pub(crate) type NamedShares = Arc<Vec<(Named, f64)>>;

#[derive(Debug, Default)]
pub(crate) struct SharesCache {
    inner: Mutex<Inner>,
    /// Culprit entries kept over all stages, at most.
    max_entries: usize,
}

#[derive(Debug, Default)]
struct Inner {
    version: u64,
    map: HashMap<Key, NamedShares>,
    /// Culprit entries over all stages.
    entries: usize,
}

impl SharesCache {
    /// A cache of at most `bytes` (about).
    pub(crate) fn new(bytes: usize) -> SharesCache {
        SharesCache {
            inner: Mutex::default(),
            max_entries: bytes / ENTRY_BYTES,
        }
    }

    /// The shares of stage `stage` of query `query` at store `version`.
    pub(crate) fn get(
        &self,
        version: u64,
        query: &str,
        stage: &str,
        window: (Micros, Micros),
        attribution: Attribution,
    ) -> Option<NamedShares> {
        let inner = self.inner.lock().ok()?;
        if inner.version != version {
            return None;
        }
        let key = (query.to_string(), stage.to_string(), window, attribution);
        inner.map.get(&key).cloned()
    }

    /// Keeps the shares of stage `stage` of `ds` (read at store `version`).
    pub(crate) fn put(
        &self,
        version: u64,
        ds: &Dataset,
        stage: u32,
        window: (Micros, Micros),
        attribution: Attribution,
        shares: &Shares,
    ) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if version < inner.version {
            return;
        }
        if version > inner.version
            || inner.map.len() >= MAX_STAGES
            || inner.entries + shares.len() > self.max_entries
        {
            inner.map.clear();
            inner.entries = 0;
            inner.version = version;
        }
        let named = shares
            .iter()
            .map(|&(c, x)| {
                let c = match c {
                    Culprit::Stage(s) => Named::Stage(
                        ds.stage_query_name(s).to_string(),
                        ds.stage_name(s).to_string(),
                    ),
                    Culprit::Gc => Named::Gc,
                    Culprit::External => Named::External,
                    Culprit::Unknown => Named::Unknown,
                };
                (c, x)
            })
            .collect();
        let key = (
            ds.stage_query_name(stage).to_string(),
            ds.stage_name(stage).to_string(),
            window,
            attribution,
        );
        // The first shares kept stay: every later analysis of this version
        // uses the same numbers (the same statement, the same result).
        let inner = &mut *inner;
        if let std::collections::hash_map::Entry::Vacant(e) = inner.map.entry(key) {
            inner.entries += shares.len();
            e.insert(Arc::new(named));
        }
    }

    /// How many stages' shares are kept.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.map.len())
    }
}

/// `shares` in the numbers of `ds` (a culprit stage `ds` lacks is added).
pub(crate) fn resolve(ds: &mut Dataset, shares: &NamedShares) -> Shares {
    shares
        .iter()
        .map(|(c, x)| {
            let c = match c {
                Named::Stage(q, s) => Culprit::Stage(ds.intern_stage(q, s)),
                Named::Gc => Culprit::Gc,
                Named::External => Culprit::External,
                Named::Unknown => Culprit::Unknown,
            };
            (c, *x)
        })
        .collect()
}
