//! Walking the frames of one segment's logical stream, and the torn-tail rule of
//! docs/format.md ("The durable mark, and what a torn tail is").

use crate::format::{
    decode_frame_header, decode_frame_header_check, plausible_frame_header, HeaderFault,
    FRAME_HEADER_BYTES, HEADER_BYTES,
};

/// What a walk over a logical stream found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Records in complete batches.
    pub records: u64,
    /// Complete batches.
    pub batches: u64,
    /// End of the last complete batch (`HEADER_BYTES` when there is none).
    pub good_end: u64,
    /// Offset of the first record of a complete batch.
    pub first_record: Option<u64>,
    /// Offset of the last record of a complete batch.
    pub last_record: Option<u64>,
    /// Where the walk stopped before the end of the stream, and why.
    pub damage: Option<(u64, &'static str)>,
}

/// Walks `data` (the whole logical stream, header included) from the first frame.
pub fn walk(segment: u64, data: &[u8]) -> Walk {
    match data.get(HEADER_BYTES as usize..) {
        Some(frames) => walk_at(segment, frames, HEADER_BYTES),
        None => Walk {
            records: 0,
            batches: 0,
            good_end: data.len() as u64,
            first_record: None,
            last_record: None,
            damage: None,
        },
    }
}

/// Walks the frames of `data`, which holds the logical bytes `[base, base + data.len())` of a
/// segment; a frame must start at `base`. Offsets in the result are logical.
pub fn walk_at(segment: u64, data: &[u8], base: u64) -> Walk {
    let len = base + data.len() as u64;
    let mut w = Walk {
        records: 0,
        batches: 0,
        good_end: base,
        first_record: None,
        last_record: None,
        damage: None,
    };
    let mut pos = base;
    let mut pending = 0u64;
    while pos < len {
        match frame_at_base(segment, data, base, pos) {
            Ok((frame_len, end_of_batch)) => {
                pending += 1;
                let this = pos;
                pos += frame_len;
                if end_of_batch {
                    if w.first_record.is_none() {
                        w.first_record = Some(w.good_end);
                    }
                    w.records += pending;
                    w.batches += 1;
                    w.last_record = Some(this);
                    w.good_end = pos;
                    pending = 0;
                }
            }
            Err(reason) => {
                w.damage = Some((pos, reason));
                return w;
            }
        }
    }
    if pending > 0 {
        w.damage = Some((pos, "batch ends without its last record"));
    }
    w
}

/// Checks the frame at logical offset `pos`, where `data` holds the logical bytes from `base`
/// on: its length and whether it ends a batch, or why it is invalid.
pub fn frame_at_base(
    segment: u64,
    data: &[u8],
    base: u64,
    pos: u64,
) -> Result<(u64, bool), &'static str> {
    let len = data.len() as u64;
    let Some(rel) = pos.checked_sub(base).filter(|r| *r <= len) else {
        return Err("frame outside the bytes read");
    };
    let Some(hdr_end) = rel.checked_add(FRAME_HEADER_BYTES).filter(|e| *e <= len) else {
        return Err("frame header cut short by the end of the file");
    };
    let h: &[u8; FRAME_HEADER_BYTES as usize] = data[rel as usize..hdr_end as usize]
        .try_into()
        .expect("slice is exactly one frame header");
    let (fh, check) = decode_frame_header_check(h, segment, pos).map_err(|f| match f {
        HeaderFault::Checksum => "frame header checksum mismatch",
        HeaderFault::Field => "frame header field out of range",
    })?;
    let end = hdr_end + u64::from(fh.len);
    if end > len {
        return Err("record runs past the end of the file");
    }
    if !check.matches(&data[hdr_end as usize..end as usize]) {
        return Err("record checksum mismatch");
    }
    Ok((fh.frame_len(), fh.end_of_batch))
}

/// The verdict on what follows the last complete batch of the newest segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Nothing follows (or, in a version 2 segment, only zeros): the logical end is the walk's
    /// `good_end`.
    Clean,
    /// A torn tail: cut from this offset to the end of the file.
    Torn {
        /// Where the cut starts (the end of the last complete batch).
        cut: u64,
        /// End of the bytes worth keeping in the cut copy: the end of the file, or in a
        /// version 2 segment the end of its last non-zero byte (the zeros after it cannot be
        /// told from the preallocated region).
        copy_end: u64,
    },
    /// Damage to bytes that had been durable: refuse.
    Corrupt {
        /// The first invalid frame.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Applies the torn-tail rule to a walk of the newest segment (a version 1 segment: any byte
/// after the last complete batch is a torn tail).
pub fn judge_tail(segment: u64, data: &[u8], w: &Walk) -> Tail {
    judge_tail_at(segment, data, 0, w, false)
}

/// Applies the torn-tail rule to a walk over `data` = logical bytes `[base, ..)` of the newest
/// segment. With `zeros_end_cleanly` (version 2 segments), zero bytes after the last complete
/// batch are the preallocated region, not a torn tail.
pub fn judge_tail_at(
    segment: u64,
    data: &[u8],
    base: u64,
    w: &Walk,
    zeros_end_cleanly: bool,
) -> Tail {
    let Some((bad, reason)) = w.damage else {
        return Tail::Clean;
    };
    let cut = w.good_end;
    let file_end = base + data.len() as u64;
    let tail = &data[(cut - base) as usize..];
    let copy_end = if zeros_end_cleanly {
        let nonzero = tail.iter().rposition(|b| *b != 0);
        match nonzero {
            None => return Tail::Clean,
            Some(i) => cut + i as u64 + 1,
        }
    } else {
        file_end
    };
    // Any frame with a valid header at or after the damage is evidence of what had been
    // durable when it was written; its durable mark decides.
    if let Some((at, mark)) = highest_mark_from(segment, data, base, bad) {
        if mark > cut {
            return Tail::Corrupt {
                offset: bad,
                reason: format!(
                    "{reason}; a frame written later (at offset {at}) records that the segment \
                     was durable up to offset {mark}, so this is damage, not a torn write"
                ),
            };
        }
    }
    Tail::Torn { cut, copy_end }
}

/// The frame with the highest durable mark among frames with a valid header at any byte
/// offset `>= from` (`data` holds the logical bytes from `base` on).
fn highest_mark_from(segment: u64, data: &[u8], base: u64, from: u64) -> Option<(u64, u64)> {
    let len = base + data.len() as u64;
    let mut best: Option<(u64, u64)> = None;
    let mut p = from.max(base);
    while p + FRAME_HEADER_BYTES <= len {
        let rel = (p - base) as usize;
        let h = &data[rel..rel + FRAME_HEADER_BYTES as usize];
        // An all-zero header (the preallocated region) could match its checksum only by a
        // 2^-32 chance and would carry mark 0, which never decides anything: skip it cheaply.
        if plausible_frame_header(h) && h != [0u8; FRAME_HEADER_BYTES as usize] {
            let h: &[u8; FRAME_HEADER_BYTES as usize] =
                h.try_into().expect("slice is exactly one frame header");
            if let Ok(fh) = decode_frame_header(h, segment, p) {
                if best.is_none_or(|(_, m)| fh.durable_mark > m) {
                    best = Some((p, fh.durable_mark));
                }
            }
        }
        p += 1;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode_frame, encode_header, ACTIVE_FORMAT};

    /// A segment of one-record batches; `marks[i]` is batch i's durable mark.
    fn segment(marks: &[Option<u64>]) -> (Vec<u8>, Vec<u64>) {
        let mut data = encode_header(ACTIVE_FORMAT, 0).to_vec();
        let mut starts = Vec::new();
        for (i, m) in marks.iter().enumerate() {
            let at = data.len() as u64;
            starts.push(at);
            encode_frame(&mut data, 0, at, 1, true, m.unwrap_or(at), &[i as u8; 40]);
        }
        (data, starts)
    }

    #[test]
    fn clean_and_incomplete_batches() {
        let (data, starts) = segment(&[None, None]);
        let w = walk(0, &data);
        assert_eq!((w.records, w.batches, w.damage), (2, 2, None));
        assert_eq!(judge_tail(0, &data, &w), Tail::Clean);
        // a batch without its end flag at the end of the file is torn
        let mut d = data.clone();
        let at = d.len() as u64;
        encode_frame(&mut d, 0, at, 1, false, at, b"half a batch");
        let w = walk(0, &d);
        assert_eq!(w.good_end, at);
        let torn = Tail::Torn {
            cut: at,
            copy_end: d.len() as u64,
        };
        assert_eq!(judge_tail(0, &d, &w), torn);
        assert_eq!(w.last_record, Some(starts[1]));
    }

    #[test]
    fn damage_followed_by_durable_evidence_is_corrupt() {
        // Each batch records that everything before it was durable (one sync per append).
        let (mut data, starts) = segment(&[None, None, None, None]);
        data[starts[1] as usize + 30] ^= 4;
        let w = walk(0, &data);
        assert_eq!(w.damage.map(|d| d.0), Some(starts[1]));
        match judge_tail(0, &data, &w) {
            Tail::Corrupt { offset, .. } => assert_eq!(offset, starts[1]),
            t => panic!("{t:?}"),
        }
    }

    #[test]
    fn damage_followed_only_by_unsynced_frames_is_a_torn_tail() {
        // Group commit: batches 1-3 were written while the segment was durable only up to
        // batch 1's start, so a crash could lose batch 1's page and keep batch 2's.
        let (_, starts) = segment(&[None, None, None, None]);
        let m = starts[1];
        let (mut data, starts) = segment(&[None, Some(m), Some(m), Some(m)]);
        data[starts[1] as usize + 3] ^= 0x80;
        let w = walk(0, &data);
        assert_eq!(
            judge_tail(0, &data, &w),
            Tail::Torn {
                cut: starts[1],
                copy_end: data.len() as u64
            }
        );
    }

    #[test]
    fn zero_filled_tail_is_torn() {
        let (mut data, _) = segment(&[None, None]);
        let end = data.len() as u64;
        data.resize(data.len() + 4096, 0);
        let w = walk(0, &data);
        let torn = Tail::Torn {
            cut: end,
            copy_end: end + 4096,
        };
        assert_eq!(judge_tail(0, &data, &w), torn);
        // a version 2 segment ends cleanly in its preallocated zeros
        assert_eq!(judge_tail_at(0, &data, 0, &w, true), Tail::Clean);
        assert_eq!(w.good_end, end);
        // but any non-zero byte in them is a torn tail, copied up to that byte
        data[end as usize + 100] = 1;
        let w = walk(0, &data);
        assert_eq!(
            judge_tail_at(0, &data, 0, &w, true),
            Tail::Torn {
                cut: end,
                copy_end: end + 101
            }
        );
    }

    #[test]
    fn a_walk_from_an_inner_frame_agrees_with_the_whole_walk() {
        let (mut data, starts) = segment(&[None, None, None, None]);
        let end = data.len() as u64;
        data.resize(data.len() + 1000, 0);
        let whole = walk(0, &data);
        let from = walk_at(0, &data[starts[2] as usize..], starts[2]);
        assert_eq!(from.good_end, whole.good_end);
        assert_eq!(from.good_end, end);
        assert_eq!((from.records, from.batches), (2, 2));
        assert_eq!(from.last_record, whole.last_record);
        assert_eq!(
            judge_tail_at(0, &data[starts[2] as usize..], starts[2], &from, true),
            Tail::Clean
        );
        // a frame starts nowhere but at its own offset
        let off = walk_at(0, &data[starts[2] as usize + 1..], starts[2] + 1);
        assert_eq!(off.damage.map(|d| d.0), Some(starts[2] + 1));
        assert_eq!(off.batches, 0);
    }
}
