//! Hints from `get` to `done`: the slots the last items a thread was
//! handed came from, so that `done` on the same thread finds its item's
//! slot without a table lookup.

use std::cell::Cell;

use crate::table::SlotIdx;

thread_local! {
    /// The last items `get` handed out on this thread, as (queue, slot):
    /// `done` usually comes on the same thread right after, and finds the
    /// slot here without a table lookup (a cache miss per item once the
    /// table outgrows the cache). Only a hint: `done` checks under the
    /// lock that the slot holds the item and is processing.
    static HANDED_OUT: Cell<([(usize, SlotIdx); HANDED_OUT_HINTS], usize)> =
        const { Cell::new(([(0, 0); HANDED_OUT_HINTS], 0)) };
}

/// Items remembered by [`HANDED_OUT`] per thread.
const HANDED_OUT_HINTS: usize = 4;

pub(super) fn remember_handed_out(queue: usize, idx: SlotIdx) {
    HANDED_OUT.with(|h| {
        let (mut hints, next) = h.get();
        hints[next % HANDED_OUT_HINTS] = (queue, idx);
        h.set((hints, next.wrapping_add(1)));
    });
}

/// The slots of the items handed out by `queue` on this thread lately
/// (see [`HANDED_OUT`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Hints {
    slots: [SlotIdx; HANDED_OUT_HINTS],
    len: usize,
}

impl Hints {
    /// This thread's hints for `queue`.
    pub(super) fn of(queue: usize) -> Self {
        let (handed_out, _) = HANDED_OUT.with(Cell::get);
        let mut hints = Hints {
            slots: [0; HANDED_OUT_HINTS],
            len: 0,
        };
        for (q, idx) in handed_out {
            if q == queue {
                hints.slots[hints.len] = idx;
                hints.len += 1;
            }
        }
        hints
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = SlotIdx> + '_ {
        self.slots[..self.len].iter().copied()
    }
}
