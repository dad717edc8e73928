//! `blame`, `culprits`, `iqc_nodes`, `iqc_edges`: who slowed which query
//! (method.md sections 4-6; 000 §4, App. C; 001 §6).

use std::sync::Arc;

use culprit_core::method::{
    self, overlap, BlameOptions, Culprit, Dataset, Entry, IqcGraph, NodeKey, Victims,
};
use datafusion::arrow::array::RecordBatch;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::Result;
use rustc_hash::FxHashMap;

use super::args::Args;
use super::out::{schema, Out, Ty, V};
use super::table::{method_err, ComputedTable};
use crate::engine::Engine;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Blame,
    Culprits,
    Nodes,
    Edges,
}

/// One of the victim-centric table functions.
#[derive(Debug)]
pub struct BlameFn {
    pub kind: Kind,
    pub engine: Arc<Engine>,
}

impl BlameFn {
    pub fn name(kind: Kind) -> &'static str {
        match kind {
            Kind::Blame => "blame",
            Kind::Culprits => "culprits",
            Kind::Nodes => "iqc_nodes",
            Kind::Edges => "iqc_edges",
        }
    }
}

pub const USAGE: &str = "(victim [, from [, to]] [, 'victim_stages=critical_path|all|<stage>'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'])";

impl TableFunctionImpl for BlameFn {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let name = BlameFn::name(self.kind);
        let args = Args::parse(name, &args)?;
        args.max_positional(3, &format!("{name}{USAGE}"))?;
        let victims = args.text(0)?.map(|v| vec![v]);
        let opts = args.blame_options(victims, 1, 2)?;
        let kind = self.kind;
        let schema = match kind {
            Kind::Blame => blame_schema(),
            Kind::Culprits => culprits_schema(),
            Kind::Nodes => nodes_schema(),
            Kind::Edges => edges_schema(),
        };
        Ok(Arc::new(ComputedTable {
            name,
            schema,
            engine: self.engine.clone(),
            compute: Arc::new(move |ds: &Dataset| {
                let (victims, entries) =
                    method::blame(ds, &opts).map_err(|e| method_err(name, e))?;
                match kind {
                    Kind::Blame => blame_batch(ds, &victims, &entries),
                    Kind::Culprits => culprits_batch(ds, &victims, &entries, &opts),
                    Kind::Nodes => nodes_batch(ds, &victims, &entries),
                    Kind::Edges => edges_batch(ds, &victims, &entries),
                }
            }),
        }))
    }
}

pub fn blame_schema() -> datafusion::arrow::datatypes::SchemaRef {
    schema(&[
        ("victim_query", Ty::Text),
        ("victim_stage", Ty::Text),
        ("resource", Ty::Text),
        ("detail", Ty::Text),
        ("host", Ty::Text),
        ("culprit_kind", Ty::Text),
        ("culprit_query", Ty::Text),
        ("culprit_stage", Ty::Text),
        ("via_stage", Ty::Text),
        ("blame_seconds", Ty::Float),
        ("dor", Ty::Float),
    ])
}

/// `query`, `self`, `gc`, `external` or `unknown`.
pub fn culprit_kind(ds: &Dataset, victim_query: u32, c: Culprit) -> &'static str {
    match c {
        Culprit::Stage(s) if ds.stage_query(s) == victim_query => "self",
        Culprit::Stage(_) => "query",
        Culprit::Gc => "gc",
        Culprit::External => "external",
        Culprit::Unknown => "unknown",
    }
}

/// BC0 per victim query.
pub fn bc0(ds: &Dataset, entries: &[Entry]) -> FxHashMap<u32, f64> {
    let mut m = FxHashMap::default();
    for e in entries {
        *m.entry(ds.stage_query(e.stage)).or_insert(0.0) += e.seconds;
    }
    m
}

fn detail(ds: &Dataset, d: u32) -> Option<&str> {
    (d != 0).then(|| ds.details.name(d))
}

fn host(ds: &Dataset, h: Option<u32>) -> &str {
    h.map_or("*", |h| ds.hosts.name(h))
}

fn blame_batch(ds: &Dataset, _victims: &Victims, entries: &[Entry]) -> Result<RecordBatch> {
    let total = bc0(ds, entries);
    let mut order: Vec<&Entry> = entries.iter().collect();
    order.sort_by(|a, b| {
        ds.stage_query_name(a.stage)
            .cmp(ds.stage_query_name(b.stage))
            .then(b.seconds.total_cmp(&a.seconds))
    });
    let mut out = Out::new(blame_schema(), entries.len());
    for e in order {
        let vq = ds.stage_query(e.stage);
        let (cq, cs) = match e.culprit {
            Culprit::Stage(s) => (Some(ds.stage_query_name(s)), Some(ds.stage_name(s))),
            _ => (None, None),
        };
        let t = total[&vq];
        out.row(vec![
            V::S(Some(ds.queries.name(vq))),
            V::S(Some(ds.stage_name(e.stage))),
            V::S(Some(e.resource.name())),
            V::S(detail(ds, e.detail)),
            V::S(Some(host(ds, e.host))),
            V::S(Some(culprit_kind(ds, vq, e.culprit))),
            V::S(cq),
            V::S(cs),
            V::S(e.via.map(|v| ds.stage_name(v))),
            V::F(Some(e.seconds)),
            V::F((t > 0.0).then(|| e.seconds / t)),
        ]);
    }
    out.finish()
}

pub fn culprits_schema() -> datafusion::arrow::datatypes::SchemaRef {
    schema(&[
        ("victim_query", Ty::Text),
        ("culprit_kind", Ty::Text),
        ("culprit_query", Ty::Text),
        ("blame_seconds", Ty::Float),
        ("dor", Ty::Float),
        ("naive_overlap_seconds", Ty::Float),
        ("deep_overlap_seconds", Ty::Float),
    ])
}

/// Level 6 per victim, with the overlap baselines; queries that only
/// overlapped (no blame) are listed too, so overlap's misleads show.
fn culprits_batch(
    ds: &Dataset,
    victims: &Victims,
    entries: &[Entry],
    opts: &BlameOptions,
) -> Result<RecordBatch> {
    let win = method::blame::window(opts);
    let naive = overlap::naive(ds, &victims.queries, win);
    let deep = overlap::deep(ds, &victims.queries, win);
    let total = bc0(ds, entries);
    // (victim, kind, culprit query) -> seconds
    let mut rows: FxHashMap<(u32, &'static str, Option<u32>), f64> = FxHashMap::default();
    for e in entries {
        let vq = ds.stage_query(e.stage);
        let kind = culprit_kind(ds, vq, e.culprit);
        let cq = match e.culprit {
            Culprit::Stage(s) => Some(ds.stage_query(s)),
            _ => None,
        };
        *rows.entry((vq, kind, cq)).or_insert(0.0) += e.seconds;
    }
    for (&(v, q), _) in naive.iter().chain(deep.iter()) {
        if q != v {
            rows.entry((v, "query", Some(q))).or_insert(0.0);
        }
    }
    let mut rows: Vec<_> = rows.into_iter().collect();
    rows.sort_by(|a, b| {
        let (ka, kb) = (a.0, b.0);
        ds.queries
            .name(ka.0)
            .cmp(ds.queries.name(kb.0))
            .then(b.1.total_cmp(&a.1))
            .then(
                deep.get(&(kb.0, kb.2.unwrap_or(u32::MAX)))
                    .unwrap_or(&0.0)
                    .total_cmp(deep.get(&(ka.0, ka.2.unwrap_or(u32::MAX))).unwrap_or(&0.0)),
            )
            .then(ka.1.cmp(kb.1))
            .then(
                ka.2.map(|q| ds.queries.name(q))
                    .cmp(&kb.2.map(|q| ds.queries.name(q))),
            )
    });
    let mut out = Out::new(culprits_schema(), rows.len());
    for ((v, kind, cq), secs) in rows {
        let t = total.get(&v).copied().unwrap_or(0.0);
        let key = cq.map(|q| (v, q));
        out.row(vec![
            V::S(Some(ds.queries.name(v))),
            V::S(Some(kind)),
            V::S(cq.map(|q| ds.queries.name(q))),
            V::F(Some(secs)),
            V::F((t > 0.0).then(|| secs / t)),
            V::F(
                key.filter(|_| kind == "query")
                    .map(|k| naive.get(&k).copied().unwrap_or(0.0)),
            ),
            V::F(key.map(|k| deep.get(&k).copied().unwrap_or(0.0))),
        ]);
    }
    out.finish()
}

pub fn nodes_schema() -> datafusion::arrow::datatypes::SchemaRef {
    schema(&[
        ("victim_query", Ty::Text),
        ("node_id", Ty::Int),
        ("level", Ty::Int),
        ("kind", Ty::Text),
        ("victim_stage", Ty::Text),
        ("resource", Ty::Text),
        ("detail", Ty::Text),
        ("host", Ty::Text),
        ("culprit_kind", Ty::Text),
        ("culprit_query", Ty::Text),
        ("culprit_stage", Ty::Text),
        ("via_stage", Ty::Text),
        ("bc", Ty::Float),
        ("dor", Ty::Float),
    ])
}

fn nodes_batch(ds: &Dataset, victims: &Victims, entries: &[Entry]) -> Result<RecordBatch> {
    let g = IqcGraph::build(ds, &victims.queries, entries);
    let mut out = Out::new(nodes_schema(), g.graph.node_count());
    for ix in g.graph.node_indices() {
        let n = &g.graph[ix];
        let v = n.victim;
        let none = || V::S(None);
        let (kind, stage, res, det, h, ck, cq, cs, via) = match n.key {
            NodeKey::Query => (
                "victim_query",
                none(),
                none(),
                none(),
                none(),
                none(),
                none(),
                none(),
                none(),
            ),
            NodeKey::Stage(s) => (
                "victim_stage",
                V::S(Some(ds.stage_name(s))),
                none(),
                none(),
                none(),
                none(),
                none(),
                none(),
                none(),
            ),
            NodeKey::Resource(s, r) => (
                "resource",
                V::S(Some(ds.stage_name(s))),
                V::S(Some(r.name())),
                none(),
                none(),
                none(),
                none(),
                none(),
                none(),
            ),
            NodeKey::Host(s, r, d, hh) => (
                "host",
                V::S(Some(ds.stage_name(s))),
                V::S(Some(r.name())),
                V::S(detail(ds, d)),
                V::S(Some(host(ds, hh))),
                none(),
                none(),
                none(),
                none(),
            ),
            NodeKey::Blame(s, r, d, hh, c, via) => {
                let (cq, cs) = match c {
                    Culprit::Stage(x) => (Some(ds.stage_query_name(x)), Some(ds.stage_name(x))),
                    _ => (None, None),
                };
                (
                    "explanation",
                    V::S(Some(ds.stage_name(s))),
                    V::S(Some(r.name())),
                    V::S(detail(ds, d)),
                    V::S(Some(host(ds, hh))),
                    V::S(Some(culprit_kind(ds, v, c))),
                    V::S(cq),
                    V::S(cs),
                    V::S(via.map(|x| ds.stage_name(x))),
                )
            }
            NodeKey::CulpritStage(s) => (
                "culprit_stage",
                none(),
                none(),
                none(),
                none(),
                V::S(Some(culprit_kind(ds, v, Culprit::Stage(s)))),
                V::S(Some(ds.stage_query_name(s))),
                V::S(Some(ds.stage_name(s))),
                none(),
            ),
            NodeKey::CulpritQuery(q) => {
                let k = if q == v { "self" } else { "query" };
                (
                    "culprit_query",
                    none(),
                    none(),
                    none(),
                    none(),
                    V::S(Some(k)),
                    V::S(Some(ds.queries.name(q))),
                    none(),
                    none(),
                )
            }
            NodeKey::Cause(c) => (
                "culprit_query",
                none(),
                none(),
                none(),
                none(),
                V::S(Some(culprit_kind(ds, v, c))),
                none(),
                none(),
                none(),
            ),
        };
        out.row(vec![
            V::S(Some(ds.queries.name(v))),
            V::I(Some(ix.index() as i64)),
            V::I(Some(n.key.level() as i64)),
            V::S(Some(kind)),
            stage,
            res,
            det,
            h,
            ck,
            cq,
            cs,
            via,
            V::F(Some(n.bc)),
            V::F(n.dor),
        ]);
    }
    out.finish()
}

pub fn edges_schema() -> datafusion::arrow::datatypes::SchemaRef {
    schema(&[
        ("victim_query", Ty::Text),
        ("src", Ty::Int),
        ("dst", Ty::Int),
        ("src_level", Ty::Int),
        ("dst_level", Ty::Int),
        ("impact_factor", Ty::Float),
    ])
}

fn edges_batch(ds: &Dataset, victims: &Victims, entries: &[Entry]) -> Result<RecordBatch> {
    let g = IqcGraph::build(ds, &victims.queries, entries);
    let mut out = Out::new(edges_schema(), g.graph.edge_count());
    for e in g.graph.edge_indices() {
        let (a, z) = g.graph.edge_endpoints(e).expect("edge");
        out.row(vec![
            V::S(Some(ds.queries.name(g.graph[a].victim))),
            V::I(Some(a.index() as i64)),
            V::I(Some(z.index() as i64)),
            V::I(Some(g.graph[a].key.level() as i64)),
            V::I(Some(g.graph[z].key.level() as i64)),
            V::F(Some(g.graph[e])),
        ]);
    }
    out.finish()
}
