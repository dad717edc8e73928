//! Windows as a series (issue #13, item 4): the use-cases over consecutive
//! windows in one call share one sweep, cut at the window bounds, instead
//! of re-running the method once per window.
//!
//! Data: `culprit generate`-style fast data (`CULPRIT_BENCH_TASKS`, default
//! 100,000 tasks on 50 hosts), its whole time span cut into 60 windows.
//! Each pair of benches computes the same thing both ways, in the same run:
//! `one_sweep` is what `aggressive_queries_series` / `culprits_series` do,
//! `per_window_calls` is one plain analysis per window (how the series
//! functions worked before, and what a client calling `culprits()` once per
//! window costs). Target: the series at least 10x faster than the calls for
//! 60 windows (docs/performance.md).

use criterion::{criterion_group, criterion_main, Criterion};
use culprit_core::method::{
    blame, blame_series, overlap, usecases, BlameOptions, Dataset, Windows,
};
use culprit_sim::{fast, FastConfig};

const WINDOWS: i64 = 60;

fn tasks() -> usize {
    std::env::var("CULPRIT_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn bench(c: &mut Criterion) {
    let n = tasks();
    let w = fast(&FastConfig {
        tasks: n,
        hosts: (n / 2000).max(1),
        ..Default::default()
    });
    let ds = Dataset::from_batches(
        std::slice::from_ref(&w.stages),
        std::slice::from_ref(&w.tasks),
        std::slice::from_ref(&w.task_windows),
        std::slice::from_ref(&w.host_windows),
    );
    drop(w);
    let from = ds
        .tasks
        .iter()
        .map(|t| t.ready.unwrap_or(t.launch).min(t.launch))
        .min()
        .expect("tasks");
    let to = ds.tasks.iter().map(|t| t.finish).max().expect("tasks") + 1;
    let step = (to - from + WINDOWS - 1) / WINDOWS;
    let windows = Windows::series(from, to, step).expect("windows");
    let all = BlameOptions {
        from: Some(from),
        to: Some(to),
        ..Default::default()
    };
    // The victim with the most tasks, for culprits_series.
    let mut per_query = vec![0usize; ds.queries.len()];
    for t in &ds.tasks {
        per_query[ds.stage_query(t.stage) as usize] += 1;
    }
    let busiest = (0..per_query.len())
        .max_by_key(|&q| per_query[q])
        .expect("queries");
    let one = BlameOptions {
        victims: Some(vec![ds.queries.name(busiest as u32).to_string()]),
        ..all.clone()
    };

    let mut g = c.benchmark_group("series");
    g.sample_size(10);
    g.bench_function("aggressive_queries/whole_range_call", |b| {
        b.iter(|| {
            let (_, l) = blame(&ds, &all).expect("blame");
            usecases::aggressive_queries(&ds, &l).len()
        })
    });
    g.bench_function(
        format!("aggressive_queries/one_sweep/{WINDOWS}_windows"),
        |b| {
            b.iter(|| {
                let (_, series) = blame_series(&ds, &all, &windows).expect("series");
                series
                    .iter()
                    .map(|l| usecases::aggressive_queries(&ds, l).len())
                    .sum::<usize>()
            })
        },
    );
    g.bench_function(
        format!("aggressive_queries/per_window_calls/{WINDOWS}_windows"),
        |b| {
            b.iter(|| {
                windows
                    .iter()
                    .map(|(s, e)| {
                        let o = BlameOptions {
                            from: Some(s),
                            to: Some(e),
                            ..all.clone()
                        };
                        let (_, l) = blame(&ds, &o).expect("blame");
                        usecases::aggressive_queries(&ds, &l).len()
                    })
                    .sum::<usize>()
            })
        },
    );
    g.bench_function("culprits/whole_range_call", |b| {
        b.iter(|| {
            let (v, l) = blame(&ds, &one).expect("blame");
            usecases::culprits(&ds, &v, &l, (from, to)).len()
        })
    });
    g.bench_function(format!("culprits/one_sweep/{WINDOWS}_windows"), |b| {
        b.iter(|| {
            let (v, series) = blame_series(&ds, &one, &windows).expect("series");
            let naive = overlap::naive_series(&ds, &v.queries, &windows);
            let deep = overlap::deep_series(&ds, &v.queries, &windows);
            series
                .iter()
                .zip(naive.iter().zip(&deep))
                .map(|(l, (n, d))| usecases::culprits_from(&ds, l, n, d).len())
                .sum::<usize>()
        })
    });
    g.bench_function(
        format!("culprits/per_window_calls/{WINDOWS}_windows"),
        |b| {
            b.iter(|| {
                windows
                    .iter()
                    .map(|(s, e)| {
                        let o = BlameOptions {
                            from: Some(s),
                            to: Some(e),
                            ..one.clone()
                        };
                        let (v, l) = blame(&ds, &o).expect("blame");
                        usecases::culprits(&ds, &v, &l, (s, e)).len()
                    })
                    .sum::<usize>()
            })
        },
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
