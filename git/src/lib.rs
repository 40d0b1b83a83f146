//! `logbook-git` (not yet built).
#![forbid(unsafe_code)]
