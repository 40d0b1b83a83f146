//! `logbook serve`: one JSON request per input line, one answer line per request.
//!
//! Answers are written in request order. Requests on different Sessions run at the same
//! time (at most [`REQUESTS_IN_FLIGHT_MAX`], on a pool of threads), so durable appends to
//! many Sessions share the disk's time instead of queueing for it; requests on the same
//! Session run one after the other in the order they were read, queued meanwhile without
//! holding up the requests behind them (up to [`REQUESTS_QUEUED_MAX`] read ahead). A request that names no
//! Session (`sessions`, `verify`, `createSession` without an id, ...), `readFile` (which
//! streams) and a malformed line each wait until everything read before them is answered
//! and run alone, so every request sees the effects of all requests before it that it could
//! depend on. The waiting methods ([`crate::dispatch::WAITING_METHODS`]) start the same way
//! but run on a thread of their own and answer whenever they finish, so they never hold up
//! what follows them.
//! No input can stop the server: a line that is not a request gets an error
//! answer (with `id: null` when no id can be read) and the next line is read.
//! At the end of input every waiting request is answered at once with what its timeout
//! would give ([`Host::end_waits`]), and the server returns.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, BufRead, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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
/// Requests on different Sessions that run at once (the server's pool of threads).
pub const REQUESTS_IN_FLIGHT_MAX: usize = 16;
/// Requests read ahead of their answers at most (the reader waits past this), so that a
/// request on a busy Session does not hold up the ones behind it on other Sessions...
pub const REQUESTS_QUEUED_MAX: usize = 4096;
/// ...and their parameters' bytes at most (one larger request is still taken alone).
pub const REQUESTS_QUEUED_BYTES_MAX: usize = 256 << 20;

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

/// The Session a request is about, when its parameters name one.
#[derive(Deserialize)]
struct SessionOnly {
    #[serde(default, rename = "sessionId")]
    session_id: Option<serde_json::Value>,
}

/// Shared, line-atomic output.
#[derive(Clone)]
struct Out(Arc<Mutex<Box<dyn Write + Send>>>);

impl Out {
    fn write(&self, text: &str) {
        let mut w = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
        // A closed stdout cannot be answered on; the loop ends at end of input anyway.
        let _ = w.write_all(text.as_bytes()).and_then(|_| w.flush());
    }

    fn line(&self, id: &str, tag: &str, body: &str) {
        self.write(&line(id, tag, body));
    }

    fn answer(&self, id: &str, result: Result<Box<RawValue>, ApiError>) {
        self.write(&answer(id, result));
    }
}

fn line(id: &str, tag: &str, body: &str) -> String {
    format!("{{\"id\":{id},\"{tag}\":{body}}}\n")
}

fn answer(id: &str, result: Result<Box<RawValue>, ApiError>) -> String {
    match result {
        Ok(raw) => line(id, "result", raw.get()),
        Err(err) => {
            let body = serde_json::to_string(&WireError::from(&err))
                .expect("an error of two strings always encodes");
            line(id, "error", &body)
        }
    }
}

/// A request run on the pool: `seq` orders its answer among the pool's.
struct Job {
    seq: u64,
    session: String,
    id: String,
    method: String,
    params: Option<Box<RawValue>>,
    /// The bytes of `params`, counted against [`REQUESTS_QUEUED_BYTES_MAX`] until answered.
    bytes: usize,
}

/// Pooled requests between being read and having their answer written.
#[derive(Default)]
struct Flight {
    /// Sessions with a request on the pool, each with the requests read after it, waiting.
    busy: HashMap<String, VecDeque<Job>>,
    /// Requests read and not yet answered, and the bytes of their parameters.
    unanswered: usize,
    unanswered_bytes: usize,
    /// Answers of finished requests waiting for an earlier one (with their parameter bytes).
    done: BTreeMap<u64, (String, usize)>,
    /// The next `seq` to hand out, and the next to write.
    next_seq: u64,
    next_out: u64,
}

struct Order {
    flight: Mutex<Flight>,
    changed: Condvar,
    /// The pool's queue; `None` once the input ended.
    pool: Mutex<Option<mpsc::Sender<Job>>>,
    out: Out,
}

impl Order {
    fn lock(&self) -> MutexGuard<'_, Flight> {
        self.flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, Flight>) -> MutexGuard<'a, Flight> {
        self.changed.wait(g).unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every pooled request read so far is answered (and so written).
    fn drain(&self) {
        let mut g = self.lock();
        while g.unanswered > 0 {
            g = self.wait(g);
        }
    }

    fn dispatch(&self, job: Job) {
        let pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let unsent = match pool.as_ref() {
            Some(tx) => tx.send(job).err().map(|mpsc::SendError(job)| job),
            None => Some(job),
        };
        drop(pool);
        if let Some(job) = unsent {
            // Only if a worker died outside `run`: answer rather than hang.
            let err = ApiError::new(ErrorCode::Io, "the server's threads are gone");
            self.finish(&job, answer(&job.id, Err(err)));
        }
    }

    /// Takes a request on Session `session`: it runs as soon as the requests read before it
    /// on that Session are answered. Waits while too much is read and unanswered.
    fn admit(&self, session: String, id: String, method: String, params: Option<Box<RawValue>>) {
        let bytes = params.as_ref().map_or(0, |p| p.get().len());
        let mut g = self.lock();
        while g.unanswered >= REQUESTS_QUEUED_MAX
            || (g.unanswered > 0 && g.unanswered_bytes + bytes > REQUESTS_QUEUED_BYTES_MAX)
        {
            g = self.wait(g);
        }
        let seq = g.next_seq;
        g.next_seq += 1;
        g.unanswered += 1;
        g.unanswered_bytes += bytes;
        let job = Job {
            seq,
            session,
            id,
            method,
            params,
            bytes,
        };
        if let Some(waiting) = g.busy.get_mut(&job.session) {
            waiting.push_back(job);
            return;
        }
        g.busy.insert(job.session.clone(), VecDeque::new());
        drop(g);
        self.dispatch(job);
    }

    /// Records the answer of `job`, writes every answer now next in line, and starts the
    /// next request waiting on its Session.
    fn finish(&self, job: &Job, text: String) {
        let mut g = self.lock();
        g.done.insert(job.seq, (text, job.bytes));
        loop {
            let next = g.next_out;
            let Some((text, bytes)) = g.done.remove(&next) else {
                break;
            };
            // Written under the lock, so answers leave in order.
            self.out.write(&text);
            g.next_out += 1;
            g.unanswered -= 1;
            g.unanswered_bytes -= bytes;
        }
        let next = match g.busy.get_mut(&job.session) {
            Some(waiting) => waiting.pop_front(),
            None => None,
        };
        if next.is_none() {
            g.busy.remove(&job.session);
        }
        drop(g);
        self.changed.notify_all();
        if let Some(job) = next {
            self.dispatch(job);
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
    let (jobs, queue) = mpsc::channel::<Job>();
    let order = Arc::new(Order {
        flight: Mutex::new(Flight::default()),
        changed: Condvar::new(),
        pool: Mutex::new(Some(jobs)),
        out: out.clone(),
    });
    let queue = Arc::new(Mutex::new(queue));
    let pool: Vec<JoinHandle<()>> = (0..REQUESTS_IN_FLIGHT_MAX)
        .map(|_| {
            let (host, order, queue) = (host.clone(), order.clone(), queue.clone());
            std::thread::spawn(move || loop {
                let job = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
                let Ok(job) = job else { break };
                // Pooled requests never stream items (`readFile` runs alone).
                let result = run(&host, &job.method, job.params.as_deref(), &mut |_| {});
                order.finish(&job, answer(&job.id, result));
            })
        })
        .collect();
    let mut waits: Vec<JoinHandle<()>> = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = read_line(&mut input, &mut line)?;
        if n == 0 {
            break;
        }
        waits.retain(|h| !h.is_finished());
        let server = Server {
            host: &host,
            out: &out,
            order: &order,
        };
        server.handle_line(&line, &mut waits);
    }
    order.drain();
    // Closing the queue ends the pool's threads.
    drop(order.pool.lock().unwrap_or_else(|p| p.into_inner()).take());
    for handle in pool {
        let _ = handle.join();
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

struct Server<'a> {
    host: &'a Arc<Host>,
    out: &'a Out,
    order: &'a Order,
}

impl Server<'_> {
    /// Answers a line that is not a request, in its place in the order.
    fn malformed(&self, id: &str, message: String) {
        self.order.drain();
        self.out.answer(id, Err(ApiError::invalid(message)));
    }

    fn handle_line(&self, line: &[u8], waits: &mut Vec<JoinHandle<()>>) {
        if line.len() > REQUEST_LINE_BYTES_MAX {
            return self.malformed(
                "null",
                format!("request line longer than {REQUEST_LINE_BYTES_MAX} bytes"),
            );
        }
        let Ok(text) = std::str::from_utf8(line) else {
            return self.malformed("null", "request line is not UTF-8".to_owned());
        };
        let text = text.trim_end_matches('\r');
        let request: Request<'_> = match serde_json::from_str(text) {
            Ok(r) => r,
            Err(err) => {
                let id = serde_json::from_str::<IdOnly<'_>>(text)
                    .ok()
                    .and_then(|r| r.id.map(|id| id.get().to_owned()))
                    .unwrap_or_else(|| "null".to_owned());
                return self.malformed(&id, format!("malformed request: {err}"));
            }
        };
        let id = request.id.map(RawValue::get).unwrap_or("null").to_owned();
        let method = request.method;
        let params = request.params.map(ToOwned::to_owned);
        if is_waiting(&method) {
            self.order.drain();
            if waits.len() >= WAITS_IN_FLIGHT_MAX {
                let err = ApiError::new(
                    ErrorCode::Busy,
                    format!(
                        "{WAITS_IN_FLIGHT_MAX} waiting requests are in flight; wait for some to answer"
                    ),
                );
                return self.out.answer(&id, Err(err));
            }
            let (host, out) = (self.host.clone(), self.out.clone());
            waits.push(std::thread::spawn(move || {
                let result = run(&host, &method, params.as_deref(), &mut |item| {
                    out.line(&id, "item", item.get())
                });
                out.answer(&id, result);
            }));
            return;
        }
        match session_of(&method, params.as_deref()) {
            Some(session) => self.order.admit(session, id, method, params),
            None => {
                self.order.drain();
                let out = self.out;
                let result = run(self.host, &method, params.as_deref(), &mut |item| {
                    out.line(&id, "item", item.get())
                });
                out.answer(&id, result);
            }
        }
    }
}

/// The Session a request runs on, when it may run beside requests on other Sessions:
/// its `sessionId` parameter, for every method but `readFile` (which streams its answer).
fn session_of(method: &str, params: Option<&RawValue>) -> Option<String> {
    if method == "readFile" {
        return None;
    }
    let p: SessionOnly = serde_json::from_str(params?.get()).ok()?;
    match p.session_id? {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

fn run(
    host: &Host,
    method: &str,
    params: Option<&RawValue>,
    items: &mut dyn FnMut(Box<RawValue>),
) -> Result<Box<RawValue>, ApiError> {
    catch_unwind(AssertUnwindSafe(|| call(host, method, params, items))).unwrap_or_else(|_| {
        Err(ApiError::new(
            ErrorCode::Io,
            format!("internal failure while serving {method:?}; the server keeps running, please report it"),
        ))
    })
}
