//! A global allocator that records, per thread, the largest single
//! allocation made while [`largest_allocation`] runs a closure; otherwise
//! it only forwards to the system allocator.
//!
//! What it catches: a reader that sizes a buffer from a length field of
//! its input before checking that many bytes are left (a 4 GiB `Vec` for a
//! 20-byte file). libFuzzer's own `-malloc_limit_mb` needs a sanitizer's
//! allocator hooks; this works on stable, with or without a sanitizer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // const-initialized and without destructors: reading them never
    // allocates, so the allocator can use them.
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACKING.try_with(|on| {
        if on.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

/// The system allocator, recording allocation sizes for
/// [`largest_allocation`]. This crate installs it as the global allocator.
pub struct TrackingAllocator;

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; `note` only reads and writes two thread-local
// `Cell`s (const-initialized, no destructor, so no allocation and no
// reentry).
unsafe impl GlobalAlloc for TrackingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's guarantees about `layout` are passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` was allocated by `System` with `layout`; the
        // caller's guarantees about `new_size` are passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Restores the tracking state when the closure returns or panics.
struct Restore {
    tracking: bool,
    largest: usize,
}

impl Drop for Restore {
    fn drop(&mut self) {
        TRACKING.with(|t| t.set(self.tracking));
        LARGEST.with(|l| l.set(l.get().max(self.largest)));
    }
}

/// Runs `f` and returns its result with the size in bytes of the largest
/// single allocation (or reallocation) it made on this thread.
pub fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let _restore = Restore {
        tracking: TRACKING.with(|t| t.replace(true)),
        largest: LARGEST.with(|l| l.replace(0)),
    };
    let r = f();
    let largest = LARGEST.with(Cell::get);
    (r, largest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_the_largest_allocation_of_the_closure_only() {
        let _before = std::hint::black_box(vec![0u8; 1 << 20]);
        let (v, largest) = largest_allocation(|| {
            let a = std::hint::black_box(vec![1u8; 3000]);
            let b = std::hint::black_box(vec![2u8; 100]);
            a.len() + b.len()
        });
        assert_eq!(v, 3100);
        assert_eq!(largest, 3000);
        // nested: the inner figure is the inner closure's
        let ((_, inner), outer) = largest_allocation(|| {
            let _big = std::hint::black_box(vec![0u8; 5000]);
            largest_allocation(|| std::hint::black_box(vec![0u8; 10]).len())
        });
        assert_eq!(inner, 10);
        assert_eq!(outer, 5000);
    }
}
