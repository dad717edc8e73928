//! `culprit`: who slowed my query? Ingest telemetry, query it in SQL, serve
//! it over the PostgreSQL wire.

mod accuracy;
mod arenas;
mod collect;
mod collect_trino;
mod files;
mod limits;
mod output;
mod progress;
mod watch;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use culprit_core::Table;
use culprit_ingest::{IngestOptions, IngestReport};
use culprit_store::{Store, DEFAULT_STORE};

#[derive(Parser)]
#[command(
    name = "culprit",
    version,
    about = "Who slowed my query? A contention database."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct StoreArg {
    /// Where data lives: a path or file:///path, s3://bucket/prefix (AWS_* variables;
    /// AWS_ENDPOINT_URL and AWS_ALLOW_HTTP=true for S3-compatible stores), memory://.
    #[arg(long, env = "CULPRIT_STORE", default_value = DEFAULT_STORE)]
    store: String,
}

#[derive(clap::Args, Clone)]
struct ServerArgs {
    /// Users file for SCRAM-SHA-256 password authentication (`culprit user add` writes it).
    #[arg(long, env = "CULPRIT_USERS")]
    users: Option<std::path::PathBuf>,
    /// TLS certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Refuse connections without TLS.
    #[arg(long)]
    tls_required: bool,
    /// Most connections at once; more are refused with SQLSTATE 53300.
    #[arg(long, default_value_t = 100, value_parser = limits::max_connections)]
    max_connections: usize,
    /// Default statement timeout in seconds, covering execution (0: none); a client's
    /// `SET statement_timeout` wins.
    #[arg(long, default_value_t = 0.0, value_parser = limits::statement_timeout)]
    statement_timeout: f64,
    /// Memory for one query, in MiB (0: unlimited); a query needing more fails with 53200.
    #[arg(long, default_value_t = 0, value_parser = limits::query_memory_mb)]
    query_memory_mb: usize,
    /// Seconds a scheduled report's run may take before it fails (0: no limit).
    #[arg(long, default_value_t = 300.0, value_parser = limits::statement_timeout)]
    report_timeout: f64,
    /// Days of report history (`reports.<job>` rows, `cron.job_run_details`) kept
    /// (0: forever; at most 36500).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(0..=36500))]
    report_retention_days: u32,
    /// Memory budget of the whole server, in MiB: the dataset cache, the analyses'
    /// working memory and every query's memory count in it; past it queries fail
    /// with 53200 (0: unlimited). Default: half the machine's memory (or cgroup limit).
    #[arg(long, value_parser = limits::memory_budget_mb)]
    memory_budget_mb: Option<usize>,
    /// Heavy analyses (over every victim) running at once; more wait in a queue.
    /// Default: the number of cores.
    #[arg(long, value_parser = limits::heavy_analyses)]
    heavy_analyses: Option<usize>,
    /// Heavy analyses waiting at most; one more fails at once with 53200.
    /// Default: no bound but --max-connections (a full server only waits).
    #[arg(long, value_parser = limits::heavy_queue)]
    heavy_queue: Option<usize>,
    /// Read cache of one-victim analyses, in MiB: decoded row groups of the task
    /// and window files, so questions about the same stretch of time decode nothing
    /// again; held in the memory budget (0: none). Default: an eighth of the budget,
    /// at most 512 MiB.
    #[arg(long, value_parser = limits::memory_budget_mb)]
    read_cache_mb: Option<usize>,
    /// Window rows a store may have for analyses to keep them in memory with
    /// its tasks; above, each analysis reads them host bucket by host bucket
    /// from the store (and, with --workers, the workers sweep the buckets).
    #[arg(long, default_value_t = culprit_engine::WINDOW_CACHE_ROWS)]
    window_cache_rows: u64,
    /// Store the slot holders' shares in the background (as `culprit shares`)
    /// once the telemetry has not changed for this many seconds (0: never).
    #[arg(long, default_value_t = culprit_server::DEFAULT_SHARES_AFTER.as_secs_f64(),
          value_parser = limits::interval_or_never)]
    shares_after: f64,
    #[command(flatten)]
    compaction: CompactionArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// The workers of `serve` (docs/operations.md, "Running a cluster").
#[derive(clap::Args, Clone)]
struct ClusterArgs {
    /// Workers (`culprit worker`) to run queries on, as host:port or http://host:port,
    /// comma-separated: the server becomes their coordinator. Without workers every
    /// query runs in this process.
    #[arg(long, env = "CULPRIT_WORKERS")]
    workers: Option<String>,
    /// A file listing the workers, one host:port (or URL) a line, `#` comments;
    /// added to --workers.
    #[arg(long, env = "CULPRIT_WORKERS_FILE")]
    workers_file: Option<std::path::PathBuf>,
    /// Bytes of Parquet a scan reads per worker task (more tasks for larger scans,
    /// at most one per worker a stage).
    #[arg(long, default_value_t = culprit_sql::cluster::DEFAULT_BYTES_PER_TASK as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    worker_task_bytes: u64,
    /// A file holding the cluster's shared secret, presented to the workers
    /// with every plan (the file their --cluster-secret-file names).
    #[arg(long, env = "CULPRIT_CLUSTER_SECRET_FILE")]
    cluster_secret_file: Option<std::path::PathBuf>,
    /// The CA certificate (PEM) the workers' TLS certificates are checked
    /// against: the workers are then reached over TLS (https:// URLs).
    #[arg(long, env = "CULPRIT_WORKER_CA")]
    worker_ca: Option<std::path::PathBuf>,
}

impl ClusterArgs {
    fn cluster(&self) -> Result<Option<culprit_sql::Cluster>, BoxError> {
        let mut list = self.workers.clone().unwrap_or_default();
        if let Some(path) = &self.workers_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--workers-file {}: {e}", path.display()))?;
            list.push('\n');
            list.push_str(&text);
        }
        let urls = culprit_sql::parse_workers(&list).map_err(|e| format!("--workers: {e}"))?;
        if urls.is_empty() {
            if self.workers.is_some() || self.workers_file.is_some() {
                return Err("--workers / --workers-file name no worker".into());
            }
            return Ok(None);
        }
        let cluster = culprit_sql::Cluster::new(
            urls,
            usize::try_from(self.worker_task_bytes).unwrap_or(usize::MAX),
        )?;
        let mut cluster = match cluster_secret(self.cluster_secret_file.as_deref())? {
            Some(secret) => cluster.with_secret(secret),
            None => cluster,
        };
        if let Some(path) = &self.worker_ca {
            let ca =
                std::fs::read(path).map_err(|e| format!("--worker-ca {}: {e}", path.display()))?;
            cluster = cluster
                .with_tls(ca)
                .map_err(|e| format!("--worker-ca {}: {e}", path.display()))?;
        }
        cluster.check_schemes()?;
        Ok(Some(cluster))
    }
}

/// Background compaction of `serve` and `ingest --watch`.
#[derive(clap::Args, Clone)]
struct CompactionArgs {
    /// Compact in the background when a telemetry table (or a host bucket of
    /// task_windows) has this many small files (0: never; as `culprit compact`).
    #[arg(long, default_value_t = culprit_store::DEFAULT_AUTO_COMPACT_FILES,
          value_parser = limits::compact_files)]
    compact_files: usize,
    /// Seconds between two checks for background compaction.
    #[arg(long, default_value_t = culprit_store::DEFAULT_AUTO_COMPACT_EVERY.as_secs_f64(),
          value_parser = limits::interval)]
    compact_every: f64,
}

impl CompactionArgs {
    fn options(&self) -> Option<culprit_store::AutoCompact> {
        (self.compact_files > 0).then(|| culprit_store::AutoCompact {
            every: std::time::Duration::from_secs_f64(
                self.compact_every
                    .clamp(limits::MIN_INTERVAL, limits::MAX_INTERVAL),
            ),
            min_files: self.compact_files,
            ..Default::default()
        })
    }
}

impl ServerArgs {
    fn options(&self) -> Result<culprit_server::ServerOptions, BoxError> {
        let users = match &self.users {
            Some(p) => Some(culprit_server::Users::load(p)?),
            None => None,
        };
        Ok(culprit_server::ServerOptions {
            users,
            tls: match (&self.tls_cert, &self.tls_key) {
                (Some(cert), Some(key)) => Some(culprit_server::TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
            tls_required: self.tls_required,
            max_connections: self.max_connections,
            statement_timeout: (self.statement_timeout > 0.0)
                .then(|| std::time::Duration::from_secs_f64(self.statement_timeout)),
            query_memory: (self.query_memory_mb > 0)
                .then_some(self.query_memory_mb.saturating_mul(1 << 20)),
            reports: culprit_server::reports::ReportOptions {
                timeout: report_timeout(self.report_timeout),
                retention: (self.report_retention_days > 0).then(|| {
                    std::time::Duration::from_secs(u64::from(self.report_retention_days) * 86_400)
                }),
                memory: None,
            },
            budget: culprit_engine::BudgetOptions {
                limit: limits::memory_budget(self.memory_budget_mb),
                heavy_slots: self
                    .heavy_analyses
                    .unwrap_or_else(culprit_engine::budget::default_heavy_slots),
                heavy_queue: self.heavy_queue,
                read_cache: self.read_cache_mb.map(|mb| mb.saturating_mul(1 << 20)),
            },
            auto_compact: self.compaction.options(),
            shares_after: (self.shares_after > 0.0)
                .then(|| std::time::Duration::from_secs_f64(self.shares_after)),
            cluster: self.cluster.cluster()?,
            window_cache_rows: self.window_cache_rows,
        })
    }
}

/// A report run's timeout from seconds (0: none, i.e. a century).
fn report_timeout(seconds: f64) -> std::time::Duration {
    if seconds > 0.0 {
        std::time::Duration::from_secs_f64(seconds)
    } else {
        std::time::Duration::from_secs(100 * 365 * 86_400)
    }
}

#[derive(Subcommand)]
enum ReportCommand {
    /// Run a scheduled report now, as the user who scheduled it, and record the run
    /// (its rows in reports.<name>, the run in cron.job_run_details).
    Run {
        #[command(flatten)]
        store: StoreArg,
        /// The users file giving the job's user its role (as `culprit serve --users`).
        #[arg(long, env = "CULPRIT_USERS")]
        users: Option<std::path::PathBuf>,
        /// Seconds the run may take (0: no limit).
        #[arg(long, default_value_t = 300.0, value_parser = limits::statement_timeout)]
        timeout: f64,
        /// Days of report history kept (0: forever; at most 36500), as `serve --report-retention-days`.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(0..=36500))]
        retention_days: u32,
        /// The job's name (cron.job.jobname).
        name: String,
    },
    /// Write a self-contained HTML page with SVG charts: who slowed a query
    /// (--victim), or the newest page of a report scheduled with format => 'html' (--job).
    Html {
        #[command(flatten)]
        store: StoreArg,
        /// The query to explain: the DOR of its top culprits over time, its blame by
        /// resource and host, its stages and critical path, its ranking.
        #[arg(long, required_unless_present = "job", conflicts_with = "job")]
        victim: Option<String>,
        /// Start of the analysis window (RFC 3339; default: the victim's first task).
        #[arg(long, requires = "victim")]
        from: Option<String>,
        /// End of the analysis window (RFC 3339; default: the victim's last task's end).
        #[arg(long, requires = "victim")]
        to: Option<String>,
        /// Window length of the chart over time: seconds or a duration ('10 seconds',
        /// '5 min'; default: a round step giving at most 40 windows).
        #[arg(long, requires = "victim", value_parser = parse_step)]
        step: Option<f64>,
        /// Culprits drawn over time.
        #[arg(long, default_value_t = 5, requires = "victim", value_parser = clap::value_parser!(u16).range(1..=8))]
        top: u16,
        /// A report scheduled with format => 'html': write its newest page.
        #[arg(long)]
        job: Option<String>,
        /// With --job: the page of this run (cron.report_pages.runid).
        #[arg(long, requires = "job")]
        run: Option<i64>,
        /// The file to write (default: standard output).
        #[arg(long, short = 'o')]
        out: Option<std::path::PathBuf>,
    },
}

/// A step of `report html --step`: seconds, or a duration as text.
fn parse_step(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("the step must be positive".into()),
        Err(_) => culprit_core::time::parse_duration(s)
            .map(|us| us as f64 / 1e6)
            .ok_or_else(|| {
                format!("'{s}' is not a duration (seconds, or text such as '10 seconds', '5 min')")
            }),
    }
}

#[derive(Subcommand)]
enum UserCommand {
    /// Add (or replace) a user: the password is read from CULPRIT_PASSWORD or the
    /// first line of standard input; only its salted hash is written.
    Add {
        /// The users file (created with mode 600 if missing).
        #[arg(long, env = "CULPRIT_USERS")]
        users: std::path::PathBuf,
        /// `read` (queries, COPY TO) or `write` (also the users' own tables: CREATE TABLE,
        /// INSERT, COPY FROM STDIN, DROP TABLE; and session views).
        #[arg(long, default_value = "read", value_parser = ["read", "write"])]
        role: String,
        /// 1 to 63 characters, no ':', whitespace or control characters.
        #[arg(value_parser = limits::user_name)]
        name: String,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Ingest telemetry files or folders as one batch: interchange Parquet, CSV, JSON lines,
    /// Spark event logs (plain or lz4/lzf/snappy/zstd, rolling, legacy, in progress), and
    /// Trino/Presto query JSON (QueryInfo, event-listener QueryCompletedEvent), and
    /// host metrics (Prometheus range-query answers, `sadf -j` JSON).
    Ingest {
        #[command(flatten)]
        store: StoreArg,
        /// Read every file as this table (else the file's or folder's name says). A
        /// name that is not a telemetry table loads the files (CSV with a header row,
        /// Parquet, JSON lines) into that user table, created if missing.
        #[arg(long)]
        table: Option<String>,
        /// User tables: replace the table's rows (and columns) instead of appending.
        #[arg(long, requires = "table")]
        replace: bool,
        /// User tables: the columns of a new table, "name type, ..." (text, bigint,
        /// double precision, boolean, timestamptz, date), instead of inferring them.
        #[arg(long, requires = "table")]
        schema: Option<String>,
        /// Ingest nothing when any row is rejected.
        #[arg(long)]
        strict: bool,
        /// Keep watching the inputs: ingest new files and the new events of logs in
        /// progress until Ctrl-C (restart-safe: what is stored is never read twice).
        #[arg(long)]
        watch: bool,
        /// Seconds between two looks at the inputs with --watch.
        #[arg(long, default_value_t = 5.0, value_parser = limits::interval)]
        interval: f64,
        /// With --watch: background compaction.
        #[command(flatten)]
        compaction: CompactionArgs,
        /// The most one compressed file (or zip archive) may decode to, in MiB: past it
        /// the file is rejected and the rest ingested (a decompression bomb costs no more).
        #[arg(long, default_value_t = (culprit_ingest::DEFAULT_MAX_DECODED_BYTES >> 20) as usize,
              value_parser = limits::max_decoded_mb)]
        max_decoded_mb: usize,
        /// The first tasks read that stay in memory; past them the ingest spills tasks to
        /// sorted temporary files, a quarter as many at a time. Hidden: for tests of the
        /// spilled index.
        #[arg(long, hide = true, default_value_t = culprit_ingest::DEFAULT_MEMORY_TASKS)]
        memory_tasks: usize,
        #[command(flatten)]
        host_metrics: collect::HostMetricsArgs,
        /// Files, folders, or s3:// / file:// URLs.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Ask a running engine or monitoring system and ingest its answers (`collect trino`:
    /// finished queries; `collect prometheus`: host metrics).
    Collect {
        #[command(subcommand)]
        command: collect::CollectCommand,
    },
    /// Run one SQL statement and print the result.
    Sql {
        #[command(flatten)]
        store: StoreArg,
        #[arg(long, value_enum, default_value = "table")]
        format: output::OutputFormat,
        /// The statement.
        query: String,
    },
    /// Serve the store over the PostgreSQL wire protocol (psql, BI tools, notebooks).
    Serve {
        #[command(flatten)]
        store: StoreArg,
        /// Address to listen on (a non-loopback address needs --users).
        #[arg(long, env = "CULPRIT_LISTEN", default_value = "127.0.0.1:5433")]
        listen: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// A worker of the distributed engine: runs the parts of queries a coordinator
    /// (`culprit serve --workers`) sends it, reading the same store.
    Worker {
        #[command(flatten)]
        store: StoreArg,
        /// Address of its gRPC service (port 0: any free port). Without --tls-cert
        /// its traffic is not encrypted: listen on a private network only.
        #[arg(long, env = "CULPRIT_WORKER_LISTEN", default_value = "127.0.0.1:5434")]
        listen: String,
        /// A file holding the cluster's shared secret (at least 16 printable
        /// characters): plans that do not present it are refused. Give the
        /// coordinator the same file.
        #[arg(long, env = "CULPRIT_CLUSTER_SECRET_FILE")]
        cluster_secret_file: Option<std::path::PathBuf>,
        /// Serve TLS with this certificate (PEM, signed by --worker-ca; with
        /// --tls-key): the coordinator then names the worker https://HOST:PORT.
        #[arg(long, env = "CULPRIT_WORKER_TLS_CERT", requires_all = ["tls_key", "worker_ca"])]
        tls_cert: Option<std::path::PathBuf>,
        /// The private key (PEM) of --tls-cert.
        #[arg(long, env = "CULPRIT_WORKER_TLS_KEY", requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// The CA certificate (PEM) that signed the workers' certificates:
        /// other workers' are checked against it when this one reads their
        /// part of a query.
        #[arg(long, env = "CULPRIT_WORKER_CA", requires = "tls_cert")]
        worker_ca: Option<std::path::PathBuf>,
        /// Memory budget of the worker, in MiB: its snapshot of the store, the
        /// sweeps of analyses' shares and the memory of every plan part it runs
        /// count in it; past it the query fails with 53200 (0: unlimited).
        /// Default: half the machine's memory (or cgroup limit).
        #[arg(long, value_parser = limits::memory_budget_mb)]
        memory_budget_mb: Option<usize>,
    },
    /// Manage the users file of `culprit serve --users`.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Write a generated workload as interchange files.
    Generate {
        /// Output folder (created).
        #[arg(long, value_parser = limits::out_dir)]
        out: String,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Queries to simulate (the victim, the culprit and others).
        #[arg(long, default_value_t = 6, value_parser = limits::queries)]
        queries: usize,
        /// Hosts in the cluster.
        #[arg(long, default_value_t = 4, value_parser = limits::hosts)]
        hosts: usize,
        /// Fast mode: this many tasks, plausible but not simulated (for benchmarks).
        #[arg(long, value_parser = limits::tasks)]
        tasks: Option<usize>,
        /// Slots per host in fast mode.
        #[arg(long, default_value_t = 8, value_parser = limits::slots)]
        slots: usize,
        #[arg(long, value_enum, default_value = "parquet")]
        format: files::FileFormat,
        /// Fast mode: write the data in this many folders `part-000`, ... of
        /// consecutive queries (each made and written in turn, so memory
        /// holds one part): ingest them one after the other to build a store
        /// larger than one ingest holds.
        #[arg(long, default_value_t = 1, requires = "tasks")]
        parts: usize,
    },
    /// Scheduled reports (`SELECT cron.schedule(...)` over the wire).
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Measure the method against ground truth: simulate scenarios of several kinds
    /// (random, CPU, external disk hog, GC storm, mixed), find each culprit's true
    /// effect on the victim by leaving it out and simulating again, and score
    /// culprits() with slots=transitive, slots=direct, attribution=paper and the
    /// overlap baselines (top-1, top-1 within 10%, Spearman, NDCG@3; docs/accuracy.md).
    Accuracy {
        /// Scenarios to simulate, the kinds in turn.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        scenarios: u32,
        /// Seed of the scenarios: the same seed gives the same table.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Also print each scenario's candidates, true effects and scores on stderr.
        #[arg(long)]
        details: bool,
    },
    /// Merge the small files of the telemetry tables (one atomic commit: the same
    /// rows, fewer files; safe to kill at any point and beside a running server).
    Compact {
        #[command(flatten)]
        store: StoreArg,
        /// Files under this size (MiB) are merged.
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
        small_mb: u64,
        /// Seconds a merged file is kept for readers of older versions before a later
        /// compaction removes it.
        #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
        grace_secs: u64,
        /// Rewrite every file of the time tables (tasks, task_windows, host_windows),
        /// whatever its size: files written by an older version take the current
        /// layout (docs/storage.md).
        #[arg(long)]
        rewrite: bool,
    },
    /// Compute the slot holders' shares of every stage (transitive slot blame,
    /// method section 5b) for the default analysis, and the answer of
    /// `culprits(q)` of every query, and store them with the data: one-victim
    /// analyses then neither read nor sweep the holders' hosts, and
    /// `culprits(q)` with the default options is read, not computed. They hold
    /// until the next ingest or expiry (a compaction keeps them); a server
    /// computes them itself in the background (`serve --shares-after`).
    Shares {
        #[command(flatten)]
        store: StoreArg,
    },
    /// Drop the telemetry of the queries that ended before a time (and host rows
    /// no remaining query needs); one atomic commit, safe to kill at any point.
    Expire {
        #[command(flatten)]
        store: StoreArg,
        /// Queries whose every task finished before this time go (RFC 3339).
        #[arg(long, value_parser = limits::instant)]
        before: i64,
    },
    /// Simulate a workload with a known culprit, ingest it, serve it, and print
    /// the psql command that asks who slowed the victim.
    Demo {
        #[command(flatten)]
        store: StoreArg,
        #[arg(long, env = "CULPRIT_LISTEN", default_value = "127.0.0.1:5433")]
        listen: String,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    arenas::cap(match cli.command {
        Command::Ingest { .. } => arenas::INGEST_ARENAS,
        _ => arenas::ARENAS,
    });
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if matches!(cli.command, Command::Ingest { .. }) {
        // An ingest keeps `encoders()` files encoding (one a core and one
        // more) on the blocking pool, and one thread more for the store's
        // reads and writes of files (`object_store` runs them there), so a
        // write's files are written while the next encode. More threads
        // than that would only hold memory: each keeps its stack and caches.
        builder.max_blocking_threads(culprit_store::encoders() + 1);
    }
    let runtime = builder.build().expect("tokio runtime");
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn run(command: Command) -> Result<ExitCode, BoxError> {
    match command {
        Command::Ingest {
            store,
            table,
            replace,
            schema,
            strict,
            watch,
            interval,
            compaction,
            max_decoded_mb,
            memory_tasks,
            host_metrics,
            paths,
        } => {
            let store = Store::open(&store.store)?;
            let table = match table {
                Some(name) => match name.parse::<Table>() {
                    Ok(t) if !replace && schema.is_none() => Some(t),
                    Ok(t) => {
                        return Err(format!(
                            "{t} is a telemetry table: it is only appended to (--replace and \
                             --schema are for user tables)"
                        )
                        .into())
                    }
                    Err(_) if watch => {
                        return Err("--watch follows telemetry; load a user table without it".into())
                    }
                    Err(_) => {
                        let schema = schema
                            .as_deref()
                            .map(culprit_ingest::parse_schema)
                            .transpose()?;
                        let report = culprit_ingest::ingest_user_table(
                            &store, &name, &paths, replace, schema,
                        )
                        .await?;
                        println!(
                            "table {}: {} rows from {} files, {} ({} columns; store version {})",
                            report.table,
                            report.rows,
                            report.files,
                            if report.created {
                                "created the table"
                            } else if report.replaced {
                                "replaced its rows"
                            } else {
                                "appended"
                            },
                            report.schema.fields().len(),
                            report.version
                        );
                        return Ok(ExitCode::SUCCESS);
                    }
                },
                None => None,
            };
            let opts = IngestOptions {
                table,
                strict,
                max_decoded_bytes: (max_decoded_mb as u64) << 20,
                host_metrics: host_metrics.options()?,
                memory_tasks,
            };
            if watch {
                let interval = std::time::Duration::from_secs_f64(
                    interval.clamp(limits::MIN_INTERVAL, limits::MAX_INTERVAL),
                );
                return watch::run(&store, &paths, opts, interval, compaction.options()).await;
            }
            let report = ingest(&store, &paths, opts).await?;
            Ok(if report.rejected.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Collect { command } => collect::run(command).await,
        Command::Sql {
            store,
            format,
            query,
        } => {
            let store = Store::open(&store.store)?;
            let ctx = culprit_sql::session(store.clone()).await?;
            let batches = culprit_sql::user_tables::run_sql(&ctx, &store, &query).await?;
            output::print(&batches, format)?;
            // A one-shot command: the process ends now, and the OS reclaims
            // the session's dataset cache (a million tasks are a million
            // allocations) much faster than freeing it piece by piece.
            std::mem::forget(ctx);
            Ok(ExitCode::SUCCESS)
        }
        Command::Report {
            command:
                ReportCommand::Html {
                    store,
                    victim,
                    from,
                    to,
                    step,
                    top,
                    job,
                    run,
                    out,
                },
        } => {
            let store = Store::open(&store.store)?;
            let page = match (victim, job) {
                (Some(victim), _) => {
                    let ctx = culprit_sql::session(store.clone()).await?;
                    let report = culprit_server::reports::html::VictimReport {
                        victim,
                        from,
                        to,
                        step,
                        top: usize::from(top),
                    };
                    let page = culprit_server::reports::html::victim_page(&ctx, &report).await?;
                    std::mem::forget(ctx);
                    page
                }
                (None, Some(job)) => {
                    culprit_server::reports::html::stored_page(&store, &job, run).await?
                }
                (None, None) => return Err("give --victim or --job".into()),
            };
            match out {
                Some(path) => {
                    std::fs::write(&path, &page)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    eprintln!(
                        "wrote {} ({} KiB)",
                        path.display(),
                        page.len().div_ceil(1024)
                    );
                }
                None => {
                    use std::io::Write;
                    std::io::stdout().write_all(page.as_bytes())?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Report {
            command:
                ReportCommand::Run {
                    store,
                    users,
                    timeout,
                    retention_days,
                    name,
                },
        } => {
            let store = Store::open(&store.store)?;
            let manifest = store.manifest().await?;
            let Some(job) = manifest.cron_job(&name).cloned() else {
                return Err(format!("no scheduled report named '{name}' in {store}").into());
            };
            let users = users
                .map(|p| culprit_server::Users::load(&p))
                .transpose()?
                .map(std::sync::Arc::new);
            let gate = culprit_server::Gate::new(users);
            let engine = std::sync::Arc::new(culprit_sql::Engine::new(store.clone()));
            let opts = culprit_server::reports::ReportOptions {
                timeout: report_timeout(timeout),
                retention: (retention_days > 0)
                    .then(|| std::time::Duration::from_secs(u64::from(retention_days) * 86_400)),
                memory: None,
            };
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            let run =
                culprit_server::reports::run_job(&store, &engine, &gate, &job, now, &opts).await?;
            println!(
                "report {name} run {}: {} ({})",
                run.runid,
                if run.succeeded { "succeeded" } else { "failed" },
                run.message
            );
            Ok(if run.succeeded {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::User {
            command: UserCommand::Add { users, role, name },
        } => {
            user_add(&users, &role, &name)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            store,
            listen,
            server,
        } => {
            let store = Store::open(&store.store)?;
            serve(store, &listen, server.options()?, None).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Worker {
            store,
            listen,
            cluster_secret_file,
            tls_cert,
            tls_key,
            worker_ca,
            memory_budget_mb,
        } => {
            let store = Store::open(&store.store)?;
            let secret = cluster_secret(cluster_secret_file.as_deref())?;
            let read = |flag: &str, p: &std::path::Path| {
                std::fs::read(p).map_err(|e| format!("{flag} {}: {e}", p.display()))
            };
            let tls = match (&tls_cert, &tls_key) {
                (Some(cert), Some(key)) => {
                    let cert_pem = read("--tls-cert", cert)?;
                    let ca = worker_ca.as_deref().ok_or("--tls-cert needs --worker-ca")?;
                    Some(culprit_sql::cluster::WorkerTls {
                        key: read("--tls-key", key)?,
                        ca: read("--worker-ca", ca)?,
                        cert: cert_pem,
                    })
                }
                _ => None,
            };
            let budget = culprit_engine::Budget::new(culprit_engine::BudgetOptions {
                limit: limits::memory_budget(memory_budget_mb),
                // A worker reads no victim's neighbourhood: no read cache.
                read_cache: Some(0),
                ..Default::default()
            });
            worker(store, secret, tls, budget, &listen).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Generate {
            out,
            seed,
            queries,
            hosts,
            tasks,
            slots,
            format,
            parts,
        } => {
            let started = std::time::Instant::now();
            if let (Some(tasks), true) = (tasks, parts > 1) {
                let cfg = culprit_sim::FastConfig {
                    seed,
                    tasks,
                    hosts,
                    slots,
                    ..Default::default()
                };
                let (mut files, mut rows) = (0usize, 0usize);
                culprit_sim::fast_parts(&cfg, parts, |part, workload| {
                    let dir = std::path::Path::new(&out).join(format!("part-{part:03}"));
                    files += files::write_workload(&dir, &workload, format)?.len();
                    rows += workload.tasks.num_rows();
                    eprintln!(
                        "part {}/{parts}: {} tasks",
                        part + 1,
                        workload.tasks.num_rows()
                    );
                    Ok::<_, BoxError>(())
                })?;
                eprintln!(
                    "wrote {files} files in {parts} parts to {out} ({rows} tasks) in {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return Ok(ExitCode::SUCCESS);
            }
            let workload = match tasks {
                Some(tasks) => culprit_sim::fast(&culprit_sim::FastConfig {
                    seed,
                    tasks,
                    hosts,
                    slots,
                    ..Default::default()
                }),
                None => culprit_sim::simulate(&culprit_sim::SimConfig {
                    seed,
                    queries,
                    hosts,
                    ..Default::default()
                }),
            };
            let written = files::write_workload(std::path::Path::new(&out), &workload, format)?;
            eprintln!(
                "wrote {} files to {out} ({} tasks, {} task_windows rows) in {:.1} s; victim {}{}",
                written.len(),
                workload.tasks.num_rows(),
                workload.task_windows.num_rows(),
                started.elapsed().as_secs_f64(),
                workload.victim,
                if workload.culprit.is_empty() {
                    String::new()
                } else {
                    format!(", injected culprit {}", workload.culprit)
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo {
            store,
            listen,
            seed,
        } => demo(&store.store, &listen, seed).await,
        Command::Accuracy {
            scenarios,
            seed,
            details,
        } => accuracy::run(scenarios as usize, seed, details).await,
        Command::Compact {
            store,
            small_mb,
            grace_secs,
            rewrite,
        } => {
            let store = Store::open(&store.store)?;
            let opts = culprit_store::CompactOptions {
                small_bytes: small_mb << 20,
                grace: std::time::Duration::from_secs(grace_secs),
                rewrite,
                ..Default::default()
            };
            let started = std::time::Instant::now();
            let report = store
                .compact(&opts, |done, total| {
                    if total > 0 {
                        eprintln!("compacting: {done}/{total} groups of files merged");
                    }
                })
                .await?;
            println!("{}", output::compact_summary(&report, started.elapsed()));
            Ok(ExitCode::SUCCESS)
        }
        Command::Shares { store } => {
            let engine = culprit_engine::Engine::new(Store::open(&store.store)?);
            let started = std::time::Instant::now();
            let stored = engine
                .store_shares(&mut |done, total| {
                    if total > 0 && (done == total || done % 10 == 0) {
                        eprintln!(
                            "shares: {done}/{total} steps (the shares of every group of \
                             queries, then their answers)"
                        );
                    }
                })
                .await?;
            println!("{}", output::shares_summary(&stored, started.elapsed()));
            Ok(ExitCode::SUCCESS)
        }
        Command::Expire { store, before } => {
            let store = Store::open(&store.store)?;
            let started = std::time::Instant::now();
            let report = store
                .expire(before, |done, total| {
                    if total > 0 && (done == total || done % 100 == 0) {
                        eprintln!("expiring: {done}/{total} files looked at");
                    }
                })
                .await?;
            println!("{}", output::expire_summary(&report, started.elapsed()));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Runs an ingest with a progress bar and prints rejections and the summary.
async fn ingest(
    store: &Store,
    paths: &[String],
    opts: IngestOptions,
) -> Result<IngestReport, BoxError> {
    let sources = culprit_ingest::list_sources(paths).await?;
    let bar = progress::Bar::new();
    let result = culprit_ingest::ingest(store, sources, &opts, &bar).await;
    let report = match result {
        Ok(r) => r,
        Err(culprit_ingest::IngestError::Strict(n)) => {
            return Err(format!("--strict: {n} rows rejected, nothing ingested").into())
        }
        Err(e) => return Err(e.into()),
    };
    print_report(&report);
    Ok(report)
}

/// Prints rejections, notes, ignored files and the summary line.
pub(crate) fn print_report(report: &IngestReport) {
    for r in report.rejected.iter().take(200) {
        eprintln!("rejected: {r}");
    }
    if report.rejected.len() > 200 {
        eprintln!("... and {} more rejections", report.rejected.len() - 200);
    }
    for n in &report.notes {
        eprintln!("note: {n}");
    }
    for f in report.ignored_files.iter().take(20) {
        eprintln!("ignored: {f} (not telemetry)");
    }
    if report.ignored_files.len() > 20 {
        eprintln!(
            "... and {} more ignored files",
            report.ignored_files.len() - 20
        );
    }
    eprintln!("{}", report.summary());
}

/// Adds or replaces a user in the users file (written whole to a temporary
/// file, then renamed: a crash leaves the old file).
fn user_add(path: &std::path::Path, role: &str, name: &str) -> Result<(), BoxError> {
    let role: culprit_server::Role = role.parse()?;
    let password = match std::env::var("CULPRIT_PASSWORD") {
        Ok(p) => p,
        Err(_) => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    let line = culprit_server::Users::line(name, role, &password)?;
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: {e}", path.display()).into()),
    };
    let prefix = format!("{name}:");
    let mut text: String = old
        .lines()
        .filter(|l| !l.starts_with(&prefix))
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(&line);
    text.push('\n');
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    culprit_server::Users::load(path)?;
    eprintln!(
        "user {name} ({}) written to {}",
        role.name(),
        path.display()
    );
    Ok(())
}

/// Serves until Ctrl-C. `ready` is printed once the port is bound.
async fn serve(
    store: Store,
    listen: &str,
    opts: culprit_server::ServerOptions,
    ready: Option<String>,
) -> Result<(), BoxError> {
    let server = culprit_server::Server::bind_with(store.clone(), listen, opts).await?;
    let addr = server.local_addr();
    eprintln!("culprit serving {store} on postgres://{addr} (Ctrl-C to stop)");
    if let Some(template) = ready {
        let line = template
            .replace("{host}", &addr.ip().to_string())
            .replace("{port}", &addr.port().to_string());
        println!("{line}");
    }
    server
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
            eprintln!("shutting down");
        })
        .await?;
    Ok(())
}

/// The cluster's secret from `--cluster-secret-file`, if given.
fn cluster_secret(
    path: Option<&std::path::Path>,
) -> Result<Option<culprit_sql::cluster::Secret>, BoxError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--cluster-secret-file {}: {e}", path.display()))?;
    culprit_sql::cluster::Secret::parse(&text)
        .map(Some)
        .map_err(|e| format!("--cluster-secret-file {}: {e}", path.display()).into())
}

/// Runs a worker until Ctrl-C.
async fn worker(
    store: Store,
    secret: Option<culprit_sql::cluster::Secret>,
    tls: Option<culprit_sql::cluster::WorkerTls>,
    budget: culprit_engine::Budget,
    listen: &str,
) -> Result<(), BoxError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    if secret.is_none() {
        eprintln!(
            "warning: no --cluster-secret-file: this worker runs the plans of anyone who reaches {addr}"
        );
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    match budget.limit() {
        Some(limit) => eprintln!("memory budget {} MiB", limit >> 20),
        None => eprintln!("memory budget unlimited (--memory-budget-mb 0)"),
    }
    eprintln!("culprit worker of {store} on {scheme}://{addr} (Ctrl-C to stop)");
    culprit_sql::cluster::serve_worker(&store, secret, tls, budget, listener, async {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("shutting down");
    })
    .await?;
    Ok(())
}

async fn demo(store_url: &str, listen: &str, seed: u64) -> Result<ExitCode, BoxError> {
    let store = Store::open(store_url)?;
    let workload = culprit_sim::simulate(&culprit_sim::SimConfig {
        seed,
        ..Default::default()
    });
    // Write the workload as interchange files and ingest them, as a user would.
    let dir = std::env::temp_dir().join(format!("culprit-demo-{}-{seed}", std::process::id()));
    files::write_workload(&dir, &workload, files::FileFormat::Parquet)?;
    ingest(
        &store,
        &[dir.display().to_string()],
        IngestOptions::default(),
    )
    .await?;
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "simulated {} queries on 4 hosts; the victim is {} (user alice); ask who slowed it:",
        workload.queries.num_rows(),
        workload.victim
    );
    let sql = demo_query(&workload.victim);
    let line =
        format!("psql \"host={{host}} port={{port}} user=culprit dbname=culprit\" -c \"{sql}\"");
    serve(store, listen, Default::default(), Some(line)).await?;
    Ok(ExitCode::SUCCESS)
}

/// The question the demo asks: who slowed the victim, with the users and
/// pools of the culprits and what overlap alone would have said.
fn demo_query(victim: &str) -> String {
    format!(
        "SELECT c.culprit_kind, c.culprit_query, q.user, q.pool, round(c.blame_seconds, 1) AS blame_seconds, \
         round(c.dor, 3) AS dor, round(c.deep_overlap_seconds, 1) AS overlap_seconds \
         FROM culprits('{victim}') c LEFT JOIN queries q ON q.query_id = c.culprit_query \
         ORDER BY 5 DESC"
    )
}
