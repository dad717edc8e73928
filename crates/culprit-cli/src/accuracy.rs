//! `culprit accuracy`: the method measured against ground truth
//! (docs/accuracy.md).
//!
//! Scenarios of several kinds (`culprit_sim::scenarios`) are simulated.
//! Each culprit's true effect on the victim is measured by leave-one-out
//! re-simulation: the victim's latency with everything, minus its latency
//! with that one culprit removed (another query, the external processes,
//! or GC). The attribution of each option is computed the way `culprits()`
//! computes it (the engine's `Snapshot::culprits` over a `memory://` store
//! holding the simulated tables) and scored against the true effects:
//! top-1, top-1 within 10%, Spearman rank correlation, NDCG@3.

use std::io::IsTerminal;
use std::process::ExitCode;

use culprit_core::method::{Attribution, BlameOptions, CulpritKind, SlotBlame, TaskBlame};
use culprit_core::Table;
use culprit_sim::{query_latencies, Scenario, ScenarioKind, SimConfig};
use culprit_sql::Engine;
use culprit_store::Store;
use indicatif::{ProgressBar, ProgressStyle};

use crate::BoxError;

/// A scenario whose best culprit delays the victim by less than this
/// (seconds) says nothing about a ranking: it is left out (and counted).
pub const MIN_EFFECT: f64 = 0.1;

/// The names of the pseudo-culprits in a ranking.
const EXTERNAL: &str = "external";
const GC: &str = "gc";

/// What is scored: three options of the method and the two overlap
/// baselines, in the order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scorer {
    Transitive,
    LastTask,
    Direct,
    Paper,
    DeepOverlap,
    NaiveOverlap,
}

const SCORERS: [Scorer; 6] = [
    Scorer::Transitive,
    Scorer::LastTask,
    Scorer::Direct,
    Scorer::Paper,
    Scorer::DeepOverlap,
    Scorer::NaiveOverlap,
];

impl Scorer {
    fn name(self) -> &'static str {
        match self {
            Scorer::Transitive => "slots=transitive",
            Scorer::LastTask => "victim_tasks=last",
            Scorer::Direct => "slots=direct",
            Scorer::Paper => "attribution=paper",
            Scorer::DeepOverlap => "deep overlap",
            Scorer::NaiveOverlap => "naive overlap",
        }
    }

    /// The options of `culprits()` this scorer reads (the overlaps come
    /// with any: they are the same columns of every call).
    fn options(self) -> Option<(Attribution, SlotBlame, TaskBlame)> {
        use TaskBlame::{All, Last};
        match self {
            Scorer::Transitive => Some((Attribution::Window, SlotBlame::Transitive, All)),
            Scorer::LastTask => Some((Attribution::Window, SlotBlame::Transitive, Last)),
            Scorer::Direct => Some((Attribution::Window, SlotBlame::Direct, All)),
            Scorer::Paper => Some((Attribution::Paper, SlotBlame::Direct, All)),
            Scorer::DeepOverlap | Scorer::NaiveOverlap => None,
        }
    }
}

/// The scores of one scenario for one scorer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scores {
    pub top1: bool,
    pub top1_within: bool,
    pub spearman: f64,
    pub ndcg3: f64,
}

/// One measured scenario: its kind and each scorer's scores (`None`: left
/// out, no culprit slowed the victim by [`MIN_EFFECT`]).
struct Measured {
    kind: ScenarioKind,
    seed: u64,
    victim_latency: f64,
    candidates: Vec<String>,
    effects: Vec<f64>,
    /// Per scorer, per candidate.
    attributed: Vec<Vec<f64>>,
    scores: Option<[Scores; SCORERS.len()]>,
}

impl Measured {
    /// The scenario as text: candidates, true effects, each scorer's
    /// scores, and its top-1 and NDCG@3.
    fn details(&self, i: usize) -> String {
        let mut out = format!(
            "scenario {} ({}, seed {}): victim latency {:.2} s{}\n  {:<12}{:>10}",
            i + 1,
            self.kind.name(),
            self.seed,
            self.victim_latency,
            if self.scores.is_none() {
                " (left out: no culprit delays it by 0.1 s)"
            } else {
                ""
            },
            "candidate",
            "effect"
        );
        for scorer in SCORERS {
            out.push_str(&format!("{:>19}", scorer.name()));
        }
        out.push('\n');
        for (c, name) in self.candidates.iter().enumerate() {
            out.push_str(&format!("  {name:<12}{:>10.2}", self.effects[c]));
            for scores in &self.attributed {
                out.push_str(&format!("{:>19.2}", scores.get(c).copied().unwrap_or(0.0)));
            }
            out.push('\n');
        }
        if let Some(scores) = &self.scores {
            out.push_str(&format!("  {:<22}", "top-1 / NDCG@3"));
            for s in scores {
                out.push_str(&format!(
                    "{:>19}",
                    format!("{} / {:.2}", u8::from(s.top1), s.ndcg3)
                ));
            }
            out.push('\n');
        }
        out
    }
}

/// The seed of scenario `i` of a run seeded `seed` (SplitMix64 of both:
/// nearby seeds give unrelated scenarios).
fn scenario_seed(seed: u64, i: usize) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i as u64 + 1);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs `culprit accuracy`: measures, prints the table on stdout, progress
/// on stderr.
/// With `details`, each scenario's candidates, true effects and scores go
/// to stderr too.
pub async fn run(scenarios: usize, seed: u64, details: bool) -> Result<ExitCode, BoxError> {
    let started = std::time::Instant::now();
    let progress = Progress::new(scenarios);
    let mut measured = Vec::with_capacity(scenarios);
    for i in 0..scenarios {
        let kind = ScenarioKind::ALL[i % ScenarioKind::ALL.len()];
        progress.step(i, kind);
        let m = measure(kind, scenario_seed(seed, i)).await?;
        if details {
            progress.suspend(|| eprint!("{}", m.details(i)));
        }
        measured.push(m);
    }
    progress.finish();
    print!("{}", table(&measured));
    eprintln!(
        "measured {scenarios} scenarios (seed {seed}) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// Simulates one scenario, finds the truth and scores every scorer.
async fn measure(kind: ScenarioKind, seed: u64) -> Result<Measured, BoxError> {
    let (cfg, scenario) = culprit_sim::scenario(kind, seed);
    let (victim_latency, candidates, effects) = truth(&cfg, &scenario)?;
    let best = effects.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut m = Measured {
        kind,
        seed,
        victim_latency,
        candidates,
        effects,
        attributed: Vec::new(),
        scores: None,
    };
    if m.candidates.is_empty() || best < MIN_EFFECT {
        return Ok(m);
    }
    m.attributed = attribute(&cfg, &scenario, &m.candidates).await?;
    let mut scores = [Scores::default(); SCORERS.len()];
    for (s, scorer) in scores.iter_mut().zip(SCORERS) {
        *s = score(&m.attributed[scorer as usize], &m.effects);
    }
    m.scores = Some(scores);
    Ok(m)
}

/// The victim's latency in a scenario.
fn victim_latency(cfg: &SimConfig, scenario: &Scenario) -> Result<f64, BoxError> {
    query_latencies(cfg, scenario)
        .into_iter()
        .find(|(id, _)| *id == scenario.victim)
        .map(|(_, l)| l)
        .ok_or_else(|| format!("scenario without its victim {}", scenario.victim).into())
}

/// The victim's latency, the candidates (the other queries, `external`
/// when there is external load, `gc` when there is GC) and the true effect
/// of each: the victim's
/// latency with everything minus its latency without that candidate. The
/// re-simulations run on two threads.
type Truth = (f64, Vec<String>, Vec<f64>);

fn truth(cfg: &SimConfig, scenario: &Scenario) -> Result<Truth, BoxError> {
    let mut candidates: Vec<String> = scenario
        .queries
        .iter()
        .filter(|q| q.id != scenario.victim)
        .map(|q| q.id.clone())
        .collect();
    if !scenario.external.is_empty() {
        candidates.push(EXTERNAL.into());
    }
    if scenario.gc.any() {
        candidates.push(GC.into());
    }
    let without = |c: &str| match c {
        EXTERNAL => scenario.without_external(),
        GC => scenario.without_gc(),
        q => scenario.without_query(q),
    };
    let with_all = victim_latency(cfg, scenario)?;
    let half = candidates.len().div_ceil(2);
    let latencies: Vec<Result<f64, BoxError>> = std::thread::scope(|s| {
        let (first, second) = candidates.split_at(half);
        let other = s.spawn(|| {
            second
                .iter()
                .map(|c| victim_latency(cfg, &without(c)))
                .collect::<Vec<_>>()
        });
        let mut out: Vec<_> = first
            .iter()
            .map(|c| victim_latency(cfg, &without(c)))
            .collect();
        match other.join() {
            Ok(rest) => out.extend(rest),
            Err(_) => out.push(Err("a simulation thread panicked".into())),
        }
        out
    });
    let effects = latencies
        .into_iter()
        .map(|l| l.map(|l| with_all - l))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((with_all, candidates, effects))
}

/// Each scorer's score of every candidate (indexed by [`Scorer`]): the
/// blame seconds of `culprits(victim, options)`, or its overlap columns,
/// computed by the engine over a `memory://` store holding the scenario's
/// tables, as the SQL function does. A candidate it does not list scores 0.
async fn attribute(
    cfg: &SimConfig,
    scenario: &Scenario,
    candidates: &[String],
) -> Result<Vec<Vec<f64>>, BoxError> {
    let workload = culprit_sim::simulate_scenario(cfg, scenario);
    let store = Store::open("memory://")?;
    let mut batch = store.begin();
    for t in Table::ALL {
        if let Some(b) = workload.table(t) {
            batch.write(t, std::slice::from_ref(b)).await?;
        }
    }
    batch.commit().await?;
    let snapshot = Engine::new(store).snapshot(true).await?;
    let victim = scenario.victim.clone();
    let candidates = candidates.to_vec();
    let scores = tokio::task::spawn_blocking(move || -> Result<Vec<Vec<f64>>, BoxError> {
        let ds = &snapshot.ds;
        let index = |name: &str| candidates.iter().position(|c| c == name);
        let mut out = vec![vec![0.0; candidates.len()]; SCORERS.len()];
        for scorer in SCORERS {
            let Some((attribution, slots, tasks)) = scorer.options() else {
                continue;
            };
            let opts = BlameOptions {
                victims: Some(vec![victim.clone()]),
                attribution,
                slots,
                tasks,
                ..Default::default()
            };
            for row in snapshot.culprits(&opts)? {
                let name = match row.kind {
                    CulpritKind::Query => row.culprit_query.map(|q| ds.queries.name(q)),
                    CulpritKind::External => Some(EXTERNAL),
                    CulpritKind::Gc => Some(GC),
                    CulpritKind::OwnQuery | CulpritKind::Unknown => None,
                };
                let Some(i) = name.and_then(index) else {
                    continue;
                };
                out[scorer as usize][i] += row.seconds;
                if scorer == Scorer::Direct {
                    out[Scorer::DeepOverlap as usize][i] += row.deep_overlap.unwrap_or(0.0);
                    out[Scorer::NaiveOverlap as usize][i] += row.naive_overlap.unwrap_or(0.0);
                }
            }
        }
        Ok(out)
    })
    .await
    .map_err(|e| format!("attribution thread: {e}"))??;
    Ok(scores)
}

/// The candidates ordered by score, highest first; ties keep the
/// candidates' order (other queries as listed, then external, then gc).
fn ranking(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order
}

/// One scorer's scores against the true effects (same length, not empty).
/// Its top culprit is the best-scored candidate when its score is positive
/// (a scorer that blames nobody has no top culprit: top-1 misses).
pub fn score(scores: &[f64], effects: &[f64]) -> Scores {
    let order = ranking(scores);
    let best = effects.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let top = order.first().copied().filter(|&i| scores[i] > 0.0);
    Scores {
        top1: top.is_some_and(|i| effects[i] >= best),
        top1_within: top.is_some_and(|i| effects[i] >= best - 0.1 * best.abs()),
        spearman: spearman(scores, effects),
        ndcg3: ndcg_at(3, scores, effects),
    }
}

/// Ranks from 1, ties given their average rank.
fn average_ranks(x: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut ranks = vec![0.0; x.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && x[order[j + 1]] == x[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            ranks[k] = rank;
        }
        i = j + 1;
    }
    ranks
}

/// Spearman's rank correlation: Pearson's correlation of the average
/// ranks. 0 when either side has a single value (no ranking to compare).
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (average_ranks(a), average_ranks(b));
    let n = ra.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        cov += (x - ma) * (y - mb);
        va += (x - ma) * (x - ma);
        vb += (y - mb) * (y - mb);
    }
    if va <= 0.0 || vb <= 0.0 {
        return 0.0;
    }
    cov / (va * vb).sqrt()
}

/// NDCG@k: the discounted gain of the scorer's first `k` candidates over
/// that of the true first `k`, the gain of a candidate being its true
/// effect (0 when negative), the discount of position `i` (from 1)
/// `log2(i + 1)`. 0 when no candidate has a positive effect.
pub fn ndcg_at(k: usize, scores: &[f64], effects: &[f64]) -> f64 {
    let gain = |i: usize| effects[i].max(0.0);
    let dcg = |order: &[usize]| -> f64 {
        order
            .iter()
            .take(k)
            .enumerate()
            .map(|(pos, &i)| gain(i) / ((pos + 2) as f64).log2())
            .sum()
    };
    let ideal = dcg(&ranking(effects));
    if ideal <= 0.0 {
        return 0.0;
    }
    dcg(&ranking(scores)) / ideal
}

/// The table: per scenario kind (then all), per scorer, the share of
/// scenarios where top-1 and top-1 within 10% hold and the mean Spearman
/// and NDCG@3, as Markdown.
fn table(measured: &[Measured]) -> String {
    let mut out = String::from(
        "| scenarios | n | left out | option | top-1 | top-1 (10%) | Spearman | NDCG@3 |\n\
         |---|---:|---:|---|---:|---:|---:|---:|\n",
    );
    let groups: Vec<(&str, Vec<&Measured>)> = ScenarioKind::ALL
        .iter()
        .map(|k| (k.name(), measured.iter().filter(|m| m.kind == *k).collect()))
        .chain(std::iter::once(("all", measured.iter().collect())))
        .collect();
    for (name, group) in groups {
        let scored: Vec<&[Scores; SCORERS.len()]> =
            group.iter().filter_map(|m| m.scores.as_ref()).collect();
        let left_out = group.len() - scored.len();
        let n = scored.len();
        for (s, scorer) in SCORERS.iter().enumerate() {
            let mean = |f: &dyn Fn(&Scores) -> f64| -> String {
                if n == 0 {
                    return "-".into();
                }
                format!(
                    "{:.2}",
                    scored.iter().map(|x| f(&x[s])).sum::<f64>() / n as f64
                )
            };
            let share = |f: &dyn Fn(&Scores) -> bool| -> String {
                if n == 0 {
                    return "-".into();
                }
                let hits = scored.iter().filter(|x| f(&x[s])).count();
                format!("{:.0}%", 100.0 * hits as f64 / n as f64)
            };
            out.push_str(&format!(
                "| {name} | {n} | {left_out} | {} | {} | {} | {} | {} |\n",
                scorer.name(),
                share(&|x| x.top1),
                share(&|x| x.top1_within),
                mean(&|x| x.spearman),
                mean(&|x| x.ndcg3),
            ));
        }
    }
    out
}

/// Progress on stderr: a bar on a terminal, else a line every tenth of the
/// run.
struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
}

impl Progress {
    fn new(total: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} scenarios {msg}",
                )
                .expect("static template"),
            );
            bar
        });
        Progress { bar, total }
    }

    fn step(&self, i: usize, kind: ScenarioKind) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(i as u64);
                bar.set_message(kind.name());
            }
            None => {
                if i.is_multiple_of(self.total.div_ceil(10).max(1)) {
                    eprintln!(
                        "accuracy: scenario {}/{} ({})",
                        i + 1,
                        self.total,
                        kind.name()
                    );
                }
            }
        }
    }

    /// Runs `f` (which writes to stderr) with the bar hidden.
    fn suspend(&self, f: impl FnOnce()) {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn spearman_by_hand() {
        // Same order: 1; reversed: -1.
        assert!(close(spearman(&[3.0, 1.0, 2.0], &[30.0, 10.0, 20.0]), 1.0));
        assert!(close(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0));
        // Ranks 1 2 3 4 5 against 2 1 4 3 5: d = -1 1 -1 1 0, sum d^2 = 4,
        // rho = 1 - 6 * 4 / (5 * (25 - 1)) = 1 - 24/120 = 0.8.
        let a = [10.0, 20.0, 30.0, 40.0, 50.0];
        let b = [2.0, 1.0, 4.0, 3.0, 5.0];
        assert!(close(spearman(&a, &b), 0.8));
        // A tie: [1, 2, 2, 4] ranks 1, 2.5, 2.5, 4 (mean 2.5), against
        // 1 2 3 4 (mean 2.5). Deviations -1.5 0 0 1.5 and -1.5 -.5 .5 1.5:
        // cov = 2.25 + 2.25 = 4.5, var = 4.5 and 5, rho = 4.5 / sqrt(22.5)
        // = 3 / sqrt(10) = 0.948683.
        let r = spearman(&[1.0, 2.0, 2.0, 4.0], &[1.0, 2.0, 3.0, 4.0]);
        assert!(close(r, 3.0 / 10f64.sqrt()), "{r}");
        assert!(close(r, 0.948_683), "{r}");
        // A scorer that gives everyone the same score ranks nothing: 0.
        assert_eq!(spearman(&[0.0, 0.0, 0.0], &[1.0, 2.0, 3.0]), 0.0);
    }

    #[test]
    fn ndcg3_by_hand() {
        // True effects A 3, B 2, C 0, D 1; the scorer ranks C (0.9), A (0.5),
        // D (0.3), B (0.1). DCG@3 = 0/log2 2 + 3/log2 3 + 1/log2 4
        // = 0 + 1.892789 + 0.5 = 2.392789; the ideal A, B, D:
        // 3/1 + 2/1.584963 + 1/2 = 4.761860; NDCG@3 = 0.502491.
        let effects = [3.0, 2.0, 0.0, 1.0];
        let scores = [0.5, 0.1, 0.9, 0.3];
        let n = ndcg_at(3, &scores, &effects);
        assert!(close(n, 0.502_491), "{n}");
        // The true order gives 1, whatever the scores' scale.
        assert!(close(ndcg_at(3, &[30.0, 20.0, 0.0, 10.0], &effects), 1.0));
        // Negative effects count as 0: -5 in first place gains nothing;
        // DCG = 0 + 3/log2 3 + 0 = 1.892789 over the ideal 3 + 0 + 0.
        let n = ndcg_at(3, &[9.0, 8.0, 7.0], &[-5.0, 3.0, 0.0]);
        assert!(close(n, 1.892_789 / 3.0), "{n}");
    }

    #[test]
    fn top1_and_within_ten_percent() {
        // True best is A (10); B (9.5) is within 10%, C (8) is not.
        let effects = [10.0, 9.5, 8.0];
        let s = score(&[1.0, 0.0, 0.0], &effects);
        assert!(s.top1 && s.top1_within);
        let s = score(&[0.0, 1.0, 0.0], &effects);
        assert!(!s.top1 && s.top1_within);
        let s = score(&[0.0, 0.0, 1.0], &effects);
        assert!(!s.top1 && !s.top1_within);
        // Blaming nobody names no top culprit.
        let s = score(&[0.0, 0.0, 0.0], &effects);
        assert!(!s.top1 && !s.top1_within);
    }

    #[test]
    fn scenario_seeds_differ() {
        let seeds: std::collections::HashSet<u64> = (0..100).map(|i| scenario_seed(1, i)).collect();
        assert_eq!(seeds.len(), 100);
        assert_ne!(scenario_seed(1, 0), scenario_seed(2, 0));
    }
}
