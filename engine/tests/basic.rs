mod common;
use common::*;
use logbook_engine::*;

#[test]
fn init_refuses_non_empty_and_open_locks() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("keep.txt"), b"x").expect("write");
    let e = Root::init(&dir).expect_err("non-empty");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert!(dir.join("keep.txt").exists(), "init deleted nothing");
    let dir2 = tmp.path().join("r2");
    Root::init(&dir2).expect("init absent");
    assert_eq!(
        Root::init(&dir2).expect_err("again").kind(),
        ErrorKind::Conflict
    );
    let file = tmp.path().join("f");
    std::fs::write(&file, b"x").expect("write");
    assert_eq!(
        Root::init(&file).expect_err("file").kind(),
        ErrorKind::InvalidArgument
    );
    let r = Root::open(&dir2).expect("open");
    let busy = Root::open(&dir2).expect_err("second open in-process");
    assert_eq!(busy.kind(), ErrorKind::Busy);
    drop(r);
    let _again = Root::open(&dir2).expect("open after close");
    assert_eq!(
        Root::open(&tmp.path().join("nope"))
            .expect_err("absent")
            .kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn busy_from_child_process() {
    // The child re-runs this test binary with an env var and tries to open the Root.
    if let Ok(dir) = std::env::var("LOGBOOK_CHILD_OPEN") {
        let code = match Root::open(std::path::Path::new(&dir)) {
            Err(e) if e.kind() == ErrorKind::Busy => 17,
            Ok(_) => 0,
            Err(_) => 1,
        };
        std::process::exit(code);
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = root_at(&dir);
    let exe = std::env::current_exe().expect("exe");
    let status = std::process::Command::new(exe)
        .args(["busy_from_child_process", "--exact", "--nocapture"])
        .env("LOGBOOK_CHILD_OPEN", &dir)
        .status()
        .expect("spawn");
    assert_eq!(status.code(), Some(17), "child saw Busy");
    drop(root);
}

#[test]
fn deleting_the_lock_file_does_not_admit_a_second_writer() {
    // The writer lock must hold on something a stray `rm ROOT/lock` cannot replace: with a
    // lock on that file, the second open made a fresh file, locked it and became a second
    // writer over the same Sessions.
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = root_at(&dir);
    create(&root, "x");
    std::fs::remove_file(dir.join("lock")).expect("rm lock");
    let busy = Root::open(&dir).expect_err("second writer after rm lock");
    assert_eq!(busy.kind(), ErrorKind::Busy, "{busy}");
    drop(root);
    let again = Root::open(&dir).expect("open after the writer closed, lock file or not");
    assert_eq!(
        Root::open(&dir).expect_err("still one writer").kind(),
        ErrorKind::Busy
    );
    drop(again);
}

#[test]
fn unsupported_root_version_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    Root::init(&dir).expect("init");
    let hp = dir.join("logbook.root");
    let mut h = std::fs::read(&hp).expect("read");
    h[8..12].copy_from_slice(&7u32.to_le_bytes());
    std::fs::write(&hp, &h).expect("write");
    let e = Root::open(&dir).expect_err("v7");
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
    assert!(e.to_string().contains("version 7"), "{e}");
    assert!(dir.join("root-log").exists(), "nothing deleted");
}

#[test]
fn session_ids_and_receipts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("r"));
    for bad in ["", ".x", "a/b", &"x".repeat(129)] {
        let e = root
            .create_session(CreateSessionParams {
                session_id: Some(bad.into()),
                workspace: None,
                operation: "o".into(),
            })
            .expect_err("bad id");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
    }
    let e = root
        .create_session(CreateSessionParams {
            session_id: None,
            workspace: Some("rel/path".into()),
            operation: "o".into(),
        })
        .expect_err("relative workspace");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let p = CreateSessionParams {
        session_id: None,
        workspace: Some("/w".into()),
        operation: "gen".into(),
    };
    let a = root.create_session(p.clone()).expect("gen");
    let b = root.create_session(p).expect("repeat");
    assert_eq!(a, b, "repeat returns the original generated id");
    let e = root
        .create_session(CreateSessionParams {
            session_id: None,
            workspace: Some("/other".into()),
            operation: "gen".into(),
        })
        .expect_err("other params");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert_eq!(root.sessions().expect("list").len(), 1);
    let info = root.session_info(&a.session_id).expect("info");
    assert_eq!(info.revision, 1);
    assert_eq!(info.workspace.as_deref(), Some("/w"));
    match root.read_event(&a.session_id, 1).expect("event 1") {
        Event::SessionCreated(c) => {
            assert_eq!(c.workspace.as_deref(), Some("/w"));
            assert_eq!(c.branch, None);
        }
        other => panic!("{other:?}"),
    }
    let e = root
        .create_session(CreateSessionParams {
            session_id: Some(a.session_id.clone()),
            workspace: None,
            operation: "x".into(),
        })
        .expect_err("dup");
    assert_eq!(e.kind(), ErrorKind::Conflict);
}

#[test]
fn append_send_history_source_watch() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = root_at(&dir);
    let sid = create(&root, "s1");
    let sent = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "send-1".into(),
            text: "hello".into(),
            attachments: vec![],
        })
        .expect("send");
    assert_eq!(sent.sequence, 2);
    let again = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "send-1".into(),
            text: "hello".into(),
            attachments: vec![],
        })
        .expect("repeat");
    assert_eq!(again, sent);
    let e = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "send-1".into(),
            text: "other".into(),
            attachments: vec![],
        })
        .expect_err("conflict");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let inv = sent.invocation.clone();
    let long = "é".repeat(40_000); // 80,000 bytes
    let batch = format!(
        r#"[{{"kind":"modelCompletion","invocation":"{inv}","model":"m","items":[
            {{"kind":"assistant","body":"{long}","thinking":"hmm"}},
            {{"kind":"toolCall","id":"c1","name":"read","arguments":"{{not json"}},
            {{"kind":"toolCall","id":"c2","name":"secret","arguments":"","internal":true}}],"usage":null}},
           {},{},
           {{"kind":"turnSettled","invocation":"{inv}","outcome":"completed"}}]"#,
        tool_result(&inv, "c1", "file text"),
        tool_result(&inv, "c2", "hidden result")
    );
    let r = append(&root, &sid, "ap-1", &batch).expect("append");
    assert_eq!((r.first_sequence, r.last_sequence), (3, 6));
    // Forward, all rows: user, assistant, toolCall c1, toolResult c1 (internal c2 and result hidden).
    let page = hist(&root, &sid, None, None, 128, Direction::Forward);
    assert_eq!(page.through, 6);
    let kinds: Vec<RowKind> = page.rows.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        vec![
            RowKind::User,
            RowKind::Assistant,
            RowKind::ToolCall,
            RowKind::ToolResult
        ]
    );
    let a = &page.rows[1].fields["body"];
    assert!(a.truncated);
    assert_eq!(a.bytes, 80_000);
    assert_eq!(a.text.len(), 65_536);
    assert_eq!(page.rows[2].fields["arguments"].text, "{not json");
    assert_eq!(page.next_after, None);
    // Backward, limit 2: newest first, then the cursor continues.
    let p1 = hist(&root, &sid, None, None, 2, Direction::Backward);
    assert_eq!(bodies(&p1), vec!["file text", "read"]);
    let p2 = hist(
        &root,
        &sid,
        Some(6),
        p1.next_after.clone(),
        2,
        Direction::Backward,
    );
    assert_eq!(p2.rows[1].fields["body"].text, "hello");
    assert_eq!(p2.next_after, None);
    // A cursor under another fence or direction is refused.
    let e = root
        .history(HistoryParams {
            session_id: sid.clone(),
            through: Some(5),
            after: p1.next_after.clone(),
            limit: None,
            anchor: None,
            direction: Some(Direction::Backward),
        })
        .expect_err("fence");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = root
        .history(HistoryParams {
            session_id: sid.clone(),
            through: Some(6),
            after: p1.next_after.clone(),
            limit: None,
            anchor: None,
            direction: None,
        })
        .expect_err("direction");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = root
        .history(HistoryParams {
            session_id: sid.clone(),
            through: Some(7),
            after: None,
            limit: None,
            anchor: None,
            direction: None,
        })
        .expect_err("through beyond");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = root
        .history(HistoryParams {
            session_id: sid.clone(),
            through: None,
            after: None,
            limit: Some(1025),
            anchor: None,
            direction: None,
        })
        .expect_err("limit");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // Anchored at the internal tool call: it is shown, its (later) result stays hidden.
    let anchored = root
        .history(HistoryParams {
            session_id: sid.clone(),
            through: None,
            after: None,
            limit: None,
            anchor: Some(Anchor::Row {
                position: Position {
                    source_sequence: 3,
                    item_index: 2,
                },
                field: Some("arguments".into()),
            }),
            direction: None,
        })
        .expect("anchored");
    assert_eq!(bodies(&anchored), vec!["secret", "file text"]);
    // Anchored at the event: starts with its first row.
    let ev = root
        .history(HistoryParams {
            session_id: sid.clone(),
            through: None,
            after: None,
            limit: Some(1),
            anchor: Some(Anchor::Event { sequence: 3 }),
            direction: None,
        })
        .expect("event anchor");
    assert_eq!(
        ev.rows[0].position,
        Position {
            source_sequence: 3,
            item_index: 0
        }
    );
    // Source reads the whole long field in char-boundary chunks.
    let mut text = String::new();
    let mut after = None;
    loop {
        let c = root
            .source(SourceParams {
                session_id: sid.clone(),
                through: None,
                position: Position {
                    source_sequence: 3,
                    item_index: 0,
                },
                field: "body".into(),
                after,
                limit: Some(30_001),
            })
            .expect("source");
        assert!(c.text.len() <= 30_001);
        text.push_str(&c.text);
        match c.next_after {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(text, long);
    let tiny = root
        .source(SourceParams {
            session_id: sid.clone(),
            through: None,
            position: Position {
                source_sequence: 3,
                item_index: 0,
            },
            field: "body".into(),
            after: None,
            limit: Some(1),
        })
        .expect("tiny");
    assert_eq!(tiny.text, "é");
    assert_eq!(tiny.next_after, Some(2));
    let e = root
        .source(SourceParams {
            session_id: sid.clone(),
            through: None,
            position: Position {
                source_sequence: 3,
                item_index: 0,
            },
            field: "body".into(),
            after: Some(1),
            limit: None,
        })
        .expect_err("mid-char");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // Watch returns at once when there is news, with kinds and the (empty) queue.
    let w = root
        .watch(WatchParams {
            session_id: sid.clone(),
            after: Some(4),
            timeout_ms: Some(10),
        })
        .expect("watch");
    assert_eq!(
        w.events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        vec!["toolResult", "turnSettled"]
    );
    assert_eq!(w.next_after, 6);
    assert!(w.queue.is_empty());
    let t0 = std::time::Instant::now();
    let w = root
        .watch(WatchParams {
            session_id: sid.clone(),
            after: Some(6),
            timeout_ms: Some(50),
        })
        .expect("watch");
    assert!(w.events.is_empty() && t0.elapsed() >= std::time::Duration::from_millis(45));
    // Stop: settled -> Conflict, unknown -> NotFound.
    let e = root
        .stop(StopParams {
            session_id: sid.clone(),
            operation: "st".into(),
            invocation: inv.clone(),
        })
        .expect_err("settled");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let e = root
        .stop(StopParams {
            session_id: sid.clone(),
            operation: "st".into(),
            invocation: "nope".into(),
        })
        .expect_err("unknown");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    // Reopen: everything comes back, receipts too.
    drop(root);
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(root.revision(&sid).expect("rev"), 6);
    let again = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "send-1".into(),
            text: "hello".into(),
            attachments: vec![],
        })
        .expect("repeat after restart");
    assert_eq!(again, sent);
    assert_eq!(
        append(&root, &sid, "ap-1", &batch).expect("repeat append"),
        r
    );
    assert_eq!(
        root.revision(&sid).expect("rev"),
        6,
        "repeats changed nothing"
    );
    assert_eq!(hist(&root, &sid, None, None, 128, Direction::Forward), page);
}

#[test]
fn invalid_batches_append_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("r"));
    let sid = create(&root, "s");
    for bad in [
        r#"[{"kind":"nope"}]"#,
        r#"[{"kind":"userMessage","text":"x"}]"#,
        r#"[{"kind":"turnSettled","invocation":"i","outcome":"maybe"}]"#,
        r#"[{"kind":"toolResult","invocation":"i","toolCallId":"c","status":"fine","body":"x","raw":1,"bytes":1,"digest":"d"}]"#,
        r#"[{"kind":"toolResult","invocation":"i","toolCallId":"c","status":"ok","body":"x","bytes":1,"digest":"d"}]"#,
    ] {
        assert!(serde_json::from_str::<Vec<Event>>(bad).is_err(), "{bad}");
    }
    let good = r#"{"kind":"userMessage","invocation":"i1","text":"x","attachments":[]}"#;
    let digest_bad = r#"{"kind":"toolResult","invocation":"i1","toolCallId":"c","status":"ok","body":"x","raw":1,"parts":[],"bytes":1,"digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}"#;
    let e = append(&root, &sid, "a", &format!("[{good},{digest_bad}]")).expect_err("digest");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let bytes_bad = tool_result("i1", "c", "xy").replace("\"bytes\":2", "\"bytes\":3");
    let e = append(&root, &sid, "a", &format!("[{good},{bytes_bad}]")).expect_err("bytes");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = append(
        &root,
        &sid,
        "a",
        r#"[{"kind":"sessionCreated","workspace":null,"branch":null}]"#,
    )
    .expect_err("created");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(root.revision(&sid).expect("rev"), 1, "nothing appended");
    // The failed operation stored no receipt: the same operation now applies.
    let r = append(&root, &sid, "a", &format!("[{good}]")).expect("now ok");
    assert_eq!(r.first_sequence, 2);
}

#[test]
fn interactions_and_queue() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("r"));
    let sid = create(&root, "s");
    let sent = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "s1".into(),
            text: "go".into(),
            attachments: vec![],
        })
        .expect("send");
    let inv = sent.invocation;
    append(
        &root,
        &sid,
        "q",
        &format!(r#"[{{"kind":"interactionRequested","interactionId":"q1","invocation":"{inv}","prompt":"Allow?","options":["yes","no"]}}]"#),
    )
    .expect("ask");
    let pend = root.pending_interactions(&sid).expect("pending");
    assert_eq!(pend.len(), 1);
    assert_eq!(pend[0].options.get(), r#"["yes","no"]"#);
    assert_eq!(pend[0].response, None);
    let w = root
        .watch(WatchParams {
            session_id: sid.clone(),
            after: None,
            timeout_ms: None,
        })
        .expect("watch");
    assert_eq!(
        w.queue,
        vec![QueueEntry {
            invocation: inv.clone(),
            sequence: 2
        }]
    );
    assert_eq!(w.pending_interactions.len(), 1);
    let resp: RawJson = serde_json::from_str(r#"{"choice":"yes"}"#).expect("json");
    let r = root
        .respond(RespondParams {
            session_id: sid.clone(),
            operation: "r1".into(),
            interaction_id: "q1".into(),
            response: resp.clone(),
        })
        .expect("respond");
    assert_eq!(r.sequence, 4);
    let e = root
        .respond(RespondParams {
            session_id: sid.clone(),
            operation: "r2".into(),
            interaction_id: "q1".into(),
            response: resp.clone(),
        })
        .expect_err("twice");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let e = root
        .respond(RespondParams {
            session_id: sid.clone(),
            operation: "r3".into(),
            interaction_id: "zz".into(),
            response: resp.clone(),
        })
        .expect_err("unknown");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let i = root.interaction(&sid, "q1").expect("get").expect("some");
    assert_eq!(
        i.response.as_ref().map(|r| r.get()),
        Some(r#"{"choice":"yes"}"#)
    );
    assert!(root.pending_interactions(&sid).expect("pending").is_empty());
    let st = root
        .stop(StopParams {
            session_id: sid.clone(),
            operation: "stop".into(),
            invocation: inv.clone(),
        })
        .expect("stop");
    assert_eq!(st.sequence, 5);
    assert_eq!(
        root.read_event(&sid, 5).expect("ev").kind(),
        "stopRequested"
    );
}

#[test]
fn send_attachments_are_stored_once() {
    use base64::Engine as _;
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("r"));
    let sid = create(&root, "s");
    let data = b"attachment bytes".to_vec();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
    let att = |n: &str| SendAttachment {
        name: n.into(),
        mime_type: "text/plain".into(),
        data_base64: b64.clone(),
    };
    let sent = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "s".into(),
            text: "see".into(),
            attachments: vec![att("a.txt"), att("b.txt")],
        })
        .expect("send");
    let metas = root
        .attachments(AttachmentsParams {
            session_id: sid.clone(),
            invocation: sent.invocation.clone(),
        })
        .expect("meta");
    assert_eq!(metas.len(), 2);
    assert_eq!(
        metas[0].digest,
        logbook_engine::validate::sha256_digest(&data)
    );
    assert_eq!(metas[1].bytes, data.len() as u64);
    let blobs: usize = std::fs::read_dir(tmp.path().join("r/blobs"))
        .expect("ls")
        .map(|d| std::fs::read_dir(d.expect("d").path()).expect("ls").count())
        .sum();
    assert_eq!(blobs, 1, "stored once");
    let all = root
        .read_attachments(ReadAttachmentsParams {
            session_id: sid.clone(),
            invocation: sent.invocation.clone(),
            offset: Some(10),
            limit: Some(12),
        })
        .expect("read");
    let got = base64::engine::general_purpose::STANDARD
        .decode(all.data_base64)
        .expect("b64");
    let mut both = data.clone();
    both.extend_from_slice(&data);
    assert_eq!(got, both[10..22]);
    let e = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "bad".into(),
            text: "x".into(),
            attachments: vec![SendAttachment {
                name: "n".into(),
                mime_type: "m".into(),
                data_base64: "!!".into(),
            }],
        })
        .expect_err("base64");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(root.verify().expect("verify").blobs, 1);
}

#[test]
fn many_sessions_open_lazily() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    Root::init(&dir).expect("init");
    let bulk = RootOptions {
        durability: Durability::NoSyncBulkImport,
        ..RootOptions::default()
    };
    {
        let root = Root::open_with(&dir, bulk.clone()).expect("open");
        for i in 0..300 {
            root.create_session(CreateSessionParams {
                session_id: Some(format!("s{i}")),
                workspace: None,
                operation: format!("c{i}"),
            })
            .expect("create");
        }
    }
    // Open touches no Session directory: make one unreadable-as-a-Session and open still works.
    // (A missing log of a Session holding only its creation is made again from the Root log:
    // its creation wrote it unsynced. A damaged one is reported.)
    std::fs::write(
        dir.join("sessions/s17/log/00000000000000000000.active"),
        b"not a log segment header, longer than thirty-two bytes",
    )
    .expect("damage");
    let t = std::time::Instant::now();
    let root = Root::open_with(&dir, bulk).expect("open");
    let took = t.elapsed();
    assert!(
        took < std::time::Duration::from_secs(2),
        "open of 300 Sessions took {took:?}"
    );
    assert_eq!(root.revision("s5").expect("rev"), 1);
    assert!(
        root.revision("s17").is_err(),
        "the damaged Session fails alone"
    );
    assert_eq!(root.revision("s299").expect("rev"), 1);
}

#[test]
fn logs_of_another_version_are_refused_by_number() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    {
        let root = root_at(&dir);
        create(&root, "s");
    }
    let seg = dir.join("sessions/s/log/00000000000000000000.active");
    let mut b = std::fs::read(&seg).expect("read");
    b[8..12].copy_from_slice(&9u32.to_le_bytes());
    std::fs::write(&seg, &b).expect("write");
    let root = Root::open(&dir).expect("the Root opens; Sessions open lazily");
    let e = root.revision("s").expect_err("session log v9");
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
    assert!(e.to_string().contains('9'), "{e}");
    drop(root);
    assert_eq!(std::fs::read(&seg).expect("read"), b, "nothing rewritten");
    // The Root log too.
    let rl = dir.join("root-log/00000000000000000000.active");
    let mut b = std::fs::read(&rl).expect("read");
    // (active segments are at version 2 since the preallocated zero region; 3 is newer)
    b[8..12].copy_from_slice(&3u32.to_le_bytes());
    std::fs::write(&rl, &b).expect("write");
    let e = Root::open(&dir).expect_err("root log v3");
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
}

#[test]
fn end_waits_answers_pending_watches_as_their_timeout_would() {
    // A server whose input ended must not sit out a 300 s watch holding the Root.
    let tmp = tempfile::tempdir().expect("tmp");
    let root = std::sync::Arc::new(root_at(&tmp.path().join("r")));
    create(&root, "s");
    let watch = |root: &Root, timeout_ms| {
        root.watch(WatchParams {
            session_id: "s".into(),
            after: Some(1),
            timeout_ms: Some(timeout_ms),
        })
        .expect("watch")
    };
    let watch_diag = |root: &Root, timeout_ms| {
        root.watch_diagnostics(WatchDiagnosticsParams {
            session_id: "s".into(),
            after: Some(0),
            timeout_ms: Some(timeout_ms),
        })
        .expect("watchDiagnostics")
    };
    let timed_out = watch(&root, 0);
    let diag_timed_out = watch_diag(&root, 0);
    let (r1, r2) = (root.clone(), root.clone());
    let (wtx, wrx) = std::sync::mpsc::channel();
    let (dtx, drx) = std::sync::mpsc::channel();
    std::thread::spawn(move || wtx.send(watch(&r1, WATCH_TIMEOUT_MS_MAX)));
    std::thread::spawn(move || dtx.send(watch_diag(&r2, WATCH_TIMEOUT_MS_MAX)));
    std::thread::sleep(std::time::Duration::from_millis(200));
    root.end_waits();
    // Seconds, not the 300 s timeout (the slack is for a loaded machine).
    let soon = std::time::Duration::from_secs(10);
    assert_eq!(wrx.recv_timeout(soon).expect("watch answered"), timed_out);
    assert_eq!(
        drx.recv_timeout(soon).expect("watchDiagnostics answered"),
        diag_timed_out
    );
    // A wait that starts afterwards answers at once too.
    let root2 = root.clone();
    let (ltx, lrx) = std::sync::mpsc::channel();
    std::thread::spawn(move || ltx.send(watch(&root2, WATCH_TIMEOUT_MS_MAX)));
    assert_eq!(
        lrx.recv_timeout(soon).expect("a later watch answered"),
        timed_out
    );
    // Everything else keeps working, and a wait whose condition holds still reports it.
    append(
        &root,
        "s",
        "after-end",
        r#"[{"kind": "stopRequested", "invocation": "i"}]"#,
    )
    .expect("append after end_waits");
    assert_eq!(watch(&root, WATCH_TIMEOUT_MS_MAX).events.len(), 1);
}

#[test]
fn watch_after_beyond_the_revision_is_refused() {
    // `after` = u64::MAX overflowed `after + 1` (corrupt "no kind for event 0", or a panic
    // in debug builds); any `after` past the revision waited for events that never come
    // under that number. Both are a caller's mistake: invalid_argument naming the revision.
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("r"));
    create(&root, "s");
    let watch = |after: u64| {
        root.watch(WatchParams {
            session_id: "s".into(),
            after: Some(after),
            timeout_ms: Some(0),
        })
    };
    let diag = |after: u64| {
        root.watch_diagnostics(WatchDiagnosticsParams {
            session_id: "s".into(),
            after: Some(after),
            timeout_ms: Some(0),
        })
    };
    for after in [u64::MAX, u64::MAX - 1, 2] {
        let e = watch(after).expect_err("after past the revision");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("revision 1"), "{e}");
    }
    for after in [u64::MAX, 1] {
        let e = diag(after).expect_err("after past the diagnostics revision");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("revision 0"), "{e}");
    }
    // At the revision is the ordinary "wait for the next one".
    assert_eq!(watch(1).expect("after = revision").next_after, 1);
    assert_eq!(diag(0).expect("after = revision").revision, 0);
}
