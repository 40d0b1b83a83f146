#![allow(clippy::unwrap_used)]
//! Bundles through the wire and the command line: `exportSession` / `importBundle`, and
//! `logbook export` / `logbook import`.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use logbook_api::{dispatch, Host};
use serde_json::{json, Value};

fn logbook(root: &Path, args: &[&str]) -> Output {
    Command::new(common::bin())
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn call(host: &Host, method: &str, params: Value) -> Result<Value, logbook_api::ApiError> {
    dispatch::call_value(host, method, &params)
}

fn filled(host: &Host) {
    call(
        host,
        "createSession",
        json!({"sessionId": "s", "workspace": "/w", "operation": "c"}),
    )
    .unwrap();
    call(
        host,
        "send",
        json!({"sessionId": "s", "operation": "m1", "text": "a question about the tombstone",
        "attachments": [{"name": "n.txt", "mimeType": "text/plain", "dataBase64": "aGk="}]}),
    )
    .unwrap();
}

#[test]
fn the_wire_exports_to_new_files_only_and_imports_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Host::open_or_init(&tmp.path().join("a")).unwrap();
    filled(&a);
    let file = tmp.path().join("s.lbb");
    let r = call(&a, "exportSession", json!({"sessionId": "s", "path": file})).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(r["bytes"], bytes.len());
    // Never overwritten; a relative path and an unknown field are refused.
    let e = call(&a, "exportSession", json!({"sessionId": "s", "path": file})).unwrap_err();
    assert_eq!(e.code.as_str(), "conflict", "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
    let e = call(
        &a,
        "exportSession",
        json!({"sessionId": "s", "path": "rel.lbb"}),
    )
    .unwrap_err();
    assert_eq!(e.code.as_str(), "invalid_argument", "{e}");
    let e = call(
        &a,
        "exportSession",
        json!({"sessionId": "s", "path": file, "extra": 1}),
    )
    .unwrap_err();
    assert_eq!(e.code.as_str(), "invalid_argument", "{e}");
    let e = call(
        &a,
        "exportSession",
        json!({"sessionId": "nope", "path": tmp.path().join("n.lbb")}),
    )
    .unwrap_err();
    assert_eq!(e.code.as_str(), "not_found", "{e}");
    assert!(!tmp.path().join("n.lbb").exists());
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let b = Host::open_or_init(&tmp.path().join("b")).unwrap();
    let r = call(&b, "importBundle", json!({"path": file, "operation": "i1"})).unwrap();
    assert_eq!(r, json!({"sessionId": "s", "revision": 2}));
    assert_eq!(
        call(&b, "importBundle", json!({"path": file, "operation": "i1"})).unwrap(),
        r
    );
    let e = call(
        &b,
        "importBundle",
        json!({"path": file, "operation": "i1", "sessionId": "t"}),
    )
    .unwrap_err();
    assert_eq!(e.code.as_str(), "conflict", "{e}");
    let want = call(&a, "history", json!({"sessionId": "s"})).unwrap();
    assert_eq!(
        call(&b, "history", json!({"sessionId": "s"})).unwrap(),
        want
    );
    let e = call(
        &b,
        "importBundle",
        json!({"path": tmp.path().join("missing.lbb"), "operation": "i2"}),
    )
    .unwrap_err();
    assert_eq!(e.code.as_str(), "not_found", "{e}");
    let mut newer = bytes.clone();
    newer[8] = 2;
    let nf = tmp.path().join("newer.lbb");
    std::fs::write(&nf, &newer).unwrap();
    let e = call(
        &b,
        "importBundle",
        json!({"path": nf, "operation": "i3", "sessionId": "u"}),
    )
    .unwrap_err();
    assert_eq!(e.code.as_str(), "unsupported_format", "{e}");
    assert!(e.message.contains('2'), "{e}");
}

#[test]
fn the_command_line_exports_to_a_file_or_standard_output_and_imports_by_magic() {
    let tmp = tempfile::tempdir().unwrap();
    let (ra, rb) = (tmp.path().join("a"), tmp.path().join("b"));
    filled(&Host::open_or_init(&ra).unwrap());
    let file = tmp.path().join("s.lbb");
    let o = logbook(&ra, &["export", "s", "-o", file.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    let o = logbook(&ra, &["export", "s"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        o.stdout,
        std::fs::read(&file).unwrap(),
        "the same bytes on standard output"
    );
    let o = logbook(&ra, &["export", "s", "-o", file.to_str().unwrap()]);
    assert!(!o.status.success(), "an existing file is never overwritten");
    let o = logbook(&rb, &["import", file.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("bundle -> session s, revision 2"),
        "{o:?}"
    );
    let o = logbook(&rb, &["--json", "history", "s"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("tombstone"),
        "{o:?}"
    );
    // A damaged bundle: a non-zero exit, a message naming the file, and nothing imported.
    let mut bad = std::fs::read(&file).unwrap();
    let n = bad.len();
    bad[n - 3] ^= 1;
    let bf = tmp.path().join("bad.lbb");
    std::fs::write(&bf, &bad).unwrap();
    let o = logbook(&rb, &["import", bf.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.lbb") && err.contains("corrupt"), "{err}");
    let o = logbook(&rb, &["--json", "sessions"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1, "{v}");
}

/// `logbook import` killed (SIGKILL) before its commit leaves no Session and, after the next
/// open, no staging directory; killed after it, the Session is there whole on the next open.
#[test]
fn an_import_killed_before_or_after_its_commit_leaves_nothing_or_the_whole_session() {
    let tmp = tempfile::tempdir().unwrap();
    let ra = tmp.path().join("a");
    let host = Host::open_or_init(&ra).unwrap();
    filled(&host);
    let want = call(&host, "history", json!({"sessionId": "s"})).unwrap();
    drop(host);
    let file = tmp.path().join("s.lbb");
    assert!(logbook(&ra, &["export", "s", "-o", file.to_str().unwrap()])
        .status
        .success());
    for (point, whole) in [("import-built", false), ("import-committed", true)] {
        let rb = tmp.path().join(point);
        drop(Host::open_or_init(&rb).unwrap());
        let mut child = Command::new(common::bin())
            .arg("--root")
            .arg(&rb)
            .args(["import", file.to_str().unwrap()])
            .env("LOGBOOK_PAUSE_AT", point)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let flag = rb.join("tmp").join(format!("paused-{point}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !flag.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{point}: never paused"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let host = Host::open(&rb).unwrap();
        let sessions = call(&host, "sessions", json!({})).unwrap();
        let n = sessions["sessions"].as_array().unwrap().len();
        if whole {
            assert_eq!(n, 1, "{point}: {sessions}");
            assert_eq!(
                call(&host, "history", json!({"sessionId": "s"})).unwrap(),
                want
            );
        } else {
            assert_eq!(n, 0, "{point}: {sessions}");
        }
        let left: Vec<_> = std::fs::read_dir(rb.join("sessions"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{point}: {left:?}");
        let v = call(&host, "verify", json!({})).unwrap();
        assert_eq!(v["damage"], json!([]), "{point}: {v}");
        // And the import can be run again: the same answer, or the first whole import.
        drop(host);
        let o = logbook(&rb, &["import", file.to_str().unwrap()]);
        assert!(o.status.success(), "{point}: {o:?}");
    }
}
