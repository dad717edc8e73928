//! Ingestion: reads telemetry sources, validates every row by the rules of
//! the interchange format, and commits the good rows to the store as one
//! atomic batch.
//!
//! The pipeline is `sources` (list and fetch files, local or object store)
//! -> `formats` (Parquet / CSV / JSON lines into raw Arrow columns) ->
//! `convert` (into the canonical column types) -> `validate` (the rejection
//! rules) -> `driver` (dedup, batch, commit, report). Engine-native
//! sources are translated into the same rows: `spark` (event logs), `trino`
//! (Trino's QueryInfo, Trino's and Presto's QueryCompletedEvent).

mod convert;
mod driver;
mod error;
mod formats;
#[doc(hidden)]
pub mod fuzz;
pub mod hostmetrics;
mod identity;
mod sources;
pub mod spark;
mod task_index;
mod trino;
mod user_table;
mod validate;

pub use driver::{
    ingest, IngestOptions, IngestReport, Progress, Rejection, DEFAULT_MAX_DECODED_BYTES,
};
pub use error::{IngestError, Result};
pub use formats::Format;
pub use hostmetrics::HostMetricsOptions;
pub use sources::{list_sources, SourceFile};
pub use task_index::DEFAULT_MEMORY_TASKS;
pub use user_table::{ingest_user_table, parse_schema, UserTableReport};
