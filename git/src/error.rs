//! The crate's one error type: gix errors are turned into text here and never leave the crate.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What kind of failure an error is, so callers can map it without matching variants.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidArgument,
    NotFound,
    Conflict,
    Busy,
    Unsupported,
    UnsupportedFormat,
    PermissionDenied,
    Corrupt,
    Io,
}

/// Everything that can go wrong while reading a repository.
#[non_exhaustive]
#[derive(Debug)]
pub enum GitError {
    /// The repository uses a feature that cannot be shown faithfully without running a
    /// configured command or without machinery this crate does not have.
    Unsupported { workspace: PathBuf, reason: String },
    /// The caller passed something unusable (a path with `..`, a NUL, an empty component...).
    InvalidArgument { reason: String },
    /// The path is hidden from workspace views by the caller's rule (see [`crate::Hidden`]).
    Hidden { path: Vec<u8> },
    /// `diff` was asked about a workspace that holds no repository.
    NoRepository { workspace: PathBuf },
    /// A file of the workspace could not be read.
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    /// The repository (objects, index, refs, configuration) could not be read.
    Repository {
        workspace: PathBuf,
        op: &'static str,
        kind: ErrorKind,
        message: String,
    },
}

impl GitError {
    /// The kind, for mapping to a wire code.
    pub fn kind(&self) -> ErrorKind {
        match self {
            GitError::Unsupported { .. } => ErrorKind::Unsupported,
            GitError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            GitError::Hidden { .. } => ErrorKind::PermissionDenied,
            GitError::NoRepository { .. } => ErrorKind::NotFound,
            GitError::Io { source, .. } => io_kind(source),
            GitError::Repository { kind, .. } => *kind,
        }
    }

    pub(crate) fn unsupported(workspace: &std::path::Path, reason: impl Into<String>) -> GitError {
        GitError::Unsupported {
            workspace: workspace.to_path_buf(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> GitError {
        GitError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    /// Converts a foreign (gix) error into text, keeping its whole source chain, and picks a
    /// kind from the first I/O error in that chain.
    pub(crate) fn repository(
        workspace: &std::path::Path,
        op: &'static str,
        err: &(dyn std::error::Error + 'static),
    ) -> GitError {
        let mut message = err.to_string();
        let mut kind = ErrorKind::Corrupt;
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(e) = cur {
            if let Some(ioe) = e.downcast_ref::<io::Error>() {
                kind = io_kind(ioe);
                break;
            }
            cur = e.source();
            if let Some(next) = cur {
                let text = next.to_string();
                if !message.contains(&text) {
                    message.push_str(": ");
                    message.push_str(&text);
                }
            }
        }
        GitError::Repository {
            workspace: workspace.to_path_buf(),
            op,
            kind,
            message,
        }
    }
}

fn io_kind(e: &io::Error) -> ErrorKind {
    match e.kind() {
        io::ErrorKind::NotFound => ErrorKind::NotFound,
        io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
        io::ErrorKind::InvalidData => ErrorKind::Corrupt,
        _ => ErrorKind::Io,
    }
}

impl fmt::Display for GitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitError::Unsupported { workspace, reason } => {
                write!(f, "unsupported repository at {}: {reason}", workspace.display())
            }
            GitError::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            GitError::Hidden { path } => write!(
                f,
                "\"{}\" is hidden from workspace reads (.git, .logbook or a private path); ask about a path outside them",
                String::from_utf8_lossy(path)
            ),
            GitError::NoRepository { workspace } => write!(
                f,
                "no repository: {} has no .git directly inside it (parent folders are not searched)",
                workspace.display()
            ),
            GitError::Io { path, op, source } => {
                write!(f, "could not {op} {}: {source}", path.display())
            }
            GitError::Repository { workspace, op, message, .. } => {
                write!(f, "could not {op} in the repository at {}: {message}", workspace.display())
            }
        }
    }
}

impl std::error::Error for GitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GitError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
