//! Iggy's user-header value kinds: one table of code, name and size, read
//! by the HTTP API (which names kinds: `"uint32"`) and the TCP protocol
//! (which sends codes: `11`).
//!
//! Invariants:
//! - Codes run from 1 (`raw`) to 15 (`float64`), as iggy_common 0.11's
//!   `HeaderKind`; a code or name not in `KINDS` is refused by both
//!   transports.
//! - A kind with a size takes values of exactly that many bytes; `raw` and
//!   `string` take 1 to 255. Keys and values follow the same rules (SDK
//!   0.11 allows every kind as a key), checked by `check` for both
//!   transports.

/// One header value kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeaderKind {
    /// Iggy's name of the kind in JSON.
    pub(crate) name: &'static str,
    /// Iggy's code of the kind on the wire.
    pub(crate) code: u8,
    /// The exact size of a value, for fixed-size kinds.
    pub(crate) size: Option<usize>,
}

const fn kind(name: &'static str, code: u8, size: Option<usize>) -> HeaderKind {
    HeaderKind { name, code, size }
}

/// The `string` kind (the usual key kind; option keys are always strings).
pub(crate) const STRING_KIND: u8 = crate::partition::log::STRING_KEY_KIND;
/// The `uint64` kind.
pub(crate) const UINT64_KIND: u8 = 12;

/// Every kind, by code.
pub(crate) const KINDS: [HeaderKind; 15] = [
    kind("raw", 1, None),
    kind("string", STRING_KIND, None),
    kind("bool", 3, Some(1)),
    kind("int8", 4, Some(1)),
    kind("int16", 5, Some(2)),
    kind("int32", 6, Some(4)),
    kind("int64", 7, Some(8)),
    kind("int128", 8, Some(16)),
    kind("uint8", 9, Some(1)),
    kind("uint16", 10, Some(2)),
    kind("uint32", 11, Some(4)),
    kind("uint64", UINT64_KIND, Some(8)),
    kind("uint128", 13, Some(16)),
    kind("float32", 14, Some(4)),
    kind("float64", 15, Some(8)),
];

/// The kind with wire code `code`.
pub(crate) fn by_code(code: u8) -> Option<&'static HeaderKind> {
    KINDS.iter().find(|k| k.code == code)
}

/// Longest `raw` or `string` field.
pub(crate) const MAX_FIELD_LEN: usize = 255;

/// Why a header key or value of kind `code` cannot hold `len` bytes, if it
/// cannot (an unknown kind, a fixed-size kind of another size, a variable
/// one empty or over 255 bytes).
pub(crate) fn check(code: u8, len: usize) -> Result<&'static HeaderKind, String> {
    let kind = by_code(code).ok_or_else(|| format!("unknown header kind {code}"))?;
    let fits = match kind.size {
        Some(n) => len == n,
        None => (1..=MAX_FIELD_LEN).contains(&len),
    };
    if fits {
        Ok(kind)
    } else {
        Err(format!(
            "a {} takes {} bytes, not {len}",
            kind.name,
            kind.size
                .map_or(format!("1 to {MAX_FIELD_LEN}"), |n| n.to_string())
        ))
    }
}

/// Iggy's wire size of a message's user headers: per entry, the key's and
/// the value's kind byte, 4-byte length and bytes.
pub(crate) fn wire_len(headers: Option<&crate::partition::log::Headers>) -> usize {
    headers
        .into_iter()
        .flatten()
        .map(|(k, v)| 10 + k.value.len() + v.value.len())
        .sum()
}

/// The kind Iggy's JSON calls `name`.
pub(crate) fn by_name(name: &str) -> Option<&'static HeaderKind> {
    KINDS.iter().find(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_the_table_then_codes_run_from_1_to_15_in_order_and_names_are_unique() {
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(usize::from(k.code), i + 1, "{}", k.name);
            assert_eq!(by_name(k.name), Some(k));
            assert_eq!(by_code(k.code), Some(k));
        }
        assert_eq!(by_code(0), None);
        assert_eq!(by_code(16), None);
        assert_eq!(
            by_name("uint32").map(|k| (k.code, k.size)),
            Some((11, Some(4)))
        );
    }

    #[test]
    fn given_fields_when_checked_then_sizes_follow_the_kind() {
        assert!(check(STRING_KIND, 1).is_ok());
        assert!(check(STRING_KIND, 255).is_ok());
        assert!(check(STRING_KIND, 0).is_err());
        assert!(check(STRING_KIND, 256).is_err());
        assert!(check(11, 4).is_ok());
        assert!(check(11, 8).unwrap_err().contains("uint32 takes 4 bytes"));
        assert!(check(0, 1).unwrap_err().contains("unknown header kind 0"));
    }
}
