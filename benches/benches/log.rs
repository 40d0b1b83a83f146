//! Benchmarks of logbook-log, each beside its baseline in the same group:
//! - `log/append/*`: buffered appends (200-byte and 64 KiB records) against a buffered JSONL
//!   writer; synced appends with 1, 8 and 64 writers against one fdatasync per append (and
//!   with 1 and 8 writers without the preallocated zero region, to show what it brings).
//! - `log/read/*`: a sequential scan against reading the same records as JSONL lines; random
//!   reads by Location against `pread` of a line from an offsets table.
//! - `log/open/*`: reopening logs of 64 MiB, 256 MiB and 1 GiB (sealed segments); the point
//!   is that the time is flat.
//!
//! - `log/empty/*`: what a log that holds (almost) nothing costs, as a host keeping thousands
//!   of Sessions has thousands of them: creating and dropping an empty log, and one with one
//!   small synced append, against creating one synced 32-byte file (the least a durable log
//!   can do). The bytes each leaves on disk are printed (`bytes on disk`).
//!
//! Run: `cargo bench -p logbook-benches --bench log -- --warm-up-time 1 --measurement-time 3`

#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use logbook_log::{Durability, Location, Log, LogConfig, Record};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const WORDS: &[&str] = &[
    "the",
    "log",
    "segment",
    "record",
    "batch",
    "session",
    "fn",
    "let",
    "mut",
    "error",
    "return",
    "Result",
    "impl",
    "struct",
    "assistant",
    "user",
    "tool",
    "output",
    "file",
    "read",
    "write",
    "sync",
    "index",
    "search",
    "query",
    "page",
    "history",
    "a",
    "of",
    "to",
    "in",
    "is",
    "and",
    "{",
    "}",
    "(",
    ");",
    "=>",
    "//",
    "0",
    "42",
    "self",
    "match",
    "Some",
    "None",
    "Ok",
    "Err",
];

/// Text-like bytes (about 3x compressible with zstd, like agent session rows).
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        out.extend_from_slice(WORDS[(s % WORDS.len() as u64) as usize].as_bytes());
        out.push(if s.is_multiple_of(11) { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

fn nosync(segment_bytes_max: u64) -> LogConfig {
    LogConfig {
        segment_bytes_max,
        durability: Durability::NoSyncBulkImport,
        ..LogConfig::default()
    }
}

fn synced() -> LogConfig {
    LogConfig::default()
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("log/append");
    g.sample_size(10);
    for (name, len) in [("200B", 200usize), ("64KiB", 64 << 10)] {
        let rec = text(len, 1);
        if len == 200 {
            g.throughput(Throughput::Elements(1));
        } else {
            g.throughput(Throughput::Bytes(len as u64));
        }
        g.bench_function(BenchmarkId::new("nosync", name), |b| {
            b.iter_custom(|iters| {
                let tmp = tempfile::tempdir().unwrap();
                let log = Log::create(&tmp.path().join("log"), nosync(64 << 20)).unwrap();
                let t = Instant::now();
                for _ in 0..iters {
                    log.append(&[Record {
                        kind: 1,
                        payload: &rec,
                    }])
                    .unwrap();
                }
                let e = t.elapsed();
                drop(log);
                e
            })
        });
        g.bench_function(BenchmarkId::new("jsonl-bufwriter", name), |b| {
            b.iter_custom(|iters| {
                let tmp = tempfile::tempdir().unwrap();
                let mut w = BufWriter::new(File::create(tmp.path().join("s.jsonl")).unwrap());
                let t = Instant::now();
                for _ in 0..iters {
                    w.write_all(&rec).unwrap();
                    w.write_all(b"\n").unwrap();
                }
                w.flush().unwrap();
                t.elapsed()
            })
        });
    }

    let rec = text(200, 2);
    g.throughput(Throughput::Elements(1));
    g.bench_function("sync/fdatasync-per-append", |b| {
        b.iter_custom(|iters| {
            let tmp = tempfile::tempdir().unwrap();
            let f = File::create(tmp.path().join("plain")).unwrap();
            let mut off = 0u64;
            let t = Instant::now();
            for _ in 0..iters {
                f.write_all_at(&rec, off).unwrap();
                off += rec.len() as u64;
                f.sync_data().unwrap();
            }
            t.elapsed()
        })
    });
    for writers in [1u64, 8, 64] {
        g.bench_function(BenchmarkId::new("sync/writers", writers), |b| {
            b.iter_custom(|iters| synced_writers(synced(), writers, iters, &rec))
        });
    }
    // The same without the preallocated zero region: every commit's write extends the file.
    for writers in [1u64, 8] {
        let c = LogConfig {
            preallocate_bytes: 0,
            ..synced()
        };
        g.bench_function(BenchmarkId::new("sync/no-prealloc/writers", writers), |b| {
            b.iter_custom(|iters| synced_writers(c.clone(), writers, iters, &rec))
        });
    }
    g.finish();
}

/// `iters` synced appends spread over `writers` threads; wall time from a common start.
fn synced_writers(config: LogConfig, writers: u64, iters: u64, rec: &[u8]) -> Duration {
    let tmp = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::create(&tmp.path().join("log"), config).unwrap());
    let barrier = Arc::new(Barrier::new(writers as usize + 1));
    let threads: Vec<_> = (0..writers)
        .map(|i| {
            let n = iters / writers + u64::from(i < iters % writers);
            let (log, barrier, rec) = (log.clone(), barrier.clone(), rec.to_vec());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..n {
                    log.append(&[Record {
                        kind: 1,
                        payload: &rec,
                    }])
                    .unwrap();
                }
            })
        })
        .collect();
    barrier.wait();
    let t = Instant::now();
    for th in threads {
        th.join().unwrap();
    }
    t.elapsed()
}

/// A log of `count` 200-byte records in 8 MiB segments (all but the last sealed), plus the
/// same records as a JSONL-like file of lines with an offsets table.
struct ReadFixture {
    _tmp: tempfile::TempDir,
    log: Log,
    locations: Vec<Location>,
    lines: std::path::PathBuf,
    line_offsets: Vec<(u64, u32)>,
    payload_bytes: u64,
}

fn read_fixture(count: usize) -> ReadFixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = Log::create(&dir, nosync(8 << 20)).unwrap();
    let lines = tmp.path().join("s.jsonl");
    let mut w = BufWriter::new(File::create(&lines).unwrap());
    let mut locations = Vec::with_capacity(count);
    let mut line_offsets = Vec::with_capacity(count);
    let mut off = 0u64;
    // JSONL escapes newlines inside a row; keep the rows newline-free so both sides match
    let corpus: Vec<u8> = text(1 << 20, 3)
        .into_iter()
        .map(|b| if b == b'\n' { b' ' } else { b })
        .collect();
    for i in 0..count {
        let start = (i * 7919) % (corpus.len() - 200);
        let p = &corpus[start..start + 200];
        locations.push(
            log.append(&[Record {
                kind: 1,
                payload: p,
            }])
            .unwrap()[0],
        );
        w.write_all(p).unwrap();
        w.write_all(b"\n").unwrap();
        line_offsets.push((off, 200));
        off += 201;
    }
    w.flush().unwrap();
    log.sync().unwrap();
    assert_eq!(log.wait_for_sealing(), None);
    drop(log);
    let (log, _) = Log::open(&dir, synced()).unwrap();
    ReadFixture {
        _tmp: tmp,
        log,
        locations,
        lines,
        line_offsets,
        payload_bytes: count as u64 * 200,
    }
}

fn read(c: &mut Criterion) {
    let fx = read_fixture(300_000);
    let mut g = c.benchmark_group("log/read");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(fx.payload_bytes));
    g.bench_function("scan/60MB", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for r in fx.log.scan(fx.log.start()) {
                n += r.unwrap().1.payload.len() as u64;
            }
            assert_eq!(n, fx.payload_bytes);
        })
    });
    g.bench_function("jsonl-lines/60MB", |b| {
        b.iter(|| {
            let mut r = BufReader::new(File::open(&fx.lines).unwrap());
            let mut line = Vec::new();
            let mut n = 0u64;
            while r.read_until(b'\n', &mut line).unwrap() > 0 {
                n += line.len() as u64 - 1;
                line.clear();
            }
            assert_eq!(n, fx.payload_bytes);
        })
    });
    g.throughput(Throughput::Elements(1));
    let mut s = 88172645463325252u64;
    let mut pick = move |n: usize| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n as u64) as usize
    };
    let order: Vec<usize> = (0..100_000).map(|_| pick(fx.locations.len())).collect();
    g.bench_function("random/by-location", |b| {
        let mut i = 0;
        b.iter(|| {
            let at = fx.locations[order[i % order.len()]];
            i += 1;
            fx.log.read(at).unwrap()
        })
    });
    let f = File::open(&fx.lines).unwrap();
    g.bench_function("random/pread-line", |b| {
        let mut i = 0;
        b.iter(|| {
            let (off, len) = fx.line_offsets[order[i % order.len()]];
            i += 1;
            let mut buf = vec![0u8; len as usize];
            f.read_exact_at(&mut buf, off).unwrap();
            buf
        })
    });
    g.finish();
}

/// Records of 64 KiB that fill one 64 MiB segment (header 32 bytes, frame header 24).
const RECORDS_PER_SEGMENT: usize = ((64 << 20) - 32) / ((64 << 10) + 24);

/// A log of `segments` full sealed 64 MiB segments of 64 KiB records, plus one record in the
/// active segment (the append that rolled the last one), built in NoSyncBulkImport mode. The
/// unsealed tail is the same for every size, so only the sealed part grows.
fn build_sealed(dir: &Path, segments: usize, corpus: &[u8]) {
    let log = Log::create(dir, nosync(64 << 20)).unwrap();
    let rec = 64 << 10;
    for i in 0..segments * RECORDS_PER_SEGMENT + 1 {
        let start = (i * 4099) % (corpus.len() - rec);
        log.append(&[Record {
            kind: 1,
            payload: &corpus[start..start + rec],
        }])
        .unwrap();
    }
    log.sync().unwrap();
    assert_eq!(log.wait_for_sealing(), None);
    assert_eq!(log.sealed_segment_paths().len(), segments);
}

fn open(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = text(4 << 20, 4);
    let mut g = c.benchmark_group("log/open");
    g.sample_size(20);
    for (name, segments) in [("64MiB", 1usize), ("256MiB", 4), ("1GiB", 16)] {
        let dir = tmp.path().join(name);
        build_sealed(&dir, segments, &corpus);
        g.throughput(Throughput::Bytes(segments as u64 * (64 << 20)));
        g.bench_function(BenchmarkId::new("sealed", name), |b| {
            b.iter(|| {
                let (log, rec) = Log::open(&dir, synced()).unwrap();
                assert_eq!(rec.sealed_segments, segments as u64);
                assert_eq!(rec.tail_records, 1);
                log
            })
        });
    }
    g.finish();
}

/// Bytes allocated on disk (not file lengths) under `dir`, one level deep.
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

/// Bytes allocated on disk under `dir`, every level.
fn disk_bytes_under(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            m.blocks() * 512
                + if m.is_dir() {
                    disk_bytes_under(&e.path())
                } else {
                    0
                }
        })
        .sum()
}

fn empty(c: &mut Criterion) {
    let mut g = c.benchmark_group("log/empty");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    let tmp = tempfile::tempdir().unwrap();
    // What each variant leaves on disk, printed once (criterion measures time only).
    {
        let d = tmp.path().join("probe-empty");
        let log = Log::create(&d, synced()).unwrap();
        let open = disk_bytes(&d);
        drop(log);
        let closed = disk_bytes(&d);
        let d1 = tmp.path().join("probe-one");
        let log = Log::create(&d1, synced()).unwrap();
        log.append(&[Record {
            kind: 1,
            payload: &text(200, 5),
        }])
        .unwrap();
        let open_one = disk_bytes(&d1);
        drop(log);
        let closed_one = disk_bytes(&d1);
        eprintln!(
            "log/empty: bytes on disk: empty log {open} open, {closed} closed; \
             one 200-byte record {open_one} open, {closed_one} closed"
        );
        // The same for a whole empty engine Session (its log, indexes and checkpoint).
        const SESSIONS: u64 = 100;
        let root_dir = tmp.path().join("probe-root");
        let root = logbook_engine::Root::open_or_init(&root_dir).unwrap();
        let before = disk_bytes_under(&root_dir);
        for s in 0..SESSIONS {
            root.create_session(logbook_engine::CreateSessionParams {
                session_id: Some(format!("s{s}")),
                workspace: Some("/work/space".into()),
                operation: format!("create-{s}"),
            })
            .unwrap();
        }
        let open = (disk_bytes_under(&root_dir) - before) / SESSIONS;
        drop(root);
        let closed = (disk_bytes_under(&root_dir) - before) / SESSIONS;
        eprintln!(
            "log/empty: bytes on disk per empty engine Session ({SESSIONS} created): \
             {open} with the Root open, {closed} closed"
        );
    }
    let mut i = 0u64;
    g.bench_function("create-drop", |b| {
        b.iter(|| {
            i += 1;
            let log = Log::create(&tmp.path().join(format!("e{i}")), synced()).unwrap();
            drop(log);
        })
    });
    let rec = text(200, 6);
    g.bench_function("create-append-drop", |b| {
        b.iter(|| {
            i += 1;
            let log = Log::create(&tmp.path().join(format!("a{i}")), synced()).unwrap();
            log.append(&[Record {
                kind: 1,
                payload: &rec,
            }])
            .unwrap();
            drop(log);
        })
    });
    g.bench_function("synced-32-byte-file", |b| {
        b.iter(|| {
            i += 1;
            let d = tmp.path().join(format!("f{i}"));
            std::fs::create_dir(&d).unwrap();
            let f = File::create(d.join("f")).unwrap();
            f.write_all_at(&[0u8; 32], 0).unwrap();
            f.sync_data().unwrap();
            File::open(&d).unwrap().sync_all().unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, append, read, open, empty);
criterion_main!(benches);
