//! HTML reports in a real browser: `culprit report html --victim` and the
//! pages of reports scheduled with `format => 'html'`, opened in headless
//! Chromium (Debian's package, installed by `.ci/run`). A script added to
//! a copy of the page reads what Chromium laid out (every chart, mark and
//! label, with its size on screen) and the test checks it against SQL
//! through the real server and against the input tables.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use culprit_store::Store;
use serde_json::Value;

use crate::common::{demo_store, run, run_ok, start_server_with};
use crate::user_tables::{count, psql_as, refused, rows, team_users, READER, WRITER};

/// Reads, after layout, each chart (`figure.chart`): its size, title,
/// texts and marks (points, bars, spans) with their data and their boxes
/// on screen; and each table's cells.
const CHECK_SCRIPT: &str = r#"<script>
(() => {
  const out = {figures: [], tables: []};
  for (const fig of document.querySelectorAll('figure.chart')) {
    const svg = fig.querySelector('svg');
    const r = svg.getBoundingClientRect();
    const marks = [];
    for (const m of svg.querySelectorAll('[data-value],[data-start]')) {
      const b = m.getBoundingClientRect();
      marks.push({cls: m.getAttribute('class'), series: m.dataset.series ?? null,
        label: m.dataset.label ?? null, x: m.dataset.x ?? null,
        value: m.dataset.value === undefined ? null : parseFloat(m.dataset.value),
        start: m.dataset.start ?? null, end: m.dataset.end ?? null,
        critical: m.dataset.critical === 'true', w: b.width, h: b.height});
    }
    out.figures.push({id: fig.id, title: svg.querySelector('title')?.textContent ?? '',
      caption: fig.querySelector('figcaption')?.textContent ?? '', w: r.width, h: r.height,
      texts: [...svg.querySelectorAll('text')].map(t => t.textContent), marks});
  }
  for (const t of document.querySelectorAll('table')) {
    out.tables.push({id: t.id, rows: [...t.querySelectorAll('tr')].map(
      r => [...r.children].map(c => c.textContent))});
  }
  const pre = document.createElement('pre');
  pre.id = 'render-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"#;

/// Chromium: `$CULPRIT_CHROMIUM`, else `chromium` on the PATH. Missing,
/// the test fails (`.ci/run` installs Debian's package).
fn chromium() -> String {
    let program = std::env::var("CULPRIT_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let found = Command::new(&program).arg("--version").output();
    assert!(
        found.as_ref().is_ok_and(|o| o.status.success()),
        "headless Chromium is missing ({program}): .ci/run installs Debian's chromium, or set CULPRIT_CHROMIUM"
    );
    program
}

fn headless(page: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--window-size=1000,2600",
        ])
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium")
}

/// What Chromium laid out of `page`, and a screenshot of it.
fn render(page: &Path) -> Value {
    let html = std::fs::read_to_string(page).unwrap();
    assert!(
        !html.contains("<script"),
        "a report page must not carry scripts"
    );
    let check = page.with_extension("check.html");
    std::fs::write(
        &check,
        html.replace("</body>", &format!("{CHECK_SCRIPT}</body>")),
    )
    .unwrap();
    let out = headless(&check, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout);
    let start = dom.find("<pre id=\"render-check\">").unwrap_or_else(|| {
        panic!(
            "Chromium did not run the check on {}: {}\n{}",
            page.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    }) + "<pre id=\"render-check\">".len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let json = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    let value: Value = serde_json::from_str(&json).expect("the check's JSON");

    // The page itself renders to pixels.
    let png = page.with_extension("png");
    let out = headless(page, &[&format!("--screenshot={}", png.display())]);
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 20_000,
        "the screenshot of {} is {size} bytes: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    value
}

fn figure<'a>(check: &'a Value, id: &str) -> &'a Value {
    check["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no chart {id} in {check}"))
}

fn marks(figure: &Value) -> &Vec<Value> {
    figure["marks"].as_array().unwrap()
}

/// A chart was laid out: it has a size, a title naming `about`, the
/// labels `labels`, and every mark has a box on screen.
fn laid_out(figure: &Value, about: &str, labels: &[&str]) {
    let id = &figure["id"];
    assert!(
        figure["w"].as_f64().unwrap() > 300.0 && figure["h"].as_f64().unwrap() > 50.0,
        "{id}: not laid out: {figure}"
    );
    let title = figure["title"].as_str().unwrap();
    assert!(title.contains(about), "{id}: title {title:?}");
    assert!(
        !figure["caption"].as_str().unwrap().is_empty(),
        "{id}: no caption"
    );
    let texts: Vec<&str> = figure["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for l in labels {
        assert!(
            texts.iter().any(|t| t.contains(l)),
            "{id}: no label {l:?} in {texts:?}"
        );
    }
    assert!(!marks(figure).is_empty(), "{id}: no marks");
    for m in marks(figure) {
        assert!(
            m["w"].as_f64().unwrap() > 0.0 && m["h"].as_f64().unwrap() > 0.0,
            "{id}: a mark without a box: {m}"
        );
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Bars: their labels and values are `expected` (label, value), and each
/// bar's drawn width is in proportion to its value.
fn bars_match(figure: &Value, expected: &[(String, f64)]) {
    let id = &figure["id"];
    let got: Vec<(String, f64, f64)> = marks(figure)
        .iter()
        .map(|m| {
            (
                m["label"].as_str().unwrap().to_string(),
                m["value"].as_f64().unwrap(),
                m["w"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got.len(), expected.len(), "{id}: {got:?} vs {expected:?}");
    for ((l, v, _), (el, ev)) in got.iter().zip(expected) {
        assert_eq!(l, el, "{id}");
        assert!(close(*v, *ev), "{id}: {l} is {v}, SQL says {ev}");
    }
    let (_, vmax, wmax) =
        got.iter().cloned().fold(
            (String::new(), 0.0, 0.0),
            |a, b| if b.1 > a.1 { b } else { a },
        );
    for (l, v, w) in &got {
        // 1 px of rounding, and a bar is never drawn under 1 px.
        let want = v / vmax * wmax;
        assert!(
            (w - want).abs() <= 1.5,
            "{id}: {l} is drawn {w} px wide, {want} for its value"
        );
    }
}

fn f(s: &str) -> f64 {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// Parses an RFC 3339 time as psql or the page writes it, to µs.
fn us(s: &str) -> i64 {
    let s = s.replace(' ', "T");
    let s = if s.ends_with("+00") {
        format!("{s}:00")
    } else {
        s
    };
    chrono::DateTime::parse_from_rfc3339(&s)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .timestamp_micros()
}

const FROM: &str = "2026-01-01T00:00:19Z";
const TO: &str = "2026-01-01T00:00:28Z";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_victims_page_renders_in_chromium_and_its_numbers_are_sqls() {
    let (tmp, store) = demo_store();
    let page = tmp.path().join("victim.html");
    run_ok(&[
        "report",
        "html",
        "--store",
        &store,
        "--victim",
        "q-victim",
        "--from",
        FROM,
        "--to",
        TO,
        "--step",
        "1 second",
        "-o",
        page.to_str().unwrap(),
    ]);
    let check = render(&page);
    let (addr, _server) = start_server_with(Store::open(&store).unwrap(), team_users()).await;

    // DOR over time: one point per 1-second window for each top culprit,
    // with the DOR culprits_series gives it (0 where it has no row).
    let dor = figure(&check, "dor-over-time");
    laid_out(dor, "q-victim", &["DOR", "time (UTC)", "q-culprit"]);
    let sql = rows(
        addr,
        Some(READER),
        &format!(
            "SELECT window_start, sum(dor) FROM culprits_series('q-victim', '{FROM}', '{TO}', '1 second') \
             WHERE culprit_query = 'q-culprit' AND culprit_kind = 'query' GROUP BY 1"
        ),
    );
    let want: HashMap<i64, f64> = sql.iter().map(|r| (us(&r[0]), f(&r[1]))).collect();
    let points: Vec<&Value> = marks(dor)
        .iter()
        .filter(|m| m["series"] == "q-culprit")
        .collect();
    assert_eq!(points.len(), 9, "nine 1-second windows from {FROM} to {TO}");
    for (k, p) in points.iter().enumerate() {
        let t = us(p["x"].as_str().unwrap());
        assert_eq!(t, us(FROM) + k as i64 * 1_000_000, "window {k}");
        let v = p["value"].as_f64().unwrap();
        let w = want.get(&t).copied().unwrap_or(0.0);
        assert!(close(v, w), "window {k}: the page says {v}, SQL {w}");
    }
    assert!(
        want.values().any(|v| *v > 0.5),
        "the demo's culprit dominates some window: {want:?}"
    );

    // Blame by resource and by host (levels 2 and 3), against SQL.
    for (id, column, label) in [
        ("blame-by-resource", "resource", "slots"),
        ("blame-by-host", "host", "*"),
    ] {
        let chart = figure(&check, id);
        laid_out(chart, "q-victim", &["blocked seconds", label]);
        let expected: Vec<(String, f64)> = rows(
            addr,
            Some(READER),
            &format!(
                "SELECT {column}, sum(blame_seconds) AS s FROM blame('q-victim', '{FROM}', '{TO}') \
                 GROUP BY 1 ORDER BY s DESC, 1"
            ),
        )
        .into_iter()
        .map(|r| (r[0].clone(), f(&r[1])))
        .collect();
        bars_match(chart, &expected);
    }

    // The stages on a timeline: their times are the input's `stages`
    // rows, and the highlighted ones are critical_path's (which ends with
    // the stage that finished last).
    let timeline = figure(&check, "critical-path");
    laid_out(timeline, "q-victim", &["stage 0", "+0 s"]);
    let stages = rows(
        addr,
        Some(READER),
        "SELECT stage_id, start_time, end_time FROM stages WHERE query_id = 'q-victim' \
         ORDER BY start_time, stage_id",
    );
    let critical: Vec<String> = rows(
        addr,
        Some(READER),
        "SELECT stage_id FROM critical_path('q-victim') ORDER BY position",
    )
    .into_iter()
    .map(|r| r[0].clone())
    .collect();
    let last = stages.iter().max_by_key(|s| us(&s[2])).unwrap();
    assert_eq!(
        critical.last(),
        Some(&last[0]),
        "the path ends with the last stage"
    );
    let spans = marks(timeline);
    assert_eq!(spans.len(), stages.len());
    for (m, s) in spans.iter().zip(&stages) {
        assert_eq!(m["label"], format!("stage {}", s[0]));
        assert_eq!(us(m["start"].as_str().unwrap()), us(&s[1]), "{m}");
        assert_eq!(us(m["end"].as_str().unwrap()), us(&s[2]), "{m}");
        assert_eq!(
            m["critical"].as_bool().unwrap(),
            critical.contains(&s[0]),
            "{m}"
        );
    }
    // Widths in proportion to the stages' durations.
    let secs = |s: &Vec<String>| (us(&s[2]) - us(&s[1])) as f64;
    let (m0, s0) = (&spans[0], &stages[0]);
    for (m, s) in spans.iter().zip(&stages) {
        let want = m0["w"].as_f64().unwrap() * secs(s) / secs(s0);
        assert!(
            (m["w"].as_f64().unwrap() - want).abs() <= 1.5,
            "{m} vs {s:?}"
        );
    }

    // The ranking table: culprits()'s rows in its order.
    let ranking = check["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "ranking")
        .expect("the ranking table");
    let table: Vec<Vec<String>> = serde_json::from_value(ranking["rows"].clone()).unwrap();
    let sql = rows(
        addr,
        Some(READER),
        &format!(
            "SELECT culprit_kind, coalesce(culprit_query, ''), blame_seconds FROM culprits('q-victim', '{FROM}', '{TO}') \
             ORDER BY blame_seconds DESC, culprit_query"
        ),
    );
    assert_eq!(table.len(), sql.len() + 1, "{table:?}");
    assert_eq!(
        table[0][..3],
        ["culprit_kind", "culprit_query", "blame_seconds"]
    );
    for (t, s) in table[1..].iter().zip(&sql) {
        assert_eq!(t[..2], s[..2]);
        let (page, sql) = (f(&t[2]), f(&s[2]));
        assert!(
            (page - sql).abs() <= 5e-4 * sql.abs().max(1.0),
            "{t:?} vs {s:?}"
        );
    }
}

#[test]
fn the_default_page_and_bad_requests() {
    let (_tmp, store) = demo_store();
    // The victim's whole span, a round step, to standard output.
    let html = run_ok(&["report", "html", "--store", &store, "--victim", "q-victim"]);
    assert!(
        html.starts_with("<!DOCTYPE html>"),
        "{}",
        &html[..100.min(html.len())]
    );
    for id in [
        "dor-over-time",
        "blame-by-resource",
        "blame-by-host",
        "critical-path",
    ] {
        assert!(html.contains(&format!("<figure id=\"{id}\"")), "{id}");
    }
    assert!(html.contains("The top culprit is <b>q-culprit</b>"));

    let fails = |args: &[&str], needle: &str| {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    fails(
        &["report", "html", "--store", &store, "--victim", "nope"],
        "no tasks of query 'nope'",
    );
    fails(
        &[
            "report",
            "html",
            "--store",
            &store,
            "--victim",
            "q-victim",
            "--from",
            "yesterday",
        ],
        "not an RFC 3339 time",
    );
    fails(
        &[
            "report", "html", "--store", &store, "--victim", "q-victim", "--step", "often",
        ],
        "is not a duration",
    );
    fails(
        &["report", "html", "--store", &store, "--job", "nope"],
        "no scheduled report named 'nope'",
    );
    fails(&["report", "html", "--store", &store], "--victim");
}

/// Waits (up to 30 s) until `sql` counts at least `n`.
fn wait_for(addr: std::net::SocketAddr, sql: &str, n: usize) {
    let start = Instant::now();
    while count(addr, Some(WRITER), sql) < n {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "waited 30 s for {sql}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_scheduled_as_html_keeps_a_page_per_run() {
    let (tmp, store) = demo_store();
    let (addr, _server) = start_server_with(Store::open(&store).unwrap(), team_users()).await;
    let query = format!(
        "SELECT window_start, coalesce(culprit_query, culprit_kind) AS culprit, dor \
         FROM culprits_series('q-victim', '{FROM}', '{TO}', '1 second')"
    );
    refused(
        &psql_as(
            addr,
            Some(WRITER),
            &[
                "-c",
                &format!("SELECT cron.schedule('x', '5 seconds', $${query}$$, format => 'pdf')"),
            ],
        ),
        "an unknown format",
        &["22023", "'rows' or 'html'"],
    );
    let job = rows(
        addr,
        Some(WRITER),
        &format!("SELECT cron.schedule('dor', '5 seconds', $${query}$$, format => 'html')"),
    )[0][0]
        .clone();
    rows(
        addr,
        Some(WRITER),
        "SELECT cron.schedule('plain', '0 7 * * *', 'SELECT 1')",
    );
    assert_eq!(
        rows(
            addr,
            Some(READER),
            "SELECT jobname, format FROM cron.job ORDER BY jobid"
        ),
        vec![
            vec!["dor".to_string(), "html".into()],
            vec!["plain".into(), "rows".into()]
        ]
    );
    wait_for(
        addr,
        &format!("SELECT count(*) FROM cron.report_pages WHERE jobid = {job}"),
        1,
    );
    // The page is the scheduler's: readable, not writable.
    refused(
        &psql_as(addr, Some(WRITER), &["-c", "DELETE FROM cron.report_pages"]),
        "a page deleted by hand",
        &[],
    );
    refused(
        &psql_as(
            addr,
            Some(WRITER),
            &["-c", "INSERT INTO cron.report_pages (jobname) VALUES ('x')"],
        ),
        "a page written by hand",
        &["42809"],
    );

    // The newest page, from the shell and over the wire, is the same.
    let page = tmp.path().join("dor.html");
    run_ok(&[
        "report",
        "html",
        "--store",
        &store,
        "--job",
        "dor",
        "-o",
        page.to_str().unwrap(),
    ]);
    let run_id = rows(
        addr,
        Some(READER),
        "SELECT runid FROM cron.report_pages WHERE jobname = 'dor' ORDER BY runid DESC LIMIT 1",
    )[0][0]
        .clone();
    let wire = psql_as(
        addr,
        Some(READER),
        &[
            "-At",
            "-c",
            &format!("SELECT page FROM cron.report_pages WHERE runid = {run_id}"),
        ],
    );
    let file = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&wire.stdout).trim_end(),
        file.trim_end()
    );
    let by_run = tmp.path().join("dor-run.html");
    run_ok(&[
        "report",
        "html",
        "--store",
        &store,
        "--job",
        "dor",
        "--run",
        &run_id,
        "-o",
        by_run.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(&by_run).unwrap(), file);

    // In Chromium: a line per culprit over the windows, with the values of
    // the run's rows in reports.dor.
    let check = render(&page);
    let chart = figure(&check, "result-chart");
    laid_out(chart, "dor", &["q-culprit", "time (UTC)"]);
    let history = rows(
        addr,
        Some(READER),
        &format!("SELECT window_start, culprit, dor FROM reports.dor WHERE run_id = {run_id}"),
    );
    assert!(!history.is_empty());
    let mut want: HashMap<(String, i64), f64> = HashMap::new();
    for r in &history {
        *want.entry((r[1].clone(), us(&r[0]))).or_default() += f(&r[2]);
    }
    let points = marks(chart);
    let drawn: Vec<&Value> = points
        .iter()
        .filter(|m| m["series"] == "q-culprit")
        .collect();
    assert_eq!(
        drawn.len(),
        want.keys().filter(|k| k.0 == "q-culprit").count()
    );
    for p in points {
        let key = (
            p["series"].as_str().unwrap().to_string(),
            us(p["x"].as_str().unwrap()),
        );
        let w = want
            .get(&key)
            .unwrap_or_else(|| panic!("{key:?} is not in the history"));
        assert!(close(p["value"].as_f64().unwrap(), *w), "{key:?}");
    }
    let table = check["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "rows")
        .unwrap();
    assert_eq!(table["rows"].as_array().unwrap().len(), history.len() + 1);

    // A report of rows has no page.
    let out = run(&["report", "html", "--store", &store, "--job", "plain"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("format => 'html'"));
}
