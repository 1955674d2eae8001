//! The ready queue: one FIFO lane per priority.
//!
//! Items of one priority are handed out in the order they became ready
//! (client-go's queue order); across priorities the lane whose head has the
//! smallest rank goes first (strict priority, or priority with aging). A
//! priority bump leaves the old entry behind as a stale entry that the
//! queue skips when it reaches the front (lazy deletion), so every operation
//! is O(number of distinct priorities) instead of a sorted map's O(log n)
//! with an allocation per insert.

use std::collections::VecDeque;

/// Position of a ready entry: smaller is handed out first.
///
/// 16 bytes, so that an entry with a slot index is 24 (with an `i128` rank
/// it was 48: a backlog of a million ready items wrote, and faulted in,
/// twice the memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ReadyKey {
    pub(crate) rank: i64,
    pub(crate) seq: u64,
}

#[derive(Debug)]
struct Entry<T> {
    key: ReadyKey,
    item: T,
}

#[derive(Debug)]
struct Lane<T> {
    priority: i32,
    entries: VecDeque<Entry<T>>,
}

/// Ready items by priority lane. `live` counts entries that are not stale;
/// the owner tells which entries are stale (see [`ReadyQueue::pop_front`]).
#[derive(Debug)]
pub(crate) struct ReadyQueue<T> {
    /// Sorted by priority, highest first; lanes are kept when empty (a
    /// queue sees few distinct priorities).
    lanes: Vec<Lane<T>>,
    live: usize,
    /// Strict priority: the highest lane with an entry goes first, whatever
    /// the ranks.
    strict: bool,
}

impl<T> Default for ReadyQueue<T> {
    fn default() -> Self {
        Self::new(false)
    }
}

impl<T> ReadyQueue<T> {
    /// An empty queue; `strict`: see [`ReadyQueue::strict`].
    pub(crate) fn new(strict: bool) -> Self {
        Self {
            lanes: Vec::new(),
            live: 0,
            strict,
        }
    }

    /// Live entries.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Appends `item` to its priority's lane. Within a lane ranks never go
    /// down: an item whose rank is below the lane's last one (it became ready
    /// earlier but is queued later, e.g. back from processing) takes the
    /// last one's rank and queues behind it, as in client-go's FIFO.
    pub(crate) fn push(&mut self, item: T, priority: i32, rank: i64, seq: u64) -> ReadyKey {
        let idx = match self.lanes.binary_search_by(|l| priority.cmp(&l.priority)) {
            Ok(i) => i,
            Err(i) => {
                self.lanes.insert(
                    i,
                    Lane {
                        priority,
                        entries: VecDeque::new(),
                    },
                );
                i
            }
        };
        let lane = &mut self.lanes[idx].entries;
        let rank = lane.back().map_or(rank, |last| rank.max(last.key.rank));
        let key = ReadyKey { rank, seq };
        lane.push_back(Entry { key, item });
        self.live += 1;
        key
    }

    /// Gives back the room of empty lanes beyond `capacity` entries.
    pub(crate) fn shrink_to(&mut self, capacity: usize) {
        for lane in &mut self.lanes {
            if lane.entries.is_empty() {
                lane.entries.shrink_to(capacity);
            }
        }
    }

    /// One live entry became stale (its item was re-queued elsewhere).
    pub(crate) fn mark_stale(&mut self) {
        self.live = self.live.saturating_sub(1);
    }

    /// Takes the entry that goes first. `is_live(item, key)` tells whether
    /// the entry is still the item's place; stale entries are dropped on the
    /// way.
    pub(crate) fn pop_front(&mut self, mut is_live: impl FnMut(&T, ReadyKey) -> bool) -> Option<T> {
        loop {
            let mut best: Option<(usize, ReadyKey)> = None;
            for (i, lane) in self.lanes.iter().enumerate() {
                if let Some(front) = lane.entries.front()
                    && best.is_none_or(|(_, k)| front.key < k)
                {
                    best = Some((i, front.key));
                    if self.strict {
                        // Lanes go from the highest priority down.
                        break;
                    }
                }
            }
            let (i, _) = best?;
            let entry = self.lanes[i].entries.pop_front()?;
            if is_live(&entry.item, entry.key) {
                self.live = self.live.saturating_sub(1);
                return Some(entry.item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lane_is_fifo_even_for_earlier_ranks() {
        let mut q = ReadyQueue::default();
        q.push("a", 0, 10, 1);
        q.push("b", 0, 5, 2); // became ready earlier, queued later
        q.push("c", 0, 20, 3);
        let order: Vec<_> = std::iter::from_fn(|| q.pop_front(|_, _| true)).collect();
        assert_eq!(order, ["a", "b", "c"]);
        assert!(q.is_empty());
    }

    #[test]
    fn lanes_compare_their_heads_by_rank_then_seq() {
        let mut q = ReadyQueue::default();
        q.push("low", -1, 30, 1);
        q.push("high", 5, 10, 2);
        q.push("mid", 0, 10, 3);
        q.push("high2", 5, 40, 4);
        let order: Vec<_> = std::iter::from_fn(|| q.pop_front(|_, _| true)).collect();
        assert_eq!(order, ["high", "mid", "low", "high2"]);
    }

    #[test]
    fn strict_takes_the_highest_lane_whatever_the_ranks() {
        let mut q = ReadyQueue::new(true);
        q.push("low", -1, 1, 1);
        q.push("high", 5, 40, 2);
        q.push("mid", 0, 10, 3);
        let order: Vec<_> = std::iter::from_fn(|| q.pop_front(|_, _| true)).collect();
        assert_eq!(order, ["high", "mid", "low"]);
    }

    #[test]
    fn an_entry_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Entry<u32>>(), 24);
    }

    #[test]
    fn stale_entries_are_skipped_and_not_counted() {
        let mut q = ReadyQueue::default();
        let a = q.push("a", 0, 1, 1);
        q.push("b", 0, 2, 2);
        // "a" bumped to priority 3: the old entry is stale.
        q.mark_stale();
        let a2 = q.push("a", 3, 5, 3);
        assert_eq!(q.len(), 2);
        let live = |item: &&str, key: ReadyKey| *item != "a" || key == a2;
        assert_ne!(a, a2);
        assert_eq!(q.pop_front(live), Some("b"));
        assert_eq!(q.pop_front(live), Some("a"));
        assert_eq!(q.pop_front(live), None);
        assert_eq!(q.len(), 0);
    }
}
