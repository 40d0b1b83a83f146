//! Replication of a Root of many Sessions under the macOS default descriptor limit, against a
//! real S3 server (s3s-fs on loopback): a Root of 2,000 small Sessions
//! (`LOGBOOK_REPLICA_SESSIONS` picks another number) is built through the engine, then
//! `logbook replicate` runs on it under `ulimit -n 256` while a writer appends to a few
//! Sessions and creates new ones, and `logbook restore` rebuilds it under the same limit.
//! Neither process may fail a round or run out of descriptors, and the restored Root answers
//! as the source: the same Sessions, each at the source's revision, and the same history for
//! a sample of them.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../replica/tests/common/mod.rs"]
mod s3;

use common::*;
use logbook_engine::{
    CreateSessionParams, Durability, HistoryParams, Root, RootOptions, SearchIndexing, SendParams,
};
use logbook_replica::store::REQUESTS_IN_FLIGHT;
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Sessions in the Root before replication starts (`LOGBOOK_REPLICA_SESSIONS` overrides it).
const SESSIONS: usize = 2_000;
/// The descriptor limit (soft and hard) of the replicator and the restore.
const DESCRIPTOR_LIMIT: u64 = 256;
/// Sends each Session holds before replication starts (one row each).
const SENDS_BEFORE: usize = 3;
/// Sessions the writer appends to while the replicator runs.
const WRITTEN: usize = 8;
/// Sessions the writer creates while the replicator runs.
const CREATED_LATE: usize = 3;
/// Sends the writer makes while the replicator runs, one every `SEND_PAUSE` (more if the
/// replicator has not reported `ROUNDS_MIN` rounds by then).
const SENDS_LIVE: usize = 150;
const SEND_PAUSE: Duration = Duration::from_millis(15);
/// Rounds with a manifest the replicator must have reported before it is stopped.
const ROUNDS_MIN: usize = 3;
/// Longest wait for those rounds.
const ROUNDS_WAIT: Duration = Duration::from_secs(120);
/// Threads that build the Root.
const BUILD_THREADS: usize = 8;
/// Every this many Sessions, one has its history compared whole.
const HISTORY_SAMPLE_EVERY: usize = 97;

/// Log handles the replicator keeps open under `DESCRIPTOR_LIMIT` (as the engine's Session
/// budget, at most `OPEN_LOGS_MAX`).
fn logs_budget() -> u64 {
    let sessions = DESCRIPTOR_LIMIT.saturating_sub(logbook_engine::DESCRIPTORS_RESERVED)
        / logbook_engine::SESSION_DESCRIPTORS;
    sessions
        .clamp(
            logbook_engine::OPEN_SESSIONS_MIN as u64,
            logbook_engine::OPEN_SESSIONS_MAX as u64,
        )
        .min(logbook_replica::OPEN_LOGS_MAX as u64)
}

fn sessions() -> usize {
    std::env::var("LOGBOOK_REPLICA_SESSIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SESSIONS)
}

fn id(i: usize) -> String {
    format!("s{i:05}")
}

/// `logbook ARGS` under `ulimit -n DESCRIPTOR_LIMIT` (bash sets the soft and the hard limit;
/// `exec` keeps the shell's process id), with the S3 server's environment.
fn limited(args: &[&str], s3: &s3::S3) -> Command {
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(format!("ulimit -n {DESCRIPTOR_LIMIT}; exec \"$0\" \"$@\""))
        .arg(bin())
        .args(args)
        .envs(s3.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The limits the kernel gives process `pid` once it runs `logbook` (bash has set them and
/// exec'd it): (soft, hard) open files.
fn nofile_limits(pid: u32) -> (String, String) {
    let logbook = bin().canonicalize().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_link(format!("/proc/{pid}/exe")).ok() != Some(logbook.clone()) {
        assert!(Instant::now() < deadline, "process {pid} never ran logbook");
        std::thread::sleep(Duration::from_millis(1));
    }
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_default()
        .to_owned();
    let mut f = line.split_whitespace().skip(3);
    (
        f.next().unwrap_or("?").to_owned(),
        f.next().unwrap_or("?").to_owned(),
    )
}

/// What the descriptors of process `pid` name, counted by kind (digits and Session ids
/// folded), for a report.
fn open_files(pid: u32) -> String {
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return String::new();
    };
    for e in dir.flatten() {
        let target = std::fs::read_link(e.path()).map_or("?".into(), |t| t.display().to_string());
        let folded: String = target
            .rsplit_once("/root/")
            .or_else(|| target.rsplit_once("/restored/"))
            .map_or(target.as_str(), |(_, r)| r)
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect();
        *kinds.entry(folded).or_default() += 1;
    }
    kinds.iter().map(|(k, n)| format!("{n:>5} {k}\n")).collect()
}

/// Counts the descriptors of a child every few milliseconds until told to stop; gives the
/// most seen and what they were.
struct FdWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(usize, String)>,
}

impl FdWatch {
    fn start(pid: u32) -> FdWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let (mut most, mut what) = (0, String::new());
            while !stop2.load(Ordering::Acquire) {
                let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                    break;
                };
                let n = dir.count();
                if n > most {
                    most = n;
                    what = open_files(pid);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (most, what)
        });
        FdWatch { stop, thread }
    }

    fn finish(self) -> (usize, String) {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap()
    }
}

/// Reads a child's stream to its end on a thread of its own.
fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// The lines of a replicator's standard error other than its greeting and a manifest held
/// back for a Session being placed (both normal): any of them is a failed round or worse.
fn complaints(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            !l.starts_with("replicating ")
                && !l.contains("manifest held back")
                && !l.trim().is_empty()
        })
        .collect()
}

/// A `logbook replicate --json` child under the limit, and the rounds it reports.
struct Replicating {
    child: Child,
    rounds: Receiver<Value>,
    stderr: JoinHandle<String>,
    fds: FdWatch,
}

impl Replicating {
    fn start(root: &Path, s3: &s3::S3, prefix: &str) -> Replicating {
        let root = root.to_str().unwrap();
        let url = s3.url(prefix);
        let mut child = limited(&["replicate", "--json", "--root", root, "--to", &url], s3)
            .spawn()
            .unwrap();
        let fds = FdWatch::start(child.id());
        let out = child.stdout.take().unwrap();
        let stderr = drain(child.stderr.take().unwrap());
        Replicating {
            child,
            rounds: json_lines(out, "replicate"),
            stderr,
            fds,
        }
    }

    /// Fails when the replicator ended on its own (it runs until stopped).
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let stderr = std::mem::replace(&mut self.stderr, drain(std::io::empty()));
            panic!(
                "the replicator ended on its own ({status}): {}",
                stderr.join().unwrap()
            );
        }
    }

    /// Waits until `rounds` holds `n` rounds (each with a manifest), pushing each one the
    /// replicator reports.
    fn wait_for_rounds(&mut self, n: usize, rounds: &mut Vec<Value>) {
        let deadline = Instant::now() + ROUNDS_WAIT;
        while rounds.len() < n {
            self.assert_running();
            if let Ok(r) = self.rounds.recv_timeout(Duration::from_millis(200)) {
                rounds.push(r);
            }
            assert!(
                Instant::now() < deadline,
                "not {n} rounds within {ROUNDS_WAIT:?}: {rounds:?}"
            );
        }
    }

    /// Kills the replicator (it runs until stopped; killing it is how it stops); gives every
    /// further round it reported, its standard error and the most descriptors it held.
    fn stop(mut self, rounds: &mut Vec<Value>) -> (String, (usize, String)) {
        self.assert_running();
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let most = self.fds.finish();
        std::thread::sleep(Duration::from_millis(50));
        rounds.extend(self.rounds.try_iter());
        (self.stderr.join().unwrap(), most)
    }
}

/// Builds the Root: `n` Sessions of `SENDS_BEFORE` sends each, nothing synced (a bulk build),
/// the search index left for the first search; closed before it returns.
fn build_root(root: &Path, n: usize) {
    Root::init(root).unwrap();
    let bulk = RootOptions {
        durability: Durability::NoSyncBulkImport,
        search_indexing: SearchIndexing::OnSearch,
        ..RootOptions::default()
    };
    let r = Root::open_with(root, bulk).unwrap();
    // A creation syncs its staging and registration whatever the durability; creations on
    // several threads share the disk's wait.
    std::thread::scope(|scope| {
        for t in 0..BUILD_THREADS {
            let r = &r;
            scope.spawn(move || {
                for i in (t..n).step_by(BUILD_THREADS) {
                    r.create_session(CreateSessionParams {
                        session_id: Some(id(i)),
                        workspace: None,
                        operation: format!("c-{i}"),
                    })
                    .unwrap();
                    for k in 0..SENDS_BEFORE {
                        r.send(SendParams {
                            session_id: id(i),
                            operation: format!("m-{i}-{k}"),
                            text: format!("hello {i}, message {k}"),
                            attachments: Vec::new(),
                        })
                        .unwrap();
                    }
                }
            });
        }
    });
}

/// Appends to the first `WRITTEN` Sessions and creates `CREATED_LATE` new ones, durably, as
/// a host would while the replicator runs, until told to stop (and `SENDS_LIVE` sends at
/// least); gives the number of sends.
fn write_beside(root: &Path, stop: &AtomicBool) -> usize {
    let r = Root::open(root).unwrap();
    let mut i = 0;
    while i < SENDS_LIVE || !stop.load(Ordering::Acquire) {
        if i < SENDS_LIVE && i % (SENDS_LIVE / CREATED_LATE) == 0 {
            let late = format!("late{}", i / (SENDS_LIVE / CREATED_LATE));
            r.create_session(CreateSessionParams {
                session_id: Some(late.clone()),
                workspace: None,
                operation: format!("c-{late}"),
            })
            .unwrap();
            r.send(SendParams {
                session_id: late.clone(),
                operation: format!("m-{late}"),
                text: format!("made while replicating, marker-{i}"),
                attachments: Vec::new(),
            })
            .unwrap();
        }
        r.send(SendParams {
            session_id: id(i % WRITTEN),
            operation: format!("live-{i}"),
            text: format!("live message {i}, marker-{i}, ").repeat(1 + i % 7),
            attachments: Vec::new(),
        })
        .unwrap();
        i += 1;
        std::thread::sleep(SEND_PAUSE);
    }
    i
}

/// The whole history of Session `id` under fence `through`, as the wire has it.
fn history(root: &Root, id: &str, through: u64) -> Value {
    let page = root
        .history(HistoryParams {
            session_id: id.to_owned(),
            through: Some(through),
            after: None,
            limit: Some(1024),
            anchor: None,
            direction: None,
        })
        .unwrap_or_else(|e| panic!("history of {id}: {e}"));
    serde_json::to_value(page).unwrap()
}

#[test]
fn many_sessions_replicate_and_restore_under_ulimit_256() {
    let Some(s3) = s3::S3::start() else { return };
    let n = sessions();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let started = Instant::now();
    build_root(&root, n);
    let built = started.elapsed();
    eprintln!("{n} Sessions built in {built:?}");

    // Replicate beside a writer for a few rounds, then stop both.
    let mut replicating = Replicating::start(&root, &s3, "many");
    let limits = nofile_limits(replicating.child.id());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (root, stop) = (root.clone(), Arc::clone(&stop));
        std::thread::spawn(move || write_beside(&root, &stop))
    };
    let mut rounds = Vec::new();
    replicating.wait_for_rounds(ROUNDS_MIN, &mut rounds);
    stop.store(true, Ordering::Release);
    let sends = writer.join().unwrap();
    let (stderr, (replicate_fds, replicate_files)) = replicating.stop(&mut rounds);
    // One more round, by a new run under the same limit (it resumes from the bucket and reads
    // every log again): its manifest holds everything the writer acknowledged.
    let root_arg = root.to_str().unwrap();
    let once = limited(
        &[
            "replicate",
            "--once",
            "--json",
            "--root",
            root_arg,
            "--to",
            &s3.url("many"),
        ],
        &s3,
    )
    .spawn()
    .unwrap();
    let once_limits = nofile_limits(once.id());
    let once_fds = FdWatch::start(once.id());
    let once = once.wait_with_output().unwrap();
    let (once_most, once_files) = once_fds.finish();
    let once_err = String::from_utf8_lossy(&once.stderr);
    assert!(
        once.status.success(),
        "replicate --once: {}: {once_err}",
        once.status
    );
    assert!(
        complaints(&once_err).is_empty(),
        "replicate --once complained:\n{once_err}"
    );
    assert_eq!(
        once_limits, limits,
        "replicate --once ran under the same limit"
    );
    let replicated = started.elapsed() - built;
    assert_eq!(
        limits,
        (DESCRIPTOR_LIMIT.to_string(), DESCRIPTOR_LIMIT.to_string()),
        "the replicator ran under ulimit -n {DESCRIPTOR_LIMIT} (soft, hard)"
    );
    assert!(
        complaints(&stderr).is_empty(),
        "the replicator complained:\n{stderr}"
    );
    assert!(rounds.len() >= ROUNDS_MIN, "{rounds:?}");
    assert!(rounds[0]["full"].as_bool().unwrap(), "{}", rounds[0]);

    // Restore under the same limit.
    let restored = tmp.path().join("restored");
    let mut child = limited(
        &[
            "restore",
            "--json",
            "--from",
            &s3.url("many"),
            "--root",
            restored.to_str().unwrap(),
        ],
        &s3,
    )
    .spawn()
    .unwrap();
    let restore_limits = nofile_limits(child.id());
    let fds = FdWatch::start(child.id());
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let status = child.wait().unwrap();
    let (restore_fds, restore_files) = fds.finish();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let restore_took = started.elapsed() - built - replicated;
    assert!(status.success(), "restore: {status}: {err}");
    assert!(err.trim().is_empty(), "restore complained:\n{err}");
    assert_eq!(
        restore_limits, limits,
        "the restore ran under the same limit"
    );
    let answer: Value = serde_json::from_str(&out).unwrap();

    // The restored Root answers as the source: every Session, at its revision.
    let comparing = Instant::now();
    let source = Root::open_read_only(&root).unwrap();
    let copy = Root::open_read_only(&restored).unwrap();
    let ids: Vec<String> = source
        .sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(ids.len(), n + CREATED_LATE);
    assert_eq!(answer["sessions"], ids.len() as u64, "{answer}");
    let mut copied: Vec<String> = copy
        .sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    copied.sort_unstable();
    let mut want = ids.clone();
    want.sort_unstable();
    assert_eq!(copied, want);
    let mut compared = 0;
    for (i, sid) in want.iter().enumerate() {
        let rev = source.revision(sid).unwrap();
        assert_eq!(
            copy.revision(sid).unwrap_or_else(|e| panic!("{sid}: {e}")),
            rev,
            "{sid}"
        );
        let written = sid.starts_with("late") || (0..WRITTEN).any(|w| *sid == id(w));
        if written || i % HISTORY_SAMPLE_EVERY == 0 {
            assert_eq!(
                history(&copy, sid, rev),
                history(&source, sid, rev),
                "{sid}"
            );
            compared += 1;
        }
    }
    eprintln!(
        "{} Sessions: built in {built:?}; replicated in {replicated:?} beside {sends} sends \
         ({} rounds, {} objects in the first; at most {replicate_fds} descriptors of \
         {DESCRIPTOR_LIMIT}, {once_most} in the resumed --once round); restored {} objects in \
         {restore_took:?} (at most {restore_fds} descriptors); compared in {:?} ({compared} \
         histories)\nthe replicator's descriptors at their most:\n{replicate_files}\
         the --once round's descriptors at their most:\n{once_files}\
         the restore's descriptors at their most:\n{restore_files}",
        ids.len(),
        rounds.len(),
        rounds[0]["puts"],
        answer["objects"],
        comparing.elapsed(),
    );
    // Bounded by the log handles (those kept between rounds and those a batch of uploads
    // holds) and the requests in flight (a connection and a file each), not by the Sessions.
    let bound = 2 * logs_budget() + 2 * REQUESTS_IN_FLIGHT as u64 + 16;
    for (who, most, files) in [
        ("the replicator", replicate_fds, &replicate_files),
        ("replicate --once", once_most, &once_files),
    ] {
        assert!(
            most as u64 <= bound,
            "{who} held {most} descriptors, want <= {bound}:\n{files}"
        );
    }
}
