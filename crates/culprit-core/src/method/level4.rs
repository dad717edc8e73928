//! Level 4 of the iQC-Graph as data: one [`Entry`] per (victim stage,
//! resource, detail, host, culprit, via) with its blamed seconds (method.md
//! sections 5 and 6). Entries are kept compact (32 bytes): a large analysis
//! holds one per level-4 node until its result is sent.

use std::sync::Arc;

use super::model::{Dataset, Interner};
use super::sweep::{EXTERNAL, GC, UNKNOWN};
use crate::Resource;

/// A culprit at level 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Culprit {
    /// A stage: of another query (kind `query`), or of the victim query (`self`).
    Stage(u32),
    Gc,
    External,
    Unknown,
}

impl Culprit {
    /// The culprit of a compact code (a stage id, or the codes of gc,
    /// external and unknown), as [`Culprit::code`] gives it.
    pub fn from_code(c: u32) -> Culprit {
        match c {
            GC => Culprit::Gc,
            EXTERNAL => Culprit::External,
            UNKNOWN => Culprit::Unknown,
            s => Culprit::Stage(s),
        }
    }

    /// The compact code of the culprit (its stage id for a stage).
    pub fn code(self) -> u32 {
        match self {
            Culprit::Stage(s) => s,
            Culprit::Gc => GC,
            Culprit::External => EXTERNAL,
            Culprit::Unknown => UNKNOWN,
        }
    }
}

/// No host (cluster-wide slots) or no via stage, in [`Entry`]'s compact fields.
const NONE: u32 = u32::MAX;

/// One level-4 node: seconds of `stage`'s blocked time on `resource`
/// (`detail`) at `host` (`None`: cluster-wide slots) attributed to `culprit`
/// (`via`: the slot holder the blame passed through, section 5b).
///
/// Kept in 32 bytes (codes instead of enums and options): a large analysis
/// holds one per level-4 node until its result is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry {
    pub stage: u32,
    pub detail: u32,
    host: u32,
    culprit: u32,
    via: u32,
    pub resource: Resource,
    pub seconds: f64,
}

impl Entry {
    pub fn new(
        stage: u32,
        resource: Resource,
        detail: u32,
        host: Option<u32>,
        culprit: Culprit,
        via: Option<u32>,
        seconds: f64,
    ) -> Entry {
        Entry {
            stage,
            detail,
            host: host.unwrap_or(NONE),
            culprit: culprit.code(),
            via: via.unwrap_or(NONE),
            resource,
            seconds,
        }
    }

    /// The host, `None` for the cluster-wide slot sweep.
    pub fn host(&self) -> Option<u32> {
        (self.host != NONE).then_some(self.host)
    }

    pub fn culprit(&self) -> Culprit {
        Culprit::from_code(self.culprit)
    }

    /// The slot holder the blame passed through (section 5b).
    pub fn via(&self) -> Option<u32> {
        (self.via != NONE).then_some(self.via)
    }

    /// The same node with other seconds.
    pub fn with_seconds(self, seconds: f64) -> Entry {
        Entry { seconds, ..self }
    }

    /// The same victim node with another culprit.
    pub fn with_culprit(self, culprit: Culprit, via: Option<u32>, seconds: f64) -> Entry {
        Entry {
            culprit: culprit.code(),
            via: via.unwrap_or(NONE),
            seconds,
            ..self
        }
    }
}

/// Level-4 nodes in chunks (one per sweep job or host bucket, in a
/// deterministic order), so that the result of a large analysis is never
/// copied into one vector and can be sent chunk by chunk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Level4 {
    chunks: Vec<Vec<Entry>>,
    /// Names of the detail ids when they are not the dataset's (window rows
    /// streamed from the store intern their details here; the windows of a
    /// series share them).
    details: Option<Arc<Interner>>,
}

impl Level4 {
    pub fn from_chunks(chunks: Vec<Vec<Entry>>, details: Option<Arc<Interner>>) -> Level4 {
        Level4 { chunks, details }
    }

    pub fn iter(&self) -> std::iter::Flatten<std::slice::Iter<'_, Vec<Entry>>> {
        self.chunks.iter().flatten()
    }

    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_vec(&self) -> Vec<Entry> {
        self.iter().cloned().collect()
    }

    /// The names of the entries' detail ids.
    pub fn details<'a>(&'a self, ds: &'a Dataset) -> &'a Interner {
        self.details.as_deref().unwrap_or(&ds.details)
    }

    /// The chunks, to consume one at a time, and the detail names.
    pub fn into_parts(self) -> (Vec<Vec<Entry>>, Option<Arc<Interner>>) {
        (self.chunks, self.details)
    }
}

impl From<Vec<Entry>> for Level4 {
    fn from(v: Vec<Entry>) -> Self {
        Level4 {
            chunks: vec![v],
            details: None,
        }
    }
}

impl<'a> IntoIterator for &'a Level4 {
    type Item = &'a Entry;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'a, Vec<Entry>>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
