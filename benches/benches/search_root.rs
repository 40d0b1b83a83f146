//! `searchRoot` over a Root of many Sessions, side by side with SQLite FTS5 (trigram
//! tokenizer) over ONE table of the same rows, in the same run (criterion group
//! `search/root`).
//!
//! Corpus: `LOGBOOK_CORPUS` (default `target/corpus/rows500.jsonl`; made by the recipe in
//! docs/benchmarks.md, "Corpus"), rows `{"id","session","role","ts","text"}`. Layouts
//! (`LOGBOOK_SEARCH_ROOT_LAYOUTS`, default `corpus,10000`): `corpus` keeps the corpus's own
//! Sessions; a number N deals the rows into N Sessions in runs of consecutive rows.
//! Rows are ingested through the engine (user rows as `userMessage`, the others as
//! assistant `modelCompletion`s, one append per run of 256 events, no fsync), the Root is
//! closed and reopened, and then the first `searchRoot` after the restart is timed once.
//! `LOGBOOK_SEARCH_FTS5=0` skips the FTS5 peer; `LOGBOOK_SEARCH_ROOT_KEEP=1` keeps each Root
//! made (its folder is printed), to look at its files. `LOGBOOK_OPEN_SESSIONS_MAX=N` sets the
//! Root's open-Session cache to N Sessions (default: from the descriptor limit, at most
//! 1,024), to see what a search gains when every Session it visits stays open.
//!
//! Run: `cargo bench -p logbook-benches --bench search_root -- --warm-up-time 1 --measurement-time 3`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use logbook_engine::{
    AppendParams, CreateSessionParams, Durability, Event, Item, ModelCompletion, Root, RootOptions,
    SearchRootParams, UserMessage,
};
use std::path::Path;
use std::time::{Duration, Instant};

const NEEDLES: &[&str] = &["tombstone", "qzxvjpeer", "returnerrorthe", "error", "xz"];
const EVENTS_PER_APPEND: usize = 256;

struct Row {
    session: String,
    user: bool,
    text: String,
}

fn load() -> (Vec<Row>, u64, String) {
    let path = logbook_benches::corpus_files("rows500.jsonl").remove(0);
    let data = logbook_benches::read_corpus(&path);
    let mut rows = Vec::new();
    let mut bytes = 0u64;
    for line in data.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("corpus row");
        let text = v["text"].as_str().unwrap_or("").to_owned();
        bytes += text.len() as u64;
        rows.push(Row {
            session: v["session"].to_string(),
            user: v["role"] == "user",
            text,
        });
    }
    let label = format!("{}MB", bytes / 1_000_000);
    (rows, bytes, label)
}

/// The rows' Session groups: the corpus's own, or `n` runs of consecutive rows.
fn layout(rows: &[Row], n: Option<usize>) -> Vec<Vec<&Row>> {
    match n {
        Some(n) => {
            // Exactly n runs (when there are at least n rows), their lengths differing by one.
            let n = n.clamp(1, rows.len().max(1));
            (0..n)
                .map(|i| {
                    rows[i * rows.len() / n..(i + 1) * rows.len() / n]
                        .iter()
                        .collect()
                })
                .collect()
        }
        None => {
            let mut groups: Vec<Vec<&Row>> = Vec::new();
            let mut at = std::collections::HashMap::new();
            for r in rows {
                let i = *at.entry(r.session.as_str()).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[i].push(r);
            }
            groups
        }
    }
}

fn events(rows: &[&Row]) -> Vec<Event> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let invocation = format!("inv-{i}");
            if r.user {
                Event::UserMessage(UserMessage {
                    invocation,
                    text: r.text.clone(),
                    attachments: vec![],
                })
            } else {
                Event::ModelCompletion(ModelCompletion {
                    invocation,
                    model: "m".into(),
                    items: vec![Item::Assistant {
                        body: r.text.clone(),
                        thinking: None,
                    }],
                    usage: None,
                })
            }
        })
        .collect()
}

fn options() -> RootOptions {
    let defaults = RootOptions::default();
    RootOptions {
        durability: Durability::NoSyncBulkImport,
        open_sessions_max: std::env::var("LOGBOOK_OPEN_SESSIONS_MAX")
            .ok()
            .map_or(defaults.open_sessions_max, |v| {
                v.parse().expect("LOGBOOK_OPEN_SESSIONS_MAX is a number")
            }),
        ..defaults
    }
}

/// What a search right after the ingest saw: the time and the pages of every hit of the
/// rare needle, and their count.
struct JustAfter {
    took: Duration,
    pages: usize,
    hits: usize,
}

/// Ingests the groups, one Session each; then (the Root still open, its index work not
/// waited for) every hit of the rare needle, as a host searching right after an import.
fn ingest(dir: &Path, groups: &[Vec<&Row>]) -> (Duration, JustAfter) {
    let root = Root::open_or_init_with(dir, options()).unwrap();
    let t = Instant::now();
    for (g, rows) in groups.iter().enumerate() {
        let sid = format!("s{g:05}");
        root.create_session(CreateSessionParams {
            session_id: Some(sid.clone()),
            workspace: None,
            operation: format!("c{g}"),
        })
        .unwrap();
        for (k, chunk) in events(rows).chunks(EVENTS_PER_APPEND).enumerate() {
            root.append(AppendParams {
                session_id: sid.clone(),
                operation: format!("a{k}"),
                events: chunk.to_vec(),
            })
            .unwrap();
        }
    }
    let ingested = t.elapsed();
    let t = Instant::now();
    let (hits, pages) = hits(&root, NEEDLES[0], usize::MAX, 1024);
    let just_after = JustAfter {
        took: t.elapsed(),
        pages,
        hits,
    };
    drop(root);
    (ingested, just_after)
}

fn params(q: &str, after: Option<String>, limit: u32) -> SearchRootParams {
    SearchRootParams {
        query: q.into(),
        case_sensitive: Some(false),
        whole_word: None,
        scope: None,
        after,
        limit: Some(limit),
    }
}

/// Follows pages until `want` hits (or the end): (hits, pages).
fn hits(root: &Root, q: &str, want: usize, limit: u32) -> (usize, usize) {
    let (mut n, mut pages, mut after) = (0, 0, None);
    loop {
        let p = root.search_root(params(q, after, limit)).unwrap();
        n += p.hits.len();
        pages += 1;
        match p.next_after {
            Some(a) if n < want => after = Some(a),
            _ => return (n, pages),
        }
    }
}

struct Fts {
    conn: rusqlite::Connection,
    _dir: tempfile::TempDir,
    bytes: u64,
}

fn fts_build(rows: &[Row]) -> Fts {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fts.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
         CREATE VIRTUAL TABLE t USING fts5(session UNINDEXED, body, tokenize='trigram');",
    )
    .unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut st = tx
            .prepare("INSERT INTO t(session, body) VALUES (?1, ?2)")
            .unwrap();
        for r in rows {
            st.execute([&r.session, &r.text]).unwrap();
        }
    }
    tx.commit().unwrap();
    let bytes = std::fs::metadata(&path).unwrap().len();
    Fts {
        conn,
        _dir: dir,
        bytes,
    }
}

fn phrase(q: &str) -> String {
    format!("\"{}\"", q.replace('"', "\"\""))
}

fn fts_first(f: &Fts, q: &str) -> usize {
    let mut st = f
        .conn
        .prepare_cached("SELECT rowid FROM t WHERE t MATCH ?1 ORDER BY rowid DESC LIMIT 64")
        .unwrap();
    st.query_map([phrase(q)], |_| Ok(())).unwrap().count()
}

/// Every matching row's text read (what showing all hits needs).
fn fts_read_all(f: &Fts, q: &str) -> usize {
    let mut st = f
        .conn
        .prepare_cached("SELECT body FROM t WHERE t MATCH ?1")
        .unwrap();
    st.query_map([phrase(q)], |r| r.get::<_, String>(0).map(|s| s.len()))
        .unwrap()
        .map(|n| n.unwrap())
        .sum()
}

fn fts_count(f: &Fts, q: &str) -> u64 {
    let mut st = f
        .conn
        .prepare_cached("SELECT count(*) FROM t WHERE t MATCH ?1")
        .unwrap();
    st.query_row([phrase(q)], |r| r.get::<_, i64>(0)).unwrap() as u64
}

fn bench(c: &mut Criterion) {
    let (rows, text_bytes, label) = load();
    let fts = (std::env::var("LOGBOOK_SEARCH_FTS5").as_deref() != Ok("0")).then(|| {
        let t = Instant::now();
        let f = fts_build(&rows);
        eprintln!(
            "search/root {label}: FTS5 built in {:.1} s, {:.2}x the text",
            t.elapsed().as_secs_f64(),
            f.bytes as f64 / text_bytes as f64
        );
        f
    });
    let layouts =
        std::env::var("LOGBOOK_SEARCH_ROOT_LAYOUTS").unwrap_or_else(|_| "corpus,10000".into());
    for layout_name in layouts.split(',') {
        let n = layout_name.parse::<usize>().ok();
        let groups = layout(&rows, n);
        let mut dir = tempfile::tempdir().unwrap();
        if std::env::var_os("LOGBOOK_SEARCH_ROOT_KEEP").is_some() {
            eprintln!("search/root: the Root is kept at {}", dir.path().display());
            dir.disable_cleanup(true);
        }
        let (took, just_after) = ingest(dir.path(), &groups);
        let bytes: u64 = logbook_benches::bytes_by_kind(dir.path())
            .iter()
            .map(|k| k.1)
            .sum();
        let case = format!("{label}/{}sessions", groups.len());
        eprintln!(
            "search/root {case}: ingest {:.1} MB/s ({:.1} s); Root on disk {:.2}x the text",
            text_bytes as f64 / 1e6 / took.as_secs_f64(),
            took.as_secs_f64(),
            bytes as f64 / text_bytes as f64
        );
        eprintln!(
            "search/root {case}: by kind: {}",
            logbook_benches::bytes_by_kind_line(dir.path(), text_bytes)
        );
        let t = Instant::now();
        let root = Root::open_with(dir.path(), options()).unwrap();
        let opened = t.elapsed();
        let t = Instant::now();
        let n_first = root
            .search_root(params("tombstone", None, 64))
            .unwrap()
            .hits
            .len();
        eprintln!(
            "search/root {case}: open {:.1} ms, then the first searchRoot (rare, one page, \
             {n_first} hits) {:.1} ms",
            opened.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
        eprintln!(
            "search/root {case}: right after the ingest, every hit of {:?}: {} hits in {} \
             pages, {:.1} ms",
            NEEDLES[0],
            just_after.hits,
            just_after.pages,
            just_after.took.as_secs_f64() * 1e3
        );
        for q in NEEDLES {
            let (all, pages) = hits(&root, q, usize::MAX, 1024);
            if *q == NEEDLES[0] {
                assert_eq!(
                    all, just_after.hits,
                    "the search right after the ingest found other hits than after a restart"
                );
            }
            let fts_rows = fts.as_ref().map(|f| fts_count(f, q));
            eprintln!(
                "search/root {case} {q:?}: {all} hits in {pages} pages; FTS5 rows {fts_rows:?}"
            );
        }
        let mut g = c.benchmark_group(format!("search/root/{case}"));
        g.sample_size(10);
        for q in NEEDLES {
            // One request: a page may hold fewer than 64 hits (work is bounded per page).
            g.bench_function(BenchmarkId::new("logbook/first-page", q), |b| {
                b.iter(|| root.search_root(params(q, None, 64)).unwrap().hits.len())
            });
            g.bench_function(BenchmarkId::new("logbook/first-64-hits", q), |b| {
                b.iter(|| hits(&root, q, 64, 64))
            });
            g.bench_function(BenchmarkId::new("logbook/all-hits", q), |b| {
                b.iter(|| hits(&root, q, usize::MAX, 1024))
            });
            if let Some(f) = &fts {
                g.bench_function(BenchmarkId::new("fts5/first-page", q), |b| {
                    b.iter(|| fts_first(f, q))
                });
                g.bench_function(BenchmarkId::new("fts5/read-all", q), |b| {
                    b.iter(|| fts_read_all(f, q))
                });
                g.bench_function(BenchmarkId::new("fts5/count", q), |b| {
                    b.iter(|| fts_count(f, q))
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
