//! Arbitrary operation sequences against a fresh Root and a plain in-memory model of the
//! contract: createSession, send, append (valid and invalid batches), stop, history paging
//! under any fence in both directions, sync and reopen. After every step the engine's answer
//! (result or error kind) equals the model's, and every history page equals the model's rows.
#![no_main]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use logbook_engine::{
    AppendParams, CreateSessionParams, Direction, Durability, EngineError, ErrorKind, Event,
    HistoryParams, Root, RootOptions, SendParams, StopParams, FIELD_TEXT_BYTES_MAX,
};
use serde_json::{json, Value};

const SESSIONS_MAX: u8 = 3;
const OPERATIONS_MAX: u8 = 12;
const INVOCATIONS_MAX: u8 = 6;

fn text(n: u8) -> String {
    match n % 8 {
        0 => String::new(),
        1 => "a".into(),
        2 => "Straße ß ẞ".into(),
        3 => "日本語のテキスト".into(),
        4 => "tab\tnewline\n\"quote\" \\".into(),
        // Longer than a history row shows: cut to a prefix on a character boundary.
        5 => "é".repeat(FIELD_TEXT_BYTES_MAX / 2 + 7),
        6 => format!("x{n}"),
        _ => "0123456789".repeat(5),
    }
}

#[derive(Arbitrary, Debug)]
enum Item {
    Assistant {
        body: u8,
        thinking: Option<u8>,
    },
    Call {
        id: u8,
        name: u8,
        args: u8,
        internal: bool,
    },
}

#[derive(Arbitrary, Debug)]
enum Ev {
    User {
        inv: u8,
        text: u8,
    },
    Completion {
        inv: u8,
        items: Vec<Item>,
    },
    Result {
        inv: u8,
        call: u8,
        body: u8,
        bad_digest: bool,
    },
    Settled {
        inv: u8,
    },
    Stop {
        inv: u8,
    },
}

#[derive(Arbitrary, Debug)]
enum Op {
    Create {
        s: u8,
        other_op: bool,
    },
    Send {
        s: u8,
        op: u8,
        text: u8,
    },
    Append {
        s: u8,
        op: u8,
        events: Vec<Ev>,
    },
    Stop {
        s: u8,
        op: u8,
        inv: u8,
    },
    History {
        s: u8,
        through: Option<u8>,
        limit: u8,
        backward: bool,
    },
    Sync,
    Reopen,
}

fn sid(s: u8) -> String {
    format!("s{}", s % SESSIONS_MAX)
}

fn inv(i: u8) -> String {
    format!("i{}", i % INVOCATIONS_MAX)
}

fn digest(body: &str) -> String {
    logbook_engine::validate::sha256_digest(body.as_bytes())
}

fn event_json(e: &Ev) -> Value {
    match e {
        Ev::User { inv: i, text: t } => {
            json!({"kind": "userMessage", "invocation": inv(*i), "text": text(*t), "attachments": []})
        }
        Ev::Completion { inv: i, items } => {
            let items: Vec<Value> = items
                .iter()
                .take(4)
                .map(|it| match it {
                    Item::Assistant { body, thinking } => {
                        json!({"kind": "assistant", "body": text(*body), "thinking": thinking.map(text)})
                    }
                    Item::Call { id, name, args, internal } => json!({"kind": "toolCall",
                        "id": format!("c{}", id % 6), "name": text(*name), "arguments": text(*args), "internal": internal}),
                })
                .collect();
            json!({"kind": "modelCompletion", "invocation": inv(*i), "model": "m", "items": items, "usage": null})
        }
        Ev::Result {
            inv: i,
            call,
            body,
            bad_digest,
        } => {
            let b = text(*body);
            let d = if *bad_digest {
                digest("other")
            } else {
                digest(&b)
            };
            json!({"kind": "toolResult", "invocation": inv(*i), "toolCallId": format!("c{}", call % 6),
                   "status": "ok", "body": b, "raw": {"k": [1, 2.50]}, "parts": [], "bytes": b.len(), "digest": d})
        }
        Ev::Settled { inv: i } => {
            json!({"kind": "turnSettled", "invocation": inv(*i), "outcome": "completed"})
        }
        Ev::Stop { inv: i } => json!({"kind": "stopRequested", "invocation": inv(*i)}),
    }
}

/// A row as the contract says history shows it.
#[derive(Clone, Debug)]
struct MRow {
    position: (u64, u32),
    hidden: bool,
    wire: Value,
}

#[derive(Default)]
struct MSession {
    revision: u64,
    /// operation -> (mutation + canonical parameters, result as JSON)
    receipts: HashMap<String, (String, Value)>,
    /// invocation -> settled
    invocations: HashMap<String, bool>,
    internal_calls: HashSet<String>,
    rows: Vec<MRow>,
}

fn field(t: &str) -> Value {
    let mut cut = t.len().min(FIELD_TEXT_BYTES_MAX);
    while !t.is_char_boundary(cut) {
        cut -= 1;
    }
    json!({"text": &t[..cut], "bytes": t.len(), "truncated": cut < t.len()})
}

impl MSession {
    /// Applies one (valid) event: rows first (hidden from the calls seen so far), then state.
    fn apply(&mut self, e: &Value) {
        self.revision += 1;
        let seq = self.revision;
        let s = |k: &str| e[k].as_str().expect("string field").to_owned();
        let row = |item: u32, kind: &str, fields: Value, hidden: bool| MRow {
            position: (seq, item),
            hidden,
            wire: json!({"position": {"sourceSequence": seq, "itemIndex": item}, "kind": kind,
                         "invocation": e["invocation"], "fields": fields}),
        };
        match e["kind"].as_str().expect("kind") {
            "userMessage" => {
                self.rows
                    .push(row(0, "user", json!({"body": field(&s("text"))}), false));
                self.invocations.insert(s("invocation"), false);
            }
            "modelCompletion" => {
                let items = e["items"].as_array().expect("items");
                for (i, it) in items.iter().enumerate() {
                    let t = |k: &str| it[k].as_str().unwrap_or("").to_owned();
                    if it["kind"] == "assistant" {
                        let f =
                            json!({"body": field(&t("body")), "thinking": field(&t("thinking"))});
                        self.rows.push(row(i as u32, "assistant", f, false));
                    } else {
                        let internal = it["internal"].as_bool().unwrap_or(false);
                        let f =
                            json!({"name": field(&t("name")), "arguments": field(&t("arguments"))});
                        self.rows.push(row(i as u32, "toolCall", f, internal));
                    }
                }
                for it in items {
                    if it["kind"] == "toolCall" && it["internal"] == true {
                        self.internal_calls
                            .insert(it["id"].as_str().expect("id").to_owned());
                    }
                }
            }
            "toolResult" => {
                let hidden = self.internal_calls.contains(&s("toolCallId"));
                self.rows.push(row(
                    0,
                    "toolResult",
                    json!({"body": field(&s("body"))}),
                    hidden,
                ));
            }
            "turnSettled" => {
                if let Some(settled) = self.invocations.get_mut(&s("invocation")) {
                    *settled = true;
                }
            }
            _ => {}
        }
    }
}

#[derive(Default)]
struct Model {
    sessions: BTreeMap<String, MSession>,
    /// createSession receipts: operation -> sessionId
    creates: HashMap<String, String>,
}

fn kind_of(r: &Result<Value, EngineError>) -> Result<&Value, ErrorKind> {
    r.as_ref().map_err(|e| e.kind())
}

struct World {
    dir: PathBuf,
    root: Option<Root>,
}

impl World {
    fn root(&self) -> &Root {
        self.root.as_ref().expect("open")
    }
    fn reopen(&mut self) {
        drop(self.root.take());
        self.root = Some(Root::open_with(&self.dir, options()).expect("reopen"));
    }
}

fn options() -> RootOptions {
    RootOptions {
        durability: Durability::NoSyncBulkImport,
        ..RootOptions::default()
    }
}

/// Receipt rule of the contract: a repeat with the same parameters returns the receipt, other
/// parameters conflict; None means "apply it".
fn receipt(m: &MSession, op: &str, canon: &str) -> Option<Result<Value, ErrorKind>> {
    m.receipts.get(op).map(|(c, r)| {
        if c == canon {
            Ok(r.clone())
        } else {
            Err(ErrorKind::Conflict)
        }
    })
}

fn step(w: &mut World, model: &mut Model, op: &Op) {
    match op {
        Op::Create { s, other_op } => {
            let id = sid(*s);
            let operation = if *other_op {
                format!("alt-{id}")
            } else {
                format!("create-{id}")
            };
            let got = w
                .root()
                .create_session(CreateSessionParams {
                    session_id: Some(id.clone()),
                    workspace: None,
                    operation: operation.clone(),
                })
                .map(|r| json!(r.session_id));
            let want = match model.creates.get(&operation) {
                Some(prev) if *prev == id => Ok(json!(id)),
                Some(_) => Err(ErrorKind::Conflict),
                None if model.sessions.contains_key(&id) => Err(ErrorKind::Conflict),
                None => {
                    model.creates.insert(operation, id.clone());
                    let m = MSession {
                        revision: 1, // sessionCreated
                        ..MSession::default()
                    };
                    model.sessions.insert(id.clone(), m);
                    Ok(json!(id))
                }
            };
            assert_eq!(kind_of(&got), want.as_ref().map_err(|k| *k), "{op:?}");
        }
        Op::Send { s, op: o, text: t } => {
            let id = sid(*s);
            let operation = format!("op{}", o % OPERATIONS_MAX);
            let body = text(*t);
            let got = w
                .root()
                .send(SendParams {
                    session_id: id.clone(),
                    operation: operation.clone(),
                    text: body.clone(),
                    attachments: vec![],
                })
                .map(|r| json!({"invocation": r.invocation, "sequence": r.sequence}));
            let Some(m) = model.sessions.get_mut(&id) else {
                assert_eq!(kind_of(&got).err(), Some(ErrorKind::NotFound), "{op:?}");
                return;
            };
            let canon = format!("send {body}");
            if let Some(want) = receipt(m, &operation, &canon) {
                assert_eq!(kind_of(&got), want.as_ref().map_err(|k| *k), "{op:?}");
                return;
            }
            let got = got.unwrap_or_else(|e| panic!("{op:?}: {e}"));
            assert_eq!(got["sequence"], m.revision + 1, "{op:?}");
            let invocation = got["invocation"].as_str().expect("invocation").to_owned();
            assert!(!m.invocations.contains_key(&invocation), "fresh invocation");
            m.apply(&json!({"kind": "userMessage", "invocation": invocation, "text": body}));
            m.receipts.insert(operation, (canon, got));
        }
        Op::Append { s, op: o, events } => {
            let id = sid(*s);
            let operation = format!("op{}", o % OPERATIONS_MAX);
            let list: Vec<Value> = events.iter().take(8).map(event_json).collect();
            let parsed: Vec<Event> =
                serde_json::from_value(Value::Array(list.clone())).expect("events parse");
            let got = w
                .root()
                .append(AppendParams {
                    session_id: id.clone(),
                    operation: operation.clone(),
                    events: parsed,
                })
                .map(|r| json!({"first": r.first_sequence, "last": r.last_sequence}));
            // Structure first, then the Session, then the receipt, then the state.
            let bad = list.is_empty()
                || events.iter().take(8).any(|e| {
                    matches!(
                        e,
                        Ev::Result {
                            bad_digest: true,
                            ..
                        }
                    )
                });
            if bad {
                assert_eq!(
                    kind_of(&got).err(),
                    Some(ErrorKind::InvalidArgument),
                    "{op:?}"
                );
                return;
            }
            let Some(m) = model.sessions.get_mut(&id) else {
                assert_eq!(kind_of(&got).err(), Some(ErrorKind::NotFound), "{op:?}");
                return;
            };
            let canon = format!("append {}", Value::Array(list.clone()));
            if let Some(want) = receipt(m, &operation, &canon) {
                assert_eq!(kind_of(&got), want.as_ref().map_err(|k| *k), "{op:?}");
                return;
            }
            let mut seen = HashSet::new();
            let dup = list.iter().filter(|e| e["kind"] == "userMessage").any(|e| {
                let i = e["invocation"].as_str().expect("invocation").to_owned();
                m.invocations.contains_key(&i) || !seen.insert(i)
            });
            if dup {
                assert_eq!(kind_of(&got).err(), Some(ErrorKind::Conflict), "{op:?}");
                return;
            }
            let want = json!({"first": m.revision + 1, "last": m.revision + list.len() as u64});
            assert_eq!(kind_of(&got), Ok(&want), "{op:?}");
            for e in &list {
                m.apply(e);
            }
            m.receipts.insert(operation, (canon, want));
        }
        Op::Stop { s, op: o, inv: i } => {
            let id = sid(*s);
            let operation = format!("op{}", o % OPERATIONS_MAX);
            // Name a known invocation most of the time (sends make unpredictable ones).
            let known: Vec<String> = model
                .sessions
                .get(&id)
                .map(|m| {
                    let mut v: Vec<String> = m.invocations.keys().cloned().collect();
                    v.sort();
                    v
                })
                .unwrap_or_default();
            let invocation = if known.is_empty() || i % 5 == 4 {
                inv(*i)
            } else {
                known[usize::from(*i) % known.len()].clone()
            };
            let got = w
                .root()
                .stop(StopParams {
                    session_id: id.clone(),
                    operation: operation.clone(),
                    invocation: invocation.clone(),
                })
                .map(|r| json!(r.sequence));
            let Some(m) = model.sessions.get_mut(&id) else {
                assert_eq!(kind_of(&got).err(), Some(ErrorKind::NotFound), "{op:?}");
                return;
            };
            let canon = format!("stop {invocation}");
            if let Some(want) = receipt(m, &operation, &canon) {
                assert_eq!(kind_of(&got), want.as_ref().map_err(|k| *k), "{op:?}");
                return;
            }
            let want = match m.invocations.get(&invocation) {
                None => Err(ErrorKind::NotFound),
                Some(true) => Err(ErrorKind::Conflict),
                Some(false) => Ok(json!(m.revision + 1)),
            };
            assert_eq!(
                kind_of(&got),
                want.as_ref().map_err(|k| *k),
                "{op:?} {invocation}"
            );
            if let Ok(r) = want {
                m.apply(&json!({"kind": "stopRequested", "invocation": invocation}));
                m.receipts.insert(operation, (canon, r));
            }
        }
        Op::History {
            s,
            through,
            limit,
            backward,
        } => {
            let id = sid(*s);
            let Some(m) = model.sessions.get(&id) else {
                let got = w.root().history(HistoryParams {
                    session_id: id,
                    through: None,
                    after: None,
                    limit: None,
                    anchor: None,
                    direction: None,
                });
                assert_eq!(got.err().map(|e| e.kind()), Some(ErrorKind::NotFound));
                return;
            };
            let fence = through.map(|t| u64::from(t) % (m.revision + 2));
            let limit = u32::from(limit % 16) + 1;
            let direction = if *backward {
                Direction::Backward
            } else {
                Direction::Forward
            };
            let mut after = None;
            let mut rows = Vec::new();
            let mut pinned = fence;
            loop {
                let got = w.root().history(HistoryParams {
                    session_id: id.clone(),
                    through: pinned,
                    after: after.clone(),
                    limit: Some(limit),
                    anchor: None,
                    direction: Some(direction),
                });
                if fence.is_some_and(|f| f > m.revision) {
                    assert_eq!(
                        got.err().map(|e| e.kind()),
                        Some(ErrorKind::InvalidArgument)
                    );
                    return;
                }
                let page = got.unwrap_or_else(|e| panic!("{op:?}: {e}"));
                assert_eq!(page.through, fence.unwrap_or(m.revision), "{op:?}");
                assert!(page.rows.len() <= limit as usize);
                pinned = Some(page.through);
                rows.extend(
                    page.rows
                        .iter()
                        .map(|r| serde_json::to_value(r).expect("row")),
                );
                match page.next_after {
                    Some(a) => after = Some(a),
                    None => break,
                }
            }
            let f = pinned.expect("a page was read");
            let mut want: Vec<Value> = m
                .rows
                .iter()
                .filter(|r| !r.hidden && r.position.0 <= f)
                .map(|r| r.wire.clone())
                .collect();
            if *backward {
                want.reverse();
            }
            assert_eq!(
                rows, want,
                "history of {id} under {f}, {direction:?}, limit {limit}"
            );
        }
        Op::Sync => w.root().sync_indexes().expect("sync indexes"),
        Op::Reopen => {
            w.reopen();
            let listed: Vec<String> = w
                .root()
                .sessions()
                .expect("sessions")
                .into_iter()
                .map(|s| s.session_id)
                .collect();
            let want: Vec<String> = model.sessions.keys().cloned().collect();
            assert_eq!(listed, want);
        }
    }
    // Revisions follow the model after every step.
    for (id, m) in &model.sessions {
        assert_eq!(
            w.root().revision(id).expect("revision"),
            m.revision,
            "{id} after {op:?}"
        );
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .expect("temporary directory");
    let dir = base.path().join("root");
    Root::init(&dir).expect("init");
    let mut w = World {
        root: Some(Root::open_with(&dir, options()).expect("open")),
        dir,
    };
    let mut model = Model::default();
    for op in ops.iter().take(64) {
        step(&mut w, &mut model, op);
    }
});
