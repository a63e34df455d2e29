//! Getting a listening socket: systemd activation, or binding the resolved path safely
//! (private directory, owner-only socket, one daemon per socket, stale files replaced).

use std::fs::{self, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::{Path, PathBuf};

use scafld_local::lock::ProcessLock;
use scafld_local::paths::with_socket_address;

/// First file descriptor passed by systemd socket activation.
const SD_LISTEN_FDS_START: RawFd = 3;

/// How long a daemon found at a socket file has to answer before it is taken to be running
/// (one busy past it still counts; see [`answers`]).
const PROBE_ANSWER: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("another scafld daemon is already running at {}", .0.display())]
    AlreadyRunning(PathBuf),
    #[error("{} exists and is not a socket; refusing to replace it", .0.display())]
    NotASocket(PathBuf),
    #[error("cannot prepare socket directory {}: {source}", path.display())]
    Directory { path: PathBuf, source: io::Error },
    #[error("cannot listen on {}: {source}", path.display())]
    Bind { path: PathBuf, source: io::Error },
    #[error("refusing the socket directory: {0}")]
    UnsafeDirectory(String),
    #[error("systemd passed LISTEN_FDS={0}; scafldd expects exactly one socket")]
    Activation(String),
}

/// A socket the daemon listens on. A bound socket removes its file on drop, provided the file
/// is still the one it created (a successor daemon may have replaced it).
pub struct Listener {
    pub listener: StdUnixListener,
    pub path: PathBuf,
    pub activated: bool,
    identity: Option<(u64, u64)>,
    _lock: Option<ProcessLock>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(identity) = self.identity
            && fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == identity)
        {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The socket handed over by systemd, if this process was socket-activated. The activation
/// variables are only read (changing the environment of a running process is not safe), the
/// descriptor is checked to be a listening Unix stream socket, and it is marked close-on-exec
/// so no acceptance command or reviewer inherits it.
pub fn from_systemd(path: &Path) -> Result<Option<Listener>, SocketError> {
    use nix::fcntl::{F_GETFD, F_SETFD, FdFlag, fcntl};
    use nix::sys::socket::{SockType, UnixAddr, getsockname, getsockopt, sockopt};
    let pid_matches = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let Some(count) = std::env::var("LISTEN_FDS").ok().filter(|_| pid_matches) else {
        return Ok(None);
    };
    if count != "1" {
        return Err(SocketError::Activation(count));
    }
    // SAFETY: systemd passes fd 3 open and owned by this process; nothing else has taken it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(SD_LISTEN_FDS_START) };
    let is_unix_stream = getsockopt(&fd, sockopt::SockType).is_ok_and(|t| t == SockType::Stream)
        && getsockname::<UnixAddr>(SD_LISTEN_FDS_START).is_ok()
        && getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false);
    if !is_unix_stream {
        return Err(SocketError::Activation("1, but fd 3 is not a listening Unix stream socket".into()));
    }
    let flags = fcntl(fd, F_GETFD).map(FdFlag::from_bits_truncate).unwrap_or(FdFlag::empty());
    fcntl(fd, F_SETFD(flags | FdFlag::FD_CLOEXEC))
        .map_err(|e| SocketError::Activation(format!("1, but fd 3 cannot be made close-on-exec: {e}")))?;
    // SAFETY: checked above: fd 3 is an open listening Unix socket this process owns.
    let listener = unsafe { StdUnixListener::from_raw_fd(SD_LISTEN_FDS_START) };
    let path = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf());
    Ok(Some(Listener { listener, path, activated: true, identity: None, _lock: None }))
}

/// Bind `path`: create its directory (0700) if needed, take the daemon lock beside it, replace
/// a stale socket file, and make the socket 0600.
pub fn bind(path: &Path) -> Result<Listener, SocketError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir_error = |source| SocketError::Directory { path: dir.to_path_buf(), source };
    if !dir.exists() {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(dir_error)?;
        // Independent of the umask: the directory is the first line of defence.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(dir_error)?;
    }
    if let Some(why) = scafld_local::paths::unsafe_dir(dir) {
        return Err(SocketError::UnsafeDirectory(why));
    }
    let lock_path = scafld_local::paths::socket_lock_file(path);
    let lock_file = OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(dir_error)?;
    if scafld_local::lock::held_by_an_earlier_release(&lock_file) {
        return Err(SocketError::AlreadyRunning(path.to_path_buf()));
    }
    // This process's alone: a child forked to run a command never holds it (see `lock`).
    let lock = match ProcessLock::exclusive(lock_file) {
        Ok(lock) => lock,
        Err(nix::errno::Errno::EWOULDBLOCK) => return Err(SocketError::AlreadyRunning(path.to_path_buf())),
        Err(errno) => return Err(dir_error(io::Error::from(errno))),
    };
    match fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => return Err(SocketError::NotASocket(path.to_path_buf())),
        Ok(_) => {
            // A daemon without our lock (socket-activated, or of an older release) answers there.
            if answers(path) {
                return Err(SocketError::AlreadyRunning(path.to_path_buf()));
            }
            // Nobody answers and we hold the lock: the file is left over from a dead daemon.
            fs::remove_file(path).map_err(|source| SocketError::Bind { path: path.to_path_buf(), source })?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(SocketError::Bind { path: path.to_path_buf(), source }),
    }
    let bind_error = |source| SocketError::Bind { path: path.to_path_buf(), source };
    let listener = with_socket_address(path, |address| StdUnixListener::bind(address)).map_err(bind_error)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
    let meta = fs::symlink_metadata(path).map_err(bind_error)?;
    Ok(Listener {
        listener,
        path: path.to_path_buf(),
        activated: false,
        identity: Some((meta.dev(), meta.ino())),
        _lock: Some(lock),
    })
}

/// Whether a daemon's accept loop answers at `path`. A connection alone proves nothing: the
/// listener of a daemon killed while it started a command lives on in that child until its
/// `exec` closes it, queueing connections nobody accepts (reset when it closes). An answer, or
/// no word either way within [`PROBE_ANSWER`] (a daemon too busy to answer is still running),
/// counts as running.
fn answers(path: &Path) -> bool {
    use scafld_protocol::methods::{DaemonStatus, Method};
    let Ok(mut stream) = scafld_local::probe(path) else { return false };
    let request = format!("{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"{}\",\"params\":{{}}}}\n", DaemonStatus::NAME);
    if stream.set_read_timeout(Some(PROBE_ANSWER)).is_err() || stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    match stream.read(&mut [0u8; 1]) {
        Ok(read) => read > 0,
        Err(e) => matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
    }
}

/// How often a bound daemon checks that its socket file is still there.
pub const SOCKET_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Resolve once the socket file at `path` is no longer the one that was there when this was
/// called (removed, its folder with it, or replaced): a daemon nobody can reach any more, yet
/// holding its state directory, would turn every command away until killed by hand. Never
/// resolves when there was no file to begin with.
pub async fn until_removed(path: PathBuf) -> PathBuf {
    let identity = |path: &Path| fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()));
    let Some(ours) = identity(&path) else { return std::future::pending().await };
    loop {
        tokio::time::sleep(SOCKET_CHECK_EVERY).await;
        if identity(&path) != Some(ours) {
            return path;
        }
    }
}
