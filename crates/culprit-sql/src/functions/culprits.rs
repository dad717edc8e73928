//! `culprits(victim [, from [, to]] [, options])`: level 6 of the
//! iQC-Graph per victim, who slowed it and how much (seconds and DOR), with
//! the naive and deep overlap baselines beside (method.md section 6; 000
//! §4.2, §6.1). Queries that only overlapped the victim are listed with 0
//! seconds, so overlap's misleads show.

use culprit_core::method::usecases::CulpritRow;
use culprit_core::method::{BlameOptions, Dataset};
use culprit_engine::{stored_question, Focus, Snapshot, StoredCulprit};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{every_victim, in_group, Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct Culprits {
    opts: BlameOptions,
}

impl TableFunction for Culprits {
    const NAME: &'static str = "culprits";
    const SIGNATURE: &'static str = "culprits(victim [, from [, to]] [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        culprits_schema()
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(Culprits {
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
        Self::rows(snapshot, &self.opts)
    }

    fn by_groups(&self) -> Option<(i64, i64)> {
        every_victim(&self.opts)
    }

    fn compute_group(&self, snapshot: &Snapshot, group: &[String]) -> Result<Rows> {
        Self::rows(snapshot, &in_group(&self.opts, group))
    }

    fn stored(&self) -> Option<String> {
        stored_question(&self.opts).map(str::to_string)
    }

    fn from_stored(victim: &str, rows: &[StoredCulprit]) -> Result<Rows> {
        let mut out = Out::new(culprits_schema(), rows.len());
        for r in rows {
            out.row(vec![
                Cell::S(Some(victim)),
                Cell::S(Some(r.kind.name())),
                Cell::S(r.culprit_query.as_deref()),
                Cell::F(Some(r.seconds)),
                Cell::F(r.dor),
                Cell::F(r.naive_overlap),
                Cell::F(r.deep_overlap),
            ]);
        }
        out.finish().map(Rows::one)
    }
}

impl Culprits {
    fn rows(snapshot: &Snapshot, opts: &BlameOptions) -> Result<Rows> {
        let ds = &snapshot.ds;
        let rows = snapshot.culprits(opts).map_err(in_function(Self::NAME))?;
        let mut out = Out::new(culprits_schema(), rows.len());
        for r in &rows {
            out.row(culprit_cells(ds, r));
        }
        out.finish().map(Rows::one)
    }
}

fn culprits_schema() -> SchemaRef {
    schema(&CULPRIT_COLUMNS)
}

/// The columns of one culprit row (also `culprits_series`'s, after its
/// window).
pub(super) const CULPRIT_COLUMNS: [(&str, Ty); 7] = [
    ("victim_query", Ty::Text),
    ("culprit_kind", Ty::Text),
    ("culprit_query", Ty::Text),
    ("blame_seconds", Ty::Float),
    ("dor", Ty::Float),
    ("naive_overlap_seconds", Ty::Float),
    ("deep_overlap_seconds", Ty::Float),
];

/// The cells of one culprit row, in [`CULPRIT_COLUMNS`]' order.
pub(super) fn culprit_cells<'a>(ds: &'a Dataset, r: &CulpritRow) -> Vec<Cell<'a>> {
    vec![
        Cell::S(Some(ds.queries.name(r.victim))),
        Cell::S(Some(r.kind.name())),
        Cell::S(r.culprit_query.map(|q| ds.queries.name(q))),
        Cell::F(Some(r.seconds)),
        Cell::F(r.dor),
        Cell::F(r.naive_overlap),
        Cell::F(r.deep_overlap),
    ]
}
