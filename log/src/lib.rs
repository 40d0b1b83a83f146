//! `logbook-log`: the segmented, CRC-framed, append-only log under every Logbook Session.
//!
//! The log knows records (a kind byte and opaque payload bytes), not Sessions. Records are
//! appended in **batches** that are atomic on recovery: after a crash a batch is wholly present
//! or wholly absent. The byte layout is in `docs/format.md`; this crate implements exactly it.
//!
//! # Invariants
//!
//! - Every frame carries its length, a header CRC and a record CRC, both bound to the frame's
//!   own segment and offset; nothing is returned as data unless its CRC matched.
//! - A [`Location`] (segment, logical offset) never changes: sealing compresses a segment in
//!   independent 64 KiB blocks but keeps its logical offsets (a block table maps them).
//! - With [`Durability::Sync`], `append` returns after fdatasync; concurrent appenders share
//!   one sync (group commit). After a failed write or sync the log is poisoned: every further
//!   append fails until it is reopened. Nothing is retried silently. A process that reopens a
//!   poisoned log first calls [`Log::cut_unsynced`], so the reopen trusts only bytes a
//!   completed fdatasync covered (the page cache may hold ones that never reach the disk).
//! - Only the newest segment can have a torn tail; open cuts it (after copying it beside the
//!   segment) and syncs the cut before anything is appended. Any other damage is an error naming
//!   file and offset; a bad record is never skipped.
//! - Open costs O(unsealed tail): sealed segments are only listed; each is opened, mapped and
//!   its header, footer and block table checked on the first read touching it (an error of
//!   that read, and of every later one, naming file and offset). [`Log::open_from`] checks only the newest segment's bytes after a durable
//!   mark the caller supplies (and proves that mark first). [`Log::verify`] walks every
//!   checksum.
//! - With [`Durability::Sync`], the newest segment ends in a zero-filled region ahead of the
//!   write position, so a commit's fdatasync only overwrites allocated blocks (an extension
//!   is synced by the commit that needed it, with its batch). The region grows with the
//!   write rate: it starts at [`PREALLOCATE_FIRST_BYTES`] and each
//!   extension doubles the last, up to [`LogConfig::preallocate_bytes`]; dropping the log
//!   (and rolling a segment) gives the unused zeros back, so an empty log costs 16 KiB on
//!   disk while open and one block closed. The zeros are never part of the logical stream.
//! - Sealing runs on at most [`SEALER_THREADS_MAX`] threads shared by every log of the
//!   process, which exist only while there is sealing to do: an idle log has no thread.
//!   A [`BulkWriter`] (a new log written straight as sealed segments, for an import) has
//!   [`SEALER_THREADS_MAX`] compressor threads of its own for as long as it lives.
//! - Sealed segments are read through read-only maps, and a mapped file is never modified in
//!   place. Readers take only short locks and never wait for a sync. Streaming readers
//!   ([`Log::streaming_reader`], [`Log::streaming_scan`]) read sealed blocks with `pread`
//!   and keep none, for passes over much history in bounded memory.
//!
//! # Example
//!
//! ```
//! use logbook_log::{Log, LogConfig, Record};
//! let dir = tempfile::tempdir()?;
//! let log = Log::create(&dir.path().join("log"), LogConfig::default())?;
//! let at = log.append(&[Record { kind: 1, payload: b"hello" }, Record { kind: 2, payload: b"world" }])?;
//! assert_eq!(log.read(at[1])?.payload, b"world");
//! drop(log);
//! let (log, recovery) = Log::open(&dir.path().join("log"), LogConfig::default())?;
//! assert_eq!(recovery.cut_bytes, 0);
//! let all: Vec<_> = log.scan(log.start()).collect::<Result<_, _>>()?;
//! assert_eq!(all.len(), 2);
//! assert!(all[1].2, "the second record ends its batch");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod bulk;
mod cache;
mod error;
mod format;
#[doc(hidden)]
pub mod io;
mod log;
mod mark;
mod pending;
mod sealed;
mod walk;

pub use crate::bulk::BulkWriter;
pub use crate::cache::{BlockCache, BLOCK_CACHE_BYTES};
pub use crate::error::{ErrorKind, LogError};
pub use crate::format::{
    active_segment_header, BATCH_BYTES_MAX, BLOCK_BYTES, CUT_HEADER_BYTES, LOG_FORMAT_VERSION,
    RECORD_PAYLOAD_BYTES_MAX, ZSTD_LEVEL,
};
pub use crate::mark::{sync_file_system, GroupMark};
/// Length of the segment header at the start of every segment's logical stream: records
/// start at this offset.
pub const SEGMENT_HEADER_BYTES: u64 = crate::format::HEADER_BYTES;
pub use crate::log::{
    background_thread, settle_closed_seals, Durability, Location, Log, LogConfig, NameSync,
    OwnedRecord, Reader, Record, RecordRef, Recovery, Scan, VerifyReport, BACKGROUND_NICENESS,
    CLOSED_SEAL_DEFER_MAX, CLOSED_SEAL_PAUSE, GROUP_COMMIT_GATHER_MAX, PREALLOCATE_BYTES,
    PREALLOCATE_FIRST_BYTES, SEALER_THREADS_MAX, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN,
    UNSYNCED_MARK, WRITE_BUFFER_BYTES,
};

/// Internal layouts, exposed for the fuzz targets and format tests only.
#[doc(hidden)]
pub mod internals {
    pub use crate::format::*;
    pub use crate::walk::{judge_tail, judge_tail_at, walk, walk_at, Tail, Walk};
}
