//! The telemetry in memory, interned and grouped for the method: stages,
//! tasks, and the window rows of each (host, resource).

use arrow::array::{Array, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{Float64Type, TimestampMicrosecondType};
use rustc_hash::FxHashMap;

use crate::Resource;

/// Microseconds since the epoch.
pub type Micros = i64;

/// Interns strings to dense ids.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Interner {
    ids: FxHashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(s.to_string(), id);
        self.names.push(s.to_string());
        id
    }

    pub fn get(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Task ids to task numbers, compact: the ids' text in one string, where
/// each ends, and a table of task numbers hashed by id. About 30 bytes a
/// task at 1e7 tasks (ids of about 14 bytes), where a map of owned strings
/// took about 68 (its slots of 32 bytes, at most half full after it
/// doubles, and a heap allocation per id). Task `t` is the `t`-th id added.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskIds {
    text: String,
    /// Where the id of each task ends in `text`.
    ends: Vec<usize>,
    table: hashbrown::HashTable<u32>,
}

impl TaskIds {
    fn hash(id: &str) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(id)
    }

    fn name_in<'a>(text: &'a str, ends: &[usize], t: u32) -> &'a str {
        let t = t as usize;
        let start = if t == 0 { 0 } else { ends[t - 1] };
        &text[start..ends[t]]
    }

    /// The number of task `id`.
    pub fn get(&self, id: &str) -> Option<u32> {
        self.table
            .find(Self::hash(id), |&t| {
                Self::name_in(&self.text, &self.ends, t) == id
            })
            .copied()
    }

    /// The id of task `t`.
    pub fn name(&self, t: u32) -> &str {
        Self::name_in(&self.text, &self.ends, t)
    }

    /// Adds `id` (not there yet) as the next task; its number.
    pub fn push(&mut self, id: &str) -> u32 {
        let TaskIds { text, ends, table } = self;
        let t = ends.len() as u32;
        text.push_str(id);
        ends.push(text.len());
        table.insert_unique(Self::hash(id), t, |&u| {
            Self::hash(Self::name_in(text, ends, u))
        });
        t
    }

    /// The memory it holds, about.
    pub fn bytes(&self) -> usize {
        self.text.capacity()
            + self.ends.capacity() * std::mem::size_of::<usize>()
            + self.table.capacity() * (std::mem::size_of::<u32>() + 1)
    }

    /// Adds `id` as the next task if it is not there: `Ok` with its new
    /// number, else `Err` with the number it has (one hash and one probe
    /// where [`TaskIds::get`] then [`TaskIds::push`] took two of each).
    pub fn push_new(&mut self, id: &str) -> Result<u32, u32> {
        let TaskIds { text, ends, table } = self;
        let entry = table.entry(
            Self::hash(id),
            |&t| Self::name_in(text, ends, t) == id,
            |&u| Self::hash(Self::name_in(text, ends, u)),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(e) => Err(*e.get()),
            hashbrown::hash_table::Entry::Vacant(e) => {
                let t = ends.len() as u32;
                e.insert(t);
                text.push_str(id);
                ends.push(text.len());
                Ok(t)
            }
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Room for `tasks` more, with ids of `bytes` bytes in all.
    pub fn reserve(&mut self, tasks: usize, bytes: usize) {
        self.text.reserve(bytes);
        self.ends.reserve(tasks);
        let TaskIds { text, ends, table } = self;
        table.reserve(tasks, |&u| Self::hash(Self::name_in(text, ends, u)));
    }
}

#[derive(Debug, Clone)]
pub struct StageInfo {
    pub query: u32,
    pub id: String,
    /// Parent stage ids as given (resolved within the query).
    pub parents: Vec<String>,
    pub submit: Option<Micros>,
    /// From the stages table, else the first launch of its tasks.
    pub start: Option<Micros>,
    /// From the stages table, else the last finish of its tasks.
    pub end: Option<Micros>,
}

/// The totals of a task, used when it has no window rows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    pub cpu_seconds: f64,
    pub gc_seconds: f64,
    pub input_bytes: f64,
    pub output_bytes: f64,
    pub shuffle_read_bytes: f64,
    pub shuffle_write_bytes: f64,
    pub cpu_blocked: f64,
    pub disk_read_blocked: f64,
    pub disk_write_blocked: f64,
    pub network_blocked: f64,
    pub memory_blocked: f64,
    /// Seconds between launch and finish the task spent being shipped to its
    /// executor and reporting back (Spark's scheduler delay), not running.
    pub scheduler_delay: f64,
}

/// The rows of a `tasks` batch and their totals, made where the batch was
/// decoded ([`TaskRows::of`], on whichever core decoded it), so that the
/// one thread that adds tasks to a dataset ([`Dataset::add_task_rows`])
/// does not make and write them: on 5,000 hosts a read adds 394,000
/// tasks, 38 MB of totals (`docs/performance.md`).
#[derive(Debug, Clone)]
pub struct TaskRows {
    batch: RecordBatch,
    totals: Vec<Totals>,
}

impl TaskRows {
    /// The rows of `batch` with the totals of each (0 where a column is
    /// missing, NULL or not of 64-bit floats: the stored `tasks` table's
    /// are, by its schema).
    pub fn of(batch: RecordBatch) -> TaskRows {
        let f = |name: &str| {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_primitive_opt::<Float64Type>())
        };
        let cols = [
            "cpu_seconds",
            "gc_seconds",
            "input_bytes",
            "output_bytes",
            "shuffle_read_bytes",
            "shuffle_write_bytes",
            "cpu_blocked",
            "disk_read_blocked",
            "disk_write_blocked",
            "network_blocked",
            "memory_blocked",
            "scheduler_delay",
        ]
        .map(f);
        let val = |c: usize, i: usize| -> f64 {
            cols[c]
                .filter(|a| a.is_valid(i))
                .map_or(0.0, |a| a.value(i))
        };
        let totals = (0..batch.num_rows())
            .map(|i| Totals {
                cpu_seconds: val(0, i),
                gc_seconds: val(1, i),
                input_bytes: val(2, i),
                output_bytes: val(3, i),
                shuffle_read_bytes: val(4, i),
                shuffle_write_bytes: val(5, i),
                cpu_blocked: val(6, i),
                disk_read_blocked: val(7, i),
                disk_write_blocked: val(8, i),
                network_blocked: val(9, i),
                memory_blocked: val(10, i),
                scheduler_delay: val(11, i),
            })
            .collect();
        TaskRows { batch, totals }
    }
}

/// The totals of a dataset's tasks by task number, in pieces: each batch's
/// totals as [`TaskRows::of`] made them (those of its rows not added
/// dropped), and those of tasks added one by one.
#[derive(Debug, Default, Clone)]
struct TotalsPieces {
    /// The task number of each piece's first totals, ascending.
    firsts: Vec<u32>,
    pieces: Vec<Vec<Totals>>,
}

impl TotalsPieces {
    /// The totals of task `t` (every task has some).
    fn get(&self, t: u32) -> &Totals {
        let i = self.firsts.partition_point(|&f| f <= t) - 1;
        &self.pieces[i][(t - self.firsts[i]) as usize]
    }

    /// Adds the totals of task `t`, the next one.
    fn push(&mut self, t: usize, x: Totals) {
        match self.pieces.last_mut() {
            Some(last) => {
                debug_assert_eq!(
                    self.firsts.last().map(|&f| f as usize + last.len()),
                    Some(t)
                );
                last.push(x)
            }
            None => self.push_piece(t, vec![x]),
        }
    }

    /// Adds the totals of the tasks from `first` on, the next ones.
    fn push_piece(&mut self, first: usize, piece: Vec<Totals>) {
        if !piece.is_empty() {
            self.firsts.push(first as u32);
            self.pieces.push(piece);
        }
    }
}

/// What the sweeps and reads look at of a task, for every task: 48 bytes,
/// its totals apart ([`Dataset::totals`]), since passes over every task
/// (the slot sweep's events, the hosts to sweep, the runs, the read's
/// needs) read these alone: on 5,000 hosts a read holds 394,000 tasks,
/// and with the totals each such pass walked 57 MB (`docs/performance.md`).
#[derive(Debug, Clone)]
pub struct TaskInfo {
    pub stage: u32,
    pub host: u32,
    pub launch: Micros,
    pub finish: Micros,
    pub ready: Option<Micros>,
    pub has_windows: bool,
}

/// One metric row of a task for one resource, spread uniformly over `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRow {
    pub task: u32,
    /// The task's stage, kept here so the sweep needs no look-up per row.
    pub stage: u32,
    pub detail: u32,
    pub start: Micros,
    pub end: Micros,
    pub blocked: f64,
    pub acquired: f64,
    /// GC seconds (f32: GC time is measured in milliseconds; keeps a row at 48 bytes).
    pub gc: f32,
}

impl WindowRow {
    pub fn gc(&self) -> f64 {
        self.gc as f64
    }
}

/// One host metric row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostRow {
    pub start: Micros,
    pub end: Micros,
    pub capacity: Option<f64>,
    pub used: Option<f64>,
    /// For `slots` rows: the slot pool they belong to, an id of
    /// [`Dataset::scopes`]; 0 is the cluster's shared pool.
    pub scope: u32,
}

/// All telemetry the method needs, interned.
#[derive(Debug, Default, Clone)]
pub struct Dataset {
    pub queries: Interner,
    pub hosts: Interner,
    /// Details of requests (`lock`, `execution`, ...); id 0 is "no detail".
    pub details: Interner,
    pub stages: Vec<StageInfo>,
    stage_ids: FxHashMap<(u32, String), u32>,
    pub tasks: Vec<TaskInfo>,
    /// The totals of each task, by task number (apart from [`TaskInfo`]).
    totals: TotalsPieces,
    task_ids: TaskIds,
    /// Window rows per group `host * 6 + resource`.
    pub windows: Vec<Vec<WindowRow>>,
    /// Host rows per group `host * 6 + resource`.
    pub host_rows: Vec<Vec<HostRow>>,
    /// Slot pools (`host_windows.scope`) and the `app_id` and `pool` of
    /// queries; id 0 is "" (the shared pool, or none).
    pub scopes: Interner,
    /// Per query name: the scope ids of its `app_id` and `pool`.
    pub query_scopes: FxHashMap<String, [u32; 2]>,
    /// Rows that named an unknown task or host, skipped.
    pub skipped_rows: usize,
    /// Task rows skipped as duplicates that named another host than the
    /// first row of their task (their window rows may sit in another host
    /// bucket of the store).
    pub host_conflicts: usize,
    /// Slot holders' shares known before the analysis (section 5b; a
    /// focused dataset of a server, which then lacks those holders'
    /// neighbourhoods).
    pub shares: Option<std::sync::Arc<super::transitive::HolderShares>>,
    /// Per query, its first launch and last finish over the whole store,
    /// for a dataset that holds only part of its tasks (a focused read):
    /// the naive overlap (section 6) takes them in place of its tasks'.
    pub query_spans: FxHashMap<u32, (Micros, Micros)>,
}

pub const N_RES: usize = 6;

pub fn resource_index(r: Resource) -> usize {
    Resource::ALL.iter().position(|x| *x == r).expect("in ALL")
}

impl Dataset {
    pub fn new() -> Self {
        let mut d = Dataset::default();
        d.details.intern("");
        d.scopes.intern("");
        d
    }

    pub fn group(host: u32, r: Resource) -> usize {
        host as usize * N_RES + resource_index(r)
    }

    pub fn stage(&self, query: u32, id: &str) -> Option<u32> {
        self.stage_ids.get(&(query, id.to_string())).copied()
    }

    pub fn task(&self, id: &str) -> Option<u32> {
        self.task_ids.get(id)
    }

    pub fn stage_query(&self, stage: u32) -> u32 {
        self.stages[stage as usize].query
    }

    /// Finds or adds a stage.
    pub fn intern_stage(&mut self, query: &str, id: &str) -> u32 {
        let q = self.queries.intern(query);
        if let Some(s) = self.stage(q, id) {
            return s;
        }
        let s = self.stages.len() as u32;
        self.stages.push(StageInfo {
            query: q,
            id: id.to_string(),
            parents: Vec::new(),
            submit: None,
            start: None,
            end: None,
        });
        self.stage_ids.insert((q, id.to_string()), s);
        s
    }

    fn ensure_groups(&mut self) {
        let n = self.hosts.len() * N_RES;
        if self.windows.len() < n {
            self.windows.resize_with(n, Vec::new);
            self.host_rows.resize_with(n, Vec::new);
        }
    }

    /// Adds one task; returns its id (the existing one for a known task id).
    #[allow(clippy::too_many_arguments)]
    pub fn add_task(
        &mut self,
        id: &str,
        query: &str,
        stage: &str,
        host: &str,
        launch: Micros,
        finish: Micros,
        ready: Option<Micros>,
        totals: Totals,
    ) -> u32 {
        if let Some(t) = self.task(id) {
            return t;
        }
        let stage = self.intern_stage(query, stage);
        let host = self.hosts.intern(host);
        let t = self.task_ids.push(id);
        self.tasks.push(TaskInfo {
            stage,
            host,
            launch,
            finish: finish.max(launch),
            ready,
            has_windows: false,
        });
        self.totals.push(t as usize, totals);
        let st = &mut self.stages[stage as usize];
        st.start = Some(st.start.map_or(launch, |x| x.min(launch)));
        st.end = Some(st.end.map_or(finish, |x| x.max(finish)));
        self.ensure_groups();
        t
    }

    /// Adds one window row of a task.
    #[allow(clippy::too_many_arguments)]
    pub fn add_window(
        &mut self,
        task: u32,
        resource: Resource,
        detail: &str,
        start: Micros,
        end: Micros,
        blocked: f64,
        acquired: f64,
        gc: f64,
    ) {
        let detail = self.details.intern(detail);
        let t = &mut self.tasks[task as usize];
        t.has_windows = true;
        let g = Dataset::group(t.host, resource);
        let stage = t.stage;
        self.windows[g].push(WindowRow {
            task,
            stage,
            detail,
            start,
            end,
            blocked,
            acquired,
            gc: gc as f32,
        });
    }

    /// Adds one host metric row.
    pub fn add_host_row(&mut self, host: &str, resource: Resource, row: HostRow) {
        let host = self.hosts.intern(host);
        self.ensure_groups();
        self.host_rows[Dataset::group(host, resource)].push(row);
    }

    /// Sets a stage's parents.
    pub fn set_parents(&mut self, query: &str, stage: &str, parents: &[&str]) {
        let s = self.intern_stage(query, stage);
        self.stages[s as usize].parents = parents.iter().map(|p| p.to_string()).collect();
    }

    /// Adds the `stages` table (parents and times).
    pub fn add_stages(&mut self, batch: &RecordBatch) {
        let q = text(batch, "query_id");
        let s = text(batch, "stage_id");
        let parents = text(batch, "parent_ids");
        let (submit, start, end) = (
            time(batch, "submit_time"),
            time(batch, "start_time"),
            time(batch, "end_time"),
        );
        for i in 0..batch.num_rows() {
            let (Some(q), Some(s)) = (q.as_ref(), s.as_ref()) else {
                return;
            };
            if q.is_null(i) || s.is_null(i) {
                continue;
            }
            let id = self.intern_stage(q.value(i), s.value(i));
            let st = &mut self.stages[id as usize];
            st.parents = parents
                .as_ref()
                .filter(|p| p.is_valid(i))
                .map(|p| {
                    p.value(i)
                        .split(',')
                        .map(|x| x.trim().to_string())
                        .filter(|x| !x.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            st.submit = opt_time(&submit, i).or(st.submit);
            st.start = opt_time(&start, i).or(st.start);
            st.end = opt_time(&end, i).or(st.end);
        }
    }

    /// Adds the `tasks` table ([`Dataset::add_task_rows`]), its totals made
    /// here.
    pub fn add_tasks(&mut self, batch: &RecordBatch) {
        self.add_task_rows(TaskRows::of(batch.clone()));
    }

    /// Adds the tasks of `rows`, with their totals as [`TaskRows::of`] made
    /// them: a row without a launch or finish time is skipped, and so is a
    /// row whose task id was added before (the first row stands; one that
    /// names another host is counted in `host_conflicts`); the totals of
    /// the rows skipped are dropped.
    pub fn add_task_rows(&mut self, rows: TaskRows) {
        let TaskRows { batch, totals } = rows;
        let (Some(id), Some(q), Some(s), Some(h)) = (
            text(&batch, "task_id"),
            text(&batch, "query_id"),
            text(&batch, "stage_id"),
            text(&batch, "host"),
        ) else {
            return;
        };
        let (launch, finish, ready) = (
            time(&batch, "launch_time"),
            time(&batch, "finish_time"),
            time(&batch, "ready_time"),
        );
        let offsets = id.value_offsets();
        let ids_bytes = (offsets[offsets.len() - 1] - offsets[0]) as usize;
        self.task_ids.reserve(batch.num_rows(), ids_bytes);
        self.tasks.reserve(batch.num_rows());
        let first = self.tasks.len();
        // The rows added, if some are not (the totals of those are dropped).
        let mut added: Option<Vec<bool>> = None;
        let skip = |added: &mut Option<Vec<bool>>, i: usize| {
            added.get_or_insert_with(|| vec![true; batch.num_rows()])[i] = false;
        };
        // Consecutive rows usually belong to one stage: remember the last.
        let mut last_stage: Option<(usize, u32)> = None;
        for i in 0..batch.num_rows() {
            let (Some(l), Some(fin)) = (opt_time(&launch, i), opt_time(&finish, i)) else {
                self.skipped_rows += 1;
                skip(&mut added, i);
                continue;
            };
            if let Err(t) = self.task_ids.push_new(id.value(i)) {
                // A duplicate id: the first row stands.
                self.skipped_rows += 1;
                if self.hosts.get(h.value(i)) != Some(self.tasks[t as usize].host) {
                    self.host_conflicts += 1;
                }
                skip(&mut added, i);
                continue;
            }
            let stage = match last_stage {
                Some((j, st)) if q.value(j) == q.value(i) && s.value(j) == s.value(i) => st,
                _ => self.intern_stage(q.value(i), s.value(i)),
            };
            last_stage = Some((i, stage));
            let host = self.hosts.intern(h.value(i));
            self.tasks.push(TaskInfo {
                stage,
                host,
                launch: l,
                finish: fin.max(l),
                ready: opt_time(&ready, i),
                has_windows: false,
            });
            let st = &mut self.stages[stage as usize];
            st.start = Some(st.start.map_or(l, |x| x.min(l)));
            st.end = Some(st.end.map_or(fin, |x| x.max(fin)));
        }
        let totals = match added {
            None => totals,
            Some(added) => {
                let mut kept: Vec<Totals> = totals
                    .into_iter()
                    .zip(added)
                    .filter(|(_, a)| *a)
                    .map(|(x, _)| x)
                    .collect();
                // Collected in place: not the whole batch's room for a few.
                kept.shrink_to_fit();
                kept
            }
        };
        debug_assert_eq!(first + totals.len(), self.tasks.len());
        self.totals.push_piece(first, totals);
        self.ensure_groups();
    }

    /// Reserves room for `tasks` tasks at once (a store's count, or a
    /// read's estimate from the query index), so that loading does not
    /// regrow the task vector and table by doubling. At most 2^26 (a count
    /// from a damaged manifest or index must not allocate more than the
    /// load would; beyond it the vectors grow as rows come).
    pub fn reserve_tasks(&mut self, tasks: usize) {
        let tasks = tasks.min(1 << 26);
        self.tasks
            .reserve_exact(tasks.saturating_sub(self.tasks.len()));
        self.task_ids
            .reserve(tasks.saturating_sub(self.task_ids.len()), 0);
    }

    /// Reserves room for `rows` window rows, spread over the groups in
    /// proportion to each host's tasks (assuming four resources in use), so
    /// that loading does not regrow and copy the group vectors.
    pub fn reserve_windows(&mut self, rows: usize) {
        if self.tasks.is_empty() {
            return;
        }
        let mut per_host = vec![0usize; self.hosts.len()];
        for t in &self.tasks {
            per_host[t.host as usize] += 1;
        }
        let per_task = rows as f64 / self.tasks.len() as f64;
        for (h, n) in per_host.iter().enumerate() {
            let want = (*n as f64 * per_task / 4.0 * 1.1) as usize;
            for r in 0..N_RES {
                if r != resource_index(Resource::Slots) && r != resource_index(Resource::Memory) {
                    self.windows[h * N_RES + r].reserve(want);
                }
            }
        }
    }

    /// Adds `task_windows` rows (their tasks must have been added).
    pub fn add_task_windows(&mut self, batch: &RecordBatch) {
        self.add_task_windows_where(batch, &|_, _, _, _| true);
    }

    /// Adds the `task_windows` rows that `keep(host, resource, start, end)`
    /// keeps. A task with rows in `batch` counts as having windows even
    /// when none is kept (its totals are not spread over its run in their
    /// place).
    pub fn add_task_windows_where(
        &mut self,
        batch: &RecordBatch,
        keep: &dyn Fn(u32, Resource, Micros, Micros) -> bool,
    ) {
        let seen = self.fold_in(batch, keep);
        self.mark_has_windows(&seen);
    }

    /// Folds the `task_windows` rows of `batch` into the groups, those
    /// `keep(host, resource, start, end)` keeps, their tasks found by id;
    /// counts the rows skipped. Returns the tasks with a checked row
    /// ([`note_run`]).
    fn fold_in(
        &mut self,
        batch: &RecordBatch,
        keep: &dyn Fn(u32, Resource, Micros, Micros) -> bool,
    ) -> Vec<u32> {
        let Dataset {
            details,
            tasks,
            task_ids,
            windows,
            skipped_rows,
            ..
        } = self;
        let mut seen = Vec::new();
        *skipped_rows += fold(
            task_ids,
            tasks,
            batch,
            &mut |d| details.intern(d),
            &mut |task, group, row| {
                note_run(&mut seen, task);
                let (host, r) = (group / N_RES, Resource::ALL[group % N_RES]);
                if keep(host as u32, r, row.start, row.end) {
                    windows[group].push(row);
                }
            },
        );
        seen
    }

    /// Marks `tasks` as having window rows; how many were not before.
    fn mark_has_windows(&mut self, tasks: &[u32]) -> usize {
        let mut marked = 0;
        for &t in tasks {
            let t = &mut self.tasks[t as usize];
            marked += usize::from(!t.has_windows);
            t.has_windows = true;
        }
        marked
    }

    /// The tasks of this dataset, to check `task_windows` rows apart from
    /// it ([`TaskResolver`]).
    pub fn task_resolver(&self) -> TaskResolver {
        TaskResolver {
            ids: self.task_ids.clone(),
            tasks: self.tasks.iter().map(|t| (t.host, t.stage)).collect(),
        }
    }

    /// Adds rows checked by [`TaskResolver::resolve`]: the same as
    /// [`Dataset::add_task_windows_where`] with the batch and `keep` given
    /// there. Rows resolved against another number of tasks than this
    /// dataset has (it added tasks since) fail with an internal error and
    /// nothing is added: a caller's mistake, never a user's input.
    pub fn add_resolved(&mut self, resolved: ResolvedWindows) -> Result<(), crate::MethodError> {
        let ResolvedWindows {
            rows,
            seen,
            details: named,
            skipped,
            tasks,
        } = resolved;
        if tasks != self.tasks.len() {
            return Err(crate::MethodError::Internal(format!(
                "window rows matched against {tasks} tasks, the dataset has {}",
                self.tasks.len()
            )));
        }
        let (groups, numbered) = (self.windows.len(), named.len());
        if let Some((group, row)) = rows
            .iter()
            .find(|(g, r)| *g as usize >= groups || r.detail as usize > numbered)
        {
            return Err(crate::MethodError::Internal(format!(
                "a window row resolved to group {group} of {groups}, detail {} of {numbered}",
                row.detail
            )));
        }
        self.skipped_rows += skipped;
        // The details' numbers in this dataset: interned in the order they
        // first appeared, those of rows not kept too.
        let mut numbers = Vec::with_capacity(numbered + 1);
        numbers.push(0);
        numbers.extend(named.iter().map(|d| self.details.intern(d)));
        for (group, mut row) in rows {
            row.detail = numbers[row.detail as usize];
            self.windows[group as usize].push(row);
        }
        self.mark_has_windows(&seen);
        Ok(())
    }

    /// Marks the tasks with rows in `batch` (`task_windows` rows) as having
    /// windows, without keeping the rows: a focused read that found none
    /// of a task's rows where it read learns so that the task has them
    /// elsewhere (its totals then stand for nothing, as in a whole read).
    /// Returns how many tasks it marked that were not marked before.
    pub fn mark_windowed(&mut self, batch: &RecordBatch) -> usize {
        let mut seen = Vec::new();
        self.fold_task_windows(batch, &mut |_| 0, &mut |task, _, _| {
            note_run(&mut seen, task);
        });
        self.mark_has_windows(&seen)
    }

    /// Folds `task_windows` rows into `sink(task, group, row)` without
    /// storing them; `detail` interns a detail name. Returns the rows skipped
    /// (unknown task, no times, unknown resource).
    pub fn fold_task_windows(
        &self,
        batch: &RecordBatch,
        detail: &mut dyn FnMut(&str) -> u32,
        sink: &mut dyn FnMut(u32, usize, WindowRow),
    ) -> usize {
        fold(&self.task_ids, &self.tasks, batch, detail, sink)
    }

    /// The totals of task `t` (the tasks table's amounts, used where the
    /// task has no window rows).
    pub fn totals(&self, t: u32) -> &Totals {
        self.totals.get(t)
    }

    /// The id of every task, indexed by task number (the inverse of
    /// [`Dataset::task`]).
    pub fn task_names(&self) -> Vec<&str> {
        (0..self.task_ids.len() as u32)
            .map(|t| self.task_ids.name(t))
            .collect()
    }

    /// Per host, its tasks.
    pub fn tasks_by_host(&self) -> Vec<Vec<u32>> {
        let mut by = vec![Vec::new(); self.hosts.len()];
        for (i, t) in self.tasks.iter().enumerate() {
            by[t.host as usize].push(i as u32);
        }
        by
    }

    /// Adds the `app_id` and `pool` of `queries` rows: what names a query's
    /// slot pool ([`Dataset::slot_scopes`]).
    pub fn add_queries(&mut self, batch: &RecordBatch) {
        let Some(q) = text(batch, "query_id") else {
            return;
        };
        let (app, pool) = (text(batch, "app_id"), text(batch, "pool"));
        for i in 0..batch.num_rows() {
            if q.is_null(i) {
                continue;
            }
            let mut id = |a: &Option<StringArray>| match a {
                Some(a) if a.is_valid(i) => self.scopes.intern(a.value(i)),
                _ => 0,
            };
            let ids = [id(&app), id(&pool)];
            self.query_scopes.insert(q.value(i).to_string(), ids);
        }
    }

    /// The slot pool of each stage (method.md section 5, `slots`): its
    /// query's `app_id` when some `slots` rows belong to that scope (a Spark
    /// application's executors), else its `pool` when some do (a shared queue),
    /// else 0, the cluster's shared pool. A task waits only for slots of its
    /// own pool, held by tasks of that pool.
    pub fn slot_scopes(&self) -> Vec<u32> {
        let slots = resource_index(Resource::Slots);
        let mut scoped = vec![false; self.scopes.len()];
        for (g, rows) in self.host_rows.iter().enumerate() {
            if g % N_RES == slots {
                for r in rows {
                    scoped[r.scope as usize] = true;
                }
            }
        }
        if let Some(shared) = scoped.first_mut() {
            *shared = false;
        }
        if !scoped.contains(&true) {
            return vec![0; self.stages.len()];
        }
        let mut of_query: FxHashMap<u32, u32> = FxHashMap::default();
        self.stages
            .iter()
            .map(|st| {
                *of_query.entry(st.query).or_insert_with(|| {
                    let [app, pool] = self
                        .query_scopes
                        .get(self.queries.name(st.query))
                        .copied()
                        .unwrap_or([0, 0]);
                    [app, pool]
                        .into_iter()
                        .find(|&s| scoped[s as usize])
                        .unwrap_or(0)
                })
            })
            .collect()
    }

    /// Adds `host_windows` rows. Rows of hosts no task ran on are kept too.
    pub fn add_host_windows(&mut self, batch: &RecordBatch) {
        let (Some(h), Some(res)) = (text(batch, "host"), text(batch, "resource")) else {
            return;
        };
        let scope = text(batch, "scope");
        let (start, end) = (time(batch, "window_start"), time(batch, "window_end"));
        let f = |name: &str| {
            batch
                .column_by_name(name)
                .map(|c| c.as_primitive::<Float64Type>().clone())
        };
        let (cap, used) = (f("capacity"), f("used"));
        let opt = |a: &Option<arrow::array::Float64Array>, i: usize| {
            a.as_ref().filter(|a| a.is_valid(i)).map(|a| a.value(i))
        };
        for i in 0..batch.num_rows() {
            let (Some(s), Some(e), Ok(r)) = (
                opt_time(&start, i),
                opt_time(&end, i),
                res.value(i).parse::<Resource>(),
            ) else {
                self.skipped_rows += 1;
                continue;
            };
            let host = self.hosts.intern(h.value(i));
            let scope = match &scope {
                Some(a) if a.is_valid(i) => self.scopes.intern(a.value(i)),
                _ => 0,
            };
            self.ensure_groups();
            self.host_rows[Dataset::group(host, r)].push(HostRow {
                start: s,
                end: e,
                capacity: opt(&cap, i),
                used: opt(&used, i),
                scope,
            });
        }
    }

    /// Builds a dataset from the five tables (any may be empty).
    pub fn from_batches(
        stages: &[RecordBatch],
        tasks: &[RecordBatch],
        task_windows: &[RecordBatch],
        host_windows: &[RecordBatch],
    ) -> Dataset {
        let mut d = Dataset::new();
        for b in tasks {
            d.add_tasks(b);
        }
        for b in stages {
            d.add_stages(b);
        }
        for b in task_windows {
            d.add_task_windows(b);
        }
        for b in host_windows {
            d.add_host_windows(b);
        }
        d
    }

    /// The stage's display id, e.g. `3`.
    pub fn stage_name(&self, stage: u32) -> &str {
        &self.stages[stage as usize].id
    }

    /// The query of a stage, by name.
    pub fn stage_query_name(&self, stage: u32) -> &str {
        self.queries.name(self.stages[stage as usize].query)
    }

    /// The window rows a task known only by totals stands for: one row per
    /// resource from launch to finish (method.md section 2).
    pub fn synthesized_rows(&self, task: u32) -> Vec<(Resource, WindowRow)> {
        if self.tasks[task as usize].has_windows {
            return Vec::new();
        }
        self.synthesize(task)
    }

    /// The rows of [`Dataset::synthesized_rows`], whether or not the task has
    /// window rows (for callers that track that themselves).
    pub fn synthesize(&self, task: u32) -> Vec<(Resource, WindowRow)> {
        let t = &self.tasks[task as usize];
        let x = self.totals.get(task);
        let row = |blocked: f64, acquired: f64, gc: f64| WindowRow {
            task,
            stage: t.stage,
            detail: 0,
            start: t.launch,
            end: t.finish,
            blocked,
            acquired,
            gc: gc as f32,
        };
        let mut out = Vec::new();
        let mut push = |r: Resource, b: f64, a: f64, g: f64| {
            if b > 0.0 || a > 0.0 || g > 0.0 {
                out.push((r, row(b, a, g)));
            }
        };
        push(Resource::Cpu, x.cpu_blocked, x.cpu_seconds, x.gc_seconds);
        push(Resource::DiskRead, x.disk_read_blocked, x.input_bytes, 0.0);
        push(
            Resource::DiskWrite,
            x.disk_write_blocked,
            x.output_bytes + x.shuffle_write_bytes,
            0.0,
        );
        push(
            Resource::Network,
            x.network_blocked,
            x.shuffle_read_bytes,
            0.0,
        );
        push(Resource::Memory, x.memory_blocked, 0.0, 0.0);
        out
    }
}

/// Notes `task` in `seen` once per run of its rows (long runs as rows are
/// ingested, grouped by task; short ones as they are read back in order
/// of time: a task noted twice is marked twice, which is harmless).
fn note_run(seen: &mut Vec<u32>, task: u32) {
    if seen.last() != Some(&task) {
        seen.push(task);
    }
}

/// The checked `task_windows` rows of `batch`: `row(i, task, resource,
/// start, end)` for each row `i` whose task `tasks` knows, with times and
/// a known resource, in order; returns the rows skipped (the others).
fn checked_rows(
    task_ids: &TaskIds,
    batch: &RecordBatch,
    row: &mut dyn FnMut(usize, u32, Resource, Micros, Micros),
) -> usize {
    let (Some(id), Some(res)) = (text(batch, "task_id"), text(batch, "resource")) else {
        return 0;
    };
    let (start, end) = (time(batch, "window_start"), time(batch, "window_end"));
    let mut skipped = 0;
    // Consecutive rows as ingested usually name the same task, and often
    // the same resource: remember the last lookups (rows read back from
    // the store come in order of time, where they rarely do).
    let mut last: Option<(usize, u32)> = None;
    let mut last_res: Option<(usize, Resource)> = None;
    for i in 0..batch.num_rows() {
        let key = id.value(i);
        let task = match last {
            Some((j, t)) if id.value(j) == key => Some(t),
            _ => task_ids.get(key),
        };
        let (Some(task), Some(s), Some(e)) = (task, opt_time(&start, i), opt_time(&end, i)) else {
            skipped += 1;
            continue;
        };
        last = Some((i, task));
        let r = match last_res {
            Some((j, r)) if res.value(j) == res.value(i) => r,
            _ => match res.value(i).parse::<Resource>() {
                Ok(r) => r,
                Err(_) => {
                    skipped += 1;
                    continue;
                }
            },
        };
        last_res = Some((i, r));
        row(i, task, r, s, e);
    }
    skipped
}

fn fold(
    task_ids: &TaskIds,
    tasks: &[TaskInfo],
    batch: &RecordBatch,
    detail: &mut dyn FnMut(&str) -> u32,
    sink: &mut dyn FnMut(u32, usize, WindowRow),
) -> usize {
    let details = text(batch, "detail");
    let values = Values::of(batch);
    checked_rows(task_ids, batch, &mut |i, task, r, s, e| {
        let d = match details.as_ref().filter(|d| d.is_valid(i)) {
            Some(d) => detail(d.value(i)),
            None => 0,
        };
        let t = &tasks[task as usize];
        sink(
            task,
            Dataset::group(t.host, r),
            values.row(i, task, t.stage, d, (s, e)),
        );
    })
}

/// The measured columns of `task_windows` rows, to make [`WindowRow`]s of
/// them (a missing or null value is 0).
struct Values {
    blocked: Option<arrow::array::Float64Array>,
    acquired: Option<arrow::array::Float64Array>,
    gc: Option<arrow::array::Float64Array>,
}

impl Values {
    fn of(batch: &RecordBatch) -> Values {
        let f = |name: &str| {
            batch
                .column_by_name(name)
                .map(|c| c.as_primitive::<Float64Type>().clone())
        };
        Values {
            blocked: f("blocked"),
            acquired: f("acquired"),
            gc: f("gc"),
        }
    }

    /// Row `i`, of `task` of `stage`, its detail numbered `detail`.
    fn row(
        &self,
        i: usize,
        task: u32,
        stage: u32,
        detail: u32,
        (start, end): (Micros, Micros),
    ) -> WindowRow {
        let val = |a: &Option<arrow::array::Float64Array>| {
            a.as_ref()
                .filter(|a| a.is_valid(i))
                .map_or(0.0, |a| a.value(i))
        };
        WindowRow {
            task,
            stage,
            detail,
            start,
            end,
            blocked: val(&self.blocked),
            acquired: val(&self.acquired),
            gc: val(&self.gc) as f32,
        }
    }
}

/// The tasks of a dataset, apart from it, to check and filter
/// `task_windows` rows on another thread while the dataset takes the rows
/// checked before ([`Dataset::task_resolver`]): looking up a task id is
/// most of what adding a row costs. The dataset must not add tasks
/// meanwhile ([`Dataset::add_resolved`] refuses the rows if it did).
#[derive(Debug)]
pub struct TaskResolver {
    ids: TaskIds,
    /// The host and the stage of each task.
    tasks: Vec<(u32, u32)>,
}

/// `task_windows` rows checked by a [`TaskResolver`], for
/// [`Dataset::add_resolved`].
#[derive(Debug)]
pub struct ResolvedWindows {
    /// The rows kept, with their groups ([`Dataset::group`]), their
    /// details numbered in `details` (from 1; 0: none).
    rows: Vec<(u32, WindowRow)>,
    /// Every task with a checked row, kept or not (once per run of rows).
    seen: Vec<u32>,
    /// The details of the checked rows, kept or not, in the order they
    /// first appear (interned as adding every row would).
    details: Vec<String>,
    skipped: usize,
    /// The tasks the resolver knew.
    tasks: usize,
}

impl ResolvedWindows {
    /// The rows kept.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl TaskResolver {
    /// The memory it holds, about.
    pub fn bytes(&self) -> usize {
        self.ids.bytes() + self.tasks.capacity() * std::mem::size_of::<(u32, u32)>()
    }

    /// What [`Dataset::add_task_windows_where`] would do with `batch` and
    /// `keep`, done here: its rows checked, their tasks found and the rows
    /// `keep(host, resource, start, end)` keeps made the dataset's rows, so
    /// that adding them is only pushing each to its group.
    pub fn resolve(
        &self,
        batch: &RecordBatch,
        keep: &dyn Fn(u32, Resource, Micros, Micros) -> bool,
    ) -> ResolvedWindows {
        let details = text(batch, "detail");
        let values = Values::of(batch);
        let mut rows = Vec::new();
        let mut seen: Vec<u32> = Vec::new();
        // The details in the order they first appear, numbered from 1 (0:
        // none), renumbered by the dataset's interner when added.
        let mut named: Vec<String> = Vec::new();
        let mut numbers: rustc_hash::FxHashMap<&str, u32> = Default::default();
        let mut last_detail: Option<(usize, u32)> = None;
        let skipped = checked_rows(&self.ids, batch, &mut |i, task, r, s, e| {
            note_run(&mut seen, task);
            let mut detail = 0;
            if let Some(d) = details.as_ref().filter(|d| d.is_valid(i)) {
                detail = match last_detail {
                    Some((j, n)) if d.value(j) == d.value(i) => n,
                    _ => *numbers.entry(d.value(i)).or_insert_with(|| {
                        named.push(d.value(i).to_string());
                        named.len() as u32
                    }),
                };
                last_detail = Some((i, detail));
            }
            let (host, stage) = self.tasks[task as usize];
            if keep(host, r, s, e) {
                rows.push((
                    Dataset::group(host, r) as u32,
                    values.row(i, task, stage, detail, (s, e)),
                ));
            }
        });
        ResolvedWindows {
            rows,
            seen,
            details: named,
            skipped,
            tasks: self.tasks.len(),
        }
    }
}

fn text(batch: &RecordBatch, name: &str) -> Option<StringArray> {
    batch
        .column_by_name(name)
        .map(|c| c.as_string::<i32>().clone())
}

fn time(
    batch: &RecordBatch,
    name: &str,
) -> Option<arrow::array::PrimitiveArray<TimestampMicrosecondType>> {
    batch
        .column_by_name(name)
        .map(|c| c.as_primitive::<TimestampMicrosecondType>().clone())
}

fn opt_time(
    a: &Option<arrow::array::PrimitiveArray<TimestampMicrosecondType>>,
    i: usize,
) -> Option<Micros> {
    a.as_ref().filter(|a| a.is_valid(i)).map(|a| a.value(i))
}

#[cfg(test)]
mod tests {
    use super::{Dataset, TaskIds};
    use crate::batches::{TableBuilder, Value};
    use crate::{Resource, Table};
    use std::collections::HashMap;

    /// Each task's totals are its own row's, by task number, when a batch's
    /// totals are made apart ([`super::TaskRows`]) and some of its rows are
    /// not added (a duplicate id, no launch time): over two batches, a
    /// task added alone between them and one added alone first, and with
    /// NULL and missing amounts (0). Checked against the input's values.
    #[test]
    fn totals_made_apart_are_each_added_tasks_own() {
        use super::{TaskRows, Totals};
        use Value::{Null, F, S, T};
        // (id, launch, cpu_seconds, scheduler_delay): the input.
        let rows: [(&str, Option<i64>, Option<f64>, f64); 7] = [
            ("a", Some(0), Some(1.5), 0.25),
            ("b", None, Some(2.5), 0.5),
            ("c", Some(5), None, 0.75),
            ("a", Some(9), Some(3.5), 1.0),
            ("d", Some(1), Some(4.5), 1.25),
            ("e", Some(2), Some(5.5), 1.5),
            ("c", Some(3), Some(6.5), 1.75),
        ];
        let mut b = TableBuilder::new(Table::Tasks, rows.len());
        for (id, launch, cpu, delay) in rows {
            b.row(&[
                ("task_id", S(id)),
                ("query_id", S("q")),
                ("stage_id", S("s")),
                ("host", S(if id == "a" { "h1" } else { "h0" })),
                ("launch_time", launch.map_or(Null, T)),
                ("finish_time", T(100)),
                ("cpu_seconds", cpu.map_or(Null, F)),
                ("scheduler_delay", F(delay)),
            ]);
        }
        // Without the column `shuffle_read_bytes` (its totals are 0).
        let whole = b.finish_unchecked();
        let schema = whole.schema();
        let columns: Vec<usize> = (0..schema.fields().len())
            .filter(|&c| schema.field(c).name() != "shuffle_read_bytes")
            .collect();
        let batch = whole.project(&columns).expect("project");
        assert!(batch.column_by_name("shuffle_read_bytes").is_none());
        let mut ds = Dataset::new();
        let alone = |cpu: f64| Totals {
            cpu_seconds: cpu,
            ..Totals::default()
        };
        ds.add_task("z", "q", "s", "h0", 0, 1, None, alone(10.0));
        ds.add_task_rows(TaskRows::of(batch.slice(0, 4)));
        ds.add_task("y", "q", "s", "h0", 0, 1, None, alone(20.0));
        ds.add_task_rows(TaskRows::of(batch.slice(4, 3)));
        // The input's first row of each id with a launch time stands; "b"
        // has none; the second "a" and "c" are duplicates.
        let want: [(&str, f64, f64); 6] = [
            ("z", 10.0, 0.0),
            ("a", 1.5, 0.25),
            ("c", 0.0, 0.75),
            ("y", 20.0, 0.0),
            ("d", 4.5, 1.25),
            ("e", 5.5, 1.5),
        ];
        assert_eq!(ds.tasks.len(), want.len());
        for (id, cpu, delay) in want {
            let t = ds.task(id).expect(id);
            let x = ds.totals(t);
            assert_eq!((x.cpu_seconds, x.scheduler_delay), (cpu, delay), "{id}");
            // A column the batch does not have, and one of NULLs.
            assert_eq!(x.shuffle_read_bytes, 0.0, "{id}");
            assert_eq!(x.input_bytes, 0.0, "{id}");
        }
        assert_eq!(ds.skipped_rows, 3);
        // A task added alone after a piece continues it.
        ds.add_task("x", "q", "s", "h0", 0, 1, None, alone(30.0));
        assert_eq!(ds.totals(ds.task("x").expect("x")).cpu_seconds, 30.0);
        assert_eq!(ds.totals(ds.task("e").expect("e")).cpu_seconds, 5.5);
    }

    /// Rows checked apart by a [`super::TaskResolver`] and added with
    /// `add_resolved` give the dataset what `add_task_windows_where` gives
    /// it from the same rows and the same filter: the same rows kept in the
    /// same order, the same tasks marked as having windows (those whose
    /// rows were all filtered out too), the same details in the same order
    /// (those of rows filtered out too) and the same rows skipped (unknown
    /// tasks, no times, unknown resources); with a filter that keeps some
    /// rows, every row and none, over two batches. Checked against the
    /// input: the rows each filter keeps are counted from it.
    #[test]
    fn rows_resolved_apart_are_added_as_rows_given_whole() {
        use Value::{Null, F, S, T};
        let mut tasks = TableBuilder::new(Table::Tasks, 8);
        for (i, host) in ["h0", "h1", "h0", "h2"].iter().enumerate() {
            tasks.row(&[
                ("task_id", S(&format!("t{i}"))),
                ("query_id", S("q")),
                ("stage_id", S(if i < 2 { "s0" } else { "s1" })),
                ("host", S(host)),
                ("launch_time", T(0)),
                ("finish_time", T(100)),
            ]);
        }
        let tasks = tasks.finish();
        /// (task, start, end, resource, detail)
        type Row<'a> = (&'a str, Option<i64>, i64, &'a str, Option<&'a str>);
        let rows: Vec<Row> = vec![
            ("t0", Some(0), 10, "cpu", None),
            ("t0", Some(10), 20, "cpu", Some("lock")),
            ("t1", Some(0), 50, "network", Some("shuffle")),
            ("nobody", Some(0), 10, "cpu", None),
            ("t2", Some(60), 70, "disk_read", Some("execution")),
            ("t2", None, 70, "cpu", None),
            ("t3", Some(0), 10, "no such resource", Some("ignored")),
            ("t3", Some(80), 90, "cpu", Some("lock")),
            ("t1", Some(55), 60, "cpu", Some("spill")),
            ("t0", Some(90), 95, "disk_write", None),
        ];
        let mut windows = TableBuilder::new(Table::TaskWindows, rows.len());
        for (task, start, end, resource, detail) in &rows {
            windows.row(&[
                ("task_id", S(task)),
                ("window_start", start.map_or(Null, T)),
                ("window_end", T(*end)),
                ("resource", S(resource)),
                ("detail", detail.map_or(Null, S)),
                ("blocked", F(*end as f64 / 100.0)),
                ("acquired", F(1.0)),
            ]);
        }
        let windows = windows.finish_unchecked();
        // In two batches, as a read gives them.
        let batches = [windows.slice(0, 4), windows.slice(4, rows.len() - 4)];
        // Both datasets know two details already, one of them met again
        // below: the resolver numbers the details it meets from 1, the
        // dataset gives them its own numbers.
        let datasets = || {
            let (mut whole, mut apart) = (Dataset::new(), Dataset::new());
            for d in [&mut whole, &mut apart] {
                d.add_tasks(&tasks);
                d.details.intern("spill");
                d.details.intern("earlier");
            }
            (whole, apart)
        };
        let h1 = datasets().0.hosts.get("h1").expect("h1");
        // Host h1 is never kept; elsewhere rows that start before 50. From
        // the input: t0's rows at 0 and 10 (not 90), t1's are on h1, t2's
        // row starts at 60, t3's known resource at 80: two rows kept.
        let some = move |host: u32, _: Resource, start: i64, _end: i64| host != h1 && start < 50;
        let every = |_: u32, _: Resource, _: i64, _: i64| true;
        let none = |_: u32, _: Resource, _: i64, _: i64| false;
        type Keep<'a> = &'a dyn Fn(u32, Resource, i64, i64) -> bool;
        let filters: [(Keep, usize); 3] = [
            (&some, 2),
            // Every row but the three skipped.
            (&every, rows.len() - 3),
            (&none, 0),
        ];
        for (keep, want) in filters {
            let (mut whole, mut apart) = datasets();
            let resolver = apart.task_resolver();
            let mut kept = 0;
            for b in &batches {
                whole.add_task_windows_where(b, keep);
                let resolved = resolver.resolve(b, keep);
                kept += resolved.len();
                apart.add_resolved(resolved).expect("the same tasks");
            }
            assert_eq!(kept, want);
            assert_eq!(whole.windows.iter().flatten().count(), want);
            assert_eq!(whole.windows, apart.windows);
            // Every task has a checked row, kept or not.
            let marks = |d: &Dataset| d.tasks.iter().map(|t| t.has_windows).collect::<Vec<_>>();
            assert_eq!(marks(&whole), vec![true, true, true, true]);
            assert_eq!(marks(&whole), marks(&apart));
            // "", spill, earlier, then lock, shuffle, execution: those of
            // rows not kept too, in the same order.
            assert_eq!(whole.details.len(), 6);
            assert_eq!(whole.details, apart.details);
            // nobody, t2 without a start, t3's unknown resource.
            assert_eq!(whole.skipped_rows, 3);
            assert_eq!(whole.skipped_rows, apart.skipped_rows);
        }

        // Rows resolved against another number of tasks than a dataset
        // has fail, and nothing is added.
        let (_, apart) = datasets();
        let resolved = apart.task_resolver().resolve(&windows, &some);
        let mut other = Dataset::new();
        let err = other.add_resolved(resolved).unwrap_err().to_string();
        assert!(err.contains("matched against 4 tasks"), "{err}");
        assert!(other.windows.iter().all(|g| g.is_empty()));
        assert!(other.details.len() == 1 && other.skipped_rows == 0);
    }

    /// Every id added is found with its number and its name, whatever the
    /// table's growth; ids never added (prefixes, extensions) are not.
    #[test]
    fn task_ids_find_every_id_added_and_no_other() {
        let mut ids = TaskIds::default();
        let mut want: HashMap<String, u32> = HashMap::new();
        ids.reserve(10, 0);
        for i in 0..100_000u32 {
            let id = match i % 3 {
                0 => format!("t{i}"),
                1 => format!("app-{}/stage-{}/task-{i}", i % 7, i % 11),
                _ => format!("{i:x}"),
            };
            if want.contains_key(&id) {
                continue;
            }
            assert_eq!(ids.get(&id), None, "{id} before it was added");
            // Half by `push`, half by `push_new` (which then finds it).
            let t = if i % 2 == 0 {
                ids.push(&id)
            } else {
                ids.push_new(&id).expect("a new id")
            };
            assert_eq!(t as usize, want.len());
            assert_eq!(ids.push_new(&id), Err(t), "{id} added again");
            want.insert(id, t);
        }
        // The empty id is an id like another.
        let empty = ids.push("");
        want.insert(String::new(), empty);
        assert_eq!(ids.len(), want.len());
        for (id, &t) in &want {
            assert_eq!(ids.get(id), Some(t), "{id}");
            assert_eq!(ids.name(t), id);
        }
        for missing in ["t", "t100000", "app-1/stage-1/task-", "zz", "t1 "] {
            assert_eq!(ids.get(missing), None, "{missing}");
        }
    }
}
