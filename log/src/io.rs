//! The file I/O the log does, behind a trait so tests can inject faults (short writes, failed
//! fdatasync, ENOSPC, EIO). Not part of the stable API.

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// One open file.
#[allow(clippy::len_without_is_empty)] // a file length, not a collection
pub trait IoFile: Send + Sync + fmt::Debug {
    /// `pread`: may return fewer bytes than asked for.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// `pwrite`: may write fewer bytes than given.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// `fdatasync`.
    fn sync_data(&self) -> io::Result<()>;
    /// Current length.
    fn len(&self) -> io::Result<u64>;
    /// `ftruncate`, keeping the file's modification time.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// A read-only map of the whole file (sealed segments only, which are never modified).
    fn map(&self) -> io::Result<memmap2::Mmap>;
    /// A read-only map of the first `len` bytes of the file's range, which may run past the
    /// file's current end (the newest segment grows under it). The log reads such a map only
    /// below the file's length and only bytes it published, which are never rewritten.
    /// `Ok(None)` (the default) means no map: reads go through [`IoFile::read_at`].
    fn map_ahead(&self, len: u64) -> io::Result<Option<memmap2::Mmap>> {
        let _ = len;
        Ok(None)
    }
}

/// Directory-level operations.
pub trait FileSystem: Send + Sync + fmt::Debug {
    /// Creates a new file for reading and writing; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn IoFile>>;
    /// Opens an existing file for reading and writing.
    fn open_rw(&self, path: &Path) -> io::Result<Arc<dyn IoFile>>;
    /// Opens an existing file read only.
    fn open_ro(&self, path: &Path) -> io::Result<Arc<dyn IoFile>>;
    /// `rename(2)`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// `unlink(2)`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// `fsync` of a directory.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Names in a directory (names that are not UTF-8 are skipped: the log never writes them).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// `mkdir -p`.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// `mkdir`: `AlreadyExists` when the name is taken, `NotFound` when the parent is missing.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates an empty file without opening it (`mknod`: no descriptor is taken, so it works
    /// at the process's descriptor limit); `AlreadyExists` when the name is taken.
    fn create_empty(&self, path: &Path) -> io::Result<()>;
}

/// Writes all of `buf` at `offset`, continuing after short writes.
pub(crate) fn write_all_at(f: &dyn IoFile, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match f.write_at(buf, offset) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf` from `offset`; an early end of file is `UnexpectedEof`.
pub(crate) fn read_exact_at(f: &dyn IoFile, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match f.read_at(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file ends early",
                ))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile(File);

impl IoFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        // A length change (a zero region made or given back, a torn tail cut) is no record
        // written: the file keeps the modification time of its last write, which a reader
        // beside the writer takes for the log's last activity.
        let modified = self.0.metadata().and_then(|m| m.modified()).ok();
        self.0.set_len(len)?;
        if let Some(t) = modified {
            let _ = self.0.set_modified(t);
        }
        Ok(())
    }
    fn map(&self) -> io::Result<memmap2::Mmap> {
        // SAFETY: the log maps only sealed segments, which nothing modifies or truncates while
        // they exist (the rule in docs/format.md); the map is read only.
        unsafe { memmap2::Mmap::map(&self.0) }
    }
    fn map_ahead(&self, len: u64) -> io::Result<Option<memmap2::Mmap>> {
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: read only; the log touches the map only below the file's length (looked up
        // after the bytes were written) and only bytes it published, which it never rewrites or
        // truncates while the file is open (a roll cuts only the zero region past them).
        unsafe { memmap2::MmapOptions::new().len(len).map(&self.0) }.map(Some)
    }
}

impl FileSystem for RealFs {
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(RealFile(f)))
    }
    fn open_rw(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(RealFile(f)))
    }
    fn open_ro(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        Ok(Arc::new(RealFile(File::open(path)?)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        // `getdents64` into a buffer on the stack: `std::fs::read_dir` allocates 32 KiB per
        // listing, and every open lists the log's folder.
        use rustix::fs::{Mode, OFlags, RawDir};
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut entries = RawDir::new(&fd, &mut buf);
        let mut names = Vec::new();
        while let Some(e) = entries.next() {
            let e = e?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir(dir)
    }
    fn create_empty(&self, path: &Path) -> io::Result<()> {
        use rustix::fs::{mknodat, FileType, Mode, CWD};
        mknodat(
            CWD,
            path,
            FileType::RegularFile,
            Mode::from_raw_mode(0o644),
            0,
        )
        .map_err(io::Error::from)
    }
}

/// The operations a fault can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `pwrite`
    Write,
    /// `fdatasync`
    Sync,
    /// `pread`
    Read,
    /// `rename`
    Rename,
    /// `fsync` of a directory
    SyncDir,
    /// `unlink`
    Remove,
    /// creating a file
    Create,
    /// `ftruncate` (growing or shrinking a file)
    SetLen,
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected {
    /// Writes only the first half of the bytes, then fails with ENOSPC (a torn write).
    ShortWrite,
    /// Fails with ENOSPC, writing nothing.
    NoSpace,
    /// Fails with EIO.
    Eio,
}

#[derive(Debug)]
struct Rule {
    op: Op,
    path_contains: Option<String>,
    skip: u64,
    what: Injected,
}

#[derive(Debug, Default)]
struct FaultState {
    armed: Vec<Rule>,
    counts: HashMap<Op, u64>,
}

/// Controls the faults of a [`FaultyFs`] (clones share state).
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<FaultState>>);

impl Faults {
    /// Makes the `(skip + 1)`-th call of `op` from now fail once with `what`.
    pub fn arm(&self, op: Op, skip: u64, what: Injected) {
        self.push(op, None, skip, what);
    }
    /// Like [`Faults::arm`], counting only calls on paths that contain `path_contains`.
    pub fn arm_on(&self, op: Op, path_contains: &str, skip: u64, what: Injected) {
        self.push(op, Some(path_contains.to_string()), skip, what);
    }
    fn push(&self, op: Op, path_contains: Option<String>, skip: u64, what: Injected) {
        self.lock().armed.push(Rule {
            op,
            path_contains,
            skip,
            what,
        });
    }
    /// Removes every armed fault.
    pub fn clear(&self) {
        self.lock().armed.clear();
    }
    /// Whether every armed fault has fired.
    pub fn all_fired(&self) -> bool {
        self.lock().armed.is_empty()
    }
    /// How many calls of `op` were made so far.
    pub fn count(&self, op: Op) -> u64 {
        self.lock().counts.get(&op).copied().unwrap_or(0)
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn hit(&self, op: Op, path: &Path) -> Option<Injected> {
        let mut s = self.lock();
        *s.counts.entry(op).or_insert(0) += 1;
        let path = path.to_string_lossy();
        let i = s.armed.iter().position(|r| {
            r.op == op && r.path_contains.as_deref().is_none_or(|c| path.contains(c))
        })?;
        if s.armed[i].skip == 0 {
            Some(s.armed.remove(i).what)
        } else {
            s.armed[i].skip -= 1;
            None
        }
    }
}

fn injected_error(what: Injected) -> io::Error {
    match what {
        Injected::ShortWrite | Injected::NoSpace => io::Error::from_raw_os_error(28), // ENOSPC
        Injected::Eio => io::Error::from_raw_os_error(5),                             // EIO
    }
}

/// The real file system with faults injected where [`Faults`] says.
#[derive(Debug, Clone, Default)]
pub struct FaultyFs {
    faults: Faults,
}

impl FaultyFs {
    /// A faulty file system and the handle that arms its faults.
    pub fn new() -> (FaultyFs, Faults) {
        let faults = Faults::default();
        (
            FaultyFs {
                faults: faults.clone(),
            },
            faults,
        )
    }
    fn check(&self, op: Op, path: &Path) -> io::Result<()> {
        match self.faults.hit(op, path) {
            Some(what) => Err(injected_error(what)),
            None => Ok(()),
        }
    }
    fn wrap(&self, f: Arc<dyn IoFile>, path: &Path) -> Arc<dyn IoFile> {
        Arc::new(FaultyFile {
            inner: f,
            path: path.to_path_buf(),
            faults: self.faults.clone(),
        })
    }
}

#[derive(Debug)]
struct FaultyFile {
    inner: Arc<dyn IoFile>,
    path: std::path::PathBuf,
    faults: Faults,
}

impl IoFile for FaultyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(what) = self.faults.hit(Op::Read, &self.path) {
            return Err(injected_error(what));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        match self.faults.hit(Op::Write, &self.path) {
            Some(Injected::ShortWrite) => {
                write_all_at(&*self.inner, &buf[..buf.len() / 2], offset)?;
                Err(injected_error(Injected::ShortWrite))
            }
            Some(what) => Err(injected_error(what)),
            None => self.inner.write_at(buf, offset),
        }
    }
    fn sync_data(&self) -> io::Result<()> {
        if let Some(what) = self.faults.hit(Op::Sync, &self.path) {
            return Err(injected_error(what));
        }
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        if let Some(what) = self.faults.hit(Op::SetLen, &self.path) {
            return Err(injected_error(what));
        }
        self.inner.set_len(len)
    }
    fn map(&self) -> io::Result<memmap2::Mmap> {
        self.inner.map()
    }
    fn map_ahead(&self, _len: u64) -> io::Result<Option<memmap2::Mmap>> {
        // No map: every read of the newest segment goes through `read_at`, where faults are.
        Ok(None)
    }
}

impl FileSystem for FaultyFs {
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        self.check(Op::Create, path)?;
        Ok(self.wrap(RealFs.create_new(path)?, path))
    }
    fn open_rw(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        Ok(self.wrap(RealFs.open_rw(path)?, path))
    }
    fn open_ro(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        Ok(self.wrap(RealFs.open_ro(path)?, path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(Op::Rename, from)?;
        RealFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(Op::Remove, path)?;
        RealFs.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check(Op::SyncDir, dir)?;
        RealFs.sync_dir(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        RealFs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        RealFs.create_dir_all(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        RealFs.create_dir(dir)
    }
    fn create_empty(&self, path: &Path) -> io::Result<()> {
        self.check(Op::Create, path)?;
        RealFs.create_empty(path)
    }
}

/// Maps the whole file at `path` read-only (`None` when it is empty), taking no descriptor
/// beyond the call. Only for files that are replaced whole by a rename and never changed or
/// truncated in place (checkpoints and the like): the map then keeps the bytes it was made
/// over, even after the name points at a newer file.
pub fn map_replaced_file(path: &Path) -> io::Result<Option<memmap2::Mmap>> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::FileTooLarge))?;
    // SAFETY: read only; the caller's files are never written in place (see above), so the
    // mapped bytes do not change under the map. (The length is given: one `fstat` less.)
    unsafe { memmap2::MmapOptions::new().len(len).map(&file) }.map(Some)
}
