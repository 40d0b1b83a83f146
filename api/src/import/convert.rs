//! From transcript records to Logbook events: one [`Builder`] per stream of a transcript.
//!
//! Conversion is a pure function of the lines, and *prefix-stable*: the events of the first
//! `n` lines are the same whatever follows them. That is what lets an import continue where
//! the last one stopped: it converts the whole file again and appends only the events of the
//! lines after the last import mark. So nothing here looks ahead, and nothing is emitted at
//! the end of the file: a Turn is settled when the transcript shows it ended (its next user
//! prompt, or an end-of-turn record), never because the file ends. The last Turn of a
//! transcript whose agent may still be working stays open.

use serde_json::{json, Value};

use crate::demo::digest;
use logbook_engine::validate::ID_BYTES_MAX;

/// Which stream of a transcript a record belongs to: the main conversation, or a sub-agent's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StreamKey {
    Main,
    /// A sub-agent's conversation, by the agent's id in the transcript (`sidechain` when it
    /// has none).
    Agent(String),
}

/// The events one stream of a transcript turns into, each with the (0-based) line it came from.
#[derive(Debug, Default)]
pub struct Builder {
    pub events: Vec<(usize, Value)>,
    /// The stream's working directory: the first one its records name.
    pub workspace: Option<String>,
    turn: Option<String>,
    settled: bool,
    turns: usize,
    title: Option<String>,
    /// The id of the last model response seen (a format that writes one response over several
    /// records keeps its usage once).
    pub last_response: Option<String>,
    /// The model the transcript last named (for formats that name it apart from the output).
    pub model: Option<String>,
}

/// How a Turn ended.
#[derive(Clone, Copy, Debug)]
pub enum Ending {
    Completed,
    Stopped,
}

impl Builder {
    /// Does the stream hold anything a Session would show (not only titles)?
    pub fn has_conversation(&self) -> bool {
        self.events.iter().any(|(_, e)| e["kind"] != "titleSet")
    }

    /// The first working directory seen becomes the stream's workspace.
    pub fn saw_cwd(&mut self, cwd: Option<&str>) {
        if let Some(cwd) = cwd {
            if self.workspace.is_none() && cwd.starts_with('/') {
                self.workspace = Some(cwd.to_owned());
            }
        }
    }

    /// A user prompt: settles the open Turn and opens the next.
    pub fn user(&mut self, line: usize, text: String) {
        self.settle(line, Ending::Completed);
        self.turns += 1;
        let inv = format!("imported-{}", self.turns);
        self.events.push((
            line,
            json!({"kind": "userMessage", "invocation": inv, "text": text, "attachments": []}),
        ));
        self.turn = Some(inv);
        self.settled = false;
    }

    /// The transcript says the open Turn ended.
    pub fn settle(&mut self, line: usize, ending: Ending) {
        if let (Some(inv), false) = (&self.turn, self.settled) {
            let outcome = match ending {
                Ending::Completed => "completed",
                Ending::Stopped => "stopped",
            };
            self.events.push((
                line,
                json!({"kind": "turnSettled", "invocation": inv, "outcome": outcome}),
            ));
            self.settled = true;
        }
    }

    /// Model output; `Err` (a reason to skip the line) before the first prompt.
    pub fn completion(
        &mut self,
        line: usize,
        model: &str,
        items: Vec<Value>,
        usage: Value,
    ) -> Result<(), String> {
        if items.is_empty() {
            return Ok(());
        }
        let inv = self
            .turn
            .clone()
            .ok_or("model output before the first user message")?;
        self.events.push((
            line,
            json!({"kind": "modelCompletion", "invocation": inv, "model": model,
                "items": items, "usage": usage}),
        ));
        Ok(())
    }

    /// A tool's output; `Err` (a reason to skip the line) before the first prompt.
    pub fn tool_result(
        &mut self,
        line: usize,
        call_id: &str,
        body: String,
        error: bool,
        raw: Value,
    ) -> Result<(), String> {
        let inv = self
            .turn
            .clone()
            .ok_or("tool output before the first user message")?;
        let bytes = body.len();
        let digest = digest(body.as_bytes());
        self.events.push((
            line,
            json!({"kind": "toolResult", "invocation": inv, "toolCallId": call_id_or(line, call_id),
                "status": if error { "error" } else { "ok" }, "body": body, "raw": raw,
                "parts": [{"kind": "text", "text": body}], "bytes": bytes, "digest": digest}),
        ));
        Ok(())
    }

    /// A compaction summary: model output in the open Turn, or a Turn of its own when none is
    /// open (a transcript that starts from a summary of an earlier one).
    pub fn compaction(&mut self, line: usize, summary: String) {
        if self.turn.is_none() {
            self.user(line, summary);
        } else {
            let item = json!({"kind": "assistant", "body": summary, "thinking": ""});
            // A Turn is open, so this cannot fail.
            let _ = self.completion(line, "compaction", vec![item], Value::Null);
        }
    }

    /// A title the transcript gives (only a change is recorded).
    pub fn title(&mut self, line: usize, title: &str) {
        let Some(title) = clean_title(title) else {
            return;
        };
        if self.title.as_deref() != Some(title.as_str()) {
            self.events
                .push((line, json!({"kind": "titleSet", "title": title})));
            self.title = Some(title);
        }
    }
}

/// A tool call id the engine accepts: the transcript's own when it is 1 to 256 bytes, else
/// one made from the line (stable: the same line always gives the same id).
pub fn call_id_or(line: usize, id: &str) -> String {
    if id.is_empty() {
        format!("call-line-{}", line + 1)
    } else if id.len() > ID_BYTES_MAX {
        format!("call-{}", &digest(id.as_bytes())[7..39])
    } else {
        id.to_owned()
    }
}

/// Most bytes of a title taken from a transcript (the engine allows 1,024).
const TITLE_BYTES_MAX: usize = 200;

/// A title as `setTitle` accepts it: one line without control characters, at most
/// [`TITLE_BYTES_MAX`] bytes cut on a character boundary; None when nothing is left.
fn clean_title(title: &str) -> Option<String> {
    let one_line: String = title
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut t = one_line.trim();
    if t.len() > TITLE_BYTES_MAX {
        let mut end = TITLE_BYTES_MAX;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t = t[..end].trim_end();
    }
    (!t.is_empty()).then(|| t.to_owned())
}

/// The text of a content value: a string, or the text parts of a list of blocks, with a short
/// placeholder for each image or other non-text block (Logbook keeps attachments only when
/// a Host sends them; an import writes none).
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                _ => block_text(p),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The text of one content block, or a placeholder naming what it was.
fn block_text(block: &Value) -> Option<String> {
    if let Some(t) = block["text"].as_str() {
        return Some(t.to_owned());
    }
    match block["type"].as_str()? {
        "image" | "input_image" => {
            let mime = block["source"]["media_type"].as_str().unwrap_or("image");
            Some(format!("[{mime} not imported]"))
        }
        other => Some(format!("[{other} block not imported]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_one_short_line() {
        assert_eq!(clean_title("  a\nb\t "), Some("a b".into()));
        assert_eq!(clean_title("\n"), None);
        let long = "é".repeat(150);
        let t = clean_title(&long).unwrap();
        assert!(t.len() <= TITLE_BYTES_MAX && t.chars().all(|c| c == 'é'));
    }

    #[test]
    fn turns_settle_on_the_next_prompt_and_once() {
        let mut b = Builder::default();
        assert!(b.completion(0, "m", vec![json!({})], Value::Null).is_err());
        b.user(1, "a".into());
        b.settle(2, Ending::Stopped);
        b.settle(3, Ending::Completed);
        b.user(4, "b".into());
        let kinds: Vec<_> = b.events.iter().map(|(_, e)| e["kind"].clone()).collect();
        assert_eq!(kinds, ["userMessage", "turnSettled", "userMessage"]);
        assert_eq!(b.events[1].1["outcome"], "stopped");
        assert_eq!(call_id_or(4, ""), "call-line-5");
        assert_eq!(call_id_or(4, &"x".repeat(300)).len(), 37);
    }
}
