//! Readers paging history on several threads while one writer appends, checked against a
//! model computed for each fence.
//!
//! The writer's batches are fixed before the threads start, so the sequence of every event
//! and the rows it publishes are known in advance: the model for fence F is "every row of the
//! events 1..=F". A reader pins the fence of its first page, follows the cursors to the end
//! (forward or backward, with a random page size) and must see exactly the model's rows for
//! that fence, and the fence must fall between whole batches. Midway the writer appends two
//! 33 MiB tool results (rows hidden: they answer internal calls), which rolls the 64 MiB
//! segment, so the first segment is sealed and compressed in the background while readers are
//! reading from it. (The engine has no segment-size option; small segments would seal more
//! often.)
#![allow(clippy::unwrap_used)]

use logbook_engine::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const BATCHES: usize = 240;
const BIG_BODY_BYTES: usize = 33 << 20;
const BIG_AT: [usize; 2] = [80, 120];
const READERS: u64 = 3;

/// A row as the model predicts it: position, kind, the first field's text.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MRow {
    sequence: u64,
    item: u32,
    kind: &'static str,
    text: String,
}

struct Plan {
    batches: Vec<Vec<Event>>,
    /// Last sequence of each batch (sequence 1 is sessionCreated).
    ends: BTreeSet<u64>,
    /// Visible rows in position order.
    rows: Vec<MRow>,
}

fn digest(body: &str) -> String {
    validate::sha256_digest(body.as_bytes())
}

fn plan(seed: u64) -> Plan {
    let mut rng = seed;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut batches = Vec::new();
    let mut ends = BTreeSet::from([1]);
    let mut rows = Vec::new();
    let mut seq = 1u64;
    for b in 0..BATCHES {
        let inv = format!("inv-{b}");
        let mut evs = Vec::new();
        let user = format!("question {b}");
        evs.push(
            json!({"kind": "userMessage", "invocation": inv, "text": user, "attachments": []}),
        );
        let big = BIG_AT.contains(&b);
        let items = if big { 1 } else { 1 + next() % 3 };
        let mut item_vals = Vec::new();
        for i in 0..items {
            item_vals.push(
                json!({"kind": "assistant", "body": format!("answer {b}.{i}"), "thinking": null}),
            );
        }
        item_vals.push(
            json!({"kind": "toolCall", "id": format!("c{b}"), "name": format!("tool{b}"),
                              "arguments": "{}", "internal": big}),
        );
        evs.push(json!({"kind": "modelCompletion", "invocation": inv, "model": "m", "items": item_vals, "usage": null}));
        let body = if big {
            "z".repeat(BIG_BODY_BYTES)
        } else {
            format!("result {b}")
        };
        evs.push(json!({"kind": "toolResult", "invocation": inv, "toolCallId": format!("c{b}"), "status": "ok",
                        "body": body, "raw": null, "parts": [], "bytes": body.len(), "digest": digest(&body)}));
        if next().is_multiple_of(2) {
            evs.push(json!({"kind": "turnSettled", "invocation": inv, "outcome": "completed"}));
        }
        // Rows, as the contract publishes them.
        rows.push(MRow {
            sequence: seq + 1,
            item: 0,
            kind: "user",
            text: user,
        });
        for i in 0..items {
            rows.push(MRow {
                sequence: seq + 2,
                item: i as u32,
                kind: "assistant",
                text: format!("answer {b}.{i}"),
            });
        }
        if !big {
            rows.push(MRow {
                sequence: seq + 2,
                item: items as u32,
                kind: "toolCall",
                text: format!("tool{b}"),
            });
            rows.push(MRow {
                sequence: seq + 3,
                item: 0,
                kind: "toolResult",
                text: body,
            });
        }
        seq += evs.len() as u64;
        ends.insert(seq);
        batches.push(serde_json::from_value(Value::Array(evs)).unwrap());
    }
    Plan {
        batches,
        ends,
        rows,
    }
}

fn model_rows(plan: &Plan, fence: u64, direction: Direction) -> Vec<MRow> {
    let mut v: Vec<MRow> = plan
        .rows
        .iter()
        .filter(|r| r.sequence <= fence)
        .cloned()
        .collect();
    if direction == Direction::Backward {
        v.reverse();
    }
    v
}

fn seen(row: &Row) -> MRow {
    let kind = match row.kind {
        RowKind::User => "user",
        RowKind::Assistant => "assistant",
        RowKind::ToolCall => "toolCall",
        RowKind::ToolResult => "toolResult",
        RowKind::Interaction => "interaction",
    };
    let field = if kind == "toolCall" { "name" } else { "body" };
    MRow {
        sequence: row.position.source_sequence,
        item: row.position.item_index,
        kind,
        text: row.fields[field].text.clone(),
    }
}

#[test]
fn pages_under_a_fence_equal_the_model_while_a_writer_appends_and_seals() {
    let seed = std::env::var("LOGBOOK_CONCURRENCY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("concurrency: seed {seed} (LOGBOOK_CONCURRENCY_SEED replays)");
    let plan = Arc::new(plan(seed));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("root");
    let root = Arc::new(Root::open_or_init(&dir).unwrap());
    root.create_session(CreateSessionParams {
        session_id: Some("s".into()),
        workspace: None,
        operation: "create".into(),
    })
    .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let pages = Arc::new(AtomicU64::new(0));
    let writer = {
        let (root, plan, done) = (Arc::clone(&root), Arc::clone(&plan), Arc::clone(&done));
        std::thread::spawn(move || {
            for (b, events) in plan.batches.iter().enumerate() {
                root.append(AppendParams {
                    session_id: "s".into(),
                    operation: format!("batch-{b}"),
                    events: events.clone(),
                })
                .unwrap();
            }
            done.store(true, Ordering::Release);
        })
    };
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (root, plan, done, pages) = (
                Arc::clone(&root),
                Arc::clone(&plan),
                Arc::clone(&done),
                Arc::clone(&pages),
            );
            std::thread::spawn(move || {
                let mut rng = seed.wrapping_mul(r + 7) | 1;
                let mut fences = BTreeSet::new();
                let mut rounds = 0;
                // Keep reading until the writer is done, and a few rounds after.
                while !done.load(Ordering::Acquire) || rounds < 3 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let direction = if rng.is_multiple_of(2) {
                        Direction::Forward
                    } else {
                        Direction::Backward
                    };
                    let limit = (1 + (rng >> 8) % 64) as u32;
                    let mut got = Vec::new();
                    let mut through = None;
                    let mut after = None;
                    loop {
                        let page = root
                            .history(HistoryParams {
                                session_id: "s".into(),
                                through,
                                after,
                                limit: Some(limit),
                                anchor: None,
                                direction: Some(direction),
                            })
                            .unwrap();
                        pages.fetch_add(1, Ordering::Relaxed);
                        assert!(page.rows.len() <= limit as usize);
                        if let Some(t) = through {
                            assert_eq!(page.through, t, "the fence stays pinned");
                        }
                        through = Some(page.through);
                        got.extend(page.rows.iter().map(seen));
                        match page.next_after {
                            Some(a) => after = Some(a),
                            None => break,
                        }
                    }
                    let fence = through.unwrap();
                    assert!(plan.ends.contains(&fence), "fence {fence} splits a batch");
                    assert_eq!(
                        got,
                        model_rows(&plan, fence, direction),
                        "rows under fence {fence}, {direction:?}, limit {limit}"
                    );
                    fences.insert(fence);
                    rounds += 1;
                }
                fences.len()
            })
        })
        .collect();
    writer.join().expect("writer");
    let mut distinct = 0;
    for r in readers {
        distinct += r.join().expect("reader");
    }
    assert_eq!(
        root.revision("s").unwrap(),
        *plan.ends.iter().last().unwrap()
    );
    // Closing waits for background sealing.
    drop(Arc::try_unwrap(root).expect("threads are done"));
    let sealed = std::fs::read_dir(dir.join("sessions/s/log"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".sealed")
        })
        .count();
    println!(
        "concurrency: {} pages read under {distinct} distinct fences (summed over readers); {sealed} sealed segment(s)",
        pages.load(Ordering::Relaxed)
    );
    assert!(
        distinct >= READERS as usize * 2,
        "readers overlapped the writer"
    );
    assert!(sealed >= 1, "a segment was sealed during the run");
}
