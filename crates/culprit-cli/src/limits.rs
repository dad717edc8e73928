//! Validation of command-line values: each parser refuses what would panic,
//! loop forever or allocate without bound, with a message clap prints next
//! to the flag's name (exit code 2). The limits are documented in
//! docs/operations.md.

/// Most queries `culprit generate` simulates (the simulation grows faster
/// than linearly: 1,000 queries take seconds, 10,000 minutes).
pub const MAX_QUERIES: usize = 10_000;
/// Most hosts of a generated cluster.
pub const MAX_HOSTS: usize = 10_000;
/// Most tasks of `culprit generate --tasks` (each task is about a dozen rows
/// held in memory before they are written).
pub const MAX_TASKS: usize = 100_000_000;
/// Most slots per host in fast mode.
pub const MAX_SLOTS: usize = 1_024;
/// Most connections `culprit serve` accepts at once.
pub const MAX_CONNECTIONS: usize = 100_000;
/// Largest statement timeout, seconds (a day).
pub const MAX_STATEMENT_TIMEOUT: f64 = 86_400.0;
/// Largest memory for one query, MiB (1 TiB).
pub const MAX_QUERY_MEMORY_MB: usize = 1 << 20;
/// Shortest and longest `--interval` of `culprit ingest --watch`, seconds.
pub const MIN_INTERVAL: f64 = 0.1;
pub const MAX_INTERVAL: f64 = 86_400.0;

fn count(s: &str, min: usize, max: usize) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a whole number from {min} to {max}"))?;
    if n < min || n > max {
        return Err(format!("{n} is out of range: must be from {min} to {max}"));
    }
    Ok(n)
}

fn seconds(s: &str, min: f64, max: f64, zero_ok: bool) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_string())?;
    if !x.is_finite() {
        return Err(format!(
            "must be a finite number of seconds (at most {max})"
        ));
    }
    if zero_ok && x == 0.0 {
        return Ok(0.0);
    }
    if x < min || x > max {
        return Err(format!(
            "{x} is out of range: must be {}from {min} to {max} seconds",
            if zero_ok { "0 or " } else { "" }
        ));
    }
    Ok(x)
}

pub fn queries(s: &str) -> Result<usize, String> {
    count(s, 2, MAX_QUERIES)
}

pub fn hosts(s: &str) -> Result<usize, String> {
    count(s, 1, MAX_HOSTS)
}

pub fn tasks(s: &str) -> Result<usize, String> {
    count(s, 1, MAX_TASKS)
}

pub fn slots(s: &str) -> Result<usize, String> {
    count(s, 1, MAX_SLOTS)
}

pub fn max_connections(s: &str) -> Result<usize, String> {
    count(s, 1, MAX_CONNECTIONS)
}

pub fn query_memory_mb(s: &str) -> Result<usize, String> {
    count(s, 0, MAX_QUERY_MEMORY_MB)
}

pub fn statement_timeout(s: &str) -> Result<f64, String> {
    seconds(s, 0.001, MAX_STATEMENT_TIMEOUT, true)
}

/// `serve --memory-budget-mb`: 0 (unlimited) to 1 TiB.
pub fn memory_budget_mb(s: &str) -> Result<usize, String> {
    count(s, 0, MAX_QUERY_MEMORY_MB)
}

/// The budget in bytes of `--memory-budget-mb` (of `serve` and `worker`):
/// half the machine when not given, none for 0.
pub fn memory_budget(mb: Option<usize>) -> Option<usize> {
    match mb {
        None => Some(culprit_engine::budget::default_limit()),
        Some(0) => None,
        Some(mb) => Some(mb.saturating_mul(1 << 20)),
    }
}

/// Most heavy analyses at once (`serve --heavy-analyses`).
pub const MAX_HEAVY_ANALYSES: usize = 1_024;

pub fn heavy_analyses(s: &str) -> Result<usize, String> {
    count(s, 1, MAX_HEAVY_ANALYSES)
}

/// `serve --heavy-queue`: 0 (none wait) to the most connections.
pub fn heavy_queue(s: &str) -> Result<usize, String> {
    count(s, 0, MAX_CONNECTIONS)
}

/// `--compact-files`: 0 (off), else at least 2 files.
pub fn compact_files(s: &str) -> Result<usize, String> {
    let n = count(s, 0, 1_000_000)?;
    if n == 1 {
        return Err("0 (off) or at least 2 files".into());
    }
    Ok(n)
}

/// `ingest --max-decoded-mb`: 1 MiB to 1 TiB.
pub const MAX_DECODED_MB: usize = 1 << 20;

pub fn max_decoded_mb(s: &str) -> Result<usize, String> {
    count(s, 1, MAX_DECODED_MB)
}

pub fn interval(s: &str) -> Result<f64, String> {
    seconds(s, MIN_INTERVAL, MAX_INTERVAL, false)
}

/// An interval, or 0 for never.
pub fn interval_or_never(s: &str) -> Result<f64, String> {
    seconds(s, MIN_INTERVAL, MAX_INTERVAL, true)
}

/// A non-empty path.
pub fn out_dir(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("must not be empty".into());
    }
    Ok(s.to_string())
}

/// A user name: 1 to 63 characters, none of them ':', whitespace or a
/// control character (the users file is `name:role:...` lines).
pub fn user_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("a user name must not be empty".into());
    }
    if s.chars().count() > 63 {
        return Err("a user name has at most 63 characters".into());
    }
    if s.chars()
        .any(|c| c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err("a user name must not contain ':', whitespace or control characters".into());
    }
    Ok(s.to_string())
}

/// A point in time: RFC 3339 (`2026-01-01T00:00:00Z`, a space for the `T`).
pub fn instant(s: &str) -> Result<i64, String> {
    culprit_core::time::parse_time(s.trim())
        .ok_or_else(|| "expected a time such as 2026-01-01T00:00:00Z (RFC 3339)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert!(hosts("0").is_err());
        assert_eq!(hosts("4"), Ok(4));
        assert!(tasks("1000000000000000").is_err());
        assert!(statement_timeout("inf").is_err());
        assert!(statement_timeout("NaN").is_err());
        assert!(statement_timeout("-1").is_err());
        assert!(statement_timeout("1e20").is_err());
        assert_eq!(statement_timeout("0"), Ok(0.0));
        assert_eq!(statement_timeout("2.5"), Ok(2.5));
        assert!(interval("0").is_err());
        assert!(interval("NaN").is_err());
        assert!(query_memory_mb("18446744073709551615").is_err());
        const { assert!((MAX_QUERY_MEMORY_MB << 20) > MAX_QUERY_MEMORY_MB) };
        assert!(user_name("").is_err());
        assert!(user_name("a:b").is_err());
        assert!(user_name("a\nb").is_err());
        assert_eq!(user_name("alice"), Ok("alice".into()));
    }
}
