//! Input formats: each becomes raw Arrow columns (any types) plus where each
//! row came from, for error messages.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchReader, StringBuilder};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The file formats of the interchange format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Parquet,
    Csv,
    JsonLines,
}

impl Format {
    /// The format named by a file's extension (`.parquet`, `.csv`,
    /// `.jsonl`/`.ndjson`/`.json`).
    pub fn from_path(path: &str) -> Option<Format> {
        let lower = path.to_ascii_lowercase();
        let ext = lower.rsplit('.').next()?;
        match ext {
            "parquet" | "pq" => Some(Format::Parquet),
            "csv" => Some(Format::Csv),
            "jsonl" | "ndjson" | "json" => Some(Format::JsonLines),
            _ => None,
        }
    }
}

/// Where a row came from: a line of a text file or a row of a Parquet file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Line(u64),
    Row(u64),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Line(n) => write!(f, "line {n}"),
            Origin::Row(n) => write!(f, "row {n}"),
        }
    }
}

/// A file's rows as raw columns, by name.
pub struct RawRows {
    pub columns: BTreeMap<String, ArrayRef>,
    pub origins: Vec<Origin>,
    /// Rows that could not even be parsed (malformed line, wrong field count).
    pub unreadable: Vec<(Origin, String)>,
}

impl RawRows {
    pub fn len(&self) -> usize {
        self.origins.len()
    }
}

/// Parses a whole file. Errors here are file-level (not a Parquet file, no
/// header); row-level problems land in `unreadable`.
pub fn read(format: Format, bytes: Bytes) -> Result<RawRows, String> {
    match format {
        Format::Parquet => read_parquet(bytes),
        Format::Csv => read_csv(&bytes),
        Format::JsonLines => read_jsonl(&bytes),
    }
}

/// The parquet crate panics on some corrupt files (a page whose lengths
/// lie, found by `fuzz.rs`): such a panic is caught here and the file is
/// rejected like any other unreadable file.
fn read_parquet(bytes: Bytes) -> Result<RawRows, String> {
    std::panic::catch_unwind(|| read_parquet_unguarded(bytes)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic in the Parquet reader");
        Err(format!("not a readable Parquet file (corrupt data: {why})"))
    })
}

fn read_parquet_unguarded(bytes: Bytes) -> Result<RawRows, String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| format!("not a readable Parquet file: {e}"))?
        .build()
        .map_err(|e| e.to_string())?;
    let schema = reader.schema();
    let batches: Vec<RecordBatch> = reader
        .collect::<Result<_, _>>()
        .map_err(|e| format!("Parquet read error: {e}"))?;
    let batch = arrow::compute::concat_batches(&schema, &batches).map_err(|e| e.to_string())?;
    let columns = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| (f.name().to_ascii_lowercase(), c.clone()))
        .collect();
    Ok(RawRows {
        columns,
        origins: (1..=batch.num_rows() as u64).map(Origin::Row).collect(),
        unreadable: Vec::new(),
    })
}

/// Rows per chunk of a Parquet file read in chunks.
pub const CHUNK_ROWS: usize = 64 << 10;

/// A Parquet file read a chunk of rows at a time (at most
/// [`CHUNK_ROWS`]), so memory holds a chunk, not the file's rows. Each
/// chunk's origins count rows from the start of the file. A panic of the
/// Parquet reader on corrupt data is an error like any other.
pub struct ParquetChunks {
    reader: parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    schema: arrow::datatypes::SchemaRef,
    names: Vec<String>,
    /// Rows returned so far.
    pub rows: u64,
    /// Whether a chunk was returned (a file without rows gives one empty
    /// chunk, so that its columns are checked like any file's).
    started: bool,
}

/// The rows a local Parquet file says it holds (its footer only), `None`
/// when it cannot be read (its read reports why).
pub fn parquet_rows(path: &std::path::Path) -> Option<u64> {
    let file = std::fs::File::open(path).ok()?;
    let read = || {
        parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&file)
            .ok()
            .and_then(|m| u64::try_from(m.file_metadata().num_rows()).ok())
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
        .ok()
        .flatten()
}

impl ParquetChunks {
    /// Opens a Parquet file (its bytes, or a local file) for chunked reading.
    pub fn open<T: parquet::file::reader::ChunkReader + 'static>(
        input: T,
    ) -> Result<ParquetChunks, String> {
        let open = || {
            let reader = ParquetRecordBatchReaderBuilder::try_new(input)
                .map_err(|e| format!("not a readable Parquet file: {e}"))?
                .with_batch_size(CHUNK_ROWS)
                .build()
                .map_err(|e| e.to_string())?;
            let names = reader
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().to_ascii_lowercase())
                .collect();
            Ok(ParquetChunks {
                schema: reader.schema(),
                reader,
                names,
                rows: 0,
                started: false,
            })
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(open))
            .unwrap_or_else(|panic| Err(corrupt(panic)))
    }
}

impl Iterator for ParquetChunks {
    type Item = Result<RawRows, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let reader = &mut self.reader;
        let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader.next()))
            .unwrap_or_else(|panic| {
                Some(Err(arrow::error::ArrowError::ExternalError(
                    corrupt(panic).into(),
                )))
            });
        let started = std::mem::replace(&mut self.started, true);
        let next = match next {
            Some(next) => next,
            None if started => return None,
            None => Ok(RecordBatch::new_empty(self.schema.clone())),
        };
        let batch = match next {
            Ok(b) => b,
            Err(e) => {
                return Some(Err(format!(
                    "Parquet read error after row {}: {e}",
                    self.rows
                )))
            }
        };
        let first = self.rows;
        self.rows += batch.num_rows() as u64;
        let columns = self
            .names
            .iter()
            .cloned()
            .zip(batch.columns().iter().cloned())
            .collect();
        Some(Ok(RawRows {
            columns,
            origins: (first + 1..=self.rows).map(Origin::Row).collect(),
            unreadable: Vec::new(),
        }))
    }
}

/// The reason for a panic of the Parquet reader.
fn corrupt(panic: Box<dyn std::any::Any + Send>) -> String {
    let why = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a panic in the Parquet reader");
    format!("not a readable Parquet file (corrupt data: {why})")
}

fn read_csv(bytes: &[u8]) -> Result<RawRows, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(bytes);
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| format!("cannot read the CSV header: {e}"))?
        .iter()
        .map(|h| h.trim().to_ascii_lowercase())
        .collect();
    if header.iter().all(|h| h.is_empty()) {
        return Err("the CSV file has no header line".into());
    }
    let mut builders: Vec<StringBuilder> = header.iter().map(|_| StringBuilder::new()).collect();
    let mut origins = Vec::new();
    let mut unreadable = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                let line = record.position().map_or(0, |p| p.line());
                if record.len() == 1 && record.get(0) == Some("") {
                    continue; // blank line
                }
                if record.len() != header.len() {
                    unreadable.push((
                        Origin::Line(line),
                        format!("{} fields, the header has {}", record.len(), header.len()),
                    ));
                    continue;
                }
                for (b, v) in builders.iter_mut().zip(record.iter()) {
                    if v.is_empty() {
                        b.append_null();
                    } else {
                        b.append_value(v);
                    }
                }
                origins.push(Origin::Line(line));
            }
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                unreadable.push((Origin::Line(line), format!("malformed CSV: {e}")));
                if !matches!(e.kind(), csv::ErrorKind::Utf8 { .. }) {
                    break;
                }
            }
        }
    }
    let columns = header
        .into_iter()
        .zip(builders)
        .map(|(h, mut b)| (h, Arc::new(b.finish()) as ArrayRef))
        .collect();
    Ok(RawRows {
        columns,
        origins,
        unreadable,
    })
}

fn read_jsonl(bytes: &[u8]) -> Result<RawRows, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let mut values: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    let mut origins = Vec::new();
    let mut unreadable = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i as u64 + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let obj = match serde_json::from_str::<serde_json::Value>(line) {
            Ok(serde_json::Value::Object(o)) => o,
            Ok(_) => {
                unreadable.push((Origin::Line(line_no), "not a JSON object".into()));
                continue;
            }
            Err(e) => {
                unreadable.push((Origin::Line(line_no), format!("malformed JSON: {e}")));
                continue;
            }
        };
        let row = origins.len();
        for (k, v) in obj {
            let text = match v {
                serde_json::Value::Null => None,
                serde_json::Value::String(s) => Some(s),
                other => Some(other.to_string()),
            };
            let col = values.entry(k.to_ascii_lowercase()).or_default();
            col.resize(row, None);
            col.push(text);
        }
        origins.push(Origin::Line(line_no));
    }
    let n = origins.len();
    let columns = values
        .into_iter()
        .map(|(k, mut v)| {
            v.resize(n, None);
            let arr: ArrayRef = Arc::new(arrow::array::StringArray::from(v));
            (k, arr)
        })
        .collect();
    Ok(RawRows {
        columns,
        origins,
        unreadable,
    })
}
