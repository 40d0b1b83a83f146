//! The `logbook serve` loop over arbitrary input: it never panics, every input line gets
//! exactly one answer (`result` or `error`, `item` lines aside), and every output line is one
//! JSON object with an `id`.
//!
//! One Root per fuzzing process (made once: a fresh one per input would measure `init`, not
//! the dispatcher), holding Session `s` with a few Turns, so well-formed requests reach real
//! history, source, watch and mutation paths. Two rewrites keep the process bounded: waiting
//! requests get `timeoutMs: 0`, and `createSession` gets no workspace (a fuzzed workspace of
//! `/` would let `readFile` wander the machine's files).
//!
//! Lines are inspected as maps of raw values, never as `serde_json::Value`: an id such as
//! `1e2100` is valid JSON, echoed verbatim by the server, yet beyond what a `Value` can hold.
#![no_main]

use std::collections::BTreeMap;
use std::io::{Cursor, Write};
use std::sync::{Arc, Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use logbook_api::dispatch::WAITING_METHODS;
use logbook_api::Host;
use logbook_engine::{Durability, Root, RootOptions};
use serde_json::value::{to_raw_value, RawValue};
use serde_json::Value;

/// One JSON object, its members left as written.
type Members = BTreeMap<String, Box<RawValue>>;

struct Fixture {
    _dir: tempfile::TempDir,
    host: Arc<Host>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("root");
        Root::init(&path).expect("init");
        let options = RootOptions {
            durability: Durability::NoSyncBulkImport,
            ..RootOptions::default()
        };
        let host = Arc::new(Host::with_root(
            Root::open_with(&path, options).expect("open"),
        ));
        let setup = [
            r#"{"id":1,"method":"createSession","params":{"sessionId":"s","workspace":null,"operation":"c"}}"#,
            r#"{"id":2,"method":"send","params":{"sessionId":"s","operation":"o1","text":"hello","attachments":[{"name":"a","mimeType":"text/plain","dataBase64":"aGk="}]}}"#,
            r#"{"id":3,"method":"append","params":{"sessionId":"s","operation":"o2","events":[{"kind":"modelCompletion","invocation":"i","model":"m","usage":null,"items":[{"kind":"assistant","body":"answer","thinking":"t"},{"kind":"toolCall","id":"c1","name":"read","arguments":"{","internal":true}]}]}}"#,
        ];
        let mut input = setup.join("\n");
        input.push('\n');
        let out = run(&host, input.as_bytes());
        assert_eq!(out.len(), setup.len(), "setup answered");
        for line in &out {
            assert!(line.contains_key("result"), "setup failed: {line:?}");
        }
        Fixture { _dir: dir, host }
    })
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("sink lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs the server over `input`; returns the answer lines (without `item` lines).
fn run(host: &Arc<Host>, input: &[u8]) -> Vec<Members> {
    let sink = Sink(Arc::new(Mutex::new(Vec::new())));
    logbook_api::serve::serve(Arc::clone(host), Cursor::new(input), Box::new(sink.clone()))
        .expect("reading from memory cannot fail");
    let bytes = sink.0.lock().expect("sink lock").clone();
    let text = String::from_utf8(bytes).expect("answers are UTF-8");
    let mut answers = Vec::new();
    for line in text.lines() {
        let obj: Members = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("answer line is not a JSON object ({e}): {line}"));
        assert!(obj.contains_key("id"), "answer without id: {line}");
        let tags = ["result", "error", "item"]
            .iter()
            .filter(|t| obj.contains_key(**t))
            .count();
        assert_eq!(
            tags, 1,
            "answer must carry exactly one of result/error/item: {line}"
        );
        if let Some(err) = obj.get("error") {
            let err: Value = serde_json::from_str(err.get()).expect("an error body is plain JSON");
            let code = err["code"].as_str().expect("error code is a string");
            assert!(
                [
                    "invalid_argument",
                    "not_found",
                    "conflict",
                    "busy",
                    "unsupported",
                    "unsupported_format",
                    "permission_denied",
                    "corrupt",
                    "io"
                ]
                .contains(&code),
                "unknown error code in {line}"
            );
            assert!(err["message"].is_string(), "error without message: {line}");
        }
        if !obj.contains_key("item") {
            answers.push(obj);
        }
    }
    answers
}

/// Bounds a request that would wait or read outside the Root; other lines pass untouched.
fn tame(line: &[u8]) -> Vec<u8> {
    let Ok(mut request) = serde_json::from_slice::<Members>(line) else {
        return line.to_vec();
    };
    let Some(method) = request
        .get("method")
        .and_then(|m| serde_json::from_str::<String>(m.get()).ok())
    else {
        return line.to_vec();
    };
    let waiting = WAITING_METHODS.contains(&method.as_str());
    if !waiting && method != "createSession" {
        return line.to_vec();
    }
    // Not an object: the dispatcher refuses it without waiting.
    let Some(mut params) = request
        .get("params")
        .and_then(|p| serde_json::from_str::<Members>(p.get()).ok())
    else {
        return line.to_vec();
    };
    let (key, value) = if waiting {
        ("timeoutMs", "0")
    } else {
        ("workspace", "null")
    };
    params.insert(
        key.into(),
        RawValue::from_string(value.into()).expect("a JSON literal"),
    );
    request.insert(
        "params".into(),
        to_raw_value(&params).expect("raw members encode"),
    );
    serde_json::to_vec(&request).expect("raw members encode")
}

/// A line the server must answer under its own id (serde refuses duplicate keys here too).
#[derive(serde::Deserialize)]
struct WellFormed {
    id: Option<Box<RawValue>>,
    #[allow(dead_code)]
    method: String,
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let mut input = Vec::with_capacity(data.len() + 16);
    let mut lines = 0usize;
    let mut parts = data.split(|&b| b == b'\n').peekable();
    while let Some(part) = parts.next() {
        let last = parts.peek().is_none();
        if last && part.is_empty() {
            break; // the input ended with a newline
        }
        input.extend_from_slice(&tame(part));
        if !last {
            input.push(b'\n');
        }
        lines += 1;
    }
    let answers = run(&f.host, &input);
    assert_eq!(
        answers.len(),
        lines,
        "every input line gets exactly one answer"
    );
    // Requests with a readable id are answered under that id.
    let ids: Vec<Option<Box<RawValue>>> = input
        .split(|&b| b == b'\n')
        .take(lines)
        .map(|l| {
            // A line that is not UTF-8 is malformed as a whole (answered with `id: null`),
            // even where serde would skip the bad bytes inside an ignored field.
            let text = std::str::from_utf8(l).ok()?;
            serde_json::from_str::<WellFormed>(text.trim_end_matches('\r'))
                .ok()
                .and_then(|r| r.id)
        })
        .collect();
    let mut answered: Vec<&str> = answers.iter().map(|a| a["id"].get()).collect();
    answered.sort();
    for id in ids.into_iter().flatten() {
        if let Ok(i) = answered.binary_search(&id.get()) {
            answered.remove(i);
        } else {
            panic!("request id {id} got no answer under its id");
        }
    }
});
