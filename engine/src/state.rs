//! Derived Session state (queue, interactions, internal tool calls, contexts) and its checkpoint.
//!
//! The state is a pure function of the event sequence: [`State::apply`] folds one event in.
//! To avoid replaying the whole log on open, the state is written now and then to
//! `state.ckpt` together with the sequence it covers; open loads it and replays only the events
//! after that sequence. The checkpoint is derived: a missing, damaged, foreign-version or
//! too-new checkpoint is ignored and the state rebuilt from the log.
//!
//! Checkpoint layout (integers LE):
//!
//! | offset | width | field |
//! |---|---|---|
//! | 0 | 8 | magic `LBSTATE\0` |
//! | 8 | 4 | [`CHECKPOINT_FORMAT_VERSION`] |
//! | 12 | 4 | reserved, zero |
//! | 16 | 8 | covered sequence (= the revision the state reflects) |
//! | 24 | 8 | payload length P |
//! | 32 | P | postcard of (revision, titles, first line, parent, index coverage), then postcard of the maps |
//! | 32+P | 4 | CRC-32 of bytes 0..32+P |

use crate::error::EngineError;
use crate::event::{Event, Item};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Magic bytes of a state checkpoint file.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"LBSTATE\0";
/// Version of the state checkpoint file.
pub const CHECKPOINT_FORMAT_VERSION: u32 = 6;
const CHECKPOINT_HEADER_BYTES: usize = 32;
/// Largest checkpoint payload accepted on load, in bytes.
pub const CHECKPOINT_PAYLOAD_BYTES_MAX: u64 = 1 << 30;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InvocationState {
    /// Sequence of the invocation's `userMessage`.
    pub message: u64,
    pub settled: bool,
    /// Sequence of the `turnSettled` that settled it (0 while unsettled): a fork needs to know
    /// whether a Turn was already settled at its fence.
    pub settled_at: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InteractionState {
    pub requested: u64,
    pub resolved: Option<u64>,
}

/// Entry counts of the row and receipt indexes when a checkpoint was taken. The indexes only
/// grow between checkpoints, so one found shorter than this on open was cut and is rebuilt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Coverage {
    pub rows: u64,
    pub receipts: u64,
}

/// The parts of the state that grow with the Session's history (one entry per Turn, per
/// interaction, per internal tool call, per prepared context). Decoded from the checkpoint on
/// first use, not at open (see [`LazyMaps`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Maps {
    pub invocations: BTreeMap<String, InvocationState>,
    /// Unsettled invocations by their `userMessage` sequence.
    pub queue: BTreeMap<u64, String>,
    pub interactions: BTreeMap<String, InteractionState>,
    /// Unresolved interactions by their request sequence.
    pub pending: BTreeMap<u64, String>,
    /// Ids of tool calls marked internal (their results are hidden too), with the sequence of
    /// the first `modelCompletion` that made them, so a fork can cut the set at its fence.
    pub internal_calls: BTreeMap<String, u64>,
    /// Sequences of `contextPrepared` events, ascending.
    pub contexts: Vec<u64>,
}

/// [`Maps`] as loaded from a checkpoint: its encoded bytes (checksummed with the rest of the
/// file when it was read) until the first use decodes them. Opening a Session and reading
/// its history never needs them, so an open costs the same however long the history is.
#[derive(Clone, Default)]
pub(crate) struct LazyMaps {
    maps: OnceLock<Maps>,
    encoded: Option<Encoded>,
}

/// Bytes `range` of a checkpoint file as it was mapped (no copy is made: a checkpoint is
/// replaced whole by a rename, never written in place, so the map keeps the checked bytes).
#[derive(Clone)]
struct Encoded {
    file: Arc<memmap2::Mmap>,
    range: std::ops::Range<usize>,
}

impl Encoded {
    fn bytes(&self) -> &[u8] {
        &self.file[self.range.clone()]
    }
}

impl LazyMaps {
    fn get(&self) -> &Maps {
        self.maps.get_or_init(|| match &self.encoded {
            // The bytes passed the checkpoint's CRC and were written by this format version:
            // a decode failure is a bug in this build, not damage on disk.
            Some(e) => postcard::from_bytes(e.bytes())
                .expect("a checksummed checkpoint of this version decodes"),
            None => Maps::default(),
        })
    }

    fn get_mut(&mut self) -> &mut Maps {
        self.get();
        self.encoded = None;
        self.maps.get_mut().expect("decoded above")
    }
}

impl PartialEq for LazyMaps {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for LazyMaps {}

impl std::fmt::Debug for LazyMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.maps.get() {
            Some(m) => m.fmt(f),
            None => write!(f, "Maps(not decoded yet)"),
        }
    }
}

/// Everything the engine needs to answer queue/interaction questions and to mark rows hidden.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub revision: u64,
    /// Every `titleSet` (sequence, title), ascending: the last is the Session's title. Kept
    /// whole so a fork's state at its fence needs no replay (titles are few and short).
    pub titles: Vec<(u64, String)>,
    /// The first user message's title line (sequence, text): the title when none was set.
    pub first_line: Option<(u64, String)>,
    /// The Session this one is a sub-agent of, from the first `importMark` that names one
    /// (sequence, Session id).
    pub parent: Option<(u64, String)>,
    maps: LazyMaps,
}

/// What a checkpoint holds besides the maps: decoded at open.
type Head = (
    u64,
    Vec<(u64, String)>,
    Option<(u64, String)>,
    Option<(u64, String)>,
    Coverage,
);

/// Most characters of the title taken from the first user message.
pub const TITLE_FROM_MESSAGE_CHARS_MAX: usize = 80;

/// The title a user message gives a Session that has none set: its first line, at most
/// [`TITLE_FROM_MESSAGE_CHARS_MAX`] characters (cut on a character boundary); None when the
/// line is empty.
pub(crate) fn title_line(text: &str) -> Option<String> {
    let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
    let cut = line
        .char_indices()
        .nth(TITLE_FROM_MESSAGE_CHARS_MAX)
        .map_or(line.len(), |(i, _)| i);
    let t = &line[..cut];
    (!t.is_empty()).then(|| t.to_owned())
}

impl State {
    /// The maps (decoded now if they were not yet).
    pub(crate) fn maps(&self) -> &Maps {
        self.maps.get()
    }

    /// The maps, to change them.
    pub(crate) fn maps_mut(&mut self) -> &mut Maps {
        self.maps.get_mut()
    }

    /// Folds event `sequence` in. Must be called for every event in sequence order.
    pub(crate) fn apply(&mut self, sequence: u64, event: &Event) {
        debug_assert_eq!(sequence, self.revision + 1, "events are applied densely");
        self.revision = sequence;
        match event {
            Event::UserMessage(m) => {
                let maps = self.maps.get_mut();
                maps.invocations.insert(
                    m.invocation.clone(),
                    InvocationState {
                        message: sequence,
                        settled: false,
                        settled_at: 0,
                    },
                );
                maps.queue.insert(sequence, m.invocation.clone());
                if self.first_line.is_none() {
                    self.first_line = title_line(&m.text).map(|t| (sequence, t));
                }
            }
            Event::TurnSettled(t) => {
                let maps = self.maps.get_mut();
                if let Some(inv) = maps.invocations.get_mut(&t.invocation) {
                    if !inv.settled {
                        inv.settled = true;
                        inv.settled_at = sequence;
                        maps.queue.remove(&inv.message);
                    }
                }
            }
            Event::ModelCompletion(c) => {
                for item in &c.items {
                    if let Item::ToolCall {
                        id, internal: true, ..
                    } = item
                    {
                        self.maps
                            .get_mut()
                            .internal_calls
                            .entry(id.clone())
                            .or_insert(sequence);
                    }
                }
            }
            Event::InteractionRequested(i) => {
                let maps = self.maps.get_mut();
                maps.interactions.insert(
                    i.interaction_id.clone(),
                    InteractionState {
                        requested: sequence,
                        resolved: None,
                    },
                );
                maps.pending.insert(sequence, i.interaction_id.clone());
            }
            Event::InteractionResolved(r) => {
                let maps = self.maps.get_mut();
                if let Some(s) = maps.interactions.get_mut(&r.interaction_id) {
                    if s.resolved.is_none() {
                        s.resolved = Some(sequence);
                        maps.pending.remove(&s.requested);
                    }
                }
            }
            Event::ContextPrepared(_) => self.maps.get_mut().contexts.push(sequence),
            Event::TitleSet(t) => self.titles.push((sequence, t.title.clone())),
            Event::ImportMark(m) => {
                if self.parent.is_none() {
                    self.parent = m.parent.clone().map(|p| (sequence, p));
                }
            }
            Event::SessionCreated(_) | Event::ToolResult(_) | Event::StopRequested(_) => {}
        }
    }

    /// The Session's title: the latest `setTitle`, else the first user message's first line.
    pub(crate) fn title(&self) -> Option<&str> {
        self.titles
            .last()
            .map(|(_, t)| t.as_str())
            .or(self.first_line.as_ref().map(|(_, t)| t.as_str()))
    }

    /// Is a row of this tool call (or its result) hidden?
    pub(crate) fn is_internal_call(&self, id: &str) -> bool {
        self.maps().internal_calls.contains_key(id)
    }

    /// Writes the checkpoint atomically (temporary file, fsync, rename, fsync of the
    /// directory), recording how long the row and receipt indexes were when it was taken, so
    /// an index found shorter on open is rebuilt rather than trusted.
    pub(crate) fn save_covering(&self, path: &Path, cover: Coverage) -> Result<(), EngineError> {
        let encode_err = |e: postcard::Error| {
            EngineError::corrupt(path, format!("cannot encode the state checkpoint: {e}"))
        };
        let mut payload = postcard::to_allocvec(&(
            self.revision,
            &self.titles,
            &self.first_line,
            &self.parent,
            cover,
        ))
        .map_err(encode_err)?;
        match (self.maps.maps.get(), &self.maps.encoded) {
            // Never decoded since it was loaded: the same bytes again.
            (None, Some(e)) => payload.extend_from_slice(e.bytes()),
            _ => {
                payload.extend_from_slice(&postcard::to_allocvec(self.maps()).map_err(encode_err)?)
            }
        }
        let mut bytes = Vec::with_capacity(CHECKPOINT_HEADER_BYTES + payload.len() + 4);
        bytes.extend_from_slice(&CHECKPOINT_MAGIC);
        bytes.extend_from_slice(&CHECKPOINT_FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&self.revision.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        crate::fsutil::write_atomic(path, &bytes)
    }

    /// Loads a checkpoint; `None` when it is absent, damaged or of another version (then the
    /// caller rebuilds: the checkpoint is derived data).
    #[cfg(test)]
    pub(crate) fn load(path: &Path) -> Option<State> {
        Self::load_covering(path).map(|(state, _)| state)
    }

    /// Loads a checkpoint and the index lengths it was taken with; `None` as for `load`. Its
    /// CRC is checked and the head decoded; the maps stay encoded until their first use.
    pub(crate) fn load_covering(path: &Path) -> Option<(State, Coverage)> {
        // Mapped, not read: a copy of a large checkpoint was most of a large Session's open.
        let file = Arc::new(logbook_log::io::map_replaced_file(path).ok()??);
        if file.len() < CHECKPOINT_HEADER_BYTES + 4 {
            return None;
        }
        let bytes: &[u8] = &file;
        if bytes[..8] != CHECKPOINT_MAGIC {
            return None;
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().ok()?);
        if version != CHECKPOINT_FORMAT_VERSION {
            return None;
        }
        let covered = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
        let payload_len = u64::from_le_bytes(bytes[24..32].try_into().ok()?);
        if payload_len > CHECKPOINT_PAYLOAD_BYTES_MAX
            || (bytes.len() as u64) != CHECKPOINT_HEADER_BYTES as u64 + payload_len + 4
        {
            return None;
        }
        let end = bytes.len() - 4;
        let crc = u32::from_le_bytes(bytes[end..].try_into().ok()?);
        if crc32fast::hash(&bytes[..end]) != crc {
            return None;
        }
        let (head, maps): (Head, &[u8]) =
            postcard::take_from_bytes(&bytes[CHECKPOINT_HEADER_BYTES..end]).ok()?;
        let (revision, titles, first_line, parent, cover) = head;
        let range = end - maps.len()..end;
        let state = State {
            revision,
            titles,
            first_line,
            parent,
            maps: LazyMaps {
                maps: OnceLock::new(),
                encoded: Some(Encoded {
                    file: Arc::clone(&file),
                    range,
                }),
            },
        };
        (state.revision == covered).then_some((state, cover))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{TurnSettled, UserMessage};

    #[test]
    fn checkpoint_round_trip_and_damage() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("state.ckpt");
        let mut s = State::default();
        s.apply(
            1,
            &Event::UserMessage(UserMessage {
                invocation: "i".into(),
                text: "t".into(),
                attachments: vec![],
            }),
        );
        s.apply(
            2,
            &Event::TurnSettled(TurnSettled {
                invocation: "j".into(),
                outcome: crate::event::Outcome::Failed,
            }),
        );
        s.save_covering(&path, Coverage::default()).expect("save");
        assert_eq!(State::load(&path), Some(s.clone()));
        let good = std::fs::read(&path).expect("read");
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x20;
            std::fs::write(&path, &bad).expect("write");
            assert_eq!(State::load(&path), None, "flipped byte {i} accepted");
        }
        for len in 0..good.len() {
            std::fs::write(&path, &good[..len]).expect("write");
            assert_eq!(State::load(&path), None, "truncated to {len} accepted");
        }
    }
}
