//! The daemon's locks (`<socket>.lock`, `<state dir>/scafldd.lock`): POSIX record locks
//! (`fcntl(F_SETLK)`), which belong to the process that took them, are never inherited by a
//! child, and go with that process. An `flock` belongs to the open file instead, which a child
//! forked to run a command shares until its `exec` closes it: a daemon killed in that moment
//! left its locks held by the child, and the next daemon refused to start as if one ran.

use std::fs::File;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};
use nix::libc;

/// An exclusive lock on the whole of a file, held by this process until it is dropped. The file
/// must be opened nowhere else in this process: closing any descriptor of it releases the lock.
pub struct ProcessLock {
    file: File,
}

impl ProcessLock {
    /// Take it without waiting; held by another process: `Errno::EWOULDBLOCK`.
    pub fn exclusive(file: File) -> Result<ProcessLock, Errno> {
        match fcntl(&file, FcntlArg::F_SETLK(&whole(libc::F_WRLCK))) {
            Ok(_) => Ok(ProcessLock { file }),
            // POSIX allows either for a lock another process holds.
            Err(Errno::EACCES | Errno::EAGAIN) => Err(Errno::EWOULDBLOCK),
            Err(errno) => Err(errno),
        }
    }

    pub fn file(&self) -> &File {
        &self.file
    }
}

/// The pid of the process holding a lock on `file`, if one does (never this process).
pub fn holder(file: &File) -> Option<u32> {
    let mut probe = whole(libc::F_WRLCK);
    fcntl(file, FcntlArg::F_GETLK(&mut probe)).ok()?;
    (i32::from(probe.l_type) != libc::F_UNLCK).then_some(probe.l_pid as u32)
}

/// Whether a daemon of an earlier release holds `file`: those took an `flock`, which Linux
/// keeps apart from record locks, so [`ProcessLock::exclusive`] and [`holder`] do not see it
/// (an upgrade with the old daemon still running). Call it before taking the record lock:
/// the probe's descriptor is closed after, and closing any descriptor of a file releases this
/// process's record lock on it.
pub fn held_by_an_earlier_release(file: &File) -> bool {
    let Ok(probe) = file.try_clone() else { return false };
    match nix::fcntl::Flock::lock(probe, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        // Let go at once (dropping the guard unlocks it).
        Ok(_free) => false,
        Err((_, errno)) => errno == Errno::EWOULDBLOCK,
    }
}

/// A lock of `kind` over the whole file, however long it grows.
fn whole(kind: libc::c_int) -> libc::flock {
    // SAFETY: `flock` is plain data; every field is set below or meant to be zero.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    /// Another process holding `path` locked with Python's `fcntl.<call>` (`lockf`: a record
    /// lock; `flock`: an earlier release's kind) until its stdin closes.
    fn locked_elsewhere(path: &std::path::Path, call: &str) -> std::process::Child {
        let script = format!(
            "import fcntl,sys; f=open(sys.argv[1],'a'); fcntl.{call}(f, fcntl.LOCK_EX); print(flush=True); sys.stdin.read()"
        );
        let mut other = Command::new("python3")
            .args(["-c", &script])
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::BufReader::new(other.stdout.take().unwrap()).read_line(&mut String::new()).unwrap();
        other
    }

    /// Another process's lock is refused and its holder named; once it ends, the lock is free.
    #[test]
    fn the_lock_is_the_holders_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let open = || std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).unwrap();
        let mut other = locked_elsewhere(&path, "lockf");
        assert_eq!(ProcessLock::exclusive(open()).err(), Some(Errno::EWOULDBLOCK));
        assert_eq!(holder(&open()), Some(other.id()));
        drop(other.stdin.take());
        other.wait().unwrap();
        assert_eq!(holder(&open()), None);
        ProcessLock::exclusive(open()).unwrap();
    }

    /// A daemon of an earlier release held its lock with `flock`, which a record lock does not
    /// see: it is looked for apart, and let go of at once.
    #[test]
    fn an_earlier_releases_flock_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let open = || std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).unwrap();
        assert!(!held_by_an_earlier_release(&open()));
        assert!(!held_by_an_earlier_release(&open()), "the probe lets its flock go");
        let mut other = locked_elsewhere(&path, "flock");
        assert!(held_by_an_earlier_release(&open()));
        assert_eq!(holder(&open()), None, "a record lock's probe does not see an flock");
        drop(other.stdin.take());
        other.wait().unwrap();
        assert!(!held_by_an_earlier_release(&open()));
    }
}
