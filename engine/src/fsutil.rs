//! Small file helpers: atomic replace, directory sync.

use crate::error::EngineError;
use std::path::Path;

/// Replaces `path` with `bytes` atomically: temp file in the same directory, fsync, rename,
/// fsync of the directory. A crash leaves either the old or the new file (and maybe a `.tmp`).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), EngineError> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    crate::state::write_file_synced(&tmp, bytes).map_err(|e| EngineError::io(&tmp, "write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| EngineError::io(path, "rename into place", e))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// fsync a directory so a rename or create inside it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), EngineError> {
    let f = std::fs::File::open(dir).map_err(|e| EngineError::io(dir, "open directory", e))?;
    f.sync_all()
        .map_err(|e| EngineError::io(dir, "sync directory", e))
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
