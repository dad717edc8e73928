//! Scenarios of several kinds, generated from a seed, for measuring the
//! method against ground truth (`culprit accuracy`, docs/accuracy.md).
//!
//! Every scenario has a victim, `q-victim`, submitted a few seconds in,
//! and other queries, external processes and GC around it. Tasks vary per
//! query ([`Variation::PerQuery`]), so a scenario without one of its
//! culprits is the same scenario in every other respect: the difference in
//! the victim's latency is that culprit's true effect.

use crate::rng::Rng;
use crate::sim::{
    Demand, ExternalLoad, Gc, GcStorm, QuerySpec, Scenario, SimConfig, SimResource, StageSpec,
    Variation,
};

/// What a scenario is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScenarioKind {
    /// Random queries (1 to 3 stages, any resource mix, 2 to 24 tasks a
    /// stage) at random times; an external process half the time and a GC
    /// storm a third of the time.
    Random,
    /// CPU-bound queries on hosts with 2 cores and 4 slots: the victim and
    /// 3 to 5 others contend for cores (and slots); one of them is heavy.
    Cpu,
    /// A process outside the queries reads the disk of 1 to 3 hosts at 80
    /// to 180 MB/s (of 200) while a disk-heavy victim runs; a large scan and
    /// 1 to 3 random queries around it.
    DiskHog,
    /// Stop-the-world GC pauses 30% to 70% of the time on 1 to 4 hosts for
    /// 5 to 20 s around the victim; 2 to 4 random queries.
    GcStorm,
    /// A heavy culprit query, an external process and a GC storm at once,
    /// with 2 to 4 random queries.
    Mixed,
}

impl ScenarioKind {
    pub const ALL: [ScenarioKind; 5] = [
        ScenarioKind::Random,
        ScenarioKind::Cpu,
        ScenarioKind::DiskHog,
        ScenarioKind::GcStorm,
        ScenarioKind::Mixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ScenarioKind::Random => "random",
            ScenarioKind::Cpu => "cpu",
            ScenarioKind::DiskHog => "disk_hog",
            ScenarioKind::GcStorm => "gc_storm",
            ScenarioKind::Mixed => "mixed",
        }
    }
}

const USERS: [&str; 5] = ["bob", "carol", "dave", "erin", "mallory"];
const POOLS: [&str; 3] = ["adhoc", "reports", "etl"];

/// The cluster and workload of a scenario of `kind`, reproducibly from
/// `seed`.
pub fn scenario(kind: ScenarioKind, seed: u64) -> (SimConfig, Scenario) {
    let mut g = Gen {
        rng: Rng::new(seed),
        next: 0,
        queries: Vec::new(),
    };
    let mut cfg = SimConfig {
        seed,
        ..SimConfig::default()
    };
    let victim_submit = g.rng.range(6.0, 10.0);
    let mut external = Vec::new();
    let mut gc = Gc {
        share: 0.02,
        pauses: true,
        storms: Vec::new(),
    };
    let mut culprit = String::new();
    match kind {
        ScenarioKind::Random => {
            let victim = g.random_stages(cfg.hosts);
            g.victim(victim_submit, victim);
            for _ in 0..3 + g.rng.below(5) {
                let submit = g.rng.range(0.0, 20.0);
                let stages = g.random_stages(cfg.hosts);
                g.other(submit, stages);
            }
            if g.rng.f64() < 0.5 {
                external.push(g.external(cfg.hosts, victim_submit));
            }
            if g.rng.f64() < 0.3 {
                gc.storms.push(g.storm(cfg.hosts, victim_submit));
            }
        }
        ScenarioKind::Cpu => {
            cfg.cores = 2.0;
            let stages = vec![
                StageSpec::new(vec![], 4 + g.rng.below(8), g.cpu_demand(1.0, 2.5)),
                StageSpec::new(vec![0], 2 + g.rng.below(4), g.cpu_demand(0.5, 1.5)),
            ];
            g.victim(victim_submit, stages);
            let heavy = g.rng.below(3);
            for i in 0..3 + g.rng.below(3) {
                let (tasks, lo, hi) = if i == heavy {
                    (12 + g.rng.below(12), 3.0, 5.0)
                } else {
                    (2 + g.rng.below(10), 0.5, 3.0)
                };
                let submit = victim_submit + g.rng.range(-6.0, 4.0);
                let demand = g.cpu_demand(lo, hi);
                let id = g.other(submit, vec![StageSpec::new(vec![], tasks, demand)]);
                if i == heavy {
                    culprit = id;
                }
            }
        }
        ScenarioKind::DiskHog => {
            let stages = vec![
                StageSpec::new(vec![], 4 + g.rng.below(8), g.disk_demand()),
                StageSpec::new(vec![0], 2 + g.rng.below(4), g.random_demand()),
            ];
            g.victim(victim_submit, stages);
            let scan = vec![StageSpec::new(
                vec![],
                12 + g.rng.below(20),
                g.disk_demand(),
            )];
            let submit = victim_submit - g.rng.range(0.5, 3.0);
            g.other(submit, scan);
            for _ in 0..1 + g.rng.below(3) {
                let submit = g.rng.range(0.0, 20.0);
                let stages = g.random_stages(cfg.hosts);
                g.other(submit, stages);
            }
            let from = victim_submit - g.rng.range(0.0, 5.0);
            let to = from + g.rng.range(8.0, 25.0);
            let rate = g.rng.range(80e6, 180e6);
            for host in g.hosts(cfg.hosts, 3) {
                external.push(ExternalLoad {
                    host,
                    resource: SimResource::DiskRead,
                    rate,
                    from,
                    to,
                });
            }
        }
        ScenarioKind::GcStorm => {
            let victim = g.random_stages(cfg.hosts);
            g.victim(victim_submit, victim);
            for _ in 0..2 + g.rng.below(3) {
                let submit = g.rng.range(0.0, 20.0);
                let stages = g.random_stages(cfg.hosts);
                g.other(submit, stages);
            }
            gc.storms.push(g.storm(cfg.hosts, victim_submit));
        }
        ScenarioKind::Mixed => {
            let victim = g.random_stages(cfg.hosts);
            g.victim(victim_submit, victim);
            let heavy = vec![
                StageSpec::new(vec![], 8 + g.rng.below(16), g.random_demand()),
                StageSpec::new(vec![0], 4 + g.rng.below(12), g.random_demand()),
            ];
            let submit = victim_submit + g.rng.range(-4.0, 2.0);
            culprit = g.other(submit, heavy);
            for _ in 0..2 + g.rng.below(3) {
                let submit = g.rng.range(0.0, 20.0);
                let stages = g.random_stages(cfg.hosts);
                g.other(submit, stages);
            }
            external.push(g.external(cfg.hosts, victim_submit));
            gc.storms.push(g.storm(cfg.hosts, victim_submit));
        }
    }
    let scenario = Scenario {
        queries: g.queries,
        external,
        gc,
        variation: Variation::PerQuery,
        victim: "q-victim".into(),
        culprit,
    };
    (cfg, scenario)
}

/// A scenario being generated: its generator and the queries so far.
struct Gen {
    rng: Rng,
    next: usize,
    queries: Vec<QuerySpec>,
}

impl Gen {
    fn push(&mut self, id: String, user: &str, pool: &str, submit: f64, stages: Vec<StageSpec>) {
        let seed = self.rng.next_u64();
        let sql = format!("SELECT ... /* {id}: {} stages */", stages.len());
        self.queries.push(QuerySpec {
            id,
            user: user.into(),
            pool: pool.into(),
            sql,
            submit: submit.max(0.0),
            stages,
            seed,
        });
    }

    fn victim(&mut self, submit: f64, stages: Vec<StageSpec>) {
        self.push("q-victim".into(), "alice", "adhoc", submit, stages);
    }

    /// Adds another query; returns its id.
    fn other(&mut self, submit: f64, stages: Vec<StageSpec>) -> String {
        self.next += 1;
        let id = format!("q-{:03}", self.next);
        let user = USERS[self.rng.below(USERS.len())];
        let pool = POOLS[self.rng.below(POOLS.len())];
        self.push(id.clone(), user, pool, submit, stages);
        id
    }

    /// 1 to 3 stages, a chain or two parents joined, of any resource mix.
    fn random_stages(&mut self, hosts: usize) -> Vec<StageSpec> {
        let n = 1 + self.rng.below(3);
        (0..n)
            .map(|i| {
                let parents = match (n, i) {
                    (_, 0) => vec![],
                    (3, 2) if self.rng.f64() < 0.5 => vec![0, 1],
                    (3, 1) if self.rng.f64() < 0.3 => vec![],
                    _ => vec![i - 1],
                };
                let tasks = 2 + self.rng.below(hosts * 6 - 1);
                StageSpec::new(parents, tasks, self.random_demand())
            })
            .collect()
    }

    /// Any mix: CPU seconds and bytes read, fetched, written, each present
    /// or not, at least some CPU.
    fn random_demand(&mut self) -> Demand {
        let cpu = self.rng.range(0.2, 2.5);
        let mut more = |p: f64, lo: f64, hi: f64| {
            if self.rng.f64() < p {
                self.rng.range(lo, hi)
            } else {
                0.0
            }
        };
        let disk = more(0.6, 20e6, 300e6);
        let net = more(0.4, 20e6, 200e6);
        let write = more(0.3, 5e6, 150e6);
        Demand::new(cpu, disk, net, write)
    }

    /// Mostly CPU: `lo` to `hi` CPU seconds, a little disk.
    fn cpu_demand(&mut self, lo: f64, hi: f64) -> Demand {
        Demand::new(self.rng.range(lo, hi), self.rng.range(1e6, 20e6), 0.0, 0.0)
    }

    /// Mostly disk reads: 100 to 300 MB, some CPU.
    fn disk_demand(&mut self) -> Demand {
        Demand::new(
            self.rng.range(0.2, 0.8),
            self.rng.range(100e6, 300e6),
            0.0,
            0.0,
        )
    }

    /// 1 to `most` distinct hosts.
    fn hosts(&mut self, hosts: usize, most: usize) -> Vec<usize> {
        let n = 1 + self.rng.below(most.min(hosts));
        let mut all: Vec<usize> = (0..hosts).collect();
        for i in 0..hosts {
            let j = i + self.rng.below(hosts - i);
            all.swap(i, j);
        }
        all.truncate(n);
        all.sort_unstable();
        all
    }

    /// A process on one host using 30% to 90% of a resource for 3 to 20 s,
    /// starting around the victim's submission.
    fn external(&mut self, hosts: usize, around: f64) -> ExternalLoad {
        let host = self.rng.below(hosts);
        let (resource, capacity) = match self.rng.below(3) {
            0 => (SimResource::DiskRead, 200e6),
            1 => (SimResource::Network, 125e6),
            _ => (SimResource::Cpu, 4.0),
        };
        let from = around + self.rng.range(-5.0, 3.0);
        ExternalLoad {
            host,
            resource,
            rate: capacity * self.rng.range(0.3, 0.9),
            from,
            to: from + self.rng.range(3.0, 20.0),
        }
    }

    /// A GC storm of 30% to 70% on 1 to 4 hosts for 5 to 20 s, starting
    /// around the victim's submission.
    fn storm(&mut self, hosts: usize, around: f64) -> GcStorm {
        let on = self.hosts(hosts, 4);
        let from = around + self.rng.range(-4.0, 3.0);
        GcStorm {
            hosts: on,
            from,
            to: from + self.rng.range(5.0, 20.0),
            share: self.rng.range(0.3, 0.7),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::query_latencies;

    #[test]
    fn scenarios_are_reproducible_and_removal_changes_only_the_removed() {
        for kind in ScenarioKind::ALL {
            let (cfg, s) = scenario(kind, 7);
            let (_, again) = scenario(kind, 7);
            assert_eq!(format!("{s:?}"), format!("{again:?}"), "{}", kind.name());
            let all = query_latencies(&cfg, &s);
            assert_eq!(all[0].0, "q-victim");
            assert!(all.iter().all(|(_, l)| l.is_finite() && *l > 0.0));
            // Alone, the victim is faster than with everything.
            let alone = Scenario {
                queries: vec![s.queries[0].clone()],
                ..s.without_external().without_gc()
            };
            let solo = query_latencies(&cfg, &alone)[0].1;
            assert!(
                solo <= all[0].1 + 1e-9,
                "{}: {solo} > {}",
                kind.name(),
                all[0].1
            );
        }
    }
}
