//! In-memory postings for the unsealed tail.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::path::Path;

use super::codec::{for_each_varint_byte, get_varint, put_varint};
use super::{
    collect_from, file, intersect, normalise_trigrams, union_prefix, DocCursor, ALL_DOCS_KEY,
};
use crate::error::IndexError;
use crate::hash::IntHasher;
use crate::trigram::for_each_trigram;

type TrigramMap<V> = HashMap<u32, V, BuildHasherDefault<IntHasher>>;

/// Bits in the per-thread "seen in this text" set: one per possible trigram.
const SEEN_BITS: usize = 1 << 24;

thread_local! {
    /// Deduplicates the trigrams of one text without a map lookup per byte
    /// (2 MiB per thread, always left all-zero between calls).
    static SEEN: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// The staging buffers a batch borrows on this thread (see [`Staging`]).
    static STAGING: RefCell<Staging> = const { RefCell::new(Staging::new()) };
}

/// The buffers a batch collects and sorts its pairs in. They belong to the thread, not to a
/// builder: a thread indexing the rows of hundreds of Sessions, a batch at a time each,
/// keeps one set (up to a few MiB) instead of one per Session, and does not fault fresh
/// pages for each.
#[derive(Debug, Default)]
struct Staging {
    /// Pairs of the open batch, `trigram << 32 | doc`, docs ascending.
    pending: Vec<u64>,
    /// Scratch of the radix sort.
    scratch: Vec<u64>,
    /// `(list index, pairs)` of each run of the sorted pairs.
    runs: Vec<(u32, u32)>,
}

impl Staging {
    const fn new() -> Staging {
        Staging {
            pending: Vec::new(),
            scratch: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// This thread's buffers (empty ones when another batch on this thread holds them, or
    /// the thread is being torn down).
    fn take() -> Staging {
        STAGING
            .try_with(|cell| cell.try_borrow_mut().map(|mut s| std::mem::take(&mut *s)))
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    }

    /// Gives the buffers back to this thread for its next batch.
    fn give_back(mut self) {
        self.pending.clear();
        let _ = STAGING.try_with(|cell| {
            if let Ok(mut s) = cell.try_borrow_mut() {
                if s.pending.capacity() < self.pending.capacity() {
                    *s = self;
                }
            }
        });
    }
}

/// One doc list: gaps as varints (first doc, then doc - previous - 1).
#[derive(Debug, Default)]
struct List {
    bytes: ListBytes,
    last: u32,
    count: u32,
}

/// Bytes a list keeps in place before it moves them to the heap: in a small Session most
/// trigrams are in a few rows, so most lists never allocate (an allocation per trigram was
/// about a third of a small tail's memory and most of its build and drop time).
const INLINE_BYTES: usize = 15;

/// A list's varints: in place while they fit in [`INLINE_BYTES`], on the heap after.
#[derive(Debug)]
enum ListBytes {
    Inline { len: u8, buf: [u8; INLINE_BYTES] },
    Heap(Vec<u8>),
}

impl Default for ListBytes {
    fn default() -> Self {
        ListBytes::Inline {
            len: 0,
            buf: [0; INLINE_BYTES],
        }
    }
}

impl ListBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            ListBytes::Inline { len, buf } => &buf[..usize::from(*len)],
            ListBytes::Heap(v) => v,
        }
    }

    /// Heap bytes held (none in place).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        match self {
            ListBytes::Inline { .. } => 0,
            ListBytes::Heap(v) => v.capacity(),
        }
    }

    /// Appends varint `v`; returns the heap bytes this took (capacity newly allocated).
    fn put_varint(&mut self, v: u32) -> usize {
        let mut grown = 0;
        if let ListBytes::Inline { len, buf } = self {
            let (mut tmp, mut n) = ([0u8; 5], 0);
            for_each_varint_byte(v, |b| {
                tmp[n] = b;
                n += 1;
            });
            let at = usize::from(*len);
            if at + n <= INLINE_BYTES {
                buf[at..at + n].copy_from_slice(&tmp[..n]);
                *len += n as u8;
                return 0;
            }
            let mut heap = Vec::with_capacity(INLINE_BYTES * 2);
            heap.extend_from_slice(&buf[..at]);
            grown = heap.capacity();
            *self = ListBytes::Heap(heap);
        }
        if let ListBytes::Heap(heap) = self {
            let before = heap.capacity();
            put_varint(heap, v);
            grown += heap.capacity() - before;
        }
        grown
    }
}

impl List {
    /// Adds `doc`; returns the heap bytes this took.
    fn push(&mut self, doc: u32) -> usize {
        let grown = if self.count == 0 {
            self.bytes.put_varint(doc)
        } else if doc == self.last {
            return 0;
        } else {
            debug_assert!(doc > self.last, "docs are added in increasing order");
            self.bytes.put_varint(doc - self.last - 1)
        };
        self.last = doc;
        self.count += 1;
        grown
    }

    /// Decodes the whole list into `out` (cleared first).
    fn docs_into(&self, out: &mut Vec<u32>) {
        out.clear();
        out.reserve(self.count as usize);
        let mut cur = ListCursor::new(self);
        while let Some(d) = cur.next_doc() {
            out.push(d);
        }
    }
}

struct ListCursor<'a> {
    list: &'a List,
    at: usize,
    seen: u32,
    doc: u32,
}

impl<'a> ListCursor<'a> {
    fn new(list: &'a List) -> Self {
        ListCursor {
            list,
            at: 0,
            seen: 0,
            doc: 0,
        }
    }

    fn next_doc(&mut self) -> Option<u32> {
        if self.seen == self.list.count {
            return None;
        }
        let (v, used) = get_varint(&self.list.bytes.as_slice()[self.at..])
            .expect("the builder wrote this varint");
        self.at += used;
        self.doc = if self.seen == 0 { v } else { self.doc + v + 1 };
        self.seen += 1;
        Some(self.doc)
    }
}

impl DocCursor for ListCursor<'_> {
    fn count(&self) -> u32 {
        self.list.count
    }
    fn seek(&mut self, target: u32) -> Result<Option<u32>, IndexError> {
        if self.seen > 0 && self.doc >= target {
            return Ok(Some(self.doc));
        }
        while let Some(d) = self.next_doc() {
            if d >= target {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }
}

/// Row-level postings kept in memory for the unsealed tail. Doc ids are `u32`,
/// added in increasing order (one doc may be added several times, once per field).
///
/// Texts are added through a [`PostingsBatch`] (or one at a time with [`add`](Self::add)):
/// a batch collects (trigram, doc) pairs in a flat buffer and files them into the
/// lists when it is dropped (or when the buffer fills), sorted by trigram, so each
/// list is looked up once per batch instead of once per pair. Outside a batch every
/// pair is in its list.
#[derive(Debug, Default)]
pub struct PostingsBuilder {
    /// Index into `lists` of each trigram's list. Kept apart from the lists so the table
    /// stays small (8 bytes a trigram) and mostly in cache while a batch is filed.
    slots: TrigramMap<u32>,
    /// `(trigram, list)`, in the order trigrams were first seen.
    lists: Vec<(u32, List)>,
    all_docs: List,
    pairs: u64,
    /// Heap bytes the lists' varints took (those past [`INLINE_BYTES`]).
    spilled: usize,
}

/// Pairs a batch collects before it files them (2 MiB of pairs, plus as much scratch).
pub(crate) const BATCH_PAIRS_MAX: usize = 1 << 18;

/// Texts being added to a [`PostingsBuilder`]; their trigrams are in the builder's lists
/// once the batch is dropped.
#[derive(Debug)]
pub struct PostingsBatch<'a> {
    builder: &'a mut PostingsBuilder,
    /// The pairs staged and not yet filed, in this thread's buffers.
    staging: Staging,
}

impl PostingsBatch<'_> {
    /// Adds the trigrams of `folded_text` (already folded) to `doc`.
    ///
    /// # Panics
    /// When `doc` is smaller than a doc added before (a caller bug).
    pub fn add(&mut self, doc: u32, folded_text: &[u8]) {
        self.builder
            .stage(doc, folded_text, &mut self.staging.pending);
        if self.staging.pending.len() >= BATCH_PAIRS_MAX {
            self.builder.file_pending(&mut self.staging);
        }
    }
}

impl Drop for PostingsBatch<'_> {
    fn drop(&mut self) {
        self.builder.file_pending(&mut self.staging);
        std::mem::take(&mut self.staging).give_back();
    }
}

/// Index in `lists` of `key`'s list (found through `slots`), created empty if there is none.
fn slot_of(slots: &mut TrigramMap<u32>, lists: &mut Vec<(u32, List)>, key: u32) -> u32 {
    let next = lists.len() as u32;
    let i = *slots.entry(key).or_insert(next);
    if i == next {
        lists.push((key, List::default()));
    }
    i
}

/// Sorts `pairs` stably by trigram (bits 32..56), two 12-bit digits, using `scratch`.
fn radix_sort_by_trigram(pairs: &mut [u64], scratch: &mut Vec<u64>) {
    const DIGIT: u32 = 12;
    const BUCKETS: usize = 1 << DIGIT;
    scratch.clear();
    scratch.resize(pairs.len(), 0);
    let mut at = vec![0usize; BUCKETS];
    for pass in 0..2 {
        let shift = 32 + pass * DIGIT;
        let digit = |p: u64| ((p >> shift) as usize) & (BUCKETS - 1);
        let (from, to): (&[u64], &mut [u64]) = if pass == 0 {
            (pairs, scratch)
        } else {
            (scratch, pairs)
        };
        at.fill(0);
        for &p in from {
            at[digit(p)] += 1;
        }
        let mut sum = 0;
        for c in at.iter_mut() {
            let n = *c;
            *c = sum;
            sum += n;
        }
        for &p in from {
            let d = digit(p);
            to[at[d]] = p;
            at[d] += 1;
        }
    }
}

impl PostingsBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the trigrams of `folded_text` (already folded) to `doc`: a batch of one text.
    /// Use [`batch`](Self::batch) to add many.
    ///
    /// # Panics
    /// When `doc` is smaller than a doc added before (a caller bug).
    pub fn add(&mut self, doc: u32, folded_text: &[u8]) {
        self.batch().add(doc, folded_text);
    }

    /// A batch of texts to add; they are in the lists when it is dropped.
    pub fn batch(&mut self) -> PostingsBatch<'_> {
        PostingsBatch {
            builder: self,
            staging: Staging::take(),
        }
    }

    /// Records `doc` and the distinct trigrams of `folded_text` as pending pairs.
    fn stage(&mut self, doc: u32, folded_text: &[u8], pending: &mut Vec<u64>) {
        assert!(
            self.all_docs.count == 0 || doc >= self.all_docs.last,
            "PostingsBuilder::add: doc {doc} after doc {}: docs must be added in increasing order",
            self.all_docs.last
        );
        self.spilled += self.all_docs.push(doc);
        let staged =
            SEEN.try_with(|cell| stage_trigrams(&mut cell.borrow_mut(), doc, folded_text, pending));
        if staged.is_err() {
            // The thread is being torn down (a Root dropped by an exit handler): a set of
            // this call's own.
            stage_trigrams(&mut Vec::new(), doc, folded_text, pending);
        }
    }

    /// Files the pending pairs into their lists, one list lookup per distinct trigram.
    fn file_pending(&mut self, staging: &mut Staging) {
        let Staging {
            pending,
            scratch,
            runs,
        } = staging;
        if pending.is_empty() {
            return;
        }
        radix_sort_by_trigram(pending, scratch);
        // Two passes over the runs (one per distinct trigram): the first loop, only lookups,
        // is small enough for the core to keep many of the slot table's cache misses in
        // flight at once, where one loop doing both waited for each in turn (12 % of the
        // indexing time on the 500 MB corpus).
        // 1. Each run's list, created when new.
        runs.clear();
        for run in pending.chunk_by(|a, b| a >> 32 == b >> 32) {
            let i = slot_of(&mut self.slots, &mut self.lists, (run[0] >> 32) as u32);
            runs.push((i, run.len() as u32));
        }
        // 2. File the pairs.
        let mut pairs = 0u64;
        let mut spilled = 0;
        let mut at = 0;
        for &(i, n) in runs.iter() {
            let list = &mut self.lists[i as usize].1;
            let before = list.count;
            for &p in &pending[at..at + n as usize] {
                spilled += list.push(p as u32);
            }
            at += n as usize;
            pairs += u64::from(list.count - before);
        }
        self.pairs += pairs;
        self.spilled += spilled;
        pending.clear();
    }

    /// Number of distinct docs added.
    pub fn doc_count(&self) -> u32 {
        self.all_docs.count
    }

    /// Calls `f` with every distinct trigram seen, in no particular order.
    pub fn for_each_trigram(&self, mut f: impl FnMut(u32)) {
        for (key, _) in &self.lists {
            f(*key);
        }
    }

    /// Number of distinct trigrams seen.
    pub fn trigram_count(&self) -> usize {
        self.lists.len()
    }

    /// Number of (trigram, doc) pairs held.
    pub fn pair_count(&self) -> u64 {
        self.pairs
    }

    /// Approximate heap bytes held by the lists (constant time: what a cache of open
    /// Sessions counts often).
    pub fn memory_bytes(&self) -> usize {
        self.spilled
            + self.lists.capacity() * std::mem::size_of::<(u32, List)>()
            + self.slots.capacity() * std::mem::size_of::<(u32, u32)>()
    }

    /// Docs `>= from_doc` holding ALL `trigrams`, ascending, at most `limit`.
    /// No trigrams means every doc added.
    ///
    /// # Panics
    /// When a trigram does not fit in 24 bits (a caller bug).
    pub fn candidates(&self, trigrams: &[u32], from_doc: u32, limit: usize) -> Vec<u32> {
        let trigrams = normalise_trigrams(trigrams).expect("trigrams come from for_each_trigram");
        let mut cursors = Vec::with_capacity(trigrams.len().max(1));
        if trigrams.is_empty() {
            cursors.push(ListCursor::new(&self.all_docs));
        }
        for t in &trigrams {
            match self.slots.get(t) {
                Some(&i) => cursors.push(ListCursor::new(&self.lists[i as usize].1)),
                None => return Vec::new(),
            }
        }
        intersect(cursors, from_doc, limit).expect("in-memory cursors never fail")
    }

    /// Docs `>= from_doc` holding ANY of `trigrams` (at least one), ascending, at most
    /// `limit`.
    ///
    /// # Panics
    /// When a trigram does not fit in 24 bits (a caller bug).
    pub fn candidates_any(&self, trigrams: &[u32], from_doc: u32, limit: usize) -> Vec<u32> {
        let trigrams = normalise_trigrams(trigrams).expect("trigrams come from for_each_trigram");
        let mut all = Vec::new();
        for t in &trigrams {
            if let Some(&i) = self.slots.get(t) {
                let mut c = ListCursor::new(&self.lists[i as usize].1);
                collect_from(&mut c, from_doc, limit, &mut all)
                    .expect("in-memory cursors never fail");
            }
        }
        union_prefix(all, limit)
    }

    /// The builder that `file` was written from (same lists, so `to_bytes` gives the same
    /// bytes), for adding more docs to postings read back from disk. Every checksum and
    /// list of the file is checked; damage is an error.
    pub fn from_file(file: &file::PostingsFile) -> Result<Self, IndexError> {
        let mut b = PostingsBuilder::new();
        let mut current: Option<(u32, List)> = None;
        let mut pairs = 0u64;
        let mut spilled = 0;
        file.walk(|key, doc| {
            if current.as_ref().is_none_or(|(k, _)| *k != key) {
                if let Some((k, list)) = current.take() {
                    b.insert_list(k, list, &mut pairs);
                }
                current = Some((key, List::default()));
            }
            spilled += current.as_mut().expect("set above").1.push(doc);
        })?;
        if let Some((k, list)) = current {
            b.insert_list(k, list, &mut pairs);
        }
        b.pairs = pairs;
        b.spilled = spilled;
        Ok(b)
    }

    /// Adds every doc of `later`, all of whose docs come after this builder's (a caller bug
    /// otherwise: panics), so that `self` holds what one builder given both would.
    pub fn append(&mut self, later: &PostingsBuilder) {
        let mut docs = Vec::new();
        later.all_docs.docs_into(&mut docs);
        let Some(&first) = docs.first() else {
            return;
        };
        assert!(
            self.all_docs.count == 0 || first > self.all_docs.last,
            "PostingsBuilder::append: doc {first} after doc {}: docs must come later",
            self.all_docs.last
        );
        for &d in &docs {
            self.spilled += self.all_docs.push(d);
        }
        for (key, list) in &later.lists {
            list.docs_into(&mut docs);
            let i = slot_of(&mut self.slots, &mut self.lists, *key);
            let into = &mut self.lists[i as usize].1;
            for &d in &docs {
                self.spilled += into.push(d);
            }
        }
        self.pairs += later.pairs;
    }

    fn insert_list(&mut self, key: u32, list: List, pairs: &mut u64) {
        if key == ALL_DOCS_KEY {
            self.all_docs = list;
        } else {
            *pairs += u64::from(list.count);
            let i = slot_of(&mut self.slots, &mut self.lists, key);
            self.lists[i as usize].1 = list;
        }
    }

    /// The encoded postings file (what `write` stores).
    pub fn to_bytes(&self) -> Result<Vec<u8>, IndexError> {
        // (trigram, index in `lists`), in trigram order.
        let mut order: Vec<(u32, u32)> = (0..self.lists.len() as u32)
            .map(|i| (self.lists[i as usize].0, i))
            .collect();
        order.sort_unstable();
        // Bit-packed blocks come out smaller than the in-memory varints.
        let estimate = self
            .lists
            .iter()
            .map(|(_, l)| l.bytes.as_slice().len())
            .sum::<usize>()
            + self.all_docs.bytes.as_slice().len();
        let mut writer = file::Writer::with_capacity(estimate, order.len() + 1);
        let mut docs = Vec::new();
        for (k, i) in order {
            self.lists[i as usize].1.docs_into(&mut docs);
            writer.list(k, &docs)?;
        }
        if self.all_docs.count > 0 {
            self.all_docs.docs_into(&mut docs);
            writer.list(ALL_DOCS_KEY, &docs)?;
        }
        Ok(writer.finish())
    }

    /// Writes the sealed postings file atomically (temporary file, fsync, rename, fsync of the directory).
    pub fn write(&self, path: &Path) -> Result<(), IndexError> {
        let bytes = self.to_bytes()?;
        crate::fsutil::write_atomic(path, &[&bytes])
    }

    /// Writes the postings file through a temporary file renamed over `path`, with no fsync:
    /// for a file that is checked when read and rebuilt when missing or damaged, where a
    /// crash may leave the old file, the new one (whole or damaged), or none.
    pub fn write_unsynced(&self, path: &Path) -> Result<(), IndexError> {
        let bytes = self.to_bytes()?;
        crate::fsutil::write_replace_unsynced(path, &[&bytes])
    }
}

/// Pushes `(trigram << 32) | doc` once per distinct trigram of `folded_text` onto `pending`,
/// using `seen` (grown to [`SEEN_BITS`] bits when empty, left all-zero) to drop repeats.
fn stage_trigrams(seen: &mut Vec<u64>, doc: u32, folded_text: &[u8], pending: &mut Vec<u64>) {
    if seen.is_empty() {
        seen.resize(SEEN_BITS / 64, 0);
    }
    let start = pending.len();
    for_each_trigram(folded_text, |t| {
        let (w, bit) = ((t >> 6) as usize, 1u64 << (t & 63));
        if seen[w] & bit == 0 {
            seen[w] |= bit;
            pending.push(u64::from(t) << 32 | u64::from(doc));
        }
    });
    for &p in &pending[start..] {
        seen[(p >> 38) as usize] = 0;
    }
}

#[cfg(test)]
mod list_tests {
    use super::*;

    #[test]
    fn a_list_is_no_larger_in_place_than_with_a_vec() {
        // The slot table's entries stay 40 bytes: the in-place bytes take the Vec's room.
        assert_eq!(std::mem::size_of::<(u32, List)>(), 40);
    }

    #[test]
    fn lists_past_the_inline_bytes_move_to_the_heap_unchanged() {
        for n in [0u32, 1, 5, 7, 8, 9, 21, 200] {
            let mut l = List::default();
            let docs: Vec<u32> = (0..n).map(|i| i * 300 + (i % 3)).collect();
            for &d in &docs {
                l.push(d);
                l.push(d); // a doc added twice is kept once
            }
            let mut back = Vec::new();
            l.docs_into(&mut back);
            assert_eq!(back, docs, "{n} docs");
            let mut plain = Vec::new();
            let mut last = 0;
            for (i, &d) in docs.iter().enumerate() {
                put_varint(&mut plain, if i == 0 { d } else { d - last - 1 });
                last = d;
            }
            assert_eq!(l.bytes.as_slice(), plain.as_slice(), "{n} docs");
            assert_eq!(
                l.bytes.heap_bytes() > 0,
                plain.len() > INLINE_BYTES,
                "{n} docs"
            );
        }
    }

    #[test]
    fn the_counted_heap_bytes_are_the_lists_capacities() {
        let mut b = PostingsBuilder::default();
        for doc in 0..500u32 {
            let text = format!("row {doc} {} common words", "x".repeat(doc as usize % 7));
            b.add(doc, text.as_bytes());
        }
        let held: usize = b
            .lists
            .iter()
            .map(|(_, l)| l.bytes.heap_bytes())
            .sum::<usize>()
            + b.all_docs.bytes.heap_bytes();
        assert!(held > 0, "some lists spilled");
        assert_eq!(b.spilled, held);
    }
}
