//! The crate's one error type, converted from `rustix` errors at the edge.

use std::fmt;
use std::path::PathBuf;

use rustix::io::Errno;

/// What kind of failure an [`FsError`] is, so a caller can map it to a wire code
/// without matching on variants.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller passed something that can never work (bad path, foreign cursor).
    InvalidArgument,
    /// The named directory does not exist.
    NotFound,
    /// The state moved under the caller in a way that needs a restart.
    Conflict,
    /// A resource is temporarily exhausted.
    Busy,
    /// The object exists but this crate does not handle it (symlink component, huge file).
    Unsupported,
    /// A format this crate does not understand.
    UnsupportedFormat,
    /// The operating system, or a policy of this crate, denies access.
    PermissionDenied,
    /// Data that should be self-consistent is not.
    Corrupt,
    /// Any other operating-system failure.
    Io,
}

/// Every failure of a workspace operation, carrying the relative path bytes it concerns.
///
/// Paths are kept as exact bytes; `Display` escapes them so a message is always printable.
#[non_exhaustive]
#[derive(Debug)]
pub enum FsError {
    /// A relative path that breaks the path rules (see [`crate::RelPath::parse`]).
    InvalidPath {
        /// The bytes as given.
        path: Vec<u8>,
        /// Which rule the path breaks.
        reason: &'static str,
    },
    /// The workspace root cannot be used (relative, a symlink, not a directory, missing).
    InvalidRoot {
        /// The root as given.
        root: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// The path is `.git`, `.logbook`, inside one of them, or one of the caller's hidden paths.
    Hidden {
        /// The requested path.
        path: Vec<u8>,
    },
    /// A component of the path is a symbolic link; links are never followed.
    Symlink {
        /// The requested path.
        path: Vec<u8>,
    },
    /// The directory to list or watch does not exist.
    NotFound {
        /// The requested path.
        path: Vec<u8>,
    },
    /// The path names something that is not a directory where a directory is required.
    NotADirectory {
        /// The requested path.
        path: Vec<u8>,
    },
    /// The operating system refused access (EACCES / EPERM).
    PermissionDenied {
        /// The requested path (or the directory whose entry could not be inspected).
        path: Vec<u8>,
        /// What was being done.
        op: &'static str,
    },
    /// The kernel reported that resolution left the workspace. Lexical checks make this
    /// unreachable in practice; it is reported rather than trusted.
    Escape {
        /// The requested path.
        path: Vec<u8>,
    },
    /// The file is larger than the read limit; nothing was returned.
    TooLarge {
        /// The requested path.
        path: Vec<u8>,
        /// The size seen (at least this many bytes).
        size: u64,
        /// The limit in force, in bytes.
        limit: u64,
    },
    /// The directory has more entries than a listing will hold in memory.
    DirectoryTooLarge {
        /// The requested path.
        path: Vec<u8>,
        /// The limit in force, in entries.
        limit: u64,
    },
    /// A `next` cursor that was not made by this crate for this directory.
    BadCursor {
        /// Why it is refused.
        reason: &'static str,
    },
    /// Any other failure of a system call.
    Io {
        /// The requested path.
        path: Vec<u8>,
        /// What was being done.
        op: &'static str,
        /// The operating-system error.
        source: std::io::Error,
    },
}

impl FsError {
    /// The kind of this error; stable for callers that map errors to wire codes.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FsError::InvalidPath { .. }
            | FsError::InvalidRoot { .. }
            | FsError::BadCursor { .. } => ErrorKind::InvalidArgument,
            FsError::NotADirectory { .. } => ErrorKind::InvalidArgument,
            FsError::Hidden { .. } | FsError::PermissionDenied { .. } | FsError::Escape { .. } => {
                ErrorKind::PermissionDenied
            }
            FsError::Symlink { .. }
            | FsError::TooLarge { .. }
            | FsError::DirectoryTooLarge { .. } => ErrorKind::Unsupported,
            FsError::NotFound { .. } => ErrorKind::NotFound,
            FsError::Io { source, .. } => match source.raw_os_error().map(Errno::from_raw_os_error)
            {
                Some(Errno::MFILE) | Some(Errno::NFILE) | Some(Errno::NOMEM)
                | Some(Errno::NOSPC) => ErrorKind::Busy,
                _ => ErrorKind::Io,
            },
        }
    }

    /// Converts an errno from a call on `path` into the matching error.
    pub(crate) fn from_errno(path: &[u8], op: &'static str, errno: Errno) -> FsError {
        match errno {
            Errno::ACCESS | Errno::PERM => FsError::PermissionDenied {
                path: path.to_vec(),
                op,
            },
            Errno::NAMETOOLONG => FsError::InvalidPath {
                path: path.to_vec(),
                reason: "the system refuses the path as too long",
            },
            Errno::XDEV => FsError::Escape {
                path: path.to_vec(),
            },
            _ => FsError::Io {
                path: path.to_vec(),
                op,
                source: std::io::Error::from_raw_os_error(errno.raw_os_error()),
            },
        }
    }
}

/// Escaped form of path bytes for messages (the exact bytes stay in the variant).
pub(crate) struct Shown<'a>(pub &'a [u8]);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("<workspace root>");
        }
        write!(f, "{}", self.0.escape_ascii())
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsError::InvalidPath { path, reason } => {
                write!(f, "invalid workspace path \"{}\": {reason}", Shown(path))
            }
            FsError::InvalidRoot { root, reason } => {
                write!(
                    f,
                    "workspace root {} cannot be used: {reason}",
                    root.display()
                )
            }
            FsError::Hidden { path } => write!(
                f,
                "\"{}\" is hidden from workspace reads (.git, .logbook or a private path)",
                Shown(path)
            ),
            FsError::Symlink { path } => write!(
                f,
                "\"{}\" goes through a symbolic link; links are never followed",
                Shown(path)
            ),
            FsError::NotFound { path } => write!(f, "directory \"{}\" does not exist", Shown(path)),
            FsError::NotADirectory { path } => {
                write!(f, "\"{}\" is not a directory", Shown(path))
            }
            FsError::PermissionDenied { path, op } => {
                write!(f, "permission denied to {op} \"{}\"", Shown(path))
            }
            FsError::Escape { path } => {
                write!(
                    f,
                    "\"{}\" resolves outside the workspace; refused",
                    Shown(path)
                )
            }
            FsError::TooLarge { path, size, limit } => write!(
                f,
                "file \"{}\" has {size} bytes, over the read limit of {limit} bytes",
                Shown(path)
            ),
            FsError::DirectoryTooLarge { path, limit } => write!(
                f,
                "directory \"{}\" has more than {limit} entries; too large to list",
                Shown(path)
            ),
            FsError::BadCursor { reason } => {
                write!(
                    f,
                    "listing cursor refused: {reason}; list again without a cursor"
                )
            }
            FsError::Io { path, op, source } => {
                write!(f, "failed to {op} \"{}\": {source}", Shown(path))
            }
        }
    }
}

impl std::error::Error for FsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FsError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
