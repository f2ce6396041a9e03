//! The shipped `sluice` binary: the command line in `sluice_cli::main`, built
//! without any test feature (ADR 0014).

/// mimalloc instead of the system allocator (ADR 0021): a batch's request
/// buffers and a poll's read buffers are large and short-lived, and glibc
/// returned them to the kernel and faulted them back in on every batch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    sluice_cli::main()
}
