//! History cursors (`after`) from anywhere: arbitrary strings, arbitrary bytes in cursor
//! armour, real cursors with characters changed, and well-formed cursors forged with a valid
//! checksum. The engine must answer `invalid_argument` for anything that is not a cursor of
//! this Session, fence and direction, and otherwise exactly the rows after (forward) or before
//! (backward) the position the cursor names — never a panic, never a misread.
//!
//! The expectation comes from an independent decoder of the documented layout (see
//! `engine/src/cursor.rs`) and a cursor-free reference page of every visible row under the
//! fence.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use logbook_engine::{
    AppendParams, CreateSessionParams, Direction, ErrorKind, Event, HistoryPage, HistoryParams,
    Position, Root, Row, CURSOR_VERSION,
};
use sha2::Digest as _;

const CURSOR_BYTES: usize = 35;
const SESSIONS: [&str; 2] = ["s", "t"];

struct Fixture {
    _dir: tempfile::TempDir,
    root: Root,
    /// Per Session: its revision.
    revision: [u64; 2],
    /// Real cursors met while paging with small limits.
    chain: Vec<String>,
}

fn events(json: &str) -> Vec<Event> {
    serde_json::from_str(json).expect("fixture events")
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temporary directory");
        let root = Root::open_or_init(&dir.path().join("root")).expect("root");
        for (n, sid) in SESSIONS.iter().enumerate() {
            root.create_session(CreateSessionParams {
                session_id: Some((*sid).into()),
                workspace: None,
                operation: format!("create-{sid}"),
            })
            .expect("create");
            for k in 0..(6 + 3 * n) {
                // Rows of several shapes, one internal tool call (hidden with its result).
                let internal = k % 4 == 1;
                let json = format!(
                    r#"[{{"kind":"userMessage","invocation":"i{k}","text":"q{k}","attachments":[]}},
                        {{"kind":"modelCompletion","invocation":"i{k}","model":"m","usage":null,"items":[
                          {{"kind":"assistant","body":"a{k}","thinking":"t{k}"}},
                          {{"kind":"toolCall","id":"c{k}","name":"n{k}","arguments":"{{","internal":{internal}}}]}},
                        {{"kind":"turnSettled","invocation":"i{k}","outcome":"completed"}}]"#
                );
                root.append(AppendParams {
                    session_id: (*sid).into(),
                    operation: format!("a{k}"),
                    events: events(&json),
                })
                .expect("append");
            }
        }
        let revision = [
            root.revision("s").expect("rev"),
            root.revision("t").expect("rev"),
        ];
        let mut chain = Vec::new();
        for (n, sid) in SESSIONS.iter().enumerate() {
            for through in [revision[n], revision[n] / 2] {
                for direction in [Direction::Forward, Direction::Backward] {
                    let mut after = None;
                    loop {
                        let p = page(&root, sid, Some(through), after, 3, direction)
                            .expect("real paging");
                        let Some(next) = p.next_after else { break };
                        chain.push(next.clone());
                        after = Some(next);
                    }
                }
            }
        }
        Fixture {
            _dir: dir,
            root,
            revision,
            chain,
        }
    })
}

fn page(
    root: &Root,
    sid: &str,
    through: Option<u64>,
    after: Option<String>,
    limit: u32,
    direction: Direction,
) -> Result<HistoryPage, logbook_engine::EngineError> {
    root.history(HistoryParams {
        session_id: sid.into(),
        through,
        after,
        limit: Some(limit),
        anchor: None,
        direction: Some(direction),
    })
}

fn tag(sid: &str) -> [u8; 8] {
    let d = sha2::Sha256::digest(sid.as_bytes());
    d[..8].try_into().expect("8 bytes")
}

fn armour(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The documented layout, decoded independently: Some(position) when the engine must accept.
fn expected_position(text: &str, sid: &str, through: u64, dir: Direction) -> Option<Position> {
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.as_bytes())
        .ok()?;
    if b.len() != CURSOR_BYTES || b[0] != b'H' || b[1] != CURSOR_VERSION {
        return None;
    }
    let crc = u32::from_le_bytes(b[31..35].try_into().ok()?);
    if crc32fast::hash(&b[..31]) != crc {
        return None;
    }
    let want_dir = match dir {
        Direction::Forward => 0,
        Direction::Backward => 1,
    };
    if b[2] != want_dir || b[3..11] != tag(sid) {
        return None;
    }
    if u64::from_le_bytes(b[11..19].try_into().ok()?) != through {
        return None;
    }
    Some(Position {
        source_sequence: u64::from_le_bytes(b[19..27].try_into().ok()?),
        item_index: u32::from_le_bytes(b[27..31].try_into().ok()?),
    })
}

#[derive(Arbitrary, Debug)]
enum Text {
    Raw(String),
    Armoured(Vec<u8>),
    Changed {
        which: u16,
        edits: Vec<(u8, u8)>,
    },
    Forged {
        backward: bool,
        fence: u8,
        sequence: u8,
        item: u8,
        other_session: bool,
        version: bool,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    text: Text,
    session: bool,
    fence: Option<u8>,
    backward: bool,
    limit: u8,
}

fuzz_target!(|input: Input| {
    let f = fixture();
    let n = usize::from(input.session);
    let sid = SESSIONS[n];
    let rev = f.revision[n];
    let through = input.fence.map(|x| u64::from(x) % (rev + 3));
    let dir = if input.backward {
        Direction::Backward
    } else {
        Direction::Forward
    };
    let limit = u32::from(input.limit % 8) + 1;
    let text = match &input.text {
        Text::Raw(s) => s.clone(),
        Text::Armoured(b) => armour(b),
        Text::Changed { which, edits } => {
            let mut b = f.chain[usize::from(*which) % f.chain.len()]
                .clone()
                .into_bytes();
            for (at, to) in edits {
                if !b.is_empty() {
                    let i = usize::from(*at) % b.len();
                    b[i] = *to;
                }
            }
            String::from_utf8_lossy(&b).into_owned()
        }
        Text::Forged {
            backward,
            fence,
            sequence,
            item,
            other_session,
            version,
        } => {
            let mut b = vec![
                b'H',
                if *version {
                    CURSOR_VERSION + 1
                } else {
                    CURSOR_VERSION
                },
            ];
            b.push(u8::from(*backward));
            b.extend_from_slice(&tag(if *other_session { SESSIONS[1 - n] } else { sid }));
            let fence = through.unwrap_or(rev) + u64::from(*fence % 4 == 3);
            b.extend_from_slice(&fence.to_le_bytes());
            b.extend_from_slice(&(u64::from(*sequence) % (rev + 3)).to_le_bytes());
            b.extend_from_slice(&(u32::from(*item) % 5).to_le_bytes());
            let crc = crc32fast::hash(&b);
            b.extend_from_slice(&crc.to_le_bytes());
            armour(&b)
        }
    };
    let got = page(&f.root, sid, through, Some(text.clone()), limit, dir);
    if through.is_some_and(|t| t > rev) {
        let err = got.expect_err("a fence beyond the revision is refused");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        return;
    }
    let fence = through.unwrap_or(rev);
    match expected_position(&text, sid, fence, dir) {
        None => {
            let err = got.expect_err("a foreign or damaged cursor must be refused");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        }
        Some(at) => {
            let got = got.unwrap_or_else(|e| panic!("a well-formed cursor was refused: {e}"));
            assert_eq!(got.through, fence);
            let all: Vec<Row> = page(&f.root, sid, Some(fence), None, 1024, dir)
                .expect("reference page")
                .rows;
            let rest: Vec<&Row> = all
                .iter()
                .filter(|r| match dir {
                    Direction::Forward => r.position > at,
                    Direction::Backward => r.position < at,
                })
                .collect();
            let want: Vec<&Row> = rest.iter().take(limit as usize).copied().collect();
            let have: Vec<&Row> = got.rows.iter().collect();
            assert_eq!(have, want, "rows after cursor position {at:?}");
            match &got.next_after {
                None => assert_eq!(rest.len(), want.len(), "the end came too early"),
                Some(next) => {
                    assert!(rest.len() > want.len(), "a cursor past the end");
                    let last = want.last().expect("a full page").position;
                    assert_eq!(expected_position(next, sid, fence, dir), Some(last));
                }
            }
        }
    }
});
