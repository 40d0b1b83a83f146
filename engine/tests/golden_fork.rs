//! Forks written in the first fork format (the fork's log starts with a copy of the source's
//! prefix, closed by a fork marker; its indexes hold the copied entries), committed under
//! `tests/data/golden-fork-v1/`, must keep opening and reading exactly as recorded in
//! `tests/data/golden-fork-v1.expected.json`, after forks became layered on their source.
//! The fixture was written by the engine before that change; regenerating it now would write
//! the new layout, so `LOGBOOK_WRITE_GOLDEN_FORK=1` is only for an engine that writes copies.
mod common;
use common::*;
use logbook_engine::*;
use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn turn(root: &Root, sid: &str, n: u32, internal: bool) -> String {
    let inv = root
        .send(SendParams {
            session_id: sid.into(),
            operation: format!("send-{sid}-{n}"),
            text: format!("question {n} of {sid}: {}", "words ".repeat(40)),
            attachments: vec![],
        })
        .expect("send")
        .invocation;
    let call = format!("call-{n}");
    let json = format!(
        r#"[{{"kind":"modelCompletion","invocation":"{inv}","model":"m","items":[
              {{"kind":"assistant","body":"answer {n} needle {}","thinking":"think {n}"}},
              {{"kind":"toolCall","id":"{call}","name":"read","arguments":"{{}}","internal":{internal}}}],"usage":null}},
            {},
            {{"kind":"turnSettled","invocation":"{inv}","outcome":"completed"}}]"#,
        "é".repeat(60),
        tool_result(&inv, &call, &format!("result {n} needle"))
    );
    append(root, sid, &format!("append-{sid}-{n}"), &json).expect("append");
    inv
}

/// Writes the fixture: a source with sealed segments, a fork from a Turn inside a sealed
/// segment, a fork of the fork, each grown on its own afterwards.
fn build(dir: &Path) {
    Root::init(dir).expect("init");
    let root = Root::open_with(
        dir,
        RootOptions {
            segment_bytes_max: 4096,
            ..RootOptions::default()
        },
    )
    .expect("open");
    create(&root, "src");
    let mut invs = Vec::new();
    for n in 0..12 {
        invs.push(turn(&root, "src", n, n % 3 == 1));
    }
    // Let the sealer catch up, so the fork links sealed segments and re-frames a sealed one.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let rev = root.revision("src").expect("rev");
    let f = root
        .fork(ForkParams {
            session_id: "src".into(),
            operation: "fork-1".into(),
            from: ForkFrom::Turn {
                invocation: invs[6].clone(),
            },
            revision: rev,
        })
        .expect("fork");
    for n in 100..103 {
        turn(&root, &f.session_id, n, false);
    }
    let frev = root.revision(&f.session_id).expect("rev");
    let ff = root
        .fork(ForkParams {
            session_id: f.session_id.clone(),
            operation: "fork-2".into(),
            from: ForkFrom::All,
            revision: frev,
        })
        .expect("fork of fork");
    turn(&root, &ff.session_id, 200, false);
    for n in 12..14 {
        turn(&root, "src", n, false);
    }
}

fn observe(root: &Root) -> serde_json::Value {
    let v = |x: &dyn erased::Ser| x.to_value();
    let mut out = serde_json::Map::new();
    let sessions = root.sessions().expect("sessions");
    // The facts the fixture was recorded with (times and sizes differ per machine).
    let listed: Vec<serde_json::Value> = sessions
        .iter()
        .map(|s| {
            serde_json::json!({"sessionId": s.session_id, "workspace": s.workspace,
                               "revision": s.revision, "branch": v(&s.branch)})
        })
        .collect();
    out.insert("sessions".into(), serde_json::Value::Array(listed));
    for s in &sessions {
        let sid = &s.session_id;
        let rev = s.revision;
        let events: Vec<serde_json::Value> = (1..=rev)
            .map(|q| v(&root.read_event(sid, q).expect("event")))
            .collect();
        let mut pages = Vec::new();
        for dir in [Direction::Forward, Direction::Backward] {
            let mut after = None;
            loop {
                let p = hist(root, sid, Some(rev), after, 5, dir);
                after = p.next_after.clone();
                let mut p = v(&p);
                // Cursors are opaque; the rows and whether there is more are what is compared.
                p["nextAfter"] = serde_json::Value::Bool(after.is_some());
                pages.push(p);
                if after.is_none() {
                    break;
                }
            }
        }
        let search = root
            .search(SearchParams {
                session_id: sid.clone(),
                query: "NEEDLE".into(),
                case_sensitive: None,
                whole_word: None,
                through: None,
                after: None,
                limit: Some(1024),
            })
            .expect("search");
        let watch = root
            .watch(WatchParams {
                session_id: sid.clone(),
                after: Some(0),
                timeout_ms: Some(0),
            })
            .expect("watch");
        let context = root
            .context(ContextParams {
                session_id: sid.clone(),
                through: None,
            })
            .expect("context");
        out.insert(
            sid.clone(),
            serde_json::json!({
                "events": events,
                "pages": pages,
                "search": v(&search.hits),
                "watch": v(&watch),
                "context": v(&context),
            }),
        );
    }
    let receipts: Vec<serde_json::Value> = sessions
        .iter()
        .flat_map(|s| ["fork-1", "fork-2"].map(|op| (s.session_id.clone(), op)))
        .map(|(sid, op)| {
            v(&root
                .fork_receipt(ForkReceiptParams {
                    session_id: sid,
                    operation: op.into(),
                })
                .expect("receipt"))
        })
        .collect();
    out.insert("receipts".into(), serde_json::Value::Array(receipts));
    serde_json::Value::Object(out)
}

mod erased {
    pub trait Ser {
        fn to_value(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_value(&self) -> serde_json::Value {
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
fn golden_fork_v1_root_reads_as_recorded() {
    let fixture = data().join("golden-fork-v1");
    let expected_path = data().join("golden-fork-v1.expected.json");
    if std::env::var("LOGBOOK_WRITE_GOLDEN_FORK").is_ok() {
        let _ = std::fs::remove_dir_all(&fixture);
        build(&fixture);
        // Derived search files and the lock are not part of the fixture.
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
    let tmp = tempfile::tempdir().expect("tmp");
    let copy = tmp.path().join("r");
    copy_dir(&fixture, &copy);
    let root = Root::open(&copy).expect("open golden fork Root");
    assert_eq!(observe(&root), expected);
    root.verify()
        .expect("verify walks the old-format forks clean");
    // The old-format forks still take appends and still fork.
    let sessions = root.sessions().expect("sessions");
    for s in &sessions {
        let n = root
            .send(SendParams {
                session_id: s.session_id.clone(),
                operation: "after-upgrade".into(),
                text: "a question after the upgrade".into(),
                attachments: vec![],
            })
            .expect("send to an old-format Session");
        assert_eq!(n.sequence, s.revision + 1);
    }
    drop(root);
    // From the logs alone: every derived file removed.
    let copy2 = tmp.path().join("r2");
    copy_dir(&fixture, &copy2);
    for s in &sessions {
        let d = copy2.join("sessions").join(&s.session_id);
        for f in ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"] {
            let _ = std::fs::remove_file(d.join(f));
        }
        let _ = std::fs::remove_dir_all(d.join("search"));
    }
    let root = Root::open(&copy2).expect("open golden fork Root without indexes");
    assert_eq!(observe(&root), expected);
    root.verify().expect("verify after rebuild");
}
