//! The catalog layer: the Root's header, writer lock and Root log, the registry of its
//! Sessions, the cache of open Sessions (bounded by descriptors and memory), and the index
//! sync thread. The operations (history, search, fork, diagnostics, patches) and the public
//! `Root` are above it.

use crate::blobs::BlobStore;
use crate::catalog::Summary;
use crate::error::{EngineError, ErrorKind};
use crate::event::Branch;
use crate::params::*;
use crate::progress::ProgressSink;
use crate::records::{self, ForkRecord, SessionRecord};
use crate::session::{log_config, Checkpoint, Closing, Session};
pub(crate) use crate::sync::lock;
use logbook_log::{Durability, Log, LogConfig, Record};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Magic bytes of the Root header file `logbook.root`.
pub const ROOT_MAGIC: [u8; 8] = *b"LBROOT\0\0";
/// The Root format version this build writes and reads (covers every engine-level file and
/// record encoding in the Root; the log and index files carry their own versions too).
pub const ROOT_FORMAT_VERSION: u32 = 1;
const ROOT_HEADER_BYTES: usize = 20;
/// How often the background flusher makes derived indexes durable (the state checkpoint
/// follows log growth instead: see [`crate::CHECKPOINT_LOG_BYTES`]).
pub const INDEX_SYNC_INTERVAL: Duration = Duration::from_millis(250);

pub(crate) const HEADER_FILE: &str = "logbook.root";
pub(crate) const LOCK_FILE: &str = "lock";
pub(crate) const ROOT_LOG_DIR: &str = "root-log";
pub(crate) const SESSIONS_DIR: &str = "sessions";
const STAGING_PREFIX: &str = ".staging-";

/// How a Root is opened.
#[derive(Clone, Debug)]
pub struct RootOptions {
    /// `Sync` (default): every mutation is on disk before it returns.
    /// `NoSyncBulkImport`: nothing is fsynced; a crash may lose recent mutations (bulk import).
    pub durability: Durability,
    /// Cadence of the background index sync (the state checkpoint is written when a Session's
    /// log grew by [`crate::CHECKPOINT_LOG_BYTES`], and on close).
    pub index_sync_interval: Duration,
    /// Size at which Session logs roll to a new segment (tests use tiny ones).
    pub segment_bytes_max: u64,
    /// Where long work (index rebuilds, postings builds, verify) reports progress.
    pub progress: ProgressSink,
    /// When appended rows enter the search index.
    pub search_indexing: SearchIndexing,
    /// Bytes of decompressed log blocks the Root keeps in memory for all its Sessions
    /// together (history pages and searches that come back to text read before).
    pub block_cache_bytes: usize,
    /// A Session's search postings of its active log segment are saved when the Root
    /// closes (or the cache closes the Session and its log is synced already) if they hold
    /// at least this many (trigram, row) pairs, so that the first search after the next
    /// open indexes only the rows appended since. Smaller ones are
    /// rebuilt from the log by that search (quick: about 50 KB of text at the default).
    pub search_tail_save_pairs_min: u64,
    /// A Session closed (by the open-Session cache or the Root's close) with at least this
    /// many record bytes in its newest log segment (and at most
    /// [`crate::SEAL_ON_CLOSE_BYTES_MAX`]) has that segment sealed, i.e. compressed, in the
    /// background, so that an idle Session costs its compressed size on disk; the next open
    /// starts a new segment. `u64::MAX` never seals at close.
    pub seal_on_close_bytes_min: u64,
    /// Most Sessions kept open at once: past it, opening one more first closes the least
    /// recently used idle ones (see [`open_sessions_budget`]). The default follows the
    /// process's descriptor limit.
    pub open_sessions_max: usize,
    /// The file system under every Session log; `None` is the real one. For fault injection
    /// in tests (see `logbook_log::io::FaultyFs`).
    #[doc(hidden)]
    pub log_fs: Option<Arc<dyn logbook_log::io::FileSystem>>,
    /// Open as a reader beside the Root's writer (see [`crate::Root::open_read_only`]).
    pub read_only: bool,
}

/// Default [`RootOptions::block_cache_bytes`]: 1,024 blocks of 64 KiB.
pub const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// File descriptors one open Session holds while idle: its log's active segment, `seq.idx`,
/// `row.idx` and `receipt.idx` (measured by `engine/tests/open_sessions.rs`, which fails when
/// this falls behind). Sealed segments that a read reaches, a diagnostics log and search
/// postings being written add a few more for a while.
pub const SESSION_DESCRIPTORS: u64 = 4;

/// Descriptors the open-Session budget leaves for everything else: the Root's own (writer
/// lock, Root log, blob store writes, staging of new Sessions), the server's streams, git and
/// workspace reads, and the sealed segments and postings files that Sessions open for a while.
pub const DESCRIPTORS_RESERVED: u64 = 96;

/// Fewest Sessions the cache keeps open, however low the descriptor limit (below this many
/// the Root cannot work well anyway; running out of descriptors is still retried).
pub const OPEN_SESSIONS_MIN: usize = 4;

/// Most Sessions the cache keeps open, however high the descriptor limit. An open Session has
/// no thread of its own and its memory is bounded by [`OPEN_SESSIONS_BYTES_MAX`]; what this
/// bounds is the rest: its maps (a few each, against the kernel's 65,530 per process by
/// default) and the Session objects themselves (see `docs/format.md`, "What an open Session
/// costs"). A Root-wide search visits every Session that may match, so a cache smaller than
/// the Sessions a search visits reopens each of them on every pass.
pub const OPEN_SESSIONS_MAX: usize = 1024;

/// Bytes the open Sessions together may hold in memory (event caches, mapped indexes, search
/// tails and postings, see `Session::resident_bytes`) before opening one more closes idle ones.
pub const OPEN_SESSIONS_BYTES_MAX: u64 = 256 << 20;

/// Times one call gives idle Sessions back and tries again after running out of file
/// descriptors, before it answers `io`.
pub const DESCRIPTOR_RETRIES_MAX: u32 = 8;

/// Use stamps below this are those of Sessions a scan opened (see
/// [`Shared::session_for_scan`]); a use stamps from here up.
const SCAN_STAMPS: u64 = 1 << 62;

/// A full open-Session cache closes `1 + max / EVICTION_BATCH_DIVISOR` idle Sessions at a
/// time (64 of 1,024), so the least recently used are found once per batch, not per open.
const EVICTION_BATCH_DIVISOR: usize = 16;

/// The default [`RootOptions::open_sessions_max`]: what the soft `RLIMIT_NOFILE` leaves after
/// [`DESCRIPTORS_RESERVED`], divided by [`SESSION_DESCRIPTORS`], within
/// [`OPEN_SESSIONS_MIN`]..=[`OPEN_SESSIONS_MAX`]. Under `ulimit -n 256` (the macOS default)
/// that is 40 Sessions.
pub fn open_sessions_budget() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let sessions = soft.saturating_sub(DESCRIPTORS_RESERVED) / SESSION_DESCRIPTORS;
    usize::try_from(sessions)
        .unwrap_or(usize::MAX)
        .clamp(OPEN_SESSIONS_MIN, OPEN_SESSIONS_MAX)
}

/// Raises the process's soft `RLIMIT_NOFILE` to its hard limit, as the Go and Node runtimes do
/// at start, and returns the soft limit in force after it. Linux desktops start programs with a
/// soft limit of 1,024 under a hard limit hundreds of times larger, which leaves the
/// open-Session cache ([`open_sessions_budget`]) room for a fifth of that. A process that
/// `select(2)`s on descriptors (numbers must stay under 1,024 there) must not call this; the
/// `logbook` command line does, before it opens a Root. When the kernel refuses (a limit past
/// the system's own), the soft limit stays as it was.
pub fn raise_descriptor_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // Linux refuses a soft limit past `fs.nr_open` (2^20 by default), even under an unlimited
    // hard one.
    const NOFILE_MAX: u64 = 1 << 20;
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    let target = limit.maximum.unwrap_or(u64::MAX).min(NOFILE_MAX);
    let raised = Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    if current < target && setrlimit(Resource::Nofile, raised).is_ok() {
        return target;
    }
    current
}

/// Default [`RootOptions::search_tail_save_pairs_min`].
pub const SEARCH_TAIL_SAVE_PAIRS_MIN: u64 = 1 << 14;

/// When appended rows enter a Session's search index (the index is derived either way, and a
/// search always sees every row under its fence).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SearchIndexing {
    /// Every append indexes its rows before it returns (default).
    #[default]
    OnAppend,
    /// Appends leave the index behind; the next search of the Session indexes every row
    /// appended since, reading them from the log. For bulk imports: appends cost only the
    /// log and row indexes, and the first search pays for the indexing.
    OnSearch,
}

impl Default for RootOptions {
    fn default() -> Self {
        RootOptions {
            durability: Durability::Sync,
            index_sync_interval: INDEX_SYNC_INTERVAL,
            segment_bytes_max: logbook_log::SEGMENT_BYTES_MAX,
            progress: ProgressSink::default(),
            search_indexing: SearchIndexing::OnAppend,
            block_cache_bytes: BLOCK_CACHE_BYTES,
            search_tail_save_pairs_min: SEARCH_TAIL_SAVE_PAIRS_MIN,
            seal_on_close_bytes_min: crate::session::SEAL_ON_CLOSE_BYTES_MIN,
            open_sessions_max: open_sessions_budget(),
            log_fs: None,
            read_only: false,
        }
    }
}

pub(crate) type SessionSlot = Arc<Mutex<Option<Arc<Session>>>>;

pub(crate) struct Entry {
    pub(crate) workspace: Option<String>,
    pub(crate) branch: Option<Branch>,
    /// A layered fork: `branch` is its base, read from the source (see `crate::fork`).
    pub(crate) layered: bool,
    /// Made by `importBundle` (see `crate::bundle`).
    pub(crate) import: Option<Imported>,
    pub(crate) slot: SessionSlot,
    /// What listings show without opening the Session (see `crate::catalog`).
    pub(crate) summary: Arc<Summary>,
    /// The spare directory createSession took for it (see `crate::spares`).
    pub(crate) spare: Option<SpareOf>,
}

/// The spare directory a Session's was made from.
#[derive(Clone)]
pub(crate) struct SpareOf {
    /// Its name in `sessions/` (the Root-log record's).
    pub(crate) name: String,
    /// This open took the spare and the Session's directory is still that spare (no crash
    /// or rebuild since): every name in it is durable but the rename into place, which the
    /// record stands for, so its first commit syncs no directory.
    pub(crate) fresh: Arc<AtomicBool>,
}

/// What an imported Session's Root-log record says beyond its id and workspace.
#[derive(Clone, Debug)]
pub(crate) struct Imported {
    /// SHA-256 of the bundle's header and manifest.
    pub(crate) bundle: [u8; 32],
    pub(crate) revision: u64,
    pub(crate) reset: Option<u64>,
}

impl Entry {
    /// The entry of a Session an import record made (see `crate::bundle`).
    pub(crate) fn imported(r: &records::ImportRecord, summary: Arc<Summary>) -> Entry {
        Entry {
            workspace: r.workspace.clone(),
            branch: None,
            layered: false,
            import: Some(Imported {
                bundle: r.bundle,
                revision: r.revision,
                reset: r.reset,
            }),
            slot: Arc::default(),
            summary,
            spare: None,
        }
    }

    /// The sequence after which the fork rules applied to this Session's state (its fork
    /// fence, or what the bundle it was imported from said), if any.
    pub(crate) fn reset(&self) -> Option<u64> {
        match (&self.branch, &self.import) {
            (Some(b), _) => Some(b.through),
            (None, Some(i)) => i.reset,
            (None, None) => None,
        }
    }
}

#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) sessions: BTreeMap<String, Entry>,
    /// createSession receipts: operation -> (params digest, sessionId).
    pub(crate) receipts: HashMap<String, ([u8; 32], String)>,
    /// Session ids reserved by a createSession or fork whose I/O runs outside this lock.
    pub(crate) reserved: HashSet<String>,
    /// createSession operations in flight (a repeat waits for the first to finish).
    pub(crate) creating: HashSet<String>,
}

impl Registry {
    /// True when `id` names a Session or one being made.
    pub(crate) fn taken(&self, id: &str) -> bool {
        self.sessions.contains_key(id) || self.reserved.contains(id)
    }
}

pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) options: RootOptions,
    /// Shared by the logs of every Session of the Root.
    block_cache: Arc<logbook_log::BlockCache>,
    /// Syncs of `sessions/` after a new Session's directory is renamed into it, shared by
    /// creations running at once.
    sessions_sync: crate::fsutil::SharedDirSync,
    /// Session directories made ahead of createSession (a writer in `Sync` mode only).
    spares: OnceLock<crate::spares::Spares>,
    /// The writer lock (see `take_lock`); released when the last reference goes. A reader's
    /// holds the directory's descriptor only.
    _lock: WriterLock,
    /// The writer's `unsynced` mark, standing for every log of the Root (see
    /// `logbook_log::GroupMark`); released by the close, before the lock. `None` for a reader.
    mark: Option<Arc<logbook_log::GroupMark>>,
    pub(crate) root_log: Log,
    pub(crate) registry: Mutex<Registry>,
    /// The open Sessions: a cache, not a set (see [`Shared::make_room`]). Each is also in its
    /// registry entry's slot; the slot lock is taken before this one, never after.
    pub(crate) opened: Mutex<Vec<Open>>,
    /// Counts Session uses, for the cache's least-recently-used order. Starts at
    /// [`SCAN_STAMPS`]: the stamps below it are a scan's (see [`Shared::session_for_scan`]).
    uses: AtomicU64,
    /// Counts Sessions opened by a scan; the n-th takes stamp `n` (below [`SCAN_STAMPS`]).
    scan_opens: AtomicU64,
    /// Counts Sessions opened (not found open), for tests of the cache.
    pub(crate) opens: AtomicU64,
    /// Most Sessions kept open: [`RootOptions::open_sessions_max`], lowered when the process
    /// ran out of descriptors with fewer open.
    open_max: AtomicUsize,
    /// The memory the open Sessions held when last summed, and the opens since (see
    /// [`Shared::make_room`]).
    resident: AtomicU64,
    opens_since_resident: AtomicUsize,
    pub(crate) blobs: BlobStore,
    pub(crate) ids: IdGen,
    /// Commits and new Sessions in order, for Root-wide searches (see `crate::journal`).
    pub(crate) journal: Arc<crate::journal::Journal>,
    /// The catalog snapshot on disk, removed before the first commit (see `crate::catalog`).
    pub(crate) snapshot: Arc<crate::catalog::Snapshot>,
    /// Fork receipts, diagnostics logs and patch storage (see `crate::fork`).
    pub(crate) extras: Extras,
    pub(crate) stop: Mutex<bool>,
    pub(crate) stop_signal: Condvar,
    /// The index sync thread, started on first need.
    pub(crate) flusher: Arc<Flusher>,
    /// What every Session's commits tell the Root (see `crate::catalog::Activity`).
    commits: Arc<RootCommits>,
    /// Signalled when a reservation in the registry ends (see [`Registry::reserved`]).
    pub(crate) reservation_ended: Condvar,
    /// Torn tails cut by the opens of this process (see [`Root::recoveries`]).
    pub(crate) cuts: Mutex<Vec<CutNote>>,
    /// Set once by [`Root::end_waits`]: every wait answers at once from then on.
    pub(crate) waits_ended: AtomicBool,
    /// For a reader ([`RootOptions::read_only`]): how far it has read the Root log, and when
    /// it last looked for more (see [`Shared::refresh_registry`]).
    followed: Mutex<(logbook_log::Location, Option<std::time::Instant>)>,
    /// For a reader: when the catalog snapshot it took its times from was written (0: none;
    /// see `Summary::follow_times`).
    pub(crate) snapshot_ms: u64,
}

/// One open Session in the cache, with the registry slot that also holds it.
pub(crate) struct Open {
    pub(crate) session: Arc<Session>,
    pub(crate) slot: SessionSlot,
}

/// References to an idle cached Session: its slot's and the cache's. A larger count means a
/// call is using it (or a layered fork holds it as its source), so it is not closed.
const IDLE_REFERENCES: usize = 2;

/// The Root's side of its Sessions' commits: the journal, the catalog snapshot, the index
/// sync thread.
pub(crate) struct RootCommits {
    pub(crate) journal: Arc<crate::journal::Journal>,
    pub(crate) snapshot: Arc<crate::catalog::Snapshot>,
    pub(crate) flusher: Arc<Flusher>,
    /// A reader's Root: the commits it learns of are the writer's, whose indexes it never
    /// syncs.
    pub(crate) read_only: bool,
}

impl crate::catalog::Commits for RootCommits {
    fn before_change(&self) -> Result<(), EngineError> {
        self.snapshot.before_change()
    }

    fn committed(&self, session_id: &str, first: u64, summary: &Summary) {
        self.journal.record(session_id, first, summary);
        if !self.read_only {
            // The commit gave the index sync thread entries to sync.
            self.flusher.ensure_started();
        }
    }
}

/// The background thread that makes derived indexes durable (`Shared::flush_loop`). It is
/// started by the first change that gives it work (a commit, or a Session whose open replayed
/// part of its log), so a Root opened to read starts no thread at all.
#[derive(Default)]
pub(crate) struct Flusher {
    /// The Root's shared state, for the thread to work on; set once the Root is built.
    pub(crate) shared: std::sync::OnceLock<std::sync::Weak<Shared>>,
    pub(crate) started: AtomicBool,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Flusher {
    /// Starts the thread unless it runs already (or the Root is closing). A failure to start
    /// it is ignored: indexes are then synced at close, and rebuilt by an open after a crash.
    fn ensure_started(&self) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let mut handle = lock(&self.handle);
        let Some(shared) = self.shared.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        if self.started.load(Ordering::Acquire) || *lock(&shared.stop) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("logbook-index-sync".into())
            .spawn(move || shared.flush_loop());
        if let Ok(h) = spawned {
            *handle = Some(h);
            self.started.store(true, Ordering::Release);
        }
    }

    /// Ends the thread (the caller has set `stop`) and waits for it.
    pub(crate) fn join(&self) {
        if let Some(h) = lock(&self.handle).take() {
            let _ = h.join();
        }
    }
}

pub(crate) struct IdGen {
    seed: [u8; 32],
    pub(crate) counter: AtomicU64,
}

impl IdGen {
    pub(crate) fn new(dir: &Path) -> IdGen {
        let mut h = Sha256::new();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        h.update(now.as_nanos().to_le_bytes());
        h.update(std::process::id().to_le_bytes());
        h.update(dir.as_os_str().as_encoded_bytes());
        let local = 0u8;
        h.update((&local as *const u8 as usize).to_le_bytes());
        IdGen {
            seed: h.finalize().into(),
            counter: AtomicU64::new(0),
        }
    }

    /// A number that tells this open of the Root from every other.
    pub(crate) fn epoch(&self) -> u64 {
        u64::from_le_bytes(self.seed[24..32].try_into().expect("8 bytes"))
    }

    pub(crate) fn next(&self, prefix: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut h = Sha256::new();
        h.update(self.seed);
        h.update(n.to_le_bytes());
        let d = h.finalize();
        let mut s = String::from(prefix);
        for b in &d[..12] {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

pub(crate) fn encode_header() -> [u8; ROOT_HEADER_BYTES] {
    let mut h = [0u8; ROOT_HEADER_BYTES];
    h[0..8].copy_from_slice(&ROOT_MAGIC);
    h[8..12].copy_from_slice(&ROOT_FORMAT_VERSION.to_le_bytes());
    let crc = crc32fast::hash(&h[..16]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

pub(crate) fn check_header(dir: &Path) -> Result<(), EngineError> {
    let path = dir.join(HEADER_FILE);
    // One read (no `fstat` for a size, no second read for the end): a regular file reads
    // short only at its end, and a longer file fills the one byte more and is refused.
    let mut buf = [0u8; ROOT_HEADER_BYTES + 1];
    let read = std::fs::File::open(&path).and_then(|mut f| {
        use std::io::Read;
        f.read(&mut buf)
    });
    let bytes = match read {
        Ok(n) => &buf[..n],
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EngineError::not_found(format!(
                "Logbook Root at {} (no {HEADER_FILE}); create one with init on an absent or empty directory",
                dir.display()
            )))
        }
        Err(e) => return Err(EngineError::io(&path, "read", e)),
    };
    if bytes.len() < 12 || bytes[..8] != ROOT_MAGIC {
        return Err(EngineError::corrupt(
            &path,
            "not a Logbook Root header (wrong magic bytes)",
        ));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != ROOT_FORMAT_VERSION {
        return Err(EngineError::UnsupportedFormat {
            path,
            found: version,
            expected: ROOT_FORMAT_VERSION,
        });
    }
    if bytes.len() != ROOT_HEADER_BYTES
        || crc32fast::hash(&bytes[..16])
            != u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"))
    {
        return Err(EngineError::corrupt(&path, "Root header checksum mismatch"));
    }
    Ok(())
}

/// Takes the writer lock: an exclusive `flock` on the Root directory itself.
///
/// The lock is on the directory, not on a file inside it, because a file can be deleted or
/// replaced under a holder (`rm ROOT/lock`): the next opener would then create a fresh file,
/// lock it without contention and become a second writer. The directory cannot be swapped
/// out from under an open descriptor without moving the whole Root, which moves its data too.
pub(crate) fn take_lock(dir: &Path) -> Result<WriterLock, EngineError> {
    use rustix::fs::{Mode, OFlags};
    // CLOEXEC so that no spawned child (git, an editor) inherits and keeps the lock alive
    // after this process ends; rustix does not add it on its own.
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| EngineError::io(dir, "open for the writer lock", std::io::Error::from(e)))?;
    flock_waiting(&fd, dir)?;
    // Builds before the directory lock locked `ROOT/lock`: hold that too while it exists, so
    // an older build opening the same Root meanwhile is kept out as well.
    let path = dir.join(LOCK_FILE);
    let legacy = match rustix::fs::open(&path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) {
        Ok(f) => Some(f),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(EngineError::io(&path, "open", std::io::Error::from(e))),
    };
    if let Some(f) = &legacy {
        flock_waiting(f, dir)?;
    }
    Ok(WriterLock {
        dir: Arc::new(fd),
        _legacy: legacy,
    })
}

/// The writer lock's descriptors: the Root directory's, and `ROOT/lock`'s when it exists.
pub(crate) struct WriterLock {
    /// Also the descriptor the catalog snapshot syncs the Root directory through, so that a
    /// commit needs no new descriptor (see `crate::catalog::Snapshot::before_change`).
    pub(crate) dir: Arc<OwnedFd>,
    _legacy: Option<OwnedFd>,
}

impl WriterLock {
    /// The Root directory's descriptor without any lock: a reader beside the writer takes
    /// none (it never writes, and must never keep the writer out).
    fn unlocked(dir: &Path) -> Result<WriterLock, EngineError> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| EngineError::io(dir, "open", std::io::Error::from(e)))?;
        Ok(WriterLock {
            dir: Arc::new(fd),
            _legacy: None,
        })
    }
}

/// Takes an exclusive flock on `fd`, waiting up to [`LOCK_WAIT_MAX`]; `Busy` after that.
fn flock_waiting(fd: &OwnedFd, dir: &Path) -> Result<(), EngineError> {
    use rustix::fs::FlockOperation;
    // A lock can outlive its Root by a moment: a child process that this process spawns
    // shares every open file description until its exec closes them, so a Root dropped and
    // opened again while another thread spawns can find its own old lock still held. Such a
    // lock goes within milliseconds; another writer's lock does not.
    let deadline = std::time::Instant::now() + LOCK_WAIT_MAX;
    loop {
        match rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(EngineError::Busy {
                    path: dir.to_owned(),
                })
            }
            Err(e) => {
                return Err(EngineError::io(
                    dir,
                    "lock (flock)",
                    std::io::Error::from(e),
                ))
            }
        }
    }
}

/// How long opening a Root waits for a held writer lock before it answers `Busy`.
pub const LOCK_WAIT_MAX: Duration = Duration::from_millis(500);

impl Shared {
    /// Makes an empty Root at `dir` (see [`crate::Root::init`]).
    pub(crate) fn init(dir: &Path) -> Result<(), EngineError> {
        if dir.exists() && !dir.is_dir() {
            return Err(EngineError::invalid(format!(
                "{} exists and is not a directory",
                dir.display()
            )));
        }
        if !is_empty_dir(dir)? {
            return Err(EngineError::NotEmpty {
                path: dir.to_owned(),
            });
        }
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, "create directory", e))?;
        for sub in [SESSIONS_DIR, "blobs", "tmp"] {
            let p = dir.join(sub);
            std::fs::create_dir(&p).map_err(|e| EngineError::io(&p, "create directory", e))?;
        }
        drop(Log::create(
            &dir.join(ROOT_LOG_DIR),
            log_config(Durability::Sync),
        )?);
        // Builds before the directory lock flocked this file; it is still made so a Root
        // looks the same to them, but the lock that counts is on the directory (`take_lock`).
        let lock_path = dir.join(LOCK_FILE);
        File::create(&lock_path).map_err(|e| EngineError::io(&lock_path, "create", e))?;
        // The header goes last: its presence marks a complete Root.
        crate::fsutil::write_atomic(&dir.join(HEADER_FILE), &encode_header())
    }

    /// Opens the Root at `dir`: header, writer lock, Root log (replayed into the registry),
    /// catalog snapshot; finishes a creation or fork a crash interrupted.
    pub(crate) fn open(dir: &Path, options: RootOptions) -> Result<Arc<Shared>, EngineError> {
        check_header(dir)?;
        let read_only = options.read_only;
        let mut mark = None;
        let (lock_file, root_log, recovery) = if read_only {
            // A reader beside the writer: no lock, and a Root log that is only read.
            let root_log = Log::open_read_only(
                &dir.join(ROOT_LOG_DIR),
                log_config(options.durability),
                None,
            )?;
            (WriterLock::unlocked(dir)?, root_log, Default::default())
        } else {
            let lock_file = take_lock(dir)?;
            // One `unsynced` mark for every log of the Root, taken before any is opened (and
            // made by the first write): a mark left by a writer that died has the file system
            // synced first.
            mark = Some(logbook_log::GroupMark::take(dir)?.0);
            let (root_log, recovery) = Log::open(
                &dir.join(ROOT_LOG_DIR),
                LogConfig {
                    group_mark: mark.clone(),
                    ..log_config(options.durability)
                },
            )?;
            (lock_file, root_log, recovery)
        };
        let cuts: Vec<CutNote> = CutNote::of(None, &recovery).into_iter().collect();
        for c in &cuts {
            options.progress.notice(&c.to_string());
        }
        let mut registry = Registry::default();
        let extras = Extras::default();
        let mut last: Option<(SessionRecord, Option<String>)> = None;
        let mut last_fork = None;
        for item in root_log.streaming_scan(root_log.start()) {
            let (loc, record, _) = item?;
            // Only the last record can be a registration whose directory is unfinished.
            (last, last_fork) =
                match register(root_log.dir(), &mut registry, &extras, loc, &record)? {
                    Registered::Session(r, spare) => (Some((r, spare)), None),
                    // Only a copied fork has a staging directory to finish on open.
                    Registered::Fork(r, layered) => (None, (!layered).then_some(r)),
                    Registered::Import(_) => (None, None),
                };
        }
        let root_seen = root_log.end();
        // Listing facts saved by the last clean close (removed before the first commit, so
        // never trusted after a crash that followed a change). A reader does not take them:
        // the writer may be changing what they describe while the file is still there.
        let mut snapshot_ms = 0;
        let (snapshot, saved) = if read_only {
            // A reader takes only the times of the writer's last clean close (nothing else
            // records when a Session was last active); it never trusts the rest, and never
            // writes or removes the file.
            snapshot_ms = crate::catalog::snapshot_written_ms(dir);
            let (_, saved) = crate::catalog::Snapshot::load(dir, Arc::clone(&lock_file.dir))?;
            let snapshot = crate::catalog::Snapshot::ignored(dir, Arc::clone(&lock_file.dir));
            (snapshot, saved)
        } else {
            crate::catalog::Snapshot::load(dir, Arc::clone(&lock_file.dir))?
        };
        // A snapshot on disk means the last close was clean and nothing changed since: no
        // half-made fork can be lying about, and the open need not list `sessions/`.
        let closed_cleanly = saved.is_some();
        if let Some(saved) = saved {
            for (id, s) in saved {
                if let Some(e) = registry.sessions.get_mut(&id) {
                    let s = if read_only {
                        Summary::from_times(&s)
                    } else {
                        Summary::from_saved(s)
                    };
                    e.summary = Arc::new(s);
                }
            }
        }
        let open_max = options.open_sessions_max.max(1);
        let ids = IdGen::new(dir);
        let journal = Arc::new(crate::journal::Journal::new(ids.epoch()));
        let snapshot = Arc::new(snapshot);
        let flusher = Arc::new(Flusher::default());
        let shared = Arc::new(Shared {
            dir: dir.to_owned(),
            journal: Arc::clone(&journal),
            snapshot: Arc::clone(&snapshot),
            ids,
            blobs: BlobStore::new(dir),
            block_cache: logbook_log::BlockCache::new(options.block_cache_bytes),
            sessions_sync: crate::fsutil::SharedDirSync::default(),
            spares: OnceLock::new(),
            options,
            _lock: lock_file,
            mark,
            root_log,
            registry: Mutex::new(registry),
            extras,
            opened: Mutex::new(Vec::new()),
            uses: AtomicU64::new(SCAN_STAMPS),
            scan_opens: AtomicU64::new(0),
            opens: AtomicU64::new(0),
            open_max: AtomicUsize::new(open_max),
            resident: AtomicU64::new(0),
            opens_since_resident: AtomicUsize::new(0),
            stop: Mutex::new(false),
            stop_signal: Condvar::new(),
            reservation_ended: Condvar::new(),
            cuts: Mutex::new(cuts),
            waits_ended: AtomicBool::new(false),
            flusher: Arc::clone(&flusher),
            commits: Arc::new(RootCommits {
                journal: Arc::clone(&journal),
                snapshot: Arc::clone(&snapshot),
                flusher,
                read_only,
            }),
            followed: Mutex::new((root_seen, None)),
            snapshot_ms,
        });
        let _ = shared.flusher.shared.set(Arc::downgrade(&shared));
        if read_only {
            // The writer finishes what it left half done; a reader changes nothing.
            return Ok(shared);
        }
        if shared.options.durability == Durability::Sync {
            let spares = crate::spares::Spares::new(
                shared.dir.join(SESSIONS_DIR),
                shared.log_config(),
                shared.ids.epoch(),
            );
            let _ = shared.spares.set(spares);
        }
        // The last registered Session may lack its directory (others are made on their use).
        if let Some((r, spare)) = last {
            shared.materialize(&r.session_id, r.workspace, r.branch, spare.as_deref())?;
        }
        finish_forks_on_open(&shared, last_fork.as_ref(), !closed_cleanly)?;
        Ok(shared)
    }
}

/// What a Root-log record registered (see [`register`]).
enum Registered {
    /// A Session made by createSession, and the spare directory it took.
    Session(SessionRecord, Option<String>),
    /// A fork (layered or copied).
    Fork(ForkRecord, bool),
    /// An imported Session, by id.
    Import(String),
}

/// Enters the Root-log record at `loc` into the registry (and a fork's receipt into `extras`).
fn register(
    root_log_dir: &Path,
    registry: &mut Registry,
    extras: &Extras,
    loc: logbook_log::Location,
    record: &logbook_log::OwnedRecord,
) -> Result<Registered, EngineError> {
    if record.kind == records::KIND_FORK_SESSION || record.kind == records::KIND_LAYERED_FORK {
        let layered = record.kind == records::KIND_LAYERED_FORK;
        let (id, entry, fork) = load_fork_record(root_log_dir, &record.payload, extras, layered)?;
        registry.sessions.insert(id, entry);
        return Ok(Registered::Fork(fork, layered));
    }
    if record.kind == records::KIND_IMPORTED_SESSION {
        let r: records::ImportRecord =
            records::decode(root_log_dir, "an import record", &record.payload)?;
        registry
            .receipts
            .insert(r.operation.clone(), (r.params, r.session_id.clone()));
        registry
            .sessions
            .insert(r.session_id.clone(), Entry::imported(&r, Arc::default()));
        return Ok(Registered::Import(r.session_id));
    }
    if record.kind != records::KIND_SESSION {
        return Err(EngineError::corrupt(
            root_log_dir,
            format!("unknown record kind {} at {loc:?}", record.kind),
        ));
    }
    let (r, spare) = records::decode_session(root_log_dir, &record.payload)?;
    registry
        .receipts
        .insert(r.operation.clone(), (r.params, r.session_id.clone()));
    registry.sessions.insert(
        r.session_id.clone(),
        Entry {
            workspace: r.workspace.clone(),
            branch: r.branch.clone(),
            layered: false,
            import: None,
            slot: Arc::default(),
            summary: Arc::default(),
            spare: spare.clone().map(|name| SpareOf {
                name,
                fresh: Arc::default(),
            }),
        },
    );
    Ok(Registered::Session(r, spare))
}

impl Shared {
    pub(crate) fn log_config(&self) -> logbook_log::LogConfig {
        logbook_log::LogConfig {
            segment_bytes_max: self.options.segment_bytes_max,
            durability: self.options.durability,
            block_cache: Some(Arc::clone(&self.block_cache)),
            fs: self.options.log_fs.clone(),
            group_mark: self.mark.clone(),
            ..logbook_log::LogConfig::default()
        }
    }

    /// Refuses a change to a Root opened read-only.
    pub(crate) fn writable(&self) -> Result<(), EngineError> {
        if self.options.read_only {
            return Err(EngineError::ReadOnly {
                path: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// For a reader: registers the Sessions the writer made since the last look (at most once
    /// per [`crate::session::REFRESH_INTERVAL`]). A writer's registry is always current.
    pub(crate) fn refresh_registry(&self) -> Result<(), EngineError> {
        if !self.options.read_only {
            return Ok(());
        }
        let mut followed = lock(&self.followed);
        let now = std::time::Instant::now();
        if followed
            .1
            .is_some_and(|at| now.duration_since(at) < crate::session::REFRESH_INTERVAL)
        {
            return Ok(());
        }
        followed.1 = Some(now);
        if !self.root_log.refresh()? {
            return Ok(());
        }
        let mut reg = lock(&self.registry);
        for item in self.root_log.scan(followed.0) {
            let (loc, record, _) = item?;
            let id = match register(self.root_log.dir(), &mut reg, &self.extras, loc, &record)? {
                Registered::Session(r, _) => r.session_id,
                Registered::Fork(r, _) => r.session_id,
                Registered::Import(id) => id,
            };
            // New to Root-wide searches, as the writer's own registration is.
            if let Some(e) = reg.sessions.get(&id) {
                self.journal.record(&id, 0, &e.summary);
            }
        }
        followed.0 = self.root_log.end();
        Ok(())
    }

    /// Session `id`, opened when it is not open; a failed open is remembered in the catalog
    /// (listings show it) until an open succeeds. A reader that does not know `id` looks at
    /// the Root log once more first.
    pub(crate) fn session(&self, id: &str) -> Result<Arc<Session>, EngineError> {
        self.session_as(id, false)
    }

    /// [`Shared::session`] for a pass over many Sessions (a Root-wide search): a Session it
    /// has to open enters the cache on probation, closed before every Session in use
    /// (Sessions on probation close in the order the scans opened them); one it finds open is
    /// touched as by any use, so a Session a later pass finds open leaves probation. A pass
    /// over more Sessions than the cache holds thus does not push out the Sessions a host is
    /// using, and a repeated search over fewer Sessions than the cache holds (a scope, or a
    /// query the Sessions' filters narrow) finds them open from its second pass on.
    pub(crate) fn session_for_scan(&self, id: &str) -> Result<Arc<Session>, EngineError> {
        self.session_as(id, true)
    }

    fn session_as(&self, id: &str, scan: bool) -> Result<Arc<Session>, EngineError> {
        if self.options.read_only && !lock(&self.registry).sessions.contains_key(id) {
            self.refresh_registry()?;
        }
        let opened = self.with_descriptors(|| self.session_once(id, scan));
        // Only a failure costs a registry lookup here; a successful open clears the mark
        // where it opens (`session_once`), so requests on an open Session pay nothing.
        if let Err(e) = &opened {
            if matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::UnsupportedFormat) {
                if let Some(entry) = lock(&self.registry).sessions.get(id) {
                    *lock(&entry.summary.damage) = Some(DamageNote::of(Some(id), e));
                }
            }
        }
        opened
    }

    /// Runs `f`; when it fails for want of file descriptors (EMFILE or ENFILE, also inside a
    /// log or index error), closes idle Sessions and runs it again, up to
    /// [`DESCRIPTOR_RETRIES_MAX`] times, so that no caller sees the process's limit. When it
    /// fails on an index entry that is damaged (entries are checked when read), the Session
    /// was marked for a rebuild and `f` runs once more: its `session` call opens the Session
    /// again with every index rebuilt from the log, so the caller gets its answer, not the
    /// damage. `f` must be safe to repeat: a read, an open, or a build that starts over.
    pub(crate) fn with_descriptors<R>(
        &self,
        mut f: impl FnMut() -> Result<R, EngineError>,
    ) -> Result<R, EngineError> {
        let (mut tries, mut rebuilt) = (0, false);
        loop {
            match f() {
                Err(e) if e.is_out_of_descriptors() && tries < DESCRIPTOR_RETRIES_MAX => {
                    tries += 1;
                    self.out_of_descriptors(tries);
                }
                Err(e) if e.is_index_damage() && !rebuilt => rebuilt = true,
                r => return r,
            }
        }
    }

    /// The process hit its descriptor limit: keep fewer Sessions open from now on (what the
    /// budget assumed per Session was too little here), and close idle ones now.
    fn out_of_descriptors(&self, tries: u32) {
        let open = lock(&self.opened).len();
        let fewer = (open * 3 / 4).max(OPEN_SESSIONS_MIN);
        self.open_max.fetch_min(fewer, Ordering::AcqRel);
        let closed = self.close_idle(fewer.min(open.saturating_sub(1)), 0);
        if closed == 0 {
            // Every open Session is in use: descriptors come back as those calls end (or
            // another process closes some).
            std::thread::sleep(Duration::from_millis(5) * tries);
        }
    }

    /// Makes room in the cache for one more open Session: closes the least recently used
    /// idle Sessions while the open ones number [`RootOptions::open_sessions_max`] or hold
    /// more than [`OPEN_SESSIONS_BYTES_MAX`]. Sessions in use stay open even past the budget.
    ///
    /// Their memory is summed (two locks of each open Session) once per eighth of the open
    /// Sessions opened, and at every open while over the budget: a Session grows by being
    /// used, not by being opened, and a sum at every open made a host cycling through many
    /// Sessions pay for all the open ones at each.
    pub(crate) fn make_room(&self) {
        let open = lock(&self.opened).len();
        let since = self.opens_since_resident.fetch_add(1, Ordering::AcqRel) + 1;
        let mut bytes = self.resident.load(Ordering::Acquire);
        if since * 8 >= open || bytes > OPEN_SESSIONS_BYTES_MAX {
            // Counted outside the cache lock: each count takes a Session's own locks.
            let sessions = self.open_sessions();
            bytes = sessions.iter().map(|s| s.resident_bytes()).sum();
            // These references would make every Session look in use to `close_idle`.
            drop(sessions);
            self.resident.store(bytes, Ordering::Release);
            self.opens_since_resident.store(0, Ordering::Release);
        }
        let max = self.open_max.load(Ordering::Acquire);
        if open < max && bytes <= OPEN_SESSIONS_BYTES_MAX {
            return;
        }
        // A batch at a time: each `close_idle` sorts the whole cache by last use, which for
        // one Session per open was most of a full cache's reopen.
        let keep = open
            .min(max)
            .saturating_sub(1 + max / EVICTION_BATCH_DIVISOR);
        let over = bytes.saturating_sub(OPEN_SESSIONS_BYTES_MAX);
        self.close_idle(keep, over);
    }

    /// Closes least recently used idle Sessions until at most `keep` are open and at least
    /// `free_bytes` of their memory went; returns how many it closed. A Session is idle when
    /// only the cache and its slot hold it; one whose slot is locked (being opened, reopened
    /// or closed) is skipped. Each is closed under its slot lock, so nobody opens a second
    /// object over its files until the first one's descriptors and threads are gone.
    pub(crate) fn close_idle(&self, keep: usize, free_bytes: u64) -> usize {
        let mut order: Vec<(u64, SessionSlot)> = lock(&self.opened)
            .iter()
            .map(|o| (o.session.last_use(), Arc::clone(&o.slot)))
            .collect();
        order.sort_by_key(|(used, _)| *used);
        let (mut closed, mut freed) = (0, 0u64);
        for (_, slot) in order {
            if lock(&self.opened).len() <= keep && freed >= free_bytes {
                break;
            }
            let mut guard = match slot.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => continue,
            };
            let Some(session) = self.take_idle(&mut guard) else {
                continue;
            };
            freed += session.resident_bytes();
            session.close(&self.closing());
            // The last reference: its files close and its threads end here, under the slot.
            drop(session);
            drop(guard);
            closed += 1;
        }
        closed
    }

    /// Takes the Session in a locked slot out of the cache when it is idle. The cache lock
    /// is held over the count and the removal, and the slot is locked by the caller, so no
    /// new reference can appear in between: the caller gets the only one.
    fn take_idle(&self, slot: &mut Option<Arc<Session>>) -> Option<Arc<Session>> {
        let mut opened = lock(&self.opened);
        let s = slot.as_ref()?;
        // A failed Session is left to the reopen path, which retires it properly.
        if Arc::strong_count(s) != IDLE_REFERENCES || s.needs_reopen() {
            return None;
        }
        let s = slot.take()?;
        opened.retain(|o| !Arc::ptr_eq(&o.session, &s));
        Some(s)
    }

    fn session_once(&self, id: &str, scan: bool) -> Result<Arc<Session>, EngineError> {
        let (slot, layered, plain, imported, summary, spare) = {
            let reg = lock(&self.registry);
            let e = reg
                .sessions
                .get(id)
                .ok_or_else(|| EngineError::not_found(format!("Session {id}")))?;
            let layered = if e.layered { e.branch.clone() } else { None };
            // A Session made by createSession (not a fork): its workspace.
            let plain = e.branch.is_none().then(|| e.workspace.clone());
            let imported = e.import.is_some();
            (
                e.slot.clone(),
                layered,
                plain,
                imported,
                Arc::clone(&e.summary),
                e.spare.clone(),
            )
        };
        let mut guard = lock(&slot);
        if let Some(s) = guard.as_ref() {
            if !s.needs_reopen() {
                s.touch(self.uses.fetch_add(1, Ordering::Relaxed));
                let s = Arc::clone(s);
                drop(guard);
                s.refresh()?;
                return Ok(s);
            }
            // Its log refuses appends after a failed write or fdatasync, or a panic under one
            // of its locks may have left its indexes half updated: open it again from disk
            // (log recovery, then replay from the checkpoint), so one transient failure does
            // not leave the Session read-only for the life of the process. The receipts on
            // disk decide whether a failed mutation is there; nothing is applied twice.
            s.retire()?;
            let old = guard.take().expect("checked above");
            lock(&self.opened).retain(|o| !Arc::ptr_eq(&o.session, &old));
        }
        self.make_room();
        let dir = self.dir.join(SESSIONS_DIR).join(id);
        // Looked up once (an open is a few dozen system calls; this was three of them), and
        // again only after something made the directory.
        let mut present = dir.is_dir();
        let base = match layered {
            Some(b) => {
                self.check_chain(id, &b.session_id)?;
                let source = self.session(&b.session_id)?;
                if !present && !self.options.read_only {
                    self.make_fork_dir(id)?;
                    present = dir.is_dir();
                }
                Some(crate::session::Base::open(&dir, source, b.through)?)
            }
            None => None,
        };
        if self.options.read_only && !present {
            // Registered a moment ago: the writer is renaming its directory into place (or
            // will, when it next opens the Root). Nothing to read yet, and nothing a reader
            // may finish.
            return Err(EngineError::Busy { path: dir });
        }
        if imported && !present && import_staging_dir(&self.dir, id).is_dir() {
            // Committed, but the rename into place failed or a crash came first.
            self.place(&import_staging_dir(&self.dir, id), id)?;
            present = dir.is_dir();
        }
        let plain = plain.filter(|_| !imported);
        if let Some(workspace) = plain.clone().filter(|_| !present) {
            // Registered, but the rename into place failed or a crash came first, or the
            // creation's files (written unsynced) never reached the disk.
            let spare_name = spare.as_ref().map(|s| s.name.as_str());
            if self.materialize(id, workspace, None, spare_name)? {
                spare_rebuilt(spare.as_ref());
            }
            present = dir.is_dir();
        }
        if !present {
            return Err(EngineError::corrupt(
                &dir,
                "the Root log lists this Session but its directory is missing",
            ));
        }
        let read_only = self.options.read_only;
        let diags = self.extras.diags.of(id, &dir, self.log_config(), read_only);
        let open = |base| {
            Session::open_with(
                id,
                &dir,
                self.log_config(),
                base,
                self.options.progress.clone(),
                Arc::clone(&diags),
                read_only,
            )
        };
        let mut opened = open(base);
        let plain = plain.filter(|_| !read_only);
        if let Some(workspace) = plain.clone() {
            let failed = opened
                .as_ref()
                .is_err_and(|e| matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Corrupt));
            if failed && lost_creation(&dir) {
                // Its creation's files did not all reach the disk (a power loss after the
                // Root-log record): nothing of it was acknowledged but the creation.
                drop(opened);
                self.options.progress.notice(&format!(
                    "Session {id}: its files were lost before its first commit; made again from its registration"
                ));
                crate::fsutil::remove_any(&dir)?;
                spare_rebuilt(spare.as_ref());
                self.materialize(id, workspace, None, None)?;
                opened = open(None);
            }
        }
        let s = Arc::new(opened.map_err(|e| match e.kind() {
            // The Root log lists it: a log that is not there is damage.
            ErrorKind::NotFound => EngineError::corrupt(&dir, e.to_string()),
            _ => e,
        })?);
        // A Session whose directory is still the spare this open took needs no directory
        // synced: every name in it was durable before it was taken, and the Root-log record
        // names the spare, so a rename into place that a crash lost is made again.
        let fresh = spare.is_some_and(|s| s.fresh.load(Ordering::Acquire));
        if plain.is_some() && !fresh && s.read().state.revision == 1 {
            s.sync_names_at_first_commit(self.names_of_new(&dir));
        }
        for (source, operation) in lock(&self.extras.forks).keys() {
            if source == id {
                s.add_fork_op(operation);
            }
        }
        if self.options.search_indexing == SearchIndexing::OnSearch {
            s.index_search_on_search();
        }
        // It opened: no longer damaged. Appends mark its last activity in the catalog.
        *lock(&summary.damage) = None;
        let _ = s.activity.set(crate::catalog::Activity {
            summary,
            root: Arc::clone(&self.commits) as Arc<dyn crate::catalog::Commits>,
        });
        if s.indexes_dirty() && !read_only {
            // Its open replayed part of its log: the indexes have entries to sync.
            self.flusher.ensure_started();
        }
        if let Some(c) = &s.cut {
            self.options.progress.notice(&c.to_string());
            lock(&self.cuts).push(c.clone());
        }
        let stamp = if scan {
            self.scan_opens.fetch_add(1, Ordering::Relaxed) % SCAN_STAMPS
        } else {
            self.uses.fetch_add(1, Ordering::Relaxed)
        };
        s.touch(stamp);
        self.opens.fetch_add(1, Ordering::Relaxed);
        *guard = Some(Arc::clone(&s));
        let open = {
            let mut opened = lock(&self.opened);
            opened.push(Open {
                session: Arc::clone(&s),
                slot: Arc::clone(&slot),
            });
            opened.len()
        };
        let max = self.open_max.load(Ordering::Acquire);
        if open > max {
            // Opens that ran at once each made room for one (`make_room`), then all came in:
            // the surplus goes now, or the cache would stay over its budget (and over its
            // descriptors) once the opens stop. This one is in use, so others go.
            self.close_idle(max, 0);
        }
        Ok(s)
    }

    /// Makes the Session directory for a registered Session unless it exists: built under a
    /// staging name (ids never start with '.') and renamed into place, so it appears whole.
    /// Following the sources from layered fork `id`'s source must never come back to `id`
    /// (only a damaged Root log could say so; opening would never finish).
    fn check_chain(&self, id: &str, source: &str) -> Result<(), EngineError> {
        let reg = lock(&self.registry);
        let mut at = source;
        for _ in 0..=reg.sessions.len() {
            if at == id {
                return Err(EngineError::corrupt(
                    self.dir.join(SESSIONS_DIR).join(id),
                    "the Root log's chain of fork sources comes back to this fork",
                ));
            }
            match reg.sessions.get(at).and_then(|e| e.branch.as_ref()) {
                Some(b) => at = &b.session_id,
                None => break,
            }
        }
        Ok(())
    }

    /// Makes the directory of layered fork `id` on its first open: an empty log under
    /// `sessions/.fork-<id>` (a half-made one from a crash is removed first), synced, renamed
    /// into place, `sessions/` synced. Everything in it is derived from the Root log record.
    fn make_fork_dir(&self, id: &str) -> Result<(), EngineError> {
        // A staging directory may be left by a crash below: the catalog snapshot goes first,
        // so the next open knows the end was not clean and clears it away.
        self.snapshot.before_change()?;
        let sessions = self.dir.join(SESSIONS_DIR);
        let staging = fork_staging_dir(&self.dir, id);
        if staging.exists() {
            std::fs::remove_dir_all(&staging)
                .map_err(|e| EngineError::io(&staging, "remove a half-made fork", e))?;
        }
        std::fs::create_dir(&staging)
            .map_err(|e| EngineError::io(&staging, "create directory", e))?;
        // `Log::create` syncs its file, its directory and `staging` (the log directory's name).
        drop(Log::create(&staging.join("log"), self.log_config())?);
        let dir = sessions.join(id);
        std::fs::rename(&staging, &dir)
            .map_err(|e| EngineError::io(&dir, "rename into place", e))?;
        if self.options.durability == Durability::Sync {
            self.sessions_sync.sync(&sessions)?;
        }
        Ok(())
    }

    /// What a Session's first commit calls to make the names of its directory, written
    /// unsynced by its creation, durable: its log's directory, its own, then `sessions/`.
    /// (Sharing the last one between the first commits running at once was measured and
    /// gained nothing: docs/benchmarks.md.)
    fn names_of_new(&self, dir: &Path) -> logbook_log::NameSync {
        let fs: Arc<dyn logbook_log::io::FileSystem> = match &self.options.log_fs {
            Some(fs) => Arc::clone(fs),
            None => Arc::new(logbook_log::io::RealFs),
        };
        let (dir, sessions) = (dir.to_path_buf(), self.dir.join(SESSIONS_DIR));
        logbook_log::NameSync::new(move || {
            [dir.join("log"), dir.clone(), sessions.clone()]
                .iter()
                .try_for_each(|d| fs.sync_dir(d))
        })
    }

    /// Writes the Root-log record that registers a new Session: the creation's commit point.
    /// The Session's directory is built (under its staging name) before, and put in place
    /// after; a crash or a failed rename in between is finished on the Session's next use.
    pub(crate) fn append_session_record(
        &self,
        r: &SessionRecord,
        spare: Option<&str>,
    ) -> Result<(), EngineError> {
        let payload = records::encode_session(r, spare);
        self.root_log.append(&[Record {
            kind: records::KIND_SESSION,
            payload: &payload,
        }])?;
        Ok(())
    }

    /// Builds Session `id`'s directory under its staging name (ids never start with '.'),
    /// removing whatever an earlier attempt left there. Nothing is synced: the Session's
    /// Root-log record stands for the directory until its first commit (docs/format.md,
    /// "Making a Session").
    pub(crate) fn build_staging(
        &self,
        id: &str,
        workspace: Option<String>,
        branch: Option<Branch>,
    ) -> Result<PathBuf, EngineError> {
        let staging = self.staging_of(id);
        crate::fsutil::remove_any(&staging)?;
        if let Err(e) = Session::create_files_with(&staging, workspace, branch, self.log_config()) {
            // (A full disk, say.) Nothing names it: leave nothing behind.
            let _ = crate::fsutil::remove_any(&staging);
            return Err(e);
        }
        Ok(staging)
    }

    /// Renames a built staging directory into place as Session `id`'s, and syncs `sessions/`.
    pub(crate) fn place(&self, staging: &Path, id: &str) -> Result<(), EngineError> {
        self.place_unsynced(staging, id)?;
        if self.options.durability == Durability::Sync {
            self.sessions_sync.sync(&self.dir.join(SESSIONS_DIR))?;
        }
        Ok(())
    }

    /// [`Shared::place`] without the sync, for a directory built by [`Shared::build_staging`]
    /// (its first commit syncs `sessions/`).
    pub(crate) fn place_unsynced(&self, staging: &Path, id: &str) -> Result<(), EngineError> {
        let dir = self.dir.join(SESSIONS_DIR).join(id);
        std::fs::rename(staging, &dir).map_err(|e| {
            EngineError::io(
                &dir,
                "rename into place (the Session is registered; its next use finishes this)",
                e,
            )
        })
    }

    fn staging_of(&self, id: &str) -> PathBuf {
        self.dir
            .join(SESSIONS_DIR)
            .join(format!("{STAGING_PREFIX}{id}"))
    }

    /// Finishes registered Session `id` whose directory is missing: a creation that a crash
    /// or a failed rename interrupted after its Root-log record, or whose unsynced files a
    /// power loss took (the record is the commit; the directory's content, one
    /// `sessionCreated` event, follows from it). The spare the record names, when it is
    /// still there, is renamed into place; otherwise the directory is built again. Returns
    /// whether it was built again.
    pub(crate) fn materialize(
        &self,
        id: &str,
        workspace: Option<String>,
        branch: Option<Branch>,
        spare: Option<&str>,
    ) -> Result<bool, EngineError> {
        let sessions = self.dir.join(SESSIONS_DIR);
        if sessions.join(id).exists() {
            return Ok(false);
        }
        if let Some(spare) = spare.map(|name| sessions.join(name)).filter(|p| p.is_dir()) {
            self.place_unsynced(&spare, id)?;
            return Ok(false);
        }
        let staging = self.build_staging(id, workspace, branch)?;
        self.place_unsynced(&staging, id)?;
        Ok(true)
    }

    /// The spare Session directories (a writer in `Sync` mode only).
    pub(crate) fn spares(&self) -> Option<&crate::spares::Spares> {
        self.spares.get()
    }

    /// Takes a ready spare directory and writes a new Session's `sessionCreated` into it (see
    /// `crate::spares`): its path and name. `None` when no spare is ready or filling it
    /// failed (the spare is then removed, and the creation builds its directory itself).
    pub(crate) fn fill_spare(&self, workspace: Option<String>) -> Option<(PathBuf, String)> {
        let name = self.spares.get()?.take()?;
        let dir = self.dir.join(SESSIONS_DIR).join(&name);
        match Session::write_created(&dir, workspace, self.log_config()) {
            Ok(()) => Some((dir, name)),
            Err(_) => {
                let _ = crate::fsutil::remove_any(&dir);
                None
            }
        }
    }

    /// The Sessions open now (the cache's content).
    pub(crate) fn open_sessions(&self) -> Vec<Arc<Session>> {
        lock(&self.opened)
            .iter()
            .map(|o| Arc::clone(&o.session))
            .collect()
    }

    pub(crate) fn sync_all(&self, checkpoint: Checkpoint) -> Result<(), EngineError> {
        let mut first_err = None;
        self.for_each_cached(|s| {
            if let Err(e) = s.sync_indexes(checkpoint) {
                first_err.get_or_insert(e);
            }
        });
        first_err.map_or(Ok(()), Err)
    }

    /// Runs `f` on each Session the cache holds, one at a time.
    fn for_each_cached(&self, mut f: impl FnMut(&Session)) {
        // Weak references, upgraded one at a time: the background flusher must not make every
        // open Session look in use to the cache (`close_idle`) while it works on one of them.
        // Each is upgraded under the cache lock and only while still cached, the lock
        // `take_idle` counts references under, so a Session the cache is closing is skipped
        // and never outlives its slot lock here.
        let sessions: Vec<std::sync::Weak<Session>> = lock(&self.opened)
            .iter()
            .map(|o| Arc::downgrade(&o.session))
            .collect();
        let still_cached = |w: &std::sync::Weak<Session>| {
            let opened = lock(&self.opened);
            opened
                .iter()
                .any(|o| std::ptr::eq(Arc::as_ptr(&o.session), w.as_ptr()))
                .then(|| w.upgrade())
                .flatten()
        };
        for s in sessions.iter().filter_map(still_cached) {
            f(&s);
        }
    }

    fn flush_loop(&self) {
        let mut stop = lock(&self.stop);
        loop {
            // A stop asked for while this thread was starting or syncing must not wait out a
            // whole interval: closing a Root would take up to `index_sync_interval`.
            if *stop {
                break;
            }
            stop = self
                .stop_signal
                .wait_timeout(stop, self.options.index_sync_interval)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if *stop {
                break;
            }
            drop(stop);
            let quiet_ms = self.options.index_sync_interval.as_millis() as u64;
            // One walk of the cache does both.
            self.for_each_cached(|s| {
                // Derived data: a failed sync is retried next tick and, at worst, rebuilt on
                // open.
                let _ = s.sync_indexes(Checkpoint::IfGrown);
                // The filter of a Session whose rows the index pool has taken since the last
                // tick: a small one at once, another once quiet for a tick.
                s.refresh_filter_in_background(quiet_ms);
            });
            stop = lock(&self.stop);
        }
    }
}

/// How long the Root's close waits for the seals of Sessions it closed (see
/// `Session::save_search_tail`) before it leaves the ones not started unsealed. Seals
/// deferred while appends kept the disk busy run now, at full speed (no commit competes):
/// about 0.3 ms each on this project's bench machine, so a close after writing 10,000
/// small Sessions waits a few seconds, and one after an ordinary day a few milliseconds.
const CLOSED_SEALS_WAIT_MAX: Duration = Duration::from_secs(10);

impl Drop for Shared {
    fn drop(&mut self) {
        // The Sessions close here, while the writer lock is still held (fields drop after
        // this, the lock among them): their logs give back zero regions and queue the seals
        // of their newest segments, and no seal of this process may touch the Root once
        // another process can take the lock.
        lock(&self.opened).clear();
        for e in lock(&self.registry).sessions.values() {
            lock(&e.slot).take();
        }
        logbook_log::settle_closed_seals(&self.dir.join(SESSIONS_DIR), CLOSED_SEALS_WAIT_MAX);
        if let Some(spares) = self.spares.get() {
            // Best effort: a spare left behind is removed by the scan after an unclean end,
            // or stays as an empty directory no record names.
            let _ = spares.close();
        }
        // Every Session's log is closed now, each fully synced or marked by itself; the Root
        // log's commits are synced (a sync here costs nothing then, and a failed one leaves
        // the mark for the next open).
        if let Some(mark) = &self.mark {
            if self.root_log.sync().is_ok() {
                mark.release();
            }
        }
    }
}

impl Shared {
    /// What closing one of the Root's Sessions does, from the Root's options.
    pub(crate) fn closing(&self) -> Closing {
        Closing {
            tail_pairs_min: self.options.search_tail_save_pairs_min,
            seal_bytes_min: self.options.seal_on_close_bytes_min,
        }
    }

    /// True when Session `id` is open now (using it costs no open).
    pub(crate) fn is_open(&self, id: &str) -> bool {
        let slot = match lock(&self.registry).sessions.get(id) {
            Some(e) => Arc::clone(&e.slot),
            None => return false,
        };
        let open = lock(&slot).is_some();
        open
    }
}

const FORK_STAGING_PREFIX: &str = ".fork-";

type ForkKey = (String, String);

/// Root-wide state of the fork, diagnostics and patch operations.
#[derive(Default)]
pub(crate) struct Extras {
    /// Committed forks: (source Session, operation) -> (params digest, result).
    pub(crate) forks: Mutex<HashMap<ForkKey, ([u8; 32], ForkResult)>>,
    /// Serialises forks (they are rare; building one takes milliseconds).
    pub(crate) fork_lock: Mutex<()>,
    pub(crate) diags: crate::diagnostics::DiagLogs,
}

/// Decodes a Root log fork record and remembers its receipt.
pub(crate) fn load_fork_record(
    path: &Path,
    payload: &[u8],
    extras: &Extras,
    layered: bool,
) -> Result<(String, Entry, ForkRecord), EngineError> {
    let r: ForkRecord = records::decode(path, "a fork record", payload)?;
    lock(&extras.forks).insert(
        (r.branch.session_id.clone(), r.operation.clone()),
        (
            r.params,
            ForkResult {
                session_id: r.session_id.clone(),
                branch: r.branch.clone(),
            },
        ),
    );
    let entry = Entry {
        workspace: r.workspace.clone(),
        branch: Some(r.branch.clone()),
        layered,
        import: None,
        slot: Default::default(),
        summary: Default::default(),
        spare: None,
    };
    Ok((r.session_id.clone(), entry, r))
}

/// Finishes the rename of the last committed fork if a crash interrupted it, and (`scan`:
/// after an unclean end) removes staging directories of forks and imports that never
/// committed, and renames those of committed imports into place. A layered fork's directory
/// half-made by a crash is also made again by its next open; an imported Session's staging
/// directory is also renamed by its next open (`session_once`).
pub(crate) fn finish_forks_on_open(
    shared: &Shared,
    last: Option<&ForkRecord>,
    scan: bool,
) -> Result<(), EngineError> {
    let sessions = shared.dir.join(SESSIONS_DIR);
    if let Some(r) = last {
        let dir = sessions.join(&r.session_id);
        let staging = sessions.join(format!("{FORK_STAGING_PREFIX}{}", r.session_id));
        if !dir.exists() {
            if !staging.is_dir() {
                return Err(EngineError::corrupt(
                    &dir,
                    "the Root log lists this forked Session but neither it nor its staging directory exists",
                ));
            }
            std::fs::rename(&staging, &dir)
                .map_err(|e| EngineError::io(&dir, "rename into place", e))?;
            crate::fsutil::sync_dir(&sessions)?;
        }
    }
    // Any staging directory left now belongs to a fork or creation that never committed, or
    // one a committed creation can build again: never visible.
    // Looked for only after an unclean end (`scan`): listing `sessions/` costs O(Sessions).
    if !scan {
        return Ok(());
    }
    let entries =
        std::fs::read_dir(&sessions).map_err(|e| EngineError::io(&sessions, "list", e))?;
    let mut removed = false;
    // Spares that registered Sessions took, by name (made at the first spare found).
    let mut taken: Option<HashMap<String, String>> = None;
    for e in entries {
        let e = e.map_err(|e| EngineError::io(&sessions, "list", e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(records::SPARE_PREFIX) {
            // One a committed creation took, whose rename a crash interrupted, goes into
            // place; any other (ready, or taken by a creation that never committed) is
            // scratch.
            let taken = taken.get_or_insert_with(|| {
                lock(&shared.registry)
                    .sessions
                    .iter()
                    .filter_map(|(id, e)| Some((e.spare.as_ref()?.name.clone(), id.clone())))
                    .collect()
            });
            if let Some(id) = taken.get(&name).filter(|id| !sessions.join(id).exists()) {
                shared.place(&e.path(), id)?;
                continue;
            }
        } else if let Some(id) = name.strip_prefix(IMPORT_STAGING_PREFIX) {
            // An import committed (registered as imported) whose rename did not happen is
            // finished; any other import staging directory never committed.
            let committed = lock(&shared.registry)
                .sessions
                .get(id)
                .is_some_and(|e| e.import.is_some());
            if committed && !sessions.join(id).exists() {
                shared.place(&e.path(), id)?;
                continue;
            }
        } else if !name.starts_with(FORK_STAGING_PREFIX) && !name.starts_with(STAGING_PREFIX) {
            // (A creation's staging directory a crash left: a committed one is built again
            // from its record on its Session's first use.)
            continue;
        }
        let p = e.path();
        std::fs::remove_dir_all(&p)
            .map_err(|e| EngineError::io(&p, "remove a directory no commit names", e))?;
        removed = true;
    }
    if removed {
        crate::fsutil::sync_dir(&sessions)?;
    }
    Ok(())
}

/// A Session's directory was built again from its record: it is no longer its spare's.
fn spare_rebuilt(spare: Option<&SpareOf>) {
    if let Some(s) = spare {
        s.fresh.store(false, Ordering::Release);
    }
}

/// Prefix of the directory an imported Session is built under (see `crate::bundle`).
const IMPORT_STAGING_PREFIX: &str = ".import-";

/// The path Session `id` is built under while it is imported from a bundle.
pub(crate) fn import_staging_dir(root: &Path, id: &str) -> PathBuf {
    root.join(SESSIONS_DIR)
        .join(format!("{IMPORT_STAGING_PREFIX}{id}"))
}

/// The path a fork of `id` is staged under (see `crate::fork`).
pub fn fork_staging_dir(root: &Path, id: &str) -> PathBuf {
    root.join(SESSIONS_DIR)
        .join(format!("{FORK_STAGING_PREFIX}{id}"))
}

pub(crate) fn is_empty_dir(dir: &Path) -> Result<bool, EngineError> {
    match std::fs::read_dir(dir) {
        Ok(mut it) => Ok(it.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(EngineError::invalid(
            format!("{} is not a directory", dir.display()),
        )),
        Err(e) => Err(EngineError::io(dir, "list", e)),
    }
}

/// True when Session directory `dir`, whose open failed, holds no record at all (no log, or
/// segments of a header at most: a torn create is cut back to one by the log's open) and shows
/// no sign of a commit after its creation (no receipt in its index, no checkpoint). Then a
/// power loss took the files its creation wrote unsynced, and nothing of it but the creation
/// was acknowledged (a first commit syncs the Session's names before its receipt is
/// indexed); otherwise the damage is reported, not repaired.
fn lost_creation(dir: &Path) -> bool {
    let receipts = std::fs::metadata(dir.join("receipt.idx")).map_or(0, |m| m.len());
    if receipts > logbook_index::FIXED_HEADER_BYTES || dir.join("state.ckpt").exists() {
        return false;
    }
    let Ok(list) = std::fs::read_dir(dir.join("log")) else {
        return true;
    };
    list.flatten().all(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        !name.ends_with(".sealed")
            && (!name.ends_with(".active")
                || e.metadata()
                    .is_ok_and(|m| m.len() <= logbook_log::SEGMENT_HEADER_BYTES))
    })
}
