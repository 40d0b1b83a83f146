//! Watching one directory for changes to its direct children.
//!
//! The directory is resolved through the no-follow resolver and watched with inotify
//! through `/proc/self/fd/N` of that handle, so the watch sits on exactly the inode
//! that was resolved (a path-based watch would re-resolve the path, links and all).
//! Without `/proc` the watch is placed by path with `IN_DONT_FOLLOW | IN_ONLYDIR` and
//! accepted only if the path still resolves to the same directory identity. Where
//! inotify cannot be used at all the watch falls back to a metadata poll.
//!
//! Events are hints: every `next` drains all queued events into one answer, and the
//! path is resolved again from the root at least every [`WATCH_RECHECK_MS`], so a
//! directory that was removed, moved or replaced (even via a parent) becomes
//! `Unavailable`, for good. A [`WatchCloser`] ends a watch from another thread, waking a
//! `next` that waits on it at once.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{self, AtFlags, Dir, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{ErrorKind, FsError};
use crate::identity::{directory_identity, FileStamp};
use crate::list::open_dir;
use crate::path::{HiddenSet, RelPath};
use crate::resolve::ResolverMode;

/// Longest wait between two resolutions of the watched path, in milliseconds.
pub const WATCH_RECHECK_MS: u64 = 500;
/// Interval of the metadata poll used where inotify is unavailable, in milliseconds.
pub const WATCH_POLL_INTERVAL_MS: u64 = 100;
/// Bytes of the buffer inotify events are read into (a multiple of the largest event).
const INOTIFY_BUFFER_BYTES: usize = 16 << 10;
/// Longest timeout honoured, so deadline arithmetic cannot overflow.
const WATCH_TIMEOUT_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// How a [`crate::Workspace`] watches directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WatcherMode {
    /// inotify, or the metadata poll where inotify cannot be used.
    #[default]
    Auto,
    /// Always the metadata poll; for tests and filesystems without inotify.
    Poll,
}

/// What a watch saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// Something among the direct children changed (possibly several things): list again.
    Changed,
    /// The directory was removed, moved or replaced; the watch is over.
    Unavailable,
    /// Nothing happened within the timeout.
    Timeout,
}

/// Ends a [`DirWatch`] from another thread (see [`DirWatch::closer`]): a `next` waiting on
/// it returns [`WatchEvent::Unavailable`] at once, and so does every later one
/// ([`WatchCloser::is_closed`] tells this end from the directory's going away).
#[derive(Clone, Debug)]
pub struct WatchCloser(Arc<CloseSignal>);

#[derive(Debug)]
struct CloseSignal {
    closed: AtomicBool,
    /// An eventfd that becomes readable on close and wakes a `next` waiting in `poll`.
    /// `None` when none could be made: a waiting `next` then sees the flag after at most
    /// one wait step ([`WATCH_RECHECK_MS`]).
    wake: Option<OwnedFd>,
}

impl WatchCloser {
    /// True once [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Acquire)
    }

    pub fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
        if let Some(fd) = &self.0.wake {
            // Can only fail with a counter that is already non-zero, i.e. readable.
            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        }
    }
}

/// A watch on one directory; see the module documentation.
#[derive(Debug)]
pub struct DirWatch {
    identity: String,
    root: OwnedFd,
    path: RelPath,
    mode: ResolverMode,
    hidden: HiddenSet,
    /// `None` once the watch has ended (the directory is gone): everything is released.
    backend: Option<Backend>,
    checked_at: Instant,
    signal: Arc<CloseSignal>,
}

enum Backend {
    Inotify {
        fd: OwnedFd,
        buf: Vec<MaybeUninit<u8>>,
    },
    Poll {
        dir: OwnedFd,
        fingerprint: Option<u64>,
    },
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Inotify { fd, .. } => write!(f, "Inotify(fd {})", fd.as_raw_fd()),
            Backend::Poll { fingerprint, .. } => write!(f, "Poll({fingerprint:?})"),
        }
    }
}

enum Seen {
    Nothing,
    Changed,
    Gone,
}

pub(crate) struct WatchContext<'a> {
    pub(crate) mode: ResolverMode,
    pub(crate) root: BorrowedFd<'a>,
    pub(crate) root_path: &'a Path,
    pub(crate) hidden: &'a HiddenSet,
    pub(crate) watcher: WatcherMode,
}

fn io_err<'a>(path: &'a RelPath, op: &'static str) -> impl Fn(Errno) -> FsError + 'a {
    move |e| FsError::from_errno(path.as_bytes(), op, e)
}

pub(crate) fn watch(cx: &WatchContext<'_>, path: &RelPath) -> Result<DirWatch, FsError> {
    let dir = open_dir(cx.mode, cx.root, cx.hidden, path)?;
    let (identity, _) =
        directory_identity(dir.as_fd()).map_err(io_err(path, "inspect directory"))?;
    let root = cx.root.try_clone_to_owned().map_err(|e| FsError::Io {
        path: Vec::new(),
        op: "duplicate workspace handle",
        source: e,
    })?;
    let mut w = DirWatch {
        identity,
        root,
        path: path.clone(),
        mode: cx.mode,
        hidden: cx.hidden.clone(),
        backend: None,
        checked_at: Instant::now(),
        signal: Arc::new(CloseSignal {
            closed: AtomicBool::new(false),
            wake: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).ok(),
        }),
    };
    if cx.watcher == WatcherMode::Auto {
        if let Some(fd) = inotify_on(cx, path, &dir, &mut w)? {
            w.backend = Some(Backend::Inotify {
                fd,
                buf: vec![MaybeUninit::uninit(); INOTIFY_BUFFER_BYTES],
            });
            // The handle is dropped here on purpose: an open handle would delay the
            // kernel's "deleted" event until it is closed.
            return Ok(w);
        }
    }
    let fp = fingerprint(&dir, path, &w.hidden).map_err(io_err(path, "inspect directory"))?;
    w.backend = Some(Backend::Poll {
        dir,
        fingerprint: fp,
    });
    Ok(w)
}

/// `Ok(None)` when inotify cannot be used here (the poll takes over).
fn inotify_on(
    cx: &WatchContext<'_>,
    path: &RelPath,
    dir: &OwnedFd,
    w: &mut DirWatch,
) -> Result<Option<OwnedFd>, FsError> {
    let ino = match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(Errno::NOSYS | Errno::MFILE | Errno::NFILE | Errno::NOMEM) => return Ok(None),
        Err(e) => return Err(io_err(path, "start watching")(e)),
    };
    let mask = WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::EXCL_UNLINK
        | WatchFlags::ONLYDIR;
    // No IN_DONT_FOLLOW here: the /proc entry is itself a (magic) link to our handle.
    let by_handle = format!("/proc/self/fd/{}", dir.as_raw_fd());
    match inotify::add_watch(&ino, by_handle.as_str(), mask) {
        Ok(_) => return Ok(Some(ino)),
        Err(Errno::NOSPC | Errno::NOMEM) => return Ok(None),
        Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS) => {} // no /proc: try by path below
        Err(e) => return Err(io_err(path, "start watching")(e)),
    }
    let mut by_path = cx.root_path.as_os_str().as_encoded_bytes().to_vec();
    if !path.is_root() {
        by_path.push(b'/');
        by_path.extend_from_slice(path.as_bytes());
    }
    match inotify::add_watch(&ino, by_path.as_slice(), mask | WatchFlags::DONT_FOLLOW) {
        // Accept the path-placed watch only if the path still names our directory.
        Ok(_) if w.resolves_to_same() => Ok(Some(ino)),
        Ok(_) | Err(Errno::NOSPC | Errno::NOMEM | Errno::NOENT | Errno::NOTDIR) => Ok(None),
        Err(e) => Err(io_err(path, "start watching")(e)),
    }
}

/// Order-independent summary of the children's metadata (for the poll fallback);
/// `None` when the directory has been removed.
fn fingerprint(dir: &OwnedFd, path: &RelPath, hidden: &HiddenSet) -> Result<Option<u64>, Errno> {
    let st = fs::fstat(dir)?;
    if st.st_nlink == 0 {
        return Ok(None);
    }
    let mut names = Vec::new();
    // A fresh open description: a duplicate would share (and keep) the read offset.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut d = Dir::new(fs::openat(dir, c".", flags, Mode::empty())?)?;
    while let Some(ent) = d.read() {
        let name = ent?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." && !hidden.hides_child(path, &name) {
            names.push(name);
        }
    }
    names.sort_unstable();
    // The directory's own times are left out: they move for hidden children too.
    let mut h = DefaultHasher::new();
    for name in names {
        if let Ok(st) = fs::statat(dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
            let s = FileStamp::of(&st);
            (name, s.ino, s.mode, s.size, s.mtime, s.ctime).hash(&mut h);
        }
    }
    Ok(Some(h.finish()))
}

impl DirWatch {
    /// Identity of the watched directory when the watch was set (as in a listing).
    pub fn directory_identity(&self) -> &str {
        &self.identity
    }

    /// True when this watch uses the metadata poll rather than inotify.
    pub fn is_polling(&self) -> bool {
        matches!(self.backend, Some(Backend::Poll { .. }))
    }

    /// A handle that closes this watch from another thread, waking a `next` in progress.
    pub fn closer(&self) -> WatchCloser {
        WatchCloser(Arc::clone(&self.signal))
    }

    fn is_closed(&self) -> bool {
        self.signal.closed.load(Ordering::Acquire)
    }

    /// Waits up to `timeout` for a change; see [`WatchEvent`]. Once `Unavailable` (also after
    /// a [`WatchCloser::close`]), always so.
    pub fn next(&mut self, timeout: Duration) -> Result<WatchEvent, FsError> {
        if self.is_closed() {
            return Ok(self.give_up());
        }
        if self.backend.is_none() {
            return Ok(WatchEvent::Unavailable);
        }
        let deadline = Instant::now() + timeout.min(WATCH_TIMEOUT_MAX);
        if !self.resolves_to_same() {
            return Ok(self.give_up());
        }
        loop {
            match self.collect()? {
                Seen::Gone => return Ok(self.give_up()),
                Seen::Changed => return Ok(WatchEvent::Changed),
                Seen::Nothing => {}
            }
            let now = Instant::now();
            if now >= deadline {
                if !self.resolves_to_same() {
                    return Ok(self.give_up());
                }
                return Ok(WatchEvent::Timeout);
            }
            let step = match self.backend {
                Some(Backend::Poll { .. }) => WATCH_POLL_INTERVAL_MS,
                _ => WATCH_RECHECK_MS,
            };
            self.wait((deadline - now).min(Duration::from_millis(step)))?;
            if self.is_closed() {
                return Ok(self.give_up());
            }
            if self.checked_at.elapsed() >= Duration::from_millis(WATCH_RECHECK_MS)
                && !self.resolves_to_same()
            {
                return Ok(self.give_up());
            }
        }
    }

    /// Releases the watch and its handles now.
    pub fn close(self) {
        drop(self);
    }

    fn give_up(&mut self) -> WatchEvent {
        // Release the kernel watch at once; the answer stays Unavailable.
        self.backend = None;
        WatchEvent::Unavailable
    }

    /// Resolves the path again from the root; false when it no longer names the directory.
    fn resolves_to_same(&mut self) -> bool {
        self.checked_at = Instant::now();
        match open_dir(self.mode, self.root.as_fd(), &self.hidden, &self.path) {
            Ok(fd) => directory_identity(fd.as_fd()).is_ok_and(|(id, _)| id == self.identity),
            // Out of handles says nothing about the directory: ask again later.
            Err(e) if e.kind() == ErrorKind::Busy => true,
            Err(_) => false,
        }
    }

    fn collect(&mut self) -> Result<Seen, FsError> {
        match &mut self.backend {
            None => Ok(Seen::Gone),
            Some(Backend::Inotify { fd, buf }) => {
                let mut seen = Seen::Nothing;
                let mut reader = inotify::Reader::new(&*fd, buf);
                loop {
                    let ev = match reader.next() {
                        Ok(ev) => ev,
                        Err(Errno::AGAIN) => break,
                        Err(Errno::INTR) => continue,
                        Err(e) => return Err(io_err(&self.path, "read directory events")(e)),
                    };
                    let flags = ev.events();
                    if flags.intersects(
                        ReadFlags::DELETE_SELF
                            | ReadFlags::MOVE_SELF
                            | ReadFlags::IGNORED
                            | ReadFlags::UNMOUNT,
                    ) {
                        seen = Seen::Gone;
                    } else if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                        if !matches!(seen, Seen::Gone) {
                            seen = Seen::Changed;
                        }
                    } else {
                        let hidden = ev
                            .file_name()
                            .is_some_and(|n| self.hidden.hides_child(&self.path, n.to_bytes()));
                        if !hidden && matches!(seen, Seen::Nothing) {
                            seen = Seen::Changed;
                        }
                    }
                }
                Ok(seen)
            }
            Some(Backend::Poll {
                dir,
                fingerprint: last,
            }) => {
                let now = fingerprint(dir, &self.path, &self.hidden)
                    .map_err(io_err(&self.path, "inspect directory"))?;
                match now {
                    None => Ok(Seen::Gone),
                    Some(fp) if Some(fp) != *last => {
                        *last = Some(fp);
                        Ok(Seen::Changed)
                    }
                    Some(_) => Ok(Seen::Nothing),
                }
            }
        }
    }

    /// Sleeps for `d`, or until inotify has events or the watch is closed.
    fn wait(&mut self, d: Duration) -> Result<(), FsError> {
        let ts = Timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(d.subsec_nanos()),
        };
        let inotify = match &self.backend {
            Some(Backend::Inotify { fd, .. }) => Some(fd),
            _ => None,
        };
        let waited = match (inotify, &self.signal.wake) {
            (Some(i), Some(w)) => poll(
                &mut [PollFd::new(i, PollFlags::IN), PollFd::new(w, PollFlags::IN)],
                Some(&ts),
            ),
            (Some(fd), None) | (None, Some(fd)) => {
                poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&ts))
            }
            (None, None) => {
                std::thread::sleep(d);
                Ok(0)
            }
        };
        match waited {
            Ok(_) | Err(Errno::INTR) => Ok(()),
            Err(e) => Err(io_err(&self.path, "wait for directory events")(e)),
        }
    }
}
