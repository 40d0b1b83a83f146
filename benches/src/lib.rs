//! Criterion benchmarks for Logbook live in `benches/benches/`; this library holds what they
//! share: where the real-text bench corpus is, and a clear error when it is not made yet.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// Where the corpus files are looked for when `LOGBOOK_CORPUS` does not name them:
/// `LOGBOOK_CORPUS_DIR`, else `target/corpus` in this workspace (made by the recipe below).
pub fn corpus_dir() -> PathBuf {
    match std::env::var_os("LOGBOOK_CORPUS_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("target")
            .join("corpus"),
    }
}

/// The corpus files a bench reads: `LOGBOOK_CORPUS` (one path, or several separated by
/// commas where a bench measures several sizes), else `default_name` in [`corpus_dir`].
pub fn corpus_files(default_name: &str) -> Vec<PathBuf> {
    match std::env::var("LOGBOOK_CORPUS") {
        Ok(list) => list
            .split(',')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect(),
        Err(_) => vec![corpus_dir().join(default_name)],
    }
}

/// What to tell someone whose corpus file `path` cannot be read (`e`): how to make it.
pub fn corpus_missing(path: &Path, e: &dyn std::fmt::Display) -> String {
    format!(
        "bench corpus {}: {e}. Make it with the recipe in ../shared/bench/README.md \
         (`bash ../shared/bench/fetch-crates.sh`, then \
         `python3 ../shared/bench/corpus.py target/corpus 100 500` from the repository), \
         or name an existing rows*.jsonl in LOGBOOK_CORPUS (docs/benchmarks.md, \"Corpus\")",
        path.display()
    )
}

/// The text of corpus file `path`; panics with [`corpus_missing`] when it cannot be read.
pub fn read_corpus(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}", corpus_missing(path, &e)))
}
