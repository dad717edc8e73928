//! `blame`, `culprits`, `iqc_nodes`, `iqc_edges`: who slowed which query
//! (method.md sections 4-6; 000 §4, App. C; 001 §6).

use std::sync::Arc;

use culprit_core::method::model::Interner;
use culprit_core::method::{
    self, overlap, BlameOptions, Culprit, Dataset, Entry, IqcGraph, Level4, NodeKey, Victims,
};
use culprit_core::Resource;
use datafusion::arrow::array::{
    ArrayRef, DictionaryArray, Float64Array, Int32Array, RecordBatch, StringArray,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::Result;
use rustc_hash::FxHashMap;

use super::args::Args;
use super::out::{schema, Out, Ty, V};
use super::table::{ComputedTable, Rows};
use crate::engine::{Engine, Loaded};

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
        Ok(Arc::new(ComputedTable::new(
            name,
            schema,
            self.engine.clone(),
            false,
            Arc::new(move |loaded: &Loaded| {
                let ds = &loaded.ds;
                let (victims, entries) = loaded.blame(&opts).map_err(|e| e.named(name))?;
                let t1 = std::time::Instant::now();
                let r = match kind {
                    Kind::Blame => return blame_rows(loaded.ds.clone(), entries),
                    Kind::Culprits => culprits_batch(ds, &victims, &entries, &opts),
                    Kind::Nodes => nodes_batch(ds, &victims, &entries),
                    Kind::Edges => edges_batch(ds, &victims, &entries),
                };
                log::info!(
                    "{name}: result built in {:.2} s",
                    t1.elapsed().as_secs_f64()
                );
                r.map(Rows::one)
            }),
        )))
    }
}

/// Text columns of `blame` are dictionary-encoded: its result can have as
/// many rows as the window rows, and names repeat.
pub fn blame_schema() -> SchemaRef {
    let dict = || DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let text = [
        "victim_query",
        "victim_stage",
        "resource",
        "detail",
        "host",
        "culprit_kind",
        "culprit_query",
        "culprit_stage",
        "via_stage",
    ];
    let mut fields: Vec<Field> = text.iter().map(|n| Field::new(*n, dict(), true)).collect();
    fields.push(Field::new("blame_seconds", DataType::Float64, true));
    fields.push(Field::new("dor", DataType::Float64, true));
    Arc::new(Schema::new(fields))
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
pub fn bc0(ds: &Dataset, entries: &Level4) -> FxHashMap<u32, f64> {
    let mut m = FxHashMap::default();
    for e in entries {
        *m.entry(ds.stage_query(e.stage)).or_insert(0.0) += e.seconds;
    }
    m
}

fn detail(names: &Interner, d: u32) -> Option<&str> {
    (d != 0).then(|| names.name(d))
}

fn host(ds: &Dataset, h: Option<u32>) -> &str {
    h.map_or("*", |h| ds.hosts.name(h))
}

const KINDS: [&str; 5] = ["query", "self", "gc", "external", "unknown"];

/// Keys into a dictionary of names; `NULL_KEY` marks a NULL.
const NULL_KEY: i32 = -1;

fn dict(keys: Vec<i32>, values: &ArrayRef) -> Result<ArrayRef> {
    let nulls: Option<NullBuffer> = keys
        .contains(&NULL_KEY)
        .then(|| keys.iter().map(|k| *k != NULL_KEY).collect());
    let keys: Vec<i32> = if nulls.is_some() {
        keys.into_iter().map(|k| k.max(0)).collect()
    } else {
        keys
    };
    let keys = Int32Array::new(keys.into(), nulls);
    Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(
        keys,
        values.clone(),
    )?))
}

/// Rows per batch of `blame()`'s result.
const BLAME_BATCH_ROWS: usize = 8 * 1024;

/// Level 4, one row per explanation, in the order of the sweep (use ORDER
/// BY), built batch by batch as the result is read; each chunk of the sweep
/// is freed once sent.
fn blame_rows(ds: Arc<Dataset>, entries: Level4) -> Result<Rows> {
    let mut total = vec![0.0f64; ds.queries.len()];
    for e in &entries {
        total[ds.stage_query(e.stage) as usize] += e.seconds;
    }
    let rows = entries.len();
    let names = |v: Vec<&str>| -> ArrayRef { Arc::new(StringArray::from(v)) };
    let queries = names(
        (0..ds.queries.len() as u32)
            .map(|q| ds.queries.name(q))
            .collect(),
    );
    let stages = names(
        (0..ds.stages.len() as u32)
            .map(|s| ds.stage_name(s))
            .collect(),
    );
    let mut hosts: Vec<&str> = (0..ds.hosts.len() as u32)
        .map(|h| ds.hosts.name(h))
        .collect();
    hosts.push("*");
    let hosts = names(hosts);
    let details = entries.details(&ds);
    let details = names((0..details.len() as u32).map(|d| details.name(d)).collect());
    let resources = names(Resource::ALL.iter().map(|r| r.name()).collect());
    let kinds = names(KINDS.to_vec());
    let (chunks, _) = entries.into_parts();
    let batches = BlameBatches {
        schema: blame_schema(),
        ds,
        total,
        dicts: [queries, stages, resources, details, hosts, kinds],
        chunks: chunks.into_iter(),
        current: Vec::new(),
        offset: 0,
    };
    Ok(Rows {
        rows,
        bytes: rows * std::mem::size_of::<Entry>(),
        batches: Box::new(batches),
    })
}

struct BlameBatches {
    schema: SchemaRef,
    ds: Arc<Dataset>,
    /// Blame seconds per victim query (the DOR denominators).
    total: Vec<f64>,
    /// Dictionary values: queries, stages, resources, details, hosts, kinds.
    dicts: [ArrayRef; 6],
    chunks: std::vec::IntoIter<Vec<Entry>>,
    current: Vec<Entry>,
    offset: usize,
}

impl Iterator for BlameBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        while self.offset >= self.current.len() {
            self.current = self.chunks.next()?;
            self.offset = 0;
        }
        let end = (self.offset + BLAME_BATCH_ROWS).min(self.current.len());
        let batch = self.build(&self.current[self.offset..end]);
        self.offset = end;
        if self.offset >= self.current.len() {
            self.current = Vec::new(); // free the chunk now
        }
        Some(batch)
    }
}

impl BlameBatches {
    fn build(&self, entries: &[Entry]) -> Result<RecordBatch> {
        let ds = &self.ds;
        let n = entries.len();
        let keys = || Vec::<i32>::with_capacity(n);
        let (mut vq, mut vs, mut res, mut det, mut host) = (keys(), keys(), keys(), keys(), keys());
        let (mut kind, mut cq, mut cs, mut via) = (keys(), keys(), keys(), keys());
        let (mut secs, mut dor) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut dor_valid = Vec::with_capacity(n);
        let star = ds.hosts.len() as i32;
        for e in entries {
            let q = ds.stage_query(e.stage);
            vq.push(q as i32);
            vs.push(e.stage as i32);
            res.push(culprit_core::method::model::resource_index(e.resource) as i32);
            det.push(if e.detail == 0 {
                NULL_KEY
            } else {
                e.detail as i32
            });
            host.push(e.host().map_or(star, |h| h as i32));
            let (k, c_query, c_stage) = match e.culprit() {
                Culprit::Stage(s) => {
                    let sq = ds.stage_query(s);
                    (if sq == q { 1 } else { 0 }, sq as i32, s as i32)
                }
                Culprit::Gc => (2, NULL_KEY, NULL_KEY),
                Culprit::External => (3, NULL_KEY, NULL_KEY),
                Culprit::Unknown => (4, NULL_KEY, NULL_KEY),
            };
            kind.push(k);
            cq.push(c_query);
            cs.push(c_stage);
            via.push(e.via().map_or(NULL_KEY, |v| v as i32));
            secs.push(e.seconds);
            let t = self.total[q as usize];
            dor.push(if t > 0.0 { e.seconds / t } else { 0.0 });
            dor_valid.push(t > 0.0);
        }
        let [queries, stages, resources, details, hosts, kinds] = &self.dicts;
        let dor_nulls = dor_valid
            .contains(&false)
            .then(|| NullBuffer::from(dor_valid));
        let columns: Vec<ArrayRef> = vec![
            dict(vq, queries)?,
            dict(vs, stages)?,
            dict(res, resources)?,
            dict(det, details)?,
            dict(host, hosts)?,
            dict(kind, kinds)?,
            dict(cq, queries)?,
            dict(cs, stages)?,
            dict(via, stages)?,
            Arc::new(Float64Array::from(secs)),
            Arc::new(Float64Array::new(dor.into(), dor_nulls)),
        ];
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

pub fn culprits_schema() -> SchemaRef {
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
    entries: &Level4,
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
        let kind = culprit_kind(ds, vq, e.culprit());
        let cq = match e.culprit() {
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

pub fn nodes_schema() -> SchemaRef {
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

fn nodes_batch(ds: &Dataset, victims: &Victims, entries: &Level4) -> Result<RecordBatch> {
    let g = IqcGraph::build(ds, &victims.queries, entries);
    let names = entries.details(ds);
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
                V::S(detail(names, d)),
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
                    V::S(detail(names, d)),
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

pub fn edges_schema() -> SchemaRef {
    schema(&[
        ("victim_query", Ty::Text),
        ("src", Ty::Int),
        ("dst", Ty::Int),
        ("src_level", Ty::Int),
        ("dst_level", Ty::Int),
        ("impact_factor", Ty::Float),
    ])
}

fn edges_batch(ds: &Dataset, victims: &Victims, entries: &Level4) -> Result<RecordBatch> {
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
