//! Row-by-row builders of the canonical tables (the simulator's output, the
//! rows translated from Spark event logs).

use std::sync::Arc;

use crate::{ColumnKind, Table};
use arrow::array::{ArrayRef, Float64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow::record_batch::RecordBatch;

/// Builds one table row by row, by column name.
pub struct TableBuilder {
    table: Table,
    cols: Vec<Col>,
}

enum Col {
    Str(StringBuilder),
    Time(TimestampMicrosecondBuilder),
    Float(Float64Builder),
}

/// A value for one cell.
pub enum Value<'a> {
    S(&'a str),
    T(i64),
    F(f64),
    Null,
}

impl TableBuilder {
    pub fn new(table: Table, capacity: usize) -> Self {
        let cols = table
            .columns()
            .iter()
            .map(|c| match c.kind {
                ColumnKind::Str => Col::Str(StringBuilder::with_capacity(capacity, capacity * 8)),
                ColumnKind::Time => Col::Time(TimestampMicrosecondBuilder::with_capacity(capacity)),
                ColumnKind::Float => Col::Float(Float64Builder::with_capacity(capacity)),
            })
            .collect();
        TableBuilder { table, cols }
    }

    /// Appends a row given as `(column, value)` pairs; columns not named are NULL.
    pub fn row(&mut self, values: &[(&str, Value)]) {
        for (i, spec) in self.table.columns().iter().enumerate() {
            let v = values
                .iter()
                .find(|(n, _)| *n == spec.name)
                .map(|(_, v)| v)
                .unwrap_or(&Value::Null);
            match (&mut self.cols[i], v) {
                (Col::Str(b), Value::S(s)) => b.append_value(s),
                (Col::Time(b), Value::T(t)) => b.append_value(*t),
                (Col::Float(b), Value::F(f)) => b.append_value(*f),
                (Col::Str(b), Value::Null) => b.append_null(),
                (Col::Time(b), Value::Null) => b.append_null(),
                (Col::Float(b), Value::Null) => b.append_null(),
                _ => panic!("wrong value kind for column {}", spec.name),
            }
        }
    }

    pub fn finish(self) -> RecordBatch {
        let schema = self.table.schema();
        let arrays = self.arrays();
        RecordBatch::try_new(schema, arrays).expect("builder matches schema")
    }

    /// The rows with every column nullable: for rows still to be checked
    /// (translated from a log, where a required value may be missing and
    /// the row is then rejected with its reason, not built into a panic).
    pub fn finish_unchecked(self) -> RecordBatch {
        let schema = self.table.schema();
        let fields: Vec<_> = schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        RecordBatch::try_new(schema, self.arrays()).expect("nullable columns take any row")
    }

    fn arrays(self) -> Vec<ArrayRef> {
        self.cols
            .into_iter()
            .map(|c| -> ArrayRef {
                match c {
                    Col::Str(mut b) => Arc::new(b.finish()),
                    Col::Time(mut b) => Arc::new(b.finish().with_timezone("UTC")),
                    Col::Float(mut b) => Arc::new(b.finish()),
                }
            })
            .collect()
    }
}
