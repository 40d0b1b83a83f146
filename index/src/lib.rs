//! `logbook-index`: memory-mapped fixed-width indexes, trigram postings, and
//! Unicode simple case folding with word boundaries.
//!
//! This crate knows byte strings and integers, never facts or Sessions. Every
//! file it writes is derived data that the engine can rebuild from the log, so
//! damage is always an error ([`IndexError`], kind `Corrupt` or
//! `UnsupportedFormat`), never a panic and never wrong data.
//!
//! Invariants:
//! - every file starts with a magic and a format version (named constants);
//! - a mapped byte range is never modified in place: writers append past the
//!   mapped length and map again, and truncation drops the map first;
//! - `open` is cheap (header and bounds); `verify` walks every checksum.
//!
//! A fixed-width index (the engine keeps sequence -> location tables in these):
//!
//! ```
//! use logbook_index::FixedIndex;
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("seq.idx");
//! let mut ix = FixedIndex::create(&path, *b"SEQ1", 8).unwrap();
//! ix.push(&42u64.to_le_bytes());
//! ix.sync().unwrap();
//! let ix = FixedIndex::open(&path, *b"SEQ1", 8).unwrap();
//! assert_eq!(ix.get(0).unwrap(), Some(&42u64.to_le_bytes()[..]));
//! ```
//!
//! Search: index the folded text of each row, ask the postings for candidate
//! rows, verify each with a [`Matcher`] on the original text:
//!
//! ```
//! use logbook_index::{fold_into, Matcher, PostingsBuilder, PostingsFile};
//! let rows = ["Straße closed", "STRASSE open", "a \u{1E9E} here"];
//! let mut postings = PostingsBuilder::new();
//! let mut folded = String::new();
//! for (doc, text) in rows.iter().enumerate() {
//!     folded.clear();
//!     fold_into(text, &mut folded);
//!     postings.add(doc as u32, folded.as_bytes());
//! }
//! let file = PostingsFile::from_bytes(postings.to_bytes().unwrap()).unwrap();
//! let m = Matcher::new("STRAẞE", false, false);
//! let docs = file.candidates(m.trigrams(), 0, 64).unwrap();
//! assert_eq!(docs, vec![0]); // ß never matches "ss": simple folding only
//! let mut hits = Vec::new();
//! m.find_all(rows[0], &mut hits);
//! assert_eq!(hits, vec![(0, 7)]); // byte offsets of the original text
//! ```

// Tests may unwrap: a panic there is a failed test, which is the point.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod error;
mod fixed;
mod fold;
mod fsutil;
mod hash;
mod matcher;
mod postings;
#[rustfmt::skip]
mod tables;
#[cfg(test)]
mod testrng;
mod trigram;

pub use error::{ErrorKind, IndexError};
pub use fixed::{
    FixedIndex, PendingSync, SyncedEntries, FIXED_ENTRY_CRC_BYTES, FIXED_HEADER_BYTES,
    FIXED_INDEX_FORMAT_VERSION, FIXED_INDEX_MAGIC, FIXED_WIDTH_MAX,
};
pub use fold::{fold_char, fold_into, is_word_char};
pub use hash::{IntHash, IntHasher};
pub use matcher::Matcher;
pub use postings::{
    PostingsBatch, PostingsBuilder, PostingsFile, BLOCK_POSTINGS, POSTINGS_FORMAT_VERSION,
    POSTINGS_MAGIC,
};
pub use tables::UNICODE_VERSION;
pub use trigram::for_each_trigram;
