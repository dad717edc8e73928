//! The critical path of a query (method.md section 8; 000 §4.1 Level-0).

use std::cmp::Ordering;

use super::model::{Dataset, Micros};

/// One stage on the path, in run order.
#[derive(Debug, Clone, PartialEq)]
pub struct PathStep {
    pub stage: u32,
    pub start: Micros,
    pub end: Micros,
    /// Seconds between the previous step's end (or the query's start) and
    /// this stage's start: scheduling gaps, reported, not hidden.
    pub gap_before: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CriticalPath {
    pub query: u32,
    /// Root first.
    pub stages: Vec<PathStep>,
    /// First start of any stage to last end of any stage, seconds.
    pub query_seconds: f64,
}

impl CriticalPath {
    /// The run time of the stages on the path, seconds.
    pub fn path_seconds(&self) -> f64 {
        self.stages
            .iter()
            .map(|s| (s.end - s.start) as f64 / 1e6)
            .sum()
    }

    pub fn gap_seconds(&self) -> f64 {
        self.stages.iter().map(|s| s.gap_before).sum()
    }
}

/// Compares stage ids: numerically when both are integers.
fn cmp_ids(a: &str, b: &str) -> Ordering {
    match (a.parse::<i64>(), b.parse::<i64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

/// From the query's last-finishing stage, walk back through the parent that
/// finished last (ties: the longer stage, then the smaller id) to a stage
/// with no parents. Stages without times (never ran) are not on it.
pub fn critical_path(ds: &Dataset, query: u32) -> CriticalPath {
    let timed: Vec<(u32, Micros, Micros)> = ds
        .stages
        .iter()
        .enumerate()
        .filter(|(_, s)| s.query == query)
        .filter_map(|(i, s)| Some((i as u32, s.start?, s.end?)))
        .collect();
    let better = |a: &(u32, Micros, Micros), b: &(u32, Micros, Micros)| -> Ordering {
        // Greater is better: later end, then longer, then smaller id.
        a.2.cmp(&b.2)
            .then((a.2 - a.1).cmp(&(b.2 - b.1)))
            .then(cmp_ids(ds.stage_name(b.0), ds.stage_name(a.0)))
    };
    let query_start = timed.iter().map(|s| s.1).min();
    let query_end = timed.iter().map(|s| s.2).max();
    let mut path = Vec::new();
    let mut current = timed.iter().max_by(|a, b| better(a, b)).copied();
    let mut seen = vec![false; ds.stages.len()];
    while let Some(c) = current {
        if std::mem::replace(&mut seen[c.0 as usize], true) {
            break; // a cycle in bad data
        }
        path.push(c);
        let parents = &ds.stages[c.0 as usize].parents;
        current = timed
            .iter()
            .filter(|s| parents.iter().any(|p| p == ds.stage_name(s.0)))
            .max_by(|a, b| better(a, b))
            .copied();
    }
    path.reverse();
    let mut prev_end = query_start.unwrap_or(0);
    let stages = path
        .into_iter()
        .map(|(stage, start, end)| {
            let gap = ((start - prev_end) as f64 / 1e6).max(0.0);
            prev_end = end;
            PathStep {
                stage,
                start,
                end,
                gap_before: gap,
            }
        })
        .collect();
    CriticalPath {
        query,
        stages,
        query_seconds: match (query_start, query_end) {
            (Some(s), Some(e)) => (e - s) as f64 / 1e6,
            _ => 0.0,
        },
    }
}
