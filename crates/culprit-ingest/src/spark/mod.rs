//! Spark event logs, translated into the interchange tables.
//!
//! A log is one file (plain or compressed, maybe `.inprogress`), a rolling
//! log directory (`eventlog_v2_<app>/events_<n>_<app>[.codec]` with an
//! `appstatus_<app>[.inprogress]` file), a legacy directory (`EVENT_LOG_<n>`,
//! `SPARK_VERSION_<v>`, `APPLICATION_COMPLETE`), or a Databricks rolled
//! directory (`eventlog-<date>[.gz]` parts then `eventlog`). The mapping is
//! in docs/spark.md.

mod app;
mod codec;
mod events;
pub(crate) mod rows;
pub mod zip;

use std::collections::BTreeMap;

use bytes::Bytes;
use culprit_core::Table;

pub use app::LogState;
pub use codec::Codec;

use crate::formats::RawRows;
use crate::sources::SourceFile;

/// One event log: its parts in order.
pub struct LogUnit {
    /// How the log is named in messages: the file, or the folder of a
    /// rolling / legacy / Databricks log.
    pub name: String,
    pub parts: Vec<SourceFile>,
    pub state: LogState,
    /// The user named the file (or the log's folder) itself.
    pub explicit: bool,
}

fn split_name(name: &str) -> (&str, &str) {
    match name.rfind('/') {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => ("", name),
    }
}

/// Databricks rolled parts: `eventlog-2021-06-15--15-00[.gz]`.
fn databricks_part(base: &str) -> bool {
    base == "eventlog"
        || base
            .strip_prefix("eventlog-")
            .is_some_and(|r| r.as_bytes().first().is_some_and(u8::is_ascii_digit))
}

/// The part number of a rolling log's `events_<n>_<app>` file.
fn rolling_part(base: &str) -> Option<u64> {
    base.strip_prefix("events_")?
        .split('_')
        .next()?
        .parse()
        .ok()
}

/// The part number of a legacy log's `EVENT_LOG_<n>` file.
fn legacy_part(base: &str) -> Option<u64> {
    base.strip_prefix("EVENT_LOG_")?.parse().ok()
}

/// The files that `part` numbers, in the order of their numbers.
fn numbered(files: Vec<SourceFile>, part: fn(&str) -> Option<u64>) -> Vec<SourceFile> {
    let mut parts: Vec<(u64, SourceFile)> = files
        .into_iter()
        .filter_map(|f| Some((part(split_name(&f.name).1)?, f)))
        .collect();
    parts.sort_by_key(|(n, _)| *n);
    parts.into_iter().map(|(_, f)| f).collect()
}

/// Groups files into event logs by the layouts Spark (and Databricks) write.
/// Files that belong to no multi-file layout are single-file candidates.
pub fn group(files: Vec<SourceFile>) -> Vec<LogUnit> {
    let mut dirs: BTreeMap<String, Vec<SourceFile>> = BTreeMap::new();
    let mut singles = Vec::new();
    for f in files {
        let (dir, base) = split_name(&f.name);
        let dir_base = split_name(dir).1;
        let multi = dir_base.starts_with("eventlog_v2_")
            || base.starts_with("EVENT_LOG_")
            || base == "APPLICATION_COMPLETE"
            || base.starts_with("SPARK_VERSION_")
            || base.starts_with("COMPRESSION_CODEC_")
            || databricks_part(base);
        if multi {
            dirs.entry(dir.to_string()).or_default().push(f);
        } else {
            singles.push(f);
        }
    }
    let mut units = Vec::new();
    for (dir, files) in dirs {
        let explicit = files.iter().any(|f| f.explicit);
        let dir_base = split_name(&dir).1;
        let base = |f: &SourceFile| split_name(&f.name).1.to_string();
        if dir_base.starts_with("eventlog_v2_") {
            let in_progress = files
                .iter()
                .any(|f| base(f).starts_with("appstatus_") && base(f).ends_with(".inprogress"));
            units.push(LogUnit {
                name: dir,
                parts: numbered(files, rolling_part),
                state: LogState { in_progress },
                explicit,
            });
        } else if files.iter().any(|f| base(f).starts_with("EVENT_LOG_")) {
            let complete = files.iter().any(|f| base(f) == "APPLICATION_COMPLETE");
            units.push(LogUnit {
                name: dir,
                parts: numbered(files, legacy_part),
                state: LogState {
                    in_progress: !complete,
                },
                explicit,
            });
        } else {
            // Databricks: dated parts in name order, then the current one.
            let (mut dated, rest): (Vec<_>, Vec<_>) = files
                .into_iter()
                .filter(|f| databricks_part(&base(f)))
                .partition(|f| base(f) != "eventlog");
            dated.sort_by(|a, b| a.name.cmp(&b.name));
            dated.extend(rest);
            units.push(LogUnit {
                name: dir,
                parts: dated,
                state: LogState::default(),
                explicit,
            });
        }
    }
    for f in singles {
        let in_progress = f.name.ends_with(".inprogress");
        units.push(LogUnit {
            name: f.name.clone(),
            explicit: f.explicit,
            parts: vec![f],
            state: LogState { in_progress },
        });
    }
    units
}

/// A log read but not decoded: its name, state and (part name, bytes).
pub type RawLog = (String, LogState, Vec<(String, Bytes)>);

/// The logs inside a zip archive (the History Server's download): a
/// rolling log's `events_<n>` entries as one log, any other file as a log
/// of its own. Entries are named `<zip>!/<entry>`.
pub fn group_entries(zip: &str, entries: Vec<(String, Vec<u8>)>) -> Vec<RawLog> {
    let mut rolling: Vec<(u64, (String, Bytes))> = Vec::new();
    let mut in_progress = false;
    let mut out = Vec::new();
    for (name, bytes) in entries {
        let bytes = Bytes::from(bytes);
        let full = format!("{zip}!/{name}");
        let base = split_name(&name).1;
        if base.starts_with("appstatus_") {
            in_progress |= base.ends_with(".inprogress");
            continue;
        }
        match rolling_part(base) {
            Some(n) => rolling.push((n, (full, bytes))),
            None => {
                let state = LogState {
                    in_progress: full.ends_with(".inprogress"),
                };
                out.push((full.clone(), state, vec![(full, bytes)]));
            }
        }
    }
    if !rolling.is_empty() {
        rolling.sort_by_key(|(n, _)| *n);
        out.push((
            format!("{zip}!/"),
            LogState { in_progress },
            rolling.into_iter().map(|(_, p)| p).collect(),
        ));
    }
    out
}

/// A decoded part: its name, text and codec.
pub struct Part {
    pub name: String,
    pub text: Bytes,
    pub codec: Codec,
    /// The compressed stream ended inside a block.
    pub truncated: Option<String>,
}

/// Why a part could not be decoded.
#[derive(Debug)]
pub struct DecodeFailure {
    pub reason: String,
    /// The part is certainly meant as a log (its magic bytes name a codec,
    /// or it is over the cap), so the failure is a rejection, never "not
    /// telemetry".
    pub certain: bool,
}

/// Decodes one part (the codec from its magic bytes, else its extension)
/// into at most `max_decoded` bytes.
pub fn decode(name: &str, bytes: &Bytes, max_decoded: usize) -> Result<Part, DecodeFailure> {
    let sniffed = Codec::sniff(bytes);
    let mut codec = sniffed;
    if codec == Codec::Plain && !bytes.is_empty() && !looks_like_json(bytes) {
        if let Some(c) = Codec::from_extension(name) {
            codec = c;
        }
    }
    let (text, truncated) = match codec {
        Codec::Plain if bytes.len() > max_decoded => {
            return Err(DecodeFailure {
                reason: codec::over_cap(max_decoded),
                certain: true,
            })
        }
        Codec::Plain => (bytes.clone(), None),
        _ => {
            let d = codec::decode(codec, bytes, max_decoded).map_err(|e| DecodeFailure {
                certain: sniffed != Codec::Plain,
                reason: format!("cannot decode {} stream: {e}", codec.name()),
            })?;
            (Bytes::from(d.bytes), d.truncated)
        }
    };
    Ok(Part {
        name: name.to_string(),
        text,
        codec,
        truncated,
    })
}

fn looks_like_json(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{')
}

/// Whether decoded text is a Spark event log: its first line is a JSON
/// object with an `"Event"` field.
pub fn is_event_log(text: &[u8]) -> bool {
    let first = text
        .split(|b| *b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace));
    let Some(first) = first else { return false };
    if events::fast_event_name(first).is_some() {
        return true;
    }
    serde_json::from_slice::<events::AnyEvent>(first).is_ok_and(|e| e.event.is_some())
}

/// One parsed application.
pub struct Parsed {
    pub app_key: String,
    pub tables: Vec<(Table, RawRows)>,
    /// Malformed lines: (part, line in part, reason).
    pub malformed: Vec<(String, u64, String)>,
    pub unknown_events: BTreeMap<String, u64>,
    pub cut_last_line: bool,
    pub events: u64,
    pub bytes: u64,
    /// First global line of each part, to name rows' origins.
    starts: Vec<(u64, String)>,
}

impl Parsed {
    /// The part and line within it of a global line number.
    pub fn locate(&self, global: u64) -> (String, u64) {
        let i = self.starts.partition_point(|(s, _)| *s <= global).max(1) - 1;
        let (start, name) = &self.starts[i];
        (name.clone(), global - start + 1)
    }
}

/// Parses the decoded parts of one log (an application).
pub fn parse(parts: &[Part], state: LogState, fallback_id: &str) -> Parsed {
    let mut app = app::App::default();
    let mut malformed = Vec::new();
    let mut starts = Vec::new();
    let mut global = 0u64;
    let mut cut_last_line = false;
    let mut bytes = 0u64;
    for (pi, part) in parts.iter().enumerate() {
        let text = &part.text;
        bytes += text.len() as u64;
        starts.push((global + 1, part.name.clone()));
        let last_part = pi + 1 == parts.len();
        let mut lines = text.split(|b| *b == b'\n').peekable();
        let mut local = 0u64;
        while let Some(line) = lines.next() {
            local += 1;
            global += 1;
            let is_last = lines.peek().is_none();
            if is_last && line.is_empty() {
                break;
            }
            // The last line of a log in progress (or of a cut stream) may be
            // cut: that is expected, not an error.
            let may_be_cut =
                is_last && last_part && (state.in_progress || part.truncated.is_some());
            if let Err(reason) = app.line(line, global, may_be_cut) {
                if may_be_cut && reason.is_empty() {
                    cut_last_line = true;
                } else {
                    malformed.push((part.name.clone(), local, reason));
                }
            }
        }
    }
    let app::Finished {
        app_key,
        tables,
        unknown_events,
        events,
    } = app.finish(state, fallback_id);
    Parsed {
        app_key,
        tables: tables
            .into_iter()
            .map(|(t, rows)| (t, rows.into_raw()))
            .collect(),
        malformed,
        unknown_events,
        cut_last_line,
        events,
        bytes,
        starts,
    }
}

/// The name a log without an `ApplicationStart` is known by: its file or
/// folder name without codec and `.inprogress` suffixes.
pub fn fallback_id(unit_name: &str) -> String {
    let base = split_name(unit_name).1;
    let base = base.strip_suffix(".inprogress").unwrap_or(base);
    let base = match Codec::from_extension(base) {
        Some(_) => base.rsplit_once('.').map_or(base, |(b, _)| b),
        None => base,
    };
    base.strip_prefix("eventlog_v2_")
        .unwrap_or(base)
        .to_string()
}
