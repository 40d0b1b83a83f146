//! Replication as processes, against a real S3 server (s3s-fs on loopback, started here):
//! `logbook serve` writes while `logbook replicate` uploads beside it; `logbook restore`
//! builds Roots from the bucket, and `logbook serve` on them answers as the source did.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../replica/tests/common/mod.rs"]
mod s3;

use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SESSIONS: usize = 6;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A `logbook replicate --json` child and the rounds it reports.
struct Replicating {
    child: Child,
    rounds: Receiver<Value>,
}

impl Replicating {
    fn start(root: &Path, s3: &s3::S3, prefix: &str) -> Replicating {
        let mut child = Command::new(bin())
            .args(["replicate", "--json", "--root"])
            .arg(root)
            .args(["--to", &s3.url(prefix)])
            .envs(s3.env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line).unwrap();
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Replicating { child, rounds: rx }
    }

    /// kill -9, then every round it reported.
    fn kill(mut self) -> Vec<Value> {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        self.rounds.try_iter().collect()
    }
}

fn restore_cli(s3: &s3::S3, prefix: &str, dest: &Path, at: Option<&str>) -> std::process::Output {
    let mut c = Command::new(bin());
    c.args(["restore", "--json", "--from", &s3.url(prefix), "--root"])
        .arg(dest)
        .envs(s3.env());
    if let Some(at) = at {
        c.args(["--at", at]);
    }
    c.output().unwrap()
}

fn history(s: &mut Server, id: &str, through: u64) -> Value {
    s.ok(
        "history",
        json!({"sessionId": id, "through": through, "limit": 1024}),
    )
}

fn search(s: &mut Server, id: &str, through: u64) -> Value {
    s.ok(
        "search",
        json!({"sessionId": id, "query": "marker", "through": through, "limit": 500}),
    )
}

fn revision(s: &mut Server, id: &str) -> u64 {
    s.ok("history", json!({"sessionId": id, "limit": 1}))["through"]
        .as_u64()
        .unwrap()
}

/// Checks that every Session of `copy` is a prefix of `source`'s, with the same pages and
/// search hits under its revision; returns the revisions.
fn assert_prefix(source: &mut Server, copy: &mut Server) -> Vec<u64> {
    let mut revs = Vec::new();
    for s in 0..SESSIONS {
        let id = format!("s{s}");
        let r = revision(copy, &id);
        assert!(r <= revision(source, &id), "{id}: {r} is past the source");
        assert_eq!(
            history(copy, &id, r),
            history(source, &id, r),
            "{id} at {r}"
        );
        assert_eq!(search(copy, &id, r), search(source, &id, r), "{id} at {r}");
        revs.push(r);
    }
    revs
}

#[test]
fn replicate_beside_a_writer_then_restore_answers_like_the_source() {
    let Some(s3) = s3::S3::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut writer = Server::start(&root);
    for s in 0..SESSIONS {
        writer.ok(
            "createSession",
            json!({"sessionId": format!("s{s}"), "workspace": null, "operation": format!("create-{s}")}),
        );
    }
    let sent = writer.ok("send", json!({"sessionId": "s0", "operation": "att", "text": "with a file",
        "attachments": [{"name": "a.txt", "mimeType": "text/plain", "dataBase64": b64(b"attached bytes")}]}));
    let invocation = sent["invocation"].clone();
    writer.ok(
        "setTitle",
        json!({"sessionId": "s1", "operation": "title", "title": "replicated"}),
    );
    let replicating = Replicating::start(&root, &s3, "live");
    // The writer appends across the Sessions for about 4 s; each acknowledgement is timed.
    let load = std::thread::spawn(move || {
        let mut acks = Vec::new();
        for i in 0..400 {
            let s = i % SESSIONS;
            let text = format!("message {i}, marker-{i}, ").repeat(1 + i % 13);
            writer.ok(
                "send",
                json!({"sessionId": format!("s{s}"), "operation": format!("send-{i}"), "text": text, "attachments": []}),
            );
            acks.push(now_ms());
            std::thread::sleep(Duration::from_millis(10));
        }
        (writer, acks)
    });
    let (mut writer, acks) = load.join().unwrap();
    let last_ack = *acks.last().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let rounds = replicating.kill();
    assert!(rounds.len() >= 3, "{rounds:?}");
    // Lag: an append acknowledged before a round started is in that round's manifest.
    let mut lags: Vec<u64> = acks
        .iter()
        .map(|a| {
            let covering = rounds
                .iter()
                .find(|r| r["startedMs"].as_u64().unwrap() >= *a)
                .unwrap_or_else(|| panic!("no manifest after the acknowledgement at {a}"));
            covering["manifestMs"].as_u64().unwrap() - a
        })
        .collect();
    lags.sort_unstable();
    let p99 = lags[lags.len() * 99 / 100];
    eprintln!(
        "replication lag over {} appends: p50 {} ms, p99 {p99} ms, max {} ms ({} rounds)",
        lags.len(),
        lags[lags.len() / 2],
        lags[lags.len() - 1],
        rounds.len()
    );
    assert!(p99 <= 2000, "p99 lag {p99} ms");
    assert!(rounds
        .iter()
        .all(|r| r["manifestMs"].as_u64().unwrap() <= last_ack + 2500));

    // The newest restore holds everything acknowledged.
    let restored = dir.path().join("restored");
    let out = restore_cli(&s3, "live", &restored, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["sessions"], SESSIONS as u64);
    let mut copy = Server::start(&restored);
    let revs = assert_prefix(&mut writer, &mut copy);
    for (s, rev) in revs.iter().enumerate() {
        assert_eq!(
            *rev,
            revision(&mut writer, &format!("s{s}")),
            "s{s} is whole"
        );
    }
    // The server on the restored Root answers as the source: listings, titles, attachments,
    // Root-wide search.
    let list = |s: &mut Server| {
        let mut v = s.ok("sessions", json!({"order": "id"}))["sessions"].clone();
        for e in v.as_array_mut().unwrap() {
            let e = e.as_object_mut().unwrap();
            // Times and bytes on disk are the files' own (see docs/format.md).
            for k in ["createdAt", "lastActivityAt", "bytes"] {
                e.remove(k);
            }
        }
        v
    };
    assert_eq!(list(&mut copy), list(&mut writer));
    let root_search = |s: &mut Server| {
        s.ok("searchRoot", json!({"query": "marker-39", "caseSensitive": true, "wholeWord": true, "scope": null, "after": null, "limit": 50}))["hits"].clone()
    };
    assert_eq!(root_search(&mut copy), root_search(&mut writer));
    let att = |s: &mut Server| {
        s.ok(
            "attachments",
            json!({"sessionId": "s0", "invocation": invocation}),
        )
    };
    assert_eq!(att(&mut copy), att(&mut writer));
    let verify = copy.ok("verify", json!({}));
    assert_eq!(verify["damage"], json!([]), "{verify}");
    drop(copy);

    // An earlier point: --at the time of a round in the middle gives a consistent prefix.
    let middle = &rounds[rounds.len() / 2];
    let at = middle["manifestMs"].as_u64().unwrap();
    let earlier = dir.path().join("earlier");
    let out = restore_cli(&s3, "live", &earlier, Some(&at.to_string()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer["manifest"], middle["manifest"],
        "the last manifest at or before --at"
    );
    let mut copy = Server::start(&earlier);
    let early = assert_prefix(&mut writer, &mut copy);
    assert!(
        early.iter().zip(&revs).any(|(e, r)| e < r),
        "{early:?} {revs:?}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let Some(s3) = s3::S3::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let run = |args: &[&str], env: &[(&str, String)]| {
        Command::new(bin())
            .args(args)
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_ENDPOINT_URL")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap()
    };
    let init = run(&["init", "--root", root.to_str().unwrap()], &[]);
    assert!(init.status.success());
    let r = root.to_str().unwrap();
    let never = dir.path().join("never-made");
    let never = never.to_str().unwrap();
    let env = s3.env();
    // (arguments, environment, exit status, what the message says)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, String)>, i32, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec!["replicate", "--root", r, "--to", "bucket/x"],
            env.clone(),
            2,
            "s3://BUCKET",
        ),
        (
            vec!["replicate", "--root", r, "--to", "s3://replica-test/a//b"],
            env.clone(),
            2,
            "prefix",
        ),
        (
            vec!["replicate", "--root", r, "--to", "s3://replica-test/x"],
            vec![],
            2,
            "AWS_ACCESS_KEY_ID",
        ),
        (
            vec![
                "replicate",
                "--root",
                r,
                "--to",
                "s3://replica-test/x",
                "--endpoint",
                "http://10.1.2.3:9",
            ],
            env.clone(),
            2,
            "loopback",
        ),
        (
            vec!["restore", "--from", "s3://replica-test/none"],
            env.clone(),
            2,
            "--root NEW_DIR",
        ),
        (
            vec!["restore", "--from", "s3://replica-test/none", "--root", r],
            env.clone(),
            4,
            "not empty",
        ),
        (
            vec![
                "restore",
                "--from",
                "s3://replica-test/none",
                "--root",
                never,
            ],
            env.clone(),
            3,
            "holds no manifest",
        ),
        (
            vec![
                "restore",
                "--from",
                "s3://replica-test/none",
                "--root",
                "/tmp/x",
                "--at",
                "yesterday",
            ],
            env.clone(),
            2,
            "--at",
        ),
        (
            vec![
                "replicate",
                "--root",
                "/tmp/logbook-no-root-here",
                "--to",
                "s3://replica-test/x",
            ],
            env.clone(),
            3,
            "no Root",
        ),
    ];
    for (args, env, code, says) in cases {
        let out = run(&args, &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(
        !Path::new(never).exists(),
        "a failed restore leaves nothing"
    );
    // An endpoint where nothing listens: an io error naming the request, after retries.
    let mut unreachable = env.clone();
    unreachable.retain(|(k, _)| *k != "AWS_ENDPOINT_URL");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run(
        &[
            "replicate",
            "--once",
            "--root",
            r,
            "--to",
            "s3://replica-test/x",
            "--endpoint",
            &format!("http://127.0.0.1:{closed}"),
        ],
        &unreachable,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(10), "{err}");
    assert!(err.contains("reachable"), "{err}");
}

/// A small xorshift generator: the crash points, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// kill -9 the replicator at random points while `logbook serve` writes (12 times; set
/// LOGBOOK_REPLICA_KILLS=100 for the full run): every restore is a consistent prefix, the
/// newest holds everything acknowledged more than 2 s before the last kill, and no object is
/// uploaded twice across the restarts.
#[test]
fn kill_9_the_replicator_at_random_points() {
    let Some(s3) = s3::S3::start() else { return };
    let kills: usize = std::env::var("LOGBOOK_REPLICA_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let seed = std::env::var("LOGBOOK_REPLICA_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| now_ms() | 1);
    eprintln!("kill -9 test: {kills} kills, seed {seed} (LOGBOOK_REPLICA_SEED)");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut writer = Server::start(&root);
    for s in 0..SESSIONS {
        writer.ok(
            "createSession",
            json!({"sessionId": format!("s{s}"), "workspace": null, "operation": format!("create-{s}")}),
        );
    }
    // The writer appends until told to stop; each acknowledgement: (session, sequence, ms).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = std::sync::Arc::clone(&stop);
    let load = std::thread::spawn(move || {
        let mut acks = Vec::new();
        let mut i = 0;
        while !stop2.load(std::sync::atomic::Ordering::Acquire) {
            let s = i % SESSIONS;
            let text = format!("message {i}, marker-{i}, ").repeat(1 + i % 17);
            let r = writer.ok(
                "send",
                json!({"sessionId": format!("s{s}"), "operation": format!("send-{i}"), "text": text, "attachments": []}),
            );
            acks.push((s, r["sequence"].as_u64().unwrap(), now_ms()));
            i += 1;
            std::thread::sleep(Duration::from_millis(3));
        }
        (writer, acks)
    });
    let mut last_kill = 0;
    let mut restores = 0;
    for k in 0..kills {
        let replicating = Replicating::start(&root, &s3, "crash");
        std::thread::sleep(Duration::from_millis(150 + rng.next() % 1800));
        replicating.kill();
        last_kill = now_ms();
        if k % 4 == 3 {
            // A restore between kills: a consistent prefix (checked at the end, against the
            // source, under each Session's restored revision).
            let out = restore_cli(&s3, "crash", &dir.path().join(format!("mid-{k}")), None);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            restores += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (mut writer, acks) = load.join().unwrap();
    let newest = dir.path().join("newest");
    let out = restore_cli(&s3, "crash", &newest, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut copy = Server::start(&newest);
    let revs = assert_prefix(&mut writer, &mut copy);
    for (s, seq, at) in &acks {
        if *at + 2000 < last_kill {
            assert!(
                revs[*s] >= *seq,
                "s{s} sequence {seq} acknowledged at {at}, last kill at {last_kill}"
            );
        }
    }
    drop(copy);
    for k in (0..kills).filter(|k| k % 4 == 3) {
        let mut copy = Server::start(&dir.path().join(format!("mid-{k}")));
        assert_prefix(&mut writer, &mut copy);
    }
    assert_eq!(restores, kills / 4);
    // Nothing uploaded twice: one object per blob and sealed segment, chunk ranges of a
    // segment never overlapping.
    let store = s3.store("crash");
    let mut seen = std::collections::HashSet::new();
    let mut ranges: std::collections::HashMap<(String, u64), Vec<(u64, u64)>> = Default::default();
    for l in store.list("data/", None, None).unwrap() {
        use logbook_replica::manifest::DataName;
        match DataName::parse(&l.name).unwrap_or_else(|| panic!("{}", l.name)) {
            DataName::Chunk(log, seg, from, to, _) => {
                ranges.entry((log, seg)).or_default().push((from, to))
            }
            DataName::Blob(sha) | DataName::Patch(sha) => assert!(seen.insert(sha), "{}", l.name),
            DataName::Sealed(log, seg, _) => {
                assert!(seen.insert(format!("{log}/{seg}")), "{}", l.name)
            }
        }
    }
    for (k, mut rs) in ranges {
        rs.sort_unstable();
        for w in rs.windows(2) {
            assert!(w[0].1 <= w[1].0, "{k:?}: {:?} and {:?} overlap", w[0], w[1]);
        }
    }
}
