//! The input encoding of the `log_recovery` target: a list of files of a log directory.
//! `[count u8] { [role u8] [segment u8] [len u32 LE] }*count` then the file bodies, in order.
//! Role 0 = `.active`, 1 = `.sealed`, 2 = `.sealed.tmp`, other = a stray cut copy.

#![allow(dead_code)]

use std::path::Path;

pub struct File {
    pub role: u8,
    pub segment: u8,
    pub bytes: Vec<u8>,
}

pub const FILES_MAX: usize = 8;

pub fn decode(data: &[u8]) -> Option<Vec<File>> {
    let (&count, mut rest) = data.split_first()?;
    let count = (count as usize % FILES_MAX) + 1;
    let mut heads = Vec::new();
    for _ in 0..count {
        let (h, r) = rest.split_at_checked(6)?;
        heads.push((h[0], h[1], u32::from_le_bytes([h[2], h[3], h[4], h[5]]) as usize));
        rest = r;
    }
    let mut files = Vec::new();
    for (role, segment, len) in heads {
        let (b, r) = rest.split_at_checked(len.min(rest.len()))?;
        files.push(File { role, segment, bytes: b.to_vec() });
        rest = r;
    }
    Some(files)
}

pub fn encode(files: &[File]) -> Vec<u8> {
    let mut out = vec![(files.len() - 1) as u8];
    for f in files {
        out.push(f.role);
        out.push(f.segment);
        out.extend_from_slice(&(f.bytes.len() as u32).to_le_bytes());
    }
    for f in files {
        out.extend_from_slice(&f.bytes);
    }
    out
}

pub fn name(role: u8, segment: u8) -> String {
    let n = u64::from(segment);
    match role {
        0 => format!("{n:020}.active"),
        1 => format!("{n:020}.sealed"),
        2 => format!("{n:020}.sealed.tmp"),
        _ => format!("{n:020}.active.cut-{:020}", 32),
    }
}

pub fn write_files(dir: &Path, files: &[File]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for f in files {
        std::fs::write(dir.join(name(f.role, f.segment)), &f.bytes)?;
    }
    Ok(())
}
