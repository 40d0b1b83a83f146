//! Small file helpers shared by the index file types: replace by rename (atomic and durable,
//! or unsynced for derived files) and read-only maps.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::IndexError;

/// The temporary name a file is written under before it is renamed into place.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes `parts` to `path` atomically: a temporary file beside it, fsync, rename over
/// `path`, fsync of the directory. A crash leaves either the old file or the new one.
pub(crate) fn write_atomic(path: &Path, parts: &[&[u8]]) -> Result<(), IndexError> {
    write_replace(path, parts, true)
}

/// Writes `parts` to `path` through a temporary file renamed over it, with no fsync: for
/// derived files that are rebuilt when missing or damaged, where a crash may leave the old
/// file, the new one, or none, and each of those is safe. Whatever later needs the file
/// durable syncs it (and its directory) then.
pub(crate) fn write_replace_unsynced(path: &Path, parts: &[&[u8]]) -> Result<(), IndexError> {
    write_replace(path, parts, false)
}

fn write_replace(path: &Path, parts: &[&[u8]], durable: bool) -> Result<(), IndexError> {
    let tmp = tmp_path(path);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| IndexError::io(&tmp, "create", e))?;
        for part in parts {
            file.write_all(part)
                .map_err(|e| IndexError::io(&tmp, "write", e))?;
        }
        if durable {
            file.sync_all()
                .map_err(|e| IndexError::io(&tmp, "fsync", e))?;
        }
        fs::rename(&tmp, path).map_err(|e| IndexError::io(path, "rename", e))?;
        if durable {
            sync_parent(path)?;
        }
        Ok(())
    })();
    if result.is_err() {
        // Best effort: a leftover temporary file is harmless but untidy.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Makes a rename or create inside the parent directory durable.
pub(crate) fn sync_parent(path: &Path) -> Result<(), IndexError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = File::open(parent).map_err(|e| IndexError::io(parent, "open directory", e))?;
    dir.sync_all()
        .map_err(|e| IndexError::io(parent, "fsync directory", e))
}

/// Maps the first `len` bytes of `file` read-only. `len == 0` maps nothing.
///
/// The mapping rule of this crate: a mapped range is never written. Writers
/// append beyond the mapped length (pwrite) and then map again; truncation only
/// happens through `&mut self` after the old map is dropped. Another process
/// writing the file in place would break this; the engine holds one writer
/// process per Root (advisory lock).
pub(crate) fn map_prefix(file: &File, path: &Path, len: u64) -> Result<Option<Mmap>, IndexError> {
    if len == 0 {
        return Ok(None);
    }
    let len_usize = usize::try_from(len).map_err(|_| {
        IndexError::corrupt(path, 0, format!("file of {len} bytes is too large to map"))
    })?;
    // SAFETY: the map is read-only and covers `len` bytes that this crate never
    // modifies while it is mapped (see the rule above); the file is not
    // truncated below `len` while the map lives, because truncation goes through
    // `&mut self`, which drops the map first.
    let map = unsafe { memmap2::MmapOptions::new().len(len_usize).map(file) }
        .map_err(|e| IndexError::io(path, "mmap", e))?;
    Ok(Some(map))
}
