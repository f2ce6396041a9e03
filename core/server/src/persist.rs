//! Durable replacement of a small whole file (the metadata, the credentials).
//!
//! A replace is: remove any stale temporary file, create the temporary file
//! fresh, write the bytes, sync the file, rename it over the target, sync the
//! directory. The rename is the commit point.
//!
//! Invariants:
//! - After any crash the target holds either its previous or its new bytes,
//!   never a mix: the new bytes are durable before the name points at them,
//!   and the name flips in one rename.
//! - `Ok` is returned only after the directory sync: a returned `Ok` is a
//!   durable replace. An `Err` may or may not have replaced the target (the
//!   rename may have happened and only the directory sync failed, after
//!   which Linux may drop it); the caller must treat the new bytes as not
//!   committed and decide what to put back (`engine/commit.rs` does).
//! - The temporary file is created fresh each time (`CreateNew` after a
//!   removal), so bytes of an earlier, torn attempt never prefix a new one.

use std::path::Path;

use sluice_storage::{DurableStorage, ErrorKind, OpenMode, StorageError};

/// Replaces `dir/name` with `bytes` durably, through `dir/tmp_name`.
pub(crate) fn replace_file(
    storage: &dyn DurableStorage,
    dir: &Path,
    name: &str,
    tmp_name: &str,
    bytes: &[u8],
) -> Result<(), StorageError> {
    let target = dir.join(name);
    let tmp = dir.join(tmp_name);
    match storage.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let file = storage.open(&tmp, OpenMode::CreateNew)?;
    file.write_at(0, bytes)?;
    file.sync()?;
    drop(file);
    storage.rename(&tmp, &target)?;
    storage.sync_dir(dir)
}
