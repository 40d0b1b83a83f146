//! Method names to Host calls: parse the parameters, call, serialise the result.
//!
//! Used by `logbook serve` and by the command line's `--json` paths, so both
//! speak exactly the same shapes. Below, every method with a request and its
//! answer, recorded from a real run (the same text is `docs/wire.md`).
//!
#![doc = include_str!("../../docs/wire.md")]

use std::cell::RefCell;

use logbook_engine::{HistoryParams, PageEnd, Root};
use serde::de::DeserializeOwned;
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::{to_raw_value, RawValue};

use crate::error::ApiError;
use crate::host::Host;
use crate::wire::*;

/// Methods that may wait; the server runs them aside so they hold up nothing.
pub const WAITING_METHODS: &[&str] = &["watch", "watchDiagnostics", "watchFilesNext"];

/// Every method the server answers, in the order SPEC lists them.
pub const METHODS: &[&str] = &[
    "createSession",
    "sessions",
    "append",
    "send",
    "stop",
    "pendingInteractions",
    "interaction",
    "respond",
    "history",
    "source",
    "watch",
    "search",
    "searchRoot",
    "fork",
    "forkReceipt",
    "diagnostics",
    "watchDiagnostics",
    "recordDiagnostic",
    "context",
    "attachments",
    "readAttachments",
    "listFiles",
    "watchFilesOpen",
    "watchFilesNext",
    "watchFilesClose",
    "readFile",
    "gitStatus",
    "gitDiff",
    "snapshotPatch",
    "readPatch",
    "verify",
    "recoveries",
    "setTitle",
    "exportSession",
    "importBundle",
];

pub fn is_waiting(method: &str) -> bool {
    WAITING_METHODS.contains(&method)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InteractionParams {
    session_id: String,
    interaction_id: String,
}

fn parse<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, ApiError> {
    let text = params.map(RawValue::get).unwrap_or("{}");
    if text.trim() == "null" {
        return serde_json::from_str("{}").map_err(ApiError::from);
    }
    Ok(serde_json::from_str(text)?)
}

fn out<T: Serialize>(value: T) -> Result<Box<RawValue>, ApiError> {
    to_raw_value(&value)
        .map_err(|err| ApiError::new(crate::ErrorCode::Io, format!("cannot encode result: {err}")))
}

/// `history`, written as JSON straight from the rows the engine lends ([`Root::history_each`]),
/// with no owned copy of each row; the same JSON as [`HistoryPage`]'s.
///
/// [`HistoryPage`]: logbook_engine::HistoryPage
fn history(root: &Root, mut p: HistoryParams) -> Result<Box<RawValue>, ApiError> {
    // The fence is fixed first, so `through` is written before the rows. A null fence is the
    // revision now, which is what the engine would resolve it to.
    if p.through.is_none() {
        p.through = Some(root.revision(&p.session_id)?);
    }
    let page = PageJson {
        root,
        params: p,
        failed: RefCell::new(None),
    };
    match to_raw_value(&page) {
        Ok(raw) => Ok(raw),
        Err(err) => match page.failed.into_inner() {
            Some(engine) => Err(engine.into()),
            None => Err(ApiError::new(
                crate::ErrorCode::Io,
                format!("cannot encode result: {err}"),
            )),
        },
    }
}

/// A history page being read while it is serialised.
struct PageJson<'a> {
    root: &'a Root,
    params: HistoryParams,
    /// The engine's error, when the read failed (serde carries only a message).
    failed: RefCell<Option<logbook_engine::EngineError>>,
}

impl Serialize for PageJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let end = RefCell::new(None);
        let mut st = s.serialize_struct("HistoryPage", 3)?;
        st.serialize_field("through", &self.params.through)?;
        st.serialize_field(
            "rows",
            &RowsJson {
                page: self,
                end: &end,
            },
        )?;
        let end: Option<PageEnd> = end.into_inner();
        st.serialize_field("nextAfter", &end.and_then(|e| e.next_after))?;
        st.end()
    }
}

struct RowsJson<'p, 'a> {
    page: &'p PageJson<'a>,
    end: &'p RefCell<Option<PageEnd>>,
}

impl Serialize for RowsJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        let mut written = Ok(());
        let read = self
            .page
            .root
            .history_each(self.page.params.clone(), |row| {
                if written.is_ok() {
                    written = seq.serialize_element(&row);
                }
            });
        written?;
        match read {
            Ok(end) => *self.end.borrow_mut() = Some(end),
            Err(e) => {
                let msg = e.to_string();
                *self.page.failed.borrow_mut() = Some(e);
                return Err(serde::ser::Error::custom(msg));
            }
        }
        seq.end()
    }
}

/// Calls `method` with JSON `params`; `items` receives the streamed items of `readFile`.
pub fn call(
    host: &Host,
    method: &str,
    params: Option<&RawValue>,
    items: &mut dyn FnMut(Box<RawValue>),
) -> Result<Box<RawValue>, ApiError> {
    let root = host.root();
    match method {
        "createSession" => out(root.create_session(parse(params)?)?),
        "sessions" => out(root.sessions_page(parse(params)?)?),
        "setTitle" => out(root.set_title(parse(params)?)?),
        "verify" => out(root.verify()?),
        "recoveries" => out(root.recoveries()),
        "append" => out(root.append(parse(params)?)?),
        "send" => out(root.send(parse(params)?)?),
        "stop" => out(root.stop(parse(params)?)?),
        "pendingInteractions" => {
            let p: SessionParams = parse(params)?;
            out(root.pending_interactions(&p.session_id)?)
        }
        "interaction" => {
            let p: InteractionParams = parse(params)?;
            out(root.interaction(&p.session_id, &p.interaction_id)?)
        }
        "respond" => out(root.respond(parse(params)?)?),
        "history" => history(root, parse(params)?),
        "source" => out(root.source(parse(params)?)?),
        "watch" => out(root.watch(parse(params)?)?),
        "search" => out(root.search(parse(params)?)?),
        "searchRoot" => out(root.search_root(parse(params)?)?),
        "fork" => out(root.fork(parse(params)?)?),
        "forkReceipt" => out(root.fork_receipt(parse(params)?)?),
        "diagnostics" => out(root.diagnostics(parse(params)?)?),
        "watchDiagnostics" => out(root.watch_diagnostics(parse(params)?)?),
        "recordDiagnostic" => out(root.record_diagnostic(parse(params)?)?),
        "context" => out(root.context(parse(params)?)?),
        "attachments" => out(root.attachments(parse(params)?)?),
        "readAttachments" => out(root.read_attachments(parse(params)?)?),
        "listFiles" => out(host.list_files(parse(params)?)?),
        "watchFilesOpen" => out(host.watch_files_open(parse(params)?)?),
        "watchFilesNext" => out(host.watch_files_next(parse(params)?)?),
        "watchFilesClose" => out(host.watch_files_close(parse(params)?)?),
        "readFile" => {
            let mut failed = None;
            host.read_file(parse(params)?, &mut |item| match out(item) {
                Ok(raw) => items(raw),
                Err(err) => failed = Some(err),
            })?;
            match failed {
                Some(err) => Err(err),
                None => out(()),
            }
        }
        "gitStatus" => out(host.git_status(parse(params)?)?),
        "gitDiff" => out(host.git_diff(parse(params)?)?),
        "snapshotPatch" => out(host.snapshot_patch(parse(params)?)?),
        "readPatch" => out(root.read_patch(parse(params)?)?),
        "exportSession" => out(host.export_session(parse(params)?)?),
        "importBundle" => out(host.import_bundle(parse(params)?)?),
        other => Err(ApiError::invalid(format!(
            "unknown method {other:?}; `logbook serve --help` lists the methods"
        ))),
    }
}

/// [`call`] for callers that hold JSON values (the command line, the demo, import): no items.
pub fn call_value(
    host: &Host,
    method: &str,
    params: &serde_json::Value,
) -> Result<serde_json::Value, ApiError> {
    let raw = RawValue::from_string(params.to_string()).expect("a Value always encodes");
    let answer = call(host, method, Some(&raw), &mut |_| {})?;
    Ok(serde_json::from_str(answer.get()).expect("the dispatcher writes JSON"))
}

/// The long help of `logbook serve`: the protocol in brief and every method.
pub fn serve_help() -> String {
    format!(
        "Serve the JSON-lines protocol on standard input and output.\n\n\
         One request per line, {{\"id\": ANY, \"method\": NAME, \"params\": {{...}}}}; one answer per \
         request, {{\"id\", \"result\"}} or {{\"id\", \"error\": {{\"code\", \"message\"}}}}, in request \
         order, except that {} answer when they are ready. readFile writes {{\"id\", \"item\"}} lines first. \
         At the end of input, waits still pending answer at once, as at their timeout, and the \
         server exits.\n\n\
         Methods: {}",
        WAITING_METHODS.join(", "),
        METHODS.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_method_is_dispatched() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::open_or_init(&dir.path().join("root")).unwrap();
        let empty = RawValue::from_string("{}".to_owned()).unwrap();
        for method in METHODS {
            if is_waiting(method) {
                continue;
            }
            let answer = call(&host, method, Some(&empty), &mut |_| {});
            if let Err(err) = answer {
                assert!(
                    !err.message.starts_with("unknown method"),
                    "{method}: {err}"
                );
            }
        }
        let err = call(&host, "noSuchMethod", Some(&empty), &mut |_| {}).unwrap_err();
        assert!(err.message.starts_with("unknown method"));
    }

    #[test]
    fn history_is_written_from_borrowed_rows_as_the_page_would_be() {
        use logbook_engine::{
            AppendParams, CreateSessionParams, Direction, Event, Item, ModelCompletion, UserMessage,
        };
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        let host = Host::open_or_init(&dir.path().join("root")).unwrap();
        let root = host.root();
        root.create_session(CreateSessionParams {
            session_id: Some("s".into()),
            workspace: None,
            operation: "create".into(),
        })
        .unwrap();
        let long = "ü".repeat(40_000);
        let events = vec![
            Event::UserMessage(UserMessage {
                invocation: "i1".into(),
                text: "hello \"there\"\n".into(),
                attachments: vec![],
            }),
            Event::ModelCompletion(ModelCompletion {
                invocation: "i1".into(),
                model: "m".into(),
                items: vec![
                    Item::Assistant {
                        body: long.clone(),
                        thinking: Some("hmm".into()),
                    },
                    Item::ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        arguments: "{\"path\": 1".into(),
                        internal: false,
                    },
                ],
                usage: None,
            }),
        ];
        root.append(AppendParams {
            session_id: "s".into(),
            operation: "a1".into(),
            events,
        })
        .unwrap();
        let mut asked = 0;
        for through in [None, Some(1), Some(3)] {
            for direction in [Direction::Forward, Direction::Backward] {
                let mut after: Option<String> = None;
                loop {
                    let params = json!({
                        "sessionId": "s", "through": through, "after": after,
                        "limit": 1, "direction": direction,
                    });
                    let got = call_value(&host, "history", &params).unwrap();
                    let want = root
                        .history(serde_json::from_value(params).unwrap())
                        .unwrap();
                    assert_eq!(got, serde_json::to_value(&want).unwrap());
                    asked += 1;
                    after = want.next_after;
                    if after.is_none() {
                        break;
                    }
                }
            }
        }
        assert!(asked > 6, "pages were followed");
        // Errors keep their codes.
        let missing = json!({"sessionId": "nope"});
        let err = call_value(&host, "history", &missing).unwrap_err();
        assert_eq!(err.code, crate::ErrorCode::NotFound, "{err}");
        let bad = json!({"sessionId": "s", "after": "not a cursor"});
        let err = call_value(&host, "history", &bad).unwrap_err();
        assert_eq!(err.code, crate::ErrorCode::InvalidArgument, "{err}");
        let beyond = json!({"sessionId": "s", "through": 99});
        let err = call_value(&host, "history", &beyond).unwrap_err();
        assert_eq!(err.code, crate::ErrorCode::InvalidArgument, "{err}");
    }
}
