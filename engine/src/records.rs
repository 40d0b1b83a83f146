//! Log record kinds and payloads (postcard), see `docs/format.md`.

use crate::error::EngineError;
use crate::event::{Branch, Event};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Session log: one event (`EventRecord`).
pub(crate) const KIND_EVENT: u8 = 1;
/// Session log: the receipt of the mutation whose events precede it in the same batch.
pub(crate) const KIND_RECEIPT: u8 = 2;
/// Session log: a fork marker (`crate::fork::ForkMarker`), written once, right after the
/// history copied from the source; receipts before it belong to the source and are ignored.
pub(crate) const KIND_FORK: u8 = 3;
/// Root log: a Session registration, which is also createSession's receipt.
pub(crate) const KIND_SESSION: u8 = 16;
/// Root log: a forked Session's registration, which is also the fork's receipt
/// (`crate::fork::ForkRecord`).
pub(crate) const KIND_FORK_SESSION: u8 = 17;
/// Root log: a layered fork's registration (`crate::fork::ForkRecord`), which is also the
/// fork's receipt and its base (source and fence); written by this build.
pub(crate) const KIND_LAYERED_FORK: u8 = 18;

#[derive(Serialize)]
pub(crate) struct EventRecordRef<'a> {
    pub sequence: u64,
    pub event: &'a Event,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct EventRecord {
    pub sequence: u64,
    pub event: Event,
}

/// What a mutation returned, kept so a repeat returns it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Outcome {
    Append {
        first: u64,
        last: u64,
    },
    Send {
        invocation: String,
        sequence: u64,
    },
    Sequence {
        sequence: u64,
    },
    /// A fork reserved in the source Session under this operation (see `crate::fork`).
    Fork {
        session_id: String,
        through: u64,
        turn: Option<String>,
    },
    /// A stored workspace patch (see `crate::patches`).
    Patch {
        patch_id: String,
        bytes: u64,
        digest: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Receipt {
    pub operation: String,
    pub params: [u8; 32],
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionRecord {
    pub session_id: String,
    pub workspace: Option<String>,
    pub branch: Option<Branch>,
    pub operation: String,
    pub params: [u8; 32],
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("encoding into a Vec cannot fail for these types")
}

pub(crate) fn decode<'a, T: Deserialize<'a>>(
    path: &Path,
    what: &str,
    bytes: &'a [u8],
) -> Result<T, EngineError> {
    postcard::from_bytes(bytes)
        .map_err(|e| EngineError::corrupt(path, format!("cannot decode {what}: {e}")))
}

/// Digest of a mutation's canonical parameters: its name, then the postcard of its inputs.
pub(crate) fn params_digest<T: Serialize>(mutation: &str, params: &T) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(mutation.as_bytes());
    h.update([0u8]);
    h.update(encode(params));
    h.finalize().into()
}

/// First 8 bytes of SHA-256 of an operation string: the key of the receipt index.
pub(crate) fn operation_hash(operation: &str) -> u64 {
    let d = Sha256::digest(operation.as_bytes());
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}
