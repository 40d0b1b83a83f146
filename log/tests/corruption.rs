//! Truncation at every offset and random bit flips: recovery yields exactly a prefix of whole
//! batches, and damaged bytes are never returned as data.

#![allow(clippy::unwrap_used)]

mod common;

use common::{copy_dir, fast_tempdir, files_ending, Rng};
use logbook_log::{Durability, ErrorKind, Location, Log, LogConfig, LogError, Record};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;

fn cfg(segment_bytes_max: u64) -> LogConfig {
    LogConfig {
        segment_bytes_max,
        durability: Durability::Sync,
        ..LogConfig::default()
    }
}

/// The error reports damage (or a refused format) and names the damaged file.
fn is_named(e: &LogError, name: &OsStr, what: &str) {
    assert!(
        matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::UnsupportedFormat),
        "{what}: {e}"
    );
    assert!(
        e.to_string().contains(name.to_str().unwrap()),
        "{what}: {e}"
    );
}

/// Writes batches of 1-3 records; returns per batch its records (location, kind, payload).
type Batch = Vec<(Location, u8, Vec<u8>)>;

fn build(dir: &Path, c: LogConfig, batches: usize, rng: &mut Rng) -> Vec<Batch> {
    let log = Log::create(dir, c).unwrap();
    let mut out = Vec::new();
    for b in 0..batches {
        let n = 1 + rng.below(3) as usize;
        let recs: Vec<(u8, Vec<u8>)> = (0..n)
            .map(|_| {
                let n = rng.below(40) as usize;
                (b as u8, rng.bytes(n))
            })
            .collect();
        let batch: Vec<Record<'_>> = recs
            .iter()
            .map(|(k, p)| Record {
                kind: *k,
                payload: p,
            })
            .collect();
        let locs = log.append(&batch).unwrap();
        out.push(
            locs.into_iter()
                .zip(recs)
                .map(|(l, (k, p))| (l, k, p))
                .collect(),
        );
    }
    assert_eq!(log.wait_for_sealing(), None);
    // The files as a process killed now leaves them: the newest segment keeps its zero
    // region, which a clean drop would give back (the tests here damage that region).
    let image = dir.with_extension("crash-image");
    copy_dir(dir, &image);
    drop(log);
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::rename(&image, dir).unwrap();
    out
}

type Scanned = (Location, u8, Vec<u8>, bool);

fn scan_all(log: &Log) -> Result<Vec<Scanned>, logbook_log::LogError> {
    log.scan(log.start())
        .map(|r| r.map(|(l, rec, last)| (l, rec.kind, rec.payload, last)))
        .collect()
}

/// Checks `got` is exactly the first `k` whole batches of `want`; returns k.
fn whole_batch_prefix(got: &[Scanned], want: &[Batch]) -> usize {
    let mut i = 0;
    let mut k = 0;
    for b in want {
        if i == got.len() {
            break;
        }
        for (j, (l, kind, p)) in b.iter().enumerate() {
            let g = &got[i];
            assert_eq!((&g.0, &g.1, &g.2), (l, kind, p), "record {i} differs");
            assert_eq!(g.3, j + 1 == b.len(), "end-of-batch flag of record {i}");
            i += 1;
        }
        k += 1;
    }
    assert_eq!(i, got.len(), "records beyond the batches written");
    k
}

#[test]
fn truncation_at_every_offset_leaves_a_prefix_of_whole_batches() {
    let mut rng = Rng::from_env("truncation");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    let want = build(&orig, cfg(1 << 20), 12, &mut rng);
    let active = files_ending(&orig, ".active").pop().unwrap();
    let name = active.file_name().unwrap().to_owned();
    let file = std::fs::read(&active).unwrap();
    // batch ends, as offsets in the file
    let ends: Vec<u64> = want
        .iter()
        .map(|b| {
            let (l, _, p) = b.last().unwrap();
            l.offset + 24 + p.len() as u64
        })
        .collect();
    let end = *ends.last().unwrap() as usize;
    // The frames, then the preallocated zero region of a new log (its first step).
    assert_eq!(file.len() as u64, logbook_log::PREALLOCATE_FIRST_BYTES);
    assert!(file[end..].iter().all(|b| *b == 0));
    let bytes = &file[..end];
    for cut in 0..=bytes.len() {
        let d = dir.path().join(format!("t{cut}"));
        copy_dir(&orig, &d);
        std::fs::write(d.join(&name), &bytes[..cut]).unwrap();
        let (log, rec) = Log::open(&d, cfg(1 << 20)).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let got = scan_all(&log).unwrap();
        let k = whole_batch_prefix(&got, &want);
        let expect = ends.iter().filter(|e| **e <= cut as u64).count();
        assert_eq!(k, expect, "cut at {cut}");
        let good = if k == 0 { 32 } else { ends[k - 1] };
        let good = if cut < 32 { 0 } else { good };
        // What the cut copy keeps: the torn bytes up to the last non-zero one (zeros after it
        // cannot be told from the preallocated region), or all of a torn header.
        let torn = &bytes[(good as usize).min(cut)..cut];
        let kept = if cut < 32 {
            torn.len()
        } else {
            torn.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1)
        };
        assert_eq!(rec.cut_bytes, kept as u64, "cut at {cut}");
        assert_eq!(rec.cut_copy.is_some(), rec.cut_bytes > 0);
        // The cut is durable: appending and reopening gives the prefix plus the new batch.
        log.append(&[Record {
            kind: 200,
            payload: b"new",
        }])
        .unwrap();
        drop(log);
        let (log, rec) = Log::open(&d, cfg(1 << 20)).unwrap();
        assert_eq!(rec.cut_bytes, 0, "cut at {cut}");
        let got = scan_all(&log).unwrap();
        assert_eq!(got.len(), want[..k].iter().map(Vec::len).sum::<usize>() + 1);
        assert_eq!(got.last().unwrap().2, b"new");
        log.verify().unwrap();
        drop(log);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn truncation_inside_the_zero_region_is_a_clean_end() {
    let mut rng = Rng::from_env("zero region truncation");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    let want = build(&orig, cfg(1 << 20), 12, &mut rng);
    let active = files_ending(&orig, ".active").pop().unwrap();
    let name = active.file_name().unwrap().to_owned();
    let file = std::fs::read(&active).unwrap();
    let (l, _, p) = want.last().unwrap().last().unwrap();
    let end = (l.offset + 24 + p.len() as u64) as usize;
    let all: usize = want.iter().map(Vec::len).sum();
    let mut cuts: Vec<usize> = vec![end + 1, end + 23, end + 24, end + 25, file.len()];
    cuts.extend((0..40).map(|_| end + 1 + rng.below((file.len() - end) as u64) as usize));
    for cut in cuts {
        let d = dir.path().join(format!("z{cut}"));
        copy_dir(&orig, &d);
        std::fs::write(d.join(&name), &file[..cut]).unwrap();
        let (log, rec) = Log::open(&d, cfg(1 << 20)).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_eq!(
            rec.cut_bytes, 0,
            "zeros after the last batch are no torn tail ({cut})"
        );
        assert_eq!(rec.cut_copy, None);
        assert_eq!(
            log.end().offset,
            end as u64,
            "the zeros are not part of the log"
        );
        assert_eq!(
            whole_batch_prefix(&scan_all(&log).unwrap(), &want),
            want.len()
        );
        let at = log
            .append(&[Record {
                kind: 200,
                payload: b"after the zeros?",
            }])
            .unwrap();
        assert_eq!(
            at[0].offset, end as u64,
            "the next record overwrites the zeros"
        );
        drop(log);
        let (log, rec) = Log::open(&d, cfg(1 << 20)).unwrap();
        assert_eq!(rec.cut_bytes, 0);
        assert_eq!(scan_all(&log).unwrap().len(), all + 1);
        log.verify().unwrap();
        drop(log);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn a_frame_torn_into_the_zero_region_is_cut() {
    let mut rng = Rng::from_env("torn into zeros");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    let want = build(&orig, cfg(1 << 20), 6, &mut rng);
    let active = files_ending(&orig, ".active").pop().unwrap();
    let name = active.file_name().unwrap().to_owned();
    let file = std::fs::read(&active).unwrap();
    let last = want.last().unwrap();
    let first_of_last = last[0].0.offset as usize;
    let (l, _, p) = last.last().unwrap();
    let end = (l.offset + 24 + p.len() as u64) as usize;
    // A crash wrote only some sectors of the last batch: every later byte reads as zero,
    // and the file keeps its preallocated length.
    for zero_from in first_of_last + 1..end {
        let mut torn = file.clone();
        torn[zero_from..end].iter_mut().for_each(|b| *b = 0);
        let d = dir.path().join(format!("t{zero_from}"));
        copy_dir(&orig, &d);
        std::fs::write(d.join(&name), &torn).unwrap();
        let (log, rec) = Log::open(&d, cfg(1 << 20)).unwrap_or_else(|e| panic!("{zero_from}: {e}"));
        if torn == file {
            // The bytes "lost" were zeros already (a payload ending in zero bytes): nothing
            // was torn, and the log is whole.
            assert_eq!(rec.cut_bytes, 0, "{zero_from}");
            assert_eq!(log.end().offset, end as u64, "{zero_from}");
            assert_eq!(
                whole_batch_prefix(&scan_all(&log).unwrap(), &want),
                want.len()
            );
            continue;
        }
        let kept = torn[first_of_last..zero_from]
            .iter()
            .rposition(|b| *b != 0)
            .map_or(0, |i| i + 1);
        assert_eq!(rec.cut_bytes, kept as u64, "{zero_from}");
        assert_eq!(rec.cut_copy.is_some(), kept > 0, "{zero_from}");
        if let Some(copy) = &rec.cut_copy {
            let c = std::fs::read(copy).unwrap();
            assert_eq!(&c[40..], &torn[first_of_last..first_of_last + kept]);
        }
        assert_eq!(log.end().offset, first_of_last as u64, "{zero_from}");
        let got = scan_all(&log).unwrap();
        assert_eq!(
            whole_batch_prefix(&got, &want),
            want.len() - 1,
            "{zero_from}"
        );
        log.append(&[Record {
            kind: 9,
            payload: b"next",
        }])
        .unwrap();
        drop(log);
        let (log, rec) = Log::open(&d, cfg(1 << 20)).unwrap();
        assert_eq!(rec.cut_bytes, 0);
        assert_eq!(scan_all(&log).unwrap().last().unwrap().2, b"next");
        log.verify().unwrap();
        drop(log);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn flipped_bits_in_the_zero_region_are_cut_never_data() {
    let mut rng = Rng::from_env("zero region flips");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    let want = build(&orig, cfg(1 << 20), 8, &mut rng);
    let all: usize = want.iter().map(Vec::len).sum();
    let active = files_ending(&orig, ".active").pop().unwrap();
    let name = active.file_name().unwrap().to_owned();
    let file = std::fs::read(&active).unwrap();
    let (l, _, p) = want.last().unwrap().last().unwrap();
    let end = (l.offset + 24 + p.len() as u64) as usize;
    let mut spots: Vec<usize> = vec![end, end + 5, end + 20, end + 23, end + 24, file.len() - 1];
    spots.extend((0..30).map(|_| end + rng.below((file.len() - end) as u64) as usize));
    for at in spots {
        let mut bytes = file.clone();
        bytes[at] ^= 1 << rng.below(8);
        let d = dir.path().join(format!("f{at}"));
        copy_dir(&orig, &d);
        std::fs::write(d.join(&name), &bytes).unwrap();
        let (log, rec) = Log::open(&d, cfg(1 << 20)).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(
            rec.cut_bytes,
            (at + 1 - end) as u64,
            "{at}: copied up to the flip"
        );
        assert_eq!(log.end().offset, end as u64, "{at}");
        assert_eq!(
            whole_batch_prefix(&scan_all(&log).unwrap(), &want),
            want.len()
        );
        log.verify().unwrap();
        log.append(&[Record {
            kind: 9,
            payload: b"next",
        }])
        .unwrap();
        drop(log);
        let (log, rec) = Log::open(&d, cfg(1 << 20)).unwrap();
        assert_eq!(rec.cut_bytes, 0);
        assert_eq!(scan_all(&log).unwrap().len(), all + 1);
        drop(log);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn truncated_sealed_segment_is_an_error_naming_it() {
    let mut rng = Rng::from_env("truncated sealed");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    let want = build(&orig, cfg(256), 30, &mut rng);
    let sealed = files_ending(&orig, ".sealed");
    assert!(sealed.len() > 2);
    let victim = &sealed[1];
    let name = victim.file_name().unwrap().to_owned();
    let victim_seg: u64 = name.to_str().unwrap()[..20].parse().unwrap();
    let all: Vec<_> = want.iter().flatten().collect();
    let before = all
        .iter()
        .filter(|(l, _, _)| l.segment < victim_seg)
        .count();
    let inside = all
        .iter()
        .find(|(l, _, _)| l.segment == victim_seg)
        .expect("the victim holds records")
        .0;
    let (after, after_rec) = all
        .iter()
        .find(|(l, _, _)| l.segment > victim_seg)
        .map(|(l, k, p)| (*l, (*k, p.clone())))
        .unwrap();
    let bytes = std::fs::read(victim).unwrap();
    for cut in (0..bytes.len()).step_by(7) {
        let d = dir.path().join(format!("s{cut}"));
        copy_dir(&orig, &d);
        std::fs::write(d.join(&name), &bytes[..cut]).unwrap();
        // Open lists sealed segments only; the damage is found by the first read touching it.
        let (log, _) = Log::open(&d, cfg(256)).unwrap();
        let e = log.read(inside).unwrap_err();
        is_named(&e, &name, &format!("cut {cut}: read"));
        // Other segments stay readable.
        let got = log.read(after).unwrap();
        assert_eq!((got.kind, got.payload), after_rec, "cut {cut}");
        // A scan returns what lies before the damage, then the error, and nothing after it.
        let results: Vec<_> = log.scan(log.start()).collect();
        assert_eq!(results.len(), before + 1, "cut {cut}");
        assert!(results[..before].iter().all(Result::is_ok), "cut {cut}");
        is_named(
            results[before].as_ref().unwrap_err(),
            &name,
            &format!("cut {cut}: scan"),
        );
        is_named(
            &log.verify().unwrap_err(),
            &name,
            &format!("cut {cut}: verify"),
        );
        drop(log);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn flipped_bits_are_detected_never_returned() {
    let mut rng = Rng::from_env("bit flips");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    // Sealed segments and a long active one.
    let want = build(&orig, cfg(2048), 120, &mut rng);
    let by_loc: HashMap<Location, (u8, Vec<u8>)> = want
        .iter()
        .flatten()
        .map(|(l, k, p)| (*l, (*k, p.clone())))
        .collect();
    let files: Vec<_> = files_ending(&orig, ".active")
        .into_iter()
        .chain(files_ending(&orig, ".sealed"))
        .collect();
    // End of the frames of the newest segment; after it lies the preallocated zero region.
    let newest = want.last().unwrap()[0].0.segment;
    let newest_end = want
        .iter()
        .flatten()
        .filter(|(l, _, _)| l.segment == newest)
        .map(|(l, _, p)| l.offset + 24 + p.len() as u64)
        .max()
        .unwrap() as usize;
    let mut outcomes = [0usize; 5];
    // The newest segment's header, which open itself checks: the first trials flip a bit of
    // it (random flips land there too rarely to count on), the rest flip one anywhere.
    let newest_file = files
        .iter()
        .find(|f| f.ends_with(format!("{newest:020}.active")))
        .unwrap()
        .clone();
    for t in 0..300 {
        let f = if t < 3 {
            &newest_file
        } else {
            &files[rng.below(files.len() as u64) as usize]
        };
        let name = f.file_name().unwrap().to_owned();
        let mut bytes = std::fs::read(f).unwrap();
        let at = if t < 3 {
            rng.below(32) as usize
        } else {
            rng.below(bytes.len() as u64) as usize
        };
        bytes[at] ^= 1 << rng.below(8);
        let d = dir.path().join(format!("f{t}"));
        copy_dir(&orig, &d);
        std::fs::write(d.join(&name), &bytes).unwrap();
        let what = format!("flip {t}: {} byte {at}", name.to_string_lossy());
        match Log::open(&d, cfg(2048)) {
            Err(e) => {
                is_named(&e, &name, &what);
                outcomes[0] += 1;
            }
            Ok((log, rec)) => {
                // Whatever a scan returns is original data at its original place.
                let mut seen = 0;
                let mut scan_failed = false;
                for r in log.scan(log.start()) {
                    match r {
                        Ok((l, got, _)) => {
                            assert_eq!(by_loc.get(&l), Some(&(got.kind, got.payload)), "{what}");
                            seen += 1;
                        }
                        Err(e) => {
                            // A sealed file is first checked by the first read touching it.
                            assert!(
                                matches!(
                                    e.kind(),
                                    ErrorKind::Corrupt | ErrorKind::UnsupportedFormat
                                ),
                                "{what}: {e}"
                            );
                            scan_failed = true;
                        }
                    }
                }
                let verified = log.verify();
                let in_zeros = f.to_string_lossy().ends_with(".active") && at >= newest_end;
                if in_zeros {
                    // A flip in the zero region: cut (up to the flipped byte), nothing lost.
                    assert_eq!(rec.cut_bytes, (at + 1 - newest_end) as u64, "{what}");
                    assert!(verified.is_ok(), "{what}");
                    assert_eq!(seen, by_loc.len(), "{what}");
                    outcomes[4] += 1;
                } else if rec.cut_bytes > 0 {
                    // a flip in the last batch of the newest segment is a torn tail
                    assert!(verified.is_ok(), "{what}");
                    assert!(seen < by_loc.len(), "{what}");
                    outcomes[1] += 1;
                } else {
                    let e = verified.expect_err(&what);
                    is_named(&e, &name, &what);
                    assert!(scan_failed, "{what}: a scan meets the damage too");
                    outcomes[if scan_failed { 2 } else { 3 }] += 1;
                }
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
    println!(
        "refused at open {}, cut as torn {}, found by scan/verify {}, cut in the zero region {}",
        outcomes[0], outcomes[1], outcomes[2], outcomes[4]
    );
    assert!(outcomes[0] > 0 && outcomes[2] > 0);
}
