mod common;
use common::*;
use logbook_engine::*;

fn all_hits(
    root: &Root,
    q: &str,
    cs: bool,
    ww: bool,
    limit: u32,
    through: Option<u64>,
) -> Vec<SearchHit> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let p = root
            .search(SearchParams {
                session_id: "s".into(),
                query: q.into(),
                case_sensitive: Some(cs),
                whole_word: Some(ww),
                through,
                after,
                limit: Some(limit),
            })
            .expect("search");
        assert!(p.hits.len() <= limit as usize);
        out.extend(p.hits);
        after = p.next_after;
        if after.is_none() {
            return out;
        }
    }
}

#[test]
fn search_pages_report_each_match_once_in_order() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = root_at(&tmp.path().join("r"));
    create(&root, "s");
    let json = format!(
        r#"[{{"kind":"userMessage","invocation":"i","text":"Error error ERROR errors","attachments":[]}},
            {{"kind":"modelCompletion","invocation":"i","model":"m","items":[
              {{"kind":"assistant","body":"no match here","thinking":"an error in thinking"}},
              {{"kind":"toolCall","id":"c","name":"error","arguments":"{{\"e\":\"error\"}}","internal":true}}],"usage":null}},
            {}]"#,
        tool_result("i", "c", "hidden error result; Straße STRASSE")
    );
    append(&root, "s", "a", &json).expect("append");
    let full = all_hits(&root, "error", false, false, 1024, None);
    let fields: Vec<(u64, u32, &str, u64)> = full
        .iter()
        .map(|h| {
            (
                h.position.source_sequence,
                h.position.item_index,
                h.field.as_str(),
                h.start,
            )
        })
        .collect();
    assert_eq!(
        fields,
        vec![
            (2, 0, "body", 0),
            (2, 0, "body", 6),
            (2, 0, "body", 12),
            (2, 0, "body", 18),
            (3, 0, "thinking", 3),
            (3, 1, "arguments", 6),
            (4, 0, "body", 7),
        ],
        "toolCall names are not searched; internal rows are"
    );
    for limit in [1, 2, 3] {
        assert_eq!(
            all_hits(&root, "error", false, false, limit, None),
            full,
            "limit {limit}"
        );
    }
    let ww: Vec<u64> = all_hits(&root, "error", false, true, 2, None)
        .iter()
        .map(|h| h.start)
        .collect();
    assert_eq!(ww.len(), 6, "errors is not a whole word");
    assert_eq!(all_hits(&root, "error", true, false, 5, None).len(), 5);
    assert_eq!(
        all_hits(&root, "ss", false, false, 5, None).len(),
        1,
        "ß is not folded to ss"
    );
    assert!(all_hits(&root, "error", false, false, 5, Some(1)).is_empty());
    let e = root
        .search(SearchParams {
            session_id: "s".into(),
            query: String::new(),
            case_sensitive: None,
            whole_word: None,
            through: None,
            after: None,
            limit: None,
        })
        .expect_err("empty");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // A cursor for another query is refused.
    let p = root
        .search(SearchParams {
            session_id: "s".into(),
            query: "error".into(),
            case_sensitive: None,
            whole_word: None,
            through: None,
            after: None,
            limit: Some(1),
        })
        .expect("page");
    let e = root
        .search(SearchParams {
            session_id: "s".into(),
            query: "errors".into(),
            case_sensitive: None,
            whole_word: None,
            through: None,
            after: p.next_after,
            limit: Some(1),
        })
        .expect_err("foreign cursor");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}
