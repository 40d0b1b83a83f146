//! Literal search over a Session's rows (contract section 3).
//!
//! A page walks rows in position order from the cursor. Which rows it looks at comes from the
//! trigram postings (module `index`): one file per finished log segment plus an in-memory builder
//! for the active segment, doc = row. Every candidate is verified with
//! [`logbook_index::Matcher`] on the original field text read from the log, so postings only
//! ever narrow the work, never decide a hit. A query whose folded form is 2 bytes has no
//! trigram of its own; it takes the union of the 512 trigrams that extend it by one byte on
//! either side (fields are indexed between edge bytes, so every 2-byte run has one). A 1-byte
//! folded query makes every row a candidate (a bounded scan).
//!
//! Hit order: row position, then field (`body` < `thinking` < `arguments`, the order in which
//! a row kind lists them), then `start`. Each page does bounded work:
//! at most [`SEARCH_PAGE_ROWS_EXAMINED_MAX`] rows verified, about
//! [`SEARCH_PAGE_BYTES_EXAMINED_MAX`] bytes of field text scanned (a page always verifies at
//! least one row, so it always makes progress) and [`SEARCH_PAGE_LOOKUPS_MAX`] postings
//! lookups; it may end with no hits and a cursor. The cursor records the row, field and byte
//! offset to resume at, so a row with more hits than `limit` continues on the next page.

mod cursor;

pub(crate) use crate::filter::{Plan, TrigramFilter};
pub use crate::filter::{FILTER_BITS_MAX, FILTER_BITS_MIN};
pub use crate::postings::SEARCH_DIR;
pub use cursor::SEARCH_CURSOR_VERSION;

use crate::error::EngineError;
use crate::event::RowSource;
use crate::history::fence;
use crate::params::Position;
pub(crate) use crate::postings::{is_searchable, row_key, segment_of_row, Need, Sealed, Tail};
use crate::session::{Inner, Session};
use crate::sync::lock;
use cursor::{Binding, SearchCursor};
use logbook_index::Matcher;
use logbook_log::Reader;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use crate::params::{SearchHit, SearchPage, SearchParams};

/// Hits per page when `limit` is null.
pub const SEARCH_HITS_DEFAULT: u32 = 64;
/// Most hits per page.
pub const SEARCH_HITS_MAX: u32 = 1024;
/// Most rows one page verifies against the original text.
pub const SEARCH_PAGE_ROWS_EXAMINED_MAX: u64 = 4096;
/// Field bytes after which a page stops verifying (checked between rows).
pub const SEARCH_PAGE_BYTES_EXAMINED_MAX: u64 = 16 << 20;
/// Most postings lookups (candidate batches) per page.
pub const SEARCH_PAGE_LOOKUPS_MAX: u64 = 4096;
/// Same limit under the name the first, scan-only search used.
pub const SEARCH_SCAN_ROWS_MAX: u64 = SEARCH_PAGE_ROWS_EXAMINED_MAX;
/// Same limit under the name the first, scan-only search used.
pub const SEARCH_SCAN_BYTES_MAX: u64 = SEARCH_PAGE_BYTES_EXAMINED_MAX;
/// The searched fields, in the order hits of one row are reported.
pub const SEARCH_FIELDS: [&str; 3] = ["body", "thinking", "arguments"];
/// Longest query, in bytes.
pub const SEARCH_QUERY_BYTES_MAX: usize = 4096;
/// Candidates fetched from one postings source per lookup.
pub(crate) const CANDIDATE_BATCH: usize = 1024;

/// Checks a search's query and `limit` (the same rules for `search` and `searchRoot`);
/// returns the limit.
pub(crate) fn checked_query_and_limit(query: &str, limit: Option<u32>) -> Result<u32, EngineError> {
    if query.is_empty() {
        return Err(EngineError::invalid(
            "query must not be empty; search needs at least one character",
        ));
    }
    if query.len() > SEARCH_QUERY_BYTES_MAX {
        return Err(EngineError::invalid(format!(
            "query is {} bytes; at most {SEARCH_QUERY_BYTES_MAX} are allowed",
            query.len()
        )));
    }
    let limit = limit.unwrap_or(SEARCH_HITS_DEFAULT);
    if limit == 0 || limit > SEARCH_HITS_MAX {
        return Err(EngineError::invalid(format!(
            "limit must be 1 to {SEARCH_HITS_MAX} hits, got {limit}"
        )));
    }
    Ok(limit)
}

impl Plan {
    /// Runs the plan against one source (`lookup(trigrams, need, from_doc, limit)`): at most
    /// `CANDIDATE_BATCH` docs `>= from_doc`, ascending; fewer means no more in this source.
    fn candidates<E>(
        &self,
        from_doc: u32,
        lookup: impl FnOnce(&[u32], Need, u32, usize) -> Result<Vec<u32>, E>,
    ) -> Result<Vec<u32>, E> {
        match self {
            Plan::AllOf(t) => lookup(t, Need::All, from_doc, CANDIDATE_BATCH),
            Plan::Every => lookup(&[], Need::All, from_doc, CANDIDATE_BATCH),
            // The union's first BATCH docs are among each list's first BATCH docs.
            Plan::AnyOf { keys, .. } => lookup(keys, Need::Any, from_doc, CANDIDATE_BATCH),
        }
    }
}

/// The log reader of a search page's verification: a first page's sealed blocks stay in the
/// block cache like any read's (the query is likely refined or asked again), the later pages'
/// enter it as the first to go (a walk over all hits would otherwise push everything out).
pub(crate) fn first_page_reader(session: &Session, first_page: bool) -> Option<Reader<'_>> {
    first_page.then(|| session.log().reader_keeping())
}

/// A batch of candidates without postings: every row from `row` on (docs counted from
/// `first`), at most a batch, not past `end`.
fn every_row(row: u64, first: u64, end: u64) -> Vec<u32> {
    let to = (row + CANDIDATE_BATCH as u64).min(end);
    let doc = |r: u64| u32::try_from(r - first).expect("batch fits");
    (doc(row)..doc(to)).collect()
}

/// Where candidates for a run of rows come from.
pub(crate) enum Source<'a> {
    Tail(&'a Tail),
    Sealed(u64, Arc<Sealed>),
    /// Rows no postings cover yet (appended while this page started): all are candidates.
    Uncovered,
}

/// Page state: budget, hits, the event cache and the matcher's scratch space.
pub(crate) struct Page<'a> {
    pub(crate) session: &'a Session,
    pub(crate) inner: &'a Inner,
    pub(crate) matcher: &'a Matcher,
    pub(crate) limit: usize,
    pub(crate) hits: Vec<SearchHit>,
    pub(crate) rows_examined: u64,
    pub(crate) bytes_examined: u64,
    /// Reads the candidates' events, which lie in position order.
    pub(crate) reader: Option<Reader<'a>>,
    pub(crate) found: Vec<(usize, usize)>,
}

/// True when a page that verified `rows` rows and scanned `bytes` bytes of text must stop
/// (a page always verifies at least one row).
pub(crate) fn verified_enough(rows: u64, bytes: u64) -> bool {
    rows > 0 && (rows >= SEARCH_PAGE_ROWS_EXAMINED_MAX || bytes >= SEARCH_PAGE_BYTES_EXAMINED_MAX)
}

impl Page<'_> {
    fn over_budget(&self) -> bool {
        verified_enough(self.rows_examined, self.bytes_examined)
    }

    /// [`Page::over_budget`], or `lookups` postings lookups made.
    pub(crate) fn out_of_work(&self, lookups: u64) -> bool {
        lookups >= SEARCH_PAGE_LOOKUPS_MAX || self.over_budget()
    }

    /// Verifies row `row` from searchable field `field`, byte `offset` on. Returns where to
    /// resume when the page filled up inside the row.
    pub(crate) fn verify(
        &mut self,
        row: u64,
        field: u8,
        offset: u64,
    ) -> Result<Option<(u8, u64)>, EngineError> {
        self.rows_examined += 1;
        let (sequence, item) = row_key(self.session, self.inner, row)?;
        let session = self.session;
        // The event is read without being cached: a search walks far more rows than a reader
        // looks at again.
        let mut reader = self.reader.take();
        let found = session.with_event_rows(self.inner, sequence, false, &mut reader, |rows| {
            let src = rows.get(item as usize).ok_or_else(|| {
                EngineError::corrupt(
                    session.dir().join("row.idx"),
                    format!(
                        "row {row} names item {item} of event {sequence}, which has fewer rows"
                    ),
                )
            })?;
            let position = Position {
                source_sequence: sequence,
                item_index: item,
            };
            Ok(self.verify_fields(src, position, field, offset))
        });
        self.reader = reader;
        found?
    }

    /// [`Page::verify`] on the row's text.
    fn verify_fields(
        &mut self,
        src: &RowSource<'_>,
        position: Position,
        field: u8,
        offset: u64,
    ) -> Option<(u8, u64)> {
        let searchable = src.fields.iter().filter(|(n, _)| is_searchable(n));
        for (fi, (name, text)) in searchable.enumerate() {
            let fi = fi as u8;
            if fi < field || text.is_empty() {
                continue;
            }
            self.bytes_examined += text.len() as u64;
            self.found.clear();
            // Resuming inside a field rescans it whole: the matches after `offset` depend on
            // where the scan was (resume and whole-word rules), and the full scan is the truth.
            self.matcher.find_all(text, &mut self.found);
            for &(s, e) in &self.found {
                if fi == field && (s as u64) < offset {
                    continue;
                }
                self.hits.push(SearchHit {
                    position,
                    field: (*name).to_owned(),
                    start: s as u64,
                    end: e as u64,
                });
                if self.hits.len() == self.limit {
                    return Some((fi, e as u64));
                }
            }
        }
        None
    }
}

impl Session {
    pub(crate) fn search(&self, p: &SearchParams) -> Result<SearchPage, EngineError> {
        self.check_live()?;
        let limit = checked_query_and_limit(&p.query, p.limit)?;
        let case_sensitive = p.case_sensitive.unwrap_or(false);
        let whole_word = p.whole_word.unwrap_or(false);
        let tail_guard = self.search.ready(self)?;
        let inner = self.read();
        let through = fence(&inner, p.through)?;
        let n = inner.rows_through(through)?;
        let binding = Binding {
            session_id: &self.id,
            through,
            query: &p.query,
            case_sensitive,
            whole_word,
        };
        let start = match &p.after {
            None => SearchCursor {
                row: 0,
                field: 0,
                offset: 0,
            },
            Some(text) => {
                let c = SearchCursor::decode(text, &binding)?;
                if c.row >= n {
                    return Err(EngineError::invalid(format!(
                        "search cursor names row {} but the fence {through} has {n} rows",
                        c.row
                    )));
                }
                c
            }
        };
        let tail = tail_guard.as_ref().expect("ready() returns a loaded tail");
        let matcher = Matcher::new(&p.query, case_sensitive, whole_word);
        let mut page = Page {
            session: self,
            inner: &inner,
            matcher: &matcher,
            limit: limit as usize,
            hits: Vec::new(),
            rows_examined: 0,
            bytes_examined: 0,
            reader: first_page_reader(self, p.after.is_none()),
            found: Vec::new(),
        };
        let plan = Plan::new(&p.query, &matcher);
        let resume = self.search_rows(&mut page, &plan, tail, start, n)?;
        let next_after = resume.map(|c| c.encode(&binding));
        Ok(SearchPage {
            through,
            hits: page.hits,
            next_after,
        })
    }

    /// The page loop: returns the cursor to resume at, or None when rows `< n` are done.
    fn search_rows(
        &self,
        page: &mut Page<'_>,
        plan: &Plan,
        tail: &Tail,
        start: SearchCursor,
        n: u64,
    ) -> Result<Option<SearchCursor>, EngineError> {
        let (mut row, mut field, mut offset) = (start.row, start.field, start.offset);
        let mut lookups = 0u64;
        while row < n {
            if page.out_of_work(lookups) {
                return Ok(Some(SearchCursor { row, field, offset }));
            }
            lookups += 1;
            let (first, end, docs) = self.candidate_batch(page.inner, plan, tail, row, n)?;
            let batch_full = docs.len() == CANDIDATE_BATCH;
            let mut reached_end = !batch_full;
            for d in docs {
                let r = first + u64::from(d);
                if r >= end {
                    reached_end = true;
                    break;
                }
                if r != row {
                    (row, field, offset) = (r, 0, 0);
                }
                if page.over_budget() {
                    return Ok(Some(SearchCursor { row, field, offset }));
                }
                if let Some((f, o)) = page.verify(row, field, offset)? {
                    return Ok(Some(SearchCursor {
                        row,
                        field: f,
                        offset: o,
                    }));
                }
                (row, field, offset) = (row + 1, 0, 0);
            }
            if reached_end && row < end {
                (row, field, offset) = (end, 0, 0);
            }
        }
        Ok(None)
    }

    /// The postings source of row `row` (below `n`, not in a layered fork's base) and the rows
    /// it covers, `[first, end)` with `end <= n`; no lookup is made.
    pub(crate) fn source_of<'t>(
        &self,
        inner: &Inner,
        tail: &'t Tail,
        row: u64,
        n: u64,
    ) -> Result<(Source<'t>, u64, u64), EngineError> {
        let source = if row >= tail.covered {
            Source::Uncovered
        } else if row >= tail.first_row {
            Source::Tail(tail)
        } else {
            let seg = segment_of_row(self, inner, row)?;
            Source::Sealed(seg, self.search.sealed(self, inner, seg, false)?)
        };
        let (first, end) = match &source {
            Source::Tail(t) => (t.first_row, t.covered),
            Source::Sealed(_, s) => (s.first_row, s.end_row),
            Source::Uncovered => (tail.covered, n),
        };
        let end = end.min(n);
        if row < first || row >= end {
            return Err(EngineError::corrupt(
                self.dir().join(SEARCH_DIR),
                format!("row {row} is outside its postings range {first}..{end}"),
            ));
        }
        Ok((source, first, end))
    }

    /// One batch of candidates for rows `row..n`: `(first, end, docs)`, where the docs are
    /// ascending offsets from `first` of rows that may match, all `>= row`, and `end` bounds
    /// the rows this batch's postings cover. A layered fork's base rows are answered by the
    /// source, with the source's own postings (recursively).
    pub(crate) fn candidate_batch(
        &self,
        inner: &Inner,
        plan: &Plan,
        tail: &Tail,
        row: u64,
        n: u64,
    ) -> Result<(u64, u64, Vec<u32>), EngineError> {
        if let Some(b) = inner.base.as_ref().filter(|b| row < b.rows) {
            return b.session.base_candidates(plan, row, n.min(b.rows));
        }
        let (source, first, end) = self.source_of(inner, tail, row, n)?;
        let from_doc = u32::try_from(row - first).expect("a segment's rows fit in u32");
        let docs = match &source {
            Source::Tail(t) => {
                match plan.candidates(from_doc, |k, n, f, l| t.candidates(k, n, f, l)) {
                    Ok(d) => d,
                    // A damaged saved tail: this batch's rows are checked one by one, and the
                    // next search rebuilds the tail from the log.
                    Err(_) => {
                        t.base_damaged(self.is_read_only());
                        every_row(row, first, end)
                    }
                }
            }
            Source::Sealed(seg, s) => {
                match plan.candidates(from_doc, |k, n, f, l| s.candidates(k, n, f, l)) {
                    Ok(d) => d,
                    // A damaged file: rebuild it from the log and ask again.
                    Err(_) => {
                        let s = self.search.sealed(self, inner, *seg, true)?;
                        plan.candidates(from_doc, |k, n, f, l| s.candidates(k, n, f, l))?
                    }
                }
            }
            Source::Uncovered => every_row(row, first, end),
        };
        Ok((first, end, docs))
    }

    /// [`Session::candidate_batch`] on this Session, as the base of a layered fork.
    fn base_candidates(
        &self,
        plan: &Plan,
        row: u64,
        n: u64,
    ) -> Result<(u64, u64, Vec<u32>), EngineError> {
        let tail_guard = self.search.ready(self)?;
        let tail = tail_guard.as_ref().expect("ready() returns a loaded tail");
        let inner = self.read();
        self.candidate_batch(&inner, plan, tail, row, n)
    }
}

/// Pairs of a search tail below which the background flusher builds a Session's filter
/// even while the Session is being appended to.
const BACKGROUND_FILTER_PAIRS_MAX: u64 = 1 << 16;

impl Session {
    /// [`Session::refresh_filter`] when the search tail is loaded and caught up (at close:
    /// a filter costs no log reads then). Best effort: without one, searches open it.
    pub(crate) fn refresh_filter_if_indexed(&self) {
        self.search.with_loaded_tail(self, |inner, tail| {
            let _ = self.refresh_filter(inner, tail, true);
        });
    }

    /// The background flusher's [`Session::refresh_filter`]: builds the filter of an open
    /// Session that has none, without waiting for any lock, when every row is indexed and
    /// the Session is small (its search tail holds every row, fewer than
    /// [`BACKGROUND_FILTER_PAIRS_MAX`] pairs, so the build reads no file and takes
    /// microseconds) or has had no commit for `quiet_ms` (a busy large Session is not
    /// rebuilt on every tick). A search right after an ingest then rules
    /// out the Sessions the cache still holds open instead of searching each of them.
    pub(crate) fn refresh_filter_in_background(&self, quiet_ms: u64) {
        let Some(activity) = self.activity.get() else {
            return;
        };
        if self.is_read_only() || lock(&activity.summary.filter).is_some() {
            return;
        }
        let last_ms = activity.summary.last_ms.load(Ordering::Acquire);
        let quiet = crate::catalog::now_ms().saturating_sub(last_ms) >= quiet_ms;
        self.search.try_with_loaded_tail(self, |inner, tail| {
            let small = inner.base.is_none()
                && tail.first_row <= inner.row_base()
                && tail.is_small(BACKGROUND_FILTER_PAIRS_MAX);
            // Once per revision: a build that finds a postings file not loaded or damaged
            // leaves it to the next search.
            let tried = inner.state.revision + 1;
            if (quiet || small) && self.filter_tried.swap(tried, Ordering::AcqRel) != tried {
                // Only from postings loaded already: opening (or rebuilding) a finished
                // segment's postings here would hold the Session's appends up meanwhile.
                let _ = self.refresh_filter(inner, tail, false);
            }
        });
    }

    /// Builds this Session's trigram filter for its current revision when its catalog entry
    /// has none. `tail` must cover every row (as after `SearchIndex::ready`). Without `load`,
    /// builds none unless every finished segment's postings are loaded already.
    pub(crate) fn refresh_filter(
        &self,
        inner: &crate::session::Inner,
        tail: &Tail,
        load: bool,
    ) -> Result<(), EngineError> {
        let Some(activity) = self.activity.get() else {
            return Ok(());
        };
        let revision = inner.state.revision;
        let fresh = lock(&activity.summary.filter)
            .as_ref()
            .is_some_and(|f| f.revision == revision);
        if fresh || tail.covered < inner.row_count() {
            return Ok(());
        }
        // A layered fork's rows through its fence are its source's: the source's filter
        // (of the fence or later) stands for them, or none can be built yet.
        let base = match &inner.base {
            None => None,
            Some(b) => {
                let f = b
                    .session
                    .activity
                    .get()
                    .and_then(|a| lock(&a.summary.filter).clone());
                match f {
                    Some(f) if f.revision >= b.through => Some(f),
                    _ => return Ok(()),
                }
            }
        };
        let mut sealed = Vec::new();
        let mut row = inner.row_base();
        while row < tail.first_row {
            let seg = segment_of_row(self, inner, row)?;
            let s = if load {
                self.search.sealed(self, inner, seg, false)?
            } else {
                match self.search.sealed_if_loaded(seg) {
                    Some(s) => s,
                    None => return Ok(()),
                }
            };
            row = s.end_row.max(row + 1);
            sealed.push(s);
        }
        let mut damaged = false;
        let mut filter = TrigramFilter::build(revision, |add| {
            for s in &sealed {
                if s.for_each_trigram(&mut *add).is_err() {
                    damaged = true;
                    return;
                }
            }
            if tail.for_each_trigram(&mut *add).is_err() {
                tail.base_damaged(self.is_read_only());
                damaged = true;
            }
            // Titles are searched too, and are in no postings: their trigrams as a field's.
            let mut fold = crate::postings::FoldBuf::default();
            for (_, title) in &inner.state.titles {
                logbook_index::for_each_trigram(fold.field(title), &mut *add);
            }
        });
        if damaged {
            // Rebuilt from the log by the next search that reads them; no filter meanwhile.
            return Ok(());
        }
        if let Some(b) = base {
            filter.union(&b);
        }
        activity.summary.set_filter(Arc::new(filter));
        Ok(())
    }
}
