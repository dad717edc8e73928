//! Who is responsible, and how much (method.md section 6; 000 §4.2): the
//! kind of a culprit as a victim sees it, the victim's total blame `BC0`
//! (the blame contribution of its level-0 node: every blocked second
//! explained), and the degree of responsibility `DOR = BC / BC0`.
//!
//! Every result that shows a DOR or a culprit kind takes it from here.

use super::level4::{Culprit, Level4};
use super::model::Dataset;

/// A culprit's kind from a victim query's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CulpritKind {
    /// A stage of another query.
    Query,
    /// A stage of the victim query itself.
    OwnQuery,
    Gc,
    External,
    Unknown,
}

impl CulpritKind {
    /// Every kind, in the order of their codes.
    pub const ALL: [CulpritKind; 5] = [
        CulpritKind::Query,
        CulpritKind::OwnQuery,
        CulpritKind::Gc,
        CulpritKind::External,
        CulpritKind::Unknown,
    ];

    /// The name SQL results show: `query`, `self`, `gc`, `external`, `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            CulpritKind::Query => "query",
            CulpritKind::OwnQuery => "self",
            CulpritKind::Gc => "gc",
            CulpritKind::External => "external",
            CulpritKind::Unknown => "unknown",
        }
    }

    /// The kind's position in [`CulpritKind::ALL`].
    pub fn code(self) -> usize {
        self as usize
    }
}

impl Culprit {
    /// The culprit's kind for a victim of query `victim_query`.
    pub fn kind(self, ds: &Dataset, victim_query: u32) -> CulpritKind {
        match self {
            Culprit::Stage(s) if ds.stage_query(s) == victim_query => CulpritKind::OwnQuery,
            Culprit::Stage(_) => CulpritKind::Query,
            Culprit::Gc => CulpritKind::Gc,
            Culprit::External => CulpritKind::External,
            Culprit::Unknown => CulpritKind::Unknown,
        }
    }

    /// The culprit's query, for a stage.
    pub fn query(self, ds: &Dataset) -> Option<u32> {
        match self {
            Culprit::Stage(s) => Some(ds.stage_query(s)),
            _ => None,
        }
    }
}

/// `BC0` of every victim query: its blocked seconds explained at level 4.
#[derive(Debug, Clone, PartialEq)]
pub struct Bc0 {
    per_query: Vec<f64>,
}

impl Bc0 {
    /// Sums the level-4 seconds of each victim query.
    pub fn of(ds: &Dataset, entries: &Level4) -> Bc0 {
        let mut per_query = vec![0.0f64; ds.queries.len()];
        for e in entries {
            per_query[ds.stage_query(e.stage) as usize] += e.seconds;
        }
        Bc0 { per_query }
    }

    /// `BC0` of `query` (0 when it has no blame).
    pub fn get(&self, query: u32) -> f64 {
        self.per_query.get(query as usize).copied().unwrap_or(0.0)
    }

    /// The DOR of `seconds` of blame toward `query`.
    pub fn dor(&self, query: u32, seconds: f64) -> Option<f64> {
        dor(seconds, self.get(query))
    }
}

/// `DOR = BC / BC0`; `None` when the victim has no blame (`BC0 = 0`).
#[inline]
pub fn dor(bc: f64, bc0: f64) -> Option<f64> {
    (bc0 > 0.0).then(|| bc / bc0)
}
