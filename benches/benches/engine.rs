//! Engine benchmarks: history pages, bulk append, open; each beside its peers on the same rows
//! (one JSONL file per Session, parsed to page as agent tools do; SQLite, a plain table).
//!
//! Corpus: `LOGBOOK_CORPUS` (default `target/corpus/rows100.jsonl`, see `logbook_benches::corpus_files`), one Session holding every row;
//! several paths separated by commas run every group once per corpus (sizes side by side, e.g.
//! to see that the last page does not grow with history).
//! Run: `cargo bench -p logbook-benches --bench engine -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use logbook_engine::*;
use rusqlite::{params, Connection};
use std::hint::black_box;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

struct CorpusRow {
    role: String,
    text: String,
    line: String,
}

fn load_corpus(path: &Path) -> Vec<CorpusRow> {
    let f = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("{}", logbook_benches::corpus_missing(path, &e)));
    std::io::BufReader::new(f)
        .lines()
        .map(|l| {
            let line = l.expect("line");
            let v: serde_json::Value = serde_json::from_str(&line).expect("row json");
            CorpusRow {
                role: v["role"].as_str().expect("role").to_owned(),
                text: v["text"].as_str().expect("text").to_owned(),
                line,
            }
        })
        .collect()
}

/// The `logbook` command line: `LOGBOOK_BIN`, else the one built next to this bench
/// (`target/release/logbook`).
fn logbook_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("LOGBOOK_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("logbook");
    bin.is_file().then_some(bin)
}

/// Runs a command to its end with its output read and dropped; panics when it fails.
fn run_quiet(cmd: &mut std::process::Command) -> usize {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.len()
}

fn size_label(rows: &[CorpusRow]) -> String {
    let bytes: usize = rows.iter().map(|r| r.text.len()).sum();
    format!("{}MB", bytes / 1_000_000)
}

/// One event per corpus row: user -> userMessage, assistant -> modelCompletion, toolResult.
fn to_events(rows: &[CorpusRow]) -> Vec<Event> {
    let mut inv = String::from("inv-0");
    let mut out = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let e = match r.role.as_str() {
            "user" => {
                inv = format!("inv-{i}");
                Event::UserMessage(UserMessage {
                    invocation: inv.clone(),
                    text: r.text.clone(),
                    attachments: vec![],
                })
            }
            "assistant" => Event::ModelCompletion(ModelCompletion {
                invocation: inv.clone(),
                model: "m".into(),
                items: vec![Item::Assistant {
                    body: r.text.clone(),
                    thinking: None,
                }],
                usage: None,
            }),
            _ => Event::ToolResult(ToolResult {
                invocation: inv.clone(),
                tool_call_id: format!("c-{i}"),
                status: ToolStatus::Ok,
                body: r.text.clone(),
                raw: RawJson::null(),
                parts: vec![],
                bytes: r.text.len() as u64,
                digest: validate::sha256_digest(r.text.as_bytes()),
            }),
        };
        out.push(e);
    }
    out
}

const BATCH_EVENTS: usize = 256;

/// Bulk import: no fsync, and the search index is built by the first search, not by appends.
fn bulk_options() -> RootOptions {
    RootOptions {
        durability: Durability::NoSyncBulkImport,
        search_indexing: SearchIndexing::OnSearch,
        ..RootOptions::default()
    }
}

/// No fsync, but every append indexes its rows for search (the default indexing).
fn bulk_indexed_options() -> RootOptions {
    RootOptions {
        search_indexing: SearchIndexing::OnAppend,
        ..bulk_options()
    }
}

/// A new Root at `dir` holding one empty Session `s`.
fn new_root(dir: &Path, options: RootOptions) -> Root {
    Root::init(dir).expect("init");
    let root = Root::open_with(dir, options).expect("open");
    root.create_session(CreateSessionParams {
        session_id: Some("s".into()),
        workspace: None,
        operation: "c".into(),
    })
    .expect("create");
    root
}

/// `events` in batches of [`BATCH_EVENTS`], as the appends of a bulk import.
fn batches_of(events: &[Event]) -> Vec<Vec<Event>> {
    events.chunks(BATCH_EVENTS).map(|c| c.to_vec()).collect()
}

/// Appends every batch to Session `s`, operations `b0`, `b1`, ...
fn append_batches(root: &Root, batches: Vec<Vec<Event>>) {
    for (i, events) in batches.into_iter().enumerate() {
        root.append(AppendParams {
            session_id: "s".into(),
            operation: format!("b{i}"),
            events,
        })
        .expect("append");
    }
}

/// Pages forward through all of Session `s` under `through`, 1024 rows a page; the row count.
fn page_forward_all(root: &Root, through: u64) -> usize {
    let (mut after, mut n) = (None, 0usize);
    loop {
        let p = root
            .history(history_params(
                after,
                1024,
                Direction::Forward,
                Some(through),
            ))
            .expect("page");
        n += p.rows.len();
        after = p.next_after;
        if after.is_none() {
            return n;
        }
    }
}

/// [`page_forward_all`] with the rows borrowed ([`Root::history_each`]); adds up the field
/// bytes so the rows are looked at.
fn page_forward_each(root: &Root, through: u64) -> (usize, u64) {
    let (mut after, mut n, mut bytes) = (None, 0usize, 0u64);
    loop {
        let params = history_params(after, 1024, Direction::Forward, Some(through));
        let end = root
            .history_each(params, |r| {
                n += 1;
                bytes += r.fields().map(|(_, f)| f.text.len() as u64).sum::<u64>();
            })
            .expect("page");
        after = end.next_after;
        if after.is_none() {
            return (n, bytes);
        }
    }
}

fn build_root(dir: &Path, events: &[Event]) {
    let root = new_root(dir, bulk_options());
    append_batches(&root, batches_of(events));
    root.sync_indexes().expect("sync");
}

fn build_jsonl(path: &Path, rows: &[CorpusRow]) {
    let mut w = BufWriter::new(std::fs::File::create(path).expect("jsonl"));
    for r in rows {
        w.write_all(r.line.as_bytes()).expect("write");
        w.write_all(b"\n").expect("write");
    }
    w.flush().expect("flush");
}

fn build_sqlite(path: &Path, rows: &[CorpusRow]) -> Connection {
    let _ = std::fs::remove_file(path);
    let mut c = Connection::open(path).expect("sqlite");
    c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; CREATE TABLE rows(id INTEGER PRIMARY KEY, session TEXT, role TEXT, body TEXT);")
        .expect("schema");
    let tx = c.transaction().expect("tx");
    {
        let mut st = tx
            .prepare("INSERT INTO rows(session, role, body) VALUES ('s', ?1, ?2)")
            .expect("prepare");
        for r in rows {
            st.execute(params![r.role, r.text]).expect("insert");
        }
    }
    tx.commit().expect("commit");
    c
}

/// What agent tools do to show the end of a conversation: read the file, parse every line.
fn jsonl_last_page(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).expect("read");
    let all: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("parse"))
        .collect();
    all[all.len().saturating_sub(n)..].to_vec()
}

fn sqlite_page(c: &Connection, before: i64, n: usize) -> Vec<(i64, String, String)> {
    let mut st = c
        .prepare_cached("SELECT id, role, body FROM rows WHERE id < ?1 ORDER BY id DESC LIMIT ?2")
        .expect("prepare");
    st.query_map(params![before, n as i64], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
    .expect("query")
    .map(|r| r.expect("row"))
    .collect()
}

fn sqlite_forward(c: &Connection, after: i64, n: usize) -> Vec<(i64, String, String)> {
    let mut st = c
        .prepare_cached("SELECT id, role, body FROM rows WHERE id > ?1 ORDER BY id LIMIT ?2")
        .expect("prepare");
    st.query_map(params![after, n as i64], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
    .expect("query")
    .map(|r| r.expect("row"))
    .collect()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root_dir: PathBuf,
    jsonl: PathBuf,
    sqlite: Connection,
    rows: Vec<CorpusRow>,
    events: Vec<Event>,
    label: String,
}

fn fixture(corpus: &Path) -> Fixture {
    let rows = load_corpus(corpus);
    let events = to_events(&rows);
    let tmp = tempfile::Builder::new()
        .prefix("logbook-bench-engine")
        .tempdir_in("/tmp")
        .expect("tmp");
    let root_dir = tmp.path().join("root");
    build_root(&root_dir, &events);
    let jsonl = tmp.path().join("s.jsonl");
    build_jsonl(&jsonl, &rows);
    let sqlite = build_sqlite(&tmp.path().join("rows.sqlite"), &rows);
    let label = size_label(&rows);
    Fixture {
        _tmp: tmp,
        root_dir,
        jsonl,
        sqlite,
        rows,
        events,
        label,
    }
}

fn history_params(
    after: Option<String>,
    limit: u32,
    direction: Direction,
    through: Option<u64>,
) -> HistoryParams {
    HistoryParams {
        session_id: "s".into(),
        through,
        after,
        limit: Some(limit),
        anchor: None,
        direction: Some(direction),
    }
}

fn benches(c: &mut Criterion) {
    let mut first = None;
    for corpus in logbook_benches::corpus_files("rows100.jsonl") {
        let fx = fixture(&corpus);
        bench_corpus(c, &fx);
        first.get_or_insert(fx.rows);
    }
    bench_small(c, &first.expect("a corpus"));
}

/// Events of this many bytes of text for `engine/append_small`.
const SMALL_EVENT_BYTES: usize = 200;
/// Events appended per iteration of `engine/append_small`.
const SMALL_EVENTS: usize = 200_000;

/// Texts of about `SMALL_EVENT_BYTES` cut from the corpus rows at char boundaries.
fn small_texts(rows: &[CorpusRow]) -> Vec<String> {
    let mut out = Vec::with_capacity(SMALL_EVENTS);
    'rows: for r in rows.iter().cycle() {
        let mut rest = r.text.as_str();
        while rest.len() >= SMALL_EVENT_BYTES {
            let mut cut = SMALL_EVENT_BYTES;
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            out.push(rest[..cut].to_string());
            rest = &rest[cut..];
            if out.len() == SMALL_EVENTS {
                break 'rows;
            }
        }
    }
    out
}

/// Buffered append of many small events (the DESIGN's 200-byte events/s figure):
/// assistant completions of 200 bytes of real text, 256 per append, no fsync.
fn bench_small(c: &mut Criterion, rows: &[CorpusRow]) {
    let texts = small_texts(rows);
    let events: Vec<Event> = texts
        .iter()
        .map(|t| {
            Event::ModelCompletion(ModelCompletion {
                invocation: "inv-0".into(),
                model: "m".into(),
                items: vec![Item::Assistant {
                    body: t.clone(),
                    thinking: None,
                }],
                usage: None,
            })
        })
        .collect();
    let mut g = c.benchmark_group(format!("engine/append_small/{SMALL_EVENT_BYTES}B"));
    g.throughput(Throughput::Elements(events.len() as u64));
    g.sample_size(10);
    g.bench_function(BenchmarkId::new("logbook", "nosync"), |b| {
        b.iter_with_setup(
            || {
                let tmp = tempfile::tempdir_in("/tmp").expect("tmp");
                let root = new_root(&tmp.path().join("r"), bulk_options());
                root.append(AppendParams {
                    session_id: "s".into(),
                    operation: "start".into(),
                    events: vec![Event::UserMessage(UserMessage {
                        invocation: "inv-0".into(),
                        text: "start".into(),
                        attachments: vec![],
                    })],
                })
                .expect("start");
                (tmp, root, batches_of(&events))
            },
            |(tmp, root, batches)| {
                append_batches(&root, batches);
                (tmp, root)
            },
        )
    });
    g.bench_function(BenchmarkId::new("jsonl", "nosync"), |b| {
        b.iter_with_setup(
            || tempfile::tempdir_in("/tmp").expect("tmp"),
            |tmp| {
                let file = std::fs::File::create(tmp.path().join("s.jsonl")).expect("jsonl");
                let mut w = BufWriter::new(file);
                for (i, t) in texts.iter().enumerate() {
                    let v = serde_json::json!({"id": i, "session": "s", "role": "assistant", "text": t});
                    serde_json::to_writer(&mut w, &v).expect("write");
                    w.write_all(b"\n").expect("nl");
                }
                w.flush().expect("flush");
                tmp
            },
        )
    });
    g.finish();

    // Forward paging, 1024 rows per page, warm, over a Session of these small rows.
    let tmp = tempfile::tempdir_in("/tmp").expect("tmp");
    let dir = tmp.path().join("r");
    let mut all = vec![Event::UserMessage(UserMessage {
        invocation: "inv-0".into(),
        text: "start".into(),
        attachments: vec![],
    })];
    all.extend(events);
    build_root(&dir, &all);
    let root = Root::open(&dir).expect("open");
    let through = root.revision("s").expect("rev");
    let n_rows = all.len();
    let mut g = c.benchmark_group(format!("engine/history_forward_small/{SMALL_EVENT_BYTES}B"));
    g.throughput(Throughput::Elements(n_rows as u64));
    g.sample_size(10);
    g.bench_function("logbook", |b| {
        b.iter(|| {
            let n = page_forward_all(&root, through);
            assert_eq!(n, n_rows);
            n
        })
    });
    g.bench_function("logbook_borrowed", |b| {
        b.iter(|| {
            let (n, bytes) = page_forward_each(&root, through);
            assert_eq!(n, n_rows);
            bytes
        })
    });
    g.finish();
    drop(root);

    // The same pages as the server answers them: JSON written from the borrowed rows
    // (`dispatch::call`, what `logbook serve` runs), against serialising the owned page.
    let host = logbook_api::Host::open(&dir).expect("host");
    let mut g = c.benchmark_group(format!("api/history_json_small/{SMALL_EVENT_BYTES}B"));
    g.throughput(Throughput::Elements(n_rows as u64));
    g.sample_size(10);
    g.bench_function("dispatch_borrowed", |b| {
        b.iter(|| page_json_all(through, |p| dispatch_history(&host, p)))
    });
    g.bench_function("owned_page_to_json", |b| {
        b.iter(|| {
            page_json_all(through, |p| {
                let params = serde_json::from_str(p).expect("params");
                let page = host.root().history(params).expect("page");
                serde_json::to_string(&page).expect("json")
            })
        })
    });
    g.finish();
}

fn dispatch_history(host: &logbook_api::Host, params: &str) -> String {
    let raw = serde_json::value::RawValue::from_string(params.to_owned()).expect("raw");
    let answer = logbook_api::dispatch::call(host, "history", Some(&raw), &mut |_| {});
    answer.expect("history").get().to_owned()
}

/// Pages forward through Session "s" under `through` with `page` (params JSON to answer
/// JSON); returns the bytes of JSON answered.
fn page_json_all(through: u64, mut page: impl FnMut(&str) -> String) -> usize {
    let (mut after, mut bytes): (Option<String>, usize) = (None, 0);
    loop {
        let params = serde_json::json!({
            "sessionId": "s", "through": through, "after": after, "limit": 1024,
        })
        .to_string();
        let answer = page(&params);
        bytes += answer.len();
        // The cursor is the answer's last field; only it is parsed out.
        let at = answer.rfind("\"nextAfter\":").expect("nextAfter");
        let rest = &answer[at + "\"nextAfter\":".len()..answer.len() - 1];
        after = serde_json::from_str(rest).expect("cursor");
        if after.is_none() {
            return bytes;
        }
    }
}

fn bench_corpus(c: &mut Criterion, fx: &Fixture) {
    let n_rows = fx.rows.len() as u64;

    // Last page of 128 rows, newest first, from the end.
    {
        let root = Root::open(&fx.root_dir).expect("open");
        let mut g = c.benchmark_group(format!("engine/history_last_page/{}", fx.label));
        g.throughput(Throughput::Elements(128));
        g.bench_function("logbook", |b| {
            b.iter(|| {
                let p = root
                    .history(history_params(None, 128, Direction::Backward, None))
                    .expect("page");
                assert_eq!(p.rows.len(), 128);
                black_box(p)
            })
        });
        g.bench_function("sqlite", |b| {
            b.iter(|| black_box(sqlite_page(&fx.sqlite, i64::MAX, 128)))
        });
        g.sample_size(10);
        g.bench_function("jsonl_parse", |b| {
            b.iter(|| black_box(jsonl_last_page(&fx.jsonl, 128)))
        });
        g.finish();
    }

    // Forward paging through every row, 1024 per page, warm.
    {
        let root = Root::open(&fx.root_dir).expect("open");
        let through = root.revision("s").expect("rev");
        let mut g = c.benchmark_group(format!("engine/history_forward/{}", fx.label));
        g.throughput(Throughput::Elements(n_rows));
        g.sample_size(10);
        g.bench_function("logbook", |b| {
            b.iter(|| {
                let n = page_forward_all(&root, through);
                assert_eq!(n as u64, n_rows);
                n
            })
        });
        g.bench_function("sqlite", |b| {
            b.iter(|| {
                let (mut last, mut n) = (0i64, 0usize);
                loop {
                    let page = sqlite_forward(&fx.sqlite, last, 1024);
                    let Some(l) = page.last() else { break };
                    last = l.0;
                    n += page.len();
                }
                n
            })
        });
        g.bench_function("jsonl_parse", |b| {
            b.iter(|| black_box(jsonl_last_page(&fx.jsonl, usize::MAX).len()))
        });
        g.finish();
    }

    // Open a Root and read the last page (the Session opens lazily on first use).
    {
        let mut g = c.benchmark_group(format!("engine/open/{}", fx.label));
        g.throughput(Throughput::Elements(1));
        g.bench_function("logbook_open_and_last_page", |b| {
            b.iter(|| {
                let root = Root::open(&fx.root_dir).expect("open");
                let p = root
                    .history(history_params(None, 128, Direction::Backward, None))
                    .expect("page");
                black_box(p.rows.len())
            })
        });
        g.bench_function("sqlite_open_and_last_page", |b| {
            b.iter(|| {
                let c = Connection::open(fx._tmp.path().join("rows.sqlite")).expect("open");
                black_box(sqlite_page(&c, i64::MAX, 128).len())
            })
        });
        // The open-Session cache closed the Session (untimed), the next call opens it again.
        let root = Root::open(&fx.root_dir).expect("open");
        g.bench_function("logbook_reopen_evicted_and_last_page", |b| {
            b.iter_batched(
                || assert!(root.close_idle_sessions() <= 1),
                |()| {
                    let p = root
                        .history(history_params(None, 128, Direction::Backward, None))
                        .expect("page");
                    black_box(p.rows.len())
                },
                criterion::BatchSize::PerIteration,
            )
        });
        drop(root);
        // Process start to the first answer: the command line against `sqlite3`'s.
        match logbook_binary() {
            Some(bin) => {
                let root_dir = fx.root_dir.to_string_lossy().into_owned();
                g.bench_function("logbook_cli_history", |b| {
                    b.iter(|| {
                        run_quiet(std::process::Command::new(&bin).args([
                            "history",
                            "s",
                            "--backward",
                            "--limit",
                            "128",
                            "--root",
                            &root_dir,
                        ]))
                    })
                });
            }
            None => eprintln!(
                "engine/open: no logbook binary next to this bench (build it with \
                 `cargo build --release -p logbook-api`, or name it in LOGBOOK_BIN): \
                 logbook_cli_history not measured"
            ),
        }
        if std::process::Command::new("sqlite3")
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            let db = fx
                ._tmp
                .path()
                .join("rows.sqlite")
                .to_string_lossy()
                .into_owned();
            g.bench_function("sqlite3_cli_last_page", |b| {
                b.iter(|| {
                    run_quiet(std::process::Command::new("sqlite3").args([
                        &db,
                        "SELECT id, role, body FROM rows ORDER BY id DESC LIMIT 128",
                    ]))
                })
            });
        } else {
            eprintln!("engine/open: no sqlite3 command: sqlite3_cli_last_page not measured");
        }
        g.finish();
    }

    // Bulk append (no fsync), MB/s of row text.
    {
        let bytes: u64 = fx.rows.iter().map(|r| r.text.len() as u64).sum();
        let mut g = c.benchmark_group(format!("engine/append_bulk/{}", fx.label));
        g.throughput(Throughput::Bytes(bytes));
        g.sample_size(10);
        for (name, options) in [
            ("nosync", bulk_options()),
            ("nosync_indexed", bulk_indexed_options()),
        ] {
            g.bench_function(BenchmarkId::new("logbook", name), |b| {
                b.iter_with_setup(
                    || {
                        let tmp = tempfile::tempdir_in("/tmp").expect("tmp");
                        let root = new_root(&tmp.path().join("r"), options.clone());
                        (tmp, root, batches_of(&fx.events))
                    },
                    |(tmp, root, batches)| {
                        append_batches(&root, batches);
                        if name == "nosync_indexed" {
                            // Indexing runs on the index's worker thread: count the time
                            // until a search can use every row (a search waits for it).
                            root.search(SearchParams {
                                session_id: "s".into(),
                                query: "qzxvjpeer".into(),
                                through: None,
                                after: None,
                                limit: Some(1),
                                case_sensitive: None,
                                whole_word: None,
                            })
                            .expect("search");
                        }
                        (tmp, root)
                    },
                )
            });
        }
        g.bench_function(BenchmarkId::new("jsonl", "nosync"), |b| {
            b.iter_with_setup(
                || tempfile::tempdir_in("/tmp").expect("tmp"),
                |tmp| {
                    let mut w = BufWriter::new(std::fs::File::create(tmp.path().join("s.jsonl")).expect("jsonl"));
                    for (i, r) in fx.rows.iter().enumerate() {
                        let v = serde_json::json!({"id": i, "session": "s", "role": r.role, "text": r.text});
                        serde_json::to_writer(&mut w, &v).expect("write");
                        w.write_all(b"\n").expect("nl");
                    }
                    w.flush().expect("flush");
                    tmp
                },
            )
        });
        g.bench_function(BenchmarkId::new("sqlite", "sync_off"), |b| {
            b.iter_with_setup(
                || tempfile::tempdir_in("/tmp").expect("tmp"),
                |tmp| {
                    let c = build_sqlite(&tmp.path().join("a.sqlite"), &fx.rows);
                    (tmp, c)
                },
            )
        });
        g.finish();
    }
}

criterion_group! {
    name = engine;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(engine);
