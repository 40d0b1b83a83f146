//! A transcript's bytes as whole lines, and digests of their prefixes.
//!
//! A line is whole when a `\n` ends it. The bytes after the last `\n` are the file's tail:
//! a writer that is still running (or was killed) may have left half a record there, so the
//! tail counts as a line only when it is a complete JSON object or array (self-delimiting: no
//! longer text can start with it and still be one record). Otherwise it is *torn*: not
//! imported now, and picked up by the next import once its writer has finished it.
//!
//! The digest of the first `n` lines hashes each line followed by one `\n`, so a last line
//! that gains its `\n` later keeps the digest it had.

use sha2::{Digest as _, Sha256};

/// A transcript split into lines.
#[derive(Debug)]
pub struct Lines<'a> {
    /// The whole lines, without their `\n`.
    pub whole: Vec<&'a [u8]>,
    /// The torn tail (not counted in `whole`), when there is one.
    pub torn: Option<&'a [u8]>,
}

/// Splits `bytes` into whole lines and a torn tail.
pub fn split(bytes: &[u8]) -> Lines<'_> {
    let mut whole: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // `split` always yields a last piece: empty after a final `\n`, else the unterminated tail.
    let tail = whole.pop().unwrap_or_default();
    let mut torn = None;
    if !tail.iter().all(u8::is_ascii_whitespace) {
        if complete_record(tail) {
            whole.push(tail);
        } else {
            torn = Some(tail);
        }
    }
    Lines { whole, torn }
}

/// Is `text` one complete JSON object or array (which no longer line can start with)?
fn complete_record(text: &[u8]) -> bool {
    let t = text.trim_ascii();
    matches!(t.first(), Some(b'{' | b'['))
        && serde_json::from_slice::<serde::de::IgnoredAny>(t).is_ok()
}

/// `sha256:` digests of the first `n` lines for each `n` of `at` (ascending, each at most
/// `lines.len()`), in one pass over the lines.
pub fn prefix_digests(lines: &[&[u8]], at: &[usize]) -> Vec<String> {
    debug_assert!(at.windows(2).all(|w| w[0] <= w[1]), "boundaries ascend");
    let mut out = Vec::with_capacity(at.len());
    let mut h = Sha256::new();
    let mut done = 0;
    for &n in at {
        assert!(n <= lines.len(), "a prefix of {n} lines of {}", lines.len());
        for line in &lines[done..n] {
            h.update(line);
            h.update(b"\n");
        }
        done = n;
        out.push(hex_digest(h.clone().finalize().as_slice()));
    }
    out
}

fn hex_digest(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_and_torn_tails() {
        let l = split(b"{\"a\":1}\n{\"b\":2}\n{\"c\":");
        assert_eq!(l.whole.len(), 2);
        assert_eq!(l.torn, Some(&b"{\"c\":"[..]));
        // A complete object without its newline is a line; a number is not (it may go on).
        assert_eq!(split(b"{\"a\":1}\n{\"b\":2}").whole.len(), 2);
        assert_eq!(split(b"{\"a\":1}\n12").torn, Some(&b"12"[..]));
        assert!(split(b"{\"a\":1}\n  ").torn.is_none());
        assert!(split(b"").whole.is_empty());
        // An empty line in the middle is a (blank) whole line.
        assert_eq!(split(b"{}\n\n{}\n").whole.len(), 3);
    }

    #[test]
    fn a_line_that_gains_its_newline_keeps_its_digest() {
        let before = split(b"{\"a\":1}\n{\"b\":2}");
        let after = split(b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
        assert_eq!(
            prefix_digests(&before.whole, &[2]),
            prefix_digests(&after.whole, &[2])
        );
        let d = prefix_digests(&after.whole, &[0, 1, 3]);
        assert_eq!(d.len(), 3);
        assert_ne!(d[1], d[2]);
        assert_eq!(d[0], prefix_digests(&[], &[0])[0]);
    }
}
