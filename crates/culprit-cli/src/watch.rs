//! `culprit ingest --watch`: ingest what is new in the inputs, again and
//! again, until Ctrl-C.
//!
//! Every look lists the inputs and ingests the folders in which a file is
//! new or changed size (a folder whole, so a rolling or legacy log is read
//! with all its parts) and prints the summary of that ingest. Nothing is
//! ingested twice: files already stored are recognised by their content
//! digest, keyed rows by their keys (tasks, stages, queries, executors),
//! window rows by their identity (so a grown CSV or JSON lines file adds
//! only its new rows), and a log in progress gives only its finished
//! queries, stages and tasks. A restart reads everything once more and
//! stores only what is new.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;

use culprit_ingest::{IngestOptions, SourceFile};
use culprit_store::Store;

use crate::BoxError;

fn folder(name: &str) -> &str {
    name.rsplit_once('/').map_or("", |(d, _)| d)
}

/// Stops the background compaction when the watch ends (a compaction
/// stopped halfway commits nothing).
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.abort();
        }
    }
}

/// One turn at a time for the watch's two large users of memory: an
/// ingest (about 350 MiB at 1e7 tasks) and a merge of the background
/// compaction (150-200 MiB, docs/operations.md). Taken in turn, the watch
/// holds the larger of the two at once, not their sum. A merge asks for
/// its turn without waiting (the compaction's [`MemoryGate`]): while an
/// ingest runs, its group of files is left for a later check. An ingest
/// waits for one group's merge at most.
///
/// [`MemoryGate`]: culprit_store::MemoryGate
#[derive(Clone, Default)]
struct Turns(std::sync::Arc<tokio::sync::Mutex<()>>);

impl Turns {
    /// An ingest's turn, held until it is dropped.
    async fn ingest(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.0.clone().lock_owned().await
    }

    /// `auto` taking its merges' turns: they wait while an ingest runs,
    /// which is normal here (the first check left for later is not a
    /// warning).
    fn compaction(&self, mut auto: culprit_store::AutoCompact) -> culprit_store::AutoCompact {
        auto.compact.memory = Some(self.gate());
        auto.deferral_expected = true;
        auto
    }

    /// The gate of the background compaction's merges.
    fn gate(&self) -> culprit_store::MemoryGate {
        let turns = self.0.clone();
        culprit_store::MemoryGate::new(move |_| match turns.clone().try_lock_owned() {
            Ok(turn) => Ok(Box::new(turn) as culprit_store::MemoryGrant),
            Err(_) => Err("an ingest is running".to_string()),
        })
    }
}

pub async fn run(
    store: &Store,
    paths: &[String],
    opts: IngestOptions,
    interval: Duration,
    compaction: Option<culprit_store::AutoCompact>,
) -> Result<ExitCode, BoxError> {
    // The first listing must work: a typo should not watch nothing forever.
    culprit_ingest::list_sources(paths).await?;
    eprintln!(
        "watching {} every {:.1} s (Ctrl-C to stop)",
        paths.join(", "),
        interval.as_secs_f64()
    );
    // Background compaction beside the looks (its commit and an ingest's
    // are both atomic and retried against each other's manifest), its
    // merges never during an ingest (`Turns`); it stops with the watch.
    let turns = Turns::default();
    let compactor = compaction.map(|auto| tokio::spawn(turns.compaction(auto).run(store.clone())));
    let _stop = AbortOnDrop(compactor);
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        match culprit_ingest::list_sources(paths).await {
            Ok(sources) => {
                let changed: HashSet<String> = sources
                    .iter()
                    .filter(|s| seen.get(&s.name) != Some(&s.size))
                    .map(|s| folder(&s.name).to_string())
                    .collect();
                let todo: Vec<SourceFile> = sources
                    .iter()
                    .filter(|s| changed.contains(folder(&s.name)))
                    .cloned()
                    .collect();
                if !todo.is_empty() {
                    let _turn = turns.ingest().await;
                    match culprit_ingest::ingest(store, todo, &opts, &()).await {
                        Ok(report) => {
                            // Every look that read something says what it
                            // found, "no new rows" too.
                            crate::print_report(&report);
                            seen = sources.into_iter().map(|s| (s.name, s.size)).collect();
                        }
                        Err(e) => eprintln!("error: {e} (trying again)"),
                    }
                }
            }
            Err(e) => eprintln!("error: {e} (trying again)"),
        }
        tokio::select! {
            _ = &mut ctrl_c => {
                eprintln!("stopped watching");
                return Ok(ExitCode::SUCCESS);
            }
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A merge of the background compaction never runs during an ingest,
    /// nor an ingest during a merge.
    #[tokio::test]
    async fn merges_and_ingests_take_turns() {
        let turns = Turns::default();
        // The watch's compaction: its merges take the turns, and waiting
        // for one is no warning.
        let auto = turns.compaction(culprit_store::AutoCompact::default());
        assert!(auto.deferral_expected);
        let gate = auto.compact.memory.expect("the turns' gate");
        let take = |gate: &culprit_store::MemoryGate| gate.take(100 << 20);
        let ingest = turns.ingest().await;
        assert_eq!(take(&gate).err().as_deref(), Some("an ingest is running"));
        drop(ingest);
        let merge = take(&gate).expect("no ingest runs: the merge's turn");
        let waited = tokio::time::timeout(Duration::from_millis(200), turns.ingest()).await;
        assert!(waited.is_err(), "an ingest began during a merge");
        // An ingest waiting when the merge ends goes before the next merge.
        let queued = tokio::spawn({
            let turns = turns.clone();
            async move {
                let _turn = turns.ingest().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(merge);
        assert!(
            take(&gate).is_err(),
            "a second merge went before the waiting ingest"
        );
        queued.await.unwrap();
        let _ingest = tokio::time::timeout(Duration::from_secs(5), turns.ingest())
            .await
            .expect("no merge nor ingest runs: an ingest's turn");
    }
}
