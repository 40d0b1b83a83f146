//! `logbook import`: bring existing agent transcripts into a Root, and keep them up to date.
//!
//! Two public transcript formats are read, one JSON object per line, each recognised by its
//! content, never by a file's name: Claude Code's session files ([`claude`]) and Codex's
//! rollout files ([`codex`]). A Logbook bundle is recognised by its magic bytes and imported
//! whole (`importBundle`).
//!
//! - **Where**: named files and folders, or with no path the default places of those agents
//!   ([`walk::default_places`]). Folders are walked without following symbolic links.
//! - **Which Session**: each transcript's conversation goes to the Session `claude-<sessionId>`
//!   or `codex-<id>` (its origin's own id, made valid where it is not: [`transcript::targets`]);
//!   a sub-agent's to `claude-<sessionId>-agent-<agentId>`, whose import marks name its parent.
//!   Its workspace is the transcript's working directory, its title the transcript's own
//!   (`setTitle` events), when it has them.
//! - **Again and again**: an import converts the whole file and appends only the events of
//!   the lines after the Session's last import mark ([`session`]); a file that was rewritten
//!   rather than grown is reported and left alone; a torn last line waits for the next run
//!   ([`lines`]).
//! - **Reports**: one line per file and Session (new, grown by N events, unchanged,
//!   rewritten and left alone, skipped lines with their reasons, failed with why), then a
//!   summary; `--json` gives the same as objects. Files that are not transcripts are
//!   reported and skipped; the command fails (non-zero exit) only when something failed.

pub mod claude;
pub mod codex;
pub mod convert;
pub mod lines;
mod report;
pub mod session;
pub mod transcript;
pub mod walk;

use std::path::{Path, PathBuf};

use serde_json::json;

pub use report::{FileDone, Summary};
pub use session::{Did, IMPORT_BATCH_EVENTS};

use crate::{dispatch, ApiError, ErrorCode, Host};

/// Converts a transcript's text (for tests and tools): its format, its streams' events.
pub fn convert(text: &str) -> Result<transcript::Transcript, ApiError> {
    let lines = lines::split(text.as_bytes());
    transcript::read(&lines).map_err(|e| {
        ApiError::invalid(format!("not a transcript this version can import: {}", e.0))
    })
}

/// Imports what `paths` name (the agents' default places when empty), printing a report per
/// file and a summary. Fails, after everything else was imported, when any file failed.
pub fn run(
    host: &Host,
    paths: &[PathBuf],
    workspace: Option<&Path>,
    json_out: bool,
) -> Result<(), ApiError> {
    let out = report::Printer::new(json_out);
    let mut todo: Vec<(PathBuf, bool)> = Vec::new();
    let mut summary = Summary::default();
    let walked = |dir: &Path, summary: &mut Summary, todo: &mut Vec<(PathBuf, bool)>| {
        for found in walk::walk(dir) {
            match found {
                walk::Found::File(p) => todo.push((p, false)),
                walk::Found::Passed(p, what) => {
                    out.file(&p, &FileDone::Skipped(what.to_owned()), summary)
                }
                walk::Found::Unlisted(p, e) => out.file(
                    &p,
                    &FileDone::Failed(ApiError::from_io(&p, "list", e)),
                    summary,
                ),
            }
        }
    };
    if paths.is_empty() {
        let places = walk::default_places(|name| std::env::var_os(name));
        if places.is_empty() {
            return Err(ApiError::invalid(
                "HOME is not set, nor CLAUDE_CONFIG_DIR or CODEX_HOME: name the files or folders to import",
            ));
        }
        for place in places {
            if place.dir.is_dir() {
                out.note(&format!(
                    "looking in {} ({}'s transcripts)",
                    place.dir.display(),
                    place.agent
                ));
                walked(&place.dir, &mut summary, &mut todo);
            } else {
                out.note(&format!(
                    "no {} transcripts at {}",
                    place.agent,
                    place.dir.display()
                ));
            }
        }
    } else {
        for path in paths {
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.is_dir() => walked(path, &mut summary, &mut todo),
                Ok(m) if m.file_type().is_symlink() => out.file(
                    path,
                    &FileDone::Failed(ApiError::invalid(
                        "a symbolic link: import never follows one; name what it points to",
                    )),
                    &mut summary,
                ),
                _ => todo.push((path.clone(), true)),
            }
        }
    }
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) && !todo.is_empty() {
        let bar = indicatif::ProgressBar::new(todo.len() as u64);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("importing [{bar:30}] {pos}/{len} files {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    for (file, named) in &todo {
        let done = import_file(host, file, *named, workspace);
        bar.inc(1);
        bar.suspend(|| out.file(file, &done, &mut summary));
    }
    bar.finish_and_clear();
    out.summary(&summary);
    match summary.first_failure {
        None => Ok(()),
        Some(code) => Err(ApiError::new(
            code,
            format!(
                "{} of {} file(s) failed (each is named above); the others were imported",
                summary.failed, summary.files
            ),
        )),
    }
}

/// Bytes of a bundle's magic.
const MAGIC_BYTES: usize = 8;

/// Imports one file. `named`: the file was named on the command line (then a file that is not
/// a transcript is a failure; one found by a walk is only skipped).
pub fn import_file(host: &Host, file: &Path, named: bool, workspace: Option<&Path>) -> FileDone {
    let read_failed = |e: std::io::Error| {
        let code = match e.kind() {
            std::io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
            _ => ErrorCode::Io,
        };
        FileDone::Failed(ApiError::new(
            code,
            format!("reading {}: {e}", file.display()),
        ))
    };
    let mut opened = match walk::Opened::open(file) {
        Ok(f) => f,
        Err(e) => return read_failed(e),
    };
    let mut bytes = match opened.head(MAGIC_BYTES) {
        Ok(b) => b,
        Err(e) => return read_failed(e),
    };
    if bytes[..] == logbook_engine::BUNDLE_MAGIC {
        return import_bundle(host, file);
    }
    if let Err(e) = opened.rest(&mut bytes) {
        return read_failed(e);
    }
    let skipped = |why: String| {
        if named {
            FileDone::Failed(ApiError::invalid(format!(
                "not a transcript this version can import: {why}"
            )))
        } else {
            FileDone::Skipped(format!("not a transcript: {why}"))
        }
    };
    if bytes.is_empty() {
        return skipped("empty".to_owned());
    }
    if bytes.contains(&0) {
        return skipped("binary (it holds NUL bytes)".to_owned());
    }
    let lines = lines::split(&bytes);
    let mut t = match transcript::read(&lines) {
        Ok(t) => t,
        Err(e) => return skipped(e.0),
    };
    if let Some(torn) = lines.torn {
        t.skip(
            lines.whole.len(),
            format!(
                "torn last line ({} bytes without an end): not imported yet; the next import takes it once it is complete",
                torn.len()
            ),
        );
    }
    let fallback = [
        std::path::absolute(file)
            .unwrap_or_else(|_| file.to_owned())
            .as_os_str()
            .as_encoded_bytes(),
        b"\n",
        lines.whole.first().copied().unwrap_or_default(),
    ]
    .concat();
    let targets = transcript::targets(&t, &fallback);
    let ws = workspace.map(|w| w.to_string_lossy().into_owned());
    let mut sessions = Vec::new();
    let mut from = lines.whole.len();
    for target in &targets {
        let stream = &t.streams[&target.key];
        let (did, start) = session::import(host, target, stream, &lines.whole, ws.as_deref());
        from = from.min(start);
        sessions.push((target.clone(), did));
    }
    if targets.is_empty() {
        from = 0;
    }
    FileDone::Transcript {
        format: t.format.name(),
        lines: lines.whole.len(),
        sessions,
        // Lines before every Session's mark were reported by the import that took them.
        skipped: t.skipped.into_iter().filter(|(l, _)| *l >= from).collect(),
    }
}

fn import_bundle(host: &Host, file: &Path) -> FileDone {
    let path = match std::path::absolute(file) {
        Ok(p) => p,
        Err(e) => return FileDone::Failed(ApiError::from_io(file, "resolve", e)),
    };
    // The same bundle under the id it already made answers that Session again, so a fresh
    // operation per run is safe to repeat.
    let op = format!(
        "import-bundle-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    match dispatch::call_value(
        host,
        "importBundle",
        &json!({"path": path, "operation": op}),
    ) {
        Ok(r) => FileDone::Bundle {
            session_id: r["sessionId"].as_str().unwrap_or("").to_owned(),
            revision: r["revision"].as_u64().unwrap_or(0),
        },
        Err(e) => FileDone::Failed(e),
    }
}
