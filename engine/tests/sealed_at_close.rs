//! A Session closed with enough in its newest log segment has it sealed (compressed) in the
//! background: by the Root's close and by the open-Session cache. Nothing is lost, history and
//! search read the same, the next open appends into a new segment, and a Session reopened
//! while its seal is queued or running finds every row.

mod common;
use common::*;
use logbook_engine::*;
use std::path::Path;

fn message(i: usize) -> String {
    let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"];
    let mut s = format!("message {i} marker{i}x");
    let mut k = i;
    while s.len() < 2_000 {
        s.push(' ');
        s.push_str(words[k % words.len()]);
        k = k.wrapping_mul(13).wrapping_add(5);
    }
    s
}

fn send(root: &Root, sid: &str, i: usize) {
    root.send(SendParams {
        session_id: sid.into(),
        operation: format!("{sid}-m{i}"),
        text: message(i),
        attachments: vec![],
    })
    .expect("send");
}

fn all_bodies(root: &Root, sid: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = hist(root, sid, None, after, 100, Direction::Forward);
        out.extend(bodies(&page));
        match page.next_after {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

fn log_files(dir: &Path, sid: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("sessions").join(sid).join("log"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".active") || n.ends_with(".sealed"))
        .collect();
    v.sort();
    v
}

fn search_files(dir: &Path, sid: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("sessions").join(sid).join("search"))
        .map(|it| {
            it.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn hits(root: &Root, sid: &str, query: &str) -> usize {
    root.search(SearchParams {
        session_id: sid.into(),
        query: query.into(),
        case_sensitive: None,
        whole_word: Some(true),
        through: None,
        after: None,
        limit: Some(100),
    })
    .expect("search")
    .hits
    .len()
}

fn want(n: usize) -> Vec<String> {
    (0..n).map(message).collect()
}

#[test]
fn the_root_close_seals_a_written_session_and_the_next_open_goes_on() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    let options = || RootOptions {
        // Every tail is large enough to be saved: it goes out as the sealed segment's postings.
        search_tail_save_pairs_min: 1,
        ..RootOptions::default()
    };
    {
        let root = Root::open_or_init_with(&dir, options()).expect("root");
        create(&root, "big");
        create(&root, "small");
        for i in 0..20 {
            send(&root, "big", i);
        }
        send(&root, "small", 0);
        assert_eq!(hits(&root, "big", "marker7x"), 1);
    }
    assert_eq!(log_files(&dir, "big"), ["00000000000000000000.sealed"]);
    assert_eq!(
        log_files(&dir, "small"),
        ["00000000000000000000.active"],
        "below the minimum: left active"
    );
    let postings = search_files(&dir, "big");
    assert!(
        postings.len() == 1 && postings[0].starts_with("seg-0000000000000000-row-"),
        "the tail was saved as the finished segment's postings: {postings:?}"
    );
    let inode = |name: &str| {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(dir.join("sessions/big/search").join(name))
            .expect("postings")
            .ino()
    };
    let saved = inode(&postings[0]);
    {
        let root = Root::open_with(&dir, options()).expect("reopen");
        assert_eq!(all_bodies(&root, "big"), want(20));
        assert_eq!(hits(&root, "big", "marker7x"), 1);
        assert_eq!(hits(&root, "big", "marker20x"), 0);
        assert_eq!(search_files(&dir, "big"), postings);
        assert_eq!(inode(&postings[0]), saved, "used, not rebuilt");
        send(&root, "big", 20);
        assert_eq!(hits(&root, "big", "marker20x"), 1);
        assert_eq!(all_bodies(&root, "big"), want(21));
        let report = root.verify().expect("verify");
        assert!(report.damage.is_empty(), "{report:?}");
    }
    assert_eq!(
        log_files(&dir, "big"),
        ["00000000000000000000.sealed", "00000000000000000001.active"],
        "one message is below the minimum"
    );
    let root = Root::open_with(&dir, options()).expect("reopen");
    assert_eq!(all_bodies(&root, "big"), want(21));
    assert_eq!(hits(&root, "big", "marker20x"), 1);
    assert_eq!(hits(&root, "big", "marker3x"), 1);
}

#[test]
fn sessions_closed_by_the_cache_are_sealed_and_reopened_at_once() {
    // Three Sessions open at most, eight written in turn: every use of one closes another,
    // whose seal is queued while the next round may reopen it right away.
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    let options = || RootOptions {
        open_sessions_max: 3,
        ..RootOptions::default()
    };
    let ids: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
    let mut sent = vec![0usize; ids.len()];
    {
        let root = Root::open_or_init_with(&dir, options()).expect("root");
        for id in &ids {
            create(&root, id);
        }
        for round in 0..12 {
            for (k, id) in ids.iter().enumerate() {
                send(&root, id, sent[k]);
                sent[k] += 1;
                if round % 4 == 3 {
                    assert_eq!(all_bodies(&root, id), want(sent[k]), "{id} round {round}");
                }
            }
        }
        for (k, id) in ids.iter().enumerate() {
            assert_eq!(all_bodies(&root, id), want(sent[k]), "{id}");
            assert_eq!(hits(&root, id, "marker11x"), 1, "{id}");
        }
    }
    let mut sealed = 0;
    let root = Root::open_with(&dir, options()).expect("reopen");
    for (k, id) in ids.iter().enumerate() {
        assert_eq!(all_bodies(&root, id), want(sent[k]), "{id}");
        assert_eq!(hits(&root, id, "marker5x"), 1, "{id}");
        sealed += log_files(&dir, id)
            .iter()
            .filter(|n| n.ends_with(".sealed"))
            .count();
    }
    assert!(sealed >= ids.len(), "closed Sessions were sealed: {sealed}");
    let report = root.verify().expect("verify");
    assert!(report.damage.is_empty(), "{report:?}");
}

#[test]
fn a_large_newest_segment_is_left_to_roll() {
    // Past SEAL_ON_CLOSE_BYTES_MAX the newest segment belongs to a large, busy Session: a
    // close leaves it active (it is sealed when it rolls), and its newest page reads as before.
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("root");
    let text = |i: usize| format!("{i} {}", "large ".repeat(300_000));
    let n = SEAL_ON_CLOSE_BYTES_MAX as usize / text(0).len() + 2;
    {
        let root = root_at(&dir);
        create(&root, "large");
        for i in 0..n {
            root.send(SendParams {
                session_id: "large".into(),
                operation: format!("large-m{i}"),
                text: text(i),
                attachments: vec![],
            })
            .expect("send");
        }
    }
    assert_eq!(log_files(&dir, "large"), ["00000000000000000000.active"]);
    let root = root_at(&dir);
    let page = hist(&root, "large", None, None, 1, Direction::Backward);
    // (A page shows the start of a long field; `source` reads the rest.)
    let shown = bodies(&page);
    assert!(
        shown.len() == 1 && text(n - 1).starts_with(&shown[0]) && shown[0].len() > 100,
        "the newest row"
    );
}

/// Sessions newest activity first: (id, last activity).
fn by_activity(root: &Root) -> Vec<(String, u64)> {
    newest_first(root)
        .iter()
        .map(|s| (s.session_id.clone(), s.last_activity_at))
        .collect()
}

/// A Session whose only segment was sealed at close keeps the time of its last append as its
/// last activity for a reader beside the writer, and in a copy of the Root (where every file
/// is born at the copy): the sealed file is made long after the appends, and its birth is not
/// the Session's activity. (A reader listed the Session sealed at close as the newest.)
#[test]
fn a_reader_lists_a_session_sealed_at_close_by_its_last_append() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    // Ids in the other order than their activity, so an order by id cannot pass for it.
    let writer_times = {
        let root = root_at(&dir);
        create(&root, "a-older");
        create(&root, "b-newer");
        for i in 0..8 {
            send(&root, "a-older", i);
        }
        std::thread::sleep(std::time::Duration::from_millis(60));
        send(&root, "b-newer", 100);
        by_activity(&root)
    };
    assert_eq!(writer_times[0].0, "b-newer");
    assert_eq!(
        log_files(&dir, "a-older"),
        vec!["00000000000000000000.sealed".to_owned()],
        "the close sealed the older Session's segment"
    );
    std::thread::sleep(std::time::Duration::from_millis(60));
    let copy = tmp.path().join("copy");
    let status = std::process::Command::new("cp")
        .args(["-a"])
        .arg(&dir)
        .arg(&copy)
        .status()
        .expect("cp");
    assert!(status.success());
    for at in [&dir, &copy] {
        let reader = Root::open_read_only(at).expect("reader");
        assert_eq!(by_activity(&reader), writer_times, "{}", at.display());
    }
}
