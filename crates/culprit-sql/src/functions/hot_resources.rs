//! `hot_resources([from [, to]] [, options])`: resources by the blame they
//! carry over every victim of the window (000 appendix E, use-case
//! "hot resources"; method.md section 6).

use culprit_core::method::BlameOptions;
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct HotResources {
    opts: BlameOptions,
}

impl TableFunction for HotResources {
    const NAME: &'static str = "hot_resources";
    const SIGNATURE: &'static str =
        "hot_resources([from [, to]] [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        schema(&[
            ("resource", Ty::Text),
            ("blame_seconds", Ty::Float),
            ("share", Ty::Float),
            ("victims", Ty::Int),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(HotResources {
            opts: args.window_call(Self::SIGNATURE)?,
        })
    }

    fn cost(&self) -> Cost {
        Cost::AllVictims
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let rows = snapshot
            .hot_resources(&self.opts)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for r in rows {
            out.row(vec![
                Cell::S(Some(r.key.name())),
                Cell::F(Some(r.seconds)),
                Cell::F(r.share),
                Cell::I(Some(r.victims as i64)),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
