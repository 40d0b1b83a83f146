//! `importBundle` reading untrusted bytes. One Root per process holds a Session with content
//! in every bundle part (and a fork of it); both are exported once, as the valid bundles. Each
//! input is imported three ways into a second Root, each time under a fresh Session id and a
//! fresh operation:
//!
//! 1. the input's bytes as they are;
//! 2. a valid bundle with byte edits the input describes: `ctl`, then `ctl & 7` (u16 LE
//!    offset, xor byte) triples, then a u16 LE cut length when `ctl & 8`, then one byte
//!    appended when `ctl & 16`; `ctl & 0x80` picks the fork's bundle. Every byte of a bundle
//!    is under a checksum, so this import must succeed exactly when the bytes are unchanged,
//!    and be refused otherwise;
//! 3. a valid bundle edited through its structure ([`Plan`]: entries of the parts, blobs,
//!    manifest fields, stored frames), then recompressed with every length and digest the
//!    edits did not target made to fit, so the edits reach the entry decoding, the event
//!    checks and the staged Session's replay rather than stopping at a checksum.
//!
//! Checks, for every import: no panic; a refusal is `corrupt` or `unsupported_format`, no
//! Session appeared, no `sessions/.import-*` directory is left, and nothing else under the
//! Root changed (blobs, patches, the list of `sessions/`); an accepted bundle gives a Session
//! whose info and every history page read, which exports again, with the same events,
//! receipts and diagnostics parts, manifest fields and a superset of the blobs and patches,
//! and which then takes a `send` (or refuses it as a `conflict`: a reused operation).
//!
//! A structural plan that changes nothing is not imported (the byte edits import the valid
//! bundles as they are).
//!
//! The importing Root is replaced after every 64 imported Sessions (there is no delete),
//! after a reopen that must find them all and a `verify` that must find no damage. So a
//! failure may depend on blobs an earlier input left in that Root, and a failed reopen or
//! verify names the imports it holds rather than one input. Set `LBFUZZ_VERBOSE=1` to see
//! every import's outcome. The seeds are written by `cargo run --bin make_bundle_seeds`.
#![no_main]

#[path = "../bin/bundle_source.rs"]
mod bundle_source;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use logbook_engine::{
    Branch, Direction, ErrorKind, ExportSessionParams, HistoryParams, ImportBundleParams, Root,
    SendParams, BUNDLE_MAGIC, PAGE_ROWS_MAX,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

const HEADER_BYTES: usize = 16;
/// The parts, by index into the manifest's list: framed ones and file ones.
const FRAMED: [usize; 3] = [0, 1, 4];
const FILES: [usize; 2] = [2, 3];
const EDITS_MAX: usize = 8;
const IMPORTED_PER_ROOT_MAX: u64 = 64;

// ---------------------------------------------------------------------------------------
// The bundle format, as docs/format.md describes it (a mirror of the engine's private types).

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PartInfo {
    kind: u8,
    count: u64,
    raw: u64,
    stored: u64,
    digest: [u8; 32],
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

/// A bundle taken apart: the manifest, and each part's content and stored frame.
#[derive(Clone, Debug)]
struct Parsed {
    manifest: Manifest,
    raw: Vec<Vec<u8>>,
    stored: Vec<Vec<u8>>,
}

/// A part's content as entries.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Content {
    Framed(Vec<Vec<u8>>),
    Files(Vec<([u8; 32], Vec<u8>)>),
}

impl Content {
    fn len(&self) -> usize {
        match self {
            Content::Framed(v) => v.len(),
            Content::Files(v) => v.len(),
        }
    }
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut n = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        n |= u64::from(byte & 0x7f).checked_shl(7 * i as u32)?;
        if byte & 0x80 == 0 {
            return Some((n, i + 1));
        }
    }
    None
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

/// Header, manifest and parts of `b`, when it has that shape (nothing is checked beyond it).
fn parse(b: &[u8]) -> Option<Parsed> {
    if b.len() < HEADER_BYTES || b[..8] != BUNDLE_MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(b[12..16].try_into().ok()?) as usize;
    let end = HEADER_BYTES.checked_add(len)?;
    let manifest: Manifest = postcard::from_bytes(b.get(HEADER_BYTES..end)?).ok()?;
    let mut at = end.checked_add(32)?;
    let (mut raw, mut stored) = (Vec::new(), Vec::new());
    for p in &manifest.parts {
        let next = at.checked_add(usize::try_from(p.stored).ok()?)?;
        let frame = b.get(at..next)?;
        raw.push(zstd::stream::decode_all(frame).ok()?);
        stored.push(frame.to_vec());
        at = next;
    }
    Some(Parsed {
        manifest,
        raw,
        stored,
    })
}

fn split(part: usize, raw: &[u8]) -> Option<Content> {
    let mut rest = raw;
    if FILES.contains(&part) {
        let mut v = Vec::new();
        while !rest.is_empty() {
            let d: [u8; 32] = rest.get(..32)?.try_into().ok()?;
            let n = u64::from_le_bytes(rest.get(32..40)?.try_into().ok()?);
            let bytes = rest.get(40..40usize.checked_add(usize::try_from(n).ok()?)?)?;
            v.push((d, bytes.to_vec()));
            rest = &rest[40 + bytes.len()..];
        }
        Some(Content::Files(v))
    } else {
        let mut v = Vec::new();
        while !rest.is_empty() {
            let (n, k) = varint(rest)?;
            let bytes = rest.get(k..k.checked_add(usize::try_from(n).ok()?)?)?;
            v.push(bytes.to_vec());
            rest = &rest[k + bytes.len()..];
        }
        Some(Content::Framed(v))
    }
}

fn join(c: &Content) -> Vec<u8> {
    let mut out = Vec::new();
    match c {
        Content::Framed(v) => {
            for e in v {
                put_varint(&mut out, e.len() as u64);
                out.extend_from_slice(e);
            }
        }
        Content::Files(v) => {
            for (d, bytes) in v {
                out.extend_from_slice(d);
                out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
    out
}

/// One zstd frame as an export writes it (level 1, checksum, no content size), or with other
/// settings that any zstd reader still takes.
fn compress(raw: &[u8], level: i32, checksum: bool, size: bool) -> Vec<u8> {
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), level).expect("encoder");
    enc.include_checksum(checksum).expect("checksum flag");
    if size {
        enc.set_pledged_src_size(Some(raw.len() as u64))
            .expect("pledged size");
    }
    enc.include_contentsize(size).expect("content size flag");
    enc.write_all(raw).expect("compress");
    enc.finish().expect("finish frame")
}

fn assemble(m: &Manifest, stored: &[Vec<u8>]) -> Vec<u8> {
    let manifest = postcard::to_allocvec(m).expect("encode manifest");
    let mut out = Vec::new();
    out.extend_from_slice(&BUNDLE_MAGIC);
    out.extend_from_slice(&logbook_engine::BUNDLE_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(manifest.len() as u32).to_le_bytes());
    out.extend_from_slice(&manifest);
    let sum = sha(&out);
    out.extend_from_slice(&sum);
    for s in stored {
        out.extend_from_slice(s);
    }
    out
}

// ---------------------------------------------------------------------------------------
// The two Roots.

struct Valid {
    bytes: Vec<u8>,
    parsed: Parsed,
    content: Vec<Content>,
}

fn base_dir() -> PathBuf {
    // tmpfs when there is one: the imports' fsyncs are free there.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// Removes the Roots of earlier fuzzing processes that ended without cleaning up (a crash
/// or a kill); this process's own Root is removed at its exit.
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("lbfuzz-bundle-") else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && !Path::new("/proc").join(pid).exists()
            && Path::new("/proc/self").exists()
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn temp_root_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("lbfuzz-bundle-{}-", std::process::id()))
        .tempdir_in(base_dir())
        .expect("temporary directory")
}

fn valid() -> &'static [Valid; 2] {
    static V: OnceLock<[Valid; 2]> = OnceLock::new();
    V.get_or_init(|| {
        sweep_stale(&base_dir());
        // The source Root is needed only to export: it goes once both bundles are written.
        let tmp = temp_root_dir();
        let (plain, fork) = bundle_source::source_bundles(&tmp.path().join("root"));
        drop(tmp);
        [plain, fork].map(|bytes| {
            let parsed = parse(&bytes).expect("a valid bundle parses");
            let content: Vec<Content> = parsed
                .raw
                .iter()
                .enumerate()
                .map(|(i, r)| split(i, r).expect("a valid part splits into entries"))
                .collect();
            // The mirror is faithful: the same bundle, byte for byte, when nothing is edited.
            for (i, c) in content.iter().enumerate() {
                assert_eq!(join(c), parsed.raw[i], "part {i} joins back");
                assert_eq!(
                    compress(&parsed.raw[i], 1, true, false),
                    parsed.stored[i],
                    "part {i} compresses back"
                );
            }
            assert_eq!(assemble(&parsed.manifest, &parsed.stored), bytes);
            Valid {
                bytes,
                parsed,
                content,
            }
        })
    })
}

struct Dst {
    // Dropped in this order: the Root, then its directory.
    root: Root,
    dir: PathBuf,
    /// What each import it accepted was (the Sessions it holds).
    accepted: Vec<String>,
    _tmp: tempfile::TempDir,
}

/// A full importing Root is opened once more and verified before it goes: every Session an
/// import published must survive a reopen, and the Root must verify clean. (Which import
/// broke it is not known here: the panic lists them all.)
fn retire(d: Dst) {
    let Dst {
        root,
        dir,
        accepted,
        _tmp,
    } = d;
    drop(root);
    let root = Root::open_with(&dir, bundle_source::options()).unwrap_or_else(|e| {
        panic!("the importing Root does not open again: {e}; its imports: {accepted:#?}")
    });
    let n = root.sessions().expect("sessions").len();
    assert_eq!(
        n,
        accepted.len(),
        "Sessions after a reopen; imports: {accepted:#?}"
    );
    let v = root.verify().expect("verify");
    assert!(
        v.damage.is_empty(),
        "the importing Root verifies with damage {:?}; its imports: {accepted:#?}",
        v.damage
    );
    drop(root);
    drop(_tmp);
}

static DST: Mutex<Option<Dst>> = Mutex::new(None);
static NEXT: AtomicU64 = AtomicU64::new(0);

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
}

extern "C" fn close_dst() {
    if let Ok(mut g) = DST.try_lock() {
        drop(g.take());
    }
}

fn with_dst<R>(f: impl FnOnce(&mut Dst) -> R) -> R {
    static AT_EXIT: OnceLock<()> = OnceLock::new();
    AT_EXIT.get_or_init(|| {
        // SAFETY: registers a plain function with no arguments, as atexit wants.
        unsafe { atexit(close_dst) };
    });
    let mut g = DST.lock().unwrap_or_else(|p| p.into_inner());
    if g.as_ref()
        .is_some_and(|d| d.accepted.len() as u64 >= IMPORTED_PER_ROOT_MAX)
    {
        retire(g.take().expect("a Root"));
    }
    let d = g.get_or_insert_with(|| {
        let tmp = temp_root_dir();
        let dir = tmp.path().join("root");
        let root = Root::open_or_init_with(&dir, bundle_source::options()).expect("importing root");
        Dst {
            root,
            dir,
            accepted: Vec::new(),
            _tmp: tmp,
        }
    });
    f(d)
}

/// What the Root holds outside the Sessions' own directories: the names under `sessions/`,
/// and every file elsewhere but the Root log, the catalog and `tmp/` (as the engine's tests
/// compare it).
fn snapshot(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(dir)
                .expect("inside")
                .to_string_lossy()
                .into_owned();
            if rel.starts_with("tmp") || rel.starts_with("root-log") || rel.starts_with("catalog") {
                continue;
            }
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            out.push(rel);
            // Not into the Sessions' own directories: only their names count.
            if is_dir && d != dir.join("sessions") {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

fn staging_left(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("sessions"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".import-"))
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// One import and its checks.

/// `LBFUZZ_VERBOSE=1`: every import's outcome on standard error (to see how deep inputs go).
fn verbose() -> bool {
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| std::env::var_os("LBFUZZ_VERBOSE").is_some_and(|v| v == "1"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Any,
    Accepted,
    Refused,
}

fn import_and_check(bytes: &[u8], expect: Expect, what: &str) {
    with_dst(|d| {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("imp-{n}");
        let sessions = d.root.sessions().expect("sessions").len();
        let before = snapshot(&d.dir);
        let got = d.root.import_bundle(
            &ImportBundleParams {
                session_id: Some(id.clone()),
                operation: format!("op-{n}"),
            },
            &mut &bytes[..],
            Path::new("fuzz.bundle"),
        );
        if verbose() {
            let short = |s: String| s.chars().take(160).collect::<String>();
            match &got {
                Ok(r) => eprintln!(
                    "bundle_import: {} accepted: revision {}",
                    short(what.into()),
                    r.revision
                ),
                Err(e) => eprintln!(
                    "bundle_import: {} refused: {}",
                    short(what.into()),
                    short(e.to_string())
                ),
            }
        }
        let left = staging_left(&d.dir);
        assert!(
            left.is_empty(),
            "{what}: staging left behind: {left:?} ({got:?})"
        );
        let imported = match got {
            Ok(r) => r,
            Err(e) => {
                assert!(
                    matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::UnsupportedFormat),
                    "{what}: refused as {:?}: {e}",
                    e.kind()
                );
                assert_ne!(
                    expect,
                    Expect::Accepted,
                    "{what}: the valid bundle was refused: {e}"
                );
                assert_eq!(
                    d.root.sessions().expect("sessions").len(),
                    sessions,
                    "{what}: a refused import left a Session ({e})"
                );
                assert_eq!(
                    d.root.session_info(&id).map_err(|e| e.kind()).err(),
                    Some(ErrorKind::NotFound),
                    "{what}: {id} after a refused import ({e})"
                );
                assert_eq!(
                    snapshot(&d.dir),
                    before,
                    "{what}: a refused import changed files ({e})"
                );
                return;
            }
        };
        let hex: String = sha(bytes).iter().map(|b| format!("{b:02x}")).collect();
        d.accepted
            .push(format!("{what}: {} bytes, sha256 {hex}", bytes.len()));
        assert_ne!(expect, Expect::Refused, "{what}: accepted as {imported:?}");
        assert_eq!(
            imported.session_id, id,
            "{what}: published under the requested id"
        );
        assert_eq!(
            d.root.sessions().expect("sessions").len(),
            sessions + 1,
            "{what}: one Session more"
        );
        read_back(&d.root, &id, imported.revision, what);
        let mut again = Vec::new();
        let x = d
            .root
            .export_session(
                &ExportSessionParams {
                    session_id: id.clone(),
                    through: None,
                },
                &mut again,
            )
            .unwrap_or_else(|err| panic!("{what}: the imported Session does not export: {err}"));
        assert_eq!(x.bytes, again.len() as u64, "{what}: export length");
        let back = parse(&again).unwrap_or_else(|| panic!("{what}: the re-export does not parse"));
        let sent =
            parse(bytes).unwrap_or_else(|| panic!("{what}: an accepted bundle does not parse"));
        let (bm, sm) = (&back.manifest, &sent.manifest);
        assert_eq!(bm.session_id, id, "{what}: re-export's id");
        assert_eq!(
            bm.revision, imported.revision,
            "{what}: re-export's revision"
        );
        assert_eq!(
            sm.revision, imported.revision,
            "{what}: the bundle's revision"
        );
        assert_eq!(bm.workspace, sm.workspace, "{what}: workspace");
        assert_eq!(bm.reset, sm.reset, "{what}: fork fence");
        assert_eq!(bm.branch, None, "{what}: an import has no base");
        for (i, name) in [(0, "events"), (1, "receipts"), (4, "diagnostics")] {
            assert!(
                back.raw[i] == sent.raw[i],
                "{what}: the re-exported {name} part differs from the imported one"
            );
        }
        for (i, name) in [(2, "attachments"), (3, "patches")] {
            let (Some(Content::Files(b)), Some(Content::Files(s))) =
                (split(i, &back.raw[i]), split(i, &sent.raw[i]))
            else {
                panic!("{what}: the {name} parts do not split");
            };
            for f in &s {
                assert!(
                    b.contains(f),
                    "{what}: an imported {name} entry is not exported again"
                );
            }
        }
        // The imported Session takes a new Turn (unless the bundle's receipts hold this
        // operation already), and reads with it.
        match d.root.send(SendParams {
            session_id: id.clone(),
            operation: "after-import".into(),
            text: "after the import".into(),
            attachments: Vec::new(),
        }) {
            Ok(s) => {
                assert_eq!(
                    s.sequence,
                    imported.revision + 1,
                    "{what}: a send after the import"
                );
                read_back(&d.root, &id, imported.revision + 1, what);
            }
            Err(err) => assert_eq!(
                err.kind(),
                ErrorKind::Conflict,
                "{what}: a send after the import: {err}"
            ),
        }
    })
}

fn read_back(root: &Root, id: &str, revision: u64, what: &str) {
    let info = root
        .session_info(id)
        .unwrap_or_else(|e| panic!("{what}: sessionInfo of the import: {e}"));
    assert_eq!(info.revision, revision, "{what}: sessionInfo's revision");
    for direction in [Direction::Forward, Direction::Backward] {
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = root
                .history(HistoryParams {
                    session_id: id.into(),
                    through: None,
                    after: after.take(),
                    limit: Some(PAGE_ROWS_MAX),
                    anchor: None,
                    direction: Some(direction),
                })
                .unwrap_or_else(|e| panic!("{what}: history of the import: {e}"));
            assert_eq!(page.through, revision, "{what}: history's fence");
            pages += 1;
            assert!(pages <= revision + 2, "{what}: history does not end");
            match page.next_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The edits.

/// A valid bundle with byte edits (see the module documentation).
fn xor_edit(data: &[u8]) {
    let Some((&ctl, mut rest)) = data.split_first() else {
        return;
    };
    let v = &valid()[usize::from(ctl >> 7)];
    let mut b = v.bytes.clone();
    let u16_at = |r: &[u8]| usize::from(u16::from_le_bytes([r[0], r[1]]));
    for _ in 0..(ctl & 7) {
        if rest.len() < 3 {
            break;
        }
        let at = u16_at(rest) % b.len();
        b[at] ^= rest[2];
        rest = &rest[3..];
    }
    if ctl & 8 != 0 && rest.len() >= 2 {
        let cut = u16_at(rest) % b.len();
        b.truncate(cut);
        rest = &rest[2..];
    }
    if ctl & 16 != 0 {
        b.push(rest.first().copied().unwrap_or(0));
    }
    let expect = if b == v.bytes {
        Expect::Accepted
    } else {
        Expect::Refused
    };
    import_and_check(
        &b,
        expect,
        &format!("byte edits {:?}", &data[..data.len().min(32)]),
    );
}

/// Structural edits of a valid bundle: the entries of its parts, its manifest and its stored
/// frames. Lengths, counts, the revision and digests are recomputed from the edited content
/// except where an edit sets them.
#[derive(Arbitrary, Debug)]
struct Plan {
    fork: bool,
    /// Rewrite each event's leading sequence to its place (after drops, copies, swaps).
    renumber: bool,
    edits: Vec<Edit>,
}

#[derive(Arbitrary, Debug)]
enum Edit {
    // Entries of the framed parts (events, receipts, diagnostics): `part` picks one.
    EntryXor {
        part: u8,
        entry: u8,
        at: u16,
        xor: u8,
    },
    EntryInsert {
        part: u8,
        entry: u8,
        at: u16,
        bytes: Vec<u8>,
    },
    EntryCut {
        part: u8,
        entry: u8,
        at: u16,
        len: u8,
    },
    EntryDrop {
        part: u8,
        entry: u8,
    },
    EntryDup {
        part: u8,
        entry: u8,
    },
    EntrySwap {
        part: u8,
        a: u8,
        b: u8,
    },
    /// Copies an entry of either valid bundle (the same or another framed part) in.
    EntryCopy {
        other: bool,
        from_part: u8,
        from: u8,
        to_part: u8,
        to: u8,
    },
    // Entries of the file parts (attachments, patches): `part` picks one.
    FileXor {
        part: u8,
        entry: u8,
        at: u16,
        xor: u8,
        rehash: bool,
    },
    FileDrop {
        part: u8,
        entry: u8,
    },
    FileDup {
        part: u8,
        entry: u8,
    },
    FileSwap {
        part: u8,
        a: u8,
        b: u8,
    },
    FileDigest {
        part: u8,
        entry: u8,
        at: u8,
        xor: u8,
    },
    FileAdd {
        part: u8,
        bytes: Vec<u8>,
    },
    // A part's content after its entries are written out.
    RawXor {
        part: u8,
        at: u16,
        xor: u8,
    },
    RawCut {
        part: u8,
        len: u16,
    },
    RawAppend {
        part: u8,
        bytes: Vec<u8>,
    },
    // The manifest.
    Revision {
        delta: i8,
    },
    Reset {
        at: Option<u8>,
    },
    Workspace {
        which: u8,
    },
    Branch {
        which: Option<(u8, u8)>,
    },
    SessionId {
        which: u8,
    },
    Count {
        part: u8,
        delta: i8,
    },
    RawLen {
        part: u8,
        delta: i8,
    },
    StoredLen {
        part: u8,
        delta: i8,
    },
    Digest {
        part: u8,
        at: u8,
        xor: u8,
        stored: bool,
    },
    Kind {
        part: u8,
        kind: u8,
    },
    DropPart {
        part: u8,
    },
    // The stored frames.
    StoredXor {
        part: u8,
        at: u16,
        xor: u8,
        fix: bool,
    },
    StoredSwap {
        a: u8,
        b: u8,
    },
    Recompress {
        part: u8,
        level: u8,
        checksum: bool,
        size: bool,
    },
}

fn framed(c: &mut [Content], part: u8) -> &mut Vec<Vec<u8>> {
    match &mut c[FRAMED[usize::from(part) % FRAMED.len()]] {
        Content::Framed(v) => v,
        Content::Files(_) => unreachable!("a framed part"),
    }
}

fn files(c: &mut [Content], part: u8) -> &mut Vec<([u8; 32], Vec<u8>)> {
    match &mut c[FILES[usize::from(part) % FILES.len()]] {
        Content::Files(v) => v,
        Content::Framed(_) => unreachable!("a file part"),
    }
}

fn pick(len: usize, i: impl Into<usize>) -> Option<usize> {
    (len > 0).then(|| i.into() % len)
}

fn shift(n: u64, delta: i8) -> u64 {
    n.saturating_add_signed(i64::from(delta))
}

fn structural_edit(data: &[u8]) {
    let Ok(plan) = Plan::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let all = valid();
    let v = &all[usize::from(plan.fork)];
    let other = &all[usize::from(!plan.fork)];
    let edits = &plan.edits[..plan.edits.len().min(EDITS_MAX)];
    let mut c = v.content.clone();

    for e in edits {
        match e {
            Edit::EntryXor {
                part,
                entry,
                at,
                xor,
            } => {
                let v = framed(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    if let Some(k) = pick(v[i].len(), *at) {
                        v[i][k] ^= xor;
                    }
                }
            }
            Edit::EntryInsert {
                part,
                entry,
                at,
                bytes,
            } => {
                let v = framed(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    let k = usize::from(*at) % (v[i].len() + 1);
                    let bytes = &bytes[..bytes.len().min(16)];
                    v[i].splice(k..k, bytes.iter().copied());
                }
            }
            Edit::EntryCut {
                part,
                entry,
                at,
                len,
            } => {
                let v = framed(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    if let Some(k) = pick(v[i].len(), *at) {
                        let end = (k + usize::from(*len)).min(v[i].len());
                        v[i].drain(k..end);
                    }
                }
            }
            Edit::EntryDrop { part, entry } => {
                let v = framed(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    v.remove(i);
                }
            }
            Edit::EntryDup { part, entry } => {
                let v = framed(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    let e = v[i].clone();
                    v.insert(i, e);
                }
            }
            Edit::EntrySwap { part, a, b } => {
                let v = framed(&mut c, *part);
                if let (Some(a), Some(b)) = (pick(v.len(), *a), pick(v.len(), *b)) {
                    v.swap(a, b);
                }
            }
            Edit::EntryCopy {
                other: from_other,
                from_part,
                from,
                to_part,
                to,
            } => {
                let src = if *from_other { other } else { v };
                let Content::Framed(s) = &src.content[FRAMED[usize::from(*from_part) % 3]] else {
                    unreachable!("a framed part")
                };
                if let Some(i) = pick(s.len(), *from) {
                    let e = s[i].clone();
                    let d = framed(&mut c, *to_part);
                    let k = usize::from(*to) % (d.len() + 1);
                    d.insert(k, e);
                }
            }
            Edit::FileXor {
                part,
                entry,
                at,
                xor,
                rehash,
            } => {
                let v = files(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    if let Some(k) = pick(v[i].1.len(), *at) {
                        v[i].1[k] ^= xor;
                        if *rehash {
                            v[i].0 = sha(&v[i].1);
                        }
                    }
                }
            }
            Edit::FileDrop { part, entry } => {
                let v = files(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    v.remove(i);
                }
            }
            Edit::FileDup { part, entry } => {
                let v = files(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    let e = v[i].clone();
                    v.insert(i, e);
                }
            }
            Edit::FileSwap { part, a, b } => {
                let v = files(&mut c, *part);
                if let (Some(a), Some(b)) = (pick(v.len(), *a), pick(v.len(), *b)) {
                    v.swap(a, b);
                }
            }
            Edit::FileDigest {
                part,
                entry,
                at,
                xor,
            } => {
                let v = files(&mut c, *part);
                if let Some(i) = pick(v.len(), *entry) {
                    v[i].0[usize::from(*at) % 32] ^= xor;
                }
            }
            Edit::FileAdd { part, bytes } => {
                // A blob nothing names, in its sorted place.
                let v = files(&mut c, *part);
                let d = sha(bytes);
                let k = v.partition_point(|(e, _)| *e < d);
                v.insert(k, (d, bytes.clone()));
            }
            _ => {}
        }
    }
    if plan.renumber {
        let Content::Framed(events) = &mut c[0] else {
            unreachable!("events are framed")
        };
        for (q, e) in events.iter_mut().enumerate() {
            if let Some((_, k)) = varint(e) {
                let mut head = Vec::new();
                put_varint(&mut head, q as u64 + 1);
                e.splice(..k, head);
            }
        }
    }

    let counts: Vec<u64> = c.iter().map(|p| p.len() as u64).collect();
    let mut raw: Vec<Vec<u8>> = c.iter().map(join).collect();
    for e in edits {
        match e {
            Edit::RawXor { part, at, xor } => {
                let r = &mut raw[usize::from(*part) % 5];
                if let Some(k) = pick(r.len(), *at) {
                    r[k] ^= xor;
                }
            }
            Edit::RawCut { part, len } => {
                let r = &mut raw[usize::from(*part) % 5];
                let n = usize::from(*len) % (r.len() + 1);
                r.truncate(n);
            }
            Edit::RawAppend { part, bytes } => {
                raw[usize::from(*part) % 5].extend_from_slice(&bytes[..bytes.len().min(64)]);
            }
            _ => {}
        }
    }
    let mut stored: Vec<Vec<u8>> = raw
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if *r == v.parsed.raw[i] {
                v.parsed.stored[i].clone()
            } else {
                compress(r, 1, true, false)
            }
        })
        .collect();
    for e in edits {
        if let Edit::Recompress {
            part,
            level,
            checksum,
            size,
        } = e
        {
            let i = usize::from(*part) % 5;
            stored[i] = compress(&raw[i], i32::from(level % 20) - 1, *checksum, *size);
        }
    }
    let mut m = v.parsed.manifest.clone();
    m.parts = (0..5)
        .map(|i| PartInfo {
            kind: i as u8 + 1,
            count: counts[i],
            raw: raw[i].len() as u64,
            stored: stored[i].len() as u64,
            digest: sha(&raw[i]),
            stored_digest: sha(&stored[i]),
        })
        .collect();
    m.revision = counts[0];
    if m.reset.is_some_and(|r| r > m.revision) {
        m.reset = Some(m.revision);
    }
    let mut dropped = Vec::new();
    for e in edits {
        match e {
            Edit::Revision { delta } => m.revision = shift(m.revision, *delta),
            Edit::Reset { at } => m.reset = at.map(u64::from),
            Edit::Workspace { which } => {
                m.workspace = match which % 5 {
                    0 => None,
                    1 => Some(String::new()),
                    2 => Some("/another/place".into()),
                    3 => Some("日本語/ß".repeat(700)),
                    _ => Some("a\0b\n".into()),
                }
            }
            Edit::Branch { which } => {
                m.branch = which.map(|(s, t)| Branch {
                    session_id: ["src", "", "imp-0", ".x"][usize::from(s % 4)].into(),
                    through: u64::from(t),
                    turn: (s & 4 != 0).then(|| "i".into()),
                })
            }
            Edit::SessionId { which } => {
                m.session_id = match which % 6 {
                    0 => String::new(),
                    1 => ".hidden".into(),
                    2 => "a/b".into(),
                    3 => "x".repeat(300),
                    4 => "imp-0".into(),
                    _ => "ok.id_-".into(),
                }
            }
            Edit::Count { part, delta } => {
                let p = &mut m.parts[usize::from(*part) % 5];
                p.count = shift(p.count, *delta);
            }
            Edit::RawLen { part, delta } => {
                let p = &mut m.parts[usize::from(*part) % 5];
                p.raw = shift(p.raw, *delta);
            }
            Edit::StoredLen { part, delta } => {
                let p = &mut m.parts[usize::from(*part) % 5];
                p.stored = shift(p.stored, *delta);
            }
            Edit::Digest {
                part,
                at,
                xor,
                stored,
            } => {
                let p = &mut m.parts[usize::from(*part) % 5];
                let d = if *stored {
                    &mut p.stored_digest
                } else {
                    &mut p.digest
                };
                d[usize::from(*at) % 32] ^= xor;
            }
            Edit::Kind { part, kind } => m.parts[usize::from(*part) % 5].kind = *kind,
            Edit::DropPart { part } => dropped.push(usize::from(*part) % 5),
            Edit::StoredXor { part, at, xor, fix } => {
                let i = usize::from(*part) % 5;
                if let Some(k) = pick(stored[i].len(), *at) {
                    stored[i][k] ^= xor;
                    if *fix {
                        m.parts[i].stored_digest = sha(&stored[i]);
                    }
                }
            }
            Edit::StoredSwap { a, b } => {
                let (a, b) = (usize::from(*a) % 5, usize::from(*b) % 5);
                stored.swap(a, b);
                m.parts.swap(a, b);
            }
            _ => {}
        }
    }
    dropped.sort_unstable();
    dropped.dedup();
    for i in dropped.into_iter().rev() {
        stored.remove(i);
        m.parts.remove(i);
    }
    let b = assemble(&m, &stored);
    if b == v.bytes {
        // No edit changed anything: the byte edits import the valid bundles.
        return;
    }
    import_and_check(&b, Expect::Any, &format!("structural edits {plan:?}"));
}

fuzz_target!(|data: &[u8]| {
    valid();
    import_and_check(data, Expect::Any, "the input's bytes");
    xor_edit(data);
    structural_edit(data);
});
