//! Claude Code session files: one JSON object per line, `{"type": "user" | "assistant" |
//! "summary" | "system" | ..., "sessionId", "cwd", "isSidechain", "agentId", "message":
//! {"role", "model", "id", "content", "usage", "stop_reason"}, ..}`.
//!
//! - `user` records open a Turn with their text; their `tool_result` blocks are tool results
//!   of the open Turn. `isMeta` records (text the agent injected) are skipped;
//!   `isCompactSummary` records are compaction summaries.
//! - `assistant` records are model output: `text`, `thinking` and `tool_use` blocks. One API
//!   response may be written as several records (one per block) with the same `message.id`;
//!   its `usage` is kept on the first of them only. `stop_reason: "end_turn"` settles the Turn.
//! - `summary` and `custom-title` records give the Session its title.
//! - Records with `isSidechain: true` are a sub-agent's: they go to a stream of their own
//!   per `agentId` (sub-agent files, which newer versions keep in
//!   `<sessionId>/subagents/agent-<agentId>.jsonl`, hold only such records).

use serde_json::{json, Value};

use super::convert::{text_of, Ending, StreamKey};
use super::transcript::Transcript;

/// Record types that hold no conversation (agent bookkeeping): passed over without a word.
const NOT_CONVERSATION: &[&str] = &[
    "system",
    "file-history-snapshot",
    "progress",
    "queue-operation",
    "last-prompt",
    "attachment",
];

/// Converts one record of a Claude Code session file.
pub fn record(t: &mut Transcript, line: usize, v: &Value) {
    if t.id.is_none() {
        t.id = v["sessionId"].as_str().map(str::to_owned);
    }
    let key = if v["isSidechain"] == true {
        StreamKey::Agent(v["agentId"].as_str().unwrap_or("sidechain").to_owned())
    } else {
        StreamKey::Main
    };
    match v["type"].as_str() {
        Some("user") => {
            t.stream(key.clone()).saw_cwd(v["cwd"].as_str());
            user(t, key, line, v);
        }
        Some("assistant") => {
            t.stream(key.clone()).saw_cwd(v["cwd"].as_str());
            assistant(t, key, line, v);
        }
        Some("summary") => t
            .stream(key)
            .title(line, v["summary"].as_str().unwrap_or("")),
        Some("custom-title") => t
            .stream(key)
            .title(line, v["customTitle"].as_str().unwrap_or("")),
        Some(ty) if NOT_CONVERSATION.contains(&ty) => {}
        Some(other) => t.skip(
            line,
            format!("record type {other:?} (not known to this version)"),
        ),
        None => t.skip(line, "record without a type"),
    }
}

fn user(t: &mut Transcript, key: StreamKey, line: usize, v: &Value) {
    if v["isMeta"] == true {
        t.skip(line, "text the agent injected (isMeta)");
        return;
    }
    let content = &v["message"]["content"];
    if v["isCompactSummary"] == true {
        t.stream(key).compaction(line, text_of(content));
        return;
    }
    let Value::Array(blocks) = content else {
        t.stream(key).user(line, text_of(content));
        return;
    };
    let mut text = Vec::new();
    for block in blocks {
        if block["type"] == "tool_result" {
            let id = block["tool_use_id"].as_str().unwrap_or("");
            let body = text_of(&block["content"]);
            let failed = block["is_error"].as_bool().unwrap_or(false);
            if let Err(why) =
                t.stream(key.clone())
                    .tool_result(line, id, body, failed, block.clone())
            {
                t.skip(line, why);
            }
        } else {
            text.push(block.clone());
        }
    }
    if !text.is_empty() {
        t.stream(key).user(line, text_of(&Value::Array(text)));
    }
}

fn assistant(t: &mut Transcript, key: StreamKey, line: usize, v: &Value) {
    let message = &v["message"];
    let model = message["model"].as_str().unwrap_or("imported").to_owned();
    let mut items = Vec::new();
    for block in message["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => items.push(
                json!({"kind": "assistant", "body": block["text"].as_str().unwrap_or(""), "thinking": ""}),
            ),
            Some("thinking") => items.push(
                json!({"kind": "assistant", "body": "", "thinking": block["thinking"].as_str().unwrap_or("")}),
            ),
            Some("tool_use" | "server_tool_use") => items.push(json!({
                "kind": "toolCall",
                "id": super::convert::call_id_or(line, block["id"].as_str().unwrap_or("")),
                "name": block["name"].as_str().unwrap_or("tool"),
                "arguments": block["input"].to_string(),
            })),
            // Encrypted reasoning: nothing a reader could use.
            Some("redacted_thinking") => {}
            Some(other) => t.skip(line, format!("assistant content block {other:?} (not known to this version)")),
            None => t.skip(line, "assistant content block without a type"),
        }
    }
    if let Value::String(text) = &message["content"] {
        items.push(json!({"kind": "assistant", "body": text, "thinking": ""}));
    }
    // The same response over several records: its usage once, with the first.
    let id = message["id"].as_str().map(str::to_owned);
    let stream = t.stream(key.clone());
    let first_of_response = id.is_none() || stream.last_response != id;
    let usage = &message["usage"];
    let usage = match (
        usage["input_tokens"].as_u64(),
        usage["output_tokens"].as_u64(),
    ) {
        (Some(i), Some(o)) if first_of_response => json!({"inputTokens": i, "outputTokens": o}),
        _ => Value::Null,
    };
    if id.is_some() {
        stream.last_response = id;
    }
    if let Err(why) = stream.completion(line, &model, items, usage) {
        t.skip(line, why);
        return;
    }
    if message["stop_reason"] == "end_turn" {
        t.stream(key).settle(line, Ending::Completed);
    }
}
