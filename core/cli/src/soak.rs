//! `sluice soak`: the kill -9 soak (issue 7, item 1).
//!
//! It starts the real server binary (this executable with `server`) on a
//! temporary data directory, creates one stream with three topics (`topics`:
//! messages and offsets `persisted`; messages `buffered` under `persisted`
//! offsets; both `buffered`), and then runs cycles. Each cycle:
//!
//! 1. starts the server (a fresh port each time) and logs in;
//! 2. **verifies**, with no client running, everything the oracle knows:
//!    every purge obligation reaches `applied` (quiet period), the committed
//!    purge generation matches the purges acknowledged (at most one purge in
//!    flight at a kill may or may not have landed), every partition's log,
//!    every consumer and consumer-group offset, and `next` from each offset;
//! 3. runs `--clients` concurrent HTTP clients that send messages, poll with
//!    `next` (with and without `auto_commit`), scan from offset 0, store and
//!    delete consumer offsets and consumer-group offsets
//!    (`consumer_kind=consumer_group`) and purge one topic or the whole
//!    stream, checking every poll answer as it arrives; with `--powercut`, a
//!    seeded fraction of cycles has the file system refuse growth (ENOSPC)
//!    for a seeded stretch of operations;
//! 4. SIGKILLs the server at a seeded moment: after a seeded number of
//!    operations, or (one cycle in four) while a purge is in flight, each
//!    time after a seeded jitter of up to 4 ms. One restart in eight is also
//!    killed within 20 ms of listening, before the verification, while its
//!    first reconciler passes may be cleaning up. With `--powercut` a seeded
//!    fraction of cycles instead stops the clients, stores an offset on a
//!    buffered message no sync reached, kills and cuts in full
//!    (`continuation`: ADR 0010's path on purpose).
//!
//! After the last kill the server is started once more, verified, and
//! stopped with SIGTERM (which must exit 0).
//!
//! The oracle (see `Oracle`) records every request with two ticks of one
//! global logical clock, taken before the request is sent and after its
//! answer arrived, so "A was answered before B was sent" is known exactly.
//! A request without an answer (in flight at the kill) is *in doubt*: it may
//! or may not have happened. The checks:
//!
//! - an acknowledged `persisted` message sent after the last purge of its
//!   topic (that is, sent after the purge was answered) is served after every
//!   restart (P2); a `buffered` one need not survive a power cut, but while
//!   it exists it keeps the offset it was first served at;
//! - a message acknowledged before a purge was sent is never served again,
//!   by a live poll or after a restart, and a message once found absent never
//!   comes back (P1);
//! - an offset equals a value some linearization of the owner's offset
//!   operations and the purges of its topic allows, given their real-time
//!   order (so an offset stored before an acknowledged purge is never
//!   visible, and one stored after it is never lost); under `buffered`
//!   offsets any state such an order passes through after its last purge;
//! - each topic's committed generation counts the acknowledged purges that
//!   cover it (+ those in doubt that landed, a stream purge in every topic or
//!   in none), on every partition alike;
//! - a request refused with 507 `storage_full` or 503 `unavailable` is
//!   allowed only while ENOSPC is on, and changed nothing (a refused send is
//!   never served);
//! - offsets in a poll answer are consecutive, a partition's log starts at 0
//!   and is gap-free, each client's acknowledged messages keep its send order;
//! - `next` from the stored offset returns the log's whole rest after it
//!   (the complete fresh history without one), skipping nothing;
//! - every obligation is `applied`, none stuck or degraded, after a quiet
//!   period; no request answers a status the API does not promise.
//!
//! Determinism: the kill schedule and every client's sequence of operations
//! are functions of `--seed` (a SplitMix64 per cycle and per client). Thread
//! and disk timing decide how the clients interleave, how many operations run
//! before the kill and which request the kill cuts, so two runs with one seed
//! agree on the schedule, not in every detail. A violation names the seed and
//! the cycle and keeps the work directory with the server's log.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod continuation;
mod powercut;
mod topics;

use topics::{Durability, Scope};

const STREAM: &str = "soak";
/// Longest the quiet period may take before an obligation not yet `applied`
/// counts as a violation.
const QUIET_TIMEOUT: Duration = Duration::from_secs(30);
const START_TIMEOUT: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const SCAN_PAGE: u64 = 1000;

#[derive(clap::Args, Debug, Clone)]
pub struct SoakArgs {
    /// Number of kill cycles.
    #[arg(long, default_value_t = 1000)]
    cycles: u64,
    /// Seed of the kill schedule and of every client's operations.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Concurrent HTTP clients.
    #[arg(long, default_value_t = 4)]
    clients: u32,
    /// Partitions of each soaked topic.
    #[arg(long, default_value_t = 2)]
    partitions: u32,
    /// At most this many operations are started in a cycle before its kill.
    #[arg(long, default_value_t = 100)]
    max_ops: u64,
    /// Work directory (must not exist or be empty): the server's data goes to
    /// <DIR>/data and its log to <DIR>/server.log. Default: a new directory
    /// in the system's temporary directory, removed after a clean run.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Keep the server's data directory on the power-cut FUSE file system
    /// (`sluice-powercut`, needs /dev/fuse and root) and cut the power after
    /// every kill: unsynced changes are lost (issue 14).
    #[arg(long)]
    powercut: bool,
    /// With --powercut: percent of cuts that first let a seeded subset of
    /// the unsynced changes reach the disk (partial writeback).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=100))]
    partial_percent: u64,
    /// With --powercut: percent of purges before which an fsync of one
    /// partition's consumers/, groups/ or segments/ directory is set to fail.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=100))]
    fail_sync_percent: u64,
    /// With --powercut: percent of cycles in which the file system refuses
    /// every growth (ENOSPC) from a seeded operation on, for a seeded number
    /// of operations, then has space again while the server keeps serving.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=100))]
    enospc_percent: u64,
    /// With --powercut: percent of cycles that end, instead of a kill under
    /// load, with the clients stopped, an offset stored (persisted) on a
    /// message just sent to the `buffered` topic, a kill and a full power
    /// cut: the recovery must continue the log past the stored offset and
    /// `Next` must return what is sent next (ADR 0010).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=100))]
    continuation_percent: u64,
    /// Start the server with a test-only fault, to prove the soak catches it
    /// (a build whose sluice-server has `naive-purge` and sluice-storage
    /// `test-faults`, as `cargo test` builds it; a release build refuses).
    #[arg(long, value_enum)]
    test_fault: Option<TestFault>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum TestFault {
    /// Apache Iggy's purge order (SLUICE_TEST_NAIVE_PURGE=1).
    NaivePurge,
    /// Directory syncs that persist nothing (SLUICE_TEST_NOOP_DIR_SYNC=1).
    NoopDirSync,
}

impl TestFault {
    fn env(self) -> &'static str {
        match self {
            TestFault::NaivePurge => "SLUICE_TEST_NAIVE_PURGE",
            TestFault::NoopDirSync => "SLUICE_TEST_NOOP_DIR_SYNC",
        }
    }
}

/// Where the server runs: its data directory and any test-fault switch.
struct Target {
    data: PathBuf,
    fault: Option<TestFault>,
}

pub fn main(args: SoakArgs) -> ExitCode {
    if args.clients == 0 || args.partitions == 0 || args.max_ops == 0 {
        eprintln!("sluice soak: --clients, --partitions and --max-ops must be at least 1");
        return ExitCode::from(2);
    }
    let (work, chosen) = match &args.data_dir {
        Some(dir) => (dir.clone(), true),
        None => (
            std::env::temp_dir().join(format!("sluice-soak-{}-{}", args.seed, std::process::id())),
            false,
        ),
    };
    if let Err(e) = prepare_work_dir(&work) {
        eprintln!("sluice soak: {}: {e}", work.display());
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice soak: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let outcome = runtime.block_on(run(&args, &work));
    let elapsed = started.elapsed();
    match outcome {
        Ok(report) => {
            print!("{}", report.render(&args, &work, elapsed));
            if report.violations.is_empty() {
                if !chosen {
                    let _ = std::fs::remove_dir_all(&work);
                }
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!(
                "sluice soak: seed {} could not run: {e} (work directory kept: {})",
                args.seed,
                work.display()
            );
            ExitCode::from(2)
        }
    }
}

fn prepare_work_dir(work: &Path) -> Result<(), String> {
    if work.exists() {
        let mut entries = std::fs::read_dir(work).map_err(|e| e.to_string())?;
        if entries.next().is_some() {
            return Err("the work directory must not exist or be empty".into());
        }
    }
    std::fs::create_dir_all(work.join("data")).map_err(|e| e.to_string())
}

// ---- a seeded PRNG -----------------------------------------------------

/// SplitMix64: tiny, seedable, good enough to pick operations.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn for_parts(parts: &[u64]) -> Rng {
        let mut r = Rng(0x05ee_d0f5_11ce);
        for p in parts {
            r.0 ^= *p;
            r.0 = r.next_u64();
        }
        r
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }
}

// ---- base64 (payloads and partition ids are base64 in Iggy's JSON) -----

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn b64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0u32;
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = B64.iter().position(|b| *b == c)?;
        acc = (acc << 6) | u32::try_from(v).ok()?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

// ---- the oracle --------------------------------------------------------

/// `(generation, from, to)`: a recovery found a partition's log ending at
/// `from` with an offset `to - 1` stored, so the log continues at `to`.
type Continuation = (u64, u64, u64);

/// A value of the global logical clock.
type Tick = u64;
/// "Not answered": after every tick.
const NEVER: Tick = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Consumer,
    Group,
}

/// One offset: an individual consumer (id = client number) or a consumer
/// group (`g<client number>`), in one partition. Each is used by one client
/// only, so its operations are sequential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct OffKey {
    topic: u32,
    kind: Kind,
    client: u32,
    partition: u32,
}

impl OffKey {
    fn consumer_id(&self) -> String {
        match self.kind {
            Kind::Consumer => self.client.to_string(),
            Kind::Group => format!("g{}", self.client),
        }
    }

    fn kind_query(&self) -> &'static str {
        match self.kind {
            Kind::Consumer => "",
            Kind::Group => "&consumer_kind=consumer_group",
        }
    }
}

impl std::fmt::Display for OffKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Consumer => "consumer",
            Kind::Group => "group",
        };
        write!(
            f,
            "{kind} {} of {} partition {}",
            self.consumer_id(),
            topics::spec(self.topic).name,
            self.partition
        )
    }
}

/// What an offset can be: none, an offset, or unknown (an `auto_commit` poll
/// in doubt may have stored any offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Val {
    None,
    At(u64),
    Any,
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::None => write!(f, "none"),
            Val::At(o) => write!(f, "{o}"),
            Val::Any => write!(f, "any"),
        }
    }
}

#[derive(Debug, Clone)]
struct Msg {
    topic: u32,
    partition: u32,
    client: u32,
    /// The client's send sequence in its cycle: a client sends one batch at
    /// a time, so its messages must keep (cycle, seq) order in the log.
    seq: u64,
    cycle: u64,
    start: Tick,
    end: Tick,
    acked: bool,
    /// Found absent once (or could not have been sent): must never be served.
    never: bool,
}

#[derive(Debug, Clone)]
struct PurgeRec {
    scope: Scope,
    start: Tick,
    end: Tick,
    acked: bool,
    /// Decided at the next verification.
    effective: Option<bool>,
}

#[derive(Debug, Clone, Copy)]
struct OffOp {
    start: Tick,
    end: Tick,
    acked: bool,
    effect: Val,
    what: &'static str,
}

#[derive(Debug, Default, Clone)]
struct Counts {
    sends: u64,
    messages: u64,
    /// Of `messages`, those acknowledged under `buffered`.
    messages_buffered: u64,
    polls: u64,
    stores: u64,
    deletes: u64,
    /// Of `stores` and `deletes`, those acknowledged under `buffered`.
    offsets_buffered: u64,
    purges: u64,
    stream_purges: u64,
    refused: u64,
    /// Refused with 507 `storage_full` or 503 `unavailable` while the file
    /// system refused growth (not acknowledged: nothing may have changed).
    refused_full: u64,
    enospc_windows: u64,
    /// ENOSPC windows that ended while the server kept serving.
    enospc_closed_live: u64,
    /// Cycles that ended with an offset stored on an unsynced `buffered`
    /// message, a kill and a full cut (ADR 0010's path, on purpose).
    continuation_cycles: u64,
    /// Of those, recoveries that continued the log and whose `Next` then
    /// returned the message sent after the loss.
    continuation_probes: u64,
    in_doubt: u64,
    kills_in_purge: u64,
    kills_at_start: u64,
    cuts: u64,
    /// Recoveries that found an offset stored past the log's end, so the log
    /// continues after it (ADR 0010).
    continuations: u64,
}

impl Counts {
    fn acknowledged(&self) -> u64 {
        self.sends
            + self.polls
            + self.stores
            + self.deletes
            + self.purges
            + self.stream_purges
            + self.refused
    }
}

#[derive(Debug)]
struct Oracle {
    seed: u64,
    messages: HashMap<String, Msg>,
    purges: Vec<PurgeRec>,
    /// Offset operations since the last verification, per key.
    offset_ops: BTreeMap<OffKey, Vec<OffOp>>,
    /// Offsets observed at the last verification.
    offset_base: BTreeMap<OffKey, Val>,
    /// The tick of the last verification: every later operation starts after it.
    base_tick: Tick,
    /// Per topic, the committed purge generation.
    generations: Vec<u64>,
    /// Per topic, `(start, end)` of the last purge that took effect on it.
    fences: Vec<Option<(Tick, Tick)>>,
    /// When the current cycle's server was dead and reaped.
    kill_tick: Tick,
    counts: Counts,
    violations: Vec<String>,
    /// Every payload a poll served at `(topic, partition, offset)`: what a
    /// stored offset may have named.
    served_at: HashMap<(u32, u32, u64), Vec<String>>,
    /// The offset each payload was first served at: a message keeps its
    /// offset for as long as it exists.
    offset_of: HashMap<String, u64>,
    /// Per `(topic, partition)`, the ADR 0010 continuations seen at
    /// verifications: `(generation, from, to)`: the recovered log ended at
    /// `from` while an offset `to - 1 >= from` was stored, so the log
    /// continues at `to`.
    jumps: BTreeMap<(u32, u32), Vec<Continuation>>,
    /// Per `(topic, partition)`, `(generation, confirmed_at, floor)` of the
    /// last verification: a message sent after it in that generation must
    /// get an offset `>= floor` (past the log and every stored offset, ADR
    /// 0010).
    floors: BTreeMap<(u32, u32), (u64, Tick, u64)>,
    /// The offset an ADR 0010 cycle stored before its cut: the next
    /// verification probes that the log continues past it.
    continuation: Option<(OffKey, u64)>,
}

impl Oracle {
    fn violation(&mut self, cycle: u64, what: String) {
        let line = format!("seed {} cycle {cycle}: {what}", self.seed);
        eprintln!("VIOLATION {line}");
        self.violations.push(line);
    }

    /// The start of the last acknowledged purge of `topic` answered before
    /// `tick`: messages acknowledged before it must not be served at `tick`.
    fn live_fence(&self, topic: u32, tick: Tick) -> Option<Tick> {
        let mut fence = self.fence(topic).map(|(s, _)| s);
        for p in &self.purges {
            if p.acked && p.end < tick && p.scope.covers(topic) {
                fence = Some(fence.map_or(p.start, |f: Tick| f.max(p.start)));
            }
        }
        fence
    }

    fn fence(&self, topic: u32) -> Option<(Tick, Tick)> {
        self.fences.get(topic as usize).copied().flatten()
    }

    fn generation(&self, topic: u32) -> u64 {
        self.generations.get(topic as usize).copied().unwrap_or(0)
    }

    /// A message keeps the offset it was first served at; `problems` gets
    /// the one it moved from.
    fn note_offset(&mut self, payload: &str, offset: u64) -> Option<u64> {
        match self.offset_of.get(payload) {
            Some(first) if *first != offset => Some(*first),
            Some(_) => None,
            None => {
                self.offset_of.insert(payload.to_string(), offset);
                None
            }
        }
    }

    /// Checks one poll answer from a live server.
    fn check_poll(
        &mut self,
        cycle: u64,
        (topic, partition): (u32, u32),
        poll_start: Tick,
        what: &str,
        polled: &[(u64, String)],
    ) {
        let fence = self.live_fence(topic, poll_start);
        let jumps = jumps_of(self, (topic, partition));
        let mut problems = Vec::new();
        for w in polled.windows(2) {
            if w[1].0 != w[0].0 + 1 && !jumps.contains(&(w[0].0 + 1, w[1].0)) {
                problems.push(format!(
                    "{what}: offsets not consecutive ({} then {}; ADR 0010 continuations {jumps:?})",
                    w[0].0, w[1].0
                ));
            }
        }
        for (offset, payload) in polled {
            let seen = self
                .served_at
                .entry((topic, partition, *offset))
                .or_default();
            if !seen.contains(payload) {
                seen.push(payload.clone());
            }
            if let Some(first) = self.note_offset(payload, *offset) {
                problems.push(format!(
                    "{what}: served {payload} at offset {offset}, first served at offset {first}: a message changed its offset"
                ));
            }
            match self.messages.get(payload) {
                None => problems.push(format!(
                    "{what}: served a message never sent: offset {offset} payload {payload:?}"
                )),
                Some(m) if m.partition != partition || m.topic != topic => problems.push(format!(
                    "{what}: message {payload} of {} partition {} served from {} partition {partition}",
                    topics::spec(m.topic).name,
                    m.partition,
                    topics::spec(topic).name
                )),
                Some(m) if m.never => problems.push(format!(
                    "{what}: served message {payload} (offset {offset}) which an earlier verification found purged or never written"
                )),
                Some(m) if fence.is_some_and(|f| m.end < f) => problems.push(format!(
                    "{what}: served purged message {payload} (offset {offset}): acknowledged before a purge that was acknowledged before this poll"
                )),
                Some(_) => {}
            }
        }
        for p in problems {
            self.violation(cycle, p);
        }
    }
}

/// The offsets allowed after `ops` (one owner's, in order) and `purges`
/// (sequential, each resetting the offset), starting from `base`, in every
/// order that respects real time: if one was answered before the other was
/// sent, it comes first. Operations not acknowledged may also not have happened.
///
/// Under `persisted` offsets only the end of such an order is allowed. Under
/// `buffered` a power cut may keep any state the order passes through after
/// its last purge (whichever store or delete last reached the disk), but
/// never one from before that purge: the purge itself is persisted, and an
/// offset of an older generation must not move a consumer.
fn allowed_offsets(
    base: Val,
    ops: &[OffOp],
    purges: &[(Tick, Tick)],
    durability: Durability,
) -> BTreeSet<Val> {
    let mut out = BTreeSet::new();
    let mut seen = HashSet::new();
    let mut stack = vec![(0usize, 0usize, base)];
    while let Some((i, j, v)) = stack.pop() {
        if !seen.insert((i, j, v)) {
            continue;
        }
        let settled = match durability {
            Durability::Persisted => i == ops.len() && j == purges.len(),
            Durability::Buffered => j == purges.len(),
        };
        if settled {
            out.insert(v);
        }
        if let Some(op) = ops.get(i) {
            if purges.get(j).is_none_or(|p| p.1 >= op.start) {
                stack.push((i + 1, j, op.effect));
            }
            if !op.acked {
                stack.push((i + 1, j, v));
            }
        }
        if let Some(p) = purges.get(j)
            && ops.get(i).is_none_or(|op| op.end >= p.0)
        {
            stack.push((i, j + 1, Val::None));
        }
    }
    out
}

// ---- the server process --------------------------------------------------

struct Server {
    child: Child,
    base: String,
}

fn spawn_server(work: &Path, target: &Target, cycle: u64) -> Result<Server, String> {
    let log_path = work.join("server.log");
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("{}: {e}", log_path.display()))?;
    let _ = writeln!(
        log,
        "===== sluice soak: server start for cycle {cycle} ====="
    );
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut command = Command::new(exe);
    if let Some(fault) = target.fault {
        command.env(fault.env(), "1");
    }
    let mut child = command
        .args([
            "server",
            "--http-addr",
            "127.0.0.1:0",
            "--tcp-addr",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&target.data)
        .arg("--with-default-root-credentials")
        .env_remove("SLUICE_ROOT_USERNAME")
        .env_remove("SLUICE_ROOT_PASSWORD")
        .env_remove("IGGY_ROOT_USERNAME")
        .env_remove("IGGY_ROOT_PASSWORD")
        .env_remove("SLUICE_CONFIG")
        .env("SLUICE_RECONCILER_PERIOD_MS", "50")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| format!("cannot start the server: {e}"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| "the server's stdout is not piped".to_string())?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(addr) = line.strip_prefix("sluice listening on ") {
                let _ = tx.send(addr.trim().to_string());
                sent = true;
            }
            // Keep draining so the server never blocks on a full pipe.
        }
    });
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(base) => Ok(Server { child, base }),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let status = child
                .wait()
                .map_or_else(|e| e.to_string(), |s| s.to_string());
            Err(format!(
                "the server exited ({status}) before listening (log: {})",
                log_path.display()
            ))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!(
                "the server did not start within {START_TIMEOUT:?} (log: {})",
                log_path.display()
            ))
        }
    }
}

// ---- HTTP ------------------------------------------------------------------

#[derive(Debug)]
enum Reply {
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
    fn code(&self) -> Option<String> {
        match self {
            Reply::Answer { body, .. } => serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| v["code"].as_str().map(str::to_string)),
            _ => None,
        }
    }

    fn describe(&self) -> String {
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

async fn call(req: reqwest::RequestBuilder) -> Reply {
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

struct Ctx {
    seed: u64,
    cycle: u64,
    partitions: u32,
    base: String,
    token: String,
    http: reqwest::Client,
    clock: AtomicU64,
    oracle: Mutex<Oracle>,
    started_ops: AtomicU64,
    purge_in_flight: AtomicBool,
    killed: AtomicBool,
    purge_gate: tokio::sync::Mutex<()>,
    powercut: Option<Arc<powercut::PowerCut>>,
    /// Failing fsyncs fired before this cycle's load began.
    injected_at_start: u64,
    purges_started: AtomicU64,
    /// This cycle's ENOSPC window: the tick it began (NEVER: none) and the
    /// tick it ended (NEVER: not yet). A 507 or 503 is a refusal only for a
    /// request answered after it began and sent before it ended.
    enospc_on: AtomicU64,
    enospc_off: AtomicU64,
    /// Send sequence of the harness's own messages (client 0).
    harness_seq: AtomicU64,
}

impl Ctx {
    fn tick(&self) -> Tick {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    fn oracle(&self) -> MutexGuard<'_, Oracle> {
        // A panic inside a check would poison it; the record stays usable.
        self.oracle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn topic_url(&self, topic: u32, rest: &str) -> String {
        self.url(&format!(
            "/streams/{STREAM}/topics/{}{rest}",
            topics::spec(topic).name
        ))
    }

    /// Whether a 507 or 503 answered at `end` to a request sent at `start`
    /// falls in this cycle's ENOSPC window.
    fn in_enospc_window(&self, start: Tick, end: Tick) -> bool {
        self.enospc_on.load(Ordering::SeqCst) < end
            && start < self.enospc_off.load(Ordering::SeqCst)
    }

    fn get(&self, url: String) -> reqwest::RequestBuilder {
        self.http.get(url).bearer_auth(&self.token)
    }

    fn violation(&self, what: String) {
        self.oracle().violation(self.cycle, what);
    }
}

fn parse_polled(body: &str) -> Result<(u64, Vec<(u64, String)>), String> {
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
            .and_then(b64_decode)
            .ok_or("a polled message without a base64 payload")?;
        out.push((offset, String::from_utf8_lossy(&bytes).into_owned()));
    }
    Ok((current, out))
}

// ---- setup and verification ------------------------------------------------

async fn login(http: &reqwest::Client, base: &str) -> Result<String, String> {
    let reply = call(
        http.post(format!("{base}/users/login"))
            .json(&json!({"username": "iggy", "password": "iggy"})),
    )
    .await;
    match &reply {
        Reply::Answer { status: 200, body } => serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["access_token"]["token"].as_str().map(str::to_string))
            .ok_or_else(|| "login answer without a token".to_string()),
        other => Err(format!("login failed: {}", other.describe())),
    }
}

async fn expect_ok(req: reqwest::RequestBuilder, what: &str) -> Result<(), String> {
    match call(req).await {
        Reply::Answer { status, .. } if (200..300).contains(&status) => Ok(()),
        other => Err(format!("{what}: {}", other.describe())),
    }
}

async fn create_resources(ctx: &Ctx, clients: u32) -> Result<(), String> {
    let auth = |r: reqwest::RequestBuilder| r.bearer_auth(&ctx.token);
    expect_ok(
        auth(ctx.http.post(ctx.url("/streams"))).json(&json!({"name": STREAM})),
        "create stream",
    )
    .await?;
    for (index, spec) in topics::TOPICS.iter().enumerate() {
        let reply = call(
            auth(ctx.http.post(ctx.url(&format!("/streams/{STREAM}/topics")))).json(&json!({
                "name": spec.name,
                "partitions_count": ctx.partitions,
                "compression_algorithm": "none",
                "message_expiry": 0,
                "max_topic_size": 0,
                "options": {
                    "durability": spec.messages.as_str(),
                    "consumer_offset_durability": spec.offsets.as_str(),
                }
            })),
        )
        .await;
        let id = match &reply {
            Reply::Answer { status, body } if (200..300).contains(status) => {
                serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| v["id"].as_u64())
            }
            other => return Err(format!("create topic {}: {}", spec.name, other.describe())),
        };
        if id != Some(index as u64) {
            return Err(format!(
                "topic {} got id {id:?}, the soak expects {index} (ADR 0013 numbering)",
                spec.name
            ));
        }
        for k in 1..=clients {
            expect_ok(
                auth(
                    ctx.http
                        .post(ctx.topic_url(index as u32, "/consumer-groups")),
                )
                .json(&json!({"name": format!("g{k}")})),
                "create consumer group",
            )
            .await?;
        }
    }
    Ok(())
}

/// Waits for the quiet period's end: every obligation `applied`, nothing
/// stuck or degraded. Returns the committed generation of every partition,
/// per topic.
async fn quiet_generations(ctx: &Ctx) -> Result<Vec<Vec<u64>>, String> {
    let deadline = Instant::now() + QUIET_TIMEOUT;
    loop {
        let reply = call(ctx.get(ctx.url(&format!("/status/purge?stream_id={STREAM}")))).await;
        let Reply::Answer { status: 200, body } = &reply else {
            return Err(format!("GET /status/purge: {}", reply.describe()));
        };
        let v: Value = serde_json::from_str(body).map_err(|e| format!("status not JSON: {e}"))?;
        let rows = v["partitions"].as_array().cloned().unwrap_or_default();
        let mut pending = Vec::new();
        let mut generations = vec![Vec::new(); topics::count() as usize];
        for row in &rows {
            let topic = row["topic_id"].as_u64().unwrap_or(u64::MAX);
            match generations.get_mut(topic as usize) {
                Some(g) => g.push(row["committed_generation"].as_u64().unwrap_or(u64::MAX)),
                None => {
                    return Err(format!(
                        "GET /status/purge: a row of no soaked topic: {row}"
                    ));
                }
            }
            let ob = &row["obligation"];
            let settled = ob.is_null() || ob["state"] == "applied";
            if !settled || row["degraded"] == true || ob["degraded"] == true || ob["stuck"] == true
            {
                pending.push(row.to_string());
            }
        }
        if pending.is_empty()
            && generations
                .iter()
                .all(|g| g.len() == ctx.partitions as usize)
        {
            return Ok(generations);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "after a quiet period of {QUIET_TIMEOUT:?} not every obligation is applied: {}",
                pending.join("; ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn read_partition(
    ctx: &Ctx,
    topic: u32,
    partition: u32,
) -> Result<Vec<(u64, String)>, String> {
    let mut all = Vec::new();
    let mut next = 0u64;
    loop {
        let reply = call(ctx.get(ctx.topic_url(topic, &format!(
            "/messages?consumer_id=1&partition_id={partition}&kind=offset&value={next}&count={SCAN_PAGE}"
        ))))
        .await;
        let Reply::Answer { status: 200, body } = &reply else {
            return Err(format!(
                "reading {} partition {partition}: {}",
                topics::spec(topic).name,
                reply.describe()
            ));
        };
        let (_, page) = parse_polled(body)?;
        let done = (page.len() as u64) < SCAN_PAGE;
        if let Some((last, _)) = page.last() {
            next = last + 1;
        }
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

async fn read_offset(ctx: &Ctx, key: OffKey) -> Result<Val, String> {
    let reply = call(ctx.get(ctx.topic_url(
        key.topic,
        &format!(
            "/consumer-offsets?consumer_id={}&partition_id={}{}",
            key.consumer_id(),
            key.partition,
            key.kind_query()
        ),
    )))
    .await;
    match &reply {
        Reply::Answer { status: 200, body } => serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["stored_offset"].as_u64())
            .map(Val::At)
            .ok_or_else(|| format!("offset of {key}: no stored_offset in {body}")),
        Reply::Answer { status: 404, .. }
            if reply.code().as_deref() == Some("consumer_offset_not_found") =>
        {
            Ok(Val::None)
        }
        other => Err(format!("offset of {key}: {}", other.describe())),
    }
}

/// The verification after a (re)start, with no client running. Errors are
/// reported as violations by the caller; a failed request here is one too.
async fn verify(ctx: &Ctx, clients: u32) -> Result<(), String> {
    let t_v = ctx.tick();
    let _confirm = ctx.tick();
    let confirmed_at = t_v + 1;

    // 1. The quiet period and the committed generation of every topic.
    let generations = quiet_generations(ctx).await?;
    settle_purges(ctx, &generations, t_v);

    // 2. Every partition's log.
    let mut logs: BTreeMap<(u32, u32), Vec<(u64, String)>> = BTreeMap::new();
    for topic in 0..topics::count() {
        for partition in 0..ctx.partitions {
            let log = read_partition(ctx, topic, partition).await?;
            let mut o = ctx.oracle();
            check_log(&mut o, ctx.cycle, (topic, partition), &log, confirmed_at);
            logs.insert((topic, partition), log);
        }
    }
    // The highest offset stored per partition, for ADR 0010's continuation.
    let mut highest: BTreeMap<(u32, u32), u64> = BTreeMap::new();

    // 3. Every offset, and `next` from it.
    for key in offset_keys(clients, ctx.partitions) {
        let log = logs
            .get(&(key.topic, key.partition))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let observed = read_offset(ctx, key).await?;
        if let Val::At(s) = observed {
            let h = highest.entry((key.topic, key.partition)).or_insert(s);
            *h = (*h).max(s);
        }
        check_offset(&mut ctx.oracle(), ctx.cycle, key, observed, log);
        check_next(ctx, key, observed, log).await?;
    }
    let continuation = {
        let mut o = ctx.oracle();
        record_floors(&mut o, &logs, &highest, confirmed_at);
        o.base_tick = t_v;
        o.kill_tick = NEVER;
        o.continuation.take()
    };
    if let Some((key, stored)) = continuation {
        let end = logs
            .get(&(key.topic, key.partition))
            .and_then(|log| log.last())
            .map_or(0, |(last, _)| last + 1);
        continuation::probe(ctx, key, stored, end).await?;
    }
    Ok(())
}

/// After a verification: per partition, the offset new messages must reach
/// (past the log and every stored offset, ADR 0010), and the continuation
/// the recovery made, if any.
fn record_floors(
    o: &mut Oracle,
    logs: &BTreeMap<(u32, u32), Vec<(u64, String)>>,
    highest: &BTreeMap<(u32, u32), u64>,
    confirmed_at: Tick,
) {
    for ((topic, partition), log) in logs {
        let generation = o.generation(*topic);
        let end = log.last().map_or(0, |(last, _)| last + 1);
        let floor = match highest.get(&(*topic, *partition)) {
            Some(h) if h + 1 > end => {
                o.counts.continuations += 1;
                o.jumps
                    .entry((*topic, *partition))
                    .or_default()
                    .push((generation, end, h + 1));
                h + 1
            }
            _ => end,
        };
        o.floors
            .insert((*topic, *partition), (generation, confirmed_at, floor));
    }
}

/// Every offset the clients own: per topic, client, partition and kind.
fn offset_keys(clients: u32, partitions: u32) -> Vec<OffKey> {
    let mut keys = Vec::new();
    for topic in 0..topics::count() {
        for client in 1..=clients {
            for partition in 0..partitions {
                for kind in [Kind::Consumer, Kind::Group] {
                    keys.push(OffKey {
                        topic,
                        kind,
                        client,
                        partition,
                    });
                }
            }
        }
    }
    keys
}

/// Decides, from the committed generations, which purges since the last
/// verification took effect, and moves each topic's fence.
fn settle_purges(ctx: &Ctx, generations: &[Vec<u64>], t_v: Tick) {
    let cycle = ctx.cycle;
    let mut o = ctx.oracle();
    let mut observed = Vec::new();
    for (topic, gens) in generations.iter().enumerate() {
        let g = gens.first().copied().unwrap_or(0);
        if gens.iter().any(|x| *x != g) {
            o.violation(
                cycle,
                format!(
                    "partitions of {} disagree on the committed purge generation: {gens:?}",
                    topics::spec(topic as u32).name
                ),
            );
        }
        observed.push(g);
    }
    let kill_tick = o.kill_tick;
    let since = o.base_tick;
    // Purges in doubt that may have reached the server, in the order sent.
    let doubtful: Vec<usize> = o
        .purges
        .iter()
        .enumerate()
        .filter(|(_, p)| p.start > since && !p.acked && p.start < kill_tick)
        .map(|(i, _)| i)
        .collect();
    let mut landed = Vec::new();
    let mut explained = true;
    for (topic, g) in observed.iter().enumerate() {
        let topic = topic as u32;
        let acked = o
            .purges
            .iter()
            .filter(|p| p.start > since && p.acked && p.scope.covers(topic))
            .count() as u64;
        let expected = o.generation(topic) + acked;
        match g.checked_sub(expected) {
            Some(n) => landed.push(n),
            None => {
                explained = false;
                landed.push(0);
            }
        }
    }
    let scopes: Vec<Scope> = doubtful.iter().map(|i| o.purges[*i].scope).collect();
    let choice = explained
        .then(|| topics::landed_purges(&scopes, &landed))
        .flatten();
    let choice = match choice {
        Some(c) => c,
        None => {
            let msg = format!(
                "committed purge generations {observed:?} (per topic), from {:?} with the purges acknowledged since and these in doubt: {scopes:?}: an acknowledged purge was lost, landed in part of its scope, or a purge nobody sent landed",
                o.generations
            );
            o.violation(cycle, msg);
            vec![false; doubtful.len()]
        }
    };
    for (i, landed) in doubtful.iter().zip(choice) {
        if let Some(p) = o.purges.get_mut(*i) {
            p.effective = Some(landed);
            if landed {
                p.end = t_v;
            }
        }
    }
    for p in o.purges.iter_mut() {
        if p.start > since && p.effective.is_none() {
            p.effective = Some(p.acked);
        }
    }
    for topic in 0..topics::count() {
        let fence = o
            .purges
            .iter()
            .filter(|p| p.effective == Some(true) && p.scope.covers(topic))
            .map(|p| (p.start, p.end))
            .max();
        if let Some(f) = o.fences.get_mut(topic as usize) {
            *f = fence;
        }
    }
    o.generations = observed;
}

/// Checks one offset read at a verification against the operations on it
/// and the purges since the last one, and against ADR 0010.
fn check_offset(o: &mut Oracle, cycle: u64, key: OffKey, observed: Val, log: &[(u64, String)]) {
    // The log's end: one past its last message (it may have ADR 0010 gaps).
    let end = log.last().map_or(0, |(last, _)| last + 1);
    let since = o.base_tick;
    let kill_tick = o.kill_tick;
    let base = o.offset_base.get(&key).copied().unwrap_or(Val::None);
    let purges: Vec<(Tick, Tick)> = o
        .purges
        .iter()
        .filter(|p| p.start > since && p.effective == Some(true) && p.scope.covers(key.topic))
        .map(|p| (p.start, p.end))
        .collect();
    let ops: Vec<OffOp> = o
        .offset_ops
        .get(&key)
        .map(|ops| {
            ops.iter()
                .copied()
                .filter(|op| op.acked || op.start < kill_tick)
                .collect()
        })
        .unwrap_or_default();
    let durability = topics::spec(key.topic).offsets;
    let allowed = allowed_offsets(base, &ops, &purges, durability);
    if !allowed.contains(&observed) && !allowed.contains(&Val::Any) {
        let history: Vec<String> = ops
            .iter()
            .map(|op| {
                format!(
                    "{} {} [{}..{}]{}",
                    op.what,
                    op.effect,
                    op.start,
                    if op.end == NEVER {
                        "-".to_string()
                    } else {
                        op.end.to_string()
                    },
                    if op.acked { "" } else { " in doubt" }
                )
            })
            .collect();
        let allowed: Vec<String> = allowed.iter().map(Val::to_string).collect();
        o.violation(
            cycle,
            format!(
                "offset of {key} ({}) is {observed}, allowed {{{}}} (before: {base}; operations: {}; purges since: {purges:?})",
                durability.as_str(),
                allowed.join(", "),
                history.join(", ")
            ),
        );
    }
    // ADR 0010: an offset past the recovered log is legitimate only if the
    // message it named was never acknowledged, was purged, or was
    // acknowledged under `buffered`; one that had to survive is a violation.
    if let Val::At(s) = observed
        && s >= end
    {
        let fence = o.fence(key.topic);
        let named = o
            .served_at
            .get(&(key.topic, key.partition, s))
            .cloned()
            .unwrap_or_default();
        for payload in named {
            let required = o
                .messages
                .get(&payload)
                .is_some_and(|m| must_survive(m, fence));
            if required {
                o.violation(
                    cycle,
                    format!(
                        "offset of {key} is {s}, beyond the log ending at {end}, and names acknowledged message {payload}, which had to survive"
                    ),
                );
            }
        }
    }
    o.offset_base.insert(key, observed);
    o.offset_ops.remove(&key);
}

/// Whether a power cut must leave `m` in its log: acknowledged `persisted`,
/// not purged since (`fence`: its topic's last purge that took effect).
fn must_survive(m: &Msg, fence: Option<(Tick, Tick)>) -> bool {
    !m.never
        && m.acked
        && topics::spec(m.topic).messages == Durability::Persisted
        && fence.is_none_or(|(_, e)| e < m.start)
}

/// `next` from the stored offset returns the complete rest of the fresh
/// history: every message past the offset, in order, with none skipped (the
/// log may have ADR 0010 gaps), up to a page.
async fn check_next(
    ctx: &Ctx,
    key: OffKey,
    observed: Val,
    log: &[(u64, String)],
) -> Result<(), String> {
    let reply = call(ctx.get(ctx.topic_url(
        key.topic,
        &format!(
            "/messages?consumer_id={}&partition_id={}&kind=next&count={SCAN_PAGE}{}",
            key.consumer_id(),
            key.partition,
            key.kind_query()
        ),
    )))
    .await;
    let Reply::Answer { status: 200, body } = &reply else {
        return Err(format!("poll next for {key}: {}", reply.describe()));
    };
    let (_, polled) = parse_polled(body)?;
    let expected: Vec<&(u64, String)> = log
        .iter()
        .filter(|(offset, _)| match observed {
            Val::At(s) => *offset > s,
            _ => true,
        })
        .take(SCAN_PAGE as usize)
        .collect();
    let got: Vec<&(u64, String)> = polled.iter().collect();
    if got != expected {
        let end = log.last().map_or(0, |(last, _)| last + 1);
        let first = |v: &[&(u64, String)]| v.first().map(|(o, _)| *o);
        ctx.violation(format!(
            "poll next for {key} with stored offset {observed} in a log ending at {end} returned {} message(s) from offset {:?}, expected the {} from {:?}",
            got.len(),
            first(&got),
            expected.len(),
            first(&expected)
        ));
    }
    Ok(())
}

/// The ADR 0010 continuations allowed in a partition's log of the current
/// generation, as `(from, to)`.
fn jumps_of(o: &Oracle, (topic, partition): (u32, u32)) -> Vec<(u64, u64)> {
    let generation = o.generation(topic);
    o.jumps
        .get(&(topic, partition))
        .map(|jumps| {
            jumps
                .iter()
                .filter(|(g, _, _)| *g == generation)
                .map(|(_, from, to)| (*from, *to))
                .collect()
        })
        .unwrap_or_default()
}

/// A log starts at 0 and is gap-free, except that it may skip from `from`
/// straight to `to` for each allowed `(from, to)` (ADR 0010) and nowhere else.
fn gap_problem(jumps: &[(u64, u64)], log: &[(u64, String)]) -> Option<String> {
    let mut expected = 0u64;
    for (i, (offset, _)) in log.iter().enumerate() {
        if *offset != expected && !jumps.contains(&(expected, *offset)) {
            return Some(format!(
                "the log is not gap-free from 0 (but for ADR 0010 continuations {jumps:?}): position {i} holds offset {offset}, expected {expected}"
            ));
        }
        expected = offset + 1;
    }
    None
}

/// Checks one partition's whole log after a restart and records what it
/// proved: present messages are confirmed, absent ones may never come back.
fn check_log(
    o: &mut Oracle,
    cycle: u64,
    (topic, partition): (u32, u32),
    log: &[(u64, String)],
    confirmed_at: Tick,
) {
    let fence = o.fence(topic);
    let generation = o.generation(topic);
    let name = topics::spec(topic).name;
    let mut problems = Vec::new();
    if let Some(problem) = gap_problem(&jumps_of(o, (topic, partition)), log) {
        problems.push(format!("{name} partition {partition}: {problem}"));
    }
    // ADR 0010: a message sent after the last verification (in the same
    // generation) gets an offset past every offset stored at that recovery.
    let floor = o
        .floors
        .get(&(topic, partition))
        .copied()
        .filter(|(g, _, _)| *g == generation);
    let mut present = HashMap::new();
    for (offset, payload) in log {
        if let Some(first) = o.note_offset(payload, *offset) {
            problems.push(format!(
                "{name} partition {partition}: {payload} is at offset {offset}, first served at offset {first}: a message changed its offset"
            ));
        }
        if let Some((_, after, floor)) = floor
            && *offset < floor
            && o.messages.get(payload).is_some_and(|m| m.start > after)
        {
            problems.push(format!(
                "{name} partition {partition}: {payload}, sent after the last recovery, got offset {offset}, below {floor} (past the log and every stored offset then): Next may skip it"
            ));
        }
        if present.insert(payload.clone(), *offset).is_some() {
            problems.push(format!(
                "{name} partition {partition}: message {payload} is served twice"
            ));
        }
        match o.messages.get(payload) {
            None => problems.push(format!(
                "{name} partition {partition}: offset {offset} holds a message never sent: {payload:?}"
            )),
            Some(m) if m.partition != partition || m.topic != topic => problems.push(format!(
                "{name} partition {partition}: offset {offset} holds {payload}, sent to {} partition {}",
                topics::spec(m.topic).name,
                m.partition
            )),
            Some(m) if m.never => problems.push(format!(
                "{name} partition {partition}: offset {offset} holds {payload} (sent in cycle {}), which an earlier verification found purged, lost or never written: resurrected",
                m.cycle
            )),
            Some(m) if fence.is_some_and(|(s, _)| m.end < s) => problems.push(format!(
                "{name} partition {partition}: offset {offset} holds {payload} (cycle {}), acknowledged before a purge that took effect: a purged message is served",
                m.cycle
            )),
            Some(_) => {}
        }
    }
    // Lost acknowledged messages, and each client's order.
    // Per client: (offset, (cycle, seq), payload) of each present message.
    type Seen<'a> = Vec<(u64, (u64, u64), &'a str)>;
    let mut by_client: BTreeMap<u32, Seen<'_>> = BTreeMap::new();
    let mut lost = Vec::new();
    for (payload, m) in &o.messages {
        if m.partition != partition || m.topic != topic || m.never {
            continue;
        }
        match present.get(payload) {
            Some(offset) => by_client.entry(m.client).or_default().push((
                *offset,
                (m.cycle, m.seq),
                payload.as_str(),
            )),
            None => {
                if must_survive(m, fence) {
                    lost.push(format!("{payload} (cycle {})", m.cycle));
                }
            }
        }
    }
    if !lost.is_empty() {
        lost.sort();
        problems.push(format!(
            "{name} partition {partition}: {} acknowledged persisted message(s) lost: {}",
            lost.len(),
            lost.join(", ")
        ));
    }
    for (client, mut seen) in by_client {
        seen.sort();
        for w in seen.windows(2) {
            if w[1].1 < w[0].1 {
                problems.push(format!(
                    "{name} partition {partition}: client {client}'s messages out of send order: {} at offset {} before {} at offset {}",
                    w[0].2, w[0].0, w[1].2, w[1].0
                ));
            }
        }
    }
    for p in problems {
        o.violation(cycle, p);
    }
    for (payload, m) in o.messages.iter_mut() {
        if m.partition != partition || m.topic != topic || m.never {
            continue;
        }
        if present.contains_key(payload) {
            m.acked = true;
            m.start = confirmed_at;
            m.end = confirmed_at;
        } else {
            m.never = true;
        }
    }
}

// ---- the clients -------------------------------------------------------------

enum Step {
    Continue,
    Stop,
}

/// What a client last learnt of each `(topic, partition)`'s log end (the
/// poll answer's `current_offset`), to pick offsets worth storing.
struct Known {
    partitions: u32,
    current: Vec<Option<u64>>,
}

impl Known {
    fn new(partitions: u32) -> Known {
        Known {
            partitions,
            current: vec![None; (partitions * topics::count()) as usize],
        }
    }

    fn slot(&mut self, topic: u32, partition: u32) -> Option<&mut Option<u64>> {
        self.current
            .get_mut((topic * self.partitions + partition) as usize)
    }

    fn get(&self, topic: u32, partition: u32) -> Option<u64> {
        self.current
            .get((topic * self.partitions + partition) as usize)
            .copied()
            .flatten()
    }

    fn learn(&mut self, topic: u32, partition: u32, current: u64, polled: bool) {
        if let Some(slot) = self.slot(topic, partition) {
            *slot = (current > 0 || polled).then_some(current);
        }
    }
}

async fn client_loop(ctx: Arc<Ctx>, client: u32, mut rng: Rng) {
    let partitions = u64::from(ctx.partitions);
    let mut known = Known::new(ctx.partitions);
    let mut sent = 0u64;
    loop {
        if ctx.killed.load(Ordering::SeqCst) {
            return;
        }
        ctx.started_ops.fetch_add(1, Ordering::SeqCst);
        let topic = u32::try_from(rng.below(u64::from(topics::count()))).unwrap_or(0);
        let partition = u32::try_from(rng.below(partitions)).unwrap_or(0);
        let kind = if rng.below(2) == 0 {
            Kind::Consumer
        } else {
            Kind::Group
        };
        let key = OffKey {
            topic,
            kind,
            client,
            partition,
        };
        let at = (topic, partition);
        let roll = rng.below(100);
        let step = match roll {
            0..40 => {
                let n = rng.range(1, 3);
                sent += n;
                send(&ctx, client, at, sent - n, n).await
            }
            40..60 => {
                let auto_commit = rng.below(2) == 0;
                let count = rng.range(1, 10);
                poll_next(&ctx, key, count, auto_commit, &mut known).await
            }
            60..68 => scan(&ctx, client, at, &mut known).await,
            68..82 => match known.get(topic, partition) {
                Some(last) => {
                    let value = rng.range(0, last);
                    store(&ctx, key, value).await
                }
                None => match scan(&ctx, client, at, &mut known).await {
                    Step::Stop => Step::Stop,
                    Step::Continue => match known.get(topic, partition) {
                        Some(last) => store(&ctx, key, rng.range(0, last)).await,
                        None => Step::Continue,
                    },
                },
            },
            82..95 => delete(&ctx, key).await,
            _ => {
                // A topic purge of one of the topics, or a stream purge.
                let which = rng.below(u64::from(topics::count()) + 1);
                let scope = u32::try_from(which)
                    .ok()
                    .filter(|t| *t < topics::count())
                    .map_or(Scope::Stream, Scope::Topic);
                match ctx.purge_gate.try_lock() {
                    Ok(_gate) => purge(&ctx, scope).await,
                    Err(_) => {
                        let n = rng.range(1, 3);
                        sent += n;
                        send(&ctx, client, at, sent - n, n).await
                    }
                }
            }
        };
        if matches!(step, Step::Stop) {
            return;
        }
    }
}

/// The outcome of an operation that changes state, for the oracle.
enum Outcome {
    Acked(Tick),
    /// Refused with an answer that promises nothing changed.
    Refused,
    /// Refused because the disk was full (507 `storage_full`, or 503
    /// `unavailable` while a metadata save cannot be redone): not
    /// acknowledged, nothing changed.
    Full,
    InDoubt,
    NotSent,
}

fn classify(
    ctx: &Ctx,
    start: Tick,
    reply: &Reply,
    ok: u16,
    refusal: Option<(u16, &str)>,
    what: &str,
) -> Outcome {
    let end = ctx.tick();
    let code = reply.code();
    match reply {
        Reply::Answer { status, .. } if *status == ok => Outcome::Acked(end),
        Reply::Answer { status, .. }
            if refusal.is_some_and(|(s, c)| *status == s && code.as_deref() == Some(c)) =>
        {
            Outcome::Refused
        }
        // The file system refused growth while this request ran: a full
        // disk refuses, it never half-applies.
        Reply::Answer { status, .. }
            if matches!(
                (*status, code.as_deref()),
                (507, Some("storage_full")) | (503, Some("unavailable"))
            ) && ctx.in_enospc_window(start, end) =>
        {
            Outcome::Full
        }
        // A failing fsync armed by --powercut may fail the request that hit
        // it: its effect is then in doubt, as at a kill.
        Reply::Answer { status, .. }
            if *status >= 500
                && ctx
                    .powercut
                    .as_ref()
                    .is_some_and(|p| p.injected() > ctx.injected_at_start) =>
        {
            Outcome::InDoubt
        }
        Reply::Answer { .. } => {
            ctx.violation(format!("{what}: unexpected answer {}", reply.describe()));
            Outcome::InDoubt
        }
        Reply::NotSent => Outcome::NotSent,
        Reply::Lost(_) => Outcome::InDoubt,
    }
}

fn count(ctx: &Ctx, outcome: &Outcome, bump: impl FnOnce(&mut Counts)) -> Step {
    let mut o = ctx.oracle();
    match outcome {
        Outcome::Acked(_) => {
            bump(&mut o.counts);
            Step::Continue
        }
        Outcome::Refused => {
            o.counts.refused += 1;
            Step::Continue
        }
        Outcome::Full => {
            o.counts.refused_full += 1;
            Step::Continue
        }
        Outcome::InDoubt => {
            o.counts.in_doubt += 1;
            Step::Stop
        }
        Outcome::NotSent => Step::Stop,
    }
}

/// Sends `n` messages to one partition as `client` (0: the harness), its
/// sequence numbers `first..first + n`; returns the step and the payloads.
async fn send_payloads(
    ctx: &Ctx,
    client: u32,
    (topic, partition): (u32, u32),
    first: u64,
    n: u64,
) -> (Step, Option<Vec<String>>) {
    let seqs: Vec<u64> = (first..first + n).collect();
    let payloads: Vec<String> = seqs
        .iter()
        .map(|i| format!("s{}-c{}-t{topic}-k{client}-n{i}", ctx.seed, ctx.cycle))
        .collect();
    let start = ctx.tick();
    {
        let mut o = ctx.oracle();
        for (seq, p) in seqs.iter().zip(&payloads) {
            o.messages.insert(
                p.clone(),
                Msg {
                    topic,
                    partition,
                    client,
                    seq: *seq,
                    cycle: ctx.cycle,
                    start,
                    end: NEVER,
                    acked: false,
                    never: false,
                },
            );
        }
    }
    let messages: Vec<Value> = payloads
        .iter()
        .map(|p| json!({"id": 0, "payload": b64_encode(p.as_bytes())}))
        .collect();
    let reply = call(
        ctx.http
            .post(ctx.topic_url(topic, "/messages"))
            .bearer_auth(&ctx.token)
            .json(&json!({
                "partitioning": {"kind": "partition_id", "value": b64_encode(&partition.to_le_bytes())},
                "messages": messages,
            })),
    )
    .await;
    let outcome = classify(ctx, start, &reply, 201, None, "send");
    {
        let mut o = ctx.oracle();
        for p in &payloads {
            if let Some(m) = o.messages.get_mut(p) {
                match outcome {
                    Outcome::Acked(end) => {
                        m.acked = true;
                        m.end = end;
                    }
                    // Refused by a full disk: never written, so it must
                    // never be served.
                    Outcome::NotSent | Outcome::Full => m.never = true,
                    Outcome::Refused | Outcome::InDoubt => {}
                }
            }
        }
    }
    let acked = matches!(outcome, Outcome::Acked(_));
    let buffered = topics::spec(topic).messages == Durability::Buffered;
    let step = count(ctx, &outcome, |c| {
        c.sends += 1;
        c.messages += n;
        if buffered {
            c.messages_buffered += n;
        }
    });
    (step, acked.then_some(payloads))
}

async fn send(ctx: &Ctx, client: u32, at: (u32, u32), first: u64, n: u64) -> Step {
    send_payloads(ctx, client, at, first, n).await.0
}

async fn poll_next(
    ctx: &Ctx,
    key: OffKey,
    count_: u64,
    auto_commit: bool,
    known: &mut Known,
) -> Step {
    let start = ctx.tick();
    let index = if auto_commit {
        let mut o = ctx.oracle();
        let ops = o.offset_ops.entry(key).or_default();
        ops.push(OffOp {
            start,
            end: NEVER,
            acked: false,
            effect: Val::Any,
            what: "poll next auto_commit",
        });
        Some(ops.len() - 1)
    } else {
        None
    };
    let reply = call(ctx.get(ctx.topic_url(
        key.topic,
        &format!(
            "/messages?consumer_id={}&partition_id={}&kind=next&count={count_}&auto_commit={auto_commit}{}",
            key.consumer_id(),
            key.partition,
            key.kind_query()
        ),
    )))
    .await;
    let outcome = classify(ctx, start, &reply, 200, None, "poll next");
    let mut effect = None;
    if let (Outcome::Acked(_), Reply::Answer { body, .. }) = (&outcome, &reply) {
        match parse_polled(body) {
            Ok((cur, polled)) => {
                known.learn(key.topic, key.partition, cur, !polled.is_empty());
                effect = Some(polled.last().map(|(o, _)| *o));
                ctx.oracle().check_poll(
                    ctx.cycle,
                    (key.topic, key.partition),
                    start,
                    &format!("poll next {key}"),
                    &polled,
                );
            }
            Err(e) => ctx.violation(format!("poll next {key}: {e}")),
        }
    }
    if let Some(i) = index {
        let mut o = ctx.oracle();
        if let Some(op) = o.offset_ops.get_mut(&key).and_then(|ops| ops.get_mut(i)) {
            match (&outcome, effect) {
                (Outcome::Acked(end), Some(Some(last))) => {
                    op.acked = true;
                    op.end = *end;
                    op.effect = Val::At(last);
                }
                (Outcome::Acked(_) | Outcome::NotSent | Outcome::Full, _) => {
                    // Nothing polled, never sent, or refused: no commit happened.
                    op.acked = false;
                    op.start = NEVER;
                }
                _ => {}
            }
        }
        if let Some(ops) = o.offset_ops.get_mut(&key) {
            ops.retain(|op| op.start != NEVER);
        }
    }
    count(ctx, &outcome, |c| c.polls += 1)
}

async fn scan(ctx: &Ctx, client: u32, (topic, partition): (u32, u32), known: &mut Known) -> Step {
    let start = ctx.tick();
    let reply = call(ctx.get(ctx.topic_url(
        topic,
        &format!(
            "/messages?consumer_id={client}&partition_id={partition}&kind=offset&value=0&count=100"
        ),
    )))
    .await;
    let outcome = classify(ctx, start, &reply, 200, None, "scan");
    let name = topics::spec(topic).name;
    if let (Outcome::Acked(_), Reply::Answer { body, .. }) = (&outcome, &reply) {
        match parse_polled(body) {
            Ok((cur, polled)) => {
                known.learn(topic, partition, cur, !polled.is_empty());
                ctx.oracle().check_poll(
                    ctx.cycle,
                    (topic, partition),
                    start,
                    &format!("scan of {name} partition {partition}"),
                    &polled,
                );
            }
            Err(e) => ctx.violation(format!("scan of {name} partition {partition}: {e}")),
        }
    }
    count(ctx, &outcome, |c| c.polls += 1)
}

/// Records an offset operation before it is sent; `finish` completes it.
fn begin_offset_op(ctx: &Ctx, key: OffKey, effect: Val, what: &'static str) -> (Tick, usize) {
    let start = ctx.tick();
    let mut o = ctx.oracle();
    let ops = o.offset_ops.entry(key).or_default();
    ops.push(OffOp {
        start,
        end: NEVER,
        acked: false,
        effect,
        what,
    });
    (start, ops.len() - 1)
}

fn finish_offset_op(ctx: &Ctx, key: OffKey, index: usize, outcome: &Outcome) {
    let mut o = ctx.oracle();
    let Some(ops) = o.offset_ops.get_mut(&key) else {
        return;
    };
    match outcome {
        Outcome::Acked(end) => {
            if let Some(op) = ops.get_mut(index) {
                op.acked = true;
                op.end = *end;
            }
        }
        Outcome::Refused | Outcome::Full | Outcome::NotSent => {
            if index < ops.len() {
                ops.remove(index);
            }
        }
        Outcome::InDoubt => {}
    }
}

fn count_offset_op(ctx: &Ctx, key: OffKey, outcome: &Outcome, store: bool) -> Step {
    let buffered = topics::spec(key.topic).offsets == Durability::Buffered;
    count(ctx, outcome, |c| {
        if store {
            c.stores += 1;
        } else {
            c.deletes += 1;
        }
        if buffered {
            c.offsets_buffered += 1;
        }
    })
}

async fn store(ctx: &Ctx, key: OffKey, value: u64) -> Step {
    store_offset(ctx, key, value).await.0
}

/// Stores `value` as `key`'s offset; also says whether it was acknowledged.
async fn store_offset(ctx: &Ctx, key: OffKey, value: u64) -> (Step, bool) {
    let (start, index) = begin_offset_op(ctx, key, Val::At(value), "store");
    let mut body = json!({
        "consumer_id": key.consumer_id(),
        "partition_id": key.partition,
        "offset": value,
    });
    if key.kind == Kind::Group {
        body["consumer_kind"] = json!("consumer_group");
    }
    let reply = call(
        ctx.http
            .put(ctx.topic_url(key.topic, "/consumer-offsets"))
            .bearer_auth(&ctx.token)
            .json(&body),
    )
    .await;
    // An offset beyond the log (a purge got in between) is refused.
    let outcome = classify(
        ctx,
        start,
        &reply,
        204,
        Some((400, "invalid_offset")),
        "store offset",
    );
    finish_offset_op(ctx, key, index, &outcome);
    let acked = matches!(outcome, Outcome::Acked(_));
    (count_offset_op(ctx, key, &outcome, true), acked)
}

async fn delete(ctx: &Ctx, key: OffKey) -> Step {
    let (start, index) = begin_offset_op(ctx, key, Val::None, "delete");
    let reply = call(
        ctx.http
            .delete(ctx.topic_url(
                key.topic,
                &format!(
                    "/consumer-offsets/{}?partition_id={}{}",
                    key.consumer_id(),
                    key.partition,
                    key.kind_query()
                ),
            ))
            .bearer_auth(&ctx.token),
    )
    .await;
    // 404: there was no offset, which leaves it none, like a delete.
    let outcome = match classify(
        ctx,
        start,
        &reply,
        204,
        Some((404, "consumer_offset_not_found")),
        "delete offset",
    ) {
        Outcome::Refused => Outcome::Acked(ctx.tick()),
        other => other,
    };
    finish_offset_op(ctx, key, index, &outcome);
    count_offset_op(ctx, key, &outcome, false)
}

async fn purge(ctx: &Ctx, scope: Scope) -> Step {
    if let Some(pc) = &ctx.powercut {
        pc.before_purge(ctx.cycle, ctx.purges_started.fetch_add(1, Ordering::SeqCst));
    }
    ctx.purge_in_flight.store(true, Ordering::SeqCst);
    let start = ctx.tick();
    let index = {
        let mut o = ctx.oracle();
        o.purges.push(PurgeRec {
            scope,
            start,
            end: NEVER,
            acked: false,
            effective: None,
        });
        o.purges.len() - 1
    };
    let url = match scope {
        Scope::Topic(t) => ctx.topic_url(t, "/purge"),
        Scope::Stream => ctx.url(&format!("/streams/{STREAM}/purge")),
    };
    let reply = call(ctx.http.delete(url).bearer_auth(&ctx.token)).await;
    let outcome = classify(ctx, start, &reply, 204, None, &format!("purge {scope}"));
    {
        let mut o = ctx.oracle();
        match outcome {
            Outcome::Acked(end) => {
                if let Some(p) = o.purges.get_mut(index) {
                    p.acked = true;
                    p.end = end;
                }
            }
            Outcome::NotSent | Outcome::Refused | Outcome::Full => {
                if let Some(p) = o.purges.get_mut(index) {
                    p.effective = Some(false);
                    p.start = 0;
                }
            }
            Outcome::InDoubt => {}
        }
        o.purges.retain(|p| p.start != 0);
    }
    ctx.purge_in_flight.store(false, Ordering::SeqCst);
    count(ctx, &outcome, |c| match scope {
        Scope::Topic(_) => c.purges += 1,
        Scope::Stream => c.stream_purges += 1,
    })
}

// ---- the cycles ----------------------------------------------------------------

struct Report {
    cycles: u64,
    counts: Counts,
    violations: Vec<String>,
    powercut: Option<(powercut::CutCounts, sluice_powercut::Stats)>,
}

impl Report {
    fn render(&self, args: &SoakArgs, work: &Path, elapsed: Duration) -> String {
        let c = &self.counts;
        let mut out = String::new();
        let layout: Vec<String> = topics::TOPICS
            .iter()
            .map(|t| {
                format!(
                    "{} (messages {}, offsets {})",
                    t.name,
                    t.messages.as_str(),
                    t.offsets.as_str()
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "sluice soak: seed {}, {} clients, {} partitions per topic; topics {}",
            args.seed,
            args.clients,
            args.partitions,
            layout.join(", ")
        );
        let _ = writeln!(
            out,
            "cycles run: {} (one SIGKILL each under load, {} of them while a purge was in flight; {} more right after a restart)",
            self.cycles, c.kills_in_purge, c.kills_at_start
        );
        let _ = writeln!(
            out,
            "operations acknowledged: {} (sends {} with {} messages, {} of them buffered; polls {}; offset stores {}, offset deletes {}, {} of them buffered; topic purges {}, stream purges {}; refused {}); in doubt at a kill: {}",
            c.acknowledged(),
            c.sends,
            c.messages,
            c.messages_buffered,
            c.polls,
            c.stores,
            c.deletes,
            c.offsets_buffered,
            c.purges,
            c.stream_purges,
            c.refused,
            c.in_doubt
        );
        if let Some((cuts, fs)) = &self.powercut {
            let _ = writeln!(
                out,
                "power cuts: {} ({} full, {} partial writeback); failing fsyncs armed before purges {}, fired {}; unsynced changes dropped {}, written back by partial cuts {}; fsyncs served: {} file, {} directory",
                self.counts.cuts,
                cuts.full,
                cuts.partial,
                cuts.armed,
                fs.injected_sync_failures,
                fs.dropped_changes,
                fs.written_back,
                fs.file_syncs,
                fs.dir_syncs
            );
            let _ = writeln!(
                out,
                "enospc windows: {} ({} ended while the server kept serving); growths refused {}; requests refused for a full disk {} (not acknowledged)",
                c.enospc_windows, c.enospc_closed_live, fs.enospc_refusals, c.refused_full
            );
        }
        let _ = writeln!(
            out,
            "recoveries that continue the log past a stored offset (ADR 0010): {} ({} cycles stored one on purpose before a full cut; Next then returned the next message sent {} time(s))",
            c.continuations, c.continuation_cycles, c.continuation_probes
        );
        if let Some(f) = args.test_fault {
            let _ = writeln!(out, "test fault in the server: {f:?}");
        }
        let _ = writeln!(out, "violations: {}", self.violations.len());
        for v in &self.violations {
            let _ = writeln!(out, "  - {v}");
        }
        let _ = writeln!(out, "wall time: {:.1} s", elapsed.as_secs_f64());
        if !self.violations.is_empty() {
            let _ = writeln!(out, "server log: {}", work.join("server.log").display());
        }
        let mut extra = String::new();
        if args.powercut {
            let _ = write!(
                extra,
                " --powercut --partial-percent {} --fail-sync-percent {} --enospc-percent {} --continuation-percent {}",
                args.partial_percent,
                args.fail_sync_percent,
                args.enospc_percent,
                args.continuation_percent
            );
        }
        if let Some(f) = args.test_fault {
            let _ = write!(
                extra,
                " --test-fault {}",
                clap::ValueEnum::to_possible_value(&f)
                    .map_or_else(String::new, |v| v.get_name().to_string())
            );
        }
        let _ = writeln!(
            out,
            "reproduce: sluice soak --seed {} --cycles {} --clients {} --partitions {} --max-ops {}{extra}",
            args.seed, args.cycles, args.clients, args.partitions, args.max_ops
        );
        out
    }
}

async fn run(args: &SoakArgs, work: &Path) -> Result<Report, String> {
    let mut oracle = Oracle {
        seed: args.seed,
        messages: HashMap::new(),
        purges: Vec::new(),
        offset_ops: BTreeMap::new(),
        offset_base: BTreeMap::new(),
        base_tick: 0,
        generations: vec![0; topics::count() as usize],
        fences: vec![None; topics::count() as usize],
        kill_tick: NEVER,
        counts: Counts::default(),
        violations: Vec::new(),
        served_at: HashMap::new(),
        offset_of: HashMap::new(),
        jumps: BTreeMap::new(),
        floors: BTreeMap::new(),
        continuation: None,
    };
    let mut clock = 1u64;
    let mut cycles_run = 0u64;
    let pc = if args.powercut {
        Some(Arc::new(powercut::PowerCut::start(
            work,
            args.seed,
            args.partial_percent,
            args.fail_sync_percent,
        )?))
    } else {
        None
    };
    let target = Target {
        data: pc
            .as_ref()
            .map_or_else(|| work.join("data"), |p| p.data_dir()),
        fault: args.test_fault,
    };
    // A cut after a kill; a broken file system invariant ends the run.
    let cut = |cycle: u64, which: u64, full: bool, oracle: &mut Oracle| -> Result<(), String> {
        if let Some(p) = &pc {
            let what = p.cut_after_kill(cycle, which, full)?;
            tracing::debug!(cycle, what, "soak: power cut");
            oracle.counts.cuts += 1;
        }
        Ok(())
    };
    for cycle in 0..=args.cycles {
        let last = cycle == args.cycles;
        // One restart in eight is killed again right after it listens,
        // while its first reconciler passes may be finishing a purge's
        // cleanup; nothing was sent to it, so the oracle is unchanged.
        let mut early = Rng::for_parts(&[args.seed, cycle, u64::MAX - 1]);
        if cycle > 0 && early.below(8) == 0 {
            let jitter = Duration::from_micros(early.below(20_000));
            match spawn_server(work, &target, cycle) {
                Ok(mut s) => {
                    tokio::time::sleep(jitter).await;
                    let _ = s.child.kill();
                    let _ = s.child.wait();
                    oracle.counts.kills_at_start += 1;
                    cut(cycle, 1, false, &mut oracle)?;
                }
                Err(e) => {
                    oracle.violation(
                        cycle,
                        format!("the server does not come back after the kill: {e}"),
                    );
                    break;
                }
            }
        }
        let mut server = match spawn_server(work, &target, cycle) {
            Ok(s) => s,
            Err(e) => {
                if cycle == 0 {
                    return Err(e);
                }
                oracle.violation(
                    cycle,
                    format!("the server does not come back after the kill: {e}"),
                );
                break;
            }
        };
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())?;
        let token = match login(&http, &server.base).await {
            Ok(t) => t,
            Err(e) => {
                let _ = server.child.kill();
                let _ = server.child.wait();
                if cycle == 0 {
                    return Err(e);
                }
                oracle.violation(cycle, e);
                break;
            }
        };
        let ctx = Arc::new(Ctx {
            seed: args.seed,
            cycle,
            partitions: args.partitions,
            base: server.base.clone(),
            token,
            http,
            clock: AtomicU64::new(clock),
            oracle: Mutex::new(oracle),
            started_ops: AtomicU64::new(0),
            purge_in_flight: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            purge_gate: tokio::sync::Mutex::new(()),
            powercut: pc.clone(),
            injected_at_start: pc.as_ref().map_or(0, |p| p.injected()),
            purges_started: AtomicU64::new(0),
            enospc_on: AtomicU64::new(NEVER),
            enospc_off: AtomicU64::new(NEVER),
            harness_seq: AtomicU64::new(0),
        });
        if cycle == 0
            && let Err(e) = create_resources(&ctx, args.clients).await
        {
            let _ = server.child.kill();
            let _ = server.child.wait();
            return Err(e);
        }
        if let Err(e) = verify(&ctx, args.clients).await {
            ctx.violation(format!("verification could not finish: {e}"));
            let _ = server.child.kill();
            let _ = server.child.wait();
            oracle = take_oracle(ctx)?;
            break;
        }
        if last {
            // The final check is done: a graceful stop must exit 0.
            stop_gracefully(&ctx, &mut server.child).await;
            oracle = take_oracle(ctx)?;
            break;
        }

        // Load, and the kill.
        let mut schedule = Rng::for_parts(&[args.seed, cycle, u64::MAX]);
        let kill_after = schedule.range(1, args.max_ops);
        let plan = CyclePlan {
            kill_after,
            during_purge: schedule.below(4) == 0,
            jitter: Duration::from_micros(schedule.below(4000)),
            ..CyclePlan::draw(args, cycle, kill_after)
        };
        let mut tasks = Vec::new();
        for client in 1..=args.clients {
            let rng = Rng::for_parts(&[args.seed, cycle, u64::from(client)]);
            tasks.push(tokio::spawn(client_loop(ctx.clone(), client, rng)));
        }
        let killer_ctx = ctx.clone();
        let child = server.child;
        let killer = tokio::task::spawn_blocking(move || kill_under_load(&killer_ctx, child, plan));
        let (in_purge, alive) = killer.await.map_err(|e| e.to_string())?;
        for t in tasks {
            t.await.map_err(|e| format!("a client task failed: {e}"))?;
        }
        if let Some(mut child) = alive {
            // The clients have stopped and the server still runs: store an
            // offset on a buffered message no sync has reached, then kill.
            let mut rng = Rng::for_parts(&[args.seed, cycle, u64::MAX - 5]);
            continuation::store_past_the_durable_log(&ctx, &mut rng).await;
            let _ = child.kill();
            let _ = child.wait();
            let kill_tick = ctx.tick();
            ctx.oracle().kill_tick = kill_tick;
        }
        if in_purge {
            ctx.oracle().counts.kills_in_purge += 1;
        }
        clock = ctx.clock.load(Ordering::SeqCst);
        oracle = take_oracle(ctx)?;
        cut(cycle, 0, plan.full_cut, &mut oracle)?;
        cycles_run += 1;
        if args.cycles >= 20 && (cycle + 1) % (args.cycles / 20).max(1) == 0 {
            eprintln!(
                "sluice soak: {} of {} cycles, {} operations acknowledged, {} violations",
                cycle + 1,
                args.cycles,
                oracle.counts.acknowledged(),
                oracle.violations.len()
            );
        }
    }
    Ok(Report {
        cycles: cycles_run,
        counts: oracle.counts,
        violations: oracle.violations,
        powercut: pc.as_ref().map(|p| p.summary()),
    })
}

/// How one cycle's load ends, drawn from the seed before it starts.
#[derive(Debug, Clone, Copy, Default)]
struct CyclePlan {
    /// Kill after this many operations were started.
    kill_after: u64,
    /// Or as soon as a purge is in flight.
    during_purge: bool,
    jitter: Duration,
    /// With --powercut: the file system refuses growth from the `.0`-th
    /// started operation to the `.1`-th (or to the kill).
    enospc: Option<(u64, u64)>,
    /// With --powercut: stop the clients instead of killing under load, then
    /// run the ADR 0010 cycle (an offset stored on an unsynced buffered
    /// message, a kill, a full cut).
    continuation: bool,
    /// The cut after the kill drops every unsynced change.
    full_cut: bool,
}

impl CyclePlan {
    /// The --powercut parts, from their own seeded stream (so the kill
    /// schedule above is the same with and without them).
    fn draw(args: &SoakArgs, cycle: u64, kill_after: u64) -> CyclePlan {
        let mut rng = Rng::for_parts(&[args.seed, cycle, u64::MAX - 4]);
        if !args.powercut {
            return CyclePlan::default();
        }
        // Most windows end with operations left before the kill (the server
        // must serve again); one in four lasts until the kill.
        let enospc = (rng.below(100) < args.enospc_percent).then(|| {
            let on = rng.below(kill_after / 2 + 1);
            let room = kill_after.saturating_sub(on + 1);
            let off = if room == 0 || rng.below(4) == 0 {
                u64::MAX
            } else {
                on + rng.range(1, room)
            };
            (on, off)
        });
        let continuation = rng.below(100) < args.continuation_percent;
        CyclePlan {
            enospc,
            continuation,
            full_cut: continuation,
            ..CyclePlan::default()
        }
    }
}

/// The killer (a blocking thread): switches the ENOSPC window on and off at
/// its operation counts, then kills the server (after the plan's jitter) and
/// reaps it, or, in a continuation cycle, only stops the clients and hands
/// the live server back. Returns whether the kill came while a purge was in
/// flight, and the server if it still runs.
fn kill_under_load(ctx: &Ctx, mut child: Child, plan: CyclePlan) -> (bool, Option<Child>) {
    let began = Instant::now();
    let mut in_purge = false;
    let mut window = plan.enospc;
    let mut full = false;
    let switch = |on: bool| {
        if let Some(pc) = &ctx.powercut {
            if on {
                // The window opens before the switch and closes after it,
                // so every refusal it causes falls inside it.
                ctx.enospc_on.store(ctx.tick(), Ordering::SeqCst);
                pc.set_enospc(true);
                ctx.oracle().counts.enospc_windows += 1;
            } else {
                pc.set_enospc(false);
                ctx.enospc_off.store(ctx.tick(), Ordering::SeqCst);
            }
        }
    };
    loop {
        let started = ctx.started_ops.load(Ordering::SeqCst);
        if let Some((on_at, off_at)) = window {
            if !full && started >= on_at {
                switch(true);
                full = true;
            }
            if full && started >= off_at {
                switch(false);
                ctx.oracle().counts.enospc_closed_live += 1;
                full = false;
                window = None;
            }
        }
        if started >= plan.kill_after {
            break;
        }
        if plan.during_purge && !plan.continuation && ctx.purge_in_flight.load(Ordering::SeqCst) {
            in_purge = true;
            break;
        }
        if began.elapsed() > REQUEST_TIMEOUT {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    if plan.continuation {
        if full {
            switch(false);
            ctx.oracle().counts.enospc_closed_live += 1;
        }
        ctx.killed.store(true, Ordering::SeqCst);
        return (false, Some(child));
    }
    std::thread::sleep(plan.jitter);
    in_purge = in_purge && ctx.purge_in_flight.load(Ordering::SeqCst);
    let _ = child.kill();
    let _ = child.wait();
    if full {
        // Space returns with the power; nothing is served meanwhile.
        switch(false);
    }
    let kill_tick = ctx.tick();
    ctx.oracle().kill_tick = kill_tick;
    ctx.killed.store(true, Ordering::SeqCst);
    (in_purge, None)
}

fn take_oracle(ctx: Arc<Ctx>) -> Result<Oracle, String> {
    let ctx = Arc::try_unwrap(ctx).map_err(|_| "a client still holds the cycle".to_string())?;
    Ok(ctx
        .oracle
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner))
}

async fn stop_gracefully(ctx: &Ctx, child: &mut Child) {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    if !sent.is_ok_and(|s| s.success()) {
        ctx.violation("could not send SIGTERM to the server".into());
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if !status.success() {
                    ctx.violation(format!("the server exited with {status} after SIGTERM"));
                }
                return;
            }
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => {
                ctx.violation("the server did not exit within 30 s of SIGTERM".into());
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(offsets: &[u64]) -> Vec<(u64, String)> {
        offsets.iter().map(|o| (*o, format!("m{o}"))).collect()
    }

    #[test]
    fn the_log_may_skip_only_at_an_adr_0010_continuation() {
        // Given a recovery that found the log ending at 2 and an offset 4 stored,
        let jumps = [(2, 5)];
        // then skipping exactly from 2 to 5 is allowed,
        assert_eq!(gap_problem(&jumps, &log_of(&[0, 1, 5, 6])), None);
        assert_eq!(gap_problem(&jumps, &log_of(&[0, 1])), None);
        // and every other gap, or a start past 0, is not.
        assert!(gap_problem(&jumps, &log_of(&[0, 1, 4])).is_some());
        assert!(gap_problem(&jumps, &log_of(&[0, 2])).is_some());
        assert!(gap_problem(&[], &log_of(&[0, 1, 5])).is_some());
        assert!(gap_problem(&[], &log_of(&[1])).is_some());
        assert_eq!(gap_problem(&[(0, 3)], &log_of(&[3, 4])), None);
    }

    #[test]
    fn base64_round_trips() {
        for s in ["", "a", "ab", "abc", "abcd", "s1-c2-k3-n4"] {
            let e = b64_encode(s.as_bytes());
            assert_eq!(b64_decode(&e).as_deref(), Some(s.as_bytes()));
        }
        assert_eq!(b64_encode(b"hello"), "aGVsbG8=");
        assert_eq!(b64_encode(&1u32.to_le_bytes()), "AQAAAA==");
    }

    fn op(start: Tick, end: Tick, acked: bool, effect: Val) -> OffOp {
        OffOp {
            start,
            end,
            acked,
            effect,
            what: "t",
        }
    }

    #[test]
    fn a_store_answered_before_a_purge_was_sent_is_gone() {
        let ops = [op(1, 2, true, Val::At(5))];
        let allowed = allowed_offsets(Val::None, &ops, &[(3, 4)], Durability::Persisted);
        assert_eq!(allowed, BTreeSet::from([Val::None]));
    }

    #[test]
    fn a_store_sent_after_a_purge_was_answered_survives_it() {
        let ops = [op(5, 6, true, Val::At(1))];
        let allowed = allowed_offsets(Val::At(9), &ops, &[(3, 4)], Durability::Persisted);
        assert_eq!(allowed, BTreeSet::from([Val::At(1)]));
    }

    #[test]
    fn overlapping_or_in_doubt_operations_allow_both_outcomes() {
        let ops = [op(1, 5, true, Val::At(2))];
        let allowed = allowed_offsets(Val::None, &ops, &[(3, 4)], Durability::Persisted);
        assert_eq!(allowed, BTreeSet::from([Val::None, Val::At(2)]));
        let ops = [op(1, 2, true, Val::At(2)), op(3, NEVER, false, Val::At(7))];
        let allowed = allowed_offsets(Val::None, &ops, &[], Durability::Persisted);
        assert_eq!(allowed, BTreeSet::from([Val::At(2), Val::At(7)]));
    }
}
