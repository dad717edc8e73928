//! Scheduling the sweeps of one analysis on every core (method.md section
//! 2: hosts are independent). The window rows are either all in memory
//! ([`in_memory`]: one job per (host, resource)) or read from a store one
//! host bucket at a time through a [`BucketSource`] ([`streamed`]: one job
//! per bucket, which reads its rows and sweeps its hosts, so memory holds a
//! few hosts' rows, never the table). Either way the cluster-wide slot sweep
//! is one more job. Where the rows come from is the caller's business (the
//! engine's, which knows the store); how they are swept is the method's.
//! A series of windows is swept in the same single pass, each job's nodes
//! kept by window ([`Nodes`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use rustc_hash::{FxHashMap, FxHashSet};

use std::sync::Arc;

use super::level4::{Culprit, Entry, Level4};
use super::model::{Dataset, Interner, WindowRow, N_RES};
use super::series::Windows;
use super::sweep::{self, Attribution, Cells, Explained};
use crate::{MethodError, Resource};

/// The level-4 nodes of one job, by window.
#[derive(Debug, Default)]
struct Nodes {
    /// Window 0's (the only window of a plain analysis).
    first: Vec<Entry>,
    /// The other windows' of a series.
    rest: FxHashMap<u32, Vec<Entry>>,
}

impl Nodes {
    fn push_cells(&mut self, cells: Cells, resource: Resource, host: Option<u32>) {
        for ((w, stage, detail, c), seconds) in cells {
            let e = Entry::new(
                stage,
                resource,
                detail,
                host,
                Culprit::from_code(c),
                None,
                seconds,
            );
            if w == 0 {
                self.first.push(e);
            } else {
                self.rest.entry(w).or_default().push(e);
            }
        }
    }
}

/// The jobs' nodes as one [`Level4`] per window, each with one chunk per
/// job in job order.
fn by_window(jobs: Vec<Nodes>, windows: &Windows, details: Option<Interner>) -> Vec<Level4> {
    let details = details.map(Arc::new);
    let mut chunks: Vec<Vec<Vec<Entry>>> = vec![Vec::new(); windows.len()];
    for job in jobs {
        if let Some(c) = chunks.first_mut() {
            c.push(job.first);
        }
        for (w, entries) in job.rest {
            chunks[w as usize].push(entries);
        }
    }
    chunks
        .into_iter()
        .map(|c| Level4::from_chunks(c, details.clone()))
        .collect()
}

/// The cluster-wide slot sweep (section 5) as level-4 nodes.
fn slot_entries(
    ds: &Dataset,
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
) -> Result<Nodes, MethodError> {
    let slots_idx = super::model::resource_index(Resource::Slots);
    let slot_rows: Vec<&[super::model::HostRow]> = (0..ds.hosts.len())
        .map(|h| ds.host_rows[h * N_RES + slots_idx].as_slice())
        .collect();
    let cells = sweep::sweep_slots(ds, &slot_rows, victim, windows, mode)?;
    let mut nodes = Nodes::default();
    nodes.push_cells(cells, Resource::Slots, None);
    Ok(nodes)
}

/// What an analysis's sweeps do about the cluster-wide slot sweep (one
/// job of theirs, over every task of the dataset: on 5,000 hosts a
/// victim's took 34-37 ms, against about 110 ms for all its hosts' sweeps).
pub(crate) enum SlotSweep {
    /// Sweep the slot waits of the explained stages.
    Sweep,
    /// They were swept already, for the same explained stages
    /// ([`slot_holders`]): these are their nodes.
    Done(SlotNodes),
    /// None: the caller does not use the slot waits' nodes (a holder's
    /// shares leave slots out, section 5b).
    Skip,
}

/// The nodes of a slot sweep done by [`slot_holders`].
pub(crate) struct SlotNodes(Nodes);

impl SlotSweep {
    /// The nodes given (none for [`SlotSweep::Skip`]); `None` when the
    /// sweeps are to sweep the slots themselves.
    fn given(self) -> Option<Nodes> {
        match self {
            SlotSweep::Sweep => None,
            SlotSweep::Done(SlotNodes(nodes)) => Some(nodes),
            SlotSweep::Skip => Some(Nodes::default()),
        }
    }
}

/// The stages the victims' slot waits are blamed on in the slot sweep (the
/// holders of section 5b), as a mask over the stages, and the slot sweep's
/// nodes (for the analysis of the same victims: [`SlotSweep::Done`]); the
/// slot sweep needs only the dataset in memory, not the window rows.
pub(crate) fn slot_holders(
    ds: &Dataset,
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
) -> Result<(Vec<bool>, SlotNodes), MethodError> {
    let nodes = slot_entries(ds, victim, windows, mode)?;
    let mut held = vec![false; ds.stages.len()];
    for e in nodes.first.iter().chain(nodes.rest.values().flatten()) {
        if let Culprit::Stage(cs) = e.culprit() {
            if let Some(h) = held.get_mut(cs as usize) {
                *h = true;
            }
        }
    }
    Ok((held, SlotNodes(nodes)))
}

/// The window rows of some hosts (one host bucket), grouped by (host,
/// resource) as in [`Dataset::group`], with the tasks they name.
#[derive(Debug)]
struct Part {
    /// Indexed by group; the groups of other hosts stay empty.
    pub groups: Vec<Vec<WindowRow>>,
    /// Tasks with at least one window row here.
    pub with_windows: FxHashSet<u32>,
    last_task: u32,
}

impl Part {
    /// An empty part for a dataset with `groups` (host, resource) groups.
    fn new(groups: usize) -> Part {
        Part {
            groups: vec![Vec::new(); groups],
            with_windows: FxHashSet::default(),
            last_task: u32::MAX,
        }
    }

    fn push(&mut self, task: u32, group: usize, row: WindowRow) {
        // Rows come grouped by task: one set insert per task, not per row.
        if task != self.last_task {
            self.with_windows.insert(task);
            self.last_task = task;
        }
        self.groups[group].push(row);
    }

    fn rows(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum()
    }
}

/// The sweeps of every (host, resource) of `hosts`, whose window rows are
/// all in `parts` (tasks of those hosts without rows there are known by their
/// totals, section 2). One thread; run parts on several.
fn sweep_part(
    ds: &Dataset,
    hosts: &[u32],
    tasks_by_host: &[Vec<u32>],
    parts: &[&Part],
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
) -> Result<Nodes, MethodError> {
    let mut synth: FxHashMap<usize, Vec<WindowRow>> = FxHashMap::default();
    for &h in hosts {
        for &t in &tasks_by_host[h as usize] {
            if !parts.iter().any(|p| p.with_windows.contains(&t)) {
                for (r, row) in ds.synthesize(t) {
                    synth.entry(Dataset::group(h, r)).or_default().push(row);
                }
            }
        }
    }
    let slots_idx = super::model::resource_index(Resource::Slots);
    let mut groups: Vec<usize> = hosts
        .iter()
        .flat_map(|&h| (0..N_RES).map(move |r| h as usize * N_RES + r))
        .filter(|&g| {
            g % N_RES != slots_idx
                && (synth.contains_key(&g) || parts.iter().any(|p| !p.groups[g].is_empty()))
        })
        .collect();
    groups.sort_unstable();
    let mut nodes = Nodes::default();
    for g in groups {
        let rows: Vec<&[WindowRow]> = parts
            .iter()
            .map(|p| &p.groups[g])
            .chain(synth.get(&g))
            .map(|v| v.as_slice())
            .collect();
        sweep_one(ds, g, &rows, victim, windows, mode, &mut nodes)?;
    }
    Ok(nodes)
}

/// The sweep of group `g` (a host and resource) over `rows`, its level-4
/// nodes appended to `out`.
fn sweep_one(
    ds: &Dataset,
    g: usize,
    rows: &[&[WindowRow]],
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
    out: &mut Nodes,
) -> Result<(), MethodError> {
    let r = Resource::ALL[g % N_RES];
    let host = (g / N_RES) as u32;
    sweep::check_host_rows(ds, host, r, &ds.host_rows[g])?;
    let cells = sweep::sweep_group(ds, r, rows, &ds.host_rows[g], victim, windows, mode)?;
    out.push_cells(cells, r, Some(host));
    Ok(())
}

/// The sweeps, both cores: one job per (host, resource), plus the slots
/// (as `slots` says). One [`Level4`] per window.
pub(crate) fn in_memory(
    ds: &Dataset,
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
    slots: SlotSweep,
) -> Result<Vec<Level4>, MethodError> {
    // Only the hosts where an explained stage ran are swept, as in
    // `streamed`; rows of their tasks known only by their totals.
    let hosts = explained_hosts(ds, victim);
    let mut synth: Vec<Vec<WindowRow>> = vec![Vec::new(); ds.windows.len()];
    for (i, t) in ds.tasks.iter().enumerate() {
        if !hosts[t.host as usize] {
            continue;
        }
        for (r, row) in ds.synthesized_rows(i as u32) {
            synth[Dataset::group(t.host, r)].push(row);
        }
    }
    let slots_idx = super::model::resource_index(Resource::Slots);
    let mut jobs: Vec<usize> = (0..ds.windows.len())
        .filter(|g| {
            g % N_RES != slots_idx
                && hosts[g / N_RES]
                && !(ds.windows[*g].is_empty() && synth[*g].is_empty())
        })
        .collect();
    jobs.sort_by_key(|g| std::cmp::Reverse(ds.windows[*g].len() + synth[*g].len()));
    // usize::MAX stands for the slot sweep, unless its nodes are given;
    // they come first either way.
    let given = slots.given();
    if given.is_none() {
        jobs.insert(0, usize::MAX);
    }
    let chunks = parallel(jobs.len(), |j| {
        let g = jobs[j];
        if g == usize::MAX {
            return slot_entries(ds, victim, windows, mode);
        }
        let mut nodes = Nodes::default();
        let rows = [ds.windows[g].as_slice(), synth[g].as_slice()];
        sweep_one(ds, g, &rows, victim, windows, mode, &mut nodes)?;
        Ok(nodes)
    });
    // Within a job the order is that of an FxHashMap (no random seed):
    // deterministic for the same data.
    let mut chunks = chunks?.into_iter().collect::<Result<Vec<_>, _>>()?;
    if let Some(nodes) = given {
        chunks.insert(0, nodes);
    }
    Ok(by_window(chunks, windows, None))
}

/// Runs `job(0..n)` on every core, jobs taken in order; the results come
/// back in job order, whatever the thread timing. A job that panics is a
/// bug: it comes back as [`MethodError::Internal`], never as a bad argument.
pub(crate) fn parallel<T: Send>(
    n: usize,
    job: impl Fn(usize) -> T + Sync,
) -> Result<Vec<T>, MethodError> {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(n)
        .max(1);
    let results: Vec<std::thread::Result<Vec<(usize, T)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let j = next.fetch_add(1, Ordering::Relaxed);
                        if j >= n {
                            break;
                        }
                        out.push((j, job(j)));
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut by_job: Vec<(usize, T)> = Vec::with_capacity(n);
    for r in results {
        match r {
            Ok(done) => by_job.extend(done),
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                return Err(MethodError::Internal(format!(
                    "a sweep thread panicked: {why}"
                )));
            }
        }
    }
    by_job.sort_unstable_by_key(|(j, _)| *j);
    Ok(by_job.into_iter().map(|(_, t)| t).collect())
}

/// Rows of one part whose task ran on a host of another bucket (a task
/// stored again later with another host): (bucket, task, group, row).
type Strays = Vec<(usize, u32, usize, WindowRow)>;

/// Where the window rows of a store too large for memory come from: files
/// written per host bucket (`culprit_store::layout`), and files without a
/// bucket (older stores, rows whose task came in a later batch). Reads hand
/// each row to `sink(task, group, row)`, `group` as in [`Dataset::group`].
pub trait BucketSource: Sync {
    type Error: From<MethodError> + Send;
    /// The number of host buckets.
    fn buckets(&self) -> usize;
    /// The bucket whose files hold `host`'s rows.
    fn bucket_of(&self, host: u32) -> usize;
    /// How many files have no bucket.
    fn unbucketed_files(&self) -> usize;
    /// Reads the `i`-th file without a bucket.
    fn read_unbucketed(
        &self,
        i: usize,
        sink: &mut dyn FnMut(u32, usize, WindowRow),
    ) -> Result<(), Self::Error>;
    /// Reads the files of bucket `b`.
    fn read_bucket(
        &self,
        b: usize,
        sink: &mut dyn FnMut(u32, usize, WindowRow),
    ) -> Result<(), Self::Error>;
    /// The names of the detail ids the reads gave out.
    fn details(&self) -> Result<Interner, Self::Error>;
    /// Called as each bucket is swept (`rows`: its window rows), for
    /// progress reports.
    fn swept(&self, _done: usize, _of: usize, _rows: usize) {}
}

/// The sweeps over window rows read bucket by bucket from `source`, one
/// bucket per job on every core, plus the slot sweep. One [`Level4`] per
/// window: the store is read once for all of them.
pub(crate) fn streamed<S: BucketSource>(
    ds: &Dataset,
    source: &S,
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
    slots: SlotSweep,
) -> Result<Vec<Level4>, S::Error> {
    let chunks = bucket_jobs(ds, source, victim, windows, mode, slots, None)?;
    Ok(by_window(chunks, windows, Some(source.details()?)))
}

/// The hosts where a task of an explained stage ran, by host id: the only
/// hosts whose sweeps can give an explained stage anything (blame is
/// between the tasks of one host, and a group's sweep gives cells only to
/// its explained tasks' rows). Both the in-memory and the streamed
/// analyses sweep these alone, and make rows of the totals of their tasks
/// only (on 5,000 hosts 13,272 of a victim's 20,001 sweeps in memory held
/// nothing but such rows, all on hosts where no explained stage ran).
fn explained_hosts(ds: &Dataset, victim: Explained<'_>) -> Vec<bool> {
    let mut hosts = vec![false; ds.hosts.len()];
    for t in &ds.tasks {
        if victim.stage(t.stage) {
            hosts[t.host as usize] = true;
        }
    }
    hosts
}

/// The buckets whose hosts ran a victim stage, and per bucket those hosts.
fn victim_hosts(
    ds: &Dataset,
    victim: Explained<'_>,
    buckets: usize,
    bucket_of: impl Fn(u32) -> usize,
) -> Vec<Vec<u32>> {
    let victim_host = explained_hosts(ds, victim);
    let mut hosts: Vec<Vec<u32>> = vec![Vec::new(); buckets];
    for h in 0..ds.hosts.len() as u32 {
        if victim_host[h as usize] {
            hosts[bucket_of(h)].push(h);
        }
    }
    hosts
}

/// The jobs of [`streamed`]: job 0 the slot sweep (as `slots` says), job
/// `b + 1` bucket `b`'s sweeps. With `share`, only the buckets marked there
/// are read and swept (a worker's share of an analysis, [`sweep_share`],
/// whose caller does the slot sweep).
fn bucket_jobs<S: BucketSource>(
    ds: &Dataset,
    source: &S,
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
    slots: SlotSweep,
    share: Option<&[bool]>,
) -> Result<Vec<Nodes>, S::Error> {
    let given = slots.given();
    let n = source.buckets();
    let groups = ds.windows.len();
    let tasks_by_host = ds.tasks_by_host();
    let in_share = |b: usize| share.is_none_or(|s| s.get(b).copied().unwrap_or(false));
    // Files without a bucket are read first, in parallel, and kept: every
    // bucket's sweep takes its hosts' rows from them too.
    let loose: Vec<Part> = parallel(source.unbucketed_files(), |i| -> Result<Part, S::Error> {
        let mut part = Part::new(groups);
        source.read_unbucketed(i, &mut |task, group, row| part.push(task, group, row))?;
        Ok(part)
    })?
    .into_iter()
    .collect::<Result<_, _>>()?;
    // Only hosts where a victim stage ran have anything to explain; a
    // bucket without such hosts is not even read, unless some task was
    // stored with two hosts (its rows could sit in any bucket).
    let hosts = victim_hosts(ds, victim, n, |h| source.bucket_of(h));
    let may_skip = ds.host_conflicts == 0;
    let read_bucket = |b: usize, strays: &mut Strays| -> Result<Part, S::Error> {
        let mut part = Part::new(groups);
        source.read_bucket(b, &mut |task, group, row| {
            let home = source.bucket_of((group / N_RES) as u32);
            if home == b {
                part.push(task, group, row)
            } else {
                strays.push((home, task, group, row))
            }
        })?;
        Ok(part)
    };
    let sweep_bucket = |b: usize, extra: &[&Part]| -> Result<Nodes, MethodError> {
        let parts: Vec<&Part> = loose.iter().chain(extra.iter().copied()).collect();
        sweep_part(ds, &hosts[b], &tasks_by_host, &parts, victim, windows, mode)
    };
    let swept = AtomicUsize::new(0);
    let jobs = parallel(n + 1, |j| -> Result<(Nodes, Strays), S::Error> {
        if j == 0 {
            if given.is_some() {
                return Ok((Nodes::default(), Vec::new()));
            }
            return Ok((slot_entries(ds, victim, windows, mode)?, Vec::new()));
        }
        let b = j - 1;
        if !in_share(b) || (may_skip && hosts[b].is_empty()) {
            return Ok((Nodes::default(), Vec::new()));
        }
        let mut strays = Strays::new();
        let part = read_bucket(b, &mut strays)?;
        let entries = sweep_bucket(b, &[&part])?;
        let done = swept.fetch_add(1, Ordering::Relaxed) + 1;
        source.swept(done, n, part.rows());
        Ok((entries, strays))
    })?;
    let mut chunks = Vec::with_capacity(n + 1);
    let mut strays: FxHashMap<usize, Part> = FxHashMap::default();
    for job in jobs {
        let (entries, s) = job?;
        chunks.push(entries);
        for (b, task, group, row) in s {
            strays
                .entry(b)
                .or_insert_with(|| Part::new(groups))
                .push(task, group, row);
        }
    }
    if let Some(nodes) = given {
        chunks[0] = nodes;
    }
    // A bucket that got rows from another bucket's files is swept again
    // with them (rare: a task stored twice with different hosts), on the
    // sweep threads as the first sweeps (a source may block on its reads,
    // which the caller's thread, a Tokio worker's, cannot).
    let mut again: Vec<(usize, Part)> = strays.into_iter().collect();
    again.sort_unstable_by_key(|(b, _)| *b);
    if let Some((b, _)) = again.iter().find(|(b, _)| !in_share(*b)) {
        // A share is only asked for when no task has two hosts
        // (`Dataset::host_conflicts`), so this cannot happen.
        return Err(MethodError::Internal(format!(
            "host bucket {b} has rows in another bucket's files; it cannot be swept in a share"
        ))
        .into());
    }
    if again.is_empty() {
        return Ok(chunks);
    }
    let swept = parallel(again.len(), |k| -> Result<Nodes, S::Error> {
        let (b, extra) = &again[k];
        let part = read_bucket(*b, &mut Strays::new())?;
        Ok(sweep_bucket(*b, &[&part, extra])?)
    })?;
    for ((b, _), nodes) in again.iter().zip(swept) {
        chunks[b + 1] = nodes?;
    }
    Ok(chunks)
}

/// The level-4 nodes of one host bucket's sweeps, by window: a share of an
/// analysis swept on a worker of a cluster ([`sweep_share`]), combined on
/// the coordinator ([`Shards`]).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BucketNodes {
    pub bucket: usize,
    /// `(window, nodes)`, in the order the sweeps gave them.
    pub windows: Vec<(u32, Vec<Entry>)>,
}

impl BucketNodes {
    fn of(bucket: usize, nodes: Nodes) -> BucketNodes {
        let mut windows = Vec::with_capacity(1 + nodes.rest.len());
        if !nodes.first.is_empty() {
            windows.push((0, nodes.first));
        }
        let mut rest: Vec<(u32, Vec<Entry>)> = nodes.rest.into_iter().collect();
        rest.sort_unstable_by_key(|(w, _)| *w);
        windows.extend(rest);
        BucketNodes { bucket, windows }
    }

    fn into_nodes(self) -> Nodes {
        let mut nodes = Nodes::default();
        for (w, entries) in self.windows {
            if w == 0 {
                nodes.first = entries;
            } else {
                nodes.rest.insert(w, entries);
            }
        }
        nodes
    }
}

/// The sweeps of the host buckets `buckets` only, without the slot sweep:
/// a worker's share of an analysis (method.md section 2: hosts are
/// independent). Each bucket's nodes are those [`streamed`] computes for
/// it, their detail ids names of `source.details()`. Only for a dataset
/// where no task has two hosts (`Dataset::host_conflicts == 0`).
pub fn sweep_share<S: BucketSource>(
    ds: &Dataset,
    source: &S,
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
    buckets: &[usize],
) -> Result<Vec<BucketNodes>, S::Error> {
    let mut share = vec![false; source.buckets()];
    for &b in buckets {
        match share.get_mut(b) {
            Some(s) => *s = true,
            None => {
                return Err(MethodError::Internal(format!(
                    "host bucket {b} asked for, the store has {}",
                    source.buckets()
                ))
                .into())
            }
        }
    }
    let chunks = bucket_jobs(
        ds,
        source,
        victim,
        windows,
        mode,
        SlotSweep::Skip,
        Some(&share),
    )?;
    Ok(chunks
        .into_iter()
        .enumerate()
        .skip(1)
        .filter(|(j, _)| share[j - 1])
        .map(|(j, nodes)| BucketNodes::of(j - 1, nodes))
        .collect())
}

/// Host buckets swept elsewhere (the workers of a cluster): the
/// coordinator's side of [`sweep_share`].
pub trait Shards: Sync {
    type Error: From<MethodError> + Send;
    /// The number of host buckets.
    fn buckets(&self) -> usize;
    /// The bucket whose files hold `host`'s rows.
    fn bucket_of(&self, host: u32) -> usize;
    /// Sweeps `buckets` for `victim` elsewhere: each bucket's nodes (in
    /// any order), their detail ids names of the interner returned.
    fn sweep(
        &self,
        buckets: &[usize],
        victim: Explained<'_>,
        windows: &Windows,
        mode: Attribution,
    ) -> Result<(Vec<BucketNodes>, Interner), Self::Error>;
}

/// The sweeps of [`streamed`] with the host buckets swept by `shards` and
/// the slot sweep here, at the same time; the same [`Level4`]s, in the same
/// order. Only for a dataset where no task has two hosts.
pub(crate) fn sharded<S: Shards>(
    ds: &Dataset,
    shards: &S,
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
    slots: SlotSweep,
) -> Result<Vec<Level4>, S::Error> {
    if ds.host_conflicts != 0 {
        return Err(MethodError::Internal(
            "a store where a task has two hosts cannot be swept in shards".into(),
        )
        .into());
    }
    let n = shards.buckets();
    let hosts = victim_hosts(ds, victim, n, |h| shards.bucket_of(h));
    let asked: Vec<usize> = (0..n).filter(|&b| !hosts[b].is_empty()).collect();
    // Both on threads of their own: the shards' caller may block on I/O,
    // which a thread driving async tasks must not.
    let (slots, remote) = std::thread::scope(|scope| {
        let slots = scope.spawn(|| match slots.given() {
            Some(nodes) => Ok(nodes),
            None => slot_entries(ds, victim, windows, mode),
        });
        let remote = scope.spawn(|| {
            if asked.is_empty() {
                Ok((Vec::new(), ds.details.clone()))
            } else {
                shards.sweep(&asked, victim, windows, mode)
            }
        });
        (slots.join(), remote.join())
    });
    let panicked = |what: &str| MethodError::Internal(format!("the {what} thread panicked"));
    let slots = slots.map_err(|_| panicked("slot sweep's"))??;
    let (parts, details) = remote.map_err(|_| panicked("shards'"))??;
    let mut chunks: Vec<Nodes> = Vec::with_capacity(n + 1);
    chunks.push(slots);
    chunks.resize_with(n + 1, Nodes::default);
    let mut answered = vec![false; n];
    for part in parts {
        let b = part.bucket;
        if b >= n || hosts[b].is_empty() || answered[b] {
            return Err(MethodError::Internal(format!(
                "a shard answered for host bucket {b}, which was not asked for or answered twice"
            ))
            .into());
        }
        answered[b] = true;
        chunks[b + 1] = part.into_nodes();
    }
    if let Some(b) = asked.iter().find(|&&b| !answered[b]) {
        return Err(MethodError::Internal(format!("no shard answered for host bucket {b}")).into());
    }
    Ok(by_window(chunks, windows, Some(details)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_come_back_in_order() {
        assert_eq!(
            parallel(100, |j| j * 2).unwrap(),
            (0..100).map(|j| j * 2).collect::<Vec<_>>()
        );
        assert!(parallel(0, |j| j).unwrap().is_empty());
    }

    #[test]
    fn a_panicking_job_is_an_internal_error_not_a_bad_argument() {
        let r = parallel(8, |j| {
            if j == 5 {
                panic!("sweep invariant broken");
            }
            j
        });
        match r {
            Err(MethodError::Internal(m)) => assert!(m.contains("sweep invariant broken"), "{m}"),
            other => panic!("expected an internal error, got {other:?}"),
        }
    }
}
