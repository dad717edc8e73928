//! A culprit process runs with glibc's malloc capped at two arenas
//! (crates/culprit-cli/src/arenas.rs: it starts itself again with
//! `MALLOC_ARENA_MAX=2`), unless the user set the variable.

use crate::common::{psql, serve_process_with};

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
