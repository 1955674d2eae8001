//! The slots' storage: a vector of fixed-size chunks.
//!
//! A backlog of a million items grows the slots to tens of megabytes. A
//! plain `Vec` grows by doubling: each growth allocates a fresh buffer,
//! faults it in and copies every slot into it, so a million slots fault
//! in and copy about twice their size (page faults were 16% of the
//! worker's time in profiles of 1M distinct keys). Chunks never move: each
//! page is faulted in once and nothing is copied. Only the first chunk
//! grows like a `Vec`, so that a small queue stays small.

use std::ops::{Index, IndexMut};

/// Slots per chunk (a power of two).
const CHUNK: usize = 4096;
const SHIFT: u32 = CHUNK.trailing_zeros();

#[derive(Debug)]
pub(crate) struct Slab<S> {
    /// Every chunk but the last is full (`CHUNK` slots).
    chunks: Vec<Vec<S>>,
    len: usize,
}

impl<S> Default for Slab<S> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<S> Slab<S> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, slot: S) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(slot),
            _ => {
                // The first chunk grows from small; later ones are
                // allocated whole.
                let mut chunk = if self.chunks.is_empty() {
                    Vec::new()
                } else {
                    Vec::with_capacity(CHUNK)
                };
                chunk.push(slot);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    pub(crate) fn get(&self, i: usize) -> Option<&S> {
        self.chunks.get(i >> SHIFT)?.get(i & (CHUNK - 1))
    }

    /// Drops every slot and gives back all the room.
    pub(crate) fn clear(&mut self) {
        self.chunks = Vec::new();
        self.len = 0;
    }
}

impl<S> Index<usize> for Slab<S> {
    type Output = S;

    fn index(&self, i: usize) -> &S {
        &self.chunks[i >> SHIFT][i & (CHUNK - 1)]
    }
}

impl<S> IndexMut<usize> for Slab<S> {
    fn index_mut(&mut self, i: usize) -> &mut S {
        &mut self.chunks[i >> SHIFT][i & (CHUNK - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_across_chunks_and_clears() {
        let mut s = Slab::default();
        let n = 3 * CHUNK + 5;
        for i in 0..n {
            s.push(i);
        }
        assert_eq!(s.len(), n);
        for i in (0..n).step_by(7) {
            assert_eq!(s[i], i);
        }
        s[CHUNK] = 42;
        assert_eq!(s.get(CHUNK), Some(&42));
        assert_eq!(s.get(n), None);
        // Full chunks never grew past their size (nothing was moved).
        assert!(s.chunks[1..].iter().all(|c| c.capacity() == CHUNK));
        s.clear();
        assert_eq!(s.len(), 0);
        assert_eq!(s.get(0), None);
    }
}
