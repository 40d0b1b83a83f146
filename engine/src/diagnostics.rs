//! Session diagnostics: operational failure records (execution, model step, automatic title)
//! with their own revision, independent of history.
//!
//! Each Session that ever recorded one has a small `logbook-log` log in
//! `sessions/<id>/diagnostics/`. One record (kind 1) holds one diagnostic together
//! with the receipt of the `recordDiagnostic` operation that made it, so after a crash both or
//! neither exist. The diagnostics revision is the number of diagnostics recorded (dense from
//! 1); a page under fence `through` sees the diagnostics with revision `<= through`, newest
//! first. The log is read whole when first used: diagnostics are few and small (a cause is at
//! most [`DIAGNOSTIC_MESSAGE_BYTES_MAX`] bytes), so this is O(diagnostics), never O(history).
//!
//! `at` is milliseconds since the Unix epoch (UTC) when the diagnostic was recorded;
//! `sequence` is the Session's history revision at that moment. A fork starts with no
//! diagnostics: failures of the source never show in it.
//!
//! Receipts: a `recordDiagnostic` operation is scoped to its Session. A repeat with the same
//! parameters returns the first result; other parameters, or an operation that the Session's
//! history mutations already used, fail with Conflict. The other way round, every other
//! mutation of the Session (append, send, stop, respond, fork, snapshotPatch) asks the
//! Session's diagnostics (`DiagLog::recorded`, which reads the log on first use, so this holds
//! across restarts) and fails with Conflict when its operation recorded a diagnostic.
//!
//! The race between a `recordDiagnostic` and another mutation of the same Session with the
//! same operation is decided by the Session's writer lock: each checks and commits under it.
//! `recordDiagnostic` (through `Session::with_operation`) holds it from its look-up of the
//! Session's receipts and fork operations until its diagnostic and receipt are in the
//! diagnostics log and in `receipts`; every other mutation (`Session::mutate`,
//! `Session::with_writer` for a fork) holds it from its look-up here until its receipt is in
//! the Session log (a fork: until the source knows the fork's operation). So one of the two
//! runs wholly before the other, and the second finds the first's receipt: Conflict. A
//! mutation that fails stores no receipt and does not block the other.
//!
//! Lock order: the Session's writer lock, then (a Session's `inner`, released again, then) the
//! diagnostics state lock. The state lock is a leaf: no other engine lock is taken while it is
//! held (only the diagnostics log's own I/O runs under it), so a mutation holding Session locks
//! may wait for it, and nothing holding it ever waits for a Session lock.

use crate::error::EngineError;
use crate::records;
use crate::sync::lock;
use base64::Engine as _;
use logbook_log::Log;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Record kind of a diagnostic (with its receipt) in a diagnostics log.
pub(crate) const KIND_DIAGNOSTIC: u8 = 1;
/// Default diagnostics per page.
pub const DIAGNOSTICS_PAGE_DEFAULT: u32 = 64;
/// Most diagnostics per page.
pub const DIAGNOSTICS_PAGE_MAX: u32 = 1024;
/// Longest `cause.code`, in bytes.
pub const DIAGNOSTIC_CODE_BYTES_MAX: usize = 64;
/// Longest `cause.message`, in bytes.
pub const DIAGNOSTIC_MESSAGE_BYTES_MAX: usize = 4096;
/// Version byte of diagnostics cursors.
pub const DIAGNOSTICS_CURSOR_VERSION: u8 = 1;
const CURSOR_MAGIC: u8 = b'D';
const CURSOR_BYTES: usize = 30;
pub(crate) const DIAGNOSTICS_DIR: &str = "diagnostics";

/// What failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DiagnosticKind {
    Execution,
    ModelStep,
    Title,
}

/// A safe, typed cause: a short machine code and a bounded human message (never a provider
/// body). `code` is 1 to [`DIAGNOSTIC_CODE_BYTES_MAX`] bytes of `[A-Za-z0-9._-]`; `message`
/// at most [`DIAGNOSTIC_MESSAGE_BYTES_MAX`] bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticCause {
    pub code: String,
    #[serde(default)]
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordDiagnosticParams {
    pub session_id: String,
    pub operation: String,
    pub kind: DiagnosticKind,
    /// The invocation the failure belongs to; it must exist in the Session.
    pub invocation: String,
    pub cause: DiagnosticCause,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordDiagnosticResult {
    pub id: String,
    /// The diagnostics revision this diagnostic got.
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostic {
    pub id: String,
    pub kind: DiagnosticKind,
    pub invocation: String,
    /// The Session's history revision when the diagnostic was recorded.
    pub sequence: u64,
    pub cause: DiagnosticCause,
    /// Milliseconds since the Unix epoch (UTC).
    pub at: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiagnosticsParams {
    pub session_id: String,
    #[serde(default)]
    pub through: Option<u64>,
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsPage {
    /// The diagnostics fence of this page (pin it for the following pages).
    pub through: u64,
    /// Newest first.
    pub diagnostics: Vec<Diagnostic>,
    pub next_after: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchDiagnosticsParams {
    pub session_id: String,
    #[serde(default)]
    pub after: Option<u64>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsRevision {
    pub revision: u64,
}

/// Disk form of one diagnostic and its receipt (postcard).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct DiagRecord {
    pub(crate) revision: u64,
    pub(crate) diagnostic: Diagnostic,
    pub(crate) operation: String,
    pub(crate) params: [u8; 32],
}

#[derive(Default)]
pub(crate) struct DiagState {
    /// False until the log has been read (on the first use of the diagnostics).
    pub(crate) loaded: bool,
    pub(crate) log: Option<Log>,
    pub(crate) items: Vec<Diagnostic>,
    pub(crate) receipts: HashMap<String, ([u8; 32], RecordDiagnosticResult)>,
}

/// One Session's diagnostics, loaded on first use.
pub(crate) struct DiagLog {
    pub(crate) dir: PathBuf,
    pub(crate) config: logbook_log::LogConfig,
    /// A reader's (beside the Root's writer): its log is opened read-only and taken in again
    /// on every read, since the writer may have recorded more.
    pub(crate) read_only: bool,
    pub(crate) state: Mutex<DiagState>,
    pub(crate) changed: Condvar,
}

impl DiagLog {
    /// The diagnostics of the Session whose directory is `session_dir` (nothing is read yet).
    pub(crate) fn new(
        session_dir: &Path,
        config: logbook_log::LogConfig,
        read_only: bool,
    ) -> DiagLog {
        DiagLog {
            dir: session_dir.join(DIAGNOSTICS_DIR),
            config,
            read_only,
            state: Mutex::new(DiagState::default()),
            changed: Condvar::new(),
        }
    }

    /// Wakes every `watchDiagnostics` waiting on this log, so each checks its condition
    /// again. The state lock is taken first (see `Session::wait_for` for why).
    pub(crate) fn wake_waiters(&self) {
        drop(lock(&self.state));
        self.changed.notify_all();
    }

    /// Locks the state, reading the log first on the first use (again after a failed read).
    pub(crate) fn state(&self) -> Result<MutexGuard<'_, DiagState>, EngineError> {
        let mut st = lock(&self.state);
        if !st.loaded || self.read_only {
            *st = Self::load(&self.dir, self.config.clone(), self.read_only)?;
        }
        Ok(st)
    }

    /// The id of the diagnostic that `operation` recorded in this Session, if it recorded one.
    /// Takes the state lock only for the look-up (it is a leaf lock: see the module doc).
    pub(crate) fn recorded(&self, operation: &str) -> Result<Option<String>, EngineError> {
        Ok(self
            .state()?
            .receipts
            .get(operation)
            .map(|(_, r)| r.id.clone()))
    }

    /// Reads the log in `dir` whole (an empty state when it was never made).
    fn load(
        dir: &Path,
        config: logbook_log::LogConfig,
        read_only: bool,
    ) -> Result<DiagState, EngineError> {
        let mut st = DiagState {
            loaded: true,
            ..DiagState::default()
        };
        if dir.is_dir() {
            let log = if read_only {
                Log::open_read_only(dir, config, None)?
            } else {
                Log::open(dir, config)?.0
            };
            for item in log.scan(log.start()) {
                let (loc, record, _) = item?;
                if record.kind != KIND_DIAGNOSTIC {
                    return Err(EngineError::corrupt(
                        dir,
                        format!("unknown record kind {} at {loc:?}", record.kind),
                    ));
                }
                let r: DiagRecord = records::decode(dir, "a diagnostic record", &record.payload)?;
                if r.revision != st.items.len() as u64 + 1 {
                    return Err(EngineError::corrupt(
                        dir,
                        format!(
                            "diagnostic at {loc:?} has revision {} where {} was expected",
                            r.revision,
                            st.items.len() + 1
                        ),
                    ));
                }
                st.receipts.insert(
                    r.operation.clone(),
                    (
                        r.params,
                        RecordDiagnosticResult {
                            id: r.diagnostic.id.clone(),
                            revision: r.revision,
                        },
                    ),
                );
                st.items.push(r.diagnostic);
            }
            st.log = Some(log);
        }
        Ok(st)
    }

    pub(crate) fn revision(&self) -> Result<u64, EngineError> {
        Ok(self.state()?.items.len() as u64)
    }
}

/// Diagnostics logs of the Root's Sessions by Session id, each read on its first use.
#[derive(Default)]
pub(crate) struct DiagLogs {
    open: Mutex<HashMap<String, Arc<DiagLog>>>,
}

impl DiagLogs {
    /// The diagnostics log of Session `id`, whose directory is `session_dir` (made here on the
    /// first ask, without reading anything). The Session keeps it when it is opened, so its
    /// mutations can refuse an operation that recorded a diagnostic.
    pub(crate) fn of(
        &self,
        id: &str,
        session_dir: &Path,
        config: logbook_log::LogConfig,
        read_only: bool,
    ) -> Arc<DiagLog> {
        let mut open = lock(&self.open);
        Arc::clone(
            open.entry(id.to_owned())
                .or_insert_with(|| Arc::new(DiagLog::new(session_dir, config, read_only))),
        )
    }
}

pub(crate) fn validate_cause(c: &DiagnosticCause) -> Result<(), EngineError> {
    let ok = !c.code.is_empty()
        && c.code.len() <= DIAGNOSTIC_CODE_BYTES_MAX
        && c.code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(EngineError::invalid(format!(
            "cause.code {:?} must be 1 to {DIAGNOSTIC_CODE_BYTES_MAX} characters of A-Z a-z 0-9 . _ -",
            c.code
        )));
    }
    if c.message.len() > DIAGNOSTIC_MESSAGE_BYTES_MAX {
        return Err(EngineError::invalid(format!(
            "cause.message is {} bytes; at most {DIAGNOSTIC_MESSAGE_BYTES_MAX} are kept (no provider bodies)",
            c.message.len()
        )));
    }
    Ok(())
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(crate) fn encode_cursor(session_id: &str, through: u64, last: u64) -> String {
    let mut b = Vec::with_capacity(CURSOR_BYTES);
    b.push(CURSOR_MAGIC);
    b.push(DIAGNOSTICS_CURSOR_VERSION);
    b.extend_from_slice(&crate::cursor::session_tag(session_id));
    b.extend_from_slice(&through.to_le_bytes());
    b.extend_from_slice(&last.to_le_bytes());
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(b.len(), CURSOR_BYTES, "cursor layout");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// Returns the revision of the last diagnostic the previous page returned.
pub(crate) fn decode_cursor(
    text: &str,
    session_id: &str,
    through: u64,
) -> Result<u64, EngineError> {
    let bad = |why: &str| {
        EngineError::invalid(format!(
            "diagnostics cursor `after` {why}; pass the nextAfter of the previous page with the \
             same sessionId and through, or null to start over"
        ))
    };
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.as_bytes())
        .map_err(|_| bad("is not a cursor this engine made"))?;
    if b.len() != CURSOR_BYTES || b[0] != CURSOR_MAGIC {
        return Err(bad("is not a diagnostics cursor"));
    }
    let crc = u32::from_le_bytes(b[26..30].try_into().expect("4 bytes"));
    if crc32fast::hash(&b[..26]) != crc {
        return Err(bad("is damaged (checksum mismatch)"));
    }
    if b[1] != DIAGNOSTICS_CURSOR_VERSION {
        return Err(bad(&format!("has version {}", b[1])));
    }
    if b[2..10] != crate::cursor::session_tag(session_id) {
        return Err(bad("belongs to another Session"));
    }
    let fence = u64::from_le_bytes(b[10..18].try_into().expect("8 bytes"));
    if fence != through {
        return Err(bad(&format!("was made under fence {fence}, not {through}")));
    }
    let last = u64::from_le_bytes(b[18..26].try_into().expect("8 bytes"));
    if last == 0 || last > through {
        return Err(bad("points outside its fence"));
    }
    Ok(last)
}

/// Creates the diagnostics log directory: built under a temporary name and renamed, so a
/// half-made log never appears.
pub(crate) fn create_log(dir: &Path, config: logbook_log::LogConfig) -> Result<Log, EngineError> {
    let tmp = dir.with_extension("tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)
            .map_err(|e| EngineError::io(&tmp, "remove a half-made diagnostics log", e))?;
    }
    drop(Log::create(&tmp, config.clone())?);
    crate::fsutil::sync_dir(&tmp)?;
    std::fs::rename(&tmp, dir).map_err(|e| EngineError::io(dir, "rename into place", e))?;
    crate::fsutil::sync_dir(dir.parent().unwrap_or(Path::new(".")))?;
    let (log, _) = Log::open(dir, config)?;
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_binding() {
        let c = encode_cursor("a", 9, 4);
        assert_eq!(decode_cursor(&c, "a", 9).expect("ok"), 4);
        assert!(decode_cursor(&c, "b", 9).is_err());
        assert!(decode_cursor(&c, "a", 8).is_err());
        assert!(decode_cursor("zzzz", "a", 9).is_err());
    }

    #[test]
    fn cause_validation() {
        let ok = DiagnosticCause {
            code: "provider.timeout".into(),
            message: "no answer in 30 s".into(),
        };
        assert!(validate_cause(&ok).is_ok());
        for code in ["", "has space", &"x".repeat(65)] {
            let c = DiagnosticCause {
                code: code.into(),
                message: String::new(),
            };
            assert!(validate_cause(&c).is_err(), "{code:?}");
        }
        let long = DiagnosticCause {
            code: "x".into(),
            message: "m".repeat(DIAGNOSTIC_MESSAGE_BYTES_MAX + 1),
        };
        assert!(validate_cause(&long).is_err());
    }
}
