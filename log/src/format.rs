//! Byte layouts of docs/format.md: segment header, record frame, block table, footer.
//! Pure functions over byte slices, so the decoders can be fuzzed and never panic.

use crate::error::LogError;
use std::path::Path;

/// Magic bytes and version of one file type, kept together so they are checked together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileFormat {
    /// The first 8 bytes of the file.
    pub magic: [u8; 8],
    /// The format version at bytes 8..12.
    pub version: u32,
}

/// The version of the log format (docs/format.md): the version this build writes into new
/// `.active` segments. Sealed segments and cut copies keep version 1, which did not change.
pub const LOG_FORMAT_VERSION: u32 = 2;
/// The oldest `.active` version still read: version 1 segments have no preallocated zero
/// region (any byte after the last batch of the newest one is a torn tail).
pub const ACTIVE_VERSION_OLDEST: u32 = 1;
/// First `.active` version whose file may end in a preallocated zero region.
pub const ACTIVE_VERSION_PREALLOCATED: u32 = 2;
/// An unsealed segment (`.active`), as this build writes it.
pub const ACTIVE_FORMAT: FileFormat = FileFormat {
    magic: *b"LGBKSEGA",
    version: LOG_FORMAT_VERSION,
};
/// A sealed, block-compressed segment (`.sealed`).
pub const SEALED_FORMAT: FileFormat = FileFormat {
    magic: *b"LGBKSEGS",
    version: 1,
};

/// A copy of bytes cut from a torn tail (`.active.cut-*`), kept for inspection only.
pub const CUT_FORMAT: FileFormat = FileFormat {
    magic: *b"LGBKCUTS",
    version: 1,
};

/// Length of the segment header; the first record of a segment starts here.
pub const HEADER_BYTES: u64 = 32;
/// Length of a record frame's header.
pub const FRAME_HEADER_BYTES: u64 = 24;
/// Largest payload of one record.
pub const RECORD_PAYLOAD_BYTES_MAX: u64 = 64 << 20;
/// Largest encoded batch (frames included).
pub const BATCH_BYTES_MAX: u64 = 256 << 20;
/// Length of the logical stream covered by one compressed block.
pub const BLOCK_BYTES: u64 = 64 << 10;
/// zstd level used when sealing.
pub const ZSTD_LEVEL: i32 = 3;
/// Length of a block table entry.
pub const BLOCK_ENTRY_BYTES: u64 = 16;
/// Length of the sealed-file footer.
pub const FOOTER_BYTES: u64 = 64;
/// Flag bit: last record of its batch.
pub const FLAG_END_OF_BATCH: u8 = 1;

const _: () = assert!(FRAME_HEADER_BYTES + RECORD_PAYLOAD_BYTES_MAX <= BATCH_BYTES_MAX);
const _: () = assert!(BATCH_BYTES_MAX <= u32::MAX as u64);
const _: () = assert!(BLOCK_BYTES <= u32::MAX as u64);

pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The 32-byte header of an active segment numbered `segment`, as this build writes it (magic
/// `LGBKSEGA`, the current active version): the first bytes of a segment's logical stream.
/// A copy of a log rebuilt elsewhere from [`crate::Log::read_logical`] ranges starts each
/// active file with it.
pub fn active_segment_header(segment: u64) -> [u8; HEADER_BYTES as usize] {
    encode_header(ACTIVE_FORMAT, segment)
}

/// Encodes a segment header.
pub fn encode_header(format: FileFormat, segment: u64) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[0..8].copy_from_slice(&format.magic);
    h[8..12].copy_from_slice(&format.version.to_le_bytes());
    h[16..24].copy_from_slice(&segment.to_le_bytes());
    let crc = crc32fast::hash(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Encodes the 40-byte header of a cut copy (docs/format.md).
pub fn encode_cut_header(segment: u64, cut: u64) -> [u8; CUT_HEADER_BYTES as usize] {
    let mut h = [0u8; CUT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(&CUT_FORMAT.magic);
    h[8..12].copy_from_slice(&CUT_FORMAT.version.to_le_bytes());
    h[16..24].copy_from_slice(&segment.to_le_bytes());
    h[24..32].copy_from_slice(&cut.to_le_bytes());
    let crc = crc32fast::hash(&h[0..36]);
    h[36..40].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Length of the header of a cut copy.
pub const CUT_HEADER_BYTES: u64 = 40;

/// Checks a segment header: magic, then version, then checksum, then the segment number.
pub fn check_header(
    path: &Path,
    bytes: &[u8],
    format: FileFormat,
    segment: u64,
) -> Result<(), LogError> {
    check_header_versions(path, bytes, format, format.version, segment).map(|_| ())
}

/// Like [`check_header`], accepting any version from `oldest` to `format.version`; returns the
/// version found.
pub fn check_header_versions(
    path: &Path,
    bytes: &[u8],
    format: FileFormat,
    oldest: u32,
    segment: u64,
) -> Result<u32, LogError> {
    if bytes.len() < 8 || bytes[0..8] != format.magic {
        return Err(LogError::NotALogFile {
            path: path.to_path_buf(),
            found: bytes[..bytes.len().min(8)].to_vec(),
        });
    }
    if bytes.len() < HEADER_BYTES as usize {
        return Err(LogError::corrupt(
            path,
            0,
            "file shorter than its 32-byte header",
        ));
    }
    let version = le_u32(bytes, 8);
    if version < oldest || version > format.version {
        return Err(LogError::UnsupportedFormat {
            path: path.to_path_buf(),
            found: version,
            expected: format.version,
        });
    }
    let crc = le_u32(bytes, 28);
    if crc32fast::hash(&bytes[0..28]) != crc {
        return Err(LogError::corrupt(
            path,
            28,
            "segment header checksum mismatch",
        ));
    }
    if le_u32(bytes, 12) != 0 || le_u32(bytes, 24) != 0 {
        return Err(LogError::corrupt(
            path,
            12,
            "reserved header bytes are not zero",
        ));
    }
    let found = le_u64(bytes, 16);
    if found != segment {
        return Err(LogError::corrupt(
            path,
            16,
            format!("header names segment {found}, the file name says {segment}"),
        ));
    }
    Ok(version)
}

/// A checksum started over the frame's segment number, offset and first 16 header bytes
/// (the part both frame checksums cover), given to the hasher in one piece: small updates
/// cost more than the bytes they add.
fn frame_seed(
    segment: u64,
    offset: u64,
    h: &[u8; FRAME_HEADER_BYTES as usize],
) -> crc32fast::Hasher {
    let mut b = [0u8; 32];
    b[0..8].copy_from_slice(&segment.to_le_bytes());
    b[8..16].copy_from_slice(&offset.to_le_bytes());
    b[16..32].copy_from_slice(&h[0..16]);
    let mut c = crc32fast::Hasher::new();
    c.update(&b);
    c
}

/// Appends one frame (header + payload) to `out`. `offset` is the frame's logical offset.
pub fn encode_frame(
    out: &mut Vec<u8>,
    segment: u64,
    offset: u64,
    kind: u8,
    end_of_batch: bool,
    durable_mark: u64,
    payload: &[u8],
) {
    let h = encode_frame_header(segment, offset, kind, end_of_batch, durable_mark, payload);
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}

/// The header of the frame [`encode_frame`] writes (its checksums cover `payload`), for a
/// writer that copies the payload elsewhere itself.
pub fn encode_frame_header(
    segment: u64,
    offset: u64,
    kind: u8,
    end_of_batch: bool,
    durable_mark: u64,
    payload: &[u8],
) -> [u8; FRAME_HEADER_BYTES as usize] {
    debug_assert!(
        payload.len() as u64 <= RECORD_PAYLOAD_BYTES_MAX,
        "caller checks payload size"
    );
    let mut h = [0u8; FRAME_HEADER_BYTES as usize];
    h[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[4] = kind;
    h[5] = if end_of_batch { FLAG_END_OF_BATCH } else { 0 };
    h[8..16].copy_from_slice(&durable_mark.to_le_bytes());
    // Both checksums start with the segment, offset and first 16 header bytes.
    let prefix = frame_seed(segment, offset, &h);
    let mut rc = prefix.clone();
    rc.update(payload);
    h[16..20].copy_from_slice(&rc.finalize().to_le_bytes());
    let mut hc = prefix;
    hc.update(&h[16..20]);
    h[20..24].copy_from_slice(&hc.finalize().to_le_bytes());
    h
}

/// A frame header whose own checksum and fields are valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length.
    pub len: u32,
    /// Record kind.
    pub kind: u8,
    /// Last record of its batch.
    pub end_of_batch: bool,
    /// See docs/format.md: bytes below this were durable when the frame was written.
    pub durable_mark: u64,
    /// Record CRC (checked against the payload by [`PayloadCheck::matches`]).
    pub record_crc: u32,
}

impl FrameHeader {
    /// Total frame length.
    pub fn frame_len(&self) -> u64 {
        FRAME_HEADER_BYTES + u64::from(self.len)
    }
}

/// Why a frame header is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderFault {
    /// The header checksum does not match.
    Checksum,
    /// Checksum fine but a field is out of range (reserved bits, length).
    Field,
}

/// Decodes and checks a frame header that sits at `offset` of `segment`.
pub fn decode_frame_header(
    h: &[u8; FRAME_HEADER_BYTES as usize],
    segment: u64,
    offset: u64,
) -> Result<FrameHeader, HeaderFault> {
    decode_frame_header_check(h, segment, offset).map(|(fh, _)| fh)
}

/// [`decode_frame_header`], also giving the check of the payload that follows. Both
/// checksums start with the segment, offset and first 16 header bytes; that part is
/// computed once.
pub fn decode_frame_header_check(
    h: &[u8; FRAME_HEADER_BYTES as usize],
    segment: u64,
    offset: u64,
) -> Result<(FrameHeader, PayloadCheck), HeaderFault> {
    let prefix = frame_seed(segment, offset, h);
    let mut hc = prefix.clone();
    hc.update(&h[16..20]);
    if hc.finalize() != le_u32(h, 20) {
        return Err(HeaderFault::Checksum);
    }
    let len = le_u32(h, 0);
    if h[5] & !FLAG_END_OF_BATCH != 0 || h[6] != 0 || h[7] != 0 {
        return Err(HeaderFault::Field);
    }
    if u64::from(len) > RECORD_PAYLOAD_BYTES_MAX {
        return Err(HeaderFault::Field);
    }
    let fh = FrameHeader {
        len,
        kind: h[4],
        end_of_batch: h[5] & FLAG_END_OF_BATCH != 0,
        durable_mark: le_u64(h, 8),
        record_crc: le_u32(h, 16),
    };
    Ok((
        fh,
        PayloadCheck {
            prefix,
            crc: fh.record_crc,
        },
    ))
}

/// The record checksum of one frame, its header part already computed.
#[derive(Clone, Debug)]
pub struct PayloadCheck {
    prefix: crc32fast::Hasher,
    crc: u32,
}

impl PayloadCheck {
    /// Whether the record checksum over the header and `payload` matches.
    pub fn matches(mut self, payload: &[u8]) -> bool {
        self.prefix.update(payload);
        self.prefix.finalize() == self.crc
    }
}

/// Quick filter before computing a header checksum while searching for frames byte by byte.
pub fn plausible_frame_header(h: &[u8]) -> bool {
    h.len() >= FRAME_HEADER_BYTES as usize
        && h[5] & !FLAG_END_OF_BATCH == 0
        && h[6] == 0
        && h[7] == 0
        && u64::from(le_u32(h, 0)) <= RECORD_PAYLOAD_BYTES_MAX
}

/// One entry of a sealed segment's block table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockEntry {
    /// Offset of the compressed bytes in the file.
    pub file_offset: u64,
    /// Length of the compressed bytes.
    pub len: u32,
    /// CRC-32 of the compressed bytes.
    pub crc: u32,
}

/// Appends one block table entry.
pub fn encode_block_entry(out: &mut Vec<u8>, e: &BlockEntry) {
    out.extend_from_slice(&e.file_offset.to_le_bytes());
    out.extend_from_slice(&e.len.to_le_bytes());
    out.extend_from_slice(&e.crc.to_le_bytes());
}

/// Decodes one block table entry (`b` is exactly 16 bytes).
pub fn decode_block_entry(b: &[u8]) -> BlockEntry {
    BlockEntry {
        file_offset: le_u64(b, 0),
        len: le_u32(b, 8),
        crc: le_u32(b, 12),
    }
}

/// The footer of a sealed segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// Length of the logical stream.
    pub logical_len: u64,
    /// Records in the segment.
    pub records: u64,
    /// Offset of the first record, or `logical_len`.
    pub first_record: u64,
    /// Offset of the last record, or `logical_len`.
    pub last_record: u64,
    /// Where the block table starts.
    pub table_offset: u64,
    /// Number of blocks.
    pub blocks: u32,
    /// Logical bytes per block.
    pub block_bytes: u32,
    /// CRC-32 of the block table.
    pub table_crc: u32,
    /// Segment number.
    pub segment: u64,
}

/// Encodes a footer.
pub fn encode_footer(f: &Footer) -> [u8; FOOTER_BYTES as usize] {
    let mut b = [0u8; FOOTER_BYTES as usize];
    b[0..8].copy_from_slice(&f.logical_len.to_le_bytes());
    b[8..16].copy_from_slice(&f.records.to_le_bytes());
    b[16..24].copy_from_slice(&f.first_record.to_le_bytes());
    b[24..32].copy_from_slice(&f.last_record.to_le_bytes());
    b[32..40].copy_from_slice(&f.table_offset.to_le_bytes());
    b[40..44].copy_from_slice(&f.blocks.to_le_bytes());
    b[44..48].copy_from_slice(&f.block_bytes.to_le_bytes());
    b[48..52].copy_from_slice(&f.table_crc.to_le_bytes());
    b[52..60].copy_from_slice(&f.segment.to_le_bytes());
    let crc = crc32fast::hash(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes a footer, checking only its own checksum (bounds are checked by the caller).
pub fn decode_footer(b: &[u8]) -> Option<Footer> {
    if b.len() != FOOTER_BYTES as usize || crc32fast::hash(&b[0..60]) != le_u32(b, 60) {
        return None;
    }
    Some(Footer {
        logical_len: le_u64(b, 0),
        records: le_u64(b, 8),
        first_record: le_u64(b, 16),
        last_record: le_u64(b, 24),
        table_offset: le_u64(b, 32),
        blocks: le_u32(b, 40),
        block_bytes: le_u32(b, 44),
        table_crc: le_u32(b, 48),
        segment: le_u64(b, 52),
    })
}

/// File name of an unsealed segment.
pub fn active_name(segment: u64) -> String {
    format!("{segment:020}.active")
}

/// File name of a sealed segment.
pub fn sealed_name(segment: u64) -> String {
    format!("{segment:020}.sealed")
}

/// File name of a sealed segment being written.
pub fn sealed_tmp_name(segment: u64) -> String {
    format!("{segment:020}.sealed.tmp")
}

/// File name of the copy of a torn tail cut at `offset`.
pub fn cut_name(segment: u64, offset: u64) -> String {
    format!("{segment:020}.active.cut-{offset:020}")
}

/// What a directory entry is to the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileRole {
    /// `.active`
    Active(u64),
    /// `.sealed`
    Sealed(u64),
    /// `.sealed.tmp`
    SealedTmp(u64),
}

/// Classifies a file name; `None` for names the log ignores (cut copies, foreign files).
pub fn parse_name(name: &str) -> Option<FileRole> {
    let (digits, rest) = name.split_at_checked(20)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    match rest {
        ".active" => Some(FileRole::Active(n)),
        ".sealed" => Some(FileRole::Sealed(n)),
        ".sealed.tmp" => Some(FileRole::SealedTmp(n)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_and_place_binding() {
        let mut out = Vec::new();
        encode_frame(&mut out, 3, 32, 7, true, 32, b"hello");
        let h: [u8; 24] = out[0..24].try_into().unwrap();
        let fh = decode_frame_header(&h, 3, 32).unwrap();
        assert_eq!(fh.len, 5);
        assert_eq!(fh.kind, 7);
        assert!(fh.end_of_batch);
        let (same, check) = decode_frame_header_check(&h, 3, 32).unwrap();
        assert_eq!(same, fh);
        assert!(check.clone().matches(b"hello"));
        assert!(!check.matches(b"hellp"));
        assert_eq!(decode_frame_header(&h, 3, 33), Err(HeaderFault::Checksum));
        assert_eq!(decode_frame_header(&h, 4, 32), Err(HeaderFault::Checksum));
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_name(&active_name(5)), Some(FileRole::Active(5)));
        assert_eq!(
            parse_name(&sealed_name(u64::MAX)),
            Some(FileRole::Sealed(u64::MAX))
        );
        assert_eq!(
            parse_name(&sealed_tmp_name(0)),
            Some(FileRole::SealedTmp(0))
        );
        assert_eq!(parse_name(&cut_name(1, 99)), None);
        assert_eq!(parse_name("x"), None);
        assert_eq!(parse_name("9999999999999999999999.active"), None);
    }

    #[test]
    fn header_checks_in_order() {
        let p = Path::new("f");
        let h = encode_header(ACTIVE_FORMAT, 9);
        check_header(p, &h, ACTIVE_FORMAT, 9).unwrap();
        assert!(matches!(
            check_header(p, &h, SEALED_FORMAT, 9),
            Err(LogError::NotALogFile { .. })
        ));
        let mut newer = h;
        newer[8] = 3;
        assert!(matches!(
            check_header(p, &newer, ACTIVE_FORMAT, 9),
            Err(LogError::UnsupportedFormat {
                found: 3,
                expected: 2,
                ..
            })
        ));
        // version 1 active segments are still read (with a header checksum of their own)
        let v1 = encode_header(
            FileFormat {
                magic: ACTIVE_FORMAT.magic,
                version: 1,
            },
            9,
        );
        assert!(check_header(p, &v1, ACTIVE_FORMAT, 9).is_err());
        assert_eq!(
            check_header_versions(p, &v1, ACTIVE_FORMAT, ACTIVE_VERSION_OLDEST, 9).unwrap(),
            1
        );
        assert_eq!(
            check_header_versions(p, &h, ACTIVE_FORMAT, ACTIVE_VERSION_OLDEST, 9).unwrap(),
            2
        );
        assert!(matches!(
            check_header(p, &h, ACTIVE_FORMAT, 8),
            Err(LogError::Corrupt { .. })
        ));
    }
}
