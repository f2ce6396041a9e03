//! Making a directory's name durable, and the names of the directories above
//! it: the parent of each level is synced, bottom up.
//!
//! A new directory's name is durable only after a sync of its parent
//! (ADR 0002 §2.2), and a parent created in the same `create_dir_all` needs
//! its own parent synced, and so on up to a directory known durable. Under
//! Linux semantics a failed directory sync drops the dirty entries, and a
//! later sync that succeeds persists nothing (ADR 0002 §2.4). So a name that
//! an earlier, failed attempt created must be made dirty again before its
//! parent is synced; `DirTracker` does that.
//!
//! The three places that make a directory chain durable go through
//! [`make_durable`]: the data directory (`datadir.rs`), a new partition's
//! ancestors (`engine/dirs.rs`), and directories recovery recreated
//! (`Partition::recover`). Each says what it knows of each level's name.
//!
//! Invariants:
//! - The levels are handled bottom up, one parent sync each, and `Ok` means
//!   every sync asked for succeeded: a caller commits nothing that names the
//!   directory before `Ok`. On `Err` the levels above the failed one are
//!   untouched; the caller's next attempt must call them `InDoubt`.
//! - A name is renamed (re-dirtied) only when its caller calls it
//!   [`NameState::InDoubt`]: only sluice's own names, with nothing open below
//!   them, may be renamed away and back. Every other level is a plain sync
//!   of its parent, or nothing for a name known durable.
//! - The walk stops after syncing `top`, or at the file system root (or `.`
//!   for a relative path) when there is no `top`.

use std::path::Path;

use sluice_storage::DurableStorage;

use crate::dirsync::{DirTracker, NameChange};
use crate::error::{EngineError, Result};

/// What is known of one directory's name in its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameState {
    /// Durable already (a committed partition lies below it): its parent is
    /// not synced.
    Durable,
    /// Perhaps not durable, but then still dirty: created by this call, or
    /// not sluice's to rename. A plain sync of the parent persists it.
    Dirty,
    /// Created by an earlier attempt whose sync of the parent may have failed
    /// and dropped it: renamed away and back before the parent is synced.
    InDoubt,
}

/// The directory to sync for `dir`'s name (`.` for a bare relative name), or
/// `None` at the root.
pub(crate) fn parent_of(dir: &Path) -> Option<&Path> {
    match dir.parent() {
        Some(p) if p.as_os_str().is_empty() => Some(Path::new(".")),
        other => other,
    }
}

/// Makes `dir`'s name durable in its parent, then the parent's name in the
/// grandparent, and so on, ending with the sync of `top` (with `None`, of the
/// file system root or `.`). `states[0]` says what is known of `dir`'s own
/// name, `states[1]` of its parent's, and so on; levels past the end of
/// `states` are [`NameState::Dirty`].
pub(crate) fn make_durable(
    storage: &dyn DurableStorage,
    dir: &Path,
    top: Option<&Path>,
    states: &[NameState],
) -> Result<()> {
    let mut dir = dir;
    let mut level = 0;
    while let Some(parent) = parent_of(dir) {
        match states.get(level).copied().unwrap_or(NameState::Dirty) {
            NameState::Durable => {}
            NameState::Dirty => storage.sync_dir(parent)?,
            NameState::InDoubt => {
                let mut tracker = DirTracker::new(parent);
                // A level with no name of its own (`..`) cannot be renamed;
                // syncing its parent is all there is to do.
                if let Some(name) = dir.file_name() {
                    let name = name.to_str().ok_or_else(|| not_utf8(dir))?;
                    tracker.note(name, NameChange::Created);
                    tracker.force_redirty();
                }
                tracker.sync(storage)?;
            }
        }
        if Some(parent) == top || parent == Path::new(".") || parent == Path::new("/") {
            break;
        }
        dir = parent;
        level += 1;
    }
    Ok(())
}

/// A name sluice may have to re-dirty must be one a `DirTracker` can hold.
pub(crate) fn not_utf8(dir: &Path) -> EngineError {
    EngineError::Invalid {
        what: "directory",
        reason: format!("{} is not valid UTF-8", dir.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_storage::{Crash, Fault, FaultMode, OpKind, OpMatcher, SimStorage};

    /// The calls after `from`, rendered as `kind path`.
    fn calls_since(sim: &SimStorage, from: u64) -> Vec<String> {
        sim.trace()
            .iter()
            .skip(from as usize)
            .map(|e| format!("{} {}", e.kind.as_str(), e.path))
            .collect()
    }

    #[test]
    fn each_level_is_skipped_synced_or_redone_as_its_state_says_bottom_up() {
        let sim = SimStorage::with_seed(1);
        sim.create_dir_all(Path::new("/d/a/b/c")).unwrap();
        let before = sim.op_count();
        make_durable(
            &sim,
            Path::new("/d/a/b/c"),
            Some(Path::new("/d")),
            &[NameState::Durable, NameState::InDoubt],
        )
        .unwrap();
        // c: nothing; b: renamed away and back, then /d/a synced; a: past
        // the states, a plain sync of /d, which is `top`: the walk ends.
        assert_eq!(
            calls_since(&sim, before),
            [
                "rename /d/a/b",
                &format!("rename /d/a/b{}", crate::layout::REDIRTY_SUFFIX),
                "sync_dir /d/a",
                "sync_dir /d",
            ]
        );
    }

    #[test]
    fn without_a_top_the_walk_ends_at_the_root() {
        let sim = SimStorage::with_seed(1);
        sim.create_dir_all(Path::new("/x/y")).unwrap();
        let before = sim.op_count();
        make_durable(&sim, Path::new("/x/y"), None, &[]).unwrap();
        assert_eq!(calls_since(&sim, before), ["sync_dir /x", "sync_dir /"]);
        assert_eq!(parent_of(Path::new("y")), Some(Path::new(".")));
    }

    #[test]
    fn a_name_in_doubt_after_a_failed_sync_survives_power_loss_only_when_redone() {
        for state in [NameState::Dirty, NameState::InDoubt] {
            // Given: /x/y created, and the sync of / meant to persist /x failed
            // (Linux semantics: the dirty entry is dropped).
            let sim = SimStorage::with_seed(1);
            sim.create_dir_all(Path::new("/x/y")).unwrap();
            sim.fail_when(
                OpMatcher::kind(OpKind::SyncDir).path_ends_with("/"),
                Fault::io(FaultMode::Before),
                0,
                1,
            );
            assert!(make_durable(&sim, Path::new("/x/y"), None, &[]).is_err());

            // When: the retry succeeds, then power is cut.
            make_durable(&sim, Path::new("/x/y"), None, &[state, state]).unwrap();
            sim.crash(Crash::PowerLoss);

            // Then: only a redo made /x durable; a plain retried sync did not.
            let survived = sim.exists(Path::new("/x/y")).unwrap();
            assert_eq!(survived, state == NameState::InDoubt, "{state:?}");
        }
    }
}
