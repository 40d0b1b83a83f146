//! The replicator: follows a Root beside its writer and uploads what it adds, in rounds, each
//! ending with a manifest (docs/format.md, "Rounds and manifests").

use crate::chain;
use crate::error::ReplicaError;
use crate::manifest::{
    self, hex, sha256_hex, Chunk, DataName, Link, Object, Sealed, SegmentState, State,
    CHUNK_ZSTD_LEVEL, DELTAS_MAX, NAME_SHA_HEX, RECORDS_START,
};
use crate::store::{Store, REQUESTS_IN_FLIGHT};
use bytes::Bytes;
use futures::StreamExt;
use logbook_engine::{Registration, RegistrationKind};
use logbook_log::{Location, Log, LogConfig};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Shortest time between the starts of two rounds.
pub const ROUND_INTERVAL: Duration = Duration::from_secs(1);
/// A file modified this recently is looked at again even if its length and time match the
/// last look (a write in the same clock tick as the look would go unseen).
pub const RACY_MTIME: Duration = Duration::from_secs(2);
/// Read-only log handles kept open between rounds, at most (least recently used closed);
/// fewer under a low descriptor limit (the engine's open-Session budget, when it is smaller).
pub const OPEN_LOGS_MAX: usize = 128;

/// Log handles the replicator keeps open: [`OPEN_LOGS_MAX`], or the engine's open-Session
/// budget when the process's descriptor limit gives less (40 under `ulimit -n 256`; a log
/// holds fewer descriptors than an open Session, so this leaves room for the store's
/// connections).
pub fn open_logs_budget() -> usize {
    logbook_engine::open_sessions_budget().min(OPEN_LOGS_MAX)
}
/// How often an idle replicator lists the manifests (one request) to notice another writer.
pub const LISTING_INTERVAL: Duration = Duration::from_secs(60);
/// First wait before a failed round is tried again; doubles up to `ROUND_BACKOFF_MAX`.
pub const ROUND_BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// Longest wait between two tries of a failing round.
pub const ROUND_BACKOFF_MAX: Duration = Duration::from_secs(8);
/// Bytes read and held for uploads in flight at once, in MiB (a large sealed file takes
/// its size's share).
pub const IN_FLIGHT_MIB: u32 = 256;

const SESSIONS_DIR: &str = "sessions";
const ROOT_LOG: &str = "root-log";
const ROOT_HEADER: &str = "logbook.root";

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// The round's number.
    pub round: u64,
    /// When the round started reading the Root (ms since the epoch): every batch
    /// acknowledged before this is in its manifest.
    pub started_ms: u64,
    /// The manifest it wrote, if any.
    pub manifest: Option<String>,
    /// When the manifest was written (ms since the epoch).
    pub manifest_ms: u64,
    /// Whether the manifest is a full one.
    pub full: bool,
    /// Objects uploaded (manifest included).
    pub puts: u64,
    /// Bytes uploaded (manifest included).
    pub put_bytes: u64,
    /// Objects uploaded by an earlier, interrupted round that this one took instead.
    pub adopted: u64,
    /// Logs whose files were read because they may have changed.
    pub logs_read: u64,
    /// Why no manifest was written although objects were uploaded (waiting for the writer).
    pub held_back: Option<String>,
}

/// What the local checks saw of one log at its last look.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    dir_mtime: SystemTime,
    newest: Option<(u64, u64, SystemTime)>,
}

/// One upload (or adoption) to make in a round.
enum Job {
    Blob {
        sha: String,
        file: PathBuf,
    },
    Patch {
        name: String,
        file: PathBuf,
    },
    Sealed {
        log: String,
        segment: u64,
        file: PathBuf,
        logical: u64,
        mtime_ms: u64,
    },
    Chunks {
        log: String,
        segment: u64,
        handle: Arc<Log>,
        ranges: Vec<(u64, u64)>,
        mtime_ms: u64,
    },
}

impl Job {
    fn bytes(&self) -> u64 {
        match self {
            Job::Blob { file, .. } | Job::Patch { file, .. } | Job::Sealed { file, .. } => {
                std::fs::metadata(file).map_or(0, |m| m.len())
            }
            Job::Chunks { ranges, .. } => ranges.iter().map(|(a, b)| b - a).sum(),
        }
    }
}

/// What a job left in the replica.
enum Done {
    Blob(String, Object),
    Patch(String, Object),
    Sealed(String, u64, Sealed, u64),
    Chunks(String, u64, Vec<Chunk>, u64),
}

/// An object a job made: its name (without round) and bytes.
struct Made {
    name: DataName,
    bytes: Bytes,
}

/// The uploads a round has planned and not run yet, and what the local checks saw of the
/// logs and folders they come from (taken into the replicator once they all succeeded).
#[derive(Default)]
struct Batch {
    jobs: Vec<Job>,
    /// Log handles the jobs hold (one per `Job::Chunks`): each holds its active file open.
    handles: usize,
    looked: Vec<(String, Seen)>,
    folders: Vec<(PathBuf, SystemTime)>,
}

/// Follows one Root and uploads it to one replica location.
pub struct Replicator {
    root: PathBuf,
    store: Store,
    /// Everything uploaded (named by a manifest or not yet).
    uploaded: State,
    /// Everything the newest manifest names.
    published: State,
    /// Logs changed since the newest manifest.
    dirty: BTreeSet<String>,
    /// The highest round used so far.
    round: u64,
    parent: Option<Link>,
    full_bytes: u64,
    deltas: u64,
    delta_bytes: u64,
    root_log: Arc<Log>,
    root_seen: Location,
    registered: Vec<Registration>,
    seen: HashMap<String, Seen>,
    handles: HashMap<String, (Arc<Log>, u64)>,
    /// [`open_logs_budget`], taken once: the most log handles kept open, and the most a
    /// round's planned uploads may hold before they run.
    handles_max: usize,
    uses: u64,
    folders: HashMap<PathBuf, SystemTime>,
    /// Objects of interrupted rounds, by what they are, with their full names and lengths.
    orphans: HashMap<DataName, (String, u64)>,
    /// Logs of the resumed manifest whose last chunk was not yet compared with the Root.
    unchecked: HashSet<String>,
    last_listing: Instant,
}

impl std::fmt::Debug for Replicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicator")
            .field("root", &self.root)
            .field("store", &self.store)
            .field("round", &self.round)
            .finish_non_exhaustive()
    }
}

fn ms_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn now_ms() -> u64 {
    ms_of(SystemTime::now())
}

fn segment_file(dir: &Path, n: u64, ext: &str) -> PathBuf {
    dir.join(format!("{n:020}.{ext}"))
}

impl Replicator {
    /// Starts replicating the Root at `root` to `store`: reads the newest manifest there (and
    /// the chain it rests on) and the objects uploaded after it, so nothing is uploaded twice.
    /// Makes no change to the Root.
    pub fn open(root: &Path, store: Store) -> Result<Replicator, ReplicaError> {
        let header_path = root.join(ROOT_HEADER);
        let header = std::fs::read(&header_path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ReplicaError::LocalDamage {
                    path: header_path.clone(),
                    reason: "not found: this is not a Root (logbook init makes one)".into(),
                }
            } else {
                ReplicaError::local(&header_path, "read", e)
            }
        })?;
        let root_log = Arc::new(Log::open_read_only(
            &root.join(ROOT_LOG),
            LogConfig::default(),
            None,
        )?);
        let mut r = Replicator {
            root: root.to_owned(),
            store,
            uploaded: State::default(),
            published: State::default(),
            dirty: BTreeSet::new(),
            round: 0,
            parent: None,
            full_bytes: 0,
            deltas: 0,
            delta_bytes: 0,
            root_seen: root_log.start(),
            root_log,
            registered: Vec::new(),
            seen: HashMap::new(),
            handles: HashMap::new(),
            handles_max: open_logs_budget(),
            uses: 0,
            folders: HashMap::new(),
            orphans: HashMap::new(),
            unchecked: HashSet::new(),
            last_listing: Instant::now(),
        };
        r.resume(&hex(&header))?;
        r.uploaded.root_header = hex(&header);
        Ok(r)
    }

    /// The replica's location.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The highest round so far.
    pub fn round_number(&self) -> u64 {
        self.round
    }

    /// Takes the newest manifest's state and the objects of interrupted rounds after it.
    fn resume(&mut self, header: &str) -> Result<(), ReplicaError> {
        let location = self.store.location().to_owned();
        if let Some(key) = chain::find(&self.store, None)? {
            let (state, chain) = chain::read(&self.store, &key)?;
            if state.root_header != header {
                return Err(ReplicaError::Foreign {
                    location,
                    reason: "holds the replica of a Root with another header; give each Root \
                             a prefix of its own"
                        .into(),
                });
            }
            let newest = chain
                .last()
                .expect("a chain holds the manifest it was read from");
            self.round = newest.manifest.round;
            self.parent = Some(Link {
                key: newest.key.clone(),
                sha256: newest.sha256.clone(),
            });
            self.full_bytes = chain[0].bytes;
            self.deltas = chain.len() as u64 - 1;
            self.delta_bytes = chain[1..].iter().map(|r| r.bytes).sum();
            self.unchecked = state.logs.keys().cloned().collect();
            self.uploaded = state.clone();
            self.published = state;
        }
        let after = format!("{}~", manifest::round_folder(self.round));
        for l in self.store.list("data/", Some(&after), None)? {
            let Some(round) = manifest::round_of(&l.name) else {
                continue;
            };
            self.round = self.round.max(round);
            if let Some(what) = DataName::parse(&l.name) {
                self.orphans.insert(what, (l.name, l.bytes));
            }
        }
        Ok(())
    }

    /// One round: looks at what changed, uploads it and writes a manifest when something did.
    /// A round that fails leaves every object it uploaded known, so the next one reuses them.
    pub fn round(&mut self) -> Result<RoundReport, ReplicaError> {
        let round = self.round + 1;
        let mut report = RoundReport {
            round,
            started_ms: now_ms(),
            ..RoundReport::default()
        };
        // 1. The Root log first: only Sessions it registers up to here are taken.
        self.root_log.refresh()?;
        let root_end = self.root_log.end();
        self.take_registrations(root_end)?;
        let mut batch = Batch::default();
        let root_log = Arc::clone(&self.root_log);
        self.plan_log(ROOT_LOG, &root_log, &mut batch.jobs)?;
        let mut held_back = None;
        let last = self.registered.len().checked_sub(1);
        for i in 0..self.registered.len() {
            let Registration {
                session_id, kind, ..
            } = self.registered[i].clone();
            let dir = self.root.join(SESSIONS_DIR).join(&session_id);
            if !dir.is_dir() {
                let fine = kind == RegistrationKind::LayeredFork
                    || (kind == RegistrationKind::Created && Some(i) == last);
                if !fine {
                    held_back = Some(format!(
                        "Session {session_id} is registered but its directory is not in place yet"
                    ));
                }
                continue;
            }
            for sub in ["log", "diagnostics"] {
                let path = format!("{SESSIONS_DIR}/{session_id}/{sub}");
                let Some(before) = self.may_have_changed(&path) else {
                    continue;
                };
                report.logs_read += 1;
                let handle = match self.handle(&path) {
                    Ok(h) => h,
                    // A diagnostics log being made, or a log a fork makes on first open.
                    Err(ReplicaError::Log(e)) if e.kind() == logbook_log::ErrorKind::NotFound => {
                        continue
                    }
                    Err(e) => return Err(e),
                };
                let planned = batch.jobs.len();
                self.plan_log(&path, &handle, &mut batch.jobs)?;
                batch.handles += (batch.jobs[planned..].iter())
                    .filter(|j| matches!(j, Job::Chunks { .. }))
                    .count();
                batch.looked.push((path, before));
                // 3a. Upload now when the planned jobs hold as many logs open as the handle
                // cache: a first round over many Sessions would otherwise hold them all.
                if batch.handles >= self.handles_max {
                    self.run_batch(round, std::mem::take(&mut batch), &mut report)?;
                }
            }
        }
        // 2. Blobs and patches after the logs: every one a record read above names is there.
        self.plan_files("blobs", &mut batch)?;
        self.plan_files("patches", &mut batch)?;
        // 3. Upload.
        self.run_batch(round, batch, &mut report)?;
        // 4. The manifest, after every object it names.
        if let Some(why) = held_back {
            report.held_back = Some(why);
            return Ok(report);
        }
        self.publish(round, &mut report)?;
        Ok(report)
    }

    /// Reads the Root log's registrations up to `end`.
    fn take_registrations(&mut self, end: Location) -> Result<(), ReplicaError> {
        if end == self.root_seen {
            return Ok(());
        }
        let dir = self.root.join(ROOT_LOG);
        for item in self.root_log.scan(self.root_seen) {
            let (loc, record, _) = item?;
            if loc >= end {
                break;
            }
            self.registered.push(logbook_engine::registration(
                &dir,
                record.kind,
                &record.payload,
            )?);
        }
        self.root_seen = end;
        Ok(())
    }

    /// What the local checks see of log `path` now, when it may have changed since the last
    /// look (`None`: unchanged, or no such log).
    fn may_have_changed(&self, path: &str) -> Option<Seen> {
        let dir = self.root.join(path);
        let dir_mtime = std::fs::metadata(&dir).and_then(|m| m.modified()).ok()?;
        let newest_of = |n: u64| {
            ["active", "sealed"].iter().find_map(|ext| {
                let m = std::fs::metadata(segment_file(&dir, n, ext)).ok()?;
                Some((n, m.len(), m.modified().ok()?))
            })
        };
        let last = self.seen.get(path);
        // The newest segment known: the one the last look saw, or a newer one the read after
        // it found (and planned). Without the second the look stayed on segment 0 after a
        // roll, and appends to the newest segment went unseen until the directory changed.
        let known = self
            .uploaded
            .logs
            .get(path)
            .and_then(|segs| segs.keys().next_back().copied());
        let guess = (last.and_then(|s| s.newest.map(|(n, ..)| n)))
            .max(known)
            .unwrap_or(0);
        let now = Seen {
            dir_mtime,
            newest: newest_of(guess),
        };
        let Some(last) = last else {
            return Some(now);
        };
        let recent = |t: SystemTime| {
            SystemTime::now()
                .duration_since(t)
                .map_or(true, |d| d < RACY_MTIME)
        };
        let racy = recent(dir_mtime) || now.newest.is_some_and(|(_, _, t)| recent(t));
        (racy || *last != now).then_some(now)
    }

    /// A read-only handle on log `path`, refreshed (opened when none is kept).
    fn handle(&mut self, path: &str) -> Result<Arc<Log>, ReplicaError> {
        self.uses += 1;
        if let Some((h, used)) = self.handles.get_mut(path) {
            *used = self.uses;
            let h = Arc::clone(h);
            h.refresh()?;
            return Ok(h);
        }
        let mark = self.uploaded.logs.get(path).and_then(|segs| {
            let (n, s) = segs.iter().next_back()?;
            (s.sealed.is_none() && s.end() > RECORDS_START).then_some(Location {
                segment: *n,
                offset: s.end(),
            })
        });
        let h = Arc::new(Log::open_read_only(
            &self.root.join(path),
            LogConfig::default(),
            mark,
        )?);
        if self.handles.len() >= self.handles_max {
            if let Some(oldest) = (self.handles.iter())
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            {
                self.handles.remove(&oldest);
            }
        }
        self.handles
            .insert(path.to_owned(), (Arc::clone(&h), self.uses));
        Ok(h)
    }

    /// Plans the uploads that bring log `path` to `handle`'s end.
    fn plan_log(
        &mut self,
        path: &str,
        handle: &Arc<Log>,
        jobs: &mut Vec<Job>,
    ) -> Result<(), ReplicaError> {
        let dir = self.root.join(path);
        if self.unchecked.remove(path) {
            self.check_tail(path, handle)?;
        }
        for n in handle.segment_numbers() {
            let had = self.uploaded.logs.get(path).and_then(|s| s.get(&n));
            if had.is_some_and(|s| s.sealed.is_some()) {
                continue;
            }
            let sealed = segment_file(&dir, n, "sealed");
            let mtime = |p: &Path| {
                std::fs::metadata(p)
                    .and_then(|m| m.modified())
                    .map(ms_of)
                    .ok()
            };
            if let Some(mtime_ms) = mtime(&sealed) {
                jobs.push(Job::Sealed {
                    log: path.to_owned(),
                    segment: n,
                    file: sealed,
                    logical: handle.segment_end(n)?,
                    mtime_ms,
                });
                continue;
            }
            let from = had.map_or(RECORDS_START, SegmentState::end);
            let to = handle.segment_end(n)?;
            let mtime_ms = mtime(&segment_file(&dir, n, "active"))
                .or(had.map(|s| s.mtime_ms))
                .unwrap_or(0);
            if to > from {
                jobs.push(Job::Chunks {
                    log: path.to_owned(),
                    segment: n,
                    handle: Arc::clone(handle),
                    ranges: self.ranges(path, n, from, to),
                    mtime_ms,
                });
            } else if had.is_none() {
                // A segment of nothing but its header: the restore makes it too.
                self.uploaded
                    .logs
                    .entry(path.to_owned())
                    .or_default()
                    .insert(
                        n,
                        SegmentState {
                            mtime_ms,
                            ..SegmentState::default()
                        },
                    );
                self.dirty.insert(path.to_owned());
            }
        }
        Ok(())
    }

    /// The ranges `[from, to)` of segment `n` of `log` is uploaded in: first the ranges of
    /// interrupted rounds' chunks that continue it, then the rest.
    fn ranges(&self, log: &str, n: u64, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = from;
        loop {
            let next = self.orphans.keys().find_map(|k| match k {
                DataName::Chunk(l, s, f, t, _) if l == log && *s == n && *f == at && *t <= to => {
                    Some(*t)
                }
                _ => None,
            });
            match next {
                Some(t) => {
                    out.push((at, t));
                    at = t;
                }
                None => break,
            }
        }
        if at < to {
            out.push((at, to));
        }
        out
    }

    /// Compares the Root's bytes under the last chunk of a resumed log with that chunk, so a
    /// prefix holding another Root's replica is never continued.
    fn check_tail(&self, path: &str, handle: &Log) -> Result<(), ReplicaError> {
        let Some((n, seg)) = self
            .uploaded
            .logs
            .get(path)
            .and_then(|s| s.iter().next_back())
        else {
            return Ok(());
        };
        let Some(c) = seg.chunks.last() else {
            return Ok(());
        };
        let foreign = |why: &str| ReplicaError::Foreign {
            location: self.store.location().to_owned(),
            reason: format!(
                "the replica's {path} segment {n} {why} (chunk {}); the prefix holds another \
                 Root's replica, or this Root was changed behind it: replicate to a new prefix",
                c.key
            ),
        };
        if handle.end().segment < *n || handle.segment_end(*n)? < c.to {
            return Err(foreign("is longer than the Root's"));
        }
        let mut local = vec![0u8; (c.to - c.from) as usize];
        handle.read_logical(*n, c.from, &mut local)?;
        let recompressed = compress(&local)?;
        if sha256_hex(&recompressed) == c.sha256 {
            return Ok(());
        }
        // Another zstd build may compress differently: compare the bytes themselves.
        let remote = self.store.get(&c.key)?;
        let plain = zstd::bulk::decompress(&remote, local.len())
            .map_err(|e| ReplicaError::damaged(&c.key, format!("does not decompress: {e}")))?;
        if plain == local {
            Ok(())
        } else {
            Err(foreign("differs from the Root's bytes"))
        }
    }

    /// Plans uploads of the files in `blobs/` or `patches/` not uploaded yet, listing only the
    /// fan-out folders whose modification time changed.
    fn plan_files(&mut self, top: &str, batch: &mut Batch) -> Result<(), ReplicaError> {
        let dir = self.root.join(top);
        let Ok(meta) = std::fs::metadata(&dir) else {
            return Ok(());
        };
        let mtime = meta
            .modified()
            .map_err(|e| ReplicaError::local(&dir, "stat", e))?;
        let racy = |t: SystemTime| {
            SystemTime::now()
                .duration_since(t)
                .map_or(true, |d| d < RACY_MTIME)
        };
        let mut folders = Vec::new();
        let top_changed = self.folders.get(&dir) != Some(&mtime) || racy(mtime);
        let entries: Vec<PathBuf> = if top_changed || self.folders.is_empty() {
            let list = std::fs::read_dir(&dir).map_err(|e| ReplicaError::local(&dir, "list", e))?;
            list.flatten().map(|e| e.path()).collect()
        } else {
            (self.folders.keys())
                .filter(|p| p.parent() == Some(dir.as_path()))
                .cloned()
                .collect()
        };
        batch.folders.push((dir.clone(), mtime));
        for sub in entries {
            let Ok(m) = std::fs::metadata(&sub) else {
                continue;
            };
            let Ok(t) = m.modified() else {
                continue;
            };
            if m.is_dir() && (self.folders.get(&sub) != Some(&t) || racy(t)) {
                folders.push((sub, t));
            }
        }
        for (sub, t) in folders {
            let list = std::fs::read_dir(&sub).map_err(|e| ReplicaError::local(&sub, "list", e))?;
            let fan = sub.file_name().map(|n| n.to_string_lossy().into_owned());
            let Some(fan) = fan.filter(|f| f.len() == 2) else {
                continue;
            };
            for e in list.flatten() {
                let rest = e.file_name().to_string_lossy().into_owned();
                let name = format!("{fan}{rest}");
                if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                    continue;
                }
                let file = e.path();
                if top == "blobs" && !self.uploaded.blobs.contains_key(&name) {
                    batch.jobs.push(Job::Blob { sha: name, file });
                } else if top == "patches" && !self.uploaded.patches.contains_key(&name) {
                    batch.jobs.push(Job::Patch { name, file });
                }
            }
            batch.folders.push((sub, t));
        }
        Ok(())
    }

    /// Runs a batch's jobs and takes what they uploaded into the uploaded state; then, when
    /// every job succeeded, remembers what the batch's logs and folders looked like, so the
    /// next round skips them while they stay so. A failed job's log or folder is looked at
    /// again by the next round (its `Seen` is not taken), whose plan then starts from what
    /// was uploaded.
    fn run_batch(
        &mut self,
        round: u64,
        batch: Batch,
        report: &mut RoundReport,
    ) -> Result<(), ReplicaError> {
        let Batch {
            jobs,
            looked,
            folders,
            handles: _,
        } = batch;
        let done = self.execute(round, jobs, report);
        let mut first_error = None;
        for d in done {
            match d {
                Ok(d) => self.record(d),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if report.puts > 0 || report.adopted > 0 {
            self.round = round;
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        self.seen.extend(looked);
        self.folders.extend(folders);
        Ok(())
    }

    /// Runs the jobs, `REQUESTS_IN_FLIGHT` at once, files read and compressed on blocking
    /// threads; returns each job's outcome.
    fn execute(
        &self,
        round: u64,
        jobs: Vec<Job>,
        report: &mut RoundReport,
    ) -> Vec<Result<Done, ReplicaError>> {
        if jobs.is_empty() {
            return Vec::new();
        }
        let budget = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT_MIB as usize));
        let store = &self.store;
        let orphans = &self.orphans;
        let outcomes: Vec<(Result<Done, ReplicaError>, u64, u64, u64)> = store.block_on(async {
            futures::stream::iter(jobs.into_iter().map(|job| {
                let budget = Arc::clone(&budget);
                async move {
                    let mib = job
                        .bytes()
                        .div_ceil(1 << 20)
                        .clamp(1, u64::from(IN_FLIGHT_MIB)) as u32;
                    let _permit = budget.acquire_many(mib).await.expect("never closed");
                    run_job(store, orphans, round, job).await
                }
            }))
            .buffer_unordered(REQUESTS_IN_FLIGHT)
            .collect()
            .await
        });
        outcomes
            .into_iter()
            .map(|(done, puts, bytes, adopted)| {
                report.puts += puts;
                report.put_bytes += bytes;
                report.adopted += adopted;
                done
            })
            .collect()
    }

    /// Takes a finished job into the uploaded state.
    fn record(&mut self, done: Done) {
        match done {
            Done::Blob(sha, o) => {
                self.uploaded.blobs.insert(sha, o);
            }
            Done::Patch(name, o) => {
                self.uploaded.patches.insert(name, o);
            }
            Done::Sealed(log, n, sealed, mtime_ms) => {
                let s = self
                    .uploaded
                    .logs
                    .entry(log.clone())
                    .or_default()
                    .entry(n)
                    .or_default();
                s.sealed = Some(sealed);
                s.chunks.clear();
                s.mtime_ms = mtime_ms;
                self.dirty.insert(log);
            }
            Done::Chunks(log, n, chunks, mtime_ms) => {
                let s = self
                    .uploaded
                    .logs
                    .entry(log.clone())
                    .or_default()
                    .entry(n)
                    .or_default();
                debug_assert!(
                    chunks.first().is_none_or(|c| c.from == s.end()),
                    "a round's chunks continue the segment"
                );
                s.chunks.extend(chunks);
                s.mtime_ms = mtime_ms;
                self.dirty.insert(log);
            }
        }
    }

    /// Writes the manifest of `round` if the uploaded state differs from the published one.
    fn publish(&mut self, round: u64, report: &mut RoundReport) -> Result<(), ReplicaError> {
        let ms = now_ms();
        let full = self.parent.is_none()
            || self.deltas >= DELTAS_MAX
            || self.delta_bytes > self.full_bytes;
        let m = match &self.parent {
            Some(parent) if !full => {
                match self.uploaded.delta(
                    &self.published,
                    self.dirty.iter(),
                    round,
                    ms,
                    parent.clone(),
                ) {
                    Some(m) => m,
                    None => return Ok(()),
                }
            }
            _ => {
                if self.parent.is_some() && self.uploaded == self.published {
                    return Ok(());
                }
                self.uploaded.full(round, ms, self.parent.clone())
            }
        };
        let (bytes, sha) = manifest::encode(&m)?;
        let key = manifest::manifest_name(round, ms);
        let len = bytes.len() as u64;
        self.store.put(&key, Bytes::from(bytes))?;
        report.puts += 1;
        report.put_bytes += len;
        report.manifest = Some(key.clone());
        report.manifest_ms = ms;
        report.full = m.full;
        if m.full {
            self.published = self.uploaded.clone();
            self.full_bytes = len;
            self.deltas = 0;
            self.delta_bytes = 0;
        } else {
            for path in &self.dirty {
                if let Some(l) = self.uploaded.logs.get(path) {
                    self.published.logs.insert(path.clone(), l.clone());
                }
            }
            if !m.blobs.is_empty() {
                self.published.blobs.clone_from(&self.uploaded.blobs);
            }
            if !m.patches.is_empty() {
                self.published.patches.clone_from(&self.uploaded.patches);
            }
            self.published
                .root_header
                .clone_from(&self.uploaded.root_header);
            self.deltas += 1;
            self.delta_bytes += len;
        }
        self.dirty.clear();
        self.round = round;
        self.parent = Some(Link { key, sha256: sha });
        Ok(())
    }

    /// Lists the newest manifest (one request) and fails when another replicator wrote it.
    pub fn check_alone(&mut self) -> Result<(), ReplicaError> {
        self.last_listing = Instant::now();
        let Some(newest) = chain::find(&self.store, None)? else {
            return Ok(());
        };
        let ours = self.parent.as_ref().map(|p| p.key.as_str());
        if Some(newest.as_str()) != ours {
            return Err(ReplicaError::Foreign {
                location: self.store.location().to_owned(),
                reason: format!(
                    "another replicator wrote manifest {newest}; one prefix takes one \
                     replicator (stop the other, or give each its own prefix)"
                ),
            });
        }
        Ok(())
    }

    /// Runs rounds until `stop` is set: one every `ROUND_INTERVAL` at most, a failed one
    /// tried again after a growing backoff (a store that is down costs only time), and a
    /// listing every `LISTING_INTERVAL`. `each` hears of every round, failed ones included.
    /// Returns on `stop` (after a last round) or on an error that retrying cannot mend.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        mut each: impl FnMut(&Result<RoundReport, ReplicaError>),
    ) -> Result<(), ReplicaError> {
        let mut backoff = ROUND_BACKOFF_FIRST;
        loop {
            let started = Instant::now();
            let stopping = stop.load(Ordering::Acquire);
            let outcome = self.round();
            each(&outcome);
            let wait = match outcome {
                Ok(_) => {
                    backoff = ROUND_BACKOFF_FIRST;
                    if stopping {
                        return Ok(());
                    }
                    if self.last_listing.elapsed() >= LISTING_INTERVAL {
                        match self.check_alone() {
                            Err(e) if !e.is_transient() => return Err(e),
                            _ => {}
                        }
                    }
                    ROUND_INTERVAL.saturating_sub(started.elapsed())
                }
                Err(e) if e.is_transient() => {
                    let w = backoff;
                    backoff = (backoff * 2).min(ROUND_BACKOFF_MAX);
                    if stopping {
                        return Err(e);
                    }
                    w
                }
                Err(e) => return Err(e),
            };
            let until = Instant::now() + wait;
            while Instant::now() < until && !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
            }
        }
    }
}

/// zstd level 1 with its checksum, the way chunks are stored.
fn compress(bytes: &[u8]) -> Result<Vec<u8>, ReplicaError> {
    let mut c = zstd::bulk::Compressor::new(CHUNK_ZSTD_LEVEL)
        .map_err(|e| ReplicaError::local("zstd", "start", e))?;
    c.include_checksum(true)
        .map_err(|e| ReplicaError::local("zstd", "configure", e))?;
    c.compress(bytes)
        .map_err(|e| ReplicaError::local("zstd", "compress", e))
}

/// Reads a whole file of the Root.
fn read_file(path: &Path) -> Result<Vec<u8>, ReplicaError> {
    std::fs::read(path).map_err(|e| ReplicaError::local(path, "read", e))
}

/// Prepares a job's objects (on a blocking thread), then uploads the ones no interrupted
/// round left. Returns the outcome, and the PUTs, bytes and adoptions it made.
async fn run_job(
    store: &Store,
    orphans: &HashMap<DataName, (String, u64)>,
    round: u64,
    job: Job,
) -> (Result<Done, ReplicaError>, u64, u64, u64) {
    let prepared = store
        .handle()
        .spawn_blocking(move || prepare(job))
        .await
        .unwrap_or_else(|e| {
            Err(ReplicaError::local(
                "upload worker",
                "join",
                std::io::Error::other(e.to_string()),
            ))
        });
    let (made, finish) = match prepared {
        Ok(p) => p,
        Err(e) => return (Err(e), 0, 0, 0),
    };
    let (mut puts, mut bytes, mut adopted) = (0, 0, 0);
    let mut objects = Vec::with_capacity(made.len());
    for m in made {
        let len = m.bytes.len() as u64;
        let key = match orphans.get(&m.name) {
            Some((key, n)) if *n == len => {
                adopted += 1;
                key.clone()
            }
            _ => {
                let key = m.name.name(round);
                if let Err(e) = store.put_async(&key, m.bytes).await {
                    return (Err(e), puts, bytes, adopted);
                }
                puts += 1;
                bytes += len;
                key
            }
        };
        objects.push((key, len));
    }
    (Ok(finish(objects)), puts, bytes, adopted)
}

/// The objects a job makes, and how to record them once named and uploaded.
type Prepared = (
    Vec<Made>,
    Box<dyn FnOnce(Vec<(String, u64)>) -> Done + Send>,
);

/// A job that uploads `data` as one object named `name` (whose SHA-256 is `sha`); `done` makes
/// the round's record of it from the stored object.
fn one_object(
    name: DataName,
    data: Vec<u8>,
    sha: String,
    done: impl FnOnce(Object) -> Done + Send + 'static,
) -> Prepared {
    let made = vec![Made {
        name,
        bytes: Bytes::from(data),
    }];
    (
        made,
        Box::new(move |o| {
            let (key, bytes) = o.into_iter().next().expect("one object");
            done(Object {
                key,
                bytes,
                sha256: sha,
            })
        }),
    )
}

fn prepare(job: Job) -> Result<Prepared, ReplicaError> {
    match job {
        Job::Blob { sha, file } => {
            let data = read_file(&file)?;
            let got = sha256_hex(&data);
            if got != sha {
                return Err(ReplicaError::LocalDamage {
                    path: file,
                    reason: format!("its bytes hash to {got}, not to its name"),
                });
            }
            let name = DataName::Blob(sha.clone());
            Ok(one_object(name, data, sha.clone(), move |o| {
                Done::Blob(sha, o)
            }))
        }
        Job::Patch { name, file } => {
            let data = read_file(&file)?;
            let body = data.get(16..).unwrap_or_default();
            if data.get(..8) != Some(&b"LBPATCH\0"[..]) || sha256_hex(body) != name {
                return Err(ReplicaError::LocalDamage {
                    path: file,
                    reason: "not a patch file whose bytes hash to its name".into(),
                });
            }
            let sha = sha256_hex(&data);
            let data_name = DataName::Patch(name.clone());
            Ok(one_object(data_name, data, sha, move |o| {
                Done::Patch(name, o)
            }))
        }
        Job::Sealed {
            log,
            segment,
            file,
            logical,
            mtime_ms,
        } => {
            let data = read_file(&file)?;
            let sha = sha256_hex(&data);
            let made = vec![Made {
                name: DataName::Sealed(log.clone(), segment, sha[..NAME_SHA_HEX].to_owned()),
                bytes: Bytes::from(data),
            }];
            Ok((
                made,
                Box::new(move |o| {
                    let (key, bytes) = o.into_iter().next().expect("one object");
                    Done::Sealed(
                        log,
                        segment,
                        Sealed {
                            key,
                            bytes,
                            sha256: sha,
                            logical,
                        },
                        mtime_ms,
                    )
                }),
            ))
        }
        Job::Chunks {
            log,
            segment,
            handle,
            ranges,
            mtime_ms,
        } => {
            let mut made = Vec::with_capacity(ranges.len());
            let mut meta = Vec::with_capacity(ranges.len());
            for (from, to) in ranges {
                let mut plain = vec![0u8; (to - from) as usize];
                handle.read_logical(segment, from, &mut plain)?;
                let z = compress(&plain)?;
                let sha = sha256_hex(&z);
                let short = sha[..NAME_SHA_HEX].to_owned();
                meta.push((from, to, sha));
                made.push(Made {
                    name: DataName::Chunk(log.clone(), segment, from, to, short),
                    bytes: Bytes::from(z),
                });
            }
            Ok((
                made,
                Box::new(move |o| {
                    let chunks = (o.into_iter().zip(meta))
                        .map(|((key, bytes), (from, to, sha256))| Chunk {
                            key,
                            bytes,
                            sha256,
                            from,
                            to,
                        })
                        .collect();
                    Done::Chunks(log, segment, chunks, mtime_ms)
                }),
            ))
        }
    }
}
