//! What one log costs when a process keeps many (a Root of thousands of Sessions, each with
//! its own log): bytes on disk that follow what the log holds, and sealer threads bounded
//! by [`SEALER_THREADS_MAX`] however many logs are open.

#![allow(clippy::unwrap_used)]

use logbook_log::{
    Durability, Log, LogConfig, Record, PREALLOCATE_BYTES, PREALLOCATE_FIRST_BYTES,
    SEALER_THREADS_MAX,
};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What an empty log may cost on disk, open or closed (the target per Session).
const EMPTY_LOG_DISK_BYTES_MAX: u64 = 16 << 10;

/// The tests here count the process's sealer threads, which every log shares: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Bytes allocated on disk for the files of `dir` (not their lengths: a zero region counts
/// here only where it was written).
fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

fn active_path(dir: &Path, n: u64) -> std::path::PathBuf {
    dir.join(format!("{n:020}.active"))
}

fn active_len(dir: &Path, n: u64) -> u64 {
    std::fs::metadata(active_path(dir, n)).unwrap().len()
}

/// Threads of this process named like the log's sealers.
fn sealer_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        // The kernel keeps the first 15 bytes of a thread's name.
        .filter(|name| name.trim_end() == &"logbook-log-sealer"[..15])
        .count()
}

fn rec(p: &[u8]) -> [Record<'_>; 1] {
    [Record {
        kind: 1,
        payload: p,
    }]
}

#[test]
fn an_empty_log_costs_at_most_16_kib_open_and_one_block_closed() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let log = Log::create(&d, LogConfig::default()).unwrap();
    let open = disk_bytes(&d);
    assert!(
        open <= EMPTY_LOG_DISK_BYTES_MAX,
        "open and empty: {open} bytes"
    );
    drop(log);
    let closed = disk_bytes(&d);
    assert_eq!(active_len(&d, 0), 32, "closed: the header only");
    assert!(closed <= 4096, "closed and empty: {closed} bytes");

    let (log, rec0) = Log::open(&d, LogConfig::default()).unwrap();
    assert_eq!(rec0.cut_bytes, 0);
    log.append(&rec(b"one small append")).unwrap();
    drop(log);
    assert_eq!(
        active_len(&d, 0),
        32 + 24 + 16,
        "closed: ends at its last batch"
    );
    let one = disk_bytes(&d);
    assert!(one <= 4096, "one small record, closed: {one} bytes");
    let (log, recovery) = Log::open(&d, LogConfig::default()).unwrap();
    assert_eq!(
        recovery.cut_bytes, 0,
        "a file ending at its last batch is clean"
    );
    assert_eq!(recovery.tail_records, 1);
    assert_eq!(log.verify().unwrap().records, 1);
    println!("empty log: {open} bytes on disk open, {closed} closed; one record closed: {one}");
}

/// The zero region starts at [`PREALLOCATE_FIRST_BYTES`] and each extension doubles the one
/// before, up to [`PREALLOCATE_BYTES`]: a busy log extends its file a few times, not once
/// per small step.
#[test]
fn the_zero_region_doubles_with_the_write_rate_and_is_given_back() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    // A full step of 512 KiB instead of PREALLOCATE_BYTES keeps the test short (every append
    // is an fdatasync); the rule is the same.
    let full = 512 << 10;
    let config = LogConfig {
        preallocate_bytes: full,
        ..LogConfig::default()
    };
    let log = Log::create(&d, config.clone()).unwrap();
    assert_eq!(active_len(&d, 0), PREALLOCATE_FIRST_BYTES);
    let payload = vec![7u8; 4000];
    let mut lens = vec![active_len(&d, 0)];
    let mut appended = 0u64;
    // Past the point where the step reaches the full step.
    while appended < 2 * full + (1 << 20) {
        log.append(&rec(&payload)).unwrap();
        appended += 24 + payload.len() as u64;
        let len = active_len(&d, 0);
        if len != *lens.last().unwrap() {
            lens.push(len);
        }
    }
    let steps: Vec<u64> = lens.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(steps.len() <= 10, "few extensions: {lens:?}");
    // An extension adds the step after the batch that needed it, page aligned: it is within
    // a batch and a page of the step.
    let slack = 4096 + 24 + payload.len() as u64;
    for w in steps.windows(2) {
        let want = (w[0] * 2).min(full);
        assert!(
            w[1] + 2 * slack >= want && w[1] <= want + 2 * slack,
            "steps {steps:?}"
        );
    }
    assert!(steps[0] <= 2 * PREALLOCATE_FIRST_BYTES + slack, "{steps:?}");
    assert!(steps.iter().all(|s| *s <= full + slack), "{steps:?}");
    assert!(
        steps.iter().filter(|s| **s + slack >= full).count() >= 2,
        "{steps:?}"
    );
    let end = log.end();
    assert!(active_len(&d, 0) > end.offset, "a zero region is ahead");
    drop(log);
    assert_eq!(
        active_len(&d, 0),
        end.offset,
        "dropped: the zeros are given back"
    );
    let (log, recovery) = Log::open(&d, config).unwrap();
    assert_eq!(recovery.cut_bytes, 0);
    assert_eq!(log.end(), end);
    // After a reopen the first batch extends the file without zeros (a log appended to once
    // and closed writes, syncs and gives back none); the region starts small again with the
    // second, and appends keep working.
    log.append(&rec(b"after reopen")).unwrap();
    let first = log.end();
    assert_eq!(active_len(&d, 0), first.offset, "no zeros after one batch");
    log.append(&rec(b"and again")).unwrap();
    let len = active_len(&d, 0);
    assert!(
        len > log.end().offset && len <= first.offset + 4096 + PREALLOCATE_FIRST_BYTES,
        "{len}"
    );
    println!("file lengths as the region grew: {lens:?}");
}

/// Giving the zeros back at close is no activity: the file keeps the time of its last append
/// (a reader beside the writer lists Sessions by that time).
#[test]
fn giving_the_zeros_back_keeps_the_time_of_the_last_append() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let log = Log::create(&d, LogConfig::default()).unwrap();
    log.append(&rec(b"the last append")).unwrap();
    let end = log.end();
    assert!(active_len(&d, 0) > end.offset, "a zero region is ahead");
    let path = active_path(&d, 0);
    let written = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::thread::sleep(Duration::from_millis(30));
    drop(log);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), end.offset, "the zeros are given back");
    assert_eq!(meta.modified().unwrap(), written);
}

/// A file of the previous build (version 2, a 4 MiB zero region kept on close) still opens
/// clean, takes appends, and is given its zeros back on close.
#[test]
fn a_file_with_the_old_4_mib_zero_region_opens_and_is_trimmed_on_close() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let log = Log::create(&d, LogConfig::default()).unwrap();
    log.append(&rec(b"written by the old build")).unwrap();
    drop(log);
    let logical = active_len(&d, 0);
    // What the previous build left: the zero region of PREALLOCATE_BYTES after the frames.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join(format!("{:020}.active", 0)))
        .unwrap();
    f.set_len(logical + PREALLOCATE_BYTES).unwrap();
    drop(f);
    let (log, recovery) = Log::open(&d, LogConfig::default()).unwrap();
    assert_eq!(
        recovery.cut_bytes, 0,
        "zeros after the last batch are clean"
    );
    assert_eq!(log.end().offset, logical);
    log.append(&rec(b"written by this build")).unwrap();
    let end = log.end();
    assert_eq!(
        active_len(&d, 0),
        logical + PREALLOCATE_BYTES,
        "the record went into the zeros found"
    );
    drop(log);
    assert_eq!(active_len(&d, 0), end.offset);
    let (log, _) = Log::open(&d, LogConfig::default()).unwrap();
    assert_eq!(log.verify().unwrap().records, 2);
}

/// Open logs without sealing to do have no thread; sealing many logs at once uses at most
/// [`SEALER_THREADS_MAX`] threads, which are gone once the work is done. Every rolled
/// segment is still sealed, and drop still waits for its log's seals.
#[test]
fn sealer_threads_are_bounded_and_only_exist_while_sealing() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes_max: 4 << 10,
        // Rolls sync in every mode; bulk import keeps the test short.
        durability: Durability::NoSyncBulkImport,
        ..LogConfig::default()
    };
    const LOGS: usize = 64;
    let logs: Vec<Log> = (0..LOGS)
        .map(|i| Log::create(&tmp.path().join(format!("l{i}")), config.clone()).unwrap())
        .collect();
    assert_eq!(sealer_threads(), 0, "{LOGS} idle logs, no sealer thread");
    // A watcher counts the sealer threads while the logs roll.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut most = 0;
            while !stop.load(Ordering::Relaxed) {
                most = most.max(sealer_threads());
                std::thread::sleep(Duration::from_micros(200));
            }
            most
        })
    };
    let payload = vec![3u8; 1000];
    for _ in 0..12 {
        for log in &logs {
            log.append(&rec(&payload)).unwrap();
        }
    }
    // Half are dropped right away (drop waits for their seals), half waited for.
    let mut sealed = 0;
    for (i, log) in logs.into_iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(log.wait_for_sealing(), None);
            sealed += log.sealed_segment_paths().len();
        }
        let dir = log.dir().to_path_buf();
        drop(log);
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let active = names.iter().filter(|n| n.ends_with(".active")).count();
        assert_eq!(
            active, 1,
            "every rolled segment was sealed by drop: {names:?}"
        );
    }
    assert!(sealed >= LOGS / 2, "{sealed}");
    stop.store(true, Ordering::Relaxed);
    let most = watcher.join().unwrap();
    // At most SEALER_THREADS_MAX threads are in the pool; a thread that has just left it
    // (queue empty) is still listed by the kernel until it has returned, so the count seen
    // from outside may include such leaving threads too.
    assert!(most <= 2 * SEALER_THREADS_MAX, "{most} sealer threads");
    assert!(most >= 1, "sealing ran on a sealer thread");
    let deadline = Instant::now() + Duration::from_secs(10);
    while sealer_threads() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(sealer_threads(), 0, "the sealers exit when no work is left");
    println!("{LOGS} logs sealing at once: at most {most} sealer threads seen");
}

/// A log opened again while an older handle on the same directory is alive (the engine
/// reopens a failed Session while calls still hold the old one): dropping the older handle
/// must not give back the zero region the newer one has written into.
#[test]
fn dropping_an_older_handle_leaves_a_newer_ones_records_alone() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let old = Log::create(&d, LogConfig::default()).unwrap();
    old.append(&rec(b"by the old handle")).unwrap();
    let (new, _) = Log::open(&d, LogConfig::default()).unwrap();
    new.append(&rec(b"by the new handle")).unwrap();
    let end = new.end();
    drop(old);
    assert!(
        active_len(&d, 0) > end.offset,
        "the older handle truncated nothing"
    );
    drop(new);
    assert_eq!(
        active_len(&d, 0),
        end.offset,
        "the newest handle gives the zeros back"
    );
    let (log, recovery) = Log::open(&d, LogConfig::default()).unwrap();
    assert_eq!(recovery.cut_bytes, 0);
    assert_eq!(log.verify().unwrap().records, 2);
}

/// A new log with its first batch: the batch is written with the header (one fdatasync for
/// both), read back after a reopen, and appends go on after it with a zero region as usual.
#[test]
fn a_log_created_with_its_first_batch_holds_it_and_takes_appends() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let first = [
        Record {
            kind: 1,
            payload: b"first record",
        },
        Record {
            kind: 2,
            payload: b"second",
        },
    ];
    let (log, locs) = Log::create_with_first(&d, LogConfig::default(), &first).unwrap();
    assert_eq!(locs.len(), 2);
    assert_eq!(log.read(locs[0]).unwrap().payload, b"first record");
    assert_eq!(log.read(locs[1]).unwrap().kind, 2);
    assert!(
        disk_bytes(&d) <= EMPTY_LOG_DISK_BYTES_MAX,
        "a zero region of the first step"
    );
    let third = log.append(&rec(b"third")).unwrap()[0];
    assert!(third > locs[1]);
    drop(log);
    let (log, recovery) = Log::open(&d, LogConfig::default()).unwrap();
    assert_eq!(recovery.cut_bytes, 0);
    let payloads: Vec<Vec<u8>> = log
        .scan(log.start())
        .map(|r| r.unwrap().1.payload)
        .collect();
    assert_eq!(
        payloads,
        [
            b"first record".to_vec(),
            b"second".to_vec(),
            b"third".to_vec()
        ]
    );
    assert_eq!(log.verify().unwrap().records, 3);
    // Without preallocation the file ends at the batch.
    let d2 = tmp.path().join("l2");
    let cfg = LogConfig {
        preallocate_bytes: 0,
        ..LogConfig::default()
    };
    drop(Log::create_with_first(&d2, cfg, &first[..1]).unwrap());
    assert_eq!(active_len(&d2, 0), 32 + 24 + 12);
    // A batch `append` would refuse is refused before anything is made.
    let huge = vec![0u8; (logbook_log::RECORD_PAYLOAD_BYTES_MAX + 1) as usize];
    let d3 = tmp.path().join("l3");
    let e = Log::create_with_first(
        &d3,
        LogConfig::default(),
        &[Record {
            kind: 1,
            payload: &huge,
        }],
    )
    .unwrap_err();
    assert!(e.to_string().contains("RECORD_PAYLOAD_BYTES_MAX"), "{e}");
    assert!(!d3.exists());
}
