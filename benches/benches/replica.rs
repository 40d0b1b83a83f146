//! Replication to a real S3 server on loopback (s3s-fs, started here): a bench binary, not
//! criterion (each figure is one long run). Parts, chosen by LOGBOOK_BENCH_REPLICA (default
//! `upload,lag,day`):
//!
//! - `upload`: a Root of LOGBOOK_BENCH_ROOT_MIB (1024) MiB of log data, closed (so sealed),
//!   uploaded by one round, then restored; MB/s of each.
//! - `lag`: the Host appending LOGBOOK_BENCH_LAG_MBS (50) MB/s across
//!   LOGBOOK_BENCH_LAG_SESSIONS (100) Sessions for LOGBOOK_BENCH_LAG_SECS (20) s while the
//!   replicator runs: time from each acknowledgement to the manifest that covers it. One
//!   writer per Session (LOGBOOK_BENCH_LAG_WRITERS), each waiting for its acknowledgement
//!   (`Durability::Sync`), messages uniform in 1/4..7/4 of LOGBOOK_BENCH_LAG_MSG_KIB (32)
//!   KiB. The replicator runs in a process of its own, as `logbook replicate` does
//!   (LOGBOOK_BENCH_LAG_SAME_PROCESS=1: on a thread of the Host's process instead).
//! - `day`: a simulated day of agent traffic (LOGBOOK_BENCH_DAY_ROUNDS rounds of one second,
//!   86,400 by default), a round after each second's appends: bytes uploaded per byte
//!   appended, by kind of object.
//!
//! Run: `cargo bench -p logbook-benches --bench replica` (s3s-fs must be installed).

#![allow(clippy::unwrap_used)]

#[path = "../../replica/tests/common/mod.rs"]
mod s3;

use logbook_engine::{CreateSessionParams, Root, RootOptions, SendParams};
use logbook_replica::{restore, Replicator};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Text of about `len` bytes: words from a vocabulary of 2,048, so it compresses about as
/// agent transcripts do (zstd 2-4x), not to nothing.
fn text(rng: &mut Rng, vocab: &[String], len: usize) -> String {
    let mut s = String::with_capacity(len + 16);
    while s.len() < len {
        s.push_str(&vocab[(rng.next() % vocab.len() as u64) as usize]);
        s.push(if rng.next().is_multiple_of(12) {
            '\n'
        } else {
            ' '
        });
    }
    s
}

fn vocabulary(rng: &mut Rng) -> Vec<String> {
    (0..2048)
        .map(|_| {
            let n = 2 + rng.next() % 9;
            (0..n)
                .map(|_| (b'a' + (rng.next() % 26) as u8) as char)
                .collect()
        })
        .collect()
}

fn create(root: &Root, id: &str) {
    root.create_session(CreateSessionParams {
        session_id: Some(id.into()),
        workspace: None,
        operation: format!("create-{id}"),
    })
    .unwrap();
}

fn send(root: &Root, id: &str, op: u64, text: String) {
    root.send(SendParams {
        session_id: id.into(),
        operation: format!("op-{op}"),
        text,
        attachments: vec![],
    })
    .unwrap();
}

fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                du(&e.path())
            } else {
                m.len()
            }
        })
        .sum()
}

fn mbs(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn upload(s3: &s3::S3) {
    let mib = env_u64("LOGBOOK_BENCH_ROOT_MIB", 1024);
    let sessions = 64;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("root");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let vocab = vocabulary(&mut rng);
    let started = Instant::now();
    {
        let root = Root::open_or_init(&src).unwrap();
        for s in 0..sessions {
            create(&root, &format!("s{s}"));
        }
        let per = 256 << 10;
        let sends = (mib << 20) / per;
        for i in 0..sends {
            let t = text(&mut rng, &vocab, per as usize);
            send(&root, &format!("s{}", i % sessions), i, t);
        }
    }
    let on_disk = du(&src);
    eprintln!(
        "upload: built a Root of {mib} MiB of messages in {:.1} s ({} MB on disk)",
        started.elapsed().as_secs_f64(),
        on_disk / 1_000_000
    );
    let t = Instant::now();
    let mut r = Replicator::open(&src, s3.store("upload")).unwrap();
    let rep = r.round().unwrap();
    let up = t.elapsed();
    let (state, _) =
        logbook_replica::read_manifest(&s3.store("upload"), rep.manifest.as_deref().unwrap())
            .unwrap();
    let logical: u64 = (state.logs.values().flat_map(|l| l.values()))
        .map(|s| s.end())
        .sum();
    println!(
        "replica/upload/{mib}MiB: {:.2} s; Root on disk {} MB -> {:.0} MB/s; log data {} MB -> \
         {:.0} MB/s; uploaded {} objects, {} MB",
        up.as_secs_f64(),
        on_disk / 1_000_000,
        mbs(on_disk, up),
        logical / 1_000_000,
        mbs(logical, up),
        rep.puts,
        rep.put_bytes / 1_000_000
    );
    let dest = dir.path().join("restored");
    let t = Instant::now();
    let report = restore(&s3.store("upload"), &dest, None).unwrap();
    let all = t.elapsed();
    println!(
        "replica/restore/{mib}MiB: {:.2} s in all; download, check and write {:.2} s -> {:.0} \
         MB/s of objects ({} MB), {:.0} MB/s of Root on disk; open and verify {:.2} s ({} \
         Sessions, {} records)",
        all.as_secs_f64(),
        report.download.as_secs_f64(),
        mbs(report.bytes, report.download),
        report.bytes / 1_000_000,
        mbs(on_disk, report.download),
        report.verify.as_secs_f64(),
        report.sessions,
        report.records
    );
}

fn lag(s3: &s3::S3) {
    let rate = env_u64("LOGBOOK_BENCH_LAG_MBS", 50) * 1_000_000;
    let sessions = env_u64("LOGBOOK_BENCH_LAG_SESSIONS", 100);
    let secs = env_u64("LOGBOOK_BENCH_LAG_SECS", 20);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("root");
    let root = Arc::new(Root::open_or_init_with(&src, RootOptions::default()).unwrap());
    for s in 0..sessions {
        create(&root, &format!("s{s}"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reports = Arc::new(Mutex::new(Vec::new()));
    let replicator = if env_u64("LOGBOOK_BENCH_LAG_SAME_PROCESS", 0) == 1 {
        let (stop, reports) = (Arc::clone(&stop), Arc::clone(&reports));
        let mut r = Replicator::open(&src, s3.store("lag")).unwrap();
        std::thread::spawn(move || {
            r.run(&stop, |o| {
                if let Ok(rep) = o {
                    if rep.manifest.is_some() {
                        // Now, not `manifest_ms` (the manifest's name's time, taken before
                        // its PUT): the manifest is in the bucket once the round returned.
                        reports.lock().unwrap().push((rep.started_ms, now_ms()));
                    }
                }
            })
            .unwrap();
        })
    } else {
        replicator_process(s3, &src, Arc::clone(&stop), Arc::clone(&reports))
    };
    // A Host's clients: one writer per Session by default (an agent waits for each
    // acknowledgement before its next append, as over the wire), so the appends of a moment
    // share fdatasyncs only through the log's group commit, never by batching in the bench.
    let writers = env_u64("LOGBOOK_BENCH_LAG_WRITERS", sessions).clamp(1, sessions);
    // Message sizes uniform in [1/4, 7/4] of the mean: tool results and file reads of a few
    // KiB to tens of KiB, as in agent transcripts at this rate.
    let mean = env_u64("LOGBOOK_BENCH_LAG_MSG_KIB", 32) << 10;
    let corpus = {
        let mut rng = Rng(0x51_7cc1_b727_220a);
        let vocab = vocabulary(&mut rng);
        // Texts are cut from 32 MiB generated before the clock starts (at random offsets, so
        // a chunk finds no more repeats than in generated text), so the writers spend their
        // time in the Host, not in the generator.
        Arc::new(text(&mut rng, &vocab, 32 << 20))
    };
    let started = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let root = Arc::clone(&root);
            let corpus = Arc::clone(&corpus);
            std::thread::spawn(move || {
                let mut rng = Rng(w * 7919 + 1);
                let mut acks = Vec::new();
                let mut sent = 0u64;
                let begin = Instant::now();
                let mut i = 0u64;
                let share = (rate / writers) as f64;
                while begin.elapsed() < Duration::from_secs(secs) {
                    // Paced to this writer's share of the rate.
                    let due = Duration::from_secs_f64(sent as f64 / share);
                    if let Some(wait) = due.checked_sub(begin.elapsed()) {
                        std::thread::sleep(wait);
                    }
                    // Writer w owns Sessions w, w + writers, ...; it takes them in turn.
                    let mine = (sessions - w).div_ceil(writers);
                    let s = w + writers * (i % mine);
                    let len = (mean / 4 + rng.next() % (mean * 3 / 2)) as usize;
                    let at = (rng.next() % (corpus.len() - len) as u64) as usize;
                    let t = corpus[at..at + len].to_owned();
                    sent += t.len() as u64;
                    send(&root, &format!("s{s}"), w << 40 | i, t);
                    acks.push(now_ms());
                    i += 1;
                }
                (acks, sent)
            })
        })
        .collect();
    let mut acks = Vec::new();
    let mut sent = 0;
    for h in handles {
        let (a, s) = h.join().unwrap();
        acks.extend(a);
        sent += s;
    }
    let took = started.elapsed();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Release);
    replicator.join().unwrap();
    let reports = reports.lock().unwrap().clone();
    let mut lags: Vec<u64> = acks
        .iter()
        .map(|a| {
            reports
                .iter()
                .find(|(s, _)| s >= a)
                .map_or(u64::MAX, |(_, m)| m - a)
        })
        .collect();
    lags.sort_unstable();
    println!(
        "replica/lag/{sessions}x{}MBs: appended {:.1} MB/s ({} sends of {} KiB on average by \
         {writers} writers in {:.1} s); lag p50 {} ms, p99 {} ms, max {} ms over {} manifests",
        rate / 1_000_000,
        mbs(sent, took),
        acks.len(),
        (sent / acks.len().max(1) as u64) >> 10,
        took.as_secs_f64(),
        lags[lags.len() / 2],
        lags[lags.len() * 99 / 100],
        lags[lags.len() - 1],
        reports.len()
    );
}

/// The replicator in a process of its own, as `logbook replicate` runs beside `logbook
/// serve`, in a session of its own (`setsid`), so the kernel's autogroup scheduling gives it
/// its share of the CPU as a process rather than one thread's share among the Host's (whose
/// 100 Sessions each have a search-indexing thread busy at this rate). It reports each
/// manifest's round start and write time on its stdout; closing its stdin stops it.
fn replicator_process(
    s3: &s3::S3,
    src: &Path,
    stop: Arc<AtomicBool>,
    reports: Arc<Mutex<Vec<(u64, u64)>>>,
) -> std::thread::JoinHandle<()> {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("setsid")
        .arg(std::env::current_exe().unwrap())
        .env("LOGBOOK_BENCH_REPLICATOR_ROOT", src)
        .env("LOGBOOK_BENCH_REPLICATOR_PORT", s3.port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n", "the replicator process did not start");
    std::thread::spawn(move || {
        let stopper = std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(stdin);
        });
        for line in stdout.lines() {
            let line = line.unwrap();
            let mut f = line.split(' ').map(|v| v.parse::<u64>().unwrap());
            let (started, written) = (f.next().unwrap(), f.next().unwrap());
            reports.lock().unwrap().push((started, written));
        }
        assert!(
            child.wait().unwrap().success(),
            "the replicator process failed"
        );
        stopper.join().unwrap();
    })
}

/// The child side of [`replicator_process`].
fn replicator_child(root: &Path, port: &str) {
    use std::io::Write as _;
    let target = logbook_replica::Target::with_credentials(
        &format!("s3://{}/lag", s3::BUCKET),
        Some(&format!("http://127.0.0.1:{port}")),
        "us-east-1",
        s3::ACCESS_KEY,
        s3::SECRET_KEY,
    )
    .unwrap();
    let store = logbook_replica::Store::connect(&target).unwrap();
    let mut r = Replicator::open(root, store).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = Arc::clone(&stop);
    std::thread::spawn(move || {
        // Stdin closes when the bench is done with this process.
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        stopper.store(true, Ordering::Release);
    });
    let mut out = std::io::stdout();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    r.run(&stop, |o| {
        if let Ok(rep) = o {
            if rep.manifest.is_some() {
                // The time the round returned: its manifest's PUT has returned too.
                writeln!(out, "{} {}", rep.started_ms, now_ms()).unwrap();
                out.flush().unwrap();
            }
        }
    })
    .unwrap();
}

fn day(s3: &s3::S3) {
    let rounds = env_u64("LOGBOOK_BENCH_DAY_ROUNDS", 86_400);
    let sessions = 16u64;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("root");
    let root = Root::open_or_init(&src).unwrap();
    for s in 0..sessions {
        create(&root, &format!("s{s}"));
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let vocab = vocabulary(&mut rng);
    let mut r = Replicator::open(&src, s3.store("day")).unwrap();
    let mut op = 0;
    let mut puts = 0;
    let mut manifests = (0, 0);
    let t = Instant::now();
    for _ in 0..rounds {
        // Each Session takes a turn about every 30 s: a user message, a model answer and a
        // tool result or two, sized as in agent transcripts.
        for s in 0..sessions {
            if !rng.next().is_multiple_of(30) {
                continue;
            }
            for size in [
                100 + rng.next() % 1500,
                500 + rng.next() % 6000,
                200 + rng.next() % 20_000,
            ] {
                op += 1;
                let t = text(&mut rng, &vocab, size as usize);
                send(&root, &format!("s{s}"), op, t);
            }
        }
        let rep = r.round().unwrap();
        puts += rep.puts;
        if rep.manifest.is_some() {
            manifests.0 += 1;
            manifests.1 += u64::from(rep.full);
        }
    }
    let took = t.elapsed();
    let store = s3.store("day");
    let mut by_kind = std::collections::BTreeMap::new();
    for l in store.list("data/", None, None).unwrap() {
        let kind = l.name.split('/').nth(2).unwrap_or("?").to_owned();
        *by_kind.entry(kind).or_insert(0u64) += l.bytes;
    }
    let manifest_bytes: u64 = (store.list("manifests/", None, None).unwrap())
        .iter()
        .map(|l| l.bytes)
        .sum();
    let key = logbook_replica::find_manifest(&store, None)
        .unwrap()
        .unwrap();
    let (state, _) = logbook_replica::read_manifest(&store, &key).unwrap();
    let appended: u64 = (state.logs.values().flat_map(|l| l.values()))
        .map(|s| s.end())
        .sum();
    let total: u64 = by_kind.values().sum::<u64>() + manifest_bytes;
    let part = |k: &str| by_kind.get(k).copied().unwrap_or(0) as f64 / appended as f64;
    println!(
        "replica/day/{rounds}rounds: appended {} MB in {} sends; uploaded {} MB in {puts} PUTs: \
         {:.3} bytes per byte appended (chunks {:.3}, sealed {:.3}, manifests {:.3}; {} \
         manifests, {} full) in {:.0} s",
        appended / 1_000_000,
        op,
        total / 1_000_000,
        total as f64 / appended as f64,
        part("c"),
        part("g"),
        manifest_bytes as f64 / appended as f64,
        manifests.0,
        manifests.1,
        took.as_secs_f64()
    );
}

fn main() {
    if let Some(root) = std::env::var_os("LOGBOOK_BENCH_REPLICATOR_ROOT") {
        let port = std::env::var("LOGBOOK_BENCH_REPLICATOR_PORT").unwrap();
        return replicator_child(Path::new(&root), &port);
    }
    let Some(s3) = s3::S3::start() else { return };
    let parts = std::env::var("LOGBOOK_BENCH_REPLICA").unwrap_or_else(|_| "upload,lag,day".into());
    for part in parts.split(',') {
        match part {
            "upload" => upload(&s3),
            "lag" => lag(&s3),
            "day" => day(&s3),
            other => panic!("unknown part {other:?}: upload, lag, day"),
        }
    }
}
