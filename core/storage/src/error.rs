//! Typed storage errors.
//!
//! Every error names the operation and the path it concerned, so a log line or
//! an HTTP error body can always say *which* file failed and *how*, without the
//! caller having to thread that context through by hand.

use std::fmt;
use std::path::{Path, PathBuf};

/// The operations of [`crate::DurableStorage`] and [`crate::DurableFile`].
///
/// The simulator's trace and fault rules speak in these kinds, so they are part
/// of the public vocabulary of tests and of `sluice sim` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    Open,
    Read,
    Write,
    Append,
    Len,
    Truncate,
    Reserve,
    SyncFile,
    CreateDir,
    ListDir,
    RemoveFile,
    Rename,
    RemoveDirAll,
    SyncDir,
    Exists,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Open => "open",
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Append => "append",
            OpKind::Len => "len",
            OpKind::Truncate => "truncate",
            OpKind::Reserve => "reserve",
            OpKind::SyncFile => "sync_file",
            OpKind::CreateDir => "create_dir",
            OpKind::ListDir => "list_dir",
            OpKind::RemoveFile => "remove_file",
            OpKind::Rename => "rename",
            OpKind::RemoveDirAll => "remove_dir_all",
            OpKind::SyncDir => "sync_dir",
            OpKind::Exists => "exists",
        }
    }

    /// Operations that can change what is on disk (cached or durable).
    pub fn is_mutation(self) -> bool {
        !matches!(
            self,
            OpKind::Open | OpKind::Read | OpKind::Len | OpKind::ListDir | OpKind::Exists
        )
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What went wrong, independent of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    NotFound,
    AlreadyExists,
    NotADirectory,
    IsADirectory,
    DirectoryNotEmpty,
    /// ENOSPC.
    NoSpace,
    /// EIO and anything else the kernel reports.
    Io,
    /// The handle was opened before a process crash (simulator) or is read-only.
    BadHandle,
    /// A path with `..` or another component the storage layer refuses.
    InvalidPath,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::AlreadyExists => "already exists",
            ErrorKind::NotADirectory => "not a directory",
            ErrorKind::IsADirectory => "is a directory",
            ErrorKind::DirectoryNotEmpty => "directory not empty",
            ErrorKind::NoSpace => "no space left on device",
            ErrorKind::Io => "input/output error",
            ErrorKind::BadHandle => "bad file handle",
            ErrorKind::InvalidPath => "invalid path",
        })
    }
}

/// A failed storage operation: which one, on which path, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} {}: {kind}{}", path.display(), if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
pub struct StorageError {
    pub op: OpKind,
    pub path: PathBuf,
    pub kind: ErrorKind,
    /// Backend-specific detail (the OS message, the injected fault); may be empty.
    pub(crate) detail: String,
}

impl StorageError {
    pub fn new(op: OpKind, path: &Path, kind: ErrorKind) -> Self {
        StorageError {
            op,
            path: path.to_path_buf(),
            kind,
            detail: String::new(),
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub(crate) fn from_io(op: OpKind, path: &Path, err: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let kind = match err.kind() {
            K::NotFound => ErrorKind::NotFound,
            K::AlreadyExists => ErrorKind::AlreadyExists,
            K::NotADirectory => ErrorKind::NotADirectory,
            K::IsADirectory => ErrorKind::IsADirectory,
            K::DirectoryNotEmpty => ErrorKind::DirectoryNotEmpty,
            K::StorageFull | K::QuotaExceeded => ErrorKind::NoSpace,
            K::InvalidInput | K::InvalidFilename => ErrorKind::InvalidPath,
            _ => ErrorKind::Io,
        };
        StorageError::new(op, path, kind).with_detail(err.to_string())
    }
}

pub type Result<T> = std::result::Result<T, StorageError>;
