//! Human-readable renderings of wire answers.

use base64::Engine as _;
use serde_json::Value;

use logbook_api::time::civil;

use super::Ctx;

/// `text` safe to print on a terminal: control characters (C0, DEL, C1: escape sequences,
/// BEL, CR, ...) are shown escaped (`\x1b`, `\r`, `\u{9b}`) instead of acting on the
/// terminal. `lines` keeps newlines and tabs (a multi-line body); otherwise they are escaped
/// too, so a name or one-line field stays one line. `--json` output never goes through here.
pub fn printable(text: &str, lines: bool) -> std::borrow::Cow<'_, str> {
    let keep = |c: char| lines && (c == '\n' || c == '\t');
    if !text.chars().any(|c| c.is_control() && !keep(c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if keep(c) || !c.is_control() => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A whole body printed as it is (`source`, `cat`, patches): exact into a pipe or file, and
/// with its control characters escaped (newlines and tabs kept) when standard output is a
/// terminal, which they would otherwise drive.
pub fn contents(text: &str) -> std::borrow::Cow<'_, str> {
    use std::io::IsTerminal as _;
    if std::io::stdout().is_terminal() {
        printable(text, true)
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// A one-line preview of a text: first line, at most `max` characters, printable.
pub fn preview(text: &str, max: usize) -> String {
    // Looks at the first two non-blank lines only: a long body is not walked to its end.
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let line = lines.next().unwrap_or("");
    let mut chars = line.chars();
    let short: String = chars.by_ref().take(max).collect();
    let mut out = printable(&short, false).into_owned();
    if chars.next().is_some() || lines.next().is_some() {
        out.push('…');
    }
    out
}

fn path_text(path: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(path["bytesBase64"].as_str().unwrap_or(""))
        .unwrap_or_default();
    printable(&String::from_utf8_lossy(&bytes), false).into_owned()
}

/// A one-line string field of an answer, printable.
fn field<'a>(v: &'a Value) -> std::borrow::Cow<'a, str> {
    printable(v.as_str().unwrap_or(""), false)
}

/// The column names over `sessions`.
pub fn sessions_header() {
    println!(
        "{:<28} {:>12}  {:<16}  {:>9}  TITLE",
        "SESSION", "ROWS", "LAST ACTIVITY", "SIZE"
    );
}

/// One `sessions` page: id, rows, last activity (UTC), size, title; damaged ones marked.
pub fn sessions(v: &Value) {
    use std::fmt::Write as _;
    // The page printed whole: one write, not one per Session (standard output is line
    // buffered).
    let mut out = String::new();
    for s in v["sessions"].as_array().into_iter().flatten() {
        let id = s["sessionId"].as_str().unwrap_or("");
        if let Some(d) = s.get("damage").filter(|d| !d.is_null()) {
            let _ = writeln!(
                out,
                "{id:<28} DAMAGED ({}): {}",
                field(&d["code"]),
                field(&d["message"])
            );
            continue;
        }
        let parent = s["parent"]
            .as_str()
            .map_or(String::new(), |p| format!("  (sub-agent of {p})"));
        let _ = writeln!(
            out,
            "{id:<28} {:>7} rows  {}  {:>9}  {}{parent}",
            s["rows"],
            utc_minute(s["lastActivityAt"].as_u64().unwrap_or(0)),
            human_bytes(s["bytes"].as_u64().unwrap_or(0)),
            s["title"]
                .as_str()
                .map_or("(untitled)".into(), |t| printable(t, false))
        );
    }
    print!("{out}");
}

/// `YYYY-MM-DD HH:MM` (UTC) of milliseconds since the Unix epoch.
fn utc_minute(ms: u64) -> String {
    let (year, month, day, h, m, _) = civil(ms);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}")
}

/// RFC 3339 (UTC, milliseconds) of milliseconds since the Unix epoch.
pub fn rfc3339(ms: u64) -> String {
    logbook_api::time::rfc3339(ms)
}

fn human_bytes(b: u64) -> String {
    match b {
        0..1024 => format!("{b} B"),
        1024..1_048_576 => format!("{:.1} KiB", b as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", b as f64 / 1_048_576.0),
        _ => format!("{:.1} GiB", b as f64 / 1_073_741_824.0),
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
            field(&d["code"]),
            field(&d["message"])
        );
    }
    for c in v["cuts"].as_array().into_iter().flatten() {
        let whose = c["sessionId"]
            .as_str()
            .map_or("the Root log".to_owned(), |id| format!("Session {id}"));
        println!(
            "cut: {} bytes of a torn tail of {whose} (never acknowledged) are kept in {}",
            c["bytes"],
            field(&c["path"])
        );
    }
}

/// One history row as a line of `logbook history`: position, kind, invocation, the tool's
/// name for a call, and a preview of its main text.
pub fn row(out: &mut String, row: &logbook_engine::RowRef<'_>) {
    use std::fmt::Write as _;
    let field = |name: &str| row.fields().find(|(n, _)| *n == name).map(|(_, f)| f.text);
    // The main text: the first of these the row has.
    let text = ["body", "arguments", "thinking", "name"]
        .into_iter()
        .find_map(field);
    let name = field("name")
        .map(|n| format!("{} ", printable(n, false)))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{:>6}.{:<3} {:<11} [{}] {}{}",
        row.position.source_sequence,
        row.position.item_index,
        row.kind.as_str(),
        // The invocation, so that `fork --turn` can be given one from what is shown.
        printable(row.invocation, false),
        name,
        preview(text.unwrap_or(""), 100)
    );
}

pub fn hits(ctx: &Ctx, session: &str, v: &Value) {
    let mut out = String::new();
    for hit in v["hits"].as_array().into_iter().flatten() {
        out.push_str(&hit_line(ctx, session, hit));
        out.push('\n');
    }
    print!("{out}");
}

/// One hit: its row (sequence.item), field and snippet.
fn hit_line(ctx: &Ctx, session: &str, hit: &Value) -> String {
    let pos = &hit["position"];
    format!(
        "{:>6}.{:<3} {:<9} {}",
        pos["sourceSequence"],
        pos["itemIndex"],
        hit["field"].as_str().unwrap_or(""),
        snippet(ctx, session, hit)
    )
}

/// `searchRoot` hits: one line each, naming the Session (and its title when it changes from
/// the line before), the row, the field and a snippet with the match marked.
pub fn root_hits(ctx: &Ctx, v: &Value, last_session: &mut String) {
    for hit in v["hits"].as_array().into_iter().flatten() {
        let session = hit["sessionId"].as_str().unwrap_or("");
        if session != last_session {
            let title = ctx
                .host
                .root()
                .session_info(session)
                .ok()
                .and_then(|i| i.title)
                .map_or("(untitled)".into(), |t| printable(&t, false).into_owned());
            println!("{}  {title}", printable(session, false));
            session.clone_into(last_session);
        }
        println!("  {}", hit_line(ctx, session, hit));
    }
}

/// Bytes of context shown on each side of a match.
const SNIPPET_CONTEXT_BYTES: u64 = 48;

/// The text around a hit on one line, the match marked: reverse video on a terminal (unless
/// `NO_COLOR` is set), else `«` and `»`.
fn snippet(ctx: &Ctx, session: &str, hit: &Value) -> String {
    let (start, end) = (
        hit["start"].as_u64().unwrap_or(0),
        hit["end"].as_u64().unwrap_or(0),
    );
    let pos = &hit["position"];
    let field = hit["field"].as_str().unwrap_or("");
    // Byte ranges of the field, read with `source` (a title with the event that set it).
    let read = |from: u64, len: u64| -> Option<String> {
        if field == "title" {
            let seq = pos["sourceSequence"].as_u64()?;
            let logbook_engine::Event::TitleSet(t) =
                ctx.host.root().read_event(session, seq).ok()?
            else {
                return None;
            };
            let from = usize::try_from(from).ok()?;
            let to = usize::try_from(from as u64 + len).ok()?.min(t.title.len());
            return t.title.get(from..to).map(str::to_owned);
        }
        let v = ctx
            .call(
                "source",
                serde_json::json!({"sessionId": session, "through": null, "position": pos,
                                   "field": field, "after": from, "limit": len}),
            )
            .ok()?;
        v["text"].as_str().map(str::to_owned)
    };
    // `source` starts on a character boundary; one of four byte offsets in a row is one.
    let before = (0..4)
        .filter_map(|back| {
            let from = start.saturating_sub(SNIPPET_CONTEXT_BYTES + back);
            read(from, start - from)
        })
        .next()
        .unwrap_or_default();
    let (matched, after) = match read(start, end - start + SNIPPET_CONTEXT_BYTES) {
        Some(t) => {
            let cut = ((end - start) as usize).min(t.len());
            let cut = (cut..=t.len())
                .find(|&i| t.is_char_boundary(i))
                .unwrap_or(t.len());
            (t[..cut].to_owned(), t[cut..].to_owned())
        }
        None => (String::new(), String::new()),
    };
    let line = |t: &str| printable(&t.replace(['\n', '\r', '\t'], " "), false).into_owned();
    let (open, close) = if marks_in_color() {
        ("\x1b[7m", "\x1b[0m")
    } else {
        ("«", "»")
    };
    format!(
        "…{}{open}{}{close}{}…",
        line(&before),
        line(&matched),
        line(&after)
    )
}

fn marks_in_color() -> bool {
    use std::io::IsTerminal as _;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
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
    println!(
        "head {}",
        v["head"]
            .as_str()
            .map_or("(unborn)".into(), |h| printable(h, false))
    );
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

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped() {
        use super::printable;
        assert_eq!(printable("plain text", false), "plain text");
        assert_eq!(
            printable("a\x1b]0;title\x07b\rc\u{9b}d\x7f", false),
            "a\\x1b]0;title\\x07b\\rc\\u{9b}d\\x7f"
        );
        assert_eq!(printable("one\ntwo\tx", false), "one\\ntwo\\tx");
        assert_eq!(printable("one\ntwo\tx\x1b", true), "one\ntwo\tx\\x1b");
    }

    #[test]
    fn utc_minutes_and_sizes() {
        assert_eq!(super::utc_minute(0), "1970-01-01 00:00");
        // 2026-12-04 22:10:48 UTC
        assert_eq!(super::utc_minute(1_796_422_248_000), "2026-12-04 22:10");
        assert_eq!(super::utc_minute(951_782_400_000), "2000-02-29 00:00");
        assert_eq!(
            super::rfc3339(1_796_422_248_007),
            "2026-12-04T22:10:48.007Z"
        );
        assert_eq!(super::human_bytes(1023), "1023 B");
        assert_eq!(super::human_bytes(16 << 10), "16.0 KiB");
    }
}
