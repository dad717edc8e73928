//! Host metrics: the real Debian `prometheus` scraping the real
//! `prometheus-node-exporter` on this machine while a CPU hog and a disk
//! writer run outside any query, next to a small workload of real threads
//! whose tasks are written as interchange CSV; `culprit collect prometheus`
//! asks Prometheus, and `culprits()` names the hog `external`, with every
//! culprit's seconds equal to the method applied (here, independently) to
//! what Prometheus itself answers. Fast tests read the recorded answers of
//! tests/data/hostmetrics.
//!
//! The binaries come from Debian (`.ci/run` installs `prometheus`,
//! `prometheus-node-exporter` and `sysstat`): missing or failing to start,
//! the test fails, it is never skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type};
use culprit_store::Store;
use serde_json::Value;

use crate::common::{culprit, repo_root, run, run_ok};
use crate::spark::query;

fn fixtures() -> PathBuf {
    repo_root().join("tests/data/hostmetrics")
}

/// Now, microseconds since the epoch.
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

fn rfc3339(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// A text column (any string encoding) as strings, NULL as "".
fn texts(b: &RecordBatch, c: &str) -> Vec<String> {
    let col = arrow::compute::cast(b.column_by_name(c).unwrap(), &DataType::Utf8).unwrap();
    let s = col.as_string::<i32>();
    (0..s.len())
        .map(|i| {
            if s.is_valid(i) {
                s.value(i).to_string()
            } else {
                String::new()
            }
        })
        .collect()
}

fn floats(b: &RecordBatch, c: &str) -> Vec<f64> {
    let a = b
        .column_by_name(c)
        .unwrap()
        .as_primitive::<Float64Type>()
        .clone();
    (0..a.len()).map(|i| a.value(i)).collect()
}

/// The culprits of a victim, by name: a query id, or `self`, `external`,
/// `unknown`, `gc`.
async fn culprits(store: &Store, victim: &str, extra: &str) -> BTreeMap<String, f64> {
    let batches = query(
        store,
        &format!(
            "SELECT culprit_kind, culprit_query, blame_seconds FROM culprits('{victim}'{extra})"
        ),
    )
    .await;
    let mut out = BTreeMap::new();
    for b in &batches {
        let (kinds, queries, secs) = (
            texts(b, "culprit_kind"),
            texts(b, "culprit_query"),
            floats(b, "blame_seconds"),
        );
        for i in 0..b.num_rows() {
            let name = if kinds[i] == "query" {
                queries[i].clone()
            } else {
                kinds[i].clone()
            };
            *out.entry(name).or_insert(0.0) += secs[i];
        }
    }
    out
}

/// Blame of a victim per (resource, culprit name).
async fn blame(store: &Store, victim: &str) -> BTreeMap<(String, String), f64> {
    let batches = query(
        store,
        &format!(
            "SELECT resource, culprit_kind, culprit_query, sum(blame_seconds) AS s FROM blame('{victim}') GROUP BY 1, 2, 3"
        ),
    )
    .await;
    let mut out = BTreeMap::new();
    for b in &batches {
        let (res, kinds, queries, secs) = (
            texts(b, "resource"),
            texts(b, "culprit_kind"),
            texts(b, "culprit_query"),
            floats(b, "s"),
        );
        for i in 0..b.num_rows() {
            let name = if kinds[i] == "query" {
                queries[i].clone()
            } else {
                kinds[i].clone()
            };
            *out.entry((res[i].clone(), name)).or_insert(0.0) += secs[i];
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

// ---------------------------------------------------------------------------
// The method, applied independently (method §2 and §5, docs/method.md): per
// elementary window of one host and resource, a victim task's blocked rate
// goes to the other tasks by what they acquire, to `external` by measured
// use beyond all tasks', to `unknown` by capacity nobody used (or all of it
// when nobody else acquired anything).

/// A task known by its totals.
#[derive(Debug, Clone)]
struct Task {
    id: String,
    query: String,
    launch: i64,
    finish: i64,
    cpu_seconds: f64,
    cpu_blocked: f64,
    output_bytes: f64,
    disk_write_blocked: f64,
}

impl Task {
    /// (acquired, blocked) of the task over its run for a resource.
    fn totals(&self, resource: &str) -> (f64, f64) {
        match resource {
            "cpu" => (self.cpu_seconds, self.cpu_blocked),
            "disk_write" => (self.output_bytes, self.disk_write_blocked),
            _ => (0.0, 0.0),
        }
    }
}

/// A measured window: [start, end), capacity per second, units used.
#[derive(Debug, Clone, Copy)]
struct HostWindow {
    start: i64,
    end: i64,
    capacity: Option<f64>,
    used: f64,
}

/// The victim's blame per culprit name for one resource of one host.
fn expected_blame(
    victim: &str,
    tasks: &[Task],
    resource: &str,
    windows: &[HostWindow],
) -> BTreeMap<String, f64> {
    let mut cuts: BTreeSet<i64> = BTreeSet::new();
    for t in tasks {
        cuts.extend([t.launch, t.finish]);
    }
    for w in windows {
        cuts.extend([w.start, w.end]);
    }
    let cuts: Vec<i64> = cuts.into_iter().collect();
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for pair in cuts.windows(2) {
        let (t0, t1) = (pair[0], pair[1]);
        let dt = (t1 - t0) as f64 / 1e6;
        let active: Vec<&Task> = tasks
            .iter()
            .filter(|t| t.launch <= t0 && t1 <= t.finish)
            .collect();
        let rate = |t: &Task| {
            let (a, b) = t.totals(resource);
            let run = (t.finish - t.launch) as f64 / 1e6;
            (a / run, b / run)
        };
        let total: f64 = active.iter().map(|t| rate(t).0).sum();
        let host = windows.iter().find(|w| w.start <= t0 && t1 <= w.end);
        let used = host.map(|w| w.used / ((w.end - w.start) as f64 / 1e6));
        let cap = host.and_then(|w| w.capacity);
        let external = used.map_or(0.0, |u| (u - total).max(0.0));
        let unknown = cap.map_or(0.0, |c| (c - used.unwrap_or(0.0).max(total)).max(0.0));
        for v in active.iter().filter(|t| t.query == victim) {
            let (a_v, b_v) = rate(v);
            if b_v <= 0.0 {
                continue;
            }
            let d = (total - a_v).max(0.0) + external + unknown;
            if d <= (total + external + unknown) * 1e-12 {
                *out.entry("unknown".into()).or_default() += b_v * dt;
                continue;
            }
            let share = b_v * dt / d;
            for c in active.iter().filter(|c| c.id != v.id) {
                let name = if c.query == victim {
                    "self".to_string()
                } else {
                    c.query.clone()
                };
                *out.entry(name).or_default() += share * rate(c).0;
            }
            *out.entry("external".into()).or_default() += share * external;
            *out.entry("unknown".into()).or_default() += share * unknown;
        }
    }
    out.retain(|_, v| *v > 1e-12);
    out
}

/// Writes a workload's queries, stages and tasks as interchange CSV.
fn write_workload(dir: &Path, host: &str, tasks: &[Task]) {
    std::fs::create_dir_all(dir).unwrap();
    let queries: BTreeSet<&str> = tasks.iter().map(|t| t.query.as_str()).collect();
    let mut q = String::from("query_id,user\n");
    let mut s = String::from("query_id,stage_id,start_time,end_time\n");
    for query in queries {
        q.push_str(&format!("{query},tester\n"));
        let mine = tasks.iter().filter(|t| t.query == query);
        let start = mine.clone().map(|t| t.launch).min().unwrap();
        let end = mine.map(|t| t.finish).max().unwrap();
        s.push_str(&format!("{query},s1,{},{}\n", rfc3339(start), rfc3339(end)));
    }
    let mut t = String::from(
        "task_id,query_id,stage_id,host,launch_time,finish_time,cpu_seconds,cpu_blocked,output_bytes,disk_write_blocked\n",
    );
    for task in tasks {
        t.push_str(&format!(
            "{},{},s1,{host},{},{},{},{},{},{}\n",
            task.id,
            task.query,
            rfc3339(task.launch),
            rfc3339(task.finish),
            task.cpu_seconds,
            task.cpu_blocked,
            task.output_bytes,
            task.disk_write_blocked
        ));
    }
    std::fs::write(dir.join("queries.csv"), q).unwrap();
    std::fs::write(dir.join("stages.csv"), s).unwrap();
    std::fs::write(dir.join("tasks.csv"), t).unwrap();
}

/// Per-window counter sums of the series `pick` keeps, from a range-query
/// answer: windows between samples one step apart, where every picked
/// series has both samples; with the count of `count_label` values.
fn windows_of(
    answer: &Value,
    step: i64,
    pick: impl Fn(&serde_json::Map<String, Value>) -> bool,
    used_by: impl Fn(&serde_json::Map<String, Value>) -> bool,
    count_label: &str,
) -> BTreeMap<(i64, i64), (f64, usize)> {
    let mut out: BTreeMap<(i64, i64), (f64, BTreeSet<String>)> = BTreeMap::new();
    assert_eq!(answer["status"], "success", "{answer}");
    for s in answer["data"]["result"].as_array().unwrap() {
        let labels = s["metric"].as_object().unwrap();
        if !pick(labels) {
            continue;
        }
        let points: BTreeMap<i64, f64> = s["values"]
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
        for (&t, &v0) in &points {
            let Some(&v1) = points.get(&(t + step)) else {
                continue;
            };
            let e = out.entry((t, t + step)).or_default();
            if used_by(labels) {
                e.0 += if v1 >= v0 { v1 - v0 } else { v1 };
            }
            e.1.insert(
                labels
                    .get(count_label)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            );
        }
    }
    out.into_iter()
        .map(|(k, (u, set))| (k, (u, set.len())))
        .collect()
}

// ---------------------------------------------------------------------------
// The real Prometheus and node_exporter.

/// A process this test started, killed when dropped.
struct Proc {
    name: &'static str,
    child: Child,
    log: Option<PathBuf>,
}

impl Proc {
    fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Panics with its log when it has exited.
    fn alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.name, self.log());
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path of a Debian binary; missing, the test fails.
fn binary(name: &str, package: &str) -> PathBuf {
    let path = Path::new("/usr/bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: install Debian's {package} (.ci/run does: apt-get install prometheus prometheus-node-exporter sysstat)",
        path.display()
    );
    path
}

fn spawn(name: &'static str, cmd: &mut Command, log: Option<PathBuf>) -> Proc {
    if let Some(log) = &log {
        let f = std::fs::File::create(log).unwrap();
        cmd.stdout(f.try_clone().unwrap()).stderr(f);
    } else {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    Proc { name, child, log }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A GET over HTTP/1.0 (no client library: the test reads what
/// Prometheus answers by itself). `None` when nothing listens yet.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Waits until `ready` holds, polling; panics with the process's log.
fn wait_for(p: &mut Proc, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        p.alive();
        assert!(
            Instant::now() < deadline,
            "{}: {what} did not happen in 60 s:\n{}",
            p.name,
            p.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// node_exporter and Prometheus (scraping it every second) on free
/// loopback ports, storage in `dir`. Returns them and Prometheus' port and
/// the exporter's instance label.
fn start_prometheus(dir: &Path) -> (Proc, Proc, u16, String) {
    let exporter_bin = binary("prometheus-node-exporter", "prometheus-node-exporter");
    let prometheus_bin = binary("prometheus", "prometheus");
    let (np, pp) = (free_port(), free_port());
    let instance = format!("127.0.0.1:{np}");
    let mut exporter = spawn(
        "prometheus-node-exporter",
        Command::new(exporter_bin).args([
            &format!("--web.listen-address={instance}"),
            "--collector.disable-defaults",
            "--collector.cpu",
            "--collector.diskstats",
            "--collector.netdev",
            "--collector.meminfo",
        ]),
        Some(dir.join("node-exporter.log")),
    );
    wait_for(&mut exporter, "serving /metrics", || {
        http_get(np, "/metrics")
            .is_some_and(|(s, b)| s == 200 && b.contains("node_cpu_seconds_total"))
    });
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['{instance}']\n"
        ),
    )
    .unwrap();
    let mut prometheus = spawn(
        "prometheus",
        Command::new(prometheus_bin).args([
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            &format!("--web.listen-address=127.0.0.1:{pp}"),
        ]),
        Some(dir.join("prometheus.log")),
    );
    wait_for(&mut prometheus, "ready", || {
        http_get(pp, "/-/ready").is_some_and(|(s, _)| s == 200)
    });
    // Three good scrapes, so the windows before the workload have samples.
    wait_for(&mut prometheus, "three scrapes of node_exporter", || {
        http_get(pp, "/api/v1/query?query=sum_over_time(up%5B10s%5D)").is_some_and(|(s, b)| {
            s == 200
                && serde_json::from_str::<Value>(&b).is_ok_and(|v| {
                    v["data"]["result"][0]["value"][1]
                        .as_str()
                        .and_then(|x| x.parse::<f64>().ok())
                        .is_some_and(|n| n >= 3.0)
                })
        })
    });
    (exporter, prometheus, pp, instance)
}

/// This thread's (cpu seconds, seconds runnable but waiting for a cpu).
fn thread_schedstat() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    let f: Vec<f64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (f[0] / 1e9, f[1] / 1e9)
}

/// cpu seconds a process has run.
fn process_cpu(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).expect("schedstat");
    s.split_whitespace().next().unwrap().parse::<f64>().unwrap() / 1e9
}

/// One task: a real thread computing and writing with fsync for about
/// `seconds`, measured by the kernel (cpu time and run delay from
/// schedstat, disk time around each write and fsync).
fn run_task(id: &str, query: &str, seconds: f64, dir: &Path) -> Task {
    let path = dir.join(format!("{id}.out"));
    let launch = now_us();
    let started = Instant::now();
    let (cpu0, delay0) = thread_schedstat();
    let (mut output_bytes, mut disk) = (0.0, 0.0);
    let chunk = vec![7u8; 1 << 20];
    let mut x: u64 = 1;
    let mut round = 0;
    while started.elapsed().as_secs_f64() < seconds {
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        round += 1;
        if round % 8 == 0 {
            let t = Instant::now();
            let mut f = std::fs::File::create(&path).unwrap();
            f.write_all(&chunk).unwrap();
            f.sync_all().unwrap();
            disk += t.elapsed().as_secs_f64();
            output_bytes += chunk.len() as f64;
        }
    }
    let (cpu1, delay1) = thread_schedstat();
    let finish = now_us();
    std::hint::black_box(x);
    Task {
        id: id.to_string(),
        query: query.to_string(),
        launch,
        finish,
        cpu_seconds: cpu1 - cpu0,
        cpu_blocked: delay1 - delay0,
        output_bytes,
        disk_write_blocked: disk,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_names_the_cpu_hog_external() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_exporter, mut prometheus, port, instance) = start_prometheus(dir);
    let host = "worker-1";
    let host_map = dir.join("hosts.txt");
    std::fs::write(
        &host_map,
        format!("# node_exporter instance -> task host\n{instance} {host}\n"),
    )
    .unwrap();

    // The noisy neighbours: two busy shells and a disk writer, in no query.
    let begin = now_us();
    let hogs: Vec<Proc> = (0..2)
        .map(|_| {
            spawn(
                "cpu hog",
                Command::new("sh").args(["-c", "while :; do :; done"]),
                None,
            )
        })
        .collect();
    // The writer counts its finished rounds (4 MiB each, fsynced), so
    // the bytes it wrote are known from its own arguments. The count is
    // replaced by a rename, never truncated: the writer is killed at any
    // point (a CI run read 0 rounds after killing it between the
    // truncation of the count and its write).
    let writer_file = dir.join("writer.out");
    let writer_rounds = dir.join("writer.rounds");
    let rounds_done = || -> f64 {
        std::fs::read_to_string(&writer_rounds)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0.0)
    };
    // On a busy machine an fsync can take seconds: the workload starts
    // once the writer has finished a round, and stops after its second.
    let wait_rounds = |n: f64| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while rounds_done() < n {
            assert!(
                Instant::now() < deadline,
                "the disk writer finished {} rounds of 4 MiB in 120 s, not {n}",
                rounds_done()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let writer = spawn(
        "disk writer",
        Command::new("sh").args([
            "-c",
            &format!(
                "n=0; while :; do dd if=/dev/zero of={} bs=1M count=4 conv=fsync status=none; n=$((n+1)); echo $n > {rounds}.new && mv {rounds}.new {rounds}; done",
                writer_file.display(),
                rounds = writer_rounds.display()
            ),
        ]),
        None,
    );
    let hog_cpu0: f64 = hogs.iter().map(|h| process_cpu(h.child.id())).sum();
    std::thread::sleep(Duration::from_millis(1500));
    wait_rounds(1.0);

    // The workload: q-other's task, then q-victim's two, overlapping.
    let work = dir.to_path_buf();
    let other = {
        let w = work.clone();
        std::thread::spawn(move || run_task("o1", "q-other", 4.5, &w))
    };
    std::thread::sleep(Duration::from_millis(300));
    let victims: Vec<_> = ["v1", "v2"]
        .into_iter()
        .map(|id| {
            let w = work.clone();
            std::thread::spawn(move || run_task(id, "q-victim", 4.0, &w))
        })
        .collect();
    let mut tasks: Vec<Task> = victims.into_iter().map(|h| h.join().unwrap()).collect();
    tasks.push(other.join().unwrap());
    std::thread::sleep(Duration::from_millis(1000));
    wait_rounds(2.0);
    let hog_cpu: f64 = hogs.iter().map(|h| process_cpu(h.child.id())).sum::<f64>() - hog_cpu0;
    drop(hogs);
    drop(writer);
    let rounds = rounds_done();
    let writer_bytes = rounds * 4.0 * 1024.0 * 1024.0;
    let end = now_us();
    // The samples after the end are scraped and stored.
    std::thread::sleep(Duration::from_secs(4));
    prometheus.alive();
    for t in &tasks {
        assert!(t.cpu_seconds > 0.1 && t.cpu_blocked > 0.05, "{t:?}");
    }

    // Ingest the workload, then collect the host metrics.
    let store_path = dir.join("store");
    let store_s = store_path.to_str().unwrap().to_string();
    let data = dir.join("workload");
    write_workload(&data, host, &tasks);
    run_ok(&["ingest", "--store", &store_s, data.to_str().unwrap()]);
    let (from, to) = (begin - 2_000_000, end + 2_500_000);
    let url = format!("http://127.0.0.1:{port}");
    let saved = dir.join("answers");
    let collect = |save: Option<&Path>| {
        let mut args = vec![
            "collect".to_string(),
            "prometheus".into(),
            "--store".into(),
            store_s.clone(),
            "--url".into(),
            url.clone(),
            "--from".into(),
            rfc3339(from),
            "--to".into(),
            rfc3339(to),
            "--step".into(),
            "1s".into(),
            "--host-map".into(),
            host_map.display().to_string(),
        ];
        if let Some(s) = save {
            args.extend(["--save".into(), s.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "culprit {args:?}:\n{err}");
        err
    };
    let first = collect(Some(&saved));
    assert!(first.contains("6 host metrics files"), "{first}");
    assert!(first.contains("host_windows"), "{first}");
    assert!(first.contains(&format!("{instance} -> {host}")), "{first}");

    // What Prometheus answers, read by this test on its own: the same
    // aligned range and step as culprit's.
    let step = 1_000_000i64;
    let (start, stop) = (from - from.rem_euclid(step), to - to.rem_euclid(step));
    let ask = |metric: &str| -> Value {
        let (status, body) = http_get(
            port,
            &format!(
                "/api/v1/query_range?query={metric}&start={}&end={}&step=1",
                start / 1_000_000,
                stop / 1_000_000
            ),
        )
        .unwrap();
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    let cpu_answer = ask("node_cpu_seconds_total");
    let cpu = windows_of(
        &cpu_answer,
        step,
        |_| true,
        |l| l["mode"] != "idle" && l["mode"] != "iowait",
        "cpu",
    );
    // Whole disks: the block devices with a device behind them.
    let disks: BTreeSet<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("device").exists())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert!(!disks.is_empty(), "no disk in /sys/block");
    let written = windows_of(
        &ask("node_disk_written_bytes_total"),
        step,
        |l| l["device"].as_str().is_some_and(|d| disks.contains(d)),
        |_| true,
        "device",
    );
    let cpu_windows: Vec<HostWindow> = cpu
        .iter()
        .map(|(&(s, e), &(used, cores))| HostWindow {
            start: s,
            end: e,
            capacity: Some(cores as f64),
            used,
        })
        .collect();
    let disk_max = written
        .iter()
        .map(|(&(s, e), &(u, _))| u / ((e - s) as f64 / 1e6))
        .fold(0.0, f64::max);
    let disk_windows: Vec<HostWindow> = written
        .iter()
        .map(|(&(s, e), &(used, _))| HostWindow {
            start: s,
            end: e,
            capacity: (disk_max > 0.0).then_some(disk_max),
            used,
        })
        .collect();

    // The hog's cpu time is in the measured use beyond the workload's.
    let measured: f64 = cpu.values().map(|(u, _)| u).sum();
    let workload: f64 = tasks.iter().map(|t| t.cpu_seconds).sum();
    assert!(
        measured - workload >= 0.95 * hog_cpu,
        "measured {measured} cpu-s, workload {workload}, hog {hog_cpu}"
    );
    assert!(hog_cpu > 2.0, "the hogs ran: {hog_cpu} cpu-s");
    // The writer's bytes are in the measured disk writes beyond the
    // workload's own (the page cache may merge nothing: every round is
    // fsynced; journal and other writers only add).
    let measured_written: f64 = written.values().map(|(u, _)| u).sum();
    let workload_written: f64 = tasks.iter().map(|t| t.output_bytes).sum();
    assert!(
        rounds >= 2.0,
        "the disk writer finished {rounds} rounds of 4 MiB"
    );
    assert!(
        measured_written - workload_written >= 0.8 * writer_bytes,
        "measured {measured_written} bytes written, workload {workload_written}, writer {writer_bytes}"
    );

    // The stored rows are those windows.
    let store = Store::open(&store_s).unwrap();
    let n = crate::spark::count(
        &store,
        &format!("SELECT count(*) FROM host_windows WHERE host = '{host}' AND resource = 'cpu' AND scope IS NULL"),
    )
    .await;
    assert_eq!(n as usize, cpu_windows.len());

    // culprits() names the hog external, and every culprit's seconds are
    // the method applied to what Prometheus says.
    let mut expected: BTreeMap<String, f64> = BTreeMap::new();
    let by_resource = blame(&store, "q-victim").await;
    for (resource, windows) in [("cpu", &cpu_windows), ("disk_write", &disk_windows)] {
        let want = expected_blame("q-victim", &tasks, resource, windows);
        for (name, secs) in &want {
            let got = by_resource
                .get(&(resource.to_string(), name.clone()))
                .copied()
                .unwrap_or(0.0);
            assert!(
                close(got, *secs),
                "{resource} {name}: culprit {got}, expected {secs}\n{by_resource:?}"
            );
            *expected.entry(name.clone()).or_default() += secs;
        }
        for ((r, name), got) in &by_resource {
            if r == resource {
                assert!(
                    want.contains_key(name) || *got < 1e-9,
                    "{r} {name}: {got} unexpected"
                );
            }
        }
    }
    let got = culprits(&store, "q-victim", "").await;
    eprintln!(
        "hog {hog_cpu:.2} cpu-s; measured {measured:.2} cpu-s, workload {workload:.2}; culprits() {got:?}; expected {expected:?}"
    );
    for (name, secs) in &expected {
        assert!(
            close(got[name], *secs),
            "{name}: culprits() {}, expected {secs}",
            got[name]
        );
    }
    let external = got.get("external").copied().unwrap_or(0.0);
    assert!(external > 0.5, "the hog is external: {got:?}");
    assert!(by_resource
        .get(&("cpu".into(), "external".into()))
        .is_some_and(|s| *s > 0.5));
    // The writer is one of the chief culprits of the victim's disk
    // writes: it writes without pause (4 MiB rounds, fsynced), many times
    // each task's bytes. How large its share is depends on the disk (on
    // one CI machine the workload's own writes were 37% of the bytes and
    // the writer's share of the blame 45%, the next, `q-other`, 22%; on
    // another it came second in two runs of 2026-11-29, once with 1.59 s
    // against `q-other`'s 1.61 s), so the test asks for a share of the
    // blame of at least half its share of the bytes written while the
    // victim ran (the windows that overlap its tasks: the method weighs
    // those, and the writer wrote alone before and after the workload;
    // the bytes there beyond the whole workload's: the writer's, and the
    // journal's and others', a bound stricter than the writer's own
    // share) and at least half the largest query's: not to be the
    // largest, which the disk decides, not the method. (Over the whole
    // range the writer's share was larger than in the victim's windows,
    // and a slow machine's run of 2026-12-01 fell below half of it: 1.585
    // blamed seconds against a bound of 1.776.)
    let victim_disk: f64 = tasks
        .iter()
        .filter(|t| t.query == "q-victim")
        .map(|t| t.disk_write_blocked)
        .sum();
    let disk_of = |name: &str| {
        by_resource
            .get(&("disk_write".to_string(), name.to_string()))
            .copied()
            .unwrap_or(0.0)
    };
    let disk_external = disk_of("external");
    let victim_span = tasks
        .iter()
        .filter(|t| t.query == "q-victim")
        .fold((i64::MAX, i64::MIN), |(lo, hi), t| {
            (lo.min(t.launch), hi.max(t.finish))
        });
    let written_in_span: f64 = written
        .iter()
        .filter(|((s, e), _)| *e > victim_span.0 && *s < victim_span.1)
        .map(|(_, (u, _))| u)
        .sum();
    let writer_share = ((written_in_span - workload_written) / written_in_span.max(1.0)).max(0.0);
    eprintln!(
        "writer {rounds} rounds ({writer_bytes} bytes); measured {measured_written} bytes written, {written_in_span} while the victim ran, workload {workload_written}; disk_write external {disk_external:.3} s of the victim's {victim_disk:.3} s"
    );
    let largest_other = by_resource
        .iter()
        .filter(|((r, name), _)| r == "disk_write" && name != "external")
        .map(|(_, s)| *s)
        .fold(0.0, f64::max);
    assert!(
        victim_disk > 0.01
            && disk_external >= 0.5 * largest_other
            && disk_external >= 0.5 * writer_share * victim_disk,
        "disk_write external {disk_external} of {victim_disk} blocked s (writer's share of the bytes while the victim ran {writer_share:.2}): {by_resource:?}"
    );
    // Conservation: the blame adds up to the victim's blocked seconds.
    let blocked: f64 = tasks
        .iter()
        .filter(|t| t.query == "q-victim")
        .map(|t| t.cpu_blocked + t.disk_write_blocked)
        .sum();
    assert!(
        close(got.values().sum::<f64>(), blocked),
        "{got:?} vs {blocked}"
    );

    // Collecting again adds nothing; the saved answers ingest to the same
    // rows (nothing new in this store, the same rows in a fresh one).
    let rows_before = crate::spark::count(&store, "SELECT count(*) FROM host_windows").await;
    let again = collect(None);
    assert!(again.contains("no new rows"), "{again}");
    let reingest = run(&[
        "ingest",
        "--store",
        &store_s,
        "--host-map",
        host_map.to_str().unwrap(),
        saved.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&reingest.stderr);
    assert!(
        reingest.status.success() && err.contains("no new rows"),
        "{err}"
    );
    let store = Store::open(&store_s).unwrap();
    assert_eq!(
        crate::spark::count(&store, "SELECT count(*) FROM host_windows").await,
        rows_before
    );
    let fresh = dir.join("fresh");
    run_ok(&[
        "ingest",
        "--store",
        fresh.to_str().unwrap(),
        "--host-map",
        host_map.to_str().unwrap(),
        saved.to_str().unwrap(),
    ]);
    let sql = "SELECT host, resource, window_start, window_end, capacity, used FROM host_windows ORDER BY 1, 2, 3";
    let a = run_ok(&["sql", "--store", &store_s, "--format", "csv", sql]);
    let b = run_ok(&[
        "sql",
        "--store",
        fresh.to_str().unwrap(),
        "--format",
        "csv",
        sql,
    ]);
    assert_eq!(a, b);

    // --selector, --capacity and --devices of collect: a selector leaving
    // out the `system` mode (series without a mode label still match),
    // configured cpu and disk_write capacities, and only this disk counted.
    // The rows are what Prometheus answers for those series, read here.
    let disk = disks.iter().next().unwrap().clone();
    let selected = dir.join("selected");
    let out = run(&[
        "collect",
        "prometheus",
        "--store",
        selected.to_str().unwrap(),
        "--url",
        &url,
        "--from",
        &rfc3339(from),
        "--to",
        &rfc3339(to),
        "--step",
        "1s",
        "--host-map",
        host_map.to_str().unwrap(),
        "--selector",
        &format!("instance=\"{instance}\",mode!=\"system\""),
        "--capacity",
        "cpu=1.5,disk_write=123456789",
        "--devices",
        &disk,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let no_system = windows_of(
        &cpu_answer,
        step,
        |_| true,
        |l| l["mode"] != "idle" && l["mode"] != "iowait" && l["mode"] != "system",
        "cpu",
    );
    let one_disk = windows_of(
        &ask("node_disk_written_bytes_total"),
        step,
        |l| l["device"] == disk.as_str(),
        |_| true,
        "device",
    );
    let system: f64 = measured - no_system.values().map(|(u, _)| u).sum::<f64>();
    assert!(system > 0.1, "system-mode cpu-s in the range: {system}");
    let rows = |resource: &str| -> BTreeMap<(i64, i64), (String, f64)> {
        run_ok(&[
            "sql",
            "--store",
            selected.to_str().unwrap(),
            "--format",
            "csv",
            &format!(
                "SELECT CAST(window_start AS BIGINT), CAST(window_end AS BIGINT), capacity, used \
                 FROM host_windows WHERE host = '{host}' AND resource = '{resource}' ORDER BY 1"
            ),
        ])
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                (f[0].parse().unwrap(), f[1].parse().unwrap()),
                (f[2].to_string(), f[3].parse().unwrap()),
            )
        })
        .collect()
    };
    let cpu_rows = rows("cpu");
    assert_eq!(
        cpu_rows.keys().collect::<Vec<_>>(),
        no_system.keys().collect::<Vec<_>>()
    );
    for (k, (cap, used)) in &cpu_rows {
        assert_eq!(cap.parse::<f64>().unwrap(), 1.5, "{k:?}");
        assert!(
            close(*used, no_system[k].0),
            "cpu {k:?}: stored {used}, Prometheus without system {}, with {}",
            no_system[k].0,
            cpu[k].0
        );
    }
    let disk_rows = rows("disk_write");
    assert_eq!(
        disk_rows.keys().collect::<Vec<_>>(),
        one_disk.keys().collect::<Vec<_>>()
    );
    for (k, (cap, used)) in &disk_rows {
        assert_eq!(cap.parse::<f64>().unwrap(), 123456789.0, "{k:?}");
        assert!(
            close(*used, one_disk[k].0),
            "disk_write {k:?}: {used} vs {}",
            one_disk[k].0
        );
    }
    // A selector matching no node_exporter series fails at once, storing
    // nothing.
    let nothing = dir.join("nothing");
    let out = run(&[
        "collect",
        "prometheus",
        "--store",
        nothing.to_str().unwrap(),
        "--url",
        &url,
        "--from",
        &rfc3339(from),
        "--to",
        &rfc3339(to),
        "--step",
        "1s",
        "--selector",
        "instance=\"127.0.0.1:1\"",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("does --selector match it"),
        "{err}"
    );

    // --watch follows: each look stores the windows that ended since the
    // one before, none twice and none lost between two looks (the stored
    // windows are those Prometheus answers over their whole span). Without
    // --step, the step is the targets' scrape interval (1 s).
    let watched = dir.join("watched");
    let log_path = dir.join("watch.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut watch = culprit()
        .args([
            "collect",
            "prometheus",
            "--store",
            watched.to_str().unwrap(),
        ])
        .args([
            "--url",
            &url,
            "--watch",
            "--from",
            "now-4s",
            "--interval",
            "1",
        ])
        .args(["--host-map", host_map.to_str().unwrap()])
        .env_remove("CULPRIT_STORE")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text.matches("rows: host_windows").count() >= 3 {
            break;
        }
        if let Ok(Some(status)) = watch.try_wait() {
            panic!("collect --watch exited ({status}):\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "three looks did not store rows in 60 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let sent = Command::new("kill")
        .args(["-INT", &watch.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = watch.wait().unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        status.success() && text.contains("stopped collecting"),
        "{status}:\n{text}"
    );
    assert!(text.contains("step 1 s"), "{text}");
    let csv = run_ok(&[
        "sql",
        "--store",
        watched.to_str().unwrap(),
        "--format",
        "csv",
        "SELECT CAST(window_start AS BIGINT) AS s, CAST(window_end AS BIGINT) AS e FROM host_windows WHERE resource = 'cpu' ORDER BY 1",
    ]);
    let stored: Vec<(i64, i64)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let (s, e) = l.split_once(',').unwrap();
            (s.parse().unwrap(), e.parse().unwrap())
        })
        .collect();
    let (first, last) = (stored[0].0, stored.last().unwrap().1);
    let (status, body) = http_get(
        port,
        &format!(
            "/api/v1/query_range?query=node_cpu_seconds_total&start={}&end={}&step=1",
            first / 1_000_000,
            last / 1_000_000
        ),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let answered: Vec<(i64, i64)> = windows_of(
        &serde_json::from_str(&body).unwrap(),
        step,
        |_| true,
        |_| true,
        "cpu",
    )
    .into_keys()
    .collect();
    assert!(stored.len() >= 3, "{stored:?}");
    assert_eq!(stored, answered, "{text}");
}

// ---------------------------------------------------------------------------
// Fast: the recorded answers (tests/data/hostmetrics/README.md).

#[test]
fn recorded_answers_ingest_once() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let store_s = store.to_str().unwrap();
    let answers = fixtures().join("prometheus");
    let map = tmp.path().join("hosts.txt");
    std::fs::write(&map, "127.0.0.1:19100 worker-1\n").unwrap();
    let ingest = |paths: &[&str]| {
        let mut args = vec![
            "ingest",
            "--store",
            store_s,
            "--host-map",
            map.to_str().unwrap(),
        ];
        args.extend(paths);
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        err
    };
    let first = ingest(&[answers.to_str().unwrap()]);
    assert!(
        first.contains("6 files (6 host metrics files), rows: host_windows 45; rejected 0"),
        "{first}"
    );
    // The same files again: already ingested.
    let again = ingest(&[answers.to_str().unwrap()]);
    assert!(
        again.contains("no new rows") && again.contains("6 files already ingested"),
        "{again}"
    );
    // The same answers with other bytes (pretty-printed): rows already stored.
    let pretty = tmp.path().join("pretty");
    std::fs::create_dir_all(&pretty).unwrap();
    for e in std::fs::read_dir(&answers).unwrap().flatten() {
        let v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        std::fs::write(
            pretty.join(e.file_name()),
            serde_json::to_string_pretty(&v).unwrap(),
        )
        .unwrap();
    }
    let copy = ingest(&[pretty.to_str().unwrap()]);
    assert!(
        copy.contains("no new rows") && copy.contains("45 rows already stored"),
        "{copy}"
    );
    let out = run_ok(&[
        "sql",
        "--store",
        store_s,
        "--format",
        "csv",
        "SELECT resource, count(*), count(DISTINCT host), max(host), min(capacity), count(scope) FROM host_windows GROUP BY 1 ORDER BY 1",
    ]);
    assert_eq!(
        out.lines()
            .skip(1)
            .map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
            .map(|f| format!("{} {} {} {} {}", f[0], f[1], f[2], f[3], f[5]))
            .collect::<Vec<_>>(),
        vec![
            "cpu 9 1 worker-1 0",
            "disk_read 9 1 worker-1 0",
            "disk_write 9 1 worker-1 0",
            "memory 9 1 worker-1 0",
            "network 9 1 worker-1 0"
        ]
    );
    assert!(
        out.contains("cpu,9,1,worker-1,2.0,0") || out.contains("cpu,9,1,worker-1,2,0"),
        "{out}"
    );

    // sar too, and a sar file that is not one is rejected with the reason.
    let sar = ingest(&[fixtures().join("sar/sadf.json").to_str().unwrap()]);
    assert!(
        sar.contains("(1 host metrics files), rows: host_windows 19"),
        "{sar}"
    );
    let bad = tmp.path().join("bad-sadf.json");
    std::fs::write(&bad, r#"{"sysstat": {"hosts": [{"nodename": "x", "statistics": [{"timestamp": {"date": "2026-13-45", "time": "25:00:00", "utc": 1, "interval": 1}}]}]}}"#).unwrap();
    let out = run(&["ingest", "--store", store_s, bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bad-sadf.json: x: timestamp '2026-13-45 25:00:00' is not a date and time"),
        "{err}"
    );
}

/// `--capacity` and `--devices` of `culprit ingest` on the recorded
/// answers, with a second whole disk `vdb` added to the disk answers (vda's
/// counters, tripled): by default both disks count and disk capacities are
/// the largest rate measured; `--devices vdb` counts vdb alone, and
/// `--capacity` replaces the core count and the measured maxima. Expected
/// values are computed here from the JSON.
#[test]
fn recorded_answers_with_capacity_and_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let answers = tmp.path().join("answers");
    std::fs::create_dir_all(&answers).unwrap();
    let mut disk_answers: BTreeMap<String, Value> = BTreeMap::new();
    for e in std::fs::read_dir(fixtures().join("prometheus"))
        .unwrap()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().to_string();
        let mut v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        if name.starts_with("node_disk_") {
            let result = v["data"]["result"].as_array_mut().unwrap();
            let mut vdb = result
                .iter()
                .find(|s| s["metric"]["device"] == "vda")
                .expect("vda in the recorded disk answer")
                .clone();
            vdb["metric"]["device"] = Value::from("vdb");
            for p in vdb["values"].as_array_mut().unwrap() {
                let x: f64 = p[1].as_str().unwrap().parse().unwrap();
                p[1] = Value::from(format!("{}", x * 3.0));
            }
            result.push(vdb);
            disk_answers.insert(name.clone(), v.clone());
        }
        std::fs::write(answers.join(&name), v.to_string()).unwrap();
    }
    let step = 1_000_000;
    let per_window = |file: &str, devices: &[&str]| {
        windows_of(
            &disk_answers[file],
            step,
            |l| devices.contains(&l["device"].as_str().unwrap_or("")),
            |_| true,
            "device",
        )
    };
    let written_file = "node_disk_written_bytes_total.json";
    let read_file = "node_disk_read_bytes_total.json";
    let cpu_answer: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("prometheus/node_cpu_seconds_total.json")).unwrap(),
    )
    .unwrap();
    let cpu = windows_of(
        &cpu_answer,
        step,
        |_| true,
        |l| l["mode"] != "idle" && l["mode"] != "iowait",
        "cpu",
    );

    // (capacity, used) per (resource, window start, window end), read back.
    let ingest = |store: &str,
                  flags: &[&str]|
     -> BTreeMap<(String, i64, i64), (Option<f64>, f64)> {
        let mut args = vec!["ingest", "--store", store];
        args.extend(flags);
        args.push(answers.to_str().unwrap());
        run_ok(&args);
        run_ok(&[
            "sql",
            "--store",
            store,
            "--format",
            "csv",
            "SELECT resource, CAST(window_start AS BIGINT), CAST(window_end AS BIGINT), capacity, used \
             FROM host_windows WHERE host = '127.0.0.1' ORDER BY 1, 2",
        ])
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                (f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap()),
                (f[3].parse().ok(), f[4].parse().unwrap()),
            )
        })
        .collect()
    };
    let max_rate = |w: &BTreeMap<(i64, i64), (f64, usize)>| {
        w.iter()
            .map(|(&(s, e), &(u, _))| u / ((e - s) as f64 / 1e6))
            .fold(0.0, f64::max)
    };
    let check = |rows: &BTreeMap<(String, i64, i64), (Option<f64>, f64)>,
                 resource: &str,
                 want: &BTreeMap<(i64, i64), (f64, usize)>,
                 capacity: f64| {
        let got: Vec<(i64, i64)> = rows
            .keys()
            .filter(|k| k.0 == resource)
            .map(|k| (k.1, k.2))
            .collect();
        assert_eq!(got, want.keys().copied().collect::<Vec<_>>(), "{resource}");
        for (&(s, e), &(used, _)) in want {
            let (cap, got) = rows[&(resource.to_string(), s, e)];
            assert!(
                close(got, used),
                "{resource} [{s}, {e}): stored {got}, expected {used}"
            );
            assert_eq!(cap, Some(capacity), "{resource} [{s}, {e}) capacity");
        }
    };

    // Defaults: vda and vdb both count; capacities measured (cores: 2).
    let rows = ingest(tmp.path().join("default").to_str().unwrap(), &[]);
    let both = per_window(written_file, &["vda", "vdb"]);
    assert!(both.values().map(|(u, _)| u).sum::<f64>() > 1e9);
    check(&rows, "disk_write", &both, max_rate(&both));
    let both_read = per_window(read_file, &["vda", "vdb"]);
    check(&rows, "disk_read", &both_read, max_rate(&both_read));
    let cores = cpu.values().next().unwrap().1 as f64;
    assert_eq!(cores, 2.0);
    check(&rows, "cpu", &cpu, cores);

    // --devices vdb --capacity: vdb's bytes alone (3 x vda's), the
    // configured capacities.
    let rows = ingest(
        tmp.path().join("flags").to_str().unwrap(),
        &[
            "--devices",
            "vdb",
            "--capacity",
            "cpu=1.5,disk_write=5e8,disk_read=2e6",
        ],
    );
    let vdb = per_window(written_file, &["vdb"]);
    let vda = per_window(written_file, &["vda"]);
    for (k, (u, _)) in &vdb {
        assert!(close(*u, 3.0 * vda[k].0), "{k:?}");
    }
    check(&rows, "disk_write", &vdb, 5e8);
    check(&rows, "disk_read", &per_window(read_file, &["vdb"]), 2e6);
    check(&rows, "cpu", &cpu, 1.5);
}

/// A task over the recorded answers' span on their host: the CPU that
/// others used (the hog of the recording, and the builds beside it) is
/// `external`, with the seconds the method gives on the recorded windows.
#[tokio::test]
async fn recorded_answers_name_external() {
    let tmp = tempfile::tempdir().unwrap();
    let store_s = tmp.path().join("store").to_str().unwrap().to_string();
    let answer: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("prometheus/node_cpu_seconds_total.json")).unwrap(),
    )
    .unwrap();
    let step = 1_000_000;
    let cpu = windows_of(
        &answer,
        step,
        |_| true,
        |l| l["mode"] != "idle" && l["mode"] != "iowait",
        "cpu",
    );
    let first = cpu.keys().next().unwrap().0;
    let task = Task {
        id: "t1".into(),
        query: "q-v".into(),
        launch: first + 1_500_000,
        finish: first + 6_250_000,
        cpu_seconds: 2.0,
        cpu_blocked: 1.5,
        output_bytes: 0.0,
        disk_write_blocked: 0.0,
    };
    let data = tmp.path().join("workload");
    write_workload(&data, "127.0.0.1", std::slice::from_ref(&task));
    run_ok(&["ingest", "--store", &store_s, data.to_str().unwrap()]);
    run_ok(&[
        "ingest",
        "--store",
        &store_s,
        fixtures().join("prometheus").to_str().unwrap(),
    ]);
    let windows: Vec<HostWindow> = cpu
        .iter()
        .map(|(&(s, e), &(used, cores))| HostWindow {
            start: s,
            end: e,
            capacity: Some(cores as f64),
            used,
        })
        .collect();
    let want = expected_blame("q-v", std::slice::from_ref(&task), "cpu", &windows);
    let store = Store::open(&store_s).unwrap();
    let got = culprits(&store, "q-v", "").await;
    assert!(want["external"] > 1.0, "{want:?}");
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, v) in &want {
        assert!(close(got[k], *v), "{k}: {} vs {v}", got[k]);
    }
}

/// sysstat, where no Prometheus runs: the real `sadc` samples this machine
/// every second while two busy shells run, the real `sadf -j` writes the
/// JSON, and a task in the middle of it sees the shells as `external`.
#[tokio::test]
async fn sar_names_the_cpu_hog_external() {
    let sadc = Path::new("/usr/lib/sysstat/sadc");
    assert!(
        sadc.is_file(),
        "{} is missing: install Debian's sysstat (.ci/run does)",
        sadc.display()
    );
    let sadf = binary("sadf", "sysstat");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data = dir.join("sa");
    let hogs: Vec<Proc> = (0..2)
        .map(|_| {
            spawn(
                "cpu hog",
                Command::new("sh").args(["-c", "while :; do :; done"]),
                None,
            )
        })
        .collect();
    let out = Command::new(sadc)
        .args(["-S", "XDISK", "1", "5"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sadc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(hogs);
    let out = Command::new(&sadf)
        .arg("-j")
        .arg(&data)
        .args(["--", "-u", "-d", "-n", "DEV", "-r"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sadf: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = dir.join("sar.json");
    std::fs::write(&json, &out.stdout).unwrap();

    // The windows, read by the test from the JSON.
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let host = &v["sysstat"]["hosts"][0];
    let name = host["nodename"].as_str().unwrap().to_string();
    let cpus = host["number-of-cpus"].as_f64().unwrap();
    let windows: Vec<HostWindow> = host["statistics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let ts = &s["timestamp"];
            assert_eq!(ts["utc"], 1);
            let end = chrono::DateTime::parse_from_rfc3339(&format!(
                "{}T{}Z",
                ts["date"].as_str().unwrap(),
                ts["time"].as_str().unwrap()
            ))
            .unwrap()
            .timestamp_micros();
            let interval = ts["interval"].as_f64().unwrap();
            let all = s["cpu-load"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["cpu"] == "all")
                .unwrap();
            let busy =
                (100.0 - all["idle"].as_f64().unwrap() - all["iowait"].as_f64().unwrap()) / 100.0;
            HostWindow {
                start: end - (interval * 1e6) as i64,
                end,
                capacity: Some(cpus),
                used: busy * cpus * interval,
            }
        })
        .collect();
    assert_eq!(windows.len(), 4, "{}", String::from_utf8_lossy(&out.stdout));
    let busy: f64 = windows.iter().map(|w| w.used).sum();
    assert!(
        busy > 0.5 * cpus * 4.0,
        "the shells kept the cores busy: {busy} cpu-s"
    );

    let task = Task {
        id: "t1".into(),
        query: "q-v".into(),
        launch: windows[0].start + 500_000,
        finish: windows[3].end - 500_000,
        cpu_seconds: 0.5,
        cpu_blocked: 1.0,
        output_bytes: 0.0,
        disk_write_blocked: 0.0,
    };
    let store_s = dir.join("store").to_str().unwrap().to_string();
    write_workload(
        &dir.join("workload"),
        "sar-host",
        std::slice::from_ref(&task),
    );
    run_ok(&[
        "ingest",
        "--store",
        &store_s,
        dir.join("workload").to_str().unwrap(),
    ]);
    let map = dir.join("hosts.txt");
    std::fs::write(&map, format!("{name} sar-host\n")).unwrap();
    let out = run(&[
        "ingest",
        "--store",
        &store_s,
        "--host-map",
        map.to_str().unwrap(),
        json.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("(1 host metrics files)"),
        "{err}"
    );
    let want = expected_blame("q-v", std::slice::from_ref(&task), "cpu", &windows);
    let store = Store::open(&store_s).unwrap();
    let got = culprits(&store, "q-v", "").await;
    assert!(want["external"] > 0.3, "{want:?}");
    for (k, v) in &want {
        assert!(close(got[k], *v), "{k}: {} vs {v}", got[k]);
    }
}
