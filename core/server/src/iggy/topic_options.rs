//! A topic's options as Iggy clients send them (a map of text keys and
//! values, over either transport), parsed into the engine's
//! `TopicOptions`, and the compression check of a topic's creation and
//! update.
//!
//! Invariants:
//! - Topic options accept exactly the keys SDK 0.11 names:
//!   `durability` and `consumer_offset_durability` (values `replicated` =
//!   `buffered` on one node, `buffered`, `persisted`), `segment_size` (bytes
//!   or a size such as `128 MiB`, `0` = the default, else 4 KiB to 1 GiB),
//!   and Iggy's journal knobs `messages_required_to_save` (1 to 16 Mi),
//!   `size_of_messages_required_to_save` (up to 1 GiB) and
//!   `preallocate_segments` (a bool), which are checked within Iggy's bounds
//!   and have no effect: sluice has no journal (a send is written when it is
//!   acknowledged, `durability` says when it is synced) and does not
//!   preallocate. Any other key or value is refused naming it, before the
//!   engine is called.
//! - `enforce_fsync` (a bool), the name Apache Iggy's server gives the same
//!   choice since SDK 0.11 (its `iggy-bench --enforce-fsync` sends it), is
//!   `durability`: `true` is `persisted`, `false` is `buffered`. Given with
//!   a `durability` that says otherwise, it is refused naming it: one topic
//!   has one policy.
//! - Streams take no options, and a topic's options are fixed at creation:
//!   an update carrying any is refused naming the first key.
//! - Compression is `none` or `gzip` (a name in any case, or Iggy's code),
//!   kept with the topic and reported back, never applied: Iggy's server
//!   stores it without compressing either, and messages are stored as sent.

use std::collections::BTreeMap;

use super::error::{ApiError, ApiResult};
use super::units::bytes_from_text;
use crate::metadata::{Compression, DEFAULT_SEGMENT_SIZE, Durability, TopicOptions};

/// Iggy's bounds on its journal knobs (accepted, without effect here).
const MAX_MESSAGES_REQUIRED_TO_SAVE: u32 = 16 * 1024 * 1024;
const MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE: u64 = 1 << 30;

/// Bounds on a topic's `segment_size` option (bytes).
pub(crate) const MIN_SEGMENT_SIZE: u64 = 4096;
pub(crate) const MAX_SEGMENT_SIZE: u64 = 1 << 30;

/// The compression algorithm a creation or an update names, if it names
/// one; an unknown one is refused naming it.
pub(crate) fn parse_compression(value: Option<&str>) -> ApiResult<Option<Compression>> {
    value
        .map(|v| {
            Compression::parse(v).ok_or_else(|| {
                ApiError::invalid_option_value("compression_algorithm", v, "none or gzip")
            })
        })
        .transpose()
}

/// Refuses options where none are accepted (a stream's, a topic update's),
/// naming the first key.
pub(crate) fn reject_options(options: &BTreeMap<String, String>) -> ApiResult<()> {
    match options.keys().next() {
        Some(key) => Err(ApiError::unsupported_option(key)),
        None => Ok(()),
    }
}

fn durability(key: &str, value: &str) -> ApiResult<Durability> {
    match value.to_ascii_lowercase().as_str() {
        // Iggy's default; on one node there is no replica, so it is `buffered`.
        "replicated" | "buffered" => Ok(Durability::Buffered),
        "persisted" => Ok(Durability::Persisted),
        _ => Err(ApiError::invalid_option_value(
            key,
            value,
            "replicated, buffered or persisted",
        )),
    }
}

/// Parses the `options` map of a topic creation.
pub(crate) fn parse_topic_options(options: &BTreeMap<String, String>) -> ApiResult<TopicOptions> {
    let mut out = TopicOptions::default();
    let mut named_durability = None;
    let mut enforce_fsync = None;
    for (key, value) in options {
        match key.as_str() {
            "durability" => named_durability = Some(durability(key, value)?),
            "enforce_fsync" => {
                let fsync = match value.trim().to_ascii_lowercase().as_str() {
                    "true" | "1" => Durability::Persisted,
                    "false" | "0" => Durability::Buffered,
                    _ => return Err(ApiError::invalid_option_value(key, value, "true or false")),
                };
                enforce_fsync = Some((fsync, value));
            }
            "consumer_offset_durability" => {
                out.consumer_offset_durability = durability(key, value)?
            }
            "segment_size" => {
                let size = bytes_from_text(value).map_err(|_| {
                    ApiError::invalid_option_value(key, value, "a size (bytes, or such as 128 MiB)")
                })?;
                out.segment_size = match size {
                    0 => DEFAULT_SEGMENT_SIZE,
                    s if (MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&s) => s,
                    _ => {
                        return Err(ApiError::invalid_option_value(
                            key,
                            value,
                            &format!("{MIN_SEGMENT_SIZE} to {MAX_SEGMENT_SIZE} bytes"),
                        ));
                    }
                };
            }
            "messages_required_to_save" => {
                let n: u32 = value.trim().parse().unwrap_or(0);
                if !(1..=MAX_MESSAGES_REQUIRED_TO_SAVE).contains(&n) {
                    return Err(ApiError::invalid_option_value(
                        key,
                        value,
                        &format!("1 to {MAX_MESSAGES_REQUIRED_TO_SAVE} messages"),
                    ));
                }
            }
            "size_of_messages_required_to_save" => {
                let within = bytes_from_text(value)
                    .is_ok_and(|n| n <= MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE);
                if !within {
                    return Err(ApiError::invalid_option_value(
                        key,
                        value,
                        "a size up to 1 GiB",
                    ));
                }
            }
            "preallocate_segments" => {
                if !matches!(value.trim(), "true" | "false" | "0" | "1") {
                    return Err(ApiError::invalid_option_value(key, value, "true or false"));
                }
            }
            other => return Err(ApiError::unsupported_option(other)),
        }
    }
    out.durability = match (named_durability, enforce_fsync) {
        (Some(named), Some((fsync, value))) if named != fsync => {
            return Err(ApiError::invalid_option_value(
                "enforce_fsync",
                value,
                "agreement with the durability the same request names",
            ));
        }
        (_, Some((fsync, _))) => fsync,
        (Some(named), None) => named,
        (None, None) => out.durability,
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iggy::error::Class;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn given_the_sdk_defaults_when_parsing_options_then_replicated_is_buffered() {
        let o = parse_topic_options(&opts(&[
            ("durability", "replicated"),
            ("consumer_offset_durability", "persisted"),
        ]))
        .unwrap();
        assert_eq!(o.durability, Durability::Buffered);
        assert_eq!(o.consumer_offset_durability, Durability::Persisted);
    }

    #[test]
    fn given_iggys_enforce_fsync_when_parsing_options_then_it_is_the_message_durability() {
        for (value, expected) in [
            ("true", Durability::Persisted),
            ("1", Durability::Persisted),
            ("false", Durability::Buffered),
            ("0", Durability::Buffered),
        ] {
            let o = parse_topic_options(&opts(&[("enforce_fsync", value)])).unwrap();
            assert_eq!(o.durability, expected, "enforce_fsync={value}");
            assert_eq!(
                o.consumer_offset_durability,
                TopicOptions::default().consumer_offset_durability
            );
        }
        let agreeing = parse_topic_options(&opts(&[
            ("durability", "persisted"),
            ("enforce_fsync", "1"),
        ]))
        .unwrap();
        assert_eq!(agreeing.durability, Durability::Persisted);
        for pairs in [
            [("durability", "persisted"), ("enforce_fsync", "false")],
            [("durability", "replicated"), ("enforce_fsync", "true")],
        ] {
            let e = parse_topic_options(&opts(&pairs)).unwrap_err();
            assert_eq!(
                (e.code(), e.body.field.as_deref()),
                (4042, Some("enforce_fsync"))
            );
        }
        let e = parse_topic_options(&opts(&[("enforce_fsync", "always")])).unwrap_err();
        assert_eq!(e.code(), 4042);
    }

    #[test]
    fn given_unknown_keys_or_values_when_parsing_options_then_the_error_names_them() {
        let e = parse_topic_options(&opts(&[("fsync", "true")])).unwrap_err();
        assert_eq!(e.class, Class::BadRequest);
        assert!(e.body.reason.contains("fsync"));
        let e = parse_topic_options(&opts(&[("durability", "eventually")])).unwrap_err();
        assert!(e.body.reason.contains("durability") && e.body.reason.contains("eventually"));
    }

    #[test]
    fn given_options_where_none_are_accepted_when_checked_then_the_first_key_is_named() {
        assert!(reject_options(&opts(&[])).is_ok());
        let e = reject_options(&opts(&[("b", "1"), ("a", "2")])).unwrap_err();
        assert_eq!(e.code(), 4041);
        assert_eq!(e.body.field.as_deref(), Some("a"));
    }

    #[test]
    fn given_the_sdk_0_11_keys_when_parsing_options_then_they_are_accepted_within_iggys_bounds() {
        let o = parse_topic_options(&opts(&[
            ("segment_size", "128 MiB"),
            ("messages_required_to_save", "1024"),
            ("size_of_messages_required_to_save", "1 MiB"),
            ("preallocate_segments", "false"),
        ]))
        .unwrap();
        assert_eq!(o.segment_size, 128 << 20);
        for (key, bad) in [
            ("messages_required_to_save", "0"),
            ("messages_required_to_save", "16777217"),
            ("size_of_messages_required_to_save", "2 GiB"),
            ("preallocate_segments", "maybe"),
            ("segment_size", "huge"),
        ] {
            let e = parse_topic_options(&opts(&[(key, bad)])).unwrap_err();
            assert_eq!(
                (e.code(), e.body.field.as_deref()),
                (4042, Some(key)),
                "{key}={bad}"
            );
        }
    }
}
