#![allow(dead_code)]

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use logbook_fs::{RelPath, ResolverMode, Workspace, WorkspaceOptions};

pub const MODES: [ResolverMode; 2] = [ResolverMode::Auto, ResolverMode::PerComponent];

pub fn ws(root: &Path, hidden: &[&[u8]], mode: ResolverMode) -> Workspace {
    let hidden: Vec<Vec<u8>> = hidden.iter().map(|h| h.to_vec()).collect();
    let options = WorkspaceOptions {
        resolver: mode,
        ..WorkspaceOptions::default()
    };
    Workspace::open_with(root, &hidden, options).expect("open workspace")
}

pub fn rel(b: &[u8]) -> RelPath {
    RelPath::parse(b).expect("valid test path")
}

pub fn os(b: &[u8]) -> &std::ffi::OsStr {
    std::ffi::OsStr::from_bytes(b)
}

pub fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .expect("mkfifo");
}

/// Runs `f` on a thread and fails the test if it does not finish in `secs` seconds.
pub fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .expect("operation blocked or panicked")
}

/// Names of every page of a listing, following cursors.
pub fn all_names(ws: &Workspace, path: &RelPath) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = ws.list(path, after.as_deref()).expect("list");
        out.extend(page.entries.into_iter().map(|e| e.name));
        match page.next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}
