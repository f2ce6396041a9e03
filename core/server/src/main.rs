//! The `sluice` binary.
//!
//! Until the HTTP server lands (see CHANGELOG.md), `sluice self-check` runs the
//! engine end to end on the real disk: it creates a stream and topic in the
//! data directory, appends and polls under both durability policies, stores an
//! offset, reopens the engine through recovery and checks that everything
//! acknowledged came back.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use sluice_server::clock::SystemClock;
use sluice_server::metadata::{Durability, TopicOptions};
use sluice_server::partition::log::NewMessage;
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_server::{Engine, EngineConfig, Identifier, Partitioning};
use sluice_storage::DiskStorage;

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
    /// Run the engine end to end on the real disk and report what recovery found.
    SelfCheck {
        /// Data directory (created if missing).
        #[arg(long, default_value = "local_data")]
        data_dir: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
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
        engine.store_offset(&stream, &topic.into(), 1, Consumer::consumer(1), 41)?;
        sent += 100;
    }
    drop(engine);
    let (mut engine, report) = Engine::open(storage, Arc::new(SystemClock), config)?;
    for topic in ["buffered", "persisted"] {
        let polled = engine.poll(
            &stream,
            &topic.into(),
            1,
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
        use sluice_server::clock::Clock;
        SystemClock.now_micros().to_string()
    }
}
