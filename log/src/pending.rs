//! The newest segment of a log opened after a sealed one, made on its first write.
//!
//! A log whose newest segment is sealed (closed so, or rolled by a crash) starts a new one for
//! its appends. Making that file at open would make every read a write: a full or read-only
//! disk would fail a read of history, and a search over many sealed Sessions would leave an
//! empty file in each. [`PendingSegment`] stands in for the file instead: it reads as the
//! header alone until the writer first writes, truncates or syncs past it, and only then
//! creates the file (header first, no sync: the first commit syncs the name, as for any new
//! segment).

use crate::format::{encode_header, ACTIVE_FORMAT, HEADER_BYTES};
use crate::io::{write_all_at, FileSystem, IoFile};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// An active segment file that does not exist yet (see the module doc).
pub(crate) struct PendingSegment {
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    header: [u8; HEADER_BYTES as usize],
    file: OnceLock<Arc<dyn IoFile>>,
    /// Held while the file is being made, so that two writers cannot both try.
    making: Mutex<()>,
}

impl fmt::Debug for PendingSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingSegment")
            .field("path", &self.path)
            .field("made", &self.file.get().is_some())
            .finish()
    }
}

impl PendingSegment {
    /// Segment `segment` at `path`, not made yet.
    pub(crate) fn new(fs: Arc<dyn FileSystem>, path: PathBuf, segment: u64) -> PendingSegment {
        PendingSegment {
            fs,
            path,
            header: encode_header(ACTIVE_FORMAT, segment),
            file: OnceLock::new(),
            making: Mutex::new(()),
        }
    }

    /// The file, made (with its header) if it is not yet.
    fn made(&self) -> io::Result<&Arc<dyn IoFile>> {
        if let Some(f) = self.file.get() {
            return Ok(f);
        }
        let _making = self
            .making
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(f) = self.file.get() {
            return Ok(f);
        }
        let f = self.fs.create_new(&self.path)?;
        if let Err(e) = write_all_at(&*f, &self.header, 0) {
            // Without its header the name is a torn create; leave no such file behind
            // (recovery would take it as one, but a read-only open of the Root could not).
            drop(f);
            let _ = self.fs.remove_file(&self.path);
            return Err(e);
        }
        Ok(self.file.get_or_init(|| f))
    }
}

impl IoFile for PendingSegment {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(f) = self.file.get() {
            return f.read_at(buf, offset);
        }
        let Some(rest) = usize::try_from(offset)
            .ok()
            .and_then(|o| self.header.get(o..))
        else {
            return Ok(0);
        };
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.made()?.write_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        // Nothing was written: there is nothing to make durable (the header of a file not
        // made yet is rewritten whole by the write that makes it).
        match self.file.get() {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }

    fn len(&self) -> io::Result<u64> {
        match self.file.get() {
            Some(f) => f.len(),
            None => Ok(HEADER_BYTES),
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        match self.file.get() {
            Some(f) => f.set_len(len),
            None if len == HEADER_BYTES => Ok(()),
            None => self.made()?.set_len(len),
        }
    }

    fn map(&self) -> io::Result<memmap2::Mmap> {
        // Sealed segments only are mapped whole; a read never makes the file.
        match self.file.get() {
            Some(f) => f.map(),
            None => Err(io::Error::other(format!(
                "{} is not made yet: no map",
                self.path.display()
            ))),
        }
    }

    fn map_ahead(&self, len: u64) -> io::Result<Option<memmap2::Mmap>> {
        match self.file.get() {
            Some(f) => f.map_ahead(len),
            None => Ok(None),
        }
    }
}
