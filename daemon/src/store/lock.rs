//! The state directory's lock: a daemon holds an exclusive lock ([`ProcessLock`], its own and
//! never its children's) on `<state dir>/scafldd.lock` (its pid written in it) for its whole life, and `scafldd --recover` takes the same lock before
//! it touches anything, so a recovery never moves a running daemon's database aside, whatever
//! socket either was started for. sled's own lock on its database file is looked at too (a
//! daemon of an older release holds only that).

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use scafld_local::lock::ProcessLock;

pub use scafld_local::paths::LOCK_FILE;

/// The state directory, held by this process until it is dropped.
pub struct StateLock {
    _lock: ProcessLock,
}

/// Why the state directory could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it: the pid it wrote, when it wrote one.
    Held {
        path: PathBuf,
        pid: Option<u32>,
    },
    Io {
        path: PathBuf,
        source: io::Error,
    },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held { path, pid } => {
                let who = match pid {
                    Some(pid) => format!("process {pid}{}", command_of(*pid)),
                    None => "another process".into(),
                };
                write!(f, "{who} holds {} (a daemon, or a recovery, is using this state directory)", path.display())
            }
            LockError::Io { path, source } => write!(f, "cannot lock {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for LockError {}

impl LockError {
    /// What to do about it, for the refusal's text.
    pub fn advice(&self) -> &'static str {
        match self {
            LockError::Held { .. } => {
                "stop it first (`scafld daemon stop` with its socket): one daemon per state directory"
            }
            LockError::Io { source, .. } if source.kind() == io::ErrorKind::StorageFull => {
                "the disk holding the state directory is full: free space there, then start again"
            }
            LockError::Io { .. } => {
                "remove or repair that file: it holds nothing but the pid of the daemon that locks it"
            }
        }
    }
}

impl StateLock {
    /// Take the lock of `state_dir` without waiting, and write this process's pid in it, and
    /// on a line of its own the socket it answers at (for a client configured for another).
    pub fn acquire(state_dir: &Path, socket: Option<&Path>) -> Result<StateLock, LockError> {
        let path = state_dir.join(LOCK_FILE);
        let io_error = |source| LockError::Io { path: path.clone(), source };
        // Never through a symlink: the pid written below would land in whatever it points at.
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(|e| match e.raw_os_error() == Some(Errno::ELOOP as i32) {
                true => io_error(io::Error::other("it is a symbolic link, which the lock is never taken through")),
                false => io_error(e),
            })?;
        if scafld_local::lock::held_by_an_earlier_release(&file) {
            return Err(LockError::Held { pid: holder(&path), path });
        }
        let lock = match ProcessLock::exclusive(file) {
            Ok(lock) => lock,
            Err(Errno::EWOULDBLOCK) => return Err(LockError::Held { pid: holder(&path), path }),
            Err(errno) => return Err(io_error(io::Error::from(errno))),
        };
        lock.file()
            .set_len(0)
            .and_then(|()| {
                let socket = socket.map(|s| format!("{}\n", s.display())).unwrap_or_default();
                lock.file().write_all(format!("{}\n{socket}", std::process::id()).as_bytes())
            })
            .map_err(io_error)?;
        Ok(StateLock { _lock: lock })
    }
}

/// Whether a process holds sled's lock on the database in `db_dir` (sled `flock`s the file `db`
/// in it for as long as the database is open).
pub fn database_in_use(db_dir: &Path) -> Result<(), LockError> {
    let path = db_dir.join("db");
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(LockError::Io { path, source }),
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_released_on_drop) => Ok(()),
        Err((_, Errno::EWOULDBLOCK)) => Err(LockError::Held { path, pid: None }),
        Err((_, errno)) => Err(LockError::Io { path, source: io::Error::from(errno) }),
    }
}

/// [`database_in_use`], waiting up to `within` for it to be let go. Under the state lock no
/// daemon of this release has the database open, yet sled's `flock` belongs to the open file:
/// a daemon killed while it was starting a command leaves it held by that child until its
/// `exec` closes it, a moment.
pub fn database_free_within(db_dir: &Path, within: std::time::Duration) -> Result<(), LockError> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match database_in_use(db_dir) {
            Err(LockError::Held { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => return other,
        }
    }
}

/// The pid the holder of the lock file at `path` wrote there.
fn holder(path: &Path) -> Option<u32> {
    scafld_local::capped::read_text(path, "lock file", 64 << 10).ok()?.lines().next()?.trim().parse().ok()
}

/// ` (scafldd)`: the command of `pid`, when it can be read.
fn command_of(pid: u32) -> String {
    scafld_local::capped::read_text(Path::new(&format!("/proc/{pid}/comm")), "command name", 64)
        .map(|name| format!(" ({})", name.trim()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_named_as_such_not_as_a_broken_lock_file() {
        let io = |kind| LockError::Io { path: "scafldd.lock".into(), source: io::Error::from(kind) };
        assert!(io(io::ErrorKind::StorageFull).advice().contains("is full"));
        assert!(io(io::ErrorKind::InvalidData).advice().contains("remove or repair"));
    }

    /// Another process holding the lock (as a daemon does: its pid written in it) refuses a
    /// second taker, named; once it ends, the lock is free.
    #[test]
    fn a_second_taker_is_refused_with_the_holders_pid() {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let mut holder = std::process::Command::new("python3")
            .args(["-c", "import fcntl,os,sys; f=open(sys.argv[1],'w'); fcntl.lockf(f, fcntl.LOCK_EX); f.write(str(os.getpid())+'\\n'); f.flush(); print(flush=True); sys.stdin.read()"])
            .arg(dir.path().join(LOCK_FILE))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        io::BufReader::new(holder.stdout.take().unwrap()).read_line(&mut String::new()).unwrap();
        match StateLock::acquire(dir.path(), None) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(holder.id())),
            other => panic!("{:?}", other.err()),
        }
        drop(holder.stdin.take());
        holder.wait().unwrap();
        StateLock::acquire(dir.path(), None).unwrap();
        database_in_use(dir.path()).unwrap();
    }
}
