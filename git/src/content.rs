//! The two sides of a comparison: blobs from the object database, working files read
//! without following symlinks and normalized like `git add` would (eol, ident), and the
//! binary decision.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use gix::bstr::ByteSlice;
use gix::index::entry::Mode;
use gix::ObjectId;

use crate::repo::{quote_lossy, Repo};
use crate::worktree::{read_node, Node};
use crate::GitError;

/// Bytes git inspects for a NUL when deciding whether content is binary.
pub(crate) const BINARY_SNIFF_BYTES: usize = 8000;
/// Content larger than this many bytes is treated as binary (git's core.bigFileThreshold default).
pub(crate) const BIG_FILE_BYTES: usize = 512 << 20;

/// One side of a comparison: mode, blob id and (normalized) content.
#[derive(Clone, Debug)]
pub(crate) struct Side {
    pub(crate) mode: Mode,
    pub(crate) id: ObjectId,
    pub(crate) bytes: Vec<u8>,
}

/// The worktree side of a path.
#[derive(Debug)]
pub(crate) enum Worktree {
    Missing,
    Present(Side),
    /// A folder, a nested repository, a FIFO...: not something a blob can describe.
    NotAFile(&'static str),
}

pub(crate) fn mode_text(mode: Mode) -> String {
    format!("{:06o}", mode.bits())
}

pub(crate) fn blob_id(bytes: &[u8]) -> Result<ObjectId, GitError> {
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, bytes).map_err(|e| {
        GitError::Repository {
            workspace: Default::default(),
            op: "hash a blob",
            kind: crate::ErrorKind::Corrupt,
            message: e.to_string(),
        }
    })
}

/// Reads the working side of many paths with one filter pipeline.
pub(crate) struct Reader<'r> {
    repo: &'r Repo,
    pipeline: gix::filter::Pipeline<'r>,
    index: gix::worktree::IndexPersistedOrInMemory,
    file_mode: bool,
}

impl<'r> Reader<'r> {
    pub(crate) fn new(repo: &'r Repo) -> Result<Reader<'r>, GitError> {
        let (pipeline, index) = repo
            .repo
            .filter_pipeline(None)
            .map_err(|e| repo.workspace_err("prepare the filter pipeline", &e))?;
        let file_mode = repo
            .repo
            .config_snapshot()
            .boolean("core.fileMode")
            .unwrap_or(true);
        Ok(Reader {
            repo,
            pipeline,
            index,
            file_mode,
        })
    }

    /// The working file at `rel`; `index_mode` is the index entry's mode, used when
    /// core.fileMode is false (then the executable bit on disk means nothing).
    pub(crate) fn read(
        &mut self,
        rel: &[u8],
        index_mode: Option<Mode>,
    ) -> Result<Worktree, GitError> {
        let node = read_node(&self.repo.root, rel)?;
        let (mode, bytes) = match node {
            Node::Missing => return Ok(Worktree::Missing),
            // git too sees a file replaced by a folder as deleted (the folder's files are untracked).
            Node::Directory => return Ok(Worktree::Missing),
            Node::Other => return Ok(Worktree::NotAFile("neither a file, a symlink nor a folder")),
            Node::Symlink { target } => (Mode::SYMLINK, target),
            Node::File { bytes, executable } => {
                let mode = match (self.file_mode, index_mode) {
                    (false, Some(m)) if m == Mode::FILE || m == Mode::FILE_EXECUTABLE => m,
                    (false, _) => Mode::FILE,
                    (true, _) if executable => Mode::FILE_EXECUTABLE,
                    (true, _) => Mode::FILE,
                };
                (mode, self.clean(rel, bytes)?)
            }
        };
        let id = blob_id(&bytes)?;
        Ok(Worktree::Present(Side { mode, id, bytes }))
    }

    /// What `git add` would store: eol conversion, ident, working-tree-encoding. Filter
    /// drivers were removed from the configuration and refused before.
    fn clean(&mut self, rel: &[u8], bytes: Vec<u8>) -> Result<Vec<u8>, GitError> {
        let path = Path::new(OsStr::from_bytes(rel));
        let conversion_error = |e: &dyn std::fmt::Display| {
            self.repo.unsupported(format!(
                "{} cannot be converted like git would store it: {e}",
                quote_lossy(rel.as_bstr())
            ))
        };
        let mut outcome = match self.pipeline.convert_to_git(&bytes[..], path, &self.index) {
            Ok(o) => o,
            Err(e) => return Err(conversion_error(&e)),
        };
        let mut out = Vec::with_capacity(bytes.len());
        if let Err(e) = outcome.read_to_end(&mut out) {
            return Err(conversion_error(&e));
        }
        Ok(out)
    }
}

impl Repo {
    pub(crate) fn blob(&self, id: &gix::oid) -> Result<Vec<u8>, GitError> {
        let blob = self
            .repo
            .find_blob(id)
            .map_err(|e| self.workspace_err("read a blob", &e))?;
        Ok(blob.detach().data)
    }

    pub(crate) fn side(&self, mode: Mode, id: &gix::oid) -> Result<Side, GitError> {
        Ok(Side {
            mode,
            id: id.to_owned(),
            bytes: self.blob(id)?,
        })
    }

    /// The HEAD tree as an in-memory index (empty when HEAD is unborn).
    pub(crate) fn head_index(&self) -> Result<gix::index::File, GitError> {
        let tree = self
            .repo
            .head_tree_id_or_empty()
            .map_err(|e| self.workspace_err("read HEAD", &e))?;
        self.repo
            .index_from_tree(&tree)
            .map_err(|e| self.workspace_err("read the HEAD tree", &e))
    }
}

/// Decides text or binary per path like git: the `diff` attribute first (`binary` is a
/// macro for `-diff`), then a NUL in the first 8000 bytes of either side.
pub(crate) struct BinaryCheck<'r> {
    repo: &'r Repo,
    stack: gix::AttributeStack<'r>,
    matches: gix::attrs::search::Outcome,
}

impl<'r> BinaryCheck<'r> {
    pub(crate) fn new(repo: &'r Repo) -> Result<BinaryCheck<'r>, GitError> {
        let stack = repo
            .repo
            .attributes_only(
                &repo.index,
                gix::worktree::stack::state::attributes::Source::WorktreeThenIdMapping,
            )
            .map_err(|e| repo.workspace_err("read attributes", &e))?;
        let matches = stack.selected_attribute_matches(["diff"]);
        Ok(BinaryCheck {
            repo,
            stack,
            matches,
        })
    }

    pub(crate) fn is_binary(&mut self, rel: &[u8], sides: &[&[u8]]) -> Result<bool, GitError> {
        let platform = self
            .stack
            .at_entry(rel.as_bstr(), None)
            .map_err(|e| self.repo.workspace_err("read attributes", &e))?;
        platform.matching_attributes(&mut self.matches);
        let mut forced = None;
        if let Some(m) = self.matches.iter_selected().next() {
            forced = match m.assignment.state {
                gix::attrs::StateRef::Unset => Some(true),
                gix::attrs::StateRef::Set => Some(false),
                gix::attrs::StateRef::Value(driver) => {
                    let key = format!("diff.{}.binary", driver.as_bstr().to_str_lossy());
                    self.repo
                        .repo
                        .config_snapshot()
                        .boolean(key.as_str())
                        .filter(|b| *b)
                }
                gix::attrs::StateRef::Unspecified => None,
            };
        }
        Ok(forced.unwrap_or_else(|| sides.iter().any(|s| looks_binary(s))))
    }
}

pub(crate) fn looks_binary(bytes: &[u8]) -> bool {
    bytes.len() > BIG_FILE_BYTES || bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}
