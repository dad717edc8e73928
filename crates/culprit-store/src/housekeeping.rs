//! Background compaction, for `culprit serve` and `culprit ingest --watch`:
//! every [`AutoCompact::every`], if some telemetry table (or host bucket of
//! `task_windows`) has at least [`AutoCompact::min_files`] small files, the
//! existing compaction (`compact.rs`) runs: one atomic commit, the merged
//! files retired for the grace period, so a query of a running server that
//! read an older manifest finishes on the files it listed. A failed or
//! conflicting compaction (another process compacted at the same time) is
//! logged and tried again at the next check; nothing is lost either way.

use std::time::Duration;

use culprit_core::Table;

use crate::compact::CompactOptions;
use crate::{Manifest, Store};

/// Small files of one table (or host bucket) that start a background
/// compaction, by default.
pub const DEFAULT_AUTO_COMPACT_FILES: usize = 16;
/// Seconds between two checks, by default.
pub const DEFAULT_AUTO_COMPACT_EVERY: Duration = Duration::from_secs(60);

/// When the background compaction runs.
#[derive(Debug, Clone)]
pub struct AutoCompact {
    /// Between two checks.
    pub every: Duration,
    /// Compact when a table (or a host bucket of `task_windows`) has at
    /// least this many files to merge (under `compact.small_bytes`, not
    /// written full: [`crate::compact::is_small`]; at least 2).
    pub min_files: usize,
    /// The compaction run (its `min_files` is set to the threshold).
    pub compact: CompactOptions,
    /// Whether a check that leaves groups for later is normal operation:
    /// `ingest --watch`'s merges wait while its ingests run. Then the
    /// first check of a streak that leaves groups logs at info, not as a
    /// warning (the 10th, 100th, ... still warn: still stuck).
    pub deferral_expected: bool,
}

impl Default for AutoCompact {
    fn default() -> Self {
        AutoCompact {
            every: DEFAULT_AUTO_COMPACT_EVERY,
            min_files: DEFAULT_AUTO_COMPACT_FILES,
            compact: CompactOptions::default(),
            deferral_expected: false,
        }
    }
}

impl AutoCompact {
    /// Whether `manifest` has a group of small files at the threshold, or
    /// retired files past the grace period to remove.
    pub fn due(&self, manifest: &Manifest) -> bool {
        let threshold = self.min_files.max(2);
        let mut counts: std::collections::HashMap<(&str, Option<u32>), usize> =
            std::collections::HashMap::new();
        for f in &manifest.files {
            let compacted = Table::ALL.iter().any(|t| t.name() == f.table)
                || f.table == crate::layout::QUERY_SPANS;
            if compacted && crate::compact::is_small(f, &self.compact) {
                *counts.entry((f.table.as_str(), f.bucket)).or_default() += 1;
            }
        }
        if counts.values().any(|&n| n >= threshold) {
            return true;
        }
        let cutoff = chrono::Utc::now().timestamp_micros()
            - i64::try_from(self.compact.grace.as_micros()).unwrap_or(i64::MAX);
        manifest.retired.iter().any(|r| r.since <= cutoff)
    }

    /// Checks the store every [`AutoCompact::every`] and compacts when due,
    /// forever (drop the future to stop; a compaction stopped halfway
    /// commits nothing).
    pub async fn run(self, store: Store) {
        // Never a rewrite of the whole store in the background.
        let opts = CompactOptions {
            min_files: self.min_files.max(2),
            rewrite: false,
            ..self.compact.clone()
        };
        // Checks in a row that left groups for later: the first says so as
        // a warning (at info when that is expected), the next ones (a busy
        // budget, a long ingest) at info but the 10th, 100th, ... (still
        // stuck), and the one that catches up says that.
        let mut deferring = 0usize;
        loop {
            tokio::time::sleep(self.every).await;
            let manifest = match store.manifest().await {
                Ok(m) => m,
                Err(e) => {
                    log::warn!("background compaction: cannot read the manifest: {e}");
                    continue;
                }
            };
            if !self.due(&manifest) {
                if deferring > 0 {
                    // Another process compacted what was left.
                    log::info!(
                        "background compaction: nothing left to merge after {deferring} checks \
                         that left groups"
                    );
                    deferring = 0;
                }
                continue;
            }
            let started = std::time::Instant::now();
            match store.compact(&opts, |_, _| {}).await {
                Ok(r) if r.deferred > 0 => {
                    deferring += 1;
                    log::log!(
                        deferral_level(deferring, self.deferral_expected),
                        "background compaction: {} groups of files left for later, {} \
                         ({} checks in a row); {} files merged into {}, version {:?}",
                        r.deferred,
                        r.deferred_because.as_deref().unwrap_or("no memory"),
                        deferring,
                        r.files_merged(),
                        r.written,
                        r.version
                    )
                }
                Ok(r) => {
                    log::info!(
                        "background compaction: {} files merged into {} ({} rows; groups of \
                         time tables: {} in order of time, {} file after file), {} retired \
                         files removed, version {:?}, {:.2} s{}",
                        r.files_merged(),
                        r.written,
                        r.rows,
                        r.time_ordered,
                        r.file_order,
                        r.removed,
                        r.version,
                        started.elapsed().as_secs_f64(),
                        if deferring > 0 {
                            format!(" (caught up after {deferring} checks that left groups)")
                        } else {
                            String::new()
                        }
                    );
                    deferring = 0;
                }
                Err(e) => log::warn!("background compaction failed (tried again later): {e}"),
            }
        }
    }
}

/// The level of the log line of the `n`th check in a row that left groups
/// of files for later: a warning the first time (unless `expected`) and at
/// every power of ten from 10 (a compaction that stays stuck is said
/// again, less and less often), info else.
fn deferral_level(n: usize, expected: bool) -> log::Level {
    if expected && n == 1 {
        return log::Level::Info;
    }
    let mut p = 1;
    while p < n {
        p = p.saturating_mul(10);
    }
    if p == n {
        log::Level::Warn
    } else {
        log::Level::Info
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_deferral_warns_once_then_at_powers_of_ten() {
        use log::Level::Warn;
        let warned = |expected| -> Vec<usize> {
            (1..=1000)
                .filter(|&n| super::deferral_level(n, expected) == Warn)
                .collect()
        };
        assert_eq!(warned(false), [1, 10, 100, 1000]);
        // Where a deferral is normal (the watch's turns), not the first.
        assert_eq!(warned(true), [10, 100, 1000]);
    }
}
