//! `victims([from [, to]] [, options])`: every victim query of the window
//! with its blocked seconds, task time, slowdown and top culprit (000
//! appendix E; method.md sections 3 and 6).

use culprit_core::method::BlameOptions;
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{every_victim, in_group, Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct Victims {
    opts: BlameOptions,
}

impl TableFunction for Victims {
    const NAME: &'static str = "victims";
    const SIGNATURE: &'static str =
        "victims([from [, to]] [, 'victim_stages=...'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        schema(&[
            ("victim_query", Ty::Text),
            ("blocked_seconds", Ty::Float),
            ("task_seconds", Ty::Float),
            ("slowdown", Ty::Float),
            ("top_culprit_kind", Ty::Text),
            ("top_culprit_query", Ty::Text),
            ("top_culprit_seconds", Ty::Float),
            ("top_culprit_dor", Ty::Float),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(Victims {
            opts: args.window_call(Self::SIGNATURE)?,
        })
    }

    fn cost(&self) -> Cost {
        Cost::AllVictims
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
}

impl Victims {
    fn rows(snapshot: &Snapshot, opts: &BlameOptions) -> Result<Rows> {
        let ds = &snapshot.ds;
        let rows = snapshot.victims(opts).map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for r in rows {
            out.row(vec![
                Cell::S(Some(ds.queries.name(r.query))),
                Cell::F(Some(r.blocked)),
                Cell::F(Some(r.task_seconds)),
                Cell::F(r.slowdown),
                Cell::S(r.top.map(|t| t.0.name())),
                Cell::S(r.top.and_then(|t| t.1).map(|q| ds.queries.name(q))),
                Cell::F(r.top.map(|t| t.2)),
                Cell::F(r.top_dor),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
