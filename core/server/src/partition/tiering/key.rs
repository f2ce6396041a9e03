//! Where a partition's tiered segments live in the object store: the one place
//! that turns (instance, partition, generation, attempt) into a `RemoteKey` and
//! back (ADR 0027 §1).
//!
//! ```text
//! <instance>/s=<stream>/t=<topic>/p=<partition>/i=<incarnation>/g=<generation>/<base:020>-<attempt:010>.<log|idx>
//! ```
//!
//! Invariants, and why they hold:
//! - **Every key made here is a valid `RemoteKey`.** The instance is one key
//!   segment, validated once by [`TierKeys::new`] (at most 255 bytes of the
//!   key alphabet); everything added is ASCII digits, `s=`/`t=`/`p=`/`i=`/`g=`,
//!   `-`, `.` and an extension: at most 386 bytes in all (a 255-byte instance
//!   and every number at `u64::MAX`), below the 1,024-byte limit, and no
//!   segment is empty, `.` or `..`. So the builders return a `RemoteKey`, not a
//!   `Result`; `RemoteKey::new` failing would be a bug in this module, and
//!   `valid` stops the process on it (as `SlotLayout::frame` does for a record
//!   that cannot outgrow its slot). Proptest:
//!   `every_object_key_is_valid_and_parses_back`.
//! - **No object key is a segment-prefix of another key made here.** Every
//!   object key has exactly seven segments, and two different keys of equal
//!   depth are never one below the other; prefixes (`partition_prefix`,
//!   `generation_prefix`) are only ever listed, never put. A file-system
//!   backend could not hold both `a/b` and `a/b/c` (ADR 0026 §2).
//! - **Different (place, attempt, kind) give different keys**, and
//!   `parse(object(x)) == Some(x)`: every number is printed in decimal behind
//!   its own label or at a fixed place (the base always takes 20 digits, as a
//!   `u64` at most has), and `parse` accepts only the exact text `object`
//!   prints (it prints the parsed value again and compares), so a key has one
//!   meaning, and a foreign key or the probe's (`_probe/...`) parses as `None`.
//! - Zero padding makes a listing (sorted bytewise) come back in base order
//!   within a generation, as the local segment names do (`layout.rs`).

use serde::{Deserialize, Serialize};
use sluice_remote::{KeyError, RemoteKey};

use crate::layout::{INDEX_EXT, LOG_EXT};

/// The two objects one upload attempt writes, as a segment's two files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// The message batches (the local `.log`).
    Log,
    /// The sparse index (the local `.idx`).
    Index,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 2] = [ObjectKind::Log, ObjectKind::Index];

    /// The key's extension: the local file's (`layout.rs`).
    pub fn ext(self) -> &'static str {
        match self {
            ObjectKind::Log => LOG_EXT,
            ObjectKind::Index => INDEX_EXT,
        }
    }

    fn from_ext(ext: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.ext() == ext)
    }
}

/// Which partition, and which life of it: a partition deleted and created
/// again under the same ids is another incarnation, whose keys never meet
/// the old one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionPlace {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
    pub incarnation: u64,
}

/// One upload attempt of one segment: names two objects (`.log` and `.idx`).
/// An attempt number is taken once per partition and never again, so no
/// two attempts share a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Attempt {
    /// The purge generation the segment belongs to.
    pub generation: u64,
    /// The segment's base offset.
    pub base: u64,
    /// The attempt number.
    pub attempt: u64,
}

/// The server's key space in the bucket: everything it writes lies below one
/// instance prefix, so a bucket shared with anything else, and the orphan
/// sweep (which deletes only below it), are safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierKeys {
    instance: RemoteKey,
}

/// Labels of the partition prefix's and the generation's segments.
const STREAM_LABEL: &str = "s=";
const TOPIC_LABEL: &str = "t=";
const PARTITION_LABEL: &str = "p=";
const INCARNATION_LABEL: &str = "i=";
const GENERATION_LABEL: &str = "g=";
/// Digits of a base offset in an object's name (a `u64` has at most 20).
const BASE_WIDTH: usize = 20;

/// A key this module built. `RemoteKey::new` cannot refuse it (see the
/// module invariants); if it did, that is a bug here, and a key made up
/// instead could name another object.
fn valid(text: String) -> RemoteKey {
    match RemoteKey::new(text) {
        Ok(key) => key,
        Err(e) => unreachable!("a tiering key is always a valid remote key: {e}"),
    }
}

/// The number after `label` in `segment`, exactly as `{n}` prints it.
fn labelled<T: std::str::FromStr + ToString>(segment: &str, label: &str) -> Option<T> {
    let digits = segment.strip_prefix(label)?;
    let n: T = digits.parse().ok()?;
    (n.to_string() == digits).then_some(n)
}

impl TierKeys {
    /// `instance` must be exactly one key segment (no `/`): a `/` is refused
    /// as a byte outside a segment's alphabet.
    pub fn new(instance: &str) -> Result<TierKeys, KeyError> {
        let key = RemoteKey::new(instance)?;
        if instance.contains('/') {
            return Err(KeyError::BadByte(b'/'));
        }
        Ok(TierKeys { instance: key })
    }

    pub fn instance_prefix(&self) -> &RemoteKey {
        &self.instance
    }

    fn partition_text(&self, place: PartitionPlace) -> String {
        format!(
            "{}/{STREAM_LABEL}{}/{TOPIC_LABEL}{}/{PARTITION_LABEL}{}/{INCARNATION_LABEL}{}",
            self.instance, place.stream, place.topic, place.partition, place.incarnation
        )
    }

    fn generation_text(&self, place: PartitionPlace, generation: u64) -> String {
        format!(
            "{}/{GENERATION_LABEL}{generation}",
            self.partition_text(place)
        )
    }

    /// `<instance>/s=<S>/t=<T>/p=<P>/i=<incarnation>`: every object of one
    /// incarnation of a partition (a listing prefix, never an object).
    pub fn partition_prefix(&self, place: PartitionPlace) -> RemoteKey {
        valid(self.partition_text(place))
    }

    /// `<partition prefix>/g=<generation>`: every object of one purge
    /// generation (a listing prefix, never an object).
    pub fn generation_prefix(&self, place: PartitionPlace, generation: u64) -> RemoteKey {
        valid(self.generation_text(place, generation))
    }

    /// `<generation prefix>/<base:020>-<attempt:010>.<log|idx>`.
    pub fn object(&self, place: PartitionPlace, attempt: Attempt, kind: ObjectKind) -> RemoteKey {
        valid(format!(
            "{}/{:0width$}-{:010}.{}",
            self.generation_text(place, attempt.generation),
            attempt.base,
            attempt.attempt,
            kind.ext(),
            width = BASE_WIDTH,
        ))
    }

    /// The inverse of [`TierKeys::object`]: `None` for any key `object` does
    /// not print (another instance's, a prefix, the probe's, a foreign one).
    pub fn parse(&self, key: &RemoteKey) -> Option<(PartitionPlace, Attempt, ObjectKind)> {
        let rest = key
            .as_str()
            .strip_prefix(self.instance.as_str())?
            .strip_prefix('/')?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [s, t, p, i, g, name] = parts.as_slice() else {
            return None;
        };
        let place = PartitionPlace {
            stream: labelled(s, STREAM_LABEL)?,
            topic: labelled(t, TOPIC_LABEL)?,
            partition: labelled(p, PARTITION_LABEL)?,
            incarnation: labelled(i, INCARNATION_LABEL)?,
        };
        let generation = labelled(g, GENERATION_LABEL)?;
        let (stem, ext) = name.rsplit_once('.')?;
        let kind = ObjectKind::from_ext(ext)?;
        let (base, attempt) = stem.split_once('-')?;
        if base.len() != BASE_WIDTH || !base.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if !attempt.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let attempt = Attempt {
            generation,
            base: base.parse().ok()?,
            attempt: attempt.parse().ok()?,
        };
        // One text per value: anything `object` would print otherwise
        // (a shorter attempt, a leading zero in a label) is not ours.
        (self.object(place, attempt, kind) == *key).then_some((place, attempt, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys(instance: &str) -> TierKeys {
        TierKeys::new(instance).unwrap()
    }

    const PLACE: PartitionPlace = PartitionPlace {
        stream: 1,
        topic: 2,
        partition: 3,
        incarnation: 40,
    };

    fn place() -> impl Strategy<Value = PartitionPlace> {
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u64>()).prop_map(
            |(stream, topic, partition, incarnation)| PartitionPlace {
                stream,
                topic,
                partition,
                incarnation,
            },
        )
    }

    fn attempt() -> impl Strategy<Value = Attempt> {
        // Small and extreme numbers both: widths and padding are the risk.
        let n = || prop_oneof![0u64..20, any::<u64>(), Just(u64::MAX)];
        (n(), n(), n()).prop_map(|(generation, base, attempt)| Attempt {
            generation,
            base,
            attempt,
        })
    }

    fn kind() -> impl Strategy<Value = ObjectKind> {
        prop_oneof![Just(ObjectKind::Log), Just(ObjectKind::Index)]
    }

    #[test]
    fn the_key_scheme_is_pinned() {
        // Given: an instance, a partition and an attempt.
        let k = keys("sluice-7");
        let a = Attempt {
            generation: 5,
            base: 1_000,
            attempt: 12,
        };
        // Then: each builder prints the documented text.
        assert_eq!(k.instance_prefix().as_str(), "sluice-7");
        assert_eq!(
            k.partition_prefix(PLACE).as_str(),
            "sluice-7/s=1/t=2/p=3/i=40"
        );
        assert_eq!(
            k.generation_prefix(PLACE, 5).as_str(),
            "sluice-7/s=1/t=2/p=3/i=40/g=5"
        );
        for kind in ObjectKind::ALL {
            assert_eq!(
                k.object(PLACE, a, kind).as_str(),
                format!(
                    "sluice-7/s=1/t=2/p=3/i=40/g=5/00000000000000001000-0000000012.{}",
                    kind.ext()
                )
            );
        }
    }

    #[test]
    fn the_instance_is_exactly_one_valid_segment() {
        assert_eq!(TierKeys::new("a/b"), Err(KeyError::BadByte(b'/')));
        assert_eq!(TierKeys::new(""), Err(KeyError::Empty));
        assert!(TierKeys::new("..").is_err());
        assert!(TierKeys::new("a b").is_err());
        assert!(TierKeys::new(&"x".repeat(256)).is_err());
        assert!(TierKeys::new(&"x".repeat(255)).is_ok());
    }

    #[test]
    fn the_longest_key_fits_the_key_limit() {
        // Given: the longest instance and every number at its widest.
        let k = keys(&"x".repeat(sluice_remote::MAX_SEGMENT_LEN));
        let place = PartitionPlace {
            stream: u32::MAX,
            topic: u32::MAX,
            partition: u32::MAX,
            incarnation: u64::MAX,
        };
        let a = Attempt {
            generation: u64::MAX,
            base: u64::MAX,
            attempt: u64::MAX,
        };
        // Then: the key is 386 bytes, within the limit, and parses back.
        let key = k.object(place, a, ObjectKind::Index);
        assert_eq!(key.as_str().len(), 386);
        assert!(key.as_str().len() <= sluice_remote::MAX_KEY_LEN);
        assert_eq!(k.parse(&key), Some((place, a, ObjectKind::Index)));
    }

    #[test]
    fn parse_refuses_every_key_object_does_not_print() {
        let k = keys("inst");
        let good = k.object(
            PLACE,
            Attempt {
                generation: 5,
                base: 7,
                attempt: 9,
            },
            ObjectKind::Log,
        );
        assert!(k.parse(&good).is_some());
        let name = "00000000000000000007-0000000009";
        for bad in [
            // Another instance, a prefix, the probe's keys, a neighbour.
            format!("other/s=1/t=2/p=3/i=40/g=5/{name}.{LOG_EXT}"),
            "inst".to_string(),
            "inst/s=1/t=2/p=3/i=40/g=5".to_string(),
            "inst/_probe/create-0000000000000001".to_string(),
            format!("inst-2/s=1/t=2/p=3/i=40/g=5/{name}.{LOG_EXT}"),
            // Not as printed: leading zeros, a short base, a short attempt,
            // an unknown extension, a missing label, one segment too many.
            format!("inst/s=01/t=2/p=3/i=40/g=5/{name}.{LOG_EXT}"),
            format!("inst/s=1/t=2/p=3/i=40/g=05/{name}.{LOG_EXT}"),
            format!("inst/s=1/t=2/p=3/i=40/g=5/7-0000000009.{LOG_EXT}"),
            format!("inst/s=1/t=2/p=3/i=40/g=5/00000000000000000007-9.{LOG_EXT}"),
            format!("inst/s=1/t=2/p=3/i=40/g=5/{name}.bin"),
            format!("inst/s=1/t=2/p=3/i=40/5/{name}.{LOG_EXT}"),
            format!("inst/s=1/t=2/p=3/i=40/g=5/x/{name}.{LOG_EXT}"),
            format!("inst/s=1/t=2/p=3/i=40/g=5/{name}.{LOG_EXT}.x"),
            format!("inst/s=4294967296/t=2/p=3/i=40/g=5/{name}.{LOG_EXT}"),
        ] {
            let key = RemoteKey::new(bad.clone()).unwrap();
            assert_eq!(k.parse(&key), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn every_object_key_is_valid_and_parses_back(
            instance in "[A-Za-z0-9._=-]{1,255}",
            place in place(),
            attempt in attempt(),
            kind in kind(),
        ) {
            // Given: any valid instance (only "." and ".." are refused).
            prop_assume!(instance != "." && instance != "..");
            let k = keys(&instance);
            // When: an object's key is made.
            let key = k.object(place, attempt, kind);
            // Then: it is valid as text, seven segments below the instance,
            // below both of its prefixes, and parses back to its inputs.
            prop_assert_eq!(RemoteKey::new(key.as_str()), Ok(key.clone()));
            prop_assert_eq!(key.as_str().split('/').count(), 7);
            prop_assert!(key.is_below(k.instance_prefix()));
            prop_assert!(key.is_below(&k.partition_prefix(place)));
            prop_assert!(key.is_below(&k.generation_prefix(place, attempt.generation)));
            prop_assert_eq!(k.parse(&key), Some((place, attempt, kind)));
        }

        #[test]
        fn different_objects_have_different_keys_none_below_another(
            a in (place(), attempt(), kind()),
            b in (place(), attempt(), kind()),
        ) {
            let k = keys("sluice-1");
            let (ka, kb) = (k.object(a.0, a.1, a.2), k.object(b.0, b.1, b.2));
            prop_assert_eq!(ka == kb, a == b);
            prop_assert!(!ka.is_below(&kb) && !kb.is_below(&ka));
        }

        #[test]
        fn near_neighbours_have_different_keys(
            place in place(),
            attempt in attempt(),
            which in 0usize..7,
        ) {
            // Neighbouring values (off by one in any field) are where a
            // padding or label mistake would make two keys meet.
            let k = keys("sluice-1");
            let mut other = (place, attempt, ObjectKind::Log);
            match which {
                0 => other.0.stream = place.stream.wrapping_add(1),
                1 => other.0.topic = place.topic.wrapping_add(1),
                2 => other.0.partition = place.partition.wrapping_add(1),
                3 => other.0.incarnation = place.incarnation.wrapping_add(1),
                4 => other.1.generation = attempt.generation.wrapping_add(1),
                5 => other.1.base = attempt.base.wrapping_add(1),
                _ => other.1.attempt = attempt.attempt.wrapping_add(1),
            }
            let ka = k.object(place, attempt, ObjectKind::Log);
            let kb = k.object(other.0, other.1, other.2);
            prop_assert_ne!(&ka, &kb);
            prop_assert_ne!(k.object(place, attempt, ObjectKind::Index), ka.clone());
            prop_assert!(!ka.is_below(&kb) && !kb.is_below(&ka));
        }

        #[test]
        fn a_prefix_lists_exactly_its_own_objects(
            a in (place(), attempt()),
            b in (place(), attempt()),
        ) {
            // A listing of a generation (or partition) prefix finds an
            // object exactly when it belongs to that generation (partition).
            let k = keys("sluice-1");
            let key = k.object(b.0, b.1, ObjectKind::Log);
            prop_assert_eq!(
                key.is_below(&k.generation_prefix(a.0, a.1.generation)),
                a.0 == b.0 && a.1.generation == b.1.generation
            );
            prop_assert_eq!(key.is_below(&k.partition_prefix(a.0)), a.0 == b.0);
        }
    }
}
