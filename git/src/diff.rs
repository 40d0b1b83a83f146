//! One path's diff in one area.

use std::os::unix::ffi::OsStrExt;

use gix::bstr::ByteSlice;
use gix::index::entry::{Flags, Mode};

use crate::content::{mode_text, BinaryCheck, Reader, Side, Worktree};
use crate::repo::Repo;
use crate::status::same_type;
use crate::{render, Area, Diff, GitError};

pub(crate) fn diff_of(repo: &Repo, path: &[u8], area: Area) -> Result<Diff, GitError> {
    let index_entry = repo.index.entry_by_path(path.as_bstr());
    let (old, new) = match area {
        Area::Staged => {
            let head = repo.head_index()?;
            let old = match head.entry_by_path(path.as_bstr()) {
                Some(e) => Some(repo.side(e.mode, &e.id)?),
                None => None,
            };
            let new = match index_entry {
                // An intent-to-add entry stages nothing.
                Some(e) if e.flags.contains(Flags::INTENT_TO_ADD) => None,
                Some(e) => Some(repo.side(e.mode, &e.id)?),
                None => None,
            };
            (old, new)
        }
        Area::Worktree => {
            let Some(entry) = index_entry else {
                return Ok(Diff::Unchanged);
            };
            repo.check_filters([path])?;
            let old = if entry.flags.contains(Flags::INTENT_TO_ADD) {
                None
            } else {
                Some(repo.side(entry.mode, &entry.id)?)
            };
            let mut reader = Reader::new(repo)?;
            let new = match reader.read(path, Some(entry.mode))? {
                Worktree::Missing => None,
                Worktree::Present(side) => Some(side),
                Worktree::NotAFile(what) => {
                    return Ok(unsupported(format!(
                        "the working path is {what}, the index has a file"
                    )));
                }
            };
            (old, new)
        }
        Area::Untracked => {
            if index_entry.is_some() || is_ignored(repo, path)? {
                return Ok(Diff::Unchanged);
            }
            repo.check_filters([path])?;
            let mut reader = Reader::new(repo)?;
            match reader.read(path, None)? {
                Worktree::Missing => return Ok(Diff::Unchanged),
                Worktree::NotAFile(what) => {
                    return Ok(unsupported(format!("the untracked path is {what}")))
                }
                Worktree::Present(side) => (None, Some(side)),
            }
        }
    };
    render_one(repo, path, old.as_ref(), new.as_ref())
}

fn unsupported(reason: String) -> Diff {
    Diff::Unsupported { reason }
}

/// True when `path` or one of its parent folders is ignored (.gitignore at every level,
/// .git/info/exclude, core.excludesFile), or lies inside a nested repository.
fn is_ignored(repo: &Repo, path: &[u8]) -> Result<bool, GitError> {
    let mut stack = repo
        .repo
        .excludes(
            &repo.index,
            None,
            gix::worktree::stack::state::ignore::Source::WorktreeThenIdMappingIfNotSkipped,
        )
        .map_err(|e| repo.workspace_err("read ignore rules", &e))?;
    let parts: Vec<usize> = path
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .map(|(i, _)| i)
        .collect();
    for end in parts {
        let dir = &path[..end];
        // Inside a nested repository: not a file of this repository at all.
        let nested = repo
            .root
            .join(std::ffi::OsStr::from_bytes(dir))
            .join(".git");
        if std::fs::symlink_metadata(nested).is_ok() {
            return Ok(true);
        }
        let platform = stack
            .at_entry(dir.as_bstr(), Some(Mode::DIR))
            .map_err(|e| repo.workspace_err("read ignore rules", &e))?;
        if platform.is_excluded() {
            return Ok(true);
        }
    }
    let platform = stack
        .at_entry(path.as_bstr(), Some(Mode::FILE))
        .map_err(|e| repo.workspace_err("read ignore rules", &e))?;
    Ok(platform.is_excluded())
}

fn render_one(
    repo: &Repo,
    path: &[u8],
    old: Option<&Side>,
    new: Option<&Side>,
) -> Result<Diff, GitError> {
    let (o, n) = match (old, new) {
        (None, None) => return Ok(Diff::Unchanged),
        (o, n) => (o, n),
    };
    for side in [o, n].into_iter().flatten() {
        if side.mode == Mode::SYMLINK {
            return Ok(unsupported(
                "symlink: the change is to a link target, not to file content".into(),
            ));
        }
    }
    if let (Some(a), Some(b)) = (o, n) {
        if !same_type(a.mode, b.mode) {
            return Ok(unsupported(format!(
                "type change ({} to {})",
                mode_text(a.mode),
                mode_text(b.mode)
            )));
        }
        if a.id == b.id {
            if a.mode == b.mode {
                return Ok(Diff::Unchanged);
            }
            // A mode change alone: git shows the mode lines and no hunk (binary or not). The
            // header is ASCII (names are C-quoted past 0x7e).
            let mut out = Vec::new();
            render::header(&mut out, path, o, n, false);
            return Ok(Diff::Text(String::from_utf8_lossy(&out).into_owned()));
        }
    }
    let empty: &[u8] = b"";
    let old_bytes = o.map_or(empty, |s| s.bytes.as_slice());
    let new_bytes = n.map_or(empty, |s| s.bytes.as_slice());
    if BinaryCheck::new(repo)?.is_binary(path, &[old_bytes, new_bytes])? {
        return Ok(Diff::Binary);
    }
    let algorithm = repo
        .repo
        .diff_algorithm()
        .map_err(|e| repo.workspace_err("read diff.algorithm", &e))?;
    let mut out = Vec::new();
    render::header(&mut out, path, o, n, false);
    let body = render::hunks(old_bytes, new_bytes, algorithm);
    if !body.is_empty() {
        render::file_lines(&mut out, path, o.is_some(), n.is_some());
        out.extend_from_slice(&body);
    }
    match String::from_utf8(out) {
        Ok(text) => Ok(Diff::Text(text)),
        Err(_) => Ok(unsupported(
            "the content is not UTF-8, and a text patch is carried as UTF-8".into(),
        )),
    }
}
