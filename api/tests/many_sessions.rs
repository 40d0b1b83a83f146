#![allow(clippy::unwrap_used)]
//! A Root of many Sessions under the macOS default descriptor limit: `logbook serve` under
//! `ulimit -n 256` creates 10,000 Sessions (`LOGBOOK_TEST_SESSIONS` picks another number),
//! sends to each (durable) and reads its history, then reads the first ones again (closed
//! by then), and no request is answered with an error. Open Sessions
//! are a cache sized from the limit, so the server's descriptors and threads stay bounded
//! however many Sessions were touched.

mod common;
use common::*;
use serde_json::{json, Value};

/// Sessions created and touched (`LOGBOOK_TEST_SESSIONS` overrides it, for a quick look).
const SESSIONS: usize = 10_000;

fn sessions() -> usize {
    std::env::var("LOGBOOK_TEST_SESSIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SESSIONS)
}
/// The descriptor limit of the server (the macOS default).
const DESCRIPTOR_LIMIT: u64 = 256;
/// Requests written before their answers are read.
const PIPELINE: usize = 250;
/// Sessions read again at the end (the least recently used by then: all were closed).
const REREAD: usize = 100;

/// Sessions the server keeps open under [`DESCRIPTOR_LIMIT`] (its default budget).
fn open_max() -> u64 {
    let budget = DESCRIPTOR_LIMIT.saturating_sub(logbook_engine::DESCRIPTORS_RESERVED)
        / logbook_engine::SESSION_DESCRIPTORS;
    budget.clamp(
        logbook_engine::OPEN_SESSIONS_MIN as u64,
        logbook_engine::OPEN_SESSIONS_MAX as u64,
    )
}

fn count(dir: String) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// What the process's descriptors name, by kind of file (Session ids folded), for a failure.
fn open_files(pid: u32) -> String {
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let target = std::fs::read_link(e.path()).map_or("?".into(), |t| t.display().to_string());
        let folded: String = target
            .split('/')
            .map(|part| {
                if part.starts_with('s')
                    && part[1..].chars().all(|c| c.is_ascii_digit())
                    && part.len() > 1
                {
                    "S"
                } else {
                    part
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        let folded = folded
            .rsplit_once("/root/")
            .map_or(folded.clone(), |(_, r)| r.to_owned());
        *kinds.entry(folded).or_default() += 1;
    }
    kinds.iter().map(|(k, n)| format!("{n:>5} {k}\n")).collect()
}

/// Sends every request (method, params) in pipelined batches and checks that none is
/// answered with an error; returns the results in order.
fn all_ok(s: &mut Server, requests: impl Iterator<Item = (&'static str, Value)>) -> Vec<Value> {
    let requests: Vec<(&str, Value)> = requests.collect();
    let mut results = Vec::with_capacity(requests.len());
    for batch in requests.chunks(PIPELINE) {
        let ids: Vec<u64> = batch.iter().map(|(m, p)| s.request(m, p.clone())).collect();
        for (id, (method, p)) in ids.into_iter().zip(batch) {
            let a = s.answer(id);
            assert!(a.get("error").is_none(), "{method} {p} answered {a}");
            results.push(a["result"].clone());
        }
    }
    results
}

#[test]
fn many_sessions_under_ulimit_256_answer_without_error() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let mut s = Server::start_with_descriptor_limit(&root, DESCRIPTOR_LIMIT);
    let pid = s.pid();
    let id = |i: usize| format!("s{i:04}");
    let started = std::time::Instant::now();
    let n = sessions();
    let phase = |what: &str| println!("{what} done after {:?}", started.elapsed());

    all_ok(
        &mut s,
        (0..n).map(|i| {
            let p = json!({"sessionId": id(i), "operation": format!("c-{i}")});
            ("createSession", p)
        }),
    );
    phase("createSession");
    // Each Session's send and its history read follow each other (one open serves both;
    // opening a Session is what this test pays for most).
    let history = |i: usize| ("history", json!({"sessionId": id(i)}));
    let answers = all_ok(
        &mut s,
        (0..n).flat_map(|i| {
            let send = json!({"sessionId": id(i), "operation": format!("m-{i}"),
                              "text": format!("hello {i}"), "attachments": []});
            [("send", send), history(i)]
        }),
    );
    phase("send and history");
    let (sent, pages): (Vec<_>, Vec<_>) = answers.chunks(2).map(|a| (&a[0], &a[1])).unzip();
    assert!(sent.iter().all(|r| r["sequence"] == 2));
    for (i, page) in pages.iter().enumerate() {
        let rows = page["rows"].as_array().unwrap();
        let text = format!("hello {i}");
        assert!(
            rows.iter()
                .any(|r| r["fields"]["body"]["text"] == text.as_str()),
            "{}: {page}",
            id(i)
        );
    }
    let again = all_ok(&mut s, (0..REREAD.min(n)).map(history));
    assert!(again.iter().zip(&pages).all(|(a, p)| a == *p));
    phase("history again");

    // Counted once background index work (which holds a few files while it writes) is done:
    // polled for a few seconds, the figure that stays is the bound.
    let (limit_fds, limit_threads) = (
        open_max() * logbook_engine::SESSION_DESCRIPTORS + 32,
        open_max() + 8,
    );
    let mut polls = 0;
    let (threads, fds) = loop {
        let threads = count(format!("/proc/{pid}/task"));
        let fds = count(format!("/proc/{pid}/fd"));
        polls += 1;
        if (fds as u64 <= limit_fds && threads as u64 <= limit_threads) || polls == 50 {
            break (threads, fds);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    println!(
        "{n} Sessions in {:?}: {threads} threads, {fds} descriptors (at most {} Sessions open)",
        started.elapsed(),
        open_max()
    );
    // Each open Session holds SESSION_DESCRIPTORS; the rest is the Root's and the server's.
    assert!(
        fds as u64 <= limit_fds,
        "{fds} descriptors open, want <= {limit_fds}:\n{}",
        open_files(pid)
    );
    // The search index worker ends when idle, so what stays is the main thread, the index
    // sync thread and, while the log keeps a sealer thread per open log, one per open Session
    // and the Root log: bounded by the cache, not by the Sessions touched.
    assert!(
        threads as u64 <= limit_threads,
        "{threads} threads, want <= {limit_threads}"
    );
    assert!(s.finish().success());
}

/// A desktop starts programs with a soft descriptor limit far under the hard one (1,024 under
/// 524,288 on Linux): `logbook` raises the soft limit to the hard one before it opens a Root,
/// so the open-Session cache is sized from the limit the process may have.
#[test]
fn serve_raises_a_soft_descriptor_limit_to_the_hard_one() {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(u64::MAX)
        .min(1 << 20);
    if hard <= 300 {
        eprintln!("hard descriptor limit {hard}: nothing to raise a soft limit of 300 to");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start_under_ulimit(&dir.path().join("root"), "-S -n 300");
    s.ok("sessions", json!({}));
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", s.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let soft = line.split_whitespace().nth(3);
    assert_eq!(soft, Some(hard.to_string().as_str()), "{line}");
    assert!(s.finish().success());
}
