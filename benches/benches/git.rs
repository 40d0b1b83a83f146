//! Git views against the git CLI on one real repository with history.
//!
//! The fixture is built once (and reused) in the temp dir from Rust sources found in the
//! cargo registry: `GIT_BENCH_FILES` files (default 6000) in 5 commits, then 50 changes
//! (30 worktree edits, 10 staged edits, 5 deletions, 5 untracked files).
//!
//! Each group holds the git CLI (a spawned process), the logbook side as a spawned helper
//! binary (`git/examples/logbook-git-cli.rs`, built with `cargo build --release`), and the
//! logbook side in-process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Files in the fixture repository unless `GIT_BENCH_FILES` says otherwise.
const FIXTURE_FILES_DEFAULT: usize = 6000;
/// Largest source file copied into the fixture, in bytes.
const FIXTURE_FILE_BYTES_MAX: u64 = 256 << 10;
const COMMITS: usize = 5;

fn git(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    out
}

fn git_ok(dir: &Path, args: &[&str]) {
    let out = git(dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn registry_sources(limit: usize) -> Vec<PathBuf> {
    let home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let mut roots: Vec<PathBuf> = std::fs::read_dir(home.join(".cargo/registry/src"))
        .expect("~/.cargo/registry/src")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    roots.sort();
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = roots;
    stack.reverse();
    // Depth-first in name order, so the selection is the same on every run.
    while let Some(p) = stack.pop() {
        if out.len() >= limit {
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            let mut children: Vec<PathBuf> = std::fs::read_dir(&p)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            children.sort();
            children.reverse();
            stack.extend(children);
        } else if meta.is_file()
            && meta.len() <= FIXTURE_FILE_BYTES_MAX
            && matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("rs" | "toml" | "md")
            )
        {
            out.push(p);
        }
    }
    out
}

struct Fixture {
    ws: PathBuf,
    files: usize,
    modified: String,
}

fn fixture(files: usize) -> Fixture {
    let base = std::env::temp_dir().join(format!("logbook-git-bench-{files}"));
    let ws = base.join("ws");
    let ready = base.join("ready");
    if let Ok(modified) = std::fs::read_to_string(&ready) {
        return Fixture {
            ws,
            files,
            modified,
        };
    }
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&ws).expect("mkdir");
    git_ok(&ws, &["init", "-q", "-b", "main"]);
    let sources = registry_sources(files);
    assert_eq!(
        sources.len(),
        files,
        "not enough source files in the cargo registry"
    );
    let home = PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo/registry/src");
    let mut rels = Vec::with_capacity(files);
    for (i, src) in sources.iter().enumerate() {
        let rel = src.strip_prefix(&home).expect("below the registry");
        // Drop the registry index folder name.
        let rel: PathBuf = rel.components().skip(1).collect();
        let dst = ws.join(&rel);
        std::fs::create_dir_all(dst.parent().expect("parent")).expect("mkdir -p");
        std::fs::copy(src, &dst).expect("copy");
        rels.push(rel.to_str().expect("utf-8 registry path").to_string());
        if (i + 1) % files.div_ceil(COMMITS) == 0 || i + 1 == files {
            git_ok(&ws, &["add", "-A"]);
            git_ok(
                &ws,
                &["commit", "-q", "-m", &format!("batch ending at {i}")],
            );
        }
    }
    // 50 changes, spread over the tree.
    let step = files / 50;
    let pick = |k: usize| &rels[k * step];
    for k in 0..30 {
        let p = ws.join(pick(k));
        let mut text = std::fs::read(&p).expect("read");
        text.extend_from_slice(b"\n// edited in the worktree\n");
        std::fs::write(&p, text).expect("write");
    }
    for k in 30..40 {
        let p = ws.join(pick(k));
        let mut text = std::fs::read(&p).expect("read");
        text.splice(0..0, b"// staged edit\n".iter().copied());
        std::fs::write(&p, text).expect("write");
        git_ok(&ws, &["add", "--", pick(k)]);
    }
    for k in 40..45 {
        std::fs::remove_file(ws.join(pick(k))).expect("rm");
    }
    for k in 45..50 {
        std::fs::write(ws.join(format!("{}.new.rs", pick(k))), "fn added() {}\n").expect("write");
    }
    // Let every file age past the index's timestamp so neither side sees racy entries.
    std::thread::sleep(Duration::from_millis(1100));
    let _ = git(&ws, &["status", "--porcelain"]);
    let modified = pick(3).clone();
    std::fs::write(&ready, &modified).expect("write ready marker");
    Fixture {
        ws,
        files,
        modified,
    }
}

fn helper_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf();
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "logbook-git",
            "--example",
            "logbook-git-cli",
        ])
        .current_dir(&root)
        .status()
        .expect("cargo build runs");
    assert!(status.success(), "building the helper binary failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    target.join("release/examples/logbook-git-cli")
}

fn spawn(cmd: &Path, dir: &Path, args: &[&str]) -> usize {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.len()
}

fn bench(c: &mut Criterion) {
    let files = std::env::var("GIT_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FIXTURE_FILES_DEFAULT);
    let fx = fixture(files);
    let helper = helper_binary();
    let gitbin = PathBuf::from("git");
    let ws = fx.ws.as_path();
    let ws_str = ws.to_str().expect("utf-8 temp path");

    // Same answer on both sides before timing anything.
    let ours = logbook_git::status(ws)
        .expect("status")
        .expect("repository");
    assert_eq!(
        ours.staged.len() + ours.worktree.len() + ours.untracked.len(),
        50
    );

    let mut g = c.benchmark_group(format!("git/status/{}", fx.files));
    g.throughput(Throughput::Elements(fx.files as u64));
    g.bench_function(BenchmarkId::from_parameter("git-cli"), |b| {
        b.iter(|| {
            spawn(
                &gitbin,
                ws,
                &[
                    "status",
                    "--porcelain=v2",
                    "-z",
                    "--untracked-files=all",
                    "--no-renames",
                ],
            )
        })
    });
    g.bench_function(BenchmarkId::from_parameter("logbook-spawned"), |b| {
        b.iter(|| spawn(&helper, ws, &["status", ws_str]))
    });
    g.bench_function(BenchmarkId::from_parameter("logbook-in-process"), |b| {
        b.iter(|| logbook_git::status(ws).expect("status"))
    });
    g.finish();

    let path = fx.modified.as_str();
    let mut g = c.benchmark_group(format!("git/diff/{}", fx.files));
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::from_parameter("git-cli"), |b| {
        b.iter(|| spawn(&gitbin, ws, &["diff", "--no-ext-diff", "--", path]))
    });
    g.bench_function(BenchmarkId::from_parameter("logbook-spawned"), |b| {
        b.iter(|| spawn(&helper, ws, &["diff", ws_str, path, "worktree"]))
    });
    g.bench_function(BenchmarkId::from_parameter("logbook-in-process"), |b| {
        b.iter(|| {
            logbook_git::diff(ws, path.as_bytes(), logbook_git::Area::Worktree).expect("diff")
        })
    });
    g.finish();

    // git's side lacks the untracked files (they need `git add -N` first), so it does
    // slightly less work.
    let mut g = c.benchmark_group(format!("git/patch/{}", fx.files));
    g.throughput(Throughput::Elements(fx.files as u64));
    g.bench_function(BenchmarkId::from_parameter("git-cli"), |b| {
        b.iter(|| {
            spawn(
                &gitbin,
                ws,
                &["diff", "HEAD", "--binary", "--full-index", "--no-ext-diff"],
            )
        })
    });
    g.bench_function(BenchmarkId::from_parameter("logbook-spawned"), |b| {
        b.iter(|| spawn(&helper, ws, &["patch", ws_str]))
    });
    g.bench_function(BenchmarkId::from_parameter("logbook-in-process"), |b| {
        b.iter(|| logbook_git::snapshot_patch(ws).expect("patch"))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
