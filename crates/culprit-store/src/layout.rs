//! How window rows are laid out in the store so that the method can read
//! them host group by host group: every `task_windows` file written for a
//! batch holds the rows of one host bucket (the bucket of the host its task
//! ran on). The blame sweep then loads one bucket at a time, so memory holds
//! the rows of a few hosts, never the whole table (method.md section 2: hosts
//! are independent).
//!
//! Time prunes too. Rows of the time tables (`tasks`, `task_windows`,
//! `host_windows`) are written sorted by their start, in small row groups,
//! and every file records the time span of its rows in the manifest; Parquet
//! keeps each row group's minimum and maximum. A reader of a time range
//! skips the files and row groups that end before it or start after it
//! (`Store::scan_overlapping`). Every batch that writes tasks also writes
//! the query index ([`QUERY_SPANS`]): per query, the span of its tasks, so an
//! analysis of one victim finds the time it must read without reading any
//! task.

/// Buckets of hosts. Changing it only makes older files be read as
/// unbucketed (correct, less bounded in memory).
pub const HOST_BUCKETS: u32 = 16;

/// FNV-1a of a host's name, stable across versions and machines (part of
/// the stored layout).
fn host_hash(host: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The bucket of a host: its [`host_hash`] modulo [`HOST_BUCKETS`], and
/// so its [`host_key`] modulo the same.
pub fn host_bucket(host: &str) -> u32 {
    (host_hash(host) % HOST_BUCKETS as u64) as u32
}

/// The column of `task_windows` files that holds, for each row, the
/// [`host_key`] of its task's host (NULL where the writer did not know the
/// task: window rows written before their task, in another batch, and
/// every row of files written before the column). Not a column of the
/// table: SQL does not show it (the table's schema is the interchange
/// one); a read for named victims drops the rows of hosts it does not
/// explain without looking up their tasks (`culprit-engine`'s `focus.rs`).
pub const HOST_KEY: &str = "host_key";

/// No host key: [`host_key`] never gives it (a writer's "unknown").
pub const NO_HOST_KEY: u32 = u32::MAX;

/// A host's key in the stored window rows ([`HOST_KEY`]): the low 32 bits
/// of its [`host_hash`], [`NO_HOST_KEY`] moved down by [`HOST_BUCKETS`].
/// Hosts may share a key (a reader keeps the rows of every host of a key
/// it wants); a key modulo [`HOST_BUCKETS`] is its host's bucket.
pub fn host_key(host: &str) -> u32 {
    key_of_hash(host_hash(host))
}

fn key_of_hash(h: u64) -> u32 {
    match h as u32 {
        NO_HOST_KEY => NO_HOST_KEY - HOST_BUCKETS,
        k => k,
    }
}

/// The host bucket of a [`host_key`] (`None` for [`NO_HOST_KEY`]).
pub fn key_bucket(key: u32) -> Option<u32> {
    (key != NO_HOST_KEY).then_some(key % HOST_BUCKETS)
}

/// The schema of a table's stored files: the table's own, and for
/// `task_windows` the [`HOST_KEY`] column after it.
pub fn stored_schema(table: culprit_core::Table) -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    static WINDOWS: std::sync::OnceLock<arrow::datatypes::SchemaRef> = std::sync::OnceLock::new();
    if table != culprit_core::Table::TaskWindows {
        return table.schema();
    }
    WINDOWS
        .get_or_init(|| {
            let own = table.schema();
            let mut fields: Vec<Field> = own.fields().iter().map(|f| f.as_ref().clone()).collect();
            fields.push(Field::new(HOST_KEY, DataType::UInt32, true));
            std::sync::Arc::new(Schema::new_with_metadata(fields, own.metadata().clone()))
        })
        .clone()
}

/// A 128-bit digest of a text (two SipHash-1-3 with different first
/// bytes), to key in-memory maps of ids (a task's bucket) by 16 bytes
/// instead of the text. Never stored.
pub fn text_digest(text: &str) -> (u64, u64) {
    use std::hash::{DefaultHasher, Hasher};
    let (mut a, mut b) = (DefaultHasher::new(), DefaultHasher::new());
    a.write_u8(0x5a);
    b.write_u8(0xa5);
    a.write(text.as_bytes());
    b.write(text.as_bytes());
    (a.finish(), b.finish())
}

/// The query index: one row per query and batch, the span of that batch's
/// tasks of the query (earliest ready or launch time, latest finish), how
/// many tasks it wrote, and their earliest launch (`first_launch`: absent
/// in index files written before it, where readers take it as unknown).
/// Stored like a table, under this name (not a telemetry table: SQL does
/// not show it; users cannot name a table so).
pub const QUERY_SPANS: &str = "culprit.query_spans";

/// The stored slot holders' shares (`paths::stage_shares_file`), derived
/// from the telemetry, not a table of the manifest: one row per stage and
/// culprit, with the stage's span (`first`, `last`) whose row groups'
/// statistics let a read take only the stages of a time.
pub const STAGE_SHARES: &str = "culprit.stage_shares";

/// The schema of [`QUERY_SPANS`].
pub fn query_spans_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    static SCHEMA: std::sync::OnceLock<arrow::datatypes::SchemaRef> = std::sync::OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
            std::sync::Arc::new(Schema::new(vec![
                Field::new("query_id", DataType::Utf8, false),
                Field::new("first", ts.clone(), false),
                Field::new("last", ts.clone(), false),
                Field::new("tasks", DataType::UInt64, false),
                Field::new("first_launch", ts, true),
            ]))
        })
        .clone()
}

/// The columns that give a row's time span in a time table: its start
/// (`None`: the earlier of two columns, e.g. a task's ready and launch
/// times) and its end. `None` for the other tables.
pub fn time_columns(table: &str) -> Option<(&'static [&'static str], &'static str)> {
    match table {
        "tasks" => Some((&["launch_time", "ready_time"], "finish_time")),
        "task_windows" | "host_windows" => Some((&["window_start"], "window_end")),
        // The stored slot holders' shares: a stage's first launch and last
        // finish (`paths::stage_shares_file`).
        STAGE_SHARES => Some((&["first"], "last")),
        _ => None,
    }
}

/// The column a time table's rows are sorted by in its files: the first
/// of its start columns (a task's launch time, a window's start). `None`
/// for the other tables.
pub fn sort_key(table: &str) -> Option<&'static str> {
    time_columns(table).and_then(|(starts, _)| starts.first().copied())
}

/// Rows per Parquet file before a write rolls over to the next file.
///
/// A time table's files are smaller: a read of a time range parses the
/// footer of every file it overlaps, and a footer describes every row
/// group of its file. Compacted in order of time (see `compact.rs`), a
/// 1e7-task store's `task_windows` files held 4 Mi rows in 256 row groups
/// (a footer of 193 KB), and a victim's read parsed one such footer per
/// bucket: about 6 ms of a 0.14 s process (docs/performance.md). At 1 Mi
/// rows a footer holds 256 row groups of 4 Ki rows ([`rows_per_group`]):
/// at 1e7 tasks on 500 hosts a victim's window rows cost what they cost
/// in groups of 16 Ki (64 a footer), the rows saved paid for in footers
/// (docs/performance.md, twenty-first session); smaller files would keep
/// footers small for four times as many files in the manifest.
pub fn rows_per_file(table: &str) -> usize {
    if time_columns(table).is_some() {
        1 << 20
    } else {
        4 << 20
    }
}

/// Rows per Parquet row group: small for the time tables, so that a time
/// range reads little more than its rows; large for the others.
///
/// 4 Ki rows for tasks and window rows: in groups of 16 Ki (each over
/// about 110 s of a bucket's rows at 1e6 tasks on 500 hosts), a victim of
/// 41 s decoded 22 groups of window rows, 360,000 rows for the 108,000 of
/// its time; in groups of 4 Ki about 160,000, and a warm server answered a
/// far victim in 70-75 ms instead of 92-95 (58-63 ms with Snappy too,
/// `store.rs`'s `writer_properties`; docs/performance.md). A footer then
/// describes 256 groups of a file of [`rows_per_file`] rows.
///
/// `host_windows` had groups of 4 Ki first: host metrics often come host by host
/// (one series or one host's file at a time; `culprit generate` writes
/// them in long stretches per host too), so a file of them (one part of
/// an ingest) holds some hosts over a long time, and a victim's time
/// overlaps many such files of a large store. Rows sorted by start, a row
/// group spans less time the fewer rows it has: at 1e7 tasks (51 such
/// files, each over about 4.6 of the store's 13.9 hours, 17 of them over
/// the victim's time), a victim's read decoded 278,528 host rows in groups
/// of 16 Ki, 69,632 in groups of 4 Ki (16,576 at 1e6 tasks), its task
/// window rows 458,752 in both (docs/performance.md).
pub fn rows_per_group(table: &str) -> usize {
    match table {
        "host_windows" | "task_windows" | "tasks" => 4 << 10,
        // The stored slot holders' shares (`STAGE_SHARES`).
        _ if time_columns(table).is_some() => 16 << 10,
        _ => 256 << 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_stable_and_spread() {
        // Part of the stored layout: these values must never change.
        assert_eq!(host_bucket(""), (0xcbf2_9ce4_8422_2325u64 % 16) as u32);
        let mut seen = [0usize; HOST_BUCKETS as usize];
        for h in 0..500 {
            seen[host_bucket(&format!("host-{h:04}")) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 10), "{seen:?}");
    }

    #[test]
    fn a_hosts_key_gives_its_bucket_and_is_never_the_unknown_one() {
        // Part of the stored layout: FNV-1a's low 32 bits.
        assert_eq!(host_key(""), 0xcbf2_9ce4_8422_2325u64 as u32);
        assert_eq!(host_key("a"), 0xaf63_dc4c_8601_ec8cu64 as u32);
        for h in 0..5000 {
            let host = format!("host-{h:04}");
            assert_eq!(key_bucket(host_key(&host)), Some(host_bucket(&host)));
        }
        // A hash whose low bits are the unknown key keeps its bucket.
        let h = 0x1234_5678_ffff_ffffu64;
        assert_ne!(key_of_hash(h), NO_HOST_KEY);
        assert_eq!(
            key_bucket(key_of_hash(h)),
            Some((h % HOST_BUCKETS as u64) as u32)
        );
        assert_eq!(key_bucket(NO_HOST_KEY), None);
        let schema = stored_schema(culprit_core::Table::TaskWindows);
        let own = culprit_core::Table::TaskWindows.schema();
        assert_eq!(schema.fields().len(), own.fields().len() + 1);
        assert_eq!(schema.field(own.fields().len()).name(), HOST_KEY);
        assert_eq!(
            stored_schema(culprit_core::Table::Tasks),
            culprit_core::Table::Tasks.schema()
        );
    }
}
