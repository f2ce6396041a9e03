//! Record framing: every record sluice writes is `header ‖ payload`.
//!
//! ```text
//! offset size field
//!  0     4    magic          identifies the record kind (b"SLMD", b"SLBT", ...)
//!  4     2    version        payload format version, little endian
//!  6     2    flags          reserved, 0
//!  8     4    payload_len    little endian, bounded per record kind
//! 12     4    payload_crc    CRC32C of the payload
//! 16     4    header_crc     CRC32C of bytes 0..16
//! 20     n    payload        bincode 2.0.1 (serde API, standard config)
//! ```
//!
//! Invariants:
//! - A record is accepted only if the magic, both checksums, the version and
//!   the length bound all hold; nothing else in sluice interprets raw bytes.
//! - The header has its own checksum, so a corrupt length can never make a
//!   reader allocate or skip an absurd amount, and a reader can tell a torn
//!   tail (bad header) from a damaged payload followed by valid records.
//! - The codec (bincode) sits only behind this module: swapping it changes
//!   the version number, not the framing (docs/adr/0005-record-framing-and-codec.md).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::crc::Shift;

pub const HEADER_LEN: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Magic(pub [u8; 4]);

impl Magic {
    pub const METADATA: Magic = Magic(*b"SLMD");
    pub const BATCH: Magic = Magic(*b"SLBT");
    pub const OFFSET: Magic = Magic(*b"SLOF");
    pub const OBLIGATION: Magic = Magic(*b"SLOB");
    pub const INDEX: Magic = Magic(*b"SLIX");
    /// A partition's retention low-water mark (ADR 0016).
    pub const LOW_WATER: Magic = Magic(*b"SLLW");
    /// A partition's tiering state: its remote segments and deletions (ADR 0027).
    pub const TIERING: Magic = Magic(*b"SLTR");
    pub const USERS: Magic = Magic(*b"SLUS");
    pub const SESSIONS: Magic = Magic(*b"SLSE");
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("truncated record: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("bad magic {found:02x?}, expected {expected:02x?}")]
    BadMagic { found: [u8; 4], expected: [u8; 4] },
    #[error("header checksum mismatch")]
    BadHeaderChecksum,
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("payload checksum mismatch")]
    BadPayloadChecksum,
    #[error("unsupported format version {found} (this build reads {expected})")]
    UnsupportedVersion { found: u16, expected: u16 },
    #[error("payload does not decode: {0}")]
    Decode(String),
    #[error("record does not encode: {0}")]
    Encode(String),
}

impl FrameError {
    /// A torn write (or a record never written) rather than damage to a whole record.
    #[cfg(test)]
    pub(crate) fn is_torn(&self) -> bool {
        matches!(self, FrameError::Truncated { .. })
    }
}

/// A validated header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u16,
    pub payload_len: usize,
    pub payload_crc: u32,
}

impl Header {
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }
}

/// The largest payload any record kind may declare; per-kind bounds are smaller.
pub const MAX_PAYLOAD: usize = 64 << 20;

type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_PAYLOAD>,
>;

/// bincode's own limit is a second guard: no length field inside a payload can
/// make the decoder claim more than `MAX_PAYLOAD` bytes.
fn config() -> Config {
    bincode::config::standard().with_limit::<MAX_PAYLOAD>()
}

/// Encodes `value` as one framed record.
pub fn encode<T: Serialize>(magic: Magic, version: u16, value: &T) -> Result<Vec<u8>, FrameError> {
    // Room for a small record (an offset or obligation slot) from the
    // start: a buffer of just the header grew at least once per record.
    let mut out = Vec::with_capacity(HEADER_LEN + 64);
    out.resize(HEADER_LEN, 0);
    bincode::serde::encode_into_std_write(value, &mut out, config())
        .map_err(|e| FrameError::Encode(e.to_string()))?;
    let payload_len = out.len() - HEADER_LEN;
    let len32 = u32::try_from(payload_len).map_err(|_| FrameError::TooLarge {
        len: payload_len,
        max: u32::MAX as usize,
    })?;
    let payload_crc = crate::crc::crc32c(&out[HEADER_LEN..]);
    out[0..4].copy_from_slice(&magic.0);
    out[4..6].copy_from_slice(&version.to_le_bytes());
    out[6..8].copy_from_slice(&0u16.to_le_bytes());
    out[8..12].copy_from_slice(&len32.to_le_bytes());
    out[12..16].copy_from_slice(&payload_crc.to_le_bytes());
    let header_crc = crate::crc::crc32c(&out[0..16]);
    out[16..20].copy_from_slice(&header_crc.to_le_bytes());
    Ok(out)
}

/// The most bytes a `Plain` holds: seven 128-bit fields.
const PLAIN_MAX: usize = 7 * 17;

/// Unsigned integers and options of them, encoded as the record codec
/// encodes them (bincode's standard configuration: an unsigned integer of
/// 16 bits or wider is a varint (a `u8` is its byte, which `Plain` does not
/// write), its value itself below 251 and otherwise a marker
/// byte (251, 252, 253, 254 for 2, 4, 8, 16 bytes) then its little-endian
/// bytes; an option is a `0` byte, or a `1` byte then its value) without a
/// codec call. The per-message fields of a batch are the one encode on the
/// data path hot enough for the codec's per-call cost to show
/// (docs/performance.md, "Issue 30, sixth session"); every other value goes
/// through `encode`. The tests compare each shape with the codec's bytes.
#[derive(Debug, Clone)]
pub struct Plain {
    bytes: [u8; PLAIN_MAX],
    len: usize,
    /// Set when a field did not fit: `bytes` then refuses.
    overflowed: bool,
}

impl Default for Plain {
    fn default() -> Self {
        Plain {
            bytes: [0; PLAIN_MAX],
            len: 0,
            overflowed: false,
        }
    }
}

impl Plain {
    /// An unsigned integer of at most 64 bits.
    pub fn uint(&mut self, value: u64) -> &mut Self {
        let le = value.to_le_bytes();
        match value {
            0..251 => self.put(&le[..1]),
            251..=0xFFFF => self.marked(251, &le[..2]),
            0x1_0000..=0xFFFF_FFFF => self.marked(252, &le[..4]),
            _ => self.marked(253, &le),
        }
    }

    /// A 128-bit unsigned integer.
    pub fn uint128(&mut self, value: u128) -> &mut Self {
        match u64::try_from(value) {
            Ok(narrow) => self.uint(narrow),
            Err(_) => self.marked(254, &value.to_le_bytes()),
        }
    }

    /// An absent option of any type.
    pub fn none(&mut self) -> &mut Self {
        self.put(&[0])
    }

    /// An option of an unsigned integer.
    pub fn option(&mut self, value: Option<u64>) -> &mut Self {
        match value {
            None => self.none(),
            Some(value) => self.put(&[1]).uint(value),
        }
    }

    fn marked(&mut self, marker: u8, le: &[u8]) -> &mut Self {
        self.put(&[marker]).put(le)
    }

    fn put(&mut self, bytes: &[u8]) -> &mut Self {
        match self.bytes.get_mut(self.len..self.len + bytes.len()) {
            Some(slot) => {
                slot.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.overflowed = true,
        }
        self
    }

    /// The encoded fields.
    pub fn bytes(&self) -> Result<&[u8], FrameError> {
        if self.overflowed {
            return Err(FrameError::Encode(format!(
                "more than {PLAIN_MAX} bytes of plain fields"
            )));
        }
        Ok(self.bytes.get(..self.len).unwrap_or_default())
    }
}

/// A payload shorter than this is copied into the frame's own buffer
/// rather than written from where it lies: a slice of its own costs more
/// (an iovec, and the kernel's per-segment work) than copying it.
const BORROW_AT_LEAST: usize = 512;

/// Builds one framed record from pieces: values encoded here and byte
/// strings borrowed from their owners (a batch's payloads), so a large byte
/// string is checksummed in place and written from where it lies, never
/// copied into the frame. The bytes produced are exactly those of `encode`
/// on a value whose serialization is the same pieces in the same order
/// (a byte string is bincode's varint length, then the bytes).
#[derive(Debug)]
pub struct FrameBuilder<'a> {
    own: Vec<u8>,
    /// `(at, bytes)`: `bytes` goes where `own` is cut at `at`.
    cuts: Vec<(usize, &'a [u8])>,
    payload_crc: u32,
    payload_len: usize,
}

impl<'a> FrameBuilder<'a> {
    /// `own_capacity`: the expected size of the encoded (not borrowed) part.
    pub fn new(own_capacity: usize) -> Self {
        let mut own = Vec::with_capacity(HEADER_LEN + own_capacity);
        own.resize(HEADER_LEN, 0);
        FrameBuilder {
            own,
            cuts: Vec::new(),
            payload_crc: 0,
            payload_len: 0,
        }
    }

    /// Appends `value` encoded with the record codec.
    pub fn encode<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FrameError> {
        let start = self.own.len();
        bincode::serde::encode_into_std_write(value, &mut self.own, config())
            .map_err(|e| FrameError::Encode(e.to_string()))?;
        self.payload_crc = crate::crc::crc32c_append(self.payload_crc, &self.own[start..]);
        self.payload_len += self.own.len() - start;
        Ok(())
    }

    /// Appends `value` encoded, then a byte string as the codec encodes one
    /// (`serialize_bytes`: its length as a varint, then the bytes; large ones
    /// borrowed), whose CRC32C (`crc`) the caller already has: given a `shift`
    /// for its length, the frame's CRC takes `crc` in without reading the
    /// bytes again (`crate::crc`). `value` and the string's length go
    /// through the codec in one call, as the tuple `(value, len)`, whose
    /// encoding is theirs one after the other (a tuple has no prefix): the
    /// bytes are those of two calls, for half the codec and CRC calls per
    /// message of a batch.
    pub fn encoded_then_bytes<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
        bytes: &'a [u8],
        crc: u32,
        shift: Option<&Shift>,
    ) -> Result<(), FrameError> {
        self.encode(&(value, bytes.len() as u64))?;
        self.then_bytes(bytes, crc, shift);
        Ok(())
    }

    /// `encoded_then_bytes` for a value of plain fields: the same bytes as
    /// the codec's for the tuple of those fields and the string's length,
    /// written without a codec call (`Plain`).
    pub fn plain_then_bytes(
        &mut self,
        fields: &mut Plain,
        bytes: &'a [u8],
        crc: u32,
        shift: Option<&Shift>,
    ) -> Result<(), FrameError> {
        let encoded = fields.uint(bytes.len() as u64).bytes()?;
        self.payload_crc = crate::crc::crc32c_append(self.payload_crc, encoded);
        self.payload_len += encoded.len();
        self.own.extend_from_slice(encoded);
        self.then_bytes(bytes, crc, shift);
        Ok(())
    }

    /// A byte string's bytes after its length: taken into the CRC from
    /// `crc` when `shift` is for its length, read again otherwise.
    fn then_bytes(&mut self, bytes: &'a [u8], crc: u32, shift: Option<&Shift>) {
        match shift.filter(|s| s.len() == bytes.len()) {
            Some(shift) => {
                debug_assert_eq!(
                    crc,
                    crate::crc::crc32c(bytes),
                    "the CRC given is the bytes'"
                );
                self.payload_crc = shift.concat(self.payload_crc, crc);
            }
            None => self.payload_crc = crate::crc::crc32c_append(self.payload_crc, bytes),
        }
        self.place(bytes);
    }

    /// Puts `bytes` (already counted in the CRC) in the frame: copied if
    /// small, borrowed otherwise.
    fn place(&mut self, bytes: &'a [u8]) {
        self.payload_len += bytes.len();
        if bytes.len() < BORROW_AT_LEAST {
            self.own.extend_from_slice(bytes);
        } else {
            self.cuts.push((self.own.len(), bytes));
        }
    }

    /// The record: header written, pieces in order.
    pub fn finish(mut self, magic: Magic, version: u16) -> Result<Framed<'a>, FrameError> {
        let len32 = u32::try_from(self.payload_len).map_err(|_| FrameError::TooLarge {
            len: self.payload_len,
            max: u32::MAX as usize,
        })?;
        let own = &mut self.own;
        own[0..4].copy_from_slice(&magic.0);
        own[4..6].copy_from_slice(&version.to_le_bytes());
        own[6..8].copy_from_slice(&0u16.to_le_bytes());
        own[8..12].copy_from_slice(&len32.to_le_bytes());
        own[12..16].copy_from_slice(&self.payload_crc.to_le_bytes());
        let header_crc = crate::crc::crc32c(&own[0..16]);
        own[16..20].copy_from_slice(&header_crc.to_le_bytes());
        Ok(Framed {
            own: self.own,
            cuts: self.cuts,
            len: HEADER_LEN + self.payload_len,
        })
    }
}

/// A framed record as pieces (see `FrameBuilder`).
#[derive(Debug)]
pub struct Framed<'a> {
    own: Vec<u8>,
    cuts: Vec<(usize, &'a [u8])>,
    len: usize,
}

impl Framed<'_> {
    /// The record's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The record as slices in order (empty ones left out).
    pub fn slices(&self) -> Vec<std::io::IoSlice<'_>> {
        let mut out = Vec::with_capacity(2 * self.cuts.len() + 1);
        let mut at = 0;
        for &(cut, bytes) in &self.cuts {
            let own = self.own.get(at..cut).unwrap_or(&[]);
            if !own.is_empty() {
                out.push(std::io::IoSlice::new(own));
            }
            if !bytes.is_empty() {
                out.push(std::io::IoSlice::new(bytes));
            }
            at = cut;
        }
        let rest = self.own.get(at..).unwrap_or(&[]);
        if !rest.is_empty() {
            out.push(std::io::IoSlice::new(rest));
        }
        out
    }

    /// The record as one buffer (tests and tools).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for s in self.slices() {
            out.extend_from_slice(&s);
        }
        out
    }
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// Validates a header (the first `HEADER_LEN` bytes of `bytes`).
pub fn decode_header(magic: Magic, bytes: &[u8], max_payload: usize) -> Result<Header, FrameError> {
    if bytes.len() < HEADER_LEN {
        return Err(FrameError::Truncated {
            need: HEADER_LEN,
            have: bytes.len(),
        });
    }
    let mut found = [0u8; 4];
    found.copy_from_slice(&bytes[0..4]);
    if found != magic.0 {
        return Err(FrameError::BadMagic {
            found,
            expected: magic.0,
        });
    }
    if crate::crc::crc32c(&bytes[0..16]) != le_u32(&bytes[16..20]) {
        return Err(FrameError::BadHeaderChecksum);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    let payload_len = le_u32(&bytes[8..12]) as usize;
    if payload_len > max_payload {
        return Err(FrameError::TooLarge {
            len: payload_len,
            max: max_payload,
        });
    }
    Ok(Header {
        version,
        payload_len,
        payload_crc: le_u32(&bytes[12..16]),
    })
}

/// Checks a payload against its header: present, its checksum, the version.
pub(crate) fn check_payload<'a>(
    header: &Header,
    expected_version: u16,
    payload: &'a [u8],
) -> Result<&'a [u8], FrameError> {
    if payload.len() < header.payload_len {
        return Err(FrameError::Truncated {
            need: header.frame_len(),
            have: HEADER_LEN + payload.len(),
        });
    }
    let payload = &payload[..header.payload_len];
    if crate::crc::crc32c(payload) != header.payload_crc {
        return Err(FrameError::BadPayloadChecksum);
    }
    if header.version != expected_version {
        return Err(FrameError::UnsupportedVersion {
            found: header.version,
            expected: expected_version,
        });
    }
    Ok(payload)
}

fn whole<T>(
    decoded: Result<(T, usize), bincode::error::DecodeError>,
    len: usize,
) -> Result<T, FrameError> {
    let (value, used) = decoded.map_err(|e| FrameError::Decode(e.to_string()))?;
    if used != len {
        return Err(FrameError::Decode(format!(
            "{} trailing bytes after the record",
            len - used
        )));
    }
    Ok(value)
}

/// Checks a payload against its header and decodes it.
pub fn decode_payload<T: DeserializeOwned>(
    header: &Header,
    expected_version: u16,
    payload: &[u8],
) -> Result<T, FrameError> {
    let payload = check_payload(header, expected_version, payload)?;
    whole(
        bincode::serde::decode_from_slice(payload, config()),
        payload.len(),
    )
}

/// Decodes a bare payload with the record codec, no header and no checks:
/// the reference the hand-written batch decoder is held to.
#[cfg(test)]
pub(crate) fn decode_bare<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    whole(
        bincode::serde::decode_from_slice(payload, config()),
        payload.len(),
    )
}

/// Decodes one whole record at the start of `bytes`; returns it and its length.
pub fn decode<T: DeserializeOwned>(
    magic: Magic,
    expected_version: u16,
    bytes: &[u8],
    max_payload: usize,
) -> Result<(T, usize), FrameError> {
    let header = decode_header(magic, bytes, max_payload)?;
    let value = decode_payload(&header, expected_version, &bytes[HEADER_LEN..])?;
    Ok((value, header.frame_len()))
}

/// Decodes a file that holds exactly one record (the users, the sessions):
/// anything after the record is corruption.
pub fn decode_file<T: DeserializeOwned>(
    magic: Magic,
    expected_version: u16,
    bytes: &[u8],
    max_payload: usize,
) -> Result<T, FrameError> {
    let (value, used) = decode(magic, expected_version, bytes, max_payload)?;
    if used != bytes.len() {
        return Err(FrameError::Decode(format!(
            "{} bytes after the record",
            bytes.len() - used
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Rec {
        a: u64,
        b: String,
    }

    fn rec() -> Vec<u8> {
        encode(
            Magic::OFFSET,
            1,
            &Rec {
                a: 7,
                b: "x".into(),
            },
        )
        .unwrap()
    }

    #[test]
    fn round_trip() {
        let bytes = rec();
        let (r, n): (Rec, usize) = decode(Magic::OFFSET, 1, &bytes, 1024).unwrap();
        assert_eq!(
            r,
            Rec {
                a: 7,
                b: "x".into()
            }
        );
        assert_eq!(n, bytes.len());
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = rec();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(
                decode::<Rec>(Magic::OFFSET, 1, &b, 1024).is_err(),
                "bit {i}"
            );
        }
    }

    #[test]
    fn every_truncation_is_reported_as_torn_or_rejected() {
        let bytes = rec();
        for n in 0..bytes.len() {
            let err = decode::<Rec>(Magic::OFFSET, 1, &bytes[..n], 1024).unwrap_err();
            assert!(err.is_torn(), "{n}: {err}");
        }
    }

    #[test]
    fn wrong_version_and_oversize_are_typed_errors() {
        let bytes = rec();
        assert!(matches!(
            decode::<Rec>(Magic::OFFSET, 2, &bytes, 1024),
            Err(FrameError::UnsupportedVersion {
                found: 1,
                expected: 2
            })
        ));
        assert!(matches!(
            decode::<Rec>(Magic::OFFSET, 1, &bytes, 2),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(
            decode::<Rec>(Magic::BATCH, 1, &bytes, 1024),
            Err(FrameError::BadMagic { .. })
        ));
    }

    /// The codec's bytes for `value`.
    fn codec<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(value, config()).unwrap_or_default()
    }

    #[test]
    fn given_each_varint_width_when_encoded_plain_then_the_bytes_are_the_codecs() {
        let edges: [u128; 12] = [
            0,
            250,
            251,
            0xFFFF,
            0x1_0000,
            0xFFFF_FFFF,
            0x1_0000_0000,
            u64::MAX as u128,
            u64::MAX as u128 + 1,
            u128::MAX,
            1_764_000_000_000_000,
            42,
        ];
        for v in edges {
            let mut plain = Plain::default();
            assert_eq!(plain.uint128(v).bytes().ok(), Some(&codec(&v)[..]), "{v}");
            if let Ok(narrow) = u64::try_from(v) {
                let mut plain = Plain::default();
                assert_eq!(plain.uint(narrow).bytes().ok(), Some(&codec(&narrow)[..]));
            }
        }
    }

    #[test]
    fn given_more_fields_than_fit_when_encoded_plain_then_it_is_a_typed_error() {
        let mut plain = Plain::default();
        for _ in 0..8 {
            plain.uint128(u128::MAX);
        }
        assert!(matches!(plain.bytes(), Err(FrameError::Encode(_))));
    }

    use proptest::prelude::*;

    /// A `u64` from each varint width's range, its edges included, as often
    /// as from the widest one.
    fn widths() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..251,
            251u64..=0xFFFF,
            0x1_0000u64..=0xFFFF_FFFF,
            0x1_0000_0000u64..=u64::MAX,
            proptest::sample::select(vec![
                250u64,
                251,
                0xFFFF,
                0x1_0000,
                0xFFFF_FFFF,
                0x1_0000_0000,
                u64::MAX
            ]),
        ]
    }

    proptest::proptest! {
        #[test]
        fn plain_fields_are_the_codecs_tuple(
            offset in widths(),
            timestamp in widths(),
            origin in proptest::option::of(widths()),
            id in prop_oneof![widths().prop_map(u128::from), any::<u128>()],
            checksum in prop_oneof![widths().prop_map(|v| v as u32), any::<u32>()],
            len in widths(),
        ) {
            let mut plain = Plain::default();
            plain
                .uint(offset)
                .uint(timestamp)
                .option(origin)
                .uint128(id)
                .uint(u64::from(checksum))
                .none()
                .uint(len);
            let none: Option<Vec<u8>> = None;
            let expected = codec(&(offset, timestamp, origin, id, checksum, none, len));
            proptest::prop_assert_eq!(plain.bytes().ok(), Some(&expected[..]));
        }
    }
}
