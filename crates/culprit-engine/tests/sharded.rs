//! An analysis whose host buckets are swept in shares elsewhere (as a
//! cluster's workers sweep them, issue #19) gives what one process gives:
//! the same culprits and the same level-4 blame as the analysis streamed
//! bucket by bucket here, and as the one over the rows in memory.
//!
//! The shares are swept by a second engine over the same store (a worker's
//! own snapshot, read at the job's version), through the rows a worker
//! sends back; the network is `tests/e2e/cluster.rs`'s business.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use culprit_core::method::BlameOptions;
use culprit_core::Table;
use culprit_engine::{Engine, Error, Snapshot, SweepJob, Sweeper};
use culprit_store::Store;

/// Sweeps the buckets in `shares` shares (dealt in turn), each by the
/// "worker" engine, and returns their rows last share first.
#[derive(Debug)]
struct InProcess {
    worker: Engine,
    shares: usize,
    calls: AtomicUsize,
}

impl Sweeper for InProcess {
    fn workers(&self) -> usize {
        self.shares
    }

    fn sweep(
        &self,
        runtime: &tokio::runtime::Handle,
        _snapshot: &Snapshot,
        job: &SweepJob,
        buckets: &[u32],
        sink: &mut dyn FnMut(RecordBatch) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        // A worker sweeps on a blocking thread of its runtime.
        let _runtime = runtime.enter();
        let snapshot = runtime.block_on(self.worker.snapshot_at(job.version))?;
        for i in (0..self.shares).rev() {
            let share: Vec<u32> = buckets
                .iter()
                .skip(i)
                .step_by(self.shares)
                .copied()
                .collect();
            // Each share through its bytes, as it travels.
            let job = SweepJob::from_bytes(&job.to_bytes())?;
            for batch in snapshot.sweep_share(&job, &share)? {
                sink(batch)?;
            }
        }
        Ok(())
    }
}

/// A store of `w`'s rows, its window rows in host-bucket files.
async fn store_of(w: &culprit_sim::Workload) -> Store {
    let store = Store::open("memory://").unwrap();
    let mut batch = store.begin();
    batch
        .write(Table::Queries, std::slice::from_ref(&w.queries))
        .await
        .unwrap();
    batch
        .write(Table::Stages, std::slice::from_ref(&w.stages))
        .await
        .unwrap();
    batch
        .write(Table::Tasks, std::slice::from_ref(&w.tasks))
        .await
        .unwrap();
    batch
        .write(Table::TaskWindows, std::slice::from_ref(&w.task_windows))
        .await
        .unwrap();
    batch
        .write(Table::HostWindows, std::slice::from_ref(&w.host_windows))
        .await
        .unwrap();
    batch.commit().await.unwrap();
    store
}

/// Level-4 seconds by (victim stage, resource, detail, host, culprit), and
/// culprit rows by (victim, kind, culprit query), from `s`.
type Totals = BTreeMap<String, f64>;

fn totals(s: &Snapshot, opts: &BlameOptions) -> (Totals, Totals) {
    let b = s.blame(opts).unwrap();
    let ds = &s.ds;
    let details = b.level4.details(ds);
    let mut level4 = Totals::new();
    for e in &b.level4 {
        let key = format!(
            "{} {:?} {} {:?} {:?}",
            e.stage,
            e.resource,
            details.name(e.detail),
            e.host(),
            e.culprit()
        );
        *level4.entry(key).or_default() += e.seconds;
    }
    let mut culprits = Totals::new();
    for r in s.culprits(opts).unwrap() {
        let key = format!(
            "{} {} {}",
            ds.queries.name(r.victim),
            r.kind.name(),
            r.culprit_query.map_or("", |q| ds.queries.name(q))
        );
        *culprits.entry(key).or_default() += r.seconds;
    }
    (level4, culprits)
}

fn assert_close(want: &Totals, got: &Totals, what: &str) {
    let only = |a: &Totals, b: &Totals| -> Vec<String> {
        a.keys()
            .filter(|k| !b.contains_key(*k))
            .take(5)
            .cloned()
            .collect()
    };
    assert!(
        want.len() == got.len() && only(want, got).is_empty(),
        "{what}: {} nodes in one process, {} in shares; only in one process: {:?}; only in shares: {:?}",
        want.len(),
        got.len(),
        only(want, got),
        only(got, want)
    );
    for (k, a) in want {
        let b = got[k];
        assert!(
            (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-6),
            "{what}, {k}: {a} in one process, {b} in shares"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_swept_elsewhere_give_the_single_process_answer() {
    let w = culprit_sim::fast(&culprit_sim::FastConfig {
        seed: 11,
        tasks: 12_000,
        hosts: 24,
        slots: 4,
        tasks_per_query: 300,
        ..Default::default()
    });
    let store = store_of(&w).await;
    let memory = Engine::new(store.clone()).snapshot(true).await.unwrap();
    let streamed = Engine::with_window_cache(store.clone(), 0)
        .snapshot(false)
        .await
        .unwrap();
    let sweeper = Arc::new(InProcess {
        worker: Engine::new(store.clone()),
        shares: 3,
        calls: AtomicUsize::new(0),
    });
    let sharded = Engine::with_window_cache(store.clone(), 0)
        .with_sweeper(sweeper.clone())
        .snapshot(false)
        .await
        .unwrap();
    assert_eq!(sharded.ds.host_conflicts, 0);
    let variants = common::variants();
    let mut nodes = 0;
    for opts in &variants {
        let before = sweeper.calls.load(Ordering::Relaxed);
        let (l4, c) = totals(&sharded, opts);
        assert!(
            sweeper.calls.load(Ordering::Relaxed) > before,
            "{opts:?}: the buckets were not swept in shares"
        );
        let (sl4, sc) = totals(&streamed, opts);
        let (ml4, mc) = totals(&memory, opts);
        assert_close(&sl4, &l4, &format!("{opts:?}, level 4, streamed"));
        assert_close(&ml4, &l4, &format!("{opts:?}, level 4, in memory"));
        assert_close(&sc, &c, &format!("{opts:?}, culprits, streamed"));
        assert_close(&mc, &c, &format!("{opts:?}, culprits, in memory"));
        nodes += l4.len();
    }
    assert!(nodes > 1000, "only {nodes} level-4 nodes compared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_of_another_version_or_dataset_is_refused() {
    let w = culprit_sim::fast(&culprit_sim::FastConfig {
        seed: 5,
        tasks: 2_000,
        hosts: 6,
        ..Default::default()
    });
    let store = store_of(&w).await;
    let engine = Engine::new(store.clone());
    let version = store.manifest().await.unwrap().version;
    let snapshot = engine.snapshot_at(version).await.unwrap();
    let job = SweepJob {
        version,
        tasks: snapshot.ds.tasks.len() as u64,
        hosts: snapshot.ds.hosts.len() as u64,
        stages: vec![true; snapshot.ds.stages.len()],
        victim_tasks: None,
        bounds: vec![i64::MIN / 4, i64::MAX / 4],
        paper: false,
    };
    let ok = tokio::task::block_in_place(|| snapshot.sweep_share(&job, &[0, 1, 2]));
    assert!(ok.is_ok(), "{ok:?}");
    for wrong in [
        SweepJob {
            tasks: job.tasks + 1,
            ..job.clone()
        },
        SweepJob {
            stages: vec![true; 1],
            ..job.clone()
        },
        SweepJob {
            victim_tasks: Some(vec![true; 3]),
            ..job.clone()
        },
        SweepJob {
            bounds: vec![5],
            ..job.clone()
        },
    ] {
        let e = tokio::task::block_in_place(|| snapshot.sweep_share(&wrong, &[0]))
            .expect_err("a job of another dataset must be refused");
        assert!(e.is_internal() || matches!(e, Error::Method { .. }), "{e}");
    }
    // A bucket the store does not have.
    assert!(tokio::task::block_in_place(|| snapshot.sweep_share(&job, &[1 << 20])).is_err());
    // A version never written.
    let e = engine
        .snapshot_at(version + 7)
        .await
        .expect_err("no such version");
    assert!(
        e.to_string().contains(&format!("{:020}", version + 7)),
        "{e}"
    );
}
