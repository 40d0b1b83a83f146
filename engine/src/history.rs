//! Reads under a fence: history pages, source chunks, watch, interactions, context.

use crate::cursor::HistoryCursor;
use crate::error::EngineError;
use crate::event::{rows_of, Event, FieldList, RowKind};
use crate::params::{
    Anchor, ContextResult, Direction, FieldText, HistoryPage, HistoryParams, Interaction, Position,
    QueueEntry, Row, SourceParams, TextPage, WatchEvent, WatchResult,
};
use crate::session::{Inner, Session};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// Rows per history page when `limit` is null.
pub const PAGE_ROWS_DEFAULT: u32 = 128;
/// Most rows per history page.
pub const PAGE_ROWS_MAX: u32 = 1024;
/// Longest field text in a history row, in bytes; longer fields are cut (on a char boundary).
pub const FIELD_TEXT_BYTES_MAX: usize = 65_536;
/// Bytes per `source` chunk when `limit` is null.
pub const SOURCE_BYTES_DEFAULT: u64 = 65_536;
/// Most bytes per `source` chunk.
pub const SOURCE_BYTES_MAX: u64 = 1 << 20;
/// Most events one `watch` answer lists.
pub const WATCH_EVENTS_MAX: u64 = 256;
/// Longest `watch` wait, in milliseconds.
pub const WATCH_TIMEOUT_MS_MAX: u64 = 300_000;

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub(crate) fn prefix_on_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Resolves `through`: null = current revision; beyond it is an error.
pub(crate) fn fence(inner: &Inner, through: Option<u64>) -> Result<u64, EngineError> {
    let rev = inner.state.revision;
    match through {
        None => Ok(rev),
        Some(t) if t <= rev => Ok(t),
        Some(t) => Err(EngineError::invalid(format!(
            "through {t} is beyond the Session's revision {rev}; pass null or a revision you read"
        ))),
    }
}

/// A history row borrowed from the Session for the length of a [`Root::history_each`] call:
/// the same row as [`Row`] without a copy of its texts.
///
/// [`Root::history_each`]: crate::Root::history_each
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowRef<'a> {
    pub position: Position,
    pub kind: RowKind,
    pub invocation: &'a str,
    fields: FieldList<'a>,
}

/// A field of a [`RowRef`]: `text` is cut as in [`FieldText`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FieldRef<'a> {
    pub text: &'a str,
    /// UTF-8 length of the whole field.
    pub bytes: u64,
    pub truncated: bool,
}

impl<'a> RowRef<'a> {
    /// The row's fields as `(name, field)`, in the order of [`RowKind::fields`].
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, FieldRef<'a>)> + '_ {
        self.fields.iter().map(|&(name, text)| {
            let cut = prefix_on_boundary(text, FIELD_TEXT_BYTES_MAX);
            let field = FieldRef {
                text: cut,
                bytes: text.len() as u64,
                truncated: cut.len() < text.len(),
            };
            (name, field)
        })
    }

    /// The owned row.
    pub fn to_row(&self) -> Row {
        // Inserted one by one: `collect` would sort the one or two fields in a vector of its
        // own first, an allocation per row.
        let mut fields = BTreeMap::new();
        for (name, f) in self.fields() {
            let text = FieldText {
                text: f.text.to_owned(),
                bytes: f.bytes,
                truncated: f.truncated,
            };
            fields.insert(name.to_owned(), text);
        }
        Row {
            position: self.position,
            kind: self.kind,
            invocation: self.invocation.to_owned(),
            fields,
        }
    }
}

/// The same JSON as [`Row`]'s (fields in name order, as its map writes them).
impl Serialize for RowRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Fields<'r, 'a>(&'r RowRef<'a>);
        impl Serialize for Fields<'_, '_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut fields: [Option<(&str, FieldRef<'_>)>; 2] = [None, None];
                for (slot, f) in fields.iter_mut().zip(self.0.fields()) {
                    *slot = Some(f);
                }
                if let [Some(a), Some(b)] = &fields {
                    if b.0 < a.0 {
                        fields.swap(0, 1);
                    }
                }
                let mut m = s.serialize_map(Some(self.0.fields.len()))?;
                for (name, f) in fields.iter().flatten() {
                    m.serialize_entry(name, f)?;
                }
                m.end()
            }
        }
        let mut st = s.serialize_struct("Row", 4)?;
        st.serialize_field("position", &self.position)?;
        st.serialize_field("kind", &self.kind)?;
        st.serialize_field("invocation", self.invocation)?;
        st.serialize_field("fields", &Fields(self))?;
        st.end()
    }
}

/// Where a history page ends: the fence it was read under and the cursor to the next page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageEnd {
    pub through: u64,
    pub next_after: Option<String>,
}

/// The row of item `position.item_index` of an event that publishes `rows`.
/// The row index names an item its event does not have.
fn missing_item(position: Position) -> EngineError {
    EngineError::corrupt(
        "row.idx",
        format!(
            "row index names item {} of event {}, which has fewer rows",
            position.item_index, position.source_sequence
        ),
    )
}

impl Session {
    pub(crate) fn history(&self, p: &HistoryParams) -> Result<HistoryPage, EngineError> {
        let mut rows = Vec::with_capacity(p.limit.unwrap_or(PAGE_ROWS_DEFAULT) as usize);
        let end = self.history_each(p, |r| rows.push(r.to_row()))?;
        Ok(HistoryPage {
            through: end.through,
            rows,
            next_after: end.next_after,
        })
    }

    /// The history page `p` asks for, row by row to `each`, borrowed; returns where it ends.
    pub(crate) fn history_each(
        &self,
        p: &HistoryParams,
        mut each: impl FnMut(RowRef<'_>),
    ) -> Result<PageEnd, EngineError> {
        self.check_live()?;
        let limit = p.limit.unwrap_or(PAGE_ROWS_DEFAULT);
        if limit == 0 || limit > PAGE_ROWS_MAX {
            return Err(EngineError::invalid(format!(
                "limit must be 1 to {PAGE_ROWS_MAX} rows, got {limit}"
            )));
        }
        let direction = p.direction.unwrap_or_default();
        let inner = self.read();
        let through = fence(&inner, p.through)?;
        let n = inner.rows_through(through)?;
        if p.after.is_some() && p.anchor.is_some() {
            return Err(EngineError::invalid(
                "pass either after (a cursor) or anchor, not both",
            ));
        }
        // `start`: for forward the first ordinal to look at; for backward one past it.
        let mut reveal = None;
        let start = if let Some(after) = &p.after {
            let c = HistoryCursor::decode(after, &self.id, through, direction)?;
            match direction {
                Direction::Forward => inner
                    .row_upper_bound(c.last.source_sequence, c.last.item_index)?
                    .min(n),
                Direction::Backward => inner
                    .row_lower_bound(c.last.source_sequence, c.last.item_index)?
                    .min(n),
            }
        } else {
            match &p.anchor {
                None => match direction {
                    Direction::Forward => 0,
                    Direction::Backward => n,
                },
                Some(Anchor::Row { position, field }) => {
                    let i = inner.row_lower_bound(position.source_sequence, position.item_index)?;
                    let entry = inner.row(i)?.filter(|e| {
                        i < n
                            && e.sequence == position.source_sequence
                            && e.item == position.item_index
                    });
                    let Some(entry) = entry else {
                        return Err(EngineError::not_found(format!(
                            "row {}/{} under fence {through} of Session {}",
                            position.source_sequence, position.item_index, self.id
                        )));
                    };
                    // A client opens a search hit with field "thinking" or "body" whatever
                    // the row's kind (a tool call's `arguments` hit is opened as "body"), so
                    // those two are accepted on every row; other names must be the row's own.
                    if let Some(f) = field {
                        let known = matches!(f.as_str(), "body" | "thinking")
                            || entry.kind.fields().contains(&f.as_str());
                        if !known {
                            return Err(EngineError::invalid(format!(
                                "anchor field {f:?} is not a field of a {:?} row (fields: {:?})",
                                entry.kind,
                                entry.kind.fields()
                            )));
                        }
                    }
                    reveal = Some(i);
                    match direction {
                        Direction::Forward => i,
                        Direction::Backward => i + 1,
                    }
                }
                Some(Anchor::Event { sequence }) => {
                    if *sequence == 0 || *sequence > through {
                        return Err(EngineError::invalid(format!(
                            "anchor event {sequence} is outside 1..={through} (the fence)"
                        )));
                    }
                    match direction {
                        Direction::Forward => inner.row_lower_bound(*sequence, 0)?,
                        Direction::Backward => inner.row_lower_bound(sequence + 1, 0)?.min(n),
                    }
                }
            }
        };
        // Plain loops over the row index: an entry is small, and wrapping it in a `Result` per
        // row made the compiler shuffle it through the stack at odd offsets (store-forwarding
        // stalls that cost more than the rest of the loop).
        let unreadable = |i: u64| {
            EngineError::corrupt(
                self.dir().join("row.idx"),
                format!("row entry {i} is unreadable"),
            )
        };
        let mut picked = Vec::with_capacity(limit as usize);
        let mut more = false;
        let mut take = |i: u64, e: crate::session::RowEntry| -> bool {
            if e.hidden && reveal != Some(i) {
                return true;
            }
            if picked.len() == limit as usize {
                more = true;
                return false;
            }
            picked.push(e);
            true
        };
        match direction {
            Direction::Forward => {
                for i in start..n {
                    let Some(e) = inner.row(i)? else {
                        return Err(unreadable(i));
                    };
                    if !take(i, e) {
                        break;
                    }
                }
            }
            Direction::Backward => {
                for i in (0..start).rev() {
                    let Some(e) = inner.row(i)? else {
                        return Err(unreadable(i));
                    };
                    if !take(i, e) {
                        break;
                    }
                }
            }
        }
        // Backward pages show the end of a conversation, which clients read again: their
        // events are cached. Forward pages page through history once: they are not.
        let keep = direction == Direction::Backward;
        let mut reader = None;
        for run in picked.chunk_by(|a, b| a.sequence == b.sequence) {
            self.with_event_rows(&inner, run[0].sequence, keep, &mut reader, |sources| {
                for e in run {
                    let position = Position {
                        source_sequence: e.sequence,
                        item_index: e.item,
                    };
                    let Some(src) = sources.get(e.item as usize) else {
                        return Err(missing_item(position));
                    };
                    each(RowRef {
                        position,
                        kind: src.kind,
                        invocation: src.invocation,
                        fields: src.fields,
                    });
                }
                Ok::<(), EngineError>(())
            })??;
        }
        let next_after = match (more, picked.last()) {
            (true, Some(last)) => Some(
                HistoryCursor {
                    direction,
                    through,
                    last: Position {
                        source_sequence: last.sequence,
                        item_index: last.item,
                    },
                }
                .encode(&self.id),
            ),
            _ => None,
        };
        Ok(PageEnd {
            through,
            next_after,
        })
    }

    pub(crate) fn source(&self, p: &SourceParams) -> Result<TextPage, EngineError> {
        self.check_live()?;
        let limit = p.limit.unwrap_or(SOURCE_BYTES_DEFAULT);
        if limit == 0 || limit > SOURCE_BYTES_MAX {
            return Err(EngineError::invalid(format!(
                "limit must be 1 to {SOURCE_BYTES_MAX} bytes, got {limit}"
            )));
        }
        let inner = self.read();
        let through = fence(&inner, p.through)?;
        let pos = p.position;
        if pos.source_sequence == 0 || pos.source_sequence > through {
            return Err(EngineError::not_found(format!(
                "row {}/{} under fence {through} of Session {}",
                pos.source_sequence, pos.item_index, self.id
            )));
        }
        let event = self.event_arc(&inner, pos.source_sequence)?;
        drop(inner);
        let rows = rows_of(&event);
        let row = rows.get(pos.item_index as usize).ok_or_else(|| {
            EngineError::not_found(format!(
                "row {}/{} of Session {}",
                pos.source_sequence, pos.item_index, self.id
            ))
        })?;
        let text = row
            .fields
            .iter()
            .find(|(name, _)| *name == p.field)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                EngineError::invalid(format!(
                    "field {:?} is not a field of a {:?} row (fields: {:?})",
                    p.field,
                    row.kind,
                    row.kind.fields()
                ))
            })?;
        let after = p.after.unwrap_or(0);
        let total = text.len() as u64;
        if after > total {
            return Err(EngineError::invalid(format!(
                "after {after} is past the field's end ({total} bytes)"
            )));
        }
        let from = after as usize;
        if !text.is_char_boundary(from) {
            return Err(EngineError::invalid(format!(
                "after {after} is not on a character boundary"
            )));
        }
        let rest = &text[from..];
        let mut chunk = prefix_on_boundary(rest, limit as usize);
        if chunk.is_empty() && !rest.is_empty() {
            // Always advance by at least one character, even when it is longer than `limit`.
            let first = rest.chars().next().expect("rest is not empty");
            chunk = &rest[..first.len_utf8()];
        }
        let end = from + chunk.len();
        let next_after = (end < text.len()).then_some(end as u64);
        Ok(TextPage {
            text: chunk.to_owned(),
            next_after,
        })
    }

    pub(crate) fn interactions_pending(
        &self,
        inner: &Inner,
    ) -> Result<Vec<Interaction>, EngineError> {
        let mut out = Vec::with_capacity(inner.state.maps()?.pending.len());
        for id in inner.state.maps()?.pending.values() {
            if let Some(i) = self.interaction_in(inner, id)? {
                out.push(i);
            }
        }
        Ok(out)
    }

    pub(crate) fn interaction_in(
        &self,
        inner: &Inner,
        id: &str,
    ) -> Result<Option<Interaction>, EngineError> {
        let Some(st) = inner.state.maps()?.interactions.get(id) else {
            return Ok(None);
        };
        let Event::InteractionRequested(req) = self.event_at(inner, st.requested)? else {
            return Err(EngineError::corrupt(
                self.log().dir(),
                format!("event {} is not an interaction request", st.requested),
            ));
        };
        let response = match st.resolved {
            None => None,
            Some(seq) => match self.event_at(inner, seq)? {
                Event::InteractionResolved(r) => Some(r.response),
                _ => {
                    return Err(EngineError::corrupt(
                        self.log().dir(),
                        format!("event {seq} is not an interaction answer"),
                    ))
                }
            },
        };
        Ok(Some(Interaction {
            interaction_id: req.interaction_id,
            invocation: req.invocation,
            prompt: req.prompt,
            options: req.options,
            sequence: st.requested,
            response,
        }))
    }

    /// `ended`: the Root's waits are ended (see [`crate::Root::end_waits`]); the watch then
    /// answers at once, as at its timeout.
    pub(crate) fn watch(
        &self,
        after: Option<u64>,
        timeout_ms: Option<u64>,
        ended: &std::sync::atomic::AtomicBool,
    ) -> Result<WatchResult, EngineError> {
        self.check_live()?;
        let timeout_ms = timeout_ms.unwrap_or(0);
        if timeout_ms > WATCH_TIMEOUT_MS_MAX {
            return Err(EngineError::invalid(format!(
                "timeoutMs must be at most {WATCH_TIMEOUT_MS_MAX}, got {timeout_ms}"
            )));
        }
        let after = after.unwrap_or(0);
        // An `after` past the revision names events that do not exist: waiting on it would
        // skip the next ones (and `after + 1` overflows at u64::MAX). The revision only
        // grows, so a check now holds for the whole wait.
        let revision = self.read().state.revision;
        if after > revision {
            return Err(EngineError::invalid(format!(
                "after {after} is beyond the Session's revision {revision}; pass the nextAfter \
                 of a previous watch or a sequence at most {revision} (0 for the start)"
            )));
        }
        self.wait_for(after, std::time::Duration::from_millis(timeout_ms), ended);
        let inner = self.read();
        let rev = inner.state.revision;
        let last = rev.min(after.saturating_add(WATCH_EVENTS_MAX));
        let mut events = Vec::new();
        let mut s = after + 1;
        while s <= last {
            let kind = inner.event_kind(s)?.ok_or_else(|| {
                EngineError::corrupt(self.dir().join("seq.idx"), format!("no kind for event {s}"))
            })?;
            events.push(WatchEvent {
                sequence: s,
                kind: kind.to_owned(),
            });
            s += 1;
        }
        let queue = inner
            .state
            .maps()?
            .queue
            .iter()
            .map(|(seq, inv)| QueueEntry {
                invocation: inv.clone(),
                sequence: *seq,
            })
            .collect();
        let pending_interactions = self.interactions_pending(&inner)?;
        Ok(WatchResult {
            events,
            queue,
            pending_interactions,
            next_after: last.max(after),
        })
    }

    pub(crate) fn context(
        &self,
        through: Option<u64>,
    ) -> Result<Option<ContextResult>, EngineError> {
        self.check_live()?;
        let inner = self.read();
        let through = fence(&inner, through)?;
        let contexts = &inner.state.maps()?.contexts;
        let i = contexts.partition_point(|s| *s <= through);
        let Some(seq) = i.checked_sub(1).map(|i| contexts[i]) else {
            return Ok(None);
        };
        match self.event_at(&inner, seq)? {
            Event::ContextPrepared(c) => Ok(Some(ContextResult {
                sequence: seq,
                invocation: c.invocation,
                groups: c.groups,
                tools: c.tools,
                provider_usage: c.provider_usage,
            })),
            _ => Err(EngineError::corrupt(
                self.log().dir(),
                format!("event {seq} is not a contextPrepared"),
            )),
        }
    }
}
