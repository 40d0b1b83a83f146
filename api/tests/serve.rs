#![allow(clippy::unwrap_used)]
//! End-to-end: `logbook serve` as a child process, over stdin and stdout.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn new_root() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn create(server: &mut Server, id: &str, workspace: Option<&std::path::Path>) {
    let r = server.ok(
        "createSession",
        json!({"sessionId": id, "workspace": workspace, "operation": format!("create-{id}")}),
    );
    assert_eq!(r["sessionId"], id);
}

/// One settled Turn: a message, a completion with a call, its result, settled.
fn turn(server: &mut Server, session: &str, n: usize) -> String {
    let sent = server.ok(
        "send",
        json!({"sessionId": session, "operation": format!("send-{n}"), "text": format!("question {n}: why does the tombstone stay?"), "attachments": []}),
    );
    let inv = sent["invocation"].as_str().unwrap().to_owned();
    let call = format!("call-{n}");
    server.ok(
        "append",
        json!({"sessionId": session, "operation": format!("step-{n}"), "events": [
            {"kind": "modelCompletion", "invocation": inv, "model": "m", "usage": null, "items": [
                {"kind": "assistant", "body": format!("answer {n}"), "thinking": "hmm"},
                {"kind": "toolCall", "id": call, "name": "read", "arguments": "{\"path\": \"a\""}]},
            tool_result(&inv, &call, &format!("file {n} contents")),
            {"kind": "turnSettled", "invocation": inv, "outcome": "completed"}]}),
    );
    inv
}

#[test]
fn malformed_lines_get_errors_and_the_server_keeps_going() {
    let root = new_root();
    let mut s = Server::start(root.path());
    s.send_line("this is not json");
    let a = s.next_line();
    assert_eq!(a["id"], Value::Null);
    assert_eq!(a["error"]["code"], "invalid_argument");
    s.send_line(r#"{"id": "x7", "params": {}}"#);
    let a = s.next_line();
    assert_eq!(a["id"], "x7");
    assert_eq!(a["error"]["code"], "invalid_argument");
    s.send_line(r#"{"id": 3, "method": "noSuchMethod", "params": {}}"#);
    assert_eq!(s.next_line()["error"]["code"], "invalid_argument");
    s.send_line("[1,2");
    assert_eq!(s.next_line()["id"], Value::Null);
    assert_eq!(
        s.err("history", json!({"sessionId": "absent"})),
        "not_found"
    );
    assert_eq!(s.err("history", json!({"nope": 1})), "invalid_argument");
    // Still serving.
    create(&mut s, "s1", None);
    assert!(s.finish().success());
}

#[test]
fn write_read_page_and_restart() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", None);
    let invs: Vec<String> = (0..5).map(|n| turn(&mut s, "s1", n)).collect();
    // 1 sessionCreated + 5 * (userMessage, modelCompletion, toolResult, turnSettled)
    let page = s.ok(
        "history",
        json!({"sessionId": "s1", "through": null, "after": null, "limit": 4}),
    );
    assert_eq!(page["through"], 21);
    let rows = page["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["kind"], "user");
    assert_eq!(
        rows[0]["position"],
        json!({"sourceSequence": 2, "itemIndex": 0})
    );
    assert_eq!(rows[0]["invocation"], invs[0].as_str());
    assert_eq!(rows[1]["kind"], "assistant");
    assert_eq!(rows[1]["fields"]["thinking"]["text"], "hmm");
    assert_eq!(rows[2]["kind"], "toolCall");
    assert_eq!(
        rows[2]["position"],
        json!({"sourceSequence": 3, "itemIndex": 1})
    );
    assert_eq!(
        rows[2]["fields"]["arguments"]["text"], "{\"path\": \"a\"",
        "malformed arguments kept exactly"
    );
    assert_eq!(rows[3]["kind"], "toolResult");
    assert_eq!(
        rows[3]["fields"]["body"],
        json!({"text": "file 0 contents", "bytes": 15, "truncated": false})
    );

    // Follow the pages to the end under the fence.
    let mut all = rows.clone();
    let mut after = page["nextAfter"].clone();
    while !after.is_null() {
        let p = s.ok(
            "history",
            json!({"sessionId": "s1", "through": 21, "after": after, "limit": 4}),
        );
        all.extend(p["rows"].as_array().unwrap().iter().cloned());
        after = p["nextAfter"].clone();
    }
    assert_eq!(all.len(), 20);

    // Backward from the end opens the conversation at its end.
    let back = s.ok(
        "history",
        json!({"sessionId": "s1", "direction": "backward", "limit": 2}),
    );
    let rows = back["rows"].as_array().unwrap();
    assert_eq!(
        rows[0]["position"],
        json!({"sourceSequence": 20, "itemIndex": 0})
    );
    assert_eq!(
        rows[1]["position"],
        json!({"sourceSequence": 19, "itemIndex": 1})
    );

    // A repeat of an operation returns the first receipt; other parameters conflict.
    let again = s.ok("send", json!({"sessionId": "s1", "operation": "send-0", "text": "question 0: why does the tombstone stay?", "attachments": []}));
    assert_eq!(again["invocation"], invs[0].as_str());
    assert_eq!(again["sequence"], 2);
    assert_eq!(
        s.err(
            "send",
            json!({"sessionId": "s1", "operation": "send-0", "text": "other", "attachments": []})
        ),
        "conflict"
    );
    assert!(s.finish().success());

    // After a restart: the same pages, the same receipts.
    let mut s = Server::start(root.path());
    let page2 = s.ok(
        "history",
        json!({"sessionId": "s1", "through": null, "after": null, "limit": 4}),
    );
    assert_eq!(page2, page);
    let again = s.ok("send", json!({"sessionId": "s1", "operation": "send-0", "text": "question 0: why does the tombstone stay?", "attachments": []}));
    assert_eq!(again["sequence"], 2);
    let sessions = s.ok("sessions", json!({}));
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1);
    assert!(sessions["nextAfter"].is_null());
}

#[test]
fn invalid_batches_append_nothing() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", None);
    let inv = s.ok(
        "send",
        json!({"sessionId": "s1", "operation": "m", "text": "hi", "attachments": []}),
    )["invocation"]
        .clone();
    let mut bad = tool_result(inv.as_str().unwrap(), "c", "body");
    bad["digest"] = json!(digest(b"other"));
    let good = json!({"kind": "turnSettled", "invocation": inv, "outcome": "completed"});
    assert_eq!(
        s.err(
            "append",
            json!({"sessionId": "s1", "operation": "a", "events": [good, bad]})
        ),
        "invalid_argument"
    );
    assert_eq!(
        s.err(
            "append",
            json!({"sessionId": "s1", "operation": "a", "events": [{"kind": "noSuchKind"}]})
        ),
        "invalid_argument"
    );
    let h = s.ok("history", json!({"sessionId": "s1"}));
    assert_eq!(h["through"], 2, "nothing was appended");
    // The failed operation stored no receipt: it can now be applied.
    let r = s.ok(
        "append",
        json!({"sessionId": "s1", "operation": "a", "events": [good]}),
    );
    assert_eq!(r, json!({"firstSequence": 3, "lastSequence": 3}));
}

#[test]
fn deep_raw_json_is_accepted() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", None);
    let inv = s.ok(
        "send",
        json!({"sessionId": "s1", "operation": "m", "text": "hi", "attachments": []}),
    )["invocation"]
        .as_str()
        .unwrap()
        .to_owned();
    let depth = 100_000;
    let raw = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let body = "deep";
    let line = format!(
        r#"{{"id":99,"method":"append","params":{{"sessionId":"s1","operation":"deep","events":[{{"kind":"toolResult","invocation":"{inv}","toolCallId":"c","status":"ok","body":"{body}","raw":{raw},"parts":[],"bytes":4,"digest":"{}"}}]}}}}"#,
        digest(body.as_bytes())
    );
    s.send_line(&line);
    let a = s.answer(99);
    assert_eq!(
        a["result"],
        json!({"firstSequence": 3, "lastSequence": 3}),
        "{a}"
    );
    assert!(s.finish().success());
    // It reads back after a restart too (the log decodes it without recursion).
    let mut s = Server::start(root.path());
    let h = s.ok("history", json!({"sessionId": "s1"}));
    assert_eq!(
        h["rows"].as_array().unwrap().last().unwrap()["fields"]["body"]["text"],
        "deep"
    );
}

#[test]
fn watch_waits_without_holding_up_later_requests() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", None);
    let watch = s.request(
        "watch",
        json!({"sessionId": "s1", "after": 1, "timeoutMs": 20_000}),
    );
    let started = Instant::now();
    // Requests after the watch are answered while it waits.
    let sent = s.ok(
        "send",
        json!({"sessionId": "s1", "operation": "m", "text": "hi", "attachments": []}),
    );
    assert_eq!(sent["sequence"], 2);
    let w = s.answer(watch);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the watch woke on the append"
    );
    let w = &w["result"];
    assert_eq!(w["events"], json!([{"sequence": 2, "kind": "userMessage"}]));
    assert_eq!(w["nextAfter"], 2);
    assert_eq!(
        w["queue"].as_array().unwrap().len(),
        1,
        "the sent message is admitted, not settled: {w}"
    );
    // A timeout answers with no events.
    let t = Instant::now();
    let w = s.ok(
        "watch",
        json!({"sessionId": "s1", "after": 2, "timeoutMs": 200}),
    );
    assert!(t.elapsed() >= Duration::from_millis(150));
    assert_eq!(w["events"], json!([]));
}

#[test]
fn long_fields_are_cut_in_rows_and_read_whole_with_source() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", None);
    // 70,000 bytes of two-byte characters: the cut must land on a boundary.
    let text: String = "é".repeat(35_000);
    s.ok(
        "send",
        json!({"sessionId": "s1", "operation": "m", "text": text, "attachments": []}),
    );
    let h = s.ok("history", json!({"sessionId": "s1"}));
    let body = &h["rows"][0]["fields"]["body"];
    assert_eq!(body["bytes"], 70_000);
    assert_eq!(body["truncated"], true);
    let cut = body["text"].as_str().unwrap();
    assert!(cut.len() <= 65_536 && cut.len() >= 65_534, "{}", cut.len());
    let mut whole = String::new();
    let mut after = Value::Null;
    loop {
        let part = s.ok(
            "source",
            json!({"sessionId": "s1", "through": null, "field": "body", "after": after,
            "position": {"sourceSequence": 2, "itemIndex": 0}, "limit": 10_001}),
        );
        let piece = part["text"].as_str().unwrap();
        assert!(!piece.is_empty());
        whole.push_str(piece);
        after = part["nextAfter"].clone();
        if after.is_null() {
            break;
        }
    }
    assert_eq!(whole, text);
}

#[test]
fn search_finds_folded_text_page_by_page() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", None);
    for (n, text) in [
        "Die STRAẞE ist lang",
        "straße und strasse",
        "ΣΊΣΥΦΟΣ σίσυφος",
        "nothing here",
    ]
    .iter()
    .enumerate()
    {
        s.ok("send", json!({"sessionId": "s1", "operation": format!("m{n}"), "text": text, "attachments": []}));
    }
    let mut hits = Vec::new();
    let mut after = Value::Null;
    let mut through = Value::Null;
    loop {
        let page = s.ok(
            "search",
            json!({"sessionId": "s1", "query": "straße", "caseSensitive": false,
            "wholeWord": false, "through": through, "after": after}),
        );
        hits.extend(page["hits"].as_array().unwrap().iter().cloned());
        through = page["through"].clone();
        after = page["nextAfter"].clone();
        if after.is_null() {
            break;
        }
    }
    let found: Vec<(u64, u64, u64)> = hits
        .iter()
        .map(|h| {
            (
                h["position"]["sourceSequence"].as_u64().unwrap(),
                h["start"].as_u64().unwrap(),
                h["end"].as_u64().unwrap(),
            )
        })
        .collect();
    // "STRAẞE" (ẞ is 3 bytes) and "straße" (ß is 2 bytes), never "strasse".
    assert_eq!(found, vec![(2, 4, 12), (3, 0, 7)]);
    assert_eq!(hits[0]["field"], "body");
    assert_eq!(
        s.err("search", json!({"sessionId": "s1", "query": ""})),
        "invalid_argument"
    );
}

#[test]
fn workspace_reads_never_follow_links() {
    let root = new_root();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "hello, world\n").unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.path().join("link")).unwrap();
    std::fs::create_dir(ws.path().join(".git")).unwrap();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", Some(ws.path()));
    let list = s.ok(
        "listFiles",
        json!({"sessionId": "s1", "path": null, "after": null}),
    );
    let names: Vec<(String, String)> = list["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            use base64::Engine as _;
            let n = base64::engine::general_purpose::STANDARD
                .decode(e["name"]["bytesBase64"].as_str().unwrap())
                .unwrap();
            (
                String::from_utf8(n).unwrap(),
                e["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        names.contains(&("hello.txt".into(), "file".into())),
        "{names:?}"
    );
    assert!(names.contains(&("link".into(), "symlink".into())));
    assert!(names.contains(&("sub".into(), "directory".into())));
    assert!(!names.iter().any(|(n, _)| n == ".git"));

    let id = s.request(
        "readFile",
        json!({"sessionId": "s1", "path": path("hello.txt")}),
    );
    let (answer, items) = s.answer_with_items(id);
    assert_eq!(answer["result"], Value::Null);
    assert_eq!(items[0]["kind"], "begin");
    assert_eq!(items[0]["contentType"], "text");
    assert_eq!(items[1]["kind"], "chunk");
    assert_eq!(items[1]["dataBase64"], b64(b"hello, world\n"));
    assert_eq!(items[2]["kind"], "end");
    assert_eq!(items[2]["digest"], digest(b"hello, world\n"));
    let version = items[2]["version"].clone();
    let id = s.request(
        "readFile",
        json!({"sessionId": "s1", "path": path("hello.txt"), "expectedVersion": "nope"}),
    );
    assert_eq!(s.answer_with_items(id).1, vec![json!({"kind": "changed"})]);
    std::fs::write(ws.path().join("hello.txt"), "hello, there\n").unwrap();
    let id = s.request(
        "readFile",
        json!({"sessionId": "s1", "path": path("hello.txt"), "expectedVersion": version}),
    );
    assert_eq!(s.answer_with_items(id).1, vec![json!({"kind": "changed"})]);
    let id = s.request(
        "readFile",
        json!({"sessionId": "s1", "path": path("absent.txt")}),
    );
    assert_eq!(s.answer_with_items(id).1, vec![json!({"kind": "absent"})]);

    // The link is never followed: refused or unsupported, never /etc/passwd.
    let id = s.request("readFile", json!({"sessionId": "s1", "path": path("link")}));
    let (answer, items) = s.answer_with_items(id);
    assert!(
        answer.get("error").is_some() || items == vec![json!({"kind": "unsupported"})],
        "{answer} {items:?}"
    );
    assert_eq!(
        s.err("readFile", json!({"sessionId": "s1", "path": path("../x")})),
        "invalid_argument"
    );
    assert_eq!(
        s.err(
            "listFiles",
            json!({"sessionId": "s1", "path": path("/etc")})
        ),
        "invalid_argument"
    );

    // A watch sees a change.
    let w = s.ok("watchFilesOpen", json!({"sessionId": "s1", "path": null}));
    assert_eq!(w["directoryIdentity"], list["directoryIdentity"]);
    let next = s.request(
        "watchFilesNext",
        json!({"watchId": w["watchId"], "timeoutMs": 10_000}),
    );
    std::thread::sleep(Duration::from_millis(100));
    std::fs::write(ws.path().join("new.txt"), "x").unwrap();
    assert_eq!(s.answer(next)["result"], json!({"event": "changed"}));
    s.ok("watchFilesClose", json!({"watchId": w["watchId"]}));

    // Closing a watch wakes a `watchFilesNext` waiting on it: neither the close nor the
    // requests after it wait for the next's timeout.
    let w = s.ok("watchFilesOpen", json!({"sessionId": "s1", "path": null}));
    let next = s.request(
        "watchFilesNext",
        json!({"watchId": w["watchId"], "timeoutMs": 30_000}),
    );
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    s.ok("watchFilesClose", json!({"watchId": w["watchId"]}));
    s.ok("sessions", json!({}));
    let answer = s.answer(next);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "close waited for the next's timeout"
    );
    assert_eq!(answer["error"]["code"], "not_found", "{answer}");
}

#[test]
fn end_of_input_answers_pending_waits_and_exits() {
    // A long watch pending at end of input kept the server, and the Root's writer lock, for
    // its whole timeout. Now every pending wait answers as its timeout would, and it exits.
    use std::io::{BufRead as _, Write as _};
    let root = new_root();
    let ws = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .args(["serve", "--root"])
        .arg(root.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap());
        }
    });
    let wait = Duration::from_secs(60);
    let send = |stdin: &mut std::process::ChildStdin, v: Value| writeln!(stdin, "{v}").unwrap();
    send(
        &mut stdin,
        json!({"id": 1, "method": "createSession",
        "params": {"sessionId": "s", "workspace": ws.path(), "operation": "c"}}),
    );
    send(
        &mut stdin,
        json!({"id": 2, "method": "watchFilesOpen", "params": {"sessionId": "s"}}),
    );
    let mut answers = vec![
        rx.recv_timeout(wait).unwrap(),
        rx.recv_timeout(wait).unwrap(),
    ];
    let watch_id = answers[1]["result"]["watchId"].clone();
    assert!(watch_id.is_string(), "{answers:?}");
    send(
        &mut stdin,
        json!({"id": 3, "method": "watch",
        "params": {"sessionId": "s", "after": 1, "timeoutMs": 300000}}),
    );
    send(
        &mut stdin,
        json!({"id": 4, "method": "watchDiagnostics",
        "params": {"sessionId": "s", "after": 0, "timeoutMs": 300000}}),
    );
    send(
        &mut stdin,
        json!({"id": 5, "method": "watchFilesNext",
        "params": {"watchId": watch_id, "timeoutMs": 600000}}),
    );
    // Let the waits start waiting before the input ends.
    std::thread::sleep(Duration::from_millis(300));
    drop(stdin);
    let closed = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if closed.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            panic!("the server was still running 5 s after its input ended");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    eprintln!("exited {:?} after the end of input", closed.elapsed());
    while let Ok(a) = rx.recv_timeout(Duration::from_secs(5)) {
        answers.push(a);
    }
    let by_id = |id: u64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer for {id}: {answers:?}"))
            .clone()
    };
    // Exactly what each answers when its timeout passes.
    assert_eq!(
        by_id(3)["result"],
        json!({"events": [], "queue": [], "pendingInteractions": [], "nextAfter": 1})
    );
    assert_eq!(by_id(4)["result"], json!({"revision": 0}));
    assert_eq!(by_id(5)["result"], json!({"event": "timeout"}));
    assert_eq!(answers.len(), 5, "{answers:?}");
}

#[test]
fn watch_after_beyond_the_revision_is_invalid_argument() {
    // u64::MAX used to overflow `after + 1`: `corrupt … no kind for event 0` in release
    // builds, a panic in debug ones.
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s", None);
    // Sent as text: the exact number, whatever a JSON library would make of it.
    s.send_line(r#"{"id": 1000, "method": "watch", "params": {"sessionId": "s", "after": 18446744073709551615, "timeoutMs": 0}}"#);
    let a = s.answer(1000);
    assert_eq!(a["error"]["code"], "invalid_argument", "{a}");
    assert!(
        a["error"]["message"]
            .as_str()
            .unwrap()
            .contains("revision 1"),
        "{a}"
    );
    let a = s.request(
        "watchDiagnostics",
        json!({"sessionId": "s", "after": 5, "timeoutMs": 0}),
    );
    let a = s.answer(a);
    assert_eq!(a["error"]["code"], "invalid_argument", "{a}");
    // The server is unharmed, and `after` at the revision is an ordinary watch.
    let w = s.ok(
        "watch",
        json!({"sessionId": "s", "after": 1, "timeoutMs": 0}),
    );
    assert_eq!(w["nextAfter"], 1);
    assert!(s.finish().success());
}

#[test]
fn git_views_hide_the_root_inside_the_workspace() {
    // The Root often sits in the Session's workspace (the default `.logbook/` of the current
    // directory). Its files must be as hidden from git views as from file views: not
    // listed, not diffed, and never folded into a patch (which made every patch carry the
    // previous ones and grow).
    let ws = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(ws.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(ws.path().join("a.txt"), "one\ntwo\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-qm", "first"]);
    std::fs::write(ws.path().join("a.txt"), "one\nthree\n").unwrap();
    std::fs::write(ws.path().join("b.txt"), "new\n").unwrap();
    // A `.logbook` below the top is hidden by name, as the file views hide it.
    std::fs::create_dir_all(ws.path().join("sub/.logbook")).unwrap();
    std::fs::write(ws.path().join("sub/.logbook/old.txt"), "x\n").unwrap();
    // The Root under a name of its own, so that only its place hides it.
    let root = ws.path().join("state");
    let mut s = Server::start(&root);
    create(&mut s, "w", Some(ws.path()));
    s.ok(
        "send",
        json!({"sessionId": "w", "operation": "s1", "text": "fill the Root", "attachments": [
            {"name": "n.txt", "mimeType": "text/plain", "dataBase64": b64(b"attached")}]}),
    );

    let st = s.ok("gitStatus", json!({"sessionId": "w"}));
    assert_eq!(st["untracked"], json!([{"path": path("b.txt")}]), "{st}");
    assert_eq!(
        st["worktree"],
        json!([{"path": path("a.txt"), "change": "modified"}])
    );

    for hidden in ["state/logbook.root", "sub/.logbook/old.txt"] {
        let read = s.request("readFile", json!({"sessionId": "w", "path": path(hidden)}));
        let read = s.answer(read);
        let diff = s.request(
            "gitDiff",
            json!({"sessionId": "w", "path": path(hidden), "area": "untracked"}),
        );
        let diff = s.answer(diff);
        assert_eq!(read["error"]["code"], "permission_denied", "{read}");
        assert_eq!(
            diff["error"], read["error"],
            "gitDiff refuses {hidden} as readFile does"
        );
    }

    let patches: Vec<Value> = (0..3)
        .map(|i| {
            s.ok(
                "snapshotPatch",
                json!({"sessionId": "w", "operation": format!("snap-{i}")}),
            )
        })
        .collect();
    for p in &patches[1..] {
        assert_eq!(p["bytes"], patches[0]["bytes"], "{patches:?}");
        assert_eq!(p["digest"], patches[0]["digest"], "{patches:?}");
    }
    let text = s.ok(
        "readPatch",
        json!({"sessionId": "w", "patchId": patches[0]["patchId"], "after": null, "limit": 1 << 20}),
    )["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("+++ b/b.txt") && text.contains("+three"),
        "{text}"
    );
    assert!(
        !text.contains("state/") && !text.contains(".logbook"),
        "{text}"
    );
}

#[test]
fn git_status_and_diff_match_the_repository() {
    let root = new_root();
    let ws = tempfile::tempdir().unwrap();
    let git_in = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let git = |args: &[&str]| git_in(ws.path(), args);
    let mut s = Server::start(root.path());
    create(&mut s, "plain", Some(ws.path()));
    assert_eq!(
        s.ok("gitStatus", json!({"sessionId": "plain"})),
        Value::Null
    );
    git(&["init", "-q"]);
    std::fs::write(ws.path().join("a.txt"), "one\ntwo\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-qm", "first"]);
    std::fs::write(ws.path().join("a.txt"), "one\nthree\n").unwrap();
    std::fs::write(ws.path().join("b.txt"), "new\n").unwrap();
    let st = s.ok("gitStatus", json!({"sessionId": "plain"}));
    assert_eq!(st["head"].as_str().unwrap().len(), 40);
    assert_eq!(st["staged"], json!([]));
    assert_eq!(
        st["worktree"],
        json!([{"path": path("a.txt"), "change": "modified"}])
    );
    assert_eq!(st["untracked"], json!([{"path": path("b.txt")}]));
    let d = s.ok(
        "gitDiff",
        json!({"sessionId": "plain", "path": path("a.txt"), "area": "worktree"}),
    );
    assert_eq!(d["kind"], "text");
    let patch = d["patch"].as_str().unwrap();
    assert!(patch.contains("-two\n+three\n"), "{patch}");
    let d = s.ok(
        "gitDiff",
        json!({"sessionId": "plain", "path": path("a.txt"), "area": "staged"}),
    );
    assert_eq!(d["kind"], "unchanged");

    // Content that is not UTF-8 still reads back byte-exact through readPatch's text.
    let latin1: &[u8] = b"caf\xe9 cr\xe8me\n";
    std::fs::write(ws.path().join("c.txt"), latin1).unwrap();
    let p = s.ok(
        "snapshotPatch",
        json!({"sessionId": "plain", "operation": "snap-1"}),
    );
    assert_eq!(p["digest"].as_str().unwrap().len(), 71);
    let again = s.ok(
        "snapshotPatch",
        json!({"sessionId": "plain", "operation": "snap-1"}),
    );
    assert_eq!(again, p, "a repeat returns the first capture");
    let mut text = String::new();
    let mut after = Value::Null;
    loop {
        let page = s.ok(
            "readPatch",
            json!({"sessionId": "plain", "patchId": p["patchId"], "after": after, "limit": 64}),
        );
        text.push_str(page["text"].as_str().unwrap());
        after = page["nextAfter"].clone();
        if after.is_null() {
            break;
        }
    }
    assert_eq!(text.len() as u64, p["bytes"].as_u64().unwrap());
    assert_eq!(digest(text.as_bytes()), p["digest"].as_str().unwrap());
    assert!(text.contains("+++ b/b.txt"), "{text}");
    let clone = tempfile::tempdir().unwrap();
    git_in(
        clone.path(),
        &["clone", "-q", ws.path().to_str().unwrap(), "c"],
    );
    let patch_file = clone.path().join("snap.patch");
    std::fs::write(&patch_file, &text).unwrap();
    git_in(
        &clone.path().join("c"),
        &["apply", patch_file.to_str().unwrap()],
    );
    assert_eq!(std::fs::read(clone.path().join("c/c.txt")).unwrap(), latin1);
    assert_eq!(
        std::fs::read(clone.path().join("c/a.txt")).unwrap(),
        b"one\nthree\n"
    );
}

#[test]
fn a_second_writer_is_busy() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", None);
    let out = std::process::Command::new(bin())
        .args(["send", "s1", "a second writer", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("busy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A command that only reads is not a writer: it reads beside the server.
    let out = std::process::Command::new(bin())
        .args(["sessions", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("s1"));
}

#[test]
fn a_second_server_is_busy_after_the_lock_file_is_deleted() {
    // Two real servers: deleting `ROOT/lock` used to let the second one take a fresh lock
    // file and overwrite the first one's acknowledged sends.
    let root = new_root();
    let mut first = Server::start(root.path());
    create(&mut first, "x", None);
    std::fs::remove_file(root.path().join("lock")).unwrap();
    let second = std::process::Command::new(bin())
        .args(["serve", "--root"])
        .arg(root.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!second.status.success(), "the second server was admitted");
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("busy"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    // The first server still owns the Root and its sends stay as acknowledged.
    let sent = first.ok(
        "send",
        json!({"sessionId": "x", "operation": "s1", "text": "hello", "attachments": []}),
    );
    assert_eq!(sent["sequence"], 2);
}

#[test]
fn fork_diagnostics_context_and_attachments() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "src", None);
    let first = turn(&mut s, "src", 0);
    // A second Turn that is still running.
    let running = s.ok("send", json!({"sessionId": "src", "operation": "late", "text": "still going",
        "attachments": [{"name": "a.txt", "mimeType": "text/plain", "dataBase64": b64(b"hello ")},
                        {"name": "b.bin", "mimeType": "application/octet-stream", "dataBase64": b64(&[0, 1, 2])}]}));
    let running_inv = running["invocation"].as_str().unwrap().to_owned();
    let revision = s.ok("history", json!({"sessionId": "src"}))["through"].clone();

    // Attachments: ordered metadata and ranges of the concatenation.
    let meta = s.ok(
        "attachments",
        json!({"sessionId": "src", "invocation": running_inv}),
    );
    assert_eq!(meta[0]["name"], "a.txt");
    assert_eq!(meta[0]["bytes"], 6);
    assert_eq!(meta[0]["digest"], digest(b"hello "));
    assert_eq!(meta[1]["bytes"], 3);
    let data = s.ok(
        "readAttachments",
        json!({"sessionId": "src", "invocation": running_inv, "offset": 4, "limit": 4}),
    );
    assert_eq!(data["dataBase64"], b64(&[b'o', b' ', 0, 1]));

    // Fork guards: the revision must be current, and included work settled.
    assert_eq!(
        s.err(
            "fork",
            json!({"sessionId": "src", "operation": "f0", "from": {"kind": "all"}, "revision": 1})
        ),
        "conflict"
    );
    assert_eq!(
        s.err("fork", json!({"sessionId": "src", "operation": "f0", "from": {"kind": "all"}, "revision": revision})),
        "conflict",
        "a running Turn cannot be copied"
    );
    assert_eq!(
        s.ok(
            "forkReceipt",
            json!({"sessionId": "src", "operation": "f1"})
        ),
        Value::Null
    );
    // The earlier settled Turn can be forked while the later one runs.
    let fork = s.ok("fork", json!({"sessionId": "src", "operation": "f1", "from": {"kind": "turn", "invocation": first}, "revision": revision}));
    let fork_id = fork["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(fork["branch"]["sessionId"], "src");
    assert_eq!(fork["branch"]["turn"], first.as_str());
    assert_eq!(fork["branch"]["through"], 5);
    assert_eq!(s.ok("fork", json!({"sessionId": "src", "operation": "f1", "from": {"kind": "turn", "invocation": first}, "revision": revision})), fork);
    assert_eq!(
        s.ok(
            "forkReceipt",
            json!({"sessionId": "src", "operation": "f1"})
        ),
        fork
    );
    let src_page = s.ok("history", json!({"sessionId": "src", "through": 5}));
    let fork_page = s.ok("history", json!({"sessionId": fork_id, "through": 5}));
    assert_eq!(
        src_page["rows"], fork_page["rows"],
        "the fork holds the copied prefix"
    );
    let w = s.ok(
        "watch",
        json!({"sessionId": fork_id, "after": 0, "timeoutMs": 0}),
    );
    assert_eq!(w["queue"], json!([]), "no active work in the fork");

    // Diagnostics: newest first, their own revision, not copied into forks.
    let d0 = s.ok(
        "watchDiagnostics",
        json!({"sessionId": "src", "after": null, "timeoutMs": 0}),
    )["revision"]
        .as_u64()
        .unwrap();
    let waiting = s.request(
        "watchDiagnostics",
        json!({"sessionId": "src", "after": d0, "timeoutMs": 20_000}),
    );
    for n in 0..3 {
        s.ok("recordDiagnostic", json!({"sessionId": "src", "operation": format!("d{n}"), "kind": "execution",
            "invocation": running_inv, "cause": {"code": "timeout", "message": format!("step {n} timed out")}}));
    }
    assert!(s.answer(waiting)["result"]["revision"].as_u64().unwrap() > d0);
    let page = s.ok(
        "diagnostics",
        json!({"sessionId": "src", "through": null, "after": null, "limit": 2}),
    );
    let list = page["diagnostics"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(
        list[0]["cause"]["message"], "step 2 timed out",
        "newest first"
    );
    assert_eq!(list[0]["invocation"], running_inv.as_str());
    let rest = s.ok("diagnostics", json!({"sessionId": "src", "through": page["through"], "after": page["nextAfter"], "limit": 2}));
    assert_eq!(
        rest["diagnostics"][0]["cause"]["message"],
        "step 0 timed out"
    );
    assert_eq!(rest["nextAfter"], Value::Null);
    let forked = s.ok(
        "diagnostics",
        json!({"sessionId": fork_id, "through": null}),
    );
    assert_eq!(forked["diagnostics"], json!([]));

    // Context: none prepared yet, then the latest at or before the fence.
    assert_eq!(
        s.ok("context", json!({"sessionId": "src", "through": null})),
        Value::Null
    );
    let prepared = s.ok("append", json!({"sessionId": "src", "operation": "ctx", "events": [{"kind": "contextPrepared",
        "invocation": running_inv, "groups": [{"role": "user", "messages": [{"text": "still going"}], "estimatedTokens": 3}],
        "tools": [{"name": "read", "estimatedTokens": 40}], "providerUsage": null}]}));
    let ctx = s.ok("context", json!({"sessionId": "src", "through": null}));
    assert_eq!(ctx["sequence"], prepared["firstSequence"]);
    assert_eq!(ctx["groups"][0]["role"], "user");
    assert_eq!(ctx["tools"][0]["name"], "read");
    assert_eq!(
        s.ok("context", json!({"sessionId": "src", "through": revision})),
        Value::Null
    );

    // Interactions and stop.
    s.ok("append", json!({"sessionId": "src", "operation": "ask", "events": [{"kind": "interactionRequested",
        "interactionId": "q1", "invocation": running_inv, "prompt": "Proceed?", "options": ["yes", "no"]}]}));
    let pending = s.ok("pendingInteractions", json!({"sessionId": "src"}));
    assert_eq!(pending[0]["interactionId"], "q1");
    assert_eq!(pending[0]["options"], json!(["yes", "no"]));
    s.ok(
        "respond",
        json!({"sessionId": "src", "operation": "r1", "interactionId": "q1", "response": "yes"}),
    );
    assert_eq!(
        s.ok("pendingInteractions", json!({"sessionId": "src"})),
        json!([])
    );
    assert_eq!(
        s.ok(
            "interaction",
            json!({"sessionId": "src", "interactionId": "q1"})
        )["response"],
        "yes"
    );
    assert_eq!(
        s.err(
            "respond",
            json!({"sessionId": "src", "operation": "r2", "interactionId": "nope", "response": 1})
        ),
        "not_found"
    );
    let stopped = s.ok(
        "stop",
        json!({"sessionId": "src", "operation": "stop1", "invocation": running_inv}),
    );
    assert!(stopped["sequence"].as_u64().unwrap() > 0);
    assert!(s.finish().success());

    // Everything holds after a restart.
    let mut s = Server::start(root.path());
    assert_eq!(
        s.ok(
            "forkReceipt",
            json!({"sessionId": "src", "operation": "f1"})
        ),
        fork
    );
    assert_eq!(
        s.ok("history", json!({"sessionId": fork_id, "through": 5}))["rows"],
        src_page["rows"]
    );
    assert_eq!(
        s.ok(
            "diagnostics",
            json!({"sessionId": "src", "through": null, "limit": 2})
        )["diagnostics"],
        page["diagnostics"]
    );
}

#[test]
fn internal_tool_rows_are_hidden_but_found_and_opened_from_a_hit() {
    let root = new_root();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", None);
    let inv = s.ok(
        "send",
        json!({"sessionId": "s1", "operation": "m", "text": "look it up", "attachments": []}),
    )["invocation"]
        .as_str()
        .unwrap()
        .to_owned();
    s.ok("append", json!({"sessionId": "s1", "operation": "a", "events": [
        {"kind": "modelCompletion", "invocation": inv, "model": "m", "usage": null, "items": [
            {"kind": "toolCall", "id": "i1", "name": "lookup", "arguments": "{\"q\":\"zebra\"}", "internal": true},
            {"kind": "toolCall", "id": "i2", "name": "lookup", "arguments": "{\"q\":\"yak\"}", "internal": true},
            {"kind": "toolCall", "id": "v1", "name": "read", "arguments": "", "internal": false}]},
        tool_result(&inv, "i1", "zebra facts"),
        tool_result(&inv, "v1", ""),
        {"kind": "turnSettled", "invocation": inv, "outcome": "completed"}]}));
    let h = s.ok("history", json!({"sessionId": "s1"}));
    let kinds: Vec<(u64, u64, String)> = h["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["position"]["sourceSequence"].as_u64().unwrap(),
                r["position"]["itemIndex"].as_u64().unwrap(),
                r["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // The internal calls and the internal call's result are hidden; empty tool rows are shown.
    assert_eq!(
        kinds,
        vec![
            (2, 0, "user".into()),
            (3, 2, "toolCall".into()),
            (5, 0, "toolResult".into())
        ]
    );
    // Search still finds the internal call's arguments.
    let hits = s.ok(
        "search",
        json!({"sessionId": "s1", "query": "zebra", "caseSensitive": true}),
    );
    let hit = hits["hits"][0].clone();
    assert_eq!(
        hit["position"],
        json!({"sourceSequence": 3, "itemIndex": 0})
    );
    assert_eq!(hit["field"], "arguments");
    // Opening the hit as a client does (field "body" unless "thinking") shows exactly that row.
    let opened = s.ok(
        "history",
        json!({"sessionId": "s1", "through": hits["through"], "limit": 3,
        "anchor": {"kind": "row", "position": hit["position"], "field": "body"}}),
    );
    let rows = opened["rows"].as_array().unwrap();
    assert_eq!(rows[0]["position"], hit["position"]);
    assert_eq!(rows[0]["fields"]["arguments"]["text"], "{\"q\":\"zebra\"}");
    assert_eq!(
        rows[1]["position"],
        json!({"sourceSequence": 3, "itemIndex": 2}),
        "later internal rows stay hidden"
    );
}

/// Runs one `logbook serve` over `lines` and returns every answer line.
fn serve_once(
    root: &std::path::Path,
    lines: &[Value],
) -> (std::process::ExitStatus, Vec<Value>, String) {
    use std::io::Write as _;
    let mut child = std::process::Command::new(bin())
        .args(["serve", "--root"])
        .arg(root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        // A server that refuses the Root exits at once; its closed stdin is part of the answer.
        let _ = writeln!(stdin, "{l}");
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let answers = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        out.status,
        answers,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn error_codes_name_what_went_wrong() {
    let root = new_root();
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join(".git")).unwrap();
    std::fs::write(ws.path().join(".git").join("config"), "[core]\n").unwrap();
    let mut s = Server::start(root.path());
    create(&mut s, "s1", Some(ws.path()));
    create(&mut s, "bare", None);
    // permission_denied: the workspace's .git is never read.
    assert_eq!(
        s.err(
            "readFile",
            json!({"sessionId": "s1", "path": path(".git/config")})
        ),
        "permission_denied"
    );
    // unsupported: a snapshot of a workspace without a repository it can read.
    assert_eq!(
        s.err(
            "snapshotPatch",
            json!({"sessionId": "bare", "operation": "p"})
        ),
        "invalid_argument",
        "no workspace at all"
    );
    let plain = tempfile::tempdir().unwrap();
    create(&mut s, "plain", Some(plain.path()));
    assert_eq!(
        s.err(
            "snapshotPatch",
            json!({"sessionId": "plain", "operation": "p"})
        ),
        "unsupported"
    );
    // not_found, conflict, invalid_argument.
    assert_eq!(
        s.err(
            "interaction",
            json!({"sessionId": "ghost", "interactionId": "x"})
        ),
        "not_found"
    );
    assert_eq!(
        s.err(
            "createSession",
            json!({"sessionId": "s1", "workspace": null, "operation": "create-s1"})
        ),
        "conflict"
    );
    assert_eq!(
        s.err(
            "createSession",
            json!({"sessionId": "../evil", "operation": "c"})
        ),
        "invalid_argument"
    );
    assert_eq!(
        s.err("history", json!({"sessionId": "s1", "limit": 100_000})),
        "invalid_argument"
    );
    assert_eq!(
        s.err(
            "history",
            json!({"sessionId": "s1", "after": "not-a-cursor"})
        ),
        "invalid_argument"
    );
    assert!(s.finish().success());

    // unsupported_format: a Root written by another format version is refused by number, and kept.
    let header = root.path().join("logbook.root");
    let original = std::fs::read(&header).unwrap();
    let mut newer = original.clone();
    newer[8..12].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&header, &newer).unwrap();
    let (status, _, stderr) = serve_once(
        root.path(),
        &[json!({"id": 1, "method": "sessions", "params": {}})],
    );
    assert!(!status.success());
    assert!(
        stderr.contains("unsupported_format") && stderr.contains('2'),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&header).unwrap(),
        newer,
        "nothing is migrated or rewritten"
    );
    std::fs::write(&header, &original).unwrap();

    // corrupt: damage in the middle of a Session's log is reported for that Session only.
    let log_dir = root.path().join("sessions").join("s1").join("log");
    let segment = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::metadata(p).map(|m| m.len() > 64).unwrap_or(false))
        .expect("a segment file");
    let mut s = Server::start(root.path());
    let inv = s.ok(
        "send",
        json!({"sessionId": "s1", "operation": "m2", "text": "after", "attachments": []}),
    );
    assert!(inv["sequence"].as_u64().unwrap() > 1);
    assert!(s.finish().success());
    // Flip a byte of the text "after" in the last record, which a history page reads: the
    // indexes prove it was acknowledged, so this is damage, never a torn tail to cut.
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes
        .windows(5)
        .rposition(|w| w == b"after")
        .expect("the record of the last send");
    bytes[at] ^= 0x55;
    std::fs::write(&segment, &bytes).unwrap();
    let (status, answers, _) = serve_once(
        root.path(),
        &[
            json!({"id": 1, "method": "history", "params": {"sessionId": "s1"}}),
            json!({"id": 2, "method": "history", "params": {"sessionId": "bare"}}),
        ],
    );
    assert!(status.success());
    assert_eq!(answers[0]["error"]["code"], "corrupt", "{answers:?}");
    assert!(
        answers[1].get("result").is_some(),
        "other Sessions keep working: {answers:?}"
    );
}

#[test]
fn a_failed_write_is_io_and_loses_nothing() {
    let root = new_root();
    {
        let mut s = Server::start(root.path());
        create(&mut s, "s1", None);
        turn(&mut s, "s1", 1);
        assert_eq!(s.finish().code(), Some(0));
    }
    // Every file of this server may grow to 4 MiB at most: a 6 MiB tool result cannot be
    // written, the way a full disk refuses it.
    let mut s = Server::start_with_file_size_limit(root.path(), 4 << 20);
    let before = s.ok("history", json!({"sessionId": "s1"}));
    let big = "x".repeat(6 << 20);
    let id = s.request(
        "append",
        json!({"sessionId": "s1", "operation": "big", "events": [tool_result("inv-x", "c", &big)]}),
    );
    let answer = s.answer(id);
    assert_eq!(answer["error"]["code"], "io", "{answer}");
    // The server keeps serving reads, and they show nothing of the failed append.
    assert_eq!(s.ok("history", json!({"sessionId": "s1"})), before);
    drop(s);

    // Restarted without the limit: the history is what it was, and appends work again.
    let mut s = Server::start(root.path());
    assert_eq!(s.ok("history", json!({"sessionId": "s1"})), before);
    turn(&mut s, "s1", 2);
    let after = s.ok("history", json!({"sessionId": "s1"}));
    assert!(after["rows"].as_array().unwrap().len() > before["rows"].as_array().unwrap().len());
    assert_eq!(s.finish().code(), Some(0));
    let verify = Command::new(bin())
        .args(["verify", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
}

/// Requests on different Sessions run at once on the server's pool; answers still leave in
/// request order, requests on one Session keep their order, and a request naming no Session
/// sees everything sent before it.
#[test]
fn pipelined_requests_on_many_sessions_answer_in_request_order() {
    let root = new_root();
    const SESSIONS: usize = 24;
    const ROUNDS: usize = 6;
    let mut lines = Vec::new();
    let mut id = 0u64;
    let mut next = |method: &str, params: Value| {
        id += 1;
        json!({"id": id, "method": method, "params": params})
    };
    for s in 0..SESSIONS {
        lines.push(next(
            "createSession",
            json!({"sessionId": format!("p{s}"), "operation": format!("c{s}")}),
        ));
    }
    for r in 0..ROUNDS {
        for s in 0..SESSIONS {
            lines.push(next(
                "append",
                json!({"sessionId": format!("p{s}"), "operation": format!("a{s}-{r}"), "events": [
                    {"kind": "modelCompletion", "invocation": format!("i{s}"), "model": "m", "usage": null,
                     "items": [{"kind": "assistant", "body": format!("session {s} round {r}"), "thinking": null}]}]}),
            ));
            // A repeated operation in the same pipeline answers from its receipt.
            if r == 0 {
                lines.push(next(
                    "append",
                    json!({"sessionId": format!("p{s}"), "operation": format!("a{s}-0"), "events": [
                        {"kind": "modelCompletion", "invocation": format!("i{s}"), "model": "m", "usage": null,
                         "items": [{"kind": "assistant", "body": format!("session {s} round 0"), "thinking": null}]}]}),
                ));
            }
        }
        lines.push(next("sessions", json!({"limit": 1000})));
    }
    for s in 0..SESSIONS {
        lines.push(next(
            "history",
            json!({"sessionId": format!("p{s}"), "limit": 100, "direction": "forward"}),
        ));
    }
    let (status, answers, stderr) = serve_once(root.path(), &lines);
    assert!(status.success(), "{stderr}");
    let ids: Vec<u64> = answers.iter().map(|a| a["id"].as_u64().unwrap()).collect();
    assert_eq!(
        ids,
        (1..=id).collect::<Vec<_>>(),
        "answers in request order"
    );
    for a in &answers {
        assert!(a.get("result").is_some(), "{a}");
    }
    // Each Session's appends got the next sequence in the order they were sent; the repeat
    // answered the first's.
    let mut last = std::collections::HashMap::new();
    let mut seen_rounds = 0;
    for (line, a) in lines.iter().zip(&answers) {
        match line["method"].as_str().unwrap() {
            "append" => {
                let sid = line["params"]["sessionId"].as_str().unwrap().to_owned();
                let seq = a["result"]["firstSequence"].as_u64().unwrap();
                let op = line["params"]["operation"].as_str().unwrap();
                let prev = last.insert((sid.clone(), op.to_owned()), seq);
                if let Some(p) = prev {
                    assert_eq!(p, seq, "{sid} {op}: a repeat answers the first");
                }
            }
            "sessions" => {
                seen_rounds += 1;
                // Everything sent before the listing is in it: each Session holds its
                // creation and one event per round so far.
                let listed = a["result"]["sessions"].as_array().unwrap();
                assert_eq!(listed.len(), SESSIONS);
                for l in listed {
                    assert_eq!(l["revision"].as_u64().unwrap(), 1 + seen_rounds, "{l}");
                    assert_eq!(l["rows"].as_u64().unwrap(), seen_rounds, "{l}");
                }
            }
            "history" => {
                let bodies: Vec<String> = a["result"]["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["fields"]["body"]["text"].as_str().map(str::to_owned))
                    .collect();
                let s = line["params"]["sessionId"].as_str().unwrap()[1..].to_owned();
                let want: Vec<String> = (0..ROUNDS)
                    .map(|r| format!("session {s} round {r}"))
                    .collect();
                assert_eq!(bodies, want);
            }
            _ => {}
        }
    }
    assert_eq!(seen_rounds, ROUNDS as u64);
}
