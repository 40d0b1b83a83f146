//! Block codec shared by the postings writer and reader.
//!
//! A block holds `n` ascending doc ids (1 <= n <= BLOCK_POSTINGS):
//!
//! ```text
//! crc32 u32 LE   CRC-32 of (key u32 LE, block index u32 LE, the bytes below)
//! width u8       bits per packed value, 0..=32
//! first varint   the first doc id (LEB128, at most 5 bytes)
//! packed         n - 1 values (gap - 1), `width` bits each, LSB first, padded to a byte
//! ```
//!
//! Binding the key and block index into the checksum means a block read
//! through a wrong offset fails its check instead of returning another list.

/// Doc ids per full block; the last block of a list may hold fewer.
pub const BLOCK_POSTINGS: u32 = 128;
/// Largest varint for a u32, in bytes.
const VARINT_BYTES_MAX: usize = 5;

/// Why a block could not be decoded (the caller adds path and offset).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BlockFault {
    Truncated,
    BadWidth(u8),
    BadVarint,
    Checksum { expected: u32, got: u32 },
    Overflow,
}

impl BlockFault {
    pub(crate) fn describe(&self) -> String {
        match self {
            BlockFault::Truncated => "block runs past the end of the data".into(),
            BlockFault::BadWidth(w) => format!("block bit width {w} exceeds 32"),
            BlockFault::BadVarint => "block first doc id is not a valid u32 varint".into(),
            BlockFault::Checksum { expected, got } => {
                format!("block checksum mismatch (stored {expected:#010x}, computed {got:#010x})")
            }
            BlockFault::Overflow => "block doc ids overflow u32".into(),
        }
    }
}

pub(crate) fn block_crc(key: u32, index: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&key.to_le_bytes());
    h.update(&index.to_le_bytes());
    h.update(bytes);
    h.finalize()
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes a u32 varint at the start of `b`: (value, bytes used).
pub(crate) fn get_varint(b: &[u8]) -> Option<(u32, usize)> {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().take(VARINT_BYTES_MAX).enumerate() {
        v |= u64::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return u32::try_from(v).ok().map(|v| (v, i + 1));
        }
    }
    None
}

fn bits_needed(v: u32) -> u8 {
    (32 - v.leading_zeros()) as u8
}

/// Appends one block holding `docs` (ascending, strictly; 1..=BLOCK_POSTINGS).
pub(crate) fn encode_block(out: &mut Vec<u8>, key: u32, index: u32, docs: &[u32]) {
    debug_assert!(
        !docs.is_empty() && docs.len() <= BLOCK_POSTINGS as usize,
        "block size out of range"
    );
    debug_assert!(
        docs.windows(2).all(|w| w[0] < w[1]),
        "block docs must ascend strictly"
    );
    let crc_at = out.len();
    out.extend_from_slice(&[0; 4]);
    let body = out.len();
    let width = docs
        .windows(2)
        .map(|w| bits_needed(w[1] - w[0] - 1))
        .max()
        .unwrap_or(0);
    out.push(width);
    put_varint(out, docs[0]);
    let mut acc: u64 = 0;
    let mut have: u32 = 0;
    for w in docs.windows(2) {
        acc |= u64::from(w[1] - w[0] - 1) << have;
        have += u32::from(width);
        while have >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            have -= 8;
        }
    }
    if have > 0 {
        out.push(acc as u8);
    }
    let crc = block_crc(key, index, &out[body..]);
    out[crc_at..body].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the block of `n` docs at the start of `b` into `out` (cleared first);
/// returns the block's length in bytes.
pub(crate) fn decode_block(
    b: &[u8],
    key: u32,
    index: u32,
    n: u32,
    out: &mut Vec<u32>,
) -> Result<usize, BlockFault> {
    debug_assert!((1..=BLOCK_POSTINGS).contains(&n), "block size out of range");
    out.clear();
    if b.len() < 5 {
        return Err(BlockFault::Truncated);
    }
    let expected = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
    let width = b[4];
    if width > 32 {
        return Err(BlockFault::BadWidth(width));
    }
    let (first, used) = get_varint(&b[5..]).ok_or(if b.len() < 5 + VARINT_BYTES_MAX {
        BlockFault::Truncated
    } else {
        BlockFault::BadVarint
    })?;
    let packed_bits = u64::from(n - 1) * u64::from(width);
    let packed = packed_bits.div_ceil(8) as usize;
    let end = 5 + used + packed;
    if b.len() < end {
        return Err(BlockFault::Truncated);
    }
    let got = block_crc(key, index, &b[4..end]);
    if got != expected {
        return Err(BlockFault::Checksum { expected, got });
    }
    out.reserve(n as usize);
    out.push(first);
    let bits = &b[5 + used..end];
    let mask: u64 = if width == 32 {
        u64::from(u32::MAX)
    } else {
        (1u64 << width) - 1
    };
    let mut doc = first;
    let mut acc: u64 = 0;
    let mut have: u32 = 0;
    let mut next = 0;
    for _ in 1..n {
        while have < u32::from(width) {
            acc |= u64::from(bits[next]) << have;
            next += 1;
            have += 8;
        }
        let gap = (acc & mask) as u32;
        acc >>= width;
        have -= u32::from(width);
        doc = doc
            .checked_add(gap)
            .and_then(|d| d.checked_add(1))
            .ok_or(BlockFault::Overflow)?;
        out.push(doc);
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testrng::Rng;

    #[test]
    fn varint_round_trip_and_limits() {
        for v in [0, 1, 127, 128, 300, 1 << 21, u32::MAX - 1, u32::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(get_varint(&b), Some((v, b.len())));
        }
        assert_eq!(get_varint(&[0x80; 5]), None);
        assert_eq!(
            get_varint(&[0xFF, 0xFF, 0xFF, 0xFF, 0x7F]),
            None,
            "beyond u32"
        );
        assert_eq!(get_varint(&[0x80]), None);
    }

    #[test]
    fn blocks_round_trip() {
        let mut rng = Rng::from_env("blocks_round_trip");
        for _ in 0..2000 {
            let n = 1 + rng.below(BLOCK_POSTINGS as usize);
            let spread = [1u64, 2, 10, 1000, 1 << 20, 1 << 31][rng.below(6)];
            let mut docs = Vec::with_capacity(n);
            let mut d = rng.below(1000) as u64;
            for _ in 0..n {
                docs.push(d as u32);
                d += 1 + rng.next_u64() % spread;
                if d > u64::from(u32::MAX) {
                    break;
                }
            }
            let mut b = vec![7u8];
            encode_block(&mut b, 42, 3, &docs);
            let mut out = Vec::new();
            let used = decode_block(&b[1..], 42, 3, docs.len() as u32, &mut out).unwrap();
            assert_eq!(used, b.len() - 1);
            assert_eq!(out, docs);
            assert!(
                decode_block(&b[1..], 43, 3, docs.len() as u32, &mut out).is_err(),
                "key is bound"
            );
            assert!(
                decode_block(&b[1..], 42, 4, docs.len() as u32, &mut out).is_err(),
                "index is bound"
            );
        }
    }

    #[test]
    fn extreme_gaps() {
        let docs = [0, u32::MAX];
        let mut b = Vec::new();
        encode_block(&mut b, 1, 0, &docs);
        let mut out = Vec::new();
        decode_block(&b, 1, 0, 2, &mut out).unwrap();
        assert_eq!(out, docs);
    }
}
