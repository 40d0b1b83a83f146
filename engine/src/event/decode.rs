//! The rows of an event record, read straight from its postcard bytes.
//!
//! History pages and search verification decode one event per row they show. The serde
//! path through postcard spent about three quarters of a small row's read on that decode,
//! so the row-publishing kinds are read here by hand: a cursor over the payload that takes
//! exactly the fields a row needs, in the order [`EventBin`](super::EventBin) writes them,
//! and stops there (fields after the last one a row uses are not looked at; the record's
//! checksum already covers them). Texts a row shows are checked to be UTF-8; texts it
//! skips are not. Every rule of postcard's reader that applies to the fields read is kept:
//! varints no longer than their type allows, option and bool tags of 0 or 1, lengths
//! within the payload. The tests hold this reader to the serde encoding of every kind.

use super::{RowSource, Rows};

/// Why a payload is not an event record this reader understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Malformed(&'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Variant indexes of `EventBin` (its declaration order).
const USER_MESSAGE: u32 = 1;
const MODEL_COMPLETION: u32 = 2;
const TOOL_RESULT: u32 = 3;
const INTERACTION_REQUESTED: u32 = 6;
/// The last variant index (`importMark`); the kinds without rows are not decoded further.
const LAST_KIND: u32 = 10;
/// Variant indexes of `ItemBin`.
const ITEM_ASSISTANT: u32 = 0;
const ITEM_TOOL_CALL: u32 = 1;
/// `ToolStatus` has three variants.
const LAST_TOOL_STATUS: u32 = 2;

/// The sequence an event record names and the rows its event publishes (none for kinds
/// without rows; their fields are not read).
#[inline(always)]
pub(crate) fn event_record_rows<'a>(payload: &'a [u8]) -> Result<(u64, Rows<'a>), Malformed> {
    let mut c = Cursor { rest: payload };
    let sequence = c.u64()?;
    let rows = match c.u32()? {
        USER_MESSAGE => {
            let invocation = c.str()?;
            Rows::one(RowSource::user(invocation, c.str()?))
        }
        MODEL_COMPLETION => {
            let invocation = c.str()?;
            c.skip_str()?; // model
            let n = c.len()?;
            let mut item = || -> Result<RowSource<'a>, Malformed> {
                match c.u32()? {
                    ITEM_ASSISTANT => {
                        let body = c.str()?;
                        let thinking = c.option_str()?.unwrap_or("");
                        Ok(RowSource::assistant(invocation, body, thinking))
                    }
                    ITEM_TOOL_CALL => {
                        let id = c.str()?;
                        let name = c.str()?;
                        let arguments = c.str()?;
                        let internal = c.bool()?;
                        Ok(RowSource::tool_call(
                            invocation, id, name, arguments, internal,
                        ))
                    }
                    _ => Err(Malformed("unknown completion item kind")),
                }
            };
            if n == 1 {
                Rows::one(item()?)
            } else {
                // Each item takes at least two bytes: a damaged count cannot reserve much.
                let mut v = Vec::with_capacity(n.min(payload.len() / 2));
                for _ in 0..n {
                    v.push(item()?);
                }
                Rows::Many(v)
            }
        }
        TOOL_RESULT => {
            let invocation = c.str()?;
            let call_id = c.str()?;
            if c.u32()? > LAST_TOOL_STATUS {
                return Err(Malformed("unknown tool result status"));
            }
            Rows::one(RowSource::tool_result(invocation, call_id, c.str()?))
        }
        INTERACTION_REQUESTED => {
            c.skip_str()?; // interaction id
            let invocation = c.str()?;
            Rows::one(RowSource::interaction(invocation, c.str()?))
        }
        k if k <= LAST_KIND => Rows::Many(Vec::new()),
        _ => return Err(Malformed("unknown event kind")),
    };
    Ok((sequence, rows))
}

/// The unread part of a payload.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Result<u8, Malformed> {
        let (&b, rest) = self
            .rest
            .split_first()
            .ok_or(Malformed("the record ends inside a field"))?;
        self.rest = rest;
        Ok(b)
    }

    /// A LEB128 varint of at most `max_bytes` bytes whose last byte is at most `last_max`
    /// (postcard's rule: no bits beyond the type's width).
    #[inline]
    fn varint(&mut self, max_bytes: u32, last_max: u8) -> Result<u64, Malformed> {
        let mut out = 0u64;
        for i in 0..max_bytes {
            let b = self.byte()?;
            out |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if i == max_bytes - 1 && b > last_max {
                    break;
                }
                return Ok(out);
            }
        }
        Err(Malformed("a varint is too long for its type"))
    }

    fn u64(&mut self) -> Result<u64, Malformed> {
        self.varint(10, 0x01)
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        // Five bytes of at most 32 bits: the value fits.
        self.varint(5, 0x0f).map(|v| v as u32)
    }

    /// A length (postcard writes `usize` as a u64 varint on 64-bit targets).
    fn len(&mut self) -> Result<usize, Malformed> {
        usize::try_from(self.u64()?).map_err(|_| Malformed("a length does not fit in memory"))
    }

    fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.len()?;
        if n > self.rest.len() {
            return Err(Malformed("a text runs past the end of the record"));
        }
        let (b, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(b)
    }

    fn str(&mut self) -> Result<&'a str, Malformed> {
        // The same check as `std::str::from_utf8`, several times faster on long texts of
        // non-ASCII characters: it was a sixth of reading a page of rows.
        simdutf8::basic::from_utf8(self.bytes()?).map_err(|_| Malformed("a text is not UTF-8"))
    }

    fn skip_str(&mut self) -> Result<(), Malformed> {
        self.bytes().map(drop)
    }

    fn option_str(&mut self) -> Result<Option<&'a str>, Malformed> {
        match self.byte()? {
            0 => Ok(None),
            1 => self.str().map(Some),
            _ => Err(Malformed("an option tag is neither 0 nor 1")),
        }
    }

    fn bool(&mut self) -> Result<bool, Malformed> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed("a bool is neither 0 nor 1")),
        }
    }
}
