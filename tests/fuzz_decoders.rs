//! Fuzzing every on-disk record decoder with proptest (issue 7, item 3).
//!
//! `cargo fuzz` needs nightly and cargo-fuzz, which this environment does not
//! provide (docs/reliability.md), so the targets are property tests over
//! arbitrary bytes, over mutations of valid files (bit flips, truncations,
//! overwrites, insertions), and over arbitrary payloads *re-sealed* with valid
//! checksums, so the payload codec (bincode) sees garbage the checksums would
//! otherwise stop. Targets: `frame::decode`, `decode_header`,
//! `decode_payload`, `SlotLayout::decode` (offset and obligation records),
//! segment recovery with its batch reader and index loader (`Log::recover`),
//! and `MetadataStore::load`.
//!
//! Properties: no panic; a decoder either returns exactly what was written
//! (or, for a damaged file, an older record or a prefix of the batches) or a
//! typed error; and no length field makes a decoder allocate more than its
//! bound. A counting allocator measures the largest single allocation made
//! while decoding, so a 4 GiB length claim would fail the test rather than
//! slip by on a lazily zeroed allocation.
//!
//! Cases per property: `SLUICE_FUZZ_CASES` (default 256).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use sluice_server::frame::{self, FrameError, HEADER_LEN, Header, MAX_PAYLOAD, Magic};
use sluice_server::metadata::{METADATA_VERSION, MetadataStore, StreamMeta, TopicMeta};
use sluice_server::partition::log::{BatchRecord, IndexEntry, Log, MAX_BATCH_BYTES, Message, v1};
use sluice_server::partition::offsets::{OFFSET_LAYOUT, OffsetRecord};
use sluice_server::partition::purge::{
    DirKind, LoadedObligation, OBLIGATION_LAYOUT, Obligation, ObligationRecord, Removals,
    decode_file,
};
use sluice_server::slots::{SlotLayout, SlotRead};
use sluice_testkit::engine::*;
use sluice_testkit::props;

// ---- the largest single allocation, per thread ---------------------------------------------

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| {
        if size > l.get() {
            l.set(size);
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// wrapper only records sizes in a thread-local `Cell` (no allocation).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

// The allocator of the whole `integration` binary (every suite shares the
// process): it forwards every call and records sizes on the calling thread
// only, so no other suite can see or disturb what a test here measures.
#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns the largest single allocation it made on this thread.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(Cell::get))
}

const MIB: usize = 1 << 20;

fn config() -> ProptestConfig {
    props::config(props::fuzz_cases(256))
}

// ---- forging records -----------------------------------------------------------------------

/// CRC-32C (Castagnoli), bitwise, to seal forged records.
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

/// A frame around `payload` whose checksums are valid, with `claimed_len` in
/// the length field (normally `payload.len()`).
fn seal_claiming(magic: Magic, version: u16, payload: &[u8], claimed_len: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&magic.0);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&claimed_len.to_le_bytes());
    out.extend_from_slice(&crc32c(payload).to_le_bytes());
    let header_crc = crc32c(&out[0..16]);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn seal(magic: Magic, version: u16, payload: &[u8]) -> Vec<u8> {
    seal_claiming(magic, version, payload, payload.len() as u32)
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Overwrite(usize, Vec<u8>),
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => any::<usize>().prop_map(Mutation::Truncate),
        2 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(i, b)| Mutation::Overwrite(i, b)),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
    for m in mutations {
        if bytes.is_empty() {
            return;
        }
        match m {
            Mutation::Flip(i, bit) => {
                let i = i % bytes.len();
                bytes[i] ^= 1 << bit;
            }
            Mutation::Truncate(n) => {
                let n = n % bytes.len();
                bytes.truncate(n);
            }
            Mutation::Overwrite(i, with) => {
                let i = i % bytes.len();
                for (k, b) in with.iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(i + k) {
                        *slot = *b;
                    }
                }
            }
            Mutation::Insert(i, with) => {
                let i = i % (bytes.len() + 1);
                bytes.splice(i..i, with.iter().copied());
            }
        }
    }
}

// ---- valid records to start from -----------------------------------------------------------

fn message(offset: u64, payload: &[u8]) -> Message {
    Message {
        offset,
        timestamp: 1_700_000_000_000_000 + offset,
        // Version 2's field on every third message.
        origin_timestamp: offset
            .is_multiple_of(3)
            .then_some(1_600_000_000_000_000 + offset),
        id: u128::from(offset) << 70 | 7,
        checksum: crc32c(payload),
        headers: offset.is_multiple_of(2).then(|| {
            Headers::from([(
                "k".into(),
                HeaderValue {
                    kind: 2,
                    value: b"v".to_vec(),
                },
            )])
        }),
        payload: payload.to_vec().into(),
    }
}

/// Batches of generation 0 starting at offset 0, `sizes[i]` messages each.
fn batches(sizes: &[u8]) -> Vec<BatchRecord> {
    let mut next = 0u64;
    sizes
        .iter()
        .map(|&n| {
            let base = next;
            let messages = (0..u64::from(n.max(1)))
                .map(|i| message(base + i, format!("m{}", base + i).as_bytes()))
                .collect::<Vec<_>>();
            next += messages.len() as u64;
            BatchRecord {
                generation: 0,
                base_offset: base,
                messages,
            }
        })
        .collect()
}

fn encode_log(batches: &[BatchRecord]) -> (Vec<u8>, Vec<u64>) {
    let mut log = Vec::new();
    let mut positions = Vec::new();
    for b in batches {
        positions.push(log.len() as u64);
        log.extend(frame::encode(Magic::BATCH, 2, b).unwrap());
    }
    (log, positions)
}

fn encode_index(batches: &[BatchRecord], positions: &[u64]) -> Vec<u8> {
    let mut idx = Vec::new();
    for (b, p) in batches.iter().zip(positions) {
        let e = IndexEntry {
            offset: b.base_offset,
            position: *p,
            timestamp: b.messages[0].timestamp,
        };
        idx.extend(frame::encode(Magic::INDEX, 1, &e).unwrap());
    }
    idx
}

fn sample_metadata() -> Metadata {
    let mut meta = Metadata {
        version: 9,
        next_stream_id: 3,
        ..Metadata::default()
    };
    let topic = TopicMeta {
        id: 1,
        name: "events".into(),
        created_at: 5,
        options: persisted(),
        message_expiry: 0,
        max_topic_size: 0,
        replication_factor: 1,
        partitions: BTreeMap::from([(
            1,
            sluice_server::metadata::PartitionMeta {
                id: 1,
                created_at: 5,
                committed_generation: 2,
            },
        )]),
        groups: BTreeMap::new(),
        next_partition_id: 2,
        next_group_id: 1,
    };
    meta.streams.insert(
        1,
        StreamMeta {
            id: 1,
            name: "orders".into(),
            created_at: 4,
            topics: BTreeMap::from([(1, topic)]),
            next_topic_id: 2,
        },
    );
    meta
}

fn sample_obligation() -> Obligation {
    let mut o = Obligation::request(3);
    let mut round = Removals::new();
    round.insert(DirKind::Consumers, "7".to_string());
    round.insert(DirKind::Consumers, "8".to_string());
    o.plan_removals(&round);
    o.record_error("storage: sync failed");
    o
}

/// A two-slot file holding the encoded records `records[i]` (seq `i + 1`).
fn slot_file(layout: SlotLayout, records: Vec<Vec<u8>>) -> Vec<u8> {
    let mut buf = Vec::new();
    for (i, rec) in records.into_iter().enumerate() {
        let seq = i as u64 + 1;
        let at = layout.slot_offset(seq) as usize;
        if buf.len() < at + rec.len() {
            buf.resize(at + rec.len(), 0);
        }
        buf[at..at + rec.len()].copy_from_slice(&rec);
    }
    buf
}

// ---- frame: arbitrary bytes and re-sealed arbitrary payloads --------------------------------

/// Every record kind through `frame::decode` with its production bound.
fn decode_every_kind(bytes: &[u8]) {
    let _ = frame::decode::<Metadata>(Magic::METADATA, 1, bytes, 64 * MIB);
    let _ = frame::decode::<BatchRecord>(Magic::BATCH, 2, bytes, MAX_BATCH_BYTES);
    let _ = frame::decode::<v1::BatchRecord>(Magic::BATCH, 1, bytes, MAX_BATCH_BYTES);
    let _ = frame::decode::<IndexEntry>(Magic::INDEX, 1, bytes, 64);
    let _ = frame::decode::<OffsetRecord>(Magic::OFFSET, OFFSET_LAYOUT.version, bytes, 44);
    let _ = frame::decode::<ObligationRecord>(
        Magic::OBLIGATION,
        OBLIGATION_LAYOUT.version,
        bytes,
        (64 << 10) - 20,
    );
}

const MAGICS: [Magic; 5] = [
    Magic::METADATA,
    Magic::BATCH,
    Magic::INDEX,
    Magic::OFFSET,
    Magic::OBLIGATION,
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn frame_decoders_never_panic_on_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        magic in 0usize..5,
        keep_magic in any::<bool>(),
    ) {
        let mut bytes = bytes;
        if keep_magic && bytes.len() >= 4 {
            // Past the magic check, so the other checks get exercised too.
            bytes[..4].copy_from_slice(&MAGICS[magic].0);
        }
        let (_, largest) = largest_allocation(|| decode_every_kind(&bytes));
        prop_assert!(largest < MIB, "largest allocation {largest}");
    }

    #[test]
    fn decode_payload_never_panics_on_an_arbitrary_header(
        version in any::<u16>(),
        payload_len in any::<u32>(),
        payload_crc in any::<u32>(),
        payload in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let header = Header { version, payload_len: payload_len as usize, payload_crc };
        let _ = frame::decode_payload::<BatchRecord>(&header, 2, &payload);
        let _ = frame::decode_payload::<v1::BatchRecord>(&header, 1, &payload);
        let _ = frame::decode_payload::<Metadata>(&header, 1, &payload);
        let sealed = Header { payload_crc: crc32c(&payload[..payload.len().min(payload_len as usize)]), ..header };
        let (_, largest) = largest_allocation(|| {
            let _ = frame::decode_payload::<ObligationRecord>(&sealed, version, &payload);
        });
        prop_assert!(largest < MIB);
    }

    /// bincode sees arbitrary payloads behind valid checksums: the payload
    /// codec itself must reject garbage without panicking, and no length
    /// inside a payload may allocate beyond the 64 MiB codec limit.
    #[test]
    fn resealed_garbage_payloads_are_typed_errors(
        payload in prop::collection::vec(any::<u8>(), 0..400),
        magic in 0usize..5,
    ) {
        let version = match magic {
            3 => OFFSET_LAYOUT.version,
            4 => OBLIGATION_LAYOUT.version,
            _ => 1,
        };
        let bytes = seal(MAGICS[magic], version, &payload);
        let (_, largest) = largest_allocation(|| decode_every_kind(&bytes));
        prop_assert!(largest <= MAX_PAYLOAD, "largest allocation {largest}");
    }

    /// Mutated valid payloads, re-sealed: closer to real records, so the
    /// decoder gets deep into nested maps, strings and optional headers.
    #[test]
    fn resealed_mutated_payloads_decode_or_fail_typed(
        sizes in prop::collection::vec(1u8..4, 1..3),
        mutations in prop::collection::vec(mutation(), 1..4),
        which in 0usize..3,
    ) {
        let mut payload = match which {
            0 => frame::encode(Magic::BATCH, 2, &batches(&sizes)[0]).unwrap(),
            1 => frame::encode(Magic::METADATA, 1, &sample_metadata()).unwrap(),
            _ => frame::encode(Magic::OBLIGATION, OBLIGATION_LAYOUT.version, &ObligationRecord::from(&sample_obligation())).unwrap(),
        }.split_off(HEADER_LEN);
        mutate(&mut payload, &mutations);
        let version = [2, 1, OBLIGATION_LAYOUT.version][which];
        let bytes = seal([Magic::BATCH, Magic::METADATA, Magic::OBLIGATION][which], version, &payload);
        let (_, largest) = largest_allocation(|| decode_every_kind(&bytes));
        prop_assert!(largest <= MAX_PAYLOAD, "largest allocation {largest}");
    }

    // ---- two-slot files ---------------------------------------------------------------------

    #[test]
    fn slot_decoders_never_panic_on_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let _ = OFFSET_LAYOUT.decode::<OffsetRecord>(&bytes);
        let _ = decode_file(&bytes);
    }

    /// A damaged offset file reads as a value that was written (the newest
    /// or the one before), as empty (a torn first write), or as invalid:
    /// never as a value nobody wrote.
    #[test]
    fn a_damaged_offset_file_never_reads_as_a_value_nobody_wrote(
        values in prop::collection::vec(0u64..1_000_000, 1..5),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let records: Vec<OffsetRecord> = values
            .iter()
            .map(|v| OffsetRecord { generation: 2, offset: Some(*v) })
            .collect();
        let encoded = (1..).zip(&records).map(|(seq, r)| OFFSET_LAYOUT.encode(seq, r).unwrap()).collect();
        let mut bytes = slot_file(OFFSET_LAYOUT, encoded);
        mutate(&mut bytes, &mutations);
        match OFFSET_LAYOUT.decode::<OffsetRecord>(&bytes) {
            SlotRead::Valid { seq, value, .. } => {
                prop_assert!(seq >= 1 && seq as usize <= records.len());
                prop_assert_eq!(value, records[seq as usize - 1]);
                prop_assert!(seq as usize + 1 >= records.len(), "more than one step back");
            }
            SlotRead::Empty | SlotRead::Invalid { .. } => {}
        }
    }

    #[test]
    fn a_damaged_obligation_file_never_reads_as_a_state_nobody_wrote(
        steps in 1usize..5,
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut states = vec![sample_obligation()];
        let mut o = sample_obligation();
        o.requested_to_files_deleted();
        states.push(o.clone());
        o.files_deleted_to_dirs_synced(&BTreeSet::from([DirKind::Consumers]));
        states.push(o.clone());
        o.dirs_synced_to_applied();
        states.push(o);
        states.truncate(steps);
        let encoded = (1..).zip(&states).map(|(seq, o)| OBLIGATION_LAYOUT.encode(seq, &ObligationRecord::from(o)).unwrap()).collect();
        let mut bytes = slot_file(OBLIGATION_LAYOUT, encoded);
        mutate(&mut bytes, &mutations);
        match decode_file(&bytes) {
            LoadedObligation::Valid { seq, obligation, .. } => {
                prop_assert_eq!(&obligation, &states[seq as usize - 1]);
            }
            LoadedObligation::Missing | LoadedObligation::Invalid(_) => {}
        }
    }
}

// ---- segment recovery: the batch reader and the index loader --------------------------------

fn recover(log: &[u8], idx: Option<&[u8]>) -> (Result<Vec<Message>, EngineError>, usize) {
    let sim = SimStorage::with_seed(1);
    let dir = Path::new("/p/segments");
    sim.create_dir_all(dir).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let f = sim.open(&dir.join(name), OpenMode::CreateNew).unwrap();
        if !bytes.is_empty() {
            f.write_at(0, bytes).unwrap();
        }
    };
    write(&segment_name(0, 0, "log"), log);
    if let Some(idx) = idx {
        write(&segment_name(0, 0, "idx"), idx);
    }
    let storage: Arc<dyn DurableStorage> = Arc::new(sim);
    largest_allocation(|| {
        Log::recover(storage.clone(), dir, 0, 0, 64 << 20, 0, false)
            .and_then(|(mut log, _)| log.read(0, u64::MAX))
    })
}

fn all_of(batches: &[BatchRecord]) -> Vec<Message> {
    batches.iter().flat_map(|b| b.messages.clone()).collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn segment_recovery_never_panics_on_arbitrary_bytes(
        log in prop::collection::vec(any::<u8>(), 0..300),
        idx in prop::option::of(prop::collection::vec(any::<u8>(), 0..120)),
        magic_first in any::<bool>(),
    ) {
        let mut log = log;
        if magic_first && log.len() >= 4 {
            log[..4].copy_from_slice(&Magic::BATCH.0);
        }
        let (result, largest) = recover(&log, idx.as_deref());
        if let Err(e) = &result {
            prop_assert!(matches!(e, EngineError::CorruptFile { .. }), "{e}");
        }
        prop_assert!(largest < MIB, "largest allocation {largest}");
    }

    /// A damaged segment serves a prefix of what was written, or degrades
    /// (`CorruptFile`); never a message nobody wrote, never a reordering.
    #[test]
    fn a_damaged_segment_serves_a_prefix_of_what_was_written(
        sizes in prop::collection::vec(1u8..4, 1..6),
        mutations in prop::collection::vec(mutation(), 1..4),
        keep_index in any::<bool>(),
    ) {
        let batches = batches(&sizes);
        let (mut log, positions) = encode_log(&batches);
        let idx = encode_index(&batches, &positions);
        mutate(&mut log, &mutations);
        let (result, largest) = recover(&log, keep_index.then_some(idx.as_slice()));
        let all = all_of(&batches);
        match result {
            Ok(served) => prop_assert!(all.starts_with(&served), "served {} messages not a prefix", served.len()),
            Err(e) => prop_assert!(matches!(e, EngineError::CorruptFile { .. }), "{e}"),
        }
        prop_assert!(largest < MIB, "largest allocation {largest}");
    }

    /// The index is a cache: whatever it holds (damaged, forged, garbage),
    /// an intact log serves every message.
    #[test]
    fn any_index_over_an_intact_log_serves_everything(
        sizes in prop::collection::vec(1u8..4, 1..6),
        mutations in prop::collection::vec(mutation(), 0..4),
        garbage in prop::option::of(prop::collection::vec(any::<u8>(), 0..100)),
        forged in prop::collection::vec((0u64..20, 0u64..400), 0..4),
    ) {
        let batches = batches(&sizes);
        let (log, positions) = encode_log(&batches);
        let mut idx = match garbage {
            Some(g) => g,
            None => encode_index(&batches, &positions),
        };
        mutate(&mut idx, &mutations);
        for (offset, position) in forged {
            let e = IndexEntry { offset, position, timestamp: 0 };
            idx.extend(frame::encode(Magic::INDEX, 1, &e).unwrap());
        }
        let (result, _) = recover(&log, Some(&idx));
        prop_assert_eq!(result.unwrap(), all_of(&batches));
    }

    // ---- metadata ---------------------------------------------------------------------------

    #[test]
    fn metadata_load_returns_what_was_written_or_refuses(
        mutations in prop::collection::vec(mutation(), 0..4),
        garbage in prop::option::of(prop::collection::vec(any::<u8>(), 0..300)),
    ) {
        let meta = sample_metadata();
        let mut bytes = garbage.unwrap_or_else(|| frame::encode(Magic::METADATA, METADATA_VERSION, &meta).unwrap());
        mutate(&mut bytes, &mutations);
        let sim = SimStorage::with_seed(1);
        sim.create_dir_all(Path::new("/data")).unwrap();
        let f = sim.open(Path::new("/data/metadata"), OpenMode::CreateNew).unwrap();
        if !bytes.is_empty() {
            f.write_at(0, &bytes).unwrap();
        }
        let store = MetadataStore::new(Arc::new(sim), Path::new("/data"));
        let (loaded, largest) = largest_allocation(|| store.load());
        match loaded {
            Ok(Some(m)) => prop_assert_eq!(m, meta),
            Ok(None) => prop_assert!(false, "a present file read as missing"),
            Err(e) => prop_assert!(matches!(e, EngineError::CorruptFile { .. }), "{e}"),
        }
        prop_assert!(largest < MIB, "largest allocation {largest}");
    }
}

// ---- length fields that claim far more than is there ----------------------------------------

#[test]
fn a_batch_header_claiming_4_gib_is_rejected_before_any_allocation() {
    let batches = batches(&[1, 2]);
    let (log, positions) = encode_log(&batches);
    // The second batch's header claims u32::MAX bytes, with a valid header checksum.
    let at = positions[1] as usize;
    let payload = &log[at + HEADER_LEN..];
    let mut forged = log[..at].to_vec();
    forged.extend(seal_claiming(Magic::BATCH, 1, payload, u32::MAX));
    let err = frame::decode_header(Magic::BATCH, &forged[at..], MAX_BATCH_BYTES).unwrap_err();
    assert!(matches!(err, FrameError::TooLarge { len, .. } if len == u32::MAX as usize));
    let (result, largest) = recover(&forged, None);
    // Intact but over every bound: degraded, never cut and never read.
    let e = result.unwrap_err();
    assert!(e.to_string().contains("exceeds the limit"), "{e}");
    assert!(largest < MIB, "largest allocation {largest}");
}

#[test]
fn a_batch_header_claiming_32_mib_over_a_short_file_reads_nothing() {
    // Within the batch bound, so only the file length can stop the read.
    let payload = vec![7u8; 40];
    let forged = seal_claiming(Magic::BATCH, 1, &payload, MAX_BATCH_BYTES as u32);
    let (result, largest) = recover(&forged, None);
    assert_eq!(result.unwrap(), Vec::<Message>::new(), "cut as a torn tail");
    assert!(largest < MIB, "largest allocation {largest}");
}

#[test]
fn length_fields_inside_a_sealed_payload_allocate_at_most_the_codec_limit() {
    // bincode varint: 0xFD + u64 LE. A batch whose message payload claims
    // 2^32 bytes, a metadata map claiming 2^62 entries, a string claiming
    // 60 MiB (under the codec limit, far over the record).
    let huge_bytes = {
        let mut p = vec![0u8, 0, 1, 0, 0, 0, 0, 0]; // gen, base, 1 message, offset, ts, id, checksum, no headers
        p.push(0xFD);
        p.extend((1u64 << 32).to_le_bytes());
        p.extend([1, 2, 3]);
        (Magic::BATCH, p)
    };
    let huge_map = {
        let mut p = vec![1u8, 0xFD];
        p.extend((1u64 << 62).to_le_bytes());
        p.extend([1, 2, 3]);
        (Magic::METADATA, p)
    };
    let big_string = {
        let mut p = vec![1u8, 1, 1, 0xFC];
        p.extend((60u32 << 20).to_le_bytes());
        p.extend(b"orders");
        (Magic::METADATA, p)
    };
    let started = std::time::Instant::now();
    for (magic, payload) in [huge_bytes, huge_map, big_string] {
        let bytes = seal(magic, 1, &payload);
        let (_, largest) = largest_allocation(|| decode_every_kind(&bytes));
        assert!(
            largest <= MAX_PAYLOAD,
            "{magic:?}: largest allocation {largest}"
        );
        println!("{magic:?} length claim: largest allocation {largest} bytes");
    }
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
}

#[test]
fn slot_records_claiming_more_than_their_slot_are_too_large() {
    for layout in [OFFSET_LAYOUT, OBLIGATION_LAYOUT] {
        let mut file = vec![0u8; layout.slot_size];
        file.extend(seal_claiming(
            layout.magic,
            layout.version,
            &[0; 8],
            u32::MAX,
        ));
        let (read, largest) = largest_allocation(|| layout.decode::<OffsetRecord>(&file));
        match read {
            SlotRead::Invalid { second, .. } => {
                assert!(matches!(second, FrameError::TooLarge { .. }), "{second}")
            }
            other => panic!("{other:?}"),
        }
        assert!(largest < MIB);
    }
}
