//! `engine/fork/<size>`: forking a large Session against copying its files.
//!
//! The source Session is built once with `NoSyncBulkImport` (then synced), from Turns of a
//! user message, an assistant completion and a tool result of pseudo-random words (text that
//! compresses like prose) and a settle, then every file of the Root is fsynced (the source is
//! durable, as a Host's is). Each `fork` iteration forks the whole history, durably
//! (a layered fork is committed by one fdatasynced Root log record; its directory is made on its
//! first open, so there may be nothing to remove outside the timed part); `fork_then_open`
//! also opens the fork and reads its last history page (the first open makes the fork's
//! directory, fsynced, and derives its state at the fence from the source's);
//! `append_fdatasync` is the floor of any durable fork on the same disk (a 160-byte append and
//! one fdatasync); `copy_files` copies the Session directory with `std::fs::copy`, file by file, without any
//! fsync; `copy_files_synced` also fsyncs every copied file and directory (the durable peer). `LOGBOOK_FORK_BENCH_MIB` sets the logical size (default 1024).
#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use logbook_engine::*;
use std::path::Path;
use std::time::{Duration, Instant};

const TURN_BODY_BYTES: usize = 12 << 10;

struct Words(u64);
impl Words {
    fn text(&mut self, bytes: usize) -> String {
        const W: [&str; 24] = [
            "the", "session", "log", "segment", "index", "fork", "turn", "model", "tool", "result",
            "reads", "writes", "history", "sealed", "offset", "bytes", "file", "cursor", "fence",
            "search", "text", "quick", "brown", "storage",
        ];
        let mut s = String::with_capacity(bytes + 16);
        while s.len() < bytes {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s.push_str(W[(self.0 % 24) as usize]);
            s.push(if self.0.is_multiple_of(11) { '\n' } else { ' ' });
        }
        s
    }
}

fn build(dir: &Path, mib: u64) -> (Root, u64) {
    Root::init(dir).unwrap();
    let root = Root::open_with(
        dir,
        RootOptions {
            durability: Durability::NoSyncBulkImport,
            ..RootOptions::default()
        },
    )
    .unwrap();
    root.create_session(CreateSessionParams {
        session_id: Some("big".into()),
        workspace: Some("/work/space".into()),
        operation: "create".into(),
    })
    .unwrap();
    let mut words = Words(0x1234_5678_9abc_def1);
    let target = mib << 20;
    let mut written = 0u64;
    let mut n = 0u64;
    while written < target {
        n += 1;
        let inv = format!("inv-{n}");
        let answer = words.text(TURN_BODY_BYTES / 3);
        let result = words.text(TURN_BODY_BYTES * 2 / 3);
        let digest = logbook_engine::validate::sha256_digest(result.as_bytes());
        let events = serde_json::json!([
            {"kind":"userMessage","invocation":inv,"text":words.text(200),"attachments":[]},
            {"kind":"modelCompletion","invocation":inv,"model":"m","items":[
                {"kind":"assistant","body":answer,"thinking":""},
                {"kind":"toolCall","id":format!("c{n}"),"name":"read","arguments":"{}"}],"usage":null},
            {"kind":"toolResult","invocation":inv,"toolCallId":format!("c{n}"),"status":"ok","body":result,
             "raw":null,"parts":[],"bytes":result.len(),"digest":digest},
            {"kind":"turnSettled","invocation":inv,"outcome":"completed"}
        ]);
        written += (answer.len() + result.len() + 200) as u64;
        root.append(AppendParams {
            session_id: "big".into(),
            operation: format!("a{n}"),
            events: serde_json::from_value(events).unwrap(),
        })
        .unwrap();
    }
    root.sync_indexes().unwrap();
    let rev = root.revision("big").unwrap();
    drop(root);
    // Reopen durable: the fork measured is the one a Host runs (every file fsynced).
    let root = Root::open(dir).unwrap();
    (root, rev)
}

/// fsyncs every file and directory under `dir`: the bulk-imported source becomes durable, as
/// a Host's Session is, so no timed fdatasync waits for the import's writeback.
fn sync_tree(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            sync_tree(&e.path());
        } else {
            std::fs::File::open(e.path()).unwrap().sync_all().unwrap();
        }
    }
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        n += if m.is_dir() {
            dir_bytes(&e.path())
        } else {
            m.len()
        };
    }
    n
}

fn copy_dir(from: &Path, to: &Path, sync: bool) {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst, sync);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
            if sync {
                std::fs::File::open(&dst).unwrap().sync_all().unwrap();
            }
        }
    }
    if sync {
        std::fs::File::open(to).unwrap().sync_all().unwrap();
    }
}

/// Keeps the disk small: a fork's directory (if it was made) goes; the bench never reopens
/// the Root, so the Session registered for it is never opened again.
fn remove_fork(root_dir: &Path, id: &str) {
    match std::fs::remove_dir_all(root_dir.join("sessions").join(id)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("remove fork {id}: {e}"),
    }
}

fn bench_fork(c: &mut Criterion) {
    let mib: u64 = std::env::var("LOGBOOK_FORK_BENCH_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let tmp =
        tempfile::tempdir_in(std::env::var("LOGBOOK_BENCH_DIR").unwrap_or_else(|_| ".".into()))
            .unwrap();
    let dir = tmp.path().join("root");
    let t = Instant::now();
    let (root, rev) = build(&dir, mib);
    sync_tree(&dir);
    let src = dir.join("sessions/big");
    let on_disk = dir_bytes(&src);
    eprintln!(
        "built {mib} MiB logical, revision {rev}, {on_disk} bytes on disk in {:?}",
        t.elapsed()
    );
    let mut g = c.benchmark_group(format!("engine/fork/{mib}MiB"));
    g.throughput(Throughput::Bytes(mib << 20));
    g.sample_size(10);
    let mut op = 0u64;
    g.bench_function("fork", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                op += 1;
                let t = Instant::now();
                let f = root
                    .fork(ForkParams {
                        session_id: "big".into(),
                        operation: format!("f{op}"),
                        from: ForkFrom::All,
                        revision: rev,
                    })
                    .unwrap();
                total += t.elapsed();
                remove_fork(&dir, &f.session_id);
            }
            total
        })
    });
    g.bench_function("fork_then_open", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                op += 1;
                let t = Instant::now();
                let f = root
                    .fork(ForkParams {
                        session_id: "big".into(),
                        operation: format!("f{op}"),
                        from: ForkFrom::All,
                        revision: rev,
                    })
                    .unwrap();
                let page = root
                    .history(HistoryParams {
                        session_id: f.session_id.clone(),
                        through: None,
                        after: None,
                        limit: Some(16),
                        anchor: None,
                        direction: Some(Direction::Backward),
                    })
                    .unwrap();
                total += t.elapsed();
                assert_eq!(page.through, rev);
                remove_fork(&dir, &f.session_id);
            }
            total
        })
    });
    // The floor of any durable fork: one small append to a file, fdatasynced (what the Root
    // log record that commits a fork costs), on the same file system in the same run.
    let floor = tmp.path().join("fdatasync-floor");
    let mut file = std::fs::File::create(&floor).unwrap();
    g.bench_function("append_fdatasync", |b| {
        use std::io::Write as _;
        b.iter(|| {
            file.write_all(&[7u8; 160]).unwrap();
            file.sync_data().unwrap();
        })
    });
    drop(file);
    let copies = tmp.path().join("copies");
    std::fs::create_dir(&copies).unwrap();
    let mut n = 0u64;
    for (name, sync) in [("copy_files", false), ("copy_files_synced", true)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let to = copies.join(format!("c{n}"));
                    let t = Instant::now();
                    copy_dir(&src, &to, sync);
                    total += t.elapsed();
                    std::fs::remove_dir_all(&to).unwrap();
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_fork);
criterion_main!(benches);
