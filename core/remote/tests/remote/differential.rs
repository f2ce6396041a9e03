//! `SimRemote` (no faults) and `ObjectStoreRemote`, on the local file system and on
//! `s3s-fs` over S3's wire protocol, answer every call sequence alike, and end up holding the
//! same objects.

use bytes::Bytes;
use proptest::prelude::*;
use sluice_remote::{RemoteError, RemoteKey, RemoteStore, SimRemote};

use sluice_testkit::remote::{S3Server, key, local};

#[derive(Debug, Clone)]
enum Call {
    Put(usize, u8),
    Get(usize, u8, u8),
    Head(usize),
    Delete(usize),
    List(usize),
}

/// Keys that share prefixes (segment-wise and not) and nest, but never a key that is a
/// segment-prefix of another (key.rs: a file system cannot hold both).
const KEYS: [&str; 6] = ["t/a", "t/a-1", "t/b/x", "t/b/y", "t/B", "u/a"];
const PREFIXES: [&str; 4] = ["t", "t/b", "u", "v"];

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        (0..KEYS.len(), 0u8..20).prop_map(|(k, n)| Call::Put(k, n)),
        (0..KEYS.len(), 0u8..25, 0u8..25).prop_map(|(k, s, n)| Call::Get(k, s, n)),
        (0..KEYS.len()).prop_map(Call::Head),
        (0..KEYS.len()).prop_map(Call::Delete),
        (0..PREFIXES.len()).prop_map(Call::List),
    ]
}

/// An answer with the backend's detail left out (kinds, keys and values must agree).
fn norm<T: std::fmt::Debug>(r: Result<T, RemoteError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {} {} {}", e.op, e.key, e.kind),
    }
}

/// Runs `calls` on `SimRemote` and on `real`, comparing every answer and the final listings.
fn agree(real: &dyn RemoteStore, calls: &[Call]) -> Result<(), TestCaseError> {
    let sim = SimRemote::default();
    let keys: Vec<RemoteKey> = KEYS.iter().map(|k| key(k)).collect();
    for c in calls {
        let run = |s: &dyn RemoteStore| match c {
            Call::Put(k, n) => norm(s.put_new(&keys[*k], Bytes::from(vec![*n; usize::from(*n)]))),
            Call::Get(k, st, n) => {
                norm(s.get_range(&keys[*k], u64::from(*st)..u64::from(*st) + u64::from(*n)))
            }
            Call::Head(k) => norm(s.head(&keys[*k])),
            Call::Delete(k) => norm(s.delete(&keys[*k])),
            Call::List(p) => norm(s.list(&key(PREFIXES[*p]))),
        };
        prop_assert_eq!(run(&sim), run(real), "after {:?}", c);
    }
    for p in PREFIXES {
        prop_assert_eq!(norm(sim.list(&key(p))), norm(real.list(&key(p))));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn sim_and_local_object_store_agree(calls in proptest::collection::vec(call(), 1..40)) {
        let (real, _dir) = local();
        agree(&real, &calls)?;
    }
}

proptest! {
    // A fresh server per case: fewer cases, each over real HTTP.
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn sim_and_s3s_fs_over_object_store_agree(calls in proptest::collection::vec(call(), 1..40)) {
        let server = S3Server::start();
        agree(&server.remote(), &calls)?;
    }
}
