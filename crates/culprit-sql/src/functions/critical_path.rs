//! `critical_path(query)`: the chain of stages that set the query's latency,
//! each with its run time and the gap before it (method.md section 8; 000
//! §4.1 level 0).

use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Rows, TableFunction};
use crate::error::in_function;

pub struct CriticalPath {
    query: String,
}

impl TableFunction for CriticalPath {
    const NAME: &'static str = "critical_path";
    const SIGNATURE: &'static str = "critical_path(query)";

    fn schema() -> SchemaRef {
        schema(&[
            ("query_id", Ty::Text),
            ("position", Ty::Int),
            ("stage_id", Ty::Text),
            ("start_time", Ty::Time),
            ("end_time", Ty::Time),
            ("run_seconds", Ty::Float),
            ("gap_before_seconds", Ty::Float),
            ("query_seconds", Ty::Float),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(CriticalPath {
            query: args.query_call(Self::SIGNATURE)?,
        })
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let ds = &snapshot.ds;
        let cp = snapshot
            .critical_path(&self.query)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), cp.stages.len());
        for (i, s) in cp.stages.iter().enumerate() {
            out.row(vec![
                Cell::S(Some(&self.query)),
                Cell::I(Some(i as i64 + 1)),
                Cell::S(Some(ds.stage_name(s.stage))),
                Cell::T(Some(s.start)),
                Cell::T(Some(s.end)),
                Cell::F(Some((s.end - s.start) as f64 / 1e6)),
                Cell::F(Some(s.gap_before)),
                Cell::F(Some(cp.query_seconds)),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
