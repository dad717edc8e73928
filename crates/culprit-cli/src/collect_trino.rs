//! `culprit collect trino --url URL`: poll a Trino (or Presto) coordinator
//! for finished queries and ingest their QueryInfo.
//!
//! A coordinator keeps a finished query's QueryInfo (`GET /v1/query/{id}`:
//! stages, tasks with their node, driver statistics) for a few minutes only
//! (`query.min-expire-age`, 15 minutes by default), so it is polled: every
//! interval `GET /v1/query` lists the queries it knows; each one that is
//! FINISHED or FAILED and not collected yet in this run is fetched, and
//! those whose QueryInfo is final are ingested as one batch (a query whose
//! info is not final yet is fetched again at the next poll). A restart
//! fetches the queries still listed once more: what is stored is
//! recognised (the same bytes by their digest, rows by their keys) and
//! nothing is stored twice.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Duration;

use culprit_ingest::{IngestOptions, SourceFile};
use culprit_store::Store;
use serde_json::Value;

use crate::BoxError;

/// The options of `culprit collect trino`.
#[derive(clap::Args)]
pub struct TrinoArgs {
    /// The coordinator's base URL, e.g. http://coordinator:8080.
    #[arg(long, env = "CULPRIT_TRINO_URL")]
    pub url: String,
    /// The user sent as X-Trino-User (and X-Presto-User); the coordinator's
    /// access control decides which queries it may see.
    #[arg(long, env = "CULPRIT_TRINO_USER", default_value = "culprit")]
    pub user: String,
    /// Seconds between two polls; less than the coordinator's
    /// query.min-expire-age (15 minutes by default), or queries are missed.
    #[arg(long, default_value_t = 30.0, value_parser = crate::limits::interval)]
    pub interval: f64,
    /// Poll once and exit (for cron): exit code 1 if something was rejected.
    #[arg(long)]
    pub once: bool,
    /// Seconds an HTTP request may take.
    #[arg(long, default_value_t = 60.0, value_parser = crate::limits::interval)]
    pub timeout: f64,
}

/// What one poll did.
#[derive(Default)]
struct Poll {
    listed: usize,
    fetched: usize,
    not_final: usize,
    expired: Vec<String>,
    rejected: usize,
}

pub async fn run(store: &Store, args: &TrinoArgs) -> Result<ExitCode, BoxError> {
    let base = base_url(&args.url)?;
    let password = std::env::var("CULPRIT_TRINO_PASSWORD").ok();
    if password.is_some() && base.scheme() != "https" {
        return Err(
            "CULPRIT_TRINO_PASSWORD is set: the coordinator must be https:// \
                    (Trino refuses passwords over plain HTTP)"
                .into(),
        );
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs_f64(args.timeout))
        .build()?;
    let coordinator = Coordinator {
        client,
        base,
        user: args.user.clone(),
        password,
    };
    let mut collected: HashSet<String> = HashSet::new();
    if args.once {
        let poll = poll(store, &coordinator, &mut collected).await?;
        return Ok(if poll.rejected > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    // The first poll must work: a wrong URL should not poll nothing forever.
    poll(store, &coordinator, &mut collected).await?;
    eprintln!(
        "collecting from {} every {:.1} s (Ctrl-C to stop)",
        coordinator.base, args.interval
    );
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        tokio::select! {
            _ = &mut ctrl_c => {
                eprintln!("stopped collecting");
                return Ok(ExitCode::SUCCESS);
            }
            _ = tokio::time::sleep(Duration::from_secs_f64(args.interval)) => {}
        }
        if let Err(e) = poll(store, &coordinator, &mut collected).await {
            eprintln!("error: {e} (trying again)");
        }
    }
}

/// The coordinator's base URL, with a trailing slash so that `v1/query`
/// joins below any path prefix (a proxy's).
fn base_url(url: &str) -> Result<url::Url, BoxError> {
    let mut u = url::Url::parse(url.trim()).map_err(|e| format!("--url {url}: not a URL ({e})"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("--url {url}: expected http:// or https://").into());
    }
    if !u.path().ends_with('/') {
        let path = format!("{}/", u.path());
        u.set_path(&path);
    }
    Ok(u)
}

struct Coordinator {
    client: reqwest::Client,
    base: url::Url,
    user: String,
    password: Option<String>,
}

enum Fetched {
    Ok(bytes::Bytes),
    /// 404 or 410: the coordinator no longer has it.
    Gone,
}

impl Coordinator {
    async fn get(&self, path: &str) -> Result<Fetched, BoxError> {
        let url = self.base.join(path)?;
        let mut req = self
            .client
            .get(url.clone())
            .header("X-Trino-User", &self.user)
            .header("X-Presto-User", &self.user)
            .header("Accept", "application/json");
        if let Some(p) = &self.password {
            req = req.basic_auth(&self.user, Some(p));
        }
        let resp = req.send().await.map_err(|e| format!("GET {url}: {e}"))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::GONE {
            return Ok(Fetched::Gone);
        }
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            let body = body
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect::<String>();
            let hint = if status == reqwest::StatusCode::UNAUTHORIZED
                || status == reqwest::StatusCode::FORBIDDEN
            {
                " (--user, CULPRIT_TRINO_PASSWORD)"
            } else {
                ""
            };
            return Err(format!("GET {url}: {status}{hint}: {body}").into());
        }
        let bytes = resp.bytes().await.map_err(|e| format!("GET {url}: {e}"))?;
        Ok(Fetched::Ok(bytes))
    }
}

/// One poll: list, fetch what is new and finished, ingest it as one batch.
async fn poll(
    store: &Store,
    coordinator: &Coordinator,
    collected: &mut HashSet<String>,
) -> Result<Poll, BoxError> {
    let list = match coordinator.get("v1/query").await? {
        Fetched::Ok(b) => b,
        Fetched::Gone => {
            return Err(format!(
                "{}v1/query: not found (is this a Trino or Presto coordinator?)",
                coordinator.base
            )
            .into())
        }
    };
    let list: Value = serde_json::from_slice(&list)
        .map_err(|e| format!("{}v1/query: not JSON: {e}", coordinator.base))?;
    let Some(list) = list.as_array() else {
        return Err(format!("{}v1/query: not a list of queries", coordinator.base).into());
    };
    let mut p = Poll::default();
    let mut sources = Vec::new();
    let mut ids = Vec::new();
    for q in list {
        let (Some(id), Some(state)) = (
            q.get("queryId").and_then(Value::as_str),
            q.get("state").and_then(Value::as_str),
        ) else {
            continue;
        };
        if !matches!(state, "FINISHED" | "FAILED") {
            continue;
        }
        p.listed += 1;
        if collected.contains(id) {
            continue;
        }
        let path = format!("v1/query/{}", urlencode(id));
        let bytes = match coordinator.get(&path).await? {
            Fetched::Ok(b) => b,
            Fetched::Gone => {
                p.expired.push(id.to_string());
                continue;
            }
        };
        p.fetched += 1;
        let final_info = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("finalQueryInfo").and_then(Value::as_bool));
        if final_info == Some(false) {
            // Its stages' last task statistics are still coming in.
            p.not_final += 1;
            continue;
        }
        let name = coordinator.base.join(&path)?.to_string();
        sources.push(SourceFile::from_bytes(name, bytes));
        ids.push(id.to_string());
    }
    let expired = if p.expired.is_empty() {
        String::new()
    } else {
        format!(
            "; {} expired before they were fetched ({})",
            p.expired.len(),
            p.expired.join(", ")
        )
    };
    eprintln!(
        "trino {}: {} finished queries listed, {} fetched{}{expired}",
        coordinator.base,
        p.listed,
        p.fetched,
        if p.not_final > 0 {
            format!(", {} not final yet (fetched again next time)", p.not_final)
        } else {
            String::new()
        }
    );
    if sources.is_empty() {
        return Ok(p);
    }
    let report = culprit_ingest::ingest(store, sources, &IngestOptions::default(), &()).await?;
    crate::print_report(&report);
    p.rejected = report.rejected.len();
    collected.extend(ids);
    Ok(p)
}

/// A query id as a path segment (Trino's ids are `[a-z0-9_]`; anything else
/// is percent-encoded).
fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(
            base_url("http://c:8080")
                .unwrap()
                .join("v1/query")
                .unwrap()
                .as_str(),
            "http://c:8080/v1/query"
        );
        assert_eq!(
            base_url("https://proxy/trino")
                .unwrap()
                .join("v1/query")
                .unwrap()
                .as_str(),
            "https://proxy/trino/v1/query"
        );
        assert!(base_url("ftp://c").is_err());
        assert!(base_url("c:8080").is_err());
        assert_eq!(
            urlencode("20240704_153137_00011_c9cak"),
            "20240704_153137_00011_c9cak"
        );
        assert_eq!(urlencode("a/b"), "a%2Fb");
    }
}
