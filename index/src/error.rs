//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A coarse classification shared by every Logbook crate, so callers can map an
/// error to a wire code without matching on variants.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller passed something this crate refuses.
    InvalidArgument,
    /// A file or entry does not exist.
    NotFound,
    /// The operation conflicts with existing state.
    Conflict,
    /// Someone else holds the resource.
    Busy,
    /// The operation is not supported here.
    Unsupported,
    /// The file is foreign, newer, or has a different shape: rebuild it.
    UnsupportedFormat,
    /// The operating system refused access.
    PermissionDenied,
    /// Bytes on disk fail a check: rebuild the file.
    Corrupt,
    /// Any other input/output failure.
    Io,
}

/// Everything that can go wrong in `logbook-index`.
///
/// Index files are derived data: every `Corrupt` / `UnsupportedFormat` error
/// means "rebuild this file from the log", never "the data is lost".
#[non_exhaustive]
#[derive(Debug)]
pub enum IndexError {
    /// A system call failed.
    Io {
        /// File the call was about.
        path: PathBuf,
        /// What was being done (`"open"`, `"pwrite"`, `"fdatasync"`, ...).
        op: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// The file does not start with this file type's magic bytes.
    ForeignFile {
        /// The file.
        path: PathBuf,
        /// The magic this file type carries.
        expected: [u8; 8],
        /// The first bytes found (fewer when the file is shorter).
        found: Vec<u8>,
    },
    /// The file carries a format version this build does not read.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version found in the header.
        found: u32,
        /// The only version this build reads.
        supported: u32,
    },
    /// A stored checksum does not match the bytes it covers.
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// Offset of the covered bytes.
        offset: u64,
        /// Checksum stored in the file.
        expected: u32,
        /// Checksum computed from the bytes.
        got: u32,
    },
    /// A structural check failed (bad length, out-of-bounds offset, bad encoding).
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Offset where the problem was found.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A fixed-width index file has a different tag or entry width than asked for.
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// Tag the caller asked for.
        expected_tag: [u8; 4],
        /// Tag found in the file.
        found_tag: [u8; 4],
        /// Width the caller asked for.
        expected_width: u32,
        /// Width found in the file.
        found_width: u32,
    },
    /// A postings file was built with another Unicode version's folding.
    UnicodeMismatch {
        /// The file.
        path: PathBuf,
        /// Unicode version recorded in the file.
        found: String,
        /// Unicode version of this build's tables.
        expected: &'static str,
    },
    /// The caller passed an argument out of range.
    InvalidArgument {
        /// What is wrong with it.
        reason: String,
    },
    /// An earlier write or sync failed; the in-memory state may no longer match
    /// the disk. Reopen the file (or rebuild it).
    Poisoned {
        /// The file.
        path: PathBuf,
    },
}

impl IndexError {
    /// The coarse class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            IndexError::Io { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => ErrorKind::NotFound,
                io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::Io,
            },
            IndexError::ForeignFile { .. }
            | IndexError::UnsupportedVersion { .. }
            | IndexError::ShapeMismatch { .. }
            | IndexError::UnicodeMismatch { .. } => ErrorKind::UnsupportedFormat,
            IndexError::ChecksumMismatch { .. } | IndexError::Corrupt { .. } => ErrorKind::Corrupt,
            IndexError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            IndexError::Poisoned { .. } => ErrorKind::Io,
        }
    }

    pub(crate) fn io(path: &std::path::Path, op: &'static str, source: io::Error) -> IndexError {
        IndexError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }

    pub(crate) fn corrupt(
        path: &std::path::Path,
        offset: u64,
        reason: impl Into<String>,
    ) -> IndexError {
        IndexError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Io { path, op, source } => {
                write!(f, "{op} {}: {source}", path.display())
            }
            IndexError::ForeignFile { path, expected, found } => write!(
                f,
                "{} is not a Logbook index file of this type (magic {:?}, expected {:?}); rebuild it",
                path.display(),
                String::from_utf8_lossy(found),
                String::from_utf8_lossy(expected)
            ),
            IndexError::UnsupportedVersion { path, found, supported } => write!(
                f,
                "{} has index format version {found}, this build reads only version {supported}; rebuild it",
                path.display()
            ),
            IndexError::ChecksumMismatch { path, offset, expected, got } => write!(
                f,
                "{}: checksum mismatch at offset {offset} (stored {expected:#010x}, computed {got:#010x}); rebuild it",
                path.display()
            ),
            IndexError::Corrupt { path, offset, reason } => {
                write!(f, "{}: damaged at offset {offset}: {reason}; rebuild it", path.display())
            }
            IndexError::ShapeMismatch { path, expected_tag, found_tag, expected_width, found_width } => {
                write!(
                    f,
                    "{}: holds tag {:?} width {found_width}, expected tag {:?} width {expected_width}; rebuild it",
                    path.display(),
                    String::from_utf8_lossy(found_tag),
                    String::from_utf8_lossy(expected_tag)
                )
            }
            IndexError::UnicodeMismatch { path, found, expected } => write!(
                f,
                "{}: built with Unicode {found} case folding, this build folds with Unicode {expected}; rebuild it",
                path.display()
            ),
            IndexError::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            IndexError::Poisoned { path } => write!(
                f,
                "{}: an earlier write or sync failed; reopen the index before writing again",
                path.display()
            ),
        }
    }
}

impl std::error::Error for IndexError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IndexError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
