//! Progress bars (on standard error) for the engine's long work: index rebuilds, search
//! postings builds and verify. Small tasks get no bar; nothing is drawn when standard error
//! is not a terminal.

use std::sync::Mutex;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use logbook_engine::{Progress, ProgressUnit};

/// Rebuilds smaller than this (bytes of log, or rows) finish too fast to be worth a bar.
const BAR_BYTES_MIN: u64 = 8 << 20;
const BAR_ROWS_MIN: u64 = 2_000;

#[derive(Default)]
pub struct Bars {
    multi: MultiProgress,
    /// The running tasks, newest last; `None` for a task too small to show.
    stack: Mutex<Vec<Option<ProgressBar>>>,
}

impl Bars {
    fn stack(&self) -> std::sync::MutexGuard<'_, Vec<Option<ProgressBar>>> {
        self.stack.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Progress for Bars {
    fn start(&self, what: &str, total: u64, unit: ProgressUnit) {
        let (min, template) = match unit {
            ProgressUnit::Bytes => (
                BAR_BYTES_MIN,
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})",
            ),
            ProgressUnit::Rows => (BAR_ROWS_MIN, "{msg} [{bar:30}] {pos}/{len} rows ({eta})"),
            ProgressUnit::Events => (BAR_ROWS_MIN, "{msg} [{bar:30}] {pos}/{len} events ({eta})"),
            ProgressUnit::Sessions => (1, "{spinner} {msg} [{bar:30}] {pos}/{len} ({elapsed})"),
        };
        let bar = (total >= min).then(|| {
            let bar = self.multi.add(ProgressBar::new(total));
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(what.to_owned());
            bar.enable_steady_tick(std::time::Duration::from_millis(100));
            bar
        });
        self.stack().push(bar);
    }

    fn advance(&self, done: u64) {
        if let Some(Some(bar)) = self.stack().last() {
            bar.set_position(done);
        }
    }

    fn finish(&self) {
        if let Some(Some(bar)) = self.stack().pop() {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }

    fn notice(&self, text: &str) {
        // Above any bar, on standard error (also when it is not a terminal).
        if self.multi.println(format!("logbook: {text}")).is_err() || self.multi.is_hidden() {
            eprintln!("logbook: {text}");
        }
    }
}

/// Notices only, on standard error: for `serve`, which draws no bars.
pub struct Notices;

impl Progress for Notices {
    fn start(&self, _what: &str, _total: u64, _unit: ProgressUnit) {}
    fn advance(&self, _done: u64) {}
    fn finish(&self) {}
    fn notice(&self, text: &str) {
        eprintln!("logbook: {text}");
    }
}
