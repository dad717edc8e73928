//! glibc's malloc gives each thread that allocates an arena of its own, up
//! to eight per core, and keeps most of what an arena frees for later
//! instead of returning it: a long analysis or ingest on many threads ends
//! with hundreds of MiB held and unused, more the longer it runs. With two
//! arenas the same work holds far less (docs/performance.md: every victim
//! of a 1e7-task store peaked at 755 MiB with glibc's default and at 405 MiB
//! with two arenas; 1e6 tasks, 567 and 361 MiB).
//!
//! An ingest runs with one arena. It is a pipeline: a part's rows are
//! decoded on one thread, checked on another and encoded on a third, so
//! what one arena allocates another's thread frees, and each arena keeps
//! its own high-water mark. With one arena the ingest of 1e7 tasks peaked
//! at 327-350 MiB instead of 420-508 MiB, for the same CPU time (within
//! 1.5%) and 0-9% more wall time (1e6 tasks: 261-271 MiB instead of
//! 315-417 MiB, 4.15 s against 4.14 s). The analyses stay on two: with one
//! arena every victim of 1e6 tasks took 7.4 s instead of 6.6 s, its threads
//! waiting for the arena's lock (docs/performance.md).
//!
//! glibc reads `MALLOC_ARENA_MAX` once, before `main`, and the project keeps
//! `unsafe` (and so `mallopt`) out, so the process starts itself again
//! with `MALLOC_ARENA_MAX` in its environment: the same process id and
//! arguments, a few milliseconds. A value the user set is kept, and
//! nothing happens on other C libraries or when the executable cannot be
//! started again (then the process goes on with glibc's default).

/// The arenas a culprit process runs with unless told otherwise.
pub const ARENAS: &str = "2";

/// The arenas of `culprit ingest` (and `ingest --watch`) unless told
/// otherwise.
pub const INGEST_ARENAS: &str = "1";

const VAR: &str = "MALLOC_ARENA_MAX";

/// Replaces the process by itself with `arenas` arenas, unless
/// `MALLOC_ARENA_MAX` is set already; returns only when it did not.
pub fn cap(arenas: &str) {
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os(VAR).is_some() {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let mut command = std::process::Command::new(exe);
        if let Some(arg0) = args.next() {
            command.arg0(arg0);
        }
        // `exec` returns only on failure: then go on as we are.
        let _failed = command.args(args).env(VAR, arenas).exec();
    }
}
