//! `FixedIndex`: a file of fixed-width little-endian entries.
//!
//! Layout (all integers little-endian; see `docs/format.md`):
//!
//! ```text
//! 0   8  magic      b"LBFIXIDX"
//! 8   4  version    FIXED_INDEX_FORMAT_VERSION
//! 12  4  tag        caller's 4-byte file kind ("SEQ1", "POS1", ...)
//! 16  4  width      bytes per entry, 1..=FIXED_WIDTH_MAX
//! 20  8  reserved   zero
//! 28  4  crc32      CRC-32 of bytes 0..28
//! 32  .. entries    k * (width + 4) bytes: each entry's `width` bytes, then
//!                   CRC-32 of (its index as u64 LE, then those bytes)
//! ```
//!
//! The durable entries are read through a read-only map; entries pushed since
//! the last `sync` live in memory. `sync` writes them past the mapped length,
//! fdatasyncs, and maps again, so a mapped byte is never changed in place.
//! A caller that keeps the index under a lock syncs in three steps instead, so
//! that readers never wait for the disk: [`FixedIndex::begin_sync`] (under a
//! read lock) copies the pending entries out with a handle to the file,
//! [`PendingSync::write`] (no lock) writes and fdatasyncs them, and
//! [`FixedIndex::finish_sync`] (under the write lock, brief) maps them.
//! A file whose length is not `32 + k * width` lost its last write half way
//! (a torn tail): `open` cuts it back to whole entries and reports how many
//! bytes it cut in [`FixedIndex::cut_bytes`]. Every entry carries a CRC-32 bound to
//! its index. `open` checks the header only, so that opening costs the same whatever the
//! number of entries; each read of a mapped entry ([`FixedIndex::get`],
//! [`FixedIndex::partition_point`]) checks that entry's checksum first, so a flipped or
//! shifted entry is never handed out: the read fails with
//! [`IndexError::ChecksumMismatch`] naming its offset, and the caller rebuilds the index
//! from its source. [`FixedIndex::check_all`] checks every entry (a full verify).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use memmap2::Mmap;

use crate::error::IndexError;
use crate::fsutil;

/// Magic bytes at offset 0 of every fixed-width index file.
pub const FIXED_INDEX_MAGIC: [u8; 8] = *b"LBFIXIDX";
/// The fixed-width index format version this build writes and reads.
pub const FIXED_INDEX_FORMAT_VERSION: u32 = 2;
/// Header length in bytes; entries start here.
pub const FIXED_HEADER_BYTES: u64 = 32;
/// Largest entry width accepted, in bytes.
pub const FIXED_WIDTH_MAX: u32 = 4096;
/// Bytes of checksum stored after each entry.
pub const FIXED_ENTRY_CRC_BYTES: u32 = 4;

const CRC_OFFSET: usize = 28;

/// The checksum stored after entry `i`: CRC-32 of `i` (u64 LE), then the entry.
fn entry_crc(i: u64, entry: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&i.to_le_bytes());
    h.update(entry);
    h.finalize()
}

/// A file of fixed-width little-endian entries. See the module docs for the layout.
///
/// Not internally synchronised: wrap it in a `RwLock`; [`FixedIndex::get`] borrows.
#[derive(Debug)]
pub struct FixedIndex {
    path: PathBuf,
    /// Shared with [`PendingSync`]s, which write and sync without the caller's lock. `None`
    /// for a detached index ([`FixedIndex::open_detached`]), which never writes.
    file: Option<Arc<File>>,
    tag: [u8; 4],
    width: u32,
    /// Entries `[0, durable)` are in the file and mapped.
    map: Option<Mmap>,
    durable: u64,
    /// Entries `[durable, durable + tail.len() / stride)`, not yet synced, each with
    /// its checksum as on disk.
    tail: Vec<u8>,
    cut_bytes: u64,
    poisoned: bool,
    /// Bumped by every `truncate`: a [`SyncedEntries`] begun before one is refused.
    generation: u64,
    /// Set when a read finds a damaged entry (see [`FixedIndex::report_damage_to`]).
    damage: Option<Arc<AtomicBool>>,
}

/// Entries of a [`FixedIndex`] not yet durable, copied out with a handle to the file by
/// [`FixedIndex::begin_sync`], so that [`PendingSync::write`] can write and fdatasync them
/// while the caller's lock over the index is released (readers and writers go on).
#[derive(Debug)]
pub struct PendingSync {
    file: Arc<File>,
    path: PathBuf,
    /// File offset of the first entry: the end of the mapped (durable) part.
    at: u64,
    bytes: Vec<u8>,
    synced: SyncedEntries,
}

/// Entries `[from, to)` of an index are in its file and fdatasync'd: what
/// [`FixedIndex::finish_sync`] needs to make them durable in the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "hand it to FixedIndex::finish_sync"]
pub struct SyncedEntries {
    from: u64,
    to: u64,
    generation: u64,
}

impl SyncedEntries {
    /// Number of entries the index holds durably once this is finished.
    pub fn durable_len(&self) -> u64 {
        self.to
    }
}

impl PendingSync {
    /// True when nothing was pending (writing it does nothing).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Writes the entries past the durable part and fdatasyncs. Needs no lock: the bytes go
    /// at or beyond the mapped length, never inside it, and the index itself is not touched.
    pub fn write(self) -> Result<SyncedEntries, IndexError> {
        self.write_with(true)
    }

    /// Writes the entries like [`PendingSync::write`] but leaves them in the page cache: they
    /// survive the process but not a power loss, after which `open` finds the file short or
    /// torn and the caller rebuilds. For a caller that does not promise them durable (the
    /// engine syncs its indexes only before a checkpoint counts them).
    pub fn write_unsynced(self) -> Result<SyncedEntries, IndexError> {
        self.write_with(false)
    }

    fn write_with(self, sync: bool) -> Result<SyncedEntries, IndexError> {
        if self.bytes.is_empty() {
            return Ok(self.synced);
        }
        self.file
            .write_all_at(&self.bytes, self.at)
            .map_err(|e| IndexError::io(&self.path, "pwrite", e))?;
        if sync {
            self.file
                .sync_data()
                .map_err(|e| IndexError::io(&self.path, "fdatasync", e))?;
        }
        Ok(self.synced)
    }
}

fn encode_header(tag: [u8; 4], width: u32) -> [u8; FIXED_HEADER_BYTES as usize] {
    let mut h = [0u8; FIXED_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(&FIXED_INDEX_MAGIC);
    h[8..12].copy_from_slice(&FIXED_INDEX_FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&tag);
    h[16..20].copy_from_slice(&width.to_le_bytes());
    let crc = crc32fast::hash(&h[..CRC_OFFSET]);
    h[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    h
}

fn check_width(width: u32) -> Result<(), IndexError> {
    if width == 0 || width > FIXED_WIDTH_MAX {
        return Err(IndexError::InvalidArgument {
            reason: format!("entry width {width} is outside 1..={FIXED_WIDTH_MAX}"),
        });
    }
    Ok(())
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("caller passes exactly 4 bytes"))
}

/// Checks a header read from `path` against what the caller expects.
fn check_header(path: &Path, h: &[u8], tag: [u8; 4], width: u32) -> Result<(), IndexError> {
    if h.len() < 8 || h[0..8] != FIXED_INDEX_MAGIC {
        return Err(IndexError::ForeignFile {
            path: path.to_path_buf(),
            expected: FIXED_INDEX_MAGIC,
            found: h[..h.len().min(8)].to_vec(),
        });
    }
    if h.len() < FIXED_HEADER_BYTES as usize {
        return Err(IndexError::corrupt(
            path,
            h.len() as u64,
            format!(
                "file of {} bytes is shorter than its {FIXED_HEADER_BYTES}-byte header",
                h.len()
            ),
        ));
    }
    let stored = le_u32(&h[CRC_OFFSET..CRC_OFFSET + 4]);
    let computed = crc32fast::hash(&h[..CRC_OFFSET]);
    let version = le_u32(&h[8..12]);
    // A newer writer may have changed the header layout (and so its checksum):
    // report the version first when it is not ours, so the message names it.
    if version != FIXED_INDEX_FORMAT_VERSION {
        return Err(IndexError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: FIXED_INDEX_FORMAT_VERSION,
        });
    }
    if stored != computed {
        return Err(IndexError::ChecksumMismatch {
            path: path.to_path_buf(),
            offset: 0,
            expected: stored,
            got: computed,
        });
    }
    let found_tag: [u8; 4] = h[12..16].try_into().expect("4-byte slice");
    let found_width = le_u32(&h[16..20]);
    if found_tag != tag || found_width != width {
        return Err(IndexError::ShapeMismatch {
            path: path.to_path_buf(),
            expected_tag: tag,
            found_tag,
            expected_width: width,
            found_width,
        });
    }
    if h[20..28].iter().any(|&b| b != 0) {
        return Err(IndexError::corrupt(
            path,
            20,
            "reserved header bytes are not zero",
        ));
    }
    Ok(())
}

impl FixedIndex {
    /// Creates an empty index at `path`, replacing any file there by a rename (so a caller
    /// rebuilds a damaged index by creating it again). Nothing is synced: an index is derived
    /// data, and after a crash the old file, the new one or none is found, each of which
    /// `open` either takes or refuses for a rebuild. The caller makes the directory entry
    /// durable when it needs it (the engine's checkpoint syncs the directory). Where no file
    /// is there yet (a new Session's first open), the index is made in place: one create and
    /// one write, no temporary file and no rename; a crash half way leaves a header that
    /// `open` refuses, so it is made again.
    pub fn create(path: &Path, tag: [u8; 4], width: u32) -> Result<FixedIndex, IndexError> {
        check_width(width)?;
        let file = create_file(path, tag, width)?;
        Ok(FixedIndex::empty(path, tag, width, Some(Arc::new(file))))
    }

    /// Gives a detached index whose entries are all in memory (made by
    /// [`FixedIndex::empty_detached`] and pushed to) its file: created at its path as by
    /// [`FixedIndex::create`] (a file there is replaced), with only the header written. The
    /// entries are written by the next sync. An owner that keeps a small index in memory
    /// until it is worth a file calls this first.
    pub fn attach(&mut self) -> Result<(), IndexError> {
        if self.file.is_some() {
            return Err(IndexError::InvalidArgument {
                reason: format!("{} already has its file", self.path.display()),
            });
        }
        let file = create_file(&self.path, self.tag, self.width)?;
        self.file = Some(Arc::new(file));
        Ok(())
    }

    /// An index with no entries over `file` (`None`: detached).
    fn empty(path: &Path, tag: [u8; 4], width: u32, file: Option<Arc<File>>) -> FixedIndex {
        FixedIndex {
            path: path.to_path_buf(),
            file,
            tag,
            width,
            map: None,
            durable: 0,
            tail: Vec::new(),
            cut_bytes: 0,
            poisoned: false,
            generation: 0,
            damage: None,
        }
    }

    /// Opens an existing index. Refuses (with an error, never a panic) a foreign,
    /// newer or damaged header and a tag or width other than the caller's: the
    /// caller rebuilds. Cuts a torn tail back to whole entries (fdatasync'd). The entries'
    /// checksums are not read here but by every read of an entry (see the module docs).
    pub fn open(path: &Path, tag: [u8; 4], width: u32) -> Result<FixedIndex, IndexError> {
        check_width(width)?;
        let file = open_rw(path)?;
        let file_len = file
            .metadata()
            .map_err(|e| IndexError::io(path, "fstat", e))?
            .len();
        let mut header = vec![0u8; file_len.min(FIXED_HEADER_BYTES) as usize];
        file.read_exact_at(&mut header, 0)
            .map_err(|e| IndexError::io(path, "read header", e))?;
        check_header(path, &header, tag, width)?;
        let stride = u64::from(width + FIXED_ENTRY_CRC_BYTES);
        let body = file_len - FIXED_HEADER_BYTES;
        let durable = body / stride;
        let whole = FIXED_HEADER_BYTES + durable * stride;
        let cut_bytes = file_len - whole;
        if cut_bytes != 0 {
            file.set_len(whole)
                .map_err(|e| IndexError::io(path, "ftruncate torn tail", e))?;
            file.sync_data()
                .map_err(|e| IndexError::io(path, "fdatasync", e))?;
        }
        let map = fsutil::map_prefix(&file, path, if durable == 0 { 0 } else { whole })?;
        Ok(FixedIndex {
            path: path.to_path_buf(),
            file: Some(Arc::new(file)),
            tag,
            width,
            map,
            durable,
            tail: Vec::new(),
            cut_bytes,
            poisoned: false,
            generation: 0,
            damage: None,
        })
    }

    /// An index read from `path` into memory, for a reader beside the process that writes
    /// it: the file is opened read only and read, never mapped (its writer may shorten it) and
    /// never written; the entries before the first one that is incomplete or fails its
    /// checksum are kept (the writer may be writing the rest right now), and
    /// [`FixedIndex::cut_bytes`] counts the bytes left out. Pushes and truncations change only
    /// the memory; [`FixedIndex::sync`] is refused. A missing file is an empty index. A
    /// foreign or damaged header is refused as by [`FixedIndex::open`].
    pub fn open_detached(path: &Path, tag: [u8; 4], width: u32) -> Result<FixedIndex, IndexError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(IndexError::io(path, "read", e)),
        };
        let mut ix = FixedIndex::empty_detached(path, tag, width)?;
        if bytes.is_empty() {
            return Ok(ix);
        }
        check_header(
            path,
            &bytes[..bytes.len().min(FIXED_HEADER_BYTES as usize)],
            tag,
            width,
        )?;
        let body = &bytes[FIXED_HEADER_BYTES as usize..];
        let (w, stride) = (width as usize, ix.stride());
        let mut keep = 0;
        for (i, e) in body.chunks_exact(stride).enumerate() {
            let (entry, stored) = e.split_at(w);
            if check_entry(path, i as u64, entry, stored, width).is_err() {
                break;
            }
            keep += stride;
        }
        ix.cut_bytes = (body.len() - keep) as u64;
        ix.tail = body[..keep].to_vec();
        Ok(ix)
    }

    /// An empty detached index (see [`FixedIndex::open_detached`]): the reader's own
    /// rebuild of an index whose file it cannot trust. Reads nothing.
    pub fn empty_detached(path: &Path, tag: [u8; 4], width: u32) -> Result<FixedIndex, IndexError> {
        check_width(width)?;
        Ok(FixedIndex::empty(path, tag, width, None))
    }

    /// True for an index made by [`FixedIndex::open_detached`].
    pub fn is_detached(&self) -> bool {
        self.file.is_none()
    }

    /// Number of entries (durable and in memory).
    pub fn len(&self) -> u64 {
        self.durable + (self.tail.len() / self.stride()) as u64
    }

    /// Bytes per entry in the file: the entry and its checksum.
    fn stride(&self) -> usize {
        (self.width + FIXED_ENTRY_CRC_BYTES) as usize
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry width in bytes.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// The 4-byte tag the file was created with.
    pub fn tag(&self) -> [u8; 4] {
        self.tag
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of a torn tail that `open` cut off (0 when the file was whole).
    pub fn cut_bytes(&self) -> u64 {
        self.cut_bytes
    }

    /// Number of entries already synced to disk.
    pub fn durable_len(&self) -> u64 {
        self.durable
    }

    /// Entry `i`, exactly `width` bytes, or `None` when `i >= len()`. A mapped entry is
    /// handed out only after its checksum is checked: a mismatch is
    /// [`IndexError::ChecksumMismatch`] with the entry's offset (the file is damaged; rebuild
    /// it). Entries pushed in this process and not yet synced are not checked.
    pub fn get(&self, i: u64) -> Result<Option<&[u8]>, IndexError> {
        let (w, stride) = (self.width as usize, self.stride());
        if i < self.durable {
            let map = self
                .map
                .as_ref()
                .expect("durable entries exist only with a map");
            let start = FIXED_HEADER_BYTES as usize + (i as usize) * stride;
            let (entry, stored) = map[start..start + stride].split_at(w);
            self.checked(check_entry(&self.path, i, entry, stored, self.width))?;
            Ok(Some(entry))
        } else {
            let Ok(j) = usize::try_from(i - self.durable) else {
                return Ok(None);
            };
            Ok(j.checked_mul(stride)
                .and_then(|start| self.tail.get(start..start.checked_add(w)?)))
        }
    }

    /// Checks the checksum of every durable entry (what `open` leaves to the reads): the
    /// first mismatch is [`IndexError::ChecksumMismatch`] with its offset.
    pub fn check_all(&self) -> Result<(), IndexError> {
        let Some(map) = &self.map else {
            return Ok(());
        };
        let (w, stride) = (self.width as usize, self.stride());
        let body = &map[FIXED_HEADER_BYTES as usize..];
        for (i, e) in body.chunks_exact(stride).enumerate() {
            let (entry, stored) = e.split_at(w);
            self.checked(check_entry(&self.path, i as u64, entry, stored, self.width))?;
        }
        Ok(())
    }

    /// Has every later read that finds a damaged entry also set `flag`, so that the owner
    /// learns of the damage (and rebuilds) whichever caller met it.
    pub fn report_damage_to(&mut self, flag: Arc<AtomicBool>) {
        self.damage = Some(flag);
    }

    fn checked(&self, r: Result<(), IndexError>) -> Result<(), IndexError> {
        if r.is_err() {
            if let Some(flag) = &self.damage {
                flag.store(true, Ordering::Release);
            }
        }
        r
    }

    /// Appends one entry in memory; `sync` makes it durable.
    ///
    /// # Panics
    /// When `entry.len() != width` (a caller bug, not a disk condition).
    pub fn push(&mut self, entry: &[u8]) {
        assert_eq!(
            entry.len(),
            self.width as usize,
            "FixedIndex entry must be exactly `width` bytes"
        );
        let crc = entry_crc(self.len(), entry);
        self.tail.extend_from_slice(entry);
        self.tail.extend_from_slice(&crc.to_le_bytes());
    }

    /// Keeps the first `len` entries. Shrinking into the durable part rewrites
    /// the file length (after dropping the map), with no fdatasync: after a crash the
    /// file may be found longer again, holding entries that were once valid at their
    /// positions, which the caller already treats as it treats any index ahead of its
    /// source (the engine checks entries against its checkpoint and log, and cuts or
    /// rebuilds). The next synced write makes the new length durable with its entries.
    pub fn truncate(&mut self, len: u64) -> Result<(), IndexError> {
        if len > self.len() {
            return Err(IndexError::InvalidArgument {
                reason: format!(
                    "truncate to {len} entries, but the index has only {}",
                    self.len()
                ),
            });
        }
        if self.poisoned {
            return Err(IndexError::Poisoned {
                path: self.path.clone(),
            });
        }
        let w = self.stride() as u64;
        self.generation += 1;
        if len >= self.durable {
            self.tail.truncate(((len - self.durable) * w) as usize);
            return Ok(());
        }
        self.tail.clear();
        // Drop the map before the file shrinks under it.
        self.map = None;
        let whole = FIXED_HEADER_BYTES + len * w;
        let file = self
            .file
            .as_ref()
            .expect("durable entries exist only with a file");
        let result = file
            .set_len(whole)
            .map_err(|e| IndexError::io(&self.path, "ftruncate", e));
        if let Err(e) = result {
            self.poisoned = true;
            return Err(e);
        }
        self.durable = len;
        self.map = fsutil::map_prefix(file, &self.path, if len == 0 { 0 } else { whole })?;
        Ok(())
    }

    /// Writes the in-memory entries after the durable part, fdatasyncs, and maps
    /// the file again. After a failure the index refuses further writes
    /// ([`IndexError::Poisoned`]) until it is reopened.
    pub fn sync(&mut self) -> Result<(), IndexError> {
        let pending = self.begin_sync()?;
        self.finish_sync(pending.write())
    }

    /// Copies the entries pushed since the last sync out, with a handle to the file, for
    /// [`PendingSync::write`] to make durable without `&mut self`; then
    /// [`FixedIndex::finish_sync`]. Only one sync may be in flight (the caller serialises).
    pub fn begin_sync(&self) -> Result<PendingSync, IndexError> {
        if self.poisoned {
            return Err(IndexError::Poisoned {
                path: self.path.clone(),
            });
        }
        let Some(file) = &self.file else {
            return Err(IndexError::InvalidArgument {
                reason: format!(
                    "{} was read by a reader beside its writer: it is never written",
                    self.path.display()
                ),
            });
        };
        Ok(PendingSync {
            file: Arc::clone(file),
            path: self.path.clone(),
            at: FIXED_HEADER_BYTES + self.durable * self.stride() as u64,
            bytes: self.tail.clone(),
            synced: SyncedEntries {
                from: self.durable,
                to: self.len(),
                generation: self.generation,
            },
        })
    }

    /// Takes the outcome of [`PendingSync::write`]: on success the synced entries join the
    /// mapped, durable part (entries pushed meanwhile stay in memory); on failure the index
    /// refuses further writes ([`IndexError::Poisoned`]) until it is reopened, as for `sync`.
    /// A sync begun before a `truncate`, or not from the current durable length, is refused
    /// (`InvalidArgument`) and changes nothing: its bytes may no longer be this index's.
    pub fn finish_sync(
        &mut self,
        written: Result<SyncedEntries, IndexError>,
    ) -> Result<(), IndexError> {
        let done = match written {
            Ok(done) => done,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };
        if self.poisoned {
            return Err(IndexError::Poisoned {
                path: self.path.clone(),
            });
        }
        if done.generation != self.generation || done.from != self.durable || done.to > self.len() {
            return Err(IndexError::InvalidArgument {
                reason: format!(
                    "a sync of entries {}..{} of {} was begun before the index changed \
                     (durable {}, length {}); sync again",
                    done.from,
                    done.to,
                    self.path.display(),
                    self.durable,
                    self.len()
                ),
            });
        }
        if done.to == self.durable {
            return Ok(());
        }
        let w = self.stride() as u64;
        let whole = FIXED_HEADER_BYTES + done.to * w;
        let Some(file) = &self.file else {
            return Err(IndexError::InvalidArgument {
                reason: format!("{} is never written", self.path.display()),
            });
        };
        let map = match fsutil::map_prefix(file, &self.path, whole) {
            Ok(m) => m,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };
        self.map = map;
        self.tail.drain(..((done.to - done.from) * w) as usize);
        self.durable = done.to;
        Ok(())
    }

    /// First index `i` in `[0, len)` for which `pred(entry)` is false, given that
    /// the entries are partitioned by `pred` (all true, then all false). Each entry looked
    /// at is checked as [`FixedIndex::get`] checks it.
    pub fn partition_point(&self, mut pred: impl FnMut(&[u8]) -> bool) -> Result<u64, IndexError> {
        let len = self.len();
        // A point past the last entry (a read at the head of a Session, the usual case) takes
        // one probe, not a search touching a page of the map per step.
        if len == 0 || pred(self.get(len - 1)?.expect("len - 1 < len")) {
            return Ok(len);
        }
        let (mut lo, mut hi) = (0u64, len - 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.get(mid)?.expect("mid < len")) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
}

/// Checks entry `i`'s stored checksum (`stored`, 4 bytes) against the entry.
fn check_entry(
    path: &Path,
    i: u64,
    entry: &[u8],
    stored: &[u8],
    width: u32,
) -> Result<(), IndexError> {
    let stored = le_u32(stored);
    let got = entry_crc(i, entry);
    if stored != got {
        return Err(IndexError::ChecksumMismatch {
            path: path.to_path_buf(),
            offset: FIXED_HEADER_BYTES + i * u64::from(width + FIXED_ENTRY_CRC_BYTES),
            expected: stored,
            got,
        });
    }
    Ok(())
}

/// A new index file at `path` holding only the header: made in place where no file is (one
/// create and one write; a crash half way leaves a header `open` refuses), or replacing the
/// file there by a rename. Nothing is synced (see [`FixedIndex::create`]).
fn create_file(path: &Path, tag: [u8; 4], width: u32) -> Result<File, IndexError> {
    let header = encode_header(tag, width);
    let fresh = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path);
    match fresh {
        Ok(f) => {
            f.write_all_at(&header, 0)
                .map_err(|e| IndexError::io(path, "write header", e))?;
            Ok(f)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fsutil::write_replace_unsynced(path, &[&header])?;
            open_rw(path)
        }
        Err(e) => Err(IndexError::io(path, "create", e)),
    }
}

fn open_rw(path: &Path) -> Result<File, IndexError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| IndexError::io(path, "open", e))
}

#[cfg(test)]
mod tests;
