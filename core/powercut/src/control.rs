//! The control file `/.powercut` at the mount's root: one command per line
//! written to it, a status report read from it. [`Handle`](crate::Handle)
//! runs the same commands in process.
//!
//! Commands (whitespace separated; paths are relative to the mount's root):
//! - `cut` — power loss: every unsynced change is dropped;
//! - `cut SEED` — partial writeback first (ADR 0002 §2.3), then power loss;
//! - `fail-sync PATH [N]` — the N-th (default first) next fsync of PATH fails
//!   with EIO and drops what it was to persist;
//! - `enospc on` / `enospc off` — refuse (or allow again) every growth;
//! - `check` — fails (EINVAL) if the backing directory is not the durable view.
//!
//! Invariant: a command either runs whole or is refused with a message and
//! changes nothing (all parsing happens before the model is touched).

use crate::model::Model;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Cut(Option<u64>),
    FailSync { path: String, nth: u32 },
    Enospc(bool),
    Check,
}

pub fn parse(line: &str) -> Result<Command, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["cut"] => Ok(Command::Cut(None)),
        ["cut", seed] => seed
            .parse()
            .map(|s| Command::Cut(Some(s)))
            .map_err(|_| format!("cut: {seed:?} is not a seed (an unsigned 64-bit integer)")),
        ["fail-sync", path] => Ok(Command::FailSync {
            path: (*path).to_string(),
            nth: 1,
        }),
        ["fail-sync", path, nth] => match nth.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(Command::FailSync {
                path: (*path).to_string(),
                nth: n,
            }),
            _ => Err(format!("fail-sync: {nth:?} is not a count of at least 1")),
        },
        ["enospc", "on"] => Ok(Command::Enospc(true)),
        ["enospc", "off"] => Ok(Command::Enospc(false)),
        ["check"] => Ok(Command::Check),
        _ => Err(format!(
            "unknown command {line:?} (cut [SEED] | fail-sync PATH [N] | enospc on|off | check)"
        )),
    }
}

pub fn apply(m: &mut Model, cmd: &Command) -> Result<(), String> {
    match cmd {
        Command::Cut(seed) => {
            m.cut(*seed);
            tracing::info!(seed = ?seed, "powercut: power cut");
            Ok(())
        }
        Command::FailSync { path, nth } => {
            m.fail_sync(path, *nth);
            Ok(())
        }
        Command::Enospc(on) => {
            m.set_enospc(*on);
            Ok(())
        }
        Command::Check => m.check_backing(),
    }
}

/// Runs every non-empty line written to the control file.
pub fn execute(m: &mut Model, data: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(data).map_err(|_| "commands are UTF-8 text".to_string())?;
    let cmds: Vec<Command> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(parse)
        .collect::<Result<_, _>>()?;
    for cmd in &cmds {
        apply(m, cmd)?;
    }
    Ok(())
}

/// What reading the control file shows.
pub fn status(m: &Model) -> String {
    let s = m.stats;
    let armed: Vec<String> = m
        .armed_failures()
        .iter()
        .map(|(p, n)| format!("{p}#{n}"))
        .collect();
    format!(
        "cuts {}\npartial_cuts {}\nfile_syncs {}\ndir_syncs {}\ninjected_sync_failures {}\nenospc {}\nenospc_refusals {}\npending_changes {}\ndropped_changes {}\nwritten_back {}\nbacking_errors {}\narmed {}\n",
        s.cuts,
        s.partial_cuts,
        s.file_syncs,
        s.dir_syncs,
        s.injected_sync_failures,
        if m.enospc() { "on" } else { "off" },
        s.enospc_refusals,
        m.pending_changes(),
        s.dropped_changes,
        s.written_back,
        s.backing_errors,
        armed.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_bad_ones_are_refused() {
        assert_eq!(parse("cut"), Ok(Command::Cut(None)));
        assert_eq!(parse(" cut 7 "), Ok(Command::Cut(Some(7))));
        assert_eq!(
            parse("fail-sync a/consumers 3"),
            Ok(Command::FailSync {
                path: "a/consumers".into(),
                nth: 3
            })
        );
        assert_eq!(parse("enospc off"), Ok(Command::Enospc(false)));
        assert!(parse("cut x").is_err());
        assert!(parse("fail-sync a 0").is_err());
        assert!(parse("enospc maybe").is_err());
        assert!(parse("reboot").is_err());
    }
}
