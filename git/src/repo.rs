//! Opening a workspace's repository and refusing, before gix does any work that could
//! run a configured command, everything that cannot be shown faithfully.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gix::bstr::{BStr, ByteSlice};
use gix::index::entry::{Flags, Mode, Stage};

use crate::GitError;

/// An opened repository that passed every refusal check.
pub(crate) struct Repo {
    pub(crate) repo: gix::Repository,
    pub(crate) index: gix::worktree::Index,
    pub(crate) root: PathBuf,
    /// Names of filter drivers configured with a command (clean, smudge or process) in any
    /// configuration file. They are removed from the in-memory configuration, and any path
    /// whose `filter` attribute names one is refused.
    drivers: Vec<Vec<u8>>,
}

/// Opens the repository whose worktree root is `workspace`, or None when `workspace/.git`
/// does not exist. Parent folders are never searched.
pub(crate) fn open(workspace: &Path) -> Result<Option<Repo>, GitError> {
    let dot_git = workspace.join(".git");
    match std::fs::symlink_metadata(&dot_git) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(GitError::io(&dot_git, "inspect", e)),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(GitError::unsupported(workspace, ".git is a symlink"));
        }
        Ok(_) => {}
    }
    // Default permissions never spawn `git` to find the installation's configuration, and
    // no hook, fsmonitor or credential helper is ever started by status or blob reads.
    let options = gix::open::Options::default().strict_config(true);
    let mut repo = gix::open_opts(workspace, options)
        .map_err(|e| GitError::repository(workspace, "open the repository", &e))?;
    let Some(workdir) = repo.workdir() else {
        return Err(GitError::unsupported(workspace, "the repository is bare"));
    };
    let same_root = match (workdir.canonicalize(), workspace.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same_root {
        return Err(GitError::unsupported(
            workspace,
            format!(
                "the repository's worktree is {}, not the workspace (core.worktree or a foreign .git)",
                workdir.display()
            ),
        ));
    }
    let root = workdir.to_path_buf();
    if repo.object_hash() != gix::hash::Kind::Sha1 {
        return Err(GitError::unsupported(
            workspace,
            "only SHA-1 repositories are supported",
        ));
    }
    check_config(&repo, workspace)?;
    let drivers = strip_filter_drivers(&mut repo, workspace)?;
    let index = repo
        .index_or_empty()
        .map_err(|e| GitError::repository(workspace, "read the index", &e))?;
    check_index(&index, workspace)?;
    check_split_index(&repo, workspace)?;
    if std::fs::symlink_metadata(root.join(".gitmodules")).is_ok() {
        return Err(GitError::unsupported(
            workspace,
            "submodules (.gitmodules exists)",
        ));
    }
    let repo = Repo {
        repo,
        index,
        root,
        drivers,
    };
    let paths: Vec<Vec<u8>> = repo
        .index
        .entries()
        .iter()
        .map(|e| e.path(&repo.index).to_vec())
        .collect();
    repo.check_filters(paths.iter().map(|p| p.as_slice()))?;
    Ok(Some(repo))
}

fn check_config(repo: &gix::Repository, workspace: &Path) -> Result<(), GitError> {
    let cfg = repo.config_snapshot();
    let refuse = |key: &str, what: &str| -> Result<(), GitError> {
        if cfg.boolean(key).unwrap_or(false) {
            return Err(GitError::unsupported(
                workspace,
                format!("{what} ({key} is true)"),
            ));
        }
        Ok(())
    };
    refuse("core.sparseCheckout", "sparse checkout")?;
    refuse("core.sparseCheckoutCone", "sparse checkout")?;
    refuse("index.sparse", "sparse index")?;
    refuse("core.splitIndex", "split index")?;
    Ok(())
}

/// Collects the names of filter drivers that have a command, then deletes every `filter`
/// section from the in-memory configuration so that no later gix call can start one.
/// Also turns off the index checksum verification (see below).
fn strip_filter_drivers(
    repo: &mut gix::Repository,
    workspace: &Path,
) -> Result<Vec<Vec<u8>>, GitError> {
    let mut names = Vec::new();
    let mut ids = Vec::new();
    {
        let cfg = repo.config_snapshot();
        let file = cfg.plumbing();
        for (section, id) in file
            .sections_and_ids_by_name("filter")
            .into_iter()
            .flatten()
        {
            ids.push(id);
            let has_command = ["clean", "smudge", "process"]
                .iter()
                .any(|k| section.value(k).is_some_and(|v| !v.trim().is_empty()));
            if let Some(name) = section.header().subsection_name() {
                if has_command
                    && !names
                        .iter()
                        .any(|n: &Vec<u8>| n.as_slice() == name.as_bytes())
                {
                    names.push(name.to_vec());
                }
            }
        }
    }
    let mut snapshot = repo.config_snapshot_mut();
    for id in ids {
        snapshot.remove_section_by_id(id);
    }
    // The index is only read here. Like git outside fsck, do not hash the whole file to
    // verify its trailing checksum: it roughly halves the cost of loading it.
    snapshot
        .set_raw_value_by("index", None, "skipHash", "true")
        .map_err(|e| GitError::repository(workspace, "apply the configuration", &e))?;
    snapshot
        .commit()
        .map_err(|e| GitError::repository(workspace, "apply the configuration", &e))?;
    Ok(names)
}

/// gix merges a split index with its shared index silently; git's split-index semantics
/// (shared index expiry, replaced entries) are refused instead, so the raw file is checked
/// for a `link` extension.
fn check_split_index(repo: &gix::Repository, workspace: &Path) -> Result<(), GitError> {
    // A split index always has its shared part beside it as `sharedindex.<id>`; without
    // one there is nothing to check, and the index is not parsed a second time.
    let git_dir = repo.git_dir();
    let entries = std::fs::read_dir(git_dir).map_err(|e| GitError::io(git_dir, "list", e))?;
    let mut shared = false;
    for entry in entries {
        let entry = entry.map_err(|e| GitError::io(git_dir, "list", e))?;
        if entry.file_name().as_bytes().starts_with(b"sharedindex.") {
            shared = true;
            break;
        }
    }
    if !shared {
        return Ok(());
    }
    let path = repo.index_path();
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(GitError::io(&path, "read", e)),
    };
    let (state, _) = gix::index::State::from_bytes(
        &data,
        std::time::SystemTime::UNIX_EPOCH.into(),
        repo.object_hash(),
        Default::default(),
    )
    .map_err(|e| GitError::repository(workspace, "read the index", &e))?;
    if state.link().is_some() {
        return Err(GitError::unsupported(
            workspace,
            "split index (the index has a link extension)",
        ));
    }
    Ok(())
}

fn check_index(index: &gix::index::File, workspace: &Path) -> Result<(), GitError> {
    if index.link().is_some() {
        return Err(GitError::unsupported(
            workspace,
            "split index (the index has a link extension)",
        ));
    }
    if index.is_sparse() {
        return Err(GitError::unsupported(workspace, "sparse index"));
    }
    for entry in index.entries() {
        let path = entry.path(index);
        if entry.stage() != Stage::Unconflicted {
            return Err(GitError::unsupported(
                workspace,
                format!(
                    "unmerged path {} (a merge is in progress)",
                    quote_lossy(path)
                ),
            ));
        }
        if path == ".gitmodules" {
            return Err(GitError::unsupported(
                workspace,
                "submodules (.gitmodules is tracked)",
            ));
        }
        if entry.mode == Mode::COMMIT {
            return Err(GitError::unsupported(
                workspace,
                format!("submodules (gitlink {})", quote_lossy(path)),
            ));
        }
        if entry.mode == Mode::DIR {
            return Err(GitError::unsupported(
                workspace,
                "sparse index (a folder entry)",
            ));
        }
        if entry.flags.contains(Flags::SKIP_WORKTREE) {
            return Err(GitError::unsupported(
                workspace,
                format!(
                    "sparse checkout (skip-worktree bit on {})",
                    quote_lossy(path)
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn quote_lossy(path: &BStr) -> String {
    format!("{:?}", path.to_str_lossy())
}

impl Repo {
    pub(crate) fn workspace_err(
        &self,
        op: &'static str,
        e: &(dyn std::error::Error + 'static),
    ) -> GitError {
        GitError::repository(&self.root, op, e)
    }

    pub(crate) fn unsupported(&self, reason: impl Into<String>) -> GitError {
        GitError::unsupported(&self.root, reason)
    }

    /// Refuses when the `filter` attribute of any of `paths` names a driver that has a
    /// command: git would run it, so its result cannot be reproduced without running it.
    pub(crate) fn check_filters<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), GitError> {
        if self.drivers.is_empty() {
            return Ok(());
        }
        let mut stack = self
            .repo
            .attributes_only(
                &self.index,
                gix::worktree::stack::state::attributes::Source::WorktreeThenIdMapping,
            )
            .map_err(|e| self.workspace_err("read attributes", &e))?;
        let mut matches = stack.selected_attribute_matches(["filter"]);
        for path in paths {
            let platform = stack
                .at_entry(path.as_bstr(), None)
                .map_err(|e| self.workspace_err("read attributes", &e))?;
            platform.matching_attributes(&mut matches);
            for m in matches.iter_selected() {
                if let gix::attrs::StateRef::Value(v) = m.assignment.state {
                    let name = v.as_bstr();
                    if self.drivers.iter().any(|d| d.as_slice() == name.as_bytes()) {
                        return Err(self.unsupported(format!(
                            "external filter: {} has filter={} and filter.{}.clean/smudge/process is configured",
                            quote_lossy(path.as_bstr()),
                            name.to_str_lossy(),
                            name.to_str_lossy()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}
