//! The SQL functions of the method, one file per function family, and one
//! `register_all`.

mod args;
mod beta;
mod blame;
mod out;
mod query;
mod ratp;
mod table;
pub(crate) use table::method_err;
mod usecases;

use std::sync::Arc;

use datafusion::prelude::SessionContext;

use crate::engine::Engine;
pub use ratp::MethodScalar;

/// Registers every culprit function in the session.
pub fn register_all(ctx: &SessionContext, engine: Arc<Engine>) {
    for f in ratp::all() {
        ctx.register_udf(f);
    }
    ctx.register_udaf(beta::blame_beta());
    for kind in [
        blame::Kind::Blame,
        blame::Kind::Culprits,
        blame::Kind::Nodes,
        blame::Kind::Edges,
    ] {
        ctx.register_udtf(
            blame::BlameFn::name(kind),
            Arc::new(blame::BlameFn {
                kind,
                engine: engine.clone(),
            }),
        );
    }
    for kind in [
        usecases::Kind::HotResources,
        usecases::Kind::SlowNodes,
        usecases::Kind::AggressiveQueries,
        usecases::Kind::Victims,
    ] {
        ctx.register_udtf(
            usecases::UseCaseFn::name(kind),
            Arc::new(usecases::UseCaseFn {
                kind,
                engine: engine.clone(),
            }),
        );
    }
    for kind in [query::Kind::CriticalPath, query::Kind::StageRatp] {
        ctx.register_udtf(
            query::QueryFn::name(kind),
            Arc::new(query::QueryFn {
                kind,
                engine: engine.clone(),
            }),
        );
    }
}
