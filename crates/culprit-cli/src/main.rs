//! `culprit`: who slowed my query? Ingest telemetry, query it in SQL, serve
//! it over the PostgreSQL wire.

mod files;
mod output;
mod progress;
mod watch;

use std::process::ExitCode;
use std::sync::Arc;

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

#[derive(Subcommand)]
enum Command {
    /// Ingest telemetry files or folders as one batch: interchange Parquet, CSV, JSON lines,
    /// and Spark event logs (plain or lz4/lzf/snappy/zstd, rolling, legacy, in progress).
    Ingest {
        #[command(flatten)]
        store: StoreArg,
        /// Read every file as this table (else the file's or folder's name says).
        #[arg(long)]
        table: Option<Table>,
        /// Ingest nothing when any row is rejected.
        #[arg(long)]
        strict: bool,
        /// Keep watching the inputs: ingest new files and the new events of logs in
        /// progress until Ctrl-C (restart-safe: what is stored is never read twice).
        #[arg(long)]
        watch: bool,
        /// Seconds between two looks at the inputs with --watch.
        #[arg(long, default_value_t = 5.0)]
        interval: f64,
        /// Files, folders, or s3:// / file:// URLs.
        #[arg(required = true)]
        paths: Vec<String>,
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
        /// Address to listen on.
        #[arg(long, env = "CULPRIT_LISTEN", default_value = "127.0.0.1:5433")]
        listen: String,
    },
    /// Write a generated workload as interchange files.
    Generate {
        /// Output folder (created).
        #[arg(long)]
        out: String,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Queries to simulate (the victim, the culprit and others).
        #[arg(long, default_value_t = 6)]
        queries: usize,
        /// Hosts in the cluster.
        #[arg(long, default_value_t = 4)]
        hosts: usize,
        /// Fast mode: this many tasks, plausible but not simulated (for benchmarks).
        #[arg(long)]
        tasks: Option<usize>,
        /// Slots per host in fast mode.
        #[arg(long, default_value_t = 8)]
        slots: usize,
        #[arg(long, value_enum, default_value = "parquet")]
        format: files::FileFormat,
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
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
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
            strict,
            watch,
            interval,
            paths,
        } => {
            let store = Store::open(&store.store)?;
            if watch {
                let interval = std::time::Duration::from_secs_f64(interval.max(0.1));
                return watch::run(&store, &paths, IngestOptions { table, strict }, interval).await;
            }
            let report = ingest(&store, &paths, IngestOptions { table, strict }).await?;
            Ok(if report.rejected.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Sql {
            store,
            format,
            query,
        } => {
            let store = Store::open(&store.store)?;
            let ctx = culprit_sql::session(store).await?;
            let batches = ctx.sql(&query).await?.collect().await?;
            output::print(&batches, format)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { store, listen } => {
            let store = Store::open(&store.store)?;
            serve(store, &listen, None).await?;
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
        } => {
            let started = std::time::Instant::now();
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

/// Serves until Ctrl-C. `ready` is printed once the port is bound.
async fn serve(store: Store, listen: &str, ready: Option<String>) -> Result<(), BoxError> {
    let ctx = Arc::new(culprit_sql::session(store.clone()).await?);
    let server = culprit_server::Server::bind(ctx, listen).await?;
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
    serve(store, listen, Some(line)).await?;
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
