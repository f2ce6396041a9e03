//! Proptest settings shared by every property test: the number of cases from
//! the environment, and no regression files.
//!
//! Invariants: without the environment variable a property runs its own
//! default number of cases (CI stays bounded); a failure prints its minimal
//! case and never writes a file (the test sources directory holds only
//! sources: paste a found case into a `#[test]` to keep it).

use proptest::test_runner::Config;

/// `SLUICE_PROPTEST_CASES`, else `default`: the cases of a property test.
pub fn cases(default: u32) -> u32 {
    from_env("SLUICE_PROPTEST_CASES", default)
}

/// `SLUICE_FUZZ_CASES`, else `default`: the cases of a fuzzing property
/// (decoders, HTTP requests), tuned apart from the model properties.
pub fn fuzz_cases(default: u32) -> u32 {
    from_env("SLUICE_FUZZ_CASES", default)
}

fn from_env(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A proptest configuration of `cases` cases without failure persistence.
pub fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}
