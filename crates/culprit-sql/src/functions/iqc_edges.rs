//! `iqc_edges(victim [, from [, to]] [, options])`: the edges of the
//! victims' iQC-Graph, from cause to effect, with their impact factors
//! (method.md section 6; 000 §4, App. C).

use culprit_core::method::BlameOptions;
use culprit_core::method::{Dataset, IqcGraph};
use culprit_engine::{Focus, Snapshot};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct IqcEdges {
    opts: BlameOptions,
}

impl TableFunction for IqcEdges {
    const NAME: &'static str = "iqc_edges";
    const SIGNATURE: &'static str = "iqc_edges(victim [, from [, to]] [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        iqc_edges_schema()
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(IqcEdges {
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
        let (graph, _) = snapshot
            .graph(&self.opts)
            .map_err(in_function(Self::NAME))?;
        edges_batch(&snapshot.ds, &graph).map(Rows::one)
    }
}

fn iqc_edges_schema() -> SchemaRef {
    schema(&[
        ("victim_query", Ty::Text),
        ("src", Ty::Int),
        ("dst", Ty::Int),
        ("src_level", Ty::Int),
        ("dst_level", Ty::Int),
        ("impact_factor", Ty::Float),
    ])
}

fn edges_batch(ds: &Dataset, g: &IqcGraph) -> Result<RecordBatch> {
    let mut out = Out::new(iqc_edges_schema(), g.graph.edge_count());
    for e in g.graph.edge_indices() {
        let (a, z) = g
            .graph
            .edge_endpoints(e)
            .expect("an edge index of this graph has endpoints");
        out.row(vec![
            Cell::S(Some(ds.queries.name(g.graph[a].victim))),
            Cell::I(Some(a.index() as i64)),
            Cell::I(Some(z.index() as i64)),
            Cell::I(Some(g.graph[a].key.level() as i64)),
            Cell::I(Some(g.graph[z].key.level() as i64)),
            Cell::F(Some(g.graph[e])),
        ]);
    }
    out.finish()
}
