//! Read-only handles: a log opened to be read while another process (or another handle of
//! this one) appends to it (docs/format.md, "Readers beside the writer").
//!
//! Such a handle never writes, truncates, seals, syncs or removes anything, and takes no lock
//! the writer takes. It trusts only whole batches: its end is the end of the last complete
//! batch it found, and [`Log::refresh`] moves it on as the writer publishes more, following
//! the writer from segment to segment. The bytes below that end are never rewritten by the
//! writer (a torn-tail cut removes only an incomplete batch, which a reader never accepts; a
//! seal writes a new file and removes the old name, whose inode the reader's open descriptor
//! keeps readable), so every read below it stays valid.

use super::*;

/// Opens of a read-only handle retried when a file it listed went away before it could open
/// it (the writer sealed a segment in between).
const OPEN_TRIES: u32 = 8;

/// An active segment's file and path.
type ActiveFile = (Arc<dyn IoFile>, PathBuf);

/// What a read-only handle follows: the newest segment it knows, and that segment's file
/// while it is active.
#[derive(Debug)]
pub(super) struct Follow {
    segment: u64,
    active: Option<ActiveFile>,
}

/// A file that went away between listing and opening: the writer sealed or replaced it.
fn vanished(e: &LogError) -> bool {
    matches!(e, LogError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// The end of the last complete batch of active segment `n` at or after `from` (a batch end
/// this handle already trusts, or the header's end), reading the file as it is now. A file
/// still shorter than its header, or whose header is not written yet (zeros), holds nothing
/// yet; a header that is someone else's is an error.
fn complete_end(f: &dyn IoFile, path: &Path, n: u64, from: u64) -> Result<u64, LogError> {
    let len = f.len().map_err(|e| LogError::io(path, "stat", e))?;
    if from == HEADER_BYTES {
        if len < HEADER_BYTES {
            return Ok(HEADER_BYTES);
        }
        let mut head = [0u8; HEADER_BYTES as usize];
        read_exact_at(f, &mut head, 0).map_err(|e| LogError::io(path, "read", e))?;
        if head.iter().all(|b| *b == 0) {
            return Ok(HEADER_BYTES);
        }
        check_header_versions(path, &head, ACTIVE_FORMAT, ACTIVE_VERSION_OLDEST, n)?;
    }
    if len <= from {
        return Ok(from);
    }
    let data = read_available(f, path, from, len)?;
    Ok(walk_at(n, &data, from).good_end)
}

/// Bytes `[from, to)` of `f`, or fewer when the file ends sooner: its writer may have given
/// back the zeros at its end since its length was looked at.
fn read_available(f: &dyn IoFile, path: &Path, from: u64, to: u64) -> Result<Vec<u8>, LogError> {
    let n = usize::try_from(to - from)
        .map_err(|_| LogError::corrupt(path, from, "segment larger than the address space"))?;
    let mut data = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match f.read_at(&mut data[got..], from + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LogError::io(path, "read", e)),
        }
    }
    data.truncate(got);
    Ok(data)
}

/// The logical length of active segment `n` that is no longer the newest: the writer synced it
/// whole and gave its zeros back before it made the next one, so every byte from `from` (a
/// batch end) on must be whole batches; anything else is damage.
fn final_end(f: &dyn IoFile, path: &Path, n: u64, from: u64) -> Result<u64, LogError> {
    let len = f.len().map_err(|e| LogError::io(path, "stat", e))?;
    let good = complete_end(f, path, n, from)?;
    if good != len.max(HEADER_BYTES) {
        return Err(LogError::corrupt(
            path,
            good,
            "a finished segment holds bytes after its last complete batch",
        ));
    }
    Ok(good)
}

impl Log {
    /// Opens a log to read it beside its writer (docs/format.md, "Readers beside the
    /// writer"): nothing is written, cut, sealed or synced, and the handle's end is the end of
    /// the last complete batch found. [`Log::refresh`] follows what the writer adds later.
    /// `mark` is a record Location known to start a complete batch run (as for
    /// [`Log::open_from`]): the newest segment is walked from it when it checks out. Appends
    /// through this handle fail; a sealed newest segment is read as it is (no new segment is
    /// started).
    pub fn open_read_only(
        dir: &Path,
        config: LogConfig,
        mark: Option<Location>,
    ) -> Result<Log, LogError> {
        check_config(&config)?;
        let fs = config.file_system();
        let mut tries = 0;
        loop {
            match Log::try_open_read_only(dir, &config, &fs, mark) {
                Err(e) if vanished(&e) && tries + 1 < OPEN_TRIES => tries += 1,
                r => return r,
            }
        }
    }

    fn try_open_read_only(
        dir: &Path,
        config: &LogConfig,
        fs: &Arc<dyn FileSystem>,
        mark: Option<Location>,
    ) -> Result<Log, LogError> {
        let names = match fs.list_dir(dir) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LogError::NoLog {
                    path: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(LogError::io(dir, "list directory", e)),
        };
        let mut found = std::collections::BTreeSet::new();
        for name in &names {
            if let Some(FileRole::Active(n) | FileRole::Sealed(n)) = parse_name(name) {
                found.insert(n);
            }
        }
        let (first, last) = dense_range(dir, found.iter().copied())?;
        let mut segments = BTreeMap::new();
        let mut end = HEADER_BYTES;
        let mut active = None;
        for &n in &found {
            let (entry, len, file) = open_segment(fs, dir, config, n, n == last, mark)?;
            segments.insert(n, entry);
            if n == last {
                end = len;
                active = file;
            }
        }
        let (file, path) = match &active {
            Some((f, p)) => (Arc::clone(f), p.clone()),
            None => {
                // The writer of a read-only handle is never used; it holds the newest file.
                let p = dir.join(sealed_name(last));
                let f = fs.open_ro(&p).map_err(|e| LogError::io(&p, "open", e))?;
                (f, p)
            }
        };
        let follow = Follow {
            segment: last,
            active,
        };
        Ok(Log::start_up(
            dir,
            config.clone(),
            Arc::clone(fs),
            segments,
            first,
            file,
            path,
            end,
            end,
            false,
            Vec::new(),
            false,
            Some(follow),
            None,
        ))
    }

    /// True for a handle made by [`Log::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.shared.follow.is_some()
    }

    /// For a read-only handle: takes in what the writer published since the last look (whole
    /// batches only), following it into newer segments. Returns whether the end moved. Costs
    /// a `stat` of the newest file and a look for the next segment's name when nothing
    /// changed. A handle that appends itself has nothing to refresh (`false`).
    pub fn refresh(&self) -> Result<bool, LogError> {
        let Some(follow) = &self.shared.follow else {
            return Ok(false);
        };
        let mut f = lock(follow);
        let before = self.end();
        loop {
            let n = f.segment;
            if let Some((file, path)) = &f.active {
                let end = self.end().offset;
                let good = complete_end(&**file, path, n, end)?;
                if good > end {
                    self.shared.publish(Location {
                        segment: n,
                        offset: good,
                    });
                }
            }
            let Some(next) = n.checked_add(1) else {
                break;
            };
            let fs = &self.shared.fs;
            let dir = &self.shared.dir;
            let exists = |name: String| match fs.open_ro(&dir.join(name)) {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(LogError::io(dir, "open", e)),
            };
            if !exists(active_name(next))? && !exists(sealed_name(next))? {
                break;
            }
            // The writer synced segment `n` whole before it made the next one: `n` is final.
            if let Some((file, path)) = &f.active {
                let end = self.end().offset;
                let len = final_end(&**file, path, n, end)?;
                if let Some(e) = write_lock(&self.shared.segments).get_mut(&n) {
                    e.len = Some(len);
                }
            }
            let config = &self.shared.config;
            let (entry, len, active) = open_segment(fs, dir, config, next, true, None)?;
            write_lock(&self.shared.segments).insert(next, entry);
            f.segment = next;
            f.active = active;
            self.shared.publish(Location {
                segment: next,
                offset: len,
            });
        }
        Ok(self.end() != before)
    }
}

/// Opens segment `n` of a read-only handle: its entry, its logical length as far as whole
/// batches go, and its file when it is active and `newest` (the one to follow). A sealed file
/// is preferred when both exist; an active file that went away meanwhile was sealed, and the
/// sealed one is opened instead.
fn open_segment(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    config: &LogConfig,
    n: u64,
    newest: bool,
    mark: Option<Location>,
) -> Result<(SegEntry, u64, Option<ActiveFile>), LogError> {
    let sealed_path = dir.join(sealed_name(n));
    let active_path = dir.join(active_name(n));
    let open_sealed = || -> Result<(SegEntry, u64, Option<_>), LogError> {
        let s = if newest {
            SealedSegment::open(Arc::clone(fs), &sealed_path, n)?
        } else {
            SealedSegment::lazy(Arc::clone(fs), &sealed_path, n)
        };
        let len = if newest { s.logical_len()? } else { 0 };
        let entry = SegEntry {
            seg: Seg::Sealed(Arc::new(s)),
            len: None,
        };
        Ok((entry, len, None))
    };
    match fs.open_ro(&sealed_path) {
        Ok(_) => return open_sealed(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(LogError::io(&sealed_path, "open", e)),
    }
    let file = match fs.open_ro(&active_path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return open_sealed(),
        Err(e) => return Err(LogError::io(&active_path, "open", e)),
    };
    let len = if newest {
        // The mark is trusted only when a complete batch follows it there (the frames'
        // checksums are bound to their segment and offset).
        let from_mark = mark
            .filter(|m| m.segment == n && m.offset > HEADER_BYTES)
            .and_then(|m| {
                let end = complete_end(&*file, &active_path, n, m.offset).ok()?;
                (end > m.offset).then_some(end)
            });
        match from_mark {
            Some(end) => end,
            None => complete_end(&*file, &active_path, n, HEADER_BYTES)?,
        }
    } else {
        final_end(&*file, &active_path, n, HEADER_BYTES)?
    };
    let entry = SegEntry {
        seg: Seg::active(&file, &active_path, config),
        len: (!newest).then_some(len),
    };
    Ok((entry, len, newest.then_some((file, active_path))))
}
