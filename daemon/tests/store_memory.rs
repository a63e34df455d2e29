//! What the state database costs in memory, counted by this binary's own allocator. Each
//! measurement runs in a process of its own (this binary run again for that one test), so no
//! other test's thread allocates meanwhile and sled's process-wide statics start afresh.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use scafld_daemon::domain::job::{JobKind, JobRecord};
use scafld_daemon::store::{SledStore, Store};

/// The system allocator, counting the bytes it handed out unzeroed and not yet freed: those
/// the caller writes, so resident, while zeroed ones may stay pages the kernel never maps.
struct Counting;

static WRITTEN: AtomicIsize = AtomicIsize::new(0);
/// Every byte allocated and not yet freed, zeroed or not.
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        WRITTEN.fetch_add(layout.size() as isize, Ordering::Relaxed);
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // A zeroed block freed is counted out though never counted in: the count can only
        // come out low by it, never high.
        WRITTEN.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        WRITTEN.fetch_add(new_size as isize, Ordering::Relaxed);
        WRITTEN.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        LIVE.fetch_add(new_size as isize, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
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
    if !alone("opening_an_empty_database_writes_no_more_than_a_few_mebibytes_of_heap", None) {
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
/// The database a test run alone works on.
const DB: &str = "SCAFLD_TEST_STORE_MEMORY_DB";

/// Whether this process is the one running `test` alone; if it is not, `test` is run so (on
/// the database `db`), it must pass, and the caller returns.
fn alone(test: &str, db: Option<&std::path::Path>) -> bool {
    if std::env::var(ALONE).is_ok_and(|running| running == test) {
        return true;
    }
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", test, "--quiet", "--test-threads=1"]).env(ALONE, test);
    if let Some(db) = db {
        command.env(DB, db);
    }
    let out = command.output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{test}, run alone, failed: {said}");
    false
}

/// Three times sled's cache of job records, about a finished build job's size each (excerpts
/// included); run alone by the test below (and a no-op otherwise), so that what the writing
/// holds, or frees late, is none of the measuring process's heap.
#[test]
fn write_a_database_larger_than_the_cache() {
    if std::env::var(ALONE).is_err() {
        return;
    }
    let Some(db) = std::env::var_os(DB) else { return };
    let store = SledStore::open(std::path::Path::new(&db)).unwrap();
    let excerpt = "y".repeat(3 * 1024);
    for n in 0..records() {
        let mut job = JobRecord::queued(
            format!("job-{n:06}"),
            JobKind::Acceptance,
            "ws".into(),
            "/nowhere".into(),
            format!("task-{}", n % 50),
            "2026-11-27T21:00:00Z".into(),
        );
        job.reason = Some(excerpt.clone());
        store.put_job(&job).unwrap();
    }
    store.flush().unwrap();
}

fn records() -> usize {
    3 * scafld_daemon::store::CACHE_BYTES as usize / (3 * 1024)
}

/// A database three times sled's cache, read whole by the census of the opening: what stays
/// in memory is about the cache's worth, not the database's (sled's default cache, 1 GiB, kept
/// every page read or written, so a daemon grew with its history and each start began as large
/// as its database).
#[test]
fn a_database_larger_than_the_cache_is_not_kept_in_memory_once_opened() {
    const TEST: &str = "a_database_larger_than_the_cache_is_not_kept_in_memory_once_opened";
    if std::env::var(ALONE).is_err() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        alone("write_a_database_larger_than_the_cache", Some(&db));
        alone(TEST, Some(&db));
        return;
    }
    let db = std::path::PathBuf::from(std::env::var_os(DB).unwrap());
    let before = LIVE.load(Ordering::Relaxed);
    let store = SledStore::open(&db).unwrap();
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(store.jobs().unwrap().len(), records());
    drop(store);
    let bound = scafld_daemon::store::CACHE_BYTES as isize + 16 * MIB;
    assert!(
        held < bound,
        "a database of {} jobs held {} MiB once opened, over {} MiB",
        records(),
        held / MIB,
        bound / MIB
    );
}
