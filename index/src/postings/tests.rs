use super::builder::BATCH_PAIRS_MAX;
use super::*;
use crate::error::ErrorKind;
use crate::testrng::Rng;
use crate::trigram::for_each_trigram;
use std::collections::BTreeSet;

/// A model: per doc, the set of trigrams it holds.
struct Model {
    docs: Vec<(u32, BTreeSet<u32>)>,
}

impl Model {
    fn candidates(&self, trigrams: &[u32], from: u32, limit: usize) -> Vec<u32> {
        self.docs
            .iter()
            .filter(|(d, set)| *d >= from && trigrams.iter().all(|t| set.contains(t)))
            .map(|(d, _)| *d)
            .take(limit)
            .collect()
    }
}

fn random_corpus(rng: &mut Rng, docs: usize, alphabet: &[u8]) -> (PostingsBuilder, Model) {
    let mut b = PostingsBuilder::new();
    let mut m = Model { docs: Vec::new() };
    let mut doc = rng.below(5) as u32;
    for _ in 0..docs {
        let mut set = BTreeSet::new();
        // Sometimes several fields per doc.
        for _ in 0..1 + rng.below(2) {
            let len = rng.below(30);
            let text: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect();
            for_each_trigram(&text, |t| {
                set.insert(t);
            });
            b.add(doc, &text);
        }
        m.docs.push((doc, set));
        doc += 1 + [0, 0, 0, 1, 50, 100_000][rng.below(6)] as u32;
    }
    (b, m)
}

fn queries(rng: &mut Rng, m: &Model, alphabet: &[u8]) -> Vec<Vec<u32>> {
    let mut qs = vec![vec![]];
    for _ in 0..60 {
        let n = 1 + rng.below(3);
        let q: Vec<u32> = (0..n)
            .map(|_| {
                if rng.below(3) > 0 && !m.docs.is_empty() {
                    let set = &m.docs[rng.below(m.docs.len())].1;
                    if let Some(&t) = set.iter().nth(rng.below(set.len().max(1))) {
                        return t;
                    }
                }
                let a = |r: &mut Rng| u32::from(alphabet[r.below(alphabet.len())]);
                (a(rng) << 16) | (a(rng) << 8) | a(rng)
            })
            .collect();
        qs.push(q);
    }
    qs
}

#[test]
fn builder_and_file_agree_with_the_model() {
    let mut rng = Rng::from_env("builder_and_file_agree_with_the_model");
    for round in 0..30 {
        let alphabet: &[u8] = if round % 2 == 0 {
            b"abc"
        } else {
            b"abcdefgh ij"
        };
        let docs = [0, 1, 5, 200, 1500][round % 5];
        let (b, m) = random_corpus(&mut rng, docs, alphabet);
        let file = PostingsFile::from_bytes(b.to_bytes().unwrap()).unwrap();
        file.verify().unwrap();
        // Both list exactly the model's trigrams, the file in ascending order.
        let all: BTreeSet<u32> = m.docs.iter().flat_map(|d| d.1.iter().copied()).collect();
        let mut from_builder = Vec::new();
        b.for_each_trigram(|t| from_builder.push(t));
        from_builder.sort_unstable();
        assert_eq!(from_builder, all.iter().copied().collect::<Vec<_>>());
        let mut from_file = Vec::new();
        file.for_each_trigram(|t| from_file.push(t)).unwrap();
        assert_eq!(from_file, from_builder);
        let max_doc = m.docs.last().map_or(0, |d| d.0);
        for q in queries(&mut rng, &m, alphabet) {
            for (from, limit) in [
                (0, usize::MAX),
                (0, 1),
                (max_doc / 2, 7),
                (max_doc, 3),
                (max_doc + 1, 10),
                (u32::MAX, 5),
            ] {
                let want = if q.is_empty() {
                    m.docs
                        .iter()
                        .map(|d| d.0)
                        .filter(|&d| d >= from)
                        .take(limit)
                        .collect()
                } else {
                    m.candidates(&q, from, limit)
                };
                assert_eq!(
                    b.candidates(&q, from, limit),
                    want,
                    "builder q={q:x?} from={from} limit={limit}"
                );
                assert_eq!(
                    file.candidates(&q, from, limit).unwrap(),
                    want,
                    "file q={q:x?} from={from} limit={limit}"
                );
            }
        }
        // Unions: short ones, and wide ones over many directory records (a third of the
        // trigrams present, with absent keys between them), as a 2-byte query asks.
        let mut unions = queries(&mut rng, &m, alphabet);
        for r in 0..3u32 {
            let mut wide: Vec<u32> = all.iter().copied().filter(|t| t % 3 == r).collect();
            wide.extend((0..40).map(|i| (i * 0x0004_1041 + r) & 0x00FF_FFFF));
            unions.push(wide);
        }
        for q in unions {
            for (from, limit) in [(0, usize::MAX), (0, 1), (max_doc / 2, 7), (max_doc + 1, 10)] {
                let want: Vec<u32> = m
                    .docs
                    .iter()
                    .filter(|(d, set)| *d >= from && q.iter().any(|t| set.contains(t)))
                    .map(|d| d.0)
                    .take(limit)
                    .collect();
                assert_eq!(
                    b.candidates_any(&q, from, limit),
                    want,
                    "builder any q={q:x?} from={from} limit={limit}"
                );
                assert_eq!(
                    file.candidates_any(&q, from, limit).unwrap(),
                    want,
                    "file any q={q:x?} from={from} limit={limit}"
                );
            }
        }
    }
}

#[test]
fn paging_with_from_doc_walks_every_candidate_once() {
    let mut b = PostingsBuilder::new();
    for d in 0..10_000u32 {
        let text = if d % 3 == 0 {
            "needle in the hay"
        } else {
            "only hay here"
        };
        b.add(d * 2, text.as_bytes());
    }
    let file = PostingsFile::from_bytes(b.to_bytes().unwrap()).unwrap();
    let q: Vec<u32> = {
        let mut v = Vec::new();
        for_each_trigram(b"needle", |t| v.push(t));
        v
    };
    let mut from = 0;
    let mut all = Vec::new();
    loop {
        let page = file.candidates(&q, from, 100).unwrap();
        if page.is_empty() {
            break;
        }
        assert_eq!(page, b.candidates(&q, from, 100));
        from = page.last().unwrap() + 1;
        all.extend(page);
    }
    let want: Vec<u32> = (0..10_000u32)
        .filter(|d| d % 3 == 0)
        .map(|d| d * 2)
        .collect();
    assert_eq!(all, want);
}

#[test]
fn write_and_open_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg.post");
    let mut b = PostingsBuilder::new();
    b.add(0, b"hello world");
    b.add(1, b"hello there");
    b.add(1, b"second field");
    b.add(7, b"");
    b.write(&path).unwrap();
    let f = PostingsFile::open(&path).unwrap();
    f.verify().unwrap();
    let q = |s: &[u8]| {
        let mut v = Vec::new();
        for_each_trigram(s, |t| v.push(t));
        v
    };
    assert_eq!(f.candidates(&q(b"hello"), 0, 10).unwrap(), vec![0, 1]);
    assert_eq!(f.candidates(&q(b"there"), 0, 10).unwrap(), vec![1]);
    assert_eq!(f.candidates(&q(b"second"), 0, 10).unwrap(), vec![1]);
    assert_eq!(
        f.candidates(&q(b"dfi"), 0, 10).unwrap(),
        Vec::<u32>::new(),
        "no trigram spans fields"
    );
    assert_eq!(f.candidates(&[], 0, 10).unwrap(), vec![0, 1, 7]);
    assert_eq!(
        f.candidates(&[0x0100_0000], 0, 10).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // An empty builder writes a valid empty file.
    let empty = dir.path().join("empty.post");
    PostingsBuilder::new().write(&empty).unwrap();
    let f = PostingsFile::open(&empty).unwrap();
    f.verify().unwrap();
    assert!(f.candidates(&q(b"abc"), 0, 10).unwrap().is_empty());
    assert!(f.candidates(&[], 0, 10).unwrap().is_empty());
}

fn sample_file() -> Vec<u8> {
    let mut b = PostingsBuilder::new();
    for d in 0..400u32 {
        let text = format!("row {d} text {} common words", d % 7);
        b.add(d, text.as_bytes());
    }
    b.to_bytes().unwrap()
}

/// The queries of `check_damaged`, with the clean file's answers.
fn clean_answers(clean: &PostingsFile) -> Vec<(Vec<u32>, u32, Vec<u32>)> {
    let mut ts: Vec<u32> = Vec::new();
    for_each_trigram(b"row 1 text 3 common", |t| ts.push(t));
    let mut out = Vec::new();
    for q in [vec![], ts[0..1].to_vec(), ts[3..6].to_vec(), ts.clone()] {
        for from in [0, 100, 399] {
            let want = clean.candidates(&q, from, usize::MAX).unwrap();
            out.push((q.clone(), from, want));
        }
    }
    out
}

/// Opening and fully querying `bytes` either fails cleanly or gives the clean answers.
fn check_damaged(bytes: Vec<u8>, answers: &[(Vec<u32>, u32, Vec<u32>)], what: &str) {
    let Ok(f) = PostingsFile::from_bytes(bytes) else {
        return;
    };
    let verified = f.verify().is_ok();
    for (q, from, want) in answers {
        match f.candidates(q, *from, usize::MAX) {
            Ok(got) => assert_eq!(&got, want, "{what}: wrong data for q={q:x?} from={from}"),
            Err(_) => assert!(!verified, "{what}: verify passed but a query failed"),
        }
    }
}

#[test]
fn truncation_at_every_offset_is_refused() {
    let bytes = sample_file();
    let clean = PostingsFile::from_bytes(bytes.clone()).unwrap();
    for cut in 0..bytes.len() {
        let e = PostingsFile::from_bytes(bytes[..cut].to_vec()).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::UnsupportedFormat),
            "cut {cut}: {e}"
        );
    }
    check_damaged(bytes, &clean_answers(&clean), "clean");
}

#[test]
fn every_bit_flip_is_an_error_or_harmless() {
    let bytes = sample_file();
    let answers = clean_answers(&PostingsFile::from_bytes(bytes.clone()).unwrap());
    // Every bit of the header, then a stride over the rest (all bits is slow in debug builds).
    let bits = bytes.len() * 8;
    let mut flips: Vec<usize> = (0..64 * 8).collect();
    flips.extend((64 * 8..bits).step_by(61));
    let mut caught = 0;
    for bit in flips {
        let mut b = bytes.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        if PostingsFile::from_bytes(b.clone())
            .and_then(|f| f.verify())
            .is_err()
        {
            caught += 1;
        }
        check_damaged(b, &answers, &format!("bit {bit}"));
    }
    assert!(caught > 0);
}

#[test]
fn every_single_bit_flip_fails_verify() {
    // Everything in the file is covered by some checksum, so verify catches every flip.
    let mut b = PostingsBuilder::new();
    for d in 0..300u32 {
        b.add(d, format!("abc {}", d % 3).as_bytes());
    }
    let bytes = b.to_bytes().unwrap();
    for bit in 0..bytes.len() * 8 {
        let mut v = bytes.clone();
        v[bit / 8] ^= 1 << (bit % 8);
        let r = PostingsFile::from_bytes(v).and_then(|f| f.verify());
        assert!(
            r.is_err(),
            "bit {bit} of {} flipped but verify passed",
            bytes.len()
        );
    }
}

#[test]
fn foreign_newer_and_other_unicode_files_are_refused_by_name() {
    let bytes = sample_file();
    let reseal = |b: &mut Vec<u8>| {
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
    };
    let mut foreign = bytes.clone();
    foreign[0..8].copy_from_slice(b"PK\x03\x04abcd");
    assert!(matches!(
        PostingsFile::from_bytes(foreign).unwrap_err(),
        IndexError::ForeignFile { .. }
    ));
    // Newer and older versions are refused alike (version 1 packed every block; its
    // files are rebuilt, never read with this codec).
    for v in [POSTINGS_FORMAT_VERSION + 1, 1] {
        let mut other = bytes.clone();
        other[8..12].copy_from_slice(&v.to_le_bytes());
        reseal(&mut other);
        let e = PostingsFile::from_bytes(other).unwrap_err();
        assert!(
            matches!(e, IndexError::UnsupportedVersion { found, .. } if found == v),
            "{e}"
        );
        assert!(e.to_string().contains(&format!("version {v}")), "{e}");
    }
    let mut uni = bytes.clone();
    uni[16..32].copy_from_slice(b"99.0.0\0\0\0\0\0\0\0\0\0\0");
    reseal(&mut uni);
    let e = PostingsFile::from_bytes(uni).unwrap_err();
    assert!(matches!(e, IndexError::UnicodeMismatch { .. }), "{e}");
    assert!(e.to_string().contains("99.0.0"));
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
}

#[test]
fn builder_counts() {
    let mut b = PostingsBuilder::new();
    b.add(3, b"abcd");
    b.add(3, b"abc");
    b.add(4, b"abc");
    assert_eq!(b.doc_count(), 2);
    assert_eq!(b.trigram_count(), 2);
    assert_eq!(b.pair_count(), 3);
    assert!(b.memory_bytes() > 0);
}

#[test]
#[should_panic(expected = "increasing order")]
fn builder_refuses_decreasing_docs() {
    let mut b = PostingsBuilder::new();
    b.add(5, b"abc");
    b.add(4, b"abc");
}

#[test]
fn batches_file_the_same_lists_as_single_adds() {
    let mut rng = Rng::from_env("batches");
    // Enough pairs that a batch files its buffer part way, several times.
    let mut texts = Vec::new();
    let mut doc = 0u32;
    while texts.len() < 3000 {
        let len = rng.below(600);
        let text: Vec<u8> = (0..len)
            .map(|_| b"abcdefghijklmnopqrstuvwxyz \xff"[rng.below(28)])
            .collect();
        texts.push((doc, text));
        doc += [0, 1, 1, 2, 40][rng.below(5)] as u32;
    }
    let mut one_by_one = PostingsBuilder::new();
    for (d, t) in &texts {
        one_by_one.add(*d, t);
    }
    let mut batched = PostingsBuilder::new();
    {
        let mut batch = batched.batch();
        for (d, t) in &texts[..2000] {
            batch.add(*d, t);
        }
    }
    assert!(
        batched.pair_count() > 2 * BATCH_PAIRS_MAX as u64,
        "the test must cross the buffer limit: {} pairs",
        batched.pair_count()
    );
    let mut batch = batched.batch();
    for (d, t) in &texts[2000..] {
        batch.add(*d, t);
    }
    drop(batch);
    assert_eq!(batched.pair_count(), one_by_one.pair_count());
    assert_eq!(batched.doc_count(), one_by_one.doc_count());
    assert_eq!(batched.trigram_count(), one_by_one.trigram_count());
    assert_eq!(batched.to_bytes().unwrap(), one_by_one.to_bytes().unwrap());
}

#[test]
fn a_builder_read_back_from_its_file_goes_on_like_the_original() {
    let alphabet = b"abcde \xc3\xa9";
    let mut rng = Rng::from_env("a_builder_read_back");
    for seed in 0..20 {
        let docs = 1 + rng.below(600);
        let (mut b, m) = random_corpus(&mut rng, docs, alphabet);
        let bytes = b.to_bytes().unwrap();
        let file = PostingsFile::from_bytes(bytes.clone()).unwrap();
        let mut back = PostingsBuilder::from_file(&file).unwrap();
        assert_eq!(back.to_bytes().unwrap(), bytes, "seed {seed}");
        assert_eq!(back.doc_count(), b.doc_count());
        assert_eq!(back.pair_count(), b.pair_count());
        assert_eq!(back.trigram_count(), b.trigram_count());
        for q in queries(&mut rng, &m, alphabet) {
            assert_eq!(
                back.candidates(&q, 0, usize::MAX),
                m.candidates(&q, 0, usize::MAX)
            );
        }
        // Both take more docs the same way.
        let next = m.docs.last().map_or(0, |(d, _)| d + 1);
        for (i, text) in [&b"abcde"[..], b"", b"dd ee \xc3\xa9\xc3\xa9"]
            .iter()
            .enumerate()
        {
            b.add(next + i as u32, text);
            back.add(next + i as u32, text);
        }
        assert_eq!(
            back.to_bytes().unwrap(),
            b.to_bytes().unwrap(),
            "seed {seed}"
        );
    }
    let empty = PostingsBuilder::new().to_bytes().unwrap();
    let back = PostingsBuilder::from_file(&PostingsFile::from_bytes(empty.clone()).unwrap());
    assert_eq!(back.unwrap().to_bytes().unwrap(), empty);
}

#[test]
fn a_damaged_file_is_never_read_back_into_a_builder() {
    let bytes = sample_file();
    for bit in 0..bytes.len() * 8 {
        let mut v = bytes.clone();
        v[bit / 8] ^= 1 << (bit % 8);
        let r = PostingsFile::from_bytes(v).and_then(|f| PostingsBuilder::from_file(&f));
        assert!(r.is_err(), "bit {bit} flipped but the file was read back");
    }
}

#[test]
fn appending_a_later_builder_is_adding_its_docs() {
    let mut rng = Rng::from_env("appending_a_later_builder");
    for _ in 0..20 {
        let docs = 1 + rng.below(300);
        let (_, m) = random_corpus(&mut rng, docs, b"abcd \xc3\xa9");
        // The same docs, split at a random doc into two builders.
        let cut = rng.below(m.docs.len() + 1);
        let texts: Vec<(u32, Vec<u8>)> = m
            .docs
            .iter()
            .map(|(d, set)| {
                let mut t = Vec::new();
                for g in set {
                    t.extend_from_slice(&g.to_be_bytes()[1..]);
                    t.push(0);
                }
                (*d, t)
            })
            .collect();
        let mut first = PostingsBuilder::new();
        let mut later = PostingsBuilder::new();
        let mut both = PostingsBuilder::new();
        for (i, (d, t)) in texts.iter().enumerate() {
            if i < cut {
                first.add(*d, t)
            } else {
                later.add(*d, t)
            }
            both.add(*d, t);
        }
        let mut read_back = PostingsBuilder::from_file(
            &PostingsFile::from_bytes(first.to_bytes().unwrap()).unwrap(),
        )
        .unwrap();
        first.append(&later);
        read_back.append(&later);
        assert_eq!(first.to_bytes().unwrap(), both.to_bytes().unwrap());
        assert_eq!(read_back.to_bytes().unwrap(), both.to_bytes().unwrap());
        assert_eq!(first.pair_count(), both.pair_count());
    }
}

#[test]
#[should_panic(expected = "docs must come later")]
fn appending_earlier_docs_panics() {
    let mut a = PostingsBuilder::new();
    a.add(5, b"abc");
    let mut b = PostingsBuilder::new();
    b.add(5, b"abd");
    a.append(&b);
}

/// A small postings file (a small Session's) is read whole by its open, a larger one mapped;
/// both answer the same.
#[test]
fn small_files_are_read_and_large_ones_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let q = |s: &[u8]| {
        let mut v = Vec::new();
        for_each_trigram(s, |t| v.push(t));
        v
    };
    for (docs, mapped) in [(10u32, false), (20_000, true)] {
        let path = dir.path().join(format!("{docs}.post"));
        let mut b = PostingsBuilder::new();
        for d in 0..docs {
            b.add(
                d,
                format!("row {d} with word{} and more", d % 977).as_bytes(),
            );
        }
        b.write(&path).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len > super::file::SMALL_FILE_BYTES, mapped, "{len} bytes");
        let f = PostingsFile::open(&path).unwrap();
        assert_eq!(f.is_mapped(), mapped, "{len} bytes");
        f.verify().unwrap();
        assert_eq!(f.byte_len(), len);
        let want: Vec<u32> = (0..docs).filter(|d| d % 977 == 5).collect();
        assert_eq!(f.candidates(&q(b"word5 "), 0, 100_000).unwrap(), want);
    }
}
