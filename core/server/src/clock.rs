//! Time as an input: the real clock for the server, a manual one for simulation.

use std::sync::atomic::{AtomicU64, Ordering};

pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Microseconds since the Unix epoch.
    fn now_micros(&self) -> u64;
}

#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

/// A clock that moves only when told (each read advances it by one microsecond
/// so timestamps stay strictly increasing, as in a real run).
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    pub fn new(start: u64) -> Self {
        ManualClock {
            now: AtomicU64::new(start),
        }
    }

    pub fn advance(&self, micros: u64) {
        self.now.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> u64 {
        self.now.fetch_add(1, Ordering::SeqCst)
    }
}
