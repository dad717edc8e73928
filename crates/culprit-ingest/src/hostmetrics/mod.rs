//! Host metrics: what each host can serve and what everything on it used,
//! window by window, as `host_windows` rows (capacity and measured use, the
//! rows that `external` and `unknown` come from: method §5, 000 §5.1).
//!
//! Two sources: the answers of Prometheus range queries over node_exporter
//! series (`prometheus.rs`, which also runs the queries for `culprit
//! collect prometheus`), and sysstat's `sadf -j` JSON (`sar.rs`). Both are
//! files that `culprit ingest` recognises by their content; all of them in
//! one ingest are translated together at the end of the batch, so a series
//! cut into several answers (chunks of a long range) gives every window.
//! Hosts are named by [`HostMap`]; capacities are in [`capacities`]. The
//! user's side of all this is docs/host-metrics.md.

pub mod prometheus;
pub mod sar;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use culprit_core::batches::{TableBuilder, Value};
use culprit_core::{Resource, Table};

use crate::formats::{Origin, RawRows};

/// How host metrics become rows: host names, configured capacities, the
/// devices counted.
#[derive(Debug, Clone, Default)]
pub struct HostMetricsOptions {
    /// Prometheus `instance` labels (and sar node names) to the host names
    /// of the telemetry.
    pub host_map: HostMap,
    /// Configured capacities, units per second (`--capacity`): they win
    /// over the measured ones.
    pub capacity: BTreeMap<Resource, f64>,
    /// Count only these disk and network devices (`--devices`), instead of
    /// the default rule ([`counted_disk`], [`counted_interface`]).
    pub devices: Option<BTreeSet<String>>,
    /// The largest rates measured so far, per (host, resource): shared by
    /// the ingests of one command (`--watch`), so a quiet stretch does not
    /// lower a measured capacity.
    pub maxima: Maxima,
}

/// The largest rates measured per (host, resource), shared between ingests.
#[derive(Debug, Clone, Default)]
pub struct Maxima(Arc<Mutex<BTreeMap<(String, Resource), f64>>>);

impl Maxima {
    /// Raises the stored maximum to `rate` and returns the maximum.
    fn raise(&self, host: &str, resource: Resource, rate: f64) -> f64 {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let v = m.entry((host.to_string(), resource)).or_insert(0.0);
        *v = v.max(rate);
        *v
    }
}

/// Parses `--capacity` values: `RESOURCE=UNITS_PER_SECOND`, comma
/// separated or repeated (`disk_write=2e8,network=1.25e9`).
pub fn parse_capacities(values: &[String]) -> Result<BTreeMap<Resource, f64>, String> {
    let mut out = BTreeMap::new();
    for item in values.iter().flat_map(|v| v.split(',')) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("'{item}': expected RESOURCE=UNITS_PER_SECOND"))?;
        let resource: Resource = name.trim().parse()?;
        if matches!(resource, Resource::Slots | Resource::Memory) {
            return Err(format!(
                "'{item}': host metrics give no {} capacity (cpu, disk_read, disk_write, network)",
                resource.name()
            ));
        }
        let v: f64 = value
            .trim()
            .parse()
            .map_err(|_| format!("'{item}': '{}' is not a number", value.trim()))?;
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("'{item}': a capacity must be a positive number"));
        }
        out.insert(resource, v);
    }
    Ok(out)
}

/// Names hosts: a Prometheus `instance` label (`10.0.0.5:9100`) or a sar
/// node name becomes the host name the telemetry uses.
///
/// The host of an instance is, in order: the alias the map gives the whole
/// instance, the alias it gives the instance without its port, else the
/// instance without its port (`10.0.0.5:9100` -> `10.0.0.5`,
/// `[::1]:9100` -> `::1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostMap {
    aliases: BTreeMap<String, String>,
}

impl HostMap {
    /// Parses a host map: one `INSTANCE HOST` pair a line (separated by
    /// white space or a comma), `#` starting a comment.
    pub fn parse(text: &str) -> Result<HostMap, String> {
        let mut aliases = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|f| !f.is_empty())
                .collect();
            let [from, to] = fields[..] else {
                return Err(format!(
                    "line {}: expected 'INSTANCE HOST', found {} fields",
                    i + 1,
                    fields.len()
                ));
            };
            if let Some(old) = aliases.insert(from.to_string(), to.to_string()) {
                if old != to {
                    return Err(format!(
                        "line {}: '{from}' is mapped twice ('{old}' and '{to}')",
                        i + 1
                    ));
                }
            }
        }
        Ok(HostMap { aliases })
    }

    /// Reads a host map file.
    pub fn load(path: &std::path::Path) -> Result<HostMap, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the host map {}: {e}", path.display()))?;
        HostMap::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The host name of an instance (or node name).
    pub fn host(&self, instance: &str) -> String {
        if let Some(h) = self.aliases.get(instance) {
            return h.clone();
        }
        let bare = strip_port(instance);
        self.aliases
            .get(bare)
            .cloned()
            .unwrap_or_else(|| bare.to_string())
    }
}

/// `host:9100` -> `host`, `[::1]:9100` -> `::1`; anything else unchanged.
pub fn strip_port(instance: &str) -> &str {
    if let Some(rest) = instance.strip_prefix('[') {
        if let Some((addr, port)) = rest.split_once(']') {
            if port.is_empty() || is_port(port.strip_prefix(':').unwrap_or("x")) {
                return addr;
            }
        }
        return instance;
    }
    match instance.rsplit_once(':') {
        // One colon only: an IPv6 address without brackets has no port.
        Some((host, port)) if !host.contains(':') && is_port(port) && !host.is_empty() => host,
        _ => instance,
    }
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// Whether a disk device counts toward a host's disk use by default: whole
/// disks only. Partitions (`sda1`, `nvme0n1p2`, `mmcblk0p1`) count inside
/// their disk, and device-mapper, md RAID, loop, RAM, zram, optical, floppy
/// and network block devices sit over other disks or are no disk, so any of
/// them would count bytes twice or wrongly.
pub fn counted_disk(name: &str, devices: Option<&BTreeSet<String>>) -> bool {
    if let Some(only) = devices {
        return only.contains(name);
    }
    const NOT_DISKS: [&str; 9] = [
        "dm-", "md", "loop", "ram", "zram", "sr", "fd", "nbd", "drbd",
    ];
    if NOT_DISKS.iter().any(|p| starts_with_then_digit(name, p)) {
        return false;
    }
    !is_partition(name)
}

/// `dm-0`, `md127`, `loop3`: the prefix then a digit.
fn starts_with_then_digit(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|r| r.bytes().next().is_some_and(|b| b.is_ascii_digit()))
}

/// `sda1`, `vdb2`, `xvda1`, `hda3`; `nvme0n1p1`, `mmcblk0p1`.
fn is_partition(name: &str) -> bool {
    let digits_end = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    for p in ["nvme", "mmcblk"] {
        if let Some(rest) = name.strip_prefix(p) {
            // The last `p` followed by digits only, after a digit.
            return rest.rsplit_once('p').is_some_and(|(head, tail)| {
                digits_end(tail) && head.ends_with(|c: char| c.is_ascii_digit())
            });
        }
    }
    for p in ["xvd", "sd", "vd", "hd"] {
        if let Some(rest) = name.strip_prefix(p) {
            let letters = rest.bytes().take_while(u8::is_ascii_lowercase).count();
            return letters > 0 && digits_end(&rest[letters..]);
        }
    }
    false
}

/// Whether a network interface counts toward a host's network use by
/// default: not the loopback, and none of the virtual interfaces whose
/// bytes also cross a physical one (container, bridge, tunnel and overlay
/// interfaces).
pub fn counted_interface(name: &str, devices: Option<&BTreeSet<String>>) -> bool {
    if let Some(only) = devices {
        return only.contains(name);
    }
    const VIRTUAL: [&str; 22] = [
        "veth",
        "docker",
        "br-",
        "virbr",
        "cni",
        "flannel",
        "cali",
        "vxlan",
        "tun",
        "tap",
        "ifb",
        "kube",
        "lxc",
        "weave",
        "cilium",
        "genev",
        "dummy",
        "wg",
        "tailscale",
        "zt",
        "podman",
        "vnet",
    ];
    name != "lo" && !VIRTUAL.iter().any(|p| name.starts_with(p))
}

/// What was measured in one window of one host and resource.
#[derive(Debug, Clone, Copy, Default)]
struct Amount {
    /// Units used by everything on the host in the window.
    used: f64,
    /// A capacity the source gives itself (cores), units per second.
    capacity: Option<f64>,
    /// Network: bytes transmitted (for the measured capacity only).
    transmitted: f64,
}

/// (host, resource, window start, window end), times in microseconds.
type Key = (String, Resource, i64, i64);

/// Measured windows, by identity (a `host_windows` row's, with no scope).
#[derive(Default)]
struct Measured {
    windows: BTreeMap<Key, Amount>,
}

impl Measured {
    fn add(&mut self, host: &str, resource: Resource, start: i64, end: i64) -> &mut Amount {
        self.windows
            .entry((host.to_string(), resource, start, end))
            .or_default()
    }
}

/// The kinds of host-metrics files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The JSON answer of Prometheus' `/api/v1/query_range`.
    Prometheus,
    /// sysstat's `sadf -j` JSON.
    Sar,
}

/// Whether decoded text is a host-metrics file: a JSON object with a
/// `sysstat` member (sar), or a Prometheus answer (`"status": "success"`
/// with `data`, or `"status": "error"` with `errorType`). Anything else
/// (not JSON, other members) is not.
pub fn sniff(text: &[u8]) -> Option<Kind> {
    let first = text.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Top {
        status: Option<serde_json::Value>,
        data: Option<serde::de::IgnoredAny>,
        #[serde(rename = "errorType")]
        error_type: Option<serde::de::IgnoredAny>,
        sysstat: Option<serde::de::IgnoredAny>,
    }
    let top: Top = serde_json::from_slice(text).ok()?;
    let status = top.status.as_ref().and_then(|s| s.as_str());
    if top.sysstat.is_some() {
        Some(Kind::Sar)
    } else if (status == Some("success") && top.data.is_some())
        || (status == Some("error") && top.error_type.is_some())
    {
        Some(Kind::Prometheus)
    } else {
        None
    }
}

/// The host metrics read in one ingest, translated at its end.
#[derive(Default)]
pub struct Batch {
    prometheus: prometheus::Answers,
    sar: Vec<sar::Host>,
}

/// The rows of a batch, and what is worth saying about them.
pub struct Translated {
    pub rows: RawRows,
    pub notes: Vec<String>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.prometheus.is_empty() && self.sar.is_empty()
    }

    /// Reads one file; an error is the reason to reject it.
    pub fn add(&mut self, kind: Kind, text: &[u8]) -> Result<(), String> {
        match kind {
            Kind::Prometheus => self.prometheus.add(text),
            Kind::Sar => {
                self.sar.extend(sar::parse(text)?);
                Ok(())
            }
        }
    }

    /// The `host_windows` rows of everything read.
    pub fn finish(self, opts: &HostMetricsOptions) -> Translated {
        let mut measured = Measured::default();
        let mut notes = Vec::new();
        self.prometheus.translate(opts, &mut measured, &mut notes);
        for host in &self.sar {
            host.translate(opts, &mut measured);
        }
        let capacity = capacities(&measured, opts);
        let mut rows = TableBuilder::new(Table::HostWindows, measured.windows.len());
        let mut origins = Vec::with_capacity(measured.windows.len());
        let mut hosts: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, ((host, resource, start, end), amount)) in measured.windows.iter().enumerate() {
            let cap = amount
                .capacity
                .or_else(|| capacity.get(&(host.as_str(), *resource)).copied().flatten());
            let cap = opts.capacity.get(resource).copied().or(cap);
            rows.row(&[
                ("host", Value::S(host)),
                ("window_start", Value::T(*start)),
                ("window_end", Value::T(*end)),
                ("resource", Value::S(resource.name())),
                ("capacity", cap.map_or(Value::Null, Value::F)),
                ("used", Value::F(amount.used.max(0.0))),
            ]);
            origins.push(Origin::Row(i as u64 + 1));
            *hosts.entry(host.as_str()).or_default() += 1;
        }
        if !hosts.is_empty() {
            let list: Vec<String> = hosts.iter().map(|(h, n)| format!("{h} ({n})")).collect();
            notes.push(format!(
                "host metrics: windows per host: {} (check that these are the hosts of your tasks: docs/host-metrics.md)",
                list.join(", ")
            ));
        }
        let batch = rows.finish_unchecked();
        let columns = batch
            .schema()
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(f, c)| (f.name().clone(), c.clone()))
            .collect();
        Translated {
            rows: RawRows {
                columns,
                origins,
                unreadable: Vec::new(),
            },
            notes,
        }
    }
}

/// The measured capacity of every (host, resource) whose source gives none
/// (disk and network): the largest rate of its windows (network: received
/// or transmitted, the link serves both at its speed), and of those
/// measured before in the same command ([`Maxima`]). `None` when nothing
/// was ever measured there (an idle disk has no known capacity).
fn capacities<'a>(
    measured: &'a Measured,
    opts: &HostMetricsOptions,
) -> BTreeMap<(&'a str, Resource), Option<f64>> {
    let mut largest: BTreeMap<(&str, Resource), f64> = BTreeMap::new();
    for ((host, resource, start, end), a) in &measured.windows {
        if a.capacity.is_some() || matches!(resource, Resource::Memory | Resource::Cpu) {
            continue;
        }
        let seconds = (end - start) as f64 / 1e6;
        if seconds <= 0.0 {
            continue;
        }
        let rate = a.used.max(a.transmitted) / seconds;
        let v = largest.entry((host.as_str(), *resource)).or_insert(0.0);
        *v = v.max(rate);
    }
    largest
        .into_iter()
        .map(|((host, resource), rate)| {
            let rate = opts.maxima.raise(host, resource, rate);
            ((host, resource), (rate > 0.0).then_some(rate))
        })
        .collect()
}

#[cfg(test)]
mod tests;
