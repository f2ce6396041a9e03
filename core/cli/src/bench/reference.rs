//! Reference measurements: what the disk itself does, with no engine.
//!
//! Invariants:
//! - Writes and syncs go through `DiskStorage`, the backend the engine uses,
//!   so a reference issues the very same system calls (`fdatasync` or
//!   `fsync`, directory `fsync`) minus everything sluice adds.
//! - A sync is only a real sync if something is dirty: every raw file sync
//!   follows a write to its file, every raw directory sync follows a name
//!   change in its directory (as the engine's do).
//! - The bare scan reads with `std::fs` (read only, nothing persisted), one
//!   thread, as the engine's recovery does.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice_storage::{DurableStorage, OpenMode};

use super::{BenchError, Result};

/// Issues `file_syncs` file syncs (each after a `record`-byte write) and
/// `dir_syncs` directory syncs (each after one unlink) in `dir`; returns the
/// time spent (the unlinked files are made and flushed untimed first).
pub fn raw_syncs(
    disk: &dyn DurableStorage,
    dir: &Path,
    file_syncs: u64,
    dir_syncs: u64,
    record: usize,
) -> Result<Duration> {
    let names = dir.join("names");
    disk.create_dir_all(&names)?;
    for i in 0..dir_syncs {
        drop(disk.open(&names.join(i.to_string()), OpenMode::CreateNew)?);
    }
    disk.sync_dir(&names)?;
    let file = disk.open(&dir.join("syncs"), OpenMode::CreateNew)?;
    let buf = vec![0x5au8; record.max(1)];
    file.write_at(0, &buf)?;
    file.write_at(buf.len() as u64, &buf)?;
    file.sync()?;
    let started = Instant::now();
    for i in 0..file_syncs {
        file.write_at((i % 2) * buf.len() as u64, &buf)?;
        file.sync()?;
    }
    for i in 0..dir_syncs {
        disk.remove_file(&names.join(i.to_string()))?;
        disk.sync_dir(&names)?;
    }
    Ok(started.elapsed())
}

/// Writes `records` records of `record` bytes at alternating positions (two
/// slots, as an offset file), issuing syncs spread evenly so their totals
/// are `file_syncs` and `dir_syncs`; returns the time.
pub fn raw_record_writes(
    disk: &dyn DurableStorage,
    dir: &Path,
    records: u64,
    record: usize,
    file_syncs: u64,
    dir_syncs: u64,
) -> Result<Duration> {
    let path = dir.join("records");
    let buf = vec![0xa5u8; record.max(1)];
    let started = Instant::now();
    let file = disk.open(&path, OpenMode::CreateNew)?;
    let (mut fs_done, mut ds_done) = (0u64, 0u64);
    for i in 0..records {
        file.write_at((i % 2) * buf.len() as u64, &buf)?;
        let fs_due = file_syncs * (i + 1) / records.max(1);
        while fs_done < fs_due {
            file.sync()?;
            fs_done += 1;
        }
        let ds_due = dir_syncs * (i + 1) / records.max(1);
        while ds_done < ds_due {
            disk.sync_dir(dir)?;
            ds_done += 1;
        }
    }
    Ok(started.elapsed())
}

/// Appends `total` bytes in `chunks` equal chunks to a new file, with
/// `file_syncs` syncs spread evenly; returns the time and the file's path.
pub fn raw_sequential_write(
    disk: &dyn DurableStorage,
    path: &Path,
    total: u64,
    chunks: u64,
    file_syncs: u64,
) -> Result<Duration> {
    let chunks = chunks.max(1);
    let chunk = usize::try_from(total / chunks).map_err(|e| BenchError::io("chunk size", e))?;
    let buf = vec![0x33u8; chunk.max(1)];
    let started = Instant::now();
    let file = disk.open(path, OpenMode::CreateNew)?;
    let mut done = 0u64;
    for i in 0..chunks {
        file.append(&buf)?;
        let due = file_syncs * (i + 1) / chunks;
        while done < due {
            file.sync()?;
            done += 1;
        }
    }
    Ok(started.elapsed())
}

/// Reads `path` sequentially in `chunks` equal chunks; returns the time.
pub fn raw_sequential_read(
    disk: &dyn DurableStorage,
    path: &Path,
    chunks: u64,
) -> Result<Duration> {
    let file = disk.open(path, OpenMode::Read)?;
    let total = file.len()?;
    let chunk = usize::try_from(total / chunks.max(1)).map_err(|e| BenchError::io("chunk", e))?;
    let mut buf = vec![0u8; chunk.max(1)];
    let started = Instant::now();
    let mut at = 0u64;
    let mut sum = 0u64;
    while at < total {
        let n = file.read_at(at, &mut buf)?;
        if n == 0 {
            break;
        }
        // Touch the bytes, as a decoder would.
        sum = sum.wrapping_add(u64::from(buf[n - 1]));
        at += n as u64;
    }
    std::hint::black_box(sum);
    Ok(started.elapsed())
}

/// Lists every directory under `root` and reads every file whole, on one
/// thread; returns the number of files and bytes read.
pub fn bare_scan(root: &Path) -> Result<(u64, u64)> {
    let mut stack = vec![root.to_path_buf()];
    let (mut files, mut bytes) = (0u64, 0u64);
    while let Some(dir) = stack.pop() {
        let rd =
            std::fs::read_dir(&dir).map_err(|e| BenchError::io(dir.display().to_string(), e))?;
        let mut names: Vec<_> = rd.filter_map(|e| e.ok()).collect();
        names.sort_by_key(|e| e.file_name());
        for entry in names {
            let ty = entry
                .file_type()
                .map_err(|e| BenchError::io(entry.path().display().to_string(), e))?;
            if ty.is_dir() {
                stack.push(entry.path());
            } else {
                let data = std::fs::read(entry.path())
                    .map_err(|e| BenchError::io(entry.path().display().to_string(), e))?;
                files += 1;
                bytes += data.len() as u64;
            }
        }
    }
    Ok((files, bytes))
}

/// Deleting the same files with nothing else: `partitions` × three
/// directories holding `per_dir` files each (the segments directory its
/// two), made and flushed untimed; then, timed, every file unlinked and each
/// directory synced once. Returns the time.
pub fn raw_unlinks(
    disk: &dyn DurableStorage,
    dir: &Path,
    partitions: u32,
    per_dir: u32,
) -> Result<Duration> {
    let mut dirs = Vec::new();
    for p in 0..partitions {
        for (kind, n) in [("segments", 2), ("consumers", per_dir), ("groups", per_dir)] {
            let d = dir.join(p.to_string()).join(kind);
            disk.create_dir_all(&d)?;
            for i in 0..n {
                disk.open(&d.join(i.to_string()), OpenMode::CreateNew)?
                    .write_at(0, &[1u8; 128])?;
            }
            dirs.push((d, n));
        }
    }
    super::flush_fs(dir)?;
    let started = Instant::now();
    for (d, n) in &dirs {
        for i in 0..*n {
            disk.remove_file(&d.join(i.to_string()))?;
        }
        disk.sync_dir(d)?;
    }
    Ok(started.elapsed())
}
