//! The engine's one error type: every failure says what went wrong, where, and what to do.

use std::fmt;
use std::path::PathBuf;

/// Coarse classification shared by every Logbook crate, so the API layer maps errors to wire
/// codes without matching on variants.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request is malformed or names something impossible.
    InvalidArgument,
    /// The named Session, invocation, interaction or row does not exist.
    NotFound,
    /// The request contradicts stored state (a reused operation, a settled invocation).
    Conflict,
    /// Another process holds the Root.
    Busy,
    /// The request is understood but not supported.
    Unsupported,
    /// A file was written by another format version.
    UnsupportedFormat,
    /// The operating system refused access.
    PermissionDenied,
    /// Stored bytes are damaged.
    Corrupt,
    /// Any other input/output failure.
    Io,
}

impl ErrorKind {
    /// The kind's name as the wire spells error codes (`invalid_argument`, `corrupt`, ...).
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Busy => "busy",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::UnsupportedFormat => "unsupported_format",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Io => "io",
        }
    }
}

/// Every failure of `logbook-engine`.
#[non_exhaustive]
#[derive(Debug)]
pub enum EngineError {
    /// A request parameter is wrong; `message` says which and how to fix it.
    InvalidArgument { message: String },
    /// Something named by the request does not exist.
    NotFound { what: String },
    /// The request contradicts what is stored.
    Conflict { message: String },
    /// Another process (or another open handle) holds the Root's writer lock.
    Busy { path: PathBuf },
    /// The request is valid but this build does not implement it.
    Unsupported { message: String },
    /// A file carries another format version; nothing was changed.
    UnsupportedFormat {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    /// The directory given to `init` is not empty; nothing was touched.
    NotEmpty { path: PathBuf },
    /// Stored bytes are damaged.
    Corrupt { path: PathBuf, reason: String },
    /// A file given to be read in (a bundle) is damaged, truncated or not of its kind;
    /// nothing was changed.
    CorruptInput { path: PathBuf, reason: String },
    /// The operating system refused access.
    PermissionDenied {
        path: PathBuf,
        op: &'static str,
        source: std::io::Error,
    },
    /// Any other input/output failure.
    Io {
        path: PathBuf,
        op: &'static str,
        source: std::io::Error,
    },
    /// The Root was opened read-only (a reader beside its writer): nothing may change it.
    ReadOnly { path: PathBuf },
    /// The log layer failed.
    Log(logbook_log::LogError),
    /// The index layer failed (indexes are derived; this is only reported when rebuilding failed too).
    Index(logbook_index::IndexError),
}

impl EngineError {
    /// The wire classification of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            EngineError::NotFound { .. } => ErrorKind::NotFound,
            EngineError::Conflict { .. } | EngineError::NotEmpty { .. } => ErrorKind::Conflict,
            EngineError::Busy { .. } => ErrorKind::Busy,
            EngineError::Unsupported { .. } => ErrorKind::Unsupported,
            EngineError::UnsupportedFormat { .. } => ErrorKind::UnsupportedFormat,
            EngineError::Corrupt { .. } | EngineError::CorruptInput { .. } => ErrorKind::Corrupt,
            EngineError::PermissionDenied { .. } | EngineError::ReadOnly { .. } => {
                ErrorKind::PermissionDenied
            }
            EngineError::Io { .. } => ErrorKind::Io,
            EngineError::Log(e) => map_log_kind(e.kind()),
            EngineError::Index(e) => map_index_kind(e.kind()),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> EngineError {
        EngineError::InvalidArgument {
            message: message.into(),
        }
    }

    pub(crate) fn not_found(what: impl Into<String>) -> EngineError {
        EngineError::NotFound { what: what.into() }
    }

    pub(crate) fn conflict(message: impl Into<String>) -> EngineError {
        EngineError::Conflict {
            message: message.into(),
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> EngineError {
        EngineError::Corrupt {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(
        path: impl Into<PathBuf>,
        op: &'static str,
        source: std::io::Error,
    ) -> EngineError {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::PermissionDenied {
            EngineError::PermissionDenied { path, op, source }
        } else {
            EngineError::Io { path, op, source }
        }
    }
}

/// `EMFILE`: the process has as many descriptors open as its limit allows.
const EMFILE: i32 = 24;
/// `ENFILE`: the whole system is out of open file descriptions.
const ENFILE: i32 = 23;

impl EngineError {
    /// True when this failure (or one it wraps, through the log or index layer) is the
    /// process or the system running out of file descriptors: the Root then gives idle
    /// Sessions back and tries again instead of answering it (see `Shared::with_descriptors`).
    pub(crate) fn is_out_of_descriptors(&self) -> bool {
        let mut at: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = at {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if matches!(io.raw_os_error(), Some(EMFILE | ENFILE)) {
                    return true;
                }
            }
            at = e.source();
        }
        false
    }

    /// True when a derived index entry (or the checkpoint's maps) failed its checksum as it was
    /// read: the Session it belongs to was marked for a rebuild (its next use opens it again
    /// from the log), so the request may be tried once more (see `Shared::with_descriptors`).
    pub(crate) fn is_index_damage(&self) -> bool {
        matches!(
            self,
            EngineError::Index(logbook_index::IndexError::ChecksumMismatch { .. })
        )
    }
}

fn map_log_kind(kind: logbook_log::ErrorKind) -> ErrorKind {
    use logbook_log::ErrorKind as K;
    match kind {
        K::InvalidArgument => ErrorKind::InvalidArgument,
        K::NotFound => ErrorKind::NotFound,
        K::Conflict => ErrorKind::Conflict,
        K::Busy => ErrorKind::Busy,
        K::Unsupported => ErrorKind::Unsupported,
        K::UnsupportedFormat => ErrorKind::UnsupportedFormat,
        K::PermissionDenied => ErrorKind::PermissionDenied,
        K::Corrupt => ErrorKind::Corrupt,
        _ => ErrorKind::Io,
    }
}

fn map_index_kind(kind: logbook_index::ErrorKind) -> ErrorKind {
    use logbook_index::ErrorKind as K;
    match kind {
        K::InvalidArgument => ErrorKind::InvalidArgument,
        K::NotFound => ErrorKind::NotFound,
        K::Conflict => ErrorKind::Conflict,
        K::Busy => ErrorKind::Busy,
        K::Unsupported => ErrorKind::Unsupported,
        K::UnsupportedFormat => ErrorKind::UnsupportedFormat,
        K::PermissionDenied => ErrorKind::PermissionDenied,
        K::Corrupt => ErrorKind::Corrupt,
        _ => ErrorKind::Io,
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::InvalidArgument { message } => write!(f, "invalid argument: {message}"),
            EngineError::NotFound { what } => write!(f, "not found: {what}"),
            EngineError::Conflict { message } => write!(f, "conflict: {message}"),
            EngineError::Busy { path } => write!(
                f,
                "the Root {} is open in another process (or handle); close it there or wait, then retry",
                path.display()
            ),
            EngineError::Unsupported { message } => write!(f, "unsupported: {message}"),
            EngineError::UnsupportedFormat { path, found, expected } => write!(
                f,
                "{} was written in format version {found}, this build reads version {expected}; \
                 nothing was migrated or deleted: use a build that reads version {found}, or init a new empty Root",
                path.display()
            ),
            EngineError::NotEmpty { path } => write!(
                f,
                "{} exists and is not empty; init needs an absent or empty directory (nothing was touched)",
                path.display()
            ),
            EngineError::CorruptInput { path, reason } => {
                write!(f, "{} is not a sound bundle: {reason}; nothing was imported", path.display())
            }
            EngineError::Corrupt { path, reason } => {
                write!(f, "damaged data in {}: {reason}; run verify and restore from a copy", path.display())
            }
            EngineError::PermissionDenied { path, op, source } => {
                write!(f, "permission denied to {op} {}: {source}", path.display())
            }
            EngineError::Io { path, op, source } => write!(f, "could not {op} {}: {source}", path.display()),
            EngineError::ReadOnly { path } => write!(
                f,
                "the Root {} is open read-only (a reader beside its writer): send changes to the process that writes it",
                path.display()
            ),
            EngineError::Log(e) => write!(f, "log: {e}"),
            EngineError::Index(e) => write!(f, "index: {e}"),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::PermissionDenied { source, .. } | EngineError::Io { source, .. } => {
                Some(source)
            }
            EngineError::Log(e) => Some(e),
            EngineError::Index(e) => Some(e),
            _ => None,
        }
    }
}

impl From<logbook_log::LogError> for EngineError {
    fn from(e: logbook_log::LogError) -> Self {
        EngineError::Log(e)
    }
}

impl From<logbook_index::IndexError> for EngineError {
    fn from(e: logbook_index::IndexError) -> Self {
        EngineError::Index(e)
    }
}
