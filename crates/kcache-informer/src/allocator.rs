//! Handing the memory the process freed back to the system.
//!
//! glibc's malloc (the default allocator of Rust programs on most Linux
//! distributions) keeps freed memory in its arenas for reuse and returns
//! it to the system only from the top of a heap. After background
//! compression swaps thousands of plain objects (a few KiB each, spread
//! over the heap between live allocations) for their compressed twins, the
//! freed pages would stay resident although nothing uses them: the heap
//! shrinks and RSS does not. `malloc_trim(0)` walks every arena and gives
//! back each whole free page (`madvise(MADV_DONTNEED)`); the live objects
//! stay where they are. Other allocators (jemalloc, mimalloc, musl's, the
//! macOS and Windows ones) return free pages themselves or have no such
//! call: there this does nothing.
//!
//! This is the library's one `unsafe` block: the workspace denies
//! `unsafe_code`, and among the library crates this module alone allows
//! it (the bench harness's kcache client has the other, its global
//! allocator).

/// Asks the C allocator to return its free pages to the system; returns
/// whether it gave anything back. Walks (and briefly locks) every arena:
/// call it from a blocking thread, after a burst of frees, not per object.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn release_freed_memory() -> bool {
    // SAFETY: malloc_trim takes no pointer and touches only glibc's own
    // free lists, under each arena's lock; any thread may call it at any
    // time. When the process's global allocator is not glibc's (a Rust
    // program with jemalloc, say), it trims glibc's mostly empty arenas
    // and does no harm.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Elsewhere: nothing to do (see the module documentation).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_freed_memory() -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn releasing_with_nothing_freed_is_harmless() {
        // Whatever glibc answers, the call returns and the heap still works.
        let _ = super::release_freed_memory();
        let v = vec![1u8; 1 << 20];
        assert_eq!(v.iter().map(|&b| u64::from(b)).sum::<u64>(), 1 << 20);
    }
}
