//! `SimRemote`'s fault model and determinism.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use sluice_remote::{
    RemoteErrorKind, RemoteFault, RemoteFaultPlan, RemoteKey, RemoteMatcher, RemoteOp, RemoteStore,
    SimRemote,
};
use sluice_storage::SimRng;

use sluice_testkit::remote::key;

/// A seeded workload over a few keys (so creates collide and deletes hit), every call
/// kind, under `plan`; returns the store.
fn run_workload(seed: u64, plan: Option<RemoteFaultPlan>, calls: usize) -> SimRemote {
    let sim = SimRemote::default();
    sim.set_fault_plan(plan);
    let mut rng = SimRng::new(seed);
    let keys: Vec<RemoteKey> = (0..6).map(|i| key(&format!("w/p{}/k{i}", i % 2))).collect();
    for n in 0..calls {
        let k = &keys[rng.below(keys.len() as u64) as usize];
        let _ = match rng.below(5) {
            0 | 1 => sim
                .put_new(k, Bytes::from(vec![n as u8; 1 + rng.below(32) as usize]))
                .map(|_| ()),
            2 => sim.get_range(k, 0..rng.range(1, 40)).map(|_| ()),
            3 => sim.delete(k),
            _ => sim.list(&key("w")).map(|_| ()),
        };
    }
    sim
}

#[test]
fn same_seed_gives_the_same_trace_and_a_different_seed_a_different_one() {
    let plan = |seed| Some(RemoteFaultPlan::everything(seed, 200_000));
    let a = run_workload(11, plan(5), 300);
    let b = run_workload(11, plan(5), 300);
    assert_eq!(a.trace(), b.trace());
    assert_eq!(a.trace_hash(), b.trace_hash());
    assert_eq!(a.objects(), b.objects());
    // A different fault seed, or a different workload seed, changes the trace.
    assert_ne!(a.trace_hash(), run_workload(11, plan(6), 300).trace_hash());
    assert_ne!(a.trace_hash(), run_workload(12, plan(5), 300).trace_hash());
    // The plan really drew every mode at this rate.
    let modes: std::collections::BTreeSet<String> = a
        .trace()
        .iter()
        .filter_map(|e| e.fault.map(|f| format!("{:?}", f.mode())))
        .collect();
    assert_eq!(modes.len(), 4, "{modes:?}");
}

#[test]
fn the_trace_renders_index_op_key_size_fault_error_and_landings() {
    let sim = SimRemote::default();
    sim.fail_at(0, RemoteFault::Late { delay: 2 });
    let _ = sim.put_new(&key("a/b"), Bytes::from_static(b"1234"));
    let _ = sim.head(&key("a/b"));
    let _ = sim.head(&key("a/b"));
    let lines: Vec<String> = sim.trace().iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "#0 put a/b (4 bytes) [fault late+2] => unavailable",
            "#1 head a/b => not_found",
            "[landed #0] #2 head a/b",
        ]
    );
}

#[test]
fn a_put_that_timed_out_after_applying_leaves_the_object() {
    // Given a put whose answer is lost after the store applied it,
    let sim = SimRemote::default();
    sim.fail_at(0, RemoteFault::After);
    // when it is called, then the caller hears "outcome unknown"
    let err = sim
        .put_new(&key("a/obj"), Bytes::from_static(b"data"))
        .unwrap_err();
    assert_eq!(err.kind, RemoteErrorKind::Unavailable);
    assert!(err.may_have_applied());
    // and the object is there: a retry under the same key is refused, a listing shows it.
    assert_eq!(sim.head(&key("a/obj")).unwrap(), 4);
    assert_eq!(
        sim.put_new(&key("a/obj"), Bytes::from_static(b"data"))
            .unwrap_err()
            .kind,
        RemoteErrorKind::AlreadyExists
    );
    assert_eq!(sim.list(&key("a")).unwrap().len(), 1);
}

#[test]
fn a_put_that_failed_before_applying_leaves_nothing() {
    let sim = SimRemote::default();
    sim.fail_at(0, RemoteFault::Before);
    let err = sim
        .put_new(&key("a/obj"), Bytes::from_static(b"data"))
        .unwrap_err();
    // The caller hears the same thing as for a fault after: it cannot tell them apart.
    assert_eq!(err.kind, RemoteErrorKind::Unavailable);
    assert!(err.may_have_applied());
    assert!(sim.objects().is_empty());
    assert!(sim.list(&key("a")).unwrap().is_empty());
    // And the retry succeeds.
    sim.put_new(&key("a/obj"), Bytes::from_static(b"data"))
        .unwrap();
}

#[test]
fn a_delete_that_timed_out_after_applying_is_retried_to_ok() {
    let sim = SimRemote::default();
    sim.put_new(&key("a/obj"), Bytes::from_static(b"x"))
        .unwrap();
    sim.fail_at(1, RemoteFault::After);
    assert_eq!(
        sim.delete(&key("a/obj")).unwrap_err().kind,
        RemoteErrorKind::Unavailable
    );
    assert!(sim.objects().is_empty(), "the delete took effect");
    // The retry of a delete whose answer was lost: a missing object counts as deleted.
    sim.delete(&key("a/obj")).unwrap();
}

#[test]
fn a_put_whose_client_retry_met_its_own_write_answers_already_exists() {
    let sim = SimRemote::default();
    sim.fail_at(0, RemoteFault::AfterRetried);
    let err = sim
        .put_new(&key("a/obj"), Bytes::from_static(b"mine"))
        .unwrap_err();
    assert_eq!(err.kind, RemoteErrorKind::AlreadyExists);
    // AlreadyExists on a put does not prove the call changed nothing.
    assert!(err.may_have_applied());
    assert_eq!(
        sim.get_range(&key("a/obj"), 0..4).unwrap().as_ref(),
        b"mine"
    );
}

#[test]
fn a_late_put_lands_after_the_delete_that_was_meant_to_clean_it_up() {
    // Given an upload attempt whose put timed out and is still in flight,
    let sim = SimRemote::default();
    let k = key("inst/p0/g1/attempt-1");
    sim.fail_at(0, RemoteFault::Late { delay: 3 });
    assert!(sim.put_new(&k, Bytes::from_static(b"segment")).is_err());
    // when the caller cleans up the failed attempt (delete: missing counts as deleted) and
    // sees an empty listing,
    sim.delete(&k).unwrap();
    assert!(sim.list(&key("inst/p0/g1")).unwrap().is_empty());
    assert_eq!(sim.in_flight(), 1);
    // then the put still lands afterwards: a listing before Applied is not enough by
    // itself; only a listing after the in-flight requests are over is (ADR 0026 §3).
    let listed = sim.list(&key("inst/p0/g1")).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(sim.in_flight(), 0);
    let last = sim.trace().pop().unwrap();
    assert_eq!(last.landed.len(), 1);
    assert!(last.landed[0].applied);
}

#[test]
fn a_late_put_that_meets_an_existing_key_is_refused_on_arrival() {
    let sim = SimRemote::default();
    let k = key("a/obj");
    sim.fail_at(0, RemoteFault::Late { delay: 2 });
    assert!(sim.put_new(&k, Bytes::from_static(b"old")).is_err());
    sim.put_new(&k, Bytes::from_static(b"new")).unwrap();
    let _ = sim.head(&k); // index 2: the late put lands before it, and is refused
    assert_eq!(sim.get_range(&k, 0..3).unwrap().as_ref(), b"new");
    assert!(!sim.trace()[2].landed[0].applied);
}

#[test]
fn late_effects_survive_a_crash_and_settle_lands_them() {
    let sim = SimRemote::default();
    sim.fail_at(0, RemoteFault::Late { delay: 100 });
    assert!(
        sim.put_new(&key("a/obj"), Bytes::from_static(b"x"))
            .is_err()
    );
    sim.crash();
    assert_eq!(sim.crashes(), 1);
    assert!(sim.objects().is_empty());
    assert_eq!(sim.in_flight(), 1);
    let landed = sim.settle();
    assert_eq!(landed.len(), 1);
    assert_eq!(sim.objects().len(), 1);
}

#[test]
fn a_halted_process_makes_no_call_until_it_crashes() {
    // Given the crash point right after call #1,
    let sim = SimRemote::default();
    sim.halt_after(Some(1));
    sim.put_new(&key("a/one"), Bytes::from_static(b"1"))
        .unwrap();
    sim.put_new(&key("a/two"), Bytes::from_static(b"2"))
        .unwrap();
    // when the dying process goes on, then nothing happens and nothing is traced,
    let err = sim
        .put_new(&key("a/three"), Bytes::from_static(b"3"))
        .unwrap_err();
    assert_eq!(err.kind, RemoteErrorKind::Unavailable);
    assert_eq!(sim.op_count(), 2);
    assert_eq!(sim.objects().len(), 2);
    // and after the crash the new process finds the store as the old one left it.
    sim.crash();
    assert_eq!(sim.list(&key("a")).unwrap().len(), 2);
    assert_eq!(sim.op_count(), 3);

    let now = SimRemote::default();
    now.halt_now();
    assert!(now.head(&key("a/b")).is_err());
    assert_eq!(now.op_count(), 0);
}

#[test]
fn matchers_fail_only_matching_calls_after_skip() {
    let sim = SimRemote::default();
    sim.fail_when(
        RemoteMatcher::op(RemoteOp::Delete).key_contains("/g1/"),
        RemoteFault::Before,
        1,
        1,
    );
    for i in 0..3 {
        sim.put_new(&key(&format!("p/g1/o{i}")), Bytes::from_static(b"x"))
            .unwrap();
    }
    sim.put_new(&key("p/g2/o"), Bytes::from_static(b"x"))
        .unwrap();
    assert!(sim.delete(&key("p/g2/o")).is_ok());
    assert!(sim.delete(&key("p/g1/o0")).is_ok()); // skipped
    assert!(sim.delete(&key("p/g1/o1")).is_err()); // failed
    assert!(sim.delete(&key("p/g1/o2")).is_ok()); // rule used up
    assert_eq!(sim.objects().len(), 1);
}

#[test]
fn a_key_that_would_be_a_file_and_a_directory_is_refused() {
    let sim = SimRemote::default();
    sim.put_new(&key("a/b"), Bytes::from_static(b"x")).unwrap();
    assert_eq!(
        sim.put_new(&key("a/b/c"), Bytes::from_static(b"x"))
            .unwrap_err()
            .kind,
        RemoteErrorKind::InvalidRequest
    );
    sim.put_new(&key("q/r/s"), Bytes::from_static(b"x"))
        .unwrap();
    assert_eq!(
        sim.put_new(&key("q/r"), Bytes::from_static(b"x"))
            .unwrap_err()
            .kind,
        RemoteErrorKind::InvalidRequest
    );
    // A sibling whose name merely starts the same is fine.
    sim.put_new(&key("a/bc"), Bytes::from_static(b"x")).unwrap();
}

#[test]
fn fork_is_independent() {
    let sim = SimRemote::default();
    sim.put_new(&key("a/b"), Bytes::from_static(b"x")).unwrap();
    let copy = sim.fork();
    copy.delete(&key("a/b")).unwrap();
    assert_eq!(sim.objects().len(), 1);
    assert!(copy.objects().is_empty());
    assert_eq!(sim.op_count(), 1);
    assert_eq!(copy.op_count(), 2);
}

#[derive(Debug, Clone)]
enum Call {
    Put(u8, u8),
    Get(u8, u8, u8),
    Head(u8),
    Delete(u8),
    List,
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        (0u8..5, 1u8..20).prop_map(|(k, n)| Call::Put(k, n)),
        (0u8..5, 0u8..25, 1u8..25).prop_map(|(k, s, n)| Call::Get(k, s, n)),
        (0u8..5).prop_map(Call::Head),
        (0u8..5).prop_map(Call::Delete),
        Just(Call::List),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Under a seeded plan of every fault, what the store holds is always what a naive
    /// model holds when told the truth of each call (applied or not, now or later), and an
    /// `Ok` answer is always true.
    #[test]
    fn sim_remote_under_faults_matches_a_naive_model(
        calls in proptest::collection::vec(call(), 1..60),
        seed in any::<u64>(),
    ) {
        let sim = SimRemote::with_plan(RemoteFaultPlan::everything(seed, 250_000));
        let keys: Vec<RemoteKey> = (0..5).map(|i| key(&format!("m/k{i}"))).collect();
        let mut model: BTreeMap<RemoteKey, Bytes> = BTreeMap::new();
        // In-flight puts and deletes, as the model knows them from the trace.
        let mut late: Vec<(u64, u64, Option<Bytes>, RemoteKey)> = Vec::new();
        for c in calls {
            let index = sim.op_count();
            // Land what the model expects to land before this call.
            late.sort_by_key(|(due, origin, _, _)| (*due, *origin));
            let (now, later): (Vec<_>, Vec<_>) = late.into_iter().partition(|(due, ..)| *due <= index);
            late = later;
            for (_, _, body, k) in now {
                match body {
                    Some(b) => { model.entry(k).or_insert(b); }
                    None => { model.remove(&k); }
                }
            }
            let (op_key, put_body) = match &c {
                Call::Put(k, n) => (keys[*k as usize].clone(), Some(Bytes::from(vec![*n; *n as usize]))),
                Call::Get(k, ..) | Call::Head(k) | Call::Delete(k) => (keys[*k as usize].clone(), None),
                Call::List => (key("m"), None),
            };
            let answer: Result<(), RemoteErrorKind> = match &c {
                Call::Put(..) => sim.put_new(&op_key, put_body.clone().unwrap()).map_err(|e| e.kind),
                Call::Get(_, s, n) => {
                    let r = sim.get_range(&op_key, u64::from(*s)..u64::from(*s) + u64::from(*n));
                    if let Ok(bytes) = &r {
                        let want = model.get(&op_key).unwrap();
                        let end = (usize::from(*s) + usize::from(*n)).min(want.len());
                        prop_assert_eq!(bytes, &want.slice(usize::from(*s)..end));
                    }
                    r.map(|_| ()).map_err(|e| e.kind)
                }
                Call::Head(_) => {
                    let r = sim.head(&op_key);
                    if let Ok(size) = r {
                        prop_assert_eq!(Some(size), model.get(&op_key).map(|b| b.len() as u64));
                    }
                    r.map(|_| ()).map_err(|e| e.kind)
                }
                Call::Delete(_) => sim.delete(&op_key).map_err(|e| e.kind),
                Call::List => {
                    let r = sim.list(&op_key);
                    if let Ok(listed) = &r {
                        let want: Vec<(RemoteKey, u64)> = model.iter().map(|(k, b)| (k.clone(), b.len() as u64)).collect();
                        let got: Vec<(RemoteKey, u64)> = listed.iter().map(|o| (o.key.clone(), o.size)).collect();
                        prop_assert_eq!(got, want);
                    }
                    r.map(|_| ()).map_err(|e| e.kind)
                }
            };
            let entry = sim.trace().pop().unwrap();
            prop_assert_eq!(entry.index, index);
            // Apply to the model what the trace says happened.
            let applies = match entry.fault {
                None => answer.is_ok(),
                Some(RemoteFault::After | RemoteFault::AfterRetried) => true,
                Some(RemoteFault::Before) => false,
                Some(RemoteFault::Late { delay }) => {
                    if matches!(c, Call::Put(..) | Call::Delete(_)) {
                        late.push((index + u64::from(delay), index, put_body.clone(), op_key.clone()));
                    }
                    false
                }
            };
            if entry.fault.is_none() && let Err(kind) = answer {
                // A refusal without a fault is the contract's: nothing happened.
                prop_assert!(matches!(kind, RemoteErrorKind::AlreadyExists | RemoteErrorKind::NotFound | RemoteErrorKind::InvalidRequest), "{:?}", kind);
            }
            if applies {
                match &c {
                    Call::Put(..) => { model.entry(op_key.clone()).or_insert(put_body.unwrap()); }
                    Call::Delete(_) => { model.remove(&op_key); }
                    _ => {}
                }
            }
            prop_assert_eq!(&sim.objects(), &model);
        }
    }
}
