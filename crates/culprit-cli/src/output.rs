use arrow::record_batch::RecordBatch;
use clap::ValueEnum;

/// How `culprit sql` prints a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// An aligned table.
    Table,
    /// CSV with a header.
    Csv,
    /// One JSON object per line.
    Json,
}

pub fn print(
    batches: &[RecordBatch],
    format: OutputFormat,
) -> Result<(), arrow::error::ArrowError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        OutputFormat::Table => {
            use std::io::Write;
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            writeln!(
                out,
                "{}",
                arrow::util::pretty::pretty_format_batches(batches)?
            )?;
            writeln!(out, "({rows} row{})", if rows == 1 { "" } else { "s" })?;
        }
        OutputFormat::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(out);
            for b in batches {
                w.write(b)?;
            }
        }
        OutputFormat::Json => {
            let mut w = arrow::json::LineDelimitedWriter::new(out);
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
    }
    Ok(())
}
