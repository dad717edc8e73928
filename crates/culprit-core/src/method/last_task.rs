//! `victim_tasks=last` (docs/method.md, beyond the paper): of each
//! explained stage, explain only the task that finished last. A stage's
//! latency is set by that task, from the stage's start (its slot wait,
//! which covers the earlier waves and is blamed on their holders) to its
//! finish; blocked seconds summed over every parallel task over-blame a
//! culprit that paused many tasks that did not end the stage (method.md
//! section 5's stated limit).

use super::model::Dataset;

/// Per task, whether it is the last to finish of its stage among the
/// explained `stages` (ties: the longer task, then the smaller id): the
/// task that sets the stage's latency.
pub fn last_tasks(ds: &Dataset, stages: &[bool]) -> Vec<bool> {
    let mut last: Vec<Option<u32>> = vec![None; ds.stages.len()];
    for (i, t) in ds.tasks.iter().enumerate() {
        if !stages[t.stage as usize] {
            continue;
        }
        let slot = &mut last[t.stage as usize];
        let better = match *slot {
            None => true,
            Some(j) => {
                let u = &ds.tasks[j as usize];
                (t.finish, t.finish - t.launch) > (u.finish, u.finish - u.launch)
            }
        };
        if better {
            *slot = Some(i as u32);
        }
    }
    let mut mask = vec![false; ds.tasks.len()];
    for i in last.into_iter().flatten() {
        mask[i as usize] = true;
    }
    mask
}
