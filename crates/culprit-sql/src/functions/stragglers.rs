//! `stragglers(query [, from [, to]])`: every task whose inverse progress
//! rate (seconds per byte read) is above 1.5 times its stage's median, with
//! its causes by the rules of method.md section 9 (004 §5).

use culprit_core::method::Micros;
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Rows, TableFunction};
use crate::error::in_function;

pub struct Stragglers {
    query: String,
    from: Option<Micros>,
    to: Option<Micros>,
}

impl TableFunction for Stragglers {
    const NAME: &'static str = "stragglers";
    const SIGNATURE: &'static str = "stragglers(query [, from [, to]])";
    const NEEDS_WINDOWS: bool = true;

    fn schema() -> SchemaRef {
        schema(&[
            ("query_id", Ty::Text),
            ("stage_id", Ty::Text),
            ("task_id", Ty::Text),
            ("host", Ty::Text),
            ("launch_time", Ty::Time),
            ("duration_seconds", Ty::Float),
            ("read_bytes", Ty::Float),
            ("rate", Ty::Float),
            ("stage_median", Ty::Float),
            ("ratio", Ty::Float),
            ("causes", Ty::Text),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        args.no_options()?;
        args.max_positional(3, Self::SIGNATURE)?;
        let query = args.required_query(Self::SIGNATURE)?;
        Ok(Stragglers {
            query,
            from: args.time(1)?,
            to: args.time(2)?,
        })
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let rows = snapshot
            .stragglers(&self.query, self.from, self.to)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for r in rows {
            let causes: Vec<&str> = r.causes.iter().map(|c| c.as_str()).collect();
            out.row(vec![
                Cell::S(Some(&r.query)),
                Cell::S(Some(&r.stage)),
                Cell::S(Some(&r.task)),
                Cell::S(Some(&r.host)),
                Cell::T(Some(r.launch)),
                Cell::F(Some(r.duration_seconds)),
                Cell::F(Some(r.read_bytes)),
                Cell::F(Some(r.rate)),
                Cell::F(Some(r.stage_median)),
                Cell::F(Some(r.ratio)),
                Cell::S(Some(&causes.join(","))),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
