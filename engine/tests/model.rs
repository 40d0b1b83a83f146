//! Random operation sequences against a plain in-memory model. Every history page under every
//! fence, in both directions and with several limits, must equal the model's.
//! Reproduce a failure with LOGBOOK_SEED=<seed printed below>.
mod common;
use common::*;
use logbook_engine::*;
use std::collections::{BTreeMap, BTreeSet};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() {
            None
        } else {
            Some(&v[self.below(v.len() as u64) as usize])
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
struct MRow {
    position: Position,
    kind: RowKind,
    invocation: String,
    fields: Vec<(String, String)>,
    hidden: bool,
}

#[derive(Default)]
struct Model {
    events: Vec<Event>, // index i = sequence i + 1
    rows: Vec<MRow>,
    internal: BTreeSet<String>,
    invocations: BTreeMap<String, (u64, bool)>,
    interactions: BTreeMap<String, (u64, bool)>,
    calls: Vec<String>,
    receipts: BTreeMap<String, (String, AppendResult)>,
}

impl Model {
    fn push(&mut self, e: Event) {
        let seq = self.events.len() as u64 + 1;
        let row = |item: u32, kind, inv: &str, fields: Vec<(&str, &str)>, hidden| MRow {
            position: Position {
                source_sequence: seq,
                item_index: item,
            },
            kind,
            invocation: inv.to_owned(),
            fields: fields
                .into_iter()
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect(),
            hidden,
        };
        match &e {
            Event::UserMessage(m) => {
                self.rows.push(row(
                    0,
                    RowKind::User,
                    &m.invocation,
                    vec![("body", &m.text)],
                    false,
                ));
                self.invocations.insert(m.invocation.clone(), (seq, false));
            }
            Event::ModelCompletion(c) => {
                for (i, it) in c.items.iter().enumerate() {
                    match it {
                        Item::Assistant { body, thinking } => self.rows.push(row(
                            i as u32,
                            RowKind::Assistant,
                            &c.invocation,
                            vec![
                                ("body", body),
                                ("thinking", thinking.as_deref().unwrap_or("")),
                            ],
                            false,
                        )),
                        Item::ToolCall {
                            id,
                            name,
                            arguments,
                            internal,
                        } => {
                            self.rows.push(row(
                                i as u32,
                                RowKind::ToolCall,
                                &c.invocation,
                                vec![("arguments", arguments), ("name", name)],
                                *internal,
                            ));
                            if *internal {
                                self.internal.insert(id.clone());
                            }
                            self.calls.push(id.clone());
                        }
                    }
                }
            }
            Event::ToolResult(r) => {
                let hidden = self.internal.contains(&r.tool_call_id);
                self.rows.push(row(
                    0,
                    RowKind::ToolResult,
                    &r.invocation,
                    vec![("body", &r.body)],
                    hidden,
                ));
            }
            Event::TurnSettled(t) => {
                if let Some(v) = self.invocations.get_mut(&t.invocation) {
                    v.1 = true;
                }
            }
            Event::InteractionRequested(i) => {
                self.rows.push(row(
                    0,
                    RowKind::Interaction,
                    &i.invocation,
                    vec![("body", &i.prompt)],
                    false,
                ));
                self.interactions
                    .insert(i.interaction_id.clone(), (seq, false));
            }
            Event::InteractionResolved(r) => {
                if let Some(v) = self.interactions.get_mut(&r.interaction_id) {
                    v.1 = true;
                }
            }
            _ => {}
        }
        self.events.push(e);
    }

    fn revision(&self) -> u64 {
        self.events.len() as u64
    }

    /// The pages the model expects, anchored nowhere.
    fn pages(&self, through: u64, limit: usize, dir: Direction) -> Vec<Vec<MRow>> {
        let mut vis: Vec<MRow> = self
            .rows
            .iter()
            .filter(|r| r.position.source_sequence <= through && !r.hidden)
            .cloned()
            .collect();
        if dir == Direction::Backward {
            vis.reverse();
        }
        if vis.is_empty() {
            return vec![vec![]];
        }
        vis.chunks(limit).map(|c| c.to_vec()).collect()
    }
}

fn as_model(r: &Row) -> MRow {
    MRow {
        position: r.position,
        kind: r.kind,
        invocation: r.invocation.clone(),
        fields: r
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), v.text.clone()))
            .collect(),
        hidden: false,
    }
}

fn check_fence(root: &Root, m: &Model, through: u64) {
    for dir in [Direction::Forward, Direction::Backward] {
        for limit in [1usize, 3, 128] {
            let want = m.pages(through, limit, dir);
            let mut after = None;
            for (i, w) in want.iter().enumerate() {
                let p = hist(root, "s", Some(through), after.clone(), limit as u32, dir);
                let got: Vec<MRow> = p.rows.iter().map(as_model).collect();
                assert_eq!(&got, w, "page {i} through {through} {dir:?} limit {limit}");
                assert_eq!(
                    p.next_after.is_none(),
                    i + 1 == want.len(),
                    "end marker, page {i} through {through} {dir:?}"
                );
                after = p.next_after;
            }
        }
    }
}

/// Pages opened at each row (hidden ones too) must show it, then only visible rows.
fn check_anchors(root: &Root, m: &Model, through: u64) {
    let under: Vec<&MRow> = m
        .rows
        .iter()
        .filter(|r| r.position.source_sequence <= through)
        .collect();
    for (i, a) in under.iter().enumerate() {
        for dir in [Direction::Forward, Direction::Backward] {
            let want: Vec<MRow> = match dir {
                Direction::Forward => under[i..]
                    .iter()
                    .enumerate()
                    .filter(|(j, r)| *j == 0 || !r.hidden)
                    .map(|(_, r)| (*r).clone())
                    .take(4)
                    .collect(),
                Direction::Backward => under[..=i]
                    .iter()
                    .rev()
                    .enumerate()
                    .filter(|(j, r)| *j == 0 || !r.hidden)
                    .map(|(_, r)| (*r).clone())
                    .take(4)
                    .collect(),
            };
            let p = root
                .history(HistoryParams {
                    session_id: "s".into(),
                    through: Some(through),
                    after: None,
                    limit: Some(4),
                    anchor: Some(Anchor::Row {
                        position: a.position,
                        field: None,
                    }),
                    direction: Some(dir),
                })
                .expect("anchored");
            let got: Vec<MRow> = p.rows.iter().map(as_model).collect();
            let want: Vec<MRow> = want
                .into_iter()
                .map(|mut r| {
                    r.hidden = false;
                    r
                })
                .collect();
            assert_eq!(
                got, want,
                "anchor {:?} {dir:?} through {through}",
                a.position
            );
        }
    }
}

fn text(rng: &mut Rng) -> String {
    let words = ["alpha", "βeta", "", "gamma delta", "é", "x"];
    (0..rng.below(3) + 1)
        .map(|_| *rng.pick(&words).expect("words"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn random_operations_match_the_model() {
    let seed = std::env::var("LOGBOOK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("time")
                .as_nanos() as u64
                | 1
        });
    println!("model test seed: LOGBOOK_SEED={seed}");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let mut root = root_at(&dir);
    create(&root, "s");
    let mut m = Model::default();
    m.push(Event::SessionCreated(SessionCreated {
        workspace: Some("/work/space".into()),
        branch: None,
    }));
    let mut op = 0u64;
    for step in 0..220 {
        op += 1;
        let operation = format!("op-{op}");
        let invs: Vec<String> = m.invocations.keys().cloned().collect();
        match rng.below(10) {
            0 | 1 => {
                let t = text(&mut rng);
                let r = root
                    .send(SendParams {
                        session_id: "s".into(),
                        operation: operation.clone(),
                        text: t.clone(),
                        attachments: vec![],
                    })
                    .expect("send");
                assert_eq!(r.sequence, m.revision() + 1);
                m.push(Event::UserMessage(UserMessage {
                    invocation: r.invocation,
                    text: t,
                    attachments: vec![],
                }));
            }
            2 | 3 => {
                let Some(inv) = rng.pick(&invs).cloned() else {
                    continue;
                };
                let mut items = Vec::new();
                for _ in 0..rng.below(4) {
                    if rng.below(2) == 0 {
                        items.push(Item::Assistant {
                            body: text(&mut rng),
                            thinking: (rng.below(2) == 0).then(|| text(&mut rng)),
                        });
                    } else {
                        items.push(Item::ToolCall {
                            id: format!("call-{op}-{}", items.len()),
                            name: text(&mut rng),
                            arguments: if rng.below(3) == 0 {
                                "{broken".into()
                            } else {
                                text(&mut rng)
                            },
                            internal: rng.below(3) == 0,
                        });
                    }
                }
                let mut evs = vec![Event::ModelCompletion(ModelCompletion {
                    invocation: inv.clone(),
                    model: "m".into(),
                    items,
                    usage: None,
                })];
                if let Some(call) = rng.pick(&m.calls).cloned() {
                    let body = text(&mut rng);
                    evs.push(Event::ToolResult(ToolResult {
                        invocation: inv.clone(),
                        tool_call_id: call,
                        status: ToolStatus::Ok,
                        digest: validate::sha256_digest(body.as_bytes()),
                        bytes: body.len() as u64,
                        body,
                        raw: RawJson::null(),
                        parts: vec![],
                    }));
                }
                let r = root
                    .append(AppendParams {
                        session_id: "s".into(),
                        operation: operation.clone(),
                        events: evs.clone(),
                    })
                    .expect("append");
                assert_eq!(r.first_sequence, m.revision() + 1);
                for e in evs.clone() {
                    m.push(e);
                }
                m.receipts.insert(
                    operation.clone(),
                    (serde_json::to_string(&evs).expect("json"), r),
                );
            }
            4 => {
                let Some(inv) = rng.pick(&invs).cloned() else {
                    continue;
                };
                let settled = m.invocations[&inv].1;
                let evs = vec![Event::TurnSettled(TurnSettled {
                    invocation: inv.clone(),
                    outcome: Outcome::Completed,
                })];
                let r = root
                    .append(AppendParams {
                        session_id: "s".into(),
                        operation,
                        events: evs.clone(),
                    })
                    .expect("settle");
                assert_eq!(
                    r.first_sequence,
                    m.revision() + 1,
                    "settling twice is allowed ({settled})"
                );
                m.push(evs.into_iter().next().expect("one"));
            }
            5 => {
                let Some(inv) = rng.pick(&invs).cloned() else {
                    continue;
                };
                let id = format!("q-{op}");
                let ev = Event::InteractionRequested(InteractionRequested {
                    interaction_id: id,
                    invocation: inv,
                    prompt: text(&mut rng),
                    options: RawJson::from_string("[1, 2]".into()).expect("json"),
                });
                root.append(AppendParams {
                    session_id: "s".into(),
                    operation,
                    events: vec![ev.clone()],
                })
                .expect("ask");
                m.push(ev);
            }
            6 => {
                let ids: Vec<String> = m.interactions.keys().cloned().collect();
                let Some(id) = rng.pick(&ids).cloned() else {
                    continue;
                };
                let resolved = m.interactions[&id].1;
                let response = RawJson::from_string("{\"ok\" : true}".into()).expect("json");
                let r = root.respond(RespondParams {
                    session_id: "s".into(),
                    operation,
                    interaction_id: id.clone(),
                    response: response.clone(),
                });
                if resolved {
                    assert_eq!(r.expect_err("resolved").kind(), ErrorKind::Conflict);
                } else {
                    assert_eq!(r.expect("respond").sequence, m.revision() + 1);
                    m.push(Event::InteractionResolved(InteractionResolved {
                        interaction_id: id,
                        response,
                    }));
                }
            }
            7 => {
                let inv = if rng.below(4) == 0 {
                    "unknown".to_owned()
                } else {
                    rng.pick(&invs).cloned().unwrap_or_default()
                };
                if inv.is_empty() {
                    continue;
                }
                let r = root.stop(StopParams {
                    session_id: "s".into(),
                    operation,
                    invocation: inv.clone(),
                });
                match m.invocations.get(&inv) {
                    None => assert_eq!(r.expect_err("unknown").kind(), ErrorKind::NotFound),
                    Some((_, true)) => {
                        assert_eq!(r.expect_err("settled").kind(), ErrorKind::Conflict)
                    }
                    Some(_) => {
                        assert_eq!(r.expect("stop").sequence, m.revision() + 1);
                        m.push(Event::StopRequested(StopRequested { invocation: inv }));
                    }
                }
            }
            8 => {
                let keys: Vec<String> = m.receipts.keys().cloned().collect();
                let Some(k) = rng.pick(&keys).cloned() else {
                    continue;
                };
                let (json, result) = m.receipts[&k].clone();
                let evs: Vec<Event> = serde_json::from_str(&json).expect("json");
                let again = root
                    .append(AppendParams {
                        session_id: "s".into(),
                        operation: k,
                        events: evs,
                    })
                    .expect("repeat");
                assert_eq!(again, result, "a repeat returns the original result");
            }
            _ => {
                if rng.below(2) == 0 {
                    root.sync_indexes().expect("sync");
                }
                drop(root);
                root = Root::open(&dir).expect("reopen");
            }
        }
        assert_eq!(
            root.revision("s").expect("rev"),
            m.revision(),
            "step {step}"
        );
        if step % 20 == 0 {
            check_fence(&root, &m, m.revision());
        }
    }
    for through in 0..=m.revision() {
        check_fence(&root, &m, through);
    }
    check_anchors(&root, &m, m.revision());
    check_anchors(&root, &m, m.revision() / 2);
    // Derived state equals the model's.
    let w = root
        .watch(WatchParams {
            session_id: "s".into(),
            after: Some(m.revision()),
            timeout_ms: Some(0),
        })
        .expect("watch");
    let mut queue: Vec<(u64, String)> = m
        .invocations
        .iter()
        .filter(|(_, v)| !v.1)
        .map(|(k, v)| (v.0, k.clone()))
        .collect();
    queue.sort();
    assert_eq!(
        w.queue
            .iter()
            .map(|q| (q.sequence, q.invocation.clone()))
            .collect::<Vec<_>>(),
        queue
    );
    let mut pending: Vec<(u64, String)> = m
        .interactions
        .iter()
        .filter(|(_, v)| !v.1)
        .map(|(k, v)| (v.0, k.clone()))
        .collect();
    pending.sort();
    assert_eq!(
        w.pending_interactions
            .iter()
            .map(|i| (i.sequence, i.interaction_id.clone()))
            .collect::<Vec<_>>(),
        pending
    );
    // Every event reads back as the model has it.
    for (i, e) in m.events.iter().enumerate() {
        assert_eq!(
            &root.read_event("s", i as u64 + 1).expect("event"),
            e,
            "event {}",
            i + 1
        );
    }
}
