//! Starting `sluice server` as a child process and waiting until it serves:
//! the one launcher of the binary, used by `sluice soak` (which starts its
//! own executable) and by the tests (`sluice_testkit::process`).
//!
//! Invariants:
//! - The child listens on ephemeral loopback ports and takes its root user
//!   and configuration from the caller alone: `SLUICE_CONFIG` and the root
//!   credential variables are removed from its environment.
//! - Its stdout is drained for its whole life, so it never blocks on a full
//!   pipe.
//! - When [`start`] fails, the child has been reaped: a failed start leaves
//!   no process behind.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

/// What `sluice server` prints on stdout once it serves, before its URL.
pub const LISTENING: &str = "sluice listening on ";

/// `exe server` over `data_dir` on ephemeral loopback ports (HTTP and TCP),
/// stdout piped, without the environment's root user or configuration file.
/// The caller adds credentials, environment and stderr.
pub fn server_command(exe: impl AsRef<OsStr>, data_dir: &Path) -> Command {
    let mut command = Command::new(exe);
    command
        .args([
            "server",
            "--http-addr",
            "127.0.0.1:0",
            "--tcp-addr",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(data_dir)
        .env_remove("SLUICE_ROOT_USERNAME")
        .env_remove("SLUICE_ROOT_PASSWORD")
        .env_remove("IGGY_ROOT_USERNAME")
        .env_remove("IGGY_ROOT_PASSWORD")
        .env_remove("SLUICE_CONFIG")
        .stdout(Stdio::piped());
    command
}

/// Why a server did not come up.
#[derive(Debug)]
pub enum LaunchError {
    /// The process could not be started.
    Spawn(std::io::Error),
    /// It exited (with this status) before it listened.
    Exited(String),
    /// It did not listen within this time (it was killed).
    Timeout(Duration),
}

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchError::Spawn(e) => write!(f, "cannot start the server: {e}"),
            LaunchError::Exited(status) => {
                write!(f, "the server exited ({status}) before listening")
            }
            LaunchError::Timeout(t) => write!(f, "the server did not start within {t:?}"),
        }
    }
}

/// Spawns `command` (from [`server_command`]) and waits up to `timeout` for
/// its listening line; returns the child and its base URL (`http://ip:port`).
pub fn start(mut command: Command, timeout: Duration) -> Result<(Child, String), LaunchError> {
    let mut child = command.spawn().map_err(LaunchError::Spawn)?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(LaunchError::Spawn(std::io::Error::other(
            "the server's stdout is not piped",
        )));
    };
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(url) = line.strip_prefix(LISTENING) {
                let _ = tx.send(url.trim().to_string());
                sent = true;
            }
            // Keep draining so the server never blocks on a full pipe.
        }
    });
    match rx.recv_timeout(timeout) {
        Ok(base) => Ok((child, base)),
        Err(RecvTimeoutError::Disconnected) => {
            let status = child
                .wait()
                .map_or_else(|e| e.to_string(), |s| s.to_string());
            Err(LaunchError::Exited(status))
        }
        Err(RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(LaunchError::Timeout(timeout))
        }
    }
}
