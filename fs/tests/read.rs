mod common;

use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
use std::process::Command;

use common::*;
use logbook_fs::{
    Content, ErrorKind, FsError, ReadOutcome, ReadPipeline, RelPath, ResolverMode, Workspace,
    WorkspaceOptions, CHUNK_BYTES_MAX,
};

fn content(o: ReadOutcome) -> Content {
    match o {
        ReadOutcome::Content(c) => c,
        other => panic!("expected content, got {other:?}"),
    }
}

fn sha256sum(path: &std::path::Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("run sha256sum");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("ascii output");
    format!(
        "sha256:{}",
        text.split_whitespace().next().expect("digest field")
    )
}

#[test]
fn digests_match_sha256sum_and_types_are_right() {
    let t = tempfile::tempdir().expect("tempdir");
    let mut big = Vec::new();
    let mut x: u32 = 12345;
    while big.len() < 5 * 1024 * 1024 + 17 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        big.extend_from_slice(format!("line {x} 🦀 ünïcode\n").as_bytes());
    }
    let png = [
        &b"\x89PNG\r\n\x1a\n"[..],
        &[0u8, 0, 0, 13],
        b"IHDR",
        &[0xff; 40],
    ]
    .concat();
    let files: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("empty", Vec::new(), Some("text")),
        ("hello.txt", b"hello\n".to_vec(), Some("text")),
        ("big.txt", big.clone(), Some("text")),
        ("big.bin", [&big[..], b"\xff"].concat(), None),
        (
            "big-cut.txt",
            [&big[..], "😀".as_bytes()].concat()[..big.len() + 3].to_vec(),
            None,
        ),
        ("pic.png", png, Some("image/png")),
        (
            "pic.jpg",
            vec![0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 0x80, 0x81],
            Some("image/jpeg"),
        ),
        (
            "anim.gif",
            b"GIF89a\x01\x00\x01\x00\x80\xff".to_vec(),
            Some("image/gif"),
        ),
        (
            "photo.webp",
            b"RIFF\x1a\0\0\0WEBPVP8 \xff\xfe".to_vec(),
            Some("image/webp"),
        ),
        ("blob.bin", vec![0x00, 0xff, 0xfe, 0x80, 0x01], None),
        ("cut.txt", "ab😀".as_bytes()[..4].to_vec(), None),
    ];
    for (name, bytes, _) in &files {
        std::fs::write(t.path().join(name), bytes).expect("write");
    }
    for mode in MODES {
        let ws = ws(t.path(), &[], mode);
        for (name, bytes, ty) in &files {
            let got = ws.read(&rel(name.as_bytes()), None).expect("read");
            match ty {
                None => assert_eq!(got, ReadOutcome::Binary, "{name}"),
                Some(ty) => {
                    let c = content(got);
                    assert_eq!(&c.content_type, ty, "{name}");
                    assert_eq!(&c.bytes, bytes, "{name}");
                    assert_eq!(c.size, bytes.len() as u64);
                    assert_eq!(c.digest, sha256sum(&t.path().join(name)), "{name}");
                    assert!(c.version.starts_with("v1:"));
                }
            }
        }
    }
}

#[test]
fn chunk_boundaries_on_a_file_with_an_emoji_across_32_kib() {
    let t = tempfile::tempdir().expect("tempdir");
    let mut text = "a".repeat(CHUNK_BYTES_MAX - 1);
    text.push('😀'); // bytes 32767..32771
    text.push_str(&"ж".repeat(50_000));
    std::fs::write(t.path().join("t.txt"), &text).expect("write");
    let ws = ws(t.path(), &[], ResolverMode::Auto);
    let c = content(ws.read(&rel(b"t.txt"), None).expect("read"));
    let mut offset = 0u64;
    let mut sizes = Vec::new();
    for (at, piece) in c.chunks() {
        assert_eq!(at, offset, "contiguous offsets");
        assert!(!piece.is_empty() && piece.len() <= CHUNK_BYTES_MAX);
        assert!(
            std::str::from_utf8(piece).is_ok(),
            "chunk at {at} ends on a boundary"
        );
        offset += piece.len() as u64;
        sizes.push(piece.len());
    }
    assert_eq!(offset, c.size);
    assert_eq!(sizes[0], CHUNK_BYTES_MAX - 1, "the emoji is not split");
}

#[test]
fn versions_bind_content_identity_and_path() {
    let t = tempfile::tempdir().expect("tempdir");
    let p = t.path().join("f");
    std::fs::write(&p, b"one").expect("write");
    std::fs::write(t.path().join("g"), b"one").expect("write");
    let ws = ws(t.path(), &[], ResolverMode::Auto);
    let v1 = content(ws.read(&rel(b"f"), None).expect("read")).version;
    assert_eq!(
        content(ws.read(&rel(b"f"), Some(&v1)).expect("read")).version,
        v1
    );
    assert_eq!(
        ws.read(&rel(b"f"), Some("v1:other")).expect("read"),
        ReadOutcome::Changed
    );
    let vg = content(ws.read(&rel(b"g"), None).expect("read")).version;
    assert_ne!(v1, vg, "same bytes at another path/inode");
    std::fs::write(&p, b"two").expect("rewrite in place");
    assert_eq!(
        ws.read(&rel(b"f"), Some(&v1)).expect("read"),
        ReadOutcome::Changed
    );
    let v2 = content(ws.read(&rel(b"f"), None).expect("read")).version;
    std::fs::write(t.path().join("tmp"), b"two").expect("write");
    std::fs::rename(t.path().join("tmp"), &p).expect("atomic replace");
    let v3 = content(ws.read(&rel(b"f"), None).expect("read")).version;
    assert_ne!(v2, v3, "same bytes, new inode");
}

#[test]
fn non_regular_files_are_unsupported_and_never_block() {
    let t = tempfile::tempdir().expect("tempdir");
    let r = t.path().to_path_buf();
    mkfifo(&r.join("fifo"));
    let _sock = UnixListener::bind(r.join("sock")).expect("bind");
    std::fs::create_dir(r.join("dir")).expect("mkdir");
    symlink("dir", r.join("dirlink")).expect("symlink");
    std::fs::write(r.join("real"), b"x").expect("write");
    symlink("real", r.join("filelink")).expect("symlink");
    symlink("nowhere", r.join("dangling")).expect("symlink");
    // A character device like /dev/null (root may make one): never opened for reading.
    let dev = rustix::fs::mknodat(
        rustix::fs::CWD,
        r.join("null"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    )
    .is_ok();
    let outcomes = within(10, move || {
        let mut out = Vec::new();
        for mode in MODES {
            let ws = ws(&r, &[], mode);
            for name in [
                "fifo",
                "sock",
                "dir",
                "dirlink",
                "filelink",
                "dangling",
                "dirlink/x",
            ] {
                out.push((name, ws.read(&rel(name.as_bytes()), None).expect("read")));
            }
            out.push(("<root>", ws.read(&RelPath::root(), None).expect("read")));
            if dev {
                out.push(("null", ws.read(&rel(b"null"), None).expect("read")));
            }
        }
        out
    });
    for (name, o) in outcomes {
        assert_eq!(o, ReadOutcome::Unsupported, "{name}");
    }
}

#[test]
fn absent_hidden_and_too_large() {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::write(t.path().join("file"), b"12345678").expect("write");
    std::fs::create_dir_all(t.path().join(".git")).expect("mkdir");
    std::fs::write(t.path().join(".git/config"), b"[core]").expect("write");
    std::fs::write(t.path().join("secret"), b"s").expect("write");
    for mode in MODES {
        let ws = ws(t.path(), &[b"secret"], mode);
        assert_eq!(
            ws.read(&rel(b"missing"), None).expect("read"),
            ReadOutcome::Absent
        );
        assert_eq!(
            ws.read(&rel(b"no/such/dir"), None).expect("read"),
            ReadOutcome::Absent
        );
        assert_eq!(
            ws.read(&rel(b"file/below"), None).expect("read"),
            ReadOutcome::Absent
        );
        for hidden in [&b".git/config"[..], b".git", b"secret", b"x/.logbook/y"] {
            let e = ws.read(&rel(hidden), None).expect_err("hidden");
            assert!(matches!(e, FsError::Hidden { .. }));
            assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        }
        let small = WorkspaceOptions {
            resolver: mode,
            read_bytes_max: 4,
            ..WorkspaceOptions::default()
        };
        let small = Workspace::open_with(t.path(), &[], small).expect("open");
        let e = small.read(&rel(b"file"), None).expect_err("too large");
        assert!(
            matches!(
                e,
                FsError::TooLarge {
                    size: 8,
                    limit: 4,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }
}

/// Tests run as root, which bypasses file permissions. Capabilities are per thread on
/// Linux, so a dedicated thread drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH and
/// then meets the same EACCES an unprivileged user would.
#[test]
fn permission_denied_is_an_error() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().expect("tempdir");
    let r = t.path().to_path_buf();
    std::fs::write(r.join("locked"), b"no").expect("write");
    std::fs::set_permissions(r.join("locked"), std::fs::Permissions::from_mode(0o000))
        .expect("chmod");
    std::fs::create_dir(r.join("closed")).expect("mkdir");
    std::fs::write(r.join("closed/inside"), b"x").expect("write");
    std::fs::set_permissions(r.join("closed"), std::fs::Permissions::from_mode(0o000))
        .expect("chmod");
    std::fs::create_dir(r.join("listonly")).expect("mkdir");
    std::fs::write(r.join("listonly/f"), b"x").expect("write");
    std::fs::set_permissions(r.join("listonly"), std::fs::Permissions::from_mode(0o444))
        .expect("chmod");
    let result = std::thread::spawn(move || {
        use rustix::thread::{capabilities, set_capabilities, CapabilitySet};
        let mut caps = capabilities(None).expect("read capabilities");
        let dac = CapabilitySet::DAC_OVERRIDE | CapabilitySet::DAC_READ_SEARCH;
        caps.effective -= dac;
        if set_capabilities(None, caps).is_err() {
            return None; // not permitted here: nothing to test
        }
        let mut kinds = Vec::new();
        for mode in MODES {
            let ws = ws(&r, &[], mode);
            kinds.push(
                ws.read(&rel(b"locked"), None)
                    .map(|_| ())
                    .expect_err("EACCES")
                    .kind(),
            );
            kinds.push(
                ws.read(&rel(b"closed/inside"), None)
                    .map(|_| ())
                    .expect_err("EACCES")
                    .kind(),
            );
            kinds.push(
                ws.list(&rel(b"closed"), None)
                    .map(|_| ())
                    .expect_err("EACCES")
                    .kind(),
            );
            kinds.push(
                ws.list(&rel(b"listonly"), None)
                    .map(|_| ())
                    .expect_err("EACCES")
                    .kind(),
            );
        }
        Some(kinds)
    })
    .join()
    .expect("thread");
    if let Some(kinds) = result {
        assert!(
            kinds.iter().all(|k| *k == ErrorKind::PermissionDenied),
            "{kinds:?}"
        );
    } else {
        eprintln!("capabilities cannot be dropped here; EACCES not exercised");
    }
}

/// A writer keeps rewriting and appending while readers read: every answer is either a
/// self-consistent Content (digest of exactly the returned bytes) or Changed.
#[test]
fn concurrent_writes_never_give_torn_content() {
    use sha2::{Digest, Sha256};
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let t = tempfile::tempdir().expect("tempdir");
    let p = t.path().join("busy.txt");
    std::fs::write(&p, b"start\n").expect("write");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (p, stop) = (p.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if i.is_multiple_of(50) {
                    std::fs::write(&p, vec![b'a' + (i % 26) as u8; 6 << 20]).expect("rewrite");
                } else {
                    let mut f = std::fs::OpenOptions::new()
                        .append(true)
                        .open(&p)
                        .expect("open");
                    f.write_all(format!("line {i}\n").as_bytes())
                        .expect("append");
                }
                i += 1;
            }
        })
    };
    let ws = ws(t.path(), &[], ResolverMode::Auto);
    let (mut contents, mut changed) = (0, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        match ws.read(&rel(b"busy.txt"), None).expect("read") {
            ReadOutcome::Content(c) => {
                let want = format!("sha256:{:x}", Sha256::digest(&c.bytes));
                assert_eq!(c.digest, want, "digest of exactly the returned bytes");
                assert_eq!(c.size, c.bytes.len() as u64);
                contents += 1;
            }
            ReadOutcome::Changed => changed += 1,
            other => panic!("{other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    eprintln!("{contents} contents, {changed} changed");
    assert!(contents + changed > 0);
}

#[test]
fn pipelined_and_single_thread_reads_agree() {
    let t = tempfile::tempdir().expect("tempdir");
    let mut text = String::new();
    while text.len() < 9 << 20 {
        text.push_str("ab€😀 line\n");
    }
    std::fs::write(t.path().join("t"), &text).expect("write");
    std::fs::write(t.path().join("b"), [text.as_bytes(), b"\xc3"].concat()).expect("write");
    let open = |read_pipeline: ReadPipeline| {
        let o = WorkspaceOptions {
            read_pipeline,
            ..WorkspaceOptions::default()
        };
        Workspace::open_with(t.path(), &[], o).expect("open")
    };
    let (piped, single) = (open(ReadPipeline::Always), open(ReadPipeline::Never));
    let a = content(piped.read(&rel(b"t"), None).expect("read"));
    assert_eq!(a, content(single.read(&rel(b"t"), None).expect("read")));
    assert_eq!(a.digest, sha256sum(&t.path().join("t")));
    assert_eq!(
        piped.read(&rel(b"b"), None).expect("read"),
        ReadOutcome::Binary
    );
    assert_eq!(
        single.read(&rel(b"b"), None).expect("read"),
        ReadOutcome::Binary
    );
}
