//! Readers on other threads see consistent pages while one writer appends.
mod common;
use common::*;
use logbook_engine::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn readers_see_whole_batches_under_their_fence() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = Arc::new(root_at(&tmp.path().join("r")));
    create(&root, "s");
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let root = Arc::clone(&root);
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            for k in 0..150 {
                let json = format!(
                    r#"[{{"kind":"userMessage","invocation":"i{k}","text":"q{k}","attachments":[]}},
                        {{"kind":"modelCompletion","invocation":"i{k}","model":"m","items":[
                          {{"kind":"assistant","body":"a{k}","thinking":"t"}},{{"kind":"assistant","body":"b{k}","thinking":null}}],"usage":null}}]"#
                );
                append(&root, "s", &format!("w{k}"), &json).expect("append");
            }
            done.store(true, Ordering::Release);
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let root = Arc::clone(&root);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut checks = 0;
                while !done.load(Ordering::Acquire) || checks < 5 {
                    let dir = if r % 2 == 0 {
                        Direction::Forward
                    } else {
                        Direction::Backward
                    };
                    let first = hist(&root, "s", None, None, 7, dir);
                    let through = first.through;
                    assert_eq!(through % 2, 1, "fences fall between whole batches");
                    let mut rows = first.rows.clone();
                    let mut after = first.next_after.clone();
                    while let Some(a) = after {
                        let p = hist(&root, "s", Some(through), Some(a), 7, dir);
                        assert_eq!(p.through, through);
                        rows.extend(p.rows);
                        after = p.next_after;
                    }
                    let batches = (through - 1) / 2;
                    assert_eq!(rows.len() as u64, 3 * batches, "rows under fence {through}");
                    if dir == Direction::Backward {
                        rows.reverse();
                    }
                    for (i, row) in rows.iter().enumerate() {
                        let k = i / 3;
                        let want = match i % 3 {
                            0 => format!("q{k}"),
                            1 => format!("a{k}"),
                            _ => format!("b{k}"),
                        };
                        assert_eq!(row.fields["body"].text, want);
                        assert!(row.position.source_sequence <= through);
                    }
                    checks += 1;
                }
                checks
            })
        })
        .collect();
    writer.join().expect("writer");
    for r in readers {
        assert!(r.join().expect("reader") >= 5);
    }
}
