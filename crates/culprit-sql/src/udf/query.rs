//! `critical_path(query)` (method.md section 8) and `stage_ratp(query)`
//! (section 7; 001 eq. 13-15).

use std::sync::Arc;

use culprit_core::method::{self, Dataset};
use culprit_core::MethodError;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{plan_err, Result};

use super::args::Args;
use super::out::{schema, Out, Ty, V};
use super::table::{method_err, ComputedTable, Rows};
use crate::engine::{Engine, Loaded};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    CriticalPath,
    StageRatp,
}

#[derive(Debug)]
pub struct QueryFn {
    pub kind: Kind,
    pub engine: Arc<Engine>,
}

impl QueryFn {
    pub fn name(kind: Kind) -> &'static str {
        match kind {
            Kind::CriticalPath => "critical_path",
            Kind::StageRatp => "stage_ratp",
        }
    }

    fn schema(kind: Kind) -> SchemaRef {
        match kind {
            Kind::CriticalPath => schema(&[
                ("query_id", Ty::Text),
                ("position", Ty::Int),
                ("stage_id", Ty::Text),
                ("start_time", Ty::Time),
                ("end_time", Ty::Time),
                ("run_seconds", Ty::Float),
                ("gap_before_seconds", Ty::Float),
                ("query_seconds", Ty::Float),
            ]),
            Kind::StageRatp => schema(&[
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
            ]),
        }
    }
}

impl TableFunctionImpl for QueryFn {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let name = QueryFn::name(self.kind);
        let args = Args::parse(name, &args)?;
        args.no_options()?;
        args.max_positional(1, &format!("{name}(query)"))?;
        let Some(query) = args.text(0)? else {
            return plan_err!("culprit: {name}: the query id is required; usage: {name}(query)");
        };
        let kind = self.kind;
        Ok(Arc::new(ComputedTable::new(
            name,
            QueryFn::schema(kind),
            self.engine.clone(),
            // stage_ratp reads the query's window rows.
            kind == Kind::StageRatp,
            Arc::new(move |loaded: &Loaded| {
                let ds: &Dataset = &loaded.ds;
                let q = ds
                    .queries
                    .get(&query)
                    .ok_or_else(|| method_err(name, MethodError::UnknownQuery(query.clone())))?;
                let mut out = Out::new(QueryFn::schema(kind), 8);
                match kind {
                    Kind::CriticalPath => {
                        let cp = method::critical_path(ds, q);
                        for (i, s) in cp.stages.iter().enumerate() {
                            out.row(vec![
                                V::S(Some(&query)),
                                V::I(Some(i as i64 + 1)),
                                V::S(Some(ds.stage_name(s.stage))),
                                V::T(Some(s.start)),
                                V::T(Some(s.end)),
                                V::F(Some((s.end - s.start) as f64 / 1e6)),
                                V::F(Some(s.gap_before)),
                                V::F(Some(cp.query_seconds)),
                            ]);
                        }
                    }
                    Kind::StageRatp => {
                        for s in method::stage_ratp(ds, q) {
                            out.row(vec![
                                V::S(Some(&query)),
                                V::S(Some(ds.stage_name(s.stage))),
                                V::S(Some(s.resource.name())),
                                V::S(Some(ds.hosts.name(s.host))),
                                V::I(Some(s.tasks as i64)),
                                V::F(Some(s.acquired)),
                                V::F(Some(s.blocked)),
                                V::F(s.ratp),
                                V::F(s.ratp_blocked),
                                V::I(Some(s.undefined_rows as i64)),
                            ]);
                        }
                    }
                }
                out.finish().map(Rows::one)
            }),
        )))
    }
}
