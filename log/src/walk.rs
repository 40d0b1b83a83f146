//! Walking the frames of one segment's logical stream, and the torn-tail rule of
//! docs/format.md ("The durable mark, and what a torn tail is").

use crate::format::{
    check_payload, decode_frame_header, plausible_frame_header, HeaderFault, FRAME_HEADER_BYTES,
    HEADER_BYTES,
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
    let len = data.len() as u64;
    let mut w = Walk {
        records: 0,
        batches: 0,
        good_end: HEADER_BYTES.min(len),
        first_record: None,
        last_record: None,
        damage: None,
    };
    let mut pos = HEADER_BYTES;
    let mut pending = 0u64;
    while pos < len {
        match frame_at(segment, data, pos) {
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

/// Checks the frame at `pos`: its length and whether it ends a batch, or why it is invalid.
pub fn frame_at(segment: u64, data: &[u8], pos: u64) -> Result<(u64, bool), &'static str> {
    let len = data.len() as u64;
    let Some(hdr_end) = pos.checked_add(FRAME_HEADER_BYTES).filter(|e| *e <= len) else {
        return Err("frame header cut short by the end of the file");
    };
    let h: &[u8; FRAME_HEADER_BYTES as usize] = data[pos as usize..hdr_end as usize]
        .try_into()
        .expect("slice is exactly one frame header");
    let fh = decode_frame_header(h, segment, pos).map_err(|f| match f {
        HeaderFault::Checksum => "frame header checksum mismatch",
        HeaderFault::Field => "frame header field out of range",
    })?;
    let end = hdr_end + u64::from(fh.len);
    if end > len {
        return Err("record runs past the end of the file");
    }
    if !check_payload(h, &fh, segment, pos, &data[hdr_end as usize..end as usize]) {
        return Err("record checksum mismatch");
    }
    Ok((fh.frame_len(), fh.end_of_batch))
}

/// The verdict on what follows the last complete batch of the newest segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Nothing follows.
    Clean,
    /// A torn tail: cut from this offset to the end of the file.
    Torn {
        /// Where the cut starts (the end of the last complete batch).
        cut: u64,
    },
    /// Damage to bytes that had been durable: refuse.
    Corrupt {
        /// The first invalid frame.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Applies the torn-tail rule to a walk of the newest segment.
pub fn judge_tail(segment: u64, data: &[u8], w: &Walk) -> Tail {
    let Some((bad, reason)) = w.damage else {
        return Tail::Clean;
    };
    let cut = w.good_end;
    // Any frame with a valid header at or after the damage is evidence of what had been
    // durable when it was written; its durable mark decides.
    if let Some((at, mark)) = highest_mark_from(segment, data, bad) {
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
    Tail::Torn { cut }
}

/// The frame with the highest durable mark among frames with a valid header at any byte
/// offset `>= from`.
fn highest_mark_from(segment: u64, data: &[u8], from: u64) -> Option<(u64, u64)> {
    let len = data.len() as u64;
    let mut best: Option<(u64, u64)> = None;
    let mut p = from;
    while p + FRAME_HEADER_BYTES <= len {
        let h = &data[p as usize..(p + FRAME_HEADER_BYTES) as usize];
        if plausible_frame_header(h) {
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
        assert_eq!(judge_tail(0, &d, &w), Tail::Torn { cut: at });
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
        assert_eq!(judge_tail(0, &data, &w), Tail::Torn { cut: starts[1] });
    }

    #[test]
    fn zero_filled_tail_is_torn() {
        let (mut data, _) = segment(&[None, None]);
        let end = data.len() as u64;
        data.resize(data.len() + 4096, 0);
        let w = walk(0, &data);
        assert_eq!(judge_tail(0, &data, &w), Tail::Torn { cut: end });
    }
}
