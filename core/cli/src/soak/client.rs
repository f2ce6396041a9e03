//! The soak's HTTP wire: one cycle's context (`Ctx`: the server's URL, the
//! token, the logical clock and the oracle), requests and their replies, and
//! the payload format.
//!
//! Invariants:
//! - `call` never fails: a refused connection is `Reply::NotSent` (nothing
//!   happened) and a request without an answer `Reply::Lost` (in doubt), so
//!   the caller, not the transport, decides what it means to the oracle.
//! - A payload on the wire is its message's name padded to `PAYLOAD_BYTES`;
//!   `name_of` gives the name back only for an intact payload, so a torn or
//!   altered message is one "never sent" and a violation.
//! - The clock only moves forward (`fetch_add`), so two ticks order the
//!   events they stamp in real time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use super::oracle::{Oracle, Tick};
use super::{STREAM, powercut, topics};

pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
pub(super) const SCAN_PAGE: u64 = 1000;

#[derive(Debug)]
pub(super) enum Reply {
    Answer {
        status: u16,
        body: String,
    },
    /// The connection could not be made: the server never saw the request.
    NotSent,
    /// No answer: the request may or may not have been carried out.
    Lost(String),
}

impl Reply {
    pub(super) fn code(&self) -> Option<String> {
        match self {
            Reply::Answer { body, .. } => serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| v["code"].as_str().map(str::to_string)),
            _ => None,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Reply::Answer { status, body } => {
                let cut: String = body.chars().take(300).collect();
                format!("{status} {cut}")
            }
            Reply::NotSent => "not sent (connection refused)".into(),
            Reply::Lost(e) => format!("no answer ({e})"),
        }
    }
}

pub(super) async fn call(req: reqwest::RequestBuilder) -> Reply {
    match req.send().await {
        Err(e) if e.is_connect() => Reply::NotSent,
        Err(e) => Reply::Lost(e.to_string()),
        Ok(r) => {
            let status = r.status().as_u16();
            match r.text().await {
                Ok(body) => Reply::Answer { status, body },
                Err(e) => Reply::Lost(e.to_string()),
            }
        }
    }
}

pub(super) struct Ctx {
    pub(super) seed: u64,
    pub(super) cycle: u64,
    pub(super) clients: u32,
    pub(super) partitions: u32,
    pub(super) segment_size: u64,
    pub(super) base: String,
    pub(super) token: String,
    pub(super) http: reqwest::Client,
    pub(super) clock: AtomicU64,
    pub(super) oracle: Mutex<Oracle>,
    pub(super) started_ops: AtomicU64,
    pub(super) purge_in_flight: AtomicBool,
    pub(super) killed: AtomicBool,
    pub(super) purge_gate: tokio::sync::Mutex<()>,
    pub(super) powercut: Option<Arc<powercut::PowerCut>>,
    /// Failing fsyncs fired before this cycle's load began.
    pub(super) injected_at_start: u64,
    pub(super) purges_started: AtomicU64,
    /// Percent of topic purges followed by a re-creation (`recreate`).
    pub(super) recreate_percent: u64,
    pub(super) recreations_started: AtomicU64,
    /// This cycle's ENOSPC window: the tick it began (NEVER: none) and the
    /// tick it ended (NEVER: not yet). A 507 or 503 is a refusal only for a
    /// request answered after it began and sent before it ended.
    pub(super) enospc_on: AtomicU64,
    pub(super) enospc_off: AtomicU64,
    /// Send sequence of the harness's own messages (client 0).
    pub(super) harness_seq: AtomicU64,
    /// Percent of operations that are a change of a user (`userstep`).
    pub(super) users_percent: u64,
}

impl Ctx {
    pub(super) fn tick(&self) -> Tick {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    pub(super) fn oracle(&self) -> MutexGuard<'_, Oracle> {
        // A panic inside a check would poison it; the record stays usable.
        self.oracle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(super) fn topic_url(&self, topic: u32, rest: &str) -> String {
        self.url(&format!(
            "/streams/{STREAM}/topics/{}{rest}",
            topics::spec(topic).name
        ))
    }

    /// Whether a 507 or 503 answered at `end` to a request sent at `start`
    /// falls in this cycle's ENOSPC window.
    pub(super) fn in_enospc_window(&self, start: Tick, end: Tick) -> bool {
        self.enospc_on.load(Ordering::SeqCst) < end
            && start < self.enospc_off.load(Ordering::SeqCst)
    }

    pub(super) fn get(&self, url: String) -> reqwest::RequestBuilder {
        self.http.get(url).bearer_auth(&self.token)
    }

    pub(super) fn violation(&self, what: String) {
        self.oracle().violation(self.cycle, what);
    }
}

pub(super) fn parse_polled(body: &str) -> Result<(u64, Vec<(u64, String)>), String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("poll answer not JSON: {e}"))?;
    let current = v["current_offset"].as_u64().unwrap_or(0);
    let mut out = Vec::new();
    for m in v["messages"]
        .as_array()
        .ok_or("poll answer without messages")?
    {
        let offset = m["header"]["offset"]
            .as_u64()
            .ok_or("a polled message without an offset")?;
        let bytes = m["payload"]
            .as_str()
            .and_then(|text| STANDARD.decode(text).ok())
            .ok_or("a polled message without a base64 payload")?;
        out.push((offset, name_of(&bytes)));
    }
    Ok((current, out))
}

/// Bytes of every message payload on the wire: its name, padded with `#`,
/// so that a few sends fill a small segment and roll it.
pub(super) const PAYLOAD_BYTES: usize = 1024;

/// A message's payload on the wire: its name (which holds no `#`), padded.
pub(super) fn wire_payload(name: &str) -> Vec<u8> {
    debug_assert!(!name.contains('#'), "a message name holds no padding byte");
    let mut bytes = name.as_bytes().to_vec();
    bytes.resize(PAYLOAD_BYTES.max(bytes.len()), b'#');
    bytes
}

/// The name a served payload carries. A payload that is not exactly a
/// padded name (torn, or padding changed) is returned whole, so the oracle
/// finds it was never sent.
pub(super) fn name_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let name = text.trim_end_matches('#');
    if !name.contains('#') && wire_payload(name) == bytes {
        name.to_string()
    } else {
        text.into_owned()
    }
}

pub(super) async fn login(http: &reqwest::Client, base: &str) -> Result<String, String> {
    crate::login::login_default_root(http, base)
        .await
        .map_err(|e| e.to_string())
}

pub(super) async fn expect_ok(req: reqwest::RequestBuilder, what: &str) -> Result<(), String> {
    match call(req).await {
        Reply::Answer { status, .. } if (200..300).contains(&status) => Ok(()),
        other => Err(format!("{what}: {}", other.describe())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_payload_names_its_message_only_when_its_padding_is_intact() {
        let wire = wire_payload("s1-c2-t0-k1-n3");
        assert_eq!(wire.len(), PAYLOAD_BYTES);
        assert_eq!(name_of(&wire), "s1-c2-t0-k1-n3");
        // A torn payload (padding cut short) names no message sent.
        let torn = &wire[..100];
        assert_ne!(name_of(torn), "s1-c2-t0-k1-n3");
        let mut changed = wire.clone();
        changed[300] = b'x';
        assert_ne!(name_of(&changed), "s1-c2-t0-k1-n3");
    }
}
