use super::*;
use crate::testrng::Rng;

/// The contract, written the slow and obvious way: fold char by char, try
/// every character start, check the neighbours in the original text.
fn reference(
    query: &str,
    text: &str,
    case_sensitive: bool,
    whole_word: bool,
) -> Vec<(usize, usize)> {
    let map = |c: char| if case_sensitive { c } else { fold_char(c) };
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let q: Vec<char> = query.chars().map(map).collect();
    let mut out = Vec::new();
    let mut p = 0;
    while p + q.len() <= chars.len() {
        let hit = (0..q.len()).all(|k| map(chars[p + k].1) == q[k]);
        if !hit {
            p += 1;
            continue;
        }
        let start = chars[p].0;
        let end = chars.get(p + q.len()).map_or(text.len(), |c| c.0);
        let before_ok = p == 0 || !is_word_char(chars[p - 1].1);
        let after_ok = p + q.len() == chars.len() || !is_word_char(chars[p + q.len()].1);
        if whole_word && !(before_ok && after_ok) {
            p += 1;
            continue;
        }
        out.push((start, end));
        p += q.len();
    }
    out
}

fn check(query: &str, text: &str, cs: bool, ww: bool) {
    let m = Matcher::new(query, cs, ww);
    let mut got = Vec::new();
    m.find_all(text, &mut got);
    let want = reference(query, text, cs, ww);
    assert_eq!(
        got, want,
        "query {query:?} text {text:?} case_sensitive {cs} whole_word {ww}"
    );
    assert_eq!(m.is_match(text), !want.is_empty());
    assert_eq!(m.count(text), want.len());
    for &(s, e) in &got {
        assert!(text.is_char_boundary(s) && text.is_char_boundary(e) && s < e);
    }
}

fn all_modes(query: &str, text: &str) {
    for cs in [false, true] {
        for ww in [false, true] {
            check(query, text, cs, ww);
        }
    }
}

fn hits(query: &str, text: &str, cs: bool, ww: bool) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    Matcher::new(query, cs, ww).find_all(text, &mut v);
    v
}

#[test]
fn named_cases() {
    // ẞ and ß fold together, ß never matches ss.
    assert_eq!(
        hits("ß", "STRAẞE strasse straße", false, false),
        vec![(4, 7), (21, 23)]
    );
    assert_eq!(hits("ss", "straße", false, false), vec![]);
    // Kelvin sign (3 bytes) folds to k (1 byte): offsets are of the original text.
    assert_eq!(hits("k", "\u{212A}elvin", false, false), vec![(0, 3)]);
    assert_eq!(
        hits("KELVIN", "x \u{212A}elvin", false, false),
        vec![(2, 10)]
    );
    assert_eq!(hits("\u{212A}", "k", true, false), vec![]);
    // Final and capital sigma.
    assert_eq!(
        hits("σ", "ΣΑΣ ας", false, false),
        vec![(0, 2), (4, 6), (9, 11)]
    );
    // Non-overlapping, resume at match end.
    assert_eq!(hits("aa", "aaaaa", true, false), vec![(0, 2), (2, 4)]);
    // Whole word: reject, then resume one char after the candidate's start.
    assert_eq!(hits("aa", "aaa aa", true, true), vec![(4, 6)]);
    assert_eq!(hits("a a", "a a a", true, true), vec![(0, 3)]);
    // Marks and joiners are word characters.
    assert_eq!(hits("cafe", "cafe\u{0301}", false, true), vec![]);
    assert_eq!(hits("ab", "ab\u{200D}", false, true), vec![]);
    assert_eq!(hits("ab", "ab😀ab", false, true), vec![(0, 2), (6, 8)]);
    // Case-sensitive is exact bytes.
    assert_eq!(
        hits("Error", "error Error ERROR", true, false),
        vec![(6, 11)]
    );
    assert_eq!(
        hits("Error", "error Error ERROR", false, false),
        vec![(0, 5), (6, 11), (12, 17)]
    );
    assert_eq!(hits("x", "", false, false), vec![]);
}

#[test]
fn whole_word_reject_resumes_one_scalar_after_start() {
    // The candidate "ab" at 0 is rejected (followed by "a"); the next try starts
    // at byte 1, so the overlapping "ab" at 2 is found.
    assert_eq!(hits("aba", "ababa", true, true), vec![]);
    assert_eq!(hits("aba", "abab aba", true, true), vec![(5, 8)]);
    assert_eq!(hits("éé", "ééé éé", false, true), vec![(7, 11)]);
    all_modes("éé", "ééé éé");
    all_modes("a-", "a-a- a-");
}

#[test]
fn trigrams_of_the_folded_query() {
    assert!(Matcher::new("xz", false, false).trigrams().is_empty());
    assert!(Matcher::new("ß", false, false).trigrams().is_empty());
    assert_eq!(Matcher::new("ABC", true, false).trigrams(), &[0x0061_6263]);
    assert_eq!(Matcher::new("aaaa", false, false).trigrams(), &[0x61_61_61]);
    // ẞ folds to ß (2 bytes): "ẞx" folds to 3 bytes, one trigram.
    assert_eq!(Matcher::new("ẞx", false, false).trigrams(), &[0x00C3_9F78]);
}

#[test]
#[should_panic(expected = "must not be empty")]
fn empty_query_panics() {
    let _ = Matcher::new("", false, false);
}

const ALPHABET: &[&str] = &[
    "a", "b", "k", "K", "s", "S", " ", "-", "_", "1", ".", "ß", "ẞ", "\u{212A}", "ς", "σ", "Σ",
    "\u{0301}", "\u{0308}", "\u{200D}", "\u{200C}", "中", "文", "😀", "🦀", "é", "É", "\u{2126}",
    "ω", "\u{023A}", "\u{2C65}", "\u{017F}", "\n",
];

fn random_text(rng: &mut Rng, max_chars: usize) -> String {
    let n = rng.below(max_chars + 1);
    let mut s = String::new();
    for _ in 0..n {
        if rng.below(4) == 0 {
            // ASCII-heavy runs, like real text.
            for _ in 0..rng.below(12) {
                s.push(char::from(b"abkKsS -_x"[rng.below(10)]));
            }
        } else {
            s.push_str(ALPHABET[rng.below(ALPHABET.len())]);
        }
    }
    s
}

#[test]
fn random_texts_agree_with_the_reference() {
    let mut rng = Rng::from_env("random_texts_agree_with_the_reference");
    for _ in 0..20_000 {
        let text = random_text(&mut rng, 40);
        // Queries: a random slice of the text (often a hit) or a random string.
        let query = if rng.below(2) == 0 && !text.is_empty() {
            let chars: Vec<char> = text.chars().collect();
            let a = rng.below(chars.len());
            let b = (a + 1 + rng.below(4)).min(chars.len());
            chars[a..b].iter().collect()
        } else {
            let q = random_text(&mut rng, 4);
            if q.is_empty() {
                "k".to_string()
            } else {
                q
            }
        };
        all_modes(&query, &text);
    }
}

#[test]
fn long_ascii_and_mixed_texts_agree_with_the_reference() {
    let mut rng = Rng::from_env("long_ascii_and_mixed_texts_agree_with_the_reference");
    for _ in 0..200 {
        let mut text = String::new();
        for _ in 0..rng.below(300) {
            text.push_str(
                [
                    "The ",
                    "ERROR ",
                    "error_",
                    "Straße ",
                    "\u{212A}ey ",
                    "ok\n",
                    "σΣς ",
                ][rng.below(7)],
            );
        }
        for q in ["error", "ERROR", "e", "ß", "key", "σς", "ok\nthe"] {
            all_modes(q, &text);
        }
    }
}

#[test]
fn huge_text_then_small_text() {
    let mut big = "x".repeat(3 << 20);
    big.push_str("ERROR");
    assert_eq!(
        hits("error", &big, false, false),
        vec![(3 << 20, (3 << 20) + 5)]
    );
    assert_eq!(hits("error", "an Error", false, false), vec![(3, 8)]);
}

#[test]
fn matcher_is_shared_across_threads() {
    let m = std::sync::Arc::new(Matcher::new("straße", false, true));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || m.count("STRASSE Straße STRAẞE straßen"))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 2);
    }
}
