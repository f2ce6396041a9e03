//! What `GET /stats` and the TCP get-stats command answer (Iggy's `Stats`
//! field names), and the single-node cluster metadata (`GET
//! /cluster/metadata`, TCP command 12).
//!
//! Invariants:
//! - Counts come from the engine's metadata and partitions, read inside one
//!   engine call, so they are one consistent snapshot.
//! - Process figures are read from `/proc` through `DurableStorage` (like
//!   every file sluice reads, ADR 0001); where a file cannot be read (the
//!   simulator, another OS) the figure is 0, never a guess. Disk space is
//!   not measured (0).
//! - Collecting reads and never changes anything; `collect_stats` is the
//!   one collector both transports answer from.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::error::ApiResult;
use super::state::AppState;
use crate::engine::Engine;

/// The Iggy server version sluice answers as (the protocol it speaks).
pub(crate) const IGGY_SERVER_VERSION: &str = "0.11.0";
/// `IGGY_SERVER_VERSION` packed as Iggy does (10 bits per component).
pub(crate) const IGGY_SERVER_SEMVER: u32 = 11 << 10;

/// Iggy's `Stats` (sizes in bytes, times in microseconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub process_id: u32,
    pub cpu_usage: f32,
    pub total_cpu_usage: f32,
    pub memory_usage: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    pub run_time: u64,
    pub start_time: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub messages_size_bytes: u64,
    pub streams_count: u32,
    pub topics_count: u32,
    pub partitions_count: u32,
    pub segments_count: u32,
    pub messages_count: u64,
    pub clients_count: u32,
    pub consumer_groups_count: u32,
    pub hostname: String,
    pub os_name: String,
    pub os_version: String,
    pub kernel_version: String,
    pub iggy_server_version: String,
    pub iggy_server_semver: Option<u32>,
    pub cache_metrics: std::collections::BTreeMap<String, serde_json::Value>,
    pub threads_count: u32,
    pub free_disk_space: u64,
    pub total_disk_space: u64,
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The stats both transports answer: the engine's counts and the process
/// figures in one engine call, and the clients (open TCP connections and
/// live HTTP sessions).
pub(crate) async fn collect_stats(state: &AppState) -> ApiResult<Stats> {
    let started = state.info.started.unwrap_or_else(SystemTime::now);
    let clients = state.info.tcp_clients.len() + state.auth.live_sessions();
    state
        .engine(move |e| {
            let mut s = Stats::default();
            engine_counts(e, &mut s);
            process(e, started, clients, &mut s);
            Ok(s)
        })
        .await
}

/// The engine's part of the stats (inside an engine call).
fn engine_counts(engine: &Engine, stats: &mut Stats) {
    let mut topics = 0usize;
    let mut groups = 0usize;
    let mut streams = 0usize;
    for s in engine.streams() {
        streams += 1;
        topics += s.topics.len();
        groups += s.topics.values().map(|t| t.groups.len()).sum::<usize>();
    }
    let (mut partitions, mut segments, mut messages, mut bytes) = (0usize, 0usize, 0u64, 0u64);
    for p in engine.partitions() {
        partitions += 1;
        let f = p.figures();
        segments += f.segments;
        messages = messages.saturating_add(f.messages);
        bytes = bytes.saturating_add(f.size_bytes);
    }
    stats.streams_count = count_u32(streams);
    stats.topics_count = count_u32(topics);
    stats.partitions_count = count_u32(partitions);
    stats.segments_count = count_u32(segments);
    stats.messages_count = messages;
    stats.messages_size_bytes = bytes;
    stats.consumer_groups_count = count_u32(groups);
}

fn read_text(engine: &Engine, path: &str) -> Option<String> {
    // Read to EOF, not to the file's length: `/proc` files report a size of
    // 0 (`read_file` would answer nothing, and every figure would be 0).
    let file = engine
        .storage()
        .open(Path::new(path), sluice_storage::OpenMode::Read)
        .ok()?;
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while out.len() < PROC_FILE_LIMIT {
        let n = file.read_at(out.len() as u64, &mut chunk).ok()?;
        out.extend_from_slice(chunk.get(..n)?);
        if n < chunk.len() {
            break;
        }
    }
    String::from_utf8(out).ok()
}

/// More than any of the `/proc` files read here holds.
const PROC_FILE_LIMIT: usize = 1 << 20;

/// `Key:   123 kB` lines of `/proc/self/status` and `/proc/meminfo`.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The process part (inside an engine call, for the storage handle).
fn process(engine: &Engine, started: SystemTime, clients: usize, stats: &mut Stats) {
    let now = SystemTime::now();
    let run_time = now.duration_since(started).unwrap_or_default();
    stats.process_id = std::process::id();
    stats.start_time = micros(started);
    stats.run_time = u64::try_from(run_time.as_micros()).unwrap_or(u64::MAX);
    stats.clients_count = count_u32(clients);
    stats.iggy_server_version = IGGY_SERVER_VERSION.to_string();
    stats.iggy_server_semver = Some(IGGY_SERVER_SEMVER);
    stats.os_name = std::env::consts::OS.to_string();
    if let Some(status) = read_text(engine, "/proc/self/status") {
        stats.memory_usage = field(&status, "VmRSS").unwrap_or(0).saturating_mul(1024);
        stats.threads_count = field(&status, "Threads")
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(0);
    }
    if let Some(meminfo) = read_text(engine, "/proc/meminfo") {
        stats.total_memory = field(&meminfo, "MemTotal")
            .unwrap_or(0)
            .saturating_mul(1024);
        stats.available_memory = field(&meminfo, "MemAvailable")
            .unwrap_or(0)
            .saturating_mul(1024);
    }
    if let Some(io) = read_text(engine, "/proc/self/io") {
        stats.read_bytes = field(&io, "read_bytes").unwrap_or(0);
        stats.written_bytes = field(&io, "write_bytes").unwrap_or(0);
    }
    // utime and stime (fields 14 and 15, in clock ticks of 1/100 s on Linux)
    // over the run time: the process's average CPU use.
    if let Some(stat) = read_text(engine, "/proc/self/stat")
        && let Some(after_name) = stat.rsplit_once(')').map(|(_, rest)| rest)
    {
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let cpu_secs = (ticks(11) + ticks(12)) as f64 / 100.0;
        let secs = run_time.as_secs_f64();
        if secs > 0.0 {
            stats.cpu_usage = (100.0 * cpu_secs / secs) as f32;
            stats.total_cpu_usage = stats.cpu_usage;
        }
    }
    let trim = |s: String| s.trim().to_string();
    stats.hostname = read_text(engine, "/proc/sys/kernel/hostname")
        .map(trim)
        .unwrap_or_default();
    stats.kernel_version = read_text(engine, "/proc/sys/kernel/osrelease")
        .map(trim)
        .unwrap_or_default();
    stats.os_version = stats.kernel_version.clone();
}

/// Iggy's `TransportEndpoints` (0 = not served).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Endpoints {
    pub(crate) tcp: u16,
    pub(crate) quic: u16,
    pub(crate) http: u16,
    pub(crate) websocket: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ClusterNode {
    pub(crate) name: String,
    pub(crate) ip: String,
    pub(crate) endpoints: Endpoints,
    pub(crate) role: &'static str,
    pub(crate) status: &'static str,
}

/// Iggy's `ClusterMetadata`: one healthy leader, this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterMetadata {
    pub(crate) name: String,
    pub(crate) nodes: Vec<ClusterNode>,
}

/// The addresses this node serves on, for the cluster metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Listeners {
    pub http: Option<std::net::SocketAddr>,
    pub tcp: Option<std::net::SocketAddr>,
}

impl Listeners {
    pub fn cluster(&self) -> ClusterMetadata {
        let ip = self
            .tcp
            .or(self.http)
            .map_or_else(|| "127.0.0.1".to_string(), |a| a.ip().to_string());
        ClusterMetadata {
            name: "sluice".to_string(),
            nodes: vec![ClusterNode {
                name: "sluice-node".to_string(),
                ip,
                endpoints: Endpoints {
                    tcp: self.tcp.map_or(0, |a| a.port()),
                    quic: 0,
                    http: self.http.map_or(0, |a| a.port()),
                    websocket: 0,
                },
                role: "leader",
                status: "healthy",
            }],
        }
    }
}
