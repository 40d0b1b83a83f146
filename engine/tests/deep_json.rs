//! `raw` JSON nested 100,000 levels deep goes in through serde_json and comes back out exactly,
//! on a thread with a normal 2 MiB stack: nothing on the path recurses per level.
mod common;
use common::*;
use logbook_engine::*;

const DEPTH: usize = 100_000;

#[test]
fn deep_raw_round_trips_without_overflow() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("r");
    let root = root_at(&dir);
    let sid = create(&root, "deep");
    let raw = format!(
        "{}{}{}",
        "[{\"k\":".repeat(DEPTH / 2),
        "1.250e+01",
        "}]".repeat(DEPTH / 2)
    );
    let body = "deep";
    let request = format!(
        r#"{{"sessionId":"{sid}","operation":"deep-1","events":[{{"kind":"toolResult","invocation":"i","toolCallId":"c",
        "status":"ok","body":"{body}","raw":{raw},"parts":[],"bytes":4,"digest":"{}"}}]}}"#,
        validate::sha256_digest(body.as_bytes())
    );
    let root = std::sync::Arc::new(root);
    let r2 = std::sync::Arc::clone(&root);
    let raw2 = raw.clone();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            // The API layer's path: the whole request through serde_json into the param type.
            let params: AppendParams =
                serde_json::from_str(&request).expect("deserialize deep request");
            let res = r2.append(params.clone()).expect("append deep");
            assert_eq!(res.first_sequence, 2);
            // Read back from disk (postcard) and serialize to JSON again.
            let ev = r2.read_event(&sid, 2).expect("read");
            let Event::ToolResult(t) = &ev else {
                panic!("kind")
            };
            assert_eq!(t.raw.get(), raw2);
            let json = serde_json::to_string(&ev).expect("serialize");
            assert!(json.contains(&raw2));
            // A repeat computes the params digest over the deep value too.
            assert_eq!(r2.append(params).expect("repeat"), res);
            validate_json(&raw2).expect("iterative validator");
        })
        .expect("spawn")
        .join()
        .expect("no stack overflow");
    drop(root);
    // And after a restart, on a small stack again.
    let root = Root::open(&dir).expect("reopen");
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let ev = root.read_event("deep", 2).expect("read");
            let Event::ToolResult(t) = &ev else {
                panic!("kind")
            };
            assert_eq!(t.raw.get(), raw);
        })
        .expect("spawn")
        .join()
        .expect("no stack overflow after reopen");
}
