//! Where transcripts are: the default places of the agents import knows, and folder walks
//! that never follow a symbolic link.

use std::ffi::OsString;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// One default place to look in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// What keeps its transcripts there.
    pub agent: &'static str,
    pub dir: PathBuf,
}

/// The default places, from the environment (`env` reads one variable):
/// - Claude Code: `$CLAUDE_CONFIG_DIR/projects`, else `$HOME/.claude/projects`;
/// - Codex: `$CODEX_HOME/sessions`, else `$HOME/.codex/sessions`.
///
/// A place whose variables are all unset is left out.
pub fn default_places(env: impl Fn(&str) -> Option<OsString>) -> Vec<Place> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = set("HOME");
    let mut places = Vec::new();
    if let Some(dir) = set("CLAUDE_CONFIG_DIR").or_else(|| home.as_ref().map(|h| h.join(".claude")))
    {
        places.push(Place {
            agent: "Claude Code",
            dir: dir.join("projects"),
        });
    }
    if let Some(dir) = set("CODEX_HOME").or_else(|| home.as_ref().map(|h| h.join(".codex"))) {
        places.push(Place {
            agent: "Codex",
            dir: dir.join("sessions"),
        });
    }
    places
}

/// What a walk found.
#[derive(Debug)]
pub enum Found {
    /// A regular file.
    File(PathBuf),
    /// Something not read: a symbolic link (never followed), a FIFO or other special file,
    /// with what it is.
    Passed(PathBuf, &'static str),
    /// A folder that could not be listed.
    Unlisted(PathBuf, std::io::Error),
}

/// Every entry under `dir`, depth first, each folder's entries by name. Symbolic links are
/// reported and never followed, so a walk stays inside `dir` and ends.
pub fn walk(dir: &Path) -> Vec<Found> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(rd) => rd.collect::<Result<Vec<_>, _>>(),
            Err(e) => Err(e),
        };
        let mut entries = match entries {
            Ok(entries) => entries,
            Err(e) => {
                found.push(Found::Unlisted(dir, e));
                continue;
            }
        };
        entries.sort_by_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for entry in entries {
            let path = entry.path();
            // `DirEntry::file_type` does not follow a symbolic link.
            match entry.file_type() {
                Ok(t) if t.is_dir() => subdirs.push(path),
                Ok(t) if t.is_file() => found.push(Found::File(path)),
                Ok(t) if t.is_symlink() => {
                    found.push(Found::Passed(path, "a symbolic link (not followed)"))
                }
                Ok(_) => found.push(Found::Passed(path, "not a regular file")),
                Err(e) => found.push(Found::Unlisted(path, e)),
            }
        }
        // Popped last-first: push in reverse so folders are walked in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    found
}

/// A file opened without following a symbolic link at its last component (`O_NOFOLLOW`:
/// a link put in its place after the walk fails to open) nor blocking on a FIFO.
#[derive(Debug)]
pub struct Opened(std::fs::File);

impl Opened {
    pub fn open(path: &Path) -> std::io::Result<Opened> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(
                (rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::NONBLOCK
                    | rustix::fs::OFlags::CLOEXEC)
                    .bits() as i32,
            )
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(Opened(file))
    }

    /// The first `n` bytes (fewer when the file is shorter).
    pub fn head(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        let mut head = Vec::with_capacity(n);
        (&mut self.0).take(n as u64).read_to_end(&mut head)?;
        Ok(head)
    }

    /// The rest of the file after what was read, appended to `buf`.
    pub fn rest(&mut self, buf: &mut Vec<u8>) -> std::io::Result<()> {
        self.0.read_to_end(buf).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_places_follow_the_agents_variables() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let dirs = |p: Vec<Place>| p.into_iter().map(|p| p.dir).collect::<Vec<_>>();
        assert_eq!(
            dirs(default_places(env(&[("HOME", "/h")]))),
            [
                PathBuf::from("/h/.claude/projects"),
                PathBuf::from("/h/.codex/sessions")
            ]
        );
        assert_eq!(
            dirs(default_places(env(&[
                ("HOME", "/h"),
                ("CLAUDE_CONFIG_DIR", "/c"),
                ("CODEX_HOME", "/x")
            ]))),
            [PathBuf::from("/c/projects"), PathBuf::from("/x/sessions")]
        );
        assert_eq!(
            dirs(default_places(env(&[("CODEX_HOME", "/x"), ("HOME", "")]))),
            [PathBuf::from("/x/sessions")]
        );
    }
}
