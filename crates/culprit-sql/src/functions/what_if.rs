//! `what_if(query | NULL [, resource] [, from [, to]])`: how much faster a
//! query (or, with `NULL`, every query of the window and the window as a
//! whole, query `*`) would have run without the time its tasks were blocked
//! on a resource, or without stragglers: the tasks replayed on the slots the
//! query used, stages gated by their parents (method.md section 9; 004 §2.3).

use culprit_core::method::what_if::WhatIfResource;
use culprit_core::method::Micros;
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::{bad_arg, Args};
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct WhatIf {
    query: Option<String>,
    resource: Option<WhatIfResource>,
    from: Option<Micros>,
    to: Option<Micros>,
}

impl TableFunction for WhatIf {
    const NAME: &'static str = "what_if";
    const SIGNATURE: &'static str = "what_if(query | NULL [, resource | NULL] [, from [, to]])";
    const NEEDS_WINDOWS: bool = true;

    fn schema() -> SchemaRef {
        schema(&[
            ("query_id", Ty::Text),
            ("resource", Ty::Text),
            ("tasks", Ty::Int),
            ("slots", Ty::Int),
            ("removed_seconds", Ty::Float),
            ("observed_seconds", Ty::Float),
            ("original_seconds", Ty::Float),
            ("without_seconds", Ty::Float),
            ("improvement", Ty::Float),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        args.no_options()?;
        args.max_positional(4, Self::SIGNATURE)?;
        let resource = match args.text(1)? {
            None => None,
            Some(r) => match r.parse::<WhatIfResource>() {
                Ok(r) => Some(r),
                Err(e) => return bad_arg!(Self::NAME, "{e}"),
            },
        };
        Ok(WhatIf {
            query: args.text(0)?,
            resource,
            from: args.time(2)?,
            to: args.time(3)?,
        })
    }

    fn cost(&self) -> Cost {
        if self.query.is_none() {
            Cost::AllVictims
        } else {
            Cost::Small
        }
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let rows = snapshot
            .what_if(self.query.as_deref(), self.resource, self.from, self.to)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), rows.len());
        for r in rows {
            out.row(vec![
                Cell::S(Some(&r.query)),
                Cell::S(Some(r.resource.as_str())),
                Cell::I(Some(r.tasks as i64)),
                Cell::I(Some(r.slots as i64)),
                Cell::F(Some(r.removed_seconds)),
                Cell::F(Some(r.observed_seconds)),
                Cell::F(Some(r.original_seconds)),
                Cell::F(Some(r.without_seconds)),
                Cell::F(Some(r.improvement)),
            ]);
        }
        out.finish().map(Rows::one)
    }
}
