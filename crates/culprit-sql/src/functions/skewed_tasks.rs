//! `skewed_tasks(query [, threshold])`: tasks whose compute time per input
//! record is more than `threshold` (default 1.5) times their stage's median:
//! computation skew without record lineage, from what Spark event logs
//! carry (method.md section 10; 002 §4, 004 §5).

use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Rows, TableFunction};
use crate::error::in_function;

/// The default threshold: the straggler factor of 004 §5.
use culprit_core::method::stragglers::STRAGGLER_FACTOR as DEFAULT_THRESHOLD;

pub struct SkewedTasks {
    query: String,
    threshold: f64,
}

impl TableFunction for SkewedTasks {
    const NAME: &'static str = "skewed_tasks";
    const SIGNATURE: &'static str = "skewed_tasks(query [, threshold])";
    const NEEDS_WINDOWS: bool = true;

    fn schema() -> SchemaRef {
        schema(&[
            ("query_id", Ty::Text),
            ("stage_id", Ty::Text),
            ("task_id", Ty::Text),
            ("host", Ty::Text),
            ("compute_seconds", Ty::Float),
            ("inputs", Ty::Float),
            ("unit", Ty::Text),
            ("cost", Ty::Float),
            ("stage_median", Ty::Float),
            ("ratio", Ty::Float),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        args.no_options()?;
        args.max_positional(2, Self::SIGNATURE)?;
        let query = args.required_query(Self::SIGNATURE)?;
        let threshold = args.number(1)?.unwrap_or(DEFAULT_THRESHOLD);
        Ok(SkewedTasks { query, threshold })
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let rows = snapshot
            .skewed_tasks(&self.query, self.threshold)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for r in rows {
            out.row(vec![
                Cell::S(Some(&r.query)),
                Cell::S(Some(&r.stage)),
                Cell::S(Some(&r.task)),
                Cell::S(Some(&r.host)),
                Cell::F(Some(r.compute_seconds)),
                Cell::F(Some(r.inputs)),
                Cell::S(Some(r.unit)),
                Cell::F(Some(r.cost)),
                Cell::F(Some(r.stage_median)),
                Cell::F(Some(r.ratio)),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
