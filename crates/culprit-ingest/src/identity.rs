//! The identity of a window row: which row it is, so that a window read
//! again (a folder ingested again, a file that grew under `--watch`, a
//! byte-different copy of a Spark log) is stored once.
//!
//! The interchange spec has one `task_windows` row "per task, window and
//! resource" (with `detail` the finer kind of request) and `host_windows`
//! rows per host, window and resource; those columns are the identity. The
//! amounts (`blocked`, `acquired`, `gc`, `capacity`, `used`) are not part of
//! it: a row whose identity is already stored is skipped like a keyed row
//! whose key is stored (the stored row stands).
//!
//! Identities are compared by a 128-bit digest: two aHash with fixed seeds
//! of the same words (each part's value: a time as it is, a text by its
//! own length-prefixed hash; then which parts are valid), so that no two
//! different identities give the same words. A text that repeats in its
//! column (a task's id on each of its rows) is hashed once. Digests are
//! never stored: they are computed again from the columns of each file
//! read.

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, RecordBatch, StringArray};
use arrow::datatypes::TimestampMicrosecondType;
use culprit_core::Table;

/// The identity columns of a window table, in the order they are shown;
/// empty for the other tables (they have keys, [`Table::key_columns`]).
pub fn columns(table: Table) -> &'static [&'static str] {
    match table {
        Table::TaskWindows => &[
            "task_id",
            "resource",
            "detail",
            "window_start",
            "window_end",
        ],
        Table::HostWindows => &["host", "resource", "scope", "window_start", "window_end"],
        _ => &[],
    }
}

/// The digest of a key (the values of a table's key columns, or a task
/// id): each value's length and bytes hashed by [`A`] and by [`B`].
/// In-memory only.
pub fn key_digest(values: &[&str]) -> (u64, u64) {
    hash_texts(values.iter().map(|v| v.as_bytes()))
}

/// Each text's length and bytes hashed by [`A`] and by [`B`].
fn hash_texts<'v>(texts: impl IntoIterator<Item = &'v [u8]>) -> (u64, u64) {
    use std::hash::{BuildHasher, Hasher};
    let (mut a, mut b) = (A.build_hasher(), B.build_hasher());
    for v in texts {
        for h in [&mut a, &mut b] {
            h.write_u64(v.len() as u64);
            h.write(v);
        }
    }
    (a.finish(), b.finish())
}

/// The two hashers of keys and identities. Fixed seeds: digests are
/// compared within one process only, but the same input must give the same
/// digest on every run. (ahash XORs the seeds with its own constants: B's
/// were those constants once, a hasher of zeros whose words were all 0, so
/// digests had 64 bits.)
const A: ahash::RandomState = ahash::RandomState::with_seeds(
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
);
const B: ahash::RandomState = ahash::RandomState::with_seeds(
    0x9216_d5d9_8979_fb1b,
    0xd131_0ba6_98df_b5ac,
    0x2ffd_72db_d01a_dfb7,
    0xb8e1_afed_6a26_7e96,
);

/// A text's two words: [`key_digest`] of the text alone.
fn text_words(v: &[u8]) -> (u64, u64) {
    hash_texts([v])
}

/// The words of the texts last seen in one column, so that a value that
/// repeats (a task's id on each of its rows, a resource's name) is hashed
/// once, not once a row.
struct Recent<'a> {
    seen: [(&'a [u8], (u64, u64)); RECENT],
    len: usize,
    last: usize,
    next: usize,
}

/// Texts remembered per column by [`Recent`].
const RECENT: usize = 8;

impl<'a> Recent<'a> {
    fn new() -> Recent<'a> {
        Recent {
            seen: [(&[][..], (0, 0)); RECENT],
            len: 0,
            last: 0,
            next: 0,
        }
    }

    fn words(&mut self, v: &'a [u8]) -> (u64, u64) {
        if self.len > 0 && self.seen[self.last].0 == v {
            return self.seen[self.last].1;
        }
        if let Some(at) = self.seen[..self.len].iter().position(|(s, _)| *s == v) {
            self.last = at;
            return self.seen[at].1;
        }
        let words = text_words(v);
        let at = if self.len < RECENT {
            self.len += 1;
            self.len - 1
        } else {
            let at = self.next;
            self.next = (at + 1) % RECENT;
            at
        };
        self.seen[at] = (v, words);
        self.last = at;
        words
    }
}

/// One identity column, as read.
enum Part<'a> {
    Text(Option<&'a StringArray>),
    Time(Option<&'a PrimitiveArray<TimestampMicrosecondType>>),
}

/// The identity columns of some rows of a window table.
pub struct Identities<'a> {
    parts: Vec<Part<'a>>,
}

impl<'a> Identities<'a> {
    /// The identity columns of `table` found by `column` (by name); a
    /// column that is missing (an optional one, in an older file) is NULL.
    pub fn new(table: Table, column: impl Fn(&str) -> Option<&'a ArrayRef>) -> Identities<'a> {
        let parts = columns(table)
            .iter()
            .map(|name| {
                let array = column(name);
                if name.starts_with("window_") {
                    Part::Time(array.and_then(|a| a.as_primitive_opt()))
                } else {
                    Part::Text(array.and_then(|a| a.as_string_opt::<i32>()))
                }
            })
            .collect();
        Identities { parts }
    }

    /// The identity columns of a batch (the canonical schema or a
    /// projection of it).
    pub fn of_batch(table: Table, batch: &'a RecordBatch) -> Identities<'a> {
        Identities::new(table, |name| batch.column_by_name(name))
    }

    /// The digest of row `i`'s identity.
    pub fn digest(&self, i: usize) -> u128 {
        self.digest_with(i, |_, v| text_words(v))
    }

    /// `f(i, digest)` for each of the first `rows` rows, in order (the
    /// digest of a text that repeats in its column computed once).
    pub fn each_digest(&self, rows: usize, mut f: impl FnMut(usize, u128)) {
        let mut recent: Vec<Recent<'a>> = self.parts.iter().map(|_| Recent::new()).collect();
        for i in 0..rows {
            f(i, self.digest_with(i, |p, v| recent[p].words(v)));
        }
    }

    /// Row `i`'s digest: per part two words, one per hasher (a text's
    /// [`text_words`], given by `text` from part `p`'s bytes; a time's value
    /// twice; 0 for a NULL), then a word of which parts are valid, hashed
    /// by [`A`] and [`B`]. The number of parts is fixed per table, so no
    /// two identities give the same words.
    fn digest_with(&self, i: usize, mut text: impl FnMut(usize, &'a [u8]) -> (u64, u64)) -> u128 {
        use std::hash::{BuildHasher, Hasher};
        let (mut a, mut b) = (A.build_hasher(), B.build_hasher());
        let mut valid = 0u64;
        for (p, part) in self.parts.iter().enumerate() {
            let words = match part {
                Part::Text(Some(s)) if s.is_valid(i) => Some(text(p, s.value(i).as_bytes())),
                Part::Time(Some(t)) if t.is_valid(i) => {
                    Some((t.value(i) as u64, t.value(i) as u64))
                }
                _ => None,
            };
            valid |= u64::from(words.is_some()) << p;
            let (x, y) = words.unwrap_or((0, 0));
            a.write_u64(x);
            b.write_u64(y);
        }
        a.write_u64(valid);
        b.write_u64(valid);
        (u128::from(a.finish()) << 64) | u128::from(b.finish())
    }

    /// Row `i`'s identity as shown in a message: the values joined by `/`
    /// (times in RFC 3339, NULL as nothing).
    pub fn show(&self, i: usize) -> String {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Text(Some(s)) if s.is_valid(i) => s.value(i).to_string(),
                Part::Time(Some(t)) if t.is_valid(i) => {
                    chrono::DateTime::from_timestamp_micros(t.value(i))
                        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
                        .unwrap_or_else(|| t.value(i).to_string())
                }
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::TimestampMicrosecondArray;
    use std::sync::Arc;

    fn rows(
        hosts: &[Option<&str>],
        resources: &[&str],
        starts: &[i64],
        scopes: &[Option<&str>],
    ) -> RecordBatch {
        let n = hosts.len();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(hosts.to_vec())),
            Arc::new(TimestampMicrosecondArray::from(starts.to_vec()).with_timezone("UTC")),
            Arc::new(TimestampMicrosecondArray::from(vec![10_000_000; n]).with_timezone("UTC")),
            Arc::new(StringArray::from(resources.to_vec())),
            Arc::new(arrow::array::Float64Array::from(vec![Some(1.0); n])),
            Arc::new(arrow::array::Float64Array::from(vec![None; n])),
            Arc::new(StringArray::from(scopes.to_vec())),
        ];
        // Nullable, unlike the stored schema: a NULL must have its own digest.
        let fields: Vec<arrow::datatypes::Field> = Table::HostWindows
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        RecordBatch::try_new(schema, cols).unwrap()
    }

    #[test]
    fn digests_tell_identities_apart_and_ignore_amounts() {
        let b = rows(
            &[
                Some("h1"),
                Some("h1"),
                Some("h1c"),
                Some("h1"),
                None,
                Some("h1"),
            ],
            &["cpu", "cpu", "pu", "network", "cpu", "cpu"],
            &[0, 0, 0, 0, 0, 0],
            &[None, None, None, None, None, Some("app-1")],
        );
        let ids = Identities::of_batch(Table::HostWindows, &b);
        assert_eq!(ids.digest(0), ids.digest(1));
        // "h1"+"cpu" and "h1c"+"pu" have the same bytes, not the same identity.
        assert_ne!(ids.digest(0), ids.digest(2));
        assert_ne!(ids.digest(0), ids.digest(3));
        assert_ne!(ids.digest(0), ids.digest(4));
        // Another slot pool's row is another row.
        assert_ne!(ids.digest(0), ids.digest(5));
        assert_eq!(
            ids.show(0),
            "h1/cpu//1970-01-01T00:00:00Z/1970-01-01T00:00:10Z"
        );
        assert_eq!(
            ids.show(5),
            "h1/cpu/app-1/1970-01-01T00:00:00Z/1970-01-01T00:00:10Z"
        );
        // A projection finds the same identity.
        let projected = b.project(&[3, 0, 1, 2]).unwrap();
        let p = Identities::of_batch(Table::HostWindows, &projected);
        assert_eq!(p.digest(0), ids.digest(0));
    }

    #[test]
    fn a_rows_digest_is_the_same_whether_its_texts_were_seen_before_or_not() {
        // Hosts that repeat, alternate and cycle through more than the
        // texts remembered per column; each_digest must give every row the
        // digest digest(i) computes from nothing, and tell every
        // identity apart.
        let n = 400;
        let hosts: Vec<Option<String>> = (0..n)
            .map(|i| match i % 7 {
                0 => None,
                _ => Some(format!("h{}", (i * 7919 / 3) % (RECENT * 3 + 1))),
            })
            .collect();
        let hosts: Vec<Option<&str>> = hosts.iter().map(|h| h.as_deref()).collect();
        let resources: Vec<&str> = (0..n).map(|i| ["cpu", "disk", "net"][i % 3]).collect();
        let starts: Vec<i64> = (0..n as i64).map(|i| i / 5).collect();
        let scopes: Vec<Option<&str>> = (0..n).map(|i| (i % 11 == 0).then_some("p")).collect();
        let b = rows(&hosts, &resources, &starts, &scopes);
        let ids = Identities::of_batch(Table::HostWindows, &b);
        let mut each = Vec::new();
        ids.each_digest(n, |i, d| each.push((i, d)));
        let alone: Vec<(usize, u128)> = (0..n).map(|i| (i, ids.digest(i))).collect();
        assert_eq!(each, alone);
        let shown: std::collections::HashSet<String> = (0..n).map(|i| ids.show(i)).collect();
        let digests: std::collections::HashSet<u128> = alone.iter().map(|e| e.1).collect();
        assert_eq!(digests.len(), shown.len());
        let high: std::collections::HashSet<u64> =
            alone.iter().map(|e| (e.1 >> 64) as u64).collect();
        let low: std::collections::HashSet<u64> = alone.iter().map(|e| e.1 as u64).collect();
        assert_eq!((high.len(), low.len()), (shown.len(), shown.len()));
    }

    #[test]
    fn digests_have_128_bits_both_words_vary() {
        // Both 64-bit words of a digest depend on the input: a word that
        // is constant (a hasher seeded to zero) leaves 64 bits, and two of
        // 1e7 task ids would share a digest with a chance of 3 in a million.
        let n = 10_000;
        let (mut high, mut low) = (
            std::collections::HashSet::new(),
            std::collections::HashSet::new(),
        );
        for i in 0..n {
            let (h, l) = key_digest(&[&format!("task-{i}")]);
            high.insert(h);
            low.insert(l);
        }
        assert_eq!(high.len(), n, "high words");
        assert_eq!(low.len(), n, "low words");
    }
}
