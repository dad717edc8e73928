//! The analysis of named victims reads only what could have slowed them,
//! so its cost follows the question, not the store.
//!
//! What the method needs for a victim `V` (method.md sections 4-5b):
//!
//! - `V`'s tasks, and on each host every window row that overlaps one of
//!   `V`'s (the consumers of its resources), with that host's capacity rows:
//!   all of it lies in `V`'s span `[a, b]` (the earliest ready or launch
//!   time of its tasks, the latest finish), because a window row lies inside
//!   its task's `[ready, finish]` (ingest refuses others);
//! - for its slot waits, the tasks that held slots while `V` waited (any
//!   host of the pool), which also run inside `[a, b]`;
//! - for transitive slot blame (`slots=transitive`, the default; not for
//!   `slots=direct`), the whole own blame of each holder stage: every task
//!   of the holder and everything that overlapped it on its hosts, inside
//!   the span of the holder's query.
//!
//! So the reads are: the query index (spans per query, cached per manifest
//! version), the tasks that overlap `[a, b]`, then (transitive) those that
//! overlap the hull `U` of `[a, b]` and the holders' queries' spans, and
//! the window and host rows that overlap `U`; files and row groups outside
//! are skipped by their recorded spans and statistics
//! (`Store::scan_overlapping`). Of the window rows decoded, only those that
//! overlap an explained task (a victim's or a holder's) on its host are
//! kept, and of the host rows those and the slot pools' capacity (see
//! [`Needs`]): on a wide cluster most of what runs at the victim's time
//! runs on other hosts. The stages and queries tables (one row per stage
//! or query, not per task) are read whole (once per manifest version), and
//! of them only the rows of the queries an answer can name are added (the
//! victims', those with a task read, those whose span overlaps the read:
//! [`of_named_queries`]). Two things lie outside `U` and
//! are looked up: a task beside an explained one with no window row in `U`
//! may have rows elsewhere (a task's rows may leave gaps), and then its
//! totals stand for nothing ([`Engine::windowed_elsewhere`]); and a query's
//! span for the naive overlap is its whole one, from the query index
//! ([`Engine::whole_spans`]).
//! On this dataset the method gives the victims exactly the blame it gives
//! them over the whole store; an unknown victim is refused without reading
//! any task or window row.
//!
//! The reads run on every core, the rows in the order read (the same
//! statement gives the same bits): the store decodes the row groups read
//! on several tasks at once, and each task goes on with its rows
//! (`Store::scan_overlapping_then`): tasks are cut to the span and their
//! totals made ([`TaskRows`]: one thread adds the tasks, and making and
//! writing 96 bytes of totals a task was a fifth of its time), window
//! rows of hosts with no explained task are dropped by their stored host
//! key ([`windows_of_hosts`]), the others checked, matched to their tasks
//! and cut to those beside an explained task
//! ([`culprit_core::method::TaskResolver`], a copy of the dataset's task
//! ids and their hosts: finding a row's task was most of what adding a
//! row cost the thread that adds them, whether most rows are kept, as by
//! default, or not, as with `slots=direct`), while the dataset adds those
//! before, on whichever core is free.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::TimestampMicrosecondType;
use culprit_core::method::transitive::{HolderShares, KeepShares};
use culprit_core::method::{
    Attribution, BlameOptions, Dataset, Micros, ResolvedWindows, SlotBlame, TaskRows,
};
use culprit_core::{Resource, Table};
use culprit_store::Manifest;
use culprit_store::{QuerySpan, Then};
use futures::TryStreamExt;

use crate::budget::{
    Reservation, CACHE_BYTES_PER_HOST_ROW, CACHE_BYTES_PER_TASK, CACHE_BYTES_PER_WINDOW_ROW,
    LIGHT_BYTES_PER_WINDOW_ROW,
};
use crate::engine::{Engine, Snapshot};
use crate::error::Error;

/// The named victims of an analysis, and whether it needs their slot
/// holders' own blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Focus {
    pub victims: Vec<String>,
    /// The analysis passes slot waits on to what slowed the stages that
    /// held the slots (`slots=transitive`, method.md section 5b): it then
    /// needs each holder stage's own blame, so what overlapped the holders
    /// is read too, not only what overlapped the victims, unless the
    /// engine kept the holder's shares from an earlier analysis of the
    /// same `window` and `attribution` (`shares.rs`).
    pub holders: bool,
    /// The analysis window.
    pub window: (Micros, Micros),
    pub attribution: Attribution,
}

impl Focus {
    /// The focus of an analysis with `opts`, if it names its victims.
    pub fn of(opts: &BlameOptions) -> Option<Focus> {
        opts.victims.clone().map(|victims| Focus {
            victims,
            // With the paper's attribution a slot wait is `unknown`: no
            // holder is blamed, none needs its own blame.
            holders: opts.slots == SlotBlame::Transitive && opts.attribution != Attribution::Paper,
            window: culprit_core::method::window(opts),
            attribution: opts.attribution,
        })
    }
}

/// What a focused read may use that was kept before.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    /// The engine's read cache, if it has one (a server's engine).
    pub cached: bool,
    /// The holders' shares stored with the data, when the focus is of
    /// their window and attribution (`stored_shares.rs`).
    pub stored: bool,
}

impl Kept {
    pub const ALL: Kept = Kept {
        cached: true,
        stored: true,
    };
    pub const NONE: Kept = Kept {
        cached: false,
        stored: false,
    };
}

/// Victims' tasks per group of an analysis over every victim of a large
/// store ([`Engine::victim_groups`]): its memory follows this, not the store.
pub const GROUP_TASKS: u64 = 1 << 16;

/// How a read names its victims (in the log and in a refusal).
fn named(victims: &[String]) -> String {
    if victims.len() <= 4 {
        victims.join(", ")
    } else {
        format!(
            "{} queries ({} ...)",
            victims.len(),
            victims[..4].join(", ")
        )
    }
}

/// The victims' span in the query index: the earliest ready or launch time
/// of their tasks, the latest finish; `None` if no victim has tasks.
pub(crate) fn victims_span(spans: &Spans, victims: &[String]) -> Option<(i64, i64)> {
    victims
        .iter()
        .filter_map(|v| spans.get(v))
        .fold(None, |acc, s| {
            let (a, b) = (s.first, s.last);
            Some(acc.map_or((a, b), |(x, y): (i64, i64)| (x.min(a), y.max(b))))
        })
}

/// The queries whose span overlaps `window`, in the order of their start,
/// in groups each closed once it has `tasks` tasks.
pub(crate) fn groups_by_start(spans: &Spans, window: (i64, i64), tasks: u64) -> Vec<Vec<String>> {
    let mut queries: Vec<(&String, i64, u64)> = spans
        .iter()
        .filter(|(_, s)| span_overlaps(s, window))
        .map(|(q, s)| (q, s.first, s.tasks))
        .collect();
    queries.sort_by(|x, y| (x.1, x.0).cmp(&(y.1, y.0)));
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut size = 0u64;
    for (q, _, n) in queries {
        if groups.is_empty() || size >= tasks {
            groups.push(Vec::new());
            size = 0;
        }
        size += n;
        if let Some(g) = groups.last_mut() {
            g.push(q.clone());
        }
    }
    groups
}

/// Whether a query's span (the query index's) overlaps `[a, b]`.
fn span_overlaps(s: &QuerySpan, (a, b): (i64, i64)) -> bool {
    s.first <= b && a <= s.last
}

/// The tasks that ran in `(a, b)`, estimated from the query index: each
/// query overlapping it by the share of its span that overlaps, its tasks
/// spread evenly.
fn tasks_in(spans: &Spans, (a, b): (i64, i64)) -> f64 {
    spans
        .values()
        .filter(|s| span_overlaps(s, (a, b)))
        .map(|s| {
            let (x, y, n) = (s.first, s.last, s.tasks);
            let overlap = (y.min(b) - x.max(a)).max(0) as f64 + 1.0;
            n as f64 * (overlap / ((y - x).max(0) as f64 + 1.0)).min(1.0)
        })
        .sum()
}

/// The store's window rows per task.
fn rows_per_task(manifest: &Manifest) -> f64 {
    manifest.rows_of(Table::TaskWindows) as f64 / manifest.rows_of(Table::Tasks).max(1) as f64
}

/// The memory of a read for `victims` and of an analysis over it,
/// estimated from the query index before it reads: the tasks that ran in
/// the victims' span ([`tasks_in`]), with the store's window rows per
/// task. What the read holds past it is counted as it reads.
pub(crate) fn read_estimate(manifest: &Manifest, spans: &Spans, span: Option<(i64, i64)>) -> usize {
    let Some(span) = span else {
        return 0; // no victim has tasks: refused without reading
    };
    let tasks = tasks_in(spans, span);
    estimate_bytes((tasks * rows_per_task(manifest)) as usize, tasks as usize)
}

/// The memory of a read widened to `u` for the slot holders' queries
/// `explained` (with the victims), estimated as [`read_estimate`]: every
/// task that ran in `u` is read, but of the window rows only those beside
/// an explained task are kept, about as many again as the explained
/// queries' own (as [`VictimGroups::window_rows`] counts a group's).
fn widened_estimate(
    manifest: &Manifest,
    spans: &Spans,
    u: (i64, i64),
    explained: &[&str],
) -> usize {
    let tasks = tasks_in(spans, u);
    let own: u64 = explained
        .iter()
        .filter_map(|q| spans.get(*q))
        .map(|s| s.tasks)
        .sum();
    estimate_bytes(
        (2.0 * own as f64 * rows_per_task(manifest)) as usize,
        tasks as usize,
    )
}

/// The bytes of `rows` window rows and `tasks` tasks read for named
/// victims, with the working memory of their analysis (as [`read_bytes`]
/// counts them once read).
fn estimate_bytes(rows: usize, tasks: usize) -> usize {
    rows.saturating_mul(CACHE_BYTES_PER_WINDOW_ROW + LIGHT_BYTES_PER_WINDOW_ROW)
        .saturating_add(tasks.saturating_mul(CACHE_BYTES_PER_TASK))
}

/// Counts the dataset read so far in `held`, grown past its estimate if
/// need be (the read was admitted with the estimate).
fn count(held: &mut Option<&mut Reservation>, ds: &Dataset) {
    grow_to(held, read_bytes(ds));
}

/// Grows `held` to `bytes` if it holds less.
fn grow_to(held: &mut Option<&mut Reservation>, bytes: usize) {
    if let Some(held) = held.as_deref_mut() {
        if bytes > held.size() {
            held.grow(bytes - held.size());
        }
    }
}

/// The memory of `ds` while a read for named victims holds it, and of an
/// analysis over it: its tasks, window rows and host rows at the dataset
/// cache's bytes per row, and the working memory per window row of an
/// analysis of one victim.
pub(crate) fn read_bytes(ds: &Dataset) -> usize {
    let windows: usize = ds.windows.iter().map(|w| w.len()).sum();
    let hosts: usize = ds.host_rows.iter().map(|h| h.len()).sum();
    ds.tasks
        .len()
        .saturating_mul(CACHE_BYTES_PER_TASK)
        .saturating_add(window_bytes(windows))
        .saturating_add(hosts.saturating_mul(CACHE_BYTES_PER_HOST_ROW))
}

/// What `rows` window rows count in [`read_bytes`].
fn window_bytes(rows: usize) -> usize {
    rows.saturating_mul(CACHE_BYTES_PER_WINDOW_ROW + LIGHT_BYTES_PER_WINDOW_ROW)
}

/// Per query: the earliest ready or launch time of its tasks, the latest
/// finish, how many tasks, and their earliest launch.
pub(crate) type Spans = HashMap<String, QuerySpan>;

/// The `stages` and `queries` rows of a manifest version (one row per
/// stage or query, not per task).
#[derive(Debug)]
pub(crate) struct WholeTables {
    stages: Vec<RecordBatch>,
    queries: Vec<RecordBatch>,
}

/// The victims of an analysis over every query, in groups read one at a
/// time ([`Engine::victim_groups`]).
#[derive(Debug, Clone)]
pub struct VictimGroups {
    manifest: Arc<Manifest>,
    spans: Arc<Spans>,
    /// Stages and queries, read once for every group.
    whole: Arc<WholeTables>,
    /// The queries of each group, in the order of their start.
    pub groups: Vec<Vec<String>>,
    window_rows_per_task: f64,
}

impl VictimGroups {
    /// Window rows of a group's dataset, about: its victims' tasks and as
    /// many again for the queries around them.
    pub fn window_rows(&self, i: usize) -> usize {
        let tasks: u64 = self.groups[i]
            .iter()
            .filter_map(|q| self.spans.get(q))
            .map(|s| s.tasks)
            .sum();
        (2.0 * tasks as f64 * self.window_rows_per_task) as usize
    }

    /// The working memory of the largest group's analysis: its window rows
    /// in memory and the sweep's own.
    pub fn working_estimate(&self) -> usize {
        let per_row =
            crate::budget::HEAVY_BYTES_PER_WINDOW_ROW + crate::budget::CACHE_BYTES_PER_WINDOW_ROW;
        (0..self.groups.len())
            .map(|i| self.window_rows(i).saturating_mul(per_row))
            .max()
            .unwrap_or(0)
    }
}

impl Engine {
    /// A snapshot that holds only what the analysis of `victims` needs (see
    /// the module doc), or `None` when the store cannot say (no complete
    /// query index: a store written before it; then use
    /// [`Engine::snapshot`]).
    pub async fn focused(&self, focus: &Focus) -> Result<Option<Snapshot>, Error> {
        let manifest = self.store().manifest().await?;
        self.focused_at_version(manifest, focus).await
    }

    /// [`Engine::focused`] at the store's version `manifest` (read once by
    /// a call that looked for a stored answer first).
    pub async fn focused_at_version(
        &self,
        manifest: Arc<Manifest>,
        focus: &Focus,
    ) -> Result<Option<Snapshot>, Error> {
        let Some(spans) = self.spans(&manifest).await? else {
            log::info!(
                "store version {}: no complete query index, reading the whole store",
                manifest.version
            );
            return Ok(None);
        };
        let whole = self.whole_tables(&manifest).await?;
        // The read is admitted in the memory budget like an analysis of
        // one victim, with the analysis's working memory, from an estimate
        // from the query index; what it reads is counted as it reads (past
        // the estimate if need be), until the analysis and its result are
        // done (`Snapshot::admitted`).
        let estimate = read_estimate(&manifest, &spans, victims_span(&spans, &focus.victims));
        let what = format!("the read for {}", named(&focus.victims));
        let mut held = self
            .budget()
            .admit(&what, estimate, false)
            .await?
            .reservation;
        let (snapshot, swept) = self
            .focused_at(
                manifest.clone(),
                &spans,
                &whole,
                focus,
                Kept::ALL,
                Some(&mut held),
            )
            .await?;
        // Nothing to keep for later calls (one process, whose shares came
        // from the store): the one read is the answer's.
        if !swept || snapshot.ds.shares.as_ref().is_none_or(|s| s.keep.is_none()) {
            return Ok(Some(snapshot.holding(held)));
        }
        // A server's engine: the holders not kept yet are explained now
        // and their shares kept, then the victims are read and explained
        // as every later call will (every holder kept), so that the same
        // statement gives the same numbers to the last digit (its sums are
        // over the same rows in the same order). The second read comes
        // from the read cache.
        let mut held = self.keep_holder_shares(&snapshot, held).await?;
        drop(snapshot);
        let (snapshot, _) = self
            .focused_at(manifest, &spans, &whole, focus, Kept::ALL, Some(&mut held))
            .await?;
        Ok(Some(snapshot.holding(held)))
    }

    /// Explains the stages whose whole neighbourhood `snapshot` holds (the
    /// victims' and the holders' not kept: `HolderShares::whole`) for the
    /// shares it keeps (`shares.rs`): every holder found, so that the next
    /// call finds none to sweep. The sweep holds `held`, what the read
    /// counted in the budget, to its end, and gives it back: a statement
    /// cancelled meanwhile leaves the sweep to finish on its thread, its
    /// memory still counted until then.
    async fn keep_holder_shares(
        &self,
        snapshot: &Snapshot,
        held: Reservation,
    ) -> Result<Reservation, Error> {
        let ds = snapshot.ds.clone();
        let (kept, held) = crate::budget::run_held(held, move || {
            if let Some(shares) = ds.shares.as_deref() {
                culprit_core::method::keep_shares(
                    &ds,
                    &shares.whole,
                    shares.window,
                    shares.attribution,
                )?;
            }
            Ok::<(), Error>(())
        })
        .await
        .map_err(|e| Error::Internal(format!("explaining the slot holders: {e}")))?;
        kept.map(|()| held)
    }

    /// The groups in which an analysis over every query that ran in
    /// `window` explains a large store in bounded memory, or `None` when
    /// the whole store is better read at once: its window rows fit the
    /// dataset cache ([`Engine::snapshot`] holds them), or it has no
    /// complete query index.
    ///
    /// The queries whose span overlaps the window (a superset of those
    /// that ran in it: the method keeps the ones that did, with
    /// `BlameOptions::within`) are taken in the order of their start, a
    /// group closed once it has `tasks` tasks; each group is then read as
    /// [`Engine::focused`] reads named victims ([`Engine::group`]), all at
    /// the manifest version of this call.
    pub async fn victim_groups(
        &self,
        window: (i64, i64),
        tasks: u64,
    ) -> Result<Option<VictimGroups>, Error> {
        let manifest = self.store().manifest().await?;
        // A cluster's workers (two or more up) sweep the whole store's
        // host buckets instead (`shards.rs`): one pass over the window
        // rows, split among them.
        if manifest.rows_of(Table::TaskWindows) <= self.window_cache_rows() || self.sweeping() {
            return Ok(None);
        }
        let Some(spans) = self.spans(&manifest).await? else {
            return Ok(None);
        };
        let groups = groups_by_start(&spans, window, tasks);
        let per_task = rows_per_task(&manifest);
        let whole = self.whole_tables(&manifest).await?;
        Ok(Some(VictimGroups {
            whole,
            manifest,
            spans,
            groups,
            window_rows_per_task: per_task,
        }))
    }

    /// The dataset of group `i` of `groups`: what the analysis of its
    /// queries needs, read at the groups' manifest version. Every holder
    /// is read and swept (no stored shares: the group's analysis may be of
    /// another window or attribution than theirs, which this does not
    /// know).
    pub async fn group(&self, groups: &VictimGroups, i: usize) -> Result<Snapshot, Error> {
        self.focused_at(
            groups.manifest.clone(),
            &groups.spans,
            &groups.whole,
            &Focus {
                victims: groups.groups[i].clone(),
                holders: true,
                window: (Micros::MIN, Micros::MAX),
                attribution: Attribution::Window,
            },
            Kept::NONE,
            None,
        )
        .await
        .map(|(snapshot, _)| snapshot)
    }

    /// The tables of one row per stage or query, which every focused
    /// dataset holds whole; read once per manifest version.
    pub(crate) async fn whole_tables(
        &self,
        manifest: &Manifest,
    ) -> Result<Arc<WholeTables>, Error> {
        let mut cache = self.whole.lock().await;
        if let Some((v, whole)) = cache.as_ref() {
            if *v == manifest.version {
                return Ok(whole.clone());
            }
        }
        let store = self.store();
        let stages = store.scan_table(manifest, Table::Stages, None);
        let queries = store.scan_table(
            manifest,
            Table::Queries,
            Some(&["query_id", "app_id", "pool"]),
        );
        let whole = Arc::new(WholeTables {
            stages: stages.try_collect().await?,
            queries: queries.try_collect().await?,
        });
        *cache = Some((manifest.version, whole.clone()));
        Ok(whole)
    }

    /// The dataset of `focus` at `manifest`, using what is `kept`; with
    /// whether holders were swept whose shares were not kept.
    pub(crate) async fn focused_at(
        &self,
        manifest: Arc<Manifest>,
        spans: &Spans,
        whole: &WholeTables,
        focus: &Focus,
        kept: Kept,
        mut held: Option<&mut Reservation>,
    ) -> Result<(Snapshot, bool), Error> {
        let Kept { cached, stored } = kept;
        let started = std::time::Instant::now();
        let store = self.store();
        let victims = &focus.victims;
        let mut ds = Dataset::new();
        // The victims' span; none if no victim has tasks (unknown ones are
        // refused by the analysis, from the queries table read below).
        let hull = victims_span(spans, victims);
        let mut region = None;
        let mut victim = Vec::new();
        let mut holders = Vec::new();
        let mut known = Vec::new();
        // Holders' shares are kept and used by a server's engine (one with
        // a read cache), for named victims.
        let keeps = cached && self.read_cache().is_some();
        if let Some((a, b)) = hull {
            let tasks = self.tasks_overlapping(&manifest, (a, b), None, cached);
            let expected = tasks_in(spans, (a, b));
            add_tasks(&mut ds, tasks, expected, &mut held).await?;
            // Every victim task overlaps `[a, b]`: their stages are known.
            victim = of_victims(&ds, victims);
            let mut u = (a, b);
            if focus.holders {
                // The slot holders: stages with a task running while a
                // victim task waited; their whole own blame is needed, and
                // their tasks run inside their queries' spans. Not of
                // those whose shares the engine kept (named victims only).
                // Nor of those whose shares the store keeps for the
                // default analysis (`stored_shares.rs`).
                holders = slot_holders(&ds, &victim);
                let stored = if stored
                    && holders.iter().any(|&s| !victim[s as usize])
                    && focus.window == crate::stored_shares::WINDOW
                    && focus.attribution == crate::stored_shares::ATTRIBUTION
                {
                    let wanted = holders
                        .iter()
                        .filter(|&&s| !victim[s as usize])
                        .map(|&s| {
                            (
                                ds.stage_query_name(s).to_string(),
                                ds.stage_name(s).to_string(),
                            )
                        })
                        .collect();
                    self.stored_shares(&manifest, (a, b), cached, &wanted).await
                } else {
                    None
                };
                if keeps || stored.is_some() {
                    holders.retain(|&s| {
                        let (q, st) = (ds.stage_query_name(s), ds.stage_name(s));
                        let from_store = || {
                            let f = stored.as_ref()?;
                            f.get(&(q.to_string(), st.to_string())).cloned()
                        };
                        let kept = if victim[s as usize] {
                            None
                        } else if let Some(shares) = from_store() {
                            Some(shares)
                        } else if keeps {
                            self.shares.get(
                                manifest.version,
                                q,
                                st,
                                focus.window,
                                focus.attribution,
                            )
                        } else {
                            None
                        };
                        match kept {
                            Some(shares) => {
                                known.push((s, shares));
                                false
                            }
                            None => true,
                        }
                    });
                }
                for &s in &holders {
                    let q = ds.queries.name(ds.stage_query(s));
                    if let Some(s) = spans.get(q) {
                        u = (u.0.min(s.first), u.1.max(s.last));
                    }
                }
            }
            if u != (a, b) {
                // The holders' time is read too: the read's estimate again,
                // of all of it, waited for as the admission waited.
                if let Some(held) = held.as_deref_mut() {
                    let what = format!("the read for {}", named(victims));
                    let mut explained: Vec<&str> = victims.iter().map(|v| v.as_str()).collect();
                    explained.extend(holders.iter().map(|&s| ds.stage_query_name(s)));
                    explained.sort_unstable();
                    explained.dedup();
                    let estimate = widened_estimate(&manifest, spans, u, &explained);
                    held.grow_to(&what, estimate).await?;
                }
                let more = self.tasks_overlapping(&manifest, u, Some((a, b)), cached);
                let expected = tasks_in(spans, u) - tasks_in(spans, (a, b));
                add_tasks(&mut ds, more, expected, &mut held).await?;
            }
            region = Some(u);
        }
        // The stages explained whole: the victims' and the holders' not
        // kept.
        let mut explained = victim.clone();
        for &s in &holders {
            explained[s as usize] = true;
        }
        let needs = Arc::new(Needs::of(&ds, &explained));
        // Of the stages and queries tables (read whole, cached), the rows
        // of the queries an answer can name: the victims', those with a
        // task read, and those whose span overlaps the read (the naive
        // overlap names them, `whole_spans`). Adding every stage and query
        // of the store cost each analysis its names' interning (10,000
        // stages at 1e7 tasks against 1,000 at 1e6).
        let victim_names: std::collections::HashSet<&str> =
            victims.iter().map(String::as_str).collect();
        let can_name = |q: &str| {
            ds.queries.get(q).is_some()
                || victim_names.contains(q)
                || region.is_some_and(|r| spans.get(q).is_some_and(|s| span_overlaps(s, r)))
        };
        let stages = of_named_queries(&whole.stages, &can_name)?;
        let queries = of_named_queries(&whole.queries, &can_name)?;
        for b in &stages {
            ds.add_stages(b);
        }
        for b in &queries {
            ds.add_queries(b);
        }
        if focus.holders && (keeps || !known.is_empty()) {
            // The kept (or stored) shares in this dataset's numbers, the
            // stages whose whole neighbourhood the dataset holds (the only
            // ones whose shares it can compute), and where the analysis
            // gives those (a server's engine keeps them).
            let known = known
                .iter()
                .map(|(s, shares)| (*s, crate::shares::resolve(&mut ds, shares)))
                .collect();
            // A mask of every stage (the sweeps index it by stage).
            explained.resize(ds.stages.len(), false);
            let (cache, version, window, attribution) = (
                self.shares.clone(),
                manifest.version,
                focus.window,
                focus.attribution,
            );
            let keep: Arc<KeepShares> = Arc::new(move |ds: &Dataset, s: u32, shares: &_| {
                cache.put(version, ds, s, window, attribution, shares)
            });
            ds.shares = Some(Arc::new(HolderShares {
                window,
                attribution,
                known,
                whole: explained,
                keep: keeps.then_some(keep),
            }));
        }
        let mut read = 0usize;
        let tasks_read = started.elapsed();
        let mut windows_read = tasks_read;
        if let Some((from, to)) = region {
            // Window rows: decoded, those of hosts with no explained task
            // dropped by their host key, the others checked, matched to
            // their tasks, cut to those beside an explained task and made
            // the dataset's rows by the store's tasks, several row groups
            // at once (finding a row's task is most of what adding it cost
            // one thread, which then kept the second core half idle);
            // pushed to their groups here, in the order read. The
            // resolver's copy of the task ids is counted beside the
            // dataset while it lives, then given back.
            let files: Vec<_> = manifest.files_of(Table::TaskWindows).cloned().collect();
            if !files.is_empty() {
                let before = held.as_deref().map(|h| h.size());
                let resolver = ds.task_resolver();
                let apart = resolver.bytes();
                // What the dataset held before, and the rows added since:
                // counting the whole dataset again for every batch walked
                // every group of every host (30,000 on 5,000 hosts).
                let (base, mut added) = (read_bytes(&ds).saturating_add(apart), 0usize);
                grow_to(&mut held, base);
                let needs_apart = needs.clone();
                // By host key only where every task read has one host: a
                // task stored again on another host (the first read
                // stands) may have rows written with the other's key.
                let keys = (ds.host_conflicts == 0).then(|| needs.host_keys(&ds));
                let then: Then<Result<Option<(usize, ResolvedWindows)>, Error>> =
                    Arc::new(move |b| {
                        let Some((rows, b)) = windows_of_hosts(&b, (from, to), keys.as_ref())?
                        else {
                            return Ok(None);
                        };
                        let resolved = resolver
                            .resolve(&b, &|host, r, s, e| needs_apart.overlaps(host, r, s, e));
                        Ok(Some((rows, resolved)))
                    });
                let mut resolved = self.scan_then(files, (from, to), cached, then);
                while let Some(r) = resolved.try_next().await? {
                    let Some((rows, r)) = r? else { continue };
                    read += rows;
                    added += r.len();
                    ds.add_resolved(r)?;
                    grow_to(&mut held, base.saturating_add(window_bytes(added)));
                }
                // The resolver is gone with the stream: what the dataset
                // holds is counted, or what was held before, whichever is
                // more.
                drop(resolved);
                if let (Some(held), Some(before)) = (held.as_deref_mut(), before) {
                    let want = before.max(read_bytes(&ds));
                    if held.size() > want {
                        held.shrink(held.size() - want);
                    }
                }
            }
            windows_read = started.elapsed();
            let files = manifest.files_of(Table::HostWindows).cloned().collect();
            let mut rows = self.scan(files, (from, to), cached);
            while let Some(b) = rows.try_next().await? {
                let Some(b) = keep(&b, "window_start", None, "window_end", (from, to), None)?
                else {
                    continue;
                };
                if let Some(b) = needs.host_rows(&ds, &b)? {
                    ds.add_host_windows(&b)
                }
                count(&mut held, &ds);
            }
        }
        let hosts_read = started.elapsed();
        if let Some(region) = region {
            self.windowed_elsewhere(&manifest, &mut ds, &needs, region, cached)
                .await?;
            self.whole_spans(&manifest, spans, &mut ds, region).await?;
        }
        let kept: usize = ds.windows.iter().map(|g| g.len()).sum();
        let named = named(victims);
        log::info!(
            "store version {}: read for {named} in {:.3} s ({} tasks, {} window rows of {} in \
             its time, {} slot holder stages to sweep, {} kept from earlier analyses; tasks and \
             holders {:.1} ms, window rows {:.1} ms, host rows {:.1} ms, the rest {:.1} ms)",
            manifest.version,
            started.elapsed().as_secs_f64(),
            ds.tasks.len(),
            kept,
            read,
            holders.len(),
            ds.shares.as_ref().map_or(0, |s| s.known.len()),
            ms(tasks_read),
            ms(windows_read - tasks_read),
            ms(hosts_read - windows_read),
            ms(started.elapsed() - hosts_read),
        );
        let swept = holders.iter().any(|&s| !victim[s as usize]);
        let snapshot = Snapshot {
            ds: Arc::new(ds),
            buckets: None,
            source: Arc::new((store.clone(), manifest)),
            sweeper: None,
            held: None,
        };
        Ok((snapshot, swept))
    }

    /// Marks the tasks of `ds` that have window rows outside `region` (read
    /// already) and none in it, where their totals would otherwise be
    /// spread over their run (method.md section 2) beside an explained
    /// task: a task's rows may leave gaps (interchange), and a whole read
    /// knows the task has rows. Reads only the time of those tasks outside
    /// `region`, in their hosts' buckets, until each is found: nothing in
    /// the usual store, where a task's rows cover its run; tasks known
    /// only by their totals (Spark event logs) in a store that also has
    /// window rows are looked for in their own time on every such read.
    async fn windowed_elsewhere(
        &self,
        manifest: &Manifest,
        ds: &mut Dataset,
        needs: &Needs,
        (from, to): (i64, i64),
        cached: bool,
    ) -> Result<(), Error> {
        if manifest.rows_of(Table::TaskWindows) == 0 {
            return Ok(());
        }
        // Per host bucket: the tasks to look for and the times outside
        // `region` where their rows may lie (a slot wait's rows lie in
        // `[ready, launch)`).
        #[derive(Default)]
        struct Wanted {
            tasks: Vec<usize>,
            pieces: Vec<(i64, i64)>,
        }
        let mut wanted: BTreeMap<u32, Wanted> = BTreeMap::new();
        for (i, t) in ds.tasks.iter().enumerate() {
            // Its totals would stand for rows from launch to finish
            // (`Dataset::synthesize`, none of `slots`): only where those
            // overlap an explained task's run do they change an answer. A
            // task waiting for a slot beside one, launched after it, is not
            // looked up, nor one that ran beside an explained task's wait.
            let first = t.ready.map_or(t.launch, |r| r.min(t.launch));
            if t.has_windows
                || (first >= from && t.finish <= to)
                || !needs.overlaps_run(t.host, t.launch, t.finish)
            {
                continue;
            }
            let bucket = culprit_store::layout::host_bucket(ds.hosts.name(t.host));
            let w = wanted.entry(bucket).or_default();
            w.tasks.push(i);
            if first < from {
                w.pieces.push((first, from));
            }
            if t.finish > to {
                w.pieces.push((to, t.finish));
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        log::info!(
            "{} tasks beside the explained ones have no window row in the read: looking for \
             their rows outside it in {} host buckets",
            wanted.values().map(|w| w.tasks.len()).sum::<usize>(),
            wanted.len()
        );
        // First the files of rows whose bucket was not known when they
        // were written (older stores), once for every bucket's tasks; then
        // each bucket's own files for the tasks not found yet.
        let unbucketed: Vec<_> = manifest
            .files_of(Table::TaskWindows)
            .filter(|f| f.bucket.is_none())
            .cloned()
            .collect();
        if !unbucketed.is_empty() {
            let mut all: Vec<usize> = wanted.values().flat_map(|w| w.tasks.clone()).collect();
            let mut pieces: Vec<(i64, i64)> =
                wanted.values().flat_map(|w| w.pieces.clone()).collect();
            self.mark_in(ds, &unbucketed, &mut pieces, &mut all, cached)
                .await?;
        }
        for (bucket, mut w) in wanted {
            w.tasks.retain(|&t| !ds.tasks[t].has_windows);
            if w.tasks.is_empty() {
                continue;
            }
            let files: Vec<_> = manifest
                .files_of(Table::TaskWindows)
                .filter(|f| f.bucket == Some(bucket))
                .cloned()
                .collect();
            self.mark_in(ds, &files, &mut w.pieces, &mut w.tasks, cached)
                .await?;
        }
        Ok(())
    }

    /// Marks the tasks with rows in `files` in the times `pieces`
    /// ([`Dataset::mark_windowed`]), stopping once every task of `tasks`
    /// is marked.
    async fn mark_in(
        &self,
        ds: &mut Dataset,
        files: &[culprit_store::DataFile],
        pieces: &mut [(i64, i64)],
        tasks: &mut Vec<usize>,
        cached: bool,
    ) -> Result<(), Error> {
        if files.is_empty() {
            return Ok(());
        }
        for piece in merged(pieces) {
            let mut rows = self.scan(files.to_vec(), piece, cached);
            while let Some(b) = rows.try_next().await? {
                if ds.mark_windowed(&b) > 0 {
                    tasks.retain(|&t| !ds.tasks[t].has_windows);
                    if tasks.is_empty() {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// Gives `ds` the whole span (first launch, last finish) of every
    /// query whose span overlaps `region` ([`Dataset::query_spans`]): its
    /// tasks read are only those in `region` and its slot holders', so
    /// the span of its tasks in `ds` may start later or end earlier (a
    /// query with a gap in its run). From the query index; where it does
    /// not know a query's first launch (files written before it was
    /// recorded) and the query may have started before `region`, from its
    /// tasks before `region`.
    async fn whole_spans(
        &self,
        manifest: &Manifest,
        spans: &Spans,
        ds: &mut Dataset,
        (from, to): (i64, i64),
    ) -> Result<(), Error> {
        let mut read_first: Vec<Option<i64>> = vec![None; ds.queries.len()];
        for t in &ds.tasks {
            let q = &mut read_first[ds.stage_query(t.stage) as usize];
            *q = Some(q.map_or(t.launch, |l| l.min(t.launch)));
        }
        // Queries to look for before `region`: their first launch so far
        // and their last finish.
        let mut before: HashMap<u32, (i64, i64)> = HashMap::new();
        let mut lo = i64::MAX;
        for (name, s) in spans.iter() {
            if !span_overlaps(s, (from, to)) {
                continue;
            }
            let Some(q) = ds.queries.get(name) else {
                continue;
            };
            let read = read_first.get(q as usize).copied().flatten();
            let first = match s.first_launch {
                Some(l) => l,
                // Every task of the query that started by `to` was read.
                None if s.first >= from => match read {
                    Some(l) => l,
                    None => continue,
                },
                None => {
                    before.insert(q, (read.unwrap_or(i64::MAX), s.last));
                    lo = lo.min(s.first);
                    continue;
                }
            };
            ds.query_spans.insert(q, (first, s.last));
        }
        if before.is_empty() {
            return Ok(());
        }
        // Only the columns needed, folded as they stream (uncounted in
        // the budget: the few row groups the store decodes ahead at a
        // time), not through the read cache.
        let files = manifest.files_of(Table::Tasks).cloned().collect();
        let columns = ["query_id", "launch_time", "finish_time"];
        let mut rows = self
            .store()
            .scan_overlapping(files, Some(&columns), lo, from);
        while let Some(b) = rows.try_next().await? {
            let (Some(ids), Some(launch)) = (
                b.column_by_name("query_id")
                    .and_then(|c| c.as_string_opt::<i32>()),
                time(&b, "launch_time"),
            ) else {
                continue;
            };
            for i in 0..b.num_rows() {
                if ids.is_null(i) || launch.is_null(i) {
                    continue;
                }
                if let Some(e) = ds
                    .queries
                    .get(ids.value(i))
                    .and_then(|q| before.get_mut(&q))
                {
                    e.0 = e.0.min(launch.value(i));
                }
            }
        }
        for (q, (first, last)) in before {
            if first != i64::MAX {
                ds.query_spans.insert(q, (first, last));
            }
        }
        Ok(())
    }

    /// The rows of `files` in row groups that may overlap `span`: through
    /// the read cache when `cached` and the engine has one (the reads of
    /// named victims; those over every victim would only push everything
    /// out of it). The store decodes the row groups on tasks of their own,
    /// several at once, ahead of whoever polls the rows.
    pub(crate) fn scan(
        &self,
        files: Vec<culprit_store::DataFile>,
        span: (i64, i64),
        cached: bool,
    ) -> futures::stream::BoxStream<'static, culprit_store::Result<RecordBatch>> {
        self.scan_then(files, span, cached, Arc::new(|b| b))
    }

    /// [`Engine::scan`], each batch handed to `then` on the task that
    /// decoded it (every core), ahead of whoever polls the results.
    pub(crate) fn scan_then<T: Send + 'static>(
        &self,
        files: Vec<culprit_store::DataFile>,
        span: (i64, i64),
        cached: bool,
        then: Then<T>,
    ) -> futures::stream::BoxStream<'static, culprit_store::Result<T>> {
        let cache = self.read_cache().filter(|_| cached).cloned();
        self.store()
            .scan_overlapping_then(files, None, span.0, span.1, cache, then)
    }

    /// The query index of `manifest`, read once per version.
    pub(crate) async fn spans(&self, manifest: &Manifest) -> Result<Option<Arc<Spans>>, Error> {
        let mut cache = self.spans.lock().await;
        if let Some((v, spans)) = cache.as_ref() {
            if *v == manifest.version {
                return Ok(spans.clone());
            }
        }
        let spans = self.store().query_spans(manifest).await?.map(Arc::new);
        *cache = Some((manifest.version, spans.clone()));
        Ok(spans)
    }

    /// The `tasks` rows whose `[ready or launch, finish]` overlaps `span`,
    /// but not `except` (rows already read): cut ahead, on the tasks that
    /// decode them, while the caller adds those before.
    fn tasks_overlapping(
        &self,
        manifest: &Manifest,
        span: (i64, i64),
        except: Option<(i64, i64)>,
        cached: bool,
    ) -> futures::stream::BoxStream<'static, Result<TaskRows, Error>> {
        use futures::StreamExt;
        let files = manifest.files_of(Table::Tasks).cloned().collect();
        let cut: Then<Result<Option<TaskRows>, Error>> = Arc::new(move |b| {
            let kept = keep(
                &b,
                "launch_time",
                Some("ready_time"),
                "finish_time",
                span,
                except,
            )?;
            Ok(kept.map(TaskRows::of))
        });
        self.scan_then(files, span, cached, cut)
            .filter_map(|kept| {
                futures::future::ready(kept.map_err(Error::from).and_then(|k| k).transpose())
            })
            .boxed()
    }
}

/// The rows of `b` whose span (the earlier of `start` and `start2`, to
/// `end`) overlaps `span` and not `except`; `None` if no row does.
fn keep(
    b: &RecordBatch,
    start: &str,
    start2: Option<&str>,
    end: &str,
    span: (i64, i64),
    except: Option<(i64, i64)>,
) -> Result<Option<RecordBatch>, Error> {
    let (Some(s), Some(e)) = (time(b, start), time(b, end)) else {
        // Not a time table's rows: keep them all (the method skips what it
        // cannot use, as on a full read).
        return Ok(Some(b.clone()));
    };
    let s2 = start2.and_then(|c| time(b, c));
    let overlaps = |(from, to): (i64, i64), i: usize| -> bool {
        if s.is_null(i) || e.is_null(i) {
            return false;
        }
        let mut first = s.value(i);
        if let Some(r) = s2.filter(|r| r.is_valid(i)) {
            first = first.min(r.value(i));
        }
        first <= to && from <= e.value(i)
    };
    let mask: BooleanArray = (0..b.num_rows())
        .map(|i| Some(overlaps(span, i) && !except.is_some_and(|x| overlaps(x, i))))
        .collect();
    filtered(b, &mask, "rows by time")
}

/// The rows of stages or queries batches whose query is `named` (rows
/// without a query too: the dataset skips them as before).
fn of_named_queries(
    batches: &[RecordBatch],
    named: &dyn Fn(&str) -> bool,
) -> Result<Vec<RecordBatch>, Error> {
    let mut out = Vec::new();
    for b in batches {
        let Some(q) = b
            .column_by_name("query_id")
            .and_then(|c| c.as_string_opt::<i32>())
        else {
            out.push(b.clone());
            continue;
        };
        let mask: BooleanArray = (0..b.num_rows())
            .map(|i| Some(q.is_null(i) || named(q.value(i))))
            .collect();
        out.extend(filtered(b, &mask, "stages and queries")?);
    }
    Ok(out)
}

/// The window rows of `b` that overlap `[from, to]`, how many, and of
/// them those a focused read matches to their tasks: if `keys` are given
/// ([`Needs::host_keys`]: those of the hosts of an explained task), the
/// rows of those hosts and the rows of no key (the column is NULL where
/// the writer did not know the task, and absent from files written before
/// it); else all. A row of another host overlaps no explained task, so it
/// is never kept, and its task (not marked as having rows) is not one
/// whose totals an explained task meets. `None` if none overlaps.
fn windows_of_hosts(
    b: &RecordBatch,
    (from, to): (i64, i64),
    keys: Option<&HostKeys>,
) -> Result<Option<(usize, RecordBatch)>, Error> {
    use arrow::datatypes::UInt32Type;
    let (Some(s), Some(e)) = (time(b, "window_start"), time(b, "window_end")) else {
        // Not rows the method can use: as on a full read.
        return Ok(Some((b.num_rows(), b.clone())));
    };
    let key = keys.and_then(|keys| {
        let column = b.column_by_name(culprit_store::layout::HOST_KEY)?;
        Some((column.as_primitive_opt::<UInt32Type>()?, keys))
    });
    let mut in_time = 0;
    let mask: BooleanArray = (0..b.num_rows())
        .map(|i| {
            let time = s.is_valid(i) && e.is_valid(i) && s.value(i) <= to && from <= e.value(i);
            in_time += usize::from(time);
            Some(time && key.is_none_or(|(k, keys)| k.is_null(i) || keys.contains(&k.value(i))))
        })
        .collect();
    if in_time == 0 {
        return Ok(None);
    }
    let kept = match filtered(b, &mask, "window rows by time and host")? {
        Some(kept) => kept,
        None => b.slice(0, 0),
    };
    Ok(Some((in_time, kept)))
}

/// The host keys of [`windows_of_hosts`].
type HostKeys = rustc_hash::FxHashSet<u32>;

/// The rows of `b` that `mask` keeps; `None` if it keeps none.
fn filtered(
    b: &RecordBatch,
    mask: &BooleanArray,
    what: &str,
) -> Result<Option<RecordBatch>, Error> {
    if mask.true_count() == 0 {
        return Ok(None);
    }
    if mask.true_count() == b.num_rows() {
        return Ok(Some(b.clone()));
    }
    arrow::compute::filter_record_batch(b, mask)
        .map(Some)
        .map_err(|e| Error::Internal(format!("filtering {what}: {e}")))
}

/// A time column of `b`.
fn time<'a>(b: &'a RecordBatch, column: &str) -> Option<&'a TimestampMicrosecondArray> {
    b.column_by_name(column)
        .and_then(|a| a.as_primitive_opt::<TimestampMicrosecondType>())
}

/// Adds the tasks of `rows` as they come (decoded and cut ahead),
/// counted in `held`; room for about `expected` more tasks is made first
/// (the query index's estimate: the vectors grow past it if need be).
async fn add_tasks(
    ds: &mut Dataset,
    mut rows: futures::stream::BoxStream<'static, Result<TaskRows, Error>>,
    expected: f64,
    held: &mut Option<&mut Reservation>,
) -> Result<(), Error> {
    // A float past `usize` (a damaged index) saturates; `reserve_tasks`
    // caps what it makes room for.
    ds.reserve_tasks(ds.tasks.len().saturating_add(expected.max(0.0) as usize));
    // What the dataset held before, and the tasks added since (counting
    // the whole dataset for every batch walked every group of every host).
    let (base, before) = (read_bytes(ds), ds.tasks.len());
    while let Some(b) = rows.try_next().await? {
        ds.add_task_rows(b);
        let added = ds.tasks.len().saturating_sub(before);
        grow_to(
            held,
            base.saturating_add(added.saturating_mul(CACHE_BYTES_PER_TASK)),
        );
    }
    Ok(())
}

/// The stages of `ds` with a task running (launch to finish) while a task
/// of a victim waited for a slot (ready to launch): the stages its slot
/// waits can be blamed on (a superset: the method's slot sweep blames
/// those of the victim's slot pool).
fn slot_holders(ds: &Dataset, victim: &[bool]) -> Vec<u32> {
    let mut waits: Vec<(i64, i64)> = ds
        .tasks
        .iter()
        .filter(|t| victim[t.stage as usize])
        .filter_map(|t| t.ready.filter(|&r| r < t.launch).map(|r| (r, t.launch)))
        .collect();
    let waits = merged(&mut waits);
    let mut holder = vec![false; ds.stages.len()];
    for t in &ds.tasks {
        let i = waits.partition_point(|&(_, b)| b <= t.launch);
        if i < waits.len() && waits[i].0 < t.finish {
            holder[t.stage as usize] = true;
        }
    }
    (0..holder.len() as u32)
        .filter(|&s| holder[s as usize])
        .collect()
}

/// Per stage of `ds`: whether it belongs to one of `victims`.
pub(crate) fn of_victims(ds: &Dataset, victims: &[String]) -> Vec<bool> {
    let queries: Vec<u32> = victims.iter().filter_map(|v| ds.queries.get(v)).collect();
    (0..ds.stages.len() as u32)
        .map(|s| queries.contains(&ds.stage_query(s)))
        .collect()
}

/// A duration in milliseconds, for the read's log line.
fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `spans` sorted and merged where they overlap: disjoint, in order of
/// both their starts and their ends.
fn merged(spans: &mut [(i64, i64)]) -> Vec<(i64, i64)> {
    spans.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(spans.len());
    for &(a, b) in spans.iter() {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Whether `[start, end]` overlaps one of `host`'s merged spans in `per_host`.
fn meets(per_host: &[Vec<(i64, i64)>], host: u32, start: i64, end: i64) -> bool {
    let Some(spans) = per_host.get(host as usize) else {
        return false;
    };
    let i = spans.partition_point(|&(_, b)| b < start);
    i < spans.len() && spans[i].0 <= end
}

/// What the sweeps of a focused analysis read, per host: the runs
/// (launch to finish) of the explained tasks there, the victims' and the
/// slot holders', and for slot waits their spans (ready or launch to
/// finish). A window row that overlaps none of them on its host slows no
/// explained task (method.md section 4: blame is between tasks of one host,
/// row against row of one resource, and an explained task's rows of every
/// resource but `slots` lie inside its run, interchange.md), so it is not
/// kept: a row beside a task's wait for a slot, before its launch, meets
/// none of that task's rows but its slot rows.
struct Needs {
    /// Per host, the explained tasks' runs, merged.
    runs: Vec<Vec<(i64, i64)>>,
    /// Per host, their spans from ready (for `slots` rows), merged.
    spans: Vec<Vec<(i64, i64)>>,
}

impl Needs {
    /// The runs and spans of the tasks of the stages `explained` (per stage
    /// of `ds`).
    fn of(ds: &Dataset, explained: &[bool]) -> Needs {
        let mut runs: Vec<Vec<(i64, i64)>> = vec![Vec::new(); ds.hosts.len()];
        let mut spans = runs.clone();
        for t in &ds.tasks {
            if explained.get(t.stage as usize) == Some(&true) {
                let first = t.ready.map_or(t.launch, |r| r.min(t.launch));
                runs[t.host as usize].push((t.launch, t.finish));
                spans[t.host as usize].push((first, t.finish));
            }
        }
        let merge = |v: &mut Vec<Vec<(i64, i64)>>| v.iter_mut().map(|v| merged(v)).collect();
        Needs {
            runs: merge(&mut runs),
            spans: merge(&mut spans),
        }
    }

    /// Whether a row of `resource` over `[start, end]` on `host` overlaps
    /// an explained task's run there (its span from ready, for `slots`).
    fn overlaps(&self, host: u32, resource: Resource, start: i64, end: i64) -> bool {
        let of = if resource == Resource::Slots {
            &self.spans
        } else {
            &self.runs
        };
        meets(of, host, start, end)
    }

    /// The keys of the hosts with an explained task, as stored with the
    /// window rows ([`culprit_store::layout::HOST_KEY`]): a row of another
    /// host overlaps no explained task.
    fn host_keys(&self, ds: &Dataset) -> HostKeys {
        (0..self.spans.len())
            .filter(|&h| !self.spans[h].is_empty())
            .map(|h| culprit_store::layout::host_key(ds.hosts.name(h as u32)))
            .collect()
    }

    /// Whether `[start, end]` on `host` overlaps an explained task's run
    /// there (where a task's rows of any resource but `slots` can meet it).
    fn overlaps_run(&self, host: u32, start: i64, end: i64) -> bool {
        meets(&self.runs, host, start, end)
    }

    /// The `host_windows` rows of `b` a focused analysis needs: a slot
    /// pool's capacity (any host: the pool's), and on each host the rows
    /// that overlap an explained task's run (rows of no known resource
    /// too, as a whole read keeps them).
    fn host_rows(&self, ds: &Dataset, b: &RecordBatch) -> Result<Option<RecordBatch>, Error> {
        let (Some(host), Some(resource), Some(s), Some(e)) = (
            b.column_by_name("host")
                .and_then(|c| c.as_string_opt::<i32>()),
            b.column_by_name("resource")
                .and_then(|c| c.as_string_opt::<i32>()),
            time(b, "window_start"),
            time(b, "window_end"),
        ) else {
            // Not rows the method can use: as on a full read.
            return Ok(Some(b.clone()));
        };
        let mask: BooleanArray = (0..b.num_rows())
            .map(|i| {
                // Rows of `slots` and of no known resource are all kept,
                // so the others need only meet a run.
                let keep = resource.is_null(i)
                    || resource
                        .value(i)
                        .parse::<Resource>()
                        .map_or(true, |r| r == Resource::Slots)
                    || host.is_null(i)
                    || s.is_null(i)
                    || e.is_null(i)
                    || ds
                        .hosts
                        .get(host.value(i))
                        .is_some_and(|h| self.overlaps_run(h, s.value(i), e.value(i)));
                Some(keep)
            })
            .collect();
        filtered(b, &mask, "host rows")
    }
}
