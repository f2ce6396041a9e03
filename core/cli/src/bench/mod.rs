//! `sluice bench`: every figure measured against its physical limit on the
//! same disk, in the same run (issue 6; docs/performance.md).
//!
//! Invariants:
//! - Everything runs on `DiskStorage` (wrapped by `CountingStorage`, which
//!   only counts) in a fresh temporary directory, never on tmpfs unless the
//!   caller points `--data-dir` there; the directory is removed after the
//!   report is printed.
//! - Each figure is printed with a reference measured in this run, and the
//!   ratio `value / reference`; a target, where the issue sets one, is a
//!   bound on that ratio. Nothing here asserts a time: benchmarks report.
//! - Large data sets are built with syncs skipped and then flushed with
//!   `sync -f` before anything is measured (see `counting.rs`); measured
//!   phases always issue every sync the engine asks for.
//! - Recovery and its reference run in child processes (`--internal-*`), so
//!   each has its own peak memory (VmHWM) and its own page-cache start.
//! - Every engine is configured as `sluice server` configures it
//!   (`engine_config`): the reconciler's period and cleanup concurrency come
//!   from `ServerConfig::default()` (concurrency
//!   `DEFAULT_RECONCILER_CONCURRENCY`), only `--cleanup-concurrency`
//!   overrides the latter, and the value used is printed.

mod counting;
mod descriptors;
mod focus;
mod http;
mod log_recovery;
mod messages;
mod offsets;
mod purge;
mod purge_live;
mod reconciler;
mod recovery;
mod reference;
mod tier;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use serde::Serialize;
use sluice_server::config::{ReconcilerSettings, ServerConfig};
use sluice_server::{EngineConfig, EngineError};
use sluice_storage::{DiskStorage, DurableStorage, StorageError};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Size everything to finish in about a minute.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object with every figure instead of the table.
    #[arg(long)]
    json: bool,
    /// Also measure the remote tier (issue 31): tiering's upload throughput against raw puts
    /// to the same local object store, and polls served from the store (block cache cold and
    /// warm) against the same polls served locally. Not part of the default run.
    #[arg(long)]
    tier: bool,
    /// Where to create the temporary benchmark directory [default: the system
    /// temporary directory, or ./target if that is tmpfs].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Partitions a reconciler pass cleans at the same time [default: the
    /// server's, `reconciler.concurrency` = 8].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    cleanup_concurrency: Option<u16>,
    /// Tiny sizes for the smoke test (figures are meaningless).
    #[arg(long, hide = true)]
    tiny: bool,
    /// Run only the descriptors scenario (issue 16 item 4), at this size.
    #[arg(long, hide = true)]
    only_descriptors: bool,
    /// Run only these scenarios (comma-separated), to profile one figure:
    /// purge (with recovery), purge-live, reconciler, offsets, messages,
    /// http (runs messages too), descriptors, log-recovery, and
    /// purge-call, poll and tier (not in a full run: the purge call in
    /// process, polls over many passes, the remote tier; `--tier` adds the
    /// last to a full run).
    #[arg(long, hide = true, value_delimiter = ',', value_name = "SCENARIO")]
    only: Vec<String>,
    /// Internal: recover the engine on DIR and print time and peak memory.
    #[arg(long, hide = true, value_name = "DIR")]
    internal_recover: Option<PathBuf>,
    /// Internal: list and read every file under DIR and print time and peak memory.
    #[arg(long, hide = true, value_name = "DIR")]
    internal_scan: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
    #[error("child process: {0}")]
    Child(String),
    #[error("http: {0}")]
    Http(String),
}

impl BenchError {
    pub fn io(what: impl Into<String>, e: impl std::fmt::Display) -> Self {
        BenchError::Io {
            what: what.into(),
            reason: e.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, BenchError>;

/// How big each scenario is.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizes {
    pub purge_partitions: u32,
    /// The topic purged on the real server under load (`purge_live.rs`).
    pub live_purge_partitions: u32,
    /// The no-purge window of that scenario.
    pub live_baseline_ms: u64,
    pub offsets_per_kind: u32,
    pub reconciler_partitions: u32,
    pub buffered_stores: u64,
    pub persisted_stores: u64,
    pub messages: u64,
    pub batch: u64,
    pub message_bytes: usize,
    pub http_batches: u64,
    /// The remote tier scenario (`tier.rs`): messages of `message_bytes` in one partition,
    /// its segment size, and the polls of `tier_poll_count` messages timed per pass.
    pub tier_messages: u64,
    pub tier_segment_bytes: u64,
    pub tier_polls: u64,
    pub tier_poll_count: u64,
}

impl Sizes {
    fn pick(quick: bool, tiny: bool) -> Sizes {
        if tiny {
            Sizes {
                purge_partitions: 3,
                live_purge_partitions: 10,
                live_baseline_ms: 200,
                offsets_per_kind: 5,
                reconciler_partitions: 20,
                buffered_stores: 100,
                persisted_stores: 10,
                messages: 2000,
                batch: 1000,
                message_bytes: 1024,
                http_batches: 2,
                tier_messages: 2000,
                tier_segment_bytes: 256 << 10,
                tier_polls: 20,
                tier_poll_count: 100,
            }
        } else if quick {
            // About a minute on a 2-core VM (docs/performance.md, "Run
            // time"): the purge topic keeps more partitions than one pass
            // cleans (64), so back-to-back passes are measured too.
            Sizes {
                purge_partitions: 100,
                live_purge_partitions: 1000,
                live_baseline_ms: 2000,
                offsets_per_kind: 20,
                reconciler_partitions: 3000,
                buffered_stores: 50_000,
                persisted_stores: 1000,
                messages: 100_000,
                batch: 1000,
                message_bytes: 1024,
                http_batches: 20,
                tier_messages: 100_000,
                tier_segment_bytes: 4 << 20,
                tier_polls: 1000,
                tier_poll_count: 100,
            }
        } else {
            Sizes {
                purge_partitions: 1000,
                live_purge_partitions: 1000,
                live_baseline_ms: 3000,
                offsets_per_kind: 100,
                reconciler_partitions: 100_000,
                buffered_stores: 200_000,
                persisted_stores: 5000,
                messages: 1_000_000,
                batch: 1000,
                message_bytes: 1024,
                http_batches: 100,
                tier_messages: 100_000,
                tier_segment_bytes: 4 << 20,
                tier_polls: 1000,
                tier_poll_count: 100,
            }
        }
    }
}

/// Whether a larger or a smaller ratio is better, and the bound.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    fn met(self, ratio: f64) -> bool {
        match self {
            Target::AtMost(b) => ratio <= b,
            Target::AtLeast(b) => ratio >= b,
        }
    }
    fn show(self) -> String {
        match self {
            Target::AtMost(b) => format!("<= {b}"),
            Target::AtLeast(b) => format!(">= {b}"),
        }
    }
}

/// One printed figure: what was measured, against what, and their ratio.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub key: String,
    pub what: String,
    pub value: f64,
    pub unit: String,
    pub reference: f64,
    pub reference_what: String,
    pub ratio: f64,
    pub target: Option<Target>,
    pub met: Option<bool>,
    pub detail: Option<String>,
}

impl Figure {
    pub fn new(
        key: &str,
        what: impl Into<String>,
        value: f64,
        unit: &str,
        reference: f64,
        reference_what: impl Into<String>,
    ) -> Figure {
        // Finite even for a zero reference (JSON has no infinity).
        let ratio = if value == 0.0 {
            if reference == 0.0 { 1.0 } else { 0.0 }
        } else {
            value / reference.max(f64::MIN_POSITIVE)
        };
        Figure {
            key: key.to_string(),
            what: what.into(),
            value,
            unit: unit.to_string(),
            reference,
            reference_what: reference_what.into(),
            ratio,
            target: None,
            met: None,
            detail: None,
        }
    }

    pub fn target(mut self, t: Target) -> Figure {
        self.met = Some(t.met(self.ratio));
        self.target = Some(t);
        self
    }

    pub fn detail(mut self, d: impl Into<String>) -> Figure {
        self.detail = Some(d.into());
        self
    }
}

/// The keys every complete run prints (the smoke test checks them).
pub const FIGURE_KEYS: &[&str] = &[
    "purge.partition_syncs",
    "purge.topic_wall_s",
    "purge.topic_server_paced_s",
    "purge.topic_vs_raw_unlinks_s",
    "purge.call_latency_s",
    "purge.other_topic_send_p99_ms",
    "purge.other_topic_poll_p99_ms",
    "purge.server_topic_wall_s",
    "recovery.startup_s",
    "recovery.peak_memory_mib",
    "reconciler.idle_pass_small_us",
    "reconciler.idle_pass_large_us",
    "offsets.buffered_per_s",
    "offsets.persisted_per_s",
    "messages.append_buffered_msgs_per_s",
    "messages.append_persisted_msgs_per_s",
    "messages.poll_msgs_per_s",
    "http.send_msgs_per_s",
    "http.send_p50_ms",
    "http.send_p99_ms",
    "http.poll_msgs_per_s",
    "descriptors.open_built",
    "descriptors.open_recovered",
    "descriptors.eviction_buffered_per_s",
    "descriptors.eviction_persisted_per_s",
    "log_recovery.large_vs_small_s",
    "log_recovery.bytes_read",
];

/// The keys the tier section prints (`--tier`, `--only tier`).
pub const TIER_FIGURE_KEYS: &[&str] = &[
    "tier.upload_mib_per_s",
    "tier.poll_cold_us",
    "tier.poll_warm_us",
];

/// What the whole run hands to the printer.
#[derive(Debug, Serialize)]
pub struct Report {
    pub sluice_bench: u32,
    pub quick: bool,
    pub tiny: bool,
    pub directory: String,
    pub machine: Machine,
    /// The reconciler settings every engine here ran with (the server's).
    pub cleanup_concurrency: usize,
    pub reconciler_period_ms: u64,
    pub sizes: Sizes,
    pub figures: Vec<Figure>,
    /// Every sync on the critical path of one partition's purge, classified.
    pub purge_sync_breakdown: Vec<purge::SyncClass>,
    pub notes: Vec<String>,
    /// Wall time of each scenario, data set construction included.
    pub phases_s: Vec<(String, f64)>,
    pub total_s: f64,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub file_system: String,
    pub open_files_limit: u64,
}

/// The reconciler settings of `sluice server` with its defaults, except the
/// cleanup concurrency where `--cleanup-concurrency` sets it.
fn server_reconciler(args: &BenchArgs) -> ReconcilerSettings {
    let mut r = ServerConfig::default().reconciler;
    if let Some(n) = args.cleanup_concurrency {
        r.concurrency = usize::from(n);
    }
    r
}

/// The engine configuration `sluice server` builds for `data`
/// (`sluice_server::server::start`): the reconciler's period and
/// concurrency from the server's settings.
pub fn engine_config(data: &Path, seed: u64, reconciler: &ReconcilerSettings) -> EngineConfig {
    let mut config = EngineConfig::new(data.to_path_buf(), seed);
    config.reconciler.concurrency = reconciler.concurrency;
    config.reconciler.max_per_pass = reconciler.concurrency.max(1);
    config.reconciler.steps_per_hold = sluice_server::server::SERVER_STEPS_PER_HOLD;
    config.max_open_files = ServerConfig::default().files.max_open;
    config
}

pub fn main(args: BenchArgs) -> ExitCode {
    if let Some(dir) = &args.internal_recover {
        return child_main(recovery::child_recover(dir, &server_reconciler(&args)));
    }
    if let Some(dir) = &args.internal_scan {
        return child_main(recovery::child_scan(dir));
    }
    match run(&args) {
        Ok((report, dir)) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("sluice bench: cannot encode the report: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print_table(&report);
            }
            // Removing a large data set takes a while: only after printing.
            drop(dir);
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "bench failed");
            eprintln!("sluice bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn child_main(r: Result<recovery::ChildResult>) -> ExitCode {
    match r.and_then(|c| serde_json::to_string(&c).map_err(|e| BenchError::io("encode", e))) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice bench (child): {e}");
            ExitCode::FAILURE
        }
    }
}

/// Everything a scenario needs.
pub struct Ctx {
    pub root: PathBuf,
    pub sizes: Sizes,
    /// The server's reconciler settings (see `engine_config`).
    pub reconciler: ReconcilerSettings,
    pub disk: Arc<dyn DurableStorage>,
    pub notes: Vec<String>,
}

impl Ctx {
    /// A fresh subdirectory of the benchmark directory.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let p = self.root.join(name);
        std::fs::create_dir_all(&p).map_err(|e| BenchError::io(p.display().to_string(), e))?;
        Ok(p)
    }

    pub fn note(&mut self, n: impl Into<String>) {
        let n = n.into();
        tracing::info!(note = %n, "bench");
        self.notes.push(n);
    }
}

fn run(args: &BenchArgs) -> Result<(Report, tempfile::TempDir)> {
    let started = std::time::Instant::now();
    let mut sizes = Sizes::pick(args.quick, args.tiny);
    let partitions = u64::from(sizes.purge_partitions) + 1;
    let open_files_limit = raise_open_files_limit(
        partitions * (u64::from(sizes.offsets_per_kind) * 2 + FDS_PER_PARTITION) + FDS_SPARE,
    );
    // The engine keeps every offset file open: scale the offsets per
    // partition down (never the partitions) until the data set fits.
    let fit = open_files_limit.saturating_sub(FDS_SPARE + partitions * FDS_PER_PARTITION)
        / (2 * partitions);
    let mut scaled_note = None;
    if fit < u64::from(sizes.offsets_per_kind) {
        let per = u32::try_from(fit.max(1)).unwrap_or(1);
        scaled_note = Some(format!(
            "purge/recovery data set: {per} consumer and {per} group offsets per partition instead of {}: the engine holds one open descriptor per offset file, and the open files limit here is {open_files_limit} (not raisable)",
            sizes.offsets_per_kind
        ));
        sizes.offsets_per_kind = per;
    }
    let parent = match &args.data_dir {
        Some(d) => d.clone(),
        None => default_parent()?,
    };
    std::fs::create_dir_all(&parent)
        .map_err(|e| BenchError::io(parent.display().to_string(), e))?;
    let tmp = tempfile::Builder::new()
        .prefix("sluice-bench-")
        .tempdir_in(&parent)
        .map_err(|e| BenchError::io(parent.display().to_string(), e))?;
    let file_system = fs_type(tmp.path());
    tracing::info!(dir = %tmp.path().display(), file_system, "benchmark directory");
    let reconciler = server_reconciler(args);
    tracing::info!(
        cleanup_concurrency = reconciler.concurrency,
        ?sizes,
        "bench configuration"
    );
    let mut ctx = Ctx {
        root: tmp.path().to_path_buf(),
        sizes,
        reconciler: reconciler.clone(),
        disk: Arc::new(DiskStorage::new()),
        notes: Vec::new(),
    };
    if let Some(n) = scaled_note {
        ctx.note(n);
    }
    if file_system == "tmpfs" {
        ctx.note("the benchmark directory is on tmpfs: syncs cost nothing there");
    }
    let mut figures = Vec::new();
    let mut phases = Vec::new();
    let mut phase = |name: &str, t0: std::time::Instant| {
        let s = t0.elapsed().as_secs_f64();
        tracing::info!(phase = name, took_s = s, "bench phase done");
        phases.push((name.to_string(), s));
    };
    if args.only_descriptors {
        let t0 = std::time::Instant::now();
        figures.extend(descriptors::run(&mut ctx)?);
        phase("descriptors", t0);
        return Ok((
            report(
                args,
                &ctx,
                tmp.path(),
                file_system,
                open_files_limit,
                &reconciler,
                figures,
                Vec::new(),
                phases,
                started,
            ),
            tmp,
        ));
    }
    const SCENARIOS: &[&str] = &[
        "purge",
        "purge-live",
        "reconciler",
        "offsets",
        "messages",
        "http",
        "descriptors",
        "log-recovery",
        "purge-call",
        "poll",
        "tier",
    ];
    if let Some(bad) = args.only.iter().find(|n| !SCENARIOS.contains(&n.as_str())) {
        return Err(BenchError::io(
            "--only",
            format!("unknown scenario {bad}; one of {}", SCENARIOS.join(", ")),
        ));
    }
    // Everything but the focused harnesses when `--only` is not given.
    let wants = |name: &str| {
        if args.only.is_empty() {
            name != "purge-call" && name != "poll" && (name != "tier" || args.tier)
        } else {
            args.only.iter().any(|n| n == name)
        }
    };
    let mut breakdown = Vec::new();
    if wants("purge") {
        let t0 = std::time::Instant::now();
        let (purge_figs, b) = purge::run(&mut ctx)?;
        breakdown = b;
        figures.extend(purge_figs);
        phase("purge + recovery", t0);
    }
    if wants("purge-live") {
        let t0 = std::time::Instant::now();
        figures.extend(purge_live::run(&mut ctx)?);
        phase("purge under load", t0);
    }
    if wants("reconciler") {
        let t0 = std::time::Instant::now();
        figures.extend(reconciler::run(&mut ctx)?);
        phase("reconciler", t0);
    }
    if wants("offsets") {
        let t0 = std::time::Instant::now();
        figures.extend(offsets::run(&mut ctx)?);
        phase("offsets", t0);
    }
    if wants("messages") || wants("http") {
        let t0 = std::time::Instant::now();
        let (msg_figs, inproc) = messages::run(&mut ctx)?;
        figures.extend(msg_figs);
        phase("messages", t0);
        if wants("http") {
            let t0 = std::time::Instant::now();
            figures.extend(http::run(&mut ctx, &inproc)?);
            phase("http", t0);
        }
    }
    if wants("descriptors") {
        let t0 = std::time::Instant::now();
        figures.extend(descriptors::run(&mut ctx)?);
        phase("descriptors", t0);
    }
    if wants("log-recovery") {
        let t0 = std::time::Instant::now();
        figures.extend(log_recovery::run(&mut ctx)?);
        phase("log recovery", t0);
    }
    if wants("purge-call") {
        let t0 = std::time::Instant::now();
        figures.extend(focus::purge_call(&mut ctx)?);
        phase("purge call", t0);
    }
    if wants("poll") {
        let t0 = std::time::Instant::now();
        figures.extend(focus::poll(&mut ctx)?);
        phase("poll", t0);
    }
    if wants("tier") {
        let t0 = std::time::Instant::now();
        figures.extend(tier::run(&mut ctx)?);
        phase("tier", t0);
    }
    for key in FIGURE_KEYS {
        if args.only.is_empty() && !figures.iter().any(|f| f.key == *key) {
            return Err(BenchError::io("report", format!("figure {key} missing")));
        }
    }
    for key in TIER_FIGURE_KEYS {
        if wants("tier") && !figures.iter().any(|f| f.key == *key) {
            return Err(BenchError::io("report", format!("figure {key} missing")));
        }
    }
    let report = report(
        args,
        &ctx,
        tmp.path(),
        file_system,
        open_files_limit,
        &reconciler,
        figures,
        breakdown,
        phases,
        started,
    );
    Ok((report, tmp))
}

/// The report of a run.
#[allow(clippy::too_many_arguments)]
fn report(
    args: &BenchArgs,
    ctx: &Ctx,
    dir: &Path,
    file_system: String,
    open_files_limit: u64,
    reconciler: &ReconcilerSettings,
    figures: Vec<Figure>,
    breakdown: Vec<purge::SyncClass>,
    phases: Vec<(String, f64)>,
    started: std::time::Instant,
) -> Report {
    Report {
        sluice_bench: 1,
        quick: args.quick,
        tiny: args.tiny,
        directory: dir.display().to_string(),
        machine: Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            file_system,
            open_files_limit,
        },
        cleanup_concurrency: reconciler.concurrency,
        reconciler_period_ms: u64::try_from(reconciler.period.as_millis()).unwrap_or(u64::MAX),
        sizes: ctx.sizes,
        figures,
        purge_sync_breakdown: breakdown,
        notes: ctx.notes.clone(),
        phases_s: phases,
        total_s: started.elapsed().as_secs_f64(),
    }
}

/// Descriptors a partition holds besides its offset files (segment log and
/// index, the obligation while it is written), and a margin for the rest.
const FDS_PER_PARTITION: u64 = 4;
const FDS_SPARE: u64 = 1024;

/// The system temporary directory, unless it is tmpfs: then `./target`.
fn default_parent() -> Result<PathBuf> {
    let tmp = std::env::temp_dir();
    if fs_type(&tmp) != "tmpfs" {
        return Ok(tmp);
    }
    let cwd = std::env::current_dir().map_err(|e| BenchError::io("current directory", e))?;
    Ok(cwd.join("target").join("sluice-bench"))
}

/// The file system type of the mount holding `path` (from /proc/mounts).
fn fs_type(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".into();
    };
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(_dev), Some(mnt), Some(ty)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if path.starts_with(mnt) && best.as_ref().is_none_or(|(l, _)| mnt.len() >= *l) {
            best = Some((mnt.len(), ty.to_string()));
        }
    }
    best.map_or_else(|| "unknown".into(), |(_, t)| t)
}

/// The engine keeps one open file per offset file; the data sets here need
/// more than the usual soft limit. Raises the soft limit to `want` (and the
/// hard limit too where allowed); returns the soft limit in force.
fn raise_open_files_limit(want: u64) -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    let cur = now.current.unwrap_or(u64::MAX);
    if cur >= want {
        return cur;
    }
    let max = now.maximum.unwrap_or(u64::MAX);
    // Raising the hard limit needs privileges; try, then fall back to the hard limit.
    let attempts = [
        Rlimit {
            current: Some(want),
            maximum: Some(max.max(want)),
        },
        Rlimit {
            current: Some(max.min(want)),
            maximum: now.maximum,
        },
    ];
    for limit in attempts {
        if setrlimit(Resource::Nofile, limit).is_ok() {
            return limit.current.unwrap_or(cur);
        }
    }
    tracing::warn!(
        current = cur,
        wanted = want,
        "could not raise the open files limit"
    );
    cur
}

/// Flushes the file system holding `dir` (after a setup that skipped syncs).
pub fn flush_fs(dir: &Path) -> Result<()> {
    let ok = std::process::Command::new("sync")
        .arg("-f")
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let ok = std::process::Command::new("sync")
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(BenchError::io("sync", "sync(1) failed"));
        }
    }
    Ok(())
}

/// Peak resident memory of this process (VmHWM), in KiB.
pub fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The `q`-quantile (0..=1) of `v` (sorted here), 0 for an empty slice.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i.min(v.len() - 1)]
}

fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a >= 100_000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

fn print_table(r: &Report) {
    println!(
        "sluice bench ({}) on {} ({}, {} CPUs), {:.1} s",
        if r.tiny {
            "tiny"
        } else if r.quick {
            "quick"
        } else {
            "full"
        },
        r.directory,
        r.machine.file_system,
        r.machine.cpus,
        r.total_s
    );
    let s = &r.sizes;
    println!(
        "reconciler as `sluice server` runs it: cleanup concurrency {} (--cleanup-concurrency), period {} ms, back-to-back passes while a pass reaches its bound",
        r.cleanup_concurrency, r.reconciler_period_ms
    );
    println!(
        "sizes: purge topic {} partitions x ({} consumer + {} group offsets + 1 segment); purge under load {} partitions, {} ms without; reconciler {} partitions; offset stores {} buffered, {} persisted; messages {} x {} B in batches of {}; HTTP {} batches",
        s.purge_partitions,
        s.offsets_per_kind,
        s.offsets_per_kind,
        s.live_purge_partitions,
        s.live_baseline_ms,
        s.reconciler_partitions,
        s.buffered_stores,
        s.persisted_stores,
        s.messages,
        s.message_bytes,
        s.batch,
        s.http_batches
    );
    println!(
        "phases: {}",
        r.phases_s
            .iter()
            .map(|(n, t)| format!("{n} {t:.1} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "{:<40} {:>14} {:<9} {:>14}  {:<44} {:>8} {:>8} {:>4}",
        "figure", "value", "unit", "reference", "reference is", "ratio", "target", "met"
    );
    for f in &r.figures {
        println!(
            "{:<40} {:>14} {:<9} {:>14}  {:<44} {:>8} {:>8} {:>4}",
            f.key,
            fmt_num(f.value),
            f.unit,
            fmt_num(f.reference),
            f.reference_what,
            format!("{:.2}", f.ratio),
            f.target.map(Target::show).unwrap_or_default(),
            match f.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "",
            }
        );
        if let Some(d) = &f.detail {
            println!("    {d}");
        }
    }
    println!("\nsyncs on the critical path of one partition's purge:");
    for c in &r.purge_sync_breakdown {
        println!("  {:>3} x {:<5} {:<28} {}", c.count, c.kind, c.class, c.why);
    }
    if !r.notes.is_empty() {
        println!("\nnotes:");
        for n in &r.notes {
            println!("  - {n}");
        }
    }
}
