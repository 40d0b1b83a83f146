//! Creates a log in a temporary directory, appends batches (synced, then bulk), reopens it,
//! reads everything back and prints what each step cost.
//!
//! Run: `cargo run --release -p logbook-log --example demo`

use logbook_log::{Durability, Log, LogConfig, Record};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = std::env::temp_dir().join(format!("logbook-log-demo-{}", std::process::id()));
    let dir = tmp.join("log");
    let synced = LogConfig {
        segment_bytes_max: 4 << 20,
        durability: Durability::Sync,
        ..LogConfig::default()
    };
    let bulk = LogConfig {
        durability: Durability::NoSyncBulkImport,
        ..synced.clone()
    };
    let payload =
        |i: u64| format!("event {i}: {}", "some conversation text ".repeat(8)).into_bytes();

    let log = Log::create(&dir, synced.clone())?;
    let t = Instant::now();
    for i in 0..200u64 {
        let p = payload(i);
        log.append(&[
            Record {
                kind: 1,
                payload: &p,
            },
            Record {
                kind: 2,
                payload: b"end",
            },
        ])?;
    }
    let synced_time = t.elapsed();
    println!(
        "200 synced batches:        {synced_time:?} ({:?} per batch)",
        synced_time / 200
    );
    drop(log);

    let (log, _) = Log::open(&dir, bulk.clone())?;
    let n = 200_000u64;
    // Payloads built before the clock starts: the figure is the log's, not the formatter's.
    let payloads: Vec<Vec<u8>> = (0..1000).map(payload).collect();
    let t = Instant::now();
    for i in 0..n {
        let p = &payloads[(i % 1000) as usize];
        log.append(&[Record {
            kind: 1,
            payload: p,
        }])?;
    }
    log.sync()?;
    let bulk_time = t.elapsed();
    let sealing = log.wait_for_sealing();
    println!(
        "{n} bulk records:       {bulk_time:?} ({:.0} records/s), {} sealed segments{}",
        n as f64 / bulk_time.as_secs_f64(),
        log.sealed_segment_paths().len(),
        sealing
            .map(|e| format!(" (sealing error: {e})"))
            .unwrap_or_default()
    );
    let end = log.end();
    drop(log);

    let t = Instant::now();
    let (log, recovery) = Log::open(&dir, synced)?;
    println!(
        "reopen:                    {:?} ({} sealed segments, {} tail records scanned)",
        t.elapsed(),
        recovery.sealed_segments,
        recovery.tail_records
    );
    assert_eq!(log.end(), end);

    let t = Instant::now();
    let mut records = 0u64;
    let mut bytes = 0u64;
    for r in log.scan(log.start()) {
        let (_, rec, _) = r?;
        records += 1;
        bytes += rec.payload.len() as u64;
    }
    let scan_time = t.elapsed();
    println!(
        "scan:                      {records} records, {:.1} MB in {scan_time:?} ({:.0} MB/s)",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / scan_time.as_secs_f64()
    );
    let t = Instant::now();
    let v = log.verify()?;
    println!(
        "verify:                    {} records in {} segments, {:?}",
        v.records,
        v.segments,
        t.elapsed()
    );
    drop(log);
    std::fs::remove_dir_all(&tmp)?;
    Ok(())
}
