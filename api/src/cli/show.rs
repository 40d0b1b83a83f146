//! Human-readable renderings of wire answers.

use base64::Engine as _;
use serde_json::Value;

use super::Ctx;

/// A one-line preview of a text: first line, at most `max` characters.
pub fn preview(text: &str, max: usize) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut out: String = line.chars().take(max).collect();
    if line.chars().count() > max || text.lines().filter(|l| !l.trim().is_empty()).count() > 1 {
        out.push('…');
    }
    out
}

fn path_text(path: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(path["bytesBase64"].as_str().unwrap_or(""))
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub fn sessions(v: &Value) {
    for s in v.as_array().into_iter().flatten() {
        let id = s["sessionId"].as_str().unwrap_or("");
        if let Some(d) = s.get("damage").filter(|d| !d.is_null()) {
            println!(
                "{id:<28} DAMAGED ({}): {}",
                d["code"].as_str().unwrap_or(""),
                d["message"].as_str().unwrap_or("")
            );
            continue;
        }
        println!(
            "{id:<28} revision {:<8} {}",
            s["revision"],
            s["workspace"].as_str().unwrap_or("(no workspace)")
        );
    }
}

/// `verify`: what was walked, then one line per damage and per cut copy.
pub fn verify(v: &Value) {
    println!(
        "{} Sessions, {} records, {} bytes of log, {} blobs checked",
        v["sessions"], v["records"], v["bytes"], v["blobs"]
    );
    for d in v["damage"].as_array().into_iter().flatten() {
        let whose = d["sessionId"]
            .as_str()
            .map_or("the Root".to_owned(), |id| format!("Session {id}"));
        println!(
            "damage in {whose}: {}: {}",
            d["code"].as_str().unwrap_or(""),
            d["message"].as_str().unwrap_or("")
        );
    }
    for c in v["cuts"].as_array().into_iter().flatten() {
        let whose = c["sessionId"]
            .as_str()
            .map_or("the Root log".to_owned(), |id| format!("Session {id}"));
        println!(
            "cut: {} bytes of a torn tail of {whose} (never acknowledged) are kept in {}",
            c["bytes"],
            c["path"].as_str().unwrap_or("")
        );
    }
}

pub fn rows(v: &Value) {
    for row in v["rows"].as_array().into_iter().flatten() {
        let pos = &row["position"];
        let fields = row["fields"].as_object();
        let text = fields
            .and_then(|f| {
                ["body", "arguments", "thinking", "name"]
                    .iter()
                    .find_map(|k| f.get(*k))
            })
            .and_then(|f| f["text"].as_str())
            .unwrap_or("");
        let name = fields
            .and_then(|f| f.get("name"))
            .and_then(|f| f["text"].as_str())
            .map(|n| format!("{n} "))
            .unwrap_or_default();
        println!(
            "{:>6}.{:<3} {:<11} {}{}",
            pos["sourceSequence"],
            pos["itemIndex"],
            row["kind"].as_str().unwrap_or(""),
            name,
            preview(text, 100)
        );
    }
}

pub fn hits(ctx: &Ctx, session: &str, v: &Value) {
    for hit in v["hits"].as_array().into_iter().flatten() {
        let pos = &hit["position"];
        let (start, end) = (
            hit["start"].as_u64().unwrap_or(0),
            hit["end"].as_u64().unwrap_or(0),
        );
        let context = ctx
            .call(
                "source",
                serde_json::json!({"sessionId": session, "through": v["through"], "position": pos,
                                   "field": hit["field"], "after": start.saturating_sub(40),
                                   "limit": (end - start) + 80}),
            )
            .ok()
            .and_then(|s| s["text"].as_str().map(|t| t.replace('\n', " ")))
            .unwrap_or_default();
        println!(
            "{:>6}.{:<3} {:<9} {:>6}..{:<6} …{}…",
            pos["sourceSequence"],
            pos["itemIndex"],
            hit["field"].as_str().unwrap_or(""),
            start,
            end,
            context.chars().take(120).collect::<String>()
        );
    }
}

pub fn entries(v: &Value) {
    for e in v["entries"].as_array().into_iter().flatten() {
        let kind = e["kind"].as_str().unwrap_or("");
        let mark = match kind {
            "directory" => "/",
            "symlink" => "@",
            _ => "",
        };
        println!("{:>10}  {}{}", e["size"], path_text(&e["name"]), mark);
    }
}

pub fn git_status(v: &Value) {
    if v.is_null() {
        println!("(the workspace root holds no git repository)");
        return;
    }
    println!("head {}", v["head"].as_str().unwrap_or("(unborn)"));
    for (area, list) in [("staged", &v["staged"]), ("worktree", &v["worktree"])] {
        for c in list.as_array().into_iter().flatten() {
            println!(
                "{area:<9} {:<12} {}",
                c["change"].as_str().unwrap_or(""),
                path_text(&c["path"])
            );
        }
    }
    for u in v["untracked"].as_array().into_iter().flatten() {
        println!("untracked {:<12} {}", "", path_text(&u["path"]));
    }
}
