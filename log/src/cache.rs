//! Decompressed sealed blocks kept in memory, so reads that come back to a block (a forward
//! read of its records, a search verifying rows near each other, a repeated query) decompress
//! it once. One cache may serve many logs (an engine Root shares one among its Sessions):
//! it is bounded in bytes and drops the least recently used block first.
//!
//! Blocks that bulk readers (scans, forward pages, search verification past a first page)
//! decompress enter as the first to go instead of the last: a pass over more history than the
//! cache holds then keeps what the cache held, plus the start of the pass, instead of cycling
//! through all of it and keeping nothing (plain LRU's answer to a loop larger than itself). A
//! bulk reader's hit counts as a use like any other.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes of decompressed blocks a log keeps when it is given no cache of its own
/// ([`crate::LogConfig::block_cache`]): 64 blocks of 64 KiB.
pub const BLOCK_CACHE_BYTES: usize = 4 << 20;

/// Within one log: (segment, block index).
pub type BlockKey = (u64, u32);

/// A bounded, shared LRU of decompressed blocks. Cheap to share: pass clones of the `Arc`.
pub struct BlockCache {
    lru: Mutex<Lru>,
}

/// (log, segment, block index): a block of any log sharing the cache.
type Key = (u64, u64, u32);

/// The first tick of a use; bulk inserts take the ticks below it.
const FIRST_USE: u64 = 1 << 63;

struct Lru {
    /// key -> (block, last use).
    map: HashMap<Key, (Arc<Vec<u8>>, u64)>,
    /// last use -> key, first to go first.
    order: BTreeMap<u64, Key>,
    /// Last use of a use: counts up from [`FIRST_USE`].
    tick: u64,
    /// "Last use" of a bulk insert: counts down from below [`FIRST_USE`], so the newest bulk
    /// insert is the first to go.
    bulk_tick: u64,
    bytes: usize,
    bytes_max: usize,
}

impl fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lru = self.lock();
        f.debug_struct("BlockCache")
            .field("blocks", &lru.map.len())
            .field("bytes", &lru.bytes)
            .field("bytes_max", &lru.bytes_max)
            .finish()
    }
}

impl BlockCache {
    /// A cache that holds at most `bytes_max` bytes of blocks (0 keeps none).
    pub fn new(bytes_max: usize) -> Arc<BlockCache> {
        Arc::new(BlockCache {
            lru: Mutex::new(Lru {
                map: HashMap::new(),
                order: BTreeMap::new(),
                tick: FIRST_USE,
                bulk_tick: FIRST_USE,
                bytes: 0,
                bytes_max,
            }),
        })
    }

    /// Bytes of blocks held now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Blocks held now.
    pub fn blocks(&self) -> usize {
        self.lock().map.len()
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        self.lru.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Lru {
    fn touch(&mut self, key: Key) -> Option<Arc<Vec<u8>>> {
        self.tick += 1;
        let tick = self.tick;
        let (b, t) = self.map.get_mut(&key)?;
        self.order.remove(t);
        *t = tick;
        self.order.insert(tick, key);
        Some(Arc::clone(b))
    }

    /// Inserts `block` as just used, or with `bulk` as the first to go.
    fn insert(&mut self, key: Key, block: Arc<Vec<u8>>, bulk: bool) {
        if block.len() > self.bytes_max || self.touch(key).is_some() {
            return;
        }
        while self.bytes + block.len() > self.bytes_max {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            self.remove(old);
        }
        let tick = if bulk {
            self.bulk_tick -= 1;
            self.bulk_tick
        } else {
            self.tick
        };
        self.bytes += block.len();
        self.order.insert(tick, key);
        self.map.insert(key, (block, tick));
    }

    fn remove(&mut self, key: Key) {
        if let Some((b, t)) = self.map.remove(&key) {
            self.order.remove(&t);
            self.bytes -= b.len();
        }
    }
}

/// One log's view of a (possibly shared) [`BlockCache`]: its blocks are told apart from
/// other logs' by a number no other log of this process has.
#[derive(Debug)]
pub(crate) struct LogCache {
    cache: Arc<BlockCache>,
    log: u64,
}

impl LogCache {
    pub(crate) fn new(cache: Arc<BlockCache>) -> LogCache {
        static NEXT_LOG: AtomicU64 = AtomicU64::new(0);
        LogCache {
            cache,
            log: NEXT_LOG.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn get(&self, (segment, block): BlockKey) -> Option<Arc<Vec<u8>>> {
        self.cache.lock().touch((self.log, segment, block))
    }

    /// Keeps `b`; `bulk` for a bulk reader's block (see the module's text).
    pub(crate) fn insert(&self, (segment, block): BlockKey, b: Arc<Vec<u8>>, bulk: bool) {
        self.cache
            .lock()
            .insert((self.log, segment, block), b, bulk);
    }

    /// Drops every block of `segment` of this log.
    pub(crate) fn forget_segment(&self, segment: u64) {
        let mut lru = self.cache.lock();
        let keys: Vec<_> = lru
            .map
            .keys()
            .filter(|(l, s, _)| *l == self.log && *s == segment)
            .copied()
            .collect();
        for k in keys {
            lru.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(len: usize) -> Arc<Vec<u8>> {
        Arc::new(vec![0; len])
    }

    #[test]
    fn evicts_least_recently_used_within_the_byte_bound() {
        let c = LogCache::new(BlockCache::new(20));
        c.insert((0, 0), block(10), false);
        c.insert((0, 1), block(10), false);
        assert!(c.get((0, 0)).is_some());
        c.insert((0, 2), block(10), false);
        assert!(c.get((0, 1)).is_none(), "the least recently used went");
        assert!(c.get((0, 0)).is_some());
        assert!(c.get((0, 2)).is_some());
        assert_eq!(c.cache.bytes(), 20);
        c.insert((0, 3), block(15), false);
        assert_eq!((c.cache.blocks(), c.cache.bytes()), (1, 15));
        c.insert((0, 4), block(21), false);
        assert!(
            c.get((0, 4)).is_none(),
            "a block larger than the cache is not kept"
        );
    }

    #[test]
    fn a_bulk_pass_larger_than_the_cache_keeps_what_was_used_and_the_start_of_the_pass() {
        let c = LogCache::new(BlockCache::new(30));
        c.insert((9, 0), block(10), false);
        // A pass over four blocks, two of which fit beside the used one.
        for i in 0..4 {
            if c.get((0, i)).is_none() {
                c.insert((0, i), block(10), true);
            }
        }
        assert!(c.get((9, 0)).is_some(), "the used block outlived the pass");
        assert!(c.get((0, 0)).is_some(), "the start of the pass stayed");
        assert_eq!(c.cache.bytes(), 30);
        // Passes again: plain LRU would miss every block every pass; here the start of the
        // pass hits (and, used now, stays), the rest take turns in one place.
        let mut hits = 0;
        for _ in 0..3 {
            for i in 0..4 {
                match c.get((0, i)) {
                    Some(_) => hits += 1,
                    None => c.insert((0, i), block(10), true),
                }
            }
        }
        assert_eq!(hits, 3, "block 0 hit in each of three passes");
        assert!(c.get((9, 0)).is_some() && c.get((0, 0)).is_some());
        // A block larger than the cache is not kept, bulk or not.
        c.insert((0, 9), block(31), true);
        assert!(c.get((0, 9)).is_none());
    }

    #[test]
    fn logs_sharing_a_cache_keep_their_blocks_apart() {
        let shared = BlockCache::new(100);
        let (a, b) = (LogCache::new(shared.clone()), LogCache::new(shared.clone()));
        a.insert((1, 0), Arc::new(vec![1]), false);
        b.insert((1, 0), Arc::new(vec![2]), false);
        assert_eq!(*a.get((1, 0)).unwrap(), vec![1]);
        assert_eq!(*b.get((1, 0)).unwrap(), vec![2]);
        a.insert((2, 0), Arc::new(vec![3]), true);
        a.forget_segment(1);
        assert!(a.get((1, 0)).is_none());
        assert!(a.get((2, 0)).is_some());
        assert_eq!(
            *b.get((1, 0)).unwrap(),
            vec![2],
            "the other log's block stays"
        );
        assert_eq!((shared.blocks(), shared.bytes()), (2, 2));
    }
}
