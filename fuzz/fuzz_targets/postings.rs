//! Postings decoder and file reader: arbitrary bytes never panic, and a file
//! that passes `verify` answers every query (all of its trigrams, or any) without error. With a leading 0
//! byte the input is instead a list of texts: build, write, reopen, and the
//! sealed file must answer exactly as the in-memory builder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use logbook_index::{for_each_trigram, PostingsBuilder, PostingsFile};

fn queries(seed: &[u8]) -> Vec<Vec<u32>> {
    let mut qs = vec![Vec::new()];
    for w in seed.chunks(7).take(8) {
        let mut q = Vec::new();
        for_each_trigram(w, |t| q.push(t));
        qs.push(q);
    }
    qs
}

fuzz_target!(|data: &[u8]| {
    if let Some((&0, rest)) = data.split_first() {
        let mut b = PostingsBuilder::new();
        let mut doc = 0u32;
        for text in rest.split(|&c| c == 0xFF) {
            b.add(doc, text);
            doc += 1 + u32::from(text.first().copied().unwrap_or(0) & 3);
        }
        let file = PostingsFile::from_bytes(b.to_bytes().expect("small input")).expect("own output opens");
        file.verify().expect("own output verifies");
        for q in queries(rest) {
            for from in [0, doc / 2, doc] {
                assert_eq!(file.candidates(&q, from, 50).expect("verified"), b.candidates(&q, from, 50));
                assert_eq!(
                    file.candidates_any(&q, from, 50).expect("verified"),
                    b.candidates_any(&q, from, 50)
                );
            }
        }
        return;
    }
    let Ok(file) = PostingsFile::from_bytes(data.to_vec()) else { return };
    let verified = file.verify().is_ok();
    for q in queries(data.get(64..).unwrap_or(&[])) {
        let r = file.candidates(&q, 0, usize::MAX);
        assert!(r.is_ok() || !verified, "verified file failed a query");
        let r = file.candidates_any(&q, 0, usize::MAX);
        assert!(r.is_ok() || !verified, "verified file failed a union");
        let _ = file.candidates(&q, 1000, 3);
        let _ = file.candidates_any(&q, 1000, 3);
    }
});
