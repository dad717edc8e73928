//! The one module that decides where every object lives (relative to the
//! store's root). Names sort usefully: manifests by version, data files by
//! the time their batch started.
//!
//! ```text
//! _culprit/manifests/00000000000000000007.json   the catalog, one per commit
//! tables/<table>/<batch>-<part>.parquet           data, visible once listed
//! derived/stage_shares/<telemetry>/v<version>-<written>-f<format>.parquet  the slot holders' shares and the stored answers
//! derived/stage_shares/<telemetry>/v<version>-<written>-f<format>-shares.parquet  the shares only, before the answers
//! ```

use culprit_core::Table;
use object_store::path::Path;

pub const MANIFEST_DIR: &str = "_culprit/manifests";

/// `_culprit/manifests/{version:020}.json`
pub fn manifest(root: &Path, version: u64) -> Path {
    join(root, &format!("{MANIFEST_DIR}/{version:020}.json"))
}

/// The folder holding the manifests.
pub fn manifest_dir(root: &Path) -> Path {
    join(root, MANIFEST_DIR)
}

/// Parses a manifest object's version from its file name.
pub fn manifest_version(location: &Path) -> Option<u64> {
    let name = location.filename()?;
    let stem = name.strip_suffix(".json")?;
    if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
        stem.parse().ok()
    } else {
        None
    }
}

/// `tables/<table>/<batch>-<part:04>.parquet`, relative to the root.
pub fn data_file(table: Table, batch: &str, part: usize) -> String {
    format!("tables/{}/{batch}-{part:04}.parquet", table.name())
}

/// `tables/user/<name>/<batch>-<part:04>.parquet`: a user table's data.
/// A file of the query index ([`crate::layout::QUERY_SPANS`]).
pub fn query_spans_file(batch: &str, part: usize) -> String {
    format!(
        "tables/{}/{batch}-{part:04}.parquet",
        crate::layout::QUERY_SPANS
    )
}

pub fn user_data_file(name: &str, batch: &str, part: usize) -> String {
    format!("tables/user/{name}/{batch}-{part:04}.parquet")
}

/// The folder of the stored slot holders' shares.
pub const STAGE_SHARES_DIR: &str = "derived/stage_shares";

/// The format of the stored shares (of the method that computed them): a
/// culprit whose shares differ stores them under another number, and
/// older objects are not read. 2: the stored answers of `culprits(victim)`
/// beside the shares (format 1 held the shares only).
pub const STAGE_SHARES_FORMAT: u32 = 2;

/// `derived/stage_shares/<telemetry>/`: the slot holders' shares of the
/// telemetry named `telemetry` ([`crate::Manifest::telemetry_id`]).
/// Derived, not listed in a manifest: named by the rows they were computed
/// from, they hold for every manifest naming the same rows.
pub fn stage_shares_dir(telemetry: &str) -> String {
    format!("{STAGE_SHARES_DIR}/{telemetry}/")
}

/// `derived/stage_shares/<telemetry>/v<version>-<written>-f<format>.parquet`:
/// an object computed from manifest `version`, written at `written` (µs
/// since the epoch): a new name for every object, so none is ever written
/// over (a server's read cache keys row groups by path), and the newest of
/// a telemetry sorts last.
pub fn stage_shares_file(telemetry: &str, version: u64, written: i64) -> String {
    format!(
        "{}v{version:020}-{written:020}-f{STAGE_SHARES_FORMAT}.parquet",
        stage_shares_dir(telemetry)
    )
}

/// [`stage_shares_file`] of an object holding the shares only, not yet the
/// stored answers (`...-f<format>-shares.parquet`): what `culprit shares`
/// writes first, and completes.
pub fn stage_shares_only_file(telemetry: &str, version: u64, written: i64) -> String {
    format!(
        "{}v{version:020}-{written:020}-f{STAGE_SHARES_FORMAT}-shares.parquet",
        stage_shares_dir(telemetry)
    )
}

/// Whether `relative` is a stored shares object of this culprit's format
/// (with the stored answers or without, [`stage_shares_only_file`]).
pub fn is_stage_shares_file(relative: &str) -> bool {
    relative.ends_with(&format!("-f{STAGE_SHARES_FORMAT}.parquet"))
        || is_stage_shares_only_file(relative)
}

/// Whether `relative` is a stored shares object of this culprit's format
/// without the stored answers.
pub fn is_stage_shares_only_file(relative: &str) -> bool {
    relative.ends_with(&format!("-f{STAGE_SHARES_FORMAT}-shares.parquet"))
}

/// An object path under the root.
pub fn join(root: &Path, relative: &str) -> Path {
    let mut p = root.clone();
    for part in relative.split('/').filter(|s| !s.is_empty()) {
        p = p.clone().join(part);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_names_round_trip_and_sort() {
        let root = Path::from("data/culprit");
        let a = manifest(&root, 7);
        let b = manifest(&root, 12);
        assert_eq!(
            a.as_ref(),
            "data/culprit/_culprit/manifests/00000000000000000007.json"
        );
        assert!(a.as_ref() < b.as_ref());
        assert_eq!(manifest_version(&a), Some(7));
        assert_eq!(manifest_version(&Path::from("x/notes.json")), None);
        assert_eq!(
            data_file(Table::TaskWindows, "b1", 3),
            "tables/task_windows/b1-0003.parquet"
        );
    }
}
