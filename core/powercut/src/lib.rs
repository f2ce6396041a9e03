//! `sluice-powercut`: a FUSE file system that loses, on command, every change
//! not yet made durable by the rules `SimStorage` follows (ADR 0002), so the
//! real `sluice` binary can be power-cut (issue 14; ADR 0012).
//!
//! It mounts over an empty directory and keeps the durable state in a backing
//! directory; the unsynced rest lives only in this process's memory.
//!
//! Invariants (each kept by one module):
//! - `model`: a change is durable only after the fsync that the simulator
//!   would need for it (file bytes: the file's; a name: its directory's), and
//!   the backing directory is always exactly the durable view.
//! - `fuse`: the kernel caches nothing that a cut could take back.
//! - `control`: a command runs whole or changes nothing.

mod control;
mod fuse;
mod model;
mod ranges;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub use control::{Command, parse as parse_command};
pub use model::{CONTROL_NAME, Entry, Stats, read_tree};

/// In-process control of a mounted file system (the same commands as the
/// control file).
#[derive(Debug, Clone)]
pub struct Handle {
    model: Arc<Mutex<model::Model>>,
}

impl Handle {
    fn lock(&self) -> MutexGuard<'_, model::Model> {
        self.model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Power loss (`None`) or partial writeback then power loss (`Some(seed)`).
    pub fn cut(&self, seed: Option<u64>) {
        self.lock().cut(seed);
    }

    /// The `nth` (1-based) next fsync of `path` (relative to the mount's root)
    /// fails with EIO and drops its dirty state.
    pub fn fail_sync(&self, path: &str, nth: u32) {
        self.lock().fail_sync(path, nth);
    }

    pub fn set_enospc(&self, on: bool) {
        self.lock().set_enospc(on);
    }

    /// Whether the backing directory is exactly the durable view.
    pub fn check_backing(&self) -> Result<(), String> {
        self.lock().check_backing()
    }

    /// Every path ("/a/b") of the durable view with what it holds.
    pub fn durable_view(&self) -> std::collections::BTreeMap<String, Entry> {
        self.lock().view(true)
    }

    /// Every directory path ("/a/b") the cached view holds.
    pub fn cached_dirs(&self) -> Vec<String> {
        self.lock().cached_dirs()
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    /// Unsynced changes held only in memory right now.
    pub fn pending_changes(&self) -> u64 {
        self.lock().pending_changes()
    }
}

/// A mounted power-cut file system; dropping it unmounts.
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    handle: Handle,
    mountpoint: PathBuf,
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("mountpoint", &self.mountpoint)
            .finish_non_exhaustive()
    }
}

impl Mount {
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts now, reporting a failure (drop unmounts too, silently).
    pub fn unmount(mut self) -> io::Result<()> {
        match self.session.take() {
            Some(s) => s.umount_and_join(),
            None => Ok(()),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

/// Why mounting failed, in words a person can act on.
pub fn fuse_unavailable_reason() -> Option<String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => None,
        Err(e) => Some(format!(
            "/dev/fuse cannot be opened ({e}): the power-cut file system needs the fuse kernel module and, without fusermount, root"
        )),
    }
}

/// Mounts the file system over `mountpoint` (an existing, empty directory),
/// starting from what `backing` (an existing directory) holds.
pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<Mount> {
    if let Some(reason) = fuse_unavailable_reason() {
        return Err(io::Error::other(reason));
    }
    if std::fs::read_dir(mountpoint)?.next().is_some() {
        return Err(io::Error::other(format!(
            "{}: the mount point must be an empty directory",
            mountpoint.display()
        )));
    }
    let model = Arc::new(Mutex::new(model::Model::load(backing)?));
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("sluice-powercut".into()),
        fuser::MountOption::Subtype("powercut".into()),
    ];
    let session = fuser::spawn_mount(fuse::PowercutFs::new(model.clone()), mountpoint, &config)?;
    Ok(Mount {
        session: Some(session),
        handle: Handle { model },
        mountpoint: mountpoint.to_path_buf(),
    })
}
