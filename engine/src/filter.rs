//! A Session's trigram filter: which trigrams its rows may hold, so that a Root-wide search
//! skips a Session that cannot match without opening it.
//!
//! A bit set of `2^log2_bits` bits, one bit per trigram and one per byte pair (the top bits
//! of a multiplicative hash of the trigram, or of `0x0100_0000 | pair` for each of the two
//! byte pairs in a trigram), built from the distinct trigrams of the Session's postings (finished
//! segments' files, the active tail, and a layered fork's source through its fence). A set
//! bit means "may be present", a clear one "absent": a query's plan that needs a trigram
//! (or, for a 2-byte query, its pair) whose bit is clear cannot match. It is sized to about 4 to 8 bits per distinct trigram
//! (at least [`FILTER_BITS_MIN`], at most [`FILTER_BITS_MAX`]), built at the largest size
//! and folded down (bits `2i` and `2i + 1` become bit `i`), so no trigram is lost by the
//! folding. It covers the Session up to `revision`; a commit makes it stale.

use logbook_index::Matcher;

/// Fewest bits of a filter (128 bytes).
pub const FILTER_BITS_MIN: u32 = 10;
/// Most bits of a filter (256 KiB): a Session with more distinct trigrams than a quarter of
/// this fills its filter and is opened by every search that needs three or more bytes.
pub const FILTER_BITS_MAX: u32 = 21;

/// The filter of one Session as of `revision`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TrigramFilter {
    pub revision: u64,
    log2_bits: u32,
    /// `2^log2_bits / 8` bytes, bit `i` is `bits[i / 8] >> (i % 8) & 1`.
    bits: Vec<u8>,
}

/// The key a byte pair is set under: outside the 24-bit trigram space.
fn pair_key(pair: u16) -> u32 {
    0x0100_0000 | u32::from(pair)
}

fn slot(trigram: u32, log2_bits: u32) -> usize {
    ((u64::from(trigram).wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> (64 - log2_bits)) as usize
}

impl TrigramFilter {
    /// A filter of the trigrams `each` hands out (repeats allowed), covering `revision`.
    pub(crate) fn build(revision: u64, each: impl FnOnce(&mut dyn FnMut(u32))) -> TrigramFilter {
        let mut keys = Vec::new();
        each(&mut |t| keys.push(t));
        // Sized for the count with repeats (at least the distinct count), then folded to
        // what the bits set ask for.
        let want = (keys.len() as u64 * 16)
            .max(1)
            .next_power_of_two()
            .trailing_zeros();
        let mut log2_bits = want.clamp(FILTER_BITS_MIN, FILTER_BITS_MAX);
        let mut bits = vec![0u8; 1 << (log2_bits - 3)];
        for t in keys {
            // The trigram, and the two byte pairs in it (every pair of a field is in one of
            // its trigrams, the field's edges included), for 2-byte queries.
            for key in [t, pair_key((t >> 8) as u16), pair_key(t as u16)] {
                let i = slot(key, log2_bits);
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        let set: u64 = bits.iter().map(|b| u64::from(b.count_ones())).sum();
        // Fold while the half would still have 4 bits or more per trigram set.
        while log2_bits > FILTER_BITS_MIN && set * 4 <= 1u64 << (log2_bits - 1) {
            bits = fold(&bits);
            log2_bits -= 1;
        }
        TrigramFilter {
            revision,
            log2_bits,
            bits,
        }
    }

    /// A filter read back from the catalog, if its size fits its bits.
    pub(crate) fn checked(self) -> Option<TrigramFilter> {
        ((FILTER_BITS_MIN..=FILTER_BITS_MAX).contains(&self.log2_bits)
            && self.bits.len() == 1 << (self.log2_bits - 3))
            .then_some(self)
    }

    fn has(&self, trigram: u32) -> bool {
        let i = slot(trigram, self.log2_bits);
        self.bits[i / 8] >> (i % 8) & 1 == 1
    }

    /// False when no row under the filter can hold a match of `plan`.
    pub(crate) fn may_match(&self, plan: &Plan) -> bool {
        match plan {
            Plan::AllOf(t) => t.iter().all(|&t| self.has(t)),
            Plan::AnyOf { pair, .. } => self.has(pair_key(*pair)),
            Plan::Every => true,
        }
    }

    /// Adds every trigram `other` may hold: both are folded to the smaller size, then OR-ed.
    pub(crate) fn union(&mut self, other: &TrigramFilter) {
        let mut theirs = other.bits.clone();
        let mut their_log2 = other.log2_bits;
        while their_log2 > self.log2_bits {
            theirs = fold(&theirs);
            their_log2 -= 1;
        }
        while self.log2_bits > their_log2 {
            self.bits = fold(&self.bits);
            self.log2_bits -= 1;
        }
        for (a, b) in self.bits.iter_mut().zip(&theirs) {
            *a |= b;
        }
    }

    /// Bytes the filter holds.
    #[cfg(test)]
    pub(crate) fn byte_len(&self) -> usize {
        self.bits.len()
    }
}

/// Halves a bit set: bits `2i` and `2i + 1` become bit `i`.
fn fold(bits: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; bits.len() / 2];
    for (i, &b) in bits.iter().enumerate() {
        // The byte's 8 bits become 4 bits of out byte i / 2 (low or high half).
        let mut half = 0u8;
        for k in 0..4 {
            if b >> (2 * k) & 3 != 0 {
                half |= 1 << k;
            }
        }
        out[i / 2] |= half << (4 * (i % 2));
    }
    out
}

/// Which docs a postings source must return for the query.
pub(crate) enum Plan {
    /// Folded query of 3+ bytes: docs holding all its trigrams.
    AllOf(Vec<u32>),
    /// Folded query of 2 bytes `b1 b2`: docs holding any trigram `? b1 b2` or `b1 b2 ?`
    /// (every field is indexed between edge bytes, so each 2-byte run has one).
    AnyOf { keys: Vec<u32>, pair: u16 },
    /// Folded query of 1 byte: every doc (a bounded scan).
    Every,
}

impl Plan {
    pub(crate) fn new(query: &str, matcher: &Matcher) -> Plan {
        if !matcher.trigrams().is_empty() {
            return Plan::AllOf(matcher.trigrams().to_vec());
        }
        let folded: String = query.chars().map(logbook_index::fold_char).collect();
        match *folded.as_bytes() {
            [b1, b2] => {
                let pair = (u32::from(b1) << 8) | u32::from(b2);
                let mut keys: Vec<u32> = (0..=255u32)
                    .flat_map(|c| [(c << 16) | pair, (pair << 8) | c])
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                Plan::AnyOf {
                    keys,
                    pair: u16::from_be_bytes([b1, b2]),
                }
            }
            _ => Plan::Every,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folded_filter_keeps_every_trigram_and_drops_most_others() {
        let mut x = 0x1234_5678u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x & 0x00FF_FFFF
        };
        for n in [0usize, 1, 100, 5_000, 60_000, 2_000_000] {
            let present: Vec<u32> = (0..n).map(|_| next()).collect();
            let f = TrigramFilter::build(7, |add| present.iter().for_each(|&t| add(t)));
            assert!(f.clone().checked().is_some());
            for &t in &present {
                assert!(f.has(t), "{n} trigrams: {t:#x} lost");
            }
            if n <= 60_000 {
                assert!(f.byte_len() * 8 >= n * 4, "{n}: {} bytes", f.byte_len());
                let absent = (0..10_000).filter(|_| f.has(next())).count();
                // About one in four to eight bits set, so fewer than a third match.
                assert!(
                    absent < 3_500,
                    "{n} trigrams: {absent} of 10,000 others pass"
                );
            }
            assert!(f.may_match(&Plan::AllOf(present.iter().take(3).copied().collect())));
            assert!(f.may_match(&Plan::Every));
            for &t in present.iter().take(100) {
                assert!(f.has(pair_key((t >> 8) as u16)) && f.has(pair_key(t as u16)));
            }
        }
        let (a, b): (Vec<u32>, Vec<u32>) = (
            (0..300).map(|_| next()).collect(),
            (0..90_000).map(|_| next()).collect(),
        );
        let mut small = TrigramFilter::build(1, |add| a.iter().for_each(|&t| add(t)));
        let large = TrigramFilter::build(1, |add| b.iter().for_each(|&t| add(t)));
        let mut both = large.clone();
        both.union(&small);
        small.union(&large);
        for f in [&small, &both] {
            assert!(
                a.iter().chain(&b).all(|&t| f.has(t)),
                "a union keeps both sides"
            );
        }
        assert_eq!(
            TrigramFilter::build(1, |_| {}).byte_len(),
            1 << (FILTER_BITS_MIN - 3)
        );
    }
}
