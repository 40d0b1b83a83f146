//! FixedIndex reader: any file contents never panic on open, and whatever
//! opens reads back consistently (each entry whole, or refused by its checksum,
//! and `check_all` agreeing), survives a push + sync, and reopens.
#![no_main]

use libfuzzer_sys::fuzz_target;
use logbook_index::FixedIndex;

fuzz_target!(|data: &[u8]| {
    let Some((&w, rest)) = data.split_first() else { return };
    let width = u32::from(w % 16) + 1;
    let tag = *b"FUZZ";
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("f.idx");
    // Half the inputs start from a valid header so the entry paths get exercised.
    if w & 0x80 != 0 {
        drop(FixedIndex::create(&path, tag, width).expect("create"));
        let mut bytes = std::fs::read(&path).expect("read");
        bytes.extend_from_slice(rest);
        std::fs::write(&path, &bytes).expect("write");
    } else {
        std::fs::write(&path, rest).expect("write");
    }
    let Ok(mut ix) = FixedIndex::open(&path, tag, width) else { return };
    let n = ix.len();
    let mut damaged = false;
    for i in 0..n {
        match ix.get(i) {
            Ok(e) => assert_eq!(e.expect("i < len").len(), width as usize),
            Err(_) => damaged = true,
        }
    }
    assert_eq!(ix.check_all().is_err(), damaged);
    assert!(ix.get(n).expect("past the end is not an entry").is_none());
    if let Ok(p) = ix.partition_point(|e| e[0] < 0x80) {
        assert!(p <= n);
    }
    ix.push(&vec![7u8; width as usize]);
    ix.sync().expect("sync");
    drop(ix);
    let ix = FixedIndex::open(&path, tag, width).expect("reopen after sync");
    assert_eq!(ix.len(), n + 1);
    assert_eq!(
        ix.get(n).expect("the entry just synced"),
        Some(&vec![7u8; width as usize][..])
    );
});
