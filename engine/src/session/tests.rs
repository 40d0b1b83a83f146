//! A panic inside a mutation, under the Session's locks: the Session is marked failed, refuses
//! calls with a clear error, and is opened again from disk by the Root's next call; no
//! sequence is ever written twice.

use super::*;
use crate::event::UserMessage;
use crate::params::{AppendParams, CreateSessionParams};
use crate::root::Root;
use std::cell::Cell;

thread_local! {
    /// Test hook: the next `mutate` on this thread panics right after its log append, before
    /// its index update (as a bug or an allocation failure there would).
    pub(super) static PANIC_AFTER_APPEND: Cell<bool> = const { Cell::new(false) };
}

fn user(op: &str) -> Vec<Event> {
    vec![Event::UserMessage(UserMessage {
        invocation: op.to_owned(),
        text: format!("text of {op}"),
        attachments: vec![],
    })]
}

fn append(root: &Root, op: &str) -> Result<crate::AppendResult, EngineError> {
    root.append(AppendParams {
        session_id: "s".into(),
        operation: op.into(),
        events: user(op),
    })
}

fn root_with_session(dir: &Path) -> Root {
    let root = Root::open_or_init(dir).expect("open");
    root.create_session(CreateSessionParams {
        session_id: Some("s".into()),
        workspace: None,
        operation: "create".into(),
    })
    .expect("create");
    append(&root, "a0").expect("a0");
    root
}

/// Every sequence of the log once, densely from 1 (reads the log itself, not the indexes).
fn log_sequences(s: &Session) -> Vec<u64> {
    s.log()
        .scan(s.log().start())
        .map(|r| r.expect("record"))
        .filter(|(_, rec, _)| rec.kind == records::KIND_EVENT)
        .map(|(_, rec, _)| {
            records::decode::<EventRecord>(s.log().dir(), "event", &rec.payload)
                .expect("event")
                .sequence
        })
        .collect()
}

fn assert_failed_clearly(e: &EngineError) {
    assert_eq!(e.kind(), crate::ErrorKind::Corrupt, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("Session s") && text.contains("reopened"),
        "{text}"
    );
}

#[test]
fn a_panic_in_a_build_closure_fails_the_session_until_it_is_reopened() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_with_session(&tmp.path().join("r"));
    let s = root.session("s").expect("session");
    let mut build = |_: &State, _: u64| -> Result<(Vec<Prepared>, Outcome), EngineError> {
        panic!("injected: a panic inside a mutation's build closure")
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.mutate(Mutation {
            operation: "boom",
            params: [0; 32],
            build: &mut build,
        })
    }));
    assert!(r.is_err(), "the build closure panicked");
    assert!(s.needs_reopen());
    // This object refuses every call, reads included, with an error naming the Session.
    assert_failed_clearly(&s.receipt("a0").expect_err("receipt lookup"));
    let page = crate::HistoryParams {
        session_id: "s".into(),
        through: None,
        after: None,
        limit: Some(10),
        anchor: None,
        direction: None,
    };
    assert_failed_clearly(&s.history(&page).expect_err("history"));
    // The Root's next call opens the Session again from disk, and it works.
    let a1 = append(&root, "a1").expect("append after the panic");
    assert_eq!((a1.first_sequence, a1.last_sequence), (3, 3));
    let fresh = root.session("s").expect("session");
    assert!(!Arc::ptr_eq(&fresh, &s), "a new Session object");
    assert_eq!(log_sequences(&fresh), [1, 2, 3]);
    root.history(page).expect("history after reopen");
    root.verify().expect("verify");
}

#[test]
fn a_panic_between_log_append_and_index_update_never_writes_a_sequence_twice() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = root_with_session(&dir);
    let s = root.session("s").expect("session");
    PANIC_AFTER_APPEND.with(|p| p.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| append(&root, "a1")));
    assert!(
        r.is_err(),
        "the mutation panicked after its batch reached the log"
    );
    // The batch and its receipt are in the log, but not in this object's indexes or receipt
    // map: serving or mutating from it would write sequence 3 again.
    assert_failed_clearly(&s.receipt("a1").expect_err("receipt lookup"));
    // The repeat reopens the Session; the replay finds the batch and its receipt, so the
    // repeat is answered from the receipt, not applied again.
    let again = append(&root, "a1").expect("repeat after the panic");
    assert_eq!((again.first_sequence, again.last_sequence), (3, 3));
    let a2 = append(&root, "a2").expect("a new mutation");
    assert_eq!(a2.first_sequence, 4);
    let fresh = root.session("s").expect("session");
    assert_eq!(log_sequences(&fresh), [1, 2, 3, 4]);
    root.verify().expect("verify");
    drop((s, fresh, root));
    let root = Root::open(&dir).expect("reopen");
    assert_eq!(root.revision("s").expect("rev"), 4);
    root.verify().expect("verify after reopen");
}

/// A small log sealed at close ends at the start of the segment after its records: its
/// replay is as long as its records (so it reads through the block cache and the read after
/// the open finds the block decompressed), not a whole segment.
#[test]
#[allow(clippy::unwrap_used)]
fn a_sealed_small_log_replays_its_records_not_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("log");
    let cfg = logbook_log::LogConfig::default();
    let log = Log::create(&d, cfg.clone()).unwrap();
    let payload = vec![b'x'; 1_000];
    for _ in 0..10 {
        log.append(&[Record {
            kind: 1,
            payload: &payload,
        }])
        .unwrap();
    }
    let records_end = log.end();
    log.seal_when_closed(1);
    drop(log);
    logbook_log::settle_closed_seals(&d, std::time::Duration::from_secs(60));
    let (log, _) = Log::open(&d, cfg).unwrap();
    assert_eq!(
        log.end().segment,
        records_end.segment + 1,
        "sealed at close"
    );
    let bytes = replay_bytes(&log, log.start(), u64::MAX).unwrap();
    assert_eq!(
        bytes,
        records_end.offset - logbook_log::SEGMENT_HEADER_BYTES
    );
    assert!(bytes <= REPLAY_CACHED_BYTES_MAX);
    // Counting stops once past `most`.
    assert!(replay_bytes(&log, log.start(), 100).unwrap() > 100);
}
