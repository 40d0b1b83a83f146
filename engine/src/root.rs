//! The Root: header, writer lock, the Root log of Sessions, the blob store, and the public API.

use crate::catalog::{Detail, Summary};
use crate::error::EngineError;
use crate::event::{AttachmentMeta, Event, InteractionResolved, StopRequested, UserMessage};
use crate::params::*;
use crate::progress::ProgressUnit;
use crate::records::{self, Outcome, Prepared, SessionRecord};
use crate::registry::*;
use crate::session::{Checkpoint, Mutation, Session};
use crate::state::State;
pub(crate) use crate::sync::lock;
use crate::validate::{validate_event, validate_id, validate_session_id, APPEND_EVENTS_MAX};
use base64::Engine as _;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Most decoded attachment bytes one `send` may carry.
pub const SEND_ATTACHMENT_BYTES_MAX: u64 = 64 << 20;
/// Threads that walk Sessions at once in a verify, at most (one per core up to this).
pub const VERIFY_THREADS_MAX: usize = 8;
/// Most attachments one `send` may carry.
pub const SEND_ATTACHMENTS_MAX: usize = 64;
/// Default and largest `readAttachments` chunk, in bytes.
pub const READ_ATTACHMENTS_BYTES_MAX: u64 = 1 << 20;
/// Longest workspace path, in bytes.
pub const WORKSPACE_BYTES_MAX: usize = 4096;
/// An open Root. `Send + Sync`; every method takes `&self`. One writer process per Root.
pub struct Root {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Root")
            .field("dir", &self.shared.dir)
            .finish()
    }
}

pub(crate) fn validate_workspace(w: &str) -> Result<(), EngineError> {
    if !w.starts_with('/') || w.contains('\0') || w.len() > WORKSPACE_BYTES_MAX {
        return Err(EngineError::invalid(format!(
            "workspace {w:?} must be an absolute path (starting with '/') of at most {WORKSPACE_BYTES_MAX} bytes without NUL"
        )));
    }
    Ok(())
}

/// Semantic checks of a batch against the state: ids that must be new or known.
pub(crate) fn check_batch(state: &State, events: &[&Event]) -> Result<(), EngineError> {
    let mut new_invocations = HashSet::new();
    let mut new_interactions = HashSet::new();
    let mut resolved = HashSet::new();
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::UserMessage(m)
                if state.maps()?.invocations.contains_key(&m.invocation)
                    || !new_invocations.insert(m.invocation.as_str()) =>
            {
                return Err(EngineError::conflict(format!(
                    "events[{i}]: invocation {:?} already has a userMessage; every Turn needs a new invocation",
                    m.invocation
                )));
            }
            Event::InteractionRequested(r)
                if state.maps()?.interactions.contains_key(&r.interaction_id)
                    || !new_interactions.insert(r.interaction_id.as_str()) =>
            {
                return Err(EngineError::conflict(format!(
                    "events[{i}]: interaction {:?} was already requested",
                    r.interaction_id
                )));
            }
            Event::InteractionResolved(r) => {
                let id = r.interaction_id.as_str();
                let known = state.maps()?.interactions.get(id);
                if known.is_none() && !new_interactions.contains(id) {
                    return Err(EngineError::not_found(format!(
                        "events[{i}]: interaction {id:?}"
                    )));
                }
                if known.is_some_and(|s| s.resolved.is_some()) || !resolved.insert(id) {
                    return Err(EngineError::conflict(format!(
                        "events[{i}]: interaction {id:?} is already resolved"
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

impl Root {
    /// Makes a new Root in `dir`, which must be absent or an empty directory; anything else is
    /// refused and nothing is touched.
    pub fn init(dir: &Path) -> Result<(), EngineError> {
        Shared::init(dir)
    }

    /// Opens a Root with default options (every mutation durable before it returns).
    pub fn open(dir: &Path) -> Result<Root, EngineError> {
        Root::open_with(dir, RootOptions::default())
    }

    /// `init` when `dir` is absent or empty, then `open`.
    pub fn open_or_init(dir: &Path) -> Result<Root, EngineError> {
        Root::open_or_init_with(dir, RootOptions::default())
    }

    /// `init` when `dir` is absent or empty, then `open_with`.
    pub fn open_or_init_with(dir: &Path, options: RootOptions) -> Result<Root, EngineError> {
        if is_empty_dir(dir)? {
            Root::init(dir)?;
        }
        Root::open_with(dir, options)
    }

    /// Opens a Root: checks the header, takes the writer lock (Busy if held), reads the Root log
    /// of Sessions, and finishes a createSession that a crash interrupted. Sessions themselves
    /// open lazily on first use.
    pub fn open_with(dir: &Path, options: RootOptions) -> Result<Root, EngineError> {
        Ok(Root {
            shared: Shared::open(dir, options)?,
        })
    }

    /// Opens a Root to read it beside the process that writes it (docs/format.md, "Readers
    /// beside the writer"): no lock is taken and nothing is ever written, so the writer is
    /// never kept out or slowed; every mutation answers [`EngineError::ReadOnly`]. Each read
    /// first takes in what the writer committed since the last look (at most every few
    /// milliseconds), so an acknowledged append is seen well within 100 ms.
    pub fn open_read_only(dir: &Path) -> Result<Root, EngineError> {
        Root::open_with(
            dir,
            RootOptions {
                read_only: true,
                ..RootOptions::default()
            },
        )
    }

    /// True for a Root opened read-only ([`Root::open_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.shared.options.read_only
    }

    /// The Root directory.
    pub fn path(&self) -> &Path {
        &self.shared.dir
    }

    /// Makes every open Session's indexes durable and checkpoints their state now.
    pub fn sync_indexes(&self) -> Result<(), EngineError> {
        self.shared.sync_all(Checkpoint::Now)
    }

    pub(crate) fn session(&self, id: &str) -> Result<Arc<Session>, EngineError> {
        self.shared.session(id)
    }

    /// [`Root::session`] for a call that uses the state's maps (the queue, interactions,
    /// internal tool calls, contexts): they are decoded here, and a checkpoint whose maps fail
    /// their checksum has the Session opened again from its log and the maps rebuilt, so the
    /// call gets its answer, not the damage.
    pub(crate) fn session_with_maps(&self, id: &str) -> Result<Arc<Session>, EngineError> {
        let sh = &self.shared;
        sh.with_descriptors(|| {
            let s = sh.session(id)?;
            s.read().state.maps()?;
            Ok(s)
        })
    }

    /// Closes every open Session no call is using, as the open-Session cache does when it
    /// needs room; returns how many it closed (for benchmarks and tests of reopening).
    #[doc(hidden)]
    pub fn close_idle_sessions(&self) -> usize {
        self.shared.close_idle(0, 0)
    }

    /// Waits until no spare Session directory is being made (for tests that count files or
    /// descriptors; see docs/format.md, "Making a Session").
    #[doc(hidden)]
    pub fn settle_spares(&self) {
        if let Some(spares) = self.shared.spares() {
            spares.settle();
        }
    }

    /// How many Sessions are open now (for tests of the open-Session cache).
    #[doc(hidden)]
    pub fn open_session_count(&self) -> usize {
        lock(&self.shared.opened).len()
    }

    /// How many times a Session was opened (not found open) since the Root was opened (for
    /// tests of the open-Session cache).
    #[doc(hidden)]
    pub fn sessions_opened(&self) -> u64 {
        self.shared.opens.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether Session `id` is open now (for tests of the open-Session cache).
    #[doc(hidden)]
    pub fn session_is_open(&self, id: &str) -> bool {
        self.shared.is_open(id)
    }

    pub fn create_session(
        &self,
        p: CreateSessionParams,
    ) -> Result<CreateSessionResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        if let Some(id) = &p.session_id {
            validate_session_id(id)?;
        }
        if let Some(w) = &p.workspace {
            validate_workspace(w)?;
        }
        let params = records::params_digest("createSession", &(&p.session_id, &p.workspace));
        let sh = &self.shared;
        let id = {
            let mut reg = lock(&sh.registry);
            loop {
                if let Some((digest, id)) = reg.receipts.get(&p.operation) {
                    if *digest == params {
                        return Ok(CreateSessionResult {
                            session_id: id.clone(),
                        });
                    }
                    return Err(EngineError::conflict(format!(
                        "operation {:?} already created Session {id} with other parameters; use a new operation",
                        p.operation
                    )));
                }
                if !reg.creating.contains(&p.operation) {
                    break;
                }
                // The same operation is being applied by another caller: its outcome decides.
                reg = sh
                    .reservation_ended
                    .wait(reg)
                    .unwrap_or_else(|p| p.into_inner());
            }
            let id = match &p.session_id {
                Some(id) if reg.taken(id) => {
                    return Err(EngineError::conflict(format!(
                        "Session {id} already exists; pick another sessionId"
                    )));
                }
                Some(id) => id.clone(),
                None => loop {
                    let id = sh.ids.next("s-");
                    if !reg.taken(&id) {
                        break id;
                    }
                },
            };
            reg.reserved.insert(id.clone());
            reg.creating.insert(p.operation.clone());
            id
        };
        // The files and the Root-log record are written outside the registry lock, so that
        // requests on other Sessions never wait for this creation's syncs.
        let record = SessionRecord {
            session_id: id.clone(),
            workspace: p.workspace.clone(),
            branch: None,
            operation: p.operation.clone(),
            params,
        };
        // A spare directory when one is ready (its names are durable already), else one
        // built under the staging name.
        let built = sh.with_descriptors(|| match sh.fill_spare(p.workspace.clone()) {
            Some((dir, name)) => Ok((dir, Some(name))),
            None => Ok((sh.build_staging(&id, p.workspace.clone(), None)?, None)),
        });
        let registered = built.and_then(|(dir, spare)| {
            if let Err(e) = sh.append_session_record(&record, spare.as_deref()) {
                // Nothing else would remove it (a spare was taken from the ready ones). Should
                // the record have reached the Root log after all, its Session's next use
                // builds the directory again from it (`Shared::materialize`).
                let _ = crate::fsutil::remove_any(&dir);
                return Err(e);
            }
            crate::fsutil::pause_point(&sh.dir, "create-committed");
            Ok((sh.place_unsynced(&dir, &id), spare))
        });
        let (registered, spare) = match registered {
            Ok((placed, spare)) => (Ok(placed), spare),
            Err(e) => (Err(e), None),
        };
        let mut reg = lock(&sh.registry);
        reg.reserved.remove(&id);
        reg.creating.remove(&p.operation);
        if registered.is_ok() {
            reg.receipts
                .insert(p.operation.clone(), (params, id.clone()));
            let summary = Arc::new(Summary::created_now());
            sh.journal.record(&id, 0, &summary);
            reg.sessions.insert(
                id.clone(),
                Entry {
                    workspace: p.workspace,
                    branch: None,
                    layered: false,
                    import: None,
                    slot: Arc::default(),
                    summary,
                    spare: spare.map(|name| crate::registry::SpareOf {
                        name,
                        fresh: Arc::new(AtomicBool::new(true)),
                    }),
                },
            );
        }
        drop(reg);
        sh.reservation_ended.notify_all();
        registered??;
        Ok(CreateSessionResult { session_id: id })
    }

    /// Every Session, in id order. A Session that cannot be opened is listed with its
    /// `damage` (and revision 0) instead of failing the listing.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>, EngineError> {
        self.shared.refresh_registry()?;
        let ids: Vec<String> = lock(&self.shared.registry)
            .sessions
            .keys()
            .cloned()
            .collect();
        Ok(ids
            .iter()
            .filter_map(|id| self.session_info(id).ok())
            .collect())
    }

    /// One page of Sessions: newest activity first (or by id), optionally only those of one
    /// workspace. Only the Sessions on the page whose facts changed since they were last
    /// read are opened; the others are answered from the catalog.
    pub fn sessions_page(&self, p: SessionsParams) -> Result<SessionsPage, EngineError> {
        let limit = p.limit.unwrap_or(SESSIONS_PAGE_DEFAULT);
        if limit == 0 || limit > SESSIONS_PAGE_MAX {
            return Err(EngineError::invalid(format!(
                "limit must be 1 to {SESSIONS_PAGE_MAX}, got {limit}"
            )));
        }
        let order = p.order.unwrap_or_default();
        self.shared.refresh_registry()?;
        let mut listed: Vec<(String, Arc<Summary>)> = {
            let reg = lock(&self.shared.registry);
            reg.sessions
                .iter()
                .filter(|(_, e)| p.workspace.is_none() || e.workspace == p.workspace)
                .map(|(id, e)| (id.clone(), Arc::clone(&e.summary)))
                .collect()
        };
        let sessions_dir = self.shared.dir.join(SESSIONS_DIR);
        let limit = limit as usize;
        // The page's Sessions in order, whether more follow, and the cursor of its last one.
        let (page, more, last_key) = match order {
            SessionOrder::Id => {
                // The registry iterates in id order already.
                let start = match &p.after {
                    Some(after) => listed.partition_point(|(id, _)| id.as_str() <= after.as_str()),
                    None => 0,
                };
                let end = (start + limit).min(listed.len());
                let more = end < listed.len();
                listed.truncate(end);
                listed.drain(..start);
                let last = listed.last().map(|(id, _)| id.clone());
                (listed, more, last)
            }
            SessionOrder::LastActivity => {
                let read_only = self.shared.options.read_only;
                for (id, s) in &listed {
                    if read_only {
                        // The writer's appends since the last look moved its files' times.
                        s.follow_times(&sessions_dir.join(id), self.shared.snapshot_ms);
                    } else if s.times_unknown() {
                        s.fill_times(&sessions_dir.join(id));
                    }
                }
                let after = match &p.after {
                    Some(after) => Some(
                        after
                            .split_once(':')
                            .and_then(|(t, id)| Some((t.parse::<u64>().ok()?, id)))
                            .ok_or_else(|| {
                                EngineError::invalid(format!(
                                    "after {after:?} is not a nextAfter of a lastActivity \
                                         page"
                                ))
                            })?,
                    ),
                    None => None,
                };
                // Each Session's last activity read once: the order and the cursor agree
                // even while commits move it. Only the page is sorted.
                let lasts: Vec<u64> = listed
                    .iter()
                    .map(|(_, s)| s.last_ms.load(Ordering::Acquire))
                    .collect();
                let key = |i: usize| (std::cmp::Reverse(lasts[i]), listed[i].0.as_str());
                let mut order: Vec<usize> = (0..listed.len())
                    .filter(|&i| after.is_none_or(|(t, id)| key(i) > (std::cmp::Reverse(t), id)))
                    .collect();
                let more = order.len() > limit;
                if more {
                    order.select_nth_unstable_by(limit - 1, |&a, &b| key(a).cmp(&key(b)));
                    order.truncate(limit);
                }
                order.sort_unstable_by(|&a, &b| key(a).cmp(&key(b)));
                let last = order
                    .last()
                    .map(|&i| format!("{}:{}", lasts[i], listed[i].0));
                let page: Vec<(String, Arc<Summary>)> = order
                    .iter()
                    .map(|&i| (listed[i].0.clone(), Arc::clone(&listed[i].1)))
                    .collect();
                (page, more, last)
            }
        };
        let sessions: Vec<SessionInfo> = page
            .iter()
            .filter_map(|(id, _)| self.session_info(id).ok())
            .collect();
        let next_after = last_key.filter(|_| more);
        Ok(SessionsPage {
            sessions,
            next_after,
        })
    }

    /// One Session's listing entry; `damage` set when it cannot be opened.
    pub fn session_info(&self, session_id: &str) -> Result<SessionInfo, EngineError> {
        let (workspace, branch, summary) = {
            let reg = lock(&self.shared.registry);
            let e = reg
                .sessions
                .get(session_id)
                .ok_or_else(|| EngineError::not_found(format!("Session {session_id}")))?;
            (
                e.workspace.clone(),
                e.branch.clone(),
                Arc::clone(&e.summary),
            )
        };
        let dir = self.shared.dir.join(SESSIONS_DIR).join(session_id);
        summary.fill_times(&dir);
        let (detail, damage) = match self.fresh_detail(session_id, &summary, &dir) {
            Ok(d) => (d, None),
            Err(e) => (
                Detail::default(),
                Some(DamageNote::of(Some(session_id), &e)),
            ),
        };
        Ok(SessionInfo {
            session_id: session_id.to_owned(),
            workspace,
            revision: detail.revision,
            branch,
            title: detail.title,
            created_at: summary.created_ms.load(Ordering::Acquire),
            last_activity_at: summary.last_ms.load(Ordering::Acquire),
            rows: detail.rows,
            bytes: detail.bytes,
            damage,
            parent: detail.parent,
        })
    }

    /// The Session's listing facts: from the catalog when they are as new as its last
    /// activity, else read from the (opened) Session and remembered.
    fn fresh_detail(&self, id: &str, summary: &Summary, dir: &Path) -> Result<Detail, EngineError> {
        let at_ms = summary.last_ms.load(Ordering::Acquire);
        let known_damage = lock(&summary.damage).is_some();
        // A reader learns of the writer's commits only from the Session itself.
        let trusted = !self.shared.options.read_only;
        if let Some(d) = lock(&summary.detail)
            .as_ref()
            .filter(|d| trusted && d.at_ms >= at_ms && !known_damage)
        {
            return Ok(d.clone());
        }
        let s = self.session(id)?;
        let detail = {
            let inner = s.read();
            Detail {
                at_ms,
                revision: inner.state.revision,
                rows: inner.row_count(),
                title: inner.state.title().map(str::to_owned),
                bytes: 0,
                parent: inner.state.parent.as_ref().map(|(_, p)| p.clone()),
            }
        };
        let detail = Detail {
            bytes: crate::catalog::bytes_on_disk(dir),
            ..detail
        };
        summary.set_detail(detail.clone());
        Ok(detail)
    }

    /// Gives the Session a title (a `titleSet` event): a mutation like the others.
    pub fn set_title(&self, p: SetTitleParams) -> Result<SequenceResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        crate::validate::validate_title(&p.title)?;
        let s = self.session(&p.session_id)?;
        let params = records::params_digest("setTitle", &p.title);
        let title = p.title;
        let mut build = |_: &State, first: u64| {
            Ok((
                vec![Prepared::new(Event::TitleSet(crate::event::TitleSet {
                    title: title.clone(),
                }))],
                Outcome::Sequence { sequence: first },
            ))
        };
        mutate_sequence(&s, &p.operation, params, &mut build)
    }

    /// The torn tails that opens in this process cut (also passed to
    /// [`crate::Progress::notice`] as they happen; `verify` lists every cut copy on disk).
    pub fn recoveries(&self) -> Vec<CutNote> {
        lock(&self.shared.cuts).clone()
    }

    /// The Session's current revision (its last event sequence).
    pub fn revision(&self, session_id: &str) -> Result<u64, EngineError> {
        Ok(self.session(session_id)?.read().state.revision)
    }

    /// Event `sequence` of a Session, as stored (NotFound beyond the revision).
    pub fn read_event(&self, session_id: &str, sequence: u64) -> Result<Event, EngineError> {
        let sh = &self.shared;
        sh.with_descriptors(|| {
            let s = sh.session(session_id)?;
            let inner = s.read();
            s.event_at(&inner, sequence)
        })
    }

    pub fn append(&self, p: AppendParams) -> Result<AppendResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        if p.events.is_empty() || p.events.len() > APPEND_EVENTS_MAX {
            return Err(EngineError::invalid(format!(
                "append needs 1 to {APPEND_EVENTS_MAX} events, got {}",
                p.events.len()
            )));
        }
        for (i, e) in p.events.iter().enumerate() {
            validate_event(i, e)?;
        }
        let s = self.session_with_maps(&p.session_id)?;
        // Encode every event once: the receipt digest and the record payloads use these bytes.
        let prepared: Vec<Prepared> = p.events.into_iter().map(Prepared::new).collect();
        let params = records::append_params_digest(&prepared);
        let blobs = &self.shared.blobs;
        // Shared by the two closures: `legacy` runs only on a repeat (before `build`, which
        // then does not run), `build` only on a first call.
        let prepared = std::cell::RefCell::new(Some(prepared));
        let legacy = || {
            let events = prepared.borrow();
            records::append_params_digest_v1(events.as_deref().unwrap_or_default())
        };
        let mut build = |state: &State, first: u64| {
            let events = prepared.borrow_mut().take().expect("build runs once");
            let plain: Vec<&Event> = events.iter().map(|e| &e.event).collect();
            check_batch(state, &plain)?;
            for (i, e) in plain.iter().enumerate() {
                if let Event::UserMessage(m) = e {
                    for a in &m.attachments {
                        if blobs.size(&a.digest)? != Some(a.bytes) {
                            return Err(EngineError::invalid(format!(
                                "events[{i}]: attachment {:?} ({}, {} bytes) is not in the Root's blob store; \
                                 send attachments with send",
                                a.name, a.digest, a.bytes
                            )));
                        }
                    }
                }
            }
            let last = first + events.len() as u64 - 1;
            Ok((events, Outcome::Append { first, last }))
        };
        let m = Mutation {
            operation: &p.operation,
            params,
            build: &mut build,
        };
        match s.mutate_or_legacy(m, Some(&legacy))? {
            Outcome::Append { first, last } => Ok(AppendResult {
                first_sequence: first,
                last_sequence: last,
            }),
            _ => Err(reused(&p.operation)),
        }
    }

    pub fn send(&self, p: SendParams) -> Result<SendResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        if p.attachments.len() > SEND_ATTACHMENTS_MAX {
            return Err(EngineError::invalid(format!(
                "send takes at most {SEND_ATTACHMENTS_MAX} attachments, got {}",
                p.attachments.len()
            )));
        }
        let mut decoded = Vec::with_capacity(p.attachments.len());
        let mut total = 0u64;
        for (i, a) in p.attachments.iter().enumerate() {
            if a.name.is_empty() || a.mime_type.is_empty() {
                return Err(EngineError::invalid(format!(
                    "attachments[{i}] needs a non-empty name and mimeType"
                )));
            }
            // The Base64 text bounds the decoded size; refuse before decoding a huge input.
            if (a.data_base64.len() as u64) / 4 * 3 > SEND_ATTACHMENT_BYTES_MAX + 3 {
                return Err(too_big());
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(a.data_base64.as_bytes())
                .map_err(|e| {
                    EngineError::invalid(format!(
                        "attachments[{i}].dataBase64 is not standard padded Base64: {e}"
                    ))
                })?;
            total += bytes.len() as u64;
            if total > SEND_ATTACHMENT_BYTES_MAX {
                return Err(too_big());
            }
            let digest = crate::validate::sha256_digest(&bytes);
            decoded.push((
                AttachmentMeta {
                    name: a.name.clone(),
                    mime_type: a.mime_type.clone(),
                    bytes: bytes.len() as u64,
                    digest,
                },
                bytes,
            ));
        }
        let s = self.session_with_maps(&p.session_id)?;
        let metas: Vec<&AttachmentMeta> = decoded.iter().map(|(m, _)| m).collect();
        let params = records::params_digest("send", &(&p.text, &metas));
        let sh = &self.shared;
        let text = p.text;
        let mut build = |_: &State, first: u64| {
            let mut attachments = Vec::with_capacity(decoded.len());
            for (meta, bytes) in &decoded {
                sh.blobs.put(bytes)?;
                attachments.push(meta.clone());
            }
            let invocation = sh.ids.next("inv-");
            let event = Event::UserMessage(UserMessage {
                invocation: invocation.clone(),
                text: text.clone(),
                attachments,
            });
            Ok((
                vec![Prepared::new(event)],
                Outcome::Send {
                    invocation,
                    sequence: first,
                },
            ))
        };
        match s.mutate(Mutation {
            operation: &p.operation,
            params,
            build: &mut build,
        })? {
            Outcome::Send {
                invocation,
                sequence,
            } => Ok(SendResult {
                invocation,
                sequence,
            }),
            _ => Err(reused(&p.operation)),
        }
    }

    /// Writes `stopRequested` for an admitted invocation. Unknown invocation: NotFound; an
    /// already settled one: Conflict.
    pub fn stop(&self, p: StopParams) -> Result<SequenceResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        validate_id("invocation", &p.invocation)?;
        let s = self.session_with_maps(&p.session_id)?;
        let params = records::params_digest("stop", &p.invocation);
        let inv = p.invocation;
        let mut build = |state: &State, first: u64| {
            match state.maps()?.invocations.get(&inv) {
                None => {
                    return Err(EngineError::not_found(format!(
                        "invocation {inv:?} in Session {}",
                        p.session_id
                    )))
                }
                Some(st) if st.settled => {
                    return Err(EngineError::conflict(format!(
                        "invocation {inv:?} is already settled; nothing to stop"
                    )))
                }
                Some(_) => {}
            }
            Ok((
                vec![Prepared::new(Event::StopRequested(StopRequested {
                    invocation: inv.clone(),
                }))],
                Outcome::Sequence { sequence: first },
            ))
        };
        mutate_sequence(&s, &p.operation, params, &mut build)
    }

    /// Answers a pending interaction. Unknown id: NotFound; already resolved: Conflict.
    pub fn respond(&self, p: RespondParams) -> Result<SequenceResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        validate_id("interactionId", &p.interaction_id)?;
        let s = self.session_with_maps(&p.session_id)?;
        let params = records::params_digest("respond", &(&p.interaction_id, &p.response));
        let mut build = |state: &State, first: u64| {
            match state.maps()?.interactions.get(&p.interaction_id) {
                None => {
                    return Err(EngineError::not_found(format!(
                        "interaction {:?} in Session {}",
                        p.interaction_id, p.session_id
                    )))
                }
                Some(st) if st.resolved.is_some() => {
                    return Err(EngineError::conflict(format!(
                        "interaction {:?} is already resolved",
                        p.interaction_id
                    )))
                }
                Some(_) => {}
            }
            let event = Event::InteractionResolved(InteractionResolved {
                interaction_id: p.interaction_id.clone(),
                response: p.response.clone(),
            });
            Ok((
                vec![Prepared::new(event)],
                Outcome::Sequence { sequence: first },
            ))
        };
        mutate_sequence(&s, &p.operation, params, &mut build)
    }

    pub fn pending_interactions(&self, session_id: &str) -> Result<Vec<Interaction>, EngineError> {
        let s = self.session_with_maps(session_id)?;
        let inner = s.read();
        s.interactions_pending(&inner)
    }

    /// The interaction with this id (pending or resolved), or None when there is none.
    pub fn interaction(
        &self,
        session_id: &str,
        interaction_id: &str,
    ) -> Result<Option<Interaction>, EngineError> {
        let s = self.session_with_maps(session_id)?;
        let inner = s.read();
        s.interaction_in(&inner, interaction_id)
    }

    pub fn history(&self, p: HistoryParams) -> Result<HistoryPage, EngineError> {
        let sh = &self.shared;
        sh.with_descriptors(|| sh.session(&p.session_id)?.history(&p))
    }

    /// The page [`Root::history`] returns, handed to `each` row by row with the texts
    /// borrowed (no copy): for callers that write rows out (the server writes JSON from
    /// them) or look at a few fields. Returns the fence and the cursor to the next page.
    pub fn history_each(
        &self,
        p: HistoryParams,
        each: impl FnMut(crate::RowRef<'_>),
    ) -> Result<crate::PageEnd, EngineError> {
        // Not tried again once a row has gone out; before, as `history` is (an index found
        // damaged has its Session rebuilt by the next open).
        let (mut each, mut sent, mut rebuilt) = (each, false, false);
        loop {
            let s = self.session(&p.session_id)?;
            match s.history_each(&p, |row| {
                sent = true;
                each(row)
            }) {
                Err(e) if e.is_index_damage() && !sent && !rebuilt => rebuilt = true,
                r => return r,
            }
        }
    }

    pub fn source(&self, p: SourceParams) -> Result<SourcePage, EngineError> {
        let sh = &self.shared;
        sh.with_descriptors(|| sh.session(&p.session_id)?.source(&p))
    }

    /// Literal search of `body`, `thinking` and `arguments` fields under a fence; bounded work
    /// per page; follow `nextAfter` until null.
    pub fn search(
        &self,
        p: crate::search::SearchParams,
    ) -> Result<crate::search::SearchPage, EngineError> {
        let sh = &self.shared;
        sh.with_descriptors(|| sh.session(&p.session_id)?.search(&p))
    }

    /// Literal search over every Session of the Root (or a scope), newest first, under one
    /// fence for all its pages; bounded work per page; follow `nextAfter` until null.
    pub fn search_root(
        &self,
        p: crate::search_root::SearchRootParams,
    ) -> Result<crate::search_root::SearchRootPage, EngineError> {
        self.shared.refresh_registry()?;
        crate::search_root::search_root(&self.shared, &p)
    }

    /// Ends every wait, for a server whose input has ended: each `watch` and
    /// `watchDiagnostics` in progress answers now, and each later one at once, with exactly
    /// what it would answer at its timeout (the current state). There is no undoing it;
    /// everything else keeps working.
    pub fn end_waits(&self) {
        self.shared.waits_ended.store(true, Ordering::Release);
        // Every Session that can have a waiter is in `opened` (a waiter opens its Session
        // first), and one opened after this copy sees the flag before it waits.
        for s in self.shared.open_sessions() {
            s.wake_waiters();
        }
    }

    pub(crate) fn waits_ended(&self) -> bool {
        self.shared.waits_ended.load(Ordering::Acquire)
    }

    /// Blocks up to `timeoutMs` until an event with `sequence > after` exists.
    pub fn watch(&self, p: WatchParams) -> Result<WatchResult, EngineError> {
        self.session_with_maps(&p.session_id)?.watch(
            p.after,
            p.timeout_ms,
            &self.shared.waits_ended,
        )
    }

    /// The latest `contextPrepared` at or before the fence, or None.
    pub fn context(&self, p: ContextParams) -> Result<Option<ContextResult>, EngineError> {
        let sh = &self.shared;
        sh.with_descriptors(|| sh.session(&p.session_id)?.context(p.through))
    }

    /// Attachment metadata of an invocation's user message, in order.
    pub fn attachments(&self, p: AttachmentsParams) -> Result<Vec<AttachmentMeta>, EngineError> {
        let s = self.session_with_maps(&p.session_id)?;
        let inner = s.read();
        let st = inner
            .state
            .maps()?
            .invocations
            .get(&p.invocation)
            .ok_or_else(|| {
                EngineError::not_found(format!(
                    "invocation {:?} in Session {}",
                    p.invocation, p.session_id
                ))
            })?;
        match s.event_at(&inner, st.message)? {
            Event::UserMessage(m) => Ok(m.attachments),
            _ => Err(EngineError::corrupt(
                s.dir(),
                format!("event {} is not a userMessage", st.message),
            )),
        }
    }

    /// Bytes `[offset, offset + limit)` of the concatenation of an invocation's attachments.
    pub fn read_attachments(
        &self,
        p: ReadAttachmentsParams,
    ) -> Result<AttachmentData, EngineError> {
        let limit = p.limit.unwrap_or(READ_ATTACHMENTS_BYTES_MAX);
        if limit == 0 || limit > READ_ATTACHMENTS_BYTES_MAX {
            return Err(EngineError::invalid(format!(
                "limit must be 1 to {READ_ATTACHMENTS_BYTES_MAX} bytes, got {limit}"
            )));
        }
        let metas = self.attachments(AttachmentsParams {
            session_id: p.session_id.clone(),
            invocation: p.invocation.clone(),
        })?;
        let total: u64 = metas.iter().map(|m| m.bytes).sum();
        let offset = p.offset.unwrap_or(0);
        if offset > total {
            return Err(EngineError::invalid(format!(
                "offset {offset} is past the attachments' end ({total} bytes)"
            )));
        }
        let want_end = offset.saturating_add(limit).min(total);
        let mut out = Vec::with_capacity((want_end - offset) as usize);
        let mut base = 0u64;
        for m in &metas {
            let (a, b) = (base.max(offset), (base + m.bytes).min(want_end));
            if a < b {
                self.shared
                    .blobs
                    .read_range(&m.digest, a - base, b - a, &mut out)?;
            }
            base += m.bytes;
        }
        Ok(AttachmentData {
            data_base64: base64::engine::general_purpose::STANDARD.encode(out),
        })
    }

    /// Walks every checksum of the Root (the Root log, every Session log, every blob) and checks
    /// every derived index entry against its log. Damage is collected, not returned: one
    /// damaged Session does not stop the walk, and the report names every one (`Err` is left
    /// for a Root that cannot be walked at all). Cut copies of torn tails are listed too.
    pub fn verify(&self) -> Result<VerifyReport, EngineError> {
        let mut report = VerifyReport::default();
        let sh = &self.shared;
        match sh.root_log.verify() {
            Ok(r) => {
                report.records += r.records;
                report.bytes += r.bytes;
            }
            Err(e) => report.damage.push(DamageNote::of(None, &e.into())),
        }
        report.cuts.extend(cut_copies(None, sh.root_log.dir()));
        let ids: Vec<String> = lock(&sh.registry).sessions.keys().cloned().collect();
        let task = std::sync::Mutex::new(sh.options.progress.task(
            || format!("verifying {} Sessions", ids.len()),
            ids.len() as u64,
            ProgressUnit::Sessions,
        ));
        // Sessions are walked by one thread per core: each walk is its own log and index
        // files, so a Root of many Sessions verifies in a fraction of the time (a restore ends
        // with one). The report lists them in id order all the same.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let walk = || {
            let mut walked = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = ids.get(i) else {
                    return walked;
                };
                let outcome = self.session(id).and_then(|s| {
                    let v = s.log().verify()?;
                    s.verify_derived()?;
                    Ok(v)
                });
                let log_dir = sh.dir.join(SESSIONS_DIR).join(id).join("log");
                walked.push((i, outcome, cut_copies(Some(id), &log_dir)));
                lock(&task).advance(next.load(Ordering::Relaxed).min(ids.len()) as u64);
            }
        };
        let threads = crate::index_pool::cores()
            .clamp(1, VERIFY_THREADS_MAX)
            .min(ids.len().max(1));
        let mut walked: Vec<_> = std::thread::scope(|scope| {
            let others: Vec<_> = (1..threads).map(|_| scope.spawn(walk)).collect();
            let mut all = walk();
            for h in others {
                all.extend(h.join().expect("a verify thread does not panic"));
            }
            all
        });
        walked.sort_unstable_by_key(|(i, ..)| *i);
        debug_assert_eq!(walked.len(), ids.len(), "every Session walked once");
        for (i, outcome, cuts) in walked {
            match outcome {
                Ok(v) => {
                    report.sessions += 1;
                    report.records += v.records;
                    report.bytes += v.bytes;
                }
                Err(e) => report.damage.push(DamageNote::of(Some(&ids[i]), &e)),
            }
            report.cuts.extend(cuts);
        }
        drop(task);
        report.damage.extend(self.unregistered_dirs(&ids));
        match sh.blobs.verify() {
            Ok(n) => report.blobs = n,
            Err(e) => report.damage.push(DamageNote::of(None, &e)),
        }
        Ok(report)
    }
}

impl Root {
    /// Session directories that the Root log does not register: the Root log lost records
    /// that had been acknowledged (a Session's directory is put in place only after its
    /// record was synced). Staging names (starting with '.') are scratch, not Sessions.
    fn unregistered_dirs(&self, ids: &[String]) -> Vec<DamageNote> {
        let sessions = self.shared.dir.join(SESSIONS_DIR);
        let Ok(entries) = std::fs::read_dir(&sessions) else {
            return Vec::new();
        };
        let mut found: Vec<DamageNote> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.') && ids.binary_search(name).is_err())
            .map(|name| DamageNote {
                session_id: Some(name.clone()),
                code: "corrupt".into(),
                message: format!(
                    "corrupt: {}: this Session's directory exists but the Root log does not \
                     register it, so the Root log lost acknowledged records (a cut copy in \
                     root-log/ holds bytes a recovery cut, if any)",
                    sessions.join(&name).display()
                ),
            })
            .collect();
        found.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        found
    }
}

/// The cut copies of torn tails kept in log directory `dir` (see `docs/format.md`).
fn cut_copies(session_id: Option<&str>, dir: &Path) -> Vec<CutNote> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut cuts: Vec<CutNote> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".cut-"))
        .map(|e| CutNote {
            session_id: session_id.map(str::to_owned),
            path: e.path().display().to_string(),
            bytes: e
                .metadata()
                .map_or(0, |m| m.len().saturating_sub(logbook_log::CUT_HEADER_BYTES)),
        })
        .collect();
    cuts.sort_by(|a, b| a.path.cmp(&b.path));
    cuts
}

/// Applies a mutation whose outcome is one sequence (stop, respond, setTitle).
fn mutate_sequence(
    s: &Session,
    operation: &str,
    params: [u8; 32],
    build: &mut crate::session::BuildFn<'_>,
) -> Result<SequenceResult, EngineError> {
    match s.mutate(Mutation {
        operation,
        params,
        build,
    })? {
        Outcome::Sequence { sequence } => Ok(SequenceResult { sequence }),
        _ => Err(reused(operation)),
    }
}

fn too_big() -> EngineError {
    EngineError::invalid(format!(
        "attachments exceed SEND_ATTACHMENT_BYTES_MAX ({SEND_ATTACHMENT_BYTES_MAX} bytes per send); send fewer or smaller files"
    ))
}

fn reused(operation: &str) -> EngineError {
    EngineError::conflict(format!(
        "operation {operation:?} was already used for a different kind of mutation"
    ))
}

impl Drop for Root {
    fn drop(&mut self) {
        if self.shared.options.read_only {
            // A reader wrote nothing, so it has nothing to save.
            return;
        }
        *lock(&self.shared.stop) = true;
        self.shared.stop_signal.notify_all();
        self.shared.flusher.join();
        // Each open Session is closed as the cache closes one (indexes synced, a checkpoint
        // when its tail is long, its newest segment sealed when small), and its large search
        // tail saved so the first search after the next open need not index the active
        // segment again.
        let closing = self.shared.closing();
        for s in self.shared.open_sessions() {
            s.close_with(&closing, true);
        }
        // The listing facts go to the catalog snapshot, read back by the next open.
        let ids: Vec<String> = lock(&self.shared.registry)
            .sessions
            .keys()
            .cloned()
            .collect();
        for id in ids.iter().filter(|id| self.shared.is_open(id)) {
            let _ = self.session_info(id);
        }
        let reg = lock(&self.shared.registry);
        let changed = reg.sessions.values().any(|e| e.summary.changed());
        self.shared.snapshot.save_at_close(changed, || {
            reg.sessions
                .iter()
                .map(|(id, e)| (id.clone(), e.summary.saved()))
                .collect()
        });
    }
}
