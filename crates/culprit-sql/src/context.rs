use std::sync::Arc;

use culprit_core::Table;
use culprit_store::Store;
use datafusion::common::Result;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::functions;
use crate::table::StoreTable;

/// Views over the stored tables: `(name, SQL)`.
pub const VIEWS: &[(&str, &str)] = &[(
    "task_runs",
    "SELECT task_id, query_id, stage_id, host, executor_id, ready_time, launch_time, finish_time, status,
        (arrow_cast(finish_time, 'Int64') - arrow_cast(launch_time, 'Int64')) / 1e6 AS run_seconds,
        (arrow_cast(launch_time, 'Int64') - arrow_cast(coalesce(ready_time, launch_time), 'Int64')) / 1e6 AS wait_seconds,
        coalesce(disk_read_blocked, 0) + coalesce(disk_write_blocked, 0) + coalesce(network_blocked, 0)
          + coalesce(cpu_blocked, 0) + coalesce(memory_blocked, 0) AS blocked_seconds,
        cpu_seconds, gc_seconds
     FROM tasks",
)];

/// The default session configuration: information_schema on, catalog
/// `datafusion`, schema `public` (what PostgreSQL clients expect).
pub fn default_config() -> SessionConfig {
    SessionConfig::new()
        .with_information_schema(true)
        .with_default_catalog_and_schema("datafusion", "public")
}

/// A session over the store with the default configuration.
pub async fn session(store: Store) -> Result<SessionContext> {
    session_with_config(store, default_config()).await
}

/// A session over the store: its tables, views and functions.
pub async fn session_with_config(store: Store, config: SessionConfig) -> Result<SessionContext> {
    let engine = Arc::new(culprit_engine::Engine::new(store.clone()));
    session_with(store, engine, config, None).await
}

/// A session sharing `engine` (its dataset cache and its memory budget)
/// with other sessions. Its DataFusion memory pool is drawn from the
/// engine's budget (`budget_pool.rs`) when that is limited or when
/// `memory_limit` bytes are given for the session: a query that needs more
/// fails with "Resources exhausted" (SQLSTATE 53200 on the wire).
pub async fn session_with(
    store: Store,
    engine: Arc<culprit_engine::Engine>,
    config: SessionConfig,
    memory_limit: Option<usize>,
) -> Result<SessionContext> {
    // The store, confined and read-only, is the only location a statement
    // can reach (`sandbox.rs`).
    let mut runtime = RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(crate::sandbox::StoreOnlyRegistry::new(&store)));
    let budget = engine.budget();
    if memory_limit.is_some() || budget.limit().is_some() {
        runtime = runtime.with_memory_pool(Arc::new(crate::budget_pool::BudgetPool::new(
            budget.clone(),
            memory_limit,
        )));
    }
    if memory_limit.is_some() {
        // A hard limit: no spilling to disk to get around it.
        use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
        runtime = runtime.with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        );
    }
    // With workers (`cluster.rs`), the session is their coordinator.
    let ctx = match config.get_extension::<crate::cluster::Cluster>() {
        Some(cluster) => {
            let builder = datafusion::execution::SessionStateBuilder::new()
                .with_config(config)
                .with_runtime_env(runtime.build_arc()?)
                .with_default_features();
            SessionContext::new_with_state(cluster.coordinate(builder)?.build())
        }
        None => SessionContext::new_with_config_rt(config, runtime.build_arc()?),
    };
    // No `CREATE EXTERNAL TABLE`: without factories DataFusion knows no
    // file format to create one with.
    ctx.state_ref().write().table_factories_mut().clear();
    for table in Table::ALL {
        ctx.register_table(
            table.name(),
            Arc::new(StoreTable::new(store.clone(), table)),
        )?;
    }
    for (name, sql) in VIEWS {
        ctx.sql(&format!("CREATE VIEW {name} AS {sql}")).await?;
    }
    functions::register_all(&ctx, engine);
    crate::user_tables::sync(&ctx, &store).await?;
    Ok(ctx)
}
