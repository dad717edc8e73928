//! Host metrics against recorded answers of a real Prometheus scraping a
//! real node_exporter, and a real `sadf -j` file (tests/data/hostmetrics,
//! recorded on a 2-core machine next to a CPU hog and a disk writer): every
//! row is checked against a computation of its own from the JSON.

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, TimestampMicrosecondType};
use culprit_core::Resource;
use serde_json::Value;

use super::prometheus::{chunks, parse_prometheus_duration, Metric, MAX_STEPS};
use super::*;

const PROM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/hostmetrics/prometheus"
);
const SAR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/hostmetrics/sar/sadf.json"
);

fn answer(metric: Metric) -> Vec<u8> {
    std::fs::read(format!("{PROM}/{}.json", metric.name())).unwrap()
}

/// A translated row.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    host: String,
    resource: String,
    start: i64,
    end: i64,
    capacity: Option<f64>,
    used: f64,
}

fn rows(t: &Translated) -> Vec<Row> {
    let c = &t.rows.columns;
    let text = |n: &str| c[n].as_string::<i32>().clone();
    let time = |n: &str| c[n].as_primitive::<TimestampMicrosecondType>().clone();
    let float = |n: &str| c[n].as_primitive::<Float64Type>().clone();
    let (host, resource, start, end, cap, used) = (
        text("host"),
        text("resource"),
        time("window_start"),
        time("window_end"),
        float("capacity"),
        float("used"),
    );
    assert!(
        c["scope"].null_count() == c["scope"].len(),
        "scope stays NULL"
    );
    (0..t.rows.len())
        .map(|i| Row {
            host: host.value(i).to_string(),
            resource: resource.value(i).to_string(),
            start: start.value(i),
            end: end.value(i),
            capacity: cap.is_valid(i).then(|| cap.value(i)),
            used: used.value(i),
        })
        .collect()
}

fn translate(files: &[Vec<u8>], opts: &HostMetricsOptions) -> Vec<Row> {
    let mut b = Batch::default();
    for f in files {
        let kind = sniff(f).expect("a host-metrics file");
        b.add(kind, f).unwrap();
    }
    rows(&b.finish(opts))
}

fn all_answers() -> Vec<Vec<u8>> {
    Metric::ALL.into_iter().map(answer).collect()
}

/// A series: its labels and (µs, value) points.
type Series = (BTreeMap<String, String>, Vec<(i64, f64)>);

/// The series of an answer.
fn series(metric: Metric) -> Vec<Series> {
    let v: Value = serde_json::from_slice(&answer(metric)).unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            let points = s["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        (p[0].as_f64().unwrap() * 1e6).round() as i64,
                        p[1].as_str().unwrap().parse::<f64>().unwrap(),
                    )
                })
                .collect();
            (labels, points)
        })
        .collect()
}

/// Sum over the series `pick` keeps of `f(v0, v1)` per window.
fn per_window(
    metric: Metric,
    pick: impl Fn(&BTreeMap<String, String>) -> bool,
    f: impl Fn(f64, f64) -> f64,
) -> BTreeMap<(i64, i64), f64> {
    let mut out = BTreeMap::new();
    for (labels, points) in series(metric) {
        if !pick(&labels) {
            continue;
        }
        for w in points.windows(2) {
            *out.entry((w[0].0, w[1].0)).or_insert(0.0) += f(w[0].1, w[1].1);
        }
    }
    out
}

fn of(rows: &[Row], resource: &str) -> Vec<Row> {
    rows.iter()
        .filter(|r| r.resource == resource)
        .cloned()
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn sniffs_host_metrics_and_nothing_else() {
    assert_eq!(sniff(&answer(Metric::Cpu)), Some(Kind::Prometheus));
    assert_eq!(sniff(&std::fs::read(SAR).unwrap()), Some(Kind::Sar));
    assert_eq!(sniff(br#"{"Event":"SparkListenerLogStart"}"#), None);
    assert_eq!(sniff(b"{\"task_id\":\"t1\"}\n{\"task_id\":\"t2\"}\n"), None);
    assert_eq!(sniff(b"host,window_start\n"), None);
    assert_eq!(sniff(b"{\"status\":\"success\"}"), None);
    assert_eq!(
        sniff(b"  {\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"x\"}"),
        Some(Kind::Prometheus)
    );
    assert_eq!(sniff(b"{\"status\":\"success\",\"data\":null}"), None);
}

#[test]
fn prometheus_answers_become_windows_that_add_up_to_the_counters() {
    let rows = translate(&all_answers(), &HostMetricsOptions::default());
    // 10 samples a series: 9 windows of 1 s for each of the 5 resources.
    for r in ["cpu", "disk_read", "disk_write", "network", "memory"] {
        assert_eq!(of(&rows, r).len(), 9, "{r}");
    }
    assert_eq!(rows.len(), 45);
    assert!(
        rows.iter().all(|r| r.host == "127.0.0.1"),
        "the port is stripped"
    );
    assert!(rows.iter().all(|r| r.end - r.start == 1_000_000));

    // cpu: every mode but idle and iowait, all cores; capacity the core count.
    let cores = series(Metric::Cpu)
        .iter()
        .map(|(l, _)| l["cpu"].clone())
        .collect::<std::collections::BTreeSet<_>>()
        .len() as f64;
    let busy = per_window(
        Metric::Cpu,
        |l| l["mode"] != "idle" && l["mode"] != "iowait",
        |a, b| b - a,
    );
    for r in of(&rows, "cpu") {
        assert!(close(r.used, busy[&(r.start, r.end)]), "{r:?}");
        assert_eq!(r.capacity, Some(cores));
    }
    // The hog and the builds beside it kept both cores busy.
    let total: f64 = of(&rows, "cpu").iter().map(|r| r.used).sum();
    assert!(total > 9.0, "{total} cpu-seconds in 9 s on 2 cores");

    // Disks: whole disks only (zram0 is no disk); capacity the largest rate.
    let written = per_window(Metric::DiskWritten, |l| l["device"] == "vda", |a, b| b - a);
    let disk = of(&rows, "disk_write");
    let largest = written.values().cloned().fold(0.0, f64::max);
    assert!(largest > 50e6, "the disk writer wrote: {largest} B/s");
    for r in &disk {
        assert!(close(r.used, written[&(r.start, r.end)]), "{r:?}");
        assert_eq!(r.capacity, Some(largest));
    }
    let read = per_window(Metric::DiskRead, |l| l["device"] == "vda", |a, b| b - a);
    for r in of(&rows, "disk_read") {
        assert!(close(r.used, read[&(r.start, r.end)]), "{r:?}");
    }

    // Network: received bytes of eth0 (ifb0/1 are virtual); capacity the
    // largest rate received or transmitted (none here: NULL).
    let rx = per_window(
        Metric::NetworkReceive,
        |l| l["device"] == "eth0",
        |a, b| b - a,
    );
    let tx = per_window(
        Metric::NetworkTransmit,
        |l| l["device"] == "eth0",
        |a, b| b - a,
    );
    let link = rx.values().chain(tx.values()).cloned().fold(0.0, f64::max);
    for r in of(&rows, "network") {
        assert!(close(r.used, rx[&(r.start, r.end)]), "{r:?}");
        assert_eq!(r.capacity, (link > 0.0).then_some(link));
    }

    // Memory: the bytes taken in the window; no capacity.
    let taken = per_window(Metric::MemAvailable, |_| true, |a, b| (a - b).max(0.0));
    for r in of(&rows, "memory") {
        assert!(close(r.used, taken[&(r.start, r.end)]), "{r:?}");
        assert_eq!(r.capacity, None);
    }
}

/// An answer with its series' points cut to `keep` (indices).
fn cut(metric: Metric, keep: std::ops::Range<usize>) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&answer(metric)).unwrap();
    for s in v["data"]["result"].as_array_mut().unwrap() {
        let values = s["values"].as_array().unwrap()[keep.clone()].to_vec();
        s["values"] = Value::Array(values);
    }
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn chunks_of_one_range_give_the_windows_of_the_whole() {
    let whole = translate(&[answer(Metric::Cpu)], &HostMetricsOptions::default());
    // Two answers meeting at sample 5, as `collect` asks them.
    let parts = translate(
        &[cut(Metric::Cpu, 5..10), cut(Metric::Cpu, 0..6)],
        &HostMetricsOptions::default(),
    );
    assert_eq!(parts, whole);
    // Answers that meet without sharing a sample still meet (their samples
    // merge); answers that leave a sample out leave out the windows on
    // either side of it, never one spanning two steps.
    let meet = translate(
        &[cut(Metric::Cpu, 0..5), cut(Metric::Cpu, 5..10)],
        &HostMetricsOptions::default(),
    );
    assert_eq!(meet, whole);
    let gap = translate(
        &[cut(Metric::Cpu, 0..4), cut(Metric::Cpu, 5..10)],
        &HostMetricsOptions::default(),
    );
    assert_eq!(gap.len(), 7);
    assert!(!gap.contains(&whole[3]) && !gap.contains(&whole[4]));
    // The same answer twice, or under another job, counts once.
    let twice = translate(
        &[answer(Metric::Cpu), answer(Metric::Cpu)],
        &HostMetricsOptions::default(),
    );
    assert_eq!(twice, whole);
    let other_job = String::from_utf8(answer(Metric::Cpu))
        .unwrap()
        .replace("\"job\":\"node\"", "\"job\":\"node-again\"");
    let both = translate(
        &[answer(Metric::Cpu), other_job.into_bytes()],
        &HostMetricsOptions::default(),
    );
    assert_eq!(both, whole);
}

/// A one-series answer.
fn synthetic(name: &str, labels: &str, points: &[(f64, &str)]) -> Vec<u8> {
    let values: Vec<String> = points
        .iter()
        .map(|(t, v)| format!("[{t},\"{v}\"]"))
        .collect();
    format!(
        r#"{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{"__name__":"{name}","instance":"w1:9100"{labels}}},"values":[{}]}}]}}}}"#,
        values.join(",")
    )
    .into_bytes()
}

#[test]
fn counter_resets_gaps_and_odd_samples() {
    let disk = synthetic(
        "node_disk_written_bytes_total",
        r#","device":"sda""#,
        &[
            (100.0, "1000"),
            (110.0, "3000"),
            (120.0, "500"), // restarted: 500 bytes since
            (130.0, "NaN"), // skipped: the window 120-140 is a gap
            (150.0, "900"),
            (160.0, "1900"),
        ],
    );
    let mut b = Batch::default();
    b.add(Kind::Prometheus, &disk).unwrap();
    let t = b.finish(&HostMetricsOptions::default());
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("1 Prometheus samples that are no finite number")),
        "{:?}",
        t.notes
    );
    let r = rows(&t);
    let got: Vec<(i64, i64, f64)> = r
        .iter()
        .map(|r| (r.start / 1_000_000, r.end / 1_000_000, r.used))
        .collect();
    assert_eq!(
        got,
        vec![(100, 110, 2000.0), (110, 120, 500.0), (150, 160, 1000.0)]
    );
    // The largest rate is the capacity: 200 B/s.
    assert!(r.iter().all(|r| r.capacity == Some(200.0)));
    assert!(r.iter().all(|r| r.host == "w1"));
}

#[test]
fn answers_culprit_cannot_read_say_why() {
    let mut b = Batch::default();
    let err = b
        .add(
            Kind::Prometheus,
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 5","data":null}"#,
        )
        .unwrap_err();
    assert!(err.contains("bad_data: parse error at char 5"), "{err}");
    let err = b
        .add(
            Kind::Prometheus,
            br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
        )
        .unwrap_err();
    assert!(
        err.contains("resultType 'vector'") && err.contains("query_range"),
        "{err}"
    );
    // Other series and aggregated ones are skipped, with a note.
    let rate = br#"{"status":"success","data":{"resultType":"matrix","result":[
        {"metric":{"instance":"a:1"},"values":[[1,"0.5"],[2,"0.6"]]},
        {"metric":{"__name__":"node_load1","instance":"a:1"},"values":[[1,"1"],[2,"1"]]},
        {"metric":{"__name__":"node_cpu_seconds_total","cpu":"0","mode":"user"},"values":[[1,"1"],[2,"2"]]}]}}"#;
    b.add(Kind::Prometheus, rate).unwrap();
    let t = b.finish(&HostMetricsOptions::default());
    assert_eq!(t.rows.len(), 0);
    let notes = t.notes.join("\n");
    assert!(
        notes.contains("node_load1 x1") && notes.contains("(no __name__) x1"),
        "{notes}"
    );
    assert!(
        notes.contains("1 Prometheus series without an instance label"),
        "{notes}"
    );
}

#[test]
fn host_map_names_the_telemetry_hosts() {
    let map = HostMap::parse(
        "# instance host\n127.0.0.1:19100 worker-1\n10.0.0.7, worker-7 # any port\n\n",
    )
    .unwrap();
    assert_eq!(map.host("127.0.0.1:19100"), "worker-1");
    assert_eq!(map.host("127.0.0.1:9100"), "127.0.0.1");
    assert_eq!(map.host("10.0.0.7:9100"), "worker-7");
    assert_eq!(map.host("10.0.0.7"), "worker-7");
    assert_eq!(map.host("node-3.example.com:9100"), "node-3.example.com");
    assert_eq!(map.host("[::1]:9100"), "::1");
    assert_eq!(map.host("fe80::1"), "fe80::1");
    assert_eq!(map.host("vm"), "vm");
    assert!(HostMap::parse("a b c\n").unwrap_err().contains("line 1"));
    assert!(HostMap::parse("a b\na c\n")
        .unwrap_err()
        .contains("mapped twice"));
    let opts = HostMetricsOptions {
        host_map: map,
        ..Default::default()
    };
    let rows = translate(&all_answers(), &opts);
    assert!(rows.iter().all(|r| r.host == "worker-1"));
}

#[test]
fn devices_counted_by_default_and_by_name() {
    for d in ["sda", "vda", "xvdb", "nvme0n1", "mmcblk0", "hdc"] {
        assert!(counted_disk(d, None), "{d}");
    }
    for d in [
        "sda1",
        "vda2",
        "xvdb1",
        "nvme0n1p1",
        "mmcblk0p2",
        "dm-0",
        "md127",
        "loop3",
        "ram0",
        "zram0",
        "sr0",
        "nbd1",
    ] {
        assert!(!counted_disk(d, None), "{d}");
    }
    for i in ["eth0", "ens5", "enp0s3", "bond0", "ib0"] {
        assert!(counted_interface(i, None), "{i}");
    }
    for i in [
        "lo",
        "veth1a2b",
        "docker0",
        "br-1234",
        "cni0",
        "flannel.1",
        "cali123",
        "ifb0",
        "tun0",
        "wg0",
    ] {
        assert!(!counted_interface(i, None), "{i}");
    }
    let only: BTreeSet<String> = ["zram0".to_string(), "ifb0".to_string()].into();
    assert!(counted_disk("zram0", Some(&only)) && !counted_disk("vda", Some(&only)));
    assert!(counted_interface("ifb0", Some(&only)) && !counted_interface("eth0", Some(&only)));
}

#[test]
fn configured_capacities_win_and_measured_ones_only_grow() {
    let caps =
        parse_capacities(&["disk_write=2e8, network=1.25e9".into(), "cpu=16".into()]).unwrap();
    assert_eq!(caps[&Resource::DiskWrite], 2e8);
    assert_eq!(caps[&Resource::Cpu], 16.0);
    assert!(parse_capacities(&["memory=1".into()]).is_err());
    assert!(parse_capacities(&["disk=1".into()])
        .unwrap_err()
        .contains("unknown resource"));
    assert!(parse_capacities(&["cpu=-1".into()]).is_err());
    assert!(parse_capacities(&["cpu".into()]).is_err());
    let opts = HostMetricsOptions {
        capacity: caps,
        ..Default::default()
    };
    let rows = translate(&all_answers(), &opts);
    assert!(of(&rows, "disk_write")
        .iter()
        .all(|r| r.capacity == Some(2e8)));
    assert!(of(&rows, "cpu").iter().all(|r| r.capacity == Some(16.0)));
    assert!(of(&rows, "memory").iter().all(|r| r.capacity.is_none()));

    // With shared maxima (one `--watch`), a quiet stretch keeps the
    // capacity measured before it.
    let opts = HostMetricsOptions::default();
    let busy = synthetic(
        "node_disk_read_bytes_total",
        r#","device":"sda""#,
        &[(0.0, "0"), (10.0, "1000")],
    );
    let quiet = synthetic(
        "node_disk_read_bytes_total",
        r#","device":"sda""#,
        &[(10.0, "1000"), (20.0, "1100")],
    );
    assert_eq!(translate(&[busy], &opts)[0].capacity, Some(100.0));
    assert_eq!(
        translate(std::slice::from_ref(&quiet), &opts)[0].capacity,
        Some(100.0)
    );
    assert_eq!(
        translate(&[quiet], &HostMetricsOptions::default())[0].capacity,
        Some(10.0)
    );
}

#[test]
fn sar_files_become_windows() {
    let text = std::fs::read(SAR).unwrap();
    let rows = translate(std::slice::from_ref(&text), &HostMetricsOptions::default());
    let v: Value = serde_json::from_slice(&text).unwrap();
    let host = &v["sysstat"]["hosts"][0];
    let cpus = host["number-of-cpus"].as_f64().unwrap();
    let name = host["nodename"].as_str().unwrap();
    let stats = host["statistics"].as_array().unwrap();
    assert!(rows.iter().all(|r| r.host == name));
    let cpu = of(&rows, "cpu");
    assert_eq!(cpu.len(), stats.len());
    let mut previous_avail: Option<f64> = None;
    for s in stats {
        let ts = &s["timestamp"];
        let end = chrono::DateTime::parse_from_rfc3339(&format!(
            "{}T{}Z",
            ts["date"].as_str().unwrap(),
            ts["time"].as_str().unwrap()
        ))
        .unwrap()
        .timestamp_micros();
        let interval = ts["interval"].as_f64().unwrap();
        let start = end - (interval * 1e6) as i64;
        let find = |res: &str| {
            rows.iter()
                .find(|r| r.resource == res && r.start == start && r.end == end)
                .cloned()
        };
        let all = s["cpu-load"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["cpu"] == "all")
            .unwrap();
        let busy =
            (100.0 - all["idle"].as_f64().unwrap() - all["iowait"].as_f64().unwrap()) / 100.0;
        let r = find("cpu").unwrap();
        assert!(close(r.used, busy * cpus * interval), "{r:?}");
        assert_eq!(r.capacity, Some(cpus));
        let written: f64 = s["disk"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["disk-device"] == "vda")
            .map(|d| d["wkB"].as_f64().unwrap() * 1024.0 * interval)
            .sum();
        assert!(close(find("disk_write").unwrap().used, written));
        let rx: f64 = s["network"]["net-dev"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["iface"] == "eth0")
            .map(|n| n["rxkB"].as_f64().unwrap() * 1024.0 * interval)
            .sum();
        assert!(close(find("network").unwrap().used, rx));
        let avail = s["memory"]["avail"].as_f64().unwrap();
        match previous_avail {
            None => assert!(
                find("memory").is_none(),
                "the first record has no memory window"
            ),
            Some(p) => assert!(close(
                find("memory").unwrap().used,
                ((p - avail) * 1024.0).max(0.0)
            )),
        }
        previous_avail = Some(avail);
    }
    // The hog kept the cores busy while sar looked.
    assert!(cpu.iter().map(|r| r.used).sum::<f64>() > 0.5 * cpus * cpu.len() as f64);
}

#[test]
fn sar_local_times_are_refused() {
    let text = String::from_utf8(std::fs::read(SAR).unwrap()).unwrap();
    let local = text
        .replace("\"utc\": 1", "\"utc\": 0")
        .replace("\"timezone\": \"UTC\"", "\"timezone\": \"CET\"");
    let err = sar::parse(local.as_bytes()).err().unwrap();
    assert!(err.contains("without -T or -t"), "{err}");
    // Local times of a machine on UTC are UTC.
    let utc_local = text.replace("\"utc\": 1", "\"utc\": 0");
    assert!(sar::parse(utc_local.as_bytes()).is_ok());
}

#[test]
fn query_ranges_are_aligned_and_chunked() {
    let s = 1_000_000;
    assert_eq!(chunks(10 * s + 300, 40 * s + 7, 15 * s), vec![(0, 30 * s)]);
    assert_eq!(chunks(10 * s, 14 * s, 15 * s), vec![]);
    let long = chunks(0, 2500 * s, s);
    assert_eq!(
        long,
        vec![
            (0, MAX_STEPS * s),
            (MAX_STEPS * s, 2 * MAX_STEPS * s),
            (2 * MAX_STEPS * s, 2500 * s)
        ]
    );
    assert_eq!(parse_prometheus_duration("15s"), Some(15 * s));
    assert_eq!(parse_prometheus_duration("1m30s"), Some(90 * s));
    assert_eq!(parse_prometheus_duration("500ms"), Some(s / 2));
    assert_eq!(parse_prometheus_duration("1h"), Some(3600 * s));
    assert_eq!(parse_prometheus_duration("1x"), None);
    assert_eq!(parse_prometheus_duration(""), None);
    assert_eq!(Metric::Cpu.query(None), "node_cpu_seconds_total");
    assert_eq!(
        Metric::DiskRead.query(Some(r#"job="node""#)),
        r#"node_disk_read_bytes_total{job="node"}"#
    );
}
