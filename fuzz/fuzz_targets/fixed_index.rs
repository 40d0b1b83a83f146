//! FixedIndex reader: any file contents never panic on open, and whatever
//! opens reads back consistently, survives a push + sync, and reopens.
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
    for i in 0..n {
        assert_eq!(ix.get(i).expect("i < len").len(), width as usize);
    }
    assert!(ix.get(n).is_none());
    let p = ix.partition_point(|e| e[0] < 0x80);
    assert!(p <= n);
    ix.push(&vec![7u8; width as usize]);
    ix.sync().expect("sync");
    drop(ix);
    let ix = FixedIndex::open(&path, tag, width).expect("reopen after sync");
    assert_eq!(ix.len(), n + 1);
    assert_eq!(ix.get(n), Some(&vec![7u8; width as usize][..]));
});
