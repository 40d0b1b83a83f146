#![allow(clippy::unwrap_used)]
//! Status, per-file diffs and snapshot patches compared with the git CLI on scripted
//! repositories in many states.

mod common;

use common::*;
use logbook_git::{Area, ChangeKind, Diff};

const LINES: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\ntwelve\n";

#[test]
fn unborn_head() {
    let r = new_repo();
    r.write(b"staged.txt", b"hello\n");
    r.write(b"both.txt", b"first\n");
    r.add(b"staged.txt");
    r.add(b"both.txt");
    r.write(b"both.txt", b"first\nsecond\n");
    r.write(b"dir/sub/deep/u.txt", b"untracked\n");
    r.write(b"top.txt", b"top\n");
    let st = logbook_git::status(&r.path).unwrap().unwrap();
    assert_eq!(st.head, None);
    let g = check_all(&r.path, &[]);
    assert_eq!(g.0.len(), 2);
    assert!(g.2.contains(&b"dir/sub/deep/u.txt".to_vec()));
}

#[test]
fn clean_repository_is_empty() {
    let r = new_repo();
    r.write(b"a.txt", b"a\n");
    r.commit("base");
    let st = logbook_git::status(&r.path).unwrap().unwrap();
    let head = String::from_utf8(r.git(&["rev-parse", "HEAD"])).unwrap();
    assert_eq!(st.head.as_deref(), Some(head.trim()));
    assert!(st.staged.is_empty() && st.worktree.is_empty() && st.untracked.is_empty());
    assert_eq!(logbook_git::snapshot_patch(&r.path).unwrap().unwrap(), b"");
    assert_eq!(
        logbook_git::diff(&r.path, b"a.txt", Area::Worktree).unwrap(),
        Diff::Unchanged
    );
    assert_eq!(
        logbook_git::diff(&r.path, b"a.txt", Area::Staged).unwrap(),
        Diff::Unchanged
    );
    assert_eq!(
        logbook_git::diff(&r.path, b"a.txt", Area::Untracked).unwrap(),
        Diff::Unchanged
    );
    assert_eq!(
        logbook_git::diff(&r.path, b"nope.txt", Area::Worktree).unwrap(),
        Diff::Unchanged
    );
}

#[test]
fn staged_worktree_both_and_renames() {
    let r = new_repo();
    r.write(b"modify_staged.txt", LINES.as_bytes());
    r.write(b"modify_worktree.txt", LINES.as_bytes());
    r.write(b"both.txt", LINES.as_bytes());
    r.write(b"delete_staged.txt", b"bye\n");
    r.write(b"delete_worktree.txt", b"bye too\n");
    r.write(b"old_name.txt", LINES.as_bytes());
    r.write(b"dir/sub/deep.txt", b"deep\n");
    r.write(b"nonl.txt", b"no newline");
    r.write(b"empty_deleted.txt", b"");
    r.write(b"func.c", b"int main() {\n  a;\n  b;\n  c;\n  d;\n  e;\n  f;\n}\n\nstatic int helper(void) {\n  x;\n  y;\n  z;\n  w;\n}\n");
    r.commit("base");
    r.write(b"modify_staged.txt", LINES.replace("six", "SIX").as_bytes());
    r.add(b"modify_staged.txt");
    r.write(
        b"modify_worktree.txt",
        LINES.replace("two", "2").replace("eleven", "11").as_bytes(),
    );
    r.write(b"both.txt", LINES.replace("one", "ONE").as_bytes());
    r.add(b"both.txt");
    r.write(
        b"both.txt",
        LINES
            .replace("one", "ONE")
            .replace("twelve", "TWELVE\nthirteen")
            .as_bytes(),
    );
    r.git(&["rm", "-q", "delete_staged.txt"]);
    r.rm(b"delete_worktree.txt");
    r.git(&["mv", "old_name.txt", "new_name.txt"]);
    r.git(&["rm", "-q", "dir/sub/deep.txt"]);
    r.write(b"nonl.txt", b"no newline, changed");
    r.git(&["rm", "-q", "empty_deleted.txt"]);
    r.write(b"new_staged.txt", b"new\n");
    r.add(b"new_staged.txt");
    r.write(b"empty_new.txt", b"");
    r.add(b"empty_new.txt");
    r.write(b"func.c", b"int main() {\n  a;\n  b;\n  c;\n  D;\n  e;\n  f;\n}\n\nstatic int helper(void) {\n  x;\n  y;\n  Z;\n  w;\n}\n");
    r.write(b"untracked/a/b/c.txt", b"deep untracked\n");
    r.write(b"untracked/top.txt", b"u\n");
    r.write(b"u.txt", b"plain\nfile\n");
    let g = check_all(&r.path, &[]);
    assert!(g.0.contains(&(b"new_name.txt".to_vec(), ChangeKind::Added)));
    assert!(g
        .0
        .contains(&(b"old_name.txt".to_vec(), ChangeKind::Deleted)));
    assert!(g.0.iter().any(|(p, _)| p == b"both.txt") && g.1.iter().any(|(p, _)| p == b"both.txt"));
}

#[test]
fn ignored_files_are_left_out() {
    let r = new_repo();
    r.write(b".gitignore", b"*.log\nbuild/\n");
    r.write(b"sub/.gitignore", b"secret*\n!secret.keep\n");
    r.write(b"tracked.txt", b"t\n");
    r.commit("base");
    std::fs::write(r.path.join(".git/info/exclude"), "*.excluded\n").unwrap();
    r.write(b"debug.log", b"ignored\n");
    r.write(b"build/out/x.o", b"ignored\n");
    r.write(b"sub/secret.txt", b"ignored\n");
    r.write(b"sub/secret.keep", b"kept\n");
    r.write(b"sub/deeper/secret2", b"ignored by parent rule\n");
    r.write(b"notes.excluded", b"ignored by info/exclude\n");
    r.write(b"x.globalignored", b"ignored by core.excludesFile\n");
    r.write(b"visible.txt", b"v\n");
    let g = check_all(&r.path, &[]);
    assert_eq!(
        g.2,
        vec![b"sub/secret.keep".to_vec(), b"visible.txt".to_vec()]
    );
    for p in [
        &b"debug.log"[..],
        b"build/out/x.o",
        b"sub/secret.txt",
        b"notes.excluded",
        b"x.globalignored",
    ] {
        assert_eq!(
            logbook_git::diff(&r.path, p, Area::Untracked).unwrap(),
            Diff::Unchanged,
            "{p:?}"
        );
    }
}

#[test]
fn modes_symlinks_and_type_changes() {
    let r = new_repo();
    r.write(b"exec_worktree.sh", b"echo a\n");
    r.write(b"exec_staged.sh", b"echo b\n");
    r.write(b"exec_and_content.sh", b"echo c\n");
    r.write(b"to_link.txt", b"becomes a link\n");
    r.write(b"staged_to_file", b"");
    r.symlink("target-one", b"staged_to_file");
    r.symlink("old-target", b"link_retarget");
    r.write(b"file_to_dir", b"was a file\n");
    r.write(b"dir_to_file/inside.txt", b"was in a folder\n");
    r.commit("base");
    r.chmod(b"exec_worktree.sh", 0o755);
    r.chmod(b"exec_staged.sh", 0o755);
    r.add(b"exec_staged.sh");
    r.write(b"exec_and_content.sh", b"echo c changed\n");
    r.chmod(b"exec_and_content.sh", 0o755);
    r.symlink("exec_worktree.sh", b"to_link.txt");
    r.rm(b"staged_to_file");
    r.write(b"staged_to_file", b"now a file\n");
    r.add(b"staged_to_file");
    r.symlink("new-target", b"link_retarget");
    r.symlink("to_link.txt", b"new_link");
    r.rm(b"file_to_dir");
    r.write(b"file_to_dir/inside.txt", b"now a folder\n");
    std::fs::remove_dir_all(r.p(b"dir_to_file")).unwrap();
    r.write(b"dir_to_file", b"now a file\n");
    let g = check_all(&r.path, &[]);
    assert!(g
        .1
        .contains(&(b"exec_worktree.sh".to_vec(), ChangeKind::Modified)));
    assert!(g
        .1
        .contains(&(b"to_link.txt".to_vec(), ChangeKind::TypeChanged)));
    assert!(g
        .0
        .contains(&(b"staged_to_file".to_vec(), ChangeKind::TypeChanged)));
    // A mode change alone is a change, shown as git shows it: mode lines, no hunk.
    match logbook_git::diff(&r.path, b"exec_worktree.sh", Area::Worktree).unwrap() {
        Diff::Text(t) => assert_eq!(
            t,
            "diff --git a/exec_worktree.sh b/exec_worktree.sh\nold mode 100644\nnew mode 100755\n"
        ),
        other => panic!("{other:?}"),
    }
    compare_diff(&r.path, b"exec_worktree.sh", Area::Worktree);
    compare_diff(&r.path, b"exec_staged.sh", Area::Staged);
    compare_diff(&r.path, b"exec_and_content.sh", Area::Worktree);
    // Staged as a mode change, then back in the worktree: each area shows its own.
    r.chmod(b"exec_staged.sh", 0o644);
    compare_diff(&r.path, b"exec_staged.sh", Area::Staged);
    compare_diff(&r.path, b"exec_staged.sh", Area::Worktree);
    match logbook_git::diff(&r.path, b"exec_and_content.sh", Area::Worktree).unwrap() {
        Diff::Text(t) => assert!(t.contains("old mode 100644\nnew mode 100755\n"), "{t}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        logbook_git::diff(&r.path, b"new_link", Area::Untracked).unwrap(),
        Diff::Unsupported { .. }
    ));
}

#[test]
fn names_are_exact_bytes() {
    let r = new_repo();
    r.write(b"caf\xe9-latin1.txt", b"latin-1 name\n");
    r.write("é-utf8.txt".as_bytes(), b"utf-8 name\n");
    r.write(b"with space.txt", b"space\n");
    r.write(b"quote\"back\\slash.txt", b"odd\n");
    r.write(b"tab\there.txt", b"tab\n");
    r.commit("base");
    for p in [
        &b"caf\xe9-latin1.txt"[..],
        "é-utf8.txt".as_bytes(),
        b"with space.txt",
        b"quote\"back\\slash.txt",
        b"tab\there.txt",
    ] {
        r.write(p, b"changed\n");
    }
    r.write(b"new \xff\xfe dir/na\xefve.txt", b"untracked non-utf8\n");
    r.write(b"with space new.txt", b"");
    let g = check_all(&r.path, &[]);
    assert!(g.1.iter().any(|(p, _)| p == b"caf\xe9-latin1.txt"));
    assert!(g.2.contains(&b"new \xff\xfe dir/na\xefve.txt".to_vec()));
}

#[test]
fn content_that_is_not_utf8_is_patched_as_binary() {
    let r = new_repo();
    r.write(b".gitattributes", b"*.forced diff\n");
    r.write(b"latin1.txt", b"caf\xe9 au lait\n");
    r.write(b"becomes-latin1.txt", b"plain\n");
    r.write(b"text.forced", b"plain\n");
    r.write(b"gone.txt", b"na\xefve\n");
    r.symlink("target", b"plain-link");
    r.commit("base");
    r.write(b"latin1.txt", b"caf\xe9 cr\xe8me\n");
    r.write(b"becomes-latin1.txt", b"\xff\xfe\n");
    r.write(b"text.forced", b"d\xe9j\xe0\n");
    r.rm(b"gone.txt");
    r.write(b"new-latin1.txt", b"\xe0 la carte\n");
    r.rm(b"plain-link");
    std::os::unix::fs::symlink(
        std::os::unix::ffi::OsStrExt::from_bytes(&b"targ\xe9t"[..]) as &std::ffi::OsStr,
        r.p(b"plain-link"),
    )
    .expect("symlink");
    assert_eq!(ours(&r.path), git_status(&r.path));
    // A file's diff is carried as UTF-8 text: these are refused, not mangled.
    for p in [&b"latin1.txt"[..], b"becomes-latin1.txt", b"text.forced"] {
        let d = logbook_git::diff(&r.path, p, logbook_git::Area::Worktree).unwrap();
        assert!(matches!(d, logbook_git::Diff::Unsupported { .. }), "{d:?}");
    }
    // The snapshot applies with `git apply` and reproduces every byte.
    check_snapshot(&r.path, &[]);
}

#[test]
fn crlf_without_autocrlf() {
    let r = new_repo();
    r.write(b"dos.txt", b"a\r\nb\r\nc\r\n");
    r.write(b"mixed.txt", b"a\nb\r\nc\n");
    r.commit("base");
    r.write(b"dos.txt", b"a\r\nB\r\nc\r\n");
    r.write(b"mixed.txt", b"a\r\nb\r\nc\n");
    r.write(b"new_dos.txt", b"x\r\ny\r\n");
    check_all(&r.path, &[]);
}

#[test]
fn crlf_with_autocrlf_and_text_auto() {
    let r = new_repo();
    r.git(&["config", "core.autocrlf", "true"]);
    r.write(b".gitattributes", b"*.txt text=auto\r\n");
    r.write(b"a.txt", b"one\r\ntwo\r\nthree\r\n");
    r.write(b"same.txt", b"stays\r\n");
    r.commit("base");
    r.write(b"a.txt", b"one\r\nTWO\r\nthree\r\n");
    r.write(b"b.txt", b"new\r\nfile\r\n");
    let g = check_all(&r.path, &["core.autocrlf=true"]);
    assert!(!g.1.iter().any(|(p, _)| p == b"same.txt"));
}

#[test]
fn binary_by_nul_and_by_attribute() {
    let r = new_repo();
    r.write(b".gitattributes", b"*.bin binary\n*.forced diff\n");
    r.write(b"nul.dat", b"abc\0def\n");
    r.write(b"attr.bin", b"looks like text\n");
    r.write(b"text.forced", b"has a nul \0 but diff is set\n");
    r.commit("base");
    r.write(b"nul.dat", b"abc\0DEF\n");
    r.write(b"attr.bin", b"looks like text, changed\n");
    r.write(b"text.forced", b"has a nul \0 but diff is set, changed\n");
    r.write(b"new.dat", &[0u8, 1, 2, 3, 255, 254, 10, 0].repeat(100));
    r.rm(b"attr.bin");
    r.write(b"attr.bin", b"");
    let mut big = Vec::new();
    for i in 0..20_000u32 {
        big.extend_from_slice(&i.to_le_bytes());
    }
    r.write(b"big.dat", &big);
    check_all(&r.path, &[]);
    assert_eq!(
        logbook_git::diff(&r.path, b"nul.dat", Area::Worktree).unwrap(),
        Diff::Binary
    );
    assert!(matches!(
        logbook_git::diff(&r.path, b"text.forced", Area::Worktree).unwrap(),
        Diff::Text(_)
    ));
}

#[test]
fn binary_deleted_and_staged() {
    let r = new_repo();
    r.write(b"gone.dat", &[0u8, 9, 8, 7].repeat(50));
    r.write(b"staged.dat", &[1u8, 0, 1, 0].repeat(50));
    r.commit("base");
    r.rm(b"gone.dat");
    r.write(b"staged.dat", &[2u8, 0, 2, 0].repeat(60));
    r.add(b"staged.dat");
    check_all(&r.path, &[]);
    assert_eq!(
        logbook_git::diff(&r.path, b"staged.dat", Area::Staged).unwrap(),
        Diff::Binary
    );
}

#[test]
fn intent_to_add_and_racy_same_size_edit() {
    let r = new_repo();
    r.write(b"racy.txt", b"aaaa\n");
    r.commit("base");
    r.write(b"racy.txt", b"bbbb\n");
    r.write(b"ita.txt", b"intent\n");
    r.git(&["add", "-N", "ita.txt"]);
    check_all(&r.path, &[]);
}

#[test]
fn nested_repository_is_a_folder_and_blocks_the_patch() {
    let r = new_repo();
    r.write(b"a.txt", b"a\n");
    r.commit("base");
    std::fs::create_dir(r.path.join("nested")).unwrap();
    git(&r.path.join("nested"), &["init", "-q"]);
    r.write(b"nested/inner.txt", b"belongs to the nested repository\n");
    let ours = ours(&r.path);
    assert_eq!(ours, git_status(&r.path));
    assert_eq!(ours.2, vec![b"nested/".to_vec()]);
    assert_eq!(
        logbook_git::diff(&r.path, b"nested/inner.txt", Area::Untracked).unwrap(),
        Diff::Unchanged
    );
    let err = logbook_git::snapshot_patch(&r.path).unwrap_err();
    assert_eq!(err.kind(), logbook_git::ErrorKind::Unsupported, "{err}");
}

#[test]
fn file_mode_false_ignores_the_executable_bit() {
    let r = new_repo();
    r.git(&["config", "core.fileMode", "false"]);
    r.write(b"run.sh", b"echo\n");
    r.write(b"edit.sh", b"echo 1\n");
    r.commit("base");
    r.chmod(b"run.sh", 0o755);
    r.chmod(b"edit.sh", 0o755);
    r.write(b"edit.sh", b"echo 2\n");
    r.write(b"new.sh", b"echo new\n");
    r.chmod(b"new.sh", 0o755);
    let g = check_all_modes_relaxed(&r.path);
    assert_eq!(g.1, vec![(b"edit.sh".to_vec(), ChangeKind::Modified)]);
}

/// Like `check_all`, but the executable bits on disk are meaningless here, so the clone is
/// compared by the trees `git add -A` would write (with the same core.fileMode).
fn check_all_modes_relaxed(ws: &std::path::Path) -> Groups {
    let reference = git_status(ws);
    assert_eq!(ours(ws), reference);
    for (path, _) in &reference.1 {
        compare_diff(ws, path, Area::Worktree);
    }
    let patch = logbook_git::snapshot_patch(ws).unwrap().unwrap();
    let text = String::from_utf8(patch).unwrap();
    assert!(!text.contains("100755"), "{text}");
    reference
}

#[test]
fn hidden_paths_are_left_out_of_status_diff_and_patch() {
    // A Root inside the workspace (`.logbook/` here, plus a tracked file under a hidden
    // folder) must not show up anywhere: the caller's rule decides, as for file reads.
    let r = new_repo();
    r.write(b"a.txt", b"one\n");
    r.write(b"priv/tracked.txt", b"old\n");
    r.commit("base");
    r.write(b"a.txt", b"two\n");
    r.write(b"priv/tracked.txt", b"new\n");
    r.write(b".logbook/sessions/s/log/1.active", b"segment bytes\n");
    r.write(b"new.txt", b"added\n");
    let hidden = |p: &[u8]| p.starts_with(b".logbook/") || p.starts_with(b"priv/");
    let st = logbook_git::status_hiding(&r.path, &hidden)
        .unwrap()
        .unwrap();
    assert_eq!(
        st.worktree,
        vec![logbook_git::Change {
            path: b"a.txt".to_vec(),
            change: ChangeKind::Modified
        }]
    );
    assert_eq!(st.untracked, vec![b"new.txt".to_vec()]);
    let e = logbook_git::diff_hiding(
        &r.path,
        b".logbook/sessions/s/log/1.active",
        Area::Untracked,
        &hidden,
    )
    .unwrap_err();
    assert_eq!(e.kind(), logbook_git::ErrorKind::PermissionDenied, "{e}");
    let e = logbook_git::diff_hiding(&r.path, b"priv/tracked.txt", Area::Worktree, &hidden)
        .unwrap_err();
    assert_eq!(e.kind(), logbook_git::ErrorKind::PermissionDenied, "{e}");
    let first = logbook_git::snapshot_patch_hiding(&r.path, &hidden)
        .unwrap()
        .unwrap();
    let text = String::from_utf8(first.clone()).unwrap();
    assert!(
        text.contains("b/a.txt") && text.contains("b/new.txt"),
        "{text}"
    );
    assert!(
        !text.contains(".logbook") && !text.contains("priv/"),
        "{text}"
    );
    // The Root grows between snapshots (it stores each patch); the patch must not.
    for n in 2..4 {
        r.write(
            format!(".logbook/patches/ab/{n}").as_bytes(),
            text.as_bytes(),
        );
        let again = logbook_git::snapshot_patch_hiding(&r.path, &hidden)
            .unwrap()
            .unwrap();
        assert_eq!(again, first, "snapshot {n} differs");
    }
}
