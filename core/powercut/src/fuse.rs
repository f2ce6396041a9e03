//! The FUSE front: translates kernel requests into [`Model`] calls.
//!
//! Invariants, and why they hold:
//! - The kernel caches nothing the model could later take back: every entry
//!   and attribute is answered with a zero TTL and every file is opened with
//!   `FOPEN_DIRECT_IO`, so after a cut the next lookup, stat or read sees the
//!   durable state, not a page the kernel kept from before.
//! - One mutex serialises every request, so each is atomic with respect to a
//!   cut and to every other request (the model's durability rules assume
//!   calls in one order, as the simulator's do).
//! - Writes to a file opened with `O_APPEND` go to the model's current end,
//!   whatever offset the kernel computed from its own (possibly older) size.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::control;
use crate::model::{CONTROL, CONTROL_NAME, FsError, Ino, Model, Node, ROOT};

const TTL: Duration = Duration::ZERO;

pub struct PowercutFs {
    model: Arc<Mutex<Model>>,
}

impl PowercutFs {
    pub fn new(model: Arc<Mutex<Model>>) -> Self {
        PowercutFs { model }
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        self.model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn errno(e: FsError) -> Errno {
    match e {
        FsError::NotFound => Errno::ENOENT,
        FsError::Exists => Errno::EEXIST,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::NotEmpty => Errno::ENOTEMPTY,
        FsError::Invalid => Errno::EINVAL,
        FsError::NoSpace => Errno::ENOSPC,
        FsError::Io => Errno::EIO,
        FsError::Reserved => Errno::EACCES,
    }
}

fn attr(ino: Ino, kind: FileType, size: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: if kind == FileType::Directory {
            0o755
        } else {
            0o644
        },
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

fn attr_of(m: &Model, ino: Ino) -> Result<FileAttr, FsError> {
    if ino == CONTROL {
        return Ok(attr(CONTROL, FileType::RegularFile, 0));
    }
    match m.node(ino) {
        Some(Node::Dir(_)) => Ok(attr(ino, FileType::Directory, 0)),
        Some(Node::File(f)) => Ok(attr(ino, FileType::RegularFile, f.cached.len() as u64)),
        None => Err(FsError::NotFound),
    }
}

fn name_of(name: &OsStr) -> Result<&str, FsError> {
    name.to_str().ok_or(FsError::Invalid)
}

impl Filesystem for PowercutFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let m = self.lock();
        let r = (|| {
            let name = name_of(name)?;
            if parent.0 == ROOT && name == CONTROL_NAME {
                return attr_of(&m, CONTROL);
            }
            let ino = m.lookup(parent.0, name)?;
            attr_of(&m, ino)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match attr_of(&self.lock(), ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut m = self.lock();
        // Only the length is modelled (ADR 0002 §4 leaves metadata out); the
        // control file ignores truncation so `echo cut > .powercut` works.
        let r = match size {
            Some(len) if ino.0 != CONTROL => m.set_len(ino.0, len),
            _ => Ok(()),
        };
        match r.and_then(|()| attr_of(&m, ino.0)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut m = self.lock();
        let r = name_of(name)
            .and_then(|n| m.mkdir(parent.0, n))
            .and_then(|ino| attr_of(&m, ino));
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut m = self.lock();
        match name_of(name).and_then(|n| m.unlink(parent.0, n)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut m = self.lock();
        match name_of(name).and_then(|n| m.rmdir(parent.0, n)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            reply.error(Errno::EINVAL);
            return;
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let mut m = self.lock();
        let r = name_of(name).and_then(|from| {
            name_of(newname).and_then(|to| m.rename(parent.0, from, newparent.0, to, no_replace))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let m = self.lock();
        if ino.0 != CONTROL
            && let Err(e) = m.file(ino.0)
        {
            reply.error(errno(e));
            return;
        }
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut m = self.lock();
        let r = name_of(name)
            .and_then(|n| m.create(parent.0, n))
            .and_then(|ino| attr_of(&m, ino));
        match r {
            Ok(a) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let m = self.lock();
        if ino.0 == CONTROL {
            let text = control::status(&m);
            reply.data(slice_at(text.as_bytes(), offset, size));
            return;
        }
        match m.file(ino.0) {
            Ok(f) => reply.data(slice_at(&f.cached, offset, size)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut m = self.lock();
        let Ok(len) = u32::try_from(data.len()) else {
            reply.error(Errno::EINVAL);
            return;
        };
        if ino.0 == CONTROL {
            match control::execute(&mut m, data) {
                Ok(()) => reply.written(len),
                Err(e) => {
                    tracing::warn!(error = %e, "powercut: control command refused");
                    reply.error(Errno::EINVAL);
                }
            }
            return;
        }
        let at = if flags.0 & libc::O_APPEND != 0 {
            m.file(ino.0).map(|f| f.cached.len() as u64)
        } else {
            Ok(offset)
        };
        match at.and_then(|at| m.write(ino.0, at, data)) {
            Ok(()) => reply.written(len),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if ino.0 == CONTROL {
            reply.ok();
            return;
        }
        // fdatasync and fsync alike persist bytes and length: the model keeps
        // no other metadata (ADR 0002 §2.2).
        match self.lock().fsync_file(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.lock().dir(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let m = self.lock();
        let d = match m.dir(ino.0) {
            Ok(d) => d,
            Err(e) => {
                reply.error(errno(e));
                return;
            }
        };
        // The control file is left out: a program listing the root sees only
        // its own files.
        let mut entries: Vec<(Ino, FileType, String)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        for (name, &child) in &d.cached {
            let kind = match m.node(child) {
                Some(Node::Dir(_)) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            entries.push((child, kind, name.clone()));
        }
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(skip) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        Self::no_xattrs(reply);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        Self::no_xattrs(reply);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.lock().fsync_dir(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
}

// Extended attributes are not modelled (ADR 0002 §4). `fuser`'s defaults
// answer ENOSYS too, but log a warning each time; the kernel asks for
// `security.capability` on every write.
impl PowercutFs {
    fn no_xattrs(reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }
}

fn slice_at(bytes: &[u8], offset: u64, size: u32) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let end = start.saturating_add(size as usize).min(bytes.len());
    &bytes[start..end]
}
