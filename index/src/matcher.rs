//! `Matcher`: literal search with optional simple case folding and whole-word rule.
//!
//! The rules (the contract's search section): a match is a literal occurrence
//! of the query inside one text. Case-insensitive means both sides are mapped
//! with simple case folding first. Whole word means the character just before
//! and the one just after the match in the original text, where they exist,
//! are not word characters. Matches are found left to right and never overlap:
//! after a reported match the search resumes at its end; after a candidate the
//! whole-word rule rejects it resumes one character after that candidate's start.
//!
//! Folding is one character to one character, so a match in the folded text
//! is a match of the same characters in the original; [`FoldMap`] turns folded
//! byte offsets back into original ones, which is what is reported.

use std::cell::RefCell;

use memchr::memmem;

use crate::fold::{fold_char, is_word_char, FoldMap};
use crate::trigram::for_each_trigram;

/// Capacity the per-thread folding buffer keeps between calls; a larger one
/// (after a huge field) is released so one big text does not pin memory.
const FOLD_BUF_KEEP_BYTES: usize = 1 << 20;

thread_local! {
    /// Reused folding buffer: one per thread, so a `Matcher` stays `Sync`.
    static FOLD_BUF: RefCell<FoldMap> = RefCell::new(FoldMap::default());
}

/// A literal query, compiled once.
#[derive(Clone, Debug)]
pub struct Matcher {
    /// The needle searched for: the query, folded unless case-sensitive.
    needle: Vec<u8>,
    finder: memmem::Finder<'static>,
    case_sensitive: bool,
    whole_word: bool,
    /// Distinct trigrams of the folded query, ascending.
    trigrams: Vec<u32>,
}

impl Matcher {
    /// Compiles `query`.
    ///
    /// # Panics
    /// When `query` is empty: the caller refuses an empty query as an invalid argument.
    pub fn new(query: &str, case_sensitive: bool, whole_word: bool) -> Matcher {
        assert!(
            !query.is_empty(),
            "Matcher::new: the query must not be empty"
        );
        let folded: String = query.chars().map(fold_char).collect();
        let mut trigrams = Vec::new();
        for_each_trigram(folded.as_bytes(), |t| trigrams.push(t));
        trigrams.sort_unstable();
        trigrams.dedup();
        let needle = if case_sensitive {
            query.as_bytes().to_vec()
        } else {
            folded.into_bytes()
        };
        let finder = memmem::Finder::new(&needle).into_owned();
        Matcher {
            needle,
            finder,
            case_sensitive,
            whole_word,
            trigrams,
        }
    }

    /// True when the match is exact bytes.
    pub fn case_sensitive(&self) -> bool {
        self.case_sensitive
    }

    /// True when the whole-word rule applies.
    pub fn whole_word(&self) -> bool {
        self.whole_word
    }

    /// Distinct trigrams of the folded query, ascending; empty when the folded
    /// query is shorter than 3 bytes (the caller then scans instead).
    pub fn trigrams(&self) -> &[u32] {
        &self.trigrams
    }

    /// Appends all matches in `text` to `out` as byte ranges `(start, end)` of
    /// the original text, left to right, non-overlapping.
    pub fn find_all(&self, text: &str, out: &mut Vec<(usize, usize)>) {
        self.each_match(text, |s, e| {
            out.push((s, e));
            true
        });
    }

    /// True when `text` holds at least one match.
    pub fn is_match(&self, text: &str) -> bool {
        let mut found = false;
        self.each_match(text, |_, _| {
            found = true;
            false
        });
        found
    }

    /// Number of matches in `text`.
    pub fn count(&self, text: &str) -> usize {
        let mut n = 0;
        self.each_match(text, |_, _| {
            n += 1;
            true
        });
        n
    }

    /// Calls `emit(start, end)` per match until it returns false.
    fn each_match(&self, text: &str, emit: impl FnMut(usize, usize) -> bool) {
        if self.case_sensitive {
            self.scan(text.as_bytes(), text, None, emit);
            return;
        }
        FOLD_BUF.with(|cell| match cell.try_borrow_mut() {
            Ok(mut map) => {
                map.fold(text);
                self.scan(&map.folded, text, Some(&map), emit);
                map.release_if_larger_than(FOLD_BUF_KEEP_BYTES);
            }
            // Re-entered from inside `emit`: use a private buffer.
            Err(_) => {
                let mut map = FoldMap::default();
                map.fold(text);
                self.scan(&map.folded, text, Some(&map), emit);
            }
        });
    }

    /// Searches `hay` (the text, or its folding described by `map`).
    fn scan(
        &self,
        hay: &[u8],
        text: &str,
        map: Option<&FoldMap>,
        mut emit: impl FnMut(usize, usize) -> bool,
    ) {
        let n = self.needle.len();
        let orig = |f: usize| map.map_or(f, |m| m.original(f));
        let mut pos = 0;
        while pos + n <= hay.len() {
            let Some(found) = self.finder.find(&hay[pos..]) else {
                return;
            };
            let s = pos + found;
            let e = s + n;
            let (so, eo) = (orig(s), orig(e));
            if !self.whole_word || is_whole_word(text, so, eo) {
                if !emit(so, eo) {
                    return;
                }
                pos = e;
            } else {
                // A valid UTF-8 needle only matches at a character start.
                pos = s + utf8_len(hay[s]);
            }
        }
    }
}

/// Byte length of the UTF-8 character that starts with `lead`.
#[inline]
fn utf8_len(lead: u8) -> usize {
    match lead {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

/// The whole-word rule on the original text: no word character touches `[s, e)`.
#[inline]
fn is_whole_word(text: &str, s: usize, e: usize) -> bool {
    let before = text[..s].chars().next_back();
    let after = text[e..].chars().next();
    !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
}

#[cfg(test)]
mod tests;
