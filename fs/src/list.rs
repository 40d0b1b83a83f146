//! Direct children of one directory, in pages, sorted by name bytes.
//!
//! A page is built from a sorted snapshot of the directory's names. Snapshots of large
//! directories are kept in a small process-wide cache keyed by the directory identity
//! and its mtime and ctime, so paging through 100,000 entries reads the directory once
//! rather than once per page. A snapshot is cached only when the directory's mtime and
//! ctime are clearly older than the moment reading began ([`LIST_CACHE_RACY_SECS`]):
//! a change landing in the same timestamp tick as the read could otherwise go unseen.
//! Adding, removing or renaming an entry always moves the directory's mtime and ctime,
//! and ctime cannot be set by a user, so a cached snapshot is never stale.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self, AtFlags, Dir, FileType, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::error::FsError;
use crate::hex;
use crate::identity::{directory_identity, FileStamp};
use crate::path::{HiddenSet, RelPath, NAME_BYTES_MAX};
use crate::resolve::{open_beneath, ResolveFailure, ResolverMode};

/// Most entries in one page.
pub const PAGE_ENTRIES_MAX: usize = 128;
/// Soft size target of one page, in estimated wire bytes; the first entry always fits.
pub const PAGE_BYTES_SOFT_MAX: usize = 512 << 10;
/// Most entries a directory may have to be listed (the sorted snapshot lives in memory).
pub const DIR_ENTRIES_MAX: usize = 1 << 22;
/// How many directory snapshots the process keeps.
const LIST_CACHE_DIRS_MAX: usize = 16;
/// A snapshot is cached only when both directory timestamps are this many seconds older
/// than the start of the read (covers coarse clocks and 1-second timestamp filesystems).
pub const LIST_CACHE_RACY_SECS: i64 = 2;
/// Version tag at the front of every cursor.
const CURSOR_MAGIC: &str = "c1";
/// Hex digits of the directory fingerprint inside a cursor.
const CURSOR_DIR_HEX: usize = 16;

/// One page of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    /// Identity of the listed directory; a changed value means it was replaced.
    pub directory_identity: String,
    /// Children in name-byte order.
    pub entries: Vec<Entry>,
    /// Cursor for the following page, `None` on the last page.
    pub next: Option<String>,
}

/// One child of a listed directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The exact name bytes.
    pub name: Vec<u8>,
    /// What it is; symbolic links are reported, never followed.
    pub kind: EntryKind,
    /// `st_size` for regular files, 0 otherwise.
    pub size: u64,
}

/// Kinds of directory entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (a leaf: its target is never looked at).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl EntryKind {
    /// The wire spelling (`file`, `directory`, `symlink`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Directory => "directory",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }

    fn of(ft: FileType) -> EntryKind {
        match ft {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Directory,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }
}

/// Estimated wire size of an entry: `{"name":{"bytesBase64":"…"},"kind":"…","size":N},`.
pub(crate) fn entry_wire_bytes(name_len: usize, kind: EntryKind, size: u64) -> usize {
    const FRAME: usize = 46;
    let digits = size.checked_ilog10().map_or(1, |d| d as usize + 1);
    FRAME + name_len.div_ceil(3) * 4 + kind.as_str().len() + digits
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct SnapshotKey {
    identity: String,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

#[derive(Debug)]
struct Snapshot {
    key: SnapshotKey,
    /// Sorted by name bytes; `.` and `..` left out; hidden names kept (filtered per caller).
    names: Vec<(Box<[u8]>, FileType)>,
}

static LIST_CACHE: Mutex<Vec<Arc<Snapshot>>> = Mutex::new(Vec::new());

fn cache_get(key: &SnapshotKey) -> Option<Arc<Snapshot>> {
    let mut cache = LIST_CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let at = cache.iter().position(|s| s.key == *key)?;
    let snap = cache.remove(at);
    cache.push(Arc::clone(&snap));
    Some(snap)
}

fn cache_put(snap: Arc<Snapshot>) {
    let mut cache = LIST_CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache.retain(|s| s.key.identity != snap.key.identity);
    if cache.len() >= LIST_CACHE_DIRS_MAX {
        cache.remove(0);
    }
    cache.push(snap);
}

/// Inputs of a listing that come from the workspace.
pub(crate) struct ListContext<'a> {
    pub(crate) mode: ResolverMode,
    pub(crate) root: BorrowedFd<'a>,
    pub(crate) hidden: &'a HiddenSet,
    pub(crate) page_bytes_max: usize,
}

/// Opens `path` as a directory for reading entries, mapping failures to errors.
pub(crate) fn open_dir(
    mode: ResolverMode,
    root: BorrowedFd<'_>,
    hidden: &HiddenSet,
    path: &RelPath,
) -> Result<OwnedFd, FsError> {
    if hidden.hides(path) {
        return Err(FsError::Hidden {
            path: path.as_bytes().to_vec(),
        });
    }
    let p = || path.as_bytes().to_vec();
    open_beneath(mode, root, path, OFlags::RDONLY | OFlags::DIRECTORY).map_err(|f| match f {
        ResolveFailure::NotFound => FsError::NotFound { path: p() },
        ResolveFailure::Symlink => FsError::Symlink { path: p() },
        ResolveFailure::NotDirectory => FsError::NotADirectory { path: p() },
        ResolveFailure::Errno(e) => FsError::from_errno(path.as_bytes(), "open directory", e),
    })
}

pub(crate) fn list(
    cx: &ListContext<'_>,
    path: &RelPath,
    after: Option<&str>,
) -> Result<ListPage, FsError> {
    let dir_fd = open_dir(cx.mode, cx.root, cx.hidden, path)?;
    let (identity, st) = directory_identity(dir_fd.as_fd())
        .map_err(|e| FsError::from_errno(path.as_bytes(), "inspect directory", e))?;
    let fingerprint = dir_fingerprint(&identity);
    let resume = after.map(|c| decode_cursor(c, &fingerprint)).transpose()?;
    let stamp = FileStamp::of(&st);
    let key = SnapshotKey {
        identity: identity.clone(),
        mtime: stamp.mtime,
        ctime: stamp.ctime,
    };
    let snap = match cache_get(&key) {
        Some(s) => s,
        None => read_snapshot(path, &dir_fd, key)?,
    };
    let names = &snap.names;
    let from = match &resume {
        None => 0,
        Some(last) => names.partition_point(|(n, _)| **n <= **last),
    };
    let mut entries = Vec::new();
    let mut bytes = 0usize;
    let mut more = false;
    for (name, dtype) in &names[from..] {
        if cx.hidden.hides_child(path, name) {
            continue;
        }
        if entries.len() == PAGE_ENTRIES_MAX {
            more = true;
            break;
        }
        let Some((kind, size)) = inspect(dir_fd.as_fd(), path, name, *dtype)? else {
            continue; // removed since the snapshot: it is simply no longer a child
        };
        let cost = entry_wire_bytes(name.len(), kind, size);
        if !entries.is_empty() && bytes.saturating_add(cost) > cx.page_bytes_max {
            more = true;
            break;
        }
        bytes += cost;
        entries.push(Entry {
            name: name.to_vec(),
            kind,
            size,
        });
    }
    let next = match (more, entries.last()) {
        (true, Some(last)) => Some(encode_cursor(&fingerprint, &last.name)),
        _ => None,
    };
    Ok(ListPage {
        directory_identity: identity,
        entries,
        next,
    })
}

fn read_snapshot(
    path: &RelPath,
    dir_fd: &OwnedFd,
    key: SnapshotKey,
) -> Result<Arc<Snapshot>, FsError> {
    let io = |op, e: Errno| FsError::from_errno(path.as_bytes(), op, e);
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // A duplicate shares the open directory; the original stays free for `statat`.
    let dup = dir_fd.try_clone().map_err(|e| FsError::Io {
        path: path.as_bytes().to_vec(),
        op: "duplicate directory handle",
        source: e,
    })?;
    let mut dir = Dir::new(dup).map_err(|e| io("read directory", e))?;
    let mut names: Vec<(Box<[u8]>, FileType)> = Vec::new();
    while let Some(ent) = dir.read() {
        let ent = ent.map_err(|e| io("read directory", e))?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() == DIR_ENTRIES_MAX {
            return Err(FsError::DirectoryTooLarge {
                path: path.as_bytes().to_vec(),
                limit: DIR_ENTRIES_MAX as u64,
            });
        }
        names.push((name.into(), ent.file_type()));
    }
    names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let limit = i64::try_from(started.as_secs()).unwrap_or(i64::MAX) - LIST_CACHE_RACY_SECS;
    let settled = key.mtime.0 < limit && key.ctime.0 < limit;
    let snap = Arc::new(Snapshot { key, names });
    if settled && snap.names.len() > PAGE_ENTRIES_MAX {
        cache_put(Arc::clone(&snap));
    }
    Ok(snap)
}

/// Kind and size of one child; `None` when it vanished since the snapshot.
fn inspect(
    dir: BorrowedFd<'_>,
    path: &RelPath,
    name: &[u8],
    dtype: FileType,
) -> Result<Option<(EntryKind, u64)>, FsError> {
    match dtype {
        FileType::Directory | FileType::Symlink | FileType::Fifo | FileType::Socket => {
            return Ok(Some((EntryKind::of(dtype), 0)))
        }
        FileType::CharacterDevice | FileType::BlockDevice => {
            return Ok(Some((EntryKind::Other, 0)))
        }
        FileType::RegularFile | FileType::Unknown => {}
    }
    match fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let stamp = FileStamp::of(&st);
            let kind = EntryKind::of(stamp.file_type());
            let size = if kind == EntryKind::File {
                stamp.size
            } else {
                0
            };
            Ok(Some((kind, size)))
        }
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(FsError::from_errno(
            &path.join_name(name),
            "inspect entry",
            e,
        )),
    }
}

fn dir_fingerprint(identity: &str) -> String {
    let digest = Sha256::digest(identity.as_bytes());
    let mut s = hex::encode(&digest);
    s.truncate(CURSOR_DIR_HEX);
    s
}

fn encode_cursor(fingerprint: &str, last: &[u8]) -> String {
    format!("{CURSOR_MAGIC}.{fingerprint}.{}", hex::encode(last))
}

fn decode_cursor(cursor: &str, fingerprint: &str) -> Result<Vec<u8>, FsError> {
    let bad = |reason| FsError::BadCursor { reason };
    let mut parts = cursor.splitn(3, '.');
    let (Some(magic), Some(dir), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad("it is not a listing cursor"));
    };
    if magic != CURSOR_MAGIC {
        return Err(bad("it is not a listing cursor of this version"));
    }
    if dir != fingerprint {
        return Err(bad(
            "it belongs to another directory (or this one was replaced)",
        ));
    }
    let name = hex::decode(name).ok_or(bad("its name part is damaged"))?;
    if name.is_empty() || name.len() > NAME_BYTES_MAX || name.contains(&b'/') || name.contains(&0) {
        return Err(bad("its name part is not a file name"));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_cost_matches_json_shape() {
        // {"name":{"bytesBase64":"YWJj"},"kind":"file","size":12345},
        let json = r#"{"name":{"bytesBase64":"YWJj"},"kind":"file","size":12345},"#;
        assert_eq!(entry_wire_bytes(3, EntryKind::File, 12345), json.len());
        assert_eq!(entry_wire_bytes(0, EntryKind::Other, 0), 46 + 5 + 1);
    }

    #[test]
    fn cursor_round_trip_and_refusals() {
        let fp = dir_fingerprint("d1:2-i3-b-.-g-");
        let c = encode_cursor(&fp, b"\xffname");
        assert_eq!(decode_cursor(&c, &fp).expect("own cursor"), b"\xffname");
        let other = dir_fingerprint("d1:2-i4-b-.-g-");
        assert!(matches!(
            decode_cursor(&c, &other),
            Err(FsError::BadCursor { .. })
        ));
        for junk in [
            "",
            "c1",
            "c2.x.y",
            "c1.abc.zz",
            &format!("c1.{fp}."),
            &format!("c1.{fp}.2f"),
        ] {
            assert!(decode_cursor(junk, &fp).is_err(), "{junk}");
        }
    }
}
