//! Base64 (RFC 4648, standard alphabet, padded) for the HTTP messages API:
//! payloads and header values in sends and poll answers.
//!
//! The work is `base64-simd`'s (3.6× the `base64` crate's decoding and 5.6×
//! its encoding on 1 KB payloads here: it was 21% of an HTTP send's samples
//! and 14% of a poll's, docs/performance.md, issue 30).
//!
//! Invariants:
//! - What is accepted, and what it decodes to, is exactly what the `base64`
//!   crate's strict `STANDARD` engine accepts (padding required, no
//!   whitespace, no non-zero trailing bits); a refusal carries that crate's
//!   error, so clients see the same message as before. The tests decode
//!   arbitrary text with both and compare.
//! - Encoding appends to the caller's buffer: a poll answer is one buffer.

use base64::Engine as _;

/// The bytes `text` encodes, or the reason it is not base64.
pub(crate) fn decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    match base64_simd::STANDARD.decode_to_vec(text) {
        Ok(bytes) => Ok(bytes),
        // The error path only: the reason in the words clients already see.
        Err(_) => match base64::engine::general_purpose::STANDARD.decode(text) {
            Err(e) => Err(e),
            // Both accept the same texts (the tests' property): unreachable
            // unless one of them changes, and then refusing is the safe side.
            Ok(_) => Err(base64::DecodeError::InvalidPadding),
        },
    }
}

/// Appends `bytes` as base64 to `out`.
pub(crate) fn encode_into(bytes: &[u8], out: &mut String) {
    base64_simd::STANDARD.encode_append(bytes, out);
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn decoding_accepts_and_yields_what_the_base64_crate_does(
            text in "[A-Za-z0-9+/=\\- \n_.]{0,40}",
        ) {
            prop_assert_eq!(decode(&text).ok(), STANDARD.decode(&text).ok());
        }

        /// Long enough for the SIMD path (38 characters and more), then one
        /// byte changed anywhere, or the end cut or padded.
        #[test]
        fn a_long_encoding_mutated_decodes_as_the_base64_crate_decodes_it(
            bytes in proptest::collection::vec(any::<u8>(), 30..400),
            at in any::<prop::sample::Index>(),
            to in any::<u8>(),
            cut in 0usize..4,
        ) {
            let good = STANDARD.encode(&bytes);
            let mut changed = good.clone().into_bytes();
            let i = at.index(changed.len());
            changed[i] = to;
            let changed = String::from_utf8_lossy(&changed).into_owned();
            let cut_end = good[..good.len() - cut].to_string();
            let padded = format!("{good}=");
            for text in [&changed, &cut_end, &padded] {
                prop_assert_eq!(decode(text).ok(), STANDARD.decode(text).ok(), "{:?}", text);
            }
        }

        #[test]
        fn encoded_bytes_decode_back_and_match_the_base64_crate(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut out = String::from("x");
            encode_into(&bytes, &mut out);
            prop_assert_eq!(&out[1..], STANDARD.encode(&bytes));
            prop_assert_eq!(decode(&out[1..]).unwrap(), bytes);
        }
    }

    #[test]
    fn given_texts_near_the_rules_when_decoded_then_both_decoders_agree() {
        for text in [
            "", "QQ==", "QR==", "QQ", "QQ=", "Q===", "QUJD", "QU JD", "QUJD\n", "QUI=", "QUJ=",
            "====", "A", "AB==CD==", "QUJDRA==", "QUJDRA", "-_-_",
        ] {
            assert_eq!(decode(text).ok(), STANDARD.decode(text).ok(), "{text:?}");
        }
    }
}
