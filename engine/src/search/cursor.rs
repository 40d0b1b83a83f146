//! Opaque search cursors.
//!
//! A cursor is URL-safe Base64 (no padding) of a fixed 48-byte record:
//!
//! | offset | width | field |
//! |---|---|---|
//! | 0 | 1 | magic `b'S'` (a search cursor; history cursors use `b'H'`) |
//! | 1 | 1 | [`SEARCH_CURSOR_VERSION`] |
//! | 2 | 1 | flags: bit 0 caseSensitive, bit 1 wholeWord |
//! | 3 | 8 | first 8 bytes of SHA-256 of the Session id |
//! | 11 | 8 | fence (`through`), u64 LE |
//! | 19 | 8 | first 8 bytes of SHA-256 of the query's UTF-8 bytes |
//! | 27 | 8 | row ordinal to resume at, u64 LE |
//! | 35 | 1 | index of the searchable field of that row to resume in |
//! | 36 | 8 | byte offset in that field: only matches starting at or after it remain |
//! | 44 | 4 | CRC-32 of bytes 0..44, u32 LE |
//!
//! Row ordinals are a pure function of the log (rows in position order), so a cursor stays
//! valid when the row index is rebuilt. The checksum turns a mangled cursor into an error.

use crate::cursor::session_tag;
use crate::error::EngineError;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// Version byte of search cursors.
pub const SEARCH_CURSOR_VERSION: u8 = 1;
const MAGIC: u8 = b'S';
const BYTES: usize = 48;
const FLAG_CASE_SENSITIVE: u8 = 1;
const FLAG_WHOLE_WORD: u8 = 2;

/// What a search cursor binds (`session`, `through`, query and options) and where it resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SearchCursor {
    pub row: u64,
    pub field: u8,
    pub offset: u64,
}

/// The request a cursor must belong to.
pub(crate) struct Binding<'a> {
    pub session_id: &'a str,
    pub through: u64,
    pub query: &'a str,
    pub case_sensitive: bool,
    pub whole_word: bool,
}

impl Binding<'_> {
    fn flags(&self) -> u8 {
        (if self.case_sensitive {
            FLAG_CASE_SENSITIVE
        } else {
            0
        }) | (if self.whole_word { FLAG_WHOLE_WORD } else { 0 })
    }

    fn query_tag(&self) -> [u8; 8] {
        let d = Sha256::digest(self.query.as_bytes());
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&d[..8]);
        tag
    }
}

impl SearchCursor {
    pub(crate) fn encode(&self, b: &Binding<'_>) -> String {
        let mut out = Vec::with_capacity(BYTES);
        out.push(MAGIC);
        out.push(SEARCH_CURSOR_VERSION);
        out.push(b.flags());
        out.extend_from_slice(&session_tag(b.session_id));
        out.extend_from_slice(&b.through.to_le_bytes());
        out.extend_from_slice(&b.query_tag());
        out.extend_from_slice(&self.row.to_le_bytes());
        out.push(self.field);
        out.extend_from_slice(&self.offset.to_le_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), BYTES, "cursor layout");
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    }

    /// Decodes `text` and checks that it belongs to exactly this request.
    pub(crate) fn decode(text: &str, b: &Binding<'_>) -> Result<SearchCursor, EngineError> {
        let bad = |why: &str| {
            EngineError::invalid(format!(
                "search cursor `after` {why}; pass the nextAfter of the previous page with the same \
                 sessionId, query, caseSensitive, wholeWord and through, or null to start over"
            ))
        };
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .map_err(|_| bad("is not a cursor this engine made"))?;
        if raw.len() != BYTES || raw[0] != MAGIC {
            return Err(bad("is not a search cursor"));
        }
        let word = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
        let crc = u32::from_le_bytes(raw[44..48].try_into().expect("4 bytes"));
        if crc32fast::hash(&raw[..44]) != crc {
            return Err(bad("is damaged (checksum mismatch)"));
        }
        if raw[1] != SEARCH_CURSOR_VERSION {
            return Err(bad(&format!(
                "has version {} (this build makes version {SEARCH_CURSOR_VERSION})",
                raw[1]
            )));
        }
        if raw[3..11] != session_tag(b.session_id) {
            return Err(bad("belongs to another Session"));
        }
        let fence = word(11);
        if fence != b.through {
            return Err(bad(&format!(
                "was made under fence {fence}, not {}",
                b.through
            )));
        }
        if raw[2] != b.flags() || raw[19..27] != b.query_tag() {
            return Err(bad("was made for another query or other options"));
        }
        Ok(SearchCursor {
            row: word(27),
            field: raw[35],
            offset: word(36),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding<'a>(sid: &'a str, q: &'a str, through: u64, cs: bool, ww: bool) -> Binding<'a> {
        Binding {
            session_id: sid,
            through,
            query: q,
            case_sensitive: cs,
            whole_word: ww,
        }
    }

    #[test]
    fn round_trip_and_binding() {
        let c = SearchCursor {
            row: 12,
            field: 1,
            offset: 77,
        };
        let b = binding("s", "needle", 9, false, true);
        let text = c.encode(&b);
        assert_eq!(SearchCursor::decode(&text, &b).expect("own cursor"), c);
        for other in [
            binding("t", "needle", 9, false, true),
            binding("s", "needlf", 9, false, true),
            binding("s", "needle", 8, false, true),
            binding("s", "needle", 9, true, true),
            binding("s", "needle", 9, false, false),
        ] {
            let e = SearchCursor::decode(&text, &other).expect_err("foreign binding");
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        }
        let bytes = text.as_bytes();
        for i in 0..bytes.len() {
            let mut m = bytes.to_vec();
            m[i] = if m[i] == b'A' { b'B' } else { b'A' };
            let m = String::from_utf8(m).expect("ascii");
            if m != text {
                assert!(SearchCursor::decode(&m, &b).is_err(), "byte {i}");
            }
        }
        assert!(SearchCursor::decode("", &b).is_err());
        assert!(SearchCursor::decode("!!!", &b).is_err());
    }
}
