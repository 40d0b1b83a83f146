#![allow(clippy::unwrap_used)]
//! Mutations are whole or absent across failures of their own later steps: createSession
//! and send under a descriptor limit that file watches push the server against. Every
//! Session the Root lists afterwards is whole, and `verify` finds nothing wrong.

mod common;
use common::*;
use serde_json::{json, Value};
use std::process::Command;

/// Sessions tried under the limit (each stays open after its send, holding descriptors).
const SESSIONS_TRIED: usize = 120;

#[test]
fn create_session_failing_under_a_descriptor_limit_leaves_no_broken_session() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let workspace = tmp.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let mut answered = Vec::new();
    let (mut failed_creates, mut failed_sends) = (0, 0);
    {
        let mut s = Server::start_with_descriptor_limit(&root, 40);
        for i in 0..SESSIONS_TRIED {
            let id = format!("s{i:03}");
            let params = json!({"sessionId": id, "workspace": workspace.to_str().unwrap(),
                                "operation": format!("c-{id}")});
            let rid = s.request("createSession", params.clone());
            let a = s.answer(rid);
            if a.get("error").is_some() {
                failed_creates += 1;
                // A retry answers the same way the Root now stands: success only when whole.
                let rid = s.request("createSession", params);
                let retry = s.answer(rid);
                if retry.get("result").is_some() {
                    answered.push((id, false));
                }
                continue;
            }
            let send = json!({"sessionId": id, "text": format!("hello {id}"), "attachments": [],
                              "operation": format!("m-{id}")});
            let rid = s.request("send", send);
            let sent = s.answer(rid).get("result").is_some();
            failed_sends += usize::from(!sent);
            if !sent {
                // Opening a Session needs more descriptors than are left: take the rest a
                // few at a time (file watches hold theirs), so that creations meet the limit.
                let held = answered.iter().find(|(_, sent)| *sent);
                if let Some((open, _)) = held {
                    let open = open.clone();
                    for _ in 0..8 {
                        let rid =
                            s.request("watchFilesOpen", json!({"sessionId": open, "path": null}));
                        if s.answer(rid).get("error").is_some() {
                            break;
                        }
                    }
                }
            }
            answered.push((id, sent));
        }
        s.finish();
    }
    // The Root gives idle Sessions back when descriptors run out, so refusals are rare now;
    // those that happen (the file watches hold theirs) must leave nothing broken.
    println!("under the limit: {failed_creates} createSession and {failed_sends} send refused");
    // Restarted without the limit: everything listed is whole.
    let mut s = Server::start(&root);
    let listed = s.ok("sessions", json!({"limit": 1024}));
    assert!(listed["nextAfter"].is_null());
    let listed: Vec<&Value> = listed["sessions"].as_array().unwrap().iter().collect();
    for l in &listed {
        assert!(
            l.get("damage").is_none(),
            "a listed Session is damaged: {l}"
        );
        let id = l["sessionId"].as_str().unwrap();
        let h = s.ok("history", json!({"sessionId": id}));
        assert!(h["rows"].is_array());
    }
    for (id, sent) in &answered {
        let rev = listed
            .iter()
            .find(|l| l["sessionId"] == id.as_str())
            .unwrap_or_else(|| panic!("answered Session {id} is missing"))["revision"]
            .as_u64()
            .unwrap();
        assert_eq!(
            rev,
            1 + u64::from(*sent),
            "Session {id}: its send lost or doubled"
        );
    }
    s.finish();
    let out = Command::new(bin())
        .args(["verify", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
