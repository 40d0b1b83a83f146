//! One stream of a transcript into its Session: created on the first import, grown by the
//! events of the lines after its last import mark on every later one.
//!
//! The import state of a Session is its last `importMark` event (see "Imported transcripts"
//! in `docs/format.md`): the origin, how many whole lines of the transcript are in, and their
//! digest. Each batch an import appends ends with a mark covering exactly the lines whose
//! events it carries, in the same `append`, so events and progress are committed together: a
//! crash leaves both or neither, and the next import starts after the last mark. A batch's
//! operation id is made of the origin, its line range and the digest of the lines up to its
//! end, so a batch repeated after a failure that did commit is answered from its receipt.

use serde_json::{json, Value};

use super::convert::Builder;
use super::lines::prefix_digests;
use super::transcript::Target;
use crate::demo::digest;
use crate::{dispatch, ApiError, Host};
use logbook_engine::{ErrorKind, Event, ImportMark};

/// Most events (besides the mark) in one `append` of an import.
pub const IMPORT_BATCH_EVENTS: usize = 256;

/// What an import did with one Session.
#[derive(Debug)]
pub enum Did {
    /// Made it, with this many events.
    New {
        events: usize,
    },
    /// Appended this many events to it.
    Grown {
        events: usize,
    },
    /// Nothing new for it (`lines`: whole lines after its mark that hold nothing for it).
    Unchanged {
        lines: usize,
    },
    /// The transcript is no longer what was imported from it: left alone.
    Rewritten(String),
    /// The Session id is held by a Session this import did not make: left alone.
    Taken(String),
    Failed(ApiError),
}

/// Where an existing Session's import stands.
enum Standing {
    /// Its last mark.
    Marked(ImportMark),
    /// Made by `createSession` and given no event since (titles aside): an import that
    /// stopped between its create and its first batch, or someone else's empty Session.
    Empty,
    /// It has events after its last mark (or none), of this kind.
    Changed(&'static str),
}

/// The last import mark of a Session at revision `revision`, reading back from its end over
/// titles (a person may rename an imported Session).
fn standing(host: &Host, id: &str, revision: u64) -> Result<Standing, ApiError> {
    for seq in (2..=revision).rev() {
        match host.root().read_event(id, seq)? {
            Event::ImportMark(m) => return Ok(Standing::Marked(m)),
            Event::TitleSet(_) => {}
            other => return Ok(Standing::Changed(other.kind())),
        }
    }
    Ok(Standing::Empty)
}

fn create(host: &Host, target: &Target, workspace: Option<&str>) -> Result<(), ApiError> {
    let op = format!("import-{}", &digest(target.origin.as_bytes())[7..31]);
    dispatch::call_value(
        host,
        "createSession",
        &json!({"sessionId": target.session_id, "workspace": workspace, "operation": op}),
    )
    .map(|_| ())
}

/// Imports one stream; `lines` are the transcript's whole lines. Returns what was done and
/// the first line that was new for this Session.
pub fn import(
    host: &Host,
    target: &Target,
    stream: &Builder,
    lines: &[&[u8]],
    workspace: Option<&str>,
) -> (Did, usize) {
    match try_import(host, target, stream, lines, workspace) {
        Ok(done) => done,
        Err(e) => (Did::Failed(e), 0),
    }
}

fn try_import(
    host: &Host,
    target: &Target,
    stream: &Builder,
    lines: &[&[u8]],
    workspace: Option<&str>,
) -> Result<(Did, usize), ApiError> {
    let id = target.session_id.as_str();
    let workspace = workspace
        .or(stream.workspace.as_deref())
        .filter(|w| w.starts_with('/') && !w.contains('\0') && w.len() <= 4096);
    let (start, new) = match host.root().revision(id) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            create(host, target, workspace)?;
            (0, true)
        }
        Err(e) => return Err(e.into()),
        Ok(revision) => match standing(host, id, revision)? {
            Standing::Marked(mark) => {
                if mark.origin != target.origin {
                    let why = format!("Session {id} holds an import of {}", mark.origin);
                    return Ok((Did::Taken(why), lines.len()));
                }
                let done = usize::try_from(mark.lines).unwrap_or(usize::MAX);
                if done > lines.len() {
                    let why = format!(
                        "it has {} whole line(s) now, {done} were imported",
                        lines.len()
                    );
                    return Ok((Did::Rewritten(why), lines.len()));
                }
                if prefix_digests(lines, &[done])[0] != mark.prefix_digest {
                    let why = format!("its first {done} line(s) are not the ones imported");
                    return Ok((Did::Rewritten(why), lines.len()));
                }
                (done, false)
            }
            // Ours when our createSession (same operation, same parameters) answers from its
            // receipt; someone else's Session answers conflict.
            Standing::Empty => match create(host, target, workspace) {
                Ok(()) => (0, true),
                Err(e) => {
                    let why = format!("Session {id} exists and was not made by import ({e})");
                    return Ok((Did::Taken(why), lines.len()));
                }
            },
            Standing::Changed(kind) => {
                let why = format!(
                    "Session {id} has a {kind} event after its last import: it was written to \
                     since, so import leaves it alone"
                );
                return Ok((Did::Taken(why), lines.len()));
            }
        },
    };
    let events: Vec<&(usize, Value)> = stream.events.iter().filter(|(l, _)| *l >= start).collect();
    if events.is_empty() {
        let did = if new {
            Did::New { events: 0 }
        } else {
            Did::Unchanged {
                lines: lines.len() - start,
            }
        };
        return Ok((did, start));
    }
    let batches = batches(&events, start, lines.len());
    let ends: Vec<usize> = batches.iter().map(|b| b.end).collect();
    let digests = prefix_digests(lines, &ends);
    let origin_tag = &digest(target.origin.as_bytes())[7..23];
    for (batch, prefix_digest) in batches.iter().zip(digests) {
        let mut batch_events: Vec<&Value> = events[batch.events.clone()]
            .iter()
            .map(|(_, e)| e)
            .collect();
        let mark = json!({"kind": "importMark", "origin": target.origin, "lines": batch.end,
            "prefixDigest": prefix_digest, "parent": target.parent});
        batch_events.push(&mark);
        let op = format!(
            "import-{origin_tag}-{}-{}-{}",
            batch.start,
            batch.end,
            &prefix_digest[7..23]
        );
        dispatch::call_value(
            host,
            "append",
            &json!({"sessionId": id, "operation": op, "events": batch_events}),
        )?;
    }
    let n = events.len();
    Ok((
        if new {
            Did::New { events: n }
        } else {
            Did::Grown { events: n }
        },
        start,
    ))
}

/// One `append` of an import: events `events` (indexes into the new events), which come from
/// lines `start..end` of the transcript.
#[derive(Debug, PartialEq, Eq)]
struct Batch {
    start: usize,
    end: usize,
    events: std::ops::Range<usize>,
}

/// Splits the new events (from lines `from..total`) into batches of at most
/// [`IMPORT_BATCH_EVENTS`] events at line boundaries. A line's events are never split (a mark
/// inside a line could not say how much of it is in): a line with more events than that is a
/// batch of its own (the engine takes up to 4,096 events in one append). The last batch ends
/// at `total`, so its mark covers the lines after the last event too.
fn batches(events: &[&(usize, Value)], from: usize, total: usize) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut first = 0;
    let mut start = from;
    while first < events.len() {
        let mut last = (first + IMPORT_BATCH_EVENTS).min(events.len());
        if last < events.len() {
            let line = events[last].0;
            let mut cut = last;
            while cut > first && events[cut - 1].0 == line {
                cut -= 1;
            }
            if cut > first {
                // Back to the start of the line that did not fit.
                last = cut;
            } else {
                // One line fills the batch: take all of it.
                while last < events.len() && events[last].0 == line {
                    last += 1;
                }
            }
        }
        let end = if last == events.len() {
            total
        } else {
            events[last].0
        };
        out.push(Batch {
            start,
            end,
            events: first..last,
        });
        first = last;
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_end_at_line_boundaries_and_the_last_at_the_end() {
        let ev: Vec<(usize, Value)> = (0..600).map(|i| (10 + i / 3, Value::Null)).collect();
        let refs: Vec<&(usize, Value)> = ev.iter().collect();
        let b = batches(&refs, 5, 400);
        assert_eq!(b[0].start, 5);
        assert_eq!(b.last().unwrap().end, 400);
        for w in b.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            assert_eq!(w[0].events.end, w[1].events.start);
            // No line is split between two batches.
            assert_ne!(ev[w[0].events.end - 1].0, ev[w[1].events.start].0);
        }
        assert!(b.iter().all(|b| b.events.len() <= IMPORT_BATCH_EVENTS));
        assert_eq!(b.iter().map(|b| b.events.len()).sum::<usize>(), 600);
        // One line with more events than a batch holds is one batch, never split.
        let mut one: Vec<(usize, Value)> = (0..700).map(|_| (3, Value::Null)).collect();
        one.push((4, Value::Null));
        let refs: Vec<&(usize, Value)> = one.iter().collect();
        let b = batches(&refs, 0, 5);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].end, b[0].events.len()), (4, 700));
    }
}
