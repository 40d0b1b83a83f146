//! The wire types that are the API's own: workspace paths, file listings and
//! reads, git views, and the JSON-lines envelope of `logbook serve`.
//!
//! Session facts, history, search and the other storage operations use the
//! engine's parameter and result types directly (they are serde types with the
//! wire's camelCase names); this module adds what the engine does not know.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

pub(crate) const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Exact path bytes, `{"bytesBase64": "..."}` on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WirePath {
    pub bytes_base64: String,
}

impl WirePath {
    pub fn from_bytes(bytes: &[u8]) -> WirePath {
        WirePath {
            bytes_base64: B64.encode(bytes),
        }
    }

    /// The decoded bytes; malformed Base64 is `invalid_argument`.
    pub fn decode(&self) -> Result<Vec<u8>, ApiError> {
        B64.decode(self.bytes_base64.as_bytes())
            .map_err(|err| ApiError::invalid(format!("path is not standard padded Base64: {err}")))
    }
}

/// `{sessionId}`, the parameters of several session-scoped reads.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionParams {
    pub session_id: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListFilesParams {
    pub session_id: String,
    #[serde(default)]
    pub path: Option<WirePath>,
    #[serde(default)]
    pub after: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ListFilesResult {
    pub directory_identity: String,
    pub entries: Vec<FileEntry>,
    pub next: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    pub name: WirePath,
    pub kind: FileKind,
    pub size: u64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Other,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchFilesOpenParams {
    pub session_id: String,
    #[serde(default)]
    pub path: Option<WirePath>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WatchFilesOpenResult {
    pub watch_id: String,
    pub directory_identity: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchFilesNextParams {
    pub watch_id: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WatchFilesNextResult {
    pub event: FileWatchEvent,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum FileWatchEvent {
    Changed,
    Unavailable,
    Timeout,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchFilesCloseParams {
    pub watch_id: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadFileParams {
    pub session_id: String,
    pub path: WirePath,
    #[serde(default)]
    pub expected_version: Option<String>,
}

/// One streamed item of `readFile`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ReadFileItem {
    #[serde(rename_all = "camelCase")]
    Begin {
        version: String,
        size: u64,
        content_type: String,
    },
    #[serde(rename_all = "camelCase")]
    Chunk {
        offset: u64,
        data_base64: String,
    },
    #[serde(rename_all = "camelCase")]
    End {
        version: String,
        size: u64,
        digest: String,
    },
    Absent,
    Changed,
    Binary,
    Unsupported,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GitStatusResult {
    pub head: Option<String>,
    pub staged: Vec<GitChange>,
    pub worktree: Vec<GitChange>,
    pub untracked: Vec<GitUntracked>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GitChange {
    pub path: WirePath,
    pub change: GitChangeKind,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum GitChangeKind {
    Added,
    Modified,
    Deleted,
    TypeChanged,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GitUntracked {
    pub path: WirePath,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum GitArea {
    Staged,
    Worktree,
    Untracked,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitDiffParams {
    pub session_id: String,
    pub path: WirePath,
    pub area: GitArea,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum GitDiffResult {
    Text { patch: String },
    Binary,
    Unchanged,
    Unsupported { reason: String },
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotPatchParams {
    pub session_id: String,
    pub operation: String,
}

/// `exportSession`: the engine's parameters and the file to write, absolute, on the serving
/// machine (made new: an existing file is `conflict`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportSessionWire {
    pub session_id: String,
    #[serde(default)]
    pub through: Option<u64>,
    pub path: String,
}

/// `importBundle`: the bundle file, absolute, on the serving machine.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportBundleWire {
    pub path: String,
    #[serde(default)]
    pub session_id: Option<String>,
    pub operation: String,
}

/// The error object of an answer line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WireError {
    pub code: String,
    pub message: String,
}

impl From<&ApiError> for WireError {
    fn from(err: &ApiError) -> WireError {
        WireError {
            code: err.code.as_str().to_owned(),
            message: err.message.clone(),
        }
    }
}
