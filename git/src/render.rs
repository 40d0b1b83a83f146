//! Git's patch text: quoted names, the header lines and unified hunks byte-for-byte as
//! `git diff` prints them (hunk ranges, default function-name context, and the
//! "No newline at end of file" marker).

use gix::diff::blob::unified_diff::{ConsumeHunk, ContextSize, DiffLineKind, HunkHeader};
use gix::diff::blob::{Algorithm, InternedInput, UnifiedDiff};
use gix::ObjectId;

use crate::content::{mode_text, Side};

/// Lines of context around each change.
pub(crate) const CONTEXT_LINES: u32 = 3;
/// Bytes of a function-name line shown after a hunk header (xdiff's buffer size).
const FUNCNAME_BYTES_MAX: usize = 80;
/// Hex digits of an abbreviated object id on the `index` line of a per-file diff.
pub(crate) const ABBREV_HEX: usize = 7;

/// `prefix` + `path`, C-quoted like git when the path holds a control byte, a quote, a
/// backslash or a byte >= 0x80.
pub(crate) fn quoted(prefix: &str, path: &[u8]) -> Vec<u8> {
    let needs = path
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x7f);
    let mut out = Vec::with_capacity(prefix.len() + path.len() + 2);
    if !needs {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(path);
        return out;
    }
    out.push(b'"');
    out.extend_from_slice(prefix.as_bytes());
    for &b in path {
        match b {
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0b => out.extend_from_slice(b"\\v"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b if !(0x20..0x7f).contains(&b) => {
                out.extend_from_slice(format!("\\{b:03o}").as_bytes());
            }
            b => out.push(b),
        }
    }
    out.push(b'"');
    out
}

fn hex(id: Option<&ObjectId>, full: bool) -> String {
    let text = match id {
        Some(id) => id.to_hex().to_string(),
        None => ObjectId::null(gix::hash::Kind::Sha1).to_hex().to_string(),
    };
    if full {
        text
    } else {
        text[..ABBREV_HEX].to_string()
    }
}

/// Writes `diff --git`, the mode lines and the `index` line. Returns nothing; the caller
/// adds `---`/`+++` and the body when there is one.
pub(crate) fn header(
    out: &mut Vec<u8>,
    path: &[u8],
    old: Option<&Side>,
    new: Option<&Side>,
    full_index: bool,
) {
    out.extend_from_slice(b"diff --git ");
    out.extend_from_slice(&quoted("a/", path));
    out.push(b' ');
    out.extend_from_slice(&quoted("b/", path));
    out.push(b'\n');
    match (old, new) {
        (None, Some(n)) => {
            out.extend_from_slice(format!("new file mode {}\n", mode_text(n.mode)).as_bytes())
        }
        (Some(o), None) => {
            out.extend_from_slice(format!("deleted file mode {}\n", mode_text(o.mode)).as_bytes())
        }
        (Some(o), Some(n)) if o.mode != n.mode => out.extend_from_slice(
            format!(
                "old mode {}\nnew mode {}\n",
                mode_text(o.mode),
                mode_text(n.mode)
            )
            .as_bytes(),
        ),
        _ => {}
    }
    let (old_id, new_id) = (old.map(|s| &s.id), new.map(|s| &s.id));
    if old_id != new_id {
        out.extend_from_slice(
            format!(
                "index {}..{}",
                hex(old_id, full_index),
                hex(new_id, full_index)
            )
            .as_bytes(),
        );
        if let (Some(o), Some(n)) = (old, new) {
            if o.mode == n.mode {
                out.extend_from_slice(format!(" {}", mode_text(o.mode)).as_bytes());
            }
        }
        out.push(b'\n');
    }
}

/// Writes the `---`/`+++` lines (git adds a tab after a name that holds a space).
pub(crate) fn file_lines(out: &mut Vec<u8>, path: &[u8], old: bool, new: bool) {
    let tab: &[u8] = if path.contains(&b' ') { b"\t" } else { b"" };
    out.extend_from_slice(b"--- ");
    if old {
        out.extend_from_slice(&quoted("a/", path));
        out.extend_from_slice(tab);
    } else {
        out.extend_from_slice(b"/dev/null");
    }
    out.extend_from_slice(b"\n+++ ");
    if new {
        out.extend_from_slice(&quoted("b/", path));
        out.extend_from_slice(tab);
    } else {
        out.extend_from_slice(b"/dev/null");
    }
    out.push(b'\n');
}

/// The unified hunks turning `old` into `new`, empty when they are equal.
pub(crate) fn hunks(old: &[u8], new: &[u8], algorithm: Algorithm) -> Vec<u8> {
    let input = InternedInput::new(old, new);
    let mut diff = gix::diff::blob::Diff::compute(algorithm, &input);
    diff.postprocess_lines(&input);
    let sink = GitHunks {
        out: Vec::new(),
        old_lines: old.split_inclusive(|b| *b == b'\n').collect(),
    };
    UnifiedDiff::new(&diff, &input, sink, ContextSize::symmetrical(CONTEXT_LINES))
        .consume()
        .expect("writing hunks into a Vec cannot fail")
}

struct GitHunks<'a> {
    out: Vec<u8>,
    old_lines: Vec<&'a [u8]>,
}

fn range(start: u32, len: u32) -> String {
    let s = if len == 0 {
        start.saturating_sub(1)
    } else {
        start
    };
    if len == 1 {
        format!("{s}")
    } else {
        format!("{s},{len}")
    }
}

impl GitHunks<'_> {
    /// xdiff's default: the nearest line above the hunk that starts with a letter, `_` or `$`.
    fn funcname(&self, hunk_start: u32) -> Option<&[u8]> {
        let first = usize::try_from(hunk_start.saturating_sub(1)).ok()?;
        let line = self.old_lines[..first.min(self.old_lines.len())]
            .iter()
            .rev()
            .find(|l| {
                l.first()
                    .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_' || *c == b'$')
            })?;
        let mut text = &line[..line.len().min(FUNCNAME_BYTES_MAX)];
        while let Some((last, rest)) = text.split_last() {
            if matches!(last, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
                text = rest;
            } else {
                break;
            }
        }
        (!text.is_empty()).then_some(text)
    }
}

impl ConsumeHunk for GitHunks<'_> {
    type Out = Vec<u8>;

    fn consume_hunk(
        &mut self,
        h: HunkHeader,
        lines: &[(DiffLineKind, &[u8])],
    ) -> std::io::Result<()> {
        let head = format!(
            "@@ -{} +{} @@",
            range(h.before_hunk_start, h.before_hunk_len),
            range(h.after_hunk_start, h.after_hunk_len)
        );
        let mut line_out = head.into_bytes();
        if let Some(func) = self.funcname(h.before_hunk_start) {
            line_out.push(b' ');
            line_out.extend_from_slice(func);
        }
        line_out.push(b'\n');
        self.out.extend_from_slice(&line_out);
        for (kind, line) in lines {
            self.out.push(match kind {
                DiffLineKind::Context => b' ',
                DiffLineKind::Add => b'+',
                DiffLineKind::Remove => b'-',
            });
            self.out.extend_from_slice(line);
            if !line.ends_with(b"\n") {
                self.out
                    .extend_from_slice(b"\n\\ No newline at end of file\n");
            }
        }
        Ok(())
    }

    fn finish(self) -> Self::Out {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_matches_git() {
        assert_eq!(quoted("a/", b"plain name.txt"), b"a/plain name.txt");
        assert_eq!(quoted("a/", b"caf\xc3\xa9"), b"\"a/caf\\303\\251\"");
        assert_eq!(quoted("b/", b"x\"y\\z\t"), b"\"b/x\\\"y\\\\z\\t\"");
        assert_eq!(quoted("a/", b"\xff\x01"), b"\"a/\\377\\001\"");
    }

    #[test]
    fn hunk_ranges_and_missing_newline() {
        let h = hunks(b"a\nb\nc", b"a\nB\nc", Algorithm::Myers);
        assert_eq!(
            String::from_utf8(h).unwrap(),
            "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\\ No newline at end of file\n"
        );
        let h = hunks(b"", b"x\n", Algorithm::Myers);
        assert_eq!(String::from_utf8(h).unwrap(), "@@ -0,0 +1 @@\n+x\n");
        assert!(hunks(b"same\n", b"same\n", Algorithm::Myers).is_empty());
    }

    #[test]
    fn funcname_is_the_nearest_identifier_line_above() {
        let old = b"int main() {\n  a;\n  b;\n  c;\n  d;\n  e;\n}\n";
        let new = b"int main() {\n  a;\n  b;\n  c;\n  D;\n  e;\n}\n";
        let h = String::from_utf8(hunks(old, new, Algorithm::Myers)).unwrap();
        assert!(h.starts_with("@@ -2,6 +2,6 @@ int main() {\n"), "{h}");
    }
}
