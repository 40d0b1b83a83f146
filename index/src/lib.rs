//! `logbook-index`: memory-mapped offset indexes, trigram postings and case folding (not yet built).
