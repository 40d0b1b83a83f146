//! The sealed postings file: writer and mapped reader.
//!
//! ```text
//! header     64 bytes (below)
//! data       long lists (more than BLOCK_POSTINGS docs), each at a data-relative u32 offset
//! directory  one record per DIR_CHUNK_ENTRIES lists, in key order (below)
//! chunks     ceil(entry_count / DIR_CHUNK_ENTRIES) x 12 bytes: first key u32, record
//!            offset u32 (directory-relative), crc32 u32 of (first key, record)
//! ```
//!
//! Header: magic [8], version u32, reserved u32, Unicode version [16] (ASCII,
//! zero-padded), block postings u32, entry count u32, data length u64, file
//! length u64, chunk table crc u32, header crc u32 (of bytes 0..60). The
//! directory's length is what the file length leaves.
//!
//! A record holds its lists' entries one after another, all varints: the key's
//! distance from the one before (absent for the first, which the chunk table
//! names), the doc count, then by count: 1, the doc; 2..=BLOCK_POSTINGS, the
//! length of a block body and the body itself (no checksum of its own: the
//! record's covers it); more, the list's data offset. A long list starts with a
//! skip table (per block: first doc u32, block offset u32 from the list start),
//! then a crc32 of (key, skip table), then its blocks, each with its checksum.
//!
//! Why: most lists of a segment's postings hold one or a few docs, and a fixed
//! 12-byte entry plus a 4-byte block checksum was more than half of the file.
//!
//! `open` checks the header, the lengths and the chunk table (a few KiB); each
//! lookup checks the one record it reads, each long list its skip table, each
//! of its decoded blocks its own checksum. `verify` walks all of them.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::codec::{
    decode_block, decode_block_body, encode_block, encode_block_body, get_varint, put_varint,
    BLOCK_POSTINGS,
};
use super::{collect_from, intersect, normalise_trigrams, union_prefix, DocCursor, ALL_DOCS_KEY};
use crate::error::IndexError;
use crate::tables::UNICODE_VERSION;

/// Magic bytes at offset 0 of every postings file.
pub const POSTINGS_MAGIC: [u8; 8] = *b"LBPOSTNG";
/// The postings format version this build writes and reads (2 had a fixed 12-byte
/// directory entry per list and every block in the data region; its files are refused,
/// and the engine rebuilds them).
pub const POSTINGS_FORMAT_VERSION: u32 = 3;
/// Header length in bytes.
const HEADER_BYTES: usize = 64;
/// Files of at most this many bytes are read whole by [`PostingsFile::open`], not mapped.
pub(crate) const SMALL_FILE_BYTES: u64 = 16 << 10;
/// Lists per directory record (and per chunk table entry): a lookup reads its record's
/// entries in order, so a record is kept short (a 2-byte query looks up 512 trigrams); its
/// 12-byte table entry costs under a byte per list.
const DIR_CHUNK_ENTRIES: usize = 16;
/// Chunk table entry length in bytes.
const CHUNK_BYTES: usize = 12;
/// Skip table entry length in bytes.
const SKIP_BYTES: usize = 8;
/// Largest data region and directory, in bytes: list and record offsets are u32.
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
    /// Long lists.
    data: Vec<u8>,
    /// Directory records, the last one open while it holds fewer than DIR_CHUNK_ENTRIES.
    dir: Vec<u8>,
    chunks: Vec<u8>,
    entries: u32,
    last_key: Option<u32>,
    /// The open record: where it starts in `dir`, its first key, its lists so far.
    record_at: usize,
    record_key: u32,
    record_lists: usize,
    body: Vec<u8>,
}

fn too_large(what: &str) -> IndexError {
    IndexError::InvalidArgument {
        reason: format!(
            "postings {what} exceeds {POSTINGS_DATA_BYTES_MAX} bytes: seal smaller segments"
        ),
    }
}

impl Writer {
    /// A writer with room for about `bytes` bytes of lists and `entries` directory entries
    /// (short lists are kept in the directory, long ones in the data region).
    pub(crate) fn with_capacity(bytes: usize, entries: usize) -> Self {
        Writer {
            data: Vec::with_capacity(bytes / 2),
            dir: Vec::with_capacity(bytes / 2 + entries * 3),
            chunks: Vec::with_capacity(entries.div_ceil(DIR_CHUNK_ENTRIES) * CHUNK_BYTES),
            entries: 0,
            last_key: None,
            record_at: 0,
            record_key: 0,
            record_lists: 0,
            body: Vec::new(),
        }
    }

    /// Appends the list of `key`: `docs` ascending, not empty.
    pub(crate) fn list(&mut self, key: u32, docs: &[u32]) -> Result<(), IndexError> {
        assert!(
            self.last_key.is_none_or(|k| k < key),
            "lists are written in ascending key order"
        );
        assert!(!docs.is_empty(), "empty lists are not stored");
        let count =
            u32::try_from(docs.len()).expect("doc ids are u32, so a list holds at most 2^32 docs");
        if self.record_lists == DIR_CHUNK_ENTRIES {
            self.close_record();
        }
        if self.record_lists == 0 {
            self.record_at = self.dir.len();
            self.record_key = key;
        } else {
            put_varint(
                &mut self.dir,
                key - self.last_key.expect("a record's earlier list"),
            );
        }
        self.last_key = Some(key);
        put_varint(&mut self.dir, count);
        if count == 1 {
            put_varint(&mut self.dir, docs[0]);
        } else if count <= BLOCK_POSTINGS {
            self.body.clear();
            encode_block_body(&mut self.body, docs);
            put_varint(&mut self.dir, self.body.len() as u32);
            self.dir.extend_from_slice(&self.body);
        } else {
            let offset = u32::try_from(self.data.len()).map_err(|_| too_large("data"))?;
            self.encode_long_list(key, docs);
            if self.data.len() as u64 > POSTINGS_DATA_BYTES_MAX {
                return Err(too_large("data"));
            }
            put_varint(&mut self.dir, offset);
        }
        if self.dir.len() as u64 > POSTINGS_DATA_BYTES_MAX {
            return Err(too_large("directory"));
        }
        self.record_lists += 1;
        self.entries += 1;
        Ok(())
    }

    fn close_record(&mut self) {
        if self.record_lists == 0 {
            return;
        }
        let record = &self.dir[self.record_at..];
        self.chunks
            .extend_from_slice(&self.record_key.to_le_bytes());
        self.chunks
            .extend_from_slice(&(self.record_at as u32).to_le_bytes());
        self.chunks
            .extend_from_slice(&record_crc(self.record_key, record).to_le_bytes());
        self.record_lists = 0;
    }

    fn encode_long_list(&mut self, key: u32, docs: &[u32]) {
        let per = BLOCK_POSTINGS as usize;
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

    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.close_record();
        let file_len = (HEADER_BYTES + self.data.len() + self.dir.len() + self.chunks.len()) as u64;
        let mut h = [0u8; HEADER_BYTES];
        h[0..8].copy_from_slice(&POSTINGS_MAGIC);
        h[8..12].copy_from_slice(&POSTINGS_FORMAT_VERSION.to_le_bytes());
        h[16..32].copy_from_slice(&unicode_field());
        h[32..36].copy_from_slice(&BLOCK_POSTINGS.to_le_bytes());
        h[36..40].copy_from_slice(&self.entries.to_le_bytes());
        h[40..48].copy_from_slice(&(self.data.len() as u64).to_le_bytes());
        h[48..56].copy_from_slice(&file_len.to_le_bytes());
        h[56..60].copy_from_slice(&crc32fast::hash(&self.chunks).to_le_bytes());
        let crc = crc32fast::hash(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
        let mut out = Vec::with_capacity(file_len as usize);
        out.extend_from_slice(&h);
        out.extend_from_slice(&self.data);
        out.extend_from_slice(&self.dir);
        out.extend_from_slice(&self.chunks);
        out
    }
}

/// Checksum of a directory record, bound to the first key its chunk table entry names.
fn record_crc(first_key: u32, record: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&first_key.to_le_bytes());
    h.update(record);
    h.finalize()
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
    dir_len: usize,
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

/// Where a list's docs are.
#[derive(Clone, Copy, Debug)]
enum List<'a> {
    /// A list of one doc: the doc.
    One(u32),
    /// A block body inside its (checked) directory record.
    Inline(&'a [u8]),
    /// A long list at this data-relative offset.
    Long(u32),
}

/// One directory entry.
#[derive(Clone, Copy, Debug)]
struct Entry<'a> {
    key: u32,
    count: u32,
    list: List<'a>,
    /// File offset of the entry (for errors).
    at: usize,
}

/// The entries of one checked directory record, in order.
struct Record<'a> {
    bytes: &'a [u8],
    /// File offset of `bytes`.
    at: usize,
    pos: usize,
    left: usize,
    prev_key: Option<u32>,
    first_key: u32,
    /// The entry [`Record::find`] read last and did not return: the first past its key.
    pending: Option<Entry<'a>>,
}

impl<'a> Record<'a> {
    /// The entry of `key`, reading on from where the last call stopped (keys asked for in
    /// ascending order); `None` when the record does not hold it.
    fn find(&mut self, file: &PostingsFile, key: u32) -> Result<Option<Entry<'a>>, IndexError> {
        loop {
            let e = match self.pending.take() {
                Some(e) => e,
                None => match self.next(file)? {
                    Some(e) => e,
                    None => return Ok(None),
                },
            };
            match e.key.cmp(&key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Ok(Some(e)),
                std::cmp::Ordering::Greater => {
                    self.pending = Some(e);
                    return Ok(None);
                }
            }
        }
    }

    fn varint(&mut self, file: &PostingsFile) -> Result<u32, IndexError> {
        let (v, used) = get_varint(&self.bytes[self.pos..]).ok_or_else(|| {
            file.corrupt(
                self.at + self.pos,
                "directory record holds a bad or cut varint",
            )
        })?;
        self.pos += used;
        Ok(v)
    }

    /// The next entry, `None` after the record's last.
    fn next(&mut self, file: &PostingsFile) -> Result<Option<Entry<'a>>, IndexError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let at = self.at + self.pos;
        let key = match self.prev_key {
            None => self.first_key,
            Some(p) => {
                let d = self.varint(file)?;
                match p.checked_add(d) {
                    Some(k) if d > 0 => k,
                    _ => return Err(file.corrupt(at, "directory keys are not strictly ascending")),
                }
            }
        };
        self.prev_key = Some(key);
        let count = self.varint(file)?;
        let list = match count {
            0 => return Err(file.corrupt(at, "directory entry of an empty list")),
            1 => List::One(self.varint(file)?),
            n if n <= BLOCK_POSTINGS => {
                let len = self.varint(file)? as usize;
                let Some(body) = self.bytes.get(self.pos..self.pos + len) else {
                    return Err(file.corrupt(at, "a list's block runs past its directory record"));
                };
                self.pos += len;
                List::Inline(body)
            }
            _ => List::Long(self.varint(file)?),
        };
        Ok(Some(Entry {
            key,
            count,
            list,
            at,
        }))
    }
}

impl PostingsFile {
    /// Maps `path` and checks its header, lengths and chunk table.
    pub fn open(path: &Path) -> Result<PostingsFile, IndexError> {
        let file = File::open(path).map_err(|e| IndexError::io(path, "open", e))?;
        let len = file
            .metadata()
            .map_err(|e| IndexError::io(path, "fstat", e))?
            .len();
        let bytes = if len <= SMALL_FILE_BYTES {
            // A small Session's postings: one read, where a map and its unmap at close cost
            // more (an unmap interrupts every core running one of the process's threads)
            // and hold a whole page per file.
            let mut v = vec![0u8; len as usize];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut v, 0)
                .map_err(|e| IndexError::io(path, "read", e))?;
            Bytes::Owned(v)
        } else {
            match crate::fsutil::map_prefix(&file, path, len)? {
                Some(m) => Bytes::Mapped(m),
                None => Bytes::Empty,
            }
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
        let dir_len = file_len
            .checked_sub(HEADER_BYTES as u64)
            .and_then(|v| v.checked_sub(data_len))
            .and_then(|v| v.checked_sub(chunks * CHUNK_BYTES as u64));
        let Some(dir_len) = dir_len.filter(|&d| {
            data_len <= POSTINGS_DATA_BYTES_MAX
                && d <= POSTINGS_DATA_BYTES_MAX
                && (entries == 0) == (d == 0)
        }) else {
            return Err(IndexError::corrupt(
                &path,
                40,
                "section lengths do not add up to the file length",
            ));
        };
        let pf = PostingsFile {
            path,
            bytes,
            entries: entries as usize,
            data_len: data_len as usize,
            dir_len: dir_len as usize,
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
    /// trigram). Each directory record's checksum is checked first; damage is an error.
    pub fn for_each_trigram(&self, mut f: impl FnMut(u32)) -> Result<(), IndexError> {
        for k in 0..self.chunk_count() {
            let mut record = self.record(k)?;
            while let Some(e) = record.next(self)? {
                if e.key <= super::TRIGRAM_MAX {
                    f(e.key);
                }
            }
        }
        Ok(())
    }

    /// Number of directory entries (distinct trigrams, plus one for the all-docs list).
    pub fn entry_count(&self) -> usize {
        self.entries
    }

    /// Whether the file's bytes are mapped (not read whole).
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.bytes, Bytes::Mapped(_))
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
        self.dir_offset() + self.dir_len
    }

    fn chunk_table(&self) -> &[u8] {
        &self.bytes.as_slice()[self.chunk_table_offset()..]
    }

    fn chunk_count(&self) -> usize {
        self.chunk_table().len() / CHUNK_BYTES
    }

    fn corrupt(&self, offset: usize, reason: impl Into<String>) -> IndexError {
        IndexError::corrupt(&self.path, offset as u64, reason)
    }

    /// Directory record `k`, its checksum checked.
    fn record(&self, k: usize) -> Result<Record<'_>, IndexError> {
        let table = self.chunk_table();
        let e = k * CHUNK_BYTES;
        let (first_key, start, expected) = (
            le32(table, e),
            le32(table, e + 4) as usize,
            le32(table, e + 8),
        );
        let end = if k + 1 < self.chunk_count() {
            le32(table, e + CHUNK_BYTES + 4) as usize
        } else {
            self.dir_len
        };
        let at = self.dir_offset() + start;
        if start >= end || end > self.dir_len || (k == 0 && start != 0) {
            return Err(self.corrupt(
                self.chunk_table_offset() + e,
                "directory records are not in order or run past the directory",
            ));
        }
        let bytes = &self.bytes.as_slice()[at..self.dir_offset() + end];
        let got = record_crc(first_key, bytes);
        if got != expected {
            return Err(IndexError::ChecksumMismatch {
                path: self.path.clone(),
                offset: at as u64,
                expected,
                got,
            });
        }
        Ok(Record {
            bytes,
            at,
            pos: 0,
            left: (self.entries - k * DIR_CHUNK_ENTRIES).min(DIR_CHUNK_ENTRIES),
            prev_key: None,
            first_key,
            pending: None,
        })
    }

    /// The chunk that would hold `key`: the last whose first key is <= `key`.
    fn chunk_of(&self, key: u32) -> Option<usize> {
        let table = self.chunk_table();
        let (mut lo, mut hi) = (0, self.chunk_count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if le32(table, mid * CHUNK_BYTES) <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    /// The directory entry of `key`, if any.
    fn lookup(&self, key: u32) -> Result<Option<Entry<'_>>, IndexError> {
        let Some(k) = self.chunk_of(key) else {
            return Ok(None);
        };
        self.record(k)?.find(self, key)
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
                Some(e) => cursors.push(FileCursor::new(self, e)?),
                None => return Ok(Vec::new()),
            }
        }
        intersect(cursors, from_doc, limit)
    }

    /// Docs `>= from_doc` holding ANY of `trigrams`, ascending, at most `limit` (none for no
    /// trigrams). The trigrams are looked up in key order, each directory record read once
    /// for all of them that it may hold. Damage is an error, never wrong data.
    pub fn candidates_any(
        &self,
        trigrams: &[u32],
        from_doc: u32,
        limit: usize,
    ) -> Result<Vec<u32>, IndexError> {
        let keys = normalise_trigrams(trigrams)?;
        let table = self.chunk_table();
        let chunks = self.chunk_count();
        let mut all = Vec::new();
        // The record being read, and its chunk.
        let mut at: Option<(usize, Record<'_>)> = None;
        for key in keys {
            // Last chunk whose first key is <= key.
            let k = match at.as_ref() {
                // Keys ascend: a later chunk starts past the current one.
                Some((k, ..)) if *k + 1 == chunks || le32(table, (*k + 1) * CHUNK_BYTES) > key => {
                    *k
                }
                _ => match self.chunk_of(key) {
                    Some(k) => k,
                    None => continue,
                },
            };
            if at.as_ref().is_none_or(|(current, _)| *current != k) {
                at = Some((k, self.record(k)?));
            }
            let (_, record) = at.as_mut().expect("set above");
            if let Some(e) = record.find(self, key)? {
                collect_from(&mut FileCursor::new(self, e)?, from_doc, limit, &mut all)?;
            }
        }
        Ok(union_prefix(all, limit))
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
        let mut prev_key: Option<u32> = None;
        let mut prev_end = 0usize;
        for k in 0..self.chunk_count() {
            let mut record = self.record(k)?;
            while let Some(e) = record.next(self)? {
                if prev_key.is_some_and(|p| p >= e.key) {
                    return Err(self.corrupt(e.at, "directory keys are not strictly ascending"));
                }
                if e.key > super::TRIGRAM_MAX && e.key != ALL_DOCS_KEY {
                    return Err(
                        self.corrupt(e.at, format!("directory key {:#x} is not a trigram", e.key))
                    );
                }
                prev_key = Some(e.key);
                let mut cur = FileCursor::new(self, e)?;
                if let List::Long(offset) = e.list {
                    if (offset as usize) < prev_end {
                        return Err(self.corrupt(e.at, "lists overlap"));
                    }
                }
                let mut n = 0u32;
                let mut last: Option<u32> = None;
                while let Some(d) = cur.next_doc()? {
                    if last.is_some_and(|l| l >= d) {
                        return Err(self.corrupt(e.at, "doc ids are not strictly ascending"));
                    }
                    each(e.key, d);
                    last = Some(d);
                    n += 1;
                }
                if n != e.count {
                    return Err(self.corrupt(
                        e.at,
                        format!("list holds {n} docs, its entry says {}", e.count),
                    ));
                }
                if let List::Long(_) = e.list {
                    prev_end = cur.end;
                }
            }
            if record.pos != record.bytes.len() {
                return Err(self.corrupt(
                    record.at + record.pos,
                    "directory record holds bytes after its last entry",
                ));
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
    entry: Entry<'a>,
    /// Skip table (a long list) or empty.
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
    fn new(file: &'a PostingsFile, entry: Entry<'a>) -> Result<Self, IndexError> {
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
        match entry.list {
            List::One(doc) => {
                c.buf.push(doc);
                c.block = 0;
            }
            List::Inline(_) => {}
            List::Long(offset) => {
                let at = HEADER_BYTES + offset as usize;
                let data = file.data();
                let start = offset as usize;
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
        match self.entry.list {
            List::One(_) => unreachable!("a list of one doc is decoded when made"),
            List::Inline(body) => {
                let used = decode_block_body(body, n as u32, &mut self.buf)
                    .map_err(|f| self.file.corrupt(self.entry.at, f.describe()))?;
                if used != body.len() {
                    return Err(self.file.corrupt(
                        self.entry.at,
                        "a list's block is not the length its entry says",
                    ));
                }
            }
            List::Long(offset) => {
                let rel = le32(self.skip, b * SKIP_BYTES + 4) as usize;
                let start = offset as usize + rel;
                let data = self.file.data();
                let at = HEADER_BYTES + start;
                let Some(bytes) = data.get(start..) else {
                    return Err(self
                        .file
                        .corrupt(at, "block offset is past the data region"));
                };
                let used = decode_block(bytes, self.entry.key, b as u32, n as u32, &mut self.buf)
                    .map_err(|f| self.file.corrupt(at, f.describe()))?;
                if self.buf[0] != self.skip_first(b) {
                    return Err(self
                        .file
                        .corrupt(at, "block does not start with the doc its skip entry names"));
                }
                self.end = self.end.max(start + used);
            }
        }
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
                return Err(self.file.corrupt(self.entry.at, "blocks are not ascending"));
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
