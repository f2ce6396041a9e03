//! Scenario 4, offset stores: stores per second under `buffered` and
//! `persisted`, against raw writes of the same record size with the same
//! number of file and directory syncs.
//!
//! Invariants:
//! - The record size and the sync counts of the reference are the engine's
//!   own, counted by the storage layer during the measured stores, so the
//!   reference does exactly the I/O the engine does and nothing else.

use std::time::Instant;

use sluice_server::metadata::{Durability, TopicOptions};
use sluice_server::partition::Consumer;
use sluice_server::partition::log::NewMessage;
use sluice_server::{Identifier, Partitioning};

use super::counting::CountingStorage;
use super::{Ctx, Figure, Result, purge, reference};

pub fn run(ctx: &mut Ctx) -> Result<Vec<Figure>> {
    let storage = CountingStorage::new(ctx.disk.clone());
    let data = ctx.dir("offsets")?.join("data");
    let mut engine = purge::open(ctx, &storage, &data)?;
    engine.create_stream(None, "bench")?;
    let stream = Identifier::from("bench");
    let mut figures = Vec::new();
    for (name, durability, stores) in [
        ("buffered", Durability::Buffered, ctx.sizes.buffered_stores),
        (
            "persisted",
            Durability::Persisted,
            ctx.sizes.persisted_stores,
        ),
    ] {
        let options = TopicOptions {
            consumer_offset_durability: durability,
            ..TopicOptions::default()
        };
        engine.create_topic(&stream, None, name, 1, options, 0, 0, 1)?;
        let topic = Identifier::from(name);
        let batch = (0..1000).map(|_| NewMessage::new(vec![1u8; 16])).collect();
        engine.send(&stream, &topic, &Partitioning::PartitionId(0), batch)?;
        let before = storage.counts();
        let t0 = Instant::now();
        for i in 0..stores {
            engine.store_offset(&stream, &topic, 0, Consumer::consumer(1), i % 1000)?;
        }
        let took = t0.elapsed();
        let c = storage.counts().since(before);
        let record = usize::try_from(c.bytes_written / stores.max(1)).unwrap_or(64);
        let raw = reference::raw_record_writes(
            ctx.disk.as_ref(),
            &ctx.dir(&format!("offsets-ref-{name}"))?,
            stores,
            record,
            c.file_syncs,
            c.dir_syncs,
        )?;
        let rate = stores as f64 / took.as_secs_f64();
        let raw_rate = stores as f64 / raw.as_secs_f64();
        figures.push(
            Figure::new(
                &format!("offsets.{name}_per_s"),
                format!("offset stores/s, {name}"),
                rate,
                "stores/s",
                raw_rate,
                format!("raw {record} B writes/s, same syncs"),
            )
            .detail(format!(
                "{stores} stores: {} bytes written, {} file syncs, {} dir syncs",
                c.bytes_written, c.file_syncs, c.dir_syncs
            )),
        );
    }
    Ok(figures)
}
