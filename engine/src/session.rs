//! One Session: its log, its derived indexes and state, and the mutation path.
//!
//! Files in `sessions/<id>/` (see `docs/format.md`):
//! - `log/`: the Session's `logbook-log` log, the only source of truth.
//! - `seq.idx`: sequence -> event Location (+ event kind), entry `i` is sequence `i + 1`.
//! - `row.idx`: row ordinal -> (sourceSequence, itemIndex, row kind, flags).
//! - `receipt.idx`: (operation hash, receipt Location), in log order.
//! - `state.ckpt`: derived state checkpoint (see [`crate::state`]).
//!
//! Everything but `log/` is derived and rebuilt when missing, damaged or ahead of the log.
//! Open costs O(tail): the checkpoint names the sequence C that the indexes and state cover;
//! the indexes are cut back to C, the event at C is read to prove it is still in the log, and
//! only the records after it are scanned.

use crate::diagnostics::DiagLog;
use crate::error::EngineError;
use crate::event::{rows_of, Branch, Event, RowKind, RowSource, SessionCreated};
use crate::postings::SearchIndex;
use crate::progress::{ProgressSink, ProgressUnit};
use crate::records::{self, EventRecord, EventRecordRef, Outcome, Prepared, Receipt};
use crate::state::State;
use logbook_index::{FixedIndex, IndexError, IntHash};
use logbook_log::{Durability, Location, Log, LogConfig, Reader, Record};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub(crate) const SEQ_TAG: [u8; 4] = *b"SEQ1";
pub(crate) const SEQ_ENTRY_BYTES: u32 = 24;
pub(crate) const ROW_TAG: [u8; 4] = *b"ROW1";
pub(crate) const ROW_ENTRY_BYTES: u32 = 16;
pub(crate) const RECEIPT_TAG: [u8; 4] = *b"RCP1";
pub(crate) const RECEIPT_ENTRY_BYTES: u32 = 24;
/// Row flag: the row belongs to an internal tool call (or its result) and is hidden from pages.
pub(crate) const ROW_FLAG_HIDDEN: u8 = 1;

/// One row index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowEntry {
    pub sequence: u64,
    pub item: u32,
    pub kind: RowKind,
    pub hidden: bool,
}

impl RowEntry {
    fn encode(&self) -> [u8; ROW_ENTRY_BYTES as usize] {
        let mut b = [0u8; ROW_ENTRY_BYTES as usize];
        b[0..8].copy_from_slice(&self.sequence.to_le_bytes());
        b[8..12].copy_from_slice(&self.item.to_le_bytes());
        b[12] = self.kind.code();
        b[13] = if self.hidden { ROW_FLAG_HIDDEN } else { 0 };
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<RowEntry> {
        // One length check, then fixed offsets (a history page decodes an entry per row).
        let b: &[u8; ROW_ENTRY_BYTES as usize] = b.try_into().ok()?;
        let sequence = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        Some(RowEntry {
            sequence,
            item: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            kind: RowKind::from_code(b[12])?,
            hidden: b[13] & ROW_FLAG_HIDDEN != 0,
        })
    }

    pub(crate) fn key(b: &[u8]) -> (u64, u32) {
        let seq = b
            .get(0..8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(u64::MAX);
        let item = b
            .get(8..12)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
            .unwrap_or(u32::MAX);
        (seq, item)
    }
}

fn loc_entry(loc: Location, kind: u8) -> [u8; SEQ_ENTRY_BYTES as usize] {
    let mut b = [0u8; SEQ_ENTRY_BYTES as usize];
    b[0..8].copy_from_slice(&loc.segment.to_le_bytes());
    b[8..16].copy_from_slice(&loc.offset.to_le_bytes());
    b[16] = kind;
    b
}

fn entry_loc(b: &[u8], at: usize) -> Location {
    let word = |i: usize| {
        b.get(i..i + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(u64::MAX)
    };
    Location {
        segment: word(at),
        offset: word(at + 8),
    }
}

/// The event kind code stored in `seq.idx` (index of the kind in [`EVENT_KINDS`]).
pub(crate) const EVENT_KINDS: [&str; 11] = [
    "sessionCreated",
    "userMessage",
    "modelCompletion",
    "toolResult",
    "turnSettled",
    "stopRequested",
    "interactionRequested",
    "interactionResolved",
    "contextPrepared",
    "titleSet",
    "importMark",
];

fn kind_code(e: &Event) -> u8 {
    let k = e.kind();
    EVENT_KINDS
        .iter()
        .position(|x| *x == k)
        .expect("every kind is listed") as u8
}

/// The immutable prefix a layered fork reads from its source (see `crate::fork`): sequences
/// `1..=through` and row ordinals `0..rows` are the source's, read through the source's own
/// read path (which recurses when the source is a layered fork too).
pub(crate) struct Base {
    pub session: Arc<Session>,
    pub through: u64,
    pub rows: u64,
}

impl Base {
    /// The base of a layered fork: `session` (the source, open) through `through`. The base
    /// row count is the source's row count under the fence.
    pub(crate) fn open(
        fork_dir: &Path,
        session: Arc<Session>,
        through: u64,
    ) -> Result<Base, EngineError> {
        let (revision, rows) = {
            let inner = session.read();
            let rev = inner.state.revision;
            (rev, inner.rows_through(through.min(rev))?)
        };
        if revision < through {
            return Err(EngineError::corrupt(
                fork_dir,
                format!(
                    "the fork's base is events 1..={through} of Session {}, which holds only {revision}",
                    session.id
                ),
            ));
        }
        Ok(Base {
            session,
            through,
            rows,
        })
    }

    /// The fork's state right after its fence: the source's state cut at the fence, with the
    /// fork rules applied (no replay: every derived fact keeps its sequence).
    pub(crate) fn state_at_fence(&self) -> Result<State, EngineError> {
        let mut s = crate::layer::state_at(&self.session.read().state, self.through)?;
        crate::layer::apply_fork_rules(&mut s)?;
        Ok(s)
    }
}

/// Removes Session `dir`'s state checkpoint, so its next open rebuilds the state and the
/// indexes from the log (the checkpoint is derived); one already gone is fine.
fn remove_checkpoint(dir: &Path) -> Result<(), EngineError> {
    let ckpt = dir.join("state.ckpt");
    match std::fs::remove_file(&ckpt) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(EngineError::io(&ckpt, "remove a stale checkpoint", e))
        }
        _ => Ok(()),
    }
}

/// The derived, lock-protected part of a Session.
///
/// `seq` and `rows` hold this Session's own entries: for a layered fork (`base` set) entry
/// `i` of `seq` is sequence `base.through + 1 + i` and entry `i` of `rows` is row ordinal
/// `base.rows + i`. The row and kind accessors below are layered: they answer for every
/// sequence and row ordinal of the Session, asking the base for the ones below the fence.
/// Lock order: a fork's `inner` before its source's (a source never locks its forks).
pub(crate) struct Inner {
    pub seq: FixedIndex,
    pub rows: FixedIndex,
    pub receipts: FixedIndex,
    pub state: State,
    pub base: Option<Base>,
}

impl Inner {
    /// Last sequence read from the base (0 for a Session without one).
    pub(crate) fn seq_base(&self) -> u64 {
        self.base.as_ref().map_or(0, |b| b.through)
    }

    /// Number of rows read from the base (0 for a Session without one).
    pub(crate) fn row_base(&self) -> u64 {
        self.base.as_ref().map_or(0, |b| b.rows)
    }

    /// The base, when `sequence` lies in it.
    fn base_of_seq(&self, sequence: u64) -> Option<&Base> {
        self.base.as_ref().filter(|b| sequence <= b.through)
    }

    /// Location of event `sequence` in this Session's OWN log (None for a base sequence).
    /// Every accessor below fails with the index's error when an entry it reads is damaged
    /// (entry checksums are checked when read, not at open).
    pub(crate) fn location(&self, sequence: u64) -> Result<Option<Location>, IndexError> {
        let Some(i) = sequence.checked_sub(self.seq_base() + 1) else {
            return Ok(None);
        };
        Ok(self.seq.get(i)?.map(|e| entry_loc(e, 0)))
    }

    pub(crate) fn event_kind(&self, sequence: u64) -> Result<Option<&'static str>, IndexError> {
        if let Some(b) = self.base_of_seq(sequence) {
            return b.session.read().event_kind(sequence);
        }
        let Some(i) = sequence.checked_sub(self.seq_base() + 1) else {
            return Ok(None);
        };
        Ok(self
            .seq
            .get(i)?
            .and_then(|e| EVENT_KINDS.get(usize::from(*e.get(16)?)).copied()))
    }

    pub(crate) fn row(&self, ordinal: u64) -> Result<Option<RowEntry>, IndexError> {
        match &self.base {
            Some(b) if ordinal < b.rows => b.session.read().row(ordinal),
            _ => Ok(self
                .rows
                .get(ordinal - self.row_base())?
                .and_then(RowEntry::decode)),
        }
    }

    /// Number of rows of the Session (base rows included).
    pub(crate) fn row_count(&self) -> u64 {
        self.row_base() + self.rows.len()
    }

    /// Number of rows whose source sequence is `<= through`.
    pub(crate) fn rows_through(&self, through: u64) -> Result<u64, IndexError> {
        if let Some(b) = self.base_of_seq(through) {
            return Ok(b.session.read().rows_through(through)?.min(b.rows));
        }
        Ok(self.row_base()
            + self
                .rows
                .partition_point(|e| RowEntry::key(e).0 <= through)?)
    }

    /// First row ordinal whose position is `>= (seq, item)`.
    pub(crate) fn row_lower_bound(&self, seq: u64, item: u32) -> Result<u64, IndexError> {
        if let Some(b) = self.base_of_seq(seq) {
            return Ok(b.session.read().row_lower_bound(seq, item)?.min(b.rows));
        }
        Ok(self.row_base()
            + self
                .rows
                .partition_point(|e| RowEntry::key(e) < (seq, item))?)
    }

    /// First row ordinal whose position is `> (seq, item)`.
    pub(crate) fn row_upper_bound(&self, seq: u64, item: u32) -> Result<u64, IndexError> {
        if let Some(b) = self.base_of_seq(seq) {
            return Ok(b.session.read().row_upper_bound(seq, item)?.min(b.rows));
        }
        Ok(self.row_base()
            + self
                .rows
                .partition_point(|e| RowEntry::key(e) <= (seq, item))?)
    }

    /// First own row ordinal (global) whose event lies in own log segment `>= segment`.
    pub(crate) fn first_row_of_segment(&self, segment: u64) -> Result<u64, IndexError> {
        let mut damage = None;
        let i = self
            .rows
            .partition_point(|e| match self.location(RowEntry::key(e).0) {
                Ok(l) => l.is_some_and(|l| l.segment < segment),
                Err(e) => {
                    damage.get_or_insert(e);
                    false
                }
            })?;
        match damage {
            Some(e) => Err(e),
            None => Ok(self.row_base() + i),
        }
    }

    /// Empties the sequence and row indexes and resets the state to where a replay of the
    /// whole own log starts (the base's state at the fence, for a layered fork). The receipt
    /// index is kept: the replay compares its entries with the log's receipts from the first
    /// on and cuts it only where they differ, so the open of a Session without a checkpoint
    /// (every small one) writes nothing when nothing changed, and the entries stay the
    /// evidence of what was acknowledged (`Session::referenced`) all along.
    fn start_over(&mut self) -> Result<(), EngineError> {
        self.state = match &self.base {
            Some(b) => b.state_at_fence()?,
            None => State::default(),
        };
        self.seq.truncate(0)?;
        self.rows.truncate(0)?;
        Ok(())
    }

    /// Folds one event in: sequence index, rows (hidden flags from the state so far), state.
    fn index_event(&mut self, sequence: u64, loc: Location, event: &Event) {
        debug_assert_eq!(
            self.seq_base() + self.seq.len() + 1,
            sequence,
            "seq.idx is dense"
        );
        self.seq.push(&loc_entry(loc, kind_code(event)));
        for (i, row) in rows_of(event).iter().enumerate() {
            let hidden = row.internal
                || (row.kind == RowKind::ToolResult
                    && row
                        .tool_call_id
                        .is_some_and(|id| self.state.is_internal_call(id)));
            let entry = RowEntry {
                sequence,
                item: i as u32,
                kind: row.kind,
                hidden,
            };
            self.rows.push(&entry.encode());
        }
        self.state.apply(sequence, event);
    }

    fn index_receipt(&mut self, loc: Location, operation: &str) {
        self.receipts.push(&receipt_entry(loc, operation));
    }
}

/// The indexes and checkpoint of a new Session whose log is written in one pass (an import),
/// built as its records are written: the entries a replay of that log would push, in the same
/// order, so the Session's first open finds them whole and replays nothing but the records
/// after its last event. Entries are written out (unsynced) every [`INDEX_FLUSH_ENTRIES`]
/// so memory does not grow with the Session; [`IndexBuilder::finish`] syncs them and writes
/// the checkpoint, which the caller may do only once the log is durable.
pub(crate) struct IndexBuilder {
    inner: Inner,
    dir: PathBuf,
    log_dir: PathBuf,
    pushed: u64,
}

/// Index entries an [`IndexBuilder`] pushes between writes.
const INDEX_FLUSH_ENTRIES: u64 = 1 << 16;

/// Most bytes of log a replay reads through the block cache (see `Session::replay`); a longer
/// one streams. Four 64 KiB sealed blocks: a small Session's whole log.
const REPLAY_CACHED_BYTES_MAX: u64 = 256 << 10;

/// Bytes of records in `log` from `from` to its end, counted until they pass `most` (then
/// some number past it). Segments before the newest count their length, not the segment
/// size: a small Session sealed at close has its records in segment 0 and its end at the
/// start of segment 1, and its replay is as short as its records.
fn replay_bytes(log: &Log, from: Location, most: u64) -> Result<u64, EngineError> {
    let end = log.end();
    let mut bytes = 0u64;
    for segment in from.segment..=end.segment {
        let first = if segment == from.segment {
            from.offset
        } else {
            logbook_log::SEGMENT_HEADER_BYTES
        };
        let last = if segment == end.segment {
            end.offset
        } else {
            log.segment_end(segment)?
        };
        bytes = bytes.saturating_add(last.saturating_sub(first));
        if bytes > most {
            break;
        }
    }
    Ok(bytes)
}

impl IndexBuilder {
    /// Empty indexes in `dir` (the Session's directory), whose log is `dir/log`.
    pub(crate) fn create(dir: &Path) -> Result<IndexBuilder, EngineError> {
        let fresh = |name: &str, tag, width| fresh_index(&dir.join(name), tag, width, false);
        Ok(IndexBuilder {
            inner: Inner {
                seq: fresh("seq.idx", SEQ_TAG, SEQ_ENTRY_BYTES)?,
                rows: fresh("row.idx", ROW_TAG, ROW_ENTRY_BYTES)?,
                receipts: fresh("receipt.idx", RECEIPT_TAG, RECEIPT_ENTRY_BYTES)?,
                state: State::default(),
                base: None,
            },
            dir: dir.to_owned(),
            log_dir: dir.join("log"),
            pushed: 0,
        })
    }

    /// Event `sequence` (the next one), written at `loc`.
    pub(crate) fn event(
        &mut self,
        sequence: u64,
        loc: Location,
        event: &Event,
    ) -> Result<(), EngineError> {
        let want = self.inner.state.revision + 1;
        if sequence != want {
            return Err(EngineError::corrupt(
                &self.log_dir,
                format!("event at {loc:?} has sequence {sequence} where {want} was expected"),
            ));
        }
        self.inner.index_event(sequence, loc, event);
        self.pushed += 1;
        self.flush_now_and_then()
    }

    /// A receipt of `operation`, written at `loc`.
    pub(crate) fn receipt(&mut self, loc: Location, operation: &str) -> Result<(), EngineError> {
        self.inner.index_receipt(loc, operation);
        self.pushed += 1;
        self.flush_now_and_then()
    }

    /// A fork marker (`payload`), written at `loc`: as the replay takes it.
    pub(crate) fn fork_marker(&mut self, loc: Location, payload: &[u8]) -> Result<(), EngineError> {
        crate::layer::apply_marker(&self.log_dir, loc, payload, &mut self.inner.state)?;
        self.inner.receipts.truncate(0)?;
        Ok(())
    }

    fn flush_now_and_then(&mut self) -> Result<(), EngineError> {
        if self.pushed.is_multiple_of(INDEX_FLUSH_ENTRIES) {
            self.write(false)?;
        }
        Ok(())
    }

    fn write(&mut self, synced: bool) -> Result<(), EngineError> {
        let inner = &mut self.inner;
        for ix in [&mut inner.seq, &mut inner.rows, &mut inner.receipts] {
            let pending = ix.begin_sync()?;
            let written = if synced {
                pending.write()
            } else {
                pending.write_unsynced()
            };
            ix.finish_sync(written)?;
        }
        Ok(())
    }

    /// Syncs the indexes and writes the checkpoint covering them. The log must be durable
    /// already (the checkpoint promises its last event is).
    pub(crate) fn finish(mut self) -> Result<(), EngineError> {
        self.write(true)?;
        let cover = crate::state::Coverage {
            rows: self.inner.rows.len(),
            receipts: self.inner.receipts.len(),
        };
        self.inner
            .state
            .save_covering(&self.dir.join("state.ckpt"), cover)
    }
}

/// The receipt index entry of the receipt of `operation` at `loc`.
fn receipt_entry(loc: Location, operation: &str) -> [u8; RECEIPT_ENTRY_BYTES as usize] {
    let mut b = [0u8; RECEIPT_ENTRY_BYTES as usize];
    b[0..8].copy_from_slice(&records::operation_hash(operation).to_le_bytes());
    b[8..24].copy_from_slice(&loc_entry(loc, 0)[..16]);
    b
}

/// Receipt locations by operation hash, built on the first mutation from `receipt.idx`.
type ReceiptMap = HashMap<u64, Vec<Location>>;

/// Builds a mutation's events (and outcome) from the state and the first sequence they get.
pub(crate) type BuildFn<'a> =
    dyn FnMut(&State, u64) -> Result<(Vec<Prepared>, Outcome), EngineError> + 'a;

/// Log bytes (record payloads) a Session appends between two state checkpoints. The background
/// sync writes the indexes out on every tick but fdatasyncs them and rewrites `state.ckpt` (the
/// whole state) only after this much growth, or when the Root closes or is asked to sync: an open after a
/// crash then replays at most about this much log (plus one tick's appends), and an idle or
/// slowly written Session costs no checkpoint writes.
pub const CHECKPOINT_LOG_BYTES: u64 = 4 << 20;

/// Log bytes past the last checkpoint above which closing a Session writes a new one. Below
/// it the next open replays the tail instead (well under a millisecond), so a small Session
/// opened, written and closed by the cache pays no checkpoint and no index fdatasync.
pub const CLOSE_CHECKPOINT_LOG_BYTES: u64 = 64 << 10;

/// What closing a Session does beyond syncing it (the Root's options for it).
pub(crate) struct Closing {
    /// Search tails with at least this many (trigram, row) pairs are saved.
    pub tail_pairs_min: u64,
    /// The newest log segment is sealed when it holds at least this many record bytes
    /// (`u64::MAX`: never).
    pub seal_bytes_min: u64,
}

/// One of the log's writers of a new log's first batch without a sync
/// ([`Log::write_unsynced`], [`Log::write_first_unsynced`]).
type FirstBatchWriter =
    fn(&Path, &LogConfig, &[Record<'_>]) -> Result<Vec<Location>, logbook_log::LogError>;

/// Writes a new Session's first record, `sessionCreated` as sequence 1, into the log of
/// Session directory `dir` with `write` (one of the log's unsynced first-batch writers).
fn write_created_with(
    dir: &Path,
    workspace: Option<String>,
    branch: Option<Branch>,
    config: &LogConfig,
    write: FirstBatchWriter,
) -> Result<(), EngineError> {
    let event = Event::SessionCreated(SessionCreated { workspace, branch });
    let payload = records::encode(&EventRecordRef {
        sequence: 1,
        event: &event,
    });
    write(
        &dir.join("log"),
        config,
        &[Record {
            kind: records::KIND_EVENT,
            payload: &payload,
        }],
    )?;
    Ok(())
}

/// Default [`crate::RootOptions::seal_on_close_bytes_min`]: record bytes in a Session's newest log
/// segment from which closing the Session (by the open-Session cache or the Root's close) has
/// the segment sealed, that is compressed, in the
/// background (see `Log::seal_when_closed`): an idle Session then costs its compressed size
/// on disk. Below it the segment fits in the one file-system block its file takes anyway.
/// (It was 16 KiB: a Root of 10-row Sessions then kept most of its text uncompressed.)
pub const SEAL_ON_CLOSE_BYTES_MIN: u64 = 4 << 10;

/// Largest newest log segment (logical bytes) that closing a Session seals: a larger one
/// belongs to a large Session that is read and written a lot; it stays as it is until it
/// rolls (at the Root's `segment_bytes_max`) and is sealed then, so neither every close of it
/// pays a seal of megabytes and a new segment, nor every open a decompression of its last
/// block for the newest page.
pub const SEAL_ON_CLOSE_BYTES_MAX: u64 = 4 << 20;

/// When [`Session::sync_indexes`] writes a state checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Checkpoint {
    /// Only when the log grew by more than [`CHECKPOINT_LOG_BYTES`] since the last one (the
    /// background timer).
    IfGrown,
    /// When the log grew by more than [`CLOSE_CHECKPOINT_LOG_BYTES`] (a Session closed by the
    /// cache or by the Root's close).
    Close,
    /// As [`Checkpoint::Close`], for a Session whose newest segment is sealed once its log
    /// closes: the sealed file is the evidence of its last batch, so receipts kept in memory
    /// get no file (`receipt.idx`) unless a checkpoint is written.
    CloseSealing,
    /// Whenever the log grew at all since the last one (`Root::sync_indexes`).
    Now,
}

/// What the last checkpoint covered, kept under the Session's sync lock.
#[derive(Debug, Default)]
struct SyncMark {
    /// [`Session::appended_bytes`] when the last checkpoint's snapshot was taken.
    appended_bytes: u64,
}

/// Most bytes (of encoded events) each Session keeps decoded in memory for reads.
pub const EVENT_CACHE_BYTES_MAX: usize = 8 << 20;

/// Recently appended or read events, decoded, bounded by encoded size (oldest insert evicted
/// first). The end of a conversation, which clients reread most, is served from here.
/// A page read once is decoded with its texts borrowed from the log's bytes and not cached
/// (the first page after an open costs no owned decode, and the close no frees); an event is
/// cached when it is read a second time, as the end of a conversation is.
#[derive(Default)]
struct EventCache {
    map: HashMap<u64, Arc<Event>, IntHash>,
    order: VecDeque<(u64, usize)>,
    bytes: usize,
    /// Events read once, through the borrowed path, since this set was last emptied.
    seen: HashSet<u64, IntHash>,
}

/// Most events [`EventCache::seen`] remembers before it starts over.
const EVENT_CACHE_SEEN_MAX: usize = 4096;

impl EventCache {
    fn get(&self, sequence: u64) -> Option<Arc<Event>> {
        self.map.get(&sequence).cloned()
    }

    /// True when event `sequence` was read before (and is worth caching now); remembers it
    /// otherwise.
    fn read_before(&mut self, sequence: u64) -> bool {
        if self.seen.len() >= EVENT_CACHE_SEEN_MAX {
            self.seen.clear();
        }
        !self.seen.insert(sequence)
    }

    fn insert(&mut self, sequence: u64, event: Arc<Event>, size: usize) {
        if size > EVENT_CACHE_BYTES_MAX / 4 || self.map.contains_key(&sequence) {
            return;
        }
        self.map.insert(sequence, event);
        self.order.push_back((sequence, size));
        self.bytes += size;
        while self.bytes > EVENT_CACHE_BYTES_MAX {
            let Some((old, sz)) = self.order.pop_front() else {
                break;
            };
            self.map.remove(&old);
            self.bytes -= sz;
        }
    }
}

/// What a mutation asks of [`Session::mutate`].
pub(crate) struct Mutation<'a> {
    pub operation: &'a str,
    pub params: [u8; 32],
    /// Builds the events from the current state and the first sequence they will get, or fails
    /// (then nothing is written and no receipt stored).
    pub build: &'a mut BuildFn<'a>,
}

/// How long [`Session::retire`] waits for a mutation under way on the Session to finish.
const RETIRE_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) struct Session {
    pub id: String,
    dir: PathBuf,
    log: Log,
    writer: Mutex<Option<ReceiptMap>>,
    inner: RwLock<Inner>,
    revision: Mutex<u64>,
    appended: Condvar,
    dirty: AtomicBool,
    /// Set when a derived index was found damaged (an entry failing its checksum when read,
    /// or naming a record that is not its event): no checkpoint is written any more, and the
    /// Root opens the Session again, which drops the checkpoint first (see `retire`) so that
    /// every index is rebuilt from the log. Shared with the three indexes, which set it.
    damaged: Arc<AtomicBool>,
    cache: Mutex<EventCache>,
    /// Trigram postings for search, loaded on first use (see [`crate::search`]).
    pub(crate) search: SearchIndex,
    /// Operations of this Session that made layered forks (their receipt is the fork's Root
    /// log record): a mutation under one of them is a conflict, as for a stored receipt.
    fork_ops: Mutex<HashSet<String>>,
    /// The ids of the patches this Session stored (its `snapshotPatch` receipts), gathered
    /// from its receipts on the first `readPatch` (see [`Session::stored_patch`]).
    patch_ids: Mutex<Option<HashSet<String>>>,
    /// The Session's diagnostics (read on first use): a mutation under an operation that
    /// recorded a diagnostic is a conflict, as for a stored receipt. Its lock is taken after
    /// the writer lock, never before it (see `crate::diagnostics`).
    diags: Arc<DiagLog>,
    /// Where index rebuilds report their progress.
    pub(crate) progress: ProgressSink,
    /// Appends leave the search index behind ([`crate::SearchIndexing::OnSearch`]).
    search_on_search: AtomicBool,
    /// One more than the revision the index flusher last tried to build a filter for (0:
    /// none), so a build that fails is not tried again on every tick.
    pub(crate) filter_tried: AtomicU64,
    /// The torn tail this open cut from the log, if any (reported by the Root, never silent).
    pub(crate) cut: Option<crate::params::CutNote>,
    /// The Root's catalog entry of this Session and its change journal: commits are
    /// journaled and mark the last activity.
    pub(crate) activity: std::sync::OnceLock<crate::catalog::Activity>,
    /// Serialises index syncs and checkpoints (never taken by readers or mutations).
    sync: Mutex<SyncMark>,
    /// Log payload bytes appended since open, counting the tail replayed at open: the
    /// checkpoint cadence (see [`CHECKPOINT_LOG_BYTES`]).
    appended_bytes: AtomicU64,
    /// Set when the Session can no longer be trusted in memory (a panic under one of its locks)
    /// or is being replaced: every call on this object fails, and the Root opens the Session
    /// again from disk on the next call (see [`Session::needs_reopen`]).
    failed: AtomicBool,
    /// The Root's use counter at this Session's last use: the open-Session cache closes the
    /// least recently used first (see `Shared::make_room`).
    last_use: AtomicU64,
    /// A layered fork's source (the object its base reads through), so that the fork is
    /// opened again with a fresh source when the source must be (see `needs_reopen`).
    source: Option<Arc<Session>>,
    /// Opened by a reader beside the Root's writer: nothing of it is ever written, and
    /// [`Session::refresh`] takes in what the writer commits.
    read_only: bool,
    /// How far a read-only Session has taken in its log, and when it last looked; its lock
    /// serialises refreshes.
    followed: Mutex<Followed>,
}

/// See [`Session::followed`].
#[derive(Debug, Default)]
struct Followed {
    /// The log's end that the indexes and state cover.
    end: Location,
    /// When the log was last asked for more.
    at: Option<std::time::Instant>,
}

/// How often a read-only Session asks its log for what the writer added (at most; a call
/// that comes sooner answers from what was taken in): well under the 100 ms within which a
/// reader sees every acknowledged append.
pub(crate) const REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

fn lock_cache(m: &Mutex<EventCache>) -> MutexGuard<'_, EventCache> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An existing index file, opened to be written (`read_only` false) or read into memory
/// beside its writer; `None` when it is missing or refused (the caller starts it over).
fn open_index(path: &Path, tag: [u8; 4], width: u32, read_only: bool) -> Option<FixedIndex> {
    let ix = if read_only {
        FixedIndex::open_detached(path, tag, width)
    } else {
        FixedIndex::open(path, tag, width)
    };
    ix.ok()
}

/// A new empty index in place of `path`'s, or kept in memory only (`in_memory`: a reader's,
/// or a writer's index that gets its file at the first checkpoint).
fn fresh_index(
    path: &Path,
    tag: [u8; 4],
    width: u32,
    in_memory: bool,
) -> Result<FixedIndex, EngineError> {
    Ok(if in_memory {
        FixedIndex::empty_detached(path, tag, width)?
    } else {
        FixedIndex::create(path, tag, width)?
    })
}

/// True when an opened index can be taken as it is: a writer's must be whole (a torn tail was
/// cut by the open, so it is started over); a reader's holds the whole entries found, the
/// writer may be writing the next one right now.
fn whole(ix: &FixedIndex) -> bool {
    ix.is_detached() || ix.cut_bytes() == 0
}

pub(crate) fn log_config(durability: Durability) -> LogConfig {
    LogConfig {
        durability,
        ..LogConfig::default()
    }
}

impl Session {
    /// Creates the Session's files in `dir` (absent or empty) and writes `sessionCreated` as
    /// sequence 1, with no sync: the Session's Root-log record stands for them until its first
    /// commit, which makes them durable (see [`Session::sync_names_at_first_commit`]).
    pub(crate) fn create_files_with(
        dir: &Path,
        workspace: Option<String>,
        branch: Option<Branch>,
        config: LogConfig,
    ) -> Result<(), EngineError> {
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, "create directory", e))?;
        write_created_with(dir, workspace, branch, &config, Log::write_unsynced)
    }

    /// Writes a new Session's `sessionCreated` into spare directory `dir` (an empty log
    /// whose names are durable, see `crate::spares`), unsynced like
    /// [`Session::create_files_with`].
    pub(crate) fn write_created(
        dir: &Path,
        workspace: Option<String>,
        config: LogConfig,
    ) -> Result<(), EngineError> {
        write_created_with(dir, workspace, None, &config, Log::write_first_unsynced)
    }

    /// For a Session holding only its `sessionCreated` (as created, files written unsynced):
    /// its first commit also calls `names` (which syncs the log's directory, the Session's
    /// and `sessions/`), so nothing of it is acknowledged before its files are reachable.
    pub(crate) fn sync_names_at_first_commit(&self, names: logbook_log::NameSync) {
        self.log.sync_names_at_first_commit(names);
    }

    /// Opens a Session's files with this log configuration (the segment size is a Root option).
    /// `base` is the source prefix of a layered fork (from its Root log record); `diags` the
    /// Session's diagnostics log.
    pub(crate) fn open_with(
        id: &str,
        dir: &Path,
        config: LogConfig,
        base: Option<Base>,
        progress: ProgressSink,
        diags: Arc<DiagLog>,
        read_only: bool,
    ) -> Result<Session, EngineError> {
        let seq_path = dir.join("seq.idx");
        let seq_opened = open_index(&seq_path, SEQ_TAG, SEQ_ENTRY_BYTES, read_only);
        // No `seq.idx` (a Session never checkpointed, or one whose index was lost or refused):
        // `seq.idx` and `row.idx` are rebuilt from the log and kept in memory until the first
        // checkpoint gives them files (see `sync_and_checkpoint`), so a small Session has
        // neither. `receipt.idx`, when there, is the evidence that a batch was acknowledged
        // (`Session::referenced`, the registry's `lost_creation`); when it gets its file, see
        // `sync_and_checkpoint`.
        let in_memory = !read_only && seq_opened.is_none();
        let receipt_path = dir.join("receipt.idx");
        let receipts_found = open_index(&receipt_path, RECEIPT_TAG, RECEIPT_ENTRY_BYTES, read_only);
        let referenced = if config.durability == Durability::Sync && !read_only {
            Self::referenced(seq_opened.as_ref(), receipts_found.as_ref())
        } else {
            None
        };
        let seq_found = seq_opened.filter(whole);
        // The checkpoint's maps are checked at their first use, which reports damage to the
        // Session (out of service, opened again from the log). A reader's Session is never
        // retired for it (it cannot remove the checkpoint), so it checks them now.
        let damaged = Arc::new(AtomicBool::new(false));
        let (state, cover) =
            State::load_covering(&dir.join("state.ckpt"), &damaged, read_only).unwrap_or_default();
        // The checkpoint's last event was durable in the log when the checkpoint was written
        // (`sync_indexes` syncs the log first), so the log need only check what follows it.
        // The log proves the mark is a record before using it; `resume_point` below checks
        // that it is this event.
        let mark = seq_found.as_ref().and_then(|ix| {
            let c = state.revision;
            let e = ix.get(c.checked_sub(1)?).ok()??;
            Some(entry_loc(e, 0))
        });
        let log_dir = dir.join("log");
        let (log, recovery) = if read_only {
            let log = Log::open_read_only(&log_dir, config, mark)?;
            (log, logbook_log::Recovery::default())
        } else {
            Log::open_referenced(&log_dir, config, mark, referenced)?
        };
        let cut = crate::params::CutNote::of(Some(id), &recovery);
        let (seq, f1) = match seq_found {
            Some(ix) => (ix, false),
            None => (
                fresh_index(&seq_path, SEQ_TAG, SEQ_ENTRY_BYTES, read_only || in_memory)?,
                true,
            ),
        };
        let rows_path = dir.join("row.idx");
        let rows_found = (!in_memory)
            .then(|| open_index(&rows_path, ROW_TAG, ROW_ENTRY_BYTES, read_only))
            .flatten();
        let (rows, f2) = match rows_found.filter(whole) {
            Some(ix) => (ix, false),
            // Missing, damaged, foreign, torn: derived data, so start it over.
            None => (
                fresh_index(&rows_path, ROW_TAG, ROW_ENTRY_BYTES, read_only || in_memory)?,
                true,
            ),
        };
        // None found (a new Session's first open, or one lost or refused): rebuilt from the log
        // in memory, given its file by the first sync that has an entry to write (see
        // `sync_and_checkpoint`), so a new Session's first commit creates no index file.
        let (receipts, f3) = match receipts_found.filter(whole) {
            Some(ix) => (ix, false),
            None => (
                fresh_index(&receipt_path, RECEIPT_TAG, RECEIPT_ENTRY_BYTES, true)?,
                true,
            ),
        };
        let mut inner = Inner {
            seq,
            rows,
            receipts,
            state,
            base,
        };
        let source = inner.base.as_ref().map(|b| Arc::clone(&b.session));
        let start = Self::resume_point(&log, &mut inner, f1 || f2 || f3, cover)?;
        let session = Session {
            id: id.to_owned(),
            dir: dir.to_owned(),
            log,
            writer: Mutex::new(None),
            inner: RwLock::new(inner),
            revision: Mutex::new(0),
            appended: Condvar::new(),
            dirty: AtomicBool::new(false),
            damaged,
            cache: Mutex::new(EventCache::default()),
            search: SearchIndex::new(dir, read_only),
            fork_ops: Mutex::new(HashSet::new()),
            patch_ids: Mutex::new(None),
            diags,
            progress,
            search_on_search: AtomicBool::new(false),
            filter_tried: AtomicU64::new(0),
            cut,
            activity: std::sync::OnceLock::new(),
            sync: Mutex::new(SyncMark::default()),
            appended_bytes: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            last_use: AtomicU64::new(0),
            source,
            read_only,
            followed: Mutex::new(Followed::default()),
        };
        session.replay_tail(start)?;
        if session.read().state.maps_damaged() {
            // The replayed tail needed the checkpoint's maps and found them damaged: the state
            // and the indexes are rebuilt from the whole log instead, as with no checkpoint.
            session.damaged.store(false, Ordering::Release);
            remove_checkpoint(dir)?;
            session.write().start_over()?;
            session.replay_tail(None)?;
        }
        session.followed.lock().expect("fresh lock").end = session.log.end();
        {
            // Damage found by the open itself was repaired above (the indexes were cut back or
            // rebuilt); an entry found damaged from now on takes the Session out of service,
            // and the Root opens it again with every index rebuilt (see `needs_reopen`).
            let mut guard = session.write();
            let inner = &mut *guard;
            for ix in [&mut inner.seq, &mut inner.rows, &mut inner.receipts] {
                ix.report_damage_to(Arc::clone(&session.damaged));
            }
        }
        let rev = session.read().state.revision;
        if rev == 0 {
            return Err(EngineError::corrupt(
                &session.dir,
                "the Session log holds no sessionCreated event",
            ));
        }
        *session.revision.lock().expect("revision lock") = rev;
        Ok(session)
    }

    /// The newest log Location that a durable index entry refers to: under
    /// [`Durability::Sync`] an entry is written only after the record it names was synced, so
    /// the log may never lose that record to a torn-tail cut.
    fn referenced(seq: Option<&FixedIndex>, receipts: Option<&FixedIndex>) -> Option<Location> {
        let last = |ix: Option<&FixedIndex>, at: usize| {
            let ix = ix?;
            // A damaged last entry proves nothing (the index is rebuilt when it is read).
            Some(entry_loc(ix.get(ix.len().checked_sub(1)?).ok()??, at))
        };
        last(seq, 0).max(last(receipts, 8))
    }

    /// Cuts the indexes back to what the checkpoint covers and returns where to scan from
    /// (`None` = from the start; `Some((loc, r, last))` = after the covered event at `loc`,
    /// whose receipts from entry `r` on are checked against the log's instead of being cut;
    /// `last` when that event is the log's last record, so there is nothing to scan).
    fn resume_point(
        log: &Log,
        inner: &mut Inner,
        fresh_index: bool,
        cover: crate::state::Coverage,
    ) -> Result<Option<(Location, u64, bool)>, EngineError> {
        let c = inner.state.revision;
        let own = c.saturating_sub(inner.seq_base());
        // A layered fork's checkpoint must cover at least one own event: the resume point is
        // an event of the own log. An index entry read here that fails its checksum makes
        // the indexes untrusted like a missing file does: they are rebuilt from the log.
        let resume = || -> Result<Option<(Location, u64, u64, bool)>, IndexError> {
            if own == 0
                || fresh_index
                || inner.seq.len() < own
                || inner.rows.len() < cover.rows
                || inner.receipts.len() < cover.receipts
            {
                return Ok(None);
            }
            let Some(loc_c) = inner.location(c)? else {
                return Ok(None);
            };
            let end = log.end();
            if loc_c >= end {
                return Ok(None);
            }
            let Some(next) = Self::after_event_at(log, loc_c, c) else {
                return Ok(None);
            };
            let keep_rows = match Self::rows_covered(inner, c, cover.rows)? {
                Some(n) => n,
                None => inner.rows_through(c)? - inner.row_base(),
            };
            // Receipts after the covered event (its own batch's receipt, typically) are not
            // cut here: the replay compares them with the log's and cuts only where they
            // differ, so an open that finds nothing new writes nothing.
            let keep_receipts = inner
                .receipts
                .partition_point(|e| entry_loc(e, 8) <= loc_c)?;
            Ok(Some((loc_c, keep_rows, keep_receipts, next == end)))
        };
        let Some((loc_c, keep_rows, keep_receipts, last)) = resume().ok().flatten() else {
            inner.start_over()?;
            return Ok(None);
        };
        inner.seq.truncate(own)?;
        inner.rows.truncate(keep_rows)?;
        Ok(Some((loc_c, keep_receipts, last)))
    }

    /// The checkpoint's own row count `rows` when the row index agrees that it ends at event
    /// `c` (its entry before is of `c` or earlier, its entry there of a later event): two
    /// entries read instead of a search of the index. `None` when they do not agree.
    fn rows_covered(inner: &Inner, c: u64, rows: u64) -> Result<Option<u64>, IndexError> {
        let seq_of = |i: u64| -> Result<Option<u64>, IndexError> {
            Ok(inner.rows.get(i)?.map(|e| RowEntry::key(e).0))
        };
        let before = match rows.checked_sub(1) {
            Some(i) => seq_of(i)?.is_some_and(|s| s <= c),
            None => false,
        };
        let after = rows >= inner.rows.len() || seq_of(rows)?.is_some_and(|s| s > c);
        Ok((before && after).then_some(rows))
    }

    /// Where the record after event `sequence` starts, when the record at `loc` is that event.
    fn after_event_at(log: &Log, loc: Location, sequence: u64) -> Option<Location> {
        // Borrowed from the log's bytes: only the first field is looked at.
        match log.reader().read_next(loc) {
            // The sequence is the record's first field: the event itself need not be decoded
            // (the record's CRC was checked by the read).
            Ok((r, next)) if r.kind == records::KIND_EVENT => {
                postcard::take_from_bytes::<u64>(r.payload)
                    .is_ok_and(|(s, _)| s == sequence)
                    .then_some(next)
            }
            _ => None,
        }
    }

    fn replay_tail(&self, from: Option<(Location, u64, bool)>) -> Result<(), EngineError> {
        match from {
            // The covered event is the log's last record (its batch wrote no receipt: a bulk
            // load, an import): nothing to take in, only receipt entries the log does not
            // hold to cut.
            Some((_, r, true)) => self.replay(None, true, Some(r)),
            Some((loc, r, false)) => self.replay(Some(loc), true, Some(r)),
            None => self.replay(Some(self.log.start()), false, Some(0)),
        }
    }

    /// Takes the log's records from `start` on into the indexes and state (skipping the one
    /// at `start` when `skip_first`: it is covered already; `None`: no record to take in);
    /// receipts are compared with the index's from entry `receipt_at` on (`None`: appended
    /// after the ones it holds).
    fn replay(
        &self,
        start: Option<Location>,
        skip_first: bool,
        receipt_at: Option<u64>,
    ) -> Result<(), EngineError> {
        let segment_bytes = self.log.segment_bytes_max();
        let mut inner = self.write();
        let mut receipt_at = receipt_at.unwrap_or_else(|| inner.receipts.len());
        let log_path = self.log.dir().to_owned();
        let mut replayed = !skip_first;
        let mut replayed_bytes = 0u64;
        // Log positions as one byte count (segments counted as full): enough for a progress bar.
        let pos = |l: Location| {
            l.segment
                .saturating_mul(segment_bytes)
                .saturating_add(l.offset)
        };
        let end = self.log.end();
        let origin = pos(start.unwrap_or(end));
        let mut task = self.progress.task(
            || format!("rebuilding the indexes of Session {}", self.id),
            pos(end).saturating_sub(origin),
            ProgressUnit::Bytes,
        );
        // A replay may pass over the whole log (a rebuild, an import): it streams, so the
        // blocks it reads neither fill the shared block cache nor stay mapped. A short one
        // (a small Session opened by a search, a read or its first append) leaves its blocks
        // in the cache, the first to go, so the reads that follow it (the search tail's rows,
        // a page's rows) do not decompress them again; it maps nothing (`Log::short_scan`).
        let short = match start {
            Some(s) => {
                replay_bytes(&self.log, s, REPLAY_CACHED_BYTES_MAX)? <= REPLAY_CACHED_BYTES_MAX
            }
            None => true,
        };
        let scan = start.map(|s| {
            if short {
                self.log.short_scan(s)
            } else {
                self.log.streaming_scan(s)
            }
        });
        for (n, item) in scan.into_iter().flatten().enumerate() {
            let (loc, record, _) = item?;
            if n == 0 && skip_first {
                continue;
            }
            if record.kind != records::KIND_RECEIPT {
                replayed = true;
            }
            replayed_bytes += record.payload.len() as u64;
            task.advance(pos(loc).saturating_sub(origin));
            match record.kind {
                records::KIND_EVENT => {
                    let er: EventRecord =
                        records::decode(&log_path, "an event record", &record.payload)?;
                    let want = inner.state.revision + 1;
                    if er.sequence != want {
                        return Err(EngineError::corrupt(
                            &log_path,
                            format!(
                                "event at {loc:?} has sequence {} where {want} was expected",
                                er.sequence
                            ),
                        ));
                    }
                    inner.index_event(er.sequence, loc, &er.event);
                }
                records::KIND_RECEIPT => {
                    let r: Receipt =
                        records::decode(&log_path, "a receipt record", &record.payload)?;
                    let entry = receipt_entry(loc, &r.operation);
                    // A damaged entry is not this receipt: it is cut and written again.
                    if inner.receipts.get(receipt_at).ok().flatten() == Some(&entry[..]) {
                        // Already indexed (and durable): nothing to do for this one.
                        receipt_at += 1;
                        continue;
                    }
                    if inner.receipts.len() > receipt_at {
                        inner.receipts.truncate(receipt_at)?;
                    }
                    inner.receipts.push(&entry);
                    receipt_at += 1;
                    replayed = true;
                    continue;
                }
                records::KIND_FORK => {
                    // Everything before the marker was copied from the source Session: its
                    // receipts are the source's, and the marker's rules reset the state.
                    crate::layer::apply_marker(&log_path, loc, &record.payload, &mut inner.state)?;
                    inner.receipts.truncate(0)?;
                    receipt_at = inner.receipts.len();
                }
                other => {
                    return Err(EngineError::corrupt(
                        &log_path,
                        format!("unknown record kind {other} at {loc:?}"),
                    ))
                }
            }
        }
        if inner.receipts.len() > receipt_at {
            // Receipt entries the log does not hold (the index was ahead of a cut log).
            inner.receipts.truncate(receipt_at)?;
            replayed = true;
        }
        drop(inner);
        if replayed {
            self.dirty.store(true, Ordering::Release);
            // The replayed tail counts towards the next checkpoint, so that opens after
            // repeated crashes do not each replay more (at least 1: a repaired index is
            // checkpointed on close).
            self.appended_bytes
                .fetch_add(replayed_bytes.max(1), Ordering::AcqRel);
        }
        Ok(())
    }

    /// The derived state, for reads. A panic under the write lock may have left it half
    /// updated: that marks the Session failed (the Root reopens it from disk on the next
    /// call, and [`Session::check_live`] refuses calls on this object), but a read already
    /// under way is still answered from what is there, as it would have been a moment before.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| {
            self.failed.store(true, Ordering::Release);
            p.into_inner()
        })
    }

    /// [`Session::read`] that refuses a failed Session.
    fn read_checked(&self) -> Result<RwLockReadGuard<'_, Inner>, EngineError> {
        self.check_live()?;
        self.inner
            .read()
            .map_err(|_| self.fail("the lock over its indexes"))
    }

    /// The derived state, for changes; refuses it when a panic under the lock may have left
    /// it half updated. (Not `check_live`: a mutation whose batch is in the log finishes
    /// indexing it even when the Session is being retired meanwhile.)
    fn write_checked(&self) -> Result<RwLockWriteGuard<'_, Inner>, EngineError> {
        self.inner
            .write()
            .map_err(|_| self.fail("the lock over its indexes"))
    }

    /// The write lock at open, before the Session is shared (no one else can have panicked).
    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the Session failed after a panic poisoned `what`, and says so.
    fn fail(&self, what: &str) -> EngineError {
        self.failed.store(true, Ordering::Release);
        self.failed_error(&format!("a panic while holding {what}"))
    }

    fn failed_error(&self, why: &str) -> EngineError {
        EngineError::corrupt(
            &self.dir,
            format!(
                "Session {} is out of service in memory ({why}), so its indexes may be half \
                 updated; nothing is served from them. It is reopened from its log on the next \
                 call: retry (a repeated mutation is answered from its receipt if it was stored)",
                self.id
            ),
        )
    }

    /// Fails (`corrupt`, naming the Session) when the Session was marked failed. One atomic
    /// load: read paths call it.
    pub(crate) fn check_live(&self) -> Result<(), EngineError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(self.failed_error("marked failed"));
        }
        Ok(())
    }

    /// True when this object must be replaced by a Session opened again from disk: it was
    /// marked failed, an index of it was found damaged, a panic poisoned one of its locks, its
    /// log refuses appends after a failed write or fdatasync, or (a layered fork) its source
    /// must be. Atomic loads only: the Root asks on every call.
    pub(crate) fn needs_reopen(&self) -> bool {
        self.failed.load(Ordering::Acquire)
            || self.damaged.load(Ordering::Acquire)
            || self.source.as_ref().is_some_and(|s| s.needs_reopen())
            || self.inner.is_poisoned()
            || self.writer.is_poisoned()
            || self.log.is_poisoned()
    }

    /// Takes this object out of service before the Session is opened again from disk: no
    /// mutation or sync runs on it from now on, none is under way when this returns, its log
    /// seals nothing more, and bytes its log wrote but never synced are cut (see
    /// `Log::cut_unsynced`), so the new open trusts only what reached the disk.
    pub(crate) fn retire(&self) -> Result<(), EngineError> {
        self.failed.store(true, Ordering::Release);
        drop(self.sync.lock().unwrap_or_else(|p| p.into_inner()));
        // A mutation that passed its check before `failed` was set may still hold the writer
        // lock; wait for it, but only so long: the caller may be that very thread (opening a
        // fork's source from inside a mutation of the source), which must get an error, not
        // a deadlock.
        let deadline = std::time::Instant::now() + RETIRE_WAIT_MAX;
        loop {
            match self.writer.try_lock() {
                Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => break,
                Err(std::sync::TryLockError::WouldBlock) => {
                    if std::time::Instant::now() >= deadline {
                        return Err(EngineError::Busy {
                            path: self.dir.clone(),
                        });
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
        self.log.wait_for_sealing();
        if self.log.is_poisoned() {
            self.log.cut_unsynced()?;
        }
        if self.damaged.load(Ordering::Acquire) && !self.read_only {
            // No sync is under way (the sync lock was taken above) and none starts on a
            // damaged Session, so no checkpoint can come back after this: the next open
            // rebuilds every index from the log.
            remove_checkpoint(&self.dir)?;
        }
        Ok(())
    }

    /// True when the indexes hold entries that a sync has not written yet.
    pub(crate) fn indexes_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Records a use at `tick` of the Root's use counter (for the open-Session cache).
    pub(crate) fn touch(&self, tick: u64) {
        self.last_use.store(tick, Ordering::Relaxed);
    }

    /// The Root's use counter at the last [`Session::touch`].
    pub(crate) fn last_use(&self) -> u64 {
        self.last_use.load(Ordering::Relaxed)
    }

    /// Roughly the memory this open Session holds: decoded events in its cache, the mapped
    /// bytes of its three fixed-width indexes, its search index's (loaded postings files,
    /// whose pages a search's lookups keep resident while the Session is open, postings not
    /// yet written, and its search tail), and its small sealed log files (read whole into
    /// memory by their open). Log blocks are the Root's block cache's.
    pub(crate) fn resident_bytes(&self) -> u64 {
        let cached = lock_cache(&self.cache).bytes as u64;
        let postings = self.search.resident_bytes();
        let sealed = self.log.small_sealed_bytes();
        let inner = self.read();
        let mapped = inner.seq.len() * u64::from(SEQ_ENTRY_BYTES)
            + inner.rows.len() * u64::from(ROW_ENTRY_BYTES)
            + inner.receipts.len() * u64::from(RECEIPT_ENTRY_BYTES);
        cached + mapped + postings + sealed
    }

    /// Closes the Session as the Root's close does, before its last reference goes: indexes
    /// synced, state checkpointed, a large search tail saved, so the next open replays
    /// nothing and indexes nothing again. Best effort: everything here is derived from the
    /// log, so what fails is rebuilt by that open.
    pub(crate) fn close(&self, close: &Closing) {
        self.close_with(close, false);
    }

    /// [`Session::close`], also for the Root's close (`may_sync`: the log may be synced to
    /// save the search tail). First asks the log to seal its newest segment once closed (see
    /// [`Closing::seal_bytes_min`]), then syncs the indexes (a sealed segment needs no
    /// `receipt.idx` as evidence, see [`Checkpoint::CloseSealing`]) and saves the search
    /// tail; a tail of a segment that the seal finishes is saved as that segment's postings.
    pub(crate) fn close_with(&self, close: &Closing, may_sync: bool) {
        if self.read_only {
            // Nothing of it is written: its memory goes with it.
            return;
        }
        // A newest segment past `SEAL_ON_CLOSE_BYTES_MAX` belongs to a large, busy Session:
        // it is sealed when it rolls, and its recent pages stay readable without a
        // decompression meanwhile.
        let sealing = close.seal_bytes_min != u64::MAX
            && self.log.end().offset <= SEAL_ON_CLOSE_BYTES_MAX
            && self.log.seal_when_closed(close.seal_bytes_min);
        let _ = self.sync_indexes(if sealing {
            Checkpoint::CloseSealing
        } else {
            Checkpoint::Close
        });
        self.refresh_filter_if_indexed();
        self.search
            .save_tail(self, close.tail_pairs_min, may_sync, sealing);
    }

    /// From now on appends do not index their rows for search; the next search catches up.
    pub(crate) fn index_search_on_search(&self) {
        self.search_on_search.store(true, Ordering::Release);
    }

    pub(crate) fn log(&self) -> &Log {
        &self.log
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Event `sequence`, from the cache or the log (decoded and then cached).
    pub(crate) fn event_arc(
        &self,
        inner: &Inner,
        sequence: u64,
    ) -> Result<Arc<Event>, EngineError> {
        if let Some(b) = inner.base_of_seq(sequence) {
            // Below the fence: the source's event (cached there, not twice).
            return b.session.event_arc(&b.session.read(), sequence);
        }
        if let Some(e) = lock_cache(&self.cache).get(sequence) {
            return Ok(e);
        }
        let (event, size) = self.read_event_uncached(inner, sequence)?;
        let event = Arc::new(event);
        lock_cache(&self.cache).insert(sequence, Arc::clone(&event), size);
        Ok(event)
    }

    /// Reads and decodes event `sequence` (which must be `<=` the revision).
    pub(crate) fn event_at(&self, inner: &Inner, sequence: u64) -> Result<Event, EngineError> {
        Ok(Event::clone(&*self.event_arc(inner, sequence)?))
    }

    /// Calls `f` with the rows event `sequence` publishes. With `keep`, the event comes from the
    /// cache (read, decoded and cached when missing and read before, see [`EventCache`]);
    /// without, or on its first read, the record is read through
    /// `reader` and decoded with its texts borrowed from the bytes the log read (no copy but
    /// the ones `f` makes). Bulk reads pass `keep = false`, so they do not push the recently
    /// used events out of the cache, and one `reader` for all their events, so records next
    /// to each other are read together.
    pub(crate) fn with_event_rows<'s, R>(
        &'s self,
        inner: &Inner,
        sequence: u64,
        keep: bool,
        reader: &mut Option<Reader<'s>>,
        f: impl FnOnce(&[RowSource<'_>]) -> R,
    ) -> Result<R, EngineError> {
        if let Some(b) = inner.base_of_seq(sequence) {
            // Below the fence: the source's event, read the source's way.
            return b
                .session
                .with_event_rows(&b.session.read(), sequence, keep, &mut None, f);
        }
        if keep {
            let mut cache = lock_cache(&self.cache);
            let cached = cache.get(sequence);
            let again = cached.is_none() && cache.read_before(sequence);
            drop(cache);
            if let Some(e) = cached {
                return Ok(f(&rows_of(&e)));
            }
            if again {
                let e = self.event_arc(inner, sequence)?;
                return Ok(f(&rows_of(&e)));
            }
        }
        // Without `keep` the cache is not looked at either: reading the record through the
        // bulk reader costs less than taking the cache's lock for every event of a long run.
        // With it, an event read for the first time comes this way too (see `EventCache`).
        let loc = self.location_of(inner, sequence)?;
        let record = reader
            .get_or_insert_with(|| self.log.reader())
            .read(loc)
            .map_err(|e| self.read_failed(sequence, loc, e))?;
        self.check_event_kind(sequence, loc, record.kind)?;
        let (held, rows) = crate::event::event_record_rows(record.payload).map_err(|e| {
            EngineError::corrupt(
                self.log.dir(),
                format!("cannot decode an event record: {e}"),
            )
        })?;
        if held != sequence {
            let why = format!("the record there holds event {held}");
            return Err(self.damaged_index(sequence, loc, &why));
        }
        Ok(f(&rows))
    }

    /// Calls `f` with the stored record payload of every event `from..=to` (at most the
    /// revision), in order: a base's events through the source's own log. Events under a
    /// fence never change, so the index lock is taken per run of events, not for the whole
    /// walk, and appends go on meanwhile.
    pub(crate) fn for_each_event_payload(
        &self,
        from: u64,
        to: u64,
        f: &mut impl FnMut(u64, &[u8]) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        const RUN: u64 = 4096;
        let base = {
            let inner = self.read_checked()?;
            inner
                .base
                .as_ref()
                .map(|b| (Arc::clone(&b.session), b.through))
        };
        let mut at = from;
        if let Some((source, through)) = base {
            if at <= through {
                source.for_each_event_payload(at, to.min(through), f)?;
                at = through + 1;
            }
        }
        // One pass over the whole history (an export): read in about a block of memory.
        let mut reader = self.log.streaming_reader();
        let mut locs = Vec::new();
        while at <= to {
            let end = to.min(at + RUN - 1);
            locs.clear();
            {
                let inner = self.read_checked()?;
                for q in at..=end {
                    locs.push(self.location_of(&inner, q)?);
                }
            }
            for (q, loc) in (at..=end).zip(locs.iter().copied()) {
                let record = reader.read(loc).map_err(|e| self.read_failed(q, loc, e))?;
                self.check_event_kind(q, loc, record.kind)?;
                let held = postcard::take_from_bytes::<u64>(record.payload).map(|(s, _)| s);
                if held != Ok(q) {
                    return Err(self.damaged_index(q, loc, "the record there holds another event"));
                }
                f(q, record.payload)?;
            }
            at = end + 1;
        }
        Ok(())
    }

    /// Calls `f` with every receipt of this Session's own log that lies before `cutoff` (all
    /// of them for None), in log order, as stored and decoded.
    pub(crate) fn for_each_receipt(
        &self,
        cutoff: Option<Location>,
        mut f: impl FnMut(&[u8], Receipt) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let locs: Vec<Location> = {
            let inner = self.read_checked()?;
            let mut locs = Vec::new();
            for i in 0..inner.receipts.len() {
                if let Some(e) = inner.receipts.get(i)? {
                    locs.push(entry_loc(e, 8));
                }
            }
            locs
        };
        let log_path = self.log.dir().to_owned();
        // One pass over the whole history (an export): read in about a block of memory.
        let mut reader = self.log.streaming_reader();
        for loc in locs.into_iter().filter(|l| cutoff.is_none_or(|c| *l < c)) {
            let record = reader.read(loc)?;
            if record.kind != records::KIND_RECEIPT {
                return Err(EngineError::corrupt(
                    self.dir.join("receipt.idx"),
                    format!("its entry points at {loc:?}, which is not a receipt"),
                ));
            }
            let r: Receipt = records::decode(&log_path, "a receipt record", record.payload)?;
            f(record.payload, r)?;
        }
        Ok(())
    }

    /// Where the first own event after `through` lies: receipts before it were written while
    /// the Session was at most at `through`. `Some(start)` when that event is in the base (no
    /// own record precedes it), None when there is no such event yet.
    pub(crate) fn own_cutoff(&self, through: u64) -> Result<Option<Location>, EngineError> {
        let inner = self.read_checked()?;
        if through < inner.seq_base() {
            return Ok(Some(Location {
                segment: 0,
                offset: 0,
            }));
        }
        Ok(inner.location(through + 1)?)
    }

    fn location_of(&self, inner: &Inner, sequence: u64) -> Result<Location, EngineError> {
        inner.location(sequence)?.ok_or_else(|| {
            EngineError::not_found(format!("event {sequence} of Session {}", self.id))
        })
    }

    fn check_event_kind(&self, sequence: u64, loc: Location, kind: u8) -> Result<(), EngineError> {
        if kind == records::KIND_EVENT {
            Ok(())
        } else {
            Err(self.damaged_index(sequence, loc, "the record there is not an event"))
        }
    }

    /// The payload of event `sequence`'s record (checked to be an event record).
    fn read_event_record(
        &self,
        inner: &Inner,
        sequence: u64,
    ) -> Result<(Location, Vec<u8>), EngineError> {
        let loc = self.location_of(inner, sequence)?;
        let record = self
            .log
            .read(loc)
            .map_err(|e| self.read_failed(sequence, loc, e))?;
        self.check_event_kind(sequence, loc, record.kind)?;
        Ok((loc, record.payload))
    }

    fn read_event_uncached(
        &self,
        inner: &Inner,
        sequence: u64,
    ) -> Result<(Event, usize), EngineError> {
        let (loc, payload) = self.read_event_record(inner, sequence)?;
        let er: EventRecord = records::decode(self.log.dir(), "an event record", &payload)?;
        if er.sequence != sequence {
            let why = format!("the record there holds event {}", er.sequence);
            return Err(self.damaged_index(sequence, loc, &why));
        }
        Ok((er.event, payload.len()))
    }

    /// A read of event `sequence` at `loc` (from `seq.idx`) failed. Index entries carry
    /// checksums checked when read and name records that were durable when written, so a
    /// failure inside the log is the log's damage: answered as such, and nothing derived is
    /// deleted to make it go away (the indexes are the proof of what the log held). Only an
    /// entry pointing past the log's end is the index's fault.
    fn read_failed(&self, sequence: u64, loc: Location, e: logbook_log::LogError) -> EngineError {
        if loc >= self.log.end() {
            return self.damaged_index(sequence, loc, &e.to_string());
        }
        e.into()
    }

    /// The sequence index named a location that does not hold the event: the index (derived)
    /// is damaged. Drops the checkpoint and marks the Session, so its next use opens it again
    /// with every index rebuilt from the log, and reports `corrupt` naming the index, so the
    /// client is not told its request was wrong.
    fn damaged_index(&self, sequence: u64, loc: Location, why: &str) -> EngineError {
        let index = self.dir.join("seq.idx");
        self.damaged.store(true, Ordering::Release);
        let _ = remove_checkpoint(&self.dir);
        EngineError::corrupt(
            &index,
            format!(
                "its entry for event {sequence} points at {loc:?}, but {why}; the index is derived \
                 and is rebuilt from the log when the Session is next opened"
            ),
        )
    }

    /// The writer lock (mutations, receipt lookups). A panic under it (in a mutation's build
    /// closure, or between its log append and its index update) may have left the receipt
    /// map or the indexes short of a batch the log holds: a retry would then write the same
    /// sequence again. So a poisoned lock marks the Session failed and refuses.
    fn writer(&self) -> Result<MutexGuard<'_, Option<ReceiptMap>>, EngineError> {
        if self.read_only {
            return Err(EngineError::ReadOnly {
                path: self.dir.clone(),
            });
        }
        self.check_live()?;
        let guard = self
            .writer
            .lock()
            .map_err(|_| self.fail("its writer lock"))?;
        // Retired (or failed) while this call waited for the lock.
        self.check_live()?;
        Ok(guard)
    }

    fn load_receipts(&self) -> Result<ReceiptMap, EngineError> {
        let inner = self.read_checked()?;
        let mut m: ReceiptMap = HashMap::new();
        for i in 0..inner.receipts.len() {
            let e = inner.receipts.get(i)?.expect("i < len");
            let hash = u64::from_le_bytes(e[0..8].try_into().expect("8 bytes"));
            m.entry(hash).or_default().push(entry_loc(e, 8));
        }
        Ok(m)
    }

    /// Rebuilds every index and the state from the log, in place, after an index entry was
    /// found damaged. The caller holds the writer lock (no mutation runs); readers wait on
    /// the index lock meanwhile. The damage mark is cleared: what it named is gone.
    fn rebuild_indexes(&self) -> Result<(), EngineError> {
        self.write_checked()?.start_over()?;
        self.replay_tail(None)?;
        self.damaged.store(false, Ordering::Release);
        Ok(())
    }

    /// The receipt map, loaded on first use (and, when a receipt entry fails its checksum,
    /// loaded again after the indexes are rebuilt from the log).
    fn receipt_map<'m>(
        &self,
        map: &'m mut Option<ReceiptMap>,
    ) -> Result<&'m ReceiptMap, EngineError> {
        if map.is_none() {
            let loaded = self.load_receipts();
            let loaded = match loaded {
                Err(EngineError::Index(e)) if e.kind() == logbook_index::ErrorKind::Corrupt => {
                    // A receipt entry failed its checksum. The caller holds the writer lock,
                    // so no mutation runs meanwhile: rebuild the indexes from the log here and
                    // load again, rather than fail a mutation over derived data.
                    self.rebuild_indexes()?;
                    self.load_receipts()
                }
                other => other,
            };
            *map = Some(loaded?);
        }
        Ok(map.as_ref().expect("loaded above"))
    }

    /// The receipt record at `loc` (a Location the receipt map names).
    fn read_receipt(&self, loc: Location) -> Result<Receipt, EngineError> {
        let record = self.log.read(loc)?;
        if record.kind != records::KIND_RECEIPT {
            return Err(EngineError::corrupt(
                self.log.dir(),
                format!("record at {loc:?} is not a receipt"),
            ));
        }
        records::decode(self.log.dir(), "a receipt record", &record.payload)
    }

    /// Finds the receipt of `operation`, loading the receipt map on first use.
    fn find_receipt(
        &self,
        map: &mut Option<ReceiptMap>,
        operation: &str,
    ) -> Result<Option<Receipt>, EngineError> {
        let m = self.receipt_map(map)?;
        for loc in m
            .get(&records::operation_hash(operation))
            .into_iter()
            .flatten()
        {
            let r = self.read_receipt(*loc)?;
            if r.operation == operation {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// The stored receipt of `operation` in this Session, if any; Conflict when the operation
    /// recorded a diagnostic instead.
    pub(crate) fn receipt(&self, operation: &str) -> Result<Option<Receipt>, EngineError> {
        let mut map = self.writer()?;
        let receipt = self.find_receipt(&mut map, operation)?;
        if receipt.is_none() {
            self.refuse_diagnostic_op(operation)?;
        }
        Ok(receipt)
    }

    /// The Session's diagnostics log.
    pub(crate) fn diags(&self) -> &Arc<DiagLog> {
        &self.diags
    }

    /// Fails with Conflict when `operation` recorded a diagnostic in this Session (its receipt
    /// is in the diagnostics log, not in this log). Called under the writer lock, so that no
    /// `recordDiagnostic` can store that receipt until the caller's mutation is committed, and
    /// never under `inner`: the diagnostics lock comes after both.
    fn refuse_diagnostic_op(&self, operation: &str) -> Result<(), EngineError> {
        match self.diags.recorded(operation)? {
            None => Ok(()),
            Some(id) => Err(EngineError::conflict(format!(
                "operation {operation:?} already recorded diagnostic {id} in Session {}; \
                 use a new operation for a new request",
                self.id
            ))),
        }
    }

    /// Runs `f` under the writer lock (no mutation of this Session runs meanwhile) with whether
    /// `operation` already has a receipt in this log or made a fork of this Session. For
    /// `recordDiagnostic`, which stores its receipt in the diagnostics log before `f` returns.
    pub(crate) fn with_operation<R>(
        &self,
        operation: &str,
        f: impl FnOnce(bool) -> Result<R, EngineError>,
    ) -> Result<R, EngineError> {
        let mut map = self.writer()?;
        let used = self.find_receipt(&mut map, operation)?.is_some() || self.is_fork_op(operation);
        f(used)
    }

    /// True when `operation` made a layered fork of this Session (its receipt is the fork's
    /// Root log record, not a receipt in this log).
    pub(crate) fn is_fork_op(&self, operation: &str) -> bool {
        self.fork_ops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(operation)
    }

    /// True when this Session stored the patch `patch_id` (a `snapshotPatch` receipt names
    /// it). The first call reads every receipt of the Session, under the writer lock; later
    /// ones, and patches stored since ([`Session::note_patch`]), are answered from memory.
    pub(crate) fn stored_patch(&self, patch_id: &str) -> Result<bool, EngineError> {
        let mut ids = self.patch_ids.lock().unwrap_or_else(|p| p.into_inner());
        if ids.is_none() {
            let mut map = self.writer()?;
            let mut found = HashSet::new();
            for loc in self.receipt_map(&mut map)?.values().flatten() {
                if let Outcome::Patch { patch_id, .. } = self.read_receipt(*loc)?.outcome {
                    found.insert(patch_id);
                }
            }
            *ids = Some(found);
        }
        Ok(ids.as_ref().is_some_and(|ids| ids.contains(patch_id)))
    }

    /// Records that this Session stored patch `patch_id` (see [`Session::stored_patch`]).
    pub(crate) fn note_patch(&self, patch_id: &str) {
        let mut ids = self.patch_ids.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ids) = ids.as_mut() {
            ids.insert(patch_id.to_owned());
        }
    }

    /// Records that `operation` made a layered fork of this Session (see `fork_ops`).
    pub(crate) fn add_fork_op(&self, operation: &str) {
        self.fork_ops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(operation.to_owned());
    }

    /// Runs `f` under the writer lock (no mutation of this Session runs meanwhile) with the
    /// state and the stored receipt of `operation`, if any. Conflict, without running `f`,
    /// when the operation recorded a diagnostic instead.
    pub(crate) fn with_writer<R>(
        &self,
        operation: &str,
        f: impl FnOnce(&State, Option<Receipt>) -> Result<R, EngineError>,
    ) -> Result<R, EngineError> {
        let mut map = self.writer()?;
        let receipt = self.find_receipt(&mut map, operation)?;
        if receipt.is_none() {
            self.refuse_diagnostic_op(operation)?;
        }
        let inner = self.read_checked()?;
        f(&inner.state, receipt)
    }

    /// Applies a mutation once: a repeat with the same parameters returns the stored outcome,
    /// with other parameters fails with Conflict. Events and receipt go in one log batch.
    pub(crate) fn mutate(&self, m: Mutation<'_>) -> Result<Outcome, EngineError> {
        self.mutate_or_legacy(m, None)
    }

    /// [`Session::mutate`], where a stored receipt also counts as a repeat when its parameter
    /// digest equals `legacy()`: the digest an older build computed for the same parameters
    /// (called only when a receipt is found whose digest differs from `m.params`).
    pub(crate) fn mutate_or_legacy(
        &self,
        m: Mutation<'_>,
        legacy: Option<&dyn Fn() -> [u8; 32]>,
    ) -> Result<Outcome, EngineError> {
        let mut map = self.writer()?;
        if let Some(r) = self.find_receipt(&mut map, m.operation)? {
            if r.params == m.params || legacy.is_some_and(|f| f() == r.params) {
                return Ok(r.outcome);
            }
            return Err(EngineError::conflict(format!(
                "operation {:?} was already used in Session {} with other parameters; \
                 use a new operation for a new request",
                m.operation, self.id
            )));
        }
        if self.is_fork_op(m.operation) {
            return Err(EngineError::conflict(format!(
                "operation {:?} already forked Session {}; use a new operation for a new request",
                m.operation, self.id
            )));
        }
        self.refuse_diagnostic_op(m.operation)?;
        let (first, mut events, outcome) = {
            let inner = self.read_checked()?;
            let first = inner.state.revision + 1;
            let (events, outcome) = (m.build)(&inner.state, first)?;
            (first, events, outcome)
        };
        let n = events.len();
        for (i, p) in events.iter_mut().enumerate() {
            p.set_sequence(first + i as u64);
        }
        let receipt = records::encode(&Receipt {
            operation: m.operation.to_owned(),
            params: m.params,
            outcome: outcome.clone(),
        });
        let mut batch: Vec<Record<'_>> = events
            .iter()
            .map(|p| Record {
                kind: records::KIND_EVENT,
                payload: p.payload(),
            })
            .collect();
        batch.push(Record {
            kind: records::KIND_RECEIPT,
            payload: &receipt,
        });
        if let Some(a) = self.activity.get() {
            a.before_change()?;
        }
        let locs = self.log.append(&batch)?;
        #[cfg(test)]
        if tests::PANIC_AFTER_APPEND.with(|p| p.replace(false)) {
            panic!("injected: a panic between the log append and the index update");
        }
        let batch_bytes: u64 = batch.iter().map(|r| r.payload.len() as u64).sum();
        drop(batch);
        let (first_row, end_row);
        {
            let mut inner = self.write_checked()?;
            first_row = inner.row_count();
            for (i, p) in events.iter().enumerate() {
                inner.index_event(first + i as u64, locs[i], &p.event);
            }
            inner.index_receipt(locs[n], m.operation);
            end_row = inner.row_count();
            self.appended_bytes.fetch_add(batch_bytes, Ordering::AcqRel);
            // Journaled before the index lock is released, so no reader sees the commit
            // without it being journaled (see `crate::journal`).
            if let Some(a) = self.activity.get() {
                a.committed(&self.id, first);
            }
        }
        let sizes: Vec<usize> = events.iter().map(|p| p.payload().len()).collect();
        let events: Vec<Arc<Event>> = events.into_iter().map(|p| Arc::new(p.event)).collect();
        if !self.search_on_search.load(Ordering::Acquire) {
            self.search
                .appended(self, first_row, end_row, events.clone(), &locs);
        }
        if let Some(map) = map.as_mut() {
            map.entry(records::operation_hash(m.operation))
                .or_default()
                .push(locs[n]);
        }
        drop(map);
        {
            let mut cache = lock_cache(&self.cache);
            for (i, (event, size)) in events.into_iter().zip(sizes).enumerate() {
                cache.insert(first + i as u64, event, size);
            }
        }
        self.dirty.store(true, Ordering::Release);
        let last = first + n as u64 - 1;
        *self.revision.lock().unwrap_or_else(|p| p.into_inner()) = last.max(first - 1);
        self.appended.notify_all();
        Ok(outcome)
    }

    /// Blocks until the revision exceeds `after`, `timeout` passes or `ended` is set (see
    /// [`crate::Root::end_waits`]); returns the revision.
    pub(crate) fn wait_for(
        &self,
        after: u64,
        timeout: std::time::Duration,
        ended: &AtomicBool,
    ) -> u64 {
        let deadline = std::time::Instant::now() + timeout;
        if self.read_only {
            return self.poll_for(after, deadline, ended);
        }
        let mut rev = self.revision.lock().unwrap_or_else(|p| p.into_inner());
        // `ended` is read under the revision lock, and `wake_waiters` takes that lock after
        // it is set, so a waiter either sees it here or is already waiting when notified.
        while *rev <= after && !ended.load(Ordering::Acquire) {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            rev = self
                .appended
                .wait_timeout(rev, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *rev
    }

    /// [`Session::wait_for`] of a read-only Session: nobody here commits, so it looks at the
    /// log every [`REFRESH_INTERVAL`] until the revision passes `after`, the deadline comes or
    /// the waits end.
    fn poll_for(&self, after: u64, deadline: std::time::Instant, ended: &AtomicBool) -> u64 {
        loop {
            // A failed look is answered by the next read; the wait goes on.
            let _ = self.refresh();
            let rev = *self.revision.lock().unwrap_or_else(|p| p.into_inner());
            let now = std::time::Instant::now();
            if rev > after || ended.load(Ordering::Acquire) || now >= deadline {
                return rev;
            }
            std::thread::sleep(REFRESH_INTERVAL.min(deadline - now));
        }
    }

    /// True for a Session opened by a reader beside the Root's writer.
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// For a read-only Session: takes in the mutations its writer committed since the last
    /// look (whole log batches, so whole mutations), at most once per [`REFRESH_INTERVAL`].
    /// Its indexes and state grow in memory, its revision moves, its waiters wake and its
    /// catalog entry learns of the activity. A Session that writes has nothing to refresh.
    pub(crate) fn refresh(&self) -> Result<(), EngineError> {
        if !self.read_only {
            return Ok(());
        }
        let mut followed = self.followed.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        if followed
            .at
            .is_some_and(|at| now.duration_since(at) < REFRESH_INTERVAL)
        {
            return Ok(());
        }
        followed.at = Some(now);
        if !self.log.refresh()? {
            return Ok(());
        }
        let first = self.read().state.revision + 1;
        if let Err(e) = self.replay(Some(followed.end), false, None) {
            // Part of the new records may be in the indexes: this object is out of service,
            // and the next call opens the Session again.
            self.failed.store(true, Ordering::Release);
            return Err(e);
        }
        followed.end = self.log.end();
        let inner = self.write();
        let rev = inner.state.revision;
        if rev >= first {
            if let Some(a) = self.activity.get() {
                a.committed(&self.id, first);
            }
            *self.revision.lock().unwrap_or_else(|p| p.into_inner()) = rev;
            self.appended.notify_all();
        }
        drop(inner);
        Ok(())
    }

    /// Wakes every `watch` and `watchDiagnostics` waiting on this Session, so each checks
    /// its condition again (used once the Root's waits are ended).
    pub(crate) fn wake_waiters(&self) {
        drop(self.revision.lock().unwrap_or_else(|p| p.into_inner()));
        self.appended.notify_all();
        self.diags.wake_waiters();
    }

    /// Replays the whole log and checks every derived entry (sequence, row and receipt
    /// indexes, and the state) against it. O(history): this is `verify`, not `open`.
    pub(crate) fn verify_derived(&self) -> Result<(), EngineError> {
        let inner = self.read_checked()?;
        let rev = inner.state.revision;
        let ix = self.dir.join("index files");
        let mismatch = |what: String| {
            EngineError::corrupt(
                &ix,
                format!("{what}; delete the Session's .idx and .ckpt files to rebuild them"),
            )
        };
        // Entry checksums are checked when entries are read; a verify reads them all. A
        // damaged one marks the Session, so its next use rebuilds the indexes from the log.
        for ix in [&inner.seq, &inner.rows, &inner.receipts] {
            ix.check_all()?;
        }
        let mut state = match &inner.base {
            Some(b) => b.state_at_fence()?,
            None => State::default(),
        };
        let (mut row, mut receipt) = (inner.row_base(), 0u64);
        let mut receipts: Vec<(u64, Location)> = Vec::new();
        for item in self.log.scan(self.log.start()) {
            let (loc, record, _) = item?;
            match record.kind {
                records::KIND_EVENT => {
                    let er: EventRecord =
                        records::decode(self.log.dir(), "an event record", &record.payload)?;
                    if er.sequence > rev {
                        break;
                    }
                    if er.sequence != state.revision + 1 {
                        return Err(EngineError::corrupt(
                            self.log.dir(),
                            format!("event {} out of order at {loc:?}", er.sequence),
                        ));
                    }
                    let own = er.sequence.checked_sub(inner.seq_base() + 1);
                    if own.and_then(|i| inner.seq.get(i).ok().flatten())
                        != Some(&loc_entry(loc, kind_code(&er.event))[..])
                    {
                        return Err(mismatch(format!(
                            "seq.idx entry for event {} is wrong",
                            er.sequence
                        )));
                    }
                    for (i, r) in rows_of(&er.event).iter().enumerate() {
                        let hidden = r.internal
                            || (r.kind == RowKind::ToolResult
                                && r.tool_call_id.is_some_and(|id| state.is_internal_call(id)));
                        let want = RowEntry {
                            sequence: er.sequence,
                            item: i as u32,
                            kind: r.kind,
                            hidden,
                        };
                        if inner.row(row).ok().flatten() != Some(want) {
                            return Err(mismatch(format!(
                                "row.idx entry {row} is wrong (want {want:?})"
                            )));
                        }
                        row += 1;
                    }
                    state.apply(er.sequence, &er.event);
                }
                records::KIND_RECEIPT => {
                    let r: Receipt =
                        records::decode(self.log.dir(), "a receipt record", &record.payload)?;
                    receipts.push((records::operation_hash(&r.operation), loc));
                }
                records::KIND_FORK => {
                    // Receipts before a fork marker were copied from the source: not indexed.
                    crate::layer::apply_marker(self.log.dir(), loc, &record.payload, &mut state)?;
                    receipts.clear();
                }
                other => {
                    return Err(EngineError::corrupt(
                        self.log.dir(),
                        format!("unknown record kind {other} at {loc:?}"),
                    ))
                }
            }
        }
        for (hash, loc) in receipts {
            let ok = inner
                .receipts
                .get(receipt)
                .ok()
                .flatten()
                .is_some_and(|e| e[0..8] == hash.to_le_bytes() && entry_loc(e, 8) == loc);
            if !ok {
                return Err(mismatch(format!("receipt.idx entry {receipt} is wrong")));
            }
            receipt += 1;
        }
        if state != inner.state || row != inner.row_count() || receipt != inner.receipts.len() {
            return Err(mismatch(
                "derived state or index lengths differ from the log".into(),
            ));
        }
        Ok(())
    }

    /// Makes the indexes durable and, when `checkpoint` asks for it, writes a checkpoint of
    /// the state they cover. Readers and writers never wait for the disk here: the pending
    /// entries are copied out under the read lock, written and fdatasync'd with no lock held,
    /// and published under the write lock (a few map calls). Syncs of one Session are
    /// serialised by `sync`, which no reader or writer takes.
    pub(crate) fn sync_indexes(&self, checkpoint: Checkpoint) -> Result<(), EngineError> {
        if self.read_only {
            return Ok(());
        }
        if self.damaged.load(Ordering::Acquire) || self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut mark = self.sync.lock().unwrap_or_else(|p| p.into_inner());
        let dirty = self.dirty.swap(false, Ordering::AcqRel);
        let grown = self
            .appended_bytes
            .load(Ordering::Acquire)
            .saturating_sub(mark.appended_bytes);
        let want_ckpt = match checkpoint {
            Checkpoint::IfGrown => grown > CHECKPOINT_LOG_BYTES,
            Checkpoint::Close | Checkpoint::CloseSealing => grown > CLOSE_CHECKPOINT_LOG_BYTES,
            Checkpoint::Now => grown > 0,
        };
        if !dirty && !want_ckpt {
            return Ok(());
        }
        let r = self.sync_and_checkpoint(&mut mark, want_ckpt, checkpoint);
        if r.is_err() {
            // Retried on the next tick (the indexes are derived: at worst rebuilt on open).
            self.dirty.store(true, Ordering::Release);
        }
        r
    }

    fn sync_and_checkpoint(
        &self,
        mark: &mut SyncMark,
        want_ckpt: bool,
        checkpoint: Checkpoint,
    ) -> Result<(), EngineError> {
        // Receipts kept in memory get their file for a checkpoint (which counts its entries),
        // and at a close or an explicit sync that leaves the newest segment active, when there
        // is an entry to write: that file is then the evidence that the last batch was
        // acknowledged (`Session::referenced`). The background flusher gives it none (after
        // a killed process the log's synced bytes are whole; the file was never synced for a
        // power loss), and a close that seals the segment needs none (damage in a sealed
        // file is reported, never cut as a torn tail). So a small Session written once and
        // closed makes no index file. Nor does one sealed at an earlier close and only read
        // since: its newest segment (started by the log's open) holds no record, so no
        // acknowledged batch is there to be cut.
        let receipts_evidence = matches!(checkpoint, Checkpoint::Close | Checkpoint::Now)
            && self.log.end().offset > logbook_log::SEGMENT_HEADER_BYTES;
        let (attach_seq, attach_receipts) = {
            let inner = self.read();
            let receipts = &inner.receipts;
            (
                want_ckpt && inner.seq.is_detached(),
                receipts.is_detached()
                    && (want_ckpt || (receipts_evidence && !receipts.is_empty())),
            )
        };
        if attach_seq || attach_receipts {
            // Indexes kept in memory since the open get their files (see above for
            // `receipt.idx`); `seq.idx` and `row.idx` (no `seq.idx` was found) for a
            // checkpoint, `seq.idx` last, so that a crash half way leaves none and the next
            // open rebuilds them in memory again.
            let mut inner = self.write_checked()?;
            let inner = &mut *inner;
            let mut detached = Vec::with_capacity(3);
            if attach_receipts {
                detached.push(&mut inner.receipts);
            }
            if attach_seq {
                detached.extend([&mut inner.rows, &mut inner.seq]);
            }
            for ix in detached {
                if ix.is_detached() {
                    ix.attach()?;
                }
            }
        }
        // One consistent cut: the entries to make durable, and (for a checkpoint) the state
        // they cover with the row and receipt counts, all taken under one read lock. An index
        // kept in memory has nothing to write (`None`).
        let (pending, snapshot) = {
            let inner = self.read_checked()?;
            let begin = |ix: &FixedIndex| (!ix.is_detached()).then(|| ix.begin_sync()).transpose();
            let pending = [
                begin(&inner.seq)?,
                begin(&inner.rows)?,
                begin(&inner.receipts)?,
            ];
            let snapshot = want_ckpt.then(|| {
                let cover = crate::state::Coverage {
                    rows: inner.rows.len(),
                    receipts: inner.receipts.len(),
                };
                (
                    inner.state.clone(),
                    cover,
                    self.appended_bytes.load(Ordering::Acquire),
                )
            });
            (pending, snapshot)
        };
        // Entries are fdatasync'd only for a checkpoint, which counts them as durable. Without
        // one they are written for this process and the next (a later open takes them, and
        // `Session::referenced` still holds: each was written after its record was synced),
        // but after a power loss the next open may find them short and rebuild.
        let written = pending.map(|p| {
            p.map(|p| {
                if want_ckpt {
                    p.write()
                } else {
                    p.write_unsynced()
                }
            })
        });
        {
            let mut inner = self.write_checked()?;
            let inner = &mut *inner;
            // Each index takes its own outcome, so a failure poisons only the index it hit.
            let mut failed = None;
            for (ix, w) in [&mut inner.seq, &mut inner.rows, &mut inner.receipts]
                .into_iter()
                .zip(written)
            {
                if let Some(w) = w {
                    if let Err(e) = ix.finish_sync(w) {
                        failed.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = failed {
                return Err(e.into());
            }
        }
        let Some((state, cover, appended)) = snapshot else {
            return Ok(());
        };
        // The checkpoint promises that the event it covers is durable in the log (the next open
        // checks the log only from there on) and that the index entries it counts are durable
        // (synced just above). Every event it covers was appended before the snapshot, so this
        // sync covers them (in NoSyncBulkImport mode it is needed).
        self.log.sync()?;
        state.save_covering(&self.dir.join("state.ckpt"), cover)?;
        mark.appended_bytes = appended;
        Ok(())
    }
}

impl crate::postings::SessionRows for Inner {
    fn row_key(&self, ordinal: u64) -> Result<Option<(u64, u32)>, IndexError> {
        Ok(self.row(ordinal)?.map(|e| (e.sequence, e.item)))
    }

    fn row_count(&self) -> u64 {
        Inner::row_count(self)
    }

    fn row_base(&self) -> u64 {
        Inner::row_base(self)
    }

    fn first_row_of_segment(&self, segment: u64) -> Result<u64, IndexError> {
        Inner::first_row_of_segment(self, segment)
    }

    fn location(&self, sequence: u64) -> Result<Option<Location>, IndexError> {
        Inner::location(self, sequence)
    }
}

impl crate::postings::IndexedSession for Session {
    type Rows = Inner;

    fn rows(&self) -> impl std::ops::Deref<Target = Inner> + '_ {
        self.read()
    }

    fn event_of(&self, rows: &Inner, sequence: u64) -> Result<Event, EngineError> {
        self.event_at(rows, sequence)
    }

    fn log(&self) -> &Log {
        &self.log
    }

    fn progress(&self) -> &ProgressSink {
        &self.progress
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests;
