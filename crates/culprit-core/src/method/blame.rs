//! Level-4 blame for a set of victims: the sweeps over every (host,
//! resource) in parallel, the slot sweep, and the options of section 5.

use std::sync::atomic::{AtomicUsize, Ordering};

use rustc_hash::{FxHashMap, FxHashSet};

use super::critical_path::critical_path;
use super::model::{Dataset, Interner, Micros, WindowRow, N_RES};
use super::sweep::{self, Attribution, Cells, EXTERNAL, GC, UNKNOWN};
use crate::{MethodError, Resource};

/// Which stages of a victim query are explained (001 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VictimStages {
    /// The stages on the critical path (section 8), the default.
    CriticalPath,
    All,
    /// One named stage.
    Stage(String),
}

/// How slot waits are blamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotBlame {
    /// On the stages holding the slots (section 5), the default.
    Direct,
    /// Passed on to what slowed the slot holders (section 5b).
    Transitive,
}

/// What to explain.
#[derive(Debug, Clone)]
pub struct BlameOptions {
    /// Victim query names; `None` means every query that ran in the window.
    pub victims: Option<Vec<String>>,
    pub stages: VictimStages,
    pub attribution: Attribution,
    pub slots: SlotBlame,
    pub from: Option<Micros>,
    pub to: Option<Micros>,
}

impl Default for BlameOptions {
    fn default() -> Self {
        BlameOptions {
            victims: None,
            stages: VictimStages::CriticalPath,
            attribution: Attribution::Window,
            slots: SlotBlame::Direct,
            from: None,
            to: None,
        }
    }
}

/// A culprit at level 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Culprit {
    /// A stage: of another query (kind `query`), or of the victim query (`self`).
    Stage(u32),
    Gc,
    External,
    Unknown,
}

impl Culprit {
    fn from_code(c: u32) -> Culprit {
        match c {
            GC => Culprit::Gc,
            EXTERNAL => Culprit::External,
            UNKNOWN => Culprit::Unknown,
            s => Culprit::Stage(s),
        }
    }

    fn code(self) -> u32 {
        match self {
            Culprit::Stage(s) => s,
            Culprit::Gc => GC,
            Culprit::External => EXTERNAL,
            Culprit::Unknown => UNKNOWN,
        }
    }
}

/// No host (cluster-wide slots) or no via stage, in [`Entry`]'s compact fields.
const NONE: u32 = u32::MAX;

/// One level-4 node: seconds of `stage`'s blocked time on `resource`
/// (`detail`) at `host` (`None`: cluster-wide slots) attributed to `culprit`
/// (`via`: the slot holder the blame passed through, section 5b).
///
/// Kept in 32 bytes (codes instead of enums and options): a large analysis
/// holds one per level-4 node until its result is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry {
    pub stage: u32,
    pub detail: u32,
    host: u32,
    culprit: u32,
    via: u32,
    pub resource: Resource,
    pub seconds: f64,
}

impl Entry {
    pub fn new(
        stage: u32,
        resource: Resource,
        detail: u32,
        host: Option<u32>,
        culprit: Culprit,
        via: Option<u32>,
        seconds: f64,
    ) -> Entry {
        Entry {
            stage,
            detail,
            host: host.unwrap_or(NONE),
            culprit: culprit.code(),
            via: via.unwrap_or(NONE),
            resource,
            seconds,
        }
    }

    /// The host, `None` for the cluster-wide slot sweep.
    pub fn host(&self) -> Option<u32> {
        (self.host != NONE).then_some(self.host)
    }

    pub fn culprit(&self) -> Culprit {
        Culprit::from_code(self.culprit)
    }

    /// The slot holder the blame passed through (section 5b).
    pub fn via(&self) -> Option<u32> {
        (self.via != NONE).then_some(self.via)
    }

    /// The same victim node with another culprit.
    pub fn with_culprit(self, culprit: Culprit, via: Option<u32>, seconds: f64) -> Entry {
        Entry {
            culprit: culprit.code(),
            via: via.unwrap_or(NONE),
            seconds,
            ..self
        }
    }
}

/// Level-4 nodes in chunks (one per sweep job or host bucket, in a
/// deterministic order), so that the result of a large analysis is never
/// copied into one vector and can be sent chunk by chunk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Level4 {
    chunks: Vec<Vec<Entry>>,
    /// Names of the detail ids when they are not the dataset's (window rows
    /// streamed from the store intern their details here).
    details: Option<Interner>,
}

impl Level4 {
    pub fn from_chunks(chunks: Vec<Vec<Entry>>, details: Option<Interner>) -> Level4 {
        Level4 { chunks, details }
    }

    pub fn iter(&self) -> std::iter::Flatten<std::slice::Iter<'_, Vec<Entry>>> {
        self.chunks.iter().flatten()
    }

    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_vec(&self) -> Vec<Entry> {
        self.iter().cloned().collect()
    }

    /// The names of the entries' detail ids.
    pub fn details<'a>(&'a self, ds: &'a Dataset) -> &'a Interner {
        self.details.as_ref().unwrap_or(&ds.details)
    }

    /// The chunks, to consume one at a time, and the detail names.
    pub fn into_parts(self) -> (Vec<Vec<Entry>>, Option<Interner>) {
        (self.chunks, self.details)
    }
}

impl From<Vec<Entry>> for Level4 {
    fn from(v: Vec<Entry>) -> Self {
        Level4 {
            chunks: vec![v],
            details: None,
        }
    }
}

impl<'a> IntoIterator for &'a Level4 {
    type Item = &'a Entry;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'a, Vec<Entry>>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The victims and their stages resolved against the data.
#[derive(Debug, Clone)]
pub struct Victims {
    pub queries: Vec<u32>,
    /// Per stage: explained?
    pub stages: Vec<bool>,
}

/// The analysis window, all data when unbounded.
pub fn window(opts: &BlameOptions) -> (Micros, Micros) {
    (
        opts.from.unwrap_or(Micros::MIN),
        opts.to.unwrap_or(Micros::MAX),
    )
}

/// Resolves the victim queries and stages.
pub fn resolve_victims(ds: &Dataset, opts: &BlameOptions) -> Result<Victims, MethodError> {
    let (from, to) = window(opts);
    if from >= to {
        return Err(MethodError::InvalidArgument(
            "the window is empty: 'from' must be before 'to'".into(),
        ));
    }
    let mut ran = vec![false; ds.queries.len()];
    for t in &ds.tasks {
        if sweep::clip(
            t.ready.unwrap_or(t.launch).min(t.launch),
            t.finish,
            from,
            to,
        )
        .is_some()
        {
            ran[ds.stage_query(t.stage) as usize] = true;
        }
    }
    let queries: Vec<u32> = match &opts.victims {
        None => (0..ds.queries.len() as u32)
            .filter(|q| ran[*q as usize])
            .collect(),
        Some(names) => names
            .iter()
            .map(|n| {
                ds.queries
                    .get(n)
                    .ok_or_else(|| MethodError::UnknownQuery(n.clone()))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut stages = vec![false; ds.stages.len()];
    for &q in &queries {
        match &opts.stages {
            VictimStages::All => {
                for (i, s) in ds.stages.iter().enumerate() {
                    if s.query == q {
                        stages[i] = true;
                    }
                }
            }
            VictimStages::CriticalPath => {
                for step in critical_path(ds, q).stages {
                    stages[step.stage as usize] = true;
                }
            }
            VictimStages::Stage(id) => {
                let s = ds.stage(q, id).ok_or_else(|| {
                    MethodError::InvalidArgument(format!(
                        "query '{}' has no stage '{id}'",
                        ds.queries.name(q)
                    ))
                })?;
                stages[s as usize] = true;
            }
        }
    }
    Ok(Victims { queries, stages })
}

/// Level-4 blame of the victims' stages, over the window rows in memory.
pub fn blame(ds: &Dataset, opts: &BlameOptions) -> Result<(Victims, Level4), MethodError> {
    blame_with(ds, opts, |victim, win, mode| {
        Ok(level4(ds, victim, win, mode))
    })
}

/// Level-4 blame with the sweeps done by `sweeps(explained stages, window,
/// mode)`, e.g. over window rows streamed host bucket by host bucket with
/// [`sweep_part`] and [`slot_entries`].
pub fn blame_with<E: From<MethodError>>(
    ds: &Dataset,
    opts: &BlameOptions,
    sweeps: impl FnOnce(&[bool], (Micros, Micros), Attribution) -> Result<Level4, E>,
) -> Result<(Victims, Level4), E> {
    let victims = resolve_victims(ds, opts)?;
    let win = window(opts);
    let entries = match opts.slots {
        SlotBlame::Direct => sweeps(&victims.stages, win, opts.attribution)?,
        SlotBlame::Transitive => {
            // Holders need their own level 4: explain every stage, then keep the victims'.
            let all = vec![true; ds.stages.len()];
            let entries = sweeps(&all, win, opts.attribution)?;
            let kept: Vec<Entry> = transitive(ds, &entries, win)
                .into_iter()
                .filter(|e| victims.stages[e.stage as usize])
                .collect();
            Level4::from_chunks(vec![kept], entries.details)
        }
    };
    Ok((victims, entries))
}

/// The cluster-wide slot sweep (section 5) as level-4 nodes.
pub fn slot_entries(
    ds: &Dataset,
    victim: &[bool],
    win: (Micros, Micros),
    mode: Attribution,
) -> Vec<Entry> {
    let slots_idx = super::model::resource_index(Resource::Slots);
    let slot_rows: Vec<&[super::model::HostRow]> = (0..ds.hosts.len())
        .map(|h| ds.host_rows[h * N_RES + slots_idx].as_slice())
        .collect();
    let cells = sweep::sweep_slots(ds, &slot_rows, victim, win, mode);
    let mut entries = Vec::new();
    push_cells(&mut entries, cells, Resource::Slots, None);
    entries
}

/// The window rows of some hosts (one host bucket), grouped by (host,
/// resource) as in [`Dataset::group`], with the tasks they name.
#[derive(Debug)]
pub struct Part {
    /// Indexed by group; the groups of other hosts stay empty.
    pub groups: Vec<Vec<WindowRow>>,
    /// Tasks with at least one window row here.
    pub with_windows: FxHashSet<u32>,
    last_task: u32,
}

impl Part {
    /// An empty part for a dataset with `groups` (host, resource) groups.
    pub fn new(groups: usize) -> Part {
        Part {
            groups: vec![Vec::new(); groups],
            with_windows: FxHashSet::default(),
            last_task: u32::MAX,
        }
    }

    pub fn push(&mut self, task: u32, group: usize, row: WindowRow) {
        // Rows come grouped by task: one set insert per task, not per row.
        if task != self.last_task {
            self.with_windows.insert(task);
            self.last_task = task;
        }
        self.groups[group].push(row);
    }

    pub fn rows(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum()
    }
}

/// The sweeps of every (host, resource) of `hosts`, whose window rows are
/// all in `parts` (tasks of those hosts without rows there are known by their
/// totals, section 2). One thread; run parts on several.
pub fn sweep_part(
    ds: &Dataset,
    hosts: &[u32],
    tasks_by_host: &[Vec<u32>],
    parts: &[&Part],
    victim: &[bool],
    win: (Micros, Micros),
    mode: Attribution,
) -> Vec<Entry> {
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
    let mut entries = Vec::new();
    for g in groups {
        let rows: Vec<&[WindowRow]> = parts
            .iter()
            .map(|p| &p.groups[g])
            .chain(synth.get(&g))
            .map(|v| v.as_slice())
            .collect();
        sweep_one(ds, g, &rows, victim, win, mode, &mut entries);
    }
    entries
}

/// The sweep of group `g` (a host and resource) over `rows`, its level-4
/// nodes appended to `out`.
fn sweep_one(
    ds: &Dataset,
    g: usize,
    rows: &[&[WindowRow]],
    victim: &[bool],
    win: (Micros, Micros),
    mode: Attribution,
    out: &mut Vec<Entry>,
) {
    let r = Resource::ALL[g % N_RES];
    let cells = sweep::sweep_group(ds, r, rows, &ds.host_rows[g], victim, win, mode);
    push_cells(out, cells, r, Some((g / N_RES) as u32));
}

/// The sweeps, both cores: one job per (host, resource), plus the slots.
fn level4(ds: &Dataset, victim: &[bool], win: (Micros, Micros), mode: Attribution) -> Level4 {
    // Rows of tasks known only by their totals.
    let mut synth: Vec<Vec<WindowRow>> = vec![Vec::new(); ds.windows.len()];
    for (i, t) in ds.tasks.iter().enumerate() {
        for (r, row) in ds.synthesized_rows(i as u32) {
            synth[Dataset::group(t.host, r)].push(row);
        }
    }
    let slots_idx = super::model::resource_index(Resource::Slots);
    let mut jobs: Vec<usize> = (0..ds.windows.len())
        .filter(|g| g % N_RES != slots_idx && !(ds.windows[*g].is_empty() && synth[*g].is_empty()))
        .collect();
    jobs.sort_by_key(|g| std::cmp::Reverse(ds.windows[*g].len() + synth[*g].len()));
    // usize::MAX stands for the slot sweep.
    jobs.insert(0, usize::MAX);
    let chunks = parallel(jobs.len(), |j| {
        let g = jobs[j];
        if g == usize::MAX {
            return slot_entries(ds, victim, win, mode);
        }
        let mut entries = Vec::new();
        let rows = [ds.windows[g].as_slice(), synth[g].as_slice()];
        sweep_one(ds, g, &rows, victim, win, mode, &mut entries);
        entries
    });
    // Within a job the order is that of an FxHashMap (no random seed):
    // deterministic for the same data.
    Level4::from_chunks(chunks, None)
}

/// Runs `job(0..n)` on every core, jobs taken in order; the results come
/// back in job order, whatever the thread timing.
pub fn parallel<T: Send>(n: usize, job: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(n)
        .max(1);
    let results: Vec<Vec<(usize, T)>> = std::thread::scope(|scope| {
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
        handles
            .into_iter()
            .map(|h| h.join().expect("sweep thread"))
            .collect()
    });
    let mut by_job: Vec<(usize, T)> = results.into_iter().flatten().collect();
    by_job.sort_unstable_by_key(|(j, _)| *j);
    by_job.into_iter().map(|(_, t)| t).collect()
}

fn push_cells(out: &mut Vec<Entry>, cells: Cells, resource: Resource, host: Option<u32>) {
    out.extend(cells.into_iter().map(|((stage, detail, c), seconds)| {
        Entry::new(
            stage,
            resource,
            detail,
            host,
            Culprit::from_code(c),
            None,
            seconds,
        )
    }));
}

/// Section 5b: a slot wait on holder `cs` becomes `b * rho(cs, X)` on each X
/// that slowed `cs`, and `b * (1 - sum rho)` stays on `cs`.
fn transitive(ds: &Dataset, entries: &Level4, (from, to): (Micros, Micros)) -> Vec<Entry> {
    let mut run = vec![0.0f64; ds.stages.len()];
    for t in &ds.tasks {
        if let Some((s, e)) = sweep::clip(t.launch, t.finish, from, to) {
            run[t.stage as usize] += (e - s) as f64 / 1e6;
        }
    }
    let mut rho: FxHashMap<u32, Vec<(Culprit, f64)>> = FxHashMap::default();
    for e in entries.iter().filter(|e| e.resource != Resource::Slots) {
        let v = rho.entry(e.stage).or_default();
        let c = e.culprit();
        match v.iter_mut().find(|(x, _)| *x == c) {
            Some((_, x)) => *x += e.seconds,
            None => v.push((c, e.seconds)),
        }
    }
    for (cs, v) in rho.iter_mut() {
        let r = run[*cs as usize];
        if r <= 0.0 {
            v.clear();
            continue;
        }
        for (_, x) in v.iter_mut() {
            *x /= r;
        }
        let sum: f64 = v.iter().map(|(_, x)| x).sum();
        if sum > 1.0 {
            for (_, x) in v.iter_mut() {
                *x /= sum;
            }
        }
    }
    let mut out = Vec::with_capacity(entries.len());
    for e in entries.iter().copied() {
        let Culprit::Stage(cs) = e.culprit() else {
            out.push(e);
            continue;
        };
        if e.resource != Resource::Slots {
            out.push(e);
            continue;
        }
        let shares = rho.get(&cs).map(|v| v.as_slice()).unwrap_or(&[]);
        let passed: f64 = shares.iter().map(|(_, x)| x).sum();
        for &(x, r) in shares {
            if r > 0.0 {
                out.push(e.with_culprit(x, Some(cs), e.seconds * r));
            }
        }
        let stays = e.seconds * (1.0 - passed);
        if stays > 1e-12 {
            out.push(Entry {
                seconds: stays,
                ..e
            });
        }
    }
    out
}
