//! Work on several partitions at once: the one place the server runs items
//! of a batch on more than one thread.
//!
//! Two callers: a reconciler pass performs its cleanup waits without the
//! engine lock (`partition/reconciler/pass.rs`), and a combined send appends
//! to its partitions under the lock (`engine/messages.rs`, ADR 0030). Both
//! hand over items that own or exclusively borrow everything they touch (a
//! partition, a purge job), so threads share nothing but the storage, whose
//! implementations are `Sync`; the borrow checker holds that, not a lock.
//!
//! Invariants:
//! - Every item is worked on exactly once, and `fan_out` returns only after
//!   every one was (scoped threads: nothing outlives the call).
//! - With `threads` 1, or one item, everything runs on the calling thread in
//!   the items' order, so a deterministic caller (the simulator's engine:
//!   `EngineConfig::deterministic`) sees its I/O in a fixed order.
//! - Items are dealt round-robin, in order within each thread's share; the
//!   calling thread works on the first share itself (one spawn fewer).
//! - A panic on any thread is a programmer error: it propagates to the
//!   caller when the scope ends (and poisons the engine's lock there).
//! - Thread-local state does not cross: the test builds' teeth switches
//!   (`teeth.rs`) are per thread, so a test that turns a mechanism off runs
//!   its engine with one thread (`EngineConfig::deterministic`, as every
//!   teeth test does), or the spawned threads would keep it on.

/// Runs `work` on every item, on at most `threads` threads (the caller's
/// included).
pub(crate) fn fan_out<T: Send>(items: Vec<T>, threads: usize, work: impl Fn(T) + Sync) {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        items.into_iter().for_each(work);
        return;
    }
    let mut shares: Vec<Vec<T>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        shares[i % threads].push(item);
    }
    let work = &work;
    let mut shares = shares.into_iter();
    let own = shares.next().unwrap_or_default();
    std::thread::scope(|scope| {
        for share in shares {
            scope.spawn(move || share.into_iter().for_each(work));
        }
        own.into_iter().for_each(work);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn every_item_is_worked_on_once_whatever_the_thread_count() {
        for threads in [0, 1, 2, 3, 8, 100] {
            for n in [0usize, 1, 2, 5, 17] {
                let seen = Mutex::new(Vec::new());
                fan_out((0..n).collect(), threads, |i| {
                    seen.lock().unwrap_or_else(|p| p.into_inner()).push(i)
                });
                let mut seen = seen.into_inner().unwrap_or_else(|p| p.into_inner());
                seen.sort_unstable();
                assert_eq!(
                    seen,
                    (0..n).collect::<Vec<_>>(),
                    "{threads} threads, {n} items"
                );
            }
        }
    }

    #[test]
    fn one_thread_keeps_the_items_order_on_the_calling_thread() {
        let caller = std::thread::current().id();
        let seen = Mutex::new(Vec::new());
        fan_out(vec![3, 1, 2], 1, |i| {
            assert_eq!(std::thread::current().id(), caller);
            seen.lock().unwrap_or_else(|p| p.into_inner()).push(i)
        });
        assert_eq!(
            seen.into_inner().unwrap_or_else(|p| p.into_inner()),
            [3, 1, 2]
        );
    }

    #[test]
    fn several_threads_really_run_at_once() {
        // Two items that each wait for the other: only two threads finish.
        let barrier = std::sync::Barrier::new(2);
        fan_out(vec![0, 1], 2, |_| {
            barrier.wait();
        });
    }

    #[test]
    fn items_may_borrow_mutably() {
        let mut values = vec![1u64, 2, 3, 4];
        fan_out(values.iter_mut().collect(), 4, |v| *v *= 10);
        assert_eq!(values, [10, 20, 30, 40]);
    }
}
