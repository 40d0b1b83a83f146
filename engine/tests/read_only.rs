//! A reader beside the writer (`Root::open_read_only`): it takes no lock, writes nothing,
//! refuses every mutation, and sees what the writer commits (new Sessions, appends, titles,
//! rolled and sealed segments) on its next read; every page it answers is the writer's page
//! under the same fence.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use logbook_engine::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SEEN_WITHIN: Duration = Duration::from_secs(2);

fn send(root: &Root, sid: &str, op: &str, text: &str) -> u64 {
    root.send(SendParams {
        session_id: sid.into(),
        operation: op.into(),
        text: text.into(),
        attachments: vec![],
    })
    .unwrap()
    .sequence
}

fn search(root: &Root, sid: &str, query: &str, through: Option<u64>) -> SearchPage {
    root.search(SearchParams {
        session_id: sid.into(),
        query: query.into(),
        case_sensitive: None,
        whole_word: None,
        through,
        after: None,
        limit: Some(1000),
    })
    .unwrap()
}

/// Every file under `dir` with its length and modification time.
fn tree(dir: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert(
                e.path().display().to_string(),
                (m.len(), m.modified().unwrap()),
            );
        }
    }
    out
}

/// Waits until `f` holds, for at most `max`; returns how long it took. The bounds here are
/// loose (a loaded test machine may stall a thread for a while): the 100 ms promise is
/// measured, as a percentile, by `api/tests/read_only.rs`.
#[track_caller]
fn within(max: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < max, "not seen within {max:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    t.elapsed()
}

#[test]
fn a_reader_sees_the_writers_commits_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let writer = root_at(dir.path());
    create(&writer, "s1");
    send(&writer, "s1", "op-1", "the first words about tombstones");
    writer.sync_indexes().unwrap();
    let reader = Root::open_read_only(dir.path()).unwrap();
    assert!(reader.is_read_only());
    let before = hist(&writer, "s1", None, None, 100, Direction::Forward);
    assert_eq!(
        hist(&reader, "s1", None, None, 100, Direction::Forward),
        before
    );

    // Appends, a new Session and a title: each seen well within 100 ms.
    let seq = send(
        &writer,
        "s1",
        "op-2",
        "a second message mentions compaction",
    );
    let took = within(SEEN_WITHIN, || reader.revision("s1").unwrap() >= seq);
    eprintln!("append seen after {took:?}");
    assert_eq!(
        hist(&reader, "s1", Some(seq), None, 100, Direction::Forward),
        hist(&writer, "s1", Some(seq), None, 100, Direction::Forward)
    );
    assert_eq!(
        search(&reader, "s1", "compaction", Some(seq)),
        search(&writer, "s1", "compaction", Some(seq))
    );
    create(&writer, "s2");
    send(&writer, "s2", "op-3", "another conversation");
    within(SEEN_WITHIN, || reader.revision("s2").is_ok_and(|r| r >= 2));
    writer
        .set_title(SetTitleParams {
            session_id: "s1".into(),
            operation: "op-4".into(),
            title: "Tombstones".into(),
        })
        .unwrap();
    within(SEEN_WITHIN, || {
        reader
            .sessions_page(SessionsParams::default())
            .unwrap()
            .sessions
            .iter()
            .any(|s| s.title.as_deref() == Some("Tombstones"))
    });
    let listed: Vec<String> = reader
        .sessions_page(SessionsParams::default())
        .unwrap()
        .sessions
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let all = reader
        .search_root(SearchRootParams {
            query: "conversation".into(),
            case_sensitive: None,
            whole_word: None,
            scope: None,
            after: None,
            limit: None,
        })
        .unwrap();
    assert_eq!(all.hits.len(), 1, "{all:?}");

    // A layered fork made by the writer reads the same through the reader.
    create(&writer, "s3");
    append(
        &writer,
        "s3",
        "op-turn",
        r#"[{"kind":"userMessage","invocation":"i1","text":"words to fork","attachments":[]},
            {"kind":"turnSettled","invocation":"i1","outcome":"completed"}]"#,
    )
    .unwrap();
    let fork = writer
        .fork(ForkParams {
            session_id: "s3".into(),
            operation: "op-fork".into(),
            from: ForkFrom::All,
            revision: writer.revision("s3").unwrap(),
        })
        .unwrap();
    let f1 = fork.session_id.as_str();
    within(SEEN_WITHIN, || reader.revision(f1).is_ok());
    assert_eq!(
        hist(&reader, f1, None, None, 100, Direction::Forward),
        hist(&writer, f1, None, None, 100, Direction::Forward)
    );

    // A watch on the reader wakes for the writer's append.
    let rev = reader.revision("s2").unwrap();
    let waiter = std::thread::scope(|scope| {
        let w = scope.spawn(|| {
            reader
                .watch(WatchParams {
                    session_id: "s2".into(),
                    after: Some(rev),
                    timeout_ms: Some(5_000),
                })
                .unwrap()
        });
        std::thread::sleep(Duration::from_millis(50));
        send(&writer, "s2", "op-watch", "wakes the watch");
        let t = Instant::now();
        let r = w.join().unwrap();
        (r, t.elapsed())
    });
    assert!(
        waiter.0.events.iter().any(|e| e.sequence > rev),
        "{waiter:?}"
    );
    assert!(waiter.1 < SEEN_WITHIN, "{waiter:?}");

    // Every mutation is refused, and names why.
    let refused = reader
        .send(SendParams {
            session_id: "s1".into(),
            operation: "op-5".into(),
            text: "no".into(),
            attachments: vec![],
        })
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::PermissionDenied);
    assert!(refused.to_string().contains("read-only"), "{refused}");
    assert!(reader
        .create_session(CreateSessionParams {
            session_id: Some("s3".into()),
            workspace: None,
            operation: "op-6".into(),
        })
        .is_err());

    // No lock: the writer closes and opens again while the reader is open.
    drop(writer);
    let writer = Root::open(dir.path()).unwrap();
    send(&writer, "s1", "op-7", "after the writer came back");
    drop(writer);
    within(SEEN_WITHIN, || reader.revision("s1").unwrap() >= 5);

    // With the writer gone, reading changes no file.
    let files = tree(dir.path());
    let reader2 = Root::open_read_only(dir.path()).unwrap();
    for id in ["s1", "s2"] {
        hist(&reader2, id, None, None, 100, Direction::Backward);
        search(&reader2, id, "the", None);
    }
    reader2.sessions_page(SessionsParams::default()).unwrap();
    drop(reader2);
    drop(reader);
    assert_eq!(tree(dir.path()), files, "the readers changed nothing");
}

#[test]
fn a_reader_under_load_answers_the_writers_pages() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments: the writer rolls and seals while the reader reads.
    let options = RootOptions {
        segment_bytes_max: 64 << 10,
        ..RootOptions::default()
    };
    let writer = Arc::new(Root::open_or_init_with(dir.path(), options).unwrap());
    for s in 0..4 {
        create(&writer, &format!("s{s}"));
    }
    let reader = Root::open_read_only(dir.path()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let w = {
        let (writer, done) = (Arc::clone(&writer), Arc::clone(&done));
        std::thread::spawn(move || {
            for i in 0..600 {
                let sid = format!("s{}", i % 4);
                let text = format!("message {i} about segment number {} ", i % 17).repeat(8);
                send(&writer, &sid, &format!("op-{i}"), &text);
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut checked = 0;
    while !done.load(Ordering::Acquire) {
        for s in 0..4 {
            let sid = format!("s{s}");
            // The reader may see a batch a moment before the writer's fdatasync returns and it
            // acknowledges it: compare under a fence both have.
            let rev = reader
                .revision(&sid)
                .unwrap()
                .min(writer.revision(&sid).unwrap());
            let page = hist(&reader, &sid, Some(rev), None, 50, Direction::Backward);
            assert_eq!(
                page,
                hist(&writer, &sid, Some(rev), None, 50, Direction::Backward)
            );
            assert_eq!(
                search(&reader, &sid, "segment number 5", Some(rev)),
                search(&writer, &sid, "segment number 5", Some(rev))
            );
            checked += 1;
        }
    }
    w.join().unwrap();
    for s in 0..4 {
        let sid = format!("s{s}");
        let rev = writer.revision(&sid).unwrap();
        within(SEEN_WITHIN, || reader.revision(&sid).unwrap() == rev);
        assert_eq!(
            hist(&reader, &sid, None, None, 1000, Direction::Forward),
            hist(&writer, &sid, None, None, 1000, Direction::Forward)
        );
    }
    assert!(checked > 0);
}
