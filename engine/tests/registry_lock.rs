//! A createSession between its Root-log record and its directory rename holds no lock that
//! requests on other Sessions need (issue: every request waited behind a createSession's
//! syncs). Its own test binary: it sets `LOGBOOK_PAUSE_AT` for the whole process.

mod common;
use common::*;
use std::sync::{mpsc, Arc};
use std::time::Duration;

#[test]
fn requests_on_other_sessions_do_not_wait_for_a_create() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    let root = Arc::new(root_at(&dir));
    create(&root, "a");
    std::env::set_var("LOGBOOK_PAUSE_AT", "create-committed");
    let flag = dir.join("tmp").join("paused-create-committed");
    let creator = {
        let root = Arc::clone(&root);
        std::thread::spawn(move || create(&root, "b"))
    };
    while !flag.exists() {
        std::thread::sleep(Duration::from_millis(2));
    }
    // The create is paused after its commit: other Sessions must still answer.
    let (tx, rx) = mpsc::channel();
    {
        let root = Arc::clone(&root);
        std::thread::spawn(move || {
            let rev = root.revision("a");
            let listed = root.sessions().map(|l| l.len());
            let _ = tx.send((rev.is_ok(), listed.ok()));
        });
    }
    let answered = rx.recv_timeout(Duration::from_secs(20));
    // A repeat of the same createSession waits for the first, then gets its receipt.
    std::fs::remove_file(&flag).expect("resume the create");
    assert_eq!(creator.join().expect("creator"), "b");
    let (rev_ok, listed) = answered.expect("requests on Session a waited for the create of b");
    assert!(rev_ok);
    assert_eq!(
        listed,
        Some(1),
        "the Session being made is not listed before it is whole"
    );
    assert_eq!(root.sessions().expect("list").len(), 2);
}
