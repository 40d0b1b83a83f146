//! The Sessions behind the valid bundles of `bundle_import`, shared by the fuzz target and the
//! seed writer (`make_bundle_seeds`): one plain Session with content in every bundle part
//! (events, receipts, attachments, patches, diagnostics), and a fork of it with one more
//! Turn (its bundle carries a fork fence, `reset`, and a `branch`).

use logbook_engine::{
    CreateSessionParams, Durability, ExportSessionParams, ForkFrom, ForkParams, Root, RootOptions,
    SetTitleParams,
};
use serde_json::{json, Value};
use std::path::Path;

/// A small, quick Root: nothing fsynced, a small block cache.
pub fn options() -> RootOptions {
    RootOptions {
        durability: Durability::NoSyncBulkImport,
        block_cache_bytes: 1 << 20,
        ..RootOptions::default()
    }
}

fn p<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("params")
}

fn append(root: &Root, sid: &str, op: &str, events: Value) {
    root.append(p(
        json!({"sessionId": sid, "operation": op, "events": events}),
    ))
    .unwrap_or_else(|e| panic!("append {op}: {e}"));
}

fn tool_result(inv: &str, call: &str, body: &str, attachment: Option<&str>) -> Value {
    let digest = logbook_engine::validate::sha256_digest(body.as_bytes());
    let mut parts = vec![json!({"kind": "text", "text": body})];
    if let Some(d) = attachment {
        parts.push(json!({"kind": "attachment", "digest": d}));
    }
    json!({"kind": "toolResult", "invocation": inv, "toolCallId": call, "status": "ok", "body": body,
           "raw": {"b": 1, "a": [1.50, 2e3]}, "parts": parts, "bytes": body.len(), "digest": digest})
}

/// Makes the two Sessions in a new Root at `dir` and exports them: (plain, fork).
pub fn source_bundles(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let root = Root::open_or_init_with(dir, options()).expect("source root");
    let sid = root
        .create_session(CreateSessionParams {
            session_id: Some("src".into()),
            workspace: Some("/work/space".into()),
            operation: "create-src".into(),
        })
        .expect("createSession")
        .session_id;
    // hello world
    let sent = root
        .send(p(json!({"sessionId": sid, "operation": "send-1", "text": "first question about tombstone\nsecond line",
            "attachments": [{"name": "a.txt", "mimeType": "text/plain", "dataBase64": "aGVsbG8gd29ybGQ="},
                            {"name": "b.bin", "mimeType": "application/octet-stream", "dataBase64": "AAECAwQ="}]})))
        .expect("send");
    let inv = sent.invocation;
    let hello = logbook_engine::validate::sha256_digest(b"hello world");
    append(
        &root,
        &sid,
        "model-1",
        json!([{"kind": "modelCompletion", "invocation": inv, "model": "m1", "items": [
            {"kind": "assistant", "body": "Let me look. Émile's ĲSSEL", "thinking": "hmm"},
            {"kind": "toolCall", "id": "call-1", "name": "shell", "arguments": "{not json", "internal": false},
            {"kind": "toolCall", "id": "call-2", "name": "secret", "arguments": "{\"x\": 1.50}", "internal": true}
        ], "usage": null}]),
    );
    append(
        &root,
        &sid,
        "tools-1",
        json!([
            tool_result(&inv, "call-1", "exit 0: tombstone found", Some(&hello)),
            tool_result(&inv, "call-2", "internal output", None),
            {"kind": "interactionRequested", "interactionId": "ask-1", "invocation": inv, "prompt": "allow?", "options": ["y", "n"]},
            {"kind": "turnSettled", "invocation": inv, "outcome": "completed"}
        ]),
    );
    root.set_title(SetTitleParams {
        session_id: sid.clone(),
        operation: "title-1".into(),
        title: "A titled conversation".into(),
    })
    .expect("setTitle");
    root.store_patch(
        &sid,
        "patch-1",
        b"diff --git a/x b/x\n+tombstone\n".to_vec(),
    )
    .expect("storePatch");
    root.record_diagnostic(p(
        json!({"sessionId": sid, "operation": "diag-1", "kind": "modelStep",
        "invocation": inv, "cause": {"code": "provider.timeout", "message": "no answer"}}),
    ))
    .expect("recordDiagnostic");

    let revision = root.revision(&sid).expect("revision");
    let fork = root
        .fork(ForkParams {
            session_id: sid.clone(),
            operation: "fork-1".into(),
            from: ForkFrom::All,
            revision,
        })
        .expect("fork")
        .session_id;
    let sent = root
        .send(p(json!({"sessionId": fork, "operation": "send-f", "text": "in the fork",
            "attachments": [{"name": "c.txt", "mimeType": "text/plain", "dataBase64": "Zm9yaw=="}]})))
        .expect("send in the fork");
    append(
        &root,
        &fork,
        "settle-f",
        json!([{"kind": "turnSettled", "invocation": sent.invocation, "outcome": "completed"}]),
    );

    let export = |id: &str| {
        let mut out = Vec::new();
        let r = root
            .export_session(
                &ExportSessionParams {
                    session_id: id.into(),
                    through: None,
                },
                &mut out,
            )
            .expect("exportSession");
        assert_eq!(r.bytes, out.len() as u64);
        out
    };
    (export(&sid), export(&fork))
}
