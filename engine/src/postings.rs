//! The search index of one Session: row-level trigram postings per log segment.
//!
//! - Doc ids are row ordinals relative to the first row of the segment that holds the row's
//!   event (`doc = row - first_row(segment)`), so they fit in u32 whatever the Session's size.
//! - A segment is *finished* once the log has moved past it (`log.end().segment` or a later
//!   append's Location is in a higher segment); its records never change again. Each finished
//!   segment that publishes rows gets `search/seg-<segment>-row-<first row>.v<layout>.post` (numbers as 16 hex digits,
//!   layout = [`SEARCH_LAYOUT_VERSION`]), a
//!   [`PostingsFile`] over the simply folded text of the rows' searchable fields (each field
//!   between two [`FIELD_EDGE`] bytes), one doc per
//!   row (a doc is added even when all its fields are empty, so the file's doc count equals the
//!   segment's row count: a file whose count differs is stale and rebuilt).
//! - The active (unsealed) segment's rows live in an in-memory [`PostingsBuilder`], updated by
//!   every append. When an append lands in a newer segment the builder is written out as that
//!   segment's file. When the Root closes, a large enough tail is saved as
//!   `search/tail-<segment>-row-<first row>-docs-<docs>-seq-<last sequence>.v<layout>.post`
//!   (after the log is synced, so the rows it covers are durable). The first use after open
//!   maps it as the tail's *base* (after checking the name's segment, rows and last event
//!   against the indexes, and the file's doc list) and indexes only the rows after it into
//!   the builder; lookups ask both. A base found damaged by a lookup is deleted, its rows are
//!   scanned meanwhile, and the next use rebuilds the tail from the log.
//! - Everything here is derived: a missing, foreign, stale (format or Unicode version) or
//!   damaged file is rebuilt from the log when a search needs it; if it cannot be written the
//!   postings are kept in memory for the life of the process.
//! - The text itself is never copied: candidates are verified on the events read from the log.
//!
//! Lock order: `tail` (RwLock) before the Session's `inner`, before `sealed` (Mutex).

use crate::error::EngineError;
use crate::event::{rows_of, Event};
use crate::progress::ProgressSink;
use crate::progress::ProgressUnit;
use logbook_index::IndexError;
use logbook_index::{fold_into, PostingsBatch, PostingsBuilder, PostingsFile};
use logbook_log::{Location, Log};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};

/// What the search index reads of its Session. `crate::session::Session` implements it: the
/// index sits below the Session that owns it and reads the Session's rows through this.
pub(crate) trait IndexedSession {
    /// The Session's indexes, read-locked.
    type Rows: SessionRows;
    fn rows(&self) -> impl std::ops::Deref<Target = Self::Rows> + '_;
    /// Event `sequence`, read while the caller holds `rows`.
    fn event_of(&self, rows: &Self::Rows, sequence: u64) -> Result<Event, EngineError>;
    fn log(&self) -> &Log;
    fn progress(&self) -> &ProgressSink;
    fn id(&self) -> &str;
    fn dir(&self) -> &Path;
}

/// The row facts the search index needs of a Session's indexes.
pub(crate) trait SessionRows {
    /// The event sequence and item index of row `ordinal`.
    fn row_key(&self, ordinal: u64) -> Result<Option<(u64, u32)>, IndexError>;
    fn row_count(&self) -> u64;
    /// Rows below this are a layered fork's base, indexed by its source.
    fn row_base(&self) -> u64;
    /// The first row whose event lives in a segment `>= segment` of the Session's own log.
    fn first_row_of_segment(&self, segment: u64) -> Result<u64, IndexError>;
    fn location(&self, sequence: u64) -> Result<Option<Location>, IndexError>;
}

/// Directory (inside the Session directory) of the postings files.
pub const SEARCH_DIR: &str = "search";

/// Version of what the engine puts into postings files (which fields, folding, field edges);
/// part of the file name, so files of another layout are never read.
pub const SEARCH_LAYOUT_VERSION: u32 = 1;

/// True for the fields search looks into.
pub(crate) fn is_searchable(field: &str) -> bool {
    matches!(field, "body" | "thinking" | "arguments")
}

/// Postings of one finished segment.
pub(crate) enum SealedPostings {
    File(PostingsFile),
    /// Built but not written: being written in the background, or the write failed (then
    /// kept for this process only).
    Memory(PostingsBuilder),
}

/// One finished segment's rows `[first_row, end_row)` and their postings.
pub(crate) struct Sealed {
    pub first_row: u64,
    pub end_row: u64,
    pub postings: SealedPostings,
}

/// Which docs a lookup asks for: those holding all of its trigrams, or any of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    All,
    Any,
}

fn file_candidates(
    f: &PostingsFile,
    trigrams: &[u32],
    need: Need,
    from_doc: u32,
    limit: usize,
) -> Result<Vec<u32>, logbook_index::IndexError> {
    match need {
        Need::All => f.candidates(trigrams, from_doc, limit),
        Need::Any => f.candidates_any(trigrams, from_doc, limit),
    }
}

fn builder_candidates(
    b: &PostingsBuilder,
    trigrams: &[u32],
    need: Need,
    from_doc: u32,
    limit: usize,
) -> Vec<u32> {
    match need {
        Need::All => b.candidates(trigrams, from_doc, limit),
        Need::Any => b.candidates_any(trigrams, from_doc, limit),
    }
}

impl Sealed {
    pub(crate) fn candidates(
        &self,
        trigrams: &[u32],
        need: Need,
        from_doc: u32,
        limit: usize,
    ) -> Result<Vec<u32>, logbook_index::IndexError> {
        match &self.postings {
            SealedPostings::File(f) => file_candidates(f, trigrams, need, from_doc, limit),
            SealedPostings::Memory(b) => Ok(builder_candidates(b, trigrams, need, from_doc, limit)),
        }
    }

    /// Calls `f` with every trigram of the segment's rows; damage is an error.
    pub(crate) fn for_each_trigram(
        &self,
        f: &mut dyn FnMut(u32),
    ) -> Result<(), logbook_index::IndexError> {
        match &self.postings {
            SealedPostings::File(file) => file.for_each_trigram(f),
            SealedPostings::Memory(b) => {
                b.for_each_trigram(f);
                Ok(())
            }
        }
    }
}

/// The active segment's postings.
pub(crate) struct Tail {
    /// The log segment the builder covers.
    pub segment: u64,
    /// First row of that segment.
    pub first_row: u64,
    /// Rows `[0, covered)` are indexed (the ones before `first_row` by finished segments).
    pub covered: u64,
    /// Docs `[base.docs, ..)`; all of them when there is no base.
    pub builder: PostingsBuilder,
    /// Docs `[0, docs)` read back from a saved tail.
    base: Option<Base>,
    /// `covered` when the tail was last saved or read back from a saved file (0: never).
    saved: u64,
}

/// A saved tail file in use, covering the tail's first `docs` docs.
struct Base {
    file: PostingsFile,
    docs: u32,
    /// A lookup found the file damaged: it is deleted and the tail rebuilt on next use.
    damaged: std::sync::atomic::AtomicBool,
}

impl Tail {
    /// Heap bytes of the builder and bytes of the saved-tail file it reads.
    fn resident_bytes(&self) -> u64 {
        self.builder.memory_bytes() as u64 + self.base.as_ref().map_or(0, |b| b.file.byte_len())
    }

    /// True when the tail holds fewer than `pairs_max` (trigram, doc) pairs, all in memory.
    pub(crate) fn is_small(&self, pairs_max: u64) -> bool {
        self.base.is_none() && self.builder.pair_count() < pairs_max
    }

    /// Docs `>= from_doc` holding all (or any) `trigrams`, ascending, at most `limit`: from
    /// the base, then the builder. An error means the base is damaged.
    pub(crate) fn candidates(
        &self,
        trigrams: &[u32],
        need: Need,
        from_doc: u32,
        limit: usize,
    ) -> Result<Vec<u32>, logbook_index::IndexError> {
        let (mut out, from) = match &self.base {
            Some(b) if from_doc < b.docs => (
                file_candidates(&b.file, trigrams, need, from_doc, limit)?,
                b.docs,
            ),
            Some(b) => (Vec::new(), from_doc.max(b.docs)),
            None => (Vec::new(), from_doc),
        };
        if out.len() < limit {
            out.extend(builder_candidates(
                &self.builder,
                trigrams,
                need,
                from,
                limit - out.len(),
            ));
        }
        Ok(out)
    }

    /// Calls `f` with every trigram of the covered rows of this segment; damage is an error.
    pub(crate) fn for_each_trigram(
        &self,
        f: &mut dyn FnMut(u32),
    ) -> Result<(), logbook_index::IndexError> {
        if let Some(b) = &self.base {
            b.file.for_each_trigram(&mut *f)?;
        }
        self.builder.for_each_trigram(f);
        Ok(())
    }

    /// Marks the base damaged and deletes its file (the map stays readable until dropped),
    /// unless the Session is a reader's (`read_only`), which removes nothing.
    pub(crate) fn base_damaged(&self, read_only: bool) {
        if let Some(b) = &self.base {
            if !b.damaged.swap(true, std::sync::atomic::Ordering::AcqRel) && !read_only {
                let _ = std::fs::remove_file(b.file.path());
            }
        }
    }

    fn is_damaged(&self) -> bool {
        self.base
            .as_ref()
            .is_some_and(|b| b.damaged.load(std::sync::atomic::Ordering::Acquire))
    }

    /// All the tail's postings in one builder (the base decoded; `None` when it is damaged).
    fn merged(&mut self) -> Option<PostingsBuilder> {
        let delta = std::mem::take(&mut self.builder);
        match self.base.take() {
            None => Some(delta),
            Some(b) => {
                let mut all = PostingsBuilder::from_file(&b.file).ok()?;
                all.append(&delta);
                Some(all)
            }
        }
    }
}

/// What a saved tail's file name records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SavedTail {
    segment: u64,
    first_row: u64,
    docs: u64,
    last_sequence: u64,
}

impl SavedTail {
    fn file_name(&self) -> String {
        format!(
            "tail-{:016x}-row-{:016x}-docs-{:016x}-seq-{:016x}.v{SEARCH_LAYOUT_VERSION}.post",
            self.segment, self.first_row, self.docs, self.last_sequence
        )
    }

    fn parse(name: &str) -> Option<SavedTail> {
        let rest = name
            .strip_prefix("tail-")?
            .strip_suffix(&format!(".v{SEARCH_LAYOUT_VERSION}.post"))?;
        let mut parts = rest.split('-');
        let mut field = |label: Option<&str>| -> Option<u64> {
            if let Some(l) = label {
                (parts.next()? == l).then_some(())?;
            }
            let hex = parts.next()?;
            (hex.len() == 16).then_some(())?;
            u64::from_str_radix(hex, 16).ok()
        };
        let t = SavedTail {
            segment: field(None)?,
            first_row: field(Some("row"))?,
            docs: field(Some("docs"))?,
            last_sequence: field(Some("seq"))?,
        };
        parts.next().is_none().then_some(t)
    }
}

/// The search index of one Session. Appends queue their rows, and a task on the process's
/// index pool ([`crate::index_pool`]) indexes what is queued while the appenders go on: a
/// Root with thousands of Sessions shares a few threads. A search first waits for the queue
/// to be indexed, so it always sees every row appended before it.
pub(crate) struct SearchIndex {
    shared: Arc<Shared>,
}

type SealedMap = HashMap<u64, Arc<Sealed>>;

/// Finished segments' postings of one Session being written in the background before a
/// roll writes the next one itself: bounds the builders held in memory on a slow disk.
const WRITES_PENDING_MAX: usize = 2;

/// What the worker and the Session share.
pub(crate) struct Shared {
    dir: PathBuf,
    /// A reader's index beside the Root's writer: it reads the postings files it finds and
    /// keeps what it builds in memory, never writing or removing a file.
    read_only: bool,
    tail: RwLock<Option<Tail>>,
    /// The tail's bytes as last counted by [`Shared::resident_bytes`].
    tail_bytes: AtomicU64,
    sealed: Arc<Mutex<SealedMap>>,
    /// Finished segments' postings files queued or being written (see [`Shared::roll`]).
    writes: Arc<Pending>,
    queue: Mutex<Queue>,
    /// Signalled whenever `queue` changes.
    changed: Condvar,
}

impl std::ops::Deref for SearchIndex {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// Appended rows waiting for the worker.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// The worker is indexing a job it took from `jobs`.
    busy: bool,
    /// The index is being dropped: the worker finishes `jobs`, then stops.
    closed: bool,
    /// A worker (a task on the index pool, or the appender when there is no pool thread) is
    /// queued or running and will take every job queued while this is set: it clears this
    /// under the queue lock only when it found `jobs` empty, and whoever queues a job with
    /// this clear queues the next worker.
    running: bool,
    /// The row the next job must start at to go to the worker: the end of the last job
    /// queued, or of the tail when nothing is queued. `None` sends appends down the
    /// synchronous path (which loads or catches up the tail from the log).
    next_row: Option<u64>,
}

impl Queue {
    /// Every queued job is indexed (none waits, none is being worked on).
    fn idle(&self) -> bool {
        !self.busy && self.jobs.is_empty()
    }
}

/// One append's rows `[first_row, end_row)`, its events and their Locations.
struct Job {
    first_row: u64,
    end_row: u64,
    events: Vec<Arc<Event>>,
    locs: Vec<Location>,
}

/// Appends queued for the worker before the next one waits (backpressure on bulk imports).
const QUEUE_JOBS_MAX: usize = 4;

/// A count of background writes and the condition their end signals.
#[derive(Default)]
struct Pending {
    count: Mutex<usize>,
    done: Condvar,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one more write unless `max` are pending.
    fn try_start(&self, max: usize) -> bool {
        let mut n = self.lock();
        let start = *n < max;
        *n += usize::from(start);
        start
    }

    fn finish(&self) {
        *self.lock() -= 1;
        self.done.notify_all();
    }

    fn wait_none(&self) {
        let mut n = self.lock();
        while *n > 0 {
            n = self.done.wait(n).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Reads events for index building, remembering the last one (a completion has many rows).
struct Reader<'a, S: IndexedSession> {
    session: &'a S,
    sequence: u64,
    event: Option<Event>,
    fold: FoldBuf,
}

impl<'a, S: IndexedSession> Reader<'a, S> {
    fn new(session: &'a S) -> Self {
        Reader {
            session,
            sequence: 0,
            event: None,
            fold: FoldBuf::default(),
        }
    }

    /// Adds row `row` (ordinal) to `batch` as doc `doc`.
    fn add_row(
        &mut self,
        inner: &S::Rows,
        row: u64,
        doc: u32,
        batch: &mut PostingsBatch<'_>,
    ) -> Result<(), EngineError> {
        let (sequence, item) = row_key(self.session, inner, row)?;
        if self.event.is_none() || self.sequence != sequence {
            self.event = Some(self.session.event_of(inner, sequence)?);
            self.sequence = sequence;
        }
        let event = self.event.as_ref().expect("filled above");
        let rows = rows_of(event);
        let src = rows.get(item as usize).ok_or_else(|| {
            EngineError::corrupt(
                self.session.dir().join("row.idx"),
                format!("row {row} names item {item} of event {sequence}, which has fewer rows"),
            )
        })?;
        add_fields(
            batch,
            doc,
            src.fields.iter().map(|(n, t)| (*n, *t)),
            &mut self.fold,
        );
        Ok(())
    }
}

/// Byte put before and after each field's folded text when it is indexed. Never part of
/// UTF-8, so it matches nothing real; it gives every 1- and 2-byte run of a field a trigram
/// (`FIELD_EDGE b1 b2`, `b1 b2 FIELD_EDGE`, ...), which lets 2-byte queries use the postings.
pub(crate) const FIELD_EDGE: u8 = 0xFF;

/// Scratch space for folding a field.
#[derive(Default)]
pub(crate) struct FoldBuf {
    text: String,
    bytes: Vec<u8>,
}

impl FoldBuf {
    /// The bytes a field is indexed as: its folded text between two [`FIELD_EDGE`] bytes.
    pub(crate) fn field(&mut self, text: &str) -> &[u8] {
        self.text.clear();
        fold_into(text, &mut self.text);
        self.bytes.clear();
        self.bytes.push(FIELD_EDGE);
        self.bytes.extend_from_slice(self.text.as_bytes());
        self.bytes.push(FIELD_EDGE);
        &self.bytes
    }
}

/// Adds the searchable fields of one row; at least one `add` per row so every row is a doc.
fn add_fields<'t>(
    batch: &mut PostingsBatch<'_>,
    doc: u32,
    fields: impl Iterator<Item = (&'static str, &'t str)>,
    fold: &mut FoldBuf,
) {
    let mut added = false;
    for (name, text) in fields {
        if !is_searchable(name) {
            continue;
        }
        batch.add(doc, fold.field(text));
        added = true;
    }
    if !added {
        batch.add(doc, b"");
    }
}

/// The event sequence and item index of row `row`.
pub(crate) fn row_key<S: IndexedSession>(
    session: &S,
    inner: &S::Rows,
    row: u64,
) -> Result<(u64, u32), EngineError> {
    inner.row_key(row)?.ok_or_else(|| {
        EngineError::corrupt(
            session.dir().join("row.idx"),
            format!("row entry {row} is unreadable"),
        )
    })
}

/// The log segment holding the event of row `row`.
pub(crate) fn segment_of_row<S: IndexedSession>(
    session: &S,
    inner: &S::Rows,
    row: u64,
) -> Result<u64, EngineError> {
    let (sequence, _) = row_key(session, inner, row)?;
    inner.location(sequence)?.map(|l| l.segment).ok_or_else(|| {
        EngineError::corrupt(
            session.dir().join("seq.idx"),
            format!("no location for event {sequence}"),
        )
    })
}

/// First own row whose event lives in a segment `>= segment` of the Session's own log.
fn first_row_of_segment(inner: &impl SessionRows, segment: u64) -> Result<u64, EngineError> {
    Ok(inner.first_row_of_segment(segment)?)
}

fn doc_of(row: u64, first_row: u64) -> Result<u32, EngineError> {
    u32::try_from(row - first_row).map_err(|_| {
        EngineError::invalid(format!(
            "segment holds more than {} rows; lower the segment size",
            u32::MAX
        ))
    })
}

impl SearchIndex {
    pub(crate) fn new(session_dir: &Path, read_only: bool) -> Self {
        SearchIndex {
            shared: Arc::new(Shared {
                dir: session_dir.join(SEARCH_DIR),
                read_only,
                tail: RwLock::new(None),
                tail_bytes: AtomicU64::new(0),
                sealed: Arc::new(Mutex::new(HashMap::new())),
                writes: Arc::default(),
                queue: Mutex::new(Queue::default()),
                changed: Condvar::new(),
            }),
        }
    }

    /// The tail, loaded and caught up with every row `inner` held at some instant during the
    /// call. Rows appended after that are not covered; the caller scans them directly.
    pub(crate) fn ready<S: IndexedSession>(
        &self,
        session: &S,
    ) -> Result<RwLockReadGuard<'_, Option<Tail>>, EngineError> {
        // Rows handed to the worker first (the caller holds no lock the worker takes).
        self.wait_idle();
        {
            let guard = self.tail.read().unwrap_or_else(|p| p.into_inner());
            let rows = session.rows().row_count();
            if guard
                .as_ref()
                .is_some_and(|t| t.covered >= rows && !t.is_damaged())
            {
                return Ok(guard);
            }
        }
        {
            let mut guard = self.tail.write().unwrap_or_else(|p| p.into_inner());
            self.catch_up_or_load(session, &mut guard, u64::MAX)?;
        }
        Ok(self.tail.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Catches the tail up with every row the Session holds below `until`, loading it first
    /// when there is none; on failure leaves no tail (it is rebuilt on next use).
    fn catch_up_or_load<S: IndexedSession>(
        &self,
        session: &S,
        tail: &mut Option<Tail>,
        until: u64,
    ) -> Result<(), EngineError> {
        if tail.as_ref().is_some_and(Tail::is_damaged) {
            *tail = None;
        }
        let inner = session.rows();
        let r = match tail.as_mut() {
            Some(t) => self.catch_up(session, &inner, t, until),
            None => self.load(session, &inner, until).map(|t| *tail = Some(t)),
        };
        if r.is_err() {
            *tail = None;
        }
        r
    }

    /// Builds the tail from the active segment's rows below `until`.
    fn load<S: IndexedSession>(
        &self,
        session: &S,
        inner: &S::Rows,
        until: u64,
    ) -> Result<Tail, EngineError> {
        let total = inner.row_count();
        let mut segment = session.log().end().segment;
        // A layered fork's base rows are indexed by its source (see `Session::search`).
        if total > inner.row_base() {
            segment = segment.max(segment_of_row(session, inner, total - 1)?);
        }
        let first_row = first_row_of_segment(inner, segment)?;
        let mut tail = Tail {
            segment,
            first_row,
            covered: first_row,
            builder: PostingsBuilder::new(),
            base: None,
            saved: 0,
        };
        // A saved tail covers at least one row of the segment: with none yet (the segment
        // after one sealed at close) there is nothing to look for, and the directory listing
        // that looks was a tenth of a search's visit to a small Session. Saved tails left
        // over are deleted by the first load that finds rows here.
        let saved = (first_row < total)
            .then(|| self.read_saved_tail(session, inner, segment, first_row))
            .flatten();
        if let Some(base) = saved {
            tail.covered = first_row + u64::from(base.docs);
            tail.base = Some(base);
            tail.saved = tail.covered;
        }
        self.catch_up(session, inner, &mut tail, until)?;
        Ok(tail)
    }

    /// The postings of rows `[first_row, first_row + docs)` of `segment` saved by an earlier
    /// close, when a saved file still describes them; every other saved tail is deleted.
    fn read_saved_tail<S: IndexedSession>(
        &self,
        session: &S,
        inner: &S::Rows,
        segment: u64,
        first_row: u64,
    ) -> Option<Base> {
        let mut found = self.saved_tails();
        // The one that covers most first; older ones stay only until a better one is read.
        found.sort_by_key(|t| std::cmp::Reverse(t.docs));
        let mut chosen = None;
        for t in found {
            if chosen.is_none() {
                chosen = self.check_saved_tail(session, inner, segment, first_row, t);
                if chosen.is_some() {
                    continue;
                }
            }
            if !self.read_only {
                let _ = std::fs::remove_file(self.dir.join(t.file_name()));
            }
        }
        chosen
    }

    fn check_saved_tail<S: IndexedSession>(
        &self,
        session: &S,
        inner: &S::Rows,
        segment: u64,
        first_row: u64,
        t: SavedTail,
    ) -> Option<Base> {
        let last_row = first_row.checked_add(t.docs.checked_sub(1)?)?;
        let fits = t.segment == segment
            && t.first_row == first_row
            && last_row < inner.row_count()
            && inner.row_key(last_row).ok()??.0 == t.last_sequence
            && segment_of_row(session, inner, last_row).ok()? == segment;
        if !fits {
            return None;
        }
        let docs = u32::try_from(t.docs).ok()?;
        let file = PostingsFile::open(&self.dir.join(t.file_name())).ok()?;
        file_matches(&file, t.docs).then_some(Base {
            file,
            docs,
            damaged: false.into(),
        })
    }

    /// Saves the tail for the next open when it holds at least `pairs_min` (trigram, doc)
    /// pairs (see the module documentation). Called when the Session closes (`may_sync`:
    /// the log may be synced for it, as when the Root closes); best effort: a tail that
    /// cannot be saved is rebuilt from the log later. `finished`: the log seals the tail's
    /// segment once closed, so a tail that covers every row is saved as the finished
    /// segment's postings file (which, checked like every postings file when opened, is
    /// rebuilt should the segment take more rows after all).
    pub(crate) fn save_tail<S: IndexedSession>(
        &self,
        session: &S,
        pairs_min: u64,
        may_sync: bool,
        finished: bool,
    ) {
        if self.read_only {
            return;
        }
        self.wait_idle();
        let mut guard = self.tail.write().unwrap_or_else(|p| p.into_inner());
        let Some(t) = guard.as_mut() else {
            return;
        };
        let docs = t.covered - t.first_row;
        // A base was saved because it was large enough, and the tail only grew since.
        let large = t.base.is_some() || t.builder.pair_count() >= pairs_min;
        let finished = finished && t.covered == session.rows().row_count();
        if docs == 0 || (t.saved == t.covered && !finished) || !large {
            return;
        }
        let Ok(Some((last_sequence, _))) = session.rows().row_key(t.covered - 1) else {
            return;
        };
        // The rows the file covers must be durable: a later open trusts them as logged. When
        // the open-Session cache closes a Session (`may_sync` false) the tail is saved only
        // if they are already (durable appends, or a close that synced the log for its
        // checkpoint): each closing Session of a bulk import would pay a sync otherwise.
        let durable = if may_sync {
            session.log().sync().is_ok()
        } else {
            session.log().fully_synced()
        };
        if !durable {
            return;
        }
        let saved = SavedTail {
            segment: t.segment,
            first_row: t.first_row,
            docs,
            last_sequence,
        };
        let path = if finished {
            self.file_path(t.segment, t.first_row)
        } else {
            self.dir.join(saved.file_name())
        };
        // Called at close: the tail is not used after this, so it may be taken apart.
        let Some(all) = t.merged() else {
            *guard = None;
            return;
        };
        // Unsynced: it is checked (header, checksums, doc list, the row it ends at) when read
        // back, and a damaged base found by a lookup is dropped, so a crash costs a rebuild.
        let written =
            std::fs::create_dir_all(&self.dir).is_ok() && all.write_unsynced(&path).is_ok();
        t.builder = all;
        if !written {
            return;
        }
        t.saved = t.covered;
        for old in self.saved_tails() {
            if finished || old != saved {
                let _ = std::fs::remove_file(self.dir.join(old.file_name()));
            }
        }
    }

    /// The saved tails in the search directory, by their names (none when it is missing).
    fn saved_tails(&self) -> Vec<SavedTail> {
        let entries = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        entries
            .filter_map(|e| e.file_name().to_str().and_then(SavedTail::parse))
            .collect()
    }

    /// Indexes rows `[tail.covered, min(inner.row_count(), until))`, reading their events
    /// from the log.
    fn catch_up<S: IndexedSession>(
        &self,
        session: &S,
        inner: &S::Rows,
        tail: &mut Tail,
        until: u64,
    ) -> Result<(), EngineError> {
        let total = inner.row_count().min(until);
        if tail.covered >= total {
            return Ok(());
        }
        let mut reader = Reader::new(session);
        let from = tail.covered;
        let mut task = session.progress().task(
            || format!("building the search index of Session {}", session.id()),
            total - from,
            ProgressUnit::Rows,
        );
        while tail.covered < total {
            let seg = segment_of_row(session, inner, tail.covered)?;
            if seg > tail.segment {
                self.roll(tail, seg);
            }
            // The rows of this segment, in one batch.
            let mut batch = tail.builder.batch();
            while tail.covered < total {
                let row = tail.covered;
                if segment_of_row(session, inner, row)? != tail.segment {
                    break;
                }
                task.advance(row - from);
                let doc = doc_of(row, tail.first_row)?;
                reader.add_row(inner, row, doc, &mut batch)?;
                tail.covered += 1;
            }
        }
        Ok(())
    }

    /// Called after an append's events are in the log and in `inner` (its rows are
    /// `[first_row, end_row)`). Queues them for the worker when the tail (with what is
    /// queued) ends at `first_row`. Otherwise (the first append after an open, or after
    /// trouble) loads or catches up the tail from the log first, up to `first_row` only, so
    /// that the append's own rows are still indexed by the worker. Never fails the append: on
    /// trouble the tail is dropped and rebuilt on next use.
    pub(crate) fn appended<S: IndexedSession>(
        &self,
        session: &S,
        first_row: u64,
        end_row: u64,
        events: Vec<Arc<Event>>,
        locs: &[Location],
    ) {
        let job = Job {
            first_row,
            end_row,
            events,
            locs: locs.to_vec(),
        };
        let Err(job) = self.queue_job(job) else {
            return;
        };
        self.wait_idle();
        let covered = {
            let mut guard = self.tail.write().unwrap_or_else(|p| p.into_inner());
            let _ = self.catch_up_or_load(session, &mut guard, first_row);
            guard.as_ref().map(|t| t.covered)
        };
        // Nothing is queued (appends to a Session come one at a time), so the next job must
        // start where the tail ends; a search may have caught it up past this append already.
        self.queue_lock().next_row = covered.filter(|&c| c == first_row || c >= end_row);
        if covered == Some(first_row) {
            // Cannot fail: `next_row` is `first_row` and the queue is empty.
            let _ = self.queue_job(job);
        }
    }

    /// Queues `job` for the worker when it starts where the tail and the jobs queued before
    /// it end (waiting while [`QUEUE_JOBS_MAX`] are queued); gives it back otherwise.
    fn queue_job(&self, job: Job) -> Result<(), Job> {
        let mut q = self.queue_lock();
        while q.next_row == Some(job.first_row) && q.jobs.len() >= QUEUE_JOBS_MAX {
            q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        if q.next_row != Some(job.first_row) || q.closed {
            return Err(job);
        }
        q.next_row = Some(job.end_row);
        q.jobs.push_back(job);
        let start = !q.running;
        q.running = true;
        drop(q);
        self.changed.notify_all();
        if start {
            self.start_worker();
        }
        Ok(())
    }

    /// Queues a worker on the index pool; the caller set `running` (so no other worker runs).
    /// Without a pool thread, indexes the queued jobs here.
    fn start_worker(&self) {
        let shared = Arc::clone(&self.shared);
        if let Err(worker) = crate::index_pool::submit(Box::new(move || shared.work())) {
            worker();
        }
    }

    /// The postings of finished segment `segment` if they are loaded already.
    pub(crate) fn sealed_if_loaded(&self, segment: u64) -> Option<Arc<Sealed>> {
        self.shared.sealed_map().get(&segment).cloned()
    }

    /// The postings of finished segment `segment`, opened (or rebuilt) on first use.
    /// `rebuild` forces a rebuild (a lookup found the file damaged).
    pub(crate) fn sealed<S: IndexedSession>(
        &self,
        session: &S,
        inner: &S::Rows,
        segment: u64,
        rebuild: bool,
    ) -> Result<Arc<Sealed>, EngineError> {
        let mut map = self.sealed_map();
        if !rebuild {
            if let Some(s) = map.get(&segment) {
                return Ok(Arc::clone(s));
            }
        }
        let first_row = first_row_of_segment(inner, segment)?;
        let end_row = first_row_of_segment(inner, segment + 1)?;
        let rows = end_row - first_row;
        let path = self.file_path(segment, first_row);
        let opened = if rebuild {
            None
        } else {
            PostingsFile::open(&path)
                .ok()
                .filter(|f| file_matches(f, rows))
        };
        let postings = match opened {
            Some(f) => SealedPostings::File(f),
            None => {
                let mut builder = PostingsBuilder::new();
                let mut reader = Reader::new(session);
                let mut task = session.progress().task(
                    || {
                        format!(
                            "building the search index of segment {segment} of Session {}",
                            session.id()
                        )
                    },
                    rows,
                    ProgressUnit::Rows,
                );
                let mut batch = builder.batch();
                for row in first_row..end_row {
                    task.advance(row - first_row);
                    reader.add_row(inner, row, doc_of(row, first_row)?, &mut batch)?;
                }
                drop(batch);
                self.persist(segment, first_row, builder)
            }
        };
        let s = Arc::new(Sealed {
            first_row,
            end_row,
            postings,
        });
        map.insert(segment, Arc::clone(&s));
        Ok(s)
    }
}

/// Runs `f` with `tail` (the tail lock held) when it covers every row of `session`.
fn with_covering_tail<S: IndexedSession>(
    session: &S,
    tail: &Option<Tail>,
    f: impl FnOnce(&S::Rows, &Tail),
) {
    if let Some(t) = tail.as_ref() {
        let inner = session.rows();
        if t.covered >= inner.row_count() && !t.is_damaged() {
            f(&inner, t);
        }
    }
}

impl Shared {
    /// Bytes the index holds while the Session is open (see `Session::resident_bytes`): the
    /// finished segments' postings, loaded files (what lookups may keep resident) and
    /// builders not yet written, and the tail's builder and saved-tail file. The tail is
    /// counted when its lock is free, else as last counted: a sum over open Sessions never
    /// waits for an append's indexing.
    pub(crate) fn resident_bytes(&self) -> u64 {
        let sealed: u64 = lock_sealed(&self.sealed)
            .values()
            .map(|s| match &s.postings {
                SealedPostings::File(f) => f.byte_len(),
                SealedPostings::Memory(b) => b.memory_bytes() as u64,
            })
            .sum();
        let tail = match self.tail.try_read() {
            Ok(t) => {
                let bytes = t.as_ref().map_or(0, Tail::resident_bytes);
                self.tail_bytes.store(bytes, Ordering::Relaxed);
                bytes
            }
            Err(_) => self.tail_bytes.load(Ordering::Relaxed),
        };
        sealed + tail
    }

    /// Path of the postings file of `segment`, whose first row is `first_row`: the name binds
    /// both, so a file can only ever be taken for the segment and rows it was built from.
    pub(crate) fn file_path(&self, segment: u64, first_row: u64) -> PathBuf {
        self.dir.join(format!(
            "seg-{segment:016x}-row-{first_row:016x}.v{SEARCH_LAYOUT_VERSION}.post"
        ))
    }

    fn sealed_map(&self) -> std::sync::MutexGuard<'_, SealedMap> {
        lock_sealed(&self.sealed)
    }

    /// The tail's segment is finished: its postings go into the map as they are (in memory),
    /// a background thread writes them out and swaps in the mapped file, and the tail starts
    /// `segment`'s. Encoding, writing and syncing a segment's postings is about a fifth of
    /// the indexing work: the appends' rows need not wait for it.
    fn roll(&self, tail: &mut Tail, segment: u64) {
        // A damaged base leaves no file: `sealed` rebuilds the segment's from the log.
        let builder = tail.merged().unwrap_or_default();
        if builder.doc_count() > 0 {
            let sealed = Arc::new(Sealed {
                first_row: tail.first_row,
                end_row: tail.covered,
                postings: SealedPostings::Memory(builder),
            });
            self.sealed_map().insert(tail.segment, Arc::clone(&sealed));
            if !self.read_only {
                self.write_in_background(tail.segment, sealed);
            }
        }
        tail.segment = segment;
        tail.first_row = tail.covered;
    }

    /// Writes the in-memory postings `sealed` of `segment` on the index pool, which then puts
    /// the mapped file in the map in its place (unless a rebuild replaced it meanwhile). With
    /// [`WRITES_PENDING_MAX`] writes pending, or without a pool thread, writes here; dropping
    /// the index waits for every pending write.
    fn write_in_background(&self, segment: u64, sealed: Arc<Sealed>) {
        let job = WriteJob {
            map: Arc::clone(&self.sealed),
            dir: self.dir.clone(),
            path: self.file_path(segment, sealed.first_row),
            segment,
            sealed,
        };
        if !self.writes.try_start(WRITES_PENDING_MAX) {
            job.run();
            return;
        }
        let writes = Arc::clone(&self.writes);
        let task = Box::new(move || {
            // Counted down even if the write panics (a bug): dropping the index waits for it.
            let _end = EndWrite(writes);
            job.run();
        });
        if let Err(task) = crate::index_pool::submit(task) {
            task();
        }
    }

    /// Writes `builder` as `segment`'s file and maps it; on failure keeps it in memory.
    fn persist(&self, segment: u64, first_row: u64, builder: PostingsBuilder) -> SealedPostings {
        if self.read_only {
            return SealedPostings::Memory(builder);
        }
        match write_postings(&self.dir, &self.file_path(segment, first_row), &builder) {
            Ok(f) => SealedPostings::File(f),
            // Derived data: serve from memory now, rebuild after the next open.
            Err(_) => SealedPostings::Memory(builder),
        }
    }

    /// Indexes an append's rows, which start at `t.covered`, from its events.
    fn add_events(
        &self,
        t: &mut Tail,
        events: &[Arc<Event>],
        locs: &[Location],
    ) -> Result<(), EngineError> {
        let mut fold = FoldBuf::default();
        let mut at = 0;
        // Runs of events in one log segment, each in one batch.
        while at < events.len() {
            let segment = locs[at].segment;
            let run = locs[at..events.len()]
                .iter()
                .take_while(|l| l.segment == segment)
                .count();
            let rows: Vec<_> = events[at..at + run]
                .iter()
                .flat_map(|e| rows_of(e))
                .collect();
            if !rows.is_empty() {
                if segment > t.segment {
                    self.roll(t, segment);
                }
                let mut batch = t.builder.batch();
                for src in rows {
                    let doc = doc_of(t.covered, t.first_row)?;
                    add_fields(
                        &mut batch,
                        doc,
                        src.fields.iter().map(|(n, s)| (*n, *s)),
                        &mut fold,
                    );
                    t.covered += 1;
                }
            }
            at += run;
        }
        Ok(())
    }

    fn queue_lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` with the tail when one is loaded and covers every row (nothing is loaded or
    /// indexed for it).
    pub(crate) fn with_loaded_tail<S: IndexedSession>(
        &self,
        session: &S,
        f: impl FnOnce(&S::Rows, &Tail),
    ) {
        self.wait_idle();
        let guard = self.tail.read().unwrap_or_else(|p| p.into_inner());
        with_covering_tail(session, &guard, f);
    }

    /// [`SearchIndex::with_loaded_tail`] without waiting: does nothing while the worker has
    /// rows to index or the tail is being changed.
    pub(crate) fn try_with_loaded_tail<S: IndexedSession>(
        &self,
        session: &S,
        f: impl FnOnce(&S::Rows, &Tail),
    ) {
        {
            let q = self.queue_lock();
            if !q.idle() {
                return;
            }
        }
        let guard = match self.tail.try_read() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        with_covering_tail(session, &guard, f);
    }

    /// Blocks until the worker has indexed every queued job. Finished segments' postings
    /// may still be being written: until then they are served from memory.
    pub(crate) fn wait_idle(&self) {
        let mut q = self.queue_lock();
        while !q.idle() {
            q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The worker: indexes queued jobs until there are none.
    fn work(&self) {
        loop {
            while self.work_one() {}
            let mut q = self.queue_lock();
            // Under the queue lock: a job queued after this queues a new worker.
            if q.jobs.is_empty() {
                q.running = false;
                drop(q);
                self.changed.notify_all();
                return;
            }
        }
    }

    /// Indexes the oldest queued job, if any; false when there was none.
    fn work_one(&self) -> bool {
        let job = {
            let mut q = self.queue_lock();
            let Some(job) = q.jobs.pop_front() else {
                return false;
            };
            q.busy = true;
            job
        };
        let lost = {
            let mut guard = self.tail.write().unwrap_or_else(|p| p.into_inner());
            // A panic here (a bug) must not leave `busy` set, or every search would wait
            // for ever: it drops the tail like any other trouble.
            let lost = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                match guard.as_mut() {
                    // A search caught the tail up from the log past this append already.
                    Some(t) if t.covered >= job.end_row => false,
                    Some(t) if t.covered == job.first_row => {
                        self.add_events(t, &job.events, &job.locs).is_err()
                    }
                    _ => true,
                }
            }))
            .unwrap_or(true);
            if lost {
                *guard = None;
            }
            lost
        };
        let mut q = self.queue_lock();
        if lost {
            // The next append takes the synchronous path, which rebuilds from the log.
            q.next_row = None;
        }
        q.busy = false;
        drop(q);
        self.changed.notify_all();
        true
    }
}

impl Drop for SearchIndex {
    fn drop(&mut self) {
        // The worker finishes the queued jobs (the pool holds what it needs of them), then
        // every finished segment's postings file is written (its rolls may have queued some).
        let mut q = self.queue_lock();
        q.closed = true;
        while q.running {
            q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        drop(q);
        self.writes.wait_none();
    }
}

/// Counts a background write as ended when dropped.
struct EndWrite(Arc<Pending>);

impl Drop for EndWrite {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// A finished segment's in-memory postings to write out (see [`Shared::roll`]).
struct WriteJob {
    map: Arc<Mutex<SealedMap>>,
    dir: PathBuf,
    path: PathBuf,
    segment: u64,
    sealed: Arc<Sealed>,
}

impl WriteJob {
    /// Writes the file and puts it in the map in place of the in-memory postings, unless a
    /// rebuild replaced them meanwhile. On failure they stay in memory (derived data: the
    /// missing file is rebuilt after the next open).
    fn run(self) {
        let SealedPostings::Memory(builder) = &self.sealed.postings else {
            return;
        };
        let Ok(file) = write_postings(&self.dir, &self.path, builder) else {
            return;
        };
        let mut map = lock_sealed(&self.map);
        if map
            .get(&self.segment)
            .is_some_and(|s| Arc::ptr_eq(s, &self.sealed))
        {
            let mapped = Sealed {
                first_row: self.sealed.first_row,
                end_row: self.sealed.end_row,
                postings: SealedPostings::File(file),
            };
            map.insert(self.segment, Arc::new(mapped));
        }
    }
}

fn lock_sealed(map: &Mutex<SealedMap>) -> std::sync::MutexGuard<'_, SealedMap> {
    map.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes `builder` to `path` (creating the search directory) and maps the file.
fn write_postings(
    dir: &Path,
    path: &Path,
    builder: &PostingsBuilder,
) -> Result<PostingsFile, EngineError> {
    std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, "create directory", e))?;
    builder.write(path)?;
    Ok(PostingsFile::open(path)?)
}

/// True when the file holds exactly docs `0..rows` (one per row of the segment).
fn file_matches(f: &PostingsFile, rows: u64) -> bool {
    match f.candidates(&[], 0, usize::MAX) {
        Ok(all) => all.len() as u64 == rows && all.last().is_none_or(|&d| u64::from(d) + 1 == rows),
        Err(_) => false,
    }
}
