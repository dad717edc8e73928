//! The same SQL on a cluster (issue #19): a `culprit serve --workers`
//! coordinator and `culprit worker` processes on loopback, over a store on
//! the real S3-compatible server (moto), against a single `culprit serve`
//! over the same store. Every answer must be the single process's (floats
//! within 1e-9 relative), the plans must really have gone to the workers,
//! and a worker that dies must fail the query naming it, never shorten it.

use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{culprit, openssl, serve_process_with, wait_listening, ServeProcess};
use crate::s3;

/// A `culprit worker` process; killed when dropped.
struct WorkerProcess {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    /// Serves TLS (`--tls-cert`): named `https://ADDR`.
    tls: bool,
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl WorkerProcess {
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `culprit worker --store STORE --listen LISTEN` with the S3
/// server's credentials and waits until it listens.
fn start_worker(port: u16, store: &str, listen: &str) -> WorkerProcess {
    start_worker_with(port, store, listen, &[])
}

fn start_worker_with(port: u16, store: &str, listen: &str, args: &[&str]) -> WorkerProcess {
    let mut child = culprit()
        .args(["worker", "--store", store, "--listen", listen])
        .args(args)
        .envs(s3::env(port))
        .env_remove("CULPRIT_STORE")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("culprit worker starts");
    let tls = args.contains(&"--tls-cert");
    let marker = if tls { " on https://" } else { " on http://" };
    let (addr, stderr) = wait_listening(&mut child, "culprit worker", marker);
    WorkerProcess {
        child,
        addr,
        stderr,
        tls,
    }
}

async fn connect(addr: SocketAddr) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(
        &format!(
            "host={} port={} user=culprit dbname=culprit",
            addr.ip(),
            addr.port()
        ),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A statement's rows as text (simple protocol).
async fn rows(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect())
}

/// Two cells are the same answer: equal text, or both numbers within 1e-9
/// relative (a sum over other partitions adds in another order).
fn same(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if a == b => true,
        (Some(a), Some(b)) => match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
            _ => false,
        },
        (None, None) => true,
        _ => false,
    }
}

fn assert_same(what: &str, single: &[Vec<Option<String>>], cluster: &[Vec<Option<String>>]) {
    assert_eq!(
        single.len(),
        cluster.len(),
        "{what}: {} rows in one process, {} on the cluster",
        single.len(),
        cluster.len()
    );
    for (i, (a, b)) in single.iter().zip(cluster).enumerate() {
        assert!(
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y)),
            "{what}: row {i} differs:\n  one process: {a:?}\n  cluster:     {b:?}"
        );
    }
}

/// `sql` answers on the cluster (`coord`, through `cluster`) what it
/// answers in one process (`one`), rows compared after sorting.
async fn assert_same_answer(
    sql: &str,
    one: &tokio_postgres::Client,
    cluster: &tokio_postgres::Client,
    coord: &ServeProcess,
) {
    let mut expected = rows(one, sql).await.expect(sql);
    let mut got = rows(cluster, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}\n{}", coord.stderr.lock().unwrap()));
    expected.sort();
    got.sort();
    assert_same(sql, &expected, &got);
}

/// `e` is the server's 58000 naming the worker at `dead`.
fn assert_names_dead_worker(e: &tokio_postgres::Error, dead: SocketAddr) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {e:?}"));
    assert_eq!(db.code().code(), "58000", "{db:?}");
    assert!(
        db.message().contains(&format!("{dead}")),
        "the error must name the worker {dead}: {}",
        db.message()
    );
}

/// The plan of `sql` run with its metrics (`EXPLAIN ANALYZE`: DataFusion's
/// plain `EXPLAIN` shows the plan before the distributed planner).
async fn plan(client: &tokio_postgres::Client, sql: &str) -> String {
    rows(client, &format!("EXPLAIN ANALYZE {sql}"))
        .await
        .expect("explain")
        .into_iter()
        .flat_map(|r| r.into_iter().flatten())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Plain SQL over the telemetry tables (scans, aggregates, joins, a join
/// with a user table), each with a total order so rows compare one to one.
const PLAIN: &[&str] = &[
    "SELECT count(*), sum(cpu_seconds), min(launch_time), max(finish_time) FROM tasks",
    "SELECT host, count(*) AS n, sum(cpu_seconds) AS cpu FROM tasks GROUP BY host ORDER BY host",
    "SELECT query_id, stage_id, count(*) AS n, avg(run_seconds) AS r FROM task_runs \
     GROUP BY query_id, stage_id ORDER BY query_id, stage_id",
    "SELECT resource, count(*), sum(acquired), sum(blocked) FROM task_windows \
     GROUP BY resource ORDER BY resource",
    // culprit's own scalar function, evaluated on the workers.
    "SELECT resource, count(ratp(blocked, 0, acquired)), sum(ratp(blocked, 0, acquired)) \
     FROM task_windows GROUP BY resource ORDER BY resource",
    "SELECT t.task_id, t.host, s.stage_id FROM tasks t JOIN stages s \
     ON t.query_id = s.query_id AND t.stage_id = s.stage_id ORDER BY t.task_id LIMIT 200",
    "SELECT p.team, count(*) AS tasks, sum(t.cpu_seconds) AS cpu FROM tasks t \
     JOIN queries q ON q.query_id = t.query_id JOIN teams p ON p.pool = q.pool \
     GROUP BY p.team ORDER BY p.team",
];

/// culprit's analyses, alone and joined with tables (computed on the
/// coordinator, from the same store): rows compared after sorting.
const ANALYSES: &[&str] = &[
    "SELECT * FROM blame(NULL)",
    "SELECT * FROM culprits(NULL)",
    "SELECT * FROM victims()",
    "SELECT * FROM aggressive_queries()",
    "SELECT * FROM hot_resources()",
    "SELECT * FROM slow_nodes()",
    "SELECT c.victim_query, c.culprit_kind, c.culprit_query, c.blame_seconds, q.pool, p.team \
     FROM culprits(NULL) c LEFT JOIN queries q ON q.query_id = c.culprit_query \
     LEFT JOIN teams p ON p.pool = q.pool",
    "SELECT b.*, t.host FROM blame(NULL) b JOIN tasks t ON t.query_id = b.victim_query \
     AND t.stage_id = b.victim_stage WHERE t.task_id LIKE '%0'",
];

/// Tasks of the generated workload: more than a batch (8,192 rows), so that
/// DataFusion splits the scans into partitions and the planner has stages
/// to send.
const TASKS: usize = 40_000;

/// The store on moto with the generated workload and a user table `teams`
/// (pool -> team); returns the S3 server, the temporary folder and the
/// store's URL.
fn cluster_store(tasks: usize) -> (s3::S3Server, tempfile::TempDir, String) {
    let s3 = s3::start();
    s3::create_bucket(s3.port, "culprit");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in");
    let data_s = data.to_str().unwrap().to_string();
    let tasks = tasks.to_string();
    let generate = [
        "generate", "--out", &data_s, "--format", "parquet", "--tasks", &tasks, "--hosts", "16",
    ];
    let out = s3::culprit_s3(s3.port, &generate);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = "s3://culprit/cluster".to_string();
    let out = s3::culprit_s3(s3.port, &["ingest", "--store", &store, &data_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = s3::culprit_s3(
        s3.port,
        &[
            "sql",
            "--store",
            &store,
            "--format",
            "csv",
            "SELECT DISTINCT pool FROM queries ORDER BY pool",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pools: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    assert!(!pools.is_empty(), "no pools in the simulated workload");
    let teams = tmp.path().join("teams.csv");
    let mut csv = "pool,team\n".to_string();
    for (i, p) in pools.iter().enumerate() {
        csv.push_str(&format!("{p},team-{}\n", i % 2));
    }
    std::fs::write(&teams, csv).unwrap();
    let out = s3::culprit_s3(
        s3.port,
        &[
            "ingest",
            "--store",
            &store,
            "--table",
            "teams",
            teams.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (s3, tmp, store)
}

fn coordinator(port: u16, store: &str, workers: &[&WorkerProcess]) -> ServeProcess {
    coordinator_with(port, store, workers, &[])
}

fn coordinator_with(
    port: u16,
    store: &str,
    workers: &[&WorkerProcess],
    args: &[&str],
) -> ServeProcess {
    let list = workers
        .iter()
        .map(|w| format!("{}://{}", if w.tls { "https" } else { "http" }, w.addr))
        .collect::<Vec<_>>()
        .join(",");
    let env = s3::env(port);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // One task per byte read: every scan is split over every worker.
    let mut all = vec!["--workers", &list, "--worker-task-bytes", "1"];
    all.extend_from_slice(args);
    serve_process_with(store, &all, &env)
}

fn single(port: u16, store: &str) -> ServeProcess {
    single_with(port, store, &[])
}

fn single_with(port: u16, store: &str, args: &[&str]) -> ServeProcess {
    let env = s3::env(port);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    serve_process_with(store, args, &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sql_on_two_workers_is_the_single_process_answer() {
    let (s3, _tmp, store) = cluster_store(TASKS);
    let w1 = start_worker(s3.port, &store, "127.0.0.1:0");
    let w2 = start_worker(s3.port, &store, "127.0.0.1:0");
    let one = single(s3.port, &store);
    let coord = coordinator(s3.port, &store, &[&w1, &w2]);
    let (a, b) = (connect(one.addr).await, connect(coord.addr).await);
    for sql in PLAIN {
        // The coordinator's plan sends stages to the workers; the single
        // process's has no network boundary.
        let distributed = plan(&b, sql).await;
        assert!(
            distributed.contains("DistributedExec")
                && distributed.contains("Network")
                && distributed.contains("remote_coordinator_channels=")
                && !distributed.contains("remote_coordinator_channels=0"),
            "{sql}: not run on the workers:\n{distributed}"
        );
        let local = plan(&a, sql).await;
        assert!(!local.contains("DistributedExec"), "{sql}:\n{local}");
        let expected = rows(&a, sql).await.expect(sql);
        assert!(!expected.is_empty(), "{sql}: no rows");
        let got = rows(&b, sql).await.unwrap_or_else(|e| {
            panic!(
                "{sql}: {e:?}\ncoordinator:\n{}\nworker 1:\n{}\nworker 2:\n{}",
                coord.stderr.lock().unwrap(),
                w1.stderr.lock().unwrap(),
                w2.stderr.lock().unwrap()
            )
        });
        assert_same(sql, &expected, &got);
    }
    for sql in ANALYSES {
        let mut expected = rows(&a, sql).await.expect(sql);
        // (aggressive_queries() may be empty: the generated queries need
        // not slow each other.)
        assert!(
            !expected.is_empty() || sql.contains("aggressive"),
            "{sql}: no rows"
        );
        let mut got = rows(&b, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}\n{}", coord.stderr.lock().unwrap()));
        expected.sort();
        got.sort();
        assert_same(sql, &expected, &got);
    }
    drop((w1, w2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_worker_fails_the_query_naming_it_and_one_back_is_used_again() {
    let (s3, _tmp, store) = cluster_store(TASKS);
    let mut w1 = start_worker(s3.port, &store, "127.0.0.1:0");
    let w2 = start_worker(s3.port, &store, "127.0.0.1:0");
    let one = single(s3.port, &store);
    let coord = coordinator(s3.port, &store, &[&w1, &w2]);
    let (a, b) = (connect(one.addr).await, connect(coord.addr).await);
    let sql = PLAIN[1];
    let expected = rows(&a, sql).await.unwrap();
    assert_same(sql, &expected, &rows(&b, sql).await.unwrap());

    // Worker 1 dies: the next distributed query fails, naming it, with
    // SQLSTATE 58000; it returns no rows.
    let dead = w1.addr;
    w1.kill();
    let e = rows(&b, sql)
        .await
        .expect_err("a query over a dead worker must fail");
    assert_names_dead_worker(&e, dead);
    // The coordinator serves on: this connection, and a new one.
    assert_eq!(rows(&b, "SELECT 1").await.unwrap().len(), 1);
    let c = connect(coord.addr).await;
    assert_eq!(rows(&c, "SELECT 1").await.unwrap().len(), 1);
    // The failed worker is left out of new plans meanwhile: the query
    // runs on worker 2 alone, with the same answer.
    assert_same(sql, &expected, &rows(&c, sql).await.unwrap());

    // Worker 1 comes back on its address; worker 2 goes away. Once the
    // coordinator tries worker 1 again (5 s), queries run there.
    let w1 = start_worker(s3.port, &store, &dead.to_string());
    drop(w2);
    let deadline = Instant::now() + Duration::from_secs(30);
    let back = loop {
        match rows(&c, sql).await {
            Ok(r) => break r,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "worker {dead} came back but is not used: {e:?}\n{}",
                    coord.stderr.lock().unwrap()
                );
                let db = e.as_db_error().expect("a server error");
                assert_eq!(db.code().code(), "58000", "{db:?}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert_same(sql, &expected, &back);
    drop(w1);
}

/// A join of every window row with every task of its stage (480 million
/// rows at `TASKS`): some seconds on the workers. Exact in any order
/// (no float sum over so many rows).
const HEAVY: &str = "SELECT count(*), max(a.acquired * u.cpu_seconds), \
     min(a.acquired + u.cpu_seconds) FROM task_windows a \
     JOIN tasks t ON a.task_id = t.task_id \
     JOIN tasks u ON t.query_id = u.query_id AND t.stage_id = u.stage_id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_query_fails_it_naming_the_worker() {
    let (s3, _tmp, store) = cluster_store(TASKS);
    let w1 = start_worker(s3.port, &store, "127.0.0.1:0");
    let mut w2 = start_worker(s3.port, &store, "127.0.0.1:0");
    let one = single(s3.port, &store);
    let coord = coordinator(s3.port, &store, &[&w1, &w2]);
    let (a, b) = (connect(one.addr).await, connect(coord.addr).await);
    let expected = rows(&a, HEAVY).await.unwrap();
    let started = Instant::now();
    assert_same(HEAVY, &expected, &rows(&b, HEAVY).await.unwrap());
    let took = started.elapsed();
    assert!(
        took > Duration::from_millis(1500),
        "the query must run long enough to be cut: {took:?}"
    );

    // Worker 2 dies half a second into the query: the query fails naming
    // it (whoever saw it fail: the coordinator, or worker 1 reading its
    // shuffle), and returns no row.
    let b = Arc::new(b);
    let query = {
        let b = b.clone();
        tokio::spawn(async move { rows(&b, HEAVY).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dead = w2.addr;
    w2.kill();
    let e = query
        .await
        .unwrap()
        .expect_err("a query whose worker died must fail, not answer");
    assert_names_dead_worker(&e, dead);
    // The coordinator serves on, on worker 1 alone, with the same answer.
    assert_same(HEAVY, &expected, &rows(&b, HEAVY).await.unwrap());
    drop(w1);
}

/// The analyses of a store whose window rows are read host bucket by host
/// bucket (`--window-cache-rows 0`, as a store too large for memory is),
/// their sweeps split among the workers.
const SHARDED: &[&str] = &[
    "SELECT * FROM blame(NULL)",
    "SELECT * FROM blame(NULL, 'victim_stages=all')",
    "SELECT * FROM blame(NULL, 'attribution=paper')",
    "SELECT * FROM blame(NULL, 'slots=direct')",
    "SELECT * FROM blame(NULL, 'victim_tasks=last')",
    "SELECT * FROM culprits(NULL)",
    "SELECT * FROM victims()",
    "SELECT * FROM aggressive_queries()",
    "SELECT * FROM hot_resources()",
    "SELECT * FROM slow_nodes()",
    // (Without `node_id`: nodes are numbered in the order level 4 lists
    // them, which follows the order detail names were met.)
    "SELECT victim_query, level, kind, victim_stage, resource, detail, host, culprit_kind, \
     culprit_query, culprit_stage, via_stage, bc, dor FROM iqc_nodes(NULL)",
    "SELECT c.victim_query, c.culprit_kind, c.culprit_query, c.blame_seconds, p.team \
     FROM culprits(NULL) c LEFT JOIN queries q ON q.query_id = c.culprit_query \
     LEFT JOIN teams p ON p.pool = q.pool",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analyses_are_swept_by_host_bucket_on_the_workers() {
    let (s3, _tmp, store) = cluster_store(TASKS);
    let mut w1 = start_worker(s3.port, &store, "127.0.0.1:0");
    let w2 = start_worker(s3.port, &store, "127.0.0.1:0");
    let streamed = ["--window-cache-rows", "0"];
    // One process reading the window rows bucket by bucket as the
    // coordinator does, and one holding them in memory.
    let one = single_with(s3.port, &store, &streamed);
    let memory = single(s3.port, &store);
    let coord = coordinator_with(s3.port, &store, &[&w1, &w2], &streamed);
    let (a, m, b) = (
        connect(one.addr).await,
        connect(memory.addr).await,
        connect(coord.addr).await,
    );
    // Series over the whole workload, in 5 windows (epoch milliseconds).
    let span = rows(
        &a,
        "SELECT CAST(extract(epoch FROM min(launch_time)) * 1000 AS BIGINT), \
         CAST(extract(epoch FROM max(finish_time)) * 1000 AS BIGINT) + 1 FROM tasks",
    )
    .await
    .unwrap();
    let num = |c: &Option<String>| -> i64 { c.as_deref().unwrap().parse().unwrap() };
    let (from, to) = (num(&span[0][0]), num(&span[0][1]));
    let step = ((to - from) as f64 / 5000.0).ceil();
    let victim = rows(&a, "SELECT min(query_id) FROM queries").await.unwrap()[0][0]
        .clone()
        .unwrap();
    let mut all: Vec<String> = SHARDED.iter().map(|s| s.to_string()).collect();
    all.push(format!(
        "SELECT * FROM aggressive_queries_series({from}, {to}, {step})"
    ));
    all.push(format!(
        "SELECT * FROM culprits_series('{victim}', {from}, {to}, {step})"
    ));
    for sql in &all {
        let mut expected = rows(&a, sql).await.expect(sql);
        assert!(
            !expected.is_empty() || sql.contains("aggressive"),
            "{sql}: no rows"
        );
        let mut got = rows(&b, sql).await.unwrap_or_else(|e| {
            panic!(
                "{sql}: {e:?}\ncoordinator:\n{}\nworker 1:\n{}\nworker 2:\n{}",
                coord.stderr.lock().unwrap(),
                w1.stderr.lock().unwrap(),
                w2.stderr.lock().unwrap()
            )
        });
        let mut in_memory = rows(&m, sql).await.expect(sql);
        expected.sort();
        got.sort();
        in_memory.sort();
        // The single process's answer on the same path (each bucket swept
        // as it sweeps it, combined in the same order; sums may add in
        // another order, as detail names are numbered as they are met),
        // and the one computed from the rows in memory.
        assert_same(sql, &expected, &got);
        assert_same(sql, &in_memory, &got);
    }
    // Both workers swept shares; the coordinator had the buckets swept
    // there, not here.
    for (name, w) in [("worker 1", &w1), ("worker 2", &w2)] {
        let log = w.stderr.lock().unwrap().clone();
        assert!(
            log.contains("swept a share of"),
            "{name} swept no share:\n{log}\ncoordinator:\n{}",
            coord.stderr.lock().unwrap()
        );
    }
    let log = coord.stderr.lock().unwrap().clone();
    assert!(
        log.contains("host buckets swept by the workers"),
        "the coordinator did not send the buckets to the workers:\n{log}"
    );
    assert!(
        !log.contains("host bucket 1/"),
        "the coordinator swept buckets itself:\n{log}"
    );

    // A worker dies: the next analysis fails naming it (58000), with no
    // rows; the one after runs without it, with the same answer.
    let dead = w1.addr;
    w1.kill();
    let sql = SHARDED[0];
    let e = rows(&b, sql)
        .await
        .expect_err("an analysis over a dead worker must fail");
    assert_names_dead_worker(&e, dead);
    assert_same_answer(sql, &a, &b, &coord).await;

    // It comes back on its address: once the coordinator tries it again
    // (5 s), it sweeps shares again, with the same answer.
    let w1 = start_worker(s3.port, &store, &dead.to_string());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_same_answer(sql, &a, &b, &coord).await;
        if w1.stderr.lock().unwrap().contains("swept a share of") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "worker {dead} came back but sweeps no share:\n{}",
            coord.stderr.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop((w1, w2));
}

/// A worker's memory budget (`culprit worker --memory-budget-mb`) admits
/// each sweep of its share: one too small for it fails the analysis with
/// 53200 naming that worker and its flag, no rows, and the coordinator
/// serves on; an unlimited one (`0`) answers as one process does. The
/// second coordinator names its workers in a `--workers-file`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_memory_budget_refuses_a_sweep_it_cannot_hold() {
    let (s3, tmp, store) = cluster_store(TASKS);
    let small = start_worker_with(s3.port, &store, "127.0.0.1:0", &["--memory-budget-mb", "1"]);
    let w2 = start_worker(s3.port, &store, "127.0.0.1:0");
    assert!(
        small.stderr.lock().unwrap().contains("memory budget 1 MiB"),
        "{}",
        small.stderr.lock().unwrap()
    );
    let streamed = ["--window-cache-rows", "0"];
    let one = single_with(s3.port, &store, &streamed);
    let coord = coordinator_with(s3.port, &store, &[&small, &w2], &streamed);
    let (a, b) = (connect(one.addr).await, connect(coord.addr).await);
    let sql = SHARDED[0];
    let e = rows(&b, sql)
        .await
        .expect_err("a sweep larger than the worker's budget must fail");
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {e:?}"));
    assert_eq!(db.code().code(), "53200", "{db:?}");
    let addr = small.addr.to_string();
    for word in [addr.as_str(), "--memory-budget-mb", "host buckets"] {
        assert!(
            db.message().contains(word),
            "the error must say {word:?}: {}",
            db.message()
        );
    }
    assert_eq!(rows(&b, "SELECT 1").await.unwrap().len(), 1);
    drop(b);
    drop(coord);

    let unlimited = start_worker_with(s3.port, &store, "127.0.0.1:0", &["--memory-budget-mb", "0"]);
    assert!(unlimited
        .stderr
        .lock()
        .unwrap()
        .contains("memory budget unlimited"));
    let file = tmp.path().join("workers.txt");
    std::fs::write(
        &file,
        format!(
            "# the cluster's other worker\nhttp://{}\n\n",
            unlimited.addr
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap().to_string();
    let mut args = vec!["--workers-file", file.as_str()];
    args.extend_from_slice(&streamed);
    let coord = coordinator_with(s3.port, &store, &[&w2], &args);
    let c = connect(coord.addr).await;
    assert_same_answer(sql, &a, &c, &coord).await;
    for (name, w) in [("the unlimited worker", &unlimited), ("worker 2", &w2)] {
        let log = w.stderr.lock().unwrap().clone();
        assert!(
            log.contains("swept a share of"),
            "{name} swept no share:\n{log}"
        );
    }
    drop((small, w2, unlimited));
}

/// A cluster with a shared secret: a worker started with one refuses the
/// plans of a coordinator that does not present it (58000 naming the
/// worker, and why), and answers one that does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_a_secret_refuses_plans_without_it() {
    let (s3, tmp, store) = cluster_store(TASKS);
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "3f9c1e7a5b2d4c6e8f0a1b3c5d7e9f11\n").unwrap();
    let wrong = tmp.path().join("wrong");
    std::fs::write(&wrong, "00000000000000000000000000000000\n").unwrap();
    let (secret, wrong) = (secret.to_str().unwrap(), wrong.to_str().unwrap());
    let w1 = start_worker_with(
        s3.port,
        &store,
        "127.0.0.1:0",
        &["--cluster-secret-file", secret],
    );
    let w2 = start_worker_with(
        s3.port,
        &store,
        "127.0.0.1:0",
        &["--cluster-secret-file", secret],
    );
    let one = single(s3.port, &store);
    let expected = rows(&connect(one.addr).await, PLAIN[1]).await.unwrap();
    for (what, args) in [
        ("no secret", vec![]),
        ("another secret", vec!["--cluster-secret-file", wrong]),
    ] {
        let coord = coordinator_with(s3.port, &store, &[&w1, &w2], &args);
        let e = rows(&connect(coord.addr).await, PLAIN[1])
            .await
            .expect_err(what);
        let db = e
            .as_db_error()
            .unwrap_or_else(|| panic!("{what}: not a server error: {e:?}"));
        assert_eq!(db.code().code(), "58000", "{what}: {db:?}");
        assert!(
            db.message().contains("cluster's secret"),
            "{what}: the refusal must say why: {}",
            db.message()
        );
    }
    let coord = coordinator_with(
        s3.port,
        &store,
        &[&w1, &w2],
        &["--cluster-secret-file", secret],
    );
    let b = connect(coord.addr).await;
    let distributed = plan(&b, PLAIN[1]).await;
    assert!(
        distributed.contains("DistributedExec")
            && !distributed.contains("remote_coordinator_channels=0"),
        "not run on the workers:\n{distributed}"
    );
    assert_same(PLAIN[1], &expected, &rows(&b, PLAIN[1]).await.unwrap());
    // A secret too short is refused at start, naming the file.
    let short = tmp.path().join("short");
    std::fs::write(&short, "abc").unwrap();
    let out = culprit()
        .args(["worker", "--store", &store, "--listen", "127.0.0.1:0"])
        .args(["--cluster-secret-file", short.to_str().unwrap()])
        .envs(s3::env(s3.port))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("short") && err.contains("at least 16"),
        "{err}"
    );
}

/// A CA and a certificate it signed for 127.0.0.1 (the test's own, by
/// openssl): (CA certificate, certificate, key).
fn certificates(dir: &std::path::Path) -> (String, String, String) {
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let (ca, ca_key, cert, key, csr, ext) = (
        p("ca.crt"),
        p("ca.key"),
        p("worker.crt"),
        p("worker.key"),
        p("worker.csr"),
        p("worker.ext"),
    );
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    crate::common::self_signed_pem(
        std::path::Path::new(&ca),
        std::path::Path::new(&ca_key),
        "/CN=culprit test CA",
    );
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &key,
        "-out",
        &csr,
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &ext,
        "-out",
        &cert,
    ]);
    (ca, cert, key)
}

/// Workers serving TLS: a coordinator holding their CA runs plain SQL and
/// an analysis's sweeps on them over TLS with the single process's answers;
/// one without it cannot use them (58000), and `https://` workers without
/// a CA are refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_over_tls() {
    let (s3, tmp, store) = cluster_store(TASKS);
    let (ca, cert, key) = certificates(tmp.path());
    let tls = [
        "--tls-cert",
        cert.as_str(),
        "--tls-key",
        key.as_str(),
        "--worker-ca",
        ca.as_str(),
    ];
    let w1 = start_worker_with(s3.port, &store, "127.0.0.1:0", &tls);
    let w2 = start_worker_with(s3.port, &store, "127.0.0.1:0", &tls);
    let streamed = ["--window-cache-rows", "0"];
    let one = single_with(s3.port, &store, &streamed);
    let a = connect(one.addr).await;
    let coord = coordinator_with(
        s3.port,
        &store,
        &[&w1, &w2],
        &["--worker-ca", &ca, "--window-cache-rows", "0"],
    );
    let b = connect(coord.addr).await;
    let sql = PLAIN[1];
    let distributed = plan(&b, sql).await;
    assert!(
        distributed.contains("DistributedExec")
            && !distributed.contains("remote_coordinator_channels=0"),
        "not run on the workers:\n{distributed}"
    );
    assert_same(
        sql,
        &rows(&a, sql).await.unwrap(),
        &rows(&b, sql).await.unwrap(),
    );
    let sql = SHARDED[0];
    let (mut expected, mut got) = (rows(&a, sql).await.unwrap(), rows(&b, sql).await.unwrap());
    expected.sort();
    got.sort();
    assert_same(sql, &expected, &got);
    for (name, w) in [("worker 1", &w1), ("worker 2", &w2)] {
        let log = w.stderr.lock().unwrap().clone();
        assert!(log.contains("swept a share of"), "{name}:\n{log}");
    }
    // Plain HTTP/2 to a TLS worker: the query fails, naming a worker.
    let env = s3::env(s3.port);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let list = format!("http://{},http://{}", w1.addr, w2.addr);
    let no_tls = serve_process_with(
        &store,
        &["--workers", &list, "--worker-task-bytes", "1"],
        &env,
    );
    let e = rows(&connect(no_tls.addr).await, PLAIN[1])
        .await
        .expect_err("a TLS worker reached without TLS");
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "58000", "{db:?}");
    // https:// workers without --worker-ca: refused at start.
    let list = format!("https://{},https://{}", w1.addr, w2.addr);
    let out = culprit()
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .args(["--workers", &list])
        .envs(s3::env(s3.port))
        .env_remove("CULPRIT_WORKER_CA")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--worker-ca"), "{err}");
}
