//! The `Log`: appends with group commit, roll and background sealing, reads, scans, verify.

use crate::cache::{BlockCache, LogCache, BLOCK_CACHE_BYTES};
use crate::error::LogError;
use crate::format::{
    active_name, check_header_versions, cut_name, decode_frame_header_check, encode_cut_header,
    encode_frame, encode_header, parse_name, sealed_name, FileRole, ACTIVE_FORMAT,
    ACTIVE_VERSION_OLDEST, ACTIVE_VERSION_PREALLOCATED, BATCH_BYTES_MAX, CUT_HEADER_BYTES,
    FRAME_HEADER_BYTES, HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX,
};
use crate::io::{read_exact_at, write_all_at, FileSystem, IoFile, RealFs};
use crate::mark::GroupMark;
use crate::pending::PendingSegment;
use crate::sealed::{self, BlockHint, SealedSegment};
use crate::walk::{judge_tail_at, walk, walk_at, Tail};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

mod follow;

/// Default size at which a segment rolls (configurable per log).
pub const SEGMENT_BYTES_MAX: u64 = 64 << 20;
/// Smallest accepted `segment_bytes_max`: a header and one small frame.
pub const SEGMENT_BYTES_MIN: u64 = 64;
/// In `NoSyncBulkImport` mode, appends are buffered in memory up to this many bytes.
pub const WRITE_BUFFER_BYTES: usize = 1 << 20;
/// Longest time a group-commit leader waits, before its fdatasync, for the appenders the
/// previous sync released to write again. Without it, concurrent writers split into two
/// cohorts that alternate and each sync covers only half of them. The wait is also capped at
/// a quarter of the previous sync's duration, and happens only when that sync covered more
/// than one batch (a lone writer never waits).
pub const GROUP_COMMIT_GATHER_MAX: Duration = Duration::from_millis(1);
/// Default [`LogConfig::preallocate_bytes`]: the largest zero region one extension adds ahead
/// of the write position of the newest segment (docs/format.md, "The preallocated zero
/// region").
pub const PREALLOCATE_BYTES: u64 = 4 << 20;
/// The zero region a new log's first segment starts with, and the first extension after a
/// reopen: small, so that a log that holds little costs little on disk (a host keeps
/// thousands of mostly idle Sessions, each with its own log). Each later extension doubles
/// the previous one up to [`LogConfig::preallocate_bytes`], so a busy log still extends its
/// file only a few times (`log2(PREALLOCATE_BYTES / PREALLOCATE_FIRST_BYTES)` = 8 times
/// before it reaches the full step).
pub const PREALLOCATE_FIRST_BYTES: u64 = 16 << 10;
/// Most threads that seal segments at once, for all the logs of the process together: a
/// Root of thousands of Sessions must not cost a thread per log. They exist only while there
/// is sealing to do.
pub const SEALER_THREADS_MAX: usize = 2;
/// Name of the empty file in a log directory that says a handle may have written bytes no
/// fdatasync covered yet: made before a handle's first write, removed when it drops with every
/// byte synced. An open that finds it syncs the newest segment first (see docs/format.md).
pub const UNSYNCED_MARK: &str = "unsynced";
/// Zero-filling writes at most this many bytes per `pwrite`.
const ZERO_FILL_WRITE_BYTES: usize = 1 << 20;
/// Bytes a reader takes from an active segment in one system call: the record it is after
/// and those behind it, which forward reads and scans ask for next (a longer record is
/// read whole).
const READ_WINDOW_BYTES: u64 = 64 << 10;
/// What a lone [`Log::read`] of an active-segment record takes in its one system call.
const READ_ONE_BYTES: u64 = 4 << 10;
/// Above this, the writer's buffer is released after a flush instead of kept for reuse.
const WRITE_BUFFER_KEEP_BYTES: usize = 4 << 20;

/// How appends reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `append` returns after fdatasync; concurrent appenders share one sync.
    Sync,
    /// `append` returns once the bytes are buffered: nothing is durable until [`Log::sync`],
    /// a segment roll or the log is dropped. For bulk imports that can be redone.
    NoSyncBulkImport,
}

/// How a log is run. Nothing of it is stored on disk.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// A segment rolls when the next batch would make it larger than this.
    pub segment_bytes_max: u64,
    /// When appends are acknowledged.
    pub durability: Durability,
    /// With [`Durability::Sync`], the newest segment is zero-filled ahead of the write
    /// position, so that commit fdatasyncs overwrite allocated blocks and need no journal
    /// commit. Each time appends reach the end of the zeros one step is added (made durable by
    /// the commit that needed it, together with that batch; not for a handle's first batch
    /// into a segment without zeros, which extends the file by itself): the
    /// first is [`PREALLOCATE_FIRST_BYTES`] (or this, if smaller), each later one twice the
    /// previous, at most this. Never past `segment_bytes_max`; 0 turns it off. The unused
    /// zeros are given back when the log is dropped and when a segment rolls. Not used by
    /// `NoSyncBulkImport`.
    pub preallocate_bytes: u64,
    /// Where decompressed sealed blocks are kept; `None` gives the log a cache of its own of
    /// [`BLOCK_CACHE_BYTES`]. Logs may share one (an engine Root shares one among its Sessions).
    pub block_cache: Option<Arc<BlockCache>>,
    /// The file system [`Log::create`], [`Log::open`] and [`Log::open_from`] use; `None` is
    /// the real one. For fault injection by crates above the log (the engine's tests reach
    /// their Sessions' logs only through a config), like the `*_with_fs` constructors.
    #[doc(hidden)]
    pub fs: Option<Arc<dyn FileSystem>>,
    /// A mark that stands for this log's own `unsynced` mark while the log is open (see
    /// [`GroupMark`]); `None` makes the log mark itself before its first write.
    pub group_mark: Option<Arc<GroupMark>>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: SEGMENT_BYTES_MAX,
            durability: Durability::Sync,
            preallocate_bytes: PREALLOCATE_BYTES,
            block_cache: None,
            fs: None,
            group_mark: None,
        }
    }
}

impl LogConfig {
    /// Whether new segments get a preallocated zero region.
    /// The file system the config names, or the real one.
    pub(crate) fn file_system(&self) -> Arc<dyn FileSystem> {
        self.fs.clone().unwrap_or_else(|| Arc::new(RealFs))
    }

    fn preallocates(&self) -> bool {
        self.durability == Durability::Sync && self.preallocate_bytes > 0
    }

    /// The first step of a zero region (see [`LogConfig::preallocate_bytes`]).
    fn prealloc_first(&self) -> u64 {
        self.preallocate_bytes.min(PREALLOCATE_FIRST_BYTES)
    }

    /// The step after one of `last` bytes: twice as much, up to `preallocate_bytes`, so the
    /// region grows with the write rate.
    fn prealloc_next(&self, last: u64) -> u64 {
        last.saturating_mul(2)
            .min(self.preallocate_bytes)
            .max(self.prealloc_first())
    }

    /// How far a segment is zero-filled for `needed` bytes with a step of `step` bytes
    /// (`needed` when nothing is to be preallocated).
    fn prealloc_target(&self, needed: u64, step: u64) -> u64 {
        if !self.preallocates() {
            return needed;
        }
        let cap = self.segment_bytes_max.max(needed);
        let target = needed.saturating_add(step).min(cap);
        // Whole pages where possible.
        let aligned = target & !4095;
        if aligned > needed {
            aligned
        } else {
            target
        }
    }
}

/// Where a record starts: its segment and the offset of its frame in the segment's logical
/// (uncompressed) byte stream. Stable forever, also after the segment is sealed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    /// Segment number.
    pub segment: u64,
    /// Offset of the frame in the segment's logical stream.
    pub offset: u64,
}

/// A record to append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Opaque kind byte.
    pub kind: u8,
    /// Opaque payload.
    pub payload: &'a [u8],
}

/// A record read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    /// Opaque kind byte.
    pub kind: u8,
    /// Opaque payload.
    pub payload: Vec<u8>,
}

/// A record borrowed from a [`Reader`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Opaque kind byte.
    pub kind: u8,
    /// Opaque payload.
    pub payload: &'a [u8],
}

impl RecordRef<'_> {
    /// The record with its payload copied.
    pub fn to_owned_record(self) -> OwnedRecord {
        OwnedRecord {
            kind: self.kind,
            payload: self.payload.to_vec(),
        }
    }
}

/// A checked frame: its record, end-of-batch flag and the offset of the next frame.
struct Frame<'a> {
    record: RecordRef<'a>,
    end_of_batch: bool,
    next: u64,
}

/// Active-segment bytes `[start, start + bytes.len())` of segment `segment`, read once and
/// served to the records inside them (published bytes are never rewritten).
#[derive(Default)]
struct Window {
    segment: u64,
    start: u64,
    bytes: Vec<u8>,
}

impl Window {
    fn covers(&self, segment: u64, offset: u64, len: u64) -> bool {
        self.segment == segment
            && offset >= self.start
            && offset + len <= self.start + self.bytes.len() as u64
    }

    /// Bytes `[offset, offset + len)`, which the caller checked with `covers`.
    fn get(&self, offset: u64, len: u64) -> &[u8] {
        let from = (offset - self.start) as usize;
        &self.bytes[from..from + len as usize]
    }
}

/// What a reader keeps from one record to the next.
struct ReadState {
    /// Bytes one read of an active segment takes (a record longer than it is read whole).
    ahead: u64,
    /// Whether active-segment bytes may be read through the segment's map (made on the
    /// first such read). A one-pass reader reads them with `pread` into `window` instead.
    map_active: bool,
    /// The sealed block used last.
    hint: BlockHint,
    /// Active-segment bytes read last.
    window: Window,
    /// A record that spans sealed blocks is put together here.
    scratch: Vec<u8>,
}

impl ReadState {
    /// `bulk`: the reader reads runs of records (see [`BlockHint`]).
    fn new(ahead: u64, bulk: bool) -> ReadState {
        ReadState {
            ahead,
            map_active: true,
            hint: BlockHint::new(bulk),
            window: Window::default(),
            scratch: Vec::new(),
        }
    }

    /// The state of a reader that streams (see [`Log::streaming_reader`]).
    fn streaming() -> ReadState {
        ReadState {
            hint: BlockHint::streaming(),
            map_active: false,
            ..ReadState::new(READ_WINDOW_BYTES, true)
        }
    }
}

/// Reads records one after another, cheaply when they are near each other: a run of
/// records of the active segment costs one system call per 64 KiB, and a
/// run in a sealed segment one block lookup per block. Records are borrowed, not copied.
/// Made by [`Log::reader`]; it sees records published after it was made, too.
pub struct Reader<'a> {
    log: &'a Log,
    /// Segment number, segment and the bound it may be read up to.
    cur: Option<(u64, Seg, u64)>,
    st: ReadState,
}

impl fmt::Debug for Reader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("dir", &self.log.dir())
            .finish_non_exhaustive()
    }
}

impl Reader<'_> {
    /// Reads the record that starts at `at`.
    pub fn read(&mut self, at: Location) -> Result<RecordRef<'_>, LogError> {
        Ok(self.read_next(at)?.0)
    }

    /// Reads the record that starts at `at`, with the location right after it in its segment
    /// (equal to [`Log::end`] when it is the log's last record).
    pub fn read_next(&mut self, at: Location) -> Result<(RecordRef<'_>, Location), LogError> {
        let stale = match &self.cur {
            Some((n, _, bound)) => *n != at.segment || at.offset >= *bound,
            None => true,
        };
        if stale {
            let end = self.log.end();
            if at >= end {
                return Err(LogError::invalid(format!(
                    "no record at {at:?}: the log ends at {end:?}"
                )));
            }
            let (seg, bound) = self.log.shared.segment_for(at.segment, end)?;
            self.cur = Some((at.segment, seg, bound));
        }
        let (_, seg, bound) = self.cur.as_ref().expect("set above");
        let frame =
            self.log
                .shared
                .read_record(seg, at.segment, at.offset, *bound, &mut self.st)?;
        let next = Location {
            segment: at.segment,
            offset: frame.next,
        };
        Ok((frame.record, next))
    }
}

/// What `open` found and did.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes cut from a torn tail (0 when the log was closed cleanly).
    pub cut_bytes: u64,
    /// Where the cut bytes were copied before the cut.
    pub cut_copy: Option<PathBuf>,
    /// Records found in the unsealed segments (the part that was scanned).
    pub tail_records: u64,
    /// Sealed segments (listed only: each is opened and checked on the first read touching
    /// it, except one left beside its active copy by a crash during sealing, checked here).
    pub sealed_segments: u64,
    /// Unsealed segments (scanned in full, or from `resumed_from` on).
    pub unsealed_segments: u64,
    /// The caller's durable mark, when [`Log::open_from`] could use it: the newest segment
    /// was checked from there on only.
    pub resumed_from: Option<Location>,
}

/// What `verify` checked.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segments checked.
    pub segments: u64,
    /// Records whose checksums matched.
    pub records: u64,
    /// Complete batches.
    pub batches: u64,
    /// Logical bytes covered.
    pub bytes: u64,
    /// Compressed blocks checked.
    pub blocks: u64,
}

#[derive(Debug)]
struct ActiveSeg {
    file: Arc<dyn IoFile>,
    path: PathBuf,
    /// Length of the map made on first read: the segment's size limit, or the file's length
    /// then if larger. Reads past it go through `read_at`.
    map_len: u64,
    /// The map of the segment's range (see [`IoFile::map_ahead`]), made on first read; `None`
    /// when the file system gives none or mapping failed (reads go through `read_at`).
    map: OnceLock<Option<memmap2::Mmap>>,
    /// The file's length at the last look: the map is read below it only.
    in_file: AtomicU64,
}

impl ActiveSeg {
    /// Bytes `[from, to)` lent from the map, when there is one and they are in the file. None
    /// sends the caller to `read_at` (which also flushes bytes still in the writer's buffer).
    fn mapped(&self, from: u64, to: u64) -> Option<&[u8]> {
        let map = match self.map.get() {
            Some(map) => map,
            None => {
                // No map before the file holds the bytes asked for: a segment made by its
                // first write (module `pending`) gives no map until then.
                let file_len = self.file.len().ok()?;
                self.in_file.fetch_max(file_len, Ordering::AcqRel);
                if to > file_len {
                    return None;
                }
                self.map.get_or_init(|| {
                    self.file
                        .map_ahead(file_len.max(self.map_len))
                        .ok()
                        .flatten()
                })
            }
        }
        .as_ref()?;
        if to > map.len() as u64 {
            return None;
        }
        if to > self.in_file.load(Ordering::Acquire) {
            // The file grew since the last look (or the bytes are still buffered).
            let len = self.file.len().ok()?;
            self.in_file.fetch_max(len, Ordering::AcqRel);
            if to > len {
                return None;
            }
        }
        Some(&map[from as usize..to as usize])
    }
}

#[derive(Clone, Debug)]
enum Seg {
    Active(Arc<ActiveSeg>),
    Sealed(Arc<SealedSegment>),
}

impl Seg {
    fn active(file: &Arc<dyn IoFile>, path: &Path, config: &LogConfig) -> Seg {
        Seg::Active(Arc::new(ActiveSeg {
            file: Arc::clone(file),
            path: path.to_path_buf(),
            map_len: config.segment_bytes_max,
            map: OnceLock::new(),
            in_file: AtomicU64::new(0),
        }))
    }
}

#[derive(Clone, Debug)]
struct SegEntry {
    seg: Seg,
    /// Logical length of a finished active segment; `None` for the segment taking appends
    /// and for sealed segments (their footer holds it, read on first use).
    len: Option<u64>,
}

#[derive(Debug)]
struct Writer {
    segment: u64,
    file: Arc<dyn IoFile>,
    path: PathBuf,
    /// Logical length including `buf`.
    written: u64,
    /// Bytes that reached the file.
    flushed: u64,
    /// Bytes `[flushed, written)`.
    buf: Vec<u8>,
    /// Bytes covered by a completed fdatasync.
    synced: u64,
    /// Length of the file: `[flushed, file_end)` are zeros (the preallocated region).
    file_end: u64,
    /// Whether this segment takes a preallocated zero region (version 2, `Sync` mode).
    preallocates: bool,
    /// Bytes the zero region was last extended by (or started with): the next extension
    /// doubles it (see [`LogConfig::preallocate_bytes`]).
    prealloc_step: u64,
    /// Number of batches written so far (group commit compares against it).
    seq: u64,
    /// The log directory holds the [`UNSYNCED_MARK`] file (this handle made it, or found it
    /// and could not remove it).
    marked: bool,
    /// This handle zero-filled a region of the current segment (see `give_back_zeros`).
    zero_filled: bool,
    /// The current segment was created by the open without syncs (its predecessor had been
    /// sealed when the log was closed): the first sync that makes a record durable also
    /// syncs the directory, so that the segment's name is as durable as its records.
    name_unsynced: bool,
    /// What makes the names durable instead of a sync of the log's directory (see
    /// [`Log::sync_names_at_first_commit`]).
    name_sync: Option<NameSync>,
    poisoned: Option<String>,
}

impl Writer {
    /// Every byte appended is covered by a completed fdatasync, and the writer is healthy.
    fn fully_synced(&self) -> bool {
        self.poisoned.is_none() && self.buf.is_empty() && self.synced >= self.flushed
    }
}

#[derive(Debug, Default)]
struct Commit {
    synced_seq: u64,
    leader: bool,
    failed: Option<String>,
    /// Batches the last sync made durable, and how long it took (for gathering).
    last_group: u64,
    last_sync: Duration,
}

#[derive(Debug, Default)]
struct SealState {
    pending: u64,
    error: Option<String>,
}

#[derive(Debug)]
struct Shared {
    /// This very value, for the sealing jobs a roll queues (they hold the log's state while
    /// they run; the `Log` waits for them when dropped).
    this: Weak<Shared>,
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    config: LogConfig,
    first_segment: u64,
    // Lock order: writer, then segments / commit / seal; `published` and `cache` are leaves.
    segments: RwLock<BTreeMap<u64, SegEntry>>,
    published: Mutex<Location>,
    writer: Mutex<Writer>,
    commit: Mutex<Commit>,
    commit_cv: Condvar,
    cache: LogCache,
    seal: Mutex<SealState>,
    seal_cv: Condvar,
    /// Mirror of `Writer::seq`, read without the lock by a gathering leader.
    written_seq: AtomicU64,
    /// Mirror of `Writer::poisoned.is_some()`, read without the lock (see `Log::is_poisoned`).
    poisoned: AtomicBool,
    /// Set by [`Log::seal_when_closed`]: the fewest record bytes of the newest segment for
    /// which the last handle's drop has it sealed; 0 when not asked.
    seal_when_closed: AtomicU64,
    /// `Some` for a read-only handle ([`Log::open_read_only`]): what it follows. Such a handle
    /// never writes; its `writer` only holds the newest file.
    follow: Option<Mutex<follow::Follow>>,
}

/// The segmented append-only log. `Send + Sync`: share it with `Arc`.
pub struct Log {
    shared: Arc<Shared>,
    /// This open's key and number in [`LOG_INSTANCES`]; `None` when the directory could not
    /// be identified (the drop then leaves the files alone).
    instance: Option<(DirKey, u64)>,
}

/// A log directory as the file system knows it (device, inode): the same under every
/// spelling of its path and across a rename of it.
type DirKey = (u64, u64);

/// The newest `Log` opened on each directory of this process, by instance number. A caller
/// may open a log again while an older handle on the same directory is still alive (the
/// engine reopens a failed Session while calls still hold the failed one); the older handle
/// must then leave the files alone when it is dropped, since the newer one may have
/// written into the zero region the older one would give back.
struct LogInstances {
    newest: HashMap<DirKey, u64>,
    next: u64,
}

static LOG_INSTANCES: Mutex<Option<LogInstances>> = Mutex::new(None);

/// The directory's identity, when it can be read.
fn dir_key(dir: &Path) -> Option<DirKey> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    Some((m.dev(), m.ino()))
}

impl LogInstances {
    /// Records a new open of `dir` as the newest; returns its key and instance number.
    fn register(key: Option<DirKey>) -> Option<(DirKey, u64)> {
        let key = key?;
        let mut g = lock(&LOG_INSTANCES);
        let all = g.get_or_insert_with(|| LogInstances {
            newest: HashMap::new(),
            next: 0,
        });
        all.next += 1;
        all.newest.insert(key, all.next);
        Some((key, all.next))
    }

    /// Forgets an instance; returns whether it was the newest open of its directory (only
    /// then may its drop change the files).
    fn unregister(instance: Option<(DirKey, u64)>) -> bool {
        let Some((key, n)) = instance else {
            return false;
        };
        let mut g = lock(&LOG_INSTANCES);
        match g.as_mut() {
            Some(all) if all.newest.get(&key) == Some(&n) => {
                all.newest.remove(&key);
                true
            }
            _ => false,
        }
    }
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.shared.dir)
            .field("end", &self.end())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock leaves plain data behind; the log's own checks still hold.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes `dir` (and its parents) when missing; `NotEmpty` when it holds anything: a new log
/// starts only in an empty directory.
pub(crate) fn make_empty_dir(fs: &dyn FileSystem, dir: &Path) -> Result<(), LogError> {
    match fs.create_dir(dir) {
        // Made just now: nothing can be in it.
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        // A parent is missing (or `mkdir` failed otherwise, which this reports again).
        Err(_) => fs
            .create_dir_all(dir)
            .map_err(|e| LogError::io(dir, "create directory", e))?,
    }
    let names = fs
        .list_dir(dir)
        .map_err(|e| LogError::io(dir, "list directory", e))?;
    if !names.is_empty() {
        return Err(LogError::NotEmpty {
            path: dir.to_path_buf(),
        });
    }
    Ok(())
}

pub(crate) fn check_config(config: &LogConfig) -> Result<(), LogError> {
    if config.segment_bytes_max < SEGMENT_BYTES_MIN {
        return Err(LogError::invalid(format!(
            "segment_bytes_max {} is below the minimum {SEGMENT_BYTES_MIN}",
            config.segment_bytes_max
        )));
    }
    Ok(())
}

/// The first and last of the segment numbers found in `dir` (ascending), which must be dense:
/// none found is [`LogError::NoLog`], a gap is corruption naming the missing segment.
fn dense_range(dir: &Path, numbers: impl Iterator<Item = u64>) -> Result<(u64, u64), LogError> {
    let numbers: Vec<u64> = numbers.collect();
    let (Some(&first), Some(&last)) = (numbers.first(), numbers.last()) else {
        return Err(LogError::NoLog {
            path: dir.to_path_buf(),
        });
    };
    if last - first + 1 != numbers.len() as u64 {
        let missing = (first..last)
            .find(|n| numbers.binary_search(n).is_err())
            .expect("a gap exists when the count is short");
        return Err(LogError::corrupt(
            dir.join(active_name(missing)),
            0,
            format!("segment {missing} is missing between {first} and {last}"),
        ));
    }
    Ok((first, last))
}

/// Creates segment `n` with its header and, as the config says, a preallocated zero region of
/// about `step` bytes, synced, and its name synced into the directory. Returns the file, its
/// path and its length.
fn create_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    n: u64,
    config: &LogConfig,
    step: u64,
) -> Result<(Arc<dyn IoFile>, PathBuf, u64), LogError> {
    create_segment_with(fs, dir, n, config, step, &[])
}

/// [`create_segment`] whose file holds `frames` (encoded for offset `HEADER_BYTES` on) after
/// the header, synced with it. Returns the file length (the zeros' end, or the frames' end).
fn create_segment_with(
    fs: &dyn FileSystem,
    dir: &Path,
    n: u64,
    config: &LogConfig,
    step: u64,
    frames: &[u8],
) -> Result<(Arc<dyn IoFile>, PathBuf, u64), LogError> {
    let (f, path, len) = create_segment_unsynced(fs, dir, n, frames)?;
    let file_end = config.prealloc_target(len, step).max(len);
    zero_fill(&*f, len, file_end).map_err(|e| LogError::io(&path, "preallocate", e))?;
    f.sync_data()
        .map_err(|e| LogError::io(&path, "fdatasync", e))?;
    fs.sync_dir(dir)
        .map_err(|e| LogError::io(dir, "fsync directory", e))?;
    Ok((f, path, file_end))
}

/// Creates segment `n` holding its header and `frames` (encoded for offset `HEADER_BYTES` on),
/// with no sync and no zero region (the open that starts a segment after a sealed one,
/// [`Log::write_unsynced`], and the first step of [`create_segment_with`]). Returns the file,
/// its path and its length.
fn create_segment_unsynced(
    fs: &dyn FileSystem,
    dir: &Path,
    n: u64,
    frames: &[u8],
) -> Result<(Arc<dyn IoFile>, PathBuf, u64), LogError> {
    let path = dir.join(active_name(n));
    let f = fs
        .create_new(&path)
        .map_err(|e| LogError::io(&path, "create", e))?;
    let mut head = encode_header(ACTIVE_FORMAT, n).to_vec();
    head.extend_from_slice(frames);
    write_all_at(&*f, &head, 0).map_err(|e| LogError::io(&path, "write", e))?;
    Ok((f, path, head.len() as u64))
}

/// The bytes `batch` takes as frames, after checking each record and the whole against
/// [`RECORD_PAYLOAD_BYTES_MAX`] and [`BATCH_BYTES_MAX`] (the same checks for `append` and a
/// new log's first batch).
pub(crate) fn checked_batch_len(batch: &[Record<'_>]) -> Result<u64, LogError> {
    let mut batch_len = 0u64;
    for r in batch {
        if r.payload.len() as u64 > RECORD_PAYLOAD_BYTES_MAX {
            return Err(LogError::invalid(format!(
                "record payload of {} bytes exceeds RECORD_PAYLOAD_BYTES_MAX ({RECORD_PAYLOAD_BYTES_MAX})",
                r.payload.len()
            )));
        }
        batch_len += FRAME_HEADER_BYTES + r.payload.len() as u64;
    }
    if batch_len > BATCH_BYTES_MAX {
        return Err(LogError::invalid(format!(
            "batch of {batch_len} bytes exceeds BATCH_BYTES_MAX ({BATCH_BYTES_MAX})"
        )));
    }
    Ok(batch_len)
}

/// Frames of a new log's first batch (segment 0, from the header's end on; the durable mark
/// is the header), checked as `append` checks a batch, and their Locations.
fn encode_first_batch(batch: &[Record<'_>]) -> Result<(Vec<u8>, Vec<Location>), LogError> {
    let mut frames = Vec::with_capacity(checked_batch_len(batch)? as usize);
    let mut locations = Vec::with_capacity(batch.len());
    for (i, r) in batch.iter().enumerate() {
        let offset = HEADER_BYTES + frames.len() as u64;
        locations.push(Location { segment: 0, offset });
        let last = i + 1 == batch.len();
        encode_frame(
            &mut frames,
            0,
            offset,
            r.kind,
            last,
            HEADER_BYTES,
            r.payload,
        );
    }
    Ok((frames, locations))
}

/// Writes zeros over `[from, to)` of `f`.
fn zero_fill(f: &dyn IoFile, from: u64, to: u64) -> std::io::Result<()> {
    if to <= from {
        return Ok(());
    }
    // Never written, so its pages are the kernel's shared zero page: no allocation, no
    // memset and no fresh pages per fill (a growing log fills often).
    static ZEROS: [u8; ZERO_FILL_WRITE_BYTES] = [0; ZERO_FILL_WRITE_BYTES];
    let zeros = &ZEROS[..((to - from) as usize).min(ZERO_FILL_WRITE_BYTES)];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(zeros.len());
        write_all_at(f, &zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

fn read_range(f: &dyn IoFile, path: &Path, from: u64, to: u64) -> Result<Vec<u8>, LogError> {
    let n = usize::try_from(to - from)
        .map_err(|_| LogError::corrupt(path, from, "segment larger than the address space"))?;
    let mut data = vec![0u8; n];
    read_exact_at(f, &mut data, from).map_err(|e| LogError::io(path, "read", e))?;
    Ok(data)
}

fn read_all(f: &dyn IoFile, path: &Path, len: u64) -> Result<Vec<u8>, LogError> {
    let n = usize::try_from(len)
        .map_err(|_| LogError::corrupt(path, 0, "segment larger than the address space"))?;
    let mut data = vec![0u8; n];
    read_exact_at(f, &mut data, 0).map_err(|e| LogError::io(path, "read", e))?;
    Ok(data)
}

impl Log {
    /// Creates a new log in `dir`, which must be absent or empty.
    pub fn create(dir: &Path, config: LogConfig) -> Result<Log, LogError> {
        let fs = config.file_system();
        Log::create_with_fs(dir, config, fs)
    }

    /// [`Log::create`] whose first batch is written with the header and made durable by the
    /// same fdatasync (one sync for a new log and its first records, in every durability
    /// mode). Returns the log and the batch's Locations.
    pub fn create_with_first(
        dir: &Path,
        config: LogConfig,
        first: &[Record<'_>],
    ) -> Result<(Log, Vec<Location>), LogError> {
        let fs = config.file_system();
        Log::create_inner(dir, config, fs, first)
    }

    /// Opens an existing log: lists the sealed segments (each is opened and checked on the
    /// first read touching it, and by `verify`), scans the unsealed ones, and cuts a torn tail
    /// (keeping a copy beside it).
    pub fn open(dir: &Path, config: LogConfig) -> Result<(Log, Recovery), LogError> {
        let fs = config.file_system();
        Log::open_with_fs(dir, config, fs)
    }

    /// Like [`Log::open`], but `mark` is a record Location the caller knows was durable and
    /// checked before (e.g. the last record its own checkpoint covers): when it lies in the
    /// newest segment, only the bytes from it on are read and checked. The mark is verified
    /// (a frame must start there, both its checksums bound to that very Location, followed by
    /// a complete batch); a mark that fails any check is ignored and the segment checked in
    /// full, so a stale mark costs time, never correctness. [`Recovery::resumed_from`] says
    /// which happened. Records before the mark are still checked by every read.
    pub fn open_from(
        dir: &Path,
        config: LogConfig,
        mark: Location,
    ) -> Result<(Log, Recovery), LogError> {
        let fs = config.file_system();
        Log::open_inner(dir, config, fs, Some(mark), None)
    }

    /// Like [`Log::open_from`] (with `mark` optional), where `referenced` is the newest record
    /// Location that something durable outside the log refers to (an index entry, a
    /// checkpoint, a receipt): the record there was synced before that reference was written.
    /// Bytes before the end of that record are never cut as a torn tail: damage there is
    /// [`LogError::Corrupt`], and so is a `referenced` beyond the segments found.
    pub fn open_referenced(
        dir: &Path,
        config: LogConfig,
        mark: Option<Location>,
        referenced: Option<Location>,
    ) -> Result<(Log, Recovery), LogError> {
        let fs = config.file_system();
        Log::open_inner(dir, config, fs, mark, referenced)
    }

    /// [`Log::create`] over a chosen file system (fault injection in tests).
    #[doc(hidden)]
    pub fn create_with_fs(
        dir: &Path,
        config: LogConfig,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Log, LogError> {
        Ok(Log::create_inner(dir, config, fs, &[])?.0)
    }

    fn create_inner(
        dir: &Path,
        config: LogConfig,
        fs: Arc<dyn FileSystem>,
        first: &[Record<'_>],
    ) -> Result<(Log, Vec<Location>), LogError> {
        check_config(&config)?;
        let (frames, locations) = encode_first_batch(first)?;
        make_empty_dir(fs.as_ref(), dir)?;
        let (file, path, file_end) =
            create_segment_with(&*fs, dir, 0, &config, config.prealloc_first(), &frames)?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs.sync_dir(parent)
                .map_err(|e| LogError::io(parent, "fsync directory", e))?;
        }
        let mut segments = BTreeMap::new();
        segments.insert(
            0,
            SegEntry {
                seg: Seg::active(&file, &path, &config),
                len: None,
            },
        );
        let log = Log::start_up(
            dir,
            config,
            fs,
            segments,
            0,
            file,
            path,
            HEADER_BYTES + frames.len() as u64,
            file_end,
            true,
            Vec::new(),
            false,
            None,
            dir_key(dir),
        );
        Ok((log, locations))
    }

    /// [`Log::open`] over a chosen file system (fault injection in tests).
    #[doc(hidden)]
    pub fn open_with_fs(
        dir: &Path,
        config: LogConfig,
        fs: Arc<dyn FileSystem>,
    ) -> Result<(Log, Recovery), LogError> {
        Log::open_inner(dir, config, fs, None, None)
    }

    /// [`Log::open_from`] over a chosen file system (fault injection in tests).
    #[doc(hidden)]
    pub fn open_from_with_fs(
        dir: &Path,
        config: LogConfig,
        fs: Arc<dyn FileSystem>,
        mark: Location,
    ) -> Result<(Log, Recovery), LogError> {
        Log::open_inner(dir, config, fs, Some(mark), None)
    }

    fn open_inner(
        dir: &Path,
        config: LogConfig,
        fs: Arc<dyn FileSystem>,
        mark: Option<Location>,
        referenced: Option<Location>,
    ) -> Result<(Log, Recovery), LogError> {
        check_config(&config)?;
        // The directory's identity, looked up once: a seal of it queued by an earlier handle's
        // close is settled first, and this handle registers under it.
        let key = dir_key(dir);
        if let Some(key) = key {
            settle_closed_seal(key);
        }
        let names = match fs.list_dir(dir) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LogError::NoLog {
                    path: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(LogError::io(dir, "list directory", e)),
        };
        let mut found: BTreeMap<u64, (bool, bool)> = BTreeMap::new();
        let mut dir_dirty = false;
        for name in &names {
            match parse_name(name) {
                Some(FileRole::Active(n)) => found.entry(n).or_default().0 = true,
                Some(FileRole::Sealed(n)) => found.entry(n).or_default().1 = true,
                Some(FileRole::SealedTmp(_)) => {
                    // Never authoritative: the active file it came from is still there.
                    let p = dir.join(name);
                    fs.remove_file(&p)
                        .map_err(|e| LogError::io(&p, "remove", e))?;
                    dir_dirty = true;
                }
                None => {}
            }
        }
        let (first, last) = dense_range(dir, found.keys().copied())?;
        if let Some(r) = referenced.filter(|r| r.segment > last) {
            return Err(LogError::corrupt(
                dir.join(active_name(r.segment)),
                r.offset,
                format!(
                    "segment {} holds a record that a durable index refers to, but the log ends \
                     with segment {last}",
                    r.segment
                ),
            ));
        }
        let mut rec = Recovery::default();
        let mut segments = BTreeMap::new();
        let mut to_seal = Vec::new();
        let mut newest: Option<(Arc<dyn IoFile>, PathBuf, u64)> = None;
        // The newest segment's file length and whether it may end in zeros (version 2).
        let mut newest_tail = (0u64, false);
        for (&n, &(has_active, has_sealed)) in &found {
            if has_sealed {
                let p = dir.join(sealed_name(n));
                let s = if has_active {
                    let active_path = dir.join(active_name(n));
                    // A crash between steps 2 and 3 of sealing: the sealed file is complete.
                    // Check it before the active copy goes (the only sealed file open reads).
                    let s = SealedSegment::open(Arc::clone(&fs), &p, n)?;
                    fs.remove_file(&active_path)
                        .map_err(|e| LogError::io(&active_path, "remove", e))?;
                    dir_dirty = true;
                    s
                } else {
                    // Opened, mapped and checked on the first read that touches it.
                    SealedSegment::lazy(Arc::clone(&fs), &p, n)
                };
                rec.sealed_segments += 1;
                segments.insert(
                    n,
                    SegEntry {
                        seg: Seg::Sealed(Arc::new(s)),
                        len: None,
                    },
                );
                continue;
            }
            let active_path = dir.join(active_name(n));
            rec.unsealed_segments += 1;
            let f = fs
                .open_rw(&active_path)
                .map_err(|e| LogError::io(&active_path, "open", e))?;
            let len = if n == last {
                let here = |l: Option<Location>| l.filter(|l| l.segment == n).map(|l| l.offset);
                let (len, file_end, version) = recover_newest(
                    &*fs,
                    dir,
                    n,
                    &*f,
                    &active_path,
                    &mut rec,
                    here(mark),
                    here(referenced),
                )?;
                newest_tail = (file_end, version >= ACTIVE_VERSION_PREALLOCATED);
                len
            } else {
                let len = f.len().map_err(|e| LogError::io(&active_path, "stat", e))?;
                let data = read_all(&*f, &active_path, len)?;
                check_header_versions(
                    &active_path,
                    &data,
                    ACTIVE_FORMAT,
                    ACTIVE_VERSION_OLDEST,
                    n,
                )?;
                let w = walk(n, &data);
                if let Some((at, reason)) = w.damage {
                    return Err(LogError::corrupt(&active_path, at, reason));
                }
                rec.tail_records += w.records;
                to_seal.push(n);
                len
            };
            if n == last {
                newest = Some((Arc::clone(&f), active_path.clone(), len));
            }
            segments.insert(
                n,
                SegEntry {
                    seg: Seg::active(&f, &active_path, &config),
                    len: (n != last).then_some(len),
                },
            );
        }
        let mut name_unsynced = false;
        let (file, path, len, mut file_end, preallocated, head) = match newest {
            Some((f, p, len)) => (f, p, len, newest_tail.0, newest_tail.1, last),
            None => {
                // The newest segment is sealed (by a roll a crash interrupted, or when the log
                // was closed): a fresh one follows it, made by its first write (module
                // `pending`), so that an open to read writes nothing. Unsynced, and with no
                // zero region: until a record reaches it, losing it loses nothing (the next
                // open makes it again, and an unsynced header that reads as zeros is a torn
                // create), and the first commit syncs its name.
                let n = last.checked_add(1).ok_or_else(|| {
                    LogError::corrupt(dir.join(sealed_name(last)), 0, "segment numbers exhausted")
                })?;
                let p = dir.join(active_name(n));
                let f: Arc<dyn IoFile> =
                    Arc::new(PendingSegment::new(Arc::clone(&fs), p.clone(), n));
                let file_end = HEADER_BYTES;
                name_unsynced = true;
                segments.insert(
                    n,
                    SegEntry {
                        seg: Seg::active(&f, &p, &config),
                        len: None,
                    },
                );
                (f, p, HEADER_BYTES, file_end, true, n)
            }
        };
        if file_end > len && !config.preallocates() {
            // Buffered appends must never find zeros where a record will be: a read past the
            // flushed end has to see the end of the file (and flush), not the zero region.
            file.set_len(len)
                .map_err(|e| LogError::io(&path, "truncate", e))?;
            file_end = len;
        }
        if dir_dirty {
            fs.sync_dir(dir)
                .map_err(|e| LogError::io(dir, "fsync directory", e))?;
        }
        // Bytes that survived a killed process may still sit in the page cache only; sync them
        // before any frame's durable mark claims them. A handle writes the `unsynced` mark
        // before its first byte and removes it only when it drops with every byte synced, so
        // without the mark there are none (a power loss empties the page cache, and with it
        // an unsynced mark too: what is read then is on disk). A cut above synced what it
        // changed. The mark goes once the sync is done: this handle makes its own.
        let mut marked = names.iter().any(|n| n == UNSYNCED_MARK);
        if marked || rec.cut_bytes > 0 {
            file.sync_data()
                .map_err(|e| LogError::io(&path, "fdatasync", e))?;
        }
        if marked {
            marked = fs.remove_file(&dir.join(UNSYNCED_MARK)).is_err();
        }
        debug_assert_eq!(
            segments.keys().next_back(),
            Some(&head),
            "the newest segment takes appends"
        );
        let log = Log::start_up(
            dir,
            config,
            fs,
            segments,
            first,
            file,
            path,
            len,
            file_end,
            preallocated,
            to_seal,
            marked,
            None,
            key,
        );
        lock(&log.shared.writer).name_unsynced = name_unsynced;
        Ok((log, rec))
    }

    #[allow(clippy::too_many_arguments)]
    fn start_up(
        dir: &Path,
        config: LogConfig,
        fs: Arc<dyn FileSystem>,
        segments: BTreeMap<u64, SegEntry>,
        first_segment: u64,
        file: Arc<dyn IoFile>,
        path: PathBuf,
        len: u64,
        file_end: u64,
        preallocated: bool,
        to_seal: Vec<u64>,
        marked: bool,
        follow: Option<follow::Follow>,
        key: Option<DirKey>,
    ) -> Log {
        let preallocates = preallocated && config.preallocates();
        let cache = LogCache::new(
            config
                .block_cache
                .clone()
                .unwrap_or_else(|| BlockCache::new(BLOCK_CACHE_BYTES)),
        );
        let head = segments
            .keys()
            .next_back()
            .copied()
            .unwrap_or(first_segment);
        // The zero region there is (made by `create_segment`, or found on open: after a crash,
        // or in a file of an older build, which kept it on close) counts as the last step.
        // None (a clean close gives it back): the next step is the first.
        let prealloc_step = file_end.saturating_sub(len).min(config.preallocate_bytes);
        let shared = Arc::new_cyclic(|this| Shared {
            this: this.clone(),
            dir: dir.to_path_buf(),
            fs,
            config,
            first_segment,
            segments: RwLock::new(segments),
            published: Mutex::new(Location {
                segment: head,
                offset: len,
            }),
            writer: Mutex::new(Writer {
                segment: head,
                file,
                path,
                written: len,
                flushed: len,
                buf: Vec::new(),
                synced: len,
                file_end,
                preallocates,
                prealloc_step,
                seq: 0,
                poisoned: None,
                marked,
                zero_filled: false,
                name_unsynced: false,
                name_sync: None,
            }),
            commit: Mutex::new(Commit::default()),
            commit_cv: Condvar::new(),
            cache,
            seal: Mutex::new(SealState::default()),
            seal_cv: Condvar::new(),
            written_seq: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            seal_when_closed: AtomicU64::new(0),
            follow: follow.map(Mutex::new),
        });
        for n in to_seal {
            shared.queue_seal(n);
        }
        // A read-only handle never gives zeros back, so it does not count as an open of the
        // directory that may change its files.
        let instance = match shared.follow {
            Some(_) => None,
            None => LogInstances::register(key),
        };
        Log { shared, instance }
    }

    /// Appends one atomic batch (at least one record) and returns each record's Location.
    /// With [`Durability::Sync`] it returns after fdatasync; concurrent callers share one sync.
    /// After a failed write or sync every further append fails until the log is reopened.
    pub fn append(&self, batch: &[Record<'_>]) -> Result<Vec<Location>, LogError> {
        self.shared.append(batch)
    }

    /// Makes everything appended so far durable (useful after a `NoSyncBulkImport`).
    pub fn sync(&self) -> Result<(), LogError> {
        if self.is_read_only() {
            // Nothing was written through it; what the writer wrote is the writer's to sync.
            return Ok(());
        }
        self.shared.sync()
    }

    /// Reads the record that starts at `at`.
    pub fn read(&self, at: Location) -> Result<OwnedRecord, LogError> {
        self.reader_taking(READ_ONE_BYTES, false)
            .read(at)
            .map(RecordRef::to_owned_record)
    }

    /// A reader for runs of records (history pages, scans of candidates). It reads in bulk:
    /// sealed blocks it decompresses enter the block cache as the first to go, so a long run
    /// does not push out the blocks other reads use.
    pub fn reader(&self) -> Reader<'_> {
        self.reader_taking(READ_WINDOW_BYTES, true)
    }

    /// A reader for runs of records that are likely read again soon (a search's first page,
    /// which a user refines or repeats): like [`Log::reader`], but the sealed blocks it
    /// decompresses enter the block cache as any other read's, not as the first to go.
    pub fn reader_keeping(&self) -> Reader<'_> {
        self.reader_taking(READ_WINDOW_BYTES, false)
    }

    /// A reader for one pass over much history (an export): like [`Log::reader`], but the
    /// sealed blocks it decompresses are read with `pread` and kept only while it reads them,
    /// neither in the block cache nor mapped, so the pass holds about one block of memory
    /// however much history it reads. Blocks already in the cache are used.
    pub fn streaming_reader(&self) -> Reader<'_> {
        Reader {
            log: self,
            cur: None,
            st: ReadState::streaming(),
        }
    }

    /// A reader whose active-segment reads take `ahead` bytes.
    fn reader_taking(&self, ahead: u64, bulk: bool) -> Reader<'_> {
        Reader {
            log: self,
            cur: None,
            st: ReadState::new(ahead, bulk),
        }
    }

    /// Iterates the records from `from` (a record start, or `end()`) to the end as it is now.
    /// Items: (location, record, is_last_of_its_batch). The iterator stops after an error.
    pub fn scan(&self, from: Location) -> Scan<'_> {
        self.scan_with(from, ReadState::new(READ_WINDOW_BYTES, true))
    }

    /// [`Log::scan`] reading sealed blocks as [`Log::streaming_reader`] does: for one pass
    /// over much history (a replay that rebuilds indexes), in about one block of memory.
    pub fn streaming_scan(&self, from: Location) -> Scan<'_> {
        self.scan_with(from, ReadState::streaming())
    }

    /// [`Log::scan`] for one short pass (a small log's replay at open): sealed blocks enter
    /// the block cache as the first to go, as [`Log::reader`]'s do, and the active segment is
    /// read with `pread` into a window, so the pass maps nothing. A map of the active segment
    /// and its unmap cost more than the one or two reads of a short pass, and the unmap, when
    /// the log closes, interrupts every core that runs one of the process's threads.
    pub fn short_scan(&self, from: Location) -> Scan<'_> {
        self.scan_with(
            from,
            ReadState {
                map_active: false,
                ..ReadState::new(READ_WINDOW_BYTES, true)
            },
        )
    }

    fn scan_with(&self, from: Location, st: ReadState) -> Scan<'_> {
        let end = self.end();
        let error = if from > end {
            Some(LogError::invalid(format!(
                "scan from {from:?} starts past the end {end:?}"
            )))
        } else if from.segment < self.shared.first_segment {
            Some(LogError::invalid(format!(
                "scan from {from:?} starts before the first segment {}",
                self.shared.first_segment
            )))
        } else {
            None
        };
        Scan {
            log: self,
            pos: from,
            end,
            cur: None,
            st,
            error,
            done: false,
        }
    }

    /// Location of the first record ever written (or where it will go).
    pub fn start(&self) -> Location {
        Location {
            segment: self.shared.first_segment,
            offset: HEADER_BYTES,
        }
    }

    /// The published end: where the next record will go.
    pub fn end(&self) -> Location {
        *lock(&self.shared.published)
    }

    /// Walks every checksum of every segment.
    pub fn verify(&self) -> Result<VerifyReport, LogError> {
        self.shared.verify(self.end())
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The size at which the active segment rolls over ([`LogConfig::segment_bytes_max`]).
    pub fn segment_bytes_max(&self) -> u64 {
        self.shared.config.segment_bytes_max
    }

    /// Bytes of sealed segment files this handle holds: the small ones it opened, read whole
    /// into memory (16 KiB at most each; a larger file's mapped pages are let go after its
    /// checks). For a caller that keeps many logs open within a memory budget.
    pub fn small_sealed_bytes(&self) -> u64 {
        read_lock(&self.shared.segments)
            .values()
            .map(|e| match &e.seg {
                Seg::Sealed(s) => s.held_bytes(),
                Seg::Active(_) => 0,
            })
            .sum()
    }

    /// Paths of sealed (immutable) segment files, oldest first.
    pub fn sealed_segment_paths(&self) -> Vec<PathBuf> {
        read_lock(&self.shared.segments)
            .values()
            .filter_map(|e| match &e.seg {
                Seg::Sealed(s) => Some(s.path.clone()),
                Seg::Active(_) => None,
            })
            .collect()
    }

    /// The segment numbers this handle holds, oldest first (dense): from [`Log::start`]'s to
    /// [`Log::end`]'s.
    pub fn segment_numbers(&self) -> std::ops::RangeInclusive<u64> {
        self.shared.first_segment..=self.end().segment
    }

    /// The logical length up to which segment `segment` may be read: its whole length for a
    /// finished segment (a sealed file's footer is read on first use), the published end for
    /// the newest. Only whole batches lie below it.
    pub fn segment_end(&self, segment: u64) -> Result<u64, LogError> {
        let end = self.end();
        if segment > end.segment {
            return Err(LogError::invalid(format!(
                "segment {segment} lies past the end {end:?}"
            )));
        }
        Ok(self.shared.segment_for(segment, end)?.1)
    }

    /// Copies the logical bytes `[offset, offset + buf.len())` of segment `segment` into
    /// `buf`, as the segment's logical stream has them (the frames, byte for byte, from an
    /// active file or decompressed from a sealed one). The range must lie in the records
    /// (`offset >= SEGMENT_HEADER_BYTES`) and below [`Log::segment_end`]. This is how a copy
    /// of the log elsewhere (a replica) takes whole batches without decoding them.
    pub fn read_logical(&self, segment: u64, offset: u64, buf: &mut [u8]) -> Result<(), LogError> {
        let end = self.end();
        let (seg, bound) = self.shared.segment_for(segment, end)?;
        let to = offset.checked_add(buf.len() as u64);
        if offset < HEADER_BYTES || to.is_none_or(|t| t > bound) {
            return Err(LogError::invalid(format!(
                "bytes {offset}..+{} of segment {segment} are not records below its end {bound}",
                buf.len()
            )));
        }
        let mut hint = BlockHint::new(true);
        self.shared.read_bytes(&seg, offset, buf, &mut hint)
    }

    /// True after a failed write or sync: appends fail until the log is reopened. One atomic
    /// load, no lock: callers may ask on every request.
    pub fn is_poisoned(&self) -> bool {
        self.shared.poisoned.load(Ordering::Acquire)
    }

    /// True when every byte appended so far is covered by a completed fdatasync and the log
    /// is not poisoned: a handle dropped now leaves nothing that a later open must sync.
    pub fn fully_synced(&self) -> bool {
        lock(&self.shared.writer).fully_synced()
    }

    /// Writes a new log in `dir` (absent or empty) holding `first` as its first batch, with
    /// no sync at all and no zero region: its bytes and names reach the disk when the file
    /// system writes them back, or with the first commit of a handle told to sync its names
    /// ([`Log::sync_names_at_first_commit`]). For a log whose content the caller can write
    /// again from a record of its own that is durable (an engine Session's `sessionCreated`,
    /// which its Root-log record stands for): after a crash its directory may be missing, empty
    /// or hold a segment whose create was torn (which opens as an empty log), and each of those
    /// must be taken as that content.
    pub fn write_unsynced(
        dir: &Path,
        config: &LogConfig,
        first: &[Record<'_>],
    ) -> Result<Vec<Location>, LogError> {
        check_config(config)?;
        let fs = config.file_system();
        let (frames, locations) = encode_first_batch(first)?;
        make_empty_dir(fs.as_ref(), dir)?;
        create_segment_unsynced(&*fs, dir, 0, &frames)?;
        Ok(locations)
    }

    /// Makes an empty log in `dir` (made when missing; it must be empty): its first segment
    /// holding its header only, with no sync and no zero region. For logs made ahead of
    /// their use and made durable together by the caller (one `syncfs` for many, see
    /// [`crate::sync_file_system`]); [`Log::write_first_unsynced`] then gives one its content.
    pub fn write_empty_unsynced(dir: &Path, config: &LogConfig) -> Result<(), LogError> {
        Log::write_unsynced(dir, config, &[]).map(drop)
    }

    /// Writes `first` as the first batch of the empty log in `dir` (as
    /// [`Log::write_empty_unsynced`] left it: a first segment of its header only), with no
    /// sync, like [`Log::write_unsynced`] but into a file whose name is already durable.
    /// `NotEmpty` when the segment holds anything past its header.
    pub fn write_first_unsynced(
        dir: &Path,
        config: &LogConfig,
        first: &[Record<'_>],
    ) -> Result<Vec<Location>, LogError> {
        check_config(config)?;
        let fs = config.file_system();
        let (frames, locations) = encode_first_batch(first)?;
        let path = dir.join(active_name(0));
        let f = fs
            .open_rw(&path)
            .map_err(|e| LogError::io(&path, "open", e))?;
        let len = f.len().map_err(|e| LogError::io(&path, "stat", e))?;
        if len != HEADER_BYTES {
            return Err(LogError::NotEmpty {
                path: dir.to_path_buf(),
            });
        }
        let mut head = [0u8; HEADER_BYTES as usize];
        read_exact_at(&*f, &mut head, 0).map_err(|e| LogError::io(&path, "read", e))?;
        check_header_versions(&path, &head, ACTIVE_FORMAT, ACTIVE_VERSION_OLDEST, 0)?;
        write_all_at(&*f, &frames, HEADER_BYTES).map_err(|e| LogError::io(&path, "write", e))?;
        Ok(locations)
    }

    /// Tells the log that its names may not be durable yet (it was written by
    /// [`Log::write_unsynced`], or a directory above it was renamed without a sync): the next
    /// commit (or roll) that makes records durable also calls `names`, which must make the
    /// log's directory and every name above it that a crash could lose durable (the caller
    /// knows which), before any of its records is acknowledged or published. A failure fails
    /// that commit, and the next one calls `names` again.
    pub fn sync_names_at_first_commit(&self, names: NameSync) {
        let mut w = lock(&self.shared.writer);
        w.name_unsynced = true;
        w.name_sync = Some(names);
    }

    /// For a poisoned log about to be dropped and opened again: cuts the newest segment back
    /// to the end of the last batch a completed fdatasync covered, and syncs the cut. After a
    /// failed fdatasync the kernel may keep the unwritten pages in the page cache as clean
    /// (and report no error again), so an open would read batches there that never reach the
    /// disk; none of them was acknowledged, so cutting them loses nothing promised and the
    /// open trusts only durable bytes. With `NoSyncBulkImport` it cuts nothing (appends were
    /// acknowledged before any sync). Refused (`InvalidArgument`) on a healthy log; the log
    /// stays poisoned either way.
    pub fn cut_unsynced(&self) -> Result<(), LogError> {
        if self.is_read_only() {
            return Err(LogError::invalid("a read-only log cuts nothing"));
        }
        self.shared.cut_unsynced()
    }

    /// Asks that the newest segment be sealed (compressed, docs/format.md "Sealing a closed
    /// log") once the last handle on this log is dropped, if it then holds at least
    /// `min_record_bytes` bytes of records and the log is healthy. For a log that is closed
    /// for a while (an idle Session): it then costs its compressed size on disk, and the next
    /// open starts a new segment. The seal runs in the background on the sealer threads; an
    /// open of the same directory in this process first cancels it (or waits for it when it
    /// has started), and [`settle_closed_seals`] waits for those under a directory.
    /// Returns whether the newest segment would be sealed if the log were closed now.
    pub fn seal_when_closed(&self, min_record_bytes: u64) -> bool {
        if self.is_read_only() {
            return false;
        }
        self.shared
            .seal_when_closed
            .store(min_record_bytes.max(1), Ordering::Release);
        self.instance.is_some() && self.shared.seal_wanted(&lock(&self.shared.writer))
    }

    /// Waits until every rolled segment has been sealed (or failed to), and returns the last
    /// sealing error, if any. Sealing runs in the background, on at most
    /// [`SEALER_THREADS_MAX`] threads shared by every log of the process, which exist only
    /// while there is sealing to do.
    pub fn wait_for_sealing(&self) -> Option<String> {
        let mut s = lock(&self.shared.seal);
        while s.pending > 0 {
            s = self
                .shared
                .seal_cv
                .wait(s)
                .unwrap_or_else(|p| p.into_inner());
        }
        s.error.clone()
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        if self.is_read_only() {
            // It wrote nothing and queued nothing: the files are the writer's.
            return;
        }
        let mut closed_seal = None;
        {
            let mut w = lock(&self.shared.writer);
            // A handle that wrote nothing since its last sync (one that only read) has nothing
            // to make durable.
            if self.shared.config.durability == Durability::NoSyncBulkImport
                && w.poisoned.is_none()
                && !w.fully_synced()
            {
                // Best effort: a caller who needs to know calls `sync()` first.
                if self.shared.flush(&mut w).is_ok()
                    && w.file.sync_data().is_ok()
                    && self.shared.sync_name(&mut w).is_ok()
                {
                    w.synced = w.flushed;
                }
            }
            self.shared.mark_left_unsynced(&mut w);
            if LogInstances::unregister(self.instance) {
                if w.marked && w.fully_synced() {
                    // Every byte this handle wrote is durable: the next open need not sync.
                    let _ = self
                        .shared
                        .fs
                        .remove_file(&self.shared.dir.join(UNSYNCED_MARK));
                }
                self.shared.give_back_zeros(&mut w);
                closed_seal = self.shared.closed_seal(&w, self.instance);
            }
        }
        // Every segment queued for sealing is sealed (or failed to) before the log is gone:
        // its directory is then left as this log last saw it.
        self.wait_for_sealing();
        if let Some(job) = closed_seal {
            push_seal_job(SealJob::Closed(job));
        }
    }
}

fn read_lock<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// Gives the sealed file `dst` the modification time of the active file `src` it was made
/// from: the time of the segment's last append, which listings show as a Session's last
/// activity when nothing better is known (readers beside the writer, an open after a crash).
/// Best effort: only a time is lost when it fails.
fn keep_modified_time(src: &Path, dst: &Path) {
    let Ok(t) = std::fs::metadata(src).and_then(|m| m.modified()) else {
        return;
    };
    if let Ok(f) = std::fs::File::options().write(true).open(dst) {
        let _ = f.set_modified(t);
    }
}

/// Seals segment `n`, whose logical bytes (from `path`, its active file) are `data`: checks
/// every frame, writes `n.sealed` (steps 1 and 2 of docs/format.md, "Sealing"), and returns it
/// opened and checked. The caller removes the active file (step 3).
fn write_sealed(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    path: &Path,
    n: u64,
    data: &[u8],
) -> Result<SealedSegment, LogError> {
    let w = walk(n, data);
    if let Some((at, reason)) = w.damage {
        return Err(LogError::corrupt(path, at, reason));
    }
    if w.good_end != data.len() as u64 {
        return Err(LogError::corrupt(
            path,
            w.good_end,
            "the segment ends inside a batch; only whole segments are sealed",
        ));
    }
    let bytes = sealed::build(n, data, &w)
        .map_err(|m| LogError::io(path, "compress", std::io::Error::other(m)))?;
    let dst = sealed::write(&**fs, dir, n, &bytes)?;
    keep_modified_time(path, &dst);
    SealedSegment::open(Arc::clone(fs), &dst, n)
}

/// True when a newest segment of at least a header's length holds no header and nothing but
/// zeros: a segment created without a sync (`create_segment_unsynced`) whose bytes never
/// reached the disk, though its name and length did. Reads the file only when its first bytes
/// are not the header.
/// True when the segment holds only zeros; `head` is its first [`HEADER_BYTES`], already read.
fn zeros_only(
    f: &dyn IoFile,
    path: &Path,
    len: u64,
    head: &[u8],
    header: &[u8],
) -> Result<bool, LogError> {
    if head == header || head.iter().any(|b| *b != 0) {
        return Ok(false);
    }
    Ok(read_all(f, path, len)?.iter().all(|b| *b == 0))
}

/// Recovers the newest segment: checks it (from `mark` on when that is proven to be a record
/// followed by a complete batch), cuts a torn tail (copy first). Returns the logical length,
/// the file length (greater when a zero region follows) and the segment's version. A tail
/// that would cut the record at `referenced` (which something durable refers to) is damage.
#[allow(clippy::too_many_arguments)]
fn recover_newest(
    fs: &dyn FileSystem,
    dir: &Path,
    n: u64,
    f: &dyn IoFile,
    path: &Path,
    rec: &mut Recovery,
    mark: Option<u64>,
    referenced: Option<u64>,
) -> Result<(u64, u64, u32), LogError> {
    let len = f.len().map_err(|e| LogError::io(path, "stat", e))?;
    if let Some(r) = referenced.filter(|r| *r >= len) {
        return Err(LogError::corrupt(
            path,
            len,
            format!(
                "the segment ends at offset {len}, but a durable index refers to a record at \
                 offset {r}: acknowledged bytes are missing"
            ),
        ));
    }
    let header = encode_header(ACTIVE_FORMAT, n);
    let mut head = [0u8; HEADER_BYTES as usize];
    if len >= HEADER_BYTES {
        read_exact_at(f, &mut head, 0).map_err(|e| LogError::io(path, "read", e))?;
    }
    if len < HEADER_BYTES
        || (referenced.is_none() && mark.is_none() && zeros_only(f, path, len, &head, &header)?)
    {
        let data = read_all(f, path, len.min(HEADER_BYTES))?;
        // A crash while the segment was being created: its header never became durable.
        let torn_create = data.iter().all(|b| *b == 0) || header.starts_with(&data);
        if !torn_create {
            check_header_versions(path, &data, ACTIVE_FORMAT, ACTIVE_VERSION_OLDEST, n)?;
        }
        cut_tail(fs, dir, n, f, path, &data, 0, rec)?;
        write_all_at(f, &header, 0).map_err(|e| LogError::io(path, "write", e))?;
        f.sync_data()
            .map_err(|e| LogError::io(path, "fdatasync", e))?;
        return Ok((HEADER_BYTES, HEADER_BYTES, ACTIVE_FORMAT.version));
    }
    let version = check_header_versions(path, &head, ACTIVE_FORMAT, ACTIVE_VERSION_OLDEST, n)?;
    let zeros = version >= ACTIVE_VERSION_PREALLOCATED;
    let resumed = match mark.filter(|m| (HEADER_BYTES..len).contains(m)) {
        Some(m) => {
            let data = read_range(f, path, m, len)?;
            let w = walk_at(n, &data, m);
            // At least one complete batch from the mark on: the frame at the mark is real
            // (both checksums bound to this offset) and `good_end` is a batch end.
            (w.batches > 0).then_some((m, data, w))
        }
        None => None,
    };
    let (base, data, w) = match resumed {
        Some(r) => {
            rec.resumed_from = Some(Location {
                segment: n,
                offset: r.0,
            });
            r
        }
        None => {
            let data = read_range(f, path, HEADER_BYTES, len)?;
            let w = walk_at(n, &data, HEADER_BYTES);
            (HEADER_BYTES, data, w)
        }
    };
    rec.tail_records += w.records;
    match judge_tail_at(n, &data, base, &w, zeros) {
        Tail::Clean => Ok((w.good_end, len, version)),
        Tail::Torn { cut, .. } if referenced.is_some_and(|r| r >= cut) => {
            let (bad, reason) = w.damage.unwrap_or((cut, "the segment ends early"));
            Err(LogError::corrupt(
                path,
                bad,
                format!(
                    "{reason}; a durable index refers to a record at offset {}, after this \
                     point, so these bytes had been acknowledged: this is damage, not a torn \
                     write",
                    referenced.unwrap_or(cut)
                ),
            ))
        }
        Tail::Torn { cut, copy_end } => {
            let tail = &data[(cut - base) as usize..(copy_end - base) as usize];
            cut_tail(fs, dir, n, f, path, tail, cut, rec)?;
            Ok((cut, cut, version))
        }
        Tail::Corrupt { offset, reason } => Err(LogError::corrupt(path, offset, reason)),
    }
}

/// Copies `tail` (the bytes from `cut` on worth keeping) beside the segment (synced), then
/// truncates the segment to `cut` and syncs it, so no append can land after bytes that a later
/// recovery would cut again.
#[allow(clippy::too_many_arguments)]
fn cut_tail(
    fs: &dyn FileSystem,
    dir: &Path,
    n: u64,
    f: &dyn IoFile,
    path: &Path,
    tail: &[u8],
    cut: u64,
    rec: &mut Recovery,
) -> Result<(), LogError> {
    if !tail.is_empty() {
        let copy = dir.join(cut_name(n, cut));
        match fs.remove_file(&copy) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io(&copy, "remove", e)),
        }
        let c = fs
            .create_new(&copy)
            .map_err(|e| LogError::io(&copy, "create", e))?;
        let mut bytes = Vec::with_capacity(CUT_HEADER_BYTES as usize + tail.len());
        bytes.extend_from_slice(&encode_cut_header(n, cut));
        bytes.extend_from_slice(tail);
        write_all_at(&*c, &bytes, 0).map_err(|e| LogError::io(&copy, "write", e))?;
        c.sync_data()
            .map_err(|e| LogError::io(&copy, "fdatasync", e))?;
        fs.sync_dir(dir)
            .map_err(|e| LogError::io(dir, "fsync directory", e))?;
        rec.cut_copy = Some(copy);
    }
    f.set_len(cut)
        .map_err(|e| LogError::io(path, "truncate", e))?;
    f.sync_data()
        .map_err(|e| LogError::io(path, "fdatasync", e))?;
    rec.cut_bytes += tail.len() as u64;
    Ok(())
}

/// What makes a log's names durable at its first commit, for a log whose directory (or one
/// above it) was made or renamed without a sync (see [`Log::sync_names_at_first_commit`]).
#[derive(Clone)]
pub struct NameSync(Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>);

impl NameSync {
    pub fn new(sync: impl Fn() -> std::io::Result<()> + Send + Sync + 'static) -> NameSync {
        NameSync(Arc::new(sync))
    }
}

impl fmt::Debug for NameSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NameSync")
    }
}

/// Niceness a background thread adds to its own (see [`background_thread`]).
pub const BACKGROUND_NICENESS: i32 = 10;

/// Lowers the calling thread's scheduling priority by [`BACKGROUND_NICENESS`], for work that
/// nobody waits for as it runs (sealing segments, writing derived files): on a busy machine
/// the threads that appends and reads wait for get the cores first, and this work takes
/// the time they leave. It still gets its share (the scheduler weighs niceness, it does not
/// starve). Best effort: where the priority cannot be changed, the thread runs as it is.
pub fn background_thread() {
    // `PRIO_PROCESS` with no pid is the calling thread on Linux.
    if let Ok(now) = rustix::process::getpriority_process(None) {
        let _ = rustix::process::setpriority_process(None, now + BACKGROUND_NICENESS);
    }
}

/// Segments waiting to be sealed, of every log of the process, and how many sealer threads
/// run. One mutex guards them all, so a job queued while the last thread decides to exit is
/// never lost: that thread exits only after seeing the queues empty under this lock, and a
/// queuer that then finds fewer than [`SEALER_THREADS_MAX`] threads starts one.
struct SealPool {
    /// Segments rolls finished, of open logs: sealed first (a log waits for them when
    /// dropped).
    rolled: VecDeque<(Arc<Shared>, u64)>,
    /// Closed logs' newest segments, oldest first (see [`ClosedSeal::deferral`]).
    closed: VecDeque<ClosedSeal>,
    /// How many of `closed` each directory has, so that an open of a log with none queued
    /// (a new Session's, say, while thousands of closed ones wait) does not walk the queue.
    closed_keys: BTreeMap<DirKey, usize>,
    threads: usize,
    /// Closed logs being sealed now (see [`Log::seal_when_closed`]).
    closing: Vec<(DirKey, PathBuf)>,
    /// Directories that [`settle_closed_seals`] waits for: their closed logs' seals are not
    /// deferred.
    hurry: Vec<PathBuf>,
}

/// A closed log's seal waits for a pause of at least this long in the commits of the
/// process, so that compressing idle logs does not take disk time from durable appends.
pub const CLOSED_SEAL_PAUSE: Duration = Duration::from_millis(20);
/// Longest a closed log's seal is deferred for want of such a pause.
pub const CLOSED_SEAL_DEFER_MAX: Duration = Duration::from_secs(30);

/// When the last commit of any log of the process completed its sync, in nanoseconds since
/// [`clock`]'s start.
static LAST_COMMIT: AtomicU64 = AtomicU64::new(0);
/// Commit syncs under way in the process: while any is, no pause has begun.
static COMMITS_SYNCING: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds since the first call in this process (a monotonic clock for [`LAST_COMMIT`]).
fn clock() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One segment to seal.
enum SealJob {
    /// A segment a roll finished, of a log that is open (it waits for the job when dropped).
    Rolled(Arc<Shared>, u64),
    /// The newest segment of a log whose last handle was dropped.
    Closed(ClosedSeal),
}

/// The newest segment of a closed log, to seal (see [`Log::seal_when_closed`]). It holds no
/// descriptor: a Root of thousands of Sessions closing some of them must not keep their files
/// open while they wait.
struct ClosedSeal {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    key: DirKey,
    segment: u64,
    /// The segment's logical length when the log was closed: its file must have exactly
    /// this length when the job runs, or nothing is done.
    len: u64,
    queued: Instant,
}

impl ClosedSeal {
    /// How much longer to wait before running: `None` once the process's commits paused
    /// for [`CLOSED_SEAL_PAUSE`], after [`CLOSED_SEAL_DEFER_MAX`], or while its directory
    /// is being settled.
    fn deferral(&self, hurry: &[PathBuf]) -> Option<Duration> {
        if hurry.iter().any(|h| self.dir.starts_with(h))
            || self.queued.elapsed() >= CLOSED_SEAL_DEFER_MAX
        {
            return None;
        }
        if COMMITS_SYNCING.load(Ordering::Acquire) > 0 {
            return Some(CLOSED_SEAL_PAUSE);
        }
        let idle =
            Duration::from_nanos(clock().saturating_sub(LAST_COMMIT.load(Ordering::Acquire)));
        CLOSED_SEAL_PAUSE.checked_sub(idle).filter(|d| !d.is_zero())
    }
}

impl SealPool {
    const fn new() -> SealPool {
        SealPool {
            rolled: VecDeque::new(),
            closed: VecDeque::new(),
            closed_keys: BTreeMap::new(),
            threads: 0,
            closing: Vec::new(),
            hurry: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.rolled.is_empty() && self.closed.is_empty()
    }

    fn queue_closed(&mut self, c: ClosedSeal) {
        *self.closed_keys.entry(c.key).or_default() += 1;
        self.closed.push_back(c);
    }

    /// Takes the closed log's seal at `i` out of the queue.
    fn take_closed(&mut self, i: usize) -> Option<ClosedSeal> {
        let c = self.closed.remove(i)?;
        uncount(&mut self.closed_keys, c.key);
        Some(c)
    }

    /// Removes the queued closed logs' seals that `drop` picks.
    fn unqueue_where(&mut self, mut drop: impl FnMut(&ClosedSeal) -> bool) {
        let (closed, keys) = (&mut self.closed, &mut self.closed_keys);
        closed.retain(|c| {
            let keep = !drop(c);
            if !keep {
                uncount(keys, c.key);
            }
            keep
        });
    }
}

fn uncount(keys: &mut BTreeMap<DirKey, usize>, key: DirKey) {
    if let Some(n) = keys.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            keys.remove(&key);
        }
    }
}

static SEAL_POOL: Mutex<SealPool> = Mutex::new(SealPool::new());

/// Signalled whenever a closed log's seal ends, a job is queued, or a settle begins.
static SEAL_POOL_CV: Condvar = Condvar::new();

/// Queues a job and starts a sealer thread when fewer than [`SEALER_THREADS_MAX`] run.
/// Returns the job when no thread runs and none can be started (the caller then leaves the
/// segment unsealed: the next open seals it, as after a crash).
fn push_seal_job(job: SealJob) -> Option<SealJob> {
    let mut pool = lock(&SEAL_POOL);
    let rolled = matches!(job, SealJob::Rolled(..));
    match job {
        SealJob::Rolled(shared, n) => pool.rolled.push_back((shared, n)),
        SealJob::Closed(c) => pool.queue_closed(c),
    }
    // A thread deferring a closed log's seal takes a rolled segment first.
    SEAL_POOL_CV.notify_all();
    if pool.threads >= SEALER_THREADS_MAX {
        // A running thread takes it when it is done with the jobs before it.
        return None;
    }
    let spawned = std::thread::Builder::new()
        .name("logbook-log-sealer".into())
        .spawn(sealer_loop);
    match spawned {
        Ok(_) => {
            pool.threads += 1;
            None
        }
        Err(_) if pool.threads == 0 && rolled => pool
            .rolled
            .pop_back()
            .map(|(shared, n)| SealJob::Rolled(shared, n)),
        Err(_) if pool.threads == 0 => {
            let last = pool.closed.len().checked_sub(1)?;
            pool.take_closed(last).map(SealJob::Closed)
        }
        Err(_) => None,
    }
}

/// Takes the next job: rolled segments first (an open log waits for them when dropped), then
/// closed logs' seals in order, each once the process's commits pause (see
/// [`ClosedSeal::deferral`]). `None` when the queue is empty.
fn next_seal_job() -> Option<SealJob> {
    let mut pool = lock(&SEAL_POOL);
    loop {
        if let Some((shared, n)) = pool.rolled.pop_front() {
            return Some(SealJob::Rolled(shared, n));
        }
        // The oldest closed log's seal waits least (the pause is the process's, the time
        // limit runs from queueing); one being settled goes at once, wherever it is queued.
        let first_wait = pool.closed.front()?.deferral(&pool.hurry);
        let ready = match first_wait {
            None => Some(0),
            Some(_) if pool.hurry.is_empty() => None,
            Some(_) => pool
                .closed
                .iter()
                .position(|c| c.deferral(&pool.hurry).is_none()),
        };
        match ready.and_then(|i| pool.take_closed(i)) {
            Some(c) => {
                let running = (c.key, c.dir.clone());
                pool.closing.push(running);
                return Some(SealJob::Closed(c));
            }
            None => {
                let d = first_wait.unwrap_or(CLOSED_SEAL_PAUSE);
                pool = SEAL_POOL_CV
                    .wait_timeout(pool, d)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
    }
}

/// A sealer thread: seals queued segments (see [`next_seal_job`]) and exits when none is
/// left.
fn sealer_loop() {
    background_thread();
    loop {
        let Some(job) = next_seal_job() else {
            let mut pool = lock(&SEAL_POOL);
            if pool.is_empty() {
                pool.threads -= 1;
                return;
            }
            continue;
        };
        match job {
            SealJob::Rolled(shared, n) => {
                // A panic must not take the thread's other jobs (other logs' seals) with it,
                // nor leave `pending` counting a seal nobody runs (`wait_for_sealing` and drop
                // wait on it).
                let r = std::panic::catch_unwind(AssertUnwindSafe(|| shared.seal_segment(n)));
                let mut s = lock(&shared.seal);
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => s.error = Some(e.to_string()),
                    Err(_) => {
                        s.error = Some(format!(
                            "sealing segment {n} panicked; it stays unsealed and is sealed on the next open"
                        ))
                    }
                }
                s.pending -= 1;
                shared.seal_cv.notify_all();
            }
            SealJob::Closed(c) => {
                // Best effort: a closed log whose seal fails (or is not done) is as it was
                // left, and its newest segment stays active.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| c.run()));
                let mut pool = lock(&SEAL_POOL);
                if let Some(i) = pool.closing.iter().position(|(k, _)| *k == c.key) {
                    pool.closing.swap_remove(i);
                }
                SEAL_POOL_CV.notify_all();
            }
        }
    }
}

/// Before a log directory is opened: cancels a queued seal of it as a closed log, or waits
/// for one that has started, so that the open finds the directory as the seal leaves it.
fn settle_closed_seal(key: DirKey) {
    let mut pool = lock(&SEAL_POOL);
    if pool.closed_keys.contains_key(&key) {
        pool.unqueue_where(|c| c.key == key);
    }
    while pool.closing.iter().any(|(k, _)| *k == key) {
        pool = SEAL_POOL_CV.wait(pool).unwrap_or_else(|p| p.into_inner());
    }
}

/// Waits until no closed log under `dir` waits to be sealed or is being sealed: for at most
/// `wait_max` while seals are queued, then the queued ones are cancelled (their logs stay as
/// they were closed) and only those already started are waited for. A process that hands a
/// directory tree over to another (the engine releasing a Root's lock) calls it first, so no
/// seal of this process touches the tree afterwards.
pub fn settle_closed_seals(dir: &Path, wait_max: Duration) {
    let under = |d: &Path| d.starts_with(dir);
    let mut pool = lock(&SEAL_POOL);
    let pending = |pool: &SealPool| {
        pool.closed.iter().any(|c| under(&c.dir)) || pool.closing.iter().any(|(_, d)| under(d))
    };
    if !pending(&pool) {
        // The usual case (a Root closed with no seal of its own left): no clock, no wake-up.
        return;
    }
    let deadline = Instant::now() + wait_max;
    pool.hurry.push(dir.to_path_buf());
    SEAL_POOL_CV.notify_all();
    loop {
        let queued = pool.closed.iter().any(|c| under(&c.dir));
        let running = pool.closing.iter().any(|(_, d)| under(d));
        if !queued && !running {
            if let Some(i) = pool.hurry.iter().position(|h| h == dir) {
                pool.hurry.swap_remove(i);
            }
            return;
        }
        let now = Instant::now();
        if queued && now >= deadline {
            pool.unqueue_where(|c| under(&c.dir));
            continue;
        }
        pool = if queued {
            SEAL_POOL_CV
                .wait_timeout(pool, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0
        } else {
            SEAL_POOL_CV.wait(pool).unwrap_or_else(|p| p.into_inner())
        };
    }
}

impl ClosedSeal {
    /// Seals the segment as a roll's seal does (steps 1-3 of docs/format.md), if the
    /// directory is still the one closed and its newest segment still ends where the log
    /// left it; otherwise does nothing.
    fn run(&self) -> Result<(), LogError> {
        if dir_key(&self.dir) != Some(self.key) {
            return Ok(());
        }
        let names = self
            .fs
            .list_dir(&self.dir)
            .map_err(|e| LogError::io(&self.dir, "list directory", e))?;
        let newest = names
            .iter()
            .filter_map(|n| match parse_name(n) {
                Some(FileRole::Active(n) | FileRole::Sealed(n)) => Some(n),
                _ => None,
            })
            .max();
        if newest != Some(self.segment) || names.iter().any(|n| *n == sealed_name(self.segment)) {
            return Ok(());
        }
        let path = self.dir.join(active_name(self.segment));
        let f = self
            .fs
            .open_ro(&path)
            .map_err(|e| LogError::io(&path, "open", e))?;
        if f.len().map_err(|e| LogError::io(&path, "stat", e))? != self.len {
            return Ok(());
        }
        let data = read_all(&*f, &path, self.len)?;
        drop(f);
        check_header_versions(
            &path,
            &data,
            ACTIVE_FORMAT,
            ACTIVE_VERSION_OLDEST,
            self.segment,
        )?;
        // Checked before the active copy goes, as an open that finds both files checks it.
        write_sealed(&self.fs, &self.dir, &path, self.segment, &data)?;
        // Not synced, as for a roll's seal.
        self.fs
            .remove_file(&path)
            .map_err(|e| LogError::io(&path, "remove", e))
    }
}

impl Shared {
    /// Queues segment `n` (finished, synced) for sealing in the background.
    fn queue_seal(&self, n: u64) {
        let Some(this) = self.this.upgrade() else {
            // Only while the last handle is being dropped, when nothing rolls.
            return;
        };
        lock(&self.seal).pending += 1;
        if push_seal_job(SealJob::Rolled(this, n)).is_some() {
            // No thread can run it: the segment stays unsealed and is sealed on the next
            // open, as after a crash.
            lock(&self.seal).pending -= 1;
            self.seal_cv.notify_all();
        }
    }

    /// Syncs the directory when the current segment's name is not durable yet (see
    /// `Writer::name_unsynced`); called after a sync that made records of it durable.
    fn sync_name(&self, w: &mut Writer) -> Result<(), LogError> {
        if w.name_unsynced {
            self.sync_names(w.name_sync.as_ref())
                .map_err(|e| LogError::io(&self.dir, "fsync directory", e))?;
            w.name_unsynced = false;
            w.name_sync = None;
        }
        Ok(())
    }

    /// Makes the log's names durable: `names` when the owner gave one, else a sync of the
    /// log's directory.
    fn sync_names(&self, names: Option<&NameSync>) -> std::io::Result<()> {
        match names {
            Some(names) => (names.0)(),
            None => self.fs.sync_dir(&self.dir),
        }
    }

    /// True when a seal at close was asked for ([`Log::seal_when_closed`]) and the newest
    /// segment holds enough records for it, in a healthy log.
    fn seal_wanted(&self, w: &Writer) -> bool {
        let min = self.seal_when_closed.load(Ordering::Acquire);
        min > 0 && w.written.saturating_sub(HEADER_BYTES) >= min && w.poisoned.is_none()
    }

    /// The seal of the newest segment that the last handle's drop queues, when one is wanted
    /// and the segment can be sealed as it is: nothing buffered, no zeros after the records.
    fn closed_seal(&self, w: &Writer, instance: Option<(DirKey, u64)>) -> Option<ClosedSeal> {
        let (key, _) = instance?;
        (self.seal_wanted(w) && w.buf.is_empty() && w.file_end == w.flushed).then(|| ClosedSeal {
            fs: Arc::clone(&self.fs),
            dir: self.dir.clone(),
            key,
            segment: w.segment,
            len: w.flushed,
            queued: Instant::now(),
        })
    }

    /// Gives the unused zero region of the newest segment back to the file system (the log is
    /// being dropped): the file ends at its last batch, which recovery takes as clean, as it
    /// takes zeros after it. Not synced, and best effort: a crash before the truncation
    /// reaches the disk leaves the zeros, which are clean too. A poisoned log is left as it is
    /// (its tail is for the next open, after `cut_unsynced`, to judge).
    fn give_back_zeros(&self, w: &mut Writer) {
        // Also when `file_end == flushed` after a zero-fill: one that failed half way (a full
        // disk) may have left zeros past `file_end`. A handle that never zero-filled and found
        // none (a log opened to be read) has nothing to give back, and skips the syscall.
        if !w.preallocates || w.poisoned.is_some() || !w.buf.is_empty() {
            return;
        }
        if w.file_end == w.flushed && !w.zero_filled {
            return;
        }
        // (`IoFile::set_len` keeps the file's time: giving zeros back is no activity.)
        if w.file.set_len(w.flushed).is_ok() {
            w.file_end = w.flushed;
        }
    }

    fn poison(&self, w: &mut Writer, e: &LogError) {
        if w.poisoned.is_none() {
            w.poisoned = Some(e.to_string());
        }
        self.poisoned.store(true, Ordering::Release);
        // A handle opened again while this one lives must sync what this one left.
        self.mark_left_unsynced(w);
    }

    /// Creates this log's own `unsynced` mark (`mknod`, not `open`: an append must not need
    /// a descriptor the Session does not hold already, as a Root under a low descriptor limit
    /// keeps its Sessions open).
    fn make_mark(&self) -> Result<(), LogError> {
        crate::mark::make_mark_file(&*self.fs, &self.dir.join(UNSYNCED_MARK))
    }

    /// Under a group mark, a handle that leaves bytes no fdatasync covered (poisoned, or
    /// dropped so) marks its log itself, so a later open syncs it even after the group mark
    /// is gone; when that fails, the group mark is kept on disk.
    fn mark_left_unsynced(&self, w: &mut Writer) {
        let Some(group) = &self.config.group_mark else {
            return;
        };
        if w.marked || (w.poisoned.is_none() && w.fully_synced()) {
            return;
        }
        match self.make_mark() {
            Ok(()) => w.marked = true,
            Err(_) => group.keep(),
        }
    }

    fn cut_unsynced(&self) -> Result<(), LogError> {
        let mut w = lock(&self.writer);
        if w.poisoned.is_none() {
            return Err(LogError::invalid(
                "cut_unsynced is for a poisoned log; this one takes appends",
            ));
        }
        if self.config.durability != Durability::Sync {
            // Bulk import acknowledged its appends before any sync: cutting to the last sync
            // would drop acknowledged ones, and it promises nothing across a failure anyway.
            return Ok(());
        }
        let keep = w.synced;
        w.buf.clear();
        let r = w
            .file
            .set_len(keep)
            .and_then(|()| w.file.sync_data())
            .map_err(|e| LogError::io(&w.path, "cut the unsynced tail", e));
        if r.is_ok() {
            w.written = keep;
            w.flushed = keep;
            w.file_end = keep;
        }
        r
    }

    fn append(&self, batch: &[Record<'_>]) -> Result<Vec<Location>, LogError> {
        if self.follow.is_some() {
            return Err(LogError::invalid(format!(
                "the log at {} is open read-only",
                self.dir.display()
            )));
        }
        if batch.is_empty() {
            return Err(LogError::invalid("a batch needs at least one record"));
        }
        let batch_len = checked_batch_len(batch)?;
        let mut w = lock(&self.writer);
        if let Some(cause) = &w.poisoned {
            return Err(LogError::Poisoned {
                cause: cause.clone(),
            });
        }
        if w.written > HEADER_BYTES && w.written + batch_len > self.config.segment_bytes_max {
            if let Err(e) = self.roll(&mut w) {
                self.poison(&mut w, &e);
                return Err(e);
            }
        }
        self.ensure_room(&mut w, batch_len)?;
        let mark = match self.config.durability {
            Durability::Sync => w.synced,
            Durability::NoSyncBulkImport => w.written,
        };
        let segment = w.segment;
        let mut locations = Vec::with_capacity(batch.len());
        let mut off = w.written;
        for (i, r) in batch.iter().enumerate() {
            locations.push(Location {
                segment,
                offset: off,
            });
            encode_frame(
                &mut w.buf,
                segment,
                off,
                r.kind,
                i + 1 == batch.len(),
                mark,
                r.payload,
            );
            off += FRAME_HEADER_BYTES + r.payload.len() as u64;
        }
        w.written = off;
        let end = Location {
            segment,
            offset: off,
        };
        match self.config.durability {
            Durability::NoSyncBulkImport => {
                if w.buf.len() >= WRITE_BUFFER_BYTES {
                    if let Err(e) = self.flush(&mut w) {
                        self.poison(&mut w, &e);
                        return Err(e);
                    }
                }
                self.publish(end);
                Ok(locations)
            }
            Durability::Sync => {
                if let Err(e) = self.flush(&mut w) {
                    self.poison(&mut w, &e);
                    return Err(e);
                }
                w.seq += 1;
                let mine = w.seq;
                self.written_seq.store(mine, Ordering::Release);
                drop(w);
                self.wait_durable(mine)?;
                Ok(locations)
            }
        }
    }

    /// Group commit: the first waiter becomes the leader and syncs for everyone who wrote before
    /// it took its snapshot; the others wait for a leader whose snapshot covers them.
    fn wait_durable(&self, mine: u64) -> Result<(), LogError> {
        let mut c = lock(&self.commit);
        loop {
            if c.synced_seq >= mine {
                return Ok(());
            }
            if let Some(cause) = &c.failed {
                return Err(LogError::Poisoned {
                    cause: cause.clone(),
                });
            }
            if c.leader {
                c = self.commit_cv.wait(c).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            c.leader = true;
            let (group, last_sync, synced) = (c.last_group, c.last_sync, c.synced_seq);
            drop(c);
            if group > 1 {
                let until = Instant::now() + (last_sync / 4).min(GROUP_COMMIT_GATHER_MAX);
                while self.written_seq.load(Ordering::Acquire) < synced + group
                    && Instant::now() < until
                {
                    std::thread::yield_now();
                }
            }
            let sync_started = Instant::now();
            let (file, path, seq, segment, written, name_unsynced) = {
                let w = lock(&self.writer);
                (
                    Arc::clone(&w.file),
                    w.path.clone(),
                    w.seq,
                    w.segment,
                    w.flushed,
                    w.name_unsynced.then(|| w.name_sync.clone()),
                )
            };
            COMMITS_SYNCING.fetch_add(1, Ordering::AcqRel);
            let mut r = file.sync_data();
            if let (Ok(()), Some(names)) = (&r, &name_unsynced) {
                r = self.sync_names(names.as_ref());
            }
            let name_unsynced = name_unsynced.is_some();
            LAST_COMMIT.store(clock(), Ordering::Release);
            COMMITS_SYNCING.fetch_sub(1, Ordering::AcqRel);
            {
                let mut w = lock(&self.writer);
                match &r {
                    Ok(()) if w.segment == segment => {
                        w.synced = w.synced.max(written);
                        if name_unsynced {
                            w.name_unsynced = false;
                            w.name_sync = None;
                        }
                    }
                    Ok(()) => {}
                    Err(e) => {
                        let err = LogError::io(
                            &path,
                            "fdatasync",
                            std::io::Error::new(e.kind(), e.to_string()),
                        );
                        self.poison(&mut w, &err);
                    }
                }
            }
            if r.is_ok() {
                self.publish(Location {
                    segment,
                    offset: written,
                });
            }
            c = lock(&self.commit);
            c.leader = false;
            match r {
                Ok(()) => {
                    c.last_group = seq.saturating_sub(c.synced_seq);
                    c.last_sync = sync_started.elapsed();
                    c.synced_seq = c.synced_seq.max(seq);
                }
                Err(e) => {
                    let msg = format!("fdatasync of {} failed: {e}", path.display());
                    c.failed.get_or_insert(msg);
                }
            }
            self.commit_cv.notify_all();
        }
    }

    fn publish(&self, loc: Location) {
        let mut p = lock(&self.published);
        if loc > *p {
            *p = loc;
        }
    }

    /// Makes sure the next `batch_len` bytes land in the preallocated zero region, zero-filling
    /// the next chunk when they would not. A failed zero-fill write is reported
    /// and changes nothing (the bytes after the last frame are zeros or absent either way), so
    /// it does not poison the log; a failed fdatasync does, as everywhere.
    fn ensure_room(&self, w: &mut Writer, batch_len: u64) -> Result<(), LogError> {
        let needed = w.written + batch_len;
        if !w.preallocates || needed <= w.file_end {
            return Ok(());
        }
        if w.seq == 0 && w.file_end <= w.written {
            // A handle's first batch finds no zeros (the log was closed, which gave them
            // back): the batch extends the file, a journal commit either way. Zeros written
            // now would be written, synced and given back again by a handle that appends once
            // and closes (a host writing to many Sessions in turn); the region starts with
            // the second batch, which shows the log is being written to.
            return Ok(());
        }
        let step = self.config.prealloc_next(w.prealloc_step);
        let target = self.config.prealloc_target(needed, step);
        if target <= needed {
            // Near the segment's size limit: the frames themselves extend the file.
            return Ok(());
        }
        debug_assert_eq!(w.flushed, w.written, "Sync mode flushes every batch");
        // Not synced here: the batch that needs the room is written next and its commit's
        // fdatasync makes the zeros, the new length and the batch durable at once (one sync
        // per extension instead of two). Until then nothing past `synced` was promised, and
        // recovery judges whatever a crash leaves there as it would any unsynced tail.
        w.zero_filled = true;
        zero_fill(&*w.file, w.file_end.max(w.flushed), target)
            .map_err(|e| LogError::io(&w.path, "preallocate (zero-fill)", e))?;
        w.file_end = target;
        w.prealloc_step = step;
        Ok(())
    }

    fn flush(&self, w: &mut Writer) -> Result<(), LogError> {
        if w.buf.is_empty() {
            return Ok(());
        }
        if !w.marked {
            // Before the first byte that no fdatasync covers: a later open sees the mark and
            // syncs (see `open_inner`). Not synced itself: only a killed process leaves bytes
            // in the page cache alone, and then the mark is there as well. A group mark held
            // while this log is open stands for it (made by the first write under it).
            match &self.config.group_mark {
                Some(group) => group.ensure()?,
                None => {
                    self.make_mark()?;
                    w.marked = true;
                }
            }
        }
        write_all_at(&*w.file, &w.buf, w.flushed).map_err(|e| LogError::io(&w.path, "write", e))?;
        w.flushed += w.buf.len() as u64;
        w.file_end = w.file_end.max(w.flushed);
        if w.buf.capacity() > WRITE_BUFFER_KEEP_BYTES {
            w.buf = Vec::new();
        } else {
            w.buf.clear();
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), LogError> {
        let mut w = lock(&self.writer);
        if let Some(cause) = &w.poisoned {
            return Err(LogError::Poisoned {
                cause: cause.clone(),
            });
        }
        let r = self.flush(&mut w).and_then(|()| {
            if w.synced >= w.flushed {
                // Every byte was covered by a completed fdatasync already (`Sync` mode after
                // its commits): nothing to wait for.
                return Ok(());
            }
            w.file
                .sync_data()
                .map_err(|e| LogError::io(&w.path, "fdatasync", e))?;
            self.sync_name(&mut w)
        });
        match r {
            Ok(()) => {
                w.synced = w.flushed;
                Ok(())
            }
            Err(e) => {
                self.poison(&mut w, &e);
                Err(e)
            }
        }
    }

    /// Finishes the current segment (flushed and synced, in every durability mode, so only the
    /// newest segment can ever be torn) and starts the next one.
    fn roll(&self, w: &mut Writer) -> Result<(), LogError> {
        self.flush(w)?;
        if w.file_end > w.flushed {
            // Only the newest segment may end in zeros; the truncation is synced below,
            // before the next segment exists.
            w.file
                .set_len(w.flushed)
                .map_err(|e| LogError::io(&w.path, "truncate", e))?;
            w.file_end = w.flushed;
        }
        w.file
            .sync_data()
            .map_err(|e| LogError::io(&w.path, "fdatasync", e))?;
        // The old segment's records are durable only once its name (and the directories
        // above, for a log written unsynced) is.
        self.sync_name(w)?;
        let old = w.segment;
        let old_len = w.written;
        let new = old
            .checked_add(1)
            .ok_or_else(|| LogError::invalid("segment numbers exhausted"))?;
        // A log that rolls is busy: the new segment starts with the step the old one reached.
        let step = w.prealloc_step.max(self.config.prealloc_first());
        let (file, path, file_end) = create_segment(&*self.fs, &self.dir, new, &self.config, step)?;
        {
            let mut m = write_lock(&self.segments);
            if let Some(e) = m.get_mut(&old) {
                e.len = Some(old_len);
            }
            m.insert(
                new,
                SegEntry {
                    seg: Seg::active(&file, &path, &self.config),
                    len: None,
                },
            );
        }
        w.segment = new;
        w.file = file;
        w.path = path;
        w.written = HEADER_BYTES;
        w.flushed = HEADER_BYTES;
        w.synced = HEADER_BYTES;
        w.file_end = file_end;
        w.preallocates = self.config.preallocates();
        w.name_unsynced = false;
        // Everything written so far is durable now: publish it, then release its waiters.
        self.publish(Location {
            segment: new,
            offset: HEADER_BYTES,
        });
        {
            let mut c = lock(&self.commit);
            c.synced_seq = c.synced_seq.max(w.seq);
            self.commit_cv.notify_all();
        }
        self.queue_seal(old);
        Ok(())
    }

    /// The segment holding `segment` and the bound up to which it may be read.
    fn segment_for(&self, segment: u64, end: Location) -> Result<(Seg, u64), LogError> {
        let (seg, len) = {
            let m = read_lock(&self.segments);
            let Some(e) = m.get(&segment) else {
                return Err(LogError::invalid(format!(
                    "segment {segment} is not part of the log"
                )));
            };
            (e.seg.clone(), e.len)
        };
        // Outside the lock: a sealed segment's first use opens and checks its file.
        let bound = Self::bound(&seg, len, segment, end)?;
        Ok((seg, bound))
    }

    /// The bound up to which segment `n` may be read.
    fn bound(seg: &Seg, len: Option<u64>, n: u64, end: Location) -> Result<u64, LogError> {
        Ok(if n == end.segment {
            end.offset
        } else {
            match (seg, len) {
                (Seg::Sealed(s), _) => s.logical_len()?,
                (Seg::Active(_), Some(l)) => l,
                (Seg::Active(_), None) => end.offset,
            }
        })
    }

    fn read_bytes(
        &self,
        seg: &Seg,
        offset: u64,
        buf: &mut [u8],
        hint: &mut BlockHint,
    ) -> Result<(), LogError> {
        match seg {
            Seg::Sealed(s) => s.read(offset, buf, &self.cache, hint),
            Seg::Active(a) => match read_exact_at(&*a.file, buf, offset) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    // Published but still in the writer's buffer (NoSyncBulkImport): flush it.
                    {
                        let mut w = lock(&self.writer);
                        if let Some(cause) = &w.poisoned {
                            // The buffer's write failed once; writing it now would be a retry.
                            return Err(LogError::Poisoned {
                                cause: cause.clone(),
                            });
                        }
                        if let Err(e) = self.flush(&mut w) {
                            self.poison(&mut w, &e);
                            return Err(e);
                        }
                    }
                    read_exact_at(&*a.file, buf, offset)
                        .map_err(|e| LogError::io(&a.path, "read", e))
                }
                Err(e) => Err(LogError::io(&a.path, "read", e)),
            },
        }
    }

    fn seg_path(seg: &Seg) -> &Path {
        match seg {
            Seg::Active(a) => &a.path,
            Seg::Sealed(s) => &s.path,
        }
    }

    /// Reads and checks the record at `offset`: kind, end-of-batch flag, the offset of the
    /// next frame and the payload, borrowed from `st` (its window of active-segment bytes,
    /// the sealed block it holds, or its scratch buffer when the record spans blocks).
    fn read_record<'s>(
        &self,
        seg: &'s Seg,
        segment: u64,
        offset: u64,
        bound: u64,
        st: &'s mut ReadState,
    ) -> Result<Frame<'s>, LogError> {
        let path = Self::seg_path(seg);
        if offset < HEADER_BYTES || offset.saturating_add(FRAME_HEADER_BYTES) > bound {
            return Err(LogError::invalid(format!(
                "no record starts at offset {offset} of segment {segment} (published up to {bound})"
            )));
        }
        let mut h = [0u8; FRAME_HEADER_BYTES as usize];
        match seg {
            Seg::Sealed(_) => self.read_bytes(seg, offset, &mut h, &mut st.hint)?,
            // A streaming or short reader reads the active segment with `pread` (its window),
            // so its pass leaves no map of it in the process.
            Seg::Active(a) => match st
                .map_active
                .then(|| a.mapped(offset, offset + FRAME_HEADER_BYTES))
                .flatten()
            {
                Some(bytes) => h.copy_from_slice(bytes),
                None => {
                    // One read takes the header and the records after it (every byte read is
                    // below `bound`, so published and never rewritten).
                    let n = (bound - offset).min(st.ahead);
                    self.window_over(seg, segment, offset, FRAME_HEADER_BYTES, n, &mut st.window)?;
                    h.copy_from_slice(st.window.get(offset, FRAME_HEADER_BYTES));
                }
            },
        }
        let (fh, check) = decode_frame_header_check(&h, segment, offset).map_err(|_| {
            LogError::corrupt(
                path,
                offset,
                "frame header checksum mismatch (damaged, or no record starts here)",
            )
        })?;
        let end = offset + fh.frame_len();
        if end > bound {
            return Err(LogError::corrupt(
                path,
                offset,
                format!(
                    "record of {} bytes runs past the published end {bound}",
                    fh.len
                ),
            ));
        }
        let at = offset + FRAME_HEADER_BYTES;
        let len = u64::from(fh.len);
        let payload: &[u8] = match seg {
            Seg::Sealed(s) => {
                s.slice(at, len as usize, &self.cache, &mut st.hint, &mut st.scratch)?
            }
            Seg::Active(a) => match st.map_active.then(|| a.mapped(at, at + len)).flatten() {
                Some(bytes) => bytes,
                None => {
                    let n = fh.frame_len().max((bound - offset).min(st.ahead));
                    self.window_over(seg, segment, offset, fh.frame_len(), n, &mut st.window)?;
                    st.window.get(at, len)
                }
            },
        };
        if !check.matches(payload) {
            return Err(LogError::corrupt(path, offset, "record checksum mismatch"));
        }
        Ok(Frame {
            record: RecordRef {
                kind: fh.kind,
                payload,
            },
            end_of_batch: fh.end_of_batch,
            next: end,
        })
    }

    /// Makes `window` hold active-segment bytes `[offset, offset + need)`, reading
    /// `[offset, offset + fill)` (`fill >= need`, all published) when it does not yet.
    fn window_over(
        &self,
        seg: &Seg,
        segment: u64,
        offset: u64,
        need: u64,
        fill: u64,
        window: &mut Window,
    ) -> Result<(), LogError> {
        if window.covers(segment, offset, need) {
            return Ok(());
        }
        window.segment = segment;
        window.start = offset;
        // Every byte is overwritten by the read: only growth needs filling.
        window.bytes.truncate(fill as usize);
        window.bytes.resize(fill as usize, 0);
        let read = self.read_bytes(seg, offset, &mut window.bytes, &mut BlockHint::default());
        if read.is_err() {
            window.bytes.clear();
        }
        read
    }

    /// Seals a finished segment (steps 1-3 of docs/format.md) and switches readers to it.
    fn seal_segment(&self, n: u64) -> Result<(), LogError> {
        let (file, path, len) = {
            let m = read_lock(&self.segments);
            match m.get(&n) {
                Some(SegEntry {
                    seg: Seg::Active(a),
                    len: Some(l),
                }) => (Arc::clone(&a.file), a.path.clone(), *l),
                _ => return Ok(()),
            }
        };
        let data = read_all(&*file, &path, len)?;
        let s = write_sealed(&self.fs, &self.dir, &path, n, &data)?;
        write_lock(&self.segments).insert(
            n,
            SegEntry {
                seg: Seg::Sealed(Arc::new(s)),
                len: None,
            },
        );
        self.cache.forget_segment(n);
        // Not synced: should the removal be lost, an open finds both files and removes the
        // active copy once the sealed one checks out.
        self.fs
            .remove_file(&path)
            .map_err(|e| LogError::io(&path, "remove", e))
    }

    fn verify(&self, end: Location) -> Result<VerifyReport, LogError> {
        let segs: Vec<(u64, SegEntry)> = read_lock(&self.segments)
            .iter()
            .map(|(n, e)| (*n, e.clone()))
            .collect();
        let mut report = VerifyReport::default();
        for (n, e) in segs {
            if n > end.segment {
                break;
            }
            let bound = Self::bound(&e.seg, e.len, n, end)?;
            let path = Self::seg_path(&e.seg).to_path_buf();
            let data = match &e.seg {
                Seg::Active(a) => {
                    let mut data = vec![0u8; bound as usize];
                    read_exact_at(&*a.file, &mut data[..HEADER_BYTES as usize], 0)
                        .map_err(|e| LogError::io(&path, "read", e))?;
                    check_header_versions(&path, &data, ACTIVE_FORMAT, ACTIVE_VERSION_OLDEST, n)?;
                    if bound > HEADER_BYTES {
                        self.read_bytes(
                            &e.seg,
                            HEADER_BYTES,
                            &mut data[HEADER_BYTES as usize..],
                            &mut BlockHint::default(),
                        )?;
                    }
                    data
                }
                Seg::Sealed(s) => {
                    let o = s.opened()?;
                    // The logical header is not stored in a sealed file; the frames do not need it.
                    let mut data = Vec::with_capacity(o.logical_len() as usize);
                    data.extend_from_slice(&encode_header(ACTIVE_FORMAT, n));
                    for i in 0..o.blocks() {
                        data.extend_from_slice(&s.decompress_block(o, i)?);
                        report.blocks += 1;
                    }
                    data
                }
            };
            let w = walk(n, &data);
            if let Some((at, reason)) = w.damage {
                return Err(LogError::corrupt(&path, at, reason));
            }
            if let Seg::Sealed(s) = &e.seg {
                let f = &s.opened()?.footer;
                if f.records != w.records
                    || f.first_record != w.first_record.unwrap_or(f.logical_len)
                    || f.last_record != w.last_record.unwrap_or(f.logical_len)
                {
                    return Err(LogError::corrupt(
                        &path,
                        f.table_offset,
                        format!(
                            "footer says {} records, the blocks hold {}",
                            f.records, w.records
                        ),
                    ));
                }
            }
            report.segments += 1;
            report.records += w.records;
            report.batches += w.batches;
            report.bytes += bound;
        }
        Ok(report)
    }
}

/// Iterator returned by [`Log::scan`].
pub struct Scan<'a> {
    log: &'a Log,
    pos: Location,
    end: Location,
    cur: Option<(u64, Seg, u64)>,
    st: ReadState,
    error: Option<LogError>,
    done: bool,
}

impl fmt::Debug for Scan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scan")
            .field("pos", &self.pos)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl Iterator for Scan<'_> {
    type Item = Result<(Location, OwnedRecord, bool), LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(e) = self.error.take() {
            self.done = true;
            return Some(Err(e));
        }
        let shared = &self.log.shared;
        loop {
            if self.pos >= self.end {
                self.done = true;
                return None;
            }
            let (seg, bound) = match &self.cur {
                Some((n, seg, bound)) if *n == self.pos.segment => (seg.clone(), *bound),
                _ => match shared.segment_for(self.pos.segment, self.end) {
                    Ok((seg, bound)) => {
                        self.cur = Some((self.pos.segment, seg.clone(), bound));
                        (seg, bound)
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                },
            };
            if self.pos.offset >= bound && self.pos.segment < self.end.segment {
                self.pos = Location {
                    segment: self.pos.segment + 1,
                    offset: HEADER_BYTES,
                };
                continue;
            }
            return match shared.read_record(
                &seg,
                self.pos.segment,
                self.pos.offset,
                bound,
                &mut self.st,
            ) {
                Ok(frame) => {
                    let at = self.pos;
                    self.pos.offset = frame.next;
                    Some(Ok((at, frame.record.to_owned_record(), frame.end_of_batch)))
                }
                Err(e) => {
                    self.done = true;
                    Some(Err(e))
                }
            };
        }
    }
}

#[cfg(test)]
mod seal_pool_tests {
    use super::*;

    fn job(key: DirKey, dir: &str) -> ClosedSeal {
        ClosedSeal {
            fs: Arc::new(crate::io::RealFs),
            dir: PathBuf::from(dir),
            key,
            segment: 0,
            len: 32,
            queued: Instant::now(),
        }
    }

    #[test]
    fn the_queued_closed_seals_are_counted_per_directory() {
        let mut pool = SealPool::new();
        pool.queue_closed(job((1, 1), "/r/a"));
        pool.queue_closed(job((1, 2), "/r/b"));
        pool.queue_closed(job((1, 1), "/r/a"));
        pool.queue_closed(job((2, 1), "/s/c"));
        assert_eq!(pool.closed_keys.get(&(1, 1)), Some(&2));
        pool.take_closed(0).expect("queued");
        assert_eq!(pool.closed_keys.get(&(1, 1)), Some(&1));
        pool.unqueue_where(|c| c.key == (1, 1));
        assert!(!pool.closed_keys.contains_key(&(1, 1)));
        pool.unqueue_where(|c| c.dir.starts_with("/r"));
        assert_eq!(pool.closed.len(), 1);
        assert_eq!(
            pool.closed_keys.iter().collect::<Vec<_>>(),
            [(&(2, 1), &1)],
            "only the other directory's seal is left"
        );
    }
}
