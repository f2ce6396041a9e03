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
//!    every consumer and consumer-group offset, and `next` from each offset,
//!    and every user the clients own;
//! 3. runs `--clients` concurrent HTTP clients that send messages, poll with
//!    `next` (with and without `auto_commit`), scan from offset 0, store and
//!    delete consumer offsets and consumer-group offsets
//!    (`consumer_kind=consumer_group`) and purge one topic or the whole
//!    stream, and after a seeded share of topic purges delete the topic (or
//!    its last partitions) and create it again under the same ids while the
//!    purge's cleanup may still run (`recreate`, issue 27), checking every
//!    poll answer as it arrives; a seeded share of each client's operations
//!    (`--users-percent`) changes one of the few users it owns (`userstep`,
//!    issue 29): creates it, sets its permissions (seeded sets of global
//!    flags and grants on the soak's stream and topics), activates or
//!    deactivates it, changes its password, deletes it, or, logged in as
//!    it, creates or deletes one of its personal access tokens; with
//!    `--powercut`, a seeded fraction of
//!    cycles has the file system refuse growth (ENOSPC) for a seeded stretch
//!    of operations;
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
//!   comes back (P1); a re-creation under the same ids is judged as such a
//!   new history, from generation 0, and whether one in doubt landed is read
//!   from each partition's `created_at`;
//! - an offset is one `sluice_sim::ack::OffsetHistory::may_show` allows:
//!   the owner's operations are folded into its history in order, a purge of
//!   its topic starts the history over, and an operation that overlapped
//!   that purge in real time may have taken effect on either side of it (so
//!   an offset stored before an acknowledged purge is never visible, and one
//!   stored after it is never lost); only after a power cut may a `buffered`
//!   offset roll back, and never below what the last verification read;
//! - each partition's committed generation is the one its
//!   `sluice_sim::ack::Generation` observes: the acknowledged purges that
//!   cover it since its last re-creation, plus at most one in doubt that
//!   landed (a stream purge in every topic or in none, a topic purge in every
//!   partition or in none);
//! - a request refused with 507 `storage_full` or 503 `unavailable` is
//!   allowed only while ENOSPC is on, one refused with a 404 for its topic,
//!   partition or group only while a re-creation of it runs, and either
//!   changed nothing (a refused send is never served);
//! - offsets in a poll answer are consecutive, a partition's log starts at 0
//!   and is gap-free (but for ADR 0010 continuations and, after a power cut,
//!   a sealed segment's lost tail: ADR 0004 §3, in a `buffered` log, or in a
//!   `persisted` one where nothing after it was acknowledged), each client's
//!   acknowledged messages keep its send order;
//! - `next` from the stored offset returns the log's whole rest after it
//!   (the complete fresh history without one), skipping nothing;
//! - every user the clients own is as its last acknowledged change left it,
//!   or as its one change in flight at the kill would have, whole (`users`):
//!   its existence, status and permissions as root reads them, which
//!   password logs in, which tokens it lists and which secrets we know log
//!   in as it; never a permission set nobody asked for, never a user or a
//!   token whose deletion was acknowledged (no such token logs in again);
//! - every obligation is `applied`, none stuck or degraded, after a quiet
//!   period; no request answers a status the API does not promise.
//!
//! Determinism: the kill schedule and every client's sequence of operations
//! are functions of `--seed` (a `SimRng` per cycle and per client, seeded by
//! `SimRng::from_parts`; a client's users changes from a stream of their
//! own). Thread and disk timing decide how the clients interleave, how many
//! operations run before the kill and which request the kill cuts (and so
//! which state of its users a client's next change starts from), so two
//! runs with one seed agree on the schedule, not in every detail. A violation names the seed and
//! the cycle and keeps the work directory with the server's log.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_storage::sim::SimRng;

mod continuation;
mod powercut;
mod topics;

mod client;
mod oracle;
mod recreate;
mod server;
mod users;
mod userstep;
mod verify;
mod workload;

use client::{Ctx, REQUEST_TIMEOUT, login};
use oracle::{Counts, NEVER, Oracle};
use server::{kill_under_load, spawn_server, stop_gracefully};
use verify::{create_resources, verify};
use workload::client_loop;

const STREAM: &str = "soak";
/// Longest the quiet period may take before an obligation not yet `applied`
/// counts as a violation.
const QUIET_TIMEOUT: Duration = Duration::from_secs(30);
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
    /// Segment size of every soaked topic (bytes, 4096 to 1 GiB): small by
    /// default so that every few sends roll a segment, and a power cut can
    /// take an older segment's unsynced tail or a new segment's name.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(4096..=1 << 30))]
    segment_size: u64,
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
    /// Percent of topic purges after which the purging client deletes the
    /// topic, or its last partitions, and creates it again under the same
    /// ids while the purge's cleanup may still run and the other clients
    /// keep using it (issue 27). With --powercut a failing directory sync is
    /// first armed, in --fail-sync-percent of them, on a directory of the
    /// new incarnation.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=100))]
    recreate_percent: u64,
    /// Percent of each client's operations that change one of its users
    /// (issue 29): create it, set its permissions, activate or deactivate
    /// it, change its password, delete it, or, logged in as it, create or
    /// delete one of its personal access tokens. Drawn from the client's own
    /// seeded stream, so the other operations are the same at any percent.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=100))]
    users_percent: u64,
    /// Start the server with a test-only fault, to prove the soak catches it
    /// (only the test-only `sluice-faulty` binary has them compiled in, ADR
    /// 0014; the shipped `sluice` refuses).
    #[arg(long, value_enum)]
    test_fault: Option<TestFault>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum TestFault {
    /// Apache Iggy's purge order (SLUICE_TEST_NAIVE_PURGE=1).
    NaivePurge,
    /// Directory syncs that persist nothing (SLUICE_TEST_NOOP_DIR_SYNC=1).
    NoopDirSync,
    /// The users file written in place, unsynced
    /// (SLUICE_TEST_NAIVE_USERS_SAVE=1).
    NaiveUsersSave,
}

impl TestFault {
    fn env(self) -> &'static str {
        match self {
            TestFault::NaivePurge => "SLUICE_TEST_NAIVE_PURGE",
            TestFault::NoopDirSync => "SLUICE_TEST_NOOP_DIR_SYNC",
            TestFault::NaiveUsersSave => "SLUICE_TEST_NAIVE_USERS_SAVE",
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
            "operations acknowledged: {} (sends {} with {} messages, {} of them buffered; polls {}; offset stores {}, offset deletes {}, {} of them buffered; topic purges {}, stream purges {}; re-creations {}; refused {}); in doubt at a kill: {}",
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
            c.recreated_topics + c.recreated_partitions,
            c.refused,
            c.in_doubt
        );
        let _ = writeln!(
            out,
            "re-creations under the same ids: {} acknowledged ({} topics, {} of a topic's last partitions), {} of them while a purge's cleanup of the topic was pending; {} in doubt, {} of which landed; requests refused while their topic, partition or group was gone {} (not acknowledged)",
            c.recreated_topics + c.recreated_partitions,
            c.recreated_topics,
            c.recreated_partitions,
            c.recreated_while_cleaning,
            c.recreations_in_doubt,
            c.recreations_landed,
            c.refused_gone
        );
        let _ = writeln!(
            out,
            "users operations acknowledged: {} (users created {}, permission sets {}, status changes {}, password changes {}, users deleted {}; tokens created {}, tokens deleted {}); user states verified after restarts {} ({} with a change in doubt, {} of which landed); token logins tried {}",
            c.users_acknowledged(),
            c.user_creates,
            c.user_permissions,
            c.user_statuses,
            c.user_passwords,
            c.user_deletes,
            c.tokens_created,
            c.tokens_deleted,
            c.users_verified,
            c.users_doubtful,
            c.users_landed,
            c.token_logins_tried
        );
        if let Some((cuts, fs)) = &self.powercut {
            let _ = writeln!(
                out,
                "power cuts: {} ({} full, {} partial writeback); failing fsyncs armed before purges {}, before re-creations {}, fired {}; unsynced changes dropped {}, written back by partial cuts {}; fsyncs served: {} file, {} directory",
                self.counts.cuts,
                cuts.full,
                cuts.partial,
                cuts.armed,
                cuts.armed_recreations,
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
            "segments of {} bytes: {} partition verifications found a rolled log (more than one segment); at most {} segments in one partition; gaps a cut left in buffered logs {}, in persisted logs before nothing acknowledged {}",
            args.segment_size,
            c.partitions_rolled,
            c.segments_most,
            c.cut_gaps,
            c.cut_gaps_persisted
        );
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
            "reproduce: sluice soak --seed {} --cycles {} --clients {} --partitions {} --max-ops {} --segment-size {} --recreate-percent {} --users-percent {}{extra}",
            args.seed,
            args.cycles,
            args.clients,
            args.partitions,
            args.max_ops,
            args.segment_size,
            args.recreate_percent,
            args.users_percent
        );
        out
    }
}

async fn run(args: &SoakArgs, work: &Path) -> Result<Report, String> {
    let mut oracle = Oracle::new(args.seed);
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
        let mut early = SimRng::from_parts(args.seed, &[cycle, u64::MAX - 1]);
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
            clients: args.clients,
            partitions: args.partitions,
            segment_size: args.segment_size,
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
            recreate_percent: args.recreate_percent,
            recreations_started: AtomicU64::new(0),
            enospc_on: AtomicU64::new(NEVER),
            enospc_off: AtomicU64::new(NEVER),
            harness_seq: AtomicU64::new(0),
            users_percent: args.users_percent,
        });
        if cycle == 0
            && let Err(e) = create_resources(&ctx, args.clients).await
        {
            let _ = server.child.kill();
            let _ = server.child.wait();
            return Err(e);
        }
        if let Err(e) = verify(&ctx, args.clients, last).await {
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
        let mut schedule = SimRng::from_parts(args.seed, &[cycle, u64::MAX]);
        let kill_after = schedule.range(1, args.max_ops);
        let plan = CyclePlan {
            kill_after,
            during_purge: schedule.below(4) == 0,
            jitter: Duration::from_micros(schedule.below(4000)),
            ..CyclePlan::draw(args, cycle, kill_after)
        };
        let mut tasks = Vec::new();
        for client in 1..=args.clients {
            let rng = SimRng::from_parts(args.seed, &[cycle, u64::from(client)]);
            let users_rng =
                SimRng::from_parts(args.seed, &[cycle, u64::from(client), u64::MAX - 7]);
            tasks.push(tokio::spawn(client_loop(
                ctx.clone(),
                client,
                rng,
                users_rng,
            )));
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
            let mut rng = SimRng::from_parts(args.seed, &[cycle, u64::MAX - 5]);
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
        let mut rng = SimRng::from_parts(args.seed, &[cycle, u64::MAX - 4]);
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

fn take_oracle(ctx: Arc<Ctx>) -> Result<Oracle, String> {
    let ctx = Arc::try_unwrap(ctx).map_err(|_| "a client still holds the cycle".to_string())?;
    Ok(ctx
        .oracle
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner))
}
