//! Codex rollout files: one JSON object per line, `{"timestamp", "type": "session_meta" |
//! "response_item" | "event_msg" | "turn_context" | "compacted", "payload": {..}}` (older
//! files: a header line `{"id", "timestamp", ..}` then bare response items).
//!
//! - `session_meta` names the session (`id`), its working directory (`cwd`) and, for a
//!   sub-agent, the thread that spawned it (`source.subagent.thread_spawn.parent_thread_id`).
//! - `response_item`s are the conversation: `message` (role `user` opens a Turn unless it is
//!   context the agent injected; `assistant` is model output; `developer` instructions are
//!   skipped), `reasoning` (its summary is thinking), tool calls (`function_call`,
//!   `custom_tool_call`, `local_shell_call`, `web_search_call`) and their `*_output`.
//! - `event_msg`s are the display log: `thread_name_updated` gives the title,
//!   `task_complete` / `turn_complete` settle the Turn, `turn_aborted` settles it stopped; the
//!   rest repeats the response items and is passed over.
//! - `turn_context` names the model of the following output; `compacted` is a compaction
//!   summary.

use serde_json::{json, Value};

use super::convert::{call_id_or, text_of, Ending, StreamKey};
use super::transcript::Transcript;

/// User messages that are context the agent put in front of the model, not a prompt.
const INJECTED_PREFIXES: &[&str] = &[
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<permissions instructions>",
    "<user_shell_command>",
];

/// Converts one record of a Codex rollout file.
pub fn record(t: &mut Transcript, line: usize, v: &Value) {
    let payload = &v["payload"];
    match v["type"].as_str() {
        Some("session_meta") => {
            if t.id.is_none() {
                t.id = payload["id"].as_str().map(str::to_owned);
                t.parent = payload["source"]["subagent"]["thread_spawn"]["parent_thread_id"]
                    .as_str()
                    .map(str::to_owned);
            }
            t.stream(StreamKey::Main).saw_cwd(payload["cwd"].as_str());
        }
        Some("turn_context") => {
            let b = t.stream(StreamKey::Main);
            b.saw_cwd(payload["cwd"].as_str());
            if let Some(model) = payload["model"].as_str() {
                b.model = Some(model.to_owned());
            }
        }
        Some("response_item") => response_item(t, line, payload),
        Some("event_msg") => event(t, line, payload),
        Some("compacted") => match payload["message"].as_str() {
            Some(m) if !m.is_empty() => t.stream(StreamKey::Main).compaction(line, m.to_owned()),
            _ => t.skip(line, "compaction without a readable summary"),
        },
        Some(_) if v.get("payload").is_none() => response_item(t, line, v),
        Some(other) => t.skip(
            line,
            format!("record type {other:?} (not known to this version)"),
        ),
        // The header of an older rollout.
        None if v.get("id").is_some() && v.get("timestamp").is_some() => {
            if t.id.is_none() {
                t.id = v["id"].as_str().map(str::to_owned);
            }
        }
        None if v.get("record_type").is_some() => {}
        None => t.skip(line, "record without a type"),
    }
}

fn event(t: &mut Transcript, line: usize, payload: &Value) {
    let b = t.stream(StreamKey::Main);
    match payload["type"].as_str() {
        Some("thread_name_updated") => {
            if let Some(name) = payload["thread_name"].as_str().or(payload["name"].as_str()) {
                b.title(line, name);
            }
        }
        Some("task_complete" | "turn_complete") => b.settle(line, Ending::Completed),
        Some("turn_aborted") => b.settle(line, Ending::Stopped),
        _ => {}
    }
}

fn response_item(t: &mut Transcript, line: usize, item: &Value) {
    let model = t
        .stream(StreamKey::Main)
        .model
        .clone()
        .unwrap_or_else(|| "imported".to_owned());
    let b = t.stream(StreamKey::Main);
    let done = match item["type"].as_str() {
        Some("message") => {
            let text = text_of(&item["content"]);
            match item["role"].as_str() {
                Some("user") if INJECTED_PREFIXES.iter().any(|p| text.starts_with(p)) => {
                    Err("context the agent injected".to_owned())
                }
                Some("user") => {
                    b.user(line, text);
                    Ok(())
                }
                Some("assistant") => b.completion(
                    line,
                    &model,
                    vec![json!({"kind": "assistant", "body": text, "thinking": ""})],
                    Value::Null,
                ),
                Some("developer" | "system") => Err("instructions to the model".to_owned()),
                Some(role) => Err(format!("message of role {role:?}")),
                None => Err("message without a role".to_owned()),
            }
        }
        Some("reasoning") => {
            let thinking = text_of(&item["summary"]);
            if thinking.is_empty() {
                Ok(())
            } else {
                b.completion(
                    line,
                    &model,
                    vec![json!({"kind": "assistant", "body": "", "thinking": thinking})],
                    Value::Null,
                )
            }
        }
        Some(
            kind @ ("function_call" | "custom_tool_call" | "local_shell_call" | "web_search_call"),
        ) => {
            let id = item["call_id"]
                .as_str()
                .or(item["id"].as_str())
                .unwrap_or("");
            let name = item["name"].as_str().unwrap_or(match kind {
                "local_shell_call" => "shell",
                "web_search_call" => "web_search",
                _ => "tool",
            });
            let arguments = match (&item["arguments"], &item["input"], &item["action"]) {
                (Value::String(s), _, _) | (_, Value::String(s), _) => s.clone(),
                (_, _, action) if !action.is_null() => action.to_string(),
                (args, _, _) => args.to_string(),
            };
            b.completion(
                line,
                &model,
                vec![json!({"kind": "toolCall", "id": call_id_or(line, id), "name": name, "arguments": arguments})],
                Value::Null,
            )
        }
        Some("function_call_output" | "custom_tool_call_output" | "local_shell_call_output") => {
            let id = item["call_id"].as_str().unwrap_or("");
            let output = &item["output"];
            // Outputs are often JSON text `{"output": "...", "metadata": {"exit_code": ..}}`.
            let parsed = output
                .as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok());
            let body = match &parsed {
                Some(p) if p["output"].is_string() => p["output"].as_str().unwrap_or("").to_owned(),
                _ => match output {
                    Value::Object(o) if o.contains_key("content") => text_of(&output["content"]),
                    _ => text_of(output),
                },
            };
            let failed = parsed
                .as_ref()
                .and_then(|p| p["metadata"]["exit_code"].as_i64())
                .is_some_and(|c| c != 0)
                || output["success"] == false;
            b.tool_result(line, id, body, failed, output.clone())
        }
        Some(other) => Err(format!(
            "response item {other:?} (not known to this version)"
        )),
        None => Err("response item without a type".to_owned()),
    };
    if let Err(why) = done {
        t.skip(line, why);
    }
}
