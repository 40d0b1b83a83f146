use super::*;
use crate::tables::UNICODE_VERSION;
use std::collections::HashMap;

const UCD: &str = "/usr/share/unicode";

/// Reads a file of the Unicode Character Database, or says loudly why not.
fn ucd(name: &str) -> Option<String> {
    let path = format!("{UCD}/{name}");
    match std::fs::read_to_string(&path) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!(
                "\n*** SKIPPING: {path} is unreadable ({e}). Install Debian's `unicode-data` \
                 package (CI does) to check the tables against the Unicode data. ***\n"
            );
            None
        }
    }
}

fn all_chars() -> impl Iterator<Item = char> {
    (0..=0x10FFFFu32).filter_map(char::from_u32)
}

#[test]
fn every_simple_folding_matches_case_folding_txt() {
    let Some(text) = ucd("CaseFolding.txt") else {
        return;
    };
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        format!("# CaseFolding-{UNICODE_VERSION}.txt"),
        "tables were generated from another version"
    );
    let mut simple = HashMap::new();
    let mut full_only = 0;
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(';').map(str::trim).collect();
        let from = u32::from_str_radix(f[0], 16).unwrap();
        match f[1] {
            "C" | "S" => {
                let to = u32::from_str_radix(f[2], 16).unwrap();
                simple.insert(from, to);
            }
            "F" | "T" => full_only += 1,
            other => panic!("unknown status {other}"),
        }
    }
    assert!(simple.len() > 1400 && full_only > 100);
    for c in all_chars() {
        let want = simple
            .get(&(c as u32))
            .map_or(c, |&t| char::from_u32(t).unwrap());
        assert_eq!(fold_char(c), want, "U+{:04X}", c as u32);
    }
}

#[test]
fn every_general_category_matches_unicode_data_txt() {
    let Some(text) = ucd("UnicodeData.txt") else {
        return;
    };
    let mut cat: HashMap<u32, String> = HashMap::new();
    let mut first: Option<u32> = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split(';').collect();
        let code = u32::from_str_radix(f[0], 16).unwrap();
        if f[1].ends_with(", First>") {
            first = Some(code);
        } else if f[1].ends_with(", Last>") {
            for c in first.take().unwrap()..=code {
                cat.insert(c, f[2].to_string());
            }
        } else {
            cat.insert(code, f[2].to_string());
        }
    }
    let mut words = 0;
    for c in all_chars() {
        let u = c as u32;
        let g = cat.get(&u).map_or("Cn", String::as_str);
        let want = g.starts_with('L')
            || g.starts_with('M')
            || g == "Nd"
            || g == "Pc"
            || u == 0x200C
            || u == 0x200D;
        words += usize::from(want);
        assert_eq!(is_word_char(c), want, "U+{u:04X} category {g}");
    }
    assert!(words > 100_000, "CJK ranges (First/Last) were counted");
}

#[test]
fn named_cases() {
    assert_eq!(
        fold_char('\u{1E9E}'),
        'ß',
        "capital sharp s folds to ß (status S)"
    );
    assert_eq!(
        fold_char('ß'),
        'ß',
        "ß never folds to ss (that is status F)"
    );
    assert_eq!(fold_char('\u{212A}'), 'k', "Kelvin sign");
    assert_eq!(fold_char('K'), 'k');
    assert_eq!(fold_char('ς'), 'σ');
    assert_eq!(fold_char('Σ'), 'σ');
    assert_eq!(fold_char('σ'), 'σ');
    assert_eq!(fold_char('İ'), 'İ', "U+0130 has only F and T foldings");
    assert_eq!(fold_char('中'), '中');
    let mut s = String::new();
    fold_into("ẞtraße ΣΊΣΥΦΟΣ \u{212A}elvin", &mut s);
    assert_eq!(s, "ßtraße σίσυφοσ kelvin");
    assert!(
        is_word_char('_') && is_word_char('9') && is_word_char('é') && is_word_char('\u{0301}')
    );
    assert!(is_word_char('\u{200C}') && is_word_char('\u{200D}') && is_word_char('中'));
    assert!(
        !is_word_char('-')
            && !is_word_char(' ')
            && !is_word_char('😀')
            && !is_word_char('\u{00A0}')
    );
}

#[test]
fn fold_into_and_fold_map_agree_with_fold_char() {
    let samples = [
        "",
        "plain ascii TEXT 123",
        "Größe ẞ \u{212A} ς Σ σ a\u{0301} 中文 😀 \u{200D}\u{200C}",
        "\u{212A}\u{212A}x\u{1E9E}y\u{2126}z\u{023A}",
        "ÀÉÎÕÜ long ascii run after it so the word loop runs: ABCDEFGHIJKLMNOP",
    ];
    for text in samples {
        let want: String = text.chars().map(fold_char).collect();
        let mut got = String::from("prefix:");
        fold_into(text, &mut got);
        assert_eq!(&got["prefix:".len()..], want);
        let mut m = FoldMap::default();
        m.fold(text);
        assert_eq!(std::str::from_utf8(&m.folded).unwrap(), want);
        // Every folded char boundary maps to the matching original char boundary.
        let (mut fo, mut oo) = (0, 0);
        for c in text.chars() {
            assert_eq!(m.original(fo), oo, "{text:?} at folded {fo}");
            fo += fold_char(c).len_utf8();
            oo += c.len_utf8();
        }
        assert_eq!(m.original(fo), oo);
        assert_eq!(
            m.is_identity(),
            fo == oo
                && text
                    .chars()
                    .all(|c| fold_char(c).len_utf8() == c.len_utf8())
        );
    }
}

#[test]
fn ascii_run_finds_the_first_high_byte() {
    let mut v = vec![b'a'; 100];
    assert_eq!(ascii_run(&v), 100);
    for at in 0..100 {
        v[at] = 0xC3;
        assert_eq!(ascii_run(&v), at);
        v[at] = b'a';
    }
}
