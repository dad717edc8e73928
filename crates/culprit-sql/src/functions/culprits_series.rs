//! `culprits_series(victim, from, to, step [, options])`: `culprits()` of
//! one victim over the consecutive windows of `step` from `from` to `to`,
//! in one call: the rows of each window, with the window (000 §6.2,
//! figures 10-12; method.md section 6). The dataset is loaded once for all
//! the windows.

use culprit_core::method::BlameOptions;
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::culprits::{culprit_cells, CULPRIT_COLUMNS};
use super::rows::{schema, Cell, Out, WINDOW_COLUMNS};
use super::table_function::{Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct CulpritsSeries {
    opts: BlameOptions,
    step: i64,
}

impl TableFunction for CulpritsSeries {
    const NAME: &'static str = "culprits_series";
    const SIGNATURE: &'static str = "culprits_series(victim, from, to, step [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        let mut columns = WINDOW_COLUMNS.to_vec();
        columns.extend(CULPRIT_COLUMNS);
        schema(&columns)
    }

    fn plan(args: &Args) -> Result<Self> {
        args.max_positional(4, Self::SIGNATURE)?;
        let victim = args.required_query(Self::SIGNATURE)?;
        let opts = args.blame_options(Some(vec![victim]), 1, 2)?;
        let step = args.series_step(3, &opts, Self::SIGNATURE)?;
        Ok(CulpritsSeries { opts, step })
    }

    fn cost(&self) -> Cost {
        Cost::AllVictims
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let ds = &snapshot.ds;
        let series = snapshot
            .culprits_series(&self.opts, self.step)
            .map_err(in_function(Self::NAME))?;
        let n = series.iter().map(|(_, rows)| rows.len()).sum();
        let mut out = Out::new(Self::schema(), n);
        for ((from, to), rows) in series {
            for r in &rows {
                let mut cells = vec![Cell::T(Some(from)), Cell::T(Some(to))];
                cells.extend(culprit_cells(ds, r));
                out.row(cells);
            }
        }
        out.finish().map(Rows::one)
    }
}
