//! Writes a small seed corpus for `log_recovery` from real logs made by logbook-log.
//! Run from `fuzz/`: `cargo run --bin make_log_seeds`.

mod input;

use input::{encode, File};
use logbook_log::{Durability, Log, LogConfig, Record};
use std::path::Path;

fn files_of(dir: &Path) -> Vec<File> {
    let mut v = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("read log dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8 name"))
        .collect();
    names.sort();
    for n in names {
        let segment: u8 = n[..20].parse::<u64>().expect("segment number") as u8;
        let role = if n.ends_with(".active") { 0 } else if n.ends_with(".sealed") { 1 } else { 3 };
        v.push(File { role, segment, bytes: std::fs::read(dir.join(&n)).expect("read file") });
    }
    v
}

/// `prealloc` > 0: a synced log whose newest segment ends in a preallocated zero region of
/// that many bytes ahead (format version 2); 0: a bulk log without one.
fn make(name: &str, segment_bytes_max: u64, batches: u32, torn: usize, prealloc: u64) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let durability = if prealloc > 0 { Durability::Sync } else { Durability::NoSyncBulkImport };
    let log = Log::create(
        &dir,
        LogConfig {
            segment_bytes_max,
            durability,
            preallocate_bytes: prealloc,
            ..LogConfig::default()
        },
    )
    .expect("create");
    for i in 0..batches {
        let p = format!("record {i} {}", "abc".repeat((i % 9) as usize)).into_bytes();
        let n = 1 + i % 3;
        let batch: Vec<Record<'_>> = (0..n).map(|k| Record { kind: k as u8, payload: &p }).collect();
        log.append(&batch).expect("append");
    }
    log.sync().expect("sync");
    assert_eq!(log.wait_for_sealing(), None);
    // Read while the log is open: a drop gives the zero region back, and the seeds are crash
    // images, which keep it.
    let mut files = files_of(&dir);
    drop(log);
    if torn > 0 {
        let last = files.iter_mut().rev().find(|f| f.role == 0).expect("an active segment");
        // The end of the frames: the zeros after them are the preallocated region.
        let end = last.bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        let keep = end.saturating_sub(torn);
        if prealloc > 0 {
            // A write torn by a crash: its last sectors read back as zeros, the length stays.
            last.bytes[keep..end].iter_mut().for_each(|b| *b = 0);
        } else {
            last.bytes.truncate(keep);
        }
    }
    let out = Path::new("corpus/log_recovery").join(format!("seed-{name}"));
    std::fs::write(&out, encode(&files)).expect("write seed");
    println!("{} ({} files)", out.display(), files.len());
}

fn main() {
    std::fs::create_dir_all("corpus/log_recovery").expect("corpus dir");
    // (seed-v1-* are the same logs written by format version 1, kept so old logs stay covered.)
    make("empty", 1 << 20, 0, 0, 0);
    make("active", 1 << 20, 6, 0, 0);
    make("torn", 1 << 20, 6, 5, 0);
    make("sealed", 300, 12, 0, 0);
    make("sealed-torn", 300, 12, 30, 0);
    make("zeros", 1 << 20, 6, 0, 1024);
    make("zeros-torn", 1 << 20, 6, 5, 1024);
    make("zeros-sealed", 600, 12, 0, 1024);
}
