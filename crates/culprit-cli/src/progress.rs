use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar on stderr when it is a terminal and the work is big
/// enough to wait for; silent otherwise.
pub struct Bar(std::sync::Mutex<Option<ProgressBar>>);

impl Bar {
    pub fn new() -> Self {
        Bar(std::sync::Mutex::new(None))
    }
}

impl culprit_ingest::Progress for Bar {
    fn start(&self, files: usize, bytes: u64) {
        if !std::io::stderr().is_terminal() || (files < 4 && bytes < (16 << 20)) {
            return;
        }
        let bar = ProgressBar::new(bytes);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}) {msg}",
            )
            .expect("static template"),
        );
        *self.0.lock().expect("progress lock") = Some(bar);
    }

    fn advance(&self, file: &str, bytes: u64) {
        if let Some(bar) = self.0.lock().expect("progress lock").as_ref() {
            bar.inc(bytes);
            bar.set_message(file.rsplit('/').next().unwrap_or(file).to_string());
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.0.lock().expect("progress lock").take() {
            bar.finish_and_clear();
        }
    }
}
