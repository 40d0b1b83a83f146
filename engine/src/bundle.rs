//! Session bundles: `exportSession` writes one Session under a fence as one canonical file,
//! `importBundle` publishes such a file as a Session of this Root, whole or not at all.
//!
//! The byte layout is in `docs/format.md` ("Session bundle"). An export reads the Session
//! through its ordinary read paths (a layered fork's base through its source), writes the
//! five parts compressed to a spool file that has no name (so a crash leaves nothing), then
//! writes the header and manifest and copies the parts after them: memory is one entry and
//! the compressor's window, whatever the size of the Session. An import streams the file once,
//! checking every part against the manifest as it goes, into a staging directory; the Session
//! appears with one Root-log record (see "Importing" in the format document).

use crate::diagnostics::{DiagLog, DiagRecord, DIAGNOSTICS_DIR};
use crate::error::EngineError;
use crate::event::{Branch, Event, Part};
use crate::layer::ForkMarker;
use crate::records::{self, EventRecord, ImportRecord, Outcome, Receipt};
use crate::registry::{import_staging_dir, Entry, Shared};
use crate::root::Root;
use crate::session::{Checkpoint, IndexBuilder, Session};
use crate::sync::lock;
use crate::validate::{validate_event, validate_id, validate_session_id};
use logbook_log::{BulkWriter, Durability, Location, Log, LogConfig, Record};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// First bytes of every bundle.
pub const BUNDLE_MAGIC: [u8; 8] = *b"LBBUNDL\0";
/// The bundle format this build writes and reads.
pub const BUNDLE_FORMAT_VERSION: u32 = 1;
/// Longest manifest a bundle may carry.
pub const BUNDLE_MANIFEST_BYTES_MAX: u32 = 64 << 10;
/// The zstd level of every part (part of what makes a bundle canonical).
const ZSTD_LEVEL: i32 = 1;
/// Longest entry of a framed part (an event, receipt or diagnostic record) an import accepts.
const ENTRY_BYTES_MAX: u64 = 1 << 30;
/// Bytes reserved for an entry of a framed part before its bytes are read.
const ENTRY_RESERVE_BYTES: u64 = 256 << 10;
const HEADER_BYTES: usize = 16;

const EVENTS: u8 = 1;
const RECEIPTS: u8 = 2;
const ATTACHMENTS: u8 = 3;
const PATCHES: u8 = 4;
const DIAGNOSTICS: u8 = 5;
const PART_NAMES: [&str; 5] = [
    "events",
    "receipts",
    "attachments",
    "patches",
    "diagnostics",
];

fn part_name(kind: u8) -> &'static str {
    PART_NAMES[usize::from(kind - 1)]
}

/// `exportSession`'s parameters (the wire's `path` is the caller's business).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportSessionParams {
    pub session_id: String,
    /// The fence: events `1..=through` are exported; None = the current revision.
    #[serde(default)]
    pub through: Option<u64>,
}

/// What an export wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportResult {
    /// Length of the bundle.
    pub bytes: u64,
    /// `sha256:<hex>` of the whole bundle.
    pub digest: String,
}

/// `importBundle`'s parameters (the wire's `path` is the caller's business).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportBundleParams {
    /// The id to publish the Session under; None = the id in the bundle.
    #[serde(default)]
    pub session_id: Option<String>,
    pub operation: String,
}

/// The Session an import published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportResult {
    pub session_id: String,
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PartInfo {
    kind: u8,
    count: u64,
    raw: u64,
    stored: u64,
    digest: [u8; 32],
    /// SHA-256 of the stored (compressed) bytes: a flipped bit the decompressor would not
    /// notice (or that decodes to the same content) is still found.
    stored_digest: [u8; 32],
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Manifest {
    session_id: String,
    workspace: Option<String>,
    branch: Option<Branch>,
    revision: u64,
    reset: Option<u64>,
    parts: Vec<PartInfo>,
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest_name(d: &[u8; 32]) -> String {
    format!("sha256:{}", hex(d))
}

/// The 32 bytes of a `sha256:<64 hex>` digest (already validated by the caller's checks).
fn digest_bytes(s: &str) -> Option<[u8; 32]> {
    let h = s.strip_prefix("sha256:")?;
    if h.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Attachment digests an event's record names (decoded only for the kinds that can name one).
fn named_blobs(payload: &[u8], out: &mut BTreeSet<[u8; 32]>) -> Result<(), String> {
    const USER_MESSAGE: u32 = 1;
    const TOOL_RESULT: u32 = 3;
    let (_, rest) = postcard::take_from_bytes::<u64>(payload).map_err(|e| e.to_string())?;
    let (variant, _) = postcard::take_from_bytes::<u32>(rest).map_err(|e| e.to_string())?;
    if variant != USER_MESSAGE && variant != TOOL_RESULT {
        return Ok(());
    }
    let r: EventRecord = postcard::from_bytes(payload).map_err(|e| e.to_string())?;
    event_blobs(&r.event, out)
}

fn event_blobs(event: &Event, out: &mut BTreeSet<[u8; 32]>) -> Result<(), String> {
    let mut add = |d: &str| match digest_bytes(d) {
        Some(b) => {
            out.insert(b);
            Ok(())
        }
        None => Err(format!("attachment digest {d:?} is not sha256:<64 hex>")),
    };
    match event {
        Event::UserMessage(m) => m.attachments.iter().try_for_each(|a| add(&a.digest)),
        Event::ToolResult(r) => r.parts.iter().try_for_each(|p| match p {
            Part::Attachment { digest } => add(digest),
            Part::Text { .. } => Ok(()),
        }),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// Writing

struct Counting<W> {
    inner: W,
    n: u64,
    hash: Sha256,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.n += n as u64;
        self.hash.update(&b[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// What a part's compressor wrote: the stored length and the SHA-256 of the stored bytes.
type Stored = (u64, [u8; 32]);

/// Raw bytes handed to a part's compressor at a time.
const CHUNK_BYTES: usize = 1 << 20;

/// One part being written: its content hashed and counted here, and compressed as one frame
/// on a thread of its own, so reading the Session and compressing it overlap.
struct PartWriter {
    kind: u8,
    hash: Sha256,
    raw: u64,
    count: u64,
    head: Vec<u8>,
    /// Raw bytes not handed over yet.
    buf: Vec<u8>,
    tx: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    /// Buffers the compressor is done with, for reuse.
    spare: std::sync::mpsc::Receiver<Vec<u8>>,
    worker: Option<std::thread::JoinHandle<std::io::Result<Stored>>>,
}

impl PartWriter {
    /// A part written at the current offset of `file` (which the caller owns meanwhile).
    fn new(kind: u8, file: File) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
        let (spare_tx, spare) = std::sync::mpsc::channel::<Vec<u8>>();
        let worker = std::thread::Builder::new()
            .name("logbook-bundle".into())
            .spawn(move || {
                let mut enc = zstd::stream::write::Encoder::new(
                    Counting {
                        inner: BufWriter::with_capacity(CHUNK_BYTES, file),
                        n: 0,
                        hash: Sha256::new(),
                    },
                    ZSTD_LEVEL,
                )?;
                enc.include_checksum(true)?;
                enc.include_contentsize(false)?;
                for chunk in rx {
                    enc.write_all(&chunk)?;
                    let _ = spare_tx.send(chunk);
                }
                let mut c = enc.finish()?;
                c.inner.flush()?;
                Ok((c.n, c.hash.finalize().into()))
            })?;
        Ok(PartWriter {
            kind,
            hash: Sha256::new(),
            raw: 0,
            count: 0,
            head: Vec::with_capacity(48),
            buf: Vec::with_capacity(CHUNK_BYTES),
            tx: Some(tx),
            spare,
            worker: Some(worker),
        })
    }

    fn raw(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hash.update(b);
        self.raw += b.len() as u64;
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK_BYTES {
            self.hand_over()?;
        }
        Ok(())
    }

    fn hand_over(&mut self) -> std::io::Result<()> {
        let mut next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK_BYTES));
        next.clear();
        let full = std::mem::replace(&mut self.buf, next);
        let sent = self.tx.as_ref().map(|tx| tx.send(full).is_ok());
        if sent == Some(true) {
            return Ok(());
        }
        // The compressor stopped: its error says why.
        Err(self
            .join()
            .err()
            .unwrap_or_else(|| std::io::Error::other("the bundle compressor stopped")))
    }

    /// Ends the input and waits for the compressor: (stored length, SHA-256 of it).
    fn join(&mut self) -> std::io::Result<Stored> {
        self.tx = None;
        match self.worker.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the bundle compressor panicked")),
            None => Err(std::io::Error::other("the bundle compressor stopped")),
        }
    }

    /// One entry of a framed part: its length, then its bytes.
    fn framed(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let mut head = std::mem::take(&mut self.head);
        head.clear();
        put_varint(&mut head, payload.len() as u64);
        self.raw(&head)?;
        self.head = head;
        self.count += 1;
        self.raw(payload)
    }

    /// One entry of a file part: digest and length, then the bytes from `file`, checked to
    /// hash to the digest.
    fn file(&mut self, digest: &[u8; 32], path: &Path, skip: u64) -> Result<(), EngineError> {
        let mut f = File::open(path).map_err(|e| EngineError::io(path, "open", e))?;
        let len = f
            .metadata()
            .map_err(|e| EngineError::io(path, "stat", e))?
            .len();
        let len = len
            .checked_sub(skip)
            .ok_or_else(|| EngineError::corrupt(path, "the file is shorter than its header"))?;
        f.seek(SeekFrom::Start(skip))
            .map_err(|e| EngineError::io(path, "seek", e))?;
        let io = |e| EngineError::io("bundle", "write", e);
        self.raw(digest).map_err(io)?;
        self.raw(&len.to_le_bytes()).map_err(io)?;
        self.count += 1;
        let mut check = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let want = buf.len().min(left as usize);
            f.read_exact(&mut buf[..want])
                .map_err(|e| EngineError::io(path, "read", e))?;
            check.update(&buf[..want]);
            self.raw(&buf[..want]).map_err(io)?;
            left -= want as u64;
        }
        if <[u8; 32]>::from(check.finalize()) != *digest {
            return Err(EngineError::corrupt(
                path,
                format!("its bytes do not hash to its name {}", digest_name(digest)),
            ));
        }
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<PartInfo> {
        if !self.buf.is_empty() {
            self.hand_over()?;
        }
        let (stored, stored_digest) = self.join()?;
        Ok(PartInfo {
            kind: self.kind,
            count: self.count,
            raw: self.raw,
            stored,
            digest: self.hash.finalize().into(),
            stored_digest,
        })
    }
}

/// A temporary file with no name: made in the Root's `tmp/` and unlinked at once.
fn spool_file(tmp: &Path) -> Result<File, EngineError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(tmp).map_err(|e| EngineError::io(tmp, "create directory", e))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = tmp.join(format!("export-{}-{n}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| EngineError::io(&path, "create", e))?;
    std::fs::remove_file(&path).map_err(|e| EngineError::io(&path, "remove", e))?;
    Ok(f)
}

struct Hashing<W> {
    inner: W,
    hash: Sha256,
    n: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.hash.update(&b[..n]);
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl Root {
    /// Writes Session `session_id` under the fence `through` to `out` as a bundle (see the
    /// module documentation); the same Session under the same fence gives the same bytes.
    pub fn export_session(
        &self,
        p: &ExportSessionParams,
        out: &mut dyn Write,
    ) -> Result<ExportResult, EngineError> {
        let sh = &self.shared;
        let s = self.session(&p.session_id)?;
        let (workspace, branch, reset) = {
            let reg = lock(&sh.registry);
            let e = reg
                .sessions
                .get(&p.session_id)
                .ok_or_else(|| EngineError::not_found(format!("Session {}", p.session_id)))?;
            (e.workspace.clone(), e.branch.clone(), e.reset())
        };
        let revision = s.read().state.revision;
        let through = match p.through {
            None => revision,
            Some(t) if (1..=revision).contains(&t) => t,
            Some(t) => {
                return Err(EngineError::invalid(format!(
                    "through must be 1 to the Session's revision {revision}, got {t}"
                )))
            }
        };
        // A reader writes nothing into the Root, not even a nameless file.
        let spool_dir = if sh.options.read_only {
            std::env::temp_dir()
        } else {
            sh.dir.join("tmp")
        };
        let spool = spool_file(&spool_dir)?;
        let parts = write_parts(sh, &s, &p.session_id, through, &spool)?;
        let manifest = Manifest {
            session_id: p.session_id.clone(),
            workspace,
            branch,
            revision: through,
            reset: reset.map(|r| r.min(through)),
            parts,
        };
        let head = encode_head(&manifest);
        let stored: u64 = manifest.parts.iter().map(|p| p.stored).sum();
        let mut w = Hashing {
            inner: out,
            hash: Sha256::new(),
            n: 0,
        };
        let out_err = |e| EngineError::io("bundle", "write", e);
        w.write_all(&head).map_err(out_err)?;
        let mut spool = spool;
        spool
            .seek(SeekFrom::Start(0))
            .map_err(|e| EngineError::io("bundle spool", "seek", e))?;
        let copied = std::io::copy(&mut (&spool).take(stored), &mut w).map_err(out_err)?;
        if copied != stored {
            return Err(EngineError::io(
                "bundle spool",
                "read",
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the spool is short"),
            ));
        }
        w.flush().map_err(out_err)?;
        Ok(ExportResult {
            bytes: w.n,
            digest: digest_name(&w.hash.finalize().into()),
        })
    }
}

/// Header, manifest and the checksum over both.
fn encode_head(m: &Manifest) -> Vec<u8> {
    let manifest = records::encode(m);
    let mut head = Vec::with_capacity(HEADER_BYTES + manifest.len() + 32);
    head.extend_from_slice(&BUNDLE_MAGIC);
    head.extend_from_slice(&BUNDLE_FORMAT_VERSION.to_le_bytes());
    head.extend_from_slice(&(manifest.len() as u32).to_le_bytes());
    head.extend_from_slice(&manifest);
    let sum: [u8; 32] = Sha256::digest(&head).into();
    head.extend_from_slice(&sum);
    head
}

/// Writes the five parts to `spool`, compressed, and describes them.
fn write_parts(
    sh: &Shared,
    s: &Session,
    id: &str,
    through: u64,
    spool: &File,
) -> Result<Vec<PartInfo>, EngineError> {
    let io = |e| EngineError::io("bundle spool", "write", e);
    let part = |kind| {
        let file = spool
            .try_clone()
            .map_err(|e| EngineError::io("bundle spool", "duplicate", e))?;
        PartWriter::new(kind, file).map_err(io)
    };
    let mut parts = Vec::with_capacity(PART_NAMES.len());

    let mut blobs = BTreeSet::new();
    let mut pw = part(EVENTS)?;
    let mut task = sh.options.progress.task(
        || format!("exporting Session {id}"),
        through,
        crate::progress::ProgressUnit::Events,
    );
    s.for_each_event_payload(1, through, &mut |q, payload| {
        task.advance(q);
        named_blobs(payload, &mut blobs)
            .map_err(|why| EngineError::corrupt(s.log().dir(), format!("event {q}: {why}")))?;
        pw.framed(payload).map_err(io)
    })?;
    parts.push(pw.finish().map_err(io)?);
    drop(task);

    let mut patches = BTreeSet::new();
    let mut pw = part(RECEIPTS)?;
    s.for_each_receipt(s.own_cutoff(through)?, |payload, r| match r.outcome {
        // A fork's reservation names a Session of this Root: not carried.
        Outcome::Fork { .. } => Ok(()),
        Outcome::Patch { digest, .. } => {
            let d = digest_bytes(&digest).ok_or_else(|| {
                EngineError::corrupt(s.log().dir(), format!("patch digest {digest:?}"))
            })?;
            patches.insert(d);
            pw.framed(payload).map_err(io)
        }
        _ => pw.framed(payload).map_err(io),
    })?;
    parts.push(pw.finish().map_err(io)?);

    let mut pw = part(ATTACHMENTS)?;
    for d in &blobs {
        pw.file(d, &sh.blobs.path_of(&digest_name(d))?, 0)?;
    }
    parts.push(pw.finish().map_err(io)?);

    let mut pw = part(PATCHES)?;
    for d in &patches {
        let path = crate::patches::patch_file_path(&sh.dir, &hex(d));
        let mut f = File::open(&path).map_err(|e| EngineError::io(&path, "open", e))?;
        crate::patches::check_patch_header(&path, &mut f)?;
        pw.file(d, &path, crate::patches::PATCH_HEADER_BYTES)?;
    }
    parts.push(pw.finish().map_err(io)?);

    let mut pw = part(DIAGNOSTICS)?;
    {
        let st = s.diags().state()?;
        if let Some(log) = &st.log {
            for item in log.scan(log.start()) {
                let (_, record, _) = item?;
                let r: DiagRecord =
                    records::decode(log.dir(), "a diagnostic record", &record.payload)?;
                // Recorded at non-decreasing history revisions: the ones under the fence
                // are a prefix.
                if r.diagnostic.sequence > through {
                    break;
                }
                pw.framed(&record.payload).map_err(io)?;
            }
        }
    }
    parts.push(pw.finish().map_err(io)?);
    Ok(parts)
}

// ---------------------------------------------------------------------------------------
// Reading

fn corrupt(name: &Path, why: impl std::fmt::Display) -> EngineError {
    EngineError::CorruptInput {
        path: name.to_owned(),
        reason: why.to_string(),
    }
}

/// Reads and checks the header and manifest; returns the manifest and its checksum (which
/// names the bundle).
fn read_manifest(input: &mut dyn Read, name: &Path) -> Result<(Manifest, [u8; 32]), EngineError> {
    let short = |what: &str, e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            corrupt(name, format!("the file ends inside the {what}"))
        } else {
            EngineError::io(name, "read", e)
        }
    };
    let mut head = vec![0u8; HEADER_BYTES];
    input
        .read_exact(&mut head)
        .map_err(|e| short("header: it is not a Logbook bundle", e))?;
    if head[..8] != BUNDLE_MAGIC {
        return Err(corrupt(
            name,
            "the file does not start with LBBUNDL: it is not a Logbook bundle",
        ));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version != BUNDLE_FORMAT_VERSION {
        if version > BUNDLE_FORMAT_VERSION {
            return Err(EngineError::UnsupportedFormat {
                path: name.to_owned(),
                found: version,
                expected: BUNDLE_FORMAT_VERSION,
            });
        }
        return Err(corrupt(
            name,
            format!("format version {version} does not exist"),
        ));
    }
    let len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
    if len > BUNDLE_MANIFEST_BYTES_MAX {
        return Err(corrupt(
            name,
            format!("the manifest length {len} exceeds {BUNDLE_MANIFEST_BYTES_MAX}"),
        ));
    }
    head.resize(HEADER_BYTES + len as usize + 32, 0);
    input
        .read_exact(&mut head[HEADER_BYTES..])
        .map_err(|e| short("manifest", e))?;
    let (body, sum) = head.split_at(HEADER_BYTES + len as usize);
    let key: [u8; 32] = Sha256::digest(body).into();
    if key[..] != *sum {
        return Err(corrupt(
            name,
            "the manifest's checksum does not match: the header or manifest is damaged",
        ));
    }
    let m: Manifest = match postcard::take_from_bytes(&body[HEADER_BYTES..]) {
        Ok((m, [])) => m,
        _ => return Err(corrupt(name, "the manifest does not decode")),
    };
    let kinds: Vec<u8> = m.parts.iter().map(|p| p.kind).collect();
    if kinds != [EVENTS, RECEIPTS, ATTACHMENTS, PATCHES, DIAGNOSTICS] {
        return Err(corrupt(name, format!("the manifest lists parts {kinds:?}")));
    }
    if m.revision == 0 || m.parts[0].count != m.revision {
        return Err(corrupt(
            name,
            format!(
                "the manifest says revision {} but {} events",
                m.revision, m.parts[0].count
            ),
        ));
    }
    if m.reset.is_some_and(|r| r == 0 || r > m.revision) {
        return Err(corrupt(
            name,
            "the manifest's fork fence lies outside its history",
        ));
    }
    validate_session_id(&m.session_id)
        .map_err(|e| corrupt(name, format!("the manifest's session id: {e}")))?;
    if let Some(w) = &m.workspace {
        crate::root::validate_workspace(w)
            .map_err(|e| corrupt(name, format!("the manifest's workspace: {e}")))?;
    }
    Ok((m, key))
}

/// Counts and hashes what is read through it, and refuses to give more than `limit` bytes.
struct Metered<R> {
    inner: R,
    hash: Sha256,
    n: u64,
    limit: u64,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        if self.n > self.limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the part holds more bytes than the manifest says",
            ));
        }
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// Hashes the stored bytes the decompressor consumes.
struct Tap<R> {
    inner: R,
    hash: Sha256,
}

impl<R: BufRead> Read for Tap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = {
            let have = self.fill_buf()?;
            let n = have.len().min(buf.len());
            buf[..n].copy_from_slice(&have[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Tap<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        // The bytes being consumed are still buffered: this reads nothing.
        if let Ok(b) = self.inner.fill_buf() {
            self.hash.update(&b[..n.min(b.len())]);
        }
        self.inner.consume(n);
    }
}

type Frame<'r, R> = zstd::stream::read::Decoder<'static, Tap<std::io::Take<&'r mut R>>>;

/// One part being read: its frame decoded within its stored length, its content counted
/// and hashed; [`PartReader::finish`] checks both against the manifest.
struct PartReader<'r, R: BufRead> {
    r: BufReader<Metered<Frame<'r, R>>>,
    info: PartInfo,
    name: PathBuf,
    read: u64,
}

impl<'r, R: BufRead> PartReader<'r, R> {
    fn new(input: &'r mut R, info: &PartInfo, name: &Path) -> Result<Self, EngineError> {
        let dec = zstd::stream::read::Decoder::with_buffer(Tap {
            inner: input.take(info.stored),
            hash: Sha256::new(),
        })
        .map_err(|e| EngineError::io(name, "start decompressing", e))?
        .single_frame();
        Ok(PartReader {
            r: BufReader::with_capacity(
                1 << 16,
                Metered {
                    inner: dec,
                    hash: Sha256::new(),
                    n: 0,
                    limit: info.raw,
                },
            ),
            info: info.clone(),
            name: name.to_owned(),
            read: 0,
        })
    }

    fn err(&self, why: impl std::fmt::Display) -> EngineError {
        corrupt(
            &self.name,
            format!("part {}: {why}", part_name(self.info.kind)),
        )
    }

    fn io(&self, e: std::io::Error) -> EngineError {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof => self.err("it ends early (the file is truncated)"),
            _ => self.err(e),
        }
    }

    fn exact(&mut self, buf: &mut [u8]) -> Result<(), EngineError> {
        self.r.read_exact(buf).map_err(|e| self.io(e))
    }

    fn varint(&mut self) -> Result<u64, EngineError> {
        let mut n = 0u64;
        for shift in (0..70).step_by(7) {
            let mut b = [0u8];
            self.exact(&mut b)?;
            if shift == 63 && b[0] > 1 {
                break;
            }
            n |= u64::from(b[0] & 0x7f) << shift;
            if b[0] & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(self.err("an entry length is not a varint"))
    }

    /// The next entry of a framed part.
    fn framed(&mut self) -> Result<Vec<u8>, EngineError> {
        let len = self.varint()?;
        if len > ENTRY_BYTES_MAX || len > self.info.raw {
            return Err(self.err(format!("an entry of {len} bytes")));
        }
        // Room for a short entry at once (most are a few KiB: growing from nothing costs a
        // dozen reallocations each); a longer one grows as its bytes arrive, so a manifest
        // that claims a long entry costs no more than this until the bytes are really there.
        let mut payload = Vec::with_capacity(len.min(ENTRY_RESERVE_BYTES) as usize);
        let got = (&mut self.r)
            .take(len)
            .read_to_end(&mut payload)
            .map_err(|e| self.io(e))?;
        if got as u64 != len {
            return Err(self.err("it ends early (the file is truncated)"));
        }
        self.read += 1;
        Ok(payload)
    }

    /// The next entry of a file part: writes its bytes to `f` (`to` names it in errors),
    /// checks they hash to the entry's digest, and returns the digest.
    fn file(
        &mut self,
        last: Option<[u8; 32]>,
        f: &mut dyn Write,
        to: &Path,
    ) -> Result<[u8; 32], EngineError> {
        let mut d = [0u8; 32];
        self.exact(&mut d)?;
        if last.is_some_and(|l| l >= d) {
            return Err(self.err("its entries are not in ascending digest order"));
        }
        let mut len = [0u8; 8];
        self.exact(&mut len)?;
        let len = u64::from_le_bytes(len);
        if len > self.info.raw {
            return Err(self.err(format!("an entry of {len} bytes")));
        }
        let mut check = Sha256::new();
        let mut left = len;
        while left > 0 {
            let chunk = match self.r.fill_buf() {
                Ok(c) => c,
                Err(e) => return Err(self.io(e)),
            };
            if chunk.is_empty() {
                return Err(self.err("it ends early (the file is truncated)"));
            }
            let n = chunk.len().min(left as usize);
            check.update(&chunk[..n]);
            f.write_all(&chunk[..n])
                .map_err(|e| EngineError::io(to, "write", e))?;
            self.r.consume(n);
            left -= n as u64;
        }
        if <[u8; 32]>::from(check.finalize()) != d {
            return Err(self.err(format!(
                "the entry named {} hashes otherwise",
                digest_name(&d)
            )));
        }
        self.read += 1;
        Ok(d)
    }

    fn remaining(&self) -> u64 {
        self.info.count - self.read
    }

    /// Checks that the part ended where the manifest says, with its digest and entry count.
    fn finish(mut self) -> Result<(), EngineError> {
        let mut probe = [0u8; 1];
        match self.r.read(&mut probe) {
            Ok(0) => {}
            Ok(_) => return Err(self.err("it holds more than its entries")),
            Err(e) => return Err(self.io(e)),
        }
        if self.read != self.info.count {
            return Err(self.err("it holds fewer entries than the manifest says"));
        }
        let metered = self.r.into_inner();
        if metered.n != self.info.raw {
            return Err(corrupt(
                &self.name,
                format!(
                    "part {}: {} bytes where the manifest says {}",
                    part_name(self.info.kind),
                    metered.n,
                    self.info.raw
                ),
            ));
        }
        if <[u8; 32]>::from(metered.hash.finalize()) != self.info.digest {
            return Err(corrupt(
                &self.name,
                format!(
                    "part {}: its SHA-256 does not match the manifest",
                    part_name(self.info.kind)
                ),
            ));
        }
        let rest = metered.inner.finish();
        if rest.inner.limit() != 0 {
            return Err(corrupt(
                &self.name,
                format!("part {}: bytes after its frame", part_name(self.info.kind)),
            ));
        }
        if <[u8; 32]>::from(rest.hash.finalize()) != self.info.stored_digest {
            return Err(corrupt(
                &self.name,
                format!(
                    "part {}: its stored bytes' SHA-256 does not match the manifest",
                    part_name(self.info.kind)
                ),
            ));
        }
        Ok(())
    }
}

/// Appends one record to the staged log, as a batch of its own (an import's batches mean
/// nothing: the whole log is published at once or not at all).
fn append_one(log: &mut BulkWriter, kind: u8, payload: &[u8]) -> Result<Location, EngineError> {
    let at = log.append(&[Record { kind, payload }])?;
    Ok(at[0])
}

impl Root {
    /// Publishes the bundle read from `input` as a Session of this Root (see the module
    /// documentation); `name` names the bundle in errors.
    pub fn import_bundle(
        &self,
        p: &ImportBundleParams,
        input: &mut dyn Read,
        name: &Path,
    ) -> Result<ImportResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        if let Some(id) = &p.session_id {
            validate_session_id(id)?;
        }
        let sh = &self.shared;
        let mut input = BufReader::with_capacity(1 << 20, input);
        let (m, key) = read_manifest(&mut input, name)?;
        let id = p.session_id.clone().unwrap_or_else(|| m.session_id.clone());
        let params = records::params_digest("importBundle", &(&p.session_id, key));
        let earlier = 'decide: {
            let mut reg = lock(&sh.registry);
            loop {
                if let Some((digest, made)) = reg.receipts.get(&p.operation) {
                    let made = made.clone();
                    match reg.sessions.get(&made).and_then(|e| e.import.as_ref()) {
                        Some(i) if *digest == params => {
                            break 'decide Some(ImportResult {
                                session_id: made,
                                revision: i.revision,
                            })
                        }
                        _ => {
                            return Err(EngineError::conflict(format!(
                                "operation {:?} already made Session {made} from other parameters; use a new operation",
                                p.operation
                            )))
                        }
                    }
                }
                if !reg.creating.contains(&p.operation) {
                    break;
                }
                reg = sh
                    .reservation_ended
                    .wait(reg)
                    .unwrap_or_else(|p| p.into_inner());
            }
            if let Some(e) = reg.sessions.get(&id) {
                match &e.import {
                    Some(i) if i.bundle == key => {
                        break 'decide Some(ImportResult {
                            session_id: id.clone(),
                            revision: i.revision,
                        })
                    }
                    _ => {
                        return Err(EngineError::conflict(format!(
                            "Session {id} already exists and was not made from this bundle; import it under another sessionId"
                        )))
                    }
                }
            }
            if reg.reserved.contains(&id) {
                return Err(EngineError::conflict(format!(
                    "Session {id} is being made by another request"
                )));
            }
            reg.reserved.insert(id.clone());
            reg.creating.insert(p.operation.clone());
            None
        };
        if let Some(answer) = earlier {
            // The same bundle again: nothing changes, but a damaged copy of it is still
            // refused, as it would be anywhere else.
            check_parts(&m, &mut input, name)?;
            return Ok(answer);
        }
        let staging = import_staging_dir(&sh.dir, &id);
        // From here a crash may leave a staging directory: the next open must look for it,
        // so the catalog snapshot (which says "closed cleanly, nothing to look for") goes.
        // Damage the staged Session's own checks find (its replay) is the bundle's.
        let built = sh
            .snapshot
            .before_change()
            .and_then(|()| build(sh, &m, &mut input, name, &id, &staging))
            .map_err(|e| match e {
                EngineError::Corrupt { reason, .. } => corrupt(name, reason),
                e if e.kind() == crate::ErrorKind::Corrupt
                    && !matches!(e, EngineError::CorruptInput { .. }) =>
                {
                    corrupt(name, e)
                }
                e => e,
            });
        let record = ImportRecord {
            session_id: id.clone(),
            workspace: m.workspace.clone(),
            operation: p.operation.clone(),
            params,
            bundle: key,
            revision: m.revision,
            reset: m.reset,
        };
        let committed = built.and_then(|()| {
            crate::fsutil::pause_point(&sh.dir, "import-built");
            sh.root_log.append(&[Record {
                kind: records::KIND_IMPORTED_SESSION,
                payload: &records::encode(&record),
            }])?;
            Ok(())
        });
        if committed.is_err() {
            let _ = crate::fsutil::remove_any(&staging);
        } else {
            crate::fsutil::pause_point(&sh.dir, "import-committed");
        }
        let placed = committed.as_ref().ok().map(|()| sh.place(&staging, &id));
        let mut reg = lock(&sh.registry);
        reg.reserved.remove(&id);
        reg.creating.remove(&p.operation);
        if committed.is_ok() {
            reg.receipts
                .insert(p.operation.clone(), (params, id.clone()));
            let summary = Arc::new(crate::catalog::Summary::created_now());
            sh.journal.record(&id, 0, &summary);
            reg.sessions
                .insert(id.clone(), Entry::imported(&record, summary));
        }
        drop(reg);
        sh.reservation_ended.notify_all();
        committed?;
        placed.unwrap_or(Ok(()))?;
        Ok(ImportResult {
            session_id: id,
            revision: m.revision,
        })
    }
}

/// Checks that nothing follows the last part.
fn at_end(input: &mut impl BufRead, name: &Path) -> Result<(), EngineError> {
    if input
        .fill_buf()
        .map_err(|e| EngineError::io(name, "read", e))?
        .is_empty()
    {
        Ok(())
    } else {
        Err(corrupt(name, "bytes follow the last part"))
    }
}

/// Reads every part after the manifest and checks it (lengths, digests, entry counts, the
/// end of the file), keeping nothing.
fn check_parts(m: &Manifest, input: &mut impl BufRead, name: &Path) -> Result<(), EngineError> {
    for info in &m.parts {
        let mut part = PartReader::new(input, info, name)?;
        let mut last = None;
        while part.remaining() > 0 {
            if info.kind == ATTACHMENTS || info.kind == PATCHES {
                last = Some(part.file(last, &mut std::io::sink(), name)?);
            } else {
                part.framed()?;
            }
        }
        part.finish()?;
    }
    at_end(input, name)?;
    Ok(())
}

/// Builds the imported Session under `staging` from the parts that follow the manifest, and
/// publishes its blobs and patches; nothing outside `staging` changes before every part
/// checked out.
fn build(
    sh: &Shared,
    m: &Manifest,
    input: &mut BufReader<&mut dyn Read>,
    name: &Path,
    id: &str,
    staging: &Path,
) -> Result<(), EngineError> {
    crate::fsutil::remove_any(staging)?;
    let incoming = staging.join("incoming");
    std::fs::create_dir_all(&incoming)
        .map_err(|e| EngineError::io(&incoming, "create directory", e))?;
    // The log is written straight as sealed segments (no plain copy read back and compressed
    // again by a sealer), with the Root's segment size.
    let config = LogConfig {
        durability: Durability::NoSyncBulkImport,
        preallocate_bytes: 0,
        ..staged_log_config(sh)
    };
    let mut log = BulkWriter::create(&staging.join("log"), &config)?;
    // The indexes and the checkpoint are built as the records are written (what a replay of
    // the new log would build), so the open below replays nothing.
    let mut index = IndexBuilder::create(staging)?;

    // Events: dense from 1, `sessionCreated` first, each one as an append would accept it.
    let mut named = BTreeSet::new();
    let mut state = crate::state::State::default();
    let mut part = PartReader::new(input, &m.parts[0], name)?;
    let mut task = sh.options.progress.task(
        || format!("importing Session {id}"),
        m.revision,
        crate::progress::ProgressUnit::Events,
    );
    for q in 1..=m.revision {
        task.advance(q);
        let payload = part.framed()?;
        let event = match postcard::take_from_bytes::<EventRecord>(&payload) {
            Ok((r, [])) if r.sequence == q => r.event,
            Ok((r, [])) => return Err(part.err(format!("entry {q} holds event {}", r.sequence))),
            _ => return Err(part.err(format!("event {q} does not decode"))),
        };
        match (&event, q) {
            (Event::SessionCreated(c), 1) if c.workspace == m.workspace => {}
            (Event::SessionCreated(_), 1) => {
                return Err(part.err("sessionCreated names another workspace than the manifest"))
            }
            (_, 1) => return Err(part.err("the first event is not sessionCreated")),
            (e, _) => {
                validate_event(0, e).map_err(|e| part.err(format!("event {q}: {e}")))?;
                crate::root::check_batch(&state, &[e])
                    .map_err(|e| part.err(format!("event {q}: {e}")))?;
            }
        }
        state.apply(q, &event);
        event_blobs(&event, &mut named).map_err(|why| part.err(format!("event {q}: {why}")))?;
        let loc = append_one(&mut log, records::KIND_EVENT, &payload)?;
        index.event(q, loc, &event)?;
        if m.reset == Some(q) {
            let source = m
                .branch
                .as_ref()
                .map(|b| b.session_id.clone())
                .unwrap_or_default();
            let marker = records::encode(&ForkMarker::new(source, q));
            let loc = append_one(&mut log, records::KIND_FORK, &marker)?;
            index.fork_marker(loc, &marker)?;
        }
    }
    part.finish()?;
    drop(task);

    // Receipts: of mutations inside the history, each operation once.
    let mut part = PartReader::new(input, &m.parts[1], name)?;
    let mut operations = HashSet::new();
    let mut patches_named = BTreeSet::new();
    while part.remaining() > 0 {
        let payload = part.framed()?;
        let r: Receipt = match postcard::take_from_bytes(&payload) {
            Ok((r, [])) => r,
            _ => return Err(part.err("a receipt does not decode")),
        };
        let inside = match &r.outcome {
            Outcome::Append { last, .. } => *last <= m.revision,
            Outcome::Send { sequence, .. } | Outcome::Sequence { sequence } => {
                *sequence <= m.revision
            }
            Outcome::Patch { digest, .. } => match digest_bytes(digest) {
                Some(d) => {
                    patches_named.insert(d);
                    true
                }
                None => false,
            },
            Outcome::Fork { .. } => false,
        };
        if !inside || !operations.insert(r.operation.clone()) {
            return Err(part.err(format!(
                "the receipt of operation {:?} does not fit the history",
                r.operation
            )));
        }
        let loc = append_one(&mut log, records::KIND_RECEIPT, &payload)?;
        index.receipt(loc, &r.operation)?;
    }
    part.finish()?;
    log.finish()?;
    index.finish()?;

    // Attachments and patches, to files of their own until everything checked out.
    let mut files = Vec::new();
    for (i, (kind, prefix)) in [(ATTACHMENTS, "b-"), (PATCHES, "p-")]
        .into_iter()
        .enumerate()
    {
        let header = if kind == PATCHES {
            crate::patches::patch_file_header()
        } else {
            Vec::new()
        };
        let mut part = PartReader::new(input, &m.parts[2 + i], name)?;
        let mut last = None;
        while part.remaining() > 0 {
            let to = incoming.join(format!("{prefix}{}", files.len()));
            let mut f = File::create(&to).map_err(|e| EngineError::io(&to, "create", e))?;
            f.write_all(&header)
                .map_err(|e| EngineError::io(&to, "write", e))?;
            let d = part.file(last, &mut f, &to)?;
            f.sync_all().map_err(|e| EngineError::io(&to, "sync", e))?;
            last = Some(d);
            files.push((kind, d, to));
        }
        part.finish()?;
    }

    // Diagnostics: dense revisions, recorded inside the history.
    let mut part = PartReader::new(input, &m.parts[4], name)?;
    if part.remaining() > 0 {
        let log = Log::create(&staging.join(DIAGNOSTICS_DIR), config)?;
        let mut revision = 0;
        while part.remaining() > 0 {
            let payload = part.framed()?;
            let r: DiagRecord = match postcard::take_from_bytes(&payload) {
                Ok((r, [])) => r,
                _ => return Err(part.err("a diagnostic does not decode")),
            };
            revision += 1;
            if r.revision != revision || r.diagnostic.sequence > m.revision {
                return Err(part.err(format!("diagnostic {revision} does not fit")));
            }
            log.append(&[Record {
                kind: crate::diagnostics::KIND_DIAGNOSTIC,
                payload: &payload,
            }])?;
        }
        log.sync()?;
    }
    part.finish()?;
    at_end(input, name)?;

    // Every blob the events name and every patch a receipt names is here or in the Root.
    let have = |kind: u8, d: &[u8; 32]| files.iter().any(|(k, f, _)| *k == kind && f == d);
    for d in &named {
        if !have(ATTACHMENTS, d) && sh.blobs.size(&digest_name(d))?.is_none() {
            return Err(corrupt(
                name,
                format!("part attachments: {} is missing", digest_name(d)),
            ));
        }
    }
    for d in &patches_named {
        if !have(PATCHES, d) && !crate::patches::patch_file_path(&sh.dir, &hex(d)).exists() {
            return Err(corrupt(
                name,
                format!("part patches: {} is missing", digest_name(d)),
            ));
        }
    }
    for (kind, d, _) in &files {
        let wanted = if *kind == ATTACHMENTS {
            &named
        } else {
            &patches_named
        };
        if !wanted.contains(d) {
            return Err(corrupt(
                name,
                format!(
                    "part {}: {} is named by nothing in the history",
                    part_name(*kind),
                    digest_name(d)
                ),
            ));
        }
    }

    // The Session opens where it was built (the replay checks every record and builds the
    // indexes and the checkpoint), with its diagnostics.
    {
        let diags = Arc::new(DiagLog::new(staging, staged_log_config(sh), false));
        let s = Session::open_with(
            id,
            staging,
            staged_log_config(sh),
            None,
            sh.options.progress.clone(),
            Arc::clone(&diags),
            false,
        )?;
        drop(diags.state()?);
        s.sync_indexes(Checkpoint::Now)?;
    }

    // Published content-addressed: one already there is kept.
    for (kind, d, from) in &files {
        let to = if *kind == ATTACHMENTS {
            sh.blobs.path_of(&digest_name(d))?
        } else {
            crate::patches::patch_file_path(&sh.dir, &hex(d))
        };
        if to.exists() {
            continue;
        }
        let parent = to.parent().expect("store paths have a parent");
        crate::fsutil::ensure_dir_durable(parent)?;
        std::fs::rename(from, &to).map_err(|e| EngineError::io(&to, "rename into place", e))?;
        crate::fsutil::sync_dir(parent)?;
    }
    std::fs::remove_dir_all(&incoming).map_err(|e| EngineError::io(&incoming, "remove", e))?;
    crate::fsutil::sync_dir(staging)?;
    Ok(())
}

/// The Root's log configuration for the logs an import writes in its staging directory,
/// without the Root's `unsynced` mark: each marks itself, inside the staging directory, so
/// that an import refused half way leaves the Root's own files as they were (the staging
/// directory goes, marks and all); an accepted one is synced whole before it is committed.
fn staged_log_config(sh: &Shared) -> LogConfig {
    LogConfig {
        group_mark: None,
        ..sh.log_config()
    }
}
