//! Progress of long work the engine does on its own: rebuilding a Session's indexes from its
//! log when they are missing or behind, building a segment's search postings, verifying a
//! Root. The engine reports; the caller (a command line's progress bar, say) decides what to
//! show. Reports are cheap and rare (a few per megabyte), so the hot paths are not slowed.

use std::fmt;
use std::sync::Arc;

/// What a task's `total` and `done` count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressUnit {
    /// Bytes of log (an estimate from log positions: segments count as full).
    Bytes,
    /// Rows of history.
    Rows,
    /// Events of one Session (a bundle's export or import).
    Events,
    /// Whole Sessions (each may take long: a bar over a few is still worth showing).
    Sessions,
}

/// Receives progress reports: per task one `start`, any number of `advance`, one `finish`.
/// Tasks nest: one may start while another runs (a verify that opens a Session whose indexes
/// must be rebuilt first), and `finish` then ends the newest. Calls come from whichever thread
/// opens or reads the Session, so two threads' tasks may interleave.
pub trait Progress: Send + Sync {
    /// A task starts. `what` names it for a person ("rebuilding indexes of Session s1").
    fn start(&self, what: &str, total: u64, unit: ProgressUnit);
    /// `done` of the task's `total` are behind us (never more than `total`).
    fn advance(&self, done: u64);
    /// The task ended, whether it succeeded or not.
    fn finish(&self);
    /// Something a person should know that is not an error: a recovery cut a torn tail, say.
    /// Ignored unless implemented.
    fn notice(&self, _text: &str) {}
}

/// Where a Root sends its progress reports: nowhere by default.
#[derive(Clone, Default)]
pub struct ProgressSink(Option<Arc<dyn Progress>>);

impl ProgressSink {
    /// Sends reports to `p`.
    pub fn new(p: Arc<dyn Progress>) -> Self {
        ProgressSink(Some(p))
    }

    /// Passes a notice on (see [`Progress::notice`]).
    pub(crate) fn notice(&self, text: &str) {
        if let Some(p) = &self.0 {
            p.notice(text);
        }
    }

    /// Starts a task; it finishes when the returned guard is dropped.
    pub(crate) fn task(
        &self,
        what: impl FnOnce() -> String,
        total: u64,
        unit: ProgressUnit,
    ) -> Task<'_> {
        if let Some(p) = &self.0 {
            p.start(&what(), total, unit);
        }
        Task {
            sink: self.0.as_deref(),
            total,
            reported: 0,
        }
    }
}

impl fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "ProgressSink(set)"
        } else {
            "ProgressSink(none)"
        })
    }
}

/// One running task (see [`ProgressSink::task`]).
pub(crate) struct Task<'a> {
    sink: Option<&'a dyn Progress>,
    total: u64,
    reported: u64,
}

/// A task reports at least every 256th of its total, and at least every this many units;
/// smaller steps are folded into the next report.
const REPORT_STEP_MIN: u64 = 1 << 20;

impl Task<'_> {
    /// Records that `done` are finished; reports only when it moved enough to matter.
    pub(crate) fn advance(&mut self, done: u64) {
        let Some(p) = self.sink else { return };
        let done = done.min(self.total);
        let step = (self.total / 256).clamp(1, REPORT_STEP_MIN);
        if done >= self.reported + step || done == self.total {
            self.reported = done;
            p.advance(done);
        }
    }
}

impl Drop for Task<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.sink {
            p.finish();
        }
    }
}
