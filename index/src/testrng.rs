//! A tiny seeded generator for the crate's random tests (no extra dependency).
//! Every random test prints its seed; rerun one with `LOGBOOK_TEST_SEED=<seed>`.

pub(crate) struct Rng(u64);

impl Rng {
    /// Seed from `LOGBOOK_TEST_SEED` or the clock, printed so a failure can be replayed.
    pub(crate) fn from_env(test: &str) -> Rng {
        let seed = std::env::var("LOGBOOK_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{test}: LOGBOOK_TEST_SEED={seed}");
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
