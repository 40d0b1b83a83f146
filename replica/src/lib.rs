//! `logbook-replica`: continuous replication of a Root to S3-compatible object storage, and
//! restore from it (docs/format.md, "Replicas in object storage").
//!
//! A [`Replicator`] follows a Root beside its writer, as the read-only readers do (no lock,
//! nothing written in the Root), and uploads in rounds: blobs, patches and sealed segment
//! files once each, the growing tail of every changed log as chunks of whole batches, then a
//! small manifest that names the objects making up a consistent Root at that moment.
//! [`restore`] builds a new Root from the newest manifest (or the last one at or before a
//! time), checking every object's SHA-256, then opens and verifies it.
//!
//! # Invariants
//!
//! - Only truth is uploaded (the Root header, the Root log, Session and diagnostics logs,
//!   blobs, patches); derived files are rebuilt by the restore's open.
//! - A chunk ends at a batch end a read-only `Log` found, so a restored Session is a prefix
//!   of whole mutations; the Root log is read before the Sessions, so every restored Session
//!   is registered.
//! - A manifest is uploaded only after every object it names; objects are named by round and
//!   content, never overwritten with other bytes, never deleted.
//! - A restore never leaves a Root that `verify` rejects: a missing or damaged object is an
//!   error naming it, and the directory is emptied again.
//! - The tokio runtime and the S3 client live inside [`Store`]; the API is synchronous.
//!
//! # Example
//!
//! ```no_run
//! use logbook_replica::{restore, Replicator, Store, Target};
//! # fn main() -> Result<(), logbook_replica::ReplicaError> {
//! let target = Target::from_env("s3://my-bucket/laptop", Some("http://127.0.0.1:9000"))?;
//! let mut replicator = Replicator::open(std::path::Path::new(".logbook"), Store::connect(&target)?)?;
//! let round = replicator.round()?; // or `run` until stopped
//! println!("uploaded {} objects, manifest {:?}", round.puts, round.manifest);
//! let report = restore(&Store::connect(&target)?, std::path::Path::new("/tmp/copy"), None)?;
//! println!("restored {} Sessions as of {} ms", report.sessions, report.created_ms);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod chain;
mod error;
pub mod manifest;
mod replicate;
mod restore;
pub mod store;

pub use error::ReplicaError;
pub use manifest::{MANIFEST_MAGIC, REPLICA_FORMAT_VERSION};
pub use replicate::{
    Replicator, RoundReport, IN_FLIGHT_MIB, LISTING_INTERVAL, OPEN_LOGS_MAX, RACY_MTIME,
    ROUND_BACKOFF_FIRST, ROUND_BACKOFF_MAX, ROUND_INTERVAL,
};
pub use restore::{restore, RestoreReport};
pub use store::{Listed, Store, Target, Traffic};

/// The manifest restore would take: the newest, or the newest at or before `at_ms`; `None`
/// when there is none.
pub fn find_manifest(store: &Store, at_ms: Option<u64>) -> Result<Option<String>, ReplicaError> {
    chain::find(store, at_ms)
}

/// The replica state as of manifest `key` (the full manifest it rests on and the deltas up to
/// it, each checked), and the number of manifests read.
pub fn read_manifest(store: &Store, key: &str) -> Result<(manifest::State, usize), ReplicaError> {
    chain::read(store, key).map(|(s, c)| (s, c.len()))
}
