//! `logbook-api`: the synchronous Host API, its wire types and the `logbook` binary (not yet built).
#![forbid(unsafe_code)]
