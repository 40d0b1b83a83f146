//! Restore: a new Root from a replica's manifest (docs/format.md, "Restore").

use crate::chain;
use crate::error::ReplicaError;
use crate::manifest::{
    sha256_hex, unhex, Chunk, Object, Sealed, SegmentState, State, RECORDS_START,
};
use crate::store::{Store, REQUESTS_IN_FLIGHT};
use bytes::Bytes;
use futures::StreamExt;
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// Magic of the Root header, checked before the restored Root is written.
const ROOT_MAGIC: &[u8; 8] = b"LBROOT\0\0";
/// Length of the Root header.
const ROOT_HEADER_BYTES: usize = 20;

/// What a restore made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreReport {
    /// The manifest restored.
    pub manifest: String,
    /// Its round.
    pub round: u64,
    /// When it was written (ms since the epoch): the Root is the source's as of then.
    pub created_ms: u64,
    /// Manifests read (the full one and the deltas after it).
    pub manifests: u64,
    /// Objects downloaded and checked.
    pub objects: u64,
    /// Bytes downloaded.
    pub bytes: u64,
    /// Sessions the restored Root holds (each verified).
    pub sessions: u64,
    /// Records verified.
    pub records: u64,
    /// Time spent reading manifests and downloading, checking and writing objects.
    pub download: Duration,
    /// Time spent opening the restored Root (derived files rebuilt) and verifying it.
    pub verify: Duration,
}

/// A file of the restored Root that objects are written into. The object that completes it
/// gives it its modification time and syncs it at once, on the worker that wrote it, so the
/// disk writes back one file while the next ones are downloaded and decompressed (rather than
/// every file in a row after the last download).
#[derive(Debug)]
struct Pending {
    file: PathBuf,
    /// The source's modification time (ms since the epoch), or 0 to leave it.
    mtime_ms: u64,
    /// Objects still to be written into the file.
    objects_left: AtomicUsize,
}

impl Pending {
    fn new(file: PathBuf, mtime_ms: u64, objects: usize) -> Arc<Pending> {
        Arc::new(Pending {
            file,
            mtime_ms,
            objects_left: AtomicUsize::new(objects),
        })
    }

    /// Records that one object was written through `f`; the last one sets the modification
    /// time and syncs the file (data and metadata, so its length and time too).
    fn object_written(&self, f: &File) -> Result<(), ReplicaError> {
        let before = self.objects_left.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(
            before > 0,
            "more objects written than planned: {:?}",
            self.file
        );
        if before == 1 {
            self.complete(f)?;
        }
        Ok(())
    }

    fn complete(&self, f: &File) -> Result<(), ReplicaError> {
        if self.mtime_ms > 0 {
            f.set_modified(UNIX_EPOCH + Duration::from_millis(self.mtime_ms))
                .map_err(|e| ReplicaError::local(&self.file, "set the modification time of", e))?;
        }
        f.sync_all()
            .map_err(|e| ReplicaError::local(&self.file, "sync", e))
    }
}

/// Where one downloaded object goes.
#[derive(Clone, Debug)]
enum Put {
    /// The object is the file, as it is.
    Whole(Arc<Pending>),
    /// The object is a chunk: decompress into the file at its `from`.
    Chunk(Arc<Pending>),
}

/// Restores the replica in `store` into `dest` (absent, or an empty directory): the newest
/// manifest, or the newest written at or before `at_ms`. Every object is checked before it is
/// written; the Root is then opened (derived files rebuilt) and verified. On failure nothing
/// is left in `dest`.
pub fn restore(
    store: &Store,
    dest: &Path,
    at_ms: Option<u64>,
) -> Result<RestoreReport, ReplicaError> {
    let started = Instant::now();
    check_dest(dest)?;
    let key = chain::find(store, at_ms)?.ok_or_else(|| ReplicaError::NoManifest {
        location: store.location().to_owned(),
        at_ms,
    })?;
    let created = prepare_dest(dest)?;
    let outcome = chain::read(store, &key).and_then(|(state, manifests)| {
        let newest = &manifests[manifests.len() - 1].manifest;
        let mut report = RestoreReport {
            manifest: key.clone(),
            round: newest.round,
            created_ms: newest.created_ms,
            manifests: manifests.len() as u64,
            objects: 0,
            bytes: 0,
            sessions: 0,
            records: 0,
            download: Duration::ZERO,
            verify: Duration::ZERO,
        };
        write_root(store, dest, &state, &mut report)?;
        report.download = started.elapsed();
        let opened = Instant::now();
        verify(dest, &mut report)?;
        report.verify = opened.elapsed();
        Ok(report)
    });
    if outcome.is_err() {
        clean(dest, created);
    }
    outcome
}

/// Checks that `dest` is absent or an empty directory (before any request is made).
fn check_dest(dest: &Path) -> Result<(), ReplicaError> {
    match std::fs::read_dir(dest) {
        Ok(mut entries) => match entries.next() {
            Some(_) => Err(ReplicaError::NotEmpty {
                path: dest.to_owned(),
            }),
            None => Ok(()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(ReplicaError::NotEmpty {
            path: dest.to_owned(),
        }),
        Err(e) => Err(ReplicaError::local(dest, "list", e)),
    }
}

/// Checks that `dest` is absent or an empty directory and makes it; returns whether it was
/// made here.
fn prepare_dest(dest: &Path) -> Result<bool, ReplicaError> {
    match std::fs::read_dir(dest) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ReplicaError::NotEmpty {
                    path: dest.to_owned(),
                });
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dest).map_err(|e| ReplicaError::local(dest, "create", e))?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(ReplicaError::NotEmpty {
            path: dest.to_owned(),
        }),
        Err(e) => Err(ReplicaError::local(dest, "list", e)),
    }
}

/// Removes what a failed restore wrote.
fn clean(dest: &Path, created: bool) {
    if created {
        let _ = std::fs::remove_dir_all(dest);
    } else if let Ok(entries) = std::fs::read_dir(dest) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}

fn mkdir(p: &Path) -> Result<(), ReplicaError> {
    std::fs::create_dir_all(p).map_err(|e| ReplicaError::local(p, "create", e))
}

/// Downloads every object of `state` into the Root layout under `dest`; the header last.
fn write_root(
    store: &Store,
    dest: &Path,
    state: &State,
    report: &mut RestoreReport,
) -> Result<(), ReplicaError> {
    let header = unhex(&state.root_header)
        .filter(|h| h.len() == ROOT_HEADER_BYTES && h.starts_with(ROOT_MAGIC))
        .ok_or_else(|| {
            ReplicaError::manifest(&report.manifest, "its rootHeader is not a Root header")
        })?;
    let mut dirs = Dirs::new(dest);
    for sub in ["sessions", "blobs", "tmp"] {
        dirs.make(&dest.join(sub))?;
    }
    let mut work: Vec<(Object, Put)> = Vec::new();
    for (sha, o) in &state.blobs {
        if *sha != o.sha256 {
            return Err(ReplicaError::manifest(
                &report.manifest,
                format!(
                    "blob {sha} is named with the SHA-256 of other bytes ({})",
                    o.key
                ),
            ));
        }
        let file = dest.join("blobs").join(&sha[..2]).join(&sha[2..]);
        work.push((o.clone(), Put::Whole(Pending::new(file, 0, 1))));
    }
    for (name, o) in &state.patches {
        let file = dest.join("patches").join(&name[..2]).join(&name[2..]);
        work.push((o.clone(), Put::Whole(Pending::new(file, 0, 1))));
    }
    for (path, segs) in &state.logs {
        let dir = dest.join(path);
        check_log_path(path, &report.manifest)?;
        dirs.make(&dir)?;
        for (n, s) in segs {
            plan_segment(&dir, *n, s, &mut work)?;
        }
    }
    for (o, put) in &work {
        if let Put::Whole(p) = put {
            if let Some(parent) = p.file.parent() {
                dirs.make(parent)?;
            }
        }
        debug_assert!(!o.key.is_empty());
    }
    let results: Vec<Result<u64, ReplicaError>> = store.block_on(async {
        futures::stream::iter(work.into_iter().map(|(o, put)| fetch(store, o, put)))
            .buffer_unordered(REQUESTS_IN_FLIGHT)
            .collect()
            .await
    });
    for r in results {
        report.bytes += r?;
        report.objects += 1;
    }
    // Every file is synced (by the object that completed it); now the directories that name
    // them, deepest first, and last the header that makes the directory a Root.
    dirs.sync()?;
    let lock = dest.join("lock");
    File::create(&lock).map_err(|e| ReplicaError::local(&lock, "create", e))?;
    let hp = dest.join("logbook.root");
    std::fs::write(&hp, &header).map_err(|e| ReplicaError::local(&hp, "write", e))?;
    File::open(&hp)
        .and_then(|f| f.sync_all())
        .map_err(|e| ReplicaError::local(&hp, "sync", e))?;
    sync_dir(dest)
}

/// The directories a restore made below its destination, to be synced once their entries
/// are all in place.
#[derive(Debug)]
struct Dirs {
    dest: PathBuf,
    made: BTreeSet<PathBuf>,
}

impl Dirs {
    fn new(dest: &Path) -> Dirs {
        Dirs {
            dest: dest.to_owned(),
            made: BTreeSet::new(),
        }
    }

    /// Makes `dir` (below the destination) and its missing parents, remembering each for
    /// [`Dirs::sync`].
    fn make(&mut self, dir: &Path) -> Result<(), ReplicaError> {
        debug_assert!(
            dir.starts_with(&self.dest),
            "{dir:?} is in the restored Root"
        );
        if self.made.contains(dir) {
            return Ok(());
        }
        mkdir(dir)?;
        let mut at = Some(dir);
        while let Some(d) = at.filter(|d| *d != self.dest && d.starts_with(&self.dest)) {
            if !self.made.insert(d.to_path_buf()) {
                break;
            }
            at = d.parent();
        }
        Ok(())
    }

    /// Syncs every directory made below the destination (not the destination itself),
    /// deepest first.
    fn sync(&self) -> Result<(), ReplicaError> {
        self.made.iter().rev().try_for_each(|d| sync_dir(d))
    }
}

/// Syncs a directory, so the entries made in it are durable.
fn sync_dir(dir: &Path) -> Result<(), ReplicaError> {
    use logbook_log::io::FileSystem as _;
    logbook_log::io::RealFs
        .sync_dir(dir)
        .map_err(|e| ReplicaError::local(dir, "sync", e))
}

/// A log path a manifest may name: `root-log`, or `sessions/<id>/log|diagnostics` with a
/// valid Session id (so no name can reach outside the restored Root).
fn check_log_path(path: &str, manifest: &str) -> Result<(), ReplicaError> {
    if path == "root-log" {
        return Ok(());
    }
    let ok = path
        .strip_prefix("sessions/")
        .and_then(|r| r.rsplit_once('/'))
        .is_some_and(|(id, sub)| {
            (sub == "log" || sub == "diagnostics")
                && logbook_engine::validate::validate_session_id(id).is_ok()
        });
    if ok {
        Ok(())
    } else {
        Err(ReplicaError::manifest(
            manifest,
            format!("names a log at {path:?}, which is not one"),
        ))
    }
}

/// Plans the download of one segment: its sealed file, or its active file from its chunks
/// (created now with the segment header at its full length).
fn plan_segment(
    dir: &Path,
    n: u64,
    s: &SegmentState,
    work: &mut Vec<(Object, Put)>,
) -> Result<(), ReplicaError> {
    if let Some(Sealed {
        key, bytes, sha256, ..
    }) = &s.sealed
    {
        let file = dir.join(format!("{n:020}.sealed"));
        let o = Object {
            key: key.clone(),
            bytes: *bytes,
            sha256: sha256.clone(),
        };
        work.push((o, Put::Whole(Pending::new(file, s.mtime_ms, 1))));
        return Ok(());
    }
    let file = dir.join(format!("{n:020}.active"));
    let f = File::create(&file).map_err(|e| ReplicaError::local(&file, "create", e))?;
    f.write_all_at(&logbook_log::active_segment_header(n), 0)
        .and_then(|()| f.set_len(s.end()))
        .map_err(|e| ReplicaError::local(&file, "write", e))?;
    let pending = Pending::new(file, s.mtime_ms, s.chunks.len());
    if s.chunks.is_empty() {
        // A segment of nothing but its header: complete already.
        pending.complete(&f)?;
    }
    let mut at = RECORDS_START;
    for Chunk {
        key,
        bytes,
        sha256,
        from,
        to,
    } in &s.chunks
    {
        debug_assert_eq!(*from, at, "the manifest's chunks were checked contiguous");
        at = *to;
        let o = Object {
            key: key.clone(),
            bytes: *bytes,
            sha256: sha256.clone(),
        };
        work.push((o, Put::Chunk(Arc::clone(&pending))));
    }
    Ok(())
}

/// Downloads object `o`, checks it and writes it as `put` says; returns its length.
async fn fetch(store: &Store, o: Object, put: Put) -> Result<u64, ReplicaError> {
    let data: Bytes = store.get_async(&o.key).await?;
    let len = data.len() as u64;
    store
        .handle()
        .spawn_blocking(move || check_and_write(&o, &data, &put))
        .await
        .map_err(|e| {
            ReplicaError::local(
                "download worker",
                "join",
                std::io::Error::other(e.to_string()),
            )
        })??;
    Ok(len)
}

fn check_and_write(o: &Object, data: &[u8], put: &Put) -> Result<(), ReplicaError> {
    if data.len() as u64 != o.bytes {
        return Err(ReplicaError::damaged(
            &o.key,
            format!(
                "it holds {} bytes, the manifest says {}",
                data.len(),
                o.bytes
            ),
        ));
    }
    let got = sha256_hex(data);
    if got != o.sha256 {
        return Err(ReplicaError::damaged(
            &o.key,
            format!("its SHA-256 is {got}, the manifest says {}", o.sha256),
        ));
    }
    match put {
        Put::Whole(p) => {
            let file = &p.file;
            let mut f = File::create(file).map_err(|e| ReplicaError::local(file, "create", e))?;
            std::io::Write::write_all(&mut f, data)
                .map_err(|e| ReplicaError::local(file, "write", e))?;
            p.object_written(&f)
        }
        Put::Chunk(p) => {
            let file = &p.file;
            let (from, to) = chunk_range(&o.key)?;
            let want = (to - from) as usize;
            let plain = zstd::bulk::decompress(data, want)
                .map_err(|e| ReplicaError::damaged(&o.key, format!("does not decompress: {e}")))?;
            if plain.len() != want {
                return Err(ReplicaError::damaged(
                    &o.key,
                    format!("decompresses to {} bytes, not {want}", plain.len()),
                ));
            }
            let f = OpenOptions::new()
                .write(true)
                .open(file)
                .map_err(|e| ReplicaError::local(file, "open", e))?;
            f.write_all_at(&plain, from)
                .map_err(|e| ReplicaError::local(file, "write", e))?;
            p.object_written(&f)
        }
    }
}

/// The range of a chunk, from its name.
fn chunk_range(key: &str) -> Result<(u64, u64), ReplicaError> {
    match crate::manifest::DataName::parse(key) {
        Some(crate::manifest::DataName::Chunk(_, _, from, to, _)) if from < to => Ok((from, to)),
        _ => Err(ReplicaError::damaged(key, "its name is not a chunk's")),
    }
}

/// Opens the restored Root as a writer (derived files rebuilt as needed) and verifies it.
fn verify(dest: &Path, report: &mut RestoreReport) -> Result<(), ReplicaError> {
    let root = logbook_engine::Root::open(dest)?;
    let v = root.verify()?;
    drop(root);
    let mut damage: Vec<String> = v
        .damage
        .iter()
        .map(|d| match &d.session_id {
            Some(id) => format!("Session {id}: {}", d.message),
            None => d.message.clone(),
        })
        .collect();
    damage.extend(
        v.cuts
            .iter()
            .map(|c| format!("a recovery cut {} bytes ({})", c.bytes, c.path)),
    );
    if !damage.is_empty() {
        return Err(ReplicaError::Verify { damage });
    }
    report.sessions = v.sessions;
    report.records = v.records;
    Ok(())
}
