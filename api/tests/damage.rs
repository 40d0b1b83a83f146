#![allow(clippy::unwrap_used)]
//! Damage on the real files of a Root: every file type is truncated and bit-flipped at many
//! offsets, then the Root is opened and read. Each trial must end in one of:
//!
//! - **detected**: an error of kind `corrupt` whose message names the damaged file (and, for
//!   log files, the offset);
//! - **prefix**: the reads succeed and show an exact prefix of the undamaged history (whole
//!   events only; a torn tail of the newest segment is cut);
//! - **same**: the reads show exactly the undamaged answer. For derived files (indexes, the
//!   state checkpoint) this is the only acceptable outcome: they are rebuilt.
//!
//! Never a panic, never another error kind, never different data. Damage in one Session
//! leaves the other Session whole. A log or blob trial whose reads all came out "same" must be
//! caught by `verify` (otherwise the damage was silently accepted), except in bytes no reader
//! depends on; those are counted and printed.
//!
//! The Root is written through the engine. The engine does not expose a segment size, so
//! the fixture writes one 63 MiB tool result to roll the default 64 MiB segment: Session `s`
//! then has a sealed (compressed) segment and an active one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use base64::Engine as _;
use logbook_engine::*;
use serde_json::{json, Value};

const BIG_BODY_BYTES: usize = 63 << 20;
const FILLER_BODY_BYTES: usize = 2 << 20;

struct Reference {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    /// Per Session: rows (as JSON) in position order, and the revision.
    rows: BTreeMap<String, (Vec<Value>, u64)>,
    attachments: Vec<u8>,
    invocation: String,
    send: SendParams,
    append: AppendParams,
}

fn events(v: Value) -> Vec<Event> {
    serde_json::from_value(v).expect("events")
}

fn tool_result(inv: &str, call: &str, body: &str) -> Value {
    // Parts repeat the body only when it is small: one record holds at most 64 MiB.
    let parts = if body.len() < 1 << 20 {
        json!([{"kind": "text", "text": body}])
    } else {
        json!([])
    };
    json!({"kind": "toolResult", "invocation": inv, "toolCallId": call, "status": "ok", "body": body,
           "raw": {"b": [1.50, 2e3]}, "parts": parts,
           "bytes": body.len(), "digest": validate::sha256_digest(body.as_bytes())})
}

fn turn(root: &Root, sid: &str, n: usize, body: &str, internal: bool) -> AppendParams {
    let inv = format!("inv-{sid}-{n}");
    let call = format!("call-{sid}-{n}");
    let p = AppendParams {
        session_id: sid.into(),
        operation: format!("turn-{n}"),
        events: events(json!([
            {"kind": "userMessage", "invocation": inv, "text": format!("question {n} of {sid}"), "attachments": []},
            {"kind": "modelCompletion", "invocation": inv, "model": "m", "usage": null, "items": [
                {"kind": "assistant", "body": format!("answer {n}"), "thinking": "hmm"},
                {"kind": "toolCall", "id": call, "name": "read", "arguments": "{\"p\":1}", "internal": internal}]},
            tool_result(&inv, &call, body),
            {"kind": "turnSettled", "invocation": inv, "outcome": "completed"}
        ])),
    };
    root.append(p.clone()).expect("append");
    p
}

fn all_rows(root: &Root, sid: &str) -> Result<(Vec<Value>, u64), EngineError> {
    let mut rows = Vec::new();
    let mut after = None;
    let mut through = None;
    loop {
        let page = root.history(HistoryParams {
            session_id: sid.into(),
            through,
            after,
            limit: Some(PAGE_ROWS_MAX),
            anchor: None,
            direction: None,
        })?;
        through = Some(page.through);
        rows.extend(page.rows.iter().map(|r| serde_json::to_value(r).unwrap()));
        match page.next_after {
            Some(a) => after = Some(a),
            None => return Ok((rows, page.through)),
        }
    }
}

/// The fixture for a file type: segment damage needs the big Root (sealed + active segment);
/// everything else uses a small one, so each trial's rebuild replays little.
fn reference_for(kind: FileType) -> &'static Reference {
    static BIG: OnceLock<Reference> = OnceLock::new();
    static SMALL: OnceLock<Reference> = OnceLock::new();
    if matches!(kind, FileType::SealedSegment | FileType::ActiveSegment) {
        BIG.get_or_init(|| build_reference(true))
    } else {
        SMALL.get_or_init(|| build_reference(false))
    }
}

fn build_reference(big: bool) -> Reference {
    {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("root");
        // The big fixture keeps an active segment to damage: no seal when the Root closes.
        let options = RootOptions {
            seal_on_close_bytes_min: u64::MAX,
            ..RootOptions::default()
        };
        let root = Root::open_or_init_with(&dir, options).unwrap();
        for sid in ["s", "t"] {
            root.create_session(CreateSessionParams {
                session_id: Some(sid.into()),
                workspace: None,
                operation: format!("create-{sid}"),
            })
            .unwrap();
        }
        let mut attachments = Vec::new();
        let mut sent = Vec::new();
        for (i, n) in [(0u8, 3000usize), (1, 70_000)] {
            let data: Vec<u8> = (0..n).map(|k| (k as u8).wrapping_mul(31) ^ i).collect();
            attachments.extend_from_slice(&data);
            sent.push(SendAttachment {
                name: format!("file{i}.bin"),
                mime_type: "application/octet-stream".into(),
                data_base64: base64::engine::general_purpose::STANDARD.encode(&data),
            });
        }
        let send = SendParams {
            session_id: "s".into(),
            operation: "send-1".into(),
            text: "look at these files".into(),
            attachments: sent,
        };
        let invocation = root.send(send.clone()).unwrap().invocation;
        turn(&root, "s", 0, "small result", false);
        if big {
            // The big result answers an internal call: its row is hidden, so pages never decode it.
            turn(&root, "s", 1, &"big ".repeat(BIG_BODY_BYTES / 4), true);
            let filler = "filler".repeat(FILLER_BODY_BYTES / 6);
            turn(&root, "s", 2, &filler, false);
        } else {
            turn(&root, "s", 1, "one", true);
            turn(&root, "s", 2, "two", false);
        }
        let mut append = None;
        for n in 3..12 {
            append = Some(turn(&root, "s", n, &format!("result {n}"), n % 4 == 0));
        }
        for n in 0..5 {
            turn(&root, "t", n, &format!("t result {n}"), false);
        }
        root.sync_indexes().unwrap();
        let mut rows = BTreeMap::new();
        for sid in ["s", "t"] {
            rows.insert(sid.to_owned(), all_rows(&root, sid).unwrap());
        }
        drop(root);
        let log = dir.join("sessions/s/log");
        let names: Vec<String> = std::fs::read_dir(&log)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !big || names.iter().any(|n| n.ends_with(".sealed"))
                && names.iter().any(|n| n.ends_with(".active")),
            "the fixture has a sealed and an active segment: {names:?}"
        );
        Reference {
            _tmp: tmp,
            dir,
            rows,
            attachments,
            invocation,
            send,
            append: append.unwrap(),
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Files of one type in the reference Root, relative to it.
fn files_of(kind: FileType) -> Vec<PathBuf> {
    let r = reference_for(kind);
    let list = |sub: &str, pred: &dyn Fn(&str) -> bool| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(r.dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| pred(n))
            .map(|n| Path::new(sub).join(n))
            .collect();
        v.sort();
        v
    };
    match kind {
        FileType::SealedSegment => list("sessions/s/log", &|n| n.ends_with(".sealed")),
        FileType::ActiveSegment => list("sessions/s/log", &|n| n.ends_with(".active")),
        FileType::SeqIndex => vec!["sessions/s/seq.idx".into()],
        FileType::RowIndex => vec!["sessions/s/row.idx".into()],
        FileType::ReceiptIndex => vec!["sessions/s/receipt.idx".into()],
        FileType::Checkpoint => vec!["sessions/s/state.ckpt".into()],
        FileType::RootHeader => vec!["logbook.root".into()],
        FileType::RootLog => list("root-log", &|n| n.ends_with(".active")),
        FileType::Blob => {
            let mut v = Vec::new();
            for d in std::fs::read_dir(r.dir.join("blobs")).unwrap() {
                let d = d.unwrap();
                for f in std::fs::read_dir(d.path()).unwrap() {
                    let f = f.unwrap().path();
                    v.push(f.strip_prefix(&r.dir).unwrap().to_owned());
                }
            }
            v.sort();
            v
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileType {
    SealedSegment,
    ActiveSegment,
    SeqIndex,
    RowIndex,
    ReceiptIndex,
    Checkpoint,
    RootHeader,
    RootLog,
    Blob,
}

impl FileType {
    fn derived(self) -> bool {
        matches!(
            self,
            FileType::SeqIndex | FileType::RowIndex | FileType::ReceiptIndex | FileType::Checkpoint
        )
    }
    fn root_level(self) -> bool {
        matches!(self, FileType::RootHeader | FileType::RootLog)
    }
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Truncate(u64),
    Flip(u64, u8),
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Same,
    Prefix,
    Detected,
}

/// Offsets to try in a file of `len` bytes: every one of the first `edge` (headers) and the
/// last `edge` (footers, the tail), and `spread` more spread evenly.
fn offsets(len: u64, edge: u64, spread: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..len.min(edge)).collect();
    v.extend(len.saturating_sub(edge)..len);
    for k in 0..spread {
        v.push(len * k / spread.max(1));
    }
    v.sort();
    v.dedup();
    v
}

/// Bytes at the start of every file that hold its magic and version: damage there may be
/// reported as `unsupported_format` (the file no longer says it is ours, or names another
/// version), which the contract reserves for foreign files. Truncation to fewer bytes than
/// the magic is reported the same way; both are listed in docs/reliability.md.
const MAGIC_AND_VERSION_BYTES: u64 = 12;

fn check_error(e: &EngineError, file: &Path, kind: FileType, damage: Damage, what: &str) {
    check_damage(e.kind().code(), &e.to_string(), file, kind, damage, what);
}

/// [`check_error`] for an error as a code and a message (as `verify` reports damage).
fn check_damage(code: &str, msg: &str, file: &Path, kind: FileType, damage: Damage, what: &str) {
    let in_magic = match damage {
        Damage::Truncate(at) | Damage::Flip(at, _) => at < MAGIC_AND_VERSION_BYTES,
    };
    assert!(
        code == "corrupt" || (code == "unsupported_format" && in_magic),
        "{what}: {file:?}: error of kind {code}, not corrupt: {msg}"
    );
    let name = file.file_name().unwrap().to_string_lossy();
    let parent = file.parent().unwrap().to_string_lossy();
    assert!(
        msg.contains(&*name) || msg.contains(&*parent),
        "{what}: the error does not name {file:?}: {msg}"
    );
    if matches!(
        kind,
        FileType::SealedSegment | FileType::ActiveSegment | FileType::RootLog
    ) && msg.contains(&*name)
        && code == "corrupt"
    {
        assert!(
            msg.contains("offset"),
            "{what}: log error without offset: {msg}"
        );
    }
}

/// Runs one trial; returns its outcome (panics on anything the contract forbids).
fn trial(kind: FileType, rel: &Path, damage: Damage) -> Outcome {
    let r = reference_for(kind);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("root");
    copy_dir(&r.dir, &dir);
    let path = dir.join(rel);
    let mut bytes = std::fs::read(&path).unwrap();
    match damage {
        Damage::Truncate(at) => bytes.truncate(at as usize),
        Damage::Flip(at, mask) => bytes[at as usize] ^= mask,
    }
    std::fs::write(&path, &bytes).unwrap();
    let what = format!("{kind:?} {rel:?} {damage:?}");

    let root = match Root::open(&dir) {
        Ok(root) => root,
        Err(e) => {
            check_error(&e, &path, kind, damage, &what);
            return Outcome::Detected;
        }
    };
    let mut outcome = Outcome::Same;
    let sessions: Vec<String> = match root.sessions() {
        Ok(v) => v.into_iter().map(|s| s.session_id).collect(),
        Err(e) => {
            check_error(&e, &path, kind, damage, &what);
            return Outcome::Detected;
        }
    };
    // Sessions are registered in order s, t: a prefix keeps s if it keeps t.
    assert!(
        sessions == ["s", "t"] || sessions == ["s"] || sessions.is_empty(),
        "{what}: sessions {sessions:?}"
    );
    if sessions.len() < 2 {
        assert!(kind.root_level(), "{what}: a Session vanished");
        outcome = Outcome::Prefix;
    }
    for sid in &sessions {
        match all_rows(&root, sid) {
            Ok((rows, rev)) => {
                let (want, want_rev) = &r.rows[sid];
                assert!(rev <= *want_rev, "{what}: {sid} grew to {rev}");
                let prefix: Vec<Value> = want
                    .iter()
                    .filter(|row| row["position"]["sourceSequence"].as_u64().unwrap() <= rev)
                    .cloned()
                    .collect();
                if rows != prefix {
                    let at = rows.iter().zip(&prefix).position(|(a, b)| a != b);
                    panic!(
                        "{what}: {sid} rows are not the undamaged prefix under {rev}: {} rows, want {}; first difference at {at:?}",
                        rows.len(),
                        prefix.len()
                    );
                }
                if rev < *want_rev {
                    assert!(
                        !kind.derived(),
                        "{what}: derived-file damage lost events of {sid}"
                    );
                    outcome = Outcome::Prefix;
                }
            }
            Err(e) => {
                assert!(
                    *sid == "s" || kind.root_level(),
                    "{what}: damage in s broke Session {sid}: {e}"
                );
                check_error(&e, &path, kind, damage, &what);
                return Outcome::Detected;
            }
        }
    }
    if sessions.iter().any(|s| s == "s") {
        let data = root.read_attachments(ReadAttachmentsParams {
            session_id: "s".into(),
            invocation: r.invocation.clone(),
            offset: Some(0),
            limit: Some(READ_ATTACHMENTS_BYTES_MAX),
        });
        match data {
            Ok(d) => {
                let got = base64::engine::general_purpose::STANDARD
                    .decode(d.data_base64)
                    .unwrap();
                assert!(
                    got == r.attachments,
                    "{what}: readAttachments returned other bytes than were sent"
                );
            }
            Err(e) => {
                check_error(&e, &path, kind, damage, &what);
                return Outcome::Detected;
            }
        }
        // Receipts still answer: a repeat returns the original and appends nothing.
        if outcome == Outcome::Same {
            let rev = root.revision("s").unwrap();
            match root.send(r.send.clone()) {
                Ok(again) => assert_eq!(again.invocation, r.invocation, "{what}: send receipt"),
                Err(e) => {
                    check_error(&e, &path, kind, damage, &what);
                    return Outcome::Detected;
                }
            }
            match root.append(r.append.clone()) {
                Ok(again) => assert_eq!(again.last_sequence, rev, "{what}: append receipt"),
                Err(e) => {
                    check_error(&e, &path, kind, damage, &what);
                    return Outcome::Detected;
                }
            }
            assert_eq!(
                root.revision("s").unwrap(),
                rev,
                "{what}: a repeat appended"
            );
        }
    }
    if outcome == Outcome::Same && !kind.derived() && kind != FileType::RootHeader {
        // Nothing read differed: then verify must still see the damage (or it hit bytes no
        // reader depends on, which the caller counts).
        // Verify reports damage in its report (every damage, not the first).
        match root.verify() {
            Err(e) => {
                check_error(&e, &path, kind, damage, &what);
                return Outcome::Detected;
            }
            Ok(report) => {
                if let Some(d) = report.damage.first() {
                    check_damage(&d.code, &d.message, &path, kind, damage, &what);
                    return Outcome::Detected;
                }
            }
        }
    }
    outcome
}

struct Tally {
    same: Vec<String>,
    prefix: u64,
    detected: u64,
}

fn run(kind: FileType, edge: u64, spread: u64) -> Tally {
    let files = files_of(kind);
    assert!(!files.is_empty(), "{kind:?}: no such file in the fixture");
    let mut t = Tally {
        same: Vec::new(),
        prefix: 0,
        detected: 0,
    };
    for rel in files {
        let file_len = std::fs::metadata(reference_for(kind).dir.join(&rel))
            .unwrap()
            .len();
        // An active log segment may end in its preallocated zero region (docs/format.md),
        // which holds no data: damage there must change nothing, and is tried separately.
        let len = match kind {
            FileType::ActiveSegment | FileType::RootLog => {
                frames_end(&std::fs::read(reference_for(kind).dir.join(&rel)).unwrap())
            }
            _ => file_len,
        };
        for at in offsets(file_len - len, 8, 8) {
            for d in [
                Damage::Truncate(len + at + 1),
                Damage::Flip(len + at, 1 << (at % 8)),
            ] {
                if d_at(d) < file_len {
                    let o = trial(kind, &rel, d);
                    assert_eq!(
                        o,
                        Outcome::Same,
                        "{kind:?} {rel:?} {d:?} in the zero region"
                    );
                }
            }
        }
        let mut damages = Vec::new();
        for at in offsets(len, edge, spread) {
            damages.push(Damage::Truncate(at));
            damages.push(Damage::Flip(at, 1 << (at % 8)));
        }
        for d in damages {
            match trial(kind, &rel, d) {
                Outcome::Same => t.same.push(format!("{rel:?} {d:?}")),
                Outcome::Prefix => t.prefix += 1,
                Outcome::Detected => t.detected += 1,
            }
        }
    }
    println!(
        "{kind:?}: {} trials: {} detected, {} exact prefix, {} same",
        t.detected + t.prefix + t.same.len() as u64,
        t.detected,
        t.prefix,
        t.same.len()
    );
    t
}

fn d_at(d: Damage) -> u64 {
    match d {
        Damage::Truncate(at) | Damage::Flip(at, _) => at,
    }
}

/// End of the frames of an active log segment: frame lengths are followed from offset 32 until
/// an all-zero frame header (the preallocated region) or the end of the file.
fn frames_end(b: &[u8]) -> u64 {
    let mut pos = 32usize;
    while pos + 24 <= b.len() && b[pos..pos + 24].iter().any(|x| *x != 0) {
        let len = u32::from_le_bytes(b[pos..pos + 4].try_into().unwrap()) as usize;
        pos += 24 + len;
    }
    pos.min(b.len()) as u64
}

/// Damage to a derived file: every read, repeat and verify answered as if it were not there
/// (the file was rebuilt from the log, at open or when a read met a damaged entry).
fn assert_all_healed(kind: FileType, t: &Tally) {
    assert!(kind.derived());
    assert_eq!(
        (t.detected, t.prefix),
        (0, 0),
        "{kind:?}: derived-file damage reached a caller"
    );
}

/// Log and blob damage that nothing detects and nothing reads: listed, and must be none.
fn assert_nothing_silent(kind: FileType, t: &Tally) {
    assert!(
        t.same.is_empty(),
        "{kind:?}: damage that neither reads nor verify noticed: {:?}",
        t.same
    );
}

#[test]
fn sealed_segment_damage_is_detected() {
    let t = run(FileType::SealedSegment, 72, 32);
    assert_nothing_silent(FileType::SealedSegment, &t);
}

#[test]
fn active_segment_damage_is_detected_never_cut() {
    let t = run(FileType::ActiveSegment, 96, 48);
    assert_nothing_silent(FileType::ActiveSegment, &t);
    // Every batch of the fixture was acknowledged and its index entries synced: damage to
    // any of them is refused as corrupt, never cut away as a torn tail.
    assert_eq!(t.prefix, 0, "acknowledged batches were cut as a torn tail");
}

#[test]
fn root_log_damage_is_detected_or_cut_to_a_prefix() {
    let t = run(FileType::RootLog, 96, 32);
    assert_nothing_silent(FileType::RootLog, &t);
}

#[test]
fn root_header_damage_is_refused() {
    let t = run(FileType::RootHeader, 64, 0);
    assert_eq!(t.prefix, 0);
    assert!(t.same.is_empty(), "{:?}", t.same);
}

#[test]
fn damaged_sequence_index_is_rebuilt() {
    assert_all_healed(FileType::SeqIndex, &run(FileType::SeqIndex, 96, 32));
}

#[test]
fn damaged_row_index_is_rebuilt() {
    assert_all_healed(FileType::RowIndex, &run(FileType::RowIndex, 96, 32));
}

#[test]
fn damaged_receipt_index_is_rebuilt() {
    assert_all_healed(FileType::ReceiptIndex, &run(FileType::ReceiptIndex, 96, 32));
}

#[test]
fn damaged_checkpoint_is_rebuilt() {
    assert_all_healed(FileType::Checkpoint, &run(FileType::Checkpoint, 96, 32));
}

#[test]
fn blob_damage_is_never_returned_as_data() {
    let t = run(FileType::Blob, 16, 24);
    assert_nothing_silent(FileType::Blob, &t);
}

// ---- focused reproductions of the bugs the sweeps found (small Roots, fast) -----------------

/// A small Root: Session `s` with a send carrying one attachment and three Turns, indexes
/// synced and checkpointed, closed. Returns (tempdir, root dir, rows, the send).
fn small_root() -> (tempfile::TempDir, PathBuf, Vec<Value>, SendParams, String) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("root");
    let root = Root::open_or_init(&dir).unwrap();
    root.create_session(CreateSessionParams {
        session_id: Some("s".into()),
        workspace: None,
        operation: "create-s".into(),
    })
    .unwrap();
    let send = SendParams {
        session_id: "s".into(),
        operation: "send-1".into(),
        text: "see attached".into(),
        attachments: vec![SendAttachment {
            name: "a.bin".into(),
            mime_type: "application/octet-stream".into(),
            data_base64: base64::engine::general_purpose::STANDARD.encode(b"attachment bytes"),
        }],
    };
    let invocation = root.send(send.clone()).unwrap().invocation;
    for n in 0..3 {
        turn(&root, "s", n, &format!("result {n}"), false);
    }
    root.sync_indexes().unwrap();
    let (rows, _) = all_rows(&root, "s").unwrap();
    drop(root);
    (tmp, dir, rows, send, invocation)
}

/// FixedIndex header bytes (entries start after it).
const INDEX_HEADER_BYTES: u64 = 32;

fn cut_index(dir: &Path, name: &str, entry_bytes: u64, keep: u64) {
    let path = dir.join("sessions/s").join(name);
    let len = std::fs::metadata(&path).unwrap().len();
    let cut = INDEX_HEADER_BYTES + keep * entry_bytes;
    assert!(cut < len, "{name} has more than {keep} entries");
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(cut).unwrap();
}

/// BUG: `Session::resume_point` (engine/src/session.rs) trusts row.idx when seq.idx covers the
/// checkpoint, without checking that row.idx covers it too. A row.idx cut at an entry boundary
/// (a valid, shorter file) then makes every page come back with the missing rows silently left
/// out. Reproduction: this test.
#[test]
fn bug_row_index_cut_at_an_entry_boundary_is_rebuilt() {
    let (_tmp, dir, rows, _, _) = small_root();
    cut_index(&dir, "row.idx", 16, 2);
    let root = Root::open(&dir).unwrap();
    let (after, _) = all_rows(&root, "s").unwrap();
    assert_eq!(after.len(), rows.len(), "rows after a cut row.idx");
    assert_eq!(after, rows);
}

/// BUG: as above for receipt.idx: receipts past the cut are forgotten, so repeating an
/// acknowledged mutation applies it a second time (a new invocation, a new event).
#[test]
fn bug_receipt_index_cut_at_an_entry_boundary_keeps_receipts() {
    let (_tmp, dir, _, send, invocation) = small_root();
    cut_index(&dir, "receipt.idx", 24, 0);
    let root = Root::open(&dir).unwrap();
    let rev = root.revision("s").unwrap();
    let again = root.send(send).unwrap();
    assert_eq!(
        again.invocation, invocation,
        "the repeat returns the first receipt"
    );
    assert_eq!(
        root.revision("s").unwrap(),
        rev,
        "the repeat appends nothing"
    );
}

/// BUG: `BlobStore::read_range` (engine/src/blobs.rs) checks only a blob's length, so a
/// damaged attachment file is served by `readAttachments` as if it were the bytes sent.
#[test]
fn bug_flipped_blob_byte_is_served_as_attachment_data() {
    let (_tmp, dir, _, _, invocation) = small_root();
    let blobs: Vec<PathBuf> = std::fs::read_dir(dir.join("blobs"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(blobs.len(), 1);
    let mut bytes = std::fs::read(&blobs[0]).unwrap();
    bytes[3] ^= 0x20;
    std::fs::write(&blobs[0], &bytes).unwrap();
    let root = Root::open(&dir).unwrap();
    let got = root.read_attachments(ReadAttachmentsParams {
        session_id: "s".into(),
        invocation,
        offset: None,
        limit: None,
    });
    match got {
        Ok(d) => panic!("damaged attachment served as data: {}", d.data_base64),
        Err(e) => assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}"),
    }
}

/// BUG: FixedIndex entries carry no checksum and `Session::open` (engine/src/session.rs) only
/// proves the entry of the checkpoint's sequence; a flipped bit in another `seq.idx` entry
/// survives open, and the page that needs that event fails with `invalid_argument` ("no record
/// at Location ...", from `Log::read` via `Session::event_at`) instead of the index being
/// rebuilt (or at least `corrupt` naming seq.idx).
#[test]
fn bug_flipped_sequence_index_entry_is_rebuilt() {
    let (_tmp, dir, rows, _, _) = small_root();
    let path = dir.join("sessions/s/seq.idx");
    let mut bytes = std::fs::read(&path).unwrap();
    // Entry 1 (sequence 2) starts after the 32-byte header and one 24-byte entry; its first
    // byte is the low byte of the segment number.
    bytes[(INDEX_HEADER_BYTES + 24) as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    // The first read through the damaged entry is `corrupt`, naming the index...
    {
        let root = Root::open(&dir).unwrap();
        match all_rows(&root, "s") {
            Ok((after, _)) => assert_eq!(after, rows, "rows after a damaged seq.idx entry"),
            Err(e) => {
                assert_eq!(e.kind(), logbook_engine::ErrorKind::Corrupt, "{e}");
                assert!(e.to_string().contains("seq.idx"), "{e}");
            }
        }
    }
    // ...and the next open rebuilds the derived index from the log.
    let root = Root::open(&dir).unwrap();
    let (after, _) = all_rows(&root, "s").unwrap();
    assert_eq!(after, rows, "rows after the rebuild");
}
