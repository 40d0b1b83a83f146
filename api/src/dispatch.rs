//! Method names to Host calls: parse the parameters, call, serialise the result.
//!
//! Used by `logbook serve` and by the command line's `--json` paths, so both
//! speak exactly the same shapes.

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
        // PENDING "fork" => out(root.fork(parse(params)?)?),
        // PENDING "forkReceipt" => out(root.fork_receipt(parse(params)?)?),
        // PENDING "diagnostics" => out(root.diagnostics(parse(params)?)?),
        // PENDING "watchDiagnostics" => out(root.watch_diagnostics(parse(params)?)?),
        // PENDING "recordDiagnostic" => out(root.record_diagnostic(parse(params)?)?),
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
        // PENDING "snapshotPatch" => out(host.snapshot_patch(parse(params)?)?),
        // PENDING "readPatch" => out(root.read_patch(parse(params)?)?),
        other => Err(ApiError::invalid(format!(
            "unknown method {other:?}; `logbook serve --help` lists the methods"
        ))),
    }
}
