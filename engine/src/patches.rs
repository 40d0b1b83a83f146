//! Stored workspace patches (`snapshotPatch` / `readPatch`).
//!
//! A patch is captured once per (Session, operation): [`Root::store_patch`] writes the bytes
//! to a content-addressed file of the Root and then a receipt record (no event) to the
//! Session's log. The parameters of a snapshot are only its Session and operation, so a repeat
//! returns the first capture even when the workspace (and so the bytes offered) changed since.
//!
//! Files: `patches/<first 2 hex>/<remaining 62 hex>` of the SHA-256 of the patch bytes, each a
//! 16-byte header ([`PATCH_MAGIC`], [`PATCH_FORMAT_VERSION`] u32 LE, 4 reserved zero bytes)
//! followed by the bytes. A file is written to `tmp/`, fsynced, renamed into place and its
//! directory fsynced (a newly made `patches/` or fan-out folder fsynced into its parent
//! before the rename) before the receipt is appended, so a receipt never names a missing or
//! partial file; a crash in between leaves at worst an unreferenced file. Patch files are never
//! removed. The patch id is `patch-<64 hex>`: a content address, so every Session of the Root
//! that captured the same bytes shares one file.

use crate::error::EngineError;
use crate::records::{self, Outcome};
use crate::root::Root;
use crate::session::Mutation;
use crate::state::State;
use crate::validate::{sha256_digest, validate_id};
use serde::{Deserialize, Serialize};
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Magic bytes at the start of every stored patch file.
pub const PATCH_MAGIC: [u8; 8] = *b"LBPATCH\0";
/// Format version of stored patch files.
pub const PATCH_FORMAT_VERSION: u32 = 1;
pub(crate) const PATCH_HEADER_BYTES: u64 = 16;
/// Largest patch `store_patch` accepts, in bytes.
pub const PATCH_BYTES_MAX: u64 = 1 << 30;
/// Default `readPatch` chunk, in bytes.
pub const READ_PATCH_BYTES_DEFAULT: u64 = 64 << 10;
/// Largest `readPatch` chunk, in bytes.
pub const READ_PATCH_BYTES_MAX: u64 = 1 << 20;
const PATCH_ID_PREFIX: &str = "patch-";
const PATCHES_DIR: &str = "patches";

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What `snapshotPatch` returns: the stored patch's id, length and digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchInfo {
    pub patch_id: String,
    pub bytes: u64,
    pub digest: String,
}

/// `readPatch {sessionId, patchId, after, limit}`: `after` is the exclusive byte offset already
/// read (null = 0), `limit` a byte count (default [`READ_PATCH_BYTES_DEFAULT`], at most
/// [`READ_PATCH_BYTES_MAX`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadPatchParams {
    pub session_id: String,
    pub patch_id: String,
    #[serde(default)]
    pub after: Option<u64>,
    #[serde(default)]
    pub limit: Option<u64>,
}

fn info_of(o: Outcome, operation: &str) -> Result<PatchInfo, EngineError> {
    match o {
        Outcome::Patch {
            patch_id,
            bytes,
            digest,
        } => Ok(PatchInfo {
            patch_id,
            bytes,
            digest,
        }),
        _ => Err(EngineError::conflict(format!(
            "operation {operation:?} was already used for a different kind of mutation"
        ))),
    }
}

fn snapshot_params() -> [u8; 32] {
    records::params_digest("snapshotPatch", &())
}

/// Where the patch whose SHA-256 is `hex` is stored in the Root at `root`.
pub(crate) fn patch_file_path(root: &std::path::Path, hex: &str) -> PathBuf {
    root.join(PATCHES_DIR).join(&hex[..2]).join(&hex[2..])
}

/// The 16 bytes every patch file starts with.
pub(crate) fn patch_file_header() -> Vec<u8> {
    let mut h = Vec::with_capacity(PATCH_HEADER_BYTES as usize);
    h.extend_from_slice(&PATCH_MAGIC);
    h.extend_from_slice(&PATCH_FORMAT_VERSION.to_le_bytes());
    h.extend_from_slice(&[0u8; 4]);
    h
}

impl Root {
    fn patch_path(&self, hex: &str) -> PathBuf {
        patch_file_path(&self.shared.dir, hex)
    }

    /// The patch an earlier `store_patch` with this operation captured, or None.
    pub fn patch_receipt(
        &self,
        session_id: &str,
        operation: &str,
    ) -> Result<Option<PatchInfo>, EngineError> {
        validate_id("operation", operation)?;
        let s = self.session(session_id)?;
        if s.is_fork_op(operation) {
            return Err(EngineError::conflict(format!(
                "operation {operation:?} already forked Session {session_id}; use a new operation"
            )));
        }
        match s.receipt(operation)? {
            None => Ok(None),
            Some(r) if r.params == snapshot_params() => info_of(r.outcome, operation).map(Some),
            Some(_) => Err(EngineError::conflict(format!(
                "operation {operation:?} was already used in Session {session_id} for another mutation"
            ))),
        }
    }

    /// Stores `bytes` as the patch of (`session_id`, `operation`) unless that operation already
    /// stored one: then the first capture is returned and `bytes` is ignored.
    pub fn store_patch(
        &self,
        session_id: &str,
        operation: &str,
        bytes: Vec<u8>,
    ) -> Result<PatchInfo, EngineError> {
        self.shared.writable()?;
        if let Some(info) = self.patch_receipt(session_id, operation)? {
            return Ok(info);
        }
        if bytes.len() as u64 > PATCH_BYTES_MAX {
            return Err(EngineError::invalid(format!(
                "a patch of {} bytes exceeds PATCH_BYTES_MAX ({PATCH_BYTES_MAX} bytes)",
                bytes.len()
            )));
        }
        if let Err(e) = std::str::from_utf8(&bytes) {
            // `readPatch` answers text: bytes that are not UTF-8 could not be read back as
            // they were stored (`logbook_git::snapshot_patch` never makes such a patch).
            return Err(EngineError::invalid(format!(
                "a patch must be UTF-8 text; byte {} is not",
                e.valid_up_to()
            )));
        }
        let s = self.session(session_id)?;
        let digest = sha256_digest(&bytes);
        let hex = digest["sha256:".len()..].to_owned();
        let path = self.patch_path(&hex);
        let tmp_dir = self.shared.dir.join("tmp");
        let len = bytes.len() as u64;
        let mut build = |_: &State, _first: u64| {
            write_patch_file(&path, &tmp_dir, &bytes)?;
            Ok((
                vec![],
                Outcome::Patch {
                    patch_id: format!("{PATCH_ID_PREFIX}{hex}"),
                    bytes: len,
                    digest: digest.clone(),
                },
            ))
        };
        let outcome = s.mutate(Mutation {
            operation,
            params: snapshot_params(),
            build: &mut build,
        })?;
        let info = info_of(outcome, operation)?;
        s.note_patch(&info.patch_id);
        Ok(info)
    }

    /// Bytes `[after, after + limit)` of a stored patch as text. Chunks end on character
    /// boundaries (a chunk always advances, by at least one character); a patch that is not
    /// UTF-8 comes back with U+FFFD in place of the bytes that are not (its `bytes` and
    /// `digest` still describe the stored bytes).
    pub fn read_patch(&self, p: ReadPatchParams) -> Result<crate::TextPage, EngineError> {
        let limit = p.limit.unwrap_or(READ_PATCH_BYTES_DEFAULT);
        if limit == 0 || limit > READ_PATCH_BYTES_MAX {
            return Err(EngineError::invalid(format!(
                "limit must be 1 to {READ_PATCH_BYTES_MAX} bytes, got {limit}"
            )));
        }
        let s = self.session(&p.session_id)?;
        let hex = p
            .patch_id
            .strip_prefix(PATCH_ID_PREFIX)
            .filter(|h| {
                h.len() == 64
                    && h.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            })
            .ok_or_else(|| {
                EngineError::not_found(format!(
                    "patch {:?} (patch ids look like {PATCH_ID_PREFIX}<64 hex>)",
                    p.patch_id
                ))
            })?;
        // Patch files are shared by the Root (one per content), but a Session reads only the
        // patches it stored itself.
        if !s.stored_patch(&p.patch_id)? {
            return Err(EngineError::not_found(format!(
                "patch {} in Session {} (it was not stored by this Session)",
                p.patch_id, p.session_id
            )));
        }
        let path = self.patch_path(hex);
        let mut f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(EngineError::not_found(format!(
                    "patch {} in Session {}",
                    p.patch_id, p.session_id
                )))
            }
            Err(e) => return Err(EngineError::io(&path, "open", e)),
        };
        let total = check_patch_header(&path, &mut f)?;
        let after = p.after.unwrap_or(0);
        if after > total {
            return Err(EngineError::invalid(format!(
                "after {after} is past the patch's end ({total} bytes)"
            )));
        }
        // Read up to 3 bytes more than asked so a character cut by `limit` can be completed
        // when the chunk would otherwise be empty, and 3 before to check the start boundary.
        let lead = after.min(3);
        let want_end = after.saturating_add(limit).min(total);
        let read_end = (want_end + 3).min(total);
        let mut buf = Vec::with_capacity((read_end - after + lead) as usize);
        f.seek(SeekFrom::Start(PATCH_HEADER_BYTES + after - lead))
            .map_err(|e| EngineError::io(&path, "seek", e))?;
        (&mut f)
            .take(read_end - after + lead)
            .read_to_end(&mut buf)
            .map_err(|e| EngineError::io(&path, "read", e))?;
        if buf.len() as u64 != read_end - after + lead {
            return Err(EngineError::corrupt(
                &path,
                format!("patch file is shorter than its {total} bytes"),
            ));
        }
        let (before, rest) = buf.split_at(lead as usize);
        if splits_char(before, rest) {
            return Err(EngineError::invalid(format!(
                "after {after} is not on a character boundary of the patch"
            )));
        }
        let asked = (want_end - after) as usize;
        let at_end = want_end == total;
        let mut cut = if at_end {
            asked
        } else {
            asked - incomplete_tail(&rest[..asked])
        };
        if cut == 0 && asked > 0 {
            // The first character is longer than `limit`: return it whole.
            cut = char_len(rest).min(rest.len());
        }
        let chunk = &rest[..cut];
        let end = after + cut as u64;
        Ok(crate::TextPage {
            // Patches are stored only as UTF-8 (`store_patch`); lossy is for files of
            // builds that did not check, so a damaged byte shows as U+FFFD, never a panic.
            text: String::from_utf8_lossy(chunk).into_owned(),
            next_after: (end < total).then_some(end),
        })
    }
}

/// Length of the UTF-8 sequence that starts `b` (1 for anything that is not a lead byte).
fn char_len(b: &[u8]) -> usize {
    match b.first() {
        Some(x) if x & 0xE0 == 0xC0 => 2,
        Some(x) if x & 0xF0 == 0xE0 => 3,
        Some(x) if x & 0xF8 == 0xF0 => 4,
        _ => 1,
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Bytes at the end of `b` that begin a multi-byte character not finished inside `b`.
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let i = b.len() - back;
        if !is_continuation(b[i]) {
            let need = char_len(&b[i..]);
            return if need > back { back } else { 0 };
        }
    }
    0
}

/// Does the boundary between `before` and `rest` fall inside a well-formed character?
fn splits_char(before: &[u8], rest: &[u8]) -> bool {
    if !rest.first().is_some_and(|b| is_continuation(*b)) {
        return false;
    }
    for back in 1..=before.len() {
        let i = before.len() - back;
        if !is_continuation(before[i]) {
            return char_len(&before[i..]) > back;
        }
    }
    false
}

pub(crate) fn check_patch_header(
    path: &std::path::Path,
    f: &mut std::fs::File,
) -> Result<u64, EngineError> {
    let len = f
        .metadata()
        .map_err(|e| EngineError::io(path, "stat", e))?
        .len();
    let mut h = [0u8; PATCH_HEADER_BYTES as usize];
    if len < PATCH_HEADER_BYTES {
        return Err(EngineError::corrupt(
            path,
            "patch file is shorter than its 16-byte header",
        ));
    }
    f.read_exact(&mut h)
        .map_err(|e| EngineError::io(path, "read", e))?;
    if h[..8] != PATCH_MAGIC {
        return Err(EngineError::corrupt(
            path,
            "not a Logbook patch file (wrong magic bytes)",
        ));
    }
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if version != PATCH_FORMAT_VERSION {
        return Err(EngineError::UnsupportedFormat {
            path: path.to_owned(),
            found: version,
            expected: PATCH_FORMAT_VERSION,
        });
    }
    Ok(len - PATCH_HEADER_BYTES)
}

/// Writes the patch file unless a whole one is already there (same digest = same bytes).
fn write_patch_file(
    path: &std::path::Path,
    tmp_dir: &std::path::Path,
    bytes: &[u8],
) -> Result<(), EngineError> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == PATCH_HEADER_BYTES + bytes.len() as u64) {
        return Ok(());
    }
    let mut content = patch_file_header();
    content.extend_from_slice(bytes);
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = tmp_dir.join(format!("patch-{}-{n}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    crate::fsutil::write_file_synced(&tmp, &content)
        .map_err(|e| EngineError::io(&tmp, "write", e))?;
    let parent = path.parent().expect("patch paths have a parent");
    // `patches/` and its fan-out folder are made on demand; each one made is fsynced into
    // its parent before the file is published, so the receipt appended next never names a
    // file whose folder a crash could drop.
    crate::fsutil::ensure_dir_durable(parent)?;
    std::fs::rename(&tmp, path).map_err(|e| EngineError::io(path, "rename into place", e))?;
    crate::fsutil::sync_dir(parent)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_boundary_helpers() {
        let s = "aé€😀".as_bytes();
        assert_eq!(incomplete_tail(&s[..2]), 1); // 'a' + first byte of é
        assert_eq!(incomplete_tail(&s[..3]), 0);
        assert_eq!(incomplete_tail(&s[..5]), 2);
        assert_eq!(incomplete_tail(&s[..9]), 3);
        assert_eq!(incomplete_tail(s), 0);
        assert!(splits_char(&s[..2], &s[2..]));
        assert!(!splits_char(&s[..3], &s[3..]));
        assert!(
            !splits_char(&[0x80], &[0x80]),
            "stray continuation bytes do not count"
        );
    }
}
