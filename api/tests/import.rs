#![allow(clippy::unwrap_used)]
//! `logbook import` of Claude Code and Codex transcripts: ids, workspaces, titles and
//! sub-agents from fixtures in the agents' current formats (`tests/fixtures/import`, made
//! from their public format descriptions), incremental imports checked against a fresh import
//! of the final file (the model), rewritten and torn transcripts, folder walks and the
//! default places, bad files and exit codes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use logbook_api::import::{self, Did, FileDone};
use logbook_api::Host;
use logbook_engine::Event;
use serde_json::{json, Value};

const CLAUDE_ID: &str = "5b9e0c2a-7d41-4c3e-9f0a-2b8d6e1f4a10";
const CODEX_ID: &str = "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5";
const CODEX_SUB_ID: &str = "019a2d7b-0000-7000-8000-00000000beef";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import")
}

fn claude_file() -> PathBuf {
    fixtures().join(format!("claude/-home-ada-tombstone/{CLAUDE_ID}.jsonl"))
}

fn claude_agent_file() -> PathBuf {
    fixtures().join(format!(
        "claude/-home-ada-tombstone/{CLAUDE_ID}/subagents/agent-a7e2c91.jsonl"
    ))
}

fn codex_file() -> PathBuf {
    fixtures().join(format!(
        "codex/2026/03/14/rollout-2026-03-14T10-00-00-{CODEX_ID}.jsonl"
    ))
}

fn codex_sub_file() -> PathBuf {
    fixtures().join(format!(
        "codex/2026/03/14/rollout-2026-03-14T10-02-00-{CODEX_SUB_ID}.jsonl"
    ))
}

fn host(dir: &Path) -> Host {
    Host::open_or_init(dir).unwrap()
}

/// Every event of a Session as wire JSON, import marks left out (they are the import's
/// bookkeeping, and where they fall depends on how often it ran).
fn events(host: &Host, id: &str) -> Vec<Value> {
    let rev = host.root().revision(id).unwrap();
    (1..=rev)
        .map(|s| host.root().read_event(id, s).unwrap())
        .filter(|e| !matches!(e, Event::ImportMark(_)))
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

fn marks(host: &Host, id: &str) -> Vec<logbook_engine::ImportMark> {
    let rev = host.root().revision(id).unwrap();
    (1..=rev)
        .filter_map(|s| match host.root().read_event(id, s).unwrap() {
            Event::ImportMark(m) => Some(m),
            _ => None,
        })
        .collect()
}

/// The history's rows without their positions: (kind, invocation, fields).
fn rows(host: &Host, id: &str) -> Vec<Value> {
    let page = logbook_api::dispatch::call_value(
        host,
        "history",
        &json!({"sessionId": id, "limit": 1024}),
    )
    .unwrap();
    page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| json!([r["kind"], r["invocation"], r["fields"]]))
        .collect()
}

fn info(host: &Host, id: &str) -> Value {
    serde_json::to_value(host.root().session_info(id).unwrap()).unwrap()
}

/// The Sessions one import of `file` did, by id.
fn dids(done: &FileDone) -> Vec<(String, String)> {
    match done {
        FileDone::Transcript { sessions, .. } => sessions
            .iter()
            .map(|(t, d)| (t.session_id.clone(), format!("{d:?}")))
            .collect(),
        other => panic!("not a transcript: {other:?}"),
    }
}

fn skipped(done: &FileDone) -> Vec<(usize, String)> {
    match done {
        FileDone::Transcript { skipped, .. } => skipped.clone(),
        other => panic!("not a transcript: {other:?}"),
    }
}

#[test]
fn claude_code_sessions_keep_their_id_workspace_title_and_sub_agents() {
    let tmp = tempfile::tempdir().unwrap();
    let h = host(&tmp.path().join("root"));
    let done = import::import_file(&h, &claude_file(), true, None);
    let main = format!("claude-{CLAUDE_ID}");
    let inline = format!("{main}-agent-sidechain");
    assert_eq!(
        dids(&done),
        [
            (main.clone(), "New { events: 15 }".to_owned()),
            (inline.clone(), "New { events: 3 }".to_owned()),
        ]
    );
    let reasons: Vec<String> = skipped(&done).into_iter().map(|(_, r)| r).collect();
    for want in [
        "isMeta",
        "\"agent-lifecycle-v9\" (not known",
        "JSON but not an object",
        "\"mystery_block\"",
        "torn last line",
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(want)),
            "{want}: {reasons:?}"
        );
    }
    let i = info(&h, &main);
    assert_eq!(i["workspace"], "/home/ada/tombstone");
    // The custom title came after the summary: the latest wins.
    assert_eq!(i["title"], "Tombstone race in Segment::scan");
    let r = rows(&h, &main);
    let kinds: Vec<&str> = r.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "user",
            "assistant",
            "toolCall",
            "toolResult",
            "toolCall",
            "toolResult",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    // Tool calls keep their input as JSON text, results their error status and text.
    assert_eq!(r[2][2]["name"]["text"], "Bash");
    assert!(r[2][2]["arguments"]["text"]
        .as_str()
        .unwrap()
        .contains("cargo test tombstone"));
    assert!(r[5][2]["body"]["text"]
        .as_str()
        .unwrap()
        .contains("Two readers"));
    // The image is named, not lost silently; the compaction summary is model output.
    assert_eq!(
        r[7][2]["body"]["text"],
        "Here is the CI screenshot.\n[image/png not imported]"
    );
    assert!(r[8][2]["body"]["text"]
        .as_str()
        .unwrap()
        .starts_with("This session is being continued"));
    let ev = events(&h, &main);
    // Usage once per response (two records of msg_01), the end_turn settles the Turn.
    let usages: Vec<&Value> = ev
        .iter()
        .filter(|e| e["kind"] == "modelCompletion")
        .map(|e| &e["usage"])
        .collect();
    assert_eq!(usages[0]["inputTokens"], 1200);
    assert!(usages[1].is_null());
    assert!(ev
        .iter()
        .any(|e| e["kind"] == "turnSettled" && e["invocation"] == "imported-1"));
    // The last Turn stays open: the agent may still be working on it.
    assert!(!ev
        .iter()
        .any(|e| e["kind"] == "turnSettled" && e["invocation"] == "imported-4"));
    // Sub-agents: the inline sidechain and the sub-agent file, each linked to the parent.
    let m = marks(&h, &inline);
    assert_eq!(m[0].parent.as_deref(), Some(main.as_str()));
    assert_eq!(m[0].origin, format!("claude:{CLAUDE_ID}/agent:sidechain"));
    let done = import::import_file(&h, &claude_agent_file(), true, None);
    let agent = format!("{main}-agent-a7e2c91");
    assert_eq!(
        dids(&done),
        [(agent.clone(), "New { events: 5 }".to_owned())]
    );
    assert_eq!(marks(&h, &agent)[0].parent.as_deref(), Some(main.as_str()));
    // The listing links each sub-agent to its parent; the parent itself has none.
    assert_eq!(info(&h, &agent)["parent"], main.as_str());
    assert_eq!(info(&h, &inline)["parent"], main.as_str());
    assert!(info(&h, &main).get("parent").is_none());
    assert_eq!(
        info(&h, &agent)["title"],
        "List every function that reads a tombstone record."
    );
    assert_eq!(marks(&h, &main)[0].origin, format!("claude:{CLAUDE_ID}"));
}

#[test]
fn codex_rollouts_keep_their_id_workspace_title_and_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let h = host(&tmp.path().join("root"));
    let done = import::import_file(&h, &codex_file(), true, None);
    let id = format!("codex-{CODEX_ID}");
    assert_eq!(dids(&done), [(id.clone(), "New { events: 15 }".to_owned())]);
    let reasons: Vec<String> = skipped(&done).into_iter().map(|(_, r)| r).collect();
    for want in [
        "instructions to the model",
        "context the agent injected",
        "\"world_state\"",
        "\"hologram_call\"",
        "not an object",
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(want)),
            "{want}: {reasons:?}"
        );
    }
    let i = info(&h, &id);
    assert_eq!(i["workspace"], "/home/ada/tombstone");
    assert_eq!(i["title"], "Tombstone race on CI");
    let ev = events(&h, &id);
    let settled: Vec<(&Value, &Value)> = ev
        .iter()
        .filter(|e| e["kind"] == "turnSettled")
        .map(|e| (&e["invocation"], &e["outcome"]))
        .collect();
    assert_eq!(
        settled,
        [
            (&json!("imported-1"), &json!("completed")),
            (&json!("imported-2"), &json!("stopped"))
        ]
    );
    let failed = ev.iter().find(|e| e["kind"] == "toolResult").unwrap();
    assert_eq!(failed["status"], "error", "exit code 101");
    assert_eq!(failed["body"], "test tombstone ... FAILED\n");
    assert!(ev
        .iter()
        .any(|e| e["kind"] == "modelCompletion" && e["model"] == "gpt-5-codex"));
    let done = import::import_file(&h, &codex_sub_file(), true, None);
    let sub = format!("codex-{CODEX_SUB_ID}");
    assert_eq!(dids(&done), [(sub.clone(), "New { events: 3 }".to_owned())]);
    assert_eq!(marks(&h, &sub)[0].parent.as_deref(), Some(id.as_str()));
}

/// The fixture's whole lines (each with its `\n`) and its torn tail.
fn fixture_lines(file: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(file).unwrap();
    bytes
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// A small deterministic generator (xorshift), seeded and printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The model check: a transcript imported as it grows (whole lines and torn halves, in random
/// steps) ends as a fresh import of the final file does, and importing again changes nothing.
#[test]
fn imports_of_a_growing_transcript_end_as_one_import_of_the_whole() {
    let seed = std::env::var("IMPORT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_u64);
    println!("seed {seed} (set IMPORT_SEED to repeat)");
    let mut rng = Rng(seed | 1);
    for source in [claude_file(), codex_file(), claude_agent_file()] {
        for round in 0..3 {
            let tmp = tempfile::tempdir().unwrap();
            let file = tmp.path().join("t.jsonl");
            let parts = fixture_lines(&source);
            let all: Vec<u8> = parts.concat();
            let grown = import_growing(&tmp.path().join("a"), &file, &all, &mut rng);
            let fresh = host(&tmp.path().join("b"));
            import::import_file(&fresh, &file, true, None);
            let ids = session_ids(&fresh);
            assert_eq!(session_ids(&grown), ids, "{source:?} round {round}");
            for id in &ids {
                assert_eq!(events(&grown, id), events(&fresh, id), "{id} round {round}");
                assert_eq!(rows(&grown, id), rows(&fresh, id), "{id} round {round}");
                assert_eq!(info(&grown, id)["title"], info(&fresh, id)["title"]);
            }
            // Once more: unchanged.
            let done = import::import_file(&grown, &file, true, None);
            for (_, did) in dids(&done) {
                assert!(did.starts_with("Unchanged"), "{did}");
            }
        }
    }
}

/// Writes `all` into `file` in random steps (cutting inside lines too), importing after each.
fn import_growing(root: &Path, file: &Path, all: &[u8], rng: &mut Rng) -> Host {
    let h = host(root);
    let mut at = 0;
    std::fs::write(file, b"").unwrap();
    while at < all.len() {
        let step = 1 + rng.below(all.len() / 3);
        at = (at + step).min(all.len());
        std::fs::write(file, &all[..at]).unwrap();
        let done = import::import_file(&h, file, true, None);
        match &done {
            FileDone::Transcript { sessions, .. } => {
                for (t, did) in sessions {
                    assert!(
                        matches!(
                            did,
                            Did::New { .. } | Did::Grown { .. } | Did::Unchanged { .. }
                        ),
                        "{} at byte {at}: {did:?}",
                        t.session_id
                    );
                }
            }
            // Too little yet to tell the format.
            FileDone::Failed(e) => assert_eq!(e.code.as_str(), "invalid_argument", "{e}"),
            other => panic!("{other:?}"),
        }
    }
    h
}

fn session_ids(h: &Host) -> Vec<String> {
    let mut ids: Vec<String> = h
        .root()
        .sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    ids.sort();
    ids
}

#[test]
fn a_torn_line_is_taken_once_it_is_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let h = host(&tmp.path().join("root"));
    let file = tmp.path().join("c.jsonl");
    let full = std::fs::read(codex_file()).unwrap();
    let text = String::from_utf8(full).unwrap();
    let last_start = text[..text.len() - 1].rfind('\n').unwrap() + 1;
    // The last line cut in the middle of a character of its text would be torn too.
    let cut = last_start + 40;
    std::fs::write(&file, &text[..cut]).unwrap();
    let first = import::import_file(&h, &file, true, None);
    let id = format!("codex-{CODEX_ID}");
    let before = events(&h, &id);
    assert!(skipped(&first)
        .iter()
        .any(|(_, r)| r.starts_with("torn last line")));
    std::fs::write(&file, &text).unwrap();
    let second = import::import_file(&h, &file, true, None);
    assert_eq!(
        dids(&second),
        [(id.clone(), "Grown { events: 1 }".to_owned())]
    );
    let after = events(&h, &id);
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(
        after.last().unwrap()["items"][0]["body"],
        "Added tests/tombstone_race.rs."
    );
}

#[test]
fn a_rewritten_transcript_is_reported_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let h = host(&tmp.path().join("root"));
    let file = tmp.path().join("c.jsonl");
    let text = std::fs::read_to_string(codex_file()).unwrap();
    std::fs::write(&file, &text).unwrap();
    import::import_file(&h, &file, true, None);
    let id = format!("codex-{CODEX_ID}");
    let before = events(&h, &id);
    // The same session, its history edited: a prompt changed, a line added.
    let edited = text.replace("Why does the tombstone", "Why does the gravestone")
        + "{\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"more\"}]}}\n";
    std::fs::write(&file, &edited).unwrap();
    let done = import::import_file(&h, &file, true, None);
    let d = dids(&done);
    assert!(d[0].1.starts_with("Rewritten"), "{d:?}");
    assert_eq!(events(&h, &id), before, "nothing appended");
    // Cut shorter than what was imported: also rewritten.
    std::fs::write(&file, &text[..text.len() / 2]).unwrap();
    let d = dids(&import::import_file(&h, &file, true, None));
    assert!(d[0].1.contains("whole line(s) now"), "{d:?}");
    assert_eq!(events(&h, &id), before);
}

#[test]
fn an_import_stopped_after_its_create_goes_on_and_a_foreign_session_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let h = host(&tmp.path().join("root"));
    // A Session another client made under the id a transcript would take.
    let id = format!("codex-{CODEX_ID}");
    logbook_api::dispatch::call_value(
        &h,
        "createSession",
        &json!({"sessionId": id, "workspace": null, "operation": "mine"}),
    )
    .unwrap();
    let d = dids(&import::import_file(&h, &codex_file(), true, None));
    assert!(d[0].1.starts_with("Taken"), "{d:?}");
    assert_eq!(h.root().revision(&id).unwrap(), 1);
    // A crash between an import's createSession and its first append: the next one goes on.
    let id = format!("codex-{CODEX_SUB_ID}");
    let origin = format!("codex:{CODEX_SUB_ID}");
    let op = format!("import-{}", &common::digest(origin.as_bytes())[7..31]);
    logbook_api::dispatch::call_value(
        &h,
        "createSession",
        &json!({"sessionId": id, "workspace": "/home/ada/tombstone", "operation": op}),
    )
    .unwrap();
    let d = dids(&import::import_file(&h, &codex_sub_file(), true, None));
    assert_eq!(d, [(id.clone(), "New { events: 3 }".to_owned())]);
}

/// Runs `logbook --root ROOT import ARGS...` with only `env` set (no HOME of the machine's).
fn logbook_import(root: &Path, args: &[&Path], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(common::bin());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("--root")
        .arg(root)
        .arg("import")
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn a_folder_walk_never_follows_a_symbolic_link_and_skips_what_is_not_a_transcript() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("in");
    copy_tree(&fixtures().join("codex"), &dir.join("codex"));
    // A transcript reachable only through links: never imported.
    let outside = tmp.path().join("outside");
    copy_tree(&fixtures().join("claude"), &outside);
    std::os::unix::fs::symlink(&outside, dir.join("linked-folder")).unwrap();
    std::os::unix::fs::symlink(claude_file(), dir.join("linked.jsonl")).unwrap();
    std::fs::write(dir.join("notes.md"), "# not a transcript\n").unwrap();
    std::fs::write(dir.join("blob.bin"), [0u8, 159, 146, 150, 0, 1]).unwrap();
    let root = tmp.path().join("root");
    let o = logbook_import(&root, &[&dir], &[]);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("linked-folder: skipped, a symbolic link"),
        "{text}"
    );
    assert!(
        text.contains("linked.jsonl: skipped, a symbolic link"),
        "{text}"
    );
    assert!(
        text.contains("notes.md: skipped, not a transcript"),
        "{text}"
    );
    assert!(
        text.contains("blob.bin: skipped, not a transcript: binary"),
        "{text}"
    );
    assert!(text.contains("2 new Session(s)"), "{text}");
    assert_eq!(
        session_ids(&host(&root)),
        [format!("codex-{CODEX_ID}"), format!("codex-{CODEX_SUB_ID}")]
    );
    // Again: everything unchanged.
    let o = logbook_import(&root, &[&dir], &[]);
    assert!(out(&o).contains("2 unchanged"), "{}", out(&o));
    // A link named on the command line is refused (exit 2) and the rest still goes in.
    let o = logbook_import(&root, &[&dir.join("linked.jsonl")], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
}

#[test]
fn with_no_path_import_reads_the_agents_default_places() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    copy_tree(&fixtures().join("claude"), &home.join(".claude/projects"));
    copy_tree(&fixtures().join("codex"), &home.join(".codex/sessions"));
    let root = tmp.path().join("root");
    let o = logbook_import(&root, &[], &[("HOME", &home)]);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("5 new Session(s)"), "{text}");
    // The agents' own variables win over HOME.
    let cfg = tmp.path().join("claude-config");
    let codex = tmp.path().join("codex-home");
    std::fs::create_dir_all(cfg.join("projects/p")).unwrap();
    std::fs::copy(codex_sub_file(), cfg.join("projects/p/x.jsonl")).unwrap();
    std::fs::create_dir_all(&codex).unwrap();
    let root2 = tmp.path().join("root2");
    let o = logbook_import(
        &root2,
        &[],
        &[
            ("HOME", &home),
            ("CLAUDE_CONFIG_DIR", &cfg),
            ("CODEX_HOME", &codex),
        ],
    );
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("no Codex transcripts at"), "{text}");
    assert_eq!(
        session_ids(&host(&root2)),
        [format!("codex-{CODEX_SUB_ID}")]
    );
}

#[test]
fn failures_are_reported_and_set_the_exit_status_after_the_rest_went_in() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("in");
    copy_tree(&fixtures().join("codex"), &dir);
    let root = tmp.path().join("root");
    // A named file that is not a transcript: invalid_argument (2).
    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, "hello\n").unwrap();
    let o = logbook_import(&root, &[&notes, &dir], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("1 of 3 file(s) failed"), "{}", out(&o));
    assert_eq!(session_ids(&host(&root)).len(), 2);
    // A file that cannot be read: permission_denied (8), unless root reads it anyway.
    let locked = dir.join("locked.jsonl");
    std::fs::copy(claude_file(), &locked).unwrap();
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    if rustix::process::geteuid().is_root() {
        println!("skipped the permission-denied case: running as root, which reads any file");
    } else {
        let o = logbook_import(&root, &[&dir], &[]);
        assert_eq!(o.status.code(), Some(8), "{}", out(&o));
        assert!(out(&o).contains("locked.jsonl: not imported: permission_denied"));
        assert!(out(&o).contains("2 unchanged"), "{}", out(&o));
    }
}
