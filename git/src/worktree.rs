//! Reads one workspace path without following any symlink, neither at the leaf nor in a
//! parent folder: each folder is opened relative to the previous one with `O_NOFOLLOW`.
//! A path that passes through a symlink is reported as missing, as git does.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::GitError;

/// Largest worktree file read into memory, in bytes. Larger files fail with Unsupported.
pub(crate) const WORKTREE_FILE_BYTES_MAX: u64 = 1 << 30;

/// What is found at a path of the worktree.
#[derive(Debug)]
pub(crate) enum Node {
    Missing,
    File { bytes: Vec<u8>, executable: bool },
    Symlink { target: Vec<u8> },
    Directory,
    Other,
}

/// Checks that `rel` is a plain relative path: no empty, `.` or `..` components, no NUL,
/// not absolute, and no `.git` component.
pub(crate) fn check_rel(rel: &[u8]) -> Result<(), GitError> {
    let bad = |why: &str| GitError::InvalidArgument {
        reason: format!("path {:?} {why}", String::from_utf8_lossy(rel)),
    };
    if rel.is_empty() {
        return Err(bad("is empty"));
    }
    if rel.contains(&0) {
        return Err(bad("contains a NUL byte"));
    }
    for comp in rel.split(|b| *b == b'/') {
        match comp {
            b"" => return Err(bad("has an empty component or is absolute")),
            b"." | b".." => return Err(bad("has a '.' or '..' component")),
            c if c.eq_ignore_ascii_case(b".git") => return Err(bad("is inside .git")),
            _ => {}
        }
    }
    Ok(())
}

fn open_dir(at: &OwnedFd, name: &[u8]) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        at,
        OsStr::from_bytes(name),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Reads `rel` (already checked with [`check_rel`]) below `root`.
pub(crate) fn read_node(root: &Path, rel: &[u8]) -> Result<Node, GitError> {
    let full = root.join(OsStr::from_bytes(rel));
    let io = |op: &'static str, e: Errno| GitError::io(&full, op, std::io::Error::from(e));
    let mut dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| GitError::io(root, "open the workspace", e.into()))?;
    let mut comps = rel.split(|b| *b == b'/').peekable();
    let mut leaf: &[u8] = b"";
    while let Some(comp) = comps.next() {
        if comps.peek().is_none() {
            leaf = comp;
            break;
        }
        dir = match open_dir(&dir, comp) {
            Ok(fd) => fd,
            // A missing folder, a file, or a symlink on the way: the path does not exist.
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(Node::Missing),
            Err(e) => return Err(io("open a parent folder of", e)),
        };
    }
    let st = match rustix::fs::statat(&dir, OsStr::from_bytes(leaf), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT | Errno::NOTDIR) => return Ok(Node::Missing),
        Err(e) => return Err(io("stat", e)),
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(&dir, OsStr::from_bytes(leaf), Vec::new())
                .map_err(|e| io("read the symlink", e))?;
            Ok(Node::Symlink {
                target: target.into_bytes(),
            })
        }
        FileType::Directory => Ok(Node::Directory),
        FileType::RegularFile => {
            let fd = rustix::fs::openat(
                &dir,
                OsStr::from_bytes(leaf),
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
                Mode::empty(),
            );
            let fd = match fd {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(Node::Missing),
                // Swapped for a symlink between stat and open.
                Err(Errno::LOOP) => return Ok(Node::Other),
                Err(e) => return Err(io("open", e)),
            };
            let st = rustix::fs::fstat(&fd).map_err(|e| io("stat", e))?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                return Ok(Node::Other);
            }
            let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
            if size > WORKTREE_FILE_BYTES_MAX {
                return Err(GitError::unsupported(
                    root,
                    format!(
                        "{} is {size} bytes, larger than the {WORKTREE_FILE_BYTES_MAX}-byte limit",
                        full.display()
                    ),
                ));
            }
            let mut file = std::fs::File::from(fd);
            let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            file.read_to_end(&mut bytes)
                .map_err(|e| GitError::io(&full, "read", e))?;
            Ok(Node::File {
                bytes,
                executable: st.st_mode & 0o111 != 0,
            })
        }
        _ => Ok(Node::Other),
    }
}
