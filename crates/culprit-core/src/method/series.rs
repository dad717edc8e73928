//! Windows as a series (000 §6.2, figures 10-12: the DOR of the top
//! culprits minute by minute): the consecutive windows of a range, each
//! analysed as one call with that window would analyse it.

use super::model::Micros;
use crate::MethodError;

/// The most windows one series call may ask for.
pub const MAX_SERIES_WINDOWS: usize = 10_000;

/// The consecutive windows `[from + k*step, from + (k+1)*step)` covering
/// `[from, to)`, the last one cut at `to`.
pub fn series_windows(
    from: Micros,
    to: Micros,
    step: Micros,
) -> Result<Vec<(Micros, Micros)>, MethodError> {
    if step <= 0 {
        return Err(MethodError::InvalidArgument(
            "the step must be a positive duration".into(),
        ));
    }
    if from >= to {
        return Err(MethodError::InvalidArgument(
            "the window is empty: 'from' must be before 'to'".into(),
        ));
    }
    let span = (to as i128) - (from as i128);
    let count = (span + step as i128 - 1) / step as i128;
    if count > MAX_SERIES_WINDOWS as i128 {
        return Err(MethodError::InvalidArgument(format!(
            "{count} windows of that step between 'from' and 'to'; a series has at most \
             {MAX_SERIES_WINDOWS} (take a longer step)"
        )));
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut start = from;
    while start < to {
        let end = start.saturating_add(step).min(to);
        out.push((start, end));
        start = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_range_and_the_last_is_cut() {
        assert_eq!(
            series_windows(0, 25, 10).unwrap(),
            vec![(0, 10), (10, 20), (20, 25)]
        );
        assert_eq!(series_windows(5, 6, 10).unwrap(), vec![(5, 6)]);
        assert!(series_windows(0, 10, 0).is_err());
        assert!(series_windows(10, 10, 1).is_err());
        assert!(series_windows(0, 1_000_000, 1).is_err());
        // No overflow at the ends of time.
        let w = series_windows(i64::MAX - 10, i64::MAX, 4).unwrap();
        assert_eq!(w.last(), Some(&(i64::MAX - 2, i64::MAX)));
    }
}
