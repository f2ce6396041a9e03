//! Storage traces as the snapshot suites pin them (tests/purge_snapshots.rs,
//! tests/deletion_snapshots.rs): the mutating operations, syncs and listings
//! a `SimStorage` saw, one per line, with the data directory's partition
//! prefix folded so a line reads `p1 remove_file consumers/2`.
//!
//! Invariant: the rendering depends only on the trace (kind, path, rename
//! target, fault, error), never on timing or file contents, so a snapshot
//! changes exactly when the protocol's I/O does.

use std::fmt::Write as _;

use sluice_storage::{OpKind, SimStorage};

/// Strips the data directory and the partition prefix of topic 0 of stream
/// 0, so a line reads `p1 remove_file consumers/2`; any other path is kept
/// whole.
pub fn normalise(path: &str) -> String {
    let rest = path
        .strip_prefix("/data/streams/0/topics/0/partitions/")
        .unwrap_or(path);
    match rest.split_once('/') {
        Some((p, tail)) if p.parse::<u32>().is_ok() => format!("p{p} {tail}"),
        None if rest.parse::<u32>().is_ok() => format!("p{rest} (partition directory)"),
        _ => rest.to_string(),
    }
}

/// The mutating operations (and syncs, and listings) from trace index `from`
/// on, one per line.
pub fn io_since(sim: &SimStorage, from: u64) -> String {
    let mut out = String::new();
    for e in sim.trace().into_iter().skip(from as usize) {
        if !e.kind.is_mutation() && e.kind != OpKind::ListDir {
            continue;
        }
        let mut line = format!("{} {}", e.kind, normalise(&e.path));
        if let Some(t) = &e.target {
            let _ = write!(line, " -> {}", normalise(t));
        }
        if let Some(f) = e.fault {
            let _ = write!(line, " [fault {f}]");
        }
        if let Some(err) = e.error {
            let _ = write!(line, " => {err}");
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}
