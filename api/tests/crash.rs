#![allow(clippy::unwrap_used)]
//! Crash harness: `logbook serve` is killed with SIGKILL at random moments while a stream of
//! mutations flows into it, many times over on one Root. After every kill:
//!
//! - `logbook verify --root` walks every checksum and must exit 0;
//! - every answered mutation is present exactly once (its rows carry a unique marker) and a
//!   repeat of it returns the very same receipt and changes nothing;
//! - every unanswered mutation is wholly present or wholly absent; repeating it applies it at
//!   most once (present: the receipt comes back; absent: it is applied now);
//! - each Session's events are dense from 1 and tile exactly into the answered mutations'
//!   receipts (nothing extra, nothing missing), with the event kinds each mutation writes.
//!
//! A second run kills a server that works under a descriptor limit (`ulimit -n`), with more
//! Sessions than its descriptors can hold open and with forks among the mutations: some
//! answers are then `io` errors (not acknowledged, so whole or absent like the unanswered),
//! and kills land inside createSession and fork steps that fail for want of descriptors.
//! Some kills wait up to 400 ms so that they also land inside the periodic index sync.
//!
//! `LOGBOOK_CRASH_CYCLES` sets the number of kills (default 60; the limited run does half),
//! `LOGBOOK_CRASH_SEED` replays a run; the seed is printed first.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

const CYCLES_DEFAULT: u64 = 60;
/// Longest wait for one answer; the machine is shared, so be generous.
const ANSWER_WAIT: Duration = Duration::from_secs(120);
/// Most mutations sent in one burst before the kill.
const BURST_OPS_MAX: u64 = 40;
/// Older answered mutations repeated after each restart (besides the latest burst).
const OLD_REPEATS_PER_CYCLE: usize = 12;
const HISTORY_PAGE_ROWS: u32 = 1024;
/// Most Sessions the harness creates: every check reads every Session, so this bounds a cycle.
const SESSIONS_MAX: usize = 6;
/// Sessions of the descriptor-limited run: more than its servers can hold open at once.
const LIMITED_SESSIONS_MAX: usize = 24;
/// The descriptor limit of the limited run's servers.
const LIMITED_FDS: u64 = 32;
/// Sessions of the many-Session run, its servers' descriptor limit (fewer Sessions open at
/// once than there are), and its largest burst.
const MANY_SESSIONS: usize = 100;
const MANY_FDS: u64 = 128;
const MANY_BURST_OPS_MAX: u64 = 300;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_logbook"))
}

/// SplitMix64: small, seedable, good enough to pick moments and shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let h = sha2::Sha256::digest(bytes);
    format!(
        "sha256:{}",
        h.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// A `logbook serve` child. Answers are read on a thread into a channel, so answers that were
/// written before the kill are still collected after it.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    pending: HashMap<u64, Value>,
    next_id: u64,
}

impl Server {
    fn start(root: &Path) -> Server {
        Server::start_limited(root, None)
    }

    /// `logbook serve`, allowed at most `fds` open descriptors when given.
    fn start_limited(root: &Path, fds: Option<u64>) -> Server {
        let mut command = match fds {
            None => Command::new(bin()),
            Some(n) => {
                let mut c = Command::new("bash");
                c.arg("-c")
                    .arg(format!("ulimit -n {n}; exec \"$0\" \"$@\""))
                    .arg(bin());
                c
            }
        };
        let mut child = command
            .args(["serve", "--root"])
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn logbook serve");
        let stdout = child.stdout.take().expect("piped stdout");
        Server {
            stdin: child.stdin.take(),
            child,
            lines: common::json_lines(stdout, "server"),
            pending: HashMap::new(),
            next_id: 1,
        }
    }

    fn line_for(&mut self, method: &str, params: &Value) -> (u64, String) {
        let id = self.next_id;
        self.next_id += 1;
        (
            id,
            json!({"id": id, "method": method, "params": params}).to_string() + "\n",
        )
    }

    fn answer(&mut self, id: u64) -> Value {
        let deadline = Instant::now() + ANSWER_WAIT;
        loop {
            if let Some(v) = self.pending.remove(&id) {
                return v;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    let got = v["id"].as_u64().expect("numeric id in answer");
                    self.pending.insert(got, v);
                }
                Err(e) => panic!("no answer for request {id}: {e:?}"),
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let (id, line) = self.line_for(method, &params);
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
        self.answer(id)
    }

    fn ok(&mut self, method: &str, params: Value) -> Value {
        let a = self.call(method, params.clone());
        assert!(a.get("error").is_none(), "{method} {params} failed: {a}");
        a["result"].clone()
    }

    /// SIGKILL (std's `kill` on Unix), then collect every answer the server wrote before dying.
    fn kill_and_drain(mut self) -> HashMap<u64, Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.stdin.take());
        let mut got = std::mem::take(&mut self.pending);
        loop {
            match self.lines.recv_timeout(ANSWER_WAIT) {
                Ok(v) => {
                    got.insert(v["id"].as_u64().expect("numeric id"), v);
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("stdout of a killed server stays open"),
            }
        }
        got
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Create,
    Send,
    Append,
    Stop,
    /// A fork that was never applied and cannot be repeated (its source moved on).
    Void,
    /// A fork of `session` (all of it); the new Session's id comes with the receipt.
    Fork,
}

/// One mutation the harness sent, and what it knows about it.
#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    session: String,
    method: &'static str,
    params: Value,
    /// The receipt, once some server answered it.
    result: Option<Value>,
    /// Row bodies (history markers) this mutation writes, in order.
    markers: Vec<String>,
    /// Attachment bytes a send carried, concatenated.
    attachment_bytes: Vec<u8>,
}

impl Op {
    fn operation(&self) -> &str {
        self.params["operation"].as_str().expect("operation")
    }

    /// Event kinds this mutation writes, in order.
    fn event_kinds(&self) -> &'static [&'static str] {
        match self.kind {
            Kind::Create => &["sessionCreated"],
            Kind::Send => &["userMessage"],
            Kind::Append => &[
                "userMessage",
                "modelCompletion",
                "toolResult",
                "turnSettled",
            ],
            Kind::Stop => &["stopRequested"],
            Kind::Fork | Kind::Void => &[],
        }
    }

    /// The first sequence its receipt names (Session creation: 1).
    fn first_sequence(&self) -> u64 {
        let r = self.result.as_ref().expect("answered");
        match self.kind {
            Kind::Create | Kind::Fork | Kind::Void => 1,
            Kind::Send | Kind::Stop => r["sequence"].as_u64().expect("sequence"),
            Kind::Append => r["firstSequence"].as_u64().expect("firstSequence"),
        }
    }
}

struct Harness {
    rng: Rng,
    root: PathBuf,
    ops: Vec<Op>,
    /// Sessions whose creation was answered: mutations may target them.
    sessions: Vec<String>,
    /// Invocations of answered sends: stop may name them.
    open_invocations: Vec<(String, String)>,
    cycle: u64,
    answered_total: u64,
    unanswered_total: u64,
    unanswered_present: u64,
    /// Most Sessions created (forks not counted).
    sessions_max: usize,
    /// The descriptor limit of the servers that take the bursts (checks run without one).
    fd_limit: Option<u64>,
    /// Forks among the mutations.
    forks: bool,
    /// Most mutations in one burst.
    burst_max: u64,
    /// Create every Session before anything else (so that bursts append to all of them).
    creates_first: bool,
    /// Each Session's revision at the last check: a fork must name its source's revision.
    revisions: HashMap<String, u64>,
    /// Answers that were errors (allowed only under a descriptor limit).
    errors_total: u64,
}

impl Harness {
    fn new_op(&mut self, k: u64) -> Op {
        let op_name = format!("c{}-{k}", self.cycle);
        let pick = self.rng.below(100);
        let creates = self.ops.iter().filter(|o| o.kind == Kind::Create).count();
        let create = pick < 4 || self.sessions.is_empty() || self.creates_first;
        if creates < self.sessions_max && create {
            let sid = format!("s-{op_name}");
            return Op {
                kind: Kind::Create,
                session: sid.clone(),
                method: "createSession",
                params: json!({"sessionId": sid, "workspace": null, "operation": op_name}),
                result: None,
                markers: vec![],
                attachment_bytes: vec![],
            };
        }
        let session = self.sessions[self.rng.below(self.sessions.len() as u64) as usize].clone();
        // A fork names its source's revision, known only before the burst's first mutation.
        if self.forks && k == 0 && pick < 30 {
            if let Some(rev) = self.revisions.get(&session) {
                return Op {
                    kind: Kind::Fork,
                    session: session.clone(),
                    method: "fork",
                    params: json!({"sessionId": session, "operation": op_name,
                                   "from": {"kind": "all"}, "revision": rev}),
                    result: None,
                    markers: vec![],
                    attachment_bytes: vec![],
                };
            }
        }
        let stops: Vec<&(String, String)> = self
            .open_invocations
            .iter()
            .filter(|(s, _)| *s == session)
            .collect();
        if pick < 14 && !stops.is_empty() {
            let (_, inv) = stops[self.rng.below(stops.len() as u64) as usize].clone();
            return Op {
                kind: Kind::Stop,
                session: session.clone(),
                method: "stop",
                params: json!({"sessionId": session, "operation": op_name, "invocation": inv}),
                result: None,
                markers: vec![],
                attachment_bytes: vec![],
            };
        }
        if pick < 50 {
            let marker = format!("m:{op_name}");
            let mut attachments = Vec::new();
            let mut attachment_bytes = Vec::new();
            if self.rng.chance(30) {
                for i in 0..1 + self.rng.below(2) {
                    let n = self.rng.below(4096) as usize;
                    let data = self.rng.bytes(n);
                    attachments.push(json!({"name": format!("a{i}.bin"), "mimeType": "application/octet-stream", "dataBase64": b64(&data)}));
                    attachment_bytes.extend_from_slice(&data);
                }
            }
            // Sometimes a long text, so batches of very different sizes meet the kill.
            let filler = "x".repeat(self.rng.below(20_000) as usize * self.rng.below(2) as usize);
            return Op {
                kind: Kind::Send,
                session: session.clone(),
                method: "send",
                params: json!({"sessionId": session, "operation": op_name, "text": format!("{marker}{filler}"), "attachments": attachments}),
                result: None,
                markers: vec![format!("{marker}{filler}")],
                attachment_bytes,
            };
        }
        let inv = format!("inv-{op_name}");
        let (u, a, t) = (
            format!("m:{op_name}:u"),
            format!("m:{op_name}:a"),
            format!("m:{op_name}:t"),
        );
        let events = json!([
            {"kind": "userMessage", "invocation": inv, "text": u, "attachments": []},
            {"kind": "modelCompletion", "invocation": inv, "model": "m", "usage": {"inputTokens": 3, "outputTokens": 5},
             "items": [{"kind": "assistant", "body": a, "thinking": "think"}]},
            {"kind": "toolResult", "invocation": inv, "toolCallId": format!("call-{op_name}"), "status": "ok",
             "body": t, "raw": {"z": 1, "a": [1.50, 2e3]}, "parts": [{"kind": "text", "text": t}],
             "bytes": t.len(), "digest": digest(t.as_bytes())},
            {"kind": "turnSettled", "invocation": inv, "outcome": "completed"}
        ]);
        Op {
            kind: Kind::Append,
            session: session.clone(),
            method: "append",
            params: json!({"sessionId": session, "operation": op_name, "events": events}),
            result: None,
            markers: vec![u, a, t],
            attachment_bytes: vec![],
        }
    }

    fn verify_root(&self) {
        let out = Command::new(bin())
            .args(["verify", "--root"])
            .arg(&self.root)
            .output()
            .expect("run logbook verify");
        assert!(
            out.status.success(),
            "cycle {}: logbook verify failed ({}): {}{}",
            self.cycle,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Checks after a restart, then repeats unanswered and sampled answered mutations.
    fn check_and_repeat(&mut self, s: &mut Server, last_burst: std::ops::Range<usize>) {
        let cycle = self.cycle;
        let listed: Vec<String> = s.ok("sessions", json!({"order": "id", "limit": 1024}))
            ["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["sessionId"].as_str().unwrap().to_owned())
            .collect();
        let snapshot: BTreeMap<String, Snapshot> = listed
            .iter()
            .map(|id| (id.clone(), Snapshot::read(s, id)))
            .collect();

        // 1. Answered: exactly once. Unanswered: whole or absent.
        for op in &self.ops {
            let present = match op.kind {
                Kind::Create => {
                    let n = listed.iter().filter(|x| **x == op.session).count();
                    assert!(
                        n <= 1,
                        "cycle {cycle}: Session {} listed {n} times",
                        op.session
                    );
                    n
                }
                Kind::Stop => {
                    // No row: judged by its receipt below.
                    usize::from(op.result.is_some())
                }
                Kind::Void => 0,
                Kind::Fork => match &op.result {
                    Some(r) => {
                        let id = r["sessionId"].as_str().unwrap();
                        listed.iter().filter(|x| *x == id).count()
                    }
                    None => 0,
                },
                Kind::Send | Kind::Append => {
                    let snap = snapshot.get(&op.session).unwrap_or_else(|| {
                        panic!(
                            "cycle {cycle}: Session {} of {} vanished",
                            op.session,
                            op.operation()
                        )
                    });
                    let counts: Vec<usize> = op.markers.iter().map(|m| snap.count(m)).collect();
                    assert!(
                        counts.iter().all(|&c| c == counts[0]) && counts[0] <= 1,
                        "cycle {cycle}: {} is torn or doubled: marker counts {counts:?}",
                        op.operation()
                    );
                    counts[0]
                }
            };
            if op.result.is_some() {
                assert_eq!(
                    present,
                    1,
                    "cycle {cycle}: answered {} lost",
                    op.operation()
                );
            }
        }

        // 2. Repeat every unanswered mutation (in sending order): applied at most once.
        for i in 0..self.ops.len() {
            if self.ops[i].result.is_some() || self.ops[i].kind == Kind::Void {
                continue;
            }
            let op = self.ops[i].clone();
            if op.kind == Kind::Fork {
                // Whole or absent: its receipt says which. An absent one names a revision
                // its source has since left, so it is not repeated.
                let r = s.ok(
                    "forkReceipt",
                    json!({"sessionId": op.session, "operation": op.operation()}),
                );
                if !r.is_null() {
                    let id = r["sessionId"].as_str().unwrap();
                    assert!(
                        listed.iter().any(|x| x == id),
                        "cycle {cycle}: fork {} has a receipt but no Session",
                        op.operation()
                    );
                    self.unanswered_present += 1;
                    self.ops[i].result = Some(r);
                } else {
                    self.ops[i].kind = Kind::Void;
                }
                continue;
            }
            let was_present = match op.kind {
                Kind::Create => listed.contains(&op.session),
                Kind::Send | Kind::Append => snapshot[&op.session].count(&op.markers[0]) == 1,
                Kind::Stop | Kind::Fork | Kind::Void => false,
            };
            let r = s.ok(op.method, op.params.clone());
            self.ops[i].result = Some(r.clone());
            if was_present {
                self.unanswered_present += 1;
                // Present before the repeat: the receipt names where it already is.
                if matches!(op.kind, Kind::Send | Kind::Append) {
                    let at = snapshot[&op.session].sequence_of(&op.markers[0]);
                    assert_eq!(
                        Some(self.ops[i].first_sequence()),
                        at,
                        "cycle {cycle}: receipt of {} names another sequence",
                        op.operation()
                    );
                }
            }
            self.register(i);
        }

        // 3. Repeat the latest burst's answered mutations and a sample of older ones.
        let mut repeat: Vec<usize> = last_burst.filter(|&i| i < self.ops.len()).collect();
        for _ in 0..OLD_REPEATS_PER_CYCLE {
            if !self.ops.is_empty() {
                repeat.push(self.rng.below(self.ops.len() as u64) as usize);
            }
        }
        for i in repeat {
            let op = &self.ops[i];
            if op.kind == Kind::Void {
                continue;
            }
            let again = s.ok(op.method, op.params.clone());
            assert_eq!(
                Some(&again),
                op.result.as_ref(),
                "cycle {cycle}: receipt of {} changed",
                op.operation()
            );
            if op.kind == Kind::Send && !op.attachment_bytes.is_empty() {
                let inv = again["invocation"].clone();
                let data = s.ok(
                    "readAttachments",
                    json!({"sessionId": op.session, "invocation": inv, "offset": 0, "limit": 1 << 20}),
                );
                assert_eq!(
                    data["dataBase64"].as_str().unwrap(),
                    b64(&op.attachment_bytes),
                    "cycle {cycle}: attachments of {} differ",
                    op.operation()
                );
            }
        }

        // 4. Every Session's events tile exactly into the receipts.
        let listed: Vec<String> = s.ok("sessions", json!({"order": "id", "limit": 1024}))
            ["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["sessionId"].as_str().unwrap().to_owned())
            .collect();
        let forks: HashMap<String, &Op> = self
            .ops
            .iter()
            .filter(|o| o.kind == Kind::Fork)
            .map(|o| {
                let r = o.result.as_ref().expect("every fork is answered by now");
                (r["sessionId"].as_str().unwrap().to_owned(), o)
            })
            .collect();
        let mut created: Vec<String> = self
            .ops
            .iter()
            .filter(|o| o.kind == Kind::Create)
            .map(|o| o.session.clone())
            .chain(forks.keys().cloned())
            .collect();
        created.sort();
        assert_eq!(
            listed, created,
            "cycle {cycle}: Sessions differ from the creations and forks"
        );
        let mut snaps: BTreeMap<String, Snapshot> = BTreeMap::new();
        for sid in listed.iter().filter(|id| !forks.contains_key(*id)) {
            let snap = Snapshot::read(s, sid);
            self.revisions.insert(sid.clone(), snap.revision);
            let mut expect: Vec<(u64, &'static str, &Op)> = Vec::new();
            for op in self.ops_writing_to(sid) {
                let first = op.first_sequence();
                for (k, kind) in op.event_kinds().iter().enumerate() {
                    expect.push((first + k as u64, kind, op));
                }
            }
            expect.sort_by_key(|e| e.0);
            let got: Vec<(u64, &str)> = snap.events.iter().map(|(q, k)| (*q, k.as_str())).collect();
            let want: Vec<(u64, &str)> = expect.iter().map(|(q, k, _)| (*q, *k)).collect();
            assert_eq!(
                got, want,
                "cycle {cycle}: events of {sid} do not tile into the receipts"
            );
            assert_eq!(
                snap.revision,
                got.len() as u64,
                "cycle {cycle}: {sid} revision"
            );
            for (q, (seq, _)) in got.iter().enumerate() {
                assert_eq!(
                    *seq,
                    q as u64 + 1,
                    "cycle {cycle}: {sid} sequences not dense"
                );
            }
            // Rows: each marker once, at the sequence its receipt implies.
            let mut rows_expected = 0;
            for op in self.ops_writing_to(sid) {
                let first = op.first_sequence();
                let offsets: &[u64] = match op.kind {
                    Kind::Send => &[0],
                    Kind::Append => &[0, 1, 2],
                    _ => &[],
                };
                for (m, off) in op.markers.iter().zip(offsets) {
                    assert_eq!(snap.count(m), 1, "cycle {cycle}: row {m:.40} count");
                    assert_eq!(
                        snap.sequence_of(m),
                        Some(first + off),
                        "cycle {cycle}: row {m:.40} sequence"
                    );
                    rows_expected += 1;
                }
            }
            assert_eq!(
                snap.rows.len(),
                rows_expected,
                "cycle {cycle}: {sid} has rows no mutation wrote"
            );
            snaps.insert(sid.clone(), snap);
        }
        // 5. A fork shows its source's events and rows through the revision it named.
        for (fid, op) in &forks {
            let source = &snaps[&op.session];
            let through = op.params["revision"].as_u64().unwrap();
            let snap = Snapshot::read(s, fid);
            assert_eq!(snap.revision, through, "cycle {cycle}: fork {fid} revision");
            let want_rows: Vec<&(u64, String)> =
                source.rows.iter().filter(|(q, _)| *q <= through).collect();
            assert_eq!(
                snap.rows.iter().collect::<Vec<_>>(),
                want_rows,
                "cycle {cycle}: fork {fid} rows differ from its source's"
            );
            let want_events: Vec<&(u64, String)> = source
                .events
                .iter()
                .filter(|(q, _)| *q <= through)
                .collect();
            assert_eq!(
                snap.events.iter().collect::<Vec<_>>(),
                want_events,
                "cycle {cycle}: fork {fid} events differ from its source's"
            );
        }
    }

    /// The mutations that write events into Session `sid` (a fork writes none to its source).
    fn ops_writing_to<'a>(&'a self, sid: &'a str) -> impl Iterator<Item = &'a Op> + 'a {
        self.ops
            .iter()
            .filter(move |o| o.session == sid && !matches!(o.kind, Kind::Fork | Kind::Void))
    }

    /// Makes an answered mutation usable by later ones.
    fn register(&mut self, i: usize) {
        let op = &self.ops[i];
        match op.kind {
            Kind::Create => {
                if !self.sessions.contains(&op.session) {
                    self.sessions.push(op.session.clone());
                }
            }
            Kind::Send => {
                let inv = op.result.as_ref().unwrap()["invocation"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                self.open_invocations.push((op.session.clone(), inv));
            }
            Kind::Append | Kind::Stop | Kind::Fork | Kind::Void => {}
        }
    }

    /// Sends a burst of mutations and kills the server at a random moment inside it.
    fn burst_and_kill(&mut self, mut s: Server) -> std::ops::Range<usize> {
        let mut n = 1 + self.rng.below(self.burst_max);
        if self.sessions.is_empty() {
            // Only creations are possible yet; stay within the Session budget.
            let creates = self.ops.iter().filter(|o| o.kind == Kind::Create).count();
            n = n.min((self.sessions_max - creates).max(1) as u64);
        }
        let start = self.ops.len();
        let mut text = String::new();
        let mut ids = Vec::new();
        for k in 0..n {
            let op = self.new_op(k);
            let (id, line) = s.line_for(op.method, &op.params);
            text.push_str(&line);
            ids.push(id);
            self.ops.push(op);
        }
        let mut stdin = s.stdin.take().expect("stdin");
        // Write on a thread: a dying server stops reading, and the write must not block us.
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
            let _ = stdin.flush();
            stdin
        });
        let wait_for = self.rng.below(n + 1);
        let mut seen = 0;
        let deadline = Instant::now() + ANSWER_WAIT;
        while seen < wait_for {
            let left = deadline.saturating_duration_since(Instant::now());
            match s.lines.recv_timeout(left) {
                Ok(v) => {
                    s.pending.insert(v["id"].as_u64().expect("id"), v);
                    seen += 1;
                }
                Err(e) => panic!("cycle {}: burst stalled: {e:?}", self.cycle),
            }
        }
        // Mostly within 3 ms of an answer; sometimes long enough to span an index sync tick.
        let delay_us = if self.rng.chance(20) { 400_000 } else { 3_000 };
        std::thread::sleep(Duration::from_micros(self.rng.below(delay_us)));
        let answers = s.kill_and_drain();
        drop(writer.join());
        for (k, id) in ids.iter().enumerate() {
            let i = start + k;
            if let Some(a) = answers.get(id) {
                if self.ops[i].kind == Kind::Fork && a["error"]["code"] == "conflict" {
                    // A Turn of the source is still open (sends leave them so): refused, and
                    // nothing stored.
                    self.ops[i].kind = Kind::Void;
                    continue;
                }
                if self.fd_limit.is_some() && a["error"]["code"] == "io" {
                    // Refused for want of descriptors: not acknowledged, so like unanswered.
                    self.errors_total += 1;
                    self.unanswered_total += 1;
                    continue;
                }
                assert!(
                    a.get("error").is_none(),
                    "cycle {}: {} failed: {a}",
                    self.cycle,
                    self.ops[i].operation()
                );
                self.ops[i].result = Some(a["result"].clone());
                self.answered_total += 1;
                self.register(i);
            } else {
                self.unanswered_total += 1;
            }
        }
        // Answers come in request order: a gap would mean an answer was lost.
        let answered: Vec<bool> = ids.iter().map(|id| answers.contains_key(id)).collect();
        assert!(
            answered.windows(2).all(|w| w[0] || !w[1]),
            "cycle {}: answers are not a prefix of the requests: {answered:?}",
            self.cycle
        );
        start..start + n as usize
    }
}

/// One Session as the server shows it: every row (forward, under one fence) and every event.
struct Snapshot {
    revision: u64,
    /// (sourceSequence, body text)
    rows: Vec<(u64, String)>,
    /// (sequence, kind)
    events: Vec<(u64, String)>,
}

impl Snapshot {
    fn read(s: &mut Server, sid: &str) -> Snapshot {
        let first = s.ok(
            "history",
            json!({"sessionId": sid, "through": null, "limit": HISTORY_PAGE_ROWS}),
        );
        let revision = first["through"].as_u64().unwrap();
        let mut rows = Vec::new();
        let mut page = first;
        loop {
            for r in page["rows"].as_array().unwrap() {
                let f = &r["fields"]["body"];
                assert_eq!(f["truncated"], false, "marker rows are short");
                rows.push((
                    r["position"]["sourceSequence"].as_u64().unwrap(),
                    f["text"].as_str().unwrap().to_owned(),
                ));
            }
            if page["nextAfter"].is_null() {
                break;
            }
            page = s.ok(
                "history",
                json!({"sessionId": sid, "through": revision, "after": page["nextAfter"], "limit": HISTORY_PAGE_ROWS}),
            );
        }
        let mut events = Vec::new();
        let mut after = 0u64;
        loop {
            let w = s.ok(
                "watch",
                json!({"sessionId": sid, "after": after, "timeoutMs": 0}),
            );
            let batch = w["events"].as_array().unwrap();
            for e in batch {
                let q = e["sequence"].as_u64().unwrap();
                if q > revision {
                    break;
                }
                events.push((q, e["kind"].as_str().unwrap().to_owned()));
            }
            after = w["nextAfter"].as_u64().unwrap();
            if batch.is_empty() || after >= revision {
                break;
            }
        }
        events.retain(|(q, _)| *q <= revision);
        Snapshot {
            revision,
            rows,
            events,
        }
    }

    fn count(&self, marker: &str) -> usize {
        self.rows.iter().filter(|(_, t)| t == marker).count()
    }

    fn sequence_of(&self, marker: &str) -> Option<u64> {
        self.rows.iter().find(|(_, t)| t == marker).map(|(q, _)| *q)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

/// What one run of the harness does besides its number of kills.
struct Mode {
    label: &'static str,
    sessions_max: usize,
    /// The descriptor limit of the servers that take the bursts.
    fd_limit: Option<u64>,
    forks: bool,
    burst_max: u64,
    creates_first: bool,
}

#[test]
fn sigkill_under_a_stream_of_mutations_loses_nothing_answered() {
    let cycles = env_u64("LOGBOOK_CRASH_CYCLES").unwrap_or(CYCLES_DEFAULT);
    run(
        cycles,
        Mode {
            label: "",
            sessions_max: SESSIONS_MAX,
            fd_limit: None,
            forks: false,
            burst_max: BURST_OPS_MAX,
            creates_first: false,
        },
    );
}

#[test]
fn sigkill_with_forks_under_a_descriptor_limit_loses_nothing_answered() {
    let cycles = env_u64("LOGBOOK_CRASH_CYCLES").unwrap_or(CYCLES_DEFAULT) / 2;
    run(
        cycles,
        Mode {
            label: "limited: ",
            sessions_max: LIMITED_SESSIONS_MAX,
            fd_limit: Some(LIMITED_FDS),
            forks: true,
            burst_max: BURST_OPS_MAX,
            creates_first: false,
        },
    );
}

/// 100 Sessions, all created first, then bursts of up to 300 mutations spread over them,
/// pipelined: the server runs appends to different Sessions at once (and, under its
/// descriptor limit, closes and reopens them in its cache), so each kill lands while many
/// Sessions have appends in flight.
#[test]
fn sigkill_while_100_sessions_are_appended_to_loses_nothing_answered() {
    let cycles = env_u64("LOGBOOK_CRASH_CYCLES").unwrap_or(CYCLES_DEFAULT) / 6;
    run(
        cycles,
        Mode {
            label: "100 Sessions: ",
            sessions_max: MANY_SESSIONS,
            fd_limit: Some(MANY_FDS),
            forks: false,
            burst_max: MANY_BURST_OPS_MAX,
            creates_first: true,
        },
    );
}

/// Runs `cycles` kills.
fn run(cycles: u64, mode: Mode) {
    let Mode {
        label,
        sessions_max,
        fd_limit,
        forks,
        burst_max,
        creates_first,
    } = mode;
    let seed = env_u64("LOGBOOK_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    println!(
        "crash harness: {label}seed {seed} (LOGBOOK_CRASH_SEED={seed} replays), {cycles} cycles"
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut h = Harness {
        rng: Rng(seed),
        root: tmp.path().join("root"),
        ops: Vec::new(),
        sessions: Vec::new(),
        open_invocations: Vec::new(),
        cycle: 0,
        answered_total: 0,
        unanswered_total: 0,
        unanswered_present: 0,
        sessions_max,
        fd_limit,
        forks,
        burst_max,
        creates_first,
        revisions: HashMap::new(),
        errors_total: 0,
    };
    let started = Instant::now();
    let mut last_burst = 0..0;
    for cycle in 0..=cycles {
        h.cycle = cycle;
        if cycle > 0 {
            h.verify_root();
        }
        let mut s = Server::start(&h.root);
        h.check_and_repeat(&mut s, last_burst.clone());
        if cycle == cycles {
            break;
        }
        if h.fd_limit.is_some() {
            // Checks run without the limit; the burst meets it.
            s.kill_and_drain();
            s = Server::start_limited(&h.root, h.fd_limit);
        }
        last_burst = h.burst_and_kill(s);
        if (cycle + 1) % 25 == 0 {
            println!(
                "crash harness: {label}{} kills survived ({:.0}s, {} mutations)",
                cycle + 1,
                started.elapsed().as_secs_f64(),
                h.ops.len()
            );
        }
    }
    println!(
        "crash harness: {label}seed {seed}: {cycles} SIGKILLs survived in {:.1}s; {} mutations sent, {} answered before a kill, \
         {} unanswered or refused ({} refused for want of descriptors; {} found whole, the rest wholly absent)",
        started.elapsed().as_secs_f64(),
        h.ops.len(),
        h.answered_total,
        h.unanswered_total,
        h.errors_total,
        h.unanswered_present
    );
}
