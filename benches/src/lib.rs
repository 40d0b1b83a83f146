//! Criterion benchmarks for Logbook live in `benches/benches/`; this library holds shared corpus helpers.
#![forbid(unsafe_code)]
