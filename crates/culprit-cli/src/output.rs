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

/// The summary line of `culprit shares`.
pub fn shares_summary(r: &culprit_engine::SharesStored, took: std::time::Duration) -> String {
    use culprit_engine::SharesOutcome;
    let removed = if r.removed > 0 {
        format!("; {} older removed", r.removed)
    } else {
        String::new()
    };
    let path = r.path.as_deref().unwrap_or("");
    match r.outcome {
        SharesOutcome::NoTasks => "the store holds no tasks: no shares to store".to_string(),
        SharesOutcome::Stored => format!(
            "the slot holders' shares are stored already for the telemetry {}, at {path}",
            r.telemetry
        ),
        SharesOutcome::Stale => format!(
            "the telemetry changed while the shares of {} were computed: nothing stored, run \
             again{removed}",
            r.telemetry
        ),
        SharesOutcome::Computed => format!(
            "stored the slot holders' shares of {} stages ({} rows) and the answers of {} queries ({} rows), {:.1} MiB, in {:.2} s at {path} (telemetry {}){removed}",
            r.stages,
            r.rows,
            r.answers,
            r.answer_rows,
            r.bytes as f64 / (1 << 20) as f64,
            took.as_secs_f64(),
            r.telemetry
        ),
    }
}

/// The summary line of `culprit compact`.
pub fn compact_summary(r: &culprit_store::CompactReport, took: std::time::Duration) -> String {
    let mut removed = if r.removed > 0 {
        format!("; {} retired files removed", r.removed)
    } else {
        String::new()
    };
    if r.time_ordered + r.file_order > 0 {
        removed.push_str(&format!(
            "; time tables: {} groups merged in order of time",
            r.time_ordered
        ));
        if r.file_order > 0 {
            removed.push_str(&format!(", {} file after file", r.file_order));
        }
    }
    if r.index_rebuilt {
        removed.push_str("; query index rebuilt from the tasks");
    }
    match r.version {
        None => format!("nothing to compact{removed}"),
        Some(v) if r.files_merged() == 0 => format!("store version {v}{removed}"),
        Some(v) => {
            let tables: Vec<String> = r.merged.iter().map(|(t, n)| format!("{t} {n}")).collect();
            format!(
                "merged {} files ({}) into {}: {} rows, {:.1} MiB to {:.1} MiB, {:.2} s (store version {v}){removed}",
                r.files_merged(),
                tables.join(", "),
                r.written,
                r.rows,
                r.bytes_before as f64 / (1u64 << 20) as f64,
                r.bytes_after as f64 / (1u64 << 20) as f64,
                took.as_secs_f64(),
            )
        }
    }
}

/// The summary line of `culprit expire`.
pub fn expire_summary(r: &culprit_store::ExpireReport, took: std::time::Duration) -> String {
    match r.version {
        None => "nothing to expire".to_string(),
        Some(v) => {
            let rows: Vec<String> = r.removed.iter().map(|(t, n)| format!("{t} {n}")).collect();
            format!(
                "expired {} queries; rows removed: {}; {} files rewritten, {} dropped; {:.2} s (store version {v}; `culprit compact` removes the old files after its grace period)",
                r.queries,
                rows.join(", "),
                r.rewritten,
                r.dropped,
                took.as_secs_f64(),
            )
        }
    }
}
