//! The crash-point explorer: every storage operation of a bounded workload ×
//! fault mode × crash kind × sync-failure semantics (× durability policy),
//! each case rebuilt from scratch, recovered by the production loaders,
//! cleaned up by the production reconciler, and checked by the oracle.
//!
//! Invariants:
//! - A case is a pure function of its `Case` value: the setup is rerun from
//!   the same seed, so trace index `i` names the same operation in every case.
//! - "Crash right after operation i" is `SimStorage::halt_after(i)`: nothing
//!   after it reaches storage, whatever the engine was doing. In a tiered
//!   workload the remote's calls are crash points too ("crash right after
//!   remote call j", `Case::remote`), and either halt stops both doors
//!   (`World::halt_storage_after`, `World::halt_remote_after`).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use sluice_remote::RemoteFault;
use sluice_server::PurgeMode;
use sluice_server::metadata::Durability;
use sluice_storage::{Crash, FaultMode, SyncFailureSemantics};

use crate::oracle::Violation;
use crate::workload::Workload;
use crate::world::{Step, World, parse_remote_fault, remote_fault_name};

/// Seeds for the partial-writeback power losses.
const WRITEBACK_SEEDS: [u64; 3] = [1, 2, 3];
/// Operations the "continue, then crash" variant lets run after the fault.
const CONTINUE_OPS: u64 = 4;
/// The "finish the workload, then crash" variant: the fault's consequences
/// (a failed sync that was only logged, say) are acknowledged before the crash.
const TO_END: u64 = 1 << 32;
const CLEANUP_PASSES: u32 = 20;

/// One explored state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    pub policy: Durability,
    pub semantics: SyncFailureSemantics,
    /// Trace index of the faulted (or last) operation.
    pub index: u64,
    pub fault: Option<FaultMode>,
    pub crash: Crash,
    /// Operations allowed after `index` before the crash.
    pub continue_ops: u64,
    /// A second crash at this trace index during recovery or the first reconciler pass.
    pub second: Option<u64>,
    /// A second fault in the window, at this trace index (after `index`).
    pub second_fault: Option<(u64, FaultMode)>,
    /// After recovery (checked), the workload goes on: one more send to
    /// every partition, then the power is cut and everything is checked
    /// again. What recovery took from the page cache must stay readable
    /// under the acknowledged writes that follow it.
    pub then_send: bool,
    /// A crash point on the remote door (tiered workloads): the remote call
    /// at this trace index gets the fault (if any), and the process dies
    /// `continue_ops` calls after it.
    pub remote: Option<RemoteCut>,
}

/// A fault and a crash on the remote door.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteCut {
    pub index: u64,
    pub fault: Option<RemoteFault>,
    pub continue_ops: u64,
}

/// The remote faults the explorer strikes a call with: none, each mode, and
/// a late effect landing at the next call or five calls later (after the
/// next pass's round deleted its key, in the tiered workloads: an orphan).
pub const REMOTE_FAULTS: [Option<RemoteFault>; 6] = [
    None,
    Some(RemoteFault::Before),
    Some(RemoteFault::After),
    Some(RemoteFault::AfterRetried),
    Some(RemoteFault::Late { delay: 1 }),
    Some(RemoteFault::Late { delay: 5 }),
];

fn crash_name(c: Crash) -> String {
    match c {
        Crash::Process => "process".into(),
        Crash::PowerLoss => "power".into(),
        Crash::PowerLossPartial { seed } => format!("partial{seed}"),
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fault = self.fault.map_or("none", |m| m.as_str());
        write!(
            f,
            "{}:{}:{}:{}:{}:{}",
            self.policy.as_str(),
            self.semantics.as_str(),
            self.index,
            fault,
            crash_name(self.crash),
            self.continue_ops
        )?;
        if let Some(s) = self.second {
            write!(f, ":{s}")?;
        }
        if let Some((j, m)) = self.second_fault {
            write!(f, ":f{j}-{m}")?;
        }
        if self.then_send {
            write!(f, ":then-send")?;
        }
        if let Some(r) = self.remote {
            write!(
                f,
                ":r{}.{}.{}",
                r.index,
                remote_fault_name(r.fault),
                r.continue_ops
            )?;
        }
        Ok(())
    }
}

impl Case {
    /// Parses the `Display` form (the `--case` argument of a reproducer).
    pub fn parse(s: &str) -> Result<Case, String> {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() < 6 || parts.len() > 10 {
            return Err(format!(
                "case '{s}': expected policy:semantics:index:fault:crash:continue[:second][:f<index>-<fault>][:then-send][:r<index>.<fault>.<continue>]"
            ));
        }
        let policy = match parts[0] {
            "buffered" => Durability::Buffered,
            "persisted" => Durability::Persisted,
            other => return Err(format!("unknown policy '{other}'")),
        };
        let semantics = match parts[1] {
            "linux" => SyncFailureSemantics::Linux,
            "forgiving" => SyncFailureSemantics::Forgiving,
            other => return Err(format!("unknown semantics '{other}'")),
        };
        let num = |x: &str, what: &str| x.parse::<u64>().map_err(|_| format!("bad {what} '{x}'"));
        let mode = |x: &str| match x {
            "none" => Ok(None),
            "before" => Ok(Some(FaultMode::Before)),
            "after" => Ok(Some(FaultMode::After)),
            "torn" => Ok(Some(FaultMode::TornWrite)),
            other => Err(format!("unknown fault '{other}'")),
        };
        let fault = mode(parts[3])?;
        let mut second = None;
        let mut second_fault = None;
        let mut then_send = false;
        let mut remote = None;
        for extra in &parts[6..] {
            if *extra == "then-send" {
                then_send = true;
            } else if let Some(rest) = extra.strip_prefix('r') {
                let cut: Vec<&str> = rest.split('.').collect();
                let [index, fault, continue_ops] = cut[..] else {
                    return Err(format!("bad remote cut '{extra}'"));
                };
                remote = Some(RemoteCut {
                    index: num(index, "remote index")?,
                    fault: parse_remote_fault(fault)?,
                    continue_ops: num(continue_ops, "remote continue")?,
                });
            } else if let Some(rest) = extra.strip_prefix('f') {
                let (j, m) = rest
                    .split_once('-')
                    .ok_or_else(|| format!("bad second fault '{extra}'"))?;
                let m = mode(m)?.ok_or_else(|| format!("bad second fault '{extra}'"))?;
                second_fault = Some((num(j, "second fault index")?, m));
            } else {
                second = Some(num(extra, "second")?);
            }
        }
        let crash = match parts[4] {
            "process" => Crash::Process,
            "power" => Crash::PowerLoss,
            p if p.starts_with("partial") => Crash::PowerLossPartial {
                seed: num(&p[7..], "seed")?,
            },
            other => return Err(format!("unknown crash '{other}'")),
        };
        Ok(Case {
            policy,
            semantics,
            index: num(parts[2], "index")?,
            fault,
            crash,
            continue_ops: num(parts[5], "continue")?,
            second,
            second_fault,
            then_send,
            remote,
        })
    }
}

/// A violation found in one case, with the command that reproduces it.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    pub case: String,
    pub property: char,
    pub partition: String,
    pub detail: String,
    pub reproduce: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workload: String,
    pub states_explored: u64,
    pub violations: Vec<Found>,
    pub by_phase: BTreeMap<String, u64>,
}

/// Both message durability policies, in the order the explorer takes them.
pub const POLICIES: [Durability; 2] = [Durability::Buffered, Durability::Persisted];

/// Which parts of the space to cover.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Explore every `stride`-th operation index (1 = all).
    pub stride: u64,
    /// At most this many second-crash points per first-crash case (0 = none).
    pub second_crash_points: u64,
    /// Explore second crashes for every `second_stride`-th first-crash index.
    pub second_stride: u64,
    /// The purge under test (the naive one only exists for teeth tests).
    pub purge_mode: PurgeMode,
    /// Two faults per case (`None`: one at most).
    pub two_faults: Option<TwoFaults>,
    /// Stop at the first operation index that found a violation (teeth
    /// tests only need one; `states_explored` then counts what ran).
    pub stop_at_first: bool,
    /// The message durability policies explored (both by default; a teeth
    /// test aimed at a `persisted`-only mechanism skips `buffered`).
    pub policies: Vec<Durability>,
    /// Explore every `remote_stride`-th remote call of a tiered workload's
    /// window (1 = all).
    pub remote_stride: u64,
}

/// The two-fault phase: a first fault (every mode, or none) at every
/// `first_stride`-th index of the window, then at every `second_stride`-th
/// later index `j` up to `window` operations after it (0: to the end of the
/// window), either a second fault (every mode; the workload then finishes and
/// the process crashes or the power is cut) or a crash right after `j`
/// (process or power), or a second fault with the process dying right after
/// it, checked after recovery and again after one more send per partition
/// and a power loss (`Case::then_send`). And: the first fault (or none) with a process crash
/// right after it, then a second fault (every mode) at each of the first
/// `recovery_window` operations of recovery and the first reconciler pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwoFaults {
    pub first_stride: u64,
    pub window: u64,
    pub second_stride: u64,
    /// How many operations of recovery (and the first reconciler pass) the
    /// fault-in-recovery cases cover (0: all of them). `sluice sim explore`
    /// uses `window`; a teeth test widens it for a gap that lies deep in
    /// recovery.
    pub recovery_window: u64,
}

impl TwoFaults {
    /// What `sluice sim explore` runs by default.
    pub const fn full() -> Self {
        TwoFaults {
            first_stride: 1,
            window: 16,
            second_stride: 1,
            recovery_window: 16,
        }
    }
}

impl Bounds {
    pub fn full() -> Self {
        Bounds {
            stride: 1,
            second_crash_points: 64,
            second_stride: 1,
            purge_mode: PurgeMode::default(),
            two_faults: Some(TwoFaults::full()),
            stop_at_first: false,
            policies: POLICIES.to_vec(),
            remote_stride: 1,
        }
    }
}

/// The trace range of a workload's window: `(first, end)` operation indices.
fn window_range(
    workload: Workload,
    policy: Durability,
    semantics: SyncFailureSemantics,
    mode: PurgeMode,
) -> Result<(u64, u64), String> {
    window_ranges(workload, policy, semantics, mode).map(|(storage, _)| storage)
}

/// A trace range: `(first, end)` indices.
type OpRange = (u64, u64);

/// The trace ranges of a workload's window on both doors: storage
/// operations and remote calls (empty for a workload not tiered).
fn window_ranges(
    workload: Workload,
    policy: Durability,
    semantics: SyncFailureSemantics,
    mode: PurgeMode,
) -> Result<(OpRange, OpRange), String> {
    let mut world = build(workload, policy, semantics, mode)?;
    let first = world.sim.op_count();
    let remote_first = world.remote().map_or(0, |r| r.op_count());
    for step in workload.window() {
        world.step(&step);
    }
    let remote_end = world.remote().map_or(0, |r| r.op_count());
    Ok(((first, world.sim.op_count()), (remote_first, remote_end)))
}

fn build(
    workload: Workload,
    policy: Durability,
    semantics: SyncFailureSemantics,
    mode: PurgeMode,
) -> Result<World, String> {
    let mut world = World::with_mode(semantics, workload.shape(policy), 42, mode)?;
    if workload.tiered() {
        world.enable_tiering()?;
    }
    for step in workload.setup() {
        if !world.step(&step) {
            return Err(format!("setup step {step:?} failed"));
        }
    }
    Ok(world)
}

/// Runs one case; returns its violations and the trace range of recovery
/// plus the first reconciler pass (for second-crash exploration).
pub fn run_case(
    workload: Workload,
    case: &Case,
    mode: PurgeMode,
) -> Result<(Vec<Violation>, (u64, u64)), String> {
    let mut world = build(workload, case.policy, case.semantics, mode)?;
    if let Some(mode) = case.fault {
        world.sim.fail_at(case.index, mode);
    }
    if let Some((j, mode)) = case.second_fault {
        world.sim.fail_at(j, mode);
    }
    world.halt_storage_after(Some(case.index + case.continue_ops));
    if let Some(cut) = case.remote
        && let Some(remote) = world.remote()
    {
        if let Some(fault) = cut.fault {
            remote.fail_at(cut.index, fault);
        }
        world.halt_remote_after(Some(cut.index + cut.continue_ops));
    }
    for step in workload.window() {
        world.step(&step);
    }
    let mut violations = world.check_both_doors();
    violations.extend(world.invariant_violations());
    world.crash(case.crash);
    world.sim.clear_faults();
    if let Some(remote) = world.remote() {
        remote.clear_faults();
    }
    let recovery_start = world.sim.op_count();
    // A second fault past the crash strikes during recovery or the first
    // reconciler pass (trace indices go on counting across the crash).
    if let Some((j, mode)) = case.second_fault
        && j >= recovery_start
    {
        world.sim.fail_at(j, mode);
    }
    if let Some(second) = case.second {
        world.halt_storage_after(Some(second));
    }
    let opened = world.open();
    let recovery_end;
    if case.second.is_some() {
        // The first reconciler pass is part of the second-crash window.
        if opened.is_ok()
            && let Ok(e) = world.engine()
        {
            e.reconcile_at(u64::MAX);
        }
        violations.extend(world.check_both_doors());
        world.crash(Crash::PowerLoss);
        recovery_end = world.sim.op_count();
        if let Err(e) = world.open() {
            violations.push(Violation {
                property: 'f',
                partition: "-".into(),
                detail: format!("recovery failed after the second crash: {e}"),
            });
            violations.extend(world.invariant_violations());
            return Ok((violations, (recovery_start, recovery_end)));
        }
    } else {
        let fault_in_recovery = case.second_fault.is_some_and(|(j, _)| j >= recovery_start);
        let opened = match opened {
            // Recovery hit the injected fault: start again, as an operator
            // would (the fault is used up).
            Err(_) if fault_in_recovery => {
                world.crash(Crash::Process);
                world.open()
            }
            other => other,
        };
        if let Err(e) = opened {
            violations.push(Violation {
                property: 'f',
                partition: "-".into(),
                detail: format!("recovery failed: {e}"),
            });
            violations.extend(world.invariant_violations());
            return Ok((violations, (recovery_start, recovery_start)));
        }
        if let Ok(e) = world.engine() {
            e.reconcile_at(u64::MAX);
        }
        recovery_end = world.sim.op_count();
        if case.then_send {
            violations.extend(world.check_both_doors());
            violations.extend(world.check());
            for (i, partition) in world.live_partitions().into_iter().enumerate() {
                world.step(&Step::Send {
                    partition,
                    payloads: vec![format!("then-send-{i}")],
                });
            }
            world.crash(Crash::PowerLoss);
            if let Err(e) = world.open() {
                violations.push(Violation {
                    property: 'f',
                    partition: "-".into(),
                    detail: format!("recovery failed after the power loss that followed: {e}"),
                });
                violations.extend(world.invariant_violations());
                return Ok((violations, (recovery_start, recovery_end)));
            }
        }
    }
    if let Err(v) = world.finish_cleanup(CLEANUP_PASSES) {
        violations.push(v);
    }
    violations.extend(world.check_both_doors());
    violations.extend(world.check());
    if let Some(part) = crate::run::traced() {
        for e in world.sim.trace().iter().filter(|e| e.path.contains(&part)) {
            eprintln!("    {e}");
        }
    }
    Ok((violations, (recovery_start, recovery_end)))
}

fn crashes() -> Vec<Crash> {
    let mut c = vec![Crash::Process, Crash::PowerLoss];
    c.extend(
        WRITEBACK_SEEDS
            .iter()
            .map(|&seed| Crash::PowerLossPartial { seed }),
    );
    c
}

/// Explores a workload within `bounds`, calling `progress` with the running state count.
pub fn explore(
    workload: Workload,
    bounds: &Bounds,
    mut progress: impl FnMut(u64),
) -> Result<Report, String> {
    let mut report = Report {
        workload: workload.name().to_string(),
        states_explored: 0,
        violations: Vec::new(),
        by_phase: BTreeMap::new(),
    };
    let record = |report: &mut Report, phase: &str, case: &Case, vs: Vec<Violation>| {
        report.states_explored += 1;
        *report.by_phase.entry(phase.to_string()).or_insert(0) += 1;
        for v in vs {
            report.violations.push(Found {
                case: case.to_string(),
                property: v.property,
                partition: v.partition,
                detail: v.detail,
                reproduce: format!(
                    "sluice sim explore --workload {} --case {case}",
                    workload.name()
                ),
            });
        }
    };
    for &policy in &bounds.policies {
        for semantics in [SyncFailureSemantics::Linux, SyncFailureSemantics::Forgiving] {
            let (first, end) = window_range(workload, policy, semantics, bounds.purge_mode)?;
            let mut index = first;
            while index < end {
                if bounds.stop_at_first && !report.violations.is_empty() {
                    return Ok(report);
                }
                for fault in [
                    None,
                    Some(FaultMode::Before),
                    Some(FaultMode::After),
                    Some(FaultMode::TornWrite),
                ] {
                    for crash in crashes() {
                        for continue_ops in [0, CONTINUE_OPS, TO_END] {
                            let case = Case {
                                policy,
                                semantics,
                                index,
                                fault,
                                crash,
                                continue_ops,
                                second: None,
                                second_fault: None,
                                then_send: false,
                                remote: None,
                            };
                            let (vs, (r0, r1)) = run_case(workload, &case, bounds.purge_mode)?;
                            let phase = match continue_ops {
                                0 => "crash_at_op",
                                CONTINUE_OPS => "crash_after_continuing",
                                _ => "crash_after_the_workload",
                            };
                            record(&mut report, phase, &case, vs);
                            let second_here = bounds.second_crash_points > 0
                                && (index - first) % bounds.second_stride.max(1) == 0
                                && fault.is_none()
                                && continue_ops == 0
                                && crash == Crash::PowerLoss;
                            if second_here {
                                let span = r1.saturating_sub(r0).max(1);
                                let step = span.div_ceil(bounds.second_crash_points).max(1);
                                let mut j = r0;
                                while j < r1 {
                                    let two = Case {
                                        second: Some(j),
                                        ..case
                                    };
                                    let (vs, _) = run_case(workload, &two, bounds.purge_mode)?;
                                    record(&mut report, "second_crash_in_recovery", &two, vs);
                                    j += step;
                                }
                            }
                        }
                    }
                }
                progress(report.states_explored);
                index += bounds.stride.max(1);
            }
            if workload.tiered() {
                remote_cases(workload, bounds, policy, semantics, |p, c, v| {
                    record(&mut report, p, c, v)
                })?;
                if bounds.stop_at_first && !report.violations.is_empty() {
                    return Ok(report);
                }
                progress(report.states_explored);
            }
            if let Some(two) = bounds.two_faults {
                let mut index = first;
                while index < end {
                    if bounds.stop_at_first && !report.violations.is_empty() {
                        return Ok(report);
                    }
                    two_fault_cases(
                        workload,
                        bounds,
                        &two,
                        policy,
                        semantics,
                        index,
                        end,
                        |p, c, v| record(&mut report, p, c, v),
                    )?;
                    progress(report.states_explored);
                    index += two.first_stride.max(1);
                }
            }
        }
    }
    Ok(report)
}

/// The remote door's crash points of a tiered workload: every
/// `stride`-th remote call of the window, struck by each of
/// [`REMOTE_FAULTS`], the process dying right after it or after the
/// workload (a process crash or a power cut; the storage halts with it).
fn remote_cases(
    workload: Workload,
    bounds: &Bounds,
    policy: Durability,
    semantics: SyncFailureSemantics,
    mut record: impl FnMut(&str, &Case, Vec<Violation>),
) -> Result<(), String> {
    let (_, (first, end)) = window_ranges(workload, policy, semantics, bounds.purge_mode)?;
    let mut index = first;
    let mut found = false;
    while index < end {
        for fault in REMOTE_FAULTS {
            for crash in [Crash::Process, Crash::PowerLoss] {
                for continue_ops in [0, TO_END] {
                    let case = Case {
                        policy,
                        semantics,
                        index: 0,
                        fault: None,
                        crash,
                        continue_ops: TO_END,
                        second: None,
                        second_fault: None,
                        then_send: false,
                        remote: Some(RemoteCut {
                            index,
                            fault,
                            continue_ops,
                        }),
                    };
                    let (vs, _) = run_case(workload, &case, bounds.purge_mode)?;
                    found |= !vs.is_empty();
                    let phase = if continue_ops == 0 {
                        "remote_crash_at_call"
                    } else {
                        "remote_fault_then_crash"
                    };
                    record(phase, &case, vs);
                }
            }
        }
        if bounds.stop_at_first && found {
            return Ok(());
        }
        index += bounds.remote_stride.max(1);
    }
    Ok(())
}

/// The two-fault cases whose first fault is at `index` (see [`TwoFaults`]).
#[allow(clippy::too_many_arguments)]
fn two_fault_cases(
    workload: Workload,
    bounds: &Bounds,
    two: &TwoFaults,
    policy: Durability,
    semantics: SyncFailureSemantics,
    index: u64,
    end: u64,
    mut record: impl FnMut(&str, &Case, Vec<Violation>),
) -> Result<(), String> {
    let last = if two.window == 0 {
        end
    } else {
        end.min(index + 1 + two.window)
    };
    // A crash right after `index`, then a fault in recovery.
    for first in [
        None,
        Some(FaultMode::Before),
        Some(FaultMode::After),
        Some(FaultMode::TornWrite),
    ] {
        let base = Case {
            policy,
            semantics,
            index,
            fault: first,
            crash: Crash::Process,
            continue_ops: 0,
            second: None,
            second_fault: None,
            then_send: false,
            remote: None,
        };
        let (_, (r0, r1)) = run_case(workload, &base, bounds.purge_mode)?;
        let stop = if two.recovery_window == 0 {
            r1
        } else {
            r1.min(r0 + two.recovery_window)
        };
        let mut j = r0;
        while j < stop {
            for second in FaultMode::ALL {
                let case = Case {
                    second_fault: Some((j, second)),
                    ..base
                };
                let (vs, _) = run_case(workload, &case, bounds.purge_mode)?;
                record("fault_in_recovery", &case, vs);
            }
            j += two.second_stride.max(1);
        }
    }
    for first in FaultMode::ALL {
        let mut j = index + 1;
        while j < last {
            let base = Case {
                policy,
                semantics,
                index,
                fault: Some(first),
                crash: Crash::PowerLoss,
                continue_ops: TO_END,
                second: None,
                second_fault: None,
                then_send: false,
                remote: None,
            };
            for second in FaultMode::ALL {
                for crash in [Crash::Process, Crash::PowerLoss] {
                    let case = Case {
                        crash,
                        second_fault: Some((j, second)),
                        ..base
                    };
                    let (vs, _) = run_case(workload, &case, bounds.purge_mode)?;
                    record("two_faults", &case, vs);
                }
                // The process dies right after the second fault: what the
                // two faults left is recovered (and checked) before the
                // workload's next operation can repair it (a store after a
                // torn one rewrites the slot the tear damaged); then a send
                // follows and the power is cut (a recovered tail the disk
                // lacks must not leave a hole under it).
                let case = Case {
                    crash: Crash::Process,
                    continue_ops: j - index,
                    second_fault: Some((j, second)),
                    then_send: true,
                    ..base
                };
                let (vs, _) = run_case(workload, &case, bounds.purge_mode)?;
                record("two_faults_crash_then_send", &case, vs);
            }
            for crash in [Crash::Process, Crash::PowerLoss] {
                let case = Case {
                    crash,
                    continue_ops: j - index,
                    ..base
                };
                let (vs, _) = run_case(workload, &case, bounds.purge_mode)?;
                record("fault_then_crash", &case, vs);
            }
            j += two.second_stride.max(1);
        }
    }
    Ok(())
}
