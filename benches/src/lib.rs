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

/// Bytes of every file under `dir` (their lengths, not allocated blocks), summed by kind: the
/// file's extension, or its whole name when it has none (`seq.idx` counts as `idx`, a log
/// segment `00000000.sealed` as `sealed`), largest first.
pub fn bytes_by_kind(dir: &Path) -> Vec<(String, u64)> {
    fn walk(dir: &Path, out: &mut std::collections::BTreeMap<String, u64>) {
        for e in std::fs::read_dir(dir)
            .expect("list a bench folder")
            .flatten()
        {
            let m = e.metadata().expect("stat a bench file");
            if m.is_dir() {
                walk(&e.path(), out);
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let kind = match name.rsplit_once('.') {
                Some((_, ext)) if !ext.is_empty() => ext.to_owned(),
                _ => name,
            };
            *out.entry(kind).or_default() += m.len();
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, &mut out);
    let mut v: Vec<(String, u64)> = out.into_iter().collect();
    v.sort_by_key(|k| std::cmp::Reverse(k.1));
    v
}

/// [`bytes_by_kind`] as one line: each kind's bytes over `text_bytes`, e.g. `sealed 0.31x`.
pub fn bytes_by_kind_line(dir: &Path, text_bytes: u64) -> String {
    bytes_by_kind(dir)
        .iter()
        .map(|(k, b)| format!("{k} {:.3}x", *b as f64 / text_bytes.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}
