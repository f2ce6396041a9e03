//! Transparent huge pages are off for `sluice server` (ADR 0021).
//!
//! The server's memory turns over fast: every batch's request buffers, its
//! frame and its messages are allocated and freed within one send, on the
//! connections' workers and the blocking pool's threads, each with its own
//! mimalloc heap. Where the kernel backs that memory with 2 MiB pages, the
//! first touch of any byte of a span faults in and zeroes a whole 2 MiB
//! page. A profile of a `persisted` produce (Iggy's `iggy-bench
//! --enforce-fsync`, 1,000 messages per batch) spent 58% of the server's
//! samples zeroing huge pages under mimalloc's free-list growth; with them
//! off the same runs took a third of the system time, half the peak memory
//! and 1.6 times the throughput, for about 5% of a buffered produce's
//! (docs/performance.md, "Issue 30, sixth session"). Keeping freed memory in
//! mimalloc (`MIMALLOC_PURGE_DELAY=-1`) did not help. Turning them off is the
//! usual advice for servers that allocate this way (Redis, MongoDB and
//! others say the same).
//!
//! `PR_SET_THP_DISABLE` applies to the whole process and to what it starts.
//! A kernel that refuses it leaves the server as it was, with a warning.

/// Turns transparent huge pages off for this process.
pub fn turn_off() {
    match rustix::thread::disable_transparent_huge_pages(true) {
        Ok(()) => tracing::info!("transparent huge pages off for this process"),
        Err(e) => {
            tracing::warn!(error = %e, "could not turn transparent huge pages off; memory that is freed and reused may fault in 2 MiB at a time")
        }
    }
}
