//! Log record kinds and payloads (postcard), see `docs/format.md`.

use crate::error::EngineError;
use crate::event::{Branch, Event, Item, Part};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Session log: one event (`EventRecord`).
pub(crate) const KIND_EVENT: u8 = 1;
/// Session log: the receipt of the mutation whose events precede it in the same batch.
pub(crate) const KIND_RECEIPT: u8 = 2;
/// Session log: a fork marker (`crate::layer::ForkMarker`), written once, right after the
/// history copied from the source; receipts before it belong to the source and are ignored.
pub(crate) const KIND_FORK: u8 = 3;
/// Root log: a Session registration, which is also createSession's receipt.
pub(crate) const KIND_SESSION: u8 = 16;
/// Root log: a forked Session's registration, which is also the fork's receipt
/// (`crate::fork::ForkRecord`).
pub(crate) const KIND_FORK_SESSION: u8 = 17;
/// Root log: a layered fork's registration (`crate::fork::ForkRecord`), which is also the
/// fork's receipt and its base (source and fence); written by this build.
pub(crate) const KIND_LAYERED_FORK: u8 = 18;
/// Root log: a Session imported from a bundle (`ImportRecord`), which is also the import's
/// receipt (see `crate::bundle`).
pub(crate) const KIND_IMPORTED_SESSION: u8 = 19;

#[derive(Serialize)]
pub(crate) struct EventRecordRef<'a> {
    pub sequence: u64,
    pub event: &'a Event,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct EventRecord {
    pub sequence: u64,
    pub event: Event,
}

/// What a mutation returned, kept so a repeat returns it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Outcome {
    Append {
        first: u64,
        last: u64,
    },
    Send {
        invocation: String,
        sequence: u64,
    },
    Sequence {
        sequence: u64,
    },
    /// A fork reserved in the source Session under this operation (see `crate::fork`).
    Fork {
        session_id: String,
        through: u64,
        turn: Option<String>,
    },
    /// A stored workspace patch (see `crate::patches`).
    Patch {
        patch_id: String,
        bytes: u64,
        digest: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Receipt {
    pub operation: String,
    pub params: [u8; 32],
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionRecord {
    pub session_id: String,
    pub workspace: Option<String>,
    pub branch: Option<Branch>,
    pub operation: String,
    pub params: [u8; 32],
}

/// Prefix of a spare Session directory's name in `sessions/` (see `crate::spares`; ids never
/// start with '.').
pub(crate) const SPARE_PREFIX: &str = ".spare-";

/// True when `name` can be a spare's directory name (as a Root-log record names it): the
/// prefix, then letters, digits and '-' only, so it is one path component inside `sessions/`.
pub(crate) fn is_spare_name(name: &str) -> bool {
    name.strip_prefix(SPARE_PREFIX).is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= 64
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

/// The payload of a [`KIND_SESSION`] record: the [`SessionRecord`], then, when the Session's
/// directory was a spare (`crate::spares`), that spare's name as a postcard string. Records
/// written before spares end after the `SessionRecord`; earlier builds read this one as they
/// read those (postcard ignores what follows a value).
pub(crate) fn encode_session(r: &SessionRecord, spare: Option<&str>) -> Vec<u8> {
    let mut bytes = encode(r);
    if let Some(name) = spare {
        bytes.extend_from_slice(&encode(&name));
    }
    bytes
}

/// Reads what [`encode_session`] wrote.
pub(crate) fn decode_session(
    path: &Path,
    bytes: &[u8],
) -> Result<(SessionRecord, Option<String>), EngineError> {
    let bad = |e: postcard::Error| {
        EngineError::corrupt(path, format!("cannot decode a Session record: {e}"))
    };
    let (r, rest) = postcard::take_from_bytes::<SessionRecord>(bytes).map_err(bad)?;
    if rest.is_empty() {
        return Ok((r, None));
    }
    let (name, rest) = postcard::take_from_bytes::<String>(rest).map_err(bad)?;
    if !rest.is_empty() || !is_spare_name(&name) {
        return Err(EngineError::corrupt(
            path,
            format!(
                "a Session record of {} names no spare directory",
                r.session_id
            ),
        ));
    }
    Ok((r, Some(name)))
}

/// Root log payload of [`KIND_IMPORTED_SESSION`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ImportRecord {
    pub session_id: String,
    pub workspace: Option<String>,
    pub operation: String,
    pub params: [u8; 32],
    /// SHA-256 of the bundle's header and manifest: which bundle made this Session.
    pub bundle: [u8; 32],
    /// The imported Session's revision (the bundle's fence).
    pub revision: u64,
    /// The sequence after which the fork rules applied in the exported Session, if any.
    pub reset: Option<u64>,
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("encoding into a Vec cannot fail for these types")
}

pub(crate) fn decode<'a, T: Deserialize<'a>>(
    path: &Path,
    what: &str,
    bytes: &'a [u8],
) -> Result<T, EngineError> {
    postcard::from_bytes(bytes)
        .map_err(|e| EngineError::corrupt(path, format!("cannot decode {what}: {e}")))
}

/// Digest of a mutation's canonical parameters: its name, then the postcard of its inputs.
pub(crate) fn params_digest<T: Serialize>(mutation: &str, params: &T) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(mutation.as_bytes());
    h.update([0u8]);
    h.update(encode(params));
    h.finalize().into()
}

/// Bytes the postcard encoding of `event` takes, about (its texts plus a little): the capacity
/// to encode it into without growing the buffer.
pub(crate) fn encoded_size_hint(event: &Event) -> usize {
    let items = |items: &[Item]| -> usize {
        items
            .iter()
            .map(|i| match i {
                Item::Assistant { body, thinking } => {
                    body.len() + thinking.as_ref().map_or(0, String::len) + 16
                }
                Item::ToolCall {
                    id,
                    name,
                    arguments,
                    ..
                } => id.len() + name.len() + arguments.len() + 24,
            })
            .sum()
    };
    64 + match event {
        Event::UserMessage(m) => m.invocation.len() + m.text.len() + m.attachments.len() * 160,
        Event::ModelCompletion(c) => c.invocation.len() + c.model.len() + items(&c.items),
        Event::ToolResult(r) => {
            let parts: usize = r
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text { text } => text.len() + 8,
                    Part::Attachment { digest } => digest.len() + 8,
                })
                .sum();
            r.invocation.len()
                + r.tool_call_id.len()
                + r.body.len()
                + r.raw.get().len()
                + parts
                + r.digest.len()
        }
        _ => 0,
    }
}

/// Length of the LEB128 varint postcard writes for `n`.
fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - n.leading_zeros();
    (bits.max(1) as usize).div_ceil(7)
}

/// Where a toolResult's body text lies in the postcard encoding of its event: after the
/// variant index, `invocation`, `toolCallId`, `status` and the body's length (format.md).
pub(crate) fn tool_result_body_span(event: &Event) -> Option<std::ops::Range<usize>> {
    let Event::ToolResult(r) = event else {
        return None;
    };
    const TOOL_RESULT_VARIANT: u32 = 3;
    let head = encode(&(
        TOOL_RESULT_VARIANT,
        &r.invocation,
        &r.tool_call_id,
        r.status,
    ))
    .len();
    let start = head + varint_len(r.body.len());
    Some(start..start + r.body.len())
}

/// Receipt digest of `append`: SHA-256 over `append`, a zero byte, the varint event count,
/// then each event's postcard encoding, with the text of each toolResult body left out (its
/// length stays in). Append has checked that the event's `digest` is the SHA-256 of that body,
/// and the digest is part of the encoding, so it stands for the body: the body is hashed once
/// (by that check), not twice.
pub(crate) fn append_params_digest(events: &[Prepared]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"append\0");
    h.update(encode(&(events.len() as u64)));
    for e in events {
        let bytes = e.bytes();
        match tool_result_body_span(&e.event) {
            Some(body) => {
                debug_assert_eq!(
                    bytes.get(body.clone()),
                    Some(match &e.event {
                        Event::ToolResult(r) => r.body.as_bytes(),
                        _ => unreachable!("the span is of a toolResult"),
                    })
                );
                h.update(&bytes[..body.start]);
                h.update(&bytes[body.end..]);
            }
            None => h.update(bytes),
        }
    }
    h.finalize().into()
}

/// Receipt digest of `append` as builds before [`append_params_digest`] computed it (over
/// every byte of every event), still accepted for receipts they stored.
pub(crate) fn append_params_digest_v1(events: &[Prepared]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"append\0");
    h.update(encode(&(events.len() as u64)));
    for e in events {
        h.update(e.bytes());
    }
    h.finalize().into()
}

/// First 8 bytes of SHA-256 of an operation string: the key of the receipt index.
pub(crate) fn operation_hash(operation: &str) -> u64 {
    let d = Sha256::digest(operation.as_bytes());
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// Root log payload of [`records::KIND_FORK_SESSION`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkRecord {
    pub session_id: String,
    pub workspace: Option<String>,
    pub branch: Branch,
    pub operation: String,
    pub params: [u8; 32],
}

/// Room kept before an event's encoding for the varint of its sequence (a u64 takes at most 10).
const SEQUENCE_ROOM: usize = 10;

/// An event with its postcard encoding, made once: the receipt digest and the record payload
/// both use these bytes, and the payload is written around them without another copy.
pub(crate) struct Prepared {
    pub event: Event,
    /// `SEQUENCE_ROOM` bytes, then the postcard encoding of the event.
    buf: Vec<u8>,
    /// Where the record payload starts in `buf` once [`Prepared::set_sequence`] has run.
    start: usize,
}

impl Prepared {
    pub(crate) fn new(event: Event) -> Prepared {
        let mut buf = Vec::with_capacity(SEQUENCE_ROOM + encoded_size_hint(&event));
        buf.resize(SEQUENCE_ROOM, 0);
        let buf =
            postcard::to_io(&event, buf).expect("encoding into a Vec cannot fail for these types");
        Prepared {
            event,
            buf,
            start: SEQUENCE_ROOM,
        }
    }

    /// The postcard encoding of the event.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[SEQUENCE_ROOM..]
    }

    /// Writes `sequence` before the event's bytes: the result is the postcard encoding of
    /// `EventRecord { sequence, event }` (the varint sequence, then the event).
    pub(crate) fn set_sequence(&mut self, sequence: u64) {
        let seq = encode(&sequence);
        self.start = SEQUENCE_ROOM - seq.len();
        self.buf[self.start..SEQUENCE_ROOM].copy_from_slice(&seq);
    }

    /// The record payload, after [`Prepared::set_sequence`].
    pub(crate) fn payload(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Item, ModelCompletion, Part, ToolResult, ToolStatus};
    use crate::json::RawJson;
    use crate::validate::sha256_digest;

    fn tool_result(body: &str, status: ToolStatus) -> Event {
        Event::ToolResult(ToolResult {
            invocation: "inv-1".into(),
            tool_call_id: "c".repeat(200),
            status,
            body: body.into(),
            raw: RawJson::from_string("{\"a\":[1,2]}".into()).expect("json"),
            parts: vec![Part::Text { text: body.into() }],
            bytes: body.len() as u64,
            digest: sha256_digest(body.as_bytes()),
        })
    }

    #[test]
    fn tool_result_body_span_names_the_body_bytes() {
        for len in [0usize, 1, 127, 128, 16_383, 16_384, 70_000] {
            for status in [ToolStatus::Ok, ToolStatus::MalformedArguments] {
                let body = "é".repeat(len / 2) + &"x".repeat(len % 2);
                let e = tool_result(&body, status);
                let bytes = encode(&e);
                let span = tool_result_body_span(&e).expect("a toolResult");
                assert_eq!(&bytes[span.clone()], body.as_bytes(), "len {len}");
                let est = encoded_size_hint(&e);
                assert!(est >= bytes.len(), "hint {est} < {} bytes", bytes.len());
            }
        }
        let other = Event::ModelCompletion(ModelCompletion {
            invocation: "i".into(),
            model: "m".into(),
            items: vec![Item::Assistant {
                body: "hello".into(),
                thinking: None,
            }],
            usage: None,
        });
        assert_eq!(tool_result_body_span(&other), None);
    }

    #[test]
    fn append_digest_leaves_out_only_the_body_text() {
        let p = |events: Vec<Event>| -> Vec<Prepared> {
            events.into_iter().map(Prepared::new).collect()
        };
        let a = p(vec![tool_result("one body", ToolStatus::Ok)]);
        let b = p(vec![tool_result("two body", ToolStatus::Ok)]);
        let c = p(vec![tool_result("one body", ToolStatus::Error)]);
        // Different bodies differ through their digests; other fields differ directly.
        assert_ne!(append_params_digest(&a), append_params_digest(&b));
        assert_ne!(append_params_digest(&a), append_params_digest(&c));
        assert_eq!(
            append_params_digest(&a),
            append_params_digest(&p(vec![tool_result("one body", ToolStatus::Ok)]))
        );
        assert_ne!(append_params_digest(&a), append_params_digest_v1(&a));
        // Without toolResults both digests hash the same bytes.
        let user = || {
            vec![Event::UserMessage(crate::event::UserMessage {
                invocation: "i".into(),
                text: "hi".into(),
                attachments: vec![],
            })]
        };
        assert_eq!(
            append_params_digest(&p(user())),
            append_params_digest_v1(&p(user()))
        );
    }
}

/// How a Root-log record registered its Session (see [`registration`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistrationKind {
    /// `createSession`: an open makes the directory from the record when a crash came
    /// between the record and the directory's rename (only for the last registration).
    Created,
    /// A copied fork (fork format 1).
    CopiedFork,
    /// A layered fork: its directory is made by its first open.
    LayeredFork,
    /// An imported bundle.
    Imported,
}

/// A Session registered by a Root-log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The registered Session's id.
    pub session_id: String,
    /// What registered it.
    pub kind: RegistrationKind,
}

/// The Session a Root-log record of `kind` with `payload` registers, for readers of the Root
/// log outside the engine (a replica follows which Sessions exist this way). Every
/// registration payload starts with the Session id (docs/format.md, "Record kinds"); an
/// unknown kind or a payload that does not decode is `corrupt`, naming `root_log_dir`.
pub fn registration(
    root_log_dir: &Path,
    kind: u8,
    payload: &[u8],
) -> Result<Registration, EngineError> {
    #[derive(Deserialize)]
    struct Head {
        session_id: String,
    }
    let kind = match kind {
        KIND_SESSION => RegistrationKind::Created,
        KIND_FORK_SESSION => RegistrationKind::CopiedFork,
        KIND_LAYERED_FORK => RegistrationKind::LayeredFork,
        KIND_IMPORTED_SESSION => RegistrationKind::Imported,
        other => {
            return Err(EngineError::corrupt(
                root_log_dir,
                format!("unknown Root-log record kind {other}"),
            ))
        }
    };
    let (head, _): (Head, _) = postcard::take_from_bytes(payload).map_err(|e| {
        EngineError::corrupt(root_log_dir, format!("cannot decode a registration: {e}"))
    })?;
    crate::validate::validate_session_id(&head.session_id).map_err(|_| {
        EngineError::corrupt(
            root_log_dir,
            format!(
                "a registration names an invalid Session id {:?}",
                head.session_id
            ),
        )
    })?;
    Ok(Registration {
        session_id: head.session_id,
        kind,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod registration_tests {
    use super::*;

    #[test]
    fn a_session_records_spare_name_is_checked() {
        let p = Path::new("root-log");
        let r = SessionRecord {
            session_id: "s1".into(),
            workspace: Some("/w".into()),
            branch: None,
            operation: "op".into(),
            params: [7; 32],
        };
        assert_eq!(
            decode_session(p, &encode_session(&r, None)).unwrap(),
            (r.clone(), None)
        );
        let named = encode_session(&r, Some(".spare-00ab-1"));
        assert_eq!(
            decode_session(p, &named).unwrap(),
            (r.clone(), Some(".spare-00ab-1".to_owned()))
        );
        // An earlier build reads the record and ignores the name.
        assert_eq!(
            decode::<SessionRecord>(p, "a Session record", &named).unwrap(),
            r
        );
        for bad in [
            "../x",
            ".spare-",
            ".spare-a/b",
            "s1",
            ".spare-..",
            ".spare-a b",
        ] {
            let e = decode_session(p, &encode_session(&r, Some(bad))).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Corrupt, "{bad}: {e}");
        }
        let mut trailing = named.clone();
        trailing.push(0);
        assert!(decode_session(p, &trailing).is_err());
        assert!(decode_session(p, &named[..named.len() - 1]).is_err());
    }

    #[test]
    fn every_registration_kind_names_its_session() {
        let dir = Path::new("root-log");
        let created = encode(&SessionRecord {
            session_id: "s1".into(),
            workspace: None,
            branch: None,
            operation: "op".into(),
            params: [0; 32],
        });
        let r = registration(dir, KIND_SESSION, &created).unwrap();
        assert_eq!(
            (r.session_id.as_str(), r.kind),
            ("s1", RegistrationKind::Created)
        );
        let imported = encode(&ImportRecord {
            session_id: "s2".into(),
            workspace: None,
            operation: "op".into(),
            params: [0; 32],
            bundle: [1; 32],
            revision: 4,
            reset: None,
        });
        let r = registration(dir, KIND_IMPORTED_SESSION, &imported).unwrap();
        assert_eq!(
            (r.session_id.as_str(), r.kind),
            ("s2", RegistrationKind::Imported)
        );
        assert_eq!(
            registration(dir, KIND_LAYERED_FORK, &created).unwrap().kind,
            RegistrationKind::LayeredFork
        );
        assert!(
            registration(dir, KIND_EVENT, &created).is_err(),
            "not a registration"
        );
        assert!(
            registration(dir, KIND_SESSION, &[200]).is_err(),
            "does not decode"
        );
    }
}
