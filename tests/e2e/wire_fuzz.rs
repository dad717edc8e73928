//! Fuzzing the wire: the real `culprit serve` process gets valid
//! extended-protocol exchanges (parameters declared and bound in text and
//! binary, table functions, casts) mutated byte by byte and field by field:
//! counts that disagree, lengths that lie, truncated and repeated messages,
//! extreme integers. Whatever it is sent, the server must not panic (its
//! stderr is read for it), must stay up, and must answer a normal query
//! afterwards. The budget is a fixed number of cases (`CULPRIT_FUZZ_CASES`,
//! default 1500), each on a new connection, from a fixed seed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{culprit, demo_store};

/// xorshift64*: the same cases on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn cstr(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(s.as_bytes());
    b.push(0);
}

fn parse(name: &str, sql: &str, oids: &[i32]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, name);
    cstr(&mut b, sql);
    b.extend_from_slice(&(oids.len() as i16).to_be_bytes());
    for o in oids {
        b.extend_from_slice(&o.to_be_bytes());
    }
    msg(b'P', &b)
}

/// Bind with one format code per parameter and the values as given.
fn bind(stmt: &str, formats: &[i16], values: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, "");
    cstr(&mut b, stmt);
    b.extend_from_slice(&(formats.len() as i16).to_be_bytes());
    for f in formats {
        b.extend_from_slice(&f.to_be_bytes());
    }
    b.extend_from_slice(&(values.len() as i16).to_be_bytes());
    for v in values {
        match v {
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    b.extend_from_slice(&0i16.to_be_bytes());
    msg(b'B', &b)
}

fn tail() -> Vec<u8> {
    let mut t = msg(b'D', b"P\0");
    t.extend(msg(b'E', &[0, 0, 0, 0, 0]));
    t.extend(msg(b'S', &[]));
    t
}

const TEXT: i32 = 25;
const INT8: i32 = 20;
const INT4: i32 = 23;
const FLOAT8: i32 = 701;
const TIMESTAMPTZ: i32 = 1184;

/// The valid exchanges the mutations start from.
fn seeds() -> Vec<Vec<u8>> {
    let text = |s: &str| Some(s.as_bytes().to_vec());
    let mut out = Vec::new();
    let mut s = parse("s1", "SELECT * FROM culprits($1)", &[TEXT]);
    s.extend(bind("s1", &[0], &[text("q-victim")]));
    s.extend(tail());
    out.push(s);
    let mut s = parse("", "SELECT * FROM blame($1, $2)", &[TEXT, TEXT]);
    s.extend(bind(
        "",
        &[0, 0],
        &[text("q-victim"), text("victim_stages=all")],
    ));
    s.extend(tail());
    out.push(s);
    let mut s = parse(
        "",
        "SELECT count(*) FROM tasks WHERE host <> $1 AND launch_time > $2",
        &[TEXT, TIMESTAMPTZ],
    );
    s.extend(bind(
        "",
        &[0, 1],
        &[text("h"), Some(0i64.to_be_bytes().to_vec())],
    ));
    s.extend(tail());
    out.push(s);
    let mut s = parse(
        "",
        "SELECT $1::int8 + $2::int4, $3::float8",
        &[INT8, INT4, FLOAT8],
    );
    s.extend(bind(
        "",
        &[1, 1, 1],
        &[
            Some(7i64.to_be_bytes().to_vec()),
            Some(5i32.to_be_bytes().to_vec()),
            Some(1.5f64.to_be_bytes().to_vec()),
        ],
    ));
    s.extend(tail());
    out.push(s);
    let mut s = parse("", "SELECT * FROM aggressive_queries($1, $2)", &[]);
    s.extend(bind(
        "",
        &[],
        &[text("2026-01-01T00:00:00Z"), text("2026-01-01T01:00:00Z")],
    ));
    s.extend(tail());
    out.push(s);
    out.push(msg(b'Q', b"SELECT * FROM victims(); SELECT $1\0"));
    out
}

const EXTREMES: [i32; 8] = [0, -1, 1, 2, 0x7fff, 0xffff, i32::MAX, i32::MIN];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            break;
        }
        let at = rng.below(b.len());
        match rng.below(7) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = rng.next() as u8,
            2 => {
                // An extreme 16- or 32-bit field (counts, lengths, oids).
                let v = EXTREMES[rng.below(EXTREMES.len())];
                let bytes = if rng.below(2) == 0 {
                    (v as i16).to_be_bytes().to_vec()
                } else {
                    v.to_be_bytes().to_vec()
                };
                for (i, x) in bytes.into_iter().enumerate() {
                    if at + i < b.len() {
                        b[at + i] = x;
                    }
                }
            }
            3 => b.truncate(at),
            4 => {
                let n = rng.below(16).min(b.len() - at);
                b.drain(at..at + n);
            }
            5 => {
                let n = rng.below(32).min(b.len() - at);
                let copy: Vec<u8> = b[at..at + n].to_vec();
                b.splice(at..at, copy);
            }
            _ => {
                let junk: Vec<u8> = (0..rng.below(8)).map(|_| rng.next() as u8).collect();
                b.splice(at..at, junk);
            }
        }
    }
    b
}

/// A typed, structured case: valid framing around disagreeing counts and
/// values of the wrong size or type.
fn structured(rng: &mut Rng) -> Vec<u8> {
    let sqls = [
        "SELECT * FROM culprits($1)",
        "SELECT $1::int8",
        "SELECT count(*) FROM tasks WHERE launch_time > $1",
        "SELECT * FROM blame($1, $2)",
    ];
    let oids = [
        0,
        TEXT,
        INT8,
        INT4,
        FLOAT8,
        TIMESTAMPTZ,
        16,
        17,
        1700,
        114,
        3802,
        2950,
        -1,
    ];
    let sql = sqls[rng.below(sqls.len())];
    let declared: Vec<i32> = (0..rng.below(4))
        .map(|_| oids[rng.below(oids.len())])
        .collect();
    let formats: Vec<i16> = (0..rng.below(4))
        .map(|_| [0, 1, 2, -1][rng.below(4)])
        .collect();
    let values: Vec<Option<Vec<u8>>> = (0..rng.below(4))
        .map(|_| match rng.below(4) {
            0 => None,
            1 => Some(vec![]),
            2 => Some((0..rng.below(12)).map(|_| rng.next() as u8).collect()),
            _ => Some(b"q-victim".to_vec()),
        })
        .collect();
    let mut s = parse("", sql, &declared);
    s.extend(bind("", &formats, &values));
    s.extend(tail());
    s
}

fn startup() -> Vec<u8> {
    let mut body = 196608i32.to_be_bytes().to_vec();
    for kv in ["user", "fuzz", "database", "culprit"] {
        cstr(&mut body, kv);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

/// Reads until ReadyForQuery's tag shows up, the server closes, or a short
/// time passes (a message that announces more bytes than it has waits).
fn drain(stream: &mut TcpStream, until: Duration) -> Vec<u8> {
    drain_until(stream, until, false)
}

fn drain_until(stream: &mut TcpStream, until: Duration, stop_at_ready: bool) -> Vec<u8> {
    let end = Instant::now() + until;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while Instant::now() < end {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if stop_at_ready && got.len() >= 6 && got[got.len() - 6] == b'Z' {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    got
}

fn one_case(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        panic!("the server stopped accepting connections");
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(40)));
    let _ = s.set_nodelay(true);
    s.write_all(&startup()).unwrap();
    let hello = drain_until(&mut s, Duration::from_secs(5), true);
    assert!(
        hello.contains(&b'Z'),
        "no ReadyForQuery after startup: {hello:?}"
    );
    let _ = s.write_all(bytes);
    // End of input: the server answers what it can, then closes, so a case
    // that announces more bytes than it sends does not wait.
    let _ = s.shutdown(std::net::Shutdown::Write);
    drain(&mut s, Duration::from_secs(3))
}

/// A valid Execute asking for 2^31-1 rows once made pgwire reserve room for
/// them all (86 GB): the allocation failed and the process aborted. Now
/// the rows come (in pieces of at most 65,536) and the server stays up.
#[test]
fn a_huge_row_limit_is_served() {
    let (_tmp, store) = demo_store();
    let (mut server, addr) = serve(&store);
    let mut m = parse("", "SELECT task_id FROM tasks", &[]);
    m.extend(bind("", &[], &[]));
    m.extend(msg(b'E', &[0, 0x7f, 0xff, 0xff, 0xff]));
    m.extend(msg(b'S', &[]));
    let got = one_case(addr, &m);
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server died"
    );
    let rows = got.windows(1).filter(|w| w[0] == b'D').count();
    assert!(rows > 0, "rows came back: {got:?}");
    assert!(got.contains(&b'C'), "CommandComplete: {got:?}");
    // A malformed message is a protocol violation (08P01), not a panic.
    let got = one_case(addr, &msg(b'E', &[]));
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("08P01"), "{text}");
    let log = server.stderr.lock().unwrap().clone();
    assert!(!log.contains("panicked"), "{log}");
}

struct Serve {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(store: &str) -> (Serve, SocketAddr) {
    let mut child = culprit()
        .args(["serve", "--store", store, "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("culprit serve starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("culprit serve said where it listens")
            .unwrap();
        if let Some(rest) = line.split("postgres://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    let stderr = Arc::new(Mutex::new(String::new()));
    let sink = stderr.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    (Serve { child, stderr }, addr)
}

#[test]
fn the_wire_survives_mutated_extended_protocol() {
    let (_tmp, store) = demo_store();
    let (mut server, addr) = serve(&store);
    let cases: usize = std::env::var("CULPRIT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let seeds = seeds();
    // The seeds themselves run cleanly first.
    for s in &seeds {
        one_case(addr, s);
    }
    let started = Instant::now();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..cases {
        let case = if i % 4 == 3 {
            structured(&mut rng)
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, seed)
        };
        one_case(addr, &case);
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "the server exited at case {i}: {:?}\n{}",
            case,
            server.stderr.lock().unwrap()
        );
    }
    eprintln!(
        "wire fuzz: {cases} cases in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Still serving, correctly.
    let out = crate::common::psql(addr, &["-Atc", "SELECT count(*) FROM culprits('q-victim')"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(n > 0);
    std::thread::sleep(Duration::from_millis(200));
    let log = server.stderr.lock().unwrap().clone();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
}
