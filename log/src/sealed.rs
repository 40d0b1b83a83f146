//! Sealed segments: building the block-compressed file, opening it lazily on first use (header,
//! footer and block table only), and reading logical bytes through the block cache.

use crate::cache::{BlockKey, LogCache};
use crate::error::LogError;
use crate::format::{
    check_header, decode_block_entry, decode_footer, encode_block_entry, encode_footer,
    encode_header, sealed_name, sealed_tmp_name, BlockEntry, Footer, BLOCK_BYTES,
    BLOCK_ENTRY_BYTES, FOOTER_BYTES, HEADER_BYTES, SEALED_FORMAT, ZSTD_LEVEL,
};
use crate::io::{write_all_at, FileSystem, IoFile};
use crate::walk::Walk;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Largest compressed block accepted: zstd's bound for a 64 KiB input is a little above 64 KiB.
const BLOCK_COMPRESSED_BYTES_MAX: u64 = 2 * BLOCK_BYTES;
/// A sealed file at most this long is read whole into memory by its open (one `pread`, no
/// map) and every reader reads it there: four pages, about a small Session's whole compressed
/// log. A map and its unmap cost more than that read, and the unmap, when the Session closes,
/// interrupts every core that runs one of the process's threads.
const SMALL_FILE_BYTES: u64 = 16 << 10;

/// A sealed segment. Creating one touches no file: the file is opened, mapped and its header,
/// footer and block table checked on the first call that needs them ([`SealedSegment::opened`]),
/// so opening a log costs nothing per sealed segment. A check that fails is an error of that
/// call (naming the file and offset) and is not remembered: the next call checks again.
#[derive(Debug)]
pub struct SealedSegment {
    /// Segment number.
    pub segment: u64,
    /// The file.
    pub path: PathBuf,
    fs: Arc<dyn FileSystem>,
    opened: OnceLock<Opened>,
}

/// The checked state of a sealed segment, with its bytes (mapped, or read whole).
#[derive(Debug)]
pub struct Opened {
    bytes: FileBytes,
    /// The checked footer.
    pub footer: Footer,
    table: Vec<BlockEntry>,
}

/// A sealed file's bytes: mapped, or read whole (a small file).
#[derive(Debug)]
enum FileBytes {
    Mapped(memmap2::Mmap),
    Read(Box<[u8]>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Read(b) => b,
        }
    }
}

impl Opened {
    /// Length of the logical stream.
    pub fn logical_len(&self) -> u64 {
        self.footer.logical_len
    }

    /// Number of blocks.
    pub fn blocks(&self) -> u32 {
        self.footer.blocks
    }

    /// A small file (a small Session's whole log): read whole at open, and every reader reads
    /// it there (see `SealedSegment::block`).
    fn is_small(&self) -> bool {
        self.bytes.len() as u64 <= SMALL_FILE_BYTES
    }
}

impl SealedSegment {
    /// A sealed segment whose file is opened and checked on first use.
    pub fn lazy(fs: Arc<dyn FileSystem>, path: &Path, segment: u64) -> SealedSegment {
        SealedSegment {
            segment,
            path: path.to_path_buf(),
            fs,
            opened: OnceLock::new(),
        }
    }

    /// Opens and checks header, footer and block table now; never reads a block.
    pub fn open(
        fs: Arc<dyn FileSystem>,
        path: &Path,
        segment: u64,
    ) -> Result<SealedSegment, LogError> {
        let s = SealedSegment::lazy(fs, path, segment);
        s.opened()?;
        Ok(s)
    }

    /// The mapped and checked file, opening it on first use. Thread-safe: concurrent first
    /// calls may each open and check the file; one result is kept, and no caller waits on
    /// another's I/O.
    pub fn opened(&self) -> Result<&Opened, LogError> {
        if let Some(o) = self.opened.get() {
            return Ok(o);
        }
        let o = open_file(&*self.fs, &self.path, self.segment)?;
        Ok(self.opened.get_or_init(|| o))
    }

    /// Bytes of this file held while it is open: the whole of a small file once opened (read
    /// into memory by the open; every reader reads it there), none of a larger one (its
    /// mapped pages are let go after the open's checks, and bulk readers `pread` it).
    pub fn held_bytes(&self) -> u64 {
        self.opened
            .get()
            .filter(|o| o.is_small())
            .map_or(0, |o| o.bytes.len() as u64)
    }

    /// Length of the logical stream (opens the file on first use).
    pub fn logical_len(&self) -> Result<u64, LogError> {
        Ok(self.opened()?.logical_len())
    }

    /// Checks and decompresses block `i` (`i` below `o.blocks()`), from the file's bytes
    /// (its map, or what its open read).
    pub fn decompress_block(&self, o: &Opened, i: u32) -> Result<Vec<u8>, LogError> {
        let e = o.table[i as usize];
        let bytes = &o.bytes[e.file_offset as usize..(e.file_offset + u64::from(e.len)) as usize];
        self.check_and_decompress(o, i, bytes)
    }

    /// [`SealedSegment::decompress_block`] reading the compressed bytes with `pread` (the
    /// hint keeps the file open while its pass is in the segment, and the buffer): the pass
    /// leaves no page of the file mapped in the process.
    fn decompress_block_read(
        &self,
        o: &Opened,
        i: u32,
        hint: &mut BlockHint,
    ) -> Result<Vec<u8>, LogError> {
        let e = o.table[i as usize];
        let file = match &hint.file {
            Some((n, f)) if *n == self.segment => Arc::clone(f),
            _ => {
                let f = self
                    .fs
                    .open_ro(&self.path)
                    .map_err(|err| LogError::io(&self.path, "open", err))?;
                hint.file = Some((self.segment, Arc::clone(&f)));
                f
            }
        };
        let buf = &mut hint.compressed;
        buf.clear();
        buf.resize(e.len as usize, 0);
        crate::io::read_exact_at(&*file, buf, e.file_offset)
            .map_err(|err| LogError::io(&self.path, "read", err))?;
        self.check_and_decompress(o, i, buf)
    }

    fn check_and_decompress(&self, o: &Opened, i: u32, bytes: &[u8]) -> Result<Vec<u8>, LogError> {
        let e = o.table[i as usize];
        if crc32fast::hash(bytes) != e.crc {
            return Err(LogError::corrupt(
                &self.path,
                e.file_offset,
                format!("block {i} checksum mismatch"),
            ));
        }
        let start = HEADER_BYTES + u64::from(i) * BLOCK_BYTES;
        let want = BLOCK_BYTES.min(o.footer.logical_len - start) as usize;
        let decompress = |slot: &mut Option<zstd::bulk::Decompressor<'static>>| {
            let d = match slot {
                Some(d) => d,
                slot => slot.insert(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?),
            };
            d.decompress(bytes, want).map_err(|e| e.to_string())
        };
        // A thread being torn down (a Root dropped by an exit handler) has no thread-local
        // left: it decompresses with a context of its own.
        let out = DECOMPRESSOR
            .try_with(|d| decompress(&mut d.borrow_mut()))
            .unwrap_or_else(|_| decompress(&mut None));
        match out {
            Ok(v) if v.len() == want => Ok(v),
            Ok(v) => Err(LogError::corrupt(
                &self.path,
                e.file_offset,
                format!(
                    "block {i} decompresses to {} bytes, expected {want}",
                    v.len()
                ),
            )),
            Err(msg) => Err(LogError::corrupt(
                &self.path,
                e.file_offset,
                format!("block {i} does not decompress: {msg}"),
            )),
        }
    }

    /// Copies logical bytes `[offset, offset + buf.len())` into `buf` (caller checks bounds).
    pub fn read(
        &self,
        offset: u64,
        buf: &mut [u8],
        cache: &LogCache,
        hint: &mut BlockHint,
    ) -> Result<(), LogError> {
        let mut done = 0usize;
        self.each_piece(offset, buf.len(), cache, hint, |piece| {
            buf[done..done + piece.len()].copy_from_slice(piece);
            done += piece.len();
        })
    }

    /// Appends logical bytes `[offset, offset + len)` to `out` (caller checks bounds).
    pub fn read_to(
        &self,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
        cache: &LogCache,
        hint: &mut BlockHint,
    ) -> Result<(), LogError> {
        out.reserve(len);
        self.each_piece(offset, len, cache, hint, |piece| {
            out.extend_from_slice(piece)
        })
    }

    /// Logical bytes `[offset, offset + len)` (caller checks bounds): borrowed from the
    /// block that holds them, which `hint` keeps, or put together in `scratch` when they
    /// span blocks.
    pub fn slice<'s>(
        &self,
        offset: u64,
        len: usize,
        cache: &LogCache,
        hint: &'s mut BlockHint,
        scratch: &'s mut Vec<u8>,
    ) -> Result<&'s [u8], LogError> {
        let at = offset - HEADER_BYTES;
        let within = (at % BLOCK_BYTES) as usize;
        if within + len > BLOCK_BYTES as usize {
            scratch.clear();
            self.read_to(offset, len, scratch, cache, hint)?;
            return Ok(scratch);
        }
        let o = self.opened()?;
        self.block(o, (at / BLOCK_BYTES) as u32, cache, hint)?;
        let (_, block) = hint
            .last
            .as_ref()
            .expect("block() keeps the block in the hint");
        Ok(&block[within..within + len])
    }

    fn each_piece(
        &self,
        offset: u64,
        len: usize,
        cache: &LogCache,
        hint: &mut BlockHint,
        mut f: impl FnMut(&[u8]),
    ) -> Result<(), LogError> {
        let o = self.opened()?;
        debug_assert!(offset >= HEADER_BYTES, "records start after the header");
        debug_assert!(
            offset + len as u64 <= o.footer.logical_len,
            "caller checks bounds"
        );
        let mut done = 0usize;
        while done < len {
            let at = offset + done as u64 - HEADER_BYTES;
            let i = (at / BLOCK_BYTES) as u32;
            let within = (at % BLOCK_BYTES) as usize;
            let block = self.block(o, i, cache, hint)?;
            let n = (block.len() - within).min(len - done);
            f(&block[within..within + n]);
            done += n;
        }
        Ok(())
    }

    fn block(
        &self,
        o: &Opened,
        i: u32,
        cache: &LogCache,
        hint: &mut BlockHint,
    ) -> Result<Arc<Vec<u8>>, LogError> {
        let key: BlockKey = (self.segment, i);
        // A reader walking forward asks for the same block hundreds of times in a row.
        if let Some((k, b)) = &hint.last {
            if *k == key {
                return Ok(Arc::clone(b));
            }
        }
        let b = match cache.get(key) {
            Some(b) => b,
            None => {
                // Decompressed outside the cache's lock: other readers keep going meanwhile. A
                // bulk or streaming reader takes the compressed bytes with `pread`: a pass over
                // much history leaves none of the file mapped, so none of it stays resident
                // while the log is open. A small file (a small Session's whole log) is read
                // from the bytes its open read: a few pages, where a `pread` would open the
                // file again.
                let b = Arc::new(if (hint.bulk || hint.stream) && !o.is_small() {
                    self.decompress_block_read(o, i, hint)?
                } else {
                    self.decompress_block(o, i)?
                });
                // A streaming pass keeps only the block it is in (the hint's).
                if !hint.stream {
                    cache.insert(key, Arc::clone(&b), hint.bulk);
                }
                b
            }
        };
        hint.last = Some((key, Arc::clone(&b)));
        Ok(b)
    }
}

/// What a reader keeps between reads of sealed blocks: the block it used last (a run of
/// records in one block skips the shared cache), whether it reads in bulk (its misses are read
/// with `pread` instead of through the map and enter the cache as the first to go; see
/// `cache`) and whether it streams (a pass over much history: its misses are read with `pread`
/// and kept nowhere but here, so the pass holds one block however long it is).
#[derive(Default)]
pub struct BlockHint {
    last: Option<(BlockKey, Arc<Vec<u8>>)>,
    pub(crate) bulk: bool,
    stream: bool,
    /// A streaming reader's compressed bytes of the block it reads.
    compressed: Vec<u8>,
    /// A streaming reader's segment file, open while its pass is in that segment.
    file: Option<(u64, Arc<dyn IoFile>)>,
}

impl BlockHint {
    /// A hint for a reader that reads in bulk or not.
    pub(crate) fn new(bulk: bool) -> BlockHint {
        BlockHint {
            bulk,
            ..BlockHint::default()
        }
    }

    /// A hint for a reader that streams (see the type's documentation).
    pub(crate) fn streaming() -> BlockHint {
        BlockHint {
            bulk: true,
            stream: true,
            ..BlockHint::default()
        }
    }
}

thread_local! {
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Opens a sealed file, maps it (or reads it whole when small) and checks its header, footer
/// and block table.
fn open_file(fs: &dyn FileSystem, path: &Path, segment: u64) -> Result<Opened, LogError> {
    let f = fs
        .open_ro(path)
        .map_err(|e| LogError::io(path, "open", e))?;
    let len = f.len().map_err(|e| LogError::io(path, "stat", e))?;
    if len <= SMALL_FILE_BYTES {
        // Also a file too short to hold a header and a footer: `parse` says what is wrong.
        let mut bytes = vec![0u8; len as usize];
        crate::io::read_exact_at(&*f, &mut bytes, 0).map_err(|e| LogError::io(path, "read", e))?;
        let (footer, table) = parse(path, segment, &bytes)?;
        return Ok(Opened {
            bytes: FileBytes::Read(bytes.into_boxed_slice()),
            footer,
            table,
        });
    }
    let map = f.map().map_err(|e| LogError::io(path, "mmap", e))?;
    let (footer, table) = parse(path, segment, &map)?;
    // The checks touched the first and last pages (header, table, footer), which the kernel
    // may map in large pieces (a few MiB per file with large page-cache folios); the table is
    // copied out, so they are let go. A streaming reader then maps no page of the file at all,
    // and a reader through the map faults in only what it reads. Best effort: on failure
    // the pages stay mapped, which costs memory, not correctness.
    // SAFETY: the map is read-only, of a file never modified in place (docs/format.md):
    // after DONTNEED a read of the map faults the same bytes in again from the file.
    let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
    Ok(Opened {
        bytes: FileBytes::Mapped(map),
        footer,
        table,
    })
}

/// Checks header, footer and block table of a sealed file's bytes (docs/format.md).
pub fn parse(path: &Path, segment: u64, b: &[u8]) -> Result<(Footer, Vec<BlockEntry>), LogError> {
    check_header(path, b, SEALED_FORMAT, segment)?;
    let len = b.len() as u64;
    if len < HEADER_BYTES + FOOTER_BYTES {
        return Err(LogError::corrupt(
            path,
            len,
            "sealed segment shorter than header and footer",
        ));
    }
    let foot_at = len - FOOTER_BYTES;
    let bad = |offset: u64, reason: String| Err(LogError::corrupt(path, offset, reason));
    let Some(f) = decode_footer(&b[foot_at as usize..]) else {
        return bad(foot_at, "footer checksum mismatch".into());
    };
    if f.segment != segment {
        return bad(
            foot_at + 52,
            format!("footer names segment {}, expected {segment}", f.segment),
        );
    }
    if u64::from(f.block_bytes) != BLOCK_BYTES {
        return bad(
            foot_at + 44,
            format!("block size {} is not {BLOCK_BYTES}", f.block_bytes),
        );
    }
    let Some(body) = f.logical_len.checked_sub(HEADER_BYTES) else {
        return bad(
            foot_at,
            format!("logical length {} below the header", f.logical_len),
        );
    };
    if body.div_ceil(BLOCK_BYTES) != u64::from(f.blocks) {
        return bad(
            foot_at + 40,
            format!("{} blocks cannot hold {body} bytes", f.blocks),
        );
    }
    let table_len = u64::from(f.blocks) * BLOCK_ENTRY_BYTES;
    if f.table_offset.checked_add(table_len) != Some(foot_at) || f.table_offset < HEADER_BYTES {
        return bad(
            foot_at + 32,
            format!(
                "block table at {} does not end at the footer",
                f.table_offset
            ),
        );
    }
    let table_bytes = &b[f.table_offset as usize..foot_at as usize];
    if crc32fast::hash(table_bytes) != f.table_crc {
        return bad(f.table_offset, "block table checksum mismatch".into());
    }
    let records_ok = if f.records == 0 {
        f.first_record == f.logical_len && f.last_record == f.logical_len
    } else {
        f.first_record == HEADER_BYTES
            && f.first_record <= f.last_record
            && f.last_record < f.logical_len
    };
    if !records_ok {
        return bad(foot_at + 8, "record range does not fit the segment".into());
    }
    let mut table = Vec::with_capacity(f.blocks as usize);
    let mut next = HEADER_BYTES;
    for (i, chunk) in table_bytes
        .chunks_exact(BLOCK_ENTRY_BYTES as usize)
        .enumerate()
    {
        let e = decode_block_entry(chunk);
        if e.file_offset != next || e.len == 0 || u64::from(e.len) > BLOCK_COMPRESSED_BYTES_MAX {
            return bad(
                f.table_offset + i as u64 * BLOCK_ENTRY_BYTES,
                format!(
                    "block {i} entry (offset {}, length {}) out of place",
                    e.file_offset, e.len
                ),
            );
        }
        next += u64::from(e.len);
        table.push(e);
    }
    if next != f.table_offset {
        return bad(
            f.table_offset,
            "blocks do not end where the block table starts".into(),
        );
    }
    Ok((f, table))
}

/// Builds the bytes of a sealed file from a complete logical stream and its walk.
pub fn build(segment: u64, logical: &[u8], w: &Walk) -> Result<Vec<u8>, String> {
    debug_assert!(
        w.damage.is_none() && w.good_end == logical.len() as u64,
        "seal only clean segments"
    );
    let logical_len = logical.len() as u64;
    let mut out = Vec::with_capacity(logical.len() / 3 + 4096);
    out.extend_from_slice(&encode_header(SEALED_FORMAT, segment));
    let mut table = Vec::new();
    let mut c = zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(|e| e.to_string())?;
    for chunk in logical[HEADER_BYTES as usize..].chunks(BLOCK_BYTES as usize) {
        let z = c.compress(chunk).map_err(|e| e.to_string())?;
        let e = BlockEntry {
            file_offset: out.len() as u64,
            len: u32::try_from(z.len()).map_err(|_| "compressed block too large".to_string())?,
            crc: crc32fast::hash(&z),
        };
        encode_block_entry(&mut table, &e);
        out.extend_from_slice(&z);
    }
    let footer = Footer {
        logical_len,
        records: w.records,
        first_record: w.first_record.unwrap_or(logical_len),
        last_record: w.last_record.unwrap_or(logical_len),
        table_offset: out.len() as u64,
        blocks: u32::try_from((table.len() as u64) / BLOCK_ENTRY_BYTES)
            .map_err(|_| "too many blocks".to_string())?,
        block_bytes: BLOCK_BYTES as u32,
        table_crc: crc32fast::hash(&table),
        segment,
    };
    out.extend_from_slice(&table);
    out.extend_from_slice(&encode_footer(&footer));
    Ok(out)
}

/// Steps 1 and 2 of sealing (docs/format.md): write `N.sealed.tmp`, fdatasync, rename to
/// `N.sealed`, fsync the directory. Returns the sealed path.
pub fn write(
    fs: &dyn FileSystem,
    dir: &Path,
    segment: u64,
    bytes: &[u8],
) -> Result<PathBuf, LogError> {
    let tmp = dir.join(sealed_tmp_name(segment));
    let dst = dir.join(sealed_name(segment));
    match fs.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(LogError::io(&tmp, "remove", e)),
    }
    let f = fs
        .create_new(&tmp)
        .map_err(|e| LogError::io(&tmp, "create", e))?;
    write_all_at(&*f, bytes, 0).map_err(|e| LogError::io(&tmp, "write", e))?;
    f.sync_data()
        .map_err(|e| LogError::io(&tmp, "fdatasync", e))?;
    drop(f);
    fs.rename(&tmp, &dst)
        .map_err(|e| LogError::io(&dst, "rename", e))?;
    fs.sync_dir(dir)
        .map_err(|e| LogError::io(dir, "fsync directory", e))?;
    Ok(dst)
}
