//! A `logbook serve` child process driven over its standard input and output.
#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const ANSWER_WAIT: Duration = Duration::from_secs(60);

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_logbook"))
}

pub struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    /// Lines read but not yet asked for, by id (as JSON text).
    pending: Vec<Value>,
    next_id: u64,
}

impl Server {
    pub fn start(root: &Path) -> Server {
        let mut command = Command::new(bin());
        command.args(["serve", "--root"]).arg(root);
        Server::spawn(command)
    }

    /// Starts `logbook serve --read-only --root ROOT`: a reader beside the writer.
    pub fn start_read_only(root: &Path) -> Server {
        let mut command = Command::new(bin());
        command.args(["serve", "--read-only", "--root"]).arg(root);
        Server::spawn(command)
    }

    /// Starts `logbook serve --root ROOT` whose files may grow to at most `bytes` each:
    /// a longer write fails with EFBIG (SIGXFSZ is ignored), as a full disk would fail it.
    pub fn start_with_file_size_limit(root: &Path, bytes: u64) -> Server {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(format!(
                "trap '' XFSZ; ulimit -f {}; exec \"$0\" serve --root \"$1\"",
                bytes / 1024
            ))
            .arg(bin())
            .arg(root);
        Server::spawn(command)
    }

    /// Starts `logbook serve --root ROOT` allowed at most `n` open file descriptors.
    pub fn start_with_descriptor_limit(root: &Path, n: u64) -> Server {
        Server::start_under_ulimit(root, &format!("-n {n}"))
    }

    /// Starts `logbook serve --root ROOT` after `ulimit LIMIT` (`-n 256` sets the soft and the
    /// hard limit; `-S -n 256` the soft one only).
    pub fn start_under_ulimit(root: &Path, limit: &str) -> Server {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(format!("ulimit {limit}; exec \"$0\" serve --root \"$1\""))
            .arg(bin())
            .arg(root);
        Server::spawn(command)
    }

    fn spawn(mut command: Command) -> Server {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn logbook serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        Server {
            child,
            stdin,
            lines: json_lines(stdout, "server"),
            pending: Vec::new(),
            next_id: 1,
        }
    }

    /// The server's process id (`bash -c ... exec` keeps the shell's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request without waiting; returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"id": id, "method": method, "params": params}).to_string();
        self.send_line(&line);
        id
    }

    /// The next line from the server, whatever it is.
    pub fn next_line(&mut self) -> Value {
        if !self.pending.is_empty() {
            return self.pending.remove(0);
        }
        self.lines
            .recv_timeout(ANSWER_WAIT)
            .expect("an answer line in time")
    }

    /// Waits for the final answer (result or error) of `id`, returning it and the items before it.
    pub fn answer_with_items(&mut self, id: u64) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + ANSWER_WAIT;
        let mut items = Vec::new();
        let mut i = 0;
        loop {
            while i < self.pending.len() {
                if self.pending[i]["id"] == id {
                    let line = self.pending.remove(i);
                    if line.get("item").is_some() {
                        items.push(line["item"].clone());
                        continue;
                    }
                    return (line, items);
                }
                i += 1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.pending.push(line),
                Err(RecvTimeoutError::Timeout) => panic!("no answer for request {id} in time"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("server closed before answering {id}")
                }
            }
        }
    }

    pub fn answer(&mut self, id: u64) -> Value {
        self.answer_with_items(id).0
    }

    /// Calls and expects a result.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params.clone());
        let answer = self.answer(id);
        assert!(
            answer.get("error").is_none(),
            "{method} {params} failed: {answer}"
        );
        answer["result"].clone()
    }

    /// Calls and expects an error; returns its code.
    pub fn err(&mut self, method: &str, params: Value) -> String {
        let id = self.request(method, params.clone());
        let answer = self.answer(id);
        assert!(
            answer.get("result").is_none(),
            "{method} {params} should fail: {answer}"
        );
        answer["error"]["code"]
            .as_str()
            .expect("error code")
            .to_owned()
    }

    /// Closes stdin and waits for the process to end on its own.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().expect("wait for logbook serve")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn path(p: &str) -> Value {
    json!({"bytesBase64": b64(p.as_bytes())})
}

pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let h = sha2::Sha256::digest(bytes);
    format!(
        "sha256:{}",
        h.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

pub fn tool_result(invocation: &str, call: &str, body: &str) -> Value {
    json!({"kind": "toolResult", "invocation": invocation, "toolCallId": call, "status": "ok",
           "body": body, "raw": {"text": body}, "parts": [{"kind": "text", "text": body}],
           "bytes": body.len(), "digest": digest(body.as_bytes())})
}

pub fn counts_by_id(lines: &[Value]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for l in lines {
        *m.entry(l["id"].to_string()).or_insert(0) += 1;
    }
    m
}

/// The JSON values a child writes one per line on `out`, read by a thread of their own (a line
/// that is not JSON panics there, naming `who`); the channel ends with the output.
pub fn json_lines(out: impl std::io::Read + Send + 'static, who: &'static str) -> Receiver<Value> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{who} wrote a line that is not JSON ({e}): {line}"));
            if tx.send(value).is_err() {
                break;
            }
        }
    });
    rx
}
