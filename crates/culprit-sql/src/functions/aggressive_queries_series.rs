//! `aggressive_queries_series(from, to, step [, options])`:
//! `aggressive_queries()` over the consecutive windows of `step` from
//! `from` to `to`, in one call, each row with its window (000 appendix E
//! over time, 000 §6.2; method.md section 6). The dataset is loaded once
//! for all the windows.

use culprit_core::method::BlameOptions;
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::aggressive_queries::{aggressor_cells, AGGRESSOR_COLUMNS};
use super::args::Args;
use super::rows::{schema, Cell, Out, WINDOW_COLUMNS};
use super::table_function::{Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct AggressiveQueriesSeries {
    opts: BlameOptions,
    step: i64,
}

impl TableFunction for AggressiveQueriesSeries {
    const NAME: &'static str = "aggressive_queries_series";
    const SIGNATURE: &'static str = "aggressive_queries_series(from, to, step [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        let mut columns = WINDOW_COLUMNS.to_vec();
        columns.extend(AGGRESSOR_COLUMNS);
        schema(&columns)
    }

    fn plan(args: &Args) -> Result<Self> {
        args.max_positional(3, Self::SIGNATURE)?;
        let opts = args.blame_options(None, 0, 1)?;
        let step = args.series_step(2, &opts, Self::SIGNATURE)?;
        Ok(AggressiveQueriesSeries { opts, step })
    }

    fn cost(&self) -> Cost {
        Cost::AllVictims
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let ds = &snapshot.ds;
        let series = snapshot
            .aggressive_queries_series(&self.opts, self.step)
            .map_err(in_function(Self::NAME))?;
        let n = series.iter().map(|(_, rows)| rows.len()).sum();
        let mut out = Out::new(Self::schema(), n);
        for ((from, to), rows) in series {
            for r in &rows {
                let mut cells = vec![Cell::T(Some(from)), Cell::T(Some(to))];
                cells.extend(aggressor_cells(ds, r));
                out.row(cells);
            }
        }
        out.finish().map(Rows::one)
    }
}
