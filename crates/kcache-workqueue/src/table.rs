//! The item table: from an item to its slot, for deduplication and `done`.
//!
//! Open addressing with linear probing and backward-shift deletion (no
//! tombstones). An entry is one `u64` holding the slot index and the item's
//! 32-bit hash tag, so a lookup reads one cache line of the table in the
//! common case (a Swiss table reads a control group and then the bucket:
//! two misses per lookup in a table of a million items, which profiles of
//! 1M distinct keys showed as most of `add` and `done`), and growing the
//! table never reads the items themselves. The caller compares the item
//! with its slot when tags match.
//!
//! The table also lets the caller warm the lines a group of items will be
//! looked up in ([`ItemTable::warm`]): the queue does so for each group of
//! adds from its inbox and for the entries it unlinks in batches.

/// Index of a slot.
pub(crate) type SlotIdx = u32;

/// Where an entry is, or where a missing item would go.
pub(crate) enum Probe {
    /// The entry at this position holds the item's slot.
    Found(usize, SlotIdx),
    /// The item is not in the table; inserting it goes here.
    Vacant(usize),
}

/// The smallest table (entries).
const MIN_CAPACITY: usize = 16;

#[derive(Debug)]
pub(crate) struct ItemTable {
    /// `0` is empty; otherwise `(slot + 1) << 32 | tag`.
    entries: Vec<u64>,
    /// `64 - log2(entries.len())`: a tag's home position is the top bits of
    /// its multiplied value (Fibonacci hashing).
    shift: u32,
    len: usize,
}

impl Default for ItemTable {
    fn default() -> Self {
        Self::with_capacity(MIN_CAPACITY)
    }
}

fn entry(idx: SlotIdx, tag: u32) -> u64 {
    (u64::from(idx) + 1) << 32 | u64::from(tag)
}

fn entry_tag(e: u64) -> u32 {
    e as u32
}

fn entry_idx(e: u64) -> SlotIdx {
    ((e >> 32) - 1) as SlotIdx
}

impl ItemTable {
    fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.next_power_of_two().max(MIN_CAPACITY);
        // Zeroed by writing, not by `vec![0; n]`: that one is calloc, whose
        // fresh pages the first probe maps to the shared zero page (a read
        // fault) and the insert that follows copies (a second fault). A
        // resize of a big table took two page faults per page, and was the
        // top source of page faults with 1M keys.
        // (clippy's `vec![0; n]` is the calloc this avoids.)
        #[allow(clippy::slow_vector_initialization)]
        let entries = {
            let mut entries = Vec::with_capacity(capacity);
            entries.resize(capacity, 0);
            entries
        };
        Self {
            entries,
            shift: 64 - capacity.trailing_zeros(),
            len: 0,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    fn home(&self, tag: u32) -> usize {
        (u64::from(tag).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// Looks `tag` up; `is_item(slot)` tells whether a slot with that tag
    /// holds the item.
    pub(crate) fn probe(&self, tag: u32, mut is_item: impl FnMut(SlotIdx) -> bool) -> Probe {
        let mask = self.mask();
        let mut pos = self.home(tag);
        loop {
            let e = self.entries[pos];
            if e == 0 {
                return Probe::Vacant(pos);
            }
            if entry_tag(e) == tag && is_item(entry_idx(e)) {
                return Probe::Found(pos, entry_idx(e));
            }
            pos = (pos + 1) & mask;
        }
    }

    /// Reads the lines `tags` are looked up in, all at once, so that the
    /// lookups that follow hit the cache: with a table larger than the
    /// cache, the misses of a group overlap instead of coming one after
    /// the other (safe Rust has no prefetch instruction; independent loads
    /// issued together are the next best thing).
    pub(crate) fn warm(&self, tags: impl Iterator<Item = u32>) {
        let mut sum = 0u64;
        for tag in tags {
            sum ^= self.entries[self.home(tag)];
        }
        std::hint::black_box(sum);
    }

    /// Removes the entries of `(tag, slot)` pairs (each once, if present),
    /// warming their lines first.
    pub(crate) fn remove_all(&mut self, pairs: &[(u32, SlotIdx)]) {
        self.warm(pairs.iter().map(|&(tag, _)| tag));
        for &(tag, idx) in pairs {
            self.remove_slot(idx, tag);
        }
    }

    /// Inserts slot `idx` with `tag` at `pos`, from a [`Probe::Vacant`] of
    /// this table unchanged since.
    pub(crate) fn insert_at(&mut self, pos: usize, idx: SlotIdx, tag: u32) {
        self.entries[pos] = entry(idx, tag);
        self.len += 1;
        if self.len * 8 > self.entries.len() * 5 {
            self.resize(self.entries.len() * 2);
        }
    }

    /// Inserts slot `idx` with `tag` (not in the table).
    fn insert_new(&mut self, idx: SlotIdx, tag: u32) {
        let mask = self.mask();
        let mut pos = self.home(tag);
        while self.entries[pos] != 0 {
            pos = (pos + 1) & mask;
        }
        self.entries[pos] = entry(idx, tag);
        self.len += 1;
    }

    /// Removes the entry at `pos` (from a [`Probe::Found`] of this table
    /// unchanged since): later entries of its run move back into the hole
    /// when their home allows it.
    pub(crate) fn remove_at(&mut self, pos: usize) {
        let mask = self.mask();
        let mut hole = pos;
        let mut j = pos;
        loop {
            j = (j + 1) & mask;
            let e = self.entries[j];
            if e == 0 {
                break;
            }
            let home = self.home(entry_tag(e));
            // `e` may fill the hole if the hole lies between its home and
            // its position (cyclically).
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.entries[hole] = e;
                hole = j;
            }
        }
        self.entries[hole] = 0;
        self.len -= 1;
    }

    /// Gives back room the table no longer needs (it never shrinks on
    /// removal: a queue that drains and refills would allocate, and fault
    /// in, a fresh table each time).
    pub(crate) fn shrink(&mut self) {
        if self.entries.len() > MIN_CAPACITY && self.len * 8 < self.entries.len() {
            self.resize((self.len * 2).max(MIN_CAPACITY));
        }
    }

    /// Removes the entry of slot `idx` with `tag`, if present.
    pub(crate) fn remove_slot(&mut self, idx: SlotIdx, tag: u32) {
        if let Probe::Found(pos, _) = self.probe(tag, |i| i == idx) {
            self.remove_at(pos);
        }
    }

    fn resize(&mut self, capacity: usize) {
        let old = std::mem::replace(self, Self::with_capacity(capacity));
        for e in old.entries {
            if e != 0 {
                self.insert_new(entry_idx(e), entry_tag(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(t: &ItemTable, tag: u32, idx: SlotIdx) -> bool {
        matches!(t.probe(tag, |i| i == idx), Probe::Found(_, i) if i == idx)
    }

    fn insert(t: &mut ItemTable, tag: u32, idx: SlotIdx) {
        match t.probe(tag, |i| i == idx) {
            Probe::Vacant(pos) => t.insert_at(pos, idx, tag),
            Probe::Found(..) => panic!("{idx} already there"),
        }
    }

    fn remove(t: &mut ItemTable, tag: u32, idx: SlotIdx) {
        match t.probe(tag, |i| i == idx) {
            Probe::Found(pos, _) => t.remove_at(pos),
            Probe::Vacant(_) => panic!("{idx} missing"),
        }
    }

    /// Entries sharing a tag (so a home and a run), removed in every order,
    /// stay findable: backward shift keeps each run contiguous.
    #[test]
    fn colliding_runs_survive_removals() {
        for victim in 0..6u32 {
            let mut t = ItemTable::default();
            for idx in 0..6 {
                insert(&mut t, 7, idx);
            }
            insert(&mut t, 8, 100);
            remove(&mut t, 7, victim);
            for idx in 0..6 {
                assert_eq!(
                    find(&t, 7, idx),
                    idx != victim,
                    "victim {victim}, idx {idx}"
                );
            }
            assert!(find(&t, 8, 100));
            assert_eq!(t.len(), 6);
        }
    }

    /// Many inserts and removals with a scrambled order and grown/shrunk
    /// table: the table agrees with a model.
    #[test]
    fn agrees_with_a_model_through_growth_and_shrinking() {
        let mut t = ItemTable::default();
        let mut model = std::collections::HashMap::new();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for round in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let idx = (x % 5_000) as SlotIdx;
            // Few distinct tags, to make long runs and wrap-arounds.
            let tag = (idx % 97) ^ 0xDEAD_0000;
            let grow = round < 100_000 || x.is_multiple_of(3);
            let present = model.contains_key(&idx);
            if present && !grow {
                remove(&mut t, tag, idx);
                model.remove(&idx);
            } else if !present && grow {
                insert(&mut t, tag, idx);
                model.insert(idx, tag);
            }
            if round % 10_000 == 0 {
                for (&i, &g) in &model {
                    assert!(find(&t, g, i));
                }
            }
        }
        for (&i, &g) in &model {
            assert!(find(&t, g, i));
        }
        assert_eq!(t.len(), model.len());
        for (&i, &g) in &model {
            t.remove_slot(i, g);
        }
        assert_eq!(t.len(), 0);
        t.shrink();
        assert_eq!(t.entries.len(), MIN_CAPACITY);
    }
}
