//! createSession writes the new Session's files without a sync (its Root-log record is the
//! commit and stands for them): the Session's first commit makes them durable before it is
//! acknowledged, and a creation whose files a power loss took is made again from the record.

mod common;
use common::*;
use logbook_engine::*;
use logbook_log::io::{FaultyFs, Injected, Op};
use std::path::Path;
use std::sync::Arc;

/// A Root at `dir` whose Session logs go through a [`FaultyFs`], and its faults.
fn root_on_faulty_fs(dir: &Path) -> (Root, logbook_log::io::Faults) {
    let (fs, faults) = FaultyFs::new();
    let root = Root::open_or_init_with(
        dir,
        RootOptions {
            log_fs: Some(Arc::new(fs)),
            ..RootOptions::default()
        },
    )
    .expect("root");
    (root, faults)
}

#[test]
fn a_creation_syncs_no_session_file_and_the_first_commit_syncs_its_names() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (root, faults) = root_on_faulty_fs(tmp.path());
    let counts = || (faults.count(Op::Sync), faults.count(Op::SyncDir));
    let before = counts();
    create(&root, "a");
    assert_eq!(counts(), before, "no sync of the Session's own files");
    // The first commit: its fdatasync, then the log's directory, the Session's and
    // `sessions/`; a failure of any of them fails the commit, which a retry then makes.
    faults.arm(Op::SyncDir, 2, Injected::Eio);
    let e = try_send(&root, "a", "m1", "first").expect_err("sessions/ not synced");
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    let before = counts();
    try_send(&root, "a", "m1", "first").expect("retried");
    let after = counts();
    assert_eq!(
        after.1 - before.1,
        3,
        "three directories synced by the retry"
    );
    try_send(&root, "a", "m2", "second").expect("send");
    assert_eq!(counts().1, after.1, "later commits sync no directory");
    assert_eq!(
        event_kinds(&root, "a"),
        ["sessionCreated", "userMessage", "userMessage"]
    );
}

/// What a power loss can leave of files written without a sync: nothing, a directory without
/// its log, an empty log directory, a segment cut to nothing or whose header never reached
/// the disk. Each such Session is made again from its Root-log record; one that had a commit
/// is reported as damaged instead.
#[test]
fn a_creation_whose_files_were_lost_is_made_again() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let sessions = dir.join("sessions");
    let segment = |id: &str| sessions.join(id).join("log/00000000000000000000.active");
    {
        let root = root_at(dir);
        for id in ["gone", "nolog", "emptylog", "cut", "zeros", "used"] {
            create(&root, id);
        }
        try_send(&root, "used", "m1", "acknowledged").expect("send");
    }
    std::fs::remove_dir_all(sessions.join("gone")).expect("rm");
    std::fs::remove_dir_all(sessions.join("nolog/log")).expect("rm");
    std::fs::remove_file(segment("emptylog")).expect("rm");
    std::fs::File::options()
        .write(true)
        .open(segment("cut"))
        .and_then(|f| f.set_len(0))
        .expect("cut");
    let len = std::fs::metadata(segment("zeros")).expect("stat").len();
    std::fs::write(segment("zeros"), vec![0u8; len as usize]).expect("zeros");
    std::fs::remove_dir_all(sessions.join("used/log")).expect("rm");
    let root = root_at(dir);
    for id in ["gone", "nolog", "emptylog", "cut", "zeros"] {
        assert_eq!(event_kinds(&root, id), ["sessionCreated"], "{id}");
        let created = root.read_event(id, 1).expect("event");
        let json = serde_json::to_value(created).expect("json");
        assert_eq!(json["workspace"], "/work/space", "{id}: {json}");
        try_send(&root, id, "m1", "after").expect("send");
        assert_eq!(
            event_kinds(&root, id),
            ["sessionCreated", "userMessage"],
            "{id}"
        );
    }
    let e = root
        .revision("used")
        .expect_err("a Session with a commit lost its log");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    drop(root);
    // What was made again is durable like any Session after its first commit.
    let root = root_at(dir);
    for id in ["gone", "nolog", "emptylog", "cut", "zeros"] {
        assert_eq!(
            event_kinds(&root, id),
            ["sessionCreated", "userMessage"],
            "{id}"
        );
    }
}

#[test]
fn a_crash_before_the_rename_leaves_a_whole_session() {
    // The staging directory is all a crash between the record and the rename leaves.
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    {
        let root = root_at(dir);
        create(&root, "s");
    }
    let sessions = dir.join("sessions");
    std::fs::rename(sessions.join("s"), sessions.join(".staging-s")).expect("unplace");
    let root = root_at(dir);
    assert_eq!(event_kinds(&root, "s"), ["sessionCreated"]);
    assert!(!Path::new(&sessions.join(".staging-s")).exists());
}

/// A creation that fails to write its files (a full disk) answers `io` and leaves no
/// directory behind: a host that retries while the disk is full does not fill `sessions/`
/// with half-built ones. Once the disk has room, the same creation works.
#[test]
fn a_creation_that_cannot_write_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (root, faults) = root_on_faulty_fs(tmp.path());
    let sessions = tmp.path().join("sessions");
    let listed = || -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(&sessions)
            .expect("sessions/")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with(".spare-"))
            .collect();
        n.sort();
        n
    };
    // The first creation of a fresh Root finds no spare and builds its directory; later ones
    // take a spare (ready once the maker has run), whose failed write sends them to build
    // one too.
    for attempt in 0..3 {
        if attempt == 1 {
            create(&root, "warm");
        }
        if attempt > 0 {
            root.settle_spares();
            faults.arm_on(Op::Write, ".spare-", 0, Injected::NoSpace);
        }
        faults.arm_on(Op::Write, ".staging-", 0, Injected::NoSpace);
        let e = root
            .create_session(CreateSessionParams {
                session_id: Some("a".into()),
                workspace: None,
                operation: format!("create-{attempt}"),
            })
            .expect_err("no room for the Session's files");
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        assert!(faults.all_fired(), "attempt {attempt}");
        let made: &[&str] = if attempt == 0 { &[] } else { &["warm"] };
        assert_eq!(listed(), made, "attempt {attempt}");
    }
    let ids: Vec<String> = root
        .sessions()
        .expect("sessions")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(ids, ["warm"]);
    create(&root, "a");
    try_send(&root, "a", "m1", "first").expect("send");
    assert_eq!(listed(), ["a", "warm"]);
    drop(root);
    let root = root_at(tmp.path());
    assert_eq!(event_kinds(&root, "a"), ["sessionCreated", "userMessage"]);
}
