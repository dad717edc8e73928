//! The questions people ask of level 4 (method.md section 6; 000 §4.2 and
//! appendix E): the culprits of each victim with the overlap baselines
//! beside them (level 6), and across all victims of a window the hot
//! resources, slow nodes, aggressive queries and the victims themselves.
//! Typed rows with dataset ids; the SQL layer only names and prints them.

use rustc_hash::{FxHashMap, FxHashSet};

use super::level4::{Culprit, Level4};
use super::model::{Dataset, Micros};
use super::overlap;
use super::responsibility::{Bc0, CulpritKind};
use super::sweep::clip;
use super::victims::Victims;
use crate::Resource;

/// One culprit of one victim query (level 6), with the overlap baselines.
#[derive(Debug, Clone, PartialEq)]
pub struct CulpritRow {
    pub victim: u32,
    pub kind: CulpritKind,
    /// The culprit query (kinds `query` and `self`).
    pub culprit_query: Option<u32>,
    pub seconds: f64,
    pub dor: Option<f64>,
    /// Query-level overlap (kind `query` only).
    pub naive_overlap: Option<f64>,
    /// Task-level overlap on the same hosts (kinds `query` and `self`).
    pub deep_overlap: Option<f64>,
}

/// Level 6 of each victim; queries that only overlapped a victim (no
/// blame) are listed too, with 0 seconds, so overlap's misleads show.
/// Sorted by victim name, then seconds, deep overlap (descending), kind
/// name and culprit name.
pub fn culprits(
    ds: &Dataset,
    victims: &Victims,
    entries: &Level4,
    win: (Micros, Micros),
) -> Vec<CulpritRow> {
    let naive = overlap::naive(ds, &victims.queries, win);
    let deep = overlap::deep(ds, &victims.queries, win);
    culprits_from(ds, entries, &naive, &deep)
}

/// [`culprits`] with the overlap baselines already found (the windows of a
/// series find them in one pass, `overlap::naive_series` and
/// `overlap::deep_series`).
pub fn culprits_from(
    ds: &Dataset,
    entries: &Level4,
    naive: &overlap::Overlaps,
    deep: &overlap::Overlaps,
) -> Vec<CulpritRow> {
    let bc0 = Bc0::of(ds, entries);
    let mut seconds: FxHashMap<(u32, CulpritKind, Option<u32>), f64> = FxHashMap::default();
    for e in entries {
        let v = ds.stage_query(e.stage);
        let c = e.culprit();
        *seconds
            .entry((v, c.kind(ds, v), c.query(ds)))
            .or_insert(0.0) += e.seconds;
    }
    for (&(v, q), _) in naive.iter().chain(deep.iter()) {
        if q != v {
            seconds
                .entry((v, CulpritKind::Query, Some(q)))
                .or_insert(0.0);
        }
    }
    let deep_of = |v: u32, q: Option<u32>| deep.get(&(v, q.unwrap_or(u32::MAX))).copied();
    let mut rows: Vec<_> = seconds.into_iter().collect();
    rows.sort_by(|((va, ka, qa), sa), ((vb, kb, qb), sb)| {
        ds.queries
            .name(*va)
            .cmp(ds.queries.name(*vb))
            .then(sb.total_cmp(sa))
            .then(
                deep_of(*vb, *qb)
                    .unwrap_or(0.0)
                    .total_cmp(&deep_of(*va, *qa).unwrap_or(0.0)),
            )
            .then(ka.name().cmp(kb.name()))
            .then(
                qa.map(|q| ds.queries.name(q))
                    .cmp(&qb.map(|q| ds.queries.name(q))),
            )
    });
    rows.into_iter()
        .map(|((v, kind, q), secs)| CulpritRow {
            victim: v,
            kind,
            culprit_query: q,
            seconds: secs,
            dor: bc0.dor(v, secs),
            naive_overlap: q
                .filter(|_| kind == CulpritKind::Query)
                .map(|q| naive.get(&(v, q)).copied().unwrap_or(0.0)),
            deep_overlap: q.map(|q| deep.get(&(v, q)).copied().unwrap_or(0.0)),
        })
        .collect()
}

/// A resource, host or culprit ranked by the blame it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked<K> {
    pub key: K,
    pub seconds: f64,
    /// Of all blame in the analysis.
    pub share: Option<f64>,
    /// Victim queries it blocked.
    pub victims: usize,
}

fn ranked<K: Clone + Eq + std::hash::Hash>(
    ds: &Dataset,
    entries: &Level4,
    key: impl Fn(&super::level4::Entry) -> K,
    name: impl Fn(&K) -> String,
) -> Vec<Ranked<K>> {
    let total: f64 = entries.iter().map(|e| e.seconds).sum();
    let mut m: FxHashMap<K, (f64, FxHashSet<u32>)> = FxHashMap::default();
    for e in entries {
        let x = m.entry(key(e)).or_default();
        x.0 += e.seconds;
        x.1.insert(ds.stage_query(e.stage));
    }
    let mut v: Vec<Ranked<K>> = m
        .into_iter()
        .map(|(k, (s, vs))| Ranked {
            key: k,
            seconds: s,
            share: (total > 0.0).then(|| s / total),
            victims: vs.len(),
        })
        .collect();
    v.sort_by(|a, b| {
        b.seconds
            .total_cmp(&a.seconds)
            .then_with(|| name(&a.key).cmp(&name(&b.key)))
    });
    v
}

/// Resources by the blame they carry (000 appendix E, "hot resources").
pub fn hot_resources(ds: &Dataset, entries: &Level4) -> Vec<Ranked<Resource>> {
    ranked(ds, entries, |e| e.resource, |r| r.name().to_string())
}

/// Hosts by the blame they carry (`None`: the cluster-wide slot sweep).
pub fn slow_nodes(ds: &Dataset, entries: &Level4) -> Vec<Ranked<Option<u32>>> {
    ranked(
        ds,
        entries,
        |e| e.host(),
        |h| h.map_or("*".to_string(), |h| ds.hosts.name(h).to_string()),
    )
}

/// A query ranked by the blame it put on other queries.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggressor {
    pub query: u32,
    pub seconds: f64,
    /// The sum of its DOR over its victims.
    pub dor_sum: f64,
    pub victims: usize,
}

/// Queries by the DOR they carry over other queries (a query's blame on
/// itself is no aggression), then by seconds.
pub fn aggressive_queries(ds: &Dataset, entries: &Level4) -> Vec<Aggressor> {
    let bc0 = Bc0::of(ds, entries);
    let mut m: FxHashMap<u32, (f64, f64, FxHashSet<u32>)> = FxHashMap::default();
    for e in entries {
        let Culprit::Stage(s) = e.culprit() else {
            continue;
        };
        let (v, q) = (ds.stage_query(e.stage), ds.stage_query(s));
        if q == v {
            continue;
        }
        let x = m.entry(q).or_default();
        x.0 += e.seconds;
        x.1 += bc0.dor(v, e.seconds).unwrap_or(0.0);
        x.2.insert(v);
    }
    let mut v: Vec<Aggressor> = m
        .into_iter()
        .map(|(q, (s, d, vs))| Aggressor {
            query: q,
            seconds: s,
            dor_sum: d,
            victims: vs.len(),
        })
        .collect();
    v.sort_by(|a, b| {
        b.dor_sum
            .total_cmp(&a.dor_sum)
            .then(b.seconds.total_cmp(&a.seconds))
            .then_with(|| ds.queries.name(a.query).cmp(ds.queries.name(b.query)))
    });
    v
}

/// One victim query of an analysis: its blocked seconds and its top culprit.
#[derive(Debug, Clone, PartialEq)]
pub struct VictimSummary {
    pub query: u32,
    /// `BC0`: its blocked seconds explained.
    pub blocked: f64,
    /// Task time of its explained stages in the window, slot waits included.
    pub task_seconds: f64,
    /// `S = (RATP - RATP*) / RATP*` (method.md section 3, 000 eq. 4),
    /// time-weighted over its explained tasks' windows with capacity known
    /// (`slowdown.rs`). `None` when no such window.
    pub slowdown: Option<f64>,
    /// The culprit with the most blame: kind, query, seconds.
    pub top: Option<(CulpritKind, Option<u32>, f64)>,
    pub top_dor: Option<f64>,
}

/// Every victim with its top culprit, most blocked first; `slowdowns` per
/// victim query as [`super::slowdown::slowdowns`] gives them.
pub fn victims(
    ds: &Dataset,
    victims: &Victims,
    entries: &Level4,
    (from, to): (Micros, Micros),
    slowdowns: &FxHashMap<u32, f64>,
) -> Vec<VictimSummary> {
    let bc0 = Bc0::of(ds, entries);
    let mut task_s: FxHashMap<u32, f64> = FxHashMap::default();
    for (i, t) in ds.tasks.iter().enumerate() {
        if !victims.task(i as u32, t.stage) {
            continue;
        }
        let start = t.ready.unwrap_or(t.launch).min(t.launch);
        if let Some((s, e)) = clip(start, t.finish, from, to) {
            *task_s.entry(ds.stage_query(t.stage)).or_insert(0.0) += (e - s) as f64 / 1e6;
        }
    }
    let mut by_culprit: FxHashMap<u32, FxHashMap<(CulpritKind, Option<u32>), f64>> =
        FxHashMap::default();
    for e in entries {
        let v = ds.stage_query(e.stage);
        let c = e.culprit();
        *by_culprit
            .entry(v)
            .or_default()
            .entry((c.kind(ds, v), c.query(ds)))
            .or_insert(0.0) += e.seconds;
    }
    let mut order: Vec<u32> = victims.queries.clone();
    order.sort_by(|a, b| {
        bc0.get(*b)
            .total_cmp(&bc0.get(*a))
            .then(ds.queries.name(*a).cmp(ds.queries.name(*b)))
    });
    order
        .into_iter()
        .map(|v| {
            let blocked = bc0.get(v);
            let t = task_s.get(&v).copied().unwrap_or(0.0);
            // Most seconds; on a tie the smaller (kind name, query id).
            let top = by_culprit.get(&v).and_then(|m| {
                m.iter()
                    .max_by(|a, b| {
                        a.1.total_cmp(b.1)
                            .then((b.0 .0.name(), b.0 .1).cmp(&(a.0 .0.name(), a.0 .1)))
                    })
                    .map(|(k, s)| (k.0, k.1, *s))
            });
            VictimSummary {
                query: v,
                blocked,
                task_seconds: t,
                slowdown: slowdowns.get(&v).copied(),
                top,
                top_dor: top.and_then(|(_, _, s)| bc0.dor(v, s)),
            }
        })
        .collect()
}
