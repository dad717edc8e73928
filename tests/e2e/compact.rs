//! Housekeeping. `culprit compact`: the same rows in fewer files, answers
//! identical before and after, nothing lost or duplicated when killed at
//! any point, and a running server keeps answering. `culprit expire`: old
//! queries go with what only they need, the others answer as before.

use std::path::Path;
use std::time::Duration;

use culprit_store::Store;

use crate::common::{connect, culprit, run_ok, serve_process, start_server, ServeProcess};

/// What the store answers: every row of the telemetry tables (sorted by
/// key or identity), the blame of every victim, and the victim's culprits.
const ANSWERS: &[&str] = &[
    "SELECT task_id, resource, detail, window_start, window_end, blocked, acquired, gc FROM task_windows ORDER BY 1, 2, 3, 4, 5",
    "SELECT host, resource, scope, window_start, window_end, capacity, used FROM host_windows ORDER BY 1, 2, 3, 4, 5",
    "SELECT * FROM tasks ORDER BY task_id",
    "SELECT * FROM queries ORDER BY query_id",
    "SELECT * FROM stages ORDER BY query_id, stage_id",
    "SELECT culprit_kind, culprit_query, round(blame_seconds, 9) FROM culprits('q-victim') ORDER BY 1, 2",
    "SELECT victim_query, round(sum(blame_seconds), 9) FROM blame(NULL, 'victim_stages=all') GROUP BY 1 ORDER BY 1",
];

fn answers(store: &str) -> Vec<String> {
    ANSWERS
        .iter()
        .map(|q| run_ok(&["sql", "--store", store, "--format", "csv", q]))
        .collect()
}

/// Splits a CSV file's rows into `n` files `dir/part-i/name`, each with the header.
fn split_csv(file: &Path, name: &str, dir: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let rows: Vec<&str> = lines.collect();
    let per = rows.len().div_ceil(n);
    rows.chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            let d = dir.join(format!("{name}-part-{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join(format!("{name}.csv")),
                format!("{header}\n{}\n", chunk.join("\n")),
            )
            .unwrap();
            d.display().to_string()
        })
        .collect()
}

/// The simulated workload ingested in pieces: its window tables in 4 and 3
/// ingests, so each has several small files.
fn store_in_pieces(tmp: &Path) -> (String, Vec<String>) {
    store_of(tmp, 6)
}

/// [`store_in_pieces`] of a workload of `queries` queries.
fn store_of(tmp: &Path, queries: usize) -> (String, Vec<String>) {
    let data = tmp.join("in");
    let q = queries.to_string();
    run_ok(&[
        "generate",
        "--out",
        data.to_str().unwrap(),
        "--format",
        "csv",
        "--queries",
        &q,
    ]);
    let parts = tmp.join("parts");
    let mut windows = split_csv(&data.join("task_windows.csv"), "task_windows", &parts, 4);
    windows.extend(split_csv(
        &data.join("host_windows.csv"),
        "host_windows",
        &parts,
        3,
    ));
    std::fs::remove_file(data.join("task_windows.csv")).unwrap();
    std::fs::remove_file(data.join("host_windows.csv")).unwrap();
    let store = tmp.join("store").display().to_string();
    run_ok(&["ingest", "--store", &store, data.to_str().unwrap()]);
    for w in &windows {
        run_ok(&["ingest", "--store", &store, w]);
    }
    (store, windows)
}

async fn files(store: &str, table: &str) -> usize {
    let m = Store::open(store).unwrap().manifest().await.unwrap();
    m.files.iter().filter(|f| f.table == table).count()
}

#[tokio::test]
async fn compaction_keeps_every_row_and_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, windows) = store_in_pieces(tmp.path());
    let before = answers(&store);
    let (tw, hw) = (
        files(&store, "task_windows").await,
        files(&store, "host_windows").await,
    );
    assert!(
        tw >= 4 && hw == 3,
        "task_windows {tw} files, host_windows {hw}"
    );

    let old: std::collections::BTreeSet<String> = Store::open(&store)
        .unwrap()
        .manifest()
        .await
        .unwrap()
        .files
        .iter()
        .map(|f| f.path.clone())
        .collect();
    let out = run_ok(&["compact", "--store", &store]);
    assert!(out.contains("merged"), "{out}");
    assert_eq!(answers(&store), before);
    // One file per host bucket of task_windows, one of host_windows.
    let m = Store::open(&store).unwrap().manifest().await.unwrap();
    let buckets: std::collections::BTreeSet<Option<u32>> = m
        .files
        .iter()
        .filter(|f| f.table == "task_windows")
        .map(|f| f.bucket)
        .collect();
    assert_eq!(files(&store, "task_windows").await, buckets.len(), "{out}");
    assert!(buckets.len() < tw);
    assert_eq!(files(&store, "host_windows").await, 1);
    // Exactly the files no longer listed are retired.
    let listed: std::collections::BTreeSet<String> =
        m.files.iter().map(|f| f.path.clone()).collect();
    let gone: Vec<String> = old.difference(&listed).cloned().collect();
    let mut retired: Vec<String> = m.retired.iter().map(|r| r.path.clone()).collect();
    retired.sort();
    assert_eq!(retired, gone);
    assert_eq!(m.batches.last().unwrap().kind.as_deref(), Some("compact"));

    // The merged rows keep their identity: a piece again, its rows in
    // another order (so not the same file), adds nothing.
    let piece = Path::new(&windows[1]).join("task_windows.csv");
    let text = std::fs::read_to_string(&piece).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1..].reverse();
    let copy = tmp.path().join("again");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::write(copy.join("task_windows.csv"), lines.join("\n") + "\n").unwrap();
    let again = crate::common::run(&["ingest", "--store", &store, copy.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&again.stdout).to_string()
        + &String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains(&format!("{} rows already stored", lines.len() - 1)),
        "{said}"
    );
    assert_eq!(answers(&store), before);

    // Nothing left to merge; retired files stay for the grace period...
    let out = run_ok(&["compact", "--store", &store]);
    assert_eq!(out.trim(), "nothing to compact");
    assert!(retired.iter().all(|p| Path::new(&store).join(p).exists()));
    // ... and go once it is over.
    let out = run_ok(&["compact", "--store", &store, "--grace-secs", "0"]);
    assert!(
        out.contains(&format!("{} retired files removed", retired.len())),
        "{out}"
    );
    assert!(retired.iter().all(|p| !Path::new(&store).join(p).exists()));
    let m = Store::open(&store).unwrap().manifest().await.unwrap();
    assert!(m.retired.is_empty());
    assert_eq!(answers(&store), before);
}

/// `kill -9` at several points of a compaction: every time the store
/// answers exactly as before (the commit is all or nothing), and a last
/// compaction finishes the work.
#[tokio::test]
async fn compaction_killed_at_any_point_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = store_in_pieces(tmp.path());
    let before = answers(&store);
    let mut outcomes = std::collections::BTreeSet::new();
    for delay_ms in [0u64, 2, 5, 10, 20, 40, 80] {
        let mut child = culprit()
            .args(["compact", "--store", &store, "--grace-secs", "0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SIGKILL: no destructor, no cleanup.
        let _ = child.kill();
        let status = child.wait().unwrap();
        outcomes.insert(status.success());
        assert_eq!(answers(&store), before, "killed after {delay_ms} ms");
    }
    run_ok(&["compact", "--store", &store, "--grace-secs", "0"]);
    run_ok(&["compact", "--store", &store, "--grace-secs", "0"]);
    assert_eq!(answers(&store), before);
    assert_eq!(files(&store, "host_windows").await, 1);
    // Some kills landed before the commit (else the test proves little).
    assert!(outcomes.contains(&false), "{outcomes:?}");
}

/// A running server answers the same before and after a compaction of its
/// store by another process.
#[tokio::test]
async fn a_running_server_keeps_answering() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = store_in_pieces(tmp.path());
    let (addr, _server) = start_server(Store::open(&store).unwrap()).await;
    let client = connect(addr).await;
    let ask = || async {
        let rows = client
            .simple_query(
                "SELECT culprit_query, round(blame_seconds, 9) FROM culprits('q-victim') \
                 WHERE culprit_query IS NOT NULL ORDER BY 1",
            )
            .await
            .unwrap();
        rows.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some(format!("{:?} {:?}", r.get(0), r.get(1)))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let before = ask().await;
    assert!(!before.is_empty());
    run_ok(&["compact", "--store", &store, "--grace-secs", "0"]);
    assert_eq!(ask().await, before);
    run_ok(&["compact", "--store", &store, "--grace-secs", "0"]);
    assert_eq!(ask().await, before);
}

fn csv_rows(store: &str, sql: &str) -> Vec<String> {
    run_ok(&["sql", "--store", store, "--format", "csv", sql])
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// What a kept query answers: its culprits and its blame, every stage.
fn analysis(store: &str, q: &str) -> Vec<String> {
    csv_rows(
        store,
        &format!(
            "SELECT culprit_kind, culprit_query, resource, round(blame_seconds, 9) \
             FROM blame('{q}', 'victim_stages=all') ORDER BY 1, 2, 3, 4"
        ),
    )
}

/// `expire --before T` on the simulated workload: the queries that ended
/// before the cut go with their stages, tasks and windows; the cut moves
/// back to the start of every query that stays. Expected sets are computed
/// from the input before expiring; kept queries answer exactly as before;
/// killed, it changes nothing; run again, it removes nothing more.
#[tokio::test]
async fn expire_drops_old_queries_and_keeps_the_rest_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = store_of(tmp.path(), 16);
    // Per query: end (latest finish) and start (earliest ready or launch), µs.
    let spans: Vec<(String, i64, i64)> = csv_rows(
        &store,
        "SELECT query_id, arrow_cast(max(finish_time), 'Int64') AS e, \
         arrow_cast(min(least(coalesce(ready_time, launch_time), launch_time)), 'Int64') AS s \
         FROM tasks GROUP BY query_id ORDER BY e, query_id",
    )
    .iter()
    .map(|l| {
        let f: Vec<&str> = l.split(',').collect();
        (
            f[0].to_string(),
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
        )
    })
    .collect();
    assert!(spans.len() >= 4, "{spans:?}");
    // The cut for a `before`, worked out independently: the earliest start
    // of the queries ending at or after it, repeated until it stops moving.
    let cut_of = |before: i64| {
        let mut cut = before;
        loop {
            let next = spans
                .iter()
                .filter(|s| s.1 >= cut)
                .map(|s| s.2)
                .fold(before, i64::min);
            if next == cut {
                return cut;
            }
            cut = next;
        }
    };
    // A `before` just after some query ended, where the cut moves back (a
    // query that ended before `before` stays because it ran beside one that
    // stays) and still leaves a query to expire.
    let (before, cut) = spans
        .iter()
        .map(|s| (s.1 + 1000, cut_of(s.1 + 1000)))
        .find(|(b, c)| {
            spans.iter().any(|s| s.1 < *c) && spans.iter().any(|s| s.1 < *b && s.1 >= *c)
        })
        .unwrap_or_else(|| panic!("no before with a moving cut: {spans:?}"));
    let gone: Vec<&String> = spans.iter().filter(|s| s.1 < cut).map(|s| &s.0).collect();
    let kept: Vec<&String> = spans.iter().filter(|s| s.1 >= cut).map(|s| &s.0).collect();
    assert!(!gone.is_empty() && !kept.is_empty(), "cut {cut}: {spans:?}");
    let list = |qs: &[&String]| {
        qs.iter()
            .map(|q| format!("'{q}'"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let count = |sql: String| csv_rows(&store, &sql)[0].clone();
    let tasks_kept = count(format!(
        "SELECT count(*) FROM tasks WHERE query_id IN ({})",
        list(&kept)
    ));
    let windows_kept = count(format!(
        "SELECT count(*) FROM task_windows w JOIN tasks t USING (task_id) WHERE t.query_id IN ({})",
        list(&kept)
    ));
    let hosts_kept = count(format!(
        "SELECT count(*) FROM host_windows WHERE arrow_cast(window_end, 'Int64') > {cut}"
    ));
    let answers_kept: Vec<Vec<String>> = kept.iter().map(|q| analysis(&store, q)).collect();
    let at = chrono::DateTime::from_timestamp_micros(before)
        .unwrap()
        .to_rfc3339();

    // Killed early, nothing changes.
    let mut child = culprit()
        .args(["expire", "--store", &store, "--before", &at])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(3));
    let _ = child.kill();
    if !child.wait().unwrap().success() {
        assert_eq!(
            count("SELECT count(*) FROM queries".into()),
            spans.len().to_string()
        );
    }

    let out = run_ok(&["expire", "--store", &store, "--before", &at]);
    let queries: Vec<String> = csv_rows(&store, "SELECT query_id FROM queries ORDER BY 1");
    let mut want: Vec<String> = kept.iter().map(|q| q.to_string()).collect();
    want.sort();
    assert_eq!(queries, want, "{out}");
    assert_eq!(count("SELECT count(*) FROM tasks".into()), tasks_kept);
    assert_eq!(
        count("SELECT count(*) FROM task_windows".into()),
        windows_kept
    );
    assert_eq!(
        count("SELECT count(*) FROM host_windows".into()),
        hosts_kept
    );
    assert_eq!(
        count(format!(
            "SELECT count(*) FROM stages WHERE query_id IN ({})",
            list(&gone)
        )),
        "0"
    );
    let after: Vec<Vec<String>> = kept.iter().map(|q| analysis(&store, q)).collect();
    assert_eq!(after, answers_kept);
    // Again: nothing more is old enough.
    let out = run_ok(&["expire", "--store", &store, "--before", &at]);
    assert_eq!(out.trim(), "nothing to expire");
    // The old files go with the next compaction past its grace period.
    let out = run_ok(&["compact", "--store", &store, "--grace-secs", "0"]);
    assert!(out.contains("retired files removed"), "{out}");
    assert_eq!(
        kept.iter().map(|q| analysis(&store, q)).collect::<Vec<_>>(),
        answers_kept
    );
}

/// Telemetry files listed, and whether a compaction committed.
async fn layout(store: &str) -> (usize, bool) {
    let m = Store::open(store).unwrap().manifest().await.unwrap();
    let files = m
        .files
        .iter()
        .filter(|f| culprit_core::Table::ALL.iter().any(|t| t.name() == f.table))
        .count();
    let compacted = m
        .batches
        .iter()
        .any(|b| b.kind.as_deref() == Some("compact"));
    (files, compacted)
}

/// Whether the background compaction ran on `store` and left fewer files
/// than `reference` (the same pieces, never compacted) lists.
async fn compacted(store: &str, reference: &str) -> bool {
    let (files, compacted) = layout(store).await;
    compacted && files < layout(reference).await.0
}

/// Rows of `task_windows` in `store`'s manifest.
async fn stored_windows(store: &str) -> i64 {
    Store::open(store)
        .unwrap()
        .manifest()
        .await
        .unwrap()
        .rows_of(culprit_core::Table::TaskWindows) as i64
}

/// Waits up to 60 s for `server`'s background compaction of `store`
/// ([`compacted`] against `reference`); meanwhile `answering`'s client, if
/// any, must answer every one of its window rows, once.
async fn until_compacted(
    server: &ServeProcess,
    store: &str,
    reference: &str,
    answering: Option<(&tokio_postgres::Client, i64)>,
) {
    let started = std::time::Instant::now();
    while !compacted(store, reference).await {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no background compaction in 60 s:\n{}",
            server.stderr.lock().unwrap()
        );
        if let Some((client, rows)) = answering {
            assert_eq!(served_windows(client).await, rows);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rows of `task_windows` the server answers.
async fn served_windows(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM task_windows", &[])
        .await
        .unwrap()
        .get(0)
}

/// `culprit serve --compact-files 3`: small ingests while it runs, and the
/// file count drops with no `culprit compact`; the server answers
/// throughout, and afterwards the store answers exactly as one ingested in
/// the same pieces and never compacted (every row of every table, and the
/// analyses).
#[tokio::test]
async fn serve_compacts_in_the_background() {
    let tmp = tempfile::tempdir().unwrap();
    let (reference, windows) = store_in_pieces(&tmp.path().join("ref"));
    let expected = answers(&reference);
    let rows = stored_windows(&reference).await;

    let store = tmp.path().join("live").display().to_string();
    let data = tmp.path().join("ref/in").display().to_string();
    run_ok(&["ingest", "--store", &store, &data]);
    let mut server = serve_process(&store, &["--compact-files", "3", "--compact-every", "0.3"]);
    let client = connect(server.addr).await;
    // The pieces, one ingest each; the server answers after each.
    let mut last = served_windows(&client).await;
    for w in &windows {
        run_ok(&["ingest", "--store", &store, w]);
        let n = served_windows(&client).await;
        assert!(
            n >= last && n <= rows,
            "{n} window rows after {last}, of {rows}"
        );
        last = n;
    }
    until_compacted(&server, &store, &reference, Some((&client, rows))).await;
    assert!(server.alive());
    assert_eq!(served_windows(&client).await, rows);
    assert!(server
        .stderr
        .lock()
        .unwrap()
        .contains("background compaction"));
    assert_eq!(answers(&store), expected);
}

/// The background compaction's merges take their memory from the server's
/// budget, as heavy analyses do (at most three quarters of it, less the
/// read cache, an eighth, held for the server's life). With
/// `--memory-budget-mb 100` (62 MiB left) not even a merge file after file
/// fits (112 MiB, `culprit_store::merge_memory(None)`): the server says the
/// compaction is off, merges nothing and answers every row. With 240 MiB
/// (150 MiB left) a merge in order of time (192 MiB) does not fit, one file
/// after file does: the store is compacted file after file.
#[tokio::test]
async fn serve_compaction_takes_its_memory_from_the_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let (reference, windows) = store_in_pieces(&tmp.path().join("ref"));
    let rows = stored_windows(&reference).await;
    let file_order = culprit_store::merge_memory(None);
    let time_order =
        culprit_store::merge_memory(Some(culprit_store::CompactOptions::default().slice_rows));
    assert!(file_order > 62 << 20 && file_order < 150 << 20 && time_order > 180 << 20);

    let store = tmp.path().join("live").display().to_string();
    let data = tmp.path().join("ref/in").display().to_string();
    run_ok(&["ingest", "--store", &store, &data]);
    for w in &windows {
        run_ok(&["ingest", "--store", &store, w]);
    }
    let files_before = layout(&store).await.0;
    let every = ["--compact-files", "3", "--compact-every", "0.2"];
    let mut server = serve_process(
        &store,
        &[&every[..], &["--memory-budget-mb", "100"]].concat(),
    );
    let client = connect(server.addr).await;
    // Ten checks' time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = server.stderr.lock().unwrap().clone();
    assert!(log.contains("background compaction off"), "{log}");
    assert!(log.contains("raise --memory-budget-mb"), "{log}");
    assert_eq!(layout(&store).await, (files_before, false));
    assert_eq!(served_windows(&client).await, rows);
    assert!(server.alive());
    drop(client);
    drop(server);

    // Room for a merge file after file only.
    let server = serve_process(
        &store,
        &[&every[..], &["--memory-budget-mb", "240"]].concat(),
    );
    until_compacted(&server, &store, &reference, None).await;
    let client = connect(server.addr).await;
    assert_eq!(served_windows(&client).await, rows);
    let log = server.stderr.lock().unwrap().clone();
    assert!(log.contains("time tables: 0 in order of time"), "{log}");
}

/// `culprit ingest --watch --compact-files 3`: pieces dropped into the
/// watched folder one at a time make small files, which the watch compacts
/// by itself; the store then answers exactly as the never-compacted one.
#[tokio::test]
async fn ingest_watch_compacts_in_the_background() {
    let tmp = tempfile::tempdir().unwrap();
    let (reference, windows) = store_in_pieces(&tmp.path().join("ref"));
    let expected = answers(&reference);
    let store = tmp.path().join("live").display().to_string();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let copy_dir = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    };
    copy_dir(&tmp.path().join("ref/in"), &inbox.join("base"));
    let mut watch = culprit()
        .args([
            "ingest",
            "--watch",
            "--interval",
            "0.2",
            "--compact-files",
            "3",
        ])
        .args(["--compact-every", "0.3", "--store", &store])
        .arg(&inbox)
        .env_remove("CULPRIT_STORE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let version = |store: String| async move {
        Store::open(&store)
            .unwrap()
            .manifest()
            .await
            .map(|m| m.version)
            .unwrap_or(0)
    };
    let wait_for_version = |after: u64| {
        let store = store.clone();
        async move {
            let started = std::time::Instant::now();
            loop {
                let v = version(store.clone()).await;
                if v > after {
                    return v;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "no ingest in 60 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let mut v = wait_for_version(0).await;
    for (i, w) in windows.iter().enumerate() {
        copy_dir(Path::new(w), &inbox.join(format!("piece-{i}")));
        v = wait_for_version(v).await;
    }
    // Every piece in (a compaction also makes a version), then compacted.
    let rows = |store: String| async move {
        let m = Store::open(&store).unwrap().manifest().await.unwrap();
        use culprit_core::Table::{HostWindows, TaskWindows};
        (m.rows_of(TaskWindows), m.rows_of(HostWindows))
    };
    let want = rows(reference.clone()).await;
    let started = std::time::Instant::now();
    while rows(store.clone()).await != want || !compacted(&store, &reference).await {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not every piece ingested and compacted in 60 s: rows {:?} of {want:?}, \
             (files, compacted) {:?}, reference files {:?}",
            rows(store.clone()).await,
            layout(&store).await,
            layout(&reference).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let the looks after the compaction run: they add nothing.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(answers(&store), expected);
}

/// `culprit shares` stores the slot holders' shares of every stage of the
/// input, and every answer stays as it was; a server started with
/// `--shares-after` stores them itself once the telemetry is quiet.
#[tokio::test]
async fn stored_shares_keep_every_answer_and_a_server_stores_them_when_quiet() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = store_in_pieces(&tmp.path().join("a"));
    let expected = answers(&store);
    let stages = std::fs::read_to_string(tmp.path().join("a/in/stages.csv"))
        .unwrap()
        .lines()
        .count()
        - 1;
    let out = run_ok(&["shares", "--store", &store]);
    assert!(
        out.contains(&format!(
            "stored the slot holders' shares of {stages} stages"
        )),
        "{out}"
    );
    let opened = Store::open(&store).unwrap();
    let telemetry = opened.manifest().await.unwrap().telemetry_id();
    let found = opened
        .derived_objects(&culprit_store::paths::stage_shares_dir(&telemetry))
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(out.contains(&found[0].0), "{out}");
    assert_eq!(answers(&store), expected);
    // Asked again: already stored, nothing written over.
    let again = run_ok(&["shares", "--store", &store]);
    assert!(again.contains("stored already"), "{again}");
    let listed = opened
        .derived_objects(culprit_store::paths::STAGE_SHARES_DIR)
        .await
        .unwrap();
    assert_eq!(listed, found, "the same object, not written again");

    // A server: stored in the background, the same answers.
    let (live, _) = store_in_pieces(&tmp.path().join("b"));
    let live_store = Store::open(&live).unwrap();
    let dir = culprit_store::paths::stage_shares_dir(
        &live_store.manifest().await.unwrap().telemetry_id(),
    );
    assert!(live_store.derived_objects(&dir).await.unwrap().is_empty());
    let mut server = serve_process(&live, &["--compact-files", "0", "--shares-after", "0.3"]);
    let mut waited = 0;
    while live_store.derived_objects(&dir).await.unwrap().is_empty() {
        assert!(waited < 600, "no shares stored after 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    assert!(server.alive());
    // Stored by the server (not a failure's warning).
    let stored_line = |log: &str| {
        log.lines()
            .any(|l| l.contains("stored shares: ") && l.contains(" and the answers of "))
    };
    let mut waited = 0;
    while !stored_line(&server.stderr.lock().unwrap()) {
        assert!(waited < 100, "{}", server.stderr.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    let client = connect(server.addr).await;
    let rows = client
        .query(
            "SELECT culprit_kind, culprit_query, round(blame_seconds, 9)::text FROM culprits('q-victim') ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap();
    let served: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{},{},{}",
                r.get::<_, String>(0),
                r.get::<_, Option<String>>(1).unwrap_or_default(),
                r.get::<_, String>(2)
            )
        })
        .collect();
    let want: Vec<&str> = expected[5].lines().skip(1).collect();
    assert_eq!(served, want);
    // Answered from the stored answers: nothing read for the victim. (The
    // server's log is read on a thread of its own: waited for.)
    let logged = |line: &'static dyn Fn(&str) -> bool| {
        let stderr = server.stderr.clone();
        async move {
            for _ in 0..100 {
                let log = stderr.lock().unwrap().clone();
                if let Some(l) = log.lines().find(|l| line(l)) {
                    return (l.to_string(), log);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("{}", stderr.lock().unwrap());
        }
    };
    let (_, log) = logged(&|l| l.contains("culprits(): ") && l.ends_with("(stored)")).await;
    assert!(!log.contains("read for q-victim in"), "{log}");
    // Another question of the same victim is computed, its holders'
    // shares taken from the store: the server's read says how many shares
    // it did not compute (`M kept from earlier analyses`).
    client
        .query(
            "SELECT count(*) FROM culprits('q-victim', 'victim_stages=all')",
            &[],
        )
        .await
        .unwrap();
    let (read, _) = logged(&|l| l.contains("read for q-victim in")).await;
    assert!(!read.ends_with(" 0 kept from earlier analyses)"), "{read}");
    assert_eq!(answers(&live), expected);
}

/// `culprits(victim)` with the default options is answered from the
/// answers `culprit shares` stored (the log says `(stored)`), with the
/// numbers the victim's own computation gave before; any option or window
/// is computed; an unknown victim is still refused.
#[test]
fn stored_answers_answer_the_default_question_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = store_in_pieces(&tmp.path().join("a"));
    let sql = |q: &str| {
        let out = culprit()
            .args(["sql", "--store", &store, "--format", "csv", q])
            .env_remove("CULPRIT_STORE")
            .env("RUST_LOG", "info")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let default = "SELECT * FROM culprits('q-victim') ORDER BY blame_seconds DESC, culprit_kind, culprit_query";
    let others = [
        "SELECT * FROM culprits('q-victim', 'slots=direct') ORDER BY 1, 2, 3",
        "SELECT * FROM culprits('q-victim', 'victim_stages=all') ORDER BY 1, 2, 3",
        "SELECT * FROM culprits('q-victim', 0, 9000000000000) ORDER BY 1, 2, 3",
    ];
    let (ok, computed, log) = sql(default);
    assert!(
        ok && log.contains("(computed)") && !log.contains("(stored)"),
        "{log}"
    );
    let before: Vec<_> = others.iter().map(|q| sql(q).1).collect();
    run_ok(&["shares", "--store", &store]);
    let (ok, stored, log) = sql(default);
    assert!(
        ok && log.contains("(stored)") && !log.contains("(computed)"),
        "{log}"
    );
    assert!(
        !log.contains("read for q-victim"),
        "nothing read for the victim: {log}"
    );
    // The same rows, in the same order, the same numbers (to 1e-9).
    assert!(computed.lines().count() > 3, "{computed}");
    same_csv(&computed, &stored);
    for (q, want) in others.iter().zip(&before) {
        let (ok, got, log) = sql(q);
        assert!(
            ok && log.contains("(computed)") && !log.contains("(stored)"),
            "{q}: {log}"
        );
        same_csv(want, &got);
    }
    let (ok, _, log) = sql("SELECT * FROM culprits('q-nobody')");
    assert!(!ok && log.contains("unknown query 'q-nobody'"), "{log}");
}

/// Two CSV results have the same rows in the same order, their numbers the
/// same to 1e-9 relative (stored shares and answers sum the same terms in
/// another order).
fn same_csv(want: &str, got: &str) {
    let rows = |csv: &str| -> Vec<Vec<String>> {
        csv.lines()
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect()
    };
    let (a, b) = (rows(want), rows(got));
    assert_eq!(a.len(), b.len(), "{want}\n{got}");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.len(), y.len(), "{x:?} against {y:?}");
        for (u, v) in x.iter().zip(y) {
            match (u.parse::<f64>(), v.parse::<f64>()) {
                (Ok(u), Ok(v)) => assert!(
                    (u - v).abs() <= 1e-9 * u.abs().max(v.abs()).max(1e-6),
                    "{x:?} wanted, {y:?} got"
                ),
                _ => assert_eq!(u, v, "{x:?} wanted, {y:?} got"),
            }
        }
    }
}
