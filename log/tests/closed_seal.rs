//! Sealing the newest segment of a closed log (`Log::seal_when_closed`): the closed log costs
//! its compressed size, loses nothing, reopens into a new segment, and an open that races the
//! background seal finds the directory either before or after it, never in between.

#![allow(clippy::unwrap_used)]

use logbook_log::io::{FaultyFs, Injected, Op};
use logbook_log::{settle_closed_seals, Durability, Location, Log, LogConfig, Record};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn cfg() -> LogConfig {
    LogConfig {
        durability: Durability::Sync,
        ..LogConfig::default()
    }
}

fn payloads(log: &Log) -> Vec<Vec<u8>> {
    log.scan(log.start())
        .map(|r| r.unwrap().1.payload)
        .collect()
}

fn names(d: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    n.sort();
    n
}

/// Compressible text of `n` bytes, different for each `i`.
fn text(i: usize, n: usize) -> Vec<u8> {
    let words = [
        "segment", "sealed", "closed", "log", "record", "tail", "open",
    ];
    let mut s = format!("record {i}:");
    let mut k = i;
    while s.len() < n {
        s.push(' ');
        s.push_str(words[k % words.len()]);
        k = k.wrapping_mul(7).wrapping_add(3);
    }
    s.truncate(n);
    s.into_bytes()
}

fn append_all(log: &Log, want: &[Vec<u8>]) {
    for p in want {
        log.append(&[Record {
            kind: 1,
            payload: p,
        }])
        .unwrap();
    }
}

fn settle(d: &Path) {
    settle_closed_seals(d, Duration::from_secs(60));
}

/// A log at `d` holding `records` records of 2,000 bytes, closed and sealed (its seal
/// settled); returns the records' payloads.
fn closed_sealed(d: &Path, records: usize) -> Vec<Vec<u8>> {
    let log = Log::create(d, cfg()).unwrap();
    let want: Vec<Vec<u8>> = (0..records).map(|i| text(i, 2_000)).collect();
    append_all(&log, &want);
    log.seal_when_closed(1);
    drop(log);
    settle(d);
    want
}

#[test]
fn a_closed_log_is_sealed_and_reopens_into_a_new_segment() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let log = Log::create(&d, cfg()).unwrap();
    let mut want: Vec<Vec<u8>> = (0..20).map(|i| text(i, 2_000)).collect();
    append_all(&log, &want);
    log.seal_when_closed(16 << 10);
    drop(log);
    settle(&d);
    assert_eq!(
        names(&d),
        ["00000000000000000000.sealed"],
        "sealed, the active copy gone"
    );
    let size = std::fs::metadata(d.join("00000000000000000000.sealed"))
        .unwrap()
        .len();
    assert!(size < 20 * 2_000 / 4, "compressed: {size} bytes");

    let (log, _) = Log::open(&d, cfg()).unwrap();
    assert_eq!(
        payloads(&log),
        want,
        "every record, read from the sealed segment"
    );
    assert_eq!(
        log.end(),
        Location {
            segment: 1,
            offset: 32
        },
        "appends go on in a new segment"
    );
    let more: Vec<Vec<u8>> = (20..25).map(|i| text(i, 500)).collect();
    append_all(&log, &more);
    want.extend(more);
    // Below the minimum (5 x 500 bytes): left active.
    log.seal_when_closed(16 << 10);
    drop(log);
    settle(&d);
    assert_eq!(
        names(&d),
        ["00000000000000000000.sealed", "00000000000000000001.active"]
    );
    let (log, _) = Log::open(&d, cfg()).unwrap();
    assert_eq!(payloads(&log), want);
    assert_eq!(log.verify().unwrap().records, 25);
}

#[test]
fn a_log_not_asked_or_below_the_minimum_stays_active() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let log = Log::create(&d, cfg()).unwrap();
    let want: Vec<Vec<u8>> = (0..20).map(|i| text(i, 2_000)).collect();
    append_all(&log, &want);
    drop(log);
    settle(&d);
    assert_eq!(names(&d), ["00000000000000000000.active"]);
    let (log, _) = Log::open(&d, cfg()).unwrap();
    log.seal_when_closed(1 << 20);
    drop(log);
    settle(&d);
    assert_eq!(names(&d), ["00000000000000000000.active"]);
}

#[test]
fn an_open_racing_the_seal_finds_every_record() {
    // Reopen right after each close, append, close again: the open cancels a queued seal or
    // waits for a running one, so every round sees every record and appends after it.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    drop(Log::create(&d, cfg()).unwrap());
    let mut want = Vec::new();
    for round in 0..40 {
        let (log, _) = Log::open(&d, cfg()).unwrap();
        assert_eq!(payloads(&log), want, "round {round}");
        let batch: Vec<Vec<u8>> = (0..6).map(|i| text(round * 10 + i, 1_500)).collect();
        append_all(&log, &batch);
        want.extend(batch);
        log.seal_when_closed(4 << 10);
        drop(log);
        if round % 3 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    settle(&d);
    let (log, _) = Log::open(&d, cfg()).unwrap();
    assert_eq!(payloads(&log), want);
    assert_eq!(log.verify().unwrap().records, want.len() as u64);
}

#[test]
fn a_failed_closed_seal_leaves_the_log_as_it_was_closed() {
    for (op, on, what) in [
        (Op::Create, ".sealed.tmp", Injected::NoSpace),
        (Op::Write, ".sealed.tmp", Injected::NoSpace),
        (Op::Sync, ".sealed.tmp", Injected::Eio),
        (Op::Rename, ".sealed.tmp", Injected::Eio),
        (Op::Remove, ".active", Injected::Eio),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("l");
        let (fs, faults) = FaultyFs::new();
        let fs = Arc::new(fs);
        let log = Log::create_with_fs(&d, cfg(), fs.clone()).unwrap();
        let want: Vec<Vec<u8>> = (0..20).map(|i| text(i, 2_000)).collect();
        append_all(&log, &want);
        faults.arm_on(op, on, 0, what);
        log.seal_when_closed(1);
        drop(log);
        settle(&d);
        assert!(faults.all_fired(), "{op:?} on {on} fired");
        let (log, _) = Log::open(&d, cfg()).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert_eq!(payloads(&log), want, "{op:?}");
        assert!(
            !names(&d).iter().any(|n| n.ends_with(".tmp")),
            "{op:?}: {:?}",
            names(&d)
        );
        assert_eq!(log.verify().unwrap().records, 20, "{op:?}");
    }
}

#[test]
fn the_segment_after_a_sealed_one_costs_no_sync_until_a_record_needs_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let mut want = closed_sealed(&d, 20);

    // An open to read: no fdatasync, no directory fsync.
    let (fs, faults) = FaultyFs::new();
    let fs = Arc::new(fs);
    let (log, _) = Log::open_with_fs(&d, cfg(), fs.clone()).unwrap();
    assert_eq!(payloads(&log), want);
    assert_eq!((faults.count(Op::Sync), faults.count(Op::SyncDir)), (0, 0));
    // The first durable append syncs the new segment's name with it; the next one does not.
    let more = text(99, 100);
    append_all(&log, std::slice::from_ref(&more));
    assert_eq!((faults.count(Op::Sync), faults.count(Op::SyncDir)), (1, 1));
    append_all(&log, std::slice::from_ref(&more));
    assert_eq!((faults.count(Op::Sync), faults.count(Op::SyncDir)), (2, 1));
    want.push(more.clone());
    want.push(more);
    drop(log);
    let (log, _) = Log::open(&d, cfg()).unwrap();
    assert_eq!(payloads(&log), want);
}

#[test]
fn an_open_to_read_makes_no_file_and_the_first_append_makes_the_segment() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let mut want = closed_sealed(&d, 20);
    let sealed_only = names(&d);
    assert!(
        sealed_only.iter().all(|n| !n.ends_with(".active")),
        "{sealed_only:?}"
    );

    // A disk that makes no file (full, or read only) still reads the log, and the open
    // and the reads write nothing.
    let (fs, faults) = FaultyFs::new();
    let fs = Arc::new(fs);
    faults.arm_on(Op::Create, ".active", 0, Injected::NoSpace);
    let (log, _) = Log::open_with_fs(&d, cfg(), fs.clone()).unwrap();
    assert_eq!(payloads(&log), want);
    assert_eq!(log.verify().unwrap().records, 20);
    for op in [Op::Create, Op::Write, Op::SetLen, Op::Sync, Op::SyncDir] {
        assert_eq!(faults.count(op), 0, "{op:?}");
    }
    // An append then fails as the disk makes it, and leaves no file behind.
    let more = text(99, 100);
    let e = log
        .append(&[Record {
            kind: 1,
            payload: &more,
        }])
        .unwrap_err();
    assert!(faults.all_fired());
    assert!(e.to_string().contains("No space"), "{e}");
    assert_eq!(payloads(&log), want);
    drop(log);
    // (The failed handle leaves its `unsynced` mark, for the next open to judge.)
    let left: Vec<String> = names(&d).into_iter().filter(|n| n != "unsynced").collect();
    assert_eq!(left, sealed_only);

    // With room again, the first append makes the segment, and its records read back
    // through this handle and after a reopen.
    let (log, _) = Log::open(&d, cfg()).unwrap();
    assert_eq!(names(&d), sealed_only);
    append_all(&log, std::slice::from_ref(&more));
    want.push(more);
    assert_eq!(payloads(&log), want);
    let made: Vec<String> = names(&d)
        .into_iter()
        .filter(|n| n.ends_with(".active"))
        .collect();
    assert_eq!(made.len(), 1, "{:?}", names(&d));
    drop(log);
    let (log, _) = Log::open(&d, cfg()).unwrap();
    assert_eq!(payloads(&log), want);
    assert_eq!(log.verify().unwrap().records, 21);
}

#[test]
fn an_unsynced_new_segment_that_reads_as_zeros_is_a_torn_create() {
    // A first write made segment 1 without syncs; a power loss kept its name and length but
    // not its header. Nothing was in it: the next open starts it again and loses nothing.
    for len in [0usize, 12, 32, 4096] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("l");
        let want = closed_sealed(&d, 20);
        drop(Log::open(&d, cfg()).unwrap());
        let seg1 = d.join("00000000000000000001.active");
        std::fs::write(&seg1, vec![0u8; len]).unwrap();
        let (log, _) = Log::open(&d, cfg()).unwrap_or_else(|e| panic!("{len}: {e}"));
        assert_eq!(payloads(&log), want, "{len}");
        append_all(&log, &want[..1]);
        drop(log);
        let (log, _) = Log::open(&d, cfg()).unwrap();
        assert_eq!(log.verify().unwrap().records, 21, "{len}");
    }
    // A newest segment whose zeros follow damage is not a torn create.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    drop(Log::create(&d, cfg()).unwrap());
    let seg0 = d.join("00000000000000000000.active");
    let mut bytes = vec![0u8; 4096];
    bytes[100] = 7;
    std::fs::write(&seg0, bytes).unwrap();
    assert!(Log::open(&d, cfg()).is_err());
}

/// A small sealed file, once read, stays in memory and is counted by `small_sealed_bytes`; a
/// larger one is read without keeping its pages and counts nothing.
#[test]
fn the_bytes_of_small_sealed_files_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let sealed_of = |name: &str, records: usize| {
        let d = dir.path().join(name);
        let want = closed_sealed(&d, records);
        let size = std::fs::metadata(d.join("00000000000000000000.sealed"))
            .unwrap()
            .len();
        let (log, _) = Log::open(&d, cfg()).unwrap();
        assert_eq!(log.small_sealed_bytes(), 0, "not opened before a read");
        assert_eq!(payloads(&log), want);
        (log.small_sealed_bytes(), size)
    };
    let (counted, size) = sealed_of("small", 4);
    assert!(size <= 16 << 10, "small: {size}");
    assert_eq!(counted, size);
    // Enough records that their sealed file passes 16 KiB.
    let (counted, size) = sealed_of("large", 400);
    assert!(size > 16 << 10, "large: {size}");
    assert_eq!(counted, 0);
}
