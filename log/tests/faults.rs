//! Injected faults: short writes, failed fdatasync, ENOSPC, EIO on read, and failures at every
//! step of sealing. Each shows a clear error or a correct recovery.

#![allow(clippy::unwrap_used)]

use logbook_log::io::{Faults, FaultyFs, Injected, Op};
use logbook_log::{Durability, ErrorKind, Log, LogConfig, LogError, Record};
use std::path::Path;
use std::sync::Arc;

fn cfg(segment_bytes_max: u64) -> LogConfig {
    LogConfig {
        segment_bytes_max,
        durability: Durability::Sync,
        ..LogConfig::default()
    }
}

fn faulty(dir: &Path, c: LogConfig) -> (Log, Faults) {
    let (fs, faults) = FaultyFs::new();
    (Log::create_with_fs(dir, c, Arc::new(fs)).unwrap(), faults)
}

fn payloads(log: &Log) -> Vec<Vec<u8>> {
    log.scan(log.start())
        .map(|r| r.unwrap().1.payload)
        .collect()
}

fn rec(p: &[u8]) -> [Record<'_>; 1] {
    [Record {
        kind: 1,
        payload: p,
    }]
}

#[test]
fn failed_fdatasync_poisons_until_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let (log, faults) = faulty(&d, cfg(1 << 20));
    for i in 0..3u8 {
        log.append(&rec(&[i; 10])).unwrap();
    }
    faults.arm(Op::Sync, 0, Injected::Eio);
    let e = log.append(&rec(b"lost?")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains("fdatasync"), "{e}");
    let e = log.append(&rec(b"refused")).unwrap_err();
    assert!(matches!(e, LogError::Poisoned { .. }), "{e}");
    assert!(e.to_string().contains("reopen"), "{e}");
    assert!(matches!(log.sync(), Err(LogError::Poisoned { .. })));
    // What was acknowledged is still readable.
    assert_eq!(payloads(&log)[..3], [[0u8; 10], [1; 10], [2; 10]]);
    drop(log);
    let (log, _) = Log::open(&d, cfg(1 << 20)).unwrap();
    let got = payloads(&log);
    assert!(got.len() == 3 || got.len() == 4, "{}", got.len());
    assert_eq!(got[..3], [[0u8; 10], [1; 10], [2; 10]]);
    log.append(&rec(b"after reopen")).unwrap();
}

#[test]
fn cut_unsynced_drops_the_batch_whose_fdatasync_failed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let (fs, faults) = FaultyFs::new();
    // Through the config, as the engine opens its logs.
    let c = LogConfig {
        fs: Some(Arc::new(fs)),
        ..cfg(1 << 20)
    };
    let log = Log::create(&d, c.clone()).unwrap();
    assert!(!log.is_poisoned());
    assert!(log.cut_unsynced().is_err(), "refused on a healthy log");
    for i in 0..3u8 {
        log.append(&rec(&[i; 10])).unwrap();
    }
    faults.arm(Op::Sync, 0, Injected::NoSpace);
    assert_eq!(
        log.append(&rec(b"unsynced")).unwrap_err().kind(),
        ErrorKind::Io
    );
    assert!(log.is_poisoned());
    log.cut_unsynced().unwrap();
    drop(log);
    // The page cache still held the failed batch; after the cut the open never sees it.
    let (log, _) = Log::open(&d, c).unwrap();
    assert!(!log.is_poisoned());
    assert_eq!(payloads(&log), [[0u8; 10], [1; 10], [2; 10]]);
    log.append(&rec(b"after reopen")).unwrap();
    assert_eq!(payloads(&log).len(), 4);
}

#[test]
fn short_write_poisons_and_is_cut_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let (log, faults) = faulty(&d, cfg(1 << 20));
    log.append(&rec(b"kept")).unwrap();
    faults.arm(Op::Write, 0, Injected::ShortWrite);
    let big = vec![7u8; 1000];
    let e = log
        .append(&[
            Record {
                kind: 1,
                payload: &big,
            },
            Record {
                kind: 2,
                payload: &big,
            },
        ])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains("os error 28"), "{e}");
    assert!(matches!(
        log.append(&rec(b"x")),
        Err(LogError::Poisoned { .. })
    ));
    drop(log);
    let (log, recovery) = Log::open(&d, cfg(1 << 20)).unwrap();
    assert_eq!(
        recovery.cut_bytes, 1024,
        "half of the two-frame batch reached the file"
    );
    let copy = recovery.cut_copy.clone().unwrap();
    let kept = std::fs::read(&copy).unwrap();
    assert_eq!(&kept[..8], b"LGBKCUTS", "the copy says what it is");
    assert_eq!(
        kept.len(),
        40 + 1024,
        "a 40-byte header, then the cut bytes"
    );
    assert_eq!(payloads(&log), [b"kept".to_vec()]);
    log.append(&rec(b"next")).unwrap();
    drop(log);
    let (log, recovery) = Log::open(&d, cfg(1 << 20)).unwrap();
    assert_eq!(recovery.cut_bytes, 0);
    assert_eq!(payloads(&log), [b"kept".to_vec(), b"next".to_vec()]);
    log.verify().unwrap();
}

#[test]
fn no_space_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    for durability in [Durability::Sync, Durability::NoSyncBulkImport] {
        let d = d.join(format!("{durability:?}"));
        let c = LogConfig {
            segment_bytes_max: 1 << 20,
            durability,
            ..LogConfig::default()
        };
        let (log, faults) = faulty(&d, c.clone());
        log.append(&rec(b"a")).unwrap();
        log.sync().unwrap();
        faults.arm(Op::Write, 0, Injected::NoSpace);
        // NoSync buffers: the failure shows at the flush (`sync`) instead of the append.
        let e = match durability {
            Durability::Sync => log.append(&rec(b"b")).unwrap_err(),
            Durability::NoSyncBulkImport => {
                log.append(&rec(b"b")).unwrap();
                log.sync().unwrap_err()
            }
        };
        assert!(e.to_string().contains("No space left"), "{e}");
        assert!(matches!(
            log.append(&rec(b"c")),
            Err(LogError::Poisoned { .. })
        ));
        drop(log);
        let (log, _) = Log::open(&d, c).unwrap();
        assert_eq!(payloads(&log), [b"a".to_vec()]);
    }
}

#[test]
fn eio_on_read_is_reported_and_does_not_poison() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let (log, faults) = faulty(&d, cfg(1 << 20));
    let at = log.append(&rec(b"data")).unwrap()[0];
    faults.arm(Op::Read, 0, Injected::Eio);
    let e = log.read(at).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains(".active"), "names the file: {e}");
    assert_eq!(log.read(at).unwrap().payload, b"data");
    log.append(&rec(b"more")).unwrap();
    drop(log);
    // EIO while recovery reads the tail: open fails and names the file.
    let (fs, faults) = FaultyFs::new();
    faults.arm(Op::Read, 0, Injected::Eio);
    let e = Log::open_with_fs(&d, cfg(1 << 20), Arc::new(fs)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains("00000000000000000000.active"), "{e}");
    let (log, _) = Log::open(&d, cfg(1 << 20)).unwrap();
    assert_eq!(payloads(&log).len(), 2);
}

#[test]
fn failures_while_rolling_poison() {
    for (op, what) in [
        (Op::Create, Injected::NoSpace),
        (Op::Sync, Injected::Eio),
        (Op::SyncDir, Injected::Eio),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("l");
        let (log, faults) = faulty(&d, cfg(200));
        log.append(&rec(&[1; 100])).unwrap();
        // The next append rolls: its first system calls are the old segment's sync and the
        // new segment's creation.
        faults.arm(op, 0, what);
        let e = log.append(&rec(&[2; 100])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "{op:?}: {e}");
        assert!(matches!(
            log.append(&rec(b"x")),
            Err(LogError::Poisoned { .. })
        ));
        drop(log);
        let (log, _) = Log::open(&d, cfg(200)).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert_eq!(payloads(&log)[0], [1; 100]);
        log.append(&rec(&[3; 100])).unwrap();
        log.verify().unwrap();
    }
}

/// A failure at each step of sealing leaves the files as a crash at that step would; the log
/// keeps serving reads, and reopening recovers everything and finishes the sealing.
#[test]
fn sealing_interrupted_at_every_step_recovers() {
    let steps: [(Op, &str, Injected); 7] = [
        (Op::Create, ".sealed.tmp", Injected::NoSpace),
        (Op::Write, ".sealed.tmp", Injected::ShortWrite),
        (Op::Write, ".sealed.tmp", Injected::NoSpace),
        (Op::Sync, ".sealed.tmp", Injected::Eio),
        (Op::Rename, ".sealed.tmp", Injected::Eio),
        (Op::Remove, ".active", Injected::Eio),
        (Op::Read, ".active", Injected::Eio),
    ];
    for (op, on, what) in steps {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("l");
        let (fs, faults) = FaultyFs::new();
        // (Read on ".active": the sealer's read of the finished segment; appenders never read.)
        faults.arm_on(op, on, 0, what);
        let log = Log::create_with_fs(&d, cfg(300), Arc::new(fs)).unwrap();
        let want: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 50 + i as usize]).collect();
        for p in &want {
            log.append(&rec(p)).unwrap();
        }
        let err = log.wait_for_sealing();
        assert!(faults.all_fired(), "{op:?} on {on} fired");
        assert!(err.is_some(), "{op:?}: sealing reported its failure");
        assert_eq!(payloads(&log), want, "{op:?}: still readable");
        drop(log);
        let (log, _) = Log::open(&d, cfg(300)).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert_eq!(payloads(&log), want, "{op:?}: recovered");
        assert_eq!(log.wait_for_sealing(), None);
        let names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let active = names.iter().filter(|n| n.ends_with(".active")).count();
        let sealed = names.iter().filter(|n| n.ends_with(".sealed")).count();
        assert_eq!(active, 1, "{op:?}: only the newest is unsealed: {names:?}");
        assert!(sealed > 3, "{op:?}: {names:?}");
        assert!(
            !names.iter().any(|n| n.ends_with(".tmp")),
            "{op:?}: {names:?}"
        );
        assert_eq!(log.verify().unwrap().records, 40);
    }
}

#[test]
fn concurrent_appenders_share_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let (log, faults) = faulty(&d, cfg(64 << 20));
    let log = Arc::new(log);
    let before = faults.count(Op::Sync);
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..40u8 {
                    log.append(&rec(&[t, i])).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let syncs = faults.count(Op::Sync) - before;
    println!("320 synced appends from 8 threads took {syncs} fdatasyncs");
    assert!(syncs < 320, "group commit shares syncs: {syncs}");
    assert_eq!(payloads(&log).len(), 320);
}

#[test]
fn nosync_buffer_is_not_rewritten_after_a_failed_flush() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let c = LogConfig {
        segment_bytes_max: 1 << 20,
        durability: Durability::NoSyncBulkImport,
        ..LogConfig::default()
    };
    let (log, faults) = faulty(&d, c.clone());
    let at = log.append(&rec(b"buffered")).unwrap()[0];
    faults.arm(Op::Write, 0, Injected::Eio);
    assert_eq!(log.sync().unwrap_err().kind(), ErrorKind::Io);
    // The record was published from the buffer, but its write failed: a read must not write
    // the buffer again behind the caller's back.
    assert!(matches!(log.read(at), Err(LogError::Poisoned { .. })));
    drop(log);
    let (log, _) = Log::open(&d, c).unwrap();
    assert!(payloads(&log).is_empty());
}

fn prealloc_cfg(chunk: u64) -> LogConfig {
    LogConfig {
        segment_bytes_max: 1 << 20,
        durability: Durability::Sync,
        preallocate_bytes: chunk,
        ..LogConfig::default()
    }
}

/// With 4 KiB preallocation, three 1,000-byte appends fit; the fourth zero-fills the next
/// chunk first.
#[test]
fn no_space_while_preallocating_is_a_clear_error_that_loses_nothing() {
    for what in [Injected::NoSpace, Injected::ShortWrite] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("l");
        let c = prealloc_cfg(4096);
        let (log, faults) = faulty(&d, c.clone());
        let file = d.join("00000000000000000000.active");
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 4096);
        let want: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; 1000]).collect();
        for p in &want {
            log.append(&rec(p)).unwrap();
        }
        let writes = faults.count(Op::Write);
        faults.arm(Op::Write, 0, what);
        let e = log.append(&rec(&[9; 1000])).unwrap_err();
        assert!(faults.all_fired());
        assert_eq!(e.kind(), ErrorKind::Io, "{what:?}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("preallocate"), "{what:?}: {msg}");
        assert!(msg.contains("No space left"), "{what:?}: {msg}");
        assert!(msg.contains(".active"), "{what:?}: names the file: {msg}");
        assert_eq!(
            faults.count(Op::Write),
            writes + 1,
            "the batch was not written"
        );
        // Nothing acknowledged is lost, and the log is not poisoned: the failed write left
        // zeros (or nothing) after the last frame, which is what was there before.
        assert_eq!(payloads(&log), want, "{what:?}");
        log.append(&rec(&[4; 1000])).unwrap();
        assert!(std::fs::metadata(&file).unwrap().len() > 4096);
        drop(log);
        let (log, recovery) = Log::open(&d, c).unwrap();
        assert_eq!(recovery.cut_bytes, 0, "{what:?}");
        let mut all = want.clone();
        all.push(vec![4; 1000]);
        assert_eq!(payloads(&log), all, "{what:?}");
        log.verify().unwrap();
    }
}

#[test]
fn failed_fdatasync_of_a_commit_that_extends_the_zero_region_poisons() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let c = prealloc_cfg(4096);
    let (log, faults) = faulty(&d, c.clone());
    for i in 0..3u8 {
        log.append(&rec(&[i; 1000])).unwrap();
    }
    // The fourth batch needs a new zero step: the zeros and the batch share its commit's sync.
    faults.arm(Op::Sync, 0, Injected::Eio);
    let e = log.append(&rec(&[9; 1000])).unwrap_err();
    assert!(e.to_string().contains("fdatasync"), "{e}");
    assert!(matches!(
        log.append(&rec(b"x")),
        Err(LogError::Poisoned { .. })
    ));
    drop(log);
    // The acknowledged three are there; the failed batch may be too (it was written, only its
    // sync failed), never anything else.
    let (log, _) = Log::open(&d, c).unwrap();
    let found = payloads(&log);
    assert!(found.len() == 3 || found.len() == 4, "{}", found.len());
    for (i, p) in found.iter().enumerate() {
        let want = if i < 3 {
            vec![i as u8; 1000]
        } else {
            vec![9; 1000]
        };
        assert_eq!(*p, want);
    }
}

/// Commit fdatasyncs land in zeros written ahead: the file grows in chunks, not per append,
/// and a roll leaves the finished segment without its zeros.
#[test]
fn the_file_grows_in_chunks_and_rolls_without_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let c = LogConfig {
        segment_bytes_max: 64 << 10,
        durability: Durability::Sync,
        preallocate_bytes: 16 << 10,
        ..LogConfig::default()
    };
    let log = Log::create(&d, c.clone()).unwrap();
    let first = d.join("00000000000000000000.active");
    let mut lens = Vec::new();
    for i in 0..100u8 {
        log.append(&rec(&[i; 1000])).unwrap();
        if log.end().segment == 0 {
            lens.push(std::fs::metadata(&first).unwrap().len());
        }
    }
    lens.dedup();
    assert!(lens.len() <= 5, "grown in chunks: {lens:?}");
    assert!(
        lens.iter().all(|l| l % 4096 == 0 || *l == 64 << 10),
        "{lens:?}"
    );
    assert!(log.end().segment >= 1);
    assert_eq!(log.wait_for_sealing(), None);
    drop(log);
    let (log, _) = Log::open(&d, c).unwrap();
    assert_eq!(payloads(&log).len(), 100);
    assert_eq!(log.verify().unwrap().records, 100);
}

/// The zero region grows in doubling steps (16 KiB, 32 KiB, ...). A full disk while it grows
/// is an `Io` error of the append that needed the room, and of each retry while the disk
/// stays full; nothing acknowledged is lost, the log is not poisoned, and once space returns
/// the next append grows the region and succeeds. Dropping the log gives the zeros back; a
/// truncation that fails then leaves zeros, which the next open takes as clean.
#[test]
fn full_disk_while_the_zero_region_grows_loses_nothing_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let c = cfg(64 << 20);
    let (log, faults) = faulty(&d, c.clone());
    let file = d.join("00000000000000000000.active");
    let first = std::fs::metadata(&file).unwrap().len();
    assert_eq!(first, logbook_log::PREALLOCATE_FIRST_BYTES);
    let mut want = Vec::new();
    // Fill the first region: the next 1,000-byte append needs more room.
    while log.end().offset + 1024 <= first {
        let p = vec![want.len() as u8; 1000];
        log.append(&rec(&p)).unwrap();
        want.push(p);
    }
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        first,
        "no extension yet"
    );
    let next = vec![0xEE; 1000];
    for what in [Injected::NoSpace, Injected::ShortWrite, Injected::NoSpace] {
        faults.arm_on(Op::Write, ".active", 0, what);
        let e = log.append(&rec(&next)).unwrap_err();
        assert!(faults.all_fired());
        assert_eq!(e.kind(), ErrorKind::Io, "{what:?}: {e}");
        assert!(e.to_string().contains("preallocate"), "{e}");
        assert!(e.to_string().contains("No space left"), "{e}");
        assert!(
            !log.is_poisoned(),
            "{what:?}: a failed zero-fill changes nothing"
        );
        assert_eq!(
            payloads(&log),
            want,
            "{what:?}: acknowledged records are intact"
        );
    }
    // Space is back.
    log.append(&rec(&next)).unwrap();
    want.push(next);
    let grown = std::fs::metadata(&file).unwrap().len();
    assert!(
        grown >= first + 2 * first - 4096,
        "the step doubled: {first} -> {grown}"
    );
    assert!(grown <= log.end().offset + 2 * first + 4096, "{grown}");
    let end = log.end();
    // The truncation that gives the zeros back fails: the drop still completes.
    faults.arm_on(Op::SetLen, ".active", 0, Injected::Eio);
    drop(log);
    assert!(faults.all_fired());
    assert_eq!(std::fs::metadata(&file).unwrap().len(), grown, "zeros kept");
    let (log, recovery) = Log::open(&d, c.clone()).unwrap();
    assert_eq!(
        recovery.cut_bytes, 0,
        "zeros after the last batch are clean"
    );
    assert_eq!(log.end(), end);
    assert_eq!(payloads(&log), want);
    drop(log);
    // A clean drop gives them back: the file ends at its last batch, and opens clean.
    assert_eq!(std::fs::metadata(&file).unwrap().len(), end.offset);
    let (log, recovery) = Log::open(&d, c).unwrap();
    assert_eq!(recovery.cut_bytes, 0);
    assert_eq!(payloads(&log), want);
    log.verify().unwrap();
}

/// An open syncs the newest segment only when a handle may have left bytes no fdatasync
/// covered: the `unsynced` mark is made before a handle's first write and removed by a drop
/// with every byte synced, so a clean close costs the next open no fdatasync, and a killed
/// handle (here: one never dropped) leaves the mark, and its next open syncs.
#[test]
fn open_syncs_only_after_a_handle_that_left_unsynced_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let mark = d.join(logbook_log::UNSYNCED_MARK);
    let open = |c: LogConfig| {
        let (fs, faults) = FaultyFs::new();
        let (log, _) = Log::open_with_fs(&d, c, Arc::new(fs)).unwrap();
        (log, faults)
    };
    let (log, _) = faulty(&d, cfg(1 << 20));
    assert!(!mark.exists(), "a new log is synced as created");
    log.append(&rec(b"one")).unwrap();
    assert!(mark.exists(), "made before the first write");
    drop(log);
    assert!(!mark.exists(), "a drop with every byte synced removes it");
    let (log, faults) = open(cfg(1 << 20));
    assert_eq!(
        faults.count(Op::Sync),
        0,
        "a clean close costs the next open no sync"
    );
    log.append(&rec(b"two")).unwrap();
    std::mem::forget(log);
    assert!(mark.exists(), "a handle that never dropped leaves it");
    let (log, faults) = open(cfg(1 << 20));
    assert_eq!(
        faults.count(Op::Sync),
        1,
        "after an unclean end the open syncs"
    );
    assert!(!mark.exists(), "and removes the mark once synced");
    assert_eq!(payloads(&log), [b"one".to_vec(), b"two".to_vec()]);
    drop(log);
    // Bulk import acknowledges before syncing, and writes when its buffer fills: its drop
    // syncs, then removes the mark; a killed one leaves what it wrote, and the mark.
    let bulk = LogConfig {
        durability: Durability::NoSyncBulkImport,
        ..cfg(16 << 20)
    };
    let big = vec![7u8; 3 << 20];
    let (log, _) = open(bulk.clone());
    log.append(&rec(&big)).unwrap();
    assert!(mark.exists(), "a full buffer was written");
    drop(log);
    assert!(!mark.exists());
    let (log, faults) = open(bulk.clone());
    assert_eq!(faults.count(Op::Sync), 0);
    log.append(&rec(&big)).unwrap();
    std::mem::forget(log);
    assert!(mark.exists());
    let (log, faults) = open(bulk);
    assert_eq!(faults.count(Op::Sync), 1);
    assert_eq!(payloads(&log).len(), 4);
    // A mark that cannot be made fails the write: no byte goes out unmarked.
    drop(log);
    let (fs, faults) = FaultyFs::new();
    let (log, _) = Log::open_with_fs(&d, cfg(1 << 20), Arc::new(fs)).unwrap();
    faults.arm_on(Op::Create, logbook_log::UNSYNCED_MARK, 0, Injected::Eio);
    let e = log.append(&rec(b"refused")).unwrap_err();
    assert!(e.to_string().contains("unsynced"), "{e}");
}

/// Under a group mark (one per engine Root) a healthy log makes no mark of its own, so opening,
/// writing and closing it costs no file creation; a killed writer leaves the group mark, and
/// the next taker's `syncfs` stands for every log's recovery sync. A log that leaves bytes no
/// sync covered (poisoned, or dropped so) still marks itself, and when it cannot, the group
/// mark stays on disk when released.
#[test]
fn a_group_mark_stands_for_each_logs_own() {
    use logbook_log::{GroupMark, UNSYNCED_MARK};
    let dir = tempfile::tempdir().unwrap();
    let group_file = dir.path().join(UNSYNCED_MARK);
    let d = dir.path().join("l");
    let own = d.join(UNSYNCED_MARK);
    let under = |g: &Arc<GroupMark>, c: LogConfig| LogConfig {
        group_mark: Some(Arc::clone(g)),
        ..c
    };
    let (group, found) = GroupMark::take(dir.path()).unwrap();
    assert!(!found, "no writer before");
    let (log, _) = faulty(&d, under(&group, cfg(1 << 20)));
    assert!(!group_file.exists(), "taken, but nothing written yet");
    log.append(&rec(b"one")).unwrap();
    assert!(group_file.exists(), "made before the first write");
    assert!(!own.exists(), "the group mark stands for the log's own");
    drop(log);
    let (fs, faults) = FaultyFs::new();
    let (log, _) = Log::open_with_fs(&d, under(&group, cfg(1 << 20)), Arc::new(fs)).unwrap();
    assert_eq!(
        faults.count(Op::Sync),
        0,
        "a reopen in the process syncs nothing"
    );
    log.append(&rec(b"two")).unwrap();
    assert!(!own.exists());
    // The writer is killed: its group mark and the log's handle are never dropped.
    std::mem::forget(log);
    std::mem::forget(group);
    let (group, found) = GroupMark::take(dir.path()).unwrap();
    assert!(
        found,
        "the next writer finds the mark and syncs the file system"
    );
    let (fs, faults) = FaultyFs::new();
    let (log, _) = Log::open_with_fs(&d, under(&group, cfg(1 << 20)), Arc::new(fs)).unwrap();
    assert_eq!(faults.count(Op::Sync), 0, "which stands for the log's sync");
    assert_eq!(payloads(&log), [b"one".to_vec(), b"two".to_vec()]);
    // A failed commit poisons the log, which marks itself: a handle opened after it, in this
    // process, syncs.
    faults.arm(Op::Sync, 0, Injected::Eio);
    log.append(&rec(b"failed")).unwrap_err();
    assert!(own.exists(), "a poisoned log marks itself");
    log.cut_unsynced().unwrap();
    drop(log);
    let (fs, faults) = FaultyFs::new();
    let (log, _) = Log::open_with_fs(&d, under(&group, cfg(1 << 20)), Arc::new(fs)).unwrap();
    assert_eq!(faults.count(Op::Sync), 1, "its next open syncs");
    assert!(!own.exists(), "and removes its mark");
    drop(log);
    group.release();
    assert!(
        !group_file.exists(),
        "released with every log closed and synced"
    );
    // A bulk import whose drop can neither sync nor mark itself keeps the group mark.
    let (group, found) = GroupMark::take(dir.path()).unwrap();
    assert!(!found, "a released mark is gone");
    group.release();
    assert!(
        !group_file.exists(),
        "one never made is not there to release"
    );
    let bulk = LogConfig {
        durability: Durability::NoSyncBulkImport,
        ..under(&group, cfg(16 << 20))
    };
    let (fs, faults) = FaultyFs::new();
    let (log, _) = Log::open_with_fs(&d, bulk, Arc::new(fs)).unwrap();
    log.append(&rec(&vec![7u8; 3 << 20])).unwrap();
    faults.arm(Op::Sync, 0, Injected::Eio);
    faults.arm_on(Op::Create, UNSYNCED_MARK, 0, Injected::NoSpace);
    drop(log);
    assert!(faults.all_fired());
    assert!(!own.exists());
    group.release();
    assert!(
        group_file.exists(),
        "kept: its bytes are covered by nothing else"
    );
}
