//! Reports as self-contained HTML pages with SVG charts ([`svg`]):
//!
//! - [`victim_page`]: who slowed one query, `culprit report html --victim`:
//!   the DOR of its top culprits window after window (`culprits_series`,
//!   000 §6.2 figures 10-12), its blame by resource and by host (`blame`,
//!   levels 2 and 3), its stages on a timeline with the critical path
//!   (`critical_path`, method §8), and the ranking (`culprits`).
//! - [`result_page`]: any query's result as a table with a chart chosen
//!   from its columns: the page of a scheduled report of
//!   `format => 'html'`.
//!
//! Both are one file: inline CSS and SVG, no script, no external
//! resource.

use std::collections::HashMap;
use std::fmt::Write;

use culprit_sql::datafusion::arrow::array::{Array, Float64Array, RecordBatch, StringArray};
use culprit_sql::datafusion::arrow::compute::cast;
use culprit_sql::datafusion::arrow::datatypes::{DataType, TimeUnit};
use culprit_sql::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use culprit_sql::datafusion::prelude::SessionContext;

use super::svg::{self, escape, number, Series, Span};

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;\
margin:2em auto;max-width:62em;padding:0 1em;color:#222;line-height:1.4}\
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}\
.meta{color:#555}figure{margin:1em 0}figcaption{color:#555;font-size:.9em}\
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}\
th,td{border:1px solid #ddd;padding:.2em .6em;text-align:left}td.num{text-align:right;\
font-variant-numeric:tabular-nums}th{background:#f4f4f4}svg{max-width:100%;height:auto}\
footer{margin-top:3em;color:#777;font-size:.85em}";

/// What to show in a victim's page.
#[derive(Debug, Clone)]
pub struct VictimReport {
    pub victim: String,
    /// The analysis window (RFC 3339); `None`: the victim's tasks' span
    /// (from the first ready for a slot, or launched, to the last
    /// finished) for the series, unbounded for the other analyses.
    pub from: Option<String>,
    pub to: Option<String>,
    /// Seconds per window of the series; `None`: a round step giving at
    /// most 40 windows.
    pub step: Option<f64>,
    /// Culprits drawn over time.
    pub top: usize,
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

async fn query(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>, String> {
    let df = ctx.sql(sql).await.map_err(|e| e.to_string())?;
    df.collect().await.map_err(|e| e.to_string())
}

/// A column of every batch, cast to `to`.
fn column(
    batches: &[RecordBatch],
    name: &str,
    to: &DataType,
) -> Result<Vec<std::sync::Arc<dyn Array>>, String> {
    batches
        .iter()
        .map(|b| {
            let c = b
                .column_by_name(name)
                .ok_or_else(|| format!("no column {name}"))?;
            cast(c, to).map_err(|e| e.to_string())
        })
        .collect()
}

fn texts(batches: &[RecordBatch], name: &str) -> Result<Vec<Option<String>>, String> {
    let mut out = Vec::new();
    for a in column(batches, name, &DataType::Utf8)? {
        let a = a.as_any().downcast_ref::<StringArray>().ok_or("not text")?;
        out.extend(a.iter().map(|v| v.map(str::to_string)));
    }
    Ok(out)
}

fn floats(batches: &[RecordBatch], name: &str) -> Result<Vec<Option<f64>>, String> {
    let mut out = Vec::new();
    for a in column(batches, name, &DataType::Float64)? {
        let a = a
            .as_any()
            .downcast_ref::<Float64Array>()
            .ok_or("not a number")?;
        out.extend(a.iter());
    }
    Ok(out)
}

/// A timestamp column as µs since the epoch.
fn micros(batches: &[RecordBatch], name: &str) -> Result<Vec<Option<i64>>, String> {
    let mut out = Vec::new();
    let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
    for a in column(batches, name, &ts)? {
        let a = cast(&a, &DataType::Int64).map_err(|e| e.to_string())?;
        let a = a
            .as_any()
            .downcast_ref::<culprit_sql::datafusion::arrow::array::Int64Array>()
            .ok_or("not a time")?;
        out.extend(a.iter());
    }
    Ok(out)
}

fn parse_time(what: &str, s: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_micros())
        .map_err(|e| format!("{what} '{s}' is not an RFC 3339 time (2026-01-01T00:00:00Z): {e}"))
}

/// A round window length (seconds) giving at most `max` windows over
/// `span` seconds.
pub fn default_step(span: f64, max: f64) -> f64 {
    const STEPS: [f64; 21] = [
        0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
        3600.0, 7200.0, 21600.0, 43200.0, 86400.0, 604800.0,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| span / s <= max)
        .unwrap_or_else(|| (span / max).ceil())
}

/// A step in seconds as text a person reads ("500 ms", "10 s", "5 min").
fn step_text(s: f64) -> String {
    if s < 1.0 {
        format!("{} ms", number(s * 1000.0))
    } else if s < 120.0 {
        format!("{} s", number(s))
    } else if s < 7200.0 {
        format!("{} min", number(s / 60.0))
    } else {
        format!("{} h", number(s / 3600.0))
    }
}

/// The name a culprit goes by in charts: its query, or its kind.
fn culprit_name(kind: &Option<String>, query: &Option<String>) -> String {
    match (kind.as_deref(), query) {
        (Some("query"), Some(q)) => q.clone(),
        (Some("self"), Some(q)) => format!("{q} (self)"),
        (Some(k), _) => k.to_string(),
        (None, Some(q)) => q.clone(),
        (None, None) => "?".into(),
    }
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"culprit {}\">\n<title>{}</title>\n<style>{STYLE}</style>\n\
         </head>\n<body>\n{body}<footer>Written by culprit {} on {} UTC.</footer>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        escape(title),
        env!("CARGO_PKG_VERSION"),
        chrono::Utc::now().format("%Y-%m-%d %H:%M:%S")
    )
}

/// An HTML table of the batches (at most `limit` rows).
fn table(id: &str, batches: &[RecordBatch], limit: usize) -> String {
    let Some(first) = batches.first() else {
        return "<p>No rows.</p>\n".into();
    };
    let schema = first.schema();
    let mut out = format!("<table id=\"{id}\">\n<thead><tr>");
    for f in schema.fields() {
        let _ = write!(out, "<th>{}</th>", escape(f.name()));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    let options = FormatOptions::default().with_null("");
    let mut shown = 0usize;
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    'rows: for b in batches {
        let formatters: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).ok())
            .collect();
        for row in 0..b.num_rows() {
            if shown == limit {
                break 'rows;
            }
            out.push_str("<tr>");
            for (i, f) in formatters.iter().enumerate() {
                let numeric = b.column(i).data_type().is_numeric();
                let text = match f {
                    // `try_to_string`: a value that cannot be shown is an
                    // error, not a panic of `to_string`.
                    Some(f) => f
                        .value(row)
                        .try_to_string()
                        .unwrap_or_else(|e| format!("? ({e})")),
                    None => String::from("?"),
                };
                let text = if numeric && b.column(i).data_type().is_floating() {
                    text.parse::<f64>().map(number).unwrap_or(text)
                } else {
                    text
                };
                let _ = write!(
                    out,
                    "<td{}>{}</td>",
                    if numeric { " class=\"num\"" } else { "" },
                    escape(&text)
                );
            }
            out.push_str("</tr>\n");
            shown += 1;
        }
    }
    out.push_str("</tbody>\n</table>\n");
    if total > shown {
        let _ = writeln!(
            out,
            "<p class=\"meta\">The first {shown} of {total} rows.</p>"
        );
    }
    out
}

/// Who slowed one query, as a page.
pub async fn victim_page(ctx: &SessionContext, report: &VictimReport) -> Result<String, String> {
    let v = quote(&report.victim);
    let info = query(
        ctx,
        &format!(
            "SELECT q.user, q.pool, min(coalesce(t.ready_time, t.launch_time)) AS first_launch, max(t.finish_time) AS last_finish, \
             count(*) AS tasks FROM tasks t LEFT JOIN queries q ON q.query_id = t.query_id \
             WHERE t.query_id = {v} GROUP BY q.user, q.pool"
        ),
    )
    .await?;
    let (Some(Some(lo)), Some(Some(hi))) = (
        micros(&info, "first_launch")?.first().copied(),
        micros(&info, "last_finish")?.first().copied(),
    ) else {
        return Err(format!(
            "no tasks of query '{}' in the store: nothing to report",
            report.victim
        ));
    };
    let user = texts(&info, "user")?.first().cloned().flatten();
    let pool = texts(&info, "pool")?.first().cloned().flatten();
    let from = match &report.from {
        Some(s) => parse_time("--from", s)?,
        None => lo,
    };
    let to = match &report.to {
        Some(s) => parse_time("--to", s)?,
        None => hi.max(lo + 1),
    };
    if from >= to {
        return Err("the report's 'from' must be before its 'to'".into());
    }
    let window = match (&report.from, &report.to) {
        (None, None) => String::new(),
        _ => format!(
            ", {}, {}",
            report.from.as_deref().map_or("NULL".into(), quote),
            report.to.as_deref().map_or("NULL".into(), quote)
        ),
    };
    let step = report
        .step
        .unwrap_or_else(|| default_step((to - from) as f64 / 1e6, 40.0));
    if !(step.is_finite() && step > 0.0) {
        return Err(format!(
            "the step must be a positive number of seconds, not {step}"
        ));
    }

    // The ranking (level 6) and the series.
    let ranking = query(
        ctx,
        &format!(
            "SELECT culprit_kind, culprit_query, blame_seconds, dor, naive_overlap_seconds, \
             deep_overlap_seconds FROM culprits({v}{window}) ORDER BY blame_seconds DESC, culprit_query"
        ),
    )
    .await?;
    let kinds = texts(&ranking, "culprit_kind")?;
    let queries = texts(&ranking, "culprit_query")?;
    let blames = floats(&ranking, "blame_seconds")?;
    let blocked: f64 = blames.iter().flatten().sum();
    let top: Vec<String> = kinds
        .iter()
        .zip(&queries)
        .zip(&blames)
        .filter(|(_, b)| b.unwrap_or(0.0) > 0.0)
        .map(|((k, q), _)| culprit_name(k, q))
        .take(report.top)
        .collect();
    let series_rows = query(
        ctx,
        &format!(
            "SELECT window_start, culprit_kind, culprit_query, dor FROM culprits_series({v}, {}, {}, {step}) \
             ORDER BY window_start",
            quote(&svg::rfc3339(from)),
            quote(&svg::rfc3339(to)),
        ),
    )
    .await?;
    let starts = micros(&series_rows, "window_start")?;
    let s_kinds = texts(&series_rows, "culprit_kind")?;
    let s_queries = texts(&series_rows, "culprit_query")?;
    let dors = floats(&series_rows, "dor")?;
    let mut dor_at: HashMap<(String, i64), f64> = HashMap::new();
    for i in 0..starts.len() {
        if let (Some(t), Some(d)) = (starts[i], dors[i]) {
            *dor_at
                .entry((culprit_name(&s_kinds[i], &s_queries[i]), t))
                .or_default() += d;
        }
    }
    let step_us = (step * 1e6).round().max(1.0) as i64;
    let grid: Vec<i64> = (0..)
        .map(|k: i64| from + k * step_us)
        .take_while(|t| *t < to)
        .take(10_000)
        .collect();
    let series: Vec<Series> = top
        .iter()
        .map(|name| Series {
            name: name.clone(),
            points: grid
                .iter()
                .map(|t| (*t, dor_at.get(&(name.clone(), *t)).copied().unwrap_or(0.0)))
                .collect(),
        })
        .collect();

    // Levels 2 and 3, from one blame() call summed by (resource, host).
    let cells = query(
        ctx,
        &format!(
            "SELECT resource, host, sum(blame_seconds) AS seconds FROM blame({v}{window}) \
             GROUP BY resource, host"
        ),
    )
    .await?;
    let seconds: Vec<f64> = floats(&cells, "seconds")?
        .into_iter()
        .map(|v| v.unwrap_or(0.0))
        .collect();
    let resource_bars = bars(texts(&cells, "resource")?, &seconds, usize::MAX);
    let host_bars = bars(texts(&cells, "host")?, &seconds, 25);

    // The stages and the critical path (method §8).
    let path = query(
        ctx,
        &format!("SELECT stage_id FROM critical_path({v}) ORDER BY position"),
    )
    .await?;
    let critical: Vec<String> = texts(&path, "stage_id")?.into_iter().flatten().collect();
    let stages = query(
        ctx,
        &format!(
            "SELECT stage_id, start_time, end_time FROM stages WHERE query_id = {v} \
             AND start_time IS NOT NULL AND end_time IS NOT NULL ORDER BY start_time, stage_id"
        ),
    )
    .await?;
    let ids = texts(&stages, "stage_id")?;
    let s_start = micros(&stages, "start_time")?;
    let s_end = micros(&stages, "end_time")?;
    let mut spans: Vec<Span> = Vec::new();
    let total_stages = ids.len();
    for i in 0..ids.len() {
        let (Some(id), Some(a), Some(b)) = (&ids[i], s_start[i], s_end[i]) else {
            continue;
        };
        let highlight = critical.contains(id);
        if spans.len() >= 60 && !highlight {
            continue;
        }
        spans.push(Span {
            label: format!("stage {id}"),
            start: a,
            end: b,
            highlight,
        });
    }

    let name = escape(&report.victim);
    let mut body = String::new();
    let _ = writeln!(body, "<h1>Who slowed <code>{name}</code>?</h1>");
    let _ = writeln!(
        body,
        "<p class=\"meta\">{}{}tasks ready from {} and done by {} ({} s, slot waits included). Analysis window: {}. \
         Method: iQCAR's blocked-time attribution (method §5-6; 000 §4).</p>",
        user.map(|u| format!("User <b>{}</b>, ", escape(&u)))
            .unwrap_or_default(),
        pool.map(|p| format!("pool <b>{}</b>; ", escape(&p)))
            .unwrap_or_default(),
        svg::rfc3339(lo),
        svg::rfc3339(hi),
        number((hi - lo) as f64 / 1e6),
        if window.is_empty() {
            "the whole store".to_string()
        } else {
            format!(
                "{} to {}",
                escape(report.from.as_deref().unwrap_or("the start")),
                escape(report.to.as_deref().unwrap_or("the end"))
            )
        }
    );
    match top.first() {
        Some(first) => {
            let dor = floats(&ranking, "dor")?.first().copied().flatten();
            let _ = writeln!(
                body,
                "<p id=\"summary\">Its tasks were blocked for <b>{}</b> s in all (summed over \
                 its tasks and resources). The top culprit is \
                 <b>{}</b>, with <b>{}</b> s (degree of responsibility {}).</p>",
                number(blocked),
                escape(first),
                number(blames[0].unwrap_or(0.0)),
                dor.map(number).unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(
                body,
                "<p id=\"summary\">Its tasks were not blocked in this window: there is no culprit.</p>"
            );
        }
    }
    body.push_str("<h2>Culprits over time</h2>\n");
    body.push_str(&svg::line_chart(
        "dor-over-time",
        &format!(
            "Degree of responsibility of the top {} culprits of {}, per {} window",
            top.len(),
            report.victim,
            step_text(step)
        ),
        &format!(
            "culprits_series('{}', from, to, {step}): each window's DOR (000 §6.2, figures 10-12); \
             a culprit absent from a window is drawn at 0.",
            report.victim
        ),
        "DOR",
        &series,
        (from, to),
        Some(1.0),
    ));
    body.push_str("<h2>Blame by resource and by host</h2>\n");
    body.push_str(&svg::bar_chart(
        "blame-by-resource",
        &format!("Blocked seconds of {} by resource", report.victim),
        "blame(victim) summed by resource (iQC-Graph level 2).",
        "blocked seconds",
        &resource_bars,
    ));
    body.push_str(&svg::bar_chart(
        "blame-by-host",
        &format!("Blocked seconds of {} by host", report.victim),
        "blame(victim) summed by host (level 3; * is the cluster's task slots).",
        "blocked seconds",
        &host_bars,
    ));
    body.push_str("<h2>Stages and critical path</h2>\n");
    body.push_str(&svg::timeline(
        "critical-path",
        &format!("Stages of {} and its critical path", report.victim),
        &format!(
            "The stages' run times; in colour the critical path (critical_path, method §8): \
             {} of {} stages{}.",
            critical.len(),
            total_stages,
            if total_stages > spans.len() {
                format!(", {} drawn", spans.len())
            } else {
                String::new()
            }
        ),
        &spans,
        lo,
    ));
    body.push_str("<h2>Ranking</h2>\n");
    let _ = writeln!(
        body,
        "<p class=\"meta\">culprits('{}'): blame with the overlap baselines (000 §6.1) \
         that would have misled.</p>",
        escape(&report.victim)
    );
    body.push_str(&table("ranking", &ranking, 200));
    Ok(page(
        &format!("culprit: who slowed {}?", report.victim),
        &body,
    ))
}

/// The page a run of report `job` (scheduled with `format => 'html'`)
/// stored: run `run`'s, or the newest.
pub async fn stored_page(
    store: &culprit_store::Store,
    job: &str,
    run: Option<i64>,
) -> Result<String, String> {
    let ctx = culprit_sql::session(store.clone())
        .await
        .map_err(|e| e.to_string())?;
    let sql = format!(
        "SELECT page FROM {} WHERE jobname = {}{} ORDER BY runid DESC LIMIT 1",
        culprit_store::PAGES_TABLE,
        quote(job),
        run.map(|r| format!(" AND runid = {r}")).unwrap_or_default()
    );
    let batches = culprit_sql::user_tables::run_sql(&ctx, store, &sql)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(Some(page)) = texts(&batches, "page")?.into_iter().next() {
        return Ok(page);
    }
    let manifest = store.manifest().await.map_err(|e| e.to_string())?;
    Err(match (manifest.cron_job(job), run) {
        (None, _) => format!("no scheduled report named '{job}' in {store}"),
        (Some(j), _) if j.format.as_deref() != Some("html") => format!(
            "report '{job}' was not scheduled with format => 'html': it keeps rows only \
             (reports.{job}); schedule it again with format => 'html'"
        ),
        (Some(_), Some(r)) => format!("report '{job}' has no page of run {r}"),
        (Some(_), None) => format!("report '{job}' has no page yet: it has not run"),
    })
}

/// Bars of `seconds` summed by `labels`, largest first (ties by label):
/// the first `keep`, then the rest summed.
fn bars(labels: Vec<Option<String>>, seconds: &[f64], keep: usize) -> Vec<(String, f64)> {
    let mut sums: HashMap<String, f64> = HashMap::new();
    for (l, v) in labels.into_iter().zip(seconds) {
        *sums.entry(l.unwrap_or_default()).or_default() += v;
    }
    let mut all: Vec<(String, f64)> = sums.into_iter().collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if all.len() > keep {
        let rest = all.split_off(keep);
        let total = rest.iter().map(|r| r.1).sum();
        all.push((format!("{} others", rest.len()), total));
    }
    all
}

/// A line being gathered: its label, points, and the sum of |values|.
type Line = (String, Vec<(i64, f64)>, f64);

/// What chart a result gets, from its columns.
enum Shape {
    /// Values over time, one line per label.
    Lines {
        time: String,
        label: Option<String>,
        value: String,
    },
    /// One bar per row.
    Bars {
        label: String,
        value: String,
    },
    None,
}

/// The chart of a result: x the first timestamp column, the value the
/// first floating-point column (else integer column), the label the
/// first text column whose values vary; with a time, lines over time
/// (one per label), without, bars.
fn shape(batches: &[RecordBatch]) -> Shape {
    let Some(first) = batches.first() else {
        return Shape::None;
    };
    let schema = first.schema();
    let fields = schema.fields();
    let time = fields
        .iter()
        .find(|f| matches!(f.data_type(), DataType::Timestamp(_, _)) && f.name() != "scheduled_for")
        .map(|f| f.name().clone());
    let value = fields
        .iter()
        .find(|f| f.data_type().is_floating())
        .or_else(|| {
            fields
                .iter()
                .find(|f| f.data_type().is_integer() && f.name() != "run_id")
        })
        .map(|f| f.name().clone());
    let label = fields
        .iter()
        .filter(|f| {
            matches!(
                f.data_type(),
                DataType::Utf8
                    | DataType::LargeUtf8
                    | DataType::Utf8View
                    | DataType::Dictionary(_, _)
            )
        })
        .find(|f| {
            texts(batches, f.name())
                .map(|v| {
                    let mut distinct = v.iter().collect::<Vec<_>>();
                    distinct.sort();
                    distinct.dedup();
                    distinct.len() > 1
                })
                .unwrap_or(false)
        })
        .map(|f| f.name().clone());
    match (time, value, label) {
        (Some(time), Some(value), label) => Shape::Lines { time, label, value },
        (None, Some(value), Some(label)) => Shape::Bars { label, value },
        _ => Shape::None,
    }
}

/// Any result as a page: `title`, a line of context, a chart chosen from
/// its columns ([`shape`]), and the rows (at most 1,000).
pub fn result_page(title: &str, context: &str, batches: &[RecordBatch]) -> String {
    let mut body = format!(
        "<h1>{}</h1>\n<p class=\"meta\">{}</p>\n",
        escape(title),
        escape(context)
    );
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let chart =
        match shape(batches) {
            Shape::Lines { time, label, value } => {
                (|| -> Result<String, String> {
                    let t = micros(batches, &time)?;
                    let v = floats(batches, &value)?;
                    let l = match &label {
                        Some(l) => texts(batches, l)?,
                        None => vec![None; t.len()],
                    };
                    // (label, its points, the sum of its |values|)
                    let mut by: Vec<Line> = Vec::new();
                    for i in 0..t.len() {
                        let (Some(t), Some(v)) = (t[i], v[i]) else {
                            continue;
                        };
                        let name = l[i].clone().unwrap_or_else(|| value.clone());
                        match by.iter_mut().find(|s| s.0 == name) {
                            Some(s) => {
                                s.1.push((t, v));
                                s.2 += v.abs();
                            }
                            None => by.push((name, vec![(t, v)], v.abs())),
                        }
                    }
                    by.sort_by(|a, b| b.2.total_cmp(&a.2));
                    let lines: Vec<Series> = by
                        .into_iter()
                        .take(8)
                        .map(|(name, mut points, _)| {
                            points.sort_by_key(|p| p.0);
                            Series { name, points }
                        })
                        .collect();
                    let lo = lines
                        .iter()
                        .flat_map(|s| s.points.iter().map(|p| p.0))
                        .min();
                    let hi = lines
                        .iter()
                        .flat_map(|s| s.points.iter().map(|p| p.0))
                        .max();
                    let (lo, hi) = (lo.unwrap_or(0), hi.unwrap_or(1));
                    Ok(svg::line_chart(
                "result-chart",
                &format!(
                    "{value} over {time}{}",
                    label.as_ref().map(|l| format!(" by {l}")).unwrap_or_default()
                ),
                "The first timestamp column across, the first numeric column up, one line per \
                 value of the first text column that varies (the 8 largest).",
                &value,
                &lines,
                (lo, hi.max(lo + 1)),
                None,
            ))
                })()
            }
            Shape::Bars { label, value } => {
                (|| -> Result<String, String> {
                    let l = texts(batches, &label)?;
                    let v = floats(batches, &value)?;
                    let bars: Vec<(String, f64)> = l
                        .into_iter()
                        .zip(v)
                        .take(30)
                        .map(|(l, v)| (l.unwrap_or_default(), v.unwrap_or(0.0)))
                        .collect();
                    Ok(svg::bar_chart(
                        "result-chart",
                        &format!("{value} by {label}"),
                        &format!(
                    "The first numeric column per value of the first text column that varies, \
                     in the result's order{}.",
                    if rows > 30 { " (the first 30 rows)" } else { "" }
                ),
                        &value,
                        &bars,
                    ))
                })()
            }
            Shape::None => Ok(String::new()),
        };
    match chart {
        Ok(c) => body.push_str(&c),
        Err(e) => {
            let _ = writeln!(body, "<p class=\"meta\">No chart: {}</p>", escape(&e));
        }
    }
    let _ = writeln!(
        body,
        "<h2>Rows</h2>\n<p class=\"meta\">{rows} row{}.</p>",
        if rows == 1 { "" } else { "s" }
    );
    body.push_str(&table("rows", batches, 1000));
    page(title, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use culprit_sql::datafusion::arrow::array::{ArrayRef, TimestampMicrosecondArray};
    use culprit_sql::datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    #[test]
    fn steps_are_round() {
        assert_eq!(default_step(7.4, 40.0), 0.2);
        assert_eq!(default_step(3600.0, 40.0), 120.0);
        assert_eq!(default_step(1e9, 40.0), 25_000_000.0);
    }

    #[test]
    fn a_result_with_a_time_is_drawn_as_lines_per_label() {
        let schema = Arc::new(Schema::new(vec![
            Field::new(
                "window_start",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("victim", DataType::Utf8, true),
            Field::new("culprit", DataType::Utf8, true),
            Field::new("dor", DataType::Float64, true),
        ]));
        let cols: Vec<ArrayRef> = vec![
            Arc::new(
                TimestampMicrosecondArray::from(vec![0, 0, 1_000_000, 1_000_000])
                    .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec!["v"; 4])),
            Arc::new(StringArray::from(vec!["a", "<b>", "a", "<b>"])),
            Arc::new(Float64Array::from(vec![0.25, 0.75, 1.0, 0.0])),
        ];
        let batch = RecordBatch::try_new(schema, cols).unwrap();
        let html = result_page("t", "c", &[batch]);
        // One line per culprit (the victim column does not vary), each
        // point carrying its value.
        assert!(html.contains("data-series=\"a\""), "{html}");
        assert!(html.contains("data-series=\"&lt;b&gt;\""));
        assert!(!html.contains("data-series=\"v\""));
        assert!(html.contains("data-value=\"0.75\""));
        assert!(html.contains("<td class=\"num\">0.25</td>"));
        assert!(!html.contains("<b>"));
    }
}
