//! Search index benches on the real-text corpus (see docs/benchmarks.md, "Corpus",
//! for the recipe): trigram postings + `Matcher` verification, against a full
//! scan with `Matcher` and SQLite FTS5 with the trigram tokenizer, in the same
//! groups. Index level only (no engine): the rows' texts are held in memory,
//! split into segments of 64 MiB of text, one postings file per segment.
//!
//! `LOGBOOK_BENCH_CORPUS=20|100|500` picks `body<N>.bin` (default 100, falling
//! back to 20 when absent); `LOGBOOK_CORPUS_DIR` (default `target/corpus`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use logbook_index::{fold_into, Matcher, PostingsBuilder, PostingsFile};
use rusqlite::Connection;

/// Text bytes per segment, like the log's default roll size.
const SEGMENT_TEXT_BYTES: usize = 64 << 20;
/// Hits on the first page of a search (the API's default limit).
const FIRST_PAGE_HITS: usize = 64;
/// Candidates asked of a postings file per call.
const CANDIDATES_PER_CALL: usize = 256;
/// Text bytes of the ingest comparison (FTS5 is slow: keep it short).
const INGEST_SAMPLE_BYTES: usize = 4 << 20;

struct Segment {
    rows: std::ops::Range<usize>,
    file: PostingsFile,
}

struct Corpus {
    label: String,
    texts: Vec<String>,
    bytes: u64,
    segments: Vec<Segment>,
    _dir: tempfile::TempDir,
    fts: Connection,
}

fn corpus_path() -> (PathBuf, String) {
    let dir = logbook_benches::corpus_dir();
    let want = std::env::var("LOGBOOK_BENCH_CORPUS").unwrap_or_else(|_| "100".into());
    let p = dir.join(format!("body{want}.bin"));
    if p.exists() {
        return (p, format!("{want}MB"));
    }
    eprintln!("{} is missing; falling back to body20.bin", p.display());
    (dir.join("body20.bin"), "20MB".into())
}

fn load_texts(path: &Path) -> Vec<String> {
    let body = std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}", logbook_benches::corpus_missing(path, &e)));
    body.split(|&b| b == 0x1E)
        .map(|t| String::from_utf8(t.to_vec()).expect("corpus rows are UTF-8"))
        .collect()
}

/// Folds and indexes `texts` in memory (doc = index within the slice), in one batch as a
/// bulk append does.
fn build_postings(texts: &[String]) -> PostingsBuilder {
    let mut b = PostingsBuilder::new();
    let mut batch = b.batch();
    let mut folded = String::new();
    for (doc, t) in texts.iter().enumerate() {
        folded.clear();
        fold_into(t, &mut folded);
        batch.add(doc as u32, folded.as_bytes());
    }
    drop(batch);
    b
}

/// Folds and indexes `texts`, then writes the sealed file (fsync'd): what a segment seal adds.
fn build_segment(texts: &[String], path: &Path) -> PostingsBuilder {
    let b = build_postings(texts);
    b.write(path).unwrap();
    b
}

fn build_fts(texts: &[String], path: &Path) -> Connection {
    let _ = std::fs::remove_file(path);
    let db = Connection::open(path).unwrap();
    db.execute_batch(
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
         CREATE VIRTUAL TABLE rows USING fts5(text, tokenize='trigram');",
    )
    .unwrap();
    let tx = db.unchecked_transaction().unwrap();
    {
        let mut ins = tx.prepare("INSERT INTO rows(text) VALUES (?1)").unwrap();
        for t in texts {
            ins.execute([t]).unwrap();
        }
    }
    tx.commit().unwrap();
    db
}

fn setup() -> Corpus {
    let (path, label) = corpus_path();
    let texts = load_texts(&path);
    let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let mut segments = Vec::new();
    let mut first = 0;
    let mut acc = 0;
    let mut index_bytes = 0;
    for i in 0..=texts.len() {
        if i == texts.len() || acc >= SEGMENT_TEXT_BYTES {
            if i > first {
                let p = dir.path().join(format!("seg{}.post", segments.len()));
                build_segment(&texts[first..i], &p);
                index_bytes += std::fs::metadata(&p).unwrap().len();
                segments.push(Segment {
                    rows: first..i,
                    file: PostingsFile::open(&p).unwrap(),
                });
            }
            first = i;
            acc = 0;
        }
        if i < texts.len() {
            acc += texts[i].len();
        }
    }
    let took = start.elapsed();
    eprintln!(
        "corpus {label}: {} rows, {bytes} text bytes, {} segments; postings {index_bytes} bytes = {:.3}x text; \
         indexed ingest (fold + postings + write + fsync) {:.1} MB/s",
        texts.len(),
        segments.len(),
        index_bytes as f64 / bytes as f64,
        bytes as f64 / took.as_secs_f64() / 1e6
    );
    let fts_path = dir.path().join("fts.db");
    let start = Instant::now();
    let fts = build_fts(&texts, &fts_path);
    let fts_took = start.elapsed();
    let fts_bytes = std::fs::metadata(&fts_path).unwrap().len();
    eprintln!(
        "FTS5 trigram: {fts_bytes} bytes = {:.2}x text, ingest {:.1} MB/s",
        fts_bytes as f64 / bytes as f64,
        bytes as f64 / fts_took.as_secs_f64() / 1e6
    );
    Corpus {
        label,
        texts,
        bytes,
        segments,
        _dir: dir,
        fts,
    }
}

/// Hits with the index: candidates from each segment's postings, verified with
/// `m` on the original text. Queries without trigrams scan. Stops after `max_hits`.
fn indexed_hits(c: &Corpus, m: &Matcher, max_hits: usize) -> usize {
    let mut hits = 0;
    let mut out = Vec::new();
    for seg in &c.segments {
        let rows = &c.texts[seg.rows.clone()];
        if m.trigrams().is_empty() {
            for t in rows {
                out.clear();
                m.find_all(t, &mut out);
                hits += out.len();
                if hits >= max_hits {
                    return max_hits;
                }
            }
            continue;
        }
        let mut from = 0;
        loop {
            let cands = seg
                .file
                .candidates(m.trigrams(), from, CANDIDATES_PER_CALL)
                .unwrap();
            let Some(&last) = cands.last() else { break };
            for &d in &cands {
                out.clear();
                m.find_all(&rows[d as usize], &mut out);
                hits += out.len();
                if hits >= max_hits {
                    return max_hits;
                }
            }
            from = last + 1;
        }
    }
    hits
}

/// Hits by scanning every row with `m`.
fn scan_hits(c: &Corpus, m: &Matcher, max_hits: usize) -> usize {
    let mut hits = 0;
    for t in &c.texts {
        hits += m.count(t);
        if hits >= max_hits {
            return max_hits;
        }
    }
    hits
}

/// FTS5 as its users query it: rows matching (MATCH for >= 3 chars, LIKE below;
/// GLOB for case-sensitive), not hits inside rows.
fn fts_rows(c: &Corpus, query: &str, case_sensitive: bool, limit: Option<usize>) -> usize {
    let pattern_like = format!("%{query}%");
    let pattern_glob = format!("*{query}*");
    let quoted = format!("\"{query}\"");
    let (sql, arg) = match (case_sensitive, query.chars().count() >= 3) {
        (true, _) => ("SELECT rowid FROM rows WHERE text GLOB ?1", pattern_glob),
        (false, true) => ("SELECT rowid FROM rows WHERE rows MATCH ?1", quoted),
        (false, false) => ("SELECT rowid FROM rows WHERE text LIKE ?1", pattern_like),
    };
    let sql = match limit {
        Some(n) => format!("{sql} LIMIT {n}"),
        None => sql.to_string(),
    };
    let mut st = c.fts.prepare_cached(&sql).unwrap();
    let mut rows = st.query([arg]).unwrap();
    let mut n = 0;
    while rows.next().unwrap().is_some() {
        n += 1;
    }
    n
}

const NEEDLES: &[(&str, &str)] = &[
    ("rare", "tombstone"),
    ("common", "error"),
    ("absent", "qzxvjpeer"),
    ("absent_common_trigrams", "returnerrorthe"),
    ("two_chars", "xz"),
    ("non_ascii", "SØREN"),
];

fn report_counts(c: &Corpus) {
    for &(name, q) in NEEDLES {
        for cs in [false, true] {
            let m = Matcher::new(q, cs, false);
            let idx = indexed_hits(c, &m, usize::MAX);
            let scan = scan_hits(c, &m, usize::MAX);
            assert_eq!(
                idx, scan,
                "{name} {q:?} case_sensitive={cs}: index and scan disagree"
            );
            let rows = c.texts.iter().filter(|t| m.is_match(t)).count();
            let fts = fts_rows(c, q, cs, None);
            eprintln!(
                "needle {name} {q:?} case_sensitive={cs}: {idx} hits in {rows} rows (index == scan); FTS5 rows {fts}"
            );
        }
    }
}

fn configure(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
}

fn bench_queries(crit: &mut Criterion, c: &Corpus) {
    let size = &c.label;
    // First page of a rare literal, and all hits of the others, per needle.
    for &(name, q) in NEEDLES {
        for cs in [false, true] {
            let mode = if cs { "sensitive" } else { "folded" };
            let m = Matcher::new(q, cs, false);
            let (op, max, limit) = if name == "rare" {
                ("first_page", FIRST_PAGE_HITS, Some(FIRST_PAGE_HITS))
            } else {
                ("count_all", usize::MAX, None)
            };
            let mut g = crit.benchmark_group(format!("search/{op}_{name}_{mode}/{size}"));
            configure(&mut g);
            g.bench_function(BenchmarkId::new("logbook_index", q), |b| {
                b.iter(|| black_box(indexed_hits(c, &m, max)))
            });
            g.bench_function(BenchmarkId::new("scan_matcher", q), |b| {
                b.iter(|| black_box(scan_hits(c, &m, max)))
            });
            g.bench_function(BenchmarkId::new("fts5_trigram", q), |b| {
                b.iter(|| black_box(fts_rows(c, q, cs, limit)))
            });
            g.finish();
        }
    }
}

fn bench_scan(crit: &mut Criterion, c: &Corpus) {
    let mut g = crit.benchmark_group(format!("search/scan/{}", c.label));
    configure(&mut g);
    g.throughput(Throughput::Bytes(c.bytes));
    let folded = Matcher::new("qzxvjpeer", false, false);
    let exact = Matcher::new("qzxvjpeer", true, false);
    let finder = memchr::memmem::Finder::new("qzxvjpeer");
    g.bench_function("matcher_folded", |b| {
        b.iter(|| black_box(scan_hits(c, &folded, usize::MAX)))
    });
    g.bench_function("matcher_exact", |b| {
        b.iter(|| black_box(scan_hits(c, &exact, usize::MAX)))
    });
    g.bench_function("memmem_exact", |b| {
        b.iter(|| {
            black_box(
                c.texts
                    .iter()
                    .map(|t| finder.find_iter(t.as_bytes()).count())
                    .sum::<usize>(),
            )
        })
    });
    g.finish();
}

fn bench_ingest(crit: &mut Criterion, c: &Corpus) {
    let mut n = 0;
    let mut bytes = 0;
    while n < c.texts.len() && bytes < INGEST_SAMPLE_BYTES {
        bytes += c.texts[n].len();
        n += 1;
    }
    let sample = &c.texts[..n];
    let dir = tempfile::tempdir().unwrap();
    let mut g = crit.benchmark_group(format!("search/ingest/{}MiB", INGEST_SAMPLE_BYTES >> 20));
    configure(&mut g);
    g.throughput(Throughput::Bytes(bytes as u64));
    let post = dir.path().join("ingest.post");
    g.bench_function("logbook_index_memory", |b| {
        b.iter(|| black_box(build_postings(sample).pair_count()))
    });
    g.bench_function("logbook_index_sealed", |b| {
        b.iter(|| black_box(build_segment(sample, &post).pair_count()))
    });
    let db = dir.path().join("ingest.db");
    g.bench_function("fts5_trigram", |b| {
        b.iter(|| drop(black_box(build_fts(sample, &db))))
    });
    g.finish();
}

fn benches(crit: &mut Criterion) {
    let c = setup();
    report_counts(&c);
    bench_scan(crit, &c);
    bench_queries(crit, &c);
    bench_ingest(crit, &c);
}

criterion_group!(search, benches);
criterion_main!(search);
