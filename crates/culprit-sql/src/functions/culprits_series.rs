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
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Rows, TableFunction};
use crate::error::in_function;

pub struct CulpritsSeries {
    opts: BlameOptions,
    step: i64,
}

impl TableFunction for CulpritsSeries {
    const NAME: &'static str = "culprits_series";
    const SIGNATURE: &'static str = "culprits_series(victim, from, to, step [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'])";

    fn schema() -> SchemaRef {
        schema(&[
            ("window_start", Ty::Time),
            ("window_end", Ty::Time),
            ("victim_query", Ty::Text),
            ("culprit_kind", Ty::Text),
            ("culprit_query", Ty::Text),
            ("blame_seconds", Ty::Float),
            ("dor", Ty::Float),
            ("naive_overlap_seconds", Ty::Float),
            ("deep_overlap_seconds", Ty::Float),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        args.max_positional(4, Self::SIGNATURE)?;
        let victim = args.required_query(Self::SIGNATURE)?;
        let opts = args.blame_options(Some(vec![victim]), 1, 2)?;
        let step = args.series_step(3, &opts, Self::SIGNATURE)?;
        Ok(CulpritsSeries { opts, step })
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let ds = &snapshot.ds;
        let series = snapshot
            .culprits_series(&self.opts, self.step)
            .map_err(in_function(Self::NAME))?;
        let n = series.iter().map(|(_, rows)| rows.len()).sum();
        let mut out = Out::new(Self::schema(), n);
        for ((from, to), rows) in series {
            for r in rows {
                out.row(vec![
                    Cell::T(Some(from)),
                    Cell::T(Some(to)),
                    Cell::S(Some(ds.queries.name(r.victim))),
                    Cell::S(Some(r.kind.name())),
                    Cell::S(r.culprit_query.map(|q| ds.queries.name(q))),
                    Cell::F(Some(r.seconds)),
                    Cell::F(r.dor),
                    Cell::F(r.naive_overlap),
                    Cell::F(r.deep_overlap),
                ]);
            }
        }
        out.finish().map(Rows::one)
    }
}
