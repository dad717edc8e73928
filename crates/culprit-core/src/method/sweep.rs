//! The streaming sweep of one (host, resource): elementary windows and the
//! conserving attribution of victim blocked time (method.md sections 2, 5).
//!
//! Rows are turned into start/end events and sorted; between two consecutive
//! event times every active row is uniform (section 2), so the interval is an
//! elementary window. In window `k` victim row `v` gives consumer row `c` the
//! share `WT(v,k) * RA(c,k) / D(v,k)`; since `c`'s rate `A_c` is constant over
//! its row, the sum over the windows both rows share is
//! `A_c * (Phi_v(end) - Phi_v(start))`, where `Phi_v` integrates
//! `rest_v / D_v` over time. So per window only the active victims' `Phi`
//! advance (work linear in the active rows), and a pair is settled only at
//! the start and end events of its rows, into its (victim key, consumer
//! stage) cell of a small dense matrix over the keys and stages active at
//! the moment: state is bounded by the rows active at once, work is linear
//! in the rows (plus sorting) and never in the number of task pairs.

use rustc_hash::FxHashMap;

use super::beta;
use super::model::{Dataset, HostRow, Micros, WindowRow};
use super::series::Windows;
use crate::{MethodError, Resource};

/// Culprit codes beside stage ids (stage ids never reach them: a dataset
/// has fewer than `u32::MAX - 2` stages).
pub const GC: u32 = u32::MAX;
pub const EXTERNAL: u32 = u32::MAX - 1;
pub const UNKNOWN: u32 = u32::MAX - 2;

/// How blocked seconds are split (method.md section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attribution {
    /// The conserving per-window split (the default).
    Window,
    /// The paper's aggregate form, `BC4 = BC3 * beta_cs / sum beta` (000 eq.
    /// 9-10); blocked time where the victim acquired nothing (slot waits,
    /// GC pauses) has no beta and goes to `unknown`.
    Paper,
}

/// Blame of one (window, victim stage, detail, culprit), in seconds; the
/// window is an index into the analysis' [`Windows`].
pub type Cells = FxHashMap<(u32, u32, u32, u32), f64>;

const EPS: f64 = 1e-12;

/// What a sweep explains: the victim stages and, optionally, only some of
/// their tasks (`tasks=last`); the other tasks remain consumers.
#[derive(Debug, Clone, Copy)]
pub struct Explained<'a> {
    stages: &'a [bool],
    tasks: Option<&'a [bool]>,
}

impl<'a> Explained<'a> {
    /// Every task of the `stages` marked.
    pub fn stages(stages: &'a [bool]) -> Explained<'a> {
        Explained {
            stages,
            tasks: None,
        }
    }

    /// The tasks marked in `tasks` (when given) of the `stages` marked.
    pub fn new(stages: &'a [bool], tasks: Option<&'a [bool]>) -> Explained<'a> {
        Explained { stages, tasks }
    }

    /// The stages marked, by stage id.
    pub fn stage_mask(&self) -> &'a [bool] {
        self.stages
    }

    /// The tasks marked, by task id, when only some tasks are.
    pub fn task_mask(&self) -> Option<&'a [bool]> {
        self.tasks
    }

    /// Is stage `s` (some of its tasks) explained?
    pub fn stage(&self, s: u32) -> bool {
        self.stages[s as usize]
    }

    /// Is task `t` of stage `s` explained?
    pub fn task(&self, t: u32, s: u32) -> bool {
        self.stages[s as usize] && self.tasks.is_none_or(|m| m[t as usize])
    }
}

/// Clips `[s, e)` to `[from, to)`; `None` when nothing is left.
#[inline]
pub fn clip(s: Micros, e: Micros, from: Micros, to: Micros) -> Option<(Micros, Micros)> {
    let (s2, e2) = (s.max(from), e.min(to));
    (s2 < e2).then_some((s2, e2))
}

/// One row in the sweep. Rates are per microsecond.
struct Row {
    /// Local id of the row's task: a victim's blocked time is never split
    /// over rows of its own task (method.md section 5: the consumers are the
    /// other tasks).
    task: u32,
    /// Local id of the row's stage (as a consumer).
    stage: u32,
    /// Local id of the row's (stage, detail) (as a victim).
    key: u32,
    /// Acquired units per microsecond (the row as a consumer).
    a: f64,
    /// Blocked seconds per microsecond left after GC (the row as a victim).
    rest: f64,
    /// The victim's run time, seconds (the paper's beta).
    run: f64,
    victim: bool,
    /// Integral of the row's attribution density so far.
    phi: f64,
    /// Seconds (window mode) or beta (paper mode) to `external` / `unknown`.
    ext: f64,
    unk: f64,
    /// Paper mode: blocked seconds distributed by beta.
    total: f64,
}

/// Adds `x` to the entry of `key` in a short list.
#[inline]
fn add_to<K: PartialEq + Copy>(list: &mut Vec<(K, f64)>, key: K, x: f64) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, v)) => *v += x,
        None => list.push((key, x)),
    }
}

/// A set of row indices with O(1) insert and remove.
struct ActiveSet {
    items: Vec<u32>,
    pos: Vec<u32>,
}

impl ActiveSet {
    fn new(n: usize) -> Self {
        ActiveSet {
            items: Vec::new(),
            pos: vec![u32::MAX; n],
        }
    }
    fn insert(&mut self, i: u32) {
        self.pos[i as usize] = self.items.len() as u32;
        self.items.push(i);
    }
    fn remove(&mut self, i: u32) {
        let p = self.pos[i as usize];
        if p == u32::MAX {
            return;
        }
        let last = *self.items.last().expect("non-empty");
        self.items.swap_remove(p as usize);
        if (p as usize) < self.items.len() {
            self.pos[last as usize] = p;
        }
        self.pos[i as usize] = u32::MAX;
    }
}

/// Attributes the blocked time of victim rows on one (host, resource), in
/// each of `windows` (rows are cut at the window bounds: each window gets
/// what a sweep of that window alone gives).
pub fn sweep_group(
    ds: &Dataset,
    resource: Resource,
    rows: &[&[WindowRow]],
    host_rows: &[HostRow],
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
) -> Result<Cells, MethodError> {
    let Group {
        tasks,
        mut sweep,
        mut events,
        stages,
        keys,
        gc_by_key,
    } = Group::collect(ds, resource, rows, victim, windows, mode)?;
    let mut cells = Cells::default();
    // GC seconds go to `gc` whole, first (section 5); in the paper form a GC
    // pause is a window where the victim acquired nothing: no beta, `unknown`.
    let gc_to = match mode {
        Attribution::Window => GC,
        Attribution::Paper => UNKNOWN,
    };
    for (k, &g) in gc_by_key.iter().enumerate() {
        if g > 0.0 {
            let (vs, d, w) = keys[k];
            cells.insert((w, vs, d, gc_to), g);
        }
    }
    if !sweep.iter().any(|r| r.victim) {
        cells.retain(|_, v| *v > EPS);
        return Ok(cells);
    }
    // Host rows are events too, numbered after the sweep rows.
    let base = sweep.len() as u32;
    let host_rates = host_events(host_rows, windows.whole(), base, &mut events);
    events.sort_unstable_by_key(|e| e.0);

    let mut state = Settlement::new(keys.len(), stages.len(), tasks, sweep.len());
    let mut hosts: Vec<u32> = Vec::new();
    let mut prev = events.first().map_or(0, |e| e.0);
    for &(t, ev) in &events {
        if t > prev && !state.victims.items.is_empty() {
            let rates = window_rates(&sweep, &state.active, &hosts, &host_rates, base);
            state.integrate(&mut sweep, (t - prev) as f64, rates, mode);
        }
        prev = t;
        let (x, end) = (ev >> 1, ev & 1 == 1);
        if x >= base {
            if end {
                hosts.retain(|&h| h != x);
            } else {
                hosts.push(x);
            }
        } else if end {
            state.close(&sweep, x, mode);
        } else {
            state.open(&sweep, x);
        }
    }
    Ok(state.into_cells(&keys, &stages, mode, cells))
}

/// Checks that a task row's values are finite numbers (NaN or infinity
/// would be dropped by the sweep's comparisons and break conservation).
fn check_row(ds: &Dataset, resource: Resource, row: &WindowRow) -> Result<(), MethodError> {
    let name = || {
        let t = &ds.tasks[row.task as usize];
        let from = if t.has_windows {
            "task_windows"
        } else {
            "tasks totals"
        };
        format!(
            "task '{}', {} {from} row at {}..{} us",
            ds.task_names()[row.task as usize],
            resource.name(),
            row.start,
            row.end
        )
    };
    MethodError::check_finite(row.blocked, "blocked", name)?;
    MethodError::check_finite(row.acquired, "acquired", name)?;
    MethodError::check_finite(row.gc(), "gc", name)
}

/// Checks that the host rows of `host` for `resource` give finite numbers.
pub fn check_host_rows(
    ds: &Dataset,
    host: u32,
    resource: Resource,
    rows: &[HostRow],
) -> Result<(), MethodError> {
    for h in rows {
        let name = || {
            format!(
                "host '{}', {} host_windows row at {}..{} us",
                ds.hosts.name(host),
                resource.name(),
                h.start,
                h.end
            )
        };
        if let Some(c) = h.capacity {
            MethodError::check_finite(c, "capacity", name)?;
        }
        if let Some(u) = h.used {
            MethodError::check_finite(u, "used", name)?;
        }
    }
    Ok(())
}

/// The rows of one group as the sweep sees them (each cut at the window
/// bounds), with local dense ids for stages and (stage, detail, window)
/// keys, so that the hot loop indexes vectors instead of hashing.
struct Group {
    /// The number of local task ids.
    tasks: usize,
    sweep: Vec<Row>,
    /// (time, row index << 1 | is_end)
    events: Vec<(Micros, u32)>,
    /// Local -> global stage.
    stages: Vec<u32>,
    /// Local -> (global stage, detail, window).
    keys: Vec<(u32, u32, u32)>,
    /// Per local key, GC seconds.
    gc_by_key: Vec<f64>,
}

impl Group {
    fn collect(
        ds: &Dataset,
        resource: Resource,
        rows: &[&[WindowRow]],
        victim: Explained<'_>,
        windows: &Windows,
        mode: Attribution,
    ) -> Result<Group, MethodError> {
        let mut g = Group {
            tasks: 0,
            sweep: Vec::new(),
            events: Vec::new(),
            stages: Vec::new(),
            keys: Vec::new(),
            gc_by_key: Vec::new(),
        };
        let mut stage_ids: FxHashMap<u32, u32> = FxHashMap::default();
        let mut task_ids: FxHashMap<u32, u32> = FxHashMap::default();
        let mut key_ids: FxHashMap<(u32, u32, u32), u32> = FxHashMap::default();
        // The local ids of the last (task, detail, window) seen: rows come
        // grouped by task.
        let mut last = (u32::MAX, u32::MAX, u32::MAX);
        let mut last_ids = (0u32, 0u32, 0u32);
        for row in rows.iter().flat_map(|r| r.iter()) {
            check_row(ds, resource, row)?;
            let len = (row.end - row.start) as f64;
            if len <= 0.0 {
                continue;
            }
            let stage = row.stage;
            let is_victim = victim.task(row.task, stage);
            let (b, a, gc) = (row.blocked / len, row.acquired / len, row.gc() / len);
            let (mut rest, mut gc_rate) = (0.0, 0.0);
            if is_victim {
                let mut wt = b;
                if resource == Resource::Cpu && gc > 0.0 {
                    // A GC pause is blocked time; it goes to `gc` whole, first.
                    wt = wt.max(gc);
                    gc_rate = gc;
                    rest = wt - gc;
                } else {
                    rest = wt;
                }
            }
            let victim_row = is_victim && rest > 0.0;
            for (w, s, e) in windows.pieces(row.start, row.end) {
                if (row.task, row.detail, w) != last {
                    let st = *stage_ids.entry(stage).or_insert_with(|| {
                        g.stages.push(stage);
                        g.stages.len() as u32 - 1
                    });
                    let k = *key_ids.entry((stage, row.detail, w)).or_insert_with(|| {
                        g.keys.push((stage, row.detail, w));
                        g.gc_by_key.push(0.0);
                        g.keys.len() as u32 - 1
                    });
                    let n = task_ids.len() as u32;
                    let tk = *task_ids.entry(row.task).or_insert(n);
                    last = (row.task, row.detail, w);
                    last_ids = (st, k, tk);
                }
                if gc_rate > 0.0 {
                    g.gc_by_key[last_ids.1 as usize] += gc_rate * (e - s) as f64;
                }
                if a <= 0.0 && !victim_row {
                    continue; // neither consumer nor victim here
                }
                let i = g.sweep.len() as u32;
                g.sweep.push(Row {
                    task: last_ids.2,
                    stage: last_ids.0,
                    key: last_ids.1,
                    a,
                    rest,
                    run: if mode == Attribution::Paper {
                        let t = &ds.tasks[row.task as usize];
                        ((t.finish - t.launch) as f64 / 1e6).max(1e-6)
                    } else {
                        0.0
                    },
                    victim: victim_row,
                    phi: 0.0,
                    ext: 0.0,
                    unk: 0.0,
                    total: 0.0,
                });
                g.events.push((s, i << 1));
                g.events.push((e, (i << 1) | 1));
            }
        }
        g.tasks = task_ids.len();
        Ok(g)
    }
}

/// Host rows (capacity and measured use) as events numbered from `base`;
/// returns their rates per microsecond.
fn host_events(
    host_rows: &[HostRow],
    (from, to): (Micros, Micros),
    base: u32,
    events: &mut Vec<(Micros, u32)>,
) -> Vec<(Option<f64>, Option<f64>)> {
    let mut host_rates = Vec::new();
    for h in host_rows {
        let len = (h.end - h.start) as f64;
        let Some((s, e)) = clip(h.start, h.end, from, to) else {
            continue;
        };
        if len <= 0.0 || (h.capacity.is_none() && h.used.is_none()) {
            continue;
        }
        let i = base + host_rates.len() as u32;
        host_rates.push((h.capacity.map(|c| c / 1e6), h.used.map(|u| u / len)));
        events.push((s, i << 1));
        events.push((e, (i << 1) | 1));
    }
    host_rates
}

/// The rates in the current elementary window of what the active rows
/// acquire, of `external` (measured use beyond the rows') and of `unknown`
/// (capacity nobody used). Capacity and measured use are each the largest
/// rate of the host rows active then, never their sum.
struct WindowRates {
    total: f64,
    external: f64,
    unknown: f64,
}

fn window_rates(
    sweep: &[Row],
    active: &ActiveSet,
    hosts: &[u32],
    host_rates: &[(Option<f64>, Option<f64>)],
    base: u32,
) -> WindowRates {
    let total: f64 = active.items.iter().map(|&i| sweep[i as usize].a).sum();
    // Overlapping host rows describe the same machine: one value per
    // instant, the largest any active row gives (duplicates count once).
    let (mut cap, mut used) = (None::<f64>, None::<f64>);
    for &h in hosts {
        let (c, u) = host_rates[(h - base) as usize];
        if let Some(c) = c {
            cap = Some(cap.map_or(c, |x| x.max(c)));
        }
        if let Some(u) = u {
            used = Some(used.map_or(u, |x| x.max(u)));
        }
    }
    let external = used.map_or(0.0, |u| (u - total).max(0.0));
    let unknown = cap.map_or(0.0, |c| (c - used.unwrap_or(0.0).max(total)).max(0.0));
    WindowRates {
        total,
        external,
        unknown,
    }
}

/// The state of the sweep between events: active rows, and the shares of
/// (victim key, consumer stage) pairs not yet settled.
///
/// Keys with a victim row active and stages with a consumer row active each
/// have a small slot number: pair shares accumulate in `acc[key slot][stage
/// slot]` (no search per event) and move to `pairs` when the key or the
/// stage has no active row left.
struct Settlement {
    active: ActiveSet,
    victims: ActiveSet,
    /// Per local victim key: (local consumer stage, share) pairs, seconds
    /// or beta in paper mode.
    pairs: Vec<Vec<(u32, f64)>>,
    side: Vec<Side>,
    key_rows: Vec<u32>,
    stage_rows: Vec<u32>,
    key_slots: SlotSet,
    stage_slots: SlotSet,
    acc: Vec<Vec<f64>>,
    /// Per local task: its active consumer rows and the units per
    /// microsecond they acquire (left out of its own victims' split).
    task_rows: Vec<u32>,
    task_a: Vec<f64>,
}

impl Settlement {
    fn new(keys: usize, stages: usize, tasks: usize, rows: usize) -> Settlement {
        Settlement {
            task_rows: vec![0; tasks],
            task_a: vec![0.0; tasks],
            active: ActiveSet::new(rows),
            victims: ActiveSet::new(rows),
            pairs: vec![Vec::new(); keys],
            side: vec![Side::default(); keys],
            key_rows: vec![0; keys],
            stage_rows: vec![0; stages],
            key_slots: SlotSet::new(keys),
            stage_slots: SlotSet::new(stages),
            acc: Vec::new(),
        }
    }

    /// Integrates an elementary window of `dt` microseconds: only the
    /// active victims' `Phi` (and their external and unknown) advance.
    fn integrate(&mut self, sweep: &mut [Row], dt: f64, rates: WindowRates, mode: Attribution) {
        let WindowRates {
            total,
            external,
            unknown,
        } = rates;
        let scale = (total + external + unknown) * 1e-12;
        for &v in &self.victims.items {
            let r = &mut sweep[v as usize];
            match mode {
                Attribution::Window => {
                    // Every consumer but the victim's own task.
                    let own = self.task_a[r.task as usize];
                    let d = (total - own).max(0.0) + external + unknown;
                    if d <= scale {
                        r.unk += r.rest * dt; // nobody else acquired anything
                    } else {
                        let f = r.rest / d;
                        r.phi += f * dt;
                        r.ext += f * external * dt;
                        r.unk += f * unknown * dt;
                    }
                }
                Attribution::Paper => {
                    // Rates per microsecond: the window's beta weight
                    // (section 4) per unit a culprit acquires.
                    match beta::weight(r.rest, r.a, r.run) {
                        None => {
                            // No beta where the victim acquired nothing.
                            self.side[r.key as usize].unknown += r.rest * dt;
                        }
                        Some(f) => {
                            r.total += r.rest * dt;
                            r.phi += f * dt;
                            r.ext += f * external * dt;
                            r.unk += f * unknown * dt;
                        }
                    }
                }
            }
        }
    }

    /// Row `x` starts: a consumer's pairs start from the victims' current
    /// `Phi` (subtracted now, added back when settled).
    fn open(&mut self, sweep: &[Row], x: u32) {
        let xr = &sweep[x as usize];
        let (xa, xstage, xkey, xvictim, xtask) = (xr.a, xr.stage, xr.key, xr.victim, xr.task);
        if xvictim {
            self.key_rows[xkey as usize] += 1;
            if self.key_rows[xkey as usize] == 1 {
                let ks = self.key_slots.insert(xkey);
                if self.acc.len() <= ks {
                    self.acc.resize(ks + 1, Vec::new());
                }
                if self.acc[ks].len() < self.stage_slots.slots() {
                    self.acc[ks].resize(self.stage_slots.slots(), 0.0);
                }
            }
        }
        if xa > 0.0 {
            self.stage_rows[xstage as usize] += 1;
            let ss = if self.stage_rows[xstage as usize] == 1 {
                let ss = self.stage_slots.insert(xstage);
                for row in self.acc.iter_mut() {
                    if row.len() <= ss {
                        row.resize(ss + 1, 0.0);
                    }
                }
                ss
            } else {
                self.stage_slots.slot[xstage as usize] as usize
            };
            self.task_rows[xtask as usize] += 1;
            self.task_a[xtask as usize] += xa;
            for &v in &self.victims.items {
                let r = &sweep[v as usize];
                if r.phi != 0.0 && r.task != xtask {
                    self.acc[self.key_slots.slot[r.key as usize] as usize][ss] -= xa * r.phi;
                }
            }
        }
        self.active.insert(x);
        if xvictim {
            self.victims.insert(x);
        }
    }

    /// Row `x` ends: its pairs are settled, as victim against the consumers
    /// still active and as consumer against the victims still active; a key
    /// or stage with no active row left moves its shares to `pairs`.
    fn close(&mut self, sweep: &[Row], x: u32, mode: Attribution) {
        let xr = &sweep[x as usize];
        let (xa, xstage, xkey, xvictim, xtask) = (xr.a, xr.stage, xr.key, xr.victim, xr.task);
        if xvictim {
            let (phi, ks) = (xr.phi, self.key_slots.slot[xkey as usize] as usize);
            let row = &mut self.acc[ks];
            for &c in &self.active.items {
                let cr = &sweep[c as usize];
                if cr.task != xtask && cr.a > 0.0 {
                    row[self.stage_slots.slot[cr.stage as usize] as usize] += cr.a * phi;
                }
            }
            let sd = &mut self.side[xkey as usize];
            if mode == Attribution::Window {
                // Seconds: external and unknown straight to the key.
                sd.external += xr.ext;
                sd.unknown += xr.unk;
            } else {
                // Beta of external and unknown, beside the stages'.
                sd.beta_external += xr.ext;
                sd.beta_unknown += xr.unk;
                sd.paper_total += xr.total;
            }
            self.victims.remove(x);
        }
        if xa > 0.0 {
            let ss = self.stage_slots.slot[xstage as usize] as usize;
            let t = xtask as usize;
            self.task_rows[t] -= 1;
            // Exactly zero once the task has no active row (no drift).
            self.task_a[t] = if self.task_rows[t] == 0 {
                0.0
            } else {
                self.task_a[t] - xa
            };
            for &v in &self.victims.items {
                let r = &sweep[v as usize];
                if r.task != xtask {
                    self.acc[self.key_slots.slot[r.key as usize] as usize][ss] += xa * r.phi;
                }
            }
        }
        self.active.remove(x);
        if xvictim {
            self.key_rows[xkey as usize] -= 1;
            if self.key_rows[xkey as usize] == 0 {
                let ks = self.key_slots.remove(xkey);
                let list = &mut self.pairs[xkey as usize];
                for &(s, ss) in &self.stage_slots.items {
                    let v = &mut self.acc[ks][ss as usize];
                    if *v != 0.0 {
                        add_to(list, s, *v);
                        *v = 0.0;
                    }
                }
            }
        }
        if xa > 0.0 {
            self.stage_rows[xstage as usize] -= 1;
            if self.stage_rows[xstage as usize] == 0 {
                let ss = self.stage_slots.remove(xstage);
                for &(k, ks) in &self.key_slots.items {
                    let v = &mut self.acc[ks as usize][ss];
                    if *v != 0.0 {
                        add_to(&mut self.pairs[k as usize], xstage, *v);
                        *v = 0.0;
                    }
                }
            }
        }
    }

    /// The settled shares as level-4 cells: seconds as they are (window
    /// form), or each key's blocked seconds split by beta (paper form).
    fn into_cells(
        self,
        keys: &[(u32, u32, u32)],
        stages: &[u32],
        mode: Attribution,
        mut cells: Cells,
    ) -> Cells {
        for (k, list) in self.pairs.iter().enumerate() {
            let (vs, d, w) = keys[k];
            let Side {
                external: ext,
                unknown: unk,
                paper_total: total,
                beta_external,
                beta_unknown,
            } = self.side[k];
            match mode {
                Attribution::Window => {
                    for &(c, x) in list {
                        *cells.entry((w, vs, d, stages[c as usize])).or_insert(0.0) += x;
                    }
                    if ext > 0.0 {
                        *cells.entry((w, vs, d, EXTERNAL)).or_insert(0.0) += ext;
                    }
                    if unk > 0.0 {
                        *cells.entry((w, vs, d, UNKNOWN)).or_insert(0.0) += unk;
                    }
                }
                Attribution::Paper => {
                    // BC4 = BC3 * beta_cs / sum beta, per level-3 node; blocked
                    // time where the victim acquired nothing (no beta) is unknown.
                    if unk > 0.0 {
                        *cells.entry((w, vs, d, UNKNOWN)).or_insert(0.0) += unk;
                    }
                    let betas = list
                        .iter()
                        .map(|&(c, b)| (stages[c as usize], b))
                        .chain([(EXTERNAL, beta_external), (UNKNOWN, beta_unknown)]);
                    let sum: f64 = betas.clone().map(|(_, b)| b.max(0.0)).sum();
                    if total <= 0.0 {
                        continue;
                    }
                    if sum > 0.0 {
                        for (c, b) in betas.filter(|(_, b)| *b > 0.0) {
                            *cells.entry((w, vs, d, c)).or_insert(0.0) += total * b / sum;
                        }
                    } else {
                        *cells.entry((w, vs, d, UNKNOWN)).or_insert(0.0) += total;
                    }
                }
            }
        }
        cells.retain(|_, v| *v > EPS);
        cells
    }
}

/// Per victim key of a group, what goes to no consumer stage: seconds to
/// `external` and `unknown` (window form), or in the paper form the blocked
/// seconds to split by beta and the beta of `external` and `unknown`.
#[derive(Debug, Clone, Copy, Default)]
struct Side {
    external: f64,
    unknown: f64,
    paper_total: f64,
    beta_external: f64,
    beta_unknown: f64,
}

/// A (waiting, holding) pair's seconds since its last settlement: `w`
/// waiting tasks times the holder's `H` gained since `snap`, now `h`.
#[inline]
fn settle(acc: &mut f64, snap: &mut f64, w: f64, h: f64) {
    *acc += w * (h - *snap);
    *snap = h;
}

/// Adds `x` unknown seconds to waiting stage `vs`, listing the stage in
/// `of` when it had none (a stage may be listed twice: readers take once).
#[inline]
fn add_unknown(unknown: &mut [f64], of: &mut Vec<u32>, vs: u32, x: f64) {
    if unknown[vs as usize] == 0.0 {
        of.push(vs);
    }
    unknown[vs as usize] += x;
}

/// Moves a pair's accumulated seconds into `cells`, in window `w`.
#[inline]
fn flush(cells: &mut Cells, x: &mut f64, w: u32, victim: u32, culprit: u32) {
    if *x != 0.0 {
        *cells.entry((w, victim, 0, culprit)).or_insert(0.0) += *x;
        *x = 0.0;
    }
}

/// Stages in a set, each with a slot number reused once it leaves.
struct SlotSet {
    /// (stage, slot)
    items: Vec<(u32, u32)>,
    slot: Vec<u32>,
    free: Vec<u32>,
    next: u32,
}

impl SlotSet {
    fn new(n: usize) -> Self {
        SlotSet {
            items: Vec::new(),
            slot: vec![u32::MAX; n],
            free: Vec::new(),
            next: 0,
        }
    }

    /// Slots handed out so far (the highest slot number + 1).
    fn slots(&self) -> usize {
        self.next as usize
    }

    fn insert(&mut self, s: u32) -> usize {
        let k = self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        });
        self.slot[s as usize] = k;
        self.items.push((s, k));
        k as usize
    }

    fn remove(&mut self, s: u32) -> usize {
        let k = self.slot[s as usize];
        self.items.retain(|&(x, _)| x != s);
        self.free.push(k);
        self.slot[s as usize] = u32::MAX;
        k as usize
    }
}

/// The cluster-wide slot sweep: a task's wait from `ready_time` to
/// `launch_time` is split over the stages holding slots by slot-seconds held;
/// free capacity (when `slots` host rows give it) goes to `unknown`.
///
/// All waiting tasks share one density `1 / (held + free)`, so its integral
/// `Phi` is global. A task starting or finishing costs O(1); a (waiting
/// stage, holding stage) pair is settled only when the waiting stage's count
/// changes or the holding stage starts or stops holding (see below), and at
/// each bound between `windows`, where every pair is settled into the window
/// that ends there.
pub fn sweep_slots(
    ds: &Dataset,
    slot_rows: &[&[HostRow]],
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
) -> Result<Cells, MethodError> {
    for (host, rows) in slot_rows.iter().enumerate() {
        check_host_rows(ds, host as u32, Resource::Slots, rows)?;
    }
    // One sweep per slot pool a victim waits in: a task waits only for the
    // slots of its own pool, held by tasks of that pool.
    let scopes = ds.slot_scopes();
    let mut pools: Vec<u32> = scopes
        .iter()
        .enumerate()
        .filter(|(i, _)| victim.stage(*i as u32))
        .map(|(_, s)| *s)
        .collect();
    pools.sort_unstable();
    pools.dedup();
    let mut cells = Cells::default();
    for pool in pools {
        let rows: Vec<(usize, HostRow)> = slot_rows
            .iter()
            .enumerate()
            .flat_map(|(host, r)| r.iter().map(move |h| (host, *h)))
            .filter(|(_, h)| h.scope == pool)
            .collect();
        let in_pool = |stage: u32| scopes[stage as usize] == pool;
        let part = sweep_slot_pool(ds, slot_rows.len(), &rows, in_pool, victim, windows, mode)?;
        if cells.is_empty() {
            cells = part;
        } else {
            for (k, v) in part {
                *cells.entry(k).or_insert(0.0) += v;
            }
        }
    }
    Ok(cells)
}

/// The slot sweep of one pool: its tasks (`in_pool` of their stage) and its
/// capacity rows `(host, row)` of `hosts` hosts.
fn sweep_slot_pool(
    ds: &Dataset,
    hosts: usize,
    slot_rows: &[(usize, HostRow)],
    in_pool: impl Fn(u32) -> bool,
    victim: Explained<'_>,
    windows: &Windows,
    mode: Attribution,
) -> Result<Cells, MethodError> {
    let (from, to) = windows.whole();
    // (time, kind: 0 hold, 1 wait, 2 capacity, 3 window bound, delta,
    // stage, capacity row or window)
    let mut events: Vec<(Micros, u8, i8, u32)> = Vec::new();
    for (i, t) in ds.tasks.iter().enumerate() {
        if !in_pool(t.stage) {
            continue;
        }
        if let Some((s, e)) = clip(t.launch, t.finish, from, to) {
            events.push((s, 0, 1, t.stage));
            events.push((e, 0, -1, t.stage));
        }
        if let Some(ready) = t.ready.filter(|_| victim.task(i as u32, t.stage)) {
            if let Some((s, e)) = clip(ready, t.launch, from, to) {
                events.push((s, 1, 1, t.stage));
                events.push((e, 1, -1, t.stage));
            }
        }
    }
    let mut cells = Cells::default();
    if !events.iter().any(|e| e.1 == 1) {
        return Ok(cells);
    }
    // (host, capacity) of each slot row; a host's capacity is the largest of
    // its active rows (overlapping rows count once), hosts add up.
    let caps: Vec<(usize, f64)> = slot_rows
        .iter()
        .map(|(host, h)| (*host, h.capacity.unwrap_or(0.0)))
        .collect();
    let mut host_caps: Vec<Vec<f64>> = vec![Vec::new(); hosts];
    let mut cap_rows = 0i64;
    for (i, (_, h)) in slot_rows.iter().enumerate() {
        if let (Some((s, e)), Some(_)) = (clip(h.start, h.end, from, to), h.capacity) {
            events.push((s, 2, 1, i as u32));
            events.push((e, 2, -1, i as u32));
        }
    }
    for (b, w) in windows.inner_bounds() {
        events.push((b, 3, 0, w));
    }
    // Only the time orders events: within one instant nothing is integrated.
    events.sort_unstable_by_key(|e| e.0);

    let n_st = ds.stages.len();
    // Per holding stage cs: H_cs = integral of held_cs dPhi, kept lazily as
    // (value, Phi) at its last change. A waiting stage vs with count W over
    // [a, b) owes cs exactly W * (H_cs(b) - H_cs(a)); so a hold event costs
    // O(1), and pairs are settled only at wait events (over the few stages
    // holding slots) and when a stage starts or stops holding.
    let mut held = vec![0i64; n_st];
    let mut h_val = vec![0.0f64; n_st];
    let mut h_phi = vec![0.0f64; n_st];
    let mut wait = vec![0i64; n_st];
    let mut last_u = vec![0.0f64; n_st]; // Psi at the last change of wait[s]
    let mut unknown = vec![0.0f64; n_st];
    // Stages with unknown seconds not yet moved to `cells`.
    let mut unknown_of: Vec<u32> = Vec::new();
    // The window the seconds accumulated now belong to.
    let mut cur = 0u32;
    let mut holders = SlotSet::new(n_st);
    let mut waiters = SlotSet::new(n_st);
    // Per (waiter slot, holder slot): H of the holder at the waiter's last
    // event (or the holder's start), and the seconds owed so far.
    let mut snap: Vec<Vec<f64>> = Vec::new();
    let mut acc: Vec<Vec<f64>> = Vec::new();
    let (mut total_held, mut capacity) = (0i64, 0.0f64);
    let (mut phi, mut psi) = (0.0f64, 0.0f64);
    let mut prev = events.first().map_or(0, |e| e.0);
    let h_now = |cs: usize, held: &[i64], h_val: &[f64], h_phi: &[f64], phi: f64| {
        h_val[cs] + held[cs] as f64 * (phi - h_phi[cs])
    };

    for &(t, kind, delta, id) in &events {
        if t > prev {
            let dt = (t - prev) as f64 / 1e6;
            let free = if cap_rows > 0 {
                (capacity - total_held as f64).max(0.0)
            } else {
                0.0
            };
            let d = total_held as f64 + free;
            if mode == Attribution::Paper || d <= EPS {
                psi += dt;
            } else {
                phi += dt / d;
                psi += dt * free / d;
            }
            prev = t;
        }
        match kind {
            0 => {
                let cs = id as usize;
                if held[cs] == 0 {
                    let hs = holders.insert(id);
                    for (row_s, row_a) in snap.iter_mut().zip(acc.iter_mut()) {
                        if row_s.len() <= hs {
                            row_s.resize(hs + 1, 0.0);
                            row_a.resize(hs + 1, 0.0);
                        }
                    }
                    for &(_, ws) in &waiters.items {
                        snap[ws as usize][hs] = h_val[cs];
                    }
                }
                h_val[cs] = h_now(cs, &held, &h_val, &h_phi, phi);
                h_phi[cs] = phi;
                held[cs] += delta as i64;
                total_held += delta as i64;
                if held[cs] == 0 {
                    let hs = holders.remove(id);
                    for &(vs, ws) in &waiters.items {
                        let ws = ws as usize;
                        acc[ws][hs] += wait[vs as usize] as f64 * (h_val[cs] - snap[ws][hs]);
                        flush(&mut cells, &mut acc[ws][hs], cur, vs, id);
                    }
                }
            }
            1 => {
                let vs = id as usize;
                let ws = if wait[vs] > 0 {
                    let ws = waiters.slot[vs] as usize;
                    let w = wait[vs] as f64;
                    for &(cs, hs) in &holders.items {
                        let h = h_now(cs as usize, &held, &h_val, &h_phi, phi);
                        settle(&mut acc[ws][hs as usize], &mut snap[ws][hs as usize], w, h);
                    }
                    add_unknown(&mut unknown, &mut unknown_of, id, w * (psi - last_u[vs]));
                    ws
                } else {
                    let ws = waiters.insert(id);
                    if acc.len() <= ws {
                        acc.resize(ws + 1, Vec::new());
                        snap.resize(ws + 1, Vec::new());
                    }
                    if acc[ws].len() < holders.slots() {
                        acc[ws].resize(holders.slots(), 0.0);
                        snap[ws].resize(holders.slots(), 0.0);
                    }
                    for &(cs, hs) in &holders.items {
                        snap[ws][hs as usize] = h_now(cs as usize, &held, &h_val, &h_phi, phi);
                    }
                    ws
                };
                wait[vs] += delta as i64;
                last_u[vs] = psi;
                if wait[vs] == 0 {
                    waiters.remove(id);
                    for &(cs, hs) in &holders.items {
                        flush(&mut cells, &mut acc[ws][hs as usize], cur, id, cs);
                    }
                }
            }
            2 => {
                let (host, c) = caps[id as usize];
                let active = &mut host_caps[host];
                let max = |a: &[f64]| a.iter().copied().fold(0.0f64, f64::max);
                capacity -= max(active);
                if delta > 0 {
                    active.push(c);
                } else if let Some(p) = active.iter().position(|&x| x == c) {
                    active.swap_remove(p);
                }
                capacity += max(active);
                cap_rows += delta as i64;
            }
            _ => {
                // A window bound: settle every pair and the unknown so far
                // into the window that ends here; waits go on in the next.
                for &(vs, ws) in &waiters.items {
                    let ws = ws as usize;
                    let w = wait[vs as usize] as f64;
                    for &(cs, hs) in &holders.items {
                        let h = h_now(cs as usize, &held, &h_val, &h_phi, phi);
                        let hs = hs as usize;
                        settle(&mut acc[ws][hs], &mut snap[ws][hs], w, h);
                        flush(&mut cells, &mut acc[ws][hs], cur, vs, cs);
                    }
                    let owed = w * (psi - last_u[vs as usize]);
                    add_unknown(&mut unknown, &mut unknown_of, vs, owed);
                    last_u[vs as usize] = psi;
                }
                for vs in unknown_of.drain(..) {
                    let u = std::mem::take(&mut unknown[vs as usize]);
                    if u != 0.0 {
                        *cells.entry((cur, vs, 0, UNKNOWN)).or_insert(0.0) += u;
                    }
                }
                cur = id;
            }
        }
    }
    // Every hold and wait ended, so every pair was settled; this covers
    // intervals left open (defensive).
    for &(vs, ws) in &waiters.items {
        let ws = ws as usize;
        for &(cs, hs) in &holders.items {
            let hs = hs as usize;
            let h = h_now(cs as usize, &held, &h_val, &h_phi, phi);
            acc[ws][hs] += wait[vs as usize] as f64 * (h - snap[ws][hs]);
            flush(&mut cells, &mut acc[ws][hs], cur, vs, cs);
        }
    }
    for vs in unknown_of {
        // A stage may be listed twice: take its seconds once.
        let u = std::mem::take(&mut unknown[vs as usize]);
        if u != 0.0 {
            *cells.entry((cur, vs, 0, UNKNOWN)).or_insert(0.0) += u;
        }
    }
    cells.retain(|_, v| *v > EPS);
    Ok(cells)
}
