//! `beta(c -> v)`, the blame of one task on another (method.md section 4;
//! 001 eq. 12, time-weighted): over aligned windows,
//! `(1 / T_v) * sum_k WT(v,k) * RA(c,k) / RA(v,k)`. Windows where the victim
//! acquired nothing have no beta (they add nothing).
//!
//! The formula is here once: the `blame_beta` aggregate sums it over rows a
//! user aligned, and the paper form of the sweep (`sweep.rs`,
//! `attribution=paper`) integrates the same weight over elementary windows.

/// The weight of one window on every culprit: `WT(v) / (RA(v) * T_v)`, so
/// that `beta(c -> v) = sum_k weight_k * RA(c,k)`. `None` where the victim
/// acquired nothing or did not run (no beta), or for non-finite input.
#[inline]
pub fn weight(victim_blocked: f64, victim_acquired: f64, victim_run: f64) -> Option<f64> {
    (victim_acquired > 0.0 && victim_run > 0.0 && victim_blocked.is_finite())
        .then(|| victim_blocked / (victim_acquired * victim_run))
        .filter(|w| w.is_finite())
}

/// Sums `beta(c -> v)` over aligned windows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BetaAcc {
    pub sum: f64,
}

impl BetaAcc {
    pub fn add(
        &mut self,
        victim_blocked: f64,
        victim_acquired: f64,
        culprit_acquired: f64,
        victim_run: f64,
    ) {
        if !culprit_acquired.is_finite() {
            return;
        }
        if let Some(w) = weight(victim_blocked, victim_acquired, victim_run) {
            self.sum += w * culprit_acquired;
        }
    }
}
