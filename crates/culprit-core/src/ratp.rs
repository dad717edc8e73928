//! RATP and slowdown (method.md section 3; 000 §3, 001 §4).
//!
//! All functions return `None` where the value is undefined: zero (or
//! negative) acquired units, zero capacity, or non-finite input. They never
//! panic and never return NaN.

/// `RATP = (WT + CT) / RA` (001 eq. 2): seconds per unit acquired.
pub fn ratp(blocked: f64, computed: f64, acquired: f64) -> Option<f64> {
    per_unit(blocked + computed, acquired)
}

/// `RATP = dt / RA` when no split between blocked and computed time is known
/// (000 eq. 1); also `RATP_max` (001 eq. 11).
pub fn ratp_max(dt: f64, acquired: f64) -> Option<f64> {
    per_unit(dt, acquired)
}

/// `RATP_blocked = WT / RA` (000 eq. 7, 001 eq. 10).
pub fn ratp_blocked(blocked: f64, acquired: f64) -> Option<f64> {
    per_unit(blocked, acquired)
}

/// The ideal RATP `RATP* = 1 / capacity` (capacity in units per second).
pub fn ratp_ideal(capacity: f64) -> Option<f64> {
    per_unit(1.0, capacity)
}

/// Slowdown `S = (RATP - RATP*) / RATP*` (000 eq. 4) = `RATP * capacity - 1`.
pub fn slowdown(ratp: f64, capacity: f64) -> Option<f64> {
    if !(capacity.is_finite() && capacity > 0.0 && ratp.is_finite()) {
        return None;
    }
    let ideal = 1.0 / capacity;
    Some((ratp - ideal) / ideal)
}

fn per_unit(seconds: f64, units: f64) -> Option<f64> {
    if !(units.is_finite() && units > 0.0 && seconds.is_finite()) {
        return None;
    }
    Some(seconds / units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// method.md section 12, example 1: one 1-s window, disk capacity 210 B/s,
    /// T1 reads 30 B: S(T1) = 6.
    #[test]
    fn example_1_slowdown() {
        let r = ratp_max(1.0, 30.0).unwrap();
        assert!(close(slowdown(r, 210.0).unwrap(), 6.0));
        // T2 read 60 B and T3 120 B in the same window.
        assert!(close(
            slowdown(ratp_max(1.0, 60.0).unwrap(), 210.0).unwrap(),
            2.5
        ));
        assert!(close(
            slowdown(ratp_max(1.0, 120.0).unwrap(), 210.0).unwrap(),
            0.75
        ));
    }

    #[test]
    fn zero_acquired_is_undefined() {
        assert_eq!(ratp(1.0, 0.0, 0.0), None);
        assert_eq!(ratp_blocked(1.0, 0.0), None);
        assert_eq!(ratp_max(1.0, -1.0), None);
        assert_eq!(slowdown(1.0, 0.0), None);
        assert_eq!(slowdown(f64::NAN, 1.0), None);
        assert_eq!(ratp_ideal(0.0), None);
        assert!(close(ratp(0.25, 0.75, 30.0).unwrap(), 1.0 / 30.0));
        assert!(close(ratp_blocked(0.25, 30.0).unwrap(), 0.25 / 30.0));
    }
}
