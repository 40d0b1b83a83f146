//! Arbitrary bytes as the files of a log directory, through open (recovery), scan, read,
//! verify, append and reopen. Must never panic; checks the invariants that must hold for any
//! input: a log that verifies scans without error, and survives an append and a reopen with
//! every record it had.

#![no_main]

use libfuzzer_sys::fuzz_target;
use logbook_fuzz_input::{decode, write_files};
use logbook_log::{Durability, Log, LogConfig, Record};

#[path = "../bin/input.rs"]
mod logbook_fuzz_input;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 4096,
        durability: Durability::Sync,
        ..LogConfig::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(files) = decode(data) else { return };
    // tmpfs when there is one: fsync is free there, so the fuzzer is not disk bound
    let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    let Ok(tmp) = tempfile::Builder::new().prefix("lbfuzz").tempdir_in(base) else { return };
    let dir = tmp.path().join("log");
    if write_files(&dir, &files).is_err() {
        return;
    }
    let Ok((log, _recovery)) = Log::open(&dir, config()) else { return };
    let mut seen = Vec::new();
    let mut scan_failed = false;
    for r in log.scan(log.start()) {
        match r {
            Ok((at, rec, _)) => seen.push((at, rec)),
            Err(_) => {
                scan_failed = true;
                break;
            }
        }
    }
    for (at, rec) in &seen {
        if let Ok(again) = log.read(*at) {
            assert_eq!(&again, rec, "a read agrees with the scan");
        }
    }
    let verified = log.verify().is_ok();
    if verified {
        assert!(!scan_failed, "a log that verifies scans without error");
    }
    let appended = log.append(&[Record { kind: 9, payload: b"fuzz" }]).is_ok();
    log.wait_for_sealing();
    drop(log);
    if verified && appended {
        let (log, recovery) = Log::open(&dir, config()).expect("a verified log reopens after an append");
        assert_eq!(recovery.cut_bytes, 0, "a clean close leaves nothing to cut");
        let again: Vec<_> = log
            .scan(log.start())
            .collect::<Result<Vec<_>, _>>()
            .expect("a verified log scans after an append");
        assert_eq!(again.len(), seen.len() + 1, "old records plus the new one");
        for ((a, r), (b, s, _)) in seen.iter().zip(&again) {
            assert_eq!((a, r), (b, s));
        }
    }
});
