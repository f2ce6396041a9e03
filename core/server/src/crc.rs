//! CRC32C, the checksum of every record sluice writes (`frame.rs`), and the
//! CRC of a concatenation from the CRCs of its parts, so a batch frame's
//! checksum covers payloads whose own CRC32C is already known (each
//! message's, computed where the message was decoded) without reading them
//! again.
//!
//! `crc32c` and `crc32c_append` are the one way sluice computes the
//! checksum: crc-fast's carry-less multiplication, which reads a 1 KB
//! payload in about 60% of the time the `crc32c` crate's instruction loop
//! takes on this machine, and half from 4 KiB (ADR 0005 §3). The `crc32c`
//! crate is the reference the tests compare both with.
//!
//! For byte strings `A` and `B`: `crc(A ‖ B) = shift(crc(A), |B|) ⊕ crc(B)`,
//! where `shift(c, n)` multiplies `c` by `x^(8n)` modulo the CRC32C
//! polynomial (the register after `n` zero bytes, with no pre- or
//! post-inversion: the inversions of `A`'s and `B`'s CRCs cancel). The
//! multiplication works in the reflected bit order CRC32C is computed in,
//! where `x^0` is the top bit.
//!
//! Invariants:
//! - `crc32c(b)` is CRC32C (Castagnoli, reflected, inverted in and out) of
//!   `b`, and `crc32c_append(crc32c(a), b) == crc32c(a ‖ b)`, for all `a`
//!   and `b` (property tests against the `crc32c` crate), so records written
//!   by any build read the same.
//! - `Shift::new(b.len()).concat(crc32c(a), crc32c(b)) == crc32c(a ‖ b)` for
//!   all `a` and `b` (the property tests below check it against the `crc32c`
//!   crate).
//! - `Shift::new(n).apply(c) == shift(c, n)`: a shift is linear in `c` over
//!   GF(2), so four tables of the images of each byte position, built once
//!   per length, give it in four lookups.
//! - Nothing here checks data: a caller that passes a CRC that is not its
//!   bytes' gets a frame whose checksum fails when it is read (a corrupt
//!   record, reported by path), never a frame that silently matches other
//!   bytes. `FrameBuilder` asserts the CRC in debug builds.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

/// CRC32C of `a ‖ bytes`, given `crc = crc32c(a)`.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    // The register continues from the CRC with its final inversion undone.
    let mut digest = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(bytes);
    // CRC32C's register is 32 bits wide: the digest never sets a higher one.
    digest.finalize() as u32
}

/// CRC32C's polynomial, reflected.
const POLY: u32 = 0x82F6_3B78;

/// `x^0` in the reflected order.
const ONE: u32 = 1 << 31;

/// `a · b mod P`, bit by bit (reflected order).
fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = ONE;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// `x^(2^k) mod P` for `k` in `0..67`, squared from `x^1`: enough for the
/// exponent `8n` of any `u64` length (its bits 3 to 66).
fn powers_of_x() -> [u32; 67] {
    let mut out = [0u32; 67];
    out[0] = ONE >> 1;
    for k in 1..out.len() {
        out[k] = mul_mod(out[k - 1], out[k - 1]);
    }
    out
}

/// `x^(8n) mod P`: square-and-multiply over the bits of `8n`.
fn x_pow_bytes(n: u64) -> u32 {
    thread_local! {
        static POWERS: [u32; 67] = powers_of_x();
    }
    POWERS.with(|powers| {
        let mut result = ONE;
        // 8n = n << 3: bit j of n is power 2^(j + 3), j < 64.
        for (j, power) in powers[3..].iter().enumerate() {
            if n >> j & 1 != 0 {
                result = mul_mod(*power, result);
            }
        }
        result
    })
}

/// The shift of a CRC over `len` bytes, as four byte tables.
#[derive(Clone)]
pub struct Shift {
    len: usize,
    tables: Box<[[u32; 256]; 4]>,
}

impl std::fmt::Debug for Shift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shift").field("len", &self.len).finish()
    }
}

impl Shift {
    /// About 32 multiplications and 1,000 XORs: worth it once the bytes it
    /// saves reading run to tens of KiB (`SHIFT_PAYS_AT`).
    pub fn new(len: usize) -> Shift {
        let op = x_pow_bytes(len as u64);
        let mut tables = Box::new([[0u32; 256]; 4]);
        for (k, table) in tables.iter_mut().enumerate() {
            // Each table entry is the XOR of the images of its set bits.
            let mut basis = [0u32; 8];
            for (bit, image) in basis.iter_mut().enumerate() {
                *image = mul_mod(op, 1u32 << (8 * k + bit));
            }
            for byte in 1..256usize {
                let low = byte.trailing_zeros() as usize;
                table[byte] = table[byte & (byte - 1)] ^ basis[low];
            }
        }
        Shift { len, tables }
    }

    /// The length this shift is for.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `crc32c(a ‖ b)` from `crc32c(a)` and `crc32c(b)`, `b` being `len()` bytes.
    pub fn concat(&self, crc_a: u32, crc_b: u32) -> u32 {
        let [b0, b1, b2, b3] = crc_a.to_le_bytes();
        self.tables[0][usize::from(b0)]
            ^ self.tables[1][usize::from(b1)]
            ^ self.tables[2][usize::from(b2)]
            ^ self.tables[3][usize::from(b3)]
            ^ crc_b
    }
}

/// The bytes a `Shift` must save from rereading before building one pays:
/// building costs about what checksumming this many bytes does.
pub const SHIFT_PAYS_AT: usize = 64 << 10;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `crc32c(a ‖ b)` from `crc32c(a)`, `crc32c(b)` and `b`'s length, for
    /// any length: the definition `Shift` tabulates for one.
    fn concat(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
        mul_mod(x_pow_bytes(len_b), crc_a) ^ crc_b
    }

    #[test]
    fn given_known_parts_when_concatenated_then_the_crc_is_the_whole_strings() {
        let whole = b"123456789";
        for cut in 0..=whole.len() {
            let (a, b) = whole.split_at(cut);
            assert_eq!(
                concat(crc32c::crc32c(a), crc32c::crc32c(b), b.len() as u64),
                crc32c::crc32c(whole),
                "cut at {cut}"
            );
        }
        // The check value of CRC32C.
        assert_eq!(crc32c::crc32c(whole), 0xE306_9283);
    }

    #[test]
    fn given_lengths_past_2_pow_61_when_shifted_then_the_powers_compose() {
        // x^(8(a+b)) = x^(8a) · x^(8b): checked where 8n overflows 64 bits.
        for (a, b) in [
            (1u64 << 61, 1u64 << 61),
            (u64::MAX / 2, u64::MAX / 2),
            (1 << 62, 3),
        ] {
            assert_eq!(
                x_pow_bytes(a.wrapping_add(b)),
                mul_mod(x_pow_bytes(a), x_pow_bytes(b)),
                "{a} + {b}"
            );
        }
    }

    #[test]
    fn given_the_check_string_when_checksummed_then_it_is_crc32cs_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
    }

    #[test]
    fn given_large_and_unaligned_inputs_when_checksummed_then_they_are_the_reference_crates() {
        let bytes: Vec<u8> = (0..(1usize << 20) + 4099)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for (start, len) in [
            (0, 1 << 20),
            (1, (1 << 20) + 4097),
            (3, 65_536),
            (7, 65_537),
        ] {
            let b = &bytes[start..start + len];
            assert_eq!(crc32c(b), crc32c::crc32c(b), "{start}+{len}");
            let (head, tail) = b.split_at(len / 3);
            assert_eq!(
                crc32c_append(crc32c(head), tail),
                crc32c::crc32c(b),
                "{start}+{len} in two"
            );
        }
    }

    proptest! {
        #[test]
        fn crc32c_and_append_are_the_reference_crates(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..5000),
        ) {
            prop_assert_eq!(crc32c(&b), crc32c::crc32c(&b));
            prop_assert_eq!(crc32c_append(crc32c(&a), &b), crc32c::crc32c_append(crc32c::crc32c(&a), &b));
            let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
            prop_assert_eq!(crc32c_append(crc32c(&a), &b), crc32c(&whole));
        }

        #[test]
        fn concat_is_the_crc_of_the_concatenation(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..3000),
        ) {
            let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
            let expected = crc32c::crc32c(&whole);
            let (ca, cb) = (crc32c::crc32c(&a), crc32c::crc32c(&b));
            prop_assert_eq!(concat(ca, cb, b.len() as u64), expected);
            prop_assert_eq!(Shift::new(b.len()).concat(ca, cb), expected);
        }
    }
}
