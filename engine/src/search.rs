//! Literal search over a Session's rows under a fence (SPEC section 3).
//!
//! This version scans rows in position order with `logbook-index`'s [`Matcher`] (memmem inside,
//! simple case folding, word rule); it does not yet use trigram postings. Each page does bounded
//! work ([`SEARCH_SCAN_ROWS_MAX`] rows, [`SEARCH_SCAN_BYTES_MAX`] bytes of field text) and may hold
//! no hits; the cursor resumes at an exact (row, field, byte offset), so every match is reported
//! once, in position order, across pages. Hidden (internal) rows are searched too.
//!
//! Search cursor: URL-safe Base64 (no padding) of 51 bytes: `S`, version 1, first 8 bytes of
//! SHA-256 of the Session id, fence u64, first 8 bytes of SHA-256 of (flags, query), resume row
//! sourceSequence u64, itemIndex u32, field index u8, byte offset u64, CRC-32 of the first 47
//! bytes (all LE).

use crate::cursor::session_tag;
use crate::error::EngineError;
use crate::event::{rows_of, RowKind};
use crate::history::fence;
use crate::params::Position;
use crate::session::Session;
use base64::Engine as _;
use logbook_index::Matcher;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Hits per search page when `limit` is null.
pub const SEARCH_HITS_DEFAULT: u32 = 64;
/// Most hits per search page.
pub const SEARCH_HITS_MAX: u32 = 1024;
/// Most rows one search page looks at.
pub const SEARCH_SCAN_ROWS_MAX: u64 = 4096;
/// Most bytes of field text one search page looks at (a row is never split).
pub const SEARCH_SCAN_BYTES_MAX: u64 = 16 << 20;
/// The searched fields, in the order hits of one row are reported.
pub const SEARCH_FIELDS: [&str; 3] = ["body", "thinking", "arguments"];
const SEARCH_CURSOR_VERSION: u8 = 1;
const SEARCH_CURSOR_BYTES: usize = 51;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchParams {
    pub session_id: String,
    pub query: String,
    #[serde(default)]
    pub case_sensitive: Option<bool>,
    #[serde(default)]
    pub whole_word: Option<bool>,
    #[serde(default)]
    pub through: Option<u64>,
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    pub position: Position,
    pub field: String,
    pub start: u64,
    pub end: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchPage {
    pub through: u64,
    pub hits: Vec<SearchHit>,
    pub next_after: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resume {
    position: Position,
    field: u8,
    offset: u64,
}

fn query_tag(query: &str, case_sensitive: bool, whole_word: bool) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update([u8::from(case_sensitive), u8::from(whole_word)]);
    h.update(query.as_bytes());
    let d = h.finalize();
    let mut t = [0u8; 8];
    t.copy_from_slice(&d[..8]);
    t
}

fn encode(session: &str, through: u64, qtag: [u8; 8], r: Resume) -> String {
    let mut b = Vec::with_capacity(SEARCH_CURSOR_BYTES);
    b.push(b'S');
    b.push(SEARCH_CURSOR_VERSION);
    b.extend_from_slice(&session_tag(session));
    b.extend_from_slice(&through.to_le_bytes());
    b.extend_from_slice(&qtag);
    b.extend_from_slice(&r.position.source_sequence.to_le_bytes());
    b.extend_from_slice(&r.position.item_index.to_le_bytes());
    b.push(r.field);
    b.extend_from_slice(&r.offset.to_le_bytes());
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(b.len(), SEARCH_CURSOR_BYTES, "search cursor layout");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn decode(text: &str, session: &str, through: u64, qtag: [u8; 8]) -> Result<Resume, EngineError> {
    let bad = |why: &str| {
        EngineError::invalid(format!(
            "search cursor `after` {why}; keep sessionId, query, options and through fixed and pass the previous nextAfter"
        ))
    };
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.as_bytes())
        .map_err(|_| bad("is not a cursor this engine made"))?;
    if b.len() != SEARCH_CURSOR_BYTES || b[0] != b'S' {
        return Err(bad("is not a search cursor"));
    }
    let crc = u32::from_le_bytes(b[47..51].try_into().expect("4 bytes"));
    if crc32fast::hash(&b[..47]) != crc {
        return Err(bad("is damaged (checksum mismatch)"));
    }
    if b[1] != SEARCH_CURSOR_VERSION {
        return Err(bad("has another version"));
    }
    if b[2..10] != session_tag(session) {
        return Err(bad("belongs to another Session"));
    }
    if u64::from_le_bytes(b[10..18].try_into().expect("8 bytes")) != through {
        return Err(bad("was made under another fence"));
    }
    if b[18..26] != qtag {
        return Err(bad("was made for another query or other options"));
    }
    let field = b[38];
    if usize::from(field) >= SEARCH_FIELDS.len() {
        return Err(bad("names an unknown field"));
    }
    Ok(Resume {
        position: Position {
            source_sequence: u64::from_le_bytes(b[26..34].try_into().expect("8 bytes")),
            item_index: u32::from_le_bytes(b[34..38].try_into().expect("4 bytes")),
        },
        field,
        offset: u64::from_le_bytes(b[39..47].try_into().expect("8 bytes")),
    })
}

fn searched(kind: RowKind, name: &str) -> Option<u8> {
    let i = SEARCH_FIELDS.iter().position(|f| *f == name)?;
    (kind != RowKind::ToolCall || name == "arguments").then_some(i as u8)
}

impl Session {
    pub(crate) fn search(&self, p: &SearchParams) -> Result<SearchPage, EngineError> {
        if p.query.is_empty() {
            return Err(EngineError::invalid("query must not be empty"));
        }
        let limit = p.limit.unwrap_or(SEARCH_HITS_DEFAULT);
        if limit == 0 || limit > SEARCH_HITS_MAX {
            return Err(EngineError::invalid(format!(
                "limit must be 1 to {SEARCH_HITS_MAX} hits, got {limit}"
            )));
        }
        let (cs, ww) = (
            p.case_sensitive.unwrap_or(false),
            p.whole_word.unwrap_or(false),
        );
        let qtag = query_tag(&p.query, cs, ww);
        let inner = self.read();
        let through = fence(&inner, p.through)?;
        let resume = match &p.after {
            Some(a) => Some(decode(a, &self.id, through, qtag)?),
            None => None,
        };
        let n = inner.rows_through(through);
        let mut i = match resume {
            Some(r) => inner.row_lower_bound(r.position.source_sequence, r.position.item_index),
            None => 0,
        };
        let matcher = Matcher::new(&p.query, cs, ww);
        let mut hits = Vec::new();
        let mut found = Vec::new();
        let (mut rows_seen, mut bytes_seen) = (0u64, 0u64);
        while i < n {
            if rows_seen >= SEARCH_SCAN_ROWS_MAX || bytes_seen >= SEARCH_SCAN_BYTES_MAX {
                let e = inner.row(i).ok_or_else(|| {
                    EngineError::corrupt(self.dir().join("row.idx"), "unreadable row entry")
                })?;
                let r = Resume {
                    position: Position {
                        source_sequence: e.sequence,
                        item_index: e.item,
                    },
                    field: 0,
                    offset: 0,
                };
                return Ok(SearchPage {
                    through,
                    hits,
                    next_after: Some(encode(&self.id, through, qtag, r)),
                });
            }
            let e = inner.row(i).ok_or_else(|| {
                EngineError::corrupt(self.dir().join("row.idx"), "unreadable row entry")
            })?;
            let position = Position {
                source_sequence: e.sequence,
                item_index: e.item,
            };
            let event = self.event_arc(&inner, e.sequence)?;
            let rows = rows_of(&event);
            let row = rows.get(e.item as usize).ok_or_else(|| {
                EngineError::corrupt(
                    self.dir().join("row.idx"),
                    format!("row entry {i} names a missing item"),
                )
            })?;
            let from = resume.filter(|r| r.position == position);
            for (name, text) in &row.fields {
                let Some(fi) = searched(row.kind, name) else {
                    continue;
                };
                if from.is_some_and(|r| fi < r.field) {
                    continue;
                }
                let min_start = from.filter(|r| r.field == fi).map_or(0, |r| r.offset);
                bytes_seen += text.len() as u64;
                found.clear();
                matcher.find_all(text, &mut found);
                for &(s, t) in found.iter().filter(|(s, _)| *s as u64 >= min_start) {
                    if hits.len() == limit as usize {
                        let r = Resume {
                            position,
                            field: fi,
                            offset: s as u64,
                        };
                        return Ok(SearchPage {
                            through,
                            hits,
                            next_after: Some(encode(&self.id, through, qtag, r)),
                        });
                    }
                    hits.push(SearchHit {
                        position,
                        field: (*name).to_owned(),
                        start: s as u64,
                        end: t as u64,
                    });
                }
            }
            rows_seen += 1;
            i += 1;
        }
        Ok(SearchPage {
            through,
            hits,
            next_after: None,
        })
    }
}
