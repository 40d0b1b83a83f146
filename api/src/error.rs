//! One error type for the Host API, mapped onto the wire's error codes.
//!
//! Every lower crate reports a coarse `kind()`; this module turns it into an
//! [`ErrorCode`] without looking at variants, so a new variant below can never
//! reach the wire unmapped.

use std::fmt;

/// The error codes of the wire (SPEC section 8), spelled as they are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
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

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Busy => "busy",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::UnsupportedFormat => "unsupported_format",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Corrupt => "corrupt",
            ErrorCode::Io => "io",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operation's failure: a wire code and a message meant for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

/// Longest error message answered: messages quote the input they refuse, and a 100 MB id
/// must not come back as a 100 MB error line. Longer ones are cut (on a character boundary)
/// with a note of how long they were.
pub const ERROR_MESSAGE_BYTES_MAX: usize = 1024;

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        let mut message = message.into();
        if message.len() > ERROR_MESSAGE_BYTES_MAX {
            let total = message.len();
            let mut end = ERROR_MESSAGE_BYTES_MAX;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push_str(&format!("… (cut: the message was {total} bytes)"));
        }
        ApiError { code, message }
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, message)
    }

    /// A failed system call on `path`: `not_found`, `permission_denied` or `io`.
    pub fn from_io(path: &std::path::Path, what: &str, e: std::io::Error) -> ApiError {
        let code = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorCode::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
            _ => ErrorCode::Io,
        };
        ApiError::new(code, format!("{what} {}: {e}", path.display()))
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// Maps the per-crate error kinds, which share one list of names, onto wire codes.
macro_rules! map_kind {
    ($err:ty, $kind:path) => {
        impl From<$err> for ApiError {
            fn from(err: $err) -> ApiError {
                use $kind as K;
                let code = match err.kind() {
                    K::InvalidArgument => ErrorCode::InvalidArgument,
                    K::NotFound => ErrorCode::NotFound,
                    K::Conflict => ErrorCode::Conflict,
                    K::Busy => ErrorCode::Busy,
                    K::Unsupported => ErrorCode::Unsupported,
                    K::UnsupportedFormat => ErrorCode::UnsupportedFormat,
                    K::PermissionDenied => ErrorCode::PermissionDenied,
                    K::Corrupt => ErrorCode::Corrupt,
                    _ => ErrorCode::Io,
                };
                ApiError::new(code, without_kind(code, err.to_string()))
            }
        }
    };
}

/// `message` without the kind its crate's `Display` put in front ("not found: Session x" ->
/// "Session x"): the code says it already, and a person reading `code: message` would see it
/// twice.
fn without_kind(code: ErrorCode, message: String) -> String {
    let kind = match code {
        ErrorCode::InvalidArgument => "invalid argument: ",
        ErrorCode::NotFound => "not found: ",
        ErrorCode::Conflict => "conflict: ",
        ErrorCode::Unsupported => "unsupported: ",
        _ => return message,
    };
    match message.strip_prefix(kind) {
        Some(rest) => rest.to_owned(),
        None => message,
    }
}

map_kind!(logbook_engine::EngineError, logbook_engine::ErrorKind);
map_kind!(logbook_fs::FsError, logbook_fs::ErrorKind);
map_kind!(logbook_git::GitError, logbook_git::ErrorKind);
#[cfg(feature = "replica")]
map_kind!(logbook_replica::ReplicaError, logbook_engine::ErrorKind);

impl From<serde_json::Error> for ApiError {
    fn from(err: serde_json::Error) -> ApiError {
        ApiError::invalid(format!("malformed parameters: {err}"))
    }
}
