//! Iggy identifiers: a resource is named by its numeric id or by its name.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Identifier {
    Numeric(u32),
    Name(String),
}

impl Identifier {
    /// Parses a path segment as Iggy does: digits are an id, anything else a name.
    pub(crate) fn parse(s: &str) -> Identifier {
        match s.parse::<u32>() {
            Ok(n) => Identifier::Numeric(n),
            Err(_) => Identifier::Name(s.to_string()),
        }
    }

    /// The numeric id an individual consumer named by `self` has, as Iggy
    /// 0.11 maps it: a number is itself, a name is the XXH32 (seed 0) of its
    /// UTF-8 bytes. The same name therefore addresses the same stored offset
    /// on Iggy and on sluice, over either transport, and a name and the
    /// number it hashes to are one consumer (as on Iggy).
    pub fn consumer_id(&self) -> u32 {
        match self {
            Identifier::Numeric(n) => *n,
            Identifier::Name(s) => twox_hash::XxHash32::oneshot(0, s.as_bytes()),
        }
    }

    pub(crate) fn matches(&self, id: u32, name: &str) -> bool {
        match self {
            Identifier::Numeric(n) => *n == id,
            Identifier::Name(s) => s == name,
        }
    }
}

impl From<u32> for Identifier {
    fn from(n: u32) -> Self {
        Identifier::Numeric(n)
    }
}

impl From<&str> for Identifier {
    fn from(s: &str) -> Self {
        Identifier::Name(s.to_string())
    }
}

impl fmt::Display for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identifier::Numeric(n) => write!(f, "{n}"),
            Identifier::Name(s) => write!(f, "'{s}'"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Iggy's own mapping, checked against an independent XXH32
    /// (docs/research/iggy-0.11-groups-names-keys.md §4).
    #[test]
    fn a_named_consumer_maps_to_the_id_iggy_gives_it() {
        for (name, id) in [
            ("my-consumer", 2_115_191_887),
            ("consumer-1", 1_338_303_147),
            ("c1", 2_497_150_693),
        ] {
            assert_eq!(Identifier::from(name).consumer_id(), id, "{name}");
        }
        assert_eq!(Identifier::Numeric(7).consumer_id(), 7);
    }
}
