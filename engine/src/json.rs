//! Raw JSON kept as exact text.
//!
//! `raw` (a tool result's evidence), interaction `options`/`response` and context `messages` are
//! arbitrary JSON that must come back byte for byte: key order, number spelling and nesting depth
//! untouched. On the wire they are [`serde_json::value::RawValue`]; on disk the same text as a
//! string. serde_json skips a raw value with an explicit stack of brackets (no recursion), so a
//! value nested 100,000 levels deep passes through as long as nothing buffers it into a
//! `serde_json::Value` or serde's internal `Content` (tagged or untagged enums, `flatten`): this
//! crate's wire types never do. [`validate_json`] is the same check without serde, for callers
//! (the API layer) that hold text and want to know it is one JSON value before building anything.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use std::fmt;

/// The deepest nesting [`validate_json`] accepts; deeper input is refused rather than risking
/// unbounded memory. serde_json itself has no limit when skipping a raw value.
pub const JSON_DEPTH_MAX: usize = 1_000_000;

/// One JSON value kept as its exact text.
#[derive(Clone)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// Wraps text after checking (iteratively) that it is exactly one JSON value.
    pub fn from_string(text: String) -> Result<RawJson, JsonError> {
        validate_json(&text)?;
        RawValue::from_string(text)
            .map(RawJson)
            .map_err(|e| JsonError {
                offset: 0,
                reason: format!("not a JSON value: {e}"),
            })
    }

    /// The JSON `null`.
    pub fn null() -> RawJson {
        RawJson(RawValue::from_string("null".to_owned()).expect("null is valid JSON"))
    }

    /// The exact text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The wire form.
    pub fn into_raw_value(self) -> Box<RawValue> {
        self.0
    }
}

impl From<Box<RawValue>> for RawJson {
    fn from(v: Box<RawValue>) -> Self {
        RawJson(v)
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}
impl Eq for RawJson {}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.get();
        if text.len() > 80 {
            let mut end = 80;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            write!(f, "RawJson({}... {} bytes)", &text[..end], text.len())
        } else {
            write!(f, "RawJson({text})")
        }
    }
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            self.0.serialize(s)
        } else {
            s.serialize_str(self.get())
        }
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            Box::<RawValue>::deserialize(d).map(RawJson)
        } else {
            let text = String::deserialize(d)?;
            RawJson::from_string(text).map_err(serde::de::Error::custom)
        }
    }
}

/// Why text is not one JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for JsonError {}

/// Checks that `text` is exactly one JSON value (RFC 8259), surrounded only by whitespace,
/// using an explicit stack: any depth up to [`JSON_DEPTH_MAX`] costs heap, never call stack.
pub fn validate_json(text: &str) -> Result<(), JsonError> {
    let end = skip_json_value(text.as_bytes(), 0)?;
    let end = skip_ws(text.as_bytes(), end);
    if end != text.len() {
        return Err(JsonError {
            offset: end,
            reason: "trailing characters after the value".into(),
        });
    }
    Ok(())
}

/// Skips one JSON value starting at `at` (leading whitespace allowed) and returns the offset just
/// past it. Iterative; the bracket stack lives on the heap.
pub fn skip_json_value(b: &[u8], at: usize) -> Result<usize, JsonError> {
    let err = |offset: usize, reason: &str| JsonError {
        offset,
        reason: reason.to_owned(),
    };
    // true = inside an object, false = inside an array.
    let mut stack: Vec<bool> = Vec::new();
    let mut i = at;
    loop {
        // Expect a value.
        i = skip_ws(b, i);
        let Some(&c) = b.get(i) else {
            return Err(err(i, "unexpected end, expected a value"));
        };
        match c {
            b'{' | b'[' => {
                if stack.len() >= JSON_DEPTH_MAX {
                    return Err(err(i, "nesting deeper than JSON_DEPTH_MAX"));
                }
                let is_object = c == b'{';
                i = skip_ws(b, i + 1);
                let close = if is_object { b'}' } else { b']' };
                if b.get(i) == Some(&close) {
                    i += 1;
                } else {
                    stack.push(is_object);
                    if is_object {
                        i = expect_key(b, i)?;
                    }
                    continue;
                }
            }
            b'"' => i = skip_string(b, i)?,
            b't' => i = expect_lit(b, i, b"true")?,
            b'f' => i = expect_lit(b, i, b"false")?,
            b'n' => i = expect_lit(b, i, b"null")?,
            b'-' | b'0'..=b'9' => i = skip_number(b, i)?,
            _ => return Err(err(i, "expected a value")),
        }
        // After a value: close containers or move to the next element.
        loop {
            let Some(&top) = stack.last() else {
                return Ok(i);
            };
            i = skip_ws(b, i);
            match b.get(i) {
                Some(b',') => {
                    i += 1;
                    if top {
                        i = expect_key(b, skip_ws(b, i))?;
                    }
                    break;
                }
                Some(b'}') if top => {
                    stack.pop();
                    i += 1;
                }
                Some(b']') if !top => {
                    stack.pop();
                    i += 1;
                }
                _ => return Err(err(i, "expected ',' or a closing bracket")),
            }
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

fn expect_key(b: &[u8], i: usize) -> Result<usize, JsonError> {
    if b.get(i) != Some(&b'"') {
        return Err(JsonError {
            offset: i,
            reason: "expected an object key".into(),
        });
    }
    let i = skip_ws(b, skip_string(b, i)?);
    if b.get(i) != Some(&b':') {
        return Err(JsonError {
            offset: i,
            reason: "expected ':' after an object key".into(),
        });
    }
    Ok(i + 1)
}

fn expect_lit(b: &[u8], i: usize, lit: &[u8]) -> Result<usize, JsonError> {
    if b.get(i..i + lit.len()) == Some(lit) {
        Ok(i + lit.len())
    } else {
        Err(JsonError {
            offset: i,
            reason: "expected true, false or null".into(),
        })
    }
}

fn skip_string(b: &[u8], start: usize) -> Result<usize, JsonError> {
    let mut i = start + 1;
    loop {
        match b.get(i) {
            None => {
                return Err(JsonError {
                    offset: start,
                    reason: "unterminated string".into(),
                })
            }
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => match b.get(i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                Some(b'u') => {
                    let hex = b
                        .get(i + 2..i + 6)
                        .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                    if hex.is_none() {
                        return Err(JsonError {
                            offset: i,
                            reason: "bad \\u escape".into(),
                        });
                    }
                    i += 6;
                }
                _ => {
                    return Err(JsonError {
                        offset: i,
                        reason: "bad escape".into(),
                    })
                }
            },
            Some(&c) if c < 0x20 => {
                return Err(JsonError {
                    offset: i,
                    reason: "control character in a string".into(),
                })
            }
            Some(_) => i += 1,
        }
    }
}

fn skip_number(b: &[u8], start: usize) -> Result<usize, JsonError> {
    let bad = || JsonError {
        offset: start,
        reason: "malformed number".into(),
    };
    let mut i = start;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        _ => return Err(bad()),
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !b.get(i).is_some_and(u8::is_ascii_digit) {
            return Err(bad());
        }
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !b.get(i).is_some_and(u8::is_ascii_digit) {
            return Err(bad());
        }
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_refuses() {
        for ok in [
            "0",
            "-1.5e+3",
            "\"a\\u00e9\"",
            "[]",
            "{}",
            " [1, {\"a\": [true, null]}] ",
            "{\"b\":1,\"a\":2}",
        ] {
            validate_json(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "",
            "[",
            "[1,]",
            "{\"a\"}",
            "01",
            "1.",
            "tru",
            "\"\u{1}\"",
            "[] []",
            "{1:2}",
            "[1 2]",
        ] {
            assert!(validate_json(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn deep_nesting_is_iterative() {
        let depth = 100_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                validate_json(&text).expect("deep array");
                let raw = RawJson::from_string(text.clone()).expect("raw");
                assert_eq!(raw.get(), text);
                let disk = postcard::to_allocvec(&raw).expect("encode");
                let back: RawJson = postcard::from_bytes(&disk).expect("decode");
                assert_eq!(back, raw);
            })
            .expect("spawn")
            .join()
            .expect("no overflow");
    }
}
