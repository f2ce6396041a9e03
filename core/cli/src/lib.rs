//! The `sluice` command as a library: `main` parses the command line and runs
//! a subcommand. Two binaries call it: the shipped `sluice` (src/main.rs), and
//! the test-only `sluice-faulty` (core/faulty, ADR 0014) built with the test
//! faults compiled in. Invariant: nothing here depends on a test feature; a
//! fault switch only takes effect in a build whose dependencies carry it.
//!
//! - `sluice server` serves the Apache Iggy HTTP API (configuration: embedded
//!   defaults, a TOML file, `SLUICE_*` environment variables, flags; see
//!   `sluice server --help`). It recovers, starts the purge reconciler, serves,
//!   and on SIGINT/SIGTERM stops accepting, finishes in-flight requests and
//!   exits 0.
//! - `sluice self-check` runs the engine end to end on the real disk: it
//!   creates a stream and topic in the data directory, appends and polls under
//!   both durability policies, stores an offset, reopens the engine through
//!   recovery and checks that everything acknowledged came back.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

mod bench;
mod huge_pages;
pub mod launch;
mod limits;
pub mod login;
mod sim;
mod soak;
mod status;

use clap::{Parser, Subcommand};
use sluice_server::clock::{Clock, SystemClock};
use sluice_server::config::{FlagOverrides, ServerConfig};
use sluice_server::engine::FIRST_ID;
use sluice_server::http::auth::RootSource;
use sluice_server::metadata::{Durability, TopicOptions};
use sluice_server::partition::log::NewMessage;
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_server::server::{self, ServeOptions};
use sluice_server::{Engine, EngineConfig, Identifier, Partitioning};
use sluice_storage::{DiskStorage, DurableStorage};

#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version,
    about = "A single-node message streaming server whose purge is crash-safe by construction"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the Apache Iggy HTTP API (plus /status/purge and /metrics).
    ///
    /// Configuration layers, each overriding the one before: embedded defaults
    /// (data directory `local_data`, HTTP on 127.0.0.1:3000), the TOML file
    /// given by --config, the environment variables SLUICE_DATA_DIR,
    /// SLUICE_HTTP_ADDRESS, SLUICE_HTTP_MAX_BODY_BYTES, SLUICE_HTTP_MAX_POLL_COUNT,
    /// SLUICE_RECONCILER_PERIOD_MS, SLUICE_RETENTION_MESSAGE_EXPIRY_SECS,
    /// SLUICE_AUTH_TOKEN_EXPIRY_SECS and SLUICE_AUTH_FAILED_LOGIN_DELAY_MS,
    /// then these flags.
    ///
    /// Root user: SLUICE_ROOT_USERNAME and SLUICE_ROOT_PASSWORD (or
    /// IGGY_ROOT_USERNAME and IGGY_ROOT_PASSWORD); else
    /// --with-default-root-credentials (iggy/iggy); else a random password is
    /// generated on first start, printed once, and stored only as an argon2 hash
    /// in <data dir>/root.credentials.
    Server(ServerArgs),
    /// The deterministic simulator: crash-point explorer and seeded random runs.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Show the purge status of a running server (GET /status/purge) as a
    /// table, or as the raw JSON with --json; with --obligations, every
    /// pending cleanup obligation of every kind (GET /status/obligations).
    ///
    /// Credentials, first match wins: --username/--password; SLUICE_ROOT_USERNAME
    /// and SLUICE_ROOT_PASSWORD; IGGY_ROOT_USERNAME and IGGY_ROOT_PASSWORD;
    /// --with-default-root-credentials (iggy/iggy). Exits 1 when the server is
    /// unreachable or refuses, 2 on usage errors.
    Status(status::StatusArgs),
    /// Benchmarks: each figure next to a reference measured on the same disk
    /// in the same run, and their ratio (docs/performance.md).
    Bench(bench::BenchArgs),
    /// Kill -9 soak: run the real server binary under concurrent HTTP clients,
    /// SIGKILL it at seeded moments, restart it, and check an oracle of
    /// everything acknowledged (docs/reliability.md). Exits 1 on any violation.
    Soak(soak::SoakArgs),
    /// Run the engine end to end on the real disk and report what recovery found.
    SelfCheck {
        /// Data directory (created if missing).
        #[arg(long, default_value = "local_data")]
        data_dir: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct ServerArgs {
    /// TOML configuration file (keys: data_dir; [http] address, max_body_bytes,
    /// max_poll_count; [tcp] enabled, address, max_frame_bytes,
    /// max_connections, idle_timeout_secs; [http.tls] and [tcp.tls] enabled,
    /// cert_file, key_file (PEM; TLS replaces plaintext on that port; off by
    /// default); [reconciler] period_ms; [retention]
    /// message_expiry_secs (the expiry of topics created with Iggy's server default;
    /// 0, the default: never); [auth] token_expiry_secs, failed_login_delay_ms;
    /// [files] max_open (data files open at once; 0, the default: no pool)).
    #[arg(long, value_name = "FILE", env = "SLUICE_CONFIG")]
    config: Option<PathBuf>,
    /// Data directory (created if missing) [default: local_data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// HTTP listen address [default: 127.0.0.1:3000].
    #[arg(long, value_name = "IP:PORT")]
    http_addr: Option<String>,
    /// Iggy TCP protocol listen address [default: 127.0.0.1:8090]
    /// (`[tcp] enabled = false` in the config file turns it off).
    #[arg(long, value_name = "IP:PORT")]
    tcp_addr: Option<String>,
    /// Use Iggy's default root credentials iggy/iggy (unless the root
    /// credential environment variables are set). For development only.
    #[arg(long)]
    with_default_root_credentials: bool,
}

/// Runs the `sluice` command line (`std::env::args`) to its exit code.
pub fn main() -> ExitCode {
    sluice_server::tls::install_default_crypto_provider();
    let cli = Cli::parse();
    // The simulator injects thousands of faults on purpose; its engines' logs
    // are noise unless asked for with RUST_LOG.
    let default_level = if matches!(cli.command, Command::Sim(_)) {
        "off"
    } else if matches!(cli.command, Command::Bench(_)) {
        // A purge of 1,000 partitions logs each commit at info.
        "warn"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Sim(cmd) => sim::main(cmd),
        Command::Status(args) => status::main(args),
        Command::Soak(args) => soak::main(args),
        Command::Bench(args) => bench::main(args),
        Command::Server(args) => match run_server(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "server failed");
                eprintln!("sluice server: {e}");
                ExitCode::FAILURE
            }
        },
        Command::SelfCheck { data_dir } => match self_check(data_dir) {
            Ok(summary) => {
                println!("{summary}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("self-check failed: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn run_server(args: ServerArgs) -> Result<(), Box<dyn std::error::Error>> {
    let storage: Arc<dyn DurableStorage> = Arc::new(DiskStorage::new());
    let env = |key: &str| std::env::var(key).ok();
    let flags = FlagOverrides {
        data_dir: args.data_dir,
        http_address: args.http_addr,
        tcp_address: args.tcp_addr,
    };
    let config = ServerConfig::load(storage.as_ref(), args.config.as_deref(), &env, &flags)?;
    // Block reservations are the backend's (ADR 0031): off, its files take
    // them as no-ops.
    let storage: Arc<dyn DurableStorage> = if config.files.reserve_blocks {
        storage
    } else {
        Arc::new(DiskStorage::without_reservations())
    };
    let root = RootSource::from_env(&env, args.with_default_root_credentials)?;
    // `RootSource`'s Debug redacts the password.
    tracing::info!(?config, root_source = ?root, "configuration");
    let seed = u64::from(std::process::id()) ^ SystemClock.now_micros();
    let open_file_limit = limits::raise_open_files();
    huge_pages::turn_off();
    let max_open_files = config.files.max_open.map(|n| n as u64);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let server = server::start(storage, ServeOptions { config, root, seed }).await?;
        // Data files stay within `[files] max_open` (ADR 0018): warn when
        // that bound leaves too little of the limit for connections.
        if let Some(bound) = max_open_files {
            limits::warn_if_close(open_file_limit, bound);
        }
        if let Some(password) = &server.generated_password {
            // Shown once, on stdout, never logged: only its hash is stored.
            println!(
                "Generated root credentials (shown once; stored only as a hash in the data directory):\n  username: {}\n  password: {password}",
                sluice_server::http::auth::DEFAULT_ROOT_USERNAME
            );
        }
        // The line `launch::start` waits for.
        println!("{}{}", launch::LISTENING, server.http_url());
        let stopper = server.stopper();
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = stopper.send(true);
        });
        server.wait().await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

/// SIGINT (Ctrl-C) or SIGTERM.
async fn wait_for_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!(signal = "SIGINT", "shutting down"),
        _ = term => tracing::info!(signal = "SIGTERM", "shutting down"),
    }
}

fn self_check(data_dir: PathBuf) -> Result<String, Box<dyn std::error::Error>> {
    let storage = Arc::new(DiskStorage::new());
    let config = EngineConfig::new(data_dir.clone(), std::process::id().into());
    let (mut engine, _) = Engine::open(storage.clone(), Arc::new(SystemClock), config.clone())?;
    let name = format!("self-check-{}", SystemClock::now_name());
    engine.create_stream(None, &name)?;
    let stream = Identifier::Name(name.clone());
    let mut sent = 0u64;
    for (topic, durability) in [
        ("buffered", Durability::Buffered),
        ("persisted", Durability::Persisted),
    ] {
        let options = TopicOptions {
            durability,
            consumer_offset_durability: durability,
            ..TopicOptions::default()
        };
        engine.create_topic(&stream, None, topic, 1, options, 0, 0, 1)?;
        let batch = (0..100)
            .map(|i| NewMessage::new(format!("message {i}")))
            .collect();
        engine.send(&stream, &topic.into(), &Partitioning::Balanced, batch)?;
        engine.store_offset(&stream, &topic.into(), FIRST_ID, Consumer::consumer(1), 41)?;
        sent += 100;
    }
    drop(engine);
    let (mut engine, report) = Engine::open(storage, Arc::new(SystemClock), config)?;
    for topic in ["buffered", "persisted"] {
        let polled = engine.poll(
            &stream,
            &topic.into(),
            FIRST_ID,
            Consumer::consumer(1),
            PollingStrategy::Next,
            1000,
            false,
        )?;
        if polled.messages.len() != 58 || polled.messages.first().map(|m| m.offset) != Some(42) {
            return Err(format!(
                "topic {topic}: expected offsets 42..=99 after recovery, got {} messages",
                polled.messages.len()
            )
            .into());
        }
    }
    engine.delete_stream(&stream)?;
    Ok(format!(
        "self-check passed in {}: {sent} messages and 2 offsets written, recovered ({} partitions, {} messages, {} stale records ignored)",
        data_dir.display(),
        report.partitions,
        report.messages,
        report.stale_records
    ))
}

trait NowName {
    fn now_name() -> String;
}

impl NowName for SystemClock {
    fn now_name() -> String {
        SystemClock.now_micros().to_string()
    }
}
