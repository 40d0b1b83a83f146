//! Session bundles: canonical export, exact round trip (plain Sessions and forks of forks),
//! repeats and conflicts, and damaged bundles that change nothing.
mod common;
use common::*;
use logbook_engine::*;
use serde_json::{json, Value};
use std::path::Path;

fn p<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("params")
}

fn export(root: &Root, sid: &str, through: Option<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    let r = root
        .export_session(
            &ExportSessionParams {
                session_id: sid.into(),
                through,
            },
            &mut out,
        )
        .expect("export");
    assert_eq!(r.bytes, out.len() as u64);
    assert_eq!(r.digest, validate::sha256_digest(&out));
    out
}

fn import(
    root: &Root,
    bytes: &[u8],
    id: Option<&str>,
    op: &str,
) -> Result<ImportResult, EngineError> {
    root.import_bundle(
        &ImportBundleParams {
            session_id: id.map(str::to_owned),
            operation: op.into(),
        },
        &mut &bytes[..],
        Path::new("test.bundle"),
    )
}

/// A Session with every kind of content a bundle carries.
fn populate(root: &Root, sid: &str) -> (Vec<String>, Vec<String>) {
    let mut invocations = Vec::new();
    let a = root
        .send(p(json!({"sessionId": sid, "operation": "send-1", "text": "first question about tombstone\nsecond line",
            "attachments": [{"name": "a.txt", "mimeType": "text/plain", "dataBase64": "aGVsbG8gd29ybGQ="},
                            {"name": "b.bin", "mimeType": "application/octet-stream", "dataBase64": "AAECAwQ="}]})))
        .expect("send");
    invocations.push(a.invocation.clone());
    let inv = &a.invocation;
    append(
        root,
        sid,
        "model-1",
        &json!([{"kind": "modelCompletion", "invocation": inv, "model": "m1", "items": [
            {"kind": "assistant", "body": "Let me look. Émile's ĲSSEL", "thinking": "hmm"},
            {"kind": "toolCall", "id": "call-1", "name": "shell", "arguments": "{not json at all", "internal": false},
            {"kind": "toolCall", "id": "call-2", "name": "secret", "arguments": "{\"x\": 1.50}", "internal": true}
        ]}])
        .to_string(),
    )
    .expect("model");
    let tr: Value =
        serde_json::from_str(&tool_result(inv, "call-1", "exit 0: tombstone found")).expect("tr");
    let hidden: Value =
        serde_json::from_str(&tool_result(inv, "call-2", "internal output")).expect("tr");
    append(root, sid, "tools-1", &json!([tr, hidden]).to_string()).expect("tools");
    append(
        root,
        sid,
        "ctx-1",
        &json!([{"kind": "contextPrepared", "invocation": inv, "groups": [{"role": "system", "messages": [{"a": 1}], "estimatedTokens": 12}],
                 "tools": [{"name": "shell", "estimatedTokens": 3}], "providerUsage": {"in": 5}},
                {"kind": "interactionRequested", "interactionId": "ask-1", "invocation": inv, "prompt": "allow?", "options": ["y", "n"]},
                {"kind": "turnSettled", "invocation": inv, "outcome": "completed"}])
        .to_string(),
    )
    .expect("ctx");
    root.set_title(SetTitleParams {
        session_id: sid.into(),
        operation: "title-1".into(),
        title: "A titled conversation".into(),
    })
    .expect("title");
    let patch = root
        .store_patch(sid, "patch-1", b"diff --git a/x b/x\n+tombstone\n".to_vec())
        .expect("patch");
    root.record_diagnostic(p(
        json!({"sessionId": sid, "operation": "diag-1", "kind": "modelStep",
        "invocation": inv, "cause": {"code": "provider.timeout", "message": "no answer"}}),
    ))
    .expect("diag");
    (invocations, vec![patch.patch_id])
}

/// Every read a bundle promises to keep, as JSON.
fn reads(root: &Root, sid: &str, invocations: &[String], patches: &[String]) -> Value {
    let info = root.session_info(sid).expect("info");
    let rev = info.revision;
    let mut out = serde_json::Map::new();
    for (name, dir) in [
        ("newest", Direction::Backward),
        ("oldest", Direction::Forward),
    ] {
        let mut pages = Vec::new();
        let mut after = None;
        loop {
            let page = hist(root, sid, Some(rev), after, 2, dir);
            pages.push(serde_json::to_value(&page).expect("json"));
            match page.next_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
        out.insert(name.into(), Value::Array(pages));
    }
    let all = hist(root, sid, Some(rev), None, 1000, Direction::Forward);
    let mut sources = Vec::new();
    for row in &all.rows {
        for field in row.fields.keys() {
            let s = root
                .source(p(json!({"sessionId": sid, "through": rev, "position": row.position, "field": field})))
                .expect("source");
            sources.push(serde_json::to_value(&s).expect("json"));
        }
    }
    out.insert("source".into(), Value::Array(sources));
    let mut searches = Vec::new();
    for (q, cs) in [
        ("tombstone", true),
        ("TOMBSTONE", false),
        ("émile", false),
        ("xz", false),
    ] {
        let s = root
            .search(p(
                json!({"sessionId": sid, "query": q, "caseSensitive": cs, "through": rev}),
            ))
            .expect("search");
        searches.push(serde_json::to_value(&s).expect("json"));
    }
    out.insert("search".into(), Value::Array(searches));
    for t in 1..=rev {
        let c = root
            .context(ContextParams {
                session_id: sid.into(),
                through: Some(t),
            })
            .expect("context");
        out.insert(
            format!("context-{t}"),
            serde_json::to_value(&c).expect("json"),
        );
    }
    for inv in invocations {
        let a = root
            .attachments(AttachmentsParams {
                session_id: sid.into(),
                invocation: inv.clone(),
            })
            .expect("attachments");
        let d = root
            .read_attachments(ReadAttachmentsParams {
                session_id: sid.into(),
                invocation: inv.clone(),
                offset: None,
                limit: None,
            })
            .expect("read attachments");
        out.insert(format!("attachments-{inv}"), json!([a, d]));
    }
    let d = root
        .diagnostics(DiagnosticsParams {
            session_id: sid.into(),
            through: None,
            after: None,
            limit: None,
        })
        .expect("diagnostics");
    out.insert(
        "diagnostics".into(),
        serde_json::to_value(&d).expect("json"),
    );
    for id in patches {
        let r = root
            .read_patch(ReadPatchParams {
                session_id: sid.into(),
                patch_id: id.clone(),
                after: None,
                limit: None,
            })
            .expect("read patch");
        out.insert(
            format!("patch-{id}"),
            serde_json::to_value(&r).expect("json"),
        );
    }
    // Root-wide search, scoped to this Session, every page (cursors are bound to the Root
    // that answered: only the hits are compared).
    for q in ["tombstone", "TITLE"] {
        let mut hits = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = root
                .search_root(p(
                    json!({"query": q, "scope": {"sessionIds": [sid]}, "after": after, "limit": 256}),
                ))
                .expect("searchRoot");
            hits.push(serde_json::to_value(&page.hits).expect("json"));
            assert!(hits.len() < 10_000, "searchRoot pages never end: {page:?}");
            match page.next_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
        out.insert(format!("searchRoot-{q}"), Value::Array(hits));
    }
    out.insert("title".into(), json!(info.title));
    out.insert("revision".into(), json!(rev));
    Value::Object(out)
}

#[test]
fn export_is_canonical_and_import_answers_every_read_as_the_source() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = root_at(&tmp.path().join("a"));
    let sid = create(&src, "s");
    let (invs, patches) = populate(&src, &sid);
    let one = export(&src, &sid, None);
    let two = export(&src, &sid, None);
    assert_eq!(
        one, two,
        "the same Session under the same fence gives the same bytes"
    );
    assert_eq!(&one[..8], b"LBBUNDL\0");
    let want = reads(&src, &sid, &invs, &patches);

    let dst = root_at(&tmp.path().join("b"));
    let r = import(&dst, &one, None, "imp-1").expect("import");
    assert_eq!(r.session_id, "s");
    assert_eq!(r.revision, want["revision"].as_u64().expect("rev"));
    assert_eq!(reads(&dst, "s", &invs, &patches), want);
    // A repeat of the operation, and the same bundle under the same id by another operation:
    // the same answer, nothing new.
    assert_eq!(import(&dst, &one, None, "imp-1").expect("repeat"), r);
    assert_eq!(import(&dst, &one, None, "imp-2").expect("same bundle"), r);
    assert_eq!(dst.sessions().expect("sessions").len(), 1);
    // Exported again from the importing Root: the very same bytes.
    assert_eq!(export(&dst, "s", None), one);
    // A fence below the revision gives another bundle, canonical too, and imports as that prefix.
    let early = export(&src, &sid, Some(3));
    assert_eq!(early, export(&src, &sid, Some(3)));
    assert_ne!(early, one);
    let e = import(&dst, &early, None, "imp-3").expect_err("another Session under id s");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let r3 = import(&dst, &early, Some("s-early"), "imp-3").expect("under another id");
    assert_eq!(r3.revision, 3);
    let page = hist(&dst, "s-early", None, None, 100, Direction::Forward);
    assert_eq!(page.through, 3);
    // The import survives a reopen, and the Root verifies clean.
    drop(dst);
    let dst = root_at(&tmp.path().join("b"));
    assert_eq!(reads(&dst, "s", &invs, &patches), want);
    let v = dst.verify().expect("verify");
    assert!(v.damage.is_empty(), "{v:?}");
    // The importing Root keeps working: appends after the imported history.
    append(
        &dst,
        "s",
        "after-import",
        &json!([{"kind": "stopRequested", "invocation": invs[0]}]).to_string(),
    )
    .expect("append after import");
    // Operations the source used are answered as the source answered them.
    let e = dst
        .set_title(SetTitleParams {
            session_id: "s".into(),
            operation: "title-1".into(),
            title: "another".into(),
        })
        .expect_err("operation used");
    assert_eq!(e.kind(), ErrorKind::Conflict);
}

#[test]
fn forks_of_forks_export_canonically_and_keep_their_fork_rules() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = root_at(&tmp.path().join("a"));
    let sid = create(&src, "s");
    let (invs, _) = populate(&src, &sid);
    let rev = src.revision(&sid).expect("rev");
    let f1 = src
        .fork(ForkParams {
            session_id: sid.clone(),
            operation: "fork-1".into(),
            from: ForkFrom::All,
            revision: rev,
        })
        .expect("fork")
        .session_id;
    let f2 = src
        .fork(ForkParams {
            session_id: f1.clone(),
            operation: "fork-2".into(),
            from: ForkFrom::All,
            revision: rev,
        })
        .expect("fork of fork")
        .session_id;
    let b = src
        .send(p(
            json!({"sessionId": f2, "operation": "send-f2", "text": "in the fork of the fork"}),
        ))
        .expect("send");
    let one = export(&src, &f2, None);
    assert_eq!(one, export(&src, &f2, None));
    let want = reads(&src, &f2, &[invs[0].clone(), b.invocation.clone()], &[]);
    let dst = root_at(&tmp.path().join("b"));
    let r = import(&dst, &one, None, "imp").expect("import");
    assert_eq!(r.session_id, f2);
    assert_eq!(
        reads(&dst, &r.session_id, &[invs[0].clone(), b.invocation], &[]),
        want
    );
    // The fork's context was null at its fence (the source's contextPrepared is not the
    // fork's): the imported Session says so too.
    assert_eq!(want[format!("context-{rev}")], Value::Null);
    // The source's history under the same fence: the same events part as the fork's.
    let plain = export(&src, &sid, Some(rev));
    assert!(plain.len() > 100 && one.len() > 100);
}

fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("list") {
            let e = e.expect("entry");
            let path = e.path();
            let rel = path
                .strip_prefix(dir)
                .expect("inside")
                .display()
                .to_string();
            if rel.starts_with("tmp") || rel.starts_with("root-log") || rel.starts_with("catalog") {
                continue;
            }
            out.push(rel);
            if e.file_type().expect("type").is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn damaged_truncated_foreign_and_newer_bundles_change_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = root_at(&tmp.path().join("a"));
    let sid = create(&src, "s");
    populate(&src, &sid);
    let good = export(&src, &sid, None);
    let dst_dir = tmp.path().join("b");
    let dst = root_at(&dst_dir);
    create(&dst, "other");
    // Opened again: nothing written by this process yet, so not even the writer's `unsynced`
    // mark is there, and a refused import must not make it (its staging logs mark themselves).
    drop(dst);
    let dst = Root::open(&dst_dir).expect("reopen");
    let before = tree(&dst_dir);
    assert!(!before.iter().any(|f| f == logbook_log::UNSYNCED_MARK));
    let refuse = |bytes: &[u8], what: &str| {
        let e = import(&dst, bytes, None, "imp").expect_err(what);
        assert!(
            matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::UnsupportedFormat),
            "{what}: {e}"
        );
        assert_eq!(tree(&dst_dir), before, "{what}: files changed");
        e
    };
    // Truncated anywhere.
    let step = (good.len() / 97).max(1);
    for cut in (0..good.len()).step_by(step) {
        refuse(&good[..cut], &format!("cut at {cut}"));
    }
    // One bit flipped anywhere.
    for at in (0..good.len()).step_by(step) {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        refuse(&bad, &format!("bit at {at}"));
    }
    // Foreign bytes, and bytes after the end.
    let e = refuse(b"{\"kind\":\"userMessage\"}\n", "json");
    assert!(e.to_string().contains("not a Logbook bundle"), "{e}");
    let mut longer = good.clone();
    longer.push(0);
    refuse(&longer, "trailing byte");
    // A newer format: unsupported_format naming the version.
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&7u32.to_le_bytes());
    let e = refuse(&newer, "newer");
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
    assert!(e.to_string().contains('7'), "{e}");
    // After all that, the good bundle imports, and the Root verifies clean.
    let first = import(&dst, &good, None, "imp-good").expect("good import");
    // The same bundle again answers the same; a damaged copy of it is still refused.
    assert_eq!(
        import(&dst, &good, None, "imp-again").expect("again"),
        first
    );
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 2] ^= 1;
    let e = import(&dst, &bad, None, "imp-bad").expect_err("damaged copy");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    let v = dst.verify().expect("verify");
    assert!(v.damage.is_empty(), "{v:?}");
}

/// A small deterministic generator (xorshift64*), so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn text(&mut self, len: usize) -> String {
        const WORDS: [&str; 8] = [
            "tombstone",
            "Émile",
            "ĳssel",
            "error",
            "the",
            "ok\n",
            "日本語",
            "x",
        ];
        let mut s = String::new();
        while s.len() < len {
            s.push_str(WORDS[self.below(WORDS.len() as u64) as usize]);
            s.push(' ');
        }
        s
    }
}

/// One Turn of random shape: a send (maybe with attachments), a model step with text and
/// tool calls (arguments not always JSON, some internal), their results, maybe a prepared
/// context and an interaction, then the settle.
fn random_turn(root: &Root, sid: &str, rng: &mut Rng, n: u64, huge: bool) -> String {
    let attachments: Vec<Value> = (0..rng.below(3))
        .map(|i| {
            let bytes: Vec<u8> = (0..rng.below(3000)).map(|_| rng.next() as u8).collect();
            use base64::Engine as _;
            json!({"name": format!("f{i}"), "mimeType": "application/octet-stream",
                   "dataBase64": base64::engine::general_purpose::STANDARD.encode(bytes)})
        })
        .collect();
    let len = rng.below(200) as usize;
    let text = rng.text(len);
    let s = root
        .send(p(
            json!({"sessionId": sid, "operation": format!("send-{n}"), "text": text,
            "attachments": attachments}),
        ))
        .expect("send");
    let inv = s.invocation;
    let calls = rng.below(3);
    let mut items = vec![json!({"kind": "assistant", "body": rng.text(50), "thinking": null})];
    for c in 0..calls {
        let args = if rng.below(2) == 0 {
            "{\"a\": [1, 2.50]}".to_owned()
        } else {
            "not json {".to_owned()
        };
        items.push(
            json!({"kind": "toolCall", "id": format!("c{n}-{c}"), "name": "tool",
            "arguments": args, "internal": rng.below(4) == 0}),
        );
    }
    append(
        root,
        sid,
        &format!("model-{n}"),
        &json!([{"kind": "modelCompletion", "invocation": inv, "model": "m", "items": items}])
            .to_string(),
    )
    .expect("model");
    let mut results = Vec::new();
    for c in 0..calls {
        let body = if huge && c == 0 {
            format!("{} tombstone at the end", "x".repeat(3 << 20))
        } else {
            {
                let len = rng.below(500) as usize;
                rng.text(len)
            }
        };
        let v: Value =
            serde_json::from_str(&tool_result(&inv, &format!("c{n}-{c}"), &body)).expect("tr");
        results.push(v);
    }
    if !results.is_empty() {
        append(
            root,
            sid,
            &format!("tools-{n}"),
            &Value::Array(results).to_string(),
        )
        .expect("tools");
    }
    let mut tail = Vec::new();
    if rng.below(2) == 0 {
        tail.push(
            json!({"kind": "contextPrepared", "invocation": inv, "groups": [], "tools": [],
            "providerUsage": {"n": n}}),
        );
    }
    if rng.below(3) == 0 {
        tail.push(
            json!({"kind": "interactionRequested", "interactionId": format!("q{n}"),
            "invocation": inv, "prompt": rng.text(20), "options": null}),
        );
    }
    tail.push(json!({"kind": "turnSettled", "invocation": inv, "outcome": "completed"}));
    append(
        root,
        sid,
        &format!("settle-{n}"),
        &Value::Array(tail).to_string(),
    )
    .expect("settle");
    if rng.below(3) == 0 {
        root.set_title(SetTitleParams {
            session_id: sid.into(),
            operation: format!("title-{n}"),
            title: format!("title {n}"),
        })
        .expect("title");
    }
    inv
}

#[test]
fn random_sessions_and_forks_round_trip_exactly() {
    let seed: u64 = std::env::var("BUNDLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let mut rng = Rng(seed | 1);
    let tmp = tempfile::tempdir().expect("tmp");
    let src = root_at(&tmp.path().join("a"));
    let mut sessions: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    let mut n = 0;
    for k in 0..6 {
        // A new Session, or a fork of one made so far (forks of forks too).
        let sid = if k > 0 && rng.below(2) == 0 {
            let (from, mut invs, patches) =
                sessions[rng.below(sessions.len() as u64) as usize].clone();
            let rev = src.revision(&from).expect("rev");
            let f = src
                .fork(ForkParams {
                    session_id: from,
                    operation: format!("fork-{k}"),
                    // The whole history, or through one of its settled Turns.
                    from: match rng.below(2) {
                        0 if !invs.is_empty() => {
                            // The Turns after it are not in the fork.
                            invs.truncate(rng.below(invs.len() as u64) as usize + 1);
                            ForkFrom::Turn {
                                invocation: invs[invs.len() - 1].clone(),
                            }
                        }
                        _ => ForkFrom::All,
                    },
                    revision: rev,
                })
                .expect("fork")
                .session_id;
            sessions.push((f.clone(), invs, patches));
            f
        } else {
            let sid = create(&src, &format!("s{k}"));
            sessions.push((sid.clone(), Vec::new(), Vec::new()));
            sid
        };
        for _ in 0..1 + rng.below(4) {
            n += 1;
            let inv = random_turn(&src, &sid, &mut rng, n, n == 3);
            let last = sessions.len() - 1;
            sessions[last].1.push(inv.clone());
            if rng.below(3) == 0 {
                let patch = src
                    .store_patch(&sid, &format!("patch-{n}"), rng.text(100).into_bytes())
                    .expect("patch");
                sessions[last].2.push(patch.patch_id);
            }
            if rng.below(3) == 0 {
                src.record_diagnostic(p(json!({"sessionId": sid, "operation": format!("diag-{n}"),
                    "kind": "execution", "invocation": inv, "cause": {"code": "x.y", "message": "m"}})))
                    .expect("diag");
            }
        }
    }
    let dst = root_at(&tmp.path().join("b"));
    for (sid, invs, patches) in &sessions {
        // Patches of a fork's source are not the fork's: readPatch answers only its own.
        let own: Vec<String> = patches
            .iter()
            .filter(|id| {
                src.read_patch(ReadPatchParams {
                    session_id: sid.clone(),
                    patch_id: (*id).clone(),
                    after: None,
                    limit: None,
                })
                .is_ok()
            })
            .cloned()
            .collect();
        let bundle = export(&src, sid, None);
        assert_eq!(
            bundle,
            export(&src, sid, None),
            "seed {seed}: {sid} canonical"
        );
        let want = reads(&src, sid, invs, &own);
        import(&dst, &bundle, None, &format!("imp-{sid}")).expect("import");
        assert_eq!(reads(&dst, sid, invs, &own), want, "seed {seed}: {sid}");
    }
    let v = dst.verify().expect("verify");
    assert!(v.damage.is_empty(), "{v:?}");
}

#[test]
fn deep_json_goes_through_a_bundle_on_a_small_stack() {
    const DEPTH: usize = 100_000;
    let tmp = tempfile::tempdir().expect("tmp");
    let src = std::sync::Arc::new(root_at(&tmp.path().join("a")));
    let sid = create(&src, "deep");
    let raw = format!(
        "{}{}{}",
        "[{\"k\":".repeat(DEPTH / 2),
        "1.250e+01",
        "}]".repeat(DEPTH / 2)
    );
    let body = "deep";
    let request = format!(
        r#"{{"sessionId":"{sid}","operation":"deep-1","events":[{{"kind":"toolResult","invocation":"i","toolCallId":"c",
        "status":"ok","body":"{body}","raw":{raw},"parts":[],"bytes":4,"digest":"{}"}}]}}"#,
        validate::sha256_digest(body.as_bytes())
    );
    let dst_dir = tmp.path().join("b");
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let params: AppendParams = serde_json::from_str(&request).expect("deep request");
            src.append(params).expect("append");
            let bundle = export(&src, "deep", None);
            let dst = root_at(&dst_dir);
            import(&dst, &bundle, None, "imp").expect("import");
            let Event::ToolResult(t) = dst.read_event("deep", 2).expect("read") else {
                panic!("kind")
            };
            assert_eq!(t.raw.get(), raw);
        })
        .expect("spawn")
        .join()
        .expect("no stack overflow");
}

/// The index files of Session `sid` (sequence, row and receipt indexes), byte for byte.
fn index_files(dir: &Path, sid: &str) -> Vec<(String, Vec<u8>)> {
    ["seq.idx", "row.idx", "receipt.idx"]
        .iter()
        .map(|n| {
            let path = dir.join("sessions").join(sid).join(n);
            (n.to_string(), std::fs::read(&path).expect("index file"))
        })
        .collect()
}

/// An import builds the indexes and checkpoint while the events stream in, instead of
/// replaying the new log: they are the ones a replay of that log builds, byte for byte, for a
/// plain Session and for a fork (whose log carries a fork marker), and over several segments.
#[test]
fn an_imported_sessions_indexes_are_the_ones_a_replay_builds() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = root_at(&tmp.path().join("a"));
    let sid = create(&src, "s");
    let (invs, patches) = populate(&src, &sid);
    let mut rng = Rng(7);
    for n in 100..120 {
        random_turn(&src, &sid, &mut rng, n, false);
    }
    let fork = src
        .fork(ForkParams {
            session_id: sid.clone(),
            operation: "fork-idx".into(),
            from: ForkFrom::All,
            revision: src.revision(&sid).expect("rev"),
        })
        .expect("fork");
    random_turn(&src, &fork.session_id, &mut rng, 200, false);
    let bundles = [
        (sid.clone(), export(&src, &sid, None)),
        (
            fork.session_id.clone(),
            export(&src, &fork.session_id, None),
        ),
    ];
    // Patches are read from the Session that stored them.
    let patches_of = |id: &str| if *id == sid { &patches[..] } else { &[][..] };
    let dst_dir = tmp.path().join("b");
    Root::init(&dst_dir).expect("init");
    // Small segments: the imported log spans many sealed segments.
    let opts = || RootOptions {
        segment_bytes_max: 4 << 10,
        ..RootOptions::default()
    };
    let mut want = Vec::new();
    {
        let dst = Root::open_with(&dst_dir, opts()).expect("open");
        for (id, b) in &bundles {
            import(&dst, b, None, &format!("imp-{id}")).expect("import");
            want.push(reads(&dst, id, &invs, patches_of(id)));
        }
    }
    let sealed = std::fs::read_dir(dst_dir.join("sessions").join(&sid).join("log"))
        .expect("log dir")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .ends_with(".sealed")
        })
        .count();
    assert!(sealed > 3, "the import wrote {sealed} sealed segments");
    let built: Vec<_> = bundles
        .iter()
        .map(|(id, _)| index_files(&dst_dir, id))
        .collect();
    // Rebuilt by a replay: indexes and checkpoint gone, the Root opened and closed again.
    for (id, _) in &bundles {
        let dir = dst_dir.join("sessions").join(id);
        for n in ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"] {
            std::fs::remove_file(dir.join(n)).expect("remove");
        }
    }
    {
        let dst = Root::open_with(&dst_dir, opts()).expect("reopen");
        for ((id, _), want) in bundles.iter().zip(&want) {
            assert_eq!(&reads(&dst, id, &invs, patches_of(id)), want, "{id}");
        }
        dst.sync_indexes().expect("sync");
    }
    for ((id, _), built) in bundles.iter().zip(&built) {
        assert_eq!(&index_files(&dst_dir, id), built, "{id}");
    }
    let dst = Root::open_with(&dst_dir, opts()).expect("reopen");
    let v = dst.verify().expect("verify");
    assert!(v.damage.is_empty(), "{v:?}");
}

/// A write that fails while the imported log is written (here: the first write of its
/// second sealed segment) fails the import with `io` and leaves the Root as it was; the
/// same bundle then imports.
#[test]
fn a_failed_write_mid_import_leaves_the_root_unchanged() {
    use logbook_log::io::{FaultyFs, Injected, Op};
    let tmp = tempfile::tempdir().expect("tmp");
    let src = root_at(&tmp.path().join("a"));
    let sid = create(&src, "s");
    populate(&src, &sid);
    let mut rng = Rng(11);
    for n in 100..120 {
        random_turn(&src, &sid, &mut rng, n, false);
    }
    let good = export(&src, &sid, None);
    let dst_dir = tmp.path().join("b");
    Root::init(&dst_dir).expect("init");
    let (fs, faults) = FaultyFs::new();
    let dst = Root::open_with(
        &dst_dir,
        RootOptions {
            log_fs: Some(std::sync::Arc::new(fs)),
            segment_bytes_max: 4 << 10,
            ..RootOptions::default()
        },
    )
    .expect("open");
    create(&dst, "other");
    dst.settle_spares();
    let before = tree(&dst_dir);
    faults.arm_on(Op::Write, "00001.sealed.tmp", 0, Injected::Eio);
    let e = import(&dst, &good, None, "imp").expect_err("the write fails");
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(faults.all_fired());
    assert_eq!(tree(&dst_dir), before, "files changed");
    let r = import(&dst, &good, None, "imp").expect("import after the failure");
    assert_eq!(r.session_id, "s");
    let v = dst.verify().expect("verify");
    assert!(v.damage.is_empty(), "{v:?}");
}
