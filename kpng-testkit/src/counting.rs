//! A global allocator that counts live heap bytes, for memory benchmarks.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// Wraps the system allocator and counts the bytes currently allocated.
/// Install it in a benchmark binary:
///
/// ```ignore
/// #[global_allocator]
/// static ALLOC: kpng_testkit::CountingAllocator = kpng_testkit::CountingAllocator;
/// ```
///
/// Then [`CountingAllocator::live_bytes`] before and after building a
/// structure gives the heap it holds. Sizes are the requested ones, without
/// the allocator's own overhead.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAllocator;

impl CountingAllocator {
    /// Bytes allocated and not yet freed, by the whole process.
    pub fn live_bytes() -> isize {
        LIVE.load(Ordering::Relaxed)
    }

    /// The most bytes live at once since the last
    /// [`reset_peak`](Self::reset_peak) (or the start).
    pub fn peak_bytes() -> isize {
        PEAK.load(Ordering::Relaxed)
    }

    /// Starts a new peak from what is live now.
    pub fn reset_peak() {
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Adds `bytes` to the live count, raising the peak with it.
fn grow(bytes: isize) {
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn delta(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(delta(layout.size()));
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(delta(layout.size()), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grow(delta(new_size) - delta(layout.size()));
        // SAFETY: the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// A size field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`, ...) in KiB, for
/// process `pid` or, with `None`, this process; 0 when it cannot be read.
/// Benchmarks use it to measure the RSS of the processes they run.
pub fn proc_status_kib(pid: Option<u32>, field: &str) -> u64 {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_owned(),
    };
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}
