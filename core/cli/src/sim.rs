//! `sluice sim explore` and `sluice sim run`: thin front ends over `sluice-sim`.

use std::process::ExitCode;

use sluice_sim::explore::{Bounds, Case, TwoFaults, explore, run_case};
use sluice_sim::run::{Rates, run_with};
use sluice_sim::workload::Workload;

#[derive(clap::Subcommand, Debug)]
pub enum SimCommand {
    /// Explore every crash point of a bounded workload (fault mode × crash ×
    /// sync-failure semantics × durability policy, plus second crashes during
    /// recovery) and check the oracle. Exits 1 on any violation.
    Explore {
        /// purge, topic-purge, offsets, append, offset-slots, delete-topic,
        /// delete-stream, delete-partitions, delete-group, retention-by-age,
        /// retention-by-size, tiered-purge or tiered-retention.
        #[arg(long)]
        workload: String,
        /// Print one JSON object on stdout instead of a summary.
        #[arg(long)]
        json: bool,
        /// Replay one case (as printed in a violation's reproducer).
        #[arg(long)]
        case: Option<String>,
        /// Explore every Nth operation index only (1 = all).
        #[arg(long, default_value_t = 1)]
        stride: u64,
        /// Second-crash points per first crash (0 turns second crashes off).
        #[arg(long, default_value_t = 64)]
        second_crash_points: u64,
        /// Two faults per case: the second fault (or a crash) at every index
        /// up to this many operations after the first (0 = to the end of the
        /// window).
        #[arg(long, default_value_t = TwoFaults::full().window)]
        two_fault_window: u64,
        /// Explore only every Nth first-fault index of the two-fault phase.
        #[arg(long, default_value_t = 1)]
        two_fault_stride: u64,
        /// Skip the two-fault phase.
        #[arg(long)]
        no_two_faults: bool,
    },
    /// Run a random workload (sends, polls, offsets, purges, faults, crashes)
    /// from a seed, checking the oracle after every step.
    Run {
        /// One seed.
        #[arg(long, conflicts_with = "seeds")]
        seed: Option<u64>,
        /// A range of seeds, `A..B` (B excluded) or `A..=B`.
        #[arg(long)]
        seeds: Option<String>,
        /// Steps per seed.
        #[arg(long, default_value_t = 200)]
        steps: u32,
        /// Print JSON lines (one object per seed).
        #[arg(long)]
        json: bool,
        /// Run this many seeds at once on separate threads. Each seed is still
        /// a pure function of itself, and the output is printed in seed order,
        /// so it is the same for every value.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Run the engine with a bounded file pool of this many descriptors
        /// (ADR 0018); the default runs it unbounded, as every seed before the pool.
        #[arg(long, value_name = "N")]
        max_open_files: Option<usize>,
        /// Tier topic 0 to a simulated object store with seeded faults
        /// (ADR 0029): tiering passes, remote faults and crashes halfway
        /// through a pass on either door. Untiered seeds are unchanged.
        #[arg(long)]
        tiered: bool,
    },
}

/// Runs seeds `a..b` on `jobs` threads; the reports in seed order.
fn run_seeds(
    a: u64,
    b: u64,
    steps: u32,
    jobs: usize,
    max_open_files: Option<usize>,
    tiered: bool,
) -> Vec<(u64, Result<sluice_sim::run::RunReport, String>)> {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use std::time::Instant;
    let next = AtomicU64::new(a);
    let done = Mutex::new(Vec::new());
    // Seeds running now, and when each started: the watchdog names a seed
    // that runs far longer than a seed should (a livelock in the engine
    // shows as a sweep that never ends, and its output names no seed until
    // the end, which never comes).
    let running: Mutex<BTreeMap<u64, Instant>> = Mutex::new(BTreeMap::new());
    let workers = AtomicUsize::new(jobs.max(1));
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| watch_for_stalls(&running, &finished, steps, max_open_files));
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let s = next.fetch_add(1, Ordering::Relaxed);
                    if s >= b {
                        if workers.fetch_sub(1, Ordering::AcqRel) == 1 {
                            finished.store(true, Ordering::Release);
                        }
                        break;
                    }
                    lock(&running).insert(s, Instant::now());
                    // An assertion that stops a seed (a broken invariant: a
                    // bug, not a fault) is reported with its seed like any
                    // other failure, and the other seeds go on.
                    let r = std::panic::catch_unwind(|| {
                        run_with(s, steps, Rates::default(), max_open_files, tiered)
                    })
                    .unwrap_or_else(|panic| {
                        Err(format!(
                            "stopped by an assertion: {}",
                            panic_text(panic.as_ref())
                        ))
                    });
                    lock(&running).remove(&s);
                    lock(&done).push((s, r));
                }
            });
        }
    });
    let mut out = done
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    out.sort_by_key(|(s, _)| *s);
    out
}

/// How long one seed may run before the watchdog names it: a seed of 2,000
/// steps takes well under a second in a release build, and a few in a debug
/// one.
const STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(120);

/// Prints, to stderr, every seed running longer than `STALL_AFTER` (once per
/// `STALL_AFTER` while it runs), with the command that reproduces it, until
/// `finished`. A stalled seed cannot be stopped from outside its thread; the
/// sweep goes on with the other jobs, and the reproducer runs it alone (under
/// a debugger: `gdb -p PID -batch -ex "thread apply all bt"`).
fn watch_for_stalls(
    running: &std::sync::Mutex<std::collections::BTreeMap<u64, std::time::Instant>>,
    finished: &std::sync::atomic::AtomicBool,
    steps: u32,
    max_open_files: Option<usize>,
) {
    let mut named: std::collections::BTreeMap<u64, u32> = std::collections::BTreeMap::new();
    let pool = max_open_files.map_or(String::new(), |n| format!(" --max-open-files {n}"));
    while !finished.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(200));
        for (seed, started) in lock(running).iter() {
            let periods = (started.elapsed().as_secs() / STALL_AFTER.as_secs().max(1)) as u32;
            if periods > 0 && named.get(seed).copied().unwrap_or(0) < periods {
                named.insert(*seed, periods);
                eprintln!(
                    "seed {seed}: still running after {} s (a livelock?); reproduce: sluice sim run --seed {seed} --steps {steps}{pool}",
                    started.elapsed().as_secs()
                );
            }
        }
    }
}

/// A mutex's data even if a panicking seed poisoned it (every seed's panic
/// is caught and reported; the data stays consistent).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The message a panic carried (assertions carry a `String` or a `&str`).
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// Violations printed per failing seed (the JSON output has all).
const SHOWN_VIOLATIONS: usize = 8;

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b, inclusive) = if let Some((a, b)) = s.split_once("..=") {
        (a, b, true)
    } else if let Some((a, b)) = s.split_once("..") {
        (a, b, false)
    } else {
        return Err(format!("seeds '{s}': expected A..B or A..=B"));
    };
    let a: u64 = a.parse().map_err(|_| format!("bad seed '{a}'"))?;
    let b: u64 = b.parse().map_err(|_| format!("bad seed '{b}'"))?;
    let end = if inclusive { b.saturating_add(1) } else { b };
    if end <= a {
        return Err(format!("seeds '{s}' is empty"));
    }
    Ok((a, end))
}

pub fn main(cmd: SimCommand) -> ExitCode {
    match cmd {
        SimCommand::Explore {
            workload,
            json,
            case,
            stride,
            second_crash_points,
            two_fault_window,
            two_fault_stride,
            no_two_faults,
        } => {
            let Some(w) = Workload::parse(&workload) else {
                let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
                eprintln!(
                    "unknown workload '{workload}'; one of: {}",
                    names.join(", ")
                );
                return ExitCode::from(2);
            };
            if let Some(case) = case {
                return replay(w, &case);
            }
            let bounds = Bounds {
                stride,
                second_crash_points,
                second_stride: 1,
                purge_mode: Default::default(),
                two_faults: (!no_two_faults).then_some(TwoFaults {
                    first_stride: two_fault_stride,
                    window: two_fault_window,
                    second_stride: 1,
                    recovery_window: two_fault_window,
                }),
                stop_at_first: false,
                policies: sluice_sim::explore::POLICIES.to_vec(),
                remote_stride: stride,
            };
            let started = std::time::Instant::now();
            let show_progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
            let mut shown = 0u64;
            let report = match explore(w, &bounds, |n| {
                if show_progress && n >= shown + 1000 {
                    shown = n;
                    eprint!("\r{n} states…");
                }
            }) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("explore failed: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if json {
                match serde_json::to_string(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("cannot encode the report: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                if show_progress {
                    eprintln!();
                }
                println!(
                    "workload {}: {} states explored in {:.1} s",
                    report.workload,
                    report.states_explored,
                    started.elapsed().as_secs_f64()
                );
                for (phase, n) in &report.by_phase {
                    println!("  {phase}: {n}");
                }
                println!("violations: {}", report.violations.len());
                for v in &report.violations {
                    println!(
                        "  ({}) {} [{}]: {}\n    reproduce: {}",
                        v.property, v.case, v.partition, v.detail, v.reproduce
                    );
                }
            }
            if report.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        SimCommand::Run {
            seed,
            seeds,
            steps,
            json,
            jobs,
            max_open_files,
            tiered,
        } => {
            let (a, b) = match (seed, seeds) {
                (Some(s), _) => (s, s.saturating_add(1)),
                (None, Some(r)) => match parse_range(&r) {
                    Ok(x) => x,
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                },
                (None, None) => {
                    eprintln!("give --seed S or --seeds A..B");
                    return ExitCode::from(2);
                }
            };
            let mut failed = Vec::new();
            for (s, result) in run_seeds(a, b, steps, jobs, max_open_files, tiered) {
                match result {
                    Ok(r) => {
                        if json {
                            if let Ok(line) = serde_json::to_string(&r) {
                                println!("{line}");
                            }
                        } else if b - a == 1 || !r.violations.is_empty() {
                            println!(
                                "seed {s}: messages={} offsets={} {} steps={} operations={} crashes={} trace_hash={} violations={}",
                                r.policy,
                                r.offsets_policy,
                                r.semantics,
                                r.steps,
                                r.operations,
                                r.crashes,
                                r.trace_hash,
                                r.violations.len()
                            );
                            // The first few: once state is wrong, every later step repeats it.
                            for (step, v) in r.violations.iter().take(SHOWN_VIOLATIONS) {
                                println!(
                                    "  step {step}: ({}) [{}] {}",
                                    v.property, v.partition, v.detail
                                );
                            }
                            if r.violations.len() > SHOWN_VIOLATIONS {
                                println!(
                                    "  ... {} more (--json prints all)",
                                    r.violations.len() - SHOWN_VIOLATIONS
                                );
                            }
                        }
                        if !r.violations.is_empty() {
                            failed.push(s);
                        }
                    }
                    Err(e) => {
                        println!("seed {s}: harness error: {e}");
                        failed.push(s);
                    }
                }
            }
            if !json && b - a > 1 {
                println!("{} seeds, {} failed", b - a, failed.len());
            }
            let tier_flag = if tiered { " --tiered" } else { "" };
            for s in &failed {
                match max_open_files {
                    Some(n) => println!(
                        "reproduce: sluice sim run --seed {s} --steps {steps} --max-open-files {n}{tier_flag}"
                    ),
                    None => {
                        println!("reproduce: sluice sim run --seed {s} --steps {steps}{tier_flag}")
                    }
                }
            }
            if failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn replay(w: Workload, case: &str) -> ExitCode {
    let case = match Case::parse(case) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run_case(w, &case, Default::default()) {
        Ok((violations, _)) => {
            println!("case {case}: {} violations", violations.len());
            for v in &violations {
                println!("  ({}) [{}] {}", v.property, v.partition, v.detail);
            }
            if violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("case failed to run: {e}");
            ExitCode::FAILURE
        }
    }
}
