//! The open-file limit `sluice server` runs under.
//!
//! sluice's data files go through a bounded pool (`[files] max_open`, ADR
//! 0018), so they never need more descriptors than that bound; connections
//! need their own. The server still raises its soft limit to the hard one at
//! start (as Go programs do), for the connections, and warns when the
//! configured bound takes most of the limit.

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

/// Warns when the data files' bound (`[files] max_open`) is most of `limit`.
pub fn warn_if_close(limit: Option<u64>, max_open_files: u64) {
    let Some(limit) = limit else { return };
    if max_open_files as f64 >= WARN_SHARE * limit as f64 {
        tracing::warn!(
            max_open_files,
            limit,
            "[files] max_open is most of the open-file limit; lower it or raise the limit (ulimit -n / LimitNOFILE), or connections may fail with EMFILE"
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
