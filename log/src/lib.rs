//! `logbook-log`: the segmented, CRC-framed, append-only log (not yet built; see issue 2).
