#![allow(dead_code)]
use logbook_engine::*;
use std::path::Path;

pub fn root_at(dir: &Path) -> Root {
    Root::open_or_init(dir).expect("open root")
}

/// A Root whose closes leave every Session's newest log segment active (not sealed), for
/// tests that damage or cut it after the close.
#[allow(dead_code)]
pub fn root_at_unsealed(dir: &Path) -> Root {
    Root::open_or_init_with(
        dir,
        RootOptions {
            seal_on_close_bytes_min: u64::MAX,
            ..RootOptions::default()
        },
    )
    .expect("open root")
}

/// Every Session (up to the largest page), newest activity first.
#[allow(dead_code)]
pub fn newest_first(root: &Root) -> Vec<SessionInfo> {
    root.sessions_page(SessionsParams {
        after: None,
        limit: Some(SESSIONS_PAGE_MAX),
        workspace: None,
        order: Some(SessionOrder::LastActivity),
    })
    .expect("sessions page")
    .sessions
}

pub fn create(root: &Root, id: &str) -> String {
    root.create_session(CreateSessionParams {
        session_id: Some(id.into()),
        workspace: Some("/work/space".into()),
        operation: format!("create-{id}"),
    })
    .expect("create")
    .session_id
}

pub fn events(json: &str) -> Vec<Event> {
    serde_json::from_str(json).expect("events json")
}

pub fn append(root: &Root, sid: &str, op: &str, json: &str) -> Result<AppendResult, EngineError> {
    root.append(AppendParams {
        session_id: sid.into(),
        operation: op.into(),
        events: events(json),
    })
}

pub fn tool_result(inv: &str, call: &str, body: &str) -> String {
    let digest = logbook_engine::validate::sha256_digest(body.as_bytes());
    serde_json::json!({
        "kind": "toolResult", "invocation": inv, "toolCallId": call, "status": "ok", "body": body,
        "raw": {"b": 1, "a": [1.50, 2e3]}, "parts": [{"kind": "text", "text": body}],
        "bytes": body.len(), "digest": digest
    })
    .to_string()
}

pub fn hist(
    root: &Root,
    sid: &str,
    through: Option<u64>,
    after: Option<String>,
    limit: u32,
    dir: Direction,
) -> HistoryPage {
    let params = HistoryParams {
        session_id: sid.into(),
        through,
        after,
        limit: Some(limit),
        anchor: None,
        direction: Some(dir),
    };
    let page = root.history(params.clone()).expect("history");
    // The borrowed form of the same page (under the fence it was read at, as appends may
    // go on): the same rows, the same JSON, the same end.
    let (mut rows, mut json) = (Vec::new(), Vec::new());
    let params = HistoryParams {
        through: Some(page.through),
        ..params
    };
    let end = root
        .history_each(params, |r| {
            rows.push(r.to_row());
            json.push(serde_json::to_string(&r).expect("json"));
        })
        .expect("history_each");
    assert_eq!(rows, page.rows);
    let want: Vec<String> = page
        .rows
        .iter()
        .map(|r| serde_json::to_string(r).expect("json"))
        .collect();
    assert_eq!(json, want);
    assert_eq!(
        (end.through, &end.next_after),
        (page.through, &page.next_after)
    );
    page
}

pub fn bodies(page: &HistoryPage) -> Vec<String> {
    page.rows
        .iter()
        .map(|r| {
            let f = r
                .fields
                .get("body")
                .or_else(|| r.fields.get("name"))
                .expect("a field");
            f.text.clone()
        })
        .collect()
}

/// A user message `text` sent to Session `sid` as operation `op`.
pub fn try_send(root: &Root, sid: &str, op: &str, text: &str) -> Result<SendResult, EngineError> {
    root.send(SendParams {
        session_id: sid.into(),
        operation: op.into(),
        text: text.into(),
        attachments: vec![],
    })
}

/// The kinds of Session `sid`'s events, oldest first.
pub fn event_kinds(root: &Root, sid: &str) -> Vec<String> {
    let rev = root.revision(sid).expect("revision");
    (1..=rev)
        .map(|s| {
            let e = serde_json::to_value(root.read_event(sid, s).expect("event")).expect("json");
            e["kind"].as_str().expect("kind").to_owned()
        })
        .collect()
}

/// Every hit of a Root-wide search of `query` (case-insensitive, not whole-word) over
/// `scope`, following its pages of at most `limit` hits.
pub fn search_root_all(
    root: &Root,
    query: &str,
    scope: Option<SearchScope>,
    limit: u32,
) -> Vec<RootHit> {
    let (mut hits, mut after) = (Vec::new(), None);
    loop {
        let page = root
            .search_root(SearchRootParams {
                query: query.into(),
                case_sensitive: None,
                whole_word: None,
                scope: scope.clone(),
                after,
                limit: Some(limit),
            })
            .expect("searchRoot page");
        hits.extend(page.hits);
        after = page.next_after;
        if after.is_none() {
            return hits;
        }
    }
}
