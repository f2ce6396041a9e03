//! The open-file limit `sluice server` runs under.
//!
//! sluice holds a descriptor open for every offset file it has loaded and for
//! both files of every segment, for the life of the process (positioned reads
//! and writes without an `open` per request). A soft limit of 1,024, common as
//! a default, is then reached by a few hundred partitions with a few
//! consumers each, and every later store or roll fails with EMFILE. So the
//! server raises its soft limit to the hard one at start (as Go programs do),
//! and warns when what recovery opened comes close to it.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Above this, a warning: descriptors are also needed for connections.
const WARN_SHARE: f64 = 0.8;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (capped at what the
/// kernel takes for "unlimited"). Returns the limit now in force, `None` if
/// it is unlimited or cannot be read.
pub fn raise_open_files() -> Option<u64> {
    let before = getrlimit(Resource::Nofile);
    let current = before.current?;
    // `None` is RLIM_INFINITY, which Linux refuses for NOFILE: stay within
    // the usual fs.nr_open default.
    let target = before.maximum.unwrap_or(1 << 20);
    if target <= current {
        return Some(current);
    }
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: before.maximum,
        },
    ) {
        Ok(()) => {
            tracing::info!(from = current, to = target, "raised the open-file limit");
            Some(target)
        }
        Err(e) => {
            tracing::warn!(limit = current, error = %e, "could not raise the open-file limit");
            Some(current)
        }
    }
}

/// Warns when the descriptors recovery opened use most of `limit`.
pub fn warn_if_close(limit: Option<u64>, open_after_recovery: u64) {
    let Some(limit) = limit else { return };
    if open_after_recovery as f64 >= WARN_SHARE * limit as f64 {
        tracing::warn!(
            open_files = open_after_recovery,
            limit,
            "recovery opened most of the open-file limit; raise it (ulimit -n / LimitNOFILE) before stores or new segments fail with EMFILE"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_soft_limit_below_the_hard_one_when_raising_then_the_soft_limit_is_the_hard_one() {
        let limit = raise_open_files();
        let now = getrlimit(Resource::Nofile);
        assert_eq!(now.current, limit);
        if let (Some(cur), Some(max)) = (now.current, now.maximum) {
            assert_eq!(cur, max);
        }
    }
}
