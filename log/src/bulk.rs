//! Writing a new log straight into sealed segments, for bulk loads (an imported bundle).
//!
//! [`Log::append`](crate::Log::append) writes plain frames to an active segment, and a roll
//! hands the finished segment to a sealer thread, which reads it back whole and compresses its
//! blocks. A bulk load that has every record at hand does not need the plain copy: a
//! [`BulkWriter`] frames the records exactly as an append under
//! [`Durability::NoSyncBulkImport`](crate::Durability) would (same segment rolls, same batch
//! flags, same durable marks), cuts the logical stream into 64 KiB blocks as they fill, has
//! them compressed on [`SEALER_THREADS_MAX`] threads, and writes each segment's `N.sealed`
//! file in one pass (header, blocks in order, table, footer; fdatasync; rename). The files are
//! the ones `append` and the sealer make, byte for byte. Memory is a few blocks in flight and
//! the block table, whatever the size of a segment.
//!
//! Nothing is a log until [`BulkWriter::finish`] returns: a crash or an error before leaves
//! `.sealed.tmp` files (which an open removes) and some sealed segments, and the caller, which
//! made the directory for the load, removes it. After `finish` the directory is a log of
//! sealed segments only: [`Log::open`](crate::Log::open) starts the next segment.

use crate::error::LogError;
use crate::format::{
    encode_block_entry, encode_footer, encode_frame_header, encode_header, sealed_name,
    sealed_tmp_name, BlockEntry, Footer, BLOCK_BYTES, BLOCK_ENTRY_BYTES, HEADER_BYTES,
    SEALED_FORMAT, ZSTD_LEVEL,
};
use crate::io::{write_all_at, FileSystem, IoFile};
use crate::log::{check_config, checked_batch_len, make_empty_dir, LogConfig, SEALER_THREADS_MAX};
use crate::{Location, Record};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Blocks handed to the compressors and not yet written: bounds the writer's memory (each is
/// 64 KiB in and its compressed copy out) while keeping every compressor busy.
const BLOCKS_IN_FLIGHT_MAX: usize = 4 * SEALER_THREADS_MAX;

/// A compressed block: the input buffer back (for reuse), the compressed bytes or why not.
type Done = (Vec<u8>, Result<Vec<u8>, String>);
/// A block to compress and where to send it.
type Job = (Vec<u8>, SyncSender<Done>);

/// Writes a new log's records directly as sealed segments (see the module documentation).
#[derive(Debug)]
pub struct BulkWriter {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    segment_bytes_max: u64,
    jobs: Option<SyncSender<Job>>,
    workers: Vec<JoinHandle<()>>,
    seg: Option<Segment>,
    next_segment: u64,
    /// Input buffers back from the compressors.
    spare: Vec<Vec<u8>>,
    /// An earlier write or compression failed: nothing more is written.
    failed: bool,
}

/// The segment being written.
#[derive(Debug)]
struct Segment {
    n: u64,
    tmp: PathBuf,
    file: Arc<dyn IoFile>,
    /// Logical length so far (the next frame's offset).
    written: u64,
    /// Logical bytes of the block being filled.
    block: Vec<u8>,
    /// Blocks handed over, in order, not yet written.
    in_flight: VecDeque<Receiver<Done>>,
    /// Where the next compressed block goes in the file.
    file_offset: u64,
    table: Vec<u8>,
    records: u64,
    last_record: Option<u64>,
}

impl BulkWriter {
    /// Starts a new log in `dir`, which must be absent or empty. Of `config`, the segment size
    /// and the file system are used (durability is the caller's: see [`BulkWriter::finish`]).
    pub fn create(dir: &Path, config: &LogConfig) -> Result<BulkWriter, LogError> {
        check_config(config)?;
        let fs = config.file_system();
        make_empty_dir(fs.as_ref(), dir)?;
        let (jobs, rx) = sync_channel::<Job>(BLOCKS_IN_FLIGHT_MAX);
        let rx = Arc::new(Mutex::new(rx));
        let mut workers = Vec::with_capacity(SEALER_THREADS_MAX);
        for _ in 0..SEALER_THREADS_MAX {
            let rx = Arc::clone(&rx);
            let w = std::thread::Builder::new()
                .name("logbook-bulk-seal".into())
                .spawn(move || compress_blocks(&rx))
                .map_err(|e| LogError::io(dir, "start a compressor thread", e))?;
            workers.push(w);
        }
        Ok(BulkWriter {
            dir: dir.to_path_buf(),
            fs,
            segment_bytes_max: config.segment_bytes_max,
            jobs: Some(jobs),
            workers,
            seg: None,
            next_segment: 0,
            spare: Vec::new(),
            failed: false,
        })
    }

    /// Appends one batch, as [`Log::append`](crate::Log::append) would (the same checks, the
    /// same roll to a new segment, the same frames); returns the records' Locations.
    pub fn append(&mut self, batch: &[Record<'_>]) -> Result<Vec<Location>, LogError> {
        if batch.is_empty() {
            return Err(LogError::invalid("a batch needs at least one record"));
        }
        let batch_len = checked_batch_len(batch)?;
        self.live()?;
        let r = self.append_checked(batch, batch_len);
        self.failed |= r.is_err();
        r
    }

    fn append_checked(
        &mut self,
        batch: &[Record<'_>],
        batch_len: u64,
    ) -> Result<Vec<Location>, LogError> {
        if let Some(s) = &self.seg {
            if s.written > HEADER_BYTES && s.written + batch_len > self.segment_bytes_max {
                self.seal_current()?;
            }
        }
        if self.seg.is_none() {
            self.seg = Some(self.start_segment()?);
        }
        let mut seg = self.seg.take().expect("started above");
        let r = self.frame_batch(&mut seg, batch);
        self.seg = Some(seg);
        r
    }

    fn frame_batch(
        &mut self,
        seg: &mut Segment,
        batch: &[Record<'_>],
    ) -> Result<Vec<Location>, LogError> {
        // As `append` under NoSyncBulkImport: each frame's durable mark is its batch's start.
        let mark = seg.written;
        let mut locations = Vec::with_capacity(batch.len());
        for (i, r) in batch.iter().enumerate() {
            let offset = seg.written;
            locations.push(Location {
                segment: seg.n,
                offset,
            });
            let h =
                encode_frame_header(seg.n, offset, r.kind, i + 1 == batch.len(), mark, r.payload);
            self.feed(seg, &h)?;
            self.feed(seg, r.payload)?;
            seg.records += 1;
            seg.last_record = Some(offset);
            seg.written = offset + h.len() as u64 + r.payload.len() as u64;
        }
        Ok(locations)
    }

    /// Adds logical bytes to the segment, handing each block over as it fills.
    fn feed(&mut self, seg: &mut Segment, mut bytes: &[u8]) -> Result<(), LogError> {
        while !bytes.is_empty() {
            let room = BLOCK_BYTES as usize - seg.block.len();
            let n = room.min(bytes.len());
            seg.block.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if seg.block.len() == BLOCK_BYTES as usize {
                self.hand_over(seg)?;
            }
        }
        Ok(())
    }

    /// Sends the filled block to a compressor; writes the oldest block in flight first when
    /// too many are.
    fn hand_over(&mut self, seg: &mut Segment) -> Result<(), LogError> {
        debug_assert!(
            !seg.block.is_empty(),
            "only blocks with bytes are handed over"
        );
        if seg.in_flight.len() >= BLOCKS_IN_FLIGHT_MAX {
            self.write_oldest(seg)?;
        }
        let mut next = self
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BLOCK_BYTES as usize));
        next.clear();
        let block = std::mem::replace(&mut seg.block, next);
        let (tx, rx) = sync_channel(1);
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send((block, tx)).is_ok());
        if !sent {
            return Err(self.stopped(&seg.tmp));
        }
        seg.in_flight.push_back(rx);
        Ok(())
    }

    /// Waits for the oldest block in flight and writes it after the ones before it.
    fn write_oldest(&mut self, seg: &mut Segment) -> Result<(), LogError> {
        let Some(rx) = seg.in_flight.pop_front() else {
            return Ok(());
        };
        let Ok((input, out)) = rx.recv() else {
            return Err(self.stopped(&seg.tmp));
        };
        self.spare.push(input);
        let z = out.map_err(|m| LogError::io(&seg.tmp, "compress", std::io::Error::other(m)))?;
        let e = BlockEntry {
            file_offset: seg.file_offset,
            len: u32::try_from(z.len()).map_err(|_| {
                LogError::io(
                    &seg.tmp,
                    "compress",
                    std::io::Error::other("compressed block too large"),
                )
            })?,
            crc: crc32fast::hash(&z),
        };
        write_all_at(&*seg.file, &z, seg.file_offset)
            .map_err(|e| LogError::io(&seg.tmp, "write", e))?;
        encode_block_entry(&mut seg.table, &e);
        seg.file_offset += z.len() as u64;
        Ok(())
    }

    fn stopped(&self, path: &Path) -> LogError {
        LogError::io(
            path,
            "compress",
            std::io::Error::other("a compressor thread stopped"),
        )
    }

    fn start_segment(&mut self) -> Result<Segment, LogError> {
        let n = self.next_segment;
        self.next_segment = n
            .checked_add(1)
            .ok_or_else(|| LogError::invalid("segment numbers exhausted"))?;
        let tmp = self.dir.join(sealed_tmp_name(n));
        let file = self
            .fs
            .create_new(&tmp)
            .map_err(|e| LogError::io(&tmp, "create", e))?;
        write_all_at(&*file, &encode_header(SEALED_FORMAT, n), 0)
            .map_err(|e| LogError::io(&tmp, "write", e))?;
        Ok(Segment {
            n,
            tmp,
            file,
            written: HEADER_BYTES,
            block: Vec::with_capacity(BLOCK_BYTES as usize),
            in_flight: VecDeque::with_capacity(BLOCKS_IN_FLIGHT_MAX),
            file_offset: HEADER_BYTES,
            table: Vec::new(),
            records: 0,
            last_record: None,
        })
    }

    /// Writes the current segment's last blocks, table and footer, syncs it and gives it its
    /// name (steps 1 and 2 of sealing in docs/format.md, but for the directory's sync).
    fn seal_current(&mut self) -> Result<(), LogError> {
        let Some(mut seg) = self.seg.take() else {
            return Ok(());
        };
        if !seg.block.is_empty() {
            self.hand_over(&mut seg)?;
        }
        while !seg.in_flight.is_empty() {
            self.write_oldest(&mut seg)?;
        }
        let blocks = seg.table.len() as u64 / BLOCK_ENTRY_BYTES;
        debug_assert_eq!(
            blocks,
            (seg.written - HEADER_BYTES).div_ceil(BLOCK_BYTES),
            "one table entry per block of the logical stream"
        );
        let footer = Footer {
            logical_len: seg.written,
            records: seg.records,
            first_record: if seg.records == 0 {
                seg.written
            } else {
                HEADER_BYTES
            },
            last_record: seg.last_record.unwrap_or(seg.written),
            table_offset: seg.file_offset,
            blocks: u32::try_from(blocks)
                .map_err(|_| LogError::invalid("too many blocks in one segment"))?,
            block_bytes: BLOCK_BYTES as u32,
            table_crc: crc32fast::hash(&seg.table),
            segment: seg.n,
        };
        let mut tail = std::mem::take(&mut seg.table);
        tail.extend_from_slice(&encode_footer(&footer));
        write_all_at(&*seg.file, &tail, seg.file_offset)
            .map_err(|e| LogError::io(&seg.tmp, "write", e))?;
        seg.file
            .sync_data()
            .map_err(|e| LogError::io(&seg.tmp, "fdatasync", e))?;
        drop(seg.file);
        let dst = self.dir.join(sealed_name(seg.n));
        self.fs
            .rename(&seg.tmp, &dst)
            .map_err(|e| LogError::io(&dst, "rename", e))
    }

    /// Seals the last segment (segment 0, empty, when nothing was appended) and fsyncs the
    /// directory: from here the directory is a log whose every record is durable.
    pub fn finish(mut self) -> Result<(), LogError> {
        self.live()?;
        if self.seg.is_none() && self.next_segment == 0 {
            self.seg = Some(self.start_segment()?);
        }
        let r = self.seal_current().and_then(|()| {
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| LogError::io(&self.dir, "fsync directory", e))
        });
        self.failed |= r.is_err();
        r
    }

    fn live(&self) -> Result<(), LogError> {
        if self.failed {
            return Err(LogError::invalid(format!(
                "an earlier write to the bulk log at {} failed; start the load over",
                self.dir.display()
            )));
        }
        Ok(())
    }
}

impl Drop for BulkWriter {
    fn drop(&mut self) {
        // Closing the queue ends the compressors once the blocks in flight are done.
        self.jobs = None;
        self.seg = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A compressor thread: takes blocks until the queue closes.
fn compress_blocks(rx: &Mutex<Receiver<Job>>) {
    let mut c = zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(|e| e.to_string());
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        let Ok((block, done)) = job else {
            return;
        };
        let out = match &mut c {
            Ok(c) => c.compress(&block).map_err(|e| e.to_string()),
            Err(e) => Err(e.clone()),
        };
        // The writer may have gone (an error elsewhere): nothing waits for this block.
        let _ = done.send((block, out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Durability, Log};

    fn records(n: usize) -> Vec<(u8, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let len = (i * 7919) % 70_000;
                let payload = (0..len).map(|j| (i * 31 + j / 5) as u8).collect();
                ((i % 3) as u8 + 1, payload)
            })
            .collect()
    }

    /// Batches of 1 to 5 records, as the import makes them.
    fn batches(all: &[(u8, Vec<u8>)]) -> Vec<Vec<Record<'_>>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < all.len() {
            let n = (i % 5 + 1).min(all.len() - i);
            out.push(
                all[i..i + n]
                    .iter()
                    .map(|(kind, payload)| Record {
                        kind: *kind,
                        payload,
                    })
                    .collect(),
            );
            i += n;
        }
        out
    }

    #[test]
    fn writes_the_files_append_and_the_sealer_write() {
        let all = records(300);
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes_max: 2 << 20,
            durability: Durability::NoSyncBulkImport,
            preallocate_bytes: 0,
            ..LogConfig::default()
        };
        let (a, b) = (dir.path().join("appended"), dir.path().join("bulk"));
        let mut at_a = Vec::new();
        {
            let log = Log::create(&a, config.clone()).unwrap();
            for batch in batches(&all) {
                at_a.extend(log.append(&batch).unwrap());
            }
            log.sync().unwrap();
            assert!(log.wait_for_sealing().is_none());
        }
        let mut at_b = Vec::new();
        let mut w = BulkWriter::create(&b, &config).unwrap();
        for batch in batches(&all) {
            at_b.extend(w.append(&batch).unwrap());
        }
        w.finish().unwrap();
        assert_eq!(at_a, at_b);
        let sealed = |d: &Path| {
            let mut names: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".sealed"))
                .collect();
            names.sort();
            names
        };
        let names = sealed(&b);
        assert!(names.len() > 2, "several segments: {names:?}");
        assert_eq!(
            names[..names.len() - 1],
            sealed(&a)[..],
            "the appended log sealed all but its newest segment"
        );
        for name in &names {
            let last = *names.last().unwrap() == *name;
            if !last {
                assert_eq!(
                    std::fs::read(a.join(name)).unwrap(),
                    std::fs::read(b.join(name)).unwrap(),
                    "{name} is byte for byte the sealer's"
                );
            }
        }
        let (log, _) = Log::open(&b, config).unwrap();
        assert!(log.verify().is_ok());
        let got: Vec<_> = log.scan(log.start()).map(|r| r.unwrap()).collect();
        assert_eq!(got.len(), all.len());
        for ((loc, rec, _), (want_loc, (kind, payload))) in got.iter().zip(at_b.iter().zip(&all)) {
            assert_eq!((loc, rec.kind, &rec.payload), (want_loc, *kind, payload));
        }
        log.append(&[Record {
            kind: 9,
            payload: b"after",
        }])
        .unwrap();
    }

    #[test]
    fn an_empty_load_is_an_empty_log() {
        let dir = tempfile::tempdir().unwrap();
        let w = BulkWriter::create(dir.path(), &LogConfig::default()).unwrap();
        w.finish().unwrap();
        let (log, _) = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(log.scan(log.start()).count(), 0);
        assert!(log.verify().is_ok());
    }

    #[test]
    fn a_failed_write_stops_the_load() {
        let (fs, faults) = crate::io::FaultyFs::new();
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            fs: Some(Arc::new(fs)),
            ..LogConfig::default()
        };
        let mut w = BulkWriter::create(dir.path(), &config).unwrap();
        faults.arm(crate::io::Op::Write, 1, crate::io::Injected::Eio);
        let big = vec![7u8; 3 * BLOCK_BYTES as usize];
        let r = (0..40).try_for_each(|_| {
            w.append(&[Record {
                kind: 1,
                payload: &big,
            }])
            .map(drop)
        });
        assert!(r.is_err(), "the write fault is reported");
        assert!(w
            .append(&[Record {
                kind: 1,
                payload: b"x"
            }])
            .is_err());
        assert!(w.finish().is_err());
    }
}
