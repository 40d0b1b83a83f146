//! The Root's content-addressed blob store for attachments.
//!
//! `blobs/<first 2 hex digits>/<remaining 62 hex digits>` holds the bytes whose SHA-256 is the
//! name. A blob is written to `tmp/`, fsynced, renamed into place and its directory fsynced, so
//! a visible blob is always whole; a newly made fan-out folder is fsynced into `blobs/` before
//! the rename; the same bytes are stored once. Blobs are written before the
//! event that names them, so a crash leaves at worst an unreferenced blob, never a dangling name.

use crate::error::EngineError;
use crate::validate::{is_digest, sha256_digest};
use std::collections::HashSet;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Debug)]
pub(crate) struct BlobStore {
    dir: PathBuf,
    tmp: PathBuf,
    counter: AtomicU64,
    /// Digests whose file was read whole and hashed to its name in this process: a damaged
    /// blob is never served, and each blob is hashed once rather than on every range read.
    verified: Mutex<HashSet<String>>,
}

impl BlobStore {
    pub(crate) fn new(root: &Path) -> BlobStore {
        BlobStore {
            dir: root.join("blobs"),
            tmp: root.join("tmp"),
            counter: AtomicU64::new(0),
            verified: Mutex::new(HashSet::new()),
        }
    }

    pub(crate) fn path_of(&self, digest: &str) -> Result<PathBuf, EngineError> {
        if !is_digest(digest) {
            return Err(EngineError::invalid(format!(
                "{digest:?} is not a sha256:<64 hex> digest"
            )));
        }
        let hex = &digest[7..];
        Ok(self.dir.join(&hex[..2]).join(&hex[2..]))
    }

    /// Stores `bytes` (once) and returns their digest.
    pub(crate) fn put(&self, bytes: &[u8]) -> Result<String, EngineError> {
        let digest = sha256_digest(bytes);
        let path = self.path_of(&digest)?;
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
            return Ok(digest);
        }
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        std::fs::create_dir_all(&self.tmp)
            .map_err(|e| EngineError::io(&self.tmp, "create directory", e))?;
        let tmp = self.tmp.join(format!("blob-{}-{n}", std::process::id()));
        crate::fsutil::write_file_synced(&tmp, bytes)
            .map_err(|e| EngineError::io(&tmp, "write", e))?;
        let parent = path.parent().expect("blob paths have a parent");
        // A fan-out folder made here must be a durable entry of `blobs/` before the blob is
        // published in it, or a crash could drop the folder, and the blob with it, after
        // the event naming the blob was acknowledged.
        crate::fsutil::ensure_dir_durable(parent)?;
        std::fs::rename(&tmp, &path).map_err(|e| EngineError::io(&path, "rename into place", e))?;
        crate::fsutil::sync_dir(parent)?;
        Ok(digest)
    }

    /// Size of a stored blob, or None when it is absent.
    pub(crate) fn size(&self, digest: &str) -> Result<Option<u64>, EngineError> {
        let path = self.path_of(digest)?;
        match std::fs::metadata(&path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(EngineError::io(&path, "stat", e)),
        }
    }

    /// Reads `len` bytes at `offset` of a blob into `out`.
    pub(crate) fn read_range(
        &self,
        digest: &str,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), EngineError> {
        let path = self.path_of(digest)?;
        self.check(digest, &path)?;
        let mut f = std::fs::File::open(&path).map_err(|e| EngineError::io(&path, "open", e))?;
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| EngineError::io(&path, "seek", e))?;
        let before = out.len();
        f.take(len)
            .read_to_end(out)
            .map_err(|e| EngineError::io(&path, "read", e))?;
        if (out.len() - before) as u64 != len {
            return Err(EngineError::corrupt(
                &path,
                format!("blob is shorter than its recorded size (wanted {len} bytes at {offset})"),
            ));
        }
        Ok(())
    }

    /// Hashes a blob once per process and refuses it as `corrupt` when its bytes are not the
    /// ones its name promises.
    fn check(&self, digest: &str, path: &Path) -> Result<(), EngineError> {
        let mut verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if verified.contains(digest) {
            return Ok(());
        }
        let bytes = std::fs::read(path).map_err(|e| EngineError::io(path, "read", e))?;
        let actual = sha256_digest(&bytes);
        if actual != digest {
            return Err(EngineError::corrupt(
                path,
                format!("blob bytes hash to {actual}, not to the name {digest}; the attachment is damaged"),
            ));
        }
        verified.insert(digest.to_owned());
        Ok(())
    }

    /// Walks every blob and checks its name is the digest of its bytes; returns the count.
    pub(crate) fn verify(&self) -> Result<u64, EngineError> {
        let mut n = 0;
        let Ok(top) = std::fs::read_dir(&self.dir) else {
            return Ok(0);
        };
        for d in top {
            let d = d.map_err(|e| EngineError::io(&self.dir, "list", e))?;
            let sub = d.path();
            for f in std::fs::read_dir(&sub).map_err(|e| EngineError::io(&sub, "list", e))? {
                let f = f.map_err(|e| EngineError::io(&sub, "list", e))?.path();
                let bytes = std::fs::read(&f).map_err(|e| EngineError::io(&f, "read", e))?;
                let name = format!(
                    "sha256:{}{}",
                    sub.file_name().and_then(|s| s.to_str()).unwrap_or(""),
                    f.file_name().and_then(|s| s.to_str()).unwrap_or("")
                );
                if sha256_digest(&bytes) != name {
                    return Err(EngineError::corrupt(
                        &f,
                        "blob bytes do not match their digest name",
                    ));
                }
                n += 1;
            }
        }
        Ok(n)
    }
}
