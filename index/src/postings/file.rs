//! The sealed postings file: writer and mapped reader.
//!
//! ```text
//! header     64 bytes (below)
//! data       lists, each at a data-relative u32 offset
//! directory  entry_count x 12 bytes: key u32, count u32, offset u32 (sorted by key)
//! chunks     ceil(entry_count / DIR_CHUNK_ENTRIES) x 8 bytes: first key u32, crc32 u32 of the chunk's entries
//! ```
//!
//! Header: magic [8], version u32, reserved u32, Unicode version [16] (ASCII,
//! zero-padded), block postings u32, entry count u32, data length u64, file
//! length u64, chunk table crc u32, header crc u32 (of bytes 0..60).
//!
//! A list of one doc stores the doc in the entry's offset field. A list of
//! 2..=BLOCK_POSTINGS docs is one block at the offset. A longer list starts
//! with a skip table (per block: first doc u32, block offset u32 from the list
//! start), then a crc32 of (key, skip table), then its blocks.
//!
//! `open` checks the header, the lengths and the chunk table (a few KiB);
//! each lookup checks the one directory chunk it reads, each list its skip
//! table, each decoded block its own checksum. `verify` walks all of them.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::codec::{decode_block, encode_block, BLOCK_POSTINGS};
use super::{intersect, normalise_trigrams, DocCursor, ALL_DOCS_KEY};
use crate::error::IndexError;
use crate::tables::UNICODE_VERSION;

/// Magic bytes at offset 0 of every postings file.
pub const POSTINGS_MAGIC: [u8; 8] = *b"LBPOSTNG";
/// The postings format version this build writes and reads.
pub const POSTINGS_FORMAT_VERSION: u32 = 2;
/// Header length in bytes.
const HEADER_BYTES: usize = 64;
/// Directory entry length in bytes.
const ENTRY_BYTES: usize = 12;
/// Directory entries per checksummed chunk.
const DIR_CHUNK_ENTRIES: usize = 256;
/// Chunk table entry length in bytes.
const CHUNK_BYTES: usize = 8;
/// Skip table entry length in bytes.
const SKIP_BYTES: usize = 8;
/// Largest data region, in bytes: list offsets are u32.
const POSTINGS_DATA_BYTES_MAX: u64 = u32::MAX as u64;

const _: () = assert!(
    UNICODE_VERSION.len() <= 16,
    "Unicode version must fit its header field"
);

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("caller checked bounds"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("caller checked bounds"))
}

fn unicode_field() -> [u8; 16] {
    let mut f = [0u8; 16];
    f[..UNICODE_VERSION.len()].copy_from_slice(UNICODE_VERSION.as_bytes());
    f
}

/// Builds the file in memory, list by list in ascending key order.
pub(crate) struct Writer {
    data: Vec<u8>,
    dir: Vec<u8>,
    entries: u32,
    last_key: Option<u32>,
}

impl Writer {
    /// A writer with room for `data` bytes of lists and `entries` directory entries.
    pub(crate) fn with_capacity(data: usize, entries: usize) -> Self {
        Writer {
            data: Vec::with_capacity(data),
            dir: Vec::with_capacity(entries * ENTRY_BYTES),
            entries: 0,
            last_key: None,
        }
    }

    /// Appends the list of `key`: `docs` ascending, not empty.
    pub(crate) fn list(&mut self, key: u32, docs: &[u32]) -> Result<(), IndexError> {
        assert!(
            self.last_key.is_none_or(|k| k < key),
            "lists are written in ascending key order"
        );
        assert!(!docs.is_empty(), "empty lists are not stored");
        self.last_key = Some(key);
        let count =
            u32::try_from(docs.len()).expect("doc ids are u32, so a list holds at most 2^32 docs");
        let offset = if count == 1 {
            docs[0]
        } else {
            let offset = u32::try_from(self.data.len()).map_err(|_| IndexError::InvalidArgument {
                reason: format!("postings data exceeds {POSTINGS_DATA_BYTES_MAX} bytes: seal smaller segments"),
            })?;
            self.encode_list(key, docs);
            offset
        };
        if self.data.len() as u64 > POSTINGS_DATA_BYTES_MAX {
            return Err(IndexError::InvalidArgument {
                reason: format!(
                    "postings data exceeds {POSTINGS_DATA_BYTES_MAX} bytes: seal smaller segments"
                ),
            });
        }
        self.dir.extend_from_slice(&key.to_le_bytes());
        self.dir.extend_from_slice(&count.to_le_bytes());
        self.dir.extend_from_slice(&offset.to_le_bytes());
        self.entries += 1;
        Ok(())
    }

    fn encode_list(&mut self, key: u32, docs: &[u32]) {
        let per = BLOCK_POSTINGS as usize;
        if docs.len() <= per {
            encode_block(&mut self.data, key, 0, docs);
            return;
        }
        let start = self.data.len();
        let blocks = docs.len().div_ceil(per);
        let skip_at = start;
        self.data.resize(start + blocks * SKIP_BYTES + 4, 0);
        for (i, chunk) in docs.chunks(per).enumerate() {
            let rel = (self.data.len() - start) as u32;
            let e = skip_at + i * SKIP_BYTES;
            self.data[e..e + 4].copy_from_slice(&chunk[0].to_le_bytes());
            self.data[e + 4..e + 8].copy_from_slice(&rel.to_le_bytes());
            encode_block(&mut self.data, key, i as u32, chunk);
        }
        let skip_end = skip_at + blocks * SKIP_BYTES;
        let crc = skip_crc(key, &self.data[skip_at..skip_end]);
        self.data[skip_end..skip_end + 4].copy_from_slice(&crc.to_le_bytes());
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        let mut chunks = Vec::new();
        for chunk in self.dir.chunks(DIR_CHUNK_ENTRIES * ENTRY_BYTES) {
            chunks.extend_from_slice(&chunk[0..4]);
            chunks.extend_from_slice(&crc32fast::hash(chunk).to_le_bytes());
        }
        let file_len = (HEADER_BYTES + self.data.len() + self.dir.len() + chunks.len()) as u64;
        let mut h = [0u8; HEADER_BYTES];
        h[0..8].copy_from_slice(&POSTINGS_MAGIC);
        h[8..12].copy_from_slice(&POSTINGS_FORMAT_VERSION.to_le_bytes());
        h[16..32].copy_from_slice(&unicode_field());
        h[32..36].copy_from_slice(&BLOCK_POSTINGS.to_le_bytes());
        h[36..40].copy_from_slice(&self.entries.to_le_bytes());
        h[40..48].copy_from_slice(&(self.data.len() as u64).to_le_bytes());
        h[48..56].copy_from_slice(&file_len.to_le_bytes());
        h[56..60].copy_from_slice(&crc32fast::hash(&chunks).to_le_bytes());
        let crc = crc32fast::hash(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
        let mut out = Vec::with_capacity(file_len as usize);
        out.extend_from_slice(&h);
        out.extend_from_slice(&self.data);
        out.extend_from_slice(&self.dir);
        out.extend_from_slice(&chunks);
        out
    }
}

fn skip_crc(key: u32, skip: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&key.to_le_bytes());
    h.update(skip);
    h.finalize()
}

enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
    Empty,
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
            Bytes::Empty => &[],
        }
    }
}

/// A sealed postings file, mapped read-only.
pub struct PostingsFile {
    path: PathBuf,
    bytes: Bytes,
    entries: usize,
    data_len: usize,
}

impl std::fmt::Debug for PostingsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostingsFile")
            .field("path", &self.path)
            .field("bytes", &self.bytes.as_slice().len())
            .field("entries", &self.entries)
            .finish()
    }
}

/// One directory entry.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u32,
    count: u32,
    offset: u32,
}

impl PostingsFile {
    /// Maps `path` and checks its header, lengths and chunk table.
    pub fn open(path: &Path) -> Result<PostingsFile, IndexError> {
        let file = File::open(path).map_err(|e| IndexError::io(path, "open", e))?;
        let len = file
            .metadata()
            .map_err(|e| IndexError::io(path, "fstat", e))?
            .len();
        let bytes = match crate::fsutil::map_prefix(&file, path, len)? {
            Some(m) => Bytes::Mapped(m),
            None => Bytes::Empty,
        };
        Self::check(path.to_path_buf(), bytes)
    }

    /// Checks `bytes` as a postings file held in memory (tests, fuzzing, copies).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<PostingsFile, IndexError> {
        Self::check(PathBuf::from("<memory>"), Bytes::Owned(bytes))
    }

    fn check(path: PathBuf, bytes: Bytes) -> Result<PostingsFile, IndexError> {
        let b = bytes.as_slice();
        if b.len() < 8 || b[0..8] != POSTINGS_MAGIC {
            return Err(IndexError::ForeignFile {
                path,
                expected: POSTINGS_MAGIC,
                found: b[..b.len().min(8)].to_vec(),
            });
        }
        if b.len() < HEADER_BYTES {
            return Err(IndexError::corrupt(
                &path,
                b.len() as u64,
                "file is shorter than its header",
            ));
        }
        let version = le32(b, 8);
        if version != POSTINGS_FORMAT_VERSION {
            return Err(IndexError::UnsupportedVersion {
                path,
                found: version,
                supported: POSTINGS_FORMAT_VERSION,
            });
        }
        let (expected, got) = (le32(b, 60), crc32fast::hash(&b[..60]));
        if expected != got {
            return Err(IndexError::ChecksumMismatch {
                path,
                offset: 0,
                expected,
                got,
            });
        }
        if b[16..32] != unicode_field() {
            let found = String::from_utf8_lossy(&b[16..32])
                .trim_end_matches('\0')
                .to_string();
            return Err(IndexError::UnicodeMismatch {
                path,
                found,
                expected: UNICODE_VERSION,
            });
        }
        if le32(b, 12) != 0 {
            return Err(IndexError::corrupt(
                &path,
                12,
                "reserved header bytes are not zero",
            ));
        }
        if le32(b, 32) != BLOCK_POSTINGS {
            return Err(IndexError::corrupt(
                &path,
                32,
                format!("block size {} is not {BLOCK_POSTINGS}", le32(b, 32)),
            ));
        }
        let entries = le32(b, 36) as u64;
        let data_len = le64(b, 40);
        let file_len = le64(b, 48);
        if file_len != b.len() as u64 {
            return Err(IndexError::corrupt(
                &path,
                b.len() as u64,
                format!(
                    "file is {} bytes, its header says {file_len} (truncated or extended)",
                    b.len()
                ),
            ));
        }
        let chunks = entries.div_ceil(DIR_CHUNK_ENTRIES as u64);
        let want = (HEADER_BYTES as u64)
            .checked_add(data_len)
            .and_then(|v| v.checked_add(entries * ENTRY_BYTES as u64))
            .and_then(|v| v.checked_add(chunks * CHUNK_BYTES as u64));
        if want != Some(file_len) || data_len > POSTINGS_DATA_BYTES_MAX {
            return Err(IndexError::corrupt(
                &path,
                40,
                "section lengths do not add up to the file length",
            ));
        }
        let pf = PostingsFile {
            path,
            bytes,
            entries: entries as usize,
            data_len: data_len as usize,
        };
        let (expected, got) = (
            le32(pf.bytes.as_slice(), 56),
            crc32fast::hash(pf.chunk_table()),
        );
        if expected != got {
            return Err(IndexError::ChecksumMismatch {
                path: pf.path.clone(),
                offset: pf.chunk_table_offset() as u64,
                expected,
                got,
            });
        }
        Ok(pf)
    }

    /// The file's path (`<memory>` for [`PostingsFile::from_bytes`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `f` with every trigram that has a list, ascending (the all-docs list is not a
    /// trigram). Each directory chunk's checksum is checked first; damage is an error.
    pub fn for_each_trigram(&self, mut f: impl FnMut(u32)) -> Result<(), IndexError> {
        let chunks = self.chunk_table().len() / CHUNK_BYTES;
        for k in 0..chunks {
            let chunk = self.chunk(k)?;
            for i in 0..chunk.len() / ENTRY_BYTES {
                let key = le32(chunk, i * ENTRY_BYTES);
                if key <= super::TRIGRAM_MAX {
                    f(key);
                }
            }
        }
        Ok(())
    }

    /// Number of directory entries (distinct trigrams, plus one for the all-docs list).
    pub fn entry_count(&self) -> usize {
        self.entries
    }

    /// Size of the file in bytes.
    pub fn byte_len(&self) -> u64 {
        self.bytes.as_slice().len() as u64
    }

    fn data(&self) -> &[u8] {
        &self.bytes.as_slice()[HEADER_BYTES..HEADER_BYTES + self.data_len]
    }

    fn dir_offset(&self) -> usize {
        HEADER_BYTES + self.data_len
    }

    fn chunk_table_offset(&self) -> usize {
        self.dir_offset() + self.entries * ENTRY_BYTES
    }

    fn chunk_table(&self) -> &[u8] {
        &self.bytes.as_slice()[self.chunk_table_offset()..]
    }

    fn corrupt(&self, offset: usize, reason: impl Into<String>) -> IndexError {
        IndexError::corrupt(&self.path, offset as u64, reason)
    }

    /// The checked entries of directory chunk `k`.
    fn chunk(&self, k: usize) -> Result<&[u8], IndexError> {
        let first = k * DIR_CHUNK_ENTRIES;
        let n = (self.entries - first).min(DIR_CHUNK_ENTRIES);
        let at = self.dir_offset() + first * ENTRY_BYTES;
        let bytes = &self.bytes.as_slice()[at..at + n * ENTRY_BYTES];
        let table = self.chunk_table();
        let (first_key, expected) = (
            le32(table, k * CHUNK_BYTES),
            le32(table, k * CHUNK_BYTES + 4),
        );
        let got = crc32fast::hash(bytes);
        if got != expected {
            return Err(IndexError::ChecksumMismatch {
                path: self.path.clone(),
                offset: at as u64,
                expected,
                got,
            });
        }
        if le32(bytes, 0) != first_key {
            return Err(self.corrupt(
                at,
                "directory chunk does not start with the key its table names",
            ));
        }
        Ok(bytes)
    }

    fn entry_at(chunk: &[u8], i: usize) -> Entry {
        let e = i * ENTRY_BYTES;
        Entry {
            key: le32(chunk, e),
            count: le32(chunk, e + 4),
            offset: le32(chunk, e + 8),
        }
    }

    /// The directory entry of `key`, if any.
    fn lookup(&self, key: u32) -> Result<Option<Entry>, IndexError> {
        let table = self.chunk_table();
        let chunks = table.len() / CHUNK_BYTES;
        // Last chunk whose first key is <= key.
        let (mut lo, mut hi) = (0, chunks);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if le32(table, mid * CHUNK_BYTES) <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == 0 {
            return Ok(None);
        }
        let chunk = self.chunk(lo - 1)?;
        let n = chunk.len() / ENTRY_BYTES;
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let k = le32(chunk, mid * ENTRY_BYTES);
            match k.cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Some(Self::entry_at(chunk, mid))),
            }
        }
        Ok(None)
    }

    fn cursor(&self, e: Entry) -> Result<FileCursor<'_>, IndexError> {
        FileCursor::new(self, e)
    }

    /// Docs `>= from_doc` holding ALL `trigrams`, ascending, at most `limit`.
    /// No trigrams means every doc in the file. Damage is an error, never wrong data.
    pub fn candidates(
        &self,
        trigrams: &[u32],
        from_doc: u32,
        limit: usize,
    ) -> Result<Vec<u32>, IndexError> {
        let keys = normalise_trigrams(trigrams)?;
        let keys = if keys.is_empty() {
            vec![ALL_DOCS_KEY]
        } else {
            keys
        };
        let mut cursors = Vec::with_capacity(keys.len());
        for k in keys {
            match self.lookup(k)? {
                Some(e) => cursors.push(self.cursor(e)?),
                None => return Ok(Vec::new()),
            }
        }
        intersect(cursors, from_doc, limit)
    }

    /// Number of docs holding `trigram` (0 when absent).
    pub fn doc_frequency(&self, trigram: u32) -> Result<u32, IndexError> {
        Ok(self.lookup(trigram)?.map_or(0, |e| e.count))
    }

    /// Walks every checksum and decodes every list, checking order and bounds.
    pub fn verify(&self) -> Result<(), IndexError> {
        self.walk(|_, _| {})
    }

    /// Every list in key order, each doc handed to `each(key, doc)` ascending, with every
    /// check of [`verify`](Self::verify) made on the way (an error may come after some
    /// lists were handed out).
    pub(crate) fn walk(&self, mut each: impl FnMut(u32, u32)) -> Result<(), IndexError> {
        let chunks = self.chunk_table().len() / CHUNK_BYTES;
        let mut prev_key: Option<u32> = None;
        let mut prev_end = 0usize;
        for k in 0..chunks {
            let chunk = self.chunk(k)?;
            for i in 0..chunk.len() / ENTRY_BYTES {
                let e = Self::entry_at(chunk, i);
                let at = self.dir_offset() + (k * DIR_CHUNK_ENTRIES + i) * ENTRY_BYTES;
                if prev_key.is_some_and(|p| p >= e.key) {
                    return Err(self.corrupt(at, "directory keys are not strictly ascending"));
                }
                if e.key > super::TRIGRAM_MAX && e.key != ALL_DOCS_KEY {
                    return Err(
                        self.corrupt(at, format!("directory key {:#x} is not a trigram", e.key))
                    );
                }
                prev_key = Some(e.key);
                let mut cur = self.cursor(e)?;
                if e.count >= 2 && (e.offset as usize) < prev_end {
                    return Err(self.corrupt(at, "lists overlap"));
                }
                let mut n = 0u32;
                let mut last: Option<u32> = None;
                while let Some(d) = cur.next_doc()? {
                    if last.is_some_and(|l| l >= d) {
                        return Err(self.corrupt(at, "doc ids are not strictly ascending"));
                    }
                    each(e.key, d);
                    last = Some(d);
                    n += 1;
                }
                if n != e.count {
                    return Err(self.corrupt(
                        at,
                        format!("list holds {n} docs, its entry says {}", e.count),
                    ));
                }
                if e.count >= 2 {
                    prev_end = cur.end;
                }
            }
        }
        if prev_end > self.data_len {
            return Err(self.corrupt(HEADER_BYTES + prev_end, "lists run past the data region"));
        }
        Ok(())
    }
}

/// A forward cursor over one list of the file, decoding one block at a time.
struct FileCursor<'a> {
    file: &'a PostingsFile,
    entry: Entry,
    /// Skip table (count > BLOCK_POSTINGS) or empty.
    skip: &'a [u8],
    blocks: usize,
    /// Index of the block in `buf`, or `usize::MAX` before the first.
    block: usize,
    buf: Vec<u32>,
    pos: usize,
    /// Data-relative end of the furthest block decoded (for `verify`).
    end: usize,
}

impl<'a> FileCursor<'a> {
    fn new(file: &'a PostingsFile, entry: Entry) -> Result<Self, IndexError> {
        let per = BLOCK_POSTINGS as usize;
        let mut c = FileCursor {
            file,
            entry,
            skip: &[],
            blocks: (entry.count as usize).div_ceil(per),
            block: usize::MAX,
            buf: Vec::new(),
            pos: 0,
            end: 0,
        };
        let at = HEADER_BYTES + entry.offset as usize;
        match entry.count {
            0 => return Err(file.corrupt(at, "directory entry of an empty list")),
            1 => {
                c.buf.push(entry.offset);
                c.block = 0;
            }
            n if n <= BLOCK_POSTINGS => {}
            _ => {
                let data = file.data();
                let start = entry.offset as usize;
                let len = c.blocks * SKIP_BYTES;
                let Some(skip) = data.get(start..start + len + 4) else {
                    return Err(file.corrupt(at, "skip table runs past the data region"));
                };
                let (expected, got) = (le32(skip, len), skip_crc(entry.key, &skip[..len]));
                if expected != got {
                    return Err(IndexError::ChecksumMismatch {
                        path: file.path.clone(),
                        offset: at as u64,
                        expected,
                        got,
                    });
                }
                c.skip = &skip[..len];
            }
        }
        Ok(c)
    }

    fn skip_first(&self, b: usize) -> u32 {
        le32(self.skip, b * SKIP_BYTES)
    }

    /// Decodes block `b` into `buf`.
    fn load(&mut self, b: usize) -> Result<(), IndexError> {
        let per = BLOCK_POSTINGS as usize;
        let n = if b + 1 == self.blocks {
            self.entry.count as usize - b * per
        } else {
            per
        };
        let rel = if self.skip.is_empty() {
            0
        } else {
            le32(self.skip, b * SKIP_BYTES + 4) as usize
        };
        let start = self.entry.offset as usize + rel;
        let data = self.file.data();
        let at = HEADER_BYTES + start;
        let Some(bytes) = data.get(start..) else {
            return Err(self
                .file
                .corrupt(at, "block offset is past the data region"));
        };
        let used = decode_block(bytes, self.entry.key, b as u32, n as u32, &mut self.buf)
            .map_err(|f| self.file.corrupt(at, f.describe()))?;
        if !self.skip.is_empty() && self.buf[0] != self.skip_first(b) {
            return Err(self
                .file
                .corrupt(at, "block does not start with the doc its skip entry names"));
        }
        self.end = self.end.max(start + used);
        self.block = b;
        self.pos = 0;
        Ok(())
    }

    /// Next doc in order (for `verify`).
    fn next_doc(&mut self) -> Result<Option<u32>, IndexError> {
        if self.block == usize::MAX {
            self.load(0)?;
        } else if self.pos >= self.buf.len() {
            if self.block + 1 >= self.blocks || self.entry.count == 1 {
                return Ok(None);
            }
            let prev = *self.buf.last().expect("a decoded block is never empty");
            self.load(self.block + 1)?;
            if self.buf[0] <= prev {
                return Err(self.file.corrupt(
                    HEADER_BYTES + self.entry.offset as usize,
                    "blocks are not ascending",
                ));
            }
        }
        let d = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(d))
    }
}

impl DocCursor for FileCursor<'_> {
    fn count(&self) -> u32 {
        self.entry.count
    }

    fn seek(&mut self, target: u32) -> Result<Option<u32>, IndexError> {
        loop {
            if self.block != usize::MAX {
                let rest = &self.buf[self.pos..];
                let i = rest.partition_point(|&d| d < target);
                if i < rest.len() {
                    self.pos += i;
                    return Ok(Some(rest[i]));
                }
                self.pos = self.buf.len();
                if self.block + 1 >= self.blocks || self.entry.count == 1 {
                    return Ok(None);
                }
            }
            let from = if self.block == usize::MAX {
                0
            } else {
                self.block + 1
            };
            // The last block at or after `from` whose first doc is <= target.
            let next = if self.skip.is_empty() {
                from
            } else {
                let (mut lo, mut hi) = (from, self.blocks);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if self.skip_first(mid) <= target {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo.saturating_sub(1).max(from)
            };
            self.load(next)?;
        }
    }
}
