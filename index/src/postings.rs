//! Trigram postings: which docs (rows) contain each byte trigram of their folded text.
//!
//! [`PostingsBuilder`] keeps the postings of the unsealed tail in memory;
//! [`PostingsBuilder::write`] turns them into a sealed [`PostingsFile`], read
//! through a map. Both answer [`candidates`](PostingsFile::candidates): the docs
//! that hold every trigram of a query, which the caller then verifies with a
//! [`Matcher`](crate::Matcher) on the original text (a trigram hit is only a
//! candidate). Lists are intersected rarest first, leapfrogging with seeks, so
//! work follows the rarest list, not the commonest.
//!
//! The file layout is in `file.rs` and `docs/format.md`.

mod builder;
mod codec;
mod file;

pub use builder::{PostingsBatch, PostingsBuilder};
pub use codec::BLOCK_POSTINGS;
pub use file::{PostingsFile, POSTINGS_FORMAT_VERSION, POSTINGS_MAGIC};

use crate::error::IndexError;

/// Directory key of the list of every doc added (the answer to a query with no
/// trigrams); above every 24-bit trigram, so it sorts last.
pub(crate) const ALL_DOCS_KEY: u32 = 0x0100_0000;

/// Largest packed trigram value.
pub(crate) const TRIGRAM_MAX: u32 = 0x00FF_FFFF;

/// A forward-only view of one doc list.
pub(crate) trait DocCursor {
    /// Number of docs in the whole list (for rarest-first ordering).
    fn count(&self) -> u32;
    /// The first doc `>= target` at or after the current position, or `None`.
    fn seek(&mut self, target: u32) -> Result<Option<u32>, IndexError>;
}

/// Docs `>= from_doc` present in every cursor, ascending, at most `limit`.
pub(crate) fn intersect<C: DocCursor>(
    mut cursors: Vec<C>,
    from_doc: u32,
    limit: usize,
) -> Result<Vec<u32>, IndexError> {
    let mut out = Vec::new();
    if cursors.is_empty() || limit == 0 {
        return Ok(out);
    }
    cursors.sort_by_key(|c| c.count());
    let (lead, rest) = cursors.split_first_mut().expect("not empty");
    let mut target = from_doc;
    'outer: while let Some(doc) = lead.seek(target)? {
        for c in rest.iter_mut() {
            match c.seek(doc)? {
                None => break 'outer,
                Some(d) if d != doc => {
                    target = d;
                    continue 'outer;
                }
                Some(_) => {}
            }
        }
        out.push(doc);
        if out.len() >= limit {
            break;
        }
        match doc.checked_add(1) {
            Some(t) => target = t,
            None => break,
        }
    }
    Ok(out)
}

/// Appends to `out` the docs `>= from_doc` of `cursor`, ascending, at most `limit`.
pub(crate) fn collect_from<C: DocCursor>(
    cursor: &mut C,
    from_doc: u32,
    limit: usize,
    out: &mut Vec<u32>,
) -> Result<(), IndexError> {
    let mut target = from_doc;
    for _ in 0..limit {
        let Some(d) = cursor.seek(target)? else {
            break;
        };
        out.push(d);
        match d.checked_add(1) {
            Some(t) => target = t,
            None => break,
        }
    }
    Ok(())
}

/// The first `limit` docs of the union gathered in `all` (each list's first `limit` docs),
/// ascending and distinct.
pub(crate) fn union_prefix(mut all: Vec<u32>, limit: usize) -> Vec<u32> {
    all.sort_unstable();
    all.dedup();
    all.truncate(limit);
    all
}

/// Sorted, deduplicated trigrams; refuses values outside 24 bits.
pub(crate) fn normalise_trigrams(trigrams: &[u32]) -> Result<Vec<u32>, IndexError> {
    if let Some(&bad) = trigrams.iter().find(|&&t| t > TRIGRAM_MAX) {
        return Err(IndexError::InvalidArgument {
            reason: format!("trigram {bad:#x} does not fit in 24 bits"),
        });
    }
    let mut t = trigrams.to_vec();
    t.sort_unstable();
    t.dedup();
    Ok(t)
}

#[cfg(test)]
mod tests;
