//! Spare Session directories: empty Session directories made ahead of `createSession`, in
//! batches made durable by one `syncfs` each, so that a creation that takes one writes no
//! new name but the rename into place (which its Root-log record stands for), and its first
//! commit syncs only its segment (docs/format.md, "Making a Session").
//!
//! A spare is `sessions/.spare-<open>-<n>/log/` holding an empty log (its first segment's
//! header). Spares are made by one thread at a time, started by a creation that finds fewer
//! than half the target ready; a creation that finds none builds its directory as before.
//! The target starts at [`SPARES_TARGET_MIN`] and doubles, up to [`SPARES_READY_MAX`], each
//! time a creation finds none ready while the maker is at work (creations outrun it: larger
//! batches spread each `syncfs` over more spares). The Root's close removes the spares not
//! taken; the next open after an unclean end removes those no Root-log record names.

use crate::error::EngineError;
use crate::records::SPARE_PREFIX;
use logbook_log::{Log, LogConfig};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Spares kept ready at first: a Root that creates a Session now and then makes no more.
pub(crate) const SPARES_TARGET_MIN: usize = 64;
/// Spares kept ready at most, however fast Sessions are created.
pub(crate) const SPARES_READY_MAX: usize = 512;

pub(crate) struct Spares {
    inner: Arc<Inner>,
}

struct Inner {
    sessions: PathBuf,
    config: LogConfig,
    /// Tells this open's spares from every other's.
    open: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Durable spares, ready to be taken.
    ready: Vec<String>,
    /// Spares named so far by this open.
    named: u64,
    /// How many the maker keeps ready (0 before the first take: [`SPARES_TARGET_MIN`]).
    target: usize,
    maker: Option<JoinHandle<()>>,
    /// The Root is closing: no more are made.
    stopped: bool,
    /// Making spares failed (a full disk, no descriptor left): none is made before this.
    retry_at: Option<Instant>,
}

/// How long after a failure no spare is made.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl Spares {
    pub(crate) fn new(sessions: PathBuf, config: LogConfig, open: u64) -> Spares {
        Spares {
            inner: Arc::new(Inner {
                sessions,
                config,
                open,
                state: Mutex::default(),
            }),
        }
    }

    /// Takes a ready spare: its directory name in `sessions/`. Starts the maker when few
    /// are left. `None` when none is ready (the creation builds its directory itself).
    pub(crate) fn take(&self) -> Option<String> {
        let mut st = self.inner.lock();
        let taken = st.ready.pop();
        let running = st.maker.as_ref().is_some_and(|h| !h.is_finished());
        let resting = st.retry_at.is_some_and(|at| Instant::now() < at);
        st.target = next_target(st.target, taken.is_none() && running);
        if !st.stopped && !running && !resting && st.ready.len() < st.target / 2 {
            let inner = Arc::clone(&self.inner);
            st.maker = std::thread::Builder::new()
                .name("logbook-spares".into())
                .spawn(move || inner.make())
                .ok();
        }
        taken
    }

    /// Waits until the maker is done with its batches (for tests that count files or
    /// descriptors).
    pub(crate) fn settle(&self) {
        let maker = self.inner.lock().maker.take();
        if let Some(h) = maker {
            let _ = h.join();
        }
    }

    /// Stops making spares and removes the ready ones, then syncs `sessions/` (the Root's
    /// close: a spare left behind would stay until an unclean end's scan).
    pub(crate) fn close(&self) -> Result<(), EngineError> {
        self.inner.lock().stopped = true;
        self.settle();
        let ready = std::mem::take(&mut self.inner.lock().ready);
        if ready.is_empty() {
            return Ok(());
        }
        for name in &ready {
            crate::fsutil::remove_any(&self.inner.sessions.join(name))?;
        }
        crate::fsutil::sync_dir(&self.inner.sessions)
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The maker: batches of spares, each made durable by one `syncfs`, until the target
    /// is ready or the Root closes. After a failure none is made for
    /// [`RETRY_AFTER`] (creations build their directories themselves meanwhile); what it made
    /// of the failed batch is removed.
    fn make(&self) {
        loop {
            let (first, count) = {
                let mut st = self.lock();
                if st.stopped || st.ready.len() >= st.target {
                    return;
                }
                let count = st.target - st.ready.len();
                let first = st.named;
                st.named += count as u64;
                (first, count as u64)
            };
            let names: Vec<String> = (first..first + count)
                .map(|n| format!("{SPARE_PREFIX}{:016x}-{n}", self.open))
                .collect();
            let made = names
                .iter()
                .try_for_each(|name| make_spare(&self.sessions.join(name), &self.config))
                .and_then(|()| {
                    logbook_log::sync_file_system(&self.sessions).map_err(EngineError::from)
                });
            let mut st = self.lock();
            if made.is_err() {
                st.retry_at = Some(Instant::now() + RETRY_AFTER);
                drop(st);
                for name in &names {
                    let _ = crate::fsutil::remove_any(&self.sessions.join(name));
                }
                return;
            }
            st.ready.extend(names);
        }
    }
}

/// The maker's target after a take: doubled (up to [`SPARES_READY_MAX`]) when the take
/// found none ready while the maker was at work, else at least [`SPARES_TARGET_MIN`].
fn next_target(target: usize, outrun: bool) -> usize {
    if outrun {
        (target * 2).clamp(SPARES_TARGET_MIN, SPARES_READY_MAX)
    } else {
        target.max(SPARES_TARGET_MIN)
    }
}

/// One spare: its directory and an empty log in it, nothing synced.
fn make_spare(dir: &Path, config: &LogConfig) -> Result<(), EngineError> {
    std::fs::create_dir(dir).map_err(|e| EngineError::io(dir, "create directory", e))?;
    Log::write_empty_unsynced(&dir.join("log"), config)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_grows_only_when_creations_outrun_the_maker() {
        assert_eq!(next_target(0, false), SPARES_TARGET_MIN);
        assert_eq!(next_target(0, true), SPARES_TARGET_MIN);
        assert_eq!(next_target(SPARES_TARGET_MIN, false), SPARES_TARGET_MIN);
        assert_eq!(next_target(SPARES_TARGET_MIN, true), 2 * SPARES_TARGET_MIN);
        let mut t = SPARES_TARGET_MIN;
        for _ in 0..20 {
            t = next_target(t, true);
        }
        assert_eq!(t, SPARES_READY_MAX);
        assert_eq!(
            next_target(t, false),
            SPARES_READY_MAX,
            "it does not shrink"
        );
    }
}
