//! Building result batches row by row: the typed rows of the engine become
//! Arrow columns.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::Result;

/// A column type of a result.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    Text,
    Float,
    Int,
    Time,
}

/// The first columns of a series function's rows: the window.
pub const WINDOW_COLUMNS: [(&str, Ty); 2] = [("window_start", Ty::Time), ("window_end", Ty::Time)];

/// A result schema from `(name, type)` pairs; every column is nullable.
pub fn schema(cols: &[(&str, Ty)]) -> SchemaRef {
    Arc::new(Schema::new(
        cols.iter()
            .map(|(n, t)| {
                let dt = match t {
                    Ty::Text => DataType::Utf8,
                    Ty::Float => DataType::Float64,
                    Ty::Int => DataType::Int64,
                    Ty::Time => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                };
                Field::new(*n, dt, true)
            })
            .collect::<Vec<_>>(),
    ))
}

enum B {
    Text(StringBuilder),
    Float(Float64Builder),
    Int(Int64Builder),
    Time(TimestampMicrosecondBuilder),
}

/// Appends rows to a result; values are given column by column in order.
pub struct Out {
    schema: SchemaRef,
    cols: Vec<B>,
    next: usize,
}

/// One cell.
pub enum Cell<'a> {
    S(Option<&'a str>),
    F(Option<f64>),
    I(Option<i64>),
    T(Option<i64>),
}

impl Out {
    pub fn new(schema: SchemaRef, capacity: usize) -> Out {
        let cols = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Utf8 => B::Text(StringBuilder::with_capacity(capacity, capacity * 8)),
                DataType::Float64 => B::Float(Float64Builder::with_capacity(capacity)),
                DataType::Int64 => B::Int(Int64Builder::with_capacity(capacity)),
                _ => B::Time(TimestampMicrosecondBuilder::with_capacity(capacity)),
            })
            .collect();
        Out {
            schema,
            cols,
            next: 0,
        }
    }

    /// Appends the next cell of the current row.
    pub fn push(&mut self, v: Cell) {
        match (&mut self.cols[self.next], v) {
            (B::Text(b), Cell::S(x)) => b.append_option(x),
            (B::Float(b), Cell::F(x)) => b.append_option(x.filter(|f| f.is_finite())),
            (B::Int(b), Cell::I(x)) => b.append_option(x),
            (B::Time(b), Cell::T(x)) => b.append_option(x),
            _ => panic!("result column {} given a value of another type", self.next),
        }
        self.next = (self.next + 1) % self.cols.len();
    }

    pub fn row(&mut self, values: Vec<Cell>) {
        for v in values {
            self.push(v);
        }
    }

    pub fn finish(self) -> Result<RecordBatch> {
        let arrays: Vec<ArrayRef> = self
            .cols
            .into_iter()
            .map(|b| -> ArrayRef {
                match b {
                    B::Text(mut b) => Arc::new(b.finish()),
                    B::Float(mut b) => Arc::new(b.finish()),
                    B::Int(mut b) => Arc::new(b.finish()),
                    B::Time(mut b) => Arc::new(b.finish().with_timezone("UTC")),
                }
            })
            .collect();
        Ok(RecordBatch::try_new(self.schema, arrays)?)
    }
}
