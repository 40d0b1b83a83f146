//! `logbook import`: bring existing agent transcripts into a Root.
//!
//! Two public transcript formats are understood, one JSON object per line:
//!
//! - **rollout files** of a terminal coding agent, whose lines are
//!   `{"type": "session_meta" | "response_item" | "event_msg" | "turn_context", "payload": {..}}`
//!   (or, in the older spelling, the response items themselves); response
//!   items are `message` (roles `user` / `assistant`), `reasoning`,
//!   `function_call` / `custom_tool_call` and their `*_output`;
//! - **session files** of a desktop/terminal agent, whose lines are
//!   `{"type": "user" | "assistant" | "summary" | "system", "message": {"role", "content"}, "cwd", ..}`
//!   with content blocks `text`, `thinking`, `tool_use` and `tool_result`.
//!
//! Each user message opens a Turn (the previous one is settled `completed`);
//! model output becomes `modelCompletion`s and tool output `toolResult`s with
//! the original JSON kept as `raw`. A torn last line, unknown record types and
//! output before the first user message are skipped and reported, never
//! guessed at. Every file becomes one Session whose id and operations derive
//! from the file's digest, so importing a file twice changes nothing.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::demo::digest;
use crate::{dispatch, ApiError, ErrorCode, Host};

/// Events per `append` batch during an import.
pub const IMPORT_BATCH_EVENTS: usize = 256;

/// What one transcript turned into.
#[derive(Debug, Default)]
pub struct Conversion {
    pub events: Vec<Value>,
    pub workspace: Option<String>,
    /// (1-based line number, why it was skipped).
    pub skipped: Vec<(usize, String)>,
    pub format: &'static str,
}

#[derive(Default)]
struct Builder {
    out: Conversion,
    turn: Option<String>,
    turns: usize,
}

impl Builder {
    fn user(&mut self, text: String) {
        self.settle();
        self.turns += 1;
        let inv = format!("imported-{}", self.turns);
        self.out.events.push(
            json!({"kind": "userMessage", "invocation": inv, "text": text, "attachments": []}),
        );
        self.turn = Some(inv);
    }

    fn settle(&mut self) {
        if let Some(inv) = self.turn.take() {
            self.out
                .events
                .push(json!({"kind": "turnSettled", "invocation": inv, "outcome": "completed"}));
        }
    }

    fn completion(&mut self, line: usize, model: &str, items: Vec<Value>, usage: Value) {
        if items.is_empty() {
            return;
        }
        let Some(inv) = self.turn.clone() else {
            self.out.skipped.push((
                line,
                "model output before the first user message".to_owned(),
            ));
            return;
        };
        self.out.events.push(
            json!({"kind": "modelCompletion", "invocation": inv, "model": model,
            "items": items, "usage": usage}),
        );
    }

    fn tool_result(&mut self, line: usize, call_id: &str, body: String, error: bool, raw: Value) {
        let Some(inv) = self.turn.clone() else {
            self.out
                .skipped
                .push((line, "tool output before the first user message".to_owned()));
            return;
        };
        let bytes = body.len();
        let digest = digest(body.as_bytes());
        self.out.events.push(
            json!({"kind": "toolResult", "invocation": inv, "toolCallId": call_id,
            "status": if error { "error" } else { "ok" }, "body": body, "raw": raw,
            "parts": [{"kind": "text", "text": body}], "bytes": bytes, "digest": digest}),
        );
    }

    fn finish(mut self) -> Conversion {
        self.settle();
        self.out
    }
}

/// Parses the lines of a transcript; a line that is not JSON is skipped and reported.
/// Records with their 1-based line numbers, and the lines skipped with why.
type Parsed = (Vec<(usize, Value)>, Vec<(usize, String)>);

fn parse_lines(text: &str) -> Parsed {
    let mut values = Vec::new();
    let mut skipped = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line.trim_start_matches('\u{feff}')) {
            Ok(v) => values.push((i + 1, v)),
            Err(err) if i + 1 == lines.len() => {
                skipped.push((i + 1, format!("torn last line: {err}")))
            }
            Err(err) => skipped.push((i + 1, format!("not JSON: {err}"))),
        }
    }
    (values, skipped)
}

/// Which format a transcript is in, from its first records.
fn detect(values: &[(usize, Value)]) -> Option<&'static str> {
    for (_, v) in values.iter().take(20) {
        match v["type"].as_str() {
            Some("session_meta" | "response_item" | "event_msg" | "turn_context") => {
                return Some("rollout")
            }
            Some("user" | "assistant") if v.get("message").is_some() => return Some("session"),
            Some("message" | "reasoning" | "function_call") => return Some("rollout"),
            _ => {}
        }
    }
    None
}

/// Converts a transcript's text into events.
pub fn convert(text: &str) -> Result<Conversion, ApiError> {
    let (values, skipped) = parse_lines(text);
    let format = detect(&values).ok_or_else(|| {
        ApiError::invalid(
            "not a transcript this version can import (neither rollout nor session records found)",
        )
    })?;
    let mut b = Builder::default();
    b.out.skipped = skipped;
    b.out.format = format;
    for (line, v) in values {
        match format {
            "rollout" => rollout_record(&mut b, line, &v),
            _ => session_record(&mut b, line, &v),
        }
    }
    let mut out = b.finish();
    out.skipped.sort();
    Ok(out)
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().or_else(|| p.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn rollout_record(b: &mut Builder, line: usize, v: &Value) {
    let (kind, payload) = match v["type"].as_str() {
        Some("session_meta") => {
            if let Some(cwd) = v["payload"]["cwd"].as_str() {
                b.out.workspace.get_or_insert_with(|| cwd.to_owned());
            }
            return;
        }
        Some("turn_context") | Some("event_msg") | Some("compacted") => return,
        Some("response_item") => (v["payload"]["type"].as_str(), &v["payload"]),
        Some(_) => (v["type"].as_str(), v),
        None if v.get("record_type").is_some() || v.get("instructions").is_some() => return,
        None => {
            b.out
                .skipped
                .push((line, "record without a type".to_owned()));
            return;
        }
    };
    let model = "imported";
    match kind {
        Some("message") => {
            let text = text_of(&payload["content"]);
            match payload["role"].as_str() {
                Some("user") => b.user(text),
                Some("assistant") => b.completion(
                    line,
                    model,
                    vec![json!({"kind": "assistant", "body": text, "thinking": ""})],
                    Value::Null,
                ),
                Some(role) => b
                    .out
                    .skipped
                    .push((line, format!("message of role {role:?}"))),
                None => b
                    .out
                    .skipped
                    .push((line, "message without a role".to_owned())),
            }
        }
        Some("reasoning") => {
            let thinking = text_of(&payload["summary"]);
            if !thinking.is_empty() {
                b.completion(
                    line,
                    model,
                    vec![json!({"kind": "assistant", "body": "", "thinking": thinking})],
                    Value::Null,
                );
            }
        }
        Some("function_call") | Some("custom_tool_call") | Some("local_shell_call") => {
            let id = payload["call_id"]
                .as_str()
                .or(payload["id"].as_str())
                .unwrap_or("")
                .to_owned();
            let name = payload["name"]
                .as_str()
                .unwrap_or(if kind == Some("local_shell_call") {
                    "shell"
                } else {
                    "tool"
                });
            let arguments = match (&payload["arguments"], &payload["input"], &payload["action"]) {
                (Value::String(s), _, _) => s.clone(),
                (_, Value::String(s), _) => s.clone(),
                (_, _, action) if !action.is_null() => action.to_string(),
                (args, _, _) => args.to_string(),
            };
            b.completion(
                line,
                model,
                vec![json!({"kind": "toolCall", "id": id, "name": name, "arguments": arguments})],
                Value::Null,
            );
        }
        Some("function_call_output")
        | Some("custom_tool_call_output")
        | Some("local_shell_call_output") => {
            let id = payload["call_id"].as_str().unwrap_or("").to_owned();
            let output = &payload["output"];
            // Outputs are often JSON text `{"output": "...", "metadata": {..}}`.
            let parsed = output
                .as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok());
            let body = match &parsed {
                Some(p) if p["output"].is_string() => p["output"].as_str().unwrap_or("").to_owned(),
                _ => text_of(output),
            };
            let failed = parsed
                .as_ref()
                .and_then(|p| p["metadata"]["exit_code"].as_i64())
                .is_some_and(|c| c != 0);
            b.tool_result(line, &id, body, failed, output.clone());
        }
        Some(other) => b.out.skipped.push((line, format!("record type {other:?}"))),
        None => b
            .out
            .skipped
            .push((line, "response item without a type".to_owned())),
    }
}

fn session_record(b: &mut Builder, line: usize, v: &Value) {
    if let Some(cwd) = v["cwd"].as_str() {
        b.out.workspace.get_or_insert_with(|| cwd.to_owned());
    }
    let message = &v["message"];
    match v["type"].as_str() {
        Some("user") => {
            let content = &message["content"];
            if let Value::Array(blocks) = content {
                let mut text = Vec::new();
                for block in blocks {
                    match block["type"].as_str() {
                        Some("tool_result") => {
                            let id = block["tool_use_id"].as_str().unwrap_or("").to_owned();
                            let body = text_of(&block["content"]);
                            let failed = block["is_error"].as_bool().unwrap_or(false);
                            b.tool_result(line, &id, body, failed, block.clone());
                        }
                        Some("text") => text.push(block["text"].as_str().unwrap_or("").to_owned()),
                        Some(other) => b
                            .out
                            .skipped
                            .push((line, format!("user content block {other:?}"))),
                        None => {}
                    }
                }
                if !text.is_empty() {
                    b.user(text.join("\n"));
                }
            } else {
                b.user(text_of(content));
            }
        }
        Some("assistant") => {
            let model = message["model"].as_str().unwrap_or("imported").to_owned();
            let mut items = Vec::new();
            for block in message["content"].as_array().into_iter().flatten() {
                match block["type"].as_str() {
                    Some("text") => items.push(json!({"kind": "assistant", "body": block["text"].as_str().unwrap_or(""), "thinking": ""})),
                    Some("thinking") => items.push(json!({"kind": "assistant", "body": "", "thinking": block["thinking"].as_str().unwrap_or("")})),
                    Some("tool_use") => items.push(json!({"kind": "toolCall", "id": block["id"].as_str().unwrap_or(""),
                        "name": block["name"].as_str().unwrap_or("tool"), "arguments": block["input"].to_string()})),
                    Some(other) => b.out.skipped.push((line, format!("assistant content block {other:?}"))),
                    None => {}
                }
            }
            let usage = &message["usage"];
            let usage = match (
                usage["input_tokens"].as_u64(),
                usage["output_tokens"].as_u64(),
            ) {
                (Some(i), Some(o)) => json!({"inputTokens": i, "outputTokens": o}),
                _ => Value::Null,
            };
            b.completion(line, &model, items, usage);
        }
        Some("summary") | Some("system") | Some("file-history-snapshot") => {}
        Some(other) => b.out.skipped.push((line, format!("record type {other:?}"))),
        None => b
            .out
            .skipped
            .push((line, "record without a type".to_owned())),
    }
}

fn call(host: &Host, method: &str, params: Value) -> Result<Value, ApiError> {
    dispatch::call_value(host, method, &params)
}

/// Imports each file into a Session of its own, with a progress bar.
pub fn run(
    host: &Host,
    files: &[PathBuf],
    workspace: Option<&Path>,
    json_out: bool,
) -> Result<(), ApiError> {
    if files.is_empty() {
        return Err(ApiError::invalid(
            "name at least one transcript file to import",
        ));
    }
    let bar = indicatif::ProgressBar::new(files.len() as u64);
    // One bad file does not stop the batch: each failure is reported where it happened and
    // the command fails at the end with the first one's code, after every other file went in.
    let mut failed: Vec<ApiError> = Vec::new();
    for file in files {
        let outcome = import_one(host, file, workspace);
        bar.inc(1);
        bar.suspend(|| match &outcome {
            Ok(report) if json_out => println!("{report}"),
            Ok(report) if report["format"] == "bundle" => println!(
                "{}: bundle -> session {}, revision {}",
                file.display(),
                report["sessionId"].as_str().unwrap_or(""),
                report["revision"]
            ),
            Ok(report) => {
                println!(
                    "{}: {} transcript -> session {}, {} events, {} line(s) skipped",
                    file.display(),
                    report["format"].as_str().unwrap_or(""),
                    report["sessionId"].as_str().unwrap_or(""),
                    report["events"],
                    report["skipped"].as_array().map_or(0, Vec::len)
                );
                for s in report["skipped"].as_array().into_iter().flatten().take(10) {
                    println!(
                        "  line {}: skipped, {}",
                        s["line"],
                        s["reason"].as_str().unwrap_or("")
                    );
                }
            }
            Err(e) if json_out => println!(
                "{}",
                json!({"file": file, "error": {"code": e.code.as_str(), "message": e.message}})
            ),
            Err(e) => eprintln!("{}: not imported: {e}", file.display()),
        });
        if let Err(e) = outcome {
            failed.push(e);
        }
    }
    bar.finish_and_clear();
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(ApiError::new(
            first.code,
            format!(
                "{} of {} file(s) not imported (each is named above); the others went in",
                failed.len(),
                files.len()
            ),
        )),
    }
}

/// Whether `file` starts with a bundle's magic bytes.
fn is_bundle(file: &Path) -> Result<bool, ApiError> {
    use std::io::Read as _;
    let mut head = [0u8; 8];
    let failed = |e: std::io::Error| {
        ApiError::new(ErrorCode::Io, format!("reading {}: {e}", file.display()))
    };
    let mut f = std::fs::File::open(file).map_err(failed)?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(failed(e)),
        }
    }
    Ok(n == head.len() && head == logbook_engine::BUNDLE_MAGIC)
}

/// Imports one transcript file (or bundle) into its own Session; returns the report line.
fn import_one(host: &Host, file: &Path, workspace: Option<&Path>) -> Result<Value, ApiError> {
    if is_bundle(file)? {
        let path = std::path::absolute(file).map_err(|e| ApiError::from_io(file, "resolve", e))?;
        // The same bundle under the id it already made answers that Session again, so a
        // fresh operation per run is safe to repeat.
        let op = format!(
            "import-bundle-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let r = call(host, "importBundle", json!({"path": path, "operation": op}))?;
        return Ok(
            json!({"file": file, "format": "bundle", "sessionId": r["sessionId"],
            "revision": r["revision"]}),
        );
    }
    let text = std::fs::read(file)
        .map_err(|e| ApiError::new(ErrorCode::Io, format!("reading {}: {e}", file.display())))?;
    let text = String::from_utf8_lossy(&text);
    let conversion = convert(&text)
        .map_err(|e| ApiError::new(e.code, format!("{}: {}", file.display(), e.message)))?;
    let tag = &digest(text.as_bytes())[7..23];
    let session = format!("import-{tag}");
    let ws = workspace
        .map(|w| w.to_string_lossy().into_owned())
        .or(conversion.workspace.clone())
        .filter(|w| Path::new(w).is_absolute());
    call(
        host,
        "createSession",
        json!({"sessionId": session, "workspace": ws, "operation": format!("import-{tag}")}),
    )?;
    for (n, chunk) in conversion.events.chunks(IMPORT_BATCH_EVENTS).enumerate() {
        call(
            host,
            "append",
            json!({"sessionId": session, "operation": format!("import-{tag}-{n}"), "events": chunk}),
        )?;
    }
    Ok(
        json!({"file": file, "format": conversion.format, "sessionId": session,
        "events": conversion.events.len(),
        "skipped": conversion.skipped.iter().map(|(l, why)| json!({"line": l, "reason": why})).collect::<Vec<_>>()}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_format_turns_and_tools() {
        let text = concat!(
            r#"{"type":"summary","summary":"x"}"#,
            "\n",
            r#"{"type":"user","cwd":"/w","message":{"role":"user","content":"fix it"}}"#,
            "\n",
            r#"{"type":"assistant","message":{"model":"m","content":[{"type":"thinking","thinking":"hm"},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"a"}}],"usage":{"input_tokens":3,"output_tokens":4}}}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"data","is_error":false}]}}"#,
            "\n",
            r#"{"type":"weird"}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":"thanks"}}"#,
            "\n",
            r#"{"type":"assistant","mess"#,
        );
        let c = convert(text).unwrap();
        assert_eq!(c.format, "session");
        assert_eq!(c.workspace.as_deref(), Some("/w"));
        let kinds: Vec<&str> = c
            .events
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "userMessage",
                "modelCompletion",
                "toolResult",
                "turnSettled",
                "userMessage",
                "turnSettled"
            ]
        );
        assert_eq!(c.events[1]["items"][1]["arguments"], r#"{"path":"a"}"#);
        assert_eq!(c.events[2]["bytes"], 4);
        assert_eq!(c.skipped.len(), 2, "{:?}", c.skipped);
        assert!(c.skipped[1].1.starts_with("torn last line"));
    }

    #[test]
    fn rollout_format() {
        let text = concat!(
            r#"{"type":"session_meta","payload":{"id":"x","cwd":"/repo"}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"reasoning","summary":[{"type":"summary_text","text":"use ls"}]}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"c1"}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"{\"output\":\"a\\nb\\n\",\"metadata\":{\"exit_code\":0}}"}}"#,
            "\n",
            r#"{"type":"event_msg","payload":{"type":"token_count"}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a and b"}]}}"#,
            "\n",
        );
        let c = convert(text).unwrap();
        assert_eq!(c.format, "rollout");
        assert_eq!(c.workspace.as_deref(), Some("/repo"));
        let kinds: Vec<&str> = c
            .events
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "userMessage",
                "modelCompletion",
                "modelCompletion",
                "toolResult",
                "modelCompletion",
                "turnSettled"
            ]
        );
        assert_eq!(c.events[3]["body"], "a\nb\n");
        assert_eq!(c.events[3]["status"], "ok");
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
    }

    #[test]
    fn unknown_text_is_refused() {
        assert!(convert("hello\n").is_err());
    }
}
