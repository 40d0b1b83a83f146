//! `fork` and `forkReceipt`: a new Session that starts from a settled prefix of another.
//!
//! # What a fork is
//!
//! `fork {sessionId, operation, from, revision}` makes a new Session (generated id, the
//! source's workspace, no active work) whose history is the source's history through a fence
//! `through` (the source's `turnSettled` of `from.invocation`, or the whole history for
//! `{kind: "all"}`), followed by whatever is appended to the fork itself. Events keep their
//! sequences, so the fork's rows have the source's positions and a read of the fork under any
//! fence `<= through` equals the same read of the source. Attachments are blobs of the Root's
//! store, shared by digest (blobs are never deleted, so a fork can never lose one).
//!
//! # Layered forks (what this build writes)
//!
//! Nothing is copied. The fork's log starts with a base record (kind 4)
//! `{source, through, turn, rows}`, and holds only what is appended after the fork; its
//! indexes hold only its own entries. `Base::open` opens the source when the fork is opened
//! and keeps it in `Base`; the layered accessors of `Inner` and `Session::event_arc` send
//! every read of a sequence `<= through` or a row ordinal `< rows` to the source's ordinary
//! read path (recursively, for forks of forks). The source's events under the fence never
//! change: its later appends go after them and sealing rewrites a segment with the same
//! records, and reading through the source's `Log` (never by file name) is safe against both.
//! The fork's state after the fence is derived from the source's state on open
//! (`Base::state_at_fence`); search asks the source's postings for base rows.
//!
//! # Copied forks (first layout, still read)
//!
//! A fork written by an earlier build copied the prefix (hard links of sealed segments, the
//! fence's segment copied or re-framed, then a marker record of kind 3) and the index prefixes.
//! Such a Session reads nothing from its source; `crate::layer::apply_marker` applies the marker's rules.
//!
//! # How the branch is recorded
//!
//! Sequence 1 of a fork is the source's own `sessionCreated`. The branch
//! `{sessionId, through, turn}` is recorded in the Root log (a record of kind 17, which also
//! registers the Session, so `sessions` / `sessionInfo` report it) and in the fork's own log
//! (base record or marker). Neither is an event: no revision change, no row, nothing in
//! `watch`.
//!
//! # Fork rules (the state at the fence, as the fork sees it)
//!
//! - Receipts of the source are not inherited: operations used in the source never collide
//!   with operations on the fork.
//! - Pending interactions are dropped (the fork has no active work; forked Turns are settled
//!   anyway). A forked, unresolved interaction can still be read with `interaction`.
//! - `contextPrepared` events under the fence no longer count: they were not requests the fork
//!   made, so `context` on a fork is null until the fork prepares its own.
//! - Diagnostics are not inherited: a fork starts with an empty diagnostics log.
//!
//! # Cost
//!
//! A reservation receipt in the source (one fdatasync), one small file (the fork's first log
//! segment) and its directories fsynced, one Root log record, one rename: O(1) in the size of
//! the history. Opening the fork later costs O(state of the source) to derive the state at the
//! fence, and nothing per event or row of the base.
//!
//! # Receipts and atomicity
//!
//! The fork's operation is scoped to the SOURCE Session. The first call writes a reservation
//! receipt (no event) into the source log holding the new Session's id and the fence, after
//! checking `revision` and settledness under the source's writer lock. The fork is then built
//! under `sessions/.fork-<id>`, every file and directory fsynced, and published by one Root
//! log record (the commit point) followed by a rename into `sessions/<id>`. A kill at any
//! point leaves either no fork (the reservation alone: a repeat builds it, with the same id)
//! or a whole one. Open renames the staging directory of a committed fork whose rename did not
//! happen and removes staging directories of forks that never committed. `forkReceipt`
//! returns the result only once the fork is committed.

use crate::error::EngineError;
use crate::event::Branch;
pub use crate::params::{ForkFrom, ForkParams, ForkReceiptParams, ForkResult};
use crate::records::{self, ForkRecord, Outcome};
use crate::registry::Entry;
use crate::root::Root;
use crate::state::State;
use crate::sync::lock;
use crate::validate::validate_id;
use logbook_log::Durability;
use std::sync::Arc;

/// Crash-test hook: when the environment variable `LOGBOOK_FORK_FAILPOINT` names this
/// point, the process aborts there (as abruptly as a kill -9: no destructor runs). The tests
/// use it to prove every crash point leaves no fork or a whole one.
fn failpoint(name: &str) {
    if std::env::var_os("LOGBOOK_FORK_FAILPOINT").is_some_and(|v| v == name) {
        std::process::abort();
    }
}

fn fork_params(p: &ForkParams) -> [u8; 32] {
    let (kind, inv) = match &p.from {
        ForkFrom::Turn { invocation } => ("turn", Some(invocation.as_str())),
        ForkFrom::All => ("all", None),
    };
    records::params_digest("fork", &(kind, inv, p.revision))
}

/// Checks `revision` and settledness against the source's state; returns the fence and Turn.
fn check_fence(p: &ForkParams, state: &State) -> Result<(u64, Option<String>), EngineError> {
    if state.revision != p.revision {
        return Err(EngineError::conflict(format!(
            "Session {} is at revision {}, not {}; read it again and fork with its current revision",
            p.session_id, state.revision, p.revision
        )));
    }
    let (through, turn) = match &p.from {
        ForkFrom::All => (state.revision, None),
        ForkFrom::Turn { invocation } => {
            let st = state.maps()?.invocations.get(invocation).ok_or_else(|| {
                EngineError::not_found(format!(
                    "invocation {invocation:?} in Session {}",
                    p.session_id
                ))
            })?;
            if !st.settled {
                return Err(EngineError::conflict(format!(
                    "the Turn of invocation {invocation:?} is not settled; fork it once it is"
                )));
            }
            (st.settled_at, Some(invocation.clone()))
        }
    };
    // Every Turn inside the fence must be settled by it. For the whole history that is an
    // empty queue; a Turn fence must also rule out Turns settled after it.
    let unsettled: Option<&String> = match &p.from {
        ForkFrom::All => state.maps()?.queue.values().next(),
        ForkFrom::Turn { .. } => state
            .maps()?
            .invocations
            .iter()
            .find(|(_, s)| s.message <= through && !(s.settled && s.settled_at <= through))
            .map(|(inv, _)| inv),
    };
    if let Some(inv) = unsettled {
        return Err(EngineError::conflict(format!(
            "the Turn of invocation {inv:?} is inside the forked history but was not settled \
             by sequence {through}; every forked Turn must be settled"
        )));
    }
    Ok((through, turn))
}

fn used_for_another(p: &ForkParams) -> EngineError {
    EngineError::conflict(format!(
        "operation {:?} was already used in Session {} for another mutation",
        p.operation, p.session_id
    ))
}

impl Root {
    /// Forks a Session (see the module documentation of `fork`).
    pub fn fork(&self, p: ForkParams) -> Result<ForkResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        if let ForkFrom::Turn { invocation } = &p.from {
            validate_id("from.invocation", invocation)?;
        }
        let params = fork_params(&p);
        let sh = &self.shared;
        let _one_at_a_time = lock(&sh.extras.fork_lock);
        if let Some(r) = self.committed(&p.session_id, &p.operation, params)? {
            return Ok(r);
        }
        let source = self.session_with_maps(&p.session_id)?;
        let workspace = lock(&sh.registry)
            .sessions
            .get(&p.session_id)
            .map(|e| e.workspace.clone())
            .ok_or_else(|| EngineError::not_found(format!("Session {}", p.session_id)))?;
        // Under the source's writer lock: no mutation of the source runs until the fork is
        // committed and its operation is known to the source.
        let result = source.with_writer(&p.operation, |state, receipt| {
            let (new_id, through, turn) = match receipt {
                // A reservation left by a build that made copied forks, never committed:
                // commit the reserved fork (same id and fence), layered.
                Some(r) if r.params == params => match r.outcome {
                    Outcome::Fork {
                        session_id,
                        through,
                        turn,
                    } => (session_id, through, turn),
                    _ => return Err(used_for_another(&p)),
                },
                Some(_) => return Err(used_for_another(&p)),
                None => {
                    let (through, turn) = check_fence(&p, state)?;
                    let id = loop {
                        let id = sh.ids.next("s-");
                        if !lock(&sh.registry).taken(&id) {
                            break id;
                        }
                    };
                    (id, through, turn)
                }
            };
            failpoint("checked");
            if sh.options.durability == Durability::NoSyncBulkImport {
                // The fork reads the source's events through the fence: make them durable
                // first (with Sync every acknowledged event already is).
                source.log().sync()?;
            }
            let branch = Branch {
                session_id: p.session_id.clone(),
                through,
                turn,
            };
            let record = ForkRecord {
                session_id: new_id.clone(),
                workspace: workspace.clone(),
                branch: branch.clone(),
                operation: p.operation.clone(),
                params,
            };
            {
                let mut reg = lock(&sh.registry);
                if reg.taken(&new_id) {
                    return Err(EngineError::conflict(format!(
                        "Session id {new_id} reserved by operation {:?} was taken by createSession meanwhile",
                        p.operation
                    )));
                }
                // Reserved: the record is written outside the registry lock, so requests on
                // other Sessions do not wait for its sync.
                reg.reserved.insert(new_id.clone());
            }
            let payload = records::encode(&record);
            let appended = sh.root_log.append(&[logbook_log::Record {
                kind: records::KIND_LAYERED_FORK,
                payload: &payload,
            }]);
            let mut reg = lock(&sh.registry);
            reg.reserved.remove(&new_id);
            sh.reservation_ended.notify_all();
            appended?;
            // Committed: the record is the fork, its receipt and its base.
            failpoint("committed");
            let summary = Arc::new(crate::catalog::Summary::created_now());
            sh.journal.record(&new_id, 0, &summary);
            reg.sessions.insert(
                new_id.clone(),
                Entry {
                    workspace,
                    branch: Some(branch.clone()),
                    layered: true,
                    import: None,
                    slot: Default::default(),
                    summary,
                    spare: None,
                },
            );
            drop(reg);
            let result = ForkResult {
                session_id: new_id,
                branch,
            };
            lock(&sh.extras.forks).insert(
                (p.session_id.clone(), p.operation.clone()),
                (params, result.clone()),
            );
            source.add_fork_op(&p.operation);
            Ok(result)
        })?;
        // Its directory now (the first open makes it), outside the source's locks, so that a
        // reader beside this writer can read the fork at once. Should this fail, the fork's
        // next use makes it, as after a crash here.
        let _ = sh.session(&result.session_id);
        Ok(result)
    }

    fn committed(
        &self,
        source: &str,
        operation: &str,
        params: [u8; 32],
    ) -> Result<Option<ForkResult>, EngineError> {
        let forks = lock(&self.shared.extras.forks);
        match forks.get(&(source.to_owned(), operation.to_owned())) {
            None => Ok(None),
            Some((digest, r)) if *digest == params => Ok(Some(r.clone())),
            Some((_, r)) => Err(EngineError::conflict(format!(
                "operation {operation:?} already forked Session {source} into {} with other parameters; \
                 use a new operation",
                r.session_id
            ))),
        }
    }

    /// The fork an operation published from a source Session, or None when it published none.
    pub fn fork_receipt(&self, p: ForkReceiptParams) -> Result<Option<ForkResult>, EngineError> {
        validate_id("operation", &p.operation)?;
        if !lock(&self.shared.registry)
            .sessions
            .contains_key(&p.session_id)
        {
            return Err(EngineError::not_found(format!("Session {}", p.session_id)));
        }
        Ok(lock(&self.shared.extras.forks)
            .get(&(p.session_id, p.operation))
            .map(|(_, r)| r.clone()))
    }
}

/// Test hook: the path a fork of `id` is staged under.
#[doc(hidden)]
pub use crate::registry::fork_staging_dir as staging_dir;
