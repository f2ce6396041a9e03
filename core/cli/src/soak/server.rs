//! The server under test: starting the real binary, killing it under load
//! at the seeded moment, and stopping it gracefully.
//!
//! Invariants:
//! - The child is always reaped (`wait`) after a kill, before the power is
//!   cut or the next server starts, so two servers never share the data
//!   directory.
//! - The kill tick is recorded after the child is dead: every request
//!   answered before it is known to the oracle, every later one failed.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::client::{Ctx, REQUEST_TIMEOUT};
use super::{CyclePlan, Target};
use crate::launch;

pub(super) const START_TIMEOUT: Duration = Duration::from_secs(60);
pub(super) struct Server {
    pub(super) child: Child,
    pub(super) base: String,
}

pub(super) fn spawn_server(work: &Path, target: &Target, cycle: u64) -> Result<Server, String> {
    let log_path = work.join("server.log");
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("{}: {e}", log_path.display()))?;
    let _ = writeln!(
        log,
        "===== sluice soak: server start for cycle {cycle} ====="
    );
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut command = launch::server_command(exe, &target.data);
    if let Some(fault) = target.fault {
        command.env(fault.env(), "1");
    }
    command
        .arg("--with-default-root-credentials")
        .env("SLUICE_RECONCILER_PERIOD_MS", "50")
        // A verification may try a password a change in doubt did not set:
        // the failed-login throttle would only slow it down.
        .env("SLUICE_AUTH_FAILED_LOGIN_DELAY_MS", "1")
        .env("RUST_LOG", "info")
        .stderr(Stdio::from(log));
    match launch::start(command, START_TIMEOUT) {
        Ok((child, base)) => Ok(Server { child, base }),
        Err(e @ launch::LaunchError::Spawn(_)) => Err(e.to_string()),
        Err(e) => Err(format!("{e} (log: {})", log_path.display())),
    }
}

/// The killer (a blocking thread): switches the ENOSPC window on and off at
/// its operation counts, then kills the server (after the plan's jitter) and
/// reaps it, or, in a continuation cycle, only stops the clients and hands
/// the live server back. Returns whether the kill came while a purge was in
/// flight, and the server if it still runs.
pub(super) fn kill_under_load(
    ctx: &Ctx,
    mut child: Child,
    plan: CyclePlan,
) -> (bool, Option<Child>) {
    let began = Instant::now();
    let mut in_purge = false;
    let mut window = plan.enospc;
    let mut full = false;
    let switch = |on: bool| {
        if let Some(pc) = &ctx.powercut {
            if on {
                // The window opens before the switch and closes after it,
                // so every refusal it causes falls inside it.
                ctx.enospc_on.store(ctx.tick(), Ordering::SeqCst);
                pc.set_enospc(true);
                ctx.oracle().counts.enospc_windows += 1;
            } else {
                pc.set_enospc(false);
                ctx.enospc_off.store(ctx.tick(), Ordering::SeqCst);
            }
        }
    };
    loop {
        let started = ctx.started_ops.load(Ordering::SeqCst);
        if let Some((on_at, off_at)) = window {
            if !full && started >= on_at {
                switch(true);
                full = true;
            }
            if full && started >= off_at {
                switch(false);
                ctx.oracle().counts.enospc_closed_live += 1;
                full = false;
                window = None;
            }
        }
        if started >= plan.kill_after {
            break;
        }
        if plan.during_purge && !plan.continuation && ctx.purge_in_flight.load(Ordering::SeqCst) {
            in_purge = true;
            break;
        }
        if began.elapsed() > REQUEST_TIMEOUT {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    if plan.continuation {
        if full {
            switch(false);
            ctx.oracle().counts.enospc_closed_live += 1;
        }
        ctx.killed.store(true, Ordering::SeqCst);
        return (false, Some(child));
    }
    std::thread::sleep(plan.jitter);
    in_purge = in_purge && ctx.purge_in_flight.load(Ordering::SeqCst);
    let _ = child.kill();
    let _ = child.wait();
    if full {
        // Space returns with the power; nothing is served meanwhile.
        switch(false);
    }
    let kill_tick = ctx.tick();
    ctx.oracle().kill_tick = kill_tick;
    ctx.killed.store(true, Ordering::SeqCst);
    (in_purge, None)
}

pub(super) async fn stop_gracefully(ctx: &Ctx, child: &mut Child) {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    if !sent.is_ok_and(|s| s.success()) {
        ctx.violation("could not send SIGTERM to the server".into());
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if !status.success() {
                    ctx.violation(format!("the server exited with {status} after SIGTERM"));
                }
                return;
            }
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => {
                ctx.violation("the server did not exit within 30 s of SIGTERM".into());
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
        }
    }
}
