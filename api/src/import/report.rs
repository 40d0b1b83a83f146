//! What `logbook import` says: a line per file and Session, a summary, or the same as JSON.

use std::path::Path;

use serde_json::{json, Value};

use super::session::Did;
use super::transcript::Target;
use crate::{ApiError, ErrorCode};

/// Skipped lines listed per file in the text report (all of them in JSON).
const SKIPPED_SHOWN_MAX: usize = 5;

/// What an import did with one file.
#[derive(Debug)]
pub enum FileDone {
    Transcript {
        format: &'static str,
        /// Whole lines read.
        lines: usize,
        sessions: Vec<(Target, Did)>,
        /// (0-based line, why) of the lines not imported.
        skipped: Vec<(usize, String)>,
    },
    Bundle {
        session_id: String,
        revision: u64,
    },
    /// Not a transcript, found by a walk: passed over.
    Skipped(String),
    Failed(ApiError),
}

/// Counts over a whole import.
#[derive(Debug, Default)]
pub struct Summary {
    pub files: usize,
    pub new: usize,
    pub grown: usize,
    pub events: usize,
    pub unchanged: usize,
    pub left_alone: usize,
    pub skipped_files: usize,
    pub skipped_lines: usize,
    pub failed: usize,
    pub first_failure: Option<ErrorCode>,
}

impl Summary {
    fn fail(&mut self, code: ErrorCode) {
        self.failed += 1;
        self.first_failure.get_or_insert(code);
    }

    fn count(&mut self, done: &FileDone) {
        self.files += 1;
        match done {
            FileDone::Transcript {
                sessions, skipped, ..
            } => {
                self.skipped_lines += skipped.len();
                let mut failed = None;
                for (_, did) in sessions {
                    match did {
                        Did::New { events } => {
                            self.new += 1;
                            self.events += events;
                        }
                        Did::Grown { events } => {
                            self.grown += 1;
                            self.events += events;
                        }
                        Did::Unchanged { .. } => self.unchanged += 1,
                        Did::Rewritten(_) | Did::Taken(_) => self.left_alone += 1,
                        Did::Failed(e) => {
                            failed.get_or_insert(e.code);
                        }
                    }
                }
                if let Some(code) = failed {
                    self.fail(code);
                }
            }
            FileDone::Bundle { .. } => self.new += 1,
            FileDone::Skipped(_) => self.skipped_files += 1,
            FileDone::Failed(e) => self.fail(e.code),
        }
    }
}

fn did_text(did: &Did) -> String {
    match did {
        Did::New { events } => format!("new, {events} event(s)"),
        Did::Grown { events } => format!("grown by {events} event(s)"),
        Did::Unchanged { lines: 0 } => "unchanged".to_owned(),
        Did::Unchanged { lines } => format!("unchanged ({lines} new line(s) with nothing for it)"),
        Did::Rewritten(why) => format!("rewritten since its import ({why}): left alone"),
        Did::Taken(why) => format!("left alone: {why}"),
        Did::Failed(e) => format!("failed: {e}"),
    }
}

fn did_json(target: &Target, did: &Did) -> Value {
    let (what, events, reason) = match did {
        Did::New { events } => ("new", *events, None),
        Did::Grown { events } => ("grown", *events, None),
        Did::Unchanged { .. } => ("unchanged", 0, None),
        Did::Rewritten(why) => ("rewritten", 0, Some(why.clone())),
        Did::Taken(why) => ("leftAlone", 0, Some(why.clone())),
        Did::Failed(e) => ("failed", 0, Some(e.to_string())),
    };
    json!({"sessionId": target.session_id, "origin": target.origin, "parent": target.parent,
        "did": what, "events": events, "reason": reason})
}

/// Prints reports as they come.
#[derive(Debug)]
pub struct Printer {
    json: bool,
}

impl Printer {
    pub fn new(json: bool) -> Printer {
        Printer { json }
    }

    /// A remark about where import looked (standard error, so standard output stays the report).
    pub fn note(&self, text: &str) {
        if !self.json {
            eprintln!("import: {text}");
        }
    }

    /// Reports one file and counts it.
    pub fn file(&self, file: &Path, done: &FileDone, summary: &mut Summary) {
        summary.count(done);
        if self.json {
            println!("{}", file_json(file, done));
            return;
        }
        let name = file.display();
        match done {
            FileDone::Transcript {
                format,
                lines,
                sessions,
                skipped,
            } => {
                if sessions.is_empty() {
                    println!("{name}: {format} transcript, {lines} line(s): nothing to import yet");
                }
                for (target, did) in sessions {
                    let line = format!(
                        "{name}: {format} -> {}: {}",
                        target.session_id,
                        did_text(did)
                    );
                    if matches!(did, Did::Failed(_)) {
                        eprintln!("{line}");
                    } else {
                        println!("{line}");
                    }
                }
                for (line, why) in skipped.iter().take(SKIPPED_SHOWN_MAX) {
                    println!("  line {}: skipped, {why}", line + 1);
                }
                if skipped.len() > SKIPPED_SHOWN_MAX {
                    println!(
                        "  ... and {} more skipped line(s) (--json lists them all)",
                        skipped.len() - SKIPPED_SHOWN_MAX
                    );
                }
            }
            FileDone::Bundle {
                session_id,
                revision,
            } => println!("{name}: bundle -> session {session_id}, revision {revision}"),
            FileDone::Skipped(why) => println!("{name}: skipped, {why}"),
            FileDone::Failed(e) => eprintln!("{name}: not imported: {e}"),
        }
    }

    pub fn summary(&self, s: &Summary) {
        if self.json {
            println!(
                "{}",
                json!({"summary": {"files": s.files, "new": s.new, "grown": s.grown,
                    "events": s.events, "unchanged": s.unchanged, "leftAlone": s.left_alone,
                    "skippedFiles": s.skipped_files, "skippedLines": s.skipped_lines,
                    "failed": s.failed}})
            );
            return;
        }
        println!(
            "import: {} file(s), {} event(s) appended: {} new Session(s), {} grown, {} unchanged, \
             {} left alone, {} file(s) skipped, {} line(s) skipped, {} failed",
            s.files,
            s.events,
            s.new,
            s.grown,
            s.unchanged,
            s.left_alone,
            s.skipped_files,
            s.skipped_lines,
            s.failed
        );
    }
}

fn file_json(file: &Path, done: &FileDone) -> Value {
    match done {
        FileDone::Transcript {
            format,
            lines,
            sessions,
            skipped,
        } => json!({"file": file, "format": format, "lines": lines,
            "sessions": sessions.iter().map(|(t, d)| did_json(t, d)).collect::<Vec<_>>(),
            "skipped": skipped.iter().map(|(l, why)| json!({"line": l + 1, "reason": why})).collect::<Vec<_>>()}),
        FileDone::Bundle {
            session_id,
            revision,
        } => {
            json!({"file": file, "format": "bundle", "sessionId": session_id, "revision": revision})
        }
        FileDone::Skipped(why) => json!({"file": file, "skipped": why}),
        FileDone::Failed(e) => {
            json!({"file": file, "error": {"code": e.code.as_str(), "message": e.message}})
        }
    }
}
