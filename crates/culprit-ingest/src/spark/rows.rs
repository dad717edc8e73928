//! Rows of one table translated from an event log, with the line each came
//! from, as the raw columns the validator reads.

use std::collections::BTreeMap;

use culprit_core::batches::{TableBuilder, Value as Cell};
use culprit_core::Table;

use crate::formats::{Origin, RawRows};

/// A value of a row (owned: the translation builds its strings).
#[derive(Debug, Clone)]
pub enum LogValue {
    Null,
    S(String),
    F(f64),
    /// Microseconds since the epoch.
    T(i64),
}

impl LogValue {
    fn cell(&self) -> Cell<'_> {
        match self {
            LogValue::Null => Cell::Null,
            LogValue::S(s) => Cell::S(s),
            LogValue::F(f) => Cell::F(*f),
            LogValue::T(t) => Cell::T(*t),
        }
    }
}

/// Rows of one table.
pub struct Rows {
    builder: TableBuilder,
    origins: Vec<Origin>,
}

impl Rows {
    pub fn new(table: Table) -> Rows {
        Rows {
            builder: TableBuilder::new(table, 0),
            origins: Vec::new(),
        }
    }

    /// Adds a row; columns it does not name are NULL.
    pub fn push(&mut self, origin: Origin, row: Vec<(&'static str, LogValue)>) {
        let cells: Vec<(&str, Cell)> = row.iter().map(|(n, v)| (*n, v.cell())).collect();
        self.builder.row(&cells);
        self.origins.push(origin);
    }

    /// The rows as typed raw columns.
    pub fn into_raw(self) -> RawRows {
        let batch = self.builder.finish_unchecked();
        let columns: BTreeMap<String, _> = batch
            .schema()
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(f, c)| (f.name().clone(), c.clone()))
            .collect();
        RawRows {
            columns,
            origins: self.origins,
            unreadable: Vec::new(),
        }
    }
}
