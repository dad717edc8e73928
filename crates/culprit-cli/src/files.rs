//! Writes a generated workload as interchange files.

use std::fs::File;
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use culprit_core::Table;
use culprit_sim::Workload;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FileFormat {
    Parquet,
    Csv,
    Jsonl,
}

/// Writes one file per table (`tasks.parquet`, ...) into `dir`.
pub fn write_workload(
    dir: &Path,
    workload: &Workload,
    format: FileFormat,
) -> Result<Vec<PathBuf>, Box<dyn std::error::Error + Send + Sync>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for table in Table::ALL {
        let Some(batch) = workload.table(table) else {
            continue;
        };
        let ext = match format {
            FileFormat::Parquet => "parquet",
            FileFormat::Csv => "csv",
            FileFormat::Jsonl => "jsonl",
        };
        let path = dir.join(format!("{}.{ext}", table.name()));
        let tmp = dir.join(format!(".{}.{ext}.tmp", table.name()));
        let file = File::create(&tmp)?;
        match format {
            FileFormat::Parquet => {
                let props = parquet::file::properties::WriterProperties::builder()
                    .set_compression(parquet::basic::Compression::SNAPPY)
                    .build();
                let mut w =
                    parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props))?;
                w.write(batch)?;
                w.close()?;
            }
            FileFormat::Csv => {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .with_timestamp_tz_format("%Y-%m-%dT%H:%M:%S%.6fZ".to_string())
                    .build(file);
                w.write(batch)?;
            }
            FileFormat::Jsonl => {
                let mut w = arrow::json::LineDelimitedWriter::new(file);
                w.write(batch)?;
                w.finish()?;
            }
        }
        std::fs::rename(&tmp, &path)?;
        written.push(path);
    }
    Ok(written)
}
