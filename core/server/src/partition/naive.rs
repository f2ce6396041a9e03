//! The naive purge, Apache Iggy's order, kept ONLY to prove that the tests and
//! the crash-point explorer catch the bug sluice exists to remove. Built only
//! with the `naive-purge` feature, which the shipped binary never enables.
//!
//! Its order: delete every segment and offset file, sync the directories and
//! merely warn when a sync fails, then record the new generation (the caller
//! commits it); recovery accepts records of every generation (no filtering).

use sluice_storage::ErrorKind;

use super::Partition;

impl Partition {
    /// Deletes every file in the three directories and syncs them, warning on failure.
    pub(crate) fn naive_cleanup(&mut self) {
        for dir in [
            &self.paths.segments,
            &self.paths.consumers,
            &self.paths.groups,
        ] {
            let names = match self.storage.list_dir(dir) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "naive purge: list failed");
                    continue;
                }
            };
            for name in names {
                match self.storage.remove_file(&dir.join(&name)) {
                    Ok(()) => {}
                    Err(e) if e.kind == ErrorKind::NotFound => {}
                    Err(e) => tracing::warn!(error = %e, "naive purge: unlink failed"),
                }
            }
        }
        for dir in [
            &self.paths.segments,
            &self.paths.consumers,
            &self.paths.groups,
        ] {
            if let Err(e) = self.storage.sync_dir(dir) {
                // The bug: a warning, and the purge goes on to record its generation.
                tracing::warn!(dir = %dir.display(), error = %e, "naive purge: directory sync failed");
            }
        }
    }
}
