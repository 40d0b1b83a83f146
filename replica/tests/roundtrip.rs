//! Replicate a Root to a real S3 server (s3s-fs on loopback) and restore it.

#![allow(clippy::unwrap_used)]

mod common;

use logbook_engine::{CreateSessionParams, HistoryParams, Root, SendParams};
use logbook_replica::{restore, Replicator};

fn create(root: &Root, id: &str) {
    root.create_session(CreateSessionParams {
        session_id: Some(id.into()),
        workspace: None,
        operation: format!("create-{id}"),
    })
    .unwrap();
}

fn send(root: &Root, id: &str, n: usize) {
    root.send(SendParams {
        session_id: id.into(),
        operation: format!("send-{id}-{n}"),
        text: format!(
            "message {n} of {id}: {}",
            "the tombstone stays until every reader is past it ".repeat(n % 7 + 1)
        ),
        attachments: vec![],
    })
    .unwrap();
}

fn history(root: &Root, id: &str) -> String {
    let p: HistoryParams =
        serde_json::from_str(&format!(r#"{{"sessionId":"{id}","limit":1024}}"#)).unwrap();
    serde_json::to_string(&root.history(p).unwrap()).unwrap()
}

#[test]
fn replicate_then_restore_gives_the_same_root() {
    let Some(s3) = common::S3::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let root = Root::open_or_init(src.path()).unwrap();
    for s in 0..5 {
        create(&root, &format!("s{s}"));
        for n in 0..20 {
            send(&root, &format!("s{s}"), n);
        }
    }
    let mut r = Replicator::open(src.path(), s3.store("p1")).unwrap();
    let first = r.round().unwrap();
    assert!(first.manifest.is_some(), "{first:?}");
    assert!(first.full);
    // Nothing changed: no request at all.
    let before = r
        .store()
        .traffic()
        .puts
        .load(std::sync::atomic::Ordering::Relaxed);
    let idle = r.round().unwrap();
    assert_eq!(idle.manifest, None, "{idle:?}");
    assert_eq!(
        r.store()
            .traffic()
            .puts
            .load(std::sync::atomic::Ordering::Relaxed),
        before
    );
    // More appends: a delta with chunks of the tails only.
    for n in 20..25 {
        send(&root, "s1", n);
    }
    create(&root, "late");
    send(&root, "late", 0);
    let second = r.round().unwrap();
    assert!(second.manifest.is_some() && !second.full, "{second:?}");
    let dest = tempfile::tempdir().unwrap();
    let out = dest.path().join("restored");
    let report = restore(&s3.store("p1"), &out, None).unwrap();
    assert_eq!(report.sessions, 6, "{report:?}");
    let copy = Root::open_read_only(&out).unwrap();
    for id in ["s0", "s1", "s2", "s3", "s4", "late"] {
        assert_eq!(history(&copy, id), history(&root, id), "{id}");
    }
}
