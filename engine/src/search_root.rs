//! `searchRoot`: one literal search over every Session of a Root (contract section 3).
//!
//! A search fixes its view of the Root with a stamp of the change journal (`crate::journal`)
//! on its first page: Sessions made after it are left out, and each Session is searched up
//! to its last sequence as of that stamp, so later pages see what the first page saw. The
//! Sessions are visited newest last activity first (as of the fence; ties by id), and inside
//! one, rows newest first with each row's fields left to right, which is the per-Session
//! search run backwards over the same postings: the candidates of one postings source (a
//! sealed segment, the active tail, or rows not indexed yet) at or below the resume point are
//! collected in order, then verified from the last down. A title set with `setTitle` is
//! searched as the field `title` at the position of its `titleSet` event.
//!
//! Each page does bounded work: the per-Session search's row, byte and lookup budgets, over
//! all the Sessions the page visits, at most [`SEARCH_ROOT_SESSIONS_PER_PAGE_MAX`]
//! Sessions, of which at most [`SEARCH_ROOT_OPENS_PER_PAGE_MAX`] were not open. A page may
//! end with no hits and a cursor.
//!
//! A Session that cannot be opened (damaged) is skipped unless the scope names it, in which
//! case the search fails with its error; the listing reports its damage.
//!
//! Cursor (`nextAfter`), URL-safe Base64 without padding of:
//!
//! | width | field |
//! |---|---|
//! | 1 | magic `b'R'` |
//! | 1 | [`SEARCH_ROOT_CURSOR_VERSION`] |
//! | 8 | epoch of the open Root that answered the first page, u64 LE |
//! | 8 | fence (journal stamp), u64 LE |
//! | 8 | first 8 bytes of SHA-256 of the query, its options and its scope |
//! | 8 | the next Session's last activity as of the fence (ms), u64 LE |
//! | 1 | length L of its id (at most 128) |
//! | L | its id |
//! | 1 | where in it: 0 not started, 1 in row, 2 in title |
//! | 8 | fence of that Session (a sequence; 0 when not started), u64 LE |
//! | 8 | row ordinal, or index of the title in the Session's titles |
//! | 1 | searchable field of that row (0 for a title) |
//! | 8 | byte offset in that field: only matches starting at or after it remain |
//! | 4 | CRC-32 of everything before it, u32 LE |
//!
//! At most 202 bytes before Base64 (272 characters), whatever the number of Sessions. A
//! cursor from another Root, from before the Root was reopened, or from a search whose
//! pages outlived [`crate::journal::JOURNAL_CHANGES_MAX`] commits is refused with
//! `invalid_argument`: start the search again.

use crate::error::EngineError;
use crate::journal::{Journal, Visit};
use crate::params::Position;
use crate::registry::{Shared, SESSIONS_DIR};
use crate::search::SEARCH_PAGE_LOOKUPS_MAX;
use crate::search::{row_key, Page, Plan, CANDIDATE_BATCH};
use crate::session::Session;
use crate::sync::lock;
use base64::Engine as _;
use logbook_index::Matcher;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::cmp::Reverse;
use std::sync::atomic::Ordering;

/// Version byte of `searchRoot` cursors.
pub const SEARCH_ROOT_CURSOR_VERSION: u8 = 1;
/// Most Sessions one `searchRoot` page visits.
pub const SEARCH_ROOT_SESSIONS_PER_PAGE_MAX: usize = 64;
/// Most Sessions one `searchRoot` page opens (the others it visits are open already).
pub const SEARCH_ROOT_OPENS_PER_PAGE_MAX: usize = 8;
const MAGIC: u8 = b'R';
const ID_BYTES_MAX: usize = crate::validate::ID_BYTES_MAX;
/// From this many Sessions a first page tests their filters on two threads.
const PARALLEL_LISTING_MIN: usize = 2048;

/// Which Sessions a `searchRoot` covers; every field optional, all of them must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchScope {
    /// Only these Sessions (each must exist).
    #[serde(default)]
    pub session_ids: Option<Vec<String>>,
    /// Only Sessions of this workspace (exact path string).
    #[serde(default)]
    pub workspace: Option<String>,
    /// Only Sessions whose last activity (as of the first page) is at or after this RFC 3339
    /// time.
    #[serde(default)]
    pub active_since: Option<String>,
}

/// `searchRoot` request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchRootParams {
    pub query: String,
    /// Default false: both sides simply case folded.
    #[serde(default)]
    pub case_sensitive: Option<bool>,
    /// Default false.
    #[serde(default)]
    pub whole_word: Option<bool>,
    /// Null: every Session.
    #[serde(default)]
    pub scope: Option<SearchScope>,
    /// The previous page's `nextAfter`; null starts a new search (and fixes its fence).
    #[serde(default)]
    pub after: Option<String>,
    /// Most hits per page: default [`SEARCH_HITS_DEFAULT`](crate::search::SEARCH_HITS_DEFAULT), at most
    /// [`SEARCH_HITS_MAX`](crate::search::SEARCH_HITS_MAX).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One match in one Session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootHit {
    pub session_id: String,
    pub position: Position,
    pub field: String,
    pub start: u64,
    pub end: u64,
}

/// One page of a `searchRoot`; `nextAfter` null means done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchRootPage {
    pub hits: Vec<RootHit>,
    pub next_after: Option<String>,
}

/// Where a search stands inside one Session, walking newest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resume {
    /// Not started: its fence is read when it is.
    Start,
    /// At row `row`, field `field`, matches from byte `offset`; everything newer is done.
    Row { row: u64, field: u8, offset: u64 },
    /// At title `index` (of the Session's titles), matches from byte `offset`.
    Title { index: u64, offset: u64 },
}

/// The cursor's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cursor {
    epoch: u64,
    fence: u64,
    binding: [u8; 8],
    last_ms: u64,
    session_id: String,
    through: u64,
    resume: Resume,
}

fn bad_cursor(why: &str) -> EngineError {
    EngineError::invalid(format!(
        "searchRoot cursor `after` {why}; pass the nextAfter of the previous page with the same \
         query, options and scope, or null to start a new search"
    ))
}

impl Cursor {
    fn encode(&self) -> String {
        let mut out = Vec::with_capacity(64 + self.session_id.len());
        out.push(MAGIC);
        out.push(SEARCH_ROOT_CURSOR_VERSION);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.fence.to_le_bytes());
        out.extend_from_slice(&self.binding);
        out.extend_from_slice(&self.last_ms.to_le_bytes());
        out.push(u8::try_from(self.session_id.len()).expect("ids are at most 128 bytes"));
        out.extend_from_slice(self.session_id.as_bytes());
        let (kind, at, field, offset) = match self.resume {
            Resume::Start => (0u8, 0, 0, 0),
            Resume::Row { row, field, offset } => (1, row, field, offset),
            Resume::Title { index, offset } => (2, index, 0, offset),
        };
        out.push(kind);
        out.extend_from_slice(&self.through.to_le_bytes());
        out.extend_from_slice(&at.to_le_bytes());
        out.push(field);
        out.extend_from_slice(&offset.to_le_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    }

    fn decode(text: &str) -> Result<Cursor, EngineError> {
        if text.len() > 1024 {
            return Err(bad_cursor("is longer than any cursor this engine makes"));
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .map_err(|_| bad_cursor("is not a cursor this engine made"))?;
        if raw.len() < 4 + 2 || raw[0] != MAGIC {
            return Err(bad_cursor("is not a searchRoot cursor"));
        }
        let (body, crc) = raw.split_at(raw.len() - 4);
        if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(bad_cursor("is damaged (checksum mismatch)"));
        }
        if body[1] != SEARCH_ROOT_CURSOR_VERSION {
            return Err(bad_cursor(&format!(
                "has version {} (this build makes version {SEARCH_ROOT_CURSOR_VERSION})",
                body[1]
            )));
        }
        let mut r = Fields { b: body, at: 2 };
        let short = || bad_cursor("is cut short");
        let epoch = r.u64().ok_or_else(short)?;
        let fence = r.u64().ok_or_else(short)?;
        let binding: [u8; 8] = r.take(8).ok_or_else(short)?.try_into().expect("8 bytes");
        let last_ms = r.u64().ok_or_else(short)?;
        let len = usize::from(r.take(1).ok_or_else(short)?[0]);
        let id = r.take(len).ok_or_else(short)?;
        let session_id = String::from_utf8(id.to_vec())
            .map_err(|_| bad_cursor("names a Session id that is not UTF-8"))?;
        let kind = r.take(1).ok_or_else(short)?[0];
        let through = r.u64().ok_or_else(short)?;
        let at = r.u64().ok_or_else(short)?;
        let field = r.take(1).ok_or_else(short)?[0];
        let offset = r.u64().ok_or_else(short)?;
        if r.at != body.len() || len > ID_BYTES_MAX {
            return Err(bad_cursor("has the wrong length"));
        }
        let resume = match kind {
            0 => Resume::Start,
            1 => Resume::Row {
                row: at,
                field,
                offset,
            },
            2 => Resume::Title { index: at, offset },
            _ => return Err(bad_cursor("has an unknown position kind")),
        };
        Ok(Cursor {
            epoch,
            fence,
            binding,
            last_ms,
            session_id,
            through,
            resume,
        })
    }
}

struct Fields<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The digest a cursor carries of the request it belongs to.
fn binding(p: &SearchRootParams, scope: &SearchScope) -> [u8; 8] {
    let mut h = Sha256::new();
    let mut part = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    part(p.query.as_bytes());
    part(&[
        u8::from(p.case_sensitive.unwrap_or(false)),
        u8::from(p.whole_word.unwrap_or(false)),
    ]);
    match &scope.session_ids {
        None => part(b"all"),
        Some(ids) => {
            let mut ids: Vec<&String> = ids.iter().collect();
            ids.sort();
            ids.dedup();
            part(b"ids");
            for id in ids {
                part(id.as_bytes());
            }
        }
    }
    part(scope.workspace.as_deref().unwrap_or("\0").as_bytes());
    part(scope.active_since.as_deref().unwrap_or("\0").as_bytes());
    let d = h.finalize();
    d[..8].try_into().expect("8 bytes")
}

/// Milliseconds since the Unix epoch of an RFC 3339 date-time (`2026-12-05T07:40:00Z`,
/// fractional seconds and a `±HH:MM` offset allowed).
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = b.get(r)?;
        t.iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(t).ok()?.parse().ok())?
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 3)];
        ms = digits.parse::<i64>().ok()? * 10i64.pow(3 - digits.len() as u32);
    }
    let offset_min = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), ..] if b.len() == i + 6 && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if *sign == b'+' {
                m
            } else {
                -m
            }
        }
        _ => return None,
    };
    // Days from the civil date (proleptic Gregorian), after H. Hinnant's algorithm.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let t = ((days * 24 + h) * 60 + mi - offset_min) * 60 + sec.min(59);
    u64::try_from(t * 1000 + ms).ok()
}

/// What a page may still spend.
struct Budget {
    /// The request is a search's first page (no cursor).
    first_page: bool,
    hits_left: usize,
    rows_examined: u64,
    bytes_examined: u64,
    lookups: u64,
}

/// How a Session's part of a page ended.
enum Walked {
    Done,
    /// Stopped (page full or budget spent) at this point.
    Stopped(Resume),
}

pub(crate) fn search_root(
    sh: &Shared,
    p: &SearchRootParams,
) -> Result<SearchRootPage, EngineError> {
    let limit = crate::search::checked_query_and_limit(&p.query, p.limit)?;
    let scope = p.scope.clone().unwrap_or_default();
    let since_ms = match &scope.active_since {
        None => None,
        Some(t) => Some(parse_rfc3339_ms(t).ok_or_else(|| {
            EngineError::invalid(format!(
                "scope.activeSince {:?} is not an RFC 3339 time such as 2026-12-05T07:40:00Z",
                shown(t)
            ))
        })?),
    };
    let bind = binding(p, &scope);
    let journal: &Journal = &sh.journal;
    let cursor = match &p.after {
        None => None,
        Some(text) => {
            let c = Cursor::decode(text)?;
            if c.epoch != journal.epoch {
                return Err(bad_cursor(
                    "was made by another Root, or before this Root was last opened",
                ));
            }
            if c.binding != bind {
                return Err(bad_cursor("was made for another query, options or scope"));
            }
            Some(c)
        }
    };
    let fence = cursor.as_ref().map_or_else(|| journal.fence(), |c| c.fence);
    let matcher = Matcher::new(
        &p.query,
        p.case_sensitive.unwrap_or(false),
        p.whole_word.unwrap_or(false),
    );
    let plan = Plan::new(&p.query, &matcher);
    let listed = sessions_in_scope(sh, &scope, since_ms, fence, cursor.as_ref(), &plan, bind)?;
    let named = scope.session_ids.is_some();
    let mut budget = Budget {
        first_page: cursor.is_none(),
        hits_left: limit as usize,
        rows_examined: 0,
        bytes_examined: 0,
        lookups: 0,
    };
    let mut hits = Vec::new();
    let mut stopped = None;
    let mut opens = 0;
    for (i, s) in listed.iter().enumerate() {
        let resumed = cursor
            .as_ref()
            .filter(|c| c.session_id == s.id && c.last_ms == s.last_ms && i == 0);
        let resume = resumed.map_or(Resume::Start, |c| c.resume);
        let opening = !sh.is_open(&s.id);
        let opened_enough = opening && opens == SEARCH_ROOT_OPENS_PER_PAGE_MAX;
        if i == SEARCH_ROOT_SESSIONS_PER_PAGE_MAX
            || opened_enough
            || spent(&budget)
            || budget.hits_left == 0
        {
            stopped = Some((s, 0, Resume::Start));
            break;
        }
        opens += usize::from(opening);
        let session = match sh.with_descriptors(|| sh.session_for_scan(&s.id)) {
            Ok(session) => session,
            Err(e) if named => return Err(e),
            // Damaged: the listing shows it; the search goes on without it.
            Err(_) => continue,
        };
        let through = match resume {
            Resume::Start => {
                let now = session.read().state.revision;
                let cut = journal
                    .view(fence, |v| v.first_change_after(&s.id))
                    .ok_or_else(expired)?;
                cut.map_or(now, |c| now.min(c.first_sequence.saturating_sub(1)))
            }
            _ => resumed.map_or(0, |c| c.through),
        };
        let before = hits.len();
        let walked =
            session.search_back(&matcher, &plan, through, resume, &mut budget, &mut hits)?;
        for h in &mut hits[before..] {
            h.session_id.clone_from(&s.id);
        }
        if let Walked::Stopped(at) = walked {
            stopped = Some((s, through, at));
            break;
        }
    }
    // Every page re-checks that the fence is still honoured (the journal kept its changes).
    journal.view(fence, |_| ()).ok_or_else(expired)?;
    let next_after = stopped.map(|(s, through, resume)| {
        Cursor {
            epoch: journal.epoch,
            fence,
            binding: bind,
            last_ms: s.last_ms,
            session_id: s.id.clone(),
            through,
            resume,
        }
        .encode()
    });
    Ok(SearchRootPage { hits, next_after })
}

fn expired() -> EngineError {
    bad_cursor(
        "is too old: more commits landed since its first page than the Root remembers; start \
         the search again",
    )
}

fn spent(b: &Budget) -> bool {
    b.lookups >= SEARCH_PAGE_LOOKUPS_MAX
        || crate::search::verified_enough(b.rows_examined, b.bytes_examined)
}

/// The Sessions in scope as of the fence, in visiting order, from the cursor's Session on
/// (at most one more than a page visits). The first page works them out from every Session
/// of the scope and keeps them with the journal for the later pages (`Visits`); a reader
/// works them out on every page, as it learns of the writer's commits only as it goes.
fn sessions_in_scope(
    sh: &Shared,
    scope: &SearchScope,
    since_ms: Option<u64>,
    fence: u64,
    cursor: Option<&Cursor>,
    plan: &Plan,
    request: [u8; 8],
) -> Result<Vec<Visit>, EngineError> {
    let keep = SEARCH_ROOT_SESSIONS_PER_PAGE_MAX + 1;
    let at = cursor.map(|c| (Reverse(c.last_ms), c.session_id.as_str()));
    let read_only = sh.options.read_only;
    if let (Some(at), false) = (at, read_only) {
        if let Some(kept) = sh.journal.visits(fence, request) {
            return Ok(kept.from(at, keep));
        }
    }
    let reg = lock(&sh.registry);
    let mut named: Vec<(&String, &crate::registry::Entry)> = Vec::new();
    if let Some(ids) = &scope.session_ids {
        let mut ids: Vec<&String> = ids.iter().collect();
        ids.sort();
        ids.dedup();
        for id in ids {
            let (id, e) = reg.sessions.get_key_value(id.as_str()).ok_or_else(|| {
                EngineError::invalid(format!(
                    "scope.sessionIds names {:?}, which is not a Session of this Root",
                    shown(id)
                ))
            })?;
            named.push((id, e));
        }
    }
    // One pass over the Sessions (each entry, its summary and its filter are touched once:
    // at 10,000 Sessions a first page is bound by those memory reads).
    let all = scope.session_ids.is_none().then(|| reg.sessions.iter());
    let entries = named
        .iter()
        .copied()
        .chain(all.into_iter().flatten())
        .filter(|(_, e)| scope.workspace.is_none() || e.workspace == scope.workspace);
    let sessions_dir = sh.dir.join(SESSIONS_DIR);
    // The registry stays locked (no Session is made meanwhile) while the journal is read;
    // only the Sessions that remain are copied out.
    let mut listed: Vec<Visit> = sh
        .journal
        .view(fence, |v| {
            let quiet = v.is_quiet();
            let test = |(id, e): (&String, &crate::registry::Entry)| -> Option<Visit> {
                if read_only {
                    // The writer's appends since the last look moved its files' times.
                    e.summary
                        .follow_times(&sessions_dir.join(id), sh.snapshot_ms);
                } else if e.summary.times_unknown() {
                    e.summary.fill_times(&sessions_dir.join(id));
                }
                let s = &e.summary;
                let change = if quiet {
                    None
                } else {
                    v.first_change_after(id)
                };
                let last_ms = match change {
                    Some(c) if c.first_sequence == 0 => return None,
                    Some(c) => c.previous_last_ms,
                    None => {
                        // Unchanged since the fence: a filter it has covers it as of the
                        // fence (a commit clears it before it is journaled). A reader
                        // learns of the writer's commits only when it reads the Session,
                        // so its filters may be behind: it searches every Session.
                        let ruled_out = !read_only
                            && lock(&s.filter).as_ref().is_some_and(|f| !f.may_match(plan));
                        if ruled_out {
                            return None;
                        }
                        s.last_ms.load(Ordering::Acquire)
                    }
                };
                let before_cursor = at.is_some_and(|at| (Reverse(last_ms), id.as_str()) < at);
                let too_old = since_ms.is_some_and(|t| last_ms < t);
                (!before_cursor && !too_old).then(|| Visit {
                    last_ms,
                    id: (*id).clone(),
                })
            };
            let n = reg.sessions.len();
            let parallel = scope.session_ids.is_none()
                && scope.workspace.is_none()
                && n >= PARALLEL_LISTING_MIN
                && crate::index_pool::cores() > 1;
            match parallel.then(|| reg.sessions.keys().nth(n / 2)).flatten() {
                // Memory bound (each Session's entry, summary and filter are cache misses):
                // the second half on a second core.
                Some(mid) => std::thread::scope(|sc| {
                    let later = std::thread::Builder::new().spawn_scoped(sc, || {
                        reg.sessions
                            .range::<String, _>(mid..)
                            .filter_map(test)
                            .collect::<Vec<Visit>>()
                    });
                    // No thread to be had: this one lists them all.
                    let Ok(later) = later else {
                        return reg.sessions.iter().filter_map(test).collect();
                    };
                    let mut first: Vec<Visit> = reg
                        .sessions
                        .range::<String, _>(..mid)
                        .filter_map(test)
                        .collect();
                    first.extend(
                        later
                            .join()
                            .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    );
                    first
                }),
                None => entries.filter_map(test).collect(),
            }
        })
        .ok_or_else(expired)?;
    drop(named);
    drop(reg);
    if listed.len() > keep {
        listed.select_nth_unstable_by(keep - 1, |a, b| a.key().cmp(&b.key()));
    }
    let mut page = listed[..listed.len().min(keep)].to_vec();
    page.sort_unstable_by(|a, b| a.key().cmp(&b.key()));
    if !read_only {
        sh.journal.keep_visits(fence, request, listed);
    }
    Ok(page)
}

/// A Session's titles (each `(sequence, title)` of its `titleSet` events under the fence)
/// searched newest first, in step with its rows.
struct Titles<'a> {
    list: Vec<&'a (u64, String)>,
    /// Titles `[..left]` are still to search.
    left: usize,
    /// The title the cursor stopped in, and the byte its remaining matches start at.
    resume_at: Option<(usize, u64)>,
    /// Hits: (row hits found before it, sequence, start, end).
    hits: Vec<(usize, u64, usize, usize)>,
}

impl Titles<'_> {
    /// Searches the titles set after event `seq` (all when None); Some(resume point) when
    /// the page filled up (`total` hits, rows' and titles' together).
    fn down_to(&mut self, page: &mut Page<'_>, total: usize, seq: Option<u64>) -> Option<Resume> {
        while self.left > 0 && seq.is_none_or(|s| self.list[self.left - 1].0 > s) {
            let i = self.left - 1;
            let (sequence, title) = self.list[i];
            let from = match self.resume_at {
                Some((ti, o)) if ti == i => o,
                _ => 0,
            };
            page.found.clear();
            page.matcher.find_all(title, &mut page.found);
            for &(s, e) in &page.found {
                if (s as u64) < from {
                    continue;
                }
                if page.hits.len() + self.hits.len() >= total {
                    return Some(Resume::Title {
                        index: i as u64,
                        offset: s as u64,
                    });
                }
                self.hits.push((page.hits.len(), *sequence, s, e));
            }
            self.left = i;
        }
        None
    }
}

impl Session {
    /// Searches this Session under fence `through`, newest row first, from `resume`, adding
    /// hits (their `session_id` left empty) until the budget is spent.
    fn search_back(
        &self,
        matcher: &Matcher,
        plan: &Plan,
        through: u64,
        resume: Resume,
        budget: &mut Budget,
        hits: &mut Vec<RootHit>,
    ) -> Result<Walked, EngineError> {
        self.check_live()?;
        let tail_guard = self.search.ready(self)?;
        let tail = tail_guard.as_ref().expect("ready() returns a loaded tail");
        let inner = self.read();
        let through = crate::history::fence(&inner, Some(through))?;
        let n = inner.rows_through(through)?;
        let titles: Vec<&(u64, String)> = inner
            .state
            .titles
            .iter()
            .filter(|(s, _)| *s <= through)
            .collect();
        let bad = |what: &str| {
            bad_cursor(&format!(
                "names {what} beyond the Session's fence {through}"
            ))
        };
        // Titles `[..t]` and rows `..=hi` remain, besides the resume point's own remainder.
        let (t, mut hi, mut at_row, at_title) = match resume {
            Resume::Start => (titles.len(), n.checked_sub(1), None, None),
            Resume::Row { row, field, offset } => {
                if row >= n {
                    return Err(bad("a row"));
                }
                let seq = row_key(self, &inner, row)?.0;
                let t = titles.partition_point(|(s, _)| *s < seq);
                (t, Some(row), Some((row, field, offset)), None)
            }
            Resume::Title { index, offset } => {
                let i = usize::try_from(index).ok().filter(|&i| i < titles.len());
                let i = i.ok_or_else(|| bad("a title"))?;
                let hi = inner.rows_through(titles[i].0 - 1)?.checked_sub(1);
                (i + 1, hi, None, Some((i, offset)))
            }
        };
        let mut page = Page {
            session: self,
            inner: &inner,
            matcher,
            limit: budget.hits_left,
            hits: Vec::new(),
            rows_examined: budget.rows_examined,
            bytes_examined: budget.bytes_examined,
            reader: crate::search::first_page_reader(self, budget.first_page),
            found: Vec::new(),
        };
        let mut titles = Titles {
            list: titles,
            left: t,
            resume_at: at_title,
            hits: Vec::new(),
        };
        let total = budget.hits_left;
        let mut lookups = budget.lookups;
        let walked = 'walk: loop {
            let Some(top) = hi else {
                if let Some(r) = titles.down_to(&mut page, total, None) {
                    break 'walk Walked::Stopped(r);
                }
                break 'walk Walked::Done;
            };
            let (first, cands) =
                self.window_candidates(&inner, plan, tail, top, n, &mut lookups)?;
            for &c in cands.iter().rev() {
                let seq = row_key(self, &inner, c)?.0;
                if let Some(r) = titles.down_to(&mut page, total, Some(seq)) {
                    break 'walk Walked::Stopped(r);
                }
                let (field, offset) = match at_row {
                    Some((r, f, o)) if r == c => (f, o),
                    _ => (0, 0),
                };
                let full = page.hits.len() + titles.hits.len() >= total;
                if full || page.out_of_work(lookups) {
                    break 'walk Walked::Stopped(Resume::Row {
                        row: c,
                        field,
                        offset,
                    });
                }
                page.limit = total - titles.hits.len();
                if let Some((f, o)) = page.verify(c, field, offset)? {
                    break 'walk Walked::Stopped(Resume::Row {
                        row: c,
                        field: f,
                        offset: o,
                    });
                }
            }
            at_row = None;
            hi = first.checked_sub(1);
            if let Some(below) = hi {
                let seq = row_key(self, &inner, below)?.0;
                if let Some(r) = titles.down_to(&mut page, total, Some(seq)) {
                    break 'walk Walked::Stopped(r);
                }
                if page.out_of_work(lookups) {
                    break 'walk Walked::Stopped(Resume::Row {
                        row: below,
                        field: 0,
                        offset: 0,
                    });
                }
            }
        };
        budget.rows_examined = page.rows_examined;
        budget.bytes_examined = page.bytes_examined;
        budget.lookups = lookups;
        if matches!(walked, Walked::Done) {
            // Built while the index is read-locked, so no commit lands between the build
            // and the catalog taking it.
            self.refresh_filter(&inner, tail, true)?;
        }
        // Merge the title hits in at the places they were found.
        let mut out = Vec::with_capacity(page.hits.len() + titles.hits.len());
        let row_hit = |h: crate::search::SearchHit| RootHit {
            session_id: String::new(),
            position: h.position,
            field: h.field,
            start: h.start,
            end: h.end,
        };
        let mut rows = page.hits.into_iter();
        let mut taken = 0;
        for (at, sequence, s, e) in titles.hits {
            out.extend(rows.by_ref().take(at - taken).map(row_hit));
            taken = at;
            out.push(RootHit {
                session_id: String::new(),
                position: Position {
                    source_sequence: sequence,
                    item_index: 0,
                },
                field: "title".to_owned(),
                start: s as u64,
                end: e as u64,
            });
        }
        out.extend(rows.map(row_hit));
        budget.hits_left -= out.len();
        hits.extend(out);
        Ok(walked)
    }

    /// The candidates of the postings source holding row `top`, from its first row up to
    /// `top`, ascending: `(first row of the source, candidates)`.
    fn window_candidates(
        &self,
        inner: &crate::session::Inner,
        plan: &Plan,
        tail: &crate::search::Tail,
        top: u64,
        n: u64,
        lookups: &mut u64,
    ) -> Result<(u64, Vec<u64>), EngineError> {
        // Where the source starts: known without a lookup, except in a layered fork's base.
        let first = if inner.base.as_ref().is_some_and(|b| top < b.rows) {
            *lookups += 1;
            self.candidate_batch(inner, plan, tail, top, n)?.0
        } else {
            self.source_of(inner, tail, top, n)?.1
        };
        let mut out = Vec::new();
        let mut row = first;
        loop {
            *lookups += 1;
            let (f, end, docs) = self.candidate_batch(inner, plan, tail, row, n)?;
            debug_assert_eq!(f, first, "one source");
            let full = docs.len() == CANDIDATE_BATCH;
            for d in docs {
                let r = f + u64::from(d);
                if r > top || r >= end {
                    return Ok((first, out));
                }
                out.push(r);
            }
            match out.last() {
                Some(&last) if full && last < top => row = last + 1,
                _ => return Ok((first, out)),
            }
        }
    }
}

/// `s` for an error message: at most 128 bytes of it, cut on a character boundary.
fn shown(s: &str) -> &str {
    let mut end = s.len().min(128);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sessions the cache still holds open after their appends get their filters from the
    /// background flusher, so the first search after an ingest rules them out unvisited.
    #[test]
    fn open_small_sessions_get_their_filters_in_the_background() {
        use crate::{AppendParams, CreateSessionParams, Root, RootOptions, SearchRootParams};
        let dir = tempfile::tempdir().expect("tmp");
        let options = RootOptions {
            index_sync_interval: std::time::Duration::from_millis(10),
            ..RootOptions::default()
        };
        let root = Root::open_or_init_with(dir.path(), options).expect("root");
        // More than a page visits, so a search that had to visit them would not end at once.
        let n = 2 * SEARCH_ROOT_SESSIONS_PER_PAGE_MAX;
        for i in 0..n {
            let id = format!("s{i:03}");
            root.create_session(CreateSessionParams {
                session_id: Some(id.clone()),
                workspace: None,
                operation: format!("c{i}"),
            })
            .expect("create");
            let text = if i == 7 {
                "the tombstone stays".to_owned()
            } else {
                format!("ordinary words number {i}")
            };
            let events = serde_json::from_value(serde_json::json!([
                {"kind": "userMessage", "invocation": "i", "text": text, "attachments": []},
            ]))
            .expect("events");
            root.append(AppendParams {
                session_id: id,
                operation: "a".into(),
                events,
            })
            .expect("append");
        }
        assert_eq!(root.open_session_count(), n, "the cache holds them all");
        let filtered = || {
            lock(&root.shared.registry)
                .sessions
                .values()
                .filter(|e| lock(&e.summary.filter).is_some())
                .count()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while filtered() < n && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(filtered(), n, "every open Session has its filter");
        let page = root
            .search_root(SearchRootParams {
                query: "tombstone".into(),
                case_sensitive: None,
                whole_word: None,
                scope: None,
                after: None,
                limit: None,
            })
            .expect("search");
        assert_eq!(page.hits.len(), 1);
        assert_eq!(page.hits[0].session_id, "s007");
        assert_eq!(page.next_after, None, "one page: the others were ruled out");
    }

    #[test]
    fn rfc3339_times() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            parse_rfc3339_ms("2026-12-05T07:40:00Z"),
            Some(1_796_456_400_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-12-05T08:40:00+01:00"),
            Some(1_796_456_400_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2000-02-29T12:00:00.123456-00:30"),
            Some(951_827_400_123)
        );
        for bad in [
            "",
            "2026-12-05",
            "2026-13-05T07:40:00Z",
            "2026-12-05T07:40:00",
            "2026-12-05T07:40:00+0100",
            "x026-12-05T07:40:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn cursors_round_trip_and_refuse_damage() {
        let c = Cursor {
            epoch: 1,
            fence: 99,
            binding: [7; 8],
            last_ms: 123,
            session_id: "s".repeat(128),
            through: 40,
            resume: Resume::Title {
                index: 2,
                offset: 17,
            },
        };
        let text = c.encode();
        assert!(text.len() <= 1024);
        assert_eq!(Cursor::decode(&text).expect("own"), c);
        let bytes = text.as_bytes();
        for i in 0..bytes.len() {
            let mut m = bytes.to_vec();
            m[i] = if m[i] == b'A' { b'B' } else { b'A' };
            let m = String::from_utf8(m).expect("ascii");
            if m != text {
                assert!(Cursor::decode(&m).is_err(), "byte {i}");
            }
        }
        assert!(Cursor::decode("").is_err());
    }
}
