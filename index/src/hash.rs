//! A hash for integer keys.

use std::hash::Hasher;

/// Multiplicative hash for integer keys (trigrams, sequence numbers): std's default hasher
/// costs more than the rest of a postings `add`, or of an event cache lookup, together.
#[derive(Debug, Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A `HashMap` / `HashSet` hasher builder of [`IntHasher`].
pub type IntHash = std::hash::BuildHasherDefault<IntHasher>;
