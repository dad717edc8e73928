//! A culprit process runs with glibc's malloc capped at two arenas, an
//! ingest at one (crates/culprit-cli/src/arenas.rs: it starts itself again
//! with `MALLOC_ARENA_MAX` set), unless the user set the variable.

use crate::common::{culprit, psql, serve_process_with};

/// The `MALLOC_ARENA_MAX` entries of process `pid`'s environment.
fn arena_max(pid: u32) -> Vec<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    environ
        .split(|b| *b == 0)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .filter(|e| e.starts_with("MALLOC_ARENA_MAX="))
        .collect()
}

#[test]
fn the_server_runs_with_two_malloc_arenas_unless_told_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    // Started without the variable: the same process (pid) has it, with 2,
    // once it listens (after it started itself again) and still answers.
    let s = serve_process_with(store, &[], &[]);
    assert_eq!(arena_max(s.child.id()), vec!["MALLOC_ARENA_MAX=2"]);
    let out = psql(s.addr, &["-tAc", "SELECT 40 + 2"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "42",
        "the server answers: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(s);
    // The user's value is kept.
    let s = serve_process_with(store, &[], &[("MALLOC_ARENA_MAX", "4")]);
    assert_eq!(arena_max(s.child.id()), vec!["MALLOC_ARENA_MAX=4"]);
}

/// The `MALLOC_ARENA_MAX` entries of a running `culprit ingest --watch`
/// with `envs`, once it is past `main` (it says it is watching: after it
/// started itself again).
fn watch_arena_max(envs: &[(&str, &str)]) -> Vec<String> {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    let store = dir.path().join("store");
    let mut child = culprit()
        .args(["ingest", "--watch", "--interval", "0.2", "--store"])
        .arg(&store)
        .arg(&inputs)
        .env_remove("CULPRIT_STORE")
        .env_remove("MALLOC_ARENA_MAX")
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("culprit ingest --watch starts");
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let watching = line.starts_with("watching ");
        said.push(line);
        if watching {
            break;
        }
    }
    assert!(
        said.last().is_some_and(|l| l.starts_with("watching ")),
        "culprit ingest --watch stopped: {said:?}"
    );
    let seen = arena_max(child.id());
    let _ = child.kill();
    let _ = child.wait();
    seen
}

#[test]
fn an_ingest_runs_with_one_malloc_arena_unless_told_otherwise() {
    // Its buffers are allocated on one thread and freed on another: one
    // arena keeps less memory (docs/performance.md).
    assert_eq!(watch_arena_max(&[]), vec!["MALLOC_ARENA_MAX=1"]);
    assert_eq!(
        watch_arena_max(&[("MALLOC_ARENA_MAX", "3")]),
        vec!["MALLOC_ARENA_MAX=3"]
    );
}
