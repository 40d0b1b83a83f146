//! Writes the seed corpus of `bundle_import` from real bundles (the Sessions of
//! `bundle_source.rs`). Run from `fuzz/`: `cargo run --bin make_bundle_seeds`.

mod bundle_source;

use std::path::Path;

fn write(name: &str, bytes: &[u8]) {
    assert!(bytes.len() < 64 << 10, "{name}: seeds stay small");
    let out = Path::new("corpus/bundle_import").join(format!("seed-{name}"));
    std::fs::write(&out, bytes).expect("write seed");
    println!("{} ({} bytes)", out.display(), bytes.len());
}

fn main() {
    std::fs::create_dir_all("corpus/bundle_import").expect("corpus dir");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (plain, fork) = bundle_source::source_bundles(&tmp.path().join("root"));
    write("plain", &plain);
    write("fork", &fork);
    // Cut inside the parts, and just after the header's checksum (the parts missing).
    write("truncated", &plain[..plain.len() * 2 / 3]);
    let m = u32::from_le_bytes(plain[12..16].try_into().expect("4 bytes")) as usize;
    write("head-only", &plain[..16 + m + 32]);
    // Inputs read as structural edit plans rather than bundles (`Plan` in the target: a bool
    // byte each for `fork` and `renumber`, then per edit a 1 byte and the variant as a u32 LE
    // whose top bits pick one of the 30 `Edit`s, its fields; a 0 byte ends the list).
    // The plain Session without its event 4, the rest renumbered:
    write(
        "plan-drop-event",
        &[0, 1, 1, 0x9a, 0x99, 0x99, 0x19, 0, 3, 0],
    );
    // The plain Session with its userMessage twice (events 2 and 3, one invocation): an
    // append refuses that (`conflict`); an import takes it today.
    write(
        "plan-dup-user-message",
        &[0, 1, 1, 0x23, 0x22, 0x22, 0x22, 0, 1, 0],
    );
    // The fork with its sessionCreated copied in again as event 6, renumbered:
    write(
        "plan-copy-created",
        &[1, 1, 1, 0x34, 0x33, 0x33, 0x33, 1, 0, 0, 0, 5, 0],
    );
    // The plain Session with an 8,400-byte workspace and a fork fence at 2:
    write(
        "plan-manifest",
        &[
            0, 0, 1, 0x9a, 0x99, 0x99, 0x99, 3, 1, 0x12, 0x11, 0x11, 0x91, 1, 2, 0,
        ],
    );
}
