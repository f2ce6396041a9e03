//! Object keys every backend stores the same way.
//!
//! Invariants:
//! - A [`RemoteKey`] is `/`-separated segments, each 1 to 255 bytes of `[A-Za-z0-9._=-]`,
//!   never `.` or `..`, the whole at most 1,024 bytes. No leading, trailing or doubled `/`.
//! - So a key means one object on every backend: `object_store`'s `Path` accepts it
//!   unchanged (no percent-encoding, which would make a listing's key differ from the one
//!   put), `LocalFileSystem` maps it to a file name its listing does not hide (its staging
//!   files are `name#<digits>`; `#` is refused here), S3's key length limit (1,024 bytes) holds,
//!   and every segment fits a file name (`NAME_MAX`, 255).
//! - Ordering is bytewise on the text, which for this alphabet is the order S3's listing
//!   uses (UTF-8 binary order); listings are returned in it on every backend.
//!
//! One thing the type cannot check alone: a file-system backend cannot hold an object at
//! `a/b` and another at `a/b/c` (one name would be both a file and a directory). S3 can. The
//! tiering layout never makes a key that is a segment-prefix of another, and `SimRemote`
//! refuses such a put (`InvalidRequest`) so the simulator keeps the weaker backend's rule.

use std::fmt;

/// Longest key, in bytes (S3's limit).
pub const MAX_KEY_LEN: usize = 1024;
/// Longest segment, in bytes (a file name on Linux).
pub const MAX_SEGMENT_LEN: usize = 255;

/// A validated object key (also used as a listing prefix).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RemoteKey(String);

/// Why a text is not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key is empty")]
    Empty,
    #[error("key is {0} bytes, more than {MAX_KEY_LEN}")]
    TooLong(usize),
    #[error("key has an empty segment (leading, trailing or doubled '/')")]
    EmptySegment,
    #[error("key segment {0:?} is '.' or '..'")]
    Relative(String),
    #[error("key segment of {0} bytes, more than {MAX_SEGMENT_LEN}")]
    SegmentTooLong(usize),
    #[error("key has byte {0:#04x}, outside [A-Za-z0-9._=-]")]
    BadByte(u8),
}

fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'=' | b'-')
}

impl RemoteKey {
    pub fn new(text: impl Into<String>) -> Result<RemoteKey, KeyError> {
        let text = text.into();
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        if text.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong(text.len()));
        }
        for segment in text.split('/') {
            if segment.is_empty() {
                return Err(KeyError::EmptySegment);
            }
            if segment == "." || segment == ".." {
                return Err(KeyError::Relative(segment.to_string()));
            }
            if segment.len() > MAX_SEGMENT_LEN {
                return Err(KeyError::SegmentTooLong(segment.len()));
            }
            if let Some(b) = segment.bytes().find(|b| !allowed(*b)) {
                return Err(KeyError::BadByte(b));
            }
        }
        Ok(RemoteKey(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This key with one more segment (`self/segment`).
    pub fn join(&self, segment: &str) -> Result<RemoteKey, KeyError> {
        RemoteKey::new(format!("{}/{segment}", self.0))
    }

    /// Whether `self` lies strictly below `prefix`, segment-wise: `a/b/c` is below `a/b` and
    /// `a`, not below `a/bc` or itself. This is what a listing of `prefix` returns.
    pub fn is_below(&self, prefix: &RemoteKey) -> bool {
        self.0.len() > prefix.0.len()
            && self.0.starts_with(&prefix.0)
            && self.0.as_bytes().get(prefix.0.len()) == Some(&b'/')
    }
}

impl fmt::Display for RemoteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<&str> for RemoteKey {
    type Error = KeyError;
    fn try_from(text: &str) -> Result<Self, Self::Error> {
        RemoteKey::new(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_refuse_what_a_backend_would_change_or_hide() {
        for bad in [
            "", "/a", "a/", "a//b", "./a", "a/..", "a#1", "a b", "a%2F", "ä",
        ] {
            assert!(RemoteKey::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(RemoteKey::new("x".repeat(256)).is_err());
        assert!(RemoteKey::new(["y"; 600].join("/")).is_err());
        for good in [
            "a",
            "inst-1/s1/t2/p0/g=3/00000000000000000000.log",
            "..a",
            "a..",
        ] {
            assert!(RemoteKey::new(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn below_is_segment_wise() {
        let k = |s: &str| RemoteKey::new(s).ok();
        let (Some(abc), Some(ab), Some(a), Some(abx)) = (k("a/b/c"), k("a/b"), k("a"), k("a/bc"))
        else {
            panic!("test keys must be valid");
        };
        assert!(abc.is_below(&ab));
        assert!(abc.is_below(&a));
        assert!(!abc.is_below(&abx));
        assert!(!abx.is_below(&ab));
        assert!(!ab.is_below(&ab));
    }

    proptest! {
        #[test]
        fn every_accepted_key_is_a_valid_object_store_path_unchanged(
            segments in proptest::collection::vec("[A-Za-z0-9._=-]{1,12}", 1..6)
        ) {
            let text = segments.join("/");
            if let Ok(key) = RemoteKey::new(text.clone()) {
                let path = object_store::path::Path::parse(key.as_str());
                prop_assert!(path.is_ok(), "{text:?} refused by object_store");
                if let Ok(p) = path {
                    prop_assert_eq!(p.as_ref(), key.as_str());
                }
            } else {
                // Only '.'/'..' segments are refused from this alphabet.
                prop_assert!(segments.iter().any(|s| s == "." || s == ".."));
            }
        }
    }
}
