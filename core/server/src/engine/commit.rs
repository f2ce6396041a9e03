//! The metadata commit protocol: every change to streams, topics, partitions,
//! groups and purge generations is one durable metadata write.
//!
//! Invariants:
//! - Memory changes only after `MetadataStore::save` returned `Ok`: a change
//!   is applied to a copy, saved, and only then swapped in.
//! - A failed save may still have renamed the new file into place (only the
//!   directory sync failed). The previous metadata is then written back at a
//!   higher version before the error is returned; if even that fails, the
//!   engine records the metadata as in doubt and serves nothing until a save
//!   succeeds (`ensure_metadata_durable`).
//! - Every commit leaves the engine's invariants true (checked in debug
//!   builds right after the swap, `Engine::assert_invariants`) — except that
//!   a commit which adds or removes partitions leaves `partitions` to the
//!   caller, which checks once it has installed or dropped them.

use super::Engine;
use crate::error::{EngineError, Result};
use crate::metadata::Metadata;

impl Engine {
    /// Applies `change` to a copy of the metadata and commits it durably; the
    /// in-memory metadata changes only if the commit succeeded.
    pub(super) fn commit<T>(
        &mut self,
        change: impl FnOnce(&mut Metadata) -> Result<T>,
    ) -> Result<T> {
        self.ensure_metadata_durable()?;
        let mut next = self.meta.clone();
        let out = change(&mut next)?;
        next.version = self.meta.version + 1;
        if let Err(e) = next.check_ids() {
            panic!("invariant: a metadata change broke the id bookkeeping: {e}");
        }
        match self.store.save(&next) {
            Ok(()) => {
                self.meta = next;
                Ok(out)
            }
            Err(e) => {
                // The failed save may still have renamed the new file into
                // place (only its directory sync failed): a restart could read
                // a change this process is about to report as failed, and
                // writes acknowledged meanwhile under the old metadata would be
                // lost to it. Put the previous metadata back on disk first.
                tracing::warn!(error = %e, "metadata save failed; restoring the previous metadata");
                let mut back = self.meta.clone();
                back.version = next.version + 1;
                match self.store.save(&back) {
                    Ok(()) => self.meta = back,
                    Err(e2) => {
                        tracing::error!(error = %e2, "could not restore the previous metadata; refusing service until a save succeeds");
                        self.metadata_in_doubt = Some(format!("{e}; then {e2}"));
                    }
                }
                Err(e)
            }
        }
    }

    /// If the metadata on disk is in doubt, tries to make it match memory
    /// again; refuses with a typed error while it cannot. Every operation
    /// that serves or changes anything calls it first.
    pub(super) fn ensure_metadata_durable(&mut self) -> Result<()> {
        let Some(reason) = self.metadata_in_doubt.clone() else {
            return Ok(());
        };
        // The same record again (same version: nothing changed), through a
        // fresh temporary file, rename and directory sync.
        match self.store.save(&self.meta) {
            Ok(()) => {
                tracing::info!(reason, "metadata made durable again");
                self.metadata_in_doubt = None;
                Ok(())
            }
            Err(e) => Err(EngineError::Unavailable(format!(
                "metadata could not be made durable ({reason}; retry: {e})"
            ))),
        }
    }
}
