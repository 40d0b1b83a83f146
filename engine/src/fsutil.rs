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
