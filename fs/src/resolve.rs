//! Opening a path beneath the workspace root without following any symbolic link.
//!
//! First choice is one `openat2` call with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS`: the kernel refuses every symlink (ELOOP) and every escape
//! (EXDEV) atomically. Where the kernel lacks `openat2` (ENOSYS, or EPERM from a
//! sandbox before it ever worked) the fallback walks one component at a time with
//! `openat(.., O_PATH | O_DIRECTORY | O_NOFOLLOW)` from the handle already held, and
//! opens the leaf with `O_NOFOLLOW`. Both mechanisms see `..`, `.`, `/` and NUL only
//! after [`crate::RelPath::parse`] refused them.

use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::path::RelPath;

/// How often `openat2` is retried when the kernel reports a concurrent rename (EAGAIN).
const OPENAT2_EAGAIN_RETRIES_MAX: u32 = 8;

const OPENAT2_UNKNOWN: u8 = 0;
const OPENAT2_WORKS: u8 = 1;
const OPENAT2_MISSING: u8 = 2;
/// Process-wide: whether `openat2` has been seen to work or to be missing.
static OPENAT2_STATE: AtomicU8 = AtomicU8::new(OPENAT2_UNKNOWN);

/// Which resolver a [`crate::Workspace`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ResolverMode {
    /// `openat2` where the kernel has it, the per-component walk otherwise.
    #[default]
    Auto,
    /// Always the per-component walk (what a kernel without `openat2` gets); for tests.
    PerComponent,
}

/// Why a path could not be opened, before it is turned into an error or an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResolveFailure {
    /// Some component does not exist.
    NotFound,
    /// A component (or the leaf) is a symbolic link.
    Symlink,
    /// A component that must be a directory is something else.
    NotDirectory,
    /// Any other errno (EACCES, EXDEV, ENAMETOOLONG, ENXIO, EIO…).
    Errno(Errno),
}

/// Opens `path` beneath `root` with `flags` (plus `O_NOFOLLOW | O_CLOEXEC`).
pub(crate) fn open_beneath(
    mode: ResolverMode,
    root: BorrowedFd<'_>,
    path: &RelPath,
    flags: OFlags,
) -> Result<OwnedFd, ResolveFailure> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if path.is_root() {
        // "." of a directory handle cannot be a link: the handle is already resolved.
        return fs::openat(root, c".", flags, Mode::empty()).map_err(classify_plain);
    }
    if mode == ResolverMode::Auto && OPENAT2_STATE.load(Ordering::Relaxed) != OPENAT2_MISSING {
        match via_openat2(root, path, flags) {
            Some(result) => return result,
            None => OPENAT2_STATE.store(OPENAT2_MISSING, Ordering::Relaxed),
        }
    }
    per_component(root, path, flags)
}

/// `None` when `openat2` is unavailable on this kernel.
fn via_openat2(
    root: BorrowedFd<'_>,
    path: &RelPath,
    flags: OFlags,
) -> Option<Result<OwnedFd, ResolveFailure>> {
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let mut last = Errno::AGAIN;
    for _ in 0..OPENAT2_EAGAIN_RETRIES_MAX {
        match fs::openat2(root, path.as_bytes(), flags, Mode::empty(), how) {
            Ok(fd) => {
                OPENAT2_STATE.store(OPENAT2_WORKS, Ordering::Relaxed);
                return Some(Ok(fd));
            }
            Err(Errno::AGAIN) => last = Errno::AGAIN,
            Err(Errno::NOSYS) => return None,
            // Some sandboxes answer EPERM for syscalls they filter; trust that only
            // while openat2 has never worked in this process.
            Err(Errno::PERM) if OPENAT2_STATE.load(Ordering::Relaxed) == OPENAT2_UNKNOWN => {
                return None
            }
            Err(Errno::LOOP) => return Some(Err(ResolveFailure::Symlink)),
            // `O_DIRECTORY` on a link leaf gives ENOTDIR before NO_SYMLINKS is consulted;
            // the no-follow walk tells a link from a file (and is equally safe).
            Err(Errno::NOTDIR) => return Some(per_component(root, path, flags)),
            Err(e) => return Some(Err(classify_plain(e))),
        }
    }
    Some(Err(ResolveFailure::Errno(last)))
}

fn per_component(
    root: BorrowedFd<'_>,
    path: &RelPath,
    flags: OFlags,
) -> Result<OwnedFd, ResolveFailure> {
    let parts: Vec<&[u8]> = path.components().collect();
    let (leaf, dirs) = parts
        .split_last()
        .expect("a non-root RelPath has at least one component");
    let mut held: Option<OwnedFd> = None;
    for name in dirs {
        let at = held.as_ref().map_or(root, |f| f.as_fd());
        let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match fs::openat(at, *name, step, Mode::empty()) {
            Ok(fd) => held = Some(fd),
            Err(e) => return Err(explain(at, name, e)),
        }
    }
    let at = held.as_ref().map_or(root, |f| f.as_fd());
    fs::openat(at, *leaf, flags, Mode::empty()).map_err(|e| explain(at, leaf, e))
}

/// A no-follow `openat` reports a symlink as ELOOP (plain leaf) or ENOTDIR
/// (`O_DIRECTORY`); `lstat` of the name tells a link from a file.
fn explain(at: BorrowedFd<'_>, name: &[u8], e: Errno) -> ResolveFailure {
    match e {
        Errno::LOOP => ResolveFailure::Symlink,
        Errno::NOTDIR => match fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                ResolveFailure::Symlink
            }
            _ => ResolveFailure::NotDirectory,
        },
        other => classify_plain(other),
    }
}

fn classify_plain(e: Errno) -> ResolveFailure {
    match e {
        Errno::NOENT => ResolveFailure::NotFound,
        Errno::LOOP => ResolveFailure::Symlink,
        Errno::NOTDIR => ResolveFailure::NotDirectory,
        other => ResolveFailure::Errno(other),
    }
}

/// Whether `openat2` has been found missing in this process (for tests and reports).
pub fn openat2_available() -> bool {
    OPENAT2_STATE.load(Ordering::Relaxed) != OPENAT2_MISSING
}
