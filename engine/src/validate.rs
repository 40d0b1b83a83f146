//! Checks on identifiers, digests and events before anything is written.

use crate::error::EngineError;
use crate::event::{Event, Item, Part};
use sha2::{Digest, Sha256};

/// Longest Session id, in bytes (ids are ASCII).
pub const SESSION_ID_BYTES_MAX: usize = 128;
/// Longest invocation, interaction, tool call id or operation, in bytes.
pub const ID_BYTES_MAX: usize = 256;
/// Most events one `append` may carry.
pub const APPEND_EVENTS_MAX: usize = 4096;

/// `sha256:` + 64 lowercase hex digits of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in d {
        s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    s
}

/// Is `s` of the form `sha256:<64 lowercase hex>`?
pub fn is_digest(s: &str) -> bool {
    s.len() == 71
        && s.starts_with("sha256:")
        && s.as_bytes()[7..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// A Session id: 1..=128 characters of `[A-Za-z0-9._-]`, not starting with `.`.
pub fn validate_session_id(id: &str) -> Result<(), EngineError> {
    let ok = !id.is_empty()
        && id.len() <= SESSION_ID_BYTES_MAX
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(EngineError::invalid(format!(
            "sessionId {id:?} is not valid: use 1 to {SESSION_ID_BYTES_MAX} characters of A-Z a-z 0-9 . _ - \
             that do not start with '.'"
        )))
    }
}

/// A non-empty identifier of at most [`ID_BYTES_MAX`] bytes.
pub fn validate_id(what: &str, id: &str) -> Result<(), EngineError> {
    if id.is_empty() || id.len() > ID_BYTES_MAX {
        return Err(EngineError::invalid(format!(
            "{what} must be 1 to {ID_BYTES_MAX} bytes, got {}",
            id.len()
        )));
    }
    Ok(())
}

fn validate_digest(what: &str, d: &str) -> Result<(), EngineError> {
    if is_digest(d) {
        Ok(())
    } else {
        Err(EngineError::invalid(format!(
            "{what} {d:?} is not of the form sha256:<64 lowercase hex digits>"
        )))
    }
}

/// Most bytes of a Session title.
pub const TITLE_BYTES_MAX: usize = 1024;

/// A title is 1 to [`TITLE_BYTES_MAX`] bytes of UTF-8 without control characters.
pub fn validate_title(title: &str) -> Result<(), EngineError> {
    if title.is_empty() || title.len() > TITLE_BYTES_MAX || title.chars().any(char::is_control) {
        return Err(EngineError::invalid(format!(
            "title must be 1 to {TITLE_BYTES_MAX} bytes without control characters (one line), got {} bytes",
            title.len()
        )));
    }
    Ok(())
}

/// Structural checks of one event given by a client (`index` names it in messages).
pub fn validate_event(index: usize, e: &Event) -> Result<(), EngineError> {
    let at = |m: String| EngineError::invalid(format!("events[{index}] ({}): {m}", e.kind()));
    let id = |what: &str, v: &str| validate_id(what, v).map_err(|err| at(err.to_string()));
    match e {
        Event::SessionCreated(_) => {
            return Err(at(
                "sessionCreated is written by createSession only; it cannot be appended".into(),
            ))
        }
        Event::UserMessage(m) => {
            id("invocation", &m.invocation)?;
            for a in &m.attachments {
                validate_digest("attachment digest", &a.digest)
                    .map_err(|err| at(err.to_string()))?;
            }
        }
        Event::ModelCompletion(c) => {
            id("invocation", &c.invocation)?;
            for item in &c.items {
                if let Item::ToolCall { id: call, .. } = item {
                    id("toolCall id", call)?;
                }
            }
        }
        Event::ToolResult(r) => {
            id("invocation", &r.invocation)?;
            id("toolCallId", &r.tool_call_id)?;
            let len = r.body.len() as u64;
            if r.bytes != len {
                return Err(at(format!(
                    "bytes is {} but body is {len} bytes of UTF-8",
                    r.bytes
                )));
            }
            validate_digest("digest", &r.digest).map_err(|err| at(err.to_string()))?;
            let want = sha256_digest(r.body.as_bytes());
            if r.digest != want {
                return Err(at(format!(
                    "digest {} does not match body (its digest is {want})",
                    r.digest
                )));
            }
            for p in &r.parts {
                if let Part::Attachment { digest } = p {
                    validate_digest("part digest", digest).map_err(|err| at(err.to_string()))?;
                }
            }
        }
        Event::TurnSettled(t) => id("invocation", &t.invocation)?,
        Event::StopRequested(s) => id("invocation", &s.invocation)?,
        Event::InteractionRequested(i) => {
            id("interactionId", &i.interaction_id)?;
            id("invocation", &i.invocation)?;
        }
        Event::InteractionResolved(i) => id("interactionId", &i.interaction_id)?,
        Event::ContextPrepared(c) => id("invocation", &c.invocation)?,
        Event::TitleSet(t) => validate_title(&t.title).map_err(|err| at(err.to_string()))?,
        Event::ImportMark(m) => {
            id("origin", &m.origin)?;
            validate_digest("prefixDigest", &m.prefix_digest).map_err(|err| at(err.to_string()))?;
            if let Some(parent) = &m.parent {
                validate_session_id(parent).map_err(|err| at(format!("parent: {err}")))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        for ok in ["a", "A.b_c-9", &"x".repeat(128)] {
            assert!(validate_session_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".a", "a/b", "a b", "é", &"x".repeat(129), ".."] {
            assert!(validate_session_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn digests() {
        let d = sha256_digest(b"abc");
        assert_eq!(
            d,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_digest(&d));
        assert!(!is_digest(&d.to_uppercase()));
        assert!(!is_digest("sha256:abc"));
    }
}
