//! Sends combined into one engine call (ADR 0030).
//!
//! A send that may not run on its connection's worker (a `persisted` one
//! waits on a sync; a `buffered` one found the lock held) runs on the
//! blocking pool, where it would wait for the engine lock behind every other
//! send. Instead it queues itself first: whichever send takes the lock next
//! takes every queued send with it into one `Engine::send_many`, which
//! appends to their partitions in parallel. Eight producers' `persisted`
//! sends then sync at the same time instead of one after another.
//!
//! Invariants:
//! - A queued send is answered exactly once, and before the lock that
//!   answered it is released: a send is taken from the queue only under the
//!   engine lock, and answered under that same hold. So a send that gets the
//!   lock and finds no answer is still queued, and takes the queue itself.
//! - Each send is answered as it would be alone: `send_many`'s promise
//!   (requests in queue order, each partition's batches in that order).
//! - A send never waits for the lock on an async worker (this runs on the
//!   blocking pool), and one that started runs to completion whether or not
//!   its client is still there, as any engine call (`iggy/state.rs`).
//! - A poisoned engine lock answers every send with an internal error, and
//!   a send that found it so leaves the queue: nothing waits there for an
//!   engine that will never take it.

use std::sync::{Arc, Mutex, PoisonError};

use super::error::{ApiError, ApiResult};
use crate::engine::{Engine, SendRequest, Sent};
use crate::error::EngineError;

/// Where a send waits for its answer.
type Answer = Mutex<Option<Result<Sent, EngineError>>>;

/// The sends waiting for the engine lock, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    queued: Mutex<Vec<Queued>>,
}

#[derive(Debug)]
struct Queued {
    request: SendRequest,
    answer: Arc<Answer>,
}

impl SendQueue {
    fn push(&self, request: SendRequest) -> Arc<Answer> {
        let answer = Arc::new(Mutex::new(None));
        self.lock().push(Queued {
            request,
            answer: answer.clone(),
        });
        answer
    }

    fn take_all(&self) -> Vec<Queued> {
        std::mem::take(&mut *self.lock())
    }

    /// Sends every queued send as one engine call and answers each; the
    /// caller holds the engine lock. How many were sent.
    fn serve(&self, engine: &mut Engine) -> usize {
        let (requests, answers): (Vec<_>, Vec<_>) = self
            .take_all()
            .into_iter()
            .map(|q| (q.request, q.answer))
            .unzip();
        if requests.len() > 1 {
            tracing::trace!(
                sends = requests.len(),
                "sends combined into one engine call"
            );
        }
        let sent = engine.send_many(requests);
        assert_eq!(sent.len(), answers.len(), "every combined send is answered");
        for (slot, result) in answers.iter().zip(sent) {
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
        }
        answers.len()
    }

    fn withdraw(&self, answer: &Arc<Answer>) {
        self.lock().retain(|q| !Arc::ptr_eq(&q.answer, answer));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// The queue is a plain list: a panic while it is held leaves it whole.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Queued>> {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn take(answer: &Answer) -> Option<Result<Sent, EngineError>> {
    answer.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// Sends `request` together with every send queued when this one gets the
/// engine lock, or finds it answered by the send that took it. Blocks: call
/// it on the blocking pool.
pub(crate) fn send_combined(
    engine: &Mutex<Engine>,
    queue: &SendQueue,
    request: SendRequest,
) -> ApiResult<Sent> {
    let answer = queue.push(request);
    let Ok(mut engine) = engine.lock() else {
        queue.withdraw(&answer);
        return Err(ApiError::internal(
            "the engine failed during an earlier request and refuses service until restart",
        ));
    };
    let mut done = take(&answer);
    if done.is_none() {
        // Not answered, so still queued (the invariant): take them all.
        queue.serve(&mut engine);
        done = take(&answer);
    }
    drop(engine);
    match done {
        Some(done) => Ok(done?),
        None => unreachable!("a send unanswered under the engine lock was not queued"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;
    use std::time::Duration;

    use sluice_storage::{DurableStorage, SimConfig, SimStorage};

    use super::*;
    use crate::clock::ManualClock;
    use crate::engine::{EngineConfig, Partitioning};
    use crate::identifier::Identifier;
    use crate::metadata::{Durability, TopicOptions};
    use crate::partition::log::NewMessage;

    /// An engine with stream `s`, topic `t` of one `persisted` partition.
    fn engine() -> Arc<Mutex<Engine>> {
        let sim = SimStorage::new(SimConfig::default());
        sim.create_dir_all(Path::new("/data")).unwrap();
        sim.sync_dir(Path::new("/")).unwrap();
        let storage: Arc<dyn DurableStorage> = Arc::new(sim);
        let config = EngineConfig::deterministic("/data", 1);
        let (mut engine, _) =
            Engine::open(storage, Arc::new(ManualClock::new(1_000_000)), config).unwrap();
        engine.create_stream(None, "s").unwrap();
        let options = TopicOptions {
            durability: Durability::Persisted,
            ..TopicOptions::default()
        };
        engine
            .create_topic(&Identifier::from("s"), None, "t", 1, options, 0, 0, 1)
            .unwrap();
        Arc::new(Mutex::new(engine))
    }

    fn two_messages() -> SendRequest {
        SendRequest {
            stream: Identifier::from("s"),
            topic: Identifier::from("t"),
            partitioning: Partitioning::PartitionId(0),
            messages: vec![
                NewMessage::new(b"a".to_vec()),
                NewMessage::new(b"b".to_vec()),
            ],
        }
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("timed out waiting until {what}");
    }

    #[test]
    fn sends_queued_behind_the_lock_are_answered_by_its_holder_in_queue_order() {
        // Given the engine lock held, and four sends queued behind it one
        // after another.
        let (engine, queue) = (engine(), Arc::new(SendQueue::default()));
        let mut held = engine.lock().unwrap();
        let mut senders = Vec::new();
        for i in 0..4 {
            let (engine, queued) = (engine.clone(), queue.clone());
            senders.push(std::thread::spawn(move || {
                send_combined(&engine, &queued, two_messages())
            }));
            wait_until("the send is queued", || queue.len() == i + 1);
        }
        // When the holder serves the queue: one engine call for all four.
        assert_eq!(queue.serve(&mut held), 4);
        drop(held);
        // Then each send finds its answer, in queue order, and none was sent
        // again (offsets 0 to 7, no more).
        let offsets: Vec<u64> = senders
            .into_iter()
            .map(|s| s.join().unwrap().unwrap().base_offset)
            .collect();
        assert_eq!(offsets, [0, 2, 4, 6]);
        assert_eq!(queue.len(), 0);
        let sent = engine.lock().unwrap().send_request(two_messages()).unwrap();
        assert_eq!(sent.base_offset, 8);
    }

    #[test]
    fn concurrent_sends_are_each_answered_once() {
        let (engine, queue) = (engine(), Arc::new(SendQueue::default()));
        let senders: Vec<_> = (0..8)
            .map(|_| {
                let (engine, queue) = (engine.clone(), queue.clone());
                std::thread::spawn(move || {
                    (0..25)
                        .map(|_| send_combined(&engine, &queue, two_messages()).unwrap())
                        .map(|sent| sent.base_offset)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut offsets: Vec<u64> = senders
            .into_iter()
            .flat_map(|s| s.join().unwrap())
            .collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (0..200).map(|i| i * 2).collect::<Vec<u64>>());
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn a_failed_engine_refuses_the_send_and_keeps_nothing_queued() {
        let (engine, queue) = (engine(), SendQueue::default());
        let poisoner = engine.clone();
        let _ = std::thread::spawn(move || {
            let _held = poisoner.lock().unwrap();
            panic!("an engine call failed");
        })
        .join();
        let refused = send_combined(&engine, &queue, two_messages()).unwrap_err();
        assert!(
            format!("{refused:?}").contains("refuses service"),
            "{refused:?}"
        );
        assert_eq!(queue.len(), 0);
    }
}
