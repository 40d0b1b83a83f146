//! The relative-path parser never panics, and what it accepts obeys the path rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use logbook_fs::{RelPath, NAME_BYTES_MAX, PATH_BYTES_MAX};

fuzz_target!(|data: &[u8]| {
    let Ok(path) = RelPath::parse(data) else { return };
    assert_eq!(path.as_bytes(), data, "accepted bytes are kept exactly");
    assert!(!data.is_empty() && data.len() <= PATH_BYTES_MAX);
    assert!(!data.contains(&0), "no NUL");
    assert!(data[0] != b'/', "not absolute");
    let mut count = 0;
    for c in data.split(|&b| b == b'/') {
        assert!(!c.is_empty(), "no empty component");
        assert!(c != b"." && c != b"..", "no dot components");
        assert!(c.len() <= NAME_BYTES_MAX);
        count += 1;
    }
    assert_eq!(path.components().count(), count);
});
