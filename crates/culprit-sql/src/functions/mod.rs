//! The SQL functions of the method, one file per function, and the one
//! list of them, [`register_all`].
//!
//! To add a table function: write `my_function.rs` with a struct
//! implementing [`TableFunction`] (name, signature, schema, argument
//! parsing, computation over the engine's snapshot), add `mod my_function;`
//! and one `register::<my_function::MyFunction>` line below, and document
//! it in docs/sql-reference.md.

mod args;
pub mod catalog;
mod rows;
mod table_function;

mod aggressive_queries;
mod aggressive_queries_series;
mod blame;
mod blame_beta;
mod boe_task_seconds;
mod critical_path;
mod culprits;
mod culprits_series;
mod estimate;
mod expensive_inputs;
mod float_scalar;
mod hot_resources;
mod iqc_edges;
mod iqc_nodes;
mod ratp;
mod ratp_blocked;
mod ratp_max;
mod skewed_tasks;
mod slow_nodes;
mod slowdown;
mod stage_ratp;
mod stragglers;
mod victims;
mod what_if;

use std::sync::Arc;

use culprit_engine::Engine;
use datafusion::prelude::SessionContext;

pub use table_function::{ComputedTable, Registered, TableFunction};

/// Registers every culprit function in the session.
pub fn register_all(ctx: &SessionContext, engine: Arc<Engine>) {
    // Scalars and the aggregate (method.md sections 3, 4 and 11).
    for udf in scalar_udfs() {
        ctx.register_udf(udf);
    }
    for udaf in aggregate_udfs() {
        ctx.register_udaf(udaf);
    }
    // Table functions over the engine.
    let e = &engine;
    register::<blame::Blame>(ctx, e);
    register::<culprits::Culprits>(ctx, e);
    register::<iqc_nodes::IqcNodes>(ctx, e);
    register::<iqc_edges::IqcEdges>(ctx, e);
    register::<hot_resources::HotResources>(ctx, e);
    register::<slow_nodes::SlowNodes>(ctx, e);
    register::<aggressive_queries::AggressiveQueries>(ctx, e);
    register::<victims::Victims>(ctx, e);
    // The use-cases over consecutive windows (000 §6.2).
    register::<culprits_series::CulpritsSeries>(ctx, e);
    register::<aggressive_queries_series::AggressiveQueriesSeries>(ctx, e);
    register::<critical_path::CriticalPath>(ctx, e);
    register::<stage_ratp::StageRatp>(ctx, e);
    // The other papers (method.md sections 9-11).
    register::<what_if::WhatIf>(ctx, e);
    register::<stragglers::Stragglers>(ctx, e);
    register::<estimate::Estimate>(ctx, e);
    register::<skewed_tasks::SkewedTasks>(ctx, e);
    register::<expensive_inputs::ExpensiveInputs>(ctx, e);
}

/// The scalar functions of the method (also a worker's: `cluster.rs`).
pub(crate) fn scalar_udfs() -> Vec<datafusion::logical_expr::ScalarUDF> {
    vec![
        ratp::udf(),
        ratp_blocked::udf(),
        ratp_max::udf(),
        slowdown::udf(),
        boe_task_seconds::udf(),
    ]
}

/// The aggregate functions of the method (also a worker's).
pub(crate) fn aggregate_udfs() -> Vec<datafusion::logical_expr::AggregateUDF> {
    vec![blame_beta::udaf()]
}

fn register<F: TableFunction>(ctx: &SessionContext, engine: &Arc<Engine>) {
    ctx.register_udtf(F::NAME, Arc::new(Registered::<F>::new(engine.clone())));
}
