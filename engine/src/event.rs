//! Facts: the events a Session persists (SPEC section 2) and the rows they publish.
//!
//! Each type has two serde forms, chosen by `is_human_readable()`:
//! - JSON (the wire): `kind`-tagged objects with camelCase field names exactly as the contract
//!   writes them. Deserialising goes through a flat struct per tagged type rather than serde's
//!   internally tagged enums, because those buffer the whole object into `Content` first, which
//!   loses [`RawJson`]'s exact text and recurses on deep nesting.
//! - postcard (the disk): externally tagged enums whose variant index is part of the format
//!   (see `docs/format.md`); never reorder variants.

use crate::json::RawJson;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `branch` of a forked Session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Branch {
    pub session_id: String,
    pub through: u64,
    pub turn: Option<String>,
}

/// Metadata of one attachment of a user message; the bytes live in the Root's blob store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentMeta {
    pub name: String,
    pub mime_type: String,
    pub bytes: u64,
    pub digest: String,
}

/// Token usage reported with a model completion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCreated {
    pub workspace: Option<String>,
    pub branch: Option<Branch>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserMessage {
    pub invocation: String,
    pub text: String,
    pub attachments: Vec<AttachmentMeta>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCompletion {
    pub invocation: String,
    pub model: String,
    pub items: Vec<Item>,
    pub usage: Option<Usage>,
}

/// `status` of a tool result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolStatus {
    Ok,
    Error,
    MalformedArguments,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    pub invocation: String,
    pub tool_call_id: String,
    pub status: ToolStatus,
    pub body: String,
    pub raw: RawJson,
    pub parts: Vec<Part>,
    pub bytes: u64,
    pub digest: String,
}

/// `outcome` of a settled Turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    Completed,
    Stopped,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSettled {
    pub invocation: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopRequested {
    pub invocation: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractionRequested {
    pub interaction_id: String,
    pub invocation: String,
    pub prompt: String,
    pub options: RawJson,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractionResolved {
    pub interaction_id: String,
    pub response: RawJson,
}

/// One message group of a prepared model request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextGroup {
    pub role: String,
    pub messages: RawJson,
    pub estimated_tokens: u64,
}

/// One tool schema of a prepared model request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextTool {
    pub name: String,
    pub estimated_tokens: u64,
}

/// A title given to the Session (`setTitle`); the latest one is the Session's title.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TitleSet {
    pub title: String,
}

/// Where an imported Session's events came from, and how far: written by `logbook import` as
/// the last event of each batch it appends, so the import's progress is committed with the
/// events themselves (one mutation) and a later import continues after `lines`. Publishes no
/// row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportMark {
    /// The origin's own id in a stable form, e.g. `claude:<sessionId>` or `codex:<id>`.
    pub origin: String,
    /// Whole lines of the source transcript imported so far (events for all of them are at or
    /// before this mark).
    pub lines: u64,
    /// `sha256:` digest of those `lines` lines, each taken with one `\n`.
    pub prefix_digest: String,
    /// The Session this one is a sub-agent of, when the origin says so.
    pub parent: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextPrepared {
    pub invocation: String,
    pub groups: Vec<ContextGroup>,
    pub tools: Vec<ContextTool>,
    pub provider_usage: Option<RawJson>,
}

/// One persisted fact. JSON: `{"kind": "userMessage", ...}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    SessionCreated(SessionCreated),
    UserMessage(UserMessage),
    ModelCompletion(ModelCompletion),
    ToolResult(ToolResult),
    TurnSettled(TurnSettled),
    StopRequested(StopRequested),
    InteractionRequested(InteractionRequested),
    InteractionResolved(InteractionResolved),
    ContextPrepared(ContextPrepared),
    TitleSet(TitleSet),
    ImportMark(ImportMark),
}

impl Event {
    /// The `kind` string of the wire form.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SessionCreated(_) => "sessionCreated",
            Event::UserMessage(_) => "userMessage",
            Event::ModelCompletion(_) => "modelCompletion",
            Event::ToolResult(_) => "toolResult",
            Event::TurnSettled(_) => "turnSettled",
            Event::StopRequested(_) => "stopRequested",
            Event::InteractionRequested(_) => "interactionRequested",
            Event::InteractionResolved(_) => "interactionResolved",
            Event::ContextPrepared(_) => "contextPrepared",
            Event::TitleSet(_) => "titleSet",
            Event::ImportMark(_) => "importMark",
        }
    }
}

/// An item of a model completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Assistant {
        body: String,
        thinking: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
        internal: bool,
    },
}

/// A frozen projection part of a tool result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Text { text: String },
    Attachment { digest: String },
}

// ---- serde: events ---------------------------------------------------------------------------

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum EventTagged<'a> {
    SessionCreated(&'a SessionCreated),
    UserMessage(&'a UserMessage),
    ModelCompletion(&'a ModelCompletion),
    ToolResult(&'a ToolResult),
    TurnSettled(&'a TurnSettled),
    StopRequested(&'a StopRequested),
    InteractionRequested(&'a InteractionRequested),
    InteractionResolved(&'a InteractionResolved),
    ContextPrepared(&'a ContextPrepared),
    TitleSet(&'a TitleSet),
    ImportMark(&'a ImportMark),
}

/// Disk form: the variant index is the on-disk event tag (format.md); append new kinds at the end.
#[derive(Serialize)]
enum EventBinRef<'a> {
    SessionCreated(&'a SessionCreated),
    UserMessage(&'a UserMessage),
    ModelCompletion(&'a ModelCompletion),
    ToolResult(&'a ToolResult),
    TurnSettled(&'a TurnSettled),
    StopRequested(&'a StopRequested),
    InteractionRequested(&'a InteractionRequested),
    InteractionResolved(&'a InteractionResolved),
    ContextPrepared(&'a ContextPrepared),
    TitleSet(&'a TitleSet),
    ImportMark(&'a ImportMark),
}

#[derive(Deserialize)]
enum EventBin {
    SessionCreated(SessionCreated),
    UserMessage(UserMessage),
    ModelCompletion(ModelCompletion),
    ToolResult(ToolResult),
    TurnSettled(TurnSettled),
    StopRequested(StopRequested),
    InteractionRequested(InteractionRequested),
    InteractionResolved(InteractionResolved),
    ContextPrepared(ContextPrepared),
    TitleSet(TitleSet),
    ImportMark(ImportMark),
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            match self {
                Event::SessionCreated(e) => EventTagged::SessionCreated(e),
                Event::UserMessage(e) => EventTagged::UserMessage(e),
                Event::ModelCompletion(e) => EventTagged::ModelCompletion(e),
                Event::ToolResult(e) => EventTagged::ToolResult(e),
                Event::TurnSettled(e) => EventTagged::TurnSettled(e),
                Event::StopRequested(e) => EventTagged::StopRequested(e),
                Event::InteractionRequested(e) => EventTagged::InteractionRequested(e),
                Event::InteractionResolved(e) => EventTagged::InteractionResolved(e),
                Event::ContextPrepared(e) => EventTagged::ContextPrepared(e),
                Event::TitleSet(e) => EventTagged::TitleSet(e),
                Event::ImportMark(e) => EventTagged::ImportMark(e),
            }
            .serialize(s)
        } else {
            match self {
                Event::SessionCreated(e) => EventBinRef::SessionCreated(e),
                Event::UserMessage(e) => EventBinRef::UserMessage(e),
                Event::ModelCompletion(e) => EventBinRef::ModelCompletion(e),
                Event::ToolResult(e) => EventBinRef::ToolResult(e),
                Event::TurnSettled(e) => EventBinRef::TurnSettled(e),
                Event::StopRequested(e) => EventBinRef::StopRequested(e),
                Event::InteractionRequested(e) => EventBinRef::InteractionRequested(e),
                Event::InteractionResolved(e) => EventBinRef::InteractionResolved(e),
                Event::ContextPrepared(e) => EventBinRef::ContextPrepared(e),
                Event::TitleSet(e) => EventBinRef::TitleSet(e),
                Event::ImportMark(e) => EventBinRef::ImportMark(e),
            }
            .serialize(s)
        }
    }
}

/// Every field any event kind has; which are required depends on `kind`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventWire {
    kind: Option<String>,
    workspace: Option<String>,
    branch: Option<Branch>,
    invocation: Option<String>,
    text: Option<String>,
    attachments: Option<Vec<AttachmentMeta>>,
    model: Option<String>,
    items: Option<Vec<Item>>,
    usage: Option<Usage>,
    tool_call_id: Option<String>,
    status: Option<ToolStatus>,
    body: Option<String>,
    #[serde(default, deserialize_with = "present_raw")]
    raw: Option<RawJson>,
    parts: Option<Vec<Part>>,
    bytes: Option<u64>,
    digest: Option<String>,
    outcome: Option<Outcome>,
    interaction_id: Option<String>,
    prompt: Option<String>,
    #[serde(default, deserialize_with = "present_raw")]
    options: Option<RawJson>,
    #[serde(default, deserialize_with = "present_raw")]
    response: Option<RawJson>,
    groups: Option<Vec<ContextGroup>>,
    tools: Option<Vec<ContextTool>>,
    #[serde(default, deserialize_with = "present_raw")]
    provider_usage: Option<RawJson>,
    title: Option<String>,
    origin: Option<String>,
    lines: Option<u64>,
    prefix_digest: Option<String>,
    parent: Option<String>,
}

/// A raw field that is present (even as `null`) is `Some`; only an absent one is `None`.
fn present_raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RawJson>, D::Error> {
    RawJson::deserialize(d).map(Some)
}

fn need<T, E: serde::de::Error>(v: Option<T>, kind: &str, field: &str) -> Result<T, E> {
    v.ok_or_else(|| E::custom(format!("event kind `{kind}` needs field `{field}`")))
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if !d.is_human_readable() {
            return Ok(match EventBin::deserialize(d)? {
                EventBin::SessionCreated(e) => Event::SessionCreated(e),
                EventBin::UserMessage(e) => Event::UserMessage(e),
                EventBin::ModelCompletion(e) => Event::ModelCompletion(e),
                EventBin::ToolResult(e) => Event::ToolResult(e),
                EventBin::TurnSettled(e) => Event::TurnSettled(e),
                EventBin::StopRequested(e) => Event::StopRequested(e),
                EventBin::InteractionRequested(e) => Event::InteractionRequested(e),
                EventBin::InteractionResolved(e) => Event::InteractionResolved(e),
                EventBin::ContextPrepared(e) => Event::ContextPrepared(e),
                EventBin::TitleSet(e) => Event::TitleSet(e),
                EventBin::ImportMark(e) => Event::ImportMark(e),
            });
        }
        let w = EventWire::deserialize(d)?;
        let kind = w
            .kind
            .ok_or_else(|| D::Error::custom("event needs field `kind`"))?;
        let k = kind.as_str();
        Ok(match k {
            "sessionCreated" => Event::SessionCreated(SessionCreated { workspace: w.workspace, branch: w.branch }),
            "userMessage" => Event::UserMessage(UserMessage {
                invocation: need(w.invocation, k, "invocation")?,
                text: need(w.text, k, "text")?,
                attachments: w.attachments.unwrap_or_default(),
            }),
            "modelCompletion" => Event::ModelCompletion(ModelCompletion {
                invocation: need(w.invocation, k, "invocation")?,
                model: need(w.model, k, "model")?,
                items: need(w.items, k, "items")?,
                usage: w.usage,
            }),
            "toolResult" => Event::ToolResult(ToolResult {
                invocation: need(w.invocation, k, "invocation")?,
                tool_call_id: need(w.tool_call_id, k, "toolCallId")?,
                status: need(w.status, k, "status")?,
                body: need(w.body, k, "body")?,
                raw: need(w.raw, k, "raw")?,
                parts: w.parts.unwrap_or_default(),
                bytes: need(w.bytes, k, "bytes")?,
                digest: need(w.digest, k, "digest")?,
            }),
            "turnSettled" => Event::TurnSettled(TurnSettled {
                invocation: need(w.invocation, k, "invocation")?,
                outcome: need(w.outcome, k, "outcome")?,
            }),
            "stopRequested" => Event::StopRequested(StopRequested { invocation: need(w.invocation, k, "invocation")? }),
            "interactionRequested" => Event::InteractionRequested(InteractionRequested {
                interaction_id: need(w.interaction_id, k, "interactionId")?,
                invocation: need(w.invocation, k, "invocation")?,
                prompt: need(w.prompt, k, "prompt")?,
                options: w.options.unwrap_or_else(RawJson::null),
            }),
            "interactionResolved" => Event::InteractionResolved(InteractionResolved {
                interaction_id: need(w.interaction_id, k, "interactionId")?,
                response: need(w.response, k, "response")?,
            }),
            "contextPrepared" => Event::ContextPrepared(ContextPrepared {
                invocation: need(w.invocation, k, "invocation")?,
                groups: w.groups.unwrap_or_default(),
                tools: w.tools.unwrap_or_default(),
                provider_usage: w.provider_usage,
            }),
            "titleSet" => Event::TitleSet(TitleSet { title: need(w.title, k, "title")? }),
            "importMark" => Event::ImportMark(ImportMark {
                origin: need(w.origin, k, "origin")?,
                lines: need(w.lines, k, "lines")?,
                prefix_digest: need(w.prefix_digest, k, "prefixDigest")?,
                parent: w.parent,
            }),
            other => {
                return Err(D::Error::custom(format!(
                    "unknown event kind `{other}`; known kinds: sessionCreated, userMessage, modelCompletion, \
                     toolResult, turnSettled, stopRequested, interactionRequested, interactionResolved, contextPrepared, \
                     titleSet, importMark"
                )))
            }
        })
    }
}

// ---- serde: items and parts ------------------------------------------------------------------

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum ItemTagged<'a> {
    Assistant {
        body: &'a str,
        thinking: &'a Option<String>,
    },
    ToolCall {
        id: &'a str,
        name: &'a str,
        arguments: &'a str,
        internal: bool,
    },
}

/// Disk form of an item, borrowed for encoding: the same variants and fields as [`ItemBin`].
#[derive(Serialize)]
enum ItemBinRef<'a> {
    Assistant {
        body: &'a str,
        thinking: Option<&'a str>,
    },
    ToolCall {
        id: &'a str,
        name: &'a str,
        arguments: &'a str,
        internal: bool,
    },
}

#[derive(Serialize, Deserialize)]
enum ItemBin {
    Assistant {
        body: String,
        thinking: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
        internal: bool,
    },
}

#[derive(Deserialize)]
struct ItemWire {
    kind: Option<String>,
    body: Option<String>,
    thinking: Option<String>,
    id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
    internal: Option<bool>,
}

fn need_item<T, E: serde::de::Error>(v: Option<T>, kind: &str, field: &str) -> Result<T, E> {
    v.ok_or_else(|| E::custom(format!("item kind `{kind}` needs field `{field}`")))
}

impl Serialize for Item {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            match self {
                Item::Assistant { body, thinking } => ItemTagged::Assistant { body, thinking },
                Item::ToolCall {
                    id,
                    name,
                    arguments,
                    internal,
                } => ItemTagged::ToolCall {
                    id,
                    name,
                    arguments,
                    internal: *internal,
                },
            }
            .serialize(s)
        } else {
            match self {
                Item::Assistant { body, thinking } => ItemBinRef::Assistant {
                    body,
                    thinking: thinking.as_deref(),
                },
                Item::ToolCall {
                    id,
                    name,
                    arguments,
                    internal,
                } => ItemBinRef::ToolCall {
                    id,
                    name,
                    arguments,
                    internal: *internal,
                },
            }
            .serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if !d.is_human_readable() {
            return Ok(match ItemBin::deserialize(d)? {
                ItemBin::Assistant { body, thinking } => Item::Assistant { body, thinking },
                ItemBin::ToolCall {
                    id,
                    name,
                    arguments,
                    internal,
                } => Item::ToolCall {
                    id,
                    name,
                    arguments,
                    internal,
                },
            });
        }
        let w = ItemWire::deserialize(d)?;
        let kind = w
            .kind
            .ok_or_else(|| D::Error::custom("item needs field `kind`"))?;
        match kind.as_str() {
            "assistant" => Ok(Item::Assistant {
                body: need_item(w.body, "assistant", "body")?,
                thinking: w.thinking,
            }),
            "toolCall" => Ok(Item::ToolCall {
                id: need_item(w.id, "toolCall", "id")?,
                name: need_item(w.name, "toolCall", "name")?,
                arguments: need_item(w.arguments, "toolCall", "arguments")?,
                internal: w.internal.unwrap_or(false),
            }),
            other => Err(D::Error::custom(format!(
                "unknown item kind `{other}`; known kinds: assistant, toolCall"
            ))),
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum PartTagged<'a> {
    Text { text: &'a str },
    Attachment { digest: &'a str },
}

/// Disk form of a part, borrowed for encoding: the same variants and fields as [`PartBin`].
#[derive(Serialize)]
enum PartBinRef<'a> {
    Text { text: &'a str },
    Attachment { digest: &'a str },
}

#[derive(Serialize, Deserialize)]
enum PartBin {
    Text { text: String },
    Attachment { digest: String },
}

#[derive(Deserialize)]
struct PartWire {
    kind: Option<String>,
    text: Option<String>,
    digest: Option<String>,
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            match self {
                Part::Text { text } => PartTagged::Text { text },
                Part::Attachment { digest } => PartTagged::Attachment { digest },
            }
            .serialize(s)
        } else {
            match self {
                Part::Text { text } => PartBinRef::Text { text },
                Part::Attachment { digest } => PartBinRef::Attachment { digest },
            }
            .serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if !d.is_human_readable() {
            return Ok(match PartBin::deserialize(d)? {
                PartBin::Text { text } => Part::Text { text },
                PartBin::Attachment { digest } => Part::Attachment { digest },
            });
        }
        let w = PartWire::deserialize(d)?;
        let kind = w
            .kind
            .ok_or_else(|| D::Error::custom("part needs field `kind`"))?;
        match kind.as_str() {
            "text" => Ok(Part::Text {
                text: need_item(w.text, "text", "text")?,
            }),
            "attachment" => Ok(Part::Attachment {
                digest: need_item(w.digest, "attachment", "digest")?,
            }),
            other => Err(D::Error::custom(format!(
                "unknown part kind `{other}`; known kinds: text, attachment"
            ))),
        }
    }
}

// ---- rows straight from the disk form --------------------------------------------------------

mod decode;
pub(crate) use decode::event_record_rows;

// ---- rows ------------------------------------------------------------------------------------

/// The kind of a history row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RowKind {
    User,
    Assistant,
    ToolCall,
    ToolResult,
    Interaction,
}

impl RowKind {
    /// The kind's name on the wire (`user`, `assistant`, `toolCall`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RowKind::User => "user",
            RowKind::Assistant => "assistant",
            RowKind::ToolCall => "toolCall",
            RowKind::ToolResult => "toolResult",
            RowKind::Interaction => "interaction",
        }
    }

    /// The on-disk code in the row index (format.md).
    pub(crate) fn code(self) -> u8 {
        match self {
            RowKind::User => 1,
            RowKind::Assistant => 2,
            RowKind::ToolCall => 3,
            RowKind::ToolResult => 4,
            RowKind::Interaction => 5,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<RowKind> {
        Some(match code {
            1 => RowKind::User,
            2 => RowKind::Assistant,
            3 => RowKind::ToolCall,
            4 => RowKind::ToolResult,
            5 => RowKind::Interaction,
            _ => return None,
        })
    }

    /// The names of this row's fields, in wire order.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            RowKind::User | RowKind::ToolResult | RowKind::Interaction => &["body"],
            RowKind::Assistant => &["body", "thinking"],
            RowKind::ToolCall => &["name", "arguments"],
        }
    }
}

/// A row as the event publishes it: kind, invocation and the full field texts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSource<'a> {
    pub kind: RowKind,
    pub invocation: &'a str,
    /// `(name, text)` in [`RowKind::fields`] order.
    pub fields: FieldList<'a>,
    /// The id of the tool call (for a toolCall row) or the call it answers (toolResult row).
    pub tool_call_id: Option<&'a str>,
    /// Set on rows of a tool call marked `internal`.
    pub internal: bool,
}

/// A row's `(name, text)` pairs, one or two, held inline (a row is made per history row read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldList<'a> {
    pairs: [(&'static str, &'a str); 2],
    len: usize,
}

impl<'a> FieldList<'a> {
    fn one(name: &'static str, text: &'a str) -> Self {
        FieldList {
            pairs: [(name, text), ("", "")],
            len: 1,
        }
    }

    fn two(first: (&'static str, &'a str), second: (&'static str, &'a str)) -> Self {
        FieldList {
            pairs: [first, second],
            len: 2,
        }
    }
}

impl<'a> std::ops::Deref for FieldList<'a> {
    type Target = [(&'static str, &'a str)];

    fn deref(&self) -> &Self::Target {
        &self.pairs[..self.len]
    }
}

impl<'a> RowSource<'a> {
    fn new(
        kind: RowKind,
        invocation: &'a str,
        fields: FieldList<'a>,
        tool_call_id: Option<&'a str>,
        internal: bool,
    ) -> Self {
        RowSource {
            kind,
            invocation,
            fields,
            tool_call_id,
            internal,
        }
    }

    fn user(invocation: &'a str, text: &'a str) -> Self {
        Self::new(
            RowKind::User,
            invocation,
            FieldList::one("body", text),
            None,
            false,
        )
    }

    fn assistant(invocation: &'a str, body: &'a str, thinking: &'a str) -> Self {
        let fields = FieldList::two(("body", body), ("thinking", thinking));
        Self::new(RowKind::Assistant, invocation, fields, None, false)
    }

    fn tool_call(
        invocation: &'a str,
        id: &'a str,
        name: &'a str,
        arguments: &'a str,
        internal: bool,
    ) -> Self {
        let fields = FieldList::two(("name", name), ("arguments", arguments));
        Self::new(RowKind::ToolCall, invocation, fields, Some(id), internal)
    }

    fn tool_result(invocation: &'a str, call_id: &'a str, body: &'a str) -> Self {
        let fields = FieldList::one("body", body);
        Self::new(
            RowKind::ToolResult,
            invocation,
            fields,
            Some(call_id),
            false,
        )
    }

    fn interaction(invocation: &'a str, prompt: &'a str) -> Self {
        let fields = FieldList::one("body", prompt);
        Self::new(RowKind::Interaction, invocation, fields, None, false)
    }
}

/// The rows of one event, in item order. Most events publish one row, which is held inline
/// (no allocation per event read).
#[derive(Clone, Debug, Eq)]
pub enum Rows<'a> {
    One([RowSource<'a>; 1]),
    Many(Vec<RowSource<'a>>),
}

impl<'a> Rows<'a> {
    fn one(row: RowSource<'a>) -> Self {
        Rows::One([row])
    }
}

impl<'a> std::ops::Deref for Rows<'a> {
    type Target = [RowSource<'a>];

    fn deref(&self) -> &Self::Target {
        match self {
            Rows::One(r) => r,
            Rows::Many(v) => v,
        }
    }
}

impl PartialEq for Rows<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<'a> FromIterator<RowSource<'a>> for Rows<'a> {
    fn from_iter<I: IntoIterator<Item = RowSource<'a>>>(iter: I) -> Self {
        let mut it = iter.into_iter();
        match (it.next(), it.next()) {
            (None, _) => Rows::Many(Vec::new()),
            (Some(a), None) => Rows::one(a),
            (Some(a), Some(b)) => Rows::Many([a, b].into_iter().chain(it).collect()),
        }
    }
}

impl<'a> IntoIterator for Rows<'a> {
    type Item = RowSource<'a>;
    type IntoIter = RowsIter<'a>;

    fn into_iter(self) -> RowsIter<'a> {
        match self {
            Rows::One([r]) => RowsIter {
                one: Some(r),
                many: Vec::new().into_iter(),
            },
            Rows::Many(v) => RowsIter {
                one: None,
                many: v.into_iter(),
            },
        }
    }
}

/// Iterator over [`Rows`] by value.
#[derive(Debug)]
pub struct RowsIter<'a> {
    one: Option<RowSource<'a>>,
    many: std::vec::IntoIter<RowSource<'a>>,
}

impl<'a> Iterator for RowsIter<'a> {
    type Item = RowSource<'a>;

    fn next(&mut self) -> Option<RowSource<'a>> {
        self.one.take().or_else(|| self.many.next())
    }
}

/// The rows an event publishes, in item order.
pub fn rows_of(event: &Event) -> Rows<'_> {
    match event {
        Event::UserMessage(m) => Rows::one(RowSource::user(&m.invocation, &m.text)),
        Event::ModelCompletion(c) => c
            .items
            .iter()
            .map(|item| match item {
                Item::Assistant { body, thinking } => {
                    RowSource::assistant(&c.invocation, body, thinking.as_deref().unwrap_or(""))
                }
                Item::ToolCall {
                    id,
                    name,
                    arguments,
                    internal,
                } => RowSource::tool_call(&c.invocation, id, name, arguments, *internal),
            })
            .collect(),
        Event::ToolResult(r) => Rows::one(RowSource::tool_result(
            &r.invocation,
            &r.tool_call_id,
            &r.body,
        )),
        Event::InteractionRequested(i) => {
            Rows::one(RowSource::interaction(&i.invocation, &i.prompt))
        }
        _ => Rows::Many(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_kind_names_are_the_wire_names() {
        for k in [
            RowKind::User,
            RowKind::Assistant,
            RowKind::ToolCall,
            RowKind::ToolResult,
            RowKind::Interaction,
        ] {
            assert_eq!(serde_json::to_value(k).expect("encode"), k.as_str());
        }
    }

    fn postcard<T: Serialize>(v: &T) -> Vec<u8> {
        postcard::to_allocvec(v).expect("encode")
    }

    #[test]
    fn borrowed_disk_forms_encode_as_the_owned_ones() {
        let items = [
            Item::Assistant {
                body: "b".repeat(300),
                thinking: None,
            },
            Item::Assistant {
                body: String::new(),
                thinking: Some("t é".into()),
            },
            Item::ToolCall {
                id: "c-1".into(),
                name: "read".into(),
                arguments: "{\"p\":1}".into(),
                internal: true,
            },
        ];
        for item in &items {
            let owned = match item.clone() {
                Item::Assistant { body, thinking } => ItemBin::Assistant { body, thinking },
                Item::ToolCall {
                    id,
                    name,
                    arguments,
                    internal,
                } => ItemBin::ToolCall {
                    id,
                    name,
                    arguments,
                    internal,
                },
            };
            assert_eq!(postcard(item), postcard(&owned), "{item:?}");
            let back: Item = postcard::from_bytes(&postcard(item)).expect("decode");
            assert_eq!(&back, item);
        }
        for part in [
            Part::Text {
                text: "x".repeat(200),
            },
            Part::Attachment {
                digest: "sha256:00".into(),
            },
        ] {
            let owned = match part.clone() {
                Part::Text { text } => PartBin::Text { text },
                Part::Attachment { digest } => PartBin::Attachment { digest },
            };
            assert_eq!(postcard(&part), postcard(&owned), "{part:?}");
        }
    }

    fn sample_events() -> Vec<Event> {
        let raw = |t: &str| RawJson::from_string(t.into()).expect("json");
        vec![
            Event::SessionCreated(SessionCreated {
                workspace: Some("/w".into()),
                branch: Some(Branch {
                    session_id: "s".into(),
                    through: 9,
                    turn: None,
                }),
            }),
            Event::UserMessage(UserMessage {
                invocation: "i1".into(),
                text: "hello ✓".into(),
                attachments: vec![AttachmentMeta {
                    name: "a.png".into(),
                    mime_type: "image/png".into(),
                    bytes: 3,
                    digest: "sha256:00".into(),
                }],
            }),
            Event::ModelCompletion(ModelCompletion {
                invocation: "i1".into(),
                model: "m".into(),
                items: vec![
                    Item::Assistant {
                        body: "b".into(),
                        thinking: Some("t".into()),
                    },
                    Item::Assistant {
                        body: "b2".into(),
                        thinking: None,
                    },
                    Item::ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        arguments: "{}".into(),
                        internal: true,
                    },
                ],
                usage: Some(Usage {
                    input_tokens: 1,
                    output_tokens: 2,
                }),
            }),
            Event::ToolResult(ToolResult {
                invocation: "i1".into(),
                tool_call_id: "c1".into(),
                status: ToolStatus::Error,
                body: "out".repeat(100),
                raw: raw("{\"x\": [1, 2.50]}"),
                parts: vec![
                    Part::Text { text: "p".into() },
                    Part::Attachment {
                        digest: "sha256:11".into(),
                    },
                ],
                bytes: 300,
                digest: "sha256:22".into(),
            }),
            Event::TurnSettled(TurnSettled {
                invocation: "i1".into(),
                outcome: Outcome::Stopped,
            }),
            Event::StopRequested(StopRequested {
                invocation: "i1".into(),
            }),
            Event::InteractionRequested(InteractionRequested {
                interaction_id: "q".into(),
                invocation: "i1".into(),
                prompt: "ok?".into(),
                options: raw("[\"yes\"]"),
            }),
            Event::InteractionResolved(InteractionResolved {
                interaction_id: "q".into(),
                response: raw("{\"choice\": \"yes\"}"),
            }),
            Event::ContextPrepared(ContextPrepared {
                invocation: "i1".into(),
                groups: vec![ContextGroup {
                    role: "user".into(),
                    messages: raw("[]"),
                    estimated_tokens: 4,
                }],
                tools: vec![ContextTool {
                    name: "read".into(),
                    estimated_tokens: 5,
                }],
                provider_usage: Some(raw("{}")),
            }),
            Event::TitleSet(TitleSet {
                title: "a title".into(),
            }),
            Event::ImportMark(ImportMark {
                origin: "claude:abc".into(),
                lines: 12,
                prefix_digest: "sha256:33".into(),
                parent: Some("claude-p".into()),
            }),
        ]
    }

    /// The bytes of an event record holding `e` as event 7, as the log stores it.
    fn record(e: &Event) -> Vec<u8> {
        let mut bytes = vec![7u8];
        bytes.extend(postcard(e));
        bytes
    }

    #[test]
    fn import_marks_round_trip_on_the_wire_and_on_disk_and_publish_no_row() {
        let wire = r#"{"kind":"importMark","origin":"codex:x","lines":3,"prefixDigest":"sha256:00","parent":null}"#;
        let e: Event = serde_json::from_str(wire).expect("decode");
        assert_eq!(serde_json::to_string(&e).expect("encode"), wire);
        let back: Event = postcard::from_bytes(&postcard(&e)).expect("postcard");
        assert_eq!(back, e);
        assert!(rows_of(&e).is_empty());
        let missing = r#"{"kind":"importMark","origin":"codex:x","prefixDigest":"sha256:00"}"#;
        let err = serde_json::from_str::<Event>(missing).expect_err("lines is needed");
        assert!(err.to_string().contains("`lines`"), "{err}");
    }

    #[test]
    fn borrowed_decoding_gives_the_rows_of_the_owned_event() {
        for e in sample_events() {
            let bytes = record(&e);
            let (seq, rows) = event_record_rows(&bytes).expect("decode");
            assert_eq!(seq, 7);
            assert_eq!(rows, rows_of(&e), "{}", e.kind());
            // Every cut of the record decodes to an error or to the same rows, never a panic
            // or other rows.
            for cut in 0..bytes.len() {
                if let Ok((s, r)) = event_record_rows(&bytes[..cut]) {
                    assert_eq!((s, &r), (7, &rows_of(&e)), "{} cut at {cut}", e.kind());
                }
            }
        }
    }

    #[test]
    fn borrowed_decoding_refuses_bad_tags_and_varints() {
        let e = Event::ModelCompletion(ModelCompletion {
            invocation: "i".into(),
            model: "m".into(),
            items: vec![Item::Assistant {
                body: "b".into(),
                thinking: None,
            }],
            usage: None,
        });
        let good = record(&e);
        // [seq 7][kind 2][len 1 'i'][len 1 'm'][1 item][variant 0][len 1 'b'][option 0]...
        let mut bad_option = good.clone();
        bad_option[10] = 2;
        assert!(event_record_rows(&bad_option).is_err());
        let mut bad_kind = good.clone();
        bad_kind[1] = 11;
        assert!(event_record_rows(&bad_kind).is_err());
        let mut bad_item = good.clone();
        bad_item[7] = 5;
        assert!(event_record_rows(&bad_item).is_err());
        let too_long = [0xffu8; 11];
        assert!(event_record_rows(&too_long).is_err());
    }

    #[test]
    fn borrowed_decoding_refuses_texts_that_are_not_utf8() {
        let long = format!("{}é{}", "x".repeat(100), "y".repeat(100));
        let user = Event::UserMessage(UserMessage {
            invocation: "i".into(),
            text: long.clone(),
            attachments: vec![],
        });
        let completion = Event::ModelCompletion(ModelCompletion {
            invocation: "i".into(),
            model: "m".into(),
            items: vec![Item::Assistant {
                body: "b".into(),
                thinking: Some(long),
            }],
            usage: None,
        });
        for e in [user, completion] {
            let mut bytes = record(&e);
            let at = bytes
                .windows(2)
                .position(|w| w == "é".as_bytes())
                .expect("the é");
            assert!(event_record_rows(&bytes).is_ok());
            bytes[at + 1] = b'(';
            assert!(event_record_rows(&bytes).is_err(), "{}", e.kind());
            assert!(
                postcard::from_bytes::<Event>(&bytes[1..]).is_err(),
                "{}",
                e.kind()
            );
        }
    }
}
