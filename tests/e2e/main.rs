//! End-to-end tests: the real `culprit` binary, the real server on a real
//! port, real clients (tokio-postgres, psql).

mod accuracy;
mod allocator;
mod bi_tools;
mod budget;
mod cli_flags;
mod clients;
mod cluster;
mod common;
mod compact;
mod every_victim;
mod faults;
mod foreign_files;
mod hostmetrics;
mod html;
mod ingest;
mod ingest_spill;
mod ingest_stream;
mod jdbc_meta;
mod load;
mod odbc;
mod papers;
mod policy;
mod reports;
mod s3;
mod security;
mod server;
mod slt;
mod spark;
mod streaming;
mod trino;
mod user_tables;
mod wire_fuzz;
