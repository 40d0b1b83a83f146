//! `logbook serve`: one JSON request per input line, one answer line per request.
//!
//! Answers are written in request order, because requests run one after the
//! other on the reading thread, except the waiting methods
//! ([`crate::dispatch::WAITING_METHODS`]), which run on a thread of their own
//! and answer whenever they finish, so they never hold up what follows them.
//! No input can stop the server: a line that is not a request gets an error
//! answer (with `id: null` when no id can be read) and the next line is read.
//! At the end of input every waiting request is answered at once with what its timeout
//! would give ([`Host::end_waits`]), and the server returns.

use std::io::{self, BufRead, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dispatch::{call, is_waiting};
use crate::error::{ApiError, ErrorCode};
use crate::host::Host;
use crate::wire::WireError;

/// Waiting requests in flight at once; past this a new one is answered `busy`.
pub const WAITS_IN_FLIGHT_MAX: usize = 256;
/// The longest request line read; a longer one is answered as malformed.
pub const REQUEST_LINE_BYTES_MAX: usize = 256 << 20;

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    method: String,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct IdOnly<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
}

/// Shared, line-atomic output.
#[derive(Clone)]
struct Out(Arc<Mutex<Box<dyn Write + Send>>>);

impl Out {
    fn line(&self, id: &str, tag: &str, body: &str) {
        let mut w = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
        // A closed stdout cannot be answered on; the loop ends at end of input anyway.
        let _ = writeln!(w, "{{\"id\":{id},\"{tag}\":{body}}}").and_then(|_| w.flush());
    }

    fn answer(&self, id: &str, result: Result<Box<RawValue>, ApiError>) {
        match result {
            Ok(raw) => self.line(id, "result", raw.get()),
            Err(err) => {
                let body = serde_json::to_string(&WireError::from(&err))
                    .expect("an error of two strings always encodes");
                self.line(id, "error", &body);
            }
        }
    }
}

/// Runs the server until `input` ends.
pub fn serve(
    host: Arc<Host>,
    mut input: impl BufRead,
    output: Box<dyn Write + Send>,
) -> io::Result<()> {
    let out = Out(Arc::new(Mutex::new(output)));
    let mut waits: Vec<JoinHandle<()>> = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = read_line(&mut input, &mut line)?;
        if n == 0 {
            break;
        }
        waits.retain(|h| !h.is_finished());
        handle_line(&host, &out, &line, &mut waits);
    }
    // Nothing more can be asked, so no wait can end on a later request; holding the Root
    // (and its writer lock) for the rest of a long timeout would only shut others out.
    // Waits answer now with what their timeout would give, and the server returns.
    host.end_waits();
    for handle in waits {
        let _ = handle.join();
    }
    Ok(())
}

/// Reads one line (without its end); lines past the limit are drained and kept cut.
fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<usize> {
    let mut total = 0;
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match memchr_newline(buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if line.len() < REQUEST_LINE_BYTES_MAX + 1 {
            let room = REQUEST_LINE_BYTES_MAX + 1 - line.len();
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        let used = done.unwrap_or(buf.len());
        total += used;
        input.consume(used);
        if done.is_some() {
            return Ok(total);
        }
    }
}

fn memchr_newline(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

fn handle_line(host: &Arc<Host>, out: &Out, line: &[u8], waits: &mut Vec<JoinHandle<()>>) {
    let malformed = |message: String| out.answer("null", Err(ApiError::invalid(message)));
    if line.len() > REQUEST_LINE_BYTES_MAX {
        return malformed(format!(
            "request line longer than {REQUEST_LINE_BYTES_MAX} bytes"
        ));
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return malformed("request line is not UTF-8".to_owned());
    };
    let text = text.trim_end_matches('\r');
    let request: Request<'_> = match serde_json::from_str(text) {
        Ok(r) => r,
        Err(err) => {
            let id = serde_json::from_str::<IdOnly<'_>>(text)
                .ok()
                .and_then(|r| r.id.map(|id| id.get().to_owned()))
                .unwrap_or_else(|| "null".to_owned());
            return out.answer(
                &id,
                Err(ApiError::invalid(format!("malformed request: {err}"))),
            );
        }
    };
    let id = request.id.map(RawValue::get).unwrap_or("null").to_owned();
    let method = request.method;
    let params = request.params.map(ToOwned::to_owned);
    if is_waiting(&method) {
        if waits.len() >= WAITS_IN_FLIGHT_MAX {
            let err = ApiError::new(
                ErrorCode::Busy,
                format!(
                    "{WAITS_IN_FLIGHT_MAX} waiting requests are in flight; wait for some to answer"
                ),
            );
            return out.answer(&id, Err(err));
        }
        let (host, out) = (host.clone(), out.clone());
        waits.push(std::thread::spawn(move || {
            run(&host, &out, &id, &method, params.as_deref())
        }));
    } else {
        run(host, out, &id, &method, params.as_deref());
    }
}

fn run(host: &Host, out: &Out, id: &str, method: &str, params: Option<&RawValue>) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        call(host, method, params, &mut |item| out.line(id, "item", item.get()))
    }))
    .unwrap_or_else(|_| {
        Err(ApiError::new(
            ErrorCode::Io,
            format!("internal failure while serving {method:?}; the server keeps running, please report it"),
        ))
    });
    out.answer(id, result);
}
