//! The use-cases of 000 appendix E across all victims of a window:
//! `hot_resources`, `slow_nodes`, `aggressive_queries`, `victims`.

use std::sync::Arc;

use culprit_core::method::{self, Culprit, Dataset, Level4, Victims};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::Result;
use rustc_hash::{FxHashMap, FxHashSet};

use super::args::Args;
use super::blame::{bc0, culprit_kind};
use super::out::{schema, Out, Ty, V};
use super::table::{ComputedTable, Rows};
use crate::engine::{Engine, Loaded};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    HotResources,
    SlowNodes,
    AggressiveQueries,
    Victims,
}

#[derive(Debug)]
pub struct UseCaseFn {
    pub kind: Kind,
    pub engine: Arc<Engine>,
}

impl UseCaseFn {
    pub fn name(kind: Kind) -> &'static str {
        match kind {
            Kind::HotResources => "hot_resources",
            Kind::SlowNodes => "slow_nodes",
            Kind::AggressiveQueries => "aggressive_queries",
            Kind::Victims => "victims",
        }
    }

    pub fn schema(kind: Kind) -> SchemaRef {
        match kind {
            Kind::HotResources => schema(&[
                ("resource", Ty::Text),
                ("blame_seconds", Ty::Float),
                ("share", Ty::Float),
                ("victims", Ty::Int),
            ]),
            Kind::SlowNodes => schema(&[
                ("host", Ty::Text),
                ("blame_seconds", Ty::Float),
                ("share", Ty::Float),
                ("victims", Ty::Int),
            ]),
            Kind::AggressiveQueries => schema(&[
                ("culprit_query", Ty::Text),
                ("blame_seconds", Ty::Float),
                ("dor_sum", Ty::Float),
                ("victims", Ty::Int),
            ]),
            Kind::Victims => schema(&[
                ("victim_query", Ty::Text),
                ("blocked_seconds", Ty::Float),
                ("task_seconds", Ty::Float),
                ("slowdown", Ty::Float),
                ("top_culprit_kind", Ty::Text),
                ("top_culprit_query", Ty::Text),
                ("top_culprit_seconds", Ty::Float),
                ("top_culprit_dor", Ty::Float),
            ]),
        }
    }
}

pub const USAGE: &str =
    "([from [, to]] [, 'victim_stages=...'] [, 'attribution=...'] [, 'slots=...'])";

impl TableFunctionImpl for UseCaseFn {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let name = UseCaseFn::name(self.kind);
        let args = Args::parse(name, &args)?;
        args.max_positional(2, &format!("{name}{USAGE}"))?;
        let opts = args.blame_options(None, 0, 1)?;
        let kind = self.kind;
        Ok(Arc::new(ComputedTable::new(
            name,
            UseCaseFn::schema(kind),
            self.engine.clone(),
            false,
            Arc::new(move |loaded: &Loaded| {
                let (victims, entries) = loaded.blame(&opts).map_err(|e| e.named(name))?;
                compute(kind, &loaded.ds, &victims, &entries, &opts).map(Rows::one)
            }),
        )))
    }
}

fn ranked<K: Clone>(m: FxHashMap<K, (f64, FxHashSet<u32>)>) -> Vec<(K, f64, usize)> {
    let mut v: Vec<_> = m.into_iter().map(|(k, (s, vs))| (k, s, vs.len())).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

fn compute(
    kind: Kind,
    ds: &Dataset,
    victims: &Victims,
    entries: &Level4,
    opts: &method::BlameOptions,
) -> Result<RecordBatch> {
    let mut out = Out::new(UseCaseFn::schema(kind), 16);
    let total: f64 = entries.iter().map(|e| e.seconds).sum();
    let share = |s: f64| (total > 0.0).then(|| s / total);
    match kind {
        Kind::HotResources | Kind::SlowNodes => {
            let mut m: FxHashMap<String, (f64, FxHashSet<u32>)> = FxHashMap::default();
            for e in entries {
                let key = if kind == Kind::HotResources {
                    e.resource.name().to_string()
                } else {
                    e.host()
                        .map_or("*".to_string(), |h| ds.hosts.name(h).to_string())
                };
                let x = m.entry(key).or_default();
                x.0 += e.seconds;
                x.1.insert(ds.stage_query(e.stage));
            }
            for (k, s, n) in ranked(m) {
                out.row(vec![
                    V::S(Some(&k)),
                    V::F(Some(s)),
                    V::F(share(s)),
                    V::I(Some(n as i64)),
                ]);
            }
        }
        Kind::AggressiveQueries => {
            let b0 = bc0(ds, entries);
            let mut m: FxHashMap<u32, (f64, f64, FxHashSet<u32>)> = FxHashMap::default();
            for e in entries {
                let Culprit::Stage(s) = e.culprit() else {
                    continue;
                };
                let (v, q) = (ds.stage_query(e.stage), ds.stage_query(s));
                if q == v {
                    continue; // a query's blame on itself is no aggression
                }
                let x = m.entry(q).or_default();
                x.0 += e.seconds;
                x.1 += e.seconds / b0[&v];
                x.2.insert(v);
            }
            let mut v: Vec<_> = m.into_iter().collect();
            v.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1).then(b.1 .0.total_cmp(&a.1 .0)));
            for (q, (s, d, vs)) in v {
                out.row(vec![
                    V::S(Some(ds.queries.name(q))),
                    V::F(Some(s)),
                    V::F(Some(d)),
                    V::I(Some(vs.len() as i64)),
                ]);
            }
        }
        Kind::Victims => {
            let b0 = bc0(ds, entries);
            let (from, to) = method::blame::window(opts);
            // Task time of the explained stages, slot waits included.
            let mut task_s: FxHashMap<u32, f64> = FxHashMap::default();
            for t in &ds.tasks {
                if !victims.stages[t.stage as usize] {
                    continue;
                }
                let start = t.ready.unwrap_or(t.launch).min(t.launch);
                if let Some((s, e)) = method::sweep::clip(start, t.finish, from, to) {
                    *task_s.entry(ds.stage_query(t.stage)).or_insert(0.0) += (e - s) as f64 / 1e6;
                }
            }
            let mut top: FxHashMap<u32, FxHashMap<(&'static str, Option<u32>), f64>> =
                FxHashMap::default();
            for e in entries {
                let v = ds.stage_query(e.stage);
                let c = match e.culprit() {
                    Culprit::Stage(s) => Some(ds.stage_query(s)),
                    _ => None,
                };
                *top.entry(v)
                    .or_default()
                    .entry((culprit_kind(ds, v, e.culprit()), c))
                    .or_insert(0.0) += e.seconds;
            }
            let mut rows: Vec<u32> = victims.queries.clone();
            rows.sort_by(|a, b| {
                let (x, y) = (
                    b0.get(a).copied().unwrap_or(0.0),
                    b0.get(b).copied().unwrap_or(0.0),
                );
                y.total_cmp(&x)
                    .then(ds.queries.name(*a).cmp(ds.queries.name(*b)))
            });
            for v in rows {
                let blocked = b0.get(&v).copied().unwrap_or(0.0);
                let t = task_s.get(&v).copied().unwrap_or(0.0);
                let best = top.get(&v).and_then(|m| {
                    m.iter()
                        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))
                        .map(|(k, s)| (*k, *s))
                });
                out.row(vec![
                    V::S(Some(ds.queries.name(v))),
                    V::F(Some(blocked)),
                    V::F(Some(t)),
                    // S = (T - T*) / T* with T* = T - blocked (000 eq. 4 on times).
                    V::F((t - blocked > 0.0).then(|| blocked / (t - blocked))),
                    V::S(best.map(|b| b.0 .0)),
                    V::S(best.and_then(|b| b.0 .1).map(|q| ds.queries.name(q))),
                    V::F(best.map(|b| b.1)),
                    V::F(best.filter(|_| blocked > 0.0).map(|b| b.1 / blocked)),
                ]);
            }
        }
    }
    out.finish()
}
