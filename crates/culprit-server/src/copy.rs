//! `COPY` over the wire, as PostgreSQL has it:
//! - `COPY (query) TO STDOUT` and `COPY table [(columns)] TO STDOUT`, for
//!   every role (it is a read): what `psql \copy ... TO`, psycopg's `copy`,
//!   pgjdbc's `CopyManager` and asyncpg's `copy_from_query` send;
//! - `COPY table [(columns)] FROM STDIN` into a user table, for the
//!   `write` role (the gate decides): `psql \copy teams FROM 'teams.csv'`.
//!
//! Formats: `text` (the default: tab-separated, `\N` for NULL, backslash
//! escapes), `csv` (`HEADER`, `DELIMITER`, `NULL`, `QUOTE`, `ESCAPE`,
//! `FORCE_QUOTE`), and `binary` (PostgreSQL's `PGCOPY` format) for `TO`.
//! Rows arriving by `FROM STDIN` are parsed as they come, a bounded number
//! at a time, written to the store and committed at the end: a bad row
//! fails the whole `COPY`, naming its line, and stores nothing.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use culprit_store::PendingBatch;
use datafusion::arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::prelude::DataFrame;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, Ident, ObjectName, Statement,
};
use datafusion_postgres::arrow_pg::datatypes::arrow_schema_to_pg_fields;
use datafusion_postgres::arrow_pg::encoder::encode_value;
use futures::{stream, Sink, SinkExt, StreamExt};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::Format;
use pgwire::api::results::{
    CopyCsvOptions, CopyEncoder, CopyResponse, CopyTextOptions, Response, Tag,
};
use pgwire::api::ClientInfo;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::PgWireBackendMessage;
use tokio::sync::Mutex;

use crate::pipeline::Pipeline;
use crate::sqlstate;

/// Bytes of `COPY FROM STDIN` data held before the complete rows among
/// them are parsed and written.
const COPY_IN_CHUNK: usize = 4 << 20;
/// The longest one row may be (a CSV quote left open would otherwise hold
/// the rest of the data in memory).
const MAX_ROW_BYTES: usize = 64 << 20;

fn error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message.into(),
    )))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
    Binary,
}

/// A `COPY` statement's options, with PostgreSQL's defaults.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    pub format: CopyFormat,
    pub header: bool,
    pub delimiter: char,
    /// The text of NULL: `\N` in text format, the empty string in CSV.
    pub null: String,
    pub quote: char,
    pub escape: char,
    /// Columns always quoted in CSV output (`None`: only where needed;
    /// `*` is every column).
    pub force_quote: Option<Vec<String>>,
}

impl CopyOptions {
    /// Reads the options of a `COPY` statement (both the `WITH (...)` list
    /// and the older `WITH CSV HEADER` words).
    pub fn of(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> PgWireResult<CopyOptions> {
        let mut format = CopyFormat::Text;
        let (mut header, mut delimiter, mut null, mut quote, mut escape) =
            (false, None, None, None, None);
        let mut force_quote = None;
        let names = |cols: &[Ident]| cols.iter().map(|c| c.value.clone()).collect::<Vec<_>>();
        for option in options {
            match option {
                CopyOption::Format(name) => {
                    format = match name.value.to_ascii_lowercase().as_str() {
                        "text" => CopyFormat::Text,
                        "csv" => CopyFormat::Csv,
                        "binary" => CopyFormat::Binary,
                        other => {
                            return Err(error(
                                sqlstate::INVALID_PARAMETER_VALUE,
                                format!(
                                    "COPY format \"{other}\" not recognized (text, csv or binary)"
                                ),
                            ))
                        }
                    }
                }
                CopyOption::Header(h) => header = *h,
                CopyOption::Delimiter(d) => delimiter = Some(*d),
                CopyOption::Null(n) => null = Some(n.clone()),
                CopyOption::Quote(q) => quote = Some(*q),
                CopyOption::Escape(e) => escape = Some(*e),
                CopyOption::ForceQuote(cols) => force_quote = Some(names(cols)),
                CopyOption::Encoding(e)
                    if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
                CopyOption::Freeze(_) => {}
                other => {
                    return Err(error(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        format!("COPY option {other} is not supported"),
                    ))
                }
            }
        }
        for option in legacy {
            match option {
                CopyLegacyOption::Binary => format = CopyFormat::Binary,
                CopyLegacyOption::Delimiter(d) => delimiter = Some(*d),
                CopyLegacyOption::Null(n) => null = Some(n.clone()),
                CopyLegacyOption::Header => header = true,
                CopyLegacyOption::Csv(csv) => {
                    format = CopyFormat::Csv;
                    for o in csv {
                        match o {
                            CopyLegacyCsvOption::Header => header = true,
                            CopyLegacyCsvOption::Quote(q) => quote = Some(*q),
                            CopyLegacyCsvOption::Escape(e) => escape = Some(*e),
                            CopyLegacyCsvOption::ForceQuote(cols) => {
                                force_quote = Some(names(cols))
                            }
                            CopyLegacyCsvOption::ForceNotNull(_) => {}
                        }
                    }
                }
                other => {
                    return Err(error(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        format!("COPY option {other} is not supported"),
                    ))
                }
            }
        }
        if format == CopyFormat::Binary && (header || delimiter.is_some() || null.is_some()) {
            return Err(error(
                sqlstate::SYNTAX_ERROR,
                "cannot specify HEADER, DELIMITER or NULL in BINARY mode",
            ));
        }
        let delimiter = delimiter.unwrap_or(if format == CopyFormat::Csv { ',' } else { '\t' });
        if !delimiter.is_ascii() || delimiter == '\n' || delimiter == '\r' {
            return Err(error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "COPY delimiter must be a single one-byte character, not a newline",
            ));
        }
        let quote = quote.unwrap_or('"');
        Ok(CopyOptions {
            format,
            header,
            delimiter,
            null: null
                .unwrap_or_else(|| if format == CopyFormat::Csv { "" } else { "\\N" }.to_string()),
            quote,
            escape: escape.unwrap_or(quote),
            force_quote,
        })
    }

    fn code(&self) -> i8 {
        if self.format == CopyFormat::Binary {
            1
        } else {
            0
        }
    }
}

/// The query a `COPY ... TO` reads: its query, or `SELECT columns FROM
/// table`.
pub fn source_query(source: &CopySource) -> PgWireResult<Statement> {
    match source {
        CopySource::Query(query) => Ok(Statement::Query(query.clone())),
        CopySource::Table {
            table_name,
            columns,
        } => {
            let columns = if columns.is_empty() {
                "*".to_string()
            } else {
                columns
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let sql = format!("SELECT {columns} FROM {table_name}");
            datafusion::sql::sqlparser::parser::Parser::parse_sql(
                &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
                &sql,
            )
            .ok()
            .and_then(|mut s| s.pop())
            .ok_or_else(|| error(sqlstate::SYNTAX_ERROR, format!("cannot read {sql}")))
        }
    }
}

/// PostgreSQL's binary COPY signature, flags and header extension length.
const BINARY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// One header line: the column names, quoted in CSV where needed.
fn header_line(schema: &SchemaRef, options: &CopyOptions) -> Bytes {
    let mut out = BytesMut::new();
    for (i, field) in schema.fields().iter().enumerate() {
        if i > 0 {
            out.put_u8(options.delimiter as u8);
        }
        let name = field.name();
        let needs_quotes = options.format == CopyFormat::Csv
            && (name.contains(options.delimiter)
                || name.contains(options.quote)
                || name.contains('\n')
                || name.contains('\r'));
        if needs_quotes {
            let q = options.quote.to_string();
            out.put_slice(q.as_bytes());
            out.put_slice(name.replace(&q, &format!("{q}{q}")).as_bytes());
            out.put_slice(q.as_bytes());
        } else {
            out.put_slice(name.as_bytes());
        }
    }
    out.put_u8(b'\n');
    out.freeze()
}

/// Streams a query's rows as `COPY ... TO STDOUT` data in the statement's
/// format. The first batch is computed before the answer starts, so that a
/// failing query is an ordinary error, not a broken copy.
pub async fn copy_out(df: DataFrame, options: &CopyOptions) -> PgWireResult<Response> {
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let wire = if options.format == CopyFormat::Binary {
        Format::UnifiedBinary
    } else {
        Format::UnifiedText
    };
    let fields = Arc::new(arrow_schema_to_pg_fields(&schema, &wire, None)?);
    let api = |e: datafusion::error::DataFusionError| PgWireError::ApiError(Box::new(e));
    let mut batches = df.execute_stream().await.map_err(api)?;
    let first = match batches.next().await {
        Some(Ok(batch)) => Some(batch),
        Some(Err(e)) => return Err(api(e)),
        None => None,
    };
    let columns = schema.fields().len();
    let force: Vec<usize> = match &options.force_quote {
        None => vec![],
        Some(cols) if cols.iter().any(|c| c == "*") => (0..columns).collect(),
        Some(cols) => cols
            .iter()
            .map(|c| {
                schema.index_of(c).map_err(|_| {
                    error(
                        sqlstate::UNDEFINED_COLUMN,
                        format!("FORCE_QUOTE column \"{c}\" is not in the COPY's result"),
                    )
                })
            })
            .collect::<PgWireResult<_>>()?,
    };
    let mut encoder = match options.format {
        CopyFormat::Binary => CopyEncoder::new_binary(fields.clone()),
        CopyFormat::Text => CopyEncoder::new_text(
            fields.clone(),
            CopyTextOptions {
                delimiter: options.delimiter.to_string().into(),
                null_string: options.null.clone().into(),
            },
        ),
        CopyFormat::Csv => CopyEncoder::new_csv(
            fields.clone(),
            CopyCsvOptions {
                delimiter: options.delimiter.to_string().into(),
                quote: options.quote.to_string().into(),
                escape: options.escape.to_string().into(),
                null_string: options.null.clone().into(),
                force_quote: force,
            },
        ),
    };
    // pgwire counts CopyData messages for the `COPY n` tag: the header
    // travels in the first row's message, so that n counts rows. (With no
    // rows at all it travels alone and the tag says 1.)
    // In binary format the encoder writes the signature before the first
    // row; with no rows it is sent here, before pgwire's trailer.
    let binary = options.format == CopyFormat::Binary;
    let header = Arc::new(std::sync::Mutex::new(if binary {
        Some(Bytes::from_static(BINARY_SIGNATURE))
    } else {
        options.header.then(|| header_line(&schema, options))
    }));
    let take_header = {
        let header = header.clone();
        move || header.lock().ok().and_then(|mut h| h.take())
    };
    let first_row_header = take_header.clone();
    let encode = move |batch: RecordBatch| -> Vec<PgWireResult<CopyData>> {
        let mut out = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            for (col, field) in fields.iter().enumerate() {
                let arrow_field = batch.schema_ref().field(col).clone();
                if let Err(e) =
                    encode_value(&mut encoder, batch.column(col), row, &arrow_field, field)
                {
                    out.push(Err(e));
                    return out;
                }
            }
            let data = encoder.take_copy();
            out.push(Ok(match first_row_header() {
                Some(header) if !binary => {
                    let mut joined = BytesMut::from(header.as_ref());
                    joined.put_slice(&data.data);
                    CopyData::new(joined.freeze())
                }
                _ => data,
            }));
        }
        out
    };
    let encode = Arc::new(std::sync::Mutex::new(encode));
    let rows = stream::iter(first.map(Ok))
        .chain(batches)
        .flat_map(move |batch| {
            let encoded = match batch {
                Ok(batch) => match encode.lock() {
                    Ok(mut encode) => encode(batch),
                    Err(_) => vec![Err(error(
                        sqlstate::INTERNAL_ERROR,
                        "COPY encoder poisoned",
                    ))],
                },
                Err(e) => vec![Err(PgWireError::ApiError(Box::new(e)))],
            };
            stream::iter(encoded)
        });
    let header_alone = stream::once(async move { take_header() })
        .filter_map(|h| async move { h.map(|h| Ok(CopyData::new(h))) });
    let data = rows.chain(header_alone);
    Ok(Response::CopyOut(CopyResponse::new(
        options.code(),
        columns,
        data,
    )))
}

/// A `COPY ... FROM STDIN` in progress on a connection.
pub struct CopyIn {
    table: String,
    /// The table's columns.
    schema: SchemaRef,
    /// For each column of the data, the table column it fills.
    targets: Vec<usize>,
    options: CopyOptions,
    batch: PendingBatch,
    /// Bytes received and not yet parsed (at most one partial row after a
    /// parse).
    pending: Vec<u8>,
    /// The line the first pending byte is on (1-based, as PostgreSQL
    /// numbers them, the header included).
    line: usize,
    header_left: bool,
    rows: u64,
    /// The end-of-data marker `\.` was seen.
    ended: bool,
    /// Parse again once this many bytes are pending.
    parse_at: usize,
}

impl CopyIn {
    /// Starts a copy into user table `table` with `schema`; `columns` are
    /// the statement's column list (empty: all, in order).
    pub fn start(
        table: &str,
        schema: SchemaRef,
        columns: &[Ident],
        options: CopyOptions,
        batch: PendingBatch,
    ) -> PgWireResult<CopyIn> {
        if options.format == CopyFormat::Binary {
            return Err(error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "COPY FROM STDIN reads text and csv formats (binary is only written, by COPY TO)",
            ));
        }
        let targets = if columns.is_empty() {
            (0..schema.fields().len()).collect()
        } else {
            columns
                .iter()
                .map(|c| {
                    schema.index_of(&c.value).map_err(|_| {
                        error(
                            sqlstate::UNDEFINED_COLUMN,
                            format!(
                                "column \"{}\" of relation \"{table}\" does not exist",
                                c.value
                            ),
                        )
                    })
                })
                .collect::<PgWireResult<Vec<_>>>()?
        };
        Ok(CopyIn {
            table: table.to_string(),
            schema,
            targets,
            header_left: options.header,
            options,
            batch,
            pending: Vec::new(),
            line: 1,
            rows: 0,
            ended: false,
            parse_at: COPY_IN_CHUNK,
        })
    }

    pub fn columns(&self) -> usize {
        self.targets.len()
    }

    pub fn format_code(&self) -> i8 {
        self.options.code()
    }

    fn bad(&self, line: usize, reason: impl std::fmt::Display) -> PgWireError {
        error(
            sqlstate::BAD_COPY_FILE_FORMAT,
            format!("COPY {}, line {line}: {reason}", self.table),
        )
    }

    /// Takes more data; parses and writes the complete rows once enough
    /// is held.
    pub async fn data(&mut self, bytes: &[u8]) -> PgWireResult<()> {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= self.parse_at {
            self.parse(false).await?;
            if self.pending.len() > MAX_ROW_BYTES {
                return Err(self.bad(
                    self.line,
                    format!(
                        "a row longer than {} MiB (a CSV quote left open?)",
                        MAX_ROW_BYTES >> 20
                    ),
                ));
            }
            // A long row waits for a whole chunk more, not one message.
            self.parse_at = self.pending.len() + COPY_IN_CHUNK;
        }
        Ok(())
    }

    /// The data ended: parses the rest, commits; returns the rows stored.
    pub async fn finish(mut self) -> PgWireResult<u64> {
        if let Err(e) = self.parse(true).await {
            self.batch.abort().await;
            return Err(e);
        }
        let rows = self.rows;
        self.batch.commit().await.map_err(|e| {
            PgWireError::ApiError(Box::new(datafusion::error::DataFusionError::External(
                Box::new(e),
            )))
        })?;
        Ok(rows)
    }

    /// The client gave up, or the copy failed: nothing is stored.
    pub async fn abort(self) {
        self.batch.abort().await;
    }

    /// Splits the pending bytes into records (all of them at the end,
    /// else the complete ones) and writes them.
    async fn parse(&mut self, at_end: bool) -> PgWireResult<()> {
        let bytes = std::mem::take(&mut self.pending);
        let (records, used) = match self.options.format {
            CopyFormat::Csv => split_csv(&bytes, &self.options, at_end),
            _ => split_text(&bytes, at_end),
        };
        self.pending = bytes[used..].to_vec();
        let mut values: Vec<Vec<Option<String>>> = vec![Vec::new(); self.targets.len()];
        let mut lines = Vec::new();
        for (record, lines_in_record) in records {
            let line = self.line;
            self.line += lines_in_record;
            if self.ended {
                continue;
            }
            if self.header_left {
                self.header_left = false;
                continue;
            }
            let fields = match self.options.format {
                CopyFormat::Csv => parse_csv_record(&record, &self.options),
                _ => {
                    if record == b"\\." {
                        self.ended = true;
                        continue;
                    }
                    parse_text_record(&record, &self.options)
                }
            }
            .map_err(|reason| self.bad(line, reason))?;
            if self.options.format == CopyFormat::Csv && record == b"\\." {
                self.ended = true;
                continue;
            }
            if fields.len() != self.targets.len() {
                return Err(self.bad(
                    line,
                    format!("{} columns, expected {}", fields.len(), self.targets.len()),
                ));
            }
            for (column, value) in values.iter_mut().zip(fields) {
                column.push(value);
            }
            lines.push(line);
        }
        if lines.is_empty() {
            return Ok(());
        }
        let batch = self.to_batch(values, &lines)?;
        self.rows += batch.num_rows() as u64;
        let (table, schema) = (self.table.clone(), self.schema.clone());
        self.batch
            .write_user(&table, &schema, &[batch])
            .await
            .map_err(|e| {
                PgWireError::ApiError(Box::new(datafusion::error::DataFusionError::External(
                    Box::new(e),
                )))
            })
    }

    /// The parsed text values as the table's types; a value that does not
    /// convert names its line.
    fn to_batch(
        &self,
        values: Vec<Vec<Option<String>>>,
        lines: &[usize],
    ) -> PgWireResult<RecordBatch> {
        let rows = lines.len();
        let mut columns: Vec<ArrayRef> = self
            .schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), rows))
            .collect();
        let strict = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        for (values, &target) in values.into_iter().zip(&self.targets) {
            let field = self.schema.field(target);
            let text: ArrayRef = Arc::new(StringArray::from(values));
            let typed = match cast_with_options(&text, field.data_type(), &strict) {
                Ok(typed) => typed,
                Err(_) => {
                    // Find the row, to name its line.
                    let strings = text.as_any().downcast_ref::<StringArray>();
                    let at = (0..rows).find(|&i| {
                        cast_with_options(&text.slice(i, 1), field.data_type(), &strict).is_err()
                    });
                    let (line, value) = match (at, strings) {
                        (Some(i), Some(s)) => (lines[i], s.value(i).to_string()),
                        _ => (lines[0], String::new()),
                    };
                    return Err(self.bad(
                        line,
                        format!(
                            "invalid input for column {} ({}): \"{value}\"",
                            field.name(),
                            field.data_type()
                        ),
                    ));
                }
            };
            columns[target] = typed;
        }
        for (i, field) in self.schema.fields().iter().enumerate() {
            if !field.is_nullable() && columns[i].null_count() > 0 {
                let row = (0..rows).find(|&r| columns[i].is_null(r)).unwrap_or(0);
                return Err(error(
                    "23502",
                    format!(
                        "COPY {}, line {}: null value in column \"{}\" violates not-null constraint",
                        self.table,
                        lines[row],
                        field.name()
                    ),
                ));
            }
        }
        RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| error(sqlstate::INTERNAL_ERROR, e.to_string()))
    }
}

/// Text format records: one per line (`\n`, a trailing `\r` dropped).
/// Returns the records and the bytes they used.
fn split_text(bytes: &[u8], at_end: bool) -> (Vec<(Vec<u8>, usize)>, usize) {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            let mut record = &bytes[start..i];
            if record.last() == Some(&b'\r') {
                record = &record[..record.len() - 1];
            }
            out.push((record.to_vec(), 1));
            start = i + 1;
        }
    }
    if at_end && start < bytes.len() {
        out.push((bytes[start..].to_vec(), 1));
        start = bytes.len();
    }
    (out, start)
}

/// CSV records: a newline inside quotes belongs to its field. Returns the
/// records with the lines each spans, and the bytes they used.
fn split_csv(bytes: &[u8], options: &CopyOptions, at_end: bool) -> (Vec<(Vec<u8>, usize)>, usize) {
    let (quote, escape) = (options.quote as u8, options.escape as u8);
    let mut out = Vec::new();
    let (mut start, mut in_quotes, mut lines) = (0, false, 1);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_quotes {
            if b == escape && escape != quote && bytes.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            if b == quote {
                in_quotes = false;
            } else if b == b'\n' {
                lines += 1;
            }
        } else if b == quote {
            in_quotes = true;
        } else if b == b'\n' {
            let mut record = &bytes[start..i];
            if record.last() == Some(&b'\r') {
                record = &record[..record.len() - 1];
            }
            out.push((record.to_vec(), lines));
            start = i + 1;
            lines = 1;
        }
        i += 1;
    }
    if at_end && start < bytes.len() {
        out.push((bytes[start..].to_vec(), lines));
        start = bytes.len();
    }
    (out, start)
}

/// One CSV record's fields: an unquoted value equal to the NULL text is
/// NULL; a quoted one never is.
fn parse_csv_record(record: &[u8], options: &CopyOptions) -> Result<Vec<Option<String>>, String> {
    let (delimiter, quote, escape) = (
        options.delimiter as u8,
        options.quote as u8,
        options.escape as u8,
    );
    let mut fields = Vec::new();
    let mut value: Vec<u8> = Vec::new();
    let (mut quoted, mut in_quotes) = (false, false);
    let mut i = 0;
    let finish = |value: &mut Vec<u8>, quoted: bool| -> Result<Option<String>, String> {
        let text = String::from_utf8(std::mem::take(value))
            .map_err(|_| "invalid byte sequence for encoding UTF8".to_string())?;
        Ok((quoted || text != options.null).then_some(text))
    };
    while i < record.len() {
        let b = record[i];
        if in_quotes {
            if b == escape && record.get(i + 1) == Some(&quote) {
                value.push(quote);
                i += 2;
                continue;
            }
            if b == quote {
                in_quotes = false;
            } else {
                value.push(b);
            }
        } else if b == quote {
            in_quotes = true;
            quoted = true;
        } else if b == delimiter {
            fields.push(finish(&mut value, quoted)?);
            quoted = false;
        } else {
            value.push(b);
        }
        i += 1;
    }
    if in_quotes {
        return Err("unterminated CSV quoted field".into());
    }
    fields.push(finish(&mut value, quoted)?);
    Ok(fields)
}

/// One text-format record's fields, with backslash escapes undone.
fn parse_text_record(record: &[u8], options: &CopyOptions) -> Result<Vec<Option<String>>, String> {
    let delimiter = options.delimiter as u8;
    let mut fields = Vec::new();
    for raw in record.split(|b| *b == delimiter) {
        if raw == options.null.as_bytes() {
            fields.push(None);
            continue;
        }
        let mut value = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            if raw[i] == b'\\' && i + 1 < raw.len() {
                let c = raw[i + 1];
                value.push(match c {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 8,
                    b'f' => 12,
                    b'v' => 11,
                    other => other,
                });
                i += 2;
            } else {
                value.push(raw[i]);
                i += 1;
            }
        }
        fields.push(Some(String::from_utf8(value).map_err(|_| {
            "invalid byte sequence for encoding UTF8".to_string()
        })?));
    }
    Ok(fields)
}

/// The copy-in messages of one connection, handed to its pipeline's copy
/// in progress.
pub struct CopyIns {
    pub pipeline: Arc<Pipeline>,
}

#[async_trait]
impl CopyHandler for CopyIns {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut slot = self.pipeline.copy_in.lock().await;
        let Some(copy) = slot.as_mut() else {
            if self.pipeline.copy_failed.lock().await.is_some() {
                // Failed already: the rest of the data is dropped.
                return Ok(());
            }
            return Err(error(
                sqlstate::PROTOCOL_VIOLATION,
                "COPY data without a COPY FROM STDIN",
            ));
        };
        if let Err(e) = copy.data(&copy_data.data).await {
            if let Some(copy) = slot.take() {
                copy.abort().await;
            }
            // The rest of the data is dropped until CopyDone.
            *self.pipeline.copy_failed.lock().await = Some(keep_error(&e));
            return Ok(());
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let copy = self.pipeline.copy_in.lock().await.take();
        if let Some(failed) = self.pipeline.copy_failed.lock().await.take() {
            return Err(stored_error(failed));
        }
        let Some(copy) = copy else {
            return Err(error(
                sqlstate::PROTOCOL_VIOLATION,
                "COPY done without a COPY FROM STDIN",
            ));
        };
        let rows = copy.finish().await?;
        let tag = Tag::new("COPY").with_rows(rows as usize);
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(copy) = self.pipeline.copy_in.lock().await.take() {
            copy.abort().await;
        }
        self.pipeline.copy_failed.lock().await.take();
        error(
            sqlstate::QUERY_CANCELED,
            format!("COPY from stdin failed: {}", fail.message),
        )
    }
}

/// A copy error kept until CopyDone (its text; the SQLSTATE is kept in
/// front, `CODE:message`).
fn stored_error(text: String) -> PgWireError {
    match text.split_once('\u{1}') {
        Some((code, message)) => error(code, message),
        None => error(sqlstate::BAD_COPY_FILE_FORMAT, text),
    }
}

/// The text [`stored_error`] reads back.
pub fn keep_error(e: &PgWireError) -> String {
    match e {
        PgWireError::UserError(info) => format!("{}\u{1}{}", info.code, info.message),
        other => other.to_string(),
    }
}

/// The table a `COPY` names, as a bare name of the session's schema.
pub fn table_name(name: &ObjectName) -> PgWireResult<String> {
    let parts: Vec<String> = name.0.iter().map(|p| p.to_string()).collect();
    match parts.as_slice() {
        [table] | [_, table] => Ok(table.trim_matches('"').to_string()),
        _ => Err(error(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{name}\" does not exist"),
        )),
    }
}

/// A connection's copy in progress (or its failure, kept until the
/// client's CopyDone).
pub type Slot<T> = Mutex<Option<T>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn csv() -> CopyOptions {
        CopyOptions::of(&[CopyOption::Format(Ident::new("csv"))], &[]).unwrap()
    }

    #[test]
    fn csv_records_keep_quoted_newlines_and_wait_for_the_rest() {
        let data = b"a,\"x\ny\",1\nb,\"half";
        let (records, used) = split_csv(data, &csv(), false);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0], (b"a,\"x\ny\",1".to_vec(), 2));
        assert_eq!(&data[used..], b"b,\"half");
        let fields = parse_csv_record(&records[0].0, &csv()).unwrap();
        assert_eq!(
            fields,
            vec![Some("a".into()), Some("x\ny".into()), Some("1".into())]
        );
        // An unquoted empty value is NULL, a quoted one the empty string.
        assert_eq!(
            parse_csv_record(b",\"\",\"say \"\"hi\"\"\"", &csv()).unwrap(),
            vec![None, Some(String::new()), Some("say \"hi\"".into())]
        );
        assert!(parse_csv_record(b"\"open", &csv()).is_err());
    }

    #[test]
    fn text_records_undo_escapes_and_read_null() {
        let text = CopyOptions::of(&[], &[]).unwrap();
        assert_eq!(text.delimiter, '\t');
        let (records, used) = split_text(b"a\\tb\t\\N\r\nc\t\\\\\n", false);
        assert_eq!(used, 14);
        assert_eq!(
            parse_text_record(&records[0].0, &text).unwrap(),
            vec![Some("a\tb".into()), None]
        );
        assert_eq!(
            parse_text_record(&records[1].0, &text).unwrap(),
            vec![Some("c".into()), Some("\\".into())]
        );
    }

    #[test]
    fn options_as_postgres_reads_them() {
        let legacy = CopyOptions::of(
            &[],
            &[CopyLegacyOption::Csv(vec![CopyLegacyCsvOption::Header])],
        )
        .unwrap();
        assert!(legacy.format == CopyFormat::Csv && legacy.header && legacy.null.is_empty());
        assert!(CopyOptions::of(&[CopyOption::Format(Ident::new("xml"))], &[]).is_err());
        assert!(CopyOptions::of(
            &[
                CopyOption::Format(Ident::new("binary")),
                CopyOption::Header(true)
            ],
            &[]
        )
        .is_err());
    }
}
