//! `aggressive_queries([from [, to]] [, options])`: queries by the sum of
//! their DOR over the other queries they slowed (000 appendix E, use-case
//! "aggressive queries"; method.md section 6).

use culprit_core::method::usecases::Aggressor;
use culprit_core::method::{BlameOptions, Dataset};
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct AggressiveQueries {
    opts: BlameOptions,
}

impl TableFunction for AggressiveQueries {
    const NAME: &'static str = "aggressive_queries";
    const SIGNATURE: &'static str =
        "aggressive_queries([from [, to]] [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        schema(&AGGRESSOR_COLUMNS)
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(AggressiveQueries {
            opts: args.window_call(Self::SIGNATURE)?,
        })
    }

    fn cost(&self) -> Cost {
        Cost::AllVictims
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let ds = &snapshot.ds;
        let rows = snapshot
            .aggressive_queries(&self.opts)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for r in &rows {
            out.row(aggressor_cells(ds, r));
        }
        out.finish().map(Rows::one)
    }
}

/// The columns of one aggressor row (also `aggressive_queries_series`'s,
/// after its window).
pub(super) const AGGRESSOR_COLUMNS: [(&str, Ty); 4] = [
    ("culprit_query", Ty::Text),
    ("blame_seconds", Ty::Float),
    ("dor_sum", Ty::Float),
    ("victims", Ty::Int),
];

/// The cells of one aggressor row, in [`AGGRESSOR_COLUMNS`]' order.
pub(super) fn aggressor_cells<'a>(ds: &'a Dataset, r: &Aggressor) -> Vec<Cell<'a>> {
    vec![
        Cell::S(Some(ds.queries.name(r.query))),
        Cell::F(Some(r.seconds)),
        Cell::F(Some(r.dor_sum)),
        Cell::I(Some(r.victims as i64)),
    ]
}
