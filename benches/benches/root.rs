//! A Root of many small Sessions (`root/many_sessions/N`): what each fixed cost per Session
//! adds up to at the scale a host has.
//!
//! One pass per N builds the Root and prints what a single timed run can say: Sessions
//! created per second, the first durable append to each, ingest across the Sessions (one
//! durable append of ten rows to each) beside the peer a host uses today (one JSONL file per
//! Session, written and fsynced), bytes on disk per empty Session, and the open time. Criterion
//! then times what is cheap enough to repeat on the built Root: opening it with its first
//! `sessions` page, and the first page alone.
//!
//! The rows are synthetic text of about the bench corpus's row size (2.8 KB), not the corpus.
//! Run: `cargo bench -p logbook-benches --bench root -- --warm-up-time 1 --measurement-time 3`
//! (`LOGBOOK_BENCH_SESSIONS=1000,10000` picks the sizes; 1,000 by default, `0` none).
//! `LOGBOOK_BENCH_CORPUS_SERVE=1` also ingests the bench corpus (`LOGBOOK_CORPUS`, default
//! `target/corpus/rows500.jsonl`) through the server beside one JSONL file per Session.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use logbook_engine::*;
use std::hint::black_box;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// Rows appended to each Session by the ingest pass (the "10 rows per Session").
const ROWS_PER_SESSION: usize = 10;
/// Bytes of text per row, about the corpus average.
const ROW_TEXT_BYTES: usize = 2_770;

fn sizes() -> Vec<usize> {
    std::env::var("LOGBOOK_BENCH_SESSIONS")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .filter(|&n| n > 0)
                .collect()
        })
        .unwrap_or_else(|| vec![1_000])
}

fn row_text(session: usize, row: usize) -> String {
    let words = [
        "the",
        "index",
        "of",
        "every",
        "segment",
        "is",
        "synced",
        "before",
        "its",
        "checkpoint",
        "names",
        "it",
        "so",
        "recovery",
        "reads",
        "only",
        "the",
        "tail",
    ];
    let mut s = format!("session {session} row {row}:");
    let mut i = session * 7 + row * 13;
    while s.len() < ROW_TEXT_BYTES {
        s.push(' ');
        s.push_str(words[i % words.len()]);
        i = i.wrapping_mul(31).wrapping_add(17);
    }
    s
}

fn rows(session: usize) -> Vec<Event> {
    (0..ROWS_PER_SESSION)
        .map(|r| {
            Event::ModelCompletion(ModelCompletion {
                invocation: format!("inv-{session}"),
                model: "m".into(),
                items: vec![Item::Assistant {
                    body: row_text(session, r),
                    thinking: None,
                }],
                usage: None,
            })
        })
        .collect()
}

fn id(n: usize) -> String {
    format!("s{n:05}")
}

fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => du(&e.path()),
                    Ok(m) => m.blocks() * 512,
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Builds a Root of `n` Sessions with `ROWS_PER_SESSION` rows each and prints the one-pass
/// figures; returns the Root's directory.
fn build(n: usize, tmp: &Path) -> std::path::PathBuf {
    let dir = tmp.join(format!("root-{n}"));
    let root = Root::open_or_init(&dir).expect("root");
    // Beside each creation, in turns (see the ingest below): the peer's new conversation, an
    // empty JSONL file created and fsynced.
    let new_files = tmp.join(format!("jsonl-new-{n}"));
    std::fs::create_dir_all(&new_files).expect("mkdir");
    let (create, peer_create) = in_turns(
        n,
        |s| {
            root.create_session(CreateSessionParams {
                session_id: Some(id(s)),
                workspace: Some("/work/space".into()),
                operation: format!("c-{s}"),
            })
            .expect("create");
        },
        |s| {
            let f =
                std::fs::File::create(new_files.join(format!("{}.jsonl", id(s)))).expect("file");
            f.sync_all().expect("fsync");
        },
    );
    drop(root);
    let empty_bytes = du(&dir.join("sessions")) / n as u64;
    let root = Root::open(&dir).expect("reopen");
    let t = Instant::now();
    for s in 0..n {
        root.send(SendParams {
            session_id: id(s),
            operation: format!("m-{s}"),
            text: format!("question {s}"),
            attachments: vec![],
        })
        .expect("send");
    }
    let first_append = t.elapsed();
    let mut batches: Vec<Vec<Event>> = (0..n).map(rows).collect();
    let text_bytes: usize = (0..n)
        .flat_map(|s| (0..ROWS_PER_SESSION).map(move |r| row_text(s, r).len()))
        .sum();
    // The peer, one JSONL file per Session (one write and one fsync per file), takes turns
    // with the ingest, `PEER_TURN` Sessions each: this disk's fsync latency drifts severalfold
    // over seconds, and turns keep the ratio to what both met.
    let jsonl = tmp.join(format!("jsonl-{n}"));
    std::fs::create_dir_all(&jsonl).expect("mkdir");
    let (ingest, peer) = in_turns(
        n,
        |s| {
            root.append(AppendParams {
                session_id: id(s),
                operation: format!("a-{s}"),
                events: std::mem::take(&mut batches[s]),
            })
            .expect("append");
        },
        |s| jsonl_file(&jsonl, s),
    );
    let t = Instant::now();
    drop(root);
    let close = t.elapsed();
    let t = Instant::now();
    let root = Root::open(&dir).expect("open");
    let page = root
        .sessions_page(SessionsParams::default())
        .expect("first page");
    let open = t.elapsed();
    assert_eq!(page.sessions.len(), n.min(SESSIONS_PAGE_DEFAULT as usize));
    drop(root);
    let mb = text_bytes as f64 / 1e6;
    println!(
        "root/many_sessions/{n}: create {:.0}/s (a new JSONL file with fsync, in turns: {:.0}/s, \
         {:.2}x); first durable append {:.0}/s; \
         ingest {mb:.1} MB of text {:.1} MB/s vs one JSONL file per Session with fsync {:.1} MB/s \
         ({:.2}x); empty Session {:.1} KiB on disk; Root {:.2}x the text; \
         open + first sessions page {:.1} ms (after a clean close); the Root's close after the \
         ingest {:.2} s",
        n as f64 / create.as_secs_f64(),
        n as f64 / peer_create.as_secs_f64(),
        peer_create.as_secs_f64() / create.as_secs_f64(),
        n as f64 / first_append.as_secs_f64(),
        mb / ingest.as_secs_f64(),
        mb / peer.as_secs_f64(),
        peer.as_secs_f64() / ingest.as_secs_f64(),
        empty_bytes as f64 / 1024.0,
        du(&dir) as f64 / text_bytes as f64,
        open.as_secs_f64() * 1e3,
        close.as_secs_f64(),
    );
    dir
}

/// Sessions the ingest writes before the JSONL peer takes its turn (see `build`).
const PEER_TURN: usize = 100;

/// Runs `ours` and `peer` for Sessions `0..n`, taking turns `PEER_TURN` Sessions each (see
/// `build`); returns the time each took in all.
fn in_turns(
    n: usize,
    mut ours: impl FnMut(usize),
    mut peer: impl FnMut(usize),
) -> (Duration, Duration) {
    let (mut a, mut b) = (Duration::ZERO, Duration::ZERO);
    for turn in (0..n).step_by(PEER_TURN) {
        let range = turn..(turn + PEER_TURN).min(n);
        let t = Instant::now();
        range.clone().for_each(&mut ours);
        a += t.elapsed();
        let t = Instant::now();
        range.for_each(&mut peer);
        b += t.elapsed();
    }
    (a, b)
}

/// The peer for Session `s`: one JSONL file, written and fsynced.
fn jsonl_file(dir: &Path, s: usize) {
    let mut text = String::new();
    for r in 0..ROWS_PER_SESSION {
        text.push_str(
            &serde_json::json!({"type": "assistant", "text": row_text(s, r)}).to_string(),
        );
        text.push('\n');
    }
    let mut f = std::fs::File::create(dir.join(format!("{}.jsonl", id(s)))).expect("file");
    f.write_all(text.as_bytes()).expect("write");
    f.sync_all().expect("fsync");
}

/// [`jsonl_file`] for each of Sessions `range`; returns the time.
fn jsonl_files(dir: &Path, range: std::ops::Range<usize>) -> Duration {
    let t = Instant::now();
    range.for_each(|s| jsonl_file(dir, s));
    t.elapsed()
}

/// A `Write` the bench reads back: the server's answers.
#[derive(Clone, Default)]
struct Answers(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Answers {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("answers").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `logbook serve` in this process over `lines` against a new Root in `dir`; returns the
/// time from the first line read to the last answer written. Panics on any error answer.
/// Runs `lines` through the server; returns the time until every answer was written and the
/// time the Root's close took after it (the close waits for the seals of the Sessions it
/// closes, deferred while appends kept the disk busy).
fn serve_lines(dir: &Path, lines: &[String]) -> (std::time::Duration, std::time::Duration) {
    let host = std::sync::Arc::new(logbook_api::Host::open_or_init(dir).expect("host"));
    let kept = std::sync::Arc::clone(&host);
    let mut input = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for l in lines {
        input.extend_from_slice(l.as_bytes());
        input.push(b'\n');
    }
    let answers = Answers::default();
    let t = Instant::now();
    logbook_api::serve::serve(host, std::io::Cursor::new(input), Box::new(answers.clone()))
        .expect("serve");
    let took = t.elapsed();
    let t = Instant::now();
    drop(kept);
    let close = t.elapsed();
    let text = String::from_utf8(answers.0.lock().expect("answers").clone()).expect("utf-8");
    assert_eq!(text.lines().count(), lines.len(), "one answer per request");
    if let Some(bad) = text.lines().find(|l| l.contains("\"error\"")) {
        panic!("serve answered an error: {bad}");
    }
    (took, close)
}

fn request(id: usize, method: &str, params: &impl serde::Serialize) -> String {
    serde_json::json!({"id": id, "method": method, "params": params}).to_string()
}

/// Ingest of `n` Sessions of `ROWS_PER_SESSION` rows through `logbook serve` (in process): a
/// `createSession` and one durable `append` of the rows per Session, sent as one pipelined
/// stream (Session after Session), beside one JSONL file per Session written half right
/// before the run and half right after.
fn serve_ingest(n: usize, tmp: &Path) {
    let mut lines = Vec::with_capacity(2 * n);
    let mut text_bytes = 0usize;
    for s in 0..n {
        lines.push(request(
            2 * s,
            "createSession",
            &CreateSessionParams {
                session_id: Some(id(s)),
                workspace: Some("/work/space".into()),
                operation: format!("c-{s}"),
            },
        ));
        text_bytes += (0..ROWS_PER_SESSION)
            .map(|r| row_text(s, r).len())
            .sum::<usize>();
        lines.push(request(
            2 * s + 1,
            "append",
            &AppendParams {
                session_id: id(s),
                operation: format!("a-{s}"),
                events: rows(s),
            },
        ));
    }
    // The peer's files, half of them right before the run and half right after (see `build`).
    let jsonl = tmp.join(format!("serve-jsonl-{n}"));
    std::fs::create_dir_all(&jsonl).expect("mkdir");
    let mut peer = jsonl_files(&jsonl, 0..n / 2);
    let (took, close) = serve_lines(&tmp.join(format!("serve-{n}")), &lines);
    peer += jsonl_files(&jsonl, n / 2..n);
    let peer_mb_s = text_bytes as f64 / 1e6 / peer.as_secs_f64();
    let mb = text_bytes as f64 / 1e6;
    println!(
        "root/many_sessions/{n}: over serve, createSession + one durable append of {ROWS_PER_SESSION} rows \
         per Session: {:.0} Sessions/s, {:.1} MB/s of text ({:.2}x one JSONL file per Session with fsync); \
         then the Root's close {:.2} s",
        n as f64 / took.as_secs_f64(),
        mb / took.as_secs_f64(),
        mb / took.as_secs_f64() / peer_mb_s,
        close.as_secs_f64(),
    );
}

/// Corpus rows by Session: (session name, its rows in file order).
type CorpusSessions = Vec<(String, Vec<serde_json::Value>)>;

/// The bench corpus (`LOGBOOK_CORPUS`, default `target/corpus/rows500.jsonl`; see
/// `logbook_benches::corpus_files`): rows grouped by Session, in file order.
fn corpus_sessions() -> Option<(std::path::PathBuf, CorpusSessions)> {
    let path = logbook_benches::corpus_files("rows500.jsonl").remove(0);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            println!(
                "root/corpus_over_serve: skipped, {}",
                logbook_benches::corpus_missing(&path, &e)
            );
            return None;
        }
    };
    let mut order = Vec::new();
    let mut by: std::collections::HashMap<String, Vec<serde_json::Value>> = Default::default();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("corpus row");
        let s = v["session"].as_str().expect("session").to_owned();
        by.entry(s.clone())
            .or_insert_with(|| {
                order.push(s.clone());
                Vec::new()
            })
            .push(v);
    }
    let sessions = order
        .into_iter()
        .map(|s| {
            let rows = by.remove(&s).expect("grouped");
            (s, rows)
        })
        .collect();
    Some((path, sessions))
}

/// Events of corpus rows: user -> userMessage (a new invocation), assistant ->
/// modelCompletion, anything else -> toolResult.
fn corpus_events(rows: &[serde_json::Value], first: usize) -> Vec<serde_json::Value> {
    let mut inv = format!("inv-{first}");
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let text = r["text"].as_str().expect("text");
            match r["role"].as_str().expect("role") {
                "user" => {
                    inv = format!("inv-{}", first + i);
                    serde_json::json!({"kind": "userMessage", "invocation": inv, "text": text, "attachments": []})
                }
                "assistant" => serde_json::json!({"kind": "modelCompletion", "invocation": inv, "model": "m", "usage": null,
                    "items": [{"kind": "assistant", "body": text, "thinking": null}]}),
                _ => serde_json::json!({"kind": "toolResult", "invocation": inv, "toolCallId": format!("c-{}", first + i),
                    "status": "ok", "body": text, "raw": null, "parts": [], "bytes": text.len(),
                    "digest": format!("sha256:{}", sha256_hex(text.as_bytes()))}),
            }
        })
        .collect()
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Rows per `append` request of the corpus ingest (a host importing history in batches).
const CORPUS_ROWS_PER_APPEND: usize = 256;

/// The corpus as it comes, through `logbook serve` (in process): a `createSession` per Session
/// and its rows in durable appends of [`CORPUS_ROWS_PER_APPEND`], the Sessions' requests
/// interleaved (one batch of each in turn, as a host importing many conversations at once
/// pipelines them), beside one JSONL file per Session (its rows written, one fsync per file).
fn corpus_over_serve(tmp: &Path) {
    let Some((path, sessions)) = corpus_sessions() else {
        return;
    };
    let text_bytes: usize = sessions
        .iter()
        .flat_map(|(_, rows)| rows.iter())
        .map(|r| r["text"].as_str().expect("text").len())
        .sum();
    let mut lines = Vec::new();
    for (i, (s, _)) in sessions.iter().enumerate() {
        lines.push(request(
            lines.len(),
            "createSession",
            &serde_json::json!({"sessionId": s, "workspace": "/work/space", "operation": format!("c-{i}")}),
        ));
    }
    let mut batch = 0;
    loop {
        let mut any = false;
        for (s, rows) in &sessions {
            let at = batch * CORPUS_ROWS_PER_APPEND;
            if at >= rows.len() {
                continue;
            }
            any = true;
            let end = (at + CORPUS_ROWS_PER_APPEND).min(rows.len());
            lines.push(request(
                lines.len(),
                "append",
                &serde_json::json!({"sessionId": s, "operation": format!("a-{s}-{batch}"),
                    "events": corpus_events(&rows[at..end], at)}),
            ));
        }
        if !any {
            break;
        }
        batch += 1;
    }
    let dir = tmp.join("corpus-serve");
    // The peer's files, half of them right before the run and half right after (see `build`).
    let jsonl = tmp.join("corpus-jsonl");
    std::fs::create_dir_all(&jsonl).expect("mkdir");
    let peer_files = |part: &[(String, Vec<serde_json::Value>)]| {
        let t = Instant::now();
        for (s, rows) in part {
            let mut text = String::new();
            for r in rows {
                text.push_str(&r.to_string());
                text.push('\n');
            }
            let mut f = std::fs::File::create(jsonl.join(format!("{s}.jsonl"))).expect("file");
            f.write_all(text.as_bytes()).expect("write");
            f.sync_all().expect("fsync");
        }
        t.elapsed()
    };
    let half = sessions.len() / 2;
    let mut peer = peer_files(&sessions[..half]);
    let (took, close) = serve_lines(&dir, &lines);
    drop(lines);
    peer += peer_files(&sessions[half..]);
    let mb = text_bytes as f64 / 1e6;
    println!(
        "root/corpus_over_serve: {} ({} Sessions, {mb:.1} MB of text): durable ingest over serve \
         {:.1} MB/s vs one JSONL file per Session with fsync {:.1} MB/s ({:.2}x); Root {:.2}x the \
         text, JSONL {:.2}x; then the Root's close {:.2} s",
        path.display(),
        sessions.len(),
        mb / took.as_secs_f64(),
        mb / peer.as_secs_f64(),
        peer.as_secs_f64() / took.as_secs_f64(),
        du(&dir) as f64 / text_bytes as f64,
        du(&jsonl) as f64 / text_bytes as f64,
        close.as_secs_f64(),
    );
}

fn many_sessions(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tmp");
    if std::env::var_os("LOGBOOK_BENCH_CORPUS_SERVE").is_some() {
        corpus_over_serve(tmp.path());
    }
    for n in sizes() {
        let dir = build(n, tmp.path());
        serve_ingest(n, tmp.path());
        let mut g = c.benchmark_group("root/many_sessions");
        g.sample_size(10);
        g.bench_with_input(
            BenchmarkId::new("open_and_first_page", n),
            &dir,
            |b, dir| {
                b.iter(|| {
                    let root = Root::open(dir).expect("open");
                    black_box(root.sessions_page(SessionsParams::default()).expect("page"));
                })
            },
        );
        let root = Root::open(&dir).expect("open");
        g.bench_with_input(BenchmarkId::new("first_page", n), &root, |b, root| {
            b.iter(|| black_box(root.sessions_page(SessionsParams::default()).expect("page")))
        });
        g.finish();
    }
}

criterion_group!(benches, many_sessions);
criterion_main!(benches);
