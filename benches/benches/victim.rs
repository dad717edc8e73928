//! One victim's analysis at any store size (issue #17 items 1-2): the cost
//! of `culprits(victim)` follows the victim, not the store.
//!
//! Data: `culprit generate`-style fast data on 500 hosts (8 slots each),
//! written in parts of 250,000 tasks (one ingest batch each), so a larger
//! store is a longer stretch of the same cluster. `CULPRIT_BENCH_VICTIM_TASKS`
//! lists the sizes (default `100000,1000000`; add `10000000` for the
//! issue's largest, which takes minutes to write and about 2 GB of disk).
//!
//! Targets (2-core machine): a middle victim's `culprits()` within noise of
//! the same at 1e5 tasks, whatever the store's size; under 50 ms through a
//! warm session of a server's engine, with its memory budget and read cache
//! (`warm`: the same victim again; `warm_next`: the next of four victims
//! that ran side by side); an unknown victim refused without reading task
//! or window rows (`unknown`). The whole-process figure (under 0.3 s) is
//! measured with the CLI, in docs/performance.md.
//!
//! Then the same calls once `culprit shares` stored the answers with the
//! shares (`stored_cold`: a new session each time; `stored_warm_next`: the
//! four neighbouring victims through a server's engine): read, not
//! computed.

use criterion::{criterion_group, criterion_main, Criterion};
use culprit_core::Table;
use culprit_sim::{fast_parts, FastConfig};

fn sizes() -> Vec<usize> {
    std::env::var("CULPRIT_BENCH_VICTIM_TASKS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100_000, 1_000_000])
}

/// A store of `tasks` fast tasks on 500 hosts, one batch per 250,000.
fn store_of(rt: &tokio::runtime::Runtime, tasks: usize) -> culprit_store::Store {
    let dir = std::env::temp_dir().join(format!(
        "culprit-bench-victim-{}-{tasks}",
        std::process::id()
    ));
    let store = culprit_store::Store::open(dir.to_str().expect("utf-8 path")).expect("store");
    let cfg = FastConfig {
        tasks,
        hosts: 500,
        ..Default::default()
    };
    fast_parts(&cfg, tasks.div_ceil(250_000), |_, w| {
        rt.block_on(async {
            let mut batch = store.begin();
            for t in Table::ALL {
                if let Some(b) = w.table(t) {
                    batch.write(t, std::slice::from_ref(b)).await?;
                }
            }
            batch.commit().await.map(|_| ())
        })
    })
    .expect("write the store");
    store
}

/// A session of a server's engine on `store`: its budget (half the
/// machine) and read cache.
fn server_session(
    rt: &tokio::runtime::Runtime,
    store: &culprit_store::Store,
) -> (
    std::sync::Arc<culprit_sql::Engine>,
    culprit_sql::datafusion::prelude::SessionContext,
) {
    let budget = culprit_engine::Budget::new(culprit_engine::BudgetOptions {
        limit: Some(culprit_engine::budget::default_limit()),
        ..Default::default()
    });
    let engine = std::sync::Arc::new(culprit_sql::Engine::with_budget(store.clone(), budget));
    let ctx = rt
        .block_on(culprit_sql::session_with(
            store.clone(),
            engine.clone(),
            culprit_sql::default_config(),
            None,
        ))
        .expect("session");
    (engine, ctx)
}

/// Runs a statement; an error (the unknown victim's) is a result too.
/// Runs a statement; a failed one panics, so that a broken analysis is
/// never timed as a fast one.
macro_rules! run {
    ($ctx:expr, $sql:expr) => {{
        let batches = $ctx.sql($sql).await.expect("plan").collect().await;
        batches.expect("the statement runs").len()
    }};
}

/// Runs a statement that must fail (an unknown victim is refused).
macro_rules! refused {
    ($ctx:expr, $sql:expr) => {{
        let batches = $ctx.sql($sql).await.expect("plan").collect().await;
        assert!(batches.is_err(), "an unknown victim is refused");
    }};
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut g = c.benchmark_group("victim");
    g.sample_size(10);
    for tasks in sizes() {
        let store = store_of(&rt, tasks);
        // A victim in the middle of the store's time.
        let queries = tasks.div_ceil(2000);
        let sql = format!(
            "SELECT count(*), sum(blame_seconds) FROM culprits('q{:06}')",
            queries / 2
        );
        g.bench_function(format!("cold/{tasks}_tasks"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    // A new session each time: nothing cached.
                    let ctx = culprit_sql::session(store.clone()).await.expect("session");
                    run!(ctx, &sql)
                })
            })
        });
        let (_, ctx) = server_session(&rt, &store);
        rt.block_on(async { run!(ctx, &sql) });
        g.bench_function(format!("warm/{tasks}_tasks"), |b| {
            b.iter(|| rt.block_on(async { run!(ctx, &sql) }))
        });
        let next: Vec<String> = (0..4)
            .map(|i| {
                format!(
                    "SELECT count(*), sum(blame_seconds) FROM culprits('q{:06}')",
                    queries / 2 + i
                )
            })
            .collect();
        let mut i = 0;
        g.bench_function(format!("warm_next/{tasks}_tasks"), |b| {
            b.iter(|| {
                i = (i + 1) % next.len();
                rt.block_on(async { run!(ctx, &next[i]) })
            })
        });
        g.bench_function(format!("unknown/{tasks}_tasks"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    refused!(ctx, "SELECT count(*) FROM culprits('no such query')")
                })
            })
        });
        // The answers stored with the shares (`culprit shares`).
        let stored = rt
            .block_on(culprit_engine::Engine::new(store.clone()).store_shares(&mut |_, _| {}))
            .expect("the shares and answers stored");
        assert!(stored.answers > 0, "{stored:?}");
        g.bench_function(format!("stored_cold/{tasks}_tasks"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let ctx = culprit_sql::session(store.clone()).await.expect("session");
                    run!(ctx, &sql)
                })
            })
        });
        let (engine, server) = server_session(&rt, &store);
        g.bench_function(format!("stored_warm_next/{tasks}_tasks"), |b| {
            b.iter(|| {
                i = (i + 1) % next.len();
                rt.block_on(async { run!(server, &next[i]) })
            })
        });
        assert!(
            engine.stored_answers_read() > 0,
            "the stored answers were read"
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
