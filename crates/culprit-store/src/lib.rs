//! The storage catalog: where every file lives, what is visible, and how a
//! batch of new data becomes visible at once.
//!
//! Data lives in an [`object_store`]: a local directory (the embedded
//! default), `s3://bucket/prefix` (any S3-compatible store) or `memory://`
//! (tests). Each table is a set of Parquet files in the canonical schema of
//! [`culprit_core::Table`]. A file is visible only once a **manifest** lists
//! it; manifests are versioned, immutable objects created with
//! `PutMode::Create`, so an ingest is one atomic commit and a crash or a
//! failed ingest leaves the store exactly as before.

mod cache;
mod compact;
mod error;
mod expire;
mod gather;
mod housekeeping;
pub mod layout;
mod manifest;
pub mod paths;
mod store;

pub use cache::{CacheStats, ReadCache};
pub use compact::{merge_memory, CompactOptions, CompactReport, MemoryGate, MemoryGrant};
pub use error::{Result, StoreError, UserTableProblem};
pub use expire::ExpireReport;
pub use housekeeping::{AutoCompact, DEFAULT_AUTO_COMPACT_EVERY, DEFAULT_AUTO_COMPACT_FILES};
pub use manifest::{
    BatchInfo, CronJob, DataFile, Manifest, RetiredFile, SourceRecord, UserColumn, UserTable,
};
pub use store::{
    check_user_table_name, pages_schema, run_details_schema, telemetry_refusal, JobChange,
    PAGES_TABLE, REPORTS_SCHEMA, RUN_DETAILS_TABLE,
};
pub use store::{
    encoders, CommitInfo, DerivedWriter, PendingBatch, QuerySpan, Store, Then, DEFAULT_STORE,
    MANIFEST_GRACE,
};
