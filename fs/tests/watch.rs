mod common;

use std::time::{Duration, Instant};

use common::*;
use logbook_fs::{WatchEvent, WatcherMode, Workspace, WorkspaceOptions};

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(5);

fn open(root: &std::path::Path, hidden: &[&[u8]], watcher: WatcherMode) -> Workspace {
    let hidden: Vec<Vec<u8>> = hidden.iter().map(|h| h.to_vec()).collect();
    let options = WorkspaceOptions {
        watcher,
        ..WorkspaceOptions::default()
    };
    Workspace::open_with(root, &hidden, options).expect("open")
}

const WATCHERS: [WatcherMode; 2] = [WatcherMode::Auto, WatcherMode::Poll];

#[test]
fn changes_are_reported_once_coalesced_then_timeout() {
    for watcher in WATCHERS {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(t.path().join("d")).expect("mkdir");
        let ws = open(t.path(), &[], watcher);
        let mut w = ws.watch(&rel(b"d")).expect("watch");
        assert_eq!(w.is_polling(), watcher == WatcherMode::Poll);
        let listed = ws.list(&rel(b"d"), None).expect("list").directory_identity;
        assert_eq!(w.directory_identity(), listed);
        assert_eq!(w.next(SHORT).expect("next"), WatchEvent::Timeout);
        for i in 0..50 {
            std::fs::write(t.path().join("d").join(format!("f{i}")), b"x").expect("write");
        }
        assert_eq!(
            w.next(LONG).expect("next"),
            WatchEvent::Changed,
            "{watcher:?}"
        );
        assert_eq!(
            w.next(SHORT).expect("next"),
            WatchEvent::Timeout,
            "coalesced {watcher:?}"
        );
        // A change while waiting wakes the waiter.
        let p = t.path().join("d/late");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            std::fs::write(p, b"late").expect("write");
        });
        let started = Instant::now();
        assert_eq!(w.next(LONG).expect("next"), WatchEvent::Changed);
        assert!(started.elapsed() < Duration::from_secs(2));
        writer.join().expect("writer");
        // Growing a file changes its listed size: reported.
        std::thread::sleep(Duration::from_millis(20));
        let _ = w.next(Duration::ZERO);
        std::fs::write(t.path().join("d/f1"), b"longer now").expect("write");
        assert_eq!(
            w.next(LONG).expect("next"),
            WatchEvent::Changed,
            "{watcher:?}"
        );
        w.close();
    }
}

#[test]
fn hidden_children_do_not_wake_the_watch() {
    for watcher in WATCHERS {
        let t = tempfile::tempdir().expect("tempdir");
        let ws = open(t.path(), &[b"state.db"], watcher);
        std::fs::create_dir(t.path().join(".logbook")).expect("mkdir");
        let mut w = ws.watch(&logbook_fs::RelPath::root()).expect("watch");
        std::fs::write(t.path().join("state.db"), b"x").expect("write");
        std::fs::write(t.path().join(".logbook/seg"), b"x").expect("write");
        std::fs::write(t.path().join(".git"), b"x").expect("write");
        assert_eq!(
            w.next(SHORT).expect("next"),
            WatchEvent::Timeout,
            "{watcher:?}"
        );
        std::fs::write(t.path().join("visible"), b"x").expect("write");
        assert_eq!(
            w.next(LONG).expect("next"),
            WatchEvent::Changed,
            "{watcher:?}"
        );
    }
}

fn unavailable_after(watcher: WatcherMode, act: impl FnOnce(&std::path::Path)) {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(t.path().join("p/d")).expect("mkdir");
    std::fs::write(t.path().join("p/d/f"), b"x").expect("write");
    let ws = open(t.path(), &[], watcher);
    let mut w = ws.watch(&rel(b"p/d")).expect("watch");
    act(t.path());
    let deadline = Instant::now() + LONG;
    loop {
        match w.next(LONG).expect("next") {
            WatchEvent::Unavailable => break,
            WatchEvent::Changed => assert!(Instant::now() < deadline, "never became unavailable"),
            WatchEvent::Timeout => panic!("timeout instead of unavailable ({watcher:?})"),
        }
    }
    assert_eq!(
        w.next(Duration::ZERO).expect("next"),
        WatchEvent::Unavailable,
        "sticky"
    );
}

#[test]
fn deleted_directory_is_unavailable() {
    for watcher in WATCHERS {
        unavailable_after(watcher, |r| {
            std::fs::remove_dir_all(r.join("p/d")).expect("rm")
        });
    }
}

#[test]
fn moved_directory_is_unavailable() {
    for watcher in WATCHERS {
        unavailable_after(watcher, |r| {
            std::fs::rename(r.join("p/d"), r.join("p/moved")).expect("mv")
        });
    }
}

#[test]
fn replaced_directory_is_unavailable() {
    for watcher in WATCHERS {
        unavailable_after(watcher, |r| {
            std::fs::create_dir(r.join("p/new")).expect("mkdir");
            std::fs::rename(r.join("p/d"), r.join("p/old")).expect("mv");
            std::fs::rename(r.join("p/new"), r.join("p/d")).expect("mv");
        });
    }
}

#[test]
fn parent_moved_or_swapped_for_a_link_is_unavailable() {
    for watcher in WATCHERS {
        unavailable_after(watcher, |r| {
            std::fs::rename(r.join("p"), r.join("q")).expect("mv")
        });
        unavailable_after(watcher, |r| {
            std::fs::rename(r.join("p"), r.join("q")).expect("mv");
            std::os::unix::fs::symlink("q", r.join("p")).expect("symlink");
        });
    }
}

#[test]
fn watch_refuses_files_links_and_missing() {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::write(t.path().join("f"), b"x").expect("write");
    std::fs::create_dir(t.path().join("d")).expect("mkdir");
    std::os::unix::fs::symlink("d", t.path().join("l")).expect("symlink");
    let ws = open(t.path(), &[], WatcherMode::Auto);
    use logbook_fs::ErrorKind;
    assert_eq!(
        ws.watch(&rel(b"f")).expect_err("file").kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        ws.watch(&rel(b"l")).expect_err("link").kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(
        ws.watch(&rel(b"missing")).expect_err("missing").kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn a_closer_wakes_a_waiting_next_and_ends_the_watch() {
    for watcher in WATCHERS {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(t.path().join("d")).expect("mkdir");
        let ws = open(t.path(), &[], watcher);
        let mut w = ws.watch(&rel(b"d")).expect("watch");
        let closer = w.closer();
        let waiter = std::thread::spawn(move || {
            let started = Instant::now();
            let event = w.next(Duration::from_secs(30)).expect("next");
            (event, started.elapsed(), w)
        });
        std::thread::sleep(Duration::from_millis(200));
        closer.close();
        let (event, waited, mut w) = waiter.join().expect("waiter");
        assert_eq!(event, WatchEvent::Unavailable, "{watcher:?}");
        assert!(closer.is_closed());
        assert!(
            waited < Duration::from_secs(5),
            "{watcher:?}: woken after {waited:?}"
        );
        // Closed for good, even with changes queued.
        std::fs::write(t.path().join("d/after"), b"x").expect("write");
        assert_eq!(w.next(LONG).expect("next"), WatchEvent::Unavailable);
    }
}
