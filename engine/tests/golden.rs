//! A Root of format v1, committed under `tests/data/golden-v1/`, must keep opening and reading
//! exactly as recorded in `tests/data/golden-v1.expected.json`, so a format change cannot slip
//! by. Regenerate (only for a deliberate format change, with a version bump) with
//! `LOGBOOK_WRITE_GOLDEN=1 cargo test -p logbook-engine --test golden`.
mod common;
use base64::Engine as _;
use common::*;
use logbook_engine::*;
use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// The events of the fixture's append `a1` (JSON), for the invocation `send` returned.
fn a1_events(inv: &str) -> String {
    format!(
        r#"[{{"kind":"contextPrepared","invocation":"{inv}","groups":[{{"role":"user","messages":[{{"text":"hi"}}],"estimatedTokens":12}}],"tools":[{{"name":"read","estimatedTokens":40}}],"providerUsage":{{"inputTokens":52}}}},
            {{"kind":"modelCompletion","invocation":"{inv}","model":"model-x","items":[
              {{"kind":"assistant","body":"Reading it.","thinking":"The user wants the file."}},
              {{"kind":"toolCall","id":"call-1","name":"read","arguments":"{{\"path\": \"src/main.rs\"}}"}},
              {{"kind":"toolCall","id":"call-2","name":"bookkeeping","arguments":"{{oops","internal":true}}],"usage":{{"inputTokens":52,"outputTokens":9}}}},
            {},{},
            {{"kind":"interactionRequested","interactionId":"ask-1","invocation":"{inv}","prompt":"Allow writing?","options":["yes","no"]}}]"#,
        tool_result(inv, "call-1", "fn main() {}\n"),
        tool_result(inv, "call-2", "")
    )
}

fn build(dir: &Path) {
    let root = Root::open_or_init(dir).expect("init");
    root.create_session(CreateSessionParams {
        session_id: Some("golden".into()),
        workspace: Some("/home/user/project".into()),
        operation: "c1".into(),
    })
    .expect("create");
    root.create_session(CreateSessionParams {
        session_id: Some("second".into()),
        workspace: None,
        operation: "c2".into(),
    })
    .expect("create");
    let data = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake image bytes");
    let sent = root
        .send(SendParams {
            session_id: "golden".into(),
            operation: "s1".into(),
            text: "Read the file, please. ünïcødé ✓".into(),
            attachments: vec![SendAttachment {
                name: "shot.png".into(),
                mime_type: "image/png".into(),
                data_base64: data,
            }],
        })
        .expect("send");
    let inv = sent.invocation;
    let json = a1_events(&inv);
    append(&root, "golden", "a1", &json).expect("append");
    root.respond(RespondParams {
        session_id: "golden".into(),
        operation: "r1".into(),
        interaction_id: "ask-1".into(),
        response: RawJson::from_string(r#"{"choice": "yes", "n": 1.0e0}"#.into()).expect("json"),
    })
    .expect("respond");
    root.stop(StopParams {
        session_id: "golden".into(),
        operation: "st1".into(),
        invocation: inv.clone(),
    })
    .expect("stop");
    append(
        &root,
        "golden",
        "a2",
        &format!(r#"[{{"kind":"turnSettled","invocation":"{inv}","outcome":"stopped"}}]"#),
    )
    .expect("settle");
}

fn observe(root: &Root) -> serde_json::Value {
    let v = |x: &dyn erased::Ser| x.to_value();
    let rev = root.revision("golden").expect("rev");
    let events: Vec<serde_json::Value> = (1..=rev)
        .map(|s| v(&root.read_event("golden", s).expect("event")))
        .collect();
    let mut pages = Vec::new();
    for dir in [Direction::Forward, Direction::Backward] {
        let mut after = None;
        loop {
            let p = hist(root, "golden", Some(rev), after, 2, dir);
            after = p.next_after.clone();
            pages.push(v(&p));
            if after.is_none() {
                break;
            }
        }
    }
    let inv = match root.read_event("golden", 2).expect("event") {
        Event::UserMessage(m) => m.invocation,
        other => panic!("{other:?}"),
    };
    // Exact texts of raw JSON values (number spelling, spacing), which a Value would normalise.
    let mut raw_texts = Vec::new();
    for s in 1..=rev {
        match root.read_event("golden", s).expect("event") {
            Event::ToolResult(t) => raw_texts.push(t.raw.get().to_owned()),
            Event::InteractionResolved(r) => raw_texts.push(r.response.get().to_owned()),
            Event::InteractionRequested(r) => raw_texts.push(r.options.get().to_owned()),
            _ => {}
        }
    }
    serde_json::json!({
        "rawTexts": raw_texts,
        // The facts the fixture was recorded with (times and sizes differ per machine).
        "sessions": root.sessions().expect("sessions").iter().map(|s| serde_json::json!({
            "sessionId": s.session_id, "workspace": s.workspace,
            "revision": s.revision, "branch": v(&s.branch)})).collect::<Vec<_>>(),
        "events": events,
        "pages": pages,
        "interaction": v(&root.interaction("golden", "ask-1").expect("interaction")),
        "context": v(&root.context(ContextParams { session_id: "golden".into(), through: None }).expect("context")),
        "attachments": v(&root.attachments(AttachmentsParams { session_id: "golden".into(), invocation: inv.clone() }).expect("attachments")),
        "attachmentBytes": v(&root.read_attachments(ReadAttachmentsParams { session_id: "golden".into(), invocation: inv, offset: None, limit: None }).expect("read")),
        "watch": v(&root.watch(WatchParams { session_id: "golden".into(), after: Some(0), timeout_ms: Some(0) }).expect("watch")),
    })
}

mod erased {
    pub trait Ser {
        fn to_value(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_value(&self) -> serde_json::Value {
            // Through text, so raw JSON values are parsed as JSON.
            serde_json::from_str(&serde_json::to_string(self).expect("serialize")).expect("parse")
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("ls") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

#[test]
fn golden_v1_root_reads_as_recorded() {
    let fixture = data().join("golden-v1");
    let expected_path = data().join("golden-v1.expected.json");
    if std::env::var("LOGBOOK_WRITE_GOLDEN").is_ok() {
        let _ = std::fs::remove_dir_all(&fixture);
        build(&fixture);
        let root = Root::open(&fixture).expect("open");
        let obs = observe(&root);
        drop(root);
        std::fs::write(
            &expected_path,
            serde_json::to_string_pretty(&obs).expect("json") + "\n",
        )
        .expect("write");
    }
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&expected_path).expect("expected json"))
            .expect("parse");
    // Open a copy (open takes the lock and may refresh derived files).
    let tmp = tempfile::tempdir().expect("tmp");
    let copy = tmp.path().join("r");
    copy_dir(&fixture, &copy);
    let root = Root::open(&copy).expect("open golden");
    assert_eq!(observe(&root), expected);
    assert!(root.verify().expect("verify").records > 0);
    drop(root);
    // The same from the log alone: derived files removed.
    let copy2 = tmp.path().join("r2");
    copy_dir(&fixture, &copy2);
    for s in ["golden", "second"] {
        for f in ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"] {
            let _ = std::fs::remove_file(copy2.join("sessions").join(s).join(f));
        }
    }
    let root = Root::open(&copy2).expect("open golden without indexes");
    assert_eq!(observe(&root), expected);
}

#[test]
fn golden_v1_receipts_still_answer_repeats() {
    // Receipts of format v1 hold the append digest over every event byte; the digest is now
    // computed without toolResult bodies, and the old one must still recognise a repeat.
    let tmp = tempfile::tempdir().expect("tmp");
    let copy = tmp.path().join("r");
    copy_dir(&data().join("golden-v1"), &copy);
    let root = Root::open(&copy).expect("open golden");
    let rev = root.revision("golden").expect("rev");
    let inv = match root.read_event("golden", 2).expect("event") {
        Event::UserMessage(m) => m.invocation,
        other => panic!("{other:?}"),
    };
    let again = append(&root, "golden", "a1", &a1_events(&inv)).expect("repeat of a1");
    assert_eq!(
        (again.first_sequence, again.last_sequence),
        (3, 7),
        "the stored outcome of a1"
    );
    assert_eq!(
        root.revision("golden").expect("rev"),
        rev,
        "nothing appended"
    );
    let changed = a1_events(&inv).replace("Reading it.", "Reading it!");
    let e = append(&root, "golden", "a1", &changed).expect_err("other parameters");
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
}
