//! Level-4 blame for a set of victims: the sweeps over every (host,
//! resource) in parallel, the slot sweep, and the options of section 5.

use std::sync::atomic::{AtomicUsize, Ordering};

use rustc_hash::FxHashMap;

use super::critical_path::critical_path;
use super::model::{Dataset, Micros, WindowRow, N_RES};
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
}

/// One level-4 node: seconds of `stage`'s blocked time on `resource`
/// (`detail`) at `host` (`None`: cluster-wide slots) attributed to `culprit`
/// (`via`: the slot holder the blame passed through, section 5b).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub stage: u32,
    pub resource: Resource,
    pub detail: u32,
    pub host: Option<u32>,
    pub culprit: Culprit,
    pub via: Option<u32>,
    pub seconds: f64,
}

/// Level-4 nodes in chunks (one per sweep job, in job order), so that the
/// result of a large analysis is never copied into one vector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Level4 {
    chunks: Vec<Vec<Entry>>,
}

impl Level4 {
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
}

impl From<Vec<Entry>> for Level4 {
    fn from(v: Vec<Entry>) -> Self {
        Level4 { chunks: vec![v] }
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

/// Level-4 blame of the victims' stages.
pub fn blame(ds: &Dataset, opts: &BlameOptions) -> Result<(Victims, Level4), MethodError> {
    let victims = resolve_victims(ds, opts)?;
    let win = window(opts);
    let entries = match opts.slots {
        SlotBlame::Direct => level4(ds, &victims.stages, win, opts.attribution),
        SlotBlame::Transitive => {
            // Holders need their own level 4: explain every stage, then keep the victims'.
            let all = vec![true; ds.stages.len()];
            let entries = level4(ds, &all, win, opts.attribution);
            let kept: Vec<Entry> = transitive(ds, &entries, win)
                .into_iter()
                .filter(|e| victims.stages[e.stage as usize])
                .collect();
            kept.into()
        }
    };
    Ok((victims, entries))
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
    // Workers take jobs in order; results land in their job's slot, so the
    // output order does not depend on thread timing.
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(jobs.len());
    let results: Vec<Vec<(usize, Vec<Entry>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let j = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&g) = jobs.get(j) else { break };
                        let mut entries = Vec::new();
                        if g == usize::MAX {
                            let slot_rows: Vec<&[super::model::HostRow]> = (0..ds.hosts.len())
                                .map(|h| ds.host_rows[h * N_RES + slots_idx].as_slice())
                                .collect();
                            let cells = sweep::sweep_slots(ds, &slot_rows, victim, win, mode);
                            push_cells(&mut entries, cells, Resource::Slots, None);
                        } else {
                            let host = (g / N_RES) as u32;
                            let r = Resource::ALL[g % N_RES];
                            let rows = [ds.windows[g].as_slice(), synth[g].as_slice()];
                            let cells = sweep::sweep_group(
                                ds,
                                r,
                                &rows,
                                &ds.host_rows[g],
                                victim,
                                win,
                                mode,
                            );
                            push_cells(&mut entries, cells, r, Some(host));
                        }
                        out.push((j, entries));
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
    let mut by_job: Vec<(usize, Vec<Entry>)> = results.into_iter().flatten().collect();
    by_job.sort_unstable_by_key(|(j, _)| *j);
    // Within a job the order is that of an FxHashMap (no random seed):
    // deterministic for the same data.
    Level4 {
        chunks: by_job.into_iter().map(|(_, e)| e).collect(),
    }
}

fn push_cells(out: &mut Vec<Entry>, cells: Cells, resource: Resource, host: Option<u32>) {
    out.extend(
        cells
            .into_iter()
            .map(|((stage, detail, c), seconds)| Entry {
                stage,
                resource,
                detail,
                host,
                culprit: Culprit::from_code(c),
                via: None,
                seconds,
            }),
    );
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
        match v.iter_mut().find(|(c, _)| *c == e.culprit) {
            Some((_, x)) => *x += e.seconds,
            None => v.push((e.culprit, e.seconds)),
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
    for e in entries.iter().cloned() {
        let Culprit::Stage(cs) = e.culprit else {
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
                out.push(Entry {
                    culprit: x,
                    via: Some(cs),
                    seconds: e.seconds * r,
                    ..e.clone()
                });
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
