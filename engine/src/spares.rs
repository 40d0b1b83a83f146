//! Spare Session directories: empty Session directories made ahead of `createSession`, in
//! batches made durable by one `syncfs` each, so that a creation that takes one writes no
//! new name but the rename into place (which its Root-log record stands for), and its first
//! commit syncs only its segment (docs/format.md, "Making a Session").
//!
//! A spare is `sessions/.spare-<open>-<n>/log/` holding an empty log (its first segment's
//! header). Spares are made by one thread at a time, started by a creation that finds fewer
//! than [`SPARES_LOW`] ready; a creation that finds none builds its directory as before. The
//! Root's close removes the spares not taken; the next open after an unclean end removes
//! those no Root-log record names.

use crate::error::EngineError;
use crate::records::SPARE_PREFIX;
use logbook_log::{Log, LogConfig};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Spares kept ready at most.
pub(crate) const SPARES_READY_MAX: usize = 64;
/// A creation that leaves fewer ready than this starts the maker.
pub(crate) const SPARES_LOW: usize = 32;

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
        if !st.stopped && !running && !resting && st.ready.len() < SPARES_LOW {
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

    /// The maker: batches of spares, each made durable by one `syncfs`, until
    /// [`SPARES_READY_MAX`] are ready or the Root closes. After a failure none is made for
    /// [`RETRY_AFTER`] (creations build their directories themselves meanwhile); what it made
    /// of the failed batch is removed.
    fn make(&self) {
        loop {
            let (first, count) = {
                let mut st = self.lock();
                if st.stopped || st.ready.len() >= SPARES_READY_MAX {
                    return;
                }
                let count = SPARES_READY_MAX - st.ready.len();
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

/// One spare: its directory and an empty log in it, nothing synced.
fn make_spare(dir: &Path, config: &LogConfig) -> Result<(), EngineError> {
    std::fs::create_dir(dir).map_err(|e| EngineError::io(dir, "create directory", e))?;
    Log::write_empty_unsynced(&dir.join("log"), config)?;
    Ok(())
}
