//! Read-only handles beside a writer: they see whole batches only, follow rolls and seals,
//! write nothing, and agree with the writer on every record they return.

#![allow(clippy::unwrap_used)]

use logbook_log::{Durability, Location, Log, LogConfig, Record};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn tiny() -> LogConfig {
    LogConfig {
        segment_bytes_max: 4096,
        durability: Durability::Sync,
        ..LogConfig::default()
    }
}

fn payload(batch: usize, i: usize) -> Vec<u8> {
    format!("batch {batch} record {i} ")
        .repeat(1 + (batch + i) % 9)
        .into_bytes()
}

/// Every record from the start: (location, kind, payload, ends its batch).
fn all(log: &Log) -> Vec<(Location, u8, Vec<u8>, bool)> {
    log.scan(log.start())
        .map(|r| {
            let (l, rec, last) = r.unwrap();
            (l, rec.kind, rec.payload.to_vec(), last)
        })
        .collect()
}

/// The names and lengths of the files in `dir`.
fn listing(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect()
}

#[test]
fn a_reader_follows_a_writer_through_rolls_and_seals() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("log");
    let writer = Arc::new(Log::create(&dir, tiny()).unwrap());
    let reader = Log::open_read_only(&dir, tiny(), None).unwrap();
    assert!(reader.is_read_only());
    assert_eq!(reader.end(), writer.end());
    let done = Arc::new(AtomicBool::new(false));
    let w = {
        let (writer, done) = (Arc::clone(&writer), Arc::clone(&done));
        std::thread::spawn(move || {
            for b in 0..400 {
                let records: Vec<Vec<u8>> = (0..1 + b % 3).map(|i| payload(b, i)).collect();
                let batch: Vec<Record<'_>> = records
                    .iter()
                    .map(|p| Record {
                        kind: 1 + (b % 2) as u8,
                        payload: p,
                    })
                    .collect();
                writer.append(&batch).unwrap();
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut seen = 0usize;
    loop {
        let finished = done.load(Ordering::Acquire);
        reader.refresh().unwrap();
        let got = all(&reader);
        // Whole batches only, and never fewer records than before.
        assert!(
            got.last().is_none_or(|r| r.3),
            "a reader ends on a batch end"
        );
        assert!(got.len() >= seen);
        seen = got.len();
        if finished {
            break;
        }
    }
    w.join().unwrap();
    reader.refresh().unwrap();
    assert_eq!(writer.wait_for_sealing(), None);
    assert_eq!(reader.end(), writer.end());
    assert_eq!(all(&reader), all(&writer));
    assert!(
        !writer.sealed_segment_paths().is_empty(),
        "the writer rolled and sealed"
    );
    // A read-only handle refuses appends and changes no file, also when dropped.
    assert!(reader
        .append(&[Record {
            kind: 1,
            payload: b"x"
        }])
        .is_err());
    drop(writer);
    let before = listing(&dir);
    let again = Log::open_read_only(&dir, tiny(), None).unwrap();
    assert_eq!(again.end(), reader.end());
    assert_eq!(all(&again), all(&reader));
    assert!(!again.refresh().unwrap(), "nothing new");
    drop(again);
    drop(reader);
    assert_eq!(listing(&dir), before, "readers changed no file");
}

#[test]
fn a_reader_ignores_a_torn_batch_and_takes_it_once_whole() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("log");
    let writer = Log::create(&dir, LogConfig::default()).unwrap();
    writer
        .append(&[Record {
            kind: 1,
            payload: b"first",
        }])
        .unwrap();
    let end = writer.end();
    writer
        .append(&[
            Record {
                kind: 1,
                payload: b"second a",
            },
            Record {
                kind: 1,
                payload: b"second b",
            },
        ])
        .unwrap();
    let whole = writer.end();
    drop(writer);
    // Tear the second batch: keep its first frame only (as a writer caught mid-write).
    let seg = dir.join(format!("{:020}.active", end.segment));
    let bytes = std::fs::read(&seg).unwrap();
    let first_frame = 24 + b"second a".len() as u64;
    std::fs::write(&seg, &bytes[..(end.offset + first_frame) as usize]).unwrap();
    let reader = Log::open_read_only(&dir, LogConfig::default(), None).unwrap();
    assert_eq!(reader.end(), end, "the torn batch is not data");
    assert_eq!(all(&reader).len(), 1);
    assert_eq!(
        std::fs::read(&seg).unwrap().len() as u64,
        end.offset + first_frame,
        "nothing was cut"
    );
    // The batch completes: the next refresh takes it.
    std::fs::write(&seg, &bytes[..whole.offset as usize]).unwrap();
    assert!(reader.refresh().unwrap());
    assert_eq!(reader.end(), whole);
    let got = all(&reader);
    assert_eq!(got.len(), 3);
    assert_eq!(got[2].2, b"second b");
}

#[test]
fn a_reader_opens_a_closed_sealed_log_and_follows_its_reopen() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("log");
    let writer = Log::create(&dir, LogConfig::default()).unwrap();
    for i in 0..50 {
        writer
            .append(&[Record {
                kind: 1,
                payload: &payload(i, 0),
            }])
            .unwrap();
    }
    writer.seal_when_closed(1);
    drop(writer);
    logbook_log::settle_closed_seals(d.path(), std::time::Duration::from_secs(10));
    assert!(listing(&dir).keys().any(|n| n.ends_with(".sealed")));
    let reader = Log::open_read_only(&dir, LogConfig::default(), None).unwrap();
    assert_eq!(all(&reader).len(), 50);
    // The writer opens again (a new segment after the sealed one) and appends.
    let (writer, _) = Log::open(&dir, LogConfig::default()).unwrap();
    writer
        .append(&[Record {
            kind: 1,
            payload: b"after the reopen",
        }])
        .unwrap();
    assert!(reader.refresh().unwrap());
    assert_eq!(all(&reader), all(&writer));
    assert_eq!(all(&reader).last().unwrap().2, b"after the reopen");
}

/// `read_logical` hands out the logical stream byte for byte: the active file's bytes while a
/// segment is active, the same bytes decompressed once it is sealed; a rebuilt active file of
/// the header and those bytes opens as the same log.
#[test]
fn read_logical_is_the_logical_stream() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let log = Log::create(&path, tiny()).unwrap();
    for b in 0..200 {
        let p = payload(b, 0);
        log.append(&[Record {
            kind: 1,
            payload: &p,
        }])
        .unwrap();
    }
    let reader = Log::open_read_only(&path, tiny(), None).unwrap();
    let segments: Vec<u64> = reader.segment_numbers().collect();
    assert!(segments.len() > 2, "the tiny segments rolled");
    let newest = *segments.last().unwrap();
    let end = reader.segment_end(newest).unwrap();
    let mut tail = vec![0u8; (end - 32) as usize];
    reader.read_logical(newest, 32, &mut tail).unwrap();
    let file = std::fs::read(path.join(format!("{newest:020}.active"))).unwrap();
    assert_eq!(&file[32..end as usize], &tail[..]);
    assert_eq!(&file[..32], &logbook_log::active_segment_header(newest)[..]);
    assert!(
        reader.read_logical(newest, 0, &mut [0u8; 4]).is_err(),
        "the header is not records"
    );
    assert!(
        reader.read_logical(newest, end - 2, &mut [0u8; 4]).is_err(),
        "past the end"
    );
    log.wait_for_sealing();
    // A sealed segment read through a fresh handle: decompressed, the same frames.
    let again = Log::open_read_only(&path, tiny(), None).unwrap();
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for n in segments {
        let len = again.segment_end(n).unwrap();
        let mut bytes = logbook_log::active_segment_header(n).to_vec();
        bytes.resize(len as usize, 0);
        again.read_logical(n, 32, &mut bytes[32..]).unwrap();
        std::fs::write(copy.join(format!("{n:020}.active")), bytes).unwrap();
    }
    let (rebuilt, recovery) = Log::open(&copy, tiny()).unwrap();
    assert_eq!(recovery.cut_bytes, 0);
    assert_eq!(all(&rebuilt), all(&log));
    assert_eq!(rebuilt.verify().unwrap().records, 200);
}
