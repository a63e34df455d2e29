//! What a run leaves behind that neither its process group nor its token finds: a process that
//! left the group and cleared its environment (`env -i setsid ...`, a daemonizer). With this
//! process a child subreaper ([`become_subreaper`]: the daemon and `scafld worker`), whatever
//! a command orphans is re-parented to us instead of to init, so it can be found by parentage:
//! a child of ours started while one of our runs ran is killed, with everything below it, once
//! every run that may have started it has ended; and a child of ours that died is reaped here
//! (tokio reaps only the children it spawned, by their pid).
//!
//! Which run an orphan came from is not known, only when it started: one that started while a
//! run still going had begun is left until that run ends too, so with several runs at once an
//! orphan may outlive its own run until the others that overlapped its start have ended.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use crate::proc::stat;

static SUBREAPER: AtomicBool = AtomicBool::new(false);
static RUNS: Mutex<Runs> = Mutex::new(Runs { next: 0, live: Vec::new(), ended: VecDeque::new() });

/// Ended runs remembered (an orphan that started in a forgotten one is left alone).
const REMEMBERED: usize = 512;
/// How long a run's end waits for what is left of its group to die (killed by then).
const GROUP_GONE: Duration = Duration::from_secs(1);
/// How long killing waits for a process it stopped to be stopped.
const STOP_SETTLE: Duration = Duration::from_millis(100);

struct Runs {
    next: u64,
    live: Vec<Live>,
    ended: VecDeque<Window>,
}

struct Live {
    id: u64,
    /// When the run began, in clock ticks since boot (as `/proc/PID/stat` gives a process's
    /// start): no process it started began earlier.
    since: u64,
    /// Its leader, reaped by whoever spawned it (never here).
    leader: i32,
}

/// When an ended run ran: from its start through the end of its own sweep.
struct Window {
    id: u64,
    since: u64,
    until: u64,
}

/// Make this process a child subreaper: what its runs orphan is re-parented to it (see the
/// module). Call once, early; it lasts for the life of the process.
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)?;
    SUBREAPER.store(true, Ordering::SeqCst);
    Ok(())
}

/// Whether this process is a child subreaper: then everything its runs started that still
/// lives descends from it (see the module).
pub(crate) fn is_subreaper() -> bool {
    SUBREAPER.load(Ordering::SeqCst)
}

fn runs() -> std::sync::MutexGuard<'static, Runs> {
    RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A run in progress, known to the sweeps ([`spawn_tracked`]).
pub(crate) struct Tracked {
    id: u64,
}

/// Spawn a run's leader with `spawn`, the run known before any process of it can exist and its
/// leader's pid (`pid_of`) known before a sweep can look (the registry's lock is held across
/// the spawn), so that its leader is never reaped here. `None` when not a subreaper.
pub(crate) fn spawn_tracked<T, E>(
    spawn: impl FnOnce() -> Result<T, E>,
    pid_of: impl FnOnce(&T) -> Option<u32>,
) -> (Result<T, E>, Option<Tracked>) {
    if !SUBREAPER.load(Ordering::SeqCst) {
        return (spawn(), None);
    }
    let mut runs = runs();
    let since = ticks_now();
    let spawned = spawn();
    let leader = spawned.as_ref().ok().and_then(pid_of).map_or(0, |pid| pid as i32);
    let id = runs.next;
    runs.next += 1;
    runs.live.push(Live { id, since, leader });
    (spawned, Some(Tracked { id }))
}

impl Tracked {
    /// The run has ended, its leader reaped and its group killed: wait (bounded) until what is
    /// left of the group is dead, killing and reaping what the run orphaned meanwhile.
    pub(crate) async fn finish(self, pgid: i32) {
        self.end();
        let deadline = tokio::time::Instant::now() + GROUP_GONE;
        loop {
            sweep();
            let gone = pgid <= 0 || killpg(Pid::from_raw(pgid), None) == Err(Errno::ESRCH);
            if gone || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.close();
        std::mem::forget(self);
    }

    /// Live no more: an open window until [`Tracked::close`].
    fn end(&self) {
        let mut runs = runs();
        let Some(at) = runs.live.iter().position(|l| l.id == self.id) else { return };
        let live = runs.live.swap_remove(at);
        if runs.ended.len() == REMEMBERED {
            runs.ended.pop_front();
        }
        runs.ended.push_back(Window { id: self.id, since: live.since, until: u64::MAX });
    }

    fn close(&self) {
        let now = ticks_now();
        if let Some(window) = runs().ended.iter_mut().find(|w| w.id == self.id) {
            window.until = now;
        }
    }
}

impl Drop for Tracked {
    /// A run dropped before its end (its leader killed on drop): what it orphaned is swept now
    /// and by later sweeps.
    fn drop(&mut self) {
        self.end();
        sweep();
        self.close();
    }
}

/// Kill what ended runs orphaned onto us (each with everything below it) and reap our dead
/// children, leaving alone anything a live run may have started and any live run's leader.
/// Cheap when there is nothing to do (one read of our children).
pub fn sweep() {
    sweep_as(false);
}

/// Called as the process stops: everything its runs started goes, live ones included.
pub fn kill_all_runs_left() {
    sweep_as(true);
}

fn sweep_as(everything: bool) {
    if !SUBREAPER.load(Ordering::SeqCst) {
        return;
    }
    let (leaders, live_since, windows) = {
        let runs = runs();
        let leaders: Vec<i32> = runs.live.iter().map(|l| l.leader).collect();
        let live_since = runs.live.iter().map(|l| l.since).min().filter(|_| !everything);
        let mut windows: Vec<(u64, u64)> = runs.ended.iter().map(|w| (w.since, w.until)).collect();
        if everything {
            windows.extend(runs.live.iter().map(|l| (l.since, u64::MAX)));
        }
        (leaders, live_since, windows)
    };
    let mut orphans = Vec::new();
    for pid in our_children(everything) {
        let Some(stat) = stat(pid) else { continue };
        if stat.state == 'Z' {
            // Dead: reaped, unless its spawner reaps it (a live run's leader).
            if everything || !leaders.contains(&pid) {
                let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
            }
            continue;
        }
        // Started since a live run began: that run's (or possibly), for now.
        if live_since.is_some_and(|since| since <= stat.start_ticks) {
            continue;
        }
        // Started while none of our runs ran: not from one (a daemon `scafld worker` started).
        if !windows.iter().any(|(since, until)| *since <= stat.start_ticks && stat.start_ticks <= *until) {
            continue;
        }
        orphans.push(pid);
    }
    kill_trees(orphans, everything);
}

/// Kill each orphan's tree: off the async runtime when there is one (stopping a tree waits for
/// each level to stop, up to [`STOP_SETTLE`] a level), inline as the process stops. An orphan
/// another sweep is already killing is left to it.
fn kill_trees(orphans: Vec<i32>, now: bool) {
    static KILLING: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    let claimed: Vec<i32> = {
        let mut killing = KILLING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let claimed: Vec<i32> = orphans.into_iter().filter(|pid| !killing.contains(pid)).collect();
        killing.extend(&claimed);
        claimed
    };
    if claimed.is_empty() {
        return;
    }
    let kill = move || {
        for pid in &claimed {
            kill_tree(*pid);
        }
        KILLING.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).retain(|pid| !claimed.contains(pid));
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if !now => drop(runtime.spawn_blocking(kill)),
        _ => kill(),
    }
}

/// Reap and sweep whenever a child of ours changes state (the daemon runs this for its life).
pub async fn reap_forever() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut children) = signal(SignalKind::child()) else { return };
    while children.recv().await.is_some() {
        sweep();
    }
}

/// SIGKILL `root` and everything below it: stopped first, a level at a time, so that none of
/// them forks a process the walk would miss; a process leading its own group takes the group
/// with it.
fn kill_tree(root: i32) {
    let mut tree: Vec<i32> = Vec::new();
    let mut level = vec![root];
    while !level.is_empty() && tree.len() < 4096 {
        for pid in &level {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGSTOP);
        }
        settle(&level);
        let below: Vec<i32> = level
            .iter()
            .flat_map(|pid| children_of(*pid))
            .filter(|child| !tree.contains(child) && !level.contains(child))
            .collect();
        tree.append(&mut level);
        level = below;
    }
    for pid in tree {
        let pid = Pid::from_raw(pid);
        if nix::unistd::getpgid(Some(pid)) == Ok(pid) {
            let _ = killpg(pid, Signal::SIGKILL);
        }
        let _ = kill(pid, Signal::SIGKILL);
    }
}

/// Wait (bounded) until every process of `pids` is stopped, dead or gone: a stopped process's
/// children are all it will have.
fn settle(pids: &[i32]) {
    let started = std::time::Instant::now();
    while pids.iter().any(|pid| stat(*pid).is_some_and(|stat| !matches!(stat.state, 'T' | 't') && !stat.is_dead())) {
        if started.elapsed() > STOP_SETTLE {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Our children: the main thread's (where the kernel re-parents orphans), or every thread's.
/// Without `/proc/PID/task/TID/children` (a kernel built without it), every process whose
/// parent we are.
fn our_children(every_thread: bool) -> Vec<i32> {
    let own = std::process::id() as i32;
    if every_thread {
        return children_of(own);
    }
    match std::fs::read_to_string(format!("/proc/self/task/{own}/children")) {
        Ok(list) => list.split_whitespace().filter_map(|pid| pid.parse().ok()).collect(),
        Err(_) => children_of(own),
    }
}

/// The children of `pid`, from each of its threads' `children` file (or, without those, from
/// every process's parent).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut found = Vec::new();
    let mut listed = false;
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            listed = true;
            found.extend(list.split_whitespace().filter_map(|child| child.parse::<i32>().ok()));
        }
    }
    if !listed {
        found = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|child| stat(*child).is_some_and(|stat| stat.parent == pid))
            .collect();
    }
    found
}

/// A process's state letter (field 3 of `/proc/PID/stat`: `R`, `S`, `T` stopped, `Z` a zombie,
/// ...), or `None` when there is no such process.
pub fn process_state(pid: i32) -> Option<char> {
    stat(pid).map(|stat| stat.state)
}

/// Now, in the clock ticks since boot a process's start is given in (`/proc/PID/stat`: the
/// boot-time clock, whole ticks).
fn ticks_now() -> u64 {
    use nix::libc;
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf reads a constant.
    let hz = *HZ.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as u64,
        _ => 100,
    });
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    now.tv_sec as u64 * hz + now.tv_nsec as u64 * hz / 1_000_000_000
}

#[cfg(test)]
mod tests {
    /// The clock read here is the one a process's start is given in: a child started now
    /// starts no earlier than the tick read before it, nor later than the one read after.
    #[test]
    fn the_tick_clock_is_the_one_process_starts_are_given_in() {
        let before = super::ticks_now();
        let mut child = std::process::Command::new("sleep").arg("1").spawn().unwrap();
        let after = super::ticks_now();
        let start = super::stat(child.id() as i32).unwrap().start_ticks;
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(before <= start && start <= after, "{before} <= {start} <= {after}");
    }
}
