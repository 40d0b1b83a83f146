//! Method names to Host calls: parse the parameters, call, serialise the result.
//!
//! Used by `logbook serve` and by the command line's `--json` paths, so both
//! speak exactly the same shapes. Below, every method with a request and its
//! answer, recorded from a real run (the same text is `docs/wire.md`).
//!
#![doc = include_str!("../../docs/wire.md")]

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
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
];

pub fn is_waiting(method: &str) -> bool {
    WAITING_METHODS.contains(&method)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
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
        "sessions" => out(root.sessions()?),
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
        "history" => out(root.history(parse(params)?)?),
        "source" => out(root.source(parse(params)?)?),
        "watch" => out(root.watch(parse(params)?)?),
        "search" => out(root.search(parse(params)?)?),
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
         order, except that {} answer when they are ready. readFile writes {{\"id\", \"item\"}} lines first.\n\n\
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
}
