use super::*;
use crate::error::ErrorKind;

const TAG: [u8; 4] = *b"TST1";

fn entry(i: u64, width: u32) -> Vec<u8> {
    let mut e = vec![0u8; width as usize];
    let b = i.to_le_bytes();
    for (k, byte) in e.iter_mut().enumerate() {
        *byte = b[k % 8] ^ (k as u8).wrapping_mul(31);
    }
    e
}

fn fill(ix: &mut FixedIndex, from: u64, to: u64) {
    for i in from..to {
        ix.push(&entry(i, ix.width()));
    }
}

fn check_all(ix: &FixedIndex, n: u64) {
    assert_eq!(ix.len(), n);
    for i in 0..n {
        assert_eq!(
            ix.get(i).unwrap(),
            Some(&entry(i, ix.width())[..]),
            "entry {i}"
        );
    }
    assert_eq!(ix.get(n).unwrap(), None);
    assert_eq!(ix.get(u64::MAX).unwrap(), None);
    ix.check_all().unwrap();
}

#[test]
fn round_trip_memory_durable_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.idx");
    let mut ix = FixedIndex::create(&path, TAG, 12).unwrap();
    assert!(ix.is_empty());
    fill(&mut ix, 0, 100);
    check_all(&ix, 100);
    ix.sync().unwrap();
    assert_eq!(ix.durable_len(), 100);
    fill(&mut ix, 100, 150);
    check_all(&ix, 150);
    ix.sync().unwrap();
    fill(&mut ix, 150, 160); // never synced: lost on reopen
    drop(ix);
    let ix = FixedIndex::open(&path, TAG, 12).unwrap();
    assert_eq!(ix.cut_bytes(), 0);
    check_all(&ix, 150);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        FIXED_HEADER_BYTES + 150 * (12 + u64::from(FIXED_ENTRY_CRC_BYTES))
    );
}

#[test]
fn empty_file_reopens_and_sync_of_nothing_is_fine() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.idx");
    let mut ix = FixedIndex::create(&path, TAG, 8).unwrap();
    ix.sync().unwrap();
    drop(ix);
    let ix = FixedIndex::open(&path, TAG, 8).unwrap();
    check_all(&ix, 0);
    assert_eq!(ix.partition_point(|_| true).unwrap(), 0);
}

#[test]
fn create_replaces_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.idx");
    std::fs::write(&path, b"garbage that is not an index").unwrap();
    let mut ix = FixedIndex::create(&path, TAG, 4).unwrap();
    fill(&mut ix, 0, 3);
    ix.sync().unwrap();
    drop(ix);
    check_all(&FixedIndex::open(&path, TAG, 4).unwrap(), 3);
}

#[test]
fn truncate_in_tail_and_in_durable_part() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.idx");
    let mut ix = FixedIndex::create(&path, TAG, 16).unwrap();
    fill(&mut ix, 0, 50);
    ix.sync().unwrap();
    fill(&mut ix, 50, 80);
    ix.truncate(60).unwrap();
    check_all(&ix, 60);
    ix.truncate(20).unwrap();
    check_all(&ix, 20);
    assert_eq!(ix.durable_len(), 20);
    fill(&mut ix, 20, 30);
    ix.sync().unwrap();
    drop(ix);
    let mut ix = FixedIndex::open(&path, TAG, 16).unwrap();
    check_all(&ix, 30);
    assert_eq!(
        ix.truncate(31).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    ix.truncate(0).unwrap();
    check_all(&ix, 0);
    drop(ix);
    check_all(&FixedIndex::open(&path, TAG, 16).unwrap(), 0);
}

#[test]
fn partition_point_over_both_parts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.idx");
    let mut ix = FixedIndex::create(&path, TAG, 8).unwrap();
    for i in 0..40u64 {
        ix.push(&(i * 10).to_le_bytes());
    }
    ix.sync().unwrap();
    for i in 40..70u64 {
        ix.push(&(i * 10).to_le_bytes());
    }
    let key = |e: &[u8]| u64::from_le_bytes(e.try_into().unwrap());
    for probe in 0..=700u64 {
        let want = probe.div_ceil(10).min(70);
        assert_eq!(
            ix.partition_point(|e| key(e) < probe).unwrap(),
            want,
            "probe {probe}"
        );
    }
}

#[test]
fn torn_tail_is_cut_at_every_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.idx");
    let width = 7u32;
    let n = 6u64;
    let mut ix = FixedIndex::create(&path, TAG, width).unwrap();
    fill(&mut ix, 0, n);
    ix.sync().unwrap();
    drop(ix);
    let full = std::fs::read(&path).unwrap();
    for cut in 0..=full.len() {
        let p = dir.path().join(format!("cut{cut}.idx"));
        std::fs::write(&p, &full[..cut]).unwrap();
        let r = FixedIndex::open(&p, TAG, width);
        if (cut as u64) < FIXED_HEADER_BYTES {
            let e = r.unwrap_err();
            let k = e.kind();
            assert!(
                k == ErrorKind::UnsupportedFormat || k == ErrorKind::Corrupt,
                "cut {cut}: {e}"
            );
            continue;
        }
        let ix = r.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let stride = u64::from(width + FIXED_ENTRY_CRC_BYTES);
        let whole = (cut as u64 - FIXED_HEADER_BYTES) / stride;
        assert_eq!(ix.cut_bytes(), (cut as u64 - FIXED_HEADER_BYTES) % stride);
        check_all(&ix, whole);
        drop(ix);
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            FIXED_HEADER_BYTES + whole * stride
        );
        // After the cut, appending continues cleanly.
        let mut ix = FixedIndex::open(&p, TAG, width).unwrap();
        assert_eq!(ix.cut_bytes(), 0);
        fill(&mut ix, whole, n);
        ix.sync().unwrap();
        drop(ix);
        assert_eq!(
            std::fs::read(&p).unwrap(),
            full,
            "cut {cut}: rewritten file differs"
        );
    }
}

fn write_with_header(dir: &Path, name: &str, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let path = dir.join(name);
    let mut ix = FixedIndex::create(&path, TAG, 8).unwrap();
    fill(&mut ix, 0, 4);
    ix.sync().unwrap();
    drop(ix);
    let mut bytes = std::fs::read(&path).unwrap();
    edit(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    path
}

fn reseal(bytes: &mut [u8]) {
    let crc = crc32fast::hash(&bytes[..CRC_OFFSET]);
    bytes[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn foreign_magic_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_with_header(dir.path(), "f.idx", |b| {
        b[0..8].copy_from_slice(b"SQLite f")
    });
    let e = FixedIndex::open(&path, TAG, 8).unwrap_err();
    assert!(matches!(e, IndexError::ForeignFile { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
    assert!(e.to_string().contains("not a Logbook index"), "{e}");
}

#[test]
fn newer_version_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_with_header(dir.path(), "v.idx", |b| {
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        reseal(b);
    });
    let e = FixedIndex::open(&path, TAG, 8).unwrap_err();
    assert!(
        matches!(
            e,
            IndexError::UnsupportedVersion {
                found: 3,
                supported: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("version 3"), "{e}");
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
}

#[test]
fn wrong_tag_or_width_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_with_header(dir.path(), "w.idx", |_| {});
    let e = FixedIndex::open(&path, *b"OTHR", 8).unwrap_err();
    assert!(matches!(e, IndexError::ShapeMismatch { .. }), "{e}");
    let e = FixedIndex::open(&path, TAG, 16).unwrap_err();
    assert!(
        matches!(
            e,
            IndexError::ShapeMismatch {
                found_width: 8,
                expected_width: 16,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::UnsupportedFormat);
    assert_eq!(
        FixedIndex::open(&path, TAG, 0).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        FixedIndex::create(&path, TAG, FIXED_WIDTH_MAX + 1)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn every_header_bit_flip_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clean = write_with_header(dir.path(), "clean.idx", |_| {});
    let bytes = std::fs::read(&clean).unwrap();
    for bit in 0..(FIXED_HEADER_BYTES as usize * 8) {
        let mut b = bytes.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        let p = dir.path().join("flip.idx");
        std::fs::write(&p, &b).unwrap();
        assert!(
            FixedIndex::open(&p, TAG, 8).is_err(),
            "bit {bit} flip accepted"
        );
    }
}

#[test]
fn missing_file_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let e = FixedIndex::open(&dir.path().join("nope"), TAG, 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
}

#[test]
#[should_panic(expected = "exactly `width` bytes")]
fn push_of_wrong_width_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut ix = FixedIndex::create(&dir.path().join("x.idx"), TAG, 8).unwrap();
    ix.push(&[1, 2, 3]);
}

/// Open checks the header only; a flipped entry byte is refused by every read of that entry
/// (`get`, a `partition_point` that looks at it, `check_all`) with the entry's offset, and
/// the other entries still read.
#[test]
fn every_entry_bit_flip_is_refused_when_read_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.idx");
    let width = 5u32;
    let mut ix = FixedIndex::create(&path, TAG, width).unwrap();
    fill(&mut ix, 0, 4);
    ix.sync().unwrap();
    drop(ix);
    let full = std::fs::read(&path).unwrap();
    let stride = (width + FIXED_ENTRY_CRC_BYTES) as usize;
    for byte in FIXED_HEADER_BYTES as usize..full.len() {
        for bit in 0..8 {
            let mut b = full.clone();
            b[byte] ^= 1 << bit;
            let p = dir.path().join("flip.idx");
            std::fs::write(&p, &b).unwrap();
            let ix = FixedIndex::open(&p, TAG, width).unwrap();
            let entry = (byte - FIXED_HEADER_BYTES as usize) / stride;
            let offset_of = |e: IndexError| match e {
                IndexError::ChecksumMismatch { offset, .. } => offset,
                other => panic!("byte {byte} bit {bit}: {other}"),
            };
            let want = FIXED_HEADER_BYTES + (entry * stride) as u64;
            assert_eq!(
                offset_of(ix.get(entry as u64).unwrap_err()),
                want,
                "byte {byte} bit {bit}"
            );
            assert_eq!(
                offset_of(ix.check_all().unwrap_err()),
                want,
                "byte {byte} bit {bit}"
            );
            for other in (0..4u64).filter(|&o| o != entry as u64) {
                assert_eq!(ix.get(other).unwrap(), Some(&self::entry(other, width)[..]));
            }
            // Searches over 4 entries look at 3 (all true: past the last) and 3, 1, 0 (all
            // false): each fails exactly when it meets the damaged entry.
            let upward = ix.partition_point(|_| true);
            assert_eq!(upward.is_err(), entry == 3, "byte {byte} bit {bit}");
            let downward = ix.partition_point(|_| false);
            assert_eq!(downward.is_err(), entry != 2, "byte {byte} bit {bit}");
        }
    }
    // Entries swapped (each intact on its own) are refused too: the checksum binds the index.
    let mut b = full.clone();
    let h = FIXED_HEADER_BYTES as usize;
    let (first, second) = (h..h + stride, h + stride..h + 2 * stride);
    let a = full[first.clone()].to_vec();
    b[first].copy_from_slice(&full[second.clone()]);
    b[second].copy_from_slice(&a);
    std::fs::write(&path, &b).unwrap();
    let mut ix = FixedIndex::open(&path, TAG, width).unwrap();
    let flag = Arc::new(AtomicBool::new(false));
    ix.report_damage_to(Arc::clone(&flag));
    assert_eq!(ix.get(2).unwrap(), Some(&entry(2, width)[..]));
    assert!(
        !flag.load(Ordering::Acquire),
        "an intact entry reported damage"
    );
    assert_eq!(ix.get(0).unwrap_err().kind(), ErrorKind::Corrupt);
    assert!(flag.load(Ordering::Acquire), "the damage was not reported");
    assert_eq!(ix.get(1).unwrap_err().kind(), ErrorKind::Corrupt);
    assert_eq!(ix.check_all().unwrap_err().kind(), ErrorKind::Corrupt);
}

#[test]
fn sync_in_three_steps_keeps_entries_pushed_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.idx");
    let mut ix = FixedIndex::create(&p, TAG, 24).unwrap();
    fill(&mut ix, 0, 10);
    let pending = ix.begin_sync().unwrap();
    assert!(!pending.is_empty());
    // Entries pushed while the write runs (no lock held) stay in memory, readable.
    fill(&mut ix, 10, 15);
    let done = pending.write().unwrap();
    assert_eq!(done.durable_len(), 10);
    check_all(&ix, 15);
    ix.finish_sync(Ok(done)).unwrap();
    assert_eq!(ix.durable_len(), 10);
    check_all(&ix, 15);
    ix.sync().unwrap();
    assert_eq!(ix.durable_len(), 15);
    drop(ix);
    check_all(&FixedIndex::open(&p, TAG, 24).unwrap(), 15);
}

#[test]
fn sync_begun_before_a_truncate_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.idx");
    let mut ix = FixedIndex::create(&p, TAG, 8).unwrap();
    fill(&mut ix, 0, 4);
    let pending = ix.begin_sync().unwrap();
    ix.truncate(2).unwrap();
    let done = pending.write().unwrap();
    let e = ix.finish_sync(Ok(done)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(ix.durable_len(), 0);
    check_all(&ix, 2);
    // A failed write poisons, as a failed `sync` does.
    let pending = ix.begin_sync().unwrap();
    drop(pending);
    let err = IndexError::io(&p, "fdatasync", std::io::Error::from_raw_os_error(28));
    assert!(ix.finish_sync(Err(err)).is_err());
    assert!(matches!(ix.sync(), Err(IndexError::Poisoned { .. })));
}

#[test]
fn a_detached_index_reads_whole_entries_and_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ix");
    let mut ix = FixedIndex::create(&p, TAG, 12).unwrap();
    fill(&mut ix, 0, 40);
    ix.sync().unwrap();
    drop(ix);
    // A writer caught half way through its next entry, and one entry damaged after it.
    let mut bytes = std::fs::read(&p).unwrap();
    let stride = 16usize;
    bytes.extend_from_slice(&[7u8; 5]);
    std::fs::write(&p, &bytes).unwrap();
    let mut r = FixedIndex::open_detached(&p, TAG, 12).unwrap();
    assert!(r.is_detached());
    check_all(&r, 40);
    assert_eq!(r.cut_bytes(), 5);
    // Memory only: a truncation and pushes leave the file as it was.
    r.truncate(30).unwrap();
    fill(&mut r, 30, 45);
    check_all(&r, 45);
    assert!(r.sync().is_err(), "a detached index is never written");
    assert_eq!(std::fs::read(&p).unwrap(), bytes);
    // Entries from the first damaged one on are left out.
    let at = FIXED_HEADER_BYTES as usize + 10 * stride + 3;
    bytes[at] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    let r = FixedIndex::open_detached(&p, TAG, 12).unwrap();
    check_all(&r, 10);
    // Absent: empty. Foreign: refused.
    let r = FixedIndex::open_detached(&d.path().join("none"), TAG, 12).unwrap();
    assert!(r.is_empty());
    assert!(FixedIndex::open_detached(&p, *b"OTHR", 12).is_err());
}

#[test]
fn an_index_kept_in_memory_is_attached_to_its_file_and_synced_whole() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ix");
    // A stale file at the path is replaced, never read.
    std::fs::write(&p, b"stale bytes of an older index").unwrap();
    let mut ix = FixedIndex::empty_detached(&p, TAG, 12).unwrap();
    fill(&mut ix, 0, 25);
    ix.truncate(20).unwrap();
    assert!(ix.sync().is_err(), "no file before attach");
    ix.attach().unwrap();
    assert!(!ix.is_detached());
    assert!(ix.attach().is_err(), "attached once");
    fill(&mut ix, 20, 30);
    ix.sync().unwrap();
    assert_eq!(ix.durable_len(), 30);
    check_all(&ix, 30);
    drop(ix);
    let ix = FixedIndex::open(&p, TAG, 12).unwrap();
    assert_eq!(ix.cut_bytes(), 0);
    check_all(&ix, 30);
    ix.check_all().unwrap();
}
