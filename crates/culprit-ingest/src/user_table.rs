//! Loading the users' own tables from files: `culprit ingest --table NAME
//! FILE...` with CSV (a header row), Parquet or JSON lines. The columns are
//! those of the existing table when appending, else inferred from the
//! first file (or given with `--schema`). All the files are one commit: a
//! bad file or row stores nothing and names the file and line.

use std::fs::File;
use std::io::{BufReader, Seek};
use std::sync::Arc;

use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use culprit_store::{check_user_table_name, Store};

use crate::error::{source_err, Result};

/// Rows per batch read from a file (and written at once).
const BATCH_ROWS: usize = 64 * 1024;
/// Rows read to infer the types of a CSV or JSON lines file.
const INFER_ROWS: usize = 10_000;

/// What a load stored.
#[derive(Debug, Clone)]
pub struct UserTableReport {
    pub table: String,
    pub rows: u64,
    pub files: usize,
    /// The table's columns after the load.
    pub schema: SchemaRef,
    pub replaced: bool,
    /// The load created the table.
    pub created: bool,
    pub version: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Csv,
    Parquet,
    JsonLines,
}

fn kind(path: &str) -> Result<Kind> {
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".csv") {
        Ok(Kind::Csv)
    } else if lower.ends_with(".parquet") {
        Ok(Kind::Parquet)
    } else if [".json", ".jsonl", ".ndjson"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        Ok(Kind::JsonLines)
    } else {
        Err(source_err(
            path,
            "not a table file: a user table loads .csv (with a header row), .parquet, \
             or JSON lines (.json, .jsonl, .ndjson)",
        ))
    }
}

/// Reads `--schema "name type, ..."`: types by their SQL names (`text`,
/// `bigint`, `double precision`, `boolean`, `timestamptz`, ...) or Arrow's.
pub fn parse_schema(text: &str) -> Result<SchemaRef> {
    let mut fields = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, ty) = part
            .split_once(char::is_whitespace)
            .ok_or_else(|| source_err("--schema", format!("'{part}' is not 'name type'")))?;
        let ty = sql_type(ty.trim()).ok_or_else(|| {
            source_err(
                "--schema",
                format!("unknown type '{}' of column {name}", ty.trim()),
            )
        })?;
        fields.push(Field::new(name.trim_matches('"'), ty, true));
    }
    if fields.is_empty() {
        return Err(source_err("--schema", "no columns"));
    }
    Ok(Arc::new(Schema::new(fields)))
}

fn sql_type(name: &str) -> Option<DataType> {
    use std::str::FromStr;
    let lower = name.to_ascii_lowercase();
    Some(match lower.as_str() {
        "text" | "varchar" | "string" | "character varying" => DataType::Utf8,
        "bigint" | "int8" | "integer" | "int" | "int4" => DataType::Int64,
        "double precision" | "float8" | "double" | "real" | "float" | "numeric" => {
            DataType::Float64
        }
        "boolean" | "bool" => DataType::Boolean,
        "timestamptz" | "timestamp with time zone" | "timestamp" => {
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()))
        }
        "date" => DataType::Date32,
        _ => return DataType::from_str(name).ok(),
    })
}

fn open(path: &str) -> Result<File> {
    File::open(path).map_err(|e| source_err(path, e))
}

/// The columns a file would give a new table.
fn infer(path: &str, kind: Kind) -> Result<SchemaRef> {
    let mut file = open(path)?;
    let schema = match kind {
        Kind::Csv => {
            let format = arrow::csv::reader::Format::default().with_header(true);
            format
                .infer_schema(&mut file, Some(INFER_ROWS))
                .map_err(|e| source_err(path, e))?
                .0
        }
        Kind::JsonLines => {
            arrow::json::reader::infer_json_schema(BufReader::new(&mut file), Some(INFER_ROWS))
                .map_err(|e| source_err(path, e))?
                .0
        }
        Kind::Parquet => {
            let builder =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(|e| source_err(path, e))?;
            builder.schema().as_ref().clone()
        }
    };
    // Every column of a user table may be NULL, as in SQL.
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let t = match f.data_type() {
                // CSV inference of an all-empty column.
                DataType::Null => DataType::Utf8,
                t => t.clone(),
            };
            Field::new(f.name(), t, true)
        })
        .collect();
    if fields.is_empty() {
        return Err(source_err(path, "no columns"));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// A file's rows in `schema`, batch by batch.
fn read(
    path: &str,
    kind: Kind,
    schema: &SchemaRef,
) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>>>> {
    let p = path.to_string();
    let mut file = open(path)?;
    Ok(match kind {
        Kind::Csv => {
            // Columns by the header's names, in whatever order the file has them.
            let header: Vec<String> = csv::Reader::from_reader(&mut file)
                .headers()
                .map_err(|e| source_err(path, e))?
                .iter()
                .map(|h| h.trim().to_string())
                .collect();
            let file_schema = Arc::new(Schema::new(
                header
                    .iter()
                    .map(|h| match schema.field_with_name(h) {
                        Ok(f) => Ok(f.clone()),
                        Err(_) => Err(source_err(
                            path,
                            format!(
                                "line 1: column '{h}' is not a column of the table ({})",
                                names(schema)
                            ),
                        )),
                    })
                    .collect::<Result<Vec<_>>>()?,
            ));
            file.rewind().map_err(|e| source_err(path, e))?;
            let reader = arrow::csv::ReaderBuilder::new(file_schema)
                .with_header(true)
                .with_batch_size(BATCH_ROWS)
                .build(file)
                .map_err(|e| source_err(path, e))?;
            let schema = schema.clone();
            Box::new(reader.map(move |b| {
                let b = b.map_err(|e| source_err(&p, e))?;
                conform(&p, &b, &schema)
            }))
        }
        Kind::JsonLines => {
            let reader = arrow::json::ReaderBuilder::new(schema.clone())
                .with_batch_size(BATCH_ROWS)
                .build(BufReader::new(file))
                .map_err(|e| source_err(path, e))?;
            Box::new(reader.map(move |b| b.map_err(|e| source_err(&p, e))))
        }
        Kind::Parquet => {
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(|e| source_err(path, e))?
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| source_err(path, e))?;
            let schema = schema.clone();
            Box::new(reader.map(move |b| {
                let b = b.map_err(|e| source_err(&p, e))?;
                conform(&p, &b, &schema)
            }))
        }
    })
}

fn names(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A file's batch in the table's columns (matched by name, cast).
fn conform(path: &str, batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let strict = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    let columns = schema
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            None => Ok(arrow::array::new_null_array(
                f.data_type(),
                batch.num_rows(),
            )),
            Some(c) => cast_with_options(c, f.data_type(), &strict)
                .map_err(|e| source_err(path, format!("column {}: {e}", f.name()))),
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| source_err(path, e))
}

/// Loads files into user table `name`: appended to the table (created
/// from the first file's columns, or `schema`, if missing), or replacing
/// its rows and columns with `replace`. One commit for all the files.
pub async fn ingest_user_table(
    store: &Store,
    name: &str,
    paths: &[String],
    replace: bool,
    schema: Option<SchemaRef>,
) -> Result<UserTableReport> {
    check_user_table_name(name)?;
    let kinds = paths.iter().map(|p| kind(p)).collect::<Result<Vec<_>>>()?;
    let manifest = store.manifest().await?;
    let existing = match manifest.user_table(name) {
        Some(t) if !replace => Some(t.schema()?),
        _ => None,
    };
    if existing.is_some() && schema.is_some() {
        return Err(source_err(
            name,
            "the table exists: its columns stay as they are (--schema is for a new \
             table, or with --replace)",
        ));
    }
    let created = manifest.user_table(name).is_none();
    let mut batch = store.begin();
    let schema = match (existing, schema) {
        (Some(existing), _) => existing,
        (None, Some(given)) => given,
        (None, None) => match paths.first() {
            Some(first) => infer(first, kinds[0])?,
            None => return Err(source_err(name, "no files to load")),
        },
    };
    if manifest.user_table(name).is_none() || replace {
        batch.create_user_table(name, &schema, replace, false)?;
    }
    let mut rows = 0u64;
    let result: Result<()> = async {
        batch.write_user(name, &schema, &[]).await?;
        for (path, kind) in paths.iter().zip(&kinds) {
            for b in read(path, *kind, &schema)? {
                let b = b?;
                rows += b.num_rows() as u64;
                batch.write_user(name, &schema, &[b]).await?;
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        batch.abort().await;
        return Err(e);
    }
    let info = batch.commit().await?;
    Ok(UserTableReport {
        table: name.to_string(),
        rows,
        files: paths.len(),
        schema,
        replaced: replace,
        created,
        version: info.version,
    })
}
