//! A reply as it is written to the socket: the bytes the transport encodes
//! itself (frame header, poll header, batch and message headers, user
//! headers) in one buffer, and the payloads of polled messages left where
//! the engine put them, written in between with vectored writes.
//!
//! Why: a polled payload is already a buffer of its own (the engine's
//! `Message`); copying it into a contiguous reply only to have the kernel
//! copy it again cost one full pass over every polled byte.
//!
//! Invariants:
//! - The frame on the wire is `slices()` concatenated, which is exactly
//!   `to_vec()`: the bytes of `own` up to the first cut, the payload of the
//!   first message, `own` up to the next cut, and so on, then the rest of
//!   `own`. Cuts are non-decreasing and within `own` (`with_payloads` checks).
//! - `len()` is the frame's size, so the header's `size` field encoded from
//!   it matches what is written.

use std::io::IoSlice;

use crate::partition::log::Message;

#[derive(Debug, Default)]
pub struct ReplyFrame {
    own: Vec<u8>,
    /// `cuts[i]`: where in `own` the payload of `messages[i]` is written.
    cuts: Vec<usize>,
    messages: Vec<Message>,
    payload_bytes: usize,
}

impl ReplyFrame {
    /// A frame made only of bytes encoded here.
    pub(crate) fn bytes(own: Vec<u8>) -> Self {
        ReplyFrame {
            own,
            ..ReplyFrame::default()
        }
    }

    /// A frame whose payloads come from `messages`: `cuts[i]` is where in
    /// `own` the payload of `messages[i]` is written. Cuts that are not
    /// non-decreasing positions within `own`, one per message, are an
    /// encoder bug (debug builds stop; release builds keep the valid prefix,
    /// so the frame stays consistent with its `len`).
    pub(crate) fn with_payloads(
        own: Vec<u8>,
        mut cuts: Vec<usize>,
        messages: Vec<Message>,
    ) -> Self {
        let valid = cuts
            .iter()
            .scan(0usize, |prev, &c| {
                let ok = c >= *prev && c <= own.len();
                *prev = c;
                Some(ok)
            })
            .take_while(|ok| *ok)
            .count()
            .min(messages.len());
        debug_assert!(
            valid == cuts.len() && valid == messages.len(),
            "one valid cut per message"
        );
        cuts.truncate(valid);
        let payload_bytes = messages.iter().take(valid).map(|m| m.payload.len()).sum();
        ReplyFrame {
            own,
            cuts,
            messages,
            payload_bytes,
        }
    }

    /// The transport's own bytes (the frame header is written into them).
    pub(crate) fn own_mut(&mut self) -> &mut [u8] {
        &mut self.own
    }

    /// The frame's size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.own.len() + self.payload_bytes
    }

    /// The frame as slices, in wire order (empty slices left out).
    pub(crate) fn slices(&self) -> Vec<IoSlice<'_>> {
        let mut out = Vec::with_capacity(2 * self.cuts.len() + 1);
        let mut at = 0;
        for (cut, m) in self.cuts.iter().zip(&self.messages) {
            let own = self.own.get(at..*cut).unwrap_or(&[]);
            if !own.is_empty() {
                out.push(IoSlice::new(own));
            }
            if !m.payload.is_empty() {
                out.push(IoSlice::new(&m.payload));
            }
            at = *cut;
        }
        let rest = self.own.get(at..).unwrap_or(&[]);
        if !rest.is_empty() {
            out.push(IoSlice::new(rest));
        }
        out
    }

    /// The frame as one buffer (tests and tools; the server writes `slices`).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        for s in self.slices() {
            out.extend_from_slice(&s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &[u8]) -> Message {
        Message {
            offset: 0,
            timestamp: 0,
            origin_timestamp: None,
            id: 0,
            checksum: 0,
            headers: None,
            payload: bytes::Bytes::copy_from_slice(payload),
        }
    }

    #[test]
    fn given_cuts_when_flattened_then_payloads_sit_at_their_cuts_and_len_matches() {
        let f = ReplyFrame::with_payloads(
            b"head-x-tail".to_vec(),
            vec![4, 7, 7],
            vec![message(b"AA"), message(b""), message(b"CCC")],
        );
        assert_eq!(f.to_vec(), b"headAA-x-CCCtail");
        assert_eq!(f.len(), f.to_vec().len());
    }

    #[test]
    fn given_only_own_bytes_when_flattened_then_they_are_the_frame() {
        let f = ReplyFrame::bytes(b"abc".to_vec());
        assert_eq!(f.to_vec(), b"abc");
        assert_eq!(f.slices().len(), 1);
    }
}
