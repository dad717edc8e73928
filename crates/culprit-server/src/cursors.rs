//! SQL cursors of one connection: `DECLARE`, `FETCH`, `MOVE`, `CLOSE`, as
//! psql's `FETCH_COUNT`, psycopg's named cursors, psqlODBC's
//! `UseDeclareFetch` and pgjdbc's `setFetchSize` use them.
//!
//! The pipeline plans a cursor's query like any other statement (the same
//! rewrites, user tables and parameters) and keeps its record batches here;
//! `FETCH` encodes the rows it returns in the format the client asks for
//! then. The command tags are PostgreSQL's (`DECLARE CURSOR`, `FETCH n`,
//! `MOVE n`, `CLOSE CURSOR`): psqlODBC keeps only the result whose tag starts
//! with `FETCH`.
//!
//! A cursor reads its query's rows as it is fetched, so it holds one record
//! batch at a time, except a `SCROLL` cursor, which keeps every row it read
//! (as PostgreSQL keeps a scrollable cursor's rows) so that it can move
//! backwards. A cursor without `SCROLL` moves forwards only. Cursors
//! declared `WITHOUT HOLD` (the default) end with their transaction;
//! `WITH HOLD` ones live until `CLOSE`, `DISCARD ALL` or the end of the
//! connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::DFSchemaRef;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::sql::sqlparser::ast::{FetchDirection, Ident, ObjectName, Statement, Value};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use datafusion_postgres::arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use futures::StreamExt;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::types::format::FormatOptions;

use crate::sqlstate;

fn error(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message,
    )))
}

/// Where a fetch goes, in rows, from the cursor's position (PostgreSQL's
/// rules: position 0 is before the first row, `n + 1` after the last).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// `count` rows forwards (`u64::MAX`: all); 0 is the current row.
    Forward(u64),
    /// `count` rows backwards (`u64::MAX`: all).
    Backward(u64),
    /// The row at this position, counted from the end when negative.
    Absolute(i64),
    /// The row this many rows away.
    Relative(i64),
}

fn number(value: &Value) -> PgWireResult<i64> {
    match value {
        Value::Number(text, _) => text.parse::<i64>().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        error(
            sqlstate::SYNTAX_ERROR,
            format!("a FETCH or MOVE count must be an integer, not {value}"),
        )
    })
}

fn count(value: &Value) -> PgWireResult<Step> {
    let n = number(value)?;
    Ok(if n < 0 {
        Step::Backward(n.unsigned_abs())
    } else {
        Step::Forward(n as u64)
    })
}

impl Step {
    /// The step a `FETCH` or `MOVE` direction names.
    pub fn of(direction: &FetchDirection) -> PgWireResult<Step> {
        Ok(match direction {
            FetchDirection::Next | FetchDirection::Forward { limit: None } => Step::Forward(1),
            FetchDirection::Prior | FetchDirection::Backward { limit: None } => Step::Backward(1),
            FetchDirection::Count { limit } | FetchDirection::Forward { limit: Some(limit) } => {
                count(&limit.value)?
            }
            FetchDirection::Backward { limit: Some(limit) } => match count(&limit.value)? {
                Step::Forward(n) => Step::Backward(n),
                Step::Backward(n) => Step::Forward(n),
                other => other,
            },
            FetchDirection::All | FetchDirection::ForwardAll => Step::Forward(u64::MAX),
            FetchDirection::BackwardAll => Step::Backward(u64::MAX),
            FetchDirection::First => Step::Absolute(1),
            FetchDirection::Last => Step::Absolute(-1),
            FetchDirection::Absolute { limit } => Step::Absolute(number(&limit.value)?),
            FetchDirection::Relative { limit } => Step::Relative(number(&limit.value)?),
        })
    }
}

/// The rows of a cursor's query, as read so far.
enum Rows {
    /// Forwards only: the batch being read and the rest of the stream.
    Streaming {
        pending: Option<RecordBatch>,
        stream: Option<SendableRecordBatchStream>,
    },
    /// `SCROLL`: every row, read at `DECLARE`.
    Kept(RecordBatch),
}

/// One declared cursor.
pub struct Cursor {
    schema: SchemaRef,
    /// The columns as the plan describes them (for `Describe` of a `FETCH`).
    pub described: DFSchemaRef,
    rows: Rows,
    /// PostgreSQL's position: 0 before the first row, `n + 1` after the
    /// last (`n` known only once read to the end).
    position: u64,
    /// Read to the end (a streaming cursor): `position` is past the last row.
    past_end: bool,
    /// `WITH HOLD`: survives the end of its transaction.
    pub hold: bool,
    /// `BINARY`: rows in binary, whatever the format a `FETCH` asks for.
    binary: bool,
}

impl Cursor {
    /// A cursor over a query's result.
    pub async fn new(
        stream: SendableRecordBatchStream,
        described: DFSchemaRef,
        scroll: bool,
        hold: bool,
        binary: bool,
    ) -> PgWireResult<Cursor> {
        let schema = stream.schema();
        let rows = if scroll {
            let batches: Vec<RecordBatch> = stream
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<datafusion::error::Result<_>>()
                .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
            Rows::Kept(
                concat_batches(&schema, &batches)
                    .map_err(|e| PgWireError::ApiError(Box::new(e)))?,
            )
        } else {
            Rows::Streaming {
                pending: None,
                stream: Some(stream),
            }
        };
        Ok(Cursor {
            schema,
            described,
            rows,
            position: 0,
            past_end: false,
            hold,
            binary,
        })
    }

    /// Moves by `step` and returns the rows passed over that a `FETCH`
    /// returns, in the order it returns them.
    pub async fn step(&mut self, step: Step) -> PgWireResult<RecordBatch> {
        match &mut self.rows {
            Rows::Kept(all) => {
                let (indices, position) = scroll(all.num_rows() as u64, self.position, step);
                self.position = position;
                let indices = UInt32Array::from(indices);
                take_record_batch(all, &indices).map_err(|e| PgWireError::ApiError(Box::new(e)))
            }
            Rows::Streaming { pending, stream } => {
                let wanted = match step {
                    Step::Forward(n) if n > 0 => n,
                    Step::Absolute(k) if k > self.position as i64 => k as u64 - self.position,
                    Step::Relative(k) if k > 0 => k as u64,
                    _ => {
                        let mut info = ErrorInfo::new(
                            "ERROR".into(),
                            sqlstate::NOT_IN_PREREQUISITE_STATE.into(),
                            "cursor can only scan forward".into(),
                        );
                        info.hint =
                            Some("Declare it with SCROLL option to enable backward scan.".into());
                        return Err(PgWireError::UserError(Box::new(info)));
                    }
                };
                let only_last = !matches!(step, Step::Forward(_));
                let mut out = Vec::new();
                let mut left = wanted;
                while left > 0 && !self.past_end {
                    let batch = match pending.take() {
                        Some(batch) => batch,
                        None => match stream.as_mut() {
                            None => {
                                self.past_end = true;
                                break;
                            }
                            Some(s) => match s.next().await {
                                Some(batch) => {
                                    batch.map_err(|e| PgWireError::ApiError(Box::new(e)))?
                                }
                                None => {
                                    *stream = None;
                                    self.past_end = true;
                                    break;
                                }
                            },
                        },
                    };
                    let rows = batch.num_rows() as u64;
                    if rows > left {
                        out.push(batch.slice(0, left as usize));
                        *pending = Some(batch.slice(left as usize, (rows - left) as usize));
                        left = 0;
                    } else {
                        left -= rows;
                        out.push(batch);
                    }
                }
                let got = wanted - left;
                self.position += got;
                let all = concat_batches(&self.schema, &out)
                    .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
                if only_last {
                    // ABSOLUTE and RELATIVE return the row they land on.
                    let landed = left == 0 && all.num_rows() > 0;
                    return Ok(if landed {
                        all.slice(all.num_rows() - 1, 1)
                    } else {
                        all.slice(0, 0)
                    });
                }
                Ok(all)
            }
        }
    }

    /// `rows` as a `FETCH` answer, encoded in `format`.
    pub fn answer(
        &self,
        rows: RecordBatch,
        format: &Format,
        options: FormatOptions,
    ) -> PgWireResult<Response> {
        let format = if self.binary {
            &Format::UnifiedBinary
        } else {
            format
        };
        let fields: Arc<Vec<FieldInfo>> = Arc::new(arrow_schema_to_pg_fields(
            &self.schema,
            format,
            Some(Arc::new(options)),
        )?);
        let encoded: Vec<_> = encode_recordbatch(fields.clone(), rows).collect();
        let mut response = QueryResponse::new(fields, futures::stream::iter(encoded));
        response.set_command_tag("FETCH");
        Ok(Response::Query(response))
    }

    /// The columns a `FETCH` of this cursor returns, in text.
    pub fn fields(&self, options: FormatOptions) -> PgWireResult<Vec<FieldInfo>> {
        arrow_schema_to_pg_fields(&self.schema, &Format::UnifiedText, Some(Arc::new(options)))
    }
}

/// A scrollable cursor over `n` rows at `position` moved by `step`: the
/// row indices it returns (0-based) and its new position.
pub fn scroll(n: u64, position: u64, step: Step) -> (Vec<u32>, u64) {
    let land = |target: i64| -> (Vec<u32>, u64) {
        if target < 1 {
            (vec![], 0)
        } else if target as u64 > n {
            (vec![], n + 1)
        } else {
            (vec![(target - 1) as u32], target as u64)
        }
    };
    match step {
        Step::Forward(0) | Step::Relative(0) => {
            if position >= 1 && position <= n {
                (vec![(position - 1) as u32], position)
            } else {
                (vec![], position)
            }
        }
        Step::Forward(count) => {
            let last = position.saturating_add(count).min(n);
            let rows = ((position + 1)..=last).map(|r| (r - 1) as u32).collect();
            let end = if position.saturating_add(count) > n {
                n + 1
            } else {
                last
            };
            (rows, end)
        }
        Step::Backward(0) => scroll(n, position, Step::Forward(0)),
        Step::Backward(count) => {
            let from = position.min(n + 1);
            let first = from.saturating_sub(count).max(1);
            let rows = (first..from).rev().map(|r| (r - 1) as u32).collect();
            let end = if count >= from { 0 } else { first };
            (rows, end)
        }
        Step::Absolute(k) if k >= 0 => land(k),
        Step::Absolute(k) => land(n as i64 + 1 + k),
        Step::Relative(k) => land(position as i64 + k),
    }
}

/// The mark of a `MOVE`: sqlparser has no `MOVE`, so the gate parses it as
/// the `FETCH` it moves like, marked by this `INTO` target, which no SQL
/// text can name (a client's text cannot hold a NUL).
const MOVE_MARK: &str = "\0move";

/// Whether a `FETCH`'s `INTO` is the mark of a `MOVE`.
pub fn is_move_mark(into: &ObjectName) -> bool {
    into.0.len() == 1 && into.0[0].as_ident().is_some_and(|i| i.value == MOVE_MARK)
}

/// `sql` parsed with each `MOVE` statement read as a marked `FETCH`, and
/// negative counts in `FETCH` and `MOVE` (`MOVE -1 FROM c`, as psycopg2's
/// `scroll(-1)` sends; `FETCH ABSOLUTE -1`) read as numbers, which
/// sqlparser refuses. The other statements of the text are parsed as
/// usual. `None` when it has no such statement or still does not parse.
pub fn parse_moves(sql: &str, parser: &PostgresCompatibilityParser) -> Option<Vec<Statement>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut pieces: Vec<Vec<Token>> = vec![Vec::new()];
    for token in tokens {
        match token {
            Token::SemiColon => pieces.push(Vec::new()),
            token => pieces.last_mut()?.push(token),
        }
    }
    let mut statements = Vec::new();
    let mut touched = false;
    for piece in pieces {
        let mut words = piece
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .cloned();
        let head = match words.next() {
            None => continue,
            Some(Token::Word(w)) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
            Some(_) => String::new(),
        };
        if head != "MOVE" && head != "FETCH" {
            let text: String = piece.iter().map(|t| t.to_string()).collect();
            statements.extend(parser.parse(&text).ok()?);
            continue;
        }
        touched = true;
        let mut merged = vec![Token::make_keyword("FETCH")];
        let mut rest = words.peekable();
        while let Some(token) = rest.next() {
            match (&token, rest.peek()) {
                (Token::Minus, Some(Token::Number(n, long))) => {
                    merged.push(Token::Number(format!("-{n}"), *long));
                    rest.next();
                }
                _ => merged.push(token),
            }
        }
        let mut statement = datafusion::sql::sqlparser::parser::Parser::new(&PostgreSqlDialect {})
            .with_tokens(merged)
            .parse_statement()
            .ok()?;
        if head == "MOVE" {
            match &mut statement {
                Statement::Fetch { into, .. } if into.is_none() => {
                    *into = Some(ObjectName::from(vec![Ident::new(MOVE_MARK)]));
                }
                _ => return None,
            }
        }
        statements.push(statement);
    }
    touched.then_some(statements)
}

/// The cursors of one connection, by name.
#[derive(Default)]
pub struct Cursors(Mutex<HashMap<String, Arc<tokio::sync::Mutex<Cursor>>>>);

impl Cursors {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<Cursor>>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `Err` (PostgreSQL's `42P03`) when a cursor of that name exists:
    /// checked before the cursor's query runs.
    pub fn free(&self, name: &str) -> PgWireResult<()> {
        if self.map().contains_key(name) {
            return Err(error(
                sqlstate::DUPLICATE_CURSOR,
                format!("cursor \"{name}\" already exists"),
            ));
        }
        Ok(())
    }

    /// Adds a cursor whose name [`Cursors::free`] found free.
    pub fn declare(&self, name: &str, cursor: Cursor) -> Response {
        self.map()
            .insert(name.to_string(), Arc::new(tokio::sync::Mutex::new(cursor)));
        Response::Execution(Tag::new("DECLARE CURSOR"))
    }

    /// The cursor `name`, or PostgreSQL's `34000`.
    pub fn get(&self, name: &str) -> PgWireResult<Arc<tokio::sync::Mutex<Cursor>>> {
        self.map().get(name).cloned().ok_or_else(|| {
            error(
                sqlstate::INVALID_CURSOR_NAME,
                format!("cursor \"{name}\" does not exist"),
            )
        })
    }

    /// `CLOSE name` (an unknown name is `34000`) or, without a name,
    /// `CLOSE ALL`.
    pub fn close(&self, name: Option<&str>) -> PgWireResult<Response> {
        let mut map = self.map();
        match name {
            None => map.clear(),
            Some(name) => {
                if map.remove(name).is_none() {
                    return Err(error(
                        sqlstate::INVALID_CURSOR_NAME,
                        format!("cursor \"{name}\" does not exist"),
                    ));
                }
            }
        }
        Ok(Response::Execution(Tag::new("CLOSE CURSOR")))
    }

    /// The end of a transaction: its cursors without `WITH HOLD` end with it.
    pub fn end_transaction(&self) {
        let mut map = self.map();
        map.retain(|_, cursor| cursor.try_lock().map(|c| c.hold).unwrap_or(true));
    }

    /// `DISCARD ALL`.
    pub fn clear(&self) {
        self.map().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL's answers, from its documentation of FETCH and checked
    /// by hand on a 3-row cursor.
    #[test]
    fn scroll_follows_postgres() {
        // From before the first row.
        assert_eq!(scroll(3, 0, Step::Forward(2)), (vec![0, 1], 2));
        assert_eq!(scroll(3, 0, Step::Forward(u64::MAX)), (vec![0, 1, 2], 4));
        assert_eq!(scroll(3, 0, Step::Forward(3)), (vec![0, 1, 2], 3));
        assert_eq!(scroll(3, 0, Step::Forward(4)), (vec![0, 1, 2], 4));
        assert_eq!(scroll(3, 0, Step::Backward(1)), (vec![], 0));
        // From after the last row.
        assert_eq!(scroll(3, 4, Step::Backward(1)), (vec![2], 3));
        assert_eq!(scroll(3, 4, Step::Backward(u64::MAX)), (vec![2, 1, 0], 0));
        assert_eq!(scroll(3, 2, Step::Backward(1)), (vec![0], 1));
        assert_eq!(scroll(3, 2, Step::Backward(2)), (vec![0], 0));
        // FIRST, LAST, ABSOLUTE, RELATIVE.
        assert_eq!(scroll(3, 2, Step::Absolute(1)), (vec![0], 1));
        assert_eq!(scroll(3, 0, Step::Absolute(-1)), (vec![2], 3));
        assert_eq!(scroll(3, 0, Step::Absolute(0)), (vec![], 0));
        assert_eq!(scroll(3, 0, Step::Absolute(5)), (vec![], 4));
        assert_eq!(scroll(3, 1, Step::Relative(1)), (vec![1], 2));
        assert_eq!(scroll(3, 2, Step::Relative(0)), (vec![1], 2));
        assert_eq!(scroll(3, 0, Step::Relative(0)), (vec![], 0));
        assert_eq!(scroll(3, 3, Step::Relative(-5)), (vec![], 0));
        // An empty cursor.
        assert_eq!(scroll(0, 0, Step::Forward(1)), (vec![], 1));
        assert_eq!(scroll(0, 1, Step::Backward(1)), (vec![], 0));
    }
}
