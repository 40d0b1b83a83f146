//! Derived files (indexes, checkpoint) are rebuilt or cut back from the log; crashes lose
//! nothing acknowledged and never split a mutation from its receipt.
mod common;
use common::*;
use logbook_engine::*;
use std::path::Path;

fn fill(root: &Root, sid: &str, batches: usize) {
    for b in 0..batches {
        let inv = format!("inv-{b}");
        let json = format!(
            r#"[{{"kind":"userMessage","invocation":"{inv}","text":"question {b}","attachments":[]}},
                {{"kind":"modelCompletion","invocation":"{inv}","model":"m","items":[
                  {{"kind":"assistant","body":"answer {b}","thinking":null}},
                  {{"kind":"toolCall","id":"c{b}","name":"tool{b}","arguments":"{{}}","internal":{}}}],"usage":{{"inputTokens":1,"outputTokens":2}}}},
                {},
                {{"kind":"turnSettled","invocation":"{inv}","outcome":"completed"}}]"#,
            b % 3 == 0,
            tool_result(&inv, &format!("c{b}"), &format!("result {b}"))
        );
        append(root, sid, &format!("fill-{b}"), &json).expect("append");
    }
}

fn all_pages(root: &Root, sid: &str) -> Vec<HistoryPage> {
    let mut out = Vec::new();
    for dir in [Direction::Forward, Direction::Backward] {
        let mut after = None;
        loop {
            let p = hist(root, sid, None, after, 5, dir);
            after = p.next_after.clone();
            out.push(p);
            if after.is_none() {
                break;
            }
        }
    }
    out
}

fn session_dir(root_dir: &Path, sid: &str) -> std::path::PathBuf {
    root_dir.join("sessions").join(sid)
}

fn reopen_and_compare(dir: &Path, sid: &str, expect: &[HistoryPage], rev: u64) {
    let root = Root::open(dir).expect("reopen");
    assert_eq!(root.revision(sid).expect("rev"), rev);
    assert_eq!(all_pages(&root, sid), expect);
    // The receipts survived: a repeat changes nothing.
    let before = root.revision(sid).expect("rev");
    let json = r#"[{"kind":"stopRequested","invocation":"inv-0"}]"#;
    let first = append(&root, sid, "probe", json).expect("probe");
    assert_eq!(
        append(&root, sid, "probe", json).expect("repeat probe"),
        first
    );
    assert_eq!(root.revision(sid).expect("rev"), before + 1);
}

fn setup(batches: usize) -> (tempfile::TempDir, std::path::PathBuf, Vec<HistoryPage>, u64) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    // The tests cut and damage the newest segment as the close left it: active.
    let root = root_at_unsealed(&dir);
    create(&root, "s");
    fill(&root, "s", batches);
    root.sync_indexes().expect("sync");
    let pages = all_pages(&root, "s");
    let rev = root.revision("s").expect("rev");
    drop(root);
    (tmp, dir, pages, rev)
}

#[test]
fn missing_indexes_and_checkpoint_are_rebuilt() {
    for name in ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"] {
        let (_tmp, dir, pages, rev) = setup(12);
        std::fs::remove_file(session_dir(&dir, "s").join(name)).expect("rm");
        reopen_and_compare(&dir, "s", &pages, rev);
    }
}

#[test]
fn damaged_indexes_and_checkpoint_are_rebuilt() {
    for name in ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"] {
        for at in [0usize, 9, 13, 30] {
            let (_tmp, dir, pages, rev) = setup(12);
            let p = session_dir(&dir, "s").join(name);
            let mut b = std::fs::read(&p).expect("read");
            b[at] ^= 0x5a;
            std::fs::write(&p, &b).expect("write");
            reopen_and_compare(&dir, "s", &pages, rev);
        }
        // A torn index tail (half an entry) is also handled.
        let (_tmp, dir, pages, rev) = setup(12);
        let p = session_dir(&dir, "s").join(name);
        let b = std::fs::read(&p).expect("read");
        std::fs::write(&p, &b[..b.len() - 3]).expect("write");
        reopen_and_compare(&dir, "s", &pages, rev);
    }
}

#[test]
fn indexes_ahead_of_a_cut_log_are_cut_back() {
    let (_tmp, dir, _pages, rev) = setup(12);
    // Tear the last batch (4 events + receipt) off the active segment.
    let log_dir = session_dir(&dir, "s").join("log");
    let active = std::fs::read_dir(&log_dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "active"))
        .expect("active segment");
    // The segment's frames end at its last non-zero byte or shortly after it; the zeros after
    // them are the log's preallocated region (docs/format.md), which a cut there would not tear.
    let bytes = std::fs::read(&active).expect("read");
    let len = bytes.iter().rposition(|b| *b != 0).expect("frames") as u64 + 1;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .expect("open");
    f.set_len(len - 7).expect("truncate");
    drop(f);
    // With every write synced, the indexes prove the batch had been acknowledged: losing it
    // is damage, answered as such, and nothing is cut or deleted to make it go away.
    let sdir = session_dir(&dir, "s");
    let files = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let (before, log_before) = (files(&sdir), files(&log_dir));
    {
        let root = Root::open(&dir).expect("reopen");
        let err = root
            .revision("s")
            .expect_err("acknowledged bytes are missing");
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(
            err.to_string().contains(".active"),
            "names the segment: {err}"
        );
    }
    assert_eq!(files(&sdir), before, "nothing derived is deleted");
    assert_eq!(files(&log_dir), log_before, "nothing is cut");
    // In bulk-import mode no write was promised durable, so indexes may legitimately run
    // ahead of the log after a power loss: there the torn batch is cut and the indexes follow.
    let options = RootOptions {
        durability: Durability::NoSyncBulkImport,
        ..RootOptions::default()
    };
    let root = Root::open_with(&dir, options).expect("reopen");
    assert_eq!(
        root.revision("s").expect("rev"),
        rev - 4,
        "the torn batch is gone"
    );
    // Rows and receipts agree with the log: the torn batch's operation applies again.
    let fresh = tempfile::tempdir().expect("tmp");
    let model = root_at(&fresh.path().join("m"));
    create(&model, "s");
    fill(&model, "s", 11);
    assert_eq!(all_pages(&root, "s"), all_pages(&model, "s"));
    fill_one_again(&root);
    assert_eq!(root.revision("s").expect("rev"), rev);
}

fn fill_one_again(root: &Root) {
    // The same operation as the torn batch: it was never acknowledged as stored, so it applies.
    let b = 11;
    let inv = format!("inv-{b}");
    let json = format!(
        r#"[{{"kind":"userMessage","invocation":"{inv}","text":"question {b}","attachments":[]}},
            {{"kind":"modelCompletion","invocation":"{inv}","model":"m","items":[
              {{"kind":"assistant","body":"answer {b}","thinking":null}},
              {{"kind":"toolCall","id":"c{b}","name":"tool{b}","arguments":"{{}}","internal":false}}],"usage":{{"inputTokens":1,"outputTokens":2}}}},
            {},
            {{"kind":"turnSettled","invocation":"{inv}","outcome":"completed"}}]"#,
        tool_result(&inv, &format!("c{b}"), &format!("result {b}"))
    );
    let r = append(root, "s", &format!("fill-{b}"), &json).expect("append");
    assert_eq!(r.last_sequence - r.first_sequence, 3);
}

#[test]
fn unsynced_tail_is_replayed_on_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let opts = RootOptions {
        index_sync_interval: std::time::Duration::from_secs(3600),
        ..RootOptions::default()
    };
    let root = Root::open_or_init(&dir).expect("init");
    drop(root);
    let root = Root::open_with(&dir, opts.clone()).expect("open");
    create(&root, "s");
    fill(&root, "s", 5);
    root.sync_indexes().expect("sync");
    // Index files now cover 5 batches; throw away everything after by saving copies.
    let sdir = session_dir(&dir, "s");
    let names = ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"];
    let saved: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(sdir.join(n)).expect("read"))
        .collect();
    fill(&root, "s", 9); // fill-0..4 repeat (no change), fill-5..8 new
    let pages = all_pages(&root, "s");
    let rev = root.revision("s").expect("rev");
    drop(root);
    for (n, b) in names.iter().zip(&saved) {
        std::fs::write(sdir.join(n), b).expect("restore stale");
    }
    reopen_and_compare(&dir, "s", &pages, rev);
}

#[test]
fn interrupted_create_session_is_finished_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = root_at(&dir);
    let id = root
        .create_session(CreateSessionParams {
            session_id: None,
            workspace: Some("/w".into()),
            operation: "mk".into(),
        })
        .expect("create")
        .session_id;
    drop(root);
    // As if the process died after the Root log recorded the Session but before its directory
    // appeared (with a half-made staging directory left behind).
    let sdir = dir.join("sessions").join(&id);
    std::fs::remove_dir_all(&sdir).expect("rm");
    let staging = dir.join("sessions").join(format!(".staging-{id}"));
    std::fs::create_dir_all(staging.join("log")).expect("staging");
    std::fs::write(staging.join("log").join("junk"), b"half").expect("junk");
    let root = Root::open(&dir).expect("reopen");
    assert!(sdir.is_dir() && !staging.exists());
    let infos = root.sessions().expect("list");
    assert_eq!(infos.len(), 1);
    assert_eq!(infos[0].revision, 1);
    assert_eq!(infos[0].workspace.as_deref(), Some("/w"));
    let again = root
        .create_session(CreateSessionParams {
            session_id: None,
            workspace: Some("/w".into()),
            operation: "mk".into(),
        })
        .expect("repeat");
    assert_eq!(again.session_id, id);
    assert_eq!(root.sessions().expect("list").len(), 1, "never doubled");
}

#[test]
fn kill9_keeps_mutations_whole() {
    if let Ok(dir) = std::env::var("LOGBOOK_KILL_CHILD") {
        let root = Root::open(Path::new(&dir)).expect("child open");
        let mut k = 0u64;
        loop {
            let json = format!(
                r#"[{{"kind":"userMessage","invocation":"k{k}","text":"t{k}","attachments":[]}},
                    {{"kind":"turnSettled","invocation":"k{k}","outcome":"completed"}},
                    {{"kind":"stopRequested","invocation":"k{k}"}}]"#
            );
            append(&root, "s", &format!("op-{k}"), &json).expect("child append");
            println!("acked {k}");
            k += 1;
        }
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = root_at(&dir);
    create(&root, "s");
    drop(root);
    let exe = std::env::current_exe().expect("exe");
    let mut child = std::process::Command::new(exe)
        .args([
            "kill9_keeps_mutations_whole",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LOGBOOK_KILL_CHILD", &dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(700));
    child.kill().expect("kill -9");
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    let acked = text.lines().filter(|l| l.starts_with("acked ")).count() as u64;
    let root = Root::open(&dir).expect("open after kill");
    let rev = root.revision("s").expect("rev");
    assert_eq!(
        (rev - 1) % 3,
        0,
        "a mutation is whole or absent (revision {rev})"
    );
    let stored = (rev - 1) / 3;
    assert!(
        stored >= acked,
        "every acknowledged mutation survived ({stored} < {acked})"
    );
    assert!(stored > 0, "the child made progress");
    for k in 0..stored {
        let json = format!(
            r#"[{{"kind":"userMessage","invocation":"k{k}","text":"t{k}","attachments":[]}},
                {{"kind":"turnSettled","invocation":"k{k}","outcome":"completed"}},
                {{"kind":"stopRequested","invocation":"k{k}"}}]"#
        );
        let r = append(&root, "s", &format!("op-{k}"), &json).expect("repeat");
        assert_eq!(
            r.first_sequence,
            2 + 3 * k,
            "receipt of op-{k} present with its events"
        );
    }
    assert_eq!(
        root.revision("s").expect("rev"),
        rev,
        "repeats changed nothing"
    );
    let page = hist(&root, "s", None, None, 1024, Direction::Forward);
    assert_eq!(page.rows.len() as u64, stored.min(1024));
}

/// Flips one bit of entry `entry` of `name` (entries carry a 4-byte CRC after `width` bytes);
/// returns the damaged file's bytes.
fn flip_entry(dir: &Path, name: &str, width: usize, entry: usize, byte: usize) -> Vec<u8> {
    let p = session_dir(dir, "s").join(name);
    let mut b = std::fs::read(&p).expect("read");
    b[32 + (width + 4) * entry + byte] ^= 1;
    std::fs::write(&p, &b).expect("write");
    b
}

/// Open checks index headers, not entries: an entry is checked when it is read. A read that
/// meets a damaged entry has its Session opened again with every index rebuilt from the log,
/// and is answered from the rebuilt ones: the caller never sees the damage.
#[test]
fn a_damaged_index_entry_is_rebuilt_when_read() {
    let (_tmp, dir, _pages, _rev) = setup(6);
    let before = {
        let root = Root::open(&dir).expect("open");
        root.verify().expect("clean verify");
        hist(&root, "s", None, None, 1024, Direction::Forward)
    };
    // The flags byte of row entry 3 (row entries are 16 bytes).
    let damaged = flip_entry(&dir, "row.idx", 16, 3, 13);
    let root = Root::open(&dir).expect("open");
    let after = hist(&root, "s", None, None, 1024, Direction::Forward);
    assert_eq!(after.rows, before.rows, "the damaged entry was trusted");
    root.verify().expect("the rebuilt index verifies clean");
    drop(root);
    let p = session_dir(&dir, "s").join("row.idx");
    assert_ne!(
        std::fs::read(&p).expect("read"),
        damaged,
        "row.idx was not rebuilt"
    );
    let root = Root::open(&dir).expect("open");
    assert_eq!(
        hist(&root, "s", None, None, 1024, Direction::Forward).rows,
        before.rows
    );
    root.verify().expect("clean after a reopen");
}

/// A layered fork reads its rows below the fence through its source: a damaged entry of the
/// source met by a read of the fork has both opened again (the source's indexes rebuilt), and
/// the read is answered in full.
#[test]
fn a_damaged_source_entry_met_through_a_fork_is_rebuilt() {
    let (_tmp, dir, _pages, rev) = setup(6);
    let (fork_id, before) = {
        let root = Root::open(&dir).expect("open");
        let f = root
            .fork(ForkParams {
                session_id: "s".into(),
                operation: "f".into(),
                from: ForkFrom::All,
                revision: rev,
            })
            .expect("fork")
            .session_id;
        let rows = hist(&root, &f, None, None, 1024, Direction::Forward).rows;
        (f, rows)
    };
    assert!(before.len() > 10);
    flip_entry(&dir, "row.idx", 16, 5, 2);
    let root = Root::open(&dir).expect("open");
    let after = hist(&root, &fork_id, None, None, 1024, Direction::Forward).rows;
    assert_eq!(after, before, "the fork served its source's damaged entry");
    root.verify().expect("verify after the rebuild");
}

/// A mutation that meets a damaged receipt entry while looking for its receipt rebuilds the
/// indexes in place and goes on: a repeat is still answered from its receipt, a new one
/// appends once.
#[test]
fn a_damaged_receipt_entry_met_by_a_mutation_is_rebuilt() {
    let (_tmp, dir, pages, rev) = setup(6);
    // Receipt entries are 24 bytes: an operation hash, then a location. Entry 2 is fill-2's.
    flip_entry(&dir, "receipt.idx", 24, 2, 5);
    let root = Root::open(&dir).expect("open");
    fill(&root, "s", 6);
    assert_eq!(root.revision("s").expect("rev"), rev, "a repeat appended");
    fill(&root, "s", 7);
    assert_eq!(root.revision("s").expect("rev"), rev + 4);
    root.verify().expect("verify after the rebuild");
    drop(root);
    let root = Root::open(&dir).expect("open");
    assert_eq!(all_pages(&root, "s")[0].rows, pages[0].rows);
}

/// `verify` reads every entry, so it reports a damaged one that no read met (naming the file
/// and the entry's offset), and the next use of the Session rebuilds the index.
#[test]
fn verify_reports_a_damaged_entry_and_the_next_use_rebuilds_it() {
    let (_tmp, dir, pages, rev) = setup(6);
    // The location of event 2 in seq.idx (seq entries are 24 bytes).
    flip_entry(&dir, "seq.idx", 24, 1, 2);
    let root = Root::open(&dir).expect("open");
    let report = root.verify().expect("verify");
    let d = report.damage.first().expect("verify saw the damaged entry");
    assert_eq!(d.code, "corrupt", "{d:?}");
    assert!(
        d.message.contains("seq.idx") && d.message.contains("offset 60"),
        "{d:?}"
    );
    assert_eq!(root.revision("s").expect("rev"), rev);
    assert_eq!(all_pages(&root, "s"), pages);
    assert!(
        root.verify().expect("verify").damage.is_empty(),
        "not rebuilt"
    );
}

/// Open checks the Session log only after the event the checkpoint covers (the log resumes
/// from that durable mark): damage before it is not looked for at open, but it is never
/// served as data either. Without a checkpoint the whole active segment is checked at open.
#[test]
fn open_checks_the_log_from_the_checkpoint_on() {
    let (_tmp, dir, _pages, rev) = setup(12);
    let log_dir = session_dir(&dir, "s").join("log");
    let active = log_dir.join("00000000000000000000.active");
    let mut bytes = std::fs::read(&active).expect("read");
    // Inside the payload of the first user message (event 2, long before the checkpoint).
    let at = bytes
        .windows(10)
        .position(|w| w == b"question 0")
        .expect("the first question is in the active segment");
    bytes[at + 3] ^= 0x55;
    std::fs::write(&active, &bytes).expect("write");
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(root.revision("s").expect("opens from the checkpoint"), rev);
    let e = root
        .history(HistoryParams {
            session_id: "s".into(),
            through: None,
            after: None,
            limit: Some(1000),
            anchor: None,
            direction: Some(Direction::Forward),
        })
        .expect_err("the damaged event is not served");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    drop(root);
    // (The failed read already dropped the checkpoint, so the next open checks everything.)
    let ckpt = session_dir(&dir, "s").join("state.ckpt");
    if ckpt.exists() {
        std::fs::remove_file(&ckpt).expect("rm checkpoint");
    }
    let root = Root::open(&dir).expect("reopen");
    let e = root
        .revision("s")
        .expect_err("a full check finds the damage");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
}

/// Flips the last byte of the maps in a Session's checkpoint (the file ends with the CRC of
/// the header and head, then the CRC of the maps).
fn damage_checkpoint_maps(root_dir: &Path, sid: &str) {
    let ckpt = session_dir(root_dir, sid).join("state.ckpt");
    let mut bytes = std::fs::read(&ckpt).expect("checkpoint");
    let at = bytes.len() - 9;
    bytes[at] ^= 0x01;
    std::fs::write(&ckpt, &bytes).expect("write");
}

fn model_of(batches: usize) -> (tempfile::TempDir, Root) {
    let tmp = tempfile::tempdir().expect("tmp");
    let model = root_at(&tmp.path().join("m"));
    create(&model, "s");
    fill(&model, "s", batches);
    (tmp, model)
}

#[test]
fn checkpoint_maps_damaged_are_found_at_first_use_and_healed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = root_at(&dir);
    create(&root, "s");
    fill(&root, "s", 6);
    root.sync_indexes().expect("checkpoint");
    drop(root);
    damage_checkpoint_maps(&dir, "s");
    let (_m, model) = model_of(7);
    let root = Root::open(&dir).expect("the open reads the head only");
    // History needs no maps: served from the checkpoint's head and the indexes.
    let (_m6, model6) = model_of(6);
    assert_eq!(all_pages(&root, "s"), all_pages(&model6, "s"));
    // The first use of the maps finds the damage: the Session is opened again from its log
    // and the call tried once more, so it answers as if the checkpoint were whole.
    let rev = root.revision("s").expect("rev");
    assert!(root.pending_interactions("s").expect("healed").is_empty());
    assert_eq!(
        std::fs::metadata(session_dir(&dir, "s").join("state.ckpt"))
            .map(|_| ())
            .map_err(|e| e.kind()),
        Err(std::io::ErrorKind::NotFound),
        "the damaged checkpoint was removed"
    );
    assert_eq!(root.revision("s").expect("rev"), rev);
    fill(&root, "s", 7);
    assert_eq!(all_pages(&root, "s"), all_pages(&model, "s"));
    drop(root);
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(all_pages(&root, "s"), all_pages(&model, "s"));
    assert!(root.pending_interactions("s").expect("pending").is_empty());
}

#[test]
fn checkpoint_maps_damaged_under_a_replayed_tail_rebuild_at_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let opts = RootOptions {
        index_sync_interval: std::time::Duration::from_secs(3600),
        ..RootOptions::default()
    };
    Root::open_or_init(&dir).expect("init");
    let root = Root::open_with(&dir, opts.clone()).expect("open");
    create(&root, "s");
    fill(&root, "s", 6);
    root.sync_indexes().expect("checkpoint");
    let saved = std::fs::read(session_dir(&dir, "s").join("state.ckpt")).expect("read");
    fill(&root, "s", 9); // a tail after the checkpoint, its Turns touching the maps
    drop(root);
    std::fs::write(session_dir(&dir, "s").join("state.ckpt"), &saved).expect("restore");
    damage_checkpoint_maps(&dir, "s");
    let (_m, model) = model_of(9);
    let root = Root::open_with(&dir, opts).expect("reopen");
    assert_eq!(all_pages(&root, "s"), all_pages(&model, "s"));
    assert!(root
        .pending_interactions("s")
        .expect("no error: rebuilt at open")
        .is_empty());
    fill(&root, "s", 10);
    let (_m10, model10) = model_of(10);
    assert_eq!(all_pages(&root, "s"), all_pages(&model10, "s"));
}

/// A Session that never had a checkpoint keeps `seq.idx` and `row.idx` in memory (rebuilt
/// from its log at each open) and writes only `receipt.idx`; its first checkpoint gives them
/// files. A `row.idx` left by a checkpoint that a crash stopped before `seq.idx` was made is
/// ignored (and replaced), never taken.
/// A Root at `dir` with Session `s` of three batches (no checkpoint), closed: its pages and
/// revision.
fn small_session(dir: &Path) -> (Vec<HistoryPage>, u64) {
    let root = root_at(dir);
    create(&root, "s");
    fill(&root, "s", 3);
    (all_pages(&root, "s"), root.revision("s").expect("rev"))
}

#[test]
fn a_small_session_keeps_its_sequence_and_row_indexes_in_memory_until_a_checkpoint() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let sdir = session_dir(&dir, "s");
    let exists = |name: &str| sdir.join(name).exists();
    let (pages, rev) = small_session(&dir);
    assert!(!exists("seq.idx") && !exists("row.idx") && !exists("state.ckpt"));
    assert!(exists("receipt.idx"), "the receipts are written");
    reopen_and_compare(&dir, "s", &pages, rev);
    assert!(!exists("seq.idx") && !exists("row.idx"));

    // A checkpoint stopped half way: `row.idx` written, `seq.idx` not yet.
    std::fs::write(sdir.join("row.idx"), b"a row index of another life").expect("write");
    let root = Root::open(&dir).expect("open");
    let pages = all_pages(&root, "s");
    assert_eq!(root.revision("s").expect("rev"), rev + 1);
    root.sync_indexes().expect("checkpoint");
    drop(root);
    assert!(exists("seq.idx") && exists("row.idx") && exists("state.ckpt"));
    let row_idx = std::fs::read(sdir.join("row.idx")).expect("read");
    assert!(row_idx.starts_with(b"LBFIXIDX"), "row.idx was made again");
    // Taken from the files now: the same pages, and the receipts of every batch (the probe
    // of the first reopen is recognised, not applied again).
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(all_pages(&root, "s"), pages);
    let json = r#"[{"kind":"stopRequested","invocation":"inv-0"}]"#;
    append(&root, "s", "probe", json).expect("repeat probe");
    assert_eq!(root.revision("s").expect("rev"), rev + 1);
}

/// Reading a small Session (no checkpoint: its open replays the whole log) writes nothing:
/// its receipt index is compared with the log's receipts, not cut and written again (which
/// made every read of such a Session, a Root-wide search visiting thousands of them, write
/// and sync a file per Session). A damaged entry is still cut and written again.
#[test]
fn reading_a_small_session_leaves_its_receipt_index_untouched() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let receipts = session_dir(&dir, "s").join("receipt.idx");
    let (pages, rev) = small_session(&dir);
    let look = || {
        let m = std::fs::metadata(&receipts).expect("receipt.idx");
        (
            std::fs::read(&receipts).expect("read"),
            m.modified().expect("mtime"),
        )
    };
    let before = look();
    // Far enough apart for any write to move the file's time.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let read = || {
        let root = Root::open(&dir).expect("reopen");
        assert_eq!(root.revision("s").expect("rev"), rev);
        assert_eq!(all_pages(&root, "s"), pages);
    };
    read();
    assert_eq!(look(), before, "a read wrote the receipt index");

    // The last entry damaged: the open finds it differs from the log's receipt and writes it
    // again.
    let mut damaged = before.0.clone();
    let last = damaged.len() - 3;
    damaged[last] ^= 0x40;
    std::fs::write(&receipts, &damaged).expect("damage");
    read();
    assert_eq!(look().0, before.0, "the damaged entry was written again");
}
