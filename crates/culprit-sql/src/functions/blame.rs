//! `blame(victim [, from [, to]] [, options])`: level 4 of the iQC-Graph,
//! one row per explanation of a victim's blocked seconds (method.md
//! sections 4-6; 000 §4, App. C; 001 §6). `victim` NULL: every query that
//! ran in the window.

use std::sync::Arc;

use culprit_core::method::{Bc0, BlameOptions, Culprit, CulpritKind, Dataset, Entry, Level4};
use culprit_core::Resource;
use culprit_engine::{Focus, Snapshot};
use datafusion::arrow::array::{
    ArrayRef, DictionaryArray, Float64Array, Int32Array, RecordBatch, StringArray,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use datafusion::common::Result;

use super::args::Args;
use super::table_function::{every_victim, in_group, Cost, Rows, TableFunction};
use crate::error::in_function;

pub struct Blame {
    opts: BlameOptions,
}

impl TableFunction for Blame {
    const NAME: &'static str = "blame";
    const SIGNATURE: &'static str = "blame(victim [, from [, to]] [, 'victim_stages=critical_path|all|<stage>'] [, 'attribution=window|paper'] [, 'slots=direct|transitive'] [, 'victim_tasks=all|last'])";

    fn schema() -> SchemaRef {
        blame_schema()
    }

    fn plan(args: &Args) -> Result<Self> {
        Ok(Blame {
            opts: args.victim_call(Self::SIGNATURE)?,
        })
    }

    fn focus(&self) -> Option<Focus> {
        Focus::of(&self.opts)
    }

    fn cost(&self) -> Cost {
        Cost::victims(self.opts.victims.is_none())
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        Self::rows(snapshot, &self.opts)
    }

    fn by_groups(&self) -> Option<(i64, i64)> {
        every_victim(&self.opts)
    }

    fn compute_group(&self, snapshot: &Snapshot, group: &[String]) -> Result<Rows> {
        Self::rows(snapshot, &in_group(&self.opts, group))
    }
}

impl Blame {
    fn rows(snapshot: &Snapshot, opts: &BlameOptions) -> Result<Rows> {
        let blamed = snapshot.blame(opts).map_err(in_function(Self::NAME))?;
        blame_rows(snapshot.ds.clone(), blamed.level4)
    }
}

/// Text columns of `blame` are dictionary-encoded: its result can have as
/// many rows as the window rows, and names repeat.
pub fn blame_schema() -> SchemaRef {
    let dict = || DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let text = [
        "victim_query",
        "victim_stage",
        "resource",
        "detail",
        "host",
        "culprit_kind",
        "culprit_query",
        "culprit_stage",
        "via_stage",
    ];
    let mut fields: Vec<Field> = text.iter().map(|n| Field::new(*n, dict(), true)).collect();
    fields.push(Field::new("blame_seconds", DataType::Float64, true));
    fields.push(Field::new("dor", DataType::Float64, true));
    Arc::new(Schema::new(fields))
}

/// Keys into a dictionary of names; `NULL_KEY` marks a NULL.
const NULL_KEY: i32 = -1;

fn dict(keys: Vec<i32>, values: &ArrayRef) -> Result<ArrayRef> {
    let nulls: Option<NullBuffer> = keys
        .contains(&NULL_KEY)
        .then(|| keys.iter().map(|k| *k != NULL_KEY).collect());
    let keys: Vec<i32> = if nulls.is_some() {
        keys.into_iter().map(|k| k.max(0)).collect()
    } else {
        keys
    };
    let keys = Int32Array::new(keys.into(), nulls);
    Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(
        keys,
        values.clone(),
    )?))
}

/// Rows per batch of `blame()`'s result.
const BLAME_BATCH_ROWS: usize = 8 * 1024;

/// Level 4, one row per explanation, in the order of the sweep (use ORDER
/// BY), built batch by batch as the result is read; each chunk of the sweep
/// is freed once sent.
fn blame_rows(ds: Arc<Dataset>, entries: Level4) -> Result<Rows> {
    let bc0 = Bc0::of(&ds, &entries);
    let rows = entries.len();
    let names = |v: Vec<&str>| -> ArrayRef { Arc::new(StringArray::from(v)) };
    let queries = names(
        (0..ds.queries.len() as u32)
            .map(|q| ds.queries.name(q))
            .collect(),
    );
    let stages = names(
        (0..ds.stages.len() as u32)
            .map(|s| ds.stage_name(s))
            .collect(),
    );
    let mut hosts: Vec<&str> = (0..ds.hosts.len() as u32)
        .map(|h| ds.hosts.name(h))
        .collect();
    hosts.push("*");
    let hosts = names(hosts);
    let details = entries.details(&ds);
    let details = names((0..details.len() as u32).map(|d| details.name(d)).collect());
    let resources = names(Resource::ALL.iter().map(|r| r.name()).collect());
    let kinds = names(CulpritKind::ALL.iter().map(|k| k.name()).collect());
    let (chunks, _) = entries.into_parts();
    let batches = BlameBatches {
        schema: blame_schema(),
        ds,
        bc0,
        dicts: [queries, stages, resources, details, hosts, kinds],
        chunks: chunks.into_iter(),
        current: Vec::new(),
        offset: 0,
    };
    Ok(Rows {
        rows,
        bytes: rows * std::mem::size_of::<Entry>(),
        batches: Box::new(batches),
    })
}

struct BlameBatches {
    schema: SchemaRef,
    ds: Arc<Dataset>,
    /// The DOR denominators.
    bc0: Bc0,
    /// Dictionary values: queries, stages, resources, details, hosts, kinds.
    dicts: [ArrayRef; 6],
    chunks: std::vec::IntoIter<Vec<Entry>>,
    current: Vec<Entry>,
    offset: usize,
}

impl Iterator for BlameBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        while self.offset >= self.current.len() {
            self.current = self.chunks.next()?;
            self.offset = 0;
        }
        let end = (self.offset + BLAME_BATCH_ROWS).min(self.current.len());
        let batch = self.build(&self.current[self.offset..end]);
        self.offset = end;
        if self.offset >= self.current.len() {
            self.current = Vec::new(); // free the chunk now
        }
        Some(batch)
    }
}

impl BlameBatches {
    fn build(&self, entries: &[Entry]) -> Result<RecordBatch> {
        let ds = &self.ds;
        let n = entries.len();
        let keys = || Vec::<i32>::with_capacity(n);
        let (mut vq, mut vs, mut res, mut det, mut host) = (keys(), keys(), keys(), keys(), keys());
        let (mut kind, mut cq, mut cs, mut via) = (keys(), keys(), keys(), keys());
        let (mut secs, mut dor) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut dor_valid = Vec::with_capacity(n);
        let star = ds.hosts.len() as i32;
        for e in entries {
            let q = ds.stage_query(e.stage);
            vq.push(q as i32);
            vs.push(e.stage as i32);
            res.push(culprit_core::method::model::resource_index(e.resource) as i32);
            det.push(if e.detail == 0 {
                NULL_KEY
            } else {
                e.detail as i32
            });
            host.push(e.host().map_or(star, |h| h as i32));
            let c = e.culprit();
            let (c_query, c_stage) = match c {
                Culprit::Stage(s) => (ds.stage_query(s) as i32, s as i32),
                _ => (NULL_KEY, NULL_KEY),
            };
            kind.push(c.kind(ds, q).code() as i32);
            cq.push(c_query);
            cs.push(c_stage);
            via.push(e.via().map_or(NULL_KEY, |v| v as i32));
            secs.push(e.seconds);
            let d = self.bc0.dor(q, e.seconds);
            dor.push(d.unwrap_or(0.0));
            dor_valid.push(d.is_some());
        }
        let [queries, stages, resources, details, hosts, kinds] = &self.dicts;
        let dor_nulls = dor_valid
            .contains(&false)
            .then(|| NullBuffer::from(dor_valid));
        let columns: Vec<ArrayRef> = vec![
            dict(vq, queries)?,
            dict(vs, stages)?,
            dict(res, resources)?,
            dict(det, details)?,
            dict(host, hosts)?,
            dict(kind, kinds)?,
            dict(cq, queries)?,
            dict(cs, stages)?,
            dict(via, stages)?,
            Arc::new(Float64Array::from(secs)),
            Arc::new(Float64Array::new(dor.into(), dor_nulls)),
        ];
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}
