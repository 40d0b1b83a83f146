//! A tiny command line over the crate, used by the benchmarks to measure a spawned process
//! (the same cost as spawning `git`):
//!
//! ```text
//! logbook-git-cli status WORKSPACE          # one line per change, like a porcelain listing
//! logbook-git-cli diff WORKSPACE PATH AREA  # AREA: staged | worktree | untracked
//! logbook-git-cli patch WORKSPACE           # the snapshot patch on stdout
//! ```
#![forbid(unsafe_code)]

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;

fn letter(kind: logbook_git::ChangeKind) -> u8 {
    match kind {
        logbook_git::ChangeKind::Added => b'A',
        logbook_git::ChangeKind::Modified => b'M',
        logbook_git::ChangeKind::Deleted => b'D',
        logbook_git::ChangeKind::TypeChanged => b'T',
    }
}

fn run(args: &[std::ffi::OsString]) -> Result<(), String> {
    let usage = "usage: logbook-git-cli status|diff|patch WORKSPACE [PATH AREA]";
    let cmd = args.first().ok_or(usage)?.to_str().ok_or(usage)?;
    let ws = Path::new(args.get(1).ok_or(usage)?);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let w = |e: std::io::Error| e.to_string();
    match cmd {
        "status" => {
            let Some(st) = logbook_git::status(ws).map_err(|e| e.to_string())? else {
                return Err("no repository".into());
            };
            for (area, list) in [(b'S', &st.staged), (b'W', &st.worktree)] {
                for c in list {
                    out.write_all(&[area, letter(c.change), b' ']).map_err(w)?;
                    out.write_all(&c.path).map_err(w)?;
                    out.write_all(b"\n").map_err(w)?;
                }
            }
            for p in &st.untracked {
                out.write_all(b"?? ").map_err(w)?;
                out.write_all(p).map_err(w)?;
                out.write_all(b"\n").map_err(w)?;
            }
        }
        "diff" => {
            let path = args.get(2).ok_or(usage)?.as_bytes();
            let area = match args.get(3).and_then(|a| a.to_str()) {
                Some("staged") => logbook_git::Area::Staged,
                Some("worktree") => logbook_git::Area::Worktree,
                Some("untracked") => logbook_git::Area::Untracked,
                _ => return Err(usage.into()),
            };
            match logbook_git::diff(ws, path, area).map_err(|e| e.to_string())? {
                logbook_git::Diff::Text(t) => out.write_all(t.as_bytes()).map_err(w)?,
                other => writeln!(out, "{other:?}").map_err(w)?,
            }
        }
        "patch" => {
            let patch = logbook_git::snapshot_patch(ws)
                .map_err(|e| e.to_string())?
                .ok_or("no repository")?;
            out.write_all(&patch).map_err(w)?;
        }
        _ => return Err(usage.into()),
    }
    out.flush().map_err(w)
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("logbook-git-cli: {e}");
            ExitCode::FAILURE
        }
    }
}
