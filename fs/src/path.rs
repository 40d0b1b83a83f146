//! Relative workspace paths as exact bytes, and the names that are always hidden.

use crate::error::FsError;

/// Longest relative path accepted, in bytes (the kernel's `PATH_MAX` less the terminating NUL).
pub const PATH_BYTES_MAX: usize = 4095;
/// Longest single component accepted, in bytes (the kernel's `NAME_MAX`).
pub const NAME_BYTES_MAX: usize = 255;
/// Names hidden at every depth. Compared ASCII-case-insensitively, because a
/// case-folding filesystem would otherwise let `.GIT` name the same directory.
pub const ALWAYS_HIDDEN_NAMES: [&[u8]; 2] = [b".git", b".logbook"];

/// A relative path inside a workspace: exact bytes, `/`-separated, never converted.
///
/// Every component is non-empty, not `.` or `..`, holds no NUL byte and is at most
/// [`NAME_BYTES_MAX`] bytes; the path does not start or end with `/`. The empty path
/// ([`RelPath::root`]) names the workspace root and can only be made with `root()`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelPath(Vec<u8>);

impl RelPath {
    /// Checks `bytes` against the path rules; a refusal is `InvalidArgument`.
    pub fn parse(bytes: &[u8]) -> Result<RelPath, FsError> {
        let refuse = |reason| {
            Err(FsError::InvalidPath {
                path: bytes.to_vec(),
                reason,
            })
        };
        if bytes.is_empty() {
            return refuse("the path is empty (use the workspace root instead)");
        }
        if bytes.len() > PATH_BYTES_MAX {
            return refuse("the path is longer than 4095 bytes");
        }
        if bytes.contains(&0) {
            return refuse("the path contains a NUL byte");
        }
        if bytes[0] == b'/' {
            return refuse("the path is absolute");
        }
        for component in bytes.split(|&b| b == b'/') {
            match component {
                b"" => return refuse("the path has an empty component (`//` or a trailing `/`)"),
                b"." => return refuse("the path has a `.` component"),
                b".." => return refuse("the path has a `..` component"),
                c if c.len() > NAME_BYTES_MAX => {
                    return refuse("a component is longer than 255 bytes")
                }
                _ => {}
            }
        }
        Ok(RelPath(bytes.to_vec()))
    }

    /// The workspace root itself.
    pub fn root() -> RelPath {
        RelPath(Vec::new())
    }

    /// The exact bytes (empty for the root).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// True for [`RelPath::root`].
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The components, in order (none for the root).
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/').filter(|c| !c.is_empty())
    }

    /// This path with `name` appended. `name` must be a valid single component.
    pub(crate) fn join_name(&self, name: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() + 1 + name.len());
        out.extend_from_slice(&self.0);
        if !out.is_empty() {
            out.push(b'/');
        }
        out.extend_from_slice(name);
        out
    }
}

/// True for a name hidden at every depth.
pub(crate) fn is_always_hidden_name(name: &[u8]) -> bool {
    ALWAYS_HIDDEN_NAMES
        .iter()
        .any(|h| h.eq_ignore_ascii_case(name))
}

/// The caller's hidden paths plus the names hidden at every depth.
///
/// Public so that the other views of a workspace (git status, diffs and patches in
/// `logbook-api`) hide exactly what [`crate::Workspace`] hides, decided by this one rule.
#[derive(Clone, Debug, Default)]
pub struct HiddenSet {
    paths: Vec<RelPath>,
}

impl HiddenSet {
    /// `hidden` are relative paths hidden with everything below them, on top of
    /// [`ALWAYS_HIDDEN_NAMES`]; a path that breaks the [`RelPath`] rules is refused.
    pub fn new(hidden: &[Vec<u8>]) -> Result<HiddenSet, FsError> {
        let paths = hidden
            .iter()
            .map(|h| RelPath::parse(h))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HiddenSet { paths })
    }

    /// True when `path` is hidden or lies inside a hidden path.
    pub fn hides(&self, path: &RelPath) -> bool {
        if path.components().any(is_always_hidden_name) {
            return true;
        }
        let p = path.as_bytes();
        self.paths.iter().any(|h| {
            let h = h.as_bytes();
            p.starts_with(h) && (p.len() == h.len() || p[h.len()] == b'/')
        })
    }

    /// [`HiddenSet::hides`] for relative path bytes as git writes them: a trailing `/` (an
    /// untracked folder) is ignored. Bytes that are not a [`RelPath`] are judged by their
    /// components all the same, so a malformed name can never slip past the rule.
    pub fn hides_bytes(&self, path: &[u8]) -> bool {
        let trimmed = path.strip_suffix(b"/").unwrap_or(path);
        self.hides(&RelPath(trimmed.to_vec()))
    }

    /// `Err(FsError::Hidden)` for a hidden path: the refusal a workspace read gives.
    pub fn check(&self, path: &[u8]) -> Result<(), FsError> {
        if self.hides_bytes(path) {
            return Err(FsError::Hidden {
                path: path.to_vec(),
            });
        }
        Ok(())
    }

    /// True when the child `name` of directory `dir` is hidden (`dir` itself is not).
    pub(crate) fn hides_child(&self, dir: &RelPath, name: &[u8]) -> bool {
        if is_always_hidden_name(name) {
            return true;
        }
        let d = dir.as_bytes();
        self.paths.iter().any(|h| {
            let h = h.as_bytes();
            if d.is_empty() {
                h == name
            } else {
                h.len() == d.len() + 1 + name.len()
                    && h.starts_with(d)
                    && h[d.len()] == b'/'
                    && &h[d.len() + 1..] == name
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_odd_bytes() {
        for ok in [
            &b"a"[..],
            b"a/b/c",
            b"...",
            b".hidden",
            b"\xff\xfe/x",
            b"a b/ c",
        ] {
            assert_eq!(RelPath::parse(ok).expect("valid").as_bytes(), ok);
        }
        let long = vec![b'n'; NAME_BYTES_MAX];
        assert!(RelPath::parse(&long).is_ok());
    }

    #[test]
    fn refuses_forbidden_forms() {
        let long_name = vec![b'n'; NAME_BYTES_MAX + 1];
        let long_path = [b"a/".repeat(2048)].concat();
        for bad in [
            &b""[..],
            b"/",
            b"/etc/passwd",
            b"a//b",
            b"a/",
            b"./a",
            b"a/.",
            b"..",
            b"a/../b",
            b"a\0b",
            &long_name,
            &long_path,
        ] {
            let err = RelPath::parse(bad).expect_err("must be refused");
            assert_eq!(
                err.kind(),
                crate::ErrorKind::InvalidArgument,
                "{:?}",
                bad.escape_ascii()
            );
        }
    }

    /// The fuzz target's property over a fixed pseudo-random stream (seed printed).
    #[test]
    fn random_inputs_accepted_only_when_rule_abiding() {
        let seed: u64 = 0x5eed_2026;
        eprintln!("seed {seed:#x}");
        let mut x = seed;
        let alphabet = [b'a', b'/', b'.', 0, 0xff, b'b'];
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 9) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| alphabet[((x >> (i * 3 + 8)) % 6) as usize])
                .collect();
            let ok = !bytes.is_empty()
                && bytes[0] != b'/'
                && !bytes.contains(&0)
                && bytes
                    .split(|&b| b == b'/')
                    .all(|c| !c.is_empty() && c != b"." && c != b"..");
            assert_eq!(
                RelPath::parse(&bytes).is_ok(),
                ok,
                "{:?}",
                bytes.escape_ascii().to_string()
            );
        }
    }

    #[test]
    fn hidden_matching() {
        let h = HiddenSet::new(&[b"priv".to_vec(), b"a/state".to_vec()]).expect("valid");
        let p = |b: &[u8]| RelPath::parse(b).expect("valid");
        assert!(h.hides(&p(b".git")));
        assert!(h.hides(&p(b"x/.GIT/config")));
        assert!(h.hides(&p(b"deep/.logbook")));
        assert!(h.hides(&p(b"priv")));
        assert!(h.hides(&p(b"priv/inner")));
        assert!(!h.hides(&p(b"private")));
        assert!(h.hides(&p(b"a/state/x")));
        assert!(!h.hides(&p(b"a/statex")));
        assert!(!h.hides(&p(b"b/priv")));
        assert!(h.hides_child(&RelPath::root(), b"priv"));
        assert!(h.hides_child(&p(b"a"), b"state"));
        assert!(!h.hides_child(&p(b"b"), b"state"));
        assert!(h.hides_child(&p(b"b"), b".logbook"));
        assert!(!h.hides(&RelPath::root()));
        assert!(HiddenSet::new(&[b"../x".to_vec()]).is_err());
        // The byte form used for git paths: folders with a trailing `/`.
        assert!(h.hides_bytes(b"priv/"));
        assert!(h.hides_bytes(b"x/.logbook/"));
        assert!(h.hides_bytes(b".logbook/sessions/s/log/x.active"));
        assert!(!h.hides_bytes(b"privat/"));
        assert!(h.check(b"priv/a").is_err());
        assert!(h.check(b"src/a").is_ok());
    }
}
