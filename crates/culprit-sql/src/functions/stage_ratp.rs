//! `stage_ratp(query)`: cumulative RATP of each stage of the query per
//! (resource, host), so a stage that waited long because it moved much data
//! can be told from one that waited disproportionately (method.md section
//! 7; 001 eq. 13-15).

use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::Args;
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Rows, TableFunction};
use crate::error::in_function;

pub struct StageRatp {
    query: String,
}

impl TableFunction for StageRatp {
    const NAME: &'static str = "stage_ratp";
    const SIGNATURE: &'static str = "stage_ratp(query)";
    // It reads the query's window rows, whatever the store's size.
    const NEEDS_WINDOWS: bool = true;

    fn schema() -> SchemaRef {
        schema(&[
            ("query_id", Ty::Text),
            ("stage_id", Ty::Text),
            ("resource", Ty::Text),
            ("host", Ty::Text),
            ("tasks", Ty::Int),
            ("acquired", Ty::Float),
            ("blocked_seconds", Ty::Float),
            ("ratp", Ty::Float),
            ("ratp_blocked", Ty::Float),
            ("undefined_rows", Ty::Int),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(StageRatp {
            query: args.query_call(Self::SIGNATURE)?,
        })
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let ds = &snapshot.ds;
        let rows = snapshot
            .stage_ratp(&self.query)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for s in rows {
            out.row(vec![
                Cell::S(Some(&self.query)),
                Cell::S(Some(ds.stage_name(s.stage))),
                Cell::S(Some(s.resource.name())),
                Cell::S(Some(ds.hosts.name(s.host))),
                Cell::I(Some(s.tasks as i64)),
                Cell::F(Some(s.acquired)),
                Cell::F(Some(s.blocked)),
                Cell::F(s.ratp),
                Cell::F(s.ratp_blocked),
                Cell::I(Some(s.undefined_rows as i64)),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
