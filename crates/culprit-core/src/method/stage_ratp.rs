//! Cumulative RATP of a stage per (resource, host) (method.md section 7;
//! 001 eq. 13-15), shown beside blame so a user can tell a stage that waited
//! long because it moved much data from one that waited disproportionately.

use rustc_hash::{FxHashMap, FxHashSet};

use super::model::{Dataset, N_RES};
use crate::Resource;

#[derive(Debug, Clone, PartialEq)]
pub struct StageRatp {
    pub stage: u32,
    pub resource: Resource,
    pub host: u32,
    pub tasks: usize,
    pub acquired: f64,
    pub blocked: f64,
    /// Sum over tasks of the time-weighted RATP `(1/T) * sum_k dt_k * dt_k / RA_k`.
    pub ratp: Option<f64>,
    /// Sum over tasks of the time-weighted blocked RATP `(1/T) * sum_k dt_k * WT_k / RA_k`.
    pub ratp_blocked: Option<f64>,
    /// Rows with blocked time but nothing acquired (RATP undefined there).
    pub undefined_rows: usize,
}

/// The stages of `query` per (resource, host). A row's RATP does not change
/// when the row is split in two (its rate is uniform), so rows are summed
/// as they are.
pub fn stage_ratp(ds: &Dataset, query: u32) -> Vec<StageRatp> {
    // Per (stage, resource, host): its distinct tasks, and the sums.
    let mut acc: FxHashMap<(u32, usize, u32), (FxHashSet<u32>, StageRatp)> = FxHashMap::default();
    let mut add = |g: usize, row: &super::model::WindowRow| {
        let t = &ds.tasks[row.task as usize];
        if ds.stage_query(t.stage) != query {
            return;
        }
        let r = Resource::ALL[g % N_RES];
        let run = (t.finish - t.launch) as f64 / 1e6;
        let dt = (row.end - row.start) as f64 / 1e6;
        let (tasks, s) = acc.entry((t.stage, g % N_RES, t.host)).or_insert_with(|| {
            (
                FxHashSet::default(),
                StageRatp {
                    stage: t.stage,
                    resource: r,
                    host: t.host,
                    tasks: 0,
                    acquired: 0.0,
                    blocked: 0.0,
                    ratp: None,
                    ratp_blocked: None,
                    undefined_rows: 0,
                },
            )
        });
        tasks.insert(row.task);
        s.acquired += row.acquired;
        s.blocked += row.blocked;
        if row.acquired > 0.0 && run > 0.0 {
            *s.ratp.get_or_insert(0.0) += dt * (dt / row.acquired) / run;
            *s.ratp_blocked.get_or_insert(0.0) += dt * (row.blocked / row.acquired) / run;
        } else if row.blocked > 0.0 {
            s.undefined_rows += 1;
        }
    };
    for (g, rows) in ds.windows.iter().enumerate() {
        for row in rows {
            add(g, row);
        }
    }
    for i in 0..ds.tasks.len() {
        for (r, row) in ds.synthesized_rows(i as u32) {
            let g = Dataset::group(ds.tasks[i].host, r);
            add(g, &row);
        }
    }
    // Every task with a row (window rows and rows built from totals alike).
    let mut out: Vec<StageRatp> = acc
        .into_values()
        .map(|(tasks, mut s)| {
            s.tasks = tasks.len();
            s
        })
        .collect();
    out.sort_by_key(|a| (a.stage, a.resource, a.host));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::model::Totals;

    /// Tasks known only by their totals (every Spark task) are counted per
    /// stage, resource and host like tasks with window rows (issue #16: every
    /// such stage reported `tasks = 1`).
    #[test]
    fn tasks_known_by_totals_are_counted() {
        let mut ds = Dataset::new();
        for i in 0..3 {
            ds.add_task(
                &format!("t{i}"),
                "q",
                "0",
                "h1",
                0,
                1_000_000,
                None,
                Totals {
                    input_bytes: 100.0,
                    disk_read_blocked: 0.5,
                    ..Totals::default()
                },
            );
        }
        let q = ds.queries.get("q").unwrap();
        let rows = stage_ratp(&ds, q);
        let disk = rows
            .iter()
            .find(|s| s.resource == Resource::DiskRead)
            .expect("a disk_read row");
        assert_eq!(disk.tasks, 3);
        assert_eq!(disk.acquired, 300.0);
    }
}
