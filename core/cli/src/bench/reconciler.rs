//! Scenario 3, reconciler: the cost of one idle pass (nothing pending) with
//! few and with very many partitions.
//!
//! Invariants:
//! - Both engines are real engines on the disk, built through the public
//!   API (topics of at most `MAX_PARTITIONS` partitions each) with syncs
//!   skipped: a pass with nothing pending touches no file, so how the
//!   partitions reached the disk cannot change what is measured.
//! - A pass is `Engine::reconcile`, exactly what the server's timer calls;
//!   the figure is the best of three rounds of many passes.

use std::time::Instant;

use sluice_server::Identifier;
use sluice_server::engine::MAX_PARTITIONS;
use sluice_server::metadata::TopicOptions;

use super::counting::CountingStorage;
use super::{Ctx, Figure, Result, Target, purge};

const SMALL: u32 = 10;

fn build(ctx: &Ctx, name: &str, partitions: u32) -> Result<sluice_server::Engine> {
    let storage = CountingStorage::new(ctx.disk.clone());
    storage.set_skip_syncs(true);
    let data = ctx.dir(name)?.join("data");
    let mut engine = purge::open(ctx, &storage, &data)?;
    engine.create_stream(None, "bench")?;
    let stream = Identifier::from("bench");
    let mut left = partitions;
    let mut t = 0;
    while left > 0 {
        let n = left.min(MAX_PARTITIONS);
        t += 1;
        engine.create_topic(
            &stream,
            None,
            &format!("t{t}"),
            n,
            TopicOptions::default(),
            0,
            0,
            1,
        )?;
        left -= n;
    }
    storage.set_skip_syncs(false);
    Ok(engine)
}

/// Microseconds per idle pass: best of three rounds of `passes`.
fn idle_pass_us(engine: &mut sluice_server::Engine, passes: u32) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        for _ in 0..passes {
            std::hint::black_box(engine.reconcile());
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e6 / f64::from(passes));
    }
    best
}

pub fn run(ctx: &mut Ctx) -> Result<Vec<Figure>> {
    let large = ctx.sizes.reconciler_partitions;
    let passes = if ctx.sizes.messages < 10_000 {
        1000
    } else {
        100_000
    };
    let mut small_engine = build(ctx, "reconciler-small", SMALL)?;
    let t0 = Instant::now();
    let mut large_engine = build(ctx, "reconciler-large", large)?;
    let built = t0.elapsed();
    let small = idle_pass_us(&mut small_engine, passes);
    let big = idle_pass_us(&mut large_engine, passes);
    // Again for the small one, in case the machine was busier at first.
    let small = small.min(idle_pass_us(&mut small_engine, passes));
    if large < 100_000 {
        ctx.note(format!(
            "reconciler: {large} partitions instead of 100,000 in this size (building them takes ~{:.0} µs each: {:.1} s here)",
            built.as_secs_f64() * 1e6 / f64::from(large.max(1)),
            built.as_secs_f64()
        ));
    }
    let pending =
        large_engine.reconciler().pending().len() + small_engine.reconciler().pending().len();
    drop(large_engine);
    drop(small_engine);
    Ok(vec![
        Figure::new(
            "reconciler.idle_pass_small_us",
            format!("idle pass, {SMALL} partitions"),
            small,
            "µs",
            small,
            "itself (the large pass's reference)",
        ),
        Figure::new(
            "reconciler.idle_pass_large_us",
            format!("idle pass, {large} partitions, {pending} pending"),
            big,
            "µs",
            small,
            format!("idle pass, {SMALL} partitions"),
        )
        .target(Target::AtMost(2.0))
        .detail(format!(
            "{passes} passes per round, best of 3 rounds; built in {:.1} s",
            built.as_secs_f64()
        )),
    ])
}
