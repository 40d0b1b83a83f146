//! `logbook-fs`: read-only access to a Session's workspace directory.
//!
//! A [`Workspace`] holds one handle on the workspace root and answers three questions
//! about it: what are the direct children of a directory ([`Workspace::list`]), what
//! are the complete bytes of a regular file ([`Workspace::read`]), and has a
//! directory changed ([`Workspace::watch`]).
//!
//! Invariants, for every operation:
//! - Paths are exact relative bytes ([`RelPath`]); `..`, `.`, empty components, NUL
//!   bytes and absolute paths are refused before any system call.
//! - Every path is resolved from the root handle with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, or, where the kernel lacks it, one
//!   component at a time with `O_NOFOLLOW`. No symbolic link is followed at any
//!   component, so nothing outside the workspace is ever opened.
//! - `.git` and `.logbook` (at any depth) and the caller's hidden paths are never
//!   listed, read or watched; asking for one is [`FsError::Hidden`].
//! - Non-regular files (FIFOs, sockets, devices, directories, links) are never opened
//!   for reading.
//! - A file's [`Content::version`] binds its size, SHA-256 digest, device, inode and
//!   path; bytes are returned only if the file did not move while it was read.
//!
//! `docs/workspace.md` describes resolution and versions in more detail.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use logbook_fs::{ReadOutcome, RelPath, Workspace};
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("notes.txt"), "hello")?;
//! let ws = Workspace::open(dir.path(), &[])?;
//! let page = ws.list(&RelPath::root(), None)?;
//! assert_eq!(page.entries[0].name, b"notes.txt");
//! match ws.read(&RelPath::parse(b"notes.txt")?, None)? {
//!     ReadOutcome::Content(c) => assert_eq!(c.bytes, b"hello"),
//!     other => panic!("unexpected {other:?}"),
//! }
//! # Ok(()) }
//! ```

mod error;
mod hex;
mod identity;
mod list;
mod path;
mod read;
mod resolve;
mod watch;

use std::path::{Path, PathBuf};

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{self as rfs, FileType, Mode, OFlags};
use rustix::io::Errno;

pub use error::{ErrorKind, FsError};
pub use list::{
    Entry, EntryKind, ListPage, DIR_ENTRIES_MAX, LIST_CACHE_RACY_SECS, PAGE_BYTES_SOFT_MAX,
    PAGE_ENTRIES_MAX,
};
pub use path::{HiddenSet, RelPath, ALWAYS_HIDDEN_NAMES, NAME_BYTES_MAX, PATH_BYTES_MAX};
pub use read::{
    file_version, Content, ReadOutcome, ReadPipeline, CHUNK_BYTES_MAX, READ_ATTEMPTS_MAX,
    READ_FILE_BYTES_MAX, READ_PIPELINE_BYTES_MIN,
};
pub use resolve::{openat2_available, ResolverMode};
pub use watch::{
    DirWatch, WatchCloser, WatchEvent, WatcherMode, WATCH_POLL_INTERVAL_MS, WATCH_RECHECK_MS,
};

/// Tunables of a [`Workspace`]; `Default` is what production uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceOptions {
    /// Which resolver to use (force the per-component walk in tests).
    pub resolver: ResolverMode,
    /// How to watch directories (force the metadata poll in tests).
    pub watcher: WatcherMode,
    /// Largest file [`Workspace::read`] returns, in bytes.
    pub read_bytes_max: u64,
    /// Soft size target of a listing page, in estimated wire bytes.
    pub page_bytes_max: usize,
    /// Whether large reads hash on a second thread.
    pub read_pipeline: ReadPipeline,
}

impl Default for WorkspaceOptions {
    fn default() -> Self {
        WorkspaceOptions {
            resolver: ResolverMode::Auto,
            watcher: WatcherMode::Auto,
            read_bytes_max: READ_FILE_BYTES_MAX,
            page_bytes_max: PAGE_BYTES_SOFT_MAX,
            read_pipeline: ReadPipeline::Auto,
        }
    }
}

/// One workspace root, opened once; all operations resolve beneath its handle.
#[derive(Debug)]
pub struct Workspace {
    root: OwnedFd,
    root_path: PathBuf,
    hidden: HiddenSet,
    options: WorkspaceOptions,
}

impl Workspace {
    /// Opens the workspace at `root` (absolute; its last component must not be a link).
    /// `hidden` are extra relative paths that are never listed or read.
    pub fn open(root: &Path, hidden: &[Vec<u8>]) -> Result<Workspace, FsError> {
        Workspace::open_with(root, hidden, WorkspaceOptions::default())
    }

    /// [`Workspace::open`] with explicit options.
    pub fn open_with(
        root: &Path,
        hidden: &[Vec<u8>],
        options: WorkspaceOptions,
    ) -> Result<Workspace, FsError> {
        let refuse = |reason: String| FsError::InvalidRoot {
            root: root.to_path_buf(),
            reason,
        };
        if !root.is_absolute() {
            return Err(refuse("the root must be an absolute path".into()));
        }
        let hidden = HiddenSet::new(hidden)?;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::open(root, flags, Mode::empty()).map_err(|e| match e {
            Errno::NOTDIR | Errno::LOOP => {
                refuse("it is not a directory (a symbolic link is not accepted)".into())
            }
            Errno::NOENT => refuse("it does not exist".into()),
            e => refuse(format!("it cannot be opened: {e}")),
        })?;
        let st = rfs::fstat(&fd).map_err(|e| refuse(format!("it cannot be inspected: {e}")))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(refuse(
                "it is not a directory (a symbolic link is not accepted)".into(),
            ));
        }
        Ok(Workspace {
            root: fd,
            root_path: root.to_path_buf(),
            hidden,
            options,
        })
    }

    /// The root as given to `open`.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// One page of the direct children of `path`, sorted by name bytes, starting after
    /// the cursor `after` (from a previous page's `next` for the same directory).
    pub fn list(&self, path: &RelPath, after: Option<&str>) -> Result<ListPage, FsError> {
        let cx = list::ListContext {
            mode: self.options.resolver,
            root: self.root.as_fd(),
            hidden: &self.hidden,
            page_bytes_max: self.options.page_bytes_max,
        };
        list::list(&cx, path, after)
    }

    /// The complete bytes of the regular file at `path`; `expected_version` that does
    /// not match the current version gives [`ReadOutcome::Changed`].
    pub fn read(
        &self,
        path: &RelPath,
        expected_version: Option<&str>,
    ) -> Result<ReadOutcome, FsError> {
        let cx = read::ReadContext {
            mode: self.options.resolver,
            root: self.root.as_fd(),
            hidden: &self.hidden,
            bytes_max: self.options.read_bytes_max,
            pipeline: self.options.read_pipeline,
        };
        read::read(&cx, path, expected_version)
    }

    /// Starts watching the directory at `path`; ready when this returns.
    pub fn watch(&self, path: &RelPath) -> Result<DirWatch, FsError> {
        let cx = watch::WatchContext {
            mode: self.options.resolver,
            root: self.root.as_fd(),
            root_path: &self.root_path,
            hidden: &self.hidden,
            watcher: self.options.watcher,
        };
        watch::watch(&cx, path)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn handles_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<super::Workspace>();
        send::<super::DirWatch>();
        send_sync::<super::WatchCloser>();
    }
}
