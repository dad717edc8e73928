//! Windows as a series (000 §6.2, figures 10-12: the DOR of the top
//! culprits minute by minute): the consecutive windows of a range, each
//! analysed as one call with that window would analyse it.
//!
//! The work is shared: the sweeps run once over the union of the windows
//! and cut every row at the window bounds ([`Windows::pieces`]), so a
//! window's blame only ever sees its own part of each row, exactly as a
//! call with that window clips the rows (method.md section 2: attribution
//! is local to each elementary window, and a window bound is one more event
//! time). Rows are read, synthesized and sorted once, not once per window.

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

/// The windows an analysis splits its time into: one window (a plain
/// call), or the consecutive windows of a series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows {
    /// `len + 1` increasing bounds: window `k` is `[bounds[k], bounds[k + 1])`.
    bounds: Vec<Micros>,
}

impl Windows {
    /// One window, `[from, to)` (empty when `from >= to`).
    pub fn one((from, to): (Micros, Micros)) -> Windows {
        Windows {
            bounds: vec![from, to.max(from)],
        }
    }

    /// The windows of [`series_windows`].
    pub fn series(from: Micros, to: Micros, step: Micros) -> Result<Windows, MethodError> {
        let windows = series_windows(from, to, step)?;
        let mut bounds = Vec::with_capacity(windows.len() + 1);
        bounds.push(from);
        bounds.extend(windows.iter().map(|w| w.1));
        Ok(Windows { bounds })
    }

    /// The windows' bounds: window `k` is `[bounds[k], bounds[k + 1])`.
    pub fn bounds(&self) -> &[Micros] {
        &self.bounds
    }

    /// The windows of `bounds` (as [`Windows::bounds`] gives them): at
    /// least two, none smaller than the one before.
    pub fn from_bounds(bounds: Vec<Micros>) -> Result<Windows, MethodError> {
        if bounds.len() < 2 || bounds.windows(2).any(|b| b[1] < b[0]) {
            return Err(MethodError::Internal(format!(
                "windows need at least two non-decreasing bounds, got {} of them",
                bounds.len()
            )));
        }
        Ok(Windows { bounds })
    }

    /// How many windows.
    pub fn len(&self) -> usize {
        self.bounds.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The union of the windows.
    pub fn whole(&self) -> (Micros, Micros) {
        (self.bounds[0], self.bounds[self.bounds.len() - 1])
    }

    /// Window `k`.
    pub fn get(&self, k: usize) -> (Micros, Micros) {
        (self.bounds[k], self.bounds[k + 1])
    }

    pub fn iter(&self) -> impl Iterator<Item = (Micros, Micros)> + '_ {
        self.bounds.windows(2).map(|b| (b[0], b[1]))
    }

    /// The bounds between windows (where one ends and the next starts),
    /// with the index of the window that starts there.
    pub fn inner_bounds(&self) -> impl Iterator<Item = (Micros, u32)> + '_ {
        let n = self.bounds.len();
        self.bounds[1..n - 1]
            .iter()
            .enumerate()
            .map(|(k, &b)| (b, k as u32 + 1))
    }

    /// The window holding instant `t` (the first or last window for
    /// instants before or after them all).
    pub fn index(&self, t: Micros) -> usize {
        let n = self.len();
        self.bounds[1..n].partition_point(|&b| b <= t)
    }

    /// The parts of `[s, e)` in each window it overlaps, in order:
    /// `(window, start, end)`, none empty.
    pub fn pieces(&self, s: Micros, e: Micros) -> Pieces<'_> {
        let (from, to) = self.whole();
        let (s, e) = (s.max(from), e.min(to));
        let k = if s < e { self.index(s) } else { self.len() };
        Pieces {
            windows: self,
            k,
            s,
            e,
        }
    }
}

/// The iterator of [`Windows::pieces`].
pub struct Pieces<'a> {
    windows: &'a Windows,
    k: usize,
    s: Micros,
    e: Micros,
}

impl Iterator for Pieces<'_> {
    type Item = (u32, Micros, Micros);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.k >= self.windows.len() || self.s >= self.e {
            return None;
        }
        let (_, end) = self.windows.get(self.k);
        let piece = (self.k as u32, self.s, end.min(self.e));
        self.s = piece.2;
        self.k += 1;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cut_at_the_bounds() {
        let w = Windows::series(0, 25, 10).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w.whole(), (0, 25));
        let p = |s, e| w.pieces(s, e).collect::<Vec<_>>();
        assert_eq!(p(-5, 3), vec![(0, 0, 3)]);
        assert_eq!(p(5, 22), vec![(0, 5, 10), (1, 10, 20), (2, 20, 22)]);
        assert_eq!(p(10, 20), vec![(1, 10, 20)]);
        assert_eq!(p(24, 40), vec![(2, 24, 25)]);
        assert!(p(25, 40).is_empty());
        assert!(p(-9, 0).is_empty());
        assert!(p(7, 7).is_empty());
        assert_eq!(w.inner_bounds().collect::<Vec<_>>(), vec![(10, 1), (20, 2)]);
        assert_eq!(
            (w.index(-3), w.index(9), w.index(10), w.index(99)),
            (0, 0, 1, 2)
        );
        let one = Windows::one((i64::MIN, i64::MAX));
        assert_eq!(one.pieces(3, 9).collect::<Vec<_>>(), vec![(0, 3, 9)]);
        assert_eq!(one.inner_bounds().count(), 0);
        assert!(Windows::one((5, 5)).pieces(0, 10).next().is_none());
    }

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
