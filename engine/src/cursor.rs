//! Opaque history cursors.
//!
//! A cursor is standard URL-safe Base64 (no padding) of a fixed 35-byte record:
//!
//! | offset | width | field |
//! |---|---|---|
//! | 0 | 1 | magic `b'H'` (a history cursor; other cursor families use other letters) |
//! | 1 | 1 | [`CURSOR_VERSION`] |
//! | 2 | 1 | direction: 0 forward, 1 backward |
//! | 3 | 8 | first 8 bytes of SHA-256 of the Session id |
//! | 11 | 8 | fence (`through`), u64 LE |
//! | 19 | 8 | `sourceSequence` of the last row returned, u64 LE |
//! | 27 | 4 | `itemIndex` of the last row returned, u32 LE |
//! | 31 | 4 | CRC-32 of bytes 0..31, u32 LE |
//!
//! The position, not a row ordinal, is stored, so a cursor stays valid when the row index is
//! rebuilt. The checksum makes a mangled cursor an error instead of a silent jump.

use crate::error::EngineError;
use crate::params::{Direction, Position};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// Version byte of history cursors.
pub const CURSOR_VERSION: u8 = 1;
const CURSOR_MAGIC: u8 = b'H';
const CURSOR_BYTES: usize = 35;

/// What a history cursor binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HistoryCursor {
    pub direction: Direction,
    pub through: u64,
    pub last: Position,
}

pub(crate) fn session_tag(session_id: &str) -> [u8; 8] {
    let d = Sha256::digest(session_id.as_bytes());
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&d[..8]);
    tag
}

impl HistoryCursor {
    pub(crate) fn encode(&self, session_id: &str) -> String {
        let mut b = Vec::with_capacity(CURSOR_BYTES);
        b.push(CURSOR_MAGIC);
        b.push(CURSOR_VERSION);
        b.push(match self.direction {
            Direction::Forward => 0,
            Direction::Backward => 1,
        });
        b.extend_from_slice(&session_tag(session_id));
        b.extend_from_slice(&self.through.to_le_bytes());
        b.extend_from_slice(&self.last.source_sequence.to_le_bytes());
        b.extend_from_slice(&self.last.item_index.to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(b.len(), CURSOR_BYTES, "cursor layout");
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    }

    /// Decodes `text` and checks it belongs to this Session, fence and direction.
    pub(crate) fn decode(
        text: &str,
        session_id: &str,
        through: u64,
        direction: Direction,
    ) -> Result<HistoryCursor, EngineError> {
        let bad = |why: &str| {
            EngineError::invalid(format!(
                "history cursor `after` {why}; pass the nextAfter of the previous page with the same \
                 sessionId, through and direction, or null to start over"
            ))
        };
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .map_err(|_| bad("is not a cursor this engine made"))?;
        if b.len() != CURSOR_BYTES || b[0] != CURSOR_MAGIC {
            return Err(bad("is not a history cursor"));
        }
        let crc = u32::from_le_bytes(b[31..35].try_into().expect("4 bytes"));
        if crc32fast::hash(&b[..31]) != crc {
            return Err(bad("is damaged (checksum mismatch)"));
        }
        if b[1] != CURSOR_VERSION {
            return Err(bad(&format!(
                "has version {} (this build makes version {CURSOR_VERSION})",
                b[1]
            )));
        }
        let dir = match b[2] {
            0 => Direction::Forward,
            1 => Direction::Backward,
            _ => return Err(bad("names an unknown direction")),
        };
        if b[3..11] != session_tag(session_id) {
            return Err(bad("belongs to another Session"));
        }
        let fence = u64::from_le_bytes(b[11..19].try_into().expect("8 bytes"));
        if fence != through {
            return Err(bad(&format!("was made under fence {fence}, not {through}")));
        }
        if dir != direction {
            return Err(bad("was made for the other direction"));
        }
        let seq = u64::from_le_bytes(b[19..27].try_into().expect("8 bytes"));
        let item = u32::from_le_bytes(b[27..31].try_into().expect("4 bytes"));
        Ok(HistoryCursor {
            direction: dir,
            through: fence,
            last: Position {
                source_sequence: seq,
                item_index: item,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_binding() {
        let c = HistoryCursor {
            direction: Direction::Backward,
            through: 42,
            last: Position {
                source_sequence: 7,
                item_index: 3,
            },
        };
        let s = c.encode("a");
        assert_eq!(
            HistoryCursor::decode(&s, "a", 42, Direction::Backward).expect("ok"),
            c
        );
        assert!(HistoryCursor::decode(&s, "b", 42, Direction::Backward).is_err());
        assert!(HistoryCursor::decode(&s, "a", 41, Direction::Backward).is_err());
        assert!(HistoryCursor::decode(&s, "a", 42, Direction::Forward).is_err());
        assert!(HistoryCursor::decode("garbage!", "a", 42, Direction::Backward).is_err());
        // Every single-character change is refused (checksum or structure).
        let bytes = s.as_bytes();
        for i in 0..bytes.len() {
            let mut m = bytes.to_vec();
            m[i] = if m[i] == b'A' { b'B' } else { b'A' };
            let m = String::from_utf8(m).expect("ascii");
            if m != s {
                assert!(
                    HistoryCursor::decode(&m, "a", 42, Direction::Backward).is_err(),
                    "byte {i}"
                );
            }
        }
    }
}
