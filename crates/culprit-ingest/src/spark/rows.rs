//! Rows built in memory, turned into the raw columns the validator reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, StringArray, TimestampMicrosecondArray};
use culprit_core::{ColumnKind, Table};

use crate::formats::{Origin, RawRows};

/// A value of a row.
#[derive(Debug, Clone)]
pub enum V {
    Null,
    S(String),
    F(f64),
    /// Microseconds since the epoch.
    T(i64),
}

/// Rows of one table.
pub struct Rows {
    table: Table,
    columns: BTreeMap<&'static str, Vec<V>>,
    origins: Vec<Origin>,
}

impl Rows {
    pub fn new(table: Table) -> Rows {
        Rows {
            table,
            columns: BTreeMap::new(),
            origins: Vec::new(),
        }
    }

    /// Adds a row; columns it does not name are NULL.
    pub fn push(&mut self, origin: Origin, row: Vec<(&'static str, V)>) {
        let n = self.origins.len();
        for (name, v) in row {
            debug_assert!(self.table.column(name).is_some(), "{name}");
            let col = self.columns.entry(name).or_default();
            col.resize(n, V::Null);
            col.push(v);
        }
        self.origins.push(origin);
    }

    /// The rows as typed raw columns.
    pub fn into_raw(self) -> RawRows {
        let n = self.origins.len();
        let mut columns = BTreeMap::new();
        for (name, mut values) in self.columns {
            values.resize(n, V::Null);
            let kind = self.table.column(name).map(|c| c.kind);
            let array: ArrayRef = match kind {
                Some(ColumnKind::Float) => Arc::new(
                    values
                        .iter()
                        .map(|v| match v {
                            V::F(x) => Some(*x),
                            _ => None,
                        })
                        .collect::<Float64Array>(),
                ),
                Some(ColumnKind::Time) => Arc::new(
                    values
                        .iter()
                        .map(|v| match v {
                            V::T(x) => Some(*x),
                            _ => None,
                        })
                        .collect::<TimestampMicrosecondArray>()
                        .with_timezone("UTC"),
                ),
                _ => Arc::new(
                    values
                        .into_iter()
                        .map(|v| match v {
                            V::S(s) => Some(s),
                            _ => None,
                        })
                        .collect::<StringArray>(),
                ),
            };
            columns.insert(name.to_string(), array);
        }
        RawRows {
            columns,
            origins: self.origins,
            unreadable: Vec::new(),
        }
    }
}
