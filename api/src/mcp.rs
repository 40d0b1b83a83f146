//! `logbook mcp`: the Model Context Protocol on standard input and output, so that coding
//! agents (and any other MCP client) can read their own history.
//!
//! Four tools, all read-only:
//!
//! | tool | wire method | answers |
//! |---|---|---|
//! | `list_sessions` | `sessions` | Sessions newest activity first, with titles |
//! | `search_sessions` | `searchRoot` | hits over every Session, each with a snippet |
//! | `read_history` | `history` | a page of one Session's rows, newest first by default |
//! | `read_source` | `source` | one field of one row, whole, in bounded pieces |
//!
//! Answers are plain text written for a model's context: every list is bounded (each limit
//! below has a name), long fields are cut with a note naming the `read_source` call that
//! reads the rest, and every answer ends by saying how to get more (the exact arguments of
//! the next call, cursor included) or that there is no more.
//!
//! Layers: [`Tools`] is synchronous. It reaches the Root only through
//! [`dispatch::call`](crate::dispatch::call) with the four reading methods of
//! [`READ_METHODS`] (plus the engine's `session_info` and `read_event` reads for titles), and
//! renders text. [`Server`] is the rmcp handler: it parses each tool's arguments, runs the
//! [`Tools`] call on tokio's blocking pool so the stdio loop never waits on the disk, and turns
//! every failure (a bad argument, an unknown Session) into a tool result with `isError`, never
//! a protocol error. [`serve_stdio`] keeps tokio inside this module: a current-thread runtime
//! that lives as long as standard input does.
//!
//! ```no_run
//! // What `logbook mcp --root DIR` runs.
//! logbook_api::mcp::serve_stdio(std::path::Path::new("/home/me/.logbook")).unwrap();
//! ```

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use logbook_engine::{HistoryPage, RootHit, Row, SearchRootPage, SessionInfo, SessionsPage};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig,
};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt as _};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::error::{ApiError, ErrorCode};
use crate::host::Host;

/// The wire methods the MCP server calls, all of them reads. [`Tools`] refuses any other, so a
/// mutation cannot be reached from a tool even by mistake.
pub const READ_METHODS: &[&str] = &["sessions", "searchRoot", "history", "source"];

/// Sessions `list_sessions` lists when no `limit` is given.
pub const LIST_SESSIONS_DEFAULT: u64 = 20;
/// Most Sessions one `list_sessions` answer lists.
pub const LIST_SESSIONS_MAX: u64 = 200;
/// Hits `search_sessions` answers when no `limit` is given.
pub const SEARCH_HITS_DEFAULT: u64 = 20;
/// Most hits one `search_sessions` answer holds.
pub const SEARCH_HITS_MAX: u64 = 100;
/// Most `searchRoot` pages one `search_sessions` call reads. Each page does bounded work and
/// may hold no hits, so this bounds the work of one call; the answer's cursor goes on.
pub const SEARCH_PAGES_PER_CALL_MAX: u32 = 32;
/// Bytes of context shown on each side of a search match.
pub const SNIPPET_CONTEXT_BYTES: u64 = 80;
/// Most bytes of the match itself shown in a snippet (a long query is shown cut).
pub const SNIPPET_MATCH_BYTES_MAX: u64 = 240;
/// Rows `read_history` answers when no `limit` is given.
pub const HISTORY_ROWS_DEFAULT: u64 = 20;
/// Most rows one `read_history` answer holds.
pub const HISTORY_ROWS_MAX: u64 = 100;
/// Bytes of each field `read_history` shows when no `fieldBytes` is given.
pub const FIELD_BYTES_DEFAULT: u64 = 1_000;
/// Most bytes of each field `read_history` shows.
pub const FIELD_BYTES_MAX: u64 = 16_384;
/// Most bytes of row text in one `read_history` answer: a page stops early (with a cursor
/// that goes on from the last row shown) rather than pass it. The first row always shows.
pub const HISTORY_TEXT_BYTES_MAX: usize = 48_000;
/// Bytes `read_source` answers when no `maxBytes` is given.
pub const SOURCE_BYTES_DEFAULT: u64 = 32_768;
/// Most bytes one `read_source` answer holds.
pub const SOURCE_BYTES_MAX: u64 = 262_144;
/// How long the runtime waits, once standard input has ended, for tool calls still running.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// Opens the Root the server reads: as a reader beside its writer (no lock, nothing written,
/// the writer's appends seen within 100 ms).
fn open_root(root: &Path) -> Result<Host, ApiError> {
    Host::open_read_only(root)
}

/// Serves MCP on standard input and output until the input ends, reading the Root at `root`
/// (which must exist: nothing is created). Input that ends before any message is a quiet
/// end, not an error. The tokio runtime lives and dies here.
pub fn serve_stdio(root: &Path) -> Result<(), ApiError> {
    let tools = Arc::new(Tools::with_host(open_root(root)?));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ApiError::new(ErrorCode::Io, format!("mcp: cannot start a runtime: {e}")))?;
    let served = runtime.block_on(async move {
        let service = match Server::new(tools).serve(rmcp::transport::stdio()).await {
            Ok(service) => service,
            // The input ended before a client said anything: nothing to serve, as `serve`
            // exits at the end of its input.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
            Err(e) => {
                return Err(ApiError::new(
                    ErrorCode::Io,
                    format!("mcp: initialisation: {e}"),
                ))
            }
        };
        service
            .waiting()
            .await
            .map_err(|e| ApiError::new(ErrorCode::Io, format!("mcp: the server stopped: {e}")))?;
        Ok(())
    });
    runtime.shutdown_timeout(SHUTDOWN_WAIT);
    served
}

/// What `initialize` tells the client about using the tools.
const INSTRUCTIONS: &str = "Logbook keeps the history of agent Sessions (conversations): user \
messages, model answers and thinking, tool calls and their results. Start with list_sessions \
(newest first) or search_sessions (literal text over every Session), then read_history to read \
a Session in pages, and read_source when a field was cut. Rows are named SEQUENCE.ITEM (the \
event that wrote them and their index in it). Every answer ends with the arguments of the call \
that continues it. Nothing here changes the history.";

const LIST_SESSIONS_ABOUT: &str = "List the Sessions (agent conversations) stored in this \
Logbook Root, newest activity first: id, title, last activity (UTC), row count and workspace. \
Use it to find a Session id for read_history, or to see what was worked on recently. Answers \
at most `limit` Sessions and ends with the `after` value for the next ones.";

const SEARCH_SESSIONS_ABOUT: &str = "Search every Session of this Logbook Root for a literal \
text (no regex; case-insensitive unless caseSensitive) in user messages, model answers and \
thinking, tool-call arguments, tool results and titles. Hits come newest Session first, newest \
row first, each with a short snippet around the match marked «like this» and its row \
(SEQUENCE.ITEM). Narrow it with sessionIds, workspace or activeSince. Follow the `after` value \
the answer ends with for more hits; open a hit with read_history (anchorSequence = SEQUENCE).";

const READ_HISTORY_ABOUT: &str = "Read one Session's history in pages: user messages, \
assistant answers (with thinking), tool calls and tool results, newest first by default \
(direction \"forward\" reads from the start). Each field is cut to fieldBytes, with a note \
giving the read_source call for the rest. anchorSequence opens the page at an event (for \
example a search hit's SEQUENCE). The answer ends with the arguments of the next page.";

const READ_SOURCE_ABOUT: &str = "Read one field of one history row whole (read_history and \
search_sessions cut long ones): the row is SEQUENCE.ITEM as they show it, the field one of \
body, thinking, arguments or name. Long fields come in pieces of at most maxBytes; the answer \
ends with the offset of the next piece.";

/// Arguments of `list_sessions`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListSessionsArgs {
    /// Most Sessions to list (default 20, at most 200).
    #[schemars(range(min = 1, max = 200), extend("default" = 20))]
    pub limit: Option<u64>,
    /// The `after` value a previous list_sessions answer ended with, to go on from there.
    /// Omit it to start from the newest Session.
    pub after: Option<String>,
    /// Only the Sessions of this workspace: the exact absolute directory they were started in.
    pub workspace: Option<String>,
}

/// Arguments of `search_sessions`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchSessionsArgs {
    /// The literal text to find (not a regular expression; not empty).
    pub query: String,
    /// Match case exactly (default false: Unicode simple case folding on both sides).
    #[schemars(extend("default" = false))]
    pub case_sensitive: Option<bool>,
    /// Only matches that are whole words (default false).
    #[schemars(extend("default" = false))]
    pub whole_word: Option<bool>,
    /// Only these Sessions (ids as list_sessions shows them).
    pub session_ids: Option<Vec<String>>,
    /// Only the Sessions of this workspace: the exact absolute directory they were started in.
    pub workspace: Option<String>,
    /// Only Sessions active at or after this time, RFC 3339 (for example 2026-12-01T00:00:00Z).
    pub active_since: Option<String>,
    /// Most hits to answer (default 20, at most 100).
    #[schemars(range(min = 1, max = 100), extend("default" = 20))]
    pub limit: Option<u64>,
    /// The `after` value a previous search_sessions answer ended with, to go on from there.
    /// Give the same query and options with it. Omit it to start a new search.
    pub after: Option<String>,
}

/// Which way `read_history` pages run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum HistoryDirection {
    /// Newest row first, from the end (or the anchor) towards the start.
    #[default]
    Backward,
    /// Oldest row first, from the start (or the anchor) towards the end.
    Forward,
}

impl HistoryDirection {
    fn as_str(self) -> &'static str {
        match self {
            HistoryDirection::Backward => "backward",
            HistoryDirection::Forward => "forward",
        }
    }
}

/// Arguments of `read_history`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadHistoryArgs {
    /// The Session id (list_sessions and search_sessions show them).
    pub session_id: String,
    /// "backward" (default): newest row first; "forward": oldest first.
    #[schemars(extend("default" = "backward"))]
    pub direction: Option<HistoryDirection>,
    /// Most rows to answer (default 20, at most 100). A page of long rows may hold fewer.
    #[schemars(range(min = 1, max = 100), extend("default" = 20))]
    pub limit: Option<u64>,
    /// The `after` value a previous read_history answer ended with, to read the next page.
    /// Give the same sessionId, through and direction with it; not with anchorSequence.
    pub after: Option<String>,
    /// Read the Session as of this revision (a previous answer names it). Omit it for now.
    pub through: Option<u64>,
    /// Open the page at this event sequence (the SEQUENCE of a row, such as a search hit's)
    /// instead of at the end (backward) or the start (forward). Not with `after`.
    pub anchor_sequence: Option<u64>,
    /// Bytes of each field to show (default 1000, at most 16384); longer fields are cut
    /// with a note giving the read_source call for the rest.
    #[schemars(range(min = 1, max = 16384), extend("default" = 1000))]
    pub field_bytes: Option<u64>,
}

/// Arguments of `read_source`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadSourceArgs {
    /// The Session id.
    pub session_id: String,
    /// The row's event sequence: the first number of SEQUENCE.ITEM.
    pub sequence: u64,
    /// The row's index inside its event: the second number of SEQUENCE.ITEM (default 0).
    #[schemars(extend("default" = 0))]
    pub item_index: Option<u32>,
    /// The field: body (default), thinking, arguments (of a tool call) or name.
    #[schemars(extend("default" = "body"))]
    pub field: Option<String>,
    /// Byte offset to read from (default 0), as a previous answer or cut note gives it.
    #[schemars(extend("default" = 0))]
    pub offset: Option<u64>,
    /// Most bytes to answer (default 32768, at most 262144).
    #[schemars(range(min = 1, max = 262_144), extend("default" = 32_768))]
    pub max_bytes: Option<u64>,
}

/// The tools' work, synchronous: each call reads through the dispatcher and answers text.
#[derive(Debug)]
pub struct Tools {
    host: Host,
}

/// A limit as asked, or its default, or its most (with a note saying it was lowered).
fn bounded(
    name: &str,
    asked: Option<u64>,
    default: u64,
    most: u64,
) -> Result<(u64, String), ApiError> {
    match asked {
        None => Ok((default, String::new())),
        Some(0) => Err(ApiError::invalid(format!("{name} must be at least 1"))),
        Some(n) if n > most => Ok((
            most,
            format!("({name} {n} is above the most this tool answers, {most}: {most} it is.)\n"),
        )),
        Some(n) => Ok((n, String::new())),
    }
}

/// `value` as compact JSON, for the arguments of a next call and for quoted strings.
fn json_text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// A quoted string, escaped as JSON (titles and queries may hold quotes and newlines).
fn quoted(text: &str) -> String {
    json_text(&Value::from(text))
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` on one line: every run of white space inside it one space (none at either end),
/// other control characters shown as `\u{..}` escapes.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            space = true;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

impl Tools {
    /// The tools over an open Host (the server opens it with [`serve_stdio`]).
    pub fn with_host(host: Host) -> Tools {
        Tools { host }
    }

    /// Calls a reading wire method and decodes its answer.
    fn read<T: DeserializeOwned>(&self, method: &str, params: Value) -> Result<T, ApiError> {
        assert!(
            READ_METHODS.contains(&method),
            "the MCP server calls only reading methods, never {method:?}"
        );
        let raw = RawValue::from_string(params.to_string()).expect("a Value always encodes");
        let answer = crate::dispatch::call(&self.host, method, Some(&raw), &mut |_| {})?;
        serde_json::from_str(answer.get()).map_err(|e| {
            ApiError::new(
                ErrorCode::Io,
                format!("{method} answered a shape the MCP server does not read: {e}"),
            )
        })
    }

    /// `list_sessions`: one line per Session, newest activity first.
    pub fn list_sessions(&self, a: ListSessionsArgs) -> Result<String, ApiError> {
        let (limit, mut out) = bounded("limit", a.limit, LIST_SESSIONS_DEFAULT, LIST_SESSIONS_MAX)?;
        let page: SessionsPage = self.read(
            "sessions",
            json!({"after": a.after, "limit": limit, "workspace": a.workspace,
                   "order": "lastActivity"}),
        )?;
        if page.sessions.is_empty() {
            out.push_str(match (&a.after, &a.workspace) {
                (Some(_), _) => "No more Sessions.\n",
                (None, Some(_)) => "No Session of that workspace.\n",
                (None, None) => "This Root holds no Session yet.\n",
            });
        } else {
            let _ = writeln!(
                out,
                "{} Session(s), newest activity first:",
                page.sessions.len()
            );
        }
        for s in &page.sessions {
            session_line(&mut out, s);
        }
        match &page.next_after {
            Some(cursor) => {
                let mut next = json!({"after": cursor, "limit": limit});
                if let Some(w) = &a.workspace {
                    next["workspace"] = Value::from(w.as_str());
                }
                let _ = writeln!(
                    out,
                    "More Sessions follow: call list_sessions with {}",
                    json_text(&next)
                );
            }
            None if !page.sessions.is_empty() => out.push_str("That is the last Session.\n"),
            None => {}
        }
        if !page.sessions.is_empty() {
            out.push_str(
                "Read one with read_history {\"sessionId\": ID}; search them all with search_sessions.\n",
            );
        }
        Ok(out)
    }

    /// `search_sessions`: hits over the Root, grouped by Session, each with a snippet.
    pub fn search_sessions(&self, a: SearchSessionsArgs) -> Result<String, ApiError> {
        let (want, mut out) = bounded("limit", a.limit, SEARCH_HITS_DEFAULT, SEARCH_HITS_MAX)?;
        let (hits, after) = self.collect_hits(&a, want)?;
        let _ = writeln!(
            out,
            "{} hit(s) for {}{}, newest Session first, newest row first:",
            hits.len(),
            quoted(&a.query),
            if a.after.is_some() {
                " (continued)"
            } else {
                ""
            }
        );
        self.write_hits(&mut out, &hits);
        out.push('\n');
        match &after {
            Some(cursor) => {
                if hits.is_empty() {
                    out.push_str(
                        "No hit in the part of the Root searched so far (one call does bounded work). ",
                    );
                }
                let _ = writeln!(
                    out,
                    "More hits may follow: call search_sessions with {}",
                    json_text(&search_next(&a, want, cursor))
                );
            }
            None => out.push_str("That is every hit.\n"),
        }
        if let Some(hit) = hits.first() {
            let _ = writeln!(
                out,
                "Read a hit in its conversation with read_history {}",
                json_text(&json!({"sessionId": hit.session_id,
                                  "anchorSequence": hit.position.source_sequence,
                                  "direction": "forward"}))
            );
        }
        Ok(out)
    }

    /// Up to `want` hits, following `searchRoot`'s cursor for at most
    /// [`SEARCH_PAGES_PER_CALL_MAX`] pages, and the cursor that goes on after them.
    fn collect_hits(
        &self,
        a: &SearchSessionsArgs,
        want: u64,
    ) -> Result<(Vec<RootHit>, Option<String>), ApiError> {
        let scope = if a.session_ids.is_some() || a.workspace.is_some() || a.active_since.is_some()
        {
            json!({"sessionIds": a.session_ids, "workspace": a.workspace,
                   "activeSince": a.active_since})
        } else {
            Value::Null
        };
        let mut hits: Vec<RootHit> = Vec::new();
        let mut after = a.after.clone();
        for _ in 0..SEARCH_PAGES_PER_CALL_MAX {
            let page: SearchRootPage = self.read(
                "searchRoot",
                json!({"query": a.query, "caseSensitive": a.case_sensitive,
                       "wholeWord": a.whole_word, "scope": scope, "after": after,
                       "limit": want - hits.len() as u64}),
            )?;
            debug_assert!(
                hits.len() + page.hits.len() <= want as usize,
                "a page holds at most its limit"
            );
            hits.extend(page.hits);
            after = page.next_after;
            if after.is_none() || hits.len() as u64 >= want {
                break;
            }
        }
        Ok((hits, after))
    }

    /// The hits, under a heading (id and title) each time the Session changes.
    fn write_hits(&self, out: &mut String, hits: &[RootHit]) {
        let mut last: Option<&str> = None;
        for hit in hits {
            if last != Some(hit.session_id.as_str()) {
                let _ = writeln!(
                    out,
                    "\nSession {} {}",
                    hit.session_id,
                    self.title_text(&hit.session_id)
                );
                last = Some(&hit.session_id);
            }
            let _ = writeln!(
                out,
                "  {}.{} {}: {}",
                hit.position.source_sequence,
                hit.position.item_index,
                hit.field,
                self.snippet(hit)
            );
        }
    }

    /// `read_history`: a page of rows, each field cut to `fieldBytes`, within
    /// [`HISTORY_TEXT_BYTES_MAX`].
    pub fn read_history(&self, a: ReadHistoryArgs) -> Result<String, ApiError> {
        let (limit, mut out) = bounded("limit", a.limit, HISTORY_ROWS_DEFAULT, HISTORY_ROWS_MAX)?;
        let (field_bytes, note) = bounded(
            "fieldBytes",
            a.field_bytes,
            FIELD_BYTES_DEFAULT,
            FIELD_BYTES_MAX,
        )?;
        out.push_str(&note);
        let direction = a.direction.unwrap_or_default();
        let (page, rows) = self.history_page(&a, limit, field_bytes)?;
        let info = self.host.root().session_info(&a.session_id)?;
        let _ = writeln!(
            out,
            "Session {} {}{}, at revision {}: {} row(s), {}:",
            a.session_id,
            info.title
                .as_deref()
                .map_or("(untitled)".to_owned(), quoted),
            info.workspace
                .as_deref()
                .map_or(String::new(), |w| format!(", workspace {}", quoted(w))),
            page.through,
            page.rows.len(),
            match direction {
                HistoryDirection::Backward => "newest first",
                HistoryDirection::Forward => "oldest first",
            }
        );
        out.push_str(&rows);
        out.push('\n');
        match &page.next_after {
            Some(cursor) => {
                let mut next = json!({"sessionId": a.session_id, "through": page.through,
                                      "after": cursor, "direction": direction.as_str()});
                if a.limit.is_some() {
                    next["limit"] = Value::from(limit);
                }
                if a.field_bytes.is_some() {
                    next["fieldBytes"] = Value::from(field_bytes);
                }
                let _ = writeln!(
                    out,
                    "{} rows follow: call read_history with {}",
                    match direction {
                        HistoryDirection::Backward => "Older",
                        HistoryDirection::Forward => "Newer",
                    },
                    json_text(&next)
                );
            }
            None => out.push_str(match direction {
                HistoryDirection::Backward => "That is the start of the Session.\n",
                HistoryDirection::Forward => {
                    "That is the end of the Session at this revision (omit through to read what came later).\n"
                }
            }),
        }
        Ok(out)
    }

    /// A history page and its rows as text: as many rows as fit in
    /// [`HISTORY_TEXT_BYTES_MAX`] (at least one), and the cursor that goes on after the last
    /// of them.
    fn history_page(
        &self,
        a: &ReadHistoryArgs,
        limit: u64,
        field_bytes: u64,
    ) -> Result<(HistoryPage, String), ApiError> {
        let params = |through: Option<u64>, limit: u64| {
            json!({"sessionId": a.session_id, "through": through, "after": a.after,
                   "limit": limit, "direction": a.direction.unwrap_or_default().as_str(),
                   "anchor": a.anchor_sequence.map(|s| json!({"kind": "event", "sequence": s}))})
        };
        let mut page: HistoryPage = self.read("history", params(a.through, limit))?;
        let mut rows = String::new();
        let mut shown = 0;
        let mut turn: Option<&str> = None;
        for row in &page.rows {
            let text = row_text(&a.session_id, row, field_bytes as usize, &mut turn);
            if shown > 0 && rows.len() + text.len() > HISTORY_TEXT_BYTES_MAX {
                break;
            }
            rows.push_str(&text);
            shown += 1;
        }
        if shown < page.rows.len() {
            // The page was longer than an answer holds: the same read under the same fence,
            // cut to the rows shown, gives the cursor that goes on from the last of them.
            let fewer: HistoryPage =
                self.read("history", params(Some(page.through), shown as u64))?;
            debug_assert_eq!(
                fewer.rows[..],
                page.rows[..shown],
                "history under a fence is stable"
            );
            page.next_after = fewer.next_after;
            page.rows.truncate(shown);
        }
        Ok((page, rows))
    }

    /// `read_source`: one piece of one field, and where the next piece starts.
    pub fn read_source(&self, a: ReadSourceArgs) -> Result<String, ApiError> {
        let (max_bytes, mut out) = bounded(
            "maxBytes",
            a.max_bytes,
            SOURCE_BYTES_DEFAULT,
            SOURCE_BYTES_MAX,
        )?;
        let item = a.item_index.unwrap_or(0);
        let field = a.field.as_deref().unwrap_or("body");
        let offset = a.offset.unwrap_or(0);
        let page: logbook_engine::TextPage = self.read(
            "source",
            json!({"sessionId": a.session_id, "through": null,
                   "position": {"sourceSequence": a.sequence, "itemIndex": item},
                   "field": field, "after": offset, "limit": max_bytes}),
        )?;
        let end = offset + page.text.len() as u64;
        let _ = writeln!(
            out,
            "Field {field} of row {}.{item} in Session {}, bytes {offset} to {end}{}:",
            a.sequence,
            a.session_id,
            if page.next_after.is_none() && offset == 0 {
                " (the whole field)"
            } else {
                ""
            }
        );
        out.push_str(&page.text);
        if !page.text.ends_with('\n') {
            out.push('\n');
        }
        match page.next_after {
            Some(next) => {
                let mut args = json!({"sessionId": a.session_id, "sequence": a.sequence,
                                      "itemIndex": item, "field": field, "offset": next});
                if a.max_bytes.is_some() {
                    args["maxBytes"] = Value::from(max_bytes);
                }
                let _ = writeln!(
                    out,
                    "(more of this field follows: call read_source with {})",
                    json_text(&args)
                );
            }
            None => out.push_str("(end of the field)\n"),
        }
        Ok(out)
    }

    /// A Session's title, quoted, for a heading; `(untitled)` when it has none or is damaged.
    fn title_text(&self, session_id: &str) -> String {
        match self.host.root().session_info(session_id) {
            Ok(SessionInfo { title: Some(t), .. }) => quoted(&t),
            _ => "(untitled)".to_owned(),
        }
    }

    /// The text around a hit on one line, the match marked `«` `»`.
    fn snippet(&self, hit: &RootHit) -> String {
        match self.snippet_parts(hit) {
            Ok(p) => format!(
                "{}{}{}",
                if p.more_before { "…" } else { "" },
                one_line(&format!(
                    "{}«{}{}»{}",
                    p.before,
                    p.matched,
                    if p.match_cut { "…" } else { "" },
                    p.after
                )),
                if p.more_after { "…" } else { "" },
            ),
            Err(err) => format!("(no snippet: {err})"),
        }
    }

    /// The pieces of a hit's snippet, read with `source` (a title from its `titleSet` event).
    fn snippet_parts(&self, hit: &RootHit) -> Result<SnippetParts, ApiError> {
        let (start, end) = (hit.start, hit.end.max(hit.start));
        let shown_end = end.min(start + SNIPPET_MATCH_BYTES_MAX);
        if hit.field == "title" {
            // A title is no row's field: it is read from the event that set it.
            let event = self
                .host
                .root()
                .read_event(&hit.session_id, hit.position.source_sequence)?;
            let logbook_engine::Event::TitleSet(t) = event else {
                return Err(ApiError::new(
                    ErrorCode::Corrupt,
                    "a title hit names no titleSet event",
                ));
            };
            let text = t.title;
            let at = |i: u64| usize::try_from(i).unwrap_or(usize::MAX).min(text.len());
            let from = floor_boundary(&text, at(start.saturating_sub(SNIPPET_CONTEXT_BYTES)));
            let to = ceil_boundary(&text, at(end.saturating_add(SNIPPET_CONTEXT_BYTES)));
            let (s, m, e) = (at(start), ceil_boundary(&text, at(shown_end)), at(end));
            let get = |a: usize, b: usize| text.get(a..b.max(a)).unwrap_or("").to_owned();
            return Ok(SnippetParts {
                more_before: from > 0,
                before: get(from, s),
                matched: get(s, m),
                match_cut: m < e,
                after: get(e, to),
                more_after: to < text.len(),
            });
        }
        let source = |from: u64, len: u64| -> Result<logbook_engine::TextPage, ApiError> {
            self.read(
                "source",
                json!({"sessionId": hit.session_id, "through": null, "position": hit.position,
                       "field": hit.field, "after": from, "limit": len}),
            )
        };
        let mut parts = SnippetParts::default();
        if start > 0 {
            // `source` starts only on a character boundary, and one of any four byte offsets
            // in a row is one.
            let mut tries =
                (0..4u32).map(|back| start.saturating_sub(SNIPPET_CONTEXT_BYTES + u64::from(back)));
            let (from, page) = loop {
                let from = tries.next().expect("one of four offsets is a boundary");
                match source(from, start - from) {
                    Ok(page) => break (from, page),
                    Err(e) if from == 0 || tries.len() == 0 => return Err(e),
                    Err(_) => continue,
                }
            };
            parts.more_before = from > 0;
            parts.before = page.text;
        }
        let matched = source(start, shown_end - start)?;
        parts.match_cut = shown_end < end;
        if matched.next_after.is_some() {
            // The context after a cut match starts at the match's end, not at the cut.
            if let Ok(page) = source(end, SNIPPET_CONTEXT_BYTES) {
                parts.after = page.text;
                parts.more_after = page.next_after.is_some();
            }
        }
        parts.matched = matched.text;
        Ok(parts)
    }
}

/// A snippet before it is put on one line.
#[derive(Debug, Default)]
struct SnippetParts {
    /// Text of the field precedes `before`.
    more_before: bool,
    /// Up to [`SNIPPET_CONTEXT_BYTES`] before the match.
    before: String,
    /// The match, cut to [`SNIPPET_MATCH_BYTES_MAX`].
    matched: String,
    /// The match was longer than `matched`.
    match_cut: bool,
    /// Up to [`SNIPPET_CONTEXT_BYTES`] after the match.
    after: String,
    /// Text of the field follows `after`.
    more_after: bool,
}

/// The largest character boundary of `text` at or below `i`.
fn floor_boundary(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest character boundary of `text` at or above `i`.
fn ceil_boundary(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The arguments of the `search_sessions` call that goes on from `cursor`: the same query
/// and options (a cursor is bound to them).
fn search_next(a: &SearchSessionsArgs, want: u64, cursor: &str) -> Value {
    let mut next = json!({"query": a.query, "after": cursor});
    for (name, value) in [
        ("caseSensitive", a.case_sensitive.map(Value::from)),
        ("wholeWord", a.whole_word.map(Value::from)),
        ("sessionIds", a.session_ids.as_ref().map(|s| json!(s))),
        ("workspace", a.workspace.as_deref().map(Value::from)),
        ("activeSince", a.active_since.as_deref().map(Value::from)),
        ("limit", a.limit.map(|_| Value::from(want))),
    ] {
        if let Some(v) = value {
            next[name] = v;
        }
    }
    next
}

/// One line of `list_sessions`.
fn session_line(out: &mut String, s: &SessionInfo) {
    if let Some(d) = &s.damage {
        let _ = writeln!(
            out,
            "- {}: damaged, its reads answer {}: {}",
            s.session_id,
            d.code,
            one_line(&d.message)
        );
        return;
    }
    let _ = write!(
        out,
        "- {} {}: last active {}, {} row(s)",
        s.session_id,
        s.title.as_deref().map_or("(untitled)".to_owned(), quoted),
        crate::time::rfc3339(s.last_activity_at),
        s.rows
    );
    if let Some(w) = &s.workspace {
        let _ = write!(out, ", workspace {}", quoted(w));
    }
    if let Some(b) = &s.branch {
        let _ = write!(
            out,
            ", forked from {} at revision {}",
            b.session_id, b.through
        );
    }
    if let Some(p) = &s.parent {
        let _ = write!(out, ", a sub-agent of {p}");
    }
    out.push('\n');
}

/// The order fields are shown in: the tool name first (in the heading), thinking before the
/// answer it led to.
const FIELD_ORDER: &[&str] = &["thinking", "body", "arguments"];

/// One row of `read_history`: a heading `SEQUENCE.ITEM kind [name]`, a turn line when the
/// invocation changes, then each field, cut to `field_bytes` with a note when longer.
fn row_text<'r>(
    session: &str,
    row: &'r Row,
    field_bytes: usize,
    turn: &mut Option<&'r str>,
) -> String {
    let mut out = String::new();
    let inv = row.invocation.as_str();
    if turn.is_none_or(|t| t != inv) {
        let _ = writeln!(out, "\n— turn {inv} —");
    }
    let pos = &row.position;
    let kind = serde_json::to_value(row.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let _ = write!(out, "[{}.{}] {kind}", pos.source_sequence, pos.item_index);
    if let Some(name) = row.fields.get("name") {
        let _ = write!(out, " {}", one_line(prefix(&name.text, field_bytes)));
    }
    out.push('\n');
    let rest = row
        .fields
        .keys()
        .filter(|k| *k != "name" && !FIELD_ORDER.contains(&k.as_str()))
        .map(String::as_str);
    for name in FIELD_ORDER.iter().copied().chain(rest) {
        let Some(field) = row.fields.get(name) else {
            continue;
        };
        if field.text.is_empty() && name == "thinking" {
            continue;
        }
        let shown = prefix(&field.text, field_bytes);
        let _ = write!(out, "{name}: {shown}");
        if !shown.ends_with('\n') {
            out.push('\n');
        }
        if (shown.len() as u64) < field.bytes {
            let args = json!({"sessionId": session, "sequence": pos.source_sequence,
                              "itemIndex": pos.item_index, "field": name,
                              "offset": shown.len()});
            let _ = writeln!(
                out,
                "[{name} cut: {} of {} bytes shown; read_source {} reads the rest]",
                shown.len(),
                field.bytes,
                json_text(&args)
            );
        }
    }
    *turn = Some(inv);
    out
}

/// A tool error's text: the code, the message, and where to look when a name was wrong.
fn error_text(tool: &str, err: &ApiError) -> String {
    let hint = match err.code {
        ErrorCode::NotFound => {
            " (list_sessions shows the Session ids; read_history shows rows as SEQUENCE.ITEM)"
        }
        ErrorCode::Busy => " (another process holds the Root; try again shortly)",
        _ => "",
    };
    format!("{tool} failed: {}: {}{hint}", err.code, err.message)
}

/// The MCP server: the four tools over [`Tools`], on tokio's blocking pool.
#[derive(Debug, Clone)]
pub struct Server {
    tools: Arc<Tools>,
    tool_router: ToolRouter<Server>,
}

/// The input schema of a tool's arguments, as the protocol wants it.
fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("the arguments of a tool have an object schema: {e}"))
}

impl Server {
    /// A server answering from `tools`.
    pub fn new(tools: Arc<Tools>) -> Server {
        Server {
            tools,
            tool_router: Server::tool_router(),
        }
    }

    /// Parses `args` as `A`, runs `work` on the blocking pool, and answers its text, or a tool
    /// error (`isError`) saying what went wrong.
    async fn run<A>(
        &self,
        tool: &'static str,
        args: JsonObject,
        work: fn(&Tools, A) -> Result<String, ApiError>,
    ) -> CallToolResult
    where
        A: DeserializeOwned + Send + 'static,
    {
        let args: A = match serde_json::from_value(Value::Object(args)) {
            Ok(a) => a,
            Err(e) => {
                return CallToolResult::error(vec![ContentBlock::text(format!(
                    "{tool} failed: invalid_argument: bad arguments: {e}"
                ))])
            }
        };
        let tools = self.tools.clone();
        match tokio::task::spawn_blocking(move || work(&tools, args)).await {
            Ok(Ok(text)) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Ok(Err(err)) => CallToolResult::error(vec![ContentBlock::text(error_text(tool, &err))]),
            Err(join) => CallToolResult::error(vec![ContentBlock::text(format!(
                "{tool} failed inside the server: {join}"
            ))]),
        }
    }
}

#[tool_router]
impl Server {
    /// `list_sessions`.
    #[tool(
        name = "list_sessions",
        description = LIST_SESSIONS_ABOUT,
        input_schema = input_schema::<ListSessionsArgs>(),
        annotations(title = "List Sessions", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_sessions(&self, args: JsonObject) -> CallToolResult {
        self.run("list_sessions", args, Tools::list_sessions).await
    }

    /// `search_sessions`.
    #[tool(
        name = "search_sessions",
        description = SEARCH_SESSIONS_ABOUT,
        input_schema = input_schema::<SearchSessionsArgs>(),
        annotations(title = "Search Sessions", read_only_hint = true, open_world_hint = false)
    )]
    async fn search_sessions(&self, args: JsonObject) -> CallToolResult {
        self.run("search_sessions", args, Tools::search_sessions)
            .await
    }

    /// `read_history`.
    #[tool(
        name = "read_history",
        description = READ_HISTORY_ABOUT,
        input_schema = input_schema::<ReadHistoryArgs>(),
        annotations(title = "Read a Session's history", read_only_hint = true, open_world_hint = false)
    )]
    async fn read_history(&self, args: JsonObject) -> CallToolResult {
        self.run("read_history", args, Tools::read_history).await
    }

    /// `read_source`.
    #[tool(
        name = "read_source",
        description = READ_SOURCE_ABOUT,
        input_schema = input_schema::<ReadSourceArgs>(),
        annotations(title = "Read a whole field", read_only_hint = true, open_world_hint = false)
    )]
    async fn read_source(&self, args: JsonObject) -> CallToolResult {
        self.run("read_source", args, Tools::read_source).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("logbook", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use logbook_engine::{AppendParams, CreateSessionParams, Event};

    fn tools(dir: &Path) -> Tools {
        Tools::with_host(Host::open_or_init(&dir.join("root")).unwrap())
    }

    fn create(t: &Tools, id: &str) {
        t.host
            .root()
            .create_session(CreateSessionParams {
                session_id: Some(id.into()),
                workspace: None,
                operation: format!("create-{id}"),
            })
            .unwrap();
    }

    /// Appends one settled Turn per text, each a user message alone (rows 2.0, 4.0, ...).
    fn messages(t: &Tools, id: &str, texts: &[String]) {
        let events = texts
            .iter()
            .enumerate()
            .flat_map(|(n, text)| {
                let inv = format!("i{n}");
                [
                    json!({"kind": "userMessage", "invocation": inv, "text": text,
                           "attachments": []}),
                    json!({"kind": "turnSettled", "invocation": inv, "outcome": "completed"}),
                ]
            })
            .map(|v| serde_json::from_value::<Event>(v).unwrap())
            .collect();
        t.host
            .root()
            .append(AppendParams {
                session_id: id.into(),
                operation: format!("append-{}", texts.len()),
                events,
            })
            .unwrap();
    }

    /// The arguments the answer says to call `tool` with next, if any.
    fn next_call(text: &str, tool: &str) -> Option<Value> {
        let marker = format!("call {tool} with ");
        let line = text.lines().rev().find(|l| l.contains(&marker))?;
        let json = &line[line.find(&marker)? + marker.len()..];
        Some(serde_json::from_str(json.trim_end_matches(')')).unwrap())
    }

    fn args<T: DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn limits_default_lower_and_refuse_zero() {
        assert_eq!(
            bounded("limit", None, 20, 100).unwrap(),
            (20, String::new())
        );
        assert_eq!(bounded("limit", Some(7), 20, 100).unwrap().0, 7);
        let (n, note) = bounded("limit", Some(500), 20, 100).unwrap();
        assert_eq!(n, 100);
        assert!(note.contains("limit 500") && note.contains("100"), "{note}");
        let err = bounded("limit", Some(0), 20, 100).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn text_helpers_keep_characters_whole() {
        assert_eq!(prefix("aé", 2), "a");
        assert_eq!(prefix("aé", 3), "aé");
        assert_eq!(prefix("€€", 4), "€");
        assert_eq!(one_line("  a\n\tb \r\n c\x07 "), "a b c\\u{7}");
        assert_eq!(floor_boundary("a€", 2), 1);
        assert_eq!(ceil_boundary("a€", 2), 4);
        assert_eq!(quoted("say \"hi\"\n"), r#""say \"hi\"\n""#);
    }

    #[test]
    #[should_panic(expected = "only reading methods")]
    fn a_mutation_is_never_called() {
        let dir = tempfile::tempdir().unwrap();
        let t = tools(dir.path());
        let _: Value = t
            .read(
                "setTitle",
                json!({"sessionId": "s", "operation": "o", "title": "t"}),
            )
            .unwrap();
    }

    #[test]
    fn a_page_of_long_rows_stops_within_its_budget_and_the_cursor_resumes_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = tools(dir.path());
        create(&t, "s");
        // 12 rows of 10,000 bytes: at 16 KiB a field, 4 fit in the 48,000 bytes of a page.
        let texts: Vec<String> = (0..12)
            .map(|n| format!("row {n:02} {}", "x".repeat(10_000 - 7)))
            .collect();
        messages(&t, "s", &texts);
        let mut call = Some(json!({"sessionId": "s", "limit": 100, "fieldBytes": 16_384,
                                   "direction": "forward"}));
        let mut seen = Vec::new();
        let mut answers = 0;
        while let Some(a) = call {
            let text = t.read_history(args(a)).unwrap();
            assert!(
                text.len() < HISTORY_TEXT_BYTES_MAX + 1_000,
                "{}",
                text.len()
            );
            let rows: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("body: row "))
                .collect();
            assert!(!rows.is_empty() && rows.len() < 12, "{}", rows.len());
            seen.extend(rows.iter().map(|l| l[10..12].to_owned()));
            assert!(!text.contains("cut:"), "no field was cut at 16 KiB");
            call = next_call(&text, "read_history");
            answers += 1;
            assert!(answers < 12, "never ended");
        }
        let want: Vec<String> = (0..12).map(|n| format!("{n:02}")).collect();
        assert_eq!(seen, want, "every row once, in order");
    }

    #[test]
    fn snippets_are_windows_cut_on_character_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let t = tools(dir.path());
        create(&t, "s");
        messages(
            &t,
            "s",
            &[
                format!("{}needle{}", "€".repeat(100), "€".repeat(100)),
                "needle first".to_owned(),
                format!("x {} y", "a".repeat(300)),
            ],
        );
        let text = t.search_sessions(args(json!({"query": "needle"}))).unwrap();
        let hit = |row: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("  {row} body: ")))
                .unwrap_or_else(|| panic!("no hit at {row}: {text}"))
                .to_owned()
        };
        let middle = hit("2.0");
        assert!(middle.contains("€«needle»€"), "{middle}");
        assert!(middle.ends_with('…') && middle.contains(": …€"), "{middle}");
        let euros = middle.matches('€').count() as u64;
        assert!(
            euros <= 2 * SNIPPET_CONTEXT_BYTES / 3 + 2,
            "{euros} euros: {middle}"
        );
        assert!(hit("4.0").ends_with(": «needle» first"), "{text}");
        assert!(text.contains("That is every hit."), "{text}");

        // A match longer than a snippet shows is cut, and the context after it follows.
        let text = t
            .search_sessions(args(json!({"query": "a".repeat(300)})))
            .unwrap();
        let line = text.lines().find(|l| l.contains('«')).unwrap();
        let shown = format!("«{}", "a".repeat(SNIPPET_MATCH_BYTES_MAX as usize));
        assert!(line.contains(&format!("{shown}…» y")), "{line}");
    }

    #[test]
    fn wrong_names_are_errors_with_their_codes() {
        let dir = tempfile::tempdir().unwrap();
        let t = tools(dir.path());
        create(&t, "s");
        let err = t
            .read_history(args(json!({"sessionId": "nope"})))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound);
        assert!(error_text("read_history", &err).contains("list_sessions"));
        let err = t
            .read_source(args(json!({"sessionId": "s", "sequence": 1})))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound, "{err}");
        let err = t
            .search_sessions(args(json!({"query": "x", "after": "garbage"})))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
        let text = t
            .list_sessions(args(json!({"workspace": "/none"})))
            .unwrap();
        assert_eq!(text, "No Session of that workspace.\n");
    }
}
