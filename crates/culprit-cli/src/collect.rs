//! `culprit collect SOURCE`: culprit asks a monitoring system itself and
//! ingests the answers, once over a range or (`--watch`) following it. One
//! subcommand per source, each with its flags here; `prometheus` asks for
//! node_exporter's host metrics (docs/host-metrics.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use culprit_ingest::hostmetrics::prometheus::{self, Client, Metric};
use culprit_ingest::hostmetrics::{self, HostMap, HostMetricsOptions};
use culprit_ingest::{IngestOptions, SourceFile};
use culprit_store::Store;

use crate::{limits, BoxError, StoreArg};

#[derive(clap::Subcommand)]
pub enum CollectCommand {
    /// Ask Prometheus for node_exporter's host metrics (cpu, disk, network, memory
    /// per host) over a time range and ingest them as host_windows rows (capacity and
    /// measured use, from which `external` and `unknown` come); --watch keeps following.
    Prometheus(PrometheusArgs),
    /// Poll a Trino (or Presto) coordinator's /v1/query for finished queries and
    /// ingest each one's QueryInfo (stages, tasks with their node, blocked and
    /// queued time; docs/trino.md) before it expires.
    Trino {
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        args: crate::collect_trino::TrinoArgs,
    },
}

#[derive(clap::Args)]
pub struct PrometheusArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The Prometheus server, http://host:9090 (with its path prefix if it serves
    /// under one; user:password@ for basic auth).
    #[arg(long, env = "CULPRIT_PROMETHEUS_URL")]
    url: String,
    /// Start of the range: RFC 3339, epoch milliseconds, `now` or `now-DURATION`
    /// (`now-1h`). With --watch, default now.
    #[arg(long, value_parser = instant, required_unless_present = "watch")]
    from: Option<i64>,
    /// End of the range (same forms; default now).
    #[arg(long, value_parser = instant, conflicts_with = "watch")]
    to: Option<i64>,
    /// The window length (the query step): seconds or a duration ('15s', '1 min').
    /// Default: the scrape interval of the node_exporter targets.
    #[arg(long, value_parser = step)]
    step: Option<i64>,
    /// Label matchers that pick the node_exporter series, as inside PromQL's braces:
    /// 'job="node",instance=~"worker-.*"'.
    #[arg(long)]
    selector: Option<String>,
    /// Keep following: every --interval, ask for the windows that ended since, until Ctrl-C.
    #[arg(long)]
    watch: bool,
    /// With --watch: seconds between two looks (default: the step).
    #[arg(long, requires = "watch", value_parser = limits::interval)]
    interval: Option<f64>,
    /// Also write every answer into this folder (`culprit ingest DIR` reads them again).
    #[arg(long)]
    save: Option<PathBuf>,
    #[command(flatten)]
    host_metrics: HostMetricsArgs,
}

/// How host metrics become rows: the flags `culprit ingest` and `culprit
/// collect prometheus` share.
#[derive(clap::Args, Clone, Default)]
pub struct HostMetricsArgs {
    /// Host metrics: a file of `INSTANCE HOST` lines naming the telemetry's host of a
    /// Prometheus instance or sar node name (default: the instance without its port).
    #[arg(long)]
    host_map: Option<PathBuf>,
    /// Host metrics: configured capacities per second, RESOURCE=VALUE, comma separated
    /// (cpu in cores; disk_read, disk_write, network in bytes). Default: the core count,
    /// and for disks and network the largest rate measured.
    #[arg(long, value_delimiter = ',')]
    capacity: Vec<String>,
    /// Host metrics: count only these disk and network devices, comma separated
    /// (default: whole disks, and interfaces that are not loopback or virtual).
    #[arg(long, value_delimiter = ',')]
    devices: Vec<String>,
}

impl HostMetricsArgs {
    pub fn options(&self) -> Result<HostMetricsOptions, BoxError> {
        let host_map = match &self.host_map {
            Some(path) => HostMap::load(path)?,
            None => HostMap::default(),
        };
        let capacity =
            hostmetrics::parse_capacities(&self.capacity).map_err(|e| format!("--capacity {e}"))?;
        let devices: std::collections::BTreeSet<String> = self
            .devices
            .iter()
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty())
            .collect();
        Ok(HostMetricsOptions {
            host_map,
            capacity,
            devices: (!devices.is_empty()).then_some(devices),
            ..Default::default()
        })
    }
}

/// Now, in microseconds since the epoch.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// `--from`, `--to`: a time, `now` or `now-DURATION`.
fn instant(s: &str) -> Result<i64, String> {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix("now") {
        let rest = rest.trim();
        if rest.is_empty() {
            return Ok(now());
        }
        if let Some(d) = rest.strip_prefix('-') {
            return culprit_core::time::parse_duration(d)
                .map(|us| now() - us)
                .ok_or_else(|| format!("'{d}' is not a duration (1h, 15 min, 30s)"));
        }
        return Err(format!("'{s}': expected now or now-DURATION (now-1h)"));
    }
    limits::instant(t).map_err(|e| format!("{e}, now, or now-DURATION (now-1h)"))
}

/// `--step`: seconds or a duration, whole milliseconds, at least 1 ms.
fn step(s: &str) -> Result<i64, String> {
    let us = match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => (v * 1e6).round() as i64,
        Ok(_) => return Err("the step must be a positive number of seconds".into()),
        Err(_) => culprit_core::time::parse_duration(s)
            .or_else(|| prometheus::parse_prometheus_duration(s))
            .ok_or_else(|| format!("'{s}' is not a duration (seconds, '15s', '1 min')"))?,
    };
    if us < 1000 || us % 1000 != 0 {
        return Err("the step is whole milliseconds, at least 1 ms".into());
    }
    Ok(us)
}

fn rfc3339(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| us.to_string())
}

pub async fn run(command: CollectCommand) -> Result<ExitCode, BoxError> {
    match command {
        CollectCommand::Prometheus(args) => prometheus_run(args).await,
        CollectCommand::Trino { store, args } => {
            let store = Store::open(&store.store)?;
            crate::collect_trino::run(&store, &args).await
        }
    }
}

async fn prometheus_run(args: PrometheusArgs) -> Result<ExitCode, BoxError> {
    let store = Store::open(&args.store.store)?;
    let opts = IngestOptions {
        host_metrics: args.host_metrics.options()?,
        ..Default::default()
    };
    let client = Client::new(&args.url)?;
    let selector = args.selector.as_deref();
    // The first look must work: a wrong URL or selector fails now.
    let exporters = client.exporters(selector).await?;
    let scrape = client.scrape_interval(&exporters).await.unwrap_or(None);
    let step = match (args.step, scrape) {
        (Some(step), Some(scrape)) if step < scrape => {
            eprintln!(
                "note: --step {} s is shorter than the scrape interval ({} s): a window between two scrapes measures nothing and the next one all of it",
                step as f64 / 1e6,
                scrape as f64 / 1e6
            );
            step
        }
        (Some(step), _) => step,
        (None, Some(scrape)) => scrape,
        (None, None) => return Err(
            "Prometheus does not say the scrape interval of its node_exporter targets: give --step"
                .into(),
        ),
    };
    if let Some(dir) = &args.save {
        std::fs::create_dir_all(dir).map_err(|e| format!("--save {}: {e}", dir.display()))?;
    }
    eprintln!(
        "collecting from {} ({} node_exporter targets), step {} s",
        client.url(),
        exporters.len(),
        step as f64 / 1e6
    );
    if !args.watch {
        let to = args.to.unwrap_or_else(now);
        let from = args.from.expect("clap requires --from without --watch");
        if from >= to {
            return Err(format!(
                "--from {} is not before --to {}",
                rfc3339(from),
                rfc3339(to)
            )
            .into());
        }
        let sources = fetch(&client, selector, from, to, step, args.save.as_ref()).await?;
        if sources.is_empty() {
            return Err(format!(
                "[{}, {}] holds no whole step of {} s",
                rfc3339(from),
                rfc3339(to),
                step as f64 / 1e6
            )
            .into());
        }
        let report = culprit_ingest::ingest(&store, sources, &opts, &()).await?;
        crate::print_report(&report);
        return Ok(if report.rejected.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    // Follow: windows that ended at least a step and 2 s ago (so the
    // sample after their end has been scraped and stored).
    let interval = Duration::from_secs_f64(
        args.interval
            .unwrap_or(step as f64 / 1e6)
            .clamp(limits::MIN_INTERVAL, limits::MAX_INTERVAL),
    );
    let lag = step + 2_000_000;
    let mut next = args.from.unwrap_or_else(now);
    next -= next.rem_euclid(step);
    eprintln!(
        "following from {} every {:.1} s (Ctrl-C to stop)",
        rfc3339(next),
        interval.as_secs_f64()
    );
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let to = now() - lag;
        let to = to - to.rem_euclid(step);
        if to > next {
            match fetch(&client, selector, next, to, step, args.save.as_ref()).await {
                Ok(sources) => match culprit_ingest::ingest(&store, sources, &opts, &()).await {
                    Ok(report) => {
                        crate::print_report(&report);
                        next = to;
                    }
                    Err(e) => eprintln!("error: {e} (trying again)"),
                },
                Err(e) => eprintln!("error: {e} (trying again)"),
            }
        }
        tokio::select! {
            _ = &mut ctrl_c => {
                eprintln!("stopped collecting");
                return Ok(ExitCode::SUCCESS);
            }
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// Runs every query over `[from, to]` (in chunks) and returns the answers
/// as sources to ingest (and writes them into `save`).
async fn fetch(
    client: &Client,
    selector: Option<&str>,
    from: i64,
    to: i64,
    step: i64,
    save: Option<&PathBuf>,
) -> Result<Vec<SourceFile>, BoxError> {
    let mut sources = Vec::new();
    for (start, end) in prometheus::chunks(from, to, step) {
        for metric in Metric::ALL {
            let query = metric.query(selector);
            let body = client.query_range(&query, start, end, step).await?;
            let file = format!(
                "{}-{}-{}-{}.json",
                metric.name(),
                start / 1000,
                end / 1000,
                step / 1000
            );
            let name = match save {
                Some(dir) => {
                    let path = dir.join(&file);
                    std::fs::write(&path, &body)
                        .map_err(|e| format!("--save {}: {e}", path.display()))?;
                    path.display().to_string()
                }
                None => format!("{}api/v1/query_range/{file}", client.url()),
            };
            sources.push(SourceFile::from_bytes(name, body));
        }
    }
    Ok(sources)
}
