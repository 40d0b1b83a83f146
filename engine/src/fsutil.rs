//! Small file helpers: atomic replace, directory sync, durable directory creation.

use crate::error::EngineError;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Replaces `path` with `bytes` atomically: temp file in the same directory, fsync, rename,
/// fsync of the directory. A crash leaves either the old or the new file (and maybe a `.tmp`).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), EngineError> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    write_file_synced(&tmp, bytes).map_err(|e| EngineError::io(&tmp, "write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| EngineError::io(path, "rename into place", e))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Writes `bytes` to a fresh temporary file next to `path` and syncs it; used by `write_atomic`.
pub(crate) fn write_file_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    std::io::Write::write_all(&mut f, bytes)?;
    f.sync_all()
}

/// fsync a directory so a rename or create inside it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), EngineError> {
    let f = std::fs::File::open(dir).map_err(|e| EngineError::io(dir, "open directory", e))?;
    f.sync_all()
        .map_err(|e| EngineError::io(dir, "sync directory", e))
}

/// Fsyncs of one directory shared by concurrent callers (group commit for a directory): a
/// caller waits for a sync that started after it asked, and starts one itself when none is
/// running, so N Sessions created at once into `sessions/` pay about one sync of it, not N.
/// A sync that began before a caller asked does not count for it (its change may have come
/// after the sync read the directory).
#[derive(Default)]
pub(crate) struct SharedDirSync {
    state: std::sync::Mutex<DirSyncState>,
    done: std::sync::Condvar,
}

#[derive(Default)]
struct DirSyncState {
    /// Syncs started so far; the running one (if any) is the last.
    started: u64,
    /// The newest started sync that completed without error.
    completed: u64,
    running: bool,
}

impl SharedDirSync {
    fn lock(&self) -> std::sync::MutexGuard<'_, DirSyncState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once a sync of `dir` that started after this call began has completed.
    pub(crate) fn sync(&self, dir: &Path) -> Result<(), EngineError> {
        let mut g = self.lock();
        // Any sync numbered after the ones started so far covers this caller.
        let needed = g.started + 1;
        loop {
            if g.completed >= needed {
                return Ok(());
            }
            if g.running {
                g = self.done.wait(g).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            g.running = true;
            g.started += 1;
            let mine = g.started;
            drop(g);
            let r = sync_dir(dir);
            g = self.lock();
            g.running = false;
            if r.is_ok() {
                g.completed = g.completed.max(mine);
            }
            self.done.notify_all();
            // A failure is this caller's answer; the waiters start a sync of their own.
            r?;
        }
    }
}

/// Removes whatever is at `path` (a directory with its content, or a file); nothing there is
/// fine. For names this crate owns (staging names), which a crash or a person may have left.
pub(crate) fn remove_any(path: &Path) -> Result<(), EngineError> {
    let r = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    };
    r.map_err(|e| EngineError::io(path, "remove what an earlier attempt left", e))
}

/// Test hook: when the environment variable `LOGBOOK_PAUSE_AT` names this point, the calling
/// thread writes the file `<root>/tmp/paused-<name>` and waits until it is removed. Tests use
/// it to hold an operation between two of its steps and show what others can do meanwhile.
pub(crate) fn pause_point(root: &Path, name: &str) {
    if std::env::var_os("LOGBOOK_PAUSE_AT").is_none_or(|v| v != name) {
        return;
    }
    let flag = root.join("tmp").join(format!("paused-{name}"));
    if std::fs::write(&flag, b"").is_err() {
        return;
    }
    while flag.exists() {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// What [`ensure_dir_durable`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DirDurable {
    /// The directory (and maybe some of its parents) was made by this call.
    pub(crate) created: bool,
    /// Directories fsynced by this call (each parent of a directory made or first seen).
    pub(crate) synced: u32,
}

/// Directories this process knows to be durable entries of their parents.
fn known_durable() -> &'static Mutex<HashSet<PathBuf>> {
    static KNOWN: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    KNOWN.get_or_init(Mutex::default)
}

/// Makes `dir` exist as a durable name before a file is published inside it: each missing
/// directory on the way is created and its parent fsynced, so a file renamed into `dir`
/// (and fsynced there) cannot lose its path to a crash that drops a fresh directory entry.
/// Without this, "never a dangling name" (blobs and patches are written before the record
/// that names them) would rest on the file system's journal ordering.
///
/// A directory that already exists but was not seen by this process has its parent fsynced
/// once as well: it may have been created by a process that crashed before syncing. After
/// that, calls cost one lookup in memory. Everything runs under one process-wide lock, so a
/// caller never sees a directory as done while another is still syncing its parent.
pub(crate) fn ensure_dir_durable(dir: &Path) -> Result<DirDurable, EngineError> {
    let mut known = known_durable()
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let mut done = DirDurable::default();
    ensure_locked(dir, &mut known, &mut done)?;
    Ok(done)
}

fn ensure_locked(
    dir: &Path,
    known: &mut HashSet<PathBuf>,
    done: &mut DirDurable,
) -> Result<(), EngineError> {
    if known.contains(dir) {
        return Ok(());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    let created = match std::fs::create_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && parent.is_some() => {
            let parent = parent.expect("checked just above");
            ensure_locked(parent, known, done)?;
            match std::fs::create_dir(dir) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => false,
                Err(e) => return Err(EngineError::io(dir, "create directory", e)),
            }
        }
        Err(e) => return Err(EngineError::io(dir, "create directory", e)),
    };
    sync_dir(parent.unwrap_or(Path::new(".")))?;
    done.created |= created;
    done.synced += 1;
    known.insert(dir.to_owned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sync already running when a caller asks does not count for it: the caller waits for
    /// it to end and then has a sync of its own. Callers that ask while one runs share the
    /// next one.
    #[test]
    fn a_shared_dir_sync_never_answers_with_a_sync_that_started_before_the_ask() {
        let tmp = tempfile::tempdir().expect("tmp");
        let shared = std::sync::Arc::new(SharedDirSync::default());
        {
            let mut g = shared.lock();
            g.running = true;
            g.started = 1;
        }
        let callers: Vec<_> = (0..6)
            .map(|_| {
                let (shared, dir) = (shared.clone(), tmp.path().to_owned());
                std::thread::spawn(move || shared.sync(&dir))
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            callers.iter().all(|c| !c.is_finished()),
            "nobody returns while only the older sync runs"
        );
        {
            let mut g = shared.lock();
            g.running = false;
            g.completed = 1;
        }
        shared.done.notify_all();
        for c in callers {
            c.join().expect("caller").expect("synced");
        }
        let g = shared.lock();
        assert!(g.completed >= 2, "a sync started after the asks completed");
        assert!(
            g.started <= 1 + 6,
            "at most one sync per caller: {}",
            g.started
        );
    }

    #[test]
    fn ensure_dir_durable_creates_syncs_once_and_then_only_looks_up() {
        let tmp = tempfile::tempdir().expect("tmp");
        let top = tmp.path().join("patches");
        let fan = top.join("ab");
        // Both missing: `patches` is made (the Root dir synced), then `ab` (`patches` synced).
        let first = ensure_dir_durable(&fan).expect("first");
        assert_eq!(
            first,
            DirDurable {
                created: true,
                synced: 2
            }
        );
        assert!(fan.is_dir());
        // Known now: nothing is created or synced again.
        assert_eq!(
            ensure_dir_durable(&fan).expect("again"),
            DirDurable::default()
        );
        // A sibling under the known top: made, and only its parent synced.
        assert_eq!(
            ensure_dir_durable(&top.join("cd")).expect("sibling"),
            DirDurable {
                created: true,
                synced: 1
            }
        );
        // A directory that exists but this process never saw (made by a process that may
        // have crashed before its sync): its parent is synced once, nothing is created.
        let other = tmp.path().join("blobs").join("ef");
        std::fs::create_dir_all(&other).expect("mkdir -p");
        let seen = ensure_dir_durable(&other).expect("existing");
        assert_eq!(
            seen,
            DirDurable {
                created: false,
                synced: 1
            }
        );
        assert_eq!(
            ensure_dir_durable(&other).expect("existing again"),
            DirDurable::default()
        );
        // A file in the way is an error that names the path, not a silent success.
        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        let e = ensure_dir_durable(&file.join("x")).expect_err("under a file");
        assert!(e.to_string().contains("file"), "{e}");
    }
}
