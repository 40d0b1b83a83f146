//! What the Root knows of each Session without opening it: when it was created, when it last
//! changed, and (as of that change) its revision, rows, title and bytes on disk. `sessions`
//! pages are answered from here; only a Session whose summary is unknown or older than its
//! last activity is opened to fill it in.
//!
//! All of it is derived. In memory it lives in the Root's registry entries; on a clean close
//! the Root writes it to `catalog.snap` (layout below) and the next open reads it back and
//! removes the file before anything changes, so a snapshot is never trusted after a crash.
//! Without one, the times come from the Session's log files (the newest segment's mtime is,
//! roughly, the last append) and the rest from opening the Session when a page needs it.
//!
//! Snapshot layout (integers LE):
//!
//! | offset | width | field |
//! |---|---|---|
//! | 0 | 8 | magic `LBCATLG\0` |
//! | 8 | 4 | [`CATALOG_FORMAT_VERSION`] |
//! | 12 | 4 | reserved, zero |
//! | 16 | 8 | payload length P |
//! | 24 | P | postcard of `Vec<(sessionId, Summary)>` |
//! | 24+P | 4 | CRC-32 of bytes 0..24+P |

use crate::error::EngineError;
use crate::search::TrigramFilter;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Magic bytes of the catalog snapshot.
pub const CATALOG_MAGIC: [u8; 8] = *b"LBCATLG\0";
/// Version of the catalog snapshot file.
pub const CATALOG_FORMAT_VERSION: u32 = 3;
/// The snapshot's file name in the Root directory.
pub(crate) const CATALOG_FILE: &str = "catalog.snap";
const CATALOG_HEADER_BYTES: usize = 24;
/// Largest snapshot payload accepted on load, in bytes.
const CATALOG_PAYLOAD_BYTES_MAX: u64 = 1 << 30;

/// A Session's listing facts as of its activity `at_ms`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Detail {
    /// The Session's last activity when these were read: older than its current last
    /// activity means stale.
    pub at_ms: u64,
    pub revision: u64,
    pub rows: u64,
    pub title: Option<String>,
    pub bytes: u64,
}

/// One Session's times (milliseconds since the Unix epoch, 0 = not known yet) and detail.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    pub created_ms: AtomicU64,
    pub last_ms: AtomicU64,
    pub detail: std::sync::Mutex<Option<Detail>>,
    /// Set when the Session failed to open (cleared when it opens): a listing shows it, and
    /// tries the open again instead of trusting `detail`.
    pub damage: std::sync::Mutex<Option<crate::params::DamageNote>>,
    /// The Session's trigram filter as of its current revision, when built (a commit clears
    /// it): a Root-wide search skips the Session when the filter rules a query out.
    pub filter: std::sync::Mutex<Option<std::sync::Arc<TrigramFilter>>>,
}

/// The snapshot form of a [`Summary`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Saved {
    pub created_ms: u64,
    pub last_ms: u64,
    pub detail: Option<Detail>,
    pub filter: Option<TrigramFilter>,
}

impl Summary {
    pub(crate) fn from_saved(s: Saved) -> Summary {
        Summary {
            created_ms: AtomicU64::new(s.created_ms),
            last_ms: AtomicU64::new(s.last_ms),
            detail: std::sync::Mutex::new(s.detail),
            damage: std::sync::Mutex::default(),
            filter: std::sync::Mutex::new(
                s.filter
                    .and_then(TrigramFilter::checked)
                    .map(std::sync::Arc::new),
            ),
        }
    }

    /// A new Session's summary: created and last active now.
    pub(crate) fn created_now() -> Summary {
        let now = now_ms();
        Summary {
            created_ms: AtomicU64::new(now),
            last_ms: AtomicU64::new(now),
            detail: std::sync::Mutex::default(),
            damage: std::sync::Mutex::default(),
            filter: std::sync::Mutex::default(),
        }
    }

    /// Marks an append: the last activity moves to now, and always forward (by at least one
    /// millisecond), so a detail read before this append is never taken for a fresh one.
    pub(crate) fn touch(&self) {
        let now = now_ms();
        let _ = self
            .last_ms
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last + 1))
            });
    }

    pub(crate) fn saved(&self) -> Saved {
        Saved {
            created_ms: self.created_ms.load(Ordering::Acquire),
            last_ms: self.last_ms.load(Ordering::Acquire),
            detail: self
                .detail
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            filter: self
                .filter
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_deref()
                .cloned(),
        }
    }

    /// True when a time is not known yet (see [`Summary::fill_times`]).
    pub(crate) fn times_unknown(&self) -> bool {
        self.last_ms.load(Ordering::Acquire) == 0 || self.created_ms.load(Ordering::Acquire) == 0
    }

    /// Fills unknown times from the Session's log files: the oldest segment file's creation
    /// (or modification) time and the newest one's modification time.
    pub(crate) fn fill_times(&self, session_dir: &Path) {
        if self.last_ms.load(Ordering::Acquire) != 0 && self.created_ms.load(Ordering::Acquire) != 0
        {
            return;
        }
        let (created, last) = times_from_files(&session_dir.join("log"));
        let _ = self
            .created_ms
            .compare_exchange(0, created, Ordering::AcqRel, Ordering::Acquire);
        self.last_ms.fetch_max(last, Ordering::AcqRel);
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ms_of(t: std::io::Result<std::time::SystemTime>) -> u64 {
    t.ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

/// (created, last modified) of a log directory's segment files, in ms (0 when unreadable).
fn times_from_files(log_dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(log_dir) else {
        return (0, 0);
    };
    let mut names: Vec<std::fs::DirEntry> = entries
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.ends_with(".active") || n.ends_with(".sealed")
        })
        .collect();
    names.sort_by_key(|e| e.file_name());
    let meta = |e: Option<&std::fs::DirEntry>| e.and_then(|e| e.metadata().ok());
    let first = meta(names.first());
    let last = meta(names.last());
    let created = first.map_or(0, |m| {
        let c = ms_of(m.created());
        if c != 0 {
            c
        } else {
            ms_of(m.modified())
        }
    });
    let modified = last.map_or(0, |m| ms_of(m.modified()));
    (created, modified.max(created))
}

/// Bytes the files under `dir` take on disk (allocated blocks, so a zero region not yet
/// written counts only as far as it is allocated).
pub(crate) fn bytes_on_disk(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_on_disk(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Writes the snapshot (atomically: temporary file, fsync, rename, fsync of the directory).
pub(crate) fn save(root: &Path, entries: &[(String, Saved)]) -> Result<(), EngineError> {
    let path = root.join(CATALOG_FILE);
    let payload = postcard::to_allocvec(entries)
        .map_err(|e| EngineError::corrupt(&path, format!("cannot encode the catalog: {e}")))?;
    let mut bytes = Vec::with_capacity(CATALOG_HEADER_BYTES + payload.len() + 4);
    bytes.extend_from_slice(&CATALOG_MAGIC);
    bytes.extend_from_slice(&CATALOG_FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&payload);
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    crate::fsutil::write_atomic(&path, &bytes)
}

/// Reads the snapshot and removes it (durably) so that it is never trusted after a crash of
/// this process; `None` when absent, damaged or of another version (it is derived).
pub(crate) fn take(root: &Path) -> Result<Option<Vec<(String, Saved)>>, EngineError> {
    let path = root.join(CATALOG_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EngineError::io(&path, "read", e)),
    };
    std::fs::remove_file(&path).map_err(|e| EngineError::io(&path, "remove", e))?;
    crate::fsutil::sync_dir(root)?;
    Ok(decode(&bytes))
}

fn decode(bytes: &[u8]) -> Option<Vec<(String, Saved)>> {
    if bytes.len() < CATALOG_HEADER_BYTES + 4 || bytes[..8] != CATALOG_MAGIC {
        return None;
    }
    if u32::from_le_bytes(bytes[8..12].try_into().ok()?) != CATALOG_FORMAT_VERSION {
        return None;
    }
    let len = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    if len > CATALOG_PAYLOAD_BYTES_MAX
        || bytes.len() as u64 != CATALOG_HEADER_BYTES as u64 + len + 4
    {
        return None;
    }
    let end = bytes.len() - 4;
    let crc = u32::from_le_bytes(bytes[end..].try_into().ok()?);
    if crc32fast::hash(&bytes[..end]) != crc {
        return None;
    }
    postcard::from_bytes(&bytes[CATALOG_HEADER_BYTES..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip_damage_and_removal() {
        let dir = tempfile::tempdir().expect("tmp");
        let entries = vec![(
            "s1".to_owned(),
            Saved {
                created_ms: 5,
                last_ms: 9,
                detail: Some(Detail {
                    at_ms: 9,
                    revision: 3,
                    rows: 2,
                    title: Some("t é".into()),
                    bytes: 4096,
                }),
                filter: Some(TrigramFilter::build(3, |add| add(0x61_6263))),
            },
        )];
        save(dir.path(), &entries).expect("save");
        let raw = std::fs::read(dir.path().join(CATALOG_FILE)).expect("read");
        assert_eq!(take(dir.path()).expect("take"), Some(entries.clone()));
        assert!(!dir.path().join(CATALOG_FILE).exists(), "taken once");
        assert_eq!(take(dir.path()).expect("absent"), None);
        for at in [0, 9, 17, raw.len() / 2, raw.len() - 1] {
            let mut b = raw.clone();
            b[at] ^= 0x40;
            assert_eq!(decode(&b), None, "flip at {at}");
        }
        assert_eq!(decode(&raw[..raw.len() - 1]), None);
    }
}
