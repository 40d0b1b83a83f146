//! Paths that try to leave the workspace, and races that swap links in.
mod common;

use std::os::unix::fs::symlink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use logbook_fs::{ErrorKind, FsError, ReadOutcome, RelPath, Workspace};

const OUTSIDE: &[u8] = b"OUTSIDE-SECRET";

/// A workspace `ws/` next to an `outside/` directory holding a secret file.
fn layout() -> (tempfile::TempDir, std::path::PathBuf) {
    let t = tempfile::tempdir().expect("tempdir");
    let out = t.path().join("outside");
    std::fs::create_dir(&out).expect("mkdir");
    std::fs::write(out.join("secret.txt"), OUTSIDE).expect("write");
    let ws = t.path().join("ws");
    std::fs::create_dir_all(ws.join("sub/deeper")).expect("mkdir");
    std::fs::write(ws.join("sub/f.txt"), b"inside").expect("write");
    std::fs::write(ws.join("sub/deeper/g.txt"), b"inside too").expect("write");
    symlink("/etc", ws.join("etc_link")).expect("symlink");
    symlink(&out, ws.join("abs_dir_link")).expect("symlink");
    symlink(out.join("secret.txt"), ws.join("abs_file_link")).expect("symlink");
    symlink("../../outside/secret.txt", ws.join("sub/rel_file_link")).expect("symlink");
    symlink("../../outside", ws.join("sub/deeper/rel_dir_link")).expect("symlink");
    symlink("sub", ws.join("inner_dir_link")).expect("symlink");
    symlink("f.txt", ws.join("sub/inner_file_link")).expect("symlink");
    symlink(
        "../../../../../../../../etc/passwd",
        ws.join("sub/deep_dotdot"),
    )
    .expect("symlink");
    (t, ws)
}

#[test]
fn no_symlink_is_followed_at_any_component() {
    let (_t, root) = layout();
    let reads: [&[u8]; 11] = [
        b"etc_link/passwd",
        b"etc_link",
        b"abs_dir_link/secret.txt",
        b"abs_file_link",
        b"sub/rel_file_link",
        b"sub/deeper/rel_dir_link/secret.txt",
        b"inner_dir_link/f.txt",
        b"sub/inner_file_link",
        b"sub/deep_dotdot",
        b"inner_dir_link/deeper/g.txt",
        b"sub/deeper/rel_dir_link",
    ];
    for mode in MODES {
        let ws = ws(&root, &[], mode);
        for p in reads {
            assert_eq!(
                ws.read(&rel(p), None).expect("read answers"),
                ReadOutcome::Unsupported,
                "{mode:?} {}",
                p.escape_ascii()
            );
        }
        for p in [
            &b"etc_link"[..],
            b"abs_dir_link",
            b"inner_dir_link",
            b"inner_dir_link/deeper",
            b"sub/deeper/rel_dir_link",
        ] {
            let e = ws.list(&rel(p), None).expect_err("list through a link");
            assert!(
                matches!(e, FsError::Symlink { .. }),
                "{mode:?} {}: {e}",
                p.escape_ascii()
            );
            assert!(ws.watch(&rel(p)).is_err(), "watch through a link");
        }
        // The real paths still work.
        assert!(matches!(
            ws.read(&rel(b"sub/deeper/g.txt"), None),
            Ok(ReadOutcome::Content(_))
        ));
    }
}

#[test]
fn lexical_escapes_are_invalid_arguments() {
    for bad in [
        &b"../outside/secret.txt"[..],
        b"/etc/passwd",
        b"sub/../../outside",
        b"./sub",
        b"sub//f.txt",
        b"sub/f.txt/",
        b"a\0b",
    ] {
        let e = RelPath::parse(bad).expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}

#[test]
fn fallback_resolver_gives_the_same_answers() {
    let (_t, root) = layout();
    mkfifo(&root.join("fifo"));
    let auto = ws(&root, &[], logbook_fs::ResolverMode::Auto);
    let walk = ws(&root, &[], logbook_fs::ResolverMode::PerComponent);
    let probes: [&[u8]; 14] = [
        b"sub/f.txt",
        b"sub/deeper/g.txt",
        b"sub",
        b"fifo",
        b"missing",
        b"sub/missing/x",
        b"sub/f.txt/x",
        b"etc_link/passwd",
        b"abs_file_link",
        b"inner_dir_link/f.txt",
        b"sub/rel_file_link",
        b"sub/deeper",
        b"sub/deeper/rel_dir_link/secret.txt",
        b".git/x",
    ];
    let summary = |ws: &Workspace, p: &[u8]| {
        let read = match ws.read(&rel(p), None) {
            Ok(ReadOutcome::Content(c)) => format!("content {}", c.digest),
            Ok(o) => format!("{o:?}"),
            Err(e) => format!("error {:?}", e.kind()),
        };
        let list = match ws.list(&rel(p), None) {
            Ok(page) => format!("{} entries", page.entries.len()),
            Err(e) => format!("error {e}"),
        };
        (read, list)
    };
    for p in probes {
        assert_eq!(summary(&auto, p), summary(&walk, p), "{}", p.escape_ascii());
    }
    assert_eq!(
        all_names(&auto, &RelPath::root()),
        all_names(&walk, &RelPath::root())
    );
}

/// A thread keeps swapping `victim` between a real directory and a link to the outside
/// directory (and `vfile` between a file and a link to the outside file) while readers
/// list and read through both resolvers for about a second.
#[test]
fn swapped_in_links_never_leak_outside_bytes() {
    let (_t, root) = layout();
    let outside = root.parent().expect("parent").join("outside");
    std::fs::create_dir(root.join("victim")).expect("mkdir");
    std::fs::write(root.join("victim/secret.txt"), b"inside").expect("write");
    std::fs::write(root.join("vfile"), b"inside file").expect("write");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (root, outside, stop) = (root.clone(), outside.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Directory <-> link, each step an atomic rename.
                symlink(&outside, root.join("victim.link")).expect("symlink");
                std::fs::rename(root.join("victim"), root.join("victim.real")).expect("rename");
                std::fs::rename(root.join("victim.link"), root.join("victim")).expect("rename");
                symlink(outside.join("secret.txt"), root.join("vfile.link")).expect("symlink");
                std::fs::rename(root.join("vfile"), root.join("vfile.real")).expect("rename");
                std::fs::rename(root.join("vfile.link"), root.join("vfile")).expect("rename");
                std::fs::remove_file(root.join("victim")).expect("unlink");
                std::fs::rename(root.join("victim.real"), root.join("victim")).expect("rename");
                std::fs::rename(root.join("vfile.real"), root.join("vfile")).expect("rename back");
                swaps += 1;
            }
            swaps
        })
    };
    let deadline = Instant::now() + Duration::from_millis(1200);
    let mut seen = [0u64; 3]; // content, unsupported/absent, errors
    while Instant::now() < deadline {
        for mode in MODES {
            let ws = ws(&root, &[], mode);
            for p in [&b"victim/secret.txt"[..], b"vfile"] {
                match ws.read(&rel(p), None) {
                    Ok(ReadOutcome::Content(c)) => {
                        assert!(
                            c.bytes.starts_with(b"inside"),
                            "leaked {:?}",
                            c.bytes.escape_ascii().to_string()
                        );
                        seen[0] += 1;
                    }
                    Ok(_) => seen[1] += 1,
                    Err(_) => seen[2] += 1,
                }
            }
            if let Ok(page) = ws.list(&rel(b"victim"), None) {
                for e in page.entries {
                    assert_eq!(e.name, b"secret.txt");
                    assert_eq!(e.size, 6, "size of the inside file, never the outside one");
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    assert!(swaps > 10, "the race ran ({swaps} swaps)");
    // Which side each read landed on depends on scheduling; print it, require content once.
    eprintln!("{swaps} swaps; content/refused/error: {seen:?}");
    assert!(
        seen[0] > 0,
        "some reads landed on the real directory: {seen:?}"
    );
}

#[test]
fn hidden_paths_are_never_listed_or_read_at_any_depth() {
    let t = tempfile::tempdir().expect("tempdir");
    let r = t.path();
    for d in [".git", "a/.git", "a/b/.logbook", ".Logbook", "state"] {
        std::fs::create_dir_all(r.join(d)).expect("mkdir");
        std::fs::write(r.join(d).join("f"), b"x").expect("write");
    }
    std::fs::write(r.join("a/keep"), b"k").expect("write");
    for mode in MODES {
        let ws = ws(r, &[b"state"], mode);
        assert_eq!(all_names(&ws, &RelPath::root()), [b"a".to_vec()]);
        assert_eq!(
            all_names(&ws, &rel(b"a")),
            [b"b".to_vec(), b"keep".to_vec()]
        );
        assert!(all_names(&ws, &rel(b"a/b")).is_empty());
        for p in [
            &b".git/f"[..],
            b"a/.git/f",
            b"a/b/.logbook/f",
            b".Logbook/f",
            b"state/f",
            b"state",
        ] {
            assert!(matches!(
                ws.read(&rel(p), None),
                Err(FsError::Hidden { .. })
            ));
            assert!(matches!(ws.watch(&rel(p)), Err(FsError::Hidden { .. })));
        }
    }
}
