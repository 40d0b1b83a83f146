//! Helpers shared by the integration tests: a seeded generator and directory copies.

#![allow(dead_code)]

use std::path::Path;

/// SplitMix64: small, seedable, good enough to drive tests.
pub struct Rng(u64);

impl Rng {
    /// Seed from `LOGBOOK_SEED` if set, else from the clock; the seed is printed so a failure
    /// can be replayed.
    pub fn from_env(test: &str) -> Rng {
        let seed = std::env::var("LOGBOOK_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        println!("{test}: LOGBOOK_SEED={seed}");
        Rng(seed)
    }
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Copies every file of `from` into `to` (created).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy dir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("dir entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy file");
    }
}

/// The one file in `dir` whose name ends with `suffix`, if exactly one.
pub fn files_ending(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// A temporary directory on tmpfs when there is one: the tests that reopen a log hundreds of
/// times check logic, not the disk, and fsync is free there.
pub fn fast_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("logbook-test")
            .tempdir_in(shm)
        {
            return d;
        }
    }
    tempfile::tempdir().expect("temporary directory")
}
