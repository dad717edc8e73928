//! Every user-reachable flag is validated: a bad value is refused with a
//! message naming the flag and exit code 2, never a panic (issue #11).

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::culprit;

/// Runs the binary with a time limit (a flag that is silently accepted may
/// start a server or a watch loop that never ends); returns the exit code
/// (None when killed) and stderr.
fn run_limited(args: &[&str], envs: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = culprit();
    cmd.args(args)
        .env_remove("CULPRIT_STORE")
        .env_remove("CULPRIT_LISTEN")
        .env_remove("CULPRIT_USERS")
        .env_remove("CULPRIT_PASSWORD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run culprit");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (code, reader.join().unwrap())
}

/// Arguments, environment, and the flag the message must name.
type Case<'a> = (Vec<&'a str>, &'a [(&'a str, &'a str)], &'a str);

#[test]
fn bad_flags_are_refused_with_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("gen");
    let out = out.to_str().unwrap();
    let store = tmp.path().join("store");
    let store = store.to_str().unwrap();
    let input = tmp.path().join("input");
    std::fs::create_dir_all(&input).unwrap();
    let input = input.to_str().unwrap();
    let users = tmp.path().join("users");
    let users = users.to_str().unwrap();
    let pw = [("CULPRIT_PASSWORD", "secret")];

    // (arguments, environment, a word the message must contain)
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        (vec!["generate", "--out", out, "--hosts", "0"], &[], "--hosts"),
        (vec!["generate", "--out", out, "--hosts", "100000000"], &[], "--hosts"),
        (vec!["generate", "--out", out, "--tasks", "10", "--slots", "0"], &[], "--slots"),
        (vec!["generate", "--out", out, "--tasks", "10", "--slots", "100000000"], &[], "--slots"),
        (vec!["generate", "--out", out, "--tasks", "0"], &[], "--tasks"),
        (vec!["generate", "--out", out, "--tasks", "1000000000000000"], &[], "--tasks"),
        (vec!["generate", "--out", out, "--queries", "1"], &[], "--queries"),
        (vec!["generate", "--out", out, "--queries", "100000000"], &[], "--queries"),
        (vec!["generate", "--out", out, "--seed=-1"], &[], "--seed"),
        (vec!["generate", "--out", out, "--format", "xml"], &[], "--format"),
        (vec!["generate", "--out", ""], &[], "--out"),
        (vec!["serve", "--store", "memory://", "--listen", "127.0.0.1:0", "--statement-timeout", "inf"], &[], "--statement-timeout"),
        (vec!["serve", "--store", "memory://", "--listen", "127.0.0.1:0", "--statement-timeout", "1e20"], &[], "--statement-timeout"),
        (vec!["serve", "--store", "memory://", "--listen", "127.0.0.1:0", "--statement-timeout=-1"], &[], "--statement-timeout"),
        (vec!["serve", "--store", "memory://", "--listen", "127.0.0.1:0", "--statement-timeout", "NaN"], &[], "--statement-timeout"),
        (vec!["serve", "--store", "memory://", "--listen", "127.0.0.1:0", "--query-memory-mb", "18446744073709551615"], &[], "--query-memory-mb"),
        (vec!["serve", "--store", "memory://", "--listen", "127.0.0.1:0", "--max-connections", "0"], &[], "--max-connections"),
        (vec!["worker", "--store", "memory://", "--listen", "127.0.0.1:0", "--memory-budget-mb", "18446744073709551615"], &[], "--memory-budget-mb"),
        (vec!["worker", "--store", "memory://", "--listen", "127.0.0.1:0", "--memory-budget-mb=-1"], &[], "--memory-budget-mb"),
        (vec!["serve", "--store", "memory://", "--listen", "127.0.0.1:0", "--max-connections", "100000000"], &[], "--max-connections"),
        (vec!["ingest", "--store", store, "--watch", "--interval", "inf", input], &[], "--interval"),
        (vec!["ingest", "--store", store, "--watch", "--interval", "NaN", input], &[], "--interval"),
        (vec!["ingest", "--store", store, "--watch", "--interval=-1", input], &[], "--interval"),
        (vec!["ingest", "--store", store, "--watch", "--interval", "0", input], &[], "--interval"),
        (vec!["user", "add", "--users", users, "--role", "admin", "bob"], &pw, "--role"),
        (vec!["user", "add", "--users", users, ""], &pw, "NAME"),
        (vec!["user", "add", "--users", users, "a:b"], &pw, "NAME"),
        (vec!["user", "add", "--users", users, "a\nb"], &pw, "NAME"),
    ];
    let mut failures = Vec::new();
    for (args, envs, flag) in &cases {
        let (code, stderr) = run_limited(args, envs);
        if code != Some(2) || !stderr.contains(flag) || stderr.contains("panicked") {
            failures.push(format!(
                "culprit {args:?}: exit {code:?}, expected 2 and a message naming {flag}:\n{stderr}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} invocations misbehaved:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
