mod common;

use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;

use common::*;
use logbook_fs::{
    EntryKind, ErrorKind, FsError, RelPath, Workspace, WorkspaceOptions, PAGE_ENTRIES_MAX,
};

fn fixture() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    let r = t.path();
    std::fs::write(r.join("b.txt"), b"12345").expect("write");
    std::fs::create_dir(r.join("a_dir")).expect("mkdir");
    std::fs::write(r.join("a_dir/inner"), b"x").expect("write");
    symlink("/etc", r.join("link_etc")).expect("symlink");
    symlink("missing-target", r.join("dangling")).expect("symlink");
    mkfifo(&r.join("fifo"));
    let _sock = UnixListener::bind(r.join("sock")).expect("bind");
    std::fs::create_dir_all(r.join(".git/objects")).expect("mkdir");
    std::fs::create_dir(r.join(".logbook")).expect("mkdir");
    std::fs::create_dir(r.join(".GIT")).expect("mkdir");
    std::fs::write(r.join("private.key"), b"secret").expect("write");
    std::fs::create_dir(r.join("a_dir/.logbook")).expect("mkdir");
    std::fs::write(r.join("a_dir/state"), b"hidden").expect("write");
    t
}

#[test]
fn lists_children_as_leaves_with_hidden_names_left_out() {
    let t = fixture();
    for mode in MODES {
        let ws = ws(t.path(), &[b"private.key", b"a_dir/state"], mode);
        let page = ws.list(&RelPath::root(), None).expect("list");
        let got: Vec<(String, EntryKind, u64)> = page
            .entries
            .iter()
            .map(|e| {
                (
                    String::from_utf8_lossy(&e.name).into_owned(),
                    e.kind,
                    e.size,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a_dir".into(), EntryKind::Directory, 0),
                ("b.txt".into(), EntryKind::File, 5),
                ("dangling".into(), EntryKind::Symlink, 0),
                ("fifo".into(), EntryKind::Other, 0),
                ("link_etc".into(), EntryKind::Symlink, 0),
                ("sock".into(), EntryKind::Other, 0),
            ],
            "{mode:?}"
        );
        assert!(page.next.is_none());
        let inner = ws.list(&rel(b"a_dir"), None).expect("list a_dir");
        let names: Vec<&[u8]> = inner.entries.iter().map(|e| e.name.as_slice()).collect();
        assert_eq!(names, [b"inner"]);
    }
}

#[test]
fn refuses_hidden_missing_links_and_files() {
    let t = fixture();
    for mode in MODES {
        let ws = ws(t.path(), &[b"private.key"], mode);
        let kind = |p: &[u8]| ws.list(&rel(p), None).expect_err("refused").kind();
        assert_eq!(kind(b".git"), ErrorKind::PermissionDenied);
        assert_eq!(kind(b".git/objects"), ErrorKind::PermissionDenied);
        assert_eq!(kind(b"a_dir/.logbook"), ErrorKind::PermissionDenied);
        assert_eq!(kind(b"missing"), ErrorKind::NotFound);
        assert_eq!(kind(b"b.txt"), ErrorKind::InvalidArgument);
        assert!(
            matches!(
                ws.list(&rel(b"link_etc"), None),
                Err(FsError::Symlink { .. })
            ),
            "{mode:?}"
        );
        let e = ws.list(&rel(b"link_etc/ssl"), None);
        assert!(matches!(e, Err(FsError::Symlink { .. })), "{mode:?} {e:?}");
        assert!(
            matches!(
                ws.list(&rel(b"dangling"), None),
                Err(FsError::Symlink { .. })
            ),
            "{mode:?}"
        );
        assert_eq!(kind(b"fifo"), ErrorKind::InvalidArgument);
    }
}

#[test]
fn odd_names_survive_byte_for_byte() {
    let t = tempfile::tempdir().expect("tempdir");
    let long = vec![b'L'; 255];
    let names: [&[u8]; 4] = [
        b"\xff\xfe-not-utf8",
        &long,
        "caf\u{e9}".as_bytes(),
        b"new\nline",
    ];
    for n in names {
        std::fs::write(t.path().join(os(n)), n).expect("write odd name");
    }
    for mode in MODES {
        let ws = ws(t.path(), &[], mode);
        let mut want: Vec<Vec<u8>> = names.iter().map(|n| n.to_vec()).collect();
        want.sort();
        assert_eq!(all_names(&ws, &RelPath::root()), want);
        for n in names {
            match ws.read(&rel(n), None).expect("read") {
                logbook_fs::ReadOutcome::Content(c) => assert_eq!(c.bytes, n),
                logbook_fs::ReadOutcome::Binary => assert!(std::str::from_utf8(n).is_err()),
                other => panic!("{other:?}"),
            }
        }
    }
}

#[test]
fn pages_resume_in_byte_order_and_cursors_are_bound() {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(t.path().join("big")).expect("mkdir");
    std::fs::create_dir(t.path().join("other")).expect("mkdir");
    let mut want = Vec::new();
    for i in 0..1000u32 {
        let name = format!("f{:04}", (i * 7919) % 1000);
        std::fs::write(t.path().join("big").join(&name), vec![b'x'; i as usize % 7])
            .expect("write");
        std::fs::write(t.path().join("other").join(&name), b"").expect("write");
        want.push(name.into_bytes());
    }
    want.sort();
    for mode in MODES {
        let ws = ws(t.path(), &[], mode);
        let big = rel(b"big");
        let first = ws.list(&big, None).expect("list");
        assert_eq!(first.entries.len(), PAGE_ENTRIES_MAX);
        let got = all_names(&ws, &big);
        assert_eq!(got, want, "{mode:?}");
        let cursor = first.next.expect("more pages");
        let foreign = ws
            .list(&rel(b"other"), Some(&cursor))
            .expect_err("cursor of another directory");
        assert_eq!(foreign.kind(), ErrorKind::InvalidArgument);
        let junk = ws.list(&big, Some("not a cursor")).expect_err("junk");
        assert_eq!(junk.kind(), ErrorKind::InvalidArgument);
        let second = ws.list(&big, Some(&cursor)).expect("resume");
        assert_eq!(second.entries[0].name, want[PAGE_ENTRIES_MAX]);
        assert_eq!(second.directory_identity, first.directory_identity);
    }
}

#[test]
fn soft_byte_limit_shrinks_pages_but_one_entry_always_fits() {
    let t = tempfile::tempdir().expect("tempdir");
    for i in 0..10 {
        std::fs::write(t.path().join(format!("{i}{}", "n".repeat(200))), b"").expect("write");
    }
    let options = WorkspaceOptions {
        page_bytes_max: 1,
        ..WorkspaceOptions::default()
    };
    let ws = Workspace::open_with(t.path(), &[], options).expect("open");
    let page = ws.list(&RelPath::root(), None).expect("list");
    assert_eq!(page.entries.len(), 1, "a single entry always fits");
    assert_eq!(all_names(&ws, &RelPath::root()).len(), 10);
    // ~322 estimated bytes per entry: 1000 bytes holds three.
    let options = WorkspaceOptions {
        page_bytes_max: 1000,
        ..WorkspaceOptions::default()
    };
    let ws = Workspace::open_with(t.path(), &[], options).expect("open");
    assert_eq!(
        ws.list(&RelPath::root(), None).expect("list").entries.len(),
        3
    );
}

#[test]
fn identity_tells_a_replaced_directory() {
    let t = tempfile::tempdir().expect("tempdir");
    let d = t.path().join("d");
    std::fs::create_dir(&d).expect("mkdir");
    for i in 0..200 {
        std::fs::write(d.join(format!("{i:03}")), b"").expect("write");
    }
    let ws = ws(t.path(), &[], logbook_fs::ResolverMode::Auto);
    let a = ws.list(&rel(b"d"), None).expect("list");
    assert_eq!(
        a.directory_identity,
        ws.list(&rel(b"d"), None).expect("list").directory_identity
    );
    std::fs::remove_dir_all(&d).expect("rm");
    std::fs::create_dir(&d).expect("mkdir");
    for i in 0..200 {
        std::fs::write(d.join(format!("{i:03}")), b"").expect("write");
    }
    let b = ws.list(&rel(b"d"), None).expect("list");
    assert_ne!(a.directory_identity, b.directory_identity);
    let stale = ws
        .list(&rel(b"d"), a.next.as_deref())
        .expect_err("cursor of the replaced directory");
    assert_eq!(stale.kind(), ErrorKind::InvalidArgument);
}

/// The snapshot cache must never hide a change: settle a big directory so its listing
/// is cached, then change it and list again.
#[test]
fn cached_listing_sees_every_change() {
    let t = tempfile::tempdir().expect("tempdir");
    let d = t.path().join("d");
    std::fs::create_dir(&d).expect("mkdir");
    for i in 0..300 {
        std::fs::write(d.join(format!("{i:03}")), b"").expect("write");
    }
    std::thread::sleep(std::time::Duration::from_millis(
        (logbook_fs::LIST_CACHE_RACY_SECS as u64 + 1) * 1000 + 100,
    ));
    let ws = ws(t.path(), &[], logbook_fs::ResolverMode::Auto);
    assert_eq!(all_names(&ws, &rel(b"d")).len(), 300);
    assert_eq!(
        all_names(&ws, &rel(b"d")).len(),
        300,
        "served from the cache"
    );
    std::fs::write(d.join("zzz"), b"abc").expect("write");
    std::fs::remove_file(d.join("000")).expect("rm");
    let names = all_names(&ws, &rel(b"d"));
    assert_eq!(names.len(), 300);
    assert_eq!(names.first().map(Vec::as_slice), Some(&b"001"[..]));
    assert_eq!(names.last().map(Vec::as_slice), Some(&b"zzz"[..]));
    // Sizes come from the entry at page time, not from the snapshot.
    std::fs::write(d.join("150"), b"grown").expect("write");
    let mut after = None;
    let mut size = None;
    loop {
        let page = ws.list(&rel(b"d"), after.as_deref()).expect("list");
        if let Some(e) = page.entries.iter().find(|e| e.name == b"150") {
            size = Some(e.size);
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(size, Some(5));
}

#[test]
fn root_must_be_an_absolute_real_directory() {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(t.path().join("real")).expect("mkdir");
    symlink(t.path().join("real"), t.path().join("link")).expect("symlink");
    std::fs::write(t.path().join("file"), b"").expect("write");
    for bad in [
        t.path().join("link"),
        t.path().join("file"),
        t.path().join("missing"),
        "relative".into(),
    ] {
        let err = Workspace::open(&bad, &[]).expect_err("refused root");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", bad.display());
    }
    let err = Workspace::open(t.path(), &[b"../x".to_vec()]).expect_err("bad hidden path");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}
