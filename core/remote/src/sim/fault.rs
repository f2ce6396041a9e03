//! Which remote calls the simulator fails, and how.
//!
//! Invariants:
//! - A fault is data: a forced one (by trace index or by matcher) or a seeded plan's draw,
//!   so a failing schedule prints and replays.
//! - Sources are consulted in one order, the first that fires decides: by index, by matcher
//!   (rules in insertion order, `skip` then `times`), by plan. The plan draws from its own
//!   `SimRng` stream, and only for a call whose kind has a non-zero rate (calls of other kinds
//!   never move it): one draw for "fails?", then one for the mode, then one for a `Late`
//!   delay. Changing that order changes what every recorded seed means, a breaking change,
//!   as ADR 0002 §2.6 says of `SimStorage`; new randomness gets a new stream.

use std::fmt;

use sluice_storage::SimRng;
use sluice_storage::sim::schedule::{CallMatcher, Forced};

use crate::error::RemoteOp;

/// When a fault strikes relative to the call's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteFault {
    /// No effect; the call answers `Unavailable` (a connection refused, a request that never
    /// reached the store).
    Before,
    /// Full effect, then `Unavailable`: the answer was lost (a timeout after the store
    /// applied the put or delete). The caller cannot tell this from `Before`.
    After,
    /// Full effect; a put then answers `AlreadyExists`: the client's internal retry of a put
    /// that met a 5xx found the object its first attempt wrote (`object_store` retries 5xx
    /// whatever the method). Other calls treat it as `After` (a retried delete of an object
    /// already gone answers `Ok`, which is no fault).
    AfterRetried,
    /// `Unavailable` at once; the effect lands later, just before the call `delay` calls
    /// after this one (1 = the next call), or at `SimRemote::settle`. A request whose answer
    /// was lost may still be in flight and reach the store after the caller moved on, even
    /// after the process died. A put that lands where an object now exists is refused then
    /// (create-only). For reads it is `Before`: a read has no effect to land.
    Late { delay: u32 },
}

impl RemoteFault {
    /// The mode without its data, for plans and matchers.
    pub fn mode(self) -> RemoteFaultMode {
        match self {
            RemoteFault::Before => RemoteFaultMode::Before,
            RemoteFault::After => RemoteFaultMode::After,
            RemoteFault::AfterRetried => RemoteFaultMode::AfterRetried,
            RemoteFault::Late { .. } => RemoteFaultMode::Late,
        }
    }
}

impl fmt::Display for RemoteFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteFault::Before => f.write_str("before"),
            RemoteFault::After => f.write_str("after"),
            RemoteFault::AfterRetried => f.write_str("after-retried"),
            RemoteFault::Late { delay } => write!(f, "late+{delay}"),
        }
    }
}

/// A fault's mode, as a plan lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteFaultMode {
    Before,
    After,
    AfterRetried,
    Late,
}

impl RemoteFaultMode {
    pub const ALL: [RemoteFaultMode; 4] = [
        RemoteFaultMode::Before,
        RemoteFaultMode::After,
        RemoteFaultMode::AfterRetried,
        RemoteFaultMode::Late,
    ];
}

/// Which calls a rule applies to. Empty fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteMatcher {
    pub op: Option<RemoteOp>,
    /// The key (or listed prefix) contains this.
    pub key_contains: Option<String>,
}

impl RemoteMatcher {
    pub fn op(op: RemoteOp) -> Self {
        RemoteMatcher {
            op: Some(op),
            key_contains: None,
        }
    }

    pub fn key_contains(mut self, part: impl Into<String>) -> Self {
        self.key_contains = Some(part.into());
        self
    }
}

impl CallMatcher<RemoteOp> for RemoteMatcher {
    fn matches(&self, op: RemoteOp, key: &str) -> bool {
        self.op.is_none_or(|o| o == op)
            && self.key_contains.as_deref().is_none_or(|s| key.contains(s))
    }
}

/// A seeded probabilistic plan: each call of a listed kind fails with its rate (parts per
/// million, integers so runs are identical on every platform); the mode is drawn uniformly
/// from `modes` (`Before` when empty), a `Late` delay uniformly from `1..=max_delay`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFaultPlan {
    pub seed: u64,
    pub rates_ppm: Vec<(RemoteOp, u32)>,
    pub modes: Vec<RemoteFaultMode>,
    pub max_delay: u32,
}

impl RemoteFaultPlan {
    /// Every kind at `ppm`, every mode, delays up to 4 calls.
    pub fn everything(seed: u64, ppm: u32) -> Self {
        RemoteFaultPlan {
            seed,
            rates_ppm: RemoteOp::ALL.iter().map(|op| (*op, ppm)).collect(),
            modes: RemoteFaultMode::ALL.to_vec(),
            max_delay: 4,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    forced: Forced<RemoteMatcher, RemoteFault>,
    plan: Option<(RemoteFaultPlan, SimRng)>,
}

impl Faults {
    pub(crate) fn fail_at(&mut self, index: u64, fault: RemoteFault) {
        self.forced.fail_at(index, fault);
    }

    pub(crate) fn fail_when(
        &mut self,
        matcher: RemoteMatcher,
        fault: RemoteFault,
        skip: u32,
        times: u32,
    ) {
        self.forced.fail_when(matcher, fault, skip, times);
    }

    pub(crate) fn set_plan(&mut self, plan: Option<RemoteFaultPlan>) {
        self.plan = plan.map(|p| {
            let rng = SimRng::new(p.seed);
            (p, rng)
        });
    }

    pub(crate) fn clear(&mut self) {
        *self = Faults::default();
    }

    pub(crate) fn decide(&mut self, index: u64, op: RemoteOp, key: &str) -> Option<RemoteFault> {
        if let Some(f) = self.forced.decide(index, op, key) {
            return Some(f);
        }
        let (plan, rng) = self.plan.as_mut()?;
        let rate = plan
            .rates_ppm
            .iter()
            .find(|(o, _)| *o == op)
            .map_or(0, |(_, r)| *r);
        if rate == 0 || !rng.chance_ppm(rate) {
            return None;
        }
        let mode = if plan.modes.is_empty() {
            RemoteFaultMode::Before
        } else {
            plan.modes[rng.below(plan.modes.len() as u64) as usize]
        };
        Some(match mode {
            RemoteFaultMode::Before => RemoteFault::Before,
            RemoteFaultMode::After => RemoteFault::After,
            RemoteFaultMode::AfterRetried => RemoteFault::AfterRetried,
            RemoteFaultMode::Late => RemoteFault::Late {
                delay: rng.range(1, u64::from(plan.max_delay.max(1))) as u32,
            },
        })
    }
}
