//! `logbook-fs`: workspace reads (not yet built).
