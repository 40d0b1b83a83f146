//! `logbook-engine`: the meaning layer of Logbook. It turns the log's records into Sessions,
//! facts, rows, fences, cursors and receipts.
//!
//! A [`Root`] is a directory: a header (`logbook.root`, magic + format version), a writer lock,
//! a Root log that registers Sessions (and holds createSession's receipts), one directory per
//! Session with its own log and derived indexes, and a content-addressed blob store. The full
//! layout is in `docs/format.md`.
//!
//! # Layers
//!
//! Each file imports only the files of the layers below it; no two files import each other:
//!
//! 1. **Facts**: `error`, `json`, `event`, `validate`, `params`, `cursor`, `records` (record
//!    kinds and payloads), `state` (derived facts and the checkpoint), `layer` (a fork's state
//!    at its fence), `filter` (trigram filters and query plans), `postings` (a Session's
//!    search index: postings per segment, which reads the Session's rows through the
//!    `IndexedSession` trait the Session implements), `index_pool` (the threads every
//!    Session's search index shares for background work), `catalog` (the listing facts
//!    of a Session, the catalog snapshot, and `catalog::Activity` through which a
//!    Session reports its commits upwards), `journal`, `blobs`, `fsutil`, `sync`, `progress`.
//! 2. **One Session**: `session` (log, indexes, state, mutations), `history` (pages,
//!    sources, watch), `search` (search of one Session), `diagnostics` (its diagnostics
//!    log).
//! 3. **The catalog**: `registry`: the Root's header, writer lock and Root log, the registry of
//!    Sessions, the cache of open Sessions (bounded by descriptors and memory), the index sync
//!    thread; `spares` (Session directories made ahead of `createSession`).
//! 4. **Operations across Sessions**: `fork`, `bundle` (`exportSession`, `importBundle`),
//!    `patches`, `search_root` (`searchRoot`), `root_diagnostics`.
//! 5. **The public [`Root`]** (`root`), whose methods the operations above extend.
//!
//! What one Session costs: see "What an open Session costs" in `docs/format.md` (2 descriptors
//! while open until its first checkpoint, 4 after, no thread while idle, about 8 KiB on disk
//! when empty: its sequence and row indexes stay in memory until that checkpoint; its
//! compressed size once closed idle). Creating one syncs only its Root-log record; its first
//! commit also syncs its directories, or none when it was made from a spare directory
//! ("Making a Session"). One `unsynced` mark serves every log of the Root.
//!
//! Invariants:
//! - A Session's log is the only truth; indexes and the state checkpoint are derived and are
//!   rebuilt or cut back when they are missing, damaged or ahead of the log.
//! - Event sequences are dense from 1; sequence 1 is `sessionCreated`.
//! - A mutation's events and its receipt are one log batch: after a crash both or neither exist.
//! - A read under fence F sees exactly the events `<= F`; pages are O(page), not O(history).
//! - Opening a Root or a Session costs O(tail after the last checkpoint), not O(history).
//! - Search postings ([`search`]) are derived as well: one file per finished log segment plus
//!   an in-memory builder for the active one, loaded on first search or append; hits are
//!   always verified on the text read from the log.
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
//!
//! Choices where the contract is silent (the API layer relies on them):
//! - `stop` of an unknown invocation is `NotFound`; of a settled one `Conflict`. A second stop
//!   of a still running invocation writes another `stopRequested`.
//! - `respond` to an unknown interaction is `NotFound`; to a resolved one `Conflict`.
//!   [`Root::interaction`] returns `None` for an unknown id (the API decides null vs not_found).
//! - `append` also refuses `sessionCreated` (only createSession writes it), a second
//!   `userMessage` for one invocation and a repeated `interactionRequested` id (`Conflict`), and
//!   an `interactionResolved` for an unknown id (`NotFound`) or a resolved one (`Conflict`).
//!   Attachments named by an appended `userMessage` must already be in the blob store.
//! - `watch` with `after: null` means `after: 0`; `timeoutMs` null means 0 (no wait); at most
//!   [`WATCH_TIMEOUT_MS_MAX`]. `nextAfter` is the last listed sequence (or `after` when none).
//! - `history`: `after` and `anchor` together are `InvalidArgument`; an anchor row that does not
//!   exist under the fence is `NotFound`; an event anchor outside `1..=through` is
//!   `InvalidArgument`; `limit: 0` is `InvalidArgument`. A backward page from an event anchor
//!   starts at that event's last row.
//! - `source`: an `after` past the end or inside a character is `InvalidArgument`; a field the
//!   row kind lacks is `InvalidArgument`; hidden rows are readable.
//! - Receipt lookup never replays the log: `receipt.idx` (operation hash -> receipt Location) is
//!   loaded into a hash map on the first mutation after open.
//! - Derived state comes back from `state.ckpt` (covers sequence C) plus the events after C.
//!
//! Raw JSON and deep nesting: parse a wire request into these param types directly with
//! serde_json (e.g. keep the envelope's `params` as `Box<RawValue>` and call
//! `serde_json::from_str::<AppendParams>(params.get())`). Never route a request through
//! `serde_json::Value`, `#[serde(flatten)]` or untagged/internally tagged enums: those recurse
//! per nesting level (serde_json stops at 128 levels) and lose raw text. [`validate_json`] checks
//! text of any depth iteratively.
#![forbid(unsafe_code)]

mod blobs;
pub mod bundle;
mod catalog;
mod cursor;
pub mod diagnostics;
mod error;
pub mod event;
mod filter;
pub mod fork;
mod fsutil;
mod history;
mod index_pool;
mod journal;
pub mod json;
mod layer;
pub mod params;
pub mod patches;
mod postings;
mod progress;
mod records;
mod registry;
mod root;
mod root_diagnostics;
pub mod search;
mod search_root;
mod session;
mod spares;
mod state;
mod sync;
pub mod validate;

pub use bundle::{
    ExportResult, ExportSessionParams, ImportBundleParams, ImportResult, BUNDLE_FORMAT_VERSION,
    BUNDLE_MAGIC,
};
pub use catalog::{CATALOG_FORMAT_VERSION, CATALOG_MAGIC};
pub use cursor::CURSOR_VERSION;
pub use diagnostics::{
    Diagnostic, DiagnosticCause, DiagnosticKind, DiagnosticsPage, DiagnosticsParams,
    DiagnosticsRevision, RecordDiagnosticParams, RecordDiagnosticResult, WatchDiagnosticsParams,
};
pub use error::{EngineError, ErrorKind};
pub use event::{
    AttachmentMeta, Branch, ContextGroup, ContextPrepared, ContextTool, Event, ImportMark,
    InteractionRequested, InteractionResolved, Item, ModelCompletion, Outcome, Part, RowKind,
    SessionCreated, StopRequested, ToolResult, ToolStatus, TurnSettled, Usage, UserMessage,
};
pub use fork::{ForkFrom, ForkParams, ForkReceiptParams, ForkResult};
pub use history::{
    FieldRef, PageEnd, RowRef, FIELD_TEXT_BYTES_MAX, PAGE_ROWS_DEFAULT, PAGE_ROWS_MAX,
    SOURCE_BYTES_DEFAULT, SOURCE_BYTES_MAX, WATCH_EVENTS_MAX, WATCH_TIMEOUT_MS_MAX,
};
pub use journal::JOURNAL_CHANGES_MAX;
pub use json::{validate_json, RawJson};
pub use logbook_log::Durability;
pub use params::*;
pub use patches::{PatchInfo, ReadPatchParams};
pub use progress::{Progress, ProgressSink, ProgressUnit};
pub use records::{registration, Registration, RegistrationKind};
pub use registry::{
    open_sessions_budget, raise_descriptor_limit, RootOptions, SearchIndexing, BLOCK_CACHE_BYTES,
    DESCRIPTORS_RESERVED, DESCRIPTOR_RETRIES_MAX, INDEX_SYNC_INTERVAL, LOCK_WAIT_MAX,
    OPEN_SESSIONS_BYTES_MAX, OPEN_SESSIONS_MAX, OPEN_SESSIONS_MIN, ROOT_FORMAT_VERSION, ROOT_MAGIC,
    SEARCH_TAIL_SAVE_PAIRS_MIN, SESSION_DESCRIPTORS,
};
pub use root::{
    Root, READ_ATTACHMENTS_BYTES_MAX, SEND_ATTACHMENTS_MAX, SEND_ATTACHMENT_BYTES_MAX,
    WORKSPACE_BYTES_MAX,
};
pub use search::{
    SearchHit, SearchPage, SearchParams, SEARCH_CURSOR_VERSION, SEARCH_DIR, SEARCH_FIELDS,
    SEARCH_HITS_DEFAULT, SEARCH_HITS_MAX, SEARCH_PAGE_BYTES_EXAMINED_MAX, SEARCH_PAGE_LOOKUPS_MAX,
    SEARCH_PAGE_ROWS_EXAMINED_MAX, SEARCH_QUERY_BYTES_MAX, SEARCH_SCAN_BYTES_MAX,
    SEARCH_SCAN_ROWS_MAX,
};
pub use search_root::{
    parse_rfc3339_ms, RootHit, SearchRootPage, SearchRootParams, SearchScope,
    SEARCH_ROOT_CURSOR_VERSION, SEARCH_ROOT_OPENS_PER_PAGE_MAX, SEARCH_ROOT_SESSIONS_PER_PAGE_MAX,
};
pub use session::{
    CHECKPOINT_LOG_BYTES, EVENT_CACHE_BYTES_MAX, SEAL_ON_CLOSE_BYTES_MAX, SEAL_ON_CLOSE_BYTES_MIN,
};
pub use state::{CHECKPOINT_FORMAT_VERSION, CHECKPOINT_MAGIC, TITLE_FROM_MESSAGE_CHARS_MAX};
