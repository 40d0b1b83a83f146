//! One transcript file read whole: its format (recognised by content), its origin's id, and
//! its streams of events (see [`mod@super::convert`]).

use std::collections::BTreeMap;

use serde_json::Value;

use super::convert::{Builder, StreamKey};
use super::lines::Lines;
use super::{claude, codex};
use crate::demo::digest;
use logbook_engine::validate::SESSION_ID_BYTES_MAX;

/// Records looked at to recognise a format.
const DETECT_RECORDS_MAX: usize = 64;

/// The transcript formats import reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Claude Code's session files (`~/.claude/projects/<project>/<sessionId>.jsonl`).
    Claude,
    /// Codex's rollout files (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).
    Codex,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Claude => "claude",
            Format::Codex => "codex",
        }
    }
}

/// A transcript converted.
#[derive(Debug)]
pub struct Transcript {
    pub format: Format,
    /// The origin's own id (Claude Code's `sessionId`, Codex's session id): the first one the
    /// transcript names, so it stays the same as the file grows.
    pub id: Option<String>,
    /// The id of the conversation this one is a sub-agent of, when the origin names it.
    pub parent: Option<String>,
    pub streams: BTreeMap<StreamKey, Builder>,
    /// (0-based line, why it was skipped).
    pub skipped: Vec<(usize, String)>,
}

impl Transcript {
    pub fn stream(&mut self, key: StreamKey) -> &mut Builder {
        self.streams.entry(key).or_default()
    }

    pub fn skip(&mut self, line: usize, why: impl Into<String>) {
        self.skipped.push((line, why.into()));
    }
}

/// Why a file is not a transcript this version reads.
#[derive(Debug)]
pub struct NotTranscript(pub String);

/// Converts the whole lines of a file.
pub fn read(lines: &Lines<'_>) -> Result<Transcript, NotTranscript> {
    let mut skipped = Vec::new();
    let mut records = Vec::with_capacity(lines.whole.len());
    for (i, line) in lines.whole.iter().enumerate() {
        let line = if i == 0 {
            line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line)
        } else {
            line
        };
        if line.trim_ascii().is_empty() {
            continue;
        }
        let Ok(text) = std::str::from_utf8(line) else {
            skipped.push((i, "not UTF-8 text".to_owned()));
            continue;
        };
        match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => records.push((i, v)),
            Ok(_) => skipped.push((i, "JSON but not an object".to_owned())),
            Err(e) => skipped.push((i, format!("not JSON ({e})"))),
        }
    }
    let format = records
        .iter()
        .take(DETECT_RECORDS_MAX)
        .find_map(|(_, v)| detect(v))
        .ok_or_else(|| {
            NotTranscript(if records.is_empty() {
                "no JSON records".to_owned()
            } else {
                "neither Claude Code nor Codex records".to_owned()
            })
        })?;
    let mut t = Transcript {
        format,
        id: None,
        parent: None,
        streams: BTreeMap::new(),
        skipped,
    };
    for (line, v) in &records {
        match format {
            Format::Claude => claude::record(&mut t, *line, v),
            Format::Codex => codex::record(&mut t, *line, v),
        }
    }
    t.skipped.sort();
    Ok(t)
}

/// Which format one record belongs to, if it tells.
fn detect(v: &Value) -> Option<Format> {
    let ty = v["type"].as_str();
    match ty {
        Some("session_meta" | "response_item" | "event_msg" | "turn_context" | "compacted")
            if v["payload"].is_object() =>
        {
            Some(Format::Codex)
        }
        Some("user" | "assistant") if v["message"].is_object() => Some(Format::Claude),
        Some("summary") if v.get("leafUuid").is_some() => Some(Format::Claude),
        Some("file-history-snapshot" | "queue-operation" | "custom-title")
            if v.get("sessionId").is_some() || v.get("messageId").is_some() =>
        {
            Some(Format::Claude)
        }
        // Codex before its records had an envelope: a header line, then bare response items.
        None if v.get("id").is_some() && v.get("timestamp").is_some() => Some(Format::Codex),
        Some("message" | "reasoning" | "function_call" | "function_call_output")
            if v.get("message").is_none() =>
        {
            Some(Format::Codex)
        }
        _ => None,
    }
}

/// One Session an import writes: a stream of a transcript under its stable id.
#[derive(Debug, Clone)]
pub struct Target {
    pub key: StreamKey,
    pub session_id: String,
    /// `claude:<id>`, `claude:<id>/agent:<agent>`, `codex:<id>` or `file:<digest>`.
    pub origin: String,
    pub parent: Option<String>,
}

/// The Sessions a transcript's streams go to. `fallback` names a transcript that carries no
/// id of its own (its file's path and first line).
pub fn targets(t: &Transcript, fallback: &[u8]) -> Vec<Target> {
    let prefix = t.format.name();
    let (base, origin) = match &t.id {
        Some(id) => (
            format!("{prefix}-{}", id_part(id)),
            format!("{prefix}:{}", origin_part(id)),
        ),
        None => {
            let tag = &digest(fallback)[7..23];
            (format!("import-{tag}"), format!("file:{tag}"))
        }
    };
    let parent_of_file = t
        .parent
        .as_ref()
        .map(|p| format!("{prefix}-{}", id_part(p)));
    t.streams
        .iter()
        .filter(|(_, b)| b.has_conversation())
        .map(|(key, _)| match key {
            StreamKey::Main => Target {
                key: key.clone(),
                session_id: base.clone(),
                origin: origin.clone(),
                parent: parent_of_file.clone(),
            },
            StreamKey::Agent(agent) => Target {
                key: key.clone(),
                session_id: fit(format!("{base}-agent-{}", id_part(agent))),
                origin: format!("{origin}/agent:{}", origin_part(agent)),
                parent: Some(base.clone()),
            },
        })
        .collect()
}

/// Longest piece of an origin's id kept as it is in a Session id.
const ID_PART_BYTES_MAX: usize = 80;

/// An origin's id as part of a Session id: itself when it is made of `[A-Za-z0-9._-]` and
/// short enough, else what is left of it after replacing other characters, cut, with a digest
/// of the original (so two ids never meet).
fn id_part(id: &str) -> String {
    let clean: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean == id && !id.is_empty() && id.len() <= ID_PART_BYTES_MAX {
        return clean;
    }
    let keep: String = clean.chars().take(32).collect();
    format!("{keep}_{}", &digest(id.as_bytes())[7..23])
}

/// An origin's id inside an origin string (at most 256 bytes in all).
fn origin_part(id: &str) -> String {
    if id.len() <= 100 && !id.chars().any(char::is_control) {
        id.to_owned()
    } else {
        format!("sha256-{}", &digest(id.as_bytes())[7..])
    }
}

/// A Session id cut to the engine's limit, keeping it unique by a digest.
fn fit(id: String) -> String {
    if id.len() <= SESSION_ID_BYTES_MAX {
        return id;
    }
    format!(
        "{}-{}",
        &id[..SESSION_ID_BYTES_MAX - 17],
        &digest(id.as_bytes())[7..23]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_kept_when_valid_and_made_valid_otherwise() {
        assert_eq!(id_part("0b1c-AZ_9.x"), "0b1c-AZ_9.x");
        let odd = id_part("a/b c");
        assert!(odd.starts_with("a_b_c_") && odd.len() == 6 + 16, "{odd}");
        assert_ne!(id_part("a/b c"), id_part("a b/c"));
        let long = id_part(&"x".repeat(300));
        assert!(long.len() < 60);
        assert!(fit("y".repeat(300)).len() <= SESSION_ID_BYTES_MAX);
        for id in [
            format!("claude-{odd}"),
            format!("claude-{long}"),
            fit("z".repeat(200)),
        ] {
            logbook_engine::validate::validate_session_id(&id).unwrap();
        }
    }
}
