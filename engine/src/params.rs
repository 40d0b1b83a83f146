//! Request and result types of the engine's operations, usable directly as wire types
//! (camelCase, field names as the contract writes them; unknown fields are ignored).

use crate::event::{AttachmentMeta, Branch, ContextGroup, ContextTool, Event, RowKind};
use crate::json::RawJson;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A row's address: the event that published it and its ordinal inside that event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Position {
    pub source_sequence: u64,
    pub item_index: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSessionParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub workspace: Option<String>,
    pub operation: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionResult {
    pub session_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub workspace: Option<String>,
    pub revision: u64,
    pub branch: Option<Branch>,
    /// The latest `setTitle`, else the first line of the first user message (at most 80
    /// characters), else null.
    pub title: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// Milliseconds since the Unix epoch of the Session's last mutation.
    pub last_activity_at: u64,
    /// Rows of the Session's history (internal tool rows included).
    pub rows: u64,
    /// Bytes the Session's own files take on disk.
    pub bytes: u64,
    /// Set when the Session cannot be opened (its `revision` is then 0): the error it
    /// answers, so a listing shows it instead of failing for every Session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damage: Option<DamageNote>,
    /// The Session this one is a sub-agent of (an imported sub-agent transcript names its
    /// parent's Session in its `importMark`s); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// Order of a `sessions` page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SessionOrder {
    /// Newest activity first (ties by id).
    #[default]
    LastActivity,
    /// By session id.
    Id,
}

/// Sessions listed per page when `limit` is not given.
pub const SESSIONS_PAGE_DEFAULT: u32 = 128;
/// Most Sessions listed per page.
pub const SESSIONS_PAGE_MAX: u32 = 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsParams {
    /// `nextAfter` of the previous page.
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
    /// Only Sessions with exactly this workspace.
    #[serde(default)]
    pub workspace: Option<String>,
    #[serde(default)]
    pub order: Option<SessionOrder>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionsPage {
    pub sessions: Vec<SessionInfo>,
    /// The cursor of the next page; null on the last.
    pub next_after: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetTitleParams {
    pub session_id: String,
    pub operation: String,
    pub title: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppendParams {
    pub session_id: String,
    pub operation: String,
    pub events: Vec<Event>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppendResult {
    pub first_sequence: u64,
    pub last_sequence: u64,
}

/// An attachment as `send` receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendAttachment {
    pub name: String,
    pub mime_type: String,
    pub data_base64: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendParams {
    pub session_id: String,
    pub operation: String,
    pub text: String,
    #[serde(default)]
    pub attachments: Vec<SendAttachment>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendResult {
    pub invocation: String,
    pub sequence: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StopParams {
    pub session_id: String,
    pub operation: String,
    pub invocation: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SequenceResult {
    pub sequence: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RespondParams {
    pub session_id: String,
    pub operation: String,
    pub interaction_id: String,
    pub response: RawJson,
}

/// An interaction request and, once answered, its response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interaction {
    pub interaction_id: String,
    pub invocation: String,
    pub prompt: String,
    pub options: RawJson,
    /// The sequence of the `interactionRequested` event.
    pub sequence: u64,
    /// Null while pending.
    pub response: Option<RawJson>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Direction {
    #[default]
    Forward,
    Backward,
}

/// Where a history page opens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Anchor {
    /// Exactly this row (shown even when it belongs to an internal tool call).
    Row {
        position: Position,
        #[serde(default)]
        field: Option<String>,
    },
    /// The first row of this event or later (forward), or its last row or earlier (backward).
    Event { sequence: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistoryParams {
    pub session_id: String,
    #[serde(default)]
    pub through: Option<u64>,
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
    #[serde(default)]
    pub anchor: Option<Anchor>,
    #[serde(default)]
    pub direction: Option<Direction>,
}

/// One field of a history row, cut to a prefix when long.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldText {
    pub text: String,
    /// UTF-8 length of the whole field.
    pub bytes: u64,
    pub truncated: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub position: Position,
    pub kind: RowKind,
    pub invocation: String,
    pub fields: BTreeMap<String, FieldText>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryPage {
    pub through: u64,
    pub rows: Vec<Row>,
    pub next_after: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceParams {
    pub session_id: String,
    #[serde(default)]
    pub through: Option<u64>,
    pub position: Position,
    pub field: String,
    #[serde(default)]
    pub after: Option<u64>,
    #[serde(default)]
    pub limit: Option<u64>,
}

/// A chunk of text and the exclusive byte offset to continue from (null at the end).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextPage {
    pub text: String,
    pub next_after: Option<u64>,
}

/// The result of `source`.
pub type SourcePage = TextPage;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchParams {
    pub session_id: String,
    #[serde(default)]
    pub after: Option<u64>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchEvent {
    pub sequence: u64,
    pub kind: String,
}

/// An admitted, not yet settled invocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueEntry {
    pub invocation: String,
    /// The sequence of its `userMessage`.
    pub sequence: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchResult {
    pub events: Vec<WatchEvent>,
    pub queue: Vec<QueueEntry>,
    pub pending_interactions: Vec<Interaction>,
    pub next_after: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextParams {
    pub session_id: String,
    #[serde(default)]
    pub through: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextResult {
    pub sequence: u64,
    pub invocation: String,
    pub groups: Vec<ContextGroup>,
    pub tools: Vec<ContextTool>,
    pub provider_usage: Option<RawJson>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AttachmentsParams {
    pub session_id: String,
    pub invocation: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadAttachmentsParams {
    pub session_id: String,
    pub invocation: String,
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub limit: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentData {
    pub data_base64: String,
}

/// What `verify` walked, and everything it found wrong.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// Sessions walked whole (damaged ones are in `damage` instead).
    pub sessions: u64,
    pub records: u64,
    pub bytes: u64,
    pub blobs: u64,
    /// Every damage found, one entry per Session (or per Root-wide file); empty when the
    /// Root is sound.
    #[serde(default)]
    pub damage: Vec<DamageNote>,
    /// Torn tails that recoveries cut (their copies are still on disk): never acknowledged
    /// bytes, but shown so that no cut goes unnoticed.
    #[serde(default)]
    pub cuts: Vec<CutNote>,
}

/// Damage found in one Session (or, with no `sessionId`, in a file of the Root itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DamageNote {
    pub session_id: Option<String>,
    /// The error code (`corrupt`, `io`, ...).
    pub code: String,
    pub message: String,
}

impl DamageNote {
    pub(crate) fn of(session_id: Option<&str>, e: &crate::EngineError) -> DamageNote {
        DamageNote {
            session_id: session_id.map(str::to_owned),
            code: e.kind().code().to_owned(),
            message: e.to_string(),
        }
    }
}

/// Bytes a recovery cut from the end of a log as a torn write: bytes that no acknowledged
/// mutation and no durable index refer to. The cut bytes are kept in the file at `path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CutNote {
    /// The Session whose log was cut (none for the Root log).
    pub session_id: Option<String>,
    /// The copy of the cut bytes, beside the segment they came from.
    pub path: String,
    /// How many bytes were cut.
    pub bytes: u64,
}

impl CutNote {
    /// The note of what an open of a log cut, if it cut anything.
    pub(crate) fn of(session_id: Option<&str>, r: &logbook_log::Recovery) -> Option<CutNote> {
        (r.cut_bytes > 0).then(|| CutNote {
            session_id: session_id.map(str::to_owned),
            path: r
                .cut_copy
                .as_ref()
                .map_or_else(String::new, |p| p.display().to_string()),
            bytes: r.cut_bytes,
        })
    }
}

impl std::fmt::Display for CutNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let whose = match &self.session_id {
            Some(id) => format!("Session {id}"),
            None => "the Root log".to_owned(),
        };
        write!(
            f,
            "recovery cut a torn tail of {} bytes from {whose} (never acknowledged); \
             the bytes are kept in {}",
            self.bytes, self.path
        )
    }
}

/// Attachment metadata list, as `attachments` returns it.
pub type Attachments = Vec<AttachmentMeta>;

/// `search` request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchParams {
    pub session_id: String,
    pub query: String,
    /// Default false: both sides simply case folded.
    #[serde(default)]
    pub case_sensitive: Option<bool>,
    /// Default false.
    #[serde(default)]
    pub whole_word: Option<bool>,
    /// Null = the current revision (returned in the page).
    #[serde(default)]
    pub through: Option<u64>,
    /// The previous page's `nextAfter`; null starts at the first row.
    #[serde(default)]
    pub after: Option<String>,
    /// Most hits per page: default [`crate::SEARCH_HITS_DEFAULT`], at most [`crate::SEARCH_HITS_MAX`].
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One match: a byte range `[start, end)` of the original text of one field of one row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    pub position: Position,
    pub field: String,
    pub start: u64,
    pub end: u64,
}

/// One page of hits; `nextAfter` null means the scan under this fence is complete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchPage {
    pub through: u64,
    pub hits: Vec<SearchHit>,
    pub next_after: Option<String>,
}

/// Where a fork starts from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ForkFrom {
    /// History through the `turnSettled` of this invocation.
    Turn { invocation: String },
    /// The whole current history.
    All,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkParams {
    pub session_id: String,
    pub operation: String,
    pub from: ForkFrom,
    /// Must equal the source's current revision.
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkResult {
    /// The new Session.
    pub session_id: String,
    pub branch: Branch,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkReceiptParams {
    pub session_id: String,
    pub operation: String,
}
