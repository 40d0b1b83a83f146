#![allow(clippy::unwrap_used)]
//! What must be refused, what must never run, and where no repository is seen.

mod common;

use common::*;
use logbook_git::{Area, Diff, ErrorKind};

fn assert_unsupported<T: std::fmt::Debug>(r: Result<T, logbook_git::GitError>, needle: &str) {
    match r {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert!(
                e.to_string().contains(needle),
                "{e} should mention {needle}"
            );
        }
        Ok(v) => panic!("expected Unsupported ({needle}), got {v:?}"),
    }
}

fn all_unsupported(r: &TestRepo, path: &[u8], needle: &str) {
    assert_unsupported(logbook_git::status(&r.path), needle);
    assert_unsupported(logbook_git::diff(&r.path, path, Area::Worktree), needle);
    assert_unsupported(logbook_git::diff(&r.path, path, Area::Staged), needle);
    assert_unsupported(logbook_git::snapshot_patch(&r.path), needle);
}

#[test]
fn no_repository_and_parents_never_searched() {
    home();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(logbook_git::status(dir.path()).unwrap(), None);
    assert_eq!(logbook_git::snapshot_patch(dir.path()).unwrap(), None);
    assert_eq!(
        logbook_git::diff(dir.path(), b"x", Area::Worktree)
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    let r = new_repo();
    r.write(b"sub/file.txt", b"x\n");
    r.commit("base");
    assert_eq!(logbook_git::status(&r.path.join("sub")).unwrap(), None);
    assert_eq!(
        logbook_git::snapshot_patch(&r.path.join("sub")).unwrap(),
        None
    );
}

#[test]
fn bad_paths_are_invalid_arguments() {
    let r = new_repo();
    for p in [
        &b""[..],
        b"/abs",
        b"../up",
        b"a/../b",
        b"a//b",
        b"./a",
        b"a/",
        b".git/config",
        b"a\0b",
        b"x/.GIT/y",
    ] {
        let e = logbook_git::diff(&r.path, p, Area::Worktree).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{p:?}: {e}");
    }
}

#[test]
fn submodules_are_refused() {
    let r = new_repo();
    r.write(b"a.txt", b"a\n");
    r.commit("base");
    let head = String::from_utf8(r.git(&["rev-parse", "HEAD"])).unwrap();
    r.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{},sub", head.trim()),
    ]);
    all_unsupported(&r, b"a.txt", "submodule");

    let r = new_repo();
    r.write(
        b".gitmodules",
        b"[submodule \"x\"]\n\tpath = x\n\turl = ../x\n",
    );
    all_unsupported(&r, b"a.txt", "submodule");
}

#[test]
fn sparse_checkout_is_refused() {
    let r = new_repo();
    r.write(b"a.txt", b"a\n");
    r.write(b"b.txt", b"b\n");
    r.commit("base");
    r.git(&["update-index", "--skip-worktree", "b.txt"]);
    all_unsupported(&r, b"a.txt", "skip-worktree");

    let r = new_repo();
    r.write(b"a.txt", b"a\n");
    r.commit("base");
    r.git(&["config", "core.sparseCheckout", "true"]);
    all_unsupported(&r, b"a.txt", "sparse checkout");
}

#[test]
fn split_index_is_refused() {
    let r = new_repo();
    r.write(b"a.txt", b"a\n");
    r.commit("base");
    r.git(&["update-index", "--split-index"]);
    all_unsupported(&r, b"a.txt", "split index");
}

#[test]
fn unmerged_paths_are_refused() {
    let r = new_repo();
    r.write(b"c.txt", b"base\n");
    r.commit("base");
    r.git(&["checkout", "-q", "-b", "other"]);
    r.write(b"c.txt", b"other\n");
    r.commit("other");
    r.git(&["checkout", "-q", "main"]);
    r.write(b"c.txt", b"main\n");
    r.commit("main");
    let out = git_raw(
        &r.path,
        &["merge".as_ref(), "-q".as_ref(), "other".as_ref()],
    );
    assert!(!out.status.success(), "the merge must conflict");
    all_unsupported(&r, b"c.txt", "unmerged");
}

fn marker_repo() -> (TestRepo, std::path::PathBuf) {
    let r = new_repo();
    let marker = r.path.parent().unwrap().join("MARKER");
    (r, marker)
}

#[test]
fn a_filter_named_by_an_attribute_is_refused_and_never_runs() {
    let (r, marker) = marker_repo();
    r.write(b"a.txt", b"aaaa\n");
    r.write(b"b.dat", b"bbbb\n");
    r.commit("base");
    let cmd = format!("sh -c 'touch {}; cat'", marker.display());
    r.git(&["config", "filter.evil.clean", &cmd]);
    r.git(&["config", "filter.evil.smudge", &cmd]);
    r.git(&[
        "config",
        "filter.evil.process",
        &format!("sh -c 'touch {}'", marker.display()),
    ]);
    // Written after the commit and never added, so git itself never ran the driver.
    r.write(b".gitattributes", b"*.txt filter=evil\n");
    r.write(b"a.txt", b"AAAA\n"); // same size: a status would have to re-hash it
    r.write(b"new.txt", b"untracked\n");
    all_unsupported(&r, b"a.txt", "filter.evil");
    assert_unsupported(
        logbook_git::diff(&r.path, b"new.txt", Area::Untracked),
        "filter.evil",
    );
    assert!(!marker.exists(), "the filter ran");
    // The marker mechanism works: git itself runs the driver.
    // (Its long-running process exits at once, so git fails after starting it.)
    let _ = git_raw(&r.path, &["diff".as_ref(), "--stat".as_ref()]);
    assert!(marker.exists(), "git should have run the filter driver");
}

#[test]
fn an_untracked_file_named_by_a_filter_is_refused_in_the_patch() {
    let (r, marker) = marker_repo();
    r.write(b".gitattributes", b"*.big filter=evil\n");
    r.write(b"a.txt", b"a\n");
    r.commit("base");
    r.git(&[
        "config",
        "filter.evil.clean",
        &format!("sh -c 'touch {}; cat'", marker.display()),
    ]);
    r.write(b"new.big", b"untracked, would be cleaned\n");
    // Status does not convert untracked files, so it may answer.
    let st = logbook_git::status(&r.path).unwrap().unwrap();
    assert_eq!(st.untracked, vec![b"new.big".to_vec()]);
    assert_unsupported(
        logbook_git::diff(&r.path, b"new.big", Area::Untracked),
        "filter.evil",
    );
    assert_unsupported(logbook_git::snapshot_patch(&r.path), "filter.evil");
    assert!(!marker.exists(), "the filter ran");
}

#[test]
fn a_global_large_file_filter_does_not_block_other_repositories() {
    // The shared HOME configures filter.lfs.{clean,smudge,process} with marker commands.
    let r = new_repo();
    r.write(b"a.txt", b"aaaa\n");
    r.write(b"pic.bin", b"binary-ish\n");
    r.commit("base");
    r.write(b"a.txt", b"AAAA\n");
    r.write(b"u.txt", b"u\n");
    check_all(&r.path, &[]);
    // Once an attribute names that driver, the repository is refused.
    r.write(
        b".gitattributes",
        b"*.bin filter=lfs diff=lfs merge=lfs -text\n",
    );
    r.write(b"pic.bin", b"BINARY-ISH\n");
    all_unsupported(&r, b"pic.bin", "filter.lfs");
    assert!(!global_marker().exists(), "the global filter ran");
}

#[test]
fn fsmonitor_textconv_and_hooks_never_run() {
    let (r, marker) = marker_repo();
    r.write(b"a.txt", b"one\ntwo\n");
    r.commit("base");
    let touch = format!("sh -c 'touch {}; cat'", marker.display());
    r.git(&["config", "core.fsmonitor", &touch]);
    r.git(&["config", "diff.tc.textconv", &touch]);
    r.git(&["config", "diff.external", &touch]);
    r.git(&["config", "core.askpass", &touch]);
    r.git(&["config", "core.hooksPath", "hooks"]);
    for hook in [
        "post-index-change",
        "pre-commit",
        "reference-transaction",
        "post-checkout",
    ] {
        r.write(
            format!("hooks/{hook}").as_bytes(),
            format!("#!/bin/sh\ntouch {}\n", marker.display()).as_bytes(),
        );
        r.chmod(format!("hooks/{hook}").as_bytes(), 0o755);
    }
    r.write(b".gitattributes", b"*.txt diff=tc\n");
    r.write(b"a.txt", b"one\nTWO\n");
    r.write(b"b.txt", b"new\n");
    let st = logbook_git::status(&r.path).unwrap().unwrap();
    assert_eq!(st.worktree.len(), 1);
    match logbook_git::diff(&r.path, b"a.txt", Area::Worktree).unwrap() {
        Diff::Text(t) => assert!(
            t.contains("-two\n+TWO\n"),
            "raw content is shown, not a textconv: {t}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        logbook_git::diff(&r.path, b"b.txt", Area::Untracked).unwrap(),
        Diff::Text(_)
    ));
    let patch = logbook_git::snapshot_patch(&r.path).unwrap().unwrap();
    assert!(!patch.is_empty());
    assert!(!marker.exists(), "a configured command ran");
    // The marker mechanism works: git runs the textconv driver.
    git(&r.path, &["diff"]);
    assert!(marker.exists(), "git should have run the textconv command");
}

#[test]
fn a_worktree_elsewhere_is_refused() {
    let r = new_repo();
    r.write(b"a.txt", b"a\n");
    r.commit("base");
    let other = r.path.parent().unwrap().join("elsewhere");
    std::fs::create_dir(&other).unwrap();
    r.git(&["config", "core.worktree", other.to_str().unwrap()]);
    assert_unsupported(logbook_git::status(&r.path), "worktree");
}

#[test]
fn a_symlinked_parent_folder_is_not_followed() {
    let r = new_repo();
    let outside = r.path.parent().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("f.txt"), "outside secret\n").unwrap();
    r.write(b"d/f.txt", b"tracked\n");
    r.commit("base");
    std::fs::remove_dir_all(r.path.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, r.path.join("d")).unwrap();
    // git sees d/f.txt as deleted (it lies beyond a symlink) and `d` as an untracked link.
    check_all(&r.path, &[]);
    match logbook_git::diff(&r.path, b"d/f.txt", Area::Worktree).unwrap() {
        Diff::Text(t) => assert!(
            t.contains("deleted file mode") && !t.contains("secret"),
            "{t}"
        ),
        other => panic!("{other:?}"),
    }
}
