//! Worked examples 3-6 of method.md section 12 and the invariants of the
//! other papers' analyses (what-if, stragglers, estimate, computation skew).

use proptest::prelude::*;

use super::model::{Dataset, Totals};
use super::stragglers::{stragglers, StragglerCause};
use super::what_if::{simulate, what_if, what_if_all, WhatIfResource};
use crate::{MethodError, Resource};

const S: i64 = 1_000_000; // one second in microseconds
const MB: f64 = 1e6;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * (1.0 + a.abs().max(b.abs()))
}

// ---------------------------------------------------------------- what-if

/// Example 3: 2 slots; tasks of 4 s launched in order t1, t2, t3 (t3 when
/// t1's slot frees); t1 blocked 2 s on network.
fn example_3(ds: &mut Dataset, query: &str) {
    let net = Totals {
        network_blocked: 2.0,
        ..Totals::default()
    };
    ds.add_task(
        &format!("{query}.t1"),
        query,
        "0",
        "h1",
        0,
        4 * S,
        None,
        net,
    );
    ds.add_task(
        &format!("{query}.t2"),
        query,
        "0",
        "h2",
        0,
        4 * S,
        None,
        Totals::default(),
    );
    ds.add_task(
        &format!("{query}.t3"),
        query,
        "0",
        "h1",
        4 * S,
        8 * S,
        None,
        Totals::default(),
    );
}

#[test]
fn example_3_what_if_network_is_25_percent() {
    let mut ds = Dataset::new();
    example_3(&mut ds, "Q");
    let rows = what_if(&ds, "Q", Some(WhatIfResource::Network), None, None).unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r.slots, 2);
    assert_eq!(r.original_seconds, 8.0);
    // t1 ends at 2, t3 runs 2-6.
    assert_eq!(r.without_seconds, 6.0);
    assert_eq!(r.improvement, 0.25);
    assert_eq!(r.removed_seconds, 2.0);
    // Subtracting blocked time from the real timeline would show 0%: the
    // last task still ends at 8.
    let naive_end = [(0.0, 4.0, 2.0), (0.0, 4.0, 0.0), (4.0, 8.0, 0.0)]
        .iter()
        .map(|(_, f, b): &(f64, f64, f64)| f - b)
        .fold(0.0f64, f64::max);
    assert_eq!(naive_end, 8.0);
    // Nobody was blocked on anything else.
    let all = what_if(&ds, "Q", None, None, None).unwrap();
    assert_eq!(all.len(), WhatIfResource::ALL.len());
    for r in &all {
        let want = if r.resource == WhatIfResource::Network {
            0.25
        } else {
            0.0
        };
        assert_eq!(r.improvement, want, "{r:?}");
        assert_eq!(r.original_seconds, 8.0);
    }
}

#[test]
fn what_if_cluster_wide_sums_queries() {
    let mut ds = Dataset::new();
    example_3(&mut ds, "A");
    example_3(&mut ds, "B");
    let rows = what_if_all(&ds, Some(WhatIfResource::Network), None, None).unwrap();
    assert_eq!(rows.len(), 3);
    let total = rows.iter().find(|r| r.query == "*").unwrap();
    assert_eq!(total.original_seconds, 16.0);
    assert_eq!(total.without_seconds, 12.0);
    assert_eq!(total.improvement, 0.25);
    // A window that keeps only the tasks launched before 1 s: t1 and t2.
    let rows = what_if_all(&ds, Some(WhatIfResource::Network), Some(0), Some(S)).unwrap();
    let total = rows.iter().find(|r| r.query == "*").unwrap();
    assert_eq!(total.tasks, 4);
    assert_eq!(total.original_seconds, 8.0);
}

#[test]
fn what_if_stages_are_gated_by_parents() {
    // Stage 1 (one 4-s task) feeds stage 2 (one 1-s task); stage 3 (one 3-s
    // task) is independent. Three slots were used.
    let mut ds = Dataset::new();
    let gc = Totals {
        gc_seconds: 2.0,
        ..Totals::default()
    };
    ds.add_task("a", "Q", "1", "h", 0, 4 * S, None, gc);
    ds.add_task("b", "Q", "3", "h", 0, 3 * S, None, Totals::default());
    ds.add_task("c", "Q", "2", "h", 0, S, None, Totals::default());
    ds.set_parents("Q", "2", &["1"]);
    let rows = what_if(&ds, "Q", Some(WhatIfResource::Gc), None, None).unwrap();
    // c waits for a: 4 + 1 = 5; without GC a takes 2, c ends at 3, b at 3.
    assert_eq!(rows[0].slots, 3);
    assert_eq!(rows[0].original_seconds, 5.0);
    assert_eq!(rows[0].without_seconds, 3.0);
    // GC is CPU blocked time too (section 5).
    let cpu = what_if(&ds, "Q", Some(WhatIfResource::Cpu), None, None).unwrap();
    assert_eq!(cpu[0].without_seconds, 3.0);
}

#[test]
fn what_if_bad_arguments_are_errors() {
    let mut ds = Dataset::new();
    example_3(&mut ds, "Q");
    assert!(matches!(
        what_if(&ds, "nope", None, None, None),
        Err(MethodError::UnknownQuery(_))
    ));
    assert!(matches!(
        what_if(&ds, "Q", None, Some(5), Some(1)),
        Err(MethodError::InvalidArgument(_))
    ));
    assert!("bogus".parse::<WhatIfResource>().is_err());
    assert_eq!(
        "Network".parse::<WhatIfResource>().unwrap(),
        WhatIfResource::Network
    );
    // Non-finite and negative blocked times count as none.
    let mut ds = Dataset::new();
    let bad = Totals {
        network_blocked: f64::NAN,
        disk_read_blocked: f64::INFINITY,
        cpu_blocked: -3.0,
        ..Totals::default()
    };
    ds.add_task("t", "Q", "0", "h", 0, S, None, bad);
    for r in what_if(&ds, "Q", None, None, None).unwrap() {
        assert_eq!(r.improvement, 0.0, "{r:?}");
        assert_eq!(r.original_seconds, 1.0);
    }
    // A blocked time longer than the task is clipped to it: the task vanishes.
    let mut ds = Dataset::new();
    let long = Totals {
        disk_read_blocked: 5.0,
        ..Totals::default()
    };
    ds.add_task("t", "Q", "0", "h", 0, S, None, long);
    let dr = what_if(&ds, "Q", Some(WhatIfResource::DiskRead), None, None).unwrap();
    assert_eq!(dr[0].without_seconds, 0.0);
    assert_eq!(dr[0].improvement, 1.0);
    // A cycle of stage parents is an error, not a hang.
    let mut ds = Dataset::new();
    ds.add_task("a", "Q", "1", "h", 0, S, None, Totals::default());
    ds.add_task("b", "Q", "2", "h", S, 2 * S, None, Totals::default());
    ds.set_parents("Q", "1", &["2"]);
    ds.set_parents("Q", "2", &["1"]);
    assert!(matches!(
        what_if(&ds, "Q", None, None, None),
        Err(MethodError::InvalidArgument(_))
    ));
}

#[test]
fn what_if_reads_window_rows() {
    // The network blocked time of example 3 given as window rows.
    let mut ds = Dataset::new();
    let t1 = ds.add_task("t1", "Q", "0", "h1", 0, 4 * S, None, Totals::default());
    ds.add_task("t2", "Q", "0", "h2", 0, 4 * S, None, Totals::default());
    ds.add_task("t3", "Q", "0", "h1", 4 * S, 8 * S, None, Totals::default());
    ds.add_window(t1, Resource::Network, "", 0, 2 * S, 1.5, 10.0, 0.0);
    ds.add_window(t1, Resource::Network, "", 2 * S, 4 * S, 0.5, 10.0, 0.0);
    let r = &what_if(&ds, "Q", Some(WhatIfResource::Network), None, None).unwrap()[0];
    assert_eq!(r.improvement, 0.25);
}

// ------------------------------------------------------------- stragglers

/// Example 4: 5 tasks reading 100 MB each take 10, 10, 11, 10, 30 s; 20 s of
/// the last one's time is GC.
fn example_4() -> Dataset {
    let mut ds = Dataset::new();
    for (i, d) in [10, 10, 11, 10, 30].iter().enumerate() {
        let totals = Totals {
            input_bytes: 100.0 * MB,
            gc_seconds: if i == 4 { 20.0 } else { 0.0 },
            ..Totals::default()
        };
        ds.add_task(
            &format!("t{}", i + 1),
            "Q",
            "0",
            &format!("h{}", i + 1),
            0,
            d * S,
            None,
            totals,
        );
    }
    ds
}

#[test]
fn example_4_one_straggler_caused_by_gc() {
    let ds = example_4();
    let rows = stragglers(&ds, "Q", None, None).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r.task, "t5");
    assert_eq!(r.host, "h5");
    assert_eq!(r.stage, "0");
    assert!(close(r.rate, 30.0 / (100.0 * MB)));
    assert!(close(r.stage_median, 10.0 / (100.0 * MB)));
    assert!(close(r.ratio, 3.0));
    assert_eq!(r.causes, vec![StragglerCause::Gc]);
}

#[test]
fn straggler_causes_output_skew_first_task_unknown() {
    // Same stage, one host, tasks in two waves: t1..t4 first tasks (their
    // launch precedes every finish on h), t5..t8 later.
    let mut ds = Dataset::new();
    let mk = |out: f64| Totals {
        input_bytes: 100.0 * MB,
        output_bytes: out,
        ..Totals::default()
    };
    // First wave: the JIT warms up, all first tasks take 20 s; one takes 40 s.
    ds.add_task("f1", "Q", "0", "h", 0, 20 * S, None, mk(10.0));
    ds.add_task("f2", "Q", "0", "h", 0, 20 * S, None, mk(10.0));
    ds.add_task("f3", "Q", "0", "h", 0, 22 * S, None, mk(10.0));
    // Second wave: 10 s each; o1 writes 4x the output and takes 40 s.
    for i in 0..5 {
        ds.add_task(
            &format!("s{i}"),
            "Q",
            "0",
            "h",
            20 * S,
            30 * S,
            None,
            mk(10.0),
        );
    }
    ds.add_task("o1", "Q", "0", "h", 20 * S, 60 * S, None, mk(40.0));
    // An unexplained one: 40 s, ordinary output.
    ds.add_task("u1", "Q", "0", "h", 22 * S, 62 * S, None, mk(10.0));
    let rows = stragglers(&ds, "Q", None, None).unwrap();
    let by: std::collections::BTreeMap<&str, &Vec<StragglerCause>> =
        rows.iter().map(|r| (r.task.as_str(), &r.causes)).collect();
    // Rates in s per 100 MB, sorted: 10 x5, 20, 20, 22, 40, 40: median 15.
    let median = 15.0 / (100.0 * MB);
    assert!(close(rows[0].stage_median, median));
    // Stragglers: rate > 22.5 s / 100 MB: o1 and u1 only.
    assert_eq!(by.keys().copied().collect::<Vec<_>>(), vec!["o1", "u1"]);
    assert_eq!(by["o1"], &vec![StragglerCause::OutputSkew]);
    assert_eq!(by["u1"], &vec![StragglerCause::Unknown]);

    // A stage whose first tasks (launched before any finish on h) are all
    // slow: they straggle only because they are first.
    let mut ds = Dataset::new();
    let t = mk(0.0);
    ds.add_task("a1", "Q", "0", "h", 0, 30 * S, None, t);
    ds.add_task("a2", "Q", "0", "h", 0, 30 * S, None, t);
    for i in 0..4 {
        ds.add_task(&format!("b{i}"), "Q", "0", "h", 30 * S, 40 * S, None, t);
    }
    let rows = stragglers(&ds, "Q", None, None).unwrap();
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r.causes, vec![StragglerCause::FirstTask], "{r:?}");
    }
}

#[test]
fn stragglers_bad_arguments() {
    let ds = example_4();
    assert!(matches!(
        stragglers(&ds, "X", None, None),
        Err(MethodError::UnknownQuery(_))
    ));
    assert!(stragglers(&ds, "Q", Some(2), Some(1)).is_err());
    // Tasks that read nothing have no rate: no straggler, no panic.
    let mut ds = Dataset::new();
    ds.add_task("a", "Q", "0", "h", 0, S, None, Totals::default());
    ds.add_task("b", "Q", "0", "h", 0, 9 * S, None, Totals::default());
    assert!(stragglers(&ds, "Q", None, None).unwrap().is_empty());
}

#[test]
fn what_if_stragglers_caps_at_the_median() {
    // Example 4 on one slot: 10 + 10 + 11 + 10 + 30 = 71 s; t5 capped at the
    // median rate (10 s per 100 MB) takes 10 s and t3 takes 10 s: 50 s.
    let mut ds = Dataset::new();
    let mut at = 0;
    for (i, d) in [10, 10, 11, 10, 30].iter().enumerate() {
        let totals = Totals {
            input_bytes: 100.0 * MB,
            ..Totals::default()
        };
        ds.add_task(
            &format!("t{i}"),
            "Q",
            "0",
            "h",
            at,
            at + d * S,
            None,
            totals,
        );
        at += d * S;
    }
    let r = &what_if(&ds, "Q", Some(WhatIfResource::Stragglers), None, None).unwrap()[0];
    assert_eq!(r.slots, 1);
    assert!(close(r.original_seconds, 71.0));
    assert!(close(r.without_seconds, 50.0));
    assert!(close(r.improvement, 1.0 - 50.0 / 71.0));
}

// --------------------------------------------------- what-if properties

/// A random query: tasks in two stages (stage 1 gated by stage 0), each with
/// a duration in 1/64 s (exact in binary) and a blocked fraction per resource.
#[derive(Debug, Clone)]
struct RandTask {
    stage: u8,
    ticks: i64,
    blocked: [u8; 5],
}

fn rand_task() -> impl Strategy<Value = RandTask> {
    (0u8..2, 1i64..200, proptest::array::uniform5(0u8..100)).prop_map(|(stage, ticks, blocked)| {
        RandTask {
            stage,
            ticks,
            blocked,
        }
    })
}

const TICK: i64 = S / 64;

/// Lays the tasks out as a greedy scheduler on `slots` slots would (each
/// task, stage 0 first, on the slot that frees first, stage 1 not before
/// stage 0 has ended) and returns the dataset and the last end in seconds,
/// computed here independently of the code under test.
fn greedy_dataset(tasks: &[RandTask], slots: usize, zero: Option<usize>) -> (Dataset, f64) {
    let mut order: Vec<&RandTask> = tasks.iter().collect();
    order.sort_by_key(|t| t.stage);
    let mut free = vec![0i64; slots];
    let mut stage0_end = 0i64;
    let mut end = 0i64;
    let mut ds = Dataset::new();
    for (i, t) in order.iter().enumerate() {
        let k = (0..slots).min_by_key(|&k| (free[k], k)).unwrap();
        let mut start = free[k];
        if t.stage == 1 {
            start = start.max(stage0_end);
        }
        let fin = start + t.ticks * TICK;
        free[k] = fin;
        if t.stage == 0 {
            stage0_end = stage0_end.max(fin);
        }
        end = end.max(fin);
        let dur = (t.ticks * TICK) as f64 / 1e6;
        // Blocked fractions strictly below 1 (at most 99%).
        let b = |j: usize| {
            if zero == Some(j) {
                0.0
            } else {
                dur * t.blocked[j] as f64 / 100.0
            }
        };
        let totals = Totals {
            cpu_blocked: b(0),
            disk_read_blocked: b(1),
            disk_write_blocked: b(2),
            network_blocked: b(3),
            scheduler_delay: b(4),
            input_bytes: 1000.0 + (i as f64 * 37.0) % 500.0,
            ..Totals::default()
        };
        ds.add_task(
            &format!("t{i}"),
            "Q",
            &t.stage.to_string(),
            &format!("h{k}"),
            start,
            fin,
            None,
            totals,
        );
    }
    ds.set_parents("Q", "1", &["0"]);
    (ds, end as f64 / 1e6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The replay of a greedy run's own durations is that run: the simulated
    /// original equals the real span, computed independently.
    #[test]
    fn replay_of_the_original_is_exact(
        tasks in proptest::collection::vec(rand_task(), 1..30),
        slots in 1usize..5,
    ) {
        let (ds, end) = greedy_dataset(&tasks, slots, None);
        let rows = what_if(&ds, "Q", None, None, None).unwrap();
        for r in &rows {
            prop_assert_eq!(r.original_seconds, end);
            prop_assert_eq!(r.observed_seconds, end);
        }
    }

    /// Removing blocked time never makes a query slower nor takes all of it:
    /// the improvement is in [0, 1).
    #[test]
    fn improvement_in_unit_interval(
        tasks in proptest::collection::vec(rand_task(), 1..30),
        slots in 1usize..5,
    ) {
        let (ds, _) = greedy_dataset(&tasks, slots, None);
        for r in what_if(&ds, "Q", None, None, None).unwrap() {
            prop_assert!(r.improvement >= 0.0 && r.improvement < 1.0, "{:?}", r);
            prop_assert!(r.without_seconds <= r.original_seconds);
        }
    }

    /// A resource nobody was blocked on improves nothing, exactly.
    #[test]
    fn nobody_blocked_no_improvement(
        tasks in proptest::collection::vec(rand_task(), 1..30),
        slots in 1usize..5,
        zero in 0usize..5,
    ) {
        let (ds, _) = greedy_dataset(&tasks, slots, Some(zero));
        let r = [
            WhatIfResource::Cpu,
            WhatIfResource::DiskRead,
            WhatIfResource::DiskWrite,
            WhatIfResource::Network,
            WhatIfResource::SchedulerDelay,
        ][zero];
        let row = &what_if(&ds, "Q", Some(r), None, None).unwrap()[0];
        prop_assert_eq!(row.improvement, 0.0);
        prop_assert_eq!(row.without_seconds, row.original_seconds);
        // GC: nobody had any.
        let row = &what_if(&ds, "Q", Some(WhatIfResource::Gc), None, None).unwrap()[0];
        prop_assert_eq!(row.improvement, 0.0);
    }
}

// --------------------------------------------------------------- estimate

#[test]
fn example_6_boe_map_task() {
    use super::estimate::{boe_task, boe_task_seconds, BoeResource, Demand};
    // B = 128 MB, t_load = 1 s, theta_dfsr = theta_dw = 100 MB/s, theta_map
    // = 20 MB/s per core, 6 cores, alpha_m = 0.5.
    let t4 = boe_task_seconds(128.0, 1.0, 100.0, 100.0, 20.0, 6.0, 0.5, 4.0).unwrap();
    assert!(close(t4, 9.96), "{t4}");
    assert!(close(t4, 1.0 + 6.4 + 2.56));
    let t12 = boe_task_seconds(128.0, 1.0, 100.0, 100.0, 20.0, 6.0, 0.5, 12.0).unwrap();
    assert!(close(t12, 24.04), "{t12}");
    assert!(close(t12, 1.0 + 15.36 + 7.68));
    // The bottlenecks: CPU at delta = 4, disk at delta = 12.
    let task = |delta: f64| {
        let d = |resource, amount, theta| Demand {
            resource,
            amount,
            theta,
        };
        boe_task(
            1.0,
            &[
                vec![
                    d(BoeResource::DiskRead, 128.0, 100.0),
                    d(BoeResource::Cpu, 128.0, 20.0),
                ],
                vec![d(BoeResource::DiskWrite, 64.0, 100.0)],
            ],
            delta,
            6.0,
        )
        .unwrap()
    };
    let a = task(4.0);
    assert_eq!(a.substages[0].1, Some(BoeResource::Cpu));
    assert!(close(a.substages[0].0, 6.4) && close(a.substages[1].0, 2.56));
    let b = task(12.0);
    assert_eq!(b.substages[0].1, Some(BoeResource::DiskRead));
    assert_eq!(b.bottleneck, Some(BoeResource::DiskRead));
    assert!(close(b.seconds, 24.04));
    // Bad arguments are errors.
    for args in [
        (f64::NAN, 1.0, 100.0, 4.0),
        (-1.0, 1.0, 100.0, 4.0),
        (128.0, f64::INFINITY, 100.0, 4.0),
        (128.0, 1.0, 0.0, 4.0),
        (128.0, 1.0, 100.0, 0.0),
        (128.0, 1.0, -100.0, 4.0),
    ] {
        let (b, tl, th, delta) = args;
        assert!(
            matches!(
                boe_task_seconds(b, tl, th, 100.0, 20.0, 6.0, 0.5, delta),
                Err(MethodError::InvalidArgument(_))
            ),
            "{args:?}"
        );
    }
}

/// Two hosts with 2 slots: stage 0 has 8 map tasks (100 MB input, 1 cpu-s
/// each), stage 1 (after 0) 2 tasks (50 MB shuffle read, 10 MB output, 2 and
/// 4 cpu-s).
fn estimate_dataset() -> Dataset {
    let mut ds = Dataset::new();
    for i in 0..8i64 {
        let t = Totals {
            input_bytes: 100.0 * MB,
            cpu_seconds: 1.0,
            ..Totals::default()
        };
        let wave = (i / 4) * 10 * S;
        let host = format!("h{}", i % 2);
        ds.add_task(
            &format!("m{i}"),
            "Q",
            "0",
            &host,
            wave,
            wave + 10 * S,
            None,
            t,
        );
    }
    for (i, cpu) in [2.0, 4.0].iter().enumerate() {
        let t = Totals {
            shuffle_read_bytes: 50.0 * MB,
            output_bytes: 10.0 * MB,
            cpu_seconds: *cpu,
            ..Totals::default()
        };
        let host = format!("h{i}");
        ds.add_task(&format!("r{i}"), "Q", "1", &host, 20 * S, 30 * S, None, t);
    }
    ds.set_parents("Q", "1", &["0"]);
    ds
}

#[test]
fn estimate_stage_by_stage() {
    use super::estimate::{estimate, BoeResource, EstimateOptions};
    let ds = estimate_dataset();
    let opts = EstimateOptions {
        theta_disk_read: Some(100.0 * MB),
        theta_network: Some(50.0 * MB),
        theta_disk_write: Some(20.0 * MB),
        n_cores: Some(2.0),
        t_load: Some(0.5),
        skew: false,
        ..EstimateOptions::default()
    };
    let e = estimate(&ds, "Q", &opts).unwrap();
    assert_eq!((e.hosts, e.slots_per_host), (2, 2));
    assert_eq!(e.stages.len(), 2);
    let (s0, s1) = (&e.stages[0], &e.stages[1]);
    // Stage 0: delta = min(2, 8 / 2) = 2; read 100 MB at 100 MB/s / 2 = 2 s,
    // cpu 1 s; 0.5 + 2 = 2.5 s a task, 2 waves on 4 slots: 5 s.
    assert_eq!(s0.stage, "0");
    assert_eq!((s0.delta, s0.waves), (2.0, 2));
    assert!(close(s0.task_seconds, 2.5));
    assert_eq!(s0.bottleneck, Some(BoeResource::DiskRead));
    assert!(close(s0.stage_seconds, 5.0));
    assert!(close(s0.observed_seconds, 20.0));
    // Stage 1: delta = 1; mean cpu 3 s > fetch 50 MB at 50 MB/s = 1 s; write
    // 10 MB at 20 MB/s = 0.5 s: 0.5 + 3 + 0.5 = 4 s, one wave, after 5 s.
    assert_eq!((s1.delta, s1.waves), (1.0, 1));
    assert!(close(s1.task_seconds, 4.0));
    assert_eq!(s1.bottleneck, Some(BoeResource::Cpu));
    assert!(close(s1.start_seconds, 5.0) && close(s1.end_seconds, 9.0));
    assert!(close(e.estimated_seconds, 9.0));
    assert!(close(e.observed_seconds, 30.0));
    assert!(close(e.slowdown.unwrap(), 30.0 / 9.0));

    // The skew refinement (003 §6): stage 1's tasks take 3 s and 5 s alone
    // (sigma = 1); its one wave of 2 tasks ends lambda_2 * sigma later,
    // lambda_2 = Phi^-1(1.625 / 2.25) (Blom) = 0.5894557978497785.
    let e = estimate(&ds, "Q", &EstimateOptions { skew: true, ..opts }).unwrap();
    assert_eq!(e.stages[0].skew_seconds, 0.0);
    assert!((e.stages[1].skew_seconds - 0.5894557978497785).abs() < 1e-8);
    assert!((e.estimated_seconds - (9.0 + 0.5894557978497785)).abs() < 1e-8);
}

#[test]
fn estimate_calibrates_from_solo_tasks() {
    use super::estimate::{calibrate, estimate, EstimateOptions};
    let mut ds = Dataset::new();
    let input = |mb: f64| Totals {
        input_bytes: mb * MB,
        ..Totals::default()
    };
    // Alone on hx: 50 MB in 0.5 s (100 MB/s) and 20 MB in 0.5 s (40 MB/s).
    ds.add_task("a", "C", "0", "hx", 0, S / 2, None, input(50.0));
    ds.add_task("b", "C", "0", "hx", S, 3 * S / 2, None, input(20.0));
    // Overlapping on hy: not solo; together they read at most 10 MB/s +
    // 10 MB / 1.5 s, below 100 MB/s.
    ds.add_task("c", "C", "0", "hy", 0, S, None, input(10.0));
    ds.add_task("d", "D", "0", "hy", S / 2, 2 * S, None, input(10.0));
    let th = calibrate(&ds);
    assert_eq!(th.solo_tasks, 2);
    assert_eq!(th.disk_read, Some(100.0 * MB));
    assert_eq!(th.network, None);
    assert_eq!(th.disk_write, None);
    // Many tasks together show more of a node than one alone: on hz, 300 MB
    // in 1 s twice at once, and 200 MB in 1 s right after: 600 MB/s.
    let mut more = ds.clone();
    more.add_task("e", "E", "0", "hz", 0, S, None, input(300.0));
    more.add_task("f", "E", "0", "hz", 0, S, None, input(300.0));
    more.add_task("g", "E", "0", "hz", S, 2 * S, None, input(200.0));
    assert_eq!(calibrate(&more).disk_read, Some(600.0 * MB));
    // The estimate uses it: query C, 3 tasks on 2 hosts with 1 slot each.
    let e = estimate(&ds, "C", &EstimateOptions::default()).unwrap();
    assert_eq!(e.thetas.disk_read, Some(100.0 * MB));
    assert_eq!(e.slots_per_host, 1);
    assert_eq!(e.stages[0].waves, 2);
    // Bad options.
    for o in [
        EstimateOptions {
            theta_network: Some(f64::NAN),
            ..EstimateOptions::default()
        },
        EstimateOptions {
            hosts: Some(0),
            ..EstimateOptions::default()
        },
        EstimateOptions {
            t_load: Some(-1.0),
            ..EstimateOptions::default()
        },
    ] {
        assert!(matches!(
            estimate(&ds, "C", &o),
            Err(MethodError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        estimate(&ds, "nope", &EstimateOptions::default()),
        Err(MethodError::UnknownQuery(_))
    ));
}

// ------------------------------------------------------ computation skew

fn lineage(query: &str, stage: &str, out: &str, ins: &[&str], lat: f64, part: &str) -> LineageRow {
    LineageRow {
        query: query.into(),
        stage: stage.into(),
        out_id: out.into(),
        in_ids: ins.iter().map(|s| s.to_string()).collect(),
        computation_latency: lat,
        partition: part.into(),
    }
}

use super::skew::{expensive_inputs, record_latencies, skewed_tasks, LineageRow, PartitionLatency};

/// Example 5: output i1 of the pre-shuffle stage from h1 (486 ms) and h2
/// (28848 ms), 2 of its partition's 10 inputs; the partition's shuffle took
/// 60 ms. The other 8 inputs (h3..h10, a few ms each) make i2 and i3.
fn example_5() -> (Vec<LineageRow>, Vec<PartitionLatency>) {
    let mut rows = vec![
        lineage("Q", "1", "h1", &["file:0"], 486.0, "p0"),
        lineage("Q", "1", "h2", &["file:1"], 28848.0, "p0"),
    ];
    for i in 3..=10 {
        rows.push(lineage(
            "Q",
            "1",
            &format!("h{i}"),
            &[],
            10.0 + i as f64,
            "p0",
        ));
    }
    rows.push(lineage("Q", "2", "i1", &["h1", "h2"], 0.0, "p"));
    rows.push(lineage("Q", "2", "i2", &["h3", "h4", "h5"], 0.0, "p"));
    rows.push(lineage(
        "Q",
        "2",
        "i3",
        &["h6", "h7", "h8", "h9", "h10"],
        0.0,
        "p",
    ));
    let parts = vec![PartitionLatency {
        query: "Q".into(),
        stage: "2".into(),
        partition: "p".into(),
        latency: 60.0,
        inputs: None,
    }];
    (rows, parts)
}

#[test]
fn example_5_expensive_input() {
    let (rows, parts) = example_5();
    let lat = record_latencies(&rows, &parts, "Q").unwrap();
    let i1 = lat.iter().find(|r| r.out_id == "i1").unwrap();
    // ShuffleLatency(i1) = 2 / 10 * 60 = 12 ms.
    assert_eq!(i1.stage_latency, 12.0);
    assert_eq!(i1.total_latency, 28860.0);
    assert_eq!(i1.most_impactful_source, "h2");
    assert_eq!(i1.remediated_latency, 498.0);
    let top = expensive_inputs(&rows, &parts, "Q", 1).unwrap();
    assert_eq!(top.len(), 1);
    assert_eq!(top[0].source, "h2");
    assert_eq!(top[0].latency, 28860.0);
    assert_eq!(top[0].remediated_latency, 498.0);
    assert_eq!(top[0].impact, 28860.0 - 498.0);
    // The partition's input count may be given instead of counted.
    let given = vec![PartitionLatency {
        inputs: Some(10),
        ..parts[0].clone()
    }];
    let only_i1: Vec<LineageRow> = rows
        .iter()
        .filter(|r| r.out_id != "i2" && r.out_id != "i3")
        .cloned()
        .collect();
    let top = expensive_inputs(&only_i1, &given, "Q", 5).unwrap();
    assert_eq!(top[0].source, "h2");
    assert_eq!(
        (top[0].latency, top[0].remediated_latency),
        (28860.0, 498.0)
    );
}

#[test]
fn lineage_over_several_stages() {
    // a (100) and b (10) make x (5); x and c (50) make y (1).
    let rows = vec![
        lineage("Q", "1", "a", &[], 100.0, "p"),
        lineage("Q", "1", "b", &[], 10.0, "p"),
        lineage("Q", "1", "c", &[], 50.0, "p"),
        lineage("Q", "2", "x", &["a", "b"], 5.0, "p"),
        lineage("Q", "3", "y", &["x", "c"], 1.0, "p"),
    ];
    let lat = record_latencies(&rows, &[], "Q").unwrap();
    let get = |id: &str| lat.iter().find(|r| r.out_id == id).unwrap();
    assert_eq!(get("x").total_latency, 105.0);
    assert_eq!(get("x").remediated_latency, 15.0);
    assert_eq!(get("y").total_latency, 106.0);
    assert_eq!(get("y").most_impactful_source, "a");
    // Without a: x takes 5 + 10, y 1 + max(15, 50).
    assert_eq!(get("y").remediated_latency, 51.0);
    assert!(get("y").is_output && !get("x").is_output);
    let top = expensive_inputs(&rows, &[], "Q", 3).unwrap();
    assert_eq!(top.len(), 1);
    assert_eq!((top[0].source.as_str(), top[0].impact), ("a", 55.0));
    // Errors.
    assert!(matches!(
        expensive_inputs(&rows, &[], "nope", 1),
        Err(MethodError::UnknownQuery(_))
    ));
    assert!(expensive_inputs(&rows, &[], "Q", 0).is_err());
    let mut dup = rows.clone();
    dup.push(lineage("Q", "4", "x", &[], 1.0, "p"));
    assert!(record_latencies(&dup, &[], "Q").is_err());
    let mut nan = rows.clone();
    nan[0].computation_latency = f64::NAN;
    assert!(record_latencies(&nan, &[], "Q").is_err());
    let cycle = vec![
        lineage("Q", "1", "u", &["v"], 1.0, "p"),
        lineage("Q", "1", "v", &["u"], 1.0, "p"),
    ];
    assert!(record_latencies(&cycle, &[], "Q").is_err());
}

#[test]
fn skewed_tasks_by_records_or_bytes() {
    let mut ds = Dataset::new();
    for (i, cpu) in [1.0, 1.0, 1.0, 5.0].iter().enumerate() {
        let t = Totals {
            cpu_seconds: *cpu,
            input_bytes: 1000.0,
            ..Totals::default()
        };
        ds.add_task(&format!("t{i}"), "Q", "0", "h", 0, 10 * S, None, t);
    }
    let mut records: rustc_hash::FxHashMap<String, f64> =
        (0..4).map(|i| (format!("t{i}"), 100.0)).collect();
    let rows = skewed_tasks(&ds, "Q", &records, 1.5).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].task.as_str(), rows[0].unit), ("t3", "records"));
    assert!(close(rows[0].cost, 5.0 / 100.0));
    assert!(close(rows[0].stage_median, 1.0 / 100.0));
    assert!(close(rows[0].ratio, 5.0));
    // One count missing: the stage is ranked per byte.
    records.remove("t0");
    let rows = skewed_tasks(&ds, "Q", &records, 1.5).unwrap();
    assert_eq!((rows[0].task.as_str(), rows[0].unit), ("t3", "bytes"));
    assert!(close(rows[0].cost, 5.0 / 1000.0));
    // Bad arguments.
    assert!(skewed_tasks(&ds, "Q", &records, f64::NAN).is_err());
    assert!(skewed_tasks(&ds, "Q", &records, 0.0).is_err());
    assert!(matches!(
        skewed_tasks(&ds, "X", &records, 1.5),
        Err(MethodError::UnknownQuery(_))
    ));
}

#[test]
fn what_if_graham_anomaly_never_slows_a_query() {
    // 2 slots; in launch order t0, t1 (stage 2, after stage 0), t2 (stage
    // 0), t3, t4 (stage 1); 3, 2, 3, 1, 7 s; t2 blocked 2 s and t4 1 s on
    // the network. Greedy replays by hand: the original takes 8 s (t2 and t3
    // at 0, t4 at 1-8, t0 at 3-6, t1 at 6-8), the shortened one 9 s (t2, t3
    // at 0-1, then t0 and t1 take both slots and t4 runs 3-9). Keeping the
    // original slot order instead: t2, t0, t1 end at 1, 4, 6; t3, t4 at 1, 7.
    let mut ds = Dataset::new();
    let net = |b: f64| Totals {
        network_blocked: b,
        ..Totals::default()
    };
    ds.add_task("t0", "Q", "2", "h", 0, 3 * S, None, net(0.0));
    ds.add_task("t1", "Q", "2", "h", S, 3 * S, None, net(0.0));
    ds.add_task("t2", "Q", "0", "h", 3 * S, 6 * S, None, net(2.0));
    ds.add_task("t3", "Q", "1", "h", 4 * S, 5 * S, None, net(0.0));
    ds.add_task("t4", "Q", "1", "h", 5 * S, 12 * S, None, net(1.0));
    ds.set_parents("Q", "2", &["0"]);
    let r = &what_if(&ds, "Q", Some(WhatIfResource::Network), None, None).unwrap()[0];
    assert_eq!(r.slots, 2);
    assert_eq!(r.original_seconds, 8.0);
    assert_eq!(r.without_seconds, 7.0);
    assert_eq!(r.improvement, 0.125);
    // The greedy replay alone would report a slowdown.
    let st = |id: &str| ds.stage(ds.queries.get("Q").unwrap(), id).unwrap();
    let stages = [st("2"), st("2"), st("0"), st("1"), st("1")];
    let parents: rustc_hash::FxHashMap<u32, Vec<u32>> =
        [(st("2"), vec![st("0")])].into_iter().collect();
    let greedy = simulate(&stages, &parents, &[3.0, 2.0, 1.0, 1.0, 6.0], 2).unwrap();
    assert_eq!(greedy.makespan, 9.0);
    let original = simulate(&stages, &parents, &[3.0, 2.0, 3.0, 1.0, 7.0], 2).unwrap();
    assert_eq!(original.makespan, 8.0);
    assert_eq!(original.start, vec![3.0, 6.0, 0.0, 0.0, 1.0]);
}

/// A random query over four stages with random parents (lower stages only),
/// random launches and durations, and blocked fractions below 1.
#[derive(Debug, Clone)]
struct DagTask {
    stage: u8,
    launch: i64,
    ticks: i64,
    blocked: [u8; 5],
}

fn dag_task() -> impl Strategy<Value = DagTask> {
    (
        0u8..4,
        0i64..400,
        1i64..200,
        proptest::array::uniform5(0u8..100),
    )
        .prop_map(|(stage, launch, ticks, blocked)| DagTask {
            stage,
            launch,
            ticks,
            blocked,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn improvement_in_unit_interval_any_dag(
        tasks in proptest::collection::vec(dag_task(), 1..30),
        edges in proptest::array::uniform6(any::<bool>()),
        gc in any::<bool>(),
    ) {
        let mut ds = Dataset::new();
        for (i, t) in tasks.iter().enumerate() {
            let dur = (t.ticks * TICK) as f64 / 1e6;
            let b = |j: usize| dur * t.blocked[j] as f64 / 100.0;
            let totals = Totals {
                cpu_blocked: b(0),
                disk_read_blocked: b(1),
                disk_write_blocked: b(2),
                network_blocked: b(3),
                scheduler_delay: b(4),
                gc_seconds: if gc { b(0) / 2.0 } else { 0.0 },
                input_bytes: 100.0 + i as f64,
                ..Totals::default()
            };
            let l = t.launch * TICK;
            ds.add_task(&format!("t{i}"), "Q", &t.stage.to_string(), "h", l, l + t.ticks * TICK, None, totals);
        }
        // Parents among lower stages: (1<-0), (2<-0), (2<-1), (3<-0), (3<-1), (3<-2).
        let pairs = [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)];
        for s in 1..4u8 {
            let ps: Vec<String> = pairs
                .iter()
                .zip(edges)
                .filter(|((c, _), e)| *c == s && *e)
                .map(|((_, p), _)| p.to_string())
                .collect();
            let ps: Vec<&str> = ps.iter().map(|p| p.as_str()).collect();
            ds.set_parents("Q", &s.to_string(), &ps);
        }
        for r in what_if(&ds, "Q", None, None, None).unwrap() {
            prop_assert!(r.improvement >= 0.0 && r.improvement < 1.0, "{:?}", r);
            prop_assert!(r.without_seconds <= r.original_seconds);
            if !gc && r.resource == WhatIfResource::Gc {
                prop_assert_eq!(r.without_seconds, r.original_seconds);
            }
        }
    }
}

#[test]
fn stragglers_from_the_tasks_table() {
    use crate::batches::{TableBuilder, Value as V};
    use crate::Table;
    // Stage 0: four 100 MB map tasks of 10, 10, 10, 25 s, the last one
    // waiting 15 s for the scheduler. Stage 1: four 50 MB reduce tasks of 5,
    // 5, 5, 12 s, the last one waiting 7 s for shuffle blocks. Read from an
    // interchange `tasks` table.
    let mut b = TableBuilder::new(Table::Tasks, 8);
    let rows: [(&str, &str, i64, &str, f64, f64, f64); 8] = [
        ("m0", "0", 10, "input_bytes", 100.0, 0.0, 0.0),
        ("m1", "0", 10, "input_bytes", 100.0, 0.0, 0.0),
        ("m2", "0", 10, "input_bytes", 100.0, 0.0, 0.0),
        ("m3", "0", 25, "input_bytes", 100.0, 15.0, 0.0),
        ("r0", "1", 5, "shuffle_read_bytes", 50.0, 0.0, 0.0),
        ("r1", "1", 5, "shuffle_read_bytes", 50.0, 0.0, 0.0),
        ("r2", "1", 5, "shuffle_read_bytes", 50.0, 0.0, 0.0),
        ("r3", "1", 12, "shuffle_read_bytes", 50.0, 0.0, 7.0),
    ];
    for (id, stage, secs, col, mb, sched, net) in rows {
        b.row(&[
            ("task_id", V::S(id)),
            ("query_id", V::S("Q")),
            ("stage_id", V::S(stage)),
            ("host", V::S(id)),
            ("launch_time", V::T(0)),
            ("finish_time", V::T(secs * S)),
            (col, V::F(mb * MB)),
            ("scheduler_delay", V::F(sched)),
            ("network_blocked", V::F(net)),
        ]);
    }
    let ds = Dataset::from_batches(&[], &[b.finish()], &[], &[]);
    let m3 = ds.task("m3").unwrap();
    assert_eq!(ds.totals(m3).scheduler_delay, 15.0);
    assert_eq!(ds.task_names()[m3 as usize], "m3");
    let rows = stragglers(&ds, "Q", None, None).unwrap();
    let got: Vec<(&str, &str, &Vec<StragglerCause>)> = rows
        .iter()
        .map(|r| (r.stage.as_str(), r.task.as_str(), &r.causes))
        .collect();
    assert_eq!(
        got,
        vec![
            ("0", "m3", &vec![StragglerCause::SchedulerDelay]),
            ("1", "r3", &vec![StragglerCause::ShuffleRead]),
        ]
    );
    assert!(close(rows[1].rate, 12.0 / (50.0 * MB)));
    assert!(close(rows[1].stage_median, 5.0 / (50.0 * MB)));
    // What-if without scheduler delay: m3 takes 10 s; eight slots, stages
    // unrelated: 25 s become 12 s (r3).
    let r = &what_if(&ds, "Q", Some(WhatIfResource::SchedulerDelay), None, None).unwrap()[0];
    assert_eq!(r.slots, 8);
    assert_eq!((r.original_seconds, r.without_seconds), (25.0, 12.0));
}

/// The test's own straggler rule: rate above 1.5 times the stage median.
fn own_stragglers(durs: &[f64], bytes: &[f64]) -> Vec<bool> {
    let mut rates: Vec<f64> = durs.iter().zip(bytes).map(|(d, b)| d / b).collect();
    let all = rates.clone();
    rates.sort_by(f64::total_cmp);
    let n = rates.len();
    let m = if n % 2 == 1 {
        rates[n / 2]
    } else {
        (rates[n / 2 - 1] + rates[n / 2]) / 2.0
    };
    all.iter().map(|r| *r > 1.5 * m).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Stragglers and their GC cause match a direct reading of §9.
    #[test]
    fn stragglers_match_the_rule(
        tasks in proptest::collection::vec((1i64..100, 1u32..50, 0u8..100), 1..20),
    ) {
        let mut ds = Dataset::new();
        let mut durs = Vec::new();
        let mut bytes = Vec::new();
        let mut gcs = Vec::new();
        for (i, (ticks, mb, gc)) in tasks.iter().enumerate() {
            let d = (ticks * TICK) as f64 / 1e6;
            let g = d * *gc as f64 / 100.0;
            let totals = Totals {
                input_bytes: *mb as f64 * MB,
                gc_seconds: g,
                ..Totals::default()
            };
            ds.add_task(&format!("t{i}"), "Q", "0", &format!("h{i}"), 0, ticks * TICK, None, totals);
            durs.push(d);
            bytes.push(*mb as f64 * MB);
            gcs.push(g);
        }
        let want = own_stragglers(&durs, &bytes);
        let without_gc: Vec<f64> = durs.iter().zip(&gcs).map(|(d, g)| d - g).collect();
        let gc_want = own_stragglers(&without_gc, &bytes);
        let rows = stragglers(&ds, "Q", None, None).unwrap();
        let got: Vec<String> = rows.iter().map(|r| r.task.clone()).collect();
        let expected: Vec<String> = (0..tasks.len())
            .filter(|&i| want[i])
            .map(|i| format!("t{i}"))
            .collect();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        let mut expected_sorted = expected.clone();
        expected_sorted.sort();
        prop_assert_eq!(got_sorted, expected_sorted);
        for r in &rows {
            let i: usize = r.task[1..].parse().unwrap();
            prop_assert_eq!(r.causes.contains(&StragglerCause::Gc), !gc_want[i], "{:?}", r);
            // One task per host, all launched at once: every task is a first
            // task, and among the first tasks it is still a straggler.
            prop_assert!(!r.causes.contains(&StragglerCause::FirstTask));
        }
    }
}

#[test]
fn estimate_sibling_stages_share_the_slots() {
    use super::estimate::{estimate, EstimateOptions};
    // Stages A and B, no parents, 4 tasks each of 100 MB on 2 hosts with 2
    // slots: alone, each takes one wave of 0.5 + 100 MB / (100 MB/s / 2) =
    // 2.5 s; A (observed first) takes the 4 slots 0-2.5 s, then B 2.5-5 s.
    let mut ds = Dataset::new();
    for (stage, at) in [("A", 0), ("B", 10 * S)] {
        for i in 0..4 {
            let t = Totals {
                input_bytes: 100.0 * MB,
                ..Totals::default()
            };
            let host = format!("h{}", i % 2);
            ds.add_task(
                &format!("{stage}{i}"),
                "Q",
                stage,
                &host,
                at,
                at + 10 * S,
                None,
                t,
            );
        }
    }
    let opts = EstimateOptions {
        theta_disk_read: Some(100.0 * MB),
        theta_network: Some(MB),
        theta_disk_write: Some(MB),
        t_load: Some(0.5),
        ..EstimateOptions::default()
    };
    let e = estimate(&ds, "Q", &opts).unwrap();
    assert_eq!((e.hosts, e.slots_per_host), (2, 2));
    let (a, b) = (&e.stages[0], &e.stages[1]);
    assert_eq!((a.stage.as_str(), b.stage.as_str()), ("A", "B"));
    assert!(close(a.task_seconds, 2.5) && close(b.task_seconds, 2.5));
    assert!(close(a.end_seconds, 2.5));
    assert!(close(b.start_seconds, 2.5) && close(b.end_seconds, 5.0));
    assert!(close(e.estimated_seconds, 5.0));
    assert!(close(e.observed_seconds, 20.0));
    // A cycle of parents is an error.
    ds.set_parents("Q", "A", &["B"]);
    ds.set_parents("Q", "B", &["A"]);
    assert!(matches!(
        estimate(&ds, "Q", &opts),
        Err(MethodError::InvalidArgument(_))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// One stage of identical tasks: the estimate is the test's own reading
    /// of 003 eq. 2-5 and §5 (waves of `hosts * delta` tasks).
    #[test]
    fn estimate_matches_the_boe_formula(
        n in 1usize..40,
        hosts in 1usize..5,
        slots in 1usize..5,
        mb in 1u32..500,
        cpu in 0u32..20,
        out_mb in 0u32..100,
        t_load in 0u32..3,
    ) {
        use super::estimate::{estimate, EstimateOptions};
        let mut ds = Dataset::new();
        for i in 0..n {
            let t = Totals {
                input_bytes: mb as f64 * MB,
                cpu_seconds: cpu as f64,
                output_bytes: out_mb as f64 * MB,
                ..Totals::default()
            };
            ds.add_task(&format!("t{i}"), "Q", "0", &format!("h{}", i % hosts), 0, S, None, t);
        }
        let (th_r, th_w) = (80.0 * MB, 40.0 * MB);
        let opts = EstimateOptions {
            theta_disk_read: Some(th_r),
            theta_disk_write: Some(th_w),
            theta_network: Some(MB),
            slots_per_host: Some(slots),
            hosts: Some(hosts),
            t_load: Some(t_load as f64),
            ..EstimateOptions::default()
        };
        let e = estimate(&ds, "Q", &opts).unwrap();
        let delta = slots.min(n.div_ceil(hosts)) as f64;
        let cores = slots as f64;
        let read = mb as f64 * MB * delta / th_r;
        let compute = cpu as f64 / (cores / delta).min(1.0);
        let write = out_mb as f64 * MB * delta / th_w;
        let task = t_load as f64 + read.max(compute) + write;
        let waves = n.div_ceil(hosts * delta as usize);
        prop_assert_eq!(e.stages.len(), 1);
        prop_assert!(close(e.stages[0].task_seconds, task), "{} {}", e.stages[0].task_seconds, task);
        prop_assert_eq!(e.stages[0].waves, waves);
        // Identical tasks: no skew.
        prop_assert_eq!(e.stages[0].skew_seconds, 0.0);
        prop_assert!(close(e.estimated_seconds, waves as f64 * task));
    }
}

#[test]
fn identical_tasks_have_exactly_no_skew() {
    // Once found by the property above: 8 tasks of 207 MB in, 33 MB out on
    // one host with 2 slots, whose BOE times summed and divided by 8 are not
    // exactly one of them.
    use super::estimate::{estimate, EstimateOptions};
    let mut ds = Dataset::new();
    for i in 0..8 {
        let t = Totals {
            input_bytes: 207.0 * MB,
            output_bytes: 33.0 * MB,
            ..Totals::default()
        };
        ds.add_task(&format!("t{i}"), "Q", "0", "h", 0, S, None, t);
    }
    let opts = EstimateOptions {
        theta_disk_read: Some(80.0 * MB),
        theta_disk_write: Some(40.0 * MB),
        theta_network: Some(MB),
        slots_per_host: Some(2),
        t_load: Some(0.0),
        ..EstimateOptions::default()
    };
    let e = estimate(&ds, "Q", &opts).unwrap();
    assert_eq!(e.stages[0].skew_seconds, 0.0);
    // 4 waves of 207 MB * 2 / 80 MB/s + 33 MB * 2 / 40 MB/s.
    assert!(close(
        e.estimated_seconds,
        4.0 * (414.0 / 80.0 + 66.0 / 40.0)
    ));
}
