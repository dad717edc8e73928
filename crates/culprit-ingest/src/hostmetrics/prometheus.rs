//! Prometheus: the answers of range queries (`/api/v1/query_range`) over
//! node_exporter's series, and the client that asks them.
//!
//! The series are read raw, as node_exporter exports them (counters, and
//! one gauge), not through `rate()`: the use in a window is the exact
//! difference of two samples, so the windows of one host add up to what
//! its counters say, and no extrapolation enters. A range query gives each
//! series' value at `start + k * step` (the newest sample at or before that
//! instant); the window between two consecutive instants gets the
//! difference (for a counter that went down, a restart, the later value).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use culprit_core::Resource;
use serde::Deserialize;

use super::{counted_disk, counted_interface, HostMetricsOptions, Measured};

/// The node_exporter series culprit reads, and what each gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Metric {
    /// `node_cpu_seconds_total{cpu, mode}`: cpu used (every mode but
    /// `idle` and `iowait`); the number of `cpu` values is the capacity.
    Cpu,
    /// `node_disk_read_bytes_total{device}`: disk_read.
    DiskRead,
    /// `node_disk_written_bytes_total{device}`: disk_write.
    DiskWritten,
    /// `node_network_receive_bytes_total{device}`: network.
    NetworkReceive,
    /// `node_network_transmit_bytes_total{device}`: the measured network
    /// capacity only.
    NetworkTransmit,
    /// `node_memory_MemAvailable_bytes` (a gauge): memory, the bytes taken
    /// in a window (how much less is available at its end).
    MemAvailable,
}

impl Metric {
    /// Every series culprit reads, in the order `collect` asks them.
    pub const ALL: [Metric; 6] = [
        Metric::Cpu,
        Metric::DiskRead,
        Metric::DiskWritten,
        Metric::NetworkReceive,
        Metric::NetworkTransmit,
        Metric::MemAvailable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Cpu => "node_cpu_seconds_total",
            Metric::DiskRead => "node_disk_read_bytes_total",
            Metric::DiskWritten => "node_disk_written_bytes_total",
            Metric::NetworkReceive => "node_network_receive_bytes_total",
            Metric::NetworkTransmit => "node_network_transmit_bytes_total",
            Metric::MemAvailable => "node_memory_MemAvailable_bytes",
        }
    }

    fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The PromQL query `collect` runs for this series: the series itself,
    /// restricted by the label matchers of `--selector` when given.
    pub fn query(self, selector: Option<&str>) -> String {
        match selector.map(str::trim).filter(|s| !s.is_empty()) {
            Some(s) => format!("{}{{{s}}}", self.name()),
            None => self.name().to_string(),
        }
    }
}

/// The identity of a series as culprit reads it: its instance, metric and
/// the labels that tell its series apart (`job` and any other label are
/// left out, so one exporter scraped by two jobs counts once).
type SeriesKey = (String, Metric, String, String, String);

/// The answers read in one ingest: every series' samples, merged.
#[derive(Default)]
pub struct Answers {
    series: BTreeMap<SeriesKey, BTreeMap<i64, f64>>,
    /// Series of other metrics, by name: not read.
    other: BTreeMap<String, usize>,
    /// Series without an `instance` label.
    no_instance: usize,
    /// Samples that are no finite number (`NaN`, `+Inf`).
    not_finite: usize,
    warnings: BTreeSet<String>,
}

/// The head of an answer: its status and the kind of its result.
#[derive(Deserialize)]
struct Head {
    status: String,
    #[serde(default)]
    data: Option<HeadData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
struct HeadData {
    #[serde(rename = "resultType")]
    result_type: String,
}

#[derive(Deserialize)]
struct Matrix {
    data: MatrixData,
}

#[derive(Deserialize)]
struct MatrixData {
    result: Vec<RangeSeries>,
}

#[derive(Deserialize)]
struct RangeSeries {
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

/// Checks that a text is the successful answer of a range query; the error
/// says what it is instead.
pub fn check_answer(text: &[u8]) -> Result<(), String> {
    head(text).map(|_| ())
}

fn head(text: &[u8]) -> Result<Head, String> {
    let head: Head =
        serde_json::from_slice(text).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if head.status != "success" {
        return Err(format!(
            "a Prometheus error answer: {}{}",
            head.error_type
                .as_deref()
                .map(|t| format!("{t}: "))
                .unwrap_or_default(),
            head.error.as_deref().unwrap_or("(no message)")
        ));
    }
    match head.data.as_ref().map(|d| d.result_type.as_str()) {
        Some("matrix") => Ok(head),
        Some(other) => Err(format!(
            "a Prometheus answer of resultType '{other}': culprit reads the answers of range queries (/api/v1/query_range, resultType 'matrix')"
        )),
        None => Err("a Prometheus answer without data".into()),
    }
}

/// Microseconds from Prometheus' float seconds.
fn micros(seconds: f64) -> Option<i64> {
    let us = (seconds * 1e6).round();
    (us.is_finite() && us.abs() < 9e18).then_some(us as i64)
}

impl Answers {
    pub fn is_empty(&self) -> bool {
        self.series.is_empty() && self.other.is_empty() && self.no_instance == 0
    }

    /// Reads one answer; an error says why it is not one culprit reads.
    pub fn add(&mut self, text: &[u8]) -> Result<(), String> {
        let head = head(text)?;
        self.warnings.extend(head.warnings);
        let matrix: Matrix = serde_json::from_slice(text)
            .map_err(|e| format!("a Prometheus answer culprit cannot read: {e}"))?;
        for s in matrix.data.result {
            let name = s.metric.get("__name__").map(String::as_str).unwrap_or("");
            let Some(metric) = Metric::from_name(name) else {
                let name = if name.is_empty() {
                    "(no __name__)"
                } else {
                    name
                };
                *self.other.entry(name.to_string()).or_default() += 1;
                continue;
            };
            let Some(instance) = s.metric.get("instance") else {
                self.no_instance += 1;
                continue;
            };
            let label = |l: &str| s.metric.get(l).cloned().unwrap_or_default();
            let key = (
                instance.clone(),
                metric,
                label("cpu"),
                label("mode"),
                label("device"),
            );
            let points = self.series.entry(key).or_default();
            for (t, v) in &s.values {
                match (micros(*t), v.parse::<f64>()) {
                    (Some(t), Ok(v)) if v.is_finite() => {
                        points.entry(t).or_insert(v);
                    }
                    _ => self.not_finite += 1,
                }
            }
        }
        Ok(())
    }

    /// Adds the windows of every series to `measured`.
    pub(super) fn translate(
        self,
        opts: &HostMetricsOptions,
        measured: &mut Measured,
        notes: &mut Vec<String>,
    ) {
        let devices = opts.devices.as_ref();
        // By host: two instances of one host (an alias, two jobs) are one
        // machine, so their series merge (the first instance's sample wins
        // at an instant both have).
        type HostKey = (String, Metric, String, String, String);
        let mut by_host: BTreeMap<HostKey, BTreeMap<i64, f64>> = BTreeMap::new();
        let mut renamed: BTreeMap<String, String> = BTreeMap::new();
        let mut skipped: BTreeSet<String> = BTreeSet::new();
        for ((instance, metric, cpu, mode, device), points) in self.series {
            let counted = match metric {
                Metric::DiskRead | Metric::DiskWritten => counted_disk(&device, devices),
                Metric::NetworkReceive | Metric::NetworkTransmit => {
                    counted_interface(&device, devices)
                }
                Metric::Cpu | Metric::MemAvailable => true,
            };
            if !counted {
                skipped.insert(device);
                continue;
            }
            let host = opts.host_map.host(&instance);
            if host != instance {
                renamed.insert(instance, host.clone());
            }
            let merged = by_host
                .entry((host, metric, cpu, mode, device))
                .or_default();
            for (t, v) in points {
                merged.entry(t).or_insert(v);
            }
        }
        let mut cores: BTreeMap<(String, i64, i64), BTreeSet<String>> = BTreeMap::new();
        for ((host, metric, cpu, mode, _), points) in &by_host {
            for (start, end, v0, v1) in steps(points) {
                let counter = if v1 >= v0 { v1 - v0 } else { v1 };
                match metric {
                    Metric::Cpu => {
                        cores
                            .entry((host.clone(), start, end))
                            .or_default()
                            .insert(cpu.clone());
                        let a = measured.add(host, Resource::Cpu, start, end);
                        if mode != "idle" && mode != "iowait" {
                            a.used += counter;
                        }
                    }
                    Metric::DiskRead => {
                        measured.add(host, Resource::DiskRead, start, end).used += counter
                    }
                    Metric::DiskWritten => {
                        measured.add(host, Resource::DiskWrite, start, end).used += counter
                    }
                    Metric::NetworkReceive => {
                        measured.add(host, Resource::Network, start, end).used += counter
                    }
                    Metric::NetworkTransmit => {
                        measured
                            .add(host, Resource::Network, start, end)
                            .transmitted += counter
                    }
                    Metric::MemAvailable => {
                        measured.add(host, Resource::Memory, start, end).used += (v0 - v1).max(0.0)
                    }
                }
            }
        }
        for ((host, start, end), cpus) in cores {
            measured.add(&host, Resource::Cpu, start, end).capacity = Some(cpus.len() as f64);
        }
        if !renamed.is_empty() {
            let list: Vec<String> = renamed.iter().map(|(i, h)| format!("{i} -> {h}")).collect();
            notes.push(format!("Prometheus instances named: {}", list.join(", ")));
        }
        if !skipped.is_empty() {
            let list: Vec<&str> = skipped.iter().map(String::as_str).collect();
            notes.push(format!(
                "devices not counted (partitions, virtual devices; --devices names them): {}",
                list.join(", ")
            ));
        }
        if !self.other.is_empty() {
            let list: Vec<String> = self
                .other
                .iter()
                .map(|(n, c)| format!("{n} x{c}"))
                .collect();
            notes.push(format!(
                "Prometheus series culprit does not read were skipped: {}",
                list.join(", ")
            ));
        }
        if self.no_instance > 0 {
            notes.push(format!(
                "{} Prometheus series without an instance label were skipped (aggregated? culprit reads the raw node_exporter series)",
                self.no_instance
            ));
        }
        if self.not_finite > 0 {
            notes.push(format!(
                "{} Prometheus samples that are no finite number were skipped",
                self.not_finite
            ));
        }
        for w in self.warnings {
            notes.push(format!("Prometheus warned: {w}"));
        }
    }
}

/// The windows of a series: consecutive samples `step` apart, where `step`
/// is the series' smallest spacing (the query's step); a longer gap (the
/// target was down, two answers that do not meet) gives no window.
fn steps(points: &BTreeMap<i64, f64>) -> Vec<(i64, i64, f64, f64)> {
    let pairs: Vec<((i64, f64), (i64, f64))> = points
        .iter()
        .map(|(t, v)| (*t, *v))
        .zip(points.iter().skip(1).map(|(t, v)| (*t, *v)))
        .collect();
    let Some(step) = pairs.iter().map(|((a, _), (b, _))| b - a).min() else {
        return Vec::new();
    };
    pairs
        .into_iter()
        .filter(|((a, _), (b, _))| (b - a) * 2 <= step * 3)
        .map(|((a, v0), (b, v1))| (a, b, v0, v1))
        .collect()
}

/// The most steps one query asks for (Prometheus refuses more than 11,000
/// points per series; fewer keep each answer small).
pub const MAX_STEPS: i64 = 1000;

/// The query ranges that cover `[from, to]` at `step` (microseconds):
/// aligned to multiples of the step (so windows collected at different
/// times are the same windows), at most [`MAX_STEPS`] steps each, each
/// starting where the one before ends (so no window is lost between them).
pub fn chunks(from: i64, to: i64, step: i64) -> Vec<(i64, i64)> {
    if step <= 0 {
        return Vec::new();
    }
    let first = from - from.rem_euclid(step);
    let last = to - to.rem_euclid(step);
    let mut out = Vec::new();
    let mut start = first;
    while start < last {
        let end = (start + MAX_STEPS * step).min(last);
        out.push((start, end));
        start = end;
    }
    out
}

/// Prometheus' durations: `15s`, `1m30s`, `500ms`, `1h`, `2d`, `1w`, `1y`.
pub fn parse_prometheus_duration(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let micros_per = match &rest[..unit_len] {
            "ms" => 1_000,
            "s" => 1_000_000,
            "m" => 60_000_000,
            "h" => 3_600_000_000,
            "d" => 86_400_000_000,
            "w" => 7 * 86_400_000_000,
            "y" => 365 * 86_400_000_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(micros_per)?)?;
        rest = &rest[unit_len..];
    }
    (total > 0).then_some(total)
}

/// Seconds as Prometheus reads them, exact to the microsecond.
fn seconds(us: i64) -> String {
    let (s, frac) = (us.div_euclid(1_000_000), us.rem_euclid(1_000_000));
    if frac == 0 {
        s.to_string()
    } else {
        format!("{s}.{frac:06}")
    }
}

/// Asks a Prometheus server.
pub struct Client {
    http: reqwest::Client,
    base: url::Url,
    auth: Option<(String, Option<String>)>,
}

impl Client {
    /// A client of the Prometheus at `url` (`http://host:9090`, with a path
    /// prefix when it serves under one; `user:password@` for basic auth).
    pub fn new(url: &str) -> Result<Client, String> {
        let mut base =
            url::Url::parse(url).map_err(|e| format!("--url '{url}' is not a URL: {e}"))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(format!(
                "--url '{url}': expected an http:// or https:// URL"
            ));
        }
        let auth = (!base.username().is_empty()).then(|| {
            (
                percent_decode(base.username()),
                base.password().map(percent_decode),
            )
        });
        let _ = base.set_username("");
        let _ = base.set_password(None);
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Client { http, base, auth })
    }

    /// Where it asks, without credentials.
    pub fn url(&self) -> &str {
        self.base.as_str()
    }

    /// Asks `path` with these parameters: by POST (a long query fits), or
    /// by GET for the endpoints that take no POST (`api/v1/targets`).
    async fn call(&self, path: &str, form: &[(&str, String)], post: bool) -> Result<Bytes, String> {
        let url = self
            .base
            .join(path)
            .map_err(|e| format!("{}{path}: {e}", self.base))?;
        let mut req = if post {
            self.http.post(url.clone()).form(form)
        } else {
            self.http.get(url.clone()).query(form)
        };
        if let Some((user, password)) = &self.auth {
            req = req.basic_auth(user, password.as_ref());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{url}: {}", error_chain(&e)))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("{url}: reading the answer: {}", error_chain(&e)))?;
        if !status.is_success() {
            let why = match head(&body) {
                Err(e) if e.starts_with("a Prometheus error answer") => e,
                _ => String::from_utf8_lossy(&body[..body.len().min(300)]).to_string(),
            };
            return Err(format!("{url}: HTTP {status}: {why}"));
        }
        Ok(body)
    }

    /// Runs a range query; the answer is checked to be a successful one.
    pub async fn query_range(
        &self,
        query: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Bytes, String> {
        let body = self
            .call(
                "api/v1/query_range",
                &[
                    ("query", query.to_string()),
                    ("start", seconds(start)),
                    ("end", seconds(end)),
                    ("step", seconds(step)),
                ],
                true,
            )
            .await?;
        check_answer(&body).map_err(|e| format!("{query}: {e}"))?;
        Ok(body)
    }

    /// The node_exporter targets that `selector` picks, as (job, instance):
    /// those exporting `node_cpu_seconds_total` now. An error when there is
    /// none (a wrong URL or selector should not collect nothing forever).
    pub async fn exporters(&self, selector: Option<&str>) -> Result<Exporters, String> {
        let query = format!("count by (job, instance) ({})", Metric::Cpu.query(selector));
        let body = self
            .call("api/v1/query", &[("query", query.clone())], true)
            .await?;
        #[derive(Deserialize)]
        struct Vector {
            data: VectorData,
        }
        #[derive(Deserialize)]
        struct VectorData {
            result: Vec<Labels>,
        }
        #[derive(Deserialize)]
        struct Labels {
            metric: BTreeMap<String, String>,
        }
        let exporters: Exporters = serde_json::from_slice::<Vector>(&body)
            .map_err(|e| format!("{query}: {e}"))?
            .data
            .result
            .into_iter()
            .map(|l| {
                let get = |k: &str| l.metric.get(k).cloned().unwrap_or_default();
                (get("job"), get("instance"))
            })
            .collect();
        if exporters.is_empty() {
            return Err(format!(
                "Prometheus at {} has no node_exporter series now ({} is empty): is node_exporter scraped{}?",
                self.base,
                Metric::Cpu.query(selector),
                if selector.is_some() { ", and does --selector match it" } else { "" }
            ));
        }
        Ok(exporters)
    }

    /// The scrape interval of these exporters' targets (the largest), when
    /// Prometheus says it (`/api/v1/targets`, Prometheus 2.x and later).
    pub async fn scrape_interval(&self, exporters: &Exporters) -> Result<Option<i64>, String> {
        let body = self
            .call("api/v1/targets", &[("state", "active".into())], false)
            .await?;
        #[derive(Deserialize)]
        struct Targets {
            data: TargetsData,
        }
        #[derive(Deserialize)]
        struct TargetsData {
            #[serde(rename = "activeTargets", default)]
            active: Vec<Target>,
        }
        #[derive(Deserialize)]
        struct Target {
            labels: BTreeMap<String, String>,
            #[serde(rename = "scrapeInterval", default)]
            scrape_interval: Option<String>,
        }
        let targets: Targets =
            serde_json::from_slice(&body).map_err(|e| format!("api/v1/targets: {e}"))?;
        Ok(targets
            .data
            .active
            .iter()
            .filter(|t| {
                let get = |k: &str| t.labels.get(k).cloned().unwrap_or_default();
                exporters.contains(&(get("job"), get("instance")))
            })
            .filter_map(|t| parse_prometheus_duration(t.scrape_interval.as_deref()?))
            .max())
    }
}

/// node_exporter targets, as (job, instance).
pub type Exporters = BTreeSet<(String, String)>;

/// Decodes the `%XX` escapes of a URL's user name or password.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An error with its causes (reqwest's top message alone says little:
/// "error sending request").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}
