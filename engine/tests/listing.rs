//! `sessions` pages (newest activity first or by id, workspace filter), titles (`setTitle`,
//! else the first line of the first user message) and the catalog that answers them across
//! restarts, clean or not.

mod common;
use common::*;
use logbook_engine::*;

fn send(root: &Root, sid: &str, op: &str, text: &str) -> u64 {
    root.send(SendParams {
        session_id: sid.into(),
        operation: op.into(),
        text: text.into(),
        attachments: vec![],
    })
    .expect("send")
    .sequence
}

fn page(root: &Root, after: Option<String>, limit: u32, order: SessionOrder) -> SessionsPage {
    root.sessions_page(SessionsParams {
        after,
        limit: Some(limit),
        workspace: None,
        order: Some(order),
    })
    .expect("page")
}

fn all_ids(root: &Root, limit: u32, order: SessionOrder) -> Vec<String> {
    let (mut ids, mut after) = (Vec::new(), None);
    loop {
        let p = page(root, after, limit, order);
        assert!(p.sessions.len() <= limit as usize);
        ids.extend(p.sessions.iter().map(|s| s.session_id.clone()));
        match p.next_after {
            Some(n) => after = Some(n),
            None => return ids,
        }
    }
}

fn set_title(root: &Root, sid: &str, op: &str, title: &str) -> Result<u64, EngineError> {
    root.set_title(SetTitleParams {
        session_id: sid.into(),
        operation: op.into(),
        title: title.into(),
    })
    .map(|r| r.sequence)
}

fn info(root: &Root, sid: &str) -> SessionInfo {
    root.session_info(sid).expect("info")
}

#[test]
fn pages_are_newest_activity_first_or_by_id() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("root"));
    for id in ["a", "b", "c", "d", "e"] {
        create(&root, id);
    }
    // Activity order, oldest to newest: b, d, a, e, c.
    for (n, id) in ["b", "d", "a", "e", "c"].iter().enumerate() {
        std::thread::sleep(std::time::Duration::from_millis(3));
        send(&root, id, &format!("m{n}"), "hello");
    }
    for limit in [1, 2, 3, 5, 8] {
        assert_eq!(
            all_ids(&root, limit, SessionOrder::LastActivity),
            ["c", "e", "a", "d", "b"],
            "limit {limit}"
        );
        assert_eq!(
            all_ids(&root, limit, SessionOrder::Id),
            ["a", "b", "c", "d", "e"]
        );
    }
    // New activity moves a Session to the front.
    send(&root, "b", "m9", "again");
    assert_eq!(
        page(&root, None, 1, SessionOrder::LastActivity).sessions[0].session_id,
        "b"
    );
    let first = page(&root, None, 5, SessionOrder::LastActivity);
    assert!(first.next_after.is_none());
    let times: Vec<u64> = first.sessions.iter().map(|s| s.last_activity_at).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    for s in &first.sessions {
        assert!(
            s.created_at > 0 && s.created_at <= s.last_activity_at,
            "{s:?}"
        );
        assert!(s.rows >= 1 && s.bytes > 0, "{s:?}");
    }
    for bad in [0, SESSIONS_PAGE_MAX + 1] {
        let e = root
            .sessions_page(SessionsParams {
                limit: Some(bad),
                ..SessionsParams::default()
            })
            .expect_err("limit out of range");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
    let e = root
        .sessions_page(SessionsParams {
            after: Some("not a cursor".into()),
            ..SessionsParams::default()
        })
        .expect_err("foreign cursor");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn the_workspace_filter_keeps_exact_paths() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("root"));
    for (id, ws) in [("a", "/w/one"), ("b", "/w/one/sub"), ("c", "/w/one")] {
        root.create_session(CreateSessionParams {
            session_id: Some(id.into()),
            workspace: Some(ws.into()),
            operation: format!("c-{id}"),
        })
        .expect("create");
    }
    let p = root
        .sessions_page(SessionsParams {
            workspace: Some("/w/one".into()),
            order: Some(SessionOrder::Id),
            ..SessionsParams::default()
        })
        .expect("page");
    let ids: Vec<&str> = p.sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["a", "c"]);
}

#[test]
fn titles_come_from_set_title_else_the_first_message() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("root"));
    create(&root, "s");
    assert_eq!(info(&root, "s").title, None);
    // The first line, cut at 80 characters on a character boundary (multi-byte ones too).
    let long = format!("{}\nsecond line", "é".repeat(100));
    send(&root, "s", "m1", &long);
    assert_eq!(info(&root, "s").title, Some("é".repeat(80)));
    send(&root, "s", "m2", "a later message does not retitle");
    assert_eq!(info(&root, "s").title, Some("é".repeat(80)));
    let seq = set_title(&root, "s", "t1", "Why the tombstone stays").expect("title");
    assert_eq!(
        info(&root, "s").title.as_deref(),
        Some("Why the tombstone stays")
    );
    // A mutation like the others: a repeat returns its receipt, other parameters conflict.
    assert_eq!(
        set_title(&root, "s", "t1", "Why the tombstone stays").expect("repeat"),
        seq
    );
    let e = set_title(&root, "s", "t1", "another").expect_err("reused operation");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    for bad in ["", "two\nlines", &"x".repeat(validate::TITLE_BYTES_MAX + 1)] {
        let e = set_title(&root, "s", "t-bad", bad).expect_err("bad title");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
    }
    set_title(&root, "s", "t2", "Renamed").expect("title");
    assert_eq!(info(&root, "s").title.as_deref(), Some("Renamed"));
    assert_eq!(root.revision("s").expect("rev"), seq + 1);
    // The event reads back as stored.
    let ev = serde_json::to_value(root.read_event("s", seq).expect("event")).expect("json");
    assert_eq!(
        ev,
        serde_json::json!({"kind": "titleSet", "title": "Why the tombstone stays"})
    );
}

#[test]
fn a_fork_has_the_title_of_its_fence() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("root"));
    create(&root, "s");
    set_title(&root, "s", "t1", "First").expect("title");
    let rev = root.revision("s").expect("rev");
    let f = root
        .fork(ForkParams {
            session_id: "s".into(),
            operation: "f1".into(),
            from: ForkFrom::All,
            revision: rev,
        })
        .expect("fork");
    set_title(&root, "s", "t2", "Second").expect("title");
    assert_eq!(info(&root, &f.session_id).title.as_deref(), Some("First"));
    assert_eq!(info(&root, "s").title.as_deref(), Some("Second"));
}

/// The snapshot stays on disk while nothing changes, and goes before the first commit: a
/// crash after that commit finds none, and the next clean close writes it again.
#[test]
fn the_catalog_snapshot_goes_before_the_first_commit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    {
        let root = root_at(&dir);
        for id in ["a", "b"] {
            create(&root, id);
            send(&root, id, "m", &format!("hello from {id}"));
        }
    }
    let snap = dir.join("catalog.snap");
    {
        let root = Root::open(&dir).expect("reopen");
        assert_eq!(info(&root, "a").revision, 2);
        assert!(snap.exists(), "read, not taken");
        send(&root, "b", "m2", "hello again");
        assert!(!snap.exists(), "removed before the first commit");
        set_title(&root, "b", "t2", "Renamed").expect("title");
    }
    assert!(snap.exists(), "written again by the clean close");
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(info(&root, "b").title.as_deref(), Some("Renamed"));
    assert_eq!(info(&root, "b").revision, 4);
    assert_eq!(newest_first(&root)[0].session_id, "b", "b changed last");
}

#[test]
fn the_listing_survives_clean_and_unclean_restarts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    let before = {
        let root = root_at(&dir);
        for id in ["a", "b", "c"] {
            create(&root, id);
            std::thread::sleep(std::time::Duration::from_millis(3));
            send(&root, id, "m", &format!("hello from {id}"));
        }
        set_title(&root, "a", "t", "Titled").expect("title");
        newest_first(&root)
    };
    assert!(
        dir.join("catalog.snap").exists(),
        "a clean close saves the catalog"
    );
    let saved = std::fs::read(dir.join("catalog.snap")).expect("snapshot");
    {
        let root = Root::open(&dir).expect("reopen");
        assert_eq!(
            newest_first(&root),
            before,
            "a clean restart lists the same"
        );
        assert!(!hist(&root, "b", None, None, 100, Direction::Forward)
            .rows
            .is_empty());
    }
    assert_eq!(
        std::fs::read(dir.join("catalog.snap")).expect("snapshot"),
        saved,
        "an open that changed nothing leaves the snapshot as it was (no rewrite)"
    );
    // After a crash that followed a change there is no snapshot: the same as removing it now.
    std::fs::remove_file(dir.join("catalog.snap")).expect("rm snapshot");
    let root = Root::open(&dir).expect("reopen without a snapshot");
    let after = newest_first(&root);
    // Without a snapshot the times come from the log files (a clean close also trims their
    // zero regions, which moves their mtimes, so the order is only approximate here): the
    // same Sessions with the same facts.
    let mut after = after;
    after.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    let mut before = before;
    before.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    assert_eq!(after.len(), before.len());
    for (a, b) in after.iter().zip(&before) {
        assert!(a.last_activity_at > 0 && a.created_at > 0, "{a:?}");
        assert_eq!(
            (a.revision, a.rows, &a.title, &a.workspace),
            (b.revision, b.rows, &b.title, &b.workspace)
        );
    }
}
