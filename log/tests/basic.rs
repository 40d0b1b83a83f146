//! Round trips, reopen, roll and sealing, format refusal, argument checks.

#![allow(clippy::unwrap_used)]

use logbook_log::{Durability, ErrorKind, Location, Log, LogConfig, LogError, Record, Scan};
use std::path::Path;

fn tiny(durability: Durability) -> LogConfig {
    LogConfig {
        segment_bytes_max: 300,
        durability,
        ..LogConfig::default()
    }
}

fn payload(i: usize) -> Vec<u8> {
    format!("record number {i} ").repeat(1 + i % 7).into_bytes()
}

/// A log at `d` of `n` single-record batches (`payload(0..n)`, kind 1), every rolled
/// segment sealed, closed.
fn sealed_log(d: &Path, durability: Durability, n: usize) -> Vec<Location> {
    let log = Log::create(d, tiny(durability)).unwrap();
    let locs = (0..n)
        .map(|i| {
            log.append(&[Record {
                kind: 1,
                payload: &payload(i),
            }])
            .unwrap()[0]
        })
        .collect();
    assert_eq!(log.wait_for_sealing(), None);
    locs
}

fn all(log: &Log) -> Vec<(Location, u8, Vec<u8>, bool)> {
    records(log.scan(log.start()))
}

/// What `scan` yields, as `(location, kind, payload, is_last_of_its_batch)`.
fn records(scan: Scan<'_>) -> Vec<(Location, u8, Vec<u8>, bool)> {
    scan.map(|r| {
        let (l, rec, last) = r.expect("scan");
        (l, rec.kind, rec.payload, last)
    })
    .collect()
}

#[test]
fn round_trip_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("log");
    let log = Log::create(&d, LogConfig::default()).unwrap();
    assert_eq!(log.start(), log.end());
    assert_eq!(log.scan(log.start()).count(), 0);
    let a = log
        .append(&[Record {
            kind: 1,
            payload: b"one",
        }])
        .unwrap();
    let b = log
        .append(&[
            Record {
                kind: 2,
                payload: b"two",
            },
            Record {
                kind: 3,
                payload: b"",
            },
        ])
        .unwrap();
    assert_eq!(a[0], log.start());
    assert!(b[0] > a[0] && b[1] > b[0] && log.end() > b[1]);
    assert_eq!(log.read(b[0]).unwrap().payload, b"two");
    assert_eq!(log.read(b[1]).unwrap().kind, 3);
    let before = all(&log);
    assert_eq!(before.len(), 3);
    assert_eq!(
        before.iter().map(|r| r.3).collect::<Vec<_>>(),
        [true, false, true]
    );
    let end = log.end();
    drop(log);
    let (log, rec) = Log::open(&d, LogConfig::default()).unwrap();
    assert_eq!(rec.cut_bytes, 0);
    assert_eq!(rec.tail_records, 3);
    assert_eq!(log.end(), end);
    assert_eq!(all(&log), before);
    let c = log
        .append(&[Record {
            kind: 9,
            payload: b"after",
        }])
        .unwrap();
    assert_eq!(c[0], end);
    // scan from the middle, and from the end
    assert_eq!(log.scan(b[1]).count(), 2);
    assert_eq!(log.scan(log.end()).count(), 0);
    let v = log.verify().unwrap();
    assert_eq!((v.records, v.batches, v.segments), (4, 3, 1));
}

#[test]
fn rolls_seal_and_keep_locations() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("log");
    for durability in [Durability::Sync, Durability::NoSyncBulkImport] {
        let d = d.join(format!("{durability:?}"));
        let log = Log::create(&d, tiny(durability)).unwrap();
        let mut locs = Vec::new();
        for i in 0..200 {
            let p = payload(i);
            let l = log
                .append(&[Record {
                    kind: (i % 250) as u8,
                    payload: &p,
                }])
                .unwrap();
            locs.push(l[0]);
        }
        assert_eq!(log.wait_for_sealing(), None);
        let sealed = log.sealed_segment_paths();
        assert!(sealed.len() > 10, "tiny segments roll: {}", sealed.len());
        for (i, l) in locs.iter().enumerate() {
            assert_eq!(
                log.read(*l).unwrap().payload,
                payload(i),
                "record {i} at {l:?}"
            );
        }
        let end = log.end();
        drop(log);
        let (log, rec) = Log::open(&d, tiny(durability)).unwrap();
        assert_eq!(rec.cut_bytes, 0);
        assert_eq!(rec.sealed_segments as usize, sealed.len());
        assert_eq!(log.end(), end);
        let got = all(&log);
        assert_eq!(got.len(), 200);
        for (i, r) in got.iter().enumerate() {
            assert_eq!((r.0, &r.2), (locs[i], &payload(i)));
        }
        let v = log.verify().unwrap();
        assert_eq!(v.records, 200);
        assert!(v.blocks as usize >= sealed.len());
    }
}

#[test]
fn large_records_span_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("log");
    let cfg = LogConfig {
        segment_bytes_max: 24 << 10,
        durability: Durability::NoSyncBulkImport,
        ..LogConfig::default()
    };
    let log = Log::create(&d, cfg.clone()).unwrap();
    let big: Vec<Vec<u8>> = (0..12u32)
        .map(|i| {
            (0..200_000u32)
                .map(|j| ((j * 31 + i) % 251) as u8)
                .collect()
        })
        .collect();
    let mut locs = Vec::new();
    for b in &big {
        locs.push(
            log.append(&[Record {
                kind: 7,
                payload: b,
            }])
            .unwrap()[0],
        );
    }
    log.sync().unwrap();
    drop(log);
    let (log, _) = Log::open(&d, cfg).unwrap();
    log.wait_for_sealing();
    assert!(!log.sealed_segment_paths().is_empty());
    for (l, b) in locs.iter().zip(&big) {
        assert_eq!(&log.read(*l).unwrap().payload, b);
    }
    log.verify().unwrap();
}

#[test]
fn create_refuses_non_empty_and_open_refuses_missing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x"), b"x").unwrap();
    let e = Log::create(dir.path(), LogConfig::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let e = Log::open(&dir.path().join("nope"), LogConfig::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = Log::open(dir.path(), LogConfig::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[test]
fn bad_arguments_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::create(&dir.path().join("l"), LogConfig::default()).unwrap();
    assert_eq!(
        log.append(&[]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let e = log.read(log.end()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let past = Location {
        segment: 5,
        offset: 32,
    };
    assert!(log.scan(past).next().unwrap().is_err());
    let at = log
        .append(&[Record {
            kind: 0,
            payload: b"abc",
        }])
        .unwrap()[0];
    let wrong = Location {
        offset: at.offset + 1,
        ..at
    };
    assert!(log.read(wrong).is_err());
    let e = Log::create(
        &dir.path().join("m"),
        LogConfig {
            segment_bytes_max: 1,
            durability: Durability::Sync,
            ..LogConfig::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

fn only_file(d: &Path, suffix: &str) -> std::path::PathBuf {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .unwrap()
}

#[test]
fn foreign_and_newer_files_are_refused_by_name() {
    for sealed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("l");
        let log = Log::create(&d, tiny(Durability::Sync)).unwrap();
        for i in 0..20 {
            log.append(&[Record {
                kind: 1,
                payload: &payload(i),
            }])
            .unwrap();
        }
        log.wait_for_sealing();
        drop(log);
        let f = only_file(&d, if sealed { ".sealed" } else { ".active" });
        let orig = std::fs::read(&f).unwrap();
        // Active segments are at version 2 (version 1 is still read), sealed ones at 1.
        let current: u32 = if sealed { 1 } else { 2 };
        // An active segment is refused at open; a sealed one, listed only at open, by the first
        // read touching it (a scan from the start) and by verify, with the same error.
        let refused = |d: &Path| -> LogError {
            if !sealed {
                return Log::open(d, tiny(Durability::Sync)).unwrap_err();
            }
            let (log, _) = Log::open(d, tiny(Durability::Sync)).unwrap();
            let scanned = log.scan(log.start()).find_map(Result::err).unwrap();
            let verified = log.verify().unwrap_err();
            assert_eq!(scanned.to_string(), verified.to_string());
            verified
        };
        let mut newer = orig.clone();
        newer[8..12].copy_from_slice(&(current + 1).to_le_bytes());
        std::fs::write(&f, &newer).unwrap();
        let e = refused(&d);
        assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
        assert!(
            matches!(
                &e,
                LogError::UnsupportedFormat { found, expected, .. }
                    if *found == current + 1 && *expected == current
            ),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&f.display().to_string()) && msg.contains(&(current + 1).to_string()),
            "{msg}"
        );
        let mut foreign = orig.clone();
        foreign[0..8].copy_from_slice(b"SQLite f");
        std::fs::write(&f, &foreign).unwrap();
        let e = refused(&d);
        assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
        assert!(e.to_string().contains(&f.display().to_string()));
        std::fs::write(&f, &orig).unwrap();
        let (log, _) = Log::open(&d, tiny(Durability::Sync)).unwrap();
        log.verify().unwrap();
    }
}

#[test]
fn concurrent_appenders_and_readers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let log = std::sync::Arc::new(
        Log::create(
            &d,
            LogConfig {
                segment_bytes_max: 4096,
                durability: Durability::Sync,
                ..LogConfig::default()
            },
        )
        .unwrap(),
    );
    let mut handles = Vec::new();
    for t in 0..6u8 {
        let log = log.clone();
        handles.push(std::thread::spawn(move || {
            let mut mine = Vec::new();
            for i in 0..60u32 {
                let p = format!("t{t} i{i}").into_bytes();
                let l = log
                    .append(&[
                        Record {
                            kind: t,
                            payload: &p,
                        },
                        Record {
                            kind: t,
                            payload: &p,
                        },
                    ])
                    .unwrap();
                assert!(log.end() > l[1], "an acknowledged batch is published");
                assert_eq!(log.read(l[0]).unwrap().payload, p);
                mine.push((l[0], p));
            }
            mine
        }));
    }
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || {
            for _ in 0..50 {
                let got: Vec<_> = log.scan(log.start()).collect::<Result<_, _>>().unwrap();
                assert_eq!(got.len() % 2, 0, "scans see whole batches only");
                assert!(
                    got.last().is_none_or(|r| r.2),
                    "the last record seen ends a batch"
                );
            }
        })
    };
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    reader.join().unwrap();
    assert_eq!(log.scan(log.start()).count(), 6 * 60 * 2);
    for (l, p) in all {
        assert_eq!(log.read(l).unwrap().payload, p);
    }
}

#[test]
fn open_does_not_read_sealed_bodies_but_verify_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    sealed_log(&d, Durability::NoSyncBulkImport, 50);
    let victim = log_files(&d, ".sealed").remove(2);
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[40] ^= 0x10; // inside block 0's compressed bytes
    std::fs::write(&victim, &bytes).unwrap();
    let (log, rec) = Log::open(&d, tiny(Durability::Sync)).unwrap();
    assert_eq!(rec.cut_bytes, 0);
    let e = log.verify().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let msg = e.to_string();
    assert!(
        msg.contains(&victim.display().to_string()) && msg.contains("offset 32"),
        "{msg}"
    );
    // a scan stops at the damage with the same error instead of skipping it
    let results: Vec<_> = log.scan(log.start()).collect();
    let first_err = results.iter().position(Result::is_err).unwrap();
    assert_eq!(
        first_err + 1,
        results.len(),
        "nothing is returned after the damage"
    );
}

fn log_files(d: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn log_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Log>();
    check::<LogError>();
}

/// Rewrites the header of an active segment as format version 1 wrote it.
fn make_version_1(path: &Path) {
    let mut b = std::fs::read(path).unwrap();
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32fast::hash(&b[0..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, &b).unwrap();
}

/// A log written by format version 1 (no zero region) opens, keeps taking appends without
/// preallocating into its old segment, and rolls into version 2 segments. In a version 1
/// segment zeros after the last batch are still a torn tail (cut, with a copy).
#[test]
fn version_1_segments_open_and_keep_their_rules() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let c = LogConfig {
        segment_bytes_max: 4096,
        durability: Durability::Sync,
        preallocate_bytes: 0,
        ..LogConfig::default()
    };
    let log = Log::create(&d, c).unwrap();
    for i in 0..3 {
        log.append(&[Record {
            kind: 1,
            payload: &payload(i),
        }])
        .unwrap();
    }
    drop(log);
    let seg = only_file(&d, ".active");
    make_version_1(&seg);
    let end = std::fs::metadata(&seg).unwrap().len();
    // Zeros after the last batch of a version 1 segment: torn, cut.
    let mut b = std::fs::read(&seg).unwrap();
    b.extend_from_slice(&[0u8; 100]);
    std::fs::write(&seg, &b).unwrap();
    let c = LogConfig {
        segment_bytes_max: 4096,
        ..LogConfig::default()
    };
    let (log, rec) = Log::open(&d, c.clone()).unwrap();
    assert_eq!(rec.cut_bytes, 100);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), end);
    // Appends to the old segment do not preallocate: the file stays exactly its frames.
    let at = log
        .append(&[Record {
            kind: 2,
            payload: b"v1 segment",
        }])
        .unwrap()[0];
    assert_eq!(at.segment, 0);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), log.end().offset);
    // The next segment is version 2, with its zero region.
    let mut i = 3;
    while log.end().segment == 0 {
        log.append(&[Record {
            kind: 3,
            payload: &payload(i),
        }])
        .unwrap();
        i += 1;
    }
    let newest = d.join("00000000000000000001.active");
    let b = std::fs::read(&newest).unwrap();
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 2);
    assert!(b.len() as u64 > log.end().offset, "preallocated");
    assert_eq!(log.wait_for_sealing(), None);
    let n = all(&log).len();
    drop(log);
    let (log, rec) = Log::open(&d, c).unwrap();
    assert_eq!(rec.cut_bytes, 0);
    assert_eq!(all(&log).len(), n);
    log.verify().unwrap();
}

#[test]
fn concurrent_first_reads_of_lazily_opened_sealed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let locs = sealed_log(&d, Durability::NoSyncBulkImport, 120);
    for round in 0..5 {
        // Every sealed segment is first touched by several threads at once, while appends go on.
        let (log, rec) = Log::open(&d, tiny(Durability::NoSyncBulkImport)).unwrap();
        assert!(rec.sealed_segments > 10);
        let log = std::sync::Arc::new(log);
        let mut handles = Vec::new();
        for t in 0..6usize {
            let log = std::sync::Arc::clone(&log);
            let locs = locs.clone();
            handles.push(std::thread::spawn(move || {
                // Half the threads read point-wise in different orders, half scan.
                if t % 2 == 0 {
                    for k in 0..locs.len() {
                        let i = (k * (t + 1) + round) % locs.len();
                        assert_eq!(log.read(locs[i]).unwrap().payload, payload(i));
                    }
                } else {
                    let got: Vec<_> = log
                        .scan(log.start())
                        .take(locs.len())
                        .map(|r| r.unwrap().1.payload)
                        .collect();
                    assert_eq!(got, (0..locs.len()).map(payload).collect::<Vec<_>>());
                }
            }));
        }
        log.append(&[Record {
            kind: 2,
            payload: b"while readers open sealed segments",
        }])
        .unwrap();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(log.verify().unwrap().records, 120 + round as u64 + 1);
    }
}

#[test]
fn a_damaged_sealed_file_beside_its_active_copy_is_refused_and_the_copy_kept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    sealed_log(&d, Durability::Sync, 30);
    // A crash between steps 2 and 3 of sealing leaves N.sealed beside N.active, and open
    // removes the active file only once the sealed one passed its checks. Whatever the active
    // file holds, it must survive a sealed file that fails them (here: its footer cut short).
    let sealed = log_files(&d, ".sealed").remove(1);
    let active = sealed.with_extension("active");
    let bytes = std::fs::read(&sealed).unwrap();
    std::fs::write(&sealed, &bytes[..bytes.len() - 1]).unwrap();
    std::fs::write(&active, b"the unsealed copy").unwrap();
    let e = Log::open(&d, tiny(Durability::Sync)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(e.to_string().contains(&sealed.display().to_string()), "{e}");
    assert_eq!(std::fs::read(&active).unwrap(), b"the unsealed copy");
}

#[test]
fn background_threads_run_at_lower_priority_and_only_they_do() {
    let nice = || rustix::process::getpriority_process(None).expect("getpriority");
    let before = nice();
    let inside = std::thread::spawn(move || {
        logbook_log::background_thread();
        nice()
    })
    .join()
    .unwrap();
    // Niceness is capped at 19.
    assert_eq!(
        inside,
        (before + logbook_log::BACKGROUND_NICENESS).min(19),
        "the background thread's niceness"
    );
    assert_eq!(
        nice(),
        before,
        "the calling thread's niceness must not change"
    );
}

#[test]
fn a_new_log_starts_only_in_an_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig::default();
    // Parents are made; an empty directory that is there already is taken.
    let deep = tmp.path().join("a/b/log");
    drop(Log::create(&deep, config.clone()).unwrap());
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    drop(Log::create(&empty, config.clone()).unwrap());
    // Anything in it (or a file at the name) is refused, and left as it was.
    let used = tmp.path().join("used");
    std::fs::create_dir(&used).unwrap();
    std::fs::write(used.join("stray"), b"x").unwrap();
    assert!(matches!(
        Log::create(&used, config.clone()),
        Err(LogError::NotEmpty { .. })
    ));
    assert!(matches!(
        Log::write_empty_unsynced(&used, &config),
        Err(LogError::NotEmpty { .. })
    ));
    assert_eq!(std::fs::read(used.join("stray")).unwrap(), b"x");
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(Log::create(&file, config).is_err());
}

#[test]
fn a_first_batch_goes_only_into_an_empty_log() {
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig::default();
    let dir = tmp.path().join("log");
    Log::write_empty_unsynced(&dir, &config).unwrap();
    let first = [Record {
        kind: 3,
        payload: b"first",
    }];
    let locs = Log::write_first_unsynced(&dir, &config, &first).unwrap();
    assert!(matches!(
        Log::write_first_unsynced(&dir, &config, &first),
        Err(LogError::NotEmpty { .. })
    ));
    let (log, _) = Log::open(&dir, config.clone()).unwrap();
    assert_eq!(all(&log), vec![(locs[0], 3, b"first".to_vec(), true)]);
    drop(log);
    // A log that is not there, or whose segment is not a log's, is refused.
    let missing = tmp.path().join("missing");
    assert!(Log::write_first_unsynced(&missing, &config, &first).is_err());
    std::fs::create_dir(&missing).unwrap();
    std::fs::write(missing.join("00000000000000000000.active"), [7u8; 32]).unwrap();
    assert!(Log::write_first_unsynced(&missing, &config, &first).is_err());
}

/// Whether this process maps any file of the directory `d`.
fn maps_under(d: &Path) -> bool {
    maps_named(d, "")
}

/// Whether this process maps a file of the directory `d` whose name holds `part`.
fn maps_named(d: &Path, part: &str) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let d = d.to_str().unwrap();
    maps.lines()
        .filter_map(|l| l.split_once(d))
        .any(|(_, name)| name.contains(part))
}

#[test]
fn a_short_scan_maps_nothing_and_reads_what_a_scan_reads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("short-scan-log");
    let log = Log::create(&d, LogConfig::default()).unwrap();
    for i in 0..20 {
        log.append(&[Record {
            kind: 1,
            payload: &payload(i),
        }])
        .unwrap();
    }
    drop(log);
    let (log, _) = Log::open(&d, LogConfig::default()).unwrap();
    let short = records(log.short_scan(log.start()));
    assert_eq!(short.len(), 20);
    assert!(!maps_under(&d), "a short scan mapped the active segment");
    // The same records as a scan, which maps the segment (so the check above can fail).
    assert_eq!(all(&log), short);
    assert!(
        maps_under(&d),
        "a scan reads the active segment through its map"
    );
    drop(log);
    assert!(!maps_under(&d));
}

#[test]
fn a_small_sealed_segment_is_read_without_a_map() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small-sealed-log");
    sealed_log(&small, Durability::NoSyncBulkImport, 12);
    let (log, _) = Log::open(&small, tiny(Durability::NoSyncBulkImport)).unwrap();
    let got = all(&log);
    assert_eq!(got.len(), 12);
    for (i, (_, kind, p, _)) in got.iter().enumerate() {
        assert_eq!((*kind, p), (1, &payload(i)));
    }
    assert!(
        !maps_named(&small, ".sealed"),
        "a small sealed file was mapped"
    );
    drop(log);
    // A sealed file past 16 KiB is opened through a map (so the check above can fail).
    let large = dir.path().join("large-sealed-log");
    let cfg = LogConfig {
        segment_bytes_max: 24 << 10,
        durability: Durability::NoSyncBulkImport,
        ..LogConfig::default()
    };
    let log = Log::create(&large, cfg.clone()).unwrap();
    let mut noise = 0x2545_f491_4f6c_dd1du64;
    let texts: Vec<Vec<u8>> = (0..40)
        .map(|_| {
            (0..1024)
                .map(|_| {
                    noise ^= noise << 13;
                    noise ^= noise >> 7;
                    noise ^= noise << 17;
                    noise as u8
                })
                .collect()
        })
        .collect();
    for t in &texts {
        log.append(&[Record {
            kind: 1,
            payload: t,
        }])
        .unwrap();
    }
    // Rolled at 24 KiB, so its first segments are sealed files of incompressible bytes.
    assert_eq!(log.wait_for_sealing(), None);
    drop(log);
    let (log, _) = Log::open(&large, cfg).unwrap();
    assert_eq!(all(&log).len(), 40);
    assert!(
        maps_named(&large, ".sealed"),
        "a large sealed file is opened through its map"
    );
}
