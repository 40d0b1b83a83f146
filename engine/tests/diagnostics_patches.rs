//! recordDiagnostic / diagnostics / watchDiagnostics, and stored patches (store / read).
mod common;
use common::*;
use logbook_engine::*;
use std::time::{Duration, Instant};

fn cause(code: &str) -> DiagnosticCause {
    DiagnosticCause {
        code: code.into(),
        message: format!("{code} happened"),
    }
}

fn record(
    root: &Root,
    sid: &str,
    op: &str,
    inv: &str,
    code: &str,
) -> Result<RecordDiagnosticResult, EngineError> {
    root.record_diagnostic(RecordDiagnosticParams {
        session_id: sid.into(),
        operation: op.into(),
        kind: DiagnosticKind::ModelStep,
        invocation: inv.into(),
        cause: cause(code),
    })
}

fn page(
    root: &Root,
    sid: &str,
    through: Option<u64>,
    after: Option<String>,
    limit: u32,
) -> DiagnosticsPage {
    root.diagnostics(DiagnosticsParams {
        session_id: sid.into(),
        through,
        after,
        limit: Some(limit),
    })
    .expect("diagnostics")
}

fn send(root: &Root, sid: &str, op: &str) -> SendResult {
    root.send(SendParams {
        session_id: sid.into(),
        operation: op.into(),
        text: "q".into(),
        attachments: vec![],
    })
    .expect("send")
}

#[test]
fn diagnostics_pages_receipts_restart_and_forks() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let inv;
    {
        let root = root_at(&dir);
        let sid = create(&root, "s");
        assert_eq!(page(&root, &sid, None, None, 10).through, 0);
        let t = send(&root, &sid, "send-1");
        inv = t.invocation.clone();
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        for i in 1..=7u64 {
            let r =
                record(&root, &sid, &format!("d{i}"), &inv, &format!("code.{i}")).expect("record");
            assert_eq!(r.revision, i);
        }
        // Repeats return the first result; other parameters conflict; history is untouched.
        let again = record(&root, &sid, "d3", &inv, "code.3").expect("repeat");
        assert_eq!(again.revision, 3);
        let e = record(&root, &sid, "d3", &inv, "other").expect_err("other params");
        assert_eq!(e.kind(), ErrorKind::Conflict);
        let e = record(&root, &sid, "send-1", &inv, "x").expect_err("op used by send");
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert_eq!(
            root.revision(&sid).expect("rev"),
            2,
            "diagnostics are not history"
        );
        let e = record(&root, &sid, "d-unknown", "no-such-inv", "x").expect_err("unknown inv");
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let bad = root
            .record_diagnostic(RecordDiagnosticParams {
                session_id: sid.clone(),
                operation: "d-bad".into(),
                kind: DiagnosticKind::Title,
                invocation: inv.clone(),
                cause: DiagnosticCause {
                    code: "has space".into(),
                    message: String::new(),
                },
            })
            .expect_err("bad code");
        assert_eq!(bad.kind(), ErrorKind::InvalidArgument);
        // Newest first, in pages of 3 under a pinned fence, while more arrive.
        let first = page(&root, &sid, None, None, 3);
        assert_eq!(first.through, 7);
        record(&root, &sid, "d8", &inv, "code.8").expect("late");
        let mut seen: Vec<u64> = Vec::new();
        let mut p = first;
        loop {
            for d in &p.diagnostics {
                seen.push(d.id.trim_start_matches("diag-").parse().expect("id"));
                assert_eq!(d.sequence, 2);
                assert_eq!(d.invocation, inv);
                assert_eq!(d.kind, DiagnosticKind::ModelStep);
                assert!(
                    d.at >= before && d.at < before + 60_000,
                    "at is ms since the epoch"
                );
            }
            match p.next_after.clone() {
                None => break,
                a => p = page(&root, &sid, Some(7), a, 3),
            }
        }
        assert_eq!(seen, vec![7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(seen.len(), 7);
        let newest = page(&root, &sid, None, None, 1);
        assert_eq!(newest.diagnostics[0].cause, cause("code.8"));
        // A cursor of another fence is refused.
        let c = page(&root, &sid, Some(7), None, 2)
            .next_after
            .expect("more");
        let e = root
            .diagnostics(DiagnosticsParams {
                session_id: sid.clone(),
                through: Some(8),
                after: Some(c),
                limit: Some(2),
            })
            .expect_err("foreign cursor");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        // A fork starts with no diagnostics.
        let rev = root.revision(&sid).expect("rev");
        root.append(AppendParams {
            session_id: sid.clone(),
            operation: "settle".into(),
            events: events(&format!(
                r#"[{{"kind":"turnSettled","invocation":"{inv}","outcome":"failed"}}]"#
            )),
        })
        .expect("settle");
        let f = root
            .fork(ForkParams {
                session_id: sid.clone(),
                operation: "fork".into(),
                from: ForkFrom::All,
                revision: rev + 1,
            })
            .expect("fork");
        let fp = page(&root, &f.session_id, None, None, 10);
        assert_eq!((fp.through, fp.diagnostics.len()), (0, 0));
    }
    let root = root_at(&dir);
    let p = page(&root, "s", None, None, 100);
    assert_eq!(p.through, 8);
    assert_eq!(p.diagnostics.len(), 8);
    assert_eq!(
        record(&root, "s", "d5", &inv, "code.5")
            .expect("repeat")
            .revision,
        5
    );
    assert_eq!(
        record(&root, "s", "d9", &inv, "code.9")
            .expect("new")
            .revision,
        9
    );
}

#[test]
fn watch_diagnostics_blocks_wakes_and_times_out() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("r"));
    let sid = create(&root, "s");
    let inv = send(&root, &sid, "send").invocation;
    let w = |after: u64, ms: u64| {
        root.watch_diagnostics(WatchDiagnosticsParams {
            session_id: sid.clone(),
            after: Some(after),
            timeout_ms: Some(ms),
        })
        .expect("watch")
        .revision
    };
    let t = Instant::now();
    assert_eq!(w(0, 100), 0, "timeout returns the current revision");
    assert!(t.elapsed() >= Duration::from_millis(90));
    record(&root, &sid, "d1", &inv, "a").expect("record");
    let t = Instant::now();
    assert_eq!(w(0, 10_000), 1, "already past: at once");
    assert!(t.elapsed() < Duration::from_millis(1000));
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let t = Instant::now();
            (w(1, 10_000), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        record(&root, &sid, "d2", &inv, "b").expect("record");
        let (rev, took) = h.join().expect("join");
        assert_eq!(rev, 2);
        assert!(
            took < Duration::from_secs(5),
            "woken by the record, not the timeout"
        );
    });
    let e = root
        .watch_diagnostics(WatchDiagnosticsParams {
            session_id: "nope".into(),
            after: None,
            timeout_ms: None,
        })
        .expect_err("unknown session");
    assert_eq!(e.kind(), ErrorKind::NotFound);
}

fn read_all(root: &Root, sid: &str, id: &str, limit: u64) -> (String, usize) {
    let mut text = String::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let p = root
            .read_patch(ReadPatchParams {
                session_id: sid.into(),
                patch_id: id.into(),
                after,
                limit: Some(limit),
            })
            .expect("read patch");
        pages += 1;
        text.push_str(&p.text);
        match p.next_after {
            None => return (text, pages),
            Some(n) => {
                assert_eq!(
                    n as usize,
                    text.len(),
                    "offsets are byte offsets of the original"
                );
                after = Some(n);
            }
        }
    }
}

#[test]
fn patches_store_once_read_in_chunks_and_survive_restart() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let patch = format!(
        "diff --git a/é.txt b/é.txt\n--- a/é.txt\n+++ b/é.txt\n@@ -1 +1 @@\n-{}\n+{}😀\n",
        "ü".repeat(300),
        "日本".repeat(200)
    );
    let info;
    {
        let root = root_at(&dir);
        let sid = create(&root, "s");
        assert_eq!(root.patch_receipt(&sid, "snap").expect("receipt"), None);
        info = root
            .store_patch(&sid, "snap", patch.clone().into_bytes())
            .expect("store");
        assert_eq!(info.bytes, patch.len() as u64);
        assert_eq!(info.digest, validate::sha256_digest(patch.as_bytes()));
        // The parameters are only the Session and operation: a repeat returns the first capture.
        let again = root
            .store_patch(&sid, "snap", b"different".to_vec())
            .expect("repeat");
        assert_eq!(again, info);
        assert_eq!(
            root.patch_receipt(&sid, "snap").expect("receipt"),
            Some(info.clone())
        );
        assert_eq!(
            root.revision(&sid).expect("rev"),
            1,
            "a patch writes no event"
        );
        for limit in [1, 2, 3, 5, 64, 65_536] {
            let (text, pages) = read_all(&root, &sid, &info.patch_id, limit);
            assert_eq!(text, patch, "limit {limit}");
            assert!(pages <= patch.len(), "every chunk advances");
        }
        let e = root
            .read_patch(ReadPatchParams {
                session_id: sid.clone(),
                patch_id: info.patch_id.clone(),
                after: Some(14), // inside the first "é" (bytes 13..15)
                limit: None,
            })
            .expect_err("mid-character offset");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        for (pid, kind) in [
            ("patch-".to_string() + &"0".repeat(64), ErrorKind::NotFound),
            ("nonsense".to_string(), ErrorKind::NotFound),
        ] {
            let e = root
                .read_patch(ReadPatchParams {
                    session_id: sid.clone(),
                    patch_id: pid,
                    after: None,
                    limit: None,
                })
                .expect_err("unknown patch");
            assert_eq!(e.kind(), kind);
        }
        let e = root
            .read_patch(ReadPatchParams {
                session_id: sid.clone(),
                patch_id: info.patch_id.clone(),
                after: None,
                limit: Some(READ_PATCH_LIMIT_TOO_BIG),
            })
            .expect_err("limit");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        // The operation is taken for other mutations of the Session.
        let e = root
            .send(SendParams {
                session_id: sid.clone(),
                operation: "snap".into(),
                text: "x".into(),
                attachments: vec![],
            })
            .expect_err("reused op");
        assert_eq!(e.kind(), ErrorKind::Conflict);
        // Not UTF-8: refused (it could not be read back as text), and the operation is
        // not taken.
        let raw = vec![b'a', 0xFF, b'b', 0xC3, 0xA9, b'c'];
        let e = root
            .store_patch(&sid, "snap-bin", raw)
            .expect_err("not UTF-8");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("byte 1"), "{e}");
        let ok = root
            .store_patch(&sid, "snap-bin", "a\u{e9}b".as_bytes().to_vec())
            .expect("the operation is still free");
        assert_eq!(ok.bytes, 4);
    }
    let root = root_at(&dir);
    let (text, _) = read_all(&root, "s", &info.patch_id, 7);
    assert_eq!(text, patch, "the same bytes after a restart");
    // Another Session does not read it, though the file is there; once it stores the same
    // content itself (the same patch id), it does.
    create(&root, "other");
    let foreign = |root: &Root| {
        root.read_patch(ReadPatchParams {
            session_id: "other".into(),
            patch_id: info.patch_id.clone(),
            after: None,
            limit: None,
        })
    };
    let e = foreign(&root).expect_err("a patch of another Session");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert_eq!(
        root.store_patch("other", "same", patch.clone().into_bytes())
            .expect("store")
            .patch_id,
        info.patch_id
    );
    assert_eq!(foreign(&root).expect("its own now").text, patch);
    assert_eq!(
        root.store_patch("s", "snap", b"changed".to_vec())
            .expect("repeat"),
        info
    );
    // A foreign or newer patch file is refused by name.
    let hex = info.patch_id.trim_start_matches("patch-");
    let path = dir.join("patches").join(&hex[..2]).join(&hex[2..]);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[8] = 9;
    std::fs::write(&path, &bytes).expect("write");
    let e = root
        .read_patch(ReadPatchParams {
            session_id: "s".into(),
            patch_id: info.patch_id.clone(),
            after: None,
            limit: None,
        })
        .expect_err("newer version");
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
    bytes[0] = b'X';
    std::fs::write(&path, &bytes).expect("write");
    let e = root
        .read_patch(ReadPatchParams {
            session_id: "s".into(),
            patch_id: info.patch_id,
            after: None,
            limit: None,
        })
        .expect_err("foreign");
    assert_eq!(e.kind(), ErrorKind::Corrupt);
}

const READ_PATCH_LIMIT_TOO_BIG: u64 = (1 << 20) + 1;

/// Every other mutation of `sid` under `op` (which recorded a diagnostic there) fails with
/// Conflict naming the operation and the Session, and changes nothing. Called first thing
/// after a reopen too: the mutations themselves must read the diagnostics log.
fn assert_diagnostic_op_refused(root: &Root, sid: &str, op: &str, inv: &str) {
    let rev = root.revision(sid).expect("rev");
    let refused = |what: &str, r: Result<(), EngineError>| {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Conflict, "{what}: {e}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("{op:?}")) && text.contains(sid),
            "{what}: {text}"
        );
    };
    refused(
        "append",
        append(
            root,
            sid,
            op,
            &format!(r#"[{{"kind":"stopRequested","invocation":"{inv}"}}]"#),
        )
        .map(drop),
    );
    refused(
        "send",
        root.send(SendParams {
            session_id: sid.into(),
            operation: op.into(),
            text: "q".into(),
            attachments: vec![],
        })
        .map(drop),
    );
    refused(
        "stop",
        root.stop(StopParams {
            session_id: sid.into(),
            operation: op.into(),
            invocation: inv.into(),
        })
        .map(drop),
    );
    refused("patchReceipt", root.patch_receipt(sid, op).map(drop));
    refused(
        "snapshotPatch",
        root.store_patch(sid, op, b"diff --git a/x b/x\n".to_vec())
            .map(drop),
    );
    refused(
        "fork",
        root.fork(ForkParams {
            session_id: sid.into(),
            operation: op.into(),
            from: ForkFrom::All,
            revision: rev,
        })
        .map(drop),
    );
    assert_eq!(root.revision(sid).expect("rev"), rev, "nothing applied");
    assert_eq!(
        root.fork_receipt(ForkReceiptParams {
            session_id: sid.into(),
            operation: op.into(),
        })
        .expect("fork receipt"),
        None
    );
}

#[test]
fn an_operation_that_recorded_a_diagnostic_conflicts_with_other_mutations() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let inv;
    {
        let root = root_at(&dir);
        let sid = create(&root, "s");
        inv = send(&root, &sid, "send-1").invocation;
        // Settled, so a fork under the operation would otherwise succeed.
        append(
            &root,
            &sid,
            "settle",
            &format!(r#"[{{"kind":"turnSettled","invocation":"{inv}","outcome":"failed"}}]"#),
        )
        .expect("settle");
        let first = record(&root, &sid, "x", &inv, "code.x").expect("record");
        assert_diagnostic_op_refused(&root, &sid, "x", &inv);
        // The diagnostic's own repeat still returns its receipt; nothing else was recorded.
        assert_eq!(
            record(&root, &sid, "x", &inv, "code.x").expect("repeat"),
            first
        );
        assert_eq!(root.diagnostics_revision(&sid).expect("diag rev"), 1);
    }
    // After a restart, before anything else reads the diagnostics.
    let root = root_at(&dir);
    assert_diagnostic_op_refused(&root, "s", "x", &inv);
    assert_eq!(root.diagnostics_revision("s").expect("diag rev"), 1);
    // Operations are scoped to their Session: "x" is free in another one, for every mutation.
    let other = create(&root, "t");
    let rev = root.revision(&other).expect("rev");
    let t = send(&root, &other, "x");
    assert_eq!(t.sequence, rev + 1);
    assert_eq!(send(&root, &other, "x"), t, "a repeat returns the receipt");
    let e = record(&root, &other, "x", &t.invocation, "code.x").expect_err("used by send");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let t2 = send(&root, &other, "send-2");
    record(&root, &other, "y", &t2.invocation, "code.y").expect("record in t");
    let e = append(
        &root,
        &other,
        "y",
        &format!(
            r#"[{{"kind":"stopRequested","invocation":"{}"}}]"#,
            t2.invocation
        ),
    )
    .expect_err("y recorded a diagnostic in t");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    root.store_patch("s", "y", b"diff --git a/x b/x\n".to_vec())
        .expect("y is free in s");
}

#[test]
fn record_diagnostic_and_send_racing_on_one_operation_exactly_one_wins() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("r"));
    let sid = create(&root, "s");
    let inv = send(&root, &sid, "send-0").invocation;
    let (mut diagnostics, mut sends) = (0u64, 0u64);
    for i in 0..40 {
        let op = format!("race-{i}");
        let (d, s) = std::thread::scope(|sc| {
            let d = sc.spawn(|| record(&root, &sid, &op, &inv, "code.race"));
            let s = sc.spawn(|| {
                root.send(SendParams {
                    session_id: sid.clone(),
                    operation: op.clone(),
                    text: "q".into(),
                    attachments: vec![],
                })
            });
            (d.join().expect("join"), s.join().expect("join"))
        });
        match (d, s) {
            (Ok(_), Err(e)) => {
                assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
                diagnostics += 1;
            }
            (Err(e), Ok(_)) => {
                assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
                sends += 1;
            }
            (d, s) => panic!("{op}: exactly one must win, got {d:?} and {s:?}"),
        }
    }
    assert_eq!(
        root.diagnostics_revision(&sid).expect("diag rev"),
        diagnostics
    );
    assert_eq!(root.revision(&sid).expect("rev"), 2 + sends);
}
