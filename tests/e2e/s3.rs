//! Object storage on a real S3-compatible server (moto's server, installed by
//! `.ci/run` from PyPI): the store and the ingest inputs as `s3://` URLs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{culprit, generate};

pub(crate) struct S3Server {
    child: Child,
    pub(crate) port: u16,
    /// One moto server at a time: two tests starting theirs at once could
    /// pick the same free port, and one would talk to the other's server.
    _serial: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the S3 server");
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Starts moto's S3 server on a free loopback port; fails loudly when it is
/// not installed.
pub(crate) fn start() -> S3Server {
    let serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("moto_server must be installed (pip install 'moto[server]'); .ci/run installs it");
    let server = S3Server {
        child,
        port,
        _serial: serial,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the S3 server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// The S3 server's credentials and endpoint, as `culprit` reads them.
pub(crate) fn env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
}

/// Creates a bucket.
pub(crate) fn create_bucket(port: u16, bucket: &str) {
    let created = http(
        port,
        &format!("PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    );
    assert!(
        created.starts_with("HTTP/1.1 200"),
        "create bucket: {created}"
    );
}

/// Runs `culprit` with the S3 server's credentials and endpoint.
pub(crate) fn culprit_s3(port: u16, args: &[&str]) -> std::process::Output {
    culprit()
        .args(args)
        .envs(env(port))
        .env_remove("CULPRIT_STORE")
        .output()
        .expect("run culprit")
}

#[test]
fn store_and_inputs_on_s3() {
    let s3 = start();
    let created = http(
        s3.port,
        &format!("PUT /culprit HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", s3.port),
    );
    assert!(
        created.starts_with("HTTP/1.1 200"),
        "create bucket: {created}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in");
    generate(&data, "csv");

    // A local folder into an S3 store.
    let ingest_a = || {
        culprit_s3(
            s3.port,
            &[
                "ingest",
                "--store",
                "s3://culprit/stores/a",
                data.to_str().unwrap(),
            ],
        )
    };
    let out = ingest_a();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The same files as s3:// inputs into a second S3 store: copy them up first.
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let body = std::fs::read(&path).unwrap();
        let mut req = format!(
            "PUT /culprit/inputs/{name} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            s3.port,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        let mut s = TcpStream::connect(("127.0.0.1", s3.port)).unwrap();
        s.write_all(&req).unwrap();
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        assert!(resp.starts_with("HTTP/1.1 200"), "upload {name}: {resp}");
    }
    let out = culprit_s3(
        s3.port,
        &[
            "ingest",
            "--store",
            "s3://culprit/stores/b",
            "s3://culprit/inputs/",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let expected = culprit_sim::simulate(&culprit_sim::SimConfig::default());
    let sql_csv = |store: &str, query: &str| -> String {
        let out = culprit_s3(
            s3.port,
            &["sql", "--store", store, "--format", "csv", query],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    for store in ["s3://culprit/stores/a", "s3://culprit/stores/b"] {
        assert_eq!(
            sql_csv(store, "SELECT count(*) AS n FROM tasks"),
            format!("n\n{}\n", expected.tasks.num_rows()),
            "{store}"
        );
        // The blame engine reads the store over S3 too.
        assert_eq!(
            sql_csv(
                store,
                "SELECT culprit_query FROM culprits('q-victim') ORDER BY blame_seconds DESC LIMIT 1"
            ),
            "culprit_query\nq-culprit\n"
        );
    }

    // Re-ingesting into the S3 store adds nothing.
    let out = ingest_a();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("7 files already ingested"), "{err}");
}
