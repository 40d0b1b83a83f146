//! `bundle/<op>/<size>`: Session bundles (`Root::export_session`, `Root::import_bundle`)
//! beside copying the Session's directory with `cp -r`, on one large Session of corpus text.
//!
//! Corpus: `LOGBOOK_CORPUS` (default `target/corpus/rows100.jsonl`, see
//! `logbook_benches::corpus_files`), every row in one Session, as `engine.rs` builds it (256
//! events per append, no fsync); then one search builds the Session's search postings, so its
//! directory is what a Host's holds, and the Root is closed and reopened with the default
//! options (durable). Several paths separated by commas measure each size in turn. Throughput
//! is bytes of row text. Files go to a temporary folder in `LOGBOOK_BENCH_DIR` (default `/tmp`).
//!
//! - `export`: the whole Session to a new file (1 MiB `BufWriter`, as `Host::export_session`
//!   writes; no fsync of the file, as `cp -r` does none).
//! - `import`: that bundle into a new Root (made before the clock starts), under the Session's
//!   own id. The import checks every part, builds the log (sealed), the seq/row/receipt indexes
//!   and the checkpoint, and fsyncs what it made before it publishes; search postings are not
//!   part of it (a Session builds them on its first search).
//! - `cp_r`: `cp -r` of the Session's directory (`sessions/<id>`), no fsync.
//!
//! Once per size, before the timed runs, it prints the bundle's size beside the Session's
//! files (sum of file sizes, with and without its search postings) and the memory an export
//! and an import take in a process of their own: this bench binary run again with
//! `LOGBOOK_BUNDLE_CHILD` set, which opens the Root, reads its resident set (idle), resets its
//! peak (`/proc/self/clear_refs`), runs the one operation and reads `VmHWM` (the peak);
//! a thread samples `RssAnon` and `RssFile` every millisecond meanwhile.
//!
//! `LOGBOOK_BUNDLE_KEEP=1` keeps the Root and the bundle (their folder is printed), to profile
//! one operation by hand: `LOGBOOK_BUNDLE_CHILD=export LOGBOOK_BUNDLE_CHILD_ROOT=<folder>/root
//! LOGBOOK_BUNDLE_CHILD_FILE=<new file> perf record <this bench binary>`.
//!
//! Run: `LOGBOOK_CORPUS=/work/corpus/rows100.jsonl cargo bench -p logbook-benches --bench bundle
//! -- --warm-up-time 1 --measurement-time 5`

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use logbook_engine::*;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in the child process that measures one operation's memory: `export` or `import`.
const CHILD_ENV: &str = "LOGBOOK_BUNDLE_CHILD";
/// The child's Root and bundle file.
const CHILD_ROOT_ENV: &str = "LOGBOOK_BUNDLE_CHILD_ROOT";
const CHILD_FILE_ENV: &str = "LOGBOOK_BUNDLE_CHILD_FILE";

const SESSION: &str = "s";
const BATCH_EVENTS: usize = 256;

struct CorpusRow {
    role: String,
    text: String,
}

fn load_corpus(path: &Path) -> Vec<CorpusRow> {
    let f = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("{}", logbook_benches::corpus_missing(path, &e)));
    std::io::BufReader::new(f)
        .lines()
        .map(|l| {
            let line = l.expect("line");
            let mut v: serde_json::Value = serde_json::from_str(&line).expect("row json");
            CorpusRow {
                role: v["role"].as_str().expect("role").to_owned(),
                text: match v["text"].take() {
                    serde_json::Value::String(s) => s,
                    _ => panic!("row text"),
                },
            }
        })
        .collect()
}

/// One event per corpus row: user -> userMessage, assistant -> modelCompletion, anything
/// else -> toolResult (as `engine.rs`).
fn event(i: usize, r: &CorpusRow, inv: &mut String) -> Event {
    match r.role.as_str() {
        "user" => {
            *inv = format!("inv-{i}");
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
    }
}

/// A Root at `dir` holding Session [`SESSION`] of every corpus row, its search postings
/// built, closed.
fn build_root(dir: &Path, rows: &[CorpusRow]) {
    Root::init(dir).expect("init");
    let root = Root::open_with(
        dir,
        RootOptions {
            durability: Durability::NoSyncBulkImport,
            search_indexing: SearchIndexing::OnSearch,
            ..RootOptions::default()
        },
    )
    .expect("open");
    root.create_session(CreateSessionParams {
        session_id: Some(SESSION.into()),
        workspace: Some("/work/space".into()),
        operation: "c".into(),
    })
    .expect("create");
    let mut inv = String::from("inv-0");
    for (b, chunk) in rows.chunks(BATCH_EVENTS).enumerate() {
        let events = chunk
            .iter()
            .enumerate()
            .map(|(j, r)| event(b * BATCH_EVENTS + j, r, &mut inv))
            .collect();
        root.append(AppendParams {
            session_id: SESSION.into(),
            operation: format!("b{b}"),
            events,
        })
        .expect("append");
    }
    // The first search indexes every row: the Session's postings are on disk after the close.
    root.search(SearchParams {
        session_id: SESSION.into(),
        query: "qzxvjpeer".into(),
        through: None,
        after: None,
        limit: Some(1),
        case_sensitive: None,
        whole_word: None,
    })
    .expect("search");
    root.sync_indexes().expect("sync");
}

/// Sum of the sizes of the files under `dir` (apparent, as `du --apparent-size -b`), and of
/// the blocks they hold (as `du -B1`).
fn dir_bytes(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    let mut n = (0, 0);
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let e = e.expect("entry");
        let m = e.metadata().expect("metadata");
        let (len, blocks) = if m.is_dir() {
            dir_bytes(&e.path())
        } else {
            (m.len(), m.blocks() * 512)
        };
        n.0 += len;
        n.1 += blocks;
    }
    n
}

fn export_to(root: &Root, path: &Path) -> ExportResult {
    let file = std::fs::File::create(path).expect("bundle file");
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let r = root
        .export_session(
            &ExportSessionParams {
                session_id: SESSION.into(),
                through: None,
            },
            &mut out,
        )
        .expect("export");
    out.flush().expect("flush");
    r
}

fn import_from(root: &Root, path: &Path) -> ImportResult {
    let mut file = std::fs::File::open(path).expect("bundle");
    root.import_bundle(
        &ImportBundleParams {
            session_id: None,
            operation: "import".into(),
        },
        &mut file,
        path,
    )
    .expect("import")
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// The fields of `/proc/self/status` named, in KiB.
fn status_kib(names: &[&str]) -> Vec<u64> {
    let s = std::fs::read_to_string("/proc/self/status").expect("status");
    names
        .iter()
        .map(|n| {
            s.lines()
                .find_map(|l| l.strip_prefix(n)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

/// The child process: one export or import, its memory printed as `key=value` pairs.
fn child(op: &str) {
    let var = |k: &str| PathBuf::from(std::env::var_os(k).unwrap_or_else(|| panic!("{k}")));
    let root_dir = var(CHILD_ROOT_ENV);
    let file = var(CHILD_FILE_ENV);
    if op == "import" {
        Root::init(&root_dir).expect("init");
    }
    let root = Root::open(&root_dir).expect("open");
    let idle = status_kib(&["VmRSS", "RssAnon", "RssFile"]);
    // Resets VmHWM to the present resident set (Linux 4.0 and later).
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let hwm_before = status_kib(&["VmHWM"])[0];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut max = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let v = status_kib(&["RssAnon", "RssFile"]);
                max = (max.0.max(v[0]), max.1.max(v[1]));
                std::thread::sleep(Duration::from_millis(1));
            }
            max
        })
    };
    let t = Instant::now();
    match op {
        "export" => {
            export_to(&root, &file);
        }
        "import" => {
            import_from(&root, &file);
        }
        _ => panic!("{CHILD_ENV}={op}"),
    }
    let took = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (anon_max, file_max) = sampler.join().expect("sampler");
    let after = status_kib(&["VmHWM", "RssAnon", "RssFile"]);
    drop(root);
    println!(
        "idle_rss={} idle_anon={} idle_file={} hwm_reset={} hwm_before={} hwm={} anon_max={} \
         file_max={} anon_after={} file_after={} secs={:.3}",
        idle[0],
        idle[1],
        idle[2],
        u8::from(reset),
        hwm_before,
        after[0],
        anon_max.max(after[1]),
        file_max.max(after[2]),
        after[1],
        after[2],
        took.as_secs_f64()
    );
}

/// Runs [`child`] for `op` in a new process of this binary; its `key=value` figures in KiB.
fn measure_child(op: &str, root: &Path, file: &Path) -> std::collections::HashMap<String, f64> {
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new(exe)
        .env(CHILD_ENV, op)
        .env(CHILD_ROOT_ENV, root)
        .env(CHILD_FILE_ENV, file)
        .output()
        .expect("run child");
    assert!(
        out.status.success(),
        "bundle {op} child: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("idle_rss="))
        .expect("child figures");
    line.split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

fn print_memory(label: &str, op: &str, m: &std::collections::HashMap<String, f64>) {
    let kib = |k: &str| m.get(k).copied().unwrap_or(f64::NAN);
    let peak_above = kib("hwm") - kib("idle_rss");
    println!(
        "bundle/{op}/{label}: memory in a process of its own: idle {:.1} MiB resident \
         (anon {:.1}, file {:.1}); peak (VmHWM{}) {:.1} MiB = {:.1} MiB above idle; sampled \
         peaks anon {:.1} MiB (+{:.1}), file-backed {:.1} MiB (+{:.1}); {:.2} s",
        kib("idle_rss") / 1024.0,
        kib("idle_anon") / 1024.0,
        kib("idle_file") / 1024.0,
        if kib("hwm_reset") == 1.0 {
            ", reset at idle"
        } else {
            ", since the process started"
        },
        kib("hwm") / 1024.0,
        peak_above / 1024.0,
        kib("anon_max") / 1024.0,
        (kib("anon_max") - kib("idle_anon")) / 1024.0,
        kib("file_max") / 1024.0,
        (kib("file_max") - kib("idle_file")) / 1024.0,
        kib("secs"),
    );
}

fn bench_size(c: &mut Criterion, corpus: &Path) {
    let rows = load_corpus(corpus);
    let text: u64 = rows.iter().map(|r| r.text.len() as u64).sum();
    let label = format!("{}MB", text / 1_000_000);
    let tmp = tempfile::Builder::new()
        .prefix("logbook-bench-bundle")
        .tempdir_in(std::env::var_os("LOGBOOK_BENCH_DIR").unwrap_or_else(|| "/tmp".into()))
        .expect("tmp");
    let dir = tmp.path().join("root");
    let t = Instant::now();
    build_root(&dir, &rows);
    let n_rows = rows.len();
    drop(rows);
    let session_dir = dir.join("sessions").join(SESSION);
    let (on_disk, blocks) = dir_bytes(&session_dir);
    let search = session_dir.join("search");
    let (postings, _) = if search.exists() {
        dir_bytes(&search)
    } else {
        (0, 0)
    };
    eprintln!(
        "bundle/{label}: built {n_rows} rows ({text} bytes of text) in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // Memory, each operation in a process of its own (the Root must be closed here: the
    // child takes its writer lock).
    let bundle = tmp.path().join("s.bundle");
    let m = measure_child("export", &dir, &bundle);
    print_memory(&label, "export", &m);
    let bundle_bytes = std::fs::metadata(&bundle).expect("bundle").len();
    let m = measure_child("import", &tmp.path().join("child-import"), &bundle);
    print_memory(&label, "import", &m);
    let imported = tmp.path().join("child-import/sessions").join(SESSION);
    let (imported_bytes, _) = dir_bytes(&imported);
    std::fs::remove_dir_all(tmp.path().join("child-import")).expect("remove");

    println!(
        "bundle/size/{label}: bundle {bundle_bytes} bytes ({:.1} MiB, {:.3}x the text) vs the \
         Session's files {on_disk} bytes ({:.1} MiB; {:.1} MiB in blocks), of which search \
         postings {:.1} MiB: the bundle is {:.3}x the Session's files, {:.3}x them without \
         postings; the imported Session's files (no postings yet) {:.1} MiB",
        mib(bundle_bytes),
        bundle_bytes as f64 / text as f64,
        mib(on_disk),
        mib(blocks),
        mib(postings),
        bundle_bytes as f64 / on_disk as f64,
        bundle_bytes as f64 / (on_disk - postings) as f64,
        mib(imported_bytes),
    );

    let root = Root::open(&dir).expect("open");
    let mut g = c.benchmark_group("bundle");
    g.throughput(Throughput::Bytes(text));
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    let mut n = 0u64;
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    g.bench_function(BenchmarkId::new("export", &label), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let path = out.join(format!("e{n}.bundle"));
                let t = Instant::now();
                let r = export_to(&root, &path);
                total += t.elapsed();
                assert_eq!(r.bytes, bundle_bytes);
                std::fs::remove_file(&path).expect("remove");
            }
            total
        })
    });
    g.bench_function(BenchmarkId::new("import", &label), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let to = out.join(format!("i{n}"));
                Root::init(&to).expect("init");
                let root = Root::open(&to).expect("open");
                let t = Instant::now();
                let r = import_from(&root, &bundle);
                total += t.elapsed();
                assert_eq!(r.session_id, SESSION);
                drop(root);
                std::fs::remove_dir_all(&to).expect("remove");
            }
            total
        })
    });
    g.bench_function(BenchmarkId::new("cp_r", &label), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let to = out.join(format!("c{n}"));
                let t = Instant::now();
                let status = Command::new("cp")
                    .arg("-r")
                    .arg(&session_dir)
                    .arg(&to)
                    .status()
                    .expect("cp");
                total += t.elapsed();
                assert!(status.success(), "cp -r");
                std::fs::remove_dir_all(&to).expect("remove");
            }
            total
        })
    });
    g.finish();
    drop(root);
    if std::env::var_os("LOGBOOK_BUNDLE_KEEP").is_some() {
        // For profiling one operation by hand (the child mode, see the module documentation).
        let kept = tmp.keep();
        eprintln!(
            "bundle/{label}: kept {} (Root root/, bundle s.bundle)",
            kept.display()
        );
    }
}

fn benches(c: &mut Criterion) {
    for corpus in logbook_benches::corpus_files("rows100.jsonl") {
        bench_size(c, &corpus);
    }
}

fn main() {
    if let Ok(op) = std::env::var(CHILD_ENV) {
        child(&op);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
