//! sysstat: the JSON `sadf -j` writes from a `sar` data file, for hosts
//! where no Prometheus runs.
//!
//! Each record of `statistics` holds averages over the `interval` seconds
//! that end at its `timestamp`: that span is its window. cpu comes from the
//! `cpu-load` line of `all` (100 - %idle - %iowait of `number-of-cpus`
//! cores), disks from `disk` (`rkB`/`wkB` per second, or older sysstat's
//! sectors `rd_sec`/`wr_sec`), network from `network.net-dev` (`rxkB`,
//! and `txkB` for the measured capacity), memory from `memory.avail`
//! (the drop since the previous record).

use std::collections::BTreeMap;

use culprit_core::Resource;
use serde::Deserialize;

use super::{counted_disk, counted_interface, HostMetricsOptions, Measured};

#[derive(Deserialize)]
struct File {
    sysstat: Sysstat,
}

#[derive(Deserialize)]
struct Sysstat {
    #[serde(default)]
    hosts: Vec<Host>,
}

/// One host of a `sadf -j` file.
#[derive(Deserialize)]
pub struct Host {
    nodename: String,
    #[serde(rename = "number-of-cpus", default)]
    cpus: Option<f64>,
    #[serde(default)]
    timezone: Option<String>,
    #[serde(default)]
    statistics: Vec<Record>,
}

#[derive(Deserialize)]
struct Record {
    timestamp: Option<Timestamp>,
    #[serde(rename = "cpu-load", alias = "cpu-load-all", default)]
    cpu_load: Vec<CpuLoad>,
    #[serde(default)]
    memory: Option<Memory>,
    #[serde(default)]
    disk: Vec<Disk>,
    #[serde(default)]
    network: Option<Network>,
}

#[derive(Deserialize)]
struct Timestamp {
    date: String,
    time: String,
    #[serde(default)]
    utc: Option<i64>,
    interval: f64,
}

#[derive(Deserialize)]
struct CpuLoad {
    cpu: serde_json::Value,
    idle: f64,
    #[serde(default)]
    iowait: f64,
}

#[derive(Deserialize)]
struct Memory {
    #[serde(default)]
    avail: Option<f64>,
    #[serde(default)]
    memused: Option<f64>,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct Disk {
    #[serde(rename = "disk-device")]
    device: String,
    #[serde(default)]
    rkB: Option<f64>,
    #[serde(default)]
    wkB: Option<f64>,
    #[serde(default)]
    rd_sec: Option<f64>,
    #[serde(default)]
    wr_sec: Option<f64>,
}

#[derive(Deserialize)]
struct Network {
    #[serde(rename = "net-dev", default)]
    net_dev: Vec<NetDev>,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct NetDev {
    iface: String,
    #[serde(default)]
    rxkB: f64,
    #[serde(default)]
    txkB: f64,
}

/// Reads a `sadf -j` file; an error says why culprit cannot.
pub fn parse(text: &[u8]) -> Result<Vec<Host>, String> {
    let file: File = serde_json::from_slice(text)
        .map_err(|e| format!("not a sadf -j file culprit reads: {e}"))?;
    for host in &file.sysstat.hosts {
        let utc_zone = host
            .timezone
            .as_deref()
            .is_some_and(|z| matches!(z, "UTC" | "GMT" | "Etc/UTC"));
        for r in &host.statistics {
            let Some(t) = &r.timestamp else { continue };
            if t.utc == Some(0) && !utc_zone {
                return Err(format!(
                    "{}: the times are local ({}), which JSON does not say the offset of: write the file with `sadf -j` without -T or -t (UTC times)",
                    host.nodename,
                    host.timezone.as_deref().unwrap_or("no timezone")
                ));
            }
            time(t).map_err(|e| format!("{}: {e}", host.nodename))?;
        }
    }
    Ok(file.sysstat.hosts)
}

/// The end of a record's window and its length, microseconds.
fn time(t: &Timestamp) -> Result<(i64, i64), String> {
    let text = format!("{}T{}Z", t.date, t.time);
    let end = chrono::DateTime::parse_from_rfc3339(&text)
        .map_err(|_| format!("timestamp '{} {}' is not a date and time", t.date, t.time))?
        .timestamp_micros();
    let len = (t.interval * 1e6).round();
    if !(len.is_finite() && len > 0.0 && len < 1e15) {
        return Err(format!(
            "interval {} is not a positive number of seconds",
            t.interval
        ));
    }
    Ok((end, len as i64))
}

impl Host {
    /// Adds the windows of every record to `measured`.
    pub(super) fn translate(&self, opts: &HostMetricsOptions, measured: &mut Measured) {
        let host = opts.host_map.host(&self.nodename);
        let devices = opts.devices.as_ref();
        let mut previous: Option<(i64, f64)> = None;
        for r in &self.statistics {
            let Some((end, len)) = r.timestamp.as_ref().and_then(|t| time(t).ok()) else {
                continue;
            };
            let start = end - len;
            let seconds = len as f64 / 1e6;
            if let Some(all) = r.cpu_load.iter().find(|c| is_all(&c.cpu)) {
                if let Some(cpus) = self.cpus.filter(|c| *c > 0.0) {
                    let busy = (100.0 - all.idle - all.iowait).clamp(0.0, 100.0) / 100.0;
                    let a = measured.add(&host, Resource::Cpu, start, end);
                    a.used += busy * cpus * seconds;
                    a.capacity = Some(cpus);
                }
            }
            let mut disk = BTreeMap::new();
            for d in r.disk.iter().filter(|d| counted_disk(&d.device, devices)) {
                let read = d.rkB.map(|k| k * 1024.0).or(d.rd_sec.map(|s| s * 512.0));
                let written = d.wkB.map(|k| k * 1024.0).or(d.wr_sec.map(|s| s * 512.0));
                *disk.entry(Resource::DiskRead).or_insert(0.0) += read.unwrap_or(0.0);
                *disk.entry(Resource::DiskWrite).or_insert(0.0) += written.unwrap_or(0.0);
            }
            for (resource, per_second) in disk {
                measured.add(&host, resource, start, end).used += per_second * seconds;
            }
            if let Some(net) = &r.network {
                let counted: Vec<&NetDev> = net
                    .net_dev
                    .iter()
                    .filter(|n| counted_interface(&n.iface, devices))
                    .collect();
                if !counted.is_empty() {
                    let a = measured.add(&host, Resource::Network, start, end);
                    for n in counted {
                        a.used += n.rxkB * 1024.0 * seconds;
                        a.transmitted += n.txkB * 1024.0 * seconds;
                    }
                }
            }
            // Memory is a level at the record's time: the window gets what
            // was taken since the record before (when it ends where this
            // window starts, give or take sar's rounding to the second).
            let taken = r
                .memory
                .as_ref()
                .and_then(|m| m.avail.map(|a| -a).or(m.memused));
            if let Some(level) = taken {
                if let Some((t, before)) = previous {
                    if (t - start).abs() <= 1_000_000 {
                        measured.add(&host, Resource::Memory, start, end).used +=
                            ((level - before) * 1024.0).max(0.0);
                    }
                }
                previous = Some((end, level));
            }
        }
    }
}

/// The `cpu` of the line for all cores: `"all"` (or -1 in some versions).
fn is_all(cpu: &serde_json::Value) -> bool {
    match cpu {
        serde_json::Value::String(s) => s == "all" || s == "-1",
        serde_json::Value::Number(n) => n.as_i64() == Some(-1),
        _ => false,
    }
}
