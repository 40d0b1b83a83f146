//! The Root's change journal: what changed, and in what order, since the Root was opened.
//!
//! Every commit to a Session (its first sequence) and every new Session takes the next
//! *stamp*, a counter of this open Root. A Root-wide search fixes its view of the Root by
//! one stamp, the *fence*: a Session made after the fence is left out, and a Session
//! changed after it is read as it was, up to the first sequence of its first later commit,
//! with the last activity it had then. Nothing else is needed to see the whole Root as of
//! the fence, because everything the journal does not name is unchanged since.
//!
//! A commit is journaled while its Session's index is write-locked, before any reader can
//! see it, so a commit is visible to a read made after the fence exactly when its stamp is
//! at most the fence. The journal lives in memory and keeps the newest
//! [`JOURNAL_CHANGES_MAX`] changes; a fence older than the oldest dropped change, or from
//! before the Root was opened (another `epoch`), can no longer be honoured and is refused.

use crate::catalog::Summary;
use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most changes the journal keeps (about 48 bytes each): a Root-wide search whose pages
/// span more commits than this is refused and must start again.
pub const JOURNAL_CHANGES_MAX: usize = 1 << 18;

/// One change to a Session after some stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub stamp: u64,
    /// The first sequence of the commit; 0 when the change made the Session.
    pub first_sequence: u64,
    /// The Session's last activity (ms) before the change.
    pub previous_last_ms: u64,
}

#[derive(Default)]
pub(crate) struct State {
    stamp: u64,
    /// Highest stamp dropped from the journal (0: none).
    dropped_through: u64,
    order: VecDeque<(u64, Arc<str>)>,
    by_session: HashMap<Arc<str>, VecDeque<Change>>,
}

pub(crate) struct Journal {
    /// Identifies this open of the Root: fences of another open are refused.
    pub epoch: u64,
    state: Mutex<State>,
    /// The visiting orders of the newest Root-wide searches (see [`Visits`]).
    visits: Mutex<VecDeque<Arc<Visits>>>,
}

/// Visiting orders kept for searches' later pages: the newest searches'.
const VISITS_KEPT: usize = 4;

/// A Session a Root-wide search visits, with its last activity as of the search's fence.
#[derive(Clone)]
pub(crate) struct Visit {
    pub last_ms: u64,
    pub id: String,
}

impl Visit {
    /// Visiting order: newest last activity first, ties by id.
    pub(crate) fn key(&self) -> (Reverse<u64>, &str) {
        (Reverse(self.last_ms), self.id.as_str())
    }
}

/// The Sessions a Root-wide search visits, worked out by its first page. Which Sessions may
/// match and their last activity are facts as of the search's fence (a Session changed after
/// it is seen as it was), so they are the same for every page of that search: a later page
/// finds them here instead of testing every Session of the Root again.
pub(crate) struct Visits {
    fence: u64,
    /// Names the request (query, options, scope).
    request: [u8; 8],
    /// Sorted in visiting order on first use by a later page (a search that ends on its
    /// first page never pays for the sort).
    list: Mutex<(bool, Vec<Visit>)>,
}

impl Visits {
    /// Up to `n` Sessions from the first at or after `at` in visiting order, copied out.
    pub(crate) fn from(&self, at: (Reverse<u64>, &str), n: usize) -> Vec<Visit> {
        let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        let (sorted, v) = &mut *list;
        if !*sorted {
            v.sort_unstable_by(|a, b| a.key().cmp(&b.key()));
            *sorted = true;
        }
        let i = v.partition_point(|s| s.key() < at);
        v[i..v.len().min(i + n)].to_vec()
    }
}

impl Journal {
    pub(crate) fn new(epoch: u64) -> Journal {
        Journal {
            epoch,
            state: Mutex::default(),
            visits: Mutex::default(),
        }
    }

    /// The visiting order a search of `request` at `fence` kept, if still kept.
    pub(crate) fn visits(&self, fence: u64, request: [u8; 8]) -> Option<Arc<Visits>> {
        let kept = self.visits.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter()
            .find(|v| v.fence == fence && v.request == request)
            .cloned()
    }

    /// Keeps the visiting order (in any order) of a search of `request` at `fence`.
    pub(crate) fn keep_visits(&self, fence: u64, request: [u8; 8], list: Vec<Visit>) {
        let mut kept = self.visits.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|v| !(v.fence == fence && v.request == request));
        if kept.len() == VISITS_KEPT {
            kept.pop_front();
        }
        kept.push_back(Arc::new(Visits {
            fence,
            request,
            list: Mutex::new((false, list)),
        }));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Journals a change of `session_id` (`first` 0: it was made) and moves its last
    /// activity forward under the same lock, so a fence sees both or neither.
    pub(crate) fn record(&self, session_id: &str, first: u64, summary: &Summary) {
        let mut st = self.lock();
        let previous_last_ms = summary.last_ms.load(Ordering::Acquire);
        if first != 0 {
            summary.touch();
        }
        st.stamp += 1;
        let stamp = st.stamp;
        let key: Arc<str> = match st.by_session.get_key_value(session_id) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(session_id),
        };
        st.order.push_back((stamp, Arc::clone(&key)));
        st.by_session.entry(key).or_default().push_back(Change {
            stamp,
            first_sequence: first,
            previous_last_ms,
        });
        while st.order.len() > JOURNAL_CHANGES_MAX {
            let (old, id) = st.order.pop_front().expect("over the bound, so not empty");
            st.dropped_through = old;
            if let Some(q) = st.by_session.get_mut(&id) {
                q.pop_front();
                if q.is_empty() {
                    st.by_session.remove(&id);
                }
            }
        }
    }

    /// The fence of a new view: the latest stamp.
    pub(crate) fn fence(&self) -> u64 {
        self.lock().stamp
    }

    /// Runs `f` with the journal locked (no commit lands meanwhile), or None when changes
    /// after `fence` were dropped (or `fence` is not a stamp of this journal).
    pub(crate) fn view<R>(&self, fence: u64, f: impl FnOnce(&View<'_>) -> R) -> Option<R> {
        let st = self.lock();
        if fence < st.dropped_through || fence > st.stamp {
            return None;
        }
        Some(f(&View { state: &st, fence }))
    }
}

/// The journal as of a fence, locked.
pub(crate) struct View<'a> {
    state: &'a State,
    fence: u64,
}

impl View<'_> {
    /// True when nothing changed after the fence.
    pub(crate) fn is_quiet(&self) -> bool {
        self.state.stamp == self.fence
    }

    /// The Session's first change after the fence, if any.
    pub(crate) fn first_change_after(&self, session_id: &str) -> Option<Change> {
        let q = self.state.by_session.get(session_id)?;
        let i = q.partition_point(|c| c.stamp <= self.fence);
        q.get(i).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_finds_its_visiting_order_by_fence_and_request_in_order() {
        let j = Journal::new(1);
        let visit = |last_ms, id: &str| Visit {
            last_ms,
            id: id.to_owned(),
        };
        // Kept in any order; taken newest first, ties by id, from a place on.
        j.keep_visits(
            5,
            [1; 8],
            vec![
                visit(10, "b"),
                visit(30, "a"),
                visit(10, "a"),
                visit(20, "c"),
            ],
        );
        let kept = j.visits(5, [1; 8]).expect("kept");
        let ids = |v: Vec<Visit>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(
            ids(kept.from((Reverse(u64::MAX), ""), 9)),
            ["a", "c", "a", "b"]
        );
        assert_eq!(ids(kept.from((Reverse(20), "c"), 2)), ["c", "a"]);
        assert_eq!(ids(kept.from((Reverse(10), "a0"), 9)), ["b"]);
        assert!(kept.from((Reverse(0), "z"), 9).is_empty());
        assert!(j.visits(6, [1; 8]).is_none(), "another fence");
        assert!(j.visits(5, [2; 8]).is_none(), "another request");
        // The newest VISITS_KEPT are kept.
        for f in 0..VISITS_KEPT as u64 {
            j.keep_visits(100 + f, [1; 8], Vec::new());
        }
        assert!(j.visits(5, [1; 8]).is_none(), "the oldest went");
        assert!(j.visits(100, [1; 8]).is_some());
    }

    #[test]
    fn a_view_sees_the_first_change_after_its_fence_and_expires_when_it_is_dropped() {
        let j = Journal::new(7);
        let s = Summary::created_now();
        j.record("a", 0, &s);
        j.record("a", 2, &s);
        let fence = j.fence();
        let before = s.last_ms.load(Ordering::Acquire);
        j.record("a", 3, &s);
        j.record("b", 0, &s);
        j.record("a", 5, &s);
        let (a, b, c) = j
            .view(fence, |v| {
                (
                    v.first_change_after("a"),
                    v.first_change_after("b"),
                    v.first_change_after("c"),
                )
            })
            .expect("fresh fence");
        let a = a.expect("a changed after the fence");
        assert_eq!((a.first_sequence, a.previous_last_ms), (3, before));
        assert_eq!(b.expect("b was made after").first_sequence, 0);
        assert_eq!(c, None);
        assert!(
            j.view(fence + 10, |_| ()).is_none(),
            "a fence from the future"
        );
        for _ in 0..JOURNAL_CHANGES_MAX {
            j.record("c", 9, &s);
        }
        assert!(
            j.view(fence, |_| ()).is_none(),
            "changes after the fence were dropped"
        );
        assert!(j.view(j.fence(), |_| ()).is_some());
    }
}
