//! Engine search on the real-text corpus, side by side with a plain scan and SQLite FTS5
//! (trigram tokenizer), plus indexed ingest speed and on-disk size.
//!
//! Corpus: `LOGBOOK_SEARCH_CORPUS` (default `rows100.jsonl` in `logbook_benches::corpus_dir`, rows
//! `{"id","session","role","ts","text"}`), all rows ingested into ONE Session in turns
//! (user -> userMessage, assistant -> modelCompletion with one assistant item,
//! toolResult -> toolResult) with `Durability::NoSyncBulkImport`.
//! `LOGBOOK_SEARCH_FTS5=0` skips the FTS5 peer (its build takes a while).
//! `LOGBOOK_SEARCH_KEEP=1` keeps the ingested Root after the run and prints its path, for
//! inspecting the files (sizes of the postings' sections, for example).
//!
//! Run: `cargo bench -p logbook-benches --bench engine_search -- --warm-up-time 1 --measurement-time 3`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use logbook_engine::{
    AppendParams, CreateSessionParams, Durability, Event, Item, ModelCompletion, Outcome, RawJson,
    Root, RootOptions, SearchParams, ToolResult, ToolStatus, TurnSettled, UserMessage,
};
use logbook_index::Matcher;
use std::path::Path;
use std::time::{Duration, Instant};

const NEEDLES: &[&str] = &[
    "tombstone",
    "error",
    "qzxvjpeer",
    "returnerrorthe",
    "xz",
    "→",
];
const EVENTS_PER_APPEND: usize = 512;

struct Corpus {
    rows: Vec<(String, String)>,
    text_bytes: u64,
    label: String,
}

fn load() -> Corpus {
    let path = match std::env::var_os("LOGBOOK_SEARCH_CORPUS") {
        Some(p) => std::path::PathBuf::from(p),
        None => logbook_benches::corpus_dir().join("rows100.jsonl"),
    };
    let data = logbook_benches::read_corpus(&path);
    let mut rows = Vec::new();
    let mut text_bytes = 0u64;
    for line in data.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("corpus row");
        let role = v["role"].as_str().unwrap_or("user").to_owned();
        let text = v["text"].as_str().unwrap_or("").to_owned();
        text_bytes += text.len() as u64;
        rows.push((role, text));
    }
    let label = format!("{}MB", text_bytes / 1_000_000);
    Corpus {
        rows,
        text_bytes,
        label,
    }
}

/// The corpus as append batches: turns opened by user rows.
fn batches(c: &Corpus) -> Vec<Vec<Event>> {
    let mut events = Vec::new();
    let mut inv: Option<String> = None;
    let mut calls = 0u64;
    for (i, (role, text)) in c.rows.iter().enumerate() {
        if role == "user" || inv.is_none() {
            if let Some(prev) = inv.take() {
                events.push(Event::TurnSettled(TurnSettled {
                    invocation: prev,
                    outcome: Outcome::Completed,
                }));
            }
            let id = format!("inv-{i}");
            inv = Some(id.clone());
            let body = if role == "user" {
                text.clone()
            } else {
                String::new()
            };
            events.push(Event::UserMessage(UserMessage {
                invocation: id,
                text: body,
                attachments: vec![],
            }));
            if role == "user" {
                continue;
            }
        }
        let invocation = inv.clone().expect("set above");
        if role == "assistant" {
            events.push(Event::ModelCompletion(ModelCompletion {
                invocation,
                model: "m".into(),
                items: vec![Item::Assistant {
                    body: text.clone(),
                    thinking: None,
                }],
                usage: None,
            }));
        } else {
            calls += 1;
            events.push(Event::ToolResult(ToolResult {
                invocation,
                tool_call_id: format!("c{calls}"),
                status: ToolStatus::Ok,
                body: text.clone(),
                raw: RawJson::null(),
                parts: vec![],
                bytes: text.len() as u64,
                digest: logbook_engine::validate::sha256_digest(text.as_bytes()),
            }));
        }
    }
    if let Some(prev) = inv {
        events.push(Event::TurnSettled(TurnSettled {
            invocation: prev,
            outcome: Outcome::Completed,
        }));
    }
    let mut out = Vec::new();
    let mut it = events.into_iter().peekable();
    while it.peek().is_some() {
        out.push(it.by_ref().take(EVENTS_PER_APPEND).collect());
    }
    out
}

fn options() -> RootOptions {
    RootOptions {
        durability: Durability::NoSyncBulkImport,
        ..RootOptions::default()
    }
}

/// Ingests every batch into a new Session; returns the time the appends took.
fn ingest(root: &Root, sid: &str, batches: &[Vec<Event>]) -> Duration {
    root.create_session(CreateSessionParams {
        session_id: Some(sid.into()),
        workspace: None,
        operation: format!("create-{sid}"),
    })
    .unwrap();
    let t = Instant::now();
    for (i, b) in batches.iter().enumerate() {
        root.append(AppendParams {
            session_id: sid.into(),
            operation: format!("op-{i}"),
            events: b.clone(),
        })
        .unwrap();
    }
    // Appends hand their rows to the index's worker thread: the time includes the wait until
    // a search can use them all (a search first waits for the worker).
    root.search(SearchParams {
        session_id: sid.into(),
        ..params("qzxvjpeer", None, 1)
    })
    .unwrap();
    t.elapsed()
}

fn dir_bytes(p: &Path) -> u64 {
    let mut total = 0;
    if let Ok(it) = std::fs::read_dir(p) {
        for e in it.flatten() {
            let m = e.metadata().unwrap();
            total += if m.is_dir() {
                dir_bytes(&e.path())
            } else {
                m.len()
            };
        }
    }
    total
}

fn params(q: &str, after: Option<String>, limit: u32) -> SearchParams {
    SearchParams {
        session_id: "bench".into(),
        query: q.into(),
        case_sensitive: None,
        whole_word: None,
        through: None,
        after,
        limit: Some(limit),
    }
}

/// Follows pages until the first hit (or the end): what a user waits for.
fn first_page(root: &Root, q: &str) -> usize {
    let mut after = None;
    loop {
        let p = root.search(params(q, after.take(), 64)).unwrap();
        if !p.hits.is_empty() || p.next_after.is_none() {
            return p.hits.len();
        }
        after = p.next_after;
    }
}

/// Every hit, following pages of 1024.
fn all_hits(root: &Root, q: &str) -> (usize, usize) {
    let (mut n, mut pages, mut after) = (0, 0, None);
    loop {
        let p = root.search(params(q, after.take(), 1024)).unwrap();
        pages += 1;
        n += p.hits.len();
        match p.next_after {
            Some(c) => after = Some(c),
            None => return (n, pages),
        }
    }
}

/// Every match in `texts`: (matches, bytes of the texts holding at least one). The bytes are
/// the least text an index-led search must read back to verify every hit (all-hits time over
/// them is its verify rate).
fn scan_all(texts: &[&str], m: &Matcher) -> (usize, u64) {
    let mut out = Vec::new();
    let (mut n, mut held) = (0, 0);
    for t in texts {
        out.clear();
        m.find_all(t, &mut out);
        n += out.len();
        if !out.is_empty() {
            held += t.len() as u64;
        }
    }
    (n, held)
}

struct Fts {
    conn: rusqlite::Connection,
    _dir: tempfile::TempDir,
    build: Duration,
    bytes: u64,
}

fn fts_build(c: &Corpus) -> Fts {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fts.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
         CREATE VIRTUAL TABLE t USING fts5(body, tokenize='trigram');",
    )
    .unwrap();
    let t = Instant::now();
    let tx = conn.transaction().unwrap();
    {
        let mut st = tx.prepare("INSERT INTO t(body) VALUES (?1)").unwrap();
        for (_, text) in &c.rows {
            st.execute([text]).unwrap();
        }
    }
    tx.commit().unwrap();
    let build = t.elapsed();
    let bytes = std::fs::metadata(&path).unwrap().len();
    Fts {
        conn,
        _dir: dir,
        build,
        bytes,
    }
}

fn fts_phrase(q: &str) -> String {
    format!("\"{}\"", q.replace('"', "\"\""))
}

fn fts_first(f: &Fts, q: &str) -> usize {
    let mut st = f
        .conn
        .prepare_cached("SELECT rowid FROM t WHERE t MATCH ?1 LIMIT 64")
        .unwrap();
    st.query_map([fts_phrase(q)], |_| Ok(())).unwrap().count()
}

fn fts_count(f: &Fts, q: &str) -> u64 {
    let mut st = f
        .conn
        .prepare_cached("SELECT count(*) FROM t WHERE t MATCH ?1")
        .unwrap();
    st.query_row([fts_phrase(q)], |r| r.get::<_, i64>(0))
        .unwrap() as u64
}

fn fts_like(f: &Fts, q: &str) -> u64 {
    let mut st = f
        .conn
        .prepare_cached("SELECT count(*) FROM t WHERE body LIKE ?1")
        .unwrap();
    st.query_row([format!("%{q}%")], |r| r.get::<_, i64>(0))
        .unwrap() as u64
}

fn bench(c: &mut Criterion) {
    let corpus = load();
    let batches = batches(&corpus);
    let mb = corpus.text_bytes as f64 / 1e6;
    let dir = tempfile::tempdir().unwrap();
    Root::init(dir.path()).unwrap();
    let root = Root::open_with(dir.path(), options()).unwrap();
    let took = ingest(&root, "bench", &batches);
    eprintln!(
        "engine_search: {} rows, {:.1} MB of text; indexed ingest {:.2} s = {:.0} MB/s",
        corpus.rows.len(),
        mb,
        took.as_secs_f64(),
        mb / took.as_secs_f64()
    );
    // Disk: close (sealing finishes, the search tail is saved), then measure the Session
    // directory.
    let t = Instant::now();
    drop(root);
    eprintln!(
        "engine_search: close after ingest (syncs, saves the search tail) {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let sdir = dir.path().join("sessions/bench");
    let log = dir_bytes(&sdir.join("log"));
    let idx = dir_bytes(&sdir.join(logbook_engine::SEARCH_DIR));
    let total = dir_bytes(&sdir);
    let tail: u64 = std::fs::read_dir(sdir.join(logbook_engine::SEARCH_DIR))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("tail-"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    eprintln!(
        "engine_search: on disk log {:.1} MB, search postings {:.1} MB (saved tail {:.1} MB), whole Session {:.1} MB = {:.2}x the raw text (postings alone {:.2}x)",
        log as f64 / 1e6,
        idx as f64 / 1e6,
        tail as f64 / 1e6,
        total as f64 / 1e6,
        total as f64 / corpus.text_bytes as f64,
        idx as f64 / corpus.text_bytes as f64
    );
    let search_dir = sdir.join(logbook_engine::SEARCH_DIR);
    let first_search_after_open = |what: &str| {
        let root = Root::open_with(dir.path(), options()).unwrap();
        let t = Instant::now();
        first_page(&root, "tombstone");
        eprintln!(
            "engine_search: first search after open ({what}) {:.1} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        root
    };
    drop(first_search_after_open("reads the saved tail postings"));
    for e in std::fs::read_dir(&search_dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("tail-") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let root = first_search_after_open("no saved tail: indexes the active segment from the log");
    let texts: Vec<&str> = corpus.rows.iter().map(|(_, t)| t.as_str()).collect();
    let fts = (std::env::var("LOGBOOK_SEARCH_FTS5").as_deref() != Ok("0")).then(|| {
        let f = fts_build(&corpus);
        eprintln!(
            "engine_search: FTS5 trigram build {:.1} s = {:.1} MB/s, {:.1} MB on disk = {:.2}x the raw text",
            f.build.as_secs_f64(),
            mb / f.build.as_secs_f64(),
            f.bytes as f64 / 1e6,
            f.bytes as f64 / corpus.text_bytes as f64
        );
        f
    });
    for q in NEEDLES {
        let (hits, pages) = all_hits(&root, q);
        let (scan, held) = scan_all(&texts, &Matcher::new(q, false, false));
        assert_eq!(hits, scan, "engine and scan disagree on {q:?}");
        let short = q.len() < 3;
        let peer = fts.as_ref().map(|f| {
            if short {
                fts_like(f, q)
            } else {
                fts_count(f, q)
            }
        });
        eprintln!(
            "engine_search: {q:?}: {hits} hits over {pages} pages (scan agrees); FTS5 rows {:?}; \
             text of the rows holding a hit {:.1} MB",
            peer,
            held as f64 / 1e6
        );
        let mut g = c.benchmark_group(format!("search/{q}/{}", corpus.label));
        g.sample_size(10);
        g.throughput(Throughput::Bytes(corpus.text_bytes));
        g.bench_function(BenchmarkId::new("logbook", "first-page"), |b| {
            b.iter(|| first_page(&root, q))
        });
        g.bench_function(BenchmarkId::new("logbook", "all-hits"), |b| {
            b.iter(|| all_hits(&root, q))
        });
        let m = Matcher::new(q, false, false);
        g.bench_function(BenchmarkId::new("scan-in-memory", "all-hits"), |b| {
            b.iter(|| scan_all(&texts, &m))
        });
        if let Some(f) = &fts {
            if short {
                g.bench_function(BenchmarkId::new("fts5-like", "count"), |b| {
                    b.iter(|| fts_like(f, q))
                });
            } else {
                g.bench_function(BenchmarkId::new("fts5", "first-page"), |b| {
                    b.iter(|| fts_first(f, q))
                });
                g.bench_function(BenchmarkId::new("fts5", "count"), |b| {
                    b.iter(|| fts_count(f, q))
                });
            }
        }
        g.finish();
    }
    drop(root);
    if std::env::var("LOGBOOK_SEARCH_KEEP").as_deref() == Ok("1") {
        eprintln!("engine_search: kept the Root at {}", dir.keep().display());
    }
    // Indexed ingest as a criterion figure on the first 20 MB of the corpus.
    let mut small = Vec::new();
    let mut bytes = 0u64;
    'fill: for b in &batches {
        let mut kept = Vec::new();
        for e in b {
            bytes += match e {
                Event::UserMessage(m) => m.text.len(),
                Event::ModelCompletion(m) => match &m.items[0] {
                    Item::Assistant { body, .. } => body.len(),
                    _ => 0,
                },
                Event::ToolResult(r) => r.body.len(),
                _ => 0,
            } as u64;
            kept.push(e.clone());
            if bytes >= 20_000_000 {
                small.push(kept);
                break 'fill;
            }
        }
        small.push(kept);
    }
    let mut g = c.benchmark_group(format!("search/ingest/{}MB", bytes / 1_000_000));
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("logbook-indexed", |b| {
        b.iter_with_large_drop(|| {
            let d = tempfile::tempdir().unwrap();
            Root::init(d.path()).unwrap();
            let r = Root::open_with(d.path(), options()).unwrap();
            ingest(&r, "bench", &small);
            (r, d)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
