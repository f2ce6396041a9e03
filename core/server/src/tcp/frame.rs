//! Iggy 0.11's TCP framing: every request and reply starts with a 256-byte
//! consensus header (VSR style), the total frame size at byte 48.
//!
//! Request header fields used here (offsets in bytes): `size` u32 @48,
//! `command` u8 @60 (5 = request), `client` u128 @128, `request_checksum`
//! u128 @144, `request` u64 @168, `operation` u8 @176, `session` u64 @184,
//! and for non-replicated operations the command code in `reserved[0..4]`
//! (u32 @196). A reply echoes `request_checksum` @128, `client` @160,
//! `request` @200 and `operation` @208, carries `status` u32 @216 (0 = ok,
//! otherwise Iggy's error code with an empty body) and `command` 8 (reply).
//!
//! Invariants:
//! - `RequestHeader::parse` accepts any 256 bytes and answers a typed error;
//!   it never panics. The declared size is checked against the configured
//!   maximum before a single body byte is read.
//! - A reply header always states the exact size of the frame written.

pub const HEADER_SIZE: usize = 256;
const SIZE_OFFSET: usize = 48;
const COMMAND_OFFSET: usize = 60;
const COMMAND_REQUEST: u8 = 5;
const COMMAND_REPLY: u8 = 8;

/// The consensus operations a client request can carry (Iggy's
/// `Operation` discriminants).
pub mod op {
    pub const REGISTER: u8 = 1;
    pub const NON_REPLICATED: u8 = 2;
    pub(crate) const LOGOUT: u8 = 3;
}

/// Why a header is refused. Each closes the connection: framing can no
/// longer be trusted after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is smaller than the {HEADER_SIZE}-byte header")]
    TooSmall { size: u32 },
    #[error("frame size {size} exceeds the configured maximum of {max} bytes")]
    TooLarge { size: u32, max: usize },
    #[error("command {0} is not a request")]
    NotARequest(u8),
    #[error("client id must not be 0")]
    NoClient,
}

/// `N` bytes of a header from `at` (every offset used is a constant inside
/// the 256 bytes; a byte past the end would read as 0, never panic).
fn field<const N: usize>(raw: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = raw.get(at + i).copied().unwrap_or(0);
    }
    out
}

/// The fields of a request header the server acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Total frame size, header included.
    pub size: u32,
    pub client: u128,
    pub request_checksum: u128,
    pub request: u64,
    pub operation: u8,
    pub session: u64,
    /// The command code carried in `reserved` (non-replicated requests).
    pub reserved_code: u32,
}

impl RequestHeader {
    /// Parses a header and checks its frame size against `max_frame`.
    pub fn parse(raw: &[u8; HEADER_SIZE], max_frame: usize) -> Result<RequestHeader, FrameError> {
        let size = u32::from_le_bytes(field(raw, SIZE_OFFSET));
        if (size as usize) < HEADER_SIZE {
            return Err(FrameError::TooSmall { size });
        }
        if size as usize > max_frame {
            return Err(FrameError::TooLarge {
                size,
                max: max_frame,
            });
        }
        let command = field::<1>(raw, COMMAND_OFFSET)[0];
        if command != COMMAND_REQUEST {
            return Err(FrameError::NotARequest(command));
        }
        let client = u128::from_le_bytes(field(raw, 128));
        if client == 0 {
            return Err(FrameError::NoClient);
        }
        Ok(RequestHeader {
            size,
            client,
            request_checksum: u128::from_le_bytes(field(raw, 144)),
            request: u64::from_le_bytes(field(raw, 168)),
            operation: field::<1>(raw, 176)[0],
            session: u64::from_le_bytes(field(raw, 184)),
            reserved_code: u32::from_le_bytes(field(raw, 196)),
        })
    }

    /// The body length the header announces.
    pub(crate) fn body_len(&self) -> usize {
        (self.size as usize).saturating_sub(HEADER_SIZE)
    }

    /// Encodes a request header (for tests and tools driving the server).
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut out = [0u8; HEADER_SIZE];
        out[SIZE_OFFSET..SIZE_OFFSET + 4].copy_from_slice(&self.size.to_le_bytes());
        out[COMMAND_OFFSET] = COMMAND_REQUEST;
        out[128..144].copy_from_slice(&self.client.to_le_bytes());
        out[144..160].copy_from_slice(&self.request_checksum.to_le_bytes());
        out[168..176].copy_from_slice(&self.request.to_le_bytes());
        out[176] = self.operation;
        out[184..192].copy_from_slice(&self.session.to_le_bytes());
        out[196..200].copy_from_slice(&self.reserved_code.to_le_bytes());
        out
    }
}

/// Writes a reply header for `request` with `status` and a body of
/// `body_len` bytes into the first 256 bytes of `out`.
pub(crate) fn encode_reply_header(
    out: &mut [u8],
    request: &RequestHeader,
    status: u32,
    body_len: usize,
) -> Result<(), FrameError> {
    debug_assert!(
        out.len() >= HEADER_SIZE,
        "reply buffer has room for the header"
    );
    let total = HEADER_SIZE.saturating_add(body_len);
    let size = u32::try_from(total).map_err(|_| FrameError::TooLarge {
        size: u32::MAX,
        max: u32::MAX as usize,
    })?;
    let Some(header) = out.get_mut(..HEADER_SIZE) else {
        return Err(FrameError::TooSmall { size });
    };
    header.fill(0);
    header[SIZE_OFFSET..SIZE_OFFSET + 4].copy_from_slice(&size.to_le_bytes());
    header[COMMAND_OFFSET] = COMMAND_REPLY;
    header[128..144].copy_from_slice(&request.request_checksum.to_le_bytes());
    header[160..176].copy_from_slice(&request.client.to_le_bytes());
    header[200..208].copy_from_slice(&request.request.to_le_bytes());
    header[208] = request.operation;
    header[216..220].copy_from_slice(&status.to_le_bytes());
    Ok(())
}

/// A decoded reply header (for tests and tools).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    pub size: u32,
    pub(crate) client: u128,
    pub(crate) request: u64,
    pub(crate) operation: u8,
    pub status: u32,
}

impl ReplyHeader {
    pub fn parse(raw: &[u8]) -> Option<ReplyHeader> {
        if raw.len() < HEADER_SIZE || field::<1>(raw, COMMAND_OFFSET)[0] != COMMAND_REPLY {
            return None;
        }
        Some(ReplyHeader {
            size: u32::from_le_bytes(field(raw, SIZE_OFFSET)),
            client: u128::from_le_bytes(field(raw, 160)),
            request: u64::from_le_bytes(field(raw, 200)),
            operation: field::<1>(raw, 208)[0],
            status: u32::from_le_bytes(field(raw, 216)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(size: u32) -> RequestHeader {
        RequestHeader {
            size,
            client: 9,
            request_checksum: 0,
            request: 3,
            operation: op::NON_REPLICATED,
            session: 0,
            reserved_code: 1,
        }
    }

    #[test]
    fn given_an_encoded_header_when_parsed_then_every_field_round_trips() {
        let h = header(300);
        assert_eq!(RequestHeader::parse(&h.encode(), 1 << 20), Ok(h));
        assert_eq!(h.body_len(), 44);
    }

    #[test]
    fn given_bad_sizes_or_commands_when_parsed_then_they_are_refused() {
        assert_eq!(
            RequestHeader::parse(&header(10).encode(), 1 << 20),
            Err(FrameError::TooSmall { size: 10 })
        );
        assert!(matches!(
            RequestHeader::parse(&header(5000).encode(), 4096),
            Err(FrameError::TooLarge { .. })
        ));
        let mut raw = header(256).encode();
        raw[COMMAND_OFFSET] = 8;
        assert_eq!(
            RequestHeader::parse(&raw, 1 << 20),
            Err(FrameError::NotARequest(8))
        );
    }

    #[test]
    fn given_a_reply_header_when_encoded_then_it_echoes_the_request() {
        let h = header(256);
        let mut out = [0u8; HEADER_SIZE];
        encode_reply_header(&mut out, &h, 40, 12).unwrap();
        let r = ReplyHeader::parse(&out).unwrap();
        assert_eq!(
            (r.size, r.client, r.request, r.operation, r.status),
            (268, 9, 3, op::NON_REPLICATED, 40)
        );
    }
}
