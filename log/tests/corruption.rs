//! Truncation at every offset and random bit flips: recovery yields exactly a prefix of whole
//! batches, and damaged bytes are never returned as data.

#![allow(clippy::unwrap_used)]

mod common;

use common::{copy_dir, fast_tempdir, files_ending, Rng};
use logbook_log::{Durability, ErrorKind, Location, Log, LogConfig, Record};
use std::collections::HashMap;
use std::path::Path;

fn cfg(segment_bytes_max: u64) -> LogConfig {
    LogConfig {
        segment_bytes_max,
        durability: Durability::Sync,
    }
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
    let bytes = std::fs::read(&active).unwrap();
    // batch ends, as offsets in the file
    let ends: Vec<u64> = want
        .iter()
        .map(|b| {
            let (l, _, p) = b.last().unwrap();
            l.offset + 24 + p.len() as u64
        })
        .collect();
    assert_eq!(*ends.last().unwrap(), bytes.len() as u64);
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
        assert_eq!(
            rec.cut_bytes,
            cut as u64 - good.min(cut as u64),
            "cut at {cut}"
        );
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
fn truncated_sealed_segment_is_an_error_naming_it() {
    let mut rng = Rng::from_env("truncated sealed");
    let dir = fast_tempdir();
    let orig = dir.path().join("orig");
    build(&orig, cfg(256), 30, &mut rng);
    let sealed = files_ending(&orig, ".sealed");
    assert!(sealed.len() > 2);
    let victim = &sealed[1];
    let name = victim.file_name().unwrap().to_owned();
    let bytes = std::fs::read(victim).unwrap();
    for cut in (0..bytes.len()).step_by(7) {
        let d = dir.path().join(format!("s{cut}"));
        copy_dir(&orig, &d);
        std::fs::write(d.join(&name), &bytes[..cut]).unwrap();
        let e = Log::open(&d, cfg(256)).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::UnsupportedFormat),
            "cut {cut}: {e}"
        );
        assert!(
            e.to_string().contains(name.to_str().unwrap()),
            "cut {cut}: {e}"
        );
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
    let mut outcomes = [0usize; 4];
    for t in 0..300 {
        let f = &files[rng.below(files.len() as u64) as usize];
        let name = f.file_name().unwrap().to_owned();
        let mut bytes = std::fs::read(f).unwrap();
        let at = rng.below(bytes.len() as u64) as usize;
        bytes[at] ^= 1 << rng.below(8);
        let d = dir.path().join(format!("f{t}"));
        copy_dir(&orig, &d);
        std::fs::write(d.join(&name), &bytes).unwrap();
        let what = format!("flip {t}: {} byte {at}", name.to_string_lossy());
        match Log::open(&d, cfg(2048)) {
            Err(e) => {
                assert!(
                    matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::UnsupportedFormat),
                    "{what}: {e}"
                );
                assert!(
                    e.to_string().contains(name.to_str().unwrap()),
                    "{what}: {e}"
                );
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
                            assert_eq!(e.kind(), ErrorKind::Corrupt, "{what}: {e}");
                            scan_failed = true;
                        }
                    }
                }
                let verified = log.verify();
                if rec.cut_bytes > 0 {
                    // a flip in the last batch of the newest segment is a torn tail
                    assert!(verified.is_ok(), "{what}");
                    assert!(seen < by_loc.len(), "{what}");
                    outcomes[1] += 1;
                } else {
                    let e = verified.expect_err(&what);
                    assert_eq!(e.kind(), ErrorKind::Corrupt, "{what}: {e}");
                    assert!(scan_failed, "{what}: a scan meets the damage too");
                    outcomes[if scan_failed { 2 } else { 3 }] += 1;
                }
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
    println!(
        "refused at open {}, cut as torn {}, found by scan/verify {}",
        outcomes[0], outcomes[1], outcomes[2]
    );
    assert!(outcomes[0] > 0 && outcomes[2] > 0);
}
