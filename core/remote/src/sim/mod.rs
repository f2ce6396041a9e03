//! `SimRemote`: a deterministic object store for the simulator, with the failures an S3
//! client really meets.
//!
//! Invariants:
//! - Every call that happens, successful or not, appends one [`RemoteTraceEntry`] (index,
//!   operation, key, size, injected fault, error, and the late effects that landed just
//!   before it). The trace, and so [`SimRemote::trace_hash`], is a pure function of the
//!   plan's seed, the configuration and the calls made: all state is in `BTreeMap`s behind
//!   one mutex, randomness comes only from `sluice_storage::SimRng`, nothing reads a clock.
//! - The store's state ([`SimRemote::objects`]) changes only by a call's effect or by a late
//!   effect landing, and a put never replaces an object unless the store is configured to
//!   ignore conditional writes (`SimRemoteConfig::ignores_conditional_writes`, as garage
//!   does). A key that is a segment-prefix of a stored key, or the reverse, is refused
//!   (`InvalidRequest`): the local file system backend cannot hold both (key.rs).
//! - The store outlives the process. A crash ([`SimRemote::crash`]) loses nothing stored and
//!   keeps the late effects in flight: a request the dead process sent may still land.
//!   [`SimRemote::halt_after`] is the crash point: every later call of the dying process
//!   fails, has no effect and is not traced, as if it never happened.
//! - Not modelled (ADR 0026 §3): eventually consistent listings (S3 has been strongly
//!   consistent for put, get, head, delete and list since December 2020; a listing here
//!   shows every effect that landed before it), torn objects (a put lands whole or not at
//!   all, as S3's does), a store that loses answered data, and latency (no clock).

mod fault;
mod linked;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

pub use fault::{RemoteFault, RemoteFaultMode, RemoteFaultPlan, RemoteMatcher};
pub use linked::{Halts, LinkedRemote};

use crate::error::{RemoteError, RemoteErrorKind, RemoteOp, Result};
use crate::key::RemoteKey;
use crate::{ListedObject, RemoteStore, check_range};
use fault::Faults;

/// How the simulated store behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimRemoteConfig {
    /// A put over an existing key succeeds and replaces it, as a server that ignores
    /// `If-None-Match: *` does (garage). For proving the probe and the tiering code notice.
    pub ignores_conditional_writes: bool,
}

/// A late effect that reached the store just before a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landing {
    /// The trace index of the call that sent it.
    pub origin: u64,
    /// `false` when the store refused it on arrival (a late put meeting an existing key).
    pub applied: bool,
}

/// One remote call as the simulator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTraceEntry {
    pub index: u64,
    pub op: RemoteOp,
    /// The key, or the listed prefix.
    pub key: String,
    /// Bytes put, or bytes a get returned; 0 otherwise.
    pub bytes: u64,
    pub fault: Option<RemoteFault>,
    pub error: Option<RemoteErrorKind>,
    /// Late effects that landed just before this call, in landing order.
    pub landed: Vec<Landing>,
}

impl fmt::Display for RemoteTraceEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.landed {
            write!(
                f,
                "[landed #{}{}] ",
                l.origin,
                if l.applied { "" } else { " refused" }
            )?;
        }
        write!(f, "#{} {} {}", self.index, self.op, self.key)?;
        if self.bytes > 0 {
            write!(f, " ({} bytes)", self.bytes)?;
        }
        if let Some(fault) = self.fault {
            write!(f, " [fault {fault}]")?;
        }
        if let Some(e) = self.error {
            write!(f, " => {}", e.as_str())?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
enum Effect {
    Put(RemoteKey, Bytes),
    Delete(RemoteKey),
}

#[derive(Debug, Clone)]
struct Pending {
    origin: u64,
    /// Lands before the call with this trace index.
    due: u64,
    effect: Effect,
}

#[derive(Debug, Clone)]
struct State {
    config: SimRemoteConfig,
    objects: BTreeMap<RemoteKey, Bytes>,
    trace: Vec<RemoteTraceEntry>,
    faults: Faults,
    /// Calls with a trace index at or above this never happen.
    halt_from: Option<u64>,
    /// Late effects in flight, in the order they were sent.
    pending: Vec<Pending>,
    crashes: u64,
}

/// What a call does once its fault is decided.
enum Plan {
    Run,
    Fail(RemoteFault),
}

impl State {
    /// Refuses a key that is a segment-prefix of a stored key, or has one as its prefix.
    fn conflicts(&self, key: &RemoteKey) -> bool {
        self.objects
            .keys()
            .any(|k| k.is_below(key) || key.is_below(k))
    }

    /// Applies a put's effect; `Err` is the refusal the caller (or nobody, for a late put)
    /// is told of.
    fn apply_put(
        &mut self,
        key: &RemoteKey,
        data: &Bytes,
    ) -> std::result::Result<(), RemoteErrorKind> {
        if self.objects.contains_key(key) {
            if !self.config.ignores_conditional_writes {
                return Err(RemoteErrorKind::AlreadyExists);
            }
        } else if self.conflicts(key) {
            return Err(RemoteErrorKind::InvalidRequest);
        }
        self.objects.insert(key.clone(), data.clone());
        Ok(())
    }

    fn apply(&mut self, effect: &Effect) -> bool {
        match effect {
            Effect::Put(k, d) => self.apply_put(k, d).is_ok(),
            Effect::Delete(k) => {
                self.objects.remove(k);
                true
            }
        }
    }

    /// Lands every late effect due at or before `index`, in due order then send order.
    fn land_due(&mut self, index: u64) -> Vec<Landing> {
        let mut due: Vec<Pending> = Vec::new();
        self.pending.retain(|p| {
            if p.due <= index {
                due.push(p.clone());
                false
            } else {
                true
            }
        });
        due.sort_by_key(|p| (p.due, p.origin));
        due.iter()
            .map(|p| Landing {
                origin: p.origin,
                applied: self.apply(&p.effect),
            })
            .collect()
    }

    /// Starts a call: `None` if the process is halted (the call never happens), else its
    /// trace slot and plan.
    fn begin(&mut self, op: RemoteOp, key: &str, bytes: u64) -> Option<(usize, Plan)> {
        let index = self.trace.len() as u64;
        if self.halt_from.is_some_and(|h| index >= h) {
            return None;
        }
        let landed = self.land_due(index);
        let fault = self.faults.decide(index, op, key);
        self.trace.push(RemoteTraceEntry {
            index,
            op,
            key: key.to_string(),
            bytes,
            fault,
            error: None,
            landed,
        });
        Some((
            index as usize,
            match fault {
                Some(f) => Plan::Fail(f),
                None => Plan::Run,
            },
        ))
    }

    fn end<T>(&mut self, slot: usize, result: Result<T>) -> Result<T> {
        if let (Err(e), Some(entry)) = (&result, self.trace.get_mut(slot)) {
            entry.error = Some(e.kind);
        }
        result
    }
}

fn halted(op: RemoteOp, key: &RemoteKey) -> RemoteError {
    RemoteError::new(op, key, RemoteErrorKind::Unavailable)
        .with_detail("process halted (simulated crash point)")
}

fn injected(
    op: RemoteOp,
    key: &RemoteKey,
    kind: RemoteErrorKind,
    fault: RemoteFault,
) -> RemoteError {
    RemoteError::new(op, key, kind).with_detail(format!("injected fault ({fault})"))
}

/// The simulated store. Cloning shares it (two clients of one bucket); [`SimRemote::fork`]
/// makes an independent copy.
#[derive(Debug, Clone)]
pub struct SimRemote {
    state: Arc<Mutex<State>>,
}

impl Default for SimRemote {
    fn default() -> Self {
        SimRemote::new(SimRemoteConfig::default())
    }
}

impl SimRemote {
    pub fn new(config: SimRemoteConfig) -> Self {
        SimRemote {
            state: Arc::new(Mutex::new(State {
                config,
                objects: BTreeMap::new(),
                trace: Vec::new(),
                faults: Faults::default(),
                halt_from: None,
                pending: Vec::new(),
                crashes: 0,
            })),
        }
    }

    /// A store whose calls fail by `plan` (seeded).
    pub fn with_plan(plan: RemoteFaultPlan) -> Self {
        let sim = SimRemote::default();
        sim.set_fault_plan(Some(plan));
        sim
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock can only be a bug here; the state stays inspectable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An independent deep copy: objects, trace, faults (and the plan's generator), late
    /// effects in flight.
    pub fn fork(&self) -> SimRemote {
        let st = self.lock().clone();
        SimRemote {
            state: Arc::new(Mutex::new(st)),
        }
    }

    /// Fails exactly the call with this trace index.
    pub fn fail_at(&self, index: u64, fault: RemoteFault) {
        self.lock().faults.fail_at(index, fault);
    }

    /// Fails the next `times` matching calls, after letting `skip` matching ones pass.
    pub fn fail_when(&self, matcher: RemoteMatcher, fault: RemoteFault, skip: u32, times: u32) {
        self.lock().faults.fail_when(matcher, fault, skip, times);
    }

    pub fn set_fault_plan(&self, plan: Option<RemoteFaultPlan>) {
        self.lock().faults.set_plan(plan);
    }

    /// Removes every forced fault and the plan. Late effects in flight stay in flight.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The process dies right after the call with trace index `index`: every later call
    /// fails with `Unavailable`, has no effect and is not traced. `None` lifts it; so does
    /// [`SimRemote::crash`].
    pub fn halt_after(&self, index: Option<u64>) {
        self.lock().halt_from = index.map(|i| i.saturating_add(1));
    }

    /// The process dies now: no further call happens until [`SimRemote::crash`].
    pub fn halt_now(&self) {
        let mut st = self.lock();
        st.halt_from = Some(st.trace.len() as u64);
    }

    /// The client process is gone and a new one starts. The store keeps every object and
    /// every late effect in flight (they land by trace index as before). Not a call: the
    /// trace records nothing.
    pub fn crash(&self) {
        let mut st = self.lock();
        st.halt_from = None;
        st.crashes += 1;
    }

    /// Lands every late effect in flight now, in due order (the network drained), and returns
    /// the landings. Not a call: the trace records nothing (the caller's decision to settle
    /// is part of the schedule, so a replay settles at the same point).
    pub fn settle(&self) -> Vec<Landing> {
        let mut st = self.lock();
        st.land_due(u64::MAX)
    }

    /// How many times the client process crashed.
    pub fn crashes(&self) -> u64 {
        self.lock().crashes
    }

    /// Late effects still in flight.
    pub fn in_flight(&self) -> usize {
        self.lock().pending.len()
    }

    /// What the store holds now (late effects in flight not included).
    pub fn objects(&self) -> BTreeMap<RemoteKey, Bytes> {
        self.lock().objects.clone()
    }

    pub fn trace(&self) -> Vec<RemoteTraceEntry> {
        self.lock().trace.clone()
    }

    /// Calls so far (the index the next one gets).
    pub fn op_count(&self) -> u64 {
        self.lock().trace.len() as u64
    }

    /// FNV-1a over the rendered trace, each entry followed by a newline (as `SimStorage`'s):
    /// equal hashes mean equal traces, stable across platforms. Covers calls and outcomes,
    /// not contents (compare [`SimRemote::objects`] for those).
    pub fn trace_hash(&self) -> u64 {
        sluice_storage::sim::schedule::trace_hash(self.lock().trace.iter())
    }

    /// Runs one call: halt check, landings, fault decision, effect, trace.
    fn call<T>(
        &self,
        op: RemoteOp,
        key: &RemoteKey,
        bytes: u64,
        effect: Option<Effect>,
        body: impl FnOnce(&mut State) -> Result<T>,
    ) -> Result<T> {
        let mut st = self.lock();
        let Some((slot, plan)) = st.begin(op, key.as_str(), bytes) else {
            return Err(halted(op, key));
        };
        let result = match plan {
            Plan::Run => body(&mut st),
            Plan::Fail(fault) => match (fault, effect) {
                (RemoteFault::Before, _) | (RemoteFault::Late { .. }, None) => {
                    Err(injected(op, key, RemoteErrorKind::Unavailable, fault))
                }
                (RemoteFault::Late { delay }, Some(effect)) => {
                    let origin = slot as u64;
                    st.pending.push(Pending {
                        origin,
                        due: origin.saturating_add(u64::from(delay.max(1))),
                        effect,
                    });
                    Err(injected(op, key, RemoteErrorKind::Unavailable, fault))
                }
                (RemoteFault::After | RemoteFault::AfterRetried, _) => {
                    // The effect happens as it would have; only the answer is lost. A
                    // refusal the store made is lost with it.
                    let _ = body(&mut st);
                    let kind = if fault == RemoteFault::AfterRetried && op == RemoteOp::Put {
                        RemoteErrorKind::AlreadyExists
                    } else {
                        RemoteErrorKind::Unavailable
                    };
                    Err(injected(op, key, kind, fault))
                }
            },
        };
        st.end(slot, result)
    }
}

impl RemoteStore for SimRemote {
    fn put_new(&self, key: &RemoteKey, data: Bytes) -> Result<()> {
        let effect = Effect::Put(key.clone(), data.clone());
        self.call(RemoteOp::Put, key, data.len() as u64, Some(effect), |st| {
            st.apply_put(key, &data)
                .map_err(|kind| RemoteError::new(RemoteOp::Put, key, kind))
        })
    }

    fn get_range(&self, key: &RemoteKey, range: Range<u64>) -> Result<Bytes> {
        check_range(key, &range)?;
        self.call(RemoteOp::Get, key, 0, None, |st| {
            let data = st
                .objects
                .get(key)
                .ok_or_else(|| RemoteError::new(RemoteOp::Get, key, RemoteErrorKind::NotFound))?;
            let len = data.len() as u64;
            if range.start >= len {
                return Err(
                    RemoteError::new(RemoteOp::Get, key, RemoteErrorKind::InvalidRequest)
                        .with_detail(format!(
                            "range starts at {} of a {len}-byte object",
                            range.start
                        )),
                );
            }
            let end = range.end.min(len);
            let out = data.slice(range.start as usize..end as usize);
            // This call's entry (pushed under the same lock): the bytes returned.
            if let Some(e) = st.trace.last_mut() {
                e.bytes = out.len() as u64;
            }
            Ok(out)
        })
    }

    fn head(&self, key: &RemoteKey) -> Result<u64> {
        self.call(RemoteOp::Head, key, 0, None, |st| {
            st.objects
                .get(key)
                .map(|d| d.len() as u64)
                .ok_or_else(|| RemoteError::new(RemoteOp::Head, key, RemoteErrorKind::NotFound))
        })
    }

    fn delete(&self, key: &RemoteKey) -> Result<()> {
        let effect = Effect::Delete(key.clone());
        self.call(RemoteOp::Delete, key, 0, Some(effect), |st| {
            // A missing object counts as deleted.
            st.objects.remove(key);
            Ok(())
        })
    }

    fn list(&self, prefix: &RemoteKey) -> Result<Vec<ListedObject>> {
        self.call(RemoteOp::List, prefix, 0, None, |st| {
            Ok(st
                .objects
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.as_str().starts_with(prefix.as_str()))
                .filter(|(k, _)| k.is_below(prefix))
                .map(|(k, d)| ListedObject {
                    key: k.clone(),
                    size: d.len() as u64,
                })
                .collect())
        })
    }
}
