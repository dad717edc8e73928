//! A focused analysis (one victim, reading only what overlaps it through the
//! query index and the files' time spans) gives the victim exactly what the
//! analysis over the whole store gives it.

mod common;

use std::collections::{BTreeMap, HashMap};

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use culprit_core::method::BlameOptions;
use culprit_core::Table;
use culprit_engine::{Budget, BudgetOptions, Engine, Focus, Snapshot};
use culprit_store::Store;

fn filter(b: &RecordBatch, keep: impl Fn(usize) -> bool) -> RecordBatch {
    let mask: BooleanArray = (0..b.num_rows()).map(|i| Some(keep(i))).collect();
    arrow::compute::filter_record_batch(b, &mask).unwrap()
}

/// A task of a hand-made workload: id, query, host, and its ready, launch
/// and finish times in seconds.
type HandTask = (String, &'static str, &'static str, i64, i64, i64);

/// A window row of a hand-made task: start and end in seconds, resource,
/// blocked seconds, units acquired.
type HandRow = (i64, i64, &'static str, f64, f64);

/// A hand-made workload whose victim is the query `victim`: `queries` with
/// one stage `0` each; `tasks`, each with the window rows `rows` gives it
/// and, if given, CPU totals (seconds, blocked seconds); and capacity rows
/// `(host, resource, capacity)` from 0 to `until` s.
fn hand_made(
    queries: &[&str],
    tasks: &[HandTask],
    rows: impl Fn(&HandTask) -> Vec<HandRow>,
    totals: Option<(f64, f64)>,
    capacity: &[(&str, &str, f64)],
    until: i64,
    culprit: &str,
) -> culprit_sim::Workload {
    use culprit_core::batches::{TableBuilder, Value as V};
    let s = |x: i64| V::T(1_767_225_600_000_000 + x * 1_000_000);
    let mut q = TableBuilder::new(Table::Queries, queries.len());
    let mut stages = TableBuilder::new(Table::Stages, queries.len());
    for &name in queries {
        q.row(&[("query_id", V::S(name))]);
        stages.row(&[("query_id", V::S(name)), ("stage_id", V::S("0"))]);
    }
    let mut t = TableBuilder::new(Table::Tasks, tasks.len());
    let mut windows = TableBuilder::new(Table::TaskWindows, tasks.len());
    for task in tasks {
        let (id, query, host, ready, launch, finish) = task;
        let mut columns = vec![
            ("task_id", V::S(id)),
            ("query_id", V::S(query)),
            ("stage_id", V::S("0")),
            ("host", V::S(host)),
            ("ready_time", s(*ready)),
            ("launch_time", s(*launch)),
            ("finish_time", s(*finish)),
        ];
        if let Some((cpu, blocked)) = totals {
            columns.push(("cpu_seconds", V::F(cpu)));
            columns.push(("cpu_blocked", V::F(blocked)));
        }
        t.row(&columns);
        for (a, b, resource, blocked, acquired) in rows(task) {
            windows.row(&[
                ("task_id", V::S(id)),
                ("window_start", s(a)),
                ("window_end", s(b)),
                ("resource", V::S(resource)),
                ("blocked", V::F(blocked)),
                ("acquired", V::F(acquired)),
            ]);
        }
    }
    let mut hosts = TableBuilder::new(Table::HostWindows, capacity.len());
    for &(host, resource, capacity) in capacity {
        hosts.row(&[
            ("host", V::S(host)),
            ("resource", V::S(resource)),
            ("window_start", s(0)),
            ("window_end", s(until)),
            ("capacity", V::F(capacity)),
        ]);
    }
    culprit_sim::Workload {
        queries: q.finish(),
        stages: stages.finish(),
        tasks: t.finish(),
        task_windows: windows.finish(),
        host_windows: hosts.finish(),
        record_lineage: None,
        partition_latency: None,
        victim: "victim".into(),
        culprit: culprit.into(),
        expensive_input: String::new(),
    }
}

/// Hand-made tasks from `(id, query, host, ready, launch, finish)`.
fn hand_tasks(tasks: &[(&str, &'static str, &'static str, i64, i64, i64)]) -> Vec<HandTask> {
    tasks
        .iter()
        .map(|&(id, q, host, r, l, f)| (id.to_string(), q, host, r, l, f))
        .collect()
}

/// One CPU row over the task's run, 1 s blocked, 1 unit acquired.
fn one_cpu_row(t: &HandTask) -> Vec<HandRow> {
    vec![(t.4, t.5, "cpu", 1.0, 1.0)]
}

/// A store of `w` written in three batches, each query's tasks spread over
/// all three (so a query's span is the union of three index rows).
async fn store_of(w: &culprit_sim::Workload) -> Store {
    let store = Store::open("memory://").unwrap();
    let ids = w
        .tasks
        .column_by_name("task_id")
        .unwrap()
        .as_string::<i32>()
        .clone();
    let part: HashMap<String, usize> = (0..ids.len())
        .map(|i| (ids.value(i).to_string(), i % 3))
        .collect();
    for p in 0..3 {
        let mut batch = store.begin();
        if p == 0 {
            batch
                .write(Table::Queries, std::slice::from_ref(&w.queries))
                .await
                .unwrap();
            batch
                .write(Table::Stages, std::slice::from_ref(&w.stages))
                .await
                .unwrap();
        }
        let tasks = filter(&w.tasks, |i| i % 3 == p);
        batch.write(Table::Tasks, &[tasks]).await.unwrap();
        let wids = w
            .task_windows
            .column_by_name("task_id")
            .unwrap()
            .as_string::<i32>()
            .clone();
        let windows = filter(&w.task_windows, |i| part[wids.value(i)] == p);
        batch.write(Table::TaskWindows, &[windows]).await.unwrap();
        if p == 1 {
            batch
                .write(Table::HostWindows, std::slice::from_ref(&w.host_windows))
                .await
                .unwrap();
        }
        batch.commit().await.unwrap();
    }
    store
}

/// Writes `tables` to `store` in one batch, committed.
async fn commit_tables(store: &Store, tables: &[(Table, &RecordBatch)]) {
    let mut batch = store.begin();
    for (table, rows) in tables {
        batch
            .write(*table, std::slice::from_ref(*rows))
            .await
            .unwrap();
    }
    batch.commit().await.unwrap();
}

/// The default analysis of `victims` over the whole store in memory: the
/// snapshot, its options and its answer.
async fn whole_answer(store: &Store, victims: &[String]) -> (Snapshot, BlameOptions, Culprits) {
    let full = Engine::new(store.clone()).snapshot(true).await.unwrap();
    let opts = BlameOptions {
        victims: Some(victims.to_vec()),
        ..Default::default()
    };
    let want = culprits(&full, &opts);
    (full, opts, want)
}

/// Every culprit row of the victim, by (kind, culprit), as numbers.
fn culprits(s: &Snapshot, opts: &BlameOptions) -> Culprits {
    let rows = s.culprits(opts).unwrap();
    let ds = &s.ds;
    rows.iter()
        .map(|r| {
            (
                (
                    r.kind.name().to_string(),
                    r.culprit_query
                        .map_or(String::new(), |q| ds.queries.name(q).to_string()),
                ),
                [
                    r.seconds,
                    r.dor.unwrap_or(-1.0),
                    r.naive_overlap.unwrap_or(-1.0),
                    r.deep_overlap.unwrap_or(-1.0),
                ],
            )
        })
        .collect()
}

/// The focus of the default analysis of `victims` (transitive slot blame).
fn focus_on(victims: &[String]) -> Focus {
    Focus::of(&BlameOptions {
        victims: Some(victims.to_vec()),
        ..Default::default()
    })
    .unwrap()
}

/// The window rows a snapshot holds.
fn window_rows(s: &Snapshot) -> usize {
    s.ds.windows.iter().map(|g| g.len()).sum()
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-6)
}

type Culprits = BTreeMap<(String, String), [f64; 4]>;

/// `got` has the culprits of `want`, each with the same values; `what`
/// names the comparison in a failure.
fn assert_same(want: &Culprits, got: &Culprits, what: &str) {
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (k, a) in want {
        let b = &got[k];
        assert!(
            a.iter().zip(b).all(|(x, y)| same(*x, *y)),
            "{what}, {k:?}: whole store {a:?}, got {b:?}"
        );
    }
}

async fn check(w: &culprit_sim::Workload, victims: &[String], expiry: bool) -> usize {
    let store = store_of(w).await;
    let n = compare(&store, victims).await;
    let index_files =
        |m: &culprit_store::Manifest| m.files_named(culprit_store::layout::QUERY_SPANS).count();
    let before = store.manifest().await.unwrap();
    let spans = store.query_spans(&before).await.unwrap().unwrap();
    assert_eq!(index_files(&before), 3, "an index file per batch");
    // Compacted (the batches' files merged, the index's too): the same.
    let merged = store
        .compact(&culprit_store::CompactOptions::default(), |_, _| {})
        .await
        .unwrap();
    assert!(merged.written > 0, "{merged:?}");
    let after = store.manifest().await.unwrap();
    assert_eq!(index_files(&after), 1, "the index's files merged into one");
    assert_eq!(store.query_spans(&after).await.unwrap().unwrap(), spans);
    assert_eq!(compare(&store, victims).await, n);

    // Expired (the earliest queries dropped, from the index too): the same
    // for the queries that stay.
    let ends = w
        .queries
        .column_by_name("end_time")
        .unwrap()
        .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    let mut ends: Vec<i64> = ends.iter().flatten().collect();
    ends.sort();
    let windows = |m: &culprit_store::Manifest| -> Vec<String> {
        m.files_of(Table::TaskWindows)
            .map(|f| f.path.clone())
            .collect()
    };
    let before = windows(&store.manifest().await.unwrap());
    let expired = store.expire(ends[2] + 1, |_, _| {}).await.unwrap();
    // (Simulated queries all overlap: the cut moves back before them all.)
    assert_eq!(expired.queries > 0, expiry, "{expired:?}");
    // The window files expiry wrote again keep every row's host key (each
    // task was written with its rows).
    let after = store.manifest().await.unwrap();
    let rewritten: Vec<_> = after
        .files_of(Table::TaskWindows)
        .filter(|f| !before.contains(&f.path))
        .cloned()
        .collect();
    assert_eq!(!rewritten.is_empty(), expiry, "{expired:?}");
    for f in rewritten {
        use futures::TryStreamExt;
        let rows: Vec<RecordBatch> = store
            .scan_files(vec![f.clone()], None)
            .try_collect()
            .await
            .unwrap();
        for b in rows {
            let keys = b
                .column_by_name(culprit_store::layout::HOST_KEY)
                .expect("the host key column");
            assert_eq!(keys.null_count(), 0, "{}", f.path);
        }
    }
    let kept = compare(&store, victims).await;
    assert!(kept > 0);

    // Without a complete index (a store written before it): no focused
    // snapshot, the caller reads the whole store.
    let manifest = store.manifest().await.unwrap();
    let mut batch = store.begin();
    batch.expire_files(
        culprit_store::layout::QUERY_SPANS,
        manifest
            .files_named(culprit_store::layout::QUERY_SPANS)
            .map(|f| f.path.clone())
            .collect(),
    );
    batch.commit().await.unwrap();
    let engine = Engine::new(store.clone());
    let focus = focus_on(victims);
    assert!(engine.focused(&focus).await.unwrap().is_none());
    n
}

async fn compare(store: &Store, victims: &[String]) -> usize {
    // The full analyses: whole in memory, and streamed bucket by bucket.
    let full = Engine::new(store.clone()).snapshot(true).await.unwrap();
    let streamed = Engine::with_window_cache(store.clone(), 0)
        .snapshot(false)
        .await
        .unwrap();
    // A server's engine reads through its read cache: one that holds the
    // whole neighbourhood (read twice: decoded, then from the cache), and
    // one too small to hold it (entries dropped while they are read).
    let with_cache = |bytes: usize| {
        let budget = Budget::new(BudgetOptions {
            read_cache: Some(bytes),
            ..Default::default()
        });
        Engine::with_budget(store.clone(), budget)
    };
    let (cached, tiny) = (with_cache(64 << 20), with_cache(256 << 10));
    // A server's engine keeps the slot holders' shares (`shares.rs`).
    let engine = with_cache(64 << 20);
    let variants = common::variants();
    let mut compared = 0;
    for v in victims {
        if full.query(v).is_err() {
            continue; // expired
        }
        let opts = BlameOptions {
            victims: Some(vec![v.clone()]),
            ..Default::default()
        };
        let want = culprits(&full, &opts);
        let focus = Focus::of(&opts).expect("a named victim");
        assert!(focus.holders, "transitive slot blame is the default");
        for engine in [&cached, &cached, &tiny] {
            let through = engine
                .focused(&focus)
                .await
                .unwrap()
                .expect("the store has a complete query index");
            let got = culprits(&through, &opts);
            assert_same(&want, &got, &format!("victim {v}, through the read cache"));
        }
        // One read for every variant (an engine that kept no holder's
        // shares: then the read has what any window and attribution need).
        let focused = Engine::new(store.clone())
            .focused(&focus)
            .await
            .unwrap()
            .expect("the store has a complete query index");
        assert!(
            focused.ds.tasks.len() <= full.ds.tasks.len()
                && window_rows(&focused) <= window_rows(&full),
            "a focused read never holds more than the store"
        );
        // `slots=direct` needs no holder's own blame: a smaller read.
        let direct = engine
            .focused(&Focus {
                holders: false,
                ..focus.clone()
            })
            .await
            .unwrap()
            .expect("the store has a complete query index");
        assert!(
            window_rows(&direct) <= window_rows(&focused),
            "victim {v}: {} window rows for slots=direct, {} for transitive",
            window_rows(&direct),
            window_rows(&focused)
        );
        for opts in &variants {
            let opts = BlameOptions {
                victims: Some(vec![v.clone()]),
                ..opts.clone()
            };
            let want = culprits(&full, &opts);
            // As a server reads for this call: the slot holders' shares
            // that earlier calls computed (earlier victims' holders, and
            // this victim's, asked twice) are not read or swept again.
            let focus = Focus::of(&opts).expect("a named victim");
            for time in ["", ", asked again"] {
                let focused = engine.focused(&focus).await.unwrap().unwrap();
                let got = culprits(&focused, &opts);
                assert_same(&want, &got, &format!("victim {v}, {opts:?}, focused{time}"));
            }
            let got = culprits(&focused, &opts);
            assert_same(&want, &got, &format!("victim {v}, {opts:?}, focused"));
            if Focus::of(&opts).is_some_and(|f| !f.holders) {
                let got = culprits(&direct, &opts);
                assert_same(
                    &want,
                    &got,
                    &format!("victim {v}, {opts:?}, focused direct"),
                );
            }
            let s = culprits(&streamed, &opts);
            assert_eq!(s.len(), want.len());
            compared += want.len();
        }
    }
    assert!(
        engine.holder_shares_kept() > 0,
        "the victims' own stages' shares are kept at least"
    );
    let stats = cached.read_cache().expect("a read cache").stats();
    assert!(stats.hits > 0 && stats.used <= stats.capacity, "{stats:?}");
    let stats = tiny.read_cache().expect("a read cache").stats();
    assert!(stats.used <= stats.capacity, "{stats:?}");
    compared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_focused_analysis_equals_the_whole_stores_on_plausible_data() {
    let w = culprit_sim::fast(&culprit_sim::FastConfig {
        seed: 7,
        tasks: 24_000,
        hosts: 12,
        slots: 4,
        tasks_per_query: 400,
        ..Default::default()
    });
    let queries = w
        .queries
        .column_by_name("query_id")
        .unwrap()
        .as_string::<i32>();
    // Early, middle and late queries.
    let victims: Vec<String> = [0usize, 1, 17, 30, 58, 59]
        .iter()
        .map(|&i| queries.value(i).to_string())
        .collect();
    let compared = check(&w, &victims, true).await;
    assert!(compared > 50, "only {compared} culprit rows compared");

    // The focused read reads a small part of the store.
    let store = store_of(&w).await;
    let engine = Engine::new(store.clone());
    let whole = engine.snapshot(true).await.unwrap();
    let focus = focus_on(&victims[2..3]);
    let one = engine.focused(&focus).await.unwrap().unwrap();
    assert!(
        one.ds.tasks.len() * 3 < whole.ds.tasks.len(),
        "focused {} tasks of {}",
        one.ds.tasks.len(),
        whole.ds.tasks.len()
    );
    // Of the stages and queries tables, only the rows of queries an
    // answer can name (the victim's, those with a task read or a span over
    // the read), not every stage and query of the store.
    assert!(
        one.ds.stages.len() * 3 < whole.ds.stages.len(),
        "focused {} stages of {}",
        one.ds.stages.len(),
        whole.ds.stages.len()
    );
    assert!(
        one.ds.query_scopes.len() * 3 < whole.ds.query_scopes.len(),
        "focused {} queries of {}",
        one.ds.query_scopes.len(),
        whole.ds.query_scopes.len()
    );
    // Of the rows in the victim's time, those on other hosts than the
    // explained tasks' are not kept.
    let direct = Focus {
        holders: false,
        ..focus
    };
    let direct = engine.focused(&direct).await.unwrap().unwrap();
    let (a, b) = (window_rows(&direct), window_rows(&whole));
    assert!(a > 0 && a * 6 < b, "focused {a} window rows of {b}");
}

/// A victim on one host of a cluster whose slot pool spans three: its slot
/// wait is measured against the pool's whole capacity, so the slot rows of
/// hosts where no explained task runs must be read (with only host `a`'s,
/// no slot would be free and all of the wait would go to the holder), while
/// the window rows there are not needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_focused_analysis_reads_the_whole_slot_pool_and_no_other_hosts_windows() {
    // The holder runs on `a` from 0 to 50 s; the victim is ready at 10 s
    // and gets `a`'s only slot at 50 s. `other` runs on `b` all along.
    let tasks = hand_tasks(&[
        ("h1", "holder", "a", 0, 0, 50),
        ("v1", "victim", "a", 10, 50, 60),
        ("o1", "other", "b", 0, 0, 100),
    ]);
    let slots = [
        ("a", "slots", 1.0),
        ("b", "slots", 2.0),
        ("c", "slots", 2.0),
    ];
    let w = hand_made(
        &["victim", "holder", "other"],
        &tasks,
        one_cpu_row,
        None,
        &slots,
        100,
        "holder",
    );
    let store = store_of(&w).await;
    let victims = ["victim".to_string()];
    assert!(compare(&store, &victims).await > 0);
    // Free slots on `b` and `c`: part of the wait is not the holder's.
    let full = Engine::new(store.clone()).snapshot(true).await.unwrap();
    let opts = BlameOptions {
        victims: Some(victims.to_vec()),
        slots: culprit_core::method::SlotBlame::Direct,
        ..Default::default()
    };
    let got = culprits(&full, &opts);
    let holder = got[&("query".to_string(), "holder".to_string())][0];
    assert!(holder > 1.0 && holder < 39.0, "{got:?}");
    // `slots=direct` keeps the victim's host's rows: its own and the
    // holder's, not `other`'s.
    let direct = Engine::new(store.clone())
        .focused(&Focus::of(&opts).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(window_rows(&direct), 2);
    // `other`'s row on `b` (no explained task there) is dropped by its
    // stored host key, before its task is looked up: `o1` is not even
    // marked as having rows. In a store written before the keys (files
    // without the column) it is looked up and marked, as before; both
    // give the whole store's numbers.
    let marked = |s: &Snapshot| {
        let names = s.ds.task_names();
        let t = (0..names.len()).find(|&t| names[t] == "o1").unwrap();
        s.ds.tasks[t].has_windows
    };
    assert!(!marked(&direct));
    let old = store_of(&w).await;
    without_host_keys(&old).await;
    let old_direct = Engine::new(old.clone())
        .focused(&Focus::of(&opts).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(window_rows(&old_direct), 2);
    assert!(marked(&old_direct));
    assert_same(&got, &culprits(&direct, &opts), "with host keys");
    assert_same(&got, &culprits(&old_direct, &opts), "without host keys");
    assert!(compare(&old, &victims).await > 0);
    // Compacted, the older files' rows have no key in the merged files:
    // still looked up, the same numbers.
    let report = old
        .compact(&culprit_store::CompactOptions::default(), |_, _| {})
        .await
        .unwrap();
    assert!(report.merged.contains_key("task_windows"), "{report:?}");
    let merged = Engine::new(old.clone())
        .focused(&Focus::of(&opts).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(marked(&merged));
    assert_same(
        &got,
        &culprits(&merged, &opts),
        "compacted without host keys",
    );

    // Transitive slot blame, asked twice of one engine: the second read
    // has the holders' shares from the first and reads nothing of their
    // neighbourhoods beyond the victim's; the same numbers.
    let opts = BlameOptions {
        slots: culprit_core::method::SlotBlame::Transitive,
        ..opts
    };
    let want = culprits(&full, &opts);
    let budget = Budget::new(BudgetOptions {
        read_cache: Some(64 << 20),
        ..Default::default()
    });
    let engine = Engine::with_budget(store_of(&w).await, budget);
    let focus = Focus::of(&opts).unwrap();
    // The first call keeps the holders' shares (`holder` and `other`:
    // both hold slots of the pool while the victim waits) and the
    // victim's, then explains the victim with the holders' kept.
    let first = engine.focused(&focus).await.unwrap().unwrap();
    assert_same(&want, &culprits(&first, &opts), "first call");
    assert_eq!(first.ds.shares.as_ref().unwrap().known.len(), 2);
    assert_eq!(engine.holder_shares_kept(), 3);
    let again = engine.focused(&focus).await.unwrap().unwrap();
    assert_eq!(again.ds.shares.as_ref().unwrap().known.len(), 2);
    assert_eq!(culprits(&first, &opts), culprits(&again, &opts));
    // An engine without a read cache (one process, one question) keeps
    // none.
    let single = Engine::new(store_of(&w).await);
    let one = single.focused(&focus).await.unwrap().unwrap();
    assert!(one.ds.shares.is_none() && single.holder_shares_kept() == 0);
    assert_same(&want, &culprits(&one, &opts), "without a read cache");
    assert_same(&want, &culprits(&again, &opts), "asked again");
    // Of another window or attribution, the kept shares cannot be used.
    let paper = BlameOptions {
        attribution: culprit_core::method::Attribution::Paper,
        ..opts.clone()
    };
    let err = again.culprits(&paper).unwrap_err();
    assert!(err.to_string().contains("shares"), "{err}");
}

/// A task stored twice with two hosts (the ids of tasks are not checked
/// across batches of other times): the dataset takes the first read, on
/// the victim's host, while its window rows were written with the other
/// host's key. A focused read that dropped rows by their keys would lose
/// them (and the blame `noisy` takes from the victim); it matches every
/// row to its task then, and gives the whole store's numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_stored_again_on_another_host_keeps_its_rows_beside_the_victim() {
    let tasks = hand_tasks(&[
        ("v1", "victim", "b", 0, 0, 60),
        ("n1", "noisy", "a", 0, 0, 60),
    ]);
    let w = hand_made(
        &["victim", "noisy"],
        &tasks,
        one_cpu_row,
        None,
        &[("a", "cpu", 1.0), ("b", "cpu", 1.0)],
        60,
        "noisy",
    );
    let of = |b: &RecordBatch, id: &str| {
        let ids = b
            .column_by_name("task_id")
            .unwrap()
            .as_string::<i32>()
            .clone();
        filter(b, |i| ids.value(i) == id)
    };
    // Batch 1: `n1` on `b`, without rows. Batch 2: everything else, with
    // `n1` on `a` (its rows' key) and every window row.
    let on_b = {
        let n1 = of(&w.tasks, "n1");
        let at = n1.schema().index_of("host").unwrap();
        let mut columns = n1.columns().to_vec();
        columns[at] = std::sync::Arc::new(arrow::array::StringArray::from(vec!["b"]));
        RecordBatch::try_new(n1.schema(), columns).unwrap()
    };
    assert_eq!(w.tasks.num_rows(), 2);
    let store = Store::open("memory://").unwrap();
    commit_tables(&store, &[(Table::Tasks, &on_b)]).await;
    commit_tables(
        &store,
        &[
            (Table::Queries, &w.queries),
            (Table::Stages, &w.stages),
            (Table::Tasks, &w.tasks),
            (Table::TaskWindows, &w.task_windows),
            (Table::HostWindows, &w.host_windows),
        ],
    )
    .await;
    let victims = ["victim".to_string()];
    let (full, opts, want) = whole_answer(&store, &victims).await;
    // Checked against the input: on `b`, `n1`'s CPU row meets the
    // victim's, so `noisy` is blamed.
    let noisy = want[&("query".to_string(), "noisy".to_string())];
    assert!(noisy[0] > 0.0, "{want:?}");
    let focused = Engine::new(store.clone())
        .focused(&Focus::of(&opts).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_same(&want, &culprits(&focused, &opts), "a task on two hosts");
    // The whole store read bucket by bucket, asked on a Tokio worker (this
    // test's thread): `n1`'s row, in the files of `a`'s bucket, is read
    // again with `b`'s, on the sweep threads (read on the caller's thread,
    // it panicked: a runtime cannot block in itself), and so are the
    // buckets the victims' slowdowns read.
    assert!(compare(&store, &victims).await > 0);
    let streamed = Engine::with_window_cache(store.clone(), 0)
        .snapshot(false)
        .await
        .unwrap();
    assert!(streamed.streamed());
    let all = BlameOptions::default();
    let summary = |s: &Snapshot| {
        let mut v: Vec<(String, f64, f64)> = s
            .victims(&all)
            .unwrap()
            .iter()
            .map(|v| {
                let name = s.ds.queries.name(v.query).to_string();
                (name, v.blocked, v.slowdown.unwrap_or(-1.0))
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let (got, whole) = (summary(&streamed), summary(&full));
    assert_eq!(got.len(), 2, "{got:?}");
    for (a, b) in got.iter().zip(&whole) {
        assert!(
            a.0 == b.0 && same(a.1, b.1) && same(a.2, b.2),
            "{got:?} {whole:?}"
        );
    }
}

/// A victim that waited for a slot before it ran: the rows of another
/// task on its host during that wait meet none of the victim's rows but
/// its slot row (of another resource, blame is row against row of one
/// resource, and the victim's other rows lie inside its run), so a focused
/// read does not keep them, and gives the whole store's numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_focused_analysis_keeps_no_row_beside_a_victims_slot_wait() {
    // `busy` holds `a`'s only slot and runs from 0 to 100 s, a CPU row
    // every 10 s; the victim is ready at 0 s, waits for a slot until 30 s
    // (a row of its own for the wait), then runs to 60 s on `a`.
    let tasks = hand_tasks(&[
        ("b1", "busy", "a", 0, 0, 100),
        ("v1", "victim", "a", 0, 30, 60),
    ]);
    let rows = |t: &HandTask| -> Vec<HandRow> {
        if t.1 == "victim" {
            vec![(0, 30, "slots", 30.0, 0.0), (30, 60, "cpu", 10.0, 20.0)]
        } else {
            (0..10)
                .map(|i| (i * 10, i * 10 + 10, "cpu", 1.0, 9.0))
                .collect()
        }
    };
    let w = hand_made(
        &["victim", "busy"],
        &tasks,
        rows,
        None,
        &[("a", "slots", 1.0), ("a", "cpu", 2.0)],
        100,
        "busy",
    );
    let store = store_of(&w).await;
    let victims = ["victim".to_string()];
    assert!(compare(&store, &victims).await > 0);
    let opts = BlameOptions {
        victims: Some(victims.to_vec()),
        slots: culprit_core::method::SlotBlame::Direct,
        ..Default::default()
    };
    let focused = Engine::new(store)
        .focused(&Focus::of(&opts).unwrap())
        .await
        .unwrap()
        .unwrap();
    // The victim's two rows and `busy`'s five that touch its run (20-30
    // to 60-70 s, ends included); not those from 0 to 20 s, beside the
    // wait alone.
    assert_eq!(window_rows(&focused), 2 + 5);
}

/// Outside the victims' time a focused read sees neither the window rows
/// of a task that ran across it with a gap in its rows (interchange: rows
/// may leave gaps), nor the tasks of a query that ran before it: the task
/// is still known to have windows (its totals are not spread over its run
/// instead, which would make it slow the victim where its rows say it
/// did nothing; so too a task whose only row is of its slot wait, before
/// the read), and the query's span (the naive overlap) is still from its
/// first launch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_focused_analysis_knows_what_lies_outside_the_victims_time() {
    let w = outside_workload(1.0);
    let store = store_of(&w).await;
    let victims = ["victim".to_string()];
    // The whole store's answer, checked against the input: `gappy` has no
    // row while the victim runs, so its CPU slows the victim by nothing;
    // the naive overlap of `early` is all of the victim's span, 20 s.
    let (_, opts, want) = whole_answer(&store, &victims).await;
    let early = want[&("query".to_string(), "early".to_string())];
    assert!(early[0] > 0.0, "{want:?}");
    assert_eq!(early[2], 20.0, "naive overlap of early: {want:?}");
    let split = want[&("query".to_string(), "split".to_string())];
    assert_eq!(split[2], 20.0, "naive overlap of split: {want:?}");
    // `gappy`'s totals stand for nothing (it has rows): its blame (a slot
    // of the pool while the victim waited) is the same without them.
    let without = store_of(&outside_workload(0.0)).await;
    let without = Engine::new(without).snapshot(true).await.unwrap();
    let gappy = ("query".to_string(), "gappy".to_string());
    assert_eq!(want[&gappy], culprits(&without, &opts)[&gappy], "{want:?}");
    // Each focused read gives the same, and so on a store whose window
    // rows came before their tasks (files of no host bucket), and on a
    // store whose query index was written before it recorded the first
    // launch.
    assert!(compare(&store, &victims).await > 0);
    let unbucketed = Store::open("memory://").unwrap();
    commit_tables(&unbucketed, &[(Table::TaskWindows, &w.task_windows)]).await;
    commit_tables(
        &unbucketed,
        &[
            (Table::Queries, &w.queries),
            (Table::Stages, &w.stages),
            (Table::Tasks, &w.tasks),
            (Table::HostWindows, &w.host_windows),
        ],
    )
    .await;
    let manifest = unbucketed.manifest().await.unwrap();
    assert!(manifest
        .files_of(Table::TaskWindows)
        .all(|f| f.bucket.is_none()));
    assert!(compare(&unbucketed, &victims).await > 0);
    without_first_launch(&store).await;
    let manifest = store.manifest().await.unwrap();
    let spans = store.query_spans(&manifest).await.unwrap();
    let spans = spans.expect("the index is whole");
    assert!(
        spans.values().all(|s| s.first_launch.is_none()),
        "{spans:?}"
    );
    assert!(compare(&store, &victims).await > 0);
    // `culprit compact` rebuilds such an index from the stored tasks: each
    // query's first launch is back, as the input gives it.
    let compact = || async {
        store
            .compact(&culprit_store::CompactOptions::default(), |_, _| {})
            .await
            .unwrap()
    };
    let report = compact().await;
    assert!(report.index_rebuilt, "{report:?}");
    assert_eq!(report.merged["culprit.query_spans"], 3, "{report:?}");
    let manifest = store.manifest().await.unwrap();
    let rebuilt = store.query_spans(&manifest).await.unwrap().unwrap();
    let (ids, launch) = (
        w.tasks
            .column_by_name("query_id")
            .unwrap()
            .as_string::<i32>(),
        w.tasks
            .column_by_name("launch_time")
            .unwrap()
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>(),
    );
    let mut first: BTreeMap<&str, i64> = BTreeMap::new();
    for i in 0..ids.len() {
        let e = first.entry(ids.value(i)).or_insert(i64::MAX);
        *e = (*e).min(launch.value(i));
    }
    assert_eq!(rebuilt.len(), first.len());
    for (q, l) in first {
        assert_eq!(rebuilt[q].first_launch, Some(l), "{q}");
        assert_eq!(
            (rebuilt[q].first, rebuilt[q].last, rebuilt[q].tasks),
            (spans[q].first, spans[q].last, spans[q].tasks),
            "{q}: the rest of the index as it was"
        );
    }
    assert!(compare(&store, &victims).await > 0);
    // Rebuilt once: the next compaction has nothing of the index to do.
    let again = compact().await;
    assert!(!again.index_rebuilt, "{again:?}");
    assert!(
        !again.merged.contains_key("culprit.query_spans"),
        "{again:?}"
    );
}

/// The workload of `a_focused_analysis_knows_what_lies_outside_the_victims_time`,
/// its tasks' CPU totals multiplied by `totals`.
fn outside_workload(totals: f64) -> culprit_sim::Workload {
    // The victim runs on `a` from 20 to 40 s, and on `c` from 20 to 30 s
    // after waiting from 15 s for `c`'s only slot, which `holder` has
    // from 10 to 20 s: its time is 15 to 40 s, the read of `slots=direct`
    // and of a server's later calls (the holders' shares kept); a first
    // transitive read widens to its slot holders' queries (`holder`,
    // `gappy`, `waiter`: 0 to 60 s). `gappy` runs on `a`
    // from 0 to 60 s, its rows at 0-5 and 55-60 s only, with totals of a
    // busy task. `early` runs on `b` from 0 to 5 s and on `a` from 30 to
    // 50 s: its span (0 to 50 s) covers all of the victim's on `a`.
    // `waiter` is ready at 0 s and runs on `c` from 12 to 45 s, its only
    // row that of its slot wait, 0-8 s. `late` is ready at 25 s beside the
    // victim on `a` but runs from 45 to 55 s, its rows there: after the
    // victim's time, so a read of that time does not look for them (its
    // totals would stand for rows from its launch, after the victim's),
    // and the answer is the same. `split` runs on `b` from 0 to 8 s and
    // from 50 to 58 s: its span covers the victim's, no task of it runs in
    // the victim's time (only its naive overlap names it).
    let tasks = hand_tasks(&[
        ("v1", "victim", "a", 20, 20, 40),
        ("v2", "victim", "c", 15, 20, 30),
        ("h1", "holder", "c", 10, 10, 20),
        ("g1", "gappy", "a", 0, 0, 60),
        ("e1", "early", "b", 0, 0, 5),
        ("e2", "early", "a", 30, 30, 50),
        ("w1", "waiter", "c", 0, 12, 45),
        ("l1", "late", "a", 25, 45, 55),
        ("s1", "split", "b", 0, 0, 8),
        ("s2", "split", "b", 50, 50, 58),
    ]);
    let rows = |t: &HandTask| -> Vec<HandRow> {
        let spans: &[(i64, i64, &'static str)] = match t.0.as_str() {
            "g1" => &[(0, 5, "cpu"), (55, 60, "cpu")],
            "w1" => &[(0, 8, "slots")],
            _ => &[(t.4, t.5, "cpu")],
        };
        spans
            .iter()
            .map(|&(a, b, resource)| (a, b, resource, 2.0, (b - a) as f64))
            .collect()
    };
    let mut capacity = Vec::new();
    for (host, slots) in [("a", 4.0), ("b", 4.0), ("c", 1.0)] {
        capacity.push((host, "slots", slots));
        capacity.push((host, "cpu", 2.0));
    }
    hand_made(
        &[
            "victim", "gappy", "early", "holder", "waiter", "late", "split",
        ],
        &tasks,
        rows,
        Some((40.0 * totals, 10.0 * totals)),
        &capacity,
        100,
        "early",
    )
}

/// Rewrites the query index of `store` as a culprit wrote it before it
/// recorded `first_launch`: its files, at their paths, without that column.
async fn without_first_launch(store: &Store) {
    let manifest = store.manifest().await.unwrap();
    let files = manifest.files_named(culprit_store::layout::QUERY_SPANS);
    without_column(store, files.cloned().collect(), "first_launch").await;
}

/// Rewrites the window rows of `store` as a culprit wrote them before it
/// stored each row's host key: their files, at their paths, without that
/// column.
async fn without_host_keys(store: &Store) {
    let manifest = store.manifest().await.unwrap();
    let files = manifest.files_of(Table::TaskWindows);
    without_column(
        store,
        files.cloned().collect(),
        culprit_store::layout::HOST_KEY,
    )
    .await;
}

/// Rewrites `files` of `store` at their paths without `column` (each has
/// it), as an older culprit wrote them.
async fn without_column(store: &Store, files: Vec<culprit_store::DataFile>, column: &str) {
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    assert!(!files.is_empty());
    for f in files {
        let rows: Vec<RecordBatch> = store
            .scan_files(vec![f.clone()], None)
            .try_collect()
            .await
            .unwrap();
        let gone = rows[0].schema().index_of(column).unwrap();
        let old: Vec<usize> = (0..rows[0].num_columns()).filter(|&c| c != gone).collect();
        let schema = std::sync::Arc::new(rows[0].schema().project(&old).unwrap());
        let mut bytes = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
        for b in &rows {
            writer.write(&b.project(&old).unwrap()).unwrap();
        }
        writer.close().unwrap();
        store
            .object_store()
            .put(&store.path(&f.path), bytes.into())
            .await
            .unwrap();
    }
}

/// A server's engine (with a read cache) gives the same statement the
/// same numbers to the last digit, whether the slot holders' shares were
/// kept before it or not: a call with holders to sweep computes their
/// shares, then explains its victims as the next call will. (On this data
/// the two reads happen to give the same bits anyway; the end-to-end test
/// `copy_to_stdout_for_every_role`, which compares COPY with SELECT on an
/// ingested store, fails without the second read.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_engine_gives_the_same_statement_the_same_numbers() {
    // `culprit generate`'s workload.
    let w = culprit_sim::simulate(&culprit_sim::SimConfig {
        seed: 42,
        ..Default::default()
    });
    // In one batch, as `culprit ingest` of its files writes it.
    let store = Store::open("memory://").unwrap();
    let mut batch = store.begin();
    for table in [
        Table::Queries,
        Table::Stages,
        Table::Tasks,
        Table::TaskWindows,
        Table::HostWindows,
    ] {
        let rows = w.table(table).unwrap().clone();
        batch.write(table, &[rows]).await.unwrap();
    }
    batch.commit().await.unwrap();
    let budget = Budget::new(BudgetOptions {
        read_cache: Some(64 << 20),
        ..Default::default()
    });
    let full = Engine::new(store.clone()).snapshot(true).await.unwrap();
    let engine = Engine::with_budget(store, budget);
    let queries = w
        .queries
        .column_by_name("query_id")
        .unwrap()
        .as_string::<i32>();
    let mut kept = 0;
    for i in 0..queries.len() {
        let opts = BlameOptions {
            victims: Some(vec![queries.value(i).to_string()]),
            ..Default::default()
        };
        let focus = Focus::of(&opts).unwrap();
        let first = engine.focused(&focus).await.unwrap().unwrap();
        let again = engine.focused(&focus).await.unwrap().unwrap();
        let known = |s: &Snapshot| s.ds.shares.as_ref().map_or(0, |s| s.known.len());
        assert_eq!(known(&first), known(&again));
        kept += known(&again);
        // Bit for bit, and the whole store's numbers.
        let got = culprits(&first, &opts);
        assert_eq!(got, culprits(&again, &opts), "{}", queries.value(i));
        assert_same(&culprits(&full, &opts), &got, queries.value(i));
    }
    assert!(kept > 0, "some holders' shares were kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_focused_analysis_equals_the_whole_stores_on_simulated_contention() {
    let w = culprit_sim::simulate(&culprit_sim::SimConfig {
        seed: 3,
        queries: 10,
        hosts: 4,
        ..Default::default()
    });
    let queries = w
        .queries
        .column_by_name("query_id")
        .unwrap()
        .as_string::<i32>();
    let victims: Vec<String> = (0..queries.len())
        .map(|i| queries.value(i).to_string())
        .collect();
    assert!(check(&w, &victims, false).await > 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_victim_is_refused_without_reading_tasks() {
    let w = culprit_sim::simulate(&culprit_sim::SimConfig {
        seed: 3,
        queries: 4,
        hosts: 2,
        ..Default::default()
    });
    let store = store_of(&w).await;
    let engine = Engine::new(store);
    let s = engine
        .focused(&focus_on(&["no such query".to_string()]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.ds.tasks.len(), 0, "no task was read");
    let err = s
        .culprits(&BlameOptions {
            victims: Some(vec!["no such query".into()]),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("no such query"), "{err}");
}

/// Level 4 of an analysis by names: (victim stage, resource, detail, host,
/// culprit, via) to seconds.
type Named = BTreeMap<(String, String, String, String, String, String), f64>;

fn named(s: &Snapshot, opts: &BlameOptions, into: &mut Named) {
    use culprit_core::method::Culprit;
    let ds = &s.ds;
    let level4 = s.blame(opts).unwrap().level4;
    let details = level4.details(ds);
    for e in &level4 {
        let culprit = match e.culprit() {
            Culprit::Stage(c) => ds.stage_name(c).to_string(),
            other => format!("{other:?}"),
        };
        let key = (
            ds.stage_name(e.stage).to_string(),
            e.resource.name().to_string(),
            details.name(e.detail).to_string(),
            e.host()
                .map_or("*".into(), |h| ds.hosts.name(h).to_string()),
            culprit,
            e.via()
                .map_or(String::new(), |v| ds.stage_name(v).to_string()),
        );
        *into.entry(key).or_default() += e.seconds;
    }
}

/// 12,000 tasks in short queries (40 tasks) arriving often on 12 hosts:
/// several run at once, so a group of queries' time holds other queries'
/// tasks too.
fn short_queries() -> culprit_sim::Workload {
    culprit_sim::fast(&culprit_sim::FastConfig {
        seed: 11,
        tasks: 12_000,
        hosts: 12,
        slots: 4,
        tasks_per_query: 40,
        ..Default::default()
    })
}

/// An analysis over every victim of a large store, explained group by
/// group of victims (each group's dataset read as for named victims),
/// gives every victim exactly what the analysis of the whole store gives:
/// the same level-4 rows and seconds, each victim in one group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_victim_by_groups_equals_the_whole_store() {
    let w = short_queries();
    let store = store_of(&w).await;
    let whole = Engine::new(store.clone()).snapshot(true).await.unwrap();
    // A small dataset cache: this store counts as large.
    let engine = Engine::with_window_cache(store.clone(), 0);
    assert!(
        Engine::new(store.clone())
            .victim_groups((i64::MIN, i64::MAX), 1_500)
            .await
            .unwrap()
            .is_none(),
        "a store whose window rows fit the cache is read whole"
    );
    // The middle third of the workload's time, as a window.
    let (mut t0, mut t1) = (i64::MAX, i64::MIN);
    for i in 0..whole.ds.tasks.len() {
        t0 = t0.min(whole.ds.tasks[i].launch);
        t1 = t1.max(whole.ds.tasks[i].finish);
    }
    let third = (t1 - t0) / 3;
    let windows = [(None, None), (Some(t0 + third), Some(t1 - third))];
    let variants = common::variants();
    let mut compared = 0;
    // Then with the holders' shares stored (`culprit shares`): a group's
    // analysis of another window or attribution than theirs must not take
    // them (it did, and failed).
    for stored in [false, true] {
        if stored {
            // By the engine that reads the groups: what it found of the
            // stored objects (none, in the first pass) cannot hide them.
            let r = engine.store_shares(&mut |_, _| {}).await.unwrap();
            assert_eq!(r.outcome, culprit_engine::SharesOutcome::Computed);
            assert!(r.stages > 0, "{r:?}");
        }
        for (from, to) in windows {
            let window = (from.unwrap_or(i64::MIN), to.unwrap_or(i64::MAX));
            let groups = engine
                .victim_groups(window, 1_500)
                .await
                .unwrap()
                .expect("a large store with a complete index is explained by groups");
            assert!(groups.groups.len() >= 3, "{} groups", groups.groups.len());
            let mut seen = std::collections::BTreeSet::new();
            for g in &groups.groups {
                for q in g {
                    assert!(seen.insert(q.clone()), "{q} is in two groups");
                }
            }
            for opts in &variants {
                let opts = BlameOptions {
                    from,
                    to,
                    ..opts.clone()
                };
                let mut want = Named::new();
                named(&whole, &opts, &mut want);
                let mut got = Named::new();
                let mut victims = 0;
                let mut outside = 0;
                for i in 0..groups.groups.len() {
                    let s = engine.group(&groups, i).await.unwrap();
                    let within = BlameOptions {
                        within: Some(groups.groups[i].clone()),
                        ..opts.clone()
                    };
                    victims += s.blame(&within).unwrap().victims.queries.len();
                    // The group's dataset also holds queries around it, which
                    // are not its victims.
                    let everyone = s.blame(&opts).unwrap().victims.queries.len();
                    outside += everyone - groups.groups[i].len().min(everyone);
                    named(&s, &within, &mut got);
                }
                let all = whole.blame(&opts).unwrap().victims.queries.len();
                assert_eq!(victims, all, "{opts:?}: victims explained by groups");
                assert!(outside > 0, "no group's dataset held other queries");
                assert_eq!(
                    want.keys().collect::<Vec<_>>(),
                    got.keys().collect::<Vec<_>>(),
                    "{opts:?}"
                );
                for (k, a) in &want {
                    assert!(
                        same(*a, got[k]),
                        "{opts:?} {k:?}: whole {a}, by groups {}",
                        got[k]
                    );
                }
                compared += want.len();
            }
        }
    }
    assert!(compared > 2000, "only {compared} level-4 rows compared");
}

/// A read for named victims is admitted in the memory budget like an
/// analysis of one victim (a server's reads for many victims at once
/// cannot take more than the budget), and what it read is counted until
/// its snapshot is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_for_named_victims_is_counted_in_the_memory_budget() {
    let w = culprit_sim::fast(&culprit_sim::FastConfig {
        seed: 11,
        tasks: 6_000,
        hosts: 6,
        slots: 4,
        tasks_per_query: 300,
        ..Default::default()
    });
    let victim = w
        .queries
        .column_by_name("query_id")
        .unwrap()
        .as_string::<i32>()
        .value(5)
        .to_string();
    let store = store_of(&w).await;
    let with_limit = |limit: usize| {
        Engine::with_budget(
            store.clone(),
            Budget::new(BudgetOptions {
                limit: Some(limit),
                read_cache: Some(0),
                ..Default::default()
            }),
        )
    };
    let engine = with_limit(1 << 30);
    let before = engine.budget().used();
    let s = engine
        .focused(&focus_on(std::slice::from_ref(&victim)))
        .await
        .unwrap()
        .unwrap();
    // Counted: its tasks, window rows and host rows at the dataset's bytes
    // per row, and the working memory of an analysis of one victim per
    // window row (the budget's constants), from what the dataset holds.
    use culprit_engine::budget::{
        CACHE_BYTES_PER_HOST_ROW, CACHE_BYTES_PER_TASK, CACHE_BYTES_PER_WINDOW_ROW,
        LIGHT_BYTES_PER_WINDOW_ROW,
    };
    let hosts: usize = s.ds.host_rows.iter().map(|h| h.len()).sum();
    let want = s.ds.tasks.len() * CACHE_BYTES_PER_TASK
        + window_rows(&s) * (CACHE_BYTES_PER_WINDOW_ROW + LIGHT_BYTES_PER_WINDOW_ROW)
        + hosts * CACHE_BYTES_PER_HOST_ROW;
    assert!(s.ds.tasks.len() >= 300 && window_rows(&s) > 0);
    assert_eq!(engine.budget().used() - before, want);
    // Held by every clone, and by whoever keeps the dataset past them (a
    // result still being sent).
    let again = s.clone();
    let kept = s.admitted().expect("a read for named victims");
    drop(s);
    assert_eq!(engine.budget().used() - before, want, "a clone holds it");
    drop(again);
    assert_eq!(
        engine.budget().used() - before,
        want,
        "kept past the snapshot"
    );
    drop(kept);
    assert_eq!(engine.budget().used(), before, "given back at the end");
    // A budget smaller than the read's estimate refuses it, clearly.
    let small = with_limit(64 << 10);
    let err = small
        .focused(&focus_on(std::slice::from_ref(&victim)))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("the read for {victim}")) && msg.contains("--memory-budget-mb"),
        "{msg}"
    );
    assert_eq!(small.budget().used(), 0);
}

/// A read for a victim whose slot holder ran long before it is admitted
/// with an estimate of the victim's time, then of the holder's time too,
/// before it reads it: under a budget that holds the first and not the
/// second, it fails with 53200 instead of reading past the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_for_a_victim_is_admitted_for_its_holders_time_too() {
    // The holder has 400 tasks on `b` over 1,000 s and holds `a`'s only
    // slot from 990 s, while the victim waits for it from 995 s.
    let mut tasks: Vec<HandTask> = (0..400)
        .map(|i| (format!("h{i}"), "holder", "b", i * 2, i * 2, i * 2 + 200))
        .collect();
    tasks.extend(hand_tasks(&[
        ("ha", "holder", "a", 990, 990, 1000),
        ("v1", "victim", "a", 995, 1000, 1010),
    ]));
    let slots = [("a", "slots", 1.0), ("b", "slots", 1000.0)];
    let w = hand_made(
        &["victim", "holder"],
        &tasks,
        one_cpu_row,
        None,
        &slots,
        2000,
        "holder",
    );
    let store = store_of(&w).await;
    let focus = focus_on(&["victim".to_string()]);
    let engine = |limit: Option<usize>| {
        let budget = Budget::new(BudgetOptions {
            limit,
            read_cache: Some(0),
            ..Default::default()
        });
        (Engine::with_budget(store.clone(), budget.clone()), budget)
    };
    // Unlimited: what the read of the holder's time holds at its peak.
    let (unlimited, budget) = engine(None);
    let read = unlimited.focused(&focus).await.unwrap().unwrap();
    assert!(read.ds.tasks.len() > 400, "the holder's time is read");
    drop(read);
    let peak = budget.peak();
    // A budget of half of it: the victim's time fits (one task of the
    // holder's 401 overlaps it), the holder's does not.
    let (limited, budget) = engine(Some(peak / 2));
    let Err(err) = limited.focused(&focus).await else {
        panic!("read past the budget: {} of {}", budget.peak(), peak / 2);
    };
    assert!(
        matches!(err, culprit_engine::Error::OutOfMemory(_)),
        "{err}"
    );
    assert!(err.to_string().contains("the read for"), "{err}");
    assert!(
        budget.peak() <= peak / 2,
        "{} of {}",
        budget.peak(),
        peak / 2
    );
    assert_eq!(budget.used(), 0, "all given back");
}

/// Slot holders' shares stored with the data (`Engine::store_shares`,
/// `culprit shares`): a one-victim analysis takes its holders' shares from
/// the store instead of reading and sweeping their hosts, and gives the
/// numbers of the analysis over the whole store (which computes every
/// stage's shares itself); they hold while the telemetry does (through a
/// compaction), are not used once it changes (an expiry), and a damaged
/// object is computed around, not failed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_holder_shares_give_the_whole_stores_numbers_while_the_telemetry_holds() {
    // `culprit generate`'s workload: slot waits on holders.
    let w = culprit_sim::simulate(&culprit_sim::SimConfig {
        seed: 42,
        ..Default::default()
    });
    let queries = w
        .queries
        .column_by_name("query_id")
        .unwrap()
        .as_string::<i32>();
    let victims: Vec<String> = (0..queries.len())
        .map(|i| queries.value(i).to_string())
        .collect();
    let store = store_of(&w).await;
    let known = |s: &Snapshot| s.ds.shares.as_ref().map_or(0, |s| s.known.len());
    // Without stored shares, one process reads the holders' hosts.
    let plain: Vec<Snapshot> = {
        let engine = Engine::new(store.clone());
        let mut out = Vec::new();
        for v in &victims {
            let s = engine
                .focused(&focus_on(std::slice::from_ref(v)))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(known(&s), 0, "no shares stored yet");
            out.push(s);
        }
        out
    };

    let mut seen = Vec::new();
    let stored = Engine::new(store.clone())
        .store_shares(&mut |done, total| seen.push((done, total)))
        .await
        .unwrap();
    // Every stage of the input, each with its rows.
    assert_eq!(stored.outcome, culprit_engine::SharesOutcome::Computed);
    let object = stored.path.clone().unwrap();
    assert_eq!(stored.stages, w.stages.num_rows(), "{stored:?}");
    assert!(
        stored.rows >= stored.stages && stored.bytes > 0,
        "{stored:?}"
    );
    assert_eq!(seen.first().map(|s| s.0), Some(0));
    assert_eq!(seen.last().map(|s| s.0 == s.1), Some(true), "{seen:?}");
    let manifest = store.manifest().await.unwrap();
    assert_eq!(stored.telemetry, manifest.telemetry_id());

    // The numbers of the whole store's analysis, with fewer rows read.
    let full = Engine::new(store.clone()).snapshot(true).await.unwrap();
    let with = analyse(store.clone(), &victims).await;
    let (mut fewer, mut holders) = (0, 0);
    for ((v, (n, rows, got)), plain) in victims.iter().zip(&with).zip(&plain) {
        let opts = BlameOptions {
            victims: Some(vec![v.clone()]),
            ..Default::default()
        };
        holders += n;
        assert_same(
            &culprits(&full, &opts),
            got,
            &format!("victim {v}, stored shares"),
        );
        assert!(*rows <= window_rows(plain), "victim {v}");
        fewer += usize::from(*rows < window_rows(plain));
    }
    assert!(holders > 0, "holders' shares came from the store");
    assert!(fewer > 0, "the holders' neighbourhoods are not read");
    // Every process gives the same bits (the same stored numbers).
    assert_eq!(with, analyse(store.clone(), &victims).await);
    // A server's engine: the same, in one read.
    let server = Engine::with_budget(
        store.clone(),
        Budget::new(BudgetOptions {
            read_cache: Some(64 << 20),
            ..Default::default()
        }),
    );
    for (i, (v, (_, _, want))) in victims.iter().zip(&with).enumerate() {
        let (opts, s) = focused_default(&server, v).await;
        assert_eq!(&culprits(&s, &opts), want, "victim {v}, a server's engine");
        let known = s.ds.shares.as_ref().map_or(0, |s| s.known.len());
        assert_eq!(
            known, with[i].0,
            "victim {v}: the same shares from the store"
        );
    }

    // Compacted: the same rows, the shares still hold.
    let merged = store
        .compact(&culprit_store::CompactOptions::default(), |_, _| {})
        .await
        .unwrap();
    assert!(merged.written > 0, "{merged:?}");
    let compacted = store.manifest().await.unwrap();
    assert!(compacted.version > manifest.version);
    assert_eq!(compacted.telemetry_id(), stored.telemetry);
    // (Its rows in another order: the same numbers to the last digits.)
    for (v, (after, before)) in victims
        .iter()
        .zip(analyse(store.clone(), &victims).await.iter().zip(&with))
    {
        assert_eq!(
            after.0, before.0,
            "victim {v}: the stored shares still used"
        );
        assert_same(&before.2, &after.2, &format!("victim {v}, compacted"));
    }

    // A damaged object (its footer cut off): computed as without it, the
    // whole store's numbers; `store_shares` replaces it under a new name.
    let path = store.path(&object);
    use object_store::ObjectStoreExt;
    let object_store = store.object_store();
    let good = object_store
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let bad = good.slice(..good.len() - 64);
    object_store.put(&path, bad.into()).await.unwrap();
    computed_without_them(&store, &full, &victims, "a damaged object").await;
    let replaced = Engine::new(store.clone())
        .store_shares(&mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(replaced.outcome, culprit_engine::SharesOutcome::Computed);
    let object = replaced.path.clone().unwrap();
    assert_ne!(Some(&object), stored.path.as_ref());
    assert_eq!(
        store
            .derived_size(stored.path.as_ref().unwrap())
            .await
            .unwrap(),
        None
    );
    let after = analyse(store.clone(), &victims).await;
    assert_eq!(
        after.iter().map(|a| a.0).collect::<Vec<_>>(),
        with.iter().map(|a| a.0).collect::<Vec<_>>(),
        "the new object's shares are used"
    );

    // Expired: other rows, the stored shares are not looked at any more.
    let ends = w
        .queries
        .column_by_name("end_time")
        .unwrap()
        .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    let mut ends: Vec<i64> = ends.iter().flatten().collect();
    ends.sort();
    // (Simulated queries all overlap: only host rows go.)
    let expired = store.expire(ends[0] + 1, |_, _| {}).await.unwrap();
    assert!(expired.version.is_some(), "{expired:?}");
    assert_ne!(
        store.manifest().await.unwrap().telemetry_id(),
        stored.telemetry
    );
    let full = Engine::new(store.clone()).snapshot(true).await.unwrap();
    let victims: Vec<String> = victims
        .into_iter()
        .filter(|v| full.query(v).is_ok())
        .collect();
    assert!(victims.len() >= 3, "{victims:?}");
    computed_without_them(&store, &full, &victims, "expired: shares of other rows").await;
    // Stored again: the older object is removed; asked once more, nothing
    // is computed or written over.
    let again = Engine::new(store.clone())
        .store_shares(&mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(again.outcome, culprit_engine::SharesOutcome::Computed);
    assert_eq!(again.removed, 1, "{again:?}");
    let once_more = Engine::new(store.clone())
        .store_shares(&mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(once_more.outcome, culprit_engine::SharesOutcome::Stored);
    assert_eq!(once_more.path, again.path);
    assert_eq!(
        store.derived_size(&object).await.unwrap(),
        None,
        "the older shares are gone"
    );
}

/// The stored shares do not depend on the groups of queries they are
/// computed in (`culprit shares` reads the store a group at a time, and
/// its groups' size is a tuning): in groups of 500 tasks (13 queries),
/// every stage has the culprits it has when the whole store is one group,
/// each with the same share to 1e-9 relative (the same terms summed in
/// another order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_shares_are_the_same_in_groups_of_any_size() {
    let w = short_queries();
    let store = store_of(&w).await;
    let mut computed = Vec::new();
    for group_tasks in [u64::MAX, 500] {
        let mut seen = Vec::new();
        let r = Engine::new(store.clone())
            .store_shares_in_groups(group_tasks, &mut |done, total| seen.push((done, total)))
            .await
            .unwrap();
        assert_eq!(r.outcome, culprit_engine::SharesOutcome::Computed, "{r:?}");
        assert_eq!(r.stages, w.stages.num_rows(), "{r:?}");
        let path = r.path.clone().unwrap();
        computed.push((
            seen.last().map_or(0, |s| s.1),
            stored_rows(&store, &path).await,
        ));
        // Removed, so that the next computes them again.
        assert_eq!(store.remove_derived(&[path]).await.unwrap(), 1);
    }
    let ((one, whole), (many, grouped)) = (&computed[0], &computed[1]);
    // Two steps per group: its shares, then its answers.
    assert_eq!(*one, 2, "the whole store in one group");
    assert!(*many >= 20, "{} groups of 500 tasks", many / 2);
    // Stages slowed by other queries' stages: the rows a group's
    // neighbours give, which a group could get wrong.
    let across = whole.keys().filter(|k| k.4 == 1 && k.5 != k.0).count();
    assert!(across > 100, "{across} culprits of other queries' stages");
    assert_eq!(
        whole.keys().collect::<Vec<_>>(),
        grouped.keys().collect::<Vec<_>>(),
        "the same stages and culprits"
    );
    for (key, &x) in whole {
        let y = grouped[key];
        assert!(
            same(x, y),
            "{key:?}: {x} in one group, {y} in groups of 500 tasks"
        );
    }
}

/// Without a memory limit (`culprit shares`; a server with
/// `--memory-budget-mb 0`) the shares are computed in groups of about
/// 131,072 tasks; an engine with a limit (a server's, by default) keeps the
/// 65,536 of an analysis over every victim, which a smaller budget still
/// admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_shares_take_larger_groups_without_a_memory_budget() {
    let w = culprit_sim::fast(&culprit_sim::FastConfig {
        seed: 5,
        tasks: 140_000,
        hosts: 40,
        ..Default::default()
    });
    let store = store_of(&w).await;
    let mut groups = Vec::new();
    for budget in [
        Budget::default(),
        Budget::new(BudgetOptions {
            limit: Some(64 << 30),
            ..Default::default()
        }),
    ] {
        let mut seen = Vec::new();
        let r = Engine::with_budget(store.clone(), budget)
            .store_shares(&mut |done, total| seen.push((done, total)))
            .await
            .unwrap();
        assert_eq!(r.outcome, culprit_engine::SharesOutcome::Computed, "{r:?}");
        assert_eq!(store.remove_derived(&[r.path.unwrap()]).await.unwrap(), 1);
        // Two steps per group: its shares, then its answers.
        groups.push(seen.last().map_or(0, |s| s.1) / 2);
    }
    assert_eq!(groups, [2, 3], "groups without a budget, then with one");
}

/// The rows of a stored shares object, by (query, stage, first, last,
/// culprit, culprit query, culprit stage).
async fn stored_rows(store: &Store, path: &str) -> BTreeMap<SharesKey, f64> {
    use object_store::ObjectStoreExt;
    let bytes = store
        .object_store()
        .get(&store.path(path))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut rows = BTreeMap::new();
    for b in parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024).unwrap() {
        let b = b.unwrap();
        let text = |c: &str, i: usize| {
            let a = b.column_by_name(c).unwrap().as_string::<i32>();
            a.is_valid(i).then(|| a.value(i).to_string())
        };
        let number = |c: &str, i: usize| {
            b.column_by_name(c)
                .unwrap()
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(i)
        };
        let culprit = b
            .column_by_name("culprit")
            .unwrap()
            .as_primitive::<arrow::datatypes::UInt8Type>();
        let share = b
            .column_by_name("share")
            .unwrap()
            .as_primitive::<arrow::datatypes::Float64Type>();
        let answer = b.column_by_name("answer").unwrap().as_boolean();
        for i in 0..b.num_rows() {
            if answer.value(i) {
                continue; // a stored answer's row
            }
            let key = (
                text("query", i),
                text("stage", i),
                number("first", i),
                number("last", i),
                culprit.value(i),
                text("culprit_query", i),
                text("culprit_stage", i),
            );
            assert!(rows.insert(key, share.value(i)).is_none(), "a row twice");
        }
    }
    rows
}

type SharesKey = (
    Option<String>,
    Option<String>,
    i64,
    i64,
    u8,
    Option<String>,
    Option<String>,
);

/// Every victim's analysis through a one-process engine takes no shares
/// from the store (`why` not) and gives the numbers of `full`.
async fn computed_without_them(store: &Store, full: &Snapshot, victims: &[String], why: &str) {
    for (v, (n, _, got)) in victims.iter().zip(analyse(store.clone(), victims).await) {
        let opts = BlameOptions {
            victims: Some(vec![v.clone()]),
            ..Default::default()
        };
        assert_eq!(n, 0, "victim {v}: no shares taken from the store ({why})");
        assert_same(&culprits(full, &opts), &got, &format!("victim {v}, {why}"));
    }
}

/// Per victim of the default analysis through a one-process engine: the
/// holders' shares taken from the store, the window rows read, the culprits.
async fn analyse(store: Store, victims: &[String]) -> Vec<(usize, usize, Culprits)> {
    let engine = Engine::new(store);
    let mut out = Vec::new();
    for v in victims {
        let (opts, s) = focused_default(&engine, v).await;
        let known = s.ds.shares.as_ref().map_or(0, |s| s.known.len());
        out.push((known, window_rows(&s), culprits(&s, &opts)));
    }
    out
}

/// The default analysis of victim `v` and the focused snapshot `engine`
/// reads for it.
async fn focused_default(engine: &Engine, v: &str) -> (BlameOptions, Snapshot) {
    let opts = BlameOptions {
        victims: Some(vec![v.to_string()]),
        ..Default::default()
    };
    let s = engine
        .focused(&Focus::of(&opts).unwrap())
        .await
        .unwrap()
        .unwrap();
    (opts, s)
}

/// A server stores the shares in the background once the telemetry is
/// quiet (`Engine::store_shares_when_quiet`), and again once new rows are
/// quiet too, the older object removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stores_the_shares_once_the_telemetry_is_quiet() {
    let w = culprit_sim::simulate(&culprit_sim::SimConfig {
        seed: 3,
        queries: 6,
        hosts: 3,
        ..Default::default()
    });
    let store = store_of(&w).await;
    let engine = std::sync::Arc::new(Engine::new(store.clone()));
    let background = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .store_shares_when_quiet(std::time::Duration::from_millis(50))
                .await
        }
    });
    // The objects stored for a telemetry, once there is one.
    let stored = |telemetry: String| {
        let store = store.clone();
        async move {
            let dir = culprit_store::paths::stage_shares_dir(&telemetry);
            for _ in 0..600 {
                let found = store.derived_objects(&dir).await.unwrap();
                // With the answers (not the object of the shares only,
                // written first).
                if found
                    .iter()
                    .any(|(p, _)| !culprit_store::paths::is_stage_shares_only_file(p))
                {
                    return dir;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("no shares stored under {dir} after 30 s");
        }
    };
    let first = stored(store.manifest().await.unwrap().telemetry_id()).await;
    // New rows (host rows of the same hosts again): stored again.
    let mut batch = store.begin();
    batch
        .write(Table::HostWindows, std::slice::from_ref(&w.host_windows))
        .await
        .unwrap();
    batch.commit().await.unwrap();
    let second = stored(store.manifest().await.unwrap().telemetry_id()).await;
    assert_ne!(first, second);
    // The older telemetry's object is removed once the newer is stored.
    for _ in 0..600 {
        if store.derived_objects(&first).await.unwrap().is_empty()
            && store.derived_objects(&second).await.unwrap().len() == 1
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(store.derived_objects(&first).await.unwrap(), vec![]);
    assert_eq!(store.derived_objects(&second).await.unwrap().len(), 1);
    background.abort();
}

/// A row of `culprits()`: kind, culprit query, seconds and DOR, overlaps.
type AnswerRow = (
    culprit_core::method::CulpritKind,
    Option<String>,
    [f64; 2],
    [f64; 2],
);

/// The answers of the default `culprits(victim)` stored with the shares
/// (`Engine::stored_culprits`) are each victim's own computation (a
/// focused read of it, before anything was stored): the same rows in the
/// same order, the same numbers. None for a query the store does not hold,
/// nor once the telemetry changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_answers_are_each_victims_own_computation() {
    let w = short_queries();
    let store = store_of(&w).await;
    let queries = query_ids(&w);
    let engine = Engine::new(store.clone());
    // Each victim's own computation first, nothing stored yet.
    let mut expected = Vec::new();
    for q in &queries {
        let (opts, s) = focused_default(&engine, q).await;
        let rows: Vec<_> = s
            .culprits(&opts)
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.kind,
                    r.culprit_query.map(|c| s.ds.queries.name(c).to_string()),
                    [r.seconds, r.dor.unwrap_or(-1.0)],
                    [
                        r.naive_overlap.unwrap_or(-1.0),
                        r.deep_overlap.unwrap_or(-1.0),
                    ],
                )
            })
            .collect();
        expected.push(rows);
    }
    assert_eq!(engine.stored_culprits(&queries[0]).await.unwrap(), None);
    let r = engine
        .store_shares_in_groups(500, &mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(r.outcome, culprit_engine::SharesOutcome::Computed, "{r:?}");
    assert_eq!(r.answers, queries.len(), "{r:?}");
    let (mut rows, mut across) = (0, 0);
    for (q, want) in queries.iter().zip(&expected) {
        let got = engine
            .stored_culprits(q)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no stored answer of {q}"));
        let got: Vec<_> = got
            .iter()
            .map(|r| {
                (
                    r.kind,
                    r.culprit_query.clone(),
                    [r.seconds, r.dor.unwrap_or(-1.0)],
                    [
                        r.naive_overlap.unwrap_or(-1.0),
                        r.deep_overlap.unwrap_or(-1.0),
                    ],
                )
            })
            .collect();
        // The same culprits; in the same order but where two culprits'
        // seconds are the same to the tolerance (a near tie may swap).
        let keys = |v: &[AnswerRow]| v.iter().map(|r| (r.0, r.1.clone())).collect::<Vec<_>>();
        let (mut want, mut got) = (want.clone(), got);
        for (i, (a, b)) in keys(&want).iter().zip(keys(&got)).enumerate() {
            if *a != b {
                let tie = |v: &[AnswerRow], k: &(_, Option<String>)| {
                    v.iter()
                        .find(|r| (r.0, &r.1) == (k.0, &k.1))
                        .is_some_and(|r| same(r.2[0], v[i].2[0]))
                };
                assert!(
                    tie(&want, &b) && tie(&got, a),
                    "victim {q}: row {i} is {a:?} computed, {b:?} stored"
                );
            }
        }
        let order = |r: &AnswerRow| (r.0, r.1.clone());
        want.sort_by_key(order);
        got.sort_by_key(order);
        assert_eq!(keys(&want), keys(&got), "victim {q}: the same culprits");
        for (a, b) in want.iter().zip(&got) {
            let numbers = a.2.iter().chain(&a.3).zip(b.2.iter().chain(&b.3));
            assert!(
                numbers.into_iter().all(|(x, y)| same(*x, *y)),
                "victim {q}, {:?}: computed {a:?}, stored {b:?}",
                a.1
            );
        }
        rows += got.len();
        across += got
            .iter()
            .filter(|r| r.0 == culprit_core::method::CulpritKind::Query && r.2[0] > 0.0)
            .count();
    }
    assert_eq!(
        rows + expected.iter().filter(|e| e.is_empty()).count(),
        r.answer_rows
    );
    assert!(across > 100, "{across} other queries blamed");
    assert_eq!(engine.stored_answers_read(), queries.len() as u64);
    assert_eq!(engine.stored_culprits("no-such-query").await.unwrap(), None);
    // New rows: another telemetry, whose answers are not stored.
    let mut batch = store.begin();
    batch
        .write(Table::HostWindows, std::slice::from_ref(&w.host_windows))
        .await
        .unwrap();
    batch.commit().await.unwrap();
    let fresh = Engine::new(store.clone());
    assert_eq!(fresh.stored_culprits(&queries[0]).await.unwrap(), None);
}

/// Stops a computation of the stored shares of `store` once its first
/// group's answers are computed (the future dropped at its next await:
/// the answers' object never completed), and returns the object of the
/// shares only that it leaves.
async fn stopped_before_its_answers(store: &Store) -> String {
    let engine = std::sync::Arc::new(Engine::new(store.clone()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .store_shares_in_groups(500, &mut |done, total| {
                    let _ = tx.send((done, total));
                })
                .await
        }
    });
    loop {
        let (done, total) = rx.recv().await.unwrap();
        if done > total / 2 {
            run.abort();
            break;
        }
    }
    assert!(run.await.unwrap_err().is_cancelled());
    let telemetry = store.manifest().await.unwrap().telemetry_id();
    let objects = store
        .derived_objects(&culprit_store::paths::stage_shares_dir(&telemetry))
        .await
        .unwrap();
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert!(culprit_store::paths::is_stage_shares_only_file(
        &objects[0].0
    ));
    objects[0].0.clone()
}

/// The ids of a workload's queries.
fn query_ids(w: &culprit_sim::Workload) -> Vec<String> {
    w.queries
        .column_by_name("query_id")
        .unwrap()
        .as_string::<i32>()
        .iter()
        .flatten()
        .map(str::to_string)
        .collect()
}

/// A computation of the stored shares stopped after its shares, before its
/// answers (the process killed, or failed), leaves an object of
/// the shares only: analyses take their holders' shares from it, no call
/// is answered from it, and the next computation completes it without
/// computing the shares again. An object of the shares only newer than
/// one with the answers (a computation begun after a compaction) does not
/// hide it; answer rows that cannot be read make the object replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computation_stopped_before_its_answers_is_completed() {
    let w = short_queries();
    let store = store_of(&w).await;
    let shares_only = stopped_before_its_answers(&store).await;
    let queries = query_ids(&w);
    let q = queries[3].clone();
    let fresh = Engine::new(store.clone());
    assert_eq!(
        fresh.stored_culprits(&q).await.unwrap(),
        None,
        "no answers yet"
    );
    let victims = &queries[10..14];
    let taken: usize = analyse(store.clone(), victims)
        .await
        .iter()
        .map(|a| a.0)
        .sum();
    assert!(
        taken > 0,
        "holders' shares taken from the object of the shares only"
    );
    // Completed: the shares' steps not run again.
    let mut seen = Vec::new();
    let r = fresh
        .store_shares_in_groups(500, &mut |done, total| seen.push((done, total)))
        .await
        .unwrap();
    assert_eq!(r.outcome, culprit_engine::SharesOutcome::Computed, "{r:?}");
    let total = seen[0].1;
    assert_eq!(seen[1], (total / 2, total), "{seen:?}");
    assert_eq!(seen.len(), 2 + total / 2, "{seen:?}");
    assert_eq!(r.stages, w.stages.num_rows(), "the shares copied: {r:?}");
    let telemetry = store.manifest().await.unwrap().telemetry_id();
    let dir = culprit_store::paths::stage_shares_dir(&telemetry);
    let objects = store.derived_objects(&dir).await.unwrap();
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert!(!culprit_store::paths::is_stage_shares_only_file(
        &objects[0].0
    ));
    assert_eq!(store.derived_size(&shares_only).await.unwrap(), None);
    assert!(fresh.stored_culprits(&q).await.unwrap().is_some());

    // A newer object of the shares only (of a later manifest version, the
    // same telemetry): readers keep the one with the answers, a
    // computation finds them stored.
    use object_store::ObjectStoreExt;
    let complete = objects[0].0.clone();
    let bytes = store
        .object_store()
        .get(&store.path(&complete))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let newer = culprit_store::paths::stage_shares_only_file(&telemetry, 1 << 40, 1);
    store
        .object_store()
        .put(&store.path(&newer), bytes.clone().into())
        .await
        .unwrap();
    let reader = Engine::new(store.clone());
    assert!(reader.stored_culprits(&q).await.unwrap().is_some());
    let again = reader.store_shares(&mut |_, _| {}).await.unwrap();
    assert_eq!(
        again.outcome,
        culprit_engine::SharesOutcome::Stored,
        "{again:?}"
    );
    assert_eq!(again.path.as_deref(), Some(complete.as_str()));
    store.remove_derived(&[newer]).await.unwrap();

    // Answer rows that cannot be read (a culprit kind no culprit writes),
    // then share rows (a share of 2): the object is computed again, not
    // taken as stored.
    let mut object = complete;
    for answers in [true, false] {
        let bytes = store
            .object_store()
            .get(&store.path(&object))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        store
            .object_store()
            .put(&store.path(&object), damaged(bytes, answers).into())
            .await
            .unwrap();
        let reader = Engine::new(store.clone());
        if answers {
            assert_eq!(reader.stored_culprits(&q).await.unwrap(), None, "damaged");
        }
        let replaced = reader.store_shares(&mut |_, _| {}).await.unwrap();
        assert_eq!(
            replaced.outcome,
            culprit_engine::SharesOutcome::Computed,
            "answers {answers}: {replaced:?}"
        );
        let path = replaced.path.unwrap();
        assert_ne!(path, object);
        assert_eq!(store.derived_size(&object).await.unwrap(), None);
        assert!(Engine::new(store.clone())
            .stored_culprits(&q)
            .await
            .unwrap()
            .is_some());
        object = path;
    }
}

/// Column `name` of `b`, its value made `value` in the rows whose `answer`
/// is `on` (answer rows, or share rows).
fn replaced<T: arrow::datatypes::ArrowPrimitiveType>(
    b: &RecordBatch,
    name: &str,
    answer: &arrow::array::BooleanArray,
    on: bool,
    value: T::Native,
) -> arrow::array::ArrayRef {
    let c: arrow::array::PrimitiveArray<T> = b
        .column_by_name(name)
        .unwrap()
        .as_primitive::<T>()
        .iter()
        .zip(answer.iter())
        .map(|(c, a)| if a == Some(on) { Some(value) } else { c })
        .collect();
    std::sync::Arc::new(c)
}

/// A stored object (`bytes`) with its answer rows' culprit kind made 9
/// (`answers`), or its share rows' share made 2: rows no culprit writes.
fn damaged<B: parquet::file::reader::ChunkReader + 'static>(bytes: B, answers: bool) -> Vec<u8> {
    let mut batches = Vec::new();
    for b in parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024).unwrap() {
        let b = b.unwrap();
        let answer = b.column_by_name("answer").unwrap().as_boolean().clone();
        let (name, column) = if answers {
            let c = replaced::<arrow::datatypes::UInt8Type>(&b, "culprit", &answer, true, 9);
            ("culprit", c)
        } else {
            let c = replaced::<arrow::datatypes::Float64Type>(&b, "share", &answer, false, 2.0);
            ("share", c)
        };
        let i = b.schema().index_of(name).unwrap();
        let mut columns = b.columns().to_vec();
        columns[i] = column;
        batches.push(RecordBatch::try_new(b.schema(), columns).unwrap());
    }
    let mut out = Vec::new();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut out, batches[0].schema(), None).unwrap();
    for b in &batches {
        writer.write(b).unwrap();
    }
    writer.close().unwrap();
    out
}

/// A server's background storing completes an object of the shares only
/// left by a computation stopped before its answers (it does not take the
/// telemetry's shares as stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_completes_an_object_of_the_shares_only() {
    let w = short_queries();
    let store = store_of(&w).await;
    stopped_before_its_answers(&store).await;
    let engine = std::sync::Arc::new(Engine::new(store.clone()));
    let background = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .store_shares_when_quiet(std::time::Duration::from_millis(50))
                .await
        }
    });
    let q = query_ids(&w)[3].clone();
    let mut waited = 0;
    while engine.stored_culprits(&q).await.unwrap().is_none() {
        assert!(waited < 600, "no answers stored after 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        waited += 1;
    }
    background.abort();
}
