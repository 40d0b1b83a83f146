//! `logbook-git`: read-only views of the repository that sits at a workspace's root —
//! status in three groups, one file's diff, and a whole-workspace patch against HEAD.
//!
//! Invariants:
//! - Only `workspace/.git` is considered; parent folders are never searched, so a
//!   workspace below a repository's root has no repository.
//! - No configured command ever runs (filter drivers, fsmonitor, hooks, textconv, external
//!   diff, credential helpers): filter sections are removed from the in-memory
//!   configuration before gix does any work, gix is built without fsmonitor support, and
//!   blobs are read with the "to git" pipeline only, which never calls textconv.
//! - What cannot be shown faithfully fails with [`ErrorKind::Unsupported`] and a reason:
//!   submodules, sparse checkout, split index, unmerged paths, a path whose `filter`
//!   attribute names a driver with a command, non-SHA-1 repositories, a worktree that is
//!   not the workspace.
//! - Paths are exact bytes; every list is sorted by path bytes; renames are a deletion
//!   plus an addition.
//! - gix types never leave this crate: errors are [`GitError`].
//!
//! ```no_run
//! let ws = std::path::Path::new("/some/workspace");
//! if let Some(status) = logbook_git::status(ws)? {
//!     for change in &status.worktree {
//!         let diff = logbook_git::diff(ws, &change.path, logbook_git::Area::Worktree)?;
//!         println!("{:?}", diff);
//!     }
//! }
//! # Ok::<(), logbook_git::GitError>(())
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod binary;
mod content;
mod diff;
mod error;
mod patch;
mod render;
mod repo;
mod status;
mod worktree;

use std::path::Path;

pub use error::{ErrorKind, GitError};

/// The three groups of changes of a repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The commit HEAD points to, in hex; None when HEAD is unborn.
    pub head: Option<String>,
    /// HEAD tree against the index, sorted by path bytes.
    pub staged: Vec<Change>,
    /// Index against the working files, sorted by path bytes.
    pub worktree: Vec<Change>,
    /// Untracked files one by one (ignored files left out), sorted by path bytes. An
    /// untracked nested repository is listed as a folder with a trailing `/`.
    pub untracked: Vec<Vec<u8>>,
}

/// One changed path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub change: ChangeKind,
}

/// How a path changed. A change of the executable bit is `Modified`; file to symlink (or
/// back) is `TypeChanged`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    TypeChanged,
}

/// Which comparison a diff shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Area {
    /// HEAD to the index.
    Staged,
    /// The index to the working file.
    Worktree,
    /// An empty file to the untracked working file.
    Untracked,
}

/// One file's diff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Diff {
    /// A complete git-style unified patch (3 lines of context).
    Text(String),
    /// One side is binary (the `diff` attribute, or a NUL in the first 8000 bytes).
    Binary,
    /// Nothing differs in this area for this path (also: the path is not part of the area).
    Unchanged,
    /// The change cannot be shown as a text patch; the reason says why.
    Unsupported { reason: String },
}

/// Paths the caller hides from every view of this crate: a hidden path is left out of
/// [`status_hiding`] and [`snapshot_patch_hiding`], and [`diff_hiding`] refuses it with
/// [`GitError::Hidden`]. Called with a path relative to the workspace, as git writes it
/// (an untracked nested repository ends in `/`). `logbook-api` passes the workspace's own
/// rule (`.git`, `.logbook` and a Root inside the workspace), so the git views hide exactly
/// what the file views hide.
pub type Hidden<'a> = &'a dyn Fn(&[u8]) -> bool;

/// Hides nothing.
fn nothing_hidden(_: &[u8]) -> bool {
    false
}

/// Status of the repository whose root is `workspace`; None when `workspace/.git` does
/// not exist.
pub fn status(workspace: &Path) -> Result<Option<Status>, GitError> {
    status_hiding(workspace, &nothing_hidden)
}

/// [`status`] without the paths `hidden` hides (changes and untracked files under them).
pub fn status_hiding(workspace: &Path, hidden: Hidden<'_>) -> Result<Option<Status>, GitError> {
    let Some(repo) = repo::open(workspace)? else {
        return Ok(None);
    };
    status::status_of(&repo, hidden).map(Some)
}

/// The diff of one path in one area. Fails with `NotFound` when there is no repository
/// and `InvalidArgument` for a path that is not a plain relative path.
pub fn diff(workspace: &Path, path: &[u8], area: Area) -> Result<Diff, GitError> {
    diff_hiding(workspace, path, area, &nothing_hidden)
}

/// [`diff`], refusing a path that `hidden` hides with [`GitError::Hidden`]
/// (`PermissionDenied`), as a workspace read refuses it.
pub fn diff_hiding(
    workspace: &Path,
    path: &[u8],
    area: Area,
    hidden: Hidden<'_>,
) -> Result<Diff, GitError> {
    worktree::check_rel(path)?;
    if hidden(path) {
        return Err(GitError::Hidden {
            path: path.to_vec(),
        });
    }
    let Some(repo) = repo::open(workspace)? else {
        return Err(GitError::NoRepository {
            workspace: workspace.to_path_buf(),
        });
    };
    diff::diff_of(&repo, path, area)
}

/// The whole workspace change against HEAD as a git-style patch (a/ b/ prefixes, full
/// object ids, untracked files as additions, binary files and files that are not UTF-8
/// as `GIT binary patch` literals) such that `git apply` on a checkout of HEAD
/// reproduces the workspace. The patch is always valid UTF-8 (names are C-quoted as git
/// quotes them). None when no repository.
pub fn snapshot_patch(workspace: &Path) -> Result<Option<Vec<u8>>, GitError> {
    snapshot_patch_hiding(workspace, &nothing_hidden)
}

/// [`snapshot_patch`] without the paths `hidden` hides: they are neither added, changed
/// nor deleted by the patch, so applying it reproduces everything else of the workspace.
pub fn snapshot_patch_hiding(
    workspace: &Path,
    hidden: Hidden<'_>,
) -> Result<Option<Vec<u8>>, GitError> {
    let Some(repo) = repo::open(workspace)? else {
        return Ok(None);
    };
    patch::snapshot_of(&repo, hidden).map(Some)
}
