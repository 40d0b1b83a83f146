//! Search against models: a naive reference over every row under the fence, compared hit for
//! hit with the engine's pages (random histories, tiny segments, random limits, fences in the
//! middle, reopen between appends, damaged and missing postings files).
//!
//! Seeds are printed; replay one with `SEARCH_SEED=<n> cargo test -p logbook-engine --test search`.
#![allow(clippy::unwrap_used)]

mod common;

use logbook_engine::*;
use logbook_index::{fold_char, is_word_char, Matcher};
use std::path::{Path, PathBuf};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
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
}

/// Pieces texts and queries are made of: case-fold traps, marks, joiners, CJK, emoji.
const PIECES: &[&str] = &[
    "a",
    "b",
    "k",
    "K",
    "\u{212A}",
    "ß",
    "ẞ",
    "ss",
    "SS",
    "ς",
    "σ",
    "Σ",
    "e\u{301}",
    "\u{301}",
    "\u{200D}",
    "\u{200C}",
    "中",
    "文",
    "😀",
    "👩\u{200D}💻",
    " ",
    " ",
    "-",
    "_",
    "1",
    "x",
    "z",
    "xz",
    "ab",
    "AB",
    "é",
    "É",
    "İ",
    "ı",
    "i",
    "error",
    "Error",
    "\n",
    "ǅ",
    "ǆ",
    "Ǆ",
];

fn text(rng: &mut Rng, max_pieces: u64) -> String {
    let n = rng.below(max_pieces + 1);
    (0..n)
        .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
        .collect()
}

/// A row's searchable fields, in hit order.
type Fields = Vec<(&'static str, String)>;

/// A model row: position and its searchable fields in hit order.
#[derive(Clone, Debug)]
struct ModelRow {
    position: Position,
    fields: Vec<(&'static str, String)>,
}

/// What the test appended: rows by sequence.
#[derive(Default)]
struct Model {
    rows: Vec<ModelRow>,
    revision: u64,
    revisions: Vec<u64>,
    calls: u64,
    turns: u64,
}

fn options(segment: u64) -> RootOptions {
    RootOptions {
        durability: Durability::NoSyncBulkImport,
        segment_bytes_max: segment,
        ..RootOptions::default()
    }
}

/// Either way of indexing, tails saved on close or not, at random: the answers must not
/// depend on them.
fn random_options(segment: u64, rng: &mut Rng) -> RootOptions {
    RootOptions {
        search_indexing: if rng.chance(50) {
            SearchIndexing::OnSearch
        } else {
            SearchIndexing::OnAppend
        },
        search_tail_save_pairs_min: if rng.chance(50) {
            0
        } else {
            SEARCH_TAIL_SAVE_PAIRS_MIN
        },
        ..options(segment)
    }
}

fn tool_result(inv: &str, call: &str, body: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "toolResult", "invocation": inv, "toolCallId": call, "status": "ok", "body": body,
        "raw": {"x": 1}, "parts": [{"kind": "text", "text": body}],
        "bytes": body.len(), "digest": validate::sha256_digest(body.as_bytes())
    })
}

/// Appends one random Turn (as one or more batches) and records its rows in the model.
fn random_turn(root: &Root, sid: &str, m: &mut Model, rng: &mut Rng) {
    m.turns += 1;
    let inv = format!("inv-{}", m.turns);
    let mut batch: Vec<serde_json::Value> = Vec::new();
    let mut rows: Vec<(u64, Fields)> = Vec::new(); // (offset in batch, fields)
    let push_event = |batch: &mut Vec<serde_json::Value>, e: serde_json::Value| {
        batch.push(e);
        batch.len() as u64 - 1
    };
    let t = text(rng, 12);
    let at = push_event(
        &mut batch,
        serde_json::json!({"kind": "userMessage", "invocation": inv, "text": t, "attachments": []}),
    );
    rows.push((at, vec![("body", t)]));
    let steps = rng.below(3);
    let mut item_rows: Vec<(u64, u32, Fields)> = Vec::new();
    for _ in 0..steps {
        let mut items = Vec::new();
        let mut fields_of_items = Vec::new();
        let mut results = Vec::new();
        for _ in 0..1 + rng.below(3) {
            if rng.chance(50) {
                let body = text(rng, 16);
                let thinking = if rng.chance(50) {
                    Some(text(rng, 8))
                } else {
                    None
                };
                items.push(
                    serde_json::json!({"kind": "assistant", "body": body, "thinking": thinking}),
                );
                fields_of_items.push(vec![
                    ("body", body),
                    ("thinking", thinking.unwrap_or_default()),
                ]);
            } else {
                m.calls += 1;
                let id = format!("c{}", m.calls);
                let args = text(rng, 10);
                let internal = rng.chance(30);
                items.push(
                    serde_json::json!({"kind": "toolCall", "id": id, "name": text(rng, 3),
                    "arguments": args, "internal": internal}),
                );
                fields_of_items.push(vec![("arguments", args)]);
                results.push(id);
            }
        }
        let at = push_event(
            &mut batch,
            serde_json::json!({"kind": "modelCompletion", "invocation": inv, "model": "m",
                "items": items, "usage": null}),
        );
        for (i, f) in fields_of_items.into_iter().enumerate() {
            item_rows.push((at, i as u32, f));
        }
        for id in results {
            let body = text(rng, 24);
            let at = push_event(&mut batch, tool_result(&inv, &id, &body));
            item_rows.push((at, 0, vec![("body", body)]));
        }
    }
    if rng.chance(20) {
        let prompt = text(rng, 6);
        let at = push_event(
            &mut batch,
            serde_json::json!({"kind": "interactionRequested", "interactionId": format!("q{}", m.turns),
                "invocation": inv, "prompt": prompt, "options": ["y"]}),
        );
        item_rows.push((at, 0, vec![("body", prompt)]));
    }
    push_event(
        &mut batch,
        serde_json::json!({"kind": "turnSettled", "invocation": inv, "outcome": "completed"}),
    );
    for (at, f) in rows {
        item_rows.push((at, 0, f));
    }
    item_rows.sort_by_key(|(at, i, _)| (*at, *i));
    // Split the Turn into 1..=3 batches at random event boundaries.
    let mut cuts = vec![0usize, batch.len()];
    for _ in 0..rng.below(3) {
        cuts.push(rng.below(batch.len() as u64) as usize);
    }
    cuts.sort_unstable();
    cuts.dedup();
    let first_seq = m.revision + 1;
    for w in cuts.windows(2) {
        let events: Vec<Event> =
            serde_json::from_value(serde_json::Value::Array(batch[w[0]..w[1]].to_vec())).unwrap();
        let r = root
            .append(AppendParams {
                session_id: sid.into(),
                operation: format!("op-{}-{}", m.turns, w[0]),
                events,
            })
            .unwrap();
        m.revision = r.last_sequence;
        m.revisions.push(m.revision);
    }
    for (at, item, fields) in item_rows {
        m.rows.push(ModelRow {
            position: Position {
                source_sequence: first_seq + at,
                item_index: item,
            },
            fields,
        });
    }
}

/// Fully naive matcher: char by char, no index, no memmem, following SPEC section 3 literally.
fn naive_find_all(text: &str, query: &str, cs: bool, ww: bool) -> Vec<(usize, usize)> {
    let f = |c: char| if cs { c } else { fold_char(c) };
    let t: Vec<(usize, char)> = text.char_indices().collect();
    let q: Vec<char> = query.chars().map(f).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + q.len() <= t.len() {
        if (0..q.len()).all(|k| f(t[i + k].1) == q[k]) {
            let s = t[i].0;
            let e = t.get(i + q.len()).map_or(text.len(), |x| x.0);
            let before = i.checked_sub(1).map(|j| t[j].1);
            let after = t.get(i + q.len()).map(|x| x.1);
            if !ww || (!before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)) {
                out.push((s, e));
                i += q.len();
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Reference hits under `fence`: every row in position order, fields in order.
fn reference(
    m: &Model,
    fence: u64,
    query: &str,
    cs: bool,
    ww: bool,
    naive: bool,
) -> Vec<SearchHit> {
    let matcher = Matcher::new(query, cs, ww);
    let mut out = Vec::new();
    let mut found = Vec::new();
    for row in m
        .rows
        .iter()
        .filter(|r| r.position.source_sequence <= fence)
    {
        for (name, text) in &row.fields {
            found.clear();
            if naive {
                found = naive_find_all(text, query, cs, ww);
            } else {
                matcher.find_all(text, &mut found);
            }
            for &(s, e) in &found {
                out.push(SearchHit {
                    position: row.position,
                    field: (*name).to_owned(),
                    start: s as u64,
                    end: e as u64,
                });
            }
        }
    }
    out
}

/// Follows pages to the end with random limits; returns all hits and the page count.
fn engine_hits(
    root: &Root,
    sid: &str,
    fence: Option<u64>,
    query: &str,
    cs: bool,
    ww: bool,
    rng: &mut Rng,
) -> (u64, Vec<SearchHit>, usize) {
    let mut after = None;
    let mut hits = Vec::new();
    let mut pages = 0;
    let mut through = fence;
    loop {
        let limit = match rng.below(4) {
            0 => None,
            1 => Some(1),
            2 => Some(1 + rng.below(5) as u32),
            _ => Some(1 + rng.below(1024) as u32),
        };
        let page = root
            .search(SearchParams {
                session_id: sid.into(),
                query: query.into(),
                case_sensitive: Some(cs),
                whole_word: Some(ww),
                through,
                after: after.take(),
                limit,
            })
            .unwrap_or_else(|e| panic!("search {query:?}: {e}"));
        pages += 1;
        assert!(page.hits.len() <= limit.unwrap_or(SEARCH_HITS_DEFAULT) as usize);
        if let Some(t) = through {
            assert_eq!(page.through, t);
        }
        through = Some(page.through);
        hits.extend(page.hits);
        match page.next_after {
            None => break,
            Some(c) => after = Some(c),
        }
        assert!(pages < 100_000, "search does not end");
    }
    (through.expect("set"), hits, pages)
}

fn random_query(m: &Model, rng: &mut Rng) -> String {
    // Half the time a substring of a stored text (so hits exist), else random pieces.
    if rng.chance(50) && !m.rows.is_empty() {
        let row = &m.rows[rng.below(m.rows.len() as u64) as usize];
        let (_, t) = &row.fields[rng.below(row.fields.len() as u64) as usize];
        let chars: Vec<char> = t.chars().collect();
        if !chars.is_empty() {
            let a = rng.below(chars.len() as u64) as usize;
            let len = 1 + rng.below(6.min((chars.len() - a) as u64)) as usize;
            return chars[a..a + len].iter().collect();
        }
    }
    loop {
        let q = text(rng, 3);
        if !q.is_empty() {
            return q;
        }
    }
}

fn check_queries(root: &Root, sid: &str, m: &Model, rng: &mut Rng, queries: usize, seed: u64) {
    for _ in 0..queries {
        let q = random_query(m, rng);
        let cs = rng.chance(30);
        let ww = rng.chance(40);
        let fence = if rng.chance(40) && !m.revisions.is_empty() {
            Some(m.revisions[rng.below(m.revisions.len() as u64) as usize])
        } else {
            None
        };
        let (through, got, _) = engine_hits(root, sid, fence, &q, cs, ww, rng);
        assert_eq!(through, fence.unwrap_or(m.revision));
        let want = reference(m, through, &q, cs, ww, false);
        assert_eq!(
            got, want,
            "seed {seed}: query {q:?} cs={cs} ww={ww} fence {through}"
        );
        if rng.chance(25) {
            let naive = reference(m, through, &q, cs, ww, true);
            assert_eq!(
                naive, want,
                "seed {seed}: naive reference disagrees on {q:?}"
            );
        }
    }
}

fn seeds(default_count: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("SEARCH_SEED") {
        return vec![s.parse().expect("SEARCH_SEED is a number")];
    }
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    (0..default_count)
        .map(|i| base.wrapping_add(i * 7919) | 1)
        .collect()
}

fn postings_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|it| it.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    out.retain(|p| p.extension().is_some_and(|e| e == "post"));
    out.sort();
    out
}

#[test]
fn random_histories_match_the_reference() {
    for seed in seeds(6) {
        println!("random_histories_match_the_reference seed {seed}");
        let mut rng = Rng(seed);
        let dir = tempfile::tempdir().unwrap();
        let segment = [256, 1024, 4096][rng.below(3) as usize];
        Root::init(dir.path()).unwrap();
        let mut root = Root::open_with(dir.path(), random_options(segment, &mut rng)).unwrap();
        let sid = common::create(&root, "s");
        let mut m = Model {
            revision: 1,
            ..Model::default()
        };
        for round in 0..6 {
            for _ in 0..1 + rng.below(12) {
                random_turn(&root, &sid, &mut m, &mut rng);
                // The open-Session cache closes it: the next append loads the search tail
                // and queues its own rows for the index pool.
                if rng.chance(25) {
                    root.close_idle_sessions();
                }
            }
            if rng.chance(50) {
                drop(root);
                root = Root::open_with(dir.path(), random_options(segment, &mut rng)).unwrap();
            }
            check_queries(&root, &sid, &m, &mut rng, 12, seed);
            if round == 3 {
                // Searched once: appends now keep the tail postings up to date.
                check_queries(&root, &sid, &m, &mut rng, 4, seed);
            }
        }
        // A short random history may fit in one segment: grow it until the queries have been
        // checked across at least two finished segments' postings files.
        let search_dir = dir.path().join("sessions/s").join(SEARCH_DIR);
        let mut extra = 0;
        while postings_files(&search_dir).len() < 2 && extra < 400 {
            for _ in 0..8 {
                random_turn(&root, &sid, &mut m, &mut rng);
            }
            extra += 8;
            check_queries(&root, &sid, &m, &mut rng, 4, seed);
        }
        let files = postings_files(&search_dir);
        assert!(
            files.len() >= 2,
            "seed {seed}: segment {segment} should seal several segments, got {files:?}"
        );
    }
}

#[test]
fn damaged_missing_and_foreign_postings_are_rebuilt() {
    for seed in seeds(2) {
        println!("damaged_missing_and_foreign_postings_are_rebuilt seed {seed}");
        let mut rng = Rng(seed);
        let dir = tempfile::tempdir().unwrap();
        Root::init(dir.path()).unwrap();
        let mut root = Root::open_with(dir.path(), options(512)).unwrap();
        let sid = common::create(&root, "s");
        let mut m = Model {
            revision: 1,
            ..Model::default()
        };
        for _ in 0..40 {
            random_turn(&root, &sid, &mut m, &mut rng);
        }
        let queries: Vec<(String, bool, bool)> = (0..30)
            .map(|_| (random_query(&m, &mut rng), rng.chance(30), rng.chance(40)))
            .collect();
        let run = |root: &Root, rng: &mut Rng| -> Vec<Vec<SearchHit>> {
            queries
                .iter()
                .map(|(q, cs, ww)| engine_hits(root, &sid, None, q, *cs, *ww, rng).1)
                .collect()
        };
        let before = run(&root, &mut rng);
        for (i, (q, cs, ww)) in queries.iter().enumerate() {
            assert_eq!(
                before[i],
                reference(&m, m.revision, q, *cs, *ww, false),
                "seed {seed}"
            );
        }
        let sdir = dir.path().join("sessions/s").join(SEARCH_DIR);
        let files = postings_files(&sdir);
        assert!(
            files.len() >= 4,
            "seed {seed}: want several sealed files, got {files:?}"
        );
        drop(root);
        // One missing, one with flipped bytes in its lists, one truncated, one foreign.
        std::fs::remove_file(&files[0]).unwrap();
        let mut b = std::fs::read(&files[1]).unwrap();
        let mid = b.len() / 2;
        for x in &mut b[mid..] {
            *x ^= 0x5A;
        }
        std::fs::write(&files[1], &b).unwrap();
        let b = std::fs::read(&files[2]).unwrap();
        std::fs::write(&files[2], &b[..b.len() / 3]).unwrap();
        std::fs::write(&files[3], b"not a postings file at all").unwrap();
        root = Root::open_with(dir.path(), options(512)).unwrap();
        let after = run(&root, &mut rng);
        assert_eq!(before, after, "seed {seed}: results changed after damage");
        drop(root);
        // Rebuilt files are in place again and open cleanly.
        for f in &files[..4] {
            let p = logbook_index::PostingsFile::open(f).unwrap();
            p.verify().unwrap();
        }
        // The whole directory gone: still identical.
        std::fs::remove_dir_all(&sdir).unwrap();
        root = Root::open_with(dir.path(), options(512)).unwrap();
        assert_eq!(
            before,
            run(&root, &mut rng),
            "seed {seed}: directory removed"
        );
    }
}

fn search(
    root: &Root,
    sid: &str,
    q: &str,
    cs: bool,
    ww: bool,
) -> Vec<(u64, u32, String, u64, u64)> {
    let mut rng = Rng(42);
    engine_hits(root, sid, None, q, cs, ww, &mut rng)
        .1
        .into_iter()
        .map(|h| {
            (
                h.position.source_sequence,
                h.position.item_index,
                h.field,
                h.start,
                h.end,
            )
        })
        .collect()
}

#[test]
fn contract_examples() {
    let dir = tempfile::tempdir().unwrap();
    let root = common::root_at(dir.path());
    let sid = common::create(&root, "s");
    let inv = "inv-1";
    let batch = serde_json::json!([
        {"kind": "userMessage", "invocation": inv, "text": "Straße STRASSE ß ẞ \u{212A}elvin kelvin", "attachments": []},
        {"kind": "modelCompletion", "invocation": inv, "model": "m", "items": [
            {"kind": "assistant", "body": "σς Σ cafe\u{301} cafe", "thinking": "kelvin here"},
            {"kind": "toolCall", "id": "c1", "name": "kelvin", "arguments": "{\"k\":\"aaa\"}", "internal": true}
        ], "usage": null},
        tool_result(inv, "c1", "aaaa hidden kelvin"),
        {"kind": "turnSettled", "invocation": inv, "outcome": "completed"}
    ]);
    root.append(AppendParams {
        session_id: sid.clone(),
        operation: "a".into(),
        events: serde_json::from_value(batch).unwrap(),
    })
    .unwrap();
    // ß is not ss (simple folding only); ẞ folds to ß.
    assert_eq!(
        search(&root, &sid, "ß", false, false),
        vec![
            (2, 0, "body".into(), 4, 6),
            (2, 0, "body".into(), 16, 18),
            (2, 0, "body".into(), 19, 22)
        ]
    );
    assert_eq!(search(&root, &sid, "ss", false, false).len(), 1);
    assert_eq!(search(&root, &sid, "ß", true, false).len(), 2);
    // The Kelvin sign folds to k; offsets are in the original text. The name field is not
    // searched, the internal tool call and its result are.
    let k = search(&root, &sid, "kelvin", false, false);
    assert_eq!(
        k,
        vec![
            (2, 0, "body".into(), 23, 31),
            (2, 0, "body".into(), 32, 38),
            (3, 0, "thinking".into(), 0, 6),
            (4, 0, "body".into(), 12, 18)
        ]
    );
    assert_eq!(search(&root, &sid, "Kelvin", true, false).len(), 0);
    // σ, ς and Σ: simple folding maps ς and Σ to σ.
    assert_eq!(search(&root, &sid, "σ", false, false).len(), 3);
    assert_eq!(search(&root, &sid, "ς", true, false).len(), 1);
    // Whole word: a combining mark after the match is a word character.
    assert_eq!(
        search(&root, &sid, "cafe", false, true),
        vec![(3, 0, "body".into(), 15, 19)]
    );
    // Non-overlapping, resume at the match end: "aa" twice in "aaaa", once in "aaa".
    assert_eq!(
        search(&root, &sid, "aa", false, false),
        vec![
            (3, 1, "arguments".into(), 6, 8),
            (4, 0, "body".into(), 0, 2),
            (4, 0, "body".into(), 2, 4)
        ]
    );
    // Errors.
    let base = SearchParams {
        session_id: sid.clone(),
        query: "kelvin".into(),
        case_sensitive: None,
        whole_word: None,
        through: None,
        after: None,
        limit: Some(1),
    };
    let bad = |p: SearchParams| root.search(p).expect_err("refused").kind();
    assert_eq!(
        bad(SearchParams {
            query: String::new(),
            ..base.clone()
        }),
        ErrorKind::InvalidArgument
    );
    for limit in [0, SEARCH_HITS_MAX + 1] {
        assert_eq!(
            bad(SearchParams {
                limit: Some(limit),
                ..base.clone()
            }),
            ErrorKind::InvalidArgument
        );
    }
    assert_eq!(
        bad(SearchParams {
            through: Some(99),
            ..base.clone()
        }),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        bad(SearchParams {
            session_id: "nope".into(),
            ..base.clone()
        }),
        ErrorKind::NotFound
    );
    let first = root.search(base.clone()).unwrap();
    assert_eq!(first.hits.len(), 1);
    let cursor = first.next_after.clone().expect("more hits");
    for other in [
        SearchParams {
            query: "kelvim".into(),
            ..base.clone()
        },
        SearchParams {
            case_sensitive: Some(true),
            ..base.clone()
        },
        SearchParams {
            whole_word: Some(true),
            ..base.clone()
        },
        SearchParams {
            through: Some(first.through - 1),
            ..base.clone()
        },
    ] {
        assert_eq!(
            bad(SearchParams {
                after: Some(cursor.clone()),
                ..other
            }),
            ErrorKind::InvalidArgument
        );
    }
    let hist_cursor = root
        .history(HistoryParams {
            session_id: sid.clone(),
            through: None,
            after: None,
            limit: Some(1),
            anchor: None,
            direction: None,
        })
        .unwrap()
        .next_after
        .unwrap();
    assert_eq!(
        bad(SearchParams {
            after: Some(hist_cursor),
            ..base.clone()
        }),
        ErrorKind::InvalidArgument
    );
    // Another Session refuses the cursor too.
    let other = common::create(&root, "t");
    assert_eq!(
        bad(SearchParams {
            session_id: other,
            after: Some(cursor.clone()),
            ..base.clone()
        }),
        ErrorKind::InvalidArgument
    );
    // The wire shape.
    let json = serde_json::to_value(&first).unwrap();
    assert_eq!(
        json["hits"][0],
        serde_json::json!({"position": {"sourceSequence": 2, "itemIndex": 0}, "field": "body", "start": 23, "end": 31})
    );
    let p: SearchParams =
        serde_json::from_str(r#"{"sessionId":"s","query":"x","caseSensitive":null}"#).unwrap();
    assert_eq!(
        (p.case_sensitive, p.whole_word, p.limit),
        (None, None, None)
    );
}

#[test]
fn pages_that_find_nothing_are_bounded_and_end() {
    // Many rows, a 1-byte query (scanned: no trigram can narrow it), 1 hit at the very end:
    // pages stay bounded (each examines at most SEARCH_PAGE_ROWS_EXAMINED_MAX rows) and the
    // last one finds it. A 2-byte query uses the postings (edge trigrams): one page.
    let dir = tempfile::tempdir().unwrap();
    Root::init(dir.path()).unwrap();
    let root = Root::open_with(dir.path(), options(1 << 16)).unwrap();
    let sid = common::create(&root, "s");
    let rows = SEARCH_PAGE_ROWS_EXAMINED_MAX as usize * 2 + 10;
    let mut n = 0;
    while n < rows {
        let events: Vec<serde_json::Value> = (0..1000.min(rows - n))
            .map(|i| {
                serde_json::json!({"kind": "userMessage", "invocation": format!("i{}", n + i),
                "text": if n + i + 1 == rows { "end qz" } else { "plain row" }, "attachments": []})
            })
            .collect();
        n += events.len();
        root.append(AppendParams {
            session_id: sid.clone(),
            operation: format!("o{n}"),
            events: serde_json::from_value(serde_json::Value::Array(events)).unwrap(),
        })
        .unwrap();
    }
    let count_pages = |q: &str| {
        let mut after = None;
        let mut pages = 0;
        let mut hits = Vec::new();
        loop {
            let p = root
                .search(SearchParams {
                    session_id: sid.clone(),
                    query: q.into(),
                    case_sensitive: None,
                    whole_word: None,
                    through: None,
                    after: after.take(),
                    limit: None,
                })
                .unwrap();
            pages += 1;
            hits.extend(p.hits);
            match p.next_after {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        (hits.len(), pages)
    };
    let (hits, pages) = count_pages("q");
    assert_eq!(hits, 1);
    assert!(pages >= 3, "a scan of {rows} rows took only {pages} pages");
    assert_eq!(count_pages("qz"), (1, 1));
    // With trigrams nothing matches: one page answers.
    let p = root
        .search(SearchParams {
            session_id: sid.clone(),
            query: "qzxvjpeer".into(),
            case_sensitive: None,
            whole_word: None,
            through: None,
            after: None,
            limit: None,
        })
        .unwrap();
    assert!(p.hits.is_empty() && p.next_after.is_none());
}

#[test]
fn intact_postings_files_are_reused_not_rewritten() {
    let seed = seeds(1)[0];
    println!("intact_postings_files_are_reused_not_rewritten seed {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    Root::init(dir.path()).unwrap();
    let root = Root::open_with(dir.path(), options(512)).unwrap();
    let sid = common::create(&root, "s");
    let mut m = Model {
        revision: 1,
        ..Model::default()
    };
    for _ in 0..30 {
        random_turn(&root, &sid, &mut m, &mut rng);
    }
    check_queries(&root, &sid, &m, &mut rng, 5, seed);
    drop(root);
    let sdir = dir.path().join("sessions/s").join(SEARCH_DIR);
    let stamp = |files: &[PathBuf]| -> Vec<(PathBuf, std::time::SystemTime, u64)> {
        files
            .iter()
            .map(|f| {
                let md = std::fs::metadata(f).unwrap();
                (
                    f.clone(),
                    md.modified().unwrap(),
                    std::os::unix::fs::MetadataExt::ino(&md),
                )
            })
            .collect()
    };
    let before = stamp(&postings_files(&sdir));
    assert!(before.len() >= 3, "seed {seed}: {before:?}");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let root = Root::open_with(dir.path(), options(512)).unwrap();
    check_queries(&root, &sid, &m, &mut rng, 10, seed);
    drop(root);
    // Files present before are untouched (the log may have finished its active segment at
    // close, which then gets a file of its own).
    let after = stamp(&postings_files(&sdir));
    for b in &before {
        assert!(after.contains(b), "seed {seed}: {b:?} was rewritten");
    }
}

#[test]
fn searches_during_appends_see_exactly_their_fence() {
    let seed = seeds(1)[0];
    println!("searches_during_appends_see_exactly_their_fence seed {seed}");
    let dir = tempfile::tempdir().unwrap();
    Root::init(dir.path()).unwrap();
    let root = Root::open_with(dir.path(), options(1024)).unwrap();
    let sid = common::create(&root, "s");
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut m = Model {
        revision: 1,
        ..Model::default()
    };
    let queries = ["a", "ab", "kk", "σσ", "error", "e\u{301}", "😀"];
    let seen = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut rng = Rng(seed ^ 0xABCD);
            let mut seen = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let q = queries[rng.below(queries.len() as u64) as usize];
                let (through, hits, _) = engine_hits(&root, "s", None, q, false, false, &mut rng);
                seen.push((q, through, hits));
            }
            seen
        });
        let mut rng = Rng(seed);
        for _ in 0..60 {
            random_turn(&root, &sid, &mut m, &mut rng);
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        reader.join().unwrap()
    });
    assert!(!seen.is_empty());
    for (q, through, hits) in &seen {
        assert_eq!(
            *hits,
            reference(&m, *through, q, false, false, false),
            "seed {seed}: {q:?} at fence {through}"
        );
    }
    println!("{} concurrent searches checked", seen.len());
}

#[test]
fn a_search_sees_every_append_made_before_it() {
    // Appends are indexed by a worker thread; a search must still find the rows of every
    // append that returned before it, also across segment rolls (small segments here).
    let dir = tempfile::tempdir().unwrap();
    Root::init(dir.path()).unwrap();
    let root = Root::open_with(dir.path(), options(4096)).unwrap();
    let sid = common::create(&root, "s");
    let mut rng = Rng(7);
    let mut rows = 0u64;
    for a in 0..120 {
        let events: Vec<String> = (0..1 + a % 7)
            .map(|e| {
                serde_json::json!({"kind": "userMessage", "invocation": format!("i{a}-{e}"),
                    "text": format!("needle tok{a}x{e}z and some words to fill the row {}", "w".repeat(a * 13 % 200)),
                    "attachments": []})
                .to_string()
            })
            .collect();
        common::append(
            &root,
            &sid,
            &format!("op{a}"),
            &format!("[{}]", events.join(",")),
        )
        .unwrap();
        rows += events.len() as u64;
        for e in 0..events.len() {
            let (_, hits, _) = engine_hits(
                &root,
                &sid,
                None,
                &format!("tok{a}x{e}z"),
                true,
                false,
                &mut rng,
            );
            assert_eq!(hits.len(), 1, "append {a} event {e}");
        }
        if a % 10 == 0 {
            let (_, hits, _) = engine_hits(&root, &sid, None, "needle", true, false, &mut rng);
            assert_eq!(hits.len() as u64, rows, "after append {a}");
        }
    }
    let files = postings_files(&dir.path().join("sessions/s/search"));
    assert!(
        files.len() > 3,
        "segments rolled: {} postings files",
        files.len()
    );
    drop(root);
    // The worker's files are whole: after reopening, the same answers.
    let root = Root::open_with(dir.path(), options(4096)).unwrap();
    let (_, hits, _) = engine_hits(&root, &sid, None, "needle", true, false, &mut rng);
    assert_eq!(hits.len() as u64, rows);
    let (_, hits, _) = engine_hits(&root, &sid, None, "tok76x3z", true, false, &mut rng);
    assert_eq!(hits.len(), 1);
}

/// Records what long work was started, and over how many units.
#[derive(Default)]
struct Tasks(std::sync::Mutex<Vec<(String, u64)>>);

impl Progress for Tasks {
    fn start(&self, what: &str, total: u64, _unit: ProgressUnit) {
        self.0.lock().unwrap().push((what.to_owned(), total));
    }
    fn advance(&self, _done: u64) {}
    fn finish(&self) {}
}

fn tail_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = postings_files(dir);
    files.retain(|p| {
        p.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("tail-")
    });
    files
}

#[test]
fn a_saved_tail_is_read_back_checked_and_extended() {
    let seed = seeds(1)[0];
    println!("a_saved_tail_is_read_back_checked_and_extended seed {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    Root::init(dir.path()).unwrap();
    let sdir = dir.path().join("sessions/s").join(SEARCH_DIR);
    // One segment holds everything: the whole history is the tail.
    let open = |tasks: &std::sync::Arc<Tasks>| {
        let options = RootOptions {
            search_tail_save_pairs_min: 0,
            // The tail is saved as a tail, not as the postings of a segment sealed at close.
            seal_on_close_bytes_min: u64::MAX,
            progress: ProgressSink::new(tasks.clone()),
            ..options(1 << 30)
        };
        Root::open_with(dir.path(), options).unwrap()
    };
    // Rows the tail indexed from the log while a Root was open.
    let rebuilt = |tasks: &Tasks| -> Vec<u64> {
        let all = tasks.0.lock().unwrap();
        all.iter()
            .filter(|(what, _)| what.starts_with("building the search index of Session"))
            .map(|t| t.1)
            .collect()
    };
    let mut m = Model {
        revision: 1,
        ..Model::default()
    };
    let root = open(&Default::default());
    let sid = common::create(&root, "s");
    for _ in 0..20 {
        random_turn(&root, &sid, &mut m, &mut rng);
    }
    check_queries(&root, &sid, &m, &mut rng, 4, seed);
    drop(root);
    let saved = tail_files(&sdir);
    assert_eq!(saved.len(), 1, "{saved:?}");

    // Read back: the first search indexes nothing from the log, and answers the same.
    let tasks = std::sync::Arc::new(Tasks::default());
    let root = open(&tasks);
    check_queries(&root, &sid, &m, &mut rng, 8, seed);
    assert_eq!(rebuilt(&tasks), Vec::<u64>::new(), "seed {seed}");
    // Extended by appends, saved again in place of the old file.
    for _ in 0..5 {
        random_turn(&root, &sid, &mut m, &mut rng);
    }
    check_queries(&root, &sid, &m, &mut rng, 4, seed);
    drop(root);
    let again = tail_files(&sdir);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_ne!(again, saved, "the newer tail replaced the older one");

    // Damaged lists (the first half of the data and the directory records; the header and
    // the chunk table intact, so the file opens): a lookup that meets one checks those rows
    // one by one instead (answers unchanged) and deletes the file, and the next search
    // rebuilds the tail from the log.
    let mut bytes = std::fs::read(&again[0]).unwrap();
    // Header 64 bytes; lists (data, then records) up to the chunk table of 12 bytes per 16
    // lists (the list count is the u32 at 36) at the end.
    let lists = u32::from_le_bytes(bytes[36..40].try_into().unwrap()) as usize;
    let lists_end = bytes.len() - lists.div_ceil(16) * 12;
    for b in &mut bytes[64..64 + (lists_end - 64) / 2] {
        *b ^= 0x10;
    }
    std::fs::write(&again[0], &bytes).unwrap();
    let tasks = std::sync::Arc::new(Tasks::default());
    let root = open(&tasks);
    check_queries(&root, &sid, &m, &mut rng, 8, seed);
    assert!(!again[0].exists(), "seed {seed}: the damage went unnoticed");
    check_queries(&root, &sid, &m, &mut rng, 4, seed);
    assert_eq!(
        rebuilt(&tasks).len(),
        1,
        "seed {seed}: the damaged tail was kept"
    );
    drop(root);
    // A damaged header: refused on open, rebuilt at once.
    let saved = tail_files(&sdir);
    assert_eq!(saved.len(), 1, "{saved:?}");
    let mut bytes = std::fs::read(&saved[0]).unwrap();
    bytes[20] ^= 0x01;
    std::fs::write(&saved[0], &bytes).unwrap();
    let tasks = std::sync::Arc::new(Tasks::default());
    let root = open(&tasks);
    check_queries(&root, &sid, &m, &mut rng, 4, seed);
    assert_eq!(
        rebuilt(&tasks).len(),
        1,
        "seed {seed}: the damaged tail was used"
    );
    drop(root);
    let whole = tail_files(&sdir);
    assert_eq!(whole.len(), 1, "{whole:?}");
    let tasks = std::sync::Arc::new(Tasks::default());
    let root = open(&tasks);
    check_queries(&root, &sid, &m, &mut rng, 4, seed);
    assert_eq!(rebuilt(&tasks), Vec::<u64>::new(), "seed {seed}");
    drop(root);

    // A name that does not describe the rows (another last event): not trusted, deleted.
    let name = whole[0].file_name().unwrap().to_str().unwrap().to_owned();
    let seq_at = name.find("-seq-").unwrap() + "-seq-".len();
    let mut other = name.clone();
    other.replace_range(seq_at..seq_at + 16, &format!("{:016x}", u64::MAX - 1));
    std::fs::rename(&whole[0], sdir.join(&other)).unwrap();
    let tasks = std::sync::Arc::new(Tasks::default());
    let root = open(&tasks);
    check_queries(&root, &sid, &m, &mut rng, 4, seed);
    assert_eq!(
        rebuilt(&tasks).len(),
        1,
        "seed {seed}: a stale tail was used"
    );
    assert!(!sdir.join(&other).exists(), "the stale tail was kept");
}
