//! Progress reports of long work: an index rebuild from the log, search postings builds and a
//! verify each report a task whose `done` only grows, never passes its `total`, and ends.
#![allow(clippy::unwrap_used)]

mod common;

use logbook_engine::*;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, PartialEq)]
enum Report {
    Start(String, u64, ProgressUnit),
    Advance(u64),
    Finish,
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Report>>);

impl Progress for Recorder {
    fn start(&self, what: &str, total: u64, unit: ProgressUnit) {
        self.0
            .lock()
            .unwrap()
            .push(Report::Start(what.into(), total, unit));
    }
    fn advance(&self, done: u64) {
        self.0.lock().unwrap().push(Report::Advance(done));
    }
    fn finish(&self) {
        self.0.lock().unwrap().push(Report::Finish);
    }
}

/// Checks the nesting and bounds of every task; returns (what, total, last done) per task.
fn tasks(reports: &[Report]) -> Vec<(String, u64, u64)> {
    let mut open: Vec<(String, u64, u64)> = Vec::new();
    let mut done = Vec::new();
    for r in reports {
        match r {
            Report::Start(what, total, _) => open.push((what.clone(), *total, 0)),
            Report::Advance(d) => {
                let t = open.last_mut().expect("advance outside a task");
                assert!(*d >= t.2, "progress went back: {d} after {}", t.2);
                assert!(*d <= t.1, "progress {d} beyond total {}", t.1);
                t.2 = *d;
            }
            Report::Finish => done.push(open.pop().expect("finish outside a task")),
        }
    }
    assert!(open.is_empty(), "tasks never finished: {open:?}");
    done
}

fn options(progress: &Arc<Recorder>) -> RootOptions {
    RootOptions {
        segment_bytes_max: 64 * 1024,
        progress: ProgressSink::new(progress.clone()),
        ..RootOptions::default()
    }
}

#[test]
fn rebuilds_postings_and_verify_report_progress() {
    let dir = tempfile::tempdir().unwrap();
    let sid = {
        Root::init(dir.path()).unwrap();
        let root = Root::open_with(dir.path(), options(&Arc::new(Recorder::default()))).unwrap();
        let sid = common::create(&root, "s");
        for i in 0..300 {
            let body = format!("result {i} {}", "lorem ipsum dolor sit amet ".repeat(20));
            let json = format!("[{}]", common::tool_result("inv", &format!("c{i}"), &body));
            common::append(&root, &sid, &format!("op{i}"), &json).unwrap();
        }
        sid
    };
    // Derived indexes gone: the next open rebuilds them from the whole log.
    let sdir = dir.path().join("sessions").join(&sid);
    for f in ["seq.idx", "row.idx", "receipt.idx", "state.ckpt"] {
        std::fs::remove_file(sdir.join(f)).unwrap();
    }
    let rec = Arc::new(Recorder::default());
    let root = Root::open_with(dir.path(), options(&rec)).unwrap();
    let page = common::hist(&root, &sid, None, None, 5, Direction::Backward);
    assert_eq!(page.rows.len(), 5);
    let hits = root
        .search(SearchParams {
            session_id: sid.clone(),
            query: "result 299".into(),
            case_sensitive: None,
            whole_word: None,
            through: None,
            after: None,
            limit: None,
        })
        .unwrap();
    assert_eq!(hits.hits.len(), 1);
    root.verify().unwrap();

    let reports = rec.0.lock().unwrap().clone();
    let all = tasks(&reports);
    let rebuild = all
        .iter()
        .find(|t| t.0.contains("rebuilding the indexes of Session s"))
        .unwrap_or_else(|| panic!("no rebuild task in {all:?}"));
    assert!(
        rebuild.1 > 300 * 500,
        "rebuild total {} is not the log's size",
        rebuild.1
    );
    assert!(
        rebuild.2 > rebuild.1 / 2,
        "rebuild reported too little: {rebuild:?}"
    );
    assert!(
        all.iter().any(|t| t.0.contains("search index") && t.1 > 0),
        "no postings task in {all:?}"
    );
    let verify = all.iter().find(|t| t.0.starts_with("verifying")).unwrap();
    assert_eq!(verify.1, 1);

    // Reopened with its indexes intact, nothing needs rebuilding.
    drop(root);
    let rec = Arc::new(Recorder::default());
    let root = Root::open_with(dir.path(), options(&rec)).unwrap();
    let _ = common::hist(&root, &sid, None, None, 5, Direction::Backward);
    let again = tasks(&rec.0.lock().unwrap());
    assert!(
        again
            .iter()
            .all(|t| !t.0.contains("rebuilding") || t.1 < 64 * 1024),
        "an intact Session was rebuilt: {again:?}"
    );
}
