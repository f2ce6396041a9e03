//! The one launcher of the `sluice` binary in tests: a command with a clean
//! environment, `sluice server` on ephemeral loopback ports, readiness from
//! its "listening" line, SIGKILL, SIGTERM, and cleanup on drop.
//!
//! Invariants:
//! - The environment never leaks into the process under test: root
//!   credentials, `SLUICE_CONFIG`, `SLUICE_URL` and the test-fault switches
//!   are removed unless a test sets them on purpose.
//! - A [`Server`] is killed and reaped when dropped, so a failed assertion
//!   never leaves a server behind, and two servers never share a directory.
//! - Its stdout is drained for its whole life, so it never blocks on a full
//!   pipe.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use crate::http::Api;

/// What `sluice server` prints on stdout once it serves, before its URL.
const LISTENING: &str = "sluice listening on ";
/// How long a server may take to start (recovery included).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// `exe` with a clean environment (see the module's invariants) and
/// `RUST_LOG=warn`.
pub fn command(exe: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(exe);
    for var in [
        "SLUICE_ROOT_USERNAME",
        "SLUICE_ROOT_PASSWORD",
        "IGGY_ROOT_USERNAME",
        "IGGY_ROOT_PASSWORD",
        "SLUICE_CONFIG",
        "SLUICE_URL",
        sluice_server::server::NAIVE_PURGE_ENV,
        sluice_storage::NOOP_DIR_SYNC_ENV,
    ] {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// A `sluice server` about to be started.
pub struct Launch {
    command: Command,
}

impl Launch {
    /// `exe server` over `data_dir`, HTTP and TCP on ephemeral loopback
    /// ports, stderr discarded, no root credentials yet.
    pub fn server(exe: impl AsRef<OsStr>, data_dir: &Path) -> Launch {
        let mut command = command(exe);
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
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
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
    pub fn start(mut self) -> Server {
        let mut child = self.command.spawn().expect("sluice starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !sent && let Some(url) = line.strip_prefix(LISTENING) {
                    let _ = tx.send(url.trim().to_string());
                    sent = true;
                }
            }
        });
        let base = match rx.recv_timeout(START_TIMEOUT) {
            Ok(base) => base,
            Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait();
                panic!("sluice exited ({status:?}) before it listened");
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sluice did not listen within {START_TIMEOUT:?}");
            }
        };
        Server { child, base }
    }
}

/// A running `sluice server`; killed and reaped when dropped.
pub struct Server {
    child: Child,
    base: String,
}

impl Server {
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
