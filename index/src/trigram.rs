//! Byte trigrams of folded text.

/// Calls `f` with every byte trigram of `folded` (already folded UTF-8), packed
/// big-end-first into the low 24 bits: `b0 << 16 | b1 << 8 | b2`. Duplicates are
/// passed as often as they occur; text shorter than 3 bytes has none.
#[inline]
pub fn for_each_trigram(folded: &[u8], mut f: impl FnMut(u32)) {
    if folded.len() < 3 {
        return;
    }
    let mut t = (u32::from(folded[0]) << 8) | u32::from(folded[1]);
    for &b in &folded[2..] {
        t = ((t << 8) | u32::from(b)) & 0x00FF_FFFF;
        f(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigrams_are_packed_windows() {
        let mut got = Vec::new();
        for_each_trigram(b"abcd", |t| got.push(t));
        assert_eq!(got, vec![0x0061_6263, 0x0062_6364]);
        got.clear();
        for_each_trigram(b"ab", |t| got.push(t));
        for_each_trigram(b"", |t| got.push(t));
        assert!(got.is_empty());
        for_each_trigram("ßx".as_bytes(), |t| got.push(t));
        assert_eq!(got, vec![0x00C3_9F78]);
    }
}
