//! Corrupted, truncated and deleted files before start-up (issue 7, item 2).
//!
//! One table, one row per (file kind, damage): **given** a data directory
//! holding acknowledged state in two partitions (partition 1 purged once,
//! so every file kind exists), **when** one file of partition 1 (or the
//! metadata) is damaged while the server is down, **then** `Engine::open`
//! (the production start-up path) has the documented outcome, and the
//! common checks hold: partition 2 is served in full, nothing of partition
//! 1's purged history comes back, and a purge obligation that is not
//! degraded reaches `Applied`.
//!
//! Every row runs on `SimStorage`; the rows marked `disk` also run on the
//! real file system in a temporary directory. docs/reliability.md carries the
//! same table in prose. A failing row prints its name and backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_server::frame::{self, HEADER_LEN, Magic};
use sluice_server::http::status::{Filter, snapshot};
use sluice_server::partition::log::MAX_BATCH_BYTES;
use sluice_testkit::engine::*;

// ---- the acknowledged state every row starts from ---------------------------------

/// Partition 1: three `old*` messages and consumer 7's offset in generation
/// 0, purged (cleanup applied), then eight messages `m0..m7` sent one per
/// batch into three segments of generation 1 (bases 0, 3, 6), consumer 1 at
/// 5 (stored twice: 2 then 5, so both slots hold a record), group 1 at 3
/// (stored once: only slot 1 holds a record).
/// Partition 2: `p0..p3`, consumer 1 at 3, group 1 at 1.
const P1_MESSAGES: [u64; 8] = [0, 1, 2, 3, 4, 5, 6, 7];
const P1_CONSUMER: u64 = 5;
const P1_GROUP: u64 = 3;
const SEGMENT_BASES: [u64; 3] = [0, 3, 6];

/// "Partition 1" and "partition 2" of the prose: Iggy's first two ids.
const P1: u32 = 0;
const P2: u32 = 1;
/// The group "readers", the topic's first (id 0).
const GROUP: u32 = 0;

fn p1() -> PartitionKey {
    key()
}

fn topic_options() -> TopicOptions {
    // Three one-message batches per segment.
    TopicOptions {
        segment_size: 200,
        ..persisted()
    }
}

/// Bytes of generation-0 files as they were before the purge removed them,
/// for the rows that put a dead file back (a backup restore, an undone unlink).
struct DeadFiles {
    segment_log: Vec<u8>,
    consumer_7: Vec<u8>,
}

fn send_to(engine: &mut Engine, partition: u32, payloads: &[String]) -> Sent {
    engine
        .send(
            &stream(),
            &topic(),
            &Partitioning::PartitionId(partition),
            payloads
                .iter()
                .map(|p| NewMessage::new(p.as_bytes().to_vec()))
                .collect(),
        )
        .unwrap()
}

fn store(engine: &mut Engine, partition: u32, consumer: Consumer, offset: u64) {
    engine
        .store_offset(&stream(), &topic(), partition, consumer, offset)
        .unwrap();
}

fn build(engine: &mut Engine, storage: &dyn DurableStorage, data_dir: &Path) -> DeadFiles {
    setup_partitions(engine, topic_options(), 2);
    engine
        .create_group(&stream(), &topic(), None, "readers")
        .unwrap();
    let paths = paths(data_dir);
    // Generation 0 of partition 1, then its purge.
    send_to(engine, P1, &["old0".into(), "old1".into(), "old2".into()]);
    store(engine, P1, Consumer::consumer(7), 2);
    let dead = DeadFiles {
        segment_log: storage
            .read_file(&paths.segments.join(segment_name(0, 0, "log")))
            .unwrap(),
        consumer_7: storage.read_file(&paths.consumers.join("7")).unwrap(),
    };
    engine.purge_partition(&stream(), &topic(), P1).unwrap();
    engine.reconcile();
    engine.reconcile_until_idle(5);
    assert!(
        engine
            .partition(p1())
            .unwrap()
            .obligation()
            .unwrap()
            .is_applied()
    );
    // Generation 1 of partition 1.
    for i in 0..8 {
        let sent = send_to(engine, P1, &[format!("m{i}")]);
        assert_eq!(sent.base_offset, i);
    }
    store(engine, P1, Consumer::consumer(1), 2);
    store(engine, P1, Consumer::consumer(1), P1_CONSUMER);
    store(engine, P1, Consumer::group(GROUP), P1_GROUP);
    // Partition 2, never purged.
    send_to(engine, P2, &["p0".into(), "p1".into()]);
    send_to(engine, P2, &["p2".into(), "p3".into()]);
    store(engine, P2, Consumer::consumer(1), 3);
    store(engine, P2, Consumer::group(GROUP), 1);
    let logs = segment_files(storage, data_dir, "log");
    let expected: Vec<String> = SEGMENT_BASES
        .iter()
        .map(|b| segment_name(1, *b, "log"))
        .collect();
    assert_eq!(logs, expected, "the fixture's segment layout changed");
    dead
}

// ---- the table ------------------------------------------------------------------------

/// Which file a row damages (all in partition 1, except the metadata).
#[derive(Debug, Clone, Copy)]
enum Target {
    Metadata,
    Obligation,
    Consumer(u32),
    Group(u32),
    /// `.log` of generation 1 with this base offset.
    Log(u64),
    Idx(u64),
}

impl Target {
    fn path(self, data_dir: &Path) -> PathBuf {
        let p = paths(data_dir);
        match self {
            Target::Metadata => data_dir.join("metadata"),
            Target::Obligation => p.obligation,
            Target::Consumer(id) => p.consumers.join(id.to_string()),
            Target::Group(id) => p.groups.join(id.to_string()),
            Target::Log(base) => p.segments.join(segment_name(1, base, "log")),
            Target::Idx(base) => p.segments.join(segment_name(1, base, "idx")),
        }
    }
}

/// What happens to the file while the server is down.
#[derive(Clone, Copy)]
enum Damage {
    /// Flip one bit (0x10) of each byte at the positions computed from the file.
    Flip(fn(&[u8]) -> Vec<u64>),
    /// Cut the file to the length computed from it.
    Truncate(fn(&[u8]) -> u64),
    /// Replace the whole file with bytes computed from it.
    Rewrite(fn(&[u8]) -> Vec<u8>),
    Delete,
    /// Put a dead generation-0 file back (it must never be served).
    RestoreDeadSegment,
    RestoreDeadConsumer7,
}

/// The documented outcome.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Start-up fails with `CorruptFile` naming the metadata file, the byte
    /// offset (0, or the end of the record for trailing bytes) and a reason
    /// containing this text.
    Refused(&'static str),
    /// Partition 1 is degraded (report, status, every request); the reason
    /// contains each of these texts.
    Degraded(&'static [&'static str]),
    Serves(Served),
}

#[derive(Debug, Clone, Copy)]
struct Served {
    /// Offsets partition 1 serves.
    messages: &'static [u64],
    /// The offset the next send to partition 1 gets.
    next: u64,
    consumer: Option<u64>,
    group: Option<u64>,
    /// Recovery report of partition 1: tail cuts (and in which segment).
    tail_cut_in: Option<u64>,
    /// Offset files reported corrupt (`consumers/<id>` or `groups/<id>`).
    corrupt: &'static [&'static str],
    stale_records: u64,
    /// The obligation state recovery leaves before the reconciler runs.
    obligation_at_open: &'static str,
    /// The whole table's verdict on what was acknowledged: `Kept` or how it is lost.
    loss: Loss,
}

/// What a row does to acknowledged state, as docs/reliability.md reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    Kept,
    /// Lost, and the recovery report (and a warning) says so.
    Reported,
    /// Lost with nothing in the report: the damage looks exactly like a
    /// state sluice can legitimately be in.
    Silent,
}

const SERVED_INTACT: Served = Served {
    messages: &P1_MESSAGES,
    next: 8,
    consumer: Some(P1_CONSUMER),
    group: Some(P1_GROUP),
    tail_cut_in: None,
    corrupt: &[],
    stale_records: 0,
    obligation_at_open: "applied",
    loss: Loss::Kept,
};

struct Case {
    name: &'static str,
    target: Target,
    damage: Damage,
    expect: Expect,
    /// Also run on the real file system.
    disk: bool,
}

// Positions inside files, computed from the bytes so the table never hard-codes
// a payload length.

/// `(position, frame length)` of every frame of `magic` back to back in `bytes`.
fn frames(bytes: &[u8], magic: Magic, max: usize) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        match frame::decode_header(magic, &bytes[pos..], max) {
            Ok(h) => {
                out.push((pos as u64, h.frame_len() as u64));
                pos += h.frame_len();
            }
            Err(_) => break,
        }
    }
    out
}

fn batches(bytes: &[u8]) -> Vec<(u64, u64)> {
    frames(bytes, Magic::BATCH, MAX_BATCH_BYTES)
}

/// The payload_len field of a frame's header (byte 8).
const LEN_FIELD: u64 = 8;

fn nth_batch_payload(bytes: &[u8], n: usize) -> u64 {
    batches(bytes)[n].0 + HEADER_LEN as u64 + 3
}

fn nth_batch_header(bytes: &[u8], n: usize) -> u64 {
    batches(bytes)[n].0 + LEN_FIELD
}

/// Slot `i` of a two-slot file with slots of `size` bytes: a payload byte.
fn slot_payload(i: u64, size: u64) -> u64 {
    i * size + HEADER_LEN as u64 + 1
}

const OBLIGATION_SLOT: u64 = 64 << 10;
const OFFSET_SLOT: u64 = 64;

/// A batch frame re-sealed with valid checksums but a `payload_len` of
/// 4 GiB - 1: intact as far as the header checksum can tell, over every bound.
fn claim_4gib(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let (pos, _) = *batches(bytes).last().unwrap();
    let h = pos as usize;
    out[h + 8..h + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let crc = crc32c(&out[h..h + 16]);
    out[h + 16..h + 20].copy_from_slice(&crc.to_le_bytes());
    out
}

/// CRC-32C (Castagnoli), bitwise: the header checksum of ADR 0005, for
/// forging headers that pass it.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// An index holding one well-formed entry that points into the middle of a batch.
fn forged_index(_: &[u8]) -> Vec<u8> {
    use sluice_server::partition::log::IndexEntry;
    let entry = IndexEntry {
        offset: 0,
        position: 5,
        timestamp: 0,
    };
    frame::encode(Magic::INDEX, 1, &entry).unwrap()
}

fn cases() -> Vec<Case> {
    use Damage::*;
    use Expect::*;
    use Target::*;
    vec![
        // ---- metadata: never guessed, never started empty over ----
        Case {
            name: "metadata: bit flip in the header's length field",
            target: Metadata,
            damage: Flip(|_| vec![LEN_FIELD]),
            expect: Refused("header checksum"),
            disk: true,
        },
        Case {
            name: "metadata: bit flip in the payload",
            target: Metadata,
            damage: Flip(|b| vec![b.len() as u64 / 2]),
            expect: Refused("payload checksum"),
            disk: true,
        },
        Case {
            name: "metadata: truncated to half",
            target: Metadata,
            damage: Truncate(|b| b.len() as u64 / 2),
            expect: Refused("truncated"),
            disk: true,
        },
        Case {
            name: "metadata: truncated to zero bytes",
            target: Metadata,
            damage: Truncate(|_| 0),
            expect: Refused("truncated"),
            disk: false,
        },
        Case {
            name: "metadata: trailing bytes after the record",
            target: Metadata,
            damage: Rewrite(|b| [b, b"junk".as_slice()].concat()),
            expect: Refused("bytes after the record"),
            disk: false,
        },
        // ---- purge obligation ----
        Case {
            name: "obligation: newest slot damaged → previous state, cleanup reruns",
            target: Obligation,
            // The plan is write 1 (slot 1), Applied write 2 (slot 0): the
            // clean attempt's only two writes (ADR 0003 §9).
            damage: Flip(|_| vec![slot_payload(0, OBLIGATION_SLOT)]),
            expect: Serves(Served {
                obligation_at_open: "requested",
                ..SERVED_INTACT
            }),
            disk: true,
        },
        Case {
            // The record holds progress, never a commit: unreadable, it is
            // the committed generation's cleanup owed from a fresh listing.
            name: "obligation: both slots damaged → rebuilt from the metadata, cleanup reruns",
            target: Obligation,
            damage: Flip(|_| {
                vec![
                    slot_payload(0, OBLIGATION_SLOT),
                    slot_payload(1, OBLIGATION_SLOT),
                ]
            }),
            expect: Serves(Served {
                obligation_at_open: "requested",
                ..SERVED_INTACT
            }),
            disk: true,
        },
        Case {
            name: "obligation: older slot cut short → newest state",
            target: Obligation,
            damage: Truncate(|_| OBLIGATION_SLOT + 10),
            expect: Serves(Served {
                obligation_at_open: "applied",
                ..SERVED_INTACT
            }),
            disk: false,
        },
        Case {
            name: "obligation: truncated to zero → rebuilt from the metadata",
            target: Obligation,
            damage: Truncate(|_| 0),
            expect: Serves(Served {
                obligation_at_open: "requested",
                ..SERVED_INTACT
            }),
            disk: false,
        },
        Case {
            name: "obligation: deleted → rebuilt from the metadata",
            target: Obligation,
            damage: Delete,
            expect: Serves(Served {
                obligation_at_open: "requested",
                ..SERVED_INTACT
            }),
            disk: true,
        },
        // ---- consumer offset (two records: 2 in slot 1, then 5 in slot 0) ----
        Case {
            name: "consumer offset: newest slot damaged → previous acknowledged value",
            target: Consumer(1),
            damage: Flip(|_| vec![slot_payload(0, OFFSET_SLOT)]),
            expect: Serves(Served {
                consumer: Some(2),
                loss: Loss::Silent,
                ..SERVED_INTACT
            }),
            disk: true,
        },
        Case {
            name: "consumer offset: both slots damaged → skipped and reported",
            target: Consumer(1),
            damage: Flip(|_| vec![slot_payload(0, OFFSET_SLOT), slot_payload(1, OFFSET_SLOT)]),
            expect: Serves(Served {
                consumer: None,
                corrupt: &["consumers/1"],
                loss: Loss::Reported,
                ..SERVED_INTACT
            }),
            disk: true,
        },
        Case {
            name: "consumer offset: older slot cut off → newest value kept",
            target: Consumer(1),
            damage: Truncate(|_| OFFSET_SLOT + 10),
            expect: Serves(SERVED_INTACT),
            disk: false,
        },
        Case {
            name: "consumer offset: cut inside slot 0 → skipped and reported",
            target: Consumer(1),
            damage: Truncate(|_| HEADER_LEN as u64 + 1),
            expect: Serves(Served {
                consumer: None,
                corrupt: &["consumers/1"],
                loss: Loss::Reported,
                ..SERVED_INTACT
            }),
            disk: false,
        },
        Case {
            name: "consumer offset: truncated to zero → no offset",
            target: Consumer(1),
            damage: Truncate(|_| 0),
            expect: Serves(Served {
                consumer: None,
                loss: Loss::Silent,
                ..SERVED_INTACT
            }),
            disk: false,
        },
        Case {
            name: "consumer offset: deleted → no offset",
            target: Consumer(1),
            damage: Delete,
            expect: Serves(Served {
                consumer: None,
                loss: Loss::Silent,
                ..SERVED_INTACT
            }),
            disk: true,
        },
        // ---- group offset (one record, in slot 1) ----
        Case {
            name: "group offset: its only record damaged → skipped and reported",
            target: Group(GROUP),
            damage: Flip(|_| vec![slot_payload(1, OFFSET_SLOT)]),
            expect: Serves(Served {
                group: None,
                corrupt: &["groups/0"],
                loss: Loss::Reported,
                ..SERVED_INTACT
            }),
            disk: true,
        },
        Case {
            name: "group offset: its only record cut short → read as a torn first write",
            target: Group(GROUP),
            damage: Truncate(|_| OFFSET_SLOT + 10),
            expect: Serves(Served {
                group: None,
                loss: Loss::Silent,
                ..SERVED_INTACT
            }),
            disk: false,
        },
        Case {
            name: "group offset: deleted → no offset",
            target: Group(GROUP),
            damage: Delete,
            expect: Serves(Served {
                group: None,
                loss: Loss::Silent,
                ..SERVED_INTACT
            }),
            disk: false,
        },
        // ---- a sealed segment (base 0): nothing in it can be a torn tail ----
        Case {
            name: "sealed segment: payload bit flip → partition degraded",
            target: Log(0),
            damage: Flip(|b| vec![nth_batch_payload(b, 1)]),
            expect: Degraded(&[
                "00000000000000000001-00000000000000000000.log",
                "at offset",
                "sealed",
            ]),
            disk: true,
        },
        Case {
            name: "sealed segment: header bit flip → partition degraded",
            target: Log(0),
            damage: Flip(|b| vec![nth_batch_header(b, 1)]),
            expect: Degraded(&[
                "00000000000000000001-00000000000000000000.log",
                "header checksum",
            ]),
            disk: false,
        },
        Case {
            name: "sealed segment: truncated mid-batch → partition degraded",
            target: Log(0),
            damage: Truncate(|b| batches(b)[2].0 + 10),
            expect: Degraded(&["00000000000000000001-00000000000000000000.log", "truncated"]),
            disk: true,
        },
        Case {
            name: "sealed segment: deleted → its messages are missing, unreported",
            target: Log(0),
            damage: Delete,
            expect: Serves(Served {
                messages: &[3, 4, 5, 6, 7],
                loss: Loss::Silent,
                ..SERVED_INTACT
            }),
            disk: false,
        },
        // ---- the last segment (base 6: offsets 6 and 7) ----
        Case {
            name: "last segment: payload flip in its last batch → cut as a torn tail",
            target: Log(6),
            damage: Flip(|b| vec![nth_batch_payload(b, 1)]),
            expect: Serves(Served {
                messages: &[0, 1, 2, 3, 4, 5, 6],
                next: 7,
                tail_cut_in: Some(6),
                loss: Loss::Reported,
                ..SERVED_INTACT
            }),
            disk: true,
        },
        Case {
            name: "last segment: payload flip with a valid batch after it → degraded",
            target: Log(6),
            damage: Flip(|b| vec![nth_batch_payload(b, 0)]),
            expect: Degraded(&[
                "00000000000000000001-00000000000000000006.log",
                "a valid batch follows",
            ]),
            disk: true,
        },
        Case {
            name: "last segment: header flip mid-file → everything after it cut (ADR 0004 gap)",
            target: Log(6),
            damage: Flip(|b| vec![nth_batch_header(b, 0)]),
            expect: Serves(Served {
                messages: &[0, 1, 2, 3, 4, 5],
                next: 6,
                tail_cut_in: Some(6),
                loss: Loss::Reported,
                ..SERVED_INTACT
            }),
            disk: false,
        },
        Case {
            name: "last segment: a header claiming 4 GiB (valid checksum) → degraded, not cut",
            target: Log(6),
            damage: Rewrite(claim_4gib),
            expect: Degraded(&[
                "00000000000000000001-00000000000000000006.log",
                "exceeds the limit",
                "intact but unreadable",
            ]),
            disk: true,
        },
        Case {
            name: "last segment: truncated mid-batch → cut as a torn tail",
            target: Log(6),
            damage: Truncate(|b| batches(b)[1].0 + 7),
            expect: Serves(Served {
                messages: &[0, 1, 2, 3, 4, 5, 6],
                next: 7,
                tail_cut_in: Some(6),
                loss: Loss::Reported,
                ..SERVED_INTACT
            }),
            disk: true,
        },
        Case {
            name: "last segment: truncated to zero → skipped as empty",
            target: Log(6),
            damage: Truncate(|_| 0),
            expect: Serves(Served {
                messages: &[0, 1, 2, 3, 4, 5],
                next: 6,
                loss: Loss::Silent,
                ..SERVED_INTACT
            }),
            disk: false,
        },
        Case {
            name: "last segment: deleted → its messages are missing, unreported",
            target: Log(6),
            damage: Delete,
            expect: Serves(Served {
                messages: &[0, 1, 2, 3, 4, 5],
                next: 6,
                loss: Loss::Silent,
                ..SERVED_INTACT
            }),
            disk: true,
        },
        // ---- the sparse index: a cache, rebuilt from the log ----
        Case {
            name: "index: bit flip → rebuilt by scanning",
            target: Idx(0),
            damage: Flip(|_| vec![LEN_FIELD]),
            expect: Serves(SERVED_INTACT),
            disk: true,
        },
        Case {
            name: "index: truncated mid-entry → rebuilt by scanning",
            target: Idx(6),
            damage: Truncate(|b| b.len() as u64 / 2),
            expect: Serves(SERVED_INTACT),
            disk: false,
        },
        Case {
            name: "index: a well-formed entry pointing mid-batch → dropped",
            target: Idx(3),
            damage: Rewrite(forged_index),
            expect: Serves(SERVED_INTACT),
            disk: false,
        },
        Case {
            name: "index: deleted → recreated",
            target: Idx(0),
            damage: Delete,
            expect: Serves(SERVED_INTACT),
            disk: true,
        },
        // ---- dead files of the purged generation coming back ----
        Case {
            name: "dead segment restored after an applied purge → ignored, cleanup reopened",
            target: Log(6),
            damage: RestoreDeadSegment,
            expect: Serves(Served {
                stale_records: 1,
                obligation_at_open: "requested",
                ..SERVED_INTACT
            }),
            disk: true,
        },
        Case {
            name: "dead consumer offset restored after an applied purge → ignored",
            target: Consumer(7),
            damage: RestoreDeadConsumer7,
            expect: Serves(Served {
                stale_records: 1,
                obligation_at_open: "requested",
                ..SERVED_INTACT
            }),
            disk: false,
        },
    ]
}

// ---- running a row --------------------------------------------------------------------

fn apply(storage: &dyn DurableStorage, data_dir: &Path, case: &Case, dead: &DeadFiles) {
    let path = case.target.path(data_dir);
    match case.damage {
        Damage::Flip(at) => {
            let bytes = storage.read_file(&path).unwrap();
            for pos in at(&bytes) {
                flip_byte(storage, &path, pos);
            }
        }
        Damage::Truncate(to) => {
            let bytes = storage.read_file(&path).unwrap();
            let file = storage.open(&path, OpenMode::ReadWrite).unwrap();
            file.truncate(to(&bytes)).unwrap();
        }
        Damage::Rewrite(with) => {
            let bytes = storage.read_file(&path).unwrap();
            let file = storage.open(&path, OpenMode::ReadWrite).unwrap();
            file.truncate(0).unwrap();
            file.write_at(0, &with(&bytes)).unwrap();
        }
        Damage::Delete => storage.remove_file(&path).unwrap(),
        Damage::RestoreDeadSegment | Damage::RestoreDeadConsumer7 => {
            let (path, bytes) = match case.damage {
                Damage::RestoreDeadSegment => (
                    paths(data_dir).segments.join(segment_name(0, 0, "log")),
                    &dead.segment_log,
                ),
                _ => (paths(data_dir).consumers.join("7"), &dead.consumer_7),
            };
            let file = storage.open(&path, OpenMode::CreateNew).unwrap();
            file.write_at(0, bytes).unwrap();
        }
    }
}

fn open(
    storage: &Arc<dyn DurableStorage>,
    data_dir: &Path,
) -> Result<(Engine, RecoveryReport), EngineError> {
    Engine::open(
        storage.clone(),
        Arc::new(ManualClock::new(RESTART_MICROS)),
        config(data_dir),
    )
}

fn poll_all(engine: &mut Engine, partition: u32) -> Result<Vec<Message>, EngineError> {
    engine
        .poll(
            &stream(),
            &topic(),
            partition,
            Consumer::consumer(1),
            PollingStrategy::Offset(0),
            u64::MAX,
            false,
        )
        .map(|p| p.messages)
}

fn stored(engine: &mut Engine, partition: u32, consumer: Consumer) -> Option<u64> {
    engine
        .get_offset(&stream(), &topic(), partition, consumer)
        .unwrap()
        .map(|(_, o)| o)
}

/// Checks every row must pass: the other partition is untouched, and the
/// purged history of partition 1 never comes back.
fn common_checks(engine: &mut Engine, ctx: &str) {
    let p2 = poll_all(engine, P2).unwrap();
    assert_eq!(
        payloads_of(&p2),
        ["p0", "p1", "p2", "p3"],
        "{ctx}: partition 2"
    );
    assert_eq!(stored(engine, P2, Consumer::consumer(1)), Some(3), "{ctx}");
    assert_eq!(stored(engine, P2, Consumer::group(GROUP)), Some(1), "{ctx}");
    let sent = send_to(engine, P2, &["p4".into()]);
    assert_eq!(sent.base_offset, 4, "{ctx}: partition 2 takes writes");
    if engine.partition(p1()).unwrap().degraded_reason().is_none() {
        let p1 = poll_all(engine, P1).unwrap();
        assert!(
            payloads_of(&p1).iter().all(|p| !p.starts_with("old")),
            "{ctx}: a purged message is served: {:?}",
            payloads_of(&p1)
        );
        assert_eq!(
            stored(engine, P1, Consumer::consumer(7)),
            None,
            "{ctx}: consumer 7's purged offset came back"
        );
    }
}

fn check(case: &Case, outcome: Result<(Engine, RecoveryReport), EngineError>, ctx: &str) {
    match case.expect {
        Expect::Refused(reason) => {
            let err = outcome.err().unwrap_or_else(|| panic!("{ctx}: started"));
            match &err {
                EngineError::CorruptFile {
                    path,
                    offset,
                    reason: r,
                } => {
                    assert!(path.ends_with("metadata"), "{ctx}: {err}");
                    let trailing = r.contains("after the record");
                    assert_eq!(*offset == 0, !trailing, "{ctx}: {err}");
                    assert!(r.contains(reason), "{ctx}: {err}");
                }
                other => panic!("{ctx}: expected CorruptFile, got {other}"),
            }
        }
        Expect::Degraded(texts) => {
            let (mut engine, report) = outcome.unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let contains_all = |s: &str| texts.iter().all(|t| s.contains(t));
            // In the recovery report...
            let (k, reason) = report
                .degraded
                .iter()
                .find(|(k, _)| *k == p1())
                .unwrap_or_else(|| panic!("{ctx}: not in the report: {:?}", report.degraded));
            assert_eq!(*k, p1());
            assert!(contains_all(reason), "{ctx}: {reason}");
            assert_eq!(report.degraded.len(), 1, "{ctx}: only partition 1");
            // ...in /status/purge...
            let status = snapshot(&engine, &Filter::default(), None, 0).unwrap();
            let row = status
                .partitions
                .iter()
                .find(|r| r.partition_id == P1)
                .unwrap();
            assert!(row.degraded, "{ctx}: status row");
            assert_eq!(status.summary.degraded, 1, "{ctx}");
            // ...and in every request to it, which names the file.
            let err = poll_all(&mut engine, P1).unwrap_err();
            assert!(
                matches!(err, EngineError::Degraded { .. }) && contains_all(&err.to_string()),
                "{ctx}: {err}"
            );
            let err = engine.purge_partition(&stream(), &topic(), P1).unwrap_err();
            assert!(matches!(err, EngineError::Degraded { .. }), "{ctx}: {err}");
            let err = engine
                .send(
                    &stream(),
                    &topic(),
                    &Partitioning::PartitionId(P1),
                    batch(0, 1),
                )
                .unwrap_err();
            assert!(matches!(err, EngineError::Degraded { .. }), "{ctx}: {err}");
            common_checks(&mut engine, ctx);
        }
        Expect::Serves(s) => {
            let (mut engine, report) = outcome.unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert!(report.degraded.is_empty(), "{ctx}: {:?}", report.degraded);
            let r = &report.per_partition[&p1()];
            // Recovery report.
            match s.tail_cut_in {
                None => assert!(r.log.tail_cuts.is_empty(), "{ctx}: {:?}", r.log.tail_cuts),
                Some(base) => {
                    assert_eq!(r.log.tail_cuts.len(), 1, "{ctx}");
                    let name = segment_name(1, base, "log");
                    assert!(r.log.tail_cuts[0].0.ends_with(&name), "{ctx}");
                    assert_eq!(report.tail_cuts, 1, "{ctx}");
                }
            }
            let mut corrupt: Vec<String> = r
                .consumers
                .corrupt
                .iter()
                .map(|n| format!("consumers/{n}"))
                .chain(r.groups.corrupt.iter().map(|n| format!("groups/{n}")))
                .collect();
            corrupt.sort();
            assert_eq!(corrupt, s.corrupt, "{ctx}: corrupt offset files");
            assert_eq!(
                report.corrupt_offset_records,
                s.corrupt.len() as u64,
                "{ctx}"
            );
            assert_eq!(
                report.stale_records, s.stale_records,
                "{ctx}: stale records"
            );
            let ob = engine.partition(p1()).unwrap().obligation().unwrap();
            assert_eq!(
                ob.state().as_str(),
                s.obligation_at_open,
                "{ctx}: obligation"
            );
            // What partition 1 serves.
            let messages = poll_all(&mut engine, P1).unwrap();
            assert_eq!(offsets_of(&messages), s.messages, "{ctx}: offsets served");
            for m in &messages {
                assert_eq!(m.payload, format!("m{}", m.offset).into_bytes(), "{ctx}");
            }
            assert_eq!(
                stored(&mut engine, P1, Consumer::consumer(1)),
                s.consumer,
                "{ctx}"
            );
            assert_eq!(
                stored(&mut engine, P1, Consumer::group(GROUP)),
                s.group,
                "{ctx}"
            );
            // The loss column must agree with what was checked above.
            let kept = s.messages == P1_MESSAGES
                && s.consumer == Some(P1_CONSUMER)
                && s.group == Some(P1_GROUP);
            let reported = s.tail_cut_in.is_some() || !s.corrupt.is_empty();
            let loss = match (kept, reported) {
                (true, _) => Loss::Kept,
                (false, true) => Loss::Reported,
                (false, false) => Loss::Silent,
            };
            assert_eq!(loss, s.loss, "{ctx}: the loss column is wrong");
            // Cleanup finishes, and the partition takes writes where it left off.
            engine.reconcile_until_idle(5);
            let ob = engine.partition(p1()).unwrap().obligation().unwrap();
            assert!(ob.is_applied(), "{ctx}: obligation {:?}", ob.state());
            let sent = send_to(&mut engine, P1, &[format!("m{}", s.next)]);
            assert_eq!(sent.base_offset, s.next, "{ctx}: next offset");
            common_checks(&mut engine, ctx);
            // Dead files restored by the row are gone once cleanup applied.
            let dead = ["00000000000000000000-00000000000000000000.log"];
            let segs = engine
                .storage()
                .list_dir(&paths(engine.data_dir()).segments)
                .unwrap();
            assert!(
                segs.iter().all(|n| !dead.contains(&n.as_str())),
                "{ctx}: {segs:?}"
            );
        }
    }
}

fn run_on_sim(case: &Case) {
    let ctx = format!("row {:?} on the simulator", case.name);
    let sim = new_sim();
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let data_dir = Path::new(DATA_DIR);
    let (mut engine, _) = open(&storage, data_dir).unwrap();
    let dead = build(&mut engine, storage.as_ref(), data_dir);
    // Down (the page cache survives), damaged, started again.
    drop(engine);
    sim.crash(Crash::Process);
    apply(storage.as_ref(), data_dir, case, &dead);
    check(case, open(&storage, data_dir), &ctx);
}

fn run_on_disk(case: &Case) {
    let ctx = format!("row {:?} on the disk", case.name);
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let storage: Arc<dyn DurableStorage> = Arc::new(DiskStorage::new());
    let (mut engine, _) = open(&storage, &data_dir).unwrap();
    let dead = build(&mut engine, storage.as_ref(), &data_dir);
    drop(engine);
    apply(storage.as_ref(), &data_dir, case, &dead);
    check(case, open(&storage, &data_dir), &ctx);
}

#[test]
fn every_damaged_file_has_its_documented_outcome_on_the_simulator() {
    for case in cases() {
        run_on_sim(&case);
    }
}

#[test]
fn damaged_files_have_the_same_outcome_on_the_real_disk() {
    let rows: Vec<Case> = cases().into_iter().filter(|c| c.disk).collect();
    assert!(rows.len() >= 10);
    for case in &rows {
        run_on_disk(case);
    }
}

#[test]
fn the_table_covers_every_file_kind_and_every_damage() {
    let rows = cases();
    let kind = |t: Target| match t {
        Target::Metadata => 0,
        Target::Obligation => 1,
        Target::Consumer(_) => 2,
        Target::Group(_) => 3,
        Target::Log(_) => 4,
        Target::Idx(_) => 5,
    };
    for k in 0..6 {
        let of_kind: Vec<&Case> = rows.iter().filter(|c| kind(c.target) == k).collect();
        assert!(
            of_kind.iter().any(|c| matches!(c.damage, Damage::Flip(_))),
            "kind {k}: flip"
        );
        assert!(
            of_kind
                .iter()
                .any(|c| matches!(c.damage, Damage::Truncate(_))),
            "kind {k}: truncate"
        );
        // A deleted metadata file is its own test below.
        assert!(
            k == 0 || of_kind.iter().any(|c| matches!(c.damage, Damage::Delete)),
            "kind {k}: delete"
        );
    }
}

// ---- root.credentials ---------------------------------------------------------------------

/// The generated root password's hash, `<data>/root.credentials`, read by
/// `http::auth::setup_root` (what `server::start` calls) when no credentials
/// are configured. Given a first start that generated password P, when the
/// file is damaged, then start-up refuses naming the file, or (deleted) a new
/// password is generated and printed, and P no longer logs in.
mod credentials {
    use super::*;
    use sluice_server::http::auth::{
        AuthError, CREDENTIALS_FILE, RootSource, setup_root, verify_password,
    };

    enum Outcome {
        Refused(&'static str),
        NewPassword,
    }

    fn cases() -> Vec<(&'static str, Damage, Outcome)> {
        vec![
            (
                "bit flip in the JSON syntax",
                Damage::Flip(|_| vec![0]),
                Outcome::Refused("not a credentials record"),
            ),
            (
                "bit flip in the hash's parameters",
                // `$argon2id$v=19$m=...`: the `$` before `v=` becomes `4`.
                Damage::Flip(|b| {
                    let text = String::from_utf8_lossy(b);
                    vec![text.find("$v=").unwrap() as u64]
                }),
                Outcome::Refused("bad password hash"),
            ),
            (
                "truncated to half",
                Damage::Truncate(|b| b.len() as u64 / 2),
                Outcome::Refused("not a credentials record"),
            ),
            (
                "truncated to zero bytes",
                Damage::Truncate(|_| 0),
                Outcome::Refused("not a credentials record"),
            ),
            ("deleted", Damage::Delete, Outcome::NewPassword),
        ]
    }

    fn run(storage: &dyn DurableStorage, data_dir: &Path, backend: &str) {
        for (name, damage, outcome) in cases() {
            let ctx = format!("root.credentials {name} on {backend}");
            let path = data_dir.join(CREDENTIALS_FILE);
            if storage.exists(&path).unwrap() {
                storage.remove_file(&path).unwrap();
            }
            let first = setup_root(storage, data_dir, RootSource::StoredOrGenerated).unwrap();
            let password = first.generated_password.unwrap();
            let bytes = storage.read_file(&path).unwrap();
            match damage {
                Damage::Flip(at) => {
                    for pos in at(&bytes) {
                        flip_byte(storage, &path, pos);
                    }
                }
                Damage::Truncate(to) => storage
                    .open(&path, OpenMode::ReadWrite)
                    .unwrap()
                    .truncate(to(&bytes))
                    .unwrap(),
                Damage::Delete => storage.remove_file(&path).unwrap(),
                _ => unreachable!(),
            }
            let again = setup_root(storage, data_dir, RootSource::StoredOrGenerated);
            match outcome {
                Outcome::Refused(reason) => match again {
                    Err(AuthError::File { path: p, reason: r }) => {
                        assert!(p.ends_with(CREDENTIALS_FILE), "{ctx}");
                        assert!(r.contains(reason), "{ctx}: {r}");
                    }
                    other => panic!("{ctx}: {other:?}"),
                },
                Outcome::NewPassword => {
                    let setup = again.unwrap();
                    let new = setup.generated_password.expect("a new password is shown");
                    assert_ne!(new, password, "{ctx}");
                    assert!(verify_password(&new, &setup.user.password_hash), "{ctx}");
                    assert!(
                        !verify_password(&password, &setup.user.password_hash),
                        "{ctx}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_damaged_credentials_file_refuses_start_up_naming_it() {
        let sim = new_sim();
        run(&sim, Path::new(DATA_DIR), "the simulator");
        let dir = tempfile::tempdir().unwrap();
        run(&DiskStorage::new(), dir.path(), "the disk");
    }
}
