//! The main job, `logbook demo`: a tour of Logbook on a real session.
//!
//! Writes the conversation shipped in `data/sample-session.jsonl` into a new
//! Session of the Root (user messages through `send`, the rest through
//! `append`, each with its own operation), then reads it back page by page in
//! both directions, searches it, reads a long field whole, and looks at the
//! current directory as the Session's workspace: a listing, a file read, and
//! git status. Every step prints what it did and how long it took. Running it
//! again adds another Session; nothing is overwritten.

use std::path::Path;
use std::time::Instant;

use base64::Engine as _;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use sha2::Digest as _;

use crate::{dispatch, ApiError, ErrorCode, Host};

/// The conversation the demo writes, in the wire's event shape (`bytes` and
/// `digest` of tool results are computed on loading).
pub const SAMPLE_SESSION: &str = include_str!("../data/sample-session.jsonl");

/// Tests in the long test log that stands in for `@@TESTLOG@@`, so one tool
/// result is longer than a history row shows.
const TEST_LOG_CASES: usize = 1800;

fn call(host: &Host, method: &str, params: Value) -> Result<Value, ApiError> {
    dispatch::call_value(host, method, &params)
}

fn ms(t: Instant) -> String {
    format!("{:.2} ms", t.elapsed().as_secs_f64() * 1e3)
}

/// sha256 digest in the wire's spelling.
pub fn digest(bytes: &[u8]) -> String {
    let hash = sha2::Sha256::digest(bytes);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn test_log() -> String {
    let mut log = String::from("\nrunning 1800 tests\n");
    for i in 0..TEST_LOG_CASES {
        log.push_str(&format!(
            "test scheduler::backoff::case_{i:04}_retries_with_jitter_within_the_timeout ... ok\n"
        ));
    }
    log.push_str("\ntest result: ok. 1800 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.93s\n");
    log
}

/// The sample's events, with tool-result sizes and digests filled in.
pub fn sample_events() -> Vec<Value> {
    let log = test_log();
    SAMPLE_SESSION
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut event: Value =
                serde_json::from_str(line).expect("the shipped sample is valid JSON");
            if event["kind"] == "toolResult" {
                if event["body"] == "@@TESTLOG@@" {
                    event["body"] = Value::from(log.clone());
                    event["parts"] = json!([{"kind": "text", "text": log}]);
                }
                let body = event["body"].as_str().unwrap_or("").to_owned();
                event["bytes"] = Value::from(body.len());
                event["digest"] = Value::from(digest(body.as_bytes()));
            }
            event
        })
        .collect()
}

/// Runs the tour against the Root at `root` (created when absent).
pub fn run(root: &Path) -> Result<(), ApiError> {
    let started = Instant::now();
    let t = Instant::now();
    let host = Host::open_or_init(root)?;
    let cwd = std::env::current_dir().map_err(|e| {
        ApiError::new(
            ErrorCode::Io,
            format!("cannot read the current directory: {e}"),
        )
    })?;
    println!("Root        {} (opened in {})", root.display(), ms(t));

    // The next free `demo-N`: pages by id from "demo-" on.
    let mut n = 0;
    let mut after = json!("demo-");
    loop {
        let page = call(
            &host,
            "sessions",
            json!({"order": "id", "after": after, "limit": 1024}),
        )?;
        let ids: Vec<&str> = page["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["sessionId"].as_str())
            .collect();
        let demos = ids.iter().take_while(|id| id.starts_with("demo-")).count();
        n += demos;
        after = page["nextAfter"].clone();
        if demos < ids.len() || after.is_null() {
            break;
        }
    }
    let session = format!("demo-{}", n + 1);
    let t = Instant::now();
    call(
        &host,
        "createSession",
        json!({"sessionId": session, "workspace": cwd, "operation": format!("create-{session}")}),
    )?;
    println!(
        "Session     {session}, workspace {} (created in {})",
        cwd.display(),
        ms(t)
    );

    write_sample(&host, &session)?;
    read_back(&host, &session)?;
    search(&host, &session)?;
    workspace(&host, &session)?;
    println!(
        "\nDone in {}. Run it again for another Session; `logbook --help` for the rest.",
        ms(started)
    );
    Ok(())
}

fn write_sample(host: &Host, session: &str) -> Result<(), ApiError> {
    let events = sample_events();
    let t = Instant::now();
    let (mut sends, mut appends, mut bytes) = (0, 0, 0usize);
    let mut invocations = std::collections::HashMap::new();
    let mut batch: Vec<Value> = Vec::new();
    let flush = |batch: &mut Vec<Value>, appends: &mut usize| -> Result<(), ApiError> {
        if batch.is_empty() {
            return Ok(());
        }
        *appends += 1;
        call(
            host,
            "append",
            json!({"sessionId": session, "operation": format!("{session}-append-{appends}"), "events": batch}),
        )?;
        batch.clear();
        Ok(())
    };
    for mut event in events {
        bytes += event.to_string().len();
        if event["kind"] == "userMessage" {
            flush(&mut batch, &mut appends)?;
            sends += 1;
            let sent = call(
                host,
                "send",
                json!({"sessionId": session, "operation": format!("{session}-send-{sends}"),
                       "text": event["text"], "attachments": []}),
            )?;
            let local = event["invocation"].as_str().unwrap_or("").to_owned();
            invocations.insert(local, sent["invocation"].clone());
            continue;
        }
        if let Some(inv) = event["invocation"]
            .as_str()
            .and_then(|i| invocations.get(i))
        {
            event["invocation"] = inv.clone();
        }
        // Each model step is committed on its own, as a running agent would.
        let ends_step = matches!(
            event["kind"].as_str(),
            Some("modelCompletion" | "turnSettled" | "toolResult")
        );
        batch.push(event);
        if ends_step {
            flush(&mut batch, &mut appends)?;
        }
    }
    flush(&mut batch, &mut appends)?;
    println!(
        "Wrote       {sends} messages with send and {appends} batches with append, {:.1} KiB, in {} (each durable)",
        bytes as f64 / 1024.0,
        ms(t)
    );
    Ok(())
}

fn read_back(host: &Host, session: &str) -> Result<(), ApiError> {
    let t = Instant::now();
    let last = call(
        host,
        "history",
        json!({"sessionId": session, "direction": "backward", "limit": 5}),
    )?;
    println!("\nThe conversation's end, newest first ({}):", ms(t));
    print_rows(&last);
    let through = last["through"].clone();

    let t = Instant::now();
    let (mut pages, mut rows, mut truncated) = (0, 0, None);
    let mut after = Value::Null;
    loop {
        let page = call(
            host,
            "history",
            json!({"sessionId": session, "through": through, "after": after, "limit": 8}),
        )?;
        pages += 1;
        for row in page["rows"].as_array().into_iter().flatten() {
            rows += 1;
            for (name, field) in row["fields"].as_object().into_iter().flatten() {
                if field["truncated"] == true && truncated.is_none() {
                    truncated = Some((
                        row["position"].clone(),
                        name.clone(),
                        field["bytes"].clone(),
                    ));
                }
            }
        }
        after = page["nextAfter"].clone();
        if after.is_null() {
            break;
        }
    }
    println!(
        "\nRead        {rows} rows in {pages} pages of 8 under fence {through}, forward, in {}",
        ms(t)
    );
    if let Some((position, field, size)) = truncated {
        let t = Instant::now();
        let mut whole = 0usize;
        let mut after = Value::Null;
        loop {
            let part = call(
                host,
                "source",
                json!({"sessionId": session, "through": through,
                "position": position, "field": field, "after": after}),
            )?;
            whole += part["text"].as_str().map_or(0, str::len);
            after = part["nextAfter"].clone();
            if after.is_null() {
                break;
            }
        }
        println!("Source      row {} field {field}: {size} bytes (cut in history), read whole: {whole} bytes in {}",
            position, ms(t));
    }
    Ok(())
}

fn print_rows(page: &Value) {
    for row in page["rows"].as_array().into_iter().flatten() {
        let fields = row["fields"].as_object();
        let text = fields
            .and_then(|f| ["body", "arguments"].iter().find_map(|k| f.get(*k)))
            .and_then(|f| f["text"].as_str())
            .unwrap_or("");
        let first: String = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .chars()
            .take(90)
            .collect();
        println!(
            "  {:>3}.{} {:<10} {first}",
            row["position"]["sourceSequence"],
            row["position"]["itemIndex"],
            row["kind"].as_str().unwrap_or("")
        );
    }
}

fn search(host: &Host, session: &str) -> Result<(), ApiError> {
    println!();
    let queries: [(&str, bool, bool); 5] = [
        ("parse_duration", true, false),
        ("PANICKED", false, false),
        ("σίγμα", false, false),
        ("ẞ", false, false),
        ("ok", false, true),
    ];
    for (query, case_sensitive, whole_word) in queries {
        let t = Instant::now();
        let (mut hits, mut first) = (0usize, None);
        let mut after = Value::Null;
        let mut through = Value::Null;
        loop {
            let page = call(
                host,
                "search",
                json!({"sessionId": session, "query": query,
                "caseSensitive": case_sensitive, "wholeWord": whole_word, "through": through, "after": after}),
            )?;
            for hit in page["hits"].as_array().into_iter().flatten() {
                hits += 1;
                first.get_or_insert_with(|| hit.clone());
            }
            through = page["through"].clone();
            after = page["nextAfter"].clone();
            if after.is_null() {
                break;
            }
        }
        let options = match (case_sensitive, whole_word) {
            (true, _) => "case-sensitive",
            (false, true) => "any case, whole word",
            (false, false) => "any case",
        };
        let at = first
            .map(|h| {
                format!(
                    ", first at {}.{} {} bytes {}..{}",
                    h["position"]["sourceSequence"],
                    h["position"]["itemIndex"],
                    h["field"].as_str().unwrap_or(""),
                    h["start"],
                    h["end"]
                )
            })
            .unwrap_or_default();
        println!(
            "Search      {query:?} ({options}): {hits} hits{at} in {}",
            ms(t)
        );
    }
    Ok(())
}

fn workspace(host: &Host, session: &str) -> Result<(), ApiError> {
    println!();
    let t = Instant::now();
    let list = call(host, "listFiles", json!({"sessionId": session}))?;
    let entries = list["entries"].as_array().cloned().unwrap_or_default();
    let names: Vec<String> = entries
        .iter()
        .take(12)
        .map(|e| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(e["name"]["bytesBase64"].as_str().unwrap_or(""))
                .unwrap_or_default();
            let mark = if e["kind"] == "directory" { "/" } else { "" };
            format!("{}{mark}", String::from_utf8_lossy(&bytes))
        })
        .collect();
    println!(
        "listFiles   {} entries on the first page in {}: {}",
        entries.len(),
        ms(t),
        names.join("  ")
    );

    let file = entries
        .iter()
        .find(|e| {
            e["kind"] == "file"
                && e["name"]["bytesBase64"]
                    == base64::engine::general_purpose::STANDARD.encode("README.md")
        })
        .or_else(|| entries.iter().find(|e| e["kind"] == "file"));
    if let Some(file) = file {
        let t = Instant::now();
        let raw =
            RawValue::from_string(json!({"sessionId": session, "path": file["name"]}).to_string())
                .expect("a Value always encodes");
        let (mut chunks, mut end) = (0, Value::Null);
        let mut other = None;
        dispatch::call(host, "readFile", Some(&raw), &mut |item| {
            let item: Value = serde_json::from_str(item.get()).expect("the dispatcher writes JSON");
            match item["kind"].as_str() {
                Some("chunk") => chunks += 1,
                Some("end") => end = item,
                Some("begin") => {}
                Some(kind) => other = Some(kind.to_owned()),
                None => {}
            }
        })?;
        let name = String::from_utf8_lossy(
            &base64::engine::general_purpose::STANDARD
                .decode(file["name"]["bytesBase64"].as_str().unwrap_or(""))
                .unwrap_or_default(),
        )
        .into_owned();
        match other {
            Some(kind) => println!("readFile    {name}: {kind} in {}", ms(t)),
            None => println!(
                "readFile    {name}: {} bytes in {chunks} chunk(s), {} in {}",
                end["size"],
                end["digest"].as_str().unwrap_or(""),
                ms(t)
            ),
        }
    }

    let t = Instant::now();
    match call(host, "gitStatus", json!({"sessionId": session})) {
        Ok(Value::Null) => println!(
            "gitStatus   no repository at the workspace root ({})",
            ms(t)
        ),
        Ok(status) => println!(
            "gitStatus   head {}: {} staged, {} worktree, {} untracked, in {}",
            status["head"]
                .as_str()
                .map(|h| &h[..h.len().min(12)])
                .unwrap_or("(unborn)"),
            status["staged"].as_array().map_or(0, Vec::len),
            status["worktree"].as_array().map_or(0, Vec::len),
            status["untracked"].as_array().map_or(0, Vec::len),
            ms(t)
        ),
        Err(err) => println!("gitStatus   {err} ({})", ms(t)),
    }
    Ok(())
}
