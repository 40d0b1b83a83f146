//! The background index sync and the state checkpoint (indexes synced on the timer, the
//! checkpoint written by log growth), and a Session whose log failed an fdatasync being
//! opened again from disk by its next mutation.
mod common;
use common::*;
use logbook_engine::*;
use logbook_log::io::{FaultyFs, Injected, Op};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn session_dir(root_dir: &Path, sid: &str) -> std::path::PathBuf {
    root_dir.join("sessions").join(sid)
}

fn user(op: &str) -> String {
    format!(
        r#"[{{"kind":"userMessage","invocation":"{op}","text":"text of {op}","attachments":[]}}]"#
    )
}

fn all_rows(root: &Root, sid: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let p = hist(root, sid, None, after, 100, Direction::Forward);
        out.extend(bodies(&p));
        after = p.next_after.clone();
        if after.is_none() {
            return out;
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("list") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).expect("copy");
        }
    }
}

/// The timer makes the indexes durable on every tick but leaves `state.ckpt` alone until the
/// log grew by more than `CHECKPOINT_LOG_BYTES`; a crash image taken with indexes ahead of the
/// checkpoint opens to the same answers (the indexes are cut back to it and the tail replayed).
#[test]
fn the_timer_syncs_indexes_but_checkpoints_only_after_log_growth() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    Root::init(&dir).expect("init");
    let opts = RootOptions {
        index_sync_interval: Duration::from_millis(5),
        ..RootOptions::default()
    };
    let root = Root::open_with(&dir, opts).expect("open");
    create(&root, "s");
    append(&root, "s", "a0", &user("a0")).expect("a0");
    root.sync_indexes().expect("sync");
    let sdir = session_dir(&dir, "s");
    let ckpt = std::fs::read(sdir.join("state.ckpt")).expect("checkpoint written on request");
    for i in 1..=20 {
        append(&root, "s", &format!("a{i}"), &user(&format!("a{i}"))).expect("small");
    }
    let rev = root.revision("s").expect("rev");
    // Entries of seq.idx are 24 bytes and a CRC-32 after a 32-byte header.
    let seq_len = 32 + rev * 28;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(sdir.join("seq.idx"))
        .expect("seq.idx")
        .len()
        != seq_len
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the timer never synced seq.idx"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50)); // ten more ticks
    assert_eq!(
        std::fs::read(sdir.join("state.ckpt")).expect("checkpoint"),
        ckpt,
        "a few hundred bytes of log growth must not rewrite the checkpoint"
    );

    // A crash image now: indexes durable beyond the checkpoint, which covers only a0.
    let image = tmp.path().join("image");
    copy_dir(&dir, &image);
    std::fs::remove_file(image.join("lock")).expect("rm lock");
    std::fs::File::create(image.join("lock")).expect("lock");
    let rows = all_rows(&root, "s");
    {
        let copy = Root::open(&image).expect("open the crash image");
        assert_eq!(copy.revision("s").expect("rev"), rev);
        assert_eq!(all_rows(&copy, "s"), rows);
        copy.verify().expect("verify the crash image");
        // Receipts survived: a repeat changes nothing.
        let again = append(&copy, "s", "a7", &user("a7")).expect("repeat");
        assert_eq!(again.first_sequence, 9);
        assert_eq!(copy.revision("s").expect("rev"), rev);
    }

    // More than CHECKPOINT_LOG_BYTES of log: the timer writes a checkpoint by itself.
    let body = "x".repeat(256 << 10);
    let n = CHECKPOINT_LOG_BYTES / (256 << 10) + 2;
    for i in 0..n {
        let inv = format!("big{i}");
        let json = format!(
            r#"[{{"kind":"userMessage","invocation":"{inv}","text":"{body}","attachments":[]}}]"#
        );
        append(&root, "s", &inv, &json).expect("big");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read(sdir.join("state.ckpt")).expect("checkpoint") == ckpt {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint after the log grew"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let rev = root.revision("s").expect("rev");
    drop(root);
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(root.revision("s").expect("rev"), rev);
    root.verify().expect("verify");
}

/// One failed fdatasync of a Session log (a transient ENOSPC) fails that mutation with `io`;
/// the next mutation opens the Session again from disk and succeeds. Nothing acknowledged is
/// lost, the failed batch is wholly absent (its bytes never reached the disk for sure, so they
/// are cut), sequences stay dense, and a repeat of the failed operation applies it once.
#[test]
fn a_failed_log_fdatasync_reopens_the_session_on_the_next_mutation() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    Root::init(&dir).expect("init");
    let (fs, faults) = FaultyFs::new();
    let opts = RootOptions {
        log_fs: Some(Arc::new(fs)),
        ..RootOptions::default()
    };
    let root = Root::open_with(&dir, opts).expect("open");
    create(&root, "s");
    let mut acked = Vec::new();
    for op in ["a0", "a1", "a2"] {
        acked.push((op, append(&root, "s", op, &user(op)).expect("append")));
    }
    faults.arm_on(Op::Sync, "/sessions/s/log/", 0, Injected::NoSpace);
    let e = append(&root, "s", "failed", &user("failed")).expect_err("fdatasync fails");
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(faults.all_fired());

    // The next mutation reopens the Session and goes on from the last durable batch.
    let a3 = append(&root, "s", "a3", &user("a3")).expect("append after the failure");
    assert_eq!(a3.first_sequence, acked[2].1.last_sequence + 1, "dense");
    acked.push(("a3", a3));
    // The failed operation, repeated, is applied once (its receipt decides: there is none).
    let f = append(&root, "s", "failed", &user("failed")).expect("repeat the failed one");
    assert_eq!(f.first_sequence, a3.last_sequence + 1);
    assert_eq!(
        append(&root, "s", "failed", &user("failed")).expect("again"),
        f
    );
    acked.push(("failed", f));
    for (op, r) in &acked {
        assert_eq!(
            append(&root, "s", op, &user(op)).expect("repeat"),
            *r,
            "{op}"
        );
    }
    let check = |root: &Root| {
        let rev = root.revision("s").expect("rev");
        assert_eq!(rev, f.last_sequence);
        for seq in 1..=rev {
            root.read_event("s", seq).expect("every sequence is there");
        }
        let rows = all_rows(root, "s");
        for (op, _) in &acked {
            let text = format!("text of {op}");
            assert_eq!(rows.iter().filter(|r| **r == text).count(), 1, "{op} once");
        }
        root.verify().expect("verify");
    };
    check(&root);
    drop(root);
    check(&Root::open(&dir).expect("reopen"));
}
