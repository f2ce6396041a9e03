//! Scenario 2, recovery: start-up time and peak memory on the purge data
//! set, against a bare listing and read of the same files.
//!
//! Invariants:
//! - Both sides run in a fresh child process (`sluice bench --internal-*`),
//!   one thread each (the engine recovers partitions one after another), so
//!   each VmHWM is that side's own peak, child start-up included on both.
//! - Both sides run twice, alternating, after the data set was flushed; the
//!   faster run of each counts (warm page cache on both sides).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sluice_server::Engine;
use sluice_server::clock::SystemClock;
use sluice_server::config::ReconcilerSettings;
use sluice_storage::DiskStorage;

use super::{BenchError, Ctx, Figure, Result, Target, engine_config, reference, vm_hwm_kib};

/// What a child prints (one JSON line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildResult {
    pub secs: f64,
    pub vm_hwm_kib: u64,
    pub files: u64,
    pub bytes: u64,
}

/// `--internal-recover DIR`: `Engine::open` on DIR.
/// The engine is configured as the server configures it (`engine_config`).
pub fn child_recover(dir: &Path, reconciler: &ReconcilerSettings) -> Result<ChildResult> {
    super::raise_open_files_limit(1 << 20);
    let t0 = Instant::now();
    let (engine, report) = Engine::open(
        Arc::new(DiskStorage::new()),
        Arc::new(SystemClock),
        engine_config(dir, 6, reconciler),
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let hwm = vm_hwm_kib();
    drop(engine);
    Ok(ChildResult {
        secs,
        vm_hwm_kib: hwm,
        files: report.consumer_offsets + report.group_offsets,
        bytes: report.messages,
    })
}

/// `--internal-scan DIR`: list and read every file under DIR.
pub fn child_scan(dir: &Path) -> Result<ChildResult> {
    let t0 = Instant::now();
    let (files, bytes) = reference::bare_scan(dir)?;
    Ok(ChildResult {
        secs: t0.elapsed().as_secs_f64(),
        vm_hwm_kib: vm_hwm_kib(),
        files,
        bytes,
    })
}

fn spawn(ctx: &Ctx, flag: &str, dir: &Path) -> Result<ChildResult> {
    let exe = std::env::current_exe().map_err(|e| BenchError::io("current executable", e))?;
    let out = Command::new(exe)
        .arg("bench")
        .arg("--cleanup-concurrency")
        .arg(ctx.reconciler.concurrency.to_string())
        .arg(flag)
        .arg(dir)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .output()
        .map_err(|e| BenchError::Child(e.to_string()))?;
    if !out.status.success() {
        return Err(BenchError::Child(format!(
            "{flag} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).map_err(|e| BenchError::Child(format!("{flag}: {e}: {line:?}")))
}

pub fn run(ctx: &mut Ctx, data: &Path) -> Result<Vec<Figure>> {
    let mut scans = Vec::new();
    let mut recovers = Vec::new();
    for _ in 0..2 {
        scans.push(spawn(ctx, "--internal-scan", data)?);
        recovers.push(spawn(ctx, "--internal-recover", data)?);
    }
    let best = |v: &[ChildResult]| {
        v.iter()
            .min_by(|a, b| a.secs.total_cmp(&b.secs))
            .cloned()
            .ok_or_else(|| BenchError::Child("no run".into()))
    };
    let (scan, rec) = (best(&scans)?, best(&recovers)?);
    let p = ctx.sizes.purge_partitions + 1;
    Ok(vec![
        Figure::new(
            "recovery.startup_s",
            format!("Engine::open, {p} partitions, {} offsets", rec.files),
            rec.secs,
            "s",
            scan.secs,
            format!("list + read {} files, one thread", scan.files),
        )
        .target(Target::AtMost(1.5))
        .detail(format!(
            "runs: recovery {:?} s, scan {:?} s (best of each counts)",
            recovers
                .iter()
                .map(|r| (r.secs * 1e3).round() / 1e3)
                .collect::<Vec<_>>(),
            scans
                .iter()
                .map(|r| (r.secs * 1e3).round() / 1e3)
                .collect::<Vec<_>>()
        )),
        Figure::new(
            "recovery.peak_memory_mib",
            "peak RSS (VmHWM) of the recovering process",
            rec.vm_hwm_kib as f64 / 1024.0,
            "MiB",
            scan.vm_hwm_kib as f64 / 1024.0,
            "peak RSS of the scanning process",
        ),
    ])
}
