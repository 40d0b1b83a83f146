//! Readers beside the writer, as processes: `logbook serve` writes under load while
//! `logbook serve --read-only` pages and searches all the time. The reader takes no lock
//! (the writer keeps working, a second reader opens too), refuses every change, and sees each
//! acknowledged append within 100 ms.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use serde_json::json;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

const SESSIONS: usize = 8;
const SENDS: usize = 400;

#[test]
fn a_reader_process_sees_acknowledged_appends_within_100_ms() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut writer = Server::start(&root);
    for s in 0..SESSIONS {
        writer.ok(
            "createSession",
            json!({"sessionId": format!("s{s}"), "workspace": null, "operation": format!("create-{s}")}),
        );
    }
    let mut reader = Server::start_read_only(&root);
    // The writer under load in its own thread: each acknowledged send is reported with the
    // instant its answer arrived.
    let (tx, rx) = channel::<(usize, u64, Instant)>();
    let load = std::thread::spawn(move || {
        for i in 0..SENDS {
            let s = i % SESSIONS;
            let text = format!("message {i} of the load, marker-{i} ").repeat(1 + i % 5);
            let r = writer.ok(
                "send",
                json!({"sessionId": format!("s{s}"), "operation": format!("send-{i}"), "text": text, "attachments": []}),
            );
            let _ = tx.send((s, r["sequence"].as_u64().unwrap(), Instant::now()));
        }
        // A Session made while the reader is open.
        writer.ok(
            "createSession",
            json!({"sessionId": "late", "workspace": null, "operation": "create-late"}),
        );
        writer.ok("send", json!({"sessionId": "late", "operation": "late-1", "text": "made after the reader opened", "attachments": []}));
        let _ = tx.send((usize::MAX, 2, Instant::now()));
        writer
    });
    let mut latencies = Vec::new();
    let mut pages = 0;
    loop {
        // The newest acknowledgement so far (older ones are covered by it or were measured).
        let Ok(mut newest) = rx.recv_timeout(Duration::from_secs(60)) else {
            panic!("the writer stopped answering");
        };
        while let Ok(n) = rx.try_recv() {
            newest = n;
        }
        let (s, seq, acked) = newest;
        let sid = if s == usize::MAX {
            "late".to_owned()
        } else {
            format!("s{s}")
        };
        loop {
            let id = reader.request(
                "history",
                json!({"sessionId": sid, "through": null, "after": null, "limit": 20, "anchor": null, "direction": "backward"}),
            );
            let page = reader.answer(id);
            if page
                .get("result")
                .is_some_and(|r| r["through"].as_u64().unwrap() >= seq)
            {
                latencies.push(acked.elapsed());
                break;
            }
            assert!(
                acked.elapsed() < Duration::from_secs(5),
                "sequence {seq} of {sid} not seen: {page}"
            );
            pages += 1;
        }
        // Searching all the time as well.
        let hits = reader.ok(
            "search",
            json!({"sessionId": sid, "query": "of the load", "caseSensitive": null, "wholeWord": null, "through": null, "after": null, "limit": 10}),
        );
        assert!(s == usize::MAX || !hits["hits"].as_array().unwrap().is_empty());
        if s == usize::MAX {
            break;
        }
    }
    let mut writer = load.join().unwrap();
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    let max = *latencies.last().unwrap();
    eprintln!(
        "{} appends measured ({pages} pages read while waiting): p50 {:?}, p99 {p99:?}, max {max:?}",
        latencies.len(),
        latencies[latencies.len() / 2]
    );
    assert!(p99 <= Duration::from_millis(100), "p99 {p99:?}");
    assert!(max <= Duration::from_secs(1), "max {max:?}");

    // Changes are refused, with the code that says so.
    assert_eq!(
        reader.err(
            "send",
            json!({"sessionId": "s0", "operation": "no", "text": "no", "attachments": []})
        ),
        "permission_denied"
    );
    assert_eq!(
        reader.err(
            "createSession",
            json!({"sessionId": "no", "workspace": null, "operation": "no"})
        ),
        "permission_denied"
    );
    // The reader lists and searches the whole Root as the writer does.
    let listed = |s: &mut Server| {
        let page = s.ok(
            "sessions",
            json!({"after": null, "limit": 100, "workspace": null, "order": "id"}),
        );
        page["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["sessionId"].clone(),
                    e["revision"].clone(),
                    e["rows"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    // A reader looks at an open Session's log at most once per few milliseconds, so its
    // listing may trail the writer's last commits by that much (the contract allows 100 ms).
    let want = listed(&mut writer);
    let since = Instant::now();
    loop {
        let got = listed(&mut reader);
        if got == want {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_millis(100),
            "the reader's listing {got:?} is not the writer's {want:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let all = |s: &mut Server| {
        s.ok(
            "searchRoot",
            json!({"query": "marker-39", "caseSensitive": true, "wholeWord": true, "scope": null, "after": null, "limit": 50}),
        )["hits"]
            .clone()
    };
    assert_eq!(all(&mut reader), all(&mut writer));

    // The command line: `--read-only` reads beside the running writer (which holds the lock),
    // and refuses a change with exit status 8.
    let out = std::process::Command::new(bin())
        .args(["--read-only", "--json", "--root"])
        .arg(&root)
        .args(["history", "late"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("made after the reader opened"));
    let out = std::process::Command::new(bin())
        .args(["--read-only", "--root"])
        .arg(&root)
        .args(["send", "late", "no"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("read-only"));
    // A command that only reads goes on as a reader by itself while the writer holds the
    // lock (after the lock's wait).
    let out = std::process::Command::new(bin())
        .args(["--root"])
        .arg(&root)
        .args(["search", "late", "reader"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("reader"));
    // Without it, the writer's lock keeps a second writer out.
    let out = std::process::Command::new(bin())
        .args(["--root"])
        .arg(&root)
        .args(["send", "late", "no"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(writer.finish().success());
    assert!(reader.finish().success());
}

/// A Root on a read-only mount: commands that only read work (as readers, with no lock and no
/// write), a command that writes fails cleanly. The mount is a real read-only bind mount in a
/// mount namespace of its own (`unshare -m`).
#[test]
fn reading_commands_work_on_a_read_only_mount() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let logbook = |args: &[&str]| {
        std::process::Command::new(bin())
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .unwrap()
    };
    assert!(logbook(&["new", "--id", "s1"]).status.success());
    assert!(logbook(&["send", "s1", "words kept on a read-only disk"])
        .status
        .success());
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let script = "mount --bind \"$1\" \"$2\" && mount -o remount,bind,ro \"$2\" || exit 97; \
         \"$0\" --root \"$2\" search s1 'read-only disk' || exit $?; \
         \"$0\" --root \"$2\" sessions || exit $?; \
         \"$0\" --root \"$2\" send s1 'no' ; echo \"send exit $?\"";
    let out = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", script])
        .arg(bin())
        .arg(&root)
        .arg(&ro)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if out.status.code() == Some(97) || stderr.contains("Operation not permitted") {
        eprintln!("skipped: this machine does not allow a private read-only mount: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("read-only disk"), "{stdout}\n{stderr}");
    assert!(stdout.contains("s1"), "{stdout}");
    // The write is refused with an error, not a panic, and nothing was changed.
    assert!(
        stdout.contains("send exit ") && !stdout.contains("send exit 0"),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
