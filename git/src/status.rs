//! Status in three groups: HEAD tree against the index, the index against the worktree,
//! and untracked files one by one.

use gix::bstr::ByteSlice;
use gix::diff::index::ChangeRef;
use gix::index::entry::Mode;
use gix::status::index_worktree::Item as WtItem;
use gix::status::plumbing::index_as_worktree::{Change as WtChange, EntryStatus};

use crate::repo::{quote_lossy, Repo};
use crate::{Change, ChangeKind, GitError, Hidden, Status};

/// Kind of an entry as git compares types: regular files (with or without the executable
/// bit), symlinks and gitlinks are different types.
pub(crate) fn same_type(a: Mode, b: Mode) -> bool {
    let class = |m: Mode| {
        if m == Mode::SYMLINK {
            1
        } else if m == Mode::COMMIT {
            2
        } else {
            0
        }
    };
    class(a) == class(b)
}

/// The status, leaving out every path `hidden` hides (see [`crate::Hidden`]).
pub(crate) fn status_of(repo: &Repo, hidden: Hidden<'_>) -> Result<Status, GitError> {
    let head = repo
        .repo
        .head()
        .map_err(|e| repo.workspace_err("read HEAD", &e))?
        .id()
        .map(|id| id.to_hex().to_string());
    let platform = repo
        .repo
        .status(gix::progress::Discard)
        .map_err(|e| repo.workspace_err("prepare status", &e))?
        .index(gix::worktree::IndexPersistedOrInMemory::Persisted(
            repo.index.clone(),
        ))
        // Set after `status()`, which applied status.showUntrackedFiles.
        .untracked_files(gix::status::UntrackedFiles::Files)
        .index_worktree_rewrites(None)
        .tree_index_track_renames(gix::status::tree_index::TrackRenames::Disabled)
        .index_worktree_submodules(None);
    let iter = platform
        .into_iter(Vec::<gix::bstr::BString>::new())
        .map_err(|e| repo.workspace_err("compute status", &e))?;
    let mut status = Status {
        head,
        staged: Vec::new(),
        worktree: Vec::new(),
        untracked: Vec::new(),
    };
    for item in iter {
        let item = item.map_err(|e| repo.workspace_err("compute status", &e))?;
        match item {
            gix::status::Item::TreeIndex(change) => staged_change(repo, change, &mut status)?,
            gix::status::Item::IndexWorktree(WtItem::Modification {
                rela_path,
                status: st,
                ..
            }) => {
                let kind = match st {
                    EntryStatus::NeedsUpdate(_) => continue,
                    EntryStatus::IntentToAdd => ChangeKind::Added,
                    EntryStatus::Change(WtChange::Removed) => ChangeKind::Deleted,
                    EntryStatus::Change(WtChange::Type { .. }) => ChangeKind::TypeChanged,
                    EntryStatus::Change(WtChange::Modification { .. }) => ChangeKind::Modified,
                    EntryStatus::Change(WtChange::SubmoduleModification(_)) => {
                        return Err(repo.unsupported(format!(
                            "submodule {}",
                            quote_lossy(rela_path.as_ref())
                        )));
                    }
                    EntryStatus::Conflict { .. } => {
                        return Err(repo.unsupported(format!(
                            "unmerged path {} (a merge is in progress)",
                            quote_lossy(rela_path.as_ref())
                        )));
                    }
                };
                status.worktree.push(Change {
                    path: rela_path.to_vec(),
                    change: kind,
                });
            }
            gix::status::Item::IndexWorktree(WtItem::DirectoryContents { entry, .. }) => {
                if entry.status != gix::dir::entry::Status::Untracked {
                    continue;
                }
                let mut path = entry.rela_path.to_vec();
                // Like git: an untracked nested repository is listed as a folder.
                if matches!(
                    entry.disk_kind,
                    Some(gix::dir::entry::Kind::Directory | gix::dir::entry::Kind::Repository)
                ) {
                    path.push(b'/');
                }
                status.untracked.push(path);
            }
            gix::status::Item::IndexWorktree(WtItem::Rewrite { .. }) => {
                return Err(
                    repo.unsupported("rename tracking reported a rewrite although it is disabled")
                );
            }
        }
    }
    // Filtered after the walk rather than pruned from it: the rule is the caller's, and a
    // hidden path must be left out whether it is tracked, staged or untracked.
    status.staged.retain(|c| !hidden(&c.path));
    status.worktree.retain(|c| !hidden(&c.path));
    status.untracked.retain(|p| !hidden(p));
    status.staged.sort_by(|a, b| a.path.cmp(&b.path));
    status.worktree.sort_by(|a, b| a.path.cmp(&b.path));
    status.untracked.sort();
    status.untracked.dedup();
    Ok(status)
}

fn staged_change(
    repo: &Repo,
    change: gix::diff::index::Change,
    status: &mut Status,
) -> Result<(), GitError> {
    let (path, kind, modes): (&[u8], ChangeKind, [Mode; 2]) = match &change {
        ChangeRef::Addition {
            location,
            entry_mode,
            ..
        } => (
            location.as_bytes(),
            ChangeKind::Added,
            [*entry_mode, *entry_mode],
        ),
        ChangeRef::Deletion {
            location,
            entry_mode,
            ..
        } => (
            location.as_bytes(),
            ChangeKind::Deleted,
            [*entry_mode, *entry_mode],
        ),
        ChangeRef::Modification {
            location,
            previous_entry_mode,
            entry_mode,
            ..
        } => {
            let kind = if same_type(*previous_entry_mode, *entry_mode) {
                ChangeKind::Modified
            } else {
                ChangeKind::TypeChanged
            };
            (
                location.as_bytes(),
                kind,
                [*previous_entry_mode, *entry_mode],
            )
        }
        ChangeRef::Rewrite { .. } => {
            return Err(
                repo.unsupported("rename tracking reported a rewrite although it is disabled")
            );
        }
    };
    if modes.contains(&Mode::COMMIT) {
        return Err(repo.unsupported(format!(
            "submodules (gitlink {})",
            quote_lossy(path.as_bstr())
        )));
    }
    status.staged.push(Change {
        path: path.to_vec(),
        change: kind,
    });
    Ok(())
}
