use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use culprit_store::Store;

/// The `culprit` binary built by cargo for these tests.
pub fn culprit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_culprit"))
}

/// Runs the binary and returns its output; panics with stderr on a spawn failure.
pub fn run(args: &[&str]) -> Output {
    let out = culprit()
        .args(args)
        .env_remove("CULPRIT_STORE")
        .env_remove("CULPRIT_LISTEN")
        .output()
        .expect("run culprit");
    out
}

/// Runs the binary and asserts it succeeded.
pub fn run_ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "culprit {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Writes the simulated workload (seed 42, the defaults) as files.
pub fn generate(dir: &Path, format: &str) {
    run_ok(&[
        "generate",
        "--out",
        dir.to_str().unwrap(),
        "--format",
        format,
    ]);
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh local store holding the simulated workload (seed 42).
pub fn demo_store() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in");
    generate(&data, "parquet");
    let store = tmp.path().join("store");
    let store_s = store.to_str().unwrap().to_string();
    run_ok(&["ingest", "--store", &store_s, data.to_str().unwrap()]);
    (tmp, store_s)
}

/// Starts the real server on a free loopback port over the store.
pub async fn start_server(store: Store) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    start_server_with(store, culprit_server::ServerOptions::default()).await
}

/// Starts the real server with options on a free loopback port.
pub async fn start_server_with(
    store: Store,
    opts: culprit_server::ServerOptions,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let server = culprit_server::Server::bind_with(store, "127.0.0.1:0", opts)
        .await
        .expect("bind");
    let addr = server.local_addr();
    let handle = tokio::spawn(async move {
        server
            .run(std::future::pending::<()>())
            .await
            .expect("server runs");
    });
    (addr, handle)
}

pub async fn connect(addr: SocketAddr) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(
        &format!(
            "host={} port={} user=culprit dbname=culprit",
            addr.ip(),
            addr.port()
        ),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Runs psql against the server; fails loudly when psql is not installed
/// (`.ci/run` installs Debian's postgresql-client).
pub fn psql(addr: SocketAddr, args: &[&str]) -> Output {
    psql_with("psql", addr, args)
}

/// psql 17 (for `\bind`): `$CULPRIT_PSQL17`, default the one `.ci/run`
/// builds into `~/.cache/culprit-psql17`. Missing, the test fails.
pub fn psql17() -> String {
    let path = std::env::var("CULPRIT_PSQL17").unwrap_or_else(|_| {
        format!(
            "{}/.cache/culprit-psql17/bin/psql",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    assert!(
        std::path::Path::new(&path).is_file(),
        "psql 17 is missing at {path}: .ci/run builds it (tests/clients/build-psql.sh), or set CULPRIT_PSQL17"
    );
    path
}

pub fn psql_with(program: &str, addr: SocketAddr, args: &[&str]) -> Output {
    let conn = format!(
        "host={} port={} user=culprit dbname=culprit",
        addr.ip(),
        addr.port()
    );
    Command::new(program)
        .arg(conn)
        .args(["-X", "-v", "ON_ERROR_STOP=1"])
        .args(args)
        .output()
        .expect("psql must be installed (apt-get install postgresql-client); .ci/run installs it")
}

/// The shared real telemetry (Spark event logs written by Spark itself):
/// `$CULPRIT_TEST_DATA`, default `../shared/data` beside the repository.
/// Missing data fails the test: it is never skipped.
pub fn test_data() -> PathBuf {
    let dir = std::env::var_os("CULPRIT_TEST_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/data"));
    assert!(
        dir.join("spark").is_dir(),
        "the real test data is missing: {} has no spark/ folder (set CULPRIT_TEST_DATA)",
        dir.display()
    );
    dir
}

/// Logs in with a password over the real wire (no TLS).
pub async fn login(
    addr: SocketAddr,
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(
        &format!(
            "host={} port={} user={user} password={password} dbname=culprit",
            addr.ip(),
            addr.port()
        ),
        tokio_postgres::NoTls,
    )
    .await?;
    tokio::spawn(conn);
    Ok(client)
}

/// The SQLSTATE of a server error (or why it is not one).
pub fn code(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_string())
        .unwrap_or_else(|| format!("not a server error: {e}"))
}

/// Two users: alice (role read, password alice-pw) and bob (write, bob-pw).
pub fn users() -> culprit_server::Users {
    use culprit_server::{Role, Users};
    let text = format!(
        "{}\n{}\n",
        Users::line("alice", Role::Read, "alice-pw").unwrap(),
        Users::line("bob", Role::Write, "bob-pw").unwrap()
    );
    Users::parse(&text).unwrap()
}

/// pgjdbc, Debian's `libpostgresql-jdbc-java` (`.ci/run` installs it).
pub const PGJDBC: &str = "/usr/share/java/postgresql.jar";

/// Compiles `tests/clients/{class}.java` into `dir`/classes and runs it
/// against the server at `addr` (`java ... {class} HOST PORT`), on a
/// blocking thread: the server needs the async ones.
pub async fn run_pgjdbc(dir: &Path, class: &str, addr: SocketAddr) -> Output {
    assert!(
        Path::new(PGJDBC).exists(),
        "{PGJDBC} is missing: install libpostgresql-jdbc-java (.ci/run does)"
    );
    let classes = dir.join("classes");
    let out = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .args(["-cp", PGJDBC])
        .arg(repo_root().join(format!("tests/clients/{class}.java")))
        .output()
        .expect("javac");
    assert!(
        out.status.success(),
        "javac {class}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let class = class.to_string();
    tokio::task::spawn_blocking(move || {
        Command::new("java")
            .args(["-cp", &format!("{PGJDBC}:{}", classes.display()), &class])
            .args([&addr.ip().to_string(), &addr.port().to_string()])
            .output()
            .expect("java")
    })
    .await
    .expect("java thread")
}

/// A `culprit serve` process (the real binary) and its stderr so far;
/// killed when dropped.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeProcess {
    /// `VmHWM` of the server (its peak resident memory), bytes.
    pub fn peak_rss(&self) -> u64 {
        proc_status_kb(self.child.id(), "VmHWM:") * 1024
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().map(|s| s.is_none()).unwrap_or(false)
    }
}

/// A field of /proc/PID/status in kB.
pub fn proc_status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Starts `culprit serve --store STORE --listen 127.0.0.1:0 ARGS...` and
/// waits until it says where it listens.
pub fn serve_process(store: &str, args: &[&str]) -> ServeProcess {
    serve_process_with(store, args, &[])
}

/// [`serve_process`] with `envs` added to its environment (and no
/// `MALLOC_ARENA_MAX` but the one `envs` may give).
pub fn serve_process_with(store: &str, args: &[&str], envs: &[(&str, &str)]) -> ServeProcess {
    let mut child = culprit()
        .args(["serve", "--store", store, "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("CULPRIT_STORE")
        .env_remove("CULPRIT_LISTEN")
        .env_remove("CULPRIT_WORKERS")
        .env_remove("MALLOC_ARENA_MAX")
        .envs(envs.iter().copied())
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("culprit serve starts");
    let (addr, stderr) = wait_listening(&mut child, "culprit serve", "postgres://");
    ServeProcess {
        child,
        addr,
        stderr,
    }
}

/// Runs `openssl ARGS` (test certificates are the tests' own), failing
/// the test with what it said if it fails.
pub fn openssl(args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is needed to make test certificates");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed certificate with `subject` (e.g. `/CN=localhost`) and
/// its key, written to `cert` and `key` (PEM).
pub fn self_signed_pem(cert: &Path, key: &Path, subject: &str) {
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        subject,
        "-keyout",
        key.to_str().unwrap(),
        "-out",
        cert.to_str().unwrap(),
    ]);
}

/// Reads a started process's stderr (piped) until a line holds `marker`
/// followed by the address it listens on; then keeps collecting the rest
/// of its stderr on a thread. Panics with what it said if it ends first.
pub fn wait_listening(
    child: &mut std::process::Child,
    what: &str,
    marker: &str,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    use std::io::{BufRead, BufReader};
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let mut seen = String::new();
    let addr = loop {
        let line = match lines.next() {
            Some(Ok(l)) => l,
            _ => panic!("{what} ended before listening:\n{seen}"),
        };
        if let Some(rest) = line.split(marker).nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
        seen.push_str(&line);
        seen.push('\n');
    };
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(seen));
    let sink = stderr.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    (addr, stderr)
}

/// Parquet files read and written by the tests themselves (not by
/// culprit's code), to check stored rows against the input.
pub mod parquet_files {
    use std::path::Path;

    use arrow::array::{AsArray, RecordBatch};
    use arrow::datatypes::Float64Type;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;

    /// Reads a Parquet file whole (the test's own reader, not culprit's).
    pub fn read(path: &Path) -> Vec<RecordBatch> {
        let file = std::fs::File::open(path).unwrap();
        ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Writes batches as a Parquet file (zstd: other bytes than the generator's).
    pub fn write(path: &Path, batches: &[RecordBatch]) {
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .build();
        let file = std::fs::File::create(path).unwrap();
        let mut w = ArrowWriter::try_new(file, batches[0].schema(), Some(props)).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }

    /// Rows of `batches`.
    pub fn rows(batches: &[RecordBatch]) -> usize {
        batches.iter().map(|b| b.num_rows()).sum()
    }

    /// The sum of a Float64 column of `batches` (nulls left out).
    pub fn sum(batches: &[RecordBatch], column: &str) -> f64 {
        batches
            .iter()
            .flat_map(|b| {
                let c = b
                    .column_by_name(column)
                    .unwrap()
                    .as_primitive::<Float64Type>();
                c.iter().flatten().collect::<Vec<_>>()
            })
            .sum()
    }
}
