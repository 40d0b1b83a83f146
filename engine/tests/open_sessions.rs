//! Open Sessions are a cache: bounded by count, closed cleanly when idle, reopened on demand,
//! never closed under a caller. Also measures what one open Session holds in descriptors
//! (the budget's [`SESSION_DESCRIPTORS`]).
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use logbook_engine::*;
use std::sync::Mutex;

/// The descriptor count is per process: tests of this file that open files take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn send(root: &Root, sid: &str, op: &str, text: &str) -> SendResult {
    root.send(SendParams {
        session_id: sid.into(),
        operation: op.into(),
        text: text.into(),
        attachments: vec![],
    })
    .unwrap()
}

fn bodies(root: &Root, sid: &str) -> Vec<String> {
    let page = root
        .history(HistoryParams {
            session_id: sid.into(),
            through: None,
            after: None,
            limit: Some(100),
            anchor: None,
            direction: Some(Direction::Forward),
        })
        .unwrap();
    page.rows
        .iter()
        .filter_map(|r| r.fields.get("body").map(|f| f.text.clone()))
        .collect()
}

fn options(open_max: usize) -> RootOptions {
    RootOptions {
        open_sessions_max: open_max,
        // The background flusher holds the Session it syncs, which the cache then may not
        // close; the bound these tests count is the one requests keep.
        index_sync_interval: std::time::Duration::from_secs(3600),
        ..RootOptions::default()
    }
}

#[test]
fn one_open_session_holds_at_most_session_descriptors() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open_or_init_with(dir.path(), options(64)).unwrap();
    for i in 0..4 {
        create(&root, &format!("s{i}"));
    }
    root.settle_spares();
    let mut most = 0;
    for i in 0..4 {
        let sid = format!("s{i}");
        let before = open_fds();
        send(&root, &sid, "op-1", "hello");
        bodies(&root, &sid);
        root.sync_indexes().unwrap();
        let held = open_fds().saturating_sub(before);
        most = most.max(held);
    }
    eprintln!("one open Session holds {most} descriptors");
    assert!(
        most as u64 <= SESSION_DESCRIPTORS,
        "an open Session holds {most} descriptors; SESSION_DESCRIPTORS says {SESSION_DESCRIPTORS}"
    );
}

#[test]
fn the_cache_closes_idle_sessions_and_reopens_them_whole() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    const OPEN_MAX: usize = 3;
    const SESSIONS: usize = 24;
    {
        let root = Root::open_or_init_with(dir.path(), options(OPEN_MAX)).unwrap();
        let baseline = open_fds();
        for i in 0..SESSIONS {
            let sid = create(&root, &format!("s{i}"));
            send(&root, &sid, "op-1", &format!("first {i}"));
            assert!(root.open_session_count() <= OPEN_MAX);
        }
        // Closed Sessions gave their descriptors back.
        assert!(
            open_fds() <= baseline + OPEN_MAX * SESSION_DESCRIPTORS as usize + 2,
            "{} descriptors open, {baseline} before",
            open_fds()
        );
        for i in 0..SESSIONS {
            let sid = format!("s{i}");
            send(&root, &sid, "op-2", &format!("second {i}"));
            // A repeated operation is answered from its receipt, across a close and reopen.
            assert_eq!(send(&root, &sid, "op-1", &format!("first {i}")).sequence, 2);
            assert_eq!(
                bodies(&root, &sid),
                [format!("first {i}"), format!("second {i}")]
            );
            assert!(root.open_session_count() <= OPEN_MAX);
        }
        let report = root.verify().unwrap();
        assert!(report.damage.is_empty(), "{:?}", report.damage);
        assert_eq!(report.sessions, SESSIONS as u64);
    }
    let root = Root::open_with(dir.path(), options(OPEN_MAX)).unwrap();
    for i in (0..SESSIONS).rev() {
        assert_eq!(
            bodies(&root, &format!("s{i}")),
            [format!("first {i}"), format!("second {i}")]
        );
    }
}

#[test]
fn a_session_in_use_is_not_closed() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = std::sync::Arc::new(Root::open_or_init_with(dir.path(), options(1)).unwrap());
    let watched = create(&root, "watched");
    let waiter = {
        let root = std::sync::Arc::clone(&root);
        let sid = watched.clone();
        std::thread::spawn(move || {
            root.watch(WatchParams {
                session_id: sid,
                after: Some(1),
                timeout_ms: Some(20_000),
            })
            .unwrap()
        })
    };
    // The watch holds its Session open while it waits.
    while root.open_session_count() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    for i in 0..8 {
        let sid = create(&root, &format!("other{i}"));
        send(&root, &sid, "op-1", "x");
    }
    // Had the watched Session been closed and opened again, this append would reach a new
    // object and the watch would wait out its timeout.
    let started = std::time::Instant::now();
    send(&root, &watched, "op-1", "wake");
    let seen = waiter.join().unwrap();
    assert_eq!(seen.next_after, 2);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn search_works_across_close_and_reopen() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open_or_init_with(dir.path(), options(2)).unwrap();
    for i in 0..6 {
        let sid = create(&root, &format!("s{i}"));
        send(&root, &sid, "op-1", &format!("needle{i} in a haystack"));
    }
    for i in 0..6 {
        let page = root
            .search(SearchParams {
                session_id: format!("s{i}"),
                query: format!("needle{i}"),
                case_sensitive: None,
                whole_word: None,
                through: None,
                after: None,
                limit: None,
            })
            .unwrap();
        assert_eq!(page.hits.len(), 1, "s{i}: {page:?}");
    }
}

/// A Session left fully synced (just created, or closed by the cache or the Root with nothing
/// unsynced) reopens without the log's recovery fdatasync: each durable send costs its one
/// commit sync, in this process and in the next (its logs carry no `unsynced` mark).
#[test]
fn a_session_left_synced_reopens_without_a_sync() {
    use logbook_log::io::{FaultyFs, Op};
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (fs, faults) = FaultyFs::new();
    let opts = || RootOptions {
        log_fs: Some(std::sync::Arc::new(fs.clone())),
        ..options(1)
    };
    let root = Root::open_or_init_with(dir.path(), opts()).unwrap();
    for sid in ["a", "b"] {
        create(&root, sid);
    }
    let syncs = || faults.count(Op::Sync);
    let mut before = syncs();
    // a: opened for the first time since its creation; b: likewise (a is closed for it);
    // a again (b closed): each send is one sync, its commit.
    for (i, sid) in ["a", "b", "a", "b"].into_iter().enumerate() {
        send(&root, sid, &format!("op-{i}"), &format!("text {i}"));
        assert_eq!(root.open_session_count(), 1);
        assert_eq!(syncs(), before + 1, "send {i} to {sid}");
        before = syncs();
    }
    // One `unsynced` mark for the Root while it writes, none of the logs' own.
    let mark = logbook_log::UNSYNCED_MARK;
    assert!(
        dir.path().join(mark).exists(),
        "the Root's mark, made by its first write"
    );
    for sid in ["a", "b"] {
        let log = dir.path().join("sessions").join(sid).join("log");
        assert!(!log.join(mark).exists(), "{sid} makes no mark of its own");
    }
    drop(root);
    assert!(
        !dir.path().join(mark).exists(),
        "a clean close removes the Root's mark"
    );
    let root = Root::open_with(dir.path(), opts()).unwrap();
    let before = syncs();
    send(&root, "a", "op-new", "after a reopen of the Root");
    assert_eq!(
        syncs(),
        before + 1,
        "a first open after a clean close syncs nothing"
    );
    assert_eq!(
        bodies(&root, "a"),
        ["text 0", "text 2", "after a reopen of the Root"]
    );
}

/// A Root with Session "a" holding one message, closed; and where its `unsynced` mark goes.
fn closed_root_with_one_message() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    {
        let root = Root::open_or_init_with(dir.path(), options(4)).unwrap();
        create(&root, "a");
        send(&root, "a", "op", "text");
    }
    let mark = dir.path().join(logbook_log::UNSYNCED_MARK);
    (dir, mark)
}

/// A Root opened only to read writes nothing: its writer's `unsynced` mark is made by the
/// first write, so an open, a read and a close leave the Root as they found it.
#[test]
fn a_root_that_only_reads_makes_no_mark() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (dir, mark) = closed_root_with_one_message();
    assert!(!mark.exists(), "removed by the clean close");
    let root = Root::open_with(dir.path(), options(4)).unwrap();
    assert_eq!(bodies(&root, "a"), ["text"]);
    assert!(!mark.exists(), "a read makes no mark");
    drop(root);
    assert!(!mark.exists());
}

/// A mark left by a writer that died (here made by hand) has the next writer sync the file
/// system before it opens any log; that writer's clean close then removes it, even when it
/// only read.
#[test]
fn a_mark_left_by_a_writer_that_died_goes_with_the_next_clean_close() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (dir, mark) = closed_root_with_one_message();
    std::fs::write(&mark, b"").unwrap();
    let root = Root::open_with(dir.path(), options(4)).unwrap();
    assert_eq!(bodies(&root, "a"), ["text"]);
    assert!(mark.exists(), "kept while the Root is open");
    drop(root);
    assert!(
        !mark.exists(),
        "everything was synced at the open: the close removes it"
    );
}

/// How many hits a Root-wide search of `query` over `ids` (None: every Session) finds.
fn search_all(root: &Root, query: &str, ids: Option<&[String]>) -> usize {
    let scope = ids.map(|ids| SearchScope {
        session_ids: Some(ids.to_vec()),
        ..SearchScope::default()
    });
    search_root_all(root, query, scope, 1024).len()
}

/// A Root-wide search over more Sessions than the cache holds keeps the Sessions in use open
/// (it does not push them out), and a repeated search over fewer Sessions than the cache
/// holds finds them open from its second pass on, even right after a pass over every Session:
/// Sessions a scan opens go first, in the order it opened them. With least-recently-used
/// order alone the Sessions in use (the newest, so visited first) are closed by the opens
/// after them; with the last opened going first, the Sessions of the earlier full pass stay
/// and the small search reopens its own every time.
#[test]
fn a_root_wide_search_keeps_the_sessions_in_use_and_a_repeated_small_one_finds_its_own() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    const OPEN_MAX: usize = 16;
    const SESSIONS: usize = 80;
    {
        let root = Root::open_or_init_with(dir.path(), options(OPEN_MAX)).unwrap();
        for i in 0..SESSIONS {
            let sid = create(&root, &format!("s{i}"));
            send(&root, &sid, "op-1", &format!("needle in {i}"));
        }
    }
    let root = Root::open_with(dir.path(), options(OPEN_MAX)).unwrap();
    // The newest Sessions, visited first by the search.
    let in_use = ["s79", "s78", "s77", "s76"];
    for sid in in_use {
        bodies(&root, sid);
        assert!(root.session_is_open(sid));
    }
    for pass in 0..2 {
        assert_eq!(search_all(&root, "needle", None), SESSIONS);
        for sid in in_use {
            assert!(
                root.session_is_open(sid),
                "{sid} was closed by search {pass}"
            );
        }
    }
    // A search over 8 older Sessions, twice: the second finds them open.
    let scope: Vec<String> = (20..28).map(|i| format!("s{i}")).collect();
    assert_eq!(search_all(&root, "needle", Some(&scope)), scope.len());
    let before = root.sessions_opened();
    assert_eq!(search_all(&root, "needle", Some(&scope)), scope.len());
    let opened = root.sessions_opened() - before;
    assert_eq!(
        opened, 0,
        "the repeated small search opened {opened} Sessions"
    );
    for sid in in_use {
        assert!(
            root.session_is_open(sid),
            "{sid} was closed by the small search"
        );
    }
}
