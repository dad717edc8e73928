//! Load: 64 concurrent clients on loopback for 60 s (CULPRIT_LOAD_SECONDS
//! changes it) run a mix of blame and catalog queries against the demo
//! data: no errors, no leaked connections; throughput and latency printed.

use std::time::{Duration, Instant};

use culprit_server::ServerOptions;
use culprit_store::Store;

use crate::common::{connect, demo_store, start_server_with};

const CLIENTS: usize = 64;

const MIX: &[&str] = &[
    "SELECT culprit_kind, culprit_query, blame_seconds, dor FROM culprits('q-victim')",
    "SELECT count(*), sum(blame_seconds) FROM blame(NULL)",
    "SELECT * FROM victims()",
    "SELECT q.\"user\", sum(b.blame_seconds) FROM blame('q-victim') b \
     LEFT JOIN queries q ON b.culprit_query = q.query_id GROUP BY q.\"user\"",
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
    "SELECT c.relname, a.attname FROM pg_catalog.pg_class c \
     JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid WHERE c.relname = 'tasks'",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_for_a_minute() {
    let seconds: u64 = std::env::var("CULPRIT_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let (_tmp, store) = demo_store();
    let (addr, _h) = start_server_with(
        Store::open(&store).unwrap(),
        ServerOptions {
            max_connections: CLIENTS,
            ..Default::default()
        },
    )
    .await;
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let client = connect(addr).await;
            let mut latencies = Vec::new();
            let mut errors = Vec::new();
            let mut i = c;
            while Instant::now() < until {
                let sql = MIX[i % MIX.len()];
                i += 1;
                let t = Instant::now();
                // Half simple protocol, half extended.
                let r = if i % 2 == 0 {
                    client.simple_query(sql).await.map(|_| ())
                } else {
                    client.query(sql, &[]).await.map(|_| ())
                };
                match r {
                    Ok(()) => latencies.push(t.elapsed()),
                    Err(e) => errors.push(match e.as_db_error() {
                        Some(db) => format!("{sql}: {} {}", db.code().code(), db.message()),
                        None => format!("{sql}: {e}"),
                    }),
                }
            }
            (latencies, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        let (l, e) = t.await.unwrap();
        all.extend(l);
        errors.extend(e);
    }
    assert!(
        errors.is_empty(),
        "{} errors, first: {}",
        errors.len(),
        errors[0]
    );
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    eprintln!(
        "load: {CLIENTS} clients, {seconds} s: {} queries, {:.0} queries/s, p50 {:.1} ms, p99 {:.1} ms",
        all.len(),
        all.len() as f64 / seconds as f64,
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3
    );
    // Every connection was given back: all 64 slots can be taken again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut again = Vec::new();
    for _ in 0..CLIENTS {
        let c = connect(addr).await;
        c.query_one("SELECT 1", &[])
            .await
            .expect("a slot per client");
        again.push(c);
    }
}
