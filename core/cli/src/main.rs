//! The shipped `sluice` binary: the command line in `sluice_cli::main`, built
//! without any test feature (ADR 0014).

fn main() -> std::process::ExitCode {
    sluice_cli::main()
}
