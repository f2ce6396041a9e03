//! Fault injection for [`super::SimStorage`].
//!
//! Faults are data, not closures, so a failing schedule can be printed and
//! replayed: an index rule (`fail_at`), matcher rules ("the first directory
//! sync of `.../consumers`"), and a seeded probabilistic plan. Rules are
//! consulted in that order; the first that fires decides the operation.

use std::fmt;

use super::schedule::{CallMatcher, Forced};
use crate::error::{ErrorKind, OpKind};
use crate::rng::SimRng;

/// When, relative to its effect, an injected failure strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultMode {
    /// The operation has no effect and returns an error. For a sync under
    /// Linux semantics the dirty state it was meant to persist is dropped.
    Before,
    /// The operation takes full effect, then returns an error.
    After,
    /// For writes and appends: a seeded prefix of the bytes lands, then an
    /// error. Other operations treat it as `Before`.
    TornWrite,
}

impl FaultMode {
    pub const ALL: [FaultMode; 3] = [FaultMode::Before, FaultMode::After, FaultMode::TornWrite];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultMode::Before => "before",
            FaultMode::After => "after",
            FaultMode::TornWrite => "torn",
        }
    }
}

impl fmt::Display for FaultMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The errno an injected fault reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InjectedError {
    /// EIO.
    Io,
    /// ENOSPC.
    NoSpace,
}

impl InjectedError {
    pub(crate) fn kind(self) -> ErrorKind {
        match self {
            InjectedError::Io => ErrorKind::Io,
            InjectedError::NoSpace => ErrorKind::NoSpace,
        }
    }
}

/// One injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fault {
    pub mode: FaultMode,
    pub error: InjectedError,
}

impl Fault {
    pub fn io(mode: FaultMode) -> Self {
        Fault {
            mode,
            error: InjectedError::Io,
        }
    }

    pub fn no_space(mode: FaultMode) -> Self {
        Fault {
            mode,
            error: InjectedError::NoSpace,
        }
    }
}

/// Which operations a rule applies to. Empty fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpMatcher {
    pub(crate) kind: Option<OpKind>,
    /// The normalised path (`/a/b`) ends with this.
    pub(crate) path_suffix: Option<String>,
    /// The normalised path contains this.
    pub(crate) path_contains: Option<String>,
}

impl OpMatcher {
    pub fn kind(kind: OpKind) -> Self {
        OpMatcher {
            kind: Some(kind),
            ..OpMatcher::default()
        }
    }

    pub fn path_ends_with(mut self, suffix: impl Into<String>) -> Self {
        self.path_suffix = Some(suffix.into());
        self
    }

    pub fn path_contains(mut self, part: impl Into<String>) -> Self {
        self.path_contains = Some(part.into());
        self
    }

    fn matches_call(&self, kind: OpKind, path: &str) -> bool {
        self.kind.is_none_or(|k| k == kind)
            && self
                .path_suffix
                .as_deref()
                .is_none_or(|s| path.ends_with(s))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|s| path.contains(s))
    }
}

impl CallMatcher<OpKind> for OpMatcher {
    fn matches(&self, kind: OpKind, path: &str) -> bool {
        self.matches_call(kind, path)
    }
}

/// A seeded probabilistic plan: each operation of a listed kind fails with its
/// rate (parts per million). Integer rates keep runs identical across platforms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultPlan {
    pub seed: u64,
    pub rates_ppm: Vec<(OpKind, u32)>,
    /// The error every injected fault reports, and its mode when `modes` is empty.
    pub fault: Fault,
    /// When not empty, each injected fault's mode is drawn uniformly from it (by
    /// the plan's own seeded generator), so one schedule mixes failures before,
    /// after and torn across every listed operation kind.
    pub modes: Vec<FaultMode>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    forced: Forced<OpMatcher, Fault>,
    plan: Option<(FaultPlan, SimRng)>,
}

impl Faults {
    pub(crate) fn fail_at(&mut self, index: u64, fault: Fault) {
        self.forced.fail_at(index, fault);
    }

    pub(crate) fn fail_when(&mut self, matcher: OpMatcher, fault: Fault, skip: u32, times: u32) {
        self.forced.fail_when(matcher, fault, skip, times);
    }

    pub(crate) fn set_plan(&mut self, plan: Option<FaultPlan>) {
        self.plan = plan.map(|p| {
            let rng = SimRng::new(p.seed);
            (p, rng)
        });
    }

    pub(crate) fn clear(&mut self) {
        *self = Faults::default();
    }

    pub(crate) fn decide(&mut self, index: u64, kind: OpKind, path: &str) -> Option<Fault> {
        if let Some(f) = self.forced.decide(index, kind, path) {
            return Some(f);
        }
        if let Some((plan, rng)) = self.plan.as_mut() {
            let rate = plan
                .rates_ppm
                .iter()
                .find(|(k, _)| *k == kind)
                .map_or(0, |(_, r)| *r);
            if rate > 0 && rng.chance_ppm(rate) {
                let mut fault = plan.fault;
                if !plan.modes.is_empty() {
                    let pick = rng.below(plan.modes.len() as u64) as usize;
                    fault.mode = plan.modes[pick];
                }
                return Some(fault);
            }
        }
        None
    }
}
