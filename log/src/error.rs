//! The crate's one error type. Foreign errors (io, zstd) are converted here, at the edge.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What went wrong, in the coarse classes every Logbook crate shares, so callers can map an
/// error to a wire code without matching on variants.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller passed something the log cannot accept (empty batch, oversized record, ...).
    InvalidArgument,
    /// The directory or the requested record does not exist.
    NotFound,
    /// The directory is not empty where an empty one was required.
    Conflict,
    /// Someone else holds a resource.
    Busy,
    /// The operation is not supported.
    Unsupported,
    /// A file is foreign or of another format version.
    UnsupportedFormat,
    /// The operating system refused access.
    PermissionDenied,
    /// Bytes on disk are damaged.
    Corrupt,
    /// An I/O operation failed, or the log is poisoned by an earlier failure.
    Io,
}

/// Every error of `logbook-log`. Each variant carries what a person needs to act on it.
#[non_exhaustive]
#[derive(Debug)]
pub enum LogError {
    /// Damaged bytes: the file and the offset of the first bad byte or frame.
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Offset in the file (or, for records, in the segment's logical stream).
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// A log file with a format version this build does not read.
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The version found in its header.
        found: u32,
        /// The version this build reads and writes.
        expected: u32,
    },
    /// A file whose magic bytes are not those of a log file.
    NotALogFile {
        /// The file.
        path: PathBuf,
        /// The first bytes found (up to 8).
        found: Vec<u8>,
    },
    /// An earlier write or sync failed; appends are refused until the log is reopened.
    Poisoned {
        /// What failed first.
        cause: String,
    },
    /// A system call failed.
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// What was being done (`"fdatasync"`, `"write"`, ...).
        op: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// The caller passed something the log cannot accept.
    InvalidArgument {
        /// Why it is refused.
        reason: String,
    },
    /// `create` was given a directory that is not empty.
    NotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// `open` was given a directory holding no segment.
    NoLog {
        /// The directory.
        path: PathBuf,
    },
}

impl LogError {
    /// The coarse class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LogError::Corrupt { .. } => ErrorKind::Corrupt,
            LogError::UnsupportedFormat { .. } | LogError::NotALogFile { .. } => {
                ErrorKind::UnsupportedFormat
            }
            LogError::Poisoned { .. } => ErrorKind::Io,
            LogError::Io { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => ErrorKind::NotFound,
                io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::Io,
            },
            LogError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            LogError::NotEmpty { .. } => ErrorKind::Conflict,
            LogError::NoLog { .. } => ErrorKind::NotFound,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> LogError {
        LogError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn corrupt(
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> LogError {
        LogError::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> LogError {
        LogError::InvalidArgument {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Corrupt {
                path,
                offset,
                reason,
            } => write!(
                f,
                "corrupt log file {} at offset {offset}: {reason}; the file is kept as it is, \
                 restore it from a copy or inspect it",
                path.display()
            ),
            LogError::UnsupportedFormat {
                path,
                found,
                expected,
            } => write!(
                f,
                "{} has log format version {found}, this build reads version {expected}; \
                 nothing was changed, use a build that reads version {found}",
                path.display()
            ),
            LogError::NotALogFile { path, found } => write!(
                f,
                "{} is not a log segment (magic bytes {found:02x?}); nothing was changed",
                path.display()
            ),
            LogError::Poisoned { cause } => write!(
                f,
                "the log refuses appends after an earlier failure ({cause}); reopen it to recover"
            ),
            LogError::Io { path, op, source } => {
                write!(f, "{op} failed on {}: {source}", path.display())
            }
            LogError::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            LogError::NotEmpty { path } => write!(
                f,
                "{} is not empty; a new log needs an absent or empty directory",
                path.display()
            ),
            LogError::NoLog { path } => {
                write!(
                    f,
                    "{} holds no log segment; create the log first",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
