//! Who a directory or file is: device, inode, birth time, generation.

use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::{self, AtFlags, FileType, Stat, StatxFlags};
use rustix::io::Errno;

/// Identity of an open directory, as the string handed to callers.
///
/// `d<major>:<minor>-i<inode>-b<birth sec>.<nsec>-g<generation>`; `b-` / `g-` when the
/// filesystem does not report a birth time / an inode generation. A directory that is
/// removed and recreated gets a new birth time (and generation) even when the inode
/// number is reused, so equal strings mean the same directory.
pub(crate) fn directory_identity(fd: BorrowedFd<'_>) -> Result<(String, Stat), Errno> {
    let st = fs::fstat(fd)?;
    let mut s = String::with_capacity(64);
    use std::fmt::Write as _;
    let birth = match fs::statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::BTIME | StatxFlags::INO,
    ) {
        Ok(x) if x.stx_mask & StatxFlags::BTIME.bits() != 0 => {
            Some((x.stx_btime.tv_sec, x.stx_btime.tv_nsec))
        }
        _ => None,
    };
    let (major, minor) = (fs::major(st.st_dev), fs::minor(st.st_dev));
    write!(s, "d{major}:{minor}-i{}", st.st_ino).expect("writing to a String cannot fail");
    match birth {
        Some((sec, nsec)) => write!(s, "-b{sec}.{nsec:09}"),
        None => write!(s, "-b-"),
    }
    .expect("writing to a String cannot fail");
    match generation(fd) {
        Some(g) => write!(s, "-g{g}"),
        None => write!(s, "-g-"),
    }
    .expect("writing to a String cannot fail");
    Ok((s, st))
}

/// `FS_IOC_GETVERSION`: the inode generation, on filesystems that keep one (ext4, xfs, btrfs).
fn generation(fd: BorrowedFd<'_>) -> Option<u64> {
    use rustix::ioctl::{opcode, Getter, Opcode};
    const FS_IOC_GETVERSION: Opcode = opcode::read::<std::ffi::c_long>(b'v', 1);
    // SAFETY: FS_IOC_GETVERSION writes at most one `long` (the kernel writes an `int`
    // into it) through the pointer, which `Getter` provides with exactly that type.
    let got = unsafe {
        rustix::ioctl::ioctl(
            fd.as_fd(),
            Getter::<FS_IOC_GETVERSION, std::ffi::c_long>::new(),
        )
    };
    // The kernel stores a 32-bit value; read only those bits so the upper half is never garbage.
    got.ok().map(|v| u64::from(v as u32))
}

/// What must not move while a file is being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileStamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
}

impl FileStamp {
    // Field widths differ between architectures; the casts are lossless on Linux.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn of(st: &Stat) -> FileStamp {
        FileStamp {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            mode: st.st_mode as u32,
            size: (st.st_size as i64).max(0) as u64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        }
    }

    pub(crate) fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode)
    }
}
