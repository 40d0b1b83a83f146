//! `fork` and `forkReceipt`: a new Session that starts from a settled prefix of another.
//!
//! # What a fork is
//!
//! `fork {sessionId, operation, from, revision}` copies the source's history through a fence
//! `through` (the source's `turnSettled` of `from.invocation`, or the whole history for
//! `{kind: "all"}`) into a new Session with a generated id, the source's workspace, and no
//! active work. Copied events keep their sequences, so the fork's rows have the source's
//! positions and a read of the fork under any fence `<= through` equals the same read of the
//! source. Attachments are blobs of the Root's store, shared by digest (blobs are never
//! deleted, so a fork can never lose one).
//!
//! # How the branch is recorded
//!
//! Sequence 1 of the fork is the source's own `sessionCreated` (copied, so history stays
//! equal under every fence). The branch `{sessionId, through, turn}` is recorded twice:
//! in the Root log (a record of kind 17, which also registers the
//! Session, so `sessions` / `sessionInfo` report it), and in the fork's own log as a
//! marker record (kind 3) right after the copied records. The marker is not an event:
//! it does not change the revision, publishes no row and does not appear in `watch`.
//!
//! # Rules the marker carries (state is a pure function of the log)
//!
//! - Receipts before the marker are the source's and are dropped: operations used in the
//!   source never collide with operations on the fork (receipts are not inherited).
//! - Pending interactions are dropped (the fork has no active work; copied Turns are settled
//!   anyway). A copied, unresolved interaction can still be read with `interaction`.
//! - `contextPrepared` events before the marker no longer count: copied history is not a
//!   request the fork made, so `context` on a fork is null until the fork prepares its own.
//! - Diagnostics are not copied: a fork starts with an empty diagnostics log.
//!
//! # Cost
//!
//! Sealed segments are immutable and are hard-linked. Only the segment holding the fence is
//! written: the bytes of its frames up to the fence event (copied from the active file, or
//! re-framed from the records of a sealed one), then the marker. The sequence and row index
//! prefixes are copied from the source's mapped indexes and the state at the fence is derived
//! from the source's state (every derived fact keeps the sequence it came from). So a fork
//! costs O(index entries + state + one segment), never O(history bytes).
//!
//! # Receipts and atomicity
//!
//! The fork's operation is scoped to the SOURCE Session. The first call writes a reservation
//! receipt (no event) into the source log holding the new Session's id and the fence, after
//! checking `revision` and settledness under the source's writer lock. The fork is then built
//! under `sessions/.fork-<id>`, every file and directory fsynced, and published by one Root
//! log record (the commit point) followed by a rename into `sessions/<id>`. A kill at any
//! point leaves either no fork (the reservation alone: a repeat builds it, with the same id)
//! or a whole one. Open renames the staging directory of a committed fork whose rename did not
//! happen and removes staging directories of forks that never committed. `forkReceipt`
//! returns the result only once the fork is committed.

use crate::error::EngineError;
use crate::event::Branch;
use crate::records::{self, Outcome};
use crate::root::{lock, Entry, Root, Shared};
use crate::session::{
    Inner, Mutation, RECEIPT_ENTRY_BYTES, RECEIPT_TAG, ROW_ENTRY_BYTES, ROW_TAG, SEQ_ENTRY_BYTES,
    SEQ_TAG,
};
use crate::state::{InvocationState, State};
use crate::validate::validate_id;
use logbook_index::FixedIndex;
use logbook_log::internals::{
    encode_frame, encode_header, ACTIVE_FORMAT, FRAME_HEADER_BYTES, HEADER_BYTES,
};
use logbook_log::{Durability, Location};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const FORK_STAGING_PREFIX: &str = ".fork-";
const SESSIONS_DIR: &str = "sessions";

/// Where a fork starts from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ForkFrom {
    /// History through the `turnSettled` of this invocation.
    Turn { invocation: String },
    /// The whole current history.
    All,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkParams {
    pub session_id: String,
    pub operation: String,
    pub from: ForkFrom,
    /// Must equal the source's current revision.
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkResult {
    /// The new Session.
    pub session_id: String,
    pub branch: Branch,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkReceiptParams {
    pub session_id: String,
    pub operation: String,
}

/// Root log payload of [`records::KIND_FORK_SESSION`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkRecord {
    pub session_id: String,
    pub workspace: Option<String>,
    pub branch: Branch,
    pub operation: String,
    pub params: [u8; 32],
}

/// Session log payload of [`records::KIND_FORK`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ForkMarker {
    source: String,
    through: u64,
    turn: Option<String>,
}

type ForkKey = (String, String);

/// Root-wide state of the fork, diagnostics and patch operations.
#[derive(Default)]
pub(crate) struct Extras {
    /// Committed forks: (source Session, operation) -> (params digest, result).
    forks: Mutex<HashMap<ForkKey, ([u8; 32], ForkResult)>>,
    /// Serialises forks (they are rare; building one takes milliseconds).
    fork_lock: Mutex<()>,
    pub(crate) diags: crate::diagnostics::DiagLogs,
}

/// Decodes a Root log fork record and remembers its receipt.
pub(crate) fn load_record(
    path: &Path,
    payload: &[u8],
    extras: &Extras,
) -> Result<(String, Entry, ForkRecord), EngineError> {
    let r: ForkRecord = records::decode(path, "a fork record", payload)?;
    lock(&extras.forks).insert(
        (r.branch.session_id.clone(), r.operation.clone()),
        (
            r.params,
            ForkResult {
                session_id: r.session_id.clone(),
                branch: r.branch.clone(),
            },
        ),
    );
    let entry = Entry {
        workspace: r.workspace.clone(),
        branch: Some(r.branch.clone()),
        slot: Default::default(),
    };
    Ok((r.session_id.clone(), entry, r))
}

/// Finishes the rename of the last committed fork if a crash interrupted it, and removes
/// staging directories of forks that never committed.
pub(crate) fn finish_on_open(
    shared: &Shared,
    last: Option<&ForkRecord>,
) -> Result<(), EngineError> {
    let sessions = shared.dir.join(SESSIONS_DIR);
    if let Some(r) = last {
        let dir = sessions.join(&r.session_id);
        let staging = sessions.join(format!("{FORK_STAGING_PREFIX}{}", r.session_id));
        if !dir.exists() {
            if !staging.is_dir() {
                return Err(EngineError::corrupt(
                    &dir,
                    "the Root log lists this forked Session but neither it nor its staging directory exists",
                ));
            }
            std::fs::rename(&staging, &dir)
                .map_err(|e| EngineError::io(&dir, "rename into place", e))?;
            crate::fsutil::sync_dir(&sessions)?;
        }
    }
    // Any staging directory left now belongs to a fork that never committed: never visible.
    let entries =
        std::fs::read_dir(&sessions).map_err(|e| EngineError::io(&sessions, "list", e))?;
    let mut removed = false;
    for e in entries {
        let e = e.map_err(|e| EngineError::io(&sessions, "list", e))?;
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with(FORK_STAGING_PREFIX)
        {
            continue;
        }
        let p = e.path();
        std::fs::remove_dir_all(&p)
            .map_err(|e| EngineError::io(&p, "remove an uncommitted fork", e))?;
        removed = true;
    }
    if removed {
        crate::fsutil::sync_dir(&sessions)?;
    }
    Ok(())
}

/// Applies a fork marker met while replaying a fork's log.
pub(crate) fn replay_marker(
    log_path: &Path,
    loc: Location,
    payload: &[u8],
    inner: &mut Inner,
) -> Result<(), EngineError> {
    apply_marker(log_path, loc, payload, &mut inner.state)?;
    inner.receipts.truncate(0)?;
    Ok(())
}

/// Checks a fork marker against the state replayed so far and applies its rules to it.
pub(crate) fn apply_marker(
    log_path: &Path,
    loc: Location,
    payload: &[u8],
    state: &mut State,
) -> Result<(), EngineError> {
    let m: ForkMarker = records::decode(log_path, "a fork marker", payload)?;
    if m.through != state.revision {
        return Err(EngineError::corrupt(
            log_path,
            format!(
                "fork marker at {loc:?} says the copied history ends at {}, but it ends at {}",
                m.through, state.revision
            ),
        ));
    }
    apply_fork_rules(state);
    Ok(())
}

/// What the marker does to the state (see the module documentation).
fn apply_fork_rules(state: &mut State) {
    state.pending.clear();
    state.contexts.clear();
}

/// The state as it was right after event `through` (every derived fact keeps the sequence it
/// came from, so this needs no replay).
fn state_at(s: &State, through: u64) -> State {
    let mut out = State {
        revision: through,
        ..State::default()
    };
    for (inv, st) in &s.invocations {
        if st.message > through {
            continue;
        }
        let settled = st.settled && st.settled_at <= through;
        out.invocations.insert(
            inv.clone(),
            InvocationState {
                message: st.message,
                settled,
                settled_at: if settled { st.settled_at } else { 0 },
            },
        );
        if !settled {
            out.queue.insert(st.message, inv.clone());
        }
    }
    for (id, st) in &s.interactions {
        if st.requested > through {
            continue;
        }
        let mut st = st.clone();
        st.resolved = st.resolved.filter(|r| *r <= through);
        if st.resolved.is_none() {
            out.pending.insert(st.requested, id.clone());
        }
        out.interactions.insert(id.clone(), st);
    }
    out.internal_calls = s
        .internal_calls
        .iter()
        .filter(|(_, seq)| **seq <= through)
        .map(|(id, seq)| (id.clone(), *seq))
        .collect();
    out.contexts = s
        .contexts
        .iter()
        .copied()
        .filter(|c| *c <= through)
        .collect();
    out
}

/// Crash-test hook: when the environment variable `LOGBOOK_FORK_FAILPOINT` names this
/// point, the process aborts there (as abruptly as a kill -9: no destructor runs). The tests
/// use it to prove every crash point leaves no fork or a whole one.
fn failpoint(name: &str) {
    if std::env::var_os("LOGBOOK_FORK_FAILPOINT").is_some_and(|v| v == name) {
        std::process::abort();
    }
}

fn fork_params(p: &ForkParams) -> [u8; 32] {
    let (kind, inv) = match &p.from {
        ForkFrom::Turn { invocation } => ("turn", Some(invocation.as_str())),
        ForkFrom::All => ("all", None),
    };
    records::params_digest("fork", &(kind, inv, p.revision))
}

fn segment_name(n: u64, ext: &str) -> String {
    format!("{n:020}.{ext}")
}

fn link_or_copy_segment(src_dir: &Path, dst_dir: &Path, n: u64) -> Result<(), EngineError> {
    // The source's sealer may turn N.active into N.sealed at any moment: both are the same
    // logical segment, try them in the order the sealer makes them.
    for ext in ["sealed", "active", "sealed"] {
        let from = src_dir.join(segment_name(n, ext));
        let to = dst_dir.join(segment_name(n, ext));
        match std::fs::hard_link(&from, &to) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(EngineError::io(&to, "hard-link a sealed segment", e)),
        }
    }
    Err(EngineError::corrupt(
        src_dir,
        format!("segment {n} of the source log has no file"),
    ))
}

/// The logical bytes `[0, end)` of segment `n`: read from the active file, or re-framed from
/// the records when the segment is sealed (offsets, kinds, payloads and batch flags are the
/// same; the frames' checksums are recomputed by the same function the log uses).
fn segment_prefix(
    log: &logbook_log::Log,
    n: u64,
    end: u64,
    last: Location,
) -> Result<Vec<u8>, EngineError> {
    let active = log.dir().join(segment_name(n, "active"));
    match std::fs::File::open(&active) {
        Ok(f) => {
            let mut buf = Vec::with_capacity(end as usize);
            f.take(end)
                .read_to_end(&mut buf)
                .map_err(|e| EngineError::io(&active, "read", e))?;
            if buf.len() as u64 == end {
                return Ok(buf);
            }
            // Shorter than published: cannot be (the log flushes before reads); refuse.
            return Err(EngineError::corrupt(
                &active,
                format!(
                    "active segment holds {} bytes, {end} were expected",
                    buf.len()
                ),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(EngineError::io(&active, "open", e)),
    }
    let mut buf = Vec::with_capacity(end as usize);
    buf.extend_from_slice(&encode_header(ACTIVE_FORMAT, n));
    for item in log.scan(Location {
        segment: n,
        offset: HEADER_BYTES,
    }) {
        let (loc, r, last_of_batch) = item?;
        if loc.segment != n || loc > last {
            break;
        }
        debug_assert_eq!(loc.offset, buf.len() as u64, "frames are back to back");
        encode_frame(
            &mut buf,
            n,
            loc.offset,
            r.kind,
            last_of_batch,
            loc.offset,
            &r.payload,
        );
        if loc == last {
            break;
        }
    }
    if buf.len() as u64 != end {
        return Err(EngineError::corrupt(
            log.dir(),
            format!(
                "re-framing segment {n} gave {} bytes, {end} were expected",
                buf.len()
            ),
        ));
    }
    Ok(buf)
}

/// Search postings of segments wholly inside the fork (`search/seg-<segment>-row-<first
/// row>.post`, 16 hex digits each) describe the same rows in the fork, under the same row
/// ordinals: they are immutable derived files, so the fork shares them by hard link instead of
/// rebuilding them on its first search. Anything else in `search/` is left to be rebuilt.
fn link_search_postings(src: &Path, staging: &Path, fence_segment: u64) -> Result<(), EngineError> {
    let from = src.join("search");
    let Ok(entries) = std::fs::read_dir(&from) else {
        return Ok(());
    };
    let to = staging.join("search");
    let mut made = false;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str() else { continue };
        let segment = n
            .strip_prefix("seg-")
            .and_then(|r| r.strip_suffix(".post"))
            .and_then(|r| r.split_once("-row-"))
            .filter(|(a, b)| a.len() == 16 && b.len() == 16)
            .and_then(|(a, b)| {
                u64::from_str_radix(b, 16).ok()?;
                u64::from_str_radix(a, 16).ok()
            });
        if segment.is_none_or(|s| s >= fence_segment) {
            continue;
        }
        if !made {
            std::fs::create_dir(&to).map_err(|e| EngineError::io(&to, "create directory", e))?;
            made = true;
        }
        // Derived data: a file that vanished meanwhile is simply rebuilt later.
        let _ = std::fs::hard_link(e.path(), to.join(&name));
    }
    if made {
        crate::fsutil::sync_dir(&to)?;
    }
    Ok(())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), EngineError> {
    crate::state::write_file_synced(path, bytes).map_err(|e| EngineError::io(path, "write", e))
}

fn write_index(path: &Path, tag: [u8; 4], width: u32, entries: &[u8]) -> Result<(), EngineError> {
    let mut ix = FixedIndex::create(path, tag, width)?;
    for e in entries.chunks_exact(width as usize) {
        ix.push(e);
    }
    ix.sync()?;
    Ok(())
}

impl Root {
    /// Forks a Session (see the module documentation of `fork`).
    pub fn fork(&self, p: ForkParams) -> Result<ForkResult, EngineError> {
        validate_id("operation", &p.operation)?;
        if let ForkFrom::Turn { invocation } = &p.from {
            validate_id("from.invocation", invocation)?;
        }
        let params = fork_params(&p);
        let sh = &self.shared;
        let _one_at_a_time = lock(&sh.extras.fork_lock);
        if let Some(r) = self.committed(&p.session_id, &p.operation, params)? {
            return Ok(r);
        }
        let source = self.session(&p.session_id)?;
        let workspace = lock(&sh.registry)
            .sessions
            .get(&p.session_id)
            .map(|e| e.workspace.clone())
            .ok_or_else(|| EngineError::not_found(format!("Session {}", p.session_id)))?;
        let mut build = |state: &State, _first: u64| {
            if state.revision != p.revision {
                return Err(EngineError::conflict(format!(
                    "Session {} is at revision {}, not {}; read it again and fork with its current revision",
                    p.session_id, state.revision, p.revision
                )));
            }
            let (through, turn) = match &p.from {
                ForkFrom::All => (state.revision, None),
                ForkFrom::Turn { invocation } => {
                    let st = state.invocations.get(invocation).ok_or_else(|| {
                        EngineError::not_found(format!(
                            "invocation {invocation:?} in Session {}",
                            p.session_id
                        ))
                    })?;
                    if !st.settled {
                        return Err(EngineError::conflict(format!(
                            "the Turn of invocation {invocation:?} is not settled; fork it once it is"
                        )));
                    }
                    (st.settled_at, Some(invocation.clone()))
                }
            };
            if let Some((inv, _)) = state
                .invocations
                .iter()
                .find(|(_, s)| s.message <= through && !(s.settled && s.settled_at <= through))
            {
                return Err(EngineError::conflict(format!(
                    "the Turn of invocation {inv:?} is inside the forked history but was not settled \
                     by sequence {through}; every copied Turn must be settled"
                )));
            }
            let id = loop {
                let id = sh.ids.next("s-");
                if !lock(&sh.registry).sessions.contains_key(&id) {
                    break id;
                }
            };
            Ok((
                vec![],
                Outcome::Fork {
                    session_id: id,
                    through,
                    turn,
                },
            ))
        };
        let outcome = source.mutate(Mutation {
            operation: &p.operation,
            params,
            build: &mut build,
        })?;
        let Outcome::Fork {
            session_id: new_id,
            through,
            turn,
        } = outcome
        else {
            return Err(EngineError::conflict(format!(
                "operation {:?} was already used in Session {} for another mutation",
                p.operation, p.session_id
            )));
        };
        failpoint("reserved");
        let branch = Branch {
            session_id: p.session_id.clone(),
            through,
            turn,
        };
        let sessions = sh.dir.join(SESSIONS_DIR);
        let staging = sessions.join(format!("{FORK_STAGING_PREFIX}{new_id}"));
        self.build_fork(&source, &staging, &branch)?;
        failpoint("staged");
        let record = ForkRecord {
            session_id: new_id.clone(),
            workspace: workspace.clone(),
            branch: branch.clone(),
            operation: p.operation.clone(),
            params,
        };
        {
            let mut reg = lock(&sh.registry);
            if reg.sessions.contains_key(&new_id) {
                return Err(EngineError::conflict(format!(
                    "Session id {new_id} reserved by operation {:?} was taken by createSession meanwhile",
                    p.operation
                )));
            }
            let payload = records::encode(&record);
            sh.root_log.append(&[logbook_log::Record {
                kind: records::KIND_FORK_SESSION,
                payload: &payload,
            }])?;
            // Committed. The rename may still be interrupted: open finishes it.
            failpoint("committed");
            let dir = sessions.join(&new_id);
            std::fs::rename(&staging, &dir)
                .map_err(|e| EngineError::io(&dir, "rename into place", e))?;
            crate::fsutil::sync_dir(&sessions)?;
            reg.sessions.insert(
                new_id.clone(),
                Entry {
                    workspace,
                    branch: Some(branch.clone()),
                    slot: Default::default(),
                },
            );
        }
        let result = ForkResult {
            session_id: new_id,
            branch,
        };
        lock(&sh.extras.forks).insert(
            (p.session_id.clone(), p.operation.clone()),
            (params, result.clone()),
        );
        Ok(result)
    }

    fn committed(
        &self,
        source: &str,
        operation: &str,
        params: [u8; 32],
    ) -> Result<Option<ForkResult>, EngineError> {
        let forks = lock(&self.shared.extras.forks);
        match forks.get(&(source.to_owned(), operation.to_owned())) {
            None => Ok(None),
            Some((digest, r)) if *digest == params => Ok(Some(r.clone())),
            Some((_, r)) => Err(EngineError::conflict(format!(
                "operation {operation:?} already forked Session {source} into {} with other parameters; \
                 use a new operation",
                r.session_id
            ))),
        }
    }

    /// The fork an operation published from a source Session, or None when it published none.
    pub fn fork_receipt(&self, p: ForkReceiptParams) -> Result<Option<ForkResult>, EngineError> {
        validate_id("operation", &p.operation)?;
        if !lock(&self.shared.registry)
            .sessions
            .contains_key(&p.session_id)
        {
            return Err(EngineError::not_found(format!("Session {}", p.session_id)));
        }
        Ok(lock(&self.shared.extras.forks)
            .get(&(p.session_id, p.operation))
            .map(|(_, r)| r.clone()))
    }

    /// Builds the whole fork in `staging` (removed first if a crashed attempt left it) and
    /// syncs every file and directory of it.
    fn build_fork(
        &self,
        source: &crate::session::Session,
        staging: &Path,
        branch: &Branch,
    ) -> Result<(), EngineError> {
        let through = branch.through;
        if staging.exists() {
            std::fs::remove_dir_all(staging)
                .map_err(|e| EngineError::io(staging, "remove a half-made fork", e))?;
        }
        let log_dir = staging.join("log");
        std::fs::create_dir_all(&log_dir)
            .map_err(|e| EngineError::io(&log_dir, "create directory", e))?;
        // Index prefixes and state, under the source's read lock (they only grow).
        let (seq_bytes, row_bytes, state, last) = {
            let inner = source.read();
            let last = inner.location(through).ok_or_else(|| {
                EngineError::corrupt(
                    source.dir(),
                    format!("the sequence index has no event {through}"),
                )
            })?;
            let mut seq = Vec::with_capacity((through * u64::from(SEQ_ENTRY_BYTES)) as usize);
            for i in 0..through {
                seq.extend_from_slice(inner.seq.get(i).expect("i < through <= len"));
            }
            let n_rows = inner.rows_through(through);
            let mut rows = Vec::with_capacity((n_rows * u64::from(ROW_ENTRY_BYTES)) as usize);
            for i in 0..n_rows {
                rows.extend_from_slice(inner.rows.get(i).expect("i < rows_through"));
            }
            let mut state = state_at(&inner.state, through);
            apply_fork_rules(&mut state);
            (seq, rows, state, last)
        };
        let slog = source.log();
        if self.shared.options.durability == Durability::NoSyncBulkImport {
            // Published bytes may still sit in the writer's buffer.
            slog.sync()?;
        }
        for n in slog.start().segment..last.segment {
            link_or_copy_segment(slog.dir(), &log_dir, n)?;
            failpoint("linking");
        }
        link_search_postings(source.dir(), staging, last.segment)?;
        let last_record = slog.read(last)?;
        let end = last.offset + FRAME_HEADER_BYTES + last_record.payload.len() as u64;
        let mut seg = segment_prefix(slog, last.segment, end, last)?;
        let marker = records::encode(&ForkMarker {
            source: branch.session_id.clone(),
            through,
            turn: branch.turn.clone(),
        });
        encode_frame(
            &mut seg,
            last.segment,
            end,
            records::KIND_FORK,
            true,
            end,
            &marker,
        );
        // Each file is written and fsynced on its own thread: the syncs overlap.
        let seg_path = log_dir.join(segment_name(last.segment, "active"));
        let results: Vec<Result<(), EngineError>> = std::thread::scope(|sc| {
            let jobs = vec![
                sc.spawn(|| {
                    write_synced(&seg_path, &seg)?;
                    crate::fsutil::sync_dir(&log_dir)
                }),
                sc.spawn(|| {
                    write_index(
                        &staging.join("seq.idx"),
                        SEQ_TAG,
                        SEQ_ENTRY_BYTES,
                        &seq_bytes,
                    )
                }),
                sc.spawn(|| {
                    write_index(
                        &staging.join("row.idx"),
                        ROW_TAG,
                        ROW_ENTRY_BYTES,
                        &row_bytes,
                    )
                }),
                sc.spawn(|| {
                    write_index(
                        &staging.join("receipt.idx"),
                        RECEIPT_TAG,
                        RECEIPT_ENTRY_BYTES,
                        &[],
                    )
                }),
                sc.spawn(|| state.save(&staging.join("state.ckpt"))),
            ];
            jobs.into_iter()
                .map(|j| {
                    j.join().unwrap_or_else(|_| {
                        Err(EngineError::io(
                            staging,
                            "write a fork file",
                            std::io::Error::other("the writer thread panicked"),
                        ))
                    })
                })
                .collect()
        });
        for r in results {
            r?;
        }
        crate::fsutil::sync_dir(staging)?;
        Ok(())
    }
}

/// Test hook: the path a fork of `id` is staged under.
#[doc(hidden)]
pub fn staging_dir(root: &Path, id: &str) -> PathBuf {
    root.join(SESSIONS_DIR)
        .join(format!("{FORK_STAGING_PREFIX}{id}"))
}
