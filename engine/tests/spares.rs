//! Spare Session directories (docs/format.md, "Making a Session"): made ahead of createSession
//! and durable before one is taken, so a creation that takes one writes its `sessionCreated`
//! into a file whose name is durable already, and its first commit syncs no directory: the
//! Root-log record names the spare, so a Session whose rename into place a crash lost is
//! found under the spare's name.

mod common;
use common::*;
use logbook_engine::*;
use logbook_log::io::{FaultyFs, Op};
use std::path::Path;
use std::sync::Arc;

/// The spare directories in `sessions/`, sorted.
fn spares(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("sessions"))
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".spare-"))
        .collect();
    names.sort();
    names
}

/// Creates Session `id` from a spare: waits for the maker first, so one is ready. Returns the
/// spare's name.
fn create_from_spare(root: &Root, dir: &Path, id: &str) -> String {
    root.settle_spares();
    let before = spares(dir);
    assert!(!before.is_empty(), "spares are ready after a creation");
    create(root, id);
    let after = spares(dir);
    let taken: Vec<&String> = before.iter().filter(|n| !after.contains(n)).collect();
    assert_eq!(
        taken.len(),
        1,
        "{id} took one spare: {before:?} -> {after:?}"
    );
    taken[0].clone()
}

#[test]
fn a_creation_from_a_spare_syncs_no_directory_at_its_first_commit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let (fs, faults) = FaultyFs::new();
    let root = Root::open_or_init_with(
        dir,
        RootOptions {
            log_fs: Some(Arc::new(fs)),
            ..RootOptions::default()
        },
    )
    .expect("root");
    // The first creation finds no spare: it builds its directory, and starts the maker.
    create(&root, "built");
    create_from_spare(&root, dir, "spare");
    let dirs = || faults.count(Op::SyncDir);
    let before = dirs();
    try_send(&root, "spare", "m1", "first").expect("send");
    assert_eq!(dirs(), before, "no directory is synced");
    let before = dirs();
    try_send(&root, "built", "m1", "first").expect("send");
    assert_eq!(dirs() - before, 3, "log/, the Session's and sessions/");
    let before = dirs();
    try_send(&root, "spare", "m2", "second").expect("send");
    assert_eq!(dirs(), before, "later commits sync no directory");
    for id in ["spare", "built"] {
        let created = serde_json::to_value(root.read_event(id, 1).expect("event")).expect("json");
        assert_eq!(created["workspace"], "/work/space", "{id}: {created}");
    }
    assert_eq!(
        event_kinds(&root, "spare"),
        ["sessionCreated", "userMessage", "userMessage"]
    );
    drop(root);
    assert!(
        spares(dir).is_empty(),
        "the close removes the spares not taken"
    );
    let root = root_at(dir);
    assert_eq!(
        event_kinds(&root, "spare"),
        ["sessionCreated", "userMessage", "userMessage"]
    );
}

#[test]
fn a_session_whose_rename_was_lost_is_found_under_its_spares_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let sessions = dir.join("sessions");
    let (middle, last) = {
        let root = root_at(dir);
        create(&root, "first");
        let middle = create_from_spare(&root, dir, "middle");
        let last = create_from_spare(&root, dir, "last");
        (middle, last)
    };
    // A power loss after the records, before the renames reached the disk; the middle one's
    // `sessionCreated` (written unsynced) was lost too, leaving its segment's header.
    std::fs::File::options()
        .write(true)
        .open(sessions.join("middle/log/00000000000000000000.active"))
        .and_then(|f| f.set_len(32))
        .expect("cut");
    std::fs::rename(sessions.join("middle"), sessions.join(&middle)).expect("unplace");
    std::fs::rename(sessions.join("last"), sessions.join(&last)).expect("unplace");
    // The open finishes the last registration; the other is finished by its first use.
    let root = root_at(dir);
    assert!(sessions.join("last").is_dir() && !sessions.join(&last).exists());
    assert_eq!(event_kinds(&root, "middle"), ["sessionCreated"]);
    assert!(!sessions.join(&middle).exists());
    try_send(&root, "middle", "m1", "after").expect("send");
    assert_eq!(
        event_kinds(&root, "middle"),
        ["sessionCreated", "userMessage"]
    );
    assert_eq!(event_kinds(&root, "last"), ["sessionCreated"]);
    let created = serde_json::to_value(root.read_event("middle", 1).expect("event")).expect("json");
    assert_eq!(created["workspace"], "/work/space", "{created}");
    drop(root);
    let root = root_at(dir);
    assert_eq!(
        event_kinds(&root, "middle"),
        ["sessionCreated", "userMessage"]
    );
}

#[test]
fn after_an_unclean_end_spares_no_record_names_are_removed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let sessions = dir.join("sessions");
    let (ready, taken) = {
        let root = root_at(dir);
        create(&root, "first");
        let taken = create_from_spare(&root, dir, "taken");
        create(&root, "other");
        root.settle_spares();
        try_send(&root, "taken", "m1", "kept").expect("send");
        (spares(dir), taken)
    };
    // What a crash leaves: the spares that were ready, and a taken one whose rename was lost
    // (not the last registration, so the open itself does not finish it).
    for name in &ready {
        std::fs::create_dir_all(sessions.join(name).join("log")).expect("mkdir");
    }
    std::fs::rename(sessions.join("taken"), sessions.join(&taken)).expect("unplace");
    // And the staging directory of a creation that never committed.
    let staging = sessions.join(".staging-s-never").join("log");
    std::fs::create_dir_all(&staging).expect("mkdir");
    std::fs::write(staging.join("00000000000000000000.active"), b"").expect("torn");
    std::fs::remove_file(dir.join("catalog.snap")).expect("an unclean end");
    let root = root_at(dir);
    assert!(spares(dir).is_empty(), "{:?}", spares(dir));
    assert!(!sessions.join(".staging-s-never").exists());
    assert_eq!(
        event_kinds(&root, "taken"),
        ["sessionCreated", "userMessage"]
    );
    let v = root.verify().expect("verify");
    assert!(v.damage.is_empty(), "{v:?}");
}
