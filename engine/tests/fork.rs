//! fork / forkReceipt: behaviour, model test against the source's prefix, restarts, crashes.
mod common;
use common::*;
use logbook_engine::*;
use std::path::Path;

fn opts(segment: u64) -> RootOptions {
    RootOptions {
        segment_bytes_max: segment,
        ..RootOptions::default()
    }
}

fn open_root(dir: &Path, segment: u64) -> Root {
    if !dir.exists() {
        Root::init(dir).expect("init");
    }
    Root::open_with(dir, opts(segment)).expect("open")
}

fn send(root: &Root, sid: &str, op: &str, text: &str) -> SendResult {
    root.send(SendParams {
        session_id: sid.into(),
        operation: op.into(),
        text: text.into(),
        attachments: vec![],
    })
    .expect("send")
}

fn settle(inv: &str) -> String {
    format!(r#"{{"kind":"turnSettled","invocation":"{inv}","outcome":"completed"}}"#)
}

fn completion(inv: &str, body: &str) -> String {
    serde_json::json!({"kind":"modelCompletion","invocation":inv,"model":"m",
        "items":[{"kind":"assistant","body":body,"thinking":"t"}],"usage":null})
    .to_string()
}

fn fork(
    root: &Root,
    sid: &str,
    op: &str,
    from: ForkFrom,
    revision: u64,
) -> Result<ForkResult, EngineError> {
    root.fork(ForkParams {
        session_id: sid.into(),
        operation: op.into(),
        from,
        revision,
    })
}

fn turn(inv: &str) -> ForkFrom {
    ForkFrom::Turn {
        invocation: inv.into(),
    }
}

/// Every row under fence `through`, read forward in small pages.
fn all_rows(root: &Root, sid: &str, through: u64) -> Vec<Row> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let p = hist(root, sid, Some(through), after, 7, Direction::Forward);
        assert_eq!(p.through, through);
        out.extend(p.rows);
        match p.next_after {
            None => return out,
            a => after = a,
        }
    }
}

fn events_through(root: &Root, sid: &str, through: u64) -> Vec<Event> {
    (1..=through)
        .map(|s| root.read_event(sid, s).expect("event"))
        .collect()
}

fn revision(root: &Root, sid: &str) -> u64 {
    root.session_info(sid).expect("info").revision
}

#[test]
fn fork_a_settled_turn_while_a_later_one_runs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = open_root(&tmp.path().join("r"), 64 << 20);
    let sid = create(&root, "src");
    let t1 = send(&root, &sid, "s1", "first question");
    append(
        &root,
        &sid,
        "a1",
        &format!(
            "[{},{}]",
            completion(&t1.invocation, "first answer"),
            settle(&t1.invocation)
        ),
    )
    .expect("append");
    let through1 = revision(&root, &sid);
    let t2 = send(&root, &sid, "s2", "second question");
    let rev = revision(&root, &sid);
    let stale = fork(&root, &sid, "f0", turn(&t1.invocation), rev - 1).expect_err("stale revision");
    assert_eq!(stale.kind(), ErrorKind::Conflict);
    let running = fork(&root, &sid, "f1", turn(&t2.invocation), rev).expect_err("unsettled turn");
    assert_eq!(running.kind(), ErrorKind::Conflict);
    let all = fork(&root, &sid, "f2", ForkFrom::All, rev).expect_err("all copies a running turn");
    assert_eq!(all.kind(), ErrorKind::Conflict);
    let unknown = fork(&root, &sid, "f3", turn("nope"), rev).expect_err("unknown invocation");
    assert_eq!(unknown.kind(), ErrorKind::NotFound);
    assert_eq!(
        root.fork_receipt(ForkReceiptParams {
            session_id: sid.clone(),
            operation: "f0".into()
        })
        .expect("receipt"),
        None,
        "a refused fork published nothing"
    );

    let f = fork(&root, &sid, "f4", turn(&t1.invocation), rev).expect("fork");
    assert_eq!(
        f.branch,
        Branch {
            session_id: sid.clone(),
            through: through1,
            turn: Some(t1.invocation.clone())
        }
    );
    assert_ne!(f.session_id, sid);
    let info = root.session_info(&f.session_id).expect("fork info");
    assert_eq!(info.revision, through1);
    assert_eq!(info.branch, Some(f.branch.clone()));
    assert_eq!(info.workspace, Some("/work/space".into()));
    for t in 1..=through1 {
        assert_eq!(all_rows(&root, &f.session_id, t), all_rows(&root, &sid, t));
    }
    assert_eq!(
        events_through(&root, &f.session_id, through1),
        events_through(&root, &sid, through1)
    );
    // No active work in the fork; the source still runs its Turn.
    let w = root
        .watch(WatchParams {
            session_id: f.session_id.clone(),
            after: Some(through1),
            timeout_ms: Some(0),
        })
        .expect("watch");
    assert!(w.queue.is_empty() && w.pending_interactions.is_empty() && w.events.is_empty());
    assert_eq!(
        revision(&root, &sid),
        rev,
        "a fork writes no event into its source"
    );
    // Repeats return the same fork; other parameters conflict.
    let again = fork(&root, &sid, "f4", turn(&t1.invocation), rev).expect("repeat");
    assert_eq!(again, f);
    let other = fork(&root, &sid, "f4", ForkFrom::All, rev).expect_err("other params");
    assert_eq!(other.kind(), ErrorKind::Conflict);
    assert_eq!(
        root.fork_receipt(ForkReceiptParams {
            session_id: sid.clone(),
            operation: "f4".into()
        })
        .expect("receipt"),
        Some(f.clone())
    );
    // The fork's operation is the source's: it cannot be reused there for another mutation.
    let reuse = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "f4".into(),
            text: "x".into(),
            attachments: vec![],
        })
        .expect_err("operation already used by the fork");
    assert_eq!(reuse.kind(), ErrorKind::Conflict);
    // Source receipts are not inherited: "s2" is free in the fork.
    let t3 = send(&root, &f.session_id, "s2", "a question only the fork sees");
    assert_eq!(t3.sequence, through1 + 1);
    assert_eq!(revision(&root, &sid), rev);
    assert_eq!(
        root.sessions().expect("sessions").len(),
        2,
        "exactly one fork was made"
    );
}

#[test]
fn fork_all_context_attachments_and_interactions() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = open_root(&tmp.path().join("r"), 64 << 20);
    let sid = create(&root, "src");
    let data = b"attached bytes".to_vec();
    use base64::Engine as _;
    let t1 = root
        .send(SendParams {
            session_id: sid.clone(),
            operation: "s1".into(),
            text: "see file".into(),
            attachments: vec![SendAttachment {
                name: "a.txt".into(),
                mime_type: "text/plain".into(),
                data_base64: base64::engine::general_purpose::STANDARD.encode(&data),
            }],
        })
        .expect("send");
    let inv = &t1.invocation;
    let ctx = format!(
        r#"{{"kind":"contextPrepared","invocation":"{inv}","groups":[{{"role":"user","messages":[1],"estimatedTokens":3}}],"tools":[{{"name":"read","estimatedTokens":5}}],"providerUsage":null}}"#
    );
    let ask = format!(
        r#"{{"kind":"interactionRequested","interactionId":"q1","invocation":"{inv}","prompt":"Allow?","options":["y"]}}"#
    );
    append(&root, &sid, "a1", &format!("[{ctx},{ask},{}]", settle(inv))).expect("append");
    let rev = revision(&root, &sid);
    let c = root
        .context(ContextParams {
            session_id: sid.clone(),
            through: None,
        })
        .expect("context")
        .expect("the source prepared a request");
    assert_eq!(c.sequence, 3);
    assert_eq!(c.groups[0].estimated_tokens, 3);
    assert_eq!(c.tools[0].estimated_tokens, 5);
    // providerUsage null comes back as null on the wire (stored as the JSON text "null").
    assert_eq!(
        serde_json::to_value(&c.provider_usage).expect("json"),
        serde_json::Value::Null
    );
    assert_eq!(
        root.context(ContextParams {
            session_id: sid.clone(),
            through: Some(2),
        })
        .expect("context"),
        None,
        "nothing prepared at or before the fence"
    );
    assert_eq!(root.pending_interactions(&sid).expect("pending").len(), 1);
    let f = fork(&root, &sid, "f", ForkFrom::All, rev).expect("fork all");
    assert_eq!(f.branch.through, rev);
    assert_eq!(f.branch.turn, None);
    let fid = &f.session_id;
    // Copied history is not a request the fork made.
    assert_eq!(
        root.context(ContextParams {
            session_id: fid.clone(),
            through: None
        })
        .expect("fork context"),
        None
    );
    assert!(root.pending_interactions(fid).expect("pending").is_empty());
    assert!(root.interaction(fid, "q1").expect("interaction").is_some());
    let metas = root
        .attachments(AttachmentsParams {
            session_id: fid.clone(),
            invocation: inv.clone(),
        })
        .expect("attachments");
    assert_eq!(metas.len(), 1);
    let got = root
        .read_attachments(ReadAttachmentsParams {
            session_id: fid.clone(),
            invocation: inv.clone(),
            offset: None,
            limit: None,
        })
        .expect("read attachments");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(got.data_base64)
            .expect("b64"),
        data
    );
    // The fork prepares its own request: now it has a context.
    let t2 = send(&root, fid, "s2", "next");
    let ctx2 = ctx.replace(inv.as_str(), &t2.invocation);
    append(&root, fid, "c2", &format!("[{ctx2}]")).expect("ctx");
    let c = root
        .context(ContextParams {
            session_id: fid.clone(),
            through: None,
        })
        .expect("context")
        .expect("own context");
    assert_eq!(c.invocation, t2.invocation);
    drop(root);
    // Rules hold after a restart, with the indexes and checkpoint rebuilt from the log too.
    let dir = tmp.path().join("r");
    let mut first_reuse = None;
    for rebuild in [false, true] {
        if rebuild {
            let sdir = dir.join("sessions").join(fid);
            // (A Session this small may have been closed without a checkpoint.)
            for f in ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"] {
                match std::fs::remove_file(sdir.join(f)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        panic!("remove derived file: {e}")
                    }
                    _ => {}
                }
            }
        }
        let root = open_root(&dir, 64 << 20);
        assert!(root.pending_interactions(fid).expect("pending").is_empty());
        let c = root
            .context(ContextParams {
                session_id: fid.clone(),
                through: Some(rev),
            })
            .expect("context");
        assert_eq!(c, None, "rebuild={rebuild}");
        // Source receipts stay out of the fork after a rebuild too.
        let t = root
            .send(SendParams {
                session_id: fid.clone(),
                operation: "s1".into(),
                text: "reuse".into(),
                attachments: vec![],
            })
            .expect("s1 is free in the fork");
        assert!(t.sequence > rev);
        // After the rebuild the fork's own receipt holds, the source's stays out.
        assert_eq!(first_reuse.get_or_insert(t.clone()), &t);
        assert_eq!(
            all_rows(&root, fid, rev),
            all_rows(&root, &sid, rev),
            "rebuild={rebuild}"
        );
    }
}

/// A tiny deterministic generator (xorshift64*), so failures replay.
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
}

/// One random Turn: userMessage, completions, tool results, settle, split into random batches
/// (the settle sometimes shares a batch with the next Turn's userMessage). Returns the
/// invocation and the sequence of its turnSettled.
fn random_turn(
    root: &Root,
    sid: &str,
    rng: &mut Rng,
    n: &mut u64,
    carry: &mut Vec<String>,
) -> (String, u64) {
    *n += 1;
    let inv = format!("inv-{sid}-{n}");
    let mut evs: Vec<String> = std::mem::take(carry);
    evs.push(
        serde_json::json!({"kind":"userMessage","invocation":inv,"text":format!("q{n} {}", "x".repeat(rng.below(300) as usize)),"attachments":[]})
            .to_string(),
    );
    for i in 0..rng.below(4) {
        let body = format!("answer {n}.{i} {}", "é".repeat(rng.below(700) as usize));
        let call = format!("c{n}-{i}");
        let internal = rng.below(4) == 0;
        evs.push(
            serde_json::json!({"kind":"modelCompletion","invocation":inv,"model":"m","items":[
                {"kind":"assistant","body":body,"thinking":"th"},
                {"kind":"toolCall","id":call,"name":"read","arguments":"{}","internal":internal}],"usage":null})
            .to_string(),
        );
        evs.push(tool_result(&inv, &call, &format!("result {n}.{i}")));
    }
    evs.push(settle(&inv));
    // Cut into batches; flush everything but maybe the settle's batch tail.
    let mut i = 0;
    while i < evs.len() {
        let take = 1 + rng.below(3) as usize;
        let end = (i + take).min(evs.len());
        let batch = format!("[{}]", evs[i..end].join(","));
        append(root, sid, &format!("op-{sid}-{n}-{i}"), &batch).expect("append");
        i = end;
    }
    (inv, revision(root, sid))
}

#[test]
fn model_fork_at_random_points() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let segment = 4096;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // (fork id, source, through, events of the source through the fence)
    let mut forks: Vec<(String, String, u64, ForkResult, String)> = Vec::new();
    {
        let root = open_root(&dir, segment);
        let sid = create(&root, "model");
        let mut n = 0;
        let mut carry = Vec::new();
        let mut settled: Vec<(String, u64)> = Vec::new();
        for round in 0..14 {
            let (inv, at) = random_turn(&root, &sid, &mut rng, &mut n, &mut carry);
            settled.push((inv, at));
            // Sometimes a later Turn is running while we fork.
            let running = rng.below(2) == 0;
            if running {
                send(&root, &sid, &format!("run-{round}"), "running");
                n += 1;
            }
            let rev = revision(&root, &sid);
            let pick = &settled[rng.below(settled.len() as u64) as usize];
            // Only Turns after which everything copied is settled can be forked: pick the
            // latest settled Turn, or an earlier one (everything before it is settled too).
            let from = if !running && rng.below(3) == 0 {
                ForkFrom::All
            } else {
                turn(&pick.0)
            };
            let op = format!("fork-{round}");
            let before = (all_rows(&root, &sid, rev), events_through(&root, &sid, rev));
            let f = fork(&root, &sid, &op, from.clone(), rev).expect("fork");
            assert_eq!(
                (all_rows(&root, &sid, rev), events_through(&root, &sid, rev)),
                before,
                "forking leaves the source unchanged"
            );
            assert_eq!(revision(&root, &sid), rev);
            let through = match from {
                ForkFrom::All => rev,
                ForkFrom::Turn { .. } => pick.1,
            };
            assert_eq!(f.branch.through, through);
            assert_eq!(revision(&root, &f.session_id), through);
            forks.push((f.session_id.clone(), sid.clone(), through, f, op));
            if running {
                // Settle the running Turn so the next round starts clean.
                let inv = format!("run-inv-{round}");
                let _ = inv;
                let last = root.read_event(&sid, revision(&root, &sid)).expect("last");
                if let Event::UserMessage(m) = last {
                    append(
                        &root,
                        &sid,
                        &format!("settle-run-{round}"),
                        &format!("[{}]", settle(&m.invocation)),
                    )
                    .expect("settle");
                }
            }
            // The fork lives on by itself.
            let fid = &forks.last().expect("pushed").0;
            send(&root, fid, &format!("own-{round}"), "fork's own question");
        }
        let sealed = std::fs::read_dir(dir.join("sessions/model/log"))
            .expect("ls")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".sealed"))
            })
            .count();
        assert!(
            sealed > 2,
            "tiny segments: the source has sealed segments ({sealed})"
        );
        check_forks(&root, &forks);
    }
    // Restart: everything holds, repeats give the same forks.
    let root = open_root(&dir, segment);
    check_forks(&root, &forks);
    for (_, src, _, f, op) in &forks {
        let r = root
            .fork_receipt(ForkReceiptParams {
                session_id: src.clone(),
                operation: op.clone(),
            })
            .expect("receipt");
        assert_eq!(r.as_ref(), Some(f));
    }
    let n_sessions = root.sessions().expect("sessions").len();
    assert_eq!(n_sessions, forks.len() + 1);
    root.verify()
        .expect("verify walks every checksum of forks too");
}

fn check_forks(root: &Root, forks: &[(String, String, u64, ForkResult, String)]) {
    for (fid, src, through, _, _) in forks {
        assert_eq!(
            events_through(root, fid, *through),
            events_through(root, src, *through)
        );
        let mut fences: Vec<u64> = (1..=*through).collect();
        if fences.len() > 12 {
            // Every fence of the short forks, a spread of the long ones.
            let step = fences.len() / 12;
            fences = fences.into_iter().step_by(step).collect();
            fences.push(*through);
        }
        for t in fences {
            assert_eq!(
                all_rows(root, fid, t),
                all_rows(root, src, t),
                "fork {fid} fence {t}"
            );
            let back = hist(root, fid, Some(t), None, 5, Direction::Backward);
            assert_eq!(back, {
                let mut b = hist(root, src, Some(t), None, 5, Direction::Backward);
                // Cursors bind the Session; compare the rows and whether there is more.
                b.next_after = b
                    .next_after
                    .map(|_| back.next_after.clone().unwrap_or_default());
                b
            });
        }
    }
}

fn build_source(dir: &Path) -> u64 {
    let root = open_root(dir, 4096);
    let sid = create(&root, "src");
    let mut rng = Rng(77);
    let mut n = 0;
    let mut carry = Vec::new();
    for _ in 0..8 {
        random_turn(&root, &sid, &mut rng, &mut n, &mut carry);
    }
    revision(&root, &sid)
}

fn no_staging_left(dir: &Path) {
    for e in std::fs::read_dir(dir.join("sessions")).expect("ls") {
        let name = e.expect("entry").file_name();
        assert!(
            !name.to_string_lossy().starts_with('.'),
            "staging directory {name:?} left behind"
        );
    }
}

/// A fork that exists must be whole: its history equals the source's prefix.
fn assert_whole(root: &Root, f: &ForkResult) {
    let t = f.branch.through;
    assert!(revision(root, &f.session_id) >= t);
    assert_eq!(
        events_through(root, &f.session_id, t),
        events_through(root, &f.branch.session_id, t)
    );
    assert_eq!(
        all_rows(root, &f.session_id, t),
        all_rows(root, &f.branch.session_id, t)
    );
}

#[test]
fn crash_points_leave_no_fork_or_a_whole_one() {
    if let Ok(dir) = std::env::var("LOGBOOK_FORK_CHILD") {
        let root = open_root(Path::new(&dir), 4096);
        let rev = revision(&root, "src");
        let _ = fork(&root, "src", "crash-op", ForkFrom::All, rev);
        std::process::exit(0);
    }
    for point in ["checked", "committed"] {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("r");
        let rev = build_source(&dir);
        let status = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "crash_points_leave_no_fork_or_a_whole_one",
                "--exact",
                "--nocapture",
            ])
            .env("LOGBOOK_FORK_CHILD", &dir)
            .env("LOGBOOK_FORK_FAILPOINT", point)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("spawn");
        assert!(
            !status.success(),
            "{point}: the child died at the failpoint"
        );
        let root = open_root(&dir, 4096);
        no_staging_left(&dir);
        let receipt = root
            .fork_receipt(ForkReceiptParams {
                session_id: "src".into(),
                operation: "crash-op".into(),
            })
            .expect("receipt");
        let n = root.sessions().expect("sessions").len();
        if point == "committed" {
            let f = receipt.clone().expect("committed before the crash");
            assert_whole(&root, &f);
            assert_eq!(n, 2);
        } else {
            assert_eq!(receipt, None, "{point}: nothing published");
            assert_eq!(n, 1, "{point}: no half fork is visible");
        }
        // Repeating the operation gives one fork, never a second.
        let f = fork(&root, "src", "crash-op", ForkFrom::All, rev).expect("repeat");
        if let Some(r) = receipt {
            assert_eq!(r, f);
        }
        assert_whole(&root, &f);
        assert_eq!(root.sessions().expect("sessions").len(), 2, "{point}");
        assert_eq!(
            revision(&root, "src"),
            rev,
            "{point}: the source is unchanged"
        );
    }
}

#[test]
fn kill_9_during_forks() {
    if let Ok(dir) = std::env::var("LOGBOOK_FORK_KILL_CHILD") {
        let root = open_root(Path::new(&dir), 4096);
        let rev = revision(&root, "src");
        for i in 0.. {
            fork(&root, "src", &format!("k-{i}"), ForkFrom::All, rev).expect("fork in child");
        }
        std::process::exit(0);
    }
    let mut rng = Rng(4242);
    for round in 0..4 {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("r");
        let rev = build_source(&dir);
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["kill_9_during_forks", "--exact", "--nocapture"])
            .env("LOGBOOK_FORK_KILL_CHILD", &dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(150 + rng.below(250)));
        child.kill().expect("kill -9");
        let _ = child.wait();
        let root = open_root(&dir, 4096);
        no_staging_left(&dir);
        let mut published = 0;
        let mut i = 0;
        loop {
            let op = format!("k-{i}");
            let r = root
                .fork_receipt(ForkReceiptParams {
                    session_id: "src".into(),
                    operation: op.clone(),
                })
                .expect("receipt");
            match r {
                Some(f) => {
                    assert_whole(&root, &f);
                    published += 1;
                }
                None => {
                    // The op the child was killed in: repeating it makes exactly one fork.
                    let f = fork(&root, "src", &op, ForkFrom::All, rev).expect("repeat");
                    assert_whole(&root, &f);
                    let again = fork(&root, "src", &op, ForkFrom::All, rev).expect("repeat");
                    assert_eq!(f, again);
                    published += 1;
                    break;
                }
            }
            i += 1;
        }
        assert_eq!(
            root.sessions().expect("sessions").len(),
            1 + published,
            "round {round}: one Session per published fork, no orphans"
        );
        eprintln!("round {round}: {published} forks published before the kill");
        assert!(published >= 1);
    }
}

#[test]
fn fork_from_a_sealed_segment_and_fork_of_a_fork() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = open_root(&dir, 4096);
    let sid = create(&root, "src");
    let mut rng = Rng(5);
    let mut n = 0;
    let mut carry = Vec::new();
    let (first, first_at) = random_turn(&root, &sid, &mut rng, &mut n, &mut carry);
    let seg0 = dir.join("sessions/src/log/00000000000000000000.sealed");
    let mut rounds = 0;
    while !seg0.exists() {
        random_turn(&root, &sid, &mut rng, &mut n, &mut carry);
        rounds += 1;
        assert!(rounds < 1000, "segment 0 never sealed");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // The fence's segment is sealed now: the fork re-frames its records.
    let rev = revision(&root, &sid);
    let f = fork(&root, &sid, "f1", turn(&first), rev).expect("fork");
    assert_eq!(f.branch.through, first_at);
    assert_whole(&root, &f);
    // A fork of the fork, after the fork grew on its own.
    for i in 0..3 {
        random_turn(&root, &f.session_id, &mut rng, &mut n, &mut carry);
        let _ = i;
    }
    let frev = revision(&root, &f.session_id);
    let ff = fork(&root, &f.session_id, "ff", ForkFrom::All, frev).expect("fork of fork");
    assert_whole(&root, &ff);
    assert_eq!(
        all_rows(&root, &ff.session_id, first_at),
        all_rows(&root, &sid, first_at)
    );
    // And a fork of the fork from a fence inside the copied part.
    let ff2 = fork(&root, &f.session_id, "ff2", turn(&first), frev).expect("fork inside copy");
    assert_eq!(ff2.branch.through, first_at);
    assert_whole(&root, &ff2);
    drop(root);
    let root = open_root(&dir, 4096);
    for x in [&f, &ff, &ff2] {
        assert_whole(&root, x);
    }
    root.verify().expect("verify");
}

/// Every hit of `query` under `through`, paged with a small limit (pages cross the boundary
/// between a fork's base and its own rows).
fn all_hits(root: &Root, sid: &str, query: &str, through: u64) -> Vec<SearchHit> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let p = root
            .search(SearchParams {
                session_id: sid.into(),
                query: query.into(),
                case_sensitive: None,
                whole_word: None,
                through: Some(through),
                after,
                limit: Some(3),
            })
            .expect("search");
        assert_eq!(p.through, through);
        out.extend(p.hits);
        match p.next_after {
            None => return out,
            a => after = a,
        }
    }
}

/// Everything a client can read of a Session at its current revision.
#[derive(Debug, PartialEq)]
struct Snapshot {
    revision: u64,
    events: Vec<Event>,
    rows: Vec<Row>,
    hits: Vec<SearchHit>,
    kinds: Vec<String>,
    back: Vec<Row>,
}

fn snapshot(root: &Root, sid: &str) -> Snapshot {
    let revision = revision(root, sid);
    let w = root
        .watch(WatchParams {
            session_id: sid.into(),
            after: Some(0),
            timeout_ms: Some(0),
        })
        .expect("watch");
    let mut back = Vec::new();
    let mut after = None;
    loop {
        let p = hist(root, sid, Some(revision), after, 4, Direction::Backward);
        back.extend(p.rows);
        match p.next_after {
            None => break,
            a => after = a,
        }
    }
    Snapshot {
        revision,
        events: events_through(root, sid, revision),
        rows: all_rows(root, sid, revision),
        hits: all_hits(root, sid, "ANSWER", revision),
        kinds: w.events.into_iter().map(|e| e.kind).collect(),
        back,
    }
}

/// The part of a source that a fork with fence `through` shows: the fork read under its
/// fence equals the source read under the same fence.
fn assert_prefix(root: &Root, fork: &str, source: &str, through: u64) {
    assert_eq!(
        events_through(root, fork, through),
        events_through(root, source, through)
    );
    assert_eq!(
        all_rows(root, fork, through),
        all_rows(root, source, through)
    );
    assert_eq!(
        all_hits(root, fork, "answer", through),
        all_hits(root, source, "answer", through)
    );
    assert_eq!(
        all_hits(root, fork, "RESULT", through),
        all_hits(root, source, "RESULT", through)
    );
}

#[test]
fn forks_of_forks_with_appends_on_every_layer_and_reopen() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let mut rng = Rng(0xF0F0_1234);
    let mut n = 0;
    let mut carry = Vec::new();
    // (fork, source, through)
    let mut forks: Vec<(String, String, u64)> = Vec::new();
    let mut snaps: Vec<(String, Snapshot)> = Vec::new();
    {
        let root = open_root(&dir, 4096);
        let sid = create(&root, "src");
        let mut src_turns = Vec::new();
        for _ in 0..6 {
            src_turns.push(random_turn(&root, &sid, &mut rng, &mut n, &mut carry));
        }
        let rev = revision(&root, &sid);
        let before = snapshot(&root, &sid);
        let f1 = fork(&root, &sid, "f1", turn(&src_turns[3].0), rev).expect("fork");
        assert_eq!(
            snapshot(&root, &sid),
            before,
            "forking leaves the source unchanged"
        );
        assert_eq!(revision(&root, &f1.session_id), src_turns[3].1);
        forks.push((f1.session_id.clone(), sid.clone(), f1.branch.through));
        // Both grow after the fork; the source's segments get sealed under the fork.
        let mut f1_turns = Vec::new();
        for _ in 0..5 {
            random_turn(&root, &sid, &mut rng, &mut n, &mut carry);
            f1_turns.push(random_turn(
                &root,
                &f1.session_id,
                &mut rng,
                &mut n,
                &mut carry,
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_prefix(&root, &f1.session_id, &sid, f1.branch.through);
        // Own events start right after the fence.
        let first_own = root
            .read_event(&f1.session_id, f1.branch.through + 1)
            .expect("first own event");
        assert!(
            matches!(first_own, Event::UserMessage(ref m) if m.invocation.contains(&f1.session_id))
        );
        // A fork of the fork beyond its fence, and one inside its base.
        let frev = revision(&root, &f1.session_id);
        let ff = fork(&root, &f1.session_id, "ff", ForkFrom::All, frev).expect("fork of fork");
        let ff2 = fork(&root, &f1.session_id, "ff2", turn(&src_turns[1].0), frev)
            .expect("fork of fork inside its base");
        assert_eq!(ff2.branch.through, src_turns[1].1);
        let ff3 = fork(&root, &f1.session_id, "ff3", turn(&f1_turns[2].0), frev)
            .expect("fork of fork at one of its own Turns");
        forks.push((ff.session_id.clone(), f1.session_id.clone(), frev));
        forks.push((
            ff2.session_id.clone(),
            f1.session_id.clone(),
            ff2.branch.through,
        ));
        forks.push((
            ff3.session_id.clone(),
            f1.session_id.clone(),
            ff3.branch.through,
        ));
        // A fourth layer, then appends on every layer.
        let ffrev = revision(&root, &ff.session_id);
        let fff = fork(&root, &ff.session_id, "fff", ForkFrom::All, ffrev).expect("third level");
        forks.push((fff.session_id.clone(), ff.session_id.clone(), ffrev));
        for _ in 0..3 {
            for s in [
                &sid,
                &f1.session_id,
                &ff.session_id,
                &ff2.session_id,
                &fff.session_id,
            ] {
                random_turn(&root, s, &mut rng, &mut n, &mut carry);
            }
        }
        for (f, s, t) in &forks {
            assert_prefix(&root, f, s, *t);
            // Transitively: a fork of a fork shows the first source under its fence too.
            assert_prefix(&root, f, &sid, (*t).min(f1.branch.through));
        }
        // Receipts: the fork operations are the sources', source receipts are not inherited.
        let again = fork(&root, &f1.session_id, "ff", ForkFrom::All, frev).expect("repeat");
        assert_eq!(again, ff);
        for op in ["ff", "f1"] {
            let t = send(
                &root,
                &ff.session_id,
                op,
                "a source's operation is free in the fork",
            );
            assert_eq!(t.sequence, revision(&root, &ff.session_id));
            let settled = format!("[{}]", settle(&t.invocation));
            append(&root, &ff.session_id, &format!("{op}-settle"), &settled).expect("settle");
        }
        for id in [
            &sid,
            &f1.session_id,
            &ff.session_id,
            &ff2.session_id,
            &ff3.session_id,
            &fff.session_id,
        ] {
            snaps.push((id.clone(), snapshot(&root, id)));
        }
        // Layered forks hold only their own events.
        let f1_log = dir.join("sessions").join(&f1.session_id).join("log");
        let src_log = dir.join("sessions/src/log");
        let size = |d: &Path| -> u64 {
            std::fs::read_dir(d)
                .expect("ls")
                .map(|e| e.expect("entry").metadata().expect("meta").len())
                .sum()
        };
        assert!(
            size(&f1_log) < size(&src_log),
            "the fork's log holds no copy"
        );
        root.verify().expect("verify walks layered forks");
    }
    let check = |root: &Root| {
        for (id, s) in &snaps {
            assert_eq!(&snapshot(root, id), s, "Session {id}");
        }
        for (f, s, t) in &forks {
            assert_prefix(root, f, s, *t);
        }
    };
    // Reopen: indexes and checkpoints of the last run.
    let root = open_root(&dir, 4096);
    check(&root);
    root.verify().expect("verify after reopen");
    drop(root);
    // Reopen with every derived file of every Session removed: all rebuilt from the logs.
    for e in std::fs::read_dir(dir.join("sessions")).expect("ls") {
        let d = e.expect("entry").path();
        for f in ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"] {
            let _ = std::fs::remove_file(d.join(f));
        }
        let _ = std::fs::remove_dir_all(d.join("search"));
    }
    let root = open_root(&dir, 4096);
    check(&root);
    root.verify().expect("verify after rebuild");
    // Still writable on every layer after all that, and the forks stay put.
    for (id, _) in &snaps {
        random_turn(&root, id, &mut rng, &mut n, &mut carry);
    }
    for (f, s, t) in &forks {
        assert_prefix(&root, f, s, *t);
    }
    drop(root);
    let root = open_root(&dir, 4096);
    for (f, s, t) in &forks {
        assert_prefix(&root, f, s, *t);
    }
}

#[test]
fn a_fork_operation_is_taken_in_its_source_for_every_mutation_and_across_restarts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let f = {
        let root = open_root(&dir, 64 << 20);
        let sid = create(&root, "src");
        let t = send(&root, &sid, "s1", "q");
        append(&root, &sid, "a1", &format!("[{}]", settle(&t.invocation))).expect("settle");
        let rev = revision(&root, &sid);
        fork(&root, &sid, "fk", ForkFrom::All, rev).expect("fork")
    };
    for _ in 0..2 {
        let root = open_root(&dir, 64 << 20);
        let s = root
            .send(SendParams {
                session_id: "src".into(),
                operation: "fk".into(),
                text: "x".into(),
                attachments: vec![],
            })
            .expect_err("taken by the fork");
        assert_eq!(s.kind(), ErrorKind::Conflict);
        let p = root
            .patch_receipt("src", "fk")
            .expect_err("taken by the fork");
        assert_eq!(p.kind(), ErrorKind::Conflict);
        let rev = revision(&root, "src");
        assert_eq!(
            fork(&root, "src", "fk", ForkFrom::All, rev).expect("repeat"),
            f
        );
        assert_eq!(
            root.fork_receipt(ForkReceiptParams {
                session_id: "src".into(),
                operation: "fk".into()
            })
            .expect("receipt"),
            Some(f.clone())
        );
        // In the fork itself the operation is free.
        send(&root, &f.session_id, &format!("fk-{rev}"), "own");
    }
}
