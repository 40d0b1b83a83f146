#![allow(clippy::unwrap_used)]
//! `logbook mcp` as a child process: the protocol spoken by hand (JSON-RPC lines, no SDK), and
//! the official MCP Python SDK as the client (`mcp_client.py`), over a Root this test builds
//! with the Host API. Both check that serving leaves the Root's files exactly as they were.
//!
//! The Python half needs the `mcp` package (`python3 -m pip install 'mcp==2.3.0'`; `.ci/run`
//! installs it). Without it the test fails, saying so, unless `LOGBOOK_SKIP_MCP_PY=1`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use logbook_api::Host;
use logbook_engine::{AppendParams, CreateSessionParams, Event, SendParams, SetTitleParams};
use serde_json::{json, Value};
use sha2::Digest as _;

mod common;
use common::{bin, ANSWER_WAIT};

/// The long body of row 3.0 of `s1`; `mcp_client.py` builds the same text.
fn long_body() -> String {
    format!(
        "{} the tombstone outlives compaction {}",
        "ü".repeat(1500),
        "ß".repeat(1500)
    )
}

fn event(value: Value) -> Event {
    serde_json::from_value(value).unwrap()
}

fn send(host: &Host, session: &str, op: &str, text: &str) -> String {
    host.root()
        .send(SendParams {
            session_id: session.into(),
            operation: op.into(),
            text: text.into(),
            attachments: vec![],
        })
        .unwrap()
        .invocation
}

fn append(host: &Host, session: &str, op: &str, events: Vec<Value>) {
    host.root()
        .append(AppendParams {
            session_id: session.into(),
            operation: op.into(),
            events: events.into_iter().map(event).collect(),
        })
        .unwrap();
}

fn settle(host: &Host, session: &str, op: &str, invocation: &str) {
    append(
        host,
        session,
        op,
        vec![json!({"kind": "turnSettled", "invocation": invocation, "outcome": "completed"})],
    );
}

/// The Root `mcp_client.py` expects:
///
/// - `s1`, titled "Why the tombstone stays": 2.0 user, 3.0 assistant (the long body, with
///   thinking), 3.1 toolCall `read_file`, 4.0 toolResult, a title at 6, then five follow-up
///   questions at 7, 9, 11, 13 and 15 (each Turn settled);
/// - `s2`, newer, untitled: one question at 2 (its title is that message's first line).
fn build_root(dir: &Path) {
    let host = Host::open_or_init(dir).unwrap();
    let root = host.root();
    for id in ["s1", "s2"] {
        root.create_session(CreateSessionParams {
            session_id: Some(id.into()),
            workspace: None,
            operation: format!("create-{id}"),
        })
        .unwrap();
    }
    let inv = send(
        &host,
        "s1",
        "send-0",
        "Why does the tombstone stay after compaction?",
    );
    let result = "fn compact() { keep_tombstones(); }";
    let digest = format!("sha256:{:x}", sha2::Sha256::digest(result.as_bytes()));
    append(
        &host,
        "s1",
        "step-0",
        vec![
            json!({"kind": "modelCompletion", "invocation": inv, "model": "m", "usage": null,
               "items": [
                   {"kind": "assistant", "body": long_body(), "thinking": "Look at the compactor."},
                   {"kind": "toolCall", "id": "c1", "name": "read_file",
                    "arguments": "{\"path\":\"compact.rs\"}"}]}),
            json!({"kind": "toolResult", "invocation": inv, "toolCallId": "c1", "status": "ok",
               "body": result, "raw": null, "parts": [{"kind": "text", "text": result}],
               "bytes": result.len(), "digest": digest}),
        ],
    );
    settle(&host, "s1", "settle-0", &inv);
    root.set_title(SetTitleParams {
        session_id: "s1".into(),
        operation: "title-1".into(),
        title: "Why the tombstone stays".into(),
    })
    .unwrap();
    for n in 1..=5 {
        let inv = send(
            &host,
            "s1",
            &format!("send-{n}"),
            &format!("Follow-up question {n}"),
        );
        settle(&host, "s1", &format!("settle-{n}"), &inv);
    }
    // Later than all of s1, so it lists first. (Each append moves a Session's last activity
    // forward by at least a millisecond, so s1's can run ahead of the clock by its 15.)
    std::thread::sleep(Duration::from_millis(50));
    send(
        &host,
        "s2",
        "send-s2",
        "The build is green again.\nSecond line.",
    );
}

/// Every file under `dir` with its bytes, to show that serving changed nothing.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

fn assert_unchanged(before: &BTreeMap<String, Vec<u8>>, dir: &Path) {
    let after = snapshot(dir);
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(before), names(&after), "files appeared or went");
    for (name, bytes) in before {
        assert!(after[name] == *bytes, "{name} changed while serving MCP");
    }
}

/// `logbook mcp` spoken to by hand: one JSON-RPC message per line each way.
struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl Raw {
    fn start(root: &Path) -> Raw {
        let mut child = Command::new(bin())
            .args(["mcp", "--root"])
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let rx = common::json_lines(child.stdout.take().unwrap(), "logbook mcp");
        let stdin = child.stdin.take();
        Raw {
            child,
            stdin,
            lines: rx,
        }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The answer to request `id` (notifications the server sends meanwhile are skipped).
    fn answer(&mut self, id: u64) -> Value {
        let deadline = Instant::now() + ANSWER_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to request {id} in time"));
            if line["id"] == id {
                assert_eq!(line["jsonrpc"], "2.0", "{line}");
                return line;
            }
        }
    }

    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(id)
    }

    /// Closes standard input; the server exits by itself.
    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + ANSWER_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "logbook mcp did not exit after its input ended"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn the_protocol_by_hand_initialize_list_and_call() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    build_root(&root);
    let before = snapshot(&root);
    let mut s = Raw::start(&root);
    let init = s.call(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "logbook-test", "version": "0"}}),
    );
    let result = &init["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(result["serverInfo"]["name"], "logbook", "{init}");
    assert!(result["capabilities"]["tools"].is_object(), "{init}");
    assert!(result["instructions"]
        .as_str()
        .unwrap()
        .contains("read_history"));
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let list = s.call(2, "tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "list_sessions",
            "read_history",
            "read_source",
            "search_sessions"
        ]
    );
    for tool in tools {
        assert!(tool["description"].as_str().unwrap().len() > 100, "{tool}");
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{tool}");
        for (name, property) in schema["properties"].as_object().unwrap() {
            assert!(
                property["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{}: argument {name} has no description",
                tool["name"]
            );
        }
        assert_eq!(tool["annotations"]["readOnlyHint"], true, "{tool}");
    }
    let read_history = tools.iter().find(|t| t["name"] == "read_history").unwrap();
    assert_eq!(
        read_history["inputSchema"]["required"],
        json!(["sessionId"])
    );

    let page = s.call(
        3,
        "tools/call",
        json!({"name": "read_history", "arguments": {"sessionId": "s1", "limit": 2}}),
    );
    let text = page["result"]["content"][0]["text"].as_str().unwrap();
    assert_ne!(page["result"]["isError"], true, "{page}");
    assert!(
        text.contains("[15.0] user") && text.contains("[13.0] user"),
        "{text}"
    );
    assert!(
        text.contains("Older rows follow: call read_history with {"),
        "{text}"
    );

    let missing = s.call(
        4,
        "tools/call",
        json!({"name": "read_history", "arguments": {"sessionId": "nope"}}),
    );
    assert_eq!(missing["result"]["isError"], true, "{missing}");
    let text = missing["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("not_found") && text.contains("nope"),
        "{text}"
    );

    let bad = s.call(
        5,
        "tools/call",
        json!({"name": "read_source", "arguments": {"sessionId": "s1"}}),
    );
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    let text = bad["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("missing field `sequence`"), "{text}");

    assert!(s.finish().success());
    assert_unchanged(&before, &root);
}

/// `logbook mcp` beside a writer that holds the Root (`logbook serve`): it starts, and its
/// searches find what the writer appends after it started.
#[test]
fn beside_a_writing_server_it_sees_new_appends() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    build_root(&root);
    let mut writer = Command::new(bin())
        .args(["serve", "--root"])
        .arg(&root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut writer_in = writer.stdin.take().unwrap();
    let mut writer_out = BufReader::new(writer.stdout.take().unwrap());
    let mut ask = |line: Value| {
        writeln!(writer_in, "{line}").unwrap();
        writer_in.flush().unwrap();
        let mut answer = String::new();
        writer_out.read_line(&mut answer).unwrap();
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert!(answer.get("result").is_some(), "{answer}");
    };
    // The writer holds the lock from here on.
    ask(json!({"id": 1, "method": "sessions", "params": {}}));
    let mut s = Raw::start(&root);
    s.call(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "logbook-test", "version": "0"}}),
    );
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    ask(
        json!({"id": 2, "method": "send", "params": {"sessionId": "s2", "operation": "late",
        "text": "a zanzibar-flavoured question asked after the reader started", "attachments": []}}),
    );
    let t = Instant::now();
    let text = loop {
        let found = s.call(
            2 + t.elapsed().as_micros() as u64,
            "tools/call",
            json!({"name": "search_sessions", "arguments": {"query": "zanzibar"}}),
        );
        let text = found["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        if text.contains("zanzibar»-flavoured") || t.elapsed() > Duration::from_secs(5) {
            break text;
        }
    };
    assert!(text.contains("zanzibar»-flavoured"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(s.finish().success());
    drop(writer_in);
    assert!(writer.wait().unwrap().success());
}

#[test]
fn a_missing_root_is_an_error_and_is_not_made() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("absent");
    let out = Command::new(bin())
        .args(["mcp", "--root"])
        .arg(&root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing on the protocol stream");
    assert!(!root.exists(), "logbook mcp never makes a Root");
}

#[test]
fn input_that_ends_at_once_is_a_quiet_exit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    build_root(&root);
    let out = Command::new(bin())
        .args(["mcp", "--root"])
        .arg(&root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

/// Whether `python3` can import the MCP SDK; the reason when not.
fn python_sdk() -> Result<(), String> {
    match Command::new("python3")
        .args(["-c", "import mcp.client.stdio"])
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        Err(e) => Err(format!("python3: {e}")),
    }
}

#[test]
fn the_python_sdk_as_client() {
    if let Err(why) = python_sdk() {
        if std::env::var_os("LOGBOOK_SKIP_MCP_PY").is_some_and(|v| v == "1") {
            eprintln!("skipped (LOGBOOK_SKIP_MCP_PY=1): the MCP Python SDK is missing: {why}");
            return;
        }
        panic!(
            "the MCP Python SDK is needed by this test: python3 -m pip install 'mcp==2.3.0' \
             (or set LOGBOOK_SKIP_MCP_PY=1 to skip it). Import failed: {why}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    build_root(&root);
    let before = snapshot(&root);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(bin())
        .arg(&root)
        .output()
        .unwrap();
    let (status, stdout, stderr) = (
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        status.success(),
        "mcp_client.py failed ({status}).\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(stdout.contains("mcp_client: all checks passed"), "{stdout}");
    assert_unchanged(&before, &root);
}
