//! kill -9: a child process appends synced batches and reports each acknowledged batch on
//! stdout; the parent kills it with SIGKILL at random moments, reopens, and checks that every
//! acknowledged batch is there exactly once and that the log is a prefix of whole batches.

#![allow(clippy::unwrap_used)]

mod common;

use common::Rng;
use logbook_log::{Durability, Log, LogConfig, Record};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "LOGBOOK_KILL9_CHILD_DIR";

fn cfg() -> LogConfig {
    LogConfig {
        // small segments: kills land in rolls and in sealing too
        segment_bytes_max: 8192,
        durability: Durability::Sync,
        ..LogConfig::default()
    }
}

/// Batch `n` has `1 + n % 3` records with payloads `"n:j"` (padded so segments fill).
fn batch_payloads(n: u64) -> Vec<Vec<u8>> {
    (0..1 + n % 3)
        .map(|j| format!("{n}:{j}:{}", "x".repeat((n % 50) as usize)).into_bytes())
        .collect()
}

/// Reads the log back as batch numbers, checking every batch is whole and in order.
fn batches_present(dir: &Path) -> u64 {
    let (log, _) = Log::open(dir, cfg()).unwrap();
    let mut next = 0u64;
    let mut it = log.scan(log.start());
    while let Some(r) = it.next() {
        let want = batch_payloads(next);
        let (_, first, mut last) = r.unwrap();
        assert_eq!(first.payload, want[0], "batch {next} record 0");
        for (j, w) in want.iter().enumerate().skip(1) {
            let (_, rec, l) = it.next().expect("a batch is whole").unwrap();
            assert_eq!(&rec.payload, w, "batch {next} record {j}");
            last = l;
        }
        assert!(last, "batch {next} ends where it should");
        next += 1;
    }
    log.verify().unwrap();
    next
}

#[test]
#[ignore = "the child process of kill9_every_acknowledged_batch_survives"]
fn kill9_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let log = if dir.exists() {
        Log::open(dir, cfg()).unwrap().0
    } else {
        Log::create(dir, cfg()).unwrap()
    };
    let mut n = log
        .scan(log.start())
        .filter(|r| r.as_ref().unwrap().2)
        .count() as u64;
    loop {
        let p = batch_payloads(n);
        let batch: Vec<Record<'_>> = p
            .iter()
            .map(|p| Record {
                kind: 1,
                payload: p,
            })
            .collect();
        log.append(&batch).unwrap();
        println!("ack {n}");
        n += 1;
    }
}

#[test]
fn kill9_every_acknowledged_batch_survives() {
    let mut rng = Rng::from_env("kill9");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut rounds = 0;
    let mut highest_ack: Option<u64> = None;
    while rounds < 12 && started.elapsed() < Duration::from_secs(6) {
        let mut child = Command::new(&exe)
            .args([
                "kill9_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ack ") {
                    acks.push(n.trim().parse::<u64>().unwrap());
                }
            }
            acks
        });
        std::thread::sleep(Duration::from_millis(30 + rng.below(250)));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let acks = reader.join().unwrap();
        let present = batches_present(&dir);
        for a in &acks {
            assert!(
                *a < present,
                "round {rounds}: acknowledged batch {a} missing (log holds {present})"
            );
        }
        if let Some(h) = acks.last().copied().or(highest_ack) {
            assert!(h < present, "round {rounds}");
            highest_ack = Some(h);
        }
        println!(
            "round {rounds}: {} acks this round, {present} batches in the log",
            acks.len()
        );
        rounds += 1;
    }
    assert!(rounds >= 3, "enough rounds ran");
    assert!(
        highest_ack.is_some_and(|h| h > 10),
        "the child made progress"
    );
    let (log, _) = Log::open(&dir, cfg()).unwrap();
    assert_eq!(log.wait_for_sealing(), None);
    assert!(!log.sealed_segment_paths().is_empty());
}
