//! The whole workspace against HEAD as one patch that `git apply` accepts.

use std::collections::BTreeSet;

use gix::bstr::ByteSlice;
use gix::index::entry::{Flags, Mode};

use crate::content::{BinaryCheck, Reader, Side, Worktree};
use crate::repo::{quote_lossy, Repo};
use crate::status::{same_type, status_of};
use crate::{binary, render, GitError, Hidden};

/// One path's two sides, read completely before any text is produced.
struct Pair {
    path: Vec<u8>,
    old: Option<Side>,
    new: Option<Side>,
}

pub(crate) fn snapshot_of(repo: &Repo, hidden: Hidden<'_>) -> Result<Vec<u8>, GitError> {
    // The status already leaves hidden paths out, so the patch never carries them (a Root
    // inside the workspace would otherwise put its own segments and earlier patches into
    // every new patch).
    let status = status_of(repo, hidden)?;
    let mut paths: BTreeSet<Vec<u8>> = BTreeSet::new();
    paths.extend(status.staged.into_iter().map(|c| c.path));
    paths.extend(status.worktree.into_iter().map(|c| c.path));
    for p in &status.untracked {
        if p.ends_with(b"/") {
            return Err(repo.unsupported(format!(
                "untracked nested repository {} cannot be expressed in a patch",
                quote_lossy(p.as_bstr())
            )));
        }
    }
    repo.check_filters(status.untracked.iter().map(|p| p.as_slice()))?;
    paths.extend(status.untracked);

    let head = repo.head_index()?;
    let mut reader = Reader::new(repo)?;
    let mut pairs = Vec::with_capacity(paths.len());
    for path in paths {
        let old = match head.entry_by_path(path.as_bstr()) {
            Some(e) => Some(repo.side(e.mode, &e.id)?),
            None => None,
        };
        let index_mode = repo
            .index
            .entry_by_path(path.as_bstr())
            .filter(|e| !e.flags.contains(Flags::INTENT_TO_ADD))
            .map(|e| e.mode);
        let new = match reader.read(&path, index_mode)? {
            Worktree::Missing => None,
            Worktree::Present(side) => Some(side),
            Worktree::NotAFile(what) => {
                return Err(repo.unsupported(format!(
                    "{} is {what} and cannot be expressed in a patch",
                    quote_lossy(path.as_bstr())
                )));
            }
        };
        pairs.push(Pair { path, old, new });
    }

    let algorithm = repo
        .repo
        .diff_algorithm()
        .map_err(|e| repo.workspace_err("read diff.algorithm", &e))?;
    let mut check = BinaryCheck::new(repo)?;
    let mut out = Vec::new();
    for pair in &pairs {
        match (&pair.old, &pair.new) {
            (Some(o), Some(n)) if !same_type(o.mode, n.mode) => {
                // git expresses a type change as a deletion followed by an addition.
                write_pair(&mut out, &mut check, algorithm, &pair.path, Some(o), None)?;
                write_pair(&mut out, &mut check, algorithm, &pair.path, None, Some(n))?;
            }
            (o, n) => write_pair(
                &mut out,
                &mut check,
                algorithm,
                &pair.path,
                o.as_ref(),
                n.as_ref(),
            )?,
        }
    }
    Ok(out)
}

fn write_pair(
    out: &mut Vec<u8>,
    check: &mut BinaryCheck<'_>,
    algorithm: gix::diff::blob::Algorithm,
    path: &[u8],
    old: Option<&Side>,
    new: Option<&Side>,
) -> Result<(), GitError> {
    match (old, new) {
        (None, None) => return Ok(()),
        (Some(o), Some(n)) if o.id == n.id && o.mode == n.mode => return Ok(()),
        _ => {}
    }
    let empty: &[u8] = b"";
    let old_bytes = old.map_or(empty, |s| s.bytes.as_slice());
    let new_bytes = new.map_or(empty, |s| s.bytes.as_slice());
    let same_content = old.map(|s| s.id) == new.map(|s| s.id);
    render::header(out, path, old, new, true);
    if same_content {
        return Ok(());
    }
    let links = [old, new]
        .into_iter()
        .flatten()
        .any(|s| s.mode == Mode::SYMLINK);
    // The patch is read back as text (`readPatch` answers a JSON string), so content that
    // is not UTF-8 goes as a binary patch even where git would print text lines.
    let not_utf8 = [old_bytes, new_bytes]
        .iter()
        .any(|b| std::str::from_utf8(b).is_err());
    if not_utf8 || (!links && check.is_binary(path, &[old_bytes, new_bytes])?) {
        binary::body(out, old_bytes, new_bytes);
        return Ok(());
    }
    let body = render::hunks(old_bytes, new_bytes, algorithm);
    if !body.is_empty() {
        render::file_lines(out, path, old.is_some(), new.is_some());
        out.extend_from_slice(&body);
    }
    Ok(())
}
