//! Random appends, reads, scans, reopens and rolls checked against a plain Vec model.
//! Tiny segments, so rolling, sealing and block compression are exercised all the time.

#![allow(clippy::unwrap_used)]

mod common;

use common::Rng;
use logbook_log::{Durability, Location, Log, LogConfig, Record};

type Model = Vec<Vec<(Location, u8, Vec<u8>)>>;

fn records(m: &Model) -> Vec<(Location, u8, Vec<u8>, bool)> {
    m.iter()
        .flat_map(|b| {
            let n = b.len();
            b.iter()
                .enumerate()
                .map(move |(i, (l, k, p))| (*l, *k, p.clone(), i + 1 == n))
        })
        .collect()
}

fn scan_from(log: &Log, from: Location) -> Vec<(Location, u8, Vec<u8>, bool)> {
    log.scan(from)
        .map(|r| {
            let (l, rec, last) = r.unwrap();
            (l, rec.kind, rec.payload, last)
        })
        .collect()
}

fn config(rng: &mut Rng) -> LogConfig {
    LogConfig {
        segment_bytes_max: [512, 1024, 4096][rng.below(3) as usize],
        durability: if rng.below(2) == 0 {
            Durability::Sync
        } else {
            Durability::NoSyncBulkImport
        },
        ..LogConfig::default()
    }
}

fn run(seed: u64, steps: usize) {
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("log");
    let mut log = Log::create(&d, config(&mut rng)).unwrap();
    let mut model: Model = Vec::new();
    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        match rng.below(100) {
            0..50 => {
                let n = 1 + rng.below(4) as usize;
                let recs: Vec<(u8, Vec<u8>)> = (0..n)
                    .map(|_| {
                        let len = match rng.below(20) {
                            0 => 1000 + rng.below(90_000) as usize,
                            1..4 => 0,
                            _ => rng.below(120) as usize,
                        };
                        // compressible but not constant
                        let b = rng.next() as u8;
                        (
                            rng.next() as u8,
                            (0..len).map(|i| b.wrapping_add((i / 5) as u8)).collect(),
                        )
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
                assert_eq!(locs.len(), n, "{ctx}");
                if let Some(prev) = model.last().and_then(|b| b.last()) {
                    assert!(locs[0] > prev.0, "{ctx}: locations increase");
                }
                assert!(log.end() > locs[n - 1], "{ctx}");
                model.push(
                    locs.into_iter()
                        .zip(recs)
                        .map(|(l, (k, p))| (l, k, p))
                        .collect(),
                );
            }
            50..56 => {
                let end = log.end();
                drop(log);
                let (l, rec) = Log::open(&d, config(&mut rng)).unwrap();
                log = l;
                assert_eq!(rec.cut_bytes, 0, "{ctx}: clean close leaves nothing to cut");
                assert_eq!(log.end(), end, "{ctx}");
                assert_eq!(scan_from(&log, log.start()), records(&model), "{ctx}");
            }
            56..64 => {
                // A reader over a run of records, forward then at random places, then the
                // records of a batch appended while it lives.
                let all = records(&model);
                let mut reader = log.reader();
                let from = rng.below(all.len() as u64 + 1) as usize;
                let to = (from + rng.below(200) as usize).min(all.len());
                let jumps = (0..rng.below(20)).map(|_| rng.below(all.len().max(1) as u64) as usize);
                let picks: Vec<usize> = (from..to)
                    .chain(jumps.filter(|_| !all.is_empty()))
                    .collect();
                for i in picks {
                    let (l, k, p, _) = &all[i];
                    let got = reader.read(*l).unwrap();
                    assert_eq!(
                        (&got.kind, got.payload),
                        (k, &p[..]),
                        "{ctx}: reader at {l:?}"
                    );
                }
                let late = vec![rng.next() as u8; rng.below(300) as usize];
                let locs = log
                    .append(&[Record {
                        kind: 7,
                        payload: &late,
                    }])
                    .unwrap();
                let got = reader.read(locs[0]).unwrap();
                assert_eq!(
                    (got.kind, got.payload),
                    (7, &late[..]),
                    "{ctx}: a later record"
                );
                let past = log.end();
                assert!(reader.read(past).is_err(), "{ctx}: nothing at the end");
                drop(reader);
                model.push(vec![(locs[0], 7, late)]);
            }
            64..72 => {
                let all = records(&model);
                if !all.is_empty() {
                    let (l, k, p, _) = &all[rng.below(all.len() as u64) as usize];
                    let got = log.read(*l).unwrap();
                    assert_eq!((&got.kind, &got.payload), (k, p), "{ctx}: read {l:?}");
                }
            }
            72..84 => {
                let all = records(&model);
                let i = rng.below(all.len() as u64 + 1) as usize;
                let from = all.get(i).map_or(log.end(), |r| r.0);
                assert_eq!(scan_from(&log, from), all[i..], "{ctx}: scan from {from:?}");
            }
            84..88 => {
                let v = log.verify().unwrap();
                assert_eq!(v.records as usize, records(&model).len(), "{ctx}");
                assert_eq!(v.batches as usize, model.len(), "{ctx}");
            }
            88..94 => {
                assert_eq!(log.wait_for_sealing(), None, "{ctx}");
                for p in log.sealed_segment_paths() {
                    assert!(p.exists(), "{ctx}: {p:?}");
                }
            }
            _ => log.sync().unwrap(),
        }
    }
    assert_eq!(log.wait_for_sealing(), None);
    assert!(
        log.sealed_segment_paths().len() > 3,
        "seed {seed}: sealing was exercised"
    );
    assert_eq!(scan_from(&log, log.start()), records(&model));
    log.verify().unwrap();
}

#[test]
fn model_random_operations() {
    let mut rng = Rng::from_env("model");
    for _ in 0..4 {
        let seed = rng.next();
        println!("model run seed {seed}");
        run(seed, 300);
    }
}
