//! Workspace reads beside their bare baselines.
//!
//! `fs/list/100000`: paging through a 100,000-entry directory with `Workspace::list`
//! (128 entries a page, sizes from `statat`) versus one `std::fs::read_dir` walk with
//! `symlink_metadata` per entry. The directory is left to settle first, as a real
//! workspace directory is between edits, so the sorted snapshot may be reused.
//!
//! `fs/read/256MiB`: `Workspace::read` of a 256 MiB text file (read, SHA-256, UTF-8
//! check, identity checks) versus SHA-256 of the same bytes already in memory.

use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use logbook_fs::{
    ReadOutcome, ReadPipeline, RelPath, Workspace, WorkspaceOptions, LIST_CACHE_RACY_SECS,
};
use sha2::{Digest, Sha256};

const LIST_ENTRIES: usize = 100_000;
const READ_BYTES: usize = 256 << 20;

fn list(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("big");
    std::fs::create_dir(&big).expect("mkdir");
    for i in 0..LIST_ENTRIES {
        let name = format!("entry-{:08}.txt", (i * 7919) % LIST_ENTRIES);
        std::fs::write(big.join(name), b"").expect("write");
    }
    std::thread::sleep(Duration::from_secs(LIST_CACHE_RACY_SECS as u64 + 1));
    let ws = Workspace::open(dir.path(), &[]).expect("open workspace");
    let path = RelPath::parse(b"big").expect("path");

    let mut g = c.benchmark_group(format!("fs/list/{LIST_ENTRIES}"));
    g.throughput(Throughput::Elements(LIST_ENTRIES as u64));
    g.sample_size(10);
    g.bench_function("workspace_list_pages", |b| {
        b.iter(|| {
            let mut n = 0usize;
            let mut after: Option<String> = None;
            loop {
                let page = ws.list(&path, after.as_deref()).expect("list");
                n += page.entries.len();
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            assert_eq!(n, LIST_ENTRIES);
            black_box(n)
        })
    });
    g.bench_function("std_read_dir_metadata", |b| {
        b.iter(|| {
            let mut n = 0usize;
            let mut bytes = 0u64;
            for ent in std::fs::read_dir(&big).expect("read_dir") {
                let ent = ent.expect("entry");
                bytes += ent.path().symlink_metadata().expect("metadata").len();
                n += 1;
            }
            assert_eq!(n, LIST_ENTRIES);
            black_box((n, bytes))
        })
    });
    g.finish();
}

fn read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.txt");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&file).expect("create"));
        let mut written = 0usize;
        let mut i = 0u64;
        while written < READ_BYTES {
            let line =
                format!("{i:>10} the quick brown fox jumps over the lazy dog; fn main() {{}}\n");
            let take = line.len().min(READ_BYTES - written);
            out.write_all(&line.as_bytes()[..take]).expect("write");
            written += take;
            i += 1;
        }
        out.flush().expect("flush");
    }
    let bytes = std::fs::read(&file).expect("read");
    let options = WorkspaceOptions {
        read_bytes_max: 2 * READ_BYTES as u64,
        ..WorkspaceOptions::default()
    };
    let ws = Workspace::open_with(dir.path(), &[], options).expect("open workspace");
    let path = RelPath::parse(b"big.txt").expect("path");

    let mut g = c.benchmark_group("fs/read/256MiB");
    g.throughput(Throughput::Bytes(READ_BYTES as u64));
    g.sample_size(10);
    g.bench_function("workspace_read", |b| {
        b.iter(|| match ws.read(&path, None).expect("read") {
            ReadOutcome::Content(c) => black_box(c.size),
            other => panic!("unexpected {other:?}"),
        })
    });
    let forced = [
        ("workspace_read_one_thread", ReadPipeline::Never),
        ("workspace_read_two_threads", ReadPipeline::Always),
    ];
    for (name, read_pipeline) in forced {
        let options = WorkspaceOptions {
            read_pipeline,
            ..options
        };
        let ws = Workspace::open_with(dir.path(), &[], options).expect("open workspace");
        g.bench_function(name, |b| {
            b.iter(|| match ws.read(&path, None).expect("read") {
                ReadOutcome::Content(c) => black_box(c.size),
                other => panic!("unexpected {other:?}"),
            })
        });
    }
    g.bench_function("sha2_in_memory", |b| {
        b.iter(|| black_box(Sha256::digest(black_box(&bytes))))
    });
    g.bench_function("std_fs_read_then_sha2", |b| {
        b.iter(|| {
            let data = std::fs::read(&file).expect("read");
            black_box(Sha256::digest(&data))
        })
    });
    g.finish();
}

criterion_group!(benches, list, read);
criterion_main!(benches);
