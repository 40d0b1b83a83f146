//! Reading one regular file: bytes, digest, and a version bound to the file's identity.
//!
//! The leaf is first opened `O_PATH` and `fstat`ed, so a FIFO, socket, device or
//! directory is refused without ever being opened for reading. The file is then
//! opened `O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW` through the same resolver,
//! checked to be the same inode, and read in steps; each step is hashed and checked
//! for UTF-8 while it is still in cache. After the last byte the handle is `fstat`ed
//! again and the path resolved once more: if size, times or inode moved, or the path
//! now names another inode, the read starts over, at most [`READ_ATTEMPTS_MAX`] times.

use std::mem::MaybeUninit;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self, FileType, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::error::FsError;
use crate::hex;
use crate::identity::FileStamp;
use crate::path::{HiddenSet, RelPath};
use crate::resolve::{open_beneath, ResolveFailure, ResolverMode};

/// Default largest file `read` returns, in bytes; larger files are refused with
/// [`FsError::TooLarge`] (kind `Unsupported`). Configurable per workspace.
pub const READ_FILE_BYTES_MAX: u64 = 64 << 20;
/// Largest piece yielded by [`Content::chunks`], in bytes.
pub const CHUNK_BYTES_MAX: usize = 32 << 10;
/// How many times a read restarts because the file moved while it was read.
pub const READ_ATTEMPTS_MAX: u32 = 3;
/// Bytes read (then hashed and validated) per `read` call, sized to stay in cache.
const READ_STEP_BYTES: usize = 256 << 10;
/// Size from which a file may be hashed on a second thread while reading goes on.
pub const READ_PIPELINE_BYTES_MIN: u64 = 4 << 20;

/// Whether large reads hash on a second thread ([`READ_PIPELINE_BYTES_MIN`] and up).
///
/// A second thread only pays when a core is idle: it costs about 20% more CPU in
/// total (the hashing thread reads the bytes from a colder cache), and on a busy
/// machine it measured slower than one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReadPipeline {
    /// Pipeline when the 1-minute load average leaves at least one core idle.
    #[default]
    Auto,
    /// Always pipeline large reads.
    Always,
    /// Never; every read stays on the calling thread.
    Never,
}

impl ReadPipeline {
    fn wanted(self, size: u64) -> bool {
        size >= READ_PIPELINE_BYTES_MIN
            && match self {
                ReadPipeline::Always => true,
                ReadPipeline::Never => false,
                ReadPipeline::Auto => idle_core_likely(),
            }
    }
}

/// True when `/proc/loadavg` says fewer runnable tasks than cores, less one.
fn idle_core_likely() -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Ok(text) = std::fs::read_to_string("/proc/loadavg") else {
        return false;
    };
    let load: f64 = text
        .split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .unwrap_or(f64::MAX);
    cores >= 2 && load + 1.0 <= cores as f64
}
/// Read steps that may wait for the hashing thread.
const PIPELINE_DEPTH: usize = 8;
/// Prefix and domain of version strings; a new scheme gets a new prefix.
const VERSION_PREFIX: &str = "v1:";
const VERSION_DOMAIN: &[u8] = b"logbook-fs file version 1\0";

/// What `read` found at a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// A regular file that is UTF-8 text or a supported image.
    Content(Content),
    /// Nothing exists at the path (or a component is not a directory).
    Absent,
    /// The file kept changing while it was read, or `expected_version` did not match.
    Changed,
    /// A regular file that is neither UTF-8 text nor a supported image.
    Binary,
    /// Not a regular file (directory, FIFO, socket, device), or a symbolic link at any
    /// component of the path; such things are never opened for reading.
    Unsupported,
}

/// The complete bytes of one file as they were at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    /// `v1:<hex>`: SHA-256 over size, content digest, device, inode and path bytes.
    pub version: String,
    /// Number of bytes.
    pub size: u64,
    /// `"text"`, or the image MIME type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
    pub content_type: String,
    /// `sha256:<hex>` of the bytes.
    pub digest: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl Content {
    /// The bytes as `(offset, piece)` pairs of at most [`CHUNK_BYTES_MAX`] bytes; for text,
    /// every piece ends on a UTF-8 character boundary. An empty file yields no pieces.
    pub fn chunks(&self) -> impl Iterator<Item = (u64, &[u8])> {
        Chunks {
            bytes: &self.bytes,
            at: 0,
            text: self.content_type == "text",
        }
    }
}

struct Chunks<'a> {
    bytes: &'a [u8],
    at: usize,
    text: bool,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = (u64, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.bytes[self.at..];
        if rest.is_empty() {
            return None;
        }
        let mut len = rest.len().min(CHUNK_BYTES_MAX);
        if self.text && len < rest.len() {
            // Back up to a byte that starts a character: at most 3 continuation bytes.
            while len > 0 && (rest[len] & 0xC0) == 0x80 {
                len -= 1;
            }
            debug_assert!(
                len > CHUNK_BYTES_MAX - 4,
                "valid UTF-8 has at most 3 continuation bytes"
            );
        }
        let piece = &rest[..len];
        let offset = self.at as u64;
        self.at += len;
        Some((offset, piece))
    }
}

/// Image MIME type from the file signature.
pub(crate) fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The version string for these bytes at this identity and path.
pub fn file_version(size: u64, digest: &[u8; 32], dev: u64, ino: u64, path: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(VERSION_DOMAIN);
    h.update(size.to_le_bytes());
    h.update(digest);
    h.update(dev.to_le_bytes());
    h.update(ino.to_le_bytes());
    h.update((path.len() as u64).to_le_bytes());
    h.update(path);
    format!("{VERSION_PREFIX}{}", hex::encode(&h.finalize()))
}

pub(crate) struct ReadContext<'a> {
    pub(crate) mode: ResolverMode,
    pub(crate) root: BorrowedFd<'a>,
    pub(crate) hidden: &'a HiddenSet,
    pub(crate) bytes_max: u64,
    pub(crate) pipeline: ReadPipeline,
}

enum Attempt {
    Done(ReadOutcome),
    Moved,
}

struct Loaded {
    bytes: Vec<u8>,
    digest: [u8; 32],
    utf8: bool,
    stamp: FileStamp,
}

pub(crate) fn read(
    cx: &ReadContext<'_>,
    path: &RelPath,
    expected_version: Option<&str>,
) -> Result<ReadOutcome, FsError> {
    if cx.hidden.hides(path) {
        return Err(FsError::Hidden {
            path: path.as_bytes().to_vec(),
        });
    }
    if path.is_root() {
        return Ok(ReadOutcome::Unsupported);
    }
    for _ in 0..READ_ATTEMPTS_MAX {
        match read_once(cx, path)? {
            Attempt::Moved => continue,
            Attempt::Done(ReadOutcome::Content(c)) => {
                if expected_version.is_some_and(|v| v != c.version) {
                    return Ok(ReadOutcome::Changed);
                }
                return Ok(ReadOutcome::Content(c));
            }
            Attempt::Done(other) => return Ok(other),
        }
    }
    Ok(ReadOutcome::Changed)
}

/// `Err(outcome)` for the failures that are outcomes rather than errors.
fn open(
    cx: &ReadContext<'_>,
    path: &RelPath,
    flags: OFlags,
) -> Result<Result<OwnedFd, ReadOutcome>, FsError> {
    match open_beneath(cx.mode, cx.root, path, flags) {
        Ok(fd) => Ok(Ok(fd)),
        Err(ResolveFailure::NotFound | ResolveFailure::NotDirectory) => {
            Ok(Err(ReadOutcome::Absent))
        }
        Err(ResolveFailure::Symlink) => Ok(Err(ReadOutcome::Unsupported)),
        // A socket cannot be opened at all (ENXIO): it is not a regular file.
        Err(ResolveFailure::Errno(Errno::NXIO)) => Ok(Err(ReadOutcome::Unsupported)),
        Err(ResolveFailure::Errno(e)) => Err(FsError::from_errno(path.as_bytes(), "open file", e)),
    }
}

fn stamp_of(path: &RelPath, fd: BorrowedFd<'_>) -> Result<FileStamp, FsError> {
    fs::fstat(fd)
        .map(|st| FileStamp::of(&st))
        .map_err(|e| FsError::from_errno(path.as_bytes(), "inspect file", e))
}

fn read_once(cx: &ReadContext<'_>, path: &RelPath) -> Result<Attempt, FsError> {
    let probe = match open(cx, path, OFlags::PATH)? {
        Ok(fd) => fd,
        Err(outcome) => return Ok(Attempt::Done(outcome)),
    };
    let first = stamp_of(path, probe.as_fd())?;
    if first.file_type() != FileType::RegularFile {
        return Ok(Attempt::Done(ReadOutcome::Unsupported));
    }
    if first.size > cx.bytes_max {
        return Err(FsError::TooLarge {
            path: path.as_bytes().to_vec(),
            size: first.size,
            limit: cx.bytes_max,
        });
    }
    let fd = match open(cx, path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)? {
        Ok(fd) => fd,
        Err(_) => return Ok(Attempt::Moved),
    };
    let before = stamp_of(path, fd.as_fd())?;
    if (before.dev, before.ino) != (first.dev, first.ino)
        || before.file_type() != FileType::RegularFile
    {
        return Ok(Attempt::Moved);
    }
    let Some(loaded) = load(cx, path, fd.as_fd(), before)? else {
        return Ok(Attempt::Moved);
    };
    // The path must still name the inode that was read.
    let again = match open(cx, path, OFlags::PATH)? {
        Ok(fd) => stamp_of(path, fd.as_fd())?,
        Err(_) => return Ok(Attempt::Moved),
    };
    if again != loaded.stamp {
        return Ok(Attempt::Moved);
    }
    Ok(Attempt::Done(outcome(path, loaded)))
}

fn outcome(path: &RelPath, loaded: Loaded) -> ReadOutcome {
    let content_type = match image_type(&loaded.bytes) {
        Some(mime) => mime,
        None if loaded.utf8 => "text",
        None => return ReadOutcome::Binary,
    };
    let size = loaded.bytes.len() as u64;
    let s = loaded.stamp;
    ReadOutcome::Content(Content {
        version: file_version(size, &loaded.digest, s.dev, s.ino, path.as_bytes()),
        size,
        content_type: content_type.to_string(),
        digest: format!("sha256:{}", hex::encode(&loaded.digest)),
        bytes: loaded.bytes,
    })
}

/// Reads the whole file; `None` when it moved while it was read.
///
/// At most `size + 1` bytes are read: one byte more than `fstat` promised means the
/// file grew, which is a move like any other.
fn load(
    cx: &ReadContext<'_>,
    path: &RelPath,
    fd: BorrowedFd<'_>,
    before: FileStamp,
) -> Result<Option<Loaded>, FsError> {
    let expected = usize::try_from(before.size).map_err(|_| FsError::TooLarge {
        path: path.as_bytes().to_vec(),
        size: before.size,
        limit: cx.bytes_max,
    })?;
    let mut bytes: Vec<u8> = Vec::with_capacity(expected.saturating_add(1));
    let spare = bytes.spare_capacity_mut();
    if before.size >= READ_PIPELINE_BYTES_MIN {
        advise_huge_pages(spare);
    }
    let filled = if cx.pipeline.wanted(before.size) {
        fill_pipelined(fd, spare)
    } else {
        let mut hasher = Sha256::new();
        let mut utf8 = Utf8Stream::default();
        fill(fd, spare, |piece| {
            hasher.update(piece);
            utf8.feed(piece);
        })
        .map(|n| (n, hasher.finalize().into(), utf8.finish()))
    };
    let (n, digest, utf8) = match filled {
        Ok(done) => done,
        Err(Errno::INTR) => return Ok(None),
        Err(e) => return Err(FsError::from_errno(path.as_bytes(), "read file", e)),
    };
    // SAFETY: `fill` reports how many bytes from the start of the spare capacity were
    // written by `read`, contiguously and in order.
    unsafe { bytes.set_len(n) };
    let after = stamp_of(path, fd)?;
    if after != before || bytes.len() as u64 != after.size {
        return Ok(None);
    }
    Ok(Some(Loaded {
        bytes,
        digest,
        utf8,
        stamp: after,
    }))
}

/// Reads into `buf` from its start until it is full or the file ends, handing every
/// piece, in order, to `sink`; returns the number of bytes read. Pieces borrow `buf`
/// for its whole lifetime so a pipelined sink may keep them.
fn fill<'a>(
    fd: BorrowedFd<'_>,
    buf: &'a mut [MaybeUninit<u8>],
    mut sink: impl FnMut(&'a [u8]),
) -> Result<usize, Errno> {
    let mut total = 0usize;
    for step in buf.chunks_mut(READ_STEP_BYTES) {
        let mut rest: &'a mut [MaybeUninit<u8>] = step;
        while !rest.is_empty() {
            // The slice is handed over whole so the filled part keeps lifetime 'a; an
            // EINTR therefore ends this attempt (the caller starts the read over).
            let (init, uninit) = rustix::io::read(fd, rest)?;
            if init.is_empty() {
                return Ok(total);
            }
            total += init.len();
            sink(init);
            rest = uninit;
        }
    }
    Ok(total)
}

/// Asks for transparent huge pages over the whole pages of a large read's fresh
/// buffer (`MADV_HUGEPAGE`): one page fault per 2 MiB instead of one per 4 KiB as
/// `read` first writes each page, and fewer TLB misses for the copy and the hash. The
/// page faults of a 4 KiB-paged buffer were a third of a large read's CPU time. Best
/// effort: without THP the pages fault as before.
fn advise_huge_pages(buf: &mut [MaybeUninit<u8>]) {
    const PAGE: usize = 4096;
    let start = buf.as_mut_ptr() as usize;
    let first = start.next_multiple_of(PAGE);
    let end = (start + buf.len()) & !(PAGE - 1);
    if end <= first {
        return;
    }
    // SAFETY: [first, end) lies inside `buf`, memory this function borrows mutably;
    // MADV_HUGEPAGE only changes how its pages are backed, never their contents or
    // the mapping's extent.
    let _ = unsafe {
        rustix::mm::madvise(
            first as *mut std::ffi::c_void,
            end - first,
            rustix::mm::Advice::LinuxHugepage,
        )
    };
}

/// [`fill`] with SHA-256 and UTF-8 checking on a second thread: reading one step
/// overlaps checking the previous one.
fn fill_pipelined(
    fd: BorrowedFd<'_>,
    buf: &mut [MaybeUninit<u8>],
) -> Result<(usize, [u8; 32], bool), Errno> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<&[u8]>(PIPELINE_DEPTH);
        let checker = scope.spawn(move || {
            let mut h = Sha256::new();
            let mut utf8 = Utf8Stream::default();
            for piece in rx {
                h.update(piece);
                utf8.feed(piece);
            }
            (<[u8; 32]>::from(h.finalize()), utf8.finish())
        });
        let read = fill(fd, buf, |piece| {
            // The receiver lives until `tx` is dropped below, so a send cannot fail.
            let _ = tx.send(piece);
        });
        drop(tx);
        let (digest, utf8) = checker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        read.map(|n| (n, digest, utf8))
    })
}

/// UTF-8 validation over a stream of pieces; a character may straddle two pieces.
#[derive(Default)]
struct Utf8Stream {
    /// The incomplete (but so far valid) character at the end of the last piece.
    carry: [u8; 4],
    carry_len: usize,
    broken: bool,
}

/// Length of the character a valid leading byte starts.
fn utf8_char_len(lead: u8) -> usize {
    match lead {
        0xF0..=0xF7 => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

impl Utf8Stream {
    fn feed(&mut self, mut piece: &[u8]) {
        if self.broken {
            return;
        }
        if self.carry_len > 0 {
            let len = utf8_char_len(self.carry[0]);
            let take = (len - self.carry_len).min(piece.len());
            self.carry[self.carry_len..self.carry_len + take].copy_from_slice(&piece[..take]);
            self.carry_len += take;
            piece = &piece[take..];
            if self.carry_len < len {
                return;
            }
            if std::str::from_utf8(&self.carry[..len]).is_err() {
                self.broken = true;
                return;
            }
            self.carry_len = 0;
        }
        match std::str::from_utf8(piece) {
            Ok(_) => {}
            // An incomplete character at the end may be completed by the next piece.
            Err(e) if e.error_len().is_none() => {
                let tail = &piece[e.valid_up_to()..];
                self.carry[..tail.len()].copy_from_slice(tail);
                self.carry_len = tail.len();
            }
            Err(_) => self.broken = true,
        }
    }

    fn finish(self) -> bool {
        !self.broken && self.carry_len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(bytes: Vec<u8>, content_type: &str) -> Content {
        Content {
            version: String::new(),
            size: bytes.len() as u64,
            content_type: content_type.into(),
            digest: String::new(),
            bytes,
        }
    }

    #[test]
    fn text_chunks_end_on_boundaries() {
        let mut text = "a".repeat(CHUNK_BYTES_MAX - 2).into_bytes();
        text.extend_from_slice("😀".as_bytes()); // straddles the 32 KiB mark
        text.extend_from_slice("é".repeat(40_000).as_bytes());
        let c = content(text.clone(), "text");
        let mut next = 0u64;
        let mut joined = Vec::new();
        for (offset, piece) in c.chunks() {
            assert_eq!(offset, next);
            assert!(piece.len() <= CHUNK_BYTES_MAX && !piece.is_empty());
            std::str::from_utf8(piece).expect("each text chunk is valid UTF-8 on its own");
            next += piece.len() as u64;
            joined.extend_from_slice(piece);
        }
        assert_eq!(joined, text);
        let first = c.chunks().next().expect("non-empty").1;
        assert_eq!(
            first.len(),
            CHUNK_BYTES_MAX - 2,
            "the emoji moves whole into the second chunk"
        );
    }

    #[test]
    fn image_chunks_are_full_size() {
        let c = content(vec![0xFF; CHUNK_BYTES_MAX * 2 + 5], "image/jpeg");
        let lens: Vec<usize> = c.chunks().map(|(_, p)| p.len()).collect();
        assert_eq!(lens, [CHUNK_BYTES_MAX, CHUNK_BYTES_MAX, 5]);
        assert_eq!(content(Vec::new(), "text").chunks().count(), 0);
    }

    #[test]
    fn signatures() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(image_type(&[0xFF, 0xD8, 0xFF, 0xE0]), Some("image/jpeg"));
        assert_eq!(image_type(b"GIF89a.."), Some("image/gif"));
        assert_eq!(image_type(b"RIFF\x10\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_type(b"RIFF\x10\0\0\0WAVE"), None);
        assert_eq!(image_type(b""), None);
    }

    #[test]
    fn utf8_stream_agrees_with_std_at_every_split() {
        let samples: [&[u8]; 8] = [
            "x😀y".as_bytes(),
            "ж€😀é".as_bytes(),
            b"ok\xffok",
            b"\xe2\x82",
            b"\xf0\x9f\x98",
            b"\xed\xa0\x80", // a surrogate: invalid
            b"\xc0\xaf",     // overlong: invalid
            b"",
        ];
        for s in samples {
            let want = std::str::from_utf8(s).is_ok();
            for a in 0..=s.len() {
                for b in a..=s.len() {
                    let mut u = Utf8Stream::default();
                    u.feed(&s[..a]);
                    u.feed(&s[a..b]);
                    u.feed(&s[b..]);
                    assert_eq!(
                        u.finish(),
                        want,
                        "{:?} split {a} {b}",
                        s.escape_ascii().to_string()
                    );
                }
            }
        }
    }

    #[test]
    fn version_binds_every_part() {
        let d = [7u8; 32];
        let base = file_version(1, &d, 2, 3, b"a");
        assert!(base.starts_with("v1:") && base.len() == 3 + 64);
        assert_ne!(base, file_version(2, &d, 2, 3, b"a"));
        assert_ne!(base, file_version(1, &[8u8; 32], 2, 3, b"a"));
        assert_ne!(base, file_version(1, &d, 9, 3, b"a"));
        assert_ne!(base, file_version(1, &d, 2, 9, b"a"));
        assert_ne!(base, file_version(1, &d, 2, 3, b"b"));
    }
}
