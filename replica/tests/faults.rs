//! Faults against a real S3 server (s3s-fs on loopback): the server stopped and restarted
//! mid-run (retried), objects deleted, truncated or bit-flipped in its folder and manifests
//! that name what is not there (each a clear error naming the object, never a wrong Root).

#![allow(clippy::unwrap_used)]

mod common;

use logbook_engine::{CreateSessionParams, HistoryParams, Root, RootOptions, SendParams};
use logbook_replica::{restore, ReplicaError, Replicator, RoundReport};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn small_segments(dir: &Path) -> Root {
    Root::open_or_init_with(
        dir,
        RootOptions {
            segment_bytes_max: 64 << 10,
            ..RootOptions::default()
        },
    )
    .unwrap()
}

fn create(root: &Root, id: &str) {
    root.create_session(CreateSessionParams {
        session_id: Some(id.into()),
        workspace: None,
        operation: format!("create-{id}"),
    })
    .unwrap();
}

fn send(root: &Root, id: &str, n: usize) {
    let params = format!(
        r#"{{"sessionId":"{id}","operation":"send-{id}-{n}","text":"{}","attachments":[{{"name":"f","mimeType":"text/plain","dataBase64":"{}"}}]}}"#,
        format!("message {n} of {id} with some words to fill the log ").repeat(n % 11 + 1),
        ["YQ==", "Yg==", "Yw=="][n % 3]
    );
    let p: SendParams = serde_json::from_str(&params).unwrap();
    root.send(p).unwrap();
}

fn revision(root: &Root, id: &str) -> u64 {
    root.revision(id).unwrap()
}

fn history(root: &Root, id: &str, through: u64) -> String {
    let p: HistoryParams = serde_json::from_str(&format!(
        r#"{{"sessionId":"{id}","through":{through},"limit":1024}}"#
    ))
    .unwrap();
    serde_json::to_string(&root.history(p).unwrap()).unwrap()
}

#[test]
fn a_server_stopped_and_restarted_mid_run_costs_only_time() {
    let Some(mut s3) = common::S3::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let root = Arc::new(small_segments(src.path()));
    for s in 0..3 {
        create(&root, &format!("s{s}"));
    }
    let mut r = Replicator::open(src.path(), s3.store("restart")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, root2) = (Arc::clone(&stop), Arc::clone(&root));
    let writer = std::thread::spawn(move || {
        let mut n = 0;
        while !stop2.load(Ordering::Acquire) {
            send(&root2, &format!("s{}", n % 3), n);
            n += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let stop3 = Arc::clone(&stop);
    let replicating = std::thread::spawn(move || {
        let mut failures = 0;
        let mut reports: Vec<RoundReport> = Vec::new();
        r.run(&stop3, |o| match o {
            Ok(rep) => reports.push(rep.clone()),
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                failures += 1;
            }
        })
        .unwrap();
        (failures, reports)
    });
    std::thread::sleep(Duration::from_millis(1500));
    s3.stop();
    std::thread::sleep(Duration::from_secs(3));
    s3.restart();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Release);
    writer.join().unwrap();
    let (failures, reports) = replicating.join().unwrap();
    assert!(failures > 0, "the stopped server was noticed");
    assert!(reports.last().unwrap().manifest.is_some() || reports.len() > 2);
    // The last round ran after the writer stopped: the newest manifest holds everything.
    let dest = tempfile::tempdir().unwrap();
    let out = dest.path().join("r");
    restore(&s3.store("restart"), &out, None).unwrap();
    let copy = Root::open_read_only(&out).unwrap();
    for s in 0..3 {
        let id = format!("s{s}");
        let rev = revision(&root, &id);
        assert_eq!(revision(&copy, &id), rev, "{id}");
        assert_eq!(history(&copy, &id, rev), history(&root, &id, rev), "{id}");
    }
}

/// A round that fails reads again, in the next round, what it read: a Session written once
/// while the server is down (a message and a new attachment) and never after is in the first
/// manifest once the server is back, however long after the write that is.
#[test]
fn what_a_failed_round_read_is_read_again() {
    let Some(mut s3) = common::S3::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let root = small_segments(src.path());
    create(&root, "s0");
    send(&root, "s0", 0);
    let mut r = Replicator::open(src.path(), s3.store("again")).unwrap();
    assert!(r.round().unwrap().full);
    send(&root, "s0", 1);
    s3.stop();
    let e = r.round().unwrap_err();
    assert!(e.is_transient(), "{e}");
    // Past the time a log or folder is looked at again whatever its length and time say.
    std::thread::sleep(logbook_replica::RACY_MTIME + Duration::from_millis(500));
    s3.restart();
    let rep = r.round().unwrap();
    assert!(rep.manifest.is_some(), "{rep:?}");
    let dest = tempfile::tempdir().unwrap();
    let out = dest.path().join("r");
    restore(&s3.store("again"), &out, None).unwrap();
    let copy = Root::open_read_only(&out).unwrap();
    let rev = revision(&root, "s0");
    assert_eq!(revision(&copy, "s0"), rev);
    assert_eq!(history(&copy, "s0", rev), history(&root, "s0", rev));
}

/// A Session whose log rolled (and whose directory has not changed for a while) is still
/// followed: an append to its newest segment long after the roll is in the next round.
#[test]
fn an_append_long_after_a_roll_is_in_the_next_round() {
    let Some(s3) = common::S3::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let root = small_segments(src.path());
    create(&root, "s0");
    let log = src.path().join("sessions/s0/log");
    let has = |name: &str| log.join(name).exists();
    let mut n = 0;
    while !has("00000000000000000001.active") {
        send(&root, "s0", n);
        n += 1;
    }
    // The rolled segment is sealed in the background: wait for it.
    for _ in 0..500 {
        if has("00000000000000000000.sealed") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(has("00000000000000000000.sealed"));
    let mut r = Replicator::open(src.path(), s3.store("rolled")).unwrap();
    assert!(r.round().unwrap().full);
    // Past the time a log is looked at again whatever its files' times say.
    std::thread::sleep(logbook_replica::RACY_MTIME + Duration::from_millis(500));
    assert_eq!(r.round().unwrap().manifest, None, "nothing changed");
    send(&root, "s0", n);
    assert!(
        !has("00000000000000000002.active"),
        "the append did not roll"
    );
    let rep = r.round().unwrap();
    assert!(rep.manifest.is_some(), "{rep:?}");
    let dest = tempfile::tempdir().unwrap();
    let out = dest.path().join("r");
    restore(&s3.store("rolled"), &out, None).unwrap();
    let copy = Root::open_read_only(&out).unwrap();
    assert_eq!(revision(&copy, "s0"), revision(&root, "s0"));
}

/// A replica with sealed segments, chunks, blobs and a delta manifest.
fn replica(s3: &common::S3, prefix: &str) -> (tempfile::TempDir, Root) {
    let src = tempfile::tempdir().unwrap();
    let root = small_segments(src.path());
    for s in 0..2 {
        create(&root, &format!("s{s}"));
    }
    for n in 0..300 {
        send(&root, &format!("s{}", n % 2), n);
    }
    // The rolled segments are sealed in the background: wait for one.
    let log = src.path().join("sessions/s0/log");
    let sealed = || {
        std::fs::read_dir(&log)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".sealed"))
    };
    for _ in 0..500 {
        if sealed() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(sealed(), "a segment of s0 was sealed");
    let mut r = Replicator::open(src.path(), s3.store(prefix)).unwrap();
    assert!(r.round().unwrap().full);
    for n in 300..310 {
        send(&root, &format!("s{}", n % 2), n);
    }
    let delta = r.round().unwrap();
    assert!(delta.manifest.is_some() && !delta.full, "{delta:?}");
    (src, root)
}

/// Every object of a prefix in the server's folder, by kind.
fn objects(s3: &common::S3, prefix: &str, kind: &str) -> Vec<String> {
    let store = s3.store(prefix);
    let mut names: Vec<String> = store
        .list("data/", None, None)
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .filter(|n| n.split('/').nth(2) == Some(kind))
        .collect();
    names.sort();
    names
}

#[test]
fn damaged_or_missing_objects_fail_the_restore_by_name() {
    let Some(s3) = common::S3::start() else {
        return;
    };
    let (_src, _root) = replica(&s3, "damage");
    let chunk = objects(&s3, "damage", "c").pop().unwrap();
    let sealed = objects(&s3, "damage", "g").pop().unwrap();
    let blob = objects(&s3, "damage", "b").pop().unwrap();
    let manifests: Vec<String> = (s3.store("damage").list("manifests/", None, None).unwrap())
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(manifests.len(), 2, "a full manifest and a delta");
    type Damage = fn(&Path);
    let delete: Damage = |p| std::fs::remove_file(p).unwrap();
    let truncate: Damage = |p| {
        let len = std::fs::metadata(p).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
    };
    let flip: Damage = |p| {
        let mut b = std::fs::read(p).unwrap();
        let i = b.len() / 2;
        b[i] ^= 0x10;
        std::fs::write(p, b).unwrap();
    };
    let cases: Vec<(&String, Damage, &str)> = vec![
        (&chunk, delete, "MissingObject"),
        (&chunk, flip, "DamagedObject"),
        (&sealed, truncate, "DamagedObject"),
        (&sealed, flip, "DamagedObject"),
        (&blob, flip, "DamagedObject"),
        (&blob, delete, "MissingObject"),
        // The delta's parent (the full manifest) gone or damaged.
        (&manifests[1], delete, "BadManifest"),
        (&manifests[1], flip, "BadManifest"),
        (&manifests[0], flip, "BadManifest"),
    ];
    for (name, damage, kind) in cases {
        let path = s3.object_path("damage", name);
        let good = std::fs::read(&path).unwrap();
        damage(&path);
        let dest = tempfile::tempdir().unwrap();
        let out = dest.path().join("r");
        let err = restore(&s3.store("damage"), &out, None).unwrap_err();
        let shown = format!("{err:?}");
        assert!(
            shown.starts_with(kind),
            "{name}: {kind} expected, got {shown}"
        );
        assert!(
            err.to_string().contains(name.as_str()),
            "names {name}: {err}"
        );
        assert!(!out.exists(), "a failed restore leaves nothing ({name})");
        std::fs::write(&path, good).unwrap();
    }
    // Whole again: the restore works.
    let dest = tempfile::tempdir().unwrap();
    restore(&s3.store("damage"), &dest.path().join("r"), None).unwrap();
}

#[test]
fn a_manifest_naming_a_missing_object_is_an_error_naming_it() {
    let Some(s3) = common::S3::start() else {
        return;
    };
    let (src, root) = replica(&s3, "orphaned");
    // A later round whose chunk is lost before a restore: the error names it.
    send(&root, "s0", 999);
    let mut r = Replicator::open(src.path(), s3.store("orphaned")).unwrap();
    let rep = r.round().unwrap();
    assert!(rep.manifest.is_some());
    let newest = objects(&s3, "orphaned", "c")
        .into_iter()
        .max_by_key(|n| logbook_replica::manifest::round_of(n))
        .unwrap();
    std::fs::remove_file(s3.object_path("orphaned", &newest)).unwrap();
    let dest = tempfile::tempdir().unwrap();
    match restore(&s3.store("orphaned"), &dest.path().join("r"), None) {
        Err(ReplicaError::MissingObject { key }) => assert_eq!(key, newest),
        other => panic!("{other:?}"),
    }
    // The manifest before it still restores, without that append.
    let (_, older) = (s3.store("orphaned").list("manifests/", None, None).unwrap())
        .into_iter()
        .filter_map(|l| logbook_replica::manifest::parse_manifest_name(&l.name))
        .nth(1)
        .unwrap();
    let out = dest.path().join("older");
    let report = restore(&s3.store("orphaned"), &out, Some(older)).unwrap();
    assert_eq!(report.sessions, 2);
}

#[test]
fn a_second_root_is_refused_on_a_prefix_in_use() {
    let Some(s3) = common::S3::start() else {
        return;
    };
    let (_src, _root) = replica(&s3, "taken");
    let other = tempfile::tempdir().unwrap();
    let root = small_segments(other.path());
    create(&root, "s0");
    send(&root, "s0", 1);
    // Same header bytes (every Root's header is the same), so the logs themselves tell.
    let err = Replicator::open(other.path(), s3.store("taken"))
        .and_then(|mut r| r.round())
        .unwrap_err();
    assert!(matches!(err, ReplicaError::Foreign { .. }), "{err:?}");
}
