//! `searchRoot` against a plain in-memory model of every Session (its rows and titles, forks
//! copied from their source): random creates, appends, titles and forks, and searches whose
//! pages are followed while the Root keeps changing. The pages joined must equal the model's
//! hits as of the first page, in order: Sessions newest activity first, rows newest first,
//! fields and matches left to right.
//!
//! Seeds are printed; replay one with `SEARCH_ROOT_SEED=<n> cargo test -p logbook-engine
//! --test search_root`.
#![allow(clippy::unwrap_used)]

mod common;
use common::search_root_all;
use logbook_engine::*;
use logbook_index::Matcher;
use std::collections::BTreeMap;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, xs: &'a [&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const WORDS: &[&str] = &[
    "alpha", "Alpha", "beta", "gamma", "needle", "Needle", "NEEDLE", "ne", "x", "σ", "Σ", "ß",
    "ss", "中文", "😀", "error", "err", "-", " ", " ", " ", "\n", "é",
];
const QUERIES: &[&str] = &[
    "needle", "alpha", "a", "ne", "Σ", "ss", "error", "中", "e", "x", "absent", " b", "😀",
];

fn text(rng: &mut Rng, most: u64) -> String {
    (0..rng.below(most + 1)).map(|_| rng.pick(WORDS)).collect()
}

/// One unit that can hold hits: a row's searchable fields, or a title.
#[derive(Clone, Debug)]
struct Unit {
    sequence: u64,
    item: u32,
    fields: Vec<(&'static str, String)>,
}

#[derive(Clone, Debug, Default)]
struct Model {
    revision: u64,
    workspace: Option<String>,
    units: Vec<Unit>,
}

struct World {
    root: Option<Root>,
    model: BTreeMap<String, Model>,
    ops: u64,
}

impl World {
    fn root(&self) -> &Root {
        self.root.as_ref().unwrap()
    }

    fn create(&mut self, rng: &mut Rng) {
        let id = format!("s{:03}", self.model.len());
        let workspace = Some(format!("/w{}", rng.below(2)));
        self.ops += 1;
        self.root()
            .create_session(CreateSessionParams {
                session_id: Some(id.clone()),
                workspace: workspace.clone(),
                operation: format!("c{}", self.ops),
            })
            .unwrap();
        self.model.insert(
            id,
            Model {
                revision: 1,
                workspace,
                units: Vec::new(),
            },
        );
    }

    fn any(&self, rng: &mut Rng) -> String {
        let n = self.model.len() as u64;
        self.model
            .keys()
            .nth(rng.below(n) as usize)
            .unwrap()
            .clone()
    }

    fn append(&mut self, rng: &mut Rng) {
        let id = self.any(rng);
        self.ops += 1;
        let inv = format!("i{}", self.ops);
        let (user, body, thinking) = (text(rng, 6), text(rng, 8), text(rng, 3));
        let events: Vec<Event> = serde_json::from_value(serde_json::json!([
            {"kind": "userMessage", "invocation": inv, "text": user, "attachments": []},
            {"kind": "modelCompletion", "invocation": inv, "model": "m",
             "items": [{"kind": "assistant", "body": body, "thinking": thinking}], "usage": null},
            {"kind": "turnSettled", "invocation": inv, "outcome": "completed"},
        ]))
        .unwrap();
        let r = self
            .root()
            .append(AppendParams {
                session_id: id.clone(),
                operation: format!("a{}", self.ops),
                events,
            })
            .unwrap();
        let m = self.model.get_mut(&id).unwrap();
        assert_eq!(r.first_sequence, m.revision + 1);
        m.units.push(Unit {
            sequence: r.first_sequence,
            item: 0,
            fields: vec![("body", user)],
        });
        m.units.push(Unit {
            sequence: r.first_sequence + 1,
            item: 0,
            fields: vec![("body", body), ("thinking", thinking)],
        });
        m.revision = r.last_sequence;
    }

    fn title(&mut self, rng: &mut Rng) {
        let id = self.any(rng);
        self.ops += 1;
        let title = text(rng, 4).replace('\n', " ");
        if title.is_empty() {
            return;
        }
        let r = self
            .root()
            .set_title(SetTitleParams {
                session_id: id.clone(),
                operation: format!("t{}", self.ops),
                title: title.clone(),
            })
            .unwrap();
        let m = self.model.get_mut(&id).unwrap();
        m.units.push(Unit {
            sequence: r.sequence,
            item: 0,
            fields: vec![("title", title)],
        });
        m.revision = r.sequence;
    }

    fn fork(&mut self, rng: &mut Rng) {
        let id = self.any(rng);
        self.ops += 1;
        let source = self.model[&id].clone();
        let r = self
            .root()
            .fork(ForkParams {
                session_id: id,
                operation: format!("f{}", self.ops),
                from: ForkFrom::All,
                revision: source.revision,
            })
            .unwrap();
        self.model.insert(r.session_id, source);
    }

    fn mutate(&mut self, rng: &mut Rng) {
        match rng.below(10) {
            0 => self.create(rng),
            1 => self.fork(rng),
            2 => self.title(rng),
            _ => self.append(rng),
        }
    }

    /// The hits the model expects, as of now.
    fn expected(&self, q: &Query) -> Vec<RootHit> {
        let listing = self.root().sessions().unwrap();
        let last: BTreeMap<&str, u64> = listing
            .iter()
            .map(|s| (s.session_id.as_str(), s.last_activity_at))
            .collect();
        let mut order: Vec<(&String, &Model)> = self
            .model
            .iter()
            .filter(|(id, m)| {
                q.scope
                    .session_ids
                    .as_ref()
                    .is_none_or(|ids| ids.contains(id))
                    && q.scope
                        .workspace
                        .as_ref()
                        .is_none_or(|w| m.workspace.as_ref() == Some(w))
                    && q.since.is_none_or(|t| last[id.as_str()] >= t)
            })
            .collect();
        order.sort_by(|a, b| {
            (std::cmp::Reverse(last[a.0.as_str()]), a.0)
                .cmp(&(std::cmp::Reverse(last[b.0.as_str()]), b.0))
        });
        let matcher = Matcher::new(&q.query, q.case_sensitive, q.whole_word);
        let mut found = Vec::new();
        let mut out = Vec::new();
        for (id, m) in order {
            let mut units: Vec<&Unit> = m.units.iter().collect();
            units.sort_by_key(|u| std::cmp::Reverse((u.sequence, u.item)));
            for u in units {
                for (name, t) in &u.fields {
                    found.clear();
                    matcher.find_all(t, &mut found);
                    for &(s, e) in &found {
                        out.push(RootHit {
                            session_id: id.clone(),
                            position: Position {
                                source_sequence: u.sequence,
                                item_index: u.item,
                            },
                            field: (*name).to_owned(),
                            start: s as u64,
                            end: e as u64,
                        });
                    }
                }
            }
        }
        out
    }
}

struct Query {
    query: String,
    case_sensitive: bool,
    whole_word: bool,
    scope: SearchScope,
    since: Option<u64>,
}

/// RFC 3339 of milliseconds since the epoch (UTC).
fn rfc3339(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

fn random_query(w: &World, rng: &mut Rng) -> Query {
    let mut scope = SearchScope::default();
    let mut since = None;
    if rng.chance(20) {
        let ids: Vec<String> = w.model.keys().filter(|_| rng.chance(40)).cloned().collect();
        scope.session_ids = Some(ids);
    }
    if rng.chance(20) {
        scope.workspace = Some(format!("/w{}", rng.below(2)));
    }
    if rng.chance(15) {
        let listing = w.root().sessions().unwrap();
        let pick = &listing[rng.below(listing.len() as u64) as usize];
        since = Some(pick.last_activity_at);
        scope.active_since = Some(rfc3339(pick.last_activity_at));
    }
    Query {
        query: rng.pick(QUERIES).to_owned(),
        case_sensitive: rng.chance(30),
        whole_word: rng.chance(30),
        scope,
        since,
    }
}

fn run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed | 1);
    let options = RootOptions {
        durability: Durability::NoSyncBulkImport,
        index_sync_interval: std::time::Duration::from_secs(3600),
        segment_bytes_max: 1 << (12 + rng.below(4)),
        search_indexing: if rng.chance(50) {
            SearchIndexing::OnSearch
        } else {
            SearchIndexing::OnAppend
        },
        // Now and then a cache far smaller than the Root, so pages close and reopen Sessions.
        open_sessions_max: if rng.chance(25) {
            2 + rng.below(6) as usize
        } else {
            OPEN_SESSIONS_MAX
        },
        ..RootOptions::default()
    };
    let mut w = World {
        root: Some(Root::open_or_init_with(dir.path(), options.clone()).unwrap()),
        model: BTreeMap::new(),
        ops: 0,
    };
    for _ in 0..3 {
        w.create(&mut rng);
    }
    for round in 0..12 {
        for _ in 0..rng.below(25) {
            w.mutate(&mut rng);
        }
        if round == 6 {
            // A reopened Root: catalog and postings from disk, a fresh journal.
            drop(w.root.take());
            w.root = Some(Root::open_or_init_with(dir.path(), options.clone()).unwrap());
        }
        for _ in 0..3 {
            let q = random_query(&w, &mut rng);
            let expected = w.expected(&q);
            let mut got = Vec::new();
            let mut after = None;
            let mut pages = 0;
            loop {
                let page = w
                    .root()
                    .search_root(SearchRootParams {
                        query: q.query.clone(),
                        case_sensitive: Some(q.case_sensitive),
                        whole_word: Some(q.whole_word),
                        scope: Some(q.scope.clone()),
                        after: after.take(),
                        limit: Some(1 + rng.below(4) as u32),
                    })
                    .unwrap_or_else(|e| panic!("seed {seed}: searchRoot {:?}: {e}", q.query));
                got.extend(page.hits);
                pages += 1;
                // Each page holds a hit, or opens a Session, or is the last of a Session's
                // window: far fewer pages than this unless the cursor stopped moving.
                let cap = expected.len() + 100 * (w.model.len() + 10);
                assert!(pages < cap, "seed {seed}: no end after {pages} pages");
                match page.next_after {
                    None => break,
                    Some(a) => {
                        assert!(a.len() <= 1024);
                        after = Some(a);
                    }
                }
                // The Root moves on between pages; the search must not see it.
                if rng.chance(50) {
                    w.mutate(&mut rng);
                }
            }
            if got.len() != expected.len() {
                let first = got.iter().zip(&expected).position(|(g, e)| g != e);
                eprintln!(
                    "first difference at {first:?}: got {:?} expected {:?}",
                    first.and_then(|i| got.get(i)),
                    first.and_then(|i| expected.get(i))
                );
            }
            assert_eq!(
                got.len(),
                expected.len(),
                "seed {seed} round {round}: {:?} case {} word {} scope {:?}",
                q.query,
                q.case_sensitive,
                q.whole_word,
                q.scope
            );
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert_eq!(g, e, "seed {seed} round {round}: hit {i} of {:?}", q.query);
            }
        }
    }
}

#[test]
fn search_root_pages_match_the_model_while_the_root_changes() {
    if let Ok(s) = std::env::var("SEARCH_ROOT_SEED") {
        run(s.parse().unwrap());
        return;
    }
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let runs: u64 = std::env::var("SEARCH_ROOT_RUNS").map_or(6, |s| s.parse().unwrap());
    for i in 0..runs {
        let seed = base.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        eprintln!("searchRoot model seed {seed}");
        run(seed);
    }
}

#[test]
fn bad_requests_are_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open_or_init(dir.path()).unwrap();
    root.create_session(CreateSessionParams {
        session_id: Some("a".into()),
        workspace: None,
        operation: "c".into(),
    })
    .unwrap();
    let params = |query: &str| SearchRootParams {
        query: query.into(),
        case_sensitive: None,
        whole_word: None,
        scope: None,
        after: None,
        limit: None,
    };
    let kind = |p: SearchRootParams| root.search_root(p).unwrap_err().kind();
    assert_eq!(kind(params("")), ErrorKind::InvalidArgument);
    assert_eq!(
        kind(SearchRootParams {
            scope: Some(SearchScope {
                session_ids: Some(vec!["nope".into()]),
                ..SearchScope::default()
            }),
            ..params("x")
        }),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(SearchRootParams {
            scope: Some(SearchScope {
                active_since: Some("yesterday".into()),
                ..SearchScope::default()
            }),
            ..params("x")
        }),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(SearchRootParams {
            after: Some("bm90IGEgY3Vyc29y".into()),
            ..params("x")
        }),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(SearchRootParams {
            limit: Some(0),
            ..params("x")
        }),
        ErrorKind::InvalidArgument
    );
}

/// Options of a Root written without syncs, as the bench and an import write one.
fn bulk_import() -> RootOptions {
    RootOptions {
        durability: Durability::NoSyncBulkImport,
        ..RootOptions::default()
    }
}

/// One user message holding `text`, and its turn settled.
fn one_turn(text: &str) -> Vec<Event> {
    serde_json::from_value(serde_json::json!([
        {"kind": "userMessage", "invocation": "i", "text": text, "attachments": []},
        {"kind": "turnSettled", "invocation": "i", "outcome": "completed"},
    ]))
    .unwrap()
}

/// After a restart, a search opens only the Sessions whose filters let the query through.
#[test]
fn a_search_after_a_restart_opens_only_the_sessions_that_may_match() {
    let dir = tempfile::tempdir().unwrap();
    let options = bulk_import();
    let mut w = World {
        root: Some(Root::open_or_init_with(dir.path(), options.clone()).unwrap()),
        model: BTreeMap::new(),
        ops: 0,
    };
    for i in 0..40 {
        w.create(&mut Rng(1));
        let id = format!("s{i:03}");
        let text = if i == 17 {
            "the tombstone stays".to_owned()
        } else {
            format!("ordinary words number {i} and a needle")
        };
        w.root()
            .append(AppendParams {
                session_id: id,
                operation: "a".into(),
                events: one_turn(&text),
            })
            .unwrap();
    }
    drop(w.root.take());
    let root = Root::open_or_init_with(dir.path(), options).unwrap();
    assert_eq!(root.open_session_count(), 0);
    let page = root
        .search_root(SearchRootParams {
            query: "Tombstone".into(),
            case_sensitive: None,
            whole_word: None,
            scope: None,
            after: None,
            limit: None,
        })
        .unwrap();
    assert_eq!(page.hits.len(), 1);
    assert_eq!(page.hits[0].session_id, "s017");
    assert_eq!(page.next_after, None);
    assert_eq!(
        root.open_session_count(),
        1,
        "only the Session that may match was opened"
    );
    // A query every Session may match opens them all, a few per page, and they all answer.
    let (mut hits, mut pages, mut after) = (0, 0, None);
    loop {
        let page = root
            .search_root(SearchRootParams {
                query: "needle".into(),
                case_sensitive: None,
                whole_word: None,
                scope: None,
                after,
                limit: Some(1024),
            })
            .unwrap();
        hits += page.hits.len();
        pages += 1;
        after = page.next_after;
        if after.is_none() {
            break;
        }
    }
    assert_eq!(hits, 39);
    assert!(
        pages >= 39 / SEARCH_ROOT_OPENS_PER_PAGE_MAX,
        "{pages} pages"
    );
}

/// A Root of more Sessions than `searchRoot` lists on one thread: the filters are tested on
/// two threads, each over half of the Sessions, and the pages must be what the same search
/// gives when its scope names every Session (listed on one thread), before and after a
/// restart (filters from the catalog).
#[test]
fn thousands_of_sessions_listed_on_two_threads_answer_like_one() {
    let dir = tempfile::tempdir().unwrap();
    let options = bulk_import();
    let n = 2_100;
    let root = Root::open_or_init_with(dir.path(), options.clone()).unwrap();
    let ids: Vec<String> = (0..n).map(|i| format!("s{i:04}")).collect();
    for (i, id) in ids.iter().enumerate() {
        root.create_session(CreateSessionParams {
            session_id: Some(id.clone()),
            workspace: None,
            operation: format!("c{i}"),
        })
        .unwrap();
        let text = match i {
            3 | 1_049 | 1_050 | 2_099 => format!("row {i}: the tombstone stays"),
            _ if i % 7 == 0 => format!("row {i}: a needle here"),
            _ => format!("row {i}: ordinary words"),
        };
        root.append(AppendParams {
            session_id: id.clone(),
            operation: "a".into(),
            events: one_turn(&text),
        })
        .unwrap();
    }
    let all_pages = |root: &Root, query: &str, scope: Option<SearchScope>| {
        search_root_all(root, query, scope, 64)
    };
    let every = SearchScope {
        session_ids: Some(ids.clone()),
        ..SearchScope::default()
    };
    let check = |root: &Root| {
        // Session 1,050 is a multiple of 7 that holds the rare word instead.
        for (query, want) in [("Tombstone", 4), ("needle", n / 7 - 1), ("qzxvjpeer", 0)] {
            let two = all_pages(root, query, None);
            let one = all_pages(root, query, Some(every.clone()));
            assert_eq!(two.len(), want, "{query}");
            assert_eq!(two, one, "{query}: the two listings differ");
        }
        let rare: std::collections::BTreeSet<String> = all_pages(root, "tombstone", None)
            .into_iter()
            .map(|h| h.session_id)
            .collect();
        assert_eq!(
            rare.into_iter().collect::<Vec<_>>(),
            ["s0003", "s1049", "s1050", "s2099"]
        );
    };
    check(&root);
    drop(root);
    let root = Root::open_or_init_with(dir.path(), options).unwrap();
    check(&root);
}
