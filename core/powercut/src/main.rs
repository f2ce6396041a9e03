//! `sluice-powercut BACKING MOUNTPOINT`: mounts the power-cut file system
//! until standard input closes (Ctrl-D), so any program can run on a disk
//! that loses unsynced changes. Control it by writing to
//! `MOUNTPOINT/.powercut` (`cut`, `cut SEED`, `fail-sync PATH [N]`,
//! `enospc on|off`, `check`); reading that file shows the counters.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [backing, mountpoint] = args.as_slice() else {
        eprintln!(
            "usage: sluice-powercut BACKING MOUNTPOINT (unmounts when standard input closes)"
        );
        return ExitCode::from(2);
    };
    let mount = match sluice_powercut::mount(backing, mountpoint) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("sluice-powercut: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "sluice-powercut: mounted {} over {}; control file {}",
        mountpoint.display(),
        backing.display(),
        mountpoint.join(sluice_powercut::CONTROL_NAME).display()
    );
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    match mount.unmount() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-powercut: unmount: {e}");
            ExitCode::FAILURE
        }
    }
}
