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
//! | 12 | 4 | H: length of the head |
//! | 16 | 8 | covered sequence (= the revision the state reflects) |
//! | 24 | 8 | payload length P (head and maps) |
//! | 32 | H | postcard of (revision, titles, first line, parent, index coverage) |
//! | 32+H | P-H | postcard of the maps |
//! | 32+P | 4 | CRC-32 of bytes 0..32+H (the header and the head): checked at load |
//! | 36+P | 4 | CRC-32 of bytes 32+H..32+P (the maps): checked when they are first decoded |

use crate::error::EngineError;
use crate::event::{Event, Item};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Magic bytes of a state checkpoint file.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"LBSTATE\0";
/// Version of the state checkpoint file.
pub const CHECKPOINT_FORMAT_VERSION: u32 = 7;
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

/// [`Maps`] as loaded from a checkpoint: its encoded bytes until the first use checks their
/// CRC and decodes them. Opening a Session and reading its history never need them, so an open
/// costs the same however long the history is, and never reads (or maps in) their pages.
#[derive(Clone, Default)]
pub(crate) struct LazyMaps {
    /// `None` once decoding found the encoded bytes damaged.
    maps: OnceLock<Option<Maps>>,
    encoded: Option<Encoded>,
}

/// Bytes `range` of a checkpoint file as it was mapped (no copy is made: a checkpoint is
/// replaced whole by a rename, never written in place, so the map keeps the bytes), with the
/// CRC they were written with, and where to report that they fail it.
#[derive(Clone)]
struct Encoded {
    file: Arc<memmap2::Mmap>,
    range: std::ops::Range<usize>,
    crc: u32,
    path: Arc<Path>,
    damaged: Arc<AtomicBool>,
}

impl Encoded {
    fn bytes(&self) -> &[u8] {
        &self.file[self.range.clone()]
    }

    /// The decoded maps; `None` (and the damage reported) when the bytes fail their CRC.
    fn decode(&self) -> Option<Maps> {
        let maps = decode_maps(self.bytes(), self.crc);
        if maps.is_none() {
            self.damaged.store(true, Ordering::Release);
        }
        maps
    }
}

impl LazyMaps {
    /// The maps, decoded now if they were not yet; `None` when their bytes are damaged.
    fn get(&self) -> Option<&Maps> {
        self.maps
            .get_or_init(|| match &self.encoded {
                Some(e) => e.decode(),
                None => Some(Maps::default()),
            })
            .as_ref()
    }

    fn get_mut(&mut self) -> Option<&mut Maps> {
        self.get();
        if self.maps.get().is_some_and(Option::is_some) {
            self.encoded = None;
        }
        self.maps.get_mut().and_then(Option::as_mut)
    }

    /// The error a use of damaged maps answers: a derived file's checksum mismatch, which
    /// the Root answers by opening the Session again from its log and trying once more (see
    /// `Shared::with_descriptors`), so a caller sees it only if the rebuild fails too.
    fn damaged(&self) -> EngineError {
        let Some(e) = &self.encoded else {
            return EngineError::corrupt("state.ckpt", "the state's maps are damaged");
        };
        EngineError::Index(logbook_index::IndexError::ChecksumMismatch {
            path: e.path.to_path_buf(),
            offset: e.range.start as u64,
            expected: e.crc,
            got: crc32fast::hash(e.bytes()),
        })
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
    /// The maps (decoded now if they were not yet); a checksum mismatch when the checkpoint's
    /// maps fail their CRC (reported to the Session, which is then opened again from its log).
    pub(crate) fn maps(&self) -> Result<&Maps, EngineError> {
        self.maps.get().ok_or_else(|| self.maps.damaged())
    }

    /// True when the maps were found damaged: the state is not to be trusted or saved.
    pub(crate) fn maps_damaged(&self) -> bool {
        matches!(self.maps.maps.get(), Some(None))
    }

    /// The maps, to change them; fails as [`State::maps`] does.
    pub(crate) fn maps_mut(&mut self) -> Result<&mut Maps, EngineError> {
        if self.maps.get().is_none() {
            return Err(self.maps.damaged());
        }
        Ok(self.maps.get_mut().expect("checked above"))
    }

    /// Folds event `sequence` in. Must be called for every event in sequence order.
    pub(crate) fn apply(&mut self, sequence: u64, event: &Event) {
        debug_assert_eq!(sequence, self.revision + 1, "events are applied densely");
        self.revision = sequence;
        match event {
            Event::UserMessage(m) => {
                if self.first_line.is_none() {
                    self.first_line = title_line(&m.text).map(|t| (sequence, t));
                }
                let Some(maps) = self.maps.get_mut() else {
                    return;
                };
                maps.invocations.insert(
                    m.invocation.clone(),
                    InvocationState {
                        message: sequence,
                        settled: false,
                        settled_at: 0,
                    },
                );
                maps.queue.insert(sequence, m.invocation.clone());
            }
            Event::TurnSettled(t) => {
                let Some(maps) = self.maps.get_mut() else {
                    return;
                };
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
                        let Some(maps) = self.maps.get_mut() else {
                            return;
                        };
                        maps.internal_calls.entry(id.clone()).or_insert(sequence);
                    }
                }
            }
            Event::InteractionRequested(i) => {
                let Some(maps) = self.maps.get_mut() else {
                    return;
                };
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
                let Some(maps) = self.maps.get_mut() else {
                    return;
                };
                if let Some(s) = maps.interactions.get_mut(&r.interaction_id) {
                    if s.resolved.is_none() {
                        s.resolved = Some(sequence);
                        maps.pending.remove(&s.requested);
                    }
                }
            }
            Event::ContextPrepared(_) => {
                if let Some(maps) = self.maps.get_mut() {
                    maps.contexts.push(sequence);
                }
            }
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
    /// (False when the maps are damaged: the Session is then out of service, see
    /// [`State::maps`].)
    pub(crate) fn is_internal_call(&self, id: &str) -> bool {
        self.maps
            .get()
            .is_some_and(|m| m.internal_calls.contains_key(id))
    }

    /// Writes the checkpoint atomically (temporary file, fsync, rename, fsync of the
    /// directory), recording how long the row and receipt indexes were when it was taken, so
    /// an index found shorter on open is rebuilt rather than trusted.
    pub(crate) fn save_covering(&self, path: &Path, cover: Coverage) -> Result<(), EngineError> {
        crate::fsutil::write_atomic(path, &self.encode_checkpoint(path, cover)?)
    }

    /// The bytes of checkpoint file `path` (layout in the module documentation).
    fn encode_checkpoint(&self, path: &Path, cover: Coverage) -> Result<Vec<u8>, EngineError> {
        let encode_err = |e: postcard::Error| {
            EngineError::corrupt(path, format!("cannot encode the state checkpoint: {e}"))
        };
        let head = postcard::to_allocvec(&(
            self.revision,
            &self.titles,
            &self.first_line,
            &self.parent,
            cover,
        ))
        .map_err(encode_err)?;
        let encoded;
        let (maps, maps_crc): (&[u8], u32) = match (self.maps.maps.get(), &self.maps.encoded) {
            // Never decoded since it was loaded: the same bytes again, with the CRC they were
            // written with (unchecked bytes are carried, never vouched for).
            (None, Some(e)) => (e.bytes(), e.crc),
            _ => {
                encoded = postcard::to_allocvec(self.maps()?).map_err(encode_err)?;
                (&encoded, crc32fast::hash(&encoded))
            }
        };
        let head_len = u32::try_from(head.len())
            .map_err(|_| EngineError::corrupt(path, "the state checkpoint's head is over 4 GiB"))?;
        let payload_len = (head.len() + maps.len()) as u64;
        let mut bytes = Vec::with_capacity(CHECKPOINT_HEADER_BYTES + head.len() + maps.len() + 8);
        bytes.extend_from_slice(&CHECKPOINT_MAGIC);
        bytes.extend_from_slice(&CHECKPOINT_FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&head_len.to_le_bytes());
        bytes.extend_from_slice(&self.revision.to_le_bytes());
        bytes.extend_from_slice(&payload_len.to_le_bytes());
        bytes.extend_from_slice(&head);
        let head_crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(maps);
        bytes.extend_from_slice(&head_crc.to_le_bytes());
        bytes.extend_from_slice(&maps_crc.to_le_bytes());
        Ok(bytes)
    }

    /// Loads a checkpoint; `None` when it is absent, damaged or of another version (then the
    /// caller rebuilds: the checkpoint is derived data).
    #[cfg(test)]
    pub(crate) fn load(path: &Path) -> Option<State> {
        Self::load_covering(path, &Arc::default(), true).map(|(state, _)| state)
    }

    /// Loads a checkpoint and the index lengths it was taken with; `None` as for `load`. The
    /// header and the head are checked (their CRC) and decoded; the maps stay encoded, their
    /// pages never read, until their first use checks their own CRC and decodes them
    /// (`maps_now`: at once), reporting damage found then to `damaged`.
    pub(crate) fn load_covering(
        path: &Path,
        damaged: &Arc<AtomicBool>,
        maps_now: bool,
    ) -> Option<(State, Coverage)> {
        // Mapped, not read: a copy of a large checkpoint was most of a large Session's open.
        let file = Arc::new(logbook_log::io::map_replaced_file(path).ok()??);
        let parsed = parse_checkpoint(&file)?;
        let (revision, titles, first_line, parent, cover) = parsed.head;
        let state = State {
            revision,
            titles,
            first_line,
            parent,
            maps: LazyMaps {
                maps: OnceLock::new(),
                encoded: Some(Encoded {
                    crc: parsed.maps_crc,
                    file: Arc::clone(&file),
                    range: parsed.maps,
                    path: path.into(),
                    damaged: Arc::clone(damaged),
                }),
            },
        };
        if maps_now && state.maps.get().is_none() {
            return None;
        }
        (state.revision == parsed.covered).then_some((state, cover))
    }
}

/// A checkpoint file's bytes whose header and head passed their CRC: the head decoded, and
/// where the maps are with the CRC they must match.
struct Parsed {
    head: Head,
    covered: u64,
    maps: std::ops::Range<usize>,
    maps_crc: u32,
}

/// A checkpoint's maps from their bytes, when those match `crc` and decode.
fn decode_maps(bytes: &[u8], crc: u32) -> Option<Maps> {
    (crc32fast::hash(bytes) == crc)
        .then(|| postcard::from_bytes(bytes).ok())
        .flatten()
}

/// Checks a checkpoint's header and head (magic, version, lengths, their CRC) and decodes the
/// head; `None` when any of it is wrong. The maps are not read.
fn parse_checkpoint(bytes: &[u8]) -> Option<Parsed> {
    let word = |at: usize| -> Option<[u8; 8]> { bytes.get(at..at + 8)?.try_into().ok() };
    let half = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if word(0)? != CHECKPOINT_MAGIC || half(8)? != CHECKPOINT_FORMAT_VERSION {
        return None;
    }
    let head_len = half(12)? as usize;
    let covered = u64::from_le_bytes(word(16)?);
    let payload_len = u64::from_le_bytes(word(24)?);
    if payload_len > CHECKPOINT_PAYLOAD_BYTES_MAX
        || head_len as u64 > payload_len
        || (bytes.len() as u64) != CHECKPOINT_HEADER_BYTES as u64 + payload_len + 8
    {
        return None;
    }
    let maps_at = CHECKPOINT_HEADER_BYTES + head_len;
    let end = bytes.len() - 8;
    if crc32fast::hash(&bytes[..maps_at]) != half(end)? {
        return None;
    }
    Some(Parsed {
        head: postcard::from_bytes(&bytes[CHECKPOINT_HEADER_BYTES..maps_at]).ok()?,
        covered,
        maps: maps_at..end,
        maps_crc: half(end + 4)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{TurnSettled, UserMessage};

    /// The bytes alone (no file, no map: this one runs under miri): every flipped byte is
    /// refused by the head's check or by the maps' CRC, every truncation by the lengths.
    #[test]
    fn checkpoint_bytes_round_trip_and_damage() {
        let mut s = State::default();
        s.apply(
            1,
            &Event::UserMessage(UserMessage {
                invocation: "i".into(),
                text: "first line\nsecond".into(),
                attachments: vec![],
            }),
        );
        s.apply(
            2,
            &Event::TurnSettled(TurnSettled {
                invocation: "i".into(),
                outcome: crate::event::Outcome::Failed,
            }),
        );
        let cover = Coverage {
            rows: 3,
            receipts: 1,
        };
        let good = s
            .encode_checkpoint(Path::new("state.ckpt"), cover)
            .expect("encodes");
        let maps_ok = |b: &[u8], p: &Parsed| decode_maps(&b[p.maps.clone()], p.maps_crc).is_some();
        let p = parse_checkpoint(&good).expect("parses");
        assert_eq!((p.covered, p.head.0, p.head.4), (2, 2, cover));
        assert_eq!(p.head.2, Some((1, "first line".to_owned())));
        assert_eq!(
            decode_maps(&good[p.maps.clone()], p.maps_crc).as_ref(),
            s.maps().ok()
        );
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x20;
            if let Some(p) = parse_checkpoint(&bad) {
                assert!(!maps_ok(&bad, &p), "flipped byte {i} accepted");
            }
        }
        for len in 0..good.len() {
            assert!(
                parse_checkpoint(&good[..len]).is_none(),
                "cut to {len} accepted"
            );
        }
    }

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

    /// The maps are checked at their first use, not at load: damage there loads, fails that
    /// use with `corrupt` and reports itself; a checkpoint saved again before any use carries
    /// the unchecked bytes with their own CRC, so the damage stays visible.
    #[test]
    fn maps_checked_at_first_use() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("state.ckpt");
        let mut s = State::default();
        s.apply(
            1,
            &Event::UserMessage(UserMessage {
                invocation: "inv".into(),
                text: "hello".into(),
                attachments: vec![],
            }),
        );
        s.save_covering(&path, Coverage::default()).expect("save");
        let good = std::fs::read(&path).expect("read");
        // The last maps byte: the file ends with the two CRCs.
        let mut bad = good.clone();
        let at = good.len() - 9;
        bad[at] ^= 0x01;
        std::fs::write(&path, &bad).expect("write");
        let damaged = Arc::new(AtomicBool::new(false));
        let (loaded, _) = State::load_covering(&path, &damaged, false).expect("head is good");
        assert_eq!(loaded.revision, 1);
        assert!(
            !damaged.load(Ordering::Acquire),
            "nothing checked before the first use"
        );
        let again = dir.path().join("again.ckpt");
        loaded
            .save_covering(&again, Coverage::default())
            .expect("save undecoded");
        assert_eq!(
            std::fs::read(&again).expect("read"),
            bad,
            "carried as loaded"
        );
        let e = loaded.maps().expect_err("damaged");
        assert!(e.is_index_damage(), "{e}");
        assert!(damaged.load(Ordering::Acquire) && loaded.maps_damaged());
        assert!(loaded.save_covering(&again, Coverage::default()).is_err());
        assert!(State::load_covering(&again, &Arc::default(), true).is_none());
        // Undamaged, the same lazy load decodes to the state saved.
        std::fs::write(&path, &good).expect("write");
        let (loaded, _) = State::load_covering(&path, &damaged, false).expect("load");
        assert_eq!(loaded, s);
    }
}
