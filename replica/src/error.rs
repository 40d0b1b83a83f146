//! The one error type of `logbook-replica`, with what a person needs to act on it.

use logbook_engine::{EngineError, ErrorKind};
use logbook_log::LogError;
use std::fmt;
use std::path::PathBuf;

/// Every failure of replication and restore.
#[non_exhaustive]
#[derive(Debug)]
pub enum ReplicaError {
    /// The bucket URL is not `s3://BUCKET[/PREFIX]`.
    InvalidUrl { url: String, reason: String },
    /// An environment variable the store needs is not set.
    MissingCredentials { variable: &'static str },
    /// The endpoint is not a usable URL (or is plain HTTP to a host that is not loopback).
    InvalidEndpoint { endpoint: String, reason: String },
    /// A request to the store failed after its retries (unreachable, refused, denied).
    Store {
        operation: &'static str,
        key: String,
        message: String,
    },
    /// An object a manifest names is not in the bucket.
    MissingObject { key: String },
    /// An object's bytes are not those its manifest names.
    DamagedObject { key: String, reason: String },
    /// A manifest that cannot be read or does not fit its chain.
    BadManifest { key: String, reason: String },
    /// A manifest of another replica format version.
    UnsupportedVersion { key: String, version: u32 },
    /// The bucket prefix holds no manifest (at or before the time asked for).
    NoManifest {
        location: String,
        at_ms: Option<u64>,
    },
    /// The prefix holds another Root's replica, or another replicator writes it.
    Foreign { location: String, reason: String },
    /// The restore directory exists and is not empty.
    NotEmpty { path: PathBuf },
    /// A local file operation failed.
    Local {
        path: PathBuf,
        operation: &'static str,
        source: std::io::Error,
    },
    /// A file of the Root being replicated is damaged.
    LocalDamage { path: PathBuf, reason: String },
    /// Reading a log of the Root failed.
    Log(LogError),
    /// The engine refused the Root (opening, verifying).
    Engine(EngineError),
    /// The restored Root did not verify clean; each line names a damage.
    Verify { damage: Vec<String> },
}

impl ReplicaError {
    /// The error code this failure is reported under (the wire's and the command line's).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ReplicaError::InvalidUrl { .. }
            | ReplicaError::MissingCredentials { .. }
            | ReplicaError::InvalidEndpoint { .. } => ErrorKind::InvalidArgument,
            ReplicaError::MissingObject { .. } | ReplicaError::NoManifest { .. } => {
                ErrorKind::NotFound
            }
            ReplicaError::DamagedObject { .. }
            | ReplicaError::BadManifest { .. }
            | ReplicaError::LocalDamage { .. }
            | ReplicaError::Verify { .. } => ErrorKind::Corrupt,
            ReplicaError::UnsupportedVersion { .. } => ErrorKind::UnsupportedFormat,
            ReplicaError::Foreign { .. } | ReplicaError::NotEmpty { .. } => ErrorKind::Conflict,
            ReplicaError::Store { .. } | ReplicaError::Local { .. } => ErrorKind::Io,
            ReplicaError::Log(e) => match e.kind() {
                logbook_log::ErrorKind::Corrupt => ErrorKind::Corrupt,
                logbook_log::ErrorKind::NotFound => ErrorKind::NotFound,
                logbook_log::ErrorKind::UnsupportedFormat => ErrorKind::UnsupportedFormat,
                logbook_log::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::Io,
            },
            ReplicaError::Engine(e) => e.kind(),
        }
    }

    /// Whether trying again later may succeed (the store or the network failed), as opposed to
    /// a failure that repeats until someone acts (bad input, damage).
    pub fn is_transient(&self) -> bool {
        matches!(self, ReplicaError::Store { .. })
    }

    pub(crate) fn local(
        path: impl Into<PathBuf>,
        operation: &'static str,
        e: std::io::Error,
    ) -> Self {
        ReplicaError::Local {
            path: path.into(),
            operation,
            source: e,
        }
    }

    pub(crate) fn damaged(key: &str, reason: impl Into<String>) -> Self {
        ReplicaError::DamagedObject {
            key: key.to_owned(),
            reason: reason.into(),
        }
    }

    pub(crate) fn manifest(key: &str, reason: impl Into<String>) -> Self {
        ReplicaError::BadManifest {
            key: key.to_owned(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ReplicaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplicaError::InvalidUrl { url, reason } => write!(
                f,
                "{url:?} is not a bucket URL ({reason}); give s3://BUCKET or s3://BUCKET/PREFIX"
            ),
            ReplicaError::MissingCredentials { variable } => write!(
                f,
                "{variable} is not set; export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                 AWS_REGION, or AWS_DEFAULT_REGION) for the bucket"
            ),
            ReplicaError::InvalidEndpoint { endpoint, reason } => {
                write!(f, "endpoint {endpoint:?}: {reason}")
            }
            ReplicaError::Store {
                operation,
                key,
                message,
            } => write!(
                f,
                "{operation} {key} failed after retries: {message} (is the endpoint reachable \
                 and are the credentials right?)"
            ),
            ReplicaError::MissingObject { key } => write!(
                f,
                "object {key} is named by the manifest but is not in the bucket; the replica is \
                 damaged (restore an earlier point with --at, or replicate again)"
            ),
            ReplicaError::DamagedObject { key, reason } => write!(
                f,
                "object {key} is damaged: {reason}; the replica is damaged (restore an earlier \
                 point with --at, or replicate again)"
            ),
            ReplicaError::BadManifest { key, reason } => write!(f, "manifest {key}: {reason}"),
            ReplicaError::UnsupportedVersion { key, version } => write!(
                f,
                "manifest {key} is of replica format version {version}; this build reads \
                 version {} only",
                crate::REPLICA_FORMAT_VERSION
            ),
            ReplicaError::NoManifest { location, at_ms } => match at_ms {
                Some(at) => write!(
                    f,
                    "{location} holds no manifest at or before {at} ms since the epoch; pick a \
                     later --at"
                ),
                None => write!(
                    f,
                    "{location} holds no manifest: nothing was replicated there yet"
                ),
            },
            ReplicaError::Foreign { location, reason } => write!(f, "{location}: {reason}"),
            ReplicaError::NotEmpty { path } => write!(
                f,
                "{} exists and is not empty; restore needs an absent or empty directory (nothing \
                 was touched)",
                path.display()
            ),
            ReplicaError::Local {
                path,
                operation,
                source,
            } => write!(f, "{operation} {}: {source}", path.display()),
            ReplicaError::LocalDamage { path, reason } => write!(
                f,
                "{} is damaged: {reason}; run `logbook verify` on the Root",
                path.display()
            ),
            ReplicaError::Log(e) => write!(f, "{e}"),
            ReplicaError::Engine(e) => write!(f, "{e}"),
            ReplicaError::Verify { damage } => write!(
                f,
                "the restored Root does not verify clean, so it was removed: {}",
                damage.join("; ")
            ),
        }
    }
}

impl std::error::Error for ReplicaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplicaError::Local { source, .. } => Some(source),
            ReplicaError::Log(e) => Some(e),
            ReplicaError::Engine(e) => Some(e),
            _ => None,
        }
    }
}

impl From<LogError> for ReplicaError {
    fn from(e: LogError) -> Self {
        ReplicaError::Log(e)
    }
}

impl From<EngineError> for ReplicaError {
    fn from(e: EngineError) -> Self {
        ReplicaError::Engine(e)
    }
}
