//! Sends that sync, combined into one engine call (ADR 0030).
//!
//! A send that may sync (a `persisted` one, or any while the metadata is in
//! doubt; one that found the lock held, if its topic's last send synced)
//! runs on the blocking pool, where it would wait for the engine lock
//! behind every other send and sync alone. Instead it queues itself: one
//! waiting send at a time is the *leader*, which takes every queued send
//! into one `Engine::send_many_answering`, whose partitions are appended in
//! parallel; the others wait for their answer, each handed over as soon as
//! its partition's append ended. Eight producers' `persisted` sends then
//! sync at the same time instead of one after another, and a producer whose
//! partition synced first sends its next batch while the others still sync
//! (the leader's own producer hears only when the whole call ended: its
//! thread is the one making it).
//!
//! Invariants (all of the queue's state is under its one mutex; each
//! waiting send has its own condition variable on it, notified when its
//! answer is given, and when a leader ends while it is still queued):
//! - A queued send is answered exactly once: it is taken from the queue by
//!   one leader only, which answers it, or answers it with an internal error
//!   if the engine is poisoned or the call panics (`Lead`'s drop; the
//!   leader catches the panic and collects its own answer like the others).
//! - There is at most one leader, and when there is none every waiting send
//!   is either answered or still queued; a leader's end wakes every send
//!   still queued, and the first to run leads next. No send waits for an
//!   answer that nobody will give.
//! - Each send is answered as it would be alone: `send_many`'s promise
//!   (requests in queue order, each partition's batches in that order).
//! - A send never waits on an async worker (this runs on the blocking pool),
//!   and one that started runs to completion whether or not its client is
//!   still there, as any engine call (`iggy/state.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::error::{ApiError, ApiResult};
use crate::engine::{Engine, SendRequest, Sent};
use crate::identifier::Identifier;

/// The sends waiting for the engine, and their answers.
#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    state: Mutex<Queue>,
    /// Whether each topic's last answered send synced, by the identifiers
    /// its sends named: a hint for a send that could not ask the engine
    /// (`AppState::send`). Only where a send waits depends on it, never
    /// what it does; bounded by `SYNC_HINTS`.
    synced: Mutex<HashMap<(Identifier, Identifier), bool>>,
}

/// Topics whose last send the hints remember at most (then they start over).
const SYNC_HINTS: usize = 4096;

#[derive(Debug, Default)]
struct Queue {
    /// Not yet taken by a leader, in arrival order, by ticket.
    queued: Vec<(u64, SendRequest)>,
    /// Taken by the leader, not yet answered.
    taken: BTreeSet<u64>,
    /// Answered, not yet collected by their sender.
    answers: BTreeMap<u64, ApiResult<Sent>>,
    leading: bool,
    next_ticket: u64,
    /// Each waiting send's own wake-up (on the queue's mutex): an answer
    /// wakes its sender only, not every sender (one shared condition
    /// variable did that), and a leader's end wakes the sends still queued.
    wakes: BTreeMap<u64, Arc<Condvar>>,
    /// How many leaders there were.
    #[cfg(test)]
    leads: usize,
    /// Tests: the engine call panics right after giving this many answers.
    #[cfg(test)]
    panic_after: Option<usize>,
    #[cfg(test)]
    answered: usize,
}

impl Queue {
    fn answer(&mut self, ticket: u64, answer: ApiResult<Sent>) {
        assert!(self.taken.remove(&ticket), "send {ticket} answered twice");
        self.answers.insert(ticket, answer);
        if let Some(wake) = self.wakes.get(&ticket) {
            wake.notify_one();
        }
        #[cfg(test)]
        {
            self.answered += 1;
            if self.panic_after == Some(self.answered) && !std::thread::panicking() {
                panic!("test: the engine call panics");
            }
        }
    }

    /// A leader ended: every send still queued is woken, and the first to
    /// run leads next (not a chosen one, which the next round would wait
    /// for to be scheduled on busy cores).
    fn lead_ended(&mut self) {
        self.leading = false;
        for (ticket, _) in &self.queued {
            if let Some(wake) = self.wakes.get(ticket) {
                wake.notify_one();
            }
        }
    }
}

impl SendQueue {
    /// The queue is plain data, changed only in whole steps under its
    /// mutex: a panic elsewhere never leaves it half changed.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, request: SendRequest) -> (u64, Arc<Condvar>) {
        let mut q = self.lock();
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.queued.push((ticket, request));
        let wake = Arc::new(Condvar::new());
        q.wakes.insert(ticket, wake.clone());
        (ticket, wake)
    }

    /// Hands `ticket` its answer and wakes its sender.
    fn answer(&self, ticket: u64, answer: ApiResult<Sent>) {
        let mut q = self.lock();
        q.answer(ticket, answer);
    }

    /// Whether the last answered send to `topic` synced (false if unknown).
    pub(crate) fn last_synced(&self, topic: &(Identifier, Identifier)) -> bool {
        let hints = self.synced.lock().unwrap_or_else(PoisonError::into_inner);
        hints.get(topic).copied().unwrap_or(false)
    }

    /// Notes whether a send to `topic` just synced.
    pub(crate) fn note_synced(&self, topic: (Identifier, Identifier), synced: bool) {
        let mut hints = self.synced.lock().unwrap_or_else(PoisonError::into_inner);
        if hints.get(&topic) != Some(&synced) {
            if hints.len() >= SYNC_HINTS {
                hints.clear();
            }
            hints.insert(topic, synced);
        }
    }

    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        let q = self.lock();
        q.queued.len() + q.taken.len()
    }

    #[cfg(test)]
    pub(crate) fn leads(&self) -> usize {
        self.lock().leads
    }

    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        let q = self.lock();
        q.queued.is_empty()
            && q.taken.is_empty()
            && q.answers.is_empty()
            && q.wakes.is_empty()
            && !q.leading
    }
}

/// The leader's hold on the sends it took: whatever is left unanswered when
/// it ends (the engine poisoned, or a panic in the call) is answered with an
/// internal error, and its end is announced.
struct Lead<'a> {
    queue: &'a SendQueue,
    tickets: Vec<u64>,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        let mut q = self.queue.lock();
        for ticket in &self.tickets {
            if q.taken.contains(ticket) {
                q.answer(*ticket, Err(ApiError::engine_failed()));
            }
        }
        q.lead_ended();
    }
}

/// Sends `request`, combined with every send queued when it (or the send
/// leading then) takes the queue. Blocks: call it on the blocking pool.
pub(crate) fn send_combined(
    engine: &Mutex<Engine>,
    queue: &SendQueue,
    request: SendRequest,
) -> ApiResult<Sent> {
    let (ticket, wake) = queue.push(request);
    let mut q = queue.lock();
    loop {
        if let Some(answer) = q.answers.remove(&ticket) {
            q.wakes.remove(&ticket);
            return answer;
        }
        if q.leading {
            q = wake.wait(q).unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        // No leader, and this send unanswered: it is still queued (the
        // invariant). Lead: take the queue, and answer it.
        q.leading = true;
        #[cfg(test)]
        {
            q.leads += 1;
        }
        let (tickets, requests): (Vec<u64>, Vec<SendRequest>) =
            std::mem::take(&mut q.queued).into_iter().unzip();
        assert!(
            tickets.contains(&ticket),
            "send {ticket} is neither answered nor queued"
        );
        q.taken.extend(tickets.iter().copied());
        drop(q);
        // A panic in the call (a broken invariant) has poisoned the engine,
        // which refuses everything after; `Lead`'s drop has answered every
        // send it had not answered. This send's own answer is collected
        // like the others', so a send whose data the call had already made
        // durable is told so, not "the task failed".
        let led = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lead(engine, queue, Lead { queue, tickets }, requests)
        }));
        if led.is_err() {
            tracing::error!(
                "a combined send's engine call panicked; the engine refuses service until restart"
            );
        }
        q = queue.lock();
    }
}

/// The leader's engine call.
fn lead(engine: &Mutex<Engine>, queue: &SendQueue, lead: Lead<'_>, requests: Vec<SendRequest>) {
    // A poisoned engine answers nothing here: `lead`'s drop refuses them.
    let Ok(mut engine) = engine.lock() else {
        return;
    };
    if requests.len() > 1 {
        tracing::trace!(
            sends = requests.len(),
            "sends combined into one engine call"
        );
    }
    let tickets = &lead.tickets;
    engine.send_many_answering(requests, &|i, answer| {
        queue.answer(tickets[i], answer.map_err(ApiError::from))
    });
    drop(engine);
    drop(lead);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;
    use std::sync::Arc;
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
    fn sends_queued_behind_a_leader_are_taken_by_the_next_in_queue_order() {
        // Given the engine lock held, a first send leading (it took the
        // queue and waits for the engine), and three more queued behind it.
        let (engine, queue) = (engine(), Arc::new(SendQueue::default()));
        let held = engine.lock().unwrap();
        let mut senders = Vec::new();
        for i in 0..4 {
            let (engine, queued) = (engine.clone(), queue.clone());
            senders.push(std::thread::spawn(move || {
                send_combined(&engine, &queued, two_messages())
            }));
            wait_until("the send waits", || queue.waiting() == i + 1);
        }
        assert_eq!(queue.leads(), 1);
        // When the engine is free.
        drop(held);
        // Then the first is sent alone and the three others in one call, in
        // queue order, each once (offsets 0 to 7, no more).
        let offsets: Vec<u64> = senders
            .into_iter()
            .map(|s| s.join().unwrap().unwrap().base_offset)
            .collect();
        assert_eq!(offsets, [0, 2, 4, 6]);
        assert_eq!(queue.leads(), 2);
        assert!(queue.is_idle());
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
        assert!(queue.is_idle());
    }

    /// Given a send queued ahead of the leader's own, when the engine call
    /// panics right after `answers` answers: what the leader's caller and
    /// the other send are told.
    fn panic_in_the_call_after(answers: usize) -> (ApiResult<Sent>, ApiResult<Sent>) {
        let (engine, queue) = (engine(), SendQueue::default());
        queue.lock().panic_after = Some(answers);
        let (other, _) = queue.push(two_messages());
        let mine = send_combined(&engine, &queue, two_messages());
        let theirs = queue.lock().answers.remove(&other).unwrap();
        assert!(engine.is_poisoned());
        (mine, theirs)
    }

    #[test]
    fn a_panic_in_the_call_answers_the_unanswered_with_an_error_and_keeps_given_answers() {
        // Panic after the first answer: the leader's own send was not
        // answered yet, and is refused; the other keeps its offsets.
        let (mine, theirs) = panic_in_the_call_after(1);
        assert!(format!("{:?}", mine.unwrap_err()).contains("refuses service"));
        assert_eq!(theirs.unwrap().base_offset, 0);
        // Panic after both: the leader's send was appended, and says so.
        let (mine, theirs) = panic_in_the_call_after(2);
        assert_eq!(
            (theirs.unwrap().base_offset, mine.unwrap().base_offset),
            (0, 2)
        );
    }

    #[test]
    fn the_sync_hint_is_the_topics_last_answer_and_stays_bounded() {
        let queue = SendQueue::default();
        let topic = |t: u32| (Identifier::Numeric(0), Identifier::Numeric(t));
        assert!(!queue.last_synced(&topic(0)), "unknown: alone");
        queue.note_synced(topic(0), true);
        queue.note_synced(topic(1), false);
        assert!(queue.last_synced(&topic(0)) && !queue.last_synced(&topic(1)));
        queue.note_synced(topic(0), false);
        assert!(!queue.last_synced(&topic(0)));
        for t in 0..3 * SYNC_HINTS as u32 {
            queue.note_synced(topic(t), true);
        }
        assert!(queue.synced.lock().unwrap().len() <= SYNC_HINTS);
    }

    #[test]
    fn a_failed_engine_refuses_every_send_and_keeps_nothing() {
        let (engine, queue) = (engine(), Arc::new(SendQueue::default()));
        let poisoner = engine.clone();
        let _ = std::thread::spawn(move || {
            let _held = poisoner.lock().unwrap();
            panic!("an engine call failed");
        })
        .join();
        let senders: Vec<_> = (0..4)
            .map(|_| {
                let (engine, queue) = (engine.clone(), queue.clone());
                std::thread::spawn(move || send_combined(&engine, &queue, two_messages()))
            })
            .collect();
        for sender in senders {
            let refused = sender.join().unwrap().unwrap_err();
            assert!(
                format!("{refused:?}").contains("refuses service"),
                "{refused:?}"
            );
        }
        assert!(queue.is_idle());
    }
}
