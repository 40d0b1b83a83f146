//! A small LRU of decompressed blocks, so a sequential read decompresses each block once.

use std::collections::HashMap;
use std::sync::Arc;

/// Decompressed blocks kept in memory (64 KiB each: 4 MiB in all).
pub const BLOCK_CACHE_BLOCKS: usize = 64;

/// Key: (segment, block index).
pub type BlockKey = (u64, u32);

#[derive(Debug)]
pub struct BlockCache {
    map: HashMap<BlockKey, (Arc<Vec<u8>>, u64)>,
    tick: u64,
    cap: usize,
}

impl BlockCache {
    pub fn new(cap: usize) -> BlockCache {
        BlockCache {
            map: HashMap::with_capacity(cap + 1),
            tick: 0,
            cap,
        }
    }

    pub fn get(&mut self, key: BlockKey) -> Option<Arc<Vec<u8>>> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(&key).map(|(b, t)| {
            *t = tick;
            Arc::clone(b)
        })
    }

    pub fn insert(&mut self, key: BlockKey, block: Arc<Vec<u8>>) {
        self.tick += 1;
        if self.map.len() >= self.cap && !self.map.contains_key(&key) {
            // Evicting by a linear scan is fine at this size and keeps the structure trivial.
            if let Some(old) = self
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| *k)
            {
                self.map.remove(&old);
            }
        }
        self.map.insert(key, (block, self.tick));
    }

    /// Drops every block of `segment`.
    pub fn forget_segment(&mut self, segment: u64) {
        self.map.retain(|(s, _), _| *s != segment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let mut c = BlockCache::new(2);
        c.insert((0, 0), Arc::new(vec![0]));
        c.insert((0, 1), Arc::new(vec![1]));
        assert!(c.get((0, 0)).is_some());
        c.insert((0, 2), Arc::new(vec![2]));
        assert!(c.get((0, 1)).is_none());
        assert!(c.get((0, 0)).is_some());
        assert!(c.get((0, 2)).is_some());
    }
}
