//! The analyses of the other papers (method.md sections 9-11): what-if,
//! stragglers, contention-free estimates and computation skew, as typed
//! rows. Like `analyses.rs` they are CPU work for a blocking thread; the two
//! that read a table the dataset does not hold (record lineage, the tasks'
//! attributes) read it through the current tokio runtime, at the snapshot's
//! manifest version.

use arrow::array::{Array, Float64Array, RecordBatch, StringArray};
use culprit_core::method::estimate::{estimate, Estimate, EstimateOptions};
use culprit_core::method::skew::{
    check_threshold, expensive_inputs, skewed_tasks, ExpensiveInput, LineageRow, PartitionLatency,
    SkewedTask,
};
use culprit_core::method::stragglers::{stragglers, StragglerRow};
use culprit_core::method::what_if::{what_if, what_if_all, WhatIfResource, WhatIfRow};
use culprit_core::method::Micros;
use culprit_core::Table;
use futures::TryStreamExt;
use rustc_hash::FxHashMap;

use crate::analyses::runtime;
use crate::engine::Snapshot;
use crate::error::Error;

impl Snapshot {
    /// What-if of `query`, or of every query of the window when `None`
    /// (method.md section 9). Needs the window rows in memory.
    pub fn what_if(
        &self,
        query: Option<&str>,
        resource: Option<WhatIfResource>,
        from: Option<Micros>,
        to: Option<Micros>,
    ) -> Result<Vec<WhatIfRow>, Error> {
        self.windows_in_memory("what_if")?;
        Ok(match query {
            Some(q) => what_if(&self.ds, q, resource, from, to)?,
            None => what_if_all(&self.ds, resource, from, to)?,
        })
    }

    /// The stragglers of `query` with their causes (method.md section 9).
    pub fn stragglers(
        &self,
        query: &str,
        from: Option<Micros>,
        to: Option<Micros>,
    ) -> Result<Vec<StragglerRow>, Error> {
        self.windows_in_memory("stragglers")?;
        Ok(stragglers(&self.ds, query, from, to)?)
    }

    /// The contention-free estimate of `query` (method.md section 11).
    pub fn estimate(&self, query: &str, opts: &EstimateOptions) -> Result<Estimate, Error> {
        self.windows_in_memory("estimate")?;
        Ok(estimate(&self.ds, query, opts)?)
    }

    /// Tasks of `query` whose compute time per input record is more than
    /// `threshold` times their stage's median (method.md section 10,
    /// without lineage). Input records come from the tasks' attributes
    /// (`records_read + shuffle_records_read`, as Spark ingest writes them).
    pub fn skewed_tasks(&self, query: &str, threshold: f64) -> Result<Vec<SkewedTask>, Error> {
        self.windows_in_memory("skewed_tasks")?;
        // Bad arguments fail before the tasks table is read.
        self.query(query)?;
        check_threshold(threshold)?;
        let records = runtime()?.block_on(self.input_records(query))?;
        Ok(skewed_tasks(&self.ds, query, &records, threshold)?)
    }

    /// The `k` most expensive input records of `query` from its record
    /// lineage (method.md section 10).
    pub fn expensive_inputs(&self, query: &str, k: usize) -> Result<Vec<ExpensiveInput>, Error> {
        let (rows, partitions) = runtime()?.block_on(self.lineage(query))?;
        Ok(expensive_inputs(&rows, &partitions, query, k)?)
    }

    /// Input records per task id of `query`, from `tasks.attrs` (tasks with
    /// neither count are left out).
    async fn input_records(&self, query: &str) -> Result<FxHashMap<String, f64>, Error> {
        let (store, manifest) = &*self.source;
        let mut out = FxHashMap::default();
        let mut batches = store.scan_table(
            manifest,
            Table::Tasks,
            Some(&["task_id", "query_id", "attrs"]),
        );
        while let Some(b) = batches.try_next().await? {
            let t = Table::Tasks;
            let (ids, queries, attrs) = (
                column::<StringArray>(&b, t, "task_id")?,
                column::<StringArray>(&b, t, "query_id")?,
                column::<StringArray>(&b, t, "attrs")?,
            );
            for i in 0..b.num_rows() {
                if queries.value(i) != query || attrs.is_null(i) {
                    continue;
                }
                if let Some(n) = input_records_of(attrs.value(i)) {
                    out.insert(ids.value(i).to_string(), n);
                }
            }
        }
        Ok(out)
    }

    /// The lineage rows and partition latencies of `query`.
    async fn lineage(
        &self,
        query: &str,
    ) -> Result<(Vec<LineageRow>, Vec<PartitionLatency>), Error> {
        let (store, manifest) = &*self.source;
        let mut rows = Vec::new();
        let mut batches = store.scan_table(manifest, Table::RecordLineage, None);
        while let Some(b) = batches.try_next().await? {
            lineage_rows(&b, query, &mut rows)?;
        }
        let mut partitions = Vec::new();
        let mut batches = store.scan_table(manifest, Table::PartitionLatency, None);
        while let Some(b) = batches.try_next().await? {
            partition_rows(&b, query, &mut partitions)?;
        }
        Ok((rows, partitions))
    }
}

/// `records_read + shuffle_records_read` of a task's attributes (JSON);
/// `None` when neither is there.
fn input_records_of(attrs: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(attrs).ok()?;
    let get = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
    match (get("records_read"), get("shuffle_records_read")) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// A column of a stored batch, by name and type: a store file without it
/// is an error, not a panic.
fn column<'a, A: 'static>(b: &'a RecordBatch, table: Table, name: &str) -> Result<&'a A, Error> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<A>())
        .ok_or_else(|| {
            Error::Internal(format!(
                "a stored {table} file has no column {name} of the table's type"
            ))
        })
}

fn lineage_rows(b: &RecordBatch, query: &str, out: &mut Vec<LineageRow>) -> Result<(), Error> {
    let t = Table::RecordLineage;
    let (queries, stages, outs, ins, latency, partitions) = (
        column::<StringArray>(b, t, "query_id")?,
        column::<StringArray>(b, t, "stage_id")?,
        column::<StringArray>(b, t, "output_id")?,
        column::<StringArray>(b, t, "input_ids")?,
        column::<Float64Array>(b, t, "computation_latency")?,
        column::<StringArray>(b, t, "partition")?,
    );
    for i in 0..b.num_rows() {
        if queries.value(i) != query {
            continue;
        }
        out.push(LineageRow {
            query: query.to_string(),
            stage: stages.value(i).to_string(),
            out_id: outs.value(i).to_string(),
            in_ids: if ins.is_null(i) {
                Vec::new()
            } else {
                ins.value(i)
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            },
            computation_latency: latency.value(i),
            partition: if partitions.is_null(i) {
                String::new()
            } else {
                partitions.value(i).to_string()
            },
        });
    }
    Ok(())
}

fn partition_rows(
    b: &RecordBatch,
    query: &str,
    out: &mut Vec<PartitionLatency>,
) -> Result<(), Error> {
    let t = Table::PartitionLatency;
    let (queries, stages, partitions, latency, inputs) = (
        column::<StringArray>(b, t, "query_id")?,
        column::<StringArray>(b, t, "stage_id")?,
        column::<StringArray>(b, t, "partition")?,
        column::<Float64Array>(b, t, "latency")?,
        column::<Float64Array>(b, t, "inputs")?,
    );
    for i in 0..b.num_rows() {
        if queries.value(i) != query {
            continue;
        }
        out.push(PartitionLatency {
            query: query.to_string(),
            stage: stages.value(i).to_string(),
            partition: partitions.value(i).to_string(),
            latency: latency.value(i),
            inputs: (!inputs.is_null(i)).then(|| inputs.value(i).round() as u64),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::input_records_of;

    #[test]
    fn input_records_from_attrs() {
        assert_eq!(
            input_records_of(r#"{"records_read":10,"shuffle_records_read":5}"#),
            Some(15.0)
        );
        assert_eq!(input_records_of(r#"{"shuffle_records_read":5}"#), Some(5.0));
        assert_eq!(input_records_of(r#"{"other":1}"#), None);
        assert_eq!(input_records_of("not json"), None);
    }
}
