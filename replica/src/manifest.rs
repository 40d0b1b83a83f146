//! Manifests and object names (docs/format.md, "Replicas in object storage"): what a replica
//! holds as of one round, encoded, checked and applied.

use crate::error::ReplicaError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Magic bytes at the start of every manifest object.
pub const MANIFEST_MAGIC: [u8; 8] = *b"LBREPLM\0";
/// Version of the replica format (object names, manifests).
pub const REPLICA_FORMAT_VERSION: u32 = 1;
/// Bytes before a manifest's compressed body: magic, version, reserved, SHA-256.
pub const MANIFEST_HEADER_BYTES: usize = 48;
/// Largest manifest body accepted, decompressed.
pub const MANIFEST_BYTES_MAX: usize = 256 << 20;
/// Delta manifests written after a full one before the next full one, at most.
pub const DELTAS_MAX: u64 = 256;
/// zstd level of chunks and manifests: fast, since the tail is compressed again when sealed.
pub const CHUNK_ZSTD_LEVEL: i32 = 1;
/// Where a segment's records start (its header comes before).
pub(crate) const RECORDS_START: u64 = logbook_log::SEGMENT_HEADER_BYTES;

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Bytes of lowercase (or uppercase) hex text; `None` when it is not hex.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// SHA-256 of `bytes` in hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// One object: its name below the prefix, its length and SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Object {
    /// Name below the replica's prefix.
    pub key: String,
    /// Length in bytes.
    pub bytes: u64,
    /// SHA-256 of the object, hex.
    pub sha256: String,
}

/// A sealed segment file uploaded as it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// Name below the replica's prefix.
    pub key: String,
    /// Length in bytes.
    pub bytes: u64,
    /// SHA-256 of the object, hex.
    pub sha256: String,
    /// The segment's logical length (its footer's).
    pub logical: u64,
}

/// A zstd frame of the logical bytes `[from, to)` of a segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Name below the replica's prefix.
    pub key: String,
    /// Length of the object (compressed) in bytes.
    pub bytes: u64,
    /// SHA-256 of the object, hex.
    pub sha256: String,
    /// First logical byte.
    pub from: u64,
    /// End of the range (a batch end).
    pub to: u64,
}

/// A segment as a manifest names it (whole in a full manifest, its change in a delta).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SegmentEntry {
    /// The segment number.
    pub segment: u64,
    /// The segment file's modification time in the source, ms since the epoch.
    pub mtime_ms: u64,
    /// The sealed file, which replaces every chunk of the segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Sealed>,
    /// Chunks, in order, contiguous.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<Chunk>,
}

/// A log of the Root and its segments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// The log's path in the Root (`root-log`, `sessions/<id>/log`, ...).
    pub path: String,
    /// Its segments (all of them, or the changed ones).
    pub segments: Vec<SegmentEntry>,
}

/// The manifest a delta rests on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The parent manifest's name.
    pub key: String,
    /// SHA-256 of its compressed body (bytes 16..48 of the object), hex.
    pub sha256: String,
}

/// A manifest's body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The upload round that wrote it.
    pub round: u64,
    /// When it was written, ms since the epoch.
    pub created_ms: u64,
    /// Whether it names the whole replica (else only what changed since `parent`).
    pub full: bool,
    /// The previous manifest.
    pub parent: Option<Link>,
    /// Hex of the Root's `logbook.root`.
    pub root_header: String,
    /// Blobs (all, or the new ones).
    pub blobs: Vec<Object>,
    /// Patch files (all, or the new ones).
    pub patches: Vec<Object>,
    /// Logs (all, or the changed ones).
    pub logs: Vec<LogEntry>,
}

/// The name of the manifest of `round` written at `ms`: newest first in a listing.
pub fn manifest_name(round: u64, ms: u64) -> String {
    format!("manifests/{:020}-{ms:020}.lbm", u64::MAX - round)
}

/// (round, ms) of a manifest name; `None` for a name that is not one.
pub fn parse_manifest_name(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("manifests/")?.strip_suffix(".lbm")?;
    let (inv, ms) = rest.split_once('-')?;
    if inv.len() != 20 || ms.len() != 20 {
        return None;
    }
    Some((u64::MAX - inv.parse::<u64>().ok()?, ms.parse().ok()?))
}

/// The folder of the objects uploaded by `round`.
pub fn round_folder(round: u64) -> String {
    format!("data/{round:020}/")
}

/// The round of an object name under `data/`.
pub fn round_of(name: &str) -> Option<u64> {
    let r = name.strip_prefix("data/")?.get(..20)?;
    r.parse().ok()
}

/// Hex digits of an object's SHA-256 that its name carries (128 bits: names stay short enough
/// for servers that keep a key in one file name; the manifest holds the whole digest).
pub const NAME_SHA_HEX: usize = 32;

/// What an object under `data/` is, by its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DataName {
    /// A blob and its SHA-256 (whole).
    Blob(String),
    /// A patch file and its name (whole).
    Patch(String),
    /// A sealed segment file: log path, segment, the object's SHA-256 (first 32 hex digits).
    Sealed(String, u64, String),
    /// A chunk: log path, segment, from, to, the object's SHA-256 (first 32 hex digits).
    Chunk(String, u64, u64, u64, String),
}

/// The short form of a log path in object names: `r`, `s/<id>/l`, `s/<id>/d`.
fn log_key(path: &str) -> String {
    if path == "root-log" {
        return "r".to_owned();
    }
    match path
        .strip_prefix("sessions/")
        .and_then(|r| r.rsplit_once('/'))
    {
        Some((id, "log")) => format!("s/{id}/l"),
        Some((id, "diagnostics")) => format!("s/{id}/d"),
        _ => format!("x/{path}"),
    }
}

/// The log path of a short form.
fn log_path(key: &str) -> Option<String> {
    if key == "r" {
        return Some("root-log".to_owned());
    }
    let (id, sub) = key.strip_prefix("s/")?.rsplit_once('/')?;
    match sub {
        "l" => Some(format!("sessions/{id}/log")),
        "d" => Some(format!("sessions/{id}/diagnostics")),
        _ => None,
    }
}

impl DataName {
    /// The object's name when uploaded by `round`.
    pub fn name(&self, round: u64) -> String {
        let folder = round_folder(round);
        match self {
            DataName::Blob(sha) => format!("{folder}b/{sha}"),
            DataName::Patch(sha) => format!("{folder}p/{sha}"),
            DataName::Sealed(log, seg, sha) => format!("{folder}g/{}/{seg}-{sha}", log_key(log)),
            DataName::Chunk(log, seg, from, to, sha) => {
                format!("{folder}c/{}/{seg}-{from}-{to}-{sha}", log_key(log))
            }
        }
    }

    /// Reads an object name under `data/<round>/`.
    pub fn parse(name: &str) -> Option<DataName> {
        let rest = name.strip_prefix("data/")?.get(21..)?;
        if let Some(sha) = rest.strip_prefix("b/") {
            return is_sha(sha, 64).then(|| DataName::Blob(sha.to_owned()));
        }
        if let Some(sha) = rest.strip_prefix("p/") {
            return is_sha(sha, 64).then(|| DataName::Patch(sha.to_owned()));
        }
        let (kind, r) = rest.split_once('/')?;
        let (log, file) = r.rsplit_once('/')?;
        let log = log_path(log)?;
        let parts: Vec<&str> = file.split('-').collect();
        let num = |s: &str| s.parse::<u64>().ok();
        match (kind, parts.as_slice()) {
            ("g", [seg, sha]) if is_sha(sha, NAME_SHA_HEX) => {
                Some(DataName::Sealed(log, num(seg)?, (*sha).to_owned()))
            }
            ("c", [seg, from, to, sha]) if is_sha(sha, NAME_SHA_HEX) => Some(DataName::Chunk(
                log,
                num(seg)?,
                num(from)?,
                num(to)?,
                (*sha).to_owned(),
            )),
            _ => None,
        }
    }
}

fn is_sha(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Encodes a manifest as its object bytes; returns them and the body's SHA-256 (hex).
pub fn encode(m: &Manifest) -> Result<(Vec<u8>, String), ReplicaError> {
    let json = serde_json::to_vec(m).map_err(|e| {
        ReplicaError::manifest(&manifest_name(m.round, m.created_ms), e.to_string())
    })?;
    let body = zstd::bulk::compress(&json, CHUNK_ZSTD_LEVEL)
        .map_err(|e| ReplicaError::local("manifest", "compress", e))?;
    let digest = Sha256::digest(&body);
    let mut out = Vec::with_capacity(MANIFEST_HEADER_BYTES + body.len());
    out.extend_from_slice(&MANIFEST_MAGIC);
    out.extend_from_slice(&REPLICA_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&digest);
    out.extend_from_slice(&body);
    Ok((out, hex(&digest)))
}

/// Decodes and checks manifest object `bytes` named `key`; returns it and its body's SHA-256.
pub fn decode(key: &str, bytes: &[u8]) -> Result<(Manifest, String), ReplicaError> {
    if bytes.len() < MANIFEST_HEADER_BYTES || bytes[..8] != MANIFEST_MAGIC {
        return Err(ReplicaError::manifest(
            key,
            "not a manifest (wrong magic or too short)",
        ));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != REPLICA_FORMAT_VERSION {
        return Err(ReplicaError::UnsupportedVersion {
            key: key.to_owned(),
            version,
        });
    }
    let body = &bytes[MANIFEST_HEADER_BYTES..];
    let digest = Sha256::digest(body);
    if digest[..] != bytes[16..48] {
        return Err(ReplicaError::manifest(
            key,
            "SHA-256 mismatch: the manifest is damaged",
        ));
    }
    let json = zstd::bulk::decompress(body, MANIFEST_BYTES_MAX)
        .map_err(|e| ReplicaError::manifest(key, format!("does not decompress: {e}")))?;
    let m: Manifest = serde_json::from_slice(&json)
        .map_err(|e| ReplicaError::manifest(key, format!("does not decode: {e}")))?;
    if parse_manifest_name(key).is_some_and(|(round, _)| round != m.round) {
        return Err(ReplicaError::manifest(
            key,
            "its round is not the one its name says",
        ));
    }
    Ok((m, hex(&digest)))
}

/// One segment of the replica: its sealed file, or its chunks from 32 on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentState {
    /// Source modification time, ms.
    pub mtime_ms: u64,
    /// The sealed file.
    pub sealed: Option<Sealed>,
    /// Chunks, contiguous from 32.
    pub chunks: Vec<Chunk>,
}

impl SegmentState {
    /// The end of the bytes the replica holds of this segment.
    pub fn end(&self) -> u64 {
        match &self.sealed {
            Some(s) => s.logical,
            None => self.chunks.last().map_or(RECORDS_START, |c| c.to),
        }
    }
}

/// The whole replica as of some manifest: every blob, patch and log segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// Hex of `logbook.root`.
    pub root_header: String,
    /// Blobs by SHA-256.
    pub blobs: BTreeMap<String, Object>,
    /// Patches by name.
    pub patches: BTreeMap<String, Object>,
    /// Logs by path, segments by number.
    pub logs: BTreeMap<String, BTreeMap<u64, SegmentState>>,
}

impl State {
    /// Applies manifest `m` (named `key`): a full one replaces the state, a delta changes it.
    pub fn apply(&mut self, key: &str, m: &Manifest) -> Result<(), ReplicaError> {
        if m.full {
            *self = State::default();
        }
        self.root_header.clone_from(&m.root_header);
        for b in &m.blobs {
            let name = b.key.rsplit('/').next().unwrap_or_default().to_owned();
            self.blobs.insert(name, b.clone());
        }
        for p in &m.patches {
            let name = p.key.rsplit('/').next().unwrap_or_default().to_owned();
            self.patches.insert(name, p.clone());
        }
        for log in &m.logs {
            let segs = self.logs.entry(log.path.clone()).or_default();
            for e in &log.segments {
                let s = segs.entry(e.segment).or_default();
                s.mtime_ms = e.mtime_ms;
                if let Some(sealed) = &e.sealed {
                    s.sealed = Some(sealed.clone());
                    s.chunks.clear();
                }
                for c in &e.chunks {
                    if s.sealed.is_some() || c.from != s.end() || c.to <= c.from {
                        return Err(ReplicaError::manifest(
                            key,
                            format!(
                                "chunk {} of {} segment {} does not continue the segment (it \
                                 ends at {})",
                                c.key,
                                log.path,
                                e.segment,
                                s.end()
                            ),
                        ));
                    }
                    s.chunks.push(c.clone());
                }
            }
            let first = segs.keys().next().copied().unwrap_or(0);
            if let Some((gap, _)) = segs
                .keys()
                .enumerate()
                .find(|(i, n)| first + *i as u64 != **n)
            {
                return Err(ReplicaError::manifest(
                    key,
                    format!(
                        "{} has a gap in its segments at {}",
                        log.path,
                        first + gap as u64
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The full manifest of this state.
    pub fn full(&self, round: u64, created_ms: u64, parent: Option<Link>) -> Manifest {
        Manifest {
            round,
            created_ms,
            full: true,
            parent,
            root_header: self.root_header.clone(),
            blobs: self.blobs.values().cloned().collect(),
            patches: self.patches.values().cloned().collect(),
            logs: self
                .logs
                .iter()
                .map(|(path, segs)| LogEntry {
                    path: path.clone(),
                    segments: segs
                        .iter()
                        .map(|(n, s)| SegmentEntry {
                            segment: *n,
                            mtime_ms: s.mtime_ms,
                            sealed: s.sealed.clone(),
                            chunks: s.chunks.clone(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// What `self` holds beyond `base` for the logs in `paths` (and every blob and patch), as
    /// a delta manifest; `None` when nothing changed.
    pub fn delta<'a>(
        &self,
        base: &State,
        paths: impl Iterator<Item = &'a String>,
        round: u64,
        created_ms: u64,
        parent: Link,
    ) -> Option<Manifest> {
        let blobs: Vec<Object> = (self.blobs.iter())
            .filter(|(k, _)| !base.blobs.contains_key(*k))
            .map(|(_, v)| v.clone())
            .collect();
        let patches: Vec<Object> = (self.patches.iter())
            .filter(|(k, _)| !base.patches.contains_key(*k))
            .map(|(_, v)| v.clone())
            .collect();
        let empty = BTreeMap::new();
        let mut logs = Vec::new();
        for path in paths {
            let Some(segs) = self.logs.get(path) else {
                continue;
            };
            let before = base.logs.get(path).unwrap_or(&empty);
            let mut segments = Vec::new();
            for (n, s) in segs {
                let old = before.get(n);
                if old == Some(s) {
                    continue;
                }
                let mut e = SegmentEntry {
                    segment: *n,
                    mtime_ms: s.mtime_ms,
                    sealed: None,
                    chunks: Vec::new(),
                };
                match (&s.sealed, old) {
                    (Some(sealed), Some(o)) if o.sealed.as_ref() == Some(sealed) => {}
                    (Some(sealed), _) => e.sealed = Some(sealed.clone()),
                    (None, Some(o)) if o.sealed.is_none() && s.chunks.starts_with(&o.chunks) => {
                        e.chunks = s.chunks[o.chunks.len()..].to_vec();
                    }
                    (None, _) => e.chunks = s.chunks.clone(),
                }
                segments.push(e);
            }
            if !segments.is_empty() {
                logs.push(LogEntry {
                    path: path.clone(),
                    segments,
                });
            }
        }
        if blobs.is_empty() && patches.is_empty() && logs.is_empty() {
            return None;
        }
        Some(Manifest {
            round,
            created_ms,
            full: false,
            parent: Some(parent),
            root_header: self.root_header.clone(),
            blobs,
            patches,
            logs,
        })
    }

    /// Every object the state names.
    pub fn objects(&self) -> usize {
        self.blobs.len()
            + self.patches.len()
            + (self.logs.values().flat_map(|l| l.values()))
                .map(|s| s.chunks.len() + usize::from(s.sealed.is_some()))
                .sum::<usize>()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn chunk(from: u64, to: u64) -> Chunk {
        let sha = "a".repeat(64);
        Chunk {
            key: DataName::Chunk(
                "root-log".into(),
                0,
                from,
                to,
                sha[..NAME_SHA_HEX].to_owned(),
            )
            .name(3),
            bytes: 9,
            sha256: sha,
            from,
            to,
        }
    }

    #[test]
    fn names_round_trip() {
        let sha = "0123456789abcdef".repeat(4);
        let short = sha[..NAME_SHA_HEX].to_owned();
        for n in [
            DataName::Blob(sha.clone()),
            DataName::Patch(sha.clone()),
            DataName::Sealed("sessions/a.b-c/log".into(), 7, short.clone()),
            DataName::Chunk("sessions/x/diagnostics".into(), 2, 32, 4096, short.clone()),
            DataName::Chunk("root-log".into(), 0, 32, 99, short.clone()),
        ] {
            let name = n.name(42);
            assert_eq!(round_of(&name), Some(42), "{name}");
            assert_eq!(DataName::parse(&name), Some(n), "{name}");
        }
        assert_eq!(DataName::parse("data/00000000000000000001/blob/xyz"), None);
        let m = manifest_name(7, 1234);
        assert_eq!(parse_manifest_name(&m), Some((7, 1234)));
        assert!(
            manifest_name(8, 1) < manifest_name(7, 9999),
            "newer sorts first"
        );
    }

    #[test]
    fn encode_decode_and_damage() {
        let mut st = State {
            root_header: "00".repeat(20),
            ..State::default()
        };
        st.logs.entry("root-log".into()).or_default().insert(
            0,
            SegmentState {
                mtime_ms: 5,
                sealed: None,
                chunks: vec![chunk(32, 100)],
            },
        );
        let m = st.full(3, 99, None);
        let (bytes, sha) = encode(&m).unwrap();
        let key = manifest_name(3, 99);
        let (back, sha2) = decode(&key, &bytes).unwrap();
        assert_eq!((back.clone(), sha2), (m, sha));
        let mut again = State::default();
        again.apply(&key, &back).unwrap();
        assert_eq!(again, st);
        for i in [0, 9, 20, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert!(decode(&key, &bad).is_err(), "flip at {i}");
        }
        assert!(decode(&key, &bytes[..bytes.len() - 1]).is_err());
        assert!(
            decode(&manifest_name(4, 99), &bytes).is_err(),
            "round not its name's"
        );
        let mut newer = bytes.clone();
        newer[8] = 2;
        assert!(matches!(
            decode(&key, &newer),
            Err(ReplicaError::UnsupportedVersion { version: 2, .. })
        ));
    }

    #[test]
    fn deltas_continue_and_gaps_are_refused() {
        let mut base = State::default();
        base.logs.entry("l".into()).or_default().insert(
            0,
            SegmentState {
                mtime_ms: 1,
                sealed: None,
                chunks: vec![chunk(32, 100)],
            },
        );
        let mut now = base.clone();
        let s = now.logs.get_mut("l").unwrap().get_mut(&0).unwrap();
        s.chunks.push(chunk(100, 180));
        let paths = ["l".to_owned()];
        let link = Link {
            key: "k".into(),
            sha256: "s".into(),
        };
        let d = now.delta(&base, paths.iter(), 2, 2, link.clone()).unwrap();
        assert_eq!(d.logs[0].segments[0].chunks, vec![chunk(100, 180)]);
        let mut applied = base.clone();
        applied.apply("d", &d).unwrap();
        assert_eq!(applied, now);
        assert!(now.delta(&now, paths.iter(), 2, 2, link).is_none());
        // A chunk that does not continue its segment is refused.
        let mut wrong = d.clone();
        wrong.logs[0].segments[0].chunks[0].from = 101;
        assert!(base.clone().apply("d", &wrong).is_err());
        // A segment gap is refused.
        let mut gap = d;
        gap.logs[0].segments[0].segment = 2;
        gap.logs[0].segments[0].chunks = vec![chunk(32, 40)];
        assert!(base.clone().apply("d", &gap).is_err());
    }
}
