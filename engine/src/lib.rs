//! `logbook-engine`: the meaning layer of Logbook. It turns the log's records into Sessions,
//! facts, rows, fences, cursors and receipts.
//!
//! A [`Root`] is a directory: a header (`logbook.root`, magic + format version), a writer lock,
//! a Root log that registers Sessions (and holds createSession's receipts), one directory per
//! Session with its own log and derived indexes, and a content-addressed blob store. The full
//! layout is in `docs/format.md`.
//!
//! Invariants:
//! - A Session's log is the only truth; indexes and the state checkpoint are derived and are
//!   rebuilt or cut back when they are missing, damaged or ahead of the log.
//! - Event sequences are dense from 1; sequence 1 is `sessionCreated`.
//! - A mutation's events and its receipt are one log batch: after a crash both or neither exist.
//! - A read under fence F sees exactly the events `<= F`; pages are O(page), not O(history).
//! - Opening a Root or a Session costs O(tail after the last checkpoint), not O(history).
//!
//! ```no_run
//! use logbook_engine::{Root, CreateSessionParams, SendParams, HistoryParams, Direction};
//! # fn main() -> Result<(), logbook_engine::EngineError> {
//! let dir = std::path::Path::new("/tmp/example-root");
//! let root = Root::open_or_init(dir)?;
//! let s = root.create_session(CreateSessionParams { session_id: Some("demo".into()), workspace: None, operation: "op-1".into() })?;
//! root.send(SendParams { session_id: s.session_id.clone(), operation: "op-2".into(), text: "hello".into(), attachments: vec![] })?;
//! let page = root.history(HistoryParams { session_id: s.session_id, through: None, after: None, limit: None, anchor: None, direction: Some(Direction::Backward) })?;
//! assert_eq!(page.rows[0].fields["body"].text, "hello");
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod blobs;
mod cursor;
mod error;
pub mod event;
mod fsutil;
mod history;
pub mod json;
pub mod params;
mod records;
mod root;
pub mod search;
mod session;
mod state;
pub mod validate;

pub use cursor::CURSOR_VERSION;
pub use error::{EngineError, ErrorKind};
pub use event::{
    AttachmentMeta, Branch, ContextGroup, ContextPrepared, ContextTool, Event,
    InteractionRequested, InteractionResolved, Item, ModelCompletion, Outcome, Part, RowKind,
    SessionCreated, StopRequested, ToolResult, ToolStatus, TurnSettled, Usage, UserMessage,
};
pub use history::{
    FIELD_TEXT_BYTES_MAX, PAGE_ROWS_DEFAULT, PAGE_ROWS_MAX, SOURCE_BYTES_DEFAULT, SOURCE_BYTES_MAX,
    WATCH_EVENTS_MAX, WATCH_TIMEOUT_MS_MAX,
};
pub use json::{validate_json, RawJson};
pub use logbook_log::Durability;
pub use params::*;
pub use root::{
    Root, RootOptions, INDEX_SYNC_INTERVAL, READ_ATTACHMENTS_BYTES_MAX, ROOT_FORMAT_VERSION,
    ROOT_MAGIC, SEND_ATTACHMENTS_MAX, SEND_ATTACHMENT_BYTES_MAX, WORKSPACE_BYTES_MAX,
};
pub use search::{
    SEARCH_CURSOR_VERSION, SEARCH_DIR, SEARCH_HITS_DEFAULT, SEARCH_HITS_MAX,
    SEARCH_PAGE_BYTES_EXAMINED_MAX, SEARCH_PAGE_LOOKUPS_MAX, SEARCH_PAGE_ROWS_EXAMINED_MAX,
    SEARCH_QUERY_BYTES_MAX,
};
pub use state::{CHECKPOINT_FORMAT_VERSION, CHECKPOINT_MAGIC};
