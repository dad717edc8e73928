//! Scheduled reports the pg_cron way, through the real server: a job on a
//! 5-second schedule runs and appends its rows to `reports.<name>` with
//! `run_id` and `scheduled_for`, a broken job records a `failed` run with
//! its error, a read role may not schedule, jobs and history survive a
//! restart, a run missed while the server was down runs once, and
//! `culprit report run` runs one from the shell.

use std::time::{Duration, Instant};

use culprit_store::Store;

use crate::common::{demo_store, run, start_server_with};
use crate::user_tables::{count, ok, psql_as, refused, rows, team_users, READER, WRITER};

const TOP: &str = "SELECT culprit_query, blame_seconds FROM culprits('q-victim') \
                   WHERE culprit_kind = 'query' AND blame_seconds > 0";

/// Waits (up to 30 s) until `sql` counts at least `n`.
fn wait_for(addr: std::net::SocketAddr, sql: &str, n: usize) -> usize {
    let start = Instant::now();
    loop {
        let c = count(addr, Some(WRITER), sql);
        if c >= n {
            return c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "waited 30 s for {n} from {sql}; have {c}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn runs(jobid: &str, status: &str) -> String {
    format!(
        "SELECT count(*) FROM cron.job_run_details WHERE jobid = {jobid} AND status = '{status}'"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_reports_run_fail_and_survive_a_restart() {
    let (_tmp, store) = demo_store();
    let (addr, server) = start_server_with(Store::open(&store).unwrap(), team_users()).await;

    // A read role may not schedule.
    refused(
        &psql_as(
            addr,
            Some(READER),
            &["-c", "SELECT cron.schedule('x', '5 seconds', $$SELECT 1$$)"],
        ),
        "a reader schedules",
        &["42501"],
    );
    // Schedules are checked when given.
    refused(
        &psql_as(
            addr,
            Some(WRITER),
            &[
                "-c",
                "SELECT cron.schedule('x', '61 * * * *', $$SELECT 1$$)",
            ],
        ),
        "a bad schedule",
        &["22023", "invalid schedule"],
    );

    let top = rows(
        addr,
        Some(WRITER),
        &format!("SELECT cron.schedule('top', '5 seconds', $${TOP}$$)"),
    );
    let broken = rows(
        addr,
        Some(WRITER),
        "SELECT cron.schedule('broken', '5 seconds', $$SELECT * FROM no_such_table$$)",
    );
    let (top, broken) = (top[0][0].clone(), broken[0][0].clone());
    assert_ne!(top, broken, "job ids");
    let jobs = rows(
        addr,
        Some(READER),
        "SELECT jobid, jobname, schedule, username, active FROM cron.job ORDER BY jobid",
    );
    assert_eq!(
        jobs,
        vec![
            vec![
                top.clone(),
                "top".into(),
                "5 seconds".into(),
                "writer".into(),
                "t".into()
            ],
            vec![
                broken.clone(),
                "broken".into(),
                "5 seconds".into(),
                "writer".into(),
                "t".into()
            ],
        ]
    );

    // Runs: the good one succeeds and keeps its rows, the broken one fails
    // with its error.
    wait_for(addr, &runs(&top, "succeeded"), 1);
    wait_for(addr, &runs(&broken, "failed"), 1);
    let message = rows(
        addr,
        Some(WRITER),
        &format!("SELECT return_message FROM cron.job_run_details WHERE jobid = {broken} LIMIT 1"),
    );
    assert!(message[0][0].contains("no_such_table"), "{message:?}");

    // The history holds the query's rows as the query gives them, per run.
    let direct = rows(addr, Some(READER), &format!("{TOP} ORDER BY 1"));
    assert!(!direct.is_empty());
    let first_run = rows(
        addr,
        Some(READER),
        "SELECT culprit_query, blame_seconds FROM reports.top \
         WHERE run_id = (SELECT min(run_id) FROM reports.top) ORDER BY 1",
    );
    assert_eq!(
        first_run, direct,
        "reports.top's first run is the query's answer"
    );
    // Every run is in cron.job_run_details with its rows' count, and its
    // scheduled_for is on the 5-second grid.
    let bad = count(
        addr,
        Some(READER),
        &format!(
            "SELECT count(*) FROM reports.top r WHERE arrow_cast(r.scheduled_for, 'Int64') % 5000000 <> 0 \
             OR r.run_id NOT IN (SELECT runid FROM cron.job_run_details WHERE jobid = {top} AND status = 'succeeded')"
        ),
    );
    assert_eq!(
        bad, 0,
        "history rows off the grid or without a succeeded run"
    );

    // Restart: jobs and history are still there and the jobs go on.
    let before = count(addr, Some(WRITER), &runs(&top, "succeeded"));
    server.abort();
    let _ = server.await;
    let stopped = chrono::Utc::now();
    // Down for two periods: the missed runs run once.
    std::thread::sleep(Duration::from_secs(11));
    let (addr, server) = start_server_with(Store::open(&store).unwrap(), team_users()).await;
    let restarted = chrono::Utc::now();
    assert!(count(addr, Some(WRITER), "SELECT count(*) FROM reports.top") >= direct.len());
    assert_eq!(
        count(addr, Some(WRITER), "SELECT count(*) FROM cron.job"),
        2
    );
    wait_for(addr, &runs(&top, "succeeded"), before + 2);
    let missed = count(
        addr,
        Some(WRITER),
        &format!(
            "SELECT count(DISTINCT run_id) FROM reports.top WHERE scheduled_for > TIMESTAMP '{}' \
             AND scheduled_for <= TIMESTAMP '{}'",
            stopped.to_rfc3339(),
            restarted.to_rfc3339()
        ),
    );
    assert_eq!(
        missed, 1,
        "runs for the times missed while the server was down"
    );

    // Unschedule: the job goes, its history stays.
    // A reader may not unschedule.
    refused(
        &psql_as(
            addr,
            Some(READER),
            &["-c", "SELECT cron.unschedule('broken')"],
        ),
        "a reader unschedules",
        &["42501"],
    );
    let gone = rows(addr, Some(WRITER), "SELECT cron.unschedule('broken')");
    assert_eq!(gone, vec![vec!["t".to_string()]]);
    assert_eq!(
        count(addr, Some(WRITER), "SELECT count(*) FROM cron.job"),
        1
    );
    assert!(count(addr, Some(WRITER), &runs(&broken, "failed")) >= 1);
    refused(
        &psql_as(
            addr,
            Some(WRITER),
            &["-c", "SELECT cron.unschedule('broken')"],
        ),
        "unscheduling a missing job",
        &["42P01", "no scheduled job"],
    );
    // Job ids are never reused.
    let again = rows(
        addr,
        Some(WRITER),
        "SELECT cron.schedule('again', '0 7 * * *', $$SELECT 1 AS one$$)",
    );
    assert!(
        again[0][0].parse::<i64>().unwrap() > broken.parse::<i64>().unwrap(),
        "a new job reuses an old id: {again:?}"
    );
    // A job may not schedule jobs.
    refused(
        &psql_as(
            addr,
            Some(WRITER),
            &[
                "-c",
                "SELECT cron.schedule('nest', '0 7 * * *', $$SELECT cron.unschedule('top')$$)",
            ],
        ),
        "a job that schedules",
        &["22023", "may not schedule"],
    );
    // Reports are the scheduler's: no CREATE TABLE, INSERT, TRUNCATE or
    // DROP TABLE in its schemas.
    for sql in [
        "CREATE TABLE reports.fake (a int)",
        "INSERT INTO reports.top (culprit_query) VALUES ('x')",
        "TRUNCATE reports.top",
        "DROP TABLE reports.top",
        "INSERT INTO cron.job_run_details (jobid) VALUES (1)",
    ] {
        refused(
            &psql_as(addr, Some(WRITER), &["-c", sql]),
            sql,
            &["42809", "scheduler"],
        );
    }
    assert!(count(addr, Some(READER), "SELECT count(*) FROM reports.top") >= direct.len());
    // NOT NULL holds on INSERT too (23502).
    ok(
        &psql_as(
            addr,
            Some(WRITER),
            &["-c", "CREATE TABLE nn (a bigint NOT NULL, b text)"],
        ),
        "CREATE TABLE nn",
    );
    refused(
        &psql_as(
            addr,
            Some(WRITER),
            &["-c", "INSERT INTO nn VALUES (NULL, 'x')"],
        ),
        "a NULL into a NOT NULL column",
        &["23502"],
    );
    server.abort();
    let _ = server.await;

    // From the shell, with the server down: one run, recorded.
    let before = {
        let m = Store::open(&store).unwrap().manifest().await.unwrap();
        m.cron_job("top").unwrap().last_runid
    };
    let out = run(&["report", "run", "--store", &store, "top"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("succeeded"),
        "culprit report run top: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = Store::open(&store).unwrap().manifest().await.unwrap();
    assert!(after.cron_job("top").unwrap().last_runid > before);
    let out = run(&["report", "run", "--store", &store, "nope"]);
    assert!(!out.status.success());
    let _ = ok;
}
