//! `GIT binary patch` literals: zlib-deflated content, base85-encoded in lines of at most
//! 52 input bytes, each line led by a length character (`A`..`Z` = 1..26, `a`..`z` = 27..52).

use std::io::Write;

/// Input bytes per base85 line.
const LINE_BYTES_MAX: usize = 52;

const ALPHABET: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut w = gix::zlib::stream::deflate::Write::new(Vec::new(), gix::zlib::Compression::DEFAULT);
    w.write_all(data)
        .expect("compressing into a Vec cannot fail");
    w.flush()
        .expect("finishing a zlib stream into a Vec cannot fail");
    w.into_inner()
}

fn encode_line(out: &mut Vec<u8>, chunk: &[u8]) {
    debug_assert!(
        !chunk.is_empty() && chunk.len() <= LINE_BYTES_MAX,
        "line of {} bytes",
        chunk.len()
    );
    let n = chunk.len();
    out.push(if n <= 26 {
        b'A' + (n as u8) - 1
    } else {
        b'a' + (n as u8) - 27
    });
    for group in chunk.chunks(4) {
        let mut word = [0u8; 4];
        word[..group.len()].copy_from_slice(group);
        let mut acc = u32::from_be_bytes(word);
        let mut digits = [0u8; 5];
        for d in digits.iter_mut().rev() {
            *d = ALPHABET[(acc % 85) as usize];
            acc /= 85;
        }
        out.extend_from_slice(&digits);
    }
    out.push(b'\n');
}

/// Appends `literal <size>`, the encoded deflated `data` and the blank line that ends a hunk.
pub(crate) fn literal(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("literal {}\n", data.len()).as_bytes());
    for chunk in deflate(data).chunks(LINE_BYTES_MAX) {
        encode_line(out, chunk);
    }
    out.push(b'\n');
}

/// A full binary body: forward literal (new content) then reverse literal (old content).
pub(crate) fn body(out: &mut Vec<u8>, old: &[u8], new: &[u8]) {
    out.extend_from_slice(b"GIT binary patch\n");
    literal(out, new);
    literal(out, old);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let n = match line[0] {
                c @ b'A'..=b'Z' => (c - b'A' + 1) as usize,
                c => (c - b'a' + 27) as usize,
            };
            let mut bytes = Vec::new();
            for group in line[1..].chunks(5) {
                let mut acc: u32 = 0;
                for c in group {
                    let d = ALPHABET.iter().position(|a| a == c).unwrap() as u32;
                    acc = acc * 85 + d;
                }
                bytes.extend_from_slice(&acc.to_be_bytes());
            }
            out.extend_from_slice(&bytes[..n]);
        }
        out
    }

    #[test]
    fn base85_lines_round_trip() {
        for len in [0usize, 1, 3, 4, 5, 51, 52, 53, 104, 1000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut out = Vec::new();
            literal(&mut out, &data);
            let head = format!("literal {len}\n");
            assert!(out.starts_with(head.as_bytes()));
            assert!(out.ends_with(b"\n\n"));
            let lines = &out[head.len()..out.len() - 1];
            assert_eq!(decode(lines), deflate(&data), "len {len}");
        }
    }

    #[test]
    fn line_length_characters() {
        let mut out = Vec::new();
        encode_line(&mut out, &[0u8; 26]);
        assert_eq!(out[0], b'Z');
        out.clear();
        encode_line(&mut out, &[0u8; 27]);
        assert_eq!(out[0], b'a');
        out.clear();
        encode_line(&mut out, &[0u8; 52]);
        assert_eq!(out[0], b'z');
        assert_eq!(out.len(), 1 + 13 * 5 + 1);
    }
}
