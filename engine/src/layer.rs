//! A fork's state at its fence, as the fork sees it (the fork rules of `crate::fork`), and the
//! marker record of a copied fork. Facts only: the Sessions they apply to are above.

use crate::error::EngineError;
use crate::records;
use crate::state::{InvocationState, State};
use logbook_log::Location;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Session log payload of [`records::KIND_FORK`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkMarker {
    source: String,
    through: u64,
    turn: Option<String>,
}

impl ForkMarker {
    /// The marker of a history whose fork rules apply after event `through`.
    pub(crate) fn new(source: String, through: u64) -> ForkMarker {
        ForkMarker {
            source,
            through,
            turn: None,
        }
    }
}

/// Checks a fork marker against the state replayed so far and applies its rules to it.
pub(crate) fn apply_marker(
    log_path: &Path,
    loc: Location,
    payload: &[u8],
    state: &mut State,
) -> Result<(), EngineError> {
    let m: ForkMarker = records::decode(log_path, "a fork marker", payload)?;
    if m.through != state.revision {
        return Err(EngineError::corrupt(
            log_path,
            format!(
                "fork marker at {loc:?} says the copied history ends at {}, but it ends at {}",
                m.through, state.revision
            ),
        ));
    }
    apply_fork_rules(state)
}

/// What the marker does to the state (see the module documentation).
pub(crate) fn apply_fork_rules(state: &mut State) -> Result<(), EngineError> {
    let maps = state.maps_mut()?;
    maps.pending.clear();
    maps.contexts.clear();
    Ok(())
}

/// The state as it was right after event `through` (every derived fact keeps the sequence it
/// came from, so this needs no replay).
pub(crate) fn state_at(s: &State, through: u64) -> Result<State, EngineError> {
    let mut out = State::default();
    out.revision = through;
    out.titles = s
        .titles
        .iter()
        .filter(|(q, _)| *q <= through)
        .cloned()
        .collect();
    out.first_line = s.first_line.clone().filter(|(q, _)| *q <= through);
    out.parent = s.parent.clone().filter(|(q, _)| *q <= through);
    let (from, to) = (s.maps()?, out.maps_mut()?);
    for (inv, st) in &from.invocations {
        if st.message > through {
            continue;
        }
        let settled = st.settled && st.settled_at <= through;
        to.invocations.insert(
            inv.clone(),
            InvocationState {
                message: st.message,
                settled,
                settled_at: if settled { st.settled_at } else { 0 },
            },
        );
        if !settled {
            to.queue.insert(st.message, inv.clone());
        }
    }
    for (id, st) in &from.interactions {
        if st.requested > through {
            continue;
        }
        let mut st = st.clone();
        st.resolved = st.resolved.filter(|r| *r <= through);
        if st.resolved.is_none() {
            to.pending.insert(st.requested, id.clone());
        }
        to.interactions.insert(id.clone(), st);
    }
    to.internal_calls = from
        .internal_calls
        .iter()
        .filter(|(_, seq)| **seq <= through)
        .map(|(id, seq)| (id.clone(), *seq))
        .collect();
    to.contexts = from
        .contexts
        .iter()
        .copied()
        .filter(|c| *c <= through)
        .collect();
    Ok(out)
}
