//! Scripted repositories and the real `git` CLI as the reference.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use logbook_git::{Area, ChangeKind, Diff};

/// A marker that the global filter driver (shaped like a large-file filter) would create.
pub fn global_marker() -> PathBuf {
    home().join("GLOBAL_FILTER_RAN")
}

/// One HOME for the whole test binary: environment variables are process-wide, so they
/// are set once, before any test does anything else.
pub fn home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let marker = dir.join("GLOBAL_FILTER_RAN");
        let cfg = format!(
            "[user]\n\tname = Test\n\temail = test@example.com\n\
             [init]\n\tdefaultBranch = main\n\
             [core]\n\texcludesFile = {}\n\
             [filter \"lfs\"]\n\tclean = sh -c 'touch {m}; cat'\n\tsmudge = sh -c 'touch {m}; cat'\n\tprocess = sh -c 'touch {m}'\n\trequired = true\n",
            dir.join("global-ignore").display(),
            m = marker.display()
        );
        std::fs::write(dir.join(".gitconfig"), cfg).expect("write global config");
        std::fs::write(dir.join("global-ignore"), "*.globalignored\n").expect("write global ignore");
        std::env::set_var("HOME", &dir);
        std::env::set_var("XDG_CONFIG_HOME", dir.join(".config"));
        std::env::set_var("GIT_CONFIG_NOSYSTEM", "1");
        for v in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG_GLOBAL", "GIT_CEILING_DIRECTORIES"] {
            std::env::remove_var(v);
        }
        dir
    })
}

pub fn git_raw(dir: &Path, args: &[&OsStr]) -> std::process::Output {
    home();
    Command::new("git")
        .arg("--literal-pathspecs")
        .args(["-c", "color.ui=false", "-c", "core.quotepath=true"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs")
}

/// Runs git and requires success.
pub fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    git_os(dir, &args)
}

pub fn git_os(dir: &Path, args: &[&OsStr]) -> Vec<u8> {
    let out = git_raw(dir, args);
    assert!(
        out.status.success(),
        "git {:?} failed in {}: {}",
        args,
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub struct TestRepo {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

pub fn new_repo() -> TestRepo {
    home();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ws");
    std::fs::create_dir(&path).expect("mkdir");
    git(&path, &["init", "-q", "-b", "main"]);
    git(&path, &["config", "user.name", "Test"]);
    git(&path, &["config", "user.email", "test@example.com"]);
    TestRepo { _dir: dir, path }
}

impl TestRepo {
    pub fn write(&self, rel: &[u8], content: &[u8]) {
        let p = self.p(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir -p");
        }
        std::fs::write(p, content).expect("write");
    }
    pub fn p(&self, rel: &[u8]) -> PathBuf {
        self.path.join(OsStr::from_bytes(rel))
    }
    pub fn git(&self, args: &[&str]) -> Vec<u8> {
        git(&self.path, args)
    }
    pub fn add(&self, rel: &[u8]) {
        git_os(
            &self.path,
            &[OsStr::new("add"), OsStr::new("--"), OsStr::from_bytes(rel)],
        );
    }
    pub fn commit(&self, msg: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", msg]);
    }
    pub fn chmod(&self, rel: &[u8], mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.p(rel), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
    }
    pub fn symlink(&self, target: &str, rel: &[u8]) {
        let _ = std::fs::remove_file(self.p(rel));
        std::os::unix::fs::symlink(target, self.p(rel)).expect("symlink");
    }
    pub fn rm(&self, rel: &[u8]) {
        std::fs::remove_file(self.p(rel)).expect("rm");
    }
}

pub type Groups = (
    Vec<(Vec<u8>, ChangeKind)>,
    Vec<(Vec<u8>, ChangeKind)>,
    Vec<Vec<u8>>,
);

fn kind(c: u8) -> Option<ChangeKind> {
    match c {
        b'A' => Some(ChangeKind::Added),
        b'M' => Some(ChangeKind::Modified),
        b'D' => Some(ChangeKind::Deleted),
        b'T' => Some(ChangeKind::TypeChanged),
        b'.' => None,
        other => panic!("unexpected status letter {}", other as char),
    }
}

/// `git status --porcelain=v2 -z --untracked-files=all --no-renames`, in three groups.
pub fn git_status(ws: &Path) -> Groups {
    let out = git(
        ws,
        &[
            "status",
            "--porcelain=v2",
            "-z",
            "--untracked-files=all",
            "--no-renames",
        ],
    );
    let (mut staged, mut worktree, mut untracked) = (Vec::new(), Vec::new(), Vec::new());
    for rec in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        match rec[0] {
            b'1' => {
                // 1 XY sub mH mI mW hH hI path
                let mut fields = rec.splitn(9, |b| *b == b' ');
                let xy = fields.nth(1).expect("XY");
                let path = fields.nth(6).expect("path").to_vec();
                if let Some(k) = kind(xy[0]) {
                    staged.push((path.clone(), k));
                }
                if let Some(k) = kind(xy[1]) {
                    worktree.push((path, k));
                }
            }
            b'?' => untracked.push(rec[2..].to_vec()),
            other => panic!(
                "unexpected porcelain record {:?} ({})",
                String::from_utf8_lossy(rec),
                other as char
            ),
        }
    }
    staged.sort();
    worktree.sort();
    untracked.sort();
    (staged, worktree, untracked)
}

pub fn ours(ws: &Path) -> Groups {
    let st = logbook_git::status(ws)
        .expect("status")
        .expect("a repository");
    let pairs = |v: Vec<logbook_git::Change>| {
        v.into_iter()
            .map(|c| (c.path, c.change))
            .collect::<Vec<_>>()
    };
    (pairs(st.staged), pairs(st.worktree), st.untracked)
}

fn from_first_hunk(text: &[u8]) -> &[u8] {
    let at = text
        .windows(3)
        .position(|w| w == b"@@ ")
        .unwrap_or(text.len());
    &text[at..]
}

/// Compares one of our per-file diffs with the git CLI's.
pub fn compare_diff(ws: &Path, path: &[u8], area: Area) {
    let ours = logbook_git::diff(ws, path, area).expect("diff");
    let p = OsStr::from_bytes(path);
    let reference = match area {
        Area::Staged => git_os(
            ws,
            &[
                "diff".as_ref(),
                "--cached".as_ref(),
                "--no-ext-diff".as_ref(),
                "--no-textconv".as_ref(),
                "--".as_ref(),
                p,
            ],
        ),
        Area::Worktree => git_os(
            ws,
            &[
                "diff".as_ref(),
                "--no-ext-diff".as_ref(),
                "--no-textconv".as_ref(),
                "--".as_ref(),
                p,
            ],
        ),
        Area::Untracked => {
            let out = git_raw(
                ws,
                &[
                    "diff".as_ref(),
                    "--no-index".as_ref(),
                    "--no-ext-diff".as_ref(),
                    "--".as_ref(),
                    "/dev/null".as_ref(),
                    p,
                ],
            );
            assert!(
                out.status.code() == Some(1),
                "git diff --no-index: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        }
    };
    let shown = String::from_utf8_lossy(&reference).to_string();
    match &ours {
        Diff::Text(text) => {
            assert_eq!(
                String::from_utf8_lossy(from_first_hunk(text.as_bytes())),
                String::from_utf8_lossy(from_first_hunk(&reference)),
                "diff of {:?} ({area:?}) differs; ours:\n{text}\ngit:\n{shown}",
                String::from_utf8_lossy(path)
            );
            assert!(text.starts_with("diff --git "), "{text}");
            if shown.contains("\nold mode ") {
                // A mode change: the header lines too, exactly as git prints them.
                assert_eq!(
                    text,
                    &shown,
                    "mode change of {:?} ({area:?})",
                    String::from_utf8_lossy(path)
                );
            }
        }
        Diff::Binary => assert!(shown.contains("Binary files"), "ours binary, git:\n{shown}"),
        Diff::Unchanged => assert!(reference.is_empty(), "ours unchanged, git:\n{shown}"),
        Diff::Unsupported { reason } => {
            // Only type changes and symlinks are refused per file (a mode change is shown).
            let expected = shown.contains("120000");
            assert!(expected, "ours unsupported ({reason}), git:\n{shown}");
        }
    }
}

/// Every file below `root` (except `.git`) with its kind, exec bit and content.
fn snapshot_tree(root: &Path, listing: &[Vec<u8>]) -> Vec<(Vec<u8>, String)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    for rel in listing {
        let p = root.join(OsStr::from_bytes(rel));
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let desc = if meta.file_type().is_symlink() {
            format!("link {:?}", std::fs::read_link(&p).expect("readlink"))
        } else if meta.is_file() {
            format!(
                "file x={} {:?}",
                meta.permissions().mode() & 0o100 != 0,
                std::fs::read(&p).expect("read")
            )
        } else {
            continue;
        };
        out.push((rel.clone(), desc));
    }
    out
}

fn listing(root: &Path) -> Vec<Vec<u8>> {
    let out = git(
        root,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    );
    let mut v: Vec<Vec<u8>> = out
        .split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .map(|r| r.to_vec())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// What `git add -A` would record, without touching the real index.
fn worktree_tree_id(root: &Path) -> Vec<u8> {
    let tmp = root.join(".git").join("logbook-test-index");
    let index = root.join(".git").join("index");
    if index.exists() {
        std::fs::copy(&index, &tmp).expect("copy index");
        // The copy keeps the index's time: git trusts an entry's cached stat only when the
        // file is older than the index, so a newer copy would hide a change made in the same
        // moment as the last index write (racy git), and `add -A` would miss it.
        let modified = std::fs::metadata(&index)
            .and_then(|m| m.modified())
            .expect("stat index");
        std::fs::File::options()
            .write(true)
            .open(&tmp)
            .and_then(|f| f.set_modified(modified))
            .expect("keep the index's time");
    } else {
        let _ = std::fs::remove_file(&tmp);
    }
    let run = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .env("GIT_INDEX_FILE", &tmp)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    run(&["add", "-A"]);
    let id = run(&["write-tree"]);
    let _ = std::fs::remove_file(&tmp);
    id
}

/// Applies our snapshot patch to a fresh clone of HEAD and checks that the result is the workspace.
pub fn check_snapshot(ws: &Path, clone_config: &[&str]) {
    let patch = logbook_git::snapshot_patch(ws)
        .expect("snapshot")
        .expect("repository");
    let again = logbook_git::snapshot_patch(ws)
        .expect("snapshot")
        .expect("repository");
    assert_eq!(patch, again, "snapshot patch is deterministic");
    assert!(
        std::str::from_utf8(&patch).is_ok(),
        "the patch is read back as text, so it must be UTF-8:\n{}",
        String::from_utf8_lossy(&patch)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let clone = dir.path().join("clone");
    let mut args: Vec<&str> = vec!["clone", "-q"];
    for c in clone_config {
        args.push("-c");
        args.push(c);
    }
    let src = ws.to_str().expect("utf-8 temp path");
    let dst = clone.to_str().expect("utf-8 temp path");
    args.push(src);
    args.push(dst);
    git(dir.path(), &args);
    let patch_file = dir.path().join("snapshot.patch");
    std::fs::write(&patch_file, &patch).expect("write patch");
    let pf = patch_file.to_str().expect("utf-8");
    if !patch.is_empty() {
        let out = git_raw(&clone, &["apply".as_ref(), "--check".as_ref(), pf.as_ref()]);
        assert!(
            out.status.success(),
            "git apply --check failed: {}\npatch:\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&patch)
        );
        git(&clone, &["apply", pf]);
    }
    let want = listing(ws);
    assert_eq!(
        snapshot_tree(&clone, &listing(&clone)),
        snapshot_tree(ws, &want),
        "clone + patch differs from the workspace; patch:\n{}",
        String::from_utf8_lossy(&patch)
    );
    assert_eq!(
        worktree_tree_id(&clone),
        worktree_tree_id(ws),
        "git add -A trees differ"
    );
}

/// Status, every per-file diff and the snapshot patch, all against git.
pub fn check_all(ws: &Path, clone_config: &[&str]) -> Groups {
    let before = ours(ws);
    let reference = git_status(ws);
    assert_eq!(
        before, reference,
        "status differs from git (ours first, git second)"
    );
    assert_eq!(
        ours(ws),
        reference,
        "status differs from git after git refreshed the index"
    );
    for (path, _) in &reference.0 {
        compare_diff(ws, path, Area::Staged);
    }
    for (path, _) in &reference.1 {
        compare_diff(ws, path, Area::Worktree);
    }
    for path in &reference.2 {
        if !path.ends_with(b"/")
            && !std::fs::symlink_metadata(ws.join(OsStr::from_bytes(path)))
                .expect("lstat")
                .file_type()
                .is_symlink()
        {
            compare_diff(ws, path, Area::Untracked);
        }
    }
    check_snapshot(ws, clone_config);
    assert!(!global_marker().exists(), "a configured filter command ran");
    reference
}
