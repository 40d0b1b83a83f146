//! One `unsynced` mark that stands for those of many logs (docs/format.md, "The `unsynced`
//! mark").

use crate::error::LogError;
use crate::io::{FileSystem, RealFs};
use crate::log::UNSYNCED_MARK;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An `unsynced` mark made once for every log opened with it ([`crate::LogConfig::group_mark`])
/// in place of a mark per log: a process that writes many logs (an engine Root writing
/// thousands of Sessions) then pays no file creation and removal per log it opens and closes.
///
/// Taken by the one process that writes those logs, before it opens any of them (the file is
/// made before the first byte any of them writes, so a process that only reads makes none), and
/// [released](GroupMark::release) by it once every log it wrote is closed or fully synced
/// (a mark never released stays on disk, which costs the next taker one `syncfs` and loses
/// nothing). A log whose handle is poisoned or drops with bytes no fdatasync covered (a failed
/// sync, a bulk import that could not sync) still writes its own mark, so that a later open,
/// in this process too, syncs it; when it cannot, the group mark is kept on disk. A mark found
/// when taking it means that its last holder died: the whole file system is synced then (one
/// `syncfs`), so that no log's open needs to.
#[derive(Debug)]
pub struct GroupMark {
    path: PathBuf,
    /// Set when a log left bytes unsynced that no mark of its own covers: the mark stays.
    keep: AtomicBool,
    /// The file is there (made by [`GroupMark::ensure`], or found when taken).
    made: AtomicBool,
}

impl GroupMark {
    /// Takes the mark `UNSYNCED_MARK` in `dir` (which must hold, or be on the same file system
    /// as, every log it is to cover). Returns the mark and whether one was there already, in
    /// which case the file system was synced before this returned. The file itself is made by
    /// the first write of a log that holds the mark.
    pub fn take(dir: &Path) -> Result<(Arc<GroupMark>, bool), LogError> {
        let path = dir.join(UNSYNCED_MARK);
        let found = match std::fs::symlink_metadata(&path) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(LogError::io(&path, "look for the unsynced mark", e)),
        };
        if found {
            // Bytes a killed process wrote may sit in the page cache only: make them durable
            // before any log's open reads them as durable.
            sync_file_system(dir)?;
        }
        Ok((
            Arc::new(GroupMark {
                path,
                keep: AtomicBool::new(false),
                made: AtomicBool::new(found),
            }),
            found,
        ))
    }

    /// Makes the file, once: before the first byte that no fdatasync covers in any log holding
    /// the mark. Not synced: only a killed process leaves bytes in the page cache alone, and
    /// then the page cache holds this name too (see the per-log mark). `mknod`, not `open`: a
    /// write must not need a descriptor (a Root at its descriptor limit keeps writing).
    pub(crate) fn ensure(&self) -> Result<(), LogError> {
        if self.made.load(Ordering::Acquire) {
            return Ok(());
        }
        make_mark_file(&RealFs, &self.path)?;
        self.made.store(true, Ordering::Release);
        Ok(())
    }

    /// Keeps the mark on disk when it is released (a log left bytes unsynced and could not
    /// mark them itself).
    pub(crate) fn keep(&self) {
        self.keep.store(true, Ordering::Release);
    }

    /// Removes the mark, unless a log asked to keep it. For the taker, once every log opened
    /// with the mark is closed or fully synced (and before another process may take it).
    pub fn release(&self) {
        if self.made.load(Ordering::Acquire) && !self.keep.load(Ordering::Acquire) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Creates the empty mark file at `path` without opening it (`mknod`: no descriptor, so it
/// works at the process's descriptor limit); one already there is fine. Not synced (see
/// [`GroupMark::ensure`]).
pub(crate) fn make_mark_file(fs: &dyn FileSystem, path: &Path) -> Result<(), LogError> {
    match fs.create_empty(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(LogError::io(path, "create the unsynced mark", e)),
    }
}

/// `syncfs(2)` of the file system holding `dir`: on Linux it returns once every file and
/// directory of that file system written before the call is durable, as an fsync of each
/// would (and reports a writeback error since 5.8).
pub fn sync_file_system(dir: &Path) -> Result<(), LogError> {
    let d = std::fs::File::open(dir).map_err(|e| LogError::io(dir, "open", e))?;
    rustix::fs::syncfs(&d).map_err(|e| LogError::io(dir, "syncfs", std::io::Error::from(e)))
}
