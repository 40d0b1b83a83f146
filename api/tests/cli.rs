#![allow(clippy::unwrap_used)]
//! The `logbook` command line as a person uses it: one test per defect a new user found.

mod common;

use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Runs `logbook --root ROOT ARGS...`.
fn logbook(root: &Path, args: &[&str]) -> Output {
    Command::new(common::bin())
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A Root with Session `s` holding `n` assistant rows that all contain "needle".
fn session_with_rows(root: &Path, n: usize) {
    let o = logbook(root, &["new", "--id", "s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let events = root.with_extension("events.jsonl");
    let mut f = std::fs::File::create(&events).unwrap();
    for i in 0..n {
        writeln!(
            f,
            r#"{{"kind":"modelCompletion","invocation":"i","model":"m","usage":null,"items":[{{"kind":"assistant","body":"row {i} has a needle in it","thinking":null}}]}}"#
        )
        .unwrap();
    }
    drop(f);
    let o = logbook(root, &["append", "s", events.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn each_new_without_an_operation_starts_a_new_session() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    for w in ["w", "w2"] {
        std::fs::create_dir(tmp.path().join(w)).unwrap();
    }
    let ids: Vec<String> = ["w", "w", "w2"]
        .iter()
        .map(|w| {
            let w = tmp.path().join(w);
            let w = w.to_str().unwrap();
            let o = logbook(&root, &["new", "--workspace", w]);
            assert!(o.status.success(), "new --workspace {w}: {}", stderr(&o));
            stdout(&o).trim().to_owned()
        })
        .collect();
    assert_ne!(ids[0], ids[1]);
    assert_ne!(ids[1], ids[2]);
    // With an explicit operation a repeat is the same Session.
    let again: Vec<String> = (0..2)
        .map(|_| {
            let o = logbook(&root, &["new", "--operation", "mine"]);
            assert!(o.status.success(), "{}", stderr(&o));
            stdout(&o).trim().to_owned()
        })
        .collect();
    assert_eq!(again[0], again[1]);
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    // Far more output than a pipe holds, so the command is still writing when it closes.
    session_with_rows(&root, 3000);
    let mut child = Command::new(common::bin())
        .arg("--root")
        .arg(&root)
        .args(["history", "s", "--all"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(!first.is_empty());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn failures_exit_non_zero_with_one_status_per_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("there.txt"), "here\n").unwrap();
    let o = logbook(
        &root,
        &["new", "--id", "s", "--workspace", ws.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = logbook(&root, &["cat", "s", "there.txt"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "here\n");
    // An absent file is not_found (3); an unknown Session too.
    assert_eq!(
        logbook(&root, &["cat", "s", "absent.txt"]).status.code(),
        Some(3)
    );
    assert_eq!(logbook(&root, &["history", "nope"]).status.code(), Some(3));
    // An operation reused with other parameters is a conflict (4), said once.
    assert!(logbook(&root, &["new", "--id", "a", "--operation", "x"])
        .status
        .success());
    let o = logbook(&root, &["new", "--id", "b", "--operation", "x"]);
    assert_eq!(o.status.code(), Some(4));
    assert!(!stderr(&o).contains("conflict: conflict"), "{}", stderr(&o));
}

#[test]
fn search_prints_at_most_max_hits() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    session_with_rows(&root, 200);
    for (max, want) in [(3usize, 3usize), (65, 65), (1, 1), (500, 200)] {
        let o = logbook(
            &root,
            &["search", "s", "needle", "--max-hits", &max.to_string()],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        assert!(
            text.trim_end().ends_with(&format!("{want} hit(s)")),
            "--max-hits {max}: {text}"
        );
    }
}

#[test]
fn reading_commands_refuse_a_missing_root_and_make_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("typo").join("path");
    for args in [
        &["verify"][..],
        &["sessions"],
        &["history", "s"],
        &["search", "s", "x"],
    ] {
        let o = logbook(&typo, args);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("no Root at"), "{}", stderr(&o));
    }
    assert!(!tmp.path().join("typo").exists(), "nothing was created");
    // With --json the error is JSON too.
    let o = logbook(&typo, &["--json", "verify"]);
    let err: Value = serde_json::from_str(stderr(&o).trim()).unwrap();
    assert_eq!(err["error"]["code"], "not_found");
    // A Root that exists is read as before, and `--json verify` prints JSON.
    let root = tmp.path().join("root");
    session_with_rows(&root, 2);
    let o = logbook(&root, &["--json", "verify"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["sessions"], 1);
}

#[test]
fn control_characters_reach_the_terminal_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("red\x1b[31mname"), "x").unwrap();
    std::fs::write(ws.join("two\nlines"), "x").unwrap();
    let o = logbook(
        &root,
        &["new", "--id", "s", "--workspace", ws.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let events = tmp.path().join("e.jsonl");
    std::fs::write(
        &events,
        r#"{"kind":"modelCompletion","invocation":"i","model":"m","usage":null,"items":[{"kind":"assistant","body":"title \u001b]0;owned\u0007 and \r bell","thinking":null}]}"#,
    )
    .unwrap();
    assert!(logbook(&root, &["append", "s", events.to_str().unwrap()])
        .status
        .success());
    let ls = stdout(&logbook(&root, &["ls", "s"]));
    assert!(ls.contains("red\\x1b[31mname"), "{ls}");
    assert!(ls.contains("two\\nlines"), "{ls}");
    let history = stdout(&logbook(&root, &["history", "s"]));
    assert!(history.contains("\\x1b]0;owned\\x07"), "{history}");
    assert!(history.contains("\\r bell"), "{history}");
    for out in [&ls, &history] {
        assert!(
            !out.chars().any(|c| c.is_control() && c != '\n'),
            "a raw control character: {out:?}"
        );
    }
    // `--json` stays exact.
    let json = stdout(&logbook(&root, &["--json", "history", "s"]));
    let v: Value = serde_json::from_str(json.trim()).unwrap();
    let body = v["rows"][0]["fields"]["body"]["text"].as_str().unwrap();
    assert_eq!(body, "title \u{1b}]0;owned\u{7} and \r bell");
}

#[test]
fn large_files_and_limits_go_in_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    // 5,000 events: more than one append takes, so the command line batches them.
    session_with_rows(&root, 5000);
    let rows = |o: &Output| {
        stdout(o)
            .lines()
            .filter(|l| !l.starts_with("(more rows"))
            .count()
    };
    let o = logbook(&root, &["history", "s", "--limit", "5000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(rows(&o), 5000);
    let o = logbook(&root, &["history", "s", "--limit", "1500", "--backward"]);
    assert_eq!(rows(&o), 1500);
    assert!(stdout(&o).ends_with("(more rows: --all shows every one, --limit N the next N)\n"));
    // The same file again is the same batches: nothing is appended twice, and it says so.
    let events = root.with_extension("events.jsonl");
    let o = logbook(&root, &["append", "s", events.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("already appended"), "{}", stdout(&o));
    let o = logbook(&root, &["history", "s", "--all"]);
    assert_eq!(rows(&o), 5000);
    // A bad line is reported at its file and line.
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"kind\": \"userMessage\"}\n\n{\"kind\": \"nope\"}\n",
    )
    .unwrap();
    let o = logbook(&root, &["append", "s", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("bad.jsonl, line 1: not an event"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn one_bad_file_does_not_stop_an_import() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let good = |n: usize| {
        let p = tmp.path().join(format!("good{n}.jsonl"));
        std::fs::write(
            &p,
            format!(
                "{}\n{}\n",
                r#"{"type":"user","cwd":"/w","message":{"role":"user","content":"fix it"}}"#,
                format_args!(
                    r#"{{"type":"assistant","message":{{"model":"m","content":[{{"type":"text","text":"done {n}"}}]}}}}"#
                )
            ),
        )
        .unwrap();
        p
    };
    let (a, b) = (good(1), good(2));
    let missing = tmp.path().join("missing.jsonl");
    let o = logbook(
        &root,
        &[
            "import",
            a.to_str().unwrap(),
            missing.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(10), "io: {}", stderr(&o));
    assert!(stderr(&o).contains("missing.jsonl"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 of 3 file(s) failed"),
        "{}",
        stderr(&o)
    );
    let listed = stdout(&logbook(&root, &["--json", "sessions"]));
    let v: Value = serde_json::from_str(listed.trim()).unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 2, "{listed}");
}

#[test]
fn send_and_a_workspace_that_is_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::os::unix::fs::symlink(&ws, tmp.path().join("link")).unwrap();
    std::fs::write(tmp.path().join("file"), "x").unwrap();
    for bad in ["missing", "link", "file"] {
        let w = tmp.path().join(bad);
        let o = logbook(&root, &["new", "--workspace", w.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
    }
    let o = logbook(
        &root,
        &["new", "--id", "s", "--workspace", ws.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = logbook(&root, &["send", "s", "why?"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let invocation = stdout(&o).split_whitespace().last().unwrap().to_owned();
    assert!(invocation.starts_with("inv-"), "{}", stdout(&o));
    // Human history shows the invocation a fork needs.
    let history = stdout(&logbook(&root, &["history", "s"]));
    assert!(history.contains(&format!("[{invocation}]")), "{history}");
}

#[test]
fn completions_and_the_manual_page_are_generated() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    for shell in ["bash", "zsh", "fish"] {
        let o = logbook(&root, &["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        assert!(stdout(&o).contains("search"), "{shell}");
    }
    let o = logbook(&root, &["man"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with(".ie"), "roff");
    assert!(stdout(&o).contains("logbook"));
    // Neither made a Root.
    assert!(!root.exists());
}

/// A misspelt parameter is refused, naming it, rather than ignored (`casesensitive` used to
/// search case-insensitively without a word).
#[test]
fn unknown_parameters_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    session_with_rows(&root, 2);
    let mut s = common::Server::start(&root);
    let id = s.request(
        "search",
        serde_json::json!({"sessionId": "s", "query": "Needle", "casesensitive": true}),
    );
    let e = s.answer(id);
    assert_eq!(e["error"]["code"], "invalid_argument", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("casesensitive"),
        "{e}"
    );
    s.ok(
        "search",
        serde_json::json!({"sessionId": "s", "query": "Needle", "caseSensitive": true}),
    );
}

/// An error quotes what it refuses, but never all of a huge input.
#[test]
fn errors_quote_at_most_a_few_hundred_bytes_of_the_input() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let mut s = common::Server::start(&root);
    let huge = "x".repeat(1 << 20);
    let id = s.request(
        "history",
        serde_json::json!({"sessionId": huge, "limit": 5}),
    );
    let e = s.answer(id);
    let message = e["error"]["message"].as_str().unwrap();
    assert_eq!(e["error"]["code"], "not_found", "{}", &message[..200]);
    assert!(message.len() < 1200, "{} bytes", message.len());
    assert!(message.contains("cut: the message was"), "{message}");
}

#[test]
fn search_all_finds_every_session_newest_first_with_the_match_marked() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    for (id, text) in [
        ("older", "an older needle"),
        ("newer", "a newer Needle, and 日本 needle"),
    ] {
        assert!(logbook(&root, &["new", "--id", id]).status.success());
        let o = logbook(&root, &["send", id, text]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = logbook(&root, &["title", "older", "needle work"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = logbook(&root, &["search", "--all", "needle"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    // The Session changed last comes first; its title heads its hits.
    assert!(lines[0].starts_with("older  needle work"), "{out}");
    assert!(
        lines[1].contains("title") && lines[1].contains("«needle» work"),
        "{out}"
    );
    assert!(
        out.contains("«needle»") && out.contains("«Needle»"),
        "{out}"
    );
    assert!(out.contains("日本 «needle»"), "{out}");
    let total = 4;
    assert!(out.ends_with(&format!("{total} hit(s)\n")), "{out}");

    let o = logbook(
        &root,
        &["--json", "search", "--all", "needle", "--case-sensitive"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let hits = v["hits"].as_array().unwrap();
    assert!(hits
        .iter()
        .all(|h| h["sessionId"].is_string() && h["field"].is_string()));
    assert_eq!(hits.len(), total - 1, "{v}");

    let o = logbook(
        &root,
        &[
            "search",
            "--all",
            "needle",
            "--since",
            "1h",
            "--max-hits",
            "1",
        ],
    );
    assert!(stdout(&o).ends_with("1 hit(s)\n"), "{}", stdout(&o));
    let o = logbook(
        &root,
        &["search", "--all", "needle", "--since", "last tuesday"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("activeSince"), "{}", stderr(&o));
    let o = logbook(
        &root,
        &["search", "--all", "needle", "--workspace", "/nowhere"],
    );
    assert!(stdout(&o).ends_with("0 hit(s)\n"), "{}", stdout(&o));
}
