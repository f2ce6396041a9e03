//! The data directory's own name: made durable before anything is committed
//! inside it, and made durable *again* after a failed attempt.
//!
//! Every commit (`MetadataStore::save`) syncs the data directory, which makes
//! names *inside* it durable, never the data directory's own name in its
//! parent. That name needs a sync of the parent issued while the entry is
//! dirty. Under Linux semantics a failed sync drops the dirty entry
//! (ADR 0002 §2.4), so a later successful sync of the parent proves nothing:
//! the name must be changed again first.
//!
//! Invariants:
//! - While the names of the directories an open created (the data directory
//!   and any missing ancestors) are not confirmed by a successful sync of
//!   their parents, the marker file `UNCONFIRMED_MARKER` exists inside the
//!   data directory. It is written right after the directories are created,
//!   before the first sync that could fail, and removed only after every
//!   sync succeeded. It records how many levels the open created.
//! - An open that finds the marker re-dirties each recorded level (renames it
//!   to `<name>.redirty` and back, through `dirchain::make_durable`) before
//!   syncing its parent. Nothing else uses the directory during `Engine::open`, so the
//!   rename is invisible. A crash between the two renames leaves
//!   `<name>.redirty` and no `<name>`; the next open renames it back before
//!   it would create anything.
//! - A leftover marker (its removal lost to a power loss) costs one
//!   unnecessary re-dirty, nothing else. A missing marker can only mean the
//!   names were confirmed, or the directory was not created by sluice.
//! - A data directory that existed before sluice first opened it (an
//!   operator's `mkdir`) is the operator's: its parents are synced on every
//!   open, but never renamed (sluice may lack the right to), so a failed sync
//!   of an operator's not-yet-durable directory is not redone.
//!
//! Cost per open: one marker lookup plus one sync per ancestor; the renames
//! happen only on the open after a failed one.

use std::path::{Path, PathBuf};

use sluice_storage::{DurableStorage, ErrorKind, OpenMode, StorageError};

use crate::dirchain::{self, NameState, not_utf8, parent_of};
use crate::dirsync::REDIRTY_SUFFIX;
use crate::error::Result;
use crate::layout::UNCONFIRMED_MARKER;

fn with_suffix(dir: &Path) -> PathBuf {
    let mut s = dir.as_os_str().to_os_string();
    s.push(REDIRTY_SUFFIX);
    PathBuf::from(s)
}

/// Creates `data_dir` if needed and makes its name, and the names above it,
/// durable, redoing the names an earlier open created but did not confirm.
pub(crate) fn open(storage: &dyn DurableStorage, data_dir: &Path) -> Result<()> {
    repair_interrupted_redo(storage, data_dir)?;
    let marker = data_dir.join(UNCONFIRMED_MARKER);
    let (levels, redo) = if storage.exists(data_dir)? {
        match storage.read_file(&marker) {
            Ok(bytes) => {
                let levels: u32 = String::from_utf8_lossy(&bytes).trim().parse().unwrap_or(1);
                tracing::info!(dir = %data_dir.display(), levels, "an earlier open did not confirm the data directory's name; redoing it");
                (levels, true)
            }
            Err(e) if e.kind == ErrorKind::NotFound => (0, false),
            Err(e) => return Err(e.into()),
        }
    } else {
        let mut levels = 0u32;
        let mut dir = data_dir;
        while !storage.exists(dir)? {
            // A later open may have to rename this level, which a
            // `DirTracker` can only do for a UTF-8 name: refuse it before
            // anything is created.
            if dir.file_name().is_some_and(|n| n.to_str().is_none()) {
                return Err(not_utf8(dir));
            }
            levels += 1;
            match parent_of(dir) {
                Some(p) => dir = p,
                None => break,
            }
        }
        storage.create_dir_all(data_dir)?;
        let file = storage.open(&marker, OpenMode::CreateNew)?;
        file.write_at(0, levels.to_string().as_bytes())?;
        (levels, false)
    };

    // Level 0 is the data directory's name in its parent. The levels this or
    // an earlier open created are sluice's; the rest are the operator's,
    // synced on every open but never renamed.
    let created = if redo {
        NameState::InDoubt
    } else {
        NameState::Dirty
    };
    // A path has no more levels than components: a damaged marker's count
    // never sizes more than that.
    let depth = data_dir.components().count();
    let owned = usize::try_from(levels).map_or(depth, |l| l.min(depth));
    dirchain::make_durable(storage, data_dir, None, &vec![created; owned])?;

    if levels > 0 {
        match storage.remove_file(&marker) {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            // Harmless: the next open redoes the names once more.
            Err(e) => {
                tracing::warn!(path = %marker.display(), error = %e, "could not remove the data directory marker")
            }
        }
    }
    Ok(())
}

/// A crash between the two renames of a re-dirty leaves `<name>.redirty` and
/// no `<name>` (the data directory or an ancestor): rename it back.
fn repair_interrupted_redo(storage: &dyn DurableStorage, data_dir: &Path) -> Result<()> {
    let mut dir = data_dir;
    loop {
        if storage.exists(dir)? {
            return Ok(());
        }
        let aside = with_suffix(dir);
        if storage.exists(&aside)? {
            storage.rename(&aside, dir)?;
            tracing::info!(dir = %dir.display(), "repaired an interrupted re-dirty rename of the data directory");
            return Ok(());
        }
        match parent_of(dir) {
            Some(p) if p != Path::new(".") && p != Path::new("/") => dir = p,
            _ => return Ok(()),
        }
    }
}

/// The first file (not directory) found under `dir`, walking depth first in
/// name order; `None` if there is none or `dir` does not exist. Used only when
/// the metadata is missing, so its cost is paid on a fresh data directory,
/// where `dir` does not exist.
pub(crate) fn first_file_under(
    storage: &dyn DurableStorage,
    dir: &Path,
) -> Result<Option<PathBuf>, StorageError> {
    let names = match storage.list_dir(dir) {
        Ok(n) => n,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    for name in names {
        let child = dir.join(&name);
        match storage.list_dir(&child) {
            Ok(_) => {
                if let Some(found) = first_file_under(storage, &child)? {
                    return Ok(Some(found));
                }
            }
            Err(e) if e.kind == ErrorKind::NotADirectory => return Ok(Some(child)),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::METADATA_FILE;
    use sluice_storage::{Crash, Fault, FaultMode, OpKind, OpMatcher, SimStorage};

    fn durable(sim: &SimStorage, path: &str) -> bool {
        sim.durable_view().contains_key(path)
    }

    #[test]
    fn a_new_data_dir_is_durable_and_leaves_no_marker() {
        let sim = SimStorage::with_seed(1);
        open(&sim, Path::new("/a/data")).unwrap();
        assert!(
            !sim.exists(&Path::new("/a/data").join(UNCONFIRMED_MARKER))
                .unwrap()
        );
        assert!(durable(&sim, "/a/data"));
    }

    #[test]
    fn every_level_created_is_redone_after_a_failed_sync_of_any_of_them() {
        for failing in ["/a", "/"] {
            // Given: the first open creates /a/data; the sync of `failing` fails.
            let sim = SimStorage::with_seed(1);
            sim.fail_when(
                OpMatcher::kind(OpKind::SyncDir).path_ends_with(failing),
                Fault::io(FaultMode::Before),
                0,
                1,
            );
            assert!(open(&sim, Path::new("/a/data")).is_err());
            assert!(
                sim.exists(&Path::new("/a/data").join(UNCONFIRMED_MARKER))
                    .unwrap()
            );
            // When: a later open succeeds (after a process crash), then power is cut.
            sim.crash(Crash::Process);
            open(&sim, Path::new("/a/data")).unwrap();
            assert!(
                !sim.exists(&Path::new("/a/data").join(UNCONFIRMED_MARKER))
                    .unwrap()
            );
            sim.crash(Crash::PowerLoss);
            // Then: both names survived.
            assert!(sim.exists(Path::new("/a/data")).unwrap(), "{failing}");
        }
    }

    #[test]
    fn an_interrupted_redo_is_renamed_back_before_anything_is_created() {
        // Given: a crash between the two renames of a redo left `/data.redirty`.
        let sim = SimStorage::with_seed(1);
        open(&sim, Path::new("/data")).unwrap();
        let file = sim
            .open(&Path::new("/data").join(METADATA_FILE), OpenMode::CreateNew)
            .unwrap();
        file.write_at(0, b"x").unwrap();
        drop(file);
        let aside = format!("/data{REDIRTY_SUFFIX}");
        sim.rename(Path::new("/data"), Path::new(&aside)).unwrap();
        // When: the engine opens the data directory.
        open(&sim, Path::new("/data")).unwrap();
        // Then: it is the old directory, with its contents, and no leftover.
        assert_eq!(
            sim.read_file(&Path::new("/data").join(METADATA_FILE))
                .unwrap(),
            b"x"
        );
        assert!(!sim.exists(Path::new(&aside)).unwrap());
    }

    #[test]
    fn an_existing_data_dir_is_never_renamed() {
        // An operator's directory: synced parents, no marker, no rename.
        let sim = SimStorage::with_seed(1);
        sim.create_dir_all(Path::new("/srv/data")).unwrap();
        let before = sim.op_count();
        open(&sim, Path::new("/srv/data")).unwrap();
        let renames = sim
            .trace()
            .iter()
            .skip(before as usize)
            .filter(|e| e.kind == OpKind::Rename)
            .count();
        assert_eq!(renames, 0);
        assert!(durable(&sim, "/srv/data"));
    }
}
