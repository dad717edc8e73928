//! What an analysis explains: the options of method.md section 5 (victim
//! stages, attribution form, slot blame, window) and the victims they
//! resolve to in a dataset.

use super::critical_path::critical_path;
use super::last_task::last_tasks;
use super::model::{Dataset, Micros};
use super::sweep::{self, Attribution};
use crate::MethodError;

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
    /// On the stages holding the slots (section 5), the paper's form:
    /// `slots=direct`.
    Direct,
    /// Passed on to what slowed the slot holders (section 5b), the default:
    /// on the simulator it ranks the true culprits better (docs/accuracy.md).
    Transitive,
}

/// Which tasks of an explained stage are explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskBlame {
    /// Every task: blame is in task-seconds, summed over parallel tasks
    /// (section 5), the default and the paper's form: `tasks=all`.
    All,
    /// The stage's last-finishing task only, the one that sets the stage's
    /// latency (its slot wait covers the earlier waves): blame is in
    /// seconds of latency (`tasks=last`, docs/method.md).
    Last,
}

/// What to explain.
#[derive(Debug, Clone)]
pub struct BlameOptions {
    /// Victim query names; `None` means every query that ran in the window.
    pub victims: Option<Vec<String>>,
    /// With `victims: None`, only these of the queries that ran in the
    /// window (names the data does not hold are ignored). An analysis over
    /// every victim is the union of its analyses over disjoint groups of
    /// them, which is how a large store is explained group by group in
    /// bounded memory (`culprit-engine`'s `Engine::victim_groups`).
    pub within: Option<Vec<String>>,
    pub stages: VictimStages,
    pub attribution: Attribution,
    pub slots: SlotBlame,
    pub tasks: TaskBlame,
    pub from: Option<Micros>,
    pub to: Option<Micros>,
}

impl Default for BlameOptions {
    fn default() -> Self {
        BlameOptions {
            victims: None,
            within: None,
            stages: VictimStages::CriticalPath,
            attribution: Attribution::Window,
            slots: SlotBlame::Transitive,
            tasks: TaskBlame::All,
            from: None,
            to: None,
        }
    }
}

/// The victims and their stages resolved against the data.
#[derive(Debug, Clone)]
pub struct Victims {
    pub queries: Vec<u32>,
    /// Per stage: explained?
    pub stages: Vec<bool>,
    /// Per task: explained? `None`: every task of an explained stage
    /// (`tasks=all`); with `tasks=last`, the last-finishing task of each.
    pub tasks: Option<Vec<bool>>,
}

impl Victims {
    /// Is task `t` (of stage `stage`) explained?
    pub fn task(&self, t: u32, stage: u32) -> bool {
        self.stages[stage as usize] && self.tasks.as_ref().is_none_or(|m| m[t as usize])
    }
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
    let queries: Vec<u32> = match &opts.victims {
        // Every query that ran in the window (of the group `within`): a
        // walk over every task, which named victims need not pay (394,000
        // tasks on 5,000 hosts: about 7 ms, docs/performance.md).
        None => {
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
            if let Some(names) = &opts.within {
                let mut group = vec![false; ds.queries.len()];
                for q in names.iter().filter_map(|n| ds.queries.get(n)) {
                    group[q as usize] = true;
                }
                for (r, g) in ran.iter_mut().zip(group) {
                    *r &= g;
                }
            }
            (0..ds.queries.len() as u32)
                .filter(|q| ran[*q as usize])
                .collect()
        }
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
    let tasks = match opts.tasks {
        TaskBlame::All => None,
        TaskBlame::Last => Some(last_tasks(ds, &stages)),
    };
    Ok(Victims {
        queries,
        stages,
        tasks,
    })
}
