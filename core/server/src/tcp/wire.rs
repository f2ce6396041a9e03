//! Little-endian primitives of the Iggy binary protocol: a bounds-checked
//! reader over a request payload and the writers the response encoders use.
//!
//! Invariants:
//! - Every read checks its bounds first and answers a typed `WireError`; no
//!   index, slice or arithmetic here can panic on any input (lengths are
//!   added with `checked_add`).
//! - A decoded name is 1 to 255 bytes of UTF-8, an identifier is Iggy's
//!   `kind, length, value` with a 4-byte numeric or a 1 to 255 byte string.

use crate::identifier::Identifier;

/// Why a payload does not decode. Each maps to one Iggy error code
/// (`WireError::iggy_code`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("the payload ends at byte {at}, {need} more bytes were expected")]
    Truncated { at: usize, need: usize },
    #[error("{what} is invalid: {reason}")]
    Invalid { what: &'static str, reason: String },
    #[error("{0} trailing bytes after the request")]
    Trailing(usize),
    #[error("message checksum mismatch at message {index}")]
    MessageChecksum { index: usize },
    #[error("batch checksum mismatch")]
    BatchChecksum,
}

/// Iggy's `invalid_format` (4).
pub(crate) const INVALID_FORMAT: u32 = 4;
/// Iggy's `invalid_identifier` (6).
pub(crate) const INVALID_IDENTIFIER: u32 = 6;
/// Iggy's `invalid_message_checksum` (4027) and `invalid_batch_checksum` (4039).
pub(crate) const INVALID_MESSAGE_CHECKSUM: u32 = 4027;
pub(crate) const INVALID_BATCH_CHECKSUM: u32 = 4039;
/// Iggy's `invalid_option_value` (4042).
pub(crate) const INVALID_OPTION_VALUE: u32 = 4042;

impl WireError {
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        WireError::Invalid {
            what,
            reason: reason.into(),
        }
    }

    /// The Iggy error code a client gets for this payload.
    pub(crate) fn iggy_code(&self) -> u32 {
        match self {
            WireError::Invalid {
                what: "identifier", ..
            } => INVALID_IDENTIFIER,
            WireError::Invalid {
                what: "option value",
                ..
            } => INVALID_OPTION_VALUE,
            WireError::MessageChecksum { .. } => INVALID_MESSAGE_CHECKSUM,
            WireError::BatchChecksum => INVALID_BATCH_CHECKSUM,
            _ => INVALID_FORMAT,
        }
    }
}

pub(crate) type WireResult<T> = Result<T, WireError>;

/// A cursor over a payload.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> WireResult<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated {
            at: self.pos,
            need: n,
        })?;
        let out = self.buf.get(self.pos..end).ok_or(WireError::Truncated {
            at: self.pos,
            need: n,
        })?;
        self.pos = end;
        Ok(out)
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or(&[]);
        self.pos = self.buf.len();
        out
    }

    fn array<const N: usize>(&mut self) -> WireResult<[u8; N]> {
        let bytes = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> WireResult<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u32(&mut self) -> WireResult<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> WireResult<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn u128(&mut self) -> WireResult<u128> {
        Ok(u128::from_le_bytes(self.array()?))
    }

    /// A `u8`-length-prefixed UTF-8 string of `min..=255` bytes.
    pub(crate) fn short_str(&mut self, what: &'static str, min: usize) -> WireResult<String> {
        let len = usize::from(self.u8()?);
        if len < min {
            return Err(WireError::invalid(
                what,
                format!("must be at least {min} bytes"),
            ));
        }
        let bytes = self.bytes(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::invalid(what, "not UTF-8"))
    }

    /// An Iggy name: 1 to 255 bytes of UTF-8.
    pub(crate) fn name(&mut self, what: &'static str) -> WireResult<String> {
        self.short_str(what, 1)
    }

    /// An Iggy identifier: kind 1 (numeric, 4 bytes) or 2 (string, 1 to 255).
    pub(crate) fn identifier(&mut self) -> WireResult<Identifier> {
        let kind = self.u8()?;
        let len = usize::from(self.u8()?);
        let value = self.bytes(len)?;
        match kind {
            1 => {
                let bytes: [u8; 4] = value.try_into().map_err(|_| {
                    WireError::invalid("identifier", "a numeric id must be 4 bytes")
                })?;
                Ok(Identifier::Numeric(u32::from_le_bytes(bytes)))
            }
            2 if !value.is_empty() => std::str::from_utf8(value)
                .map(|s| Identifier::Name(s.to_string()))
                .map_err(|_| WireError::invalid("identifier", "a name must be UTF-8")),
            2 => Err(WireError::invalid("identifier", "a name must not be empty")),
            other => Err(WireError::invalid(
                "identifier",
                format!("unknown identifier kind {other}"),
            )),
        }
    }

    /// Iggy's optional partition id: a flag byte (1 = present) then 4 bytes.
    pub(crate) fn optional_partition(&mut self) -> WireResult<Option<u32>> {
        let flag = self.u8()?;
        let raw = self.u32()?;
        Ok((flag == 1).then_some(raw))
    }

    /// Fails unless the whole payload was read.
    pub(crate) fn finish(&self) -> WireResult<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

/// Appends Iggy's encodings to a buffer.
pub(crate) trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_u128(&mut self, v: u128);
    fn put_f32(&mut self, v: f32);
    /// `u8` length then bytes; callers pass names already bounded to 255.
    fn put_name(&mut self, s: &str);
    /// `u32` length then bytes.
    fn put_long_str(&mut self, s: &str);
    /// Iggy's identifier encoding of a numeric id.
    #[cfg(test)]
    fn put_numeric_id(&mut self, id: u32);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u128(&mut self, v: u128) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_f32(&mut self, v: f32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_name(&mut self, s: &str) {
        let bytes = s.as_bytes();
        let len = bytes.len().min(255);
        debug_assert!(bytes.len() <= 255, "names are validated to 255 bytes");
        self.push(len as u8);
        self.extend_from_slice(&bytes[..len]);
    }
    fn put_long_str(&mut self, s: &str) {
        self.put_u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        self.extend_from_slice(s.as_bytes());
    }
    #[cfg(test)]
    fn put_numeric_id(&mut self, id: u32) {
        self.push(1);
        self.push(4);
        self.put_u32(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_short_buffer_when_reading_then_it_is_truncated_not_a_panic() {
        let mut r = Reader::new(&[1, 2]);
        assert_eq!(r.u32(), Err(WireError::Truncated { at: 0, need: 4 }));
        let mut r = Reader::new(&[2, 200, b'a']);
        assert!(matches!(r.identifier(), Err(WireError::Truncated { .. })));
    }

    #[test]
    fn given_identifiers_when_reading_then_numeric_and_names_decode_and_bad_kinds_fail() {
        let mut buf = Vec::new();
        buf.put_numeric_id(7);
        buf.extend_from_slice(&[2, 3, b'a', b'b', b'c', 9, 0]);
        let mut r = Reader::new(&buf);
        assert_eq!(r.identifier(), Ok(Identifier::Numeric(7)));
        assert_eq!(r.identifier(), Ok(Identifier::Name("abc".into())));
        assert_eq!(r.identifier().map_err(|e| e.iggy_code()), Err(6));
    }
}
