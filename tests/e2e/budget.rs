//! The server-wide memory budget and the admission of heavy analyses
//! (docs/operations.md "Memory budget"): 64 clients each asking for the
//! blame of every victim of a generated store at once, while other clients
//! ask light questions. The real binary on a real port, real clients.
//!
//! The store: `culprit generate --tasks 100000 --hosts 50` (about a million
//! window rows; generated, ingested and analysed in well under a minute in
//! release mode). The budget (`BUDGET_MB`) holds the sessions of the 69
//! connections (6 MiB each), the dataset cache and one or two heavy
//! analyses at a time, far less than 64 at once would take; the server's
//! peak resident memory must stay under the budget plus `ALLOWANCE_MB` (the
//! binary, the runtime, the allocator's slack).

use std::time::{Duration, Instant};

use tokio_postgres::SimpleQueryMessage;

use crate::common::{code, connect, run_ok, serve_process};

const TASKS: &str = "100000";
const HOSTS: &str = "50";
/// The server's budget in the test, MiB.
const BUDGET_MB: u64 = 1024;
/// What the process holds beyond what the budget counts, MiB.
const ALLOWANCE_MB: u64 = 150;
const HEAVY_CLIENTS: usize = 64;
const LIGHT_CLIENTS: usize = 4;

/// The heavy question: the blame of every stage of every query.
const HEAVY: &str =
    "SELECT count(*), round(sum(blame_seconds), 3) FROM blame(NULL, 'victim_stages=all')";

/// The one row of a statement's answer, as text.
async fn one_row(
    c: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let msgs = c.simple_query(sql).await?;
    let rows: Vec<Vec<String>> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    Ok(rows.into_iter().next().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heavy_analyses_wait_or_fail_cleanly_and_light_ones_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in");
    let store = tmp.path().join("store").display().to_string();
    run_ok(&[
        "generate",
        "--out",
        data.to_str().unwrap(),
        "--tasks",
        TASKS,
        "--hosts",
        HOSTS,
    ]);
    run_ok(&["ingest", "--store", &store, data.to_str().unwrap()]);
    let budget = BUDGET_MB.to_string();
    let mut server = serve_process(
        &store,
        &[
            "--memory-budget-mb",
            &budget,
            "--heavy-analyses",
            "2",
            "--heavy-queue",
            "8",
            // The figures of docs/operations.md are of the clients'
            // analyses alone, without the background storing of shares.
            "--shares-after",
            "0",
        ],
    );
    let addr = server.addr;

    // The answers of one client alone. The heavy one is checked against the
    // input: with every stage explained, the blame conserves every task's
    // blocked seconds and slot wait (method.md section 5).
    let c = connect(addr).await;
    let alone = one_row(&c, HEAVY).await.unwrap();
    let input = one_row(
        &c,
        "SELECT round(sum(blocked_seconds + wait_seconds), 3) FROM task_runs",
    )
    .await
    .unwrap();
    let (total, expected): (f64, f64) = (alone[1].parse().unwrap(), input[0].parse().unwrap());
    assert!(
        (total - expected).abs() <= 1e-6 * expected.max(1.0),
        "blame sums to {total} s, the tasks' blocked seconds and slot waits to {expected} s"
    );
    let victim = one_row(&c, "SELECT min(query_id) FROM queries")
        .await
        .unwrap()[0]
        .clone();
    let light_sql =
        format!("SELECT count(*), round(sum(blame_seconds), 3) FROM culprits('{victim}')");
    let light = one_row(&c, &light_sql).await.unwrap();
    let queries = one_row(&c, "SELECT count(*) FROM queries").await.unwrap();

    // 64 heavy clients at once, and light ones until they are done.
    let started = Instant::now();
    let heavy: Vec<_> = (0..HEAVY_CLIENTS)
        .map(|_| {
            tokio::spawn(async move {
                let c = connect(addr).await;
                one_row(&c, HEAVY).await.map_err(|e| {
                    let msg = e.as_db_error().map(|d| d.message().to_string());
                    (code(&e), msg)
                })
            })
        })
        .collect();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lights: Vec<_> = (0..LIGHT_CLIENTS)
        .map(|_| {
            let (done, light_sql) = (done.clone(), light_sql.clone());
            tokio::spawn(async move {
                let c = connect(addr).await;
                let mut answers = Vec::new();
                while !done.load(std::sync::atomic::Ordering::SeqCst) || answers.is_empty() {
                    let t = Instant::now();
                    let a = one_row(&c, &light_sql).await;
                    let q = one_row(&c, "SELECT count(*) FROM queries").await;
                    answers.push((a, q, t.elapsed()));
                }
                answers
            })
        })
        .collect();
    let mut answered = 0;
    let mut refused = 0;
    for h in heavy {
        match h.await.unwrap() {
            Ok(row) => {
                assert_eq!(row, alone, "a heavy analysis answered differently");
                answered += 1;
            }
            Err((code, msg)) => {
                assert_eq!(code, "53200", "a heavy analysis failed otherwise: {msg:?}");
                let msg = msg.unwrap_or_default();
                assert!(
                    msg.contains("busy") || msg.contains("memory budget"),
                    "{msg}"
                );
                refused += 1;
            }
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut light_answers = 0;
    for l in lights {
        for (a, q, took) in l.await.unwrap() {
            assert_eq!(
                a.unwrap(),
                light,
                "a light query failed or answered differently"
            );
            assert_eq!(q.unwrap(), queries);
            assert!(
                took < Duration::from_secs(60),
                "a light query took {took:?}"
            );
            light_answers += 1;
        }
    }
    let peak = server.peak_rss() >> 20;
    eprintln!(
        "{HEAVY_CLIENTS} heavy clients: {answered} answered, {refused} refused (53200); \
         {light_answers} light answers; peak RSS {peak} MiB (budget {BUDGET_MB} MiB); {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(server.alive(), "{}", server.stderr.lock().unwrap());
    assert!(answered >= 2, "{answered} heavy analyses answered");
    assert!(refused >= 1, "the queue never filled: {refused} refused");
    assert!(
        peak <= BUDGET_MB + ALLOWANCE_MB,
        "peak RSS {peak} MiB over the budget {BUDGET_MB} MiB + {ALLOWANCE_MB} MiB"
    );
    // Still serving.
    assert_eq!(one_row(&connect(addr).await, HEAVY).await.unwrap(), alone);
}
