//! Read buffers for batches, recycled.
//!
//! A poll reads each batch into one buffer and serves its messages as views
//! of it (`Log::read`). A fresh buffer of a large batch costs more than the
//! read that fills it: the allocator maps new memory, the kernel zeroes it
//! page by page (a huge page at a time, 2 MiB, with transparent huge pages),
//! and `vec![0; n]` zeroes it again, only for `pread` to overwrite it. A TCP
//! consumer of 1,000-message batches spent a quarter of the server's CPU
//! there (docs/performance.md, "Issue 30"). So a large buffer goes back to a
//! small free list when the last view of it is dropped (after the answer is
//! written to the socket), and the next large read takes it from there.
//!
//! Invariants:
//! - A view never shows bytes the read did not fill: the `Bytes` a read
//!   answers covers exactly the `filled` prefix, and a recycled buffer's
//!   older bytes past it are not reachable through it.
//! - A buffer is given back only when no view of it is left: it is the owner
//!   behind `Bytes::from_owner`, whose drop runs once the last clone is
//!   dropped. So a reader can never see its bytes change under it.
//! - The free list is bounded (`KEEP_AT_MOST` buffers, none larger than
//!   `LARGEST_KEPT`), so the memory it holds is bounded whatever was read;
//!   small reads are not pooled (the allocator serves them well).

use std::sync::Mutex;

use bytes::Bytes;

/// Reads at least this large take a recycled buffer.
pub(crate) const POOLED_FROM: usize = 64 * 1024;
/// At most this many buffers wait on the free list.
const KEEP_AT_MOST: usize = 16;
/// A buffer larger than this is freed, not kept.
const LARGEST_KEPT: usize = 4 << 20;

/// The free list every log reads from (one process, one list: buffers move
/// between partitions as reads do).
static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Reads `len` bytes with `fill`, which answers how many it filled (at most
/// `len`), into a buffer answered as `Bytes` of exactly the filled bytes.
pub(crate) fn read_into<E>(
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
) -> Result<Bytes, E> {
    if len < POOLED_FROM {
        let mut buffer = vec![0u8; len];
        let filled = fill(&mut buffer)?;
        buffer.truncate(filled);
        return Ok(Bytes::from(buffer));
    }
    let mut buffer = take();
    // Only what was never initialised is zeroed: a recycled buffer already
    // holds `len` bytes or more, which `fill` overwrites.
    if buffer.len() < len {
        buffer.resize(len, 0);
    }
    let filled = fill(&mut buffer[..len])?.min(len);
    Ok(Bytes::from_owner(Recycled { buffer, filled }))
}

fn take() -> Vec<u8> {
    match FREE.lock() {
        Ok(mut free) => free.pop().unwrap_or_default(),
        // A panic while holding the list cannot leave it inconsistent (a
        // push or a pop); the list is a cache, so a fresh buffer will do.
        Err(_) => Vec::new(),
    }
}

fn give_back(buffer: Vec<u8>) {
    if buffer.capacity() > LARGEST_KEPT {
        return;
    }
    if let Ok(mut free) = FREE.lock()
        && free.len() < KEEP_AT_MOST
    {
        free.push(buffer);
    }
}

/// A pooled buffer behind `Bytes`: its first `filled` bytes are the view.
struct Recycled {
    buffer: Vec<u8>,
    filled: usize,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer[..self.filled]
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        give_back(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fill_with(byte: u8, n: usize) -> impl FnOnce(&mut [u8]) -> Result<usize, ()> {
        move |b: &mut [u8]| {
            b[..n].fill(byte);
            Ok(n)
        }
    }

    #[test]
    fn a_large_read_answers_exactly_the_filled_bytes() {
        let len = POOLED_FROM * 2;
        let a = read_into(len, fill_with(7, len)).unwrap();
        assert_eq!(a.len(), len);
        assert!(a.iter().all(|b| *b == 7));
        drop(a);
        // A shorter fill into a (probably) recycled buffer shows none of the
        // older bytes past it.
        let b = read_into(len, fill_with(9, len / 3)).unwrap();
        assert_eq!(b.len(), len / 3);
        assert!(b.iter().all(|x| *x == 9));
    }

    #[test]
    fn a_buffer_still_viewed_is_not_handed_to_the_next_read() {
        // given a large read whose slice is still held
        let len = POOLED_FROM;
        let first = read_into(len, fill_with(1, len)).unwrap();
        let view = first.slice(10..20);
        drop(first);
        // when many more large reads fill their buffers with other bytes
        let later: Vec<Bytes> = (0..KEEP_AT_MOST + 2)
            .map(|_| read_into(len, fill_with(2, len)).unwrap())
            .collect();
        // then the held view still shows what its read filled
        assert!(view.iter().all(|b| *b == 1), "{view:?}");
        drop(later);
    }

    #[test]
    fn a_failed_fill_answers_its_error() {
        let err = read_into(POOLED_FROM, |_| Err::<usize, &str>("eio")).unwrap_err();
        assert_eq!(err, "eio");
        let err = read_into(10, |_| Err::<usize, &str>("eio")).unwrap_err();
        assert_eq!(err, "eio");
    }

    #[test]
    fn the_free_list_stays_bounded() {
        let held: Vec<Bytes> = (0..KEEP_AT_MOST * 2)
            .map(|_| read_into(POOLED_FROM, fill_with(3, POOLED_FROM)).unwrap())
            .collect();
        drop(held);
        assert!(FREE.lock().unwrap().len() <= KEEP_AT_MOST);
        // too large to keep
        drop(read_into(LARGEST_KEPT + 1, fill_with(4, 1)).unwrap());
        assert!(
            FREE.lock()
                .unwrap()
                .iter()
                .all(|b| b.capacity() <= LARGEST_KEPT)
        );
    }
}
