//! Iggy's unit sentinels against the engine's: a topic's `message_expiry`
//! and `max_topic_size` travel with Iggy's encoding (`0` = the server's
//! default, `u64::MAX` = never / unlimited), the engine keeps `0` for none.
//!
//! Invariants:
//! - `from_iggy_limit(to_iggy_limit(v)) == v` for every engine value; the
//!   two transports convert with these functions only, so a topic created
//!   over one reads back the same over the other.
//! - Expiries are microseconds and sizes bytes on both sides; nothing here
//!   rescales.
//! - Text values (a topic option over TCP, where Iggy accepts `7 days` or
//!   `1 GiB`) are parsed into the same wire values a number would be, with
//!   Iggy's words: `unlimited`/`none`/`never_expire` for never,
//!   `server_default`/`default` for the server's default. A plain number is
//!   taken as it is (microseconds or bytes). Durations go through
//!   `humantime`, sizes through `byte-unit`, as Iggy's own parsers do.

/// Iggy's `IggyExpiry::NeverExpire` / `MaxTopicSize::Unlimited` on the wire.
pub(crate) const IGGY_UNLIMITED: u64 = u64::MAX;

/// Engine value (`0` = none) → Iggy wire value (`u64::MAX` = none).
pub(crate) fn to_iggy_limit(engine_value: u64) -> u64 {
    if engine_value == 0 {
        IGGY_UNLIMITED
    } else {
        engine_value
    }
}

/// A `message_expiry` from the wire → engine value: Iggy's "server default"
/// (`0`) is the server's configured default (`[retention]`), `u64::MAX`
/// never (engine 0), anything else microseconds as given.
pub(crate) fn expiry_from_iggy(wire_value: u64, server_default: u64) -> u64 {
    if wire_value == 0 {
        server_default
    } else {
        from_iggy_limit(wire_value)
    }
}

/// Iggy wire value (`0` = server default, `u64::MAX` = none) → engine value.
pub(crate) fn from_iggy_limit(wire_value: u64) -> u64 {
    if wire_value == IGGY_UNLIMITED {
        0
    } else {
        wire_value
    }
}

/// The longest expiry Iggy accepts as text: `u32::MAX` seconds.
const MAX_EXPIRY_SECS: u64 = u32::MAX as u64;

/// A `message_expiry` as text → its Iggy wire value (microseconds, `0` =
/// server default, `u64::MAX` = never).
pub(crate) fn expiry_from_text(text: &str) -> Result<u64, String> {
    let text = text.trim();
    match text {
        "unlimited" | "Unlimited" | "none" | "None" | "never_expire" => Ok(IGGY_UNLIMITED),
        "default" | "Default" | "server_default" | "Server_default" => Ok(0),
        _ => match text.parse::<u64>() {
            Ok(micros) => Ok(micros),
            Err(_) => {
                let d = humantime::parse_duration(text).map_err(|e| {
                    format!("{text:?} is not a duration (such as \"7 days\" or \"1h 30m\"): {e}")
                })?;
                if d.as_secs() > MAX_EXPIRY_SECS {
                    return Err(format!("{text:?} is longer than {MAX_EXPIRY_SECS} seconds"));
                }
                Ok(u64::try_from(d.as_micros()).unwrap_or(IGGY_UNLIMITED))
            }
        },
    }
}

/// A byte size as text (`1 GiB`, `128MB`, `4096`) → bytes; Iggy's words
/// for none (`unlimited`, `none`, `0`) are 0.
pub(crate) fn bytes_from_text(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if matches!(text, "unlimited" | "Unlimited" | "none" | "None") {
        return Ok(0);
    }
    if let Ok(n) = text.parse::<u64>() {
        return Ok(n);
    }
    text.parse::<byte_unit::Byte>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{text:?} is not a size (such as \"1 GiB\" or \"128 MB\"): {e}"))
}

/// A `max_topic_size` as text → its Iggy wire value (bytes, `0` = server
/// default, `u64::MAX` = unlimited).
pub(crate) fn max_topic_size_from_text(text: &str) -> Result<u64, String> {
    match text.trim() {
        "unlimited" => Ok(IGGY_UNLIMITED),
        "server_default" => Ok(0),
        other => bytes_from_text(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_engine_limits_when_rendered_then_zero_means_unlimited_on_the_wire() {
        assert_eq!(to_iggy_limit(0), u64::MAX);
        assert_eq!(to_iggy_limit(5), 5);
        assert_eq!(from_iggy_limit(u64::MAX), 0);
        assert_eq!(from_iggy_limit(0), 0);
        assert_eq!(from_iggy_limit(7), 7);
    }

    #[test]
    fn given_a_wire_expiry_when_converted_then_zero_is_the_server_default() {
        assert_eq!(expiry_from_iggy(0, 60), 60);
        assert_eq!(expiry_from_iggy(u64::MAX, 60), 0);
        assert_eq!(expiry_from_iggy(9, 60), 9);
    }

    #[test]
    fn given_human_readable_values_when_parsed_then_they_are_iggys_wire_values() {
        assert_eq!(expiry_from_text("7 days"), Ok(7 * 86_400 * 1_000_000));
        assert_eq!(expiry_from_text("1h 30m"), Ok(5_400 * 1_000_000));
        assert_eq!(expiry_from_text("250"), Ok(250));
        assert_eq!(expiry_from_text("unlimited"), Ok(IGGY_UNLIMITED));
        assert_eq!(expiry_from_text("never_expire"), Ok(IGGY_UNLIMITED));
        assert_eq!(expiry_from_text("server_default"), Ok(0));
        assert!(expiry_from_text("soon").unwrap_err().contains("soon"));
        assert!(expiry_from_text("200 years").is_err());
        assert_eq!(bytes_from_text("1 GiB"), Ok(1 << 30));
        assert_eq!(bytes_from_text("128MB"), Ok(128_000_000));
        assert_eq!(bytes_from_text("4096"), Ok(4096));
        assert_eq!(bytes_from_text("none"), Ok(0));
        assert!(bytes_from_text("big").unwrap_err().contains("big"));
        assert_eq!(max_topic_size_from_text("unlimited"), Ok(IGGY_UNLIMITED));
        assert_eq!(max_topic_size_from_text("2 GiB"), Ok(2 << 30));
        assert_eq!(max_topic_size_from_text("server_default"), Ok(0));
    }
}
