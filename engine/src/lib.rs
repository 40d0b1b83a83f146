//! `logbook-engine` (not yet built).
#![forbid(unsafe_code)]
