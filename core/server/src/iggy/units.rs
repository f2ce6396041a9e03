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
}
