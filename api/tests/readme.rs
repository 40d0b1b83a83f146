#![allow(clippy::unwrap_used)]
//! Every line of the README's "The command line" block, run as written by `bash` in a fresh
//! home directory, on a git workspace, with the built `logbook` first on `PATH`. The only
//! things filled in are what the README asks the reader to bring: the invocation that `send`
//! printed (for `INVOCATION`), the `events.jsonl` it describes, a transcript under
//! `~/transcripts/`, and the directories the completion and manual lines write into. A line
//! that fails, or a README line this test does not know how to prepare for, fails the test:
//! the README and the command line cannot drift apart.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_logbook"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The indented lines of the README section `## The command line`, comments cut.
fn readme_commands() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let section = readme
        .split("\n## The command line\n")
        .nth(1)
        .expect("the README has a command-line section");
    let mut lines = Vec::new();
    let mut started = false;
    for line in section.lines() {
        match line.strip_prefix("    ") {
            Some(cmd) => {
                started = true;
                let cmd = match cmd.find("  #") {
                    Some(at) => &cmd[..at],
                    None => cmd,
                };
                lines.push(cmd.trim().to_owned());
            }
            None if started => break,
            None => {}
        }
    }
    assert!(lines.len() > 20, "found the block: {lines:?}");
    lines
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {o:?}");
}

fn run(line: &str, home: &Path, work: &Path, root: Option<&str>) -> Output {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(line)
        .current_dir(work)
        .env("PATH", path)
        .env("HOME", home)
        .env_remove("LOGBOOK_ROOT")
        // `logbook import` with no path looks where these say: in the test's home only.
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("CODEX_HOME")
        .stdin(Stdio::null());
    if let Some(r) = root {
        c.env("LOGBOOK_ROOT", r);
    }
    c.output().unwrap()
}

#[test]
fn every_command_line_example_of_the_readme_runs_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let work = home.join("project");
    std::fs::create_dir_all(work.join("src")).unwrap();
    // The workspace: a git repository with a change, so `ls`, `cat`, `git status`,
    // `git diff` and `patch` have something to show.
    std::fs::write(work.join("README.md"), "# project\n").unwrap();
    std::fs::write(work.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    git(&work, &["init", "-q"]);
    git(&work, &["add", "."]);
    git(
        &work,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "first",
        ],
    );
    std::fs::write(
        work.join("src/lib.rs"),
        "pub fn f() { println!(\"hi\"); }\n",
    )
    .unwrap();
    // What the completion and manual lines write into.
    std::fs::create_dir_all(home.join(".local/share/bash-completion/completions")).unwrap();
    std::fs::create_dir_all(home.join(".local/share/man/man1")).unwrap();
    // A transcript to import (a Claude Code session file), and one in Claude Code's default
    // place for `logbook import` with no path.
    std::fs::create_dir_all(home.join("transcripts")).unwrap();
    std::fs::write(
        home.join("transcripts/one.jsonl"),
        concat!(
            r#"{"type":"user","cwd":"/w","message":{"role":"user","content":"fix the tombstone"}}"#,
            "\n",
            r#"{"type":"assistant","message":{"model":"m","content":[{"type":"text","text":"done"}]}}"#,
            "\n"
        ),
    )
    .unwrap();
    std::fs::create_dir_all(home.join(".claude/projects/-w")).unwrap();
    std::fs::write(
        home.join(".claude/projects/-w/0b1c.jsonl"),
        concat!(
            r#"{"type":"user","sessionId":"0b1c","cwd":"/w","message":{"role":"user","content":"why does it stay"}}"#,
            "\n"
        ),
    )
    .unwrap();

    let mut root: Option<String> = None;
    let mut invocation: Option<String> = None;
    for line in readme_commands() {
        if let Some(assign) = line.strip_prefix("export ") {
            let (var, value) = assign.split_once('=').expect("VAR=value");
            assert_eq!(
                var, "LOGBOOK_ROOT",
                "an export the test does not know: {line}"
            );
            root = Some(value.replace("$HOME", home.to_str().unwrap()));
            continue;
        }
        let mut line = line.clone();
        if line.contains("INVOCATION") {
            let inv = invocation
                .as_deref()
                .expect("`send` comes before the lines that name its invocation");
            line = line.replace("INVOCATION", inv);
        }
        if line.contains("events.jsonl") {
            let inv = invocation.as_deref().expect("`send` comes before `append`");
            let readme =
                std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
                    .unwrap();
            // The event lines the README shows right after the block.
            let events: String = readme
                .lines()
                .map(str::trim)
                .filter(|l| l.starts_with("{\"kind\": "))
                .map(|l| format!("{}\n", l.replace("INVOCATION", inv)))
                .collect();
            assert!(!events.is_empty(), "the README shows events to append");
            std::fs::write(work.join("events.jsonl"), events).unwrap();
        }
        let o = run(&line, &home, &work, root.as_deref());
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        assert!(
            o.status.success(),
            "README line `{line}` failed ({:?}):\n{out}\n{err}",
            o.status
        );
        if line.starts_with("logbook send ") {
            // The invocation is the one word of the answer that looks like one.
            invocation = out
                .split(|c: char| c.is_whitespace() || c == '[' || c == ']')
                .find(|w| w.starts_with("inv-") || w.starts_with("i-"))
                .map(str::to_owned);
            assert!(invocation.is_some(), "`send` printed its invocation: {out}");
        }
        if line.starts_with("logbook search s1") {
            assert!(out.contains("tombstone"), "{line}: {out}");
        }
        if line.starts_with("logbook cat s1 README.md") {
            assert!(out.contains("# project"), "{line}: {out}");
        }
        if line.starts_with("logbook git diff") {
            assert!(out.contains("println"), "{line}: {out}");
        }
    }
    let root = root.expect("the README sets a Root");
    assert!(Path::new(&root).join("logbook.root").exists());
    assert!(
        !work.join(".logbook").exists(),
        "no second Root in the workspace"
    );
    assert!(home
        .join(".local/share/man/man1/logbook.1")
        .metadata()
        .is_ok_and(|m| m.len() > 0));
}
