//! `slow_nodes([from [, to]] [, options])`: hosts by the blame they carry
//! over every victim of the window (`*`: cluster-wide slot waits) (000
//! appendix E, use-case "slow nodes"; method.md section 6).

use culprit_core::method::BlameOptions;
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct SlowNodes {
    opts: BlameOptions,
}

impl TableFunction for SlowNodes {
    const NAME: &'static str = "slow_nodes";
    const SIGNATURE: &'static str =
        "slow_nodes([from [, to]] [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        schema(&[
            ("host", Ty::Text),
            ("blame_seconds", Ty::Float),
            ("share", Ty::Float),
            ("victims", Ty::Int),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(SlowNodes {
            opts: args.window_call(Self::SIGNATURE)?,
        })
    }

    fn cost(&self) -> Cost {
        Cost::AllVictims
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let ds = &snapshot.ds;
        let rows = snapshot
            .slow_nodes(&self.opts)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for r in rows {
            out.row(vec![
                Cell::S(Some(r.key.map_or("*", |h| ds.hosts.name(h)))),
                Cell::F(Some(r.seconds)),
                Cell::F(r.share),
                Cell::I(Some(r.victims as i64)),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
