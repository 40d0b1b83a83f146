//! What the Root knows of each Session without opening it: when it was created, when it last
//! changed, and (as of that change) its revision, rows, title and bytes on disk. `sessions`
//! pages are answered from here; only a Session whose summary is unknown or older than its
//! last activity is opened to fill it in.
//!
//! All of it is derived. In memory it lives in the Root's registry entries; on a clean close
//! the Root writes it to `catalog.snap` (layout below) and the next open reads it back. The
//! file stays while nothing changes, so an open that only reads costs no write at its close;
//! the first commit to any Session removes it (durably, before the commit is written: see
//! [`Snapshot::before_change`]), so a snapshot is never trusted after a crash that followed
//! a change. A close writes it again only when a summary changed since it was read.
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
use crate::filter::TrigramFilter;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Magic bytes of the catalog snapshot.
pub const CATALOG_MAGIC: [u8; 8] = *b"LBCATLG\0";
/// Version of the catalog snapshot file.
pub const CATALOG_FORMAT_VERSION: u32 = 4;
/// The snapshot's file name in the Root directory.
pub(crate) const CATALOG_FILE: &str = "catalog.snap";
const CATALOG_HEADER_BYTES: usize = 24;
/// Largest snapshot payload accepted on load, in bytes.
const CATALOG_PAYLOAD_BYTES_MAX: u64 = 1 << 30;

/// Every Session's saved summary, by id.
pub(crate) type Entries = Vec<(String, Saved)>;

/// The snapshot file of one open Root: whether the file on disk still describes the Root.
#[derive(Debug)]
pub(crate) struct Snapshot {
    root: std::path::PathBuf,
    /// The Root directory, open (the writer lock's descriptor): syncing it takes no new one.
    root_fd: std::sync::Arc<std::os::fd::OwnedFd>,
    /// True while `catalog.snap` holds the listing facts of the Root as it is now.
    on_disk: AtomicBool,
    /// Serialises the removal, so every commit returns from `before_change` only once the
    /// file is durably gone.
    removing: std::sync::Mutex<()>,
}

impl Snapshot {
    /// Reads the snapshot of the Root at `root`; `None` when absent, damaged or of another
    /// version (it is derived). A snapshot that was read stays on disk until a change.
    pub(crate) fn load(
        root: &Path,
        root_fd: std::sync::Arc<std::os::fd::OwnedFd>,
    ) -> Result<(Snapshot, Option<Entries>), EngineError> {
        let path = root.join(CATALOG_FILE);
        let saved = match std::fs::read(&path) {
            Ok(b) => decode(&b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(EngineError::io(&path, "read", e)),
        };
        let snapshot = Snapshot {
            root: root.to_owned(),
            root_fd,
            on_disk: AtomicBool::new(saved.is_some()),
            removing: std::sync::Mutex::new(()),
        };
        Ok((snapshot, saved))
    }

    /// A reader's: the file on disk (if any) is not taken, and never written or removed.
    pub(crate) fn ignored(root: &Path, root_fd: std::sync::Arc<std::os::fd::OwnedFd>) -> Snapshot {
        Snapshot {
            root: root.to_owned(),
            root_fd,
            on_disk: AtomicBool::new(false),
            removing: std::sync::Mutex::new(()),
        }
    }

    /// Called before anything the snapshot describes changes (a commit to a Session): removes
    /// the file and syncs the directory, once per open. One atomic load once it is gone.
    pub(crate) fn before_change(&self) -> Result<(), EngineError> {
        if !self.on_disk.load(Ordering::Acquire) {
            return Ok(());
        }
        let _g = self.removing.lock().unwrap_or_else(|p| p.into_inner());
        if !self.on_disk.load(Ordering::Acquire) {
            return Ok(());
        }
        let path = self.root.join(CATALOG_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(EngineError::io(&path, "remove the catalog snapshot", e)),
        }
        rustix::fs::fsync(&*self.root_fd)
            .map_err(|e| EngineError::io(&self.root, "fsync directory", std::io::Error::from(e)))?;
        self.on_disk.store(false, Ordering::Release);
        Ok(())
    }

    /// Writes the snapshot at a clean close, unless the one on disk says the same already
    /// (`changed` false: no summary changed since it was read). Best effort: it is derived.
    pub(crate) fn save_at_close(&self, changed: bool, entries: impl FnOnce() -> Entries) {
        if self.on_disk.load(Ordering::Acquire) && !changed {
            return;
        }
        if save(&self.root, &entries()).is_ok() {
            self.on_disk.store(true, Ordering::Release);
        }
    }
}

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
    /// The Session this one is a sub-agent of (see `State::parent`).
    pub parent: Option<String>,
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
    /// Set when anything saved of this summary changed since it was read from the snapshot
    /// (or made): the Root's close then writes the snapshot again.
    changed: AtomicBool,
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
            changed: AtomicBool::new(false),
        }
    }

    /// The times of a saved summary only (a reader's: see `crate::registry`).
    pub(crate) fn from_times(s: &Saved) -> Summary {
        Summary {
            created_ms: AtomicU64::new(s.created_ms),
            last_ms: AtomicU64::new(s.last_ms),
            ..Summary::default()
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
            changed: AtomicBool::new(true),
        }
    }

    /// Marks an append: the last activity moves to now, and always forward (by at least one
    /// millisecond), so a detail read before this append is never taken for a fresh one.
    pub(crate) fn touch(&self) {
        self.changed.store(true, Ordering::Release);
        let now = now_ms();
        let _ = self
            .last_ms
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last + 1))
            });
    }

    /// Sets the listing facts (read from the open Session).
    pub(crate) fn set_detail(&self, detail: Detail) {
        let mut d = self.detail.lock().unwrap_or_else(|p| p.into_inner());
        if d.as_ref() != Some(&detail) {
            *d = Some(detail);
            self.changed.store(true, Ordering::Release);
        }
    }

    /// Sets the trigram filter, built as of the Session's current revision.
    pub(crate) fn set_filter(&self, filter: std::sync::Arc<TrigramFilter>) {
        *self.filter.lock().unwrap_or_else(|p| p.into_inner()) = Some(filter);
        self.changed.store(true, Ordering::Release);
    }

    /// True when something saved of this summary changed since it was read or made.
    pub(crate) fn changed(&self) -> bool {
        self.changed.load(Ordering::Acquire)
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
        self.changed.store(true, Ordering::Release);
    }
}

impl Summary {
    /// For a reader beside the writer: the times from the Session's log files again (the
    /// writer's appends move them), never moving the last activity back. Times from the
    /// writer's last clean close (`saved_at_ms`: when that close wrote its snapshot; 0 for
    /// none) stand until a file is newer than that close: the close itself touches the files
    /// (it gives their zero regions back), which says nothing of the Session's activity.
    pub(crate) fn follow_times(&self, session_dir: &Path, saved_at_ms: u64) {
        let (created, last) = times_from_files(&session_dir.join("log"));
        let _ = self
            .created_ms
            .compare_exchange(0, created, Ordering::AcqRel, Ordering::Acquire);
        if saved_at_ms == 0 || last > saved_at_ms {
            self.last_ms.fetch_max(last, Ordering::AcqRel);
        }
    }
}

/// When the catalog snapshot of the Root at `root` was written (ms; 0 when there is none).
pub(crate) fn snapshot_written_ms(root: &Path) -> u64 {
    ms_of(std::fs::metadata(root.join(CATALOG_FILE)).and_then(|m| m.modified()))
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
    // The newest segment holding records: an open after a seal starts a segment of a header
    // alone (32 bytes), whose time is the open's, not an append's. A sealed segment keeps the
    // time of its last append (the log gives it its active file's).
    let last = names
        .iter()
        .rev()
        .filter_map(|e| Some((e.file_name(), e.metadata().ok()?)))
        .find(|(n, m)| !(n.to_string_lossy().ends_with(".active") && m.len() <= 32))
        .map(|(_, m)| m)
        .or_else(|| meta(names.last()));
    // A sealed segment's file is made when it is sealed (maybe at a close long after its
    // appends), or a copy's when it is copied: its birth is no earlier than its time, which
    // the log keeps from the segment's last append. The earlier of the two is the Session's
    // creation or later, and never after its last activity.
    let created = first.map_or(0, |m| {
        let (born, modified) = (ms_of(m.created()), ms_of(m.modified()));
        match (born, modified) {
            (0, t) | (t, 0) => t,
            (b, t) => b.min(t),
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

/// A Session's link to the Root: its catalog entry, and what the Root does around each of
/// its commits (implemented above the Sessions, by the Root).
pub(crate) struct Activity {
    pub summary: Arc<Summary>,
    pub root: Arc<dyn Commits>,
}

/// What the Root does around a Session's commits.
pub(crate) trait Commits: Send + Sync {
    /// Before a change is written to a Session's log (the catalog snapshot must not outlive a
    /// change it does not describe).
    fn before_change(&self) -> Result<(), EngineError>;
    /// After a commit whose first sequence is `first`, with the Session's index write-locked:
    /// journal it and mark the Session's last activity.
    fn committed(&self, session_id: &str, first: u64, summary: &Summary);
}

impl Activity {
    pub(crate) fn before_change(&self) -> Result<(), EngineError> {
        self.root.before_change()
    }

    /// Records a commit whose first sequence is `first`; called with the Session's index
    /// write-locked.
    pub(crate) fn committed(&self, session_id: &str, first: u64) {
        // The filter no longer covers the Session (see `crate::filter`).
        *self
            .summary
            .filter
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        self.root.committed(session_id, first, &self.summary);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip_damage_removal_and_rewrite() {
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
                    parent: None,
                    bytes: 4096,
                }),
                filter: Some(TrigramFilter::build(3, |add| add(0x61_6263))),
            },
        )];
        save(dir.path(), &entries).expect("save");
        let raw = std::fs::read(dir.path().join(CATALOG_FILE)).expect("read");
        let fd = || {
            std::sync::Arc::new(std::os::fd::OwnedFd::from(
                std::fs::File::open(dir.path()).expect("dir"),
            ))
        };
        let (snap, loaded) = Snapshot::load(dir.path(), fd()).expect("load");
        assert_eq!(loaded, Some(entries.clone()));
        // Nothing changed: the close leaves the file alone.
        snap.save_at_close(false, || panic!("rewritten although nothing changed"));
        assert_eq!(
            std::fs::read(dir.path().join(CATALOG_FILE)).expect("read"),
            raw
        );
        // A change removes it first, once.
        snap.before_change().expect("remove");
        assert!(
            !dir.path().join(CATALOG_FILE).exists(),
            "removed before a change"
        );
        snap.before_change().expect("already gone");
        assert_eq!(Snapshot::load(dir.path(), fd()).expect("absent").1, None);
        // The close writes it again.
        snap.save_at_close(false, || entries.clone());
        assert_eq!(
            Snapshot::load(dir.path(), fd()).expect("load").1,
            Some(entries.clone())
        );
        for at in [0, 9, 17, raw.len() / 2, raw.len() - 1] {
            let mut b = raw.clone();
            b[at] ^= 0x40;
            assert_eq!(decode(&b), None, "flip at {at}");
        }
        assert_eq!(decode(&raw[..raw.len() - 1]), None);
    }
}
