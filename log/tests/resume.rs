//! `Log::open_from`: resuming the tail check from a caller's durable mark. A good mark skips
//! the bytes before it; any wrong or stale mark falls back to the full check, and the outcome
//! (records, end, cut, errors) is always the same as a plain open's.

#![allow(clippy::unwrap_used)]

mod common;

use common::{copy_dir, fast_tempdir, files_ending, Rng};
use logbook_log::{Durability, ErrorKind, Location, Log, LogConfig, Record, Recovery};
use std::path::Path;

fn cfg() -> LogConfig {
    LogConfig {
        segment_bytes_max: 8 << 10,
        durability: Durability::Sync,
        ..LogConfig::default()
    }
}

/// Batches of 1-3 records over a few segments; returns every record's Location and whether it
/// ends its batch.
fn build(dir: &Path, rng: &mut Rng, batches: usize) -> Vec<(Location, bool)> {
    let log = Log::create(dir, cfg()).unwrap();
    let mut out = Vec::new();
    for b in 0..batches {
        let n = 1 + rng.below(3) as usize;
        let payloads: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = 20 + rng.below(200) as usize;
                rng.bytes(len)
            })
            .collect();
        let recs: Vec<Record<'_>> = payloads
            .iter()
            .map(|p| Record {
                kind: b as u8,
                payload: p,
            })
            .collect();
        let locs = log.append(&recs).unwrap();
        let last = locs.len() - 1;
        out.extend(locs.into_iter().enumerate().map(|(i, l)| (l, i == last)));
    }
    assert_eq!(log.wait_for_sealing(), None);
    out
}

type Outcome = Result<(Vec<(Location, Vec<u8>)>, Location, u64, Option<Vec<u8>>), ErrorKind>;

fn outcome(r: Result<(Log, Recovery), logbook_log::LogError>) -> (Outcome, Option<Recovery>) {
    match r {
        Err(e) => (Err(e.kind()), None),
        Ok((log, rec)) => {
            let all = log
                .scan(log.start())
                .map(|r| r.map(|(l, rec, _)| (l, rec.payload)))
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let copy = rec.cut_copy.as_ref().map(|p| std::fs::read(p).unwrap());
            let o = Ok((all, log.end(), rec.cut_bytes, copy));
            (o, Some(rec))
        }
    }
}

/// Opens copies of `orig` plainly and from `mark`; asserts the same outcome and returns whether
/// the mark was used.
fn compare(orig: &Path, scratch: &Path, mark: Location) -> bool {
    let a = scratch.join("plain");
    let b = scratch.join("marked");
    copy_dir(orig, &a);
    copy_dir(orig, &b);
    let (plain, _) = outcome(Log::open(&a, cfg()));
    let (marked, rec) = outcome(Log::open_from(&b, cfg(), mark));
    assert_eq!(plain, marked, "mark {mark:?}");
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
    let used = rec.and_then(|r| r.resumed_from);
    if let Some(m) = used {
        assert_eq!(m, mark);
    }
    used.is_some()
}

#[test]
fn a_good_mark_is_used_and_changes_nothing() {
    let mut rng = Rng::from_env("resume good");
    let dir = fast_tempdir();
    // The newest segment must hold a few records to resume inside it: a roll just before
    // the last batch leaves it nearly empty, so build again, longer, when that happens.
    let (mut orig, mut recs, mut batches) = (dir.path().join("orig-80"), Vec::new(), 80);
    for _ in 0..20 {
        orig = dir.path().join(format!("orig-{batches}"));
        recs = build(&orig, &mut rng, batches);
        let newest = recs.last().unwrap().0.segment;
        if recs.iter().filter(|(l, _)| l.segment == newest).count() > 2 {
            break;
        }
        batches += 3;
    }
    let newest = recs.last().unwrap().0.segment;
    assert!(newest > 1, "several segments");
    let mut used = 0;
    for (loc, _) in recs.iter().filter(|(l, _)| l.segment == newest) {
        assert!(
            compare(&orig, dir.path(), *loc),
            "{loc:?} is a record of the newest segment"
        );
        used += 1;
    }
    assert!(used > 2);
    // Only the records from the mark on were walked.
    let mark = recs.iter().find(|(l, _)| l.segment == newest).unwrap().0;
    let (log, rec) = Log::open_from(&orig, cfg(), mark).unwrap();
    let from_mark = recs.iter().filter(|(l, _)| *l >= mark).count() as u64;
    assert_eq!(rec.tail_records, from_mark);
    assert_eq!(rec.resumed_from, Some(mark));
    log.verify().unwrap();
}

#[test]
fn wrong_and_stale_marks_fall_back_to_the_full_check() {
    let mut rng = Rng::from_env("resume wrong");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    let recs = build(&orig, &mut rng, 60);
    let newest = recs.last().unwrap().0.segment;
    let first_new = recs.iter().find(|(l, _)| l.segment == newest).unwrap().0;
    let end = {
        let (log, _) = Log::open(&orig, cfg()).unwrap();
        log.end()
    };
    let sealed = recs[3].0;
    assert!(sealed.segment < newest);
    let wrong = [
        Location {
            offset: first_new.offset + 1,
            ..first_new
        },
        Location {
            offset: first_new.offset + 24,
            ..first_new
        },
        Location {
            offset: 0,
            ..first_new
        },
        Location {
            offset: 31,
            ..first_new
        },
        end,
        Location {
            offset: end.offset + 7,
            ..end
        },
        Location {
            offset: u64::MAX,
            ..end
        },
        Location {
            segment: newest + 1,
            offset: 32,
        },
        Location {
            segment: u64::MAX,
            offset: 32,
        },
        // a record of an older (sealed) segment: the newest is walked in full, as it must be
        sealed,
        Location {
            offset: sealed.offset,
            segment: newest,
        },
    ];
    for m in wrong {
        let used = compare(&orig, dir.path(), m);
        let is_frame = recs.iter().any(|(l, _)| *l == m);
        assert!(!used || is_frame, "{m:?} must not be trusted");
        if m.segment != newest || !is_frame {
            assert!(!used, "{m:?}");
        }
    }
}

#[test]
fn a_mark_before_a_torn_or_damaged_tail_gives_the_full_verdict() {
    let mut rng = Rng::from_env("resume torn");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    let recs = build(&orig, &mut rng, 40);
    let newest = recs.last().unwrap().0.segment;
    let active = files_ending(&orig, ".active").pop().unwrap();
    let name = active.file_name().unwrap().to_owned();
    let file = std::fs::read(&active).unwrap();
    let marks: Vec<Location> = recs
        .iter()
        .filter(|(l, _)| l.segment == newest)
        .map(|(l, _)| *l)
        .collect();
    let end = recs.last().unwrap().0.offset as usize + 24;
    let t = dir.path().join("torn");
    for trial in 0..80 {
        let mut bytes = file.clone();
        let mark = marks[rng.below(marks.len() as u64) as usize];
        let m = mark.offset as usize;
        match trial % 4 {
            // torn: the file ends inside the frames after the mark
            0 => bytes.truncate(m + rng.below((end - m) as u64) as usize),
            // a flipped bit in the frames from the mark on
            1 => {
                let at = m + rng.below((end - m) as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
            }
            // a flipped bit in the zero region
            2 => {
                let at = end + rng.below((bytes.len() - end) as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
            }
            // damage before the mark: not looked at by open (the caller vouched for those
            // bytes), but never returned as data either
            _ => {
                if m <= 32 {
                    continue;
                }
                let at = 32 + rng.below((m - 32) as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
                std::fs::create_dir_all(&t).unwrap();
                copy_dir(&orig, &t);
                std::fs::write(t.join(&name), &bytes).unwrap();
                let (log, rec) = Log::open_from(&t, cfg(), mark).unwrap();
                assert_eq!(rec.resumed_from, Some(mark));
                let scanned: Vec<_> = log.scan(log.start()).collect();
                let bad = scanned.iter().filter(|r| r.is_err()).count();
                assert_eq!(bad, 1, "the scan stops at the damaged record");
                assert_eq!(log.verify().unwrap_err().kind(), ErrorKind::Corrupt);
                drop(log);
                std::fs::remove_dir_all(&t).unwrap();
                continue;
            }
        }
        std::fs::create_dir_all(&t).unwrap();
        copy_dir(&orig, &t);
        std::fs::write(t.join(&name), &bytes).unwrap();
        compare(&t, dir.path(), mark);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
