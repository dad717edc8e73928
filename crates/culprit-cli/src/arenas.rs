//! glibc's malloc gives each thread that allocates an arena of its own, up
//! to eight per core, and keeps most of what an arena frees for later
//! instead of returning it: a long analysis or ingest on many threads ends
//! with hundreds of MiB held and unused, more the longer it runs. With two
//! arenas the same work holds far less (docs/performance.md: every victim
//! of a 1e7-task store peaked at 755 MiB with glibc's default and at 405 MiB
//! with two arenas; 1e6 tasks, 567 and 361 MiB).
//!
//! glibc reads `MALLOC_ARENA_MAX` once, before `main`, and the project keeps
//! `unsafe` (and so `mallopt`) out, so the process starts itself again
//! with `MALLOC_ARENA_MAX=2` in its environment: the same process id and
//! arguments, a few milliseconds. A value the user set is kept, and
//! nothing happens on other C libraries or when the executable cannot be
//! started again (then the process goes on with glibc's default).

/// The arenas a culprit process runs with unless told otherwise.
pub const ARENAS: &str = "2";

const VAR: &str = "MALLOC_ARENA_MAX";

/// Replaces the process by itself with [`ARENAS`] arenas, unless
/// `MALLOC_ARENA_MAX` is set already; returns only when it did not.
pub fn cap() {
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
        let _failed = command.args(args).env(VAR, ARENAS).exec();
    }
}
