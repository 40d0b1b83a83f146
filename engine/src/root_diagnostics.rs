//! The diagnostics operations of the Root (`recordDiagnostic`, `diagnostics`,
//! `watchDiagnostics`): each Session's diagnostics log is in `crate::diagnostics`.

use crate::diagnostics::*;
use crate::error::EngineError;
use crate::records;
use crate::root::Root;
use crate::validate::validate_id;
use logbook_log::Record;
use std::sync::Arc;
use std::time::Duration;

impl Root {
    fn diag_log(&self, session_id: &str) -> Result<Arc<DiagLog>, EngineError> {
        // The Session must exist (NotFound otherwise); it holds its diagnostics log.
        Ok(Arc::clone(self.session(session_id)?.diags()))
    }

    /// Appends one diagnostic (once per operation) and wakes `watchDiagnostics` waiters.
    pub fn record_diagnostic(
        &self,
        p: RecordDiagnosticParams,
    ) -> Result<RecordDiagnosticResult, EngineError> {
        self.shared.writable()?;
        validate_id("operation", &p.operation)?;
        validate_id("invocation", &p.invocation)?;
        validate_cause(&p.cause)?;
        let s = self.session_with_maps(&p.session_id)?;
        let params = records::params_digest(
            "recordDiagnostic",
            &(&p.kind, &p.invocation, &p.cause.code, &p.cause.message),
        );
        let d = Arc::clone(s.diags());
        // Under the Session's writer lock, from the checks until the receipt is stored: no
        // other mutation of the Session runs meanwhile (see the module doc for the race).
        let result = s.with_operation(&p.operation, |used| {
            // The invocation check and the revision, before the (leaf) diagnostics lock.
            let (known, sequence) = {
                let inner = s.read();
                let st = &inner.state;
                (st.maps()?.invocations.contains_key(&p.invocation), st.revision)
            };
            let mut st = d.state()?;
            if let Some((digest, result)) = st.receipts.get(&p.operation) {
                if *digest == params {
                    return Ok(result.clone());
                }
                return Err(EngineError::conflict(format!(
                    "operation {:?} already recorded diagnostic {} in Session {} with other parameters; \
                     use a new operation",
                    p.operation, result.id, p.session_id
                )));
            }
            if used {
                return Err(EngineError::conflict(format!(
                    "operation {:?} was already used in Session {} for another mutation",
                    p.operation, p.session_id
                )));
            }
            if !known {
                return Err(EngineError::not_found(format!(
                    "invocation {:?} in Session {}",
                    p.invocation, p.session_id
                )));
            }
            Self::append_diagnostic(&d, &mut st, &p, params, sequence)
        })?;
        d.changed.notify_all();
        Ok(result)
    }

    /// Writes one new diagnostic and its receipt (the checks are done) at `sequence`.
    fn append_diagnostic(
        d: &DiagLog,
        st: &mut DiagState,
        p: &RecordDiagnosticParams,
        params: [u8; 32],
        sequence: u64,
    ) -> Result<RecordDiagnosticResult, EngineError> {
        if st.log.is_none() {
            st.log = Some(create_log(&d.dir, d.config.clone())?);
        }
        let revision = st.items.len() as u64 + 1;
        let diagnostic = Diagnostic {
            id: format!("diag-{revision}"),
            kind: p.kind,
            invocation: p.invocation.clone(),
            sequence,
            cause: p.cause.clone(),
            at: now_ms(),
        };
        let record = DiagRecord {
            revision,
            diagnostic: diagnostic.clone(),
            operation: p.operation.clone(),
            params,
        };
        let payload = records::encode(&record);
        st.log.as_ref().expect("created above").append(&[Record {
            kind: KIND_DIAGNOSTIC,
            payload: &payload,
        }])?;
        let result = RecordDiagnosticResult {
            id: diagnostic.id.clone(),
            revision,
        };
        st.items.push(diagnostic);
        st.receipts
            .insert(p.operation.clone(), (params, result.clone()));
        Ok(result)
    }

    /// A newest-first page of the Session's diagnostics under a diagnostics fence.
    pub fn diagnostics(&self, p: DiagnosticsParams) -> Result<DiagnosticsPage, EngineError> {
        let limit = p.limit.unwrap_or(DIAGNOSTICS_PAGE_DEFAULT);
        if limit == 0 || limit > DIAGNOSTICS_PAGE_MAX {
            return Err(EngineError::invalid(format!(
                "limit must be 1 to {DIAGNOSTICS_PAGE_MAX}, got {limit}"
            )));
        }
        let d = self.diag_log(&p.session_id)?;
        let st = d.state()?;
        let rev = st.items.len() as u64;
        let through = match p.through {
            None => rev,
            Some(t) if t <= rev => t,
            Some(t) => {
                return Err(EngineError::invalid(format!(
                    "through {t} is past the diagnostics revision {rev} of Session {}",
                    p.session_id
                )))
            }
        };
        // `below`: the revisions still to return are 1..below.
        let below = match &p.after {
            None => through + 1,
            Some(c) => decode_cursor(c, &p.session_id, through)?,
        };
        let lo = below.saturating_sub(u64::from(limit)).max(1);
        let diagnostics: Vec<Diagnostic> = (lo..below)
            .rev()
            .map(|r| st.items[(r - 1) as usize].clone())
            .collect();
        let next_after =
            (lo > 1 && !diagnostics.is_empty()).then(|| encode_cursor(&p.session_id, through, lo));
        Ok(DiagnosticsPage {
            through,
            diagnostics,
            next_after,
        })
    }

    /// Blocks until the diagnostics revision is past `after` (at once when it already is) or
    /// `timeoutMs` passes, and returns the revision then.
    pub fn watch_diagnostics(
        &self,
        p: WatchDiagnosticsParams,
    ) -> Result<DiagnosticsRevision, EngineError> {
        let timeout_ms = p.timeout_ms.unwrap_or(0);
        if timeout_ms > crate::WATCH_TIMEOUT_MS_MAX {
            return Err(EngineError::invalid(format!(
                "timeoutMs must be at most {}, got {timeout_ms}",
                crate::WATCH_TIMEOUT_MS_MAX
            )));
        }
        let d = self.diag_log(&p.session_id)?;
        let after = p.after.unwrap_or(0);
        let deadline = std::time::Instant::now() + Duration::from_millis(timeout_ms);
        let mut st = d.state()?;
        // As for `watch`: an `after` past the revision would wait for diagnostics that are
        // already numbered otherwise, and never report the next one.
        let revision = st.items.len() as u64;
        if after > revision {
            return Err(EngineError::invalid(format!(
                "after {after} is beyond the diagnostics revision {revision}; pass a revision \
                 from a previous answer, at most {revision} (0 for the start)"
            )));
        }
        loop {
            let rev = st.items.len() as u64;
            let now = std::time::Instant::now();
            // Once the Root's waits are ended, answer as at the timeout.
            if rev > after || now >= deadline || self.waits_ended() {
                return Ok(DiagnosticsRevision { revision: rev });
            }
            st = d
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The current diagnostics revision of a Session (0 when it recorded none).
    pub fn diagnostics_revision(&self, session_id: &str) -> Result<u64, EngineError> {
        self.diag_log(session_id)?.revision()
    }
}
