//! `expensive_inputs(query [, k])`: the `k` (default 10) input records that
//! make `query` slowest, from the `record_lineage` and `partition_latency`
//! tables: each source record with the largest total latency of the outputs
//! it dominates, their latency without it (remediated), and the difference
//! (method.md section 10; 002 §4.2-4.3).

use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Rows, TableFunction};
use crate::error::in_function;

const DEFAULT_K: usize = 10;

pub struct ExpensiveInputs {
    query: String,
    k: usize,
}

impl TableFunction for ExpensiveInputs {
    const NAME: &'static str = "expensive_inputs";
    const SIGNATURE: &'static str = "expensive_inputs(query [, k])";

    fn schema() -> SchemaRef {
        schema(&[
            ("query_id", Ty::Text),
            ("source_id", Ty::Text),
            ("latency", Ty::Float),
            ("remediated_latency", Ty::Float),
            ("impact", Ty::Float),
            ("outputs", Ty::Int),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        args.no_options()?;
        args.max_positional(2, Self::SIGNATURE)?;
        let query = args.required_query(Self::SIGNATURE)?;
        let k = match args.number(1)? {
            None => DEFAULT_K,
            Some(k) => args.count("k", k)?,
        };
        Ok(ExpensiveInputs { query, k })
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let rows = snapshot
            .expensive_inputs(&self.query, self.k)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for r in rows {
            out.row(vec![
                Cell::S(Some(&r.query)),
                Cell::S(Some(&r.source)),
                Cell::F(Some(r.latency)),
                Cell::F(Some(r.remediated_latency)),
                Cell::F(Some(r.impact)),
                Cell::I(Some(r.outputs as i64)),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
