//! Block codec shared by the postings writer and reader.
//!
//! A block holds `n` ascending doc ids (1 <= n <= BLOCK_POSTINGS). With
//! `u_i = doc_i - doc_0` for i in 1..n (so 1 <= u_1 < u_2 < ...):
//!
//! ```text
//! crc32 u32 LE   CRC-32 of (key u32 LE, block index u32 LE, the bytes below); only in
//!                blocks of long lists, the body alone when inline in the directory
//! mode u8        0..=31: Elias-Fano with `mode` low bits; 0x20 + w (w 0..=32): packed
//!                with width w; 0x80: bitmap
//! first varint   doc_0 (LEB128, at most 5 bytes)
//! Elias-Fano     low: n - 1 values `u_i mod 2^l`, l bits each, LSB first, padded to a byte;
//!                high: for each i, bit `(u_i >> l) + (i - 1)` set, LSB first, ending with
//!                the byte that holds the last set bit
//! packed         n - 1 values `gap - 1` (gap = doc_i - doc_(i-1)), w bits each, LSB
//!                first, padded to a byte; w is the bits of the largest value
//! bitmap         bit `u - 1` set for every u_i, LSB first, ending with the byte that
//!                holds the last set bit
//! ```
//!
//! The writer picks whichever is shortest for the block, preferring packed, then
//! bitmap on a tie. Packing wins when gaps are even (and costs nothing for runs of
//! consecutive rows), bitmaps where a trigram is in most rows of a stretch, and
//! Elias-Fano (about `2 + log2(mean gap)` bits per doc) when gaps are uneven, which
//! is what most lists of real text look like. Binding the
//! key and block index into the checksum means a block read through a wrong
//! offset fails its check instead of returning another list.

/// Doc ids per full block; the last block of a list may hold fewer.
pub const BLOCK_POSTINGS: u32 = 128;
/// Largest varint for a u32, in bytes.
const VARINT_BYTES_MAX: usize = 5;
/// Mode byte of a packed block of width 0 (`PACKED_MODE + width`, width 0..=32);
/// Elias-Fano blocks use 0..=31, the low-bit count.
const PACKED_MODE: u8 = 0x20;
/// Mode byte of a bitmap block.
const BITMAP_MODE: u8 = 0x80;
/// Bytes of a block's checksum, before its body.
const CRC_BYTES: usize = 4;

/// Why a block could not be decoded (the caller adds path and offset).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BlockFault {
    Truncated,
    BadMode(u8),
    BadVarint,
    Checksum { expected: u32, got: u32 },
    Overflow,
    NotAscending,
}

impl BlockFault {
    pub(crate) fn describe(&self) -> String {
        match self {
            BlockFault::Truncated => "block runs past the end of the data".into(),
            BlockFault::BadMode(m) => format!("block mode {m:#04x} is not a known encoding"),
            BlockFault::BadVarint => "block first doc id is not a valid u32 varint".into(),
            BlockFault::Checksum { expected, got } => {
                format!("block checksum mismatch (stored {expected:#010x}, computed {got:#010x})")
            }
            BlockFault::Overflow => "block doc ids overflow u32".into(),
            BlockFault::NotAscending => "block doc ids are not strictly ascending".into(),
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

pub(crate) fn put_varint(out: &mut Vec<u8>, v: u32) {
    for_each_varint_byte(v, |b| out.push(b));
}

/// Calls `f` with each byte of `v` as a varint, in order (one encoder for every buffer a
/// varint is written to; inlined, so each writer is the loop it would be by hand).
#[inline(always)]
pub(crate) fn for_each_varint_byte(mut v: u32, mut f: impl FnMut(u8)) {
    while v >= 0x80 {
        f((v as u8) | 0x80);
        v >>= 7;
    }
    f(v as u8);
}

/// Decodes a u32 varint at the start of `b`: (value, bytes used).
#[inline]
pub(crate) fn get_varint(b: &[u8]) -> Option<(u32, usize)> {
    // Most varints of a directory record (key distances, counts, lengths) are one byte.
    if let Some(&byte) = b.first() {
        if byte < 0x80 {
            return Some((u32::from(byte), 1));
        }
    }
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

/// Appends `values`, `bits` bits each, LSB first, padded to a byte.
fn put_packed(out: &mut Vec<u8>, bits: u32, values: impl Iterator<Item = u64>) {
    let (mut acc, mut have) = (0u64, 0u32);
    if bits > 0 {
        for v in values {
            acc |= v << have;
            have += bits;
            while have >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                have -= 8;
            }
        }
    }
    if have > 0 {
        out.push(acc as u8);
    }
}

/// Reads values of a fixed bit width from a stream `put_packed` wrote; the caller
/// checked that the stream holds every value it asks for.
struct Packed<'a> {
    bytes: &'a [u8],
    next: usize,
    acc: u64,
    have: u32,
    bits: u32,
}

impl<'a> Packed<'a> {
    fn new(bytes: &'a [u8], bits: u32) -> Self {
        Packed {
            bytes,
            next: 0,
            acc: 0,
            have: 0,
            bits,
        }
    }

    fn get(&mut self) -> u64 {
        while self.have < self.bits {
            self.acc |= u64::from(self.bytes[self.next]) << self.have;
            self.next += 1;
            self.have += 8;
        }
        let v = self.acc & ((1u64 << self.bits) - 1);
        self.acc >>= self.bits;
        self.have -= self.bits;
        v
    }
}

/// Appends a bit stream with the given positions set (ascending, the last one `last`),
/// ending with the byte that holds `last`.
fn put_set_bits(out: &mut Vec<u8>, last: u64, positions: impl Iterator<Item = u64>) {
    let start = out.len();
    out.resize(start + (last / 8) as usize + 1, 0);
    let bits = &mut out[start..];
    for p in positions {
        bits[(p / 8) as usize] |= 1 << (p % 8);
    }
}

/// Appends one block holding `docs` (ascending, strictly; 1..=BLOCK_POSTINGS): its
/// checksum, then its body ([`encode_block_body`]).
pub(crate) fn encode_block(out: &mut Vec<u8>, key: u32, index: u32, docs: &[u32]) {
    let crc_at = out.len();
    out.extend_from_slice(&[0; 4]);
    let body = out.len();
    encode_block_body(out, docs);
    let crc = block_crc(key, index, &out[body..]);
    out[crc_at..body].copy_from_slice(&crc.to_le_bytes());
}

/// Appends the body of a block holding `docs` (ascending, strictly; 1..=BLOCK_POSTINGS):
/// mode, first doc and the rest, with no checksum of its own (the caller's covers it).
pub(crate) fn encode_block_body(out: &mut Vec<u8>, docs: &[u32]) {
    debug_assert!(
        !docs.is_empty() && docs.len() <= BLOCK_POSTINGS as usize,
        "block size out of range"
    );
    debug_assert!(
        docs.windows(2).all(|w| w[0] < w[1]),
        "block docs must ascend strictly"
    );
    let first = docs[0];
    let m = (docs.len() - 1) as u64;
    let max = u64::from(docs[docs.len() - 1] - first);
    let width = docs
        .windows(2)
        .map(|w| bits_needed(w[1] - w[0] - 1))
        .max()
        .unwrap_or(0);
    let packed_bytes = (m * u64::from(width)).div_ceil(8);
    let bitmap_bytes = max.div_ceil(8);
    // The low-bit count that makes the Elias-Fano body shortest (in bytes, as written):
    // within one of floor(log2(max / m)), the optimum of the unpadded size.
    let ef_bytes = |l: u32| (m * u64::from(l)).div_ceil(8) + ((max >> l) + m).div_ceil(8);
    let l0 = match max.checked_div(m) {
        Some(q) if q > 0 => 63 - q.leading_zeros(),
        _ => 0,
    };
    let l = (l0.saturating_sub(1)..=(l0 + 1).min(31))
        .min_by_key(|&l| ef_bytes(l))
        .expect("a candidate");
    if packed_bytes <= bitmap_bytes.min(ef_bytes(l)) {
        out.push(PACKED_MODE + width);
        put_varint(out, first);
        put_packed(
            out,
            width.into(),
            docs.windows(2).map(|w| u64::from(w[1] - w[0] - 1)),
        );
    } else if bitmap_bytes <= ef_bytes(l) {
        out.push(BITMAP_MODE);
        put_varint(out, first);
        put_set_bits(
            out,
            max - 1,
            docs[1..].iter().map(|&d| u64::from(d - first) - 1),
        );
    } else {
        out.push(l as u8);
        put_varint(out, first);
        let low_mask = (1u64 << l) - 1;
        put_packed(
            out,
            l,
            docs[1..].iter().map(|&d| u64::from(d - first) & low_mask),
        );
        put_set_bits(
            out,
            (max >> l) + m - 1,
            docs[1..]
                .iter()
                .enumerate()
                .map(|(i, &d)| (u64::from(d - first) >> l) + i as u64),
        );
    }
}

/// Calls `f(position)` for the first `count` set bits of `b` (LSB first); returns
/// the bytes up to and including the one holding the last of them.
fn set_bits(b: &[u8], count: usize, mut f: impl FnMut(u64)) -> Result<usize, BlockFault> {
    if count == 0 {
        return Ok(0);
    }
    let mut seen = 0;
    // Eight bytes at a time, the last few padded with zeros: a word read may hold bytes past
    // the block (the next block's), whose bits are never reached, since the count-th set bit
    // ends the block.
    let words = b.chunks_exact(8);
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    let words = words
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .chain(std::iter::once(u64::from_le_bytes(tail)));
    for (at, mut w) in (0u64..).step_by(64).zip(words) {
        let ones = w.count_ones() as usize;
        if seen + ones < count {
            seen += ones;
            while w != 0 {
                f(at + u64::from(w.trailing_zeros()));
                w &= w - 1;
            }
            continue;
        }
        loop {
            let p = at + u64::from(w.trailing_zeros());
            f(p);
            seen += 1;
            if seen == count {
                return Ok((p / 8 + 1) as usize);
            }
            w &= w - 1;
        }
    }
    Err(BlockFault::Truncated)
}

/// Decodes the block of `n` docs at the start of `b` into `out` (cleared first), checking
/// its checksum; returns the block's length in bytes.
pub(crate) fn decode_block(
    b: &[u8],
    key: u32,
    index: u32,
    n: u32,
    out: &mut Vec<u32>,
) -> Result<usize, BlockFault> {
    if b.len() < CRC_BYTES {
        out.clear();
        return Err(BlockFault::Truncated);
    }
    let expected = u32::from_le_bytes(b[0..CRC_BYTES].try_into().expect("4 bytes"));
    let (len, fault) = decode_body(&b[CRC_BYTES..], n, out)?;
    // A fault in the values is reported after the checksum: damage reads as damage.
    let got = block_crc(key, index, &b[CRC_BYTES..CRC_BYTES + len]);
    if got != expected {
        out.clear();
        return Err(BlockFault::Checksum { expected, got });
    }
    if let Some(f) = fault {
        out.clear();
        return Err(f);
    }
    Ok(CRC_BYTES + len)
}

/// Decodes the block body of `n` docs at the start of `b` (written by
/// [`encode_block_body`], already checked by the caller's checksum) into `out` (cleared
/// first); returns the body's length in bytes.
pub(crate) fn decode_block_body(b: &[u8], n: u32, out: &mut Vec<u32>) -> Result<usize, BlockFault> {
    match decode_body(b, n, out)? {
        (len, None) => Ok(len),
        (_, Some(f)) => {
            out.clear();
            Err(f)
        }
    }
}

/// The body at the start of `b`: its length, and the first fault found in its values
/// (left for the caller to report after its checksum). A body cut short is an error at once.
fn decode_body(
    b: &[u8],
    n: u32,
    out: &mut Vec<u32>,
) -> Result<(usize, Option<BlockFault>), BlockFault> {
    debug_assert!((1..=BLOCK_POSTINGS).contains(&n), "block size out of range");
    out.clear();
    let Some(&mode) = b.first() else {
        return Err(BlockFault::Truncated);
    };
    if mode > PACKED_MODE + 32 && mode != BITMAP_MODE {
        return Err(BlockFault::BadMode(mode));
    }
    let head = &b[1..];
    let (first, used) = get_varint(head).ok_or(if head.len() < VARINT_BYTES_MAX {
        BlockFault::Truncated
    } else {
        BlockFault::BadVarint
    })?;
    let m = (n - 1) as usize;
    let body = 1 + used;
    out.reserve(n as usize);
    out.push(first);
    // Values are computed as u64 from `first`, so that damaged input cannot wrap, and
    // checked once at the end: gaps and bit positions ascend by construction (only the
    // Elias-Fano form can fall out of order), so a block is in order and in range when it
    // ascends (that form only) and its last value fits in u32. Damage is found as before,
    // as whichever fault this finds first, and reported after the caller's checksum.
    let base = u64::from(first);
    let (end, last, ascending) = if (PACKED_MODE..=PACKED_MODE + 32).contains(&mode) {
        let width = u32::from(mode - PACKED_MODE);
        let len = (m as u64 * u64::from(width)).div_ceil(8) as usize;
        let Some(bits) = b.get(body..body + len) else {
            return Err(BlockFault::Truncated);
        };
        let mut gaps = Packed::new(bits, width);
        let mut d = base;
        out.extend((0..m).map(|_| {
            d += gaps.get() + 1;
            d as u32
        }));
        (body + len, d, true)
    } else if mode == BITMAP_MODE {
        let mut d = base;
        let len = set_bits(&b[body..], m, |p| {
            d = base + p + 1;
            out.push(d as u32);
        })?;
        (body + len, d, true)
    } else {
        let l = u32::from(mode);
        let low_len = (m as u64 * u64::from(l)).div_ceil(8) as usize;
        let Some(low) = b.get(body..body + low_len) else {
            return Err(BlockFault::Truncated);
        };
        let high_at = body + low_len;
        let mut lows = Packed::new(low, l);
        let (mut i, mut d, mut ascending) = (0u64, base, true);
        let len = set_bits(&b[high_at..], m, |p| {
            // p = high + i, and p >= i because positions ascend by at least one. A high past
            // u32 is held at 2^32 (the shift stays in u64), which the range check refuses.
            let high = (p - i).min(1 << 32);
            i += 1;
            let next = base + ((high << l) | lows.get());
            ascending &= next > d;
            d = next;
            out.push(d as u32);
        })?;
        (high_at + len, d, ascending)
    };
    let fault = if !ascending {
        Some(BlockFault::NotAscending)
    } else if last > u64::from(u32::MAX) {
        Some(BlockFault::Overflow)
    } else {
        None
    };
    Ok((end, fault))
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

    /// Bodies whose checksum would pass but whose values are wrong: each form's fault is
    /// found, none panics, and nothing decoded is kept.
    #[test]
    fn bodies_out_of_order_or_range_are_faults() {
        let body = |mode: u8, first: u32, rest: &[u8]| {
            let mut b = vec![mode];
            put_varint(&mut b, first);
            b.extend_from_slice(rest);
            b
        };
        let mut out = Vec::new();
        let mut decode = |b: &[u8], n: u32| {
            let r = decode_block_body(b, n, &mut out);
            (r, out.len())
        };
        // Bit-packed gaps of 0 and 0 (each +1) after u32::MAX - 1: the second passes u32.
        let packed = body(PACKED_MODE + 8, u32::MAX - 1, &[0, 0]);
        assert_eq!(decode(&packed, 3), (Err(BlockFault::Overflow), 0));
        assert_eq!(decode(&packed, 2), (Ok(packed.len() - 1), 2), "in range");
        // Bitmap of positions 0 and 1 after u32::MAX - 1.
        let bitmap = body(BITMAP_MODE, u32::MAX - 1, &[0b11]);
        assert_eq!(decode(&bitmap, 3), (Err(BlockFault::Overflow), 0));
        // Elias-Fano, 4 low bits: lows 5 then 3 under the same high: 5, then 3.
        let ef = body(4, 0, &[0x35, 0b11]);
        assert_eq!(decode(&ef, 3), (Err(BlockFault::NotAscending), 0));
        let ef = body(4, 0, &[0x53, 0b11]);
        assert_eq!(decode(&ef, 3), (Ok(ef.len()), 3), "3, then 5");
        // Elias-Fano, 31 low bits, its high bit far out: held in range, refused.
        let mut far = vec![0u8; 8];
        far.extend(std::iter::repeat_n(0u8, 1 << 12));
        far.push(1);
        let ef = body(31, 0, &far[..]);
        assert_eq!(decode(&ef, 2).0, Err(BlockFault::Overflow));
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
    fn dense_blocks_are_bitmaps_sparse_ones_elias_fano() {
        let mode = |docs: &[u32]| {
            let mut b = Vec::new();
            encode_block(&mut b, 9, 0, docs);
            (b[4], b.len())
        };
        let run: Vec<u32> = (100..228).collect();
        assert_eq!(
            mode(&run),
            (PACKED_MODE, 4 + 1 + 1),
            "consecutive rows cost nothing"
        );
        // Dense, gaps 1 and 2 and one of 5: packing pays 3 bits per gap, a bitmap about 1.5.
        let dense: Vec<u32> = (0..128u32)
            .scan(0, |d, i| {
                *d += if i == 64 { 5 } else { 1 + i % 2 };
                Some(*d)
            })
            .collect();
        assert_eq!(mode(&dense).0, BITMAP_MODE);
        let even: Vec<u32> = (0..128).map(|i| 1000 * i).collect();
        assert_eq!(
            mode(&even),
            (PACKED_MODE + 10, 4 + 1 + 1 + 127 * 10 / 8 + 1)
        );
        // Uneven gaps: mostly 1..=8, one of 4000. Packing pays 12 bits for every gap.
        let uneven: Vec<u32> = (0..128u32)
            .scan(0, |d, i| {
                *d += if i == 64 { 4000 } else { 1 + i % 8 };
                Some(*d)
            })
            .collect();
        let (m, len) = mode(&uneven);
        assert!(m < 32, "uneven gaps use Elias-Fano, mode {m:#x}");
        // About 7 bits per doc (the one long gap widens the range), against 12.
        assert!(len < 4 + 1 + 2 + 127 * 7 / 8 + 8, "{len} bytes");
    }

    #[test]
    fn damaged_blocks_are_errors_never_other_docs() {
        let mut rng = Rng::from_env("damaged_blocks");
        for _ in 0..300 {
            let n = 1 + rng.below(BLOCK_POSTINGS as usize);
            let spread = [1u64, 3, 40, 5000][rng.below(4)];
            let mut docs = Vec::with_capacity(n);
            let mut d = rng.below(100) as u64;
            for _ in 0..n {
                docs.push(d as u32);
                d += 1 + rng.next_u64() % spread;
            }
            let mut b = Vec::new();
            encode_block(&mut b, 5, 1, &docs);
            let mut out = Vec::new();
            let n = docs.len() as u32;
            for cut in 0..b.len() {
                assert!(
                    decode_block(&b[..cut], 5, 1, n, &mut out).is_err(),
                    "cut {cut}"
                );
            }
            for bit in 0..b.len() * 8 {
                let mut bad = b.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                match decode_block(&bad, 5, 1, n, &mut out) {
                    Err(_) => {}
                    // A flip in padding past the last set bit changes where the block ends
                    // only if it adds a set bit there, which the checksum then rejects.
                    Ok(_) => panic!("flipped bit {bit} of {} decoded as {out:?}", b.len()),
                }
            }
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
