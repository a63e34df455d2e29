//! What the state database costs in memory, counted by this binary's own allocator. A
//! measurement runs in a process of its own (this binary run again for that one test), so no
//! other test's thread allocates meanwhile and sled's process-wide statics start afresh.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use scafld_daemon::store::SledStore;

/// The system allocator, counting the bytes it handed out unzeroed and not yet freed: those
/// the caller writes, so resident, while zeroed ones may stay pages the kernel never maps.
struct Counting;

static WRITTEN: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        WRITTEN.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // A zeroed block freed is counted out though never counted in: the count can only
        // come out low by it, never high.
        WRITTEN.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        WRITTEN.fetch_add(new_size as isize, Ordering::Relaxed);
        WRITTEN.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: isize = 1 << 20;

/// sled 0.34 makes 41 metrics histograms of 512 KiB at its first opening, even with its
/// metrics off: written with zeros they were 21 MiB of every daemon's memory, used by nothing.
#[test]
fn opening_an_empty_database_writes_no_more_than_a_few_mebibytes_of_heap() {
    if !alone("opening_an_empty_database_writes_no_more_than_a_few_mebibytes_of_heap") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let before = WRITTEN.load(Ordering::Relaxed);
    let store = SledStore::open(&dir.path().join("db")).unwrap();
    let written = WRITTEN.load(Ordering::Relaxed) - before;
    drop(store);
    assert!(written < 8 * MIB, "opening an empty database left {} MiB of written heap", written / MIB);
}

/// Names the one test a process of this binary runs alone (see [`alone`]).
const ALONE: &str = "SCAFLD_TEST_STORE_MEMORY_ALONE";

/// Whether this process is the one running `test` alone; if it is not, `test` is run so, it
/// must pass, and the caller returns.
fn alone(test: &str) -> bool {
    if std::env::var(ALONE).is_ok_and(|running| running == test) {
        return true;
    }
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", test, "--quiet", "--test-threads=1"]).env(ALONE, test);
    let out = command.output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{test}, run alone, failed: {said}");
    false
}
