//! Acknowledged data is never cut as a torn tail, one damaged Session never breaks the
//! listing or `verify` of the others, and a createSession is whole or absent across failures
//! of its own steps.

mod common;
use common::*;
use logbook_engine::*;
use std::path::{Path, PathBuf};

fn active_segment(dir: &Path, id: &str) -> PathBuf {
    std::fs::read_dir(dir.join("sessions").join(id).join("log"))
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "active"))
        .expect("active segment")
}

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// One append of `n` user messages (one batch) to a new Session `id`.
fn one_big_append(root: &Root, id: &str, n: usize) {
    create(root, id);
    let events: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"kind":"userMessage","invocation":"inv-{i}","text":"message {i} {}","attachments":[]}}"#,
                "words ".repeat(40)
            )
        })
        .collect();
    append(root, id, "big", &format!("[{}]", events.join(","))).expect("append");
}

#[test]
fn damage_inside_an_acknowledged_batch_is_corrupt_not_a_torn_tail() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    {
        // The damage is to land in the active segment: no seal when the Root closes.
        let root = Root::open_or_init_with(
            &dir,
            RootOptions {
                seal_on_close_bytes_min: u64::MAX,
                ..RootOptions::default()
            },
        )
        .expect("root");
        one_big_append(&root, "k", 4000);
        create(&root, "n");
        append(
            &root,
            "n",
            "n1",
            r#"[{"kind":"userMessage","invocation":"i1","text":"healthy","attachments":[]}]"#,
        )
        .expect("append n");
        assert_eq!(root.revision("k").expect("rev"), 4001);
    }
    let seg = active_segment(&dir, "k");
    let mut bytes = std::fs::read(&seg).expect("read");
    let at = bytes.iter().rposition(|b| *b != 0).expect("frames") / 2;
    bytes[at] ^= 0x20;
    std::fs::write(&seg, &bytes).expect("write");
    let sdir = dir.join("sessions").join("k");
    let (files, log_files) = (names(&sdir), names(&sdir.join("log")));
    for round in 0..3 {
        let root = Root::open(&dir).expect("open");
        // Reading every row reaches the damage: the log's damage, named as such.
        let rows_ok = (|| {
            let mut after = None;
            loop {
                let page = root.history(HistoryParams {
                    session_id: "k".into(),
                    through: None,
                    after: after.clone(),
                    limit: Some(1000),
                    anchor: None,
                    direction: Some(Direction::Forward),
                })?;
                match page.next_after {
                    Some(n) => after = Some(n),
                    None => return Ok::<_, EngineError>(()),
                }
            }
        })();
        if let Ok(rev) = root.revision("k") {
            assert_eq!(rev, 4001, "round {round}: the revision never goes back");
            let err = rows_ok.expect_err("paging every row reaches the damage");
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
            assert!(
                err.to_string().contains(".active"),
                "names the segment: {err}"
            );
        } else {
            let err = root.revision("k").expect_err("checked");
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        }
        // The other Session, the listing and verify keep working.
        assert_eq!(root.revision("n").expect("n"), 2);
        let list = root.sessions().expect("listing works");
        assert_eq!(list.len(), 2);
        let report = root.verify().expect("verify walks the whole Root");
        assert_eq!(report.sessions, 1, "n was walked: {report:?}");
        assert_eq!(report.damage.len(), 1, "{report:?}");
        assert_eq!(report.damage[0].session_id.as_deref(), Some("k"));
        assert_eq!(report.damage[0].code, "corrupt");
        assert!(report.cuts.is_empty(), "{report:?}");
        drop(root);
        assert_eq!(
            names(&sdir.join("log")),
            log_files,
            "round {round}: nothing is cut"
        );
        if round == 0 {
            assert_eq!(names(&sdir), files, "nothing derived is deleted");
            // A lost checkpoint must not turn the damage into a torn tail either.
            std::fs::remove_file(sdir.join("state.ckpt")).expect("rm ckpt");
        }
    }
}

#[test]
fn a_damaged_session_is_listed_as_damaged_and_verify_reports_every_damage() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    {
        let root = root_at_unsealed(&dir);
        for id in ["m", "n", "o"] {
            one_big_append(&root, id, 50);
        }
    }
    // Two Sessions damaged: a flipped log byte and no checkpoint (so open reads it; a Session
    // this small is closed without one).
    for id in ["m", "o"] {
        let seg = active_segment(&dir, id);
        let mut bytes = std::fs::read(&seg).expect("read");
        let at = bytes.iter().rposition(|b| *b != 0).expect("frames") / 3;
        bytes[at] ^= 0x01;
        std::fs::write(&seg, &bytes).expect("write");
        match std::fs::remove_file(dir.join("sessions").join(id).join("state.ckpt")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("rm: {e}"),
            _ => {}
        }
    }
    let root = Root::open(&dir).expect("open");
    assert_eq!(root.revision("n").expect("n works"), 51);
    // The listing answers from the catalog; a Session found damaged is shown so.
    for id in ["m", "o"] {
        let e = root.revision(id).expect_err("damaged");
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    }
    let list = root
        .sessions()
        .expect("the listing does not fail for the Root");
    let by_id: Vec<(&str, bool)> = list
        .iter()
        .map(|s| (s.session_id.as_str(), s.damage.is_some()))
        .collect();
    assert_eq!(by_id, [("m", true), ("n", false), ("o", true)]);
    assert_eq!(list[1].revision, 51);
    let report = root.verify().expect("verify");
    let damaged: Vec<&str> = report
        .damage
        .iter()
        .filter_map(|d| d.session_id.as_deref())
        .collect();
    assert_eq!(
        damaged,
        ["m", "o"],
        "every damage, not the first: {report:?}"
    );
    assert_eq!(report.sessions, 1);
}

#[test]
fn a_torn_tail_past_every_durable_reference_is_cut_and_reported() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    {
        let root = root_at(&dir);
        one_big_append(&root, "t", 10);
    }
    // Bytes after the last acknowledged batch that are not a whole batch: a torn write.
    let seg = active_segment(&dir, "t");
    let mut bytes = std::fs::read(&seg).expect("read");
    let end = bytes.iter().rposition(|b| *b != 0).expect("frames") + 1;
    // A closed log ends at its last batch (its zero region was given back): the torn write
    // lands past the end of the file.
    bytes.resize(bytes.len().max(end + 64), 0);
    bytes[end..end + 64].copy_from_slice(&[0x7f; 64]);
    std::fs::write(&seg, &bytes).expect("write");
    let root = Root::open(&dir).expect("open");
    assert_eq!(root.revision("t").expect("rev"), 11);
    let cuts = root.recoveries();
    assert_eq!(cuts.len(), 1, "{cuts:?}");
    assert_eq!(cuts[0].session_id.as_deref(), Some("t"));
    let report = root.verify().expect("verify");
    assert!(report.damage.is_empty(), "{report:?}");
    assert_eq!(
        report.cuts.len(),
        1,
        "verify lists the cut copy: {report:?}"
    );
}

#[test]
fn a_create_is_whole_after_a_leftover_at_its_staging_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    {
        let root = root_at(&dir);
        // Whatever a crash or a person left at the staging name is not the Session.
        std::fs::write(dir.join("sessions").join(".staging-A"), b"left over").expect("plant");
        create(&root, "A");
        assert_eq!(create(&root, "A"), "A", "a repeat answers the receipt");
        assert_eq!(root.revision("A").expect("rev"), 1);
    }
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(root.revision("A").expect("rev after restart"), 1);
    let report = root.verify().expect("verify");
    assert!(report.damage.is_empty(), "{report:?}");
}

#[test]
fn a_create_committed_but_not_in_place_is_finished_on_next_use() {
    // A crash (or a failed rename) after the Root-log record: the staging directory is whole
    // and the Session registered; its next use puts it in place.
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    {
        let root = root_at(&dir);
        create(&root, "A");
        create(&root, "B");
    }
    let sessions = dir.join("sessions");
    std::fs::rename(sessions.join("A"), sessions.join(".staging-A")).expect("unplace");
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(root.revision("A").expect("finished"), 1);
    assert!(sessions.join("A").is_dir());
    assert!(root.verify().expect("verify").damage.is_empty());
}

#[test]
fn verify_reports_a_session_directory_the_root_log_does_not_register() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    {
        let root = root_at(&dir);
        create(&root, "A");
        create(&root, "B");
    }
    // As if the Root log had lost B's registration: B's directory outlives its record.
    let other = tempfile::tempdir().expect("tmp");
    let lone = other.path().join("root");
    {
        let root = root_at(&lone);
        create(&root, "A");
    }
    std::fs::remove_dir_all(dir.join("root-log")).expect("rm");
    copy_dir(&lone.join("root-log"), &dir.join("root-log"));
    let root = Root::open(&dir).expect("open");
    let report = root.verify().expect("verify");
    let damaged: Vec<&str> = report
        .damage
        .iter()
        .filter_map(|d| d.session_id.as_deref())
        .collect();
    assert_eq!(damaged, ["B"], "{report:?}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("ls") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

/// A small Session (no checkpoint): its first commit makes no index file, since its receipt
/// index is kept in memory until a sync has an entry to write (here the close's), and a
/// Session that never had a receipt gets none. The receipts written by the close are the
/// evidence that its last batch was acknowledged: damage inside that batch is reported, not
/// cut as a torn tail.
#[test]
fn a_small_sessions_receipt_index_is_made_by_its_first_sync_and_guards_its_last_batch() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    let sdir = dir.join("sessions").join("s");
    {
        let root = Root::open_or_init_with(
            &dir,
            RootOptions {
                seal_on_close_bytes_min: u64::MAX,
                index_sync_interval: std::time::Duration::from_secs(3600),
                ..RootOptions::default()
            },
        )
        .expect("root");
        create(&root, "s");
        create(&root, "e");
        for i in 0..3 {
            let json = format!(
                r#"[{{"kind":"userMessage","invocation":"i{i}","text":"turn {i}","attachments":[]}}]"#
            );
            append(&root, "s", &format!("a{i}"), &json).expect("append");
        }
        assert_eq!(root.revision("e").expect("e"), 1);
        assert!(
            !sdir.join("receipt.idx").exists(),
            "the commits made no index file"
        );
    }
    assert!(sdir.join("receipt.idx").exists(), "the close wrote it");
    assert!(!sdir.join("state.ckpt").exists(), "small: no checkpoint");
    assert!(
        !dir.join("sessions").join("e").join("receipt.idx").exists(),
        "no receipt, no receipt index"
    );
    {
        let root = Root::open(&dir).expect("reopen");
        assert_eq!(root.revision("s").expect("rev"), 4);
        assert_eq!(root.revision("e").expect("rev"), 1);
    }
    // A byte of the last batch (its receipt record) flipped.
    let seg = active_segment(&dir, "s");
    let mut bytes = std::fs::read(&seg).expect("read");
    let at = bytes.iter().rposition(|b| *b != 0).expect("frames") - 4;
    bytes[at] ^= 0x20;
    std::fs::write(&seg, &bytes).expect("write");
    let log_files = names(&sdir.join("log"));
    let root = Root::open(&dir).expect("open");
    let err = root.revision("s").expect_err("the damage is found");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(root.recoveries().is_empty(), "nothing cut");
    assert_eq!(root.revision("e").expect("the other Session"), 1);
    drop(root);
    assert_eq!(names(&sdir.join("log")), log_files, "nothing is cut");
    assert_eq!(std::fs::read(&seg).expect("read"), bytes, "nor rewritten");
}

/// A small Session whose close seals its segment makes no index file at all: neither the
/// background flusher nor the close gives its receipts a file, the sealed segment being the
/// evidence of its last batch (damage in it is reported, never cut). Its receipts come back
/// from the log at the next open: a repeated append is answered, not applied again.
#[test]
fn a_session_sealed_at_close_makes_no_receipt_index() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    let sdir = dir.join("sessions").join("s");
    let options = || RootOptions {
        seal_on_close_bytes_min: 1,
        index_sync_interval: std::time::Duration::from_millis(5),
        ..RootOptions::default()
    };
    let json = r#"[{"kind":"userMessage","invocation":"i0","text":"turn 0","attachments":[]}]"#;
    {
        let root = Root::open_or_init_with(&dir, options()).expect("root");
        create(&root, "s");
        append(&root, "s", "a0", json).expect("append");
        // Many flusher ticks: none of them makes the file.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!sdir.join("receipt.idx").exists(), "the flusher made it");
    }
    let log_files = names(&sdir.join("log"));
    assert!(
        log_files.iter().any(|n| n.ends_with(".sealed")),
        "sealed at close: {log_files:?}"
    );
    assert!(!sdir.join("receipt.idx").exists(), "the close made it");
    // Read only, then closed at once (before a flusher tick syncs the rebuilt indexes): the
    // open makes no newest segment (the first append would), so the close writes no evidence.
    {
        let root = Root::open_with(
            &dir,
            RootOptions {
                index_sync_interval: std::time::Duration::from_secs(60),
                ..options()
            },
        )
        .expect("reopen to read");
        assert_eq!(root.revision("s").expect("rev"), 2);
        let log_files = names(&sdir.join("log"));
        assert!(
            !log_files.iter().any(|n| n.ends_with(".active")),
            "a read made a newest segment: {log_files:?}"
        );
    }
    assert!(
        !sdir.join("receipt.idx").exists(),
        "a read-only use made it"
    );
    let root = Root::open_with(&dir, options()).expect("reopen");
    append(&root, "s", "a0", json).expect("repeat");
    assert_eq!(
        root.revision("s").expect("rev"),
        2,
        "answered from the log's receipt"
    );
    let other = json.replace("turn 0", "turn 1");
    let err = append(&root, "s", "a0", &other).expect_err("other params");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
}
