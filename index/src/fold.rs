//! Unicode simple case folding and word characters, from generated tables.
//!
//! Folding is *simple*: one code point maps to one code point (CaseFolding.txt
//! status C and S), so `ß` stays `ß` and never becomes `ss`. It can change the
//! UTF-8 length of a character (KELVIN SIGN, 3 bytes, folds to `k`, 1 byte),
//! which is why [`FoldMap`] exists.

use crate::tables::{FOLD_PAIRS, WORD_RANGES};

/// Code points are grouped in pages of 256; this bitmap says which pages hold
/// any folding source, so most non-Latin text (CJK, say) skips the search.
const FOLD_PAGE_SHIFT: u32 = 8;
const FOLD_PAGE_WORDS: usize = 8;
static FOLD_PAGES: [u64; FOLD_PAGE_WORDS] = fold_pages();

const fn fold_pages() -> [u64; FOLD_PAGE_WORDS] {
    let mut bits = [0u64; FOLD_PAGE_WORDS];
    let mut i = 0;
    while i < FOLD_PAIRS.len() {
        let page = (FOLD_PAIRS[i].0 >> FOLD_PAGE_SHIFT) as usize;
        assert!(
            page < FOLD_PAGE_WORDS * 64,
            "folding source beyond the page bitmap"
        );
        bits[page / 64] |= 1 << (page % 64);
        i += 1;
    }
    bits
}

/// Simple case folding of one character (CaseFolding.txt status C and S).
#[inline]
pub fn fold_char(c: char) -> char {
    let u = c as u32;
    if u < 0x80 {
        return (u as u8).to_ascii_lowercase() as char;
    }
    let page = (u >> FOLD_PAGE_SHIFT) as usize;
    if page >= FOLD_PAGE_WORDS * 64 || FOLD_PAGES[page / 64] & (1 << (page % 64)) == 0 {
        return c;
    }
    match FOLD_PAIRS.binary_search_by_key(&u, |p| p.0) {
        Ok(i) => char::from_u32(FOLD_PAIRS[i].1).expect("generated table holds scalar values"),
        Err(_) => c,
    }
}

/// Appends the simple case folding of every character of `text` to `out`.
pub fn fold_into(text: &str, out: &mut String) {
    out.reserve(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let run = ascii_run(&bytes[i..]);
        if run > 0 {
            let start = out.len();
            out.push_str(&text[i..i + run]);
            out[start..].make_ascii_lowercase();
            i += run;
            continue;
        }
        let c = text[i..]
            .chars()
            .next()
            .expect("i < len and on a char boundary");
        out.push(fold_char(c));
        i += c.len_utf8();
    }
}

/// Length of the ASCII prefix of `bytes`, 32 bytes at a time where it can.
#[inline]
pub(crate) fn ascii_run(bytes: &[u8]) -> usize {
    const STEP: usize = 32;
    let mut i = 0;
    while i + STEP <= bytes.len() && bytes[i..i + STEP].is_ascii() {
        i += STEP;
    }
    while i < bytes.len() && bytes[i] < 0x80 {
        i += 1;
    }
    i
}

/// True for word characters: letters (L*), marks (M*), decimal digits (Nd),
/// connector punctuation (Pc), U+200C and U+200D.
#[inline]
pub fn is_word_char(c: char) -> bool {
    let u = c as u32;
    if u < 0x80 {
        return (u as u8).is_ascii_alphanumeric() || u == u32::from(b'_');
    }
    let i = WORD_RANGES.partition_point(|r| r.1 < u);
    i < WORD_RANGES.len() && WORD_RANGES[i].0 <= u
}

/// Folded text plus a map from its byte offsets back to the original text's.
///
/// Folding is one character to one character, so only the characters whose
/// UTF-8 length changes move the offsets; the map keeps one anchor after each
/// of them (usually none at all).
#[derive(Debug, Default)]
pub(crate) struct FoldMap {
    /// The folded text, valid UTF-8 (kept as bytes so ASCII runs are folded in place).
    pub(crate) folded: Vec<u8>,
    /// (folded offset, original offset) after each length-changing character, ascending.
    anchors: Vec<(usize, usize)>,
}

impl FoldMap {
    /// Replaces the contents with the folding of `text`.
    pub(crate) fn fold(&mut self, text: &str) {
        self.folded.clear();
        self.anchors.clear();
        self.folded.reserve(text.len());
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            // Fast path: an ASCII run, lowercased while copied (the loop vectorises).
            let run = ascii_run(&bytes[i..]);
            if run > 0 {
                self.folded
                    .extend(bytes[i..i + run].iter().map(u8::to_ascii_lowercase));
                i += run;
                continue;
            }
            let c = text[i..]
                .chars()
                .next()
                .expect("i < len and on a char boundary");
            let f = fold_char(c);
            let mut buf = [0u8; 4];
            self.folded
                .extend_from_slice(f.encode_utf8(&mut buf).as_bytes());
            i += c.len_utf8();
            if f.len_utf8() != c.len_utf8() {
                self.anchors.push((self.folded.len(), i));
            }
        }
    }

    /// Frees the buffers when they hold more than `bytes` of capacity.
    pub(crate) fn release_if_larger_than(&mut self, bytes: usize) {
        if self.folded.capacity() > bytes {
            self.folded = Vec::new();
            self.anchors = Vec::new();
        }
    }

    /// True when every folded offset equals its original offset.
    #[cfg(test)]
    pub(crate) fn is_identity(&self) -> bool {
        self.anchors.is_empty()
    }

    /// Original offset of folded offset `f` (a character boundary of `folded`).
    #[inline]
    pub(crate) fn original(&self, f: usize) -> usize {
        if self.anchors.is_empty() {
            return f;
        }
        let k = self.anchors.partition_point(|a| a.0 <= f);
        if k == 0 {
            f
        } else {
            let (af, ao) = self.anchors[k - 1];
            ao + (f - af)
        }
    }
}

#[cfg(test)]
mod tests;
