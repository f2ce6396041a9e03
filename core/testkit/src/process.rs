//! The `sluice` binary (any build of it) in tests: a command with a clean
//! environment, and `sluice server` started through the CLI's own launcher
//! (`sluice_cli::launch`: ephemeral loopback ports, readiness from its
//! "listening" line, bounded), with SIGKILL, SIGTERM and cleanup on drop.
//!
//! Invariants:
//! - The environment never leaks into the process under test: root
//!   credentials, `SLUICE_CONFIG`, `SLUICE_URL` and the test-fault switches
//!   are removed unless a test sets them on purpose.
//! - A [`Server`] is killed and reaped when dropped, so a failed assertion
//!   never leaves a server behind, and two servers never share a directory.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sluice_cli::launch;

use crate::http::Api;

/// How long a server may take to start (recovery included).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Variables no process under test inherits (a test may set them again).
const SCRUBBED: [&str; 9] = [
    "SLUICE_ROOT_USERNAME",
    "SLUICE_ROOT_PASSWORD",
    "IGGY_ROOT_USERNAME",
    "IGGY_ROOT_PASSWORD",
    "SLUICE_CONFIG",
    "SLUICE_URL",
    sluice_server::server::NAIVE_PURGE_ENV,
    sluice_storage::NOOP_DIR_SYNC_ENV,
    sluice_server::users::NAIVE_USERS_SAVE_ENV,
];

/// `exe` with a clean environment (see the module's invariants) and
/// `RUST_LOG=warn`.
pub fn command(exe: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(exe);
    scrub(&mut cmd);
    cmd
}

fn scrub(cmd: &mut Command) {
    for var in SCRUBBED {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "warn");
}

/// A `sluice server` about to be started.
pub struct Launch {
    command: Command,
}

impl Launch {
    /// `exe server` over `data_dir`, HTTP and TCP on ephemeral loopback
    /// ports, stderr discarded, no root credentials yet.
    pub fn server(exe: impl AsRef<OsStr>, data_dir: &Path) -> Launch {
        let mut command = launch::server_command(exe, data_dir);
        scrub(&mut command);
        command.stderr(Stdio::null());
        Launch { command }
    }

    /// With Iggy's `iggy`/`iggy` (`--with-default-root-credentials`).
    pub fn default_root(mut self) -> Launch {
        self.command.arg("--with-default-root-credentials");
        self
    }

    /// With an environment variable set (configuration, credentials, log level).
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Launch {
        self.command.env(key, value);
        self
    }

    /// With the server's stderr (its log) written to `file`.
    pub fn stderr_to(mut self, file: &Path) -> Launch {
        let file = std::fs::File::create(file).expect("server log file");
        self.command.stderr(Stdio::from(file));
        self
    }

    /// Starts it and waits (bounded) until it serves.
    pub fn start(self) -> Server {
        match launch::start(self.command, START_TIMEOUT) {
            Ok((child, base)) => Server { child, base },
            Err(e) => panic!("sluice server: {e}"),
        }
    }
}

/// A running `sluice server`; killed and reaped when dropped.
pub struct Server {
    child: Child,
    base: String,
}

impl Server {
    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its HTTP base URL, `http://ip:port`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// An HTTP client of it, not logged in.
    pub fn api(&self) -> Api {
        Api::at(self.base.clone())
    }

    /// SIGKILL, then reaps it: a crash at an arbitrary moment.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// SIGTERM, then waits up to `within` for it to exit and returns how it
    /// exited; panics (after a SIGKILL) if it did not.
    pub fn terminate(mut self, within: Duration) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -TERM {pid} failed");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "sluice did not exit within {within:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
