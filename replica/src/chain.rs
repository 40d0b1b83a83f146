//! Finding a manifest and reading the chain of manifests it rests on.

use crate::error::ReplicaError;
use crate::manifest::{self, Link, Manifest, State};
use crate::store::Store;

/// A manifest read from the bucket, with what it took to read it.
#[derive(Clone, Debug)]
pub struct Read {
    /// Its name.
    pub key: String,
    /// Its body.
    pub manifest: Manifest,
    /// SHA-256 of its compressed body.
    pub sha256: String,
    /// Length of the object.
    pub bytes: u64,
}

/// The name of the newest manifest, or of the newest written at or before `at_ms`.
pub fn find(store: &Store, at_ms: Option<u64>) -> Result<Option<String>, ReplicaError> {
    let limit = if at_ms.is_none() { Some(1) } else { None };
    let listed = store.list("manifests/", None, limit)?;
    Ok(listed
        .into_iter()
        .filter_map(|l| Some((manifest::parse_manifest_name(&l.name)?, l.name)))
        .find(|((_, ms), _)| at_ms.is_none_or(|at| *ms <= at))
        .map(|(_, name)| name))
}

/// Reads manifest `key` and its parents back to the full manifest it rests on, checking each
/// link; returns the state they describe and the manifests, oldest (the full one) first.
pub fn read(store: &Store, key: &str) -> Result<(State, Vec<Read>), ReplicaError> {
    let mut chain: Vec<Read> = Vec::new();
    let mut next = key.to_owned();
    let mut expect: Option<String> = None;
    loop {
        let bytes = store.get(&next).map_err(|e| match e {
            ReplicaError::MissingObject { key } => {
                ReplicaError::manifest(&key, "is missing: a newer manifest names it as its parent")
            }
            e => e,
        })?;
        let (m, sha) = manifest::decode(&next, &bytes)?;
        if let Some(want) = &expect {
            if *want != sha {
                return Err(ReplicaError::manifest(
                    &next,
                    "its SHA-256 is not the one its child names: it was replaced or damaged",
                ));
            }
        }
        if let Some(child) = chain.last() {
            if m.round >= child.manifest.round {
                return Err(ReplicaError::manifest(
                    &child.key,
                    "its parent is not of an earlier round",
                ));
            }
        }
        let full = m.full;
        let parent = m.parent.clone();
        chain.push(Read {
            key: next.clone(),
            manifest: m,
            sha256: sha,
            bytes: bytes.len() as u64,
        });
        if full {
            break;
        }
        let Some(Link { key, sha256 }) = parent else {
            return Err(ReplicaError::manifest(
                &next,
                "a delta manifest without a parent",
            ));
        };
        next = key;
        expect = Some(sha256);
    }
    chain.reverse();
    let mut state = State::default();
    for r in &chain {
        state.apply(&r.key, &r.manifest)?;
    }
    Ok((state, chain))
}
