//! The open TCP connections, as Iggy's `get_me`, `get_client` and
//! `get_clients` report them (Iggy's server lists its TCP and QUIC
//! connections there; HTTP is stateless and has no client entry). The TCP
//! transport registers them; both transports list them.
//!
//! Invariants:
//! - An entry exists exactly while its connection task runs: `register`
//!   hands out a guard whose drop removes it, so a task that ends by any
//!   path (EOF, error, timeout, stop, panic) leaves no entry behind.
//! - Client ids are unique for the process and never 0 (a counter; a
//!   registry that wrapped 2^32 ids would skip the ones still open).
//! - The registry only reports: nothing else reads it to decide anything
//!   but the `clients_count` of the stats.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What is known about one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientEntry {
    pub(crate) address: String,
    /// The user its login bound, `None` before a login or after a logout.
    pub(crate) user_id: Option<u32>,
}

#[derive(Debug, Default)]
pub struct ClientRegistry {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    last_id: u32,
    open: BTreeMap<u32, ClientEntry>,
}

impl ClientRegistry {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The map stays consistent under a panic (single inserts/removes).
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a connection from `address`; the entry lives as long as
    /// the returned guard.
    pub(crate) fn register(self: &Arc<Self>, address: String) -> ClientGuard {
        let mut inner = self.lock();
        let mut id = inner.last_id;
        loop {
            id = id.wrapping_add(1).max(1);
            if !inner.open.contains_key(&id) {
                break;
            }
        }
        inner.last_id = id;
        inner.open.insert(
            id,
            ClientEntry {
                address,
                user_id: None,
            },
        );
        ClientGuard {
            registry: Arc::clone(self),
            id,
        }
    }

    /// Records the user a connection is logged in as (`None`: logged out).
    pub(crate) fn set_user(&self, id: u32, user_id: Option<u32>) {
        if let Some(entry) = self.lock().open.get_mut(&id) {
            entry.user_id = user_id;
        }
    }

    pub(crate) fn get(&self, id: u32) -> Option<ClientEntry> {
        self.lock().open.get(&id).cloned()
    }

    /// Every open connection, by client id.
    pub(crate) fn list(&self) -> Vec<(u32, ClientEntry)> {
        self.lock()
            .open
            .iter()
            .map(|(id, e)| (*id, e.clone()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Removes its connection's entry when dropped.
#[derive(Debug)]
pub(crate) struct ClientGuard {
    registry: Arc<ClientRegistry>,
    id: u32,
}

impl ClientGuard {
    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.registry.lock().open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_two_connections_when_one_ends_then_only_the_other_is_listed() {
        let registry = Arc::new(ClientRegistry::default());
        let a = registry.register("127.0.0.1:1".into());
        let b = registry.register("127.0.0.1:2".into());
        assert_ne!(a.id(), b.id());
        assert_ne!(a.id(), 0);
        registry.set_user(b.id(), Some(0));
        drop(a);
        let listed = registry.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, b.id());
        assert_eq!(listed[0].1.user_id, Some(0));
        drop(b);
        assert!(registry.is_empty());
    }

    #[test]
    fn given_the_counter_at_its_end_when_registering_then_open_ids_and_zero_are_skipped() {
        let registry = Arc::new(ClientRegistry::default());
        let first = registry.register("a".into());
        assert_eq!(first.id(), 1);
        registry.lock().last_id = u32::MAX - 1;
        let near_end = registry.register("b".into());
        assert_eq!(near_end.id(), u32::MAX);
        let wrapped = registry.register("c".into());
        assert_eq!(wrapped.id(), 2, "1 is still open and 0 is never used");
    }
}
