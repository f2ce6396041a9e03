//! Where a cleanup attempt failed, for operators (the status endpoint and the
//! reconciler's per-site figures).
//!
//! Invariant: `FailureSite::ALL` lists every site once, in the order of
//! `index`, so a per-site counter array indexed by it covers each exactly.

use crate::layout::DirKind;

/// One of the three directories, the obligation file, or anything else (the
/// metadata in doubt, an error with no path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum FailureSite {
    Dir(DirKind),
    Obligation,
    Other,
}

impl FailureSite {
    pub(crate) const ALL: [FailureSite; 5] = [
        FailureSite::Dir(DirKind::Segments),
        FailureSite::Dir(DirKind::Consumers),
        FailureSite::Dir(DirKind::Groups),
        FailureSite::Obligation,
        FailureSite::Other,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FailureSite::Dir(d) => d.as_str(),
            FailureSite::Obligation => "obligation",
            FailureSite::Other => "other",
        }
    }

    /// This site's position in `ALL`.
    pub(crate) fn index(self) -> usize {
        match self {
            FailureSite::Dir(DirKind::Segments) => 0,
            FailureSite::Dir(DirKind::Consumers) => 1,
            FailureSite::Dir(DirKind::Groups) => 2,
            FailureSite::Obligation => 3,
            FailureSite::Other => 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_site_is_at_its_index() {
        for (i, site) in FailureSite::ALL.into_iter().enumerate() {
            assert_eq!(site.index(), i, "{site:?}");
        }
    }
}
