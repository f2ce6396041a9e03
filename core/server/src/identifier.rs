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
