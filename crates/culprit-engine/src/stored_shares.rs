//! Slot holders' shares stored with the data (method.md section 5b).
//!
//! Transitive slot blame passes a victim's slot wait on in the shares
//! `rho(cs, X)` of the holder stage `cs`, which depend on the holder, the
//! window and the attribution, not on the victim. Computing them means
//! reading and sweeping every host the holder ran on: on a wide cluster
//! most of a one-victim analysis (docs/performance.md). `culprit shares`
//! (and a server, in the background) computes the shares of every stage of
//! the store once, for the default analysis (the whole time, the
//! conserving attribution), and stores them in one Parquet object under
//! the telemetry it was computed from ([`Manifest::telemetry_id`],
//! `paths::stage_shares_file`: named by the manifest version it read, when
//! it was written and the format, so no object is ever written over): a
//! compaction keeps them valid, an ingest or an expiry names other rows,
//! and the objects of the old ones are no longer looked at (the next
//! computation removes them). An analysis over every victim read group by
//! group does not use them (`Engine::group`).
//!
//! A focused analysis ([`Engine::focused`]) looks the holders of its
//! victims up there, by the stages' spans (row group statistics: only the
//! row groups that may overlap the victims' time are decoded, only the
//! holders' rows kept), and neither reads nor sweeps those holders'
//! neighbourhoods. A holder missing from it, or an object
//! that cannot be read (damaged, removed meanwhile), is computed as
//! without it; the analysis never fails for it.
//!
//! The stored numbers are those a focused read of the holder's own query
//! gives: the same to about 1e-11 relative as a holder swept beside a
//! victim (the same terms summed in another order), and, once stored, the
//! same bits for every analysis of the same telemetry, one process or a
//! server.
//!
//! The same object holds the stored answers: the rows of `culprits(q)`
//! with the default options over the whole time, for every query `q` of
//! the store, computed group by group as `culprits(NULL)` computes them,
//! once every stage's shares are stored (each group read for its victims,
//! its slot holders' shares taken from those just stored, their
//! neighbourhoods not read). A call asking exactly that question is
//! answered from them ([`Engine::stored_culprits`]: the row groups of the
//! victim's span, found through the query index) without reading a task or
//! a window row; any other call (an option, a window, another function)
//! is computed. They are the same to about 1e-11 relative as the victim's
//! own computation (the same terms summed in another order).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Float64Builder, Int64Builder,
    RecordBatch, StringBuilder, UInt8Builder,
};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef, UInt8Type};
use culprit_core::method::usecases::CulpritRow;
use culprit_core::method::{
    stage_shares, Attribution, BlameOptions, Culprit, CulpritKind, Dataset, Micros,
};
use culprit_store::layout::STAGE_SHARES;
use culprit_store::{paths, DataFile, Manifest};
use futures::StreamExt;

use crate::engine::Engine;
use crate::error::Error;
use crate::focus::{groups_by_start, of_victims, Focus, Kept, GROUP_TASKS};
use crate::shares::{Named, NamedShares};

/// Tasks per group of queries of [`Engine::store_shares`] for an engine
/// without a memory limit (`culprit shares`; a server started with
/// `--memory-budget-mb 0`): twice [`GROUP_TASKS`]. A group reads every task
/// and window row of its time on every host, and its time grows slower
/// than its tasks, so larger groups read and sweep less in all; they hold
/// more (docs/performance.md, thirty-second session). An engine with a
/// limit (a server's, by default) keeps [`GROUP_TASKS`]: its budget refuses
/// a group whose read is estimated above a heavy analysis's share, so
/// larger groups could leave a small budget with no shares at all.
const SHARES_GROUP_TASKS: u64 = 2 * GROUP_TASKS;

/// The window of the stored shares: the whole time (an analysis without
/// `from` or `to`).
pub const WINDOW: (Micros, Micros) = (Micros::MIN, Micros::MAX);

/// The attribution of the stored shares (the default).
pub const ATTRIBUTION: Attribution = Attribution::Window;

/// The victim of a call whose answer is stored: `culprits(victim)` with
/// the default options over the whole time (`opts` its options; an option
/// given at its default value, or `NULL` for `from` and `to`, is the
/// same), one victim named; `None` for any other.
pub fn stored_question(opts: &BlameOptions) -> Option<&str> {
    let d = BlameOptions::default();
    // Every field named: a new option is not taken as the default's.
    let BlameOptions {
        victims,
        within,
        stages,
        attribution,
        slots,
        tasks,
        from,
        to,
    } = opts;
    let default = within.is_none()
        && from.is_none()
        && to.is_none()
        && *stages == d.stages
        && *attribution == d.attribution
        && *slots == d.slots
        && *tasks == d.tasks;
    match victims.as_deref() {
        Some([victim]) if default => Some(victim),
        _ => None,
    }
}

/// The footer's key naming the telemetry the shares were computed from.
const TELEMETRY_KEY: &str = "culprit.telemetry";

/// A row's culprit: none (a stage that nothing slowed, kept so that it is
/// known), a stage, GC, external, unknown.
const NONE: u8 = 0;
const STAGE: u8 = 1;
const GC: u8 = 2;
const EXTERNAL: u8 = 3;
const UNKNOWN: u8 = 4;
/// An answer's culprit of kind `self` (the victim's own other stages).
const OWN: u8 = 5;

/// The schema of the stored shares: per stage (`query`, `stage`, its
/// first launch and last finish in µs), one row per culprit and its share
/// (`answer` false, the answer's columns null); and the stored answers:
/// per query (`query`, `stage` empty, the query's span in the query index),
/// one row per row of its `culprits()` (`answer` true, `culprit` its kind,
/// `culprit_stage` null, `share` 0), or one row of kind none when it has
/// none, so that an empty answer is known.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("query", DataType::Utf8, false),
        Field::new("stage", DataType::Utf8, false),
        Field::new("first", DataType::Int64, false),
        Field::new("last", DataType::Int64, false),
        Field::new("culprit", DataType::UInt8, false),
        Field::new("culprit_query", DataType::Utf8, true),
        Field::new("culprit_stage", DataType::Utf8, true),
        Field::new("share", DataType::Float64, false),
        Field::new("answer", DataType::Boolean, false),
        Field::new("blame_seconds", DataType::Float64, true),
        Field::new("dor", DataType::Float64, true),
        Field::new("naive_overlap_seconds", DataType::Float64, true),
        Field::new("deep_overlap_seconds", DataType::Float64, true),
    ]))
}

/// One row of a stored answer of `culprits(victim)` (the columns after
/// `victim_query`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCulprit {
    pub kind: CulpritKind,
    pub culprit_query: Option<String>,
    pub seconds: f64,
    pub dor: Option<f64>,
    pub naive_overlap: Option<f64>,
    pub deep_overlap: Option<f64>,
}

/// What [`Engine::store_shares`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The store holds no tasks: nothing to store.
    NoTasks,
    /// An object of this telemetry was stored already (`path`).
    Stored,
    /// Computed and written now (`path`).
    Computed,
    /// Computed, but the telemetry changed meanwhile: nothing kept.
    Stale,
}

/// What [`Engine::store_shares`] did and wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct SharesStored {
    pub outcome: Outcome,
    /// The object, relative to the store's root (none for `NoTasks` and
    /// `Stale`).
    pub path: Option<String>,
    /// The telemetry it holds for ([`Manifest::telemetry_id`]).
    pub telemetry: String,
    pub stages: usize,
    /// Culprit rows (a stage slowed by nothing has one row of none).
    pub rows: usize,
    /// Queries whose answer of `culprits()` is stored, and its rows.
    pub answers: usize,
    pub answer_rows: usize,
    pub bytes: u64,
    /// Objects of other telemetry, and older ones of this, removed.
    pub removed: usize,
}

/// Stored shares read for one analysis: by (query, stage).
pub(crate) type Found = HashMap<(String, String), NamedShares>;

/// What an engine found last of the stored objects: the telemetry, its
/// object (path, bytes) if it has one, and when it looked; and the last
/// object an analysis could not read (the background storing replaces it).
#[derive(Debug, Default)]
pub(crate) struct Located {
    look: std::sync::Mutex<Option<Look>>,
    damaged: std::sync::Mutex<Option<String>>,
    /// Calls answered from the stored answers.
    answered: std::sync::atomic::AtomicU64,
}

type Look = (String, Option<(String, u64)>, std::time::Instant);

/// How long an engine's analyses take what it found of the stored objects
/// for an answer before they look again (a listing per analysis would cost
/// an S3 store a request). Storing them always looks.
const LOOKED_FOR: std::time::Duration = std::time::Duration::from_secs(5);

impl Engine {
    /// Computes the slot holders' shares of every stage of the store's
    /// newest version and stores them (see the module doc), in groups of
    /// queries by start (of about 131,072 tasks, `SHARES_GROUP_TASKS`,
    /// without a memory limit; 65,536, [`GROUP_TASKS`], with one), each
    /// read as [`Engine::focused`] reads named victims (memory follows a
    /// group, not the store, each admitted in the memory budget as a heavy
    /// analysis), twice: the shares of every group, then the answers of
    /// `culprits()` of every group (the module doc); `progress` is told the
    /// steps done and their number (two per group).
    /// Nothing is computed for a store without tasks, or whose telemetry
    /// has a readable object already (one that cannot be read is
    /// replaced); a computation whose telemetry changes stops at the next
    /// group. Refused for a store without a complete query index (written
    /// before it; `culprit compact` rebuilds it): nothing could use them.
    pub async fn store_shares(
        &self,
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<SharesStored, Error> {
        let group_tasks = if self.budget().limit().is_none() {
            SHARES_GROUP_TASKS
        } else {
            GROUP_TASKS
        };
        self.store_shares_in_groups(group_tasks, progress).await
    }

    /// [`Engine::store_shares`] in groups of about `group_tasks` tasks
    /// (tests: the shares do not depend on the groups).
    #[doc(hidden)]
    pub async fn store_shares_in_groups(
        &self,
        group_tasks: u64,
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<SharesStored, Error> {
        let store = self.store();
        let manifest = store.manifest().await?;
        let telemetry = manifest.telemetry_id();
        let mut stored = SharesStored {
            outcome: Outcome::NoTasks,
            path: None,
            telemetry: telemetry.clone(),
            stages: 0,
            rows: 0,
            answers: 0,
            answer_rows: 0,
            bytes: 0,
            removed: 0,
        };
        if manifest.rows_of(culprit_core::Table::Tasks) == 0 {
            return Ok(stored); // no stage ran: nothing to store
        }
        // An object of the shares only (a computation stopped before the
        // answers) is completed: its shares are not computed again.
        let mut shares_only = None;
        if let Some((path, bytes)) = self.find_shares(&telemetry).await? {
            match self.check_shares(&path, bytes).await {
                Ok(()) if paths::is_stage_shares_only_file(&path) => {
                    shares_only = Some((path, bytes));
                }
                Ok(()) => {
                    // Readable whole: an analysis's failure to read it
                    // was passing.
                    if let Ok(mut d) = self.located.damaged.lock() {
                        if d.as_deref() == Some(path.as_str()) {
                            *d = None;
                        }
                    }
                    stored.outcome = Outcome::Stored;
                    stored.path = Some(path);
                    stored.bytes = bytes;
                    return Ok(stored);
                }
                Err(e) => {
                    // Removed now, so that neither the reads below nor
                    // analyses meanwhile take it for the newest.
                    log::warn!("stored shares: {path} cannot be read ({e}): computed again");
                    if let Err(e) = store.remove_derived(std::slice::from_ref(&path)).await {
                        log::warn!("stored shares: removing an object that cannot be read: {e}");
                    }
                }
            }
        }
        let Some(spans) = self.spans(&manifest).await? else {
            return Err(Error::argument(
                "shares",
                "the store has no complete query index (it was written before one was kept; \
                 culprit compact rebuilds it): analyses read it whole and would not use stored \
                 shares",
            ));
        };
        let whole = self.whole_tables(&manifest).await?;
        let groups = groups_by_start(&spans, (i64::MIN, i64::MAX), group_tasks);
        let steps = 2 * groups.len();
        progress(0, steps);
        let mut done = 0;
        // 1. The shares, each group read without its holders (they are
        // the stages of other groups), into an object of the shares only.
        let shares_only = match shares_only {
            Some(found) => {
                done += groups.len();
                progress(done, steps);
                found
            }
            None => {
                let written = chrono_micros();
                let path = paths::stage_shares_only_file(&telemetry, manifest.version, written);
                let mut writer = store.derived_writer(
                    &path,
                    STAGE_SHARES,
                    &schema(),
                    vec![(TELEMETRY_KEY.to_string(), telemetry.clone())],
                )?;
                for (i, victims) in groups.iter().enumerate() {
                    if store.manifest().await?.telemetry_id() != telemetry {
                        return self.stopped(stored, i, groups.len()).await;
                    }
                    let focus = Focus {
                        victims: victims.clone(),
                        holders: false,
                        window: WINDOW,
                        attribution: ATTRIBUTION,
                    };
                    let (group, admitted) = self
                        .read_group(&manifest, &spans, &whole, &focus, Kept::NONE)
                        .await?;
                    let (ds, victims) = (group.ds.clone(), victims.clone());
                    let (batch, _) = crate::budget::run_held((group, admitted), move || {
                        let mask = of_victims(&ds, &victims);
                        let shares = stage_shares(&ds, &mask, WINDOW, ATTRIBUTION)?;
                        rows_of(&ds, &shares, schema())
                    })
                    .await
                    .map_err(|e| Error::Internal(format!("computing the stages' shares: {e}")))?;
                    let (batch, n): (RecordBatch, usize) = batch?;
                    stored.stages += n;
                    stored.rows += batch.num_rows();
                    writer.write(&batch).await?;
                    done += 1;
                    progress(done, steps);
                }
                if store.manifest().await?.telemetry_id() != telemetry {
                    return self.stopped(stored, groups.len(), groups.len()).await;
                }
                let bytes = writer.finish().await?;
                log::info!(
                    "stored shares: {} stages ({} rows) for the telemetry {telemetry} at {path}; \
                     the answers next",
                    stored.stages,
                    stored.rows
                );
                (path, bytes)
            }
        };
        // Found by the reads below (their holders' shares), and by
        // analyses meanwhile.
        self.locate(&telemetry, Some(shares_only.clone()));
        // 2. The answers, each group read as `culprits(NULL)` reads it but
        // its holders' shares taken from the object of step 1 (their
        // neighbourhoods not read), into the object that holds both: the
        // shares copied first.
        let written = chrono_micros();
        let path = paths::stage_shares_file(&telemetry, manifest.version, written);
        let mut writer = store.derived_writer(
            &path,
            STAGE_SHARES,
            &schema(),
            vec![(TELEMETRY_KEY.to_string(), telemetry.clone())],
        )?;
        let (copied, stages) = self.copy_shares(&shares_only, &mut writer).await?;
        (stored.rows, stored.stages) = (copied, stages);
        for (i, victims) in groups.iter().enumerate() {
            if store.manifest().await?.telemetry_id() != telemetry {
                return self.stopped(stored, i, groups.len()).await;
            }
            let focus = Focus {
                victims: victims.clone(),
                holders: true,
                window: WINDOW,
                attribution: ATTRIBUTION,
            };
            let stored_only = Kept {
                cached: false,
                stored: true,
            };
            let (group, admitted) = self
                .read_group(&manifest, &spans, &whole, &focus, stored_only)
                .await?;
            let spans_of = answer_spans(&spans, victims);
            let (snapshot, victims) = (group.clone(), victims.clone());
            let (batch, _) = crate::budget::run_held((group, admitted), move || {
                let opts = BlameOptions {
                    within: Some(victims),
                    ..BlameOptions::default()
                };
                let answers = snapshot.culprits(&opts)?;
                answer_rows(&snapshot.ds, &spans_of, &answers, schema())
            })
            .await
            .map_err(|e| Error::Internal(format!("computing the stored answers: {e}")))?;
            let (batch, queries) = batch?;
            stored.answers += queries;
            stored.answer_rows += batch.num_rows();
            writer.write(&batch).await?;
            done += 1;
            progress(done, steps);
        }
        if store.manifest().await?.telemetry_id() != telemetry {
            return self.stopped(stored, groups.len(), groups.len()).await;
        }
        stored.bytes = writer.finish().await?;
        stored.outcome = Outcome::Computed;
        stored.path = Some(path.clone());
        self.locate(&telemetry, Some((path.clone(), stored.bytes)));
        // The object of the shares only, completed now (not counted).
        if let Err(e) = store.remove_derived(&[shares_only.0]).await {
            log::warn!("stored shares: removing the object of the shares only: {e}");
        }
        stored.removed = self.remove_stale_shares().await;
        log::info!(
            "stored shares: {} stages ({} rows) and the answers of {} queries ({} rows), {} \
             bytes, for the telemetry {} at {path}",
            stored.stages,
            stored.rows,
            stored.answers,
            stored.answer_rows,
            stored.bytes,
            stored.telemetry,
        );
        Ok(stored)
    }

    /// A group of [`Engine::store_shares`] read for `focus`, admitted as a
    /// heavy analysis (a server's budget: it waits for a slot and its
    /// memory as one; what it reads is counted until the group's rows are
    /// computed, on a thread that holds the admission).
    async fn read_group(
        &self,
        manifest: &Arc<Manifest>,
        spans: &crate::focus::Spans,
        whole: &crate::focus::WholeTables,
        focus: &Focus,
        kept: Kept,
    ) -> Result<(crate::engine::Snapshot, crate::budget::Admission), Error> {
        let estimate = crate::focus::read_estimate(
            manifest,
            spans,
            crate::focus::victims_span(spans, &focus.victims),
        );
        let mut admitted = self
            .budget()
            .admit("storing the slot holders' shares", estimate, true)
            .await?;
        let (snapshot, _) = self
            .focused_at(
                manifest.clone(),
                spans,
                whole,
                focus,
                kept,
                Some(&mut admitted.reservation),
            )
            .await?;
        Ok((snapshot, admitted))
    }

    /// Copies the shares of the object `from` (of the shares only) to
    /// `writer`: the rows and the stages.
    async fn copy_shares(
        &self,
        (path, bytes): &(String, u64),
        writer: &mut culprit_store::DerivedWriter,
    ) -> Result<(usize, usize), Error> {
        let mut rows = self.scan(vec![shares_file(path, *bytes)], (i64::MIN, i64::MAX), false);
        let (mut n, mut stages) = (0, 0);
        let mut last: Option<(String, String)> = None;
        while let Some(b) = rows.next().await {
            let b = b?;
            let c = Columns(&b);
            let (query, stage) = (c.text("query")?, c.text("stage")?);
            for i in 0..b.num_rows() {
                let key = (query.value(i), stage.value(i));
                if last.as_ref().map(|(q, s)| (q.as_str(), s.as_str())) != Some(key) {
                    stages += 1;
                    last = Some((key.0.to_string(), key.1.to_string()));
                }
            }
            n += b.num_rows();
            writer.write(&b).await?;
        }
        Ok((n, stages))
    }

    /// A computation stopped at group `i` of `n` because the telemetry
    /// changed: nothing kept.
    async fn stopped(
        &self,
        mut stored: SharesStored,
        i: usize,
        n: usize,
    ) -> Result<SharesStored, Error> {
        // The writer is dropped, its upload never completed.
        log::info!(
            "stored shares: the telemetry changed while {}'s were computed; stopped after {i} \
             of {n} groups",
            stored.telemetry
        );
        stored.outcome = Outcome::Stale;
        stored.removed = self.remove_stale_shares().await;
        Ok(stored)
    }

    /// Removes the stored objects of every telemetry but the store's
    /// current one, and the current one's but its newest (the one readers
    /// take): never the newest, so computations at once (two processes)
    /// leave one. How many were removed (a failure is logged: they are
    /// removed by the next).
    async fn remove_stale_shares(&self) -> usize {
        let store = self.store();
        let current = match store.manifest().await {
            Ok(m) => paths::stage_shares_dir(&m.telemetry_id()),
            Err(e) => {
                log::warn!("stored shares: cannot read the manifest: {e}");
                return 0;
            }
        };
        let objects = match store.derived_objects(paths::STAGE_SHARES_DIR).await {
            Ok(o) => o,
            Err(e) => {
                log::warn!("stored shares: cannot list the stored objects: {e}");
                return 0;
            }
        };
        let newest = newest(
            objects
                .iter()
                .map(|(p, _)| p.as_str())
                .filter(|p| p.starts_with(&current)),
        )
        .map(str::to_string);
        let gone: Vec<String> = objects
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| Some(p) != newest.as_ref())
            .collect();
        match store.remove_derived(&gone).await {
            Ok(n) => n,
            Err(e) => {
                log::warn!("stored shares: removing older objects: {e}");
                0
            }
        }
    }

    /// Reads a stored object whole, checking what it holds (every share
    /// row and every answer row).
    async fn check_shares(&self, path: &str, bytes: u64) -> Result<(), Error> {
        let mut rows = self.scan(vec![shares_file(path, bytes)], (i64::MIN, i64::MAX), false);
        while let Some(b) = rows.next().await {
            let b = b?;
            add_rows(&mut Found::new(), &b, None)?;
            add_answer(&mut None, &b, None)?;
        }
        Ok(())
    }

    /// The newest stored object of `telemetry` in this culprit's format
    /// (with the answers, if one is), with its size; `None` if none (listed
    /// now).
    async fn find_shares(&self, telemetry: &str) -> Result<Option<(String, u64)>, Error> {
        let found = self
            .store()
            .derived_objects(&paths::stage_shares_dir(telemetry))
            .await?;
        let found = newest(found.iter().map(|(p, _)| p.as_str()))
            .and_then(|n| found.iter().find(|(p, _)| p == n).cloned());
        self.locate(telemetry, found.clone());
        Ok(found)
    }

    /// [`Engine::find_shares`] for an analysis: what the engine found
    /// less than [`LOOKED_FOR`] ago, else listed now.
    async fn locate_shares(&self, telemetry: &str) -> Result<Option<(String, u64)>, Error> {
        if let Some((t, found, when)) = self.located.look.lock().ok().and_then(|l| l.clone()) {
            if t == telemetry && when.elapsed() < LOOKED_FOR {
                return Ok(found);
            }
        }
        self.find_shares(telemetry).await
    }

    /// Notes what was found of `telemetry`'s stored object.
    fn locate(&self, telemetry: &str, found: Option<(String, u64)>) {
        if let Ok(mut l) = self.located.look.lock() {
            *l = Some((telemetry.to_string(), found, std::time::Instant::now()));
        }
    }

    /// Whether an analysis of this engine could not read `path`.
    fn damaged(&self, path: &str) -> bool {
        self.located
            .damaged
            .lock()
            .is_ok_and(|d| d.as_deref() == Some(path))
    }

    /// Stores the slot holders' shares in the background, for a server:
    /// every `after`, if the telemetry is the one of the check before (it
    /// has not changed for at least `after`: an ingest running file after
    /// file would make them stale at once) and none are stored for it,
    /// [`Engine::store_shares`]. Forever (drop the future to stop; stopped
    /// halfway, nothing is stored). A failure (the budget full, the store
    /// unreachable) is logged; the same telemetry is tried again after ten
    /// more checks (a new one once it is quiet).
    pub async fn store_shares_when_quiet(&self, after: std::time::Duration) {
        const RETRY_AFTER: u32 = 10;
        let mut last: Option<String> = None;
        let mut failed: Option<(String, u32)> = None;
        loop {
            tokio::time::sleep(after).await;
            let telemetry = match self.store().manifest().await {
                Ok(m) if m.rows_of(culprit_core::Table::Tasks) == 0 => continue,
                Ok(m) => m.telemetry_id(),
                Err(e) => {
                    log::warn!("stored shares: cannot read the manifest: {e}");
                    continue;
                }
            };
            let quiet = last.as_deref() == Some(telemetry.as_str());
            last = Some(telemetry.clone());
            if !quiet {
                continue;
            }
            if let Some((t, checks)) = &mut failed {
                if *t == telemetry && *checks < RETRY_AFTER {
                    *checks += 1;
                    continue;
                }
            }
            // Listed now (another process may have stored or removed
            // them); one an analysis could not read is replaced.
            match self.find_shares(&telemetry).await {
                Ok(Some((path, _)))
                    if !self.damaged(&path) && !paths::is_stage_shares_only_file(&path) =>
                {
                    continue
                }
                Ok(_) => {}
                Err(e) => {
                    log::warn!("stored shares: {e}");
                    continue;
                }
            }
            match self.store_shares(&mut |_, _| {}).await {
                Ok(_) => failed = None,
                Err(e) => {
                    log::warn!(
                        "stored shares: not stored for the telemetry {telemetry} ({e}); tried \
                         again {RETRY_AFTER} checks later, or once the telemetry changes"
                    );
                    failed = Some((telemetry, 0));
                }
            }
        }
    }

    /// The stored shares of the stages of `wanted` (query, stage) whose
    /// span overlaps `span`, if shares are stored for the telemetry of
    /// `manifest`; `None` when none are or they cannot be read (logged:
    /// the analysis computes them). Every row of such a stage is read: its
    /// rows all have its span, so every row group holding one overlaps
    /// `span` too.
    pub(crate) async fn stored_shares(
        &self,
        manifest: &Manifest,
        span: (i64, i64),
        cached: bool,
        wanted: &std::collections::HashSet<(String, String)>,
    ) -> Option<Found> {
        let telemetry = manifest.telemetry_id();
        let (path, bytes) = match self.locate_shares(&telemetry).await {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(e) => {
                log::warn!("looking for stored shares of the telemetry {telemetry}: {e}");
                return None;
            }
        };
        let mut found = Found::new();
        let mut rows = self.scan(vec![shares_file(&path, bytes)], span, cached);
        while let Some(b) = rows.next().await {
            if let Err(e) = b
                .map_err(Error::from)
                .and_then(|b| add_rows(&mut found, &b, Some(wanted)))
            {
                log::warn!("reading the stored shares {path}: {e}; computing them instead");
                // Taken as none for a while, then looked for again; the
                // background storing replaces it.
                self.locate(&telemetry, None);
                if let Ok(mut d) = self.located.damaged.lock() {
                    *d = Some(path.clone());
                }
                return None;
            }
        }
        Some(found)
    }
}

impl Engine {
    /// The stored answer of `culprits(victim)` with the default options
    /// over the whole time (see the module doc), if the store's telemetry
    /// has one for `victim`; `None` when none is stored (no object, a
    /// query the index does not hold, a store without a complete query
    /// index) or it cannot be read (logged): the call is then computed.
    /// Reads the row groups of the object that may hold the victim's span,
    /// no task and no window row.
    pub async fn stored_culprits(&self, victim: &str) -> Result<Option<Vec<StoredCulprit>>, Error> {
        let manifest = self.store().manifest().await?;
        self.stored_culprits_at(&manifest, victim).await
    }

    /// [`Engine::stored_culprits`] of the store's version `manifest` (a
    /// call that computes its answer when none is stored reads the same
    /// version, [`Engine::focused_at_version`]).
    pub async fn stored_culprits_at(
        &self,
        manifest: &Manifest,
        victim: &str,
    ) -> Result<Option<Vec<StoredCulprit>>, Error> {
        let telemetry = manifest.telemetry_id();
        let Some((path, bytes)) = self.locate_shares(&telemetry).await? else {
            return Ok(None);
        };
        if self.damaged(&path) || paths::is_stage_shares_only_file(&path) {
            return Ok(None); // no answers (yet)
        }
        let Some(spans) = self.spans(manifest).await? else {
            return Ok(None);
        };
        let Some(span) = spans.get(victim).map(|s| (s.first, s.last)) else {
            return Ok(None); // unknown: the computation refuses it
        };
        let cached = self.read_cache().is_some();
        let mut rows = self.scan(vec![shares_file(&path, bytes)], span, cached);
        let mut found = None;
        while let Some(b) = rows.next().await {
            if let Err(e) = b
                .map_err(Error::from)
                .and_then(|b| add_answer(&mut found, &b, Some(victim)))
            {
                log::warn!("reading the stored answers {path}: {e}; computing them instead");
                self.locate(&telemetry, None);
                if let Ok(mut d) = self.located.damaged.lock() {
                    *d = Some(path.clone());
                }
                return Ok(None);
            }
        }
        if found.is_some() {
            self.located
                .answered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(found)
    }

    /// How many calls [`Engine::stored_culprits`] found a stored answer for.
    pub fn stored_answers_read(&self) -> u64 {
        self.located
            .answered
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The columns of a batch of a stored object, each of the type its
/// readers expect, or an error naming it (a damaged or foreign object).
struct Columns<'a>(&'a RecordBatch);

impl<'a> Columns<'a> {
    fn get<T: ?Sized>(
        &self,
        name: &str,
        of_type: impl FnOnce(&'a dyn Array) -> Option<&'a T>,
    ) -> Result<&'a T, Error> {
        self.0
            .column_by_name(name)
            .and_then(|c| of_type(c.as_ref()))
            .ok_or_else(|| {
                Error::Internal(format!(
                    "the stored shares' column {name} is missing or of another type"
                ))
            })
    }

    fn text(&self, name: &str) -> Result<&'a arrow::array::StringArray, Error> {
        self.get(name, |c| c.as_string_opt::<i32>())
    }

    fn float(&self, name: &str) -> Result<&'a arrow::array::Float64Array, Error> {
        self.get(name, |c| c.as_primitive_opt::<Float64Type>())
    }

    fn int(&self, name: &str) -> Result<&'a arrow::array::Int64Array, Error> {
        self.get(name, |c| c.as_primitive_opt::<Int64Type>())
    }

    fn kind(&self) -> Result<&'a arrow::array::UInt8Array, Error> {
        self.get("culprit", |c| c.as_primitive_opt::<UInt8Type>())
    }

    fn answer(&self) -> Result<&'a BooleanArray, Error> {
        self.get("answer", |c| c.as_boolean_opt())
    }
}

/// Adds the stored answer rows of `victim` of a batch to `found` (a row of
/// none makes it an empty answer), checking what they hold; with no
/// victim, checks every answer row and adds none.
fn add_answer(
    found: &mut Option<Vec<StoredCulprit>>,
    b: &RecordBatch,
    victim: Option<&str>,
) -> Result<(), Error> {
    let c = Columns(b);
    let (query, culprit_query) = (c.text("query")?, c.text("culprit_query")?);
    let (culprit, answer) = (c.kind()?, c.answer()?);
    let (seconds, dor) = (c.float("blame_seconds")?, c.float("dor")?);
    let (naive, deep) = (
        c.float("naive_overlap_seconds")?,
        c.float("deep_overlap_seconds")?,
    );
    let wrong = |i: usize, what: &str| {
        Error::Internal(format!("the stored answers hold {what} at row {i}"))
    };
    let opt = |c: &arrow::array::Float64Array, i: usize| (!c.is_null(i)).then(|| c.value(i));
    for i in 0..b.num_rows() {
        if answer.is_null(i) || query.is_null(i) || culprit.is_null(i) {
            return Err(wrong(i, "a null"));
        }
        if !answer.value(i) || victim.is_some_and(|v| query.value(i) != v) {
            continue;
        }
        if victim.is_some() {
            found.get_or_insert_with(Vec::new);
        }
        let kind = match culprit.value(i) {
            NONE => continue,
            STAGE => CulpritKind::Query,
            OWN => CulpritKind::OwnQuery,
            GC => CulpritKind::Gc,
            EXTERNAL => CulpritKind::External,
            UNKNOWN => CulpritKind::Unknown,
            other => return Err(wrong(i, &format!("an unknown culprit kind {other}"))),
        };
        let by = (!culprit_query.is_null(i)).then(|| culprit_query.value(i).to_string());
        if matches!(kind, CulpritKind::Query | CulpritKind::OwnQuery) != by.is_some() {
            return Err(wrong(
                i,
                "a culprit query where its kind has none, or none where it has",
            ));
        }
        let Some(x) = opt(seconds, i).filter(|x| x.is_finite() && *x >= 0.0) else {
            return Err(wrong(
                i,
                "no blame, or a blame that is not a finite number of seconds",
            ));
        };
        if let (Some(rows), Some(_)) = (found.as_mut(), victim) {
            rows.push(StoredCulprit {
                kind,
                culprit_query: by,
                seconds: x,
                dor: opt(dor, i),
                naive_overlap: opt(naive, i),
                deep_overlap: opt(deep, i),
            });
        }
    }
    Ok(())
}

/// Of stored objects' paths (sorted, as listed), the one readers take: the
/// newest holding the answers, else the newest of the shares only (a
/// computation's first step).
fn newest<'a>(paths: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let (mut complete, mut shares_only) = (None, None);
    for p in paths {
        if paths::is_stage_shares_only_file(p) {
            shares_only = Some(p);
        } else if paths::is_stage_shares_file(p) {
            complete = Some(p);
        }
    }
    complete.or(shares_only)
}

/// A stored object as the store reads a file (a time table's layout).
fn shares_file(path: &str, bytes: u64) -> DataFile {
    DataFile {
        table: STAGE_SHARES.to_string(),
        path: path.to_string(),
        rows: 0,
        bytes,
        batch: String::new(),
        bucket: None,
        window_span: None,
    }
}

/// Now, in µs since the epoch (an object's name, `paths::stage_shares_file`).
fn chrono_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The rows of `shares` (stages of `ds`) and how many stages.
fn rows_of(
    ds: &culprit_core::method::Dataset,
    shares: &[(u32, culprit_core::method::transitive::Shares)],
    schema: SchemaRef,
) -> Result<(RecordBatch, usize), Error> {
    // Each stage's first launch and last finish, over its tasks.
    let mut span = vec![(i64::MAX, i64::MIN); ds.stages.len()];
    for t in &ds.tasks {
        let s = &mut span[t.stage as usize];
        *s = (s.0.min(t.launch), s.1.max(t.finish));
    }
    let mut order: Vec<&(u32, _)> = shares.iter().collect();
    order.sort_by_key(|(s, _)| (span[*s as usize], *s));
    let n: usize = shares.iter().map(|(_, v)| v.len().max(1)).sum();
    let mut query = StringBuilder::with_capacity(n, n * 8);
    let mut stage = StringBuilder::with_capacity(n, n * 4);
    let mut first = Int64Builder::with_capacity(n);
    let mut last = Int64Builder::with_capacity(n);
    let mut culprit = UInt8Builder::with_capacity(n);
    let mut culprit_query = StringBuilder::with_capacity(n, n * 8);
    let mut culprit_stage = StringBuilder::with_capacity(n, n * 4);
    let mut share = Float64Builder::with_capacity(n);
    let mut stages = 0;
    for (s, v) in order {
        let (a, b) = span[*s as usize];
        if a > b {
            continue; // no task: never a holder
        }
        stages += 1;
        // A stage slowed by nothing: one row of none, so that it is known.
        let entries: Vec<(Option<Culprit>, f64)> = if v.is_empty() {
            vec![(None, 0.0)]
        } else {
            v.iter().map(|&(c, x)| (Some(c), x)).collect()
        };
        for (c, x) in entries {
            query.append_value(ds.stage_query_name(*s));
            stage.append_value(ds.stage_name(*s));
            first.append_value(a);
            last.append_value(b);
            share.append_value(x);
            let (kind, by) = match c {
                None => (NONE, None),
                Some(Culprit::Stage(cs)) => (STAGE, Some(cs)),
                Some(Culprit::Gc) => (GC, None),
                Some(Culprit::External) => (EXTERNAL, None),
                Some(Culprit::Unknown) => (UNKNOWN, None),
            };
            culprit.append_value(kind);
            match by {
                Some(cs) => {
                    culprit_query.append_value(ds.stage_query_name(cs));
                    culprit_stage.append_value(ds.stage_name(cs));
                }
                None => {
                    culprit_query.append_null();
                    culprit_stage.append_null();
                }
            }
        }
    }
    let rows = arrow::array::ArrayBuilder::len(&share);
    let none = || new_null_array(&DataType::Float64, rows);
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(query.finish()) as ArrayRef,
            Arc::new(stage.finish()),
            Arc::new(first.finish()),
            Arc::new(last.finish()),
            Arc::new(culprit.finish()),
            Arc::new(culprit_query.finish()),
            Arc::new(culprit_stage.finish()),
            Arc::new(share.finish()),
            Arc::new(BooleanArray::from(vec![false; rows])),
            none(),
            none(),
            none(),
            none(),
        ],
    )
    .map_err(|e| Error::Internal(format!("the stages' shares: {e}")))?;
    Ok((batch, stages))
}

/// The span in the query index of each of `victims` (that has one), in
/// the order of their start: the order of their stored answers, and the
/// span a lookup prunes by.
fn answer_spans(spans: &crate::focus::Spans, victims: &[String]) -> Vec<(String, (i64, i64))> {
    let mut out: Vec<(String, (i64, i64))> = victims
        .iter()
        .filter_map(|v| spans.get(v).map(|s| (v.clone(), (s.first, s.last))))
        .collect();
    out.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    out
}

/// The stored answers' rows of `answers` (`culprits()` of the queries of
/// `victims`, with their spans): each query's rows in the order of the
/// result, one row of none for a query without any. The batch and how
/// many queries.
fn answer_rows(
    ds: &Dataset,
    victims: &[(String, (i64, i64))],
    answers: &[CulpritRow],
    schema: SchemaRef,
) -> Result<(RecordBatch, usize), Error> {
    let mut of: HashMap<&str, Vec<&CulpritRow>> = HashMap::new();
    for r in answers {
        of.entry(ds.queries.name(r.victim)).or_default().push(r);
    }
    let n = answers.len() + victims.len();
    let mut query = StringBuilder::with_capacity(n, n * 8);
    let mut first = Int64Builder::with_capacity(n);
    let mut last = Int64Builder::with_capacity(n);
    let mut culprit = UInt8Builder::with_capacity(n);
    let mut culprit_query = StringBuilder::with_capacity(n, n * 8);
    let mut seconds = Float64Builder::with_capacity(n);
    let mut dor = Float64Builder::with_capacity(n);
    let mut naive = Float64Builder::with_capacity(n);
    let mut deep = Float64Builder::with_capacity(n);
    for (victim, (a, b)) in victims {
        let rows = of.remove(victim.as_str()).unwrap_or_default();
        let mut put = |kind: u8, by: Option<&str>, x: Option<f64>, r: Option<&CulpritRow>| {
            query.append_value(victim);
            first.append_value(*a);
            last.append_value(*b);
            culprit.append_value(kind);
            culprit_query.append_option(by);
            seconds.append_option(x);
            dor.append_option(r.and_then(|r| r.dor));
            naive.append_option(r.and_then(|r| r.naive_overlap));
            deep.append_option(r.and_then(|r| r.deep_overlap));
        };
        if rows.is_empty() {
            put(NONE, None, None, None);
        }
        for r in rows {
            let kind = match r.kind {
                CulpritKind::Query => STAGE,
                CulpritKind::OwnQuery => OWN,
                CulpritKind::Gc => GC,
                CulpritKind::External => EXTERNAL,
                CulpritKind::Unknown => UNKNOWN,
            };
            let by = r.culprit_query.map(|q| ds.queries.name(q));
            put(kind, by, Some(r.seconds), Some(r));
        }
    }
    if let Some(v) = of.keys().next() {
        return Err(Error::Internal(format!(
            "the stored answers: {v} was explained but is not of the group"
        )));
    }
    let rows = arrow::array::ArrayBuilder::len(&culprit);
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(query.finish()) as ArrayRef,
            Arc::new(arrow::array::StringArray::from(vec![""; rows])),
            Arc::new(first.finish()),
            Arc::new(last.finish()),
            Arc::new(culprit.finish()),
            Arc::new(culprit_query.finish()),
            new_null_array(&DataType::Utf8, rows),
            Arc::new(arrow::array::Float64Array::from(vec![0.0; rows])),
            Arc::new(BooleanArray::from(vec![true; rows])),
            Arc::new(seconds.finish()),
            Arc::new(dor.finish()),
            Arc::new(naive.finish()),
            Arc::new(deep.finish()),
        ],
    )
    .map_err(|e| Error::Internal(format!("the stored answers: {e}")))?;
    Ok((batch, victims.len()))
}

/// Adds the rows of the stages of `wanted` of a batch of stored rows to
/// `found`, checking what it holds (a damaged or foreign object fails the
/// lookup, and the analysis computes the shares itself); with none
/// wanted, checks every share row and adds none.
fn add_rows(
    found: &mut Found,
    b: &RecordBatch,
    wanted: Option<&std::collections::HashSet<(String, String)>>,
) -> Result<(), Error> {
    let c = Columns(b);
    let (query, stage) = (c.text("query")?, c.text("stage")?);
    let (culprit_query, culprit_stage) = (c.text("culprit_query")?, c.text("culprit_stage")?);
    let (culprit, share, answer) = (c.kind()?, c.float("share")?, c.answer()?);
    // The spans are only for pruning; checked so that a foreign file fails.
    let _ = (c.int("first")?, c.int("last")?);
    let wrong =
        |i: usize, what: &str| Error::Internal(format!("the stored shares hold {what} at row {i}"));
    let mut key = (String::new(), String::new());
    for i in 0..b.num_rows() {
        if query.is_null(i) || stage.is_null(i) || culprit.is_null(i) || share.is_null(i) {
            return Err(wrong(i, "a null"));
        }
        if answer.is_null(i) {
            return Err(wrong(i, "a null"));
        }
        if answer.value(i) {
            continue; // a stored answer's row, not a share
        }
        key.0.clear();
        key.0.push_str(query.value(i));
        key.1.clear();
        key.1.push_str(stage.value(i));
        if wanted.is_some_and(|w| !w.contains(&key)) {
            continue;
        }
        let x = share.value(i);
        if !(0.0..=1.0 + 1e-9).contains(&x) {
            return Err(wrong(i, &format!("a share of {x}")));
        }
        let entry = found.entry(key.clone()).or_default();
        let named = match culprit.value(i) {
            NONE => continue,
            STAGE if culprit_query.is_null(i) || culprit_stage.is_null(i) => {
                return Err(wrong(i, "a culprit stage without its query or id"))
            }
            STAGE => Named::Stage(
                culprit_query.value(i).to_string(),
                culprit_stage.value(i).to_string(),
            ),
            GC => Named::Gc,
            EXTERNAL => Named::External,
            UNKNOWN => Named::Unknown,
            other => return Err(wrong(i, &format!("an unknown culprit kind {other}"))),
        };
        Arc::make_mut(entry).push((named, x));
    }
    Ok(())
}
