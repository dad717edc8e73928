//! `iqc_nodes(victim [, from [, to]] [, options])`: every node of the
//! victims' iQC-Graph, levels 0 to 6, with its blame contribution (BC) and
//! degree of responsibility (method.md section 6; 000 §4, App. C).

use culprit_core::method::model::Interner;
use culprit_core::method::BlameOptions;
use culprit_core::method::{Culprit, Dataset, IqcGraph, NodeKey};
use culprit_engine::{Focus, Snapshot};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct IqcNodes {
    opts: BlameOptions,
}

impl TableFunction for IqcNodes {
    const NAME: &'static str = "iqc_nodes";
    const SIGNATURE: &'static str = "iqc_nodes(victim [, from [, to]] [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        iqc_nodes_schema()
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(IqcNodes {
            opts: args.victim_call(Self::SIGNATURE)?,
        })
    }

    fn focus(&self) -> Option<Focus> {
        Focus::of(&self.opts)
    }

    fn cost(&self) -> Cost {
        Cost::victims(self.opts.victims.is_none())
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let (graph, level4) = snapshot
            .graph(&self.opts)
            .map_err(in_function(Self::NAME))?;
        nodes_batch(&snapshot.ds, &graph, level4.details(&snapshot.ds)).map(Rows::one)
    }
}

fn detail(names: &Interner, d: u32) -> Option<&str> {
    (d != 0).then(|| names.name(d))
}

fn host(ds: &Dataset, h: Option<u32>) -> &str {
    h.map_or("*", |h| ds.hosts.name(h))
}

fn iqc_nodes_schema() -> SchemaRef {
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

fn nodes_batch(ds: &Dataset, g: &IqcGraph, names: &Interner) -> Result<RecordBatch> {
    let mut out = Out::new(iqc_nodes_schema(), g.graph.node_count());
    for ix in g.graph.node_indices() {
        let n = &g.graph[ix];
        let v = n.victim;
        let none = || Cell::S(None);
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
                Cell::S(Some(ds.stage_name(s))),
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
                Cell::S(Some(ds.stage_name(s))),
                Cell::S(Some(r.name())),
                none(),
                none(),
                none(),
                none(),
                none(),
                none(),
            ),
            NodeKey::Host(s, r, d, hh) => (
                "host",
                Cell::S(Some(ds.stage_name(s))),
                Cell::S(Some(r.name())),
                Cell::S(detail(names, d)),
                Cell::S(Some(host(ds, hh))),
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
                    Cell::S(Some(ds.stage_name(s))),
                    Cell::S(Some(r.name())),
                    Cell::S(detail(names, d)),
                    Cell::S(Some(host(ds, hh))),
                    Cell::S(Some(c.kind(ds, v).name())),
                    Cell::S(cq),
                    Cell::S(cs),
                    Cell::S(via.map(|x| ds.stage_name(x))),
                )
            }
            NodeKey::CulpritStage(s) => (
                "culprit_stage",
                none(),
                none(),
                none(),
                none(),
                Cell::S(Some(Culprit::Stage(s).kind(ds, v).name())),
                Cell::S(Some(ds.stage_query_name(s))),
                Cell::S(Some(ds.stage_name(s))),
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
                    Cell::S(Some(k)),
                    Cell::S(Some(ds.queries.name(q))),
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
                Cell::S(Some(c.kind(ds, v).name())),
                none(),
                none(),
                none(),
            ),
        };
        out.row(vec![
            Cell::S(Some(ds.queries.name(v))),
            Cell::I(Some(ix.index() as i64)),
            Cell::I(Some(n.key.level() as i64)),
            Cell::S(Some(kind)),
            stage,
            res,
            det,
            h,
            ck,
            cq,
            cs,
            via,
            Cell::F(Some(n.bc)),
            Cell::F(n.dor),
        ]);
    }
    out.finish()
}
