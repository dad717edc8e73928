//! An analysis over every victim of a store too large for the dataset
//! cache is explained group by group of victims (`Engine::victim_groups`),
//! through the real binary: its numbers are checked against the input.
//! With every stage explained, each victim's blame is its tasks' blocked
//! seconds and slot waits (method.md section 5: the attribution conserves
//! them), which `task_runs` gives from the `tasks` table.

use crate::common::{culprit, run_ok};

/// Tasks: 12 window rows each, more than the 4 Mi window rows the dataset
/// cache holds.
const TASKS: &str = "400000";

/// Runs one statement with `culprit sql`, logging; returns (stdout, stderr).
fn sql(store: &str, statement: &str) -> (String, String) {
    let out = culprit()
        .args(["sql", "--store", store, "--format", "csv", statement])
        .env("RUST_LOG", "info")
        .output()
        .expect("run culprit sql");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(out.status.success(), "{statement}: {stderr}");
    (stdout, stderr)
}

/// The last line of a CSV answer.
fn answer(stdout: &str) -> String {
    stdout.trim().lines().last().unwrap_or_default().to_string()
}

#[test]
fn every_victim_of_a_large_store_by_groups_conserves_the_input() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in");
    let store = tmp.path().join("store");
    let store = store.to_str().unwrap();
    run_ok(&[
        "generate",
        "--out",
        data.to_str().unwrap(),
        "--tasks",
        TASKS,
        "--hosts",
        "100",
    ]);
    run_ok(&["ingest", "--store", store, data.to_str().unwrap()]);

    // Per victim query, its blame against its tasks' blocked seconds and
    // slot waits: no query differs, none is missing on either side.
    let per_query =
        "SELECT count(*) AS differ, (SELECT count(DISTINCT query_id) FROM task_runs) AS queries \
        FROM (SELECT CAST(victim_query AS VARCHAR) AS q, sum(blame_seconds) AS s \
              FROM blame(NULL, 'victim_stages=all') GROUP BY 1) b \
        FULL JOIN (SELECT query_id AS q, sum(blocked_seconds + wait_seconds) AS s \
              FROM task_runs GROUP BY 1) t ON b.q = t.q \
        WHERE abs(coalesce(b.s, 0) - coalesce(t.s, 0)) > 1e-6 * greatest(coalesce(t.s, 0), 1)";
    let (out, log) = sql(store, per_query);
    assert!(
        log.contains("groups of victims"),
        "the analysis was not explained by groups:\n{log}"
    );
    let row = answer(&out);
    let fields: Vec<&str> = row.split(',').collect();
    assert_eq!(
        fields[0], "0",
        "victims whose blame differs from the input: {row}"
    );
    let queries: usize = fields[1].parse().unwrap();
    assert!(queries > 100, "{queries} queries");

    // Every victim of victims() and culprits(NULL), each once.
    let (out, _) = sql(
        store,
        "SELECT count(*), count(DISTINCT victim_query) FROM victims()",
    );
    assert_eq!(answer(&out), format!("{queries},{queries}"));
    let (out, log) = sql(
        store,
        "SELECT count(DISTINCT victim_query) FROM culprits(NULL)",
    );
    assert!(log.contains("groups of victims"), "{log}");
    let victims: usize = answer(&out).parse().unwrap();
    assert!(victims > 0 && victims <= queries, "{victims} of {queries}");

    // One victim's culprits, asked by name and over every victim: the same.
    let one = "SELECT culprit_kind, coalesce(culprit_query, ''), round(blame_seconds, 6) \
               FROM culprits(NULL) WHERE victim_query = 'q000100' ORDER BY 1, 2, 3";
    let named = "SELECT culprit_kind, coalesce(culprit_query, ''), round(blame_seconds, 6) \
               FROM culprits('q000100') ORDER BY 1, 2, 3";
    let (a, _) = sql(store, one);
    let (b, _) = sql(store, named);
    assert!(a.lines().count() > 2, "{a}");
    assert_eq!(a, b);
}
